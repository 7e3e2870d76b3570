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

/* One element (any alignment). */
template <int ELEM>
__device__ __forceinline__ float load1(const qf_dq_params &p, long long r, long long c) {
    const long long i = r * p.cols + c;
    if (ELEM == QF_DTYPE_E2M1)
        return e2m1_value(static_cast<unsigned>(p.data[i / 2]) >> (4 * (i & 1)));
    float lo, hi;
    fp8x2_to_float2<ELEM>(p.data[i], lo, hi);
    return lo;
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

/* The scale entry of element (r, c) (qf_dq_params). */
__device__ __forceinline__ const uint8_t *scale_ptr(const qf_dq_params &p, long long r,
                                                    long long c) {
    return p.scale + (r / p.block_rows) * p.scale_ld + c / p.block_cols;
}

/* One vector chunk: QF_DQ_VEC elements of one row, read with one 8-byte (FP8) or 4-byte (E2M1)
 * load, and their scale bytes: one for 1x16 and 1x32 blocks, QF_DQ_VEC consecutive ones (one
 * per column) for 32x1 blocks. */
struct Raw {
    unsigned w[2];  /* the elements' bytes (E2M1: w[0] only) */
    unsigned sc[2]; /* the scale byte (sc[0] & 0xFF) or QF_DQ_VEC scale bytes */
};

template <int ELEM>
__device__ __forceinline__ Raw load_raw(const qf_dq_params &p, long long r, long long c0) {
    Raw raw;
    const long long i = r * p.cols + c0;
    if (ELEM == QF_DTYPE_E2M1) {
        raw.w[0] = __ldg(reinterpret_cast<const unsigned *>(p.data + i / 2));
        raw.w[1] = 0u;
    } else {
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(p.data + i));
        raw.w[0] = q.x, raw.w[1] = q.y;
    }
    if (p.block_cols >= QF_DQ_VEC) {
        raw.sc[0] = __ldg(scale_ptr(p, r, c0));
        raw.sc[1] = 0u;
    } else { /* 32x1 blocks: the QF_DQ_VEC entries of columns c0.. */
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(scale_ptr(p, r, c0)));
        raw.sc[0] = q.x, raw.sc[1] = q.y;
    }
    return raw;
}

/* Decodes a loaded chunk and stores its QF_DQ_VEC bf16 values (one 16-byte store). */
template <int ELEM>
__device__ __forceinline__ void store_raw(const qf_dq_params &p, const Raw &raw, long long r,
                                          long long c0) {
    unsigned o[QF_DQ_VEC / 2];
    if constexpr (ELEM == QF_DTYPE_E2M1) { /* 8 codes of one 1x16 block: one scale */
        static_assert(QF_DQ_VEC == 8, "8 codes: half of a 1x16 block (p.block_cols 16)");
        const float s0 = scale_value<ELEM>(raw.sc[0] & 0xFFu);
        e2m1x8_bf16(raw.w[0], float2_to_bf16x2(s0, s0), o);
    } else {
        float v[QF_DQ_VEC], s[QF_DQ_VEC];
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC / 4; i++) {
            fp8x2_to_float2<ELEM>(raw.w[i], v[4 * i], v[4 * i + 1]);
            fp8x2_to_float2<ELEM>(raw.w[i] >> 16, v[4 * i + 2], v[4 * i + 3]);
        }
        const bool one = p.block_cols >= QF_DQ_VEC;
        const float s0 = scale_value<ELEM>(raw.sc[0] & 0xFFu);
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC; i++)
            s[i] = one ? s0 : e8m0_value((raw.sc[i / 4] >> (8 * (i % 4))) & 0xFFu);
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC / 2; i++)
            o[i] = float2_to_bf16x2(v[2 * i] * s[2 * i], v[2 * i + 1] * s[2 * i + 1]);
    }
    *reinterpret_cast<uint4 *>(p.out + r * p.cols + c0) = make_uint4(o[0], o[1], o[2], o[3]);
}

/* Elements c0 .. c0 + QF_DQ_VEC - 1 of row r (as far as they exist), one at a time. */
template <int ELEM>
__device__ __forceinline__ void chunk_scalar(const qf_dq_params &p, long long r, long long c0) {
    for (int i = 0; i < QF_DQ_VEC && c0 + i < p.cols; i++) {
        const float x =
            load1<ELEM>(p, r, c0 + i) * scale_value<ELEM>(__ldg(scale_ptr(p, r, c0 + i)));
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
        p.out[r * p.cols + c0 + i] = h;
    }
}

/* Chunk k (0 .. QF_DQ_CHUNKS - 1) of this thread: chunk number (block * QF_DQ_CHUNKS + k) *
 * QF_DQ_THREADS + thread, so that each pass of a warp reads and writes consecutive memory. False
 * past the end. */
__device__ __forceinline__ bool chunk_of(const qf_dq_params &p, int k, long long *r,
                                         long long *c0) {
    const unsigned per_row = static_cast<unsigned>((p.cols + QF_DQ_VEC - 1) / QF_DQ_VEC);
    const unsigned i = (blockIdx.x * QF_DQ_CHUNKS + k) * QF_DQ_THREADS + threadIdx.x;
    const unsigned row = i / per_row;
    *r = row;
    *c0 = static_cast<long long>(i - row * per_row) * QF_DQ_VEC;
    return row < p.rows;
}

/* The whole copy, QF_DQ_CHUNKS chunks per thread, all loaded before any is stored (grid:
 * cdiv(rows * cdiv(cols, QF_DQ_VEC), QF_DQ_THREADS * QF_DQ_CHUNKS); the launcher keeps the chunk
 * count below 2^32). The vector path needs rows of whole chunks and 16-byte aligned buffers
 * (and scale rows, for 32x1 blocks). */
template <int ELEM>
__device__ __forceinline__ void run(const qf_dq_params &p) {
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.data) |
                                 reinterpret_cast<unsigned long long>(p.out) |
                                 (p.block_cols >= QF_DQ_VEC
                                      ? 0ull
                                      : reinterpret_cast<unsigned long long>(p.scale) |
                                            static_cast<unsigned long long>(p.scale_ld));
    const bool vec = p.cols % QF_DQ_VEC == 0 && (a & 15u) == 0;
    long long r[QF_DQ_CHUNKS], c0[QF_DQ_CHUNKS];
    bool live[QF_DQ_CHUNKS];
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++)
        live[k] = chunk_of(p, k, &r[k], &c0[k]);
    if (!vec) {
#pragma unroll
        for (int k = 0; k < QF_DQ_CHUNKS; k++)
            if (live[k])
                chunk_scalar<ELEM>(p, r[k], c0[k]);
        return;
    }
    Raw raw[QF_DQ_CHUNKS];
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++)
        if (live[k])
            raw[k] = load_raw<ELEM>(p, r[k], c0[k]);
#pragma unroll
    for (int k = 0; k < QF_DQ_CHUNKS; k++)
        if (live[k])
            store_raw<ELEM>(p, raw[k], r[k], c0[k]);
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
        long long r, c0;
        if (!chunk_of(p, k, &r, &c0))
            continue;
        const uint16_t *src = reinterpret_cast<const uint16_t *>(p.data) + c0;
        if (p.out_fp32) { /* bf16 -> fp32: the bits shifted up */
            unsigned *dst = reinterpret_cast<unsigned *>(p.out) + r * p.cols + c0;
            for (int j = 0; j < QF_DQ_VEC && c0 + j < p.cols; j++)
                dst[j] = static_cast<unsigned>(__ldg(src + j)) << 16;
            continue;
        }
        uint16_t *dst = p.out + r * p.cols + c0;
        if (vec) {
            *reinterpret_cast<uint4 *>(dst) = __ldg(reinterpret_cast<const uint4 *>(src));
            continue;
        }
        for (int j = 0; j < QF_DQ_VEC && c0 + j < p.cols; j++)
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
