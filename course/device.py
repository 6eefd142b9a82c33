"""Which device the course runs on: a CUDA GPU, or the CPU through the Triton interpreter.

Triton decides between compiling a kernel and interpreting it when ``@triton.jit`` decorates
the function, reading ``TRITON_INTERPRET`` at that moment. ``configure`` sets that variable; every
notebook calls it in its first cell, and ``info`` calls it at the device's first use (importing
``course`` does not: it leaves the process as it was). A kernel decorated before that is caught at
launch by ``course.guard``.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

ENV_DEVICE = "COURSE_DEVICE"
ENV_GRADING = "COURSE_GRADING"  # set by the grader in its sandbox: notebook previews stand aside
MODES = ("auto", "gpu", "cpu")


@dataclass(frozen=True)
class DeviceInfo:
    """What the course runs on. ``interpret`` means Triton kernels run in the CPU interpreter."""

    kind: str  # "cuda" or "cpu"
    name: str
    sm_count: int = 0
    l2_bytes: int = 0
    memory_bytes: int = 0
    compute_capability: tuple[int, int] | None = None
    shared_memory_per_block: int = 0  # bytes one program may use, opted in (227 KiB on an H100)

    @property
    def has_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def interpret(self) -> bool:
        return self.kind == "cpu"

    @property
    def torch_device(self) -> str:
        return "cuda" if self.has_gpu else "cpu"

    def describe(self) -> str:
        if not self.has_gpu:
            return f"No GPU in use: Triton kernels run in the CPU interpreter ({self.name})."
        major, minor = self.compute_capability or (0, 0)
        return (
            f"{self.name}: {self.sm_count} SMs, {self.l2_bytes / 2**20:.0f} MiB L2, "
            f"{self.memory_bytes / 2**30:.0f} GiB memory, compute capability {major}.{minor}"
        )


_current: DeviceInfo | None = None


def _gpu_info() -> DeviceInfo:
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return DeviceInfo(
        kind="cuda",
        name=props.name,
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
        memory_bytes=props.total_memory,
        compute_capability=(props.major, props.minor),
        shared_memory_per_block=int(getattr(props, "shared_memory_per_block_optin", 0)),
    )


def configure(mode: str | None = None) -> DeviceInfo:
    """Choose the device once, before any Triton kernel is defined.

    ``mode`` is "auto" (a GPU when one is visible, else the interpreter), "gpu" or "cpu";
    without it, the ``COURSE_DEVICE`` environment variable decides, then "auto".
    """
    global _current
    mode = (mode or os.environ.get(ENV_DEVICE) or "auto").lower()
    if mode not in MODES:
        raise ValueError(f"device must be one of {MODES}, not {mode!r}")
    import torch

    gpu_visible = torch.cuda.is_available()
    if mode == "gpu" and not gpu_visible:
        raise RuntimeError("device='gpu' was asked for, but no CUDA GPU is visible to PyTorch")
    use_gpu = gpu_visible and mode != "cpu"
    chosen = _gpu_info() if use_gpu else DeviceInfo(kind="cpu", name=platform.processor() or "CPU")
    if _current is not None and _current.kind != chosen.kind:
        raise RuntimeError(
            f"the course already runs on {_current.kind}; restart the kernel to switch to {chosen.kind}"
        )
    os.environ["TRITON_INTERPRET"] = "0" if use_gpu else "1"
    if not use_gpu:
        from course import interpreter_fixes

        interpreter_fixes.install()  # bf16 tl.dot in the interpreter
    _current = chosen
    return chosen


def grading() -> bool:
    """True inside the grader's run, where the judge (not the notebook) checks and times the kernels."""
    return os.environ.get(ENV_GRADING) == "1"


def info() -> DeviceInfo:
    """The device chosen by ``configure`` (configuring with the defaults if nothing was chosen)."""
    return _current or configure()


def synchronize() -> None:
    """Wait until all work queued on the course's device has finished.

    On a GPU this is ``torch.cuda.synchronize()``; on a CPU it waits for the simulated asynchronous
    device of ``course.exercises.async_device`` (Day 2), so a timer written with it is right on both.
    """
    from course.exercises import async_device

    async_device.synchronize(info().torch_device)
