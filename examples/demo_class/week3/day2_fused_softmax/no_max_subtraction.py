"""Demo student: the softmax without the max subtraction.

A fused one-program-per-row softmax, fast, but it computes exp(x) / sum(exp(x)) as the formula is first written.
Right for the visible logits (scale 1 and 10: exp stays below fp32's limit); on the hidden logits scaled by 300
and 1000, exp overflows to inf and inf / inf is NaN: the hidden check fails, and the benchmark (scale 1) is timed
as usual. Rows longer than a block take a second pass the same way. Q2 is wrong as well (it answers 128, fp16's
exponent range thought of as fp32's).
"""

# %% softmax_kernels
@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, N, stride_xm, stride_om, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    e = tl.exp(tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=float("-inf")))
    tl.store(out_ptr + row * stride_om + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, N, stride_xm, stride_om, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.exp(tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")))
    s = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf"))
        tl.store(out_ptr + row * stride_om + cols, tl.exp(x) / s, mask=cols < N)


def softmax(x: torch.Tensor) -> torch.Tensor:
    m, n = x.shape
    out = torch.empty((m, n), device=x.device, dtype=torch.float32)
    limit = 1024 if DEVICE.interpret else 16384
    if n <= limit:
        block = triton.next_power_of_2(n)
        warps = 1 if DEVICE.interpret else max(1, min(16, block // 256))
        softmax_row_kernel[(m,)](x, out, n, x.stride(0), out.stride(0), BLOCK=block, num_warps=warps)
    else:
        block, warps = (512, 1) if DEVICE.interpret else (4096, 8)
        softmax_online_kernel[(m,)](x, out, n, x.stride(0), out.stride(0), BLOCK=block, num_warps=warps)
    return out

# %% answers
softmax_bytes_4096x32768 = 2 * 4 * 4096 * 32768
exp_overflow_z = 128
online_rescaled_sum = 1.906  # 3 * exp(2 - 4) + 1.5
three_kernel_reads = 3
