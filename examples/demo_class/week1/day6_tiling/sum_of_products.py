"""Demo student: builds each tile from a sum of broadcast products, the trap of section 3.

Each loop step loads a 32 x 16 tile of A and a 16 x 32 tile of B (masked) and adds
tl.sum(a[:, :, None] * b[None, :, :], axis=1) to the accumulator. The CPU interpreter computes that in
fp32, so on a CPU the notebook's checks pass (with a printed [sum-to-dot] warning). But Triton's compiler
turns the sum into a dot (tt.dot), which the exercise bans: the grader checks the ban on the compiled
kernel (on a CPU, built for a nominal GPU), so no correctness points on a CPU or a GPU (where the TF32
dot also fails the 1e-5 tolerance), and no performance points. Answers: Q1, Q2 and Q5 right.
"""

# %% tiled_kernel
@triton.jit
def matmul_tiled_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """A tile of C from BLOCK_K-wide slabs of A and B, multiplied as a sum of broadcast products."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * stride_am + (k0 + ks)[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul_tiled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with 32 x 32 tiles of C and 16-wide slabs of K."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    matmul_tiled_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_warps=4,
    )
    return c

# %% answers
# Q1. The untiled kernel of section 1 on M = N = K = 1000: how many bytes of A and B does it load? (int)
untiled_bytes = 8 * 1000**3

# Q2. The tiled kernel with 64 x 64 tiles on M = N = K = 1000: how many bytes of A and B? (int)
tiled_bytes = 4 * 2 * 1000 * 1000 * 16

# Q3. M = N = K = 1024 with tiles of BLOCK_M = 128 rows and BLOCK_N = 32 columns: how many times fewer
#     bytes than the untiled kernel does it load? (float)
reduction_128x32 = 128 / 32  # wrong: the ratio of the tile's sides

# Q4. Registers allow 4096 accumulators per program: BLOCK_M * BLOCK_N = 4096, both powers of two.
#     For M = N = K = 4096, which BLOCK_M loads the fewest bytes? (int)
best_block_m = 4096  # wrong: one tall tile

# Q5. A kernel that builds each tile with acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1) passes the
#     checks in the CPU interpreter. Does it pass this exercise's 1e-5 tolerance on an H100? (bool)
sum_form_passes_on_gpu = False
