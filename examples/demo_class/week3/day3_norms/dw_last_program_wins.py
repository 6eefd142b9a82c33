"""Demo student: the weight gradient that only the last program writes.

The backward is the reference's (persistent programs over rows, dx right), except that each program stores its
partial sums of dy * x_hat straight into dw instead of into its own row of a partial buffer: every program
overwrites the same N values, so dw holds one program's share of the rows, whichever wrote last (the last in the
interpreter; any on a GPU). Right whenever one program owns every row (a single row), wrong on every other
shape: the dw items fail, dx and the forward pass are right. Q4 is wrong as well: this student trusts atomics to
be deterministic.
"""

# %% all < solution

# %% backward_kernels
BWD_PROGRAMS_PER_SM = 2  # a tuning knob, as above


@triton.jit
def rmsnorm_backward_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, partial_ptr, M, N, BLOCK: tl.constexpr):
    """Program p takes rows p, p + P, p + 2P... (P programs): it writes their dx, and adds their dy * x * rstd
    into its own row of partial (P, N) fp32, the weight gradient's share of those rows."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(pid, M, tl.num_programs(0)):
        offsets = row * N + cols  # below 2**31 for every shape the exercise uses
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row)
        x_hat = x * rstd
        wdy = w * dy
        c = tl.sum(x_hat * wdy, axis=0) / N
        tl.store(dx_ptr + offsets, ((wdy - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
        dw += dy * x_hat
    tl.store(partial_ptr + cols, dw, mask=mask)  # into dw itself: every program writes the same N values


@triton.jit
def sum_partials_kernel(partial_ptr, dw_ptr, P, N, BLOCK_N: tl.constexpr):
    """dw[j] = sum over p of partial[p, j], for BLOCK_N columns per program."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for p in range(0, P):
        acc += tl.load(partial_ptr + p * N + cols, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, acc, mask=mask)


def rmsnorm_backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """dx (M, N) fp16 and dw (N,) fp32 of RMSNorm, for x, dy (M, N) and w (N,) fp16, rstd (M,) fp32."""
    m, n = x.shape
    dx = torch.empty((m, n), device=x.device, dtype=x.dtype)
    programs = min(m, 4 if DEVICE.interpret else DEVICE.sm_count * BWD_PROGRAMS_PER_SM)
    dw = torch.empty((n,), device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(n)
    rmsnorm_backward_kernel[(programs,)](x, w, dy, rstd, dx, dw, m, n, BLOCK=block, num_warps=_warps(block))
    return dx, dw


def rmsnorm_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return rmsnorm_backward(x, w, dy, rstd)[0]


def rmsnorm_dw(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return rmsnorm_backward(x, w, dy, rstd)[1]

# %% answers
rmsnorm_bytes_4096x8192 = 2 * (2 * 4096 * 8192 + 8192)
rstd_3_4 = 1 / ((3**2 + 4**2) / 2) ** 0.5
dw_partial_rows = 264
dw_atomics_deterministic = True
