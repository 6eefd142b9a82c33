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

import ast
import builtins
import contextlib
import hashlib
import json
import os
import re
import resource
import secrets
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import nbformat
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from course import spec as specs
from course.recorder.plan_format import NOMINAL_TARGET
from grader import GRADER_VERSION
from grader.authoring.release import master_version
from grader.build.compile_ttgir import compile_built
from grader.flow import out_lock, stopping
from grader.flow.schedule import JUDGES_PER_GPU, Limits, Scheduler
from grader.gpu import gpu_idle, gpu_nodes, gpu_work
from grader.gpu.gpu_gate import GpuGate, Pausable
from grader.gpu.gpu_watch import BUSY_SECONDS, RunWatch
from grader.intake.layout import (
    REPO,
    SOLUTIONS,
    CourseNotebook,
    Submission,
    course_notebooks,
    find_course_notebook,
    find_submissions,
)
from grader.intake.sanitize import for_the_sandbox, sanitize
from grader.judge import verdict as judge
from grader.judge import watchdog
from grader.lms import term
from grader.run.execute import _CUDA_FAILURES, Job, Outcome, build, execute, replay_cpu
from grader.score import gradebook, results, score
from grader.score.results import NotebookResult
from grader.wall import sandbox

JUDGE_NAMESPACE = {"course", "math", "np", "torch"}
RECORDING_CELL = "recording"
WALL_NOTEBOOK = "wall.ipynb"  # the sanitized notebook with its hidden tests cleared: all a sandbox is given of it
JUDGE_MODULE = "grader.judge.verdict"
REPLAY_START_SECONDS = 120.0  # a CPU replay's sandbox and imports, on a loaded machine
RUNS_PER_GPU = 6  # sandboxed runs sharing one GPU by default: paused while judges time, about half the time
COMPILE_SECONDS = 600.0  # the TTGIR compile stage's limit, as the build's (its failure only costs the judge time)


class SandboxUnavailable(RuntimeError):
    """Untrusted grading was asked for where the sandbox cannot run (and --no-sandbox was not given)."""


class UnknownGpu(ValueError):
    """--gpus named a GPU this process does not see."""


@dataclass
class Settings:
    device: str  # "gpu" or "cpu", resolved
    device_name: str
    runs: int | None = None  # sandboxed runs at once; None: from the machine's CPUs and GPUs
    builds: int | None = None  # builds at once; None: from the machine's CPUs
    gpus: tuple[str, ...] | None = None  # the GPUs to grade on (CUDA indices); None: all visible
    judges_per_gpu: int = JUDGES_PER_GPU
    schedule: str = "pipeline"  # or "serial": one notebook at a time, stage after stage
    force: bool = False
    bench_shapes: list[list[int]] | None = None  # the TA's override (trusted); else the specs' own
    cell_timeout: float = 600.0
    notebook_timeout: float = 1800.0
    judge_timeout: float = 900.0
    # The watchdog's limit on one replay of a student's kernel: this floor, or more where factor x the
    # reference solution's slowest benchmark replay (scaled to the shape's work) is longer.
    replay_floor: float = 20.0
    replay_factor: float = 50.0
    memory_bytes: int = 8 * 2**30
    # GPU memory a run may hold (grader.gpu.gpu_watch); None: the GPU's memory shared evenly by the runs on it, with two
    # shares kept for the judge and the reference
    gpu_memory_bytes: int | None = None
    gpu_busy_seconds: float = BUSY_SECONDS  # a run busy this long straight gets a drain (grader.gpu.gpu_watch)
    output_bytes: int = 64 * 2**20
    scratch_bytes: int = 2 * 2**30
    cpus_per_run: int | None = None  # None: the CPUs shared evenly among the parallel runs
    sandbox: bool = True
    seed: int | None = None  # the grading run's secret seed; drawn when not given
    # more paths no sandboxed run may see, besides the solutions, the class and OUT (a Slurm task: the whole class
    # and the head's OUT, which hold the other tasks' students)
    hide: tuple[str, ...] = ()
    assignments: tuple[str, ...] = ()  # grade only these (a TA's week); empty: those any student has a folder for
    not_due: tuple[str, ...] = ()  # not due yet (the term file): their absent notebooks are not missing
    notes: list[str] = field(default_factory=list)

    @property
    def sandbox_label(self) -> str:
        return "bubblewrap" if self.sandbox else "NONE: graded with --no-sandbox (student code was not isolated)"


def resolve_device(requested: str) -> tuple[str, str]:
    import torch

    if requested not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device must be auto, gpu or cpu, not {requested!r}")
    if requested == "gpu" and not torch.cuda.is_available():
        raise RuntimeError("--device gpu was asked for, but no CUDA GPU is visible")
    if requested != "cpu" and torch.cuda.is_available():
        return "gpu", torch.cuda.get_device_name(0)
    return "cpu", "CPU (Triton interpreter)"


def gpu_target() -> dict[str, Any]:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    return {"backend": "cuda", "arch": major * 10 + minor, "warp_size": 32}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result_path(out: Path, submission: Submission) -> Path:
    return out / "results" / submission.student_id / submission.assignment / f"{submission.notebook}.json"


def run_dir(out: Path, submission: Submission) -> Path:
    return out / "runs" / submission.student_id / submission.assignment / submission.notebook


def _up_to_date(out: Path, submission: Submission, settings: Settings) -> bool:
    path = result_path(out, submission)
    if settings.force or not path.exists() or submission.path is None:
        return False
    try:
        old = results.read_json(path)
    except (OSError, ValueError):
        return False
    return (old.get("status") != results.GRADER_ERROR  # a grader fault is tried again
            and old.get("grader_version") == GRADER_VERSION and old.get("device") == settings.device_name
            and old.get("submission_sha256") == sha256(submission.path)
            and old.get("submitted_file", submission.submitted_file) == submission.submitted_file
            and old.get("student") == submission.student)


def answer_names(tests: list[dict[str, str]]) -> list[str]:
    """Names the master test cells read but do not define: the answers the sandbox must export."""
    names: set[str] = set()
    for test in tests:
        tree = ast.parse(test["source"])
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        names |= loaded - stored
    return sorted(names - set(dir(builtins)) - JUDGE_NAMESPACE)


@dataclass(frozen=True)
class Plan:
    """What one notebook's grading records and judges: its master cells, tests and kernel calls."""

    notebook: CourseNotebook
    master: nbformat.NotebookNode
    tests: list[dict[str, str]]
    answers: list[str]


def notebook_plan(notebook: CourseNotebook) -> Plan:
    master = master_version(notebook)
    tests = score.test_cells(master, specs.for_notebook(notebook.key))
    return Plan(notebook, master, tests, answer_names(tests))


def kernel_calls(notebook: CourseNotebook, settings: Settings, run_seed: int, student: str,
                 bench_only: bool = False) -> list[dict[str, Any]]:
    """Each graded function's calls: the judged shapes (secret seeds) and, on a GPU, the benchmark shapes."""
    on_gpu = settings.device == "gpu"
    jobs = []
    for spec in specs.for_notebook(notebook.key):
        calls = []
        for which in ("visible", "hidden"):
            if bench_only:
                break
            for i, shape in enumerate(specs.judged_shapes(spec, which, on_gpu, run_seed)):
                key = f"{which}-{i}"
                calls.append({"key": key, "set": which, "shape": list(shape),
                              "seed": judge.derive_seed(run_seed, student, spec.id, key)})
        # Only a kernel with performance items is timed. The TA's override applies to the specs whose shapes
        # it fits (a notebook may grade a matmul and a copy); the others keep their own benchmark shapes.
        timed = on_gpu and spec.kind == "kernel" and bool(spec.thresholds)
        override = [s for s in settings.bench_shapes or [] if len(s) == len(spec.dims)]
        bench = [list(s) for s in (override or spec.bench_shapes.gpu)] if timed else []
        for i, shape in enumerate(bench):
            calls.append({"key": f"bench-{i}", "set": "bench", "shape": shape, "seed": 0})
        jobs.append({"spec": spec.id, "calls": calls, "bench_shapes": bench})
    return jobs


def _recording_request(jobs: list[dict[str, Any]], plan: Plan, device: str, scratch: Path) -> dict[str, Any]:
    """What the sandbox records. A kernel's inputs use public seeds: the judge's stay secret (it replays)."""
    recorded = []
    for job in jobs:
        # A host function's value is checked as returned, so it must see the judge's inputs.
        secret = specs.get(job["spec"]).kind == "kernel"
        calls = [{"key": c["key"], "shape": c["shape"], "seed": i if secret else c["seed"]}
                 for i, c in enumerate(job["calls"])]
        # On a GPU a warm-up call first (compiling and autotuning): a function that keeps its output between
        # calls then returns memory the recorded call did not allocate, which cannot be replayed. On a CPU the
        # interpreter neither compiles nor tunes, and a first call's plan is replayed like any other: no warm-up
        # (it would double the interpreter's time, which the replay spends again).
        recorded.append({"spec": job["spec"], "calls": calls, "warmup": device == "gpu"})
    return {"out": str(scratch / "export"), "device": "cuda" if device == "gpu" else "cpu",
            "answers": plan.answers, "kernels": recorded}


def with_recording_cell(nb: nbformat.NotebookNode, request_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(nbformat.writes(nb)))
    cell = nbformat.v4.new_code_cell(
        "# Added by the grader: records your graded functions' launch plans and your answers for the judge.\n"
        f"import course.recorder.export\ncourse.recorder.export.write(globals(), {str(request_path)!r})")
    cell.metadata["tags"] = [RECORDING_CELL]
    nb.cells.append(cell)
    return nb


@dataclass
class Task:
    """One notebook to run, build and judge (the reference solution or a submission)."""

    key: str  # the student id (or "reference")
    notebook: nbformat.NotebookNode  # sanitized
    plan: Plan
    run: Path  # the run's folder in OUT
    settings: Settings
    run_seed: int
    hide: list[str]
    reference: dict[str, str] | None = None
    bench_only: bool = False
    gpu: str | None = None
    judge_cache: Path | None = None


@dataclass
class Graded:
    outcome: Outcome
    verdict: dict[str, Any] | None
    run_status: str = ""  # the notebook run's own status, where a grader fault made the outcome grader_error


def _job(task: Task, scratch: Path, log: Path) -> Job:
    s = task.settings
    return Job(notebook=str(scratch / "submission.ipynb"), workdir=str(scratch), device=s.device, gpu=task.gpu,
               cell_timeout=s.cell_timeout, notebook_timeout=s.notebook_timeout, memory_bytes=s.memory_bytes,
               output_bytes=s.output_bytes, scratch_bytes=s.scratch_bytes, cpus=s.cpus_per_run, hide=task.hide,
               sandbox=s.sandbox, log=str(log))


def _keep(scratch: Path, run: Path) -> None:
    """Copy what the run produced out of its scratch directory (regular files only, links never followed)."""
    for name in ("executed.ipynb", "outcome.json", "export"):
        sandbox.copy_out(scratch / name, run / name)


def grader_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a grader subprocess started with -P from a scratch folder: it finds this grader as we did."""
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)}


def _judge(task: Task, judge_job: dict[str, Any], gpu: str, gate: GpuGate | None) -> dict[str, Any]:
    path = task.run / "judge.json"
    path.write_text(json.dumps(judge_job), encoding="utf-8")
    if task.settings.device != "gpu":
        try:
            return judge.judge(judge_job)
        except Exception as error:  # the judge's own fault: a grader_error, never a student's zero
            return {"error": f"the judge failed: {type(error).__name__}: {error}"[:500]}
    scratch = sandbox.make_scratch("gpu-course-judge-")
    # Only judges write this cache, and only from course-built TTGIR (keyed by its hash), so it is shared.
    cache = task.judge_cache or scratch / "triton-cache"
    env = grader_environment(dict(os.environ, TRITON_CACHE_DIR=str(cache),
                                  CUDA_VISIBLE_DEVICES=gpu_nodes.cuda_visible(gpu)))
    # setpriv --pdeathsig: the judge dies with the grader, even when the grader is killed outright.
    guard = [setpriv, "--pdeathsig", "KILL", "--"] if (setpriv := shutil.which("setpriv")) else []
    try:
        return watchdog.run([*guard, sys.executable, "-P", "-m", JUDGE_MODULE, str(path)], judge_job, env, scratch,
                            task.run / "judge.log", task.settings.judge_timeout, gate, gpu)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _replay_watchdog(task: Task) -> dict[str, Any]:
    """The judge's per-replay limits: the floor and factor, and each kernel's reference seconds per unit of work."""
    per_work: dict[str, float] = {}
    try:
        kernels = results.read_json(Path(task.reference["verdict"])).get("kernels") if task.reference else {}
    except (OSError, ValueError, KeyError):
        kernels = {}
    for spec_id, kernel in (kernels or {}).items():
        rows = (kernel.get("bench") or {}).get("rows") or []
        rates = [row["student_ms"] / 1000 / row["work"] for row in rows if row.get("student_ms") and row.get("work")]
        if rates:
            per_work[spec_id] = max(rates)
    return {"floor": task.settings.replay_floor, "factor": task.settings.replay_factor, "reference": per_work}


def _grader_fault(outcome: Outcome, problem: str) -> Outcome:
    """The outcome of a notebook the grader failed (not the student): grader_error, saying what the run did."""
    ran = "" if outcome.status == results.OK else f" (the notebook run itself ended {outcome.status}: " \
                                                  f"{outcome.message})"
    return Outcome(results.GRADER_ERROR, f"a grader fault, not the notebook's: {problem}{ran}", outcome.timings)


def _cpu_replays(jobs: list[dict[str, Any]], exported: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls a CPU grading replays: Triton kernels' (a host function's value is data, CUDA C waits for a GPU)
    whose plan has launches and no problem (the judge fails the others as recorded, with nothing to replay)."""
    replays = []
    kernels = exported.get("kernels") if isinstance(exported.get("kernels"), dict) else {}
    for job in jobs:
        spec = specs.get(job["spec"])
        if spec.kind != "kernel" or spec.language == "cuda":
            continue
        entry = kernels.get(spec.id)
        calls = entry.get("calls") if isinstance(entry, dict) and isinstance(entry.get("calls"), dict) else {}
        plans = {key: (call.get("plan") if isinstance(call, dict) else None) for key, call in calls.items()}
        kept = [c for c in job["calls"] if isinstance(plans.get(c["key"]), dict) and plans[c["key"]].get("launches")
                and not plans[c["key"]].get("problems")]
        if kept:
            replays.append({"spec": spec.id, "calls": kept})
    return replays


@dataclass
class Staged:
    """One notebook between its stages: what its run gave, and what the next stage needs."""

    outcome: Outcome
    jobs: list[dict[str, Any]]
    exported: dict[str, Any]
    replay_error: str | None = None
    failed: Graded | None = None  # set when a stage failed the grader: nothing left to judge


def run_stage(task: Task, pause: Pausable | None = None) -> Staged:
    """The notebook's run in the sandbox with the recording cell (on its GPU, shared); never raises for anything
    the notebook does. ``pause``: its handle at the GPU gate. A run whose GPU allocation failed while the gate
    stopped another run of its GPU for holding too much memory runs once more: the memory was not its to lose."""
    jobs = kernel_calls(task.plan.notebook, task.settings, task.run_seed, task.key, task.bench_only)
    began = time.monotonic()
    outcome, exported = _run_once(task, jobs, pause)
    if pause is not None and pause.gate is not None and _ran_out_of_gpu_memory(task.run / "executed.ipynb") \
            and any(gpu == pause.gpu and when >= began and status == results.GPU_MEMORY
                    for gpu, when, status in pause.gate.stops):
        first = outcome.timings.get("notebook", 0.0)
        outcome, exported = _run_once(task, jobs, pause)
        outcome.timings["notebook_before_a_neighbours_memory_stop"] = first
    return Staged(outcome, jobs, exported)


def _run_once(task: Task, jobs: list[dict[str, Any]], pause: Pausable | None) -> tuple[Outcome, dict[str, Any]]:
    task.run.mkdir(parents=True, exist_ok=True)
    for stale in ("executed.ipynb", "outcome.json", "verdict.json"):
        (task.run / stale).unlink(missing_ok=True)
    for stale in ("export", "built", "judge-parts", "replayed"):
        shutil.rmtree(task.run / stale, ignore_errors=True)
    scratch = sandbox.make_scratch()
    try:
        request = _recording_request(jobs, task.plan, task.settings.device, scratch)
        (scratch / "request.json").write_text(json.dumps(request), encoding="utf-8")
        seen = for_the_sandbox(task.notebook)
        nbformat.write(seen, str(task.run / WALL_NOTEBOOK))  # what the build and the CPU replay read, too
        nbformat.write(with_recording_cell(seen, scratch / "request.json"), str(scratch / "submission.ipynb"))
        outcome = execute(_job(task, scratch, task.run / "sandbox.log"), pause)
        _keep(scratch, task.run)
        exported = judge.read_export(task.run / "export")
        recording = exported.get("seconds")
        if isinstance(recording, float):  # reported from inside the sandbox: shown, never used to score
            outcome.timings["recording"] = recording
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return outcome, exported


_OUT_OF_MEMORY = ("out of memory", "OutOfMemoryError", "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation")


def _ran_out_of_gpu_memory(executed: Path) -> bool:
    """Whether a cell of the executed notebook failed for want of GPU memory."""
    for cell in _executed_cells(executed):
        for output in cell.get("outputs") or []:
            if isinstance(output, dict) and output.get("output_type") == "error":
                text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
                if any(marker in text for marker in _OUT_OF_MEMORY):
                    return True
    return False


def build_stage(task: Task, staged: Staged) -> Staged:
    """The CPU's part (no GPU): the kernels built from source in a fresh sandbox and, on a GPU, compiled for it
    by the grader; on a CPU the plans replayed on the judge's inputs through the interpreter."""
    outcome, jobs = staged.outcome, staged.jobs
    on_gpu = task.settings.device == "gpu"
    # On a CPU the kernels are built (for a nominal GPU) only where an exercise bans some call: the ban is
    # checked on the compiled kernel (grader.judge.ir_rules).
    if on_gpu or any(specs.get(j["spec"]).forbidden_calls for j in jobs):
        fresh = sandbox.make_scratch("gpu-course-build-")
        try:
            built = build(_job(task, fresh, task.run / "build.log"), task.run / WALL_NOTEBOOK,
                          task.run / "export" / "export.json", gpu_target() if on_gpu else NOMINAL_TARGET,
                          task.run / "built")
            outcome.timings.update(built.timings)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
        if built.status == results.BUILD_LIMIT:  # the student's kernels: nothing can be judged
            staged.failed = Graded(Outcome(results.BUILD_LIMIT, built.message, outcome.timings), None)
            return staged
        if built.status != results.OK:  # no kernel can be judged: nothing here is the student's zero
            staged.failed = Graded(_grader_fault(outcome, built.message), None, outcome.status)
            return staged
        if on_gpu and task.judge_cache:  # the judge then finds its kernels compiled in its cache
            outcome.timings.update(compile_built(task.run / "built", gpu_target(), task.judge_cache,
                                                 task.run / "compile.log", COMPILE_SECONDS).timings)
    replayed = [] if on_gpu else _cpu_replays(jobs, staged.exported)
    if replayed:  # the plans run again on the judge's inputs, in a sandbox holding only the kernels' source
        fresh = sandbox.make_scratch("gpu-course-replay-")
        try:
            # The recording cell ran the same launches within one cell's limit; the replay adds its start-up.
            done = replay_cpu(_job(task, fresh, task.run / "replay.log"), task.run / WALL_NOTEBOOK,
                              task.run / "export" / "export.json", replayed, task.run / "replayed",
                              task.settings.cell_timeout + REPLAY_START_SECONDS)
            staged.replay_error = done.message or None
            outcome.timings.update(done.timings)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    return staged


def note_gpu_trouble(settings: Settings, gpu: str, verdict: dict[str, Any]) -> None:
    """Tell the TA, once per kind of trouble, when a judge could not be sure it had ``gpu`` alone (the gate's notes:
    no utilisation to read, or a GPU that stayed busy with the runs paused)."""
    for note in verdict.get("gpu_notes") or []:
        line = f"GPU {gpu}: {note}: timings taken then may include other notebooks' work"
        if line not in settings.notes:
            settings.notes.append(line)


def judge_stage(task: Task, staged: Staged, gpu: str | None = None, gate: GpuGate | None = None) -> Graded:
    """The judge's checks and timings (on a GPU: ``gpu``, held alone at ``gate`` while it replays and times)."""
    if staged.failed is not None:
        return staged.failed
    outcome = staged.outcome
    judge_job = {"device": task.settings.device, "export": str(task.run / "export"), "built": str(task.run / "built"),
                 "notebook": str(task.run / "sanitized.ipynb"),
                 "reference": task.reference, "run_seed": task.run_seed, "student": task.key, "kernels": staged.jobs,
                 "tests": task.plan.tests, "verdict": str(task.run / "verdict.json"),
                 "checkpoints": str(task.run / "judge-parts"), "watchdog": _replay_watchdog(task),
                 "replayed": str(task.run / "replayed"), "replay_error": staged.replay_error}
    verdict = _judge(task, judge_job, gpu or task.gpu or "0", gate)
    results.write_json_atomic(task.run / "verdict.json", verdict)
    note_gpu_trouble(task.settings, gpu or task.gpu or "0", verdict)
    for name, seconds in (verdict.get("seconds") or {}).items():
        outcome.timings[name] = float(seconds)
    if verdict.get("error"):
        return Graded(_grader_fault(outcome, str(verdict["error"])), verdict, outcome.status)
    return Graded(outcome, verdict)


def _unjudged(outcome: Outcome, verdict: dict[str, Any] | None) -> str:
    if verdict and verdict.get("error"):
        return f"not judged: {verdict['error']}"
    if outcome.status == results.GRADER_ERROR:
        return f"not judged: {outcome.message}"
    if outcome.status != results.OK:
        return f"not judged: the notebook run ended with status {outcome.status} ({outcome.message})"
    return "not judged: the notebook run did not reach the grader's recording cell"


def _result(submission: Submission, graded: Graded, plan: Plan, sanitized: nbformat.NotebookNode,
            settings: Settings, run_seed: int, notes: list[str]) -> NotebookResult:
    outcome, verdict = graded.outcome, graded.verdict
    result = NotebookResult(submission.student, submission.assignment, submission.notebook, outcome.status,
                            outcome.message, submission_sha256=sha256(submission.path),
                            grader_version=GRADER_VERSION, device=settings.device_name,
                            timings=dict(outcome.timings), integrity=notes, sandbox=settings.sandbox_label,
                            run_seed=run_seed)
    on_gpu = settings.device == "gpu"
    result.items = score.items(plan.notebook.key, plan.master, verdict, on_gpu, _unjudged(outcome, verdict))
    result.perf_rows = score.perf_rows(verdict)
    result.code = [{"id": c.metadata.nbgrader["grade_id"], "source": c.source} for c in sanitized.cells
                   if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
    return result


def ungraded_result(submission: Submission, status: str, message: str, settings: Settings) -> NotebookResult:
    """A result for a notebook that did not run: nothing to grade, or a file that is not a notebook."""
    return NotebookResult(submission.student, submission.assignment, submission.notebook, status, message,
                          submission_sha256=sha256(submission.path) if submission.path else "",
                          grader_version=GRADER_VERSION, device=settings.device_name, sandbox=settings.sandbox_label,
                          student_id=submission.student_id, submitted_file=submission.submitted_file,
                          found=submission.found)


# Reading the executed notebook the sandbox returned: untrusted data, so sizes are capped and every
# field is checked before use; only ever shown, never scored.
_MAX_EXECUTED_BYTES = 128 * 2**20


def _executed_cells(path: Path) -> list[dict[str, Any]]:
    """The cells of a notebook the sandbox wrote, each a dict ([] where it is a link, too large or unreadable)."""
    try:
        if path.is_symlink() or path.stat().st_size > _MAX_EXECUTED_BYTES:
            return []
        nb = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return []
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return [c if isinstance(c, dict) else {} for c in cells] if isinstance(cells, list) else []
_TAIL_LINES, _TAIL_CHARS, _LINE_CHARS = 40, 4000, 300
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LOG_NOISE = ("Kernel is running over TCP without encryption",)  # Jupyter's warning in every run's log
_RUN_STATUSES = {results.TIMEOUT, results.KERNEL_DIED, results.CUDA_ERROR, results.MEMORY, results.OUTPUT_LIMIT,
                 results.SCRATCH_LIMIT, results.GRADER_ERROR, results.GPU_HANG, results.GPU_MEMORY}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value[-_TAIL_CHARS * 16:]
    if isinstance(value, list):
        return "".join(v for v in value[-2000:] if isinstance(v, str))[-_TAIL_CHARS * 16:]
    return ""


def _tail(text: str) -> str:
    """The last lines of ``text``, without terminal codes or control characters, each line capped."""
    text = _CONTROL.sub("", _ANSI.sub("", text[-_TAIL_CHARS * 16:].replace("\r\n", "\n").replace("\r", "\n")))
    lines = [line if len(line) <= _LINE_CHARS else f"{line[:_LINE_CHARS]}... [{len(line)} characters]"
             for line in text.rstrip().splitlines() if not any(noise in line for noise in _LOG_NOISE)]
    lines = lines[-_TAIL_LINES:]
    return "\n".join(lines)[-_TAIL_CHARS:]


def _outputs_text(cell: dict[str, Any]) -> str:
    outputs = cell.get("outputs")
    parts = []
    for output in outputs[-50:] if isinstance(outputs, list) else []:
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(_text(output.get("text")))
        elif kind == "error":
            traceback = output.get("traceback")
            if isinstance(traceback, list) and traceback:
                parts.append("\n".join(_text(line) for line in traceback[-200:]))
            else:
                parts.append(f"{_text(output.get('ename'))}: {_text(output.get('evalue'))}")
        elif kind in ("execute_result", "display_data") and isinstance(output.get("data"), dict):
            parts.append(_text(output["data"].get("text/plain")))
    return "\n".join(p.rstrip("\n") for p in parts if p)


def _cell_label(cell: dict[str, Any], index: int, total: int) -> str:
    metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
    nbgrader = metadata.get("nbgrader") if isinstance(metadata.get("nbgrader"), dict) else {}
    grade_id = nbgrader.get("grade_id")
    tags = metadata.get("tags") if isinstance(metadata.get("tags"), list) else []
    where = f"cell {index + 1} of {total} as the grader ran it"
    if RECORDING_CELL in tags:
        return f"the grader's last cell, which calls your graded functions on the judged shapes ({where})"
    if "injected-parameters" in tags:
        return f"the grader's parameters cell ({where})"
    if isinstance(grade_id, str) and grade_id:
        return f"cell '{_tail(grade_id)[:64]}' ({where})"
    if cell.get("cell_type") != "code":
        return f"{where} (a text cell)"
    source = cell.get("source")
    source = "".join(s for s in source[:200] if isinstance(s, str)) if isinstance(source, list) else source
    lines = [line.strip() for line in source[:4000].splitlines() if line.strip()] if isinstance(source, str) else []
    first = _tail(lines[0])[:80] if lines else ""
    return f"{where}, a cell you added" + (f", which starts `{first}`" if first else " (empty)")


def describe_failed_run(run: Path, status: str) -> tuple[str, str]:
    """(stopped_at, failure_tail) of a run that did not finish, from the executed notebook in ``run``.

    The cell is the first with a CUDA error for ``cuda_error``, else the last one the run started
    (papermill stamps each cell's start, and saves the notebook after every cell). The tail is that
    cell's traceback or output; failing that, the end of the sandbox's log. ("", "") for a run that finished.
    """
    if status not in _RUN_STATUSES:
        return "", ""
    stopped_at, tail = "", ""
    cells = _executed_cells(run / "executed.ipynb")
    chosen = None
    if status == results.CUDA_ERROR:
        chosen = next((i for i, c in enumerate(cells)
                       if any(marker in _outputs_text(c) for marker in _CUDA_FAILURES)), None)
    if chosen is None:
        started = [i for i, c in enumerate(cells) if isinstance(c.get("metadata"), dict)
                   and isinstance(c["metadata"].get("papermill"), dict)
                   and isinstance(c["metadata"]["papermill"].get("start_time"), str)]
        chosen = started[-1] if started else None
    if chosen is not None:
        stopped_at = _cell_label(cells[chosen], chosen, len(cells))
        tail = _tail(_outputs_text(cells[chosen]))
    elif cells:
        stopped_at = "before its first cell (the notebook's kernel did not start)"
    if not tail:
        try:
            with open(run / "sandbox.log", "rb") as log:
                log.seek(max(0, os.fstat(log.fileno()).st_size - _TAIL_CHARS * 4))
                logged = _tail(log.read().decode("utf-8", errors="replace"))
        except OSError:
            logged = ""
        tail = f"(no output in that cell; the end of the run's log:)\n{logged}" if logged else ""
    return stopped_at, tail


def _check_sandbox(settings: Settings, log: Callable[[str], None]) -> None:
    if not settings.sandbox:
        log("WARNING: --no-sandbox: student code runs unisolated; every report says so")
        return
    reason = sandbox.unavailable_reason()
    if reason:
        raise SandboxUnavailable(f"the sandbox cannot run here ({reason}); install bubblewrap (Debian: "
                                 "apt-get install bubblewrap), or pass --no-sandbox to grade without isolation")


def _reference_problem(graded: Graded, jobs: list[dict[str, Any]]) -> str | None:
    """Why the reference solution's run cannot anchor its students' grades, or None."""
    if graded.outcome.status != results.OK:
        return f"{graded.outcome.status}: {graded.outcome.message}"
    kernels = (graded.verdict or {}).get("kernels") or {}
    for job in jobs:
        if not job["bench_shapes"]:
            continue
        kernel = kernels.get(job["spec"]) or {}
        failed = [m for s in (kernel.get("sets") or {}).values() if not s.get("passed") for m in s.get("messages", [])]
        untimed = [r.get("error") or f"{r['shape']} not timed" for r in (kernel.get("bench") or {}).get("rows") or []
                   if not r.get("student_ms")]
        if not kernel or failed or untimed:
            return f"its kernel {job['spec']} was not replayed and timed on every benchmark shape: " \
                   f"{(failed + untimed + ['no verdict'])[0]}"[:500]
    return None


def _reference_where(out: Path, notebook: CourseNotebook) -> Path:
    return out / "reference" / notebook.assignment / notebook.name


def _reference_stamp(settings: Settings) -> str:
    return f"{settings.device_name}\n{GRADER_VERSION}\n{json.dumps(settings.bench_shapes)}\n"


def _reference_paths(where: Path) -> dict[str, str]:
    return {"export": str(where / "export"), "built": str(where / "built"), "verdict": str(where / "verdict.json")}


def reference_task(out: Path, notebook: CourseNotebook, settings: Settings, run_seed: int,
                   hide: list[str]) -> Task | None:
    """The run of ``notebook``'s reference solution on this GPU, or None when OUT has it already (same device,
    grader version and benchmark shapes)."""
    where = _reference_where(out, notebook)
    marker = where / "device.txt"
    if not settings.force and marker.exists() and marker.read_text() == _reference_stamp(settings):
        return None
    where.mkdir(parents=True, exist_ok=True)
    marker.unlink(missing_ok=True)
    solution = nbformat.read(str(notebook.solution_path), as_version=4)
    nbformat.write(solution, str(where / "sanitized.ipynb"))
    return Task("reference", solution, notebook_plan(notebook), where, settings, run_seed, hide, bench_only=True,
                judge_cache=out / "judge-cache")


def reference_result(out: Path, notebook: CourseNotebook, settings: Settings, run_seed: int,
                     graded: Graded | None, log: Callable[[str], None]) -> dict[str, str]:
    """What the students of ``notebook`` are judged against: the reference's paths, or ``{"error": why}`` when
    it could not be graded (then none of them is: grader_error). ``graded``: its run now (None: kept in OUT)."""
    where = _reference_where(out, notebook)
    if graded is None:
        return _reference_paths(where)
    try:
        problem = _reference_problem(graded, kernel_calls(notebook, settings, run_seed, "reference", True))
    except Exception as error:  # the grader's own failure: the same stop
        problem = f"{type(error).__name__}: {error}"
    if problem:
        why = f"the reference solution of {notebook.key} could not be graded on {settings.device_name} " \
              f"({problem}); none of its submissions was graded (see {where})"
        settings.notes.append(why)
        log(f"GRADER ERROR: {why}")
        return {"error": why}
    (where / "device.txt").write_text(_reference_stamp(settings))
    return _reference_paths(where)


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


def _with_reference(task: Task, reference: dict[str, str]) -> tuple[Task | None, Graded | None]:
    if "error" in reference:
        return None, Graded(Outcome(results.GRADER_ERROR, reference["error"]), None)
    return replace(task, reference=reference), None


def visible_gpus() -> tuple[str, ...]:
    import torch

    return tuple(str(i) for i in range(torch.cuda.device_count()))


def limits_for(settings: Settings) -> Limits:
    """The stages' concurrency: the TA's settings, else what the machine's CPUs and GPUs allow."""
    cpus = len(os.sched_getaffinity(0))
    if settings.device != "gpu":
        if settings.schedule == "serial":
            return Limits((), 1, 1, 1)
        runs = settings.runs or min(2, cpus)
        return Limits((), runs, settings.builds or runs, 1, cpu_slots=runs)
    gpus = settings.gpus or visible_gpus()
    unknown = sorted(set(gpus) - set(visible_gpus()))
    if unknown:
        raise UnknownGpu(f"--gpus names {', '.join(unknown)}, which this process does not see (it sees "
                         f"{', '.join(visible_gpus()) or 'none'})")
    if settings.schedule == "serial":
        return Limits(gpus[:1], 1, 1, 1)
    runs = settings.runs or max(1, min(RUNS_PER_GPU * len(gpus), cpus // 2))
    return Limits(tuple(gpus), runs, settings.builds or max(1, cpus // 4), settings.judges_per_gpu)


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
          ) -> list[NotebookResult]:
    """Grade every submission under ``submissions_root`` into ``out``; returns all results. Holds OUT's lock
    (``out_lock.OutBusy`` where another grader does); a stop signal or Ctrl-C raises ``stopping.Stopped`` saying
    how many notebooks are complete, once every process the batch started is gone."""
    # Absolute: the judge and the sandboxed stages run in scratch folders of their own and are handed paths in OUT.
    submissions_root, out = submissions_root.resolve(), out.resolve()
    tally = _Tally()
    with out_lock.held(out, log=log):
        try:
            return _grade(submissions_root, out, settings, log, progress, tally)
        except KeyboardInterrupt as interrupt:
            raise stopping.Stopped.of(interrupt, str(tally)) from interrupt


def _grade(submissions_root: Path, out: Path, settings: Settings, log: Callable[[str], None],
           progress: Callable[[int, int, NotebookResult], None] | None, tally: _Tally) -> list[NotebookResult]:
    _check_sandbox(settings, log)
    limits = limits_for(settings)
    if settings.cpus_per_run is None:
        # On a GPU, two each at least: a run is two busy processes (papermill and its kernel), and runs sit frozen
        # while a judge times, so runs whose CPU sets overlap are seldom busy at once.
        settings = replace(settings, cpus_per_run=sandbox.default_cpus_per_run(
            limits.runs + limits.builds, at_least=2 if settings.device == "gpu" else 1))
    for stale in sandbox.cleanup_stale():
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
    needed = sorted({(s.assignment, s.notebook) for s in todo if s.path})
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


def record_result(out: Path, submission: Submission, result: NotebookResult, notebook: nbformat.NotebookNode | None,
                  book: Gradebook | None = None) -> None:
    """One notebook's result into OUT's gradebook (``book``: an open one of it) and OUT/results."""
    url = gradebook.db_url(out)
    result.student_id, result.submitted_file = submission.student_id, submission.submitted_file
    result.found = submission.found
    if submission.path is not None:
        student_dir = submission.path.parents[len(PurePosixPath(submission.submitted_file).parts) - 1]
        result.timestamp_txt, result.file_mtime = term.submission_times(student_dir, submission.assignment,
                                                                         submission.path)
    _name_student(url, result)
    gradebook.record(url, replace(result, student=result.student_id), notebook, book)
    results.write_json_atomic(result_path(out, submission), result.to_json())


def _name_student(url: str, result: NotebookResult) -> None:
    """Give a student whose folder name is not an id that name in the gradebook (``nbgrader export``'s
    last_name column; nbgrader writes that CSV without quoting, so commas and line breaks become spaces)."""
    if result.student == result.student_id:
        return
    with Gradebook(url) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(result.student_id, last_name=re.sub(r'[,"\r\n]', " ", result.student)[:128])


def load_results(out: Path) -> list[NotebookResult]:
    found = []
    for path in sorted((out / "results").glob("*/*/*.json")):
        found.append(NotebookResult.from_json(results.read_json(path)))
    return found
