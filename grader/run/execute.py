"""Run one sanitized notebook in the sandbox, then build (GPU) or replay (CPU) its kernels in a fresh one.

``execute(job)`` starts ``python -m grader.run.execute JOB.json`` inside ``grader.wall.sandbox`` with a
scrubbed environment and a scratch directory as its only writable place. In there, papermill runs
the notebook (the grader's recording cell last), with a per-cell limit and errors allowed, saving
after each cell. What comes back is data: the executed notebook (shown to the student, never
scored), ``export/`` (plans, answers) and an outcome whose status the sandbox's own
verdict (timeout, memory, output) overrides. ``build(job)`` then compiles the notebook's kernels
from its source in a second, fresh sandbox, so nothing the run left behind can reach the build; on
a CPU, ``replay_cpu(job)`` runs the recorded plans there through Triton's interpreter instead.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.gpu.gpu_gate import Pausable
from grader.intake.layout import KERNEL_NAME, REPO
from grader.run.run_alone import AloneChannel
from grader.score import results
from grader.wall import sandbox, scratch_folders, wall_tree

# Environment variables a notebook may see; everything else in the grader's environment is dropped.
# CUDA_VISIBLE_DEVICES is not among them: the sandbox sets it to the one GPU it binds (grader.wall.sandbox.run).
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "LD_LIBRARY_PATH",
                   "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                   "CUDA_PATH", "CUDA_HOME")  # where CuPy may find NVRTC (course.cuda)
_CUDA_FAILURES = ("CUDA error", "illegal memory access", "misaligned address", "unspecified launch failure",
                  "AcceleratorError")
_STATUSES = {results.OK, results.TIMEOUT, results.KERNEL_DIED, results.CUDA_ERROR, results.GRADER_ERROR}
_SANDBOX_STATUS = {"timeout": results.TIMEOUT, "memory": results.MEMORY, "output_limit": results.OUTPUT_LIMIT,
                   "scratch_limit": results.SCRATCH_LIMIT, "error": results.GRADER_ERROR,
                   "gpu_hang": results.GPU_HANG, "gpu_memory": results.GPU_MEMORY}
# What a notebook run prints, besides its log: what leaves the sandbox (flow.task._keep). The rest of the
# scratch directory (HOME, TMPDIR, Triton's and inductor's caches) counts against the scratch quota.
PRINTED = ("executed.ipynb", "outcome.json", "export")
BUILD_SECONDS = 600.0  # the build of one notebook's kernels, in a sandbox of its own


@dataclass
class Job:
    notebook: str  # the notebook to run (the grader's recording cell already appended)
    workdir: str  # scratch directory holding only this run
    device: str  # "gpu" or "cpu"
    gpu: str | None = None  # the one GPU this run may use: the grader's CUDA index (only its node is bound)
    cell_timeout: float = 600.0
    notebook_timeout: float = 1800.0
    startup_timeout: float = 120.0
    memory_bytes: int = 8 * 2**30
    output_bytes: int = 64 * 2**20  # printed: cell outputs, the run's log, exported answers
    scratch_bytes: int = 2 * 2**30  # every other file the run writes (compiler caches, temporary files)
    cpus: int | None = None  # CPUs per run (None: all, shared)
    hide: list[str] = field(default_factory=list)  # folders the sandbox must not see (OUT, submissions, solutions)
    sandbox: bool = True  # False only when the TA asked for --no-sandbox
    log: str = ""  # where the sandbox's stdout and stderr go (outside workdir)

    @property
    def executed_path(self) -> Path:
        return Path(self.workdir) / "executed.ipynb"

    @property
    def outcome_path(self) -> Path:
        return Path(self.workdir) / "outcome.json"

    def limits(self, seconds: float) -> sandbox.Limits:
        return sandbox.Limits(seconds=seconds, memory_bytes=self.memory_bytes, output_bytes=self.output_bytes,
                              scratch_bytes=self.scratch_bytes, cpus=self.cpus)


@dataclass
class Outcome:
    status: str
    message: str = ""
    timings: dict[str, float] = field(default_factory=dict)


def kernelspec_dir(root: Path) -> Path:
    """Write the course kernel's spec under ``root`` (a JUPYTER_PATH entry) for this Python."""
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-P", "-m", "grader.wall.kernel_main", "-f", "{connection_file}"],
        "display_name": "GPU kernels course",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return root


@functools.cache
def _font_list() -> Path | None:
    """Matplotlib's list of this machine's fonts (fontlist-*.json), made by this process if need be: a run's fresh
    configuration folder starts with a copy, where matplotlib would spend 0.3 s of every run making it again."""
    try:
        import matplotlib
        import matplotlib.font_manager  # noqa: F401 (loads or makes the list)
    except ImportError:
        return None
    return next(iter(sorted(Path(matplotlib.get_cachedir()).glob("fontlist-*.json"))), None)


def sandbox_python_path(outer: str) -> str:
    """The wall tree (``course`` as students have it, the sandbox's grader modules) first, then the grader's own
    entries (a GPU runner's wheels) without the checkout or anything in it: nothing of it may be importable."""
    checkout = REPO.resolve()
    kept = [entry for entry in outer.split(os.pathsep)
            if entry and (resolved := Path(entry).resolve()) != checkout and checkout not in resolved.parents]
    return os.pathsep.join([str(wall_tree.tree()), *kept])


def scrubbed_environment(job: Job) -> dict[str, str]:
    work = Path(job.workdir)
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    env["PYTHONPATH"] = sandbox_python_path(env.get("PYTHONPATH", ""))
    for name, sub in (("HOME", "home"), ("TRITON_CACHE_DIR", "triton-cache"), ("MPLCONFIGDIR", "mpl"),
                      ("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"), ("TMPDIR", "tmp")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(work / sub)
    fonts = _font_list()
    if fonts is not None and not (work / "mpl" / fonts.name).exists():
        with contextlib.suppress(OSError):
            shutil.copyfile(fonts, work / "mpl" / fonts.name)
    env["JUPYTER_PATH"] = str(kernelspec_dir(work / "jupyter"))
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["COURSE_DEVICE"] = job.device
    env["COURSE_GRADING"] = "1"
    return env


def _sandboxed(job: Job, argv: list[str], seconds: float, printed: tuple[str, ...] = (),
               gpu: bool = True, pause: Pausable | None = None,
               extra_env: dict[str, str] | None = None) -> sandbox.SandboxResult:
    """Run argv in the job's sandbox; a GPU job on its one GPU (the first when the job names none) unless ``gpu``
    is False (the builder never needs one)."""
    env = {**scrubbed_environment(job), **(extra_env or {})}
    if not gpu:
        env["COURSE_DEVICE"] = "cpu"  # ``import course`` must not ask for the GPU it cannot see
    return sandbox.run(argv, scratch=Path(job.workdir), env=env, limits=job.limits(seconds),
                       log_path=Path(job.log), hide=[Path(p) for p in job.hide],
                       gpu=(job.gpu or "0") if gpu and job.device == "gpu" else None, printed=printed,
                       sandbox=job.sandbox, pause=pause)


def _log_tail(job: Job) -> str:
    try:
        return Path(job.log).read_text(errors="replace")[-400:]
    except OSError:
        return ""


def execute(job: Job, pause: Pausable | None = None) -> Outcome:
    """Run ``job``'s notebook in the sandbox; always returns an Outcome. ``pause``: its handle at the GPU gate."""
    work = Path(job.workdir)
    work.mkdir(parents=True, exist_ok=True)
    job_file = work / "job.json"
    job_file.write_text(json.dumps(asdict(job)), encoding="utf-8")
    argv = [sys.executable, "-P", "-m", "grader.run.execute", str(job_file)]
    shares_a_gate = job.device == "gpu" and pause is not None and pause.gate is not None
    with AloneChannel(work / "gpu-alone", pause) if shares_a_gate else contextlib.nullcontext() as alone:
        ran = _sandboxed(job, argv, job.notebook_timeout, printed=PRINTED, pause=pause,
                         extra_env=alone.environment() if alone is not None else None)
    timings = {"notebook": ran.seconds}
    if pause is not None and pause.paused_seconds():
        timings["frozen"] = pause.paused_seconds()
    if alone is not None and alone.holds:
        timings["gpu_alone"] = alone.held
    if ran.status == "timeout":
        return Outcome(results.TIMEOUT, f"the notebook ran past its {job.notebook_timeout:.0f} s limit", timings)
    if ran.status in _SANDBOX_STATUS:
        return Outcome(_SANDBOX_STATUS[ran.status], ran.message, timings)
    try:  # written inside the sandbox: informative only, and checked before use (never through a link)
        if job.outcome_path.is_symlink():
            raise ValueError("a link")
        reported = json.loads(job.outcome_path.read_text(encoding="utf-8"))
        status, message = str(reported["status"]), str(reported.get("message", ""))[:500]
        kernel_start = float(reported.get("timings", {}).get("kernel_start", 0.0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Outcome(results.GRADER_ERROR, f"the notebook run ended without an outcome (exit code "
                       f"{ran.returncode}): {_log_tail(job)}", timings)
    if status not in _STATUSES:
        status, message = results.GRADER_ERROR, f"unknown outcome {status[:40]!r}"
    timings["kernel_start"] = kernel_start
    return Outcome(status, message, timings)


def _stage(fresh: Path, notebook: Path, export: Path) -> dict[str, str]:
    """Copy the sanitized notebook and the run's export into a fresh sandbox's scratch: all it will see."""
    (fresh / "in").mkdir(parents=True, exist_ok=True)
    shutil.copy(notebook, fresh / "in" / "notebook.ipynb")
    if export.exists():
        shutil.copy(export, fresh / "in" / "export.json")
    else:
        (fresh / "in" / "export.json").write_text("{}", encoding="utf-8")
    return {"notebook": str(fresh / "in" / "notebook.ipynb"), "export": str(fresh / "in" / "export.json")}


def build(job: Job, notebook: Path, export: Path, target: dict[str, Any], destination: Path) -> Outcome:
    """Compile the notebook's kernels in a fresh sandbox; the index lands in ``destination``."""
    fresh = Path(job.workdir)
    request = {**_stage(fresh, notebook, export), "target": target, "out": str(fresh / "built")}
    (fresh / "build.json").write_text(json.dumps(request), encoding="utf-8")
    ran = _sandboxed(job, [sys.executable, "-P", "-m", "grader.kernel_build.build_kernels", str(fresh / "build.json")],
                     BUILD_SECONDS, gpu=False)
    scratch_folders.copy_out(fresh / "built", destination)
    if ran.status in ("timeout", "memory"):  # the notebook's kernels, not the grader, need more than a build may
        what = f"{BUILD_SECONDS:.0f} s" if ran.status == "timeout" else f"{job.memory_bytes / 2**30:.1f} GiB"
        return Outcome(results.BUILD_LIMIT, f"your kernels took more than {what} to compile; none of them was "
                       "judged (look for a loop unrolled by tl.static_range, or a very large constexpr tile)",
                       {"build": ran.seconds})
    if ran.status != "ok":
        return Outcome(results.GRADER_ERROR, f"building the kernels failed ({ran.status}): {_log_tail(job)}",
                       {"build": ran.seconds})
    return Outcome(results.OK, "", {"build": ran.seconds})


def replay_cpu(job: Job, notebook: Path, export: Path, kernels: list[dict[str, Any]], destination: Path,
               seconds: float) -> Outcome:
    """Replay the recorded plans on the judge's inputs (``kernels``: specs and calls, secret seeds) through
    Triton's interpreter in a fresh sandbox (``grader.replay.replay_cpu``); the outputs land in ``destination``."""
    from grader.replay import replay_inputs

    fresh = Path(job.workdir)
    inputs = fresh / "in" / "inputs"  # the judge's inputs, made here from the secret seeds
    request = {**_stage(fresh, notebook, export), "kernels": replay_inputs.with_inputs(kernels, inputs),
               "inputs": str(inputs), "out": str(fresh / "replayed")}
    (fresh / "replay.json").write_text(json.dumps(request), encoding="utf-8")
    ran = _sandboxed(job, [sys.executable, "-P", "-m", "grader.replay.replay_cpu", str(fresh / "replay.json")], seconds)
    scratch_folders.copy_out(fresh / "replayed", destination)
    if ran.status != "ok":  # the kernels' doing (a kernel that never ends, a crash), or the sandbox's: said per call
        why = {"timeout": f"ran past its {seconds:.0f} s limit (a kernel that never ends?)",
               "memory": "ran out of memory"}.get(ran.status, f"ended early ({ran.status}: a kernel that crashed it?)")
        return Outcome(results.GRADER_ERROR, f"the replay of the kernels in the interpreter {why}",
                       {"replay": ran.seconds})
    return Outcome(results.OK, "", {"replay": ran.seconds})


def _cuda_failure(nb: Any) -> str | None:
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                text = f"{output.get('ename', '')}: {output.get('evalue', '')}"
                if any(marker in text for marker in _CUDA_FAILURES):
                    return text[:300]
    return None


def _kernel_start_seconds(nb: Any, began: datetime) -> float | None:
    """Seconds from the start of the run to the first cell's start (papermill stamps UTC)."""
    for cell in nb.cells:
        stamp = cell.get("metadata", {}).get("papermill", {}).get("start_time")
        if stamp:
            started = datetime.fromisoformat(stamp)
            if started.tzinfo is None:
                started = started.replace(tzinfo=UTC)
            return (started - began).total_seconds()
    return None


def run_job(job: Job) -> Outcome:
    """The sandbox's side: papermill with errors allowed; an outcome for every ending."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.execute import prepare_notebook_metadata
    from papermill.iorw import load_notebook_node, write_ipynb
    from papermill.parameterize import parameterize_notebook

    from grader.wall.cell_limit import CellLimitEngine, RunClock

    parameters = {"device": job.device, "grading": True}
    nb = load_notebook_node(job.notebook)
    nb = parameterize_notebook(nb, parameters, kernel_name=KERNEL_NAME, language="python")
    output = str(job.executed_path)
    nb = prepare_notebook_metadata(nb, job.notebook, output)
    began_wall, began = datetime.now(UTC), time.monotonic()
    outcome = Outcome(results.OK)
    try:
        with RunClock() as clock:
            nb = CellLimitEngine.execute_notebook(
                nb, KERNEL_NAME, input_path=job.notebook, output_path=output, progress_bar=False, log_output=False,
                start_timeout=job.startup_timeout, cell_limit=job.cell_timeout, clock=clock, allow_errors=True,
                # A cell's reply and its last outputs are separate messages; papermill fails the cell when 4 s
                # pass between them. A run paused by the GPU gate (while a judge holds its GPU) can sit in that
                # gap for longer: the cell's limit bounds the wait (in wall time: nbclient gives no round here).
                iopub_timeout=math.ceil(job.cell_timeout),
            )
        write_ipynb(nb, output)
        failure = _cuda_failure(nb)
        if failure:
            outcome = Outcome(results.CUDA_ERROR, f"a CUDA error stopped the GPU work: {failure}")
    except DeadKernelError:
        outcome = Outcome(results.KERNEL_DIED, "the Jupyter kernel died (a crash such as a segfault, or out of memory)")
    except CellTimeoutError:
        outcome = Outcome(results.TIMEOUT, f"a cell ran past its {job.cell_timeout:.0f} s limit")
    except Exception as error:  # any other failure of the run is a status, not a crash of the grader
        outcome = Outcome(results.GRADER_ERROR, f"{type(error).__name__}: {error}"[:500])
    outcome.timings["total"] = time.monotonic() - began
    executed = job.executed_path
    if executed.exists():
        kernel_start = _kernel_start_seconds(load_notebook_node(str(executed)), began_wall)
        if kernel_start is not None:
            outcome.timings["kernel_start"] = kernel_start
    return outcome


def main(argv: list[str]) -> int:
    job = Job(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    outcome = run_job(job)
    results.write_json_atomic(job.outcome_path, asdict(outcome))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
