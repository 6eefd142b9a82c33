"""Week 2 Day 4: software pipelining. Two graded functions.

``w2d4.matmul_fp16`` (kernel): C = A @ B with fp16 inputs, products summed in fp32 (``tl.dot``'s
default accumulator for fp16 operands) and an fp16 output. Judged against an fp64 reference with the
"fp16" tolerance (1e-2, relative Frobenius error), and timed beside cuBLAS doing the same fp16 GEMM
(``torch.mm`` on fp16 tensors, held at import). The student picks the tile and ``num_stages``; the
speed items reward a kernel whose loads are pipelined.

``w2d4.smem_bytes`` (host): the shared memory one program of a pipelined matmul needs,
``stages * (BM * BK + BK * BN) * dtype_bytes`` bytes: one buffer per stage, each holding an A tile
and a B tile. Judged exactly, on shapes drawn afresh for each grading run, so a table of the visible
answers fails. Compiled for sm_90 by Triton 3.6, the course's kernel allocated exactly this many
bytes for every stage count tried (the course's own tests check it).
"""

from __future__ import annotations

import random
from typing import Any

import torch

from course import grading_table
from course.exercises import matmul
from course.spec import Inputs, Shape, ShapeSet, host_exercise, register, vs_library, vs_reference

NOTEBOOK = "week2/day4_pipelining"

# ---------------------------------------------------------------------------------------------------
# w2d4.matmul_fp16



# Two hidden shapes per grading run, each side 1, a power of two give or take one, or odd.
draw_matmul_hidden = matmul.hidden_drawer((matmul.near_power_of_two,) * 3, (matmul.near_power_of_two,) * 3)


MATMUL = register(
    matmul.exercise(
        # fp16 tolerance: rounding the fp32 sum to fp16 alone costs about 3e-4 (relative); 1e-2 leaves room for
        # any order of summation in fp32, and refuses fp8 operands (a few percent).
        torch.float16,
        # cuBLAS with torch's defaults: unlike Days 5-7, reduced-precision (fp16) split-K reductions stay allowed,
        # as when the bands below were measured.
        library_shortcut=True,
        id="w2d4.matmul_fp16",
        title="Pipelined fp16 matmul (Week 2, Day 4)",
        function="matmul",
        # Two squares and one non-square shape, all compute-bound (hundreds of FLOP per byte moved).
        bench_shapes=ShapeSet(
            gpu=((4096, 4096, 4096), (8192, 8192, 8192), (8192, 3072, 5120)),
            cpu=(),
        ),
        thresholds=(
            # Measured on an H100 (bench/RESULTS.md in the course's online repository): the tile the notebook suggests
            # (128 x 128 x 64, 8 warps, 3 or 4 stages, no grouped ordering) reached 0.72-0.75 of cuBLAS fp16 on the
            # geometric mean of the three shapes, the reference (128 x 256 x 64, 4 stages) 0.92. Full points at 0.60
            # leave room for drift and other GPUs.
            vs_library("vs_cublas", "cuBLAS fp16", 2.0, ((0.30, 0.25), (0.42, 0.5), (0.52, 0.75), (0.60, 1.0)),
                       "fp16 inputs, fp32 accumulation, fp16 output, against cuBLAS fp16 (torch.mm)"),
            # Against the reference (128 x 256 x 64 tiles, 4 stages), measured on an H100 as the judge measures
            # (bench/w2d4_stage_students.py in the course's online repository): 128 x 128 x 64 tiles with 1, 2, 3 and 4
            # stages reached 0.47, 0.66, 0.81 and 0.78; 128 x 256 x 64 with 2 and 3 stages 0.58 and 0.94; 64 x 64 x 32
            # with 3 stages 0.32. Full points at 0.70 give the suggested tile with 3 or 4 stages full marks with room
            # for drift.
            vs_reference(2.0, ((0.30, 0.25), (0.45, 0.5), (0.56, 0.75), (0.70, 1.0)),
                         "fp16 inputs, fp32 accumulation, fp16 output, against the course's reference kernel"),
        ),
        notebook=NOTEBOOK,
        correctness_cells={"test_matmul_visible": "visible", "test_matmul_hidden": "hidden"},
        draw_hidden=draw_matmul_hidden,
    )
)

# ---------------------------------------------------------------------------------------------------
# w2d4.smem_bytes


def smem_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """(BM, BN, BK, stages, dtype_bytes) as plain ints: all from the shape, none from the seed."""
    return tuple(int(n) for n in shape)


def smem_reference(inputs: Inputs) -> int:
    block_m, block_n, block_k, stages, dtype_bytes = inputs
    return stages * (block_m * block_k + block_k * block_n) * dtype_bytes


def accept_bytes(out: Any, reference: Any, shape: Shape) -> tuple[bool, str]:
    """An int (not a bool, a float or a NumPy integer) equal to the reference byte count."""
    if type(out) is not int:
        return False, f"returned {type(out).__name__}, expected an int (a number of bytes)"
    if out == reference:
        return True, f"{out} bytes"
    block_m, block_n, block_k, stages, dtype_bytes = shape
    hint = ""
    if out * stages == reference:
        hint = ": one stage's worth; every stage has buffers of its own"
    elif out * dtype_bytes == reference:
        hint = ": elements, not bytes"
    elif out == stages * (block_m * block_n) * dtype_bytes:
        hint = ": that is the output tile's size, but the buffers hold the A and B tiles"
    return False, f"returned {out}, expected {reference} bytes{hint}"


def draw_smem_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Three tiles per grading run: power-of-two sides from 16 to 256, 1 to 8 stages, 1, 2 or 4 bytes."""
    def tile() -> Shape:
        sides = [rng.choice((16, 32, 64, 128, 256)) for _ in range(3)]
        return (*sides, rng.randint(1, 8), rng.choice((1, 2, 4)))

    return tuple(tile() for _ in range(3))


matmul_inputs, cublas_fp16 = MATMUL.make_inputs, MATMUL.library  # the names the tests and benches use

_SMEM_VISIBLE = ((128, 128, 64, 3, 2), (64, 256, 32, 4, 2), (16, 16, 16, 1, 4))
_SMEM_HIDDEN = ((128, 256, 64, 5, 2), (32, 64, 128, 2, 1), (256, 128, 32, 7, 4), (64, 64, 32, 1, 2))

SMEM = register(
    host_exercise(
        id="w2d4.smem_bytes",
        title="Shared memory of a pipelined matmul (Week 2, Day 4)",
        function="smem_bytes",
        dims=("BM", "BN", "BK", "stages", "dtype_bytes"),
        precision="exact",  # accept_bytes decides
        output_dtype=torch.int64,
        make_inputs=smem_inputs,
        reference=smem_reference,
        visible=_SMEM_VISIBLE,
        hidden=_SMEM_HIDDEN,
        notebook=NOTEBOOK,
        correctness_cells={"test_smem_bytes_visible": "visible", "test_smem_bytes_hidden": "hidden"},
        draw_hidden=draw_smem_hidden,
        accept=accept_bytes,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day4_pipelining",
    (
        grading_table.Cells(
            "`smem_bytes`, visible",
            "the tiles printed by its check",
            {"test_smem_bytes_visible": 1},
        ),
        grading_table.Cells(
            "`smem_bytes`, hidden",
            "more tiles, drawn afresh for every grading run",
            {"test_smem_bytes_hidden": 1},
        ),
        grading_table.Cells(
            "matmul, visible",
            "the shapes printed by its check",
            {"test_matmul_visible": 2},
        ),
        grading_table.Cells(
            "matmul, hidden",
            "more shapes: non-square, single rows, sizes that are no multiple of a tile",
            {"test_matmul_hidden": 2},
        ),
        grading_table.Speed(
            "`vs_cublas`",
            "your speed / cuBLAS fp16",
            ((MATMUL, "vs_cublas"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference kernel",
            ((MATMUL, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_max_stages": 1, "test_programs_per_sm": 1, "test_stages_to_hide": 1, "test_more_stages": 1},
        ),
    ),
))
