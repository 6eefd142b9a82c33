"""Do kernels that take tensor descriptors (TMA) survive the judge's record, build and replay? (GPU only)

    PYTHONPATH=. python -m bench w2d5-tma-replay [OUT_DIR]

Run on a GPU of compute capability 9.0 or newer. This process defines the Week 2 Day 5 reference
solution from the solution notebook (its wrapper takes TMA where the matrices can be described and
the pointer kernel elsewhere) and two small kernels of its own: one that makes its descriptors on the
device (``tl.make_tensor_descriptor``, which needs global scratch) and one that writes into its
input through a descriptor. It records launch plans of calls on several shapes exactly as the
grader's sandbox does (``course.recorder.plan.record_call``), writes them as an export, and runs the builder
(``python -m grader.kernel_build.build_kernels``) on a notebook holding those cells. A fresh process
(``--replay OUT_DIR``) then loads the builds from TTGIR, replays every plan on fresh inputs drawn
from other seeds, compares each output with an fp64 reference, checks that forged plans are refused,
and times one replayed TMA plan against the same call made directly. Every check prints PASS or
FAIL; the exit status is 1 if any failed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.pop("COURSE_GRADING", None)

import nbformat  # noqa: E402
import torch  # noqa: E402

from course import device  # noqa: E402
from course.exercises import matmul  # noqa: E402
from course.exercises import w2d5_tma as day5  # noqa: E402
from course.recorder import plan
from grader.intake.layout import SOLUTIONS  # noqa: E402

SETUP = """import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor
from course import device
DEVICE = device.info()
HAS_TMA = DEVICE.has_gpu and torch.cuda.get_device_capability()[0] >= 9
"""
SOLUTION_CELLS = ("launch_config", "matmul_pointer_kernel", "matmul_tma_kernel", "matmul_tma_wrapper")

# Two kernels of this check's own: descriptors made on the device, and a descriptor store into an input.
EXTRA_CELL = '''
@triton.jit
def triple_device_descriptors(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    y_desc = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    y_desc.store([row, col], x_desc.load([row, col]) * 3)


def triple(x):
    y = torch.empty_like(x)
    M, N = x.shape
    triple_device_descriptors[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, y, M, N, BLOCK_M=64, BLOCK_N=64)
    return y


@triton.jit
def copy_then_clear(in_desc, out_desc, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    tile = in_desc.load([row, col])
    out_desc.store([row, col], tile)
    in_desc.store([row, col], tile * 0)


def copy_and_clear_input(x):
    y = torch.empty_like(x)
    M, N = x.shape
    in_desc = TensorDescriptor.from_tensor(x, [64, 64])
    out_desc = TensorDescriptor.from_tensor(y, [64, 64])
    copy_then_clear[(triton.cdiv(M, 64), triton.cdiv(N, 64))](in_desc, out_desc, BLOCK_M=64, BLOCK_N=64)
    return y
'''

# The matmul shapes recorded: three take the TMA path on a Hopper GPU, one (odd K) the pointer kernel.
MATMUL_SHAPES = {"tma_edges": (1000, 1032, 520), "tma_4096": (4096, 4096, 4096), "tma_narrow": (3001, 24, 64),
                 "fallback_odd_k": (129, 65, 1027)}


def _matrix(shape: tuple[int, int], seed: int) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(torch.float16)


def cases() -> dict[str, dict[str, Any]]:
    """Every call recorded: the function, its shape, and how its inputs and reference are made."""
    found: dict[str, dict[str, Any]] = {name: {"function": "matmul_tma", "kind": "matmul", "shape": list(shape)}
                                         for name, shape in MATMUL_SHAPES.items()}
    found["device_descriptors"] = {"function": "triple", "kind": "triple", "shape": [300, 200]}
    found["writes_its_input"] = {"function": "copy_and_clear_input", "kind": "copy", "shape": [256, 128]}
    return found


def make_inputs(case: dict[str, Any], seed: int) -> tuple[torch.Tensor, ...]:
    if case["kind"] == "matmul":
        return day5.make_inputs(tuple(case["shape"]), seed, "cuda")
    return (_matrix(tuple(case["shape"]), seed),)


def reference(case: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    if case["kind"] == "matmul":
        return matmul.reference(inputs)
    return inputs[0].double() * (3 if case["kind"] == "triple" else 1)


def output_shape(case: dict[str, Any]) -> tuple[int, ...]:
    shape = case["shape"]
    return (shape[0], shape[1])


def _cells() -> list[str]:
    notebook = nbformat.read(str(SOLUTIONS / "week2" / "day5_tma.ipynb"), as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells}
    return [by_id[name] for name in SOLUTION_CELLS] + [EXTRA_CELL]


def record(folder: Path) -> None:
    """Define the kernels, record every case's plan, write the export and the notebook the builder reads."""
    module_path = folder / "day5_cells.py"
    module_path.write_text(SETUP + "\n\n".join(_cells()) + "\n", encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location("day5_cells", module_path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    import triton

    # The sandbox's notebook would set this for a kernel that makes descriptors on the device.
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    calls = {}
    for name, case in cases().items():
        fn = getattr(module, case["function"])
        fn(*make_inputs(case, 1))  # warm-up: compile outside the recording, as the grader does
        torch.cuda.synchronize()
        _, recorded = plan.record_call(fn, make_inputs(case, 2))
        calls[name] = {"plan": recorded}
        kinds = sorted({k for launch in recorded["launches"] for a in launch["arguments"] for k in a if k != "name"})
        print(f"recorded {name}: {len(recorded['launches'])} launch(es), argument kinds {kinds}, "
              f"problems {recorded['problems']}")
    (folder / "export.json").write_text(json.dumps({"kernels": {"day5": {"calls": calls}}}), encoding="utf-8")
    (folder / "cases.json").write_text(json.dumps(cases()), encoding="utf-8")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in _cells()]
    nbformat.write(notebook, str(folder / "notebook.ipynb"))
    target = next(launch["target"] for c in calls.values() for launch in c["plan"]["launches"])
    request = {"notebook": str(folder / "notebook.ipynb"), "export": str(folder / "export.json"), "target": target,
               "out": str(folder / "built")}
    (folder / "build.json").write_text(json.dumps(request), encoding="utf-8")
    environment = {**os.environ, "TRITON_INTERPRET": "0"}
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(folder / "build.json")], check=True,
                   env=environment)


class Report:
    def __init__(self) -> None:
        self.failed = 0

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.failed += not passed
        print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")


def _forgeries(recorded: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Edited copies of a TMA plan, each with the reason the judge must give for refusing it."""
    def edited(change: Any) -> dict[str, Any]:
        copy = json.loads(json.dumps(recorded))
        change(copy["launches"][0]["arguments"])
        return copy

    def output_descriptor(arguments: list[dict[str, Any]]) -> dict[str, Any]:
        return next(a["descriptor"] for a in arguments if "descriptor" in a and
                    a["descriptor"]["pointer"]["buffer"].startswith("alloc"))

    first = lambda arguments: next(a for a in arguments if "descriptor" in a)  # noqa: E731
    return {
        "rows past the output": (edited(lambda a: output_descriptor(a)["shape"].__setitem__(0, 1 << 20)),
                                 "reaches byte"),
        "unaligned base": (edited(lambda a: first(a)["descriptor"]["pointer"].__setitem__("offset", 8)), "aligned"),
        "another block": (edited(lambda a: first(a)["descriptor"].__setitem__("block_shape", [256, 256])),
                          "its kernel was compiled for"),
        "a pointer for a descriptor": (edited(lambda a: a.__setitem__(0, {"name": "a_desc", "pointer": {
            "buffer": "in0", "offset": 0}})), "is not the tensordesc"),
        "an unknown buffer": (edited(lambda a: first(a)["descriptor"]["pointer"].__setitem__("buffer", "in7")),
                              "unknown buffer"),
    }


def replay_all(folder: Path) -> int:
    """The judge's side, in a process that never defined the kernels."""
    from course import bench
    from course.check import relative_error
    from grader.replay import gpu_replay as replay

    device.configure("gpu")
    report = Report()
    kernels = replay.load_kernels(folder / "built")
    report.check("builds", not kernels.errors, f"{len(kernels.compiled)} kernels compiled from TTGIR, "
                 f"errors {list(kernels.errors.values())[:2]}")
    exported = json.loads((folder / "export.json").read_text(encoding="utf-8"))["kernels"]["day5"]["calls"]
    all_cases = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    for name, case in all_cases.items():
        recorded = exported[name]["plan"]
        if case["function"] == "copy_and_clear_input":
            report.check(f"{name}: the recorder saw it", any("changed its input 0" in p for p in recorded["problems"]),
                         str(recorded["problems"])[:160])
            recorded = {**recorded, "problems": []}  # as a recorder patched in the sandbox would leave it
        inputs = make_inputs(case, 7)
        budget = 4 * sum(t.untyped_storage().nbytes() for t in inputs) + 64 * 2**20
        try:
            prepared = replay.prepare(recorded, inputs, kernels, torch.float16, output_shape(case), budget)
            out = replay.launch(prepared).clone()
            torch.cuda.synchronize()
        except Exception as error:  # reported as a failed check
            report.check(name, False, f"{type(error).__name__}: {error}")
            continue
        descriptors = sum("descriptor" in a for launch in recorded["launches"] for a in launch["arguments"])
        scratch = sum(entry[3] is not None for entry in prepared.launches)
        changed = plan.changed_inputs(make_inputs(case, 7), inputs)
        error = relative_error(out, reference(case, make_inputs(case, 7)))
        if case["function"] == "copy_and_clear_input":
            report.check(f"{name}: the judge sees it", changed == [0], f"changed inputs after the replay: {changed}")
            continue
        detail = f"relative error {error:.2e}, {descriptors} descriptor arguments, {scratch} launch(es) with scratch"
        report.check(name, error <= day5.SPEC.tolerance and not changed, detail)
        if name == "device_descriptors":
            report.check("device descriptors get scratch", scratch == 1, f"{scratch} launch(es) given scratch")
        if name.startswith("tma"):
            report.check(f"{name} took TMA", descriptors == 3, f"{descriptors} descriptor arguments")
    tma_plan = exported["tma_edges"]["plan"]
    tma_case = all_cases["tma_edges"]
    inputs = make_inputs(tma_case, 9)
    for label, (forged, why) in _forgeries(tma_plan).items():
        try:
            replay.prepare(forged, inputs, kernels, torch.float16, output_shape(tma_case), 2**30)
            report.check(f"forged plan refused: {label}", False, "prepared without complaint")
        except replay.Unreplayable as refusal:
            report.check(f"forged plan refused: {label}", why in str(refusal), str(refusal)[:160])

    # Timing: the judge fills each CUtensorMap in prepare (outside the timed region); Triton's own launcher
    # fills them at every launch. Informational: the two should be close for a large matmul.
    big = all_cases["tma_4096"]
    big_plan = exported["tma_4096"]["plan"]

    def prepared_args(i: int) -> tuple:
        fresh = make_inputs(big, 100 + i)
        return (replay.prepare(big_plan, fresh, kernels, torch.float16, output_shape(big), 2**31),)

    replayed = bench.time_calls(replay.launch, prepared_args, warmup=2).median_ms
    flops = day5.SPEC.flops(tuple(big["shape"]))
    cublas = bench.time_calls(lambda a, b: day5.SPEC.library((a, b)), lambda i: make_inputs(big, 200 + i),
                              warmup=2).median_ms
    print(f"INFO replayed TMA plan at 4096^3: {replayed:.3f} ms ({flops / replayed / 1e9:.0f} TFLOP/s); "
          f"cuBLAS fp16 {cublas:.3f} ms ({flops / cublas / 1e9:.0f} TFLOP/s); ratio {cublas / replayed:.2f} of cuBLAS")
    print(f"{'ALL PASSED' if not report.failed else f'{report.failed} FAILED'}")
    return 1 if report.failed else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--replay"]:
        return replay_all(Path(argv[1]))
    device.configure("gpu")
    if torch.cuda.get_device_capability()[0] < 9:
        print("FAIL: this check needs a GPU with TMA (compute capability 9.0 or newer)")
        return 1
    folder = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="tma-replay-"))
    folder.mkdir(parents=True, exist_ok=True)
    record(folder)
    replayed = subprocess.run([sys.executable, __file__, "--replay", str(folder)], check=False)
    return replayed.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
