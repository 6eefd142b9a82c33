"""The process table that every run's monitor shares: whole trees, and one look of /proc per period."""

import subprocess
import sys
import time

import psutil

from grader.process_table import ProcessTable

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
