"""Demo student: correct but slow.

The kernel never calls tl.dot. For every single k it loads a column of A and a row of B and
adds their outer product to a 32 x 32 accumulator (one warp per program): plain fp32 FMAs,
so it is right on every shape, but it re-reads memory once per k instead of once per tile.
Correctness marks are full; the speed items earn little. One answer is wrong (Q2 counts the
K-steps instead of the re-reads of A).

(Summing a broadcast product with tl.sum over a k-block would not do here: Triton's compiler
turns that pattern into a dot at its default precision, TF32, which fails the tolerance.)
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
    """One tile of C as a sum of K outer products (BLOCK_K is unused)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K):
        a_col = tl.load(a_ptr + rows * stride_am + k * stride_ak, mask=rows < M, other=0.0)
        b_row = tl.load(b_ptr + k * stride_bk + cols * stride_bn, mask=cols < N, other=0.0)
        acc += a_col[:, None] * b_row[None, :]
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b, one outer product at a time, one warp per 32 x 32 tile."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=1, num_warps=1,
    )
    return c


# %% answers
# Q1. How many floating-point operations does one 4096 x 4096 x 4096 matmul perform? (int)
flops_4096 = 137438953472

# Q2. M = N = K = 1024, tiles 64 x 64 x 32: how often is each element of A read from
#     global memory, ignoring caches? (int)
a_reads_per_element = 32  # wrong: 1024 / 32 is the number of K-steps, not the re-reads of A

# Q3. FLOP per byte of one K-step of one program: fp32, 64 x 64 x 32 tiles, counting only
#     the two tiles it loads. (float)
step_intensity = 16.0

# Q4. Would the same kernel with input_precision="tf32" pass this exercise's 1e-5 tolerance? (bool)
tf32_would_pass = False
