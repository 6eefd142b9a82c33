"""Week 3 Day 3: the RMSNorm specs (inputs, fp64 forward and backward references checked against autograd, the
tolerances per output precision, shapes), and the solution notebook's forward, dx and dw on every check shape in
the interpreter."""

from __future__ import annotations

import random

import pytest
import torch

from course import check
from course.exercises import w3d3_norms as day3
from course.spec import get
from tests.week3_solutions import cells_module

FORWARD, DX, DW = get("w3d3.rmsnorm"), get("w3d3.rmsnorm_dx"), get("w3d3.rmsnorm_dw")


def test_the_references_are_autograd_of_the_forward():
    x, w, dy, rstd = DX.make_inputs((5, 12), 2, "cpu")
    assert (x.dtype, w.dtype, dy.dtype, rstd.dtype) == (torch.float16, torch.float16, torch.float16, torch.float32)
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y = x64 * torch.rsqrt(x64.pow(2).mean(dim=1, keepdim=True) + day3.EPS) * w64
    y.backward(dy.double())
    assert torch.allclose(FORWARD.reference((x, w)), y.detach())
    assert torch.allclose(DX.reference((x, w, dy, rstd)), x64.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(DW.reference((x, w, dy, rstd)), w64.grad, rtol=1e-5, atol=1e-6)
    forward_x, forward_w = FORWARD.make_inputs((5, 12), 2, "cpu")
    assert torch.equal(forward_x, x) and torch.equal(forward_w, w)  # the backward's x is the forward's


def test_tolerances_and_outputs_per_precision():
    assert (FORWARD.precision, DX.precision, DW.precision) == ("fp16", "fp16", "fp32-sum")
    assert FORWARD.output_dtype == DX.output_dtype == torch.float16 and DW.output_dtype == torch.float32
    assert DW.output_shape((7, 9)) == (9,) and DX.output_shape((7, 9)) == (7, 9)
    # The same rows rounded to fp16 are far inside the fp16 tolerance; a backward without the mean term is not.
    x, w, dy, rstd = DX.make_inputs((64, 256), 1, "cpu")
    ref = DX.reference((x, w, dy, rstd))
    assert check.relative_error(ref.to(torch.float16), ref) < DX.tolerance / 10
    no_mean = (rstd[:, None] * w * dy).double()
    assert check.relative_error(no_mean, ref) > DX.tolerance


def test_shapes():
    for spec in (FORWARD, DX, DW):
        assert spec.bench_shapes is FORWARD.bench_shapes and spec.notebook == "week3/day3_norms"
    for m, n in FORWARD.bench_shapes.gpu:
        assert 2 * m * n >= 2 * 50 * 2**20 and n <= 16384
    assert any(n % 2 for _, n in FORWARD.hidden_shapes.cpu) and max(n for _, n in FORWARD.hidden_shapes.gpu) == 16384
    for seed in range(20):
        for has_gpu in (False, True):
            for m, n in day3.draw_hidden(random.Random(seed), has_gpu):
                assert m >= 1 and 3 <= n <= 16384


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    return cells_module(tmp_path_factory.mktemp("w3d3"), "day3_norms", ("forward_kernels", "backward_kernels"))


def test_the_solution_is_right_on_every_check_shape(solution):
    for spec, fn in ((FORWARD, solution.rmsnorm), (DX, solution.rmsnorm_dx), (DW, solution.rmsnorm_dw)):
        results = check.check(spec, fn, "visible") + check.check(spec, fn, "hidden")
        assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    for shape in day3.draw_hidden(random.Random(5), False):
        assert check.check_one(DW, solution.rmsnorm_dw, shape, seed=4).passed, shape


def test_the_forward_saves_what_the_backward_reads(solution):
    x, w, _, rstd = DX.make_inputs((9, 100), 6, "cpu")
    y, saved = solution.rmsnorm_forward(x, w)
    assert torch.allclose(saved, rstd, rtol=1e-5)


@pytest.mark.gpu
def test_the_solution_is_right_on_a_benchmark_shape_on_the_gpu(solution):
    for spec, fn in ((FORWARD, solution.rmsnorm), (DX, solution.rmsnorm_dx), (DW, solution.rmsnorm_dw)):
        inputs = spec.make_inputs(spec.bench_shapes.gpu[-1], 1, "cuda")
        assert check.relative_error(fn(*inputs), spec.reference(inputs)) <= spec.tolerance
