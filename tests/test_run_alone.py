"""A run's requests for its GPU alone (grader.run.run_alone, course.recorder.alone), with fake GPU slots.

Processes stand in for runs: each stamps the time (CLOCK_MONOTONIC, one clock for every process) into a file
every few milliseconds; the asking one holds its GPU alone through the recorder's own client while it stamps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types
from contextlib import ExitStack
from pathlib import Path

import pytest

from course.recorder import alone
from grader.gpu.gpu_gate import GpuGate
from grader.intake.layout import REPO
from grader.run.run_alone import AloneChannel
from grader.wall import sandbox, scratch_folders, wall_tree
from tests.test_schedule import STAMPER, _inside, _stamps

# Asks for the GPU alone after a first moment (garbage on the channel before, as a student may write), stamps
# for HOLD seconds inside the block, then asks again; writes what it saw.
ASKER = """
import json, os, sys, time
from pathlib import Path

import pytest
from course.recorder.alone import gpu_alone
hold = float(sys.argv[2])
time.sleep(0.4)
fd = os.open(Path(os.environ["COURSE_GPU_ALONE"]) / "ask", os.O_WRONLY)
os.write(fd, b"x" * 5000 + b"\\nrelease\\nnonsense\\n")
os.close(fd)
stamps = []
with gpu_alone() as held:
    began = time.monotonic()
    while time.monotonic() < began + hold:
        stamps.append(time.monotonic())
        time.sleep(0.002)
    ended = time.monotonic()
with gpu_alone() as again:
    pass
Path(sys.argv[1]).write_text(json.dumps({"held": held, "again": again, "began": began, "ended": ended,
                                         "stamps": stamps}))
"""


def _start(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args],
                            env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", ""), **(env or {})})


def _grade_beside(tmp_path: Path, hold: float, budget: float) -> tuple[dict, AloneChannel, dict[str, list[float]]]:
    """An asking run on GPU 0 beside a plain run on GPU 0 and one on GPU 1; what each saw."""
    gate = GpuGate(idle=lambda gpu: True)
    with ExitStack() as stack:
        others = {}
        for name, gpu in (("same", "0"), ("other", "1")):
            process = _start(STAMPER, str(tmp_path / f"{name}.txt"), str(hold + 4.0), env={"CUDA_VISIBLE_DEVICES": gpu})
            stack.enter_context(gate.shared(gpu)).attach(process.pid)
            others[name] = process
        user = stack.enter_context(gate.shared("0"))
        channel = stack.enter_context(AloneChannel(tmp_path / "gpu-alone", user, budget=budget))
        asker = _start(ASKER, str(tmp_path / "asker.json"), str(hold), env=channel.environment())
        user.attach(asker.pid)
        assert asker.wait(timeout=60) == 0
        for process in others.values():
            process.wait(timeout=60)
    stamps = {name: _stamps(tmp_path / f"{name}.txt")[1] for name in others}
    return json.loads((tmp_path / "asker.json").read_text()), channel, stamps


def test_a_run_that_asks_holds_its_gpu_alone_and_goes_on(tmp_path):
    seen, channel, stamps = _grade_beside(tmp_path, hold=0.8, budget=30.0)
    held = (seen["began"], seen["ended"])
    assert seen["held"] is True and seen["again"] is True  # the garbage before it changed nothing
    assert len(_inside(seen["stamps"], held)) > 100  # the asker itself went on
    assert _inside(stamps["same"], held) == [], "a run on the same GPU ran while the asker held it"
    assert len(_inside(stamps["other"], held)) > 100  # the other GPU's run went on
    assert any(t > seen["ended"] for t in stamps["same"])  # and the paused one was let go on
    assert channel.holds == 2 and 0.8 <= channel.held < 5.0


def test_a_run_that_never_releases_holds_only_its_budget_then_is_refused(tmp_path):
    seen, channel, stamps = _grade_beside(tmp_path, hold=3.0, budget=0.6)
    assert seen["held"] is True and seen["again"] is False  # refused: its budget was spent
    assert channel.holds == 1 and channel.refused == 1 and 0.6 <= channel.held < 1.5
    # the other run on its GPU was let go on once the budget ran out, while the asker still "held" it
    assert len(_inside(stamps["same"], (seen["began"] + 1.6, seen["ended"]))) > 100


def test_outside_a_grading_run_nothing_is_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(alone.ENV, raising=False)
    with alone.gpu_alone() as held:
        assert held is False
    monkeypatch.setenv(alone.ENV, str(tmp_path))  # a folder without the grader's FIFOs
    with alone.gpu_alone() as held:
        assert held is False


def test_the_channel_pauses_nothing_that_is_not_on_its_gpu_and_ends_its_hold_when_closed(tmp_path):
    gate = GpuGate(idle=lambda gpu: True)
    with gate.shared("0") as user, AloneChannel(tmp_path / "a", user) as channel:
        fd = os.open(channel.folder / "ask", os.O_WRONLY)
        os.write(fd, b"alone\n")  # asked and never released: the run ends holding it
        os.close(fd)
        deadline = time.monotonic() + 10
        while not gate.busy("0") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.busy("0") and not gate.busy("1")
    assert not gate.busy("0") and channel.holds == 1


@pytest.mark.gpu
def test_the_recorder_autotunes_again_with_the_gpu_alone_at_each_benchmark_shape(tmp_path, monkeypatch):
    # The autotuner's first choice was made beside other runs; at a benchmark shape (the judge times only those)
    # the recorder asks for the GPU alone and has the autotuner choose again among its fastest configurations
    # (compiled already) before the recorded call. A correctness call asks nothing.
    import course
    from course.exercises.matmul_fp32 import SPEC
    from course.recorder import export
    from tests import kernels

    course.device.configure("gpu")
    calls = [("visible-0", [256, 192, 128]), ("bench-0", [256, 256, 256]), ("bench-1", [300, 200, 100])]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"out": str(tmp_path / "export"), "device": "cuda", "kernels": [
        {"spec": SPEC.id, "warmup": True,
         "calls": [{"key": key, "shape": shape, "seed": i} for i, (key, shape) in enumerate(calls)]}]}))
    tuned = kernels._tuned
    tuned.cache.clear()
    gate = GpuGate(idle=lambda gpu: True)
    with gate.shared("0") as run, AloneChannel(tmp_path / "gpu-alone", run) as channel:
        monkeypatch.setenv(alone.ENV, channel.folder.as_posix())
        export.write({"matmul": kernels.tuned_matmul, "_tuned": tuned}, str(request))
    exported = json.loads((tmp_path / "export" / "export.json").read_text())
    assert set(exported["kernels"][SPEC.id]["calls"]) == {key for key, _ in calls}
    assert channel.holds == 2  # the two benchmark shapes
    assert len(tuned.cache) == 1 and len(tuned.configs) == 2  # the last shape's choice; the full list back


def test_the_recorder_finds_the_autotuners_a_notebook_defines_and_makes_them_choose_again():
    import triton

    from tests import kernels

    wrapped = triton.heuristics({"BK": lambda args: 32})(kernels._tuned)
    found = alone.autotuners({"tuned": kernels._tuned, "wrapped": wrapped, "plain": kernels._matmul,
                              "function": kernels.tuned_matmul, "number": 3, "kind": int})
    assert found == [kernels._tuned]  # once, though two names reach it
    kernels._tuned.cache[("key",)] = kernels._tuned.configs[0]
    alone.forget_choices(found)
    assert kernels._tuned.cache == {} and kernels._tuned.cache_results is False


@pytest.mark.sandbox
@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason=f"NOT RUN: {sandbox.unavailable_reason()}")
def test_the_request_crosses_the_sandbox_wall(tmp_path):
    # The FIFOs lie in the run's scratch directory, which the sandbox binds: the sandboxed recorder's ask reaches
    # the grader, and the grant comes back.
    scratch = scratch_folders.make_scratch()
    try:
        gate = GpuGate(idle=lambda gpu: True)
        with gate.shared("0") as run, AloneChannel(scratch / "gpu-alone", run) as channel:
            code = "from course.recorder.alone import gpu_alone\nwith gpu_alone() as held: print(held)"
            env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(scratch),
                   "PYTHONPATH": str(wall_tree.tree()), **channel.environment()}
            result = sandbox.run([sys.executable, "-c", code], scratch=scratch, env=env,
                                 limits=sandbox.Limits(seconds=60), log_path=tmp_path / "log", pause=run)
        assert result.status == "ok", (tmp_path / "log").read_text()
        assert (tmp_path / "log").read_text().strip().endswith("True") and channel.holds == 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _fake_tuner(timings: dict[str, object]) -> types.SimpleNamespace:
    return types.SimpleNamespace(configs=list(timings), configs_timings=timings, cache={("k",): "x"},
                                 cache_results=True)


def test_the_candidates_are_the_run_s_fastest_first_however_slow_the_shared_benchmark_read_them():
    # "b" read 3x slower than "a" beside other runs (a pause at the gate inside its timing, say): still a candidate.
    tuner = _fake_tuner({"c": [1.3, 1.2, 1.4], "a": [1.0, 0.9, 1.1], "d": 9.0, "b": [3.0, 2.9, 3.1]})
    assert alone.candidates(tuner) == ["a", "c", "b", "d"] and alone.candidates(tuner, most=2) == ["a", "c"]
    assert alone.candidates(_fake_tuner({})) == []


def test_forcing_a_configuration_leaves_the_tuner_s_list_and_choices_as_they_were():
    tuner = _fake_tuner({"a": 1.0, "b": 1.1})
    with alone.forcing(tuner, "b"):
        assert tuner.configs == ["b"] and tuner.cache == {("k",): "x"}
    assert tuner.configs == ["a", "b"] and tuner.cache == {("k",): "x"} and tuner.cache_results is True
