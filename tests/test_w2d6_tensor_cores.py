"""Week 2 Day 6 (tensor cores): the fp16 and bf16 matmul specs, the formats module, the interpreter's bf16
tl.dot, bf16 outputs through the CPU judge, and the sm_90 instruction listing."""

from __future__ import annotations

import random

import nbformat
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from course import spec
from course.check import compare, relative_error
from course.days import formats
from course.device import DeviceInfo
from course.exercises import matmul
from course.exercises import w2d6_tensor_cores as day6
from course.recorder import plan_format
from grader.flow.settings import Settings
from grader.intake.layout import SOLUTIONS, course_notebooks
from grader.judge import on_cpu
from grader.kernel_build import build_kernels
from grader.replay import host_tensor, replay_cpu, replay_inputs
from grader.run import recording

NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week2/day6_tensor_cores")
SPECS = (day6.FP16, day6.BF16)


def test_both_specs_belong_to_the_notebook():
    assert {s.id for s in spec.for_notebook("week2/day6_tensor_cores")} == {"w2d6.matmul_fp16", "w2d6.matmul_bf16"}
    assert (day6.FP16.output_dtype, day6.BF16.output_dtype) == (torch.float16, torch.bfloat16)
    assert (day6.FP16.precision, day6.BF16.precision) == ("fp16", "bf16")
    assert day6.FP16.tolerance == day6.BF16.tolerance == 1e-2
    assert (day6.FP16.library_name, day6.BF16.library_name) == ("cuBLAS fp16", "cuBLAS bf16")


def test_reference_on_a_hand_checked_case():
    a = torch.tensor([[1.0, 2.0], [3.0, 0.5]], dtype=torch.float16)
    b = torch.tensor([[4.0, -1.0, 0.25], [1.0, 2.0, 8.0]], dtype=torch.float16)
    expected = torch.tensor([[6.0, 3.0, 16.25], [12.5, -2.0, 4.75]], dtype=torch.float64)
    assert torch.equal(matmul.reference((a, b)), expected)


@pytest.mark.parametrize("exercise", SPECS, ids=lambda s: s.id)
def test_inputs_are_fresh_seeded_in_the_exercise_dtype_and_never_zero(exercise):
    a, b = exercise.make_inputs((30, 20, 40), 1, "cpu")
    again, _ = exercise.make_inputs((30, 20, 40), 1, "cpu")
    other, _ = exercise.make_inputs((30, 20, 40), 2, "cpu")
    assert a.dtype == b.dtype == exercise.output_dtype
    assert a.shape == (30, 40) and b.shape == (40, 20)
    assert torch.equal(a, again) and not torch.equal(a, other)
    assert bool((a != 0).any()) and bool((b != 0).any()) and a.float().std() > 0.5


@pytest.mark.parametrize("exercise", SPECS, ids=lambda s: s.id)
def test_a_rounded_exact_product_passes_and_fp8_inputs_fail(exercise):
    shape = (48, 40, 300)
    inputs = exercise.make_inputs(shape, 3, "cpu")
    exact = exercise.reference(inputs)
    assert compare(exercise, shape, exact.to(exercise.output_dtype), exact, "cpu").passed
    a8, b8 = (x.to(torch.float8_e4m3fn).double() for x in inputs)  # what the fp8 fixture multiplies
    result = compare(exercise, shape, (a8 @ b8).to(exercise.output_dtype), exact, "cpu")
    assert not result.passed and result.rel_error > 2 * exercise.tolerance
    assert not compare(exercise, shape, exact.float(), exact, "cpu").passed  # C in fp32: the wrong dtype


def _fp16_accumulated(a: torch.Tensor, b: torch.Tensor, chunk: int) -> torch.Tensor:
    """A @ B with each chunk of products summed exactly and added to an fp16 accumulator (round to nearest)."""
    acc = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float16)
    a64, b64 = a.double(), b.double()
    for k0 in range(0, a.shape[1], chunk):
        acc = (acc.double() + a64[:, k0:k0 + chunk] @ b64[k0:k0 + chunk]).to(torch.float16)
    return acc


def test_the_fp16_accumulator_model_matches_a_simulation():
    a, b = day6.fp16_inputs((24, 24, 2**14), 5, "cpu")
    measured = relative_error(_fp16_accumulated(a, b, 16), matmul.reference((a, b)))
    assert 0.7 < measured / day6.fp16_accumulation_error(2**14, 16) < 1.4


def test_an_fp16_accumulator_fails_the_gpu_hidden_set_and_passes_the_cpu_one():
    assert (67, 45, day6.LARGE_K) in day6.HIDDEN.gpu
    # One rounding per 16 products (a wgmma's depth): several times the tolerance; coarser chunks fail too.
    assert day6.fp16_accumulation_error(day6.LARGE_K, 16) > 3 * day6.FP16.tolerance
    assert day6.fp16_accumulation_error(day6.LARGE_K, 64) > day6.FP16.tolerance
    # The interpreter's longest reduction, with its BLOCK_K of 32: far under the tolerance.
    longest = max(k for _, _, k in day6.HIDDEN.cpu + day6.FP16.visible_shapes.cpu)
    assert day6.fp16_accumulation_error(longest, 32) < day6.FP16.tolerance / 4


def test_the_baselines_were_taken_before_student_code_and_restore_the_flags(monkeypatch):
    def rebound(*args, **kwargs):
        raise AssertionError("a rebound torch.mm was called")

    monkeypatch.setattr(torch, "mm", rebound)
    flags = torch.backends.cuda.matmul
    before = (flags.allow_fp16_reduced_precision_reduction, flags.allow_bf16_reduced_precision_reduction)
    for exercise in SPECS:
        inputs = exercise.make_inputs((8, 6, 5), 0, "cpu")
        out = exercise.library(inputs)
        assert out.dtype == exercise.output_dtype and out.shape == (8, 6)
        assert relative_error(out, exercise.reference(inputs)) < exercise.tolerance
    assert (flags.allow_fp16_reduced_precision_reduction, flags.allow_bf16_reduced_precision_reduction) == before


@pytest.mark.parametrize("has_gpu", [False, True])
def test_drawn_hidden_shapes_are_seeded_and_bounded(has_gpu):
    limit = 3001 if has_gpu else 70
    for seed in range(100):
        shapes = day6.draw_hidden(random.Random(seed), has_gpu)
        assert shapes == day6.draw_hidden(random.Random(seed), has_gpu)
        assert len(shapes) == 2 and all(1 <= n <= limit for shape in shapes for n in shape)


def test_shape_sets_cover_the_edges():
    for shapes in (day6.FP16.visible_shapes.cpu + day6.HIDDEN.cpu, day6.FP16.visible_shapes.gpu + day6.HIDDEN.gpu):
        assert any(m == 1 for m, _, _ in shapes)  # a single row
        assert any(m != n for m, n, _ in shapes)
        assert any(k % 32 and k % 64 for _, _, k in shapes)  # a partial K-step for any tile
    assert day6.BENCH.gpu == ((4096, 4096, 4096), (8192, 8192, 8192)) and day6.BENCH.cpu == ()


def test_thresholds_name_their_precision_and_full_marks():
    for exercise, label in ((day6.FP16, "fp16"), (day6.BF16, "bf16")):
        vs_cublas, vs_reference = exercise.threshold("vs_cublas"), exercise.threshold("vs_reference")
        assert vs_cublas.kind == "vs_library" and vs_reference.kind == "vs_reference"
        assert vs_cublas.full_level == 0.60 and vs_reference.full_level == 0.85
        assert vs_cublas.credit(0.1) == 0.0 and vs_cublas.credit(0.55) == 0.75 and vs_cublas.credit(0.9) == 1.0
        for threshold in exercise.thresholds:
            assert threshold.precision.startswith(f"{label} inputs, fp32 accumulation, {label} output")
        assert exercise.grade_id(vs_cublas) == f"perf_w2d6_matmul_{label}_vs_cublas"
    assert day6.FP16.threshold("vs_cublas").points == 2.0 and day6.BF16.threshold("vs_cublas").points == 1.0


def test_the_pipeline_times_both_and_exports_the_four_answers():
    jobs = {job["spec"]: job for job in recording.kernel_calls(NOTEBOOK, Settings("gpu", "GPU"), 1, "alice")}
    for exercise in SPECS:
        assert jobs[exercise.id]["bench_shapes"] == [list(s) for s in day6.BENCH.gpu]
        hidden = [c["shape"] for c in jobs[exercise.id]["calls"] if c["set"] == "hidden"]
        assert [67, 45, day6.LARGE_K] in hidden
    assert recording.notebook_plan(NOTEBOOK).answers == [
        "bf16_error_exponent", "bf16_unit_roundoff", "fp16_accumulator_growth", "fp16_unit_roundoff"]


# ------------------------------------------------------------------------------------------- formats

@pytest.mark.parametrize(("name", "dtype"), [("fp32", torch.float32), ("fp16", torch.float16),
                                             ("bf16", torch.bfloat16)])
def test_format_numbers_agree_with_torch(name, dtype):
    fmt, info = formats.FORMATS[name], torch.finfo(dtype)
    assert fmt.bits == info.bits
    assert fmt.machine_epsilon == info.eps == 2 * fmt.unit_roundoff
    assert fmt.largest == info.max and fmt.smallest_normal == info.tiny


def test_tf32_is_fp32_range_with_fp16_precision():
    tf32 = formats.FORMATS["tf32"]
    assert tf32.bits == 19 and tf32.unit_roundoff == 2.0**-11 == formats.FORMATS["fp16"].unit_roundoff
    assert tf32.largest == pytest.approx(formats.FORMATS["fp32"].largest, rel=1e-3)


def test_round_mantissa_matches_torch_conversions_and_ties_to_even():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(1)) * 100
    assert torch.equal(formats.round_mantissa(x, 7), x.bfloat16().float())
    normal = x[(x.abs() > 1e-3) & (x.abs() < 6e4)]
    assert torch.equal(formats.round_mantissa(normal, 10), normal.half().float())
    # 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties go to the even neighbour, 1.
    halfway = torch.tensor([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11)])
    assert formats.round_mantissa(halfway, 10).tolist() == [1.0, 1 + 2 * 2.0**-10, -1.0]
    with pytest.raises(TypeError):
        formats.round_mantissa(x.double(), 10)
    with pytest.raises(ValueError):
        formats.round_mantissa(x, 23)


def test_the_pictures_draw():
    assert formats.bit_layout().axes[0].get_title().startswith("Bits of each format")
    figure = formats.error_vs_k([16, 64], {"fp16": [3e-4, 3e-4], "fp32 (ieee)": [0.0, 1e-7]}, 1e-2,
                                {"fp16": 2.0**-11}, "test")
    assert len(figure.axes[0].get_lines()) == 4  # two series, one roundoff level, the tolerance
    with pytest.raises(ValueError):
        formats.error_vs_k([16, 64], {"fp16": [3e-4]}, 1e-2, {}, "too few values")


# ---------------------------------------------------------------------- the interpreter's bf16 tl.dot

@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, SIZE: tl.constexpr):
    rows = tl.arange(0, SIZE)
    a = tl.load(a_ptr + rows[:, None] * SIZE + rows[None, :])
    b = tl.load(b_ptr + rows[:, None] * SIZE + rows[None, :])
    tl.store(c_ptr + rows[:, None] * SIZE + rows[None, :], tl.dot(a, b))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_16_bit_tl_dot_is_right(dtype):
    on = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device=on).manual_seed(0)
    a, b = (torch.randn((16, 16), generator=generator, device=on).to(dtype) for _ in range(2))
    c = torch.empty((16, 16), device=on, dtype=torch.float32)
    _dot_kernel[(1,)](a, b, c, SIZE=16)
    assert relative_error(c, a.double() @ b.double()) < 1e-6


def test_widening_keeps_every_bf16_value():
    from triton.runtime.interpreter import TensorHandle

    from course.interpreter_fixes import widen_bf16

    values = torch.tensor([1.0, -2.5, 3.0e38, 1e-40, 0.0, float("inf")], dtype=torch.bfloat16)
    handle = TensorHandle(values.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
    widened = widen_bf16(handle)
    assert widened.dtype == tl.float32 and torch.equal(torch.from_numpy(widened.data), values.float())
    fp16 = TensorHandle(np.ones(3, dtype=np.float16), tl.float16)
    assert widen_bf16(fp16) is fp16


# -------------------------------------------------------------------- bf16 outputs through the CPU judge

def test_a_bf16_output_reaches_the_cpu_judge_bit_for_bit(tmp_path):
    shape = (9, 7, 33)
    inputs = day6.BF16.make_inputs(shape, 11, "cpu")
    out = matmul.reference(inputs).to(torch.bfloat16)
    as_replayed = host_tensor.read(tmp_path, replay_inputs.save_tensor(out, tmp_path, "out-storage"))
    replayed = replay_cpu.save_output(as_replayed, tmp_path / "out.npy")  # what the CPU replay returns
    assert replayed == {"output": "out.npy", "output_dtype": plan_format.BF16_BITS}
    assert torch.equal(torch.from_numpy(np.load(tmp_path / "out.npy")).view(torch.bfloat16), out)
    definitions = build_kernels.read_definitions(["@triton.jit\ndef some_kernel(x):\n    pass\n"])
    plan = {"problems": [], "launches": [{"kernel": "some_kernel"}]}
    call = {"shape": list(shape), "seed": 11}
    passed, message = on_cpu._cpu_check(day6.BF16, call, {"plan": plan}, replayed, tmp_path, definitions)
    assert passed, message
    np.save(tmp_path / "fake.npy", out.float().numpy(), allow_pickle=False)  # fp32 data claiming to be bf16 bits
    passed, message = on_cpu._cpu_check(day6.BF16, call, {"plan": plan}, {**replayed, "output": "fake.npy"}, tmp_path,
                                       definitions)
    assert not passed and "malformed" in message
    passed, message = on_cpu._cpu_check(day6.BF16, call, {"plan": plan}, {"output": "fake.npy"}, tmp_path, definitions)
    assert not passed and "output dtype torch.float32" in message


# ------------------------------------------------------------------------------ the sm_90 listing

@triton.jit
def _listed_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr, PRECISION: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + rows[:, None] * BLOCK + rows[None, :])
    b = tl.load(b_ptr + rows[:, None] * BLOCK + rows[None, :])
    c = tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + rows[:, None] * BLOCK + rows[None, :], c.to(c_ptr.dtype.element_ty))


def test_sm90_listing_names_the_tensor_core_instruction():
    from course.days.sm90 import Case, matrix_instructions

    options = {"num_warps": 4, "num_stages": 1}
    cases = [Case("fp16", "fp16", {"BLOCK": 64, "PRECISION": "ieee"}, options),
             Case("fp32", "fp32", {"BLOCK": 64, "PRECISION": "ieee"}, options),
             Case("broken", "fp16", {"BLOCK": 8, "PRECISION": "ieee"}, options)]
    found = matrix_instructions(_listed_kernel, cases, pointers=("a_ptr", "b_ptr", "c_ptr"))
    assert any(".f32.f16.f16" in instruction for instruction in found["fp16"].matrix), found["fp16"]
    assert found["fp32"].matrix == () and found["fp32"].fma > 0
    assert found["broken"].error and "not compiled" in found["broken"].describe()  # tl.dot needs sides >= 16


@pytest.mark.gpu
def test_the_baselines_on_a_gpu():
    for exercise in SPECS:
        inputs = exercise.make_inputs((300, 200, 1000), 4, "cuda")
        out = exercise.library(inputs)
        assert out.is_cuda and out.dtype == exercise.output_dtype
        assert exercise.spot_error(inputs, out) < exercise.tolerance
        assert relative_error(out, exercise.reference(inputs)) < 5e-3


@pytest.mark.parametrize(("shared_memory", "stages"), [(232448, 4), (166912, 3)])  # H100/H200 and A100 opt-in
def test_the_16_bit_tiles_take_the_stages_the_devices_shared_memory_allows(shared_memory, stages):
    notebook = nbformat.read(str(SOLUTIONS / "week2" / "day6_tensor_cores.ipynb"), as_version=4)
    cell = next(c.source for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiles")
    device = DeviceInfo("cuda", "fake", shared_memory_per_block=shared_memory)
    namespace = {"torch": torch, "DEVICE": device}
    exec(cell, namespace)
    for dtype in (torch.float16, torch.bfloat16):
        tiles = namespace["tiles_for"](dtype)
        stage_bytes = (tiles["BLOCK_M"] * tiles["BLOCK_K"] + tiles["BLOCK_K"] * tiles["BLOCK_N"]) * 2
        assert tiles["num_stages"] == stages and stages * stage_bytes <= shared_memory
