"""Demo student: submits the given kernel under the new name, without the padding.

The source is the conflicted kernel renamed to transpose_padded, with `tile[TILE][TILE]`: every
result is right, so both correctness items pass on a GPU, but each column read of the tile is a
32-way bank conflict, so the speed items should earn little. Answers: Q1 and Q4 right, Q2 and Q3
worked out for the unpadded tile (wrong).
"""

# %% padded_source
TRANSPOSE_PADDED_SOURCE = r"""
extern "C" __global__ void transpose_padded(const float* __restrict__ in, float* __restrict__ out,
                                            int rows, int cols) {
    __shared__ float tile[TILE][TILE];

    int c = blockIdx.x * TILE + threadIdx.x;
    for (int k = threadIdx.y; k < TILE; k += ROWS) {
        int r = blockIdx.y * TILE + k;
        if (r < rows && c < cols) tile[k][threadIdx.x] = in[(size_t)r * cols + c];
    }
    __syncthreads();

    int r = blockIdx.y * TILE + threadIdx.x;
    for (int k = threadIdx.y; k < TILE; k += ROWS) {
        int c_out = blockIdx.x * TILE + k;
        if (c_out < cols && r < rows) out[(size_t)c_out * rows + r] = tile[threadIdx.x][k];
    }
}
"""
padded_module = course.cuda.compile(TRANSPOSE_PADDED_SOURCE, options=TRANSPOSE_OPTIONS)
transpose_padded_kernel = padded_module.get_function("transpose_padded")

# %% transpose_padded
def transpose_padded(x: torch.Tensor) -> torch.Tensor:
    """x.T as a new contiguous fp32 tensor."""
    rows, cols = x.shape
    out = torch.empty((cols, rows), device=x.device, dtype=torch.float32)
    grid = (course.cuda.cdiv(cols, TILE), course.cuda.cdiv(rows, TILE))
    transpose_padded_kernel(grid, (TILE, ROWS), (x, out, np.int32(rows), np.int32(cols)))
    return out

# %% answers
shared_bytes_padded = 32 * 33 * 4
bank_of_5_7 = (5 * 32 + 7) % 32
passes_width_40 = 32
row_read_conflicts = False
