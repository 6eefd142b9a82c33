"""Demo student: the lost update.

`vector_sum` adds each program's partial into out[0] with a plain load and store, not an atomic add. In Triton's
interpreter programs run one after another, so the sum is right there, and `course.check` prints the `lost-update`
warning under it; on a GPU thousands of programs read the same total at once and most partials vanish: the hidden
lengths fail (the visible ones, a few blocks long, may pass). `row_max` is right. Q3 is wrong too: this student
thinks every update lands, so out[0] ends at 8.
"""

# %% all < solution

# %% sum_kernels
@triton.jit
def partial_sums_kernel(x_ptr, partial_ptr, N, BLOCK: tl.constexpr):
    """Each program adds its block's sum into partial_ptr[0] with a load and a store."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    partial = tl.sum(tl.load(x_ptr + offsets, mask=offsets < N, other=0.0), axis=0)
    total = tl.load(partial_ptr)
    tl.store(partial_ptr, total + partial)


@triton.jit
def final_sum_kernel(partial_ptr, out_ptr, P, BLOCK_P: tl.constexpr):
    """Unused."""
    pass


def vector_sum(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros((1,), device=x.device, dtype=torch.float32)
    partial_sums_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024, num_warps=4)
    return out

# %% answers
sum_bytes_2_28 = 4 * 2**28
atomics_2_28_block_4096 = 2**28 // 4096
race_smallest_out = 8
max_order_free = True
