"""Which processes have work on a GPU, from the driver's per-process accounting (NVML, through NVIDIA's own bindings,
``nvidia-ml-py``): the processes whose kernels ran in a recent window, and the memory each holds.

The GPU gate (``grader.gpu.gpu_gate``) asks which frozen run still has a kernel running when a drain does not finish,
and the run watch asks which run has kept its GPU busy for long and how much memory each holds. The process ids
are the host's, as the driver sees them: the ones psutil finds for a sandboxed run's processes. Every function
answers None where NVML cannot tell (no driver, no such GPU, a driver without per-process samples).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from grader.gpu import gpu_nodes

_LOCK = threading.Lock()  # NVML is thread-safe; the bindings' lazy loading is not


@cache
def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no package, no driver library, no GPU: NVML cannot tell
        return None
    return pynvml


@cache
def _handle(gpu: str) -> Any | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        uuid = gpu_nodes.cuda_device(gpu).uuid
        return nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else None
    except (gpu_nodes.GpuUnavailable, nvml.NVMLError):
        return None


def now_us() -> int:
    """A moment in NVML's sample clock (microseconds of the host's wall clock)."""
    return int(time.time() * 1e6)


_NOT_FOUND = object()  # NVML's "no such sample": nothing ran in the window asked about


def _ask(gpu: str, question: Callable[[Any, Any], Any]) -> Any:
    """``question(nvml, handle)`` for ``gpu``, under the lock; None where NVML cannot answer, _NOT_FOUND where it has
    nothing newer to report."""
    with _LOCK:
        handle = _handle(gpu)
        if handle is None:
            return None
        nvml = _nvml()
        try:
            return question(nvml, handle)
        except nvml.NVMLError_NotFound:
            return _NOT_FOUND
        except nvml.NVMLError:
            return None


def busy_since(gpu: str, since_us: int) -> set[int] | None:
    """The processes whose kernels kept ``gpu``'s multiprocessors busy in a sample taken after ``since_us``."""
    samples = _ask(gpu, lambda nvml, handle: nvml.nvmlDeviceGetProcessUtilization(handle, since_us))
    if samples is None or samples is _NOT_FOUND:
        return None if samples is None else set()
    return {sample.pid for sample in samples if sample.timeStamp > since_us and sample.smUtil > 0}


def memory_by_process(gpu: str) -> dict[int, int] | None:
    """The bytes of ``gpu``'s memory each process with a context on it holds (0 where the driver does not say)."""
    processes = _ask(gpu, lambda nvml, handle: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
    if processes is None or processes is _NOT_FOUND:
        return None
    return {process.pid: int(process.usedGpuMemory or 0) for process in processes}


def total_memory(gpu: str) -> int | None:
    """``gpu``'s memory in bytes."""
    info = _ask(gpu, lambda nvml, handle: nvml.nvmlDeviceGetMemoryInfo(handle))
    return None if info is None or info is _NOT_FOUND else int(info.total)
