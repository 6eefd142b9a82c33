"""Week 1 Day 6: tiling made visible. C = A @ B in fp32 by rank-1 updates of a register tile, without tl.dot.

Each program keeps a BLOCK_M x BLOCK_N accumulator and, for every k, adds the outer product of a column
of A's tile and a row of B's tile: each element it loads is used BLOCK_N (or BLOCK_M) times. The work
is plain fp32 multiply-adds, so the exercise is graded in full fp32 against the same fp64 reference and
cuBLAS SGEMM (TF32 off) as Day 7, whose input, reference and library functions it reuses. ``tl.dot``
(and ``tl.dot_scaled``) are forbidden: with them the kernel would be Day 7's, and its speed would say
nothing about reuse through the register tile.
"""

from __future__ import annotations

import torch

from course import grading_table
from course.exercises import matmul
from course.exercises.matmul_fp32 import draw_hidden
from course.spec import Shape, ShapeSet, floor, register, vs_reference

BYTES = 4  # fp32


def loaded_bytes(shape: Shape, block_m: int, block_n: int) -> int:
    """Bytes of A and B a (block_m x block_n)-tiled matmul loads from global memory, caches ignored.

    Every program in a row of the grid loads the same rows of A (cdiv(N, block_n) programs), every program
    in a column the same columns of B (cdiv(M, block_m)); masked-off lanes load nothing. block_m = block_n = 1
    is the untiled kernel: one program per output, a row of A and a column of B each.
    """
    m, n, k = shape
    return BYTES * (m * k * -(-n // block_n) + k * n * -(-m // block_m))


SPEC = register(
    matmul.exercise(
        torch.float32,
        id="w1d6.matmul_outer",
        title="Tiled fp32 matmul by rank-1 updates, without tl.dot (Week 1, Day 6)",
        function="matmul_tiled",
        # Non-square shapes, sides that are no multiple of any power-of-two tile, a single row and a single
        # column: a kernel without masks on M, N or K fails some of them. CPU shapes stay tiny (interpreter).
        visible_shapes=ShapeSet(
            gpu=((512, 512, 512), (1000, 1030, 515), (1, 300, 257)),
            cpu=((48, 40, 56), (70, 45, 50), (1, 33, 65)),
        ),
        hidden_shapes=ShapeSet(
            gpu=(*matmul.HIDDEN.gpu, (77, 1, 300)),
            cpu=((130, 65, 33), (17, 129, 31), (3, 5, 120), (37, 1, 19)),
        ),
        bench_shapes=ShapeSet(
            gpu=((1024, 1024, 1024), (2048, 2048, 2048), (3000, 2000, 1500)),
            cpu=(),
        ),
        thresholds=(
            # Measured on an H100 (bench/RESULTS.md in the course's online repository): the reference (32 x 128 tiles,
            # one warp, BLOCK_K 8) ran at 5.0, 19.9 and 14.3 TFLOP/s on the three shapes; a 64 x 64 tile with 4 warps
            # and BLOCK_K 4 at 8.0, 8.1 and 5.9; the untiled kernel at about 0.4 (H200), and the old reference
            # (64 x 64, 4 warps, BLOCK_K 8, which spills) at 0.4, 0.3 and 1.8. The floor sits between.
            floor(2000, "fp32 (plain FMAs, no tensor cores)"),
            # Full points at 85% of the reference measured in the same run; a smaller tile keeps most.
            vs_reference(2.0, ((0.30, 0.25), (0.50, 0.5), (0.70, 0.75), (0.85, 1.0)),
                         "fp32 (plain FMAs) against the course's rank-1 reference kernel"),
        ),
        notebook="week1/day6_tiling",
        correctness_cells={"test_tiled_visible": "visible", "test_tiled_hidden": "hidden"},
        draw_hidden=draw_hidden,
        forbidden_calls=("tl.dot", "tl.dot_scaled"),
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day6_tiling",
    (
        grading_table.Cells(
            "visible correctness",
            "the shapes printed by the check in section 3",
            {"test_tiled_visible": 2},
        ),
        grading_table.Cells(
            "hidden correctness",
            "more shapes: non-square, a single row or column, sides that no tile divides",
            {"test_tiled_hidden": 3},
        ),
        grading_table.Speed(
            "`floor`",
            "an absolute speed floor",
            ((SPEC, "floor"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference kernel, same run",
            ((SPEC, "vs_reference"),),
        ),
        grading_table.Cells(
            "traffic questions",
            "five short answers in section 7",
            {
                "test_untiled_bytes": 1,
                "test_tiled_bytes": 1,
                "test_reduction": 1,
                "test_best_block_m": 1,
                "test_sum_form": 1,
            },
        ),
    ),
))
