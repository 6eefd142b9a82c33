"""Demo student: a kernel that reads through a wild pointer.

The first load reads from `a_ptr + (1 << 40)`, far outside any allocation. In the CPU
interpreter that is a segmentation fault that kills the Jupyter kernel; on a GPU it is an
illegal memory access. The grader must report either as a status, not hang or crash itself.
No answers submitted.
"""

# %% matmul_kernel
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Reads one value from far outside A, then writes it over the tile."""
    wild = tl.load(a_ptr + (1 << 40))
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32) + wild
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, tile,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Launch the wild kernel over C."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
    )
    return c
