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


def test_a_trees_resident_memory_is_what_the_kernel_reports_for_each_process():
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; block = bytearray(200 * 2**20); "
                               "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"ready"
        table = ProcessTable(max_age=0.0)
        tree = table.tree(holder.pid)
        expected = psutil.Process(holder.pid).memory_info().rss
        assert expected > 200 * 2**20
        assert abs(table.resident_bytes(tree) - expected) < 0.05 * expected
    finally:
        holder.kill()
        holder.wait()


def test_a_process_whose_name_holds_parentheses_and_spaces_is_read():
    # prctl(PR_SET_NAME): /proc/<pid>/stat shows the name between parentheses, unescaped.
    renamed = ("import ctypes, sys, time; ctypes.CDLL(None).prctl(15, b') x (y', 0, 0, 0); "
               "print('ready', flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", renamed], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        assert psutil.Process(child.pid).name() == ") x (y"
        table = ProcessTable(max_age=0.0)
        assert child.pid in {p.pid for p in table.tree(psutil.Process().pid)}
        assert table.resident_bytes(table.tree(child.pid)) > 0
    finally:
        child.kill()
        child.wait()
