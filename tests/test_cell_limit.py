"""A run's limits (each cell's, the kernel's start) count the time it could run, not the seconds the GPU gate kept
the run stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import nbformat
import pytest

from grader.gpu.gpu_gate import GpuGate
from grader.run.execute import Job, execute
from grader.score import results
from grader.wall import sandbox
from grader.wall.cell_limit import CellLimitClient, RunClock
from tests.test_execute import _notebook


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
import time
from grader.wall.cell_limit import RunClock
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


def _run_frozen(tmp_path, cell_seconds: float, frozen: float, **limits):
    """Run a notebook whose one cell sleeps, and hold its GPU (which stops the run) for ``frozen`` s once the cell
    has started."""
    work = tmp_path / "work"
    started = work / "cell-started"
    path = _notebook(work, f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep({cell_seconds})")
    job = Job(notebook=str(path), workdir=str(work), device="cpu", log=str(tmp_path / "run.log"),
              sandbox=sandbox.unavailable_reason() is None, notebook_timeout=120, **limits)
    gate, outcome = GpuGate(idle=lambda gpu: True), {}

    def run() -> None:
        with gate.shared("0") as user:
            outcome["run"] = execute(job, user)

    runner = threading.Thread(target=run)
    runner.start()
    deadline = time.monotonic() + 90
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists(), (tmp_path / "run.log").read_text()[-2000:]
    with gate.exclusive("0"):
        time.sleep(frozen)
    runner.join(timeout=120)
    return outcome["run"]


def test_a_cell_frozen_past_its_limit_by_the_gate_is_not_a_timeout(tmp_path):
    outcome = _run_frozen(tmp_path, cell_seconds=2, frozen=6, cell_timeout=5)
    assert outcome.status == results.OK, outcome.message
    assert outcome.timings["frozen"] >= 6


def test_a_frozen_cell_still_times_out_on_its_own_running_time(tmp_path):
    # Whoever reads the clock must not lose the limit: 8 s of sleep is over a 3 s limit, frozen or not.
    outcome = _run_frozen(tmp_path, cell_seconds=8, frozen=2, cell_timeout=3)
    assert outcome.status == results.TIMEOUT and "cell" in outcome.message, outcome.message


def test_each_cell_has_its_own_limit(tmp_path):
    work = tmp_path / "work"
    # Each cell outlasts a round of the reply wait (5 s) and stays under its 6 s limit; the two together do not.
    path = _notebook(work, *["import time\ntime.sleep(5.5)"] * 2)
    job = Job(notebook=str(path), workdir=str(work), device="cpu", log=str(tmp_path / "run.log"),
              sandbox=sandbox.unavailable_reason() is None, cell_timeout=6, notebook_timeout=120)
    outcome = execute(job)
    assert outcome.status == results.OK, outcome.message


class _SlowKernel:
    """A kernel client whose kernel answers in its ``rounds + 1``-th round; ``spent(timeout)`` is a round's time."""

    def __init__(self, rounds: int, spent) -> None:
        self.rounds, self.spent, self.asked = rounds, spent, 0

    def start_channels(self) -> None:
        pass

    def wait_for_ready(self, timeout: float) -> None:
        self.asked += 1
        if self.asked <= self.rounds:
            self.spent(timeout)
            raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")


def _starting(kernel: _SlowKernel, clock: RunClock, startup_timeout: int) -> tuple[CellLimitClient, list]:
    manager = SimpleNamespace(client=lambda: kernel)
    client = CellLimitClient(SimpleNamespace(nb=nbformat.v4.new_notebook()), cell_limit=60, clock=clock,
                             km=manager, startup_timeout=startup_timeout)
    cleaned = []

    async def cleanup() -> None:
        cleaned.append(True)

    client._async_cleanup_kernel = cleanup
    return client, cleaned


def test_a_kernel_stopped_while_it_starts_is_waited_for():
    now = [0.0]
    clock = RunClock(now=lambda: now[0])

    def stopped(timeout: float) -> None:  # the round passes on the wall, not on the run's clock
        now[0] += timeout

    kernel = _SlowKernel(rounds=6, spent=stopped)  # 30 s of wall, past a 10 s limit
    client, cleaned = _starting(kernel, clock, startup_timeout=10)
    assert client.start_new_kernel_client() is kernel and kernel.asked == 7 and not cleaned


def test_a_kernel_that_runs_and_never_answers_is_late():
    now = [0.0]
    clock = RunClock(now=lambda: now[0])

    def running(timeout: float) -> None:
        for _ in range(int(timeout * 8)):  # ticks of 1/8 s: exact sums
            now[0] += 0.125
            clock.observe(now[0])

    kernel = _SlowKernel(rounds=100, spent=running)
    client, cleaned = _starting(kernel, clock, startup_timeout=10)
    with pytest.raises(RuntimeError, match="didn't respond"):
        client.start_new_kernel_client()
    assert kernel.asked == 2 and cleaned  # 5 s a round: over the limit after the second


def test_a_cell_that_stops_the_runner_s_clock_still_meets_the_notebook_s_limit(tmp_path):
    # The cell limit is kept inside the sandbox, where student code could stop the process that keeps it (its
    # clock then stands still). The notebook's limit is kept outside, by the grader: the run still ends there.
    work = tmp_path / "work"
    path = _notebook(work, "import os, signal, time\nos.kill(os.getppid(), signal.SIGSTOP)\ntime.sleep(600)")
    job = Job(notebook=str(path), workdir=str(work), device="cpu", log=str(tmp_path / "run.log"),
              sandbox=sandbox.unavailable_reason() is None, cell_timeout=3, notebook_timeout=15)
    began = time.monotonic()
    outcome = execute(job)
    assert outcome.status == results.TIMEOUT and "notebook" in outcome.message, outcome.message
    assert time.monotonic() - began < 60
