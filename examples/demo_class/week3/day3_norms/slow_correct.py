"""Demo student: correct but slow.

The forward pass runs one warp per row, whatever its length. The backward gives every row its own program and
its own row of partial sums: a (M, N) fp32 buffer, written once and read once more by the column sums, which
moves more bytes than x, dy and dx together. Right on every shape; on a GPU the speed items earn little. Q3 is
wrong (it counts a row of partials per row of x).
"""

# %% all < solution

# %% forward_kernels
EPS = 1e-6


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, N, stride_xm, stride_ym, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * stride_ym + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _warps(block: int) -> int:
    return 1


def rmsnorm_forward(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    block = triton.next_power_of_2(n)
    rmsnorm_kernel[(m,)](x, w, y, rstd, n, x.stride(0), y.stride(0), EPS, BLOCK=block, num_warps=1)
    return y, rstd


def rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """RMSNorm of every row of x (M, N) fp16, times w (N,) fp16: y (M, N) fp16."""
    return rmsnorm_forward(x, w)[0]

# %% backward_kernels
@triton.jit
def rmsnorm_backward_kernel(x_ptr, w_ptr, dy_ptr, rstd_ptr, dx_ptr, partial_ptr, M, N, BLOCK: tl.constexpr):
    """One program per row: its dx, and its own row of partial sums."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    offsets = row * N + cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    x_hat = x * rstd
    wdy = w * dy
    c = tl.sum(x_hat * wdy, axis=0) / N
    tl.store(dx_ptr + offsets, ((wdy - x_hat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(partial_ptr + offsets, dy * x_hat, mask=mask)


@triton.jit
def sum_partials_kernel(partial_ptr, dw_ptr, P, N, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for p in range(0, P):
        acc += tl.load(partial_ptr + p * N + cols, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, acc, mask=mask)


def rmsnorm_backward(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape
    dx = torch.empty((m, n), device=x.device, dtype=x.dtype)
    partial = torch.empty((m, n), device=x.device, dtype=torch.float32)
    dw = torch.empty((n,), device=x.device, dtype=torch.float32)
    rmsnorm_backward_kernel[(m,)](x, w, dy, rstd, dx, partial, m, n, BLOCK=triton.next_power_of_2(n), num_warps=1)
    sum_partials_kernel[(triton.cdiv(n, 64),)](partial, dw, m, n, BLOCK_N=64, num_warps=1)
    return dx, dw


def rmsnorm_dx(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return rmsnorm_backward(x, w, dy, rstd)[0]


def rmsnorm_dw(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, rstd: torch.Tensor) -> torch.Tensor:
    return rmsnorm_backward(x, w, dy, rstd)[1]

# %% answers
rmsnorm_bytes_4096x8192 = 2 * (2 * 4096 * 8192 + 8192)
rstd_3_4 = 1 / ((3**2 + 4**2) / 2) ** 0.5
dw_partial_rows = 16384
dw_atomics_deterministic = False
