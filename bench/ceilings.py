"""GPU measurements quoted by the course (bench/RESULTS.md): run on a GPU machine, from the repo root.

    python -m bench ceilings [--json results.json]

Measures the copy bandwidth and cuBLAS rates at 4096, checks course.bench against
triton.testing.do_bench on torch.mm (fp16, 4096), and times the Day 7 reference kernel (taken
from the solution notebook) against cuBLAS fp32 over the exercise's benchmark shapes.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton

from bench import harness
from course import bench
from course.spec import get

REPO = Path(__file__).resolve().parent.parent


def copy_bandwidth() -> float:
    src = torch.randn(256 * 2**20 // 4, device="cuda")
    dst = torch.empty_like(src)
    timing = bench.time_calls(dst.copy_, args=(src,), min_repeats=20)
    return bench.gbps(2 * src.numel() * 4, timing.median_ms)


def cublas_rates(n: int = 4096) -> dict[str, float]:
    rates = {}
    for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                               ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
        rates[label] = bench.gflops(2 * n**3, bench.time_calls(torch.mm, args=(a, b), min_repeats=20).median_ms)
    torch.backends.cuda.matmul.allow_tf32 = False
    return rates


def solution_matmul():
    """The `matmul` defined by the Day 7 solution notebook (Triton needs its kernels in a file)."""
    import importlib.util
    import tempfile

    import nbformat

    nb = nbformat.read(str(REPO / "solutions/week1/day7_fast_matmul.ipynb"), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    source = "\n\n".join(cells[name] for name in ("parameters", "setup", "matmul_kernel"))
    path = Path(tempfile.mkdtemp()) / "day7_solution.py"
    path.write_text(source)
    module_spec = importlib.util.spec_from_file_location("day7_solution", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.matmul


def main(argv: list[str] | None = None) -> int:
    args, info = harness.start(harness.parser(__doc__), argv)
    if info is None:
        return 0
    report = bench.measure(get("w1d7.matmul_fp32"), solution_matmul())
    results = {"device": info.describe(), "torch": torch.__version__, "triton": triton.__version__,
               "copy_gbps": copy_bandwidth(), "cublas_gflops_4096": cublas_rates(),
               "agreement": bench.agreement_with_do_bench(),
               "day7_reference": [{"shape": row.shape, "gflops": row.student_gflops, "ratio": row.vs_library,
                                   "cublas_gflops": row.library_gflops, "error": row.error} for row in report.rows]}
    harness.write_json(args.json, results)
    print(info.describe())
    print(f"device-to-device copy: {results['copy_gbps']:.0f} GB/s (read + write)")
    for label, rate in results["cublas_gflops_4096"].items():
        print(f"cuBLAS {label} 4096^3: {rate / 1000:.1f} TFLOP/s")
    agreement = results["agreement"]
    print(f"torch.mm fp16 4096, medians of 3 interleaved rounds: course.bench {agreement['course_bench_ms']:.4f} ms,"
          f" do_bench {agreement['do_bench_ms']:.4f} ms, {agreement['vs_do_bench']:.1%} apart; two repeats "
          f"{agreement['repeat_first_ms']:.4f} / {agreement['repeat_second_ms']:.4f} ms, "
          f"{agreement['repeat_spread']:.1%} apart")
    print(report.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
