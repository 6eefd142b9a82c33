"""Week 2 Day 5: an fp16 matmul whose tiles arrive through TMA tensor descriptors, with a pointer fallback.

``C = A @ B`` with fp16 inputs, fp32 accumulation and an fp16 output, graded at the "fp16"
tolerance against an fp64 reference and timed beside cuBLAS doing the same (fp16 in and out, fp32
accumulation: cuBLAS's reduced-precision fp16 reductions are switched off while it runs).

The graded wrapper decides per call which kernel runs: the TMA kernel on a GPU of compute
capability 9.0 or newer when every matrix can be described (16-byte aligned base and row stride:
N and K multiples of 8 for fp16 row-major matrices), the pointer kernel otherwise, and always in
the CPU interpreter. The shapes below are chosen so that a Hopper GPU runs both: some with N and K
multiples of 8 (TMA, edges included: M, N or K no multiple of a tile) and some with an odd N or K
(the fallback). The benchmark shapes all take the TMA path.
"""

from __future__ import annotations

import torch

from course import grading_table
from course.exercises import matmul
from course.spec import ShapeSet, register, vs_library, vs_reference

# Two hidden shapes per grading run: one a Hopper GPU runs through TMA (N and K multiples of 8, M anything), one
# it runs through the fallback (K odd).
draw_hidden = matmul.hidden_drawer((matmul.any_side, matmul.multiple_of_8, matmul.multiple_of_8),
                                   (matmul.any_side, matmul.any_side, matmul.odd_side))


SPEC = register(
    matmul.exercise(
        torch.float16,
        id="w2d5.matmul_tma",
        title="fp16 matmul through TMA descriptors (Week 2, Day 5)",
        function="matmul_tma",
        # GPU: 512^3 and 1000 x 1032 x 520 go through TMA (the second with edge tiles in M, N and K, which TMA
        # zero-fills on load and clips on store); 1 x 300 x 257 has an odd K, so the fallback runs.
        visible_shapes=matmul.VISIBLE_ALIGNED,
        # GPU: TMA for the first, third and fourth (N = 24 is narrower than any tile); the fallback for the second.
        hidden_shapes=ShapeSet(
            gpu=((2048, 1024, 768), (129, 65, 1027), (3001, 24, 64), (77, 136, 200)),
            cpu=((130, 65, 33), (17, 128, 32), (3, 5, 200), (40, 24, 16)),
        ),
        bench_shapes=ShapeSet(
            gpu=((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (6000, 3000, 4096)),
            cpu=(),
        ),
        thresholds=(
            # Measured on an H100 (bench/RESULTS.md in the course's online repository): the replayed reference TMA
            # kernel (128 x 256 x 64, 3 stages) reached 0.92 of cuBLAS fp16 on the geometric mean of the four shapes
            # (0.96 at 4096^3, 0.75 at 6000 x 3000 x 4096, whose 6000-byte rows slow every TMA load); with 128 x 128 x
            # 64 tiles, 0.84. Full points at 75% leave room for run-to-run drift (cuBLAS itself moved by about 10%
            # between runs).
            vs_library("vs_cublas", "cuBLAS fp16", 2.0, ((0.30, 0.25), (0.50, 0.5), (0.65, 0.75), (0.75, 1.0)),
                       "fp16 in and out, fp32 accumulation, against cuBLAS fp16 (fp32 accumulation)"),
            # The reference is the course's TMA kernel (grouped order, the tiles of the notebook's launch_config, a
            # locked cell); a kernel of the same design lands near 1.0, one without TMA or with small tiles well below.
            vs_reference(2.0, ((0.30, 0.25), (0.50, 0.5), (0.70, 0.75), (0.85, 1.0)),
                         "fp16 in and out, fp32 accumulation, against the course's reference TMA kernel"),
        ),
        notebook="week2/day5_tma",
        correctness_cells={"test_matmul_tma_visible": "visible", "test_matmul_tma_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )
)
# cuBLAS HGEMM accumulating in fp32 throughout (reduced-precision reductions off), and the inputs: the names the
# tests and benches use.
make_inputs, cublas_fp16 = SPEC.make_inputs, SPEC.library


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day5_tma",
    (
        grading_table.Cells(
            "visible correctness",
            "the shapes printed by the check below; on a Hopper GPU two go through TMA and one through the fallback",
            {"test_matmul_tma_visible": 2},
        ),
        grading_table.Cells(
            "hidden correctness",
            "more shapes for each path: edge tiles in M, N and K, an output narrower than a tile, odd sizes",
            {"test_matmul_tma_hidden": 3},
        ),
        grading_table.Speed(
            "`vs_cublas`",
            "your speed / cuBLAS fp16 speed",
            ((SPEC, "vs_cublas"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference TMA kernel",
            ((SPEC, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_tma_min_major": 1, "test_k_multiple": 1, "test_box_bytes": 1, "test_edge_rows": 1},
        ),
    ),
))
