"""What holds Week 2 Day 7's fp16 GEMM, and cuBLAS's, below the datasheet peak at 8192^3: the SM clock under load.

    python -m bench w2d7-fp16-clock [--json FILE] [--seconds S]

The fp16 datasheet peak of an H100 or H200 SXM (989.4 TFLOP/s dense, ``course.peaks``) is 132 SMs x 4,096
FLOP a clock x 1,830 MHz. Both GPUs clock up to 1,980 MHz, and lower their clock when a kernel draws their
700 W. For cuBLAS fp16 and the solution notebook's autotuned ``matmul_fp16`` at 8192^3 this measures:

- the judge's time: the median of ``course.bench.time_calls`` (each call alone, L2 flushed, the spin before it);
- a back-to-back loop for S seconds (default 3), with nvidia-smi sampling every 20 ms: the SM clock, the power,
  and whether the driver named its software power cap as a reason for the clock; each call's time in the loop;
- the clock the judge's call must have run at if its speed follows the clock: the loop's clock x loop time /
  judge time, and the tensor cores' peak at that clock (132 x 4,096 x clock).

GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench import harness
from bench.gemm_fp16_sweep import load_notebook
from bench.harness import gpu_or_say_so, parser
from course import bench, peaks

REPO = Path(__file__).resolve().parent.parent


SIZE = 8192
FLOP_PER_CLOCK_PER_SM = 4096  # dense fp16 tensor-core FLOP an SM does a clock on Hopper: 989.4e12 / (132 * 1.83e9)
QUERY = "clocks.sm,power.draw,utilization.gpu,clocks_event_reasons.sw_power_cap"


def sampled(run: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """``run()``'s result, and what nvidia-smi saw every 20 ms while the GPU was busy."""
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "20"],
                           stdout=subprocess.PIPE, text=True)
    try:
        found = run()
    finally:
        smi.terminate()
    rows = [[v.strip() for v in line.split(",")] for line in smi.communicate()[0].splitlines() if line.count(",") == 3]
    busy = [r for r in rows if r[2].isdigit() and int(r[2]) > 50]
    return found, {"samples": len(busy),
                   "sm_mhz": statistics.median(float(r[0]) for r in busy) if busy else None,
                   "sm_mhz_range": [min(float(r[0]) for r in busy), max(float(r[0]) for r in busy)] if busy else None,
                   "power_w": statistics.median(float(r[1]) for r in busy) if busy else None,
                   "power_cap_share": sum(r[3] == "Active" for r in busy) / len(busy) if busy else None}


def back_to_back(fn: Callable[..., Any], args: tuple, seconds: float) -> float:
    """Milliseconds a call over ``seconds`` of calls queued back to back."""
    fn(*args)
    torch.cuda.synchronize()
    calls, start, end = 0, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began = time.perf_counter()
    start.record()
    while time.perf_counter() - began < seconds:
        for _ in range(10):
            fn(*args)
        calls += 10
        torch.cuda.synchronize()  # keeps the queue short, so the loop's length is what the GPU ran
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    info = gpu_or_say_so()
    if info is None:
        return 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    datasheet = peaks.datasheet_peaks(torch.cuda.get_device_name())
    notebook = load_notebook()
    a, b = (torch.randn(SIZE, SIZE, device="cuda", dtype=torch.float16) for _ in range(2))
    flop = 2.0 * SIZE ** 3
    kernels = {"cuBLAS fp16": lambda x, y: torch.mm(x, y), "reference matmul_fp16": notebook.matmul_fp16}
    notebook.matmul_fp16(a, b)  # autotunes
    torch.cuda.synchronize()
    rows = []
    for name, fn in kernels.items():
        judge_ms = bench.time_calls(fn, args=(a, b)).median_ms
        loop_ms, smi = sampled(lambda fn=fn: back_to_back(fn, (a, b), args.seconds))
        row: dict[str, Any] = {"kernel": name, "judge_ms": judge_ms, "judge_tflops": flop / judge_ms / 1e9,
                               "loop_ms": loop_ms, "loop_tflops": flop / loop_ms / 1e9, **smi}
        if smi["sm_mhz"]:
            judge_mhz = smi["sm_mhz"] * loop_ms / judge_ms
            row.update(judge_mhz_if_speed_follows_clock=judge_mhz,
                       peak_at_judge_clock_tflops=sms * FLOP_PER_CLOCK_PER_SM * judge_mhz * 1e6 / 1e12,
                       peak_at_loop_clock_tflops=sms * FLOP_PER_CLOCK_PER_SM * smi["sm_mhz"] * 1e6 / 1e12)
        rows.append(row)
    print(f"{torch.cuda.get_device_name()}, {SIZE}^3 fp16; datasheet peak "
          f"{datasheet.fp16_tflops if datasheet else '?'} TFLOP/s ({peaks.SOURCE})")
    print(f"{'':>22}{'judge ms':>9}{'TFLOP/s':>8}{'loop ms':>8}{'TFLOP/s':>8}{'loop MHz':>9}{'W':>5}{'power cap':>10}"
          f"{'judge MHz':>10}{'peak there':>11}{'of it':>6}")
    for r in rows:
        judge_mhz = r.get("judge_mhz_if_speed_follows_clock")
        peak = r.get("peak_at_judge_clock_tflops")
        print(f"{r['kernel']:>22}{r['judge_ms']:>9.3f}{r['judge_tflops']:>8.0f}{r['loop_ms']:>8.3f}"
              f"{r['loop_tflops']:>8.0f}{r['sm_mhz'] or 0:>9.0f}{r['power_w'] or 0:>5.0f}"
              f"{(r['power_cap_share'] or 0):>10.0%}{judge_mhz or 0:>10.0f}{peak or 0:>11.0f}"
              f"{(r['judge_tflops'] / peak if peak else 0):>6.0%}")
    harness.write_json(args.json, {"device": torch.cuda.get_device_name(), "size": SIZE, "sms": sms, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
