"""Week 2 Day 2: the transpose spec (reference, inputs, the exact spot check, the copy baseline, shapes), the
sector counting and access picture of course.days.coalescing, and the solution notebook's transpose itself."""

from __future__ import annotations

import importlib.util
import math
import random

import matplotlib
import nbformat
import pytest
import torch

import course
from course import check
from course.days import coalescing
from course.exercises import transpose
from course.exercises import w2d2_coalescing as day2
from course.spec import get
from grader.intake.layout import SOLUTIONS

SPEC = get("w2d2.transpose")


def test_reference_on_a_hand_checked_case():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = SPEC.reference((x,))
    assert out.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]] and out.is_contiguous()
    assert SPEC.output_shape((2, 3)) == (3, 2)
    assert SPEC.bytes_moved((2, 3)) == 48 and SPEC.work((2, 3)) == 48 and SPEC.rate_unit == "GB/s"


def test_inputs_are_fresh_fp32_and_seeded():
    (a,), (b,), (again,) = (SPEC.make_inputs((40, 30), seed, "cpu") for seed in (1, 2, 1))
    assert a.dtype == torch.float32 and a.shape == (40, 30)
    assert not torch.equal(a, b) and torch.equal(a, again)
    assert (a != 0).all()


def test_exact_error_is_the_spot_check():
    (x,) = SPEC.make_inputs((5, 7), 3, "cpu")
    assert transpose.exact_error((x,), x.t().contiguous()) == 0.0
    assert transpose.exact_error((x,), x.t()) == 0.0  # a view with the right values is still right
    assert transpose.exact_error((x,), x.reshape(7, 5)) == math.inf  # the bytes of x, not its transpose
    poisoned = x.t().contiguous()
    poisoned[6, 4] = math.nan
    assert transpose.exact_error((x,), poisoned) == math.inf
    assert transpose.exact_error((x,), x) == math.inf
    square = SPEC.make_inputs((4, 4), 3, "cpu")[0]
    assert transpose.exact_error((square,), square) == math.inf


def test_baseline_is_a_copy_held_from_import(monkeypatch):
    (x,) = SPEC.make_inputs((6, 9), 0, "cpu")

    def refuse(self: torch.Tensor) -> torch.Tensor:
        raise AssertionError("rebound clone called")

    monkeypatch.setattr(torch.Tensor, "clone", refuse)
    copy = SPEC.library((x,))
    assert torch.equal(copy, x) and copy.data_ptr() != x.data_ptr()
    assert SPEC.library_name == "torch copy"


def test_shapes():
    for shape in SPEC.bench_shapes.gpu:
        assert 4 * shape[0] * shape[1] >= 4 * 50 * 2**20, shape  # four times an H100's L2, at least
    odd = [s for s in SPEC.bench_shapes.gpu if s[0] % 2 and s[1] % 2]
    assert odd
    for shapes in (SPEC.visible_shapes.cpu, SPEC.hidden_shapes.cpu):
        assert any(s[0] != s[1] for s in shapes) and any(1 in s or min(s) < 4 for s in shapes)
    for seed in range(30):
        for has_gpu, limit in ((False, 150), (True, 5003)):
            for m, n in day2.draw_hidden(random.Random(seed), has_gpu):
                assert 1 <= m <= limit and 1 <= n <= limit and (m == 2 or m % 2) and (n == 2 or n % 2)
    assert {t.name for t in SPEC.thresholds} == {"vs_copy", "vs_reference"}


def test_sector_counts():
    assert coalescing.warp_access(1) == (4, 1.0)
    assert coalescing.warp_access(2) == (8, 0.5)
    assert coalescing.warp_access(8) == (32, 0.125)
    assert coalescing.warp_access(8192) == (32, 0.125)
    assert coalescing.sectors_touched([30]) == 2  # a 4-byte element across a sector boundary
    assert coalescing.sectors_touched([0, 4, 8, 28]) == 1


def test_access_picture():
    matplotlib.use("Agg")
    figure = coalescing.transpose_access_figure(m=6, n=8, tile=4, column=2)
    labels = [ax.get_xlabel() for ax in figure.axes if ax.get_xlabel()]
    assert labels == ["the same elements in memory (row-major): 6 separate runs",
                      "the same elements in memory (row-major): 1 separate run",
                      "the same elements in memory (row-major): 4 separate runs",
                      "the same elements in memory (row-major): 4 separate runs"]


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    """The solution notebook's transpose cell, imported from a file (Triton reads a kernel's source)."""
    nb = nbformat.read(str(SOLUTIONS / "week2" / "day2_coalescing.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "transpose_kernel")
    path = tmp_path_factory.mktemp("day2") / "day2_solution.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\nimport course\n"
                    "DEVICE = course.device.info()\n\n" + cell.source, encoding="utf-8")
    loaded = importlib.util.spec_from_file_location("day2_solution", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module.transpose


def test_solution_is_exact_on_every_check_shape(solution):
    results = check.check(SPEC, solution, "visible") + check.check(SPEC, solution, "hidden")
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    for shape in day2.draw_hidden(random.Random(5), False):
        assert check.check_one(SPEC, solution, shape, seed=9).passed, shape


def test_solution_takes_any_strides(solution):
    (y,) = SPEC.make_inputs((37, 70), 4, course.device.info().torch_device)
    x = y.t()  # a (70, 37) view with strides (1, 70)
    assert torch.equal(solution(x), y)


@pytest.mark.gpu
def test_solution_is_exact_on_a_benchmark_shape_on_the_gpu(solution):
    shape = SPEC.bench_shapes.gpu[-1]
    inputs = SPEC.make_inputs(shape, 1, "cuda")
    assert transpose.exact_error(inputs, solution(*inputs)) == 0.0
