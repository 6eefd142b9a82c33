"""GPU measurements for Week 3, Days 1-3: each reference solution against its library, in the same rounds.

From the repository root, on a GPU:

    python bench/week3_references.py --json out.json [--tune] [--commit SHA]

For every graded function of Days 1-3 (vector_sum, row_max, softmax, rmsnorm, rmsnorm_dx, rmsnorm_dw) and every
benchmark shape of its spec, the reference from the solution notebook and the spec's library baseline
(``torch.sum``, ``torch.amax``, ``torch.softmax``, torch's fused RMSNorm kernels) are timed interleaved, one call of
each per round (course.bench: L2 flushed before every call, fresh inputs, medians), and the script prints GB/s of
the spec's bytes and the reference's fraction of the library. ``--tune`` first sweeps the notebook's tuning knobs
(block sizes, warps, programs per SM) on the same shapes, prints each variant's fraction and times the table with
the best variant of each group (the JSON names the knobs used). Every output of the reference is checked against
the spec's reference before timing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import torch

import course
from course import bench
from course.check import relative_error
from course.spec import geometric_mean, get

REPO = Path(__file__).resolve().parent.parent
RULES = {"min_repeats": 10, "min_seconds": 0.3, "max_seconds": 0.7, "warmup": 2}
TUNE_RULES = {"min_repeats": 8, "min_seconds": 0.1, "max_seconds": 0.3, "warmup": 1}


def notebook_module(notebook: str, cells: tuple[str, ...]) -> ModuleType:
    """The named cells of a Week 3 solution notebook, run as a module (Triton needs its kernels in a file)."""
    nb = nbformat.read(str(REPO / "solutions" / "week3" / f"{notebook}.ipynb"), as_version=4)
    sources = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    path = Path(tempfile.mkdtemp()) / f"{notebook}_solution.py"
    # grading = True: the notebook's own measurement cells skip their timings, as under the grader.
    text = "\n\n".join([sources["parameters"], "grading = True", *(sources[name] for name in ("setup", *cells))])
    path.write_text(text, encoding="utf-8")
    loaded = importlib.util.spec_from_file_location(f"{notebook}_solution", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def compare(spec_id: str, fn: Callable[..., Any], label: str = "reference", rules: dict[str, Any] = RULES
            ) -> list[dict[str, Any]]:
    """The reference ``fn`` and the spec's library on every benchmark shape, interleaved; one row per shape."""
    spec = get(spec_id)
    rows = []
    for shape in spec.bench_shapes.gpu:
        inputs = spec.make_inputs(shape, 1, "cuda")
        error = relative_error(fn(*inputs), spec.reference(inputs))
        timings = bench.time_interleaved(
            [bench.Timed(fn, args=inputs), bench.Timed(lambda *a: spec.library(a), args=inputs)], **rules)
        ours, library = (spec.work(shape) / t.median_ms / 1e6 for t in timings)
        rows.append({"exercise": spec_id, "variant": label, "shape": list(shape), "gbps": ours,
                     "library_gbps": library, "ratio": ours / library, "relative_error": error,
                     "tolerance": spec.tolerance, "library": spec.library_name})
        print(f"{spec_id:<18}{label:<34}{spec.shape_label(shape):<26}{ours:>8.0f} GB/s{library:>8.0f} GB/s"
              f"{ours / library:>7.3f}   err {error:.1e}", flush=True)
        del inputs
        torch.cuda.empty_cache()
    return rows


def _set(module: ModuleType, **knobs: Any) -> str:
    for name, value in knobs.items():
        setattr(module, name, value)
    return ",".join(f"{k}={v}" for k, v in knobs.items())


def tune(d1: ModuleType, d2: ModuleType, d3: ModuleType) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    try:
        rows += _tune(d1, d2, d3, rows)
    except Exception as error:  # keep what was measured
        print(f"tuning stopped: {type(error).__name__}: {error}"[:400], flush=True)
    return rows


def _best(rows: list[dict[str, Any]], spec_id: str) -> str:
    """The variant of ``spec_id`` with the highest geometric mean of its ratios to the library."""
    variants = dict.fromkeys(r["variant"] for r in rows if r["exercise"] == spec_id and "=" in r["variant"])
    return max(variants, key=lambda v: geometric_mean([r["ratio"] for r in rows
                                                       if r["exercise"] == spec_id and r["variant"] == v]))


def _adopt(module: ModuleType, label: str) -> None:
    _set(module, **{k: int(v) for k, v in (pair.split("=") for pair in label.split(","))})


def _tune(d1: ModuleType, d2: ModuleType, d3: ModuleType, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each knob group's variants on the benchmark shapes; the best one (geometric mean over the library) is kept
    in the module for the table that follows."""
    def run(spec_id: str, fn: Callable[..., Any], label: str) -> None:
        rows.extend(compare(spec_id, fn, label, TUNE_RULES))

    for block, warps, per_sm in ((4096, 8, 4), (8192, 8, 4), (8192, 16, 2)):
        run("w3d1.vector_sum", d1.vector_sum, _set(d1, SUM_BLOCK=block, SUM_WARPS=warps, SUM_PROGRAMS_PER_SM=per_sm))
    _adopt(d1, _best(rows, "w3d1.vector_sum"))
    run("w3d1.vector_sum", d1.atomic_sum, "one atomic per block of 4096")
    for block, warps in ((1024, 4), (2048, 8), (4096, 16)):
        run("w3d1.row_max", d1.row_max, _set(d1, MAX_BLOCK=block, MAX_WARPS=warps))
    _adopt(d1, _best(rows, "w3d1.row_max"))
    for limit, row_warps, block, warps in ((16384, 16, 4096, 8), (16384, 8, 2048, 8), (32768, 16, 8192, 16)):
        label = _set(d2, ROW_BLOCK_MAX=limit, ROW_WARPS=row_warps, ONLINE_BLOCK=block, ONLINE_WARPS=warps)
        run("w3d2.softmax", d2.softmax, label)
    _adopt(d2, _best(rows, "w3d2.softmax"))
    for per_1024 in (1, 2):
        run("w3d3.rmsnorm", d3.rmsnorm, _set(d3, NORM_WARPS_PER_1024=per_1024))
    forward = _best(rows, "w3d3.rmsnorm")
    for per_sm in (1, 2, 4):
        run("w3d3.rmsnorm_dx", d3.rmsnorm_dx, _set(d3, BWD_PROGRAMS_PER_SM=per_sm))
    _adopt(d3, _best(rows, "w3d3.rmsnorm_dx"))
    _adopt(d3, forward)
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows, with date, GPU, commit and command, here")
    parser.add_argument("--tune", action="store_true", help="sweep the notebooks' tuning knobs first")
    parser.add_argument("--commit", default="", help="the commit measured (the GPU copy has no git history)")
    args = parser.parse_args(argv)
    device = course.device.configure("gpu")
    d1 = notebook_module("day1_reductions", ("sum_kernels", "max_kernels", "measure_sums"))
    d2 = notebook_module("day2_fused_softmax", ("softmax_kernels",))
    d3 = notebook_module("day3_norms", ("forward_kernels", "backward_kernels"))
    defaults = {m: {k: getattr(m, k) for k in dir(m) if k.isupper() and isinstance(getattr(m, k), int)}
                for m in (d1, d2, d3)}
    tuned = tune(d1, d2, d3) if args.tune else []
    knobs = {m.__name__: {k: getattr(m, k) for k in defaults[m]} for m in defaults}
    print("\nThe references with these knobs (the notebooks' own, or the best of --tune):", knobs)
    rows: list[dict[str, Any]] = []
    for spec_id, fn in (("w3d1.vector_sum", d1.vector_sum), ("w3d1.row_max", d1.row_max),
                        ("w3d2.softmax", d2.softmax), ("w3d3.rmsnorm", d3.rmsnorm),
                        ("w3d3.rmsnorm_dx", d3.rmsnorm_dx), ("w3d3.rmsnorm_dw", d3.rmsnorm_dw)):
        try:
            rows += compare(spec_id, fn)
        except Exception as error:  # one exercise's failure (e.g. a library op this torch lacks) ends only its rows
            print(f"{spec_id}: {type(error).__name__}: {error}"[:400], flush=True)
    summary = {spec_id: geometric_mean([r["ratio"] for r in rows if r["exercise"] == spec_id])
               for spec_id in dict.fromkeys(r["exercise"] for r in rows)}
    for spec_id, ratio in summary.items():
        print(f"{spec_id:<18} geometric mean of the reference over the library: {ratio:.3f}")
    if args.json:
        command = "python bench/week3_references.py " + " ".join(argv or sys.argv[1:])
        record = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "gpu": device.name,
                  "commit": args.commit, "command": command,
                  "torch": torch.__version__, "triton": __import__("triton").__version__,
                  "knobs": knobs, "rows": rows, "geometric_means": summary, "tuning": tuned}
        args.json.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
