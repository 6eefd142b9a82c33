"""Week 1 Day 1's specs (a host matmul and a host timer) and the shared pieces they use: the host check in
course.check, the accept rule in compare, the judge's host path and the plots. Nothing here is timed: the
timer's workload is checked against its plan with time.sleep replaced."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
import torch

from course import check, plot
from course.exercises import w1d1_host_baseline as day1
from course.recorder import export
from course.spec import judged_shapes
from grader.judge import on_cpu

MATMUL, TIMER = day1.MATMUL, day1.TIMER


# --- w1d1.matmul_naive -------------------------------------------------------------------------------

def _loops(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    c = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            for p in range(a.shape[1]):
                c[i, j] += a[i, p] * b[p, j]
    return c


def test_matmul_reference_on_a_hand_checked_case():
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[5.0], [6.0]])
    assert MATMUL.reference((a, b)).tolist() == [[17.0], [39.0]]
    assert MATMUL.reference((a, b)).dtype == torch.float64


def test_matmul_inputs_are_fresh_fp64_and_seeded():
    a1, b1 = MATMUL.make_inputs((3, 4, 5), 7, "cpu")
    a2, _ = MATMUL.make_inputs((3, 4, 5), 7, "cuda")  # host work: the device is ignored
    a3, _ = MATMUL.make_inputs((3, 4, 5), 8, "cpu")
    assert a1.shape == (3, 5) and b1.shape == (5, 4) and a1.dtype == np.float64
    assert np.array_equal(a1, a2) and not np.array_equal(a1, a3)
    assert np.all(a1 != 0)


def test_matmul_shapes_include_ones_and_non_square_sizes():
    shapes = [*MATMUL.visible_shapes.cpu, *MATMUL.hidden_shapes.cpu]
    for side in range(3):
        assert any(shape[side] == 1 for shape in shapes)
    assert any(len(set(shape)) == 3 for shape in shapes)
    assert MATMUL.visible_shapes.cpu == MATMUL.visible_shapes.gpu


def test_drawn_matmul_shapes_are_small_and_differ_between_runs():
    runs = {judged_shapes(MATMUL, "hidden", False, seed) for seed in range(20)}
    assert len(runs) > 1
    assert all(1 <= n <= 40 for shapes in runs for shape in shapes for n in shape)


def test_loops_pass_and_fp32_sums_or_other_dtypes_fail():
    results = check.check(MATMUL, _loops, [(4, 5, 3), (1, 1, 1), (6, 1, 17)])
    assert all(r.passed for r in results), [r.message for r in results]
    fp32 = check.check(MATMUL, lambda a, b: (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float64),
                       [(30, 20, 40)])[0]
    assert not fp32.passed and "relative error" in fp32.message
    assert "dtype" in check.check(MATMUL, lambda a, b: (a @ b).astype(np.float32), [(3, 3, 3)])[0].message
    as_list = check.check(MATMUL, lambda a, b: (a @ b).tolist(), [(3, 3, 3)])[0]
    assert not as_list.passed and "NumPy array" in as_list.message


def test_a_stub_fails_without_raising():
    def stub(a, b):
        raise NotImplementedError()

    result = check.check(MATMUL, stub, [(2, 2, 2)])[0]
    assert not result.passed and "not implemented" in result.message


# --- w1d1.median_time_ms ------------------------------------------------------------------------------

def _all_timer_shapes() -> list[tuple[int, int, int]]:
    """Every shape the spec lists, and every shape draw_hidden can draw (its steady time does not matter)."""
    shapes = [*TIMER.visible_shapes.cpu, *TIMER.hidden_shapes.cpu]
    for repeats in (7, 9, 11, 13):
        shapes += [(7000, warmup, repeats) for warmup in range((repeats + 1) // 2, repeats + 1)]
    return shapes


def _estimates(shape: tuple[int, int, int], seed: int) -> dict[str, float]:
    """What right and wrong timers would report on the plan's durations (ms)."""
    _, warmup, repeats = shape
    plan = day1.schedule(shape, seed)
    timed = plan[warmup:warmup + repeats]
    return {
        "median": statistics.median(timed),
        "mean": statistics.mean(timed),
        "min": min(timed),
        "median with warm-up": statistics.median(plan[:warmup + repeats]),
        "median without warm-up": statistics.median(plan[:repeats]),
        "mean of all": statistics.mean(plan[:warmup + repeats]),
        "first call": plan[0],
    }


@pytest.mark.parametrize("shape", _all_timer_shapes())
def test_only_the_median_of_the_timed_calls_is_accepted(shape):
    steady = shape[0] / 1000
    for seed in range(5):
        estimates = _estimates(shape, seed)
        assert estimates.pop("median") == pytest.approx(steady)
        for name, value in estimates.items():
            assert not day1.accept_time(value, steady, shape)[0], f"{name} passed on {shape}"


@pytest.mark.parametrize("shape", _all_timer_shapes())
def test_the_median_survives_overshoot_on_a_loaded_machine(shape):
    """Every timed call 4 ms late (the worst overshoot measured at a load of 6): still accepted."""
    _, warmup, repeats = shape
    late = [ms + 4.0 for ms in day1.schedule(shape, 0)[warmup:warmup + repeats]]
    assert day1.accept_time(statistics.median(late), shape[0] / 1000, shape)[0]


def test_a_single_timed_call_rarely_lands_in_the_band():
    shape = TIMER.visible_shapes.cpu[0]
    steady, warmup = shape[0] / 1000, shape[1]
    lucky = sum(day1.accept_time(day1.schedule(shape, 0)[warmup + i], steady, shape)[0] for i in range(shape[2]))
    assert lucky == 3  # the three middle calls of eleven


def test_the_workload_sleeps_its_plan_then_its_steady_time(monkeypatch):
    slept = []
    monkeypatch.setattr(day1.time, "sleep", slept.append)
    shape = (8000, 6, 11)
    workload, warmup, repeats = TIMER.make_inputs(shape, 3, "cpu")
    assert (warmup, repeats) == (6, 11)
    for _ in range(warmup + repeats + 2):
        workload()
    assert [s * 1000 for s in slept[:-2]] == pytest.approx(day1.schedule(shape, 3))
    assert [s * 1000 for s in slept[-2:]] == pytest.approx([8.0, 8.0])
    assert TIMER.reference(TIMER.make_inputs(shape, 3, "cpu")) == 8.0


def test_the_plan_depends_on_the_seed_and_counts_on_the_shape():
    shape = (8000, 6, 11)
    assert day1.schedule(shape, 1) != day1.schedule(shape, 2)
    assert sorted(day1.schedule(shape, 1)) == sorted(day1.schedule(shape, 2))
    assert day1.schedule(shape, 1)[:6] == [48.0] + [24.0] * 5


@pytest.mark.parametrize("value, said", [
    (np.float64(8.0), "returned float64"),
    (True, "returned bool"),
    (float("nan"), "positive number"),
    (0.008, "seconds instead of milliseconds"),
    (2.0, "too low"),
    (20.0, "too high"),
])
def test_accept_refuses_wrong_values_and_says_why(value, said):
    passed, message = day1.accept_time(value, 8.0, (8000, 6, 11))
    assert not passed and said in message


def test_accept_refuses_a_float_subclass_that_claims_any_ratio():
    class Agreeable(float):
        def __truediv__(self, other):
            return 1.0

    assert not day1.accept_time(Agreeable(99.0), 8.0, (8000, 6, 11))[0]
    assert day1.accept_time(8.2, 8.0, (8000, 6, 11))[0] and day1.accept_time(8, 8.0, (8000, 6, 11))[0]


def test_the_notebook_check_refuses_a_numpy_scalar(monkeypatch):
    monkeypatch.setattr(day1.time, "sleep", lambda seconds: None)

    def numpy_median(fn, warmup, repeats):
        for _ in range(warmup + repeats):
            fn()
        return np.float64(8.0)

    result = check.check(TIMER, numpy_median, [(8000, 6, 11)])[0]
    assert not result.passed and "float()" in result.message


# --- shared pieces: the exported value, compare's accept, the judge's host path, plots ----------------

def test_as_exported_follows_the_export_rules():
    value, problem = check.as_exported({"a": [1, 2.5, np.ones(2)], "b": (None, "s")})
    assert problem is None and isinstance(value["a"][2], torch.Tensor) and value["b"] == (None, "s")
    assert "NumPy scalar" in check.as_exported(np.int64(3))[1]
    class Marked(np.ndarray):
        pass

    assert "Marked" in check.as_exported(np.ones(2).view(Marked))[1]
    assert check.as_exported(np.array(["x"]))[1] == "an array of <U1"
    assert "keys" in check.as_exported({1: 2})[1]


def test_compare_without_accept_refuses_a_number():
    result = check.compare(MATMUL, (1, 1, 1), 3.0, torch.ones(1, 1, dtype=torch.float64), "cpu")
    assert not result.passed and "returned float" in result.message


def _judged(spec, shape, value, tmp_path, seed=5):
    recorded = {"value": export.encode_answer(value, tmp_path, "v")}
    call = {"shape": list(shape), "seed": seed}
    return on_cpu._host_check(spec, call, recorded, tmp_path, "cpu")


def test_the_judge_checks_a_returned_array_against_its_own_reference(tmp_path):
    a, b = MATMUL.make_inputs((4, 3, 5), 5, "cpu")
    assert _judged(MATMUL, (4, 3, 5), a @ b, tmp_path)[0]
    assert not _judged(MATMUL, (4, 3, 5), a @ b, tmp_path, seed=6)[0]  # another seed: other inputs


def test_the_judge_applies_accept_and_names_an_unsupported_value(tmp_path):
    assert _judged(TIMER, (8000, 6, 11), 8.3, tmp_path)[0]
    assert not _judged(TIMER, (8000, 6, 11), 30.0, tmp_path)[0]
    passed, message = _judged(TIMER, (8000, 6, 11), np.float64(8.3), tmp_path)
    assert not passed and "numpy.float64" in message


def test_day1_plots_render():
    assert plot.to_png(plot.times_per_call([5.0, 1.0, 1.2, 3.0], "t", skip=1)).startswith(b"\x89PNG")
    figure = plot.gflops_vs_size({"a": [0.01, float("nan")], "b": [1.0, 50.0]}, ["8", "16"], "t", log_scale=True)
    assert figure.axes[0].get_yscale() == "log"
    plot.to_png(figure)
    with pytest.raises(ValueError):
        plot.times_per_call([1.0], "t", skip=1)


def test_draw_timer_hidden_keeps_the_warm_up_longer_than_half():
    rng = random.Random(0)
    for _ in range(50):
        ((steady_us, warmup, repeats),) = day1.draw_timer_hidden(rng, False)
        assert repeats % 2 == 1 and 2 * warmup > repeats and 12000 <= steady_us <= 20000


def test_each_timer_call_is_recorded_inside_a_hold_of_the_gpu(tmp_path, monkeypatch):
    # A judge's hold freezes every other run on its GPU (SIGSTOP): frozen inside a timed call, a right timer read
    # 3.0x on an H100. Each graded timer call is made with the run's own hold, so no judge can freeze it there;
    # the matmul, which times nothing, asks for none.
    import json

    from course.recorder import alone
    from grader.gpu.gpu_gate import GpuGate
    from grader.run.run_alone import AloneChannel

    held_during_calls = []
    gate = GpuGate(idle=lambda gpu: True)

    def right_timer(fn, warmup, repeats):
        held_during_calls.append(gate.busy("0"))
        return _estimates_of(fn, warmup, repeats)

    request = tmp_path / "request.json"
    shapes = [(12000, 4, 7), (14000, 5, 9)]
    request.write_text(json.dumps({"out": str(tmp_path / "export"), "device": "cpu", "kernels": [
        {"spec": day1.TIMER.id, "calls": [{"key": f"visible-{i}", "shape": list(s), "seed": i}
                                          for i, s in enumerate(shapes)]},
        {"spec": day1.MATMUL.id, "calls": [{"key": "visible-0", "shape": [2, 3, 4], "seed": 0}]}]}))
    with gate.shared("0") as run, AloneChannel(tmp_path / "gpu-alone", run) as channel:
        monkeypatch.setenv(alone.ENV, channel.folder.as_posix())
        export.write({"median_time_ms": right_timer, "matmul_naive": lambda a, b: a @ b}, str(request))
    exported = json.loads((tmp_path / "export" / "export.json").read_text())
    assert set(exported["kernels"][day1.TIMER.id]["calls"]) == {"visible-0", "visible-1"}
    assert channel.holds == 2 and channel.refused == 0
    assert held_during_calls == [True, True]


def _estimates_of(fn, warmup: int, repeats: int) -> float:
    import time

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
