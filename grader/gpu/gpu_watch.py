"""The runs sharing each GPU, watched while they run: one run's kernel or memory must not cost its neighbours.

Every ``interval`` seconds, for each GPU:

- a run whose processes hold more than ``memory_limit`` bytes of the GPU's memory is stopped at once (status
  ``gpu_memory``), before its neighbours' allocations fail;
- a run whose kernels have kept the GPU busy in every look for ``busy_seconds`` (20) straight gets a drain: a hold of
  the gate with nothing timed, in which a kernel that never ends is found by the driver's per-process accounting
  and its run stopped (``grader.gpu.gpu_gate``, status ``gpu_hang``). An honest run that is simply busy loses a moment
  (its kernels end within the drain); the others are frozen no longer than a drain.

No judge needs to be waiting for either. The driver's numbers come from ``grader.gpu.gpu_work``; where it cannot tell,
nothing is stopped here and the runs' own limits end what never ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from grader.gpu.gpu_gate import GPU_MEMORY, BusyProbe, GpuGate, Pausable

WATCH_SECONDS = 1.0
# Well above the longest honest kernel of the course (milliseconds) and below a minute.
BUSY_SECONDS = 20.0
MemoryProbe = Callable[[str], dict[int, int] | None]  # GPU index -> bytes held by each host pid


class RunWatch:
    """A thread of the grader's that watches ``gpus`` (CUDA indices) of ``gate`` from ``__enter__`` to ``__exit__``;
    ``check()`` is one round of it."""

    def __init__(self, gate: GpuGate, gpus: tuple[str, ...], busy_processes: BusyProbe,
                 memory_by_process: MemoryProbe, memory_limit: dict[str, int | None],
                 busy_seconds: float = BUSY_SECONDS, interval: float = WATCH_SECONDS,
                 now_us: Callable[[], int] = lambda: int(time.time() * 1e6)) -> None:
        self._gate, self._gpus = gate, gpus
        self._busy_processes, self._memory_by_process = busy_processes, memory_by_process
        self._memory_limit, self._busy_seconds, self._interval = memory_limit, busy_seconds, interval
        self._now_us = now_us
        self._last_look = {gpu: now_us() for gpu in gpus}
        self._busy_for: dict[int, float] = {}  # id(Pausable) -> seconds busy in every look since
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="gpu-watch", daemon=True)

    def __enter__(self) -> RunWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            self.check()

    def check(self) -> None:
        watched = {id(user) for gpu in self._gpus for user in self._gate.users(gpu)}
        self._busy_for = {key: seconds for key, seconds in self._busy_for.items() if key in watched}
        for gpu in self._gpus:
            users = [user for user in self._gate.users(gpu) if user.stopped is None]
            self._enforce_memory(gpu, users)
            self._find_long_kernels(gpu, [user for user in users if user.stopped is None])

    def _enforce_memory(self, gpu: str, users: list[Pausable]) -> None:
        limit = self._memory_limit.get(gpu)
        held = self._memory_by_process(gpu) if limit else None
        if not held:
            return
        for user in users:
            used = sum(held.get(pid, 0) for pid in user.pids())
            if used > limit:
                self._gate.stop(user, GPU_MEMORY, f"your notebook used {used / 2**30:.1f} GiB of GPU memory; the "
                                f"limit is {limit / 2**30:.1f} GiB (the GPU is shared by the class's runs): it was "
                                "stopped there")

    def _find_long_kernels(self, gpu: str, users: list[Pausable]) -> None:
        since, self._last_look[gpu] = self._last_look[gpu], self._now_us()
        elapsed = (self._last_look[gpu] - since) / 1e6
        busy = None if self._gate.busy(gpu) else self._busy_processes(gpu, since)
        suspects = []
        for user in users:
            key = id(user)
            if busy is not None and user.pids() & busy:
                self._busy_for[key] = self._busy_for.get(key, 0.0) + elapsed
            else:
                self._busy_for[key] = 0.0  # idle, or a judge held the GPU: its kernels ended then
            if self._busy_for[key] >= self._busy_seconds:
                suspects.append(user)
        if suspects:
            with self._gate.exclusive(gpu):  # the drain finds a kernel that never ends and stops its run
                pass
            for user in users:
                self._busy_for[id(user)] = 0.0
