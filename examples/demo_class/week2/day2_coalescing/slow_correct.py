"""Demo student: correct but naive.

`transpose` walks the output in memory order, one element per lane: each program writes BLOCK
consecutive elements of out (coalesced) and reads them from x down a column (lanes M * 4 bytes apart,
a sector each). Right on every shape, so the correctness items are full; on a GPU its bandwidth is
far from a copy's, and the speed items earn little or nothing. Q1 is wrong (it counts the 4 sectors of
a coalesced load); Q2 and Q3 are right.
"""

# %% transpose_kernel
@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, stride_on,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Element k of out (row-major, N x M) is x[k % M, k // M]; BLOCK_M elements per program."""
    k = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = k < M * N
    j, i = k // M, k % M
    values = tl.load(x_ptr + i * stride_xm + j * stride_xn, mask=mask)
    tl.store(out_ptr + j * stride_om + i * stride_on, values, mask=mask)


def transpose(x: torch.Tensor) -> torch.Tensor:
    """x.T, one element per lane, in out's memory order."""
    M, N = x.shape
    out = torch.empty((N, M), device=x.device, dtype=torch.float32)
    block = 1024
    transpose_kernel[(triton.cdiv(M * N, block),)](
        x, out, M, N, x.stride(0), x.stride(1), out.stride(0), out.stride(1), BLOCK_M=block, BLOCK_N=1,
        num_warps=4,
    )
    return out

# %% answers
sectors_naive_read = 4
bytes_16384x4096 = 2 * 4 * 16384 * 4096
useful_stride_2 = 0.5
