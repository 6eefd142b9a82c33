"""Week 2 Day 5 (TMA): the spec, tensor descriptors in launch plans, their build and replay, scratch, read-only inputs.

On a CPU the compiled path is exercised without a launch: a launch is recorded through Triton's own
binder with a stand-in driver, built for sm_90 (and sm_80) with Triton's compiler, loaded back from
TTGIR, and its arguments resolved on CPU buffers. Launching it needs a GPU (the ``gpu`` tests and
``bench/tma_replay_check.py``).
"""

from __future__ import annotations

import json
import random

import nbformat
import pytest
import torch

from course import spec
from course.exercises import matmul
from course.exercises import w2d5_tma as day5
from course.recorder import descriptors, plan
from grader.kernel_build import build_kernels
from grader.replay import gpu_replay as replay
from grader.replay import tma_replay
from tests.helpers import module_from_source

KERNEL_CELL = '''
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def tile_copy(in_desc, out_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    out_desc.store([row, col], in_desc.load([row, col]) * 2)


def double(x, rows=None, base=None):
    """2 * x through descriptors; ``rows`` overstates the output's rows, ``base`` redirects the store."""
    out = torch.empty_like(x)
    m, n = x.shape
    target = out if base is None else base
    out_desc = TensorDescriptor(target, [rows or m, n], [n, 1], [16, 16])
    tile_copy[(triton.cdiv(m, 16), triton.cdiv(n, 16))](TensorDescriptor.from_tensor(x, [16, 16]), out_desc,
                                                           BLOCK_M=16, BLOCK_N=16)
    return out
'''

LAYOUT = {"swizzle": 1, "elem_size": 2, "elem_type": 6, "block_size": [16, 16], "fp4_padded": False}


# These run a kernel cell in Triton's interpreter on CPU tensors; on a GPU machine the compiled kernel would
# read those host pointers, so there the GPU tests below and bench/tma_replay_check.py check the same rules.
INTERPRETER_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter test; a GPU is visible")


def _module(tmp_path, name="tma_cell"):
    return module_from_source(tmp_path, KERNEL_CELL, name)


def _notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(KERNEL_CELL)]
    path = tmp_path / "notebook.ipynb"
    nbformat.write(nb, str(path))
    return path


def _x(rows=40, cols=24, device="cpu"):
    return (torch.randn((rows, cols), device=device).to(torch.float16),)


# ------------------------------------------------------------------------------------------------ the spec

def test_the_spec_belongs_to_the_notebook_and_is_fp16():
    assert [s.id for s in spec.for_notebook("week2/day5_tma")] == ["w2d5.matmul_tma"]
    assert day5.SPEC.precision == "fp16" and day5.SPEC.output_dtype == torch.float16
    assert day5.SPEC.library_name == "cuBLAS fp16" and day5.SPEC.rate_unit == "GFLOP/s"
    assert set(day5.SPEC.correctness_cells) == {"test_matmul_tma_visible", "test_matmul_tma_hidden"}


def test_the_reference_on_a_hand_checked_case():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]], dtype=torch.float16)
    b = torch.tensor([[1.0, 0.0, 2.0], [-1.0, 1.0, 0.25]], dtype=torch.float16)
    expected = [[-1.0, 2.0, 2.5], [-1.0, 4.0, 7.0], [1.5, -1.0, 0.75]]
    assert matmul.reference((a, b)).tolist() == expected
    assert day5.SPEC.output_shape((3, 3, 2)) == (3, 3)
    assert day5.SPEC.work((3, 3, 2)) == 36.0 and day5.SPEC.bytes_moved((3, 3, 2)) == 2.0 * (6 + 6 + 9)


def test_inputs_are_fresh_seeded_fp16_and_never_zero():
    a, b = day5.make_inputs((30, 20, 10), 1, "cpu")
    a2, _ = day5.make_inputs((30, 20, 10), 1, "cpu")
    a3, _ = day5.make_inputs((30, 20, 10), 2, "cpu")
    assert a.shape == (30, 10) and b.shape == (10, 20) and a.dtype == b.dtype == torch.float16
    assert torch.equal(a, a2) and not torch.equal(a, a3)
    assert bool((a != 0).any()) and bool((b != 0).any())


def test_the_shapes_exercise_both_paths_on_a_hopper_gpu():
    def takes_tma(shape):
        return shape[1] % 8 == 0 and shape[2] % 8 == 0

    for shapes in (day5.SPEC.visible_shapes.gpu, day5.SPEC.hidden_shapes.gpu):
        assert any(takes_tma(s) for s in shapes) and any(not takes_tma(s) for s in shapes)
    assert all(takes_tma(s) for s in day5.SPEC.bench_shapes.gpu)
    for seed in range(20):
        tma_shape, fallback_shape = day5.draw_hidden(random.Random(seed), has_gpu=True)
        assert takes_tma(tma_shape) and not takes_tma(fallback_shape)
        assert max(max(day5.draw_hidden(random.Random(seed), has_gpu=False))) <= 70


def test_the_spot_check_catches_a_wrong_region_and_passes_fp16_rounding():
    a, b = day5.make_inputs((64, 48, 40), 3, "cpu")
    exact = matmul.reference((a, b))
    assert matmul.freivalds_error((a, b), exact.to(torch.float16)) < 1e-3
    wrong = exact.to(torch.float16)
    wrong[10:20, 5:9] = 0
    assert matmul.freivalds_error((a, b), wrong) > day5.SPEC.tolerance


def test_fp16_rounding_passes_and_a_wrong_row_or_a_downcast_fails():
    from course.check import compare

    shape = (50, 40, 72)
    a, b = day5.make_inputs(shape, 5, "cpu")
    exact = matmul.reference((a, b))
    assert compare(day5.SPEC, shape, exact.to(torch.float16), exact, "cpu").passed
    wrong = exact.to(torch.float16)
    wrong[7] = 0
    assert not compare(day5.SPEC, shape, wrong, exact, "cpu").passed
    assert "dtype" in compare(day5.SPEC, shape, exact.float(), exact, "cpu").message


# ------------------------------------------------------------------------------------- descriptor checks

@pytest.mark.parametrize("offset, nbytes, shape, strides, size, problem", [
    (0, 2 * 40 * 24, [40, 24], [24, 1], 2, None),
    (48, 2 * 40 * 24, [38, 24], [24, 1], 2, None),
    (0, 2 * 40 * 24, [41, 24], [24, 1], 2, "reaches byte"),
    (48, 2 * 40 * 24, [40, 24], [24, 1], 2, "reaches byte"),
    (0, 2 * 40 * 24, [40, 24], [20, 1], 2, "multiple of 16 bytes"),
    (8, 2 * 40 * 24, [10, 8], [24, 1], 2, "aligned base"),
    (0, 2 * 40 * 24, [40, 24], [1, 24], 2, "contiguous"),
    (0, 2 * 40 * 24, [40, 24], [-24, 1], 2, "positive multiple"),
    (0, 2 * 40 * 24, [0, 24], [24, 1], 2, "empty"),
    (0, 2 * 40 * 24, [40, True], [24, 1], 2, "malformed"),
    (0, 2 * 40 * 24, [40, 24], [24], 2, "rank"),
    ("0", 2 * 40 * 24, [40, 24], [24, 1], 2, "malformed"),
    (0, 4 * 40 * 22, [40, 22], [22, 1], 4, "multiple of 16 bytes"),
    (0, 4 * 40 * 24, [40, 24], [24, 1], 4, None),
])
def test_a_descriptor_view_must_lie_inside_its_buffer(offset, nbytes, shape, strides, size, problem):
    found = descriptors.view_problem(offset, nbytes, shape, strides, size)
    assert (found is None) if problem is None else (problem in found), found


def test_signature_entries_parse_only_as_tensor_descriptors():
    assert descriptors.parse_signature("tensordesc<fp16[64, 32]>") == ("fp16", [64, 32])
    assert descriptors.parse_signature("tensordesc<bf16[8]>") == ("bf16", [8])
    for bad in ("*fp16", "tensordesc<fp16[64, 32],layout>", "tensordesc<weird[4]>", 7, "tensordesc<fp16[]>"):
        assert descriptors.parse_signature(bad) is None


# --------------------------------------------------------------------------------- recording, interpreter

@INTERPRETER_ONLY
def test_the_interpreter_records_descriptors_as_data(tmp_path):
    cell = _module(tmp_path)
    (x,) = _x()
    out, recorded = plan.record_call(cell.double, (x,))
    assert recorded["problems"] == [] and torch.equal(out, x * 2)
    [launch] = recorded["launches"]
    a, b = (arg["descriptor"] for arg in launch["arguments"])
    assert a == {"pointer": {"buffer": "in0", "offset": 0}, "shape": [40, 24], "strides": [24, 1],
                 "block_shape": [16, 16], "padding": "zero"}
    assert b["pointer"] == {"buffer": "alloc0", "offset": 0}
    json.dumps(recorded)


@INTERPRETER_ONLY
def test_a_descriptor_past_its_buffer_is_refused_before_it_runs(tmp_path):
    cell = _module(tmp_path, "tma_cell_oversized")
    (x,) = _x()
    _, recorded = plan.record_call(lambda t: cell.double(t, rows=48), (x,))
    assert "reaches byte" in recorded["problems"][0] and "out_desc" in recorded["problems"][0]
    assert recorded["launches"] == []  # refused before the launch: nothing was written past the buffer


@INTERPRETER_ONLY
def test_a_call_that_writes_its_input_is_not_replayable(tmp_path):
    cell = _module(tmp_path, "tma_cell_writes_input")
    (x,) = _x()
    kept = x.clone()
    _, recorded = plan.record_call(lambda t: cell.double(t, base=t), (x,))
    assert any("changed its input 0" in p for p in recorded["problems"]), recorded["problems"]
    assert not torch.equal(x, kept)


@INTERPRETER_ONLY
def test_outside_a_recording_a_descriptor_past_its_tensor_is_not_launched(tmp_path):
    cell = _module(tmp_path, "tma_cell_unrecorded")
    plan.install()
    (x,) = _x()
    with pytest.raises(RuntimeError, match="not launched: the tensor descriptor out_desc of kernel tile_copy"):
        cell.double(x, rows=48)
    assert torch.equal(cell.double(x), x * 2)


@INTERPRETER_ONLY
def test_the_warm_up_call_gets_inputs_of_its_own(tmp_path):
    from course.recorder import export

    cell = _module(tmp_path, "tma_cell_warmup")
    namespace = {"matmul_tma": lambda a, b: cell.double(torch.zeros_like(b), base=b)}  # sets b to zeros
    job = {"spec": "w2d5.matmul_tma", "calls": [{"key": "k", "shape": [40, 24, 16], "seed": 3}], "warmup": True}
    recorded = export._record_kernel(namespace, job, "cpu", tmp_path / "arrays")["calls"]["k"]["plan"]
    assert any("changed its input 1" in p for p in recorded["problems"]), recorded["problems"]


def test_unchanged_inputs_pass_and_nan_equals_nan():
    x = torch.tensor([1.0, float("nan"), 3.0])
    assert plan.changed_inputs(plan.snapshot_inputs((x, 5)), (x, 5)) == []
    before = plan.snapshot_inputs((x, 5))
    x[0] = 2.0
    assert plan.changed_inputs(before, (x, 5)) == [0]
    n = torch.arange(4)
    assert plan.changed_inputs(plan.snapshot_inputs((n,)), (n + 1,)) == [0]


# ------------------------------------------------------------------- recording, compiled (no GPU needed)

class _StandInDriver:
    """Enough of Triton's driver for the binder and the recorder: device 0, stream 0."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def _record_compiled(monkeypatch, cell, x, **double_kwargs):
    """What the recorder writes for ``cell.double(x)`` on an sm_90 GPU, without launching anything."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction, create_function_from_signature

    monkeypatch.setattr(driver, "_active", _StandInDriver())
    compiled = JITFunction(cell.tile_copy.fn)
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    compiled.device_caches[0] = ({}, {}, target, backend,
                                 create_function_from_signature(compiled.signature, compiled.params, backend))
    captured = {}

    def launch_instead(grid, *args, **kwargs):
        captured.update(grid=grid, args=args, kwargs=kwargs)

    monkeypatch.setattr(cell, "tile_copy", type("Launcher", (), {"__getitem__": lambda self, grid: (
        lambda *args, **kwargs: launch_instead(grid, *args, **kwargs))})())
    with plan._recording((x,)) as recording:
        cell.double(x, **double_kwargs)
        recording.stream = 0
        plan._record_launch(compiled, captured["args"], captured["kwargs"], captured["grid"], None, 0)
    return recording


@INTERPRETER_ONLY
def test_the_compiled_path_records_the_descriptor_signature(monkeypatch, tmp_path):
    cell = _module(tmp_path, "tma_cell_compiled")
    (x,) = _x()
    recording = _record_compiled(monkeypatch, cell, x)
    assert recording.problems == []
    [launch] = recording.launches
    assert launch["signature"] == {"in_desc": "tensordesc<fp16[16, 16]>", "out_desc": "tensordesc<fp16[16, 16]>",
                                   "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    assert [a["descriptor"]["pointer"]["buffer"] for a in launch["arguments"]] == ["in0", "alloc0"]
    assert launch["grid"] == [3, 2, 1]


def _launch_of(monkeypatch, tmp_path, name):
    cell = _module(tmp_path, name)
    (x,) = _x()
    [launch] = _record_compiled(monkeypatch, cell, x).launches
    return launch


def _built(tmp_path, launch, arch):
    target = {"backend": "cuda", "arch": arch, "warp_size": 32}
    launch = {**launch, "target": target}
    exported = tmp_path / f"export{arch}.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {"c": {"plan": {"launches": [launch]}}}}}}))
    out = tmp_path / f"built{arch}"
    index = build_kernels.build({"notebook": str(_notebook(tmp_path)), "export": str(exported), "target": target,
                                 "out": str(out)})
    return launch, index, out


def test_the_builder_compiles_a_descriptor_launch_to_tma_for_sm90(monkeypatch, tmp_path):
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.driver import make_launcher

    launch, index, out = _built(tmp_path, _launch_of(monkeypatch, tmp_path, "tma_cell_build"), 90)
    [entry] = index.values()
    assert "async_tma_copy_global_to_local" in (out / entry["file"]).read_text()
    kernels = replay.load_kernels(out, target=GPUTarget("cuda", 90, 32))
    key = build_kernels.launch_key(launch)
    assert kernels.errors == {} and len(kernels.descriptors[key]) == 2
    signature = kernels.compiled[key].src.signature
    assert list(signature.values()) == ["nvTmaDesc", "i32", "i32", "i64", "i64"] * 2
    assert "getTmaDesc" in make_launcher({}, signature, None)  # the launcher takes a ready CUtensorMap

    buffers = {"in0": torch.zeros(40 * 24, dtype=torch.float16), "alloc0": torch.zeros(40 * 24, dtype=torch.float16)}
    filled = []

    def fill(address, layout, shape, strides, padding):
        filled.append((address, layout["block_size"], shape, strides, padding))
        return "map"

    monkeypatch.setattr(tma_replay, "_fill_tma", fill)
    arguments = replay._arguments(launch, buffers, kernels.descriptors[key])
    assert arguments == ["map", 40, 24, 24, 1] * 2 and len(arguments) == len(signature)
    assert filled[1][0] == buffers["alloc0"].data_ptr() and filled[0][2:] == ([40, 24], [24, 1], "zero")


def test_without_tma_a_descriptor_takes_its_pointer_form(monkeypatch, tmp_path):
    from triton.backends.compiler import GPUTarget

    launch, index, out = _built(tmp_path, _launch_of(monkeypatch, tmp_path, "tma_cell_sm80"), 80)
    kernels = replay.load_kernels(out, target=GPUTarget("cuda", 80, 32))
    key = build_kernels.launch_key(launch)
    assert kernels.descriptors[key] == []
    buffers = {"in0": torch.zeros(40 * 24, dtype=torch.float16), "alloc0": torch.zeros(40 * 24, dtype=torch.float16)}
    arguments = replay._arguments(launch, buffers, [])
    assert len(arguments) == len(kernels.compiled[key].src.signature)
    assert arguments[:6] == [buffers["in0"].data_ptr(), 40, 24, 24, 1, False]


@pytest.mark.parametrize("edit, why", [
    (lambda d: d.update(shape=[41, 24]), "reaches byte"),
    (lambda d: d.update(strides=[20, 1]), "multiple of 16 bytes"),
    (lambda d: d.update(block_shape=[32, 16]), r"is not the \[16, 16\]"),
    (lambda d: d.update(padding="garbage"), "padding"),
    (lambda d: d.update(pointer={"buffer": "elsewhere", "offset": 0}), "unknown buffer"),
    (lambda d: d.update(pointer={"buffer": "in0", "offset": 16}), "reaches byte"),
    (lambda d: d.update(shape=[40]), "rank 2"),
    (lambda d: d.update(shape="40x24"), "rank 2"),
])
def test_replay_checks_every_descriptor_of_an_untrusted_plan(edit, why):
    launch = {"kernel": "tile_copy", "signature": {"in_desc": "tensordesc<fp16[16, 16]>", "BLOCK_M": "constexpr"},
              "arguments": [{"name": "in_desc", "descriptor": {
                  "pointer": {"buffer": "in0", "offset": 0}, "shape": [40, 24], "strides": [24, 1],
                  "block_shape": [16, 16], "padding": "zero"}}]}
    buffers = {"in0": torch.zeros(40 * 24, dtype=torch.float16)}
    assert len(replay._arguments(launch, buffers, [])) == 10  # untouched, it resolves (pointer form)
    edit(launch["arguments"][0]["descriptor"])
    with pytest.raises(replay.Unreplayable, match=why):
        replay._arguments(launch, buffers, [LAYOUT])


@pytest.mark.parametrize("signature, argument, why", [
    ({"x": "*fp16"}, {"name": "x", "scalar": {"int": 123456}}, "is not the \\*fp16"),
    ({"x": "i32"}, {"name": "x", "pointer": {"buffer": "in0", "offset": 0}}, "is not the i32"),
    ({"x": "tensordesc<fp16[16, 16]>"}, {"name": "x", "pointer": {"buffer": "in0", "offset": 0}}, "is not the"),
    ({"x": "i32", "y": "i32"}, {"name": "x", "scalar": {"int": 1}}, "do not match its signature"),
])
def test_each_argument_must_be_of_the_kind_its_signature_says(signature, argument, why):
    buffers = {"in0": torch.zeros(64, dtype=torch.float16)}
    with pytest.raises(replay.Unreplayable, match=why):
        replay._arguments({"kernel": "k", "signature": signature, "arguments": [argument]}, buffers, [])


def test_a_descriptor_of_another_element_size_than_its_build_is_refused():
    buffers = {"in0": torch.zeros(64 * 64, dtype=torch.float32)}
    entry = {"pointer": {"buffer": "in0", "offset": 0}, "shape": [64, 64], "strides": [64, 1],
             "block_shape": [16, 16], "padding": "zero"}
    with pytest.raises(tma_replay.DescriptorError, match="2-byte elements"):
        tma_replay.descriptor_arguments(buffers, entry, "tensordesc<fp32[16, 16]>", LAYOUT, fill=lambda *a: "map")
    resolved = tma_replay.descriptor_arguments(buffers, entry, "tensordesc<fp16[16, 16]>", LAYOUT,
                                               fill=lambda *a: "map")
    assert resolved == ["map", 64, 64, 64, 1]


def test_the_builder_refuses_a_descriptor_signature_it_does_not_know(tmp_path):
    launch = {"kernel": "tile_copy", "signature": {"in_desc": "tensordesc<fp16[16, 16],nvmma>",
                                                   "out_desc": "tensordesc<fp16[16, 16]>",
                                                   "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"},
              "constexprs": [[[2], {"int": 16}], [[3], {"int": 16}]], "attrs": [], "options": {"num_warps": 4}}
    _, index, _ = _built(tmp_path, launch, 90)
    [entry] = index.values()
    assert "cannot replay" in entry["error"]


def test_scratch_is_bounded():
    buffer = torch.zeros(256, dtype=torch.uint8)
    allocator = tma_replay.Scratch(buffer)
    assert allocator(256, 16, None) is buffer
    with pytest.raises(tma_replay.DescriptorError, match="more than"):
        allocator(257, 16, None)
    fake = type("K", (), {"metadata": type("M", (), {"global_scratch_size": 128, "num_ctas": 1})()})()
    assert tma_replay.scratch_bytes(fake, (4, 2, 1)) == 1024


# ---------------------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
def test_a_descriptor_plan_replays_on_fresh_buffers(tmp_path):
    cell = _module(tmp_path, "tma_gpu_cell")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs compute capability 9.0")
    (x,) = _x(200, 72, "cuda")
    _, recorded = plan.record_call(cell.double, (x,))
    assert recorded["problems"] == []
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {"c": {"plan": recorded}}}}}))
    build_kernels.build({"notebook": str(_notebook(tmp_path)), "export": str(exported),
                         "target": recorded["launches"][0]["target"], "out": str(tmp_path / "built")})
    kernels = replay.load_kernels(tmp_path / "built")
    fresh = torch.randn((200, 72), device="cuda").to(torch.float16)
    out = replay.launch(replay.prepare(recorded, (fresh,), kernels, torch.float16, (200, 72), 2**26))
    torch.cuda.synchronize()
    assert torch.equal(out, fresh * 2)
    forged = json.loads(json.dumps(recorded))
    forged["launches"][0]["arguments"][1]["descriptor"]["shape"] = [256, 72]
    with pytest.raises(replay.Unreplayable, match="reaches byte"):
        replay.prepare(forged, (fresh,), kernels, torch.float16, (200, 72), 2**26)


# ------------------------------------------------------------------------------------- today's helpers

def test_boxes_walk_one_block_at_a_time_past_the_edge():
    from course.days import tma as pictures

    assert pictures.boxes_along((192, 0), (64, 64), 150, axis=1) == [(192, 0), (192, 64), (192, 128)]
    assert pictures.boxes_along((0, 64), (64, 32), 100, axis=0) == [(0, 64), (64, 64)]
    figure = pictures.plot_boxes({"A": pictures.Boxes((200, 150), (64, 64), [(192, 128)])}, "edge")
    assert len(figure.axes) == 1 and len(figure.axes[0].patches) >= 4  # matrix, inside, outside strips, outline
    with pytest.raises(ValueError):
        pictures.plot_boxes({}, "nothing")


def test_instruction_counts_tell_tma_from_per_thread_copies():
    from course.days import tma as pictures

    ptx = "\n".join([
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd2, {%r3, %r4}], [%r5];",
        "@%p1 cp.async.cg.shared.global [ %r7 + 0 ], [ %rd8 + 0 ], 0x10, %r9;",
        "mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r10;",
        "ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];",
    ])
    counts = pictures.count_instructions(ptx)
    assert counts["TMA tile copies (cp.async.bulk.tensor)"] == 1
    assert counts["per-thread async copies (cp.async)"] == 1
    assert counts["barrier operations (mbarrier)"] == 1 and counts["plain global loads (ld.global)"] == 1
    assert pictures.compiled_ptx(object()) is None
