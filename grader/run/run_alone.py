"""A sandboxed run's requests to hold its GPU alone, for the few seconds where its own GPU work must be clean.

Runs share their GPU and nothing they do is timed by the judge, but a host exercise's graded answer may be a
time the student's code measures (Week 1 Day 2's), which beside other runs comes out worse than on a quiet GPU.
(An autotuner's pick is not such an answer: the judge times its candidates itself, ``grader.judge.config_choice``.) So
the recorder (``course.recorder.alone``) may ask, around exactly that work, for the GPU alone: the other runs on
it are paused at the gate as for a judge's timing, and the asking run goes on.

The request travels through two FIFOs in the run's scratch directory, opened here before the sandbox starts
(so a run that replaces them only loses its own requests): a line ``alone`` or ``release`` on ``ask``, a byte on
``grant`` (``1`` held, ``0`` refused). Each run has a budget of held seconds; past it a hold is ended and further
requests are refused, so a run that asks and never releases delays the others by at most that much. Anything
else written on ``ask`` is ignored.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from pathlib import Path

from grader.gpu.gpu_gate import Hold, Pausable

ENV = "COURSE_GPU_ALONE"  # the folder holding the two FIFOs, as the run sees it
BUDGET_SECONDS = 30.0
MAX_LINE = 64


class AloneChannel:
    """One run's requests for its GPU alone, answered from a thread of the grader. Use as a context."""

    def __init__(self, folder: Path, user: Pausable, budget: float = BUDGET_SECONDS) -> None:
        if user.gate is None:
            raise ValueError("a run can hold its GPU alone only where a gate shares it")
        self.folder, self._user, self._budget = folder, user, budget
        self.held = 0.0  # seconds this run held its GPU alone, drains included
        self.holds = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ask = self._grant = -1

    def __enter__(self) -> AloneChannel:
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in ("ask", "grant"):
            with contextlib.suppress(FileNotFoundError):
                (self.folder / name).unlink()
            os.mkfifo(self.folder / name, 0o600)
        # Opened read-write: neither open waits for the other side, and the ask FIFO never reads as ended.
        self._ask = os.open(self.folder / "ask", os.O_RDWR | os.O_NONBLOCK)
        self._grant = os.open(self.folder / "grant", os.O_RDWR | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._serve, name="run-alone", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for fd in (self._ask, self._grant):
            with contextlib.suppress(OSError):
                os.close(fd)

    def environment(self) -> dict[str, str]:
        return {ENV: str(self.folder)}

    def _answer(self, granted: bool) -> None:
        with contextlib.suppress(OSError):  # a full FIFO: a run that never reads its answers
            os.write(self._grant, b"1" if granted else b"0")

    def _serve(self) -> None:
        holding: contextlib.AbstractContextManager[Hold] | None = None
        hold, began = Hold(), 0.0
        pending = b""

        def release() -> None:
            nonlocal holding
            if holding is not None:
                holding.__exit__(None, None, None)
                holding = None
                self.held += hold.held  # measured by the exit, the drain included

        try:
            while not self._stop.is_set():
                left = self._budget - self.held - (time.monotonic() - began if holding is not None else 0.0)
                if holding is not None and left <= 0:
                    release()  # the budget is spent: the other runs go on; this one keeps running shared
                    continue
                ready, _, _ = select.select([self._ask], [], [], min(0.2, max(left, 0.0)) if holding else 0.2)
                if not ready:
                    continue
                with contextlib.suppress(BlockingIOError):
                    pending += os.read(self._ask, 4096)
                *lines, pending = pending.split(b"\n")
                pending = pending[-MAX_LINE:]
                for line in lines:
                    request = line.strip()
                    if request == b"alone" and holding is None:
                        if self._budget - self.held <= 0:
                            self.refused += 1
                            self._answer(False)
                            continue
                        holding = self._user.gate.exclusive(self._user.gpu, keep=self._user)
                        hold = holding.__enter__()
                        began = time.monotonic() - hold.drained
                        self.holds += 1
                        self._answer(True)
                    elif request == b"alone":
                        self._answer(True)  # already held
                    elif request == b"release":
                        release()
        finally:
            release()
