"""Demo student: correct but slow.

`vector_sum` gives every block of 128 elements its own program and adds each program's partial into out[0] with
`tl.atomic_add`: right (atomics lose nothing, and the sum stays inside the 1e-4 tolerance), but 2**21 atomic adds
on one address queue up behind each other on a GPU. `row_max` walks each row in blocks of 32 with one warp. Full
correctness marks; on a GPU the speed items earn little. Q2 is wrong (it counts atomics for blocks of 128).
"""

# %% sum_kernels
@triton.jit
def partial_sums_kernel(x_ptr, partial_ptr, N, BLOCK: tl.constexpr):
    """Unused: this student adds with atomics instead."""
    pass


@triton.jit
def final_sum_kernel(partial_ptr, out_ptr, P, BLOCK_P: tl.constexpr):
    """Unused: this student adds with atomics instead."""
    pass


@triton.jit
def atomic_block_sum_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < N, other=0.0), axis=0))


def vector_sum(x: torch.Tensor) -> torch.Tensor:
    """One atomic add per block of 128."""
    out = torch.zeros((1,), device=x.device, dtype=torch.float32)
    atomic_block_sum_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128, num_warps=1)
    return out

# %% max_kernels
@triton.jit
def row_max_kernel(x_ptr, out_ptr, N, stride_m, BLOCK: tl.constexpr):
    """One program per row, blocks of BLOCK."""
    row = tl.program_id(0)
    best = tl.full((BLOCK,), float("-inf"), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        best = tl.maximum(best, tl.load(x_ptr + row * stride_m + cols, mask=cols < N, other=float("-inf")))
    tl.store(out_ptr + row, tl.max(best, axis=0))


def row_max(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty((m,), device=x.device, dtype=torch.float32)
    row_max_kernel[(m,)](x, out, n, x.stride(0), BLOCK=32, num_warps=1)
    return out

# %% answers
sum_bytes_2_28 = 4 * 2**28
atomics_2_28_block_4096 = 2**28 // 128
race_smallest_out = 1
max_order_free = True
