"""Week 1 Day 3: the machine. Two graded functions.

``w1d3.peak_fp32`` (host): the FP32 peak of a GPU from its parts, 2 x SMs x FP32 lanes per SM x
clock. The inputs are datasheet figures (``course.peaks.SM_TABLE``), either a part as sold or a
hypothetical bin of the same chip with fewer SMs and a lower clock drawn from the seed, so that a
function which looks the answer up by name, or returns the printed datasheet figure, fails.

``w1d3.program_coordinates`` (kernel): one Triton program per element of a (rows, cols) grid, each
writing its own (pid_0, pid_1, linear id) into an int32 (rows, cols, 3) tensor. The input tensor
only fixes the grid's size; the output is exact. Nothing here is timed: the day is about what runs
where, not about speed.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from course import grading_table, peaks
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, host_exercise, register

# ---------------------------------------------------------------------------------------------------
# w1d3.peak_fp32

# Far below any real mistake (a factor of 2 or 1000) and far above the rounding of another order of
# the same product in float64 (about 1e-16): "right" means the same product.
PEAK_RELATIVE_TOLERANCE = 1e-9
LOWEST_CLOCK_MHZ = 600


def peak_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """One GPU's properties: ``SM_TABLE[row]`` as sold (``hypothetical == 0``) or a random bin of it."""
    row, hypothetical = shape
    entry = peaks.SM_TABLE[row]
    props: dict[str, Any] = {"name": entry.gpu, "sm_count": entry.sm_count,
                             "fp32_cores_per_sm": entry.fp32_cores_per_sm, "boost_clock_mhz": entry.boost_clock_mhz}
    if hypothetical:
        rng = random.Random(f"w1d3.peak_fp32:{seed}:{row}")
        props.update(name=f"hypothetical {entry.gpu} bin",
                     sm_count=rng.randint(max(1, entry.sm_count // 2), entry.sm_count - 1),
                     boost_clock_mhz=rng.randrange(LOWEST_CLOCK_MHZ, entry.boost_clock_mhz, 5))
    return (props,)


def peak_reference(inputs: Inputs) -> float:
    (props,) = inputs
    flops_per_second = 2 * props["sm_count"] * props["fp32_cores_per_sm"] * props["boost_clock_mhz"] * 1e6
    return flops_per_second / 1e12


def _peak_label(shape: Shape) -> str:
    row, hypothetical = shape
    gpu = peaks.SM_TABLE[row].gpu
    return f"a hypothetical {gpu} bin" if hypothetical else f"{gpu} as sold"


def accept_peak(out: Any, reference: Any, shape: Shape) -> tuple[bool, str]:
    """A plain Python float (or int) equal to the reference up to float64 rounding, with a hint when it is not."""
    label = _peak_label(shape)
    if type(out) not in (float, int):
        kind = getattr(out, "type_name", type(out).__name__)  # the judge's name for a value it would not export
        return False, (f"{label}: returned a {kind}, expected a plain Python float in TFLOP/s "
                       "(float(x) converts a NumPy or torch number)")
    if not math.isfinite(out):
        return False, f"{label}: returned {out}"
    error = abs(out - reference) / reference
    if error <= PEAK_RELATIVE_TOLERANCE:
        return True, f"{label}: {out:.4f} TFLOP/s"
    ratio = out / reference
    hint = ""
    if math.isclose(ratio, 0.5, rel_tol=1e-6):
        hint = " (half of it: a fused multiply-add counts as two floating-point operations)"
    elif any(math.isclose(ratio, factor, rel_tol=1e-6) for factor in (1e3, 1e6, 1e-3, 1e-6)):
        hint = " (a power of 1000 off: the clock is in MHz, 1e6 Hz; the answer in TFLOP/s, 1e12 FLOP/s)"
    return False, f"{label}: {out:.6g} TFLOP/s, expected {reference:.6g}{hint}"


def draw_peak_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """One more hypothetical bin per grading run, of a GPU drawn from the table."""
    return ((rng.randrange(len(peaks.SM_TABLE)), 1),)


def _row(gpu: str) -> int:
    return next(i for i, entry in enumerate(peaks.SM_TABLE) if entry.gpu == gpu)


PEAK = register(
    host_exercise(
        id="w1d3.peak_fp32",
        title="FP32 peak from a GPU's properties (Week 1, Day 3)",
        function="peak_fp32_tflops",
        dims=("gpu_row", "hypothetical"),
        precision="exact",
        make_inputs=peak_inputs,
        reference=peak_reference,
        # The visible set: two parts as sold and one hypothetical bin (other seeds in the grader's run).
        visible=((_row("H100 SXM"), 0), (_row("T4"), 0), (_row("H100 SXM"), 1)),
        hidden=((_row("H100 PCIe"), 0), (_row("A100 80GB SXM"), 0), (_row("L4"), 0), (_row("L4"), 1),
                 (_row("A100 40GB"), 1)),
        notebook="week1/day3_the_machine",
        correctness_cells={"test_peak_visible": "visible", "test_peak_hidden": "hidden"},
        draw_hidden=draw_peak_hidden,
        accept=accept_peak,
    )
)

# ---------------------------------------------------------------------------------------------------
# w1d3.program_coordinates


def coordinate_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """A (rows, cols) tensor of random values: only its shape matters (one program per element)."""
    rows, cols = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.rand((rows, cols), generator=generator, device=device) + 0.5,)


# Held from import time, so that nothing rebound later changes what the reference computes.
_arange, _stack = torch.arange, torch.stack


def coordinate_reference(inputs: Inputs) -> torch.Tensor:
    """out[i, j] = (i, j, i + j * rows): program (pid_0, pid_1), numbered with axis 0 varying fastest."""
    (like,) = inputs
    rows, cols = like.shape[0], like.shape[1]
    pid_0 = _arange(rows, device=like.device).view(rows, 1).expand(rows, cols)
    pid_1 = _arange(cols, device=like.device).view(1, cols).expand(rows, cols)
    return _stack((pid_0, pid_1, pid_0 + pid_1 * rows), dim=-1).to(torch.int32)


def draw_coordinate_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """One more grid per grading run; small on a CPU, where the interpreter runs programs one by one."""
    if has_gpu:
        return ((rng.randint(1, 3000), rng.randint(1, 3000)),)
    return ((rng.randint(2, 9), rng.randint(2, 9)),)


COORDINATES = register(
    ExerciseSpec(
        id="w1d3.program_coordinates",
        title="Each program's coordinates in a 2-D grid (Week 1, Day 3)",
        function="program_coordinates",
        dims=("rows", "cols"),
        precision="exact",
        output_dtype=torch.int32,
        make_inputs=coordinate_inputs,
        reference=coordinate_reference,
        library=coordinate_reference,  # never timed: the exercise has no performance item
        library_name="torch arange and stack",
        output_shape=lambda shape: (shape[0], shape[1], 3),
        flops=lambda shape: 0.0,
        bytes_moved=lambda shape: 4.0 * 3 * shape[0] * shape[1],
        # Non-square grids and a single row: a kernel that swaps the axes, numbers the programs row
        # by row, or covers only the grid it was tried on fails these.
        visible_shapes=ShapeSet(gpu=((4, 6), (37, 50)), cpu=((4, 6), (1, 5))),
        # The GPU set reaches the grid's limits: 65535 programs along axis 1, many more along axis 0.
        hidden_shapes=ShapeSet(
            gpu=((1, 1), (3, 1000), (1000, 3), (257, 129), (100_000, 2), (2, 65535)),
            cpu=((1, 1), (7, 3), (5, 1)),
        ),
        bench_shapes=ShapeSet(gpu=(), cpu=()),
        thresholds=(),
        notebook="week1/day3_the_machine",
        correctness_cells={"test_coordinates_visible": "visible", "test_coordinates_hidden": "hidden"},
        draw_hidden=draw_coordinate_hidden,
        rate_unit="GB/s",
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day3_the_machine",
    (
        grading_table.Cells(
            "`test_peak_visible`",
            "`peak_fp32_tflops` on the GPUs printed by the check",
            {"test_peak_visible": 1},
        ),
        grading_table.Cells(
            "`test_peak_hidden`",
            "other GPUs, and hypothetical parts with other SM counts and clocks",
            {"test_peak_hidden": 1},
        ),
        grading_table.Cells(
            "`test_coordinates_visible`",
            "`program_coordinates` on the grids printed by the check",
            {"test_coordinates_visible": 2},
        ),
        grading_table.Cells(
            "`test_coordinates_hidden`",
            "more grids: one program, long thin grids, and on a GPU the launch limits",
            {"test_coordinates_hidden": 2},
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers on warps, occupancy and divergence",
            {"test_warps_for_200_threads": 1, "test_resident_blocks": 1, "test_occupancy": 1, "test_lanes_busy": 1},
        ),
    ),
))
