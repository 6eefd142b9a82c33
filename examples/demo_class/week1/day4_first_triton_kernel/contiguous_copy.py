"""Demo student: makes strided inputs contiguous in the wrapper instead of passing their strides.

`vector_add` calls `x.contiguous()` and `y.contiguous()` and launches a kernel that assumes unit
strides. The values come out right, but for a strided view `contiguous()` is a torch copy, which
the grader's judge cannot replay: the strided shapes fail (visible and hidden), and the
notebook's own check says why. Everything else is the course's solution, answers included.
"""

# %% all < solution

# %% add_kernel
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, stride_x, stride_y, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i] + y[i] for every i < n: assumes contiguous inputs."""
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y, copying strided inputs to contiguous ones first."""
    x, y = x.contiguous(), y.contiguous()
    n = x.shape[0]
    out = torch.empty(n, device=x.device, dtype=torch.float32)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, 1, 1, BLOCK_SIZE=1024, num_warps=4)
    return out
