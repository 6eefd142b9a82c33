"""The CPUs the sandboxed runs share: each run handed a set, the least used first, and the default share per run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence


class CpuPool:
    """Hands each sandboxed run a set of CPUs, the least used first: parallel runs get disjoint sets while there
    are enough CPUs, and share them evenly when there are not. Thread-safe (the scheduler runs stages in threads)."""

    def __init__(self, cpus: Sequence[int]) -> None:
        self._users = dict.fromkeys(sorted(cpus), 0)
        self._lock = threading.Lock()

    def take(self, count: int) -> list[int]:
        with self._lock:
            chosen = sorted(sorted(self._users, key=lambda cpu: (self._users[cpu], cpu))[:max(1, count)])
            for cpu in chosen:
                self._users[cpu] += 1
            return chosen

    def give_back(self, cpus: Sequence[int]) -> None:
        with self._lock:
            for cpu in cpus:
                self._users[cpu] -= 1


CPUS = CpuPool(sorted(os.sched_getaffinity(0)))


def default_cpus_per_run(parallel: int, at_least: int = 1, cpus: int | None = None) -> int:
    """The grader's ``cpus`` (default: all it may use) shared evenly among ``parallel`` runs, and ``at_least``
    each while there are that many (the sets then overlap)."""
    cpus = cpus or len(os.sched_getaffinity(0))
    return max(min(at_least, cpus), cpus // max(1, parallel))
