"""Kernels for the Week 1 Day 7 fp32 limit study (bench/w1d7_limit_variants.py, bench/w1d7_limit_profile.py).

Three families, all fp32 in and out with fp32 FMA arithmetic (no TF32):

- ``_dot_kernel``: the course's reference (``tl.dot(..., input_precision="ieee")``) with the sweep's grouped
  program order, plus two switches: ``EVEN_K`` (K is a multiple of BLOCK_K: the loads carry no masks at all, rows
  and columns past the edge are wrapped and the store alone is masked) and ``UNROLL`` (``tl.range``'s
  ``loop_unroll_factor``).
- ``_persistent_kernel``: the same body in a persistent grid (one program per resident slot, tiles strided).
- ``_gluon_fma_kernel``: the same arithmetic through Gluon's ``dot_fma`` with the layouts chosen by hand: a
  4 x 4 register block per thread repeated 2 x 2 (8 x 8 outputs a thread, as cuBLAS's SGEMM), A stored transposed
  (M-contiguous) in shared memory so each thread reads its A values 4 at a time along M, two shared buffers and a
  register prefetch of the next K-tile (one barrier per K-tile).
- ``_gluon_async_kernel``: the same 8 x 8 register layout fed as Triton feeds ``tl.dot``: ``STAGES`` shared buffers
  filled by cp.async (no registers held by loads in flight), A K-contiguous in shared memory with a swizzle that puts
  the four row groups of a warp in different banks, one barrier per K-tile.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group
    return pid_m, pid_n


@triton.jit
def _tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
          UNROLL: tl.constexpr):
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < M, cols < N
    if EVEN_K:  # wrap the edge rows and columns (their outputs are masked at the store): loads without masks
        a_rows, b_cols = rows % M, cols % N
    else:
        a_rows, b_cols = rows, cols
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + b_cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, loop_unroll_factor=UNROLL):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_ok = (k0 + ks) < K
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc, mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                EVEN_K: tl.constexpr, UNROLL: tl.constexpr):
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
          stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, UNROLL)


@triton.jit
def _persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                       stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, UNROLL: tl.constexpr):
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        pid_m, pid_n = _tile_of(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _tile(a_ptr, b_ptr, c_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
              stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, UNROLL)


@gluon.jit
def _gluon_fma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                      WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, A_TPW_K: gl.constexpr, B_TPW_N: gl.constexpr,
                      A_SPT_M: gl.constexpr, EVEN_K: gl.constexpr):
    WARPS: gl.constexpr = WARPS_M * WARPS_N
    # Accumulator: 4 x 4 per thread, 4 x 8 threads a warp; the tile repeats it, 8 x 8 a thread for 64 x 128 / 4 warps.
    acc_layout: gl.constexpr = gl.BlockedLayout([4, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_layout, 0)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_layout, 0)
    # Global loads: 16 bytes a load, coalesced along K for A and along N for B; A in A_SPT_M x 4 blocks a thread (up
    # to 4 x 4), so that its transposed store to shared memory is up to 16 bytes wide too.
    a_ld: gl.constexpr = gl.BlockedLayout([A_SPT_M, 4], [32 // A_TPW_K, A_TPW_K], [WARPS, 1], [1, 0])
    b_ld: gl.constexpr = gl.BlockedLayout([1, 4], [32 // B_TPW_N, B_TPW_N], [WARPS, 1], [1, 0])
    a_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0, 1])  # A transposed: M contiguous
    b_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])

    pid = gl.program_id(0)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = gl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group

    a_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_ld))
    a_ks = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_ld))
    b_ks = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, b_ld))
    b_cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, b_ld))
    a_row_ok = a_rows < M
    b_col_ok = b_cols < N
    if EVEN_K:  # wrap the edge rows and columns (their outputs are masked at the store): loads without masks
        a_rows = a_rows % M
        b_cols = b_cols % N
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + a_ks[None, :] * stride_ak
    b_ptrs = b_ptr + b_ks[:, None] * stride_bk + b_cols[None, :] * stride_bn

    a_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, BLOCK_K], a_sl)
    b_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_K, BLOCK_N], b_sl)
    a = gl.load(a_ptrs, mask=a_row_ok[:, None] & (a_ks[None, :] < K), other=0.0)
    b = gl.load(b_ptrs, mask=(b_ks[:, None] < K) & b_col_ok[None, :], other=0.0)
    a_smem.index(0).store(a)
    b_smem.index(0).store(b)
    gl.thread_barrier()

    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for i in range(k_tiles):
        # Prefetch the next K-tile into registers while this one is multiplied (masked off past K).
        k_next = (i + 1) * BLOCK_K
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        if EVEN_K:  # the last prefetch reads one K-tile past A's rows and B's end: wrap it to the first tile
            if i + 1 == k_tiles:
                a_ptrs -= K * stride_ak
                b_ptrs -= K * stride_bk
            a = gl.load(a_ptrs)
            b = gl.load(b_ptrs)
        else:
            a = gl.load(a_ptrs, mask=a_row_ok[:, None] & ((k_next + a_ks)[None, :] < K), other=0.0)
            b = gl.load(b_ptrs, mask=((k_next + b_ks)[:, None] < K) & b_col_ok[None, :], other=0.0)
        cur = i % 2
        acc = gl.dot_fma(a_smem.index(cur).load(a_op), b_smem.index(cur).load(b_op), acc)
        a_smem.index(1 - cur).store(a)
        b_smem.index(1 - cur).store(b)
        gl.thread_barrier()

    c_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    c_cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + c_rows[:, None] * stride_cm + c_cols[None, :] * stride_cn, acc,
             mask=(c_rows < M)[:, None] & (c_cols < N)[None, :])


@gluon.jit
def _gluon_async_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                        WARPS_M: gl.constexpr, WARPS_N: gl.constexpr, A_TPW_K: gl.constexpr, B_TPW_N: gl.constexpr,
                        STAGES: gl.constexpr, EVEN_K: gl.constexpr):
    WARPS: gl.constexpr = WARPS_M * WARPS_N
    acc_layout: gl.constexpr = gl.BlockedLayout([4, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_layout, 0)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_layout, 0)
    a_ld: gl.constexpr = gl.BlockedLayout([1, 4], [32 // A_TPW_K, A_TPW_K], [WARPS, 1], [1, 0])
    b_ld: gl.constexpr = gl.BlockedLayout([1, 4], [32 // B_TPW_N, B_TPW_N], [WARPS, 1], [1, 0])
    # A row r's 16-byte chunk c sits at chunk c ^ ((r // 4) % 4): rows 4 apart (a warp's four row groups) differ.
    a_sl: gl.constexpr = gl.SwizzledSharedLayout(4, 4, 4, [1, 0])
    b_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])

    pid = gl.program_id(0)
    tiles_m = gl.cdiv(M, BLOCK_M)
    tiles_n = gl.cdiv(N, BLOCK_N)
    group = GROUP_M * tiles_n
    first_m = (pid // group) * GROUP_M
    rows_in_group = gl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % rows_in_group
    pid_n = (pid % group) // rows_in_group

    a_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_ld))
    a_ks = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_ld))
    b_ks = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, b_ld))
    b_cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, b_ld))
    a_row_ok = a_rows < M
    b_col_ok = b_cols < N
    if EVEN_K:  # wrap the edge rows and columns (their outputs are masked at the store): copies without masks
        a_rows = a_rows % M
        b_cols = b_cols % N
    a_ptrs = a_ptr + a_rows[:, None] * stride_am + a_ks[None, :] * stride_ak
    b_ptrs = b_ptr + b_ks[:, None] * stride_bk + b_cols[None, :] * stride_bn

    a_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M, BLOCK_K], a_sl)
    b_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_K, BLOCK_N], b_sl)
    k_tiles = gl.cdiv(K, BLOCK_K)
    for s in gl.static_range(STAGES - 1):
        if s < k_tiles:
            k0 = s * BLOCK_K
            if EVEN_K:
                async_copy.async_copy_global_to_shared(a_smem.index(s), a_ptrs + k0 * stride_ak)
                async_copy.async_copy_global_to_shared(b_smem.index(s), b_ptrs + k0 * stride_bk)
            else:
                async_copy.async_copy_global_to_shared(a_smem.index(s), a_ptrs + k0 * stride_ak,
                                                       mask=a_row_ok[:, None] & ((k0 + a_ks)[None, :] < K))
                async_copy.async_copy_global_to_shared(b_smem.index(s), b_ptrs + k0 * stride_bk,
                                                       mask=((k0 + b_ks)[:, None] < K) & b_col_ok[None, :])
        async_copy.commit_group()

    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, acc_layout)
    for i in range(k_tiles):
        async_copy.wait_group(STAGES - 2)  # K-tile i has landed (this thread's copies) ...
        gl.thread_barrier()  # ... everyone's, and everyone is done reading the buffer refilled next
        nxt = i + STAGES - 1
        if nxt < k_tiles:
            buf = nxt % STAGES
            k0 = nxt * BLOCK_K
            if EVEN_K:
                async_copy.async_copy_global_to_shared(a_smem.index(buf), a_ptrs + k0 * stride_ak)
                async_copy.async_copy_global_to_shared(b_smem.index(buf), b_ptrs + k0 * stride_bk)
            else:
                async_copy.async_copy_global_to_shared(a_smem.index(buf), a_ptrs + k0 * stride_ak,
                                                       mask=a_row_ok[:, None] & ((k0 + a_ks)[None, :] < K))
                async_copy.async_copy_global_to_shared(b_smem.index(buf), b_ptrs + k0 * stride_bk,
                                                       mask=((k0 + b_ks)[:, None] < K) & b_col_ok[None, :])
        async_copy.commit_group()
        cur = i % STAGES
        acc = gl.dot_fma(a_smem.index(cur).load(a_op), b_smem.index(cur).load(b_op), acc)
    async_copy.wait_group(0)

    c_rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    c_cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + c_rows[:, None] * stride_cm + c_cols[None, :] * stride_cn, acc,
             mask=(c_rows < M)[:, None] & (c_cols < N)[None, :])


def _strides(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[int, ...]:
    return a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)


def dot_launcher(bm: int, bn: int, bk: int, warps: int, stages: int, group: int = 8, *, even_k: bool = False,
                 unroll: int = 1, maxnreg: int | None = None, persistent: int = 0):
    """``matmul(a, b)`` through ``_dot_kernel`` (or ``_persistent_kernel`` with ``persistent`` programs per SM).
    ``even_k`` takes the unmasked path where K is a multiple of ``bk``; ``maxnreg`` caps registers per thread."""
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        even = even_k and K % bk == 0
        if persistent:
            sms = torch.cuda.get_device_properties(a.device).multi_processor_count
            kernel, grid = _persistent_kernel, (min(tiles, persistent * sms),)
        else:
            kernel, grid = _dot_kernel, (tiles,)
        matmul.compiled = kernel[grid](a, b, c, M, N, K, *_strides(a, b, c), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       GROUP_M=group, EVEN_K=even, UNROLL=unroll, num_warps=warps, num_stages=stages,
                                       **extra)
        return c

    return matmul


def gluon_launcher(bm: int, bn: int, bk: int, warps_m: int, warps_n: int, group: int = 8, *, even_k: bool = False,
                   maxnreg: int | None = None):
    """``matmul(a, b)`` through ``_gluon_fma_kernel`` with ``warps_m x warps_n`` warps; ``even_k`` and ``maxnreg`` as
    in ``dot_launcher``."""
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        spt_m = max(1, min(4, bm * bk // (32 * warps_m * warps_n * 4)))
        matmul.compiled = _gluon_fma_kernel[grid](
            a, b, c, M, N, K, *_strides(a, b, c), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, WARPS_M=warps_m,
            WARPS_N=warps_n, A_TPW_K=min(32, bk // 4), B_TPW_N=min(32, bn // 4), A_SPT_M=spt_m,
            EVEN_K=even_k and K % bk == 0, num_warps=warps_m * warps_n, **extra)
        return c

    return matmul


def gluon_async_launcher(bm: int, bn: int, bk: int, warps_m: int, warps_n: int, stages: int = 3, group: int = 8, *,
                         even_k: bool = True, maxnreg: int | None = None):
    """``matmul(a, b)`` through ``_gluon_async_kernel`` with ``warps_m x warps_n`` warps and ``stages`` buffers."""
    extra = {} if maxnreg is None else {"maxnreg": maxnreg}

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        matmul.compiled = _gluon_async_kernel[grid](
            a, b, c, M, N, K, *_strides(a, b, c), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, WARPS_M=warps_m,
            WARPS_N=warps_n, A_TPW_K=min(32, bk // 4), B_TPW_N=min(32, bn // 4), STAGES=stages,
            EVEN_K=even_k and K % bk == 0, num_warps=warps_m * warps_n, **extra)
        return c

    return matmul
