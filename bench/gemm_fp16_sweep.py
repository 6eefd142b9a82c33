"""Time the Week 2 Day 7 reference GEMM over tile configurations against cuBLAS fp16 (run on a GPU).

    python -m bench w2d7-fp16-tiles [--budget SECONDS] [--variants graded,tma,plain,plain_one_tile,...]

The kernels come from the solution notebook's cells, so this times exactly what the course grades
with. For each benchmark shape of ``w2d7.matmul_fp16`` it times cuBLAS fp16 (the spec's baseline),
the notebook's autotuned ``matmul_fp16`` as graded (its first call, compilation and autotuning
included, by the wall clock), then each kernel variant under each configuration of its list:

- ``tma``: the persistent TMA kernel (one program per SM, tiles in grouped order, device-side descriptors);
- ``plain``: the persistent kernel with plain pointer loads (the notebook's fallback);
- ``plain_one_tile`` / ``tma_one_tile``: the same kernels launched with one program per tile
  (no persistence: the plain grouped ``tl.dot`` kernel of earlier measurements);
- ``plain_row_major`` / ``tma_row_major``: each kernel's first configuration with ``GROUP_M = 1``
  (row-major tile order), beside the same configuration grouped: what grouping is worth.

Every output is checked once against an fp64 product; every time is the median of ``course.bench.time_calls``
(L2 flushed, GPU kept busy between calls). It prints a table per shape and, per variant, the geometric mean
over the shapes of its fraction of cuBLAS with the best configuration per shape (what an autotuner picks) and
with its best single configuration; everything goes to ``$OUT/gemm_fp16_sweep.json`` (``build/`` without OUT).
Work stops when ``--budget`` seconds are spent (default 270); what was skipped is listed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import nbformat

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "solutions" / "week2" / "day7_optimized_gemm.ipynb"
CELLS = ("parameters", "setup", "gemm_kernel", "gemm_tma_kernel", "gemm_launch")
SPEC_ID = "w2d7.matmul_fp16"


@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_k: int
    stages: int
    warps: int
    store_split: int = 1  # TMA kernel only
    group_m: int = 8

    @property
    def label(self) -> str:
        split = f" split{self.store_split}" if self.store_split != 1 else ""
        group = f" group{self.group_m}" if self.group_m != 8 else ""
        return f"{self.block_m}x{self.block_n}x{self.block_k} s{self.stages} w{self.warps}{split}{group}"


TMA_CONFIGS = (
    Config(128, 256, 64, 3, 8), Config(128, 256, 64, 4, 8, 2), Config(128, 256, 64, 3, 8, 2),
    Config(256, 128, 64, 3, 8), Config(256, 128, 64, 4, 8, 2), Config(128, 128, 64, 4, 8),
    Config(128, 128, 64, 4, 4), Config(128, 128, 128, 3, 8),
)
PLAIN_CONFIGS = (
    Config(128, 256, 64, 3, 8), Config(128, 128, 64, 4, 8), Config(128, 128, 64, 4, 4),
    Config(128, 128, 32, 4, 4), Config(128, 256, 32, 4, 8), Config(256, 128, 64, 3, 8),
)
VARIANTS: dict[str, tuple[Config, ...]] = {
    "tma": TMA_CONFIGS,
    "plain": PLAIN_CONFIGS,
    "plain_one_tile": PLAIN_CONFIGS[:3],
    "tma_one_tile": TMA_CONFIGS[:2],
    "plain_row_major": (replace(PLAIN_CONFIGS[0], group_m=1),),
    "tma_row_major": (replace(TMA_CONFIGS[0], group_m=1),),
}


def load_notebook(path: Path = NOTEBOOK) -> Any:
    """The solution notebook's parameter, setup and GEMM cells as a module (Triton reads kernels from a file)."""
    nb = nbformat.read(str(path), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells if c.cell_type == "code"}
    missing = [name for name in CELLS if name not in cells]
    if missing:
        raise KeyError(f"{path} has no cells {missing}")
    file = Path(tempfile.mkdtemp(prefix="gemm-sweep-")) / "day7_solution.py"
    file.write_text("\n\n".join(cells[name] for name in CELLS) + "\n", encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location("day7_solution", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _tiles(m: int, n: int, config: Config) -> int:
    return math.ceil(m / config.block_m) * math.ceil(n / config.block_n)


def launcher(notebook: Any, variant: str, config: Config) -> Callable[[Any, Any], Any]:
    """A function (a, b) -> c running one kernel of the notebook with one configuration, as the notebook launches it."""
    import torch

    tma, one_tile = variant.startswith("tma"), variant.endswith("one_tile")

    def run(a: Any, b: Any) -> Any:
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty((m, n), device=a.device, dtype=torch.float16)
        programs = _tiles(m, n, config) if one_tile else notebook.NUM_PROGRAMS
        grid = (min(programs, _tiles(m, n, config)),)
        meta = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                "GROUP_M": config.group_m, "NUM_PROGRAMS": programs, "num_warps": config.warps,
                "num_stages": config.stages}
        if tma:
            if not notebook.tma_ready(a, b, c):
                raise ValueError("these matrices are not TMA-ready (row-major, 16-byte aligned rows)")
            if notebook.DEVICE.has_gpu:
                import triton

                triton.set_allocator(notebook.scratch)
            notebook.matmul_tma_kernel[grid](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0),
                                             STORE_SPLIT=config.store_split, **meta)
        else:
            notebook.matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                         c.stride(0), c.stride(1), **meta)
        return c

    return run


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and all(v > 0 for v in values) else 0.0


def summarize(rows: list[dict[str, Any]], shapes: list[tuple[int, ...]]) -> dict[str, Any]:
    """Per variant: the best configuration per shape, its geometric-mean fraction of cuBLAS, the best single config."""
    summary: dict[str, Any] = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        good = [r for r in rows if r["variant"] == variant and r.get("vs_cublas")]
        best_per_shape = {}
        for shape in shapes:
            candidates = [r for r in good if tuple(r["shape"]) == shape]
            if candidates:
                best_per_shape[shape] = max(candidates, key=lambda r: r["vs_cublas"])
        entry: dict[str, Any] = {
            "best_per_shape": {"x".join(map(str, s)): {"config": r["config"], "vs_cublas": r["vs_cublas"]}
                               for s, r in best_per_shape.items()},
            "geomean_best_per_shape": geomean([r["vs_cublas"] for r in best_per_shape.values()])
            if len(best_per_shape) == len(shapes) else None,
        }
        singles = {}
        for config in dict.fromkeys(r["config"] for r in good):
            fractions = [r["vs_cublas"] for r in good if r["config"] == config]
            if len(fractions) == len(shapes):
                singles[config] = geomean(fractions)
        if singles:
            best = max(singles, key=singles.get)
            entry.update(best_single_config=best, geomean_best_single=singles[best])
        summary[variant] = entry
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=270.0, help="seconds of work before the rest is skipped")
    parser.add_argument("--variants", default="graded," + ",".join(VARIANTS))
    args = parser.parse_args(argv)
    began = time.perf_counter()

    import torch
    import triton

    import course
    from course import bench
    from course.check import relative_error
    from course.spec import get

    info = course.device.configure("auto")
    if not info.has_gpu:
        print("no GPU: nothing to measure", file=sys.stderr)
        return 1
    spec = get(SPEC_ID)
    notebook = load_notebook()
    shapes = [tuple(s) for s in spec.bench_shapes.gpu]
    chosen = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v != "graded" and v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: graded, {', '.join(VARIANTS)}")

    def timed(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> float:
        return bench.time_calls(fn, args=inputs, warmup=1, min_repeats=10, min_seconds=0.3, max_seconds=1.5,
                                target_spread=0.02).median_ms

    results: dict[str, Any] = {"device": info.describe(), "torch": torch.__version__, "triton": triton.__version__,
                               "shapes": [list(s) for s in shapes], "cublas_ms": {}, "graded": {}, "rows": [],
                               "skipped": []}
    references: dict[tuple[int, ...], Any] = {}
    inputs: dict[tuple[int, ...], tuple[Any, ...]] = {}
    for shape in shapes:
        inputs[shape] = spec.make_inputs(shape, 1234, "cuda")
        references[shape] = spec.reference(inputs[shape])
        ms = timed(lambda *x: spec.library(x), inputs[shape])
        results["cublas_ms"]["x".join(map(str, shape))] = ms
        print(f"cuBLAS fp16 {shape}: {ms:.3f} ms, {bench.gflops(spec.flops(shape), ms) / 1e3:.0f} TFLOP/s")

    def over_budget(what: str) -> bool:
        if time.perf_counter() - began > args.budget:
            results["skipped"].append(what)
            return True
        return False

    if "graded" in chosen:
        for shape in shapes:
            if over_budget(f"graded {shape}"):
                continue
            key = "x".join(map(str, shape))
            started = time.perf_counter()
            out = notebook.matmul_fp16(*inputs[shape])
            torch.cuda.synchronize()
            first_call = time.perf_counter() - started
            error = relative_error(out, references[shape])
            ms = timed(notebook.matmul_fp16, inputs[shape])
            tuned = notebook.tuned_tma if notebook.tma_ready(*inputs[shape], out) else notebook.tuned_plain
            entry = {"first_call_s": first_call, "ms": ms, "rel_error": error,
                     "vs_cublas": results["cublas_ms"][key] / ms, "config": str(getattr(tuned, "best_config", "")),
                     "autotune_s": getattr(tuned, "bench_time", None)}
            results["graded"][key] = entry
            print(f"graded matmul_fp16 {shape}: first call {first_call:.1f} s, {ms:.3f} ms, "
                  f"{entry['vs_cublas']:.3f} of cuBLAS, error {error:.1e}, config {entry['config']}")

    for variant in (v for v in chosen if v != "graded"):
        for config in VARIANTS[variant]:
            for shape in shapes:
                if over_budget(f"{variant} {config.label} {shape}"):
                    continue
                key = "x".join(map(str, shape))
                row: dict[str, Any] = {"variant": variant, "config": config.label, "shape": list(shape)}
                run = launcher(notebook, variant, config)
                try:
                    started = time.perf_counter()
                    out = run(*inputs[shape])
                    torch.cuda.synchronize()
                    row["first_call_s"] = time.perf_counter() - started
                    row["rel_error"] = relative_error(out, references[shape])
                    if not row["rel_error"] <= spec.tolerance:
                        raise ValueError(f"wrong result: relative error {row['rel_error']:.2e}")
                    row["ms"] = timed(run, inputs[shape])
                    row["tflops"] = bench.gflops(spec.flops(shape), row["ms"]) / 1e3
                    row["vs_cublas"] = results["cublas_ms"][key] / row["ms"]
                except Exception as error:  # out of shared memory, a compile error: noted, the sweep goes on
                    row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
                results["rows"].append(row)
                shown = (f"{row['ms']:8.3f} ms {row['tflops']:6.0f} TFLOP/s {row['vs_cublas']:6.3f} of cuBLAS"
                         if "ms" in row else row["error"])
                print(f"{variant:<15} {config.label:<24} {key:<16} {shown}", flush=True)

    results["summary"] = summarize(results["rows"], shapes)
    if results["graded"]:
        graded = [results["graded"].get("x".join(map(str, s)), {}).get("vs_cublas", 0.0) for s in shapes]
        results["summary"]["graded"] = {"geomean": geomean(graded)}
    results["seconds"] = time.perf_counter() - began
    print(f"\ngeometric mean over {len(shapes)} shapes, fraction of cuBLAS fp16 ({info.name}):")
    for variant, entry in results["summary"].items():
        if variant == "graded":
            print(f"  {'graded (autotuned)':<22} {entry['geomean']:.3f}")
            continue
        per_shape = entry.get("geomean_best_per_shape")
        single = entry.get("geomean_best_single")
        print(f"  {variant:<22} best per shape {per_shape:.3f}" if per_shape else f"  {variant:<22} incomplete",
              f"| best single config {single:.3f} ({entry['best_single_config']})" if single else "")
    if results["skipped"]:
        print(f"skipped for the {args.budget:.0f} s budget: {len(results['skipped'])} measurements, "
              f"from {results['skipped'][0]}")
    out_dir = Path(os.environ.get("OUT") or REPO / "build")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gemm_fp16_sweep.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"{results['seconds']:.0f} s; wrote {out_dir / 'gemm_fp16_sweep.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
