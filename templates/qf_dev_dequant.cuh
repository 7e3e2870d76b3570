/* qf_dev_dequant.cuh: exact element decodes of the block-scaled formats, and the `<name>_dequant`
 * entry of the MXFP8 and NVFP4 GEMM modules: one quantized copy to bf16 (qf_dq_params), the first
 * step of the staged GEMM on Hopper (dequantize both operands, then a bf16 cuBLASLt GEMM; runtime/
 * op_gemm.c). An in-memory NVRTC header; see qf_dev_load.cuh.
 *
 * Numerics (numerics 7): out = bf16(decode(element) * decode(scale)). The fp32 product is exact
 * (at most 4 significant bits of E4M3, 3 of E5M2 or 2 of E2M1, times a power of two or an E4M3
 * scale, and no product under 2^-149), so the only rounding is the one to bf16, which is exact
 * for MXFP8 scale exponents in [-117, 119] and for every NVFP4 product (which the vector path
 * forms in bf16 directly, e2m1x8_bf16: the same exact value). A NaN scale (E8M0 0xFF,
 * E4M3 0x7F / 0xFF) makes its block NaN. Only the scale entries of real elements are read, never
 * the padding. */
#ifndef QF_DEV_DEQUANT_CUH
#define QF_DEV_DEQUANT_CUH

#include "qf_dev_module.cuh"
#include "qf_formats.h"

namespace {

/* E8M0 byte -> 2^(b - 127) as fp32, exactly: 0 is the subnormal 2^-127, 0xFF is NaN. */
__device__ __forceinline__ float e8m0_value(unsigned b) {
    return b == 0xFFu ? __uint_as_float(0x7FC00000u)
                      : __uint_as_float(b == 0 ? 0x00400000u : b << 23);
}

/* Two FP8 values (the low 16 bits of v) of dtype DT -> f16x2 -> two fp32 (exact). */
template <int DT>
__device__ __forceinline__ void fp8x2_to_float2(unsigned v, float &lo, float &hi) {
    unsigned h;
    if (DT == QF_DTYPE_E5M2)
        asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<unsigned short>(v)));
    else
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<unsigned short>(v)));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(lo) : "h"(static_cast<unsigned short>(h)));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(hi) : "h"(static_cast<unsigned short>(h >> 16)));
}

/* Two fp32 -> bf16x2 (round to nearest even), lo in the low half. */
__device__ __forceinline__ unsigned float2_to_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* The E2M1 code in the low 4 bits of c (sign, 2 exponent bits, 1 mantissa bit) as fp32. */
__device__ __forceinline__ float e2m1_value(unsigned c) {
    const unsigned m = c & 7u;
    /* magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6: m < 2 is subnormal (m * 0.5), else
     * 2^((m >> 1) - 1) * (1 + (m & 1) / 2) */
    const float v = m < 2u ? 0.5f * static_cast<float>(m)
                           : __uint_as_float(((m >> 1) + 126u) << 23 | (m & 1u) << 22);
    return c & 8u ? -v : v;
}

/* The 8 E2M1 codes of q (code e in bits 4e..4e+3) times s2 (a bf16 pair holding one scale twice)
 * as four bf16 pairs, lo = code 2i, hi = code 2i + 1 in pair i. Each code's 3 magnitude bits pick
 * the high and the low byte of its bf16 value (0, 0.5, 1, 1.5, 2, 3, 4, 6) from two 8-byte
 * tables (prmt, four codes per instruction), the sign bit goes to bit 15 or 31, and one bf16x2
 * fma multiplies by the scale, adding -0 so that a -0 product stays -0. With an E4M3 scale the
 * product is exact (2 significant bits times 4: at most 6 of bf16's 8; the smallest is 2^-10), so
 * the bytes equal bf16(e2m1_value(code) * scale); a NaN scale gives a NaN. */
__device__ __forceinline__ void e2m1x8_bf16(unsigned q, unsigned s2, unsigned (&o)[4]) {
    constexpr unsigned kHi[2] = {0x3F3F3F00u, 0x40404040u}, kLo[2] = {0xC0800000u, 0xC0804000u};
    const unsigned m = q & 0x77777777u;
#pragma unroll
    for (int half = 0; half < 2; half++) { /* codes 4 half .. 4 half + 3 */
        const unsigned sel = m >> (16 * half);
        unsigned hi, lo;
        asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(hi) : "r"(kHi[0]), "r"(kHi[1]), "r"(sel));
        asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(lo) : "r"(kLo[0]), "r"(kLo[1]), "r"(sel));
        asm("prmt.b32 %0, %1, %2, 0x5140;\n" : "=r"(o[2 * half]) : "r"(lo), "r"(hi));
        asm("prmt.b32 %0, %1, %2, 0x7362;\n" : "=r"(o[2 * half + 1]) : "r"(lo), "r"(hi));
    }
    /* code e's sign (bit 4e + 3) to bit 15 (e even) or 31 (e odd) of pair e / 2 */
    o[0] |= ((q << 12) & 0x8000u) | ((q << 24) & 0x80000000u);
    o[1] |= ((q << 4) & 0x8000u) | ((q << 16) & 0x80000000u);
    o[2] |= ((q >> 4) & 0x8000u) | ((q << 8) & 0x80000000u);
    o[3] |= ((q >> 12) & 0x8000u) | (q & 0x80000000u);
#pragma unroll
    for (int i = 0; i < 4; i++)
        asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(o[i]) : "r"(o[i]), "r"(s2), "r"(0x80008000u));
}

/* f16 pairs a * b, round to nearest (exact where the NVFP4 decodes use it; subnormals kept). */
__device__ __forceinline__ unsigned hmul2(unsigned a, unsigned b) {
    unsigned d;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

constexpr unsigned kF16x2Pow7 = 0x58005800u; /* f16 pair (2^7, 2^7) */
constexpr float kPow14 = 16384.0f; /* undoes the two factors 2^-7 of an NVFP4 product */

/* NVFP4's alpha = fl(fl(amax_a * amax_b) * fl(1/7225344)), 7225344 = 6*6*448*448 (numerics
 * 2.4), as qf_nvfp4_gemm_alpha_ref; the amaxes are device fp32 [1]. */
__device__ __forceinline__ float nvfp4_alpha(const float *amax_a, const float *amax_b) {
    return __fmul_rn(__fmul_rn(__ldg(amax_a), __ldg(amax_b)), __uint_as_float(0x34149b93u));
}

/* Elements I and I+4 (I = 0..3) of the 8 packed E2M1 elements in q (element e in bits 4e..4e+3)
 * as an f16 pair (lo = element I, hi = element I+4), each equal to its E2M1 value x 2^-14
 * exactly: the 3 magnitude bits (e1 e0 m) go to f16 bits 11..9, so the exponent field is e and
 * the top mantissa bit m: 2^(e-15) (1 + m/2) for e >= 1, and the subnormal m * 2^-15 for e = 0
 * (numerics 1: codes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6, times 2^-14). The sign bit goes to bit 15.
 * Elements I and I+4 sit 16 bits apart in q, as the two halves of the pair do, so one shift
 * places both. */
template <int I>
__device__ __forceinline__ unsigned e2m1x2(unsigned q) {
    constexpr int kMag = 9 - 4 * I, kSign = 12 - 4 * I;
    unsigned mag, sign;
    if constexpr (kMag >= 0)
        mag = q << kMag;
    else
        mag = q >> -kMag;
    sign = q << kSign;
    return (mag & 0x0E000E00u) | (sign & 0x80008000u);
}

/* The four E4M3 scale bytes that prmt selector sel picks from w (bytes 0, 1: the low pair; 2, 3:
 * the high one) as two f16 pairs times 2^7: cvt.e4m3x2 is exact (NaN stays NaN),
 * 448 x 2^7 = 57344 < 65504, and x 2^7 is exact. */
__device__ __forceinline__ void e4m3_pairs_pow7(unsigned w, unsigned sel, unsigned &lo_pair,
                                                unsigned &hi_pair) {
    unsigned dup, lo, hi;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(dup) : "r"(w), "r"(0u), "r"(sel));
    asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
        "cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(dup));
    lo_pair = hmul2(lo, kF16x2Pow7);
    hi_pair = hmul2(hi, kF16x2Pow7);
}

namespace dq {

/* The row of chunk i (rows of per_row = cdiv(cols, QF_DQ_VEC) chunks): i / per_row as the high
 * 64 bits of i * p.per_row_magic, magic = ceil(2^64 / per_row) (0 when per_row is 1). Exact for
 * i and per_row below 2^32 (the launcher keeps the chunk count there): the product exceeds
 * i / per_row by i * (magic - 2^64 / per_row) / 2^64 < i / 2^64 < 2^-32 <= 1 / per_row, less than
 * the distance from i / per_row up to the next integer. */
__device__ __forceinline__ unsigned row_of(const qf_dq_params &p, unsigned i) {
    const unsigned long long m = p.per_row_magic;
    if (m == 0)
        return i;
    const unsigned long long lo = static_cast<unsigned long long>(i) * static_cast<unsigned>(m);
    const unsigned long long hi =
        static_cast<unsigned long long>(i) * static_cast<unsigned>(m >> 32) + (lo >> 32);
    return static_cast<unsigned>(hi >> 32);
}

/* Where the scale entries of a copy are: block_rows and block_cols are powers of two (1, 16 or
 * 32), so (r / block_rows, c / block_cols) are shifts. */
struct ScaleMap {
    const uint8_t *base;
    unsigned long long ld; /* p.scale_ld */
    int row_shift, col_shift;
};

__device__ __forceinline__ ScaleMap scale_map(const qf_dq_params &p) {
    return {p.scale, static_cast<unsigned long long>(p.scale_ld), __ffs(p.block_rows) - 1,
            __ffs(p.block_cols) - 1};
}

/* The scale entry of element (r, c). */
__device__ __forceinline__ const uint8_t *scale_ptr(const ScaleMap &s, unsigned long long r,
                                                    unsigned long long c) {
    return s.base + (r >> s.row_shift) * s.ld + (c >> s.col_shift);
}

/* The scale byte b as fp32: E8M0, or E4M3 for NVFP4. */
template <int ELEM>
__device__ __forceinline__ float scale_value(unsigned b) {
    if (ELEM != QF_DTYPE_E2M1)
        return e8m0_value(b);
    float lo, hi;
    fp8x2_to_float2<QF_DTYPE_E4M3>(b, lo, hi);
    return lo;
}

/* One element (any alignment). */
template <int ELEM>
__device__ __forceinline__ float load1(const qf_dq_params &p, long long i) {
    if (ELEM == QF_DTYPE_E2M1)
        return e2m1_value(static_cast<unsigned>(p.data[i / 2]) >> (4 * (i & 1)));
    float lo, hi;
    fp8x2_to_float2<ELEM>(p.data[i], lo, hi);
    return lo;
}

/* One vector chunk: QF_DQ_VEC elements of one row, read with one 8-byte (FP8) or 4-byte (E2M1)
 * load, and their scale bytes: one for 1x16 and 1x32 blocks (ONE), QF_DQ_VEC consecutive ones
 * (one per column) for 32x1 blocks. */
struct Raw {
    unsigned w[2];  /* the elements' bytes (E2M1: w[0] only) */
    unsigned sc[2]; /* the scale byte (sc[0] & 0xFF) or QF_DQ_VEC scale bytes */
};

/* Chunk i, in row r at column c0 (a vector launch: cols a multiple of QF_DQ_VEC, so the chunk's
 * elements start at element i * QF_DQ_VEC). */
template <int ELEM, bool ONE>
__device__ __forceinline__ Raw load_raw(const qf_dq_params &p, const ScaleMap &sm, unsigned i,
                                        unsigned r, unsigned long long c0) {
    Raw raw;
    const unsigned long long e = static_cast<unsigned long long>(i) * QF_DQ_VEC;
    if (ELEM == QF_DTYPE_E2M1) {
        raw.w[0] = __ldg(reinterpret_cast<const unsigned *>(p.data + e / 2));
        raw.w[1] = 0u;
    } else {
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(p.data + e));
        raw.w[0] = q.x, raw.w[1] = q.y;
    }
    if constexpr (ONE) {
        raw.sc[0] = __ldg(scale_ptr(sm, r, c0));
        raw.sc[1] = 0u;
    } else { /* 32x1 blocks: the QF_DQ_VEC entries of columns c0.. */
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(scale_ptr(sm, r, c0)));
        raw.sc[0] = q.x, raw.sc[1] = q.y;
    }
    return raw;
}

/* 1 when a byte of w is 0x00 or 0xFF: the E8M0 codes whose value is not the byte shifted into
 * an fp32 exponent (2^-127, a subnormal; NaN). */
__device__ __forceinline__ bool e8m0_special4(unsigned w) {
    const unsigned n = ~w;
    return (((w - 0x01010101u) & n) | ((n - 0x01010101u) & w)) & 0x80808080u;
}

/* The E8M0 scale byte j of w (j = 0..3) as fp32 for a byte in 1..254: 2^(b - 127), the byte in
 * the exponent field. */
__device__ __forceinline__ float e8m0_plain(unsigned w, int j) {
    return __uint_as_float(__byte_perm(w, 0u, 0x0444u | static_cast<unsigned>(j) << 12) >> 1);
}

/* Decodes a loaded chunk and stores its QF_DQ_VEC bf16 values at out element e (one 16-byte
 * store). */
template <int ELEM, bool ONE>
__device__ __forceinline__ void store_raw(const qf_dq_params &p, const Raw &raw,
                                          unsigned long long e) {
    unsigned o[QF_DQ_VEC / 2];
    if constexpr (ELEM == QF_DTYPE_E2M1) { /* 8 codes of one 1x16 block: one scale */
        static_assert(QF_DQ_VEC == 8 && ONE, "8 codes: half of a 1x16 block (p.block_cols 16)");
        const float s0 = scale_value<ELEM>(raw.sc[0] & 0xFFu);
        e2m1x8_bf16(raw.w[0], float2_to_bf16x2(s0, s0), o);
    } else {
        float v[QF_DQ_VEC], s[QF_DQ_VEC];
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC / 4; i++) {
            fp8x2_to_float2<ELEM>(raw.w[i], v[4 * i], v[4 * i + 1]);
            fp8x2_to_float2<ELEM>(raw.w[i] >> 16, v[4 * i + 2], v[4 * i + 3]);
        }
        if constexpr (ONE) {
            const float s0 = e8m0_value(raw.sc[0] & 0xFFu);
#pragma unroll
            for (int i = 0; i < QF_DQ_VEC; i++)
                s[i] = s0;
        } else if (!e8m0_special4(raw.sc[0]) && !e8m0_special4(raw.sc[1])) {
#pragma unroll
            for (int i = 0; i < QF_DQ_VEC; i++)
                s[i] = e8m0_plain(raw.sc[i / 4], i % 4);
        } else {
#pragma unroll
            for (int i = 0; i < QF_DQ_VEC; i++)
                s[i] = e8m0_value((raw.sc[i / 4] >> (8 * (i % 4))) & 0xFFu);
        }
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC / 2; i++)
            o[i] = float2_to_bf16x2(v[2 * i] * s[2 * i], v[2 * i + 1] * s[2 * i + 1]);
    }
    *reinterpret_cast<uint4 *>(p.out + e) = make_uint4(o[0], o[1], o[2], o[3]);
}

/* Chunk k (0 .. QF_DQ_CHUNKS - 1) of this thread: chunk number (block * QF_DQ_CHUNKS + k) *
 * QF_DQ_THREADS + thread, so that each pass of a warp reads and writes consecutive memory. */
__device__ __forceinline__ unsigned chunk_index(int k) {
    return (blockIdx.x * QF_DQ_CHUNKS + k) * QF_DQ_THREADS + threadIdx.x;
}

/* Row r and first column c0 of chunk i; false past the end. */
__device__ __forceinline__ bool chunk_at(const qf_dq_params &p, unsigned i, unsigned *r,
                                         unsigned long long *c0) {
    const unsigned per_row = static_cast<unsigned>((p.cols + QF_DQ_VEC - 1) / QF_DQ_VEC);
    const unsigned row = row_of(p, i);
    *r = row;
    *c0 = static_cast<unsigned long long>(i - row * per_row) * QF_DQ_VEC;
    return row < p.rows;
}

/* Elements c0 .. c0 + QF_DQ_VEC - 1 of row r (as far as they exist), one at a time. */
template <int ELEM>
__device__ __forceinline__ void chunk_scalar(const qf_dq_params &p, const ScaleMap &sm,
                                             unsigned r, unsigned long long c0) {
    const unsigned long long cols = static_cast<unsigned long long>(p.cols);
    for (unsigned long long c = c0; c < c0 + QF_DQ_VEC && c < cols; c++) {
        const unsigned long long i = r * cols + c;
        const float x = load1<ELEM>(p, static_cast<long long>(i)) *
                        scale_value<ELEM>(__ldg(scale_ptr(sm, r, c)));
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
        p.out[i] = h;
    }
}

/* The vector path: all of the thread's chunks loaded before any is stored. */
template <int ELEM, bool ONE>
__device__ __forceinline__ void run_vec(const qf_dq_params &p, const ScaleMap &sm) {
    Raw raw[QF_DQ_CHUNKS];
    unsigned idx[QF_DQ_CHUNKS];
    bool live[QF_DQ_CHUNKS];
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++) {
        unsigned r;
        unsigned long long c0;
        idx[k] = chunk_index(k);
        live[k] = chunk_at(p, idx[k], &r, &c0);
        if (live[k])
            raw[k] = load_raw<ELEM, ONE>(p, sm, idx[k], r, c0);
    }
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++)
        if (live[k])
            store_raw<ELEM, ONE>(p, raw[k], static_cast<unsigned long long>(idx[k]) * QF_DQ_VEC);
}

/* The whole copy, QF_DQ_CHUNKS chunks per thread (grid: cdiv(rows * cdiv(cols, QF_DQ_VEC),
 * QF_DQ_THREADS * QF_DQ_CHUNKS); the launcher keeps the chunk count below 2^32). The vector path
 * needs rows of whole chunks and 16-byte aligned buffers (and scale rows, for 32x1 blocks); it
 * is compiled apart for one scale per chunk (1x16, 1x32 blocks) and for one per column. */
template <int ELEM>
__device__ __forceinline__ void run(const qf_dq_params &p) {
    const bool one = p.block_cols >= QF_DQ_VEC;
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.data) |
                                 reinterpret_cast<unsigned long long>(p.out) |
                                 (one ? 0ull
                                      : reinterpret_cast<unsigned long long>(p.scale) |
                                            static_cast<unsigned long long>(p.scale_ld));
    const ScaleMap sm = scale_map(p);
    if (p.cols % QF_DQ_VEC == 0 && (a & 15u) == 0) {
        if constexpr (ELEM == QF_DTYPE_E2M1)
            run_vec<ELEM, true>(p, sm); /* NVFP4: 1x16 blocks only */
        else if (one)
            run_vec<ELEM, true>(p, sm);
        else
            run_vec<ELEM, false>(p, sm);
        return;
    }
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++) {
        unsigned r;
        unsigned long long c0;
        if (chunk_at(p, chunk_index(k), &r, &c0))
            chunk_scalar<ELEM>(p, sm, r, c0);
    }
}

/* The bias of the staged GEMM broadcast into y (qf_dq_params with elem QF_DTYPE_BF16):
 * out[r, c] = data[c] (bf16 [cols]; out bf16, or fp32 when out_fp32: exact) for r < rows, so
 * that cuBLASLt adds it as C (beta 1) in fp32 before its one rounding; when scale is not NULL,
 * it is the device beta slot (fp32) and gets 1. */
__device__ __forceinline__ void broadcast(const qf_dq_params &p) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.scale)
        *reinterpret_cast<float *>(const_cast<uint8_t *>(p.scale)) = 1.0f;
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.data) |
                                 reinterpret_cast<unsigned long long>(p.out);
    const bool vec = p.cols % QF_DQ_VEC == 0 && (a & 15u) == 0;
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++) {
        unsigned r;
        unsigned long long c0;
        if (!chunk_at(p, chunk_index(k), &r, &c0))
            continue;
        const unsigned long long cols = static_cast<unsigned long long>(p.cols);
        const int n = c0 + QF_DQ_VEC <= cols ? QF_DQ_VEC : static_cast<int>(cols - c0);
        const uint16_t *src = reinterpret_cast<const uint16_t *>(p.data) + c0;
        if (p.out_fp32) { /* bf16 -> fp32: the bits shifted up */
            unsigned *dst = reinterpret_cast<unsigned *>(p.out) + r * cols + c0;
            for (int j = 0; j < n; j++)
                dst[j] = static_cast<unsigned>(__ldg(src + j)) << 16;
            continue;
        }
        uint16_t *dst = p.out + r * cols + c0;
        if (vec) {
            *reinterpret_cast<uint4 *>(dst) = __ldg(reinterpret_cast<const uint4 *>(src));
            continue;
        }
        for (int j = 0; j < n; j++)
            dst[j] = src[j];
    }
}

} // namespace dq
} // namespace

/* <name>_dequant (qf_dq_params): one copy of the module's family to bf16. The MXFP8 module takes
 * E4M3 and E5M2 elements (E8M0 scales), the NVFP4 module E2M1 (E4M3 scales); both take BF16, the
 * bias broadcast (dq::broadcast); another dtype writes nothing (the runtime never asks for it). */
#define QF_DEQUANT_ENTRY(name, family_is_nvfp4)                                                   \
    extern "C" __global__ void __launch_bounds__(QF_DQ_THREADS) name(const qf_dq_params p) {      \
        if (p.elem == QF_DTYPE_BF16) {                                                            \
            dq::broadcast(p);                                                                     \
        } else if (family_is_nvfp4) {                                                             \
            if (p.elem == QF_DTYPE_E2M1)                                                          \
                dq::run<QF_DTYPE_E2M1>(p);                                                        \
        } else if (p.elem == QF_DTYPE_E5M2) {                                                     \
            dq::run<QF_DTYPE_E5M2>(p);                                                            \
        } else if (p.elem == QF_DTYPE_E4M3) {                                                     \
            dq::run<QF_DTYPE_E4M3>(p);                                                            \
        }                                                                                         \
    }

#endif /* QF_DEV_DEQUANT_CUH */
