/* sm90_nvfp4_gemm.cu: block-scaled NVFP4 GEMM for Hopper (runs on sm_89 and newer).
 *
 * y[M, N] = bf16(alpha * sum_k deq(A)[m, k] deq(B)[n, k] + bias[n]) (numerics 2.4), with A [M, K/2]
 * and B [N, K/2] packed E2M1 (element 2j in the low nibble of byte j), row-major and K-major, one
 * E4M3 scale per 16 consecutive elements along K read from the compact, padded scale matrices
 * (qf_nv_gemm_params), deq = E2M1 value x float(E4M3 scale) and
 * alpha = fl(fl(amax_a * amax_b) * fl(1/(6*6*448*448))) from the two device amaxes. Neither
 * operand is dequantized to memory. The oracle is qf_gemm_nvfp4_ref (runtime/ref/ref_nvfp4.h), in
 * double; the op is runtime/ops_nvfp4_gemm.c.
 *
 * Exactness: an E2M1 value (<= 6, one mantissa bit) times an E4M3 scale (four significant bits,
 * 2^-9 .. 448) has at most five significant bits and lies in [2^-10, 2688], so it is an f16
 * number, and so is that value times 2^-7 (in [2^-17, 21]; an f16 normal unless the scale is an
 * E4M3 subnormal, and then an exact f16 subnormal). Every operand element therefore enters the
 * tensor cores exactly, as deq * 2^-7; mma.sync.m16n8k16 multiplies f16 pairs exactly and sums
 * in fp32, and the epilogue multiplies by 2^14 (exact) and then by alpha.
 *
 * Structure (one block of 256 threads = 8 warps per TILE_M x TILE_N tile of y; qf_formats.h):
 * - Grid: one block per output tile, in groups of 8 tile rows so that the blocks resident at one
 *   time share their A and B panels in L2.
 * - Main loop over k-tiles of TILE_K = 256 elements (128 bytes of each row), QF_NV_GEMM_STAGES
 *   deep (2 on sm_89): cp.async copies the A and B tiles (16-byte chunks, zero-filled past M, N
 *   or K; each 128-byte row stored with its chunks XOR-swizzled by row % 8 so that ldmatrix is
 *   conflict-free) and the rows' 16 scale bytes (4-byte copies). Only scale bytes of real rows
 *   (< M, < N) and real blocks (< K/16) are read; the rest is zero-filled, so poisoned padding
 *   cannot change y. One barrier per k-tile.
 * - Math: warps form a 2 x 4 grid of 64 x 32 warp tiles. Per 64-element k-step a warp loads its
 *   packed fragments with ldmatrix (one 32-bit register = 8 elements of one row, all in one scale
 *   block), and for each of the 4 k16 sub-steps decodes them to f16 pairs (bit placement, then
 *   one f16x2 multiply by the block's scale x 2^7) and issues one m16n8k16 MMA per m16n8 block
 *   straight into the fp32 accumulator. The k order inside a k-step is permuted the same way for
 *   A and B (see e2m1x2), which leaves every dot product unchanged.
 * - A NaN scale byte (0x7F/0xFF) decodes to an f16 NaN and makes every output it reaches NaN.
 * - Epilogue: fmaf(alpha, acc * 2^14, bias) in fp32, rounded to bf16 once.
 *
 * Compiled for sm_90a, the entry is the warp-specialized GEMM of qf_dev_ws_gemm.cuh instead
 * (TMA loads, the same exact f16 decode, B into shared memory and A into registers, wgmma), with
 * its own parameter block
 * (qf_ws_gemm_params), block size, persistent grid and shared memory.
 *
 * M and N are arbitrary; K must be a multiple of 32 (checked by the op), so that each row of
 * packed data is a whole number of 16-byte chunks. Nothing but M, N and K varies at run time: a
 * new shape never recompiles. Compiles under NVRTC with qf_formats.h only.
 */
#include "qf_dev_dequant.cuh"
#include "qf_dev_mma.cuh"
#include "qf_dev_module.cuh"
#include "qf_formats.h"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !QF_GEMM_STAGED
#include "qf_dev_ws_gemm.cuh"
#endif

namespace {

constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kTileN = QF_NV_GEMM_TILE_N;
constexpr int kTileK = QF_NV_GEMM_TILE_K;            /* elements per k-tile */
#if __CUDA_ARCH__ >= 900
constexpr int kStages = QF_NV_GEMM_STAGES;
#else
constexpr int kStages = QF_NV_GEMM_STAGES_SM89;      /* 72 KiB of shared memory per block */
#endif
constexpr int kBlock = 16;                           /* elements per scale block (numerics 2.4) */
constexpr int kRowBytes = kTileK / 2;                /* one smem row = one k-tile of one row */
constexpr int kScaleRowBytes = kTileK / kBlock;      /* scale bytes of one row per k-tile */
constexpr int kStepBytes = 32;                       /* one k-step: 64 elements, 4 blocks */
constexpr int kSteps = kRowBytes / kStepBytes;
constexpr int kWarps = kThreads / 32;
constexpr int kWarpN = 32;                           /* columns per warp */
constexpr int kWarpsN = kTileN / kWarpN;             /* 4 */
constexpr int kWarpsM = kWarps / kWarpsN;            /* 2 */
constexpr int kWarpM = kTileM / kWarpsM;             /* 64 rows per warp */
constexpr int kMI = kWarpM / 16;                     /* m16 fragments per warp: 4 */
constexpr int kNI = kWarpN / 8;                      /* n8 fragments per warp: 4 */
constexpr int kTileABytes = kTileM * kRowBytes;
constexpr int kTileBBytes = kTileN * kRowBytes;
constexpr int kScaleOffset = kTileABytes + kTileBBytes; /* A scale rows, then B scale rows */
constexpr int kStageBytes = kScaleOffset + (kTileM + kTileN) * kScaleRowBytes;
constexpr int kChunksA = kTileABytes / 16 / kThreads; /* 16-byte cp.async copies per thread */
constexpr int kChunksB = kTileBBytes / 16 / kThreads;
constexpr int kScalePieces = (kTileM + kTileN) * kScaleRowBytes / 4 / kThreads; /* 4-byte */
constexpr int kGroupM = 8;                           /* tile rows per raster group */

static_assert(kTileM == QF_NV_GEMM_TILE_M, "qfuse-gen's tile_m must match qf_formats.h");
static_assert(kThreads == 256 && kWarpsM * kWarpsN == kWarps, "8 warps, kWarpsM x kWarpsN");
static_assert(kTileN == 128 && kWarpM == 64, "warp grid 2 x 4 of 64 x 32 warp tiles");
static_assert(kRowBytes == 128 && kSteps == 4, "swizzle and scale reads assume 128-byte k-tiles");
static_assert(kScaleRowBytes == 16, "4 scale bytes per row and k-step");
static_assert(kChunksA * kThreads * 16 == kTileABytes && kChunksB * kThreads * 16 == kTileBBytes,
              "whole 16-byte chunks per thread");
static_assert(kScalePieces * kThreads * 4 == (kTileM + kTileN) * kScaleRowBytes,
              "whole 4-byte scale pieces per thread");
static_assert(QF_NV_GEMM_SMEM_BYTES_FOR(kStages) == kStages * kStageBytes,
              "QF_NV_GEMM_SMEM_BYTES out of sync with the kernel's shared-memory layout");

/* ==================================================================== PTX wrappers */

/* 4 bytes global -> shared; only the first n (0..4) are read, the rest are written as zeros. */
__device__ __forceinline__ void cp_async4(unsigned dst, const void *src, int n) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
}

__device__ __forceinline__ unsigned lds_u32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

/* d = A(16x16) B(16x8) + d in f16 x f16 -> f32 (products exact, fp32 sums). */
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ==================================================================== decoding */

/* The scales of blocks j and j+2 of word w (4 scale bytes, blocks 4s .. 4s+3 of one row), with
 * j = t/2 picked by the lane's selector sel: e4m3_pairs_pow7 (qf_dev_dequant.cuh). */
__device__ __forceinline__ void scale_pairs(unsigned w, unsigned sel, unsigned &s0,
                                            unsigned &s1) {
    e4m3_pairs_pow7(w, sel, s0, s1);
}

/* ==================================================================== tiles */

/* Issues the cp.async copies of k-tile kt of A and B and of their scale bytes into one stage.
 * Data: kChunksA and kChunksB 16-byte chunks per thread, rows 32 apart; chunks past M, N or K/2
 * bytes are zero-filled. Scales: kScalePieces 4-byte pieces per thread (row = piece / 4 over the
 * A rows then the B rows); bytes past the row's last real block, and rows past M or N, are
 * zero-filled and never read. The scale row stride is a multiple of 4: aligned pieces. */
__device__ __forceinline__ void load_stage(const qf_nv_gemm_params &p, unsigned stage,
                                           long long m0, long long n0, long long kt) {
    const int tid = threadIdx.x, c = tid & 7, r0 = tid >> 3;
    const long long row_bytes = p.K / 2, kb = kt * kRowBytes + c * 16;
    const bool k_ok = kb < row_bytes;
    const unsigned swz = static_cast<unsigned>((c ^ (r0 & 7)) << 4);
    copy_tile<kChunksA, kRowBytes>(stage, p.a, m0, p.M, row_bytes, kb, k_ok, r0, swz);
    copy_tile<kChunksB, kRowBytes>(stage + kTileABytes, p.b, n0, p.N, row_bytes, kb, k_ok, r0,
                                   swz);
    const long long blocks = p.K / kBlock;
#pragma unroll
    for (int j = 0; j < kScalePieces; j++) {
        const int piece = tid + kThreads * j, r = piece >> 2, first = (piece & 3) * 4;
        const bool is_a = r < kTileM;
        const long long row = is_a ? m0 + r : n0 + (r - kTileM);
        const long long kblk = kt * kScaleRowBytes + first;
        const long long left = blocks - kblk;
        int n = left >= 4 ? 4 : left > 0 ? static_cast<int>(left) : 0;
        if (row >= (is_a ? p.M : p.N))
            n = 0;
        const uint8_t *base = is_a ? p.a_scale : p.b_scale;
        cp_async4(stage + kScaleOffset + static_cast<unsigned>(r * kScaleRowBytes + first),
                  n ? base + row * p.scale_cols + kblk : base, n);
    }
}

/* Per-thread constants of the fragment and scale loads. */
struct Lane {
    unsigned a_off;   /* byte offset of this lane's ldmatrix row in the A tile (fragment 0) */
    unsigned b_off;   /* same in the B tile (fragment pair 0) */
    unsigned a_swz;   /* (chunk bit ^ row % 8) << 4 for A; k-step s XORs in s << 5 */
    unsigned b_swz;
    unsigned sa_off;  /* scale bytes of row g of fragment 0 (A), relative to the stage */
    unsigned sb_off;  /* same for column g of B fragment 0 */
    unsigned sel;     /* prmt selector: bytes t/2, t/2, 2 + t/2, 2 + t/2 */
};

__device__ __forceinline__ Lane make_lane() {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN, g = lane >> 2, h = (lane & 3) >> 1;
    Lane l;
    /* A: lanes 0-15 address rows 0-15 of the m16 fragment at k-step bytes 0-15, lanes 16-31 the
     * same rows at bytes 16-31: registers {row g, row g+8} x {bytes 4t.., bytes 16+4t..}. */
    l.a_off = static_cast<unsigned>((wm * kWarpM + (lane & 15)) * kRowBytes);
    l.a_swz = static_cast<unsigned>(((lane >> 4) ^ (lane & 7)) << 4);
    /* B: lanes 0-7 rows 0-7 bytes 0-15, 8-15 rows 0-7 bytes 16-31, 16-23 rows 8-15 bytes 0-15,
     * 24-31 rows 8-15 bytes 16-31: two n8 fragments, each {bytes 4t.., bytes 16+4t..}. */
    l.b_off = static_cast<unsigned>((wn * kWarpN + (lane & 7) + ((lane >> 4) << 3)) * kRowBytes);
    l.b_swz = static_cast<unsigned>((((lane >> 3) & 1) ^ (lane & 7)) << 4);
    l.sa_off = static_cast<unsigned>(kScaleOffset + (wm * kWarpM + g) * kScaleRowBytes);
    l.sb_off = static_cast<unsigned>(kScaleOffset + (kTileM + wn * kWarpN + g) * kScaleRowBytes);
    l.sel = static_cast<unsigned>(h | h << 4 | (2 + h) << 8 | (2 + h) << 12);
    return l;
}

/* One k16 sub-step J (0..3) of a k-step: half C = J/2 of the k-step's 32 bytes, element pairs
 * (I, I+4) and (I+1, I+5) with I = 2 (J % 2) of each 8-element register. A's a0/a2 (row g, k
 * slots 2t, 2t+1 / 2t+8, 2t+9) and B's b0/b1 (same k slots) take the same elements of the same
 * bytes 4t..4t+3, so A and B agree on the permuted k order. */
template <int J>
__device__ __forceinline__ void mma_substep(const unsigned (&qa)[kMI][4],
                                            const unsigned (&qb)[kNI][2],
                                            const unsigned (&sa)[kMI][2][2],
                                            const unsigned (&sb)[kNI][2],
                                            float (&acc)[kMI][kNI][4]) {
    constexpr int C = J >> 1, I = 2 * (J & 1);
    unsigned b[kNI][2];
#pragma unroll
    for (int ni = 0; ni < kNI; ni++) {
        b[ni][0] = hmul2(e2m1x2<I>(qb[ni][C]), sb[ni][C]);
        b[ni][1] = hmul2(e2m1x2<I + 1>(qb[ni][C]), sb[ni][C]);
    }
#pragma unroll
    for (int mi = 0; mi < kMI; mi++) {
        const unsigned g0 = qa[mi][2 * C], g8 = qa[mi][2 * C + 1];
        const unsigned a[4] = {hmul2(e2m1x2<I>(g0), sa[mi][0][C]),
                               hmul2(e2m1x2<I>(g8), sa[mi][1][C]),
                               hmul2(e2m1x2<I + 1>(g0), sa[mi][0][C]),
                               hmul2(e2m1x2<I + 1>(g8), sa[mi][1][C])};
#pragma unroll
        for (int ni = 0; ni < kNI; ni++)
            mma_f16(acc[mi][ni], a, b[ni][0], b[ni][1]);
    }
}

/* The k-tile's math: per 64-element k-step, the packed A and B fragments (ldmatrix) and the
 * scales of their blocks (one 4-byte read per row), then four k16 sub-steps. */
__device__ __forceinline__ void mma_tile(unsigned stage, const Lane &l,
                                         float (&acc)[kMI][kNI][4]) {
    /* NOTES: unrolled by 2, not 4: a full unroll lets ptxas hoist the next k-steps' fragments
     * and spill at the 255-register cap (sm_90: 255 + 32 bytes of spills; by 2: 222, none). */
#pragma unroll 2
    for (int s = 0; s < kSteps; s++) {
        unsigned qa[kMI][4], qb[kNI][2], sa[kMI][2][2], sb[kNI][2];
#pragma unroll
        for (int mi = 0; mi < kMI; mi++) {
            /* ldmatrix order: row g bytes 0-15, row g+8 bytes 0-15, row g 16-31, row g+8 16-31 */
            unsigned q[4];
            ldsm_x4(stage + l.a_off + mi * 16 * kRowBytes + (l.a_swz ^ (s << 5)), q);
            qa[mi][0] = q[0], qa[mi][1] = q[1], qa[mi][2] = q[2], qa[mi][3] = q[3];
        }
#pragma unroll
        for (int nj = 0; nj < kNI / 2; nj++) {
            unsigned q[4];
            ldsm_x4(stage + kTileABytes + l.b_off + nj * 16 * kRowBytes + (l.b_swz ^ (s << 5)), q);
            qb[2 * nj][0] = q[0], qb[2 * nj][1] = q[1];
            qb[2 * nj + 1][0] = q[2], qb[2 * nj + 1][1] = q[3];
        }
#pragma unroll
        for (int mi = 0; mi < kMI; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const unsigned row = static_cast<unsigned>((mi * 16 + h * 8) * kScaleRowBytes);
                scale_pairs(lds_u32(stage + l.sa_off + row + 4 * s), l.sel, sa[mi][h][0],
                            sa[mi][h][1]);
            }
#pragma unroll
        for (int ni = 0; ni < kNI; ni++)
            scale_pairs(lds_u32(stage + l.sb_off + ni * 8 * kScaleRowBytes + 4 * s), l.sel,
                        sb[ni][0], sb[ni][1]);
        mma_substep<0>(qa, qb, sa, sb, acc);
        mma_substep<1>(qa, qb, sa, sb, acc);
        mma_substep<2>(qa, qb, sa, sb, acc);
        mma_substep<3>(qa, qb, sa, sb, acc);
    }
}

/* The GEMM's alpha (nvfp4_alpha, qf_dev_dequant.cuh). */
__device__ __forceinline__ float gemm_alpha(const qf_nv_gemm_params &p) {
    return nvfp4_alpha(p.amax_a, p.amax_b);
}

} // namespace

#if QF_GEMM_STAGED /* the staged instance: the staged path's entries, no GEMM kernel */
/* One thread writes {alpha, 0} to p.alpha_out: the device alpha and beta of the cuBLASLt NVFP4
 * GEMM (sm_100 and later), which reads them in CUBLASLT_POINTER_MODE_DEVICE. The registry lists
 * the entry because the template invokes QF_ALPHA_ENTRY. */
#define QF_ALPHA_ENTRY(name)                                                                      \
    extern "C" __global__ void name(const qf_nv_gemm_params p) {                                  \
        if (threadIdx.x == 0 && blockIdx.x == 0) {                                                \
            p.alpha_out[0] = gemm_alpha(p);                                                       \
            p.alpha_out[1] = 0.0f;                                                                \
        }                                                                                         \
    }
QF_ALPHA_ENTRY(QF_CAT(__KERNEL_NAME__, _alpha))

/* <name>_dequant: one NVFP4 copy to bf16 without its global scale (qf_dq_params), the first step
 * of the staged GEMM (runtime/op_gemm.c), whose alpha comes from <name>_alpha. */
QF_DEQUANT_ENTRY(QF_CAT(__KERNEL_NAME__, _dequant), true)
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(QF_WS_THREADS, 1)
    __KERNEL_NAME__(const __grid_constant__ qf_ws_gemm_params p) {
    ws::gemm<ws::Nv, ws::Nv>(p);
}
#else
/* Dynamic shared memory: QF_NV_GEMM_SMEM_BYTES_FOR(kStages) = kStages x [A tile | B tile |
 * A scale rows | B scale rows]. */
extern "C" __global__ void __launch_bounds__(kThreads, QF_NV_GEMM_MIN_BLOCKS)
    __KERNEL_NAME__(const qf_nv_gemm_params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned base = smem_u32(smem);
    long long m0, n0;
    tile_origin<kTileM, kTileN, kGroupM>(p, &m0, &n0);
    const long long KT = (p.K / 2 + kRowBytes - 1) / kRowBytes;
    const Lane l = make_lane();

    float acc[kMI][kNI][4];
    zero_acc(acc);

    /* Prologue: k-tiles 0 .. kStages-2 in flight. */
#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < KT)
            load_stage(p, base + s * kStageBytes, m0, n0, s);
        cp_async_commit();
    }

    int stage = 0;
    for (long long kt = 0; kt < KT; kt++) {
        int next_stage;
        const long long next = pipeline_next<kStages>(kt, stage, next_stage);
        if (next < KT)
            load_stage(p, base + next_stage * kStageBytes, m0, n0, next);
        cp_async_commit();
        mma_tile(base + stage * kStageBytes, l, acc);
        stage = stage == kStages - 1 ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    /* alpha * acc * 2^14 (+ bias) -> bf16 y, one rounding (acc[.][.][2h + i] sits at row g + 8h,
     * column 2t + i of the fragment) */
    const float alpha = gemm_alpha(p);
    store_tile_bf16<kMI, kNI, kWarpsN, kWarpM, kWarpN>(
        p, m0, n0, acc, [alpha](float v, float bias) { return fmaf(alpha, v * kPow14, bias); });
}
#endif
