"""CUDA C through course.cuda: options, scalars, launch bounds, source constants, the builder and the judge.

CPU tests check everything that needs no GPU (and no CuPy). A test that compiles with NVRTC needs CuPy
and is skipped aloud without it; the replay tests need a GPU. ``test_every_course_cuda_source_compiles``
compiles every CUDA source the solution notebooks hand to ``course.cuda.compile`` with nvcc for sm_90.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from course import cuda
from course.recorder import plan, plan_format
from grader.kernel_build import build_cuda, build_kernels
from tests.conftest import HAS_GPU
from tests.helpers import module_from_source

REPO = Path(__file__).resolve().parent.parent
SCALE_SOURCE = r'''
extern "C" __global__ void scale(const float* x, float* out, int n, float factor) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = factor * x[i];
}
'''
CELL = f'''
import numpy as np
import torch
import course

SCALE_SOURCE = r"""{SCALE_SOURCE}"""
scale_module = course.cuda.compile(SCALE_SOURCE, options=("--use_fast_math",))
scale_kernel = scale_module.get_function("scale")


def scale(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel((course.cuda.cdiv(n, 128),), (128,), (x, out, np.int32(n), np.float32(3.0)))
    return out
'''


def _cupy_or_skip() -> None:
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed here: NVRTC compilation NOT RUN, not counted as passed")


def _module(tmp_path: Path, source: str, name: str):
    return module_from_source(tmp_path, source, name)


def _launch(source: str = SCALE_SOURCE, options: tuple[str, ...] = ("--use_fast_math",)) -> dict:
    digest = cuda.source_digest(source)
    return {"kernel": "scale", "cuda": {"source_sha256": digest, "options": list(options),
                                        "module": cuda.module_key(digest, options)},
            "grid": [8, 1, 1], "block": [128, 1, 1], "shared_mem": 0,
            "arguments": [{"pointer": {"buffer": "in0", "offset": 0}},
                          {"pointer": {"buffer": "alloc0", "offset": 0}},
                          {"scalar": {"type": "int32", "value": 1000}},
                          {"scalar": {"type": "float32", "value": "3.0"}}]}


@pytest.mark.parametrize("options", [(), ("--use_fast_math",), ("-std=c++17", "-DTILE=32", "--fmad=false"),
                                     ("--maxrregcount=64", "-lineinfo", "--define-macro=ROWS=8")])
def test_allowed_options_pass(options):
    assert cuda.check_options(options) == options


@pytest.mark.parametrize("options", [("-I/etc",), ("--include-path=/tmp",), ("-arch=sm_80",),
                                     ("--gpu-architecture=compute_90",), ("-DX=$(id)",), "--use_fast_math",
                                     ("--pre-include=/etc/passwd",), (3,), ("-D", "X")])
def test_other_options_are_refused(options):
    with pytest.raises(ValueError):
        cuda.check_options(options)


def test_scalars_carry_their_width_and_round_trip():
    assert cuda.encode_scalar(np.int32(-5)) == {"type": "int32", "value": -5}
    assert cuda.decode_scalar(cuda.encode_scalar(np.float32(0.1))) == ("float32", float(np.float32(0.1)))
    assert np.isnan(cuda.decode_scalar(cuda.encode_scalar(np.float64("nan")))[1])
    for value in (5, 2.0, True, "7", None):
        with pytest.raises(TypeError, match="not accepted"):
            cuda.encode_scalar(value)
    with pytest.raises(ValueError, match="does not fit"):
        cuda.decode_scalar({"type": "int32", "value": 2**31})
    with pytest.raises(ValueError):
        cuda.decode_scalar({"type": "void", "value": 0})


def test_packed_parameters_point_at_each_value():
    packed = cuda.pack([("pointer", 0x7F00_0000_1000), ("int32", -2), ("float32", 1.5)])
    values = [ctype.value for ctype in packed.values]
    assert values == [0x7F00_0000_1000, -2, 1.5] and packed.address != 0


def test_the_driver_receives_each_value_at_the_address_it_is_given(monkeypatch):
    """Function.launch hands cuLaunchKernel an array of pointers to the values (a fake driver reads them back)."""
    import ctypes
    from types import SimpleNamespace

    seen: dict = {}

    def launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        slots = (ctypes.c_void_p * 3).from_address(params)
        seen.update(function=function, dims=(gx, gy, gz, bx, by, bz), shared=shared, stream=stream, extra=extra,
                    values=(ctypes.c_uint64.from_address(slots[0]).value, ctypes.c_int32.from_address(slots[1]).value,
                            ctypes.c_float.from_address(slots[2]).value))

    attributes: list = []
    driver = SimpleNamespace(launchKernel=launch_kernel, funcSetAttribute=lambda *a: attributes.append(a))
    monkeypatch.setattr(cuda, "_cupy", lambda: SimpleNamespace(cuda=SimpleNamespace(driver=driver)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=77))
    function = cuda.Function(module=None, name="k", pointer=1234)
    replay = cuda.Replay(function, (32, 8, 1), 64 * 1024)
    replay[(3, 2, 1)](cuda.pack([("pointer", 0xDEAD_BEEF_00), ("int32", -7), ("float32", 0.25)]))
    assert seen == {"function": 1234, "dims": (3, 2, 1, 32, 8, 1), "shared": 64 * 1024, "stream": 77, "extra": 0,
                    "values": (0xDEAD_BEEF_00, -7, 0.25)}
    assert attributes == [(1234, 8, 64 * 1024)]  # the opt-in above 48 KiB, set once
    replay[(1, 1, 1)](cuda.pack([("pointer", 1), ("int32", 0), ("float32", 0.0)]))
    assert len(attributes) == 1


@pytest.mark.parametrize("grid, block, shared, problem", [
    ((4, 4), (32, 8), 0, None),
    (2**31 - 1, 1024, 48 * 1024, None),
    ((1, 65536), (32,), 0, "exceeds CUDA's limits"),
    ((1,), (32, 33), 0, "more than 1024 threads"),
    ((1,), (1, 1, 65), 0, "more than 1024 threads"),
    ((0,), (32,), 0, "positive ints"),
    ((1, 2, 3, 4), (32,), 0, "1 to 3 ints"),
    ((1,), (32,), -1, "outside 0 to"),
    ((1,), (32,), 300_000, "outside 0 to"),
    ((1,), (32.0,), 0, "positive ints"),
])
def test_launch_bounds(grid, block, shared, problem):
    found = cuda.launch_problem(grid, block, shared, 227 * 1024)
    assert found is None if problem is None else problem in found


def test_without_a_gpu_compile_checks_options_and_a_launch_says_it_needs_one():
    if HAS_GPU:
        pytest.skip("this machine has a GPU: the CPU behaviour is not what runs here")
    assert not cuda.available()
    module = cuda.compile(SCALE_SOURCE, options=("--use_fast_math",))
    assert module.kind == "" and module.key == cuda.module_key(cuda.source_digest(SCALE_SOURCE), ("--use_fast_math",))
    kernel = module.get_function("scale")
    x = torch.ones(4)
    with pytest.raises(cuda.NoGPU, match="needs a GPU"):
        kernel((1,), (4,), (x, x, np.int32(4), np.float32(2.0)))
    with pytest.raises(ValueError, match="not allowed"):
        cuda.compile(SCALE_SOURCE, options=("-I/tmp",))


def test_without_a_gpu_a_recorded_call_reports_the_missing_gpu(tmp_path):
    if HAS_GPU:
        pytest.skip("this machine has a GPU")
    cell = _module(tmp_path, CELL, "cpu_cuda_cell")
    _, recorded = plan.record_call(cell.scale, (torch.randn(100),))
    assert recorded["launches"] == [] and "NoGPU" in recorded["problems"][0]
    json.dumps(recorded)


def test_only_top_level_string_constants_are_sources():
    cells = [
        'A = r"""int a;"""\nB: str = "int b;"\nC = D = "int c;"\n',
        'E = "int " + "e;"\nF = f"int {1};"\nG = "".join(["int g;"])\n',
        'def f():\n    H = "int h;"\n    return H\n',
        'if True:\n    I = "int i;"\n',
        'J, K = "int j;", "int k;"\n',
        'this is not python',
        'L = "int" " l;"\n',  # adjacent literals are one constant
    ]
    found = set(build_cuda.string_constants(cells).values())
    assert found == {"int a;", "int b;", "int c;", "int l;"}


def test_the_builder_refuses_a_source_that_is_no_constant_of_the_notebook(tmp_path):
    constants = build_cuda.string_constants([f'SOURCE = r"""{SCALE_SOURCE}"""'])
    edited = SCALE_SOURCE.replace("factor * x[i]", "factor * x[i] + 0.0f")
    entry = build_cuda.build_launch(_launch(edited), constants, 90, tmp_path)
    assert "not a string constant at the top level" in entry["error"]
    malformed = _launch()
    malformed["cuda"]["options"] = ["-I/etc"]
    assert build_cuda.launch_key(malformed) == "cuda-malformed"
    assert "options the course does not allow" in build_cuda.build_launch(malformed, constants, 90, tmp_path)["error"]


def _notebook(tmp_path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "notebook.ipynb"
    nbformat.write(nb, str(path))
    return path


def _build(tmp_path: Path, plan_: dict, *cells: str) -> dict:
    exported = tmp_path / "export.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {"c": {"plan": plan_}}}}}))
    return build_kernels.build({"notebook": str(_notebook(tmp_path, *cells)), "export": str(exported),
                                "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
                                "out": str(tmp_path / "built")})


def test_the_builder_compiles_the_notebook_constant_for_sm90_without_a_gpu(tmp_path):
    _cupy_or_skip()
    index = _build(tmp_path, {"launches": [_launch(), _launch()]}, CELL)
    [(key, entry)] = index.items()
    assert key == cuda.module_key(cuda.source_digest(SCALE_SOURCE), ("--use_fast_math",))
    assert entry["cuda"] and entry["format"] in ("cubin", "ptx")
    image = (tmp_path / "built" / entry["file"]).read_bytes()
    assert image.startswith(b"\x7fELF") if entry["format"] == "cubin" else b".target sm_90" in image


def test_a_source_that_does_not_compile_is_the_students_error(tmp_path):
    _cupy_or_skip()
    broken = SCALE_SOURCE.replace("int i =", "int i = undefined_name +")
    index = _build(tmp_path, {"launches": [_launch(broken)]}, f'SOURCE = r"""{broken}"""')
    [entry] = index.values()
    assert "did not compile" in entry["error"] and "undefined_name" in entry["error"]


# ---------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_a_kernel_runs_on_torchs_stream_and_counts_as_a_launch(tmp_path):
    from course.guard import Guard

    cell = _module(tmp_path, CELL, "gpu_cuda_cell")
    x = torch.randn(1000, device="cuda")
    with Guard(poison=True) as guard:
        out = cell.scale(x)
    torch.cuda.synchronize()
    assert guard.launches == ["scale"]
    torch.testing.assert_close(out, 3 * x)
    with pytest.raises(TypeError, match="np.int32"):
        cell.scale_kernel((8,), (128,), (x, out, 1000, np.float32(3.0)))
    with pytest.raises(KeyError, match="no kernel named"):
        cell.scale_module.get_function("missing")


@pytest.mark.gpu
def test_a_recorded_cuda_plan_replays_from_the_built_module_on_fresh_inputs(tmp_path):
    from grader.replay import gpu_replay as replay

    cell = _module(tmp_path, CELL, "gpu_cuda_replay_cell")
    x = torch.randn(1000, device="cuda")
    _, recorded = plan.record_call(cell.scale, (x,))
    assert recorded["problems"] == [] and recorded["version"] == plan_format.PLAN_VERSION
    [launch] = recorded["launches"]
    assert launch["cuda"]["source_sha256"] == cuda.source_digest(SCALE_SOURCE) and launch["block"] == [128, 1, 1]
    assert [a.get("pointer", {}).get("buffer") for a in launch["arguments"]] == ["in0", "alloc0", None, None]
    _build(tmp_path, recorded, CELL)
    kernels = replay.load_kernels(tmp_path / "built")
    fresh = torch.randn(1000, device="cuda")
    out = replay.launch(replay.prepare(recorded, (fresh,), kernels, torch.float32, (1000,), 2**26))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, fresh * 3)

    def edited(change) -> dict:
        copy = json.loads(json.dumps(recorded))
        change(copy["launches"][0])
        return copy

    refusals = {
        "was not built": lambda launch: launch["cuda"].update(source_sha256="0" * 64),
        "1024 threads": lambda launch: launch.update(block=[2048, 1, 1]),
        "shared memory": lambda launch: launch.update(shared_mem=2**30),
        "no kernel named": lambda launch: launch.update(kernel="other"),
        "does not fit": lambda launch: launch["arguments"][2]["scalar"].update(value=2**40),
        "unknown buffer": lambda launch: launch["arguments"][0]["pointer"].update(buffer="secret"),
    }
    for reason, change in refusals.items():
        with pytest.raises(replay.Unreplayable, match=reason):
            replay.prepare(edited(change), (fresh,), kernels, torch.float32, (1000,), 2**26)


@pytest.mark.gpu
def test_a_cuda_launch_on_a_side_stream_is_not_replayable(tmp_path):
    cell = _module(tmp_path, CELL, "gpu_cuda_stream_cell")

    def on_side_stream(x):
        with torch.cuda.stream(torch.cuda.Stream()):
            return cell.scale(x)

    _, recorded = plan.record_call(on_side_stream, (torch.randn(100, device="cuda"),))
    assert any("another CUDA stream" in p for p in recorded["problems"])


@pytest.mark.gpu
def test_large_dynamic_shared_memory_is_opted_into():
    source = r'''
    extern "C" __global__ void fill(float* out) {
        extern __shared__ float buffer[];
        buffer[threadIdx.x] = threadIdx.x;
        __syncthreads();
        out[threadIdx.x] = buffer[blockDim.x - 1 - threadIdx.x];
    }
    '''
    kernel = cuda.compile(source).get_function("fill")
    out = torch.empty(256, device="cuda")
    kernel((1,), (256,), (out,), shared_mem=100 * 1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.arange(255, -1, -1, device="cuda", dtype=torch.float32))
