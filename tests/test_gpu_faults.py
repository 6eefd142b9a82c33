"""One run's kernel or memory costs only that run, with a fake driver: the GPU gate and the run watch find the
culprit from per-process accounting (``grader.gpu.gpu_work``'s shape of answers), stop its process tree with a status
of its own, and leave every other run going. Real processes stand for the runs; the fake driver says which of them
"has a kernel running" and how much memory each holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import psutil
import pytest

from grader import pipeline
from grader.gpu.gpu_gate import GPU_HANG, GPU_MEMORY, GpuGate
from grader.gpu.gpu_watch import RunWatch
from grader.run import stage
from grader.score import results
from grader.wall import sandbox, scratch_folders
from tests.conftest import HAS_GPU


class FakeDriver:
    """Per-process accounting for one GPU: the pids with a kernel that never ends (busy in every sample, frozen or
    not), the pids whose kernels run only while they run, and the memory each pid holds."""

    def __init__(self) -> None:
        self.endless: set[int] = set()
        self.working: set[int] = set()
        self.memory: dict[int, int] = {}

    def busy_since(self, gpu: str, since_us: int) -> set[int]:
        running = {pid for pid in self.working if _running(pid)}
        return {pid for pid in self.endless if psutil.pid_exists(pid)} | running

    def idle(self, gpu: str) -> bool:
        return not self.busy_since(gpu, 0)

    def memory_by_process(self, gpu: str) -> dict[int, int]:
        return {pid: held for pid, held in self.memory.items() if psutil.pid_exists(pid)}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _run(seconds: float = 60.0) -> subprocess.Popen:
    """A run: a process with a child, as a sandboxed run is a tree."""
    return subprocess.Popen([sys.executable, "-c", f"import subprocess, time; subprocess.Popen(['sleep', '{seconds}']);"
                             f" time.sleep({seconds})"])


def _tree(process: subprocess.Popen) -> list[psutil.Process]:
    time.sleep(0.3)  # its child has started
    root = psutil.Process(process.pid)
    return [root, *root.children(recursive=True)]


def _gone(processes: list[psutil.Process]) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=5)
    return not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_a_drain_that_does_not_finish_stops_the_run_whose_kernel_never_ends_and_only_it():
    driver = FakeDriver()
    gate = GpuGate(driver.idle, drain_limit=1.0, retry_drain=1.0, thaw_seconds=0.2, busy_limit=30.0,
                   busy_processes=driver.busy_since)
    culprit, honest = _run(), _run()
    try:
        culprit_tree, honest_tree = _tree(culprit), _tree(honest)
        driver.endless = {culprit_tree[-1].pid}  # the child holds the context, as the Jupyter kernel does
        with gate.shared("0") as bad, gate.shared("0") as good:
            bad.attach(culprit.pid)
            good.attach(honest.pid)
            started = time.monotonic()
            with gate.exclusive("0") as hold:
                assert not hold.busy and hold.drain_note == "", hold  # the GPU went idle once the culprit was gone
                assert all(p.status() == psutil.STATUS_STOPPED for p in honest_tree)  # frozen, not stopped
            assert time.monotonic() - started < 5.0  # one drain and a short one after it, not the retries
            assert bad.stopped is not None and bad.stopped[0] == GPU_HANG
            assert "ran more than 1 s without finishing" in bad.stopped[1] and "loop" in bad.stopped[1]
            assert good.stopped is None
            assert _gone(culprit_tree)
            assert all(p.is_running() and p.status() != psutil.STATUS_STOPPED for p in honest_tree)
            assert [(gpu, status) for gpu, _, status in gate.stops] == [("0", GPU_HANG)]
    finally:
        for process in (culprit, honest):
            process.kill()
            process.wait()


def test_where_the_driver_cannot_name_a_culprit_the_gate_falls_back_to_its_retries():
    gate = GpuGate(lambda gpu: False, drain_limit=0.3, retry_drain=0.3, thaw_seconds=0.1, busy_limit=1.0,
                   busy_processes=lambda gpu, since: None)
    process = _run()
    try:
        with gate.shared("0") as user:
            user.attach(process.pid)
            with gate.exclusive("0") as hold:
                pass
        assert hold.busy and user.stopped is None and process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_the_watch_drains_a_gpu_kept_busy_too_long_and_stops_the_endless_run_without_a_judge():
    driver = FakeDriver()
    gate = GpuGate(driver.idle, drain_limit=0.5, retry_drain=0.5, thaw_seconds=0.1, busy_limit=10.0,
                   busy_processes=driver.busy_since)
    clock = [0]
    watch = RunWatch(gate, ("0",), driver.busy_since, driver.memory_by_process, {"0": None}, busy_seconds=3.0,
                     now_us=lambda: clock[0])
    endless, busy, idle = _run(), _run(), _run()
    try:
        trees = [_tree(p) for p in (endless, busy, idle)]
        driver.endless = {trees[0][-1].pid}
        driver.working = {trees[1][-1].pid}  # kernels that end: busy while it runs, idle once frozen
        with gate.shared("0") as a, gate.shared("0") as b, gate.shared("0") as c:
            for user, process in zip((a, b, c), (endless, busy, idle), strict=True):
                user.attach(process.pid)
            for _ in range(2):  # two seconds busy: below the limit, nothing happens
                clock[0] += 1_000_000
                watch.check()
            assert not gate.holds and a.stopped is None
            for _ in range(2):
                clock[0] += 1_000_000
                watch.check()
            assert len(gate.holds) == 1  # one drain for both busy runs
            assert a.stopped is not None and a.stopped[0] == GPU_HANG
            assert b.stopped is None and c.stopped is None
            assert _gone(trees[0]) and all(p.is_running() for p in trees[1] + trees[2])
    finally:
        for process in (endless, busy, idle):
            process.kill()
            process.wait()


def test_the_watch_stops_a_run_holding_more_than_its_share_of_gpu_memory_and_only_it():
    driver = FakeDriver()
    gate = GpuGate(driver.idle, busy_processes=driver.busy_since)
    watch = RunWatch(gate, ("0",), driver.busy_since, driver.memory_by_process, {"0": 4 * 2**30})
    hog, neighbour = _run(), _run()
    try:
        hog_tree, neighbour_tree = _tree(hog), _tree(neighbour)
        driver.memory = {hog_tree[0].pid: 2**30, hog_tree[-1].pid: 70 * 2**30, neighbour_tree[-1].pid: 3 * 2**30}
        with gate.shared("0") as a, gate.shared("0") as b:
            a.attach(hog.pid)
            b.attach(neighbour.pid)
            watch.check()
            assert a.stopped == (GPU_MEMORY, "your notebook used 71.0 GiB of GPU memory; the limit is 4.0 GiB (the GPU "
                                             "is shared by the class's runs): it was stopped there")
            assert b.stopped is None and _gone(hog_tree) and all(p.is_running() for p in neighbour_tree)
            assert [status for _, _, status in gate.stops] == [GPU_MEMORY]
    finally:
        for process in (hog, neighbour):
            process.kill()
            process.wait()


def test_a_run_stopped_by_the_gate_ends_its_sandbox_with_that_status(tmp_path: Path):
    # --no-sandbox runs the same watchdog loop: what matters is how the run's end is reported.
    driver = FakeDriver()
    gate = GpuGate(driver.idle, drain_limit=0.5, retry_drain=0.5, busy_processes=driver.busy_since)
    scratch = scratch_folders.make_scratch()
    outcome = {}
    try:
        with gate.shared("0") as user:
            def run() -> None:
                outcome["result"] = sandbox.run([sys.executable, "-c", "import time; time.sleep(60)"], scratch=scratch,
                                                env={"PATH": "/usr/bin:/bin"}, limits=sandbox.Limits(seconds=120),
                                                log_path=tmp_path / "log", sandbox=False, pause=user)

            thread = threading.Thread(target=run)
            thread.start()
            deadline = time.monotonic() + 10
            while user.process is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            driver.endless = user.pids()
            with gate.exclusive("0"):
                pass
            thread.join(timeout=20)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = outcome["result"]
    assert result.status == GPU_HANG == results.GPU_HANG and "without finishing" in result.message


@pytest.mark.gpu
def test_on_a_real_gpu_the_driver_names_the_process_of_a_spinning_kernel(tmp_path):
    from grader.gpu import gpu_work

    assert HAS_GPU
    (tmp_path / "spin.py").write_text(SPIN)  # Triton reads a kernel's source from its file
    spinner = subprocess.Popen([sys.executable, str(tmp_path / "spin.py"), "8"])
    try:
        time.sleep(4.0)
        busy = gpu_work.busy_since("0", gpu_work.now_us() - 2_000_000)
        held = gpu_work.memory_by_process("0")
        assert busy is not None and spinner.pid in busy, busy
        assert held is not None and held.get(spinner.pid, 0) > 0, held
    finally:
        spinner.kill()
        spinner.wait()


SPIN = """
import sys, time, torch, triton, triton.language as tl

@triton.jit
def spin(flag, n):
    i = 0
    while tl.load(flag, volatile=True) == 0:
        i += 1
    tl.store(flag + 1, i)

flag = torch.zeros(2, dtype=torch.int32, device="cuda")
spin[(1,)](flag, 0)
time.sleep(float(sys.argv[1]))
"""


def _executed_with(tmp_path: Path, ename: str, evalue: str) -> None:
    cell = {"cell_type": "code", "metadata": {}, "source": "x", "execution_count": 1,
            "outputs": [{"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}]}
    (tmp_path / "executed.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                         "nbformat_minor": 5}))


OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.parametrize(("stopped", "ename", "evalue", "runs"), [
    (GPU_MEMORY, "OutOfMemoryError", OOM, 2),  # a neighbour held the memory: the victim runs again
    (None, "OutOfMemoryError", OOM, 1),  # nobody was stopped: running out of memory was its own doing
    (GPU_MEMORY, "ValueError", "shapes do not match", 1),  # a neighbour was stopped; this run failed otherwise
])
def test_a_run_that_ran_out_of_gpu_memory_while_a_neighbour_was_stopped_for_it_runs_again(
        tmp_path, monkeypatch, stopped, ename, evalue, runs):
    gate = GpuGate(lambda gpu: True)
    calls = []

    def run_once(task, jobs, pause):  # noqa: ANN001
        calls.append(pause)
        if len(calls) == 1:
            _executed_with(tmp_path, ename, evalue)
            if stopped:
                gate.stops.append(("0", time.monotonic(), stopped))
            return pipeline.Outcome(results.OK, "", {"notebook": 3.0}), {}
        return pipeline.Outcome(results.OK, "", {"notebook": 2.0}), {"answers": {}}

    monkeypatch.setattr(stage, "_run_once", run_once)
    monkeypatch.setattr(stage, "kernel_calls", lambda *args: [])
    task = types.SimpleNamespace(plan=types.SimpleNamespace(notebook=None), settings=None, run_seed=1, key="s",
                                 bench_only=False, run=tmp_path)
    with gate.shared("0") as pause:
        staged = stage.run_stage(task, pause)
    assert len(calls) == runs
    assert (staged.outcome.timings.get("notebook_before_a_neighbours_memory_stop") == 3.0) == (runs == 2)


@pytest.mark.parametrize(("ended", "status", "said"), [
    ("timeout", results.BUILD_LIMIT, "took more than 600 s to compile"),
    ("memory", results.BUILD_LIMIT, "took more than 8.0 GiB to compile"),
    ("failed", results.GRADER_ERROR, "building the kernels failed (failed)"),
])
def test_a_build_past_its_limits_is_the_students_and_any_other_failure_the_graders(tmp_path, monkeypatch, ended,
                                                                                    status, said):
    from grader.run import execute

    monkeypatch.setattr(execute, "_sandboxed", lambda *args, **kw: sandbox.SandboxResult(ended, None, ended, 1.0, 0))
    (tmp_path / "nb.ipynb").write_text("{}")
    job = execute.Job(notebook="", workdir=str(tmp_path / "work"), device="gpu", log=str(tmp_path / "log"))
    outcome = execute.build(job, tmp_path / "nb.ipynb", tmp_path / "missing.json", {}, tmp_path / "built")
    assert outcome.status == status and said in outcome.message, outcome


def test_the_driver_s_answers_become_busy_pids_memory_and_none_where_it_cannot_say(monkeypatch):
    from grader.gpu import gpu_work

    class Failed(Exception):
        pass

    class NotFound(Failed):
        pass

    def sample(pid: int, stamp: int, busy: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=busy)

    driver = types.SimpleNamespace(
        NVMLError=Failed, NVMLError_NotFound=NotFound,
        nvmlDeviceGetProcessUtilization=lambda handle, since: [sample(1, since + 1, 5), sample(2, since + 1, 0),
                                                               sample(3, since - 1, 9)],
        nvmlDeviceGetComputeRunningProcesses=lambda handle: [types.SimpleNamespace(pid=1, usedGpuMemory=None),
                                                             types.SimpleNamespace(pid=2, usedGpuMemory=7)],
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=80))
    monkeypatch.setattr(gpu_work, "_nvml", lambda: driver)
    monkeypatch.setattr(gpu_work, "_handle", lambda gpu: object())
    # busy after the moment and with its multiprocessors in use: pid 1 only
    assert gpu_work.busy_since("0", 100) == {1}
    assert gpu_work.memory_by_process("0") == {1: 0, 2: 7} and gpu_work.total_memory("0") == 80

    def nothing_newer(handle, since):  # noqa: ANN001, ANN202
        raise NotFound

    def failing(handle):  # noqa: ANN001, ANN202
        raise Failed

    driver.nvmlDeviceGetProcessUtilization = nothing_newer
    driver.nvmlDeviceGetComputeRunningProcesses = failing
    assert gpu_work.busy_since("0", 100) == set() and gpu_work.memory_by_process("0") is None
    monkeypatch.setattr(gpu_work, "_handle", lambda gpu: None)  # no such GPU, or no driver
    assert gpu_work.busy_since("0", 100) is None and gpu_work.total_memory("0") is None
