"""Week 1 Day 5 (memory): the copy and strided-read specs, the address picture, and how the pipeline times them."""

from __future__ import annotations

import math
import random

import pytest
import torch

from course import plot, spec
from course.exercises import w1d5_memory as day5
from grader.flow.settings import Settings
from grader.intake.layout import course_notebooks
from grader.run import recording

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day5_memory")
MATMUL_NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week1/day7_fast_matmul")


def test_both_specs_belong_to_the_notebook():
    assert {s.id for s in spec.for_notebook("week1/day5_memory")} == {"w1d5.copy", "w1d5.every_kth"}
    assert day5.COPY.rate_unit == "GB/s" and day5.COPY.library_name == "torch copy"
    assert day5.COPY.precision == day5.EVERY_KTH.precision == "exact"


def test_references_on_hand_checked_cases():
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float32)
    assert torch.equal(day5.copy_reference((x,)), x)
    assert day5.copy_reference((x,)).data_ptr() != x.data_ptr()  # a new tensor, not the input
    ten = torch.arange(10, dtype=torch.float32)
    assert day5.every_kth_reference((ten, 3)).tolist() == [0.0, 3.0, 6.0, 9.0]
    assert day5.every_kth_reference((ten, 1)).tolist() == ten.tolist()
    assert day5.every_kth_reference((ten, 20)).tolist() == [0.0]


def test_output_shapes_and_bytes():
    assert day5.COPY.output_shape((1001,)) == (1001,)
    assert day5.COPY.work((1000,)) == 8000.0  # 4 bytes read and 4 written per element
    assert day5.COPY.flops((1000,)) == 0.0
    assert day5.EVERY_KTH.output_shape((10, 3)) == (4,)
    assert day5.EVERY_KTH.output_shape((9, 3)) == (3,)
    assert day5.EVERY_KTH.output_shape((5, 9)) == (1,)


def test_inputs_are_fresh_seeded_and_never_zero():
    (a,) = day5.copy_inputs((500,), 1, "cpu")
    (b,) = day5.copy_inputs((500,), 1, "cpu")
    (c,) = day5.copy_inputs((500,), 2, "cpu")
    assert a.dtype == torch.float32 and a.shape == (500,)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert bool((a != 0).all())


def test_the_stride_comes_from_the_shape_never_the_seed():
    x1, k1 = day5.every_kth_inputs((300, 7), 1, "cpu")
    x2, k2 = day5.every_kth_inputs((300, 7), 99, "cpu")
    assert k1 == k2 == 7 and type(k1) is int
    assert not torch.equal(x1, x2)


def test_the_mismatch_check_catches_any_wrong_or_unwritten_element():
    (x,) = day5.copy_inputs((1000,), 3, "cpu")
    assert day5.copy_mismatch((x,), x.clone()) == 0.0
    one_off = x.clone()
    one_off[777] = torch.nextafter(one_off[777], torch.tensor(math.inf))
    assert day5.copy_mismatch((x,), one_off) == math.inf
    unwritten = x.clone()
    unwritten[-1] = math.nan
    assert day5.copy_mismatch((x,), unwritten) == math.inf
    assert day5.copy_mismatch((x,), x[:999].clone()) == math.inf


def test_exact_means_exact():
    from course.check import compare

    (x,) = day5.copy_inputs((64,), 5, "cpu")
    assert compare(day5.COPY, (64,), x.clone(), x, "cpu").passed
    nudged = x.clone()
    nudged[0] = torch.nextafter(nudged[0], torch.tensor(math.inf))
    assert not compare(day5.COPY, (64,), nudged, x, "cpu").passed


def test_the_baselines_were_taken_before_student_code(monkeypatch):
    def slow_clone(self, *args, **kwargs):
        raise AssertionError("a rebound Tensor.clone was called")

    monkeypatch.setattr(torch.Tensor, "clone", slow_clone)
    monkeypatch.setattr(torch.Tensor, "contiguous", slow_clone)
    monkeypatch.setattr(torch, "equal", lambda *a: True)
    (x,) = day5.copy_inputs((100,), 0, "cpu")
    assert day5.torch_copy((x,)).data_ptr() != x.data_ptr()
    assert day5.torch_every_kth((x, 3)).shape == (34,)
    assert day5.copy_mismatch((x,), x * 2) == math.inf


@pytest.mark.parametrize("has_gpu", [False, True])
def test_drawn_hidden_shapes_are_seeded_bounded_and_ragged(has_gpu):
    for seed in range(200):
        copies = day5.draw_copy_hidden(random.Random(seed), has_gpu)
        assert copies == day5.draw_copy_hidden(random.Random(seed), has_gpu)
        limit = 2**22 if has_gpu else 20_000
        assert all(1 <= n <= limit + 1 for (n,) in copies)
        assert copies[1][0] % 2 == 1 or copies[1][0] == 1  # one off a multiple of a power-of-two block
        [(n, k)] = day5.draw_every_kth_hidden(random.Random(seed), has_gpu)
        assert n >= 1 and 1 <= k <= 64
        assert k == 1 or n % k != 0


def test_shape_sets_cover_the_edges():
    for shape_set in (day5.COPY.visible_shapes, day5.COPY.hidden_shapes):
        for shapes in (shape_set.gpu, shape_set.cpu):
            assert any(n % 2 for (n,) in shapes) and any(n < 8 for (n,) in shapes)
    for shapes in (day5.EVERY_KTH.visible_shapes.cpu + day5.EVERY_KTH.hidden_shapes.cpu,
                   day5.EVERY_KTH.visible_shapes.gpu + day5.EVERY_KTH.hidden_shapes.gpu):
        assert any(k == 1 for _, k in shapes) and any(n < k for n, k in shapes)
        assert any(n % k for n, k in shapes)


def test_benchmark_lengths_are_far_past_an_h100_l2():
    l2 = 50 * 2**20
    assert all(4 * n >= 10 * l2 for (n,) in day5.COPY.bench_shapes.gpu)
    assert any(n % 2 for (n,) in day5.COPY.bench_shapes.gpu)
    assert day5.EVERY_KTH.bench_shapes.gpu == () and day5.EVERY_KTH.thresholds == ()


def test_thresholds_name_their_precision_and_full_marks():
    vs_torch, vs_reference = day5.COPY.threshold("vs_torch"), day5.COPY.threshold("vs_reference")
    assert vs_torch.kind == "vs_library" and vs_reference.kind == "vs_reference"
    assert vs_torch.full_level == 0.75 and vs_reference.full_level == 0.80
    assert vs_torch.credit(0.2) == 0.0 and vs_torch.credit(0.7) == 0.75 and vs_torch.credit(0.95) == 1.0
    assert all("exact" in t.precision for t in day5.COPY.thresholds)
    assert day5.COPY.grade_id(vs_torch) == "perf_w1d5_copy_vs_torch"


def test_only_a_spec_with_performance_items_is_timed():
    jobs = {job["spec"]: job for job in recording.kernel_calls(NOTEBOOK, Settings("gpu", "GPU"), 1, "alice")}
    assert jobs["w1d5.copy"]["bench_shapes"] == [list(s) for s in day5.COPY.bench_shapes.gpu]
    assert jobs["w1d5.every_kth"]["bench_shapes"] == []
    assert not any(c["set"] == "bench" for c in jobs["w1d5.every_kth"]["calls"])


def test_a_bench_override_applies_only_where_its_shapes_fit():
    matmul_sized = Settings("gpu", "GPU", bench_shapes=[[2048, 2048, 2048]])
    jobs = {job["spec"]: job for job in recording.kernel_calls(NOTEBOOK, matmul_sized, 1, "alice")}
    assert jobs["w1d5.copy"]["bench_shapes"] == [list(s) for s in day5.COPY.bench_shapes.gpu]
    [matmul] = recording.kernel_calls(MATMUL_NOTEBOOK, matmul_sized, 1, "alice")
    assert matmul["bench_shapes"] == [[2048, 2048, 2048]]
    copy_sized = Settings("gpu", "GPU", bench_shapes=[[2**26]])
    jobs = {job["spec"]: job for job in recording.kernel_calls(NOTEBOOK, copy_sized, 1, "alice")}
    assert jobs["w1d5.copy"]["bench_shapes"] == [[2**26]]
    assert jobs["w1d5.every_kth"]["bench_shapes"] == []


def test_the_answers_exported_are_what_the_master_tests_read():
    assert recording.notebook_plan(NOTEBOOK).answers == [
        "fma_repeats_at_ridge", "h100_fp16_ridge", "saxpy_intensity", "warp_sectors_stride16"]


def test_address_map_draws_and_counts_sectors():
    blocked = list(range(16)) + [-1] * 16  # 2 programs x 8 lanes, consecutive
    strided = [-1] * 32
    for label in range(16):
        strided[label * 2] = label  # every 2nd address
    figure = plot.address_map({"blocked": blocked, "strided": strided}, block=8, sector=8)
    titles = [axes.get_title(loc="left") for axes in figure.axes]
    assert titles[0].startswith("blocked: 16 elements used, 2 sectors moved")
    assert titles[1].startswith("strided: 16 elements used, 4 sectors moved")
    assert plot.to_png(figure).startswith(b"\x89PNG")


def test_address_map_refuses_nonsense():
    with pytest.raises(ValueError):
        plot.address_map({}, block=8)
    with pytest.raises(ValueError):
        plot.address_map({"x": [0]}, block=0)


@pytest.mark.gpu
def test_the_baseline_and_mismatch_check_on_a_gpu():
    (x,) = day5.copy_inputs((2**20 + 1,), 7, "cuda")
    out = day5.torch_copy((x,))
    assert out.is_cuda and day5.copy_mismatch((x,), out) == 0.0
    out[-1] = math.nan
    assert day5.copy_mismatch((x,), out) == math.inf
