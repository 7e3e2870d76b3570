/* qf_dev_convert.cuh: FP8 conversions shared by the quantizer templates (numerics 1): two fp32
 * values to E4M3 or E5M2 with the hardware cvt. An in-memory NVRTC header; see
 * qf_dev_load.cuh. */
#ifndef QF_DEV_CONVERT_CUH
#define QF_DEV_CONVERT_CUH

#include "qf_formats.h"

namespace {

/* Two fp32 values to FP8 format OUT (QF_DTYPE_E4M3 or E5M2), round to nearest even, saturating
 * (numerics 1); lo in bits 0-7, hi in bits 8-15. */
template <int OUT>
__device__ __forceinline__ unsigned to_fp8x2(float lo, float hi) {
    unsigned short r;
    if (OUT == QF_DTYPE_E4M3)
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

} // namespace

#endif /* QF_DEV_CONVERT_CUH */
