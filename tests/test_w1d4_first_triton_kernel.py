"""Week 1 Day 4: the vector add and SAXPY specs, the solution's kernels, and course.check's replay rule."""

from __future__ import annotations

import json
import random

import nbformat
import pytest
import torch

from course import check, device, spec
from course.exercises import w1d4_first_kernel as day4
from course.recorder import plan
from grader.intake.layout import SOLUTIONS
from grader.kernel_build import build_kernels
from tests.helpers import module_from_source

ADD = spec.get("w1d4.vector_add")
SAXPY = spec.get("w1d4.saxpy")
NOTEBOOK = SOLUTIONS / "week1" / "day4_first_triton_kernel.ipynb"
HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"


def _solution_source() -> str:
    """The solution notebook's two kernel cells, as one module's source."""
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    return HEADER + cells["add_kernel"] + "\n\n\n" + cells["saxpy_kernel"] + "\n"


def _module(tmp_path, source: str, name: str):
    return module_from_source(tmp_path, source, name)


@pytest.fixture
def solution(tmp_path):
    return _module(tmp_path, _solution_source(), "day4_solution")


def test_the_references_are_right_on_a_hand_checked_case():
    x, y = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([3.0, 4.0, 0.25])
    assert day4.add_reference((x, y)).tolist() == [4.0, 2.0, 0.75]
    assert day4.saxpy_reference((-0.5, x, y)).tolist() == [2.5, 5.0, 0.0]
    assert day4.add_reference((x, y)).dtype == torch.float64


def test_inputs_are_fresh_random_strided_views_that_start_their_storage():
    x, y = ADD.make_inputs((300, 2, 3), 5, "cpu")
    again, _ = ADD.make_inputs((300, 2, 3), 5, "cpu")
    other, _ = ADD.make_inputs((300, 2, 3), 6, "cpu")
    assert torch.equal(x, again) and not torch.equal(x, other)
    assert x.shape == y.shape == (300,) and x.stride() == (2,) and y.stride() == (3,)
    # The plan records pointers as storage + offset: views at offset 0 replay on the judge's own views.
    assert x.storage_offset() == y.storage_offset() == 0
    assert x.untyped_storage().nbytes() == 4 * 600 and y.untyped_storage().nbytes() == 4 * 900
    assert bool((x != 0).all()) and not torch.equal(x, y)


def test_alpha_comes_from_the_shape_alone_and_is_never_0_or_1():
    alphas = {day4.alpha_for((n, 1, 1)) for n in range(1, 200)}
    assert not alphas & {0.0, 1.0, -1.0} and len(alphas) == 23
    first, _, _ = SAXPY.make_inputs((97, 2, 1), 1, "cpu")
    second, _, _ = SAXPY.make_inputs((97, 2, 1), 2, "cpu")
    assert type(first) is float and first == second
    visible_alphas = {day4.alpha_for(shape) for shape in SAXPY.visible_shapes.cpu}
    assert len(visible_alphas) > 1  # one baked-in value cannot pass the visible check


@pytest.mark.parametrize("has_gpu", [False, True])
def test_the_shape_sets_hold_what_the_topic_asks_for(has_gpu):
    for shapes in (ADD.visible_shapes.for_device(has_gpu), ADD.hidden_shapes.for_device(has_gpu)):
        assert any(n % 128 for n, _, _ in shapes), "a length that is no multiple of a block"
        assert any(x_step > 1 or y_step > 1 for _, x_step, y_step in shapes), "a strided input"
    assert (1, 1, 1) in ADD.visible_shapes.for_device(has_gpu)
    assert any(y_step > 1 for _, _, y_step in ADD.hidden_shapes.for_device(has_gpu))


def test_benchmark_vectors_are_far_past_an_h100_l2_and_rates_count_12_bytes_per_element():
    l2_bytes = 50 * 10**6  # H100 datasheet
    assert all(4 * n >= 4 * l2_bytes and x_step == y_step == 1 for n, x_step, y_step in ADD.bench_shapes.gpu)
    assert any(n % 2 for n, _, _ in ADD.bench_shapes.gpu)
    assert ADD.rate_unit == SAXPY.rate_unit == "GB/s" and ADD.work((1000, 3, 1)) == 12_000
    assert ADD.bench_shapes.cpu == ()


def test_drawn_hidden_shapes_depend_on_the_run_and_stay_in_bounds():
    drawn = {day4.draw_hidden(random.Random(seed), False)[0] for seed in range(40)}
    assert len(drawn) > 10
    assert all(1 <= n <= 12_289 and 1 <= xs <= 3 and 1 <= ys <= 3 for n, xs, ys in drawn)
    again = spec.judged_shapes(ADD, "hidden", False, 7) == spec.judged_shapes(ADD, "hidden", False, 7)
    assert again and spec.judged_shapes(ADD, "hidden", False, 7)[:-1] == ADD.hidden_shapes.cpu


def test_the_solution_passes_every_cpu_shape(solution):
    for fn, which_spec in ((solution.vector_add, ADD), (solution.saxpy, SAXPY)):
        for which in ("visible", "hidden"):
            results = check.check(which_spec, fn, which)
            assert all(r.passed for r in results), [r.message for r in results if not r.passed]


IGNORES_STRIDES = '''
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def plain_add(x, y):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    add_kernel[(triton.cdiv(x.shape[0], 64),)](x, y, out, x.shape[0], BLOCK_SIZE=64)
    return out


def add_after_contiguous(x, y):
    return plain_add(x.contiguous(), y.contiguous())


def add_with_torch(x, y):
    plain_add(x, y)
    return x + y


def stub(x, y):
    raise NotImplementedError()
'''


def test_a_kernel_that_ignores_strides_fails_the_strided_shapes(tmp_path):
    cell = _module(tmp_path, HEADER + IGNORES_STRIDES, "day4_ignores_strides")
    passed = {r.shape: r.passed for r in check.check(ADD, cell.plain_add, [(97, 1, 1), (300, 2, 1), (77, 1, 3)])}
    assert passed == {(97, 1, 1): True, (300, 2, 1): False, (77, 1, 3): False}


IGNORES_Y_STRIDE = '''
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def add_x_strided(x, y):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    add_kernel[(triton.cdiv(x.shape[0], 64),)](x, y, out, x.shape[0], x.stride(0), BLOCK_SIZE=64)
    return out


@triton.jit
def saxpy_kernel(alpha, x_ptr, y_ptr, out_ptr, n, stride_x, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets * stride_x, mask=mask)
    tl.store(out_ptr + offsets, alpha * x + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def saxpy_x_strided(alpha, x, y):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    saxpy_kernel[(triton.cdiv(x.shape[0], 64),)](alpha, x, y, out, x.shape[0], x.stride(0), BLOCK_SIZE=64)
    return out
'''


@pytest.mark.parametrize("has_gpu", [False, True])
def test_a_visible_shape_strides_x_and_y_by_different_steps(has_gpu):
    for exercise in (ADD, SAXPY):
        assert any(1 < x_step != y_step > 1 for _, x_step, y_step in exercise.visible_shapes.for_device(has_gpu))


def test_a_kernel_that_ignores_the_stride_of_y_fails_a_visible_shape(tmp_path):
    cell = _module(tmp_path, HEADER + IGNORES_Y_STRIDE, "day4_ignores_y_stride")
    for exercise, fn in ((ADD, cell.add_x_strided), (SAXPY, cell.saxpy_x_strided)):
        results = check.check(exercise, fn, "visible")
        failed = [r.shape for r in results if not r.passed]
        assert failed == [(300, 2, 3)], [(r.shape, r.message) for r in results]
        with pytest.raises(AssertionError):
            check.assert_correct(exercise, fn, "visible")


def test_check_fails_right_values_the_judge_could_not_replay(tmp_path):
    cell = _module(tmp_path, HEADER + IGNORES_STRIDES, "day4_replay_rule")
    contiguous, strided = check.check(ADD, cell.add_after_contiguous, [(97, 1, 1), (300, 2, 1)])
    # contiguous() of a contiguous tensor is the tensor itself (no op); of a strided view, a copy.
    assert contiguous.passed, contiguous.message
    assert not strided.passed and "cannot replay" in strided.message and "aten.clone" in strided.message
    [with_torch] = check.check(ADD, cell.add_with_torch, [(97, 1, 1)])
    assert not with_torch.passed and "aten.add" in with_torch.message
    [stub] = check.check(ADD, cell.stub, [(5, 1, 1)])
    assert not stub.passed and "not implemented" in stub.message  # exceptions are explained as before


def test_the_recorded_plan_of_a_strided_saxpy_keeps_alpha_and_the_strides(solution):
    inputs = SAXPY.make_inputs((300, 2, 3), 0, device.info().torch_device)
    out, recorded = plan.record_call(solution.saxpy, inputs)
    assert recorded["problems"] == [] and len(recorded["launches"]) == 1
    assert recorded["inputs"][0] == {"scalar": {"float": repr(day4.alpha_for((300, 2, 3)))}}
    pointers = [a["pointer"] for a in recorded["launches"][0]["arguments"] if "pointer" in a]
    assert pointers == [{"buffer": "in1", "offset": 0}, {"buffer": "in2", "offset": 0},
                        {"buffer": "alloc0", "offset": 0}]
    assert torch.allclose(out.double(), SAXPY.reference(inputs), rtol=1e-6, atol=1e-6)


def _launch(kernel: str, signature: dict[str, str], constexprs: list, attrs: list) -> dict:
    return {"kernel": kernel, "signature": signature, "constexprs": constexprs, "attrs": attrs,
            "options": {"num_warps": 4, "num_stages": 3}, "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}


def test_the_solution_kernels_compile_for_sm90_contiguous_and_strided(tmp_path):
    add_strided = _launch("add_kernel", {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                         "stride_x": "i32", "stride_y": "constexpr", "BLOCK_SIZE": "constexpr"},
                          [[[5], {"int": 1}], [[6], {"int": 1024}]], [])
    saxpy_contiguous = _launch("saxpy_kernel", {"alpha": "fp32", "x_ptr": "*fp32", "y_ptr": "*fp32",
                                                "out_ptr": "*fp32", "n": "i32", "stride_x": "constexpr",
                                                "stride_y": "constexpr", "BLOCK_SIZE": "constexpr"},
                               [[[5], {"int": 1}], [[6], {"int": 1}], [[7], {"int": 1024}]],
                               [[[1], [["tt.divisibility", 16]]], [[2], [["tt.divisibility", 16]]],
                                [[3], [["tt.divisibility", 16]]], [[4], [["tt.divisibility", 16]]]])
    calls = {"a": {"plan": {"launches": [add_strided]}}, "s": {"plan": {"launches": [saxpy_contiguous]}}}
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"day4": {"calls": calls}}}))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(_solution_source())]
    nbformat.write(notebook, str(tmp_path / "notebook.ipynb"))
    index = build_kernels.build({"notebook": str(tmp_path / "notebook.ipynb"), "export": str(exported),
                                 "target": add_strided["target"], "out": str(tmp_path / "built")})
    assert len(index) == 2 and all("error" not in entry for entry in index.values()), index


@pytest.mark.gpu
def test_the_solution_replays_on_fresh_strided_inputs_in_another_build(tmp_path, solution):
    from grader.replay import gpu_replay as replay

    shape = (4099, 2, 3)
    exported, recorded = tmp_path / "export.json", {}
    for name, which_spec, fn in (("add", ADD, solution.vector_add), ("saxpy", SAXPY, solution.saxpy)):
        _, recorded[name] = plan.record_call(fn, which_spec.make_inputs(shape, 0, "cuda"))
        assert recorded[name]["problems"] == []
    exported.write_text(json.dumps({"kernels": {k: {"calls": {"c": {"plan": v}}} for k, v in recorded.items()}}))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(_solution_source())]
    nbformat.write(notebook, str(tmp_path / "notebook.ipynb"))
    build_kernels.build({"notebook": str(tmp_path / "notebook.ipynb"), "export": str(exported),
                         "target": recorded["add"]["launches"][0]["target"], "out": str(tmp_path / "built")})
    kernels = replay.load_kernels(tmp_path / "built")
    for name, which_spec in (("add", ADD), ("saxpy", SAXPY)):
        fresh = which_spec.make_inputs(shape, 99, "cuda")
        prepared = replay.prepare(recorded[name], fresh, kernels, torch.float32, (shape[0],), 2**28)
        out = replay.launch(prepared)
        torch.cuda.synchronize()
        assert check.relative_error(out, which_spec.reference(fresh)) <= which_spec.tolerance
