"""Demo student: the online softmax without its rescaling, the day's classic mistake.

`attend_blocks` subtracts the new running maximum from each block's scores but never multiplies the running sum
and the accumulator by exp2(m_old - m_new): blocks summed under an older, smaller maximum keep too much weight.
The result is right only while the first block of keys holds every row's maximum, so every checked shape with more
than one block of keys fails. Everything else is the course's solution, answers included.
"""

# %% all < solution

# %% attention_kernel
@triton.jit
def attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m, lo, hi, N, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold the keys lo..hi-1 into one block of query rows: the online softmax, BLOCK_N keys at a time."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in tl.range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:  # the last block of keys may run past N; on the diagonal, keys after the query too
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < N, other=0.0)
        else:
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None])
        s = tl.dot(q, k) * qk_scale  # scores in log2 units: exp2(s) = exp(q.k / sqrt(d))
        if MASKED:
            keep = cols[None, :] < N
            if CAUSAL:
                keep = keep & (offs_m[:, None] >= cols[None, :])
            s = tl.where(keep, s, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < N, other=0.0)
        else:
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, stride_qz, stride_qh, stride_qm, stride_kz, stride_kh, stride_kn,
                     stride_vz, stride_vh, stride_vn, stride_oz, stride_oh, stride_om, H, N, qk_scale,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """One program: BLOCK_M query rows of one head, against every key they may see."""
    start_m = tl.program_id(0)
    off_z = tl.program_id(1) // H
    off_h = tl.program_id(1) % H
    q_base = q_ptr + off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh
    k_base = k_ptr + off_z.to(tl.int64) * stride_kz + off_h.to(tl.int64) * stride_kh
    v_base = v_ptr + off_z.to(tl.int64) * stride_vz + off_h.to(tl.int64) * stride_vh
    o_base = o_ptr + off_z.to(tl.int64) * stride_oz + off_h.to(tl.int64) * stride_oh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :], mask=offs_m[:, None] < N, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    if CAUSAL:
        # Keys before this block of queries: every query sees all of them, no mask.
        acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                      0, start_m * BLOCK_M, N, qk_scale, HEAD_DIM, BLOCK_N, False, True)
        # The diagonal block: masked by position, and by N in the last block.
        acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                      start_m * BLOCK_M, (start_m + 1) * BLOCK_M, N, qk_scale,
                                      HEAD_DIM, BLOCK_N, True, True)
    else:
        full = (N // BLOCK_N) * BLOCK_N  # keys in whole blocks: no mask
        acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                      0, full, N, qk_scale, HEAD_DIM, BLOCK_N, False, False)
        acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, offs_m,
                                      full, N, N, qk_scale, HEAD_DIM, BLOCK_N, True, False)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < N)
