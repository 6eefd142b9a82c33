"""Who may use a GPU while a judge times on it: nobody else.

Sandboxed notebook runs share their GPU; nothing they do is timed. A judge's timing must have the GPU alone,
and a run cannot be asked to stop using it, so the gate freezes it: ``exclusive()`` stops every process of
every run attached to that GPU (SIGSTOP, which no process can catch or ignore), waits until the GPU has
finished the work those runs had already queued (``idle``), and lets them go on (SIGCONT) when the holder is
done. One holder at a time per GPU; the others wait. A run attached while its GPU is held starts frozen.
Where the GPU does not go idle (a frozen run's kernel that never ends), the driver's per-process accounting
(``grader.gpu.gpu_work``) names the runs whose processes still ran kernels after the drain's limit: those runs are
stopped at once, each with a status of its own (``GPU_HANG``), and the drain goes on. Where it cannot name one,
the runs are let go on for a while, so that their own limits can stop it, and frozen and drained again; a hold
whose GPU never went idle is ``busy``, and the judge's verdict from it is a grader fault, not a grade
(grader.judge.watchdog).

The seconds a run spends frozen are counted (``Pausable.paused_seconds``), so that its time limit counts only
the time it could run. The cell limits inside a notebook leave them out too, by a clock of their own that stands
still while the run is stopped (grader.wall.cell_limit).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil

# GPU index -> idle now? (None: cannot tell). A probe with a ``start(gpu)`` method is told when the GPU's other users
# are frozen, so that it can count only what ran after that (grader.gpu.gpu_idle.IdleProbe).
IdleProbe = Callable[[str], bool | None]
# (GPU index, a moment in microseconds) -> the host pids whose kernels ran on it after that (None: cannot tell);
# grader.gpu.gpu_work.busy_since.
BusyProbe = Callable[[str, int], set[int] | None]
GPU_HANG = "gpu_hang"  # the sandbox status of a run stopped because its kernel never ended
GPU_MEMORY = "gpu_memory"  # the sandbox status of a run stopped for holding more than its share of GPU memory
# Kernels a frozen run still ran in the last CULPRIT_WINDOW_US of samples, CULPRIT_AFTER_SECONDS into a drain, are
# its own: nothing it queued before the freeze lasts that long in an honest notebook (the course's are milliseconds).
CULPRIT_WINDOW_US = 2_000_000
# How long a drain waits before asking the driver for such a kernel: far longer than any honest queue of the course's
# kernels takes to run out (they synchronise every few milliseconds of work).
CULPRIT_AFTER_SECONDS = 10.0
DRAIN_POLL_SECONDS = 0.05
DRAIN_LIMIT_SECONDS = 30.0
SETTLE_SECONDS = 0.25  # without a probe: the wait that lets in-flight work of frozen runs end
# A GPU still busy after a drain: a frozen run left a kernel on it that does not end (a stopped process cannot end
# it, and its time limits stand still while it is frozen). The runs are let go on for THAW_SECONDS, so that their
# limits can stop such a run, then frozen and drained again (RETRY_DRAIN_SECONDS), up to BUSY_LIMIT_SECONDS in all.
THAW_SECONDS = 10.0
RETRY_DRAIN_SECONDS = 10.0
BUSY_LIMIT_SECONDS = 900.0


def process_tree(pid: int | psutil.Process) -> list[psutil.Process]:
    """The process ``pid`` and all its descendants ([] once it is gone; for a ``psutil.Process``, also once its
    pid belongs to another process)."""
    try:
        root = pid if isinstance(pid, psutil.Process) else psutil.Process(pid)
        if not root.is_running():
            return []
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _signal_tree(root: psutil.Process, signum: int) -> None:
    """Send ``signum`` to every process of the tree under ``root``, parents first, until no new one appears
    (a process signalled SIGSTOP cannot start another; one started before it stopped is found on the next look)."""
    done: set[int] = set()
    for _ in range(50):
        fresh = [p for p in process_tree(root) if p.pid not in done]
        if not fresh:
            return
        for process in fresh:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signum)
            done.add(process.pid)


@dataclass
class Pausable:
    """One run's processes, as the gate sees them: the root process once started, and its frozen seconds."""

    gpu: str
    gate: GpuGate | None = None
    # psutil's handle, not the bare pid: it signals nothing once the pid is another process's
    process: psutil.Process | None = None
    _paused_total: float = 0.0
    _paused_since: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # (sandbox status, message) once the grader stopped the run for what it did on the GPU (GPU_HANG, GPU_MEMORY)
    stopped: tuple[str, str] | None = None

    def pids(self) -> set[int]:
        """The host pids of the run's processes now."""
        return {process.pid for process in process_tree(self.process)} if self.process is not None else set()

    def stop(self, status: str, message: str) -> None:
        """End the run at once (every process of it, frozen or not), saying why; its sandbox reports ``status``."""
        with self._lock:
            if self.stopped is None:
                self.stopped = (status, message)
            if self.process is not None:
                _signal_tree(self.process, signal.SIGKILL)

    def attach(self, pid: int) -> None:
        """The run's process exists now (frozen at once when its GPU is held)."""
        if self.gate is None:
            self._set(pid)
        else:
            self.gate.attach(self, pid)

    def _set(self, pid: int) -> None:
        with contextlib.suppress(psutil.Error):  # gone already: nothing to freeze
            self.process = psutil.Process(pid)

    def paused_seconds(self) -> float:
        with self._lock:
            ongoing = time.monotonic() - self._paused_since if self._paused_since is not None else 0.0
            return self._paused_total + ongoing

    def _freeze(self) -> None:
        with self._lock:
            if self.process is None or self._paused_since is not None:
                return
            self._paused_since = time.monotonic()
            _signal_tree(self.process, signal.SIGSTOP)

    def _thaw(self) -> None:
        with self._lock:
            if self._paused_since is None:
                return
            if self.process is not None:
                _signal_tree(self.process, signal.SIGCONT)
            self._paused_total += time.monotonic() - self._paused_since
            self._paused_since = None


@dataclass
class Hold:
    """One exclusive hold of a GPU: seconds waited for it, spent draining, and held in all (drain included).
    ``busy``: the GPU never went idle with the other runs frozen, so nothing timed in this hold is the holder's own."""

    waited: float = 0.0
    drained: float = 0.0
    held: float = 0.0
    drain_note: str = ""
    busy: bool = False


class GpuGate:
    """The shared and exclusive uses of the grader's GPUs (by CUDA index). Thread-safe."""

    def __init__(self, idle: IdleProbe | None = None, drain_limit: float = DRAIN_LIMIT_SECONDS,
                 thaw_seconds: float = THAW_SECONDS, retry_drain: float = RETRY_DRAIN_SECONDS,
                 busy_limit: float = BUSY_LIMIT_SECONDS, busy_processes: BusyProbe | None = None,
                 now_us: Callable[[], int] = lambda: int(time.time() * 1e6),
                 culprit_after: float = CULPRIT_AFTER_SECONDS) -> None:
        self._idle = idle
        self._culprit_after = culprit_after
        self._busy_processes = busy_processes
        self._now_us = now_us
        self._drain_limit = drain_limit
        self._thaw_seconds = thaw_seconds
        self._retry_drain = retry_drain
        self._busy_limit = busy_limit
        self._lock = threading.Lock()
        self._exclusive: dict[str, threading.Lock] = {}
        self._held: set[str] = set()
        self._users: dict[str, list[Pausable]] = {}
        self.holds: list[tuple[str, float, float]] = []  # (GPU, held from, to) by ``time.monotonic``, as they end
        self.stops: list[tuple[str, float, str]] = []  # (GPU, when by ``time.monotonic``, status) of each run stopped

    def _gpu_lock(self, gpu: str) -> threading.Lock:
        with self._lock:
            return self._exclusive.setdefault(gpu, threading.Lock())

    @contextlib.contextmanager
    def shared(self, gpu: str) -> Iterator[Pausable]:
        """A run's use of ``gpu``: ``attach(pid)`` the handle once its process exists; detached on leaving."""
        user = Pausable(gpu, self)
        with self._lock:
            self._users.setdefault(gpu, []).append(user)
        try:
            yield user
        finally:
            with self._lock:
                self._users[gpu].remove(user)
                user._thaw()  # never leave a process stopped behind (the caller kills what remains)

    def attach(self, user: Pausable, pid: int) -> None:
        """The run's process exists now; frozen at once when its GPU is held."""
        with self._lock:  # freezing under the gate's lock: a hold cannot end between the look and the freeze
            user._set(pid)
            if user.gpu in self._held:
                user._freeze()

    def busy(self, gpu: str) -> bool:
        """Whether a holder has ``gpu`` alone right now."""
        with self._lock:
            return gpu in self._held

    @contextlib.contextmanager
    def exclusive(self, gpu: str, keep: Pausable | None = None) -> Iterator[Hold]:
        """Hold ``gpu`` alone: the runs on it frozen and its queued work finished before this yields. ``keep``: a
        user of ``gpu`` that holds it (a run asking for it alone, ``grader.run.run_alone``), so it goes on."""
        hold = Hold()
        asked = time.monotonic()
        lock = self._gpu_lock(gpu)
        lock.acquire()
        began = time.monotonic()
        hold.waited = began - asked
        try:
            with self._lock:
                self._held.add(gpu)
            self._freeze_users(gpu, keep)
            # First a short drain: a frozen run's kernel still running after it is named by the driver and its run
            # stopped, so that the others are not kept frozen for the whole drain.
            idle, hold.drain_note = self._drain(gpu, min(self._culprit_after, self._drain_limit))
            if idle is False and self.stop_culprits(gpu, keep, time.monotonic() - began):
                idle, hold.drain_note = self._drain(gpu, self._retry_drain)
            elif idle is False and self._drain_limit > self._culprit_after:
                idle, hold.drain_note = self._drain(gpu, self._drain_limit - self._culprit_after)
            tries = 1
            while idle is False and time.monotonic() - began < self._busy_limit:
                self._thaw_users(gpu)
                time.sleep(self._thaw_seconds)
                self._freeze_users(gpu, keep)
                idle, hold.drain_note = self._drain(gpu, self._retry_drain)
                tries += 1
            if idle is False:
                hold.busy = True
                hold.drain_note = (f"the GPU was still busy after {time.monotonic() - began:.0f} s and {tries} "
                                   "drains with the other notebooks paused (their runs were let go on between "
                                   "drains, so that their own limits could end the work)")
            hold.drained = time.monotonic() - began
            yield hold
        finally:
            with self._lock:
                self._held.discard(gpu)
                for user in self._users.get(gpu, []):
                    user._thaw()
                self.holds.append((gpu, began, time.monotonic()))
            hold.held = time.monotonic() - began
            lock.release()

    def users(self, gpu: str) -> list[Pausable]:
        with self._lock:
            return list(self._users.get(gpu, []))

    def stop(self, user: Pausable, status: str, message: str) -> None:
        """Stop one run of ``user.gpu`` for what it did there, and remember when (``stops``)."""
        user.stop(status, message)
        with self._lock:
            self.stops.append((user.gpu, time.monotonic(), status))

    def stop_culprits(self, gpu: str, keep: Pausable | None, waited: float) -> list[Pausable]:
        """Stop the frozen runs of ``gpu`` whose kernels still ran in the last moments: frozen for ``waited`` s, such
        a kernel is one that does not end. Returns them ([] where the driver cannot name any)."""
        if self._busy_processes is None:
            return []
        busy = self._busy_processes(gpu, self._now_us() - CULPRIT_WINDOW_US)
        if not busy:
            return []
        culprits = [user for user in self.users(gpu) if user is not keep and user.pids() & busy]
        for user in culprits:
            self.stop(user, GPU_HANG, f"a kernel launched in your notebook ran more than {waited:.0f} s without "
                      "finishing; your notebook was stopped there (look for a loop whose exit condition never "
                      "becomes true, or a barrier that not every thread reaches)")
        return culprits

    def _freeze_users(self, gpu: str, keep: Pausable | None) -> None:
        with self._lock:
            for user in self._users.get(gpu, []):
                if user is not keep:
                    user._freeze()

    def _thaw_users(self, gpu: str) -> None:
        with self._lock:
            for user in self._users.get(gpu, []):
                user._thaw()

    def _drain(self, gpu: str, limit: float) -> tuple[bool | None, str]:
        """Wait up to ``limit`` s until ``gpu`` has no kernel running (two idle readings in a row): whether it went
        idle (None: it cannot be told, after a fixed wait), and a note where it did not."""
        if self._idle is None:
            time.sleep(SETTLE_SECONDS)
            return None, "no GPU utilisation probe: waited a fixed moment for queued work"
        deadline, idle_in_a_row = time.monotonic() + limit, 0
        start = getattr(self._idle, "start", None)
        if start is not None:
            start(gpu)
        while time.monotonic() < deadline:
            idle = self._idle(gpu)
            if idle is None:
                time.sleep(SETTLE_SECONDS)
                return None, "the GPU's utilisation could not be read: waited a fixed moment for queued work"
            idle_in_a_row = idle_in_a_row + 1 if idle else 0
            if idle_in_a_row >= 2:
                return True, ""
            time.sleep(DRAIN_POLL_SECONDS)
        return False, f"the GPU was still busy {limit:.0f} s after the other notebooks were paused"
