"""Demo student: lets PyTorch do the multiplication.

The kernel is left as the stub and `matmul` returns `a @ b`. The checks run `matmul` under
course.guard, which refuses the @ operator (and every other library matmul), so every
correctness check fails with a message naming the forbidden call. No answers submitted.
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
    # YOUR CODE HERE
    raise NotImplementedError()


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp32 matrices a (M, K) and b (K, N) on one device, using matmul_kernel."""
    return a @ b
