"""Week 1 Day 5's copy at aligned and odd lengths: one masked launch against whole blocks plus a tail launch.

    python bench/copy_lengths.py [--json FILE]

Both wrappers launch the same kernel (the course's masked copy). The first covers the whole length in one
launch; the second launches the whole blocks with a length that is a multiple of the block (so Triton
specialises it as divisible by 16 and may load 16 bytes at a time) and the last partial block on its own.
Each is timed with torch's device copy in the same rounds (``course.bench.time_interleaved``: synchronised,
L2 flushed before every call) on Week 1 Day 5's benchmark lengths. GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from course import bench, device  # noqa: E402
from course import spec as specs  # noqa: E402

BLOCK, WARPS = 4096, 8


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=inside), mask=inside)


def one_launch(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _copy_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK_SIZE=BLOCK, num_warps=WARPS)
    return y


def whole_blocks_then_tail(x: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    y = torch.empty_like(x)
    whole = n - n % BLOCK
    if whole:
        _copy_kernel[(whole // BLOCK,)](x, y, whole, BLOCK_SIZE=BLOCK, num_warps=WARPS)
    if whole < n:
        _copy_kernel[(1,)](x[whole:], y[whole:], n - whole, BLOCK_SIZE=BLOCK, num_warps=WARPS)
    return y


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    info = device.configure("auto")
    if not info.has_gpu:
        print(f"no GPU: nothing measured ({bench.NO_GPU})")
        return 0
    copy = specs.get("w1d5.copy")
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
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "rows": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
