/* qf_dev_dequant.cuh: exact element decodes of the block-scaled formats, and the `<name>_dequant`
 * entry of the MXFP8 and NVFP4 GEMM modules: one quantized copy to bf16 (qf_dq_params), the first
 * step of the staged GEMM on Hopper (dequantize both operands, then a bf16 cuBLASLt GEMM; runtime/
 * op_gemm.c). An in-memory NVRTC header; see qf_dev_load.cuh.
 *
 * Numerics (numerics 7): out = bf16(decode(element) * decode(scale)). The fp32 product is exact
 * (at most 4 significant bits of E4M3, 3 of E5M2 or 2 of E2M1, times a power of two or an E4M3
 * scale, and no product under 2^-149), so the only rounding is the one to bf16, which is exact
 * for MXFP8 scale exponents in [-117, 119] and for every NVFP4 product. A NaN scale (E8M0 0xFF,
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

namespace dq {

/* The QF_DQ_VEC / 4 32-bit words holding elements c0 .. c0 + QF_DQ_VEC - 1 of row r (all real),
 * for FP8 (E2M1: half as many), read with 8- or 16-byte loads (16-byte aligned rows). */
template <int ELEM>
__device__ __forceinline__ void load_words(const qf_dq_params &p, long long r, long long c0,
                                           unsigned (&w)[QF_DQ_VEC / 4]) {
    constexpr int bytes = ELEM == QF_DTYPE_E2M1 ? QF_DQ_VEC / 2 : QF_DQ_VEC;
    const unsigned char *src =
        p.data + (ELEM == QF_DTYPE_E2M1 ? (r * p.cols + c0) / 2 : r * p.cols + c0);
    if constexpr (bytes == 8) {
        const uint2 q = __ldg(reinterpret_cast<const uint2 *>(src));
        w[0] = q.x, w[1] = q.y;
    } else {
#pragma unroll
        for (int i = 0; i < bytes / 16; i++) {
            const uint4 q = __ldg(reinterpret_cast<const uint4 *>(src) + i);
            w[4 * i] = q.x, w[4 * i + 1] = q.y, w[4 * i + 2] = q.z, w[4 * i + 3] = q.w;
        }
    }
}

/* The decoded values of elements c0 .. c0 + QF_DQ_VEC - 1 of row r (load_words). */
template <int ELEM>
__device__ __forceinline__ void load_vec(const qf_dq_params &p, long long r, long long c0,
                                         float (&v)[QF_DQ_VEC]) {
    unsigned w[QF_DQ_VEC / 4];
    load_words<ELEM>(p, r, c0, w);
    if (ELEM == QF_DTYPE_E2M1) {
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC; i++)
            v[i] = e2m1_value(w[i / 8] >> (4 * (i % 8)));
    } else {
#pragma unroll
        for (int i = 0; i < QF_DQ_VEC / 4; i++) {
            fp8x2_to_float2<ELEM>(w[i], v[4 * i], v[4 * i + 1]);
            fp8x2_to_float2<ELEM>(w[i] >> 16, v[4 * i + 2], v[4 * i + 3]);
        }
    }
}

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

/* The scale of element (r, c) as fp32. */
template <int ELEM>
__device__ __forceinline__ float scale_at(const qf_dq_params &p, long long r, long long c) {
    const unsigned b = __ldg(p.scale + (r / p.block_rows) * p.scale_ld + c / p.block_cols);
    if (ELEM != QF_DTYPE_E2M1)
        return e8m0_value(b);
    float lo, hi;
    fp8x2_to_float2<QF_DTYPE_E4M3>(b, lo, hi);
    return lo;
}

/* Elements c0 .. c0 + QF_DQ_VEC - 1 of row r. Vector path (16-byte aligned rows, all real; one
 * scale per 16 elements along the row, or QF_DQ_VEC consecutive scale bytes for 32x1 blocks),
 * else element by element. */
template <int ELEM>
__device__ __forceinline__ void chunk(const qf_dq_params &p, long long r, long long c0,
                                      bool vec) {
    uint16_t *const out = p.out + r * p.cols + c0;
    if (vec) {
        float v[QF_DQ_VEC];
        load_vec<ELEM>(p, r, c0, v);
        float s[QF_DQ_VEC];
        if (p.block_cols >= 16) { /* one scale per 16 elements: 1x16 or 1x32 blocks */
#pragma unroll
            for (int g = 0; g < QF_DQ_VEC / 16; g++) {
                const float sg = scale_at<ELEM>(p, r, c0 + 16 * g);
#pragma unroll
                for (int i = 0; i < 16; i++)
                    s[16 * g + i] = sg;
            }
        } else { /* 32x1 blocks: consecutive E8M0 bytes of one scale row */
            const uint4 *src = reinterpret_cast<const uint4 *>(
                p.scale + (r / p.block_rows) * p.scale_ld + c0);
#pragma unroll
            for (int g = 0; g < QF_DQ_VEC / 16; g++) {
                const uint4 q = __ldg(src + g);
                const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int i = 0; i < 16; i++)
                    s[16 * g + i] = e8m0_value((w[i / 4] >> (8 * (i % 4))) & 0xFFu);
            }
        }
#pragma unroll
        for (int g = 0; g < QF_DQ_VEC / 8; g++) {
            unsigned o[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int e = 8 * g + 2 * i;
                o[i] = float2_to_bf16x2(v[e] * s[e], v[e + 1] * s[e + 1]);
            }
            reinterpret_cast<uint4 *>(out)[g] = make_uint4(o[0], o[1], o[2], o[3]);
        }
        return;
    }
    for (int i = 0; i < QF_DQ_VEC && c0 + i < p.cols; i++) {
        const float x = load1<ELEM>(p, r, c0 + i) * scale_at<ELEM>(p, r, c0 + i);
        unsigned short h;
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
        out[i] = h;
    }
}

/* The whole copy, one QF_DQ_VEC-element chunk per thread (grid: cdiv(rows * cdiv(cols,
 * QF_DQ_VEC), threads); the launcher keeps that count below 2^32). */
template <int ELEM>
__device__ __forceinline__ void run(const qf_dq_params &p) {
    const unsigned per_row = static_cast<unsigned>((p.cols + QF_DQ_VEC - 1) / QF_DQ_VEC);
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned r = i / per_row;
    if (r >= p.rows)
        return;
    const long long c0 = static_cast<long long>(i - r * per_row) * QF_DQ_VEC;
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.data) |
                                 reinterpret_cast<unsigned long long>(p.out) |
                                 (p.block_cols >= QF_DQ_VEC
                                      ? 0ull
                                      : reinterpret_cast<unsigned long long>(p.scale) |
                                            static_cast<unsigned long long>(p.scale_ld));
    const bool vec = p.cols % QF_DQ_VEC == 0 && (a & 15u) == 0; /* E2M1 rows: 16-byte aligned */
    chunk<ELEM>(p, r, c0, vec);
}

/* The bias of the staged GEMM broadcast into y (qf_dq_params with elem QF_DTYPE_BF16):
 * out[r, c] = data[c] (bf16 [cols]) for r < rows, so that cuBLASLt adds it as C (beta 1) in fp32
 * before its one rounding; when scale is not NULL, it is the device beta slot (fp32) and gets 1. */
__device__ __forceinline__ void broadcast(const qf_dq_params &p) {
    const unsigned per_row = static_cast<unsigned>((p.cols + QF_DQ_VEC - 1) / QF_DQ_VEC);
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 && p.scale)
        *reinterpret_cast<float *>(const_cast<uint8_t *>(p.scale)) = 1.0f;
    const unsigned r = i / per_row;
    if (r >= p.rows)
        return;
    const long long c0 = static_cast<long long>(i - r * per_row) * QF_DQ_VEC;
    const uint16_t *src = reinterpret_cast<const uint16_t *>(p.data) + c0;
    uint16_t *dst = p.out + r * p.cols + c0;
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.data) |
                                 reinterpret_cast<unsigned long long>(p.out);
    if (p.cols % QF_DQ_VEC == 0 && (a & 15u) == 0) {
#pragma unroll
        for (int g = 0; g < QF_DQ_VEC / 8; g++)
            reinterpret_cast<uint4 *>(dst)[g] = __ldg(reinterpret_cast<const uint4 *>(src) + g);
        return;
    }
    for (int j = 0; j < QF_DQ_VEC && c0 + j < p.cols; j++)
        dst[j] = src[j];
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
