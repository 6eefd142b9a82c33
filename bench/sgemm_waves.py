"""Why v5 and v6a tie at 3000 x 2000 x 1500: the SGEMM ladder's 128 x 128 rungs, wave by wave.

Run on a GPU machine with CuPy, from the repository root:

    python bench/sgemm_waves.py [--json FILE]

At 3000 x 2000 x 1500 a 128 x 128 tile makes 24 x 16 = 384 blocks. With two blocks an SM (132 SMs: 264 at
once) that is one full wave of blocks sharing their SM and a tail of 120 blocks that each have an SM alone.
This script times the notebook's v5, v6a and v6b, and variants of them (other ``__launch_bounds__``, the inner
loop unrolled less), at 4096^3, at that shape, and at K = 1500 with grids of exactly 264 blocks (the full
wave) and 120 blocks (the tail), with the registers, spilled bytes and blocks an SM of each build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench import sgemm_ladder_gpu as ladder  # noqa: E402
from bench.script_cli import gpu_or_say_so, parser  # noqa: E402

# The full wave and the tail of 3000 x 2000 x 1500 at two blocks an SM, as grids of their own.
SHAPES = ((4096, 4096, 4096), (3000, 2000, 1500), (22 * 128, 12 * 128, 1500), (12 * 128, 10 * 128, 1500))
K_LOOP = "        #pragma unroll\n        for (int k = 0; k < BK; ++k) {"


def variants(texts: dict[str, str]) -> list[tuple[str, str, str, int, int]]:
    """(label, rung, source, BK, MIN_BLOCKS) on 4 x 2 warps: the notebook's builds first, then one change each."""
    found = [(rung, rung, texts[rung], 8, 2) for rung in ("v5", "v6a", "v6b")]
    found += [(f"{rung} MIN_BLOCKS=1", rung, texts[rung], 8, 1) for rung in ("v5", "v6a", "v6b")]
    for rung in ("v6a", "v6b"):
        assert K_LOOP in texts[rung], f"{rung}'s inner loop is not where this script expects it"
        for unroll in (4, 2):
            edited = texts[rung].replace(K_LOOP, K_LOOP.replace("#pragma unroll", f"#pragma unroll {unroll}"))
            found.append((f"{rung} k-loop unroll {unroll}", rung, edited, 8, 2))
    found.append(("v6b BK=16 MIN_BLOCKS=1", "v6b", texts["v6b"], 16, 1))
    return found


def main() -> int:
    args = parser(__doc__).parse_args()
    if gpu_or_say_so() is None:
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    inputs = [ladder.operands(*shape, 0) for shape in SHAPES]
    rows: list[dict[str, Any]] = []
    header = "".join(f"{'x'.join(map(str, s)):>24}" for s in SHAPES)
    print(f"{'':>26}{'regs':>5}{'local':>6}{'/SM':>4}{header}   (GFLOP/s, ms)")
    for label, rung, source, bk, min_blocks in variants(ladder.sources()):
        launch, options, _ = ladder.sweep_launcher(rung, source, bk, 4, 2, min_blocks)
        x, y = ladder.operands(1000, 1030, 515, 0)
        error = ladder.relative_error(launch(x, y), x.double() @ y.double())
        row: dict[str, Any] = {"label": label, "options": list(options), "error": error,
                               **ladder.resources(launch.kernel, 256), "shapes": []}
        for shape, (a, b) in zip(SHAPES, inputs, strict=True):
            rate = ladder.time_rate(launch, a, b) if error <= 1e-5 else 0.0
            ms = 2.0 * a.shape[0] * b.shape[1] * a.shape[1] / rate / 1e9 * 1e3 if rate else float("nan")
            row["shapes"].append({"shape": list(shape), "gflops": rate, "ms": ms})
        rows.append(row)
        cells = "".join(f"{s['gflops']:>14.0f}{s['ms']:>10.3f}" for s in row["shapes"])
        print(f"{label:>26}{row['registers']:>5}{row['local_bytes']:>6}{row['blocks_per_sm']:>4}{cells}")
    library = [{"shape": list(shape), "gflops": ladder.time_rate(ladder.cublas, a, b)}
               for shape, (a, b) in zip(SHAPES, inputs, strict=True)]
    print(f"{'cuBLAS fp32':>41}" + "".join(f"{s['gflops']:>14.0f}{'':>10}" for s in library))
    print("\nthe full wave plus the tail against the whole shape (ms):")
    for row in rows:
        whole, wave, tail = (row["shapes"][i]["ms"] for i in (1, 2, 3))
        print(f"{row['label']:>26}  {wave:.3f} + {tail:.3f} = {wave + tail:.3f}  (3000x2000x1500: {whole:.3f})")
    if args.json:
        args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows,
                                         "cublas": library}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
