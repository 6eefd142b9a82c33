"""Week 1 Day 7: a tiled fp32 matmul, C = A @ B, graded in full fp32 (``input_precision="ieee"``).

TF32 would be several times faster on tensor cores but rounds the inputs to 10 mantissa bits,
a relative error near 1e-4 to 1e-3: the 1e-5 tolerance below refuses it, so the exercise grades
true fp32 arithmetic and compares it with cuBLAS's fp32 SGEMM (TF32 off) in the same run.
"""

from __future__ import annotations

import torch

from course import grading_table
from course.exercises import matmul
from course.spec import ShapeSet, floor, register, vs_library, vs_reference

# Two hidden shapes per grading run, each side 1, a prime or odd: no tile divides it.
draw_hidden = matmul.hidden_drawer((matmul.one_prime_or_odd,) * 3, (matmul.one_prime_or_odd,) * 3)


SPEC = register(
    matmul.exercise(
        torch.float32,
        id="w1d7.matmul_fp32",
        title="Tiled fp32 matmul (Week 1, Day 7)",
        function="matmul",
        bench_shapes=ShapeSet(
            gpu=((1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (3000, 2000, 1500)),
            cpu=(),
        ),
        thresholds=(
            floor(500, "fp32 (ieee)"),
            # The course's own 64x64x32 kernel measured 0.88-0.96 of cuBLAS (geometric mean) on an
            # H100 (bench/RESULTS.md in the course's online repository): full points at 70% leave room for other GPUs
            # and run-to-run drift.
            vs_library("vs_cublas", "cuBLAS fp32", 2.0, ((0.25, 0.25), (0.40, 0.5), (0.55, 0.75), (0.70, 1.0)),
                       "fp32 (ieee) against cuBLAS SGEMM with TF32 off"),
            vs_reference(2.0, ((0.30, 0.25), (0.50, 0.5), (0.70, 0.75), (0.85, 1.0)),
                         "fp32 (ieee) against the course's reference kernel"),
        ),
        notebook="week1/day7_fast_matmul",
        correctness_cells={"test_matmul_visible": "visible", "test_matmul_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )
)
# cuBLAS SGEMM with TF32 off (the library doing what the exercise asks), and the inputs: the names Day 6's
# notebook, the SGEMM ladder and the benches use.
make_inputs, cublas_fp32 = SPEC.make_inputs, SPEC.library


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day7_fast_matmul",
    (
        grading_table.Cells(
            "visible correctness",
            "the shapes printed by the check below",
            {"test_matmul_visible": 2},
        ),
        grading_table.Cells(
            "hidden correctness",
            "more shapes: non-square, single rows, sizes that are not a multiple of any tile",
            {"test_matmul_hidden": 3},
        ),
        grading_table.Speed(
            "`floor`",
            "",
            ((SPEC, "floor"),),
        ),
        grading_table.Speed(
            "`vs_cublas`",
            "your speed / cuBLAS fp32 speed",
            ((SPEC, "vs_cublas"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference kernel",
            ((SPEC, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_flops_4096": 1, "test_a_reads": 1, "test_step_intensity": 1, "test_tf32": 1},
        ),
    ),
))
