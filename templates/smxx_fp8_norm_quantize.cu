/* smxx_fp8_norm_quantize.cu: fused LayerNorm/RMSNorm (or none) + per-tensor FP8 quantization.
 *
 * Numerics: numerics 2.1 (q = rn_sat(fl(y * scale)), amax of |y| before scaling) and numerics 3
 * (y = fmaf((x - mu) * rsigma, g, b) or (x * rsigma) * g, statistics in fp32). The C reference is
 * qf_norm_quantize_fp8_ref in runtime/ref/ref.c; given this kernel's mu/rsigma the bytes are
 * identical.
 *
 * The entry points share the numerics:
 * - `<name>` (tiled; any K, any alignment, rowwise and/or columnwise): described below.
 * - `<name>_rows{1,2,4,8}` (K * sizeof(x) a multiple of 16, 16-byte aligned pointers): each
 *   block loops over rows; a row is held in registers (up to IT 16-byte vectors per thread), so x
 *   is read from memory exactly once, with 16-byte loads, and the statistics are an exact
 *   two-pass over registers. It writes mu/rsigma, the amax and, when asked, the rowwise copy. The
 *   runtime picks the smallest IT that covers K. With a norm and up to 4 vectors per thread
 *   (RMSNorm: 2) the rows go through rows_walk (qf_dev_norm.cuh), as in the block quantizers:
 *   the next row's vectors are loaded while this row's statistics are reduced.
 * - `<name>_cols` (M and K multiples of 64): 64x64 tiles, 16-byte loads of x, normalize +
 *   quantize, transpose in shared memory, 16-byte stores of the [K, M] copy. With a norm it
 *   runs after a rows entry on the same stream and takes that entry's mu/rsigma and amax (the
 *   pair reads x twice, but every access is a full vector). Without one it runs alone and also
 *   writes the rowwise copy and merges the amax: both copies from one read of x.
 * - `<name>_amax` (current scaling without a norm; whole 16-byte vectors): the amax pass
 *   alone, streaming x or the prologue's input (amax_body, below).
 *
 * Tiled path: one block owns TILE_M rows. Phase 1: each warp computes mean and variance of its
 * rows in two passes over x (exact two-pass variance, no cancellation). Phase 2: the block walks
 * the row tile in 32x32 sub-tiles; each thread normalizes and quantizes 4 consecutive elements,
 * stores the rowwise bytes, and parks them in shared memory so that the columnwise (transposed [K,
 * M]) copy is written in the same pass with coalesced rows of the transpose.
 *
 * Current scaling (fp8_current, numerics 2.2; the C reference is qf_norm_quantize_fp8_current_ref
 * in runtime/ref/ref_fp8_current.c): the scale depends on the whole tensor's amax, so the runtime
 * launches the same entry twice, p.pass 0 then 1. Pass 0 computes and writes mu/rsigma and
 * max-merges the amax of y, storing nothing else; pass 1 takes mu/rsigma from memory (the same
 * values for every entry, so the amax and the cast see one y), the scale from the finished amax,
 * writes the copies and scale_inv. x is read once per pass and never written back in bf16.
 *
 * Compile-time choices: the placeholders below (#defined by the prelude qfuse-gen writes) and
 * -DQF_OUTPUTS / -DQF_GAMMA_DTYPE (passed by the runtime; defaults in qf_dev_module.cuh). K and M
 * are run-time values: a new M or K never recompiles. */
#include "qf_dev_convert.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_norm.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_dev_scale.cuh"
#include "qf_formats.h"

namespace {

constexpr bool kCurrent = __FAMILY__ == QF_FAMILY_FP8_CURRENT;
constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kOutDtype = __OUT_DTYPE__;
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kWarps = kThreads / 32;
constexpr int kSubK = 32;                  /* columns per sub-tile */
constexpr int kVec = 4;                    /* elements per thread per sub-tile */
constexpr bool kRowwise = (QF_OUTPUTS & QF_OUT_ROWWISE) != 0;
constexpr bool kColumnwise = (QF_OUTPUTS & QF_OUT_COLUMNWISE) != 0;
constexpr int kInSize = kElemSize<kInDtype>;
constexpr int kEpv = 16 / kInSize; /* x elements per 16-byte vector: 8 (bf16/fp16) or 4 (fp32) */

static_assert(!kHasPrologue || kNorm == QF_NORM_NONE, "an activation prologue has no norm");
static_assert(kTileM == 32 && kThreads == 256, "sub-tile mapping assumes 32 rows x 256 threads");
static_assert(kTileM * kSubK == kThreads * kVec, "each thread owns kVec elements of a sub-tile");

/* The pass that computes statistics and the amax only (current scaling's first launch). */
__device__ __forceinline__ bool amax_pass(const qf_q_params &p) {
    return kCurrent && p.pass == 0;
}

/* The pass that casts with a finished amax (current scaling's second launch): it takes mu and
 * rsigma from memory instead of computing them. */
__device__ __forceinline__ bool cast_pass(const qf_q_params &p) {
    return kCurrent && p.pass != 0;
}

/* The quantization scale: the delayed one from memory, or the current one from the amax of
 * pass 0 (numerics 2.2): a = max(amax, amax_epsilon), where a NaN amax stays NaN; 1 for a zero or
 * non-finite a; fp8_max / a correctly rounded, FLT_MAX for an infinite quotient; the mantissa
 * cleared under power_2_scales. */
__device__ __forceinline__ float scale_of(const qf_q_params &p) {
    if (!kCurrent)
        return *p.scale;
    const float fp8_max = kOutDtype == QF_DTYPE_E4M3 ? QF_E4M3_MAX : QF_E5M2_MAX;
    return fp8_scale_from_amax(*p.amax, p.amax_epsilon, p.power_2_scales != 0, fp8_max,
                               3.40282346638528859812e+38f /* FLT_MAX */);
}

/* amax: warp, block, then one atomic per block; block 0 also writes scale_inv. Non-negative
 * floats order as their bits, and a NaN (positive after fabsf) compares above +inf. Current
 * scaling merges in pass 0 only (pass 1's amax is the same) and writes scale_inv in pass 1. */
__device__ __forceinline__ void block_amax_commit(const qf_q_params &p, float amax,
                                                  float *s_amax, float scale) {
    amax = warp_amax(amax);
    if ((threadIdx.x & 31) == 0)
        s_amax[threadIdx.x >> 5] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
        float a = s_amax[0];
        for (int w = 1; w < kWarps; w++)
            a = amax_merge(a, s_amax[w]);
        if (!cast_pass(p))
            atomicMax(reinterpret_cast<int *>(p.amax), __float_as_int(a));
        if (blockIdx.x == 0 && !amax_pass(p))
            *p.scale_inv = 1.0f / scale;
    }
}

/* ---------------------------------------------------------------- rows path */

/* Stores kEpv FP8 bytes (8 or 4) packed in lo/hi with one aligned store. */
__device__ __forceinline__ void store_vec(unsigned char *p, unsigned lo, unsigned hi) {
    if (kEpv == 8)
        *reinterpret_cast<uint2 *>(p) = make_uint2(lo, hi);
    else
        *reinterpret_cast<unsigned *>(p) = lo;
}

/* Normalizes and quantizes the thread's register vector it (at column k of row m) of a rows
 * entry of IT vectors per thread and stores its kEpv bytes. */
template <int IT>
__device__ __forceinline__ float rows_emit(const qf_q_params &p, const float (&v)[kEpv], int it,
                                          long long m, long long k, float mu, float rs,
                                          float scale, float amax) {
    float y[kEpv], g[kEpv], b[kEpv];
    rows_params<IT, kNorm, kGammaDtype, kZeroCenteredGamma, kEpv, kThreads>(p, it, k, g, b);
    amax = normalize_vec<kNorm, kEpv>(v, mu, rs, g, b, y, amax);
    unsigned w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < kEpv; j += 4) {
        const unsigned lo = to_fp8x2<kOutDtype>(y[j] * scale, y[j + 1] * scale);
        const unsigned hi = to_fp8x2<kOutDtype>(y[j + 2] * scale, y[j + 3] * scale);
        w[j / 4] = lo | (hi << 16);
    }
    if (kRowwise && !amax_pass(p))
        store_vec(p.out_row + m * p.K + k, w[0], w[1]);
    return amax;
}

template <int IT>
__device__ void rows_body(const qf_q_params &p) {
    __shared__ float s_red[2][kWarps];
    __shared__ float s_amax[kWarps];
    const int tid = threadIdx.x;
    const long long K = p.K;
    const float scale = amax_pass(p) ? 1.0f : scale_of(p);
    float amax = 0.0f;
    constexpr int kBv = IT * kThreads; /* one span per chunk: vector it * kThreads + tid */
    /* RMSNorm at 4 vectors per thread spilled in rows_walk at its 4 blocks per SM (0.93x) */
    constexpr int kWalkIt = kNorm == QF_NORM_LAYERNORM ? 4 : 2;
    if (kNorm != QF_NORM_NONE && IT <= kWalkIt && !cast_pass(p)) {
        /* the statistics from registers, the next row's vectors loaded ahead (rows_walk) */
        /* x - mu kept (rows_walk's KEEP) for 16-bit x: fp8_delayed's LayerNorm rowwise on bf16
         * x 1.02-1.07x (on fp16 x the code is the same either way); not at 4 vectors under
         * current scaling, where it spilled (0.99x) */
        rows_walk<IT, kInDtype, kGammaDtype, kZeroCenteredGamma, kNorm, kEpv, kThreads, kWarps,
                  kBv, true, kInSize == 2 && (IT <= 2 || !kCurrent)>(
            p, [&](float (&v)[IT][kEpv], long long m, const RowsLane &ln, float mu, float rs) {
#pragma unroll
                for (int it = 0; it < IT; it++)
                    if (ln.valid >> it & 1u)
                        amax = rows_emit<IT>(p, v[it], it, m, rows_col<IT, kEpv, kBv>(ln, it), mu,
                                             rs, scale, amax);
            });
    } else {
        /* no norm, current scaling's cast with pass 0's mu and rsigma, or more than kWalkIt
         * vectors per thread (at 8, rows_walk loads nothing ahead; its LayerNorm at K = 12288
         * and 16384 measured 0.91-0.94x of this loop) */
        int red = 0;
        constexpr long long kChunk = static_cast<long long>(IT) * kThreads * kEpv;
        if (kNorm != QF_NORM_NONE) { /* one chunk per row: the same columns in every row */
            const RowsLane ln = rows_lane<IT, kEpv, kThreads, kBv>(K, 0, tid);
            rows_params_store<IT, kNorm, kGammaDtype, kZeroCenteredGamma, kEpv, kThreads, kBv>(
                p, ln);
        }
        for (long long m = blockIdx.x; m < p.M; m += gridDim.x) {
            /* the next row into L2 where this loop reduces a row's statistics at 8 vectors per
             * thread under delayed scaling (with a norm there is one chunk per row). RMSNorm at
             * 4 vectors measured 0.99x with it, and current scaling's statistics pass, whose cast
             * pass reads x again from L2, 0.98x at 2048 x 16384 (docs/bench.md, "The next row
             * into L2") */
            if (IT == 8 && kNorm != QF_NORM_NONE && !kCurrent)
                rows_prefetch<kInDtype>(p, m + gridDim.x);
            for (long long k0 = 0; k0 < K; k0 += kChunk) {
                const RowsLane ln = rows_lane<IT, kEpv, kThreads, kBv>(K, k0, tid);
                float v[IT][kEpv];
                rows_load<IT, kInDtype, kEpv, kBv>(p, m, ln, v);
                float mu = 0.0f, rs = 1.0f;
                if (cast_pass(p)) {
                    stats_of_row<kNorm>(p, m, mu, rs);
                } else if (kNorm != QF_NORM_NONE) {
                    rows_stats<IT, kNorm, kEpv, kWarps>(v, K, p.eps, s_red, red, mu, rs,
                                                        ln.valid);
                    if (tid == 0) {
                        if (kNorm == QF_NORM_LAYERNORM)
                            p.mu[m] = mu;
                        p.rsigma[m] = rs;
                    }
                }
#pragma unroll
                for (int it = 0; it < IT; it++) {
                    const long long k = k0 + static_cast<long long>(it * kThreads + tid) * kEpv;
                    if (k < K)
                        amax = rows_emit<IT>(p, v[it], it, m, k, mu, rs, scale, amax);
                }
            }
        }
    }
    block_amax_commit(p, amax, s_amax, scale);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
__KERNEL_NAME__(const qf_q_params p) {
    __shared__ float s_mu[kTileM], s_rsigma[kTileM], s_amax[kWarps];
    __shared__ unsigned char s_t[kSubK][kTileM + 4]; /* transposed sub-tile, padded vs conflicts */
    const long long M = p.M, K = p.K;
    const long long m0 = static_cast<long long>(blockIdx.x) * kTileM;

    /* Phase 1: row statistics (current scaling's pass 1: pass 0's, from memory). */
    if (cast_pass(p)) {
        if (threadIdx.x < kTileM && m0 + threadIdx.x < M)
            stats_of_row<kNorm>(p, m0 + threadIdx.x, s_mu[threadIdx.x], s_rsigma[threadIdx.x]);
        __syncthreads();
    } else {
        tile_stats<kNorm, kInDtype, kTileM, kWarps>(p, m0, s_mu, s_rsigma);
    }

    /* Phase 2: normalize + quantize sub-tiles of 32 rows x 32 columns. */
    const float scale = amax_pass(p) ? 1.0f : scale_of(p);
    const int r = threadIdx.x / (kSubK / kVec);          /* row in tile, 0..31 */
    const int c = (threadIdx.x % (kSubK / kVec)) * kVec; /* first column in sub-tile */
    const long long m = m0 + r;
    const float mu = (kNorm == QF_NORM_LAYERNORM && m < M) ? s_mu[r] : 0.0f;
    const float rs = (kNorm != QF_NORM_NONE && m < M) ? s_rsigma[r] : 1.0f;
    const bool row_aligned = (K & 3) == 0;
    const bool col_aligned = (M & 3) == 0;
    /* whole groups of 4 load as one vector (8 or 16 bytes per array) when K % 4 == 0, the arrays
     * are aligned to a group and a group lies in one half of a SwiGLU dh */
    const unsigned long long align = reinterpret_cast<unsigned long long>(p.x) |
                                     (kPrologueGrad ? reinterpret_cast<unsigned long long>(p.da)
                                                    : 0ull);
    const bool vec4 = row_aligned && (align & (kVec * kInSize - 1)) == 0 &&
                      (!kPrologueGrad || (align & 15ull) == 0) &&
                      (kPrologue != QF_PROLOGUE_DACT(QF_ACT_SWIGLU) || ((K / 2) & 3) == 0);
    float amax = 0.0f;

    for (long long k0 = 0; k0 < K; k0 += kSubK) {
        unsigned packed = 0;
        const int nk = (K - (k0 + c)) < kVec ? static_cast<int>(K - (k0 + c)) : kVec;
        if (m < M && nk > 0) {
            float y[kVec], xs[kVec];
            if (vec4 && nk == kVec)
                src_n<kInDtype, kVec>(p, m, k0 + c, xs);
#pragma unroll
            for (int i = 0; i < kVec; i++) {
                y[i] = 0.0f;
                if (i < nk) {
                    const long long k = k0 + c + i;
                    float xv = vec4 && nk == kVec ? xs[i] : src_elem<kInDtype>(p, m, k);
                    float g = kNorm != QF_NORM_NONE
                                  ? load_gamma<kGammaDtype, kZeroCenteredGamma>(p.gamma, k)
                                  : 1.0f;
                    float b = kNorm == QF_NORM_LAYERNORM ? load_elem<kGammaDtype>(p.beta, k) : 0.0f;
                    y[i] = normalize<kNorm>(xv, mu, rs, g, b);
                    amax = amax_merge(amax, y[i]);
                }
            }
            const unsigned lo = to_fp8x2<kOutDtype>(y[0] * scale, y[1] * scale);
            const unsigned hi = to_fp8x2<kOutDtype>(y[2] * scale, y[3] * scale);
            packed = lo | (hi << 16);
            if (kRowwise && !amax_pass(p))
                store4(p.out_row + m * K + k0 + c, packed, nk, row_aligned);
        }
        if (kColumnwise && !amax_pass(p)) { /* p.pass is uniform: the barriers stay */
#pragma unroll
            for (int i = 0; i < kVec; i++)
                s_t[c + i][r] = static_cast<unsigned char>(packed >> (8 * i));
            __syncthreads();
            /* Thread (cc, r4) writes 4 rows of column k0 + cc of the transpose [K, M]. */
            const int cc = threadIdx.x / (kTileM / kVec), r4 = (threadIdx.x % (kTileM / kVec)) * kVec;
            const long long kk = k0 + cc;
            const long long rows_left = M - (m0 + r4);
            if (kk < K && rows_left > 0) {
                unsigned v = 0;
#pragma unroll
                for (int i = 0; i < kVec; i++)
                    v |= static_cast<unsigned>(s_t[cc][r4 + i]) << (8 * i);
                const int n = rows_left < kVec ? static_cast<int>(rows_left) : kVec;
                store4(p.out_col + kk * M + m0 + r4, v, n, col_aligned);
            }
            __syncthreads();
        }
    }

    block_amax_commit(p, amax, s_amax, scale);
}

/* ---------------------------------------------------------------- columnwise entry */

constexpr int kColTile = QF_COLS_TILE;
constexpr int kColChunks = kColTile / kEpv;                /* threads per tile row */
constexpr int kColPasses = kColTile * kColChunks / kThreads; /* rows per thread: 2 (16-bit x)
                                                             * or 4 (fp32 x), adjacent */
static_assert(kColTile * kColTile == kThreads * 16, "one 16-byte store per thread");

/* Where byte m of row k of the transposed tile sits in shared memory: each row is rotated by 16
 * bytes per group of 8 columns, so that the 8 column chunks a warp writes at once fall on four
 * banks, not one (an 8-way conflict becomes 2-way). */
__device__ __forceinline__ int cols_slot(int k, int m) {
    return (m + 16 * ((k >> 3) & 3)) % kColTile;
}

/* Without a norm there are no statistics to compute first, so the `_cols` entry runs alone and
 * writes both copies from its one read of x (through the activation prologue, if any): each
 * thread's vectors are rows of the tile, stored as 8 rowwise bytes each, and the tile's amax is
 * merged as the other entries merge theirs (under current scaling it also makes the amax pass,
 * writing nothing). So it does with a norm in current scaling's cast pass, whose statistics pass
 * 0 wrote. With a norm under delayed scaling it follows a rows entry, which wrote the statistics,
 * the amax and the rowwise copy. */
__device__ __forceinline__ bool cols_both(const qf_q_params &p) {
    return kNorm == QF_NORM_NONE || cast_pass(p);
}

/* dbias's partials (no norm, p.dbias_part set; cols_dbias): the entry walks its tiles in items of
 * QF_DBIAS_GROUP tiles down one tile column (ColsWalk). Each thread adds its rows of each tile to
 * its columns' sums in registers (cols_emit); at the item's end the lanes of a warp (4 rows each)
 * add theirs by shuffles, then one thread per column the 8 warps in order, into
 * dbias_part[group, columns] (cols_item_end). A fixed order: deterministic. The shuffles, a
 * barrier and a store of partials per tile took about 120 instructions a thread per SwiGLU dh
 * pair (docs/bench.md, "dbias's partials per group of tiles"). */
__device__ __forceinline__ bool cols_dbias(const qf_q_params &p) {
    return kNorm == QF_NORM_NONE && p.dbias_part != nullptr;
}

/* The copies of the 64x64 tile at (m0, k0) from this thread's normalized vectors y (rows r0 ..
 * r0 + kColPasses - 1, columns c ..): the transposed copy and, where cols_both, the rowwise copy
 * (and under cols_dbias the thread's column sums added to acc); returns amax merged with the
 * tile's |y|. Each cvt takes two rows of one column, so its two bytes are that column's in the
 * transposed tile (one 2-byte store, or with 4 rows two cvts and one 4-byte store); the rowwise
 * words are the even and the odd bytes of those pairs (byte permutes). */
__device__ __forceinline__ float cols_emit(const qf_q_params &p, long long m0, long long k0,
                                           int c, int r0, const float (&y)[kColPasses][kEpv],
                                           float scale, float amax, float (&acc)[kEpv],
                                           unsigned char (&s_t)[kColTile][kColTile + 16]) {
    const long long M = p.M;
    if (amax_pass(p)) { /* current scaling's first pass (alone, without a norm): the amax only */
#pragma unroll
        for (int i = 0; i < kColPasses; i++)
#pragma unroll
            for (int j = 0; j < kEpv; j++)
                amax = amax_merge(amax, y[i][j]);
        return amax;
    }
    if (cols_dbias(p))
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            float s = y[0][j];
#pragma unroll
            for (int i = 1; i < kColPasses; i++)
                s += y[i][j];
            acc[j] += s;
        }
    unsigned q[kColPasses / 2][kEpv]; /* rows r0 + 2 i (low byte) and + 1 (high) of column j */
#pragma unroll
    for (int i = 0; i < kColPasses / 2; i++)
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            if (kNorm == QF_NORM_NONE && !cast_pass(p))
                amax = amax_merge(amax_merge(amax, y[2 * i][j]), y[2 * i + 1][j]);
            q[i][j] = to_fp8x2<kOutDtype>(y[2 * i][j] * scale, y[2 * i + 1][j] * scale);
        }
#pragma unroll
    for (int j = 0; j < kEpv; j++) {
        unsigned char *t = &s_t[c + j][cols_slot(c + j, r0)];
        if (kColPasses == 2)
            *reinterpret_cast<unsigned short *>(t) = static_cast<unsigned short>(q[0][j]);
        else
            *reinterpret_cast<unsigned *>(t) =
                __byte_perm(q[0][j], q[kColPasses / 2 - 1][j], 0x5410);
    }
    if (kRowwise && cols_both(p))
#pragma unroll
        for (int i = 0; i < kColPasses / 2; i++) {
            unsigned w[2][2] = {{0u, 0u}, {0u, 0u}}; /* [row][word] */
#pragma unroll
            for (int g = 0; g < kEpv / 4; g++) {
                const unsigned a = __byte_perm(q[i][4 * g], q[i][4 * g + 1], 0x5410);
                const unsigned b = __byte_perm(q[i][4 * g + 2], q[i][4 * g + 3], 0x5410);
                w[0][g] = __byte_perm(a, b, 0x6420);
                w[1][g] = __byte_perm(a, b, 0x7531);
            }
            const long long m = m0 + r0 + 2 * i;
            store_vec(p.out_row + m * p.K + k0 + c, w[0][0], w[0][1]);
            store_vec(p.out_row + (m + 1) * p.K + k0 + c, w[1][0], w[1][1]);
        }
    __syncthreads();
    const int kk = threadIdx.x / 4, part = (threadIdx.x % 4) * 16;
    *reinterpret_cast<uint4 *>(p.out_col + (k0 + kk) * M + m0 + part) =
        *reinterpret_cast<const uint4 *>(&s_t[kk][cols_slot(kk, part)]);
    __syncthreads(); /* s_t is the next tile's */
    return amax;
}

/* A SwiGLU dh prologue whose halves are whole tiles (F = K / 2 a multiple of 64): a block takes
 * the tile of dh1 and the tile of dh2 at the same columns of da and h1 together, so that da, h1
 * and h2 are read once (load_swiglu_grad_pair), and the work items are the [M/64, F/64] pairs. */
constexpr bool kSwigluGrad = kPrologue == QF_PROLOGUE_DACT(QF_ACT_SWIGLU);
__device__ __forceinline__ bool cols_paired(const qf_q_params &p) {
    return kSwigluGrad && (p.K / 2) % kColTile == 0;
}

/* The `_cols` entry's walk. Its tiles (cols_paired: pairs) [tiles_m, tiles_k] are taken in
 * items of G tiles down one tile column: G = QF_DBIAS_GROUP under cols_dbias, else 1 (the tiles
 * one by one, row-major). Item i is tile column i % tiles_k of tile rows G (i / tiles_k) on (the
 * last group may be shorter). Block b takes items b, b + gridDim.x, ..., from the last where
 * reverse, each item's tiles from its first row. */
struct ColsWalk {
    long long tiles_m, tiles_k, items;
    long long dg, dc; /* gridDim.x items on: dg groups and dc tile columns */
    int G;
    bool reverse;
};

/* Where a block is in its walk: item counter t (blockIdx.x, + gridDim.x, ...), the item's group
 * g and tile column c, and tile row r of its len. */
struct ColsCursor {
    long long t, g, c;
    int r, len;
};

__device__ __forceinline__ ColsWalk cols_walk(const qf_q_params &p, bool reverse) {
    ColsWalk w;
    w.tiles_m = p.M / kColTile;
    w.tiles_k = (cols_paired(p) ? p.K / 2 : p.K) / kColTile;
    w.G = cols_dbias(p) ? QF_DBIAS_GROUP : 1;
    w.items = (w.tiles_m + w.G - 1) / w.G * w.tiles_k;
    w.dg = gridDim.x / w.tiles_k;
    w.dc = gridDim.x % w.tiles_k;
    w.reverse = reverse;
    return w;
}

__device__ __forceinline__ bool cols_more(const ColsWalk &w, const ColsCursor &cur) {
    return cur.t < w.items;
}

/* The tiles of item t's group g (after the last item: none). */
__device__ __forceinline__ int cols_len(const ColsWalk &w, long long t, long long g) {
    const long long left = w.tiles_m - g * w.G;
    return t >= w.items ? 0 : left < w.G ? static_cast<int>(left) : w.G;
}

__device__ __forceinline__ ColsCursor cols_first(const ColsWalk &w) {
    const long long t = blockIdx.x, i = w.reverse ? w.items - 1 - t : t;
    ColsCursor cur{t, i / w.tiles_k, i % w.tiles_k, 0, 0};
    cur.len = cols_len(w, t, cur.g);
    return cur;
}

/* The tile after cur's: the item's next tile row, or the block's next item's first (stepped
 * without a division). */
__device__ __forceinline__ ColsCursor cols_advance(const ColsWalk &w, ColsCursor cur) {
    if (++cur.r < cur.len)
        return cur;
    cur.r = 0;
    cur.t += gridDim.x;
    if (w.reverse) {
        cur.c -= w.dc;
        cur.g -= w.dg;
        if (cur.c < 0) {
            cur.c += w.tiles_k;
            cur.g--;
        }
    } else {
        cur.c += w.dc;
        cur.g += w.dg;
        if (cur.c >= w.tiles_k) {
            cur.c -= w.tiles_k;
            cur.g++;
        }
    }
    cur.len = cols_len(w, cur.t, cur.g);
    return cur;
}

/* cur's tile row. */
__device__ __forceinline__ long long cols_row(const ColsWalk &w, const ColsCursor &cur) {
    return cur.g * w.G + cur.r;
}

/* After cur's tile under cols_dbias, at its item's end: the block's column sums of the item
 * (each half of a pair: acc[h]) into dbias_part[cur.g, ...], acc zeroed. s_db is written before
 * the barrier and read after it; the next write is an item on, after cols_emit's barriers. */
__device__ __forceinline__ void cols_item_end(const qf_q_params &p, const ColsCursor &cur,
                                              float (&acc)[2][kEpv],
                                              float (&s_db)[kWarps][2 * kColTile]) {
    if (!cols_dbias(p) || cur.r + 1 < cur.len) /* uniform: the barrier below stays */
        return;
    const int halves = cols_paired(p) ? 2 : 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c = (threadIdx.x % kColChunks) * kEpv;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < kEpv; j++) {
            float s = acc[h][j];
            acc[h][j] = 0.0f;
            if (h >= halves)
                continue;
#pragma unroll
            for (int o = kColChunks; o < 32; o <<= 1) /* lanes of the same columns, other rows */
                s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane < kColChunks)
                s_db[warp][h * kColTile + c + j] = s;
        }
    __syncthreads();
    if (threadIdx.x < halves * kColTile) {
        float t = s_db[0][threadIdx.x];
        for (int w = 1; w < kWarps; w++)
            t += s_db[w][threadIdx.x];
        const int h = threadIdx.x / kColTile, col = threadIdx.x % kColTile;
        p.dbias_part[cur.g * p.K + h * (p.K / 2) + cur.c * kColTile + col] = t;
    }
}

/* Where this thread works in the tile at (tm, tk): cols_tile_at, its kColPasses rows adjacent from
 * r0 (the lanes of a warp take 4 rows a load, one 128-byte row each with 16-bit x). */
__device__ __forceinline__ ColsTile cols_at(long long tm, long long tk) {
    ColsTile ct = cols_tile_at<kColTile, kEpv, kColChunks>(tm, tk);
    ct.r0 *= kColPasses;
    return ct;
}

/* The thread's input vectors y of the unpaired 64x64 tile (tm, tk), through the loader ld
 * (cols_load); returns where the first lies. */
template <typename L>
__device__ __forceinline__ ColsTile cols_tile_load(L &ld, const qf_q_params &p, long long tm,
                                                   long long tk, float (&y)[kColPasses][kEpv]) {
    const ColsTile ct = cols_at(tm, tk);
    cols_load<kNorm, kInDtype, kGammaDtype, kZeroCenteredGamma, kEpv, kColPasses, 1>(
        ld, p, ct.m0, ct.k0, ct.c, ct.r0, y);
    return ct;
}

/* The thread's dh1 and dh2 vectors y and y2 of the SwiGLU dh pair (tm, tk) (cols_paired), from
 * da (fp32 when da_fp32), h1 and h2 through the loader ld, in this order per pass (the order
 * LoadAhead and LoadHeld rely on); returns where the first of dh1's lies (dh2's: F columns on). */
template <typename L>
__device__ __forceinline__ ColsTile cols_pair_load(L &ld, const qf_q_params &p, long long tm,
                                                   long long tk, int da_fp32,
                                                   float (&y)[kColPasses][kEpv],
                                                   float (&y2)[kColPasses][kEpv]) {
    const ColsTile ct = cols_at(tm, tk);
#pragma unroll
    for (int i = 0; i < kColPasses; i++)
        load_swiglu_grad_pair<kInDtype, kEpv>(ld, p.x, p.da, da_fp32, ct.m0 + ct.r0 + i, p.K,
                                              ct.k0 + ct.c, y[i], y2[i]);
    return ct;
}

/* The tile (or cols_paired's pair) at cur, its input through the loader ld, then cols_item_end;
 * returns amax merged with its |y|. */
template <typename L>
__device__ __forceinline__ float cols_work(L &ld, const qf_q_params &p, const ColsWalk &w,
                                           const ColsCursor &cur, float scale, float amax,
                                           float (&acc)[2][kEpv],
                                           unsigned char (&s_t)[kColTile][kColTile + 16],
                                           float (&s_db)[kWarps][2 * kColTile]) {
    float y[kColPasses][kEpv];
    if (cols_paired(p)) {
        float y2[kColPasses][kEpv];
        const ColsTile ct = cols_pair_load(ld, p, cols_row(w, cur), cur.c, p.da_fp32, y, y2);
        amax = cols_emit(p, ct.m0, ct.k0, ct.c, ct.r0, y, scale, amax, acc[0], s_t);
        amax = cols_emit(p, ct.m0, p.K / 2 + ct.k0, ct.c, ct.r0, y2, scale, amax, acc[1], s_t);
    } else {
        const ColsTile ct = cols_tile_load(ld, p, cols_row(w, cur), cur.c, y);
        amax = cols_emit(p, ct.m0, ct.k0, ct.c, ct.r0, y, scale, amax, acc[0], s_t);
    }
    cols_item_end(p, cur, acc, s_db);
    return amax;
}

/* Staging of the `_cols` entry's input (kColStage): each thread's 16-byte vectors of the next
 * tile go to its own slots in shared memory by cp.async (LoadFetch) while it works on this one,
 * and are read back from there (LoadStaged). Only under the forward activation prologue (a =
 * act(h), 16-bit h; its tiles are never paired): there it measured 8% faster (fp8_delayed's q(a)
 * of SwiGLU, 16384 x 14336). With a norm it measured 5-7% slower, under the dh prologue up to
 * 10% slower (current scaling) or 1% faster (delayed), with x alone 0.95x-1.07x (docs/bench.md,
 * "Staged loads in the columnwise entry"). kColSlots: h's 16-byte vectors per tile and thread (h1
 * and h2 under SwiGLU: one vector each per pass). */
constexpr bool kColStage = kInSize == 2 && kHasPrologue && !kPrologueGrad;
static_assert(kEpv * kInSize == 16, "one 16-byte piece per vector");
constexpr int kColSlots = kColPasses * (kPrologueAct == QF_ACT_SWIGLU ? 2 : 1);

/* Issues the cp.async of tile (tm, tk)'s input into this thread's slots (LoadFetch: the loaded
 * values are zeros, unused) and closes their group. */
__device__ __forceinline__ void cols_fetch(const qf_q_params &p, long long tm, long long tk,
                                           uint4 *slots) {
    if constexpr (kColStage) { /* elsewhere the vectors need not be whole 16-byte pieces */
        float y[kColPasses][kEpv];
        LoadFetch f{slots, kThreads, 0};
        cols_tile_load(f, p, tm, tk, y);
        cp_async_commit();
    }
}

/* The next work item's input in registers (kColAhead): each thread's 16-byte vectors of the
 * next pair are loaded (LoadAhead) before it works on this one and unpacked from there
 * (LoadHeld), in cols_pair_load's order. For a SwiGLU dh pair of 16-bit h and bf16 da (da, h1
 * and h2 per pass), whose entry then runs at 2 blocks per SM (128 registers): fp8_delayed's q(dh)
 * with db1 in the step 0.94 -> 0.80 ms, fp8_current's (amax pass and cast) 1.35 -> 1.30; at 3
 * blocks 1.00 and 1.30, at 4 (spilling) 1.41 and 1.49 (docs/bench.md, "The next tile pair in
 * registers"). fp32 da and unpaired tiles take the walk without it, in the same entry. */
constexpr bool kColAhead = kSwigluGrad && kInSize == 2;
constexpr int kColAheadSlots = 3 * kColPasses;

__device__ __forceinline__ bool cols_ahead(const qf_q_params &p) {
    return kColAhead && cols_paired(p) && !p.da_fp32;
}

/* The loads of the pair at cur into raw (LoadAhead; cols_ahead, so da is bf16). */
__device__ __forceinline__ void cols_pair_ahead(const qf_q_params &p, const ColsWalk &w,
                                                const ColsCursor &cur,
                                                uint4 (&raw)[kColAheadSlots]) {
    LoadAhead f{raw, 0};
    float y[kColPasses][kEpv], y2[kColPasses][kEpv]; /* zeros, unused */
    cols_pair_load(f, p, cols_row(w, cur), cur.c, 0, y, y2);
}

/* The walk of cols_ahead: the block's pairs, each worked from registers while the next one's
 * loads are in flight; returns amax merged with their |y|. */
__device__ __forceinline__ float cols_walk_ahead(const qf_q_params &p, const ColsWalk &w,
                                                 float scale, float amax, float (&acc)[2][kEpv],
                                                 unsigned char (&s_t)[kColTile][kColTile + 16],
                                                 float (&s_db)[kWarps][2 * kColTile]) {
    uint4 raw[kColAheadSlots];
    ColsCursor cur = cols_first(w);
    if (cols_more(w, cur))
        cols_pair_ahead(p, w, cur, raw);
    while (cols_more(w, cur)) {
        uint4 held[kColAheadSlots];
#pragma unroll
        for (int j = 0; j < kColAheadSlots; j++)
            held[j] = raw[j];
        const ColsCursor next = cols_advance(w, cur);
        if (cols_more(w, next))
            cols_pair_ahead(p, w, next, raw);
        LoadHeld h{held, 0};
        amax = cols_work(h, p, w, cur, scale, amax, acc, s_t, s_db);
        cur = next;
    }
    return amax;
}

/* The block's walk (ColsWalk; the runtime launches at most as many blocks as are resident at
 * once); with kColStage each tile is fetched while the one before is worked, under cols_ahead
 * each pair's loads are issued while the one before is worked. */
__device__ void cols_body(const qf_q_params &p) {
    __shared__ __align__(16) unsigned char s_t[kColTile][kColTile + 16]; /* [k][m] */
    __shared__ float s_amax[kWarps];
    __shared__ float s_db[kWarps][2 * kColTile];
    __shared__ uint4 s_stage[kColStage ? kColSlots : 1][kThreads];
    /* after the rows entry, or alone in current scaling's pass 1: a finished scale (pass 0, the
     * amax alone, uses none) */
    const float scale = amax_pass(p) ? 1.0f : scale_of(p);
    /* after a pass over the same input (the rows entry with a norm, or current scaling's amax
     * pass) the tiles from the last: what that pass read last is still in L2 */
    const ColsWalk w = cols_walk(p, kNorm != QF_NORM_NONE || cast_pass(p));
    float amax = 0.0f;
    float acc[2][kEpv]; /* cols_dbias's column sums of the item */
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            acc[h][j] = 0.0f;
    if constexpr (kColStage) {
        uint4 *slots = &s_stage[0][threadIdx.x];
        ColsCursor cur = cols_first(w);
        if (cols_more(w, cur))
            cols_fetch(p, cols_row(w, cur), cur.c, slots);
        while (cols_more(w, cur)) {
            cp_async_wait<0>();
            LoadStaged st{slots, kThreads, 0};
            /* reads the slots into registers before the next fetch overwrites them: a
             * cp.async is ordered after the thread's prior instructions (PTX ISA, asynchronous
             * operations), and its writes are visible to the thread after the wait above */
            float y[kColPasses][kEpv];
            const ColsTile ct = cols_tile_load(st, p, cols_row(w, cur), cur.c, y);
            const ColsCursor next = cols_advance(w, cur);
            if (cols_more(w, next))
                cols_fetch(p, cols_row(w, next), next.c, slots);
            amax = cols_emit(p, ct.m0, ct.k0, ct.c, ct.r0, y, scale, amax, acc[0], s_t);
            cols_item_end(p, cur, acc, s_db);
            cur = next;
        }
    } else if (cols_ahead(p)) {
        amax = cols_walk_ahead(p, w, scale, amax, acc, s_t, s_db);
    } else {
        LoadGlobal g;
        for (ColsCursor cur = cols_first(w); cols_more(w, cur); cur = cols_advance(w, cur))
            amax = cols_work(g, p, w, cur, scale, amax, acc, s_t, s_db);
    }
    if (cols_both(p)) /* p.pass is uniform: the barrier inside stays */
        block_amax_commit(p, amax, s_amax, scale);
}

/* ---------------------------------------------------------------- amax entry */

/* Current scaling's amax pass of an input without a norm (`<name>_amax`; numerics 2.2): the
 * grid streams x, or the activation prologue's output, in 16-byte vectors of its input,
 * row-major, and merges their |y| into the amax, writing nothing. A SwiGLU dh is taken as pairs
 * (dh1 and dh2 at the same columns from one load of da, h1 and h2: load_swiglu_grad_pair), every
 * other input one vector at a time (load_src_from); the values are the ones the cast pass
 * quantizes. Each thread issues the loads of kAmaxUnroll positions (LoadAhead) before it merges
 * any (LoadHeld), with no barrier before the block's amax reduction; a prologue's values are
 * merged before their rounding to x's dtype and the amax rounded once (amax_merge_y). The runtime
 * launches it where the vectors are whole (K, or F = K / 2 of a SwiGLU dh, a multiple of kEpv; x
 * and da 16-byte aligned), on one wave of blocks. fp8_current's SwiGLU dh amax of the step (16384
 * x 28672, bf16) took 334 us at 88% of DRAM peak (Nsight Compute), 437 us through the `_cols`
 * entry before (docs/bench.md, "Current scaling's amax in its own entry"); a weight's (4096 x
 * 14336) 32 us, 41 us through the rows entry before ("The amax pass without a norm in the
 * `_amax` entry"). */
constexpr bool kAmaxEntry = kCurrent && kNorm == QF_NORM_NONE;
/* 16-byte loads per position: da, h1 and h2 of a SwiGLU dh pair; da and h (non-gated dh) or h1
 * and h2 (SwiGLU's a); h */
constexpr int kAmaxSlotsPerPos =
    kSwigluGrad ? 3 : (kPrologueGrad || kPrologueAct == QF_ACT_SWIGLU ? 2 : 1);
constexpr int kAmaxUnroll = 6 / kAmaxSlotsPerPos; /* 6 loads in flight per thread */

/* A position of the amax walk: row m, vector v of the row's W. */
struct AmaxPos {
    long long m, v;
};

/* pos advanced by dm rows and dv (< W) vectors. */
__device__ __forceinline__ AmaxPos amax_step(AmaxPos pos, long long dm, long long dv,
                                             long long W) {
    pos.v += dv;
    pos.m += dm;
    if (pos.v >= W) {
        pos.v -= W;
        pos.m += 1;
    }
    return pos;
}

/* amax merged with the |y| of position pos, its input through the loader ld, before y's rounding
 * to x's dtype (amax_body rounds the amax once: max |round(y)| = round(max |y|), rounding to
 * nearest being monotonic and odd). amax_merge keeps the largest bits, so a NaN's too (as the
 * other entries' amax merge does; its rounding to x's dtype is monotonic in the bits as well).
 * Where every NaN of y comes out of arithmetic, the canonical NaN, one max.NaN per value does
 * the same (kAmaxFast: a prologue on 16-bit x; not relu's dh, which passes da's NaN through with
 * its bits, nor x itself, whose NaNs keep theirs). */
constexpr bool kAmaxFast =
    kHasPrologue && kInSize == 2 && !(kPrologueGrad && kPrologueAct == QF_ACT_RELU);

__device__ __forceinline__ float amax_merge_y(float amax, float y) {
    return kAmaxFast ? amax_merge_fast(amax, y) : amax_merge(amax, y);
}

template <typename L>
__device__ __forceinline__ float amax_pos(L &ld, const qf_q_params &p, AmaxPos pos, float amax) {
    float y[kEpv], y2[kEpv];
    if constexpr (kSwigluGrad) {
        load_swiglu_grad_pair<kInDtype, kEpv, L, false>(ld, p.x, p.da, p.da_fp32, pos.m, p.K,
                                                        pos.v * kEpv, y, y2);
    } else {
        load_src_from<kInDtype, kEpv, L, false>(ld, p.x, p.da, p.da_fp32, pos.m, p.K,
                                                pos.v * kEpv, y);
    }
#pragma unroll
    for (int j = 0; j < kEpv; j++)
        amax = kSwigluGrad ? amax_merge_y(amax_merge_y(amax, y2[j]), y[j])
                           : amax_merge_y(amax, y[j]);
    return amax;
}

/* 1 when every vector of a position is one 16-byte piece (LoadAhead holds only those): da, where
 * read, of x's width. */
__device__ __forceinline__ bool amax_whole(const qf_q_params &p) {
    return !kPrologueGrad || (p.da_fp32 != 0) == (kInSize == 4);
}

__device__ void amax_body(const qf_q_params &p) {
    if constexpr (kAmaxEntry) {
        __shared__ float s_amax[kWarps];
        float amax = 0.0f;
        const long long W = (kSwigluGrad ? p.K / 2 : p.K) / kEpv; /* vectors per row */
        const long long T = static_cast<long long>(gridDim.x) * kThreads;
        const long long dm = T / W, dv = T % W; /* the step between a thread's positions */
        const long long t = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
        AmaxPos pos{t / W, t % W};
        if (amax_whole(p)) {
            for (;;) {
                AmaxPos q[kAmaxUnroll];
                q[0] = pos;
#pragma unroll
                for (int u = 1; u < kAmaxUnroll; u++)
                    q[u] = amax_step(q[u - 1], dm, dv, W);
                if (q[kAmaxUnroll - 1].m >= p.M)
                    break;
                uint4 raw[kAmaxUnroll * kAmaxSlotsPerPos];
                LoadAhead a{raw, 0};
#pragma unroll
                for (int u = 0; u < kAmaxUnroll; u++)
                    amax_pos(a, p, q[u], 0.0f); /* loads only; the zeros it gives are unused */
                LoadHeld h{raw, 0};
#pragma unroll
                for (int u = 0; u < kAmaxUnroll; u++)
                    amax = amax_pos(h, p, q[u], amax);
                pos = amax_step(q[kAmaxUnroll - 1], dm, dv, W);
            }
        }
        LoadGlobal g;
        for (; pos.m < p.M; pos = amax_step(pos, dm, dv, W))
            amax = amax_pos(g, p, pos, amax);
        /* x's own values need no rounding (which would also make a NaN canonical) */
        block_amax_commit(p, kHasPrologue ? round_to<kInDtype>(amax) : amax, s_amax, 1.0f);
    }
}

/* The optional entry points (qf_dev_module.cuh); the registry lists them because the template
 * invokes their macros here. The rows entries at 4 blocks per SM at 2 vectors per thread (the row
 * loaded ahead by rows_walk takes 8 more registers; at 5 and 7 blocks ptxas spilled), 4 for
 * RMSNorm at 4 vectors or what LayerNorm's 64 KB of gamma and beta allow (3); at 8 vectors
 * ptxas's own choice. */
constexpr int kRows2Blocks = 4;
constexpr int kRows4Blocks = kNorm == QF_NORM_LAYERNORM ? 3 : 4;
QF_ROWS_ENTRIES(__KERNEL_NAME__, qf_q_params, (kThreads, 6), (kThreads, kRows2Blocks),
                (kThreads, kRows4Blocks), (kThreads))
/* `_cols` with an activation prologue runs at 4 blocks of 256 threads per SM (64 registers):
 * left to itself, ptxas gives the SwiGLU dh walk 66 to 107 registers, 3 or 2 blocks. The SwiGLU
 * dh entry of 16-bit h, which holds the next pair's vectors in registers (kColAhead), runs at 2
 * (128 registers), and so do its calls that take the walk without them (fp32 da, unpaired
 * tiles: not timed at 2). Without a prologue the entries take 30-56 registers, more blocks;
 * held to 4 they measured 3-5% slower. */
#if QF_PROLOGUE != QF_PROLOGUE_NONE
QF_COLS_ENTRY_MIN(__KERNEL_NAME__, kThreads, kColAhead ? 2 : 4, qf_q_params)
#else
QF_COLS_ENTRY(__KERNEL_NAME__, kThreads, qf_q_params)
#endif
/* `_amax` in every variant (the registry lists a template's entries, not a variant's); only
 * current scaling's variants without a norm have a walk in it, at 4 or more blocks per SM (64
 * registers or fewer: relu's and fp32 x's 40-56, 5 or 6 blocks). */
QF_AMAX_ENTRY_MIN(__KERNEL_NAME__, kThreads, 4, qf_q_params)
