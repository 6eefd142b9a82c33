"""What a notebook's checks and benchmarks measured, kept in memory for the notebook's own use.

Nothing here is read by the grader: its verdicts come from the judge (``grader.judge.verdict``), never
from what a notebook's process reports about itself.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_events: list[dict[str, Any]] = []
_compile_seconds = 0.0


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, tuple | list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def event(kind: str, **fields: Any) -> None:
    """Record one event in memory."""
    entry = _clean({"kind": kind, "time": time.time(), **fields})
    with _lock:
        _events.append(entry)


def events(kind: str | None = None) -> list[dict[str, Any]]:
    with _lock:
        return [e for e in _events if kind is None or e["kind"] == kind]


def phase(name: str, seconds: float) -> None:
    """Add ``seconds`` of wall time to a phase ("compile", "checks", "benchmarks")."""
    event("phase", name=name, seconds=seconds)


def add_compile_time(seconds: float) -> None:
    global _compile_seconds
    with _lock:
        _compile_seconds += seconds
    phase("compile", seconds)


def compile_seconds() -> float:
    with _lock:
        return _compile_seconds


@contextmanager
def timed_phase(name: str) -> Iterator[None]:
    """Time a block as ``name``, leaving out the compile and autotune time spent inside it."""
    started, compiled_before = time.perf_counter(), compile_seconds()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        phase(name, max(0.0, elapsed - (compile_seconds() - compiled_before)))
