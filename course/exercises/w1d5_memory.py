"""Week 1 Day 5: memory. A copy kernel graded on bandwidth, and a strided read graded on correctness.

A copy does no arithmetic, so its speed is its bandwidth: bytes read plus bytes written, over the
time. It is compared with torch's own device copy (``Tensor.clone``) in the same run, on sizes far
larger than the L2 cache (50 MB on an H100, datasheet), so both stream from device memory and
neither is helped by a cache that still holds the input. A copy is exact: every output element must
equal its input element bit for bit.
"""

from __future__ import annotations

import random

import torch

from course import grading_table
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, register, vs_library, vs_reference

# Held from import time (before any student code runs), so rebinding them later cannot slow the library calls.
_library_clone = torch.Tensor.clone
_library_contiguous = torch.Tensor.contiguous
_library_equal = torch.equal


def _randn(n: int, seed: int, device: str) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randn((n,), generator=generator, device=device, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------- copy

def copy_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    (n,) = shape
    return (_randn(n, seed, device),)


def copy_reference(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return _library_clone(x)


def torch_copy(inputs: Inputs) -> torch.Tensor:
    """torch's device copy: the library doing exactly what the exercise asks."""
    (x,) = inputs
    return _library_clone(x)


def copy_mismatch(inputs: Inputs, out: torch.Tensor) -> float:
    """0.0 when ``out`` equals the input element for element (NaN never does), else inf.

    The whole output is compared, at the cost of reading it once more: no cheaper test of a copy
    could catch a single wrong element.
    """
    (x,) = inputs
    return 0.0 if _library_equal(out, x) else float("inf")


def draw_copy_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two lengths per grading run: one anywhere, one just off a multiple of a power-of-two block."""
    limit = 2**22 if has_gpu else 20_000
    block = rng.choice([128, 256, 512, 1024, 2048, 4096])
    near = max(1, block * rng.randrange(1, max(2, limit // block)) + rng.choice([-1, 1]))
    return (rng.randrange(1, limit + 1),), (near,)


COPY = register(
    ExerciseSpec(
        id="w1d5.copy",
        title="Copy kernel (Week 1, Day 5)",
        function="copy",
        dims=("N",),
        precision="exact",
        output_dtype=torch.float32,
        make_inputs=copy_inputs,
        reference=copy_reference,
        library=torch_copy,
        library_name="torch copy",
        rate_unit="GB/s",
        output_shape=lambda shape: (shape[0],),
        flops=lambda shape: 0.0,
        bytes_moved=lambda shape: 2.0 * 4.0 * shape[0],  # every fp32 element read once and written once
        # Lengths that are no multiple of any block (a kernel without a mask fails or crashes on them),
        # a single element, and exact multiples of common blocks (a kernel whose grid is one short fails).
        visible_shapes=ShapeSet(
            gpu=((2**20,), (1_000_003,), (1,)),
            cpu=((4096,), (1000,), (1,)),
        ),
        hidden_shapes=ShapeSet(
            gpu=((2**24 + 1,), (8191,), (3,), (65_537,)),
            cpu=((8193,), (2047,), (3,), (5000,)),
        ),
        # All far past the 50 MB L2 of an H100 (datasheet): 0.5 GiB, 1 GiB and an odd 600 MB of input.
        bench_shapes=ShapeSet(gpu=((2**27,), (2**28,), (150_000_001,)), cpu=()),
        thresholds=(
            # Measured (bench/RESULTS.md in the course's online repository): the reference copy reached 0.99 of torch's
            # copy on an H100 and 0.96-0.97 on an H200 at every benchmark length with 8 warps; 16 warps
            # 0.98 on the H200. A plain masked copy (one launch) reached the same
            # at 2^27 and 2^28 elements but 0.86 (H100) and 0.73 (H200) at the odd length, where its loads lose
            # their 16-byte width: 0.95 and 0.88 as a geometric mean. Full marks at 0.75 leave room for that, for
            # run-to-run drift and for other GPUs; a copy that leaves its loads uncoalesced lands far below the
            # lowest band.
            vs_library("vs_torch", "torch's device copy", 2.0, ((0.30, 0.25), (0.50, 0.5), (0.65, 0.75), (0.75, 1.0)),
                       "exact (fp32 copied bit for bit) against torch's device copy, Tensor.clone", unit="GB/s"),
            # Full marks at 80% of the course's reference copy, measured in the same run. The reference launches
            # whole blocks and then the tail; a student's plain masked copy with sensible blocks reached 0.96 of
            # it (H100) and 0.91 (H200) as a geometric mean, all of the gap at the odd length.
            vs_reference(2.0, ((0.30, 0.25), (0.50, 0.5), (0.65, 0.75), (0.80, 1.0)),
                         "exact (fp32 copied bit for bit) against the course's reference copy", unit="GB/s"),
        ),
        spot_error=copy_mismatch,
        notebook="week1/day5_memory",
        correctness_cells={"test_copy_visible": "visible", "test_copy_hidden": "hidden"},
        draw_hidden=draw_copy_hidden,
    )
)


# ------------------------------------------------------------------------------------------ every_kth

def every_kth_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    n, k = shape
    return _randn(n, seed, device), int(k)  # k comes from the shape, never from the seed


def every_kth_reference(inputs: Inputs) -> torch.Tensor:
    x, k = inputs
    return _library_contiguous(x[::k])


def torch_every_kth(inputs: Inputs) -> torch.Tensor:
    x, k = inputs
    return _library_contiguous(x[::k])


def draw_every_kth_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """One (N, K) per grading run: K from 1 to 64 and, unless K is 1, N no multiple of K."""
    limit = 2**22 if has_gpu else 20_000
    k = rng.choice([1, 2, 3, 5, 8, 16, 31, 64])
    n = rng.randrange(1, limit + 1)
    return ((n + 1 if k > 1 and n % k == 0 else n, k),)


EVERY_KTH = register(
    ExerciseSpec(
        id="w1d5.every_kth",
        title="Strided read: every k-th element (Week 1, Day 5)",
        function="every_kth",
        dims=("N", "K"),
        precision="exact",
        output_dtype=torch.float32,
        make_inputs=every_kth_inputs,
        reference=every_kth_reference,
        library=torch_every_kth,
        library_name="torch strided copy",
        rate_unit="GB/s",
        output_shape=lambda shape: (-(-shape[0] // shape[1]),),
        flops=lambda shape: 0.0,
        bytes_moved=lambda shape: 2.0 * 4.0 * -(-shape[0] // shape[1]),  # the useful bytes only
        # K = 1 (a plain copy), N a multiple of K and not, N smaller than K (one element out).
        visible_shapes=ShapeSet(
            gpu=((1_000_000, 4), (999_999, 7), (64, 1)),
            cpu=((4000, 4), (1001, 7), (64, 1)),
        ),
        hidden_shapes=ShapeSet(
            gpu=((3_000_001, 32), (5, 9), (65_536, 16)),
            cpu=((6001, 32), (5, 9), (4096, 16)),
        ),
        # Graded for correctness only: the notebook measures how its bandwidth falls with K.
        bench_shapes=ShapeSet(gpu=(), cpu=()),
        thresholds=(),
        notebook="week1/day5_memory",
        correctness_cells={"test_every_kth_visible": "visible", "test_every_kth_hidden": "hidden"},
        draw_hidden=draw_every_kth_hidden,
    )
)


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day5_memory",
    (
        grading_table.Cells(
            "copy, visible",
            "the lengths printed by the check below",
            {"test_copy_visible": 2},
        ),
        grading_table.Cells(
            "copy, hidden",
            "more lengths: odd ones, one off a multiple of a block, a few elements",
            {"test_copy_hidden": 2},
        ),
        grading_table.Speed(
            "`vs_torch`",
            "your copy's bandwidth / torch's device copy",
            ((COPY, "vs_torch"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your copy's bandwidth / the course's reference copy",
            ((COPY, "vs_reference"),),
        ),
        grading_table.Cells(
            "every k-th, visible",
            "the (N, K) pairs printed by its check",
            {"test_every_kth_visible": 1},
        ),
        grading_table.Cells(
            "every k-th, hidden",
            "more pairs, K up to 64",
            {"test_every_kth_hidden": 1},
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_saxpy_intensity": 1, "test_h100_fp16_ridge": 1, "test_fma_repeats": 1, "test_warp_sectors": 1},
        ),
    ),
))
