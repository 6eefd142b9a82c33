"""The CUDA-core SGEMM ladder (Week 2 bonus day) on a GPU: compile, check, time, and try other tiles.

Run on a GPU machine with CuPy, from the repository root:

    python -m bench sgemm-ladder [--no-sweep] [--out DIR]      (DIR: $OUT, else build/sgemm-ladder)

1. Builds the solution notebook's wrappers and kernels, one a rung (its setup, ``operands``, answer and Triton
   cells, executed as a module) and prints each module's NVRTC compile time, and, from the cubin NVRTC
   makes for this GPU, the registers, spills and shared memory (``cuobjdump -res-usage``) and the
   instruction counts of the main loop's SASS (FFMA, LDS, LDS.128, LDG, BAR, local loads and stores).
2. Checks every version against torch fp64 on odd sizes (1x1x1, 127x129x131, 1000x1030x515,
   4097x4095x1023 and a thin one), also with A and B starting 4 bytes past a 16-byte boundary.
3. Times every version, the notebook's Triton fp32 kernel (input_precision="ieee") and cuBLAS fp32
   (TF32 off) at 4096^3 with course.bench.time_calls, cuBLAS again beside each kernel, and prints
   GFLOP/s, the fraction of the cuBLAS timing taken beside it, and the speed-up over the rung below.
4. Unless --no-sweep: v6b, v6a and v5 in other tile configurations, through the sources' -D options, timed at
   4096^3 and at 3000x2000x1500, with each cubin's registers, local (spilled) bytes and the blocks an SM holds
   (from the driver), and the waves each shape's grid makes; then v7 as the notebook launches it at both shapes.
   --repeat N times the whole sweep N times, the second pass in reverse order.

Everything printed is also written to DIR/sgemm_ladder.json, with each cubin's SASS beside it.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import torch

import course
import course.cuda
from course import bench
from course.exercises.matmul_fp32 import cublas_fp32
from course.exercises.w2_sgemm_ladder import VERSIONS

REPO = Path(__file__).resolve().parent.parent


NOTEBOOK = REPO / "solutions" / "week2" / "bonus_sgemm_ladder.ipynb"
CHECK_SHAPES = ((1, 1, 1), (127, 129, 131), (1000, 1030, 515), (4097, 4095, 1023), (5, 3001, 2))
SIZE = 4096
# (version, BK, WARPS_M, WARPS_N, MIN_BLOCKS): the notebook's default first, then other tiles.
SWEEP = [("v6b", 8, 4, 2, 2), ("v6b", 16, 4, 2, 2), ("v6b", 16, 4, 2, 1), ("v6b", 16, 2, 4, 2), ("v6b", 16, 2, 4, 1),
         ("v6b", 8, 2, 2, 3), ("v6b", 16, 2, 2, 3), ("v6b", 8, 4, 2, 1), ("v6a", 8, 4, 2, 2), ("v6a", 8, 4, 2, 1),
         ("v6a", 16, 4, 2, 2), ("v6a", 16, 4, 2, 1), ("v6a", 8, 2, 2, 3), ("v6a", 16, 2, 2, 3), ("v5", 8, 4, 2, 2),
         ("v5", 8, 4, 2, 1), ("v5", 8, 2, 2, 3)]
# Besides SIZE^3 the sweep times the other benchmark shape, where the rungs must also climb (v5 and v6a tied there).
SWEEP_SHAPE = (3000, 2000, 1500)
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, CU_FUNC_ATTRIBUTE_NUM_REGS = 3, 4
# Left out: 512-thread tiles (they need BK = 16, and then exceed 48 KB of static shared memory) and
# tiles with fewer float4s of A than threads (the sources' static_assert refuses them).


def notebook_module() -> Any:
    """The solution notebook's setup, operands, answer and Triton cells as one module (Triton needs a file)."""
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
             for c in nbformat.read(str(NOTEBOOK), as_version=4).cells}
    names = ["setup", "operands", *(f"sgemm_{v}" for v in VERSIONS), "triton_kernel"]
    text = 'device, grading, bench_shapes = "gpu", True, None\n\n' + "\n\n".join(cells[n] for n in names)
    path = Path(tempfile.mkdtemp()) / "bonus_sgemm_ladder_solution.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sources() -> dict[str, str]:
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
             for c in nbformat.read(str(NOTEBOOK), as_version=4).cells}
    found = {}
    for v in VERSIONS:
        for node in ast.parse(cells[f"sgemm_{v}"]).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == f"SGEMM_{v.upper()}":
                found[v] = node.value.value
    return found


def cuobjdump() -> Path | None:
    import triton

    # The CUDA toolkit's first: Triton's copy may be older than the NVRTC that made the cubin.
    found = shutil.which("cuobjdump") or shutil.which("cuobjdump", path="/usr/local/cuda/bin")
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return Path(found) if found else bundled if bundled.exists() else None


def resources(kernel: Any, threads: int, shared_mem: int = 0) -> dict[str, int]:
    """Registers a thread, local (spilled) bytes a thread and blocks an SM holds, as the driver reports them."""
    import cupy

    driver = cupy.cuda.driver
    pointer = kernel.module._function(kernel.name).pointer  # a diagnostic: the driver's handle of the kernel
    return {"registers": driver.funcGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, pointer),
            "local_bytes": driver.funcGetAttribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, pointer),
            "blocks_per_sm": driver.occupancyMaxActiveBlocksPerMultiprocessor(pointer, threads, shared_mem)}


def waves(blocks: int, blocks_per_sm: int) -> float:
    """How many waves a grid of ``blocks`` makes on this GPU's SMs (2.91: two full and one 91% full)."""
    return blocks / (torch.cuda.get_device_properties(0).multi_processor_count * max(blocks_per_sm, 1))


def sass_report(source: str, options: tuple[str, ...], name: str, out: Path) -> dict[str, Any]:
    """Registers, spills, shared memory and main-loop instruction counts of NVRTC's cubin for this GPU."""
    major, minor = torch.cuda.get_device_capability()
    image, kind = course.cuda.nvrtc_compile(source, options, major * 10 + minor)
    tool = cuobjdump()
    if kind != "cubin" or tool is None:
        return {"note": f"no SASS: NVRTC gave {kind}, cuobjdump {'found' if tool else 'missing'}"}
    cubin = out / f"{name}.cubin"
    cubin.write_bytes(image)
    usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    sass = subprocess.run([str(tool), "-sass", str(cubin)], capture_output=True, text=True).stdout
    (out / f"{name}.sass").write_text(sass)
    report: dict[str, Any] = {}
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    if found:
        report.update(zip(("registers", "stack", "shared", "local"), map(int, found.groups()), strict=True))
    instructions = []
    for line in sass.splitlines():
        match = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if match:
            instructions.append((int(match.group(1), 16), match.group(2)))
    loops = []  # (start, end) of each backward branch: the longest is the main loop
    for address, text in instructions:
        branch = re.search(r"BRA (?:\S+, )?0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address:
            loops.append((int(branch.group(1), 16), address))
    if loops:
        start, end = max(loops, key=lambda r: sum(1 for a, _ in instructions if r[0] <= a <= r[1]))
        body = [re.sub(r"^@!?U?P\w+\s+", "", t) for a, t in instructions if start <= a <= end]
        ops = Counter(t.split()[0] for t in body)
        report["main_loop"] = {"instructions": len(body),
                               **{key: sum(n for op, n in ops.items() if op.startswith(key))
                                  for key in ("FFMA", "LDS", "STS", "LDG", "BAR", "LDL", "STL")},
                               "LDS.128": ops.get("LDS.128", 0), "LDG.E.128": sum(
                                   n for op, n in ops.items() if op.startswith("LDG.E.128"))}
    return report


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    if not torch.isfinite(out).all():
        return float("inf")
    return float(torch.linalg.vector_norm(out.double() - reference) / torch.linalg.vector_norm(reference))


def operands(m: int, n: int, k: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random A (m x k) and B (k x n), contiguous, starting ``offset`` floats into their allocation."""
    a = torch.randn(m * k + offset, device="cuda")[offset:].view(m, k)
    b = torch.randn(k * n + offset, device="cuda")[offset:].view(k, n)
    return a, b


def check(functions: dict[str, Any]) -> dict[str, dict[str, float]]:
    errors: dict[str, dict[str, float]] = {name: {} for name in functions}
    for m, n, k in CHECK_SHAPES:
        for offset in (0, 1):
            a, b = operands(m, n, k, offset)
            reference = a.double() @ b.double()
            for name, fn in functions.items():
                errors[name][f"{m}x{n}x{k}+{offset}"] = relative_error(fn(a, b), reference)
            del a, b, reference
    return errors


def time_rate(fn: Any, a: torch.Tensor, b: torch.Tensor) -> float:
    return bench.gflops(2.0 * a.shape[0] * b.shape[1] * a.shape[1], bench.time_calls(fn, args=(a, b)).median_ms)


def cublas(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return cublas_fp32((a, b))


def sweep_launcher(version: str, source: str, bk: int, warps_m: int, warps_n: int, min_blocks: int) -> Any:
    options = (f"-DBK={bk}", f"-DWARPS_M={warps_m}", f"-DWARPS_N={warps_n}", f"-DMIN_BLOCKS={min_blocks}")
    started = time.perf_counter()
    kernel = course.cuda.compile(source, options).get_function(f"sgemm_{version}")
    seconds = time.perf_counter() - started
    tile_m, tile_n, threads = 32 * warps_m, 64 * warps_n, 32 * warps_m * warps_n

    def launch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty((m, n), device=a.device, dtype=torch.float32)
        kernel((course.cuda.cdiv(n, tile_n), course.cuda.cdiv(m, tile_m)), (threads,),
               (a, b, c, np.int32(m), np.int32(n), np.int32(k)))
        return c

    launch.kernel, launch.threads, launch.tile = kernel, threads, (tile_m, tile_n)
    return launch, options, seconds


def sweep_entry(version: str, bk: int, warps_m: int, warps_n: int, min_blocks: int, source: str,
                shapes: list[tuple[torch.Tensor, torch.Tensor]], out: Path) -> dict[str, Any]:
    """One configuration: compiled, checked on three odd sizes, timed at each shape beside cuBLAS."""
    entry: dict[str, Any] = {"version": version, "BK": bk, "WARPS_M": warps_m, "WARPS_N": warps_n,
                             "MIN_BLOCKS": min_blocks}
    try:
        launch, options, seconds = sweep_launcher(version, source, bk, warps_m, warps_n, min_blocks)
        sass = sass_report(source, options, f"{version}_" + "_".join(o[2:].replace("=", "") for o in options), out)
        worst = 0.0
        for m, n, k in ((127, 129, 131), (1000, 1030, 515), (300, 260, 72)):
            x, y = operands(m, n, k, 0)
            worst = max(worst, relative_error(launch(x, y), x.double() @ y.double()))
        used = resources(launch.kernel, launch.threads)
        entry.update(compile_seconds=seconds, stack=sass.get("stack"), worst_error=worst, **used, shapes=[])
        for a, b in shapes:
            blocks = course.cuda.cdiv(a.shape[0], launch.tile[0]) * course.cuda.cdiv(b.shape[1], launch.tile[1])
            library = time_rate(cublas, a, b)
            rate = time_rate(launch, a, b) if worst <= 1e-5 else 0.0
            entry["shapes"].append({"shape": [a.shape[0], b.shape[1], a.shape[1]], "gflops": rate,
                                    "cublas_gflops": library, "vs_cublas": rate / library, "blocks": blocks,
                                    "waves": waves(blocks, used["blocks_per_sm"])})
    except Exception as error:  # a configuration that does not compile or launch: say so, go on
        entry["error"] = f"{type(error).__name__}: {error}"[:300]
    return entry


def print_entry(entry: dict[str, Any]) -> None:
    warps = f"{entry['WARPS_M']}x{entry['WARPS_N']}"
    head = f"{entry['version']:>5}{entry['BK']:>4}{warps:>7}{entry['MIN_BLOCKS']:>5}"
    if "error" in entry:
        print(f"{head}  {entry['error'][:80]}")
        return
    cells = "".join(f"{s['gflops']:>9.0f}{s['vs_cublas']:>7.1%}{s['waves']:>6.2f}" for s in entry["shapes"])
    print(f"{head}{entry['registers']:>6}{entry['local_bytes']:>7}{entry['blocks_per_sm']:>5}{cells}"
          f"{entry['worst_error']:>10.1e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "build" / "sgemm-ladder"))
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="passes over the sweep (the second one reversed)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU here: the ladder's kernels need one; nothing measured")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    course.device.configure("gpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    import cupy
    import triton

    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
        "cupy": cupy.__version__, "nvrtc": ".".join(map(str, cupy.cuda.nvrtc.getVersion())), "size": SIZE}
    print(f"{result['device']}: torch {result['torch']}, triton {result['triton']}, cupy {result['cupy']}, "
          f"NVRTC {result['nvrtc']}")

    started = time.perf_counter()
    nb = notebook_module()
    print(f"notebook cells executed in {time.perf_counter() - started:.1f} s (imports, NVRTC compiles, Triton)")
    texts = sources()
    versions: dict[str, dict[str, Any]] = {}
    print(f"\n{'':>5}{'NVRTC s':>9}{'regs':>6}{'stack B':>8}{'smem B':>8}  main loop: FFMA LDS(.128) LDG BAR LDL/STL")
    for v in VERSIONS:
        module = getattr(nb, f"sgemm_{v}_module")
        sass = sass_report(texts[v], (), v, out)
        versions[v] = {"compile_seconds": module.compile_seconds, "image": module.kind, "sass": sass}
        loop = sass.get("main_loop", {})
        counts = [loop.get(key, "?") for key in ("FFMA", "LDS", "LDS.128", "LDG", "BAR", "LDL", "STL")]
        print(f"{v:>5}{module.compile_seconds:>9.3f}{sass.get('registers', '?'):>6}{sass.get('stack', '?'):>8}"
              f"{sass.get('shared', '?'):>8}  {counts[0]} {counts[1]}({counts[2]}) {counts[3]} {counts[4]} "
              f"{counts[5]}/{counts[6]}")

    functions = {v: getattr(nb, f"sgemm_{v}") for v in VERSIONS} | {"triton": nb.sgemm_triton}
    errors = check(functions)
    print("\nrelative error against fp64 (worst over the shapes, aligned and 4-byte-offset inputs):")
    for name, found in errors.items():
        worst = max(found, key=found.get)
        ok = all(e <= 1e-5 for e in found.values())
        print(f"  {name:>6}: {found[worst]:.2e} at {worst} {'OK' if ok else 'FAILED: ' + json.dumps(found)}")
        (versions.get(name) or result.setdefault("triton_kernel", {}))["errors"] = found

    a, b = operands(SIZE, SIZE, SIZE, 0)
    print(f"\n{SIZE}^3, median of course.bench.time_calls (L2 flushed before each call):")
    print(f"{'':>8}{'GFLOP/s':>10}{'cuBLAS beside':>15}{'of cuBLAS':>11}{'vs rung below':>15}")
    previous, cublas_rates = None, []
    for name in (*VERSIONS, "triton"):
        library = time_rate(cublas, a, b)
        cublas_rates.append(library)
        rate = time_rate(functions[name], a, b)
        entry = versions.get(name) or result.setdefault("triton_kernel", {})
        entry.update(gflops=rate, cublas_gflops=library, vs_cublas=rate / library)
        below = f"{rate / previous:.2f}x" if previous and name != "triton" else "-"
        print(f"{name:>8}{rate:>10.0f}{library:>15.0f}{rate / library:>11.1%}{below:>15}")
        previous = rate if name != "triton" else previous
        entry["vs_previous"] = None if below == "-" else float(below[:-1])
    result["cublas_gflops"] = {"median": statistics.median(cublas_rates), "all": cublas_rates}
    print(f"cuBLAS fp32 (TF32 off): median {statistics.median(cublas_rates):.0f} GFLOP/s over "
          f"{len(cublas_rates)} timings ({min(cublas_rates):.0f} to {max(cublas_rates):.0f})")
    result["versions"] = versions

    if not args.no_sweep:
        shapes = [operands(SIZE, SIZE, SIZE, 0), operands(*SWEEP_SHAPE, 0)]
        names = "".join(f"{'x'.join(map(str, (a.shape[0], b.shape[1], a.shape[1]))):>22}" for a, b in shapes)
        print("\nother tiles (BK, WARPS_M x WARPS_N warps of 32 x 64, MIN_BLOCKS); per shape GFLOP/s, of cuBLAS, "
              "waves at the blocks an SM holds")
        print(f"{'':>5}{'BK':>4}{'warps':>7}{'min':>5}{'regs':>6}{'local':>7}{'/SM':>5}{names}{'error':>10}")
        sweep = []
        for repeat in range(args.repeat):
            for config in SWEEP if repeat % 2 == 0 else SWEEP[::-1]:
                entry = sweep_entry(*config, texts[config[0]], shapes, out) | {"pass": repeat}
                sweep.append(entry)
                print_entry(entry)
            v7 = {"version": "v7", "pass": repeat, "shapes": []}
            for a, b in shapes:
                library, rate = time_rate(cublas, a, b), time_rate(nb.sgemm_v7, a, b)
                v7["shapes"].append({"shape": [a.shape[0], b.shape[1], a.shape[1]], "gflops": rate,
                                     "cublas_gflops": library, "vs_cublas": rate / library,
                                     "columns": nb.v7_tile_columns(a.shape[0], b.shape[1], nb.SMS)})
            sweep.append(v7)
            print(f"{'v7 as the notebook launches it':>33}" + "".join(
                f"{s['gflops']:>9.0f}{s['vs_cublas']:>7.1%}{s['columns']:>6}" for s in v7["shapes"]))
        result["sweep"] = sweep

    (out / "sgemm_ladder.json").write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out / 'sgemm_ladder.json'}")
    failed = [name for name, found in errors.items() if not all(e <= 1e-5 for e in found.values())]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
