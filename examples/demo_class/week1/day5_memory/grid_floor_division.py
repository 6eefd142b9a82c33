"""Demo student: the copy's grid is n // BLOCK_SIZE, so the last, partial block is never copied.

The kernel itself is right, masks included, but the launch has one program too few whenever n is
no multiple of the block: the tail of the output stays unwritten (NaN in the checks), and for
n < BLOCK_SIZE nothing at all is launched. Only lengths that are whole multiples of the block
pass, so both copy checks fail and the copy's performance items score 0. The strided read and
the answers are right.
"""

# %% all < solution

# %% copy_kernel
@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Copy elements [pid * BLOCK_SIZE, (pid + 1) * BLOCK_SIZE) of x into y, stopping at n."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def copy(x: torch.Tensor) -> torch.Tensor:
    """Return a new fp32 tensor equal to the contiguous 1-D fp32 tensor x, written by copy_kernel."""
    n = x.numel()
    y = torch.empty_like(x)
    block = 1024 if DEVICE.interpret else 4096
    copy_kernel[(n // block,)](x, y, n, BLOCK_SIZE=block, num_warps=8)
    return y
