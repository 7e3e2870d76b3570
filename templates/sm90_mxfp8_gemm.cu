/* sm90_mxfp8_gemm.cu: block-scaled MXFP8 GEMM for Hopper (runs on sm_89 and newer).
 *
 * y[M, N] = A[M, K] B[N, K]^T (+ bias[N]), y bf16 (round to nearest even), with A and B FP8
 * (E4M3 or E5M2, per placeholder) row-major and K-major, and one E8M0 scale per 32 consecutive
 * elements along K read from the compact, padded scale matrices of numerics 2.3
 * (qf_mx_gemm_params). Neither operand is ever dequantized to memory: the FP8 bytes go from shared
 * memory into registers and the tensor cores, and the scales are applied to fp32 partial sums. The
 * oracle is qf_gemm_mxfp8_ref (runtime/ref/ref_mx.h), computed in double; the op is
 * runtime/ops_mxfp8_gemm.c.
 *
 * Structure (one block of 256 threads = 8 warps per TILE_M x TILE_N tile of y; qf_formats.h):
 * - Grid: one block per output tile, in groups of 8 tile rows so that the blocks resident at one
 *   time share their A and B panels in L2.
 * - Main loop over k-tiles of TILE_K bytes, QF_MX_GEMM_STAGES deep (2 on sm_89): cp.async copies
 *   the A and B tiles (16-byte chunks, zero-filled past M, N or K) into shared memory, each
 *   128-byte row stored with its chunks XOR-swizzled by (row % 8) so that ldmatrix reads are
 *   conflict-free. One barrier per k-tile.
 * - Scales: threads 0..TILE_M-1 read the 4 scale bytes of one A row per k-tile, the next TILE_N
 *   threads those of one B row, with plain loads issued before the k-tile's math and stored after
 *   it (the latency hides behind the math), decoded exactly to fp32 (2^(b-127) by bits; byte 0 is
 *   the subnormal 2^-127, 0xFF is NaN) into shared memory in the order the consumers read them.
 *   Only entries of real rows (< M, < N) and real blocks (< K/32) are read; the padding never is,
 *   so poisoned padding cannot change y. Entries past the edges are 0 (their data is zero too).
 * - Math: warps form a grid of 64 x 32 (TILE_N 128) or 32 x 32 (TILE_N 64) warp tiles. Per
 *   32-element k-step (= one scale block) a warp loads its FP8 fragments with ldmatrix, converts
 *   them exactly to f16 (cvt.f16x2.e4m3x2 / e5m2x2) and gets each m16n8 block's partial sums p
 *   from two chained m16n8k16 MMAs started from zero, then folds p into its fp32 accumulator:
 *   acc = fmaf(p, sa * sb, acc). sa * sb = 2^(ea+eb-254) is exact when ea+eb-254 lies in
 *   [-149, 127], which the loaders check for the whole k-tile (the byte range of each operand,
 *   reduced per warp); a k-tile outside that range takes the exact path (fold_exact: two balanced
 *   powers of two), so no scale combination over- or underflows early. A NaN scale makes its
 *   contributions NaN.
 * - Epilogue: acc + bias (fp32), rounded to bf16 once, stored as bf16 pairs where aligned.
 *
 * NOTES: sm_90 has no FP8 mma.sync: ptxas lowers mma.sync.m16n8k32.e4m3 to the same F2FP
 * conversions and two HMMA.16816 per MMA, plus four FADDs to join the halves (seen in SASS); doing
 * the conversion here and chaining the halves saves the FADDs. Measured on an H200 at 8192^3: 193
 * TFLOP/s with TILE_N 128 (ncu: issue 52% busy, tensor pipe 30%, i.e. latency bound at 2 warps
 * per scheduler), 152 with TILE_N 64 at two blocks per SM; bf16 cuBLASLt 785.
 * Compiled for sm_90a (the JIT's target on sm_90: qf_arch_feature), the entry is the
 * warp-specialized GEMM of qf_dev_ws_gemm.cuh instead (TMA loads, B dequantized to bf16 in
 * shared memory and A in registers, wgmma), with its own parameter block (qf_ws_gemm_params), block size
 * (QF_WS_THREADS), persistent grid and shared memory (QF_WS_SMEM_BYTES).
 *
 * M and N are arbitrary; K must be a multiple of 32 (checked by the op). Nothing but M, N and K
 * varies at run time: a new shape never recompiles. Compiles under NVRTC with qf_formats.h only.
 */
#include "qf_dev_dequant.cuh"
#include "qf_dev_mma.cuh"
#include "qf_formats.h"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !QF_GEMM_STAGED
#include "qf_dev_ws_gemm.cuh"
#endif

namespace {

constexpr int kADtype = __A_DTYPE__;
constexpr int kBDtype = __B_DTYPE__;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
constexpr int kTileN = QF_MX_GEMM_TILE_N;
constexpr int kTileK = QF_MX_GEMM_TILE_K;           /* bytes = elements per k-tile */
#if __CUDA_ARCH__ >= 900
constexpr int kStages = QF_MX_GEMM_STAGES;
#else
constexpr int kStages = QF_MX_GEMM_STAGES_SM89; /* 99 KiB of shared memory per block */
#endif
constexpr int kSteps = kTileK / QF_MX_BLOCK;         /* 32-element k-steps (scale blocks) */
constexpr int kWarps = kThreads / 32;
constexpr int kWarpN = 32;                           /* columns per warp */
constexpr int kWarpsN = kTileN / kWarpN;             /* 4 (TILE_N 128) or 2 (TILE_N 64) */
constexpr int kWarpsM = kWarps / kWarpsN;            /* 2 or 4 */
constexpr int kWarpM = kTileM / kWarpsM;             /* 64 or 32 rows per warp */
constexpr int kMI = kWarpM / 16;                     /* m16 fragments per warp: 4 or 2 */
constexpr int kNI = kWarpN / 8;                      /* n8 fragments per warp: 4 */
constexpr int kRowBytes = kTileK;                    /* one smem row = one k-tile of one row */
constexpr int kTileABytes = kTileM * kRowBytes;
constexpr int kTileBBytes = kTileN * kRowBytes;
constexpr int kStageBytes = kTileABytes + kTileBBytes;
constexpr int kChunksA = kTileABytes / 16 / kThreads; /* 16-byte cp.async copies per thread */
constexpr int kChunksB = kTileBBytes / 16 / kThreads;
constexpr int kScaleRows = kTileM + kTileN;          /* loader threads: A rows, then B rows */
constexpr int kScaleFloats = kSteps * kScaleRows;    /* decoded scales of one stage */
constexpr int kRangeWords = kWarps;                  /* one byte range per warp and stage */

static_assert(kTileM == QF_MX_GEMM_TILE_M, "qfuse-gen's tile_m must match qf_formats.h");
static_assert(kThreads == 256 && kWarpsM * kWarpsN == kWarps, "8 warps, kWarpsM x kWarpsN");
static_assert(kTileN == 64 || kTileN == 128, "warp grid 4 x 2 (32 x 32 tiles) or 2 x 4 (64 x 32)");
static_assert(kScaleRows <= kThreads && kTileM % 32 == 0, "one scale row per thread, whole warps");
static_assert(kRowBytes == 128 && kSteps == 4, "swizzle and scale loads assume 128-byte k-tiles");
static_assert(kChunksA * kThreads * 16 == kTileABytes && kChunksB * kThreads * 16 == kTileBBytes,
              "whole 16-byte chunks per thread");
static_assert(kMI % 2 == 0 && kNI == 4, "scales are read as float4");
static_assert(QF_MX_GEMM_SMEM_BYTES_FOR(kStages) ==
                  kStages * (kStageBytes + kScaleFloats * 4 + kRangeWords * 4),
              "QF_MX_GEMM_SMEM_BYTES out of sync with the kernel's shared-memory layout");
static_assert(kADtype == QF_DTYPE_E4M3 || kADtype == QF_DTYPE_E5M2, "A is E4M3 or E5M2");
static_assert(kBDtype == QF_DTYPE_E4M3 || kBDtype == QF_DTYPE_E5M2, "B is E4M3 or E5M2");

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL) /* the mma.sync kernel (sm_89, and sm_100 and later) */
constexpr int kGroupM = 8;                           /* tile rows per raster group */
constexpr int kExpSumMin = 127 + 127 - 149;          /* ea + eb >= this: 2^(ea+eb-254) exact */
constexpr int kExpSumMax = 127 + 127 + 127;          /* ea + eb <= this: no overflow */

/* ==================================================================== PTX wrappers */

/* Four FP8 values of format DT (bytes 0..3 of q) as two f16 pairs, exactly (every E4M3 and E5M2
 * value, NaN and infinity included, is an f16 value): lo = bytes 0-1, hi = bytes 2-3. Splitting
 * q with mov lets ptxas read the high half in place (F2FP ... .H1) instead of shifting it. */
template <int DT>
__device__ __forceinline__ void fp8x4_to_f16x2(unsigned q, unsigned &lo, unsigned &hi) {
    if constexpr (DT == QF_DTYPE_E4M3)
        asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
            "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
            : "=r"(lo), "=r"(hi)
            : "r"(q));
    else
        asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e5m2x2 %0, l;\n"
            "cvt.rn.f16x2.e5m2x2 %1, h;\n}\n"
            : "=r"(lo), "=r"(hi)
            : "r"(q));
}

/* d = A(16x16) B(16x8) + c in f16 x f16 -> f32 (products exact, fp32 sums). */
__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                        unsigned b1, const float (&c)[4]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
}

/* One m16n8k32 FP8 fragment of A (ldmatrix order: rows g / g+8, k bytes 4t..4t+3 / 16+4t..)
 * as the two m16n8k16 f16 fragments that cover the same 32 k. The k order inside each half is
 * permuted (f16 slot 2t+i <- byte 4t+i, slot 2t+8+i <- byte 4t+2+i); B uses the same permutation,
 * so every product pairs the right elements and the dot product is unchanged. */
__device__ __forceinline__ void a_to_f16(const unsigned (&q)[4], unsigned (&lo)[4],
                                         unsigned (&hi)[4]) {
    fp8x4_to_f16x2<kADtype>(q[0], lo[0], lo[2]);
    fp8x4_to_f16x2<kADtype>(q[1], lo[1], lo[3]);
    fp8x4_to_f16x2<kADtype>(q[2], hi[0], hi[2]);
    fp8x4_to_f16x2<kADtype>(q[3], hi[1], hi[3]);
}

/* One FP8 B fragment (k bytes 4t..4t+3 and 16+4t..) as f16 pairs {b0, b1} of each k16 half. */
__device__ __forceinline__ void b_to_f16(unsigned q0, unsigned q1, unsigned (&f)[4]) {
    fp8x4_to_f16x2<kBDtype>(q0, f[0], f[1]);
    fp8x4_to_f16x2<kBDtype>(q1, f[2], f[3]);
}

__device__ __forceinline__ unsigned redux_min(unsigned v) {
    unsigned r;
    asm("redux.sync.min.u32 %0, %1, 0xffffffff;\n" : "=r"(r) : "r"(v));
    return r;
}

__device__ __forceinline__ unsigned redux_max(unsigned v) {
    unsigned r;
    asm("redux.sync.max.u32 %0, %1, 0xffffffff;\n" : "=r"(r) : "r"(v));
    return r;
}

/* ==================================================================== scales */

/* 2^n for n in [-127, 127], exactly. */
__device__ __forceinline__ float pow2i(int n) {
    return __uint_as_float(n > -127 ? static_cast<unsigned>(n + 127) << 23 : 0x00400000u);
}

/* acc + p * sa * sb with sa, sb decoded scales, for any pair of bytes: the byte is recovered
 * from the fp32 pattern (0x00400000 and 0.0f both give byte 0), and 2^(ea+eb-254) is split into
 * two powers of two of at most 2^127 each, so p * s1 neither overflows unless the true value
 * does, nor falls below the normal range unless the true value does. */
__device__ __forceinline__ float fold_exact(float acc, float p, float sa, float sb) {
    const unsigned ea = __float_as_uint(sa) >> 23, eb = __float_as_uint(sb) >> 23;
    const int e = static_cast<int>(ea + eb) - 254, e1 = e >> 1;
    const float v = fmaf(p * pow2i(e1), pow2i(e - e1), acc);
    return ea == 255u || eb == 255u ? __uint_as_float(0x7fc00000u) : v; /* NaN scale: NaN */
}

/* Index of scale row r (0..127) of a stage's A or B scales: the order in which a thread reads
 * its 8 rows (A: 4 m16 fragments x rows g, g+8) or 8 columns (B: 4 n8 fragments x 2 columns)
 * as two float4 per k-step. */
__device__ __forceinline__ int scale_slot_a(int r) {
    const int wm = r / kWarpM, rr = r % kWarpM;
    return wm * kWarpM + (rr & 7) * (2 * kMI) + (rr >> 4) * 2 + ((rr >> 3) & 1);
}

__device__ __forceinline__ int scale_slot_b(int r) {
    const int wn = r / kWarpN, cc = r % kWarpN;
    return wn * kWarpN + ((cc & 7) >> 1) * (2 * kNI) + (cc >> 3) * 2 + (cc & 1);
}

/* The scale bytes of one k-tile that this thread loads: one row of A (threads 0..kTileM-1) or of
 * B (the next kTileN threads), blocks kt*4 .. kt*4+3, of which `n` are real (0 past M/N and for
 * threads past kScaleRows, < 4 at the last k-tile). */
struct ScaleRow {
    unsigned raw;
    int n;
};

__device__ __forceinline__ ScaleRow fetch_scales(const qf_mx_gemm_params &p, long long m0,
                                                 long long n0, long long kt) {
    const int tid = threadIdx.x;
    const bool is_a = tid < kTileM;
    const long long row = (is_a ? m0 : n0) + (is_a ? tid : tid - kTileM);
    const long long rows = is_a ? p.M : p.N, blocks = p.K / QF_MX_BLOCK, kb = kt * kSteps;
    ScaleRow s = {0u, 0};
    if (tid >= kScaleRows || row >= rows)
        return s;
    s.n = blocks - kb < kSteps ? static_cast<int>(blocks - kb) : kSteps;
    const unsigned char *src = (is_a ? p.a_scale : p.b_scale) + row * p.scale_cols + kb;
    if (s.n == kSteps) { /* row stride and kb are multiples of 4: an aligned word */
        s.raw = __ldg(reinterpret_cast<const unsigned *>(src));
        return s;
    }
    for (int i = 0; i < s.n; i++) /* never read the padding past the last real block */
        s.raw |= static_cast<unsigned>(__ldg(src + i)) << (8 * i);
    return s;
}

/* Decodes a fetched scale row into the stage's shared scales and records the warp's byte range
 * (min << 16 | max over real bytes, NaN bytes excluded from max) for the fast-path check. */
__device__ __forceinline__ void store_scales(float *sc, unsigned *range, ScaleRow s) {
    const int tid = threadIdx.x;
    const bool is_a = tid < kTileM;
    const int slot = is_a ? scale_slot_a(tid) : kSteps * kTileM + scale_slot_b(tid - kTileM);
    const int stride = is_a ? kTileM : kTileN;
    unsigned lo = 255u, hi = 0u;
#pragma unroll
    for (int i = 0; i < kSteps; i++) {
        const unsigned b = (s.raw >> (8 * i)) & 255u;
        const bool real = i < s.n;
        if (tid < kScaleRows)
            sc[slot + i * stride] = real ? e8m0_value(b) : 0.0f;
        lo = real && b < lo ? b : lo;
        hi = real && b != 255u && b > hi ? b : hi;
    }
    lo = redux_min(lo);
    hi = redux_max(hi);
    if ((tid & 31) == 0)
        range[tid >> 5] = lo << 16 | hi;
}

/* Whether every scale pair of the stage gives an exact fp32 product (see fold_exact). */
__device__ __forceinline__ bool scales_in_range(const unsigned *range) {
    unsigned lo[2] = {255u, 255u}, hi[2] = {0u, 0u};
#pragma unroll
    for (int w = 0; w < kRangeWords; w++) {
        const int op = w < kTileM / 32 ? 0 : 1; /* A rows first; warps past kScaleRows: neutral */
        const unsigned l = range[w] >> 16, h = range[w] & 0xffffu;
        lo[op] = l < lo[op] ? l : lo[op];
        hi[op] = h > hi[op] ? h : hi[op];
    }
    return static_cast<int>(lo[0] + lo[1]) >= kExpSumMin &&
           static_cast<int>(hi[0] + hi[1]) <= kExpSumMax;
}

/* ==================================================================== tiles */

/* Issues the cp.async copies of k-tile kt of A and B into one stage (kChunksA and kChunksB per
 * thread, rows 32 apart; chunks past M, N or K are zero-filled and read nothing). */
__device__ __forceinline__ void load_tile(const qf_mx_gemm_params &p, unsigned stage, long long m0,
                                          long long n0, long long kt) {
    const int tid = threadIdx.x, c = tid & 7, r0 = tid >> 3;
    const long long k = kt * kTileK + c * 16;
    const bool k_ok = k < p.K;
    const unsigned swz = static_cast<unsigned>((c ^ (r0 & 7)) << 4);
    copy_tile<kChunksA, kRowBytes>(stage, p.a, m0, p.M, p.K, k, k_ok, r0, swz);
    copy_tile<kChunksB, kRowBytes>(stage + kTileABytes, p.b, n0, p.N, p.K, k, k_ok, r0, swz);
}

/* Per-thread constants of the fragment loads and the accumulator layout. */
struct Lane {
    unsigned a_off;  /* byte offset of this lane's ldmatrix row in the A tile (fragment 0) */
    unsigned b_off;  /* same in the B tile (fragment pair 0) */
    unsigned a_swz;  /* (logical chunk bit ^ row % 8) << 4 for A; k-step s XORs in s << 5 */
    unsigned b_swz;
    int sa_slot;     /* first of this thread's 2*kMI A scales in a k-step's scale row */
    int sb_slot;     /* first of its 2*kNI B scales */
};

__device__ __forceinline__ Lane make_lane() {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    Lane l;
    /* A: lanes 0-15 address rows 0-15 of the m16 fragment at k bytes 0-15, lanes 16-31 the same
     * rows at bytes 16-31 (registers a0..a3 of mma.m16n8k32). */
    l.a_off = static_cast<unsigned>((wm * kWarpM + (lane & 15)) * kRowBytes);
    l.a_swz = static_cast<unsigned>(((lane >> 4) ^ (lane & 7)) << 4);
    /* B: lanes 0-7 rows 0-7 bytes 0-15, 8-15 rows 0-7 bytes 16-31, 16-23 rows 8-15 bytes 0-15,
     * 24-31 rows 8-15 bytes 16-31: two n8 fragments (b0, b1 each). */
    l.b_off = static_cast<unsigned>((wn * kWarpN + (lane & 7) + ((lane >> 4) << 3)) * kRowBytes);
    l.b_swz = static_cast<unsigned>((((lane >> 3) & 1) ^ (lane & 7)) << 4);
    l.sa_slot = wm * kWarpM + (lane >> 2) * (2 * kMI);
    l.sb_slot = kSteps * kTileM + wn * kWarpN + (lane & 3) * (2 * kNI);
    return l;
}

/* N floats from 16-byte aligned shared memory, as float4 loads. */
template <int N>
__device__ __forceinline__ void load_f4(const float *src, float (&dst)[N]) {
#pragma unroll
    for (int i = 0; i < N / 4; i++) {
        const float4 v = reinterpret_cast<const float4 *>(src)[i];
        dst[4 * i] = v.x, dst[4 * i + 1] = v.y, dst[4 * i + 2] = v.z, dst[4 * i + 3] = v.w;
    }
}

/* The k-tile's math: per 32-element step (one scale block), every A and B fragment is loaded with
 * ldmatrix and converted to f16 once, each of the 16 m16n8 blocks gets its partial sums from two
 * chained m16n8k16 MMAs started from zero, and each partial is folded into acc with its row and
 * column scales. kFast: every scale product of the stage is exact in fp32 (scales_in_range). */
template <bool kFast>
__device__ __forceinline__ void mma_tile(unsigned stage, const float *sc, const Lane &l,
                                         float (&acc)[kMI][kNI][4]) {
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int s = 0; s < kSteps; s++) {
        unsigned a[kMI][2][4], b[kNI][4];
#pragma unroll
        for (int mi = 0; mi < kMI; mi++) {
            unsigned q[4];
            ldsm_x4(stage + l.a_off + mi * 16 * kRowBytes + (l.a_swz ^ (s << 5)), q);
            a_to_f16(q, a[mi][0], a[mi][1]);
        }
#pragma unroll
        for (int nj = 0; nj < kNI / 2; nj++) {
            unsigned q[4];
            ldsm_x4(stage + kTileABytes + l.b_off + nj * 16 * kRowBytes + (l.b_swz ^ (s << 5)), q);
            b_to_f16(q[0], q[1], b[2 * nj]);
            b_to_f16(q[2], q[3], b[2 * nj + 1]);
        }
        float sa[2 * kMI], sb[2 * kNI];
        load_f4<2 * kMI>(sc + s * kTileM + l.sa_slot, sa);
        load_f4<2 * kNI>(sc + s * kTileN + l.sb_slot, sb);
#pragma unroll
        for (int mi = 0; mi < kMI; mi++)
#pragma unroll
            for (int ni = 0; ni < kNI; ni++) {
                float d[4];
                mma_f16(d, a[mi][0], b[ni][0], b[ni][1], zero);
                mma_f16(d, a[mi][1], b[ni][2], b[ni][3], d);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    /* d[q] sits at row g + 8*(q/2), column 2t + q%2 of the fragment. */
                    const float ra = sa[mi * 2 + (q >> 1)], cb = sb[ni * 2 + (q & 1)];
                    acc[mi][ni][q] = kFast ? fmaf(d[q], ra * cb, acc[mi][ni][q])
                                           : fold_exact(acc[mi][ni][q], d[q], ra, cb);
                }
            }
    }
}

#endif /* !__CUDA_ARCH_FEAT_SM90_ALL */

} // namespace

#if QF_GEMM_STAGED /* the staged instance: the staged path's entry, no GEMM kernel */
/* <name>_dequant: one MXFP8 copy to bf16 (qf_dq_params), the first step of the staged GEMM
 * (runtime/op_gemm.c). */
QF_DEQUANT_ENTRY(QF_CAT(__KERNEL_NAME__, _dequant), false)
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __launch_bounds__(QF_WS_THREADS, 1)
    __KERNEL_NAME__(const __grid_constant__ qf_ws_gemm_params p) {
    ws::gemm<ws::Mx<kADtype>, ws::Mx<kBDtype>>(p);
}
#else
/* Dynamic shared memory: QF_MX_GEMM_SMEM_BYTES_FOR(kStages) = kStages x [A tile | B tile], then
 * kStages x decoded scales (fp32), then kStages x kRangeWords byte ranges. */
extern "C" __global__ void __launch_bounds__(kThreads, QF_MX_GEMM_MIN_BLOCKS)
    __KERNEL_NAME__(const qf_mx_gemm_params p) {
    extern __shared__ __align__(128) unsigned char smem[];
    float *const scales = reinterpret_cast<float *>(smem + kStages * kStageBytes);
    unsigned *const ranges = reinterpret_cast<unsigned *>(scales + kStages * kScaleFloats);
    const unsigned base = smem_u32(smem);
    long long m0, n0;
    tile_origin<kTileM, kTileN, kGroupM>(p, &m0, &n0);
    const long long KT = (p.K + kTileK - 1) / kTileK;
    const Lane l = make_lane();

    float acc[kMI][kNI][4];
    zero_acc(acc);

    /* Prologue: k-tiles 0 .. kStages-2 in flight, their scales stored. */
#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < KT) {
            load_tile(p, base + s * kStageBytes, m0, n0, s);
            store_scales(scales + s * kScaleFloats, ranges + s * kRangeWords,
                         fetch_scales(p, m0, n0, s));
        }
        cp_async_commit();
    }

    int stage = 0;
    for (long long kt = 0; kt < KT; kt++) {
        int next_stage;
        const long long next = pipeline_next<kStages>(kt, stage, next_stage);
        ScaleRow pending = {0u, 0};
        if (next < KT) {
            load_tile(p, base + next_stage * kStageBytes, m0, n0, next);
            pending = fetch_scales(p, m0, n0, next);
        }
        cp_async_commit();

        const float *sc = scales + stage * kScaleFloats;
        const unsigned tile = base + stage * kStageBytes;
        if (scales_in_range(ranges + stage * kRangeWords))
            mma_tile<true>(tile, sc, l, acc);
        else
            mma_tile<false>(tile, sc, l, acc);

        /* Stage next_stage's scales were last read before this iteration's barrier. */
        if (next < KT)
            store_scales(scales + next_stage * kScaleFloats, ranges + next_stage * kRangeWords,
                         pending);
        stage = stage == kStages - 1 ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    /* acc (+ bias) -> bf16 y, one rounding */
    store_tile_bf16<kMI, kNI, kWarpsN, kWarpM, kWarpN>(
        p, m0, n0, acc, [](float v, float bias) { return v + bias; });
}
#endif
