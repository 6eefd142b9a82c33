"""Week 1 Day 7's fp32 matmul (``tl.dot``, ``input_precision="ieee"``): tiles, warps, stages and a grouped program
order swept, each beside the spec's cuBLAS fp32 baseline in the same rounds.

    python bench/matmul_fp32_sweep.py [--json FILE]

The kernel is the course's reference with one addition: ``GROUP_M`` > 1 maps the grid's program ids to tiles in
groups of ``GROUP_M`` rows of tiles, so that programs running at the same time share tiles of A and B in L2. GPU
only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.script_cli import gpu_or_say_so, parser  # noqa: E402
from course import bench  # noqa: E402
from course import spec as specs  # noqa: E402
from course.spec import geometric_mean  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, GROUP_M); the first is the reference's launch.
LAUNCHES = [(64, 64, 32, 4, 3, 1), (64, 64, 32, 4, 3, 8), (64, 64, 16, 4, 4, 8), (128, 64, 32, 4, 3, 8),
            (64, 128, 32, 4, 3, 8), (128, 128, 32, 8, 3, 8), (128, 128, 16, 8, 4, 8), (128, 128, 32, 8, 2, 8),
            (128, 64, 32, 8, 3, 8), (64, 128, 32, 8, 3, 8), (128, 256, 16, 8, 3, 8), (256, 128, 16, 8, 3, 8),
            (128, 128, 64, 8, 2, 8), (64, 64, 64, 4, 2, 8), (32, 64, 32, 4, 4, 8), (128, 128, 32, 16, 3, 8)]


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < M, cols < N
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc, mask=row_ok[:, None] & col_ok[None, :])


def launcher(bm: int, bn: int, bk: int, warps: int, stages: int, group: int):
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                             c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps,
                             num_stages=stages)
        return c

    return matmul


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    spec = specs.get("w1d7.matmul_fp32")
    functions = [("x".join(map(str, launch[:3])) + f" w{launch[3]} s{launch[4]} g{launch[5]}", launcher(*launch))
                 for launch in LAUNCHES]
    shapes = list(spec.bench_shapes.gpu)
    table: dict[str, dict[str, float]] = {name: {} for name, _ in functions}
    for shape in shapes:
        inputs = spec.make_inputs(shape, 1, "cuda")
        reference = spec.baseline(inputs)
        usable = []
        for name, fn in functions:
            try:
                out = fn(*inputs)
            except Exception as error:  # a launch this GPU cannot run (shared memory): left out, named
                print(f"{name} at {shape}: {type(error).__name__}: {str(error)[:120]}")
                continue
            if not torch.allclose(out, reference, rtol=1e-3, atol=1e-2):
                print(f"{name} at {shape}: wrong")
                continue
            usable.append((name, fn))
        timings = bench.time_interleaved([bench.Timed(fn, args=inputs) for _, fn in usable]
                                         + [bench.Timed(spec.baseline, args=(inputs,))])
        for (name, _), timing in zip(usable, timings[:-1], strict=True):
            table[name]["x".join(map(str, shape))] = timings[-1].median_ms / timing.median_ms
        del inputs, reference
    keys = ["x".join(map(str, s)) for s in shapes]
    print(f"{info.name}: each launch's GFLOP/s over cuBLAS fp32's (the spec's baseline), same rounds")
    print(f"{'launch':<26}" + "".join(f"{k:>16}" for k in keys) + f"{'geomean':>10}")
    for name, ratios in table.items():
        values = [ratios.get(k, float('nan')) for k in keys]
        print(f"{name:<26}" + "".join(f"{v:>16.3f}" for v in values) + f"{geometric_mean(values):>10.3f}")
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "ratios": table}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
