"""Stopping a grader cleanly on SIGTERM, SIGINT or SIGHUP: a TA's Ctrl-C or ``kill``, a closed terminal, Slurm's
preemption or time limit (SIGTERM, then SIGKILL after the cluster's KillWait).

``on_signals()`` makes the first such signal raise ``Stopped`` in the main thread, where Python runs signal
handlers; inside ``deferred()`` (one notebook's result being recorded) it is raised at the section's end instead, so
a result and its gradebook rows are written whole or not at all. The grading then starts nothing new, kills every
process it started (``kill_children``), waits for its threads to unwind (each removes its scratch folder on the
way), releases OUT's lock and exits 128 + the signal's number with one line saying how far it got. Later signals
only say it is stopping already.

SIGKILL cannot be caught. Then a judge dies with the grader (``setpriv --pdeathsig``), a sandboxed run with its
bubblewrap (``--die-with-parent``), OUT's lock with its process (``grader.flow.out_lock``), and the next grader removes
the scratch folders left (``grader.wall.scratch_folders.cleanup_stale``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import psutil

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived: the grading stops, keeping what it finished. ``progress`` says how far it got."""

    def __init__(self, signum: int = signal.SIGINT, progress: str = "") -> None:
        super().__init__(signum, progress)
        self.signum = signum
        self.progress = progress

    @classmethod
    def of(cls, interrupt: KeyboardInterrupt, progress: str) -> Stopped:
        """``interrupt`` (a Stopped, or Python's own KeyboardInterrupt: SIGINT) with ``progress`` said."""
        return cls(interrupt.signum if isinstance(interrupt, Stopped) else signal.SIGINT, progress)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    def line(self) -> str:
        said = f": {self.progress}" if self.progress else ""
        return f"stopped by {signal.Signals(self.signum).name}{said}; run the same command again to finish"


class _State:
    received: int | None = None  # the first stop signal's number, while handlers are installed
    raised = False
    deferring = 0  # deferred() sections open in the main thread


_state = _State()


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state.received is not None:
        # os.write, not print: the main thread may be inside a write to stderr, which print would re-enter
        os.write(2, f"{signal.Signals(signum).name}: stopping already\n".encode())
        return
    _state.received = signum
    if not _state.deferring:
        _state.raised = True
        raise Stopped(signum)


@contextlib.contextmanager
def on_signals() -> Iterator[None]:
    """Within: SIGTERM, SIGINT and SIGHUP stop the grading (``Stopped``). Outside the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.received, _state.raised, _state.deferring = None, False, 0
    previous = {number: signal.signal(number, _handler) for number in SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        _state.received = None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A stop signal arriving within (main thread only) takes effect at the end, once what is inside is written."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    if not _state.deferring and _state.received is not None and not _state.raised:
        _state.raised = True
        raise Stopped(_state.received)


def requested() -> bool:
    """Whether a stop signal has arrived (only while ``on_signals`` is in effect)."""
    return _state.received is not None


def kill_children() -> int:
    """SIGKILL every live process this process started, and theirs, but its multiprocessing helpers (the plot
    drawer, which ends by itself once its queue is cancelled, and Python's resource tracker); returns how many
    were sent the signal."""
    try:
        me = psutil.Process()
        spared = {helper.pid for helper in me.children() if _multiprocessing_helper(helper)}
        children = me.children(recursive=True)
    except psutil.Error:
        return 0
    killed = 0
    for child in children:
        with contextlib.suppress(psutil.Error):  # psutil checks the pid still names the same process
            if child.pid in spared or child.ppid() in spared or child.status() == psutil.STATUS_ZOMBIE:
                continue
            child.kill()
            killed += 1
    return killed


def _multiprocessing_helper(process: psutil.Process) -> bool:
    try:
        return any("multiprocessing" in part for part in process.cmdline())
    except psutil.Error:
        return False
