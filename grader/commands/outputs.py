"""The verbs that make outputs from stored results, without grading: ``export``, ``feedback``, ``publish``
and ``override`` (a TA's own score for one item).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.commands.grading import _term
from grader.lms.roster import RosterError
from grader.lms.term import TermError
from grader.report.terminal import _report


def _publish(args: argparse.Namespace) -> int:
    """The term applied to the stored results, and every output written together."""
    out = Path(args.out)
    if not (out / "results").is_dir():
        print(f"error: no graded results in {out}", file=sys.stderr)
        return 2
    try:
        rules = _term(args)
        _report(out, rules, args, submissions=Path(args.submissions) if getattr(args, "submissions", None) else None)
    except (TermError, RosterError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    return _publish(args)


def cmd_feedback(args: argparse.Namespace) -> int:
    return _publish(args)


def cmd_publish(args: argparse.Namespace) -> int:
    return _publish(args)


def cmd_override(args: argparse.Namespace) -> int:
    from grader.score import overrides
    from grader.score.stored import load_results

    out = Path(args.out)
    try:
        done = overrides.set_override(out, load_results(out), args.student, args.notebook, args.item, args.score,
                                      args.why)
    except overrides.OverrideError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    was = "pending" if done.auto_score is None else f"{done.auto_score:g}"
    print(f"{args.student} {args.notebook} {args.item}: {done.score:g} (automatic score {was}): {done.why}")
    print(f"stored in {out / 'gradebook.db'} (manual_score) and {out / overrides.RECORD}; writing every output again")
    args.term = None
    return _publish(args)
