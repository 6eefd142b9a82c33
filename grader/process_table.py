"""One look at the machine's process table, shared by every sandboxed run's monitor.

Each run's monitor asks for its process tree ten times a second to sum its memory. Finding a tree means reading
every process's parent from /proc, so with a dozen runs, their builds and judges on a host of hundreds of
processes, separate looks cost the grader more than a core: its threads (the GPU gate's pauses, the judges'
watchdogs) then wait for Python's lock while a judge holds its GPU alone. One look serves every monitor for
``max_age`` seconds; a process started since is counted at the next look. Pausing and killing a run look afresh
(``grader.gpu_gate.process_tree``).
"""

from __future__ import annotations

import threading
import time

import psutil


class ProcessTable:
    """The machine's processes by parent, read at most once every ``max_age`` seconds. Thread-safe."""

    def __init__(self, max_age: float = 0.1) -> None:
        self._max_age = max_age
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._children: dict[int, list[psutil.Process]] = {}
        self.looks = 0  # how often /proc was read (the tests count them)

    def _look(self) -> dict[int, list[psutil.Process]]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._max_age:
                children: dict[int, list[psutil.Process]] = {}
                for process in psutil.process_iter(["ppid"]):
                    parent = process.info.get("ppid")
                    if parent is not None:
                        children.setdefault(parent, []).append(process)
                self._children, self._read_at = children, time.monotonic()
                self.looks += 1
            return self._children

    def tree(self, pid: int) -> list[psutil.Process]:
        """The process ``pid`` and its descendants as of the last look ([] once ``pid`` is gone)."""
        try:
            root = psutil.Process(pid)
        except psutil.Error:
            return []
        children = self._look()
        found, todo = [root], [pid]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child.pid)
        return found


TABLE = ProcessTable()
