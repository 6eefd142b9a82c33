"""Which work queued before each timed call keeps the timings independent of how fast the host loops?

    python -m bench timing-fillers [--json FILE] [--seconds S]

A study on an H200 (2026-11-28) found that ``course.bench``'s heater of then (about 0.5 ms of fp16 matmuls before each
timed call) holds an H200 near its power limit, so how much of each round the host spends between calls sets the SM
clock: a tight bench loop timed Week 2 Day 3's sector-aligned transpose at 0.72-0.75 of torch's copy, the judge (more
host work per call) at 0.82-0.85. This times five kernels in the same rounds (torch's copy, that CUDA C transpose and
Week 2 Day 2's Triton one at their odd shapes, torch.mm in fp16 and in fp32 at 4096) with each of four fillers, each
at three host paces (0, 0.5 and 2 ms of extra host work before every call), sampling the SM clock and power with
nvidia-smi:

- ``matmul``: that heater (4096^2 fp16 matmuls, as many as fill 0.5 ms), queued after the host's work;
- ``spin``: ``torch.cuda._sleep`` for the same 0.5 ms, which keeps the stream busy while the host launches the call
  but draws little power (what ``course.bench`` queues since 2026-11-28);
- ``none``: nothing, so the host's launch falls inside the timing;
- ``matmul covering``: matmuls queued before the host's work, as many as the previous round's host time plus 0.5 ms,
  so the GPU never idles (a duty cycle of about 100%, as back-to-back timing has).

Then ``triton.testing.do_bench`` times each kernel back to back. The matrix runs twice, the second time in reverse
order, so a drift of the GPU over the run shows. GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import importlib.util
import math
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bench import harness
from bench.harness import gpu_or_say_so, parser
from course import bench

REPO = Path(__file__).resolve().parent.parent


FILL_MS = 0.5
PACES_MS = (0.0, 0.5, 2.0)
FILLERS = ("matmul", "spin", "none", "matmul covering")


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernels() -> dict[str, tuple[Callable, tuple]]:
    w2d3, w2d2 = _module("transpose_odd_w2d3"), _module("transpose_odd_w2d2")
    odd3, odd2 = torch.randn(3001, 5003, device="cuda"), torch.randn(5003, 12007, device="cuda")
    half = [torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2)]
    single = [torch.randn(4096, 4096, device="cuda") for _ in range(2)]
    torch.backends.cuda.matmul.allow_tf32 = False
    return {
        "copy 3001x5003": (torch.Tensor.clone, (odd3,)),
        "day3 salign 3001x5003": (w2d3.salign(32, 256, False), (odd3,)),
        "day2 salign 5003x12007": (w2d2.transposer(w2d2._salign_kernel, 64, 64, 4, halo=True), (odd2,)),
        "mm fp16 4096": (torch.mm, tuple(half)),
        "mm fp32 4096": (torch.mm, tuple(single)),
    }


class Matmuls:
    """The old heater's 4096^2 fp16 matmuls: as many as fill ``FILL_MS``, or ``repeats``."""

    def __init__(self) -> None:
        self.a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        self.out = torch.empty_like(self.a)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.mm(self.a, self.a, out=self.out)
        start.record()
        for _ in range(3):
            torch.mm(self.a, self.a, out=self.out)
        end.record()
        torch.cuda.synchronize()
        self.ms_each = start.elapsed_time(end) / 3
        self.repeats = max(1, math.ceil(FILL_MS / self.ms_each))

    def run(self, repeats: int | None = None) -> None:
        for _ in range(repeats or self.repeats):
            torch.mm(self.a, self.a, out=self.out)


def busy_wait(ms: float) -> None:
    began = time.perf_counter()
    while (time.perf_counter() - began) * 1e3 < ms:
        pass


def time_rounds(entries: dict[str, tuple[Callable, tuple]], filler: str, pace_ms: float, seconds: float,
                matmuls: Matmuls, spin: bench._Spin) -> dict[str, float]:
    """Median ms of each entry, one call of each per round, as ``course.bench.time_interleaved`` times them but with
    the chosen filler and ``pace_ms`` of host work before each call."""
    flusher = bench._get_flusher()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: dict[str, list[float]] = {name: [] for name in entries}
    for fn, args in entries.values():
        for _ in range(3):
            fn(*args)
    torch.cuda.synchronize()
    host_ms, began = FILL_MS, time.perf_counter()
    while time.perf_counter() - began < seconds or min(len(t) for t in times.values()) < 20:
        for name, (fn, args) in entries.items():
            torch.cuda.synchronize()
            if filler == "matmul covering":
                matmuls.run(math.ceil((host_ms + FILL_MS) / matmuls.ms_each))
            host_began = time.perf_counter()
            busy_wait(pace_ms)
            if filler == "matmul":
                matmuls.run()
            elif filler == "spin":
                spin.run()
            host_ms = (time.perf_counter() - host_began) * 1e3
            flusher.flush()
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end))
    return {name: statistics.median(t) for name, t in times.items()}


def clocks(run: Callable[[], dict]) -> tuple[dict, dict[str, float]]:
    """``run()``'s result, and the median SM clock, power and utilization nvidia-smi saw while the GPU was busy."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,utilization.gpu",
                            "--format=csv,noheader,nounits", "-lms", "20"], stdout=subprocess.PIPE, text=True)
    try:
        found = run()
    finally:
        smi.terminate()
    rows = [[float(v) for v in line.split(",")] for line in smi.communicate()[0].splitlines() if line.strip()]
    busy = [r for r in rows if r[2] > 0] or rows
    return found, {"sm_mhz": statistics.median(r[0] for r in busy), "power_w": statistics.median(r[1] for r in busy),
                   "util": statistics.median(r[2] for r in busy), "samples": len(busy)}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--seconds", type=float, default=2.0, help="timing per filler and pace")
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    import triton.testing

    entries, matmuls, spin = kernels(), Matmuls(), bench._Spin(FILL_MS)
    print(f"{info.name}: heater {matmuls.repeats} matmuls, spin {spin.cycles} cycles", flush=True)
    configs = [(f, p) for f in FILLERS for p in PACES_MS]
    runs = []
    for sweep, order in enumerate((configs, configs[::-1])):
        for filler, pace in order:
            medians, clock = clocks(lambda f=filler, q=pace: time_rounds(entries, f, q, args.seconds, matmuls, spin))
            runs.append({"sweep": sweep, "filler": filler, "pace_ms": pace, "ms": medians, **clock})
            copy = medians["copy 3001x5003"]
            print(f"{filler:<16} pace {pace:>3} ms  SM {clock['sm_mhz']:>5.0f} MHz {clock['power_w']:>4.0f} W "
                  f"util {clock['util']:>3.0f}%  " + "  ".join(f"{k} {v:.4f}" for k, v in medians.items())
                  + f"  salign3/copy {copy / medians['day3 salign 3001x5003']:.3f}", flush=True)
    do_bench, clock = clocks(lambda: {name: triton.testing.do_bench(lambda f=fn, a=a: f(*a), return_mode="median")
                                      for name, (fn, a) in entries.items()})
    print(f"do_bench  SM {clock['sm_mhz']:.0f} MHz {clock['power_w']:.0f} W util {clock['util']:.0f}%  "
          + "  ".join(f"{k} {v:.4f}" for k, v in do_bench.items()), flush=True)

    print("\nper filler: each kernel's median ms at pace 2 ms over pace 0 (both sweeps), and over do_bench at pace 0")
    for filler in FILLERS:
        cells = []
        for name in entries:
            at = {q: statistics.median(r["ms"][name] for r in runs if r["filler"] == filler and r["pace_ms"] == q)
                  for q in (0.0, 2.0)}
            cells.append(f"{name} {at[2.0] / at[0.0]:.3f} / {at[0.0] / do_bench[name]:.3f}")
        print(f"{filler:<16} " + "  ".join(cells))
    harness.write_json(args.json, {"device": info.name, "heater_repeats": matmuls.repeats, "spin_cycles": spin.cycles,
                                   "runs": runs, "do_bench": do_bench, "do_bench_clock": clock})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
