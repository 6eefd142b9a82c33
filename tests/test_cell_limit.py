"""A cell's limit counts the time its run could run: not the seconds the GPU gate kept the run stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import nbformat

from grader import results, sandbox
from grader.cell_limit import RunClock
from grader.execute import Job, execute
from grader.gpu_gate import GpuGate


def test_the_clock_counts_ticks_and_at_most_a_gap_of_a_long_pause():
    now = [100.0]
    clock = RunClock(tick=0.1, gap=0.5, now=lambda: now[0])
    for _ in range(10):  # one second of ticks
        now[0] += 0.1
        clock.observe(now[0])
    now[0] += 30.0  # stopped for 30 s
    clock.observe(now[0])
    assert abs(clock.seconds() - 1.5) < 1e-9
    now[0] += 0.2  # between ticks: the time since the last one counts
    assert abs(clock.seconds() - 1.7) < 1e-9
    now[0] += 10.0
    assert abs(clock.seconds() - 2.0) < 1e-9


_CLOCK_CHILD = """
import sys, time
from grader.cell_limit import RunClock
with RunClock() as clock:
    began = time.monotonic()
    print("ready", flush=True)
    while clock.seconds() < 3.0:
        time.sleep(0.05)
    print(clock.seconds(), time.monotonic() - began, flush=True)
"""


def test_a_stopped_process_s_clock_stands_still():
    child = subprocess.Popen([sys.executable, "-c", _CLOCK_CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    child.send_signal(signal.SIGSTOP)
    time.sleep(2.0)
    child.send_signal(signal.SIGCONT)
    counted, wall = map(float, child.stdout.readline().split())
    assert child.wait(timeout=30) == 0
    # 3 s counted took the 2 s stop less the most a gap counts (0.5 s) longer on the wall
    assert 3.0 <= counted <= 3.3 and wall >= 4.4, (counted, wall)


def _notebook(folder, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / "nb.ipynb"))
    return folder / "nb.ipynb"


def _run_frozen_mid_cell(tmp_path, cell_seconds: float, cell_timeout: float, frozen: float):
    """Run a notebook whose one cell sleeps, and hold its GPU (which stops the run) for ``frozen`` s mid-cell."""
    work = tmp_path / "work"
    started = work / "cell-started"
    path = _notebook(work, f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep({cell_seconds})")
    job = Job(notebook=str(path), workdir=str(work), device="cpu", log=str(tmp_path / "run.log"),
              sandbox=sandbox.unavailable_reason() is None, cell_timeout=cell_timeout, notebook_timeout=120)
    gate, outcome = GpuGate(idle=lambda gpu: True), {}

    def run() -> None:
        with gate.shared("0") as user:
            outcome["run"] = execute(job, user)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 90
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), (tmp_path / "run.log").read_text()[-2000:]
    with gate.exclusive("0"):
        time.sleep(frozen)
    runner.join(timeout=120)
    return outcome["run"]


def test_a_cell_frozen_past_its_limit_by_the_gate_is_not_a_timeout(tmp_path):
    outcome = _run_frozen_mid_cell(tmp_path, cell_seconds=2, cell_timeout=5, frozen=6)
    assert outcome.status == results.OK, outcome.message
    assert outcome.timings["frozen"] >= 6


def test_a_frozen_cell_still_times_out_on_its_own_running_time(tmp_path):
    # Whoever reads the clock must not lose the limit: 8 s of sleep is over a 3 s limit, frozen or not.
    outcome = _run_frozen_mid_cell(tmp_path, cell_seconds=8, cell_timeout=3, frozen=2)
    assert outcome.status == results.TIMEOUT and "cell" in outcome.message, outcome.message
