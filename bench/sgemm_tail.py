"""Where each block of the SGEMM ladder's 128 x 128 rungs ran at 3000 x 2000 x 1500: SM, start and end.

Run on a GPU machine with CuPy, from the repository root:

    python -m bench sgemm-tail [--json FILE]

Each notebook source is compiled with two lines added: thread 0 of every block writes its SM (``%smid``)
and the global timer at the block's start and, after a last barrier, at its end. The script then says how
the 384 blocks were spread: how many SMs ran two blocks at once, when the blocks after the first 264
(two an SM on 132 SMs) started, and how many SMs ran those tail blocks in pairs.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch

from bench import harness
from bench.harness import gpu_or_say_so, parser
from bench.sgemm_ladder_gpu import sources

REPO = Path(__file__).resolve().parent.parent


SHAPE = (3000, 2000, 1500)
TRACE = r"""
__device__ unsigned long long block_trace[3 * 65536];
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
"""
START = """
    const unsigned block_id = blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        block_trace[3 * block_id] = sm;
        block_trace[3 * block_id + 1] = now_ns();
    }
"""
END = """
    __syncthreads();
    if (threadIdx.x == 0) block_trace[3 * block_id + 2] = now_ns();
}
"""


def traced(source: str, rung: str) -> str:
    """The rung's source with the trace: its kernel is the last function, so its body ends the source."""
    head, body = source.split(f"sgemm_{rung}(", 1)
    signature, rest = body.split("{", 1)
    rest = rest.rstrip()
    assert rest.endswith("}"), f"{rung}: the kernel is not the source's last function"
    return TRACE + head + f"sgemm_{rung}(" + signature + "{" + START + rest[:-1] + END


def run(rung: str, source: str, options: tuple[str, ...]) -> list[tuple[int, float, float]]:
    import cupy

    module = cupy.RawModule(code=traced(source, rung), options=options)
    kernel = module.get_function(f"sgemm_{rung}")
    m, n, k = SHAPE
    a = cupy.random.standard_normal((m, k), dtype=cupy.float32)
    b = cupy.random.standard_normal((k, n), dtype=cupy.float32)
    c = cupy.empty((m, n), dtype=cupy.float32)
    grid = ((n + 127) // 128, (m + 127) // 128)
    for _ in range(3):  # the last launch is the one read
        kernel(grid, (256,), (a, b, c, cupy.int32(m), cupy.int32(n), cupy.int32(k)))
    cupy.cuda.Device().synchronize()
    assert float(cupy.abs(c - a @ b).max()) < 1e-2 * k ** 0.5, f"{rung}: wrong product"
    blocks = grid[0] * grid[1]
    trace = module.get_global("block_trace")
    raw = cupy.ndarray((3 * blocks,), dtype=cupy.uint64, memptr=trace).get()
    first = min(int(raw[3 * i + 1]) for i in range(blocks))
    return [(int(raw[3 * i]), (int(raw[3 * i + 1]) - first) / 1e3, (int(raw[3 * i + 2]) - first) / 1e3)
            for i in range(blocks)]


def summary(blocks: list[tuple[int, float, float]]) -> dict[str, Any]:
    """How the blocks were spread over the SMs, in microseconds from the first block's start."""
    starts = sorted(start for _, start, _ in blocks)
    first_end = min(end for _, _, end in blocks)
    tail = [(sm, start, end) for sm, start, end in blocks if start >= first_end]
    first_wave = [(sm, start, end) for sm, start, end in blocks if start < first_end]
    sms_tail: dict[int, int] = {}
    for sm, _, _ in tail:
        sms_tail[sm] = sms_tail.get(sm, 0) + 1
    return {
        "blocks": len(blocks), "sms": len({sm for sm, _, _ in blocks}),
        "started_before_first_end": len(first_wave), "tail_blocks": len(tail),
        "tail_sms": len(sms_tail), "tail_sms_with_two_or_more": sum(1 for n in sms_tail.values() if n > 1),
        "first_wave_block_us": statistics.median(end - start for _, start, end in first_wave),
        "tail_block_us": statistics.median(end - start for _, start, end in tail) if tail else None,
        "tail_start_us": (min(s for _, s, _ in tail), max(s for _, s, _ in tail)) if tail else None,
        "first_end_us": first_end, "last_end_us": max(end for _, _, end in blocks),
        "last_start_us": starts[-1],
    }


def main() -> int:
    args = parser(__doc__).parse_args()
    if gpu_or_say_so() is None:
        return 0
    texts = sources()
    runs = {label: run(rung, texts[rung], options) for label, rung, options in (
        ("v5", "v5", ()), ("v6a", "v6a", ()), ("v6b", "v6b", ()), ("v6a MIN_BLOCKS=1", "v6a", ("-DMIN_BLOCKS=1",)))}
    print(f"{SHAPE}: 384 blocks of 128 x 128; times in microseconds from the first block's start")
    print(f"{'':>18}{'in 1st wave':>12}{'tail':>6}{'tail SMs':>9}{'paired':>7}{'1st-wave block':>15}"
          f"{'tail block':>11}{'tail starts':>16}{'end':>8}")
    found = {}
    for label, blocks in runs.items():
        s = found[label] = summary(blocks)
        tail_block = f"{s['tail_block_us']:.0f}" if s["tail_block_us"] else "-"
        starts = "{:.0f}-{:.0f}".format(*s["tail_start_us"]) if s["tail_start_us"] else "-"
        print(f"{label:>18}{s['started_before_first_end']:>12}{s['tail_blocks']:>6}{s['tail_sms']:>9}"
              f"{s['tail_sms_with_two_or_more']:>7}{s['first_wave_block_us']:>15.0f}{tail_block:>11}{starts:>16}"
              f"{s['last_end_us']:>8.0f}")
    harness.write_json(args.json, {"device": torch.cuda.get_device_name(), "shape": SHAPE, "summary": found,
                                   "blocks": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
