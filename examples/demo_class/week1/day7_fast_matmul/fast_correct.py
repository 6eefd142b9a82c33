"""Demo student: fast and correct.

Submits the course's own kernel (64 x 64 x 32 tiles, tl.dot in ieee fp32, masks on M, N and K)
and right answers to all four questions: full correctness and understanding marks, and the speed
of the reference solution.
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
    """Compute one BLOCK_M x BLOCK_N tile of C = A @ B in fp32, walking along K."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N

    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=row_ok[:, None] & col_ok[None, :])


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp32 matrices a (M, K) and b (K, N) on one device, using matmul_kernel."""
    M, K = a.shape
    K_b, N = b.shape
    assert K_b == K, f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    if DEVICE.interpret:  # CPU interpreter: small checks only; num_warps/num_stages are ignored
        block_m, block_n, block_k, num_warps, num_stages = 32, 32, 32, 1, 1
    else:  # GPU: 4 warps per program, loads pipelined 3 K-steps deep
        block_m, block_n, block_k, num_warps, num_stages = 64, 64, 32, 4, 3
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=num_warps, num_stages=num_stages,
    )
    return c


# %% answers
# Q1. How many floating-point operations does one 4096 x 4096 x 4096 matmul perform? (int)
flops_4096 = 2 * 4096**3

# Q2. M = N = K = 1024, tiles 64 x 64 x 32: how often is each element of A read from
#     global memory, ignoring caches? (int)
a_reads_per_element = 1024 // 64

# Q3. FLOP per byte of one K-step of one program: fp32, 64 x 64 x 32 tiles, counting only
#     the two tiles it loads. (float)
step_intensity = 2 * 64 * 64 * 32 / (4 * (64 * 32 + 32 * 64))

# Q4. Would the same kernel with input_precision="tf32" pass this exercise's 1e-5 tolerance? (bool)
tf32_would_pass = False
