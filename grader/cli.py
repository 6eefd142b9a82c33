"""``python -m grader``: release, run, grade, export, feedback, check and demo.

Exit codes: 0 when every notebook found was graded normally; 1 when ``grade`` or ``check`` found a
notebook it could not grade normally (a timeout, a dead kernel, a corrupt or ambiguous file...: the
summary names each; ``grade --allow-ungraded`` exits 0 anyway, unless the grader itself failed on one:
a ``grader_error`` is never a student's zero); 2 for a usage or setup error, or another grader using --out;
128 + the signal's number when stopped by SIGTERM (143), SIGINT (130) or SIGHUP (129), having kept what it finished.
A missing notebook (nothing submitted) is listed in the summary but does not change the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader import GRADER_VERSION
from grader.authoring import release
from grader.flow import out_lock, stopping
from grader.flow.schedule import JUDGES_PER_GPU
from grader.gpu.gpu_watch import BUSY_SECONDS as GPU_BUSY_SECONDS
from grader.lms import term
from grader.lms.roster import RosterError
from grader.lms.term import Term, TermError
from grader.report.student_view import still_a_stub, stub_verdict, without_hidden_material
from grader.score.results import GRADER_ERROR, MISSING, NotebookResult

DEFAULT_OUT = Path("build/grades")
TERM_FILE = "term.toml"


class _Progress:
    """Grading progress through tqdm: a bar of the notebooks done, the time taken and an estimate of the time
    left (the average time per notebook so far, every parallel worker included), and one line per finished
    notebook above it, with the same estimate (so a log file, where the bar is off, has it too).

    Also the pipeline's ``log``: its messages go through tqdm, so they never break the bar.
    """

    def __init__(self, stream=None) -> None:  # noqa: ANN001  (a text stream; stderr by default)
        from tqdm import tqdm

        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.bar = tqdm(total=None, unit="notebook", desc="grading", file=self.stream, smoothing=0.0,
                        dynamic_ncols=True, disable=not _is_terminal(self.stream),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} notebooks "
                                   "[{elapsed} elapsed, {remaining} left]{postfix}")

    def log(self, message: str) -> None:
        self.bar.write(str(message), file=sys.stdout)

    def eta(self, done: int, total: int) -> str:
        """The time left, from the average so far (tqdm's estimate with smoothing off), as tqdm writes it."""
        from tqdm import tqdm

        if done <= 0:
            return "?"
        elapsed = time.monotonic() - self.started
        return tqdm.format_interval(elapsed / done * max(total - done, 0))

    def __call__(self, done: int, total: int, result: NotebookResult) -> None:
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)
        seconds = sum(result.timings.get(phase, 0.0) for phase in ("notebook", "build", "replay", "judge"))
        self.bar.write(f"{done}/{total} {result.student}/{result.assignment}/{result.notebook}: {result.status} "
                       f"({seconds:.0f} s; about {self.eta(done, total)} left)", file=self.stream)
        self.stream.flush()

    def close(self) -> None:
        self.bar.close()


def _is_terminal(stream) -> bool:  # noqa: ANN001
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def summary_table(all_results: list[NotebookResult]) -> str:
    """One line per notebook: earned points of the graded maximum, the points still pending, and the late penalty
    with the final score (when the term takes points off)."""
    from grader.report.tables import items_of

    ordered = sorted(all_results, key=lambda r: (r.student.casefold(), r.student_id, r.assignment, r.notebook))
    student_width = max([len("student"), *(len(r.student) for r in ordered)]) + 2
    notebook_width = max([len("notebook"), *(len(r.assignment) + 1 + len(r.notebook) for r in ordered)]) + 2
    lines = [f"{'student':<{student_width}}{'notebook':<{notebook_width}}{'status':<13}{'earned / graded':>16}"
             f"{'pending':>9}  late"]
    for r in ordered:
        items = items_of(r)
        earned = sum(i.score or 0.0 for i in items)
        graded = sum(i.max_score for i in items if i.score is not None)
        pending = sum(i.max_score for i in items if i.score is None)
        late = f"-{r.late_penalty:g} -> {r.final_score:g}" if r.late_penalty else (
            "late" if r.late_status == term.LATE else "no time" if r.late_status == term.NO_TIME else "")
        lines.append(f"{r.student:<{student_width}}{r.assignment + '/' + r.notebook:<{notebook_width}}{r.status:<13}"
                     f"{earned:>8g} / {graded:<5g}{pending:>9g}  {late}".rstrip())
    return "\n".join(lines)


def _line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def not_graded_summary(all_results: list[NotebookResult]) -> list[str]:
    """The closing lines of ``grade``: every notebook not graded normally, and every missing one, by name."""
    failed = [r for r in all_results if not r.graded_normally]
    missing = [r for r in all_results if r.status == MISSING]
    lines = []
    if failed:
        counts: dict[str, int] = {}
        for r in failed:
            counts[r.status] = counts.get(r.status, 0) + 1
        kinds = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        lines.append(f"NOT GRADED NORMALLY: {len(failed)} of {len(all_results)} notebooks ({kinds}); their points "
                     "are 0 or incomplete. Each one (also in students.csv, column messages):")
        lines += [f"  {r.student}/{r.assignment}/{r.notebook}: {r.status}: {_line(r.summary)}" for r in failed]
    faults = [r for r in failed if r.status == GRADER_ERROR]
    if faults:
        lines.append(f"GRADER ERRORS: the grader failed on {len(faults)} notebook(s), not the students: do not "
                     "publish their points; fix the cause and grade again (they are graded again on the next run)")
    if missing:
        lines.append(f"MISSING: {len(missing)} of {len(all_results)} notebooks were not submitted (scored 0):")
        lines += [f"  {r.student}/{r.assignment}/{r.notebook}: {_line(r.summary)}" for r in missing]
    if not lines:
        lines.append(f"all {len(all_results)} notebooks were graded normally")
    return lines


class NoGpu(RuntimeError):
    """``--device gpu`` where no CUDA GPU is visible: a setup error (exit status 2), not a traceback."""


def _settings(args: argparse.Namespace):
    from grader.pipeline import Settings, resolve_device

    if args.device == "gpu":
        import torch

        if not torch.cuda.is_available():
            raise NoGpu("--device gpu was asked for, but no CUDA GPU is visible on this machine")
    device, name = resolve_device(args.device)
    shapes = json.loads(args.bench_shapes) if args.bench_shapes else None
    gpus = tuple(g.strip() for g in args.gpus.split(",") if g.strip()) if getattr(args, "gpus", None) else None
    return Settings(device=device, device_name=name, runs=args.runs, builds=getattr(args, "builds", None), gpus=gpus,
                    judges_per_gpu=getattr(args, "judges_per_gpu", JUDGES_PER_GPU),
                    schedule=getattr(args, "schedule", "pipeline"), force=args.force, bench_shapes=shapes,
                    cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                    judge_timeout=args.judge_timeout, replay_floor=args.replay_timeout,
                    memory_bytes=int(args.memory_gb * 2**30),
                    gpu_memory_bytes=int(args.gpu_memory_gb * 2**30) if args.gpu_memory_gb else None,
                    gpu_busy_seconds=args.gpu_busy_seconds,
                    scratch_bytes=int(args.scratch_gb * 2**30), cpus_per_run=args.cpus_per_run,
                    sandbox=args.sandbox, seed=args.seed, hide=tuple(getattr(args, "hide", None) or ()))


def _term(args: argparse.Namespace) -> Term:
    """The term file named by --term, else the one --out was published with, else the course's term.toml when
    there is one, else no due dates (``grader.report.publish.term_file``)."""
    from grader.intake.layout import REPO, course_notebooks
    from grader.report import publish

    path, line = publish.term_file(Path(args.out), args.term, REPO / TERM_FILE)
    args.term_path = path
    if path is None:
        print(line)
        return Term()
    loaded = term.load(path, {nb.assignment for nb in course_notebooks()})
    print(f"{line} (due: {', '.join(f'{a} {term.shown_time(d)}' for a, d in loaded.due.items()) or 'none'}; "
          f"late policy: {loaded.policy})")
    return loaded


def _report(out: Path, rules: Term, args: argparse.Namespace, all_results: list[NotebookResult] | None = None,
            submissions: Path | None = None) -> list[NotebookResult]:
    """Every output from the results, the term and the overrides, together (``grader.report.publish.render``); the term
    file and the submissions folder are remembered in OUT."""
    from grader.report import publish

    rendered = publish.render(out, rules, all_results, submissions)
    publish.remember(out, getattr(args, "term_path", None), submissions)
    print(summary_table(rendered.results))
    for warning in rendered.warnings:
        print(f"warning: {warning}")
    print("\n" + "\n".join(rendered.lines))
    return rendered.results


def cmd_release(args: argparse.Namespace) -> int:
    if args.check:
        problems = release.drifted()
        for problem in problems:
            print(problem)
        return 1 if problems else 0
    for path in release.release():
        print(f"wrote {path}")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from grader.authoring import demo
    from grader.intake.layout import safe_id
    from grader.pipeline import grade

    out = Path(args.out)
    submissions = Path(args.submissions) if args.submissions else None
    if submissions is None:
        submissions = out / "demo_submissions"
        shutil.rmtree(submissions, ignore_errors=True)
        demo.build(submissions)
        print(f"grading the demo class ({submissions})")
    if not submissions.is_dir():
        print(f"no such folder: {submissions}", file=sys.stderr)
        return 2
    try:
        rules, asked = _term(args), _assignments(args.assignment)
        folders = {p.name for p in submissions.iterdir() if p.is_dir()}
        rules.check_students(folders | {safe_id(name) for name in folders})
        if args.student or args.notebook:
            args.seed = _regrade(out, args.student, args.notebook, args.seed)
    except (TermError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    not_due = tuple(a for a in rules.due if not rules.is_due(a, now) and a not in asked)
    if not_due:
        print(f"not due yet: {', '.join(not_due)} (absent notebooks of these are not counted missing)")
    if args.executor == "slurm" and args.seed is None:
        args.seed = secrets.randbits(63)  # one seed for every task: the grades a local run gives
    settings = replace(_settings(args), assignments=asked, not_due=not_due)
    print(f"grader {GRADER_VERSION} on {settings.device_name}; results in {out}", flush=True)
    if args.executor == "slurm":
        from grader import slurm

        options = slurm.SlurmOptions(args.slurm_partition, args.slurm_account, args.slurm_time, args.slurm_gres,
                                     args.slurm_cpus, args.notebooks_per_task)
        try:
            all_results = slurm.grade(submissions, out, _forwarded(args), options, settings)
        except slurm.SlurmError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    else:
        progress = _Progress()
        try:
            all_results = grade(submissions, out, settings, log=progress.log, progress=progress)
        finally:
            progress.close()
    for note in settings.notes:
        print(f"note: {note}")
    if not all_results:
        print(f"NOTHING WAS GRADED: no student folders in {submissions} (expected "
              "<dir>/<student>/<assignment>/<notebook>.ipynb)", file=sys.stderr)
        return 1
    try:
        all_results = _report(out, rules, args, all_results, submissions)
    except (TermError, RosterError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    closing = not_graded_summary(all_results)
    print("\n" + "\n".join(closing), flush=True)
    if any(not r.graded_normally for r in all_results):
        if args.allow_ungraded and not any(r.status == GRADER_ERROR for r in all_results):
            print("(exit status 0: --allow-ungraded)")
            return 0
        print("\n".join(line for line in closing if not line.startswith("  ") and "MISSING" not in line),
              file=sys.stderr)
        return 1
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Grade one notebook exactly as the TA would, as a student called "you"."""
    from grader.intake.layout import course_notebooks
    from grader.pipeline import grade

    path = Path(args.notebook)
    notebooks = course_notebooks()
    matches = ([nb for nb in notebooks if nb.name == path.stem]
               or [nb for nb in notebooks if path.stem.lower().startswith(nb.name.lower())]
               or [nb for nb in notebooks if nb.assignment == path.parent.name])
    if not path.is_file() or len(matches) != 1:
        names = ", ".join(f"{nb.assignment}/{nb.name}.ipynb" for nb in notebooks)
        print(f"{path}: " + ("no such file" if not path.is_file() else "not one of the course's notebooks")
              + f" (the course's: {names})", file=sys.stderr)
        return 2
    if matches[0].name != path.stem:
        print(f"note: checking {path} as {matches[0].assignment}/{matches[0].name}.ipynb (its name differs)")
    out = Path(args.out)
    class_dir = out / "submission" / "you" / matches[0].assignment
    shutil.rmtree(out / "submission", ignore_errors=True)
    class_dir.mkdir(parents=True)
    shutil.copy(path, class_dir / f"{matches[0].name}.ipynb")
    args.force = True
    progress = _Progress()
    try:
        results_ = grade(out / "submission", out, _settings(args), log=progress.log, progress=progress)
    finally:
        progress.close()
    # The grader expects every notebook of the week; only the one checked here was submitted.
    results_ = [r for r in results_ if (r.assignment, r.notebook) == (matches[0].assignment, matches[0].name)]
    for result in results_:
        without_hidden_material(result)
    from grader.report.feedback import write_pages

    index = write_pages(results_, out)
    for result in results_:
        print(f"\n{result.assignment}/{result.notebook}: {result.status} {result.message}")
        if result.failure_tail:
            print("  the end of its output:\n    " + result.failure_tail.replace("\n", "\n    "))
        for item in result.items:
            score = "pending" if item.score is None else f"{item.score:g}/{item.max_score:g}"
            verdict = stub_verdict(item) if still_a_stub(item) else item.status
            verdict += " (provisional)" if item.provisional else ""
            print(f"  {item.item:<40}{score:>10}  {verdict}")
            if item.message and item.status != "passed" and not still_a_stub(item):
                print("    " + item.message.replace("\n", "\n    "))
        earned = sum(i.score or 0.0 for i in result.items)
        decided = sum(i.max_score for i in result.items if i.score is not None)
        pending = sum(i.max_score for i in result.items if i.score is None)
        print(f"\ntotal: {earned:g} of {decided:g} points decided here; {pending:g} more pending a GPU run"
              + ("; kernel verdicts on a CPU are provisional" if any(i.provisional for i in result.items) else ""))
        print(f"feedback page, as the TA's but without hidden test messages: {index.parent / 'feedback'}")
    failed = [r for r in results_ if not r.graded_normally or r.status == MISSING]
    if failed:
        print(f"\nNOT GRADED NORMALLY: {failed[0].status}: {_line(failed[0].summary, 1000)}", file=sys.stderr)
        return 1
    return 0


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


def cmd_run(args: argparse.Namespace) -> int:
    from grader.run.execute import Job, execute
    from grader.wall import sandbox

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args)
    scratch = sandbox.make_scratch()
    shutil.copy(args.notebook, scratch / "submission.ipynb")
    outcome = execute(Job(notebook=str(scratch / "submission.ipynb"), workdir=str(scratch), device=settings.device,
                          cell_timeout=settings.cell_timeout, notebook_timeout=settings.notebook_timeout,
                          memory_bytes=settings.memory_bytes, scratch_bytes=settings.scratch_bytes,
                          cpus=settings.cpus_per_run, sandbox=settings.sandbox, log=str(out / "run.log"),
                          hide=[str(out)]))
    if (scratch / "executed.ipynb").exists():
        shutil.copy(scratch / "executed.ipynb", out / "executed.ipynb")
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"status": outcome.status, "message": outcome.message, "timings": outcome.timings}, indent=1))
    print(f"executed notebook: {out / 'executed.ipynb'}")
    return 0


def _regrade(out: Path, students: list[str], notebooks: list[str], seed: int | None) -> int:
    """Forget the stored results of the students and notebooks asked for (both: those students' notebooks), so the
    grade that follows grades them again; returns the class's seed (the one its results hold) unless --seed."""
    from grader.pipeline import load_results

    stored = load_results(out)
    names = {r.student for r in stored} | {r.student_id for r in stored}
    keys = {f"{r.assignment}/{r.notebook}" for r in stored}
    for name in students:
        if name not in names:
            raise ValueError(f"--student {name!r}: no such student in {out}{term.closest(name, names)}")
    for key in notebooks:
        if key not in keys:
            raise ValueError(f"--notebook {key!r}: no such notebook in {out}{term.closest(key, keys)}")
    seeds = {r.run_seed for r in stored if r.run_seed is not None}
    if seed is None and len(seeds) > 1:
        raise ValueError(f"{out}'s results were graded with {len(seeds)} seeds: give one with --seed")
    chosen = [r for r in stored if (not students or {r.student, r.student_id} & set(students))
              and (not notebooks or f"{r.assignment}/{r.notebook}" in notebooks)]
    for result in chosen:
        (out / "results" / result.student_id / result.assignment / f"{result.notebook}.json").unlink(missing_ok=True)
    print(f"regrading {len(chosen)} notebook(s); the others are kept")
    return seed if seed is not None else next(iter(seeds), None)


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
    from grader.pipeline import load_results
    from grader.score import overrides

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


def cmd_collect(args: argparse.Namespace) -> int:
    from grader.intake.layout import course_notebooks
    from grader.lms import collect, roster

    course = sorted({nb.assignment for nb in course_notebooks()})
    if args.assignment not in course:
        print(f"error: no assignment is called {args.assignment!r} (there are {', '.join(course)})", file=sys.stderr)
        return 2
    try:
        people = roster.load(Path(args.roster))
        times = collect.read_times(Path(args.times)) if args.times else None
        done = collect.collect(Path(args.download), people, args.assignment, Path(args.out), times)
    except (roster.RosterError, collect.CollectError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(done.lines(args.assignment, Path(args.out), times is not None)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from grader.authoring import demo

    for path in demo.build(Path(args.destination)):
        print(f"wrote {path}")
    return 0


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _execution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (a GPU if visible), gpu or cpu (default: %(default)s)")
    parser.add_argument("--runs", "--jobs", dest="runs", type=_at_least_one, default=None,
                        help="sandboxed notebook runs at once, over all GPUs; runs share their GPU and are paused "
                             "while a judge times on it (default: 6 per GPU, at most half the CPUs; 2 on a "
                             "CPU; make: RUNS)")
    parser.add_argument("--bench-shapes", default=None,
                        help='JSON list of benchmark shapes, e.g. "[[2048,2048,2048]]", used by the specs whose shapes '
                             'have that many sizes (default: each spec\'s own)')
    parser.add_argument("--cell-timeout", type=float, default=600.0,
                        help="seconds one cell may run, not counting time the run spends stopped while a judge "
                             "holds its GPU (default: %(default)g; make: CELL_TIMEOUT)")
    parser.add_argument("--notebook-timeout", type=float, default=1800.0,
                        help="seconds one notebook may run, all cells, counted the same way (default: %(default)g; "
                             "make: NOTEBOOK_TIMEOUT)")
    parser.add_argument("--judge-timeout", type=float, default=900.0,
                        help="seconds the judge may spend on one notebook: replay, checks and timing "
                             "(default: %(default)g; make: JUDGE_TIMEOUT)")
    parser.add_argument("--replay-timeout", type=float, default=20.0,
                        help="seconds one replay of a student's kernel may take before the judge stops it and fails "
                             "only that kernel's items; longer where 50 x the reference solution's time is "
                             "(default: %(default)g; make: REPLAY_TIMEOUT)")
    parser.add_argument("--memory-gb", type=float, default=8.0,
                        help="host memory one notebook run may use, GiB (default: %(default)g; make: MEMORY_GB)")
    parser.add_argument("--gpu-memory-gb", type=float, default=None,
                        help="GPU memory one notebook run may hold, GiB; past it the run is stopped (status "
                             "gpu_memory). Default: the GPU's memory over its runs plus two (make: GPU_MEMORY_GB)")
    parser.add_argument("--gpu-busy-seconds", type=float, default=GPU_BUSY_SECONDS,
                        help="a run whose kernels keep its GPU busy this long straight gets a drain, which stops a "
                             "kernel that never ends (status gpu_hang) (default: %(default)g; make: GPU_BUSY_SECONDS)")
    parser.add_argument("--scratch-gb", type=float, default=2.0,
                        help="files one notebook run may write besides what it prints (compiler caches such as "
                             "torch.compile's, temporary files), GiB; past it the status is scratch_limit. Printed "
                             "output (cell outputs, the run's log, exported answers) has its own 64 MiB limit, "
                             "status output_limit (default: %(default)g; make: SCRATCH_GB)")
    parser.add_argument("--cpus-per-run", type=_at_least_one, default=None,
                        help="CPUs each sandboxed run gets, a set of its own while there are enough; runs also get a "
                             "lower scheduling priority than the grader and judge (default: the grader's CPUs "
                             "divided by the runs and builds at once; make: CPUS_PER_RUN)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the grading run's secret seed (default: drawn afresh; stored in every result)")
    parser.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                        help="run student code WITHOUT the bubblewrap sandbox (only for trusted notebooks; "
                             "every report says so; default: sandboxed; make: NO_SANDBOX=1)")


def _gpu_list(text: str) -> str:
    if not all(part.strip().isdigit() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"a comma-separated list of CUDA indices such as 0,1 is needed, not {text!r}")
    return text


def _forwarded(args: argparse.Namespace) -> list[str]:
    """The execution and schedule options of this command line that differ from their defaults, as a Slurm task's
    ``grade`` takes them."""
    probe = argparse.ArgumentParser(add_help=False)
    _selection_options(probe)
    _execution_options(probe)
    _schedule_options(probe)
    forwarded: list[str] = []
    for action in probe._actions:
        value = getattr(args, action.dest)
        if value != action.default:
            forwarded += [action.option_strings[0]] if action.nargs == 0 else [action.option_strings[0], str(value)]
    return forwarded


def _term_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--term", default=None, metavar="FILE",
                        help=f"due dates, late policy and extensions (default: the one OUT was published with, kept as "
                             f"OUT/{TERM_FILE}; else {TERM_FILE} in the course folder, when there is one; "
                             "term.example.toml shows the form; make: TERM_FILE)")


def _selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--assignment", default=None, metavar="NAMES",
                        help="grade only these assignments (comma-separated, such as week1), for every student; "
                             "other assignments' grades in --out are kept (make: WEEK or ASSIGNMENT)")


def _assignments(text: str | None) -> tuple[str, ...]:
    """--assignment's names, each a course assignment (ValueError naming the known ones otherwise)."""
    from grader.intake.layout import course_notebooks

    names = tuple(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))
    known = sorted({nb.assignment for nb in course_notebooks()})
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"--assignment {', '.join(unknown)}: no such assignment (there are {', '.join(known)})")
    return names


def _slurm_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="local: grade on this machine; slurm: one Slurm array task per chunk of students "
                             "(--notebooks-per-task), each a grade of its own on its node, gathered here into one "
                             "gradebook; a task that does not finish is submitted once more, then its notebooks are "
                             "grader_error (default: %(default)s; make: EXECUTOR)")
    parser.add_argument("--slurm-partition", default=None, help="sbatch --partition (make: SLURM_PARTITION)")
    parser.add_argument("--slurm-account", default=None, help="sbatch --account (make: SLURM_ACCOUNT)")
    parser.add_argument("--slurm-time", default="04:00:00",
                        help="each task's time limit, sbatch --time (default: %(default)s; make: SLURM_TIME)")
    parser.add_argument("--slurm-gres", default=None,
                        help='sbatch --gres, e.g. "gpu:1" (default: none; make: SLURM_GRES)')
    parser.add_argument("--slurm-cpus", type=_at_least_one, default=None, help="sbatch --cpus-per-task")
    parser.add_argument("--notebooks-per-task", type=_at_least_one, default=40,
                        help="about this many notebooks per Slurm task (default: %(default)s)")


def _schedule_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedule", choices=("pipeline", "serial"), default="pipeline",
                        help="pipeline: runs, builds and judges of many notebooks at once, each judge's replays and "
                             "timings on a GPU held alone (the other notebooks on it paused); serial: one notebook "
                             "at a time, stage after stage, the baseline the pipeline is measured against "
                             "(default: %(default)s; make: SCHEDULE)")
    parser.add_argument("--gpus", type=_gpu_list, default=None,
                        help="the GPUs to grade on, as CUDA indices, e.g. 0,1: one judge holds each GPU alone at a "
                             "time, runs share them (default: every visible GPU; make: GPUS)")
    parser.add_argument("--builds", type=_at_least_one, default=None,
                        help="kernel builds (CPU only, sandboxed) and CPU replays at once (default: a quarter of the "
                             "CPUs on a GPU machine, as many as --runs on a CPU; make: BUILDS)")
    parser.add_argument("--judges-per-gpu", type=_at_least_one, default=JUDGES_PER_GPU,
                        help="judge processes per GPU at once: one holds the GPU alone while the others run the "
                             "answer checks and load their kernels (default: %(default)s)")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    p = commands.add_parser("release", help="generate the student notebooks from solutions/")
    p.add_argument("--check", action="store_true", help="only report student notebooks that differ")
    p.set_defaults(run=cmd_release)

    p = commands.add_parser(
        "grade", help="grade a class: gradebook, CSVs and feedback pages in --out",
        description="Grade every student folder under SUBMISSIONS into --out. Every folder and expected notebook "
                    "becomes a row, graded or not. Exit status: 0 when every notebook found was graded normally, "
                    "1 when one was not (the closing summary names each; --allow-ungraded exits 0 unless the grader "
                    "itself failed on one), 2 for a "
                    "usage or setup error. Missing notebooks are listed but do not change the exit status. One "
                    "grader per --out: while one grades it, grade, check, export and feedback on it refuse, naming "
                    "it (exit status 2; --wait waits). SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops the grading: every "
                    "process it started is killed, what it finished is kept, and it exits 128 + the signal's "
                    "number; the same command then grades only what is left.")
    p.add_argument("submissions", nargs="?",
                   help="<dir>/<student>/<assignment>/<notebook>.ipynb (default: the demo class, built in --out)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where results, CSVs and pages go (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="grade again notebooks already graded (default: keep them)")
    p.add_argument("--student", action="append", default=[], metavar="NAME",
                   help="grade this student's notebooks again, with the class's seed (repeatable)")
    p.add_argument("--notebook", action="append", default=[], metavar="ASSIGNMENT/NOTEBOOK",
                   help="grade this notebook again (with --student: that student's), with the class's seed "
                        "(repeatable; e.g. week1/day4_first_triton_kernel)")
    p.add_argument("--wait", action="store_true",
                   help="where another grader is grading --out, wait for it to end (default: refuse, exit status 2)")
    p.add_argument("--allow-ungraded", action="store_true",
                   help="exit 0 even when some notebooks could not be graded normally (the summary still lists "
                        "them; `make grade` passes it for the demo class, whose `crashes` student fails by design), "
                        "unless the grader itself failed on one (grader_error)")
    p.add_argument("--hide", action="append", default=[], metavar="PATH",
                   help="one more path no sandboxed run may see (repeatable; the Slurm executor gives each task the "
                        "whole class and the head's OUT)")
    _term_option(p)
    _selection_options(p)
    _execution_options(p)
    _schedule_options(p)
    _slurm_options(p)
    p.set_defaults(run=cmd_grade)

    p = commands.add_parser(
        "check", help="grade your own notebook the way the TA will",
        description="Grade one notebook exactly as the TA would. Exit status: 0 when it ran to its end (whatever "
                    "its score), 1 when it could not be graded normally, 2 for a usage error.")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/check", help="where the check's results go (default: %(default)s)")
    _execution_options(p)
    p.set_defaults(run=cmd_check)

    p = commands.add_parser(
        "pushed", help="grade the course notebooks among a list of paths of a student's checkout",
        description="Grade the course notebooks among the listed paths (weekN/<name>.ipynb, relative to "
                    "REPOSITORY; regular files only, never through a link) with this checkout's grader and master "
                    "copies, as STUDENT. Writes results and feedback pages (hidden tests' messages left out) in "
                    "--out and a Markdown score table to --summary. Pushes to students' repositories are graded by "
                    "serve-pushes instead (docs/AUTOGRADING.md). Exit status: 0 when every listed notebook was "
                    "graded normally (or none was listed), 1 when one was not, 2 for a usage or setup error "
                    "(--device gpu without a GPU: one line in --summary too).")
    p.add_argument("repository", help="the student's checkout")
    p.add_argument("--changed", required=True, help="a file of paths, one a line ('-': standard input)")
    p.add_argument("--student", default="student", help="the name graded (default: %(default)s)")
    p.add_argument("--out", default="build/pushed", help="(default: %(default)s)")
    p.add_argument("--summary", default=None,
                   help="append the Markdown score table to this file (default: print it)")
    _execution_options(p)
    p.set_defaults(run=cmd_pushed, force=True)

    p = commands.add_parser(
        "serve-pushes", help="the push autograder's grading service (run as the course account; "
                             "docs/AUTOGRADING.md)",
        description="Grade the requests autograding jobs leave in SPOOL/inbox, one at a time, and answer each in "
                    "SPOOL/outbox/<request>/ (summary.md, feedback pages, status). Run it as the course account "
                    "from the course checkout with `python -P -m grader serve-pushes`. Every notebook whose "
                    "content differs from the version last graded on its branch is graded, as the student the "
                    "--roster names for the repository. Exit status: 0 (with --once: after answering what is "
                    "queued), 2 for a setup error; without a GPU under --device gpu, every queued request is "
                    "answered with that line and the status is 2.")
    p.add_argument("spool", help="the spool folder (owned by this account, mode 2710, group: the runner's)")
    p.add_argument("--roster", required=True, help="CSV with the header repository,student: each student "
                                                   "repository's full name (owner/name) and the student's name")
    p.add_argument("--state", default=None,
                   help="where the last graded commit of each branch is kept (default: SPOOL/state)")
    p.add_argument("--once", action="store_true", help="answer the requests queued now, then exit")
    p.add_argument("--poll", type=float, default=5.0, help="seconds between looks at the inbox (default: %(default)g)")
    p.add_argument("--keep-days", type=float, default=7.0,
                   help="days answers and grading folders are kept (default: %(default)g)")
    _execution_options(p)
    p.set_defaults(run=cmd_serve_pushes, force=True, device="gpu")

    p = commands.add_parser("run", help="execute one notebook with papermill as the grader does")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/run", help="(default: %(default)s)")
    _execution_options(p)
    p.set_defaults(run=cmd_run, force=False)

    p = commands.add_parser("export", help="the same as publish --out: every output from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="(default: %(default)s)")
    _term_option(p)
    p.set_defaults(run=cmd_export)

    p = commands.add_parser("feedback", help="the same as publish --out: every output from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="(default: %(default)s)")
    _term_option(p)
    p.set_defaults(run=cmd_feedback)

    p = commands.add_parser("publish", help="write every output again from the stored results, the term and the "
                                            "TA's overrides (CSVs, gradebook, pages, Canvas file, zips); no regrading")
    p.add_argument("out", help="the graded class's output folder")
    p.add_argument("--submissions", default=None,
                   help="where submission times are read again (default: the folder OUT was graded from)")
    _term_option(p)
    p.set_defaults(run=cmd_publish)

    p = commands.add_parser("override", help="set a TA's score for one graded item (nbgrader's manual_score), "
                                             "then publish")
    p.add_argument("out", help="the graded class's output folder")
    p.add_argument("student", help="the student's folder name")
    p.add_argument("notebook", help="ASSIGNMENT/NOTEBOOK, e.g. week1/day1_host_baseline")
    p.add_argument("item", help="the graded cell's id (grades.csv's item column)")
    p.add_argument("score", type=float)
    p.add_argument("--why", required=True, help="the reason, shown to the student with the score")
    p.set_defaults(run=cmd_override)

    p = commands.add_parser(
        "collect", help="turn a Canvas \"Download submissions\" zip into <out>/<student>/<assignment>/",
        description="Unpack Canvas's flat submissions zip (<name>[_late]_<user id>_<attachment id>_<file>) into "
                    "OUT/<student folder>/ASSIGNMENT/, each student found by their Canvas user id on the roster "
                    "(their folder: the roster's folder column, else SIS Login ID). Canvas's zip has no submission "
                    "times: pass --times (the submissions API's JSON, or a CSV of user_id,submitted_at) to record "
                    "them where the term reads them (OUT/submitted_at.json). A timestamp.txt a student uploaded is "
                    "set aside, never used. Exit status: 0, or 2 for an unusable zip, roster or times file.")
    p.add_argument("download", help="the zip Canvas's \"Download submissions\" gave")
    p.add_argument("--roster", required=True, help="Canvas's gradebook export (CSV): Student, ID, SIS User ID, "
                                                   "SIS Login ID, Section; an optional folder column")
    p.add_argument("--assignment", required=True, help="the course assignment the download is (week1, ...)")
    p.add_argument("--out", required=True, help="the submissions folder to write (the class layout)")
    p.add_argument("--times", default=None, metavar="FILE",
                   help="submission times: JSON as Canvas's submissions API returns it, or a CSV with the columns "
                        "user_id and submitted_at (ISO 8601 with an offset)")
    p.set_defaults(run=cmd_collect)

    p = commands.add_parser("demo", help="build the demo class's submissions")
    p.add_argument("destination", nargs="?", default="build/demo_submissions", help="(default: %(default)s)")
    p.set_defaults(run=cmd_demo)
    return root


def print_stacks(signum: int, frame: Any) -> None:
    """``kill -USR1 <pid>``: every thread's stack to stderr, where a grading run that stopped moving waits. In
    Python, with the GIL held, not through faulthandler, whose dump reads running threads' frames without it: on a
    GPU host it crashed a grader it was asked about (SIGSEGV, bench/RESULTS.md, session 11)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, top in sys._current_frames().items():
        stack = "".join(traceback.format_stack(top))
        print(f"Thread {names.get(ident, ident)} (most recent call last):\n{stack}", file=sys.__stderr__, flush=True)


# The commands that write --out: each holds its lock throughout and stops cleanly on a stop signal.
WRITES_OUT = ("grade", "check", "pushed", "export", "feedback", "publish", "override")


@contextlib.contextmanager
def _one_grader(args: argparse.Namespace) -> Iterator[None]:
    if args.command not in WRITES_OUT:
        yield
        return
    with stopping.on_signals(), out_lock.held(Path(args.out), wait=getattr(args, "wait", False)):
        yield


def main(argv: list[str] | None = None) -> int:
    from grader.pipeline import SandboxUnavailable, UnknownGpu
    from grader.score.gradebook import GradebookMismatch

    args = parser().parse_args(argv)
    with contextlib.suppress(ValueError):  # not the main thread (a test calling main): no handler
        signal.signal(signal.SIGUSR1, print_stacks)
    try:
        with _one_grader(args):
            return args.run(args)
    except out_lock.OutBusy as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except stopping.Stopped as stopped:
        print(stopped.line(), file=sys.stderr, flush=True)
        return stopped.exit_status
    except (GradebookMismatch, SandboxUnavailable, UnknownGpu, NoGpu) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
