"""A run's process tree: walked down the kernel's child lists, or from the shared table (whole trees, one look of
/proc per period)."""

import subprocess
import sys
import time

import psutil
import pytest

from grader.wall import process_table
from grader.wall.process_table import ProcessTable

_GRANDCHILD = ("import subprocess, sys, time; "
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)")


def test_a_tree_holds_the_root_its_children_and_theirs():
    child = subprocess.Popen([sys.executable, "-c", _GRANDCHILD])
    try:
        deadline = time.monotonic() + 20
        while len(psutil.Process(child.pid).children(recursive=True)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        expected = {child.pid, *(p.pid for p in psutil.Process(child.pid).children(recursive=True))}
        assert len(expected) == 2
        assert {p.pid for p in ProcessTable(max_age=0.0).tree(child.pid)} == expected
    finally:
        for process in psutil.Process(child.pid).children(recursive=True):
            process.kill()
        child.kill()
        child.wait()


def test_a_gone_process_has_no_tree():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert ProcessTable().tree(child.pid) == []


def test_monitors_asking_within_the_period_share_one_look():
    table = ProcessTable(max_age=60.0)
    for _ in range(20):
        assert table.tree(psutil.Process().pid)[0].pid == psutil.Process().pid
    assert table.looks == 1
    fresh = ProcessTable(max_age=0.0)
    for _ in range(3):
        fresh.tree(psutil.Process().pid)
    assert fresh.looks == 3


def test_a_process_started_after_a_look_is_found_at_the_next():
    table = ProcessTable(max_age=0.2)
    table.tree(psutil.Process().pid)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid not in {p.pid for p in table.tree(psutil.Process().pid)}
        time.sleep(0.25)
        assert child.pid in {p.pid for p in table.tree(psutil.Process().pid)}
    finally:
        child.kill()
        child.wait()


def test_the_walk_down_the_kernels_child_lists_finds_the_same_tree_as_the_table():
    if not process_table.kernel_lists_children():
        pytest.skip("this kernel has no /proc/PID/task/TID/children: the table serves (tested above)")
    child = subprocess.Popen([sys.executable, "-c", _GRANDCHILD])
    try:
        deadline = time.monotonic() + 20
        while len(psutil.Process(child.pid).children(recursive=True)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        walked = {p.pid for p in process_table.tree(child.pid)}
        assert len(walked) == 2 and walked == {p.pid for p in ProcessTable(max_age=0.0).tree(child.pid)}
    finally:
        for process in psutil.Process(child.pid).children(recursive=True):
            process.kill()
        child.kill()
        child.wait()
    assert process_table.tree(child.pid) == []


def test_without_child_lists_the_tree_comes_from_the_table(monkeypatch):
    monkeypatch.setattr(process_table, "_WALK", False)
    monkeypatch.setattr(process_table, "TABLE", ProcessTable(max_age=0.0))
    monkeypatch.setattr(process_table, "_walk", lambda pid: pytest.fail("walked without child lists"))
    me = psutil.Process().pid
    assert process_table.tree(me)[0].pid == me
    assert process_table.TABLE.looks == 1
