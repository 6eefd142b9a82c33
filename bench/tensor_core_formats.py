"""Week 2 Day 6 measurements (tensor cores): run on a GPU machine, from the repository root.

    python -m bench w2d6-tensor-core-formats          # about 2 minutes on an H100; JSON to $OUT (or the current folder)

Takes the solution notebook's kernel (``matmul_kernel``, ``launch_matmul``, ``tiles_for``) and measures:

1. speed by format at 4096^3: the kernel and cuBLAS in fp32 (ieee), tf32, fp16 and bf16, beside the
   datasheet peaks (the notebook's "What each format buys" table);
2. the graded benchmark: ``matmul_fp16`` and ``matmul_bf16`` against cuBLAS (reduced-precision
   reductions off) on the specs' benchmark shapes, with the course's harness: the basis of the
   PROVISIONAL ``vs_cublas`` bands;
3. a few other tile configurations for fp16, against cuBLAS in the same loop, to check the solution's;
4. the relative error against fp64 of C = A @ B from fp32 data, computed five ways (fp32 ieee, tf32,
   fp16, bf16, fp16 with an fp16 accumulator) for K from 16 to 2^20 (the notebook's section 4);
5. the claim the hidden set rests on: at the hidden shape (67, 45, 2^20 + 3) an fp16 accumulator fails
   the 1e-2 tolerance and the fp32 one passes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import torch
import triton
import triton.language as tl

import course
from course import bench, peaks
from course.check import relative_error
from course.days.formats import FORMATS
from course.exercises import matmul
from course.exercises import w2d6_tensor_cores as day6
from course.exercises.matmul_fp32 import cublas_fp32

REPO = Path(__file__).resolve().parent.parent
SIZE = 4096
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); the first is the solution's.
FP16_CONFIGS = ((128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 128, 32, 4, 4),
                (64, 128, 64, 4, 4), (256, 128, 64, 8, 3))
WAYS = ("fp32 (ieee)", "tf32", "fp16", "bf16", "fp16, fp16 accumulator")


def solution() -> ModuleType:
    """The solution notebook's setup, tiles and kernel cells as a module (Triton needs its kernels in a file)."""
    nb = nbformat.read(str(REPO / "solutions/week2/day6_tensor_cores.ipynb"), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    source = "\n\n".join(cells[name] for name in ("parameters", "setup", "tiles", "matmul_kernel"))
    path = Path(tempfile.mkdtemp()) / "day6_solution.py"
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location("day6_solution", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def tflops(ms: float, m: int = SIZE, n: int = SIZE, k: int = SIZE) -> float:
    return 2.0 * m * n * k / ms / 1e9


def median_ms(fn: Any, *args: Any) -> float:
    return bench.time_calls(fn, args=args, min_seconds=0.2, max_seconds=1.0).median_ms


def cublas_tf32(inputs: tuple) -> torch.Tensor:
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return torch.mm(*inputs)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def speed_by_format(sol: ModuleType) -> list[dict[str, Any]]:
    datasheet = peaks.datasheet_peaks(course.device.info().name)
    rows = []
    a32, b32 = torch.randn(SIZE, SIZE, device="cuda"), torch.randn(SIZE, SIZE, device="cuda")
    for label, dtype, precision, key, library in (
            ("fp32 (ieee)", torch.float32, "ieee", "fp32", cublas_fp32),
            ("tf32", torch.float32, "tf32", "tf32", cublas_tf32),
            ("fp16", torch.float16, "ieee", "fp16", day6.cublas_fp16),
            ("bf16", torch.bfloat16, "ieee", "bf16", day6.cublas_bf16)):
        a, b = a32.to(dtype), b32.to(dtype)
        ours = tflops(median_ms(sol.launch_matmul, a, b, dtype, precision))
        theirs = tflops(median_ms(lambda x, y, f=library: f((x, y)), a, b))
        rows.append({"format": label, "kernel_tflops": ours, "cublas_tflops": theirs,
                     "datasheet_tflops": datasheet.tflops(key) if datasheet else None,
                     "datasheet_gpu": datasheet.gpu if datasheet else None})
    return rows


def graded_benchmark(sol: ModuleType) -> dict[str, Any]:
    found = {}
    for exercise, fn in ((day6.FP16, sol.matmul_fp16), (day6.BF16, sol.matmul_bf16)):
        report = bench.measure(exercise, fn)
        found[exercise.id] = {"geomean_vs_cublas": report.geomean_vs_library,
                              "rows": [{"shape": list(r.shape), "kernel_tflops": r.student_gflops / 1e3,
                                        "cublas_tflops": r.library_gflops / 1e3, "ratio": r.vs_library,
                                        "error": r.error} for r in report.rows]}
        print(report.table())
    return found


def tile_sweep(sol: ModuleType) -> list[dict[str, Any]]:
    rows = []
    for size in (4096, 8192):
        a = torch.randn(size, size, device="cuda").half()
        b = torch.randn(size, size, device="cuda").half()
        exact = a.double() @ b.double()
        cublas_ms = median_ms(lambda x, y: day6.cublas_fp16((x, y)), a, b)
        for block_m, block_n, block_k, warps, stages in FP16_CONFIGS:
            tiles = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)

            def launch(x: torch.Tensor, y: torch.Tensor, t: dict = tiles) -> torch.Tensor:
                c = torch.empty((x.shape[0], y.shape[1]), device="cuda", dtype=torch.float16)
                grid = (triton.cdiv(x.shape[0], t["BLOCK_M"]), triton.cdiv(y.shape[1], t["BLOCK_N"]))
                sol.matmul_kernel[grid](x, y, c, x.shape[0], y.shape[1], x.shape[1], x.stride(0), x.stride(1),
                                        y.stride(0), y.stride(1), c.stride(0), c.stride(1),
                                        INPUT_PRECISION="ieee", ACC_DTYPE=tl.float32, **t)
                return c

            row = {"size": size, "config": [block_m, block_n, block_k, warps, stages]}
            try:
                error = relative_error(launch(a, b), exact)
                ms = median_ms(launch, a, b)
                row.update(tflops=tflops(ms, size, size, size), vs_cublas=cublas_ms / ms, error=error)
            except Exception as problem:  # e.g. out of shared memory for this tile
                row["failed"] = f"{type(problem).__name__}: {str(problem)[:200]}"
            rows.append(row)
        del a, b, exact
    return rows


def product_in(sol: ModuleType, a: torch.Tensor, b: torch.Tensor, way: str) -> torch.Tensor:
    """The notebook's five ways of computing C = A @ B from fp32 data, all with an fp32 result."""
    if way == "fp32 (ieee)":
        return sol.launch_matmul(a, b, torch.float32, "ieee")
    if way == "tf32":
        return sol.launch_matmul(a, b, torch.float32, "tf32")
    if way == "fp16":
        return sol.launch_matmul(a.half(), b.half(), torch.float32)
    if way == "bf16":
        return sol.launch_matmul(a.bfloat16(), b.bfloat16(), torch.float32)
    return sol.launch_matmul(a.half(), b.half(), torch.float32, acc_dtype=tl.float16)


def error_against_k(sol: ModuleType) -> dict[str, Any]:
    ks = [4**i for i in range(2, 11)]
    errors: dict[str, list[float]] = {way: [] for way in WAYS}
    generator = torch.Generator(device="cuda").manual_seed(2026)
    for k in ks:
        a = torch.randn((256, k), generator=generator, device="cuda")
        b = torch.randn((k, 256), generator=generator, device="cuda")
        exact = a.double() @ b.double()
        for way in WAYS:
            errors[way].append(relative_error(product_in(sol, a, b, way), exact))
        del a, b, exact
    model = [day6.fp16_accumulation_error(k, 16) for k in ks]
    return {"ks": ks, "errors": errors, "fp16_accumulator_model_chunk16": model,
            "roundoffs": {name: fmt.unit_roundoff for name, fmt in FORMATS.items()}}


def hidden_large_k(sol: ModuleType) -> dict[str, Any]:
    shape = (67, 45, day6.LARGE_K)
    inputs = day6.FP16.make_inputs(shape, 7, "cuda")
    exact = matmul.reference(inputs)
    found = {"shape": list(shape), "tolerance": day6.FP16.tolerance,
             "model_chunk16": day6.fp16_accumulation_error(day6.LARGE_K, 16)}
    for label, acc in (("fp32 accumulator", tl.float32), ("fp16 accumulator", tl.float16)):
        error = relative_error(sol.launch_matmul(*inputs, torch.float16, acc_dtype=acc), exact)
        found[label] = {"error": error, "passes": error <= day6.FP16.tolerance}
    bf16_inputs = day6.BF16.make_inputs(shape, 7, "cuda")
    error = relative_error(sol.matmul_bf16(*bf16_inputs), matmul.reference(bf16_inputs))
    found["bf16, fp32 accumulator"] = {"error": error, "passes": error <= day6.BF16.tolerance}
    return found


def main() -> int:
    info = course.device.configure("gpu") if torch.cuda.is_available() else None
    if info is None:
        print("no GPU: nothing to measure", file=sys.stderr)
        return 1
    began = time.perf_counter()
    sol = solution()
    results: dict[str, Any] = {"device": info.describe(), "torch": torch.__version__, "triton": triton.__version__}
    results["speed_by_format_4096"] = speed_by_format(sol)
    print(f"\n{info.describe()}\nC = A @ B at {SIZE}^3 (TFLOP/s; median, L2 flushed before every call)")
    print(f"{'format':>12} {'kernel':>9} {'cuBLAS':>9} {'kernel/cuBLAS':>14} {'datasheet':>10}")
    for row in results["speed_by_format_4096"]:
        print(f"{row['format']:>12} {row['kernel_tflops']:>9.1f} {row['cublas_tflops']:>9.1f} "
              f"{row['kernel_tflops'] / row['cublas_tflops']:>14.2f} {row['datasheet_tflops'] or float('nan'):>10.1f}")
    print()
    results["graded_benchmark"] = graded_benchmark(sol)
    results["fp16_tile_sweep"] = tile_sweep(sol)
    print("\nfp16 tile sweep (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): TFLOP/s, fraction of cuBLAS fp16")
    for row in results["fp16_tile_sweep"]:
        shown = row.get("failed") or f"{row['tflops']:7.1f} {row['vs_cublas']:5.2f} (error {row['error']:.1e})"
        print(f"  {row['size']:>5} {tuple(row['config'])}: {shown}")
    results["error_against_k"] = error_against_k(sol)
    found = results["error_against_k"]
    print("\nrelative error against fp64, M = N = 256 (fp32 data; five ways)")
    print(f"{'K':>8}" + "".join(f"{way:>24}" for way in WAYS) + f"{'model, fp16 acc.':>18}")
    for i, k in enumerate(found["ks"]):
        print(f"{k:>8}" + "".join(f"{found['errors'][way][i]:>24.2e}" for way in WAYS)
              + f"{found['fp16_accumulator_model_chunk16'][i]:>18.2e}")
    results["hidden_large_k"] = hidden_large_k(sol)
    print(f"\nhidden shape {tuple(results['hidden_large_k']['shape'])}, tolerance 1e-2:")
    for label in ("fp32 accumulator", "fp16 accumulator", "bf16, fp32 accumulator"):
        entry = results["hidden_large_k"][label]
        print(f"  {label:>24}: relative error {entry['error']:.2e} ({'passes' if entry['passes'] else 'FAILS'})")
    results["seconds"] = time.perf_counter() - began
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "tensor_core_formats.json").write_text(json.dumps(results, indent=1))
    print(f"\n{results['seconds']:.0f} s; JSON in {out / 'tensor_core_formats.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
