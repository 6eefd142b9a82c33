"""Whether a GPU is running any kernel right now, from the driver's own counter (NVML, through ctypes).

NVML's utilisation is the share of its last sample period (1/6 s to 1 s) in which at least one kernel ran,
from any process: 0 means nothing ran in that period. The gate (``grader.gpu_gate``) reads it after freezing
the other notebooks, to start a timing only once the work they had queued is done.
"""

from __future__ import annotations

import ctypes
import threading
from functools import cache

from grader import gpu_nodes


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


_LOCK = threading.Lock()


@cache
def _library() -> ctypes.CDLL | None:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    return nvml if nvml.nvmlInit_v2() == 0 else None


@cache
def _handle(gpu: str) -> ctypes.c_void_p | None:
    nvml = _library()
    if nvml is None:
        return None
    try:
        uuid = gpu_nodes.cuda_device(gpu).uuid
    except gpu_nodes.GpuUnavailable:
        return None
    handle = ctypes.c_void_p()
    if uuid is None or nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(handle)) != 0:
        return None
    return handle


def idle(gpu: str) -> bool | None:
    """Whether the grader's CUDA device ``gpu`` ran no kernel in NVML's last sample; None when NVML cannot say."""
    with _LOCK:
        handle = _handle(gpu)
        if handle is None:
            return None
        rates = _Utilization()
        if _library().nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) != 0:
            return None
        return rates.gpu == 0
