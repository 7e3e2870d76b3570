/* qf_dev_scale.cuh: the FP8 scale of an amax, shared by FP8 current scaling (numerics 2.2, one
 * scale per tensor) and FP8 block scaling (numerics 2.5, one per 1x128 block or 128x128 tile):
 * TE's compute_scale_from_amax, the device twin of qf_fp8_scale_from_amax_ref
 * (runtime/ref/ref_fp8_current.c). An in-memory NVRTC header; see qf_dev_load.cuh. */
#ifndef QF_DEV_SCALE_CUH
#define QF_DEV_SCALE_CUH

namespace {

/* a = max(amax, amax_epsilon), where a NaN amax stays NaN (TE's `if (amax < eps)`); 1 for a zero
 * or non-finite a; else fp8_max / a correctly rounded, value_for_inf where that quotient is
 * infinite (current scaling: FLT_MAX; block scaling: the input dtype's largest finite value);
 * then, under power_2_scales, the mantissa cleared (a power of two, rounded down). */
__device__ __forceinline__ float fp8_scale_from_amax(float amax, float amax_epsilon,
                                                     bool power_2_scales, float fp8_max,
                                                     float value_for_inf) {
    const float a = amax < amax_epsilon ? amax_epsilon : amax;
    if (a == 0.0f || isinf(a) || isnan(a))
        return 1.0f;
    float s = __fdiv_rn(fp8_max, a);
    if (isinf(s))
        s = value_for_inf;
    if (power_2_scales)
        s = __int_as_float(__float_as_int(s) & 0xFF800000);
    return s;
}

} // namespace

#endif /* QF_DEV_SCALE_CUH */
