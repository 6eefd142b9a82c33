// Best CUDA-core variant of v6b measured on an H100 (bench/sgemm_v6b_variants.py, config t_8x16_128x256_bk16):
// 0.909 of cuBLAS fp32 (TF32 off) at 4096^3 (46.9 TFLOP/s), 0.819 at 3000x2000x1500.
// Defaults below are that config: 128x256x16 block tile, 8 warps of 32x128, 8x16 outputs per thread, 1 block/SM.
// Launch: course.cuda.compile(SOURCE).get_function("sgemm_v7")(
//     (cdiv(N, 256), cdiv(M, 128)), (256,), (a, b, c, np.int32(M), np.int32(N), np.int32(K)), shared_mem=49664)
// (dynamic shared memory 4 * (2*BK*(BM+4) + 2*BK*BN) = 49,664 bytes: above 48 KB, so it must be dynamic).
// For 3000x2000x1500 the same source with -DNI=2 -DBK=16 -DMIN_BLOCKS=1 (128x128 tile, 8x8 per thread,
// grid (cdiv(N,128), cdiv(M,128)), 256 threads, shared_mem=33,280) reached 0.995 of cuBLAS (0.849 at 4096^3).

// v7: v6b's algorithm (register-prefetched float4 global loads, A transposed in double-buffered
// shared memory, 16-byte shared reads, an outer-product inner loop), with its tiles as parameters.
// A warp computes a WM x WN tile; its 32 lanes form LM x LN; a lane holds MI x NI sub-tiles of 4 x 4,
// sub-tiles 4*LM rows and 4*LN columns apart (v6b: MI = NI = 2, LM = 4, LN = 8: 8 x 8 per thread).
#ifndef BK
#define BK 16
#endif
#ifndef WARPS_M
#define WARPS_M 4
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#ifndef MI
#define MI 2
#endif
#ifndef NI
#define NI 4
#endif
#ifndef LM
#define LM 4
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#ifndef A_PAD
#define A_PAD 4
#endif
#ifndef GROUP_M
#define GROUP_M 0
#endif
#ifndef A_MAP
#define A_MAP 0
#endif
#ifndef K_UNROLL
#define K_UNROLL 16
#endif
#define DO_PRAGMA(x) _Pragma(#x)
#define UNROLL_BY(n) DO_PRAGMA(unroll n)
#define LN (32 / LM)
#define WM (MI * 4 * LM)
#define WN (NI * 4 * LN)
#define BM (WARPS_M * WM)
#define BN (WARPS_N * WN)
#define THREADS (32 * WARPS_M * WARPS_N)
#define A_TOTAL (BM * BK / 4)
#define B_TOTAL (BK * BN / 4)
#define A_VECS ((A_TOTAL + THREADS - 1) / THREADS)
#define B_VECS ((B_TOTAL + THREADS - 1) / THREADS)
#define A_STRIDE (BM + A_PAD)
// Which float4 of the A tile element e is: v6b's (row e / (BK/4), k-quad e % (BK/4)), or (A_MAP 1) a warp
// takes 16 consecutive rows x 2 k-quads, so its transposed stores hit 32 different banks for any BK.
#if A_MAP == 1
#define A_ROW(e) ((e) % 16 + 16 * ((e) / (4 * BK)))
#define A_KQ(e) (((e) / 16) % (BK / 4))
#else
#define A_ROW(e) ((e) / (BK / 4))
#define A_KQ(e) ((e) % (BK / 4))
#endif

static_assert(BK % 4 == 0 && A_PAD % 4 == 0 && LM * LN == 32, "tile parameters");

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

__device__ __forceinline__ float4 load4_checked(const float* p, int valid, bool vec) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (vec) {
        if (valid >= 4) v = *reinterpret_cast<const float4*>(p);
    } else {
        if (valid > 0) v.x = p[0];
        if (valid > 1) v.y = p[1];
        if (valid > 2) v.z = p[2];
        if (valid > 3) v.w = p[3];
    }
    return v;
}

__device__ __forceinline__ void load_a(float4 (&v)[A_VECS], const float* __restrict__ A, int M, int K,
                                       int m0, int k0, bool vec, bool inside) {
    #pragma unroll
    for (int l = 0; l < A_VECS; ++l) {
        const int e = threadIdx.x + l * THREADS;
        if (A_TOTAL % THREADS == 0 || e < A_TOTAL) {
            const int m = m0 + A_ROW(e), k = k0 + A_KQ(e) * 4;
            if (inside) v[l] = *reinterpret_cast<const float4*>(A + (size_t)m * K + k);
            else v[l] = load4_checked(A + (size_t)(m < M ? m : 0) * K + k, m < M ? K - k : 0, vec);
        }
    }
}

__device__ __forceinline__ void load_b(float4 (&v)[B_VECS], const float* __restrict__ B, int N, int K,
                                       int k0, int n0, bool vec, bool inside) {
    #pragma unroll
    for (int l = 0; l < B_VECS; ++l) {
        const int e = threadIdx.x + l * THREADS;
        if (B_TOTAL % THREADS == 0 || e < B_TOTAL) {
            const int k = k0 + e / (BN / 4), n = n0 + e % (BN / 4) * 4;
            if (inside) v[l] = *reinterpret_cast<const float4*>(B + (size_t)k * N + n);
            else v[l] = load4_checked(B + (size_t)(k < K ? k : 0) * N + n, k < K ? N - n : 0, vec);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
sgemm_v7(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
         int M, int N, int K)
{
    extern __shared__ __align__(16) float smem[];
    float* As = smem;                       // [2][BK][A_STRIDE], transposed: k-major
    float* Bs = smem + 2 * BK * A_STRIDE;   // [2][BK][BN]

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int r0 = warp / WARPS_N * WM + lane / LN * 4;
    const int c0 = warp % WARPS_N * WN + lane % LN * 4;
    int bm = blockIdx.y, bn = blockIdx.x;
#if GROUP_M > 0
    {   // grouped order: GROUP_M block rows walk across N together, so their A and B panels share L2
        const int pid = blockIdx.y * gridDim.x + blockIdx.x, width = GROUP_M * gridDim.x;
        const int first = pid / width * GROUP_M;
        const int rows = min((int)gridDim.y - first, GROUP_M);
        bm = first + (pid % width) % rows;
        bn = (pid % width) / rows;
    }
#endif
    const int m0 = bm * BM, n0 = bn * BN;
    const bool a_vec = K % 4 == 0 && aligned16(A), b_vec = N % 4 == 0 && aligned16(B);
    const bool m_inside = m0 + BM <= M, n_inside = n0 + BN <= N;

    float acc[MI * 4][NI * 4];
    #pragma unroll
    for (int i = 0; i < MI * 4; ++i)
        #pragma unroll
        for (int j = 0; j < NI * 4; ++j) acc[i][j] = 0.0f;

    float4 a_next[A_VECS], b_next[B_VECS];
    const int tiles = (K + BK - 1) / BK;
    load_a(a_next, A, M, K, m0, 0, a_vec, a_vec && m_inside && BK <= K);
    load_b(b_next, B, N, K, 0, n0, b_vec, b_vec && n_inside && BK <= K);

    for (int t = 0; t < tiles; ++t) {
        float* as = As + (t & 1) * BK * A_STRIDE;
        float* bs = Bs + (t & 1) * BK * BN;
        #pragma unroll
        for (int l = 0; l < A_VECS; ++l) {
            const int e = tid + l * THREADS;
            if (A_TOTAL % THREADS == 0 || e < A_TOTAL) {
                const int m = A_ROW(e), k = A_KQ(e) * 4;
                as[k * A_STRIDE + m] = a_next[l].x;
                as[(k + 1) * A_STRIDE + m] = a_next[l].y;
                as[(k + 2) * A_STRIDE + m] = a_next[l].z;
                as[(k + 3) * A_STRIDE + m] = a_next[l].w;
            }
        }
        #pragma unroll
        for (int l = 0; l < B_VECS; ++l) {
            const int e = tid + l * THREADS;
            if (B_TOTAL % THREADS == 0 || e < B_TOTAL)
                *reinterpret_cast<float4*>(&bs[e / (BN / 4) * BN + e % (BN / 4) * 4]) = b_next[l];
        }
        __syncthreads();
        if (t + 1 < tiles) {
            const int k0 = (t + 1) * BK;
            load_a(a_next, A, M, K, m0, k0, a_vec, a_vec && m_inside && k0 + BK <= K);
            load_b(b_next, B, N, K, k0, n0, b_vec, b_vec && n_inside && k0 + BK <= K);
        }
        UNROLL_BY(K_UNROLL)
        for (int k = 0; k < BK; ++k) {
            float a[MI * 4], b[NI * 4];
            #pragma unroll
            for (int i = 0; i < MI; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(&as[k * A_STRIDE + r0 + i * 4 * LM]);
                a[4 * i] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
            }
            #pragma unroll
            for (int j = 0; j < NI; ++j) {
                const float4 v = *reinterpret_cast<const float4*>(&bs[k * BN + c0 + j * 4 * LN]);
                b[4 * j] = v.x; b[4 * j + 1] = v.y; b[4 * j + 2] = v.z; b[4 * j + 3] = v.w;
            }
            #pragma unroll
            for (int i = 0; i < MI * 4; ++i)
                #pragma unroll
                for (int j = 0; j < NI * 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
    }

    const bool c_vec = N % 4 == 0 && aligned16(C);
    #pragma unroll
    for (int i = 0; i < MI * 4; ++i) {
        const int m = m0 + r0 + (i / 4) * 4 * LM + i % 4;
        if (m >= M) continue;
        float* c_row = C + (size_t)m * N;
        #pragma unroll
        for (int h = 0; h < NI; ++h) {
            const int n = n0 + c0 + h * 4 * LN;
            const float4 v = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
            if (c_vec) {
                if (n < N) *reinterpret_cast<float4*>(c_row + n) = v;
            } else {
                if (n < N) c_row[n] = v.x;
                if (n + 1 < N) c_row[n + 1] = v.y;
                if (n + 2 < N) c_row[n + 2] = v.z;
                if (n + 3 < N) c_row[n + 3] = v.w;
            }
        }
    }
}
