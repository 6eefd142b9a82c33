"""The judge's pieces: launch plans recorded as data, kernels built from source, replay, answers as data."""

import dataclasses
import json

import nbformat
import pytest
import torch

from course import device
from course.recorder import export, plan
from grader.judge import exported as judge_export
from grader.judge import on_gpu, parts
from grader.kernel_build import build_kernels
from tests.conftest import HAS_GPU
from tests.helpers import module_from_source

KERNEL_CELL = '''
import torch
import triton
import triton.language as tl

BLOCK = 32


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, 3.0, BLOCK_SIZE=BLOCK)
    return out
'''


def _module(tmp_path, source, name="notebook_cell"):
    return module_from_source(tmp_path, source, name)


def _x():
    return (torch.randn(1000, device=device.info().torch_device),)


def test_an_honest_call_records_one_launch_into_its_own_allocation(tmp_path):
    cell = _module(tmp_path, KERNEL_CELL)
    out, recorded = plan.record_call(cell.scale, _x())
    assert recorded["problems"] == [] and len(recorded["launches"]) == 1
    assert recorded["output"]["buffer"] == "alloc0" and recorded["allocations"][0]["init"] == "empty"
    pointers = [a["pointer"]["buffer"] for a in recorded["launches"][0]["arguments"] if "pointer" in a]
    assert pointers == ["in0", "alloc0"]
    json.dumps(recorded)  # plain data


@pytest.mark.parametrize("body, problem", [
    ("return x * 3", "aten.mul"),
    ("return x[:10]", "an input"),
    ("return torch.from_numpy(x.cpu().numpy() * 3)", "aten._to_copy" if HAS_GPU else "not allocated inside"),
    ("return 3", "returned int"),
])
def test_anything_but_allocations_views_and_launches_is_a_problem(body, problem):
    def cheat(x):
        return eval(body.removeprefix("return "), {"torch": torch, "x": x})

    _, recorded = plan.record_call(cheat, _x())
    assert any(problem in p for p in recorded["problems"]), recorded["problems"]


def test_a_tensor_made_outside_torch_is_not_replayable():
    import numpy as np

    def from_numpy(x):
        return torch.from_numpy(np.ones(x.shape[0], dtype=np.float32))

    if HAS_GPU:
        pytest.skip("a host tensor is caught by the device check on a GPU")
    _, recorded = plan.record_call(from_numpy, _x())
    assert any("not allocated inside the call" in p for p in recorded["problems"]), recorded["problems"]


def test_a_subclass_of_int_is_not_exported_as_an_int(tmp_path):
    class Sneaky(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    assert "unsupported" in export.encode_answer(Sneaky(3), tmp_path, "x")
    verdicts = judge_export.run_tests(
        [{"grade_id": "t", "source": "assert isinstance(x, int), 'x should be an int'\nassert x == 5"}],
        {"x": export.encode_answer(Sneaky(3), tmp_path, "x")}, tmp_path)
    assert verdicts["t"]["passed"] is False
    assert verdicts["t"]["message"].startswith("unsupported answer: x: a value of type") and "Sneaky" in \
        verdicts["t"]["message"]


def test_answers_round_trip_as_plain_data(tmp_path):
    value = {"a": [1, 2.5, True, None, "s"], "t": (1, 2)}
    encoded = export.encode_answer(value, tmp_path, "v")
    assert judge_export.decode_answer(json.loads(json.dumps(encoded)), tmp_path) == value
    verdicts = judge_export.run_tests([{"grade_id": "t", "source": "assert missing == 1"}], {}, tmp_path)
    assert "missing is not defined" in verdicts["t"]["message"]


def _notebook(tmp_path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / "notebook.ipynb"
    nbformat.write(nb, str(path))
    return path


@pytest.mark.parametrize("source, why", [
    ("@(lambda f: triton.jit(f))\ndef k(x):\n    pass", "is not triton.jit"),
    ("@triton.jit\ndef k(x, y=__import__('os').system('true')):\n    pass", "not a plain literal"),
    ("@triton.jit(do_not_specialize=open('/etc/passwd').read())\ndef k(x):\n    pass", "not plain literals"),
    ("@triton.jit\ndef k(x: print('hi')):\n    pass", "not a Triton type"),
])
def test_the_builder_refuses_definitions_that_would_run_code(tmp_path, source, why):
    kernels, refused = build_kernels.kernel_definitions([source], tmp_path / "src")
    assert "k" not in kernels and why in refused["k"]


def test_the_builder_defines_only_top_level_kernels_and_constants(tmp_path):
    cells = [KERNEL_CELL, "exec('@triton.jit\\ndef hidden(x):\\n    pass')", "open('/tmp/side-effect', 'w')"]
    kernels, refused = build_kernels.kernel_definitions(cells, tmp_path / "src")
    assert set(kernels) == {"scale_kernel"} and refused == {}


def test_the_builder_compiles_a_recorded_specialisation_for_sm90_without_a_gpu(tmp_path):
    launch = {"kernel": "scale_kernel",
              "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "factor": "fp32",
                            "BLOCK_SIZE": "constexpr"},
              "constexprs": [[[4], {"int": 32}]], "attrs": [[[0], [["tt.divisibility", 16]]]],
              "options": {"num_warps": 4, "num_stages": 3}, "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {"c": {"plan": {"launches": [launch]}}}}}}))
    index = build_kernels.build({"notebook": str(_notebook(tmp_path, KERNEL_CELL)), "export": str(exported),
                                 "target": launch["target"], "out": str(tmp_path / "built")})
    [entry] = index.values()
    assert "ttg.num-warps" in (tmp_path / "built" / entry["file"]).read_text()


@pytest.mark.gpu
def test_a_recorded_plan_replays_in_another_build_on_fresh_inputs(tmp_path):
    from grader.replay import gpu_replay as replay

    cell = _module(tmp_path, KERNEL_CELL, "gpu_cell")
    x = torch.randn(1000, device="cuda")
    _, recorded = plan.record_call(cell.scale, (x,))
    assert recorded["problems"] == []
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {"c": {"plan": recorded}}}}}))
    target = recorded["launches"][0]["target"]
    build_kernels.build({"notebook": str(_notebook(tmp_path, KERNEL_CELL)), "export": str(exported),
                         "target": target, "out": str(tmp_path / "built")})
    kernels = replay.load_kernels(tmp_path / "built")
    fresh = torch.randn(1000, device="cuda")
    prepared = replay.prepare(recorded, (fresh,), kernels, torch.float32, (1000,), 2**26)
    out = replay.launch(prepared)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, fresh * 3)
    edited = json.loads(json.dumps(recorded))
    edited["launches"][0]["ttgir_digest"] = "0" * 64
    with pytest.raises(replay.Unreplayable, match="differs from the notebook"):
        replay.prepare(edited, (fresh,), kernels, torch.float32, (1000,), 2**26)


def test_an_answer_whose_array_file_cannot_be_loaded_fails_only_its_own_item(tmp_path):
    import numpy as np

    np.save(tmp_path / "0.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)  # a pickle
    answers = {"table": {"array": "0.npy"}, "count": {"value": 3}}
    verdicts = judge_export.run_tests([{"grade_id": "t_table", "source": "assert table[0] == 1"},
                                {"grade_id": "t_count", "source": "assert count == 3"}], answers, tmp_path)
    assert verdicts["t_table"]["passed"] is False
    assert verdicts["t_table"]["message"].startswith("unsupported answer: table: its array file cannot be read")
    assert verdicts["t_count"] == {"passed": True, "message": ""}


def _export_with(tmp_path, monkeypatch, namespace, plans):
    monkeypatch.setattr(export, "_record_kernel", lambda ns, job, device, outputs: plans[job["spec"]])
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"out": str(tmp_path / "export"), "device": "cpu", "answers": sorted(namespace),
                                   "kernels": [{"spec": spec} for spec in plans]}))
    export.write(namespace, str(request))
    return judge_export.read_export(tmp_path / "export")


def test_an_answer_or_plan_that_cannot_be_encoded_loses_only_itself(tmp_path, monkeypatch):
    plans = {"a": {"calls": {"visible-0": {"plan": {"scalar": 10**5000}}}}, "b": {"calls": {"visible-0": {"plan": {}}}}}
    exported = _export_with(tmp_path, monkeypatch, {"huge": 10**5000, "small": 7}, plans)
    assert exported["answers"]["small"] == {"value": 7}
    assert "more than 4300 digits" in exported["answers"]["huge"]["unsupported"]
    assert exported["kernels"]["a"]["error"].startswith("the launch plan could not be exported (ValueError")
    assert exported["kernels"]["b"] == plans["b"]
    verdicts = judge_export.run_tests([{"grade_id": "t_huge", "source": "assert huge > 0"},
                                {"grade_id": "t_small", "source": "assert small == 7"}], exported["answers"],
                               tmp_path / "export" / "arrays")
    assert verdicts["t_huge"]["message"].startswith("unsupported answer: huge: an int of more than 4300 digits")
    assert verdicts["t_small"]["passed"]


def test_an_export_with_an_int_python_will_not_read_keeps_every_other_answer(tmp_path):
    # A notebook may lift Python's digit limit and write the export itself: the judge reads it anyway.
    digits = "9" * 5001
    (tmp_path / "export.json").write_text('{"answers": {"huge": {"value": ' + digits + '}, "small": {"value": 7}}}')
    exported = judge_export.read_export(tmp_path)
    assert exported["answers"]["small"] == {"value": 7}
    verdicts = judge_export.run_tests([{"grade_id": "t", "source": "assert huge"}], exported["answers"], tmp_path)
    assert verdicts["t"]["message"] == "unsupported answer: huge: an int of 5001 digits"


def test_the_student_the_reference_and_the_library_are_timed_in_the_same_rounds(monkeypatch):
    from course import bench
    from course import spec as specs
    from grader.replay import gpu_replay as replay

    spec, asked = specs.get("w1d7.matmul_fp32"), []

    def interleaved(entries, drop_on, **rules):
        asked.append((len(entries), drop_on))
        entries[0].after((), None, 0)  # the student's first timed output: checked, and wrong here
        return [bench.Timing([2.0, 2.0]), replay.Unreplayable("no room"), bench.Timing([1.0, 3.0])]

    monkeypatch.setattr(bench, "time_interleaved", interleaved)
    spec = dataclasses.replace(spec, spot_error=lambda inputs, out: 1.0, make_inputs=lambda shape, seed, on: ())
    timed, rounds = on_gpu._time_row(spec, (64, 64, 64), "student plan", None, "reference plan", None, 5, None)
    assert asked == [(3, (replay.Unreplayable, ValueError))]  # one timing of all three
    assert rounds == 2  # the library's timed calls
    assert timed["student"] == (None, "timed call 0 returned a wrong result (relative error 1.00e+00)")
    assert timed["reference"] == (None, "not timed: no room")
    assert timed["library"] == (2.0, None)


def test_without_a_reference_plan_the_student_is_timed_beside_the_library_alone(monkeypatch):
    from course import bench
    from course import spec as specs

    spec = specs.get("w1d7.matmul_fp32")
    monkeypatch.setattr(bench, "time_interleaved", lambda entries, **_: [bench.Timing([0.5] * len(entries))] *
                        len(entries))
    timed, _ = on_gpu._time_row(spec, (64, 64, 64), "student plan", None, None, None, 5, None)
    assert set(timed) == {"student", "library"} and timed["student"] == (0.5, None)


def test_a_library_call_that_fails_is_the_graders_fault_not_the_students(monkeypatch):
    from course import bench
    from course import spec as specs

    spec = specs.get("w1d7.matmul_fp32")
    monkeypatch.setattr(bench, "time_interleaved", lambda entries, **_: [bench.Timing([1.0]), ValueError("cuBLAS")])
    with pytest.raises(ValueError, match="cuBLAS"):
        on_gpu._time_row(spec, (64, 64, 64), "student plan", None, None, None, 5, None)


def test_the_text_a_students_values_put_into_a_message_is_capped(tmp_path):
    # A test that quotes the answer, and a student whose answer is a whole file: the message keeps its start only.
    payload = "x" * 100_000
    answers = {"label": {"value": payload}, "name": {"value": 1}}
    verdicts = judge_export.run_tests([{"grade_id": "t_quote", "source": "assert label == 'fast', f'got {label!r}'"},
                                {"grade_id": "t_raise", "source": "raise ValueError(label)"},
                                {"grade_id": "t_name", "source": f"{'y' * 5000} + name"}], answers, tmp_path)
    for grade_id in ("t_quote", "t_raise"):
        message = verdicts[grade_id]["message"]
        assert not verdicts[grade_id]["passed"] and message.startswith(("got 'xxx", "ValueError: xxx"))
        assert len(message) <= parts.MESSAGE_CHARS + 40 and "more characters cut" in message
    assert len(verdicts["t_name"]["message"]) < 200
