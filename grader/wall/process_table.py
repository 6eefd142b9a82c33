"""A sandboxed run's process tree, for its monitor, which asks ten times a second to sum the tree's memory.

Where the kernel lists each thread's children (``/proc/PID/task/TID/children``, Linux's CONFIG_PROC_CHILDREN),
``tree`` walks down from the run's root: its cost follows the size of the tree. Elsewhere it falls back on the
machine's whole process table, where finding a tree means reading every process's parent: with a dozen runs,
their builds and judges on a host of hundreds of processes, separate looks would cost the grader more than a
core, and its threads (the GPU gate's pauses, the judges' watchdogs) would wait for Python's lock while a judge
holds its GPU alone. So one look of the table serves every monitor for ``max_age`` seconds; a process started
since is counted at the next look. On a 2-core test machine the table's looks were the largest CPU cost of the
grader's own process. Pausing and killing a run look afresh (``grader.gpu.gpu_gate.process_tree``).
"""

from __future__ import annotations

import os
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


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid``, as the kernel lists them. OSError once ``pid`` is gone."""
    found: list[int] = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as listed:
                found.extend(int(child) for child in listed.read().split())
        except FileNotFoundError:
            continue  # the thread ended since the listing
    return found


def _walk(pid: int) -> list[psutil.Process]:
    try:
        found = [psutil.Process(pid)]
    except psutil.Error:
        return []
    todo = [pid]
    while todo:
        try:
            children = _children(todo.pop())
        except OSError:
            continue  # ended since its parent listed it
        for child in children:
            try:
                found.append(psutil.Process(child))
            except psutil.Error:
                continue
            todo.append(child)
    return found


def kernel_lists_children() -> bool:
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


_WALK = kernel_lists_children()


def tree(pid: int) -> list[psutil.Process]:
    """The process ``pid`` and its descendants ([] once ``pid`` is gone): walked down from ``pid`` where the kernel
    lists children, else from the shared table's last look."""
    return _walk(pid) if _WALK else TABLE.tree(pid)
