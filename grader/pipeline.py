"""Grade a class: sanitize, run in the sandbox, build, judge, score and record, resumably.

Per notebook: sanitize (here) -> the notebook runs in the sandbox with the grader's recording cell
appended (``grader.run.execute``) -> on a GPU its kernels are built from source in a fresh sandbox; on
a CPU its plans are replayed on secret inputs through Triton's interpreter in a fresh sandbox
(``grader.replay.replay_cpu``), and kernels of an exercise that bans a call are built for a nominal GPU ->
the judge (``grader.judge.verdict``: on a GPU its own process, under ``grader.judge.watchdog``) runs the master
test cells on the exported answers, then replays the plans on secret inputs (GPU) or checks the
replayed outputs (CPU) -> score (here) -> gradebook and
``results/<student id>/<assignment>/<notebook>.json`` (atomic). Only this process writes OUT: it holds OUT's lock
(``grader.flow.out_lock``) throughout, and a stop signal (``grader.flow.stopping``) ends it with every process it
started
killed and no result half-written.
Every student folder yields a result for every notebook of the batch's assignments, graded or not
(``grader.intake.layout.find_submissions``); the student id is the folder name's safe form.
A judge or build that fails is the grader's fault: ``grader_error``, never a student's zero.
A result whose submission, grader version and device are unchanged is kept on a re-run (unless it
is a grader_error); ``force`` grades everything again. On a GPU, the reference solution of each
notebook is run and built first through the same path; the judge times its plan beside every
student's. A reference that cannot be graded stops its notebook: its students get grader_error.
"""

from __future__ import annotations

import contextlib
import resource
import secrets
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, as_completed, wait
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import nbformat
from nbgrader.api import Gradebook

from grader import GRADER_VERSION
from grader.flow import out_lock, stopping
from grader.flow.reference import _with_reference, reference_result, reference_task
from grader.flow.schedule import Limits, Scheduler
from grader.flow.settings import Settings, _check_sandbox, limits_for
from grader.flow.task import Graded, Staged, Task
from grader.gpu import gpu_idle, gpu_work
from grader.gpu.gpu_gate import GpuGate, Pausable
from grader.gpu.gpu_watch import RunWatch
from grader.intake.layout import (
    SOLUTIONS,
    CourseNotebook,
    Submission,
    course_notebooks,
    find_course_notebook,
    find_submissions,
)
from grader.intake.sanitize import sanitize
from grader.judge.stage import judge_stage
from grader.kernel_build.stage import build_stage
from grader.run.execute import Outcome
from grader.run.failure import describe_failed_run
from grader.run.recording import notebook_plan
from grader.run.stage import run_stage
from grader.score import gradebook, results
from grader.score.assemble import _result, ungraded_result
from grader.score.results import NotebookResult
from grader.score.stored import _up_to_date, load_results, record_result, run_dir
from grader.wall import cpu_pool, scratch_folders


class GradingStages:
    """This module's stages, as ``grader.flow.schedule`` runs them."""

    def run(self, task: Task, gpu: str | None, pause: Pausable | None) -> Staged:
        return run_stage(task, pause)

    def build(self, task: Task, staged: Staged) -> Staged:
        return build_stage(task, staged)

    def judge(self, task: Task, staged: Staged, gpu: str | None, gate: GpuGate | None) -> Graded:
        return judge_stage(task, staged, gpu, gate)

    def fault(self, stage: str, error: BaseException) -> Graded:
        return Graded(Outcome(results.GRADER_ERROR, f"a grader fault, not the notebook's: its {stage} stage failed: "
                                                    f"{type(error).__name__}: {error}"[:600]), None)


@dataclass
class _Tally:
    """How far a batch got: what a stop signal's line says."""

    complete: int = 0
    total: int | None = None

    def __str__(self) -> str:
        if self.total is None:
            return "before grading began"
        return f"{self.complete} of {self.total} notebooks complete"


def grade(submissions_root: Path, out: Path, settings: Settings,
          log: Callable[[str], None] = print, progress: Callable[[int, int, NotebookResult], None] | None = None,
          references: Collection[tuple[str, str]] = ()) -> list[NotebookResult]:
    """Grade every submission under ``submissions_root`` into ``out``; returns all results. Holds OUT's lock
    (``out_lock.OutBusy`` where another grader does); a stop signal or Ctrl-C raises ``stopping.Stopped`` saying
    how many notebooks are complete, once every process the batch started is gone. ``references``: (assignment,
    notebook) pairs whose reference solutions are graded on a GPU even when no submission needs them (the Slurm
    executor's references job grades them once for all its tasks)."""
    # Absolute: the judge and the sandboxed stages run in scratch folders of their own and are handed paths in OUT.
    submissions_root, out = submissions_root.resolve(), out.resolve()
    tally = _Tally()
    with out_lock.held(out, log=log):
        try:
            return _grade(submissions_root, out, settings, log, progress, tally, references)
        except KeyboardInterrupt as interrupt:
            raise stopping.Stopped.of(interrupt, str(tally)) from interrupt


def _grade(submissions_root: Path, out: Path, settings: Settings, log: Callable[[str], None],
           progress: Callable[[int, int, NotebookResult], None] | None, tally: _Tally,
           also_referenced: Collection[tuple[str, str]]) -> list[NotebookResult]:
    _check_sandbox(settings, log)
    limits = limits_for(settings)
    if settings.cpus_per_run is None:
        # On a GPU, two each at least: a run is two busy processes (papermill and its kernel), and runs sit frozen
        # while a judge times, so runs whose CPU sets overlap are seldom busy at once.
        settings = replace(settings, cpus_per_run=cpu_pool.default_cpus_per_run(
            limits.runs + limits.builds, at_least=2 if settings.device == "gpu" else 1))
    for stale in scratch_folders.cleanup_stale():
        log(f"removed {stale}, left by a grader that was stopped")
    out.mkdir(parents=True, exist_ok=True)
    run_seed = settings.seed if settings.seed is not None else secrets.randbits(63)
    notebooks = course_notebooks()
    url = gradebook.db_url(out)
    gradebook.register(url, notebooks)
    submissions, problems = find_submissions(submissions_root, settings.assignments, settings.not_due)
    for problem in problems:
        log(f"note: {problem}")
    if not submissions:
        log(f"note: no student folders in {submissions_root}")
    todo = [s for s in submissions if not _up_to_date(out, s, settings)]
    kept = len(submissions) - len(todo)
    tally.complete, tally.total = kept, len(submissions)
    if kept:
        log(f"{kept} notebook(s) already graded by grader {GRADER_VERSION} on {settings.device_name}: kept "
            "(use --force to grade them again)")
    hide = [str(p) for p in (SOLUTIONS, submissions_root.resolve(), out.resolve(), *settings.hide)]
    needed = sorted({(s.assignment, s.notebook) for s in todo if s.path} | set(also_referenced))
    plans = {f"{a}/{n}": notebook_plan(find_course_notebook(a, n)) for a, n in needed}

    from grader.report import feedback  # nbconvert and matplotlib: for the grader's own process only

    done = 0
    plots_ahead = feedback.PlotsAhead(out)

    def finished(submission: Submission, result: NotebookResult, notebook: nbformat.NotebookNode | None,
                 book: Gradebook | None = None) -> None:
        nonlocal done
        with stopping.deferred():  # a result and its gradebook rows whole, or neither
            record_result(out, submission, result, notebook, book)
            done += 1
            tally.complete += 1
        plots_ahead.submit(result)
        if progress:
            progress(done, len(todo), result)

    began = time.monotonic()
    gate = (GpuGate(gpu_idle.IdleProbe(), busy_processes=gpu_work.busy_since)
            if settings.device == "gpu" and settings.schedule == "pipeline" else None)
    tasks: dict[str, tuple[Submission, Task, list[str]]] = {}
    with plots_ahead, Scheduler(limits, GradingStages(), gate, one_at_a_time=settings.schedule == "serial",
                                kill=stopping.kill_children) as scheduler, \
            _watched(gate, limits, settings):
        references: dict[str, Future] = {}
        for assignment, name in needed if settings.device == "gpu" else []:
            notebook = find_course_notebook(assignment, name)
            references[notebook.key] = _reference_future(scheduler, out, notebook, settings, run_seed, hide, log)
        futures: dict[Future, str] = {}
        unread: list[tuple[Submission, NotebookResult]] = []
        for submission in todo:  # each notebook's run starts as soon as it is sanitized
            key = f"{submission.assignment}/{submission.notebook}"
            if submission.path is None:
                unread.append((submission, ungraded_result(
                    submission, submission.status or results.MISSING, submission.found or "no notebook was submitted",
                    settings)))
                continue
            cleaned = sanitize(submission.path, submission.assignment, submission.notebook, submission.student, url)
            if cleaned.notebook is None:
                unread.append((submission, ungraded_result(submission, cleaned.status, cleaned.message,
                                                                  settings)))
                continue
            run = run_dir(out, submission)
            run.mkdir(parents=True, exist_ok=True)
            nbformat.write(cleaned.notebook, str(run / "sanitized.ipynb"))
            task = Task(submission.student_id, cleaned.notebook, plans[key], run, settings, run_seed, hide,
                        judge_cache=out / "judge-cache")
            tasks[submission.key] = (submission, task, cleaned.notes)
            futures[scheduler.submit(task, references.get(key), _with_reference, submission.key)] = submission.key
        with Gradebook(url) as book:  # recorded while the graded ones run, through one open gradebook
            for submission, result in unread:
                finished(submission, result, None, book)
        for future in as_completed(futures):
            submission, task, notes = tasks[futures[future]]
            finished(submission, _graded_result(submission, future.result(), task, settings, run_seed, notes),
                     task.notebook)
        wait(references.values())  # those no submission waited for
    _write_schedule(out, settings, limits, began, len(futures), timeline(scheduler, gate, began))
    return load_results(out)


def _reference_future(scheduler: Scheduler, out: Path, notebook: CourseNotebook, settings: Settings, run_seed: int,
                      hide: list[str], log: Callable[[str], None]) -> Future:
    """The future of what ``notebook``'s students are judged against (its reference solution, graded first)."""
    ready: Future = Future()
    task = reference_task(out, notebook, settings, run_seed, hide)
    if task is None:
        ready.set_result(reference_result(out, notebook, settings, run_seed, None, log))
        return ready
    log(f"recording the reference solution {notebook.key} on {settings.device_name}")

    def judged(graded: Future) -> None:
        if scheduler.stopping:  # its run was killed: no verdict on the reference, and nothing to wait for
            ready.set_result({"error": "the grader stopped"})
            return
        try:
            ready.set_result(reference_result(out, notebook, settings, run_seed, graded.result(), log))
        except Exception as error:  # the students then get grader_error, never wait forever
            ready.set_result({"error": f"the reference solution of {notebook.key} failed: {error}"})

    scheduler.submit(task, label=f"reference {notebook.key}").add_done_callback(judged)
    return ready


def _graded_result(submission: Submission, graded: Graded, task: Task, settings: Settings, run_seed: int,
                   notes: list[str]) -> NotebookResult:
    try:
        result = _result(submission, graded, task.plan, task.notebook, settings, run_seed, notes)
    except Exception as error:  # a result the scorer cannot make must not stop the batch
        result = ungraded_result(
            submission, results.GRADER_ERROR, f"scoring failed: {type(error).__name__}: {error}", settings)
    try:
        result.stopped_at, result.failure_tail = describe_failed_run(task.run, graded.run_status
                                                                     or graded.outcome.status)
    except Exception as error:  # describing a failure must never stop the batch either
        result.failure_tail = f"(the executed notebook could not be read: {type(error).__name__})"
    if result.stopped_at and result.status != results.OK:
        result.message = f"{result.message}; it stopped in {result.stopped_at}".lstrip("; ")
    return result


def _watched(gate: GpuGate | None, limits: Limits, settings: Settings) -> contextlib.AbstractContextManager:
    """The run watch on the gate's GPUs (grader.gpu.gpu_watch), or nothing where there is no gate."""
    if gate is None:
        return contextlib.nullcontext()
    runs_per_gpu = -(-limits.runs // max(1, len(limits.gpus)))
    memory = {gpu: settings.gpu_memory_bytes or ((total // (runs_per_gpu + 2)) if total else None)
              for gpu in limits.gpus for total in [gpu_work.total_memory(gpu)]}
    return RunWatch(gate, limits.gpus, gpu_work.busy_since, gpu_work.memory_by_process, memory,
                    busy_seconds=settings.gpu_busy_seconds)


def timeline(scheduler: Scheduler, gate: GpuGate | None, began: float) -> dict[str, list[dict[str, Any]]]:
    """When each notebook's stages ran and when each GPU was held alone, in seconds from ``began``."""
    def at(moment: float) -> float:
        return round(moment - began, 3)

    return {"stages": [{**asdict(e), "start": at(e.start), "end": at(e.end)} for e in scheduler.events],
            "holds": [{"gpu": gpu, "start": at(start), "end": at(end)} for gpu, start, end in
                      (gate.holds if gate is not None else [])]}


def _write_schedule(out: Path, settings: Settings, limits: Limits, began: float, graded: int,
                    ran: dict[str, list[dict[str, Any]]]) -> None:
    """OUT/schedule.json: how this batch was graded, how long it took and its timeline (``bench/`` reads it)."""
    used = resource.getrusage(resource.RUSAGE_SELF)  # this process's threads, not its children
    results.write_json_atomic(out / "schedule.json", {
        "schedule": settings.schedule, "device": settings.device_name, "wall_seconds": time.monotonic() - began,
        "grader_cpu_seconds": used.ru_utime + used.ru_stime,
        "notebooks": graded, "limits": limits.describe(), "cpus_per_run": settings.cpus_per_run, "timeline": ran})


