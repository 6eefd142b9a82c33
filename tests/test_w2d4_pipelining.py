"""Week 2 Day 4 (software pipelining): the fp16 matmul and shared-memory specs, the timeline model, the
sm_90 compile of the solution's kernel (shared memory and load instructions per stage count), and the
plain message for Triton's out-of-resources error. Nothing here is timed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch
from triton.runtime.errors import OutOfResources

from course import check, plot, spec
from course.days import pipelining
from course.device import DeviceInfo
from course.exercises import w2d4_pipelining as day4
from course.recorder import export, plan
from grader.flow.settings import Settings
from grader.intake.layout import SOLUTIONS, course_notebooks
from grader.judge import on_cpu
from grader.kernel_build.build_kernels import launch_key
from grader.run import recording

MATMUL, SMEM = day4.MATMUL, day4.SMEM
NOTEBOOK_PATH = SOLUTIONS / "week2" / "day4_pipelining.ipynb"
NOTEBOOK = next(nb for nb in course_notebooks() if nb.key == "week2/day4_pipelining")
HEADER = "import torch\nimport triton\nimport triton.language as tl\nimport course\n\nDEVICE = course.device.info()\n\n"


def _cells() -> dict[str, str]:
    nb = nbformat.read(str(NOTEBOOK_PATH), as_version=4)
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    """The solution's smem_bytes, kernel and wrapper, as a module (a file, so Triton can read the source)."""
    cells = _cells()
    path = tmp_path_factory.mktemp("day4") / "w2d4_solution.py"
    path.write_text(HEADER + cells["smem_bytes"] + "\n\n\n" + cells["matmul_kernel"] + "\n")
    module_spec = importlib.util.spec_from_file_location("w2d4_solution", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["w2d4_solution"] = module
    module_spec.loader.exec_module(module)
    return module


# --- the specs ---------------------------------------------------------------------------------------

def test_both_specs_belong_to_the_notebook():
    assert {s.id for s in spec.for_notebook("week2/day4_pipelining")} == {"w2d4.matmul_fp16", "w2d4.smem_bytes"}
    assert MATMUL.kind == "kernel" and MATMUL.library_name == "cuBLAS fp16" and MATMUL.precision == "fp16"
    assert MATMUL.output_dtype == torch.float16
    assert SMEM.kind == "host" and SMEM.thresholds == () and SMEM.accept is day4.accept_bytes


def test_smem_reference_on_hand_checked_tiles():
    assert SMEM.reference(SMEM.make_inputs((128, 128, 64, 3, 2), 0, "cpu")) == 3 * 32768
    assert SMEM.reference((16, 32, 64, 1, 4)) == (16 * 64 + 64 * 32) * 4
    assert SMEM.reference((64, 64, 32, 5, 1)) == 5 * 4096


def test_smem_inputs_are_plain_ints_from_the_shape_alone():
    first, second = SMEM.make_inputs((128, 64, 32, 4, 2), 1, "cpu"), SMEM.make_inputs((128, 64, 32, 4, 2), 9, "cuda")
    assert first == second == (128, 64, 32, 4, 2) and all(type(n) is int for n in first)


@pytest.mark.parametrize(("value", "said"), [
    (98304.0, "returned float"), (True, "returned bool"), (np.int64(98304), "returned int64"),
    (32768, "one stage's worth"), (49152, "elements, not bytes"), (98303, "expected 98304"),
])
def test_accept_bytes_refuses_wrong_values_and_types(value, said):
    passed, message = day4.accept_bytes(value, 98304, (128, 128, 64, 3, 2))
    assert not passed and said in message


def test_accept_bytes_takes_the_exact_int():
    assert day4.accept_bytes(98304, 98304, (128, 128, 64, 3, 2)) == (True, "98304 bytes")


def test_the_judge_checks_smem_values_and_refuses_an_int_subclass(tmp_path):
    class Anything(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    def judged(value):
        recorded = {"value": export.encode_answer(value, tmp_path, "v")}
        return on_cpu._host_check(SMEM, {"shape": [64, 256, 32, 4, 2], "seed": 3}, recorded, tmp_path, "cpu")

    assert judged(81920)[0]
    assert not judged(81921)[0]
    passed, message = judged(Anything(1))
    assert not passed and "Anything" in message


def test_drawn_smem_tiles_are_seeded_bounded_and_differ_between_runs():
    runs = {spec.judged_shapes(SMEM, "hidden", False, seed) for seed in range(20)}
    assert len(runs) > 1
    for seed in range(50):
        drawn = day4.draw_smem_hidden(random.Random(seed), True)
        assert drawn == day4.draw_smem_hidden(random.Random(seed), True) and len(drawn) == 3
        for bm, bn, bk, stages, nbytes in drawn:
            assert {bm, bn, bk} <= {16, 32, 64, 128, 256} and 1 <= stages <= 8 and nbytes in (1, 2, 4)


def test_a_table_of_the_visible_answers_fails_the_drawn_tiles():
    table = {shape: SMEM.reference(shape) for shape in SMEM.visible_shapes.cpu}
    failed = 0
    for seed in range(10):
        for shape in spec.judged_shapes(SMEM, "hidden", False, seed):
            failed += not day4.accept_bytes(table.get(shape, 0), SMEM.reference(shape), shape)[0]
    assert failed >= 10


def test_matmul_inputs_are_fp16_seeded_fresh_and_never_zero():
    a1, b1 = MATMUL.make_inputs((5, 7, 9), 1, "cpu")
    a2, _ = MATMUL.make_inputs((5, 7, 9), 1, "cpu")
    a3, _ = MATMUL.make_inputs((5, 7, 9), 2, "cpu")
    assert a1.dtype == b1.dtype == torch.float16 and a1.shape == (5, 9) and b1.shape == (9, 7)
    assert torch.equal(a1, a2) and not torch.equal(a1, a3)
    assert bool((a1 != 0).all()) and bool((b1 != 0).all())


def test_matmul_reference_on_a_hand_checked_case():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float16)
    b = torch.tensor([[0.5], [-1.0]], dtype=torch.float16)
    out = MATMUL.reference((a, b))
    assert out.dtype == torch.float64 and out.tolist() == [[-1.5], [-2.5]]
    assert MATMUL.output_shape((3, 4, 5)) == (3, 4) and MATMUL.flops((3, 4, 5)) == 120.0
    assert MATMUL.bytes_moved((3, 4, 5)) == 2.0 * (15 + 20 + 12)


def test_the_tolerance_takes_fp16_rounding_and_refuses_fp8_operands():
    a, b = MATMUL.make_inputs((64, 48, 512), 4, "cpu")
    reference = MATMUL.reference((a, b))
    assert check.compare(MATMUL, (64, 48, 512), reference.to(torch.float16), reference, "cpu").passed
    a8, b8 = (t.to(torch.float8_e4m3fn).double() for t in (a, b))
    fp8 = (a8 @ b8).to(torch.float16)
    result = check.compare(MATMUL, (64, 48, 512), fp8, reference, "cpu")
    assert not result.passed and "relative error" in result.message
    assert not check.compare(MATMUL, (64, 48, 512), reference.float(), reference, "cpu").passed  # fp32 out


def test_freivalds_passes_a_right_output_and_catches_half_of_k_or_nan():
    a, b = MATMUL.make_inputs((40, 30, 64), 7, "cpu")
    right = (a.double() @ b.double()).to(torch.float16)
    assert MATMUL.spot_error((a, b), right) <= MATMUL.tolerance
    half_k = (a[:, :32].double() @ b[:32].double()).to(torch.float16)
    assert MATMUL.spot_error((a, b), half_k) > 0.3
    broken = right.clone()
    broken[3, 4] = math.nan
    assert not MATMUL.spot_error((a, b), broken) <= MATMUL.tolerance


def test_the_baseline_was_taken_before_student_code(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a rebound torch.mm was called")

    monkeypatch.setattr(torch, "mm", refuse)
    a, b = MATMUL.make_inputs((4, 3, 2), 0, "cpu")
    assert day4.cublas_fp16((a, b)).dtype == torch.float16


@pytest.mark.parametrize("has_gpu", [False, True])
def test_drawn_matmul_shapes_are_seeded_and_bounded(has_gpu):
    limit = 3001 if has_gpu else 70
    for seed in range(100):
        drawn = day4.draw_matmul_hidden(random.Random(seed), has_gpu)
        assert drawn == day4.draw_matmul_hidden(random.Random(seed), has_gpu) and len(drawn) == 2
        assert all(1 <= n <= limit for shape in drawn for n in shape)


def test_shape_sets_cover_the_edges():
    for shapes in (MATMUL.visible_shapes.cpu + MATMUL.hidden_shapes.cpu,
                   MATMUL.visible_shapes.gpu + MATMUL.hidden_shapes.gpu):
        assert any(m == 1 for m, _, _ in shapes) and any(len(set(s)) == 3 for s in shapes)
        assert any(n % 16 for s in shapes for n in s)
    assert MATMUL.bench_shapes.cpu == ()
    squares = [s for s in MATMUL.bench_shapes.gpu if len(set(s)) == 1]
    assert sorted(s[0] for s in squares) == [4096, 8192] and len(MATMUL.bench_shapes.gpu) == 3


def test_thresholds_name_their_precision_and_grade_cells():
    vs_cublas, vs_reference = MATMUL.threshold("vs_cublas"), MATMUL.threshold("vs_reference")
    assert vs_cublas.kind == "vs_library" and vs_reference.kind == "vs_reference"
    assert vs_cublas.full_level == 0.60 and vs_reference.full_level == 0.70
    assert all("fp16" in t.precision and "fp32 accumulation" in t.precision for t in MATMUL.thresholds)
    assert MATMUL.grade_id(vs_cublas) == "perf_w2d4_matmul_fp16_vs_cublas"
    ids = set(_cells())
    assert {MATMUL.grade_id(t) for t in MATMUL.thresholds} | set(MATMUL.correctness_cells) <= ids
    assert set(SMEM.correctness_cells) <= ids


def test_only_the_matmul_is_timed_on_a_gpu():
    jobs = {job["spec"]: job for job in recording.kernel_calls(NOTEBOOK, Settings("gpu", "GPU"), 1, "alice")}
    assert jobs["w2d4.matmul_fp16"]["bench_shapes"] == [list(s) for s in MATMUL.bench_shapes.gpu]
    assert jobs["w2d4.smem_bytes"]["bench_shapes"] == []
    assert not any(c["set"] == "bench" for c in jobs["w2d4.smem_bytes"]["calls"])
    cpu_jobs = recording.kernel_calls(NOTEBOOK, Settings("cpu", "CPU"), 1, "alice")
    assert all(job["bench_shapes"] == [] for job in cpu_jobs)


# --- the solution --------------------------------------------------------------------------------------

def test_the_solution_passes_every_cpu_shape(solution):
    for fn, which_spec in ((solution.matmul, MATMUL), (solution.smem_bytes, SMEM)):
        for which in ("visible", "hidden"):
            results = check.check(which_spec, fn, which)
            assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    drawn = spec.judged_shapes(MATMUL, "hidden", False, 12345)[-2:]
    results = check.check(MATMUL, solution.matmul, drawn, seed=3)
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_the_solution_config_fits_an_h100(solution):
    config = solution.GPU_CONFIG
    need = solution.smem_bytes(config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"], 2)
    assert config["num_stages"] >= 2 and need <= pipelining.H100_SMEM_PER_PROGRAM


def test_a_stub_fails_without_raising():
    def stub(*args):
        raise NotImplementedError()

    for which_spec in (MATMUL, SMEM):
        [result] = check.check(which_spec, stub, [which_spec.visible_shapes.cpu[0]])
        assert not result.passed and "not implemented" in result.message


def test_the_quiz_answers_follow_from_the_model():
    namespace: dict = {}
    exec(_cells()["answers"], namespace)
    per_stage = SMEM.reference((128, 128, 64, 1, 2))
    fits = [s for s in range(1, 20) if s * per_stage <= pipelining.H100_SMEM_PER_PROGRAM]
    assert namespace["max_stages_128x128x64"] == max(fits) == 7
    three = SMEM.reference((128, 128, 64, 3, 2)) + pipelining.H100_RESERVED_PER_PROGRAM
    assert namespace["programs_per_sm_3_stages"] == pipelining.H100_SMEM_PER_SM // three == 2
    hidden = [s for s in range(1, 10) if pipelining.simulate(40, 3.0, 1.0, s).steady_iteration == 1.0]
    assert namespace["stages_to_hide_loads"] == min(hidden) == 4
    assert namespace["more_stages_always_faster"] is False


def test_the_solution_compiles_for_sm90_to_the_model_with_async_copies_when_pipelined(solution):
    """Triton 3.6 for an H100: shared memory = the formula, for every stage count; cp.async only from 2 stages on."""
    stages = (1, 2, 3, 4, 5, 8)
    made = pipelining.compile_matmul(solution.matmul_kernel, 128, 128, 64, 8, stages)
    for s in stages:
        assert isinstance(made[s], pipelining.Compiled), made[s]
        assert made[s].shared == SMEM.reference((128, 128, 64, s, 2)), (s, made[s])
        assert made[s].wgmma > 0
    assert made[1].cp_async == 0 and made[1].ld_global > 0
    assert all(made[s].cp_async > 0 for s in stages[1:])
    small = pipelining.compile_matmul(solution.matmul_kernel, 64, 64, 32, 4, (3,))[3]
    assert small.shared == SMEM.reference((64, 64, 32, 3, 2))


def test_on_an_a100_the_solution_needs_one_buffer_fewer_from_two_stages_on(solution):
    """What section 3 says of compute capability 8.0: mma copies operands to registers, freeing the buffer."""
    made = pipelining.compile_matmul(solution.matmul_kernel, 128, 128, 64, 8, (1, 3), arch=80)
    assert made[1].shared == SMEM.reference((128, 128, 64, 1, 2))
    assert made[3].shared == SMEM.reference((128, 128, 64, 2, 2)) and made[3].cp_async > 0
    assert made[1].wgmma == made[3].wgmma == 0


def test_compile_matmul_refuses_another_signature():
    def other(x_ptr, n, BLOCK: int) -> None:
        pass

    with pytest.raises(ValueError, match="not the course's"):
        pipelining.compile_matmul(other, 64, 64, 32, 4, (1,))


# --- the timeline model, the table and the error message -----------------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3, 4, 6])
@pytest.mark.parametrize(("load", "compute"), [(3.0, 1.0), (1.0, 2.0), (5.0, 0.5), (0.0, 1.0)])
def test_the_model_keeps_its_rules_and_reaches_its_steady_rate(stages, load, compute):
    schedule = pipelining.simulate(40, load, compute, stages)
    for k, ((issued, arrived), (start, end)) in enumerate(zip(schedule.loads, schedule.computes, strict=True)):
        assert arrived == issued + load and start >= arrived and end == start + compute
        if k:
            assert start >= schedule.computes[k - 1][1]  # one multiply at a time
        if k >= stages:
            assert issued >= schedule.computes[k - stages][1]  # its buffer is free
    for t in sorted({p for interval in schedule.loads for p in interval}):
        holding = sum(1 for (issued, _), (_, end) in zip(schedule.loads, schedule.computes, strict=True)
                      if issued <= t < end)
        assert holding <= stages
    ends = [end for _, end in schedule.computes]
    assert ends[-1] - ends[-1 - stages] == pytest.approx(stages * schedule.steady_iteration)


def test_one_stage_is_serial_and_enough_stages_hide_every_load():
    assert pipelining.simulate(10, 3.0, 1.0, 1).total == 10 * 4.0
    assert pipelining.simulate(10, 3.0, 1.0, 4).total == 3.0 + 10 * 1.0
    assert pipelining.simulate(10, 3.0, 1.0, 8).total == 3.0 + 10 * 1.0
    with pytest.raises(ValueError):
        pipelining.simulate(10, 3.0, 1.0, 0)


def test_the_timeline_renders_one_panel_per_schedule():
    figure = pipelining.timeline([pipelining.simulate(6, 3.0, 1.0, s) for s in (1, 3)], "t")
    assert len(figure.axes) == 2
    assert [t.get_text() for t in figure.axes[1].get_yticklabels()][-1] == "tensor cores"
    assert plot.to_png(figure).startswith(b"\x89PNG")
    with pytest.raises(ValueError):
        pipelining.timeline([])


def test_the_table_says_what_fits_an_h100():
    table = pipelining.shared_memory_table(lambda *tile: SMEM.reference(tile), 128, 128, 64, (3, 7, 8))
    rows = {int(line.split()[0]): line.split() for line in table.splitlines()[2:]}
    assert rows[3] == ["3", "98304", "yes", "2"]
    assert rows[7][2] == "yes" and rows[8][2:] == ["no", "0"]


def test_out_of_resources_becomes_a_plain_message():
    message = pipelining.explain(OutOfResources(262144, 232448, "shared memory"), 128, 128, 64, 8)
    assert "262144 bytes" in message and "232448" in message and "at most num_stages=7" in message
    tiny = pipelining.out_of_resources_message(300000, 100000, 256, 256, 256, 1)
    assert "not even one stage" in tiny
    assert pipelining.explain(OutOfResources(300, 255, "registers"), 128, 128, 64, 3).startswith("OutOfResources")
    assert pipelining.explain(ValueError("x"), 128, 128, 64, 3) == "ValueError: x"


# --- the judge's side: the builder keeps num_stages ----------------------------------------------------

def _recorded_launch(stages: int) -> dict:
    """A launch of the solution's kernel as course.recorder.plan records it for fp16 inputs of a 4096 problem."""
    names = pipelining.COURSE_ARGUMENTS
    constexprs = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    signature = {n: "constexpr" if n in constexprs else "*fp16" if n.endswith("_ptr") else "i32" for n in names}
    return {"kernel": "matmul_kernel", "signature": signature,
            "constexprs": [[[names.index(n)], {"int": v}] for n, v in constexprs.items()],
            "attrs": [[[i], [["tt.divisibility", 16]]] for i, n in enumerate(names) if n not in constexprs],
            "options": {"num_warps": 8, "num_stages": stages},
            "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}


def test_the_builder_compiles_each_recorded_stage_count_for_sm90(tmp_path):
    """The judge replays what grader.kernel_build.build_kernels compiled: a recorded num_stages must reach the TTGIR."""
    launches = {s: _recorded_launch(s) for s in (1, 4)}
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"w2d4.matmul_fp16": {"calls": {
        f"c{s}": {"plan": {"launches": [launch]}} for s, launch in launches.items()}}}}))
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"notebook": str(NOTEBOOK_PATH), "export": str(exported),
                                   "target": launches[1]["target"], "out": str(tmp_path / "built")}))
    done = subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(request)],
                          capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "0"}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    index = json.loads((tmp_path / "built" / "index.json").read_text())
    assert len(index) == 2 and all("error" not in entry for entry in index.values()), index
    ttgir = {s: (tmp_path / "built" / index[launch_key(launch)]["file"]).read_text() for s, launch in launches.items()}
    assert "async_copy_global_to_local" not in ttgir[1] and "async_copy_global_to_local" in ttgir[4]


@pytest.mark.gpu
def test_the_solution_replays_with_its_stage_count_on_fresh_inputs(tmp_path, solution):
    from grader.replay import gpu_replay as replay

    shape = (1000, 1030, 515)
    _, recorded = plan.record_call(solution.matmul, MATMUL.make_inputs(shape, 0, "cuda"))
    assert recorded["problems"] == [] and len(recorded["launches"]) == 1
    assert recorded["launches"][0]["options"]["num_stages"] == solution.GPU_CONFIG["num_stages"]
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {MATMUL.id: {"calls": {"c": {"plan": recorded}}}}}))
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"notebook": str(NOTEBOOK_PATH), "export": str(exported),
                                   "target": recorded["launches"][0]["target"], "out": str(tmp_path / "built")}))
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(request)], check=True,
                   env={**os.environ, "TRITON_INTERPRET": "0"})
    kernels = replay.load_kernels(tmp_path / "built")
    fresh = MATMUL.make_inputs(shape, 99, "cuda")
    out = replay.launch(replay.prepare(recorded, fresh, kernels, torch.float16, shape[:2], 2**30))
    torch.cuda.synchronize()
    assert check.relative_error(out, MATMUL.reference(fresh)) <= MATMUL.tolerance


@pytest.mark.parametrize(("shared_memory", "stages"), [(232448, 4), (166912, 3)])  # H100/H200 and A100 opt-in
def test_the_solution_picks_its_stages_by_the_devices_shared_memory(shared_memory, stages):
    assignment = re.search(r"^GPU_CONFIG = \{[^}]*\}", _cells()["matmul_kernel"], re.MULTILINE).group(0)
    namespace = {"DEVICE": DeviceInfo("cuda", "fake", shared_memory_per_block=shared_memory)}
    exec(assignment, namespace)
    config = namespace["GPU_CONFIG"]
    need = SMEM.reference((config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["num_stages"], 2))
    assert config["num_stages"] == stages and need <= shared_memory
