"""Week 3 Day 5: the FlashAttention specs (reference, tolerance, FLOPs, shapes, bands), the solution's kernel in the
interpreter, the day's classic mistake, and the kernel compiled for sm_90 without a GPU as the judge builds it."""

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
from course.exercises import w3d5_flash_attention as day5
from course.recorder import plan
from grader.authoring.demo import DEMO_CLASS, parse_answers
from grader.intake.layout import REPO, SOLUTIONS
from grader.kernel_build import build_kernels

FP16 = spec.get("w3d5.attention_fp16")
BF16 = spec.get("w3d5.attention_bf16")
NOTEBOOK = SOLUTIONS / "week3" / "day5_flash_attention.ipynb"
DEMOS = DEMO_CLASS / "week3" / "day5_flash_attention"
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
    return _bench_module().load_solution("day5_flash_attention", "auto")


def _with_cells(solution_module, cells: dict[str, str], tmp_path):
    """The solution's cells with some replaced by a demo student's, as a module."""
    bench = sys.modules["week3_gemm_attention_references"]
    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells}
    sources.update(cells)
    source = bench.PREAMBLE.replace("DEVICE_MODE", "'auto'") + "\n\n".join(
        sources[name] for name in bench.CELLS["day5_flash_attention"])
    file = tmp_path / "student.py"
    file.write_text(source + "\n")
    module_spec = importlib.util.spec_from_file_location("day5_student", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _naive(q, k, v, causal, scale=None, rescale=True, mask_tail=True, block=16, diagonal=True):
    """Attention in fp64 on the CPU, block by block, with one mistake switched on where asked: no rescaling of the
    running sums, keys past N let in (as zeros), or a causal mask that hides the diagonal."""
    q, k, v = (t.double() for t in (q, k, v))
    n, d = q.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    padded = -(-n // block) * block
    kp = torch.zeros(*k.shape[:-2], padded, d, dtype=torch.float64)
    vp = torch.zeros_like(kp)
    kp[..., :n, :], vp[..., :n, :] = k, v
    s = q @ kp.transpose(-1, -2) * scale
    cols, rows = torch.arange(padded), torch.arange(n)
    hidden = (cols[None, :] > rows[:, None]) if diagonal else (cols[None, :] >= rows[:, None])
    if causal:
        s = s.masked_fill(hidden, -math.inf)
    if mask_tail:
        s = s.masked_fill(cols[None, :] >= n, -math.inf)
    m = torch.full(s.shape[:-1], -math.inf, dtype=torch.float64)
    l, acc = torch.zeros_like(m), torch.zeros(*s.shape[:-1], d, dtype=torch.float64)
    for j in range(0, padded, block):
        sj = s[..., j:j + block]
        m_new = torch.maximum(m, sj.amax(-1))
        p = torch.exp(sj - m_new[..., None])
        alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
        l = alpha * l + p.sum(-1)
        acc = alpha[..., None] * acc + p @ vp[..., j:j + block, :]
        m = m_new
    return acc / l[..., None]


# --- the spec ------------------------------------------------------------------------------------------------

def test_the_reference_is_torch_s_attention_in_fp64():
    q, k, v, _ = FP16.make_inputs((2, 3, 37, 64, 0), 1, "cpu")
    for causal in (False, True):
        expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                                    is_causal=causal)
        got = day5.reference((q, k, v, causal))
        assert got.dtype == torch.float64 and torch.allclose(got, expected, atol=1e-12)
    # One key: the output is that key's value, causal or not.
    q, k, v, causal = FP16.make_inputs((1, 1, 1, 64, 1), 2, "cpu")
    assert torch.equal(day5.reference((q, k, v, causal)), v.double())


def test_the_reference_in_chunks_matches_it_whole(monkeypatch):
    inputs = FP16.make_inputs((2, 3, 40, 64, 1), 3, "cpu")
    whole = day5.reference(inputs)
    monkeypatch.setattr(day5, "REFERENCE_CHUNK_BYTES", 8 * 40 * 40)  # one head at a time
    assert torch.equal(day5.reference(inputs), whole)


def test_inputs_are_fresh_seeded_and_causal_comes_from_the_shape():
    q, k, v, causal = FP16.make_inputs((1, 2, 50, 128, 1), 5, "cpu")
    again, *_ = FP16.make_inputs((1, 2, 50, 128, 1), 5, "cpu")
    other, *_ = FP16.make_inputs((1, 2, 50, 128, 1), 6, "cpu")
    assert q.shape == k.shape == v.shape == (1, 2, 50, 128) and q.dtype == torch.float16 and causal is True
    assert torch.equal(q, again) and not torch.equal(q, other) and not torch.equal(q, k)
    assert BF16.make_inputs((1, 1, 3, 64, 0), 5, "cpu")[0].dtype == torch.bfloat16
    assert BF16.make_inputs((1, 1, 3, 64, 0), 5, "cpu")[3] is False


def test_flops_count_two_products_and_halve_the_causal_ones():
    assert FP16.flops((4, 16, 4096, 128, 0)) == 4 * 4 * 16 * 4096**2 * 128
    assert FP16.flops((4, 16, 4096, 128, 1)) == FP16.flops((4, 16, 4096, 128, 0)) / 2
    assert FP16.bytes_moved((1, 2, 10, 64, 1)) == 2 * 4 * 2 * 10 * 64
    assert FP16.rate_unit == "GFLOP/s" and FP16.output_shape((1, 2, 3, 64, 1)) == (1, 2, 3, 64)


def test_the_tolerance_passes_16_bit_rounding_and_fails_each_classic_mistake():
    for dtype, spec_ in ((torch.float16, FP16), (torch.bfloat16, BF16)):
        q, k, v, _ = spec_.make_inputs((1, 2, 200, 64, 1), 7, "cpu")
        for causal in (False, True):
            exact = day5.reference((q, k, v, causal))
            # What a tensor-core kernel rounds: P to the input dtype before P V, and the output.
            s = q.double() @ k.double().transpose(-1, -2) / 8
            if causal:
                s = s.masked_fill(torch.ones(200, 200, dtype=torch.bool).triu(1), -math.inf)
            p = torch.exp(s - s.amax(-1, keepdim=True))
            rounded = (p.to(dtype).double() @ v.double() / p.sum(-1, keepdim=True)).to(dtype)
            assert check.relative_error(rounded, exact) < spec_.tolerance / 4, dtype
            mistakes = {"no rescaling": _naive(q, k, v, causal, rescale=False),
                        "no 1/sqrt(d)": _naive(q, k, v, causal, scale=1.0)}
            if causal:  # keys past N come after every query: the causal mask hides them anyway
                mistakes["the diagonal hidden"] = _naive(q, k, v, causal, diagonal=False).nan_to_num()
            else:
                mistakes["keys past N let in"] = _naive(q[..., :197, :], k[..., :197, :], v[..., :197, :], causal,
                                                        mask_tail=False)
            for name, wrong in mistakes.items():
                truth = exact if wrong.shape[-2] == 200 else day5.reference(
                    (q[..., :197, :], k[..., :197, :], v[..., :197, :], causal))
                assert check.relative_error(wrong, truth) > 3 * spec_.tolerance, (dtype, causal, name)
    # The block-by-block recurrence itself, without a mistake, is the reference.
    q, k, v, _ = FP16.make_inputs((1, 1, 50, 64, 1), 8, "cpu")
    assert check.relative_error(_naive(q, k, v, True), day5.reference((q, k, v, True))) < 1e-12


def test_the_sample_check_accepts_the_output_and_catches_a_wrong_head():
    inputs = FP16.make_inputs((2, 2, 64, 64, 1), 9, "cpu")
    right = day5.reference(inputs).half()
    assert all(day5.sampled_rows_error(inputs, right) < FP16.tolerance for _ in range(5))
    wrong = right.clone()
    wrong[:, :, 10:] = 0  # every head wrong past row 10: any sample of 64 rows out of 64 sees it
    assert day5.sampled_rows_error(inputs, wrong) > FP16.tolerance
    nan = right.clone()
    nan[...] = float("nan")
    assert day5.sampled_rows_error(inputs, nan) == math.inf


def test_shapes_catch_ragged_lengths_both_head_dims_and_both_masks():
    for has_gpu in (False, True):
        for shapes in (FP16.visible_shapes.for_device(has_gpu), FP16.hidden_shapes.for_device(has_gpu)):
            assert {d for *_, d, _ in shapes} == set(day5.HEAD_DIMS)
            assert {c for *_, c in shapes} == {0, 1}
            assert any(n % 16 and n > 16 for _, _, n, _, _ in shapes), "a length no block divides"
        both = FP16.hidden_shapes.for_device(has_gpu) + FP16.visible_shapes.for_device(has_gpu)
        assert any(n <= 2 for _, _, n, _, _ in both)
        assert FP16.visible_shapes == BF16.visible_shapes and FP16.hidden_shapes == BF16.hidden_shapes
    drawn = {s for seed in range(40) for s in FP16.draw_hidden(random.Random(seed), False)}
    assert len(drawn) > 30 and all(2 <= n <= 70 and d in day5.HEAD_DIMS and c in (0, 1) for _, _, n, d, c in drawn)
    assert any(n % 2 for _, _, n, _, _ in drawn)
    assert all(n == 4096 for _, _, n, _, _ in FP16.bench_shapes.gpu)
    assert {(d, c) for *_, d, c in FP16.bench_shapes.gpu} == {(64, 0), (64, 1), (128, 0), (128, 1)}
    assert BF16.bench_shapes.gpu == () and BF16.thresholds == ()


def test_thresholds_name_their_precision_and_match_the_notebook():
    vs_flash, vs_reference = FP16.threshold("vs_flash"), FP16.threshold("vs_reference")
    assert vs_flash.kind == "vs_library" and vs_flash.full_level == 0.80 and "flash backend" in FP16.library_name
    assert vs_reference.kind == "vs_reference" and 0.80 <= vs_reference.full_level <= 0.90
    for threshold in FP16.thresholds:
        assert "fp16 inputs, fp32 accumulation" in threshold.precision
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points")
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    for threshold in FP16.thresholds:
        assert points[FP16.grade_id(threshold)] == threshold.points
    assert set(FP16.correctness_cells) | set(BF16.correctness_cells) <= set(points)


# --- the solution and the demo students, interpreted ---------------------------------------------------------

def test_the_solution_passes_every_shape_in_both_dtypes(solution):
    for exercise in (FP16, BF16):
        for which in ("visible", "hidden"):
            results = check.check(exercise, solution.attention, which)
            assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    inputs = FP16.make_inputs((1, 2, 50, 64, 1), 0, device.info().torch_device)
    solution.attention(*inputs)  # autotunes outside the recording, as the grader's warm-up call does
    _, recorded = plan.record_call(solution.attention, inputs)
    assert recorded["problems"] == [] and [launch["kernel"] for launch in recorded["launches"]] == ["attention_kernel"]


def test_the_classic_mistake_fails_the_visible_shapes(solution, tmp_path):
    student = _with_cells(solution, parse_answers((DEMOS / "no_rescale.py").read_text()), tmp_path)
    results = check.check(FP16, student.attention, [(1, 2, 300, 64, 0), (1, 1, 1, 64, 0)])
    assert not results[0].passed and results[1].passed  # one block of keys: nothing to rescale


def test_the_demo_students_are_the_solution_but_for_what_they_name():
    solution_cells = {c.metadata["nbgrader"]["grade_id"] for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
                      if c.metadata.get("nbgrader", {}).get("solution")}
    for path in DEMOS.glob("*.py"):
        answers = parse_answers(path.read_text())
        assert set(answers) - {"all"} <= solution_cells, path.name
    assert {p.stem for p in DEMOS.glob("*.py")} == {"fast_correct", "slow_correct", "no_rescale", "unchanged_stub"}


# --- compiled for an H100 without one --------------------------------------------------------------------------

def test_the_biggest_configuration_compiles_for_sm90_and_fits_an_h100(tmp_path, solution):
    from triton.backends.compiler import GPUTarget

    from course.compiler import compile_triton

    inputs = FP16.make_inputs((1, 2, 50, 128, 1), 0, device.info().torch_device)
    solution.attention(*inputs)
    _, recorded = plan.record_call(solution.attention, inputs)
    launches = {}
    for causal in (False, True):
        launch = copy.deepcopy(recorded["launches"][-1])
        names = list(launch["signature"])
        values = {"HEAD_DIM": {"int": 128}, "BLOCK_M": {"int": 128}, "BLOCK_N": {"int": 128},
                  "CAUSAL": {"bool": causal}}
        launch["constexprs"] = [[[names.index(name)], value] for name, value in values.items()]
        launch["options"] = {"num_warps": 8, "num_stages": 3}
        launch["target"] = {"backend": "cuda", "arch": 90, "warp_size": 32}
        launch.pop("interpreted", None)
        launches[f"bench-{int(causal)}"] = {"plan": {"launches": [launch]}}
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {FP16.id: {"calls": launches}}}))
    request = tmp_path / "build.json"
    request.write_text(json.dumps({"notebook": str(NOTEBOOK), "export": str(exported),
                                   "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
                                   "out": str(tmp_path / "built")}))
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(request)], cwd=REPO, check=True,
                   env={**os.environ, "TRITON_INTERPRET": "0"})
    index = json.loads((tmp_path / "built" / "index.json").read_text())
    assert len(index) == 2 and all("error" not in entry for entry in index.values()), json.dumps(index, indent=1)
    for entry in index.values():
        compiled = compile_triton(str(tmp_path / "built" / entry["file"]), GPUTarget("cuda", 90, 32))
        assert compiled.metadata.shared <= H100_SHARED_BYTES
    assert build_kernels.launch_key(launches["bench-1"]["plan"]["launches"][0]) in index


# --- on a GPU: the judge's replay of the recorded launch on its own inputs ---------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 3, 1000, 64, 1), (1, 2, 777, 128, 0)], ids=["causal-d64", "full-d128"])
def test_the_kernel_replays_on_the_judge_s_own_inputs(tmp_path, solution, shape):
    import triton

    from grader.kernel_build import compile_ttgir
    from grader.replay import gpu_replay as replay
    from grader.score import results

    inputs = FP16.make_inputs(shape, 0, "cuda")
    solution.attention(*inputs)  # autotunes outside the recording, as the grader's warm-up call does
    _, recorded = plan.record_call(solution.attention, inputs)
    assert recorded["problems"] == [] and [launch["kernel"] for launch in recorded["launches"]] == ["attention_kernel"]
    assert recorded["launches"][0]["grid"][1] == shape[0] * shape[1]  # a 2-D grid: query blocks x heads
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {FP16.id: {"calls": {"c": {"plan": recorded}}}}}))
    target = recorded["launches"][0]["target"]
    build_kernels.build({"notebook": str(NOTEBOOK), "export": str(exported), "target": target,
                         "out": str(tmp_path / "built")})
    compiled = compile_ttgir.compile_built(tmp_path / "built", target, tmp_path / "cache", tmp_path / "log", 300)
    assert compiled.status == results.OK, compiled
    kernels = replay.load_kernels(tmp_path / "built")
    triton.set_allocator(lambda size, alignment, stream: pytest.fail("the notebook's allocator was used"))
    fresh = FP16.make_inputs(shape, 1, "cuda")
    prepared = replay.prepare(recorded, fresh, kernels, torch.float16, FP16.output_shape(shape), 2**28)
    out = replay.launch(prepared)
    torch.cuda.synchronize()
    assert check.relative_error(out, FP16.reference(fresh)) < FP16.tolerance


def test_the_notebook_s_own_check_refuses_the_library_s_attention():
    from course.guard import ForbiddenCallError, Guard

    q, k, v, causal = FP16.make_inputs((1, 1, 8, 64, 1), 0, "cpu")
    with pytest.raises(ForbiddenCallError, match="scaled_dot_product_attention"), Guard():
        torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
