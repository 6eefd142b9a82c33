"""Week 2 Day 6: tensor cores. C = A @ B with fp16 or bf16 inputs, an fp32 accumulator, and C in the input's dtype.

The inputs are made in the exercise's dtype, so the fp64 reference multiplies exactly the values the
kernel reads: what the tolerance measures is the kernel's own rounding, the fp32 accumulation and the
final rounding of C to 16 bits. That last rounding alone costs a relative error of a fraction of the
unit roundoff (2**-11 for fp16, 2**-8 for bf16), far below the 1e-2 tolerance. An accumulator kept in
fp16 instead rounds after every tensor-core instruction, and its error grows like the square root of
the number of roundings: the GPU's hidden set holds a shape with K = 2**20 + 3, where that costs
several times the tolerance (``fp16_accumulation_error`` models it), while an fp32 accumulator leaves
little but the final rounding (about 2e-4 for an fp16 C). The interpreter's hidden set on a CPU cannot reach such a K in
reasonable time, so there an fp16 accumulator passes, provisionally.

cuBLAS is timed beside the student with reduced-precision reductions off, so it too accumulates in
fp32 only: the library doing exactly what the exercise asks.
"""

from __future__ import annotations

import math

import torch

from course import grading_table
from course.exercises import matmul

# Week 1 Day 7's hidden-shape rule serves here unchanged: two odd shapes per run (each side 1, a prime or an odd
# size; at most 3001 on a GPU, 70 in the interpreter).
from course.exercises.matmul_fp32 import draw_hidden
from course.spec import ExerciseSpec, ShapeSet, Threshold, register, vs_library, vs_reference

LARGE_K = 2**20 + 3  # the GPU's long reduction: an fp16 accumulator fails it, an fp32 one does not


def fp16_accumulation_error(k: int, chunk: int) -> float:
    """Expected ||C - C_exact|| / ||C_exact|| when an fp16 accumulator takes ``chunk`` exact products at a time.

    With standard normal inputs, the partial sum after ``j`` of the n = K / chunk steps has a variance
    of j * chunk. Rounding it to nearest fp16 errs by up to half an ulp, uniformly, and an ulp is
    between u and 2u of the value (u = 2**-11), so the error's RMS is about 0.42 u of the partial sum.
    The n errors are independent: their sum has a variance of (0.42 u)**2 * chunk * n**2 / 2, and
    dividing by |C|**2 = K gives 0.3 u sqrt(n). On a GPU a chunk is at most one tensor-core
    instruction's depth (16 for fp16); in the interpreter it is the kernel's BLOCK_K.
    """
    return 0.3 * 2.0**-11 * math.sqrt(k / chunk)


# Non-square shapes, shapes that are no multiple of any power-of-two tile, a single row, and (hidden,
# GPU) one long reduction. The CPU sets stay small: the interpreter runs every K-step in Python.
HIDDEN = ShapeSet(gpu=(*matmul.HIDDEN.gpu, (67, 45, LARGE_K)), cpu=(*matmul.HIDDEN.cpu, (20, 24, 4099)))
BENCH = ShapeSet(gpu=((4096, 4096, 4096), (8192, 8192, 8192)), cpu=())


def _thresholds(label: str) -> tuple[Threshold, ...]:
    library = f"cuBLAS {label} GEMM with fp32 accumulation (reduced-precision reductions off)"
    exercise = f"{label} inputs, fp32 accumulation, {label} output"
    return (
        # Measured on an H100 (bench/RESULTS.md in the course's online repository): the reference (a plain tl.dot kernel
        # without grouped ordering, with the tiles of the notebook's tiles_for: 128 x 256 x 64, 4 stages) reached 0.93
        # of cuBLAS fp16 and of cuBLAS bf16; with 128 x 128 x 64 tiles, 0.80. Full marks at 0.60 leave room for other
        # GPUs and drift; a kernel that leaves the tensor cores idle (fp32 FMA arithmetic) lands below the lowest band.
        vs_library("vs_cublas", f"cuBLAS {label}", 2.0 if label == "fp16" else 1.0,
                   ((0.20, 0.25), (0.35, 0.5), (0.50, 0.75), (0.60, 1.0)), f"{exercise}, against {library}"),
        # Full marks at 85% of the course's reference kernel, measured in the same run. The tiles are the
        # notebook's (tiles_for, a locked cell), so an honest kernel is the reference's launch, near 1.0.
        vs_reference(1.0, ((0.30, 0.25), (0.50, 0.5), (0.70, 0.75), (0.85, 1.0)),
                     f"{exercise}, against the course's reference kernel"),
    )


def _spec(label: str, dtype: torch.dtype) -> ExerciseSpec:
    return matmul.exercise(
        dtype,
        id=f"w2d6.matmul_{label}",
        title=f"{label} matmul on tensor cores, fp32 accumulation (Week 2, Day 6)",
        function=f"matmul_{label}",
        hidden_shapes=HIDDEN,
        bench_shapes=BENCH,
        thresholds=_thresholds(label),
        notebook="week2/day6_tensor_cores",
        correctness_cells={f"test_matmul_{label}_visible": "visible", f"test_matmul_{label}_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )


FP16 = register(_spec("fp16", torch.float16))
BF16 = register(_spec("bf16", torch.bfloat16))
# cuBLAS accumulating in fp32 only (reduced-precision reductions off): 16-bit in, 16-bit out. The names the
# notebook's tests and the benches use.
fp16_inputs, cublas_fp16 = FP16.make_inputs, FP16.library
bf16_inputs, cublas_bf16 = BF16.make_inputs, BF16.library


TABLE = grading_table.register(grading_table.GradingTable(
    "week2/day6_tensor_cores",
    (
        grading_table.Cells(
            "fp16, visible",
            "`matmul_fp16` on the shapes printed by its check",
            {"test_matmul_fp16_visible": 2},
        ),
        grading_table.Cells(
            "fp16, hidden",
            "more shapes: non-square, single rows, odd sizes, and on a GPU one reduction of about a million",
            {"test_matmul_fp16_hidden": 2},
        ),
        grading_table.Cells(
            "bf16, visible",
            "`matmul_bf16` on the shapes printed by its check",
            {"test_matmul_bf16_visible": 1},
        ),
        grading_table.Cells(
            "bf16, hidden",
            "the same hidden shapes",
            {"test_matmul_bf16_hidden": 1},
        ),
        grading_table.Speed(
            "fp16 `vs_cublas`",
            "your speed / cuBLAS fp16",
            ((FP16, "vs_cublas"),),
        ),
        grading_table.Speed(
            "fp16 `vs_reference`",
            "your speed / the course's reference kernel",
            ((FP16, "vs_reference"),),
        ),
        grading_table.Speed(
            "bf16 `vs_cublas`",
            "as for fp16, against cuBLAS bf16",
            ((BF16, "vs_cublas"),),
        ),
        grading_table.Speed(
            "bf16 `vs_reference`",
            "as for fp16",
            ((BF16, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {
                "test_fp16_unit_roundoff": 1,
                "test_bf16_unit_roundoff": 1,
                "test_bf16_error_exponent": 1,
                "test_fp16_accumulator_growth": 1,
            },
        ),
    ),
))
