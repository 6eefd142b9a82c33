"""The CPU replay (grader.replay.replay_cpu): hand-made and recorded plans run through Triton's interpreter on the
judge's buffers, every malformed plan refused with its reason, the CPU judge's verdict from the replay, and a
replay that runs with torch refused."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import os
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch

from course import spec as specs
from course.recorder import plan, plan_format
from grader.flow.task import grader_environment
from grader.judge import on_cpu
from grader.kernel_build import build_kernels
from grader.replay import host_tensor, replay_cpu, replay_inputs
from grader.replay.plan_checks import Unreplayable

INTERPRETER_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="records an interpreted call; a GPU is visible")

SCALE_CELL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=mask) * alpha, mask=mask)
'''

SAXPY_CELL = '''
import torch
import triton
import triton.language as tl


@triton.jit
def saxpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    x = tl.load(x_ptr + i, mask=mask)
    y = tl.load(y_ptr + i, mask=mask)
    tl.store(out_ptr + i, alpha * x + y, mask=mask)


def saxpy(alpha, x, y):
    out = torch.empty(x.numel() + 4, device=x.device, dtype=x.dtype)[4:]  # a view 16 bytes into its buffer
    saxpy_kernel[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, y, out, x.numel(), alpha, BLOCK=32)
    return out
'''


F32 = host_tensor.DTYPES["float32"]


def _host(tensor, tmp_path, name="x"):
    """A torch tensor as the replay reads it: saved by the judge's side, read back as a HostTensor."""
    return host_tensor.read(tmp_path, replay_inputs.save_tensor(tensor, tmp_path, name))


def _kernels(tmp_path, cell=SCALE_CELL):
    return build_kernels.kernel_definitions([cell], tmp_path / "src", interpret=True)


def _scale_plan(n=40):
    """By hand: 2.5 * x into an allocation of n + 8 floats, written from byte 32 on (the output view)."""
    return {
        "version": plan_format.PLAN_VERSION, "problems": [], "inputs": [{"nbytes": 4 * n}],
        "allocations": [{"name": "alloc0", "nbytes": 4 * (n + 8), "dtype": "float32", "init": "empty"}],
        "launches": [{
            "kernel": "scale", "interpreted": True,
            "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32", "BLOCK": "constexpr"},
            "constexprs": [[[4], {"int": 16}]],
            "arguments": [{"name": "x_ptr", "pointer": {"buffer": "in0", "offset": 0}},
                          {"name": "out_ptr", "pointer": {"buffer": "alloc0", "offset": 32}},
                          {"name": "n", "scalar": {"int": n}}, {"name": "alpha", "scalar": {"float": "2.5"}}],
            "grid": [math.ceil(n / 16), 1, 1]}],
        "output": {"buffer": "alloc0", "offset": 32, "shape": [n], "stride": [1], "dtype": "float32"},
    }


def test_a_hand_made_plan_replays_on_the_judges_buffers(tmp_path):
    kernels, refused = _kernels(tmp_path)
    x = torch.randn(40)
    prepared, out = replay_cpu.prepare(_scale_plan(), (_host(x, tmp_path),), kernels, refused, F32, (40,))
    replay_cpu.replay(prepared)
    assert np.array_equal(out.values(), (x * 2.5).numpy())
    assert np.isnan(out.typed()[:8]).all()  # before the pointer: as the judge filled them


def _edit(path, value):
    def apply(p):
        target = p
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return apply


@pytest.mark.parametrize("edit, why", [
    (_edit(["version"], 99), "version 99"),
    (_edit(["inputs"], [{"nbytes": 4}]), "other inputs than this shape's"),
    (_edit(["allocations", 0, "nbytes"], 2**40), "allocates more than"),
    (_edit(["allocations", 0, "name"], "alloc7"), "allocations are malformed"),
    (_edit(["launches"], []), "no Triton or CUDA kernel was launched"),
    (_edit(["launches", 0, "kernel"], "elsewhere"), "kernel elsewhere is not a top-level @triton.jit function"),
    (_edit(["launches", 0, "interpreted"], False), "not launched through Triton's interpreter"),
    (_edit(["launches", 0, "grid"], [0, 1, 1]), "outside the judge's bounds"),
    (_edit(["launches", 0, "grid"], "callable"), "outside the judge's bounds"),
    (_edit(["launches", 0, "signature"], {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32"}),
     "recorded parameters of kernel scale are not those of its definition"),
    (_edit(["launches", 0, "constexprs"], []), "constexprs of kernel scale do not match its signature"),
    (_edit(["launches", 0, "constexprs"], [[[2], {"int": 16}]]), "constexprs of kernel scale do not match"),
    (_edit(["launches", 0, "arguments", 1, "pointer", "offset"], 4 * 48), "lies outside its buffer"),
    (_edit(["launches", 0, "arguments", 1, "pointer", "offset"], 34), "not at a whole fp32 element"),
    (_edit(["launches", 0, "arguments", 1, "pointer", "buffer"], "alloc3"), "unknown buffer"),
    (_edit(["launches", 0, "arguments", 2], {"name": "n", "pointer": {"buffer": "in0", "offset": 0}}),
     "argument n is not the i32 its kernel takes"),
    (_edit(["launches", 0, "signature", "x_ptr"], "*fp99"), "pointer to 'fp99' elements is not supported"),
    (_edit(["output", "buffer"], "in0"), "not a buffer the call allocated"),
    (_edit(["output", "shape"], [41]), "expected torch.float32"),
    (_edit(["problems"], ["the graded function called torch operation aten.mm"]), "aten.mm"),
])
def test_a_malformed_plan_is_refused_with_its_reason(tmp_path, edit, why):
    kernels, refused = _kernels(tmp_path)
    malformed = copy.deepcopy(_scale_plan())
    edit(malformed)
    with pytest.raises(Unreplayable, match=why):
        replay_cpu.prepare(malformed, (_host(torch.randn(40), tmp_path),), kernels, refused, F32, (40,))


def test_a_kernel_the_builder_refuses_is_not_replayed(tmp_path):
    cell = SCALE_CELL.replace("@triton.jit", "@triton.jit(debug=print)")
    kernels, refused = _kernels(tmp_path, cell)
    with pytest.raises(Unreplayable, match="kernel scale cannot be built"):
        replay_cpu.prepare(_scale_plan(), (_host(torch.randn(40), tmp_path),), kernels, refused, F32, (40,))


def _saxpy_module(tmp_path):
    path = tmp_path / "saxpy_cell.py"
    path.write_text(SAXPY_CELL)
    module_spec = importlib.util.spec_from_file_location("saxpy_cell", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["saxpy_cell"] = module
    module_spec.loader.exec_module(module)
    return module


def _saxpy_request(tmp_path):
    """A notebook with saxpy, its export (a good plan on visible-0, a pointer between two floats on hidden-0) and a
    replay request on secret seeds; returns (request, the calls as the judge holds them)."""
    saxpy = specs.get("w1d4.saxpy")
    module = _saxpy_module(tmp_path)
    _, recorded = plan.record_call(module.saxpy, saxpy.make_inputs((100, 1, 1), 0, "cpu"))
    assert not recorded["problems"] and recorded["launches"][0]["grid"] == [4, 1, 1]
    broken = copy.deepcopy(recorded)
    broken["launches"][0]["arguments"][2]["pointer"]["offset"] = 2  # inside the buffer, between two floats
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text(json.dumps(
        {"kernels": {saxpy.id: {"calls": {"visible-0": {"plan": recorded}, "hidden-0": {"plan": broken}}}}}))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# saxpy"), nbformat.v4.new_code_cell(SAXPY_CELL)]
    nbformat.write(notebook, str(tmp_path / "notebook.ipynb"))
    calls = [{"key": "visible-0", "set": "visible", "shape": [100, 1, 1], "seed": 123456789},
             {"key": "hidden-0", "set": "hidden", "shape": [100, 1, 1], "seed": 987654321}]
    request = {"notebook": str(tmp_path / "notebook.ipynb"), "export": str(export / "export.json"),
               "kernels": replay_inputs.with_inputs([{"spec": saxpy.id, "calls": calls}], tmp_path / "inputs"),
               "inputs": str(tmp_path / "inputs"), "out": str(tmp_path / "replayed")}
    return request, calls


@INTERPRETER_ONLY
def test_a_recorded_call_replays_on_secret_inputs_and_the_cpu_judge_checks_it(tmp_path):
    """Recorded on public seed 0 in the notebook's process; replayed on the judge's seed; judged outside."""
    saxpy = specs.get("w1d4.saxpy")
    request, calls = _saxpy_request(tmp_path)
    export = tmp_path / "export"
    replayed = replay_cpu.run(request)[saxpy.id]
    assert replayed["visible-0"] == {"output": f"{saxpy.id}-visible-0.npy"}
    assert "not at a whole fp32 element" in replayed["hidden-0"]["error"]
    out = torch.from_numpy(np.load(tmp_path / "replayed" / "outputs" / replayed["visible-0"]["output"]))
    assert torch.allclose(out.double(), saxpy.reference(saxpy.make_inputs((100, 1, 1), 123456789, "cpu")))

    job = {"export": str(export), "replayed": str(tmp_path / "replayed"), "notebook": str(tmp_path / "notebook.ipynb"),
           "replay_error": None, "kernels": [{"spec": saxpy.id, "calls": calls, "bench_shapes": []}]}
    sets = on_cpu.judge_cpu(job)["kernels"][saxpy.id]["sets"]
    assert sets["visible"]["passed"] and sets["visible"]["provisional"]
    assert not sets["hidden"]["passed"] and "not at a whole fp32 element" in sets["hidden"]["messages"][0]
    # Judged against the secret seed's reference: the same output under another seed fails.
    calls[0]["seed"] = 5
    assert not on_cpu.judge_cpu(job)["kernels"][saxpy.id]["sets"]["visible"]["passed"]


@INTERPRETER_ONLY
def test_the_replay_process_runs_with_torch_refused(tmp_path):
    """``python -m grader.replay.replay_cpu`` as the sandbox starts it: torch cannot be imported there, and the replay
    still gives the output the in-process replay gives."""
    saxpy = specs.get("w1d4.saxpy")
    request, _ = _saxpy_request(tmp_path)
    (tmp_path / "replay.json").write_text(json.dumps(request))
    done = subprocess.run([sys.executable, "-X", "importtime", "-P", "-m", "grader.replay.replay_cpu",
                           str(tmp_path / "replay.json")],
                          capture_output=True, text=True, cwd=tmp_path, env=grader_environment(dict(os.environ)))
    assert done.returncode == 0, done.stderr[-2000:]
    replayed = json.loads((tmp_path / "replayed" / "replayed.json").read_text())[saxpy.id]
    assert replayed["visible-0"] == {"output": f"{saxpy.id}-visible-0.npy"}
    out = torch.from_numpy(np.load(tmp_path / "replayed" / "outputs" / replayed["visible-0"]["output"]))
    assert torch.allclose(out.double(), saxpy.reference(saxpy.make_inputs((100, 1, 1), 123456789, "cpu")))
    assert "not at a whole fp32 element" in replayed["hidden-0"]["error"]
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    # A refused `import torch` is one line of microseconds; a real one imports hundreds of torch.* modules.
    assert "triton" in imported and not [name for name in imported if name.startswith("torch.")]


def test_a_replay_that_ended_early_says_so_for_each_call(tmp_path):
    saxpy = specs.get("w1d4.saxpy")
    export = tmp_path / "export"
    export.mkdir()
    (export / "export.json").write_text(json.dumps(
        {"kernels": {saxpy.id: {"calls": {"visible-0": {"plan": _scale_plan()}}}}}))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SCALE_CELL)]),
                   str(tmp_path / "notebook.ipynb"))
    calls = [{"key": "visible-0", "set": "visible", "shape": [100, 1, 1], "seed": 1}]
    job = {"export": str(export), "replayed": str(tmp_path / "nothing"), "notebook": str(tmp_path / "notebook.ipynb"),
           "replay_error": "the replay of the kernels in the interpreter ran past its 600 s limit",
           "kernels": [{"spec": saxpy.id, "calls": calls, "bench_shapes": []}]}
    visible = on_cpu.judge_cpu(job)["kernels"][saxpy.id]["sets"]["visible"]
    assert not visible["passed"] and "not replayed: the replay of the kernels" in visible["messages"][0]


def test_a_plan_of_an_unforeseen_shape_is_refused_not_a_crash_of_the_replay(tmp_path):
    kernels, refused = _kernels(tmp_path)
    saxpy = specs.get("w1d4.saxpy")
    odd = _scale_plan(100)
    odd["inputs"] = plan.describe_inputs(saxpy.make_inputs((100, 1, 1), 3, "cpu"))
    odd["launches"][0]["kernel"] = ["scale"]  # unhashable where a name belongs
    call = {"key": "visible-0", "shape": [100, 1, 1], "seed": 3}
    [job] = replay_inputs.with_inputs([{"spec": saxpy.id, "calls": [call]}], tmp_path / "inputs")
    result = replay_cpu._replay_call(saxpy.id, job["calls"][0], odd, kernels, refused, tmp_path / "inputs", tmp_path)
    assert result["error"].startswith("not replayable: the plan is malformed (TypeError")


def test_a_cpu_grading_replays_only_triton_kernels_calls_with_a_clean_plan():
    from grader.kernel_build.stage import _cpu_replays

    def calls(*keys):
        return [{"key": key, "set": "visible", "shape": [8, 1, 1], "seed": 1} for key in keys]

    jobs = [{"spec": "w1d1.median_time_ms", "calls": calls("visible-0")},  # a host function: its value is data
            {"spec": "w2d3.transpose_padded", "calls": calls("visible-0")},  # CUDA C: pending a GPU
            {"spec": "w1d4.saxpy", "calls": calls("visible-0", "visible-1", "visible-2", "visible-3")}]
    clean = {"launches": [{"kernel": "k"}], "problems": []}
    exported = {"kernels": {spec: {"calls": {"visible-0": {"plan": clean}}} for spec in
                            ("w1d1.median_time_ms", "w2d3.transpose_padded")}}
    exported["kernels"]["w1d4.saxpy"] = {"calls": {
        "visible-0": {"plan": clean}, "visible-1": {"plan": {**clean, "problems": ["aten.mm"]}},
        "visible-2": {"plan": {"launches": [], "problems": []}}}}  # visible-3: not recorded
    assert _cpu_replays(jobs, exported) == [{"spec": "w1d4.saxpy", "calls": calls("visible-0")}]
    assert _cpu_replays(jobs, {"kernels": ["not", "a", "dict"]}) == []
