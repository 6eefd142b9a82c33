"""Week 3 Day 5: FlashAttention forward. Two graded specs of one function, ``attention(q, k, v, causal)``.

O = softmax(Q K^T / sqrt(d)) V for each batch and head, q, k and v of shape (B, H, N, d), causal (a query sees the
keys at its position and before) or not. The shape is (B, H, N, d, causal), causal 0 or 1; the function gets
``causal`` as a bool made from the shape, so the judge replays it as recorded. ``w3d5.attention_fp16`` takes fp16
tensors, ``w3d5.attention_bf16`` bf16 ones; both sum in fp32 and return the inputs' dtype.

Tolerances. The reference is fp64. Rounding it to the output dtype alone costs a relative error near 2e-4 in fp16
and 1.7e-3 in bf16 (8 bits of mantissa against 11); a kernel that also rounds the probabilities P to the input
dtype before the P V product, as every tensor-core kernel does, lands near 2.8e-4 and 2.2e-3 (a CPU emulation
in the notebook, N = 64 and 1024, d = 64). The course's 16-bit tolerance, 1e-2, keeps a margin of 4 or more for
bf16. A kernel that forgets to rescale its running sums when the maximum grows, that lets keys past N (or, causal,
after the query) into the softmax, or that divides by the wrong sum fails by far more
(tests/test_w3d5_flash_attention.py in the course's online repository).

Hidden shapes catch a sequence length that is no multiple of any block (primes, one off a power of two, N = 1 and
2), both head dims, causal and not. The speed is stated in TFLOP/s as FlashAttention's own benchmarks count it:
4 B H N^2 d FLOPs (Q K^T and P V, 2 N^2 d each per head), halved when causal, and is compared with PyTorch's
``scaled_dot_product_attention`` on its flash backend (FlashAttention-2) in the same run, in fp16, at N = 4096.
A timed call's output is checked on a secret sample of query rows of one head (``sampled_rows_error``).
"""

from __future__ import annotations

import math
import random
import secrets

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from course import grading_table
from course.exercises import matmul
from course.spec import ExerciseSpec, Inputs, Shape, ShapeSet, register, vs_library, vs_reference

HEAD_DIMS = (64, 128)
SAMPLED_ROWS = 64
REFERENCE_CHUNK_BYTES = 2**28  # the fp64 score matrices the reference holds at once

# Held from import time, so that nothing rebound later changes what the library or the references compute.
_sdpa, _softmax, _randint = torch.nn.functional.scaled_dot_product_attention, torch.softmax, torch.randint


def inputs_in(dtype: torch.dtype):
    """An input maker: q, k, v (B, H, N, d) standard normal in ``dtype``, and causal as a bool from the shape."""
    def make(shape: Shape, seed: int, device: str) -> Inputs:
        b, h, n, d, causal = shape
        generator = torch.Generator(device=device).manual_seed(seed)
        q, k, v = (torch.randn((b, h, n, d), generator=generator, device=device).to(dtype) for _ in range(3))
        return q, k, v, bool(causal)

    return make


def _exact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, rows: torch.Tensor) -> torch.Tensor:
    """fp64 attention of the query rows ``rows`` of q (..., len(rows), d) against all of k and v (..., N, d)."""
    scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        later = torch.arange(k.shape[-2], device=q.device)[None, :] > rows[:, None]
        scores = scores.masked_fill(later, float("-inf"))
    return _softmax(scores, dim=-1) @ v.double()


def reference(inputs: Inputs) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v in fp64, a few heads at a time (the score matrices are N x N)."""
    q, k, v, causal = inputs
    b, h, n, d = q.shape
    out = torch.empty((b * h, n, d), dtype=torch.float64, device=q.device)
    q3, k3, v3 = (t.reshape(b * h, n, d) for t in (q, k, v))
    heads = max(1, REFERENCE_CHUNK_BYTES // (8 * n * n))
    rows = torch.arange(n, device=q.device)
    for first in range(0, b * h, heads):
        part = slice(first, first + heads)
        out[part] = _exact(q3[part], k3[part], v3[part], causal, rows)
    return out.reshape(b, h, n, d)


def flash_backend(inputs: Inputs) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention, held to its flash backend (FlashAttention-2)."""
    q, k, v, causal = inputs
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return _sdpa(q, k, v, is_causal=causal)


def sampled_rows_error(inputs: Inputs, out: torch.Tensor) -> float:
    """The relative error of a secret sample of query rows of one secret head against fp64, fresh every call."""
    q, k, v, causal = inputs
    b, h, n, _ = q.shape
    generator = torch.Generator(device="cpu").manual_seed(secrets.randbits(63))
    z, head = (int(_randint(0, size, (1,), generator=generator)) for size in (b, h))
    rows = _randint(0, n, (min(SAMPLED_ROWS, n),), generator=generator).to(q.device)
    expected = _exact(q[z, head, rows], k[z, head], v[z, head], causal, rows)
    got = out[z, head, rows].double()
    if not torch.isfinite(got).all():
        return math.inf
    return float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))


def flops(shape: Shape) -> float:
    """4 B H N^2 d (Q K^T and P V), halved when causal: FlashAttention's own count."""
    b, h, n, d, causal = shape
    return 4.0 * b * h * n * n * d / (2.0 if causal else 1.0)


def bytes_moved(shape: Shape) -> float:
    """The least traffic: q, k, v read and o written once, 2 bytes each."""
    b, h, n, d, _ = shape
    return 2.0 * 4 * b * h * n * d


def draw_hidden(rng: random.Random, has_gpu: bool) -> tuple[Shape, ...]:
    """Two more shapes per grading run: a sequence length one off a power of two or odd, each head dim, causal or
    not; small in the CPU interpreter."""
    limit = matmul.HIDDEN_LIMIT[has_gpu]

    def one(head_dim: int) -> Shape:
        return rng.randint(1, 2), rng.randint(1, 3), max(2, matmul.near_power_of_two(rng, limit)), head_dim, \
            rng.randint(0, 1)

    return one(64), one(128)


# Causal and not, both head dims, a length that fills whole blocks and ones that do not, a single query.
VISIBLE = ShapeSet(gpu=((1, 2, 512, 64, 0), (2, 3, 1000, 64, 1), (1, 2, 777, 128, 0), (1, 1, 1, 128, 1)),
                   cpu=((1, 2, 64, 64, 0), (1, 2, 50, 64, 1), (1, 1, 33, 128, 1), (1, 1, 1, 64, 0)))
# Longer rows, primes and one off a power of two, N = 2, several heads and batches.
HIDDEN = ShapeSet(gpu=((2, 4, 2048, 128, 1), (1, 3, 1531, 64, 1), (3, 2, 4099, 64, 0), (1, 2, 129, 128, 0),
                       (4, 1, 17, 64, 1), (1, 1, 2, 128, 1)),
                  cpu=((1, 2, 97, 64, 1), (2, 1, 65, 128, 0), (1, 1, 129, 64, 0), (1, 1, 2, 64, 1)))
# N = 4096, the length: both head dims, causal and not; B H = 64 heads.
BENCH = ShapeSet(gpu=((4, 16, 4096, 64, 0), (4, 16, 4096, 128, 0), (4, 16, 4096, 64, 1), (4, 16, 4096, 128, 1)),
                 cpu=())
LIBRARY = "PyTorch SDPA, flash backend (FlashAttention-2)"


def _spec(label: str, dtype: torch.dtype, timed: bool) -> ExerciseSpec:
    precision = f"{label} inputs, fp32 accumulation, {label} output"
    thresholds = (
        # Full marks at the 80% of the flash backend at N = 4096. Measured on an H100 (bench/RESULTS.md and
        # bench/results/h100/2026-12-07-week3-days4-5-references.json in the course's online repository): the
        # reference reached 1.37 to 1.46 of it in fp16 (geometric mean 1.42; 362 to 514 TFLOP/s) and 1.41 in bf16.
        vs_library("vs_flash", f"{LIBRARY} {label}", 3.0, ((0.40, 0.25), (0.55, 0.5), (0.70, 0.75), (0.80, 1.0)),
                   f"{precision}, against {LIBRARY}, same run"),
        vs_reference(2.0, ((0.45, 0.25), (0.60, 0.5), (0.75, 0.75), (0.85, 1.0)),
                     f"{precision}, against the course's reference kernel, same run"),
    ) if timed else ()
    return ExerciseSpec(
        id=f"w3d5.attention_{label}",
        title=f"FlashAttention forward, {label} (Week 3, Day 5)",
        function="attention",
        dims=("B", "H", "N", "d", "causal"),
        precision=label,
        output_dtype=dtype,
        make_inputs=inputs_in(dtype),
        reference=reference,
        library=flash_backend,
        library_name=f"{LIBRARY} {label}",
        spot_error=sampled_rows_error,
        output_shape=lambda shape: tuple(shape[:4]),
        flops=flops,
        bytes_moved=bytes_moved,
        visible_shapes=VISIBLE,
        hidden_shapes=HIDDEN,
        # bf16 is graded for correctness only: the same kernel, timed once (in fp16) per grading run.
        bench_shapes=BENCH if timed else ShapeSet(gpu=(), cpu=()),
        thresholds=thresholds,
        notebook="week3/day5_flash_attention",
        correctness_cells={f"test_attention_{label}_visible": "visible", f"test_attention_{label}_hidden": "hidden"},
        draw_hidden=draw_hidden,
    )


ATTENTION_FP16 = register(_spec("fp16", torch.float16, timed=True))
ATTENTION_BF16 = register(_spec("bf16", torch.bfloat16, timed=False))


TABLE = grading_table.register(grading_table.GradingTable(
    "week3/day5_flash_attention",
    (
        grading_table.Cells(
            "`attention`, fp16, visible",
            "the shapes printed by the check below",
            {"test_attention_fp16_visible": 2},
        ),
        grading_table.Cells(
            "`attention`, fp16, hidden",
            "more shapes: lengths that are primes or one off a power of two, N = 2, both head dims, causal and not",
            {"test_attention_fp16_hidden": 3},
        ),
        grading_table.Cells(
            "`attention`, bf16, visible",
            "the same shapes in bf16",
            {"test_attention_bf16_visible": 1},
        ),
        grading_table.Cells(
            "`attention`, bf16, hidden",
            "the hidden shapes in bf16",
            {"test_attention_bf16_hidden": 1},
        ),
        grading_table.Speed(
            "`vs_flash`",
            "your fp16 speed / PyTorch SDPA's flash backend",
            ((ATTENTION_FP16, "vs_flash"),),
        ),
        grading_table.Speed(
            "`vs_reference`",
            "your fp16 speed / the course's reference kernel",
            ((ATTENTION_FP16, "vs_reference"),),
        ),
        grading_table.Cells(
            "understanding check",
            "four short answers at the end",
            {"test_causal_flops": 1, "test_score_bytes": 1, "test_rescale_factor": 1, "test_last_program_blocks": 1},
        ),
    ),
))
