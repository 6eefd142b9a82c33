"""Demo student: the wrapper always makes descriptors, whatever the shape and whatever the device.

The TMA kernel is right, and the interpreter and Hopper's TMA both run it; but a matrix whose rows
are not a multiple of 16 bytes cannot be described: `TensorDescriptor` refuses it (strides must be
16-byte aligned), so every shape with an odd N or K raises instead of falling back to the pointer
kernel. Each correctness set holds such a shape, so both score 0, and so does speed, which counts
only for a function correct on every shape. The answers are right.
"""

# %% all < solution

# %% matmul_tma_wrapper
def describable(t: torch.Tensor) -> bool:
    """Whether TMA can describe the 2-D tensor t: contiguous rows, base and row stride multiples of 16 bytes."""
    return t.dim() == 2 and t.stride(1) == 1


def matmul_pointers(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b through matmul_pointer_kernel: any shape, any strides."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    blocks, options = launch_config()
    grid = (triton.cdiv(M, blocks["BLOCK_M"]) * triton.cdiv(N, blocks["BLOCK_N"]),)
    matmul_pointer_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), **blocks, **options)
    return c


def matmul_descriptors(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b through matmul_tma_kernel: a, b and the (M, N) output must all be describable."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    blocks, options = launch_config()
    block_m, block_n, block_k = blocks["BLOCK_M"], blocks["BLOCK_N"], blocks["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(a, [block_m, block_k])
    b_desc = TensorDescriptor.from_tensor(b, [block_k, block_n])
    c_desc = TensorDescriptor.from_tensor(c, [block_m, block_n])
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_tma_kernel[grid](a_desc, b_desc, c_desc, M, N, K, **blocks, **options)
    return c


def matmul_tma(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Descriptors every time: TMA is faster, so why ever take the pointers?"""
    return matmul_descriptors(a, b)
