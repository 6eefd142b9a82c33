"""Week 2, Day 1: where a measured kernel sits on the roofline (two host functions, judged as data).

Each input is one ``course.exercises.kernel_measurement.Measurement``: FLOPs, DRAM bytes, duration and the device's
two peaks, drawn from the seed over realistic ranges (DRAM bandwidth 0.3 to 8 TB/s, ridge points
4 to 400 FLOP/byte, 64 MiB to 16 GiB of traffic). The shape is one number, the regime the record is
drawn from: far below the ridge, far above it, just below (0.5% to 3%), just above, or a kernel
that does no arithmetic at all (a copy). Records near the ridge catch a wrong roof or a rule that
is off by a little; the no-arithmetic record catches a fraction computed as FLOP/s over peak FLOP/s.

- ``classify(m)`` returns "memory" when the kernel's intensity (FLOPs per DRAM byte) is below the
  device's ridge point (peak FLOP/s over peak bytes/s), else "compute".
- ``roof_fraction(m)`` returns how much of its roof the kernel attained: achieved bandwidth over
  peak bandwidth for a memory-bound kernel, achieved FLOP/s over peak FLOP/s for a compute-bound one
  (the same number as achieved FLOP/s over the roof at its intensity, and defined without FLOPs too).

Both are host functions (plain Python): the sandbox returns their values as data and the judge
compares them with the reference here, on records drawn from secret seeds. Never timed.
"""

from __future__ import annotations

import math
import random

from course import grading_table
from course.exercises.kernel_measurement import Measurement
from course.spec import TOLERANCES, Inputs, Shape, host_exercise, register

LABELS = ("memory", "compute")
REGIMES = {
    0: "far below the ridge",
    1: "far above the ridge",
    2: "just below the ridge",
    3: "just above the ridge",
    4: "no arithmetic (a copy)",
}
# A fraction is right within this relative error: far below any unit slip or wrong roof (at least 0.5%
# near the ridge), far above the rounding of two ways of writing the same formula.
FRACTION_TOLERANCE = TOLERANCES["fp32-ieee"]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _significant(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


def draw_measurement(regime: int, seed: int) -> Measurement:
    """A realistic record of the given regime, drawn from ``seed``."""
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {sorted(REGIMES)}, not {regime}")
    rng = random.Random(seed)
    peak_tbps = _significant(_log_uniform(rng, 0.3, 8.0), 3)  # datasheets print three digits
    peak_tflops = _significant(_log_uniform(rng, 4.0, 400.0) * peak_tbps, 3)
    ridge = peak_tflops / peak_tbps
    factor = {0: lambda: _log_uniform(rng, 0.005, 0.5), 1: lambda: _log_uniform(rng, 2.0, 50.0),
              2: lambda: rng.uniform(0.97, 0.995), 3: lambda: rng.uniform(1.005, 1.03), 4: lambda: 0.0}[regime]()
    dram_bytes = float(round(_log_uniform(rng, 2.0**26, 2.0**34)))
    flops = float(round(factor * ridge * dram_bytes))
    if regime != 4:
        flops = max(flops, 1.0)
    attained = rng.uniform(0.05, 0.97)
    if flops / dram_bytes < ridge:  # bandwidth is the roof
        seconds = dram_bytes / (attained * peak_tbps * 1e12)
    else:
        seconds = flops / (attained * peak_tflops * 1e12)
    return Measurement(flops=flops, dram_bytes=dram_bytes, time_ms=_significant(seconds * 1e3, 6),
                       peak_tflops=peak_tflops, peak_tbps=peak_tbps)


def make_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    (regime,) = shape
    return (draw_measurement(regime, seed),)


def bound(m: Measurement) -> str:
    """The roofline rule: below the ridge point the kernel is memory-bound, at or above it compute-bound."""
    ridge = m.peak_tflops / m.peak_tbps  # FLOP per byte where the two roofs meet
    return "compute" if m.flops >= ridge * m.dram_bytes else "memory"


def fraction_of_roof(m: Measurement) -> float:
    if bound(m) == "memory":
        return m.dram_bytes / (m.time_ms * 1e-3) / (m.peak_tbps * 1e12)
    return m.flops / (m.time_ms * 1e-3) / (m.peak_tflops * 1e12)


def accept_label(out: object, ref: str, shape: Shape) -> tuple[bool, str]:
    if type(out) is not str:
        return False, f"returned {repr(out)[:80]}, expected the str 'memory' or 'compute'"
    if out not in LABELS:
        return False, f"returned {out[:40]!r}: the answer is 'memory' or 'compute'"
    if out != ref:
        return False, f"returned {out!r}, expected {ref!r}"
    return True, f"{out!r}, right"


def accept_fraction(out: object, ref: float, shape: Shape) -> tuple[bool, str]:
    if type(out) not in (float, int):
        return False, f"returned {repr(out)[:80]}, expected a plain Python float (wrap it in float())"
    if not math.isfinite(out):
        return False, f"returned {out}, expected a finite fraction"
    error = abs(out - ref) / abs(ref)
    if error > FRACTION_TOLERANCE:
        return False, f"returned {out:.6g}, expected {ref:.6g} (relative error {error:.1e})"
    return True, f"{out:.6g}, relative error {error:.1e} <= {FRACTION_TOLERANCE:.0e}"


def draw_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Four more records per grading run, of regimes drawn at random."""
    return tuple((rng.randrange(len(REGIMES)),) for _ in range(4))


_COMMON = dict(
    dims=("regime",),
    make_inputs=make_inputs,
    # One record of every regime; hidden: each near-ridge regime twice more, and four drawn per run.
    visible=((0,), (1,), (2,), (3,), (4,)),
    hidden=((0,), (1,), (2,), (3,), (2,), (3,), (4,)),
    notebook="week2/day1_profiling",
    draw_hidden=draw_hidden,
)

CLASSIFY = register(
    host_exercise(
        id="w2d1.classify",
        title="Memory- or compute-bound, by the roofline (Week 2, Day 1)",
        function="classify",
        precision="exact",
        reference=lambda inputs: bound(inputs[0]),
        accept=accept_label,
        correctness_cells={"test_classify_visible": "visible", "test_classify_hidden": "hidden"},
        **_COMMON,
    )
)

ROOF_FRACTION = register(
    host_exercise(
        id="w2d1.roof_fraction",
        title="Fraction of the roof attained (Week 2, Day 1)",
        function="roof_fraction",
        precision="fp32-ieee",  # the accept rule's relative tolerance, FRACTION_TOLERANCE
        reference=lambda inputs: fraction_of_roof(inputs[0]),
        accept=accept_fraction,
        correctness_cells={"test_roof_fraction_visible": "visible", "test_roof_fraction_hidden": "hidden"},
        **_COMMON,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day1_profiling",
    (
        grading_table.Cells(
            "`classify`, visible",
            "one measurement of each kind printed by the check",
            {"test_classify_visible": 2},
        ),
        grading_table.Cells(
            "`classify`, hidden",
            "more measurements, several of them within 3% of the ridge point",
            {"test_classify_hidden": 3},
        ),
        grading_table.Cells(
            "`roof_fraction`, visible",
            "the same measurements",
            {"test_roof_fraction_visible": 2},
        ),
        grading_table.Cells(
            "`roof_fraction`, hidden",
            "the same hidden measurements",
            {"test_roof_fraction_hidden": 3},
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_ridge_h100": 1, "test_steps_at_ridge": 1, "test_bandwidth_gbps": 1, "test_low_both": 1},
        ),
    ),
))
