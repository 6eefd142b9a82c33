"""Demo student: correct but slow.

The kernel is the course's, launched with one configuration: 32 query rows and 16 keys per step, a single pipeline
stage. Right on every shape, but each program reloads K and V for only 32 rows and the tensor cores work on tiny
tiles, with no load overlapping them. Correctness marks are full; the speed items earn little. One answer is wrong
(Q1 does not halve the FLOPs of a causal call).
"""

# %% all < solution

# %% attention_launch
LOG2_E = 1.4426950408889634


def attention_configs() -> list:
    """The configurations the autotuner may try: BLOCK_M a multiple of BLOCK_N (the causal split needs it)."""
    def config(block_m, block_n, stages, warps):
        return triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_stages=stages, num_warps=warps)

    if DEVICE.interpret:
        return [config(32, 16, 1, 1)]
    return [config(32, 16, 1, 4)]  # small tiles, no pipelining


def attention(q, k, v, causal):
    """softmax(q k^T / sqrt(d)) v for q, k, v (batch, heads, n, d), causal or not, in q's dtype."""
    batch, heads, n, d = q.shape
    o = torch.empty_like(q)

    def grid(meta):
        return (triton.cdiv(n, meta["BLOCK_M"]), batch * heads)

    tuned_attention[grid](q, k, v, o, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                          v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                          heads, n, LOG2_E / d ** 0.5, HEAD_DIM=d, CAUSAL=bool(causal))
    return o


tuned_attention = triton.autotune(attention_configs(), key=["N", "HEAD_DIM", "CAUSAL"])(attention_kernel)

# %% answers
# Q1. FLOPs (a multiply-add counts as 2) of one causal call with B = 2, H = 8, N = 2048, d = 128, counted as this
#     notebook counts them. (int)
causal_flops = 4 * 2 * 8 * 2048 * 2048 * 128

# Q2. Bytes of fp16 scores S = Q K^T that the textbook version would write for B = 4, H = 16, N = 4096 (one
#     N x N matrix per head). (int)
score_bytes = 4 * 16 * 4096 * 4096 * 2

# Q3. A row's running maximum is 5.0 (scores already in log2 units) and the next block's largest score is 7.0.
#     By what factor must the running sum and accumulator be multiplied? (float)
rescale_factor = 2.0 ** (5.0 - 7.0)

# Q4. Causal, N = 4096, BLOCK_M = 128, BLOCK_N = 64: how many blocks of keys does the program of the last block
#     of query rows (start_m = 31) load, the diagonal included? (int)
last_program_blocks = (31 * 128 + 128) // 64
