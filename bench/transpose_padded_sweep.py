"""Week 2 Day 3's padded transpose: the reference's loops against fixed-trip loops, more rows per thread and two
tiles per block, each beside torch's copy in the same rounds.

    python bench/transpose_padded_sweep.py [--json FILE]

Every variant keeps the day's technique (a shared tile padded by one column, so a warp reading a column of it
touches 32 banks). What changes is how many loads each thread has in flight before the barrier: the reference's
loop starts at ``threadIdx.y``, so the compiler cannot count its trips and issues one load after another; a loop
over a constant count unrolls, and every load is issued before the first store to shared memory. GPU only; on a CPU
it says so and exits 0.
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
from course.spec import geometric_mean  # noqa: E402

REFERENCE = r"""
extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    int c = blockIdx.x * TILE + threadIdx.x;
    for (int k = threadIdx.y; k < TILE; k += ROWS) {
        int r = blockIdx.y * TILE + k;
        if (r < rows && c < cols) tile[k][threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();
    int r = blockIdx.y * TILE + threadIdx.x;
    for (int k = threadIdx.y; k < TILE; k += ROWS) {
        int c_out = blockIdx.x * TILE + k;
        if (c_out < cols && r < rows) out[(size_t)c_out * rows + r] = tile[threadIdx.x][k];
    }
}
"""

# TX tiles side by side per block; each loop runs TILE / ROWS times, a count the compiler knows.
FIXED_TRIPS = r"""
extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
    __shared__ float tile[TX][TILE][TILE + 1];
    #pragma unroll
    for (int t = 0; t < TX; ++t) {
        int c = (blockIdx.x * TX + t) * TILE + threadIdx.x;
        #pragma unroll
        for (int j = 0; j < TILE / ROWS; ++j) {
            int k = threadIdx.y + j * ROWS;
            int r = blockIdx.y * TILE + k;
            if (r < rows && c < cols) tile[t][k][threadIdx.x] = in[(size_t)r * cols + c];
        }
    }
    __syncthreads();
    int r = blockIdx.y * TILE + threadIdx.x;
    #pragma unroll
    for (int t = 0; t < TX; ++t) {
        #pragma unroll
        for (int j = 0; j < TILE / ROWS; ++j) {
            int k = threadIdx.y + j * ROWS;
            int c_out = (blockIdx.x * TX + t) * TILE + k;
            if (c_out < cols && r < rows) out[(size_t)c_out * rows + r] = tile[t][threadIdx.x][k];
        }
    }
}
"""

# (name, source, tile, rows per pass, tiles per block)
VARIANTS = [
    ("reference loops 32x8", REFERENCE, 32, 8, 1),
    ("fixed trips 32x8", FIXED_TRIPS, 32, 8, 1),
    ("fixed trips 32x4", FIXED_TRIPS, 32, 4, 1),
    ("fixed trips 32x16", FIXED_TRIPS, 32, 16, 1),
    ("fixed trips 32x8, 2 tiles", FIXED_TRIPS, 32, 8, 2),
    ("fixed trips 32x4, 2 tiles", FIXED_TRIPS, 32, 4, 2),
    ("fixed trips 64x8", FIXED_TRIPS, 64, 8, 1),
    ("fixed trips 64x16", FIXED_TRIPS, 64, 16, 1),
]


def wrapper(source: str, tile: int, rows_per_pass: int, tiles: int):
    options = (f"-DTILE={tile}", f"-DROWS={rows_per_pass}", f"-DTX={tiles}")
    kernel = cuda.compile(source, options=options).get_function("transpose_padded")

    def transpose(x: torch.Tensor) -> torch.Tensor:
        rows, cols = x.shape
        out = torch.empty((cols, rows), device=x.device, dtype=torch.float32)
        grid = (cuda.cdiv(cols, tile * tiles), cuda.cdiv(rows, tile))
        kernel(grid, (tile, rows_per_pass), (x, out, np.int32(rows), np.int32(cols)))
        return out

    return transpose


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    spec = specs.get("w2d3.transpose_padded")
    functions = [(name, wrapper(source, tile, rows, tiles)) for name, source, tile, rows, tiles in VARIANTS]
    table: dict[str, dict[str, float]] = {name: {} for name, _ in functions}
    shapes = [shape for shape in spec.bench_shapes.gpu]
    for shape in shapes:
        x = torch.randn(shape, device="cuda")
        for name, fn in functions:
            assert torch.equal(fn(x), x.t()), f"{name} is wrong at {shape}"
        entries = [bench.Timed(fn, args=(x,)) for _, fn in functions] + [bench.Timed(torch.Tensor.clone, args=(x,))]
        timings = bench.time_interleaved(entries)
        copy_ms = timings[-1].median_ms
        for (name, _), timing in zip(functions, timings[:-1], strict=True):
            table[name]["x".join(map(str, shape))] = copy_ms / timing.median_ms
        del x
    keys = ["x".join(map(str, s)) for s in shapes]
    print(f"{info.name}: each variant's bandwidth over torch's copy of the same matrix, same rounds")
    print(f"{'variant':<28}" + "".join(f"{k:>12}" for k in keys) + f"{'geomean':>10}")
    for name, ratios in table.items():
        values = [ratios[k] for k in keys]
        print(f"{name:<28}" + "".join(f"{v:>12.3f}" for v in values) + f"{geometric_mean(values):>10.3f}")
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "ratios": table}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
