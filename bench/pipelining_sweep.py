"""Week 2 Day 4 on a GPU: how num_stages moves the speed of the course's fp16 matmul. Run from the repo root:

    python -m bench w2d4-stages            # about a minute on an H100; JSON to $OUT/pipelining_sweep.json
    python -m bench w2d4-stages --dry-run  # no GPU: every configuration on a tiny shape in the interpreter

What it measures, each with the course's harness (course.bench.time_calls: L2 flushed and the device
synchronised before every call, CUDA events, median of the repeats):

- cuBLAS fp16 (torch.mm) and the reference solution (its GPU_CONFIG, taken from the solution notebook) on
  the exercise's three benchmark shapes: the reference's fraction of cuBLAS sets the vs_cublas bands;
- the reference's tile (128 x 128 x 64, 8 warps) at 1 to 5 stages on the same shapes, and at 6 and 7 on
  4096^3: the speed of each stage count as a fraction of the reference sets the vs_reference bands (the
  line "stages=1 / reference" is what a kernel without pipelining would score), and the best stage count
  is the one GPU_CONFIG should hold;
- three other tiles at a few stage counts on 4096^3, to see whether another choice would be faster;
- 8 stages of the reference's tile, which needs 256 KB of shared memory per program: Triton's error, and
  the notebook's plain message for it.

Every configuration's output is checked (Freivalds' test against fp64) before it is timed. Each row also
records the compiled kernel's shared memory, registers and spills. The script stops adding optional rows
after 150 seconds, so it stays under three minutes.
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
from pathlib import Path
from typing import Any

import torch
import triton
from triton.runtime.errors import OutOfResources

# course first: it sets TRITON_INTERPRET (no GPU) before triton.language defines its own jit functions.
import course
from course import bench
from course.days import pipelining
from course.exercises.w2d4_pipelining import MATMUL, SMEM
from course.spec import geometric_mean

REPO = Path(__file__).resolve().parent.parent


REFERENCE_TILE = (128, 128, 64, 8)  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps: the solution's and the notebook's sweep
MAIN_STAGES = (1, 2, 3, 4, 5)
EXTRA_STAGES = (6, 7)
OTHER_TILES = (((64, 64, 32, 4), (1, 2, 3, 4, 5)), ((128, 256, 64, 8), (2, 3, 4)), ((128, 128, 64, 4), (3, 4)))
TOO_MANY_STAGES = 8
DEADLINE_S = 150.0
HEADER = "import torch\nimport triton\nimport triton.language as tl\nimport course\n\nDEVICE = course.device.info()\n\n"


def solution() -> Any:
    """The solution notebook's smem_bytes, GPU_CONFIG, matmul_kernel and matmul, as a module (Triton reads files)."""
    import nbformat

    nb = nbformat.read(str(REPO / "solutions/week2/day4_pipelining.ipynb"), as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    path = Path(tempfile.mkdtemp()) / "w2d4_solution.py"
    path.write_text(HEADER + cells["smem_bytes"] + "\n\n\n" + cells["matmul_kernel"] + "\n")
    module_spec = importlib.util.spec_from_file_location("w2d4_solution", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def launcher(module: Any, tile: tuple[int, int, int, int], stages: int):
    block_m, block_n, block_k, warps = tile

    def launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
        m, k = a.shape
        n = b.shape[1]
        grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
        return module.matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                          c.stride(0), c.stride(1), BLOCK_M=block_m, BLOCK_N=block_n,
                                          BLOCK_K=block_k, num_warps=warps, num_stages=stages)

    return launch


class Sweep:
    def __init__(self, module: Any, dry_run: bool):
        self.module, self.dry_run = module, dry_run
        self.began = time.perf_counter()
        self.on = "cpu" if dry_run else "cuda"
        self.inputs: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        self.rows: list[dict[str, Any]] = []

    def late(self) -> bool:
        return time.perf_counter() - self.began > DEADLINE_S

    def operands(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        if shape not in self.inputs:
            self.inputs.clear()  # one shape's inputs at a time: 8192^3 in fp16 is 256 MB
            self.inputs[shape] = MATMUL.make_inputs(shape, 0, self.on)
        return self.inputs[shape]

    def median_ms(self, fn: Any, args: tuple) -> float | None:
        if self.dry_run:
            fn(*args)
            return None
        return bench.time_calls(fn, args=args, warmup=2, min_repeats=10, min_seconds=0.25, max_seconds=1.0).median_ms

    def cublas(self, shape: tuple[int, ...]) -> dict[str, Any]:
        a, b = self.operands(shape)
        row = {"what": "cuBLAS fp16", "shape": list(shape), "ms": self.median_ms(MATMUL.library, ((a, b),))}
        self.rows.append(row)
        return row

    def reference(self, shape: tuple[int, ...]) -> dict[str, Any]:
        a, b = self.operands(shape)
        out = self.module.matmul(a, b)
        error = MATMUL.spot_error((a, b), out)
        row = {"what": "reference matmul", "shape": list(shape), "config": self.module.GPU_CONFIG, "error": error,
               "ms": self.median_ms(self.module.matmul, (a, b)) if error <= MATMUL.tolerance else None}
        self.rows.append(row)
        return row

    def tile(self, tile: tuple[int, int, int, int], stages: int, shape: tuple[int, ...]) -> dict[str, Any]:
        a, b = self.operands(shape)
        c = torch.full((shape[0], shape[1]), math.nan, device=self.on, dtype=torch.float16)
        launch = launcher(self.module, tile, 1 if self.dry_run else stages)
        row: dict[str, Any] = {"what": "tile", "tile": list(tile[:3]), "num_warps": tile[3], "stages": stages,
                               "shape": list(shape), "smem_model": SMEM.reference((*tile[:3], stages, 2))}
        try:
            kernel = launch(a, b, c)
        except OutOfResources as refused:
            row.update(refused=str(refused), explained=pipelining.explain(refused, *tile[:3], stages))
            self.rows.append(row)
            return row
        if not self.dry_run:
            torch.cuda.synchronize()
            row.update(smem_compiled=int(kernel.metadata.shared), registers=int(kernel.n_regs),
                       spills=int(kernel.n_spills))
        row["error"] = MATMUL.spot_error((a, b), c)
        row["ms"] = self.median_ms(launch, (a, b, c)) if row["error"] <= MATMUL.tolerance else None
        self.rows.append(row)
        return row


def tflops(shape: list[int], ms: float | None) -> float:
    return 2.0 * math.prod(shape) / (ms * 1e-3) / 1e12 if ms else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="no GPU: tiny shapes in the interpreter, nothing timed")
    args = parser.parse_args()
    info = course.device.info()
    if not info.has_gpu and not args.dry_run:
        print("no GPU: nothing to measure (use --dry-run to check the plumbing in the interpreter)", file=sys.stderr)
        return 1
    sweep = Sweep(solution(), args.dry_run)
    shapes = [tuple(s) for s in MATMUL.bench_shapes.gpu] if not args.dry_run else [(64, 48, 80), (33, 65, 40)]
    square = shapes[0]

    cublas_ms, reference_ms = {}, {}
    for shape in shapes:
        cublas_ms[shape] = sweep.cublas(shape)["ms"]
        reference_ms[shape] = sweep.reference(shape)["ms"]
        for stages in MAIN_STAGES:
            sweep.tile(REFERENCE_TILE, stages, shape)
    for stages in EXTRA_STAGES:
        if not sweep.late():
            sweep.tile(REFERENCE_TILE, stages, square)
    for tile, stage_counts in OTHER_TILES:
        for stages in stage_counts:
            if not sweep.late():
                sweep.tile(tile, stages, square)
    sweep.tile(REFERENCE_TILE, TOO_MANY_STAGES, square)

    summary: dict[str, Any] = {}
    if not args.dry_run:
        summary["reference_vs_cublas"] = geometric_mean([cublas_ms[s] / reference_ms[s] if reference_ms[s] else 0.0
                                                         for s in shapes])
        for stages in MAIN_STAGES:
            rows = {tuple(r["shape"]): r for r in sweep.rows if r["what"] == "tile"
                    and tuple(r["tile"]) == REFERENCE_TILE[:3] and r["num_warps"] == REFERENCE_TILE[3]
                    and r["stages"] == stages}
            summary[f"stages={stages} / reference"] = geometric_mean(
                [reference_ms[s] / rows[s]["ms"] if rows.get(s, {}).get("ms") and reference_ms[s] else 0.0
                 for s in shapes])
            summary[f"stages={stages} / cuBLAS"] = geometric_mean(
                [cublas_ms[s] / rows[s]["ms"] if rows.get(s, {}).get("ms") else 0.0 for s in shapes])

    print(info.describe() if info.has_gpu else "dry run in the interpreter: nothing timed")
    print(f"torch {torch.__version__}, triton {triton.__version__}; {time.perf_counter() - sweep.began:.0f} s")
    print(f"{'what':<34}{'shape':>18}{'smem':>9}{'compiled':>9}{'regs':>6}{'ms':>9}{'TFLOP/s':>9}"
          f"{'/cuBLAS':>8}{'/ref':>7}")
    for row in sweep.rows:
        shape = tuple(row["shape"])
        if row["what"] == "tile":
            label = f"{'x'.join(map(str, row['tile']))} w{row['num_warps']} s{row['stages']}"
        else:
            label = row["what"]
        if row.get("refused"):
            print(f"{label:<34}{'x'.join(map(str, shape)):>18}{row['smem_model']:>9}  refused: {row['refused']}")
            print(f"{'':<34}  {row['explained']}")
            continue
        ms = row.get("ms")
        vs_cublas = cublas_ms[shape] / ms if ms and cublas_ms.get(shape) else 0.0
        vs_reference = reference_ms[shape] / ms if ms and reference_ms.get(shape) else 0.0
        print(f"{label:<34}{'x'.join(map(str, shape)):>18}{row.get('smem_model', '-')!s:>9}"
              f"{row.get('smem_compiled', '-')!s:>9}{row.get('registers', '-')!s:>6}"
              f"{ms if ms else 0.0:>9.3f}{tflops(row['shape'], ms):>9.1f}{vs_cublas:>8.2f}{vs_reference:>7.2f}"
              + (f"  error {row['error']:.1e}" if row.get("error", 0.0) > MATMUL.tolerance else ""))
    for name, value in summary.items():
        print(f"{name}: {value:.3f} (geometric mean over {len(shapes)} shapes)")

    out = Path(os.environ.get("OUT", "build"))
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": info.describe() if info.has_gpu else "interpreter (dry run)", "torch": torch.__version__,
              "triton": triton.__version__, "seconds": time.perf_counter() - sweep.began, "dry_run": args.dry_run,
              "rows": sweep.rows, "summary": summary}
    (out / "pipelining_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {out / 'pipelining_sweep.json'}")
    bad = [r for r in sweep.rows if r.get("error", 0.0) > MATMUL.tolerance]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
