"""GPU measurements for Week 2, Days 1 and 2 (for bench/RESULTS.md and the Day 2 thresholds): from the repo root,

    python -m bench w2d1-w2d2-thresholds [--json results.json]

Day 1: the Horner kernel of the solution notebook on 2**26 fp32 elements, for several step counts:
time, GB/s, GFLOP/s and the fraction of this GPU's datasheet roof. Day 2: the two naive transposes,
the reference tiled transpose and torch's copy on the exercise's benchmark shapes (GB/s, and each as a
fraction of the copy), the reference's geometric mean against the copy (what the vs_copy bands rest
on), and a sweep of tile sizes and warps of the reference kernel. Kernels come from the solution
notebooks' cells; every timing is course.bench's (L2 flushed, medians).
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

import nbformat
import torch
import triton

from bench import harness
from course import bench
from course.peaks import datasheet_peaks
from course.spec import geometric_mean, get

REPO = Path(__file__).resolve().parent.parent
STEPS = (0, 1, 4, 16, 32, 64, 80, 96, 128, 256)
TILES = ((32, 32, 4), (64, 64, 4), (64, 64, 8), (128, 32, 4), (32, 128, 4), (128, 64, 8), (64, 128, 8),
         (128, 128, 8))


def notebook_module(notebook: str, cells: tuple[str, ...]) -> ModuleType:
    """The named cells of a solution notebook, run as a module (Triton needs its kernels in a file)."""
    nb = nbformat.read(str(REPO / "solutions" / "week2" / f"{notebook}.ipynb"), as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    path = Path(tempfile.mkdtemp()) / f"{notebook}_solution.py"
    path.write_text("\n\n".join(sources[name] for name in ("parameters", "setup", *cells)), encoding="utf-8")
    loaded = importlib.util.spec_from_file_location(f"{notebook}_solution", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def day1(name: str) -> list[dict[str, float]]:
    day = notebook_module("day1_profiling", ("horner_kernel",))
    peaks = datasheet_peaks(name)
    n = 1 << 26
    x = torch.rand(n, device="cuda") * 2 - 1
    rows = []
    print(f"Day 1: horner_kernel on {n} fp32 elements" + (f"; {peaks.gpu} datasheet roof" if peaks else ""))
    print(f"{'steps':>5}{'FLOP/byte':>10}{'ms':>9}{'GB/s':>8}{'GFLOP/s':>9}{'of roof':>9}")
    for steps in STEPS:
        flops, nbytes = day.horner_cost(n, steps)
        ms = bench.time_calls(day.horner, args=(x, steps), min_repeats=20).median_ms
        row = {"steps": steps, "intensity": flops / nbytes, "ms": ms, "gbps": bench.gbps(nbytes, ms),
               "gflops": bench.gflops(flops, ms)}
        if peaks:  # below the ridge the roof is bandwidth, at or above it the fp32 peak
            memory_bound = row["intensity"] * peaks.memory_gbps < peaks.fp32_tflops * 1e3
            row["of_roof"] = (row["gbps"] / peaks.memory_gbps if memory_bound
                              else row["gflops"] / (peaks.fp32_tflops * 1e3))
        rows.append(row)
        print(f"{steps:>5}{row['intensity']:>10.3g}{ms:>9.3f}{row['gbps']:>8.0f}{row['gflops']:>9.0f}"
              f"{row.get('of_roof', float('nan')):>9.2f}")
    return rows


def day2() -> dict[str, object]:
    day = notebook_module("day2_coalescing", ("naive_kernels", "transpose_kernel"))
    spec = get("w2d2.transpose")
    variants = {"naive, strided reads": lambda x: day.naive_transpose(x, "reads"),
                "naive, strided writes": lambda x: day.naive_transpose(x, "writes"),
                "tiled (reference)": day.transpose, "torch copy": torch.Tensor.clone}
    rows = []
    print("\nDay 2: GB/s (8 M N bytes over the median time), and as a fraction of torch copy")
    for shape in spec.bench_shapes.gpu:
        (x,) = spec.make_inputs(shape, 0, "cuda")
        assert spec.spot_error((x,), day.transpose(x)) == 0.0
        row = {"shape": list(shape)}
        for label, fn in variants.items():
            row[label] = bench.gbps(spec.bytes_moved(shape), bench.time_calls(fn, args=(x,), min_repeats=20).median_ms)
        rows.append(row)
        copy = row["torch copy"]
        print(f"{spec.shape_label(shape)}: " + ", ".join(f"{label} {row[label]:.0f} ({row[label] / copy:.2f})"
                                                         for label in variants))
    report = bench.measure(spec, day.transpose)  # what the grader's vs_copy item sees, with the reference as student
    print(report.table())
    ratios = [r["tiled (reference)"] / r["torch copy"] for r in rows]
    print(f"reference / copy, geometric mean over the benchmark shapes: {geometric_mean(ratios):.3f}")
    sweep = []
    print("\nDay 2: tile sweep of the reference kernel (GB/s, fraction of torch copy)")
    for shape in (spec.bench_shapes.gpu[0], spec.bench_shapes.gpu[-1]):
        (x,) = spec.make_inputs(shape, 1, "cuda")
        m, n = shape
        copy = bench.gbps(spec.bytes_moved(shape), bench.time_calls(torch.Tensor.clone, args=(x,)).median_ms)
        for block_m, block_n, warps in TILES:
            out = torch.empty((n, m), device="cuda")

            def launch(x: torch.Tensor, out: torch.Tensor = out, bm: int = block_m, bn: int = block_n,
                       w: int = warps) -> torch.Tensor:
                rows, cols = x.shape
                day.transpose_kernel[(triton.cdiv(rows, bm), triton.cdiv(cols, bn))](
                    x, out, rows, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                    BLOCK_M=bm, BLOCK_N=bn, num_warps=w)
                return out

            gbps = bench.gbps(spec.bytes_moved(shape), bench.time_calls(launch, args=(x,)).median_ms)
            assert spec.spot_error((x,), out) == 0.0
            sweep.append({"shape": list(shape), "tile": [block_m, block_n], "warps": warps, "gbps": gbps,
                          "of_copy": gbps / copy})
            print(f"{spec.shape_label(shape)}: {block_m} x {block_n}, {warps} warps: {gbps:.0f} GB/s, "
                  f"{gbps / copy:.2f} of copy ({copy:.0f})")
    return {"rows": rows, "reference_vs_copy_geomean": geometric_mean(ratios), "sweep": sweep,
            "bench_table": report.table()}


def main(argv: list[str] | None = None) -> int:
    args, info = harness.start(harness.parser(__doc__), argv)
    if info is None:
        return 0
    print(info.describe())
    results = {"device": info.describe(), "torch": torch.__version__, "triton": triton.__version__,
               "day1": day1(info.name), "day2": day2()}
    harness.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
