"""Demo student: numbers the programs row by row.

The linear id is computed as pid_0 * num_programs(1) + pid_1, the row-major order of a matrix, instead
of CUDA's order with axis 0 fastest. That is right only on grids with one row or one column, so both
coordinate items fail (the message names the first wrong linear id); peak and answers are right: 6 of 10.
"""

# %% all < solution

# %% coordinates_kernel
@triton.jit
def coordinates_kernel(out_ptr, stride_row, stride_col, stride_item):
    """Program (pid_0, pid_1) writes pid_0, pid_1 and its linear id into out[pid_0, pid_1, :]."""
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    linear_id = pid_0 * tl.num_programs(1) + pid_1
    here = out_ptr + pid_0 * stride_row + pid_1 * stride_col
    tl.store(here, pid_0)
    tl.store(here + stride_item, pid_1)
    tl.store(here + 2 * stride_item, linear_id)


def program_coordinates(like: torch.Tensor) -> torch.Tensor:
    """Launch one program per element of the 2-D tensor ``like``; return what each program wrote."""
    rows, cols = like.shape
    out = torch.empty((rows, cols, 3), dtype=torch.int32, device=like.device)
    coordinates_kernel[(rows, cols)](out, out.stride(0), out.stride(1), out.stride(2), num_warps=1)
    return out
