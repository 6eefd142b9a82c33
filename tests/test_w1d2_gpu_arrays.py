"""Week 1 Day 2: the timing exercise's spec, the asynchronous work it times, and the check's host path."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
import torch

import course
from course import check
from course.days import async_work
from course.exercises import async_device
from course.exercises import w1d2_gpu_arrays as day2
from course.exercises.w1d2_gpu_arrays import SPEC

HAS_GPU = torch.cuda.is_available()


def right_timer(fn) -> float:
    course.device.synchronize()
    start = time.perf_counter()
    fn()
    course.device.synchronize()
    return (time.perf_counter() - start) * 1e3


def no_wait_timer(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def wait_at_end_timer(fn) -> float:
    start = time.perf_counter()
    fn()
    course.device.synchronize()
    return (time.perf_counter() - start) * 1e3


def test_the_spec_is_registered_as_a_host_function_of_day_2():
    assert course.spec.get("w1d2.gpu_time_ms") is SPEC
    assert SPEC.kind == "host" and SPEC.accept is day2.accept
    assert SPEC in course.spec.for_notebook("week1/day2_gpu_arrays")
    assert set(SPEC.correctness_cells.values()) == {"visible", "hidden"}


def test_durations_are_drawn_from_the_seed_within_the_stated_ranges():
    draws = {seed: day2.durations((40,), seed) for seed in range(50)}
    assert draws[7] == day2.durations((40,), 7)
    assert len({d for d, _ in draws.values()}) == 50
    for duration, backlog in draws.values():
        assert 40 * day2.JITTER[0] <= duration <= 40 * day2.JITTER[1]
        assert duration * day2.BACKLOG[0] <= backlog <= duration * day2.BACKLOG[1]


@pytest.mark.parametrize("shape_set", [SPEC.visible_shapes, SPEC.hidden_shapes])
def test_no_constant_can_pass_a_whole_set(shape_set):
    for shapes in (shape_set.gpu, shape_set.cpu):
        nominal = sorted(s[0] for s in shapes)
        lowest_high = nominal[0] * day2.JITTER[1] * day2.FACTOR
        highest_low = nominal[-1] * day2.JITTER[0] / day2.FACTOR
        assert lowest_high < highest_low  # a constant fitting the shortest is too short for the longest


def test_cpu_shapes_are_long_enough_for_a_simulated_device():
    sets = (SPEC.visible_shapes.cpu, SPEC.hidden_shapes.cpu)
    assert min(s[0] for shapes in sets for s in shapes) >= 50
    import random

    assert min(s[0] for s in SPEC.draw_hidden(random.Random(3), False)) >= 50


def test_make_inputs_queues_earlier_work_and_the_reference_waits_for_it():
    course.device.synchronize()
    (workload,) = SPEC.make_inputs((25,), 5, "cpu")
    assert isinstance(workload, async_work.Workload) and workload.device == "cpu"
    assert async_work.SIMULATED.busy  # the earlier work is still queued when the workload is handed over
    truth = SPEC.reference((workload,))
    assert not async_work.SIMULATED.busy
    assert truth == day2.durations((25,), 5)[0] == workload.planned_ms


@pytest.mark.skipif(HAS_GPU, reason="the simulated device is what runs without a GPU; here the GPU runs the work")
def test_a_workload_call_only_queues_its_work():
    course.device.synchronize()
    workload = async_work.Workload(30, "cpu")
    workload()
    assert async_work.SIMULATED.busy
    course.device.synchronize()
    assert not async_work.SIMULATED.busy


def test_launch_refuses_bad_arguments():
    with pytest.raises(ValueError):
        async_work.launch(-1, "cpu")
    with pytest.raises(ValueError):
        async_work.launch(1, "tpu")
    with pytest.raises(ValueError):
        async_work.Workload(1, "mps")


@pytest.mark.parametrize(("reported", "truth", "passed"), [
    (10.0, 10.0, True), (14.9, 10.0, True), (6.7, 10.0, True), (15.1, 10.0, False), (6.6, 10.0, False),
    (12, 10.0, True), (0.004, 30.0, False), (75.0, 30.0, False),
])
def test_accept_wants_a_time_within_the_factor(reported, truth, passed):
    ok, message = day2.accept(reported, truth, (10,))
    assert ok is passed, message


@pytest.mark.parametrize("value", [True, np.float64(10.0), torch.tensor(10.0), "10", None, math.nan, math.inf,
                                   -10.0, 0.0])
def test_accept_refuses_anything_but_a_positive_plain_number(value):
    ok, message = day2.accept(value, 10.0, (10,))
    assert not ok and message


def test_accept_says_which_way_the_timer_is_wrong():
    assert "before reading the clock" in day2.accept(0.01, 10.0, (10,))[1]
    assert "before starting" in day2.accept(30.0, 10.0, (10,))[1]


def test_the_right_timer_passes_and_the_classic_mistakes_fail_on_the_simulated_device():
    # The spec's CPU durations (50 ms and up): on a loaded 2-core CI machine a correct timer once read
    # x1.5 of a 25 ms call, which is the reason the spec sets that floor.
    shapes = list(SPEC.visible_shapes.cpu[:2])
    assert min(s[0] for s in shapes) >= 50
    assert all(r.passed for r in check.check(SPEC, right_timer, shapes)), check.check(SPEC, right_timer, shapes)
    assert not any(r.passed for r in check.check(SPEC, no_wait_timer, shapes))
    assert not any(r.passed for r in check.check(SPEC, wait_at_end_timer, shapes))
    course.device.synchronize()


def test_a_stub_fails_with_a_message_not_an_exception():
    def stub(fn):
        raise NotImplementedError()

    results = check.check(SPEC, stub, [(25,)])
    assert not results[0].passed and "not implemented" in results[0].message


# --- the shared changes: compare() honours accept, check_one() judges host functions as the judge does

def _fake_spec(**changes):
    from course.exercises.matmul_fp32 import SPEC as MATMUL

    return dataclasses.replace(MATMUL, id="test.fake", **changes)


def test_compare_checks_a_tensor_output_before_the_accept_rule():
    calls = []
    spec = _fake_spec(accept=lambda out, ref, shape: (calls.append(shape) or True, "fine"))
    ref = torch.zeros(2, 3, dtype=torch.float64)
    assert not check.compare(spec, (2, 3, 4), torch.zeros(3, 3), ref, "cpu").passed  # wrong shape
    assert not check.compare(spec, (2, 3, 4), 5.0, ref, "cpu").passed  # not a tensor
    assert calls == []
    result = check.compare(spec, (2, 3, 4), torch.full((2, 3), 9.0), ref, "cpu")
    assert result.passed and calls == [(2, 3, 4)]  # the rule, not the relative error, decided


def test_compare_lets_the_accept_rule_judge_a_value_that_is_no_tensor():
    spec = _fake_spec(accept=lambda out, ref, shape: (out == ref, "equal" if out == ref else "differs"))
    assert check.compare(spec, (1, 1, 1), 3.0, 3.0, "cpu").passed
    assert not check.compare(spec, (1, 1, 1), 2.0, 3.0, "cpu").passed


def test_check_one_runs_a_host_function_unguarded_and_sees_its_value_as_the_judge_does():
    def numpy_matmul(a, b):  # refused inside the guard kernels run under; fine for a host function
        return (a.cpu().numpy() @ b.cpu().numpy()).astype(np.float32)

    spec = _fake_spec(kind="host")
    result = check.check_one(spec, numpy_matmul, (5, 6, 7), seed=1)
    assert result.passed, result.message
    kernel_spec = _fake_spec()
    assert not check.check_one(kernel_spec, numpy_matmul, (5, 6, 7), seed=1).passed


def test_device_synchronize_waits_for_the_simulated_device_on_a_cpu():
    if HAS_GPU:
        pytest.skip("the course runs on the GPU here")
    async_work.launch(30, "cpu")
    assert async_work.SIMULATED.busy
    course.device.synchronize()
    assert not async_work.SIMULATED.busy


def test_the_spin_kernel_compiles_for_an_h100_to_a_loop_on_the_nanosecond_clock():
    from course.days import sm90

    case = sm90.Specialisation("spin", {"out_ptr": "*i64", "duration_ns": "i32"}, {}, {"num_warps": 1})
    made = sm90.compile_in_child(async_work.spin_body, [case])["spin"]
    assert made.error is None, made.error
    ptx = made.ptx
    body = ptx[ptx.index(".entry"):]
    loop = body[body.index("Loop Header"):]
    assert body.count("%globaltimer") == 2  # read once before the loop and again inside it
    assert "%globaltimer" in loop[:loop.index("bra")]


# --- on a GPU

@pytest.mark.gpu
def test_gpu_reference_measures_the_planned_duration():
    (workload,) = SPEC.make_inputs((20,), 3, "cuda")
    truth = SPEC.reference((workload,))
    assert workload.planned_ms * 0.99 <= truth <= workload.planned_ms * 1.05 + 0.05


@pytest.mark.gpu
def test_gpu_right_timer_passes_and_mistakes_fail():
    shapes = list(SPEC.visible_shapes.gpu)
    assert all(r.passed for r in check.check(SPEC, right_timer, shapes))
    assert not any(r.passed for r in check.check(SPEC, no_wait_timer, shapes))
    assert not any(r.passed for r in check.check(SPEC, wait_at_end_timer, shapes))


@pytest.mark.gpu
def test_gpu_work_longer_than_one_launch_is_split_and_still_timed_right():
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    async_work.launch(async_work.MAX_LAUNCH_MS + 200, "cuda")
    end.record()
    end.synchronize()
    assert async_work.MAX_LAUNCH_MS + 200 <= start.elapsed_time(end) <= (async_work.MAX_LAUNCH_MS + 200) * 1.05


def test_the_recorder_times_the_students_calls_with_the_gpu_alone_and_only_those(tmp_path, monkeypatch):
    # Its answer is a time measured in the run: beside other runs on a shared GPU the truth would not hold, so
    # each recorded call asks the grader for the GPU alone (grader.run.run_alone); a host exercise that measures
    # nothing on the GPU asks nothing.
    import json

    from course.exercises.w1d1_host_baseline import MATMUL
    from course.recorder import alone, export
    from grader.gpu.gpu_gate import GpuGate
    from grader.run.run_alone import AloneChannel

    request = tmp_path / "request.json"
    calls = [{"key": f"visible-{i}", "shape": [25], "seed": i} for i in range(2)]
    request.write_text(json.dumps({"out": str(tmp_path / "export"), "device": "cpu", "kernels": [
        {"spec": SPEC.id, "calls": calls},
        {"spec": MATMUL.id, "calls": [{"key": "visible-0", "shape": [2, 3, 4], "seed": 0}]}]}))
    namespace = {"gpu_time_ms": right_timer, "matmul_naive": lambda a, b: a @ b}
    gate = GpuGate(idle=lambda gpu: True)
    # The work queued before each timed call is queued inside the hold: the hold's drain would finish it.
    queued_while_held = []
    launch = async_device.launch  # the spec's inputs queue their work through it
    monkeypatch.setattr(async_device, "launch",
                        lambda *a: (queued_while_held.append(gate.busy("0")), launch(*a))[1])
    with gate.shared("0") as run, AloneChannel(tmp_path / "gpu-alone", run) as channel:
        monkeypatch.setenv(alone.ENV, channel.folder.as_posix())
        export.write(namespace, str(request))
    exported = json.loads((tmp_path / "export" / "export.json").read_text())
    assert set(exported["kernels"][SPEC.id]["calls"]) == {"visible-0", "visible-1"}
    assert "value" in exported["kernels"][MATMUL.id]["calls"]["visible-0"]
    assert channel.holds == 2 and channel.refused == 0
    assert len(queued_while_held) >= 2 and all(queued_while_held)
    # Week 1 Day 1's host timer too: a judge's hold elsewhere froze its run mid-measurement on an H100 (a right
    # timer read 3.0x of the steady time), so its calls are made in a hold as well.
    assert sorted(s.id for s in course.spec.all_specs() if s.timed_in_run) == ["w1d1.median_time_ms", SPEC.id]
