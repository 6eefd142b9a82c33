"""Whether a GPU has finished every kernel queued before a moment, from the driver's own counters (NVML, through
ctypes).

NVML's utilisation is the share of one sample period (1/6 s to 1 s) in which at least one kernel ran, from any
process. ``nvmlDeviceGetUtilizationRates`` gives the last finished period: a period that shows 0 may have ended
before the frozen notebooks queued their last work, which then still runs when a timing starts (a Week 1 Day 2
solution on an H100 measured a 18 ms call at 40 ms that way). So the gate (``grader.gpu.gpu_gate``) calls ``start``
once it has frozen the other notebooks, and the GPU counts as idle only when a sample taken after that shows 0
(``nvmlDeviceGetSamples``); where the driver keeps no samples, the last period's rate is all there is.
"""

from __future__ import annotations

import ctypes
import threading
import time
from functools import cache

from grader.gpu import gpu_nodes

_GPU_UTILIZATION_SAMPLES = 1  # nvmlSamplingType_t
_NOT_FOUND = 6  # nvmlReturn_t: no sample newer than the one given


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Value(ctypes.Union):  # nvmlValue_t
    _fields_ = [("d", ctypes.c_double), ("ui", ctypes.c_uint), ("ul", ctypes.c_ulong), ("ull", ctypes.c_ulonglong),
                ("sll", ctypes.c_longlong), ("si", ctypes.c_int)]


class _Sample(ctypes.Structure):  # nvmlSample_t
    _fields_ = [("timestamp", ctypes.c_ulonglong), ("value", _Value)]


_VALUE_FIELDS = ("d", "ui", "ul", "ull", "sll", "si")  # by nvmlValueType_t
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


def _rate_idle(gpu: str) -> bool | None:
    """Whether NVML's last finished sample period of ``gpu`` ran no kernel; None when NVML cannot say."""
    handle = _handle(gpu)
    if handle is None:
        return None
    rates = _Utilization()
    if _library().nvmlDeviceGetUtilizationRates(handle, ctypes.byref(rates)) != 0:
        return None
    return rates.gpu == 0


def _samples(gpu: str, newer_than: int) -> list[tuple[int, float]] | None:
    """``gpu``'s utilisation samples (timestamp in microseconds, percent) taken after ``newer_than``, oldest first;
    None when NVML keeps none for it."""
    handle = _handle(gpu)
    if handle is None:
        return None
    nvml, kind, count = _library(), ctypes.c_int(), ctypes.c_uint(0)
    since = ctypes.c_ulonglong(newer_than)
    status = nvml.nvmlDeviceGetSamples(handle, _GPU_UTILIZATION_SAMPLES, since, ctypes.byref(kind),
                                       ctypes.byref(count), None)  # how many it may return
    if status == _NOT_FOUND:
        return []
    if status != 0 or not 0 <= kind.value < len(_VALUE_FIELDS):
        return None
    buffer = (_Sample * count.value)()
    status = nvml.nvmlDeviceGetSamples(handle, _GPU_UTILIZATION_SAMPLES, since, ctypes.byref(kind),
                                       ctypes.byref(count), buffer)
    if status == _NOT_FOUND:
        return []
    if status != 0:
        return None
    field = _VALUE_FIELDS[kind.value]
    return sorted((s.timestamp, float(getattr(s.value, field))) for s in buffer[:count.value])


# The longest sample period NVML names is 1 s: a driver that has taken no sample that long after ``start`` is not
# sampling (some pause while the GPU is idle), and the last period's rate decides.
SAMPLE_WAIT_SECONDS = 1.5


class IdleProbe:
    """The gate's idle probe: ``start(gpu)`` once the other users are frozen, then ``probe(gpu)`` until True."""

    def __init__(self, sample_wait: float = SAMPLE_WAIT_SECONDS) -> None:
        self._sample_wait = sample_wait
        self._marks: dict[str, tuple[int | None, float]] = {}

    def start(self, gpu: str) -> None:
        """Only samples taken after this moment count for ``gpu``."""
        with _LOCK:
            samples = _samples(gpu, 0)
            self._marks[gpu] = (samples[-1][0] if samples else None, time.monotonic())

    def __call__(self, gpu: str) -> bool | None:
        """Whether ``gpu`` ran no kernel in its newest sample since ``start`` (False while none is newer, for at
        most ``sample_wait`` seconds); without samples, in its last finished sample period; None when NVML cannot
        say."""
        with _LOCK:
            mark, started = self._marks.get(gpu, (None, 0.0))
            newer = _samples(gpu, mark) if mark is not None else None
            if newer is None or (not newer and time.monotonic() - started > self._sample_wait):
                return _rate_idle(gpu)
            return bool(newer) and newer[-1][1] == 0
