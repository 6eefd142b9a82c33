"""Small Triton matmul kernels used by the tests: one right, and several wrong in known ways."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from course import device


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MASKED: tl.constexpr, SKIP_FIRST: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    steps = tl.cdiv(K, BK) if MASKED else K // BK
    for step in range(0, steps):
        rk = step * BK + tl.arange(0, BK)
        if MASKED:
            a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak,
                        mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn,
                        mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        else:
            a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak)
            b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SKIP_FIRST:
        mask = mask & ~((rm[:, None] == 0) & (rn[None, :] == 0))
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=mask)


def _launch(a: torch.Tensor, b: torch.Tensor, masked: bool, skip_first: bool, block: int) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, block), triton.cdiv(n, block)) if masked else (m // block, n // block)
    if grid[0] and grid[1]:
        _matmul[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BM=block, BN=block, BK=32,
                      MASKED=masked, SKIP_FIRST=skip_first)
    return c


def _block() -> int:
    return 32 if device.info().interpret else 64


def good_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _launch(a, b, masked=True, skip_first=False, block=_block())


def matmul_missing_one_element(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _launch(a, b, masked=True, skip_first=True, block=_block())


def matmul_multiples_of_64_only(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """No masks, whole tiles only: right when M, N and K are multiples of the tiles, wrong otherwise."""
    return _launch(a, b, masked=False, skip_first=False, block=64)


# The right kernel under Triton's autotuner (two tile sizes), made once so that it keeps its choices.
_tuned = triton.autotune([triton.Config({"BM": 32, "BN": 32}), triton.Config({"BM": 64, "BN": 64})],
                         key=["M", "N", "K"])(_matmul)


def tuned_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    _tuned[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BK=32, MASKED=True, SKIP_FIRST=False)
    return c
