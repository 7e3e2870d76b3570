/* qf_dev_ws_gemm.cuh: the block-scaled GEMM of the MXFP8 and NVFP4 modules on Hopper (sm_90a):
 * packed data in by TMA, B dequantized in shared memory and A in registers, multiplied by
 * warpgroup MMAs. An in-memory
 * NVRTC header; see qf_dev_load.cuh.
 *
 * y[M, N] = alpha * deq(A) deq(B)^T (+ bias[N]) (+ y when accumulating), A [M, K] and B [N, K]
 * K-major, with the parameter block qf_ws_gemm_params (qf_formats.h). The oracles are
 * qf_gemm_mxfp8_ref and qf_gemm_nvfp4_ref (runtime/ref).
 *
 * Numerics (numerics 7): every element enters the tensor cores exactly. MXFP8: x * 2^(b - 127)
 * rounded to bf16, exact for scale exponents in [-117, 119] (outside, bf16 rounding of the
 * product). NVFP4: E2M1 value x E4M3 scale x 2^-7 is an f16 number (sm90_nvfp4_gemm.cu), so the
 * MMAs run on f16 and the epilogue multiplies by 2^14 and alpha. The tensor cores sum the
 * products in fp32. A NaN scale makes its block NaN. Scale entries are read only for real rows
 * (< M, < N) and real blocks (< K / block): padding is never read.
 *
 * Structure: one persistent block of QF_WS_THREADS per SM walks output tiles of 128 x 256 in
 * groups of 8 tile rows (blockIdx.x, + gridDim.x, ...), k-tiles of 64 elements. Each operand
 * element is decoded once per block, and the k-tile's columns are permuted alike for A and B
 * ("formats" below). All three warpgroups decode B, so that the work spreads over every warp
 * (one warpgroup alone could not keep up with the MMAs):
 * - The dequantizing warpgroup (threads 0 .. QF_WS_DQ_THREADS - 1) decodes rows 0..127 of B
 *   (one whole row per thread) from a raw stage (TMA-swizzled, raw_b_offset) with their block
 *   scales (fetched one k-tile ahead into registers) into the 16-bit K-major tile of one of
 *   QF_WS_BF_STAGES stages, written with the 128-byte swizzle the wgmma descriptors read
 *   (qf_dev_wgmma.cuh); then it fences for the async proxy and arrives on full_bf. Its thread 0
 *   issues the TMA loads of the packed A and B k-tiles into QF_WS_RAW_STAGES raw stages
 *   (full_raw; a stage is refilled once all 384 threads have arrived on its empty_raw).
 * - Two MMA warpgroups: warpgroup g owns rows 64 g .. 64 g + 63 of the tile and all 256 columns
 *   (128 fp32 accumulators per thread). Per k-tile each thread decodes half of one B row (rows
 *   128 + 64 g ..) into the 16-bit stage and its two 16-element groups of packed A straight into
 *   its A fragments (registers; no 16-bit A tile exists), waits on full_bf (every thread's part
 *   of B), issues four m64n256k16 MMAs with A from registers, keeps one k-tile of MMAs in flight
 *   and releases the previous k-tile's B stage (empty_bf). While the epilogue stores from the
 *   accumulators, TMA already loads the next tile's k-tiles and the dequantizing warpgroup
 *   decodes its rows of them (a stage is complete once the MMA threads add theirs).
 * Every barrier's stage and phase follow from the block's running k-tile count (Ring). */
#ifndef QF_DEV_WS_GEMM_CUH
#define QF_DEV_WS_GEMM_CUH

#include "qf_dev_dequant.cuh"
#include "qf_dev_mma.cuh"
#include "qf_dev_wgmma.cuh"
#include "qf_formats.h"

namespace {
namespace ws {

constexpr int kThreads = QF_WS_THREADS, kDqThreads = QF_WS_DQ_THREADS;
constexpr int kMmaThreads = kThreads - kDqThreads;
constexpr int kTileM = QF_WS_TILE_M, kTileN = QF_WS_TILE_N, kTileK = QF_WS_TILE_K;
constexpr int kRawStages = QF_WS_RAW_STAGES, kBfStages = QF_WS_BF_STAGES;
constexpr int kGroupM = 8;                            /* tile rows per raster group */
constexpr unsigned kBfB = kTileN * kTileK * 2;        /* one 16-bit B tile: 32 KiB */
static_assert(kMmaThreads == 256 && kTileM == 128 && kTileN == 256 && kTileK == 64,
              "two MMA warpgroups of m64n256, k-tiles of one 128-byte bf16 row");
/* One block per SM: 65536 / 384 gives 168 registers per thread at launch. setmaxnreg then moves
 * registers from the dequantizing warpgroup (kDqRegs) to the MMA warpgroups (kMmaRegs: 128
 * accumulators, two A fragment sets of 16, addresses), within the block's 168 x 384: an
 * increase the freed registers cannot cover waits forever. */
static_assert(kDqThreads == 128 && kThreads == 384, "one dequantizing warpgroup");
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8, kDqRegs = 72, kMmaRegs = 216;
static_assert(kDqThreads * kDqRegs + kMmaThreads * kMmaRegs <= kThreads * kLaunchRegs &&
                  kDqRegs % 8 == 0 && kMmaRegs % 8 == 0,
              "setmaxnreg's counts fit the block's launch registers, in multiples of 8");
static_assert(kDqThreads + 2 * 64 == kTileN,
              "B rows: one per dequantizing thread, 64 per MMA warpgroup");

/* A compile-time fragment set (0, 1) of the MMA warpgroups. */
template <int V>
struct Set {
    static constexpr int value = V;
};

/* ==================================================================== formats */

/* Both formats are read in groups of 16 elements along K: group q (0..3) of a row's k-tile holds
 * elements 16 q .. 16 q + 15, under one block scale. A group decodes to out[s][h] (s = 0..3, h =
 * 0, 1), 16-bit pairs, and the k-tile's columns are permuted the same way for A and B, which
 * leaves every dot product unchanged: pair out[s][h] of group q sits at columns
 * 16 s + 8 h + 2 q, + 1 of the 64. That is where the A fragment of the MMA on k-slice s wants
 * thread q's pairs (wgmma_m64n256k16_rs: a[0] / a[2] at 2 q and 2 q + 8), so a thread of an MMA
 * warpgroup decodes one group per row, and B's 16-byte chunk 2 s + h is pair [s][h] of groups
 * 0..3 of its row. */

/* MXFP8: one byte per element (E4M3 or E5M2 = DT), one E8M0 scale per 32 along K. A group is 16
 * bytes (4 words); out[s][h] is elements 4 s + 2 h, + 1 of it, times 2^(b - 127), as bf16. */
template <int DT>
struct Mx {
    static constexpr bool kF16 = false;               /* MMAs on bf16 */
    static constexpr int kRawRow = QF_WS_RAW_ROW_MXFP8;
    static constexpr int kGroupWords = 4, kBlock = 32;
    static constexpr unsigned kOne = 127u;            /* the E8M0 byte of 1.0 */
    using Scale = float;
    __device__ static Scale scale(unsigned b) { return e8m0_value(b); }
    __device__ static void decode(const unsigned *w, Scale sc, unsigned (&out)[4][2]) {
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float a, b, c, d;
            fp8x2_to_float2<DT>(w[s], a, b);
            fp8x2_to_float2<DT>(w[s] >> 16, c, d);
            out[s][0] = float2_to_bf16x2(a * sc, b * sc);
            out[s][1] = float2_to_bf16x2(c * sc, d * sc);
        }
    }
};

/* NVFP4: two E2M1 elements per byte (element 2j in the low nibble of byte j), one E4M3 scale per
 * 16 along K. A group is 8 bytes (2 words, one block); out[s][h] is elements I and I + 4 of word
 * s / 2 (I = 2 (s % 2) + h, e2m1x2) times the scale x 2^-7, as f16 (exact). */
struct Nv {
    static constexpr bool kF16 = true;                /* MMAs on f16 (values x 2^-7) */
    static constexpr int kRawRow = QF_WS_RAW_ROW_NVFP4;
    static constexpr int kGroupWords = 2, kBlock = 16;
    static constexpr unsigned kOne = 0x38u;           /* the E4M3 byte of 1.0 */
    using Scale = unsigned;                           /* the f16 pair (s, s) x 2^7 */
    __device__ static Scale scale(unsigned b) {
        unsigned lo, hi;
        e4m3_pairs_pow7(b, 0u, lo, hi);
        return lo;
    }
    __device__ static void decode(const unsigned *w, Scale sc, unsigned (&out)[4][2]) {
        out[0][0] = hmul2(e2m1x2<0>(w[0]), sc);
        out[0][1] = hmul2(e2m1x2<1>(w[0]), sc);
        out[1][0] = hmul2(e2m1x2<2>(w[0]), sc);
        out[1][1] = hmul2(e2m1x2<3>(w[0]), sc);
        out[2][0] = hmul2(e2m1x2<0>(w[1]), sc);
        out[2][1] = hmul2(e2m1x2<1>(w[1]), sc);
        out[3][0] = hmul2(e2m1x2<2>(w[1]), sc);
        out[3][1] = hmul2(e2m1x2<3>(w[1]), sc);
    }
};

/* One row of a scale matrix for the current tile: its first byte, or null for a row past the
 * operand's rows (padding, never read); set once per tile, so that a k-tile's fetch only adds
 * its block index. */
struct ScaleRow {
    const uint8_t *p;
    __device__ void set(const uint8_t *scale, long long scale_cols, long long row,
                        long long rows) {
        p = row < rows ? scale + row * scale_cols : nullptr;
    }
};

/* The scale bytes of groups q0 .. q0 + G - 1 of one row's k-tile (q0 a multiple of the groups
 * per block), one register per block, as loaded: nothing reads them until the k-tile that uses
 * them, so the loads' latency stays hidden behind the k-tile before (packing them at the fetch
 * would wait for the loads there). Padding is never read: rows past the operand's and blocks
 * past nblocks = K / block get the format's 1.0 (their data is TMA's zero fill). Byte loads: the
 * scale matrix may sit at any address. */
template <class F, int G>
struct GroupScales {
    static constexpr int kPerBlock = F::kBlock / 16; /* groups per block: 2 or 1 */
    static constexpr int kLoads = (G + kPerBlock - 1) / kPerBlock;
    unsigned b[kLoads];
    __device__ void fetch(const ScaleRow &r, int nblocks, int kt, int q0) {
        const int kb0 = kt * (kTileK / F::kBlock) + 16 * q0 / F::kBlock;
#pragma unroll
        for (int i = 0; i < kLoads; i++)
            b[i] = r.p && kb0 + i < nblocks ? __ldg(r.p + kb0 + i) : F::kOne;
    }
    /* the scale byte of group q0 + g */
    __device__ unsigned operator[](int g) const { return b[g / kPerBlock]; }
};

/* ==================================================================== schedule */

/* Origin of output tile t (0 .. tiles - 1): groups of kGroupM tile rows, column-major inside a
 * group, so that the blocks working at one time share their A and B panels in L2. */
__device__ __forceinline__ void tile_of(const qf_ws_gemm_params &p, long long t, long long *m0,
                                        long long *n0) {
    const long long tiles_m = (p.M + kTileM - 1) / kTileM, tiles_n = (p.N + kTileN - 1) / kTileN;
    const long long per_group = kGroupM * tiles_n;
    const long long first = t / per_group * kGroupM, in_group = t % per_group;
    const long long rows = tiles_m - first < kGroupM ? tiles_m - first : kGroupM;
    *m0 = (first + in_group % rows) * kTileM;
    *n0 = in_group / rows * kTileN;
}

/* Shared memory of a family whose raw rows are RAW bytes: the 16-bit B tiles (kBfStages), the raw
 * A and B stages (kRawStages each), then the mbarriers; one 1024-byte aligned base, as a shared
 * address (descriptors, barriers, TMA) and as a generic pointer (data). */
template <int RAW>
struct Smem {
    static constexpr unsigned kRawA = kTileM * RAW, kRawB = kTileN * RAW;
    static constexpr unsigned kRawAOff = kBfStages * kBfB;
    static constexpr unsigned kRawBOff = kRawAOff + kRawStages * kRawA;
    static constexpr unsigned kBars = kRawBOff + kRawStages * kRawB;
    unsigned base;
    unsigned char *ptr;
    __device__ unsigned bf_b(unsigned s) const { return base + s * kBfB; }
    __device__ unsigned raw_a(unsigned s) const { return base + kRawAOff + s * kRawA; }
    __device__ unsigned raw_b(unsigned s) const { return base + kRawBOff + s * kRawB; }
    __device__ unsigned full_raw(unsigned s) const { return base + kBars + 8 * s; }
    __device__ unsigned empty_raw(unsigned s) const {
        return base + kBars + 8 * (kRawStages + s);
    }
    __device__ unsigned full_bf(unsigned s) const {
        return base + kBars + 8 * (2 * kRawStages + s);
    }
    __device__ unsigned empty_bf(unsigned s) const {
        return base + kBars + 8 * (2 * kRawStages + kBfStages + s);
    }
    /* the generic pointer of shared address a */
    __device__ unsigned char *at(unsigned a) const { return ptr + (a - base); }
};

/* A ring of S stages: the stage of the running k-tile count and the parity of its phase. */
template <int S>
struct Ring {
    unsigned stage = 0, phase = 0;
    __device__ void next() {
        if (++stage == S) {
            stage = 0;
            phase ^= 1u;
        }
    }
    __device__ unsigned prev() const { return stage == 0 ? S - 1 : stage - 1; }
};

/* ==================================================================== dequantization of B */

/* Byte offset of 16-byte chunk c of row r in a raw B stage of RAW-byte rows, as TMA writes it
 * with the swizzle of the row's width (RAW = 64: CU_TENSOR_MAP_SWIZZLE_64B, 32: _32B): chunk bits
 * XOR address bits 7 and up, so that the 8 rows a quarter warp reads whole fall on distinct
 * banks. */
template <int RAW>
__device__ __forceinline__ unsigned raw_b_offset(int r, int c) {
    return static_cast<unsigned>(r * RAW + 16 * (c ^ ((r * RAW >> 7) & (RAW / 16 - 1))));
}

/* Groups q0 .. q0 + G - 1 of row r of a raw B stage (src; G = 4: the whole row) decoded with
 * their scale bytes sc into the 16-bit B stage dst: word q of each
 * of the row's 16-byte chunks (formats above), stored 16 or 8 bytes at a time. */
template <class F, int G>
__device__ __forceinline__ void decode_b(const unsigned char *src, unsigned char *dst, int r,
                                         int q0, const GroupScales<F, G> &sc) {
    constexpr int kGroupsPerChunk = 4 / F::kGroupWords; /* raw 16-byte chunks: 1 or 2 groups */
    constexpr int kChunks = G / kGroupsPerChunk;
    static_assert((G == 2 || G == 4) && G % kGroupsPerChunk == 0, "whole raw chunks");
    unsigned w[4 * kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; c++) {
        const uint4 v = *reinterpret_cast<const uint4 *>(
            src + raw_b_offset<F::kRawRow>(r, q0 / kGroupsPerChunk + c));
        w[4 * c] = v.x, w[4 * c + 1] = v.y, w[4 * c + 2] = v.z, w[4 * c + 3] = v.w;
    }
    unsigned out[G][4][2]; /* [group][s][h] */
#pragma unroll
    for (int q = 0; q < G; q++)
        F::decode(w + q * F::kGroupWords, F::scale(sc[q]), out[q]);
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            unsigned char *d = dst + sw128_offset(r, 2 * s + h) + 4 * q0;
            if constexpr (G == 4)
                *reinterpret_cast<uint4 *>(d) =
                    make_uint4(out[0][s][h], out[1][s][h], out[2][s][h], out[3][s][h]);
            else
                *reinterpret_cast<uint2 *>(d) = make_uint2(out[0][s][h], out[1][s][h]);
        }
}

/* The dequantizing warpgroup: rows 0 .. kDqThreads - 1 of B's k-tiles (format F; one whole row
 * per thread), and (thread 0) the TMA loads of A and B (rows of F::kRawRow bytes for both: one
 * family). */
template <class F>
__device__ __forceinline__ void dequant_warps(const qf_ws_gemm_params &p,
                                              const Smem<F::kRawRow> &sm, long long KT,
                                              long long J) {
    using S = Smem<F::kRawRow>;
    const int t = threadIdx.x, warp = t / 32;
    /* The TMA load of the block's next k-tile into raw stage s (thread 0; k-tiles in order):
     * k-tile ikt of its ii-th tile, whose origin is (im0, in0). */
    long long ii = 0, ikt = 0, im0 = 0, in0 = 0;
    if (t == 0 && J > 0)
        tile_of(p, blockIdx.x, &im0, &in0);
    auto issue = [&](unsigned s) {
        const unsigned full = sm.full_raw(s);
        const int x = static_cast<int>(ikt) * F::kRawRow;
        mbar_arrive_expect_tx(full, S::kRawA + S::kRawB);
        tma_load_2d(sm.raw_a(s), &p.tma_a, full, x, static_cast<int>(im0));
        tma_load_2d(sm.raw_b(s), &p.tma_b, full, x, static_cast<int>(in0));
        if (++ikt == KT) {
            ikt = 0;
            if (++ii * KT < J) /* the block has another tile */
                tile_of(p, blockIdx.x + ii * gridDim.x, &im0, &in0);
        }
    };
    if (t == 0)
        for (long long j = 0; j < kRawStages && j < J; j++)
            issue(static_cast<unsigned>(j));
    /* Scales in two sets used in turn (ping, pong): the set being filled for k-tile j + 1 is
     * never copied while its loads are in flight. m0, n0, kt: the tile and k-tile of the next
     * fetch. */
    GroupScales<F, 4> ping, pong;
    long long m0 = 0, n0 = 0, kt = 0;
    const int nblocks = static_cast<int>(p.K / F::kBlock);
    ScaleRow row; /* this thread's B row of the tile of the next fetch */
    auto fetch = [&](GroupScales<F, 4> &v) { v.fetch(row, nblocks, static_cast<int>(kt), 0); };
    if (J > 0) {
        tile_of(p, blockIdx.x, &m0, &n0);
        row.set(p.b_scale, p.scale_cols, n0 + t, p.N);
        fetch(ping);
    }
    Ring<kRawStages> raw;
    Ring<kBfStages> bf;
    auto step = [&](long long j, const GroupScales<F, 4> &cur, GroupScales<F, 4> &nxt) {
        if (++kt == KT) {
            kt = 0;
            if (j + 1 < J) {
                tile_of(p, blockIdx.x + (j + 1) / KT * gridDim.x, &m0, &n0);
                row.set(p.b_scale, p.scale_cols, n0 + t, p.N);
            }
        }
        if (j + 1 < J)
            fetch(nxt);
        mbar_wait(sm.full_raw(raw.stage), raw.phase);
        mbar_wait(sm.empty_bf(bf.stage), bf.phase ^ 1u);
        decode_b<F, 4>(sm.at(sm.raw_b(raw.stage)), sm.at(sm.bf_b(bf.stage)), t, 0, cur);
        fence_proxy_async_smem();
        mbar_arrive(sm.full_bf(bf.stage));
        mbar_arrive(sm.empty_raw(raw.stage));
        /* warp 0 as a whole waits for every reader of the raw stage (staying converged), then
         * thread 0 refills it */
        if (warp == 0 && j + kRawStages < J) {
            mbar_wait(sm.empty_raw(raw.stage), raw.phase);
            if (t == 0)
                issue(raw.stage);
            __syncwarp();
        }
        raw.next();
        bf.next();
    };
    for (long long j = 0; j < J; j += 2) { /* J is even (gemm) */
        step(j, ping, pong);
        step(j + 1, pong, ping);
    }
}

/* ==================================================================== MMA warpgroups */

/* y[row, col..col+1] from two accumulators: fmaf(alpha, v, bias), or fmaf(alpha, v, y) when
 * accumulating into an fp32 y; bf16 y rounded once. Every case (edges, odd N, any alignment);
 * not inlined: the epilogue calls it where store_tile_pairs does not apply. */
__device__ __noinline__ void store_pair(const qf_ws_gemm_params &p, float alpha, long long row,
                                        long long col, float a0, float a1) {
    if (row >= p.M || col >= p.N)
        return;
    const bool two = col + 1 < p.N;
    float c0, c1; /* the bias, or y when accumulating: one rounding, fmaf */
    load_bias2(p.bias, col, two, c0, c1);
    float *const dst32 = static_cast<float *>(p.y) + row * p.N + col;
    if (p.y_fp32 && p.accumulate) {
        c0 = dst32[0];
        c1 = two ? dst32[1] : 0.0f;
    }
    a0 = fmaf(alpha, a0, c0);
    a1 = fmaf(alpha, a1, c1);
    if (p.y_fp32) {
        float *dst = dst32;
        if (two && (reinterpret_cast<unsigned long long>(dst) & 7u) == 0) {
            *reinterpret_cast<float2 *>(dst) = make_float2(a0, a1);
        } else {
            dst[0] = a0;
            if (two)
                dst[1] = a1;
        }
        return;
    }
    unsigned short *dst = static_cast<unsigned short *>(p.y) + row * p.N + col;
    if (two && (reinterpret_cast<unsigned long long>(dst) & 3u) == 0) {
        *reinterpret_cast<unsigned *>(dst) = float2_to_bf16x2(a0, a1);
    } else {
        dst[0] = float_to_half_bits<QF_DTYPE_BF16>(a0);
        if (two)
            dst[1] = float_to_half_bits<QF_DTYPE_BF16>(a1);
    }
}

/* This thread's part of an output tile of a bf16 y whose column pairs all lie aligned for one
 * store (N even, y at a multiple of 4 bytes; `pairs`, decided once per launch):
 * y[row + 8 h, n0 + 8 c + 2 q + j] from acc[4 c + 2 h + j] (c < 32, h and j < 2), each value v
 * as fmaf(alpha, v * pre, bias) rounded once: store_pair's arithmetic, inlined, one store per
 * pair. Other launches (an fp32 y, odd N, a misaligned y) call store_pair for each pair: its
 * cases inlined 64 times made half of the kernel's code and NVRTC compile, and calls alone
 * slowed the kernel by 6-8%; an fp32 copy of this function cost a quarter of the compile
 * (docs/bench.md). */
__device__ __forceinline__ void store_tile_pairs(const qf_ws_gemm_params &p, float alpha,
                                                 float pre, const float (&acc)[128],
                                                 long long row, long long n0, int q) {
    /* the parameters in registers, read once (not again after each store) */
    const long long N = p.N, cols = N - n0 - 2 * q; /* this thread's columns 8 c left in y */
    const bool in[2] = {row < p.M, row + 8 < p.M};
    const unsigned short *const bias = p.bias ? p.bias + n0 + 2 * q : nullptr;
    unsigned short *const y0 = static_cast<unsigned short *>(p.y) + row * N + n0 + 2 * q;
    unsigned short *const y[2] = {y0, y0 + 8 * N};
#pragma unroll
    for (int c = 0; c < 32; c++) {
        if (8 * c >= cols) /* N even: the pair's first column in y holds its second */
            break;
        float b0, b1;
        load_bias2(bias, 8 * c, true, b0, b1);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (!in[h])
                continue;
            const float v0 = acc[4 * c + 2 * h] * pre, v1 = acc[4 * c + 2 * h + 1] * pre;
            *reinterpret_cast<unsigned *>(y[h] + 8 * c) =
                float2_to_bf16x2(fmaf(alpha, v0, b0), fmaf(alpha, v1, b1));
        }
    }
}

/* NVFP4's alpha (nvfp4_alpha), or 1 for MXFP8 (no amaxes). */
__device__ __forceinline__ float epilogue_alpha(const qf_ws_gemm_params &p) {
    return p.amax_a ? nvfp4_alpha(p.amax_a, p.amax_b) : 1.0f;
}

/* Scale bytes of an MMA thread for one k-tile: its A group of rows r0 and r0 + 8, and its two B
 * groups. */
template <class F>
struct MmaScales {
    GroupScales<F, 1> a0, a1;
    GroupScales<F, 2> b;
};

/* An MMA warpgroup: its 64 rows of A's k-tiles, decoded into registers (thread: group lane % 4 of
 * rows g and g + 8 of its warp's 16), multiplied from there against B's 16-bit k-tiles, with the
 * previous k-tile's MMAs in flight meanwhile (two fragment sets used in turn); its share of B's
 * decoding (rows kDqThreads + 64 g .. + 63, two threads per row); and the epilogue of its half of
 * each output tile. */
template <class F>
__device__ __forceinline__ void mma_warps(const qf_ws_gemm_params &p, const Smem<F::kRawRow> &sm,
                                          int KT, long long tiles_mine) {
    const int t = threadIdx.x - kDqThreads, wg = t / 128, tw = t % 128;
    const int warp = tw / 32, lane = t % 32, q = lane % 4;
    const int r0 = 64 * wg + 16 * warp + lane / 4; /* this thread's first A row of the tile */
    const unsigned a_off = r0 * F::kRawRow + q * 4 * F::kGroupWords;
    const int rb = kDqThreads + 64 * wg + tw / 2, qb = 2 * (tw % 2); /* its B row and groups */
    /* NVFP4's products carry 2^-14 (two factors 2^-7): exact to undo before alpha */
    const float alpha = epilogue_alpha(p);
    /* a bf16 y whose column pairs all lie aligned for one store: store_tile_pairs */
    const bool pairs =
        !p.y_fp32 && p.N % 2 == 0 && (reinterpret_cast<unsigned long long>(p.y) & 3u) == 0;
    const float pre = F::kF16 ? kPow14 : 1.0f;
    Ring<kRawStages> raw;
    Ring<kBfStages> bf;
    float acc[128];
    unsigned frag[2][4][4]; /* [set][k-slice][register] */
    long long m0, n0;
    MmaScales<F> sc_ping, sc_pong; /* used in turn */
    const int nblocks = static_cast<int>(p.K / F::kBlock);
    ScaleRow row_a0, row_a1, row_b; /* this thread's scale rows of the tile */
    auto fetch = [&](MmaScales<F> &v, int kt) {
        v.a0.fetch(row_a0, nblocks, kt, q);
        v.a1.fetch(row_a1, nblocks, kt, q);
        v.b.fetch(row_b, nblocks, kt, qb);
    };
    /* k-tile kt of the tile into fragment set X: this thread's B groups into the 16-bit stage, its
     * A groups into set X (cur's scales; the next k-tile's go to nxt), then the four MMAs once
     * every part of B has arrived; set X was last read by the MMAs of k-tile kt - 2, which the
     * wait of k-tile kt - 1 covered */
    auto step = [&](int kt, auto X, const MmaScales<F> &cur, MmaScales<F> &nxt) {
        if (kt + 1 < KT)
            fetch(nxt, kt + 1);
        mbar_wait(sm.full_raw(raw.stage), raw.phase);
        const unsigned char *src = sm.at(sm.raw_a(raw.stage));
        unsigned w[2][F::kGroupWords];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const unsigned char *g = src + a_off + 8 * i * F::kRawRow;
            if constexpr (F::kGroupWords == 4) {
                const uint4 v = *reinterpret_cast<const uint4 *>(g);
                w[i][0] = v.x, w[i][1] = v.y, w[i][2] = v.z, w[i][3] = v.w;
            } else {
                const uint2 v = *reinterpret_cast<const uint2 *>(g);
                w[i][0] = v.x, w[i][1] = v.y;
            }
        }
        mbar_wait(sm.empty_bf(bf.stage), bf.phase ^ 1u);
        decode_b<F, 2>(sm.at(sm.raw_b(raw.stage)), sm.at(sm.bf_b(bf.stage)), rb, qb, cur.b);
        mbar_arrive(sm.empty_raw(raw.stage));
        fence_proxy_async_smem();
        mbar_arrive(sm.full_bf(bf.stage));
        unsigned out[2][4][2];
        F::decode(w[0], F::scale(cur.a0[0]), out[0]);
        F::decode(w[1], F::scale(cur.a1[0]), out[1]);
        unsigned(&f)[4][4] = frag[decltype(X)::value];
#pragma unroll
        for (int s = 0; s < 4; s++) {
            f[s][0] = out[0][s][0];
            f[s][1] = out[1][s][0];
            f[s][2] = out[0][s][1];
            f[s][3] = out[1][s][1];
        }
        mbar_wait(sm.full_bf(bf.stage), bf.phase);
        const unsigned b_tile = sm.bf_b(bf.stage);
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < kTileK / 16; s++)
            wgmma_m64n256k16_rs<F::kF16>(acc, f[s], sw128_desc(b_tile, 32 * s), 1);
        wgmma_commit();
        wgmma_fence_operands(acc);
        wgmma_wait<1>(); /* the previous k-tile's MMAs are done: release its B stage */
        if (kt > 0)
            mbar_arrive(sm.empty_bf(bf.prev()));
        raw.next();
        bf.next();
    };
    for (long long i = 0; i < tiles_mine; i++) {
        tile_of(p, blockIdx.x + i * gridDim.x, &m0, &n0);
        row_a0.set(p.a_scale, p.scale_cols, m0 + r0, p.M);
        row_a1.set(p.a_scale, p.scale_cols, m0 + r0 + 8, p.M);
        row_b.set(p.b_scale, p.scale_cols, n0 + rb, p.N);
        fetch(sc_ping, 0);
#pragma unroll
        for (int x = 0; x < 128; x++)
            acc[x] = 0.0f;
        for (int kt = 0; kt < KT; kt += 2) { /* KT is even (gemm) */
            step(kt, Set<0>(), sc_ping, sc_pong);
            step(kt + 1, Set<1>(), sc_pong, sc_ping);
        }
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
        if (KT > 0)
            mbar_arrive(sm.empty_bf(bf.prev()));
        const long long row = m0 + r0;
        if (pairs) {
            store_tile_pairs(p, alpha, pre, acc, row, n0, q);
        } else {
#pragma unroll
            for (int c = 0; c < 32; c++) {
                const long long col = n0 + 8 * c + 2 * q;
                store_pair(p, alpha, row, col, acc[4 * c] * pre, acc[4 * c + 1] * pre);
                store_pair(p, alpha, row + 8, col, acc[4 * c + 2] * pre, acc[4 * c + 3] * pre);
            }
        }
    }
}

/* The GEMM of this block (QF_WS_THREADS threads; grid: at most one block per output tile;
 * dynamic shared memory QF_WS_SMEM_BYTES(F::kRawRow)). FA and FB: the formats of A and B. */
template <class FA, class FB>
__device__ __forceinline__ void gemm(const qf_ws_gemm_params &p) {
    static_assert(FA::kF16 == FB::kF16 && FA::kRawRow == FB::kRawRow, "one family");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned base0 = smem_u32(smem_raw);
    const unsigned pad = (1024u - (base0 & 1023u)) & 1023u;
    const Smem<FA::kRawRow> sm = {base0 + pad, smem_raw + pad};
    static_assert(Smem<FA::kRawRow>::kBars + 16 * 8 + 1008 <= QF_WS_SMEM_BYTES(FA::kRawRow) &&
                      QF_WS_SMEM_BYTES(FA::kRawRow) <= 227 * 1024,
                  "the layout (with the alignment pad) fits the launch's dynamic shared memory, "
                  "which fits an SM");
    static_assert(2 * (kRawStages + kBfStages) <= 16, "QF_WS_SMEM_BYTES holds 16 barriers");
    if (threadIdx.x == 0) {
        for (int s = 0; s < kRawStages; s++) {
            mbar_init(sm.full_raw(s), 1);
            mbar_init(sm.empty_raw(s), kThreads);
        }
        for (int s = 0; s < kBfStages; s++) {
            mbar_init(sm.full_bf(s), kThreads);
            mbar_init(sm.empty_bf(s), kMmaThreads);
        }
        fence_barrier_init();
    }
    __syncthreads();
    const long long tiles =
        ((p.M + kTileM - 1) / kTileM) * ((p.N + kTileN - 1) / kTileN);
    const long long mine =
        blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    /* k-tiles, rounded up to an even count: both loops step in pairs with no tail copy of a step
     * (that copy was a third of the kernel's NVRTC compile, docs/bench.md). An extra k-tile lies
     * wholly past K, where TMA fills the data with zeros and the scales read 1.0: it adds exact
     * zeros. */
    const long long KT = ((p.K + 2 * kTileK - 1) / (2 * kTileK)) * 2;
    if (threadIdx.x < kDqThreads) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kDqRegs));
        dequant_warps<FB>(p, sm, KT, mine * KT);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kMmaRegs));
        mma_warps<FA>(p, sm, static_cast<int>(KT), mine);
    }
}

} // namespace ws
} // namespace

#endif /* QF_DEV_WS_GEMM_CUH */
