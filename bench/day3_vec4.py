"""Week 2 Day 3's reference kernels as the solution notebook defines them, each timed beside torch's copy, and the
shared-memory bank conflicts of its 16-byte kernel with and without the swapped order of its upper eight lanes.

    python bench/day3_vec4.py [--json FILE]

The notebook's cells are run as the notebook runs them (``padded_source`` and ``transpose_padded``), so
``transpose_padded`` is the reference's own dispatch: ``transpose_vec4`` where both sides are multiples of 64,
``transpose_salign`` where the row count is no multiple of 8, the padded kernel otherwise. Each kernel is also timed
alone where it applies, every entry in the same rounds as torch's copy (``course.bench.time_interleaved``), on the
spec's benchmark shapes; every output is compared with ``x.t()`` first. Nsight Compute then counts the bank
conflicts of one launch at 4096 x 4096 (``course.days.banks.ncu_counters``). GPU only; on a CPU it says so and
exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.script_cli import gpu_or_say_so, parser  # noqa: E402
from course import bench, cuda  # noqa: E402
from course import spec as specs  # noqa: E402
from course.days import banks  # noqa: E402

SPEC_ID = "w2d3.transpose_padded"
NOTEBOOK = REPO / "solutions" / "week2" / "day3_bank_conflicts.ipynb"


def notebook_namespace() -> dict:
    import nbformat

    import course

    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source
             for c in nbformat.read(str(NOTEBOOK), as_version=4).cells if c.cell_type == "code"}
    namespace = {"course": course, "np": np, "torch": torch, "grading": False, "SPEC": specs.get(SPEC_ID)}
    for grade_id in ("conflicted_kernel", "padded_source", "transpose_padded"):
        exec(cells[grade_id], namespace)
    return namespace


def alone(kernel, block: tuple[int, ...], grid) -> callable:
    def transpose(x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        out = torch.empty((cols, rows), device=x.device, dtype=torch.float32)
        kernel(grid(rows, cols), block, (x, out, np.int32(rows), np.int32(cols)))
        return out

    return transpose


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    ns = notebook_namespace()
    tile, rows_per_pass = ns["TILE"], ns["ROWS"]
    no_swap_source = ns["TRANSPOSE_VEC4_SOURCE"].replace("swap = (lane & 8) ? 2 : 0", "swap = 0")
    no_swap = cuda.compile(no_swap_source, options=ns["TRANSPOSE_OPTIONS"]).get_function("transpose_vec4")
    vec4_grid = lambda r, c: (c // 64, r // 64)  # noqa: E731
    variants = {
        "reference dispatch": (ns["transpose_padded"], lambda r, c: True),
        "padded 32x33": (alone(ns["transpose_padded_kernel"], (tile, rows_per_pass),
                               lambda r, c: (cuda.cdiv(c, tile), cuda.cdiv(r, tile))), lambda r, c: True),
        "salign": (alone(ns["transpose_salign_kernel"], (tile * rows_per_pass,),
                         lambda r, c: (cuda.cdiv(c, tile), cuda.cdiv(r + 7, tile))), lambda r, c: True),
        "vec4": (alone(ns["transpose_vec4_kernel"], (256,), vec4_grid), lambda r, c: r % 64 == 0 and c % 64 == 0),
        "vec4 without the swap": (alone(no_swap, (256,), vec4_grid), lambda r, c: r % 64 == 0 and c % 64 == 0),
    }
    spec = specs.get(SPEC_ID)
    report: dict = {"device": info.name, "ratios": {}, "ncu": {}}
    for shape in spec.bench_shapes.gpu:
        rows, cols = shape
        x = torch.randn(rows, cols, device="cuda")
        names = [name for name, (_, applies) in variants.items() if applies(rows, cols)]
        for name in names:
            assert torch.equal(variants[name][0](x), x.t()), f"{name} is not a transpose at {shape}"
        timings = bench.time_interleaved([bench.Timed(variants[n][0], args=(x,)) for n in names]
                                         + [bench.Timed(torch.Tensor.clone, args=(x,))])
        copy_ms = timings[-1].median_ms
        found = {n: copy_ms / t.median_ms for n, t in zip(names, timings, strict=False)}
        report["ratios"][f"{rows}x{cols}"] = {**found, "copy GB/s": bench.gbps(8 * x.numel(), copy_ms)}
        print(f"{info.name} {rows}x{cols}: " + "  ".join(f"{n} {v:.3f}" for n, v in found.items())
              + f"  (torch copy {bench.gbps(8 * x.numel(), copy_ms):,.0f} GB/s)", flush=True)
        del x
    job = {"n": 4096, "tile": 64, "block": [256], "kernels": [
        {"name": "transpose_vec4", "source": source, "options": list(ns["TRANSPOSE_OPTIONS"])}
        for source in (ns["TRANSPOSE_VEC4_SOURCE"], no_swap_source)]}
    for label, kernel in zip(("vec4", "vec4 without the swap"), job["kernels"], strict=True):
        try:
            counters = banks.ncu_counters({**job, "kernels": [kernel]})
        except Exception as why:  # no ncu or no permission on this machine
            print(f"ncu: {label}: {type(why).__name__}: {why}")
            continue
        report["ncu"][label] = counters["transpose_vec4"]
        print(f"ncu at 4096^2, {label}: " + ", ".join(f"{k.split('__')[1]} {v:,.0f}"
                                                      for k, v in counters["transpose_vec4"].items()))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
