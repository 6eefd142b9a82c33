"""Week 3 Day 4: a fused GEMM epilogue. One graded function.

``w3d4.linear_gelu`` (kernel): C = gelu(A @ B + bias) with fp16 A (M, K), B (K, N) and bias (N,), fp32
accumulation, the bias and the activation applied to the fp32 accumulator, and one rounding to an fp16 output.
The activation is GELU in its tanh form (GPT-2's; ``torch.nn.functional.gelu(x, approximate="tanh")``), which a
kernel writes with a sigmoid: 0.5 x (1 + tanh(z)) = x sigmoid(2 z).

The inputs keep the pre-activation near 1, where GELU bends: A is standard normal, B standard normal divided by
sqrt(K), the bias standard normal. With B unscaled the pre-activations would be of size sqrt(K) and GELU would be
a ReLU in all but a few elements, so a wrong activation could pass. The reference is fp64. Rounding it to fp16
costs a relative error near 2e-4; the library path (an fp16 product rounded, the bias added in fp16, GELU in
fp16) rounds three times and lands near 4e-4 (a CPU emulation in the notebook). The fp16 tolerance of 1e-2 leaves
a wide margin for either and for any summation order, and a bias added along the wrong axis, a missing bias or a
ReLU in place of GELU errs by far more (tests/test_w3d4_fused_epilogue.py in the course's online repository).

The library is what a model does without fusion: cuBLAS's GEMM (fp32 accumulation, reduced-precision reductions
off) writes an fp16 C, then one kernel adds the bias and another applies GELU, each reading and writing all of C.
torch.compile, which fuses the bias and GELU into one generated kernel after cuBLAS's GEMM, is timed beside them in
the notebook and in bench/week3_gemm_attention_references.py in the course's online repository, but it is not the
graded library: the judge times one library function per exercise, and torch.compile would run Inductor's code
generation, its Triton compiles and its cache inside the judge, code of another kind than the fixed library calls
the judge times today.

A timed call's output is checked on a secret sample of rows (``sampled_rows_error``): the bias and the activation
make a Freivalds check impossible, and 64 exact rows cost 64 K N multiply-adds.
"""

from __future__ import annotations

import math
import secrets

import torch

from course import grading_table
from course.exercises import matmul
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, register, vs_library, vs_reference

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
SAMPLED_ROWS = 64

# Held from import time, so that nothing rebound later changes what the library path or the references compute.
_add, _gelu, _randperm = torch.add, torch.nn.functional.gelu, torch.randperm
_library_product = matmul.library(matmul.SHORTCUTS[torch.float16])  # cuBLAS, fp32 accumulation


def make_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """A (M, K) standard normal, B (K, N) standard normal / sqrt(K), bias (N,) standard normal; all fp16."""
    m, n, k = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), generator=generator, device=device).to(torch.float16)
    b = (torch.randn((k, n), generator=generator, device=device) / math.sqrt(k)).to(torch.float16)
    bias = torch.randn((n,), generator=generator, device=device).to(torch.float16)
    return a, b, bias


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh form, in the dtype of x (the reference calls it in fp64)."""
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def reference(inputs: Inputs) -> torch.Tensor:
    """gelu(A @ B + bias) in fp64 (every fp16 value is exact in fp64)."""
    a, b, bias = inputs
    return gelu_tanh(a.double() @ b.double() + bias.double())


def separate_kernels(inputs: Inputs) -> torch.Tensor:
    """The unfused path: cuBLAS's fp16 GEMM (fp32 accumulation), then a bias kernel, then a GELU kernel."""
    a, b, bias = inputs
    return _gelu(_add(_library_product((a, b)), bias), approximate="tanh")


def sampled_rows_error(inputs: Inputs, out: torch.Tensor) -> float:
    """The relative error of a secret sample of whole rows against fp64, drawn afresh for every call."""
    a, b, bias = inputs
    generator = torch.Generator(device="cpu").manual_seed(secrets.randbits(63))
    rows = _randperm(a.shape[0], generator=generator)[:SAMPLED_ROWS].to(a.device)
    expected = gelu_tanh(a[rows].double() @ b.double() + bias.double())
    got = out[rows].double()
    if not torch.isfinite(got).all():
        return math.inf
    return float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))


def flops(shape: Shape) -> float:
    """2 M N K: the GEMM's. The epilogue's few operations per output element are not counted."""
    m, n, k = shape
    return 2.0 * m * n * k


def bytes_moved(shape: Shape) -> float:
    """The least traffic: A, B, the bias and C once each, fp16."""
    m, n, k = shape
    return 2.0 * (m * k + k * n + n + m * n)


# Two more hidden shapes per grading run: every side 1, a prime or odd, and sides one off a power of two.
draw_hidden = matmul.hidden_drawer((matmul.one_prime_or_odd,) * 3, (matmul.near_power_of_two,) * 3)

THRESHOLD_PRECISION = "fp16 inputs, fp32 accumulation and epilogue, fp16 output"
LIBRARY = "cuBLAS fp16 GEMM + separate bias and GELU kernels"

LINEAR_GELU = register(
    ExerciseSpec(
        id="w3d4.linear_gelu",
        title="Fused GEMM epilogue: bias, GELU, cast (Week 3, Day 4)",
        function="linear_gelu",
        dims=("M", "N", "K"),
        precision="fp16",
        output_dtype=torch.float16,
        make_inputs=make_inputs,
        reference=reference,
        library=separate_kernels,
        library_name=LIBRARY,
        spot_error=sampled_rows_error,
        output_shape=lambda shape: (shape[0], shape[1]),
        flops=flops,
        bytes_moved=bytes_moved,
        # Square and not, sides that are no multiple of any tile, a single row: a bias read past N, or a tile
        # stored without its masks, fails here.
        visible_shapes=matmul.VISIBLE,
        hidden_shapes=ShapeSet(gpu=(*matmul.HIDDEN.gpu, (4097, 1031, 520)), cpu=(*matmul.HIDDEN.cpu, (33, 47, 9))),
        # An MLP's up-projection at three widths: the shorter K, the larger the share of time the unfused path
        # spends reading and writing C again. Every side a multiple of 128.
        bench_shapes=ShapeSet(gpu=((4096, 4096, 4096), (8192, 8192, 2048), (16384, 3072, 768)), cpu=()),
        thresholds=(
            # Full marks for matching the unfused path: fusing is the exercise, and a fused kernel that loses to
            # three library calls has not done it. Measured on an H100 (bench/RESULTS.md and
            # bench/results/h100/2026-12-07-week3-days4-5-references.json in the course's online repository): the
            # reference reached 1.22, 1.41 and 1.82 of this path at the three shapes (geometric mean 1.47), and
            # 1.05 of torch.compile's cuBLAS + one fused bias-GELU kernel.
            vs_library("vs_separate", LIBRARY, 3.0, ((0.60, 0.25), (0.80, 0.5), (0.90, 0.75), (1.00, 1.0)),
                       f"{THRESHOLD_PRECISION}, against {LIBRARY} (fp32 accumulation), same run"),
            vs_reference(2.0, ((0.45, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                         f"{THRESHOLD_PRECISION}, against the course's reference kernel, same run"),
        ),
        notebook="week3/day4_fused_epilogue",
        correctness_cells={"test_linear_gelu_visible": "visible", "test_linear_gelu_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week3/day4_fused_epilogue",
    (
        grading_table.Cells(
            "`linear_gelu`, visible",
            "the shapes printed by the check below",
            {"test_linear_gelu_visible": 2},
        ),
        grading_table.Cells(
            "`linear_gelu`, hidden",
            "more shapes: odd and prime sides, sides one off a power of two, a single row",
            {"test_linear_gelu_hidden": 3},
        ),
        grading_table.Speed(
            "`vs_separate`",
            "your speed / cuBLAS fp16 + separate bias and GELU kernels",
            ((LINEAR_GELU, "vs_separate"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your speed / the course's reference kernel",
            ((LINEAR_GELU, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_extra_bytes": 1, "test_bias_index": 1, "test_gelu_at_one": 1, "test_gemm_intensity": 1},
        ),
    ),
))
