/* smxx_nvfp4_norm_quantize.cu: fused LayerNorm/RMSNorm (or none) + NVFP4 quantization: E2M1
 * elements in 1x16 blocks with E4M3 block scales and an fp32 global scale per copy; rowwise
 * [M, K/2] and the transposed columnwise copy [K, M/2] (optionally after a 16-point RHT over
 * groups of 16 tokens), 16x16 weight tiles, Philox stochastic rounding.
 *
 * Numerics: numerics 2.4 and 3. C reference: qf_quantize_nvfp4_ref in runtime/ref/ref_nvfp4.c;
 * given this kernel's mu/rsigma the bytes and both amaxes are identical, bit for bit.
 *
 * The global amax must be known before any element is quantized, so the op is two launches of
 * this module (x is read twice, never written back):
 * - `<name>_amax` (pass 1, one block per TILE_M = 32 rows): phase A, one warp per row: mu and
 *   rsigma (two sweeps over the row, the second from L1), written to mu/rsigma; then, when
 *   max |y| is needed (rowwise, or columnwise without RHT: the transpose holds the same values),
 *   a third sweep (L1 again) normalizes the row and takes its amax. Phase B (columnwise with RHT
 *   only) re-reads the block's 16-row groups (from L2) as work items and takes the amax of the
 *   bf16-rounded RHT outputs. Each amax is reduced over the block and merged into its [1] slot
 *   with atomicMax on the float bits (the runtime zeroes the slots first): amaxes are >= 0, and
 *   a NaN is stored as the canonical 0x7FC00000, which orders above +inf, so NaN propagates as in
 *   qf_amax_merge.
 * - `<name>` (pass 2): one thread per work item of 16 rows (one group) x 8 columns (one 16-byte
 *   vector of bf16/fp16 x, two of fp32), normalized with pass 1's mu/rsigma. With a columnwise
 *   copy the item is held in registers as y[16][8]; the rowwise copy alone streams it one row at
 *   a time (far fewer registers, so more threads per SM hide the loads' latency).
 *   Rowwise: the two threads of a lane pair hold the two halves of each row's 1x16 block and
 *   reduce its amax with one shuffle; each stores 4 bytes per row. Columnwise: each of the 8
 *   columns is one whole 16x1 block (after the RHT when enabled) and is stored as 8 bytes.
 *   2D (weights): the pair reduces the 16x16 tile amax, the scale of all 32 blocks it covers.
 *   The runtime zeroes both scale matrices first (padding stays 0x00); this pass writes every
 *   real entry.
 *
 * Bit-level rules (all as the reference): S_enc = fminf(2688 / amax, FLT_MAX), 1 for amax 0 or a
 * zero quotient; S_dec = 1 / S_enc; sf = rn_sat_E4M3(bamax * (S_enc * fl(1/6))) by the hardware
 * cvt; enc = fminf(1 / (float(sf) * S_dec), FLT_MAX); E2M1 conversion in software (the e2m1x2
 * cvt needs sm_100a); SR word of element i = word i%4 of Philox4x32-10(ctr {i/4, offset},
 * key seed), i the element's unpacked index in the data it is written to; the columnwise copy
 * uses offset ^ (1 << 63). RHT sums run k = 0..15 in order from 0.0f. The runtime compiles with
 * --fmad=false, so no product is contracted into an FMA the reference does not have.
 *
 * Requirements (checked by the op): M and K multiples of 16; x, gamma, beta 16-byte aligned.
 * Compile-time choices: the placeholders (qfuse-gen) and -DQF_OUTPUTS, -DQF_GAMMA_DTYPE,
 * -DQF_SCALE_SWIZZLED (runtime). M and K are run-time values. */
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_norm.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr bool kRht = __RHT__ != 0;
constexpr unsigned kRhtMask = __RHT_MASK__;
constexpr bool kSr = __STOCHASTIC_ROUNDING__ != 0;
constexpr bool kBlock2d = __BLOCK_2D__ != 0;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kWarps = kThreads / 32;
constexpr int kGroup = 16; /* rows of one RHT group, one columnwise block, one 2D tile */
constexpr int kVec = 8;    /* columns of one work item: half a rowwise block */
constexpr int kColVec = 4; /* columns held at once for the columnwise copy (y[16][4]) */
constexpr bool kRowwise = (QF_OUTPUTS & QF_OUT_ROWWISE) != 0;
constexpr bool kColumnwise = (QF_OUTPUTS & QF_OUT_COLUMNWISE) != 0;
constexpr bool kColRht = kColumnwise && kRht;
constexpr bool kSwizzled = QF_SCALE_SWIZZLED != 0;
constexpr float kFltMax = 3.40282346638528859812e+38f;
constexpr unsigned kCanonicalNan = 0x7FC00000u; /* what the reference's NAN is */

static_assert(!kHasPrologue || kNorm == QF_NORM_NONE, "an activation prologue has no norm");
static_assert(kTileM == 2 * kGroup && kThreads == 256, "pass 1: 32-row tiles of 256 threads");
static_assert(!(kBlock2d && kRht), "16x16 weight tiles and the RHT are exclusive (numerics 2.4)");

/* {================================================================== formats (numerics 1, 2.4) */

/* fp32 -> bf16 (round to nearest even) -> fp32, as qf_float_to_bf16 (NaN stays NaN). */
__device__ __forceinline__ float round_bf16(float f) {
    const unsigned u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return __uint_as_float((u | 0x00400000u) & 0xFFFF0000u);
    return __uint_as_float((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

/* fp32 -> E4M3 byte, round to nearest even, saturating; NaN -> 0x7F (the hardware cvt). */
__device__ __forceinline__ unsigned to_e4m3(float v) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(v));
    return r & 0xFFu;
}

/* E4M3 byte -> fp32, exact (qf_e4m3_to_float_ref). */
__device__ __forceinline__ float from_e4m3(unsigned b) {
    const unsigned e = (b >> 3) & 0xFu, m = b & 0x7u;
    float mag;
    if ((b & 0x7Fu) == 0x7Fu)
        mag = __uint_as_float(kCanonicalNan);
    else if (e == 0)
        mag = static_cast<float>(m) * 0.001953125f; /* m * 2^-9 */
    else
        mag = __uint_as_float(((e + 120u) << 23) | (m << 20)); /* (1 + m/8) * 2^(e-7) */
    return (b & 0x80u) ? -mag : mag;
}

/* fp32 -> E2M1 code, round to nearest even straight from fp32, saturating; NaN -> 0x7
 * (qf_e2m1_from_float_ref: midpoints go to the even code). */
__device__ __forceinline__ unsigned e2m1_rn(float v) {
    if (v != v)
        return 0x7u;
    const unsigned sign = (__float_as_uint(v) >> 28) & 0x8u;
    const float a = fabsf(v);
    unsigned c;
    if (a <= 0.25f)
        c = 0;
    else if (a < 0.75f)
        c = 1;
    else if (a <= 1.25f)
        c = 2;
    else if (a < 1.75f)
        c = 3;
    else if (a <= 2.5f)
        c = 4;
    else if (a < 3.5f)
        c = 5;
    else if (a <= 5.0f)
        c = 6;
    else
        c = 7;
    return sign | c;
}

/* Stochastic rounding of v with the random word u (qf_e2m1_sr_ref): hi iff u < threshold =
 * ceil(frac * 2^32), frac = (|v| - lo) / (hi - lo). That quotient is exact, and so is its
 * threshold, read here from the bits of a = |v| (biased exponent E, mantissa m) with no
 * division: for a in [1, 6) the grid step is 2^(E-128), so frac = (m mod 2^22) / 2^22 and
 * threshold = (m mod 2^22) 2^10, lo = 2 (E - 126) + the mantissa's top bit; in [0.5, 1)
 * (step 0.5) frac = m / 2^23, threshold = m 2^9, lo = 1; below 0.5, frac = 2a and
 * threshold = ceil(a 2^33) (exact scaling, below 2^32), lo = 0. */
__device__ __forceinline__ unsigned e2m1_sr(float v, unsigned u) {
    if (v != v)
        return 0x7u;
    const unsigned sign = (__float_as_uint(v) >> 28) & 0x8u;
    const float a = fabsf(v);
    if (a >= 6.0f)
        return sign | 0x7u;
    const unsigned bits = __float_as_uint(a), e = bits >> 23;
    unsigned lo, threshold;
    if (e >= 127u)
        lo = 2u * (e - 126u) + ((bits >> 22) & 1u), threshold = (bits & 0x3FFFFFu) << 10;
    else if (e == 126u)
        lo = 1u, threshold = (bits & 0x7FFFFFu) << 9;
    else
        lo = 0u, threshold = static_cast<unsigned>(ceilf(__fmul_rn(a, 8589934592.0f)));
    return sign | (u < threshold ? lo + 1u : lo);
}

/* Philox4x32-10 (qf_philox4x32_10_ref) of counter {lo(q), hi(q), lo(off), hi(off)} and key
 * {lo(seed), hi(seed)}. */
__device__ __forceinline__ void philox(unsigned long long q, unsigned long long off,
                                       unsigned long long seed, unsigned (&out)[4]) {
    unsigned c0 = static_cast<unsigned>(q), c1 = static_cast<unsigned>(q >> 32);
    unsigned c2 = static_cast<unsigned>(off), c3 = static_cast<unsigned>(off >> 32);
    unsigned k0 = static_cast<unsigned>(seed), k1 = static_cast<unsigned>(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The SR words of elements i0 .. i0+N-1 (i0 a multiple of 4). */
template <int N>
__device__ __forceinline__ void sr_words(const qf_q_params &p, unsigned long long off,
                                         long long i0, unsigned (&u)[N]) {
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        unsigned w[4];
        philox(static_cast<unsigned long long>(i0) / 4 + j, off, p.sr_seed, w);
#pragma unroll
        for (int t = 0; t < 4; t++)
            u[4 * j + t] = w[t];
    }
}

/* S_enc of a copy from its global amax (qf_nvfp4_global_enc_ref). */
__device__ __forceinline__ float global_enc(float amax) {
    const float s = fminf(__fdiv_rn(2688.0f, amax), kFltMax);
    return (amax == 0.0f || s == 0.0f) ? 1.0f : s;
}

/* E4M3 block scale byte (qf_nvfp4_block_scale_ref). */
__device__ __forceinline__ unsigned block_scale(float bamax, float s_enc) {
    const float r6 = __fdiv_rn(1.0f, 6.0f);
    return to_e4m3(__fmul_rn(bamax, __fmul_rn(s_enc, r6)));
}

/* Element multiplier of a block (qf_nvfp4_elem_enc_ref). */
__device__ __forceinline__ float elem_enc(unsigned sf, float s_dec) {
    return fminf(__fdiv_rn(1.0f, __fmul_rn(from_e4m3(sf), s_dec)), kFltMax);
}

/* Parity of the low 4 bits of v (compile-time in the unrolled RHT). */
__device__ __forceinline__ constexpr unsigned parity4(unsigned v) {
    return (v ^ (v >> 1) ^ (v >> 2) ^ (v >> 3)) & 1u;
}

/* y_n = bf16(0.25 * sum_k s_k (-1)^popcount(k & n) x_k) in the reference's order
 * (qf_rht16_ref); the signs are compile-time, so each term is one add or subtract. */
__device__ __forceinline__ void rht16(const float (&x)[kGroup], float (&y)[kGroup]) {
#pragma unroll
    for (int n = 0; n < kGroup; n++) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < kGroup; k++) {
            const unsigned neg = ((kRhtMask >> k) ^ parity4(k & n)) & 1u;
            acc = neg ? __fsub_rn(acc, x[k]) : __fadd_rn(acc, x[k]);
        }
        y[n] = round_bf16(__fmul_rn(0.25f, acc));
    }
}

/* Rowwise scale entry (m, kb) of [roundup(M,128), roundup(K/16,4)]. */
__device__ __forceinline__ void store_row_scale(const qf_q_params &p, long long m, long long kb,
                                                unsigned byte) {
    const long long C = (p.K / 16 + 3) / 4 * 4;
    p.scale_row[kSwizzled ? swizzle_offset(m, kb, C) : m * C + kb] =
        static_cast<unsigned char>(byte);
}

/* Columnwise scale entry (k, mb) of [roundup(K,128), roundup(M/16,4)] (the transposed copy's
 * rowwise-style matrix; swizzled as it is, no transpose). */
__device__ __forceinline__ void store_col_scale(const qf_q_params &p, long long k, long long mb,
                                                unsigned byte) {
    const long long C = (p.M / 16 + 3) / 4 * 4;
    p.scale_col[kSwizzled ? swizzle_offset(k, mb, C) : k * C + mb] =
        static_cast<unsigned char>(byte);
}

/* }================================================================== */

/* {================================================================== normalization (numerics 3) */

/* gamma (+1 when zero-centered) and beta of columns k..k+N-1; identity for no norm. */
template <int N>
__device__ __forceinline__ void load_affine(const qf_q_params &p, long long k, float (&g)[N],
                                            float (&b)[N]) {
#pragma unroll
    for (int j = 0; j < N; j++)
        g[j] = 1.0f, b[j] = 0.0f;
    if (kNorm != QF_NORM_NONE)
        load_gamma_vec<kGammaDtype, kZeroCenteredGamma, N>(p.gamma, k, g);
    if (kNorm == QF_NORM_LAYERNORM)
        load_n<kGammaDtype, N>(p.beta, k, b);
}

/* Rows m0..m0+15, columns k..k+N-1, normalized: y[r][c]. mu/rs point at the 16 rows'
 * statistics (NULL: 0 and 1). All loads are issued before any value is used. */
template <int N>
__device__ __forceinline__ void load_item(const qf_q_params &p, long long m0, long long k,
                                          const float *mu, const float *rs,
                                          float (&y)[kGroup][N]) {
#pragma unroll
    for (int r = 0; r < kGroup; r++)
        src_n<kInDtype, N>(p, m0 + r, k, y[r]);
    if (kNorm == QF_NORM_NONE)
        return;
    float g[N], b[N];
    load_affine<N>(p, k, g, b);
#pragma unroll
    for (int r = 0; r < kGroup; r++) {
        const float mr = mu ? mu[r] : 0.0f, sr = rs[r];
#pragma unroll
        for (int c = 0; c < N; c++)
            y[r][c] = normalize<kNorm>(y[r][c], mr, sr, g[c], b[c]);
    }
}

/* }================================================================== */

/* {================================================================== pass 1: statistics, amax */

/* Block-reduces a[0] and a[1] (NaN-keeping max); the results are valid in thread 0. */
__device__ void block_amax(float (&a)[2]) {
    __shared__ float s_red[2][kWarps];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        a[i] = warp_amax(a[i]);
        if ((threadIdx.x & 31) == 0)
            s_red[i][threadIdx.x >> 5] = a[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 2; i++)
        for (int w = 1; w < kWarps; w++)
            a[i] = amax_merge(a[i], s_red[i][w]);
}

/* Merges amax into the [1] slot dst: non-negative floats order as their bits, and the canonical
 * NaN orders above +inf, so a NaN sticks. */
__device__ __forceinline__ void merge_amax(float *dst, float amax) {
    const unsigned bits = amax != amax ? kCanonicalNan : __float_as_uint(amax);
    atomicMax(reinterpret_cast<unsigned *>(dst), bits);
}

/* Phase A for row m: statistics (norms) and, when wanted, max |y| of the row into *amax. */
__device__ void amax_row_pass(const qf_q_params &p, long long m, int r, float *s_mu, float *s_rs,
                              bool want_amax, float *amax) {
    const int lane = threadIdx.x & 31;
    float mu = 0.0f, rs = 1.0f;
    if (kNorm != QF_NORM_NONE) {
        row_stats<kNorm, kInDtype, kVec>(p.x, m, p.K, p.eps, &mu, &rs);
        if (lane == 0) {
            s_mu[r] = mu, s_rs[r] = rs;
            if (kNorm == QF_NORM_LAYERNORM)
                p.mu[m] = mu;
            p.rsigma[m] = rs;
        }
    }
    if (!want_amax)
        return;
    const long long nvec = p.K / kVec;
#pragma unroll 2
    for (long long v = lane; v < nvec; v += 32) {
        float x[kVec], g[kVec], b[kVec];
        src_n<kInDtype, kVec>(p, m, v * kVec, x);
        load_affine(p, v * kVec, g, b);
#pragma unroll
        for (int j = 0; j < kVec; j++)
            *amax = amax_merge(*amax, normalize<kNorm>(x[j], mu, rs, g[j], b[j]));
    }
}

/* Phase B: amax of the bf16 RHT outputs of every 16-row group of the tile, every column; 16x4
 * items (64 values live). */
__device__ float amax_rht_pass(const qf_q_params &p, long long m0, int rows, const float *s_mu,
                               const float *s_rs) {
    const long long nvec = p.K / kColVec, items = (rows / kGroup) * nvec;
    float amax = 0.0f;
    for (long long w = threadIdx.x; w < items; w += kThreads) {
        const int gi = static_cast<int>(w / nvec);
        float y[kGroup][kColVec];
        load_item(p, m0 + gi * kGroup, (w % nvec) * kColVec,
                  kNorm == QF_NORM_LAYERNORM ? s_mu + gi * kGroup : nullptr, s_rs + gi * kGroup,
                  y);
#pragma unroll
        for (int c = 0; c < kColVec; c++) {
            float col[kGroup], h[kGroup];
#pragma unroll
            for (int n = 0; n < kGroup; n++)
                col[n] = y[n][c];
            rht16(col, h);
#pragma unroll
            for (int n = 0; n < kGroup; n++)
                amax = amax_merge(amax, h[n]);
        }
    }
    return amax;
}

__device__ void amax_body(const qf_q_params &p) {
    __shared__ float s_mu[kTileM], s_rs[kTileM];
    const long long m0 = static_cast<long long>(blockIdx.x) * kTileM;
    const long long left = p.M - m0;
    const int rows = left < kTileM ? static_cast<int>(left) : kTileM;
    const int warp = threadIdx.x >> 5;
    /* max |y| serves the rowwise copy and the plain transpose (same values). */
    constexpr bool kWantY = kRowwise || (kColumnwise && !kRht);
    float a[2] = {0.0f, 0.0f}; /* max |y|, max |RHT(y)| */
    for (int r = warp; r < rows; r += kWarps)
        amax_row_pass(p, m0 + r, r, s_mu, s_rs, kWantY, &a[0]);
    if (kColRht) {
        __syncthreads(); /* s_mu / s_rs complete */
        a[1] = amax_rht_pass(p, m0, rows, s_mu, s_rs);
    }
    block_amax(a);
    if (threadIdx.x == 0) {
        if (kRowwise)
            merge_amax(p.amax, a[0]);
        if (kColumnwise) /* without the RHT the transpose has the same values: max |y| */
            merge_amax(p.amax_col, kRht ? a[1] : a[0]);
    }
}

/* }================================================================== */

/* {================================================================== pass 2: quantize */

/* Row m's half block k..k+7 of the rowwise copy: 4 bytes and, from the even thread of the lane
 * pair (which holds the other half), the block's scale. tile: the 16x16 tile amax (2D). */
__device__ __forceinline__ void quant_row(const qf_q_params &p, const float (&y)[kVec], long long m,
                                          long long k, unsigned pair, float tile, float s_enc,
                                          float s_dec) {
    float a = 0.0f;
#pragma unroll
    for (int c = 0; c < kVec; c++)
        a = amax_merge(a, y[c]);
    a = amax_merge(a, __shfl_xor_sync(pair, a, 1)); /* the other half of the 1x16 block */
    const unsigned sf = block_scale(kBlock2d ? tile : a, s_enc);
    const float enc = elem_enc(sf, s_dec);
    unsigned u[kVec];
    if (kSr)
        sr_words<kVec>(p, p.sr_offset, m * p.K + k, u);
    unsigned word = 0;
#pragma unroll
    for (int c = 0; c < kVec; c++) {
        const float v = __fmul_rn(y[c], enc);
        word |= (kSr ? e2m1_sr(v, u[c]) : e2m1_rn(v)) << (4 * c);
    }
    *reinterpret_cast<unsigned *>(p.out_row + m * (p.K / 2) + k / 2) = word;
    if ((threadIdx.x & 1) == 0)
        store_row_scale(p, m, k / 16, sf);
}

/* Row m, columns k..k+7, normalized with that row's statistics and the affine g, b. */
__device__ __forceinline__ void load_row(const qf_q_params &p, long long m, long long k,
                                         const float (&g)[kVec], const float (&b)[kVec],
                                         float (&y)[kVec]) {
    src_n<kInDtype, kVec>(p, m, k, y);
    if (kNorm == QF_NORM_NONE)
        return;
    const float mu = kNorm == QF_NORM_LAYERNORM ? p.mu[m] : 0.0f, rs = p.rsigma[m];
#pragma unroll
    for (int c = 0; c < kVec; c++)
        y[c] = normalize<kNorm>(y[c], mu, rs, g[c], b[c]);
}

/* The rowwise side of the item, its rows streamed one at a time (8 values live): with 2D tiles
 * a first sweep takes the 16x16 tile amax (this 16x8 half and the pair's), returned for the
 * columnwise copy; then, when asked, the rowwise copy (the second sweep mostly hits L1). */
__device__ __forceinline__ float rows_streamed(const qf_q_params &p, long long m0, long long k,
                                               unsigned pair) {
    float g[kVec], b[kVec];
    load_affine(p, k, g, b);
    float tile = 0.0f;
    if (kBlock2d) {
#pragma unroll 4
        for (int r = 0; r < kGroup; r++) {
            float y[kVec];
            load_row(p, m0 + r, k, g, b, y);
#pragma unroll
            for (int c = 0; c < kVec; c++)
                tile = amax_merge(tile, y[c]);
        }
        tile = amax_merge(tile, __shfl_xor_sync(pair, tile, 1)); /* the other 16x8 half */
    }
    if (kRowwise) {
        const float s_enc = global_enc(*p.amax), s_dec = __fdiv_rn(1.0f, s_enc);
#pragma unroll 4
        for (int r = 0; r < kGroup; r++) {
            float y[kVec];
            load_row(p, m0 + r, k, g, b, y);
            quant_row(p, y, m0 + r, k, pair, tile, s_enc, s_dec);
        }
    }
    return tile;
}

/* Columnwise copy of rows m0..m0+15, columns k..k+kColVec-1: column k+c is one 16x1 block of
 * the transpose: 8 bytes at row k+c, bytes m0/2.., and one scale entry. */
__device__ __forceinline__ void quant_cols(const qf_q_params &p,
                                           const float (&y)[kGroup][kColVec], long long m0,
                                           long long k, float tile, float s_enc, float s_dec) {
    const unsigned long long off = p.sr_offset ^ (1ull << 63);
#pragma unroll
    for (int c = 0; c < kColVec; c++) {
        float col[kGroup], h[kGroup];
#pragma unroll
        for (int n = 0; n < kGroup; n++)
            col[n] = y[n][c];
        if (kRht)
            rht16(col, h);
        else
#pragma unroll
            for (int n = 0; n < kGroup; n++)
                h[n] = col[n];
        float a = 0.0f;
#pragma unroll
        for (int n = 0; n < kGroup; n++)
            a = amax_merge(a, h[n]);
        const unsigned sf = block_scale(kBlock2d ? tile : a, s_enc);
        const float enc = elem_enc(sf, s_dec);
        const long long kk = k + c;
        unsigned u[kGroup];
        if (kSr)
            sr_words<kGroup>(p, off, kk * p.M + m0, u);
        unsigned w[2] = {0u, 0u};
#pragma unroll
        for (int n = 0; n < kGroup; n++) {
            const float v = __fmul_rn(h[n], enc);
            w[n / 8] |= (kSr ? e2m1_sr(v, u[n]) : e2m1_rn(v)) << (4 * (n % 8));
        }
        *reinterpret_cast<uint2 *>(p.out_col + kk * (p.M / 2) + m0 / 2) = make_uint2(w[0], w[1]);
        store_col_scale(p, kk, m0 / kGroup, sf);
    }
}

/* }================================================================== */

} // namespace

/* Pass 2: normalize + quantize; grid = cdiv((M/16) * (K/8), kThreads). The rowwise side streams
 * rows; the columnwise copy takes the item in two 16x4 halves (64 values live, re-read from L1
 * or L2), so no variant holds the whole 16x8 item in registers. */
extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_q_params p) {
    const long long nvec = p.K / kVec, items = (p.M / kGroup) * nvec;
    const long long w = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    /* items is even (K/8 is), so the two threads of a lane pair are both in or both out. */
    if (w >= items)
        return;
    const unsigned lane = threadIdx.x & 31;
    const unsigned pair = 3u << (lane & 30u);
    const long long m0 = (w / nvec) * kGroup, k = (w % nvec) * kVec;
    float tile = 0.0f;
    if (kRowwise || kBlock2d)
        tile = rows_streamed(p, m0, k, pair);
    if (!kColumnwise)
        return;
    const float s_enc = global_enc(*p.amax_col), s_dec = __fdiv_rn(1.0f, s_enc);
#pragma unroll 1
    for (int h = 0; h < kVec; h += kColVec) {
        float y[kGroup][kColVec];
        load_item(p, m0, k + h, kNorm == QF_NORM_LAYERNORM ? p.mu + m0 : nullptr,
                  kNorm != QF_NORM_NONE ? p.rsigma + m0 : nullptr, y);
        quant_cols(p, y, m0, k + h, tile, s_enc, s_dec);
    }
}

/* Pass 1: statistics and global amaxes (amax_body); grid = cdiv(M, TILE_M). The registry lists
 * this entry because the template invokes QF_AMAX_ENTRY (qf_dev_module.cuh). */
QF_AMAX_ENTRY(__KERNEL_NAME__, kThreads, qf_q_params)
