"""Week 2 Day 7: an optimized fp16 GEMM. Two graded functions.

``w2d7.tile_order`` (host): the launch position of every output tile under grouped ordering, as
``num_pid_m`` lists of ``num_pid_n`` ints (a 2-D int64 tensor or array is accepted too). Grouped
ordering walks ``group_m`` rows of tiles at a time, column by column; the last group is shorter when
``group_m`` does not divide ``num_pid_m``, which is where most wrong versions go wrong (the Week 2
source notebook computed grouped ids and then used the plain ones). The answer is exact. It is plain
data, not a tensor on the grading device, so the notebook's check on a GPU judges it as the judge does.

``w2d7.matmul_fp16`` (kernel): C = A @ B with fp16 inputs, fp32 accumulation and an fp16 output.
The reference is fp64. Rounding the exact result to fp16 alone costs a relative error near 2e-4
(half an fp16 ulp, 2**-11, spread over uniformly distributed rounding errors), so the fp16 tolerance of
1e-2 leaves a wide margin for any summation order. At ordinary sizes it does not refuse fp16
accumulation: rounding the running sum to fp16 after every 16-wide step stays near 3e-3 at K = 8192
(an emulation in torch on a CPU: 32 x 32 outputs, randn inputs). So the GPU's hidden set holds Day 6's
long reduction, K = 2**20 + 3, where an fp16 accumulator errs by several times the tolerance
(``w2d6_tensor_cores.fp16_accumulation_error``) and an fp32 one does not; the interpreter cannot reach
such a K in reasonable time. The speed is compared with cuBLAS doing the same job (fp32 accumulation,
reduced-precision reductions off), and with the course's reference kernel, each in the same run, as a
geometric mean over 4096^3, 8192^3 and one non-square shape.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from course import grading_table
from course.exercises import matmul
from course.exercises.w2d6_tensor_cores import LARGE_K
from course.spec import Inputs, Shape, ShapeSet, host_exercise, register, vs_library, vs_reference

# ---------------------------------------------------------------------------------------------------
# w2d7.tile_order

# Held from import time, so that nothing rebound later changes what the references compute.
_arange, _empty = torch.arange, torch.empty


def order_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """The tile grid and the group height: the function's whole input (nothing random to draw)."""
    num_pid_m, num_pid_n, group_m = (int(n) for n in shape)
    return num_pid_m, num_pid_n, group_m


def tile_coordinates(tile_ids: torch.Tensor, num_pid_m: int, num_pid_n: int,
                     group_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pid_m, pid_n) of each launch position under grouped ordering (the arithmetic a kernel does)."""
    per_group = num_pid_n * group_m  # tiles in one band of group_m rows
    first_row = (tile_ids // per_group) * group_m
    rows_in_group = torch.clamp(num_pid_m - first_row, max=group_m)
    within = tile_ids % per_group
    return first_row + within % rows_in_group, within // rows_in_group


def order_reference(inputs: Inputs) -> list[list[int]]:
    """order[pid_m][pid_n] = the launch position of that tile."""
    num_pid_m, num_pid_n, group_m = inputs
    positions = _arange(num_pid_m * num_pid_n, dtype=torch.int64)
    pid_m, pid_n = tile_coordinates(positions, num_pid_m, num_pid_n, group_m)
    order = _empty((num_pid_m, num_pid_n), dtype=torch.int64)
    order[pid_m, pid_n] = positions
    return order.tolist()


def accept_order(out: Any, reference: list[list[int]], shape: Shape) -> tuple[bool, str]:
    """The same launch position for every tile; rows of ints (or an int64 tensor or array), nothing else."""
    num_pid_m, num_pid_n, _ = shape
    integer_tensor = isinstance(out, torch.Tensor) and not out.dtype.is_floating_point and out.dtype != torch.bool
    if integer_tensor or isinstance(out, np.ndarray) and out.dtype.kind in "iu":
        out = out.tolist()
    rows_ok = type(out) in (list, tuple) and len(out) == num_pid_m
    if not rows_ok or not all(type(row) in (list, tuple) and len(row) == num_pid_n for row in out):
        kind = getattr(out, "type_name", type(out).__name__)  # the judge's name for a value it would not export
        return False, f"returned a {kind}, expected {num_pid_m} lists of {num_pid_n} ints"
    if any(type(value) is not int for row in out for value in row):
        return False, "every launch position must be an int"
    wrong = [(i, j) for i in range(num_pid_m) for j in range(num_pid_n) if out[i][j] != reference[i][j]]
    if not wrong:
        return True, f"all {num_pid_m * num_pid_n} launch positions right"
    i, j = wrong[0]
    return False, (f"{len(wrong)} of {num_pid_m * num_pid_n} tiles have a wrong launch position; "
                   f"tile ({i}, {j}) has {out[i][j]}, expected {reference[i][j]}")


def draw_order_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two more grids per grading run; the group height is drawn so that it rarely divides the rows."""
    def grid() -> Shape:
        return rng.randint(1, 40), rng.randint(1, 40), rng.choice((2, 3, 4, 5, 6, 8, 16))

    return grid(), grid()


TILE_ORDER = register(
    host_exercise(
        id="w2d7.tile_order",
        title="Grouped tile order (Week 2, Day 7)",
        function="tile_order",
        dims=("num_pid_m", "num_pid_n", "group_m"),
        precision="exact",
        output_dtype=torch.int64,  # what a tensor answer must be; accept_order judges the values
        make_inputs=order_inputs,
        reference=order_reference,
        output_shape=lambda shape: (shape[0], shape[1]),
        # A group height that divides the rows, one that does not (the last group is shorter), one
        # taller than the grid (a single group: column-major order) and a single row of tiles.
        visible=((4, 6, 2), (5, 3, 2), (3, 4, 8), (1, 5, 4)),
        # group_m = 1 is plain row-major order; the last grid is an 8192 x 8192 output in 128 x 256 tiles.
        hidden=((7, 5, 3), (6, 6, 1), (9, 2, 4), (2, 9, 8), (13, 11, 8), (1, 1, 8), (64, 32, 8)),
        notebook="week2/day7_optimized_gemm",
        correctness_cells={"test_tile_order_visible": "visible", "test_tile_order_hidden": "hidden"},
        draw_hidden=draw_order_hidden,
        accept=accept_order,
    )
)

# ---------------------------------------------------------------------------------------------------
# w2d7.matmul_fp16




# Two more hidden shapes per grading run: every side a multiple of 8 (rows 16-byte aligned, the shapes a TMA
# kernel takes), and every side 1, a prime or odd.
draw_hidden = matmul.hidden_drawer((matmul.multiple_of_8,) * 3, (matmul.one_prime_or_odd,) * 3)


THRESHOLD_PRECISION = "fp16 inputs, fp32 accumulation, fp16 output"

MATMUL_FP16 = register(
    matmul.exercise(
        torch.float16,
        drawn_in=torch.float16,  # drawn in fp16 directly (Days 4-6 round fp32 draws): the bands' own inputs
        id="w2d7.matmul_fp16",
        title="Optimized fp16 GEMM (Week 2, Day 7)",
        function="matmul_fp16",
        # Square and non-square, rows 16-byte aligned (every side a multiple of 8: a TMA kernel's shapes)
        # and not (K = 257, 65: a TMA kernel must fall back to plain loads), a single row, and sides that
        # are no multiple of any tile: a kernel without masks, or right only for aligned shapes, fails here.
        visible_shapes=matmul.VISIBLE_ALIGNED,
        # On a GPU also K = 2**20 + 3: an fp16 accumulator fails it (see the module's docstring).
        hidden_shapes=ShapeSet(
            gpu=(*matmul.HIDDEN.gpu, (1536, 2560, 4104), (67, 45, LARGE_K)),
            cpu=(*matmul.HIDDEN.cpu, (96, 40, 48)),
        ),
        # Two square sizes and a non-square one with K != N; every side a multiple of 128.
        bench_shapes=ShapeSet(
            gpu=((4096, 4096, 4096), (8192, 8192, 8192), (8192, 3072, 5120)),
            cpu=(),
        ),
        thresholds=(
            # 80% of cuBLAS is the day's goal (the Week 2 source's own figure, there stated without a
            # precision). The course's design notes record a plain grouped tl.dot kernel at 0.87 of cuBLAS
            # fp16 at 4096 and 0.96 at 8192 on an H100, so the full band is within reach without
            # persistence or TMA; bench/gemm_fp16_sweep.py in the course's online repository measures that kernel again
            # (plain_one_tile). The 0.80 is the course's aim. Measured on an H100 (bench/RESULTS.md and
            # bench/gemm_fp16_sweep.py in the course's online repository): the graded autotuned reference reached 1.00
            # of cuBLAS fp16 (geometric mean of the three shapes), the plain one-tile-per-program grouped kernel 0.958,
            # row-major order 0.959.
            vs_library("vs_cublas", "cuBLAS fp16", 3.0, ((0.40, 0.25), (0.55, 0.5), (0.70, 0.75), (0.80, 1.0)),
                       f"{THRESHOLD_PRECISION}, against cuBLAS fp16 (fp32 accumulation), same run"),
            # The reference (persistent, grouped, TMA on Hopper) aims at 95% of cuBLAS or more; 85% of it
            # is then about the 80% of cuBLAS above (it measured 1.00 of cuBLAS on an H100).
            vs_reference(2.0, ((0.45, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                         f"{THRESHOLD_PRECISION}, against the course's reference kernel, same run"),
        ),
        notebook="week2/day7_optimized_gemm",
        correctness_cells={"test_matmul_fp16_visible": "visible", "test_matmul_fp16_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )
)

make_inputs, cublas_fp16 = MATMUL_FP16.make_inputs, MATMUL_FP16.library  # the names the tests and benches use


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day7_optimized_gemm",
    (
        grading_table.Cells(
            "`tile_order`, visible",
            "the grids printed by the check below",
            {"test_tile_order_visible": 1},
        ),
        grading_table.Cells(
            "`tile_order`, hidden",
            "more grids: groups that do not divide the rows, one group, plain row-major order",
            {"test_tile_order_hidden": 2},
        ),
        grading_table.Cells(
            "`matmul_fp16`, visible",
            "the shapes printed by the check below",
            {"test_matmul_fp16_visible": 2},
        ),
        grading_table.Cells(
            "`matmul_fp16`, hidden",
            "more shapes: non-square, odd sides, rows not 16-byte aligned, a very long K",
            {"test_matmul_fp16_hidden": 3},
        ),
        grading_table.Speed(
            "`vs_cublas`",
            "your speed / cuBLAS fp16",
            ((MATMUL_FP16, "vs_cublas"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference kernel",
            ((MATMUL_FP16, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_stage_bytes": 1, "test_stages_that_fit": 1, "test_last_wave_sms": 1, "test_first_wave_panels": 1},
        ),
    ),
))
