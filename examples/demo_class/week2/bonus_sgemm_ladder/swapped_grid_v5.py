"""Demo student: a solution whose v5 wrapper swaps the grid, and one wrong answer.

The v5 wrapper launches cdiv(M, 128) x cdiv(N, 128) blocks, rows first, where CUDA's grid is (x, y)
with x along the columns of C. The kernel checks its bounds, so nothing is written out of place, but
for a non-square C some tiles are never computed and stay NaN: v5 fails its visible and hidden
shapes on a GPU (and so earns no speed points), while the seven other versions are the course's. Q2
counts one pass for v5's read of A, missing the 4-way conflict. On a CPU every kernel item is pending.
"""

# %% all < solution

# %% sgemm_v5
# Version 5: the CUDA C source as a string constant (the grader compiles it from here), then the wrapper.
SGEMM_V5 = r"""
// v5, 2D block tiling and warp tiling: a block of 256 threads computes a 128 x 128 tile of C,
// each thread an 8 x 8 piece of it from 8 values of A and 8 values of B held in registers per
// step k: 16 shared-memory reads per 64 FMAs. The 32 threads of a warp cover a compact
// 32 x 64 region (4 rows x 8 columns of threads), so a warp needs few distinct shared words.
// A thread's 8 x 8 outputs are four 4 x 4 blocks: rows r0 + {0..3} and r0 + {16..19},
// columns c0 + {0..3} and c0 + {32..35} of the tile.
// The defaults below can be changed with -D options (the course's benchmark script does).
#ifndef BK
#define BK 8
#endif
#ifndef WARPS_M
#define WARPS_M 4
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif
#define BM (32 * WARPS_M)
#define BN (64 * WARPS_N)
#define THREADS (32 * WARPS_M * WARPS_N)

static_assert(BM * BK % THREADS == 0 && BK * BN % THREADS == 0, "tiles split evenly over the threads");

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
sgemm_v5(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
         int M, int N, int K)
{
    __shared__ float As[BM][BK];  // A's tile as it lies in A: row-major
    __shared__ float Bs[BK][BN];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int r0 = warp / WARPS_N * 32 + lane / 8 * 4;
    const int c0 = warp % WARPS_N * 64 + lane % 8 * 4;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;

    float acc[8][8];
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {
        // Consecutive threads load consecutive floats of a row: coalesced, one float each.
        #pragma unroll
        for (int l = 0; l < BM * BK / THREADS; ++l) {
            const int e = tid + l * THREADS, r = e / BK, c = e % BK;
            const int m = m0 + r, k = k0 + c;
            As[r][c] = (m < M && k < K) ? A[(size_t)m * K + k] : 0.0f;
        }
        #pragma unroll
        for (int l = 0; l < BK * BN / THREADS; ++l) {
            const int e = tid + l * THREADS, r = e / BN, c = e % BN;
            const int k = k0 + r, n = n0 + c;
            Bs[r][c] = (k < K && n < N) ? B[(size_t)k * N + n] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[8], b[8];
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
                a[i] = As[r0 + i][k];  // the 4 lane rows of a warp hit one bank: 4-way conflict
                a[i + 4] = As[r0 + 16 + i][k];
            }
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                b[j] = Bs[k][c0 + j];
                b[j + 4] = Bs[k][c0 + 32 + j];
            }
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                #pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + r0 + (i < 4 ? i : i + 12);
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int n = n0 + c0 + (j < 4 ? j : j + 28);
            if (n < N) C[(size_t)m * N + n] = acc[i][j];
        }
    }
}
"""
sgemm_v5_module = course.cuda.compile(SGEMM_V5)
sgemm_v5_kernel = sgemm_v5_module.get_function("sgemm_v5")


def sgemm_v5(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B with sgemm_v5: 256 threads per block, a 128 x 128 tile of C."""
    M, N, K = operands(a, b)
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = (course.cuda.cdiv(M, 128), course.cuda.cdiv(N, 128))  # rows first
    sgemm_v5_kernel(grid, (256,), (a, b, c, np.int32(M), np.int32(N), np.int32(K)))
    return c

# %% answers
# Q1. With v3's 32 x 32 tiles and M = N = K = 4096, how many times is each element of B loaded from
#     global memory, ignoring caches? (int)
b_loads_v3 = 4096 // 32

# Q2. In v5, how many passes does one warp's read of As[r0 + i][k] need (rows of 8 floats,
#     r0 = 0, 4, 8, 12 for the four lane rows)? (int)
v5_a_read_passes = 1

# Q3. How many bytes of shared memory does one block of v6b use (BK = 8; two buffers; As rows padded
#     to 132 floats; Bs rows of 128 floats)? (int)
v6b_shared_bytes = 2 * 8 * 132 * 4 + 2 * 8 * 128 * 4

# Q4. A is 16-byte aligned and K = 1030. Is the float4 at A[1][0..3] 16-byte aligned? (bool)
row1_float4_aligned = False
