"""Week 3, Day 1: reductions. An fp32 sum of a long vector and an exact max over every row of a matrix.

Both read every input byte once and write almost nothing, so their speed is the bandwidth of the read: GB/s of
input bytes (plus the few output bytes), compared with ``torch.sum`` and ``torch.amax`` in the same run, on inputs
far larger than the L2 cache (50 MB on an H100, by its datasheet).

The sum is judged against an fp64 sum. Its inputs are uniform in [0, 1), so the sum of |x| is the sum itself and the
relative error is the error against the sum of |x| that the rounding analysis bounds: "fp32-sum", 1e-4 (see
course.spec). A sum that loses an update (a load and a store of the total, not an atomic add) drops whole partial
sums: one of k is only about 1/k of the total, but a race on a GPU drops most of them (the demo class's
lost_update notebook, graded on an H100 at commit 7660d9f, was off by 0.75 to 0.999 of the sum). The max rounds
nothing: exact.

The speed bands (full points at 0.85 of the library and of the reference) are those of the memory-bound days of
Weeks 1 and 2. Measured on an H100 on 2026-12-07 at commit 7660d9f (`python -m bench w3-references --tune`,
bench/results/h100/2026-12-07-week3-days1-3-references-7660d9f.json in the course's online repository), the
reference reached 1.032 of torch.sum and 1.005 of torch.amax (geometric means over the benchmark shapes; 0.974 on
the worst shape, the max at 3001 x 50021), and the grader's run of the Week 3 demo class on the same H100 and commit
gave the fast, correct notebook every speed point
(bench/results/h100/2026-12-07-demo-class-week3-summary-7660d9f.txt in the course's online repository), so the bands
stand.
"""

from __future__ import annotations

import math
import random

import torch

from course import grading_table
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, register, vs_library, vs_reference

# Held from import time (before any student code runs), so rebinding torch later cannot slow or fool the judge.
_library_sum = torch.sum
_library_amax = torch.amax
_library_equal = torch.equal


# ------------------------------------------------------------------------------------------- vector sum
def sum_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """x (N,) fp32, uniform in [0, 1): no cancellation, so an error in the sum is an error against sum |x|."""
    (n,) = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.rand((n,), generator=generator, device=device, dtype=torch.float32),)


def sum_reference(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return _library_sum(x.to(torch.float64)).reshape(1)


def torch_sum(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return _library_sum(x)


def sum_spot_error(inputs: Inputs, out: torch.Tensor) -> float:
    """Relative error of a timed output against fp64 torch.sum of the same input (one more read of x)."""
    (x,) = inputs
    if tuple(out.shape) != (1,):
        return math.inf
    ref = _library_sum(x.to(torch.float64)).item()
    got = out.to(torch.float64).item()
    return abs(got - ref) / abs(ref) if ref else abs(got)


def draw_sum_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two lengths per grading run: one anywhere up to the limit, one a block multiple plus or minus one."""
    limit = 2**24 if has_gpu else 60_000
    block = rng.choice([256, 512, 1024, 2048, 4096, 8192])
    near = max(1, block * rng.randrange(2, max(3, limit // block)) + rng.choice([-1, 1]))
    return (rng.randrange(2, limit + 1),), (near,)


VECTOR_SUM = register(
    ExerciseSpec(
        id="w3d1.vector_sum",
        title="Sum of a long fp32 vector (Week 3, Day 1)",
        function="vector_sum",
        dims=("N",),
        precision="fp32-sum",
        output_dtype=torch.float32,
        make_inputs=sum_inputs,
        reference=sum_reference,
        library=torch_sum,
        library_name="torch.sum",
        rate_unit="GB/s",
        output_shape=lambda shape: (1,),
        flops=lambda shape: float(shape[0]),
        bytes_moved=lambda shape: 4.0 * shape[0] + 4.0,
        # The visible lengths fit a few blocks; a program that reads and writes the total without an atomic add
        # can pass them. The hidden ones need thousands of programs, where such a sum loses updates on a GPU.
        visible_shapes=ShapeSet(gpu=((1,), (1000,), (4096,)), cpu=((1,), (1000,), (4096,))),
        hidden_shapes=ShapeSet(
            gpu=((2**24 + 3,), (10_000_019,), (65_537,), (3,)),
            cpu=((50_001,), (8193,), (3,)),
        ),
        # 0.5 GiB, 1 GiB and an odd 600 MB of input: past the L2 cache, and the last no multiple of any block.
        bench_shapes=ShapeSet(gpu=((2**27,), (2**28,), (150_000_001,)), cpu=()),
        thresholds=(
            vs_library("vs_torch", "torch.sum", 2.0, ((0.40, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                       "fp32 sum (1e-4 of the sum) against torch.sum of the same vector", unit="GB/s"),
            vs_reference(2.0, ((0.40, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                         "fp32 sum (1e-4 of the sum) against the course's reference sum", unit="GB/s"),
        ),
        spot_error=sum_spot_error,
        notebook="week3/day1_reductions",
        correctness_cells={"test_sum_visible": "visible", "test_sum_hidden": "hidden"},
        draw_hidden=draw_sum_hidden,
    )
)


# ---------------------------------------------------------------------------------------------- row max
def max_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """x (M, N) fp32, standard normal: a short row is often all negative, so a masked lane read as 0 shows."""
    m, n = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn((m, n), generator=generator, device=device, dtype=torch.float32),)


def max_reference(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return _library_amax(x, dim=1)


def torch_amax(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return _library_amax(x, dim=1)


def max_spot_error(inputs: Inputs, out: torch.Tensor) -> float:
    """0 when ``out`` equals torch.amax over the rows element for element (a max rounds nothing), else inf."""
    (x,) = inputs
    return 0.0 if tuple(out.shape) == (x.shape[0],) and _library_equal(out, _library_amax(x, dim=1)) else math.inf


def draw_max_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two shapes per grading run: many short rows, and a few rows longer than any block, no multiple of one."""
    long_limit = 200_000 if has_gpu else 5_000
    short = (rng.randrange(1, 3000 if has_gpu else 200), rng.randrange(1, 64))
    long = (rng.randrange(1, 9), rng.randrange(long_limit // 2, long_limit) | 1)
    return short, long


ROW_MAX = register(
    ExerciseSpec(
        id="w3d1.row_max",
        title="Max over every row of an fp32 matrix (Week 3, Day 1)",
        function="row_max",
        dims=("M", "N"),
        precision="exact",
        output_dtype=torch.float32,
        make_inputs=max_inputs,
        reference=max_reference,
        library=torch_amax,
        library_name="torch.amax",
        rate_unit="GB/s",
        output_shape=lambda shape: (shape[0],),
        flops=lambda shape: float(shape[0] * shape[1]),
        bytes_moved=lambda shape: 4.0 * shape[0] * shape[1] + 4.0 * shape[0],
        visible_shapes=ShapeSet(gpu=((64, 1024), (100, 3000), (1, 1)), cpu=((16, 256), (10, 300), (1, 1))),
        # Rows of 1 to 3 elements (mostly all negative), rows no multiple of a block, and rows longer than any
        # single block a program can hold.
        hidden_shapes=ShapeSet(
            gpu=((1000, 3), (7, 100_003), (4097, 257), (1, 1_000_001)),
            cpu=((200, 3), (3, 5003), (33, 257), (1, 20_001)),
        ),
        # 1 GiB of short rows, 1 GiB of square, 600 MB of long odd rows.
        bench_shapes=ShapeSet(gpu=((16384, 16384), (262144, 1000), (3001, 50021)), cpu=()),
        thresholds=(
            vs_library("vs_torch", "torch.amax over the rows", 2.0,
                       ((0.40, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                       "exact (a max rounds nothing) against torch.amax(x, dim=1)", unit="GB/s"),
            vs_reference(2.0, ((0.40, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                         "exact against the course's reference row max", unit="GB/s"),
        ),
        spot_error=max_spot_error,
        notebook="week3/day1_reductions",
        correctness_cells={"test_max_visible": "visible", "test_max_hidden": "hidden"},
        draw_hidden=draw_max_hidden,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week3/day1_reductions",
    (
        grading_table.Cells("`vector_sum` visible", "short vectors, printed by the check below",
                            {"test_sum_visible": 2}),
        grading_table.Cells(
            "`vector_sum` hidden",
            "vectors of up to 2^24 + 3 elements, lengths no multiple of a block",
            {"test_sum_hidden": 3},
        ),
        grading_table.Speed(
            "`vector_sum` speed",
            "GB/s over `torch.sum`, and over the course's reference",
            ((VECTOR_SUM, "vs_torch"), (VECTOR_SUM, "vs_reference")),
        ),
        grading_table.Cells("`row_max` visible", "the shapes printed by the check below", {"test_max_visible": 1}),
        grading_table.Cells(
            "`row_max` hidden",
            "rows of 1 to 3 elements, rows no multiple of a block, rows longer than a block",
            {"test_max_hidden": 2},
        ),
        grading_table.Speed(
            "`row_max` speed",
            "GB/s over `torch.amax(x, dim=1)`, and over the reference",
            ((ROW_MAX, "vs_torch"), (ROW_MAX, "vs_reference")),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_sum_bytes": 1, "test_atomics": 1, "test_race": 1, "test_max_order": 1},
        ),
    ),
))
