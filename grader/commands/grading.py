"""The grading verbs: ``grade`` (a class, locally or on Slurm), ``check`` (one notebook, as a student's own
grading), ``run`` (one notebook in the sandbox), and a regrade of chosen students with the class's seed.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from grader import GRADER_VERSION
from grader.commands.options import TERM_FILE, _assignments, _forwarded
from grader.flow.schedule import JUDGES_PER_GPU
from grader.lms import term
from grader.lms.roster import RosterError
from grader.lms.term import Term, TermError
from grader.report.student_view import still_a_stub, stub_verdict, without_hidden_material
from grader.report.terminal import _line, _Progress, _report, not_graded_summary
from grader.score.results import GRADER_ERROR, MISSING


class NoGpu(RuntimeError):
    """``--device gpu`` where no CUDA GPU is visible: a setup error (exit status 2), not a traceback."""


def _settings(args: argparse.Namespace):
    from grader.flow.settings import Settings, resolve_device

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
                    sandbox=args.sandbox, seed=args.seed, hide=tuple(getattr(args, "hide", None) or ()),
                    shared_references=getattr(args, "references_from", None))


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


def cmd_references(args: argparse.Namespace) -> int:
    """Grade the reference solutions of the notebooks named, alone, into OUT (on a GPU; a CPU grades none)."""
    import tempfile

    from grader.flow.reference import reference_ready
    from grader.intake.layout import find_course_notebook
    from grader.pipeline import grade

    notebooks = [find_course_notebook(*key.partition("/")[::2]) for key in args.notebook]
    unknown = [key for key, nb in zip(args.notebook, notebooks, strict=True) if nb is None]
    if unknown:
        print(f"error: --notebook {', '.join(unknown)}: not a course notebook (ASSIGNMENT/NOTEBOOK, such as "
              "week1/day4_first_triton_kernel)", file=sys.stderr)
        return 2
    out, settings = Path(args.out), _settings(args)
    if settings.device != "gpu":
        print(f"{settings.device_name}: reference solutions are graded on a GPU only; nothing to do")
        return 0
    with tempfile.TemporaryDirectory() as no_students:
        grade(Path(no_students), out, settings, references=[(nb.assignment, nb.name) for nb in notebooks])
    missing = [nb.key for nb in notebooks if not reference_ready(out, nb, settings)]
    for key in missing:
        print(f"the reference solution of {key} could not be graded (see {out / 'reference' / key})", file=sys.stderr)
    print(f"{len(notebooks) - len(missing)} of {len(notebooks)} reference solutions graded on {settings.device_name}")
    return 1 if missing else 0


def cmd_run(args: argparse.Namespace) -> int:
    from grader.run.execute import Job, execute
    from grader.wall import scratch_folders

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args)
    scratch = scratch_folders.make_scratch()
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
    from grader.score.stored import load_results

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
