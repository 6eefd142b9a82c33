"""Week 2 bonus day: the CUDA-core SGEMM ladder, eight CUDA C kernels from naive to 0.9 of cuBLAS.

Each rung is its own exercise, ``w2x.sgemm_v1`` to ``w2x.sgemm_v7``: the fp32 product C = A @ B of
Week 1 Day 7 (its inputs, fp64 reference, 1e-5 tolerance in full fp32, Freivalds spot check, drawn
hidden shapes and cuBLAS SGEMM with TF32 off as the library are imported from ``matmul_fp32``),
written in CUDA C through ``course.cuda``. CUDA C has no CPU interpreter: without a GPU every kernel
and performance item is pending.

Speed is graded against cuBLAS fp32 in the same run, with bands that rise with the rung: each
version is expected to be about as fast as its design allows, not as fast as cuBLAS.

"v6b really is v6b": speed alone cannot tell (a good v5 may beat a poor v6b), so each exercise
counts only kernels whose source is a string constant of its own answer cell (``kernel_cells``,
checked by the grader's judge). Launching the v3 kernel from ``sgemm_v6b``, the
defect of the ladder's source document, earns none of v6b's points; a copy of v3's source pasted
into the v6b cell is correct and keeps the correctness points, but not v6b's speed points.
"""

from __future__ import annotations

import torch

from course import grading_table
from course.exercises import matmul
from course.exercises.matmul_fp32 import draw_hidden
from course.spec import ExerciseSpec, ShapeSet, register, vs_library

NOTEBOOK = "week2/bonus_sgemm_ladder"
VERSIONS = ("v1", "v2", "v3", "v4", "v5", "v6a", "v6b", "v7")

TITLES = {
    "v1": "naive",
    "v2": "shared memory for A",
    "v3": "shared memory for A and B",
    "v4": "thread coarsening (1D block tiling)",
    "v5": "2D block and warp tiling",
    "v6a": "float4 loads, checked only at the edges",
    "v6b": "A transposed in shared memory (no bank conflicts)",
    "v7": "a bigger tile, chosen for the shape",
}

# Full points at a fraction of cuBLAS fp32 (TF32 off) that the rung's design should reach with room
# to spare (the notebook's traffic and bank tables say why the rungs differ), and well below what the
# course's own kernel for that rung reaches, so that the reference solution earns every point on any
# run: each band says "this is a v<n>", not "this beats cuBLAS".
# Measured on an H100 at 4096^3 (bench/RESULTS.md and bench/sgemm_ladder_gpu.py in the course's online repository): v1
# 8.0%, v2 12.8%, v3 16.5%, v4 31.6%, v5 57.2%, v6a 68.6%, v6b 81.2% of cuBLAS fp32 (51.7 TFLOP/s). Full credit sits at
# 0.6-0.8 of each rung's measured fraction, above the rung below it, so that launching an earlier rung's design
# under a later name costs speed points. v7 (128 x 256 or 128 x 128 tiles, one block an SM) measured 0.909 of
# cuBLAS at 4096^3 and 0.995 at 3000 x 2000 x 1500 on an H100 (the tile sweep in bench/RESULTS.md in the course's online
# repository), and through the judge on an H200 0.92 and 0.99, then 0.915 and 0.953. Its full credit (a
# geometric mean of 0.84) sits above v6b's own (about 0.78), so that v6b's kernel under v7's name loses points, and
# below the 0.86 of the 128 x 256 tile without the choice by shape (0.909 and 0.819 on the H100), a v7 all the same.
BANDS: dict[str, tuple[tuple[float, float], ...]] = {
    "v1": ((0.03, 0.5), (0.05, 1.0)),
    "v2": ((0.05, 0.5), (0.08, 1.0)),
    "v3": ((0.07, 0.5), (0.11, 1.0)),
    "v4": ((0.14, 0.5), (0.22, 1.0)),
    "v5": ((0.28, 0.5), (0.40, 1.0)),
    "v6a": ((0.35, 0.5), (0.50, 1.0)),
    "v6b": ((0.35, 0.25), (0.45, 0.5), (0.55, 0.75), (0.65, 1.0)),
    "v7": ((0.70, 0.25), (0.76, 0.5), (0.80, 0.75), (0.84, 1.0)),
}
POINTS = {"v1": 1.0, "v2": 1.0, "v3": 1.0, "v4": 1.0, "v5": 2.0, "v6a": 2.0, "v6b": 3.0, "v7": 2.0}

# Every rung is checked on the same shapes: a single element, sizes that are no multiple of any tile
# (nor of 4, so v6a, v6b and v7 take their scalar paths), non-square and thin matrices.
VISIBLE = ShapeSet(
    gpu=((1, 1, 1), (127, 129, 131), (1000, 1030, 515), (512, 512, 512)),
    cpu=((1, 1, 1), (17, 9, 33)),
)
HIDDEN = ShapeSet(
    gpu=((4097, 4095, 1023), (2048, 1024, 768), (129, 65, 1027), (3001, 17, 64), (5, 3001, 2)),
    cpu=((3, 5, 7), (33, 17, 9)),
)
# 4096^3 is where the targets are stated; 3000 x 2000 x 1500 has edge tiles in every direction.
BENCH = ShapeSet(gpu=((4096, 4096, 4096), (3000, 2000, 1500)), cpu=())


def _spec(version: str) -> ExerciseSpec:
    return matmul.exercise(
        torch.float32,
        id=f"w2x.sgemm_{version}",
        title=f"SGEMM {version}: {TITLES[version]}",
        function=f"sgemm_{version}",
        visible_shapes=VISIBLE,
        hidden_shapes=HIDDEN,
        bench_shapes=BENCH,
        thresholds=(
            vs_library("vs_cublas", "cuBLAS fp32", POINTS[version],
                       BANDS[version], "fp32 (ieee) against cuBLAS SGEMM with TF32 off, same run"),
        ),
        notebook=NOTEBOOK,
        correctness_cells={f"test_sgemm_{version}_visible": "visible", f"test_sgemm_{version}_hidden": "hidden"},
        draw_hidden=draw_hidden,
        language="cuda",
        kernel_cells=(f"sgemm_{version}",),
    )


SPECS = {version: register(_spec(version)) for version in VERSIONS}


TABLE = grading_table.register(grading_table.GradingTable(
    NOTEBOOK,
    (
        grading_table.Cells("each version, visible shapes", "a single element, sizes no multiple of any tile, a square",
                            {f"test_sgemm_{v}_visible": 1 for v in VERSIONS}),
        grading_table.Cells("each version, hidden shapes", "more odd, thin and non-square sizes",
                            {f"test_sgemm_{v}_hidden": 1 for v in VERSIONS}),
        *(grading_table.Speed(f"`vs_cublas`, {v}", "your speed / cuBLAS fp32, same run", ((SPECS[v], "vs_cublas"),))
          for v in VERSIONS),
        grading_table.Cells("understanding check", "four short answers",
                            {"test_b_loads_v3": 1, "test_v5_a_read_passes": 1, "test_v6b_shared_bytes": 1,
                             "test_row1_float4_aligned": 1}),
    ),
))
