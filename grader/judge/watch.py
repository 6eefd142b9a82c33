"""The watched judge's side of its protocol with the watchdog: each step announced with its time limit, the GPU
asked for alone, and the request to be started again after a broken CUDA context.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any, TextIO

# The watched judge (grader.judge.watchdog) reads its steps from this file descriptor, named in this variable.
WATCH_FD = "GRADER_JUDGE_WATCH_FD"


# ... and answers its request for the GPU alone (``Watch.alone``) with one byte on this one.
GRANT_FD = "GRADER_JUDGE_GRANT_FD"


# The watched judge's exit status asking to be started again (its finished parts kept): a student's CUDA error
# broke this process's CUDA context, and the next graded function deserves a fresh one.
START_AGAIN = 75


class StartAgain(BaseException):  # noqa: N818  (a request to leave, like SystemExit: no handler may swallow it)
    """Raised by a watched judge whose CUDA context a student's kernel broke, with graded functions left."""


class Watch:
    """The judge's side of the watchdog: each step it starts, which graded function, and the seconds it may take.

    A step with a limit is student work (a replay or a timed call); ``None`` means the judge's own work, which
    only the judge's per-notebook limit bounds. Without a watchdog (the in-process CPU judge) it says nothing.
    """

    def __init__(self) -> None:
        self.stream: TextIO | None = None
        self.grant: int | None = None

    def connect(self, fd: str | None, grant: str | None = None) -> None:
        self.stream = os.fdopen(int(fd), "w", buffering=1) if fd else None
        self.grant = int(grant) if grant else None

    def _ask(self, request: str) -> None:
        self.stream.write(json.dumps({"request": request}) + "\n")
        if os.read(self.grant, 1) != b"1":
            raise RuntimeError(f"the watchdog did not answer the judge's {request!r} request")

    def device(self) -> None:
        """Say the judge is about to use its GPU at all (until now it has used the CPU only): from here on it is
        one more user of the GPU, paused while another judge holds it alone."""
        if self.stream is not None and self.grant is not None:
            self._ask("device")

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the GPU alone (the watchdog's gate pauses every other user of it) for the GPU work inside."""
        if self.stream is None or self.grant is None:
            yield
            return
        self._ask("gpu")
        try:
            yield
        finally:
            self.stream.write(json.dumps({"request": "release"}) + "\n")

    def step(self, spec: str | None, what: str, seconds: float | None) -> None:
        if self.stream is not None:
            self.stream.write(json.dumps({"spec": spec, "step": what, "seconds": seconds}) + "\n")

    @contextlib.contextmanager
    def running(self, spec: str, what: str, seconds: float | None) -> Iterator[None]:
        self.step(spec, what, seconds)
        try:
            yield
        finally:
            self.step(spec, "checks", None)


WATCH = Watch()


def replay_limit(job: dict[str, Any], spec: Any, shape: tuple[int, ...]) -> float | None:
    """Seconds one replay of the student's plan at ``shape`` may take: the floor, or more where the reference
    solution's slowest benchmark replay, scaled to this shape's work, times the factor is longer."""
    watchdog = job.get("watchdog")
    if not isinstance(watchdog, dict):
        return None
    per_work = float((watchdog.get("reference") or {}).get(spec.id) or 0.0)
    scaled = float(watchdog["factor"]) * per_work * spec.work(shape) if per_work > 0 else 0.0
    return max(float(watchdog["floor"]), scaled)
