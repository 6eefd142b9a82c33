"""A grading run's settings (device, limits, scheduling, seed) and what they resolve to on this machine: the
device, the GPUs, the stages' concurrency, whether the sandbox can run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader.flow.schedule import JUDGES_PER_GPU, Limits
from grader.gpu.gpu_watch import BUSY_SECONDS
from grader.wall import sandbox

RUNS_PER_GPU = 6  # sandboxed runs sharing one GPU by default: paused while judges time, about half the time


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
    # an OUT of `grader references` (the Slurm executor's references job): its reference solutions graded on this
    # device, grader version and shapes are taken instead of graded again, --force or not
    shared_references: str | None = None
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


def _check_sandbox(settings: Settings, log: Callable[[str], None]) -> None:
    if not settings.sandbox:
        log("WARNING: --no-sandbox: student code runs unisolated; every report says so")
        return
    reason = sandbox.unavailable_reason()
    if reason:
        raise SandboxUnavailable(f"the sandbox cannot run here ({reason}); install bubblewrap (Debian: "
                                 "apt-get install bubblewrap), or pass --no-sandbox to grade without isolation")


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
