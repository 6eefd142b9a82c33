"""Week 3 Day 1: the reduction specs (inputs, references, the summation tolerance, spot checks, shapes), the
solution notebook's vector_sum and row_max on every check shape in the interpreter, and the lost update: passing in
the interpreter, with the `lost-update` warning that explains why a GPU fails it."""

from __future__ import annotations

import importlib.util
import math
import random

import pytest
import torch

import course
from course import check, divergence
from course.exercises import w3d1_reductions as day1
from course.spec import TOLERANCES, get
from tests.week3_solutions import cells_module

SUM = get("w3d1.vector_sum")
MAX = get("w3d1.row_max")


def test_references_on_hand_checked_cases():
    x = torch.tensor([1.0, 2.0, 3.5])
    assert SUM.reference((x,)).tolist() == [6.5] and SUM.output_shape((3,)) == (1,)
    m = torch.tensor([[1.0, -2.0, 0.5], [-3.0, -1.0, -7.0]])
    assert MAX.reference((m,)).tolist() == [1.0, -1.0] and MAX.output_shape((2, 3)) == (2,)
    assert SUM.bytes_moved((10,)) == 44 and MAX.bytes_moved((2, 3)) == 32 and SUM.rate_unit == MAX.rate_unit == "GB/s"


def test_inputs_are_seeded_and_the_sum_has_no_cancellation():
    (a,), (b,), (again,) = (SUM.make_inputs((1000,), seed, "cpu") for seed in (1, 2, 1))
    assert a.dtype == torch.float32 and not torch.equal(a, b) and torch.equal(a, again)
    assert (a >= 0).all() and (a < 1).all()  # so sum |x| is the sum: the relative error is the bounded one
    (x,) = MAX.make_inputs((1000, 3), 0, "cpu")
    assert (x.amax(dim=1) < 0).any()  # some short rows are all negative: a masked lane read as 0 shows


def test_the_summation_tolerance_admits_any_order_and_refuses_a_lost_block():
    (x,) = SUM.make_inputs((2**20,), 4, "cpu")
    exact = SUM.reference((x,))
    sequential_blocks = torch.zeros(1)
    for block in x.split(1024):  # 1024 partials added one after another, as atomics would
        sequential_blocks += block.sum()
    assert check.relative_error(sequential_blocks, exact) <= SUM.tolerance == TOLERANCES["fp32-sum"]
    lost_one = sequential_blocks - x[:1024].sum()  # one partial of 1024 lost
    assert check.relative_error(lost_one, exact) > 5 * SUM.tolerance


def test_spot_checks():
    (x,) = SUM.make_inputs((5000,), 1, "cpu")
    assert day1.sum_spot_error((x,), x.sum().reshape(1)) < 1e-6
    assert day1.sum_spot_error((x,), (x.sum() * 0.99).reshape(1)) > 1e-3
    assert day1.sum_spot_error((x,), x.sum()) == math.inf  # a 0-d tensor is not the (1,) output
    (m,) = MAX.make_inputs((20, 30), 1, "cpu")
    assert day1.max_spot_error((m,), m.amax(dim=1)) == 0.0
    assert day1.max_spot_error((m,), m.amax(dim=1) + 1e-6) == math.inf


def test_shapes():
    for shape in SUM.bench_shapes.gpu:
        assert 4 * shape[0] >= 4 * 50 * 2**20  # past an H100's L2, four times over
    for shape in MAX.bench_shapes.gpu:
        assert 4 * shape[0] * shape[1] >= 4 * 50 * 2**20
    assert any(n % 2 for (n,) in SUM.bench_shapes.gpu) and any(n % 2 for _, n in MAX.bench_shapes.gpu)
    # The visible sums fit a few blocks; every hidden GPU length needs many programs, where updates get lost.
    assert max(n for (n,) in SUM.visible_shapes.gpu) <= 4096 and min(n for (n,) in SUM.hidden_shapes.gpu[:3]) > 65_000
    assert any(n > 100_000 for _, n in MAX.hidden_shapes.gpu) and any(n <= 3 for _, n in MAX.hidden_shapes.cpu)
    for seed in range(20):
        for has_gpu in (False, True):
            for (n,) in day1.draw_sum_hidden(random.Random(seed), has_gpu):
                assert 1 <= n <= (2**24 if has_gpu else 60_000) + 1
            short, long = day1.draw_max_hidden(random.Random(seed), has_gpu)
            assert short[1] < 64 and long[1] % 2 == 1 and long[1] >= (100_000 if has_gpu else 2_500)


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    return cells_module(tmp_path_factory.mktemp("w3d1"), "day1_reductions", ("sum_kernels", "max_kernels"))


def test_the_solution_is_right_on_every_check_shape(solution):
    for spec, fn, draw in ((SUM, solution.vector_sum, day1.draw_sum_hidden),
                           (MAX, solution.row_max, day1.draw_max_hidden)):
        results = check.check(spec, fn, "visible") + check.check(spec, fn, "hidden")
        assert all(r.passed for r in results), [r.message for r in results if not r.passed]
        for shape in draw(random.Random(7), False):
            assert check.check_one(spec, fn, shape, seed=3).passed, shape


RACY = '''
@triton.jit
def racy_sum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    partial = tl.sum(tl.load(x_ptr + offsets, mask=offsets < N, other=0.0), axis=0)
    total = tl.load(out_ptr)
    tl.store(out_ptr, total + partial)


def racy_sum(x):
    out = torch.zeros((1,), device=x.device, dtype=torch.float32)
    racy_sum_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
'''


@pytest.mark.skipif(course.device.info().has_gpu, reason="the interpreter's view of the race")
def test_the_lost_update_passes_the_interpreter_and_is_warned_about(tmp_path):
    path = tmp_path / "racy.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n" + RACY, encoding="utf-8")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    racy_sum = namespace["racy_sum"]
    assert check.check_one(SUM, racy_sum, (50_001,), seed=2).passed  # programs in turn: nothing lost
    codes = {d.code for d in divergence.check_function(racy_sum, precision_matters=False)}
    assert "lost-update" in codes


@pytest.mark.gpu
def test_the_solution_is_right_on_a_benchmark_shape_on_the_gpu(solution):
    for spec, fn in ((SUM, solution.vector_sum), (MAX, solution.row_max)):
        inputs = spec.make_inputs(spec.bench_shapes.gpu[-1], 1, "cuda")
        assert check.relative_error(fn(*inputs), spec.reference(inputs)) <= spec.tolerance


ATOMIC = '''
@triton.jit
def atomic_sum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < N, other=0.0), axis=0))


def atomic_sum(x):
    out = torch.zeros((1,), device=x.device, dtype=torch.float32)
    atomic_sum_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out
'''


@pytest.mark.skipif(course.device.info().has_gpu, reason="records an interpreted call")
def test_the_recorded_plans_carry_what_the_judge_replays(tmp_path, solution):
    """An atomic sum's plan allocates its output as zeros, so the judge's replay (grader.replay, which allocates the
    plan's buffers afresh for every timed call) starts each call from 0; the two-pass sum's plan holds both launches
    and the partials buffer between them."""
    from course.recorder import plan

    path = tmp_path / "atomic.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n" + ATOMIC, encoding="utf-8")
    loaded = importlib.util.spec_from_file_location("atomic_cell", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    inputs = SUM.make_inputs((5000,), 0, "cpu")
    _, atomic = plan.record_call(module.atomic_sum, inputs)
    assert not atomic["problems"] and len(atomic["launches"]) == 1
    assert [a.get("init") for a in atomic["allocations"]] == ["zeros"]
    _, two_pass = plan.record_call(solution.vector_sum, inputs)
    assert not two_pass["problems"] and len(two_pass["launches"]) == 2 and len(two_pass["allocations"]) == 2
