"""Device work of a chosen duration that runs asynchronously, as every GPU launch does.

Week 1 Day 2's judged answer (``gpu_time_ms``) is timed on this work, so it lives beside that day's spec
(``w1d2_gpu_arrays``): the grader and the sandbox's recorder load it with the spec and never a day helper.
The day's notebook reaches it as ``course.days.async_work``, which re-exports it.

A GPU launch only queues work: the call returns at once and the GPU runs it later, in order with
the rest of its stream. Day 2 uses this module to show what that means for timing, on any machine:

- On a GPU, ``launch(ms, "cuda")`` queues one small Triton kernel that spins until the GPU's
  nanosecond clock (``%globaltimer``) has advanced by ``ms``. Its duration does not depend on the
  SM clock speed, so two processes that run it agree on how long it takes.
- On a CPU there is nothing asynchronous to time, so the module provides a simulated device: one
  background thread runs the queued work in order (each piece simply lasts its duration), while
  ``launch(ms, "cpu")`` returns at once, like a GPU launch.

``synchronize(device)`` waits until everything queued on that device has finished: on a GPU it is
``torch.cuda.synchronize()``, on a CPU it waits for the simulated device. Notebooks call it as
``course.device.synchronize()``, which picks the course's device.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import torch
import triton.language as tl

DEVICES = ("cuda", "cpu")
# The GPU kernel takes its duration as a 32-bit integer of nanoseconds (a larger value would make Triton
# compile a second, 64-bit variant at the first such launch); longer work is queued as several launches.
MAX_LAUNCH_MS = 1000.0


class SimulatedDevice:
    """An in-order queue of timed work, run by one background thread: a stand-in for a GPU stream."""

    def __init__(self) -> None:
        self._queue: queue.Queue[float] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def launch(self, seconds: float) -> None:
        """Queue ``seconds`` of work and return at once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="course-simulated-device", daemon=True)
                self._thread.start()
        self._queue.put(seconds)

    def _run(self) -> None:
        while True:
            seconds = self._queue.get()
            try:
                time.sleep(seconds)
            finally:
                self._queue.task_done()

    def synchronize(self) -> None:
        """Block until every piece of work queued so far has finished."""
        self._queue.join()

    @property
    def busy(self) -> bool:
        return self._queue.unfinished_tasks > 0


SIMULATED = SimulatedDevice()

def spin_body(out_ptr, duration_ns):
    """Triton kernel body: spin until the GPU's nanosecond clock has moved on by ``duration_ns``."""
    # is_pure=False: the clock is read again on every iteration, never hoisted out of the loop.
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < duration_ns:
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                        pack=1)
    tl.store(out_ptr, now - start)


# The duration is never specialised: a value divisible by 16 (or equal to 1) would otherwise compile a new variant.
SPIN_JIT_OPTIONS = {"do_not_specialize": ["duration_ns"]}
_spin: dict[str, Any] = {}


def _gpu_spin() -> tuple[Any, torch.Tensor]:
    """The spinning kernel and its one-element output, compiled and run once on first use.

    Decorated here rather than at import: Triton chooses between compiling and interpreting when a
    kernel is decorated, and by the time this runs ``course.device`` has made that choice.
    """
    if "kernel" not in _spin:
        import triton

        kernel = triton.jit(**SPIN_JIT_OPTIONS)(spin_body)
        out = torch.zeros(1, dtype=torch.int64, device="cuda")
        kernel[(1,)](out, 1000, num_warps=1)  # compiles now, so no later launch includes compilation
        torch.cuda.synchronize()
        _spin.update(kernel=kernel, out=out)
    return _spin["kernel"], _spin["out"]


def prepare(device: str) -> None:
    """Make the first launch on ``device`` as cheap as every later one (on a GPU: compile the kernel)."""
    _check(device)
    if device == "cuda":
        _gpu_spin()


def launch(ms: float, device: str) -> None:
    """Queue ``ms`` milliseconds of work on ``device`` ("cuda" or "cpu") and return without waiting for it."""
    _check(device)
    if not ms >= 0:
        raise ValueError(f"a duration must be a non-negative number of milliseconds, not {ms!r}")
    if device == "cpu":
        SIMULATED.launch(ms / 1e3)
        return
    kernel, out = _gpu_spin()
    remaining = float(ms)
    while True:
        part = min(remaining, MAX_LAUNCH_MS)
        kernel[(1,)](out, int(part * 1e6), num_warps=1)
        remaining -= part
        if remaining <= 0:
            return


def synchronize(device: str) -> None:
    """Wait until all work queued on ``device`` has finished."""
    _check(device)
    if device == "cuda":
        torch.cuda.synchronize()
    else:
        SIMULATED.synchronize()


def _check(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, not {device!r}")


class Workload:
    """A callable whose every call queues ``planned_ms`` of work on ``device`` and returns at once."""

    __slots__ = ("device", "planned_ms")

    def __init__(self, planned_ms: float, device: str) -> None:
        _check(device)
        self.planned_ms = float(planned_ms)
        self.device = device

    def __call__(self) -> None:
        launch(self.planned_ms, self.device)

    def __repr__(self) -> str:
        return f"<work queued on the {self.device} device by each call>"
