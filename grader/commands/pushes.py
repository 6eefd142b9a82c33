"""The push-grading verbs: ``pushed`` (a student's pushed notebooks, graded as the autograding job does) and
``serve-pushes`` (the grading service).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grader.commands.grading import NoGpu, _settings
from grader.report.terminal import _Progress, summary_table
from grader.score.results import NotebookResult


def cmd_pushed(args: argparse.Namespace) -> int:
    """Grade the course notebooks among a list of paths of a checkout; see grader.push.pushed."""
    from grader.push import pushed

    listing = sys.stdin.read() if args.changed == "-" else Path(args.changed).read_text(encoding="utf-8")
    try:
        settings = _settings(args)
    except NoGpu as error:
        _write_summary(args.summary, f"## Autograder\n\nNot graded: {error}.\n")
        print(f"error: {error}", file=sys.stderr)
        return 2
    chosen = pushed.select(Path(args.repository), listing.splitlines())
    out = Path(args.out)
    results_: list[NotebookResult] = []
    if chosen.notebooks:
        progress = _Progress()
        try:
            results_ = pushed.grade_notebooks(chosen.notebooks, args.student, out, settings, log=progress.log,
                                              progress=progress)
        finally:
            progress.close()
        print(summary_table(results_))
        print(f"feedback: {out / 'index.html'}")
    _write_summary(args.summary, pushed.summary_markdown(results_, settings.device_name, skipped=chosen.ignored))
    failed = pushed.not_graded_normally(results_)
    if failed:
        print(f"NOT GRADED NORMALLY: {len(failed)} of {len(results_)}: "
              + "; ".join(f"{r.assignment}/{r.notebook}: {r.status}" for r in failed), file=sys.stderr)
        return 1
    return 0


def _write_summary(path: str | None, markdown: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(markdown)
    else:
        print(markdown)


def cmd_serve_pushes(args: argparse.Namespace) -> int:
    """The push autograder's grading service; see grader.push.push_service."""
    from grader.push import push_roster, push_service

    if not args.sandbox:
        print("error: the push service grades untrusted notebooks: it always sandboxes them", file=sys.stderr)
        return 2
    if not sys.flags.safe_path:
        print("note: run the service as `python -P -m grader serve-pushes`, so that nothing in a working "
              "directory can be imported")
    os.umask(0o027)  # what the service writes is its group's to read at most
    spool = Path(args.spool).absolute()
    unavailable = ""
    try:
        settings = _settings(args)
    except NoGpu as error:
        settings, unavailable = None, str(error)
    try:
        push_roster.load(Path(args.roster))
        service = push_service.Service(spool=spool, roster=Path(args.roster).absolute(),
                                       state=Path(args.state).absolute() if args.state else spool / "state",
                                       settings=settings, unavailable=unavailable, keep_days=args.keep_days,
                                       log=lambda line: print(line, flush=True))
        return push_service.serve(service, once=args.once, poll_seconds=args.poll)
    except (push_roster.RosterError, push_service.SpoolError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
