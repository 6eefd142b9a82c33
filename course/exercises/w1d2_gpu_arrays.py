"""Week 1 Day 2: time one call of asynchronous device work, right.

The student writes ``gpu_time_ms(fn)``: the time one call of ``fn()`` keeps the device busy, in
milliseconds. The graded input is a workload (``course.exercises.async_device.Workload``) whose calls queue work
of a duration drawn from the seed and return at once; before it is handed over, earlier work of
one to two times that duration is queued on the same device, as in any real program. A right timer
waits for the device before starting its clock and again before stopping it (or brackets the call
with CUDA events): it reports the duration. A timer that never waits reports the launch alone (far
too short); one that waits only at the end also counts the earlier work (two to three times too long).

It is a host function: its returned number is checked, never timed. The truth is measured where
the student's code never runs: on a GPU the judge runs the same workload, on the device in its own
process, between CUDA events; on a CPU (a simulated device whose work lasts exactly its duration) the
truth is the duration itself.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from course import grading_table
from course.exercises import async_device
from course.spec import Inputs, Shape, ShapeSet, host_exercise, register

# A reported time passes within this factor of the truth, either way.
FACTOR = 1.5
# Each drawn duration is the shape's nominal milliseconds times a factor in this range...
JITTER = (0.8, 1.25)
# ...and the work queued before it lasts this many times the drawn duration: a timer that does not wait
# for it before starting reports at least twice the truth.
BACKLOG = (1.0, 2.0)


def durations(shape: Shape, seed: int) -> tuple[float, float]:
    """(duration of one call, earlier work queued before it) in ms, for a nominal duration and a seed."""
    rng = random.Random(f"w1d2.gpu_time_ms:{seed}")
    duration = shape[0] * rng.uniform(*JITTER)
    return duration, duration * rng.uniform(*BACKLOG)


def make_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """A workload for ``device``, with earlier work already queued in front of it."""
    duration, backlog = durations(shape, seed)
    async_device.prepare(device)
    async_device.launch(backlog, device)
    return (async_device.Workload(duration, device),)


def reference(inputs: Inputs) -> float:
    """The true duration of one call: on a GPU measured between CUDA events, on a CPU the simulated one."""
    (workload,) = inputs
    async_device.synchronize(workload.device)  # the earlier work is not part of the call
    if workload.device == "cpu":
        return workload.planned_ms
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    workload()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def accept(out: Any, truth: Any, shape: Shape) -> tuple[bool, str]:
    """A plain number of milliseconds within FACTOR of the true duration."""
    if type(out) not in (float, int):  # not bool, a NumPy scalar or a tensor: what the grader receives is data
        return False, f"returned {repr(out)[:120]}, not a number; return the time as a Python float, e.g. float(ms)"
    if not math.isfinite(out) or out <= 0:
        return False, f"returned {out!r}; a time must be a positive, finite number of milliseconds"
    ratio = out / truth
    said = f"reported {out:.3f} ms for a call that takes {truth:.3f} ms (x{ratio:.3g})"
    if ratio < 1 / FACTOR:
        return False, (f"{said}: far too short. Did the clock stop before the device had finished? "
                       "Wait for the device before reading the clock.")
    if ratio > FACTOR:
        return False, (f"{said}: too long. Earlier work was still queued when the clock started: wait for "
                       "the device before starting it too (and time one call only).")
    return True, f"{said}, within x{FACTOR:g}"


def draw_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two more nominal durations per grading run (at least 50 ms on a CPU, whose timing is coarser)."""
    low, high = (3, 120) if has_gpu else (50, 180)
    return tuple((rng.randint(low, high),) for _ in range(2))


SPEC = register(
    host_exercise(
        id="w1d2.gpu_time_ms",
        title="Timing asynchronous device work (Week 1, Day 2)",
        function="gpu_time_ms",
        dims=("ms",),  # the nominal duration; each call's real one is drawn around it from the seed
        precision="exact",  # unused: accept() decides
        make_inputs=make_inputs,
        reference=reference,
        # Durations a factor of four apart or more in each set: no constant is within x1.5 of all of them.
        # On a CPU at least 50 ms: a run shares its CPU with other runs and builds, and waking the simulated
        # device's thread or the timer's once took 16 ms there (a correct timer read x1.6 of a 26 ms call).
        visible=ShapeSet(gpu=((5,), (20,), (80,)), cpu=((50,), (100,), (200,))),
        hidden=ShapeSet(gpu=((3,), (40,), (150,)), cpu=((60,), (140,), (280,))),
        notebook="week1/day2_gpu_arrays",
        # The student's timer runs in the notebook: beside other runs sharing the GPU, a correct timer measured
        # the workload longer than the judge's truth (a correct notebook lost the hidden set on two H100s).
        timed_in_run=True,
        correctness_cells={"test_gpu_time_visible": "visible", "test_gpu_time_hidden": "hidden"},
        draw_hidden=draw_hidden,
        accept=accept,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day2_gpu_arrays",
    (
        grading_table.Cells(
            "visible correctness",
            "your `gpu_time_ms` on the three durations printed by the check below",
            {"test_gpu_time_visible": 2},
        ),
        grading_table.Cells(
            "hidden correctness",
            "more durations, two of them drawn afresh for each grading run",
            {"test_gpu_time_hidden": 3},
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_copy_ms": 1, "test_copy_vs_add": 1, "test_waiting_lines": 1, "test_overlapped_ms": 1},
        ),
    ),
))
