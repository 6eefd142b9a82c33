"""Demo student: the bias added along the wrong axis, the day's classic broadcast mistake.

The epilogue loads the bias with the tile's row offsets and broadcasts it down the columns (`bias[:, None]`), as
if there were one bias per row of A: every element of C gets the bias of its row's index instead of its column's.
Where the row index is past N the load is masked to 0. Every checked shape fails; everything else is the course's
solution, answers included.
"""

# %% all < solution

# %% linear_gelu_kernel
@triton.jit
def gelu_tanh(x):
    """GELU, tanh form: 0.5 x (1 + tanh(z)) = x sigmoid(2 z), z = sqrt(2/pi) (x + 0.044715 x^3)."""
    return x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))


@triton.jit
def linear_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    """One output tile of gelu(a @ b + bias), grouped order; the epilogue runs on the fp32 accumulator."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (pid // tiles_per_group) * GROUP_M
    rows_here = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % rows_here
    pid_n = (pid % tiles_per_group) // rows_here
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows and columns past the edge read row 0 or column 0 again (never stored): only K needs a load mask.
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # The epilogue: while the tile is still in registers, in fp32, then one rounding to fp16.
    bias = tl.load(bias_ptr + offs_m, mask=offs_m < N, other=0.0)
    out = gelu_tanh(acc + bias.to(tl.float32)[:, None])
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, out.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
