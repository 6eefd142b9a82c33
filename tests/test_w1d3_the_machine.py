"""Week 1 Day 3: the specs w1d3.peak_fp32 and w1d3.program_coordinates, and the shared changes they need.

The shared changes: datasheet SM figures in course.peaks; an ``accept`` rule that judges plain values
(course.check.compare) and no "a kernel must have launched" rule for host functions; integer buffers
poisoned with -1 (course.guard, course.recorder.plan) as the judge's replay does; course.plot.program_grid; and
no benchmark calls for a kernel without performance items (grader.pipeline.kernel_calls).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from matplotlib.figure import Figure

from course import check, peaks, plot
from course.exercises.w1d3_the_machine import (
    COORDINATES,
    PEAK,
    accept_peak,
    coordinate_inputs,
    coordinate_reference,
    peak_inputs,
    peak_reference,
)
from course.recorder import plan
from course.spec import judged_shapes


def _row(gpu: str) -> int:
    return next(i for i, entry in enumerate(peaks.SM_TABLE) if entry.gpu == gpu)


# --- course.peaks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", peaks.SM_TABLE, ids=lambda e: e.gpu)
def test_sm_figures_give_the_printed_datasheet_peak(entry):
    printed = peaks.datasheet_peaks(entry.gpu)
    assert printed is not None and printed.gpu == entry.gpu
    assert entry.fp32_tflops == pytest.approx(printed.fp32_tflops, rel=0.01)
    assert peaks.datasheet_sms(entry.gpu) is entry


def test_every_datasheet_gpu_has_sm_figures():
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-40GB",
                 "NVIDIA A100 80GB PCIe", "NVIDIA L4", "Tesla T4"):
        assert peaks.datasheet_sms(name) is not None, name
    assert peaks.datasheet_sms("NVIDIA H100 80GB HBM3").gpu == "H100 SXM"
    assert peaks.datasheet_sms("Some Other GPU") is None


# --- w1d3.peak_fp32 -----------------------------------------------------------------------------------


def test_peak_reference_by_hand():
    (props,) = peak_inputs((_row("H100 SXM"), 0), seed=5, device="cpu")
    assert props == {"name": "H100 SXM", "sm_count": 132, "fp32_cores_per_sm": 128, "boost_clock_mhz": 1980}
    # 132 * 128 = 16,896 lanes; x 2 x 1.98e9 Hz = 66,908,160,000,000 FLOP/s
    assert peak_reference((props,)) == pytest.approx(66.90816, rel=1e-12)


def test_hypothetical_bins_are_fresh_and_smaller():
    row = _row("L4")
    full = peaks.SM_TABLE[row]
    drawn = [peak_inputs((row, 1), seed, "cpu")[0] for seed in range(20)]
    assert len({(p["sm_count"], p["boost_clock_mhz"]) for p in drawn}) > 10
    for props in drawn:
        assert full.sm_count // 2 <= props["sm_count"] < full.sm_count
        assert 0 < props["boost_clock_mhz"] < full.boost_clock_mhz
        assert props["fp32_cores_per_sm"] == full.fp32_cores_per_sm and "L4" in props["name"]
    assert peak_inputs((row, 1), 3, "cpu") == peak_inputs((row, 1), 3, "cpu")


def test_peak_accept_rule():
    shape = (_row("H100 SXM"), 0)
    reference = peak_reference(peak_inputs(shape, 0, "cpu"))
    assert accept_peak(66.90816, reference, shape)[0]
    assert accept_peak(2 * 132 * 128 * 1980 / 1e6, reference, shape)[0]  # another order of the same product
    passed, message = accept_peak(reference / 2, reference, shape)
    assert not passed and "two floating-point operations" in message
    passed, message = accept_peak(reference * 1000, reference, shape)
    assert not passed and "power of 1000" in message
    assert not accept_peak(67.0, reference, shape)[0]  # the printed datasheet figure is not the product
    assert not accept_peak(float("nan"), reference, shape)[0]
    assert not accept_peak(True, reference, shape)[0]
    passed, message = accept_peak(np.float64(reference), reference, shape)  # exported as "unsupported"
    assert not passed and "plain Python float" in message
    assert not accept_peak(torch.tensor(reference), reference, shape)[0]


def test_compare_judges_a_plain_value_with_the_accept_rule():
    shape = (_row("T4"), 0)
    reference = peak_reference(peak_inputs(shape, 0, "cpu"))
    assert check.compare(PEAK, shape, reference, reference, "cpu").passed
    result = check.compare(PEAK, shape, reference / 2, reference, "cpu")
    assert not result.passed and "T4 as sold" in result.message


def test_host_function_is_checked_without_a_kernel_launch():
    def right(props: dict) -> float:
        return 2 * props["sm_count"] * props["fp32_cores_per_sm"] * props["boost_clock_mhz"] * 1e6 / 1e12

    def by_name(props: dict) -> float:
        return peaks.datasheet_peaks(props["name"].removeprefix("hypothetical ").removesuffix(" bin")).fp32_tflops

    assert all(r.passed for r in check.check(PEAK, right, "visible"))
    assert all(r.passed for r in check.check(PEAK, right, "hidden"))
    assert not any(r.passed for r in check.check(PEAK, by_name, "visible"))


def test_peak_hidden_set_draws_a_bin_per_run():
    drawn = {judged_shapes(PEAK, "hidden", False, seed)[-1] for seed in range(30)}
    assert all(hypothetical == 1 for _, hypothetical in drawn) and len(drawn) > 3


# --- w1d3.program_coordinates ------------------------------------------------------------------------


def test_coordinate_reference_by_hand():
    out = coordinate_reference(coordinate_inputs((2, 3), 0, "cpu"))
    expected = [[[0, 0, 0], [0, 1, 2], [0, 2, 4]],
                [[1, 0, 1], [1, 1, 3], [1, 2, 5]]]
    assert out.dtype == torch.int32 and out.tolist() == expected


def test_coordinate_inputs_are_fresh_and_never_zero():
    (a,), (b,) = coordinate_inputs((4, 6), 1, "cpu"), coordinate_inputs((4, 6), 2, "cpu")
    assert a.shape == (4, 6) and not torch.equal(a, b) and bool((a > 0).all())
    assert torch.equal(a, coordinate_inputs((4, 6), 1, "cpu")[0])


@triton.jit
def _coordinates(out_ptr, stride_row, stride_col, stride_item, ROW_MAJOR: tl.constexpr, ROWS_WRITTEN: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    linear = pid_0 * tl.num_programs(1) + pid_1 if ROW_MAJOR else pid_0 + pid_1 * tl.num_programs(0)
    if pid_0 < ROWS_WRITTEN:
        here = out_ptr + pid_0 * stride_row + pid_1 * stride_col
        tl.store(here, pid_0)
        tl.store(here + stride_item, pid_1)
        tl.store(here + 2 * stride_item, linear)


def _wrapper(row_major: bool = False, rows_written: int = 1 << 30):
    def program_coordinates(like: torch.Tensor) -> torch.Tensor:
        rows, cols = like.shape
        out = torch.empty((rows, cols, 3), dtype=torch.int32, device=like.device)
        _coordinates[(rows, cols)](out, out.stride(0), out.stride(1), out.stride(2),
                                   ROW_MAJOR=row_major, ROWS_WRITTEN=rows_written, num_warps=1)
        return out

    return program_coordinates


def test_coordinate_checks_pass_the_right_kernel_and_fail_wrong_ones():
    assert all(r.passed for r in check.check(COORDINATES, _wrapper(), "visible"))
    assert all(r.passed for r in check.check(COORDINATES, _wrapper(), "hidden"))
    # Numbered row by row: right only where one of the sides is 1.
    row_major = check.check(COORDINATES, _wrapper(row_major=True), "visible")
    assert [r.passed for r in row_major] == [1 in r.shape for r in row_major]
    # Programs of rows 4 and later write nothing: those elements are -1 (the guard poisons integer buffers).
    partial = check.check(COORDINATES, _wrapper(rows_written=4), [(4, 6), (7, 3)])
    assert [r.passed for r in partial] == [True, False]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU recording's poisoning (the GPU judge fills its own "
                    "buffers, tested in test_judge)")
def test_the_recorded_cpu_call_poisons_integer_outputs():
    inputs = coordinate_inputs((7, 3), 0, "cpu")
    wrong = _wrapper(rows_written=4)
    wrong(*inputs)  # leaves a freed buffer of the same size behind, full of right answers
    out, recorded = plan.record_call(wrong, inputs)
    assert not recorded["problems"]
    assert recorded["allocations"][0]["dtype"] == "int32"
    assert bool((out[4:] == -1).all()) and out[:4].tolist() == coordinate_reference(inputs)[:4].tolist()


def test_a_torch_filled_output_is_not_replayable():
    def by_torch(like: torch.Tensor) -> torch.Tensor:
        rows, cols = like.shape
        out = torch.empty((rows, cols, 3), dtype=torch.int32, device=like.device)
        out[..., 0] = torch.arange(rows).view(rows, 1)
        return out

    _, recorded = plan.record_call(by_torch, coordinate_inputs((2, 2), 0, "cpu"))
    assert any("arange" in p or "copy" in p for p in recorded["problems"])


def test_coordinate_hidden_sets_stay_within_the_launch_limits():
    for has_gpu in (False, True):
        for seed in range(20):
            for rows, cols in judged_shapes(COORDINATES, "hidden", has_gpu, seed):
                assert 1 <= rows < 2**31 and 1 <= cols <= 65535 and rows * cols <= 2**24
                assert has_gpu or rows * cols <= 81  # the interpreter runs programs one by one


# --- grader.pipeline and course.plot -------------------------------------------------------------------


def test_a_kernel_without_performance_items_gets_no_benchmark_calls():
    from grader.flow.settings import Settings
    from grader.intake.layout import find_course_notebook
    from grader.run.recording import kernel_calls

    notebook = find_course_notebook("week1", "day3_the_machine")
    settings = Settings("gpu", "test GPU", bench_shapes=[[2048, 2048, 2048]])
    jobs = {job["spec"]: job for job in kernel_calls(notebook, settings, run_seed=1, student="s")}
    assert set(jobs) == {"w1d3.peak_fp32", "w1d3.program_coordinates"}
    for job in jobs.values():
        assert job["bench_shapes"] == [] and all(call["set"] != "bench" for call in job["calls"])


def test_program_grid_draws_one_panel_per_array():
    grid = np.arange(12).reshape(3, 4)
    figure = plot.program_grid({"a": grid, "b": grid.T.copy().reshape(3, 4)}, "two panels")
    assert isinstance(figure, Figure)
    images = [ax for ax in figure.axes if ax.images]
    assert len(images) == 2 and images[0].get_title() == "a"
    assert {t.get_text() for t in images[0].texts} == {str(i) for i in range(12)}
    with pytest.raises(ValueError):
        plot.program_grid({"flat": np.arange(5)}, "not 2-D")
    big = plot.program_grid({"big": np.zeros((20, 40))}, "no numbers", annotate_limit=16)
    assert not [ax for ax in big.axes if ax.images][0].texts
    assert math.isfinite(big.get_figheight())


def test_peak_bins_use_the_given_seed_only():
    rng_state = random.getstate()
    peak_inputs((0, 1), 11, "cpu")
    assert random.getstate() == rng_state  # a private generator: the global one is untouched


def test_the_guard_poisons_integer_buffers_too():
    from course.guard import Guard

    with Guard(poison=True):
        ints, floats, flags = torch.empty(5, dtype=torch.int32), torch.empty(3), torch.empty(2, dtype=torch.bool)
    assert ints.tolist() == [-1] * 5 and bool(floats.isnan().all()) and flags.shape == (2,)
