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
 * Three entry points share the numerics:
 * - `<name>` (tiled; any M and K, any alignment, 1D or 2D, rowwise and/or columnwise): block
 *   (blockIdx.x, blockIdx.y) of 256 threads owns the 128 rows of strip blockIdx.x (one 128x1
 *   block per column, one row of 128x128 tiles) and its 128-column chunks blockIdx.y,
 *   + gridDim.y, ... Phase 1: the rows' statistics, computed (tile_stats, one warp per row;
 *   gridDim.y is then 1: they need whole rows) or, with p.pass 1, read from p.mu / p.rsigma
 *   after a rows entry wrote them (then only the columnwise copy is written, on any gridDim.y).
 *   Phase 2: each chunk from one read of its x (chunk_quantize), its normalized values held in
 *   registers: the amaxes and scales, then the bytes. Whole chunks of 16-bit x (whole strip, x
 *   16-byte aligned) are read from shared memory, staged by cp.async in two buffers, so the next
 *   chunk's copy is in flight while one is quantized (both of the first two during the
 *   statistics); other chunks are read from global memory. Each thread takes 8 consecutive rows
 *   (fp32 x: 16) of one 16-byte column segment (64 values, so 2 blocks of 256 threads per SM);
 *   row blocks reduce their amax with shuffles over the 16 or 32 lanes of a row, each lane
 *   trading half of its rows at each step (chunk_row_scale), column blocks (and the tile)
 *   through shared memory. The rowwise bytes go straight
 *   to memory, and so do the columnwise ones: a thread's 8 (16) consecutive rows of a column
 *   are 8 (16) consecutive bytes of a row of the transpose [K, M].
 * - `<name>_rows{1,2,4,8}` (1D only; K * sizeof(x) a multiple of 16, 16-byte aligned pointers;
 *   the runtime checks all of these): the statistics and the rowwise copy (or, without a
 *   rowwise output, the statistics alone, for the tiled entry's p.pass 1). Each block loops over
 *   rows (persistent grid); a row (without a norm: each chunk of it) is held in registers as IT
 *   16-byte vectors per thread, so x is read once; each 1x128 block lies in the vectors of 8 to
 *   32 consecutive lanes (rows_vec, RowsSpan), which reduce its amax with shuffles; lane b of
 *   such a group computes the scale of the group's block b, writes its scale_inv and shuffles
 *   it to the others.
 * - `<name>_cols` (a norm, 16-bit x, M a multiple of 128 and K of 64, 16-byte aligned pointers):
 *   the columnwise copy from the statistics a rows entry wrote, on tiles of 128 rows x 64
 *   columns (cols_body below); where it cannot run, the tiled entry does (p.pass 1).
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

/* The thread's IT register vectors of a rows chunk of row m at the columns ln gives (RowsSpan:
 * NB 1x128 blocks, shared by the L lanes of a group), normalized, quantized with their block's
 * scale and stored. Each block's scale is computed once, by lane b of the group for its block b,
 * which also writes its scale_inv, and reaches the other lanes by shuffle. Every lane of the warp
 * must call this (shuffles). */
template <int IT>
__device__ __forceinline__ void rows_emit(const qf_q_params &p, float (&v)[IT][kEpv], long long m,
                                          const RowsLane &ln, float mu, float rs) {
    using Span = RowsSpan<IT, kBlk / kEpv>;
    static_assert(Span::L == Span::G && Span::NB <= Span::L, "a lane group shares its blocks");
    float amax[Span::NB];
    rows_block_amax<kNorm, kGammaDtype, kZeroCenteredGamma, kEpv, IT, kBlk / kEpv, kThreads>(
        p, ln, v, mu, rs, amax);
    const int lane = threadIdx.x & 31, q = lane % Span::L;
    float a = amax[0];
#pragma unroll
    for (int b = 1; b < Span::NB; b++)
        a = q == b ? amax[b] : a;
    const float mine = block_scale(p, a);
    if (q < Span::NB) { /* block q starts at the group's first column plus q blocks */
        const long long k = ln.col - q * kEpv + q * kBlk;
        if (k < p.K)
            store_scale(p.scale_row, p.M, p.K, m, k, mine);
    }
#pragma unroll
    for (int b = 0; b < Span::NB; b++) {
        const float scale = __shfl_sync(0xffffffffu, mine, lane - q + b);
        float s[kEpv];
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            s[j] = scale;
#pragma unroll
        for (int i = 0; i < Span::V; i++) {
            const int it = b * Span::V + i;
            if (!(ln.valid >> it & 1u))
                break;
            const long long k = rows_col<IT, kEpv, kBlk / kEpv>(ln, it);
            unsigned w[kEpv / 4];
            quant_pack<kEpv>(v[it], s, w);
            unsigned char *dst = p.out_row + m * p.K + k;
            if constexpr (kEpv == 8)
                *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
            else
                *reinterpret_cast<unsigned *>(dst) = w[0];
        }
    }
}

/* The rows walk keeps x - mu (rows_walk's KEEP) at up to 2 vectors per thread (LayerNorm
 * rowwise on bf16 x 1.02-1.03x; on fp16 x ptxas's code is the same either way). At 4 vectors of
 * bf16 x the kept values spilled at 3 blocks per SM (0.84x) and a 2-block build measured 0.96x,
 * so that entry rebuilds them. The LayerNorm `_rows4` on fp16 x spilled at 3 blocks per SM (80
 * registers) and runs at 2 (110, no spill; 16384 x 8192 rowwise 136.8 -> 118.6 us). */
template <int IT>
constexpr bool kRowsKeep = kInSize == 2 && IT <= 2;
constexpr int kRows4Blocks = kInDtype == QF_DTYPE_FP16 && kNorm == QF_NORM_LAYERNORM ? 2 : 3;

template <int IT>
__device__ void rows_body(const qf_q_params &p) {
    if (kBlock2d || (!kRowwise && kNorm == QF_NORM_NONE))
        return; /* the runtime runs the tiled entry for these */
    if (kRowwise)
        pad_all(p);
    /* the statistics, and the rowwise copy where asked (a columnwise copy comes from the tiled
     * entry after this one, p.pass 1) */
    rows_walk<IT, kInDtype, kGammaDtype, kZeroCenteredGamma, kNorm, kEpv, kThreads, kWarps,
              kBlk / kEpv, kRowwise, kRowsKeep<IT>>(
        p, [&](float (&v)[IT][kEpv], long long m, const RowsLane &ln, float mu, float rs) {
            rows_emit<IT>(p, v, m, ln, mu, rs);
        });
}

/* ---------------------------------------------------------------- tiled entry */

/* Whole chunks of 16-bit x are staged through two 32 KB buffers of dynamic shared memory
 * (QF_FP8_BLOCK_TILED_SMEM): the next chunk's copy (cp.async) is in flight while the block
 * quantizes this one. fp32 x is read from global memory (the second pass from L2). */
constexpr bool kStage = kInSize == 2;
constexpr int kStageBytes = kTileM * kBlk * kInSize;
static_assert(!kStage || 2 * kStageBytes == QF_FP8_BLOCK_TILED_SMEM(kInSize),
              "the runtime's dynamic shared memory size");

/* The static shared memory of the tiled entry. */
struct TileSmem {
    float mu[kTileM], rsigma[kTileM];
    float colmax[kRowsPerPass][kBlk]; /* per-row-group partial column amaxes of a chunk */
    float colscale[kBlk];             /* each column block's scale (2D: the tile's, in [0]) */
    float red[kWarps];
};

/* Stage buffer b (0 or 1) of the dynamic shared memory: a chunk [128][128] of x. */
__device__ __forceinline__ unsigned char *stage_buf(long long b) {
    extern __shared__ __align__(16) unsigned char dyn[];
    return dyn + (b & 1) * kStageBytes;
}

/* Starts the copy of the whole chunk (m0, k0) of x into buf: 16-byte pieces, piece e (row
 * e / kTpr) by thread e % kThreads; one cp.async group. */
__device__ __forceinline__ void chunk_stage(const qf_q_params &p, unsigned char *buf,
                                            long long m0, long long k0) {
#pragma unroll
    for (int q = 0; q < kTileM * kTpr / kThreads; q++) {
        const int e = q * kThreads + threadIdx.x, r = e / kTpr, c = (e % kTpr) * kEpv;
        cp_async16(buf + (r * kBlk + c) * kInSize,
                   static_cast<const unsigned char *>(p.x) + ((m0 + r) * p.K + k0 + c) * kInSize);
    }
    cp_async_commit();
}

/* Thread tid's place in a 128x128 chunk: the kPasses consecutive rows from r0 * kPasses (r0 =
 * tid / kTpr: the kTpr lanes of an aligned warp group share rows) and the kEpv columns from c. */
__device__ __forceinline__ int tile_row(int r0, int i) {
    return r0 * kPasses + i;
}

/* Where a chunk's x comes from: buf (staged, whole chunk) when not null; else global memory, as
 * one vector per row when the chunk is whole and x's vectors aligned (full), element by element
 * otherwise. */
struct ChunkSrc {
    const unsigned char *buf;
    long long m0, k0;
    bool full, vec;
};

/* y = the normalized values of row r of the chunk at columns k0 + c .. + kEpv, 0 where the
 * element does not exist (gamma g, beta b of those columns). */
__device__ __forceinline__ void chunk_y(const qf_q_params &p, const TileSmem &sm,
                                        const ChunkSrc &src, int r, int c, const float (&g)[kEpv],
                                        const float (&b)[kEpv], float (&y)[kEpv]) {
    const float mu = kNorm == QF_NORM_LAYERNORM ? sm.mu[r] : 0.0f;
    const float rs = kNorm != QF_NORM_NONE ? sm.rsigma[r] : 1.0f;
    const long long m = src.m0 + r;
    float xv[kEpv];
    if (kStage && src.buf) {
        const uint4 q = *reinterpret_cast<const uint4 *>(src.buf + (r * kBlk + c) * kInSize);
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            xv[j] = half_bits_to_float<kInDtype>((w[j / 2] >> (16 * (j % 2))) & 0xFFFFu);
    } else if (src.full) {
        src_n<kInDtype, kEpv>(p, m, src.k0 + c, xv);
    } else {
        const bool whole = src.vec && m < p.M && src.k0 + c < p.K; /* all kEpv exist (K % kEpv) */
        if (whole)
            src_n<kInDtype, kEpv>(p, m, src.k0 + c, xv);
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            const long long k = src.k0 + c + j;
            const bool ok = m < p.M && k < p.K;
            y[j] = ok ? normalize<kNorm>(whole ? xv[j] : src_elem<kInDtype>(p, m, k), mu, rs,
                                         g[j], b[j])
                      : 0.0f;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        y[j] = normalize<kNorm>(xv[j], mu, rs, g[j], b[j]);
}

/* The column blocks' scales of the chunk (2D: the tile's, in colscale[0]) into shared memory,
 * from each thread's column amaxes, and the columnwise scale_inv; ends with a barrier. The next
 * chunk's writes come after its first barrier, which every thread reaches only when done with
 * this chunk's colscale, so no barrier closes a chunk. */
__device__ __forceinline__ void chunk_col_scales(const qf_q_params &p, TileSmem &sm, long long m0,
                                                 long long k0, int r0, int c,
                                                 const float (&camax)[kEpv]) {
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        sm.colmax[r0][c + j] = camax[j];
    __syncthreads();
    float a = 0.0f;
    if (threadIdx.x < kBlk) {
#pragma unroll
        for (int i = 0; i < kRowsPerPass; i++)
            a = amax_merge_fast(a, sm.colmax[i][threadIdx.x]);
        if (!kBlock2d) {
            const float scale = block_scale(p, a);
            sm.colscale[threadIdx.x] = scale;
            if (kColumnwise && k0 + threadIdx.x < p.K)
                store_scale(p.scale_col, p.K, p.M, k0 + threadIdx.x, m0, scale);
        }
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
            const float scale = block_scale(p, t);
            sm.colscale[0] = scale;
            if (kColumnwise)
                store_scale(p.scale_col, p.K, p.M, k0, m0, scale);
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

/* One halving trade of an amax reduction: lanes l and l ^ o hold the amaxes a[0..n) of the same
 * n rows or columns; each keeps one half (the upper where hi, lane & o set) merged with its
 * partner's copy of that half, into a[0..n/2). */
template <int N>
__device__ __forceinline__ void amax_trade_half(float (&a)[N], int n, int o, bool hi) {
#pragma unroll
    for (int t = 0; t < n / 2; t++) {
        const float send = hi ? a[t] : a[t + n / 2];
        const float keep = hi ? a[t + n / 2] : a[t];
        a[t] = amax_merge_fast(keep, __shfl_xor_sync(0xffffffffu, send, o));
    }
}

/* Lanes per row of the chunk after chunk_row_scale's reduction: each row's amax ends on
 * kRowLanes neighbouring lanes of its kTpr. */
constexpr int kRowLanes = kTpr / kPasses;
static_assert(kRowLanes == 2, "16 lanes and 8 rows (16-bit x), 32 and 16 (fp32)");

/* The scale of row tile_row(r0, g) of the chunk, g = (lane % kTpr) / kRowLanes, from the thread's
 * kPasses row amaxes merged over the row's kTpr lanes (an aligned warp group): at each halving
 * step a lane keeps half of its rows and trades the other half with its partner, so kPasses - 1
 * shuffles (then one more) take the place of kPasses log2(kTpr). The first lane of each row
 * writes that row's scale_inv. Row i's scale is then on lane base + i kRowLanes. 2D: the tile's
 * scale (thread 0 writes its scale_inv). ramax is consumed. */
__device__ __forceinline__ float chunk_row_scale(const qf_q_params &p, const TileSmem &sm,
                                                 long long m0, long long k0, int r0,
                                                 float (&ramax)[kPasses]) {
    if (kBlock2d) {
        if (threadIdx.x == 0)
            store_scale(p.scale_row, p.M, p.K, m0, k0, sm.colscale[0]);
        return sm.colscale[0];
    }
    const int lane = (threadIdx.x & 31) % kTpr;
#pragma unroll
    for (int o = kTpr / 2, n = kPasses; o > 0; o >>= 1, n = n > 1 ? n / 2 : 1) {
        if (n > 1)
            amax_trade_half(ramax, n, o, (lane & o) != 0);
        else
            ramax[0] = amax_merge_fast(ramax[0], __shfl_xor_sync(0xffffffffu, ramax[0], o));
    }
    const float mine = block_scale(p, ramax[0]);
    const long long m = m0 + tile_row(r0, lane / kRowLanes);
    if (lane % kRowLanes == 0 && m < p.M)
        store_scale(p.scale_row, p.M, p.K, m, k0, mine);
    return mine;
}

/* One 128x128 chunk from one read of its x (staged or global), the thread's normalized values
 * held in registers: pass A the row and column amaxes and the scales; pass B the rowwise bytes,
 * stored per row, and the columnwise bytes,
 * packed per column (a thread's kPasses consecutive rows are kPasses consecutive bytes of a row
 * of the transpose [K, M]: one 8-byte, fp32 x 16-byte, store where the chunk is whole and those
 * rows aligned for it, byte by byte otherwise). */
__device__ __forceinline__ void chunk_quantize(const qf_q_params &p, TileSmem &sm,
                                               const ChunkSrc &src, int r0, int c, bool rows) {
    const long long m0 = src.m0, k0 = src.k0;
    float g[kEpv], b[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++) {
        const long long k = k0 + c + j;
        g[j] = kNorm != QF_NORM_NONE && k < p.K
                   ? load_gamma<kGammaDtype, kZeroCenteredGamma>(p.gamma, k) : 1.0f;
        b[j] = kNorm == QF_NORM_LAYERNORM && k < p.K ? load_elem<kGammaDtype>(p.beta, k) : 0.0f;
    }

    /* Pass A: amaxes. */
    float y[kPasses][kEpv], ramax[kPasses], camax[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        camax[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPasses; i++) {
        chunk_y(p, sm, src, tile_row(r0, i), c, g, b, y[i]);
        ramax[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            ramax[i] = amax_merge_fast(ramax[i], y[i][j]);
            camax[j] = amax_merge_fast(camax[j], y[i][j]);
        }
    }
    if (kColumnwise || kBlock2d)
        chunk_col_scales(p, sm, m0, k0, r0, c, camax);
    const float mine = kRowwise && rows ? chunk_row_scale(p, sm, m0, k0, r0, ramax) : 1.0f;

    /* Pass B: bytes. */
    float sc[kEpv];
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        sc[j] = kColumnwise ? sm.colscale[kBlock2d ? 0 : c + j] : 1.0f;
    unsigned cw[kEpv][kPasses / 4];
    const long long left = p.K - (k0 + c);
    const int n = left <= 0 ? 0 : left < kEpv ? static_cast<int>(left) : kEpv;
    const bool aligned = (p.K & 3) == 0;
    const int base = (threadIdx.x & 31) & ~(kTpr - 1);
#pragma unroll
    for (int i = 0; i < kPasses; i += 2) {
        const float(&y0)[kEpv] = y[i];
        const float(&y1)[kEpv] = y[i + 1];
        if (kRowwise && rows) {
            const float s0 =
                kBlock2d ? mine : __shfl_sync(0xffffffffu, mine, base + i * kRowLanes);
            const float s1 =
                kBlock2d ? mine : __shfl_sync(0xffffffffu, mine, base + (i + 1) * kRowLanes);
            const long long m = m0 + tile_row(r0, i);
            float s[kEpv];
            unsigned w[kEpv / 4];
#pragma unroll
            for (int j = 0; j < kEpv; j++)
                s[j] = s0;
            quant_pack<kEpv>(y0, s, w);
            if (m < p.M && n > 0)
                store_bytes(p.out_row + m * p.K + k0 + c, w, n, aligned);
#pragma unroll
            for (int j = 0; j < kEpv; j++)
                s[j] = s1;
            quant_pack<kEpv>(y1, s, w);
            if (m + 1 < p.M && n > 0)
                store_bytes(p.out_row + (m + 1) * p.K + k0 + c, w, n, aligned);
        }
        if (kColumnwise) {
#pragma unroll
            for (int j = 0; j < kEpv; j++) {
                const unsigned h = to_fp8x2<kOutDtype>(y0[j] * sc[j], y1[j] * sc[j]);
                if (i % 4 == 0)
                    cw[j][i / 4] = h;
                else
                    cw[j][i / 4] |= h << 16;
            }
        }
    }
    if (kColumnwise) {
        const long long mr = m0 + tile_row(r0, 0);
        const bool wide = src.full && p.M % kPasses == 0 &&
                          (reinterpret_cast<unsigned long long>(p.out_col) % kPasses) == 0;
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            const long long k = k0 + c + j;
            unsigned char *dst = p.out_col + k * p.M + mr;
            if (wide) {
                if constexpr (kPasses == 8)
                    *reinterpret_cast<uint2 *>(dst) = make_uint2(cw[j][0], cw[j][1]);
                else
                    *reinterpret_cast<uint4 *>(dst) =
                        make_uint4(cw[j][0], cw[j][1], cw[j][2], cw[j][3]);
            } else if (k < p.K) {
#pragma unroll
                for (int i = 0; i < kPasses; i++)
                    if (mr + i < p.M)
                        dst[i] = static_cast<unsigned char>(cw[j][i / 4] >> (8 * (i % 4)));
            }
        }
    }
}

/* ---------------------------------------------------------------- columnwise entry */

/* The `_cols` entry: the columnwise copy from the statistics a rows entry wrote (p.pass 1), for
 * 16-bit x with M a multiple of 128 and K of 64, x, gamma, beta and out_col 16-byte aligned (the
 * runtime checks these). Blocks walk tiles of 128 rows x 64 columns from the last (what the rows
 * entry read last is still in L2). Thread (rg, cv) = (tid / 8, tid % 8) holds rows 4 rg .. 4 rg + 3
 * at columns 8 cv .. 8 cv + 7: one 16-byte load per row, the four issued before any is used.
 * Each 128x1 block's amax is merged over the thread's rows, over the warp's four lanes that share
 * its columns (each trade keeps half of the columns: 6 shuffles), then over the warps in shared
 * memory. A column's 128 bytes are gathered in shared memory (16-byte pieces swizzled by column
 * group, so that a warp's 4-byte stores hit distinct banks) and leave as 16-byte stores of the
 * transpose [K, M]. */
constexpr bool kColsEntry = kStage && !kBlock2d && kColumnwise && kNorm != QF_NORM_NONE &&
                            !kHasPrologue;
constexpr int kColW = 64;                              /* tile columns */
constexpr int kColVecs = kColW / kEpv;                 /* 16-byte vectors per tile row: 8 */
constexpr int kColRows = kTileM * kColVecs / kThreads; /* rows per thread: 4 */
static_assert(!kColsEntry || (kColVecs == 8 && kColRows == 4), "16-bit x: 8 vectors, 4 rows");

struct ColsSmem {
    float colmax[kWarps][kColW];
    float colscale[kColW];
    __align__(16) unsigned char t[kColW][kTileM]; /* [column][row] bytes, pieces swizzled */
};

/* Byte offset in a row of ColsSmem::t of the 4 bytes of rows 4 rg .. 4 rg + 3 of a column in
 * group cv (its 16-byte piece rg / 4 swizzled by cv). */
__device__ __forceinline__ int cols_t_offset(int rg, int cv) {
    return (((rg / 4) ^ cv) * 16) + (rg % 4) * 4;
}

__device__ void cols_body(const qf_q_params &p) {
    if constexpr (kColsEntry) {
        __shared__ ColsSmem sm;
        const int cv = threadIdx.x % kColVecs, rg = threadIdx.x / kColVecs;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const long long cols = p.K / kColW, tiles = (p.M / kTileM) * cols;
        /* the rows entry pads these only where it writes the rowwise copy (pad_all); a second
         * padding writes the same bytes */
        if (blockIdx.x == 0)
            pad_scales(p.scale_col, p.K, p.M);
        for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
            const long long tt = tiles - 1 - t;
            const long long m0 = tt / cols * kTileM, k0 = tt % cols * kColW;
            const long long m = m0 + rg * kColRows, k = k0 + cv * kEpv;
            uint4 raw[kColRows];
#pragma unroll
            for (int i = 0; i < kColRows; i++)
                raw[i] = ldg_evict_last(reinterpret_cast<const uint4 *>(
                    static_cast<const unsigned char *>(p.x) + ((m + i) * p.K + k) * kInSize));
            float g[kEpv], b[kEpv];
            load_gamma_vec<kGammaDtype, kZeroCenteredGamma, kEpv>(p.gamma, k, g);
            if (kNorm == QF_NORM_LAYERNORM)
                load_n<kGammaDtype, kEpv>(p.beta, k, b);
            else
#pragma unroll
                for (int j = 0; j < kEpv; j++)
                    b[j] = 0.0f;
            float y[kColRows][kEpv], camax[kEpv];
#pragma unroll
            for (int j = 0; j < kEpv; j++)
                camax[j] = 0.0f;
#pragma unroll
            for (int i = 0; i < kColRows; i++) {
                const float mu = kNorm == QF_NORM_LAYERNORM ? __ldg(p.mu + m + i) : 0.0f;
                const float rs = __ldg(p.rsigma + m + i);
                float xv[kEpv];
                unpack16<kInDtype, kEpv>(raw[i], xv);
#pragma unroll
                for (int j = 0; j < kEpv; j++) {
                    y[i][j] = normalize<kNorm>(xv[j], mu, rs, g[j], b[j]);
                    camax[j] = amax_merge_fast(camax[j], y[i][j]);
                }
            }
            /* lanes l, l ^ 8, l ^ 16, l ^ 24 share the columns: two trades */
            const bool h8 = (lane & 8) != 0, h16 = (lane & 16) != 0;
            amax_trade_half(camax, kEpv, 8, h8);
            amax_trade_half(camax, kEpv / 2, 16, h16);
#pragma unroll
            for (int c = 0; c < kEpv / 4; c++)
                sm.colmax[warp][cv * kEpv + (h8 ? kEpv / 2 : 0) + (h16 ? kEpv / 4 : 0) + c] =
                    camax[c];
            __syncthreads();
            if (threadIdx.x < kColW) {
                float a = sm.colmax[0][threadIdx.x];
#pragma unroll
                for (int w = 1; w < kWarps; w++)
                    a = amax_merge_fast(a, sm.colmax[w][threadIdx.x]);
                const float scale = block_scale(p, a);
                sm.colscale[threadIdx.x] = scale;
                store_scale(p.scale_col, p.K, p.M, k0 + threadIdx.x, m0, scale);
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < kEpv; j++) {
                const float sc = sm.colscale[cv * kEpv + j];
                const unsigned lo = to_fp8x2<kOutDtype>(y[0][j] * sc, y[1][j] * sc);
                const unsigned hi = to_fp8x2<kOutDtype>(y[2][j] * sc, y[3][j] * sc);
                *reinterpret_cast<unsigned *>(&sm.t[cv * kEpv + j][cols_t_offset(rg, cv)]) =
                    lo | (hi << 16);
            }
            __syncthreads();
#pragma unroll
            for (int e = threadIdx.x; e < kColW * kTileM / 16; e += kThreads) {
                const int col = e / (kTileM / 16), q = e % (kTileM / 16);
                *reinterpret_cast<uint4 *>(p.out_col + (k0 + col) * p.M + m0 + q * 16) =
                    *reinterpret_cast<const uint4 *>(&sm.t[col][(q ^ (col / kEpv)) * 16]);
            }
        }
    }
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads, 2) __KERNEL_NAME__(const qf_q_params p) {
    __shared__ TileSmem sm;
    const long long m0 = static_cast<long long>(blockIdx.x) * kTileM;
    const int r0 = threadIdx.x / kTpr, c = (threadIdx.x % kTpr) * kEpv;
    const bool vec = !kHasPrologue && p.K % kEpv == 0 &&
                     (reinterpret_cast<unsigned long long>(p.x) & 15ull) == 0;
    const bool rows_whole = vec && m0 + kTileM <= p.M;
    const long long k_step = static_cast<long long>(gridDim.y) * kBlk;
    const long long k_first = static_cast<long long>(blockIdx.y) * kBlk;
    /* chunk t of this block (columns k_first + t k_step ..) is staged when it is whole, in a
     * whole strip of 16-bit, 16-byte aligned x without a prologue */
    auto staged = [&](long long k) { return kStage && rows_whole && k + kBlk <= p.K; };
    if (staged(k_first)) /* in flight during the statistics */
        chunk_stage(p, stage_buf(0), m0, k_first);
    if (staged(k_first + k_step))
        chunk_stage(p, stage_buf(1), m0, k_first + k_step);
    pad_all(p);

    /* Phase 1: row statistics: computed, or (p.pass 1, after a rows entry) read; then only the
     * columnwise copy is written. */
    const bool stats_given = kNorm != QF_NORM_NONE && p.pass == 1;
    if (stats_given) {
        if (threadIdx.x < kTileM && m0 + threadIdx.x < p.M) {
            if (kNorm == QF_NORM_LAYERNORM)
                sm.mu[threadIdx.x] = p.mu[m0 + threadIdx.x];
            sm.rsigma[threadIdx.x] = p.rsigma[m0 + threadIdx.x];
        }
        __syncthreads();
    } else {
        tile_stats<kNorm, kInDtype, kTileM, kWarps>(p, m0, sm.mu, sm.rsigma);
    }

    /* Phase 2: the 128x128 chunks of the strip. */
    long long t = 0;
    for (long long k0 = k_first; k0 < p.K; k0 += k_step, t++) {
        const bool full = rows_whole && k0 + kBlk <= p.K;
        unsigned char *buf = staged(k0) ? stage_buf(t) : nullptr;
        if (buf) {
            if (staged(k0 + k_step))
                cp_async_wait<1>(); /* this chunk's copy; the next one's may still run */
            else
                cp_async_wait<0>();
            __syncthreads();
        }
        chunk_quantize(p, sm, ChunkSrc{buf, m0, k0, full, vec}, r0, c, !stats_given);
        if (staged(k0 + 2 * k_step)) {
            __syncthreads(); /* every thread is done with buf */
            chunk_stage(p, stage_buf(t), m0, k0 + 2 * k_step);
        }
    }
}

/* The optional entry points (qf_dev_module.cuh); the registry lists them because the template
 * invokes their macros here. */
QF_ROWS_ENTRIES(__KERNEL_NAME__, qf_q_params, (kThreads, 6), (kThreads, 4),
                (kThreads, kRows4Blocks), (kThreads))
/* `_cols` at 4 blocks of 256 threads per SM (64 registers): left to itself, ptxas on the H200
 * gave it 74 registers, 3 blocks. */
QF_COLS_ENTRY_MIN(__KERNEL_NAME__, kThreads, 4, qf_q_params)
