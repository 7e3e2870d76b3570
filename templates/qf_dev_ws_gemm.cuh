/* qf_dev_ws_gemm.cuh: the block-scaled GEMM of the MXFP8 and NVFP4 modules on Hopper (sm_90a):
 * packed data in by TMA, dequantized in shared memory, multiplied by warpgroup MMAs. An in-memory
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
 * element is decoded once per block, by one of the three warpgroups:
 * - The dequantizing warpgroup (threads 0 .. QF_WS_DQ_THREADS - 1) decodes B: each thread its
 *   16-byte chunks of a raw stage, with their block scales (fetched one k-tile ahead into
 *   registers), into the 16-bit K-major tile of one of QF_WS_BF_STAGES stages, written with the
 *   128-byte swizzle the wgmma descriptors read (qf_dev_wgmma.cuh); then it fences for the async
 *   proxy and arrives on full_bf. Its thread 0 issues the TMA loads of the packed A and B
 *   k-tiles into QF_WS_RAW_STAGES raw stages (full_raw; a stage is refilled once all 384
 *   threads have arrived on its empty_raw).
 * - Two MMA warpgroups: warpgroup g owns rows 64 g .. 64 g + 63 of the tile and all 256 columns
 *   (128 fp32 accumulators per thread). Per k-tile it decodes its own 64 rows of A into the
 *   stage (while its MMAs of the previous k-tile run), syncs its 128 threads (named barrier
 *   1 + g), waits on full_bf, issues four m64n256k16 MMAs, keeps one k-tile of MMAs in flight and
 *   releases the previous k-tile's B stage (empty_bf). The epilogue stores from the
 *   accumulators while the dequantizing warpgroup already fills the next tile's stages.
 * Every barrier's stage and phase follow from the block's running k-tile count (Ring). The split
 * of the decoding (B: 16 K elements per k-tile, A: 4 K per MMA warpgroup) keeps the MMA
 * warpgroups' share under the time of their own MMAs. */
#ifndef QF_DEV_WS_GEMM_CUH
#define QF_DEV_WS_GEMM_CUH

#include "qf_dev_dequant.cuh"
#include "qf_dev_wgmma.cuh"
#include "qf_formats.h"

namespace {
namespace ws {

constexpr int kThreads = QF_WS_THREADS, kDqThreads = QF_WS_DQ_THREADS;
constexpr int kMmaThreads = kThreads - kDqThreads;
constexpr int kTileM = QF_WS_TILE_M, kTileN = QF_WS_TILE_N, kTileK = QF_WS_TILE_K;
constexpr int kRawStages = QF_WS_RAW_STAGES, kBfStages = QF_WS_BF_STAGES;
constexpr int kGroupM = 8;                            /* tile rows per raster group */
constexpr unsigned kBfA = kTileM * kTileK * 2;        /* one 16-bit A tile: 16 KiB */
constexpr unsigned kBfB = kTileN * kTileK * 2;        /* one 16-bit B tile: 32 KiB */
static_assert(kMmaThreads == 256 && kTileM == 128 && kTileN == 256 && kTileK == 64,
              "two MMA warpgroups of m64n256, k-tiles of one 128-byte bf16 row");
/* One block per SM: 65536 / 384 leaves 168 registers per thread, room for the MMA warps' 128
 * accumulators. (A block of 512 threads with setmaxnreg 64 / 192 did not compile: ptxas refused
 * the m64n256 MMA at the launch bound's 128 registers; it needs 154.) */
static_assert(kDqThreads == 128 && kThreads == 384, "one dequantizing warpgroup");
/* An MMA warpgroup's threads write A rows that other warps of it multiply (MXFP8: rows tw / 4 and
 * tw / 4 + 32), and wgmma.wait_group covers only the waiting warp. With 3 stages the named
 * barrier of k-tile j - 1 shows that every warp has waited for its MMAs of k-tile j - 3, the last
 * to read the stage that k-tile j writes; with 2 it would not. */
static_assert(kBfStages >= 3, "A stages are reused only after a warpgroup barrier proves them free");

/* ==================================================================== formats */

/* MXFP8: one byte per element (E4M3 or E5M2 = DT), one E8M0 scale per 32 along K; a 16-byte
 * chunk is 16 elements of one block, two bf16 chunks. */
template <int DT>
struct Mx {
    static constexpr bool kF16 = false;               /* MMAs on bf16 */
    static constexpr int kRawRow = QF_WS_RAW_ROW_MXFP8;
    static constexpr int kChunkElems = 16, kBlock = 32;
    static constexpr unsigned kOne = 127u;            /* the E8M0 byte of 1.0 */
    /* The scale byte of a chunk (its one block), at s. */
    __device__ static unsigned fetch(const uint8_t *s) { return __ldg(s); }
    /* 16 elements q times 2^(b - 127) -> 8 bf16 pairs, in order. */
    __device__ static void decode(uint4 q, unsigned sc, unsigned (&out)[8]) {
        const float s = e8m0_value(sc & 0xFFu);
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float a, b, c, d;
            fp8x2_to_float2<DT>(w[i], a, b);
            fp8x2_to_float2<DT>(w[i] >> 16, c, d);
            out[2 * i] = float2_to_bf16x2(a * s, b * s);
            out[2 * i + 1] = float2_to_bf16x2(c * s, d * s);
        }
    }
};

/* NVFP4: two E2M1 elements per byte (element 2j in the low nibble of byte j), one E4M3 scale per
 * 16 along K; a 16-byte chunk is 32 elements of two blocks, four f16 chunks. */
struct Nv {
    static constexpr bool kF16 = true;                /* MMAs on f16 (values x 2^-7) */
    static constexpr int kRawRow = QF_WS_RAW_ROW_NVFP4;
    static constexpr int kChunkElems = 32, kBlock = 16;
    static constexpr unsigned kOne = 0x3838u;         /* two E4M3 bytes of 1.0 */
    /* The two scale bytes of a chunk (blocks kb and kb + 1: both real when kb is, K being a
     * multiple of 32), byte loads: the scale matrix may sit at any address. */
    __device__ static unsigned fetch(const uint8_t *s) {
        return __ldg(s) | static_cast<unsigned>(__ldg(s + 1)) << 8;
    }
    /* 32 elements q times their blocks' scales x 2^-7 -> 16 f16 pairs. Each group of 8
     * elements (one 32-bit word) is stored as the pairs (0, 4), (1, 5), (2, 6), (3, 7): the same
     * permutation of k within each aligned group of 8 for A and B, which leaves every dot
     * product unchanged. */
    __device__ static void decode(uint4 q, unsigned sc, unsigned (&out)[16]) {
        unsigned s[2]; /* (s0, s0) and (s1, s1) x 2^7 */
        e4m3_pairs_pow7(sc, 0x1100u, s[0], s[1]);
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned sv = s[i / 2];
            out[4 * i] = hmul2(e2m1x2<0>(w[i]), sv);
            out[4 * i + 1] = hmul2(e2m1x2<1>(w[i]), sv);
            out[4 * i + 2] = hmul2(e2m1x2<2>(w[i]), sv);
            out[4 * i + 3] = hmul2(e2m1x2<3>(w[i]), sv);
        }
    }
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

/* Shared memory of a family whose raw rows are RAW bytes: the 16-bit A and B tiles (kBfStages
 * each), the raw A and B stages (kRawStages each), then the mbarriers; one 1024-byte aligned
 * base, as a shared address (descriptors, barriers, TMA) and as a generic pointer (data). */
template <int RAW>
struct Smem {
    static constexpr unsigned kRawA = kTileM * RAW, kRawB = kTileN * RAW;
    static constexpr unsigned kBfB = kBfStages * kBfA;              /* offsets */
    static constexpr unsigned kRawAOff = kBfB + kBfStages * ws::kBfB;
    static constexpr unsigned kRawBOff = kRawAOff + kRawStages * kRawA;
    static constexpr unsigned kBars = kRawBOff + kRawStages * kRawB;
    unsigned base;
    unsigned char *ptr;
    __device__ unsigned bf_a(unsigned s) const { return base + s * kBfA; }
    __device__ unsigned bf_b(unsigned s) const { return base + kBfB + s * ws::kBfB; }
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

/* Waits until the 128 threads of named barrier id (1, 2: one per MMA warpgroup) arrive. */
__device__ __forceinline__ void warpgroup_sync(int id) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

/* ==================================================================== dequantization */

/* One warpgroup's part of R rows of an operand tile: 16-byte chunk i = q * 128 + t (t: the
 * thread in the warpgroup), row i / kCR, chunk t % kCR of that row; and the scale bytes of those
 * chunks for one k-tile. Padding is never read: rows past `rows` and blocks past K / block get
 * the format's 1.0 (their data is TMA's zero fill). */
template <class F, int R>
struct Part {
    static constexpr int kCR = F::kRawRow / 16;   /* chunks per row */
    static constexpr int kPer = R * kCR / 128;    /* chunks per thread */
    static constexpr int kRowStep = 128 / kCR;    /* rows between a thread's chunks */
    static_assert(kPer * 128 == R * kCR, "whole chunks per thread");
    unsigned v[kPer];

    __device__ void fetch(const uint8_t *scale, long long scale_cols, long long row0,
                          long long rows, long long K, long long kt, int t) {
        const int c = t % kCR, r0 = t / kCR;
        const long long kb = (kt * kTileK + c * F::kChunkElems) / F::kBlock;
        const bool k_real = kb < K / F::kBlock;
        const uint8_t *s = scale + (row0 + r0) * scale_cols + kb;
#pragma unroll
        for (int q = 0; q < kPer; q++)
            v[q] = k_real && row0 + r0 + q * kRowStep < rows
                       ? F::fetch(s + q * kRowStep * scale_cols)
                       : F::kOne;
    }
};

/* Decodes this thread's chunks (P's) of a raw k-tile (rows of F::kRawRow bytes at raw) into the
 * swizzled 16-bit tile at bf (rows of 128 bytes), with P's scales. Plain shared-memory accesses,
 * which the compiler may interleave across chunks (the barrier waits and fences around a call
 * are asm with memory clobbers, which it never moves them across). */
template <class F, int R>
__device__ __forceinline__ void dequant(const unsigned char *raw, unsigned char *bf,
                                        const Part<F, R> &sc, int t) {
    using P = Part<F, R>;
    constexpr int kOut = F::kChunkElems / 8; /* 16-byte chunks of 16-bit values per raw chunk */
    const int c = t % P::kCR;
#pragma unroll
    for (int q = 0; q < P::kPer; q++) {
        const int r = t / P::kCR + q * P::kRowStep;
        const uint4 v = *reinterpret_cast<const uint4 *>(raw + 16 * (q * 128 + t));
        unsigned out[F::kChunkElems / 2];
        F::decode(v, sc.v[q], out);
#pragma unroll
        for (int u = 0; u < kOut; u++)
            *reinterpret_cast<uint4 *>(bf + sw128_offset(r, c * kOut + u)) =
                make_uint4(out[4 * u], out[4 * u + 1], out[4 * u + 2], out[4 * u + 3]);
    }
}

/* The dequantizing warpgroup: B's k-tiles (format F), and (thread 0) the TMA loads of A and B
 * (rows of F::kRawRow bytes for both: one family). */
template <class F>
__device__ __forceinline__ void dequant_warps(const qf_ws_gemm_params &p,
                                              const Smem<F::kRawRow> &sm, long long KT,
                                              long long J) {
    using S = Smem<F::kRawRow>;
    const int t = threadIdx.x, warp = t / 32;
    /* the TMA load of the block's k-tile j into raw stage s (thread 0) */
    auto issue = [&](long long j, unsigned s) {
        long long m0, n0;
        tile_of(p, blockIdx.x + j / KT * gridDim.x, &m0, &n0);
        const unsigned full = sm.full_raw(s);
        const int x = static_cast<int>(j % KT) * F::kRawRow;
        mbar_arrive_expect_tx(full, S::kRawA + S::kRawB);
        tma_load_2d(sm.raw_a(s), &p.tma_a, full, x, static_cast<int>(m0));
        tma_load_2d(sm.raw_b(s), &p.tma_b, full, x, static_cast<int>(n0));
    };
    if (t == 0)
        for (long long j = 0; j < kRawStages && j < J; j++)
            issue(j, static_cast<unsigned>(j));
    /* Scales in two sets used in turn (ping, pong): the set being filled for k-tile j + 1 is
     * never copied while its loads are in flight. m0, n0, kt: the tile and k-tile of the next
     * fetch. */
    Part<F, kTileN> ping, pong;
    long long m0 = 0, n0 = 0, kt = 0;
    if (J > 0) {
        tile_of(p, blockIdx.x, &m0, &n0);
        ping.fetch(p.b_scale, p.scale_cols, n0, p.N, p.K, 0, t);
    }
    Ring<kRawStages> raw;
    Ring<kBfStages> bf;
    auto step = [&](long long j, const Part<F, kTileN> &cur, Part<F, kTileN> &nxt) {
        if (++kt == KT) {
            kt = 0;
            if (j + 1 < J)
                tile_of(p, blockIdx.x + (j + 1) / KT * gridDim.x, &m0, &n0);
        }
        if (j + 1 < J)
            nxt.fetch(p.b_scale, p.scale_cols, n0, p.N, p.K, kt, t);
        mbar_wait(sm.full_raw(raw.stage), raw.phase);
        mbar_wait(sm.empty_bf(bf.stage), bf.phase ^ 1u);
        dequant(sm.at(sm.raw_b(raw.stage)), sm.at(sm.bf_b(bf.stage)), cur, t);
        fence_proxy_async_smem();
        mbar_arrive(sm.full_bf(bf.stage));
        mbar_arrive(sm.empty_raw(raw.stage));
        /* warp 0 as a whole waits for every reader of the raw stage (staying converged), then
         * thread 0 refills it */
        if (warp == 0 && j + kRawStages < J) {
            mbar_wait(sm.empty_raw(raw.stage), raw.phase);
            if (t == 0)
                issue(j + kRawStages, raw.stage);
            __syncwarp();
        }
        raw.next();
        bf.next();
    };
    long long j = 0;
    for (; j + 1 < J; j += 2) {
        step(j, ping, pong);
        step(j + 1, pong, ping);
    }
    if (j < J)
        step(j, ping, pong);
}

/* ==================================================================== MMA warpgroups */

/* y[row, col..col+1] from two accumulators: fmaf(alpha, v, bias), or fmaf(alpha, v, y) when
 * accumulating into an fp32 y; bf16 y rounded once. */
__device__ __forceinline__ void store_pair(const qf_ws_gemm_params &p, float alpha, long long row,
                                           long long col, float a0, float a1) {
    if (row >= p.M || col >= p.N)
        return;
    const bool two = col + 1 < p.N;
    float c0 = 0.0f, c1 = 0.0f; /* the bias, or y when accumulating: one rounding, fmaf */
    if (p.bias) {
        c0 = __uint_as_float(static_cast<unsigned>(p.bias[col]) << 16);
        c1 = two ? __uint_as_float(static_cast<unsigned>(p.bias[col + 1]) << 16) : 0.0f;
    }
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
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(a0));
        dst[0] = h;
        if (two) {
            asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(a1));
            dst[1] = h;
        }
    }
}

/* NVFP4's alpha (nvfp4_alpha), or 1 for MXFP8 (no amaxes). */
__device__ __forceinline__ float epilogue_alpha(const qf_ws_gemm_params &p) {
    return p.amax_a ? nvfp4_alpha(p.amax_a, p.amax_b) : 1.0f;
}

/* An MMA warpgroup: its 64 rows of A's k-tiles (decoded here, while the previous k-tile's MMAs
 * run), the MMAs against B's k-tiles, and the epilogue of its half of each output tile. */
template <class F>
__device__ __forceinline__ void mma_warps(const qf_ws_gemm_params &p, const Smem<F::kRawRow> &sm,
                                          int KT, long long tiles_mine) {
    const int t = threadIdx.x - kDqThreads, wg = t / 128, tw = t % 128;
    const int warp = tw / 32, lane = t % 32;
    const unsigned raw_half = wg * 64 * F::kRawRow, bf_half = wg * 64 * 128;
    /* NVFP4's products carry 2^-14 (two factors 2^-7): exact to undo before alpha */
    const float alpha = epilogue_alpha(p);
    const float pre = F::kF16 ? kPow14 : 1.0f;
    Part<F, 64> ping, pong; /* scales used in turn, as in dequant_warps */
    Ring<kRawStages> raw;
    Ring<kBfStages> bf;
    float acc[128];
    long long m0, n0, row0;
    /* k-tile kt of the tile: decodes this warpgroup's rows of A with cur's scales (the next
     * k-tile's go to nxt), then issues the MMAs */
    auto step = [&](int kt, const Part<F, 64> &cur, Part<F, 64> &nxt) {
        if (kt + 1 < KT)
            nxt.fetch(p.a_scale, p.scale_cols, row0, p.M, p.K, kt + 1, tw);
        mbar_wait(sm.full_raw(raw.stage), raw.phase);
        /* its MMAs of kBfStages k-tiles ago were the last to read this stage's A rows */
        const unsigned a_tile = sm.bf_a(bf.stage) + bf_half;
        dequant(sm.at(sm.raw_a(raw.stage) + raw_half), sm.at(a_tile), cur, tw);
        mbar_arrive(sm.empty_raw(raw.stage));
        fence_proxy_async_smem();
        warpgroup_sync(1 + wg);
        mbar_wait(sm.full_bf(bf.stage), bf.phase);
        const unsigned b_tile = sm.bf_b(bf.stage);
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kTileK / 16; k++)
            wgmma_m64n256k16<F::kF16>(acc, sw128_desc(a_tile, 32 * k), sw128_desc(b_tile, 32 * k),
                                      1);
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
        row0 = m0 + wg * 64;
        ping.fetch(p.a_scale, p.scale_cols, row0, p.M, p.K, 0, tw);
#pragma unroll
        for (int x = 0; x < 128; x++)
            acc[x] = 0.0f;
        int kt = 0;
        for (; kt + 1 < KT; kt += 2) {
            step(kt, ping, pong);
            step(kt + 1, pong, ping);
        }
        if (kt < KT)
            step(kt, ping, pong);
        wgmma_wait<0>();
        wgmma_fence_operands(acc);
        if (KT > 0)
            mbar_arrive(sm.empty_bf(bf.prev()));
        const long long row = row0 + 16 * warp + lane / 4;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const long long col = n0 + 8 * c + 2 * (lane % 4);
            store_pair(p, alpha, row, col, acc[4 * c] * pre, acc[4 * c + 1] * pre);
            store_pair(p, alpha, row + 8, col, acc[4 * c + 2] * pre, acc[4 * c + 3] * pre);
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
            mbar_init(sm.full_bf(s), kDqThreads);
            mbar_init(sm.empty_bf(s), kMmaThreads);
        }
        fence_barrier_init();
    }
    __syncthreads();
    const long long tiles =
        ((p.M + kTileM - 1) / kTileM) * ((p.N + kTileN - 1) / kTileN);
    const long long mine =
        blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const long long KT = (p.K + kTileK - 1) / kTileK;
    if (threadIdx.x < kDqThreads)
        dequant_warps<FB>(p, sm, KT, mine * KT);
    else
        mma_warps<FA>(p, sm, static_cast<int>(KT), mine);
}

} // namespace ws
} // namespace

#endif /* QF_DEV_WS_GEMM_CUH */
