/* smxx_fp8_block_norm_quantize.cu: fused LayerNorm/RMSNorm (or none) + FP8 block-scaling
 * quantization (TE Float8BlockScaling): 1x128 blocks along K for the rowwise copy [M, K] and
 * 128x1 blocks along M for the transposed columnwise copy [K, M] (input and grad roles), or one
 * scale per 128x128 tile shared by both copies (the weight role, __ROLE__).
 *
 * Numerics: numerics 2.5 (per block a = max(amax, amax_epsilon); scale = fp8_max / a, 1 for a
 * zero or non-finite a, the input dtype's largest finite value for an infinite quotient, a power
 * of two under power_2_scales: fp8_scale_from_amax, qf_dev_scale.cuh; scale_inv = 1/scale as
 * fp32; q = rn_sat(fl(y * scale))) and numerics 3 (y as in the other quantizers). C reference:
 * qf_norm_quantize_fp8_block_ref in runtime/ref/ref_fp8_block.c; given this kernel's mu/rsigma
 * the bytes are identical. Scale matrices in TE's GEMM_READY layouts (scale_index below); their
 * padding entries are written with 1.0 by block (0, 0) (never read by a GEMM), so no memset runs.
 *
 * Two entry points share the numerics:
 * - `<name>` (tiled; any M and K, any alignment, 1D or 2D, rowwise and/or columnwise): block
 *   (blockIdx.x, blockIdx.y) of 256 threads owns the 128 rows of strip blockIdx.x (one 128x1
 *   block per column, one row of 128x128 tiles) and its 128-column chunks blockIdx.y,
 *   + gridDim.y, ... (gridDim.y is 1 with a norm: the statistics need whole rows). Phase 1: the
 *   rows' statistics (tile_stats, one warp per row). Phase 2: the chunks; each thread holds 8
 *   (16-bit x) or 16 (fp32 x) rows of one 16-byte column segment (64 values) in registers, so x
 *   is loaded once per chunk with coalesced 16-byte loads where K and x allow; row blocks reduce
 *   their amax with shuffles over the 16 or 32 lanes of a row, column blocks (and the tile)
 *   through shared memory; the rowwise bytes go straight to memory, the columnwise bytes through
 *   a transposed 128x128 byte tile in shared memory, stored as coalesced 4-byte words of the
 *   [K, M] rows.
 * - `<name>_rows{1,2,4,8}` (rowwise 1x128 only; K * sizeof(x) a multiple of 16, 16-byte aligned
 *   pointers; the runtime checks all of these): each block loops over rows (persistent grid); a
 *   row (without a norm: each chunk of it) is held in registers as IT 16-byte vectors per
 *   thread, so x is read once; the 16 or 32 consecutive lanes whose vectors make up one 1x128
 *   block reduce its amax with shuffles; the group's first lane writes its scale_inv.
 *
 * Compile-time choices: the placeholders (qfuse-gen) and -DQF_OUTPUTS, -DQF_GAMMA_DTYPE,
 * -DQF_PROLOGUE (runtime). M and K are run-time values. */
#include "qf_dev_convert.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_norm.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_dev_scale.cuh"
#include "qf_formats.h"

namespace {

constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kOutDtype = __OUT_DTYPE__;
constexpr bool kBlock2d = __ROLE__ == QF_ROLE_WEIGHT; /* 128x128 tiles (numerics 2.5) */
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kWarps = kThreads / 32;
constexpr int kBlk = QF_FP8_BLOCK;
constexpr bool kRowwise = (QF_OUTPUTS & QF_OUT_ROWWISE) != 0;
constexpr bool kColumnwise = (QF_OUTPUTS & QF_OUT_COLUMNWISE) != 0;
constexpr int kInSize = kInDtype == QF_DTYPE_FP32 ? 4 : 2;
constexpr int kEpv = 16 / kInSize;             /* x elements per 16-byte vector: 8 or 4 */
constexpr int kTpr = kBlk / kEpv;              /* lanes per 128 elements of a row: 16 or 32 */
constexpr int kRowsPerPass = kThreads / kTpr;  /* strip rows per pass of the block: 16 or 8 */
constexpr int kPasses = kTileM / kRowsPerPass; /* rows per thread: 8 or 16 */

static_assert(!kHasPrologue || kNorm == QF_NORM_NONE, "an activation prologue has no norm");
static_assert(kOutDtype == QF_DTYPE_E4M3, "FP8 block scaling is E4M3 for every role");
static_assert(kTileM == kBlk && kThreads == 256, "a strip of 128 rows, 256 threads");
static_assert(32 % kTpr == 0 && kTileM % kRowsPerPass == 0, "a row's lanes sit in one warp");

/* The largest finite value of x's dtype: what an infinite scale becomes (TE's
 * compute_scale_from_types; numerics 2.5). */
__device__ __forceinline__ float input_max() {
    return kInDtype == QF_DTYPE_BF16   ? __uint_as_float(0x7F7F0000u)
           : kInDtype == QF_DTYPE_FP16 ? 65504.0f
                                       : __uint_as_float(0x7F7FFFFFu);
}

/* The scale of a block whose amax is amax (NaN kept by the merges: scale 1). */
__device__ __forceinline__ float block_scale(const qf_q_params &p, float amax) {
    return fp8_scale_from_amax(amax, p.amax_epsilon, p.power_2_scales != 0, QF_E4M3_MAX,
                               input_max());
}

/* The scale matrix of a stored copy [R, C] (rowwise: [M, K]; columnwise: the transpose [K, M]),
 * as qf_fp8_block_scale_shape: 1D [cdiv(C,128), roundup(R,4)] (R-major), 2D
 * [cdiv(R,128), roundup(cdiv(C,128),4)]; `used` columns of each row are real entries. */
struct ScaleGeom {
    long long rows, used, cols;
};

__device__ __forceinline__ ScaleGeom scale_geom(long long R, long long C) {
    const long long used = kBlock2d ? (C + kBlk - 1) / kBlk : R;
    return {kBlock2d ? (R + kBlk - 1) / kBlk : (C + kBlk - 1) / kBlk, used, (used + 3) / 4 * 4};
}

/* Index of the scale_inv of element (r, c) of the stored copy [R, C] (qf_fp8_block_scale_index). */
__device__ __forceinline__ long long scale_index(long long R, long long C, long long r,
                                                 long long c) {
    const long long cols = scale_geom(R, C).cols;
    return kBlock2d ? (r / kBlk) * cols + c / kBlk : (c / kBlk) * cols + r;
}

/* Padding entries (columns used..cols of every row, at most 3 each) of the scale matrix of the
 * stored copy [R, C] set to 1.0; by one block, all of its threads. */
__device__ __forceinline__ void pad_scales(unsigned char *s, long long R, long long C) {
    const ScaleGeom g = scale_geom(R, C);
    float *f = reinterpret_cast<float *>(s);
    for (long long e = threadIdx.x; e < g.rows * 3; e += kThreads) {
        const long long i = e / 3, j = g.used + e % 3;
        if (j < g.cols)
            f[i * g.cols + j] = 1.0f;
    }
}

/* Block (0, 0)'s share: the padding of every selected scale matrix. */
__device__ __forceinline__ void pad_all(const qf_q_params &p) {
    if (blockIdx.x != 0 || blockIdx.y != 0)
        return;
    if (kRowwise)
        pad_scales(p.scale_row, p.M, p.K);
    if (kColumnwise)
        pad_scales(p.scale_col, p.K, p.M);
}

/* Writes scale_inv = 1/scale for the block holding element (r, c) of the stored copy [R, C]. */
__device__ __forceinline__ void store_scale(unsigned char *s, long long R, long long C,
                                            long long r, long long c, float scale) {
    reinterpret_cast<float *>(s)[scale_index(R, C, r, c)] = 1.0f / scale;
}

/* Quantizes n values (a multiple of 4) with one multiplier each and packs them little-endian. */
template <int N>
__device__ __forceinline__ void quant_pack(const float (&y)[N], const float (&s)[N],
                                           unsigned (&w)[N / 4]) {
#pragma unroll
    for (int j = 0; j < N; j += 4) {
        const unsigned lo = to_fp8x2<kOutDtype>(y[j] * s[j], y[j + 1] * s[j + 1]);
        const unsigned hi = to_fp8x2<kOutDtype>(y[j + 2] * s[j + 2], y[j + 3] * s[j + 3]);
        w[j / 4] = lo | (hi << 16);
    }
}

/* ---------------------------------------------------------------- rows path */

/* Normalizes one register-held vector at element k of row m (k may be past K: then it only takes
 * part in the block's shuffles), quantizes it with its 1x128 block's scale and stores it. Every
 * lane of the warp must call this (shuffles). */
__device__ __forceinline__ void rows_emit(const qf_q_params &p, const float (&v)[kEpv],
                                          long long m, long long k, float mu, float rs) {
    float y[kEpv];
    const float amax =
        block_vec_amax<kNorm, kGammaDtype, kZeroCenteredGamma, kEpv, kTpr>(p, k, v, mu, rs, y);
    if (k >= p.K)
        return;
    const float scale = block_scale(p, amax);
    float s[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        s[j] = scale;
    unsigned w[kEpv / 4];
    quant_pack<kEpv>(y, s, w);
    unsigned char *dst = p.out_row + m * p.K + k;
    if constexpr (kEpv == 8)
        *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
    else
        *reinterpret_cast<unsigned *>(dst) = w[0];
    if (threadIdx.x % kTpr == 0)
        store_scale(p.scale_row, p.M, p.K, m, k, scale);
}

template <int IT>
__device__ void rows_body(const qf_q_params &p) {
    if (!kRowwise || kBlock2d)
        return; /* the runtime runs the tiled entry for these */
    pad_all(p);
    rows_walk<IT, kInDtype, kNorm, kEpv, kThreads, kWarps, true>(
        p, [&](const float (&v)[kEpv], long long m, long long k, float mu, float rs) {
            rows_emit(p, v, m, k, mu, rs);
        });
}

/* ---------------------------------------------------------------- tiled entry */

/* The shared memory of the tiled entry. */
struct TileSmem {
    float mu[kTileM], rsigma[kTileM];
    float colmax[kRowsPerPass][kBlk]; /* per-thread-row partial column amaxes of a chunk */
    float colscale[kBlk];             /* each column block's scale (2D: the tile's, in [0]) */
    float red[kWarps];
    __align__(16) unsigned char t[kBlk][kTileM + 4]; /* transposed chunk [k][m], padded */
};

/* The normalized chunk values of this thread: rows r0 + i * kRowsPerPass of the strip at m0,
 * columns k0 + c .. + kEpv (0 where the element does not exist), and its row amaxes and column
 * amaxes over its rows. */
__device__ __forceinline__ void chunk_load(const qf_q_params &p, const TileSmem &sm, long long m0,
                                           long long k0, int r0, int c, bool vec,
                                           float (&y)[kPasses][kEpv], float (&ramax)[kPasses],
                                           float (&camax)[kEpv]) {
    float g[kEpv], b[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++) {
        const long long k = k0 + c + j;
        g[j] = kNorm != QF_NORM_NONE && k < p.K
                   ? load_gamma<kGammaDtype, kZeroCenteredGamma>(p.gamma, k) : 1.0f;
        b[j] = kNorm == QF_NORM_LAYERNORM && k < p.K ? load_elem<kGammaDtype>(p.beta, k) : 0.0f;
        camax[j] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kPasses; i++) {
        const int r = r0 + i * kRowsPerPass;
        const long long m = m0 + r;
        const float mu = kNorm == QF_NORM_LAYERNORM ? sm.mu[r] : 0.0f;
        const float rs = kNorm != QF_NORM_NONE ? sm.rsigma[r] : 1.0f;
        float xs[kEpv];
        const bool whole = vec && m < p.M && k0 + c < p.K; /* then all kEpv exist (K % kEpv) */
        if (whole)
            src_n<kInDtype, kEpv>(p, m, k0 + c, xs);
        ramax[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            const long long k = k0 + c + j;
            y[i][j] = 0.0f;
            if (m < p.M && k < p.K) {
                const float xv = whole ? xs[j] : src_elem<kInDtype>(p, m, k);
                y[i][j] = normalize<kNorm>(xv, mu, rs, g[j], b[j]);
                ramax[i] = amax_merge(ramax[i], y[i][j]);
                camax[j] = amax_merge(camax[j], y[i][j]);
            }
        }
    }
}

/* The column blocks' scales of the chunk (2D: the tile's, in colscale[0]) into shared memory,
 * from each thread's column amaxes; ends with a barrier. */
__device__ __forceinline__ void chunk_col_scales(const qf_q_params &p, TileSmem &sm, int r0, int c,
                                                 const float (&camax)[kEpv]) {
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        sm.colmax[r0][c + j] = camax[j];
    __syncthreads();
    float a = 0.0f;
    if (threadIdx.x < kBlk) {
        for (int i = 0; i < kRowsPerPass; i++)
            a = amax_merge(a, sm.colmax[i][threadIdx.x]);
        if (!kBlock2d)
            sm.colscale[threadIdx.x] = block_scale(p, a);
    }
    if (kBlock2d) { /* the tile's amax: warps 0..3 hold the 128 column amaxes, the others 0 */
        a = warp_amax(a);
        if ((threadIdx.x & 31) == 0)
            sm.red[threadIdx.x >> 5] = a;
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = sm.red[0];
            for (int w = 1; w < kWarps; w++)
                t = amax_merge(t, sm.red[w]);
            sm.colscale[0] = block_scale(p, t);
        }
    }
    __syncthreads();
}

/* Stores kEpv bytes (packed little-endian in w) at dst, the first n of them when n < kEpv. */
__device__ __forceinline__ void store_bytes(unsigned char *dst, const unsigned (&w)[kEpv / 4],
                                            int n, bool aligned) {
#pragma unroll
    for (int q = 0; q < kEpv / 4; q++) {
        const int left = n - 4 * q;
        if (left > 0)
            store4(dst + 4 * q, w[q], left < 4 ? left : 4, aligned);
    }
}

/* The rowwise bytes and scales of this thread's rows of the chunk. */
__device__ __forceinline__ void chunk_rowwise(const qf_q_params &p, const TileSmem &sm,
                                              long long m0, long long k0, int r0, int c,
                                              const float (&y)[kPasses][kEpv],
                                              float (&ramax)[kPasses]) {
    const long long left = p.K - (k0 + c);
    const int n = left <= 0 ? 0 : left < kEpv ? static_cast<int>(left) : kEpv;
    const bool aligned = (p.K & 3) == 0;
#pragma unroll
    for (int i = 0; i < kPasses; i++) {
        float a = ramax[i];
#pragma unroll
        for (int o = 1; o < kTpr; o <<= 1) /* the row's kTpr lanes: one aligned warp group */
            a = amax_merge(a, __shfl_xor_sync(0xffffffffu, a, o));
        const long long m = m0 + r0 + i * kRowsPerPass;
        if (m >= p.M || n == 0)
            continue;
        const float scale = kBlock2d ? sm.colscale[0] : block_scale(p, a);
        float s[kEpv];
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            s[j] = scale;
        unsigned w[kEpv / 4];
        quant_pack<kEpv>(y[i], s, w);
        store_bytes(p.out_row + m * p.K + k0 + c, w, n, aligned);
        if (c == 0 && (!kBlock2d || r0 + i * kRowsPerPass == 0))
            store_scale(p.scale_row, p.M, p.K, m, k0, scale);
    }
}

/* The columnwise bytes of the chunk through the transposed tile, and its scales; ends with a
 * barrier (the tile and the scales are reused by the next chunk). */
__device__ __forceinline__ void chunk_columnwise(const qf_q_params &p, TileSmem &sm, long long m0,
                                                 long long k0, int r0, int c,
                                                 const float (&y)[kPasses][kEpv]) {
    float s[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        s[j] = sm.colscale[kBlock2d ? 0 : c + j];
#pragma unroll
    for (int i = 0; i < kPasses; i++) {
        unsigned w[kEpv / 4];
        quant_pack<kEpv>(y[i], s, w);
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            sm.t[c + j][r0 + i * kRowsPerPass] = static_cast<unsigned char>(w[j / 4] >> (8 * (j % 4)));
    }
    __syncthreads();
    const long long rows_left = p.M - m0; /* > 0 */
    const bool aligned = (p.M & 3) == 0;
    for (int e = threadIdx.x; e < kBlk * (kTileM / 4); e += kThreads) {
        const int kk = e / (kTileM / 4), m4 = (e % (kTileM / 4)) * 4;
        if (k0 + kk >= p.K || m4 >= rows_left)
            continue;
        const unsigned v = *reinterpret_cast<const unsigned *>(&sm.t[kk][m4]);
        const int n = rows_left - m4 < 4 ? static_cast<int>(rows_left - m4) : 4;
        store4(p.out_col + (k0 + kk) * p.M + m0 + m4, v, n, aligned);
    }
    if (!kBlock2d && threadIdx.x < kBlk && k0 + threadIdx.x < p.K)
        store_scale(p.scale_col, p.K, p.M, k0 + threadIdx.x, m0, sm.colscale[threadIdx.x]);
    if (kBlock2d && threadIdx.x == 0)
        store_scale(p.scale_col, p.K, p.M, k0, m0, sm.colscale[0]);
    __syncthreads();
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_q_params p) {
    __shared__ TileSmem sm;
    const long long m0 = static_cast<long long>(blockIdx.x) * kTileM;
    pad_all(p);

    /* Phase 1: row statistics. */
    tile_stats<kNorm, kInDtype, kTileM, kWarps>(p, m0, sm.mu, sm.rsigma);

    /* Phase 2: 128x128 chunks of the strip. */
    const int r0 = threadIdx.x / kTpr, c = (threadIdx.x % kTpr) * kEpv;
    const bool vec = !kHasPrologue && p.K % kEpv == 0 &&
                     (reinterpret_cast<unsigned long long>(p.x) & 15ull) == 0;
    for (long long k0 = static_cast<long long>(blockIdx.y) * kBlk; k0 < p.K;
         k0 += static_cast<long long>(gridDim.y) * kBlk) {
        float y[kPasses][kEpv], ramax[kPasses], camax[kEpv];
        chunk_load(p, sm, m0, k0, r0, c, vec, y, ramax, camax);
        if (kColumnwise || kBlock2d)
            chunk_col_scales(p, sm, r0, c, camax);
        if (kRowwise)
            chunk_rowwise(p, sm, m0, k0, r0, c, y, ramax);
        if (kColumnwise)
            chunk_columnwise(p, sm, m0, k0, r0, c, y);
        else if (kBlock2d)
            __syncthreads(); /* colscale is reused by the next chunk */
    }
}

/* The optional entry points (qf_dev_module.cuh); the registry lists them because the template
 * invokes their macros here. */
QF_ROWS_ENTRIES(__KERNEL_NAME__, kThreads, qf_q_params)
