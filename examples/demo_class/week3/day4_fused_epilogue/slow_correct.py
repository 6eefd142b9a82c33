"""Demo student: correct but slow.

The kernel is the course's, launched with one configuration of 32 x 32 x 32 tiles and a single pipeline stage:
right on every shape, but each element of A and B is read from memory many more times than with large tiles, and
no load overlaps the tensor cores' work. Correctness marks are full; the speed items earn little. One answer is
wrong (Q4 counts only A and B, not C, in the GEMM's bytes).
"""

# %% all < solution

# %% linear_gelu_launch
def linear_gelu_configs() -> list:
    """The autotuner's short list; one configuration in the interpreter, which cannot time anything."""
    def config(block_m, block_n, block_k, stages, warps):
        return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8},
                             num_stages=stages, num_warps=warps)

    if DEVICE.interpret:
        return [config(32, 32, 32, 1, 1)]
    return [config(32, 32, 32, 1, 4)]  # small tiles, no pipelining: every tile re-reads A and B often


def linear_gelu(a, b, bias):
    """gelu_tanh(a @ b + bias) as a new fp16 (M, N) tensor: fp16 a (M, K), b (K, N), bias (N,); fp32 inside."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    tuned_linear_gelu[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1))
    return c


tuned_linear_gelu = triton.autotune(linear_gelu_configs(), key=["M", "N", "K"])(linear_gelu_kernel)

# %% answers
# Q1. Bytes the unfused path moves beyond the GEMM's own (the bias kernel and the GELU kernel each read and write
#     C once; the bias vector is negligible), for M = 8192, N = 8192 in fp16. (int)
extra_bytes = 4 * 2 * 8192 * 8192

# Q2. In the kernel, which index of the output tile selects the bias value added to acc[i, j]: "row" (i's
#     position in M) or "column" (j's position in N)? (str)
bias_index = "column"

# Q3. GELU, tanh form, at x = 1.0, to 3 significant digits or better. (float)
gelu_at_one = 1 / (1 + 2.718281828459045 ** (-2 * 0.7978845608028654 * (1 + 0.044715)))  # x sigmoid(2 z), x = 1

# Q4. Arithmetic intensity of the GEMM alone for M = N = K = 4096 in fp16, in FLOP per byte (a multiply-add counts
#     as 2): 2 M N K FLOPs over A, B and C moved once each. (float)
gemm_intensity = 2 * 4096**3 / (2 * 2 * 4096**2)
