/* smxx_mxfp8_norm_quantize.cu: fused LayerNorm/RMSNorm (or none) + MXFP8 quantization with E8M0
 * block scales: 1x32 blocks along K (rowwise), 32x1 blocks along M (columnwise, data not
 * transposed), or one 32x32 tile amax for both (weights, BLOCK_2D).
 *
 * Numerics: numerics 2.3 (E = ceil(log2(fl(amax * fl(1/fp8_max)))) or the OCP floor rule, clamped
 * to
 * [-127, 127]; q = rn_sat(y * 2^-E); a NaN in a block gives scale 0xFF and NaN elements) and
 * numerics 3 (y as in the FP8 kernels). C reference: qf_norm_quantize_mxfp8_ref in
 * runtime/ref/ref_mx.c; given this kernel's mu/rsigma the bytes are identical.
 *
 * Three entry points share the numerics: `<name>_rows{1,2,4,8}` (1D blocks, rows of whole
 * 16-byte vectors; see "rows path" below: mu/rsigma and, when asked, the rowwise copy),
 * `<name>_cols` (the columnwise copy after a rows entry on the same stream, M and K multiples of
 * 64; see "columnwise entry") and `<name>`, the tiled entry (everything else).
 *
 * Tiled work split: one block owns a tile of 32 rows (one columnwise block). Phase 1: each warp
 * computes its rows' mean and variance (two passes over x). Phase 2: the block walks 32x32
 * sub-tiles, each exactly one columnwise block per column and one rowwise block per row: each
 * thread normalizes 4 consecutive elements; the 8 threads of a row reduce the row block's amax with
 * shuffles; column amaxes go through shared memory. The runtime zeroes both scale matrices before
 * the launch, so padding entries are always 0x00; this kernel writes every real entry.
 *
 * Compile-time choices: the placeholders (qfuse-gen) and -DQF_OUTPUTS, -DQF_GAMMA_DTYPE,
 * -DQF_SCALE_SWIZZLED (runtime). M and K are run-time values. */
#include "qf_dev_convert.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_norm.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kOutDtype = __OUT_DTYPE__;
constexpr int kScaleRounding = __SCALE_ROUNDING__;
constexpr bool kBlock2d = __BLOCK_2D__ != 0;
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kWarps = kThreads / 32;
constexpr int kSubK = QF_MX_BLOCK; /* columns per sub-tile = one rowwise block */
constexpr int kVec = 4;            /* elements per thread per sub-tile */
constexpr bool kRowwise = (QF_OUTPUTS & QF_OUT_ROWWISE) != 0;
constexpr bool kColumnwise = (QF_OUTPUTS & QF_OUT_COLUMNWISE) != 0;
constexpr bool kSwizzled = QF_SCALE_SWIZZLED != 0;
constexpr float kFp8Max = kOutDtype == QF_DTYPE_E4M3 ? QF_E4M3_MAX : QF_E5M2_MAX;
constexpr int kEmax = kOutDtype == QF_DTYPE_E4M3 ? 8 : 15;
constexpr float kInvFp8Max = 1.0f / kFp8Max; /* fl(1/fp8_max), as the reference */

static_assert(!kHasPrologue || kNorm == QF_NORM_NONE, "an activation prologue has no norm");
static_assert(kTileM == QF_MX_BLOCK && kThreads == 256, "tile = one 32-row block, 256 threads");
static_assert(kTileM * kSubK == kThreads * kVec, "each thread owns kVec elements of a sub-tile");

/* E8M0 byte of a block amax (numerics 2.3), from the bits of fp32 values: no log2 approximation. */
__device__ __forceinline__ unsigned e8m0_of_amax(float amax) {
    if (amax != amax)
        return 0xFFu;
    const float v = kScaleRounding == QF_SCALE_ROUNDING_CEIL ? amax * kInvFp8Max : amax;
    const unsigned bits = __float_as_uint(v);
    const int e = static_cast<int>((bits >> 23) & 0xFFu);
    if (e == 0) /* zero or subnormal: ceil(log2 v) is -126 only above 2^-127 (mantissa > 2^22) */
        return (kScaleRounding == QF_SCALE_ROUNDING_CEIL && (bits & 0x7FFFFFu) > 0x400000u) ? 1u
                                                                                            : 0u;
    if (e == 255)
        return 254u; /* inf clamps to 2^127 */
    int E = kScaleRounding == QF_SCALE_ROUNDING_CEIL ? (e - 127) + ((bits & 0x7FFFFFu) != 0u)
                                                     : (e - 127) - kEmax;
    E = E < -127 ? -127 : (E > 127 ? 127 : E);
    return static_cast<unsigned>(E + 127);
}

/* 2^-E for scale byte b = E + 127, exact (2^-127 is the subnormal 0x00400000); NaN for 0xFF. */
__device__ __forceinline__ float e8m0_inverse(unsigned b) {
    if (b == 0xFFu)
        return __uint_as_float(0x7FC00000u);
    if (b == 254u)
        return __uint_as_float(0x00400000u);
    return __uint_as_float((254u - b) << 23);
}

/* Quantizes 4 values with one scale multiplier and packs them little-endian. */
__device__ __forceinline__ unsigned quant4(const float (&y)[kVec], const float (&inv)[kVec]) {
    const unsigned lo = to_fp8x2<kOutDtype>(y[0] * inv[0], y[1] * inv[1]);
    const unsigned hi = to_fp8x2<kOutDtype>(y[2] * inv[2], y[3] * inv[3]);
    return lo | (hi << 16);
}

/* Writes rowwise scale entry (m, kb): [roundup(M,128), roundup(cdiv(K,32),4)]. */
__device__ __forceinline__ void store_row_scale(const qf_q_params &p, long long m, long long kb,
                                                unsigned byte) {
    const long long C = ((p.K + 31) / 32 + 3) / 4 * 4;
    const long long off = kSwizzled ? swizzle_offset(m, kb, C) : m * C + kb;
    p.scale_row[off] = static_cast<unsigned char>(byte);
}

/* Writes columnwise scale entry (mb, k): [roundup(cdiv(M,32),4), roundup(K,128)], swizzled as
 * its transpose [roundup(K,128), roundup(cdiv(M,32),4)]. */
__device__ __forceinline__ void store_col_scale(const qf_q_params &p, long long mb, long long k,
                                                unsigned byte) {
    const long long Cm = ((p.M + 31) / 32 + 3) / 4 * 4, Ck = (p.K + 127) / 128 * 128;
    const long long off = kSwizzled ? swizzle_offset(k, mb, Cm) : mb * Ck + k;
    p.scale_col[off] = static_cast<unsigned char>(byte);
}

/* ---------------------------------------------------------------- rows path
 * Rowwise only, 1D blocks, K * sizeof(x) a multiple of 16, 16-byte aligned pointers (the runtime
 * checks all of these). Each block loops over rows (persistent grid); a row (without a norm: each
 * chunk of IT kThreads vectors of it, so any K) is held in registers as IT 16-byte vectors per
 * thread in spans of whole 1x32 blocks (rows_vec, RowsSpan), so x is read from memory once. The
 * consecutive lanes whose vectors make up one 1x32 block reduce its amax with shuffles; the
 * first of them writes the scale byte. A
 * partial last block (K % 32 != 0) only sees its real elements: lanes past K
 * contribute 0 to the amax and store nothing. */
constexpr int kInSize = kInDtype == QF_DTYPE_FP32 ? 4 : 2;
constexpr int kEpv = 16 / kInSize;       /* x elements per 16-byte vector: 8 or 4 */
constexpr int kTpb = QF_MX_BLOCK / kEpv; /* x vectors per 1x32 block: 4 or 8 */
static_assert(kThreads % kTpb == 0 && 32 % kTpb == 0, "a block's lanes sit in one warp");

/* The thread's IT register vectors of a rows chunk of row m at the columns ln gives (RowsSpan:
 * NB 1x32 blocks, each shared by L lanes), normalized, quantized with their block's scale and
 * stored; the first of a block's lanes writes its scale byte. Every lane of the warp must call
 * this (shuffles). */
template <int IT>
__device__ __forceinline__ void rows_emit(const qf_q_params &p, float (&v)[IT][kEpv], long long m,
                                          const RowsLane &ln, float mu, float rs) {
    using Span = RowsSpan<IT, kTpb>;
    float amax[Span::NB];
    rows_block_amax<kNorm, kGammaDtype, kZeroCenteredGamma, kEpv, IT, kTpb, kThreads>(p, ln, v, mu,
                                                                                    rs, amax);
#pragma unroll
    for (int b = 0; b < Span::NB; b++) {
        const unsigned byte = e8m0_of_amax(amax[b]);
        const float inv = e8m0_inverse(byte);
        const float invs[kVec] = {inv, inv, inv, inv};
#pragma unroll
        for (int i = 0; i < Span::V; i++) {
            const int it = b * Span::V + i;
            if (!(ln.valid >> it & 1u))
                break;
            const long long k = rows_col<IT, kEpv, kTpb>(ln, it);
            unsigned w[2] = {0u, 0u};
#pragma unroll
            for (int j = 0; j < kEpv; j += kVec) {
                const float q[kVec] = {v[it][j], v[it][j + 1], v[it][j + 2], v[it][j + 3]};
                w[j / kVec] = quant4(q, invs);
            }
            unsigned char *dst = p.out_row + m * p.K + k;
            if (kEpv == 8)
                *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
            else
                *reinterpret_cast<unsigned *>(dst) = w[0];
            if (rows_block_first<IT, kTpb>(threadIdx.x, it))
                store_row_scale(p, m, k / QF_MX_BLOCK, byte);
        }
    }
}

template <int IT>
__device__ void rows_body(const qf_q_params &p) {
    if (!kRowwise && kNorm == QF_NORM_NONE)
        return; /* nothing to do before the columnwise entry */
    /* x - mu kept (rows_walk's KEEP) for 16-bit x: LayerNorm rowwise on bf16 x 1.02-1.04x (on
     * fp16 x the code is the same either way) */
    rows_walk<IT, kInDtype, kGammaDtype, kZeroCenteredGamma, kNorm, kEpv, kThreads, kWarps, kTpb,
              kRowwise, kInSize == 2>(
        p, [&](float (&v)[IT][kEpv], long long m, const RowsLane &ln, float mu, float rs) {
            rows_emit<IT>(p, v, m, ln, mu, rs);
        });
}

/* ---------------------------------------------------------------- columnwise entry
 * After a rows entry (which wrote mu/rsigma): 64x64 tiles (a block walks several), two 32-row
 * blocks per column. 16-byte loads of x; |y| through shared memory for the column amaxes (128
 * threads, one column block each, also store the scale bytes); then each thread quantizes its
 * vectors with their columns' scales and stores them (the columnwise copy is not transposed). */
constexpr int kColTile = QF_COLS_TILE;
constexpr int kColChunks = kColTile / kEpv;            /* threads per tile row */
constexpr int kColRowsPerPass = kThreads / kColChunks; /* tile rows loaded per pass */
constexpr int kColPasses = kColTile / kColRowsPerPass; /* 2 (16-bit x) or 4 (fp32 x) */
static_assert(kColTile == 2 * QF_MX_BLOCK && kThreads >= 2 * kColTile, "two blocks per column");

__device__ __forceinline__ void cols_tile_body(const qf_q_params &p, long long tile,
                                               float (&s_abs)[kColTile][kColTile + 1],
                                               unsigned (&s_byte)[2][kColTile]) {
    const long long K = p.K;
    const ColsTile t = cols_tile<kColTile, kEpv, kColChunks>(K, tile);
    const long long m0 = t.m0, k0 = t.k0;
    const int c = t.c, r0 = t.r0;
    float y[kColPasses][kEpv];
    LoadGlobal ld;
    cols_load<kNorm, kInDtype, kGammaDtype, kZeroCenteredGamma, kEpv, kColPasses,
              kColRowsPerPass>(ld, p, m0, k0, c, r0, y);
#pragma unroll
    for (int i = 0; i < kColPasses; i++) {
        const int r = r0 + i * kColRowsPerPass;
#pragma unroll
        for (int j = 0; j < kEpv; j++)
            s_abs[r][c + j] = fabsf(y[i][j]);
    }
    __syncthreads();
    if (threadIdx.x < 2 * kColTile) {
        const int blk = threadIdx.x / kColTile, col = threadIdx.x % kColTile;
        float a = 0.0f;
        for (int i = 0; i < QF_MX_BLOCK; i++)
            a = amax_merge(a, s_abs[blk * QF_MX_BLOCK + i][col]);
        const unsigned byte = e8m0_of_amax(a);
        s_byte[blk][col] = byte;
        store_col_scale(p, m0 / QF_MX_BLOCK + blk, k0 + col, byte);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kColPasses; i++) {
        const int r = r0 + i * kColRowsPerPass, blk = r / QF_MX_BLOCK;
        unsigned w[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < kEpv; j += kVec) {
            const float q[kVec] = {y[i][j], y[i][j + 1], y[i][j + 2], y[i][j + 3]};
            const float invs[kVec] = {e8m0_inverse(s_byte[blk][c + j]),
                                      e8m0_inverse(s_byte[blk][c + j + 1]),
                                      e8m0_inverse(s_byte[blk][c + j + 2]),
                                      e8m0_inverse(s_byte[blk][c + j + 3])};
            w[j / kVec] = quant4(q, invs);
        }
        unsigned char *dst = p.out_col + (m0 + r) * K + k0 + c;
        if (kEpv == 8)
            *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
        else
            *reinterpret_cast<unsigned *>(dst) = w[0];
    }
    __syncthreads(); /* s_abs and s_byte are the next tile's */
}

/* The tiles blockIdx.x, + gridDim.x, ... from the last (row-major over [M/64, K/64]; the runtime
 * launches at most as many blocks as are resident at once): the rows entry before it read the
 * last rows last, so they are still in L2. */
__device__ void cols_body(const qf_q_params &p) {
    __shared__ float s_abs[kColTile][kColTile + 1]; /* |y| of the tile */
    __shared__ unsigned s_byte[2][kColTile];        /* E8M0 byte of each column block */
    const long long tiles = (p.M / kColTile) * (p.K / kColTile);
    for (long long t = blockIdx.x; t < tiles; t += gridDim.x)
        cols_tile_body(p, tiles - 1 - t, s_abs, s_byte);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_q_params p) {
    __shared__ float s_mu[kTileM], s_rsigma[kTileM];
    __shared__ float s_abs[kTileM][kSubK + 1]; /* |y| of the sub-tile, for column amaxes */
    __shared__ unsigned s_colbyte[kSubK];
    __shared__ unsigned s_tilebyte;
    const long long M = p.M, K = p.K;
    const long long m0 = static_cast<long long>(blockIdx.x) * kTileM;

    /* Phase 1: row statistics. */
    tile_stats<kNorm, kInDtype, kTileM, kWarps>(p, m0, s_mu, s_rsigma);

    const int r = threadIdx.x / (kSubK / kVec);          /* row in tile, 0..31 */
    const int c = (threadIdx.x % (kSubK / kVec)) * kVec; /* first column in sub-tile */
    const long long m = m0 + r;
    const float mu = (kNorm == QF_NORM_LAYERNORM && m < M) ? s_mu[r] : 0.0f;
    const float rs = (kNorm != QF_NORM_NONE && m < M) ? s_rsigma[r] : 1.0f;
    const bool aligned = (K & 3) == 0;

    /* Phase 2: one 32x32 sub-tile at a time. */
    for (long long k0 = 0; k0 < K; k0 += kSubK) {
        float y[kVec];
        float ramax = 0.0f;
        const long long left = K - (k0 + c);
        const int nk = (m < M && left > 0) ? (left < kVec ? static_cast<int>(left) : kVec) : 0;
#pragma unroll
        for (int i = 0; i < kVec; i++) {
            y[i] = 0.0f;
            if (i < nk) {
                const long long k = k0 + c + i;
                float g = 1.0f, b = 0.0f;
                if (kNorm != QF_NORM_NONE)
                    g = load_gamma<kGammaDtype, kZeroCenteredGamma>(p.gamma, k);
                if (kNorm == QF_NORM_LAYERNORM)
                    b = load_elem<kGammaDtype>(p.beta, k);
                y[i] = normalize<kNorm>(src_elem<kInDtype>(p, m, k), mu, rs, g, b);
                ramax = amax_merge(ramax, y[i]);
            }
            s_abs[r][c + i] = i < nk ? fabsf(y[i]) : 0.0f;
        }
        /* Row block amax over the 8 threads of this row (lanes 8j..8j+7 of one warp). */
        for (int o = 1; o < 8; o <<= 1)
            ramax = amax_merge(ramax, __shfl_xor_sync(0xffffffffu, ramax, o));
        __syncthreads();
        /* Column amaxes (and the 32x32 tile amax) from shared memory. */
        if (threadIdx.x < kSubK) {
            float a = 0.0f;
            for (int i = 0; i < kTileM; i++)
                a = amax_merge(a, s_abs[i][threadIdx.x]);
            s_abs[0][threadIdx.x] = a; /* row 0 reused: every thread has read its own cells */
        }
        __syncthreads();
        if (threadIdx.x < kSubK) {
            if (kBlock2d) {
                float t = 0.0f;
                for (int i = 0; i < kSubK; i++)
                    t = amax_merge(t, s_abs[0][i]);
                if (threadIdx.x == 0)
                    s_tilebyte = e8m0_of_amax(t);
            }
            s_colbyte[threadIdx.x] = e8m0_of_amax(s_abs[0][threadIdx.x]);
        }
        __syncthreads();
        const unsigned rbyte = kBlock2d ? s_tilebyte : e8m0_of_amax(ramax);
        if (kRowwise && nk > 0) {
            const float inv = e8m0_inverse(rbyte);
            const float invs[kVec] = {inv, inv, inv, inv};
            store4(p.out_row + m * K + k0 + c, quant4(y, invs), nk, aligned);
            if (c == 0)
                store_row_scale(p, m, k0 / kSubK, rbyte);
        }
        if (kColumnwise && nk > 0) {
            float invs[kVec];
#pragma unroll
            for (int i = 0; i < kVec; i++)
                invs[i] = e8m0_inverse(kBlock2d ? s_tilebyte : s_colbyte[c + i]);
            store4(p.out_col + m * K + k0 + c, quant4(y, invs), nk, aligned);
        }
        if (kColumnwise && threadIdx.x < kSubK && k0 + threadIdx.x < K)
            store_col_scale(p, m0 / kTileM, k0 + threadIdx.x,
                            kBlock2d ? s_tilebyte : s_colbyte[threadIdx.x]);
        __syncthreads(); /* s_abs, s_colbyte and s_tilebyte are reused by the next sub-tile */
    }
}

/* The optional entry points (qf_dev_module.cuh); the registry lists them because the template
 * invokes their macros here. */
QF_ROWS_ENTRIES(__KERNEL_NAME__, qf_q_params, (kThreads, 6), (kThreads, 4), (kThreads, 3),
                (kThreads))
QF_COLS_ENTRY(__KERNEL_NAME__, kThreads, qf_q_params)
