"""CUDA C through course.cuda on a GPU: compile, record, build, replay in a fresh process; PASS/FAIL lines.

    python3 bench/cuda_replay_check.py [WORKDIR]

1. This process compiles a small kernel through ``course.cuda`` (NVRTC; the first compile and a cached
   one timed), launches it, and records a call with ``course.recorder.plan.record_call``; it writes the plan and
   a one-cell notebook holding the source as a top-level constant.
2. ``python -m grader.kernel_build.build_kernels`` builds it in a process of its own (as the grader's builder does).
3. A fresh process (``--judge``) loads the module, replays the plan on new inputs through
   ``grader.replay.gpu_replay``, compares with torch, times replay against a direct launch, and checks refusals.
4. Every CUDA source the solution notebooks hand to ``course.cuda.compile`` is compiled with NVRTC for
   this GPU, with its time per module.

Exit status 1 if any line says FAIL.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SOURCE = r'''
extern "C" __global__ void axpy(const float* x, const float* y, float* out, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = alpha * x[i] + y[i];
}
'''
CELL = f'''import numpy as np
import torch
import course

AXPY_SOURCE = r"""{SOURCE}"""
axpy_kernel = course.cuda.compile(AXPY_SOURCE).get_function("axpy")


def axpy(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    axpy_kernel((course.cuda.cdiv(n, 256),), (256,), (x, y, out, np.int32(n), np.float32(2.5)))
    return out
'''
N = 1 << 22
failures: list[str] = []


def report(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)


def record(work: Path) -> None:
    import torch

    import course
    from course import cuda
    from course.recorder import plan
    course.device.configure("gpu")
    started = time.perf_counter()
    module = cuda.compile(SOURCE)
    first = time.perf_counter() - started
    started = time.perf_counter()
    cuda.compile(SOURCE)
    cached = time.perf_counter() - started
    print(f"compile: NVRTC {module.compile_seconds:.3f} s for the module ({module.kind}); compile() {first:.3f} s "
          f"first, {cached * 1e3:.2f} ms cached")
    namespace: dict = {}
    exec(compile(CELL, "<cell>", "exec"), namespace)
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = namespace["axpy"](x, y)
    torch.cuda.synchronize()
    report(torch.allclose(out, 2.5 * x + y, rtol=1e-6, atol=1e-6), "direct launch through course.cuda matches torch")
    _, recorded = plan.record_call(namespace["axpy"], (x, y))
    report(recorded["problems"] == [] and len(recorded["launches"]) == 1, f"recorded plan: {recorded['problems']}")
    major, minor = torch.cuda.get_device_capability()
    _write_build_job(work, CELL, recorded, major * 10 + minor)
    # A second notebook whose graded call compiles a source built at run time: the builder must refuse it.
    runtime_cell = CELL.replace('AXPY_SOURCE = r"""', 'AXPY_SOURCE = "\\n" + r"""')
    namespace = {}
    exec(compile(runtime_cell, "<cell>", "exec"), namespace)
    _, refused = plan.record_call(namespace["axpy"], (x, y))
    _write_build_job(work / "refused", runtime_cell, refused, major * 10 + minor)


def _write_build_job(folder: Path, cell: str, recorded: dict, arch: int) -> None:
    """The recorded plan, a one-cell notebook and the builder's request, as the grader writes them."""
    import nbformat

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "export.json").write_text(json.dumps({"kernels": {"axpy": {"calls": {"c": {"plan": recorded}}}}}))
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)]), str(folder / "notebook.ipynb"))
    (folder / "build.json").write_text(json.dumps({
        "notebook": str(folder / "notebook.ipynb"), "export": str(folder / "export.json"),
        "target": {"backend": "cuda", "arch": arch, "warp_size": 32}, "out": str(folder / "built")}))


def build(folder: Path) -> dict:
    started = time.perf_counter()
    ran = subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(folder / "build.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    report(ran.returncode == 0, f"builder process ({seconds:.2f} s wall) {ran.stderr[-800:]}")
    index = json.loads((folder / "built" / "index.json").read_text()) if (folder / "built" / "index.json").exists() \
        else {}
    for key, entry in index.items():
        print(f"  built {key}: {json.dumps(entry)[:300]}")
    return index


def judge(work: Path) -> None:
    """The fresh process: load, replay on new inputs, time, and check refusals."""
    import torch

    import course
    from course import bench
    from grader.replay import gpu_replay as replay

    course.device.configure("gpu")
    recorded = json.loads((work / "export.json").read_text())["kernels"]["axpy"]["calls"]["c"]["plan"]
    started = time.perf_counter()
    kernels = replay.load_kernels(work / "built")
    print(f"judge: loaded {len(kernels.compiled)} module(s) in {time.perf_counter() - started:.3f} s; "
          f"errors {kernels.errors}")
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    prepared = replay.prepare(recorded, (x, y), kernels, torch.float32, (N,), 2**30)
    out = replay.launch(prepared)
    torch.cuda.synchronize()
    report(torch.allclose(out, 2.5 * x + y, rtol=1e-6, atol=1e-6), "replay in a fresh process on new inputs")

    def make(i: int) -> tuple:
        return (replay.prepare(recorded, (x, y), kernels, torch.float32, (N,), 2**30),)

    replayed = bench.time_calls(replay.launch, make, warmup=3).median_ms
    direct = bench.time_calls(lambda a, b: torch.add(b, a, alpha=2.5), args=(x, y), warmup=3).median_ms
    print(f"timing: replayed axpy {replayed * 1e3:.1f} us, torch.add(alpha=2.5) {direct * 1e3:.1f} us "
          f"(ratio {replayed / direct:.2f}; about 1 expected for this memory-bound kernel)")
    edited = json.loads(json.dumps(recorded))
    edited["launches"][0]["block"] = [4096, 1, 1]
    try:
        replay.prepare(edited, (x, y), kernels, torch.float32, (N,), 2**30)
        report(False, "a block of 4096 threads was accepted")
    except replay.Unreplayable as error:
        report("1024 threads" in str(error), f"a block of 4096 threads refused: {error}")
    edited = json.loads(json.dumps(recorded))
    edited["launches"][0]["cuda"]["source_sha256"] = "0" * 64
    try:
        replay.prepare(edited, (x, y), kernels, torch.float32, (N,), 2**30)
        report(False, "a launch of an unbuilt source was accepted")
    except replay.Unreplayable as error:
        report("not built" in str(error), f"an unbuilt source refused: {error}")
    sys.exit(1 if failures else 0)


def course_sources() -> None:
    """NVRTC's time for every CUDA module of the solution notebooks (a fresh cache: each compiled once)."""
    import torch

    import course
    from course import cuda
    from tests.test_cuda import _sources_handed_to_compile

    course.device.configure("gpu")
    major, minor = torch.cuda.get_device_capability()
    for notebook in sorted((REPO / "solutions").rglob("*.ipynb")):
        for name, source, options in _sources_handed_to_compile(notebook):
            started = time.perf_counter()
            try:
                image, kind = cuda.nvrtc_compile(source, options, major * 10 + minor)
                report(True, f"NVRTC {notebook.relative_to(REPO)} {name}: {time.perf_counter() - started:.3f} s, "
                             f"{len(image)} bytes of {kind}")
            except Exception as error:
                report(False, f"NVRTC {notebook.relative_to(REPO)} {name}: {error}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--judge"]:
        judge(Path(argv[1]))
    work = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="cuda-replay-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"work folder {work}")
    record(work)
    index = build(work)
    report(len(index) == 1 and all(e.get("cuda") for e in index.values()), "the builder compiled one CUDA module")
    refused = build(work / "refused")
    report(any("not a string constant" in str(e.get("error")) for e in refused.values()),
           "the builder refused a source built at run time")
    ran = subprocess.run([sys.executable, __file__, "--judge", str(work)], cwd=REPO, text=True, timeout=600)
    report(ran.returncode == 0, "the fresh judge process")
    course_sources()
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
