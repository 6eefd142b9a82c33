"""Why the bench scripts and the judge disagree on the odd transpose shapes: fresh inputs, or how many entries share
the rounds?

    python bench/odd_timing_rules.py [--all] [--json FILE]

On an H200 the judge timed Week 2 Day 3's sector-aligned kernel at 0.851 of torch's copy at 3001 x 5003 and
``bench/transpose_odd_w2d3.py`` at 0.743; Day 2's at 5003 x 12007, 0.895 against 0.803 (bench/RESULTS.md, session
20). Both time with ``course.bench.time_interleaved``. The judge gives every call fresh inputs and times three
entries a round (student, reference, library); the bench scripts reuse one input and time eight to ten. The judge's
replay also makes each output buffer before the timed call and fills it with NaN (the library's copy allocates its
own). This times the same kernels (Day 3: the padded reference and ``salign 32/256``; Day 2: the tiled kernel and
``salign 64x64``) beside torch's copy under each combination, then with outputs made and poisoned ahead (the copy
too) (``--all``; by default fixed inputs only), and prints each kernel's ratio to the copy. Day 3 also times the
solution notebook's own ``transpose_salign``. GPU only; on a
CPU it says so and exits 0.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.script_cli import gpu_or_say_so, parser  # noqa: E402
from course import bench, cuda  # noqa: E402


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook_salign():
    """The Week 2 Day 3 reference's ``transpose_salign`` as the solution notebook compiles and launches it."""
    import nbformat
    import numpy as np

    from grader.kernel_build.build_cuda import string_constants

    nb = nbformat.read(str(REPO / "solutions" / "week2" / "day3_bank_conflicts.ipynb"), as_version=4)
    sources = string_constants([c.source for c in nb.cells if c.cell_type == "code"]).values()
    source = next(s for s in sources if "transpose_salign" in s)
    kernel = cuda.compile(source, options=("-DTILE=32", "-DROWS=8")).get_function("transpose_salign")

    def transpose(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        rows, cols = x.shape
        if out is None:
            out = torch.empty((cols, rows), device=x.device, dtype=torch.float32)
        kernel((cuda.cdiv(cols, 32), cuda.cdiv(rows + 7, 32)), (256,), (x, out, np.int32(rows), np.int32(cols)))
        return out

    return transpose


def kernels() -> dict[str, tuple[tuple[int, int], dict]]:
    w2d3, w2d2 = _module("transpose_odd_w2d3"), _module("transpose_odd_w2d2")
    day3 = {"padded": w2d3.reference(32, 8), "salign": w2d3.salign(32, 256, False),
            "notebook's salign": notebook_salign()}
    day2 = {"tile": w2d2.transposer(w2d2._tile_kernel, 64, 64, 4),
            "salign": w2d2.transposer(w2d2._salign_kernel, 64, 64, 4, halo=True)}
    return {"day3 3001x5003": ((3001, 5003), day3), "day3 4096x4096": ((4096, 4096), day3),
            "day2 5003x12007": ((5003, 12007), day2)}


def ratios(shape: tuple[int, int], functions: dict, fresh: bool, fillers: int, poisoned: bool = False
           ) -> dict[str, float]:
    """Each function's ratio to torch's copy, ``fillers`` extra copies of the first function sharing the rounds.
    ``poisoned``: each call writes into an output made and filled with NaN before the flush, as the judge's replay
    prepares it (the copy too: ``copy_`` into such a buffer), instead of one it allocates itself."""
    x = torch.randn(shape, device="cuda")

    def timed(fn):
        if poisoned:
            out_shape = shape if fn is torch.Tensor.clone else shape[::-1]
            call = (lambda a, out: out.copy_(a)) if fn is torch.Tensor.clone else fn
            return bench.Timed(call, lambda i: (torch.randn(shape, device="cuda") if fresh else x,
                                                torch.full(out_shape, float("nan"), device="cuda")))
        if fresh:
            return bench.Timed(fn, lambda i: (torch.randn(shape, device="cuda"),))
        return bench.Timed(fn, args=(x,))

    names = list(functions) + ["torch copy"]
    fns = list(functions.values()) + [torch.Tensor.clone]
    filler = [timed(fns[0]) for _ in range(fillers)]
    timings = bench.time_interleaved([timed(fn) for fn in fns] + filler)
    copy_ms = timings[len(fns) - 1].median_ms
    found = {name: copy_ms / t.median_ms for name, t in zip(names[:-1], timings, strict=False)}
    return {**found, "copy GB/s": bench.gbps(2 * x.numel() * x.element_size(), copy_ms)}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--all", action="store_true", help="every setup (default: fixed inputs, one entry each)")
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    found: dict[str, dict[str, dict[str, float]]] = {}
    for case, (shape, functions) in kernels().items():
        modes = [(fresh, fillers, False) for fresh in (False, True) for fillers in (0, 6)]
        for fresh, fillers, poisoned in (modes + [(True, 0, True), (True, 0, False)] if args.all else modes[:1]):
            mode = f"{'fresh' if fresh else 'fixed'} inputs, {len(functions) + 1 + fillers} entries"
            mode += ", outputs made and poisoned ahead" if poisoned else ""
            found.setdefault(case, {})[mode] = ratios(shape, functions, fresh, fillers, poisoned)
            values = "  ".join(f"{k} {v:.3f}" if v < 100 else f"{k} {v:.0f}" for k, v in found[case][mode].items())
            print(f"{info.name}  {case:<16} {mode:<50} {values}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "ratios": found}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
