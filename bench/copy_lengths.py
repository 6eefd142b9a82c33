"""Week 1 Day 5's copy at aligned and odd lengths: one masked launch against whole blocks plus a tail launch.

    python -m bench w1d5-copy-lengths [--json FILE] [--sweep]

Both wrappers launch the same kernel (the course's masked copy). The first covers the whole length in one
launch; the second launches the whole blocks with a length that is a multiple of the block (so Triton
specialises it as divisible by 16 and may load 16 bytes at a time) and the last partial block on its own.
Each is timed with torch's device copy in the same rounds (``course.bench.time_interleaved``: synchronised,
L2 flushed before every call) on Week 1 Day 5's benchmark lengths. ``--sweep`` times the second wrapper with other
block sizes and warp counts instead, all in the same rounds as torch's copy. GPU only; on a CPU it says so and
exits 0.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

from bench import harness
from bench.harness import gpu_or_say_so, parser
from course import bench
from course import spec as specs

REPO = Path(__file__).resolve().parent.parent


BLOCK, WARPS = 4096, 16  # the reference's launch (8 warps until 2026-11-28)
SWEEP = ((4096, 8), (4096, 4), (4096, 16), (2048, 4), (8192, 8), (8192, 16), (16384, 16), (16384, 32))


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=inside), mask=inside)


def one_launch(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK_SIZE=BLOCK, num_warps=WARPS)
    return y


def whole_blocks_then_tail(x: torch.Tensor, block: int = BLOCK, warps: int = WARPS) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    whole = n - n % block
    if whole:
        _copy_kernel[(whole // block,)](x, y, whole, BLOCK_SIZE=block, num_warps=warps)
    if whole < n:
        _copy_kernel[(1,)](x[whole:], y[whole:], n - whole, BLOCK_SIZE=block, num_warps=warps)
    return y


def sweep(copy: specs.ExerciseSpec) -> list[dict]:
    """Each (block, warps) of SWEEP through ``whole_blocks_then_tail``, timed in the same rounds as torch's copy."""
    rows = []
    for (n,) in copy.bench_shapes.gpu:
        x = torch.randn(n, device="cuda")
        fns = [lambda x, b=block, w=warps: whole_blocks_then_tail(x, b, w) for block, warps in SWEEP]
        for fn, config in zip(fns, SWEEP, strict=True):
            assert torch.equal(fn(x), x), f"{config} is not a copy at {n}"
        timings = bench.time_interleaved([bench.Timed(fn, args=(x,)) for fn in fns]
                                         + [bench.Timed(torch.Tensor.clone, args=(x,))])
        rates = [bench.gbps(copy.bytes_moved((n,)), t.median_ms) for t in timings]
        rows.append({"n": n, "torch_copy_gbps": rates[-1],
                     "configs": [{"block": b, "warps": w, "gbps": r} for (b, w), r in zip(SWEEP, rates, strict=False)]})
        del x
    print(f"{'length':>12} {'torch copy':>11}  " + "  ".join(f"{b}/{w}" for b, w in SWEEP) + "  (block/warps: ratio)")
    for r in rows:
        print(f"{r['n']:>12} {r['torch_copy_gbps']:>11,.0f}  "
              + "  ".join(f"{c['gbps'] / r['torch_copy_gbps']:.3f}" for c in r["configs"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--sweep", action="store_true", help="other block sizes and warp counts")
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    copy = specs.get("w1d5.copy")
    if args.sweep:
        print(f"{info.name}: whole blocks then the tail, GB/s over torch's copy, timed in the same rounds")
        found = sweep(copy)
        harness.write_json(args.json, {"device": info.name, "sweep": found})
        return 0
    rows = []
    for (n,) in copy.bench_shapes.gpu:
        x = torch.randn(n, device="cuda")
        for fn in (one_launch, whole_blocks_then_tail):
            assert torch.equal(fn(x), x), f"{fn.__name__} is not a copy at {n}"
        timings = bench.time_interleaved([bench.Timed(one_launch, args=(x,)),
                                          bench.Timed(whole_blocks_then_tail, args=(x,)),
                                          bench.Timed(torch.Tensor.clone, args=(x,))])
        one, split, library = (bench.gbps(copy.bytes_moved((n,)), t.median_ms) for t in timings)
        rows.append({"n": n, "one_launch_gbps": one, "whole_blocks_then_tail_gbps": split, "torch_copy_gbps": library})
        del x
    print(f"{info.name}: GB/s (read + write), timed in the same rounds")
    print(f"{'length':>12} {'one launch':>11} {'ratio':>6} {'blocks+tail':>12} {'ratio':>6} {'torch copy':>11}")
    for r in rows:
        lib, one, split = r["torch_copy_gbps"], r["one_launch_gbps"], r["whole_blocks_then_tail_gbps"]
        print(f"{r['n']:>12} {one:>11,.0f} {one / lib:>6.3f} {split:>12,.0f} {split / lib:>6.3f} {lib:>11,.0f}")
    harness.write_json(args.json, {"device": info.name, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
