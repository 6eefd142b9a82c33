"""Demo student: every group of tile rows is taken to be GROUP_M rows tall, the last one too.

`tile_order` and the kernel's `tile_coords` skip `min(num_pid_m - first_m, group_m)`: right whenever the group
height divides the number of tile rows, wrong otherwise. `tile_order` then writes past the grid and raises
(visible and hidden checks fail); the kernel computes tiles below the matrix (masked away) instead of some
that are in it, whose outputs stay NaN, wherever the tile rows are no multiple of GROUP_M. Everything else is
the course's solution, answers included.
"""

# %% all < solution

# %% tile_order
def tile_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list:
    """order[pid_m][pid_n] = the launch position of tile (pid_m, pid_n) in grouped order: num_pid_m lists of
    num_pid_n ints."""
    order = [[-1] * num_pid_n for _ in range(num_pid_m)]
    tiles_per_group = group_m * num_pid_n
    for position in range(num_pid_m * num_pid_n):
        group = position // tiles_per_group
        first_m = group * group_m
        local = position % tiles_per_group
        order[first_m + local % group_m][local // group_m] = position
    return order

# %% gemm_kernel
@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of the tile at launch position tile_id under grouped ordering: the arithmetic of tile_order."""
    tiles_per_group = GROUP_M * num_pid_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    local = tile_id % tiles_per_group
    return first_m + local % GROUP_M, local // GROUP_M


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
):
    """Persistent C = A @ B: this program computes tiles pid, pid + NUM_PROGRAMS, ... in grouped order
    (fp16 tiles in, an fp32 accumulator, fp16 out)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    # flatten=True lets the compiler pipeline across tiles: the next tile's first loads overlap this tile's store.
    for tile_id in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=True):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < M
        col_ok = cols < N
        a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
        b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_ok = ks < K - k0
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            acc = tl.dot(a, b, acc)  # fp16 x fp16 on tensor cores, summed into fp32
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(tl.float16), mask=row_ok[:, None] & col_ok[None, :])
