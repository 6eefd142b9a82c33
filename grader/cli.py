"""``python -m grader``: release, run, grade, export, feedback, check and demo."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from grader import GRADER_VERSION, release
from grader.results import NotebookResult

DEFAULT_OUT = Path("build/grades")


def _progress(done: int, total: int, result: NotebookResult) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    seconds = sum(result.timings.get(phase, 0.0) for phase in ("notebook", "build", "judge"))
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {result.student}/{result.assignment}/"
          f"{result.notebook}: {result.status} ({seconds:.0f} s)", file=sys.stderr, flush=True)


def summary_table(all_results: list[NotebookResult]) -> str:
    from grader.export import items_of

    lines = [f"{'student':<20}{'notebook':<28}{'status':<13}{'score':>13}{'pending':>9}"]
    for r in all_results:
        items = items_of(r)
        score = sum(i.score or 0.0 for i in items)
        total = sum(i.max_score for i in items)
        pending = sum(i.max_score for i in items if i.score is None)
        lines.append(f"{r.student:<20}{r.assignment + '/' + r.notebook:<28}{r.status:<13}"
                     f"{score:>6g} / {total:<4g}{pending:>9g}")
    return "\n".join(lines)


def _settings(args: argparse.Namespace):
    from grader.pipeline import Settings, resolve_device

    device, name = resolve_device(args.device)
    shapes = json.loads(args.bench_shapes) if args.bench_shapes else None
    return Settings(device=device, device_name=name, jobs=args.jobs, force=args.force, bench_shapes=shapes,
                    cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                    judge_timeout=args.judge_timeout, memory_bytes=int(args.memory_gb * 2**30),
                    sandbox=args.sandbox, seed=args.seed)


def _report(all_results: list[NotebookResult], out: Path) -> None:
    from grader.export import export
    from grader.feedback import write_pages

    grades, students = export(all_results, out)
    index = write_pages(all_results, out)
    print(summary_table(all_results))
    print(f"\ngradebook: {out / 'gradebook.db'}\nitems: {grades}\nstudents: {students}\nfeedback: {index}")


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
    from grader import demo
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
    settings = _settings(args)
    print(f"grader {GRADER_VERSION} on {settings.device_name}; results in {out}", flush=True)
    all_results = grade(submissions, out, settings, progress=_progress)
    for note in settings.notes:
        print(f"note: {note}")
    _report(all_results, out)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Grade one notebook exactly as the TA would, as a student called "you"."""
    from grader.layout import course_notebooks
    from grader.pipeline import grade

    path = Path(args.notebook)
    matches = [nb for nb in course_notebooks() if nb.name == path.stem]
    if not path.is_file() or not matches:
        print(f"{path} is not one of the course's notebooks (expected e.g. week1/day7_fast_matmul.ipynb)",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    class_dir = out / "submission" / "you" / matches[0].assignment
    shutil.rmtree(out / "submission", ignore_errors=True)
    class_dir.mkdir(parents=True)
    shutil.copy(path, class_dir / f"{matches[0].name}.ipynb")
    args.force = True
    results_ = grade(out / "submission", out, _settings(args), progress=_progress)
    for result in results_:
        print(f"\n{result.assignment}/{result.notebook}: {result.status} {result.message}")
        for item in result.items:
            score = "pending" if item.score is None else f"{item.score:g}/{item.max_score:g}"
            print(f"  {item.item:<40}{score:>10}  {item.status}")
            if item.message and item.status != "passed":
                print("    " + item.message.replace("\n", "\n    "))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from grader import sandbox
    from grader.execute import Job, execute

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args)
    scratch = sandbox.make_scratch()
    shutil.copy(args.notebook, scratch / "submission.ipynb")
    outcome = execute(Job(notebook=str(scratch / "submission.ipynb"), workdir=str(scratch), device=settings.device,
                          cell_timeout=settings.cell_timeout, notebook_timeout=settings.notebook_timeout,
                          memory_bytes=settings.memory_bytes, sandbox=settings.sandbox, log=str(out / "run.log"),
                          hide=[str(out)]))
    if (scratch / "executed.ipynb").exists():
        shutil.copy(scratch / "executed.ipynb", out / "executed.ipynb")
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"status": outcome.status, "message": outcome.message, "timings": outcome.timings}, indent=1))
    print(f"executed notebook: {out / 'executed.ipynb'}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from grader.export import export
    from grader.pipeline import load_results

    for path in export(load_results(Path(args.out)), Path(args.out)):
        print(f"wrote {path}")
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    from grader.feedback import write_pages
    from grader.pipeline import load_results

    print(f"wrote {write_pages(load_results(Path(args.out)), Path(args.out))}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from grader import demo

    for path in demo.build(Path(args.destination)):
        print(f"wrote {path}")
    return 0


def _execution_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (a GPU if visible), gpu or cpu")
    parser.add_argument("--jobs", type=int, default=None,
                        help="parallel notebooks (default: one per GPU, 2 on a CPU; more than one per GPU makes "
                             "timings share the GPU)")
    parser.add_argument("--bench-shapes", default=None, help='JSON list of shapes, e.g. "[[2048,2048,2048]]"')
    parser.add_argument("--cell-timeout", type=float, default=600.0, help="seconds one cell may run")
    parser.add_argument("--notebook-timeout", type=float, default=1800.0, help="seconds one notebook may run")
    parser.add_argument("--judge-timeout", type=float, default=900.0,
                        help="seconds the judge may spend on one notebook (replay, checks and timing)")
    parser.add_argument("--memory-gb", type=float, default=8.0, help="host memory one notebook run may use")
    parser.add_argument("--seed", type=int, default=None,
                        help="the grading run's secret seed (default: drawn afresh; stored in every result)")
    parser.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                        help="run student code WITHOUT the bubblewrap sandbox (only for trusted notebooks; "
                             "every report says so)")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    p = commands.add_parser("release", help="generate the student notebooks from solutions/")
    p.add_argument("--check", action="store_true", help="only report student notebooks that differ")
    p.set_defaults(run=cmd_release)

    p = commands.add_parser("grade", help="grade a class: gradebook, CSVs and feedback pages in --out")
    p.add_argument("submissions", nargs="?", help="<dir>/<student>/<assignment>/<notebook>.ipynb (default: demo class)")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--force", action="store_true", help="grade again notebooks already graded")
    _execution_options(p)
    p.set_defaults(run=cmd_grade)

    p = commands.add_parser("check", help="grade your own notebook the way the TA will")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/check")
    _execution_options(p)
    p.set_defaults(run=cmd_check)

    p = commands.add_parser("run", help="execute one notebook with papermill as the grader does")
    p.add_argument("notebook")
    p.add_argument("--out", default="build/run")
    _execution_options(p)
    p.set_defaults(run=cmd_run, force=False)

    p = commands.add_parser("export", help="write grades.csv and students.csv from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.set_defaults(run=cmd_export)

    p = commands.add_parser("feedback", help="write the feedback pages from the results in --out")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.set_defaults(run=cmd_feedback)

    p = commands.add_parser("demo", help="build the demo class's submissions")
    p.add_argument("destination", nargs="?", default="build/demo_submissions")
    p.set_defaults(run=cmd_demo)
    return root


def main(argv: list[str] | None = None) -> int:
    from grader.gradebook import GradebookMismatch
    from grader.pipeline import SandboxUnavailable

    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (GradebookMismatch, SandboxUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
