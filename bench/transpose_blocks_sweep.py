"""Week 2 Day 2's tiled transpose: its tile shape and warps swept, each beside torch's copy in the same rounds.

    python bench/transpose_blocks_sweep.py [--json FILE]

The kernel is the course's (one BLOCK_M x BLOCK_N tile per program, loaded along rows, stored transposed); only
the launch changes. GPU only; on a CPU it says so and exits 0.
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

# (BLOCK_M, BLOCK_N, num_warps); the first is the reference's launch.
LAUNCHES = [(64, 64, 4), (64, 64, 8), (32, 32, 4), (32, 128, 4), (128, 32, 4), (128, 64, 4), (64, 128, 4),
            (128, 128, 8), (128, 128, 4), (64, 256, 8), (256, 64, 8)]


@triton.jit
def _transpose_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn,
                   mask=(rows[:, None] < M) & (cols[None, :] < N))
    tl.store(out_ptr + cols[:, None] * stride_om + rows[None, :] * stride_on, tl.trans(tile),
             mask=(cols[:, None] < N) & (rows[None, :] < M))


def launcher(block_m: int, block_n: int, warps: int):
    def transpose(x: torch.Tensor) -> torch.Tensor:
        M, N = x.shape
        out = torch.empty((N, M), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
        _transpose_kernel[grid](x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                                BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps)
        return out

    return transpose


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    spec = specs.get("w2d2.transpose")
    functions = [(f"{m}x{n} w{w}", launcher(m, n, w)) for m, n, w in LAUNCHES]
    shapes = list(spec.bench_shapes.gpu)
    table: dict[str, dict[str, float]] = {name: {} for name, _ in functions}
    for shape in shapes:
        x = torch.randn(shape, device="cuda")
        for name, fn in functions:
            assert torch.equal(fn(x), x.t()), f"{name} is wrong at {shape}"
        timings = bench.time_interleaved([bench.Timed(fn, args=(x,)) for _, fn in functions]
                                         + [bench.Timed(torch.Tensor.clone, args=(x,))])
        for (name, _), timing in zip(functions, timings[:-1], strict=True):
            table[name]["x".join(map(str, shape))] = timings[-1].median_ms / timing.median_ms
        del x
    keys = ["x".join(map(str, s)) for s in shapes]
    print(f"{info.name}: each launch's bandwidth over torch's copy of the same matrix, same rounds")
    print(f"{'launch':<16}" + "".join(f"{k:>12}" for k in keys) + f"{'geomean':>10}")
    for name, ratios in table.items():
        values = [ratios[k] for k in keys]
        print(f"{name:<16}" + "".join(f"{v:>12.3f}" for v in values) + f"{geometric_mean(values):>10.3f}")
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "ratios": table}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
