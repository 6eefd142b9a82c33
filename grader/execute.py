"""Execute one sanitized notebook with papermill, in its own process, under time limits.

The parent (``execute``) starts ``python -m grader.execute JOB.json`` in a new session with a
scrubbed environment and a scratch working directory, waits at most the notebook's time limit,
and kills the whole process tree past it. The child runs papermill with the course kernel,
injected parameters, a per-cell time limit and errors allowed (so every test cell runs), and
saves the notebook after each cell, so even a killed run leaves what it had done. Every way a
run can end becomes a status in the outcome, never an exception in the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

from grader import results
from grader.layout import KERNEL_NAME, REPO

# Environment variables a notebook may see; everything else in the grader's environment is dropped.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
                   "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
_CUDA_FAILURES = ("CUDA error", "illegal memory access", "misaligned address", "unspecified launch failure",
                  "AcceleratorError")


@dataclass
class Job:
    notebook: str  # the sanitized notebook to run
    workdir: str  # scratch directory holding only this submission's run
    device: str  # "gpu" or "cpu"
    bench_shapes: list[list[int]] | None = None
    gpu: str | None = None  # the one GPU this run may see (CUDA_VISIBLE_DEVICES)
    cell_timeout: float = 600.0
    notebook_timeout: float = 1800.0
    startup_timeout: float = 120.0

    @property
    def executed_path(self) -> Path:
        return Path(self.workdir) / "executed.ipynb"

    @property
    def metrics_path(self) -> Path:
        return Path(self.workdir) / "metrics.jsonl"

    @property
    def outcome_path(self) -> Path:
        return Path(self.workdir) / "outcome.json"


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
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "GPU kernels course",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1), encoding="utf-8")
    return root


def scrubbed_environment(job: Job) -> dict[str, str]:
    work = Path(job.workdir)
    env = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
    # The course package must import even where it is not installed (a GPU runner using PYTHONPATH).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for name, sub in (("HOME", "home"), ("TRITON_CACHE_DIR", "triton-cache"), ("MPLCONFIGDIR", "mpl"),
                      ("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"), ("TMPDIR", "tmp")):
        (work / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(work / sub)
    env["JUPYTER_PATH"] = str(kernelspec_dir(work / "jupyter"))
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if job.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = job.gpu
    env["COURSE_DEVICE"] = job.device
    env["COURSE_METRICS_FILE"] = str(job.metrics_path)
    return env


def _kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    processes = [parent, *parent.children(recursive=True)]
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=10)


def execute(job: Job) -> Outcome:
    """Run ``job`` in a child process; always returns an Outcome."""
    work = Path(job.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for stale in (job.executed_path, job.metrics_path, job.outcome_path):
        stale.unlink(missing_ok=True)
    job_file = work / "job.json"
    job_file.write_text(json.dumps(asdict(job)), encoding="utf-8")
    started = time.monotonic()
    with open(work / "execute.log", "wb") as log:
        child = subprocess.Popen([sys.executable, "-m", "grader.execute", str(job_file)], cwd=work,
                                 env=scrubbed_environment(job), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            child.wait(timeout=job.notebook_timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(child.pid)
            return Outcome(results.TIMEOUT, f"the notebook ran past its {job.notebook_timeout:.0f} s limit",
                           {"total": time.monotonic() - started})
        finally:
            _kill_tree(child.pid)  # a kernel left behind by a crashed child
    if job.outcome_path.exists():
        return Outcome(**results.read_json(job.outcome_path))
    tail = (work / "execute.log").read_text(errors="replace")[-400:]
    return Outcome(results.GRADER_ERROR, f"the executor exited with code {child.returncode}: {tail}",
                   {"total": time.monotonic() - started})


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
                started = started.replace(tzinfo=timezone.utc)
            return (started - began).total_seconds()
    return None


def run_job(job: Job) -> Outcome:
    """The child's side: papermill with errors allowed; an outcome for every ending."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from papermill.engines import papermill_engines
    from papermill.execute import prepare_notebook_metadata
    from papermill.iorw import load_notebook_node, write_ipynb
    from papermill.parameterize import parameterize_notebook

    parameters = {"device": job.device, "grading": True, "bench_shapes": job.bench_shapes}
    nb = load_notebook_node(job.notebook)
    nb = parameterize_notebook(nb, parameters, kernel_name=KERNEL_NAME, language="python")
    output = str(job.executed_path)
    nb = prepare_notebook_metadata(nb, job.notebook, output)
    began_wall, began = datetime.now(timezone.utc), time.monotonic()
    outcome = Outcome(results.OK)
    try:
        nb = papermill_engines.execute_notebook_with_engine(
            None, nb, kernel_name=KERNEL_NAME, input_path=job.notebook, output_path=output,
            progress_bar=False, log_output=False, start_timeout=job.startup_timeout,
            execution_timeout=job.cell_timeout, request_save_on_cell_execute=True, allow_errors=True,
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
