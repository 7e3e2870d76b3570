/* qf_dev_mma.cuh: the PTX wrappers and tile helpers shared by the Hopper GEMM templates:
 * cp.async copies, ldmatrix, fp32 -> bf16, the grouped tile raster and the bf16 epilogue stores.
 * An in-memory NVRTC header; see qf_dev_load.cuh. */
#ifndef QF_DEV_MMA_CUH
#define QF_DEV_MMA_CUH

#include "qf_dev_load.cuh"

namespace {

__device__ __forceinline__ unsigned smem_u32(const void *p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

/* 16 bytes global -> shared, bypassing L1; n = 0 writes 16 zero bytes and reads nothing. */
__device__ __forceinline__ void cp_async16(unsigned dst, const void *src, int n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}


/* The output tile of this block for a GEMM params block P (fields M, N) with TILE_M x TILE_N
 * tiles: groups of GROUP_M tile rows, column-major inside a group. */
template <int TILE_M, int TILE_N, int GROUP_M, typename P>
__device__ __forceinline__ void tile_origin(const P &p, long long *m0, long long *n0) {
    const long long tiles_m = (p.M + TILE_M - 1) / TILE_M, tiles_n = (p.N + TILE_N - 1) / TILE_N;
    const long long bid = blockIdx.x, per_group = GROUP_M * tiles_n;
    const long long first = bid / per_group * GROUP_M, in_group = bid % per_group;
    const long long rows = tiles_m - first < GROUP_M ? tiles_m - first : GROUP_M;
    *m0 = (first + in_group % rows) * TILE_M;
    *n0 = in_group / rows * TILE_N;
}

/* CHUNKS 16-byte cp.async copies per thread into one operand tile at dst (rows of ROW_BYTES
 * bytes, chunks XOR-swizzled by swz): tile rows r0 + 32 j from source rows row0 + r0 + 32 j
 * (stride bytes apart) at byte kb. Rows at or past `rows` and chunks with !k_ok are
 * zero-filled and read nothing. */
template <int CHUNKS, int ROW_BYTES>
__device__ __forceinline__ void copy_tile(unsigned dst, const unsigned char *src, long long row0,
                                          long long rows, long long stride, long long kb,
                                          bool k_ok, int r0, unsigned swz) {
#pragma unroll
    for (int j = 0; j < CHUNKS; j++) {
        const int r = r0 + 32 * j;
        const long long row = row0 + r;
        const bool ok = k_ok && row < rows;
        cp_async16(dst + static_cast<unsigned>(r * ROW_BYTES) + swz,
                   ok ? src + row * stride + kb : src, ok ? 16 : 0);
    }
}

/* Opens main-loop iteration kt of a STAGES-deep cp.async pipeline that computes on `stage`:
 * waits for k-tile kt (this thread's copies, then everyone's; the barrier also frees the stage
 * of k-tile kt-1, the one before `stage`, into which next_stage is set). Returns the k-tile to
 * prefetch there. */
template <int STAGES>
__device__ __forceinline__ long long pipeline_next(long long kt, int stage, int &next_stage) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    next_stage = stage == 0 ? STAGES - 1 : stage - 1;
    return kt + STAGES - 1;
}

/* Zeroes an MI x NI x 4 accumulator. */
template <int MI, int NI>
__device__ __forceinline__ void zero_acc(float (&acc)[MI][NI][4]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[mi][ni][q] = 0.0f;
}

/* bias[c] and, when two, bias[c + 1] (bf16) as fp32; 0 without a bias or past the edge. */
__device__ __forceinline__ void load_bias2(const unsigned short *bias, long long c, bool two,
                                           float &bias0, float &bias1) {
    bias0 = 0.0f, bias1 = 0.0f;
    if (bias) {
        bias0 = half_bits_to_float<QF_DTYPE_BF16>(__ldg(bias + c));
        bias1 = two ? half_bits_to_float<QF_DTYPE_BF16>(__ldg(bias + c + 1)) : 0.0f;
    }
}

/* Stores bf16 lo at dst[0] and, when two, hi at dst[1]: one 4-byte word when pairs (N even, so
 * dst is 4-byte aligned). */
__device__ __forceinline__ void store_bf16x2(unsigned short *dst, unsigned short lo,
                                             unsigned short hi, bool two, bool pairs) {
    if (two && pairs) {
        *reinterpret_cast<unsigned *>(dst) = static_cast<unsigned>(hi) << 16 | lo;
    } else {
        dst[0] = lo;
        if (two)
            dst[1] = hi;
    }
}

/* The bf16 epilogue of a GEMM block: each fp32 accumulator v of this thread (warp tiles of
 * WARP_M x WARP_N in a grid WARPS_N warps wide; m16n8 fragment layout: acc[mi][ni][2h + i] at
 * row g + 8h + 16 mi, column 2t + i + 8 ni) becomes y = f(v, bias) rounded to bf16
 * (float_to_half_bits), bias the column's (0 without one), one rounding; rows past M and columns
 * past N are skipped, and column pairs are stored as one word when N is even. P: a params block
 * with M, N, bias, y. */
template <int MI, int NI, int WARPS_N, int WARP_M, int WARP_N, typename P, typename F>
__device__ __forceinline__ void store_tile_bf16(const P &p, long long m0, long long n0,
                                                const float (&acc)[MI][NI][4], F f) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long r0 = m0 + (warp / WARPS_N) * WARP_M + (lane >> 2);
    const long long c0 = n0 + (warp % WARPS_N) * WARP_N + (lane & 3) * 2;
    const bool pairs = (p.N & 1) == 0;
#pragma unroll
    for (int ni = 0; ni < NI; ni++) {
        const long long c = c0 + ni * 8;
        if (c >= p.N)
            continue;
        const bool two = c + 1 < p.N;
        float bias0, bias1;
        load_bias2(p.bias, c, two, bias0, bias1);
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const long long r = r0 + mi * 16 + h * 8;
                if (r >= p.M)
                    continue;
                const unsigned short lo =
                    float_to_half_bits<QF_DTYPE_BF16>(f(acc[mi][ni][2 * h], bias0));
                const unsigned short hi =
                    float_to_half_bits<QF_DTYPE_BF16>(f(acc[mi][ni][2 * h + 1], bias1));
                store_bf16x2(p.y + r * p.N + c, lo, hi, two, pairs);
            }
    }
}

} // namespace

#endif /* QF_DEV_MMA_CUH */
