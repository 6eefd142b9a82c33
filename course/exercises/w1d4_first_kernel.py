"""Week 1 Day 4: a first Triton kernel. Vector add and SAXPY, right for every length and for strided inputs.

A shape is ``(n, x_step, y_step)``: the inputs are views ``x = base_x[::x_step]`` and
``y = base_y[::y_step]`` of ``n`` fp32 elements each, so a step above 1 is a non-contiguous input
whose stride the kernel must use. The views start at their storage's first element, so the launch
plan's pointers (buffer + offset) replay on the judge's own views. The output is a new contiguous
vector of ``n`` fp32 elements.

Both operations read two vectors and write one: ``12 n`` bytes, a handful of FLOPs per element
(1 for the add, 2 for SAXPY). They are bound by memory bandwidth, so speed is stated in GB/s and
compared with ``torch.add`` (the library doing the same job in one kernel) and with the course's
reference kernel, both in the same run, on sizes far past the H100's 50 MB L2 (datasheet figure)
so that DRAM, not the cache, is measured.

The fp32 result of one add (or one multiply-add) is within one rounding of the exact value, a
relative error near 6e-8, so the fp32 tolerance of 1e-5 leaves a wide margin and still refuses
a kernel that skips or misplaces any element.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from course import grading_table
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, Threshold, register, vs_library, vs_reference

DIMS = ("n", "x_step", "y_step")
# Held from import time (before any student code runs), so rebinding torch.add later cannot slow the library.
_library_add = torch.add


def _strided(n: int, step: int, generator: torch.Generator, device: str) -> torch.Tensor:
    """n random fp32 values, every ``step``-th element of a fresh buffer (a view starting at its first element)."""
    return torch.randn(n * step, generator=generator, device=device, dtype=torch.float32)[::step]


def make_xy(shape: Shape, seed: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    n, x_step, y_step = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    return _strided(n, x_step, generator, device), _strided(n, y_step, generator, device)


def alpha_for(shape: Shape) -> float:
    """SAXPY's scalar, from the shape alone (the judge replays it as recorded, so it must not depend on the seed).

    (2k - 23) / 8 for k = n mod 23: an odd multiple of 1/8 between -2.875 and 2.625, never 0 or +-1 (a kernel
    that drops alpha, or x, cannot pass), and it changes with n, so a kernel with one alpha baked in fails.
    """
    return (2 * (shape[0] % 23) - 23) / 8


def make_add_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    return make_xy(shape, seed, device)


def make_saxpy_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    x, y = make_xy(shape, seed, device)
    return alpha_for(shape), x, y


def add_reference(inputs: Inputs) -> torch.Tensor:
    x, y = inputs
    return x.double() + y.double()


def saxpy_reference(inputs: Inputs) -> torch.Tensor:
    alpha, x, y = inputs
    return alpha * x.double() + y.double()


def torch_add(inputs: Inputs) -> torch.Tensor:
    x, y = inputs
    return _library_add(x, y)


def torch_saxpy(inputs: Inputs) -> torch.Tensor:
    """y + alpha * x as one torch kernel (torch.add's ``alpha`` argument)."""
    alpha, x, y = inputs
    return _library_add(y, x, alpha=alpha)


_PRIMES_CPU = (3, 5, 13, 31, 257, 509, 1021, 2039, 4093, 8191, 12289)
_PRIMES_GPU = (*_PRIMES_CPU, 65537, 131071, 524287, 1048573, 4194301)


def draw_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """One more shape per grading run: a prime or an odd length, and steps of 1 to 3 for each input."""
    limit = 4_194_304 if has_gpu else 12_289
    primes = _PRIMES_GPU if has_gpu else _PRIMES_CPU
    n = rng.choice(primes) if rng.random() < 0.5 else rng.randrange(1, limit, 2)
    return ((n, rng.randint(1, 3), rng.randint(1, 3)),)


# Lengths of 1 and 2, primes (97, 4099, 8191, 1031, 65537, 99991, 1048573), other lengths that are no
# multiple of a block of 128 or more, one power of two, and strided views of either input or both. The visible
# strided shape steps x by 2 and y by 3: a kernel without a mask, one that ignores the stride of x or of y, or
# one that uses one input's stride for both, already fails a visible shape. The CPU sets are small (the
# interpreter is slow); the GPU sets reach a million elements.
VISIBLE = ShapeSet(
    gpu=((1, 1, 1), (97, 1, 1), (1_000_000, 1, 1), (4099, 2, 3)),
    cpu=((1, 1, 1), (97, 1, 1), (5000, 1, 1), (300, 2, 3)),
)
HIDDEN = ShapeSet(
    gpu=((2, 1, 1), (1_048_573, 1, 1), (2**20, 1, 1), (65_537, 3, 1), (12_345, 1, 2), (99_991, 2, 3)),
    cpu=((2, 1, 1), (8191, 1, 1), (4096, 1, 1), (1031, 3, 1), (777, 1, 2), (500, 2, 3)),
)
# Each fp32 vector of 2**26 elements is 256 MiB and of 2**28 1 GiB: far past the 50 MB L2 of an H100
# (datasheet), so every byte comes from DRAM. The third length is odd: the last program is masked.
BENCH = ShapeSet(gpu=((2**26, 1, 1), (2**28, 1, 1), (3 * 2**25 + 1, 1, 1)), cpu=())


def _bytes_moved(shape: Shape) -> float:
    """Two fp32 vectors read and one written: the least traffic, whatever the steps of the inputs."""
    return 3.0 * 4.0 * shape[0]


def _thresholds(library: str) -> tuple[Threshold, ...]:
    # Measured on an H100 (bench/RESULTS.md in the course's online repository): the reference reached 0.999 of torch's
    # kernel (geometric mean; 2990-3038 GB/s at 2^26 to 2^28 elements, at least 100% of torch's 2.96 TB/s copy). Both
    # kernels are bound by DRAM bandwidth on these sizes, so a kernel that keeps enough memory traffic in flight (blocks
    # of a few hundred elements or more, 4 or 8 warps) runs about as fast as torch.add and the reference.
    # Tiny blocks, or one warp per program, leave the memory system idle part of the time and fall well
    # short. Full points at 80% of the library and of the reference leave room for run-to-run drift
    # (several percent on one GPU) and for other GPUs, where torch's own kernel may be tuned better.
    return (
        vs_library("vs_torch", library, 1.0, ((0.40, 0.25), (0.55, 0.5), (0.70, 0.75), (0.80, 1.0)),
                   f"fp32 against {library}, same run", unit="GB/s"),
        vs_reference(1.0, ((0.40, 0.25), (0.55, 0.5), (0.70, 0.75), (0.80, 1.0)),
                     "fp32 against the course's reference kernel, same run", unit="GB/s"),
    )


def _exercise(function: str, title: str, flops_per_element: float, **fields: Any) -> ExerciseSpec:
    """One of the day's two streaming exercises: fp32 vectors of N elements (their steps in the shape), a GB/s
    rate over the least traffic, and bands against its library."""
    return ExerciseSpec(
        id=f"w1d4.{function}", title=f"{title} (Week 1, Day 4)", function=function, dims=DIMS,
        precision="fp32-ieee", output_dtype=torch.float32, output_shape=lambda shape: (shape[0],),
        flops=lambda shape: flops_per_element * shape[0], bytes_moved=_bytes_moved, rate_unit="GB/s",
        visible_shapes=VISIBLE, hidden_shapes=HIDDEN, bench_shapes=BENCH,
        thresholds=_thresholds(fields["library_name"]), notebook="week1/day4_first_triton_kernel",
        correctness_cells={f"test_{function}_visible": "visible", f"test_{function}_hidden": "hidden"},
        draw_hidden=draw_hidden, **fields)


ADD = register(_exercise("vector_add", "Vector add", 1.0, make_inputs=make_add_inputs, reference=add_reference,
                         library=torch_add, library_name="torch add"))
SAXPY = register(_exercise("saxpy", "SAXPY", 2.0, make_inputs=make_saxpy_inputs, reference=saxpy_reference,
                           library=torch_saxpy, library_name="torch add (alpha)"))


TABLE = grading_table.register(grading_table.GradingTable(
    "week1/day4_first_triton_kernel",
    (
        grading_table.Cells(
            "vector add, visible",
            "the shapes printed by its check below",
            {"test_vector_add_visible": 2},
        ),
        grading_table.Cells(
            "vector add, hidden",
            ("more lengths (2, primes, a power of two, one length drawn afresh for every grading run) and strided "
             "views of `x`, `y` or both"),
            {"test_vector_add_hidden": 3},
        ),
        grading_table.Cells(
            "SAXPY, visible",
            "the same visible shapes, with an `alpha` made from each length",
            {"test_saxpy_visible": 1},
        ),
        grading_table.Cells(
            "SAXPY, hidden",
            "the hidden shapes",
            {"test_saxpy_hidden": 2},
        ),
        grading_table.Speed(
            "`vs_torch`, for add and for SAXPY",
            "your bandwidth as a fraction of `torch.add`'s, same run",
            ((ADD, "vs_torch"), (SAXPY, "vs_torch"),),
        ),
        grading_table.Speed(
            "`vs_reference`, for add and for SAXPY",
            "your bandwidth as a fraction of the course's reference kernel's, same run",
            ((ADD, "vs_reference"), (SAXPY, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_programs_needed": 1, "test_masked_lanes": 1, "test_saxpy_intensity": 1, "test_add_gbps": 1},
        ),
    ),
))
