"""The pipeline's ordering rules, with fake GPU slots and real processes standing in for notebook runs.

A fake run is a process that stamps the time (CLOCK_MONOTONIC, one clock for every process) into a file
every few milliseconds, pinned to its slot through CUDA_VISIBLE_DEVICES; a fake judge holds its slot alone
at the gate for a moment. What the rules promise is then read off the stamps.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
import pytest

from grader.flow.schedule import Limits, Scheduler
from grader.gpu import gpu_gate
from grader.gpu.gpu_gate import GpuGate
from grader.wall import sandbox

STAMPER = """
import os, sys, time
end = time.monotonic() + float(sys.argv[2])
with open(sys.argv[1], "w") as out:
    out.write(os.environ.get("CUDA_VISIBLE_DEVICES", "") + "\\n")
    while time.monotonic() < end:
        out.write(f"{time.monotonic()}\\n")
        out.flush()
        time.sleep(0.002)
"""


def _stamps(path: Path) -> tuple[str, list[float]]:
    first, *rest = path.read_text().splitlines()
    return first, [float(line) for line in rest if line]


def _inside(stamps: list[float], interval: tuple[float, float]) -> list[float]:
    return [t for t in stamps if interval[0] <= t <= interval[1]]


def test_a_held_gpu_pauses_the_runs_on_it_and_only_those(tmp_path):
    gate = GpuGate(idle=lambda gpu: True)
    runs = []
    for name, gpu in (("a", "0"), ("b", "0"), ("c", "1")):
        path = tmp_path / f"{name}.txt"
        process = subprocess.Popen([sys.executable, "-c", STAMPER, str(path), "2.0"],
                                   env={"CUDA_VISIBLE_DEVICES": gpu})
        runs.append((name, gpu, path, process))
    users = {}
    contexts = []
    for name, gpu, _, process in runs:
        context = gate.shared(gpu)
        users[name] = context.__enter__()
        users[name].attach(process.pid)
        contexts.append(context)
    time.sleep(0.4)
    with gate.exclusive("0") as hold:
        began = time.monotonic()
        time.sleep(0.6)
        ended = time.monotonic()
    for _, _, _, process in runs:
        process.wait(timeout=30)
    for context in contexts:
        context.__exit__(None, None, None)
    for name, gpu, path, _ in runs:
        visible, stamps = _stamps(path)
        assert visible == gpu
        if gpu == "0":
            assert _inside(stamps, (began, ended)) == [], f"run {name} ran while its GPU was held"
            assert any(t > ended for t in stamps), f"run {name} was not let go on"
            assert users[name].paused_seconds() >= 0.6
        else:
            assert len(_inside(stamps, (began, ended))) > 50  # the other GPU's run went on
            assert users[name].paused_seconds() == 0.0
    assert hold.held >= 0.6 and hold.drained < 0.5


def test_a_run_attached_while_its_gpu_is_held_starts_paused(tmp_path):
    gate = GpuGate(idle=lambda gpu: True)
    path = tmp_path / "late.txt"
    with gate.exclusive("0"):
        began = time.monotonic()
        with gate.shared("0") as user:
            process = subprocess.Popen([sys.executable, "-c", STAMPER, str(path), "0.5"])
            user.attach(process.pid)
            time.sleep(1.0)
            ended = time.monotonic()
            assert process.poll() is None
    process.wait(timeout=30)
    _, stamps = _stamps(path)
    assert stamps and _inside(stamps, (began, ended)) == []


@pytest.fixture
def slow_freeze(monkeypatch):
    """Every freeze of a gate user waits 0.3 s first: the race windows below opened wide."""
    freeze = gpu_gate.Pausable._freeze

    def slowly(user):
        time.sleep(0.3)
        freeze(user)

    monkeypatch.setattr(gpu_gate.Pausable, "_freeze", slowly)


def test_a_hold_ending_while_a_run_attaches_leaves_it_running(slow_freeze):
    """The attach looks at the gate and freezes in one step: a hold that ends in between cannot leave the run
    frozen with nobody to let it go."""
    gate = GpuGate(idle=lambda gpu: True)
    holding = threading.Event()

    def hold_briefly():
        with gate.exclusive("0"):
            holding.set()
            time.sleep(0.1)

    with gate.shared("0") as user:
        holder = threading.Thread(target=hold_briefly)
        holder.start()
        holding.wait()
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            user.attach(process.pid)
            holder.join()
            assert not gate.busy("0")
            assert psutil.Process(process.pid).status() != psutil.STATUS_STOPPED
        finally:
            process.kill()
            process.wait()


def test_a_user_leaving_while_a_hold_begins_is_not_left_frozen(slow_freeze):
    """A judge stops being a shared user (it asks for the GPU) while another judge's hold is freezing the users:
    it is either frozen and let go when it leaves, or never frozen; never frozen with nobody to let it go (which
    left a GPU held by a stopped judge on a two-GPU machine)."""
    gate = GpuGate(idle=lambda gpu: True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    freezing = threading.Event()

    def hold():
        freezing.set()
        with gate.exclusive("0"):
            time.sleep(0.5)

    holder = threading.Thread(target=hold)
    try:
        with gate.shared("0") as user:
            user.attach(process.pid)
            holder.start()
            freezing.wait()
            time.sleep(0.1)  # the holder is freezing this user now
        holder.join()
        assert psutil.Process(process.pid).status() != psutil.STATUS_STOPPED
    finally:
        process.kill()
        process.wait()


def test_a_pid_that_belongs_to_another_process_now_is_not_signalled():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    handle = psutil.Process(process.pid)
    process.wait()
    assert gpu_gate.process_tree(handle) == []  # psutil compares start times: a reused pid is not this process


def test_the_gate_waits_for_the_gpu_to_finish_queued_work():
    readings = iter([False, False, True, False, True, True])
    gate = GpuGate(idle=lambda gpu: next(readings))
    with gate.exclusive("0") as hold:
        pass
    assert next(readings, "used up") == "used up"  # two idle readings in a row were needed
    assert hold.drain_note == ""
    with GpuGate(idle=lambda gpu: None).exclusive("0") as unknown:
        pass
    assert "could not be read" in unknown.drain_note


# A run whose work on the GPU ends only once the run itself has run for a while (as a kernel that spins until
# the run's cell limit kills it): it writes "done" after RUN_SECONDS of its own, unfrozen, time.
CULPRIT = """
import sys, time
need, last, ran = float(sys.argv[2]), time.monotonic(), 0.0
while ran < need:
    time.sleep(0.01)
    now = time.monotonic()
    ran += min(now - last, 0.05)  # a frozen stretch is one long gap: it does not count
    last = now
open(sys.argv[1], "w").write("done")
"""


def test_a_gpu_that_stays_busy_lets_the_runs_go_on_between_drains_until_their_work_ends(tmp_path):
    done = tmp_path / "done"
    culprit = subprocess.Popen([sys.executable, "-c", CULPRIT, str(done), "0.6"])
    gate = GpuGate(idle=lambda gpu: done.exists(), drain_limit=0.3, thaw_seconds=0.3, retry_drain=0.2,
                   busy_limit=30.0)
    try:
        with gate.shared("0") as user:
            user.attach(culprit.pid)
            time.sleep(0.2)  # the culprit's first 0.2 s
            with gate.exclusive("0") as hold:
                pass
        assert not hold.busy and hold.drain_note == ""
        assert done.exists() and hold.drained >= 0.3 + 0.3 + 0.2  # it went on only between drains
        assert user.paused_seconds() >= 0.3 + 0.2  # frozen during the drains
    finally:
        culprit.kill()
        culprit.wait()


def test_a_gpu_that_never_goes_idle_makes_a_busy_hold_after_the_limit():
    gate = GpuGate(idle=lambda gpu: False, drain_limit=0.2, thaw_seconds=0.1, retry_drain=0.1, busy_limit=0.8)
    with gate.exclusive("0") as hold:
        pass
    assert hold.busy and "still busy after" in hold.drain_note
    assert 0.8 <= hold.drained < 5


@pytest.mark.sandbox
def test_frozen_time_does_not_count_against_a_sandboxed_runs_limit(tmp_path):
    gate = GpuGate(idle=lambda gpu: True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = {}

    def run() -> None:
        with gate.shared("0") as user:
            result["run"] = sandbox.run([sys.executable, "-c", STAMPER, "stamps.txt", "1.5"], scratch=scratch,
                                        env={"PATH": "/usr/bin:/bin"}, limits=sandbox.Limits(seconds=2.5),
                                        log_path=tmp_path / "log.txt", pause=user)
            result["paused"] = user.paused_seconds()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(1.0)
    with gate.exclusive("0"):
        began = time.monotonic()
        time.sleep(2.0)  # the run's 2.5 s limit would pass while it is frozen
        ended = time.monotonic()
    thread.join(timeout=60)
    assert result["run"].status == "ok", result["run"].message
    _, stamps = _stamps(scratch / "stamps.txt")
    assert stamps and _inside(stamps, (began, ended)) == []  # every process in the sandbox was paused
    assert result["paused"] >= 2.0
    assert result["run"].seconds < 2.5  # the seconds it could run


@dataclass(frozen=True)
class FakeTask:
    key: str
    notebook: str
    folder: Path
    gpu: str | None = None
    reference: str | None = None


class FakeStages:
    """Runs are stamping processes; judges hold their slot alone for a moment; everything is logged."""

    def __init__(self, fail: str | None = None) -> None:
        self.log: list[tuple] = []
        self.lock = threading.Lock()
        self.fail = fail

    def record(self, *entry: object) -> None:
        with self.lock:
            self.log.append(entry)

    def run(self, task, gpu, pause):
        path = task.folder / f"{task.key}.txt"
        began = time.monotonic()
        process = subprocess.Popen([sys.executable, "-c", STAMPER, str(path), "0.3"],
                                   env={"CUDA_VISIBLE_DEVICES": gpu or ""})
        if pause is not None:
            pause.attach(process.pid)
        process.wait(timeout=60)
        self.record("run", task.key, gpu, began, time.monotonic())
        return path

    def build(self, task, staged):
        if task.key == self.fail:
            raise RuntimeError("the build broke")
        time.sleep(0.02)
        return staged

    def judge(self, task, staged, gpu, gate):
        with gate.exclusive(gpu) if gate is not None else contextlib.nullcontext():
            began = time.monotonic()
            time.sleep(0.05)
            ended = time.monotonic()
        self.record("judge", task.key, gpu, began, ended, task.reference)
        return ("graded", task.key)

    def fault(self, stage, error):
        return ("grader_error", stage, str(error))


def _grade(tmp_path, limits, stages, gate, one_at_a_time=False, students=10, events=None):
    with Scheduler(limits, stages, gate, one_at_a_time) as scheduler:
        references = {}
        for notebook in ("day6", "day7"):
            ready = Future()
            reference = FakeTask(f"reference-{notebook}", notebook, tmp_path)
            scheduler.submit(reference, label=reference.key).add_done_callback(
                lambda f, r=ready, n=notebook: r.set_result(f"ref-{n}"))
            references[notebook] = ready
        futures = {}
        for i in range(students):
            notebook = ("day6", "day7")[i % 2]
            task = FakeTask(f"student{i}", notebook, tmp_path)
            future = scheduler.submit(task, references[notebook], lambda t, r: (replace(t, reference=r), None),
                                      task.key)
            futures[future] = task.key
        done = {futures[f]: f.result(timeout=120) for f in futures}
    if events is not None:
        events.extend(scheduler.events)
    return done


def test_the_pipeline_grades_every_notebook_once_and_never_times_beside_a_run(tmp_path):
    stages = FakeStages()
    done = _grade(tmp_path, Limits(("0", "1"), runs=4, builds=2, judges_per_gpu=2), stages, GpuGate(lambda g: True))
    assert done == {f"student{i}": ("graded", f"student{i}") for i in range(10)}
    judges = [entry for entry in stages.log if entry[0] == "judge"]
    assert sorted(entry[1] for entry in judges) == sorted(["reference-day6", "reference-day7", *done])  # once each
    runs = [entry for entry in stages.log if entry[0] == "run"]
    assert {entry[2] for entry in runs} == {"0", "1"} and {entry[2] for entry in judges} == {"0", "1"}
    ended = {entry[1]: entry[4] for entry in judges}
    for _, key, gpu, began, _, reference in judges:
        if key.startswith("student"):
            notebook = ("day6", "day7")[int(key.removeprefix("student")) % 2]
            assert reference == f"ref-{notebook}" and began >= ended[f"reference-{notebook}"]
        others = [j for j in judges if j[2] == gpu and j[1] != key]
        assert all(j[4] <= began or j[3] >= ended[key] for j in others), "two judges held one GPU at once"
        for _, run_key, run_gpu, *_ in runs:
            visible, stamps = _stamps(tmp_path / f"{run_key}.txt")
            assert visible == run_gpu  # each run pinned to its slot
            if run_gpu == gpu:
                assert _inside(stamps, (began, ended[key])) == [], f"{run_key} ran while {key} held GPU {gpu}"
    overlapping = any(a[3] < b[4] and b[3] < a[4] for a in runs for b in runs if a is not b)
    assert overlapping  # the runs did share the GPUs


def test_the_timeline_has_each_notebooks_stages_in_order_and_each_hold_inside_a_judge(tmp_path):
    stages, events, gate = FakeStages(), [], GpuGate(lambda g: True)
    done = _grade(tmp_path, Limits(("0", "1"), runs=4, builds=2, judges_per_gpu=2), stages, gate, students=6,
                  events=events)
    by_label = {}
    for event in events:
        by_label.setdefault(event.label, {})[event.stage] = event
    assert set(by_label) == {*done, "reference-day6", "reference-day7"}
    for label, ran in by_label.items():
        assert set(ran) == {"run", "build", "judge"}, label
        assert ran["run"].start <= ran["run"].end <= ran["build"].start <= ran["build"].end <= ran["judge"].start
        assert ran["run"].gpu in ("0", "1") and ran["build"].gpu is None and ran["judge"].gpu in ("0", "1")
    assert len(gate.holds) == len(by_label)  # one hold per judge here, each inside a judge of its GPU
    for gpu, start, end in gate.holds:
        assert any(e.stage == "judge" and e.gpu == gpu and e.start <= start <= end <= e.end for e in events)


def test_the_serial_schedule_grades_one_notebook_at_a_time_in_order(tmp_path):
    stages = FakeStages()
    done = _grade(tmp_path, Limits(("0",), runs=1, builds=1, judges_per_gpu=1), stages, None, one_at_a_time=True,
                  students=4)
    assert set(done) == {f"student{i}" for i in range(4)}
    spans: dict[str, list[float]] = {}
    for entry in stages.log:
        spans.setdefault(entry[1], []).extend(entry[3:5])
    order = sorted(spans, key=lambda key: min(spans[key]))
    assert order == ["reference-day6", "reference-day7", "student0", "student1", "student2", "student3"]
    for first, second in itertools.pairwise(order):
        assert max(spans[first]) <= min(spans[second]), f"{second} started before {first} was judged"


def test_a_stage_that_fails_is_that_notebooks_grader_error_and_the_rest_are_graded(tmp_path):
    stages = FakeStages(fail="student3")
    done = _grade(tmp_path, Limits(("0",), runs=2, builds=1), stages, GpuGate(lambda g: True), students=6)
    assert done.pop("student3") == ("grader_error", "build", "the build broke")
    assert done == {f"student{i}": ("graded", f"student{i}") for i in (0, 1, 2, 4, 5)}


class CountingStages(FakeStages):
    """Runs and builds that only count how many of them are under way at once."""

    def __init__(self) -> None:
        super().__init__()
        self.active = self.most = 0

    def _busy(self, seconds: float) -> None:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(seconds)
        with self.lock:
            self.active -= 1

    def run(self, task, gpu, pause):
        self._busy(0.05)
        return task.key

    def build(self, task, staged):
        self._busy(0.2)  # slower than a run: builds pile up beside the runs unless the slots are shared
        return staged


def test_on_a_cpu_runs_and_builds_share_the_cpu_slots(tmp_path):
    stages = CountingStages()
    done = _grade(tmp_path, Limits((), runs=2, builds=2, judges_per_gpu=1, cpu_slots=2), stages, None, students=12)
    assert len(done) == 12 and stages.most == 2
    unshared = CountingStages()
    _grade(tmp_path, Limits((), runs=2, builds=2, judges_per_gpu=1), unshared, None, students=12)
    assert unshared.most > 2  # the control: without shared slots both stages fill their own pools
