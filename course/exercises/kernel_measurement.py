"""One kernel run as a profiler reports it: Week 2 Day 1's judged answers (``classify``, ``roof_fraction``) take it.

It lives beside that day's spec (``w2d1_profiling``), so the grader and the sandbox's recorder load it without
the day's helper; the notebook imports it as ``course.days.profiling.Measurement``, which re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    """One kernel run, as a profiler reports it, and the peaks of the device it ran on.

    ``flops``: floating-point operations executed; ``dram_bytes``: bytes moved between DRAM and the
    L2 cache (reads plus writes); ``time_ms``: the kernel's duration in milliseconds;
    ``peak_tflops``: the device's peak rate for this kind of arithmetic, in TFLOP/s;
    ``peak_tbps``: its peak DRAM bandwidth, in TB/s.
    """

    flops: float
    dram_bytes: float
    time_ms: float
    peak_tflops: float
    peak_tbps: float
