"""Week 3 Day 4: the fused-epilogue spec (inputs, reference, library path, tolerance, sample check, shapes, bands),
the solution's kernel in the interpreter, the day's classic mistake, and the kernel compiled for sm_90 without a GPU
as the judge builds it."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import random
import subprocess
import sys

import nbformat
import pytest
import torch

from course import check, device, spec
from course.exercises import w3d4_fused_epilogue as day4
from course.recorder import plan
from grader.authoring.demo import DEMO_CLASS, parse_answers
from grader.intake.layout import REPO, SOLUTIONS

GELU = spec.get("w3d4.linear_gelu")
NOTEBOOK = SOLUTIONS / "week3" / "day4_fused_epilogue.ipynb"
DEMOS = DEMO_CLASS / "week3" / "day4_fused_epilogue"
H100_SHARED_BYTES = 232448  # most shared memory one program may use on an H100 (227 KiB, Hopper tuning guide)


def _bench_module():
    path = REPO / "bench" / "week3_gemm_attention_references.py"
    module_spec = importlib.util.spec_from_file_location("week3_gemm_attention_references", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["week3_gemm_attention_references"] = module
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def solution():
    """The solution notebook's kernel and launch cells as a module (interpreted on a CPU)."""
    return _bench_module().load_solution("day4_fused_epilogue", "auto")


def _with_cells(cells: dict[str, str], tmp_path):
    """The solution's cells with some replaced by a demo student's, as a module."""
    bench = sys.modules["week3_gemm_attention_references"]
    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells}
    sources.update(cells)
    source = bench.PREAMBLE.replace("DEVICE_MODE", "'auto'") + "\n\n".join(
        sources[name] for name in bench.CELLS["day4_fused_epilogue"])
    file = tmp_path / "student.py"
    file.write_text(source + "\n")
    module_spec = importlib.util.spec_from_file_location("day4_student", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


# --- the spec ------------------------------------------------------------------------------------------------

def test_the_reference_is_gelu_of_the_exact_product_plus_bias():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    b = torch.tensor([[0.5], [-0.25]], dtype=torch.float16)
    bias = torch.tensor([0.25], dtype=torch.float16)
    pre = torch.tensor([[0.25], [0.75]], dtype=torch.float64)  # 1 * 0.5 - 2 * 0.25 + 0.25, 1.5 - 1 + 0.25
    expected = 0.5 * pre * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre**3)))
    got = day4.reference((a, b, bias))
    assert got.dtype == torch.float64 and torch.allclose(got, expected, atol=1e-15)
    x = torch.linspace(-8, 8, 1001, dtype=torch.float64)
    assert torch.allclose(day4.gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-12)


def test_inputs_are_fresh_fp16_and_keep_the_pre_activation_near_one():
    a, b, bias = GELU.make_inputs((300, 200, 1024), 5, "cpu")
    again, *_ = GELU.make_inputs((300, 200, 1024), 5, "cpu")
    other, *_ = GELU.make_inputs((300, 200, 1024), 6, "cpu")
    assert a.shape == (300, 1024) and b.shape == (1024, 200) and bias.shape == (200,)
    assert a.dtype == b.dtype == bias.dtype == torch.float16 and a.is_contiguous() and b.is_contiguous()
    assert torch.equal(a, again) and not torch.equal(a, other)
    pre = a.double() @ b.double() + bias.double()
    assert 1.0 < float(pre.std()) < 2.0  # GELU bends here: a ReLU would not pass for it


def test_the_library_path_is_three_kernels_and_within_tolerance():
    inputs = GELU.make_inputs((64, 48, 80), 1, "cpu")
    flags = torch.backends.cuda.matmul
    before = flags.allow_fp16_reduced_precision_reduction
    out = day4.separate_kernels(inputs)
    assert flags.allow_fp16_reduced_precision_reduction == before
    assert out.dtype == torch.float16 and check.relative_error(out, day4.reference(inputs)) < 1e-3
    assert "separate bias and GELU" in GELU.library_name


def test_the_tolerance_passes_rounding_and_fails_each_classic_mistake():
    a, b, bias = GELU.make_inputs((256, 192, 512), 2, "cpu")
    exact = day4.reference((a, b, bias))
    product = a.double() @ b.double()
    fused = day4.gelu_tanh(a.float() @ b.float() + bias.float()).half()
    unfused = torch.nn.functional.gelu((a.float() @ b.float()).half() + bias, approximate="tanh")
    erf_form = torch.nn.functional.gelu(product + bias.double())  # the exact GELU: a different, close function
    for fine in (fused, unfused, erf_form):
        assert check.relative_error(fine, exact) < GELU.tolerance / 4
    rows = torch.arange(product.shape[0])  # the demo's mistake: bias[row] where row < N, else 0
    by_row = torch.where(rows < bias.numel(), bias.double()[rows.clamp(max=bias.numel() - 1)], 0.0)[:, None]
    wrong = {"bias by row": day4.gelu_tanh(product + by_row), "no bias": day4.gelu_tanh(product),
             "ReLU": torch.relu(product + bias.double()), "no activation": product + bias.double(),
             "bias after GELU": day4.gelu_tanh(product) + bias.double()}
    for name, out in wrong.items():
        assert check.relative_error(out, exact) > 5 * GELU.tolerance, name


def test_the_sample_check_accepts_the_output_and_catches_wrong_rows():
    inputs = GELU.make_inputs((64, 40, 48), 3, "cpu")
    right = day4.reference(inputs).half()
    assert all(day4.sampled_rows_error(inputs, right) < GELU.tolerance for _ in range(5))
    wrong = right.clone()
    wrong[:, 20:] = 0  # half the columns of every row: any sample shows it
    assert day4.sampled_rows_error(inputs, wrong) > GELU.tolerance
    wrong[...] = float("nan")
    assert day4.sampled_rows_error(inputs, wrong) == math.inf


def test_shapes_have_ragged_sides_and_the_bench_shapes_are_mlp_layers():
    for has_gpu in (False, True):
        shapes = GELU.visible_shapes.for_device(has_gpu) + GELU.hidden_shapes.for_device(has_gpu)
        assert any(m == 1 for m, _, _ in shapes) and any(n % 32 and k % 32 for _, n, k in shapes)
        assert any(m > n for m, n, _ in shapes) and any(m < n for m, n, _ in shapes)
    drawn = {s for seed in range(20) for s in GELU.draw_hidden(random.Random(seed), False)}
    assert len(drawn) > 20 and all(1 <= side <= 70 for shape in drawn for side in shape)
    assert GELU.bench_shapes.gpu == ((4096, 4096, 4096), (8192, 8192, 2048), (16384, 3072, 768))
    assert all(side % 128 == 0 for shape in GELU.bench_shapes.gpu for side in shape)
    assert GELU.flops((2, 3, 4)) == 48 and GELU.bytes_moved((2, 3, 4)) == 2 * (8 + 12 + 3 + 6)


def test_thresholds_name_their_precision_and_match_the_notebook():
    vs_separate, vs_reference = GELU.threshold("vs_separate"), GELU.threshold("vs_reference")
    assert vs_separate.kind == "vs_library" and vs_reference.kind == "vs_reference"
    assert vs_separate.full_level <= 1.0 and 0.80 <= vs_reference.full_level <= 0.90
    for threshold in GELU.thresholds:
        assert "fp32 accumulation and epilogue" in threshold.precision
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points")
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    for threshold in GELU.thresholds:
        assert points[GELU.grade_id(threshold)] == threshold.points
    assert set(GELU.correctness_cells) <= set(points)


# --- the solution and the demo students, interpreted ---------------------------------------------------------

def test_the_solution_passes_every_shape_with_one_kernel(solution):
    for which in ("visible", "hidden"):
        results = check.check(GELU, solution.linear_gelu, which)
        assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    inputs = GELU.make_inputs((40, 24, 56), 0, device.info().torch_device)
    solution.linear_gelu(*inputs)  # autotunes outside the recording, as the grader's warm-up call does
    _, recorded = plan.record_call(solution.linear_gelu, inputs)
    assert recorded["problems"] == []
    assert [launch["kernel"] for launch in recorded["launches"]] == ["linear_gelu_kernel"]


def test_the_classic_mistake_fails_every_shape(solution, tmp_path):
    student = _with_cells(parse_answers((DEMOS / "bias_by_row.py").read_text()), tmp_path)
    results = check.check(GELU, student.linear_gelu, "visible")
    assert not any(r.passed for r in results), [r.message for r in results]


def test_the_demo_students_are_the_solution_but_for_what_they_name():
    solution_cells = {c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
                      if c.metadata.get("nbgrader", {}).get("solution")}
    for path in DEMOS.glob("*.py"):
        assert set(parse_answers(path.read_text())) - {"all"} <= solution_cells, path.name
    assert {p.stem for p in DEMOS.glob("*.py")} == {"fast_correct", "slow_correct", "bias_by_row", "unchanged_stub"}


# --- compiled for an H100 without one --------------------------------------------------------------------------

def test_the_biggest_configuration_compiles_for_sm90_and_fits_an_h100(tmp_path, solution):
    from triton.backends.compiler import GPUTarget

    from course.compiler import compile_triton

    inputs = GELU.make_inputs((64, 64, 64), 0, device.info().torch_device)
    solution.linear_gelu(*inputs)
    _, recorded = plan.record_call(solution.linear_gelu, inputs)
    launch = copy.deepcopy(recorded["launches"][-1])
    names = list(launch["signature"])
    values = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}
    launch["constexprs"] = [[[names.index(name)], {"int": value}] for name, value in values.items()]
    launch["options"] = {"num_warps": 8, "num_stages": 3}
    launch["target"] = {"backend": "cuda", "arch": 90, "warp_size": 32}
    launch.pop("interpreted", None)
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {GELU.id: {"calls": {"bench-0": {"plan": {"launches": [launch]}}}}}}))
    request = tmp_path / "build.json"
    request.write_text(json.dumps({"notebook": str(NOTEBOOK), "export": str(exported), "target": launch["target"],
                                   "out": str(tmp_path / "built")}))
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(request)], cwd=REPO, check=True,
                   env={**os.environ, "TRITON_INTERPRET": "0"})
    index = json.loads((tmp_path / "built" / "index.json").read_text())
    assert len(index) == 1 and all("error" not in entry for entry in index.values()), json.dumps(index, indent=1)
    entry = next(iter(index.values()))
    compiled = compile_triton(str(tmp_path / "built" / entry["file"]), GPUTarget("cuda", 90, 32))
    assert compiled.metadata.shared <= H100_SHARED_BYTES


# --- on a GPU: the judge's replay of the recorded launch on its own inputs ---------------------------------------

@pytest.mark.gpu
def test_the_kernel_replays_on_the_judge_s_own_inputs(tmp_path, solution):
    import triton

    from grader.kernel_build import build_kernels, compile_ttgir
    from grader.replay import gpu_replay as replay
    from grader.score import results

    shape = (1000, 1030, 515)
    inputs = GELU.make_inputs(shape, 0, "cuda")
    solution.linear_gelu(*inputs)  # autotunes outside the recording, as the grader's warm-up call does
    _, recorded = plan.record_call(solution.linear_gelu, inputs)
    assert recorded["problems"] == []
    assert [launch["kernel"] for launch in recorded["launches"]] == ["linear_gelu_kernel"]
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {GELU.id: {"calls": {"c": {"plan": recorded}}}}}))
    target = recorded["launches"][0]["target"]
    build_kernels.build({"notebook": str(NOTEBOOK), "export": str(exported), "target": target,
                         "out": str(tmp_path / "built")})
    compiled = compile_ttgir.compile_built(tmp_path / "built", target, tmp_path / "cache", tmp_path / "log", 300)
    assert compiled.status == results.OK, compiled
    kernels = replay.load_kernels(tmp_path / "built")
    triton.set_allocator(lambda size, alignment, stream: pytest.fail("the notebook's allocator was used"))
    fresh = GELU.make_inputs(shape, 1, "cuda")
    prepared = replay.prepare(recorded, fresh, kernels, torch.float16, GELU.output_shape(shape), 2**28)
    out = replay.launch(prepared)
    torch.cuda.synchronize()
    assert check.relative_error(out, GELU.reference(fresh)) < GELU.tolerance
