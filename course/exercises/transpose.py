"""The transpose kind of problem, out = x.T for an fp32 matrix x (M, N): its inputs, exact reference and check,
its library yardstick (torch copying the same matrix) and the fields every transpose spec declares alike. Each
transpose exercise declares its own shapes, bands and hidden-shape rule through ``exercise``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from course.spec import ExerciseSpec, Inputs, Shape

# Held from import time (before any student code runs), so rebinding torch later cannot slow or fool the judge.
_library_clone = torch.Tensor.clone
_library_equal = torch.equal


def make_inputs(shape: Shape, seed: int, device: str) -> Inputs:
    """x (M, N) in fp32, standard normal, fresh for every seed."""
    m, n = shape
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn((m, n), generator=generator, device=device, dtype=torch.float32),)


def reference(inputs: Inputs) -> torch.Tensor:
    (x,) = inputs
    return x.t().contiguous()


def torch_copy(inputs: Inputs) -> torch.Tensor:
    """The bandwidth yardstick: torch copying the matrix, the same bytes read and written as a transpose, all of
    them contiguous."""
    (x,) = inputs
    return _library_clone(x)


def exact_error(inputs: Inputs, out: torch.Tensor) -> float:
    """0 when ``out`` equals x.T element for element (a transpose rounds nothing; NaN never equals), else inf:
    one comparison, no fp64 copy."""
    (x,) = inputs
    return 0.0 if tuple(out.shape) == (x.shape[1], x.shape[0]) and _library_equal(out, x.t()) else math.inf


def exercise(**fields: Any) -> ExerciseSpec:
    """A transpose exercise: what every one declares alike, and ``fields``, its own. Its speed is GB/s of bytes
    read plus bytes written."""
    common: dict[str, Any] = {
        "dims": ("M", "N"),
        "precision": "exact",
        "output_dtype": torch.float32,
        "make_inputs": make_inputs,
        "reference": reference,
        "library": torch_copy,
        "library_name": "torch copy",
        "spot_error": exact_error,
        "output_shape": lambda shape: (shape[1], shape[0]),
        "flops": lambda shape: 0.0,
        "bytes_moved": lambda shape: 2.0 * 4.0 * shape[0] * shape[1],
        "rate_unit": "GB/s",
    }
    return ExerciseSpec(**{**common, **fields})
