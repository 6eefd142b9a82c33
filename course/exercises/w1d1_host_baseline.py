"""Week 1 Day 1: two host functions, graded on the values they return (never on their speed).

``w1d1.matmul_naive``: C = A @ B with Python loops over NumPy fp64 arrays. The judge compares the
returned array with an fp64 reference. A host function runs in the student's own process, so its
speed could only be the student's own claim: the notebook shows it and grades none of it.

``w1d1.median_time_ms``: a host timer done right, judged on a workload whose true steady-state time
the spec knows from the shape. The workload is slow for its first ``W`` calls (the warm-up the timer
is told to skip), then its steady calls vary around the true time and a seventh to a quarter of the
timed calls are slow outliers. Only a timer that skips the warm-up and takes the median of the timed calls lands
within the accepted band on every shape: the mean, the minimum, a median that includes the warm-up,
and a single call all miss it (the course's own tests check each on every shape).

Known limit: the timer runs in the same process as the workload, so it can read the workload's
internals (its planned durations) instead of timing it; no check from outside can tell the two
apart, since only the returned number leaves the sandbox. The fixture ``read_workload_internals``
does exactly that and is expected to pass. What this item grades is whether the student can write
a correct timer, not whether they chose to; the timings the course relies on are taken by the
judge, in its own process.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import numpy as np
import torch

from course import grading_table
from course.spec import Inputs, Shape, host_exercise, register

NOTEBOOK = "week1/day1_host_baseline"

# ---------------------------------------------------------------------------------------------------
# w1d1.matmul_naive

# Held from import time, before any student code runs.
_numpy_matmul = np.matmul


def matmul_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """Two fp64 NumPy arrays, A (M, K) and B (K, N); ``device`` is ignored (host work)."""
    m, n, k = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)), rng.standard_normal((k, n))


def matmul_reference(inputs: Inputs) -> torch.Tensor:
    a, b = inputs
    return torch.from_numpy(np.asarray(a, dtype=np.float64)) @ torch.from_numpy(np.asarray(b, dtype=np.float64))


def numpy_matmul(inputs: Inputs) -> torch.Tensor:
    """NumPy's matmul (a BLAS DGEMM): shown beside the student's loops in the notebook, never graded."""
    a, b = inputs
    return torch.from_numpy(_numpy_matmul(a, b))


def draw_matmul_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two shapes per grading run, each side 1 or up to 40: small, since the loops run in Python."""
    def side() -> int:
        return 1 if rng.random() < 0.2 else rng.randint(2, 40)

    return tuple((side(), side(), side()) for _ in range(2))


MATMUL = register(
    host_exercise(
        id="w1d1.matmul_naive",
        title="Naive host matmul (Week 1, Day 1)",
        function="matmul_naive",
        dims=("M", "N", "K"),
        # fp64 in and out: a sum of K fp64 products differs from the reference by rounding alone
        # (about K * 1e-16); summing in fp32 (about 1e-7) fails.
        precision="fp64",
        make_inputs=matmul_inputs,
        reference=matmul_reference,
        library=numpy_matmul,
        library_name="NumPy (BLAS)",
        output_shape=lambda shape: (shape[0], shape[1]),
        flops=lambda shape: 2.0 * shape[0] * shape[1] * shape[2],
        bytes_moved=lambda shape: 8.0 * (shape[0] * shape[2] + shape[2] * shape[1] + shape[0] * shape[1]),
        # Host work: the same shapes with or without a GPU. Non-square, and every side 1 somewhere.
        visible=((4, 5, 3), (1, 7, 6), (16, 16, 16)),
        hidden=((1, 1, 1), (23, 9, 31), (6, 1, 17), (5, 30, 1)),
        notebook=NOTEBOOK,
        correctness_cells={"test_matmul_naive_visible": "visible", "test_matmul_naive_hidden": "hidden"},
        draw_hidden=draw_matmul_hidden,
    )
)

# ---------------------------------------------------------------------------------------------------
# w1d1.median_time_ms

FIRST_CALL = 6.0  # the first call, as a multiple of the steady time (imports, caches, allocation)
COLD_CALL = 3.0  # the other warm-up calls
OUTLIER = 8.0  # a timed call interrupted by something else on the machine
LOW_BOUND, HIGH_BOUND = 0.8, 1.8  # accepted: this band around the true steady-state time
# sleep() never returns early. It overshoots by about 0.1 ms on an idle machine, and by up to 4 ms now
# and then on a loaded one (measured on the course's 2-core CPU machine at a load average of 6); with steady
# times of 6 to 10 ms a right timer once failed in the full CPU suite (2026-11-28). With steady times of 12
# to 20 ms, a right timer fails only if two calls around the median overshoot by 0.8 of the steady time
# (10 ms or more); a wrong one passes only if its wrong statistic lands far from where the plan puts it.


def outlier_count(repeats: int) -> int:
    return max(1, repeats // 4)


def steady_factors(repeats: int) -> list[float]:
    """The steady calls' times over the true time, sorted: the median of the timed calls is exactly 1.

    Below the middle they rise from 0.3 to 0.7 (a minimum is far too low); three in the middle are 1;
    above it they rise from 2.5 to 3 (so a median that takes in the warm-up calls is far too high).
    """
    steady = repeats - outlier_count(repeats)
    middle = (repeats - 1) // 2  # the median's index among the sorted timed calls (outliers sort last)
    low = [0.3 + 0.4 * i / max(1, middle - 2) for i in range(middle - 1)]
    high_count = steady - middle - 2
    high = [2.5 + 0.5 * i / max(1, high_count - 1) for i in range(high_count)]
    return [*low, 1.0, 1.0, 1.0, *high]


def schedule(shape: Shape, seed: int) -> list[float]:
    """Planned duration (ms) of every call: W warm-up calls, then R timed calls in a seed-drawn order."""
    steady_us, warmup, repeats = shape
    steady_ms = steady_us / 1000
    rng = random.Random(seed)
    timed = [f * steady_ms for f in steady_factors(repeats)] + [OUTLIER * steady_ms] * outlier_count(repeats)
    rng.shuffle(timed)
    cold = [FIRST_CALL * steady_ms] + [COLD_CALL * steady_ms] * (warmup - 1)
    return cold + timed


class Workload:
    """A function of no arguments that sleeps for its planned time on each call (steady after the plan)."""

    __slots__ = ("_plan", "_calls", "_steady_ms")

    def __init__(self, plan: list[float], steady_ms: float):
        self._plan = plan
        self._calls = 0
        self._steady_ms = steady_ms

    def __call__(self) -> None:
        ms = self._plan[self._calls] if self._calls < len(self._plan) else self._steady_ms
        self._calls += 1
        time.sleep(ms / 1000)

    def __repr__(self) -> str:
        return "<a workload to time: call it with no arguments>"


def timer_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """(workload, warmup, repeats): the workload's plan drawn from the seed, the counts from the shape."""
    _, warmup, repeats = shape
    return Workload(schedule(shape, seed), shape[0] / 1000), warmup, repeats


def timer_reference(inputs: Inputs) -> float:
    """The true steady-state time of the workload, in milliseconds."""
    return inputs[0]._steady_ms


def accept_time(out: Any, ref: Any, shape: Shape) -> tuple[bool, str]:
    """A float (or int) of milliseconds within [LOW_BOUND, HIGH_BOUND] times the true steady-state time."""
    if type(out) not in (float, int):
        return False, f"returned {type(out).__name__}, expected a float (milliseconds)"
    if not math.isfinite(out) or out <= 0:
        return False, f"returned {out!r}, expected a positive number of milliseconds"
    ratio = out / ref
    band = f"accepted from {LOW_BOUND:g}x to {HIGH_BOUND:g}x"
    said = f"{out:.3f} ms against a true steady-state time of {ref:.3f} ms ({ratio:.2f}x; {band})"
    if LOW_BOUND <= ratio <= HIGH_BOUND:
        return True, said
    if ratio < 2e-3:
        return False, f"{said}: seconds instead of milliseconds?"
    if ratio < LOW_BOUND:
        return False, f"{said}: too low, as the fastest call (a minimum) would be"
    return False, f"{said}: too high: warm-up calls or outliers were counted"


def draw_timer_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """One more shape per grading run: an odd number of repeats, a warm-up longer than half of them."""
    repeats = rng.choice((7, 9, 11, 13))
    warmup = rng.randint((repeats + 1) // 2, repeats)
    return ((rng.randrange(12000, 20001, 2000), warmup, repeats),)


# Odd repeats (one middle call); warm-up at least half the repeats, so a timer that forgets to skip it
# counts a majority of cold calls. Each shape takes 30 to 77 steady times: 0.35 to 1.6 s.
_TIMER_VISIBLE = ((16000, 6, 11), (12000, 4, 7))
_TIMER_HIDDEN = ((20000, 8, 15), (14000, 5, 9))

TIMER = register(
    host_exercise(
        id="w1d1.median_time_ms",
        title="A host timer done right (Week 1, Day 1)",
        function="median_time_ms",
        dims=("T_us", "W", "R"),  # true steady time in microseconds, warm-up calls, timed calls
        precision="exact",  # unused: accept_time decides
        make_inputs=timer_inputs,
        reference=timer_reference,
        visible=_TIMER_VISIBLE,
        hidden=_TIMER_HIDDEN,
        notebook=NOTEBOOK,
        correctness_cells={"test_timer_visible": "visible", "test_timer_hidden": "hidden"},
        draw_hidden=draw_timer_hidden,
        accept=accept_time,
        # In the pipeline a judge's hold freezes this run (SIGSTOP); frozen inside a timed call, a right timer read
        # 3.0x of the steady time on an H100 (2026-12-07). A hold of its own keeps the freezes out of its calls.
        timed_in_run=True,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day1_host_baseline",
    (
        grading_table.Cells(
            "`test_matmul_naive_visible`",
            "`matmul_naive` on the shapes printed by its check",
            {"test_matmul_naive_visible": 2},
        ),
        grading_table.Cells(
            "`test_matmul_naive_hidden`",
            "more shapes: `1 x 1 x 1`, a single column, `K = 1`, odd sizes, two drawn per grading run",
            {"test_matmul_naive_hidden": 2},
        ),
        grading_table.Cells(
            "`test_timer_visible`",
            "`median_time_ms` on the workloads printed by its check",
            {"test_timer_visible": 2},
        ),
        grading_table.Cells(
            "`test_timer_hidden`",
            "more workloads, one of them drawn per grading run",
            {"test_timer_hidden": 2},
        ),
        grading_table.Cells(
            "understanding check",
            "five short answers at the end",
            {
                "test_matmul_flops": 1,
                "test_matmul_bytes": 1,
                "test_saxpy_bytes": 1,
                "test_gflops_from_time": 1,
                "test_mean_of_all": 1,
            },
        ),
    ),
))
