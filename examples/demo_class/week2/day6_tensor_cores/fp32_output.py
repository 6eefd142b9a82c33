"""Demo student: keeps C in fp32 "for accuracy", so matmul_fp16 and matmul_bf16 return fp32 tensors.

The kernel is right and so are its values, but the exercise asks for C in the input's dtype (half the
bytes written, and what a 16-bit layer passes on): every check fails with "output dtype torch.float32,
expected torch.float16" (or bfloat16), and the performance items score 0 with them. The answers are right.
"""

# %% all < solution

# %% matmul_kernel
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, ACC_DTYPE: tl.constexpr,
):
    """One BLOCK_M x BLOCK_N tile of C = A @ B: tl.dot on the tiles, summed in ACC_DTYPE, stored in C's dtype."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (k0 + ks[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k0 + ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=ACC_DTYPE)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def launch_matmul(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, input_precision: str = "ieee",
                  acc_dtype: tl.dtype = tl.float32) -> torch.Tensor:
    """C = A @ B by matmul_kernel: a (M, K) and b (K, N) of one dtype on one device, C (M, N) of out_dtype."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    tiles = tiles_for(a.dtype, input_precision)
    grid = (triton.cdiv(M, tiles["BLOCK_M"]), triton.cdiv(N, tiles["BLOCK_N"]))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), INPUT_PRECISION=input_precision, ACC_DTYPE=acc_dtype, **tiles)
    return c


def matmul_fp16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp16 in, fp32 out: more accurate, but not what was asked."""
    return launch_matmul(a, b, torch.float32)


def matmul_bf16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bf16 in, fp32 out: more accurate, but not what was asked."""
    return launch_matmul(a, b, torch.float32)
