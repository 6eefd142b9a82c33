"""The matmul kind of problem, C = A @ B, in every precision the course grades: its inputs, its exact
reference, its library baseline and its cheap check of a timed output. Each matmul exercise declares its
precision through these; its shapes, bands and hidden-shape rule stay its own.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import torch

from course.spec import Inputs, Shape

# Held from import time (before any student code runs), so rebinding torch.mm later cannot slow a baseline.
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
    def baseline(inputs: Inputs) -> torch.Tensor:
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

    return baseline


def freivalds_error(inputs: Inputs, out: torch.Tensor) -> float:
    """||C x - A (B x)|| / ||A (B x)|| in fp64 for a fresh secret x: O(n^2), and any wrong region of C shows.
    The vector is new for every call, so no output can be shaped to pass a known test."""
    a, b = inputs
    generator = torch.Generator(device=out.device).manual_seed(secrets.randbits(63))
    x = torch.randn((b.shape[1], 2), generator=generator, device=out.device, dtype=torch.float64)
    expected = a.double() @ (b.double() @ x)
    got = out.double() @ x
    return float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))


def fields(element_bytes: float) -> dict[str, Any]:
    """What every matmul spec declares alike: its dims, exact reference, check of a timed output, and the output
    shape, FLOPs (2MNK) and bytes (A, B and C once each, ``element_bytes`` each) of a shape (M, N, K)."""
    return {
        "dims": ("M", "N", "K"),
        "reference": reference,
        "spot_error": freivalds_error,
        "output_shape": lambda shape: (shape[0], shape[1]),
        "flops": lambda shape: 2.0 * shape[0] * shape[1] * shape[2],
        "bytes_moved": lambda shape: element_bytes * (shape[0] * shape[2] + shape[2] * shape[1] + shape[0] * shape[1]),
    }
