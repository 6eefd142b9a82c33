"""Demo student: the right kernel, launched on a GPU with 8 stages of 128 x 128 x 64 tiles.

8 stages need 8 x 32 KB = 256 KB of shared memory per program; an H100 allows 227 KB. The interpreter
ignores num_stages, so on a CPU every check passes (and the notebook's budget cell warns that the
configuration does not fit). On a GPU Triton refuses the launch (OutOfResources), the graded function
raises, and both matmul correctness items and both speed items score 0. smem_bytes and the answers are right.
"""

# %% all < solution

# %% matmul_kernel
# Your launch configuration on a GPU: the tile, the warps per program and the pipeline stages.
GPU_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 8}
CPU_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_warps": 1, "num_stages": 1}


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One BLOCK_M x BLOCK_N tile of C = A @ B: fp16 tiles in, fp32 sums, fp16 out."""
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
        acc = tl.dot(a, b, acc)  # fp16 x fp16 on the tensor cores, summed into fp32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=row_ok[:, None] & col_ok[None, :])


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp16 matrices a (M, K) and b (K, N) as a new fp16 tensor, using matmul_kernel."""
    M, K = a.shape
    K_b, N = b.shape
    assert K == K_b, f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    config = CPU_CONFIG if DEVICE.interpret else GPU_CONFIG
    grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        **config,
    )
    return c
