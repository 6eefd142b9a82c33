"""The matmul kind of problem, C = A @ B, in every precision the course grades: its inputs, its exact
reference, its library, its cheap check of a timed output, the shapes most matmul exercises are
checked on, and the rules hidden shapes are drawn by. Each matmul exercise declares its precision, shapes,
bands and hidden-shape rule through these.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
from typing import Any

import torch

from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet

# Non-square shapes, sides that are no multiple of any power-of-two tile, and a single row: a kernel without
# masks, or one right only for multiples of 64, fails these. The CPU's are small enough for the interpreter.
VISIBLE = ShapeSet(gpu=((512, 512, 512), (1000, 1030, 515), (1, 300, 257)),
                   cpu=((64, 64, 64), (100, 70, 90), (1, 33, 65)))
# As VISIBLE, with N and K of the second shape multiples of 8 (16-byte rows in fp16: a TMA kernel's shapes).
VISIBLE_ALIGNED = ShapeSet(gpu=((512, 512, 512), (1000, 1032, 520), (1, 300, 257)),
                           cpu=((64, 64, 64), (100, 72, 88), (1, 33, 65)))
# K longer than any tile, a short M and N, a long thin output.
HIDDEN = ShapeSet(gpu=((2048, 1024, 768), (129, 65, 1027), (3001, 17, 64)),
                  cpu=((130, 65, 33), (17, 129, 31), (3, 5, 200)))

Side = Callable[[random.Random, int], int]  # (rng, the largest side) -> one side of a hidden shape
PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 251, 509, 1021, 2039, 3001)
HIDDEN_LIMIT = {True: 3001, False: 70}  # the largest hidden side on a GPU, and in the CPU interpreter


def one_prime_or_odd(rng: random.Random, limit: int) -> int:
    """1 (15%), a prime (45%) or any odd size: no tile divides it."""
    choice = rng.random()
    if choice < 0.15:
        return 1
    if choice < 0.6:
        return rng.choice([p for p in PRIMES if p <= limit])
    return rng.randrange(1, limit + 1, 2)


def near_power_of_two(rng: random.Random, limit: int) -> int:
    """1 (15%), one more or one less than a power of two (40%: a tile's size off by one), or any odd size."""
    choice = rng.random()
    if choice < 0.15:
        return 1
    if choice < 0.55:
        return rng.choice([2**p for p in range(4, 13) if 2**p + 1 <= limit]) + rng.choice((-1, 1))
    return rng.randrange(1, limit + 1, 2)


def multiple_of_8(rng: random.Random, limit: int) -> int:
    """A multiple of 8: an fp16 row of this length is 16-byte aligned, as a TMA descriptor needs."""
    return 8 * rng.randint(1, limit // 8)


def any_side(rng: random.Random, limit: int) -> int:
    return rng.randrange(1, limit + 1)


def odd_side(rng: random.Random, limit: int) -> int:
    return rng.randrange(1, limit + 1, 2)


def hidden_drawer(*rules: tuple[Side, Side, Side]) -> Callable[[random.Random, bool], tuple[Shape, ...]]:
    """A spec's ``draw_hidden``: one (M, N, K) per rule, each side drawn by its own rule, fresh every grading run
    and small in the CPU interpreter."""
    def draw(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
        limit = HIDDEN_LIMIT[has_gpu]
        return tuple(tuple(side(rng, limit) for side in rule) for rule in rules)

    return draw

# Held from import time (before any student code runs), so rebinding torch.mm later cannot slow a library call.
_library_mm = torch.mm


def inputs_in(dtype: torch.dtype, drawn_in: torch.dtype = torch.float32) -> Callable[[Shape, int, str], Inputs]:
    """An input maker: A (M, K) and B (K, N), standard normal values drawn in ``drawn_in`` from ``seed`` and
    rounded to ``dtype``; fresh for every seed. ``drawn_in`` differs between exercises only because each
    band was measured with its own inputs; the values are what the reference multiplies either way."""
    def make(shape: Shape, seed: int, device: str) -> Inputs:
        m, n, k = shape
        generator = torch.Generator(device=device).manual_seed(seed)
        a = torch.randn((m, k), generator=generator, device=device, dtype=drawn_in).to(dtype)
        b = torch.randn((k, n), generator=generator, device=device, dtype=drawn_in).to(dtype)
        return a, b

    return make


def reference(inputs: Inputs) -> torch.Tensor:
    """The exact product in fp64 (every fp32, fp16 and bf16 value is exact in fp64)."""
    a, b = inputs
    return a.double() @ b.double()


def library(switched_off: str | None) -> Callable[[Inputs], torch.Tensor]:
    """The library's GEMM (cuBLAS through ``torch.mm``, fp32 accumulation) with the ``torch.backends.cuda.matmul``
    flag named ``switched_off`` (a shortcut: TF32, or reduced-precision reductions) off while it runs, so it does
    exactly what the exercise asks; None leaves torch's defaults."""
    def call(inputs: Inputs) -> torch.Tensor:
        a, b = inputs
        if switched_off is None:
            return _library_mm(a, b)
        flags = torch.backends.cuda.matmul
        previous = getattr(flags, switched_off)
        setattr(flags, switched_off, False)
        try:
            return _library_mm(a, b)
        finally:
            setattr(flags, switched_off, previous)

    return call


def freivalds_error(inputs: Inputs, out: torch.Tensor) -> float:
    """||C x - A (B x)|| / ||A (B x)|| in fp64 for a fresh secret x: O(n^2), and any wrong region of C shows.
    The vector is new for every call, so no output can be shaped to pass a known test."""
    a, b = inputs
    generator = torch.Generator(device=out.device).manual_seed(secrets.randbits(63))
    x = torch.randn((b.shape[1], 2), generator=generator, device=out.device, dtype=torch.float64)
    expected = a.double() @ (b.double() @ x)
    got = out.double() @ x
    return float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))


PRECISIONS = {torch.float32: ("fp32-ieee", 4), torch.float16: ("fp16", 2), torch.bfloat16: ("bf16", 2)}
# The torch.backends.cuda.matmul shortcut that would let cuBLAS do less than the exercise asks, per precision:
# TF32 for fp32, and reduced-precision (16-bit) split-K reductions for fp16 and bf16.
SHORTCUTS = {torch.float32: "allow_tf32", torch.float16: "allow_fp16_reduced_precision_reduction",
             torch.bfloat16: "allow_bf16_reduced_precision_reduction"}
LIBRARY_NAMES = {torch.float32: "cuBLAS", torch.float16: "cuBLAS fp16", torch.bfloat16: "cuBLAS bf16"}


def exercise(dtype: torch.dtype, *, library_shortcut: bool = False, drawn_in: torch.dtype = torch.float32,
             **fields: Any) -> ExerciseSpec:
    """A matmul exercise in ``dtype`` (inputs and output): what every one declares alike, its dims, exact
    reference, check of a timed output, tolerance, and the output shape, FLOPs (2MNK) and bytes (A, B and C once
    each) of a shape (M, N, K); inputs drawn in ``drawn_in``; cuBLAS as the library, with the precision's shortcut
    switched off unless ``library_shortcut`` (then torch's defaults); and, unless ``fields`` name their own, the
    VISIBLE and HIDDEN shapes."""
    precision, element_bytes = PRECISIONS[dtype]
    switched_off = None if library_shortcut else SHORTCUTS[dtype]
    common: dict[str, Any] = {
        "dims": ("M", "N", "K"),
        "precision": precision,
        "output_dtype": dtype,
        "make_inputs": inputs_in(dtype, drawn_in),
        "reference": reference,
        "library": library(switched_off),
        "library_name": LIBRARY_NAMES[dtype],
        "spot_error": freivalds_error,
        "output_shape": lambda shape: (shape[0], shape[1]),
        "flops": lambda shape: 2.0 * shape[0] * shape[1] * shape[2],
        "bytes_moved": lambda shape: element_bytes * (shape[0] * shape[2] + shape[2] * shape[1] + shape[0] * shape[1]),
        "visible_shapes": VISIBLE,
        "hidden_shapes": HIDDEN,
    }
    return ExerciseSpec(**{**common, **fields})
