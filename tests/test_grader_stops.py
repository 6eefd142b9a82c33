"""One grader per output folder, and a grader stopped by a signal leaves nothing behind.

The lock's rules on their own first (grader/flow/out_lock.py: a record of a dead grader, another host's record, a
filesystem without flock); then real graders (``python -m grader grade`` on three copies of the Day 1 solution, on
the CPU): a second and a third started while the first grades its OUT, and one stopped by SIGTERM mid-class, whose
next run finishes the class as a run never stopped does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from grader import cli
from grader.flow import out_lock
from grader.intake.layout import REPO, SOLUTIONS

DAY1 = SOLUTIONS / "week1" / "day1_host_baseline.ipynb"
STUDENTS = ("ann", "bob", "cy")
TOTAL = 21  # each student: Day 1, and week 1's six other notebooks missing


def _record(path: Path, pid: int, host: str, since: float, command: str = "python -m grader grade") -> None:
    since_text = datetime.fromtimestamp(since, UTC).isoformat()
    path.write_text(f"pid: {pid}\nhost: {host}\nsince: {since_text}\ncommand: {command}\n")


def _take(out: Path) -> None:
    with out_lock.held(out, log=lambda line: None):
        pass


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _holder(out: Path) -> subprocess.Popen[str]:
    """Another process holding OUT's lock until it is killed; started once it holds it."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom grader.flow import out_lock\n"
            "with out_lock.held(Path(sys.argv[1]), log=lambda line: None):\n"
            "    print('held', flush=True)\n    time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_lock_left_by_a_grader_that_is_gone_is_cleared_saying_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _record(out / out_lock.LOCK_NAME, _dead_pid(), socket.gethostname(), time.time() - 60)
    said: list[str] = []
    with out_lock.held(out, log=said.append):
        assert f"pid: {os.getpid()}\n" in (out / out_lock.LOCK_NAME).read_text()
        with out_lock.held(out, log=said.append):  # the same process again: counted, not taken twice
            pass
        assert out_lock.busy(out) is None  # this process's own lock does not count against it
    assert len(said) == 1 and "locked by a grader that is gone" in said[0], said
    assert (out / out_lock.LOCK_NAME).read_text() == ""  # released: empty, and free
    with out_lock.held(out, log=said.append):  # an empty lock file holds nothing
        pass
    assert len(said) == 1


def test_a_lock_held_by_a_live_grader_refuses_naming_it_until_it_dies(tmp_path, capsys):
    out = tmp_path / "out"
    holder = _holder(out)
    try:
        with pytest.raises(out_lock.OutBusy, match=f"pid {holder.pid} on {re.escape(socket.gethostname())}, since"):
            _take(out)
        assert cli.main(["export", "--out", str(out)]) == 2  # commands that write OUT refuse too
        assert f"another grader is grading {out}: pid {holder.pid}" in capsys.readouterr().err
    finally:
        holder.kill()  # SIGKILL: the flock dies with its process
        holder.wait()
    said: list[str] = []
    with out_lock.held(out, log=said.append):
        pass
    assert said and "gone" in said[0]


def test_another_hosts_record_counts_while_it_is_refreshed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / out_lock.LOCK_NAME
    _record(lock, 4242, "another-node", time.time() - 600)
    # flock may not reach across hosts (NFS mounted nolock, Lustre's localflock): a refreshed record refuses
    with pytest.raises(out_lock.OutBusy, match="pid 4242 on another-node.*refreshed"):
        _take(out)
    stale = time.time() - out_lock.STALE_SECONDS - 60
    os.utime(lock, (stale, stale))
    with out_lock.held(out, log=lambda line: None):
        assert f"pid: {os.getpid()}\n" in lock.read_text()


def test_where_flock_is_refused_the_record_alone_holds_the_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(out_lock, "_flock", lambda fd: None)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        _record(out / out_lock.LOCK_NAME, sleeper.pid, socket.gethostname(), time.time())
        with pytest.raises(out_lock.OutBusy, match=f"pid {sleeper.pid}"):
            _take(out)
    finally:
        sleeper.kill()
        sleeper.wait()
    said: list[str] = []
    with out_lock.held(out, log=said.append):
        pass
    assert any("gone" in line for line in said) and any("refuses flock" in line for line in said), said


# Graders for real: three copies of the Day 1 solution, graded on the CPU through the sandbox.

def _class(root: Path) -> Path:
    for student in STUDENTS:
        (root / student / "week1").mkdir(parents=True)
        shutil.copy(DAY1, root / student / "week1" / DAY1.name)
    return root


def _grade(subs: Path, out: Path, tmp: Path, *extra: str) -> subprocess.Popen[str]:
    """``python -m grader grade`` in a process of its own, its scratch folders under ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--device", "cpu",
                             "--assignment", "week1", "--seed", "7", *extra],
                            cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _ended(process: subprocess.Popen[str], seconds: float = 300.0) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=seconds)
    return process.returncode, stdout, stderr


def _until(condition, seconds: float = 120.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.02)


def _grades(out: Path) -> dict[str, tuple[str, list[tuple[str, float | None]]]]:
    found = {}
    for path in sorted((out / "results").glob("*/*/*.json")):
        result = json.loads(path.read_text())
        found[str(path.relative_to(out))] = (result["status"], [(i["item"], i["score"]) for i in result["items"]])
    return found


def _day1(out: Path) -> list[Path]:
    return sorted((out / "results").glob("*/week1/day1_host_baseline.json"))


@pytest.fixture(scope="module")
def first_grader(tmp_path_factory) -> dict[str, object]:
    """The class graded once, never stopped; a second grader (refused) and a third (--wait) started against its
    OUT while it grades."""
    root = tmp_path_factory.mktemp("one-grader")
    subs, out = _class(root / "subs"), root / "out"
    first = _grade(subs, out, root / "tmp")
    _until(lambda: f"pid: {first.pid}\n" in ((out / out_lock.LOCK_NAME).read_text()
                                             if (out / out_lock.LOCK_NAME).exists() else ""))
    second, third = _grade(subs, out, root / "tmp2"), _grade(subs, out, root / "tmp3", "--wait")
    ran = {name: _ended(process) for name, process in (("second", second), ("first", first), ("third", third))}
    return {"out": out, "pid": first.pid, **ran}


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_second_grader_on_the_same_out_refuses_and_a_waiting_one_goes_after(first_grader):
    status, stdout, stderr = first_grader["second"]
    assert status == 2, stderr[-2000:]
    assert f"another grader is grading {first_grader['out']}: pid {first_grader['pid']} on {socket.gethostname()}, " \
           "since " in stderr
    assert "One grader per output folder" in stderr and "results in" not in stdout  # it started nothing
    status, stdout, stderr = first_grader["first"]
    assert status == 0, stderr[-2000:]
    status, stdout, stderr = first_grader["third"]
    assert status == 0, stderr[-2000:]
    assert "waiting: another grader is grading" in stdout
    assert "3 notebook(s) already graded" in stdout  # it went after the first, and kept its results
    grades = _grades(first_grader["out"])
    assert len(grades) == TOTAL
    assert [grades[str(p.relative_to(first_grader["out"]))][0] for p in _day1(first_grader["out"])] == ["ok"] * 3
    assert all(score == 13 for p in _day1(first_grader["out"])
               for score in [sum(s or 0 for _, s in grades[str(p.relative_to(first_grader["out"]))][1])])
    assert out_lock.busy(first_grader["out"]) is None


@pytest.mark.sandbox
@pytest.mark.slow
def test_sigterm_mid_class_leaves_nothing_behind_and_the_next_run_finishes_it(tmp_path, first_grader):
    subs, out, tmp = _class(tmp_path / "subs"), tmp_path / "out", tmp_path / "tmp"
    grader = _grade(subs, out, tmp, "--runs", "1")  # one notebook at a time: the stop finds one done, one running
    seen: dict[int, psutil.Process] = {}

    def look() -> set[str]:
        names = set()
        for child in psutil.Process(grader.pid).children(recursive=True):
            seen.setdefault(child.pid, child)
            with contextlib.suppress(psutil.Error):
                names.add(child.name())
        return names

    _until(lambda: bool(look()) and len(_day1(out)) >= 1)
    time.sleep(0.3)
    assert "bwrap" in look()  # the next notebook's run under way
    stopped_at = time.monotonic()
    grader.send_signal(signal.SIGTERM)
    status, stdout, stderr = _ended(grader, 60)
    gone_in = time.monotonic() - stopped_at
    assert status == 143, stderr[-3000:]
    complete = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in _day1(out)}
    assert 1 <= len(complete) < len(STUDENTS)
    line = f"stopped by SIGTERM: {len(complete) + TOTAL - len(STUDENTS)} of {TOTAL} notebooks complete; run the " \
           "same command again to finish"
    assert stderr.strip().splitlines()[-1] == line, stderr[-2000:]
    assert gone_in < 15
    assert [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert list(tmp.iterdir()) == []  # every scratch folder (runs, builds, the wall tree) removed
    assert out_lock.busy(out) is None and (out / out_lock.LOCK_NAME).read_text() == ""
    assert not list(out.rglob("*.tmp"))

    status, stdout, stderr = _ended(_grade(subs, out, tmp))
    assert status == 0, stderr[-3000:]
    regraded = {line.split()[1].split("/")[0] for line in stderr.splitlines() if "/week1/day1_host_baseline:" in line
                and re.match(r"\d+/\d+ ", line)}
    assert regraded == set(STUDENTS) - {p.parts[-3] for p in complete}
    assert all(path.read_bytes() == data and path.stat().st_mtime_ns == mtime
               for path, (data, mtime) in complete.items())  # what was complete is untouched
    assert _grades(out) == _grades(first_grader["out"])  # as the run never stopped
