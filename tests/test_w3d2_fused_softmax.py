"""Week 3 Day 2: the softmax spec (inputs with a logit scale, the fp64 reference, the spot check, shapes), and the
solution notebook's fused softmax on every check shape in the interpreter, against a softmax without the max
subtraction, which the hidden logits break."""

from __future__ import annotations

import math
import random

import pytest
import torch

from course import check
from course.exercises import w3d2_fused_softmax as day2
from course.spec import get
from tests.week3_solutions import cells_module

SPEC = get("w3d2.softmax")


def test_reference_and_inputs():
    (x,) = SPEC.make_inputs((4, 7, 1000), 3, "cpu")
    (unit,) = SPEC.make_inputs((4, 7, 1), 3, "cpu")
    assert torch.allclose(x, unit * 1000) and x.dtype == torch.float32
    ref = SPEC.reference((x,))
    assert ref.dtype == torch.float64 and torch.allclose(ref.sum(dim=1), torch.ones(4, dtype=torch.float64))
    assert SPEC.output_shape((4, 7, 1000)) == (4, 7) and SPEC.bytes_moved((4, 7, 1)) == 224


def test_the_hidden_scale_overflows_a_softmax_without_the_max():
    for shape in SPEC.hidden_shapes.cpu:
        (x,) = SPEC.make_inputs(shape, 0, "cpu")
        if shape[2] >= 300 and shape[1] > 1:
            naive = torch.exp(x) / torch.exp(x).sum(dim=1, keepdim=True)
            assert not torch.isfinite(naive).all(), shape
    for shape in SPEC.visible_shapes.cpu:  # the visible logits do not
        (x,) = SPEC.make_inputs(shape, 0, "cpu")
        assert torch.isfinite(torch.exp(x)).all()


def test_spot_error():
    (x,) = SPEC.make_inputs((6, 50, 10), 1, "cpu")
    assert day2.spot_error((x,), torch.softmax(x, dim=1)) == 0.0
    assert day2.spot_error((x,), torch.softmax(x, dim=1) * 1.01) > 1e-3
    assert day2.spot_error((x,), torch.softmax(x, dim=1)[:, :49]) == math.inf


def test_shapes():
    for m, n, _ in SPEC.bench_shapes.gpu:
        assert 4 * m * n >= 4 * 50 * 2**20
    assert any(n > 32768 and n % 2 for _, n, _ in SPEC.bench_shapes.gpu)  # the online path, an odd row
    assert any(n > 32768 for _, n, _ in SPEC.hidden_shapes.gpu) and any(n > 1024 for _, n, _ in SPEC.hidden_shapes.cpu)
    for seed in range(20):
        for has_gpu in (False, True):
            short, long = day2.draw_hidden(random.Random(seed), has_gpu)
            assert short[2] >= 100 and long[1] % 2 and long[1] >= (60_000 if has_gpu else 2_000)


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    return cells_module(tmp_path_factory.mktemp("w3d2"), "day2_fused_softmax", ("softmax_kernels",))


def test_the_solution_is_right_on_every_check_shape(solution):
    results = check.check(SPEC, solution.softmax, "visible") + check.check(SPEC, solution.softmax, "hidden")
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    for shape in day2.draw_hidden(random.Random(11), False):
        assert check.check_one(SPEC, solution.softmax, shape, seed=2).passed, shape


def test_both_kernels_are_checked(solution):
    """The interpreter's row limit is 1024: the visible shapes use the one-program kernel, a hidden one the online."""
    assert max(n for _, n, _ in SPEC.visible_shapes.cpu) <= 1024 < max(n for _, n, _ in SPEC.hidden_shapes.cpu)


@pytest.mark.gpu
def test_the_solution_is_right_on_the_benchmark_shapes_on_the_gpu(solution):
    for shape in SPEC.bench_shapes.gpu:
        inputs = SPEC.make_inputs(shape, 1, "cuda")
        assert check.relative_error(solution.softmax(*inputs), SPEC.reference(inputs)) <= SPEC.tolerance
