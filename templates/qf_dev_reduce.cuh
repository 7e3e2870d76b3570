/* qf_dev_reduce.cuh: the NaN-keeping amax merge and the warp and block reductions shared by the
 * quantizer templates (an in-memory NVRTC header; see qf_dev_load.cuh). */
#ifndef QF_DEV_REDUCE_CUH
#define QF_DEV_REDUCE_CUH

#include "qf_formats.h"

namespace {

/* max(m, |v|) keeping NaN (as qf_amax_merge) for an amax m (sign bit clear): non-negative
 * floats order as their bits and a NaN's bits lie above +inf's, so this is one unsigned max of
 * the bits (of two NaNs the larger payload, as the amax's atomicMax across blocks keeps). */
__device__ __forceinline__ float amax_merge(float m, float v) {
    return __uint_as_float(max(__float_as_uint(m), __float_as_uint(v) & 0x7fffffffu));
}

/* max(m, |v|) in one instruction (max.NaN, sm_80+): NaN when either is NaN, as the canonical NaN
 * rather than v's payload; for amaxes that only matter as NaN or not (a block's scale). */
__device__ __forceinline__ float amax_merge_fast(float m, float v) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(v)));
    return r;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_amax(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = amax_merge(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over a block of WARPS warps; buf alternates between calls so one barrier per reduction
 * suffices. */
template <int WARPS>
__device__ __forceinline__ float block_sum(float v, float *buf) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        buf[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; w++)
        s += buf[w];
    return s;
}

/* The second pass of the backward's column sums (dgamma, dbeta, dbias), by a block of WARPS
 * warps that owns the QF_REDUCE_COLS (32) columns from c0 (a _reduce entry's block): column
 * c0 + l of part [blocks, cols] summed over its rows, where warp w adds rows w, w + WARPS, ... in
 * order (lane l, column c0 + l) and warp 0 then adds the WARPS sums in warp order: a fixed order,
 * deterministic for a given block count. Lane l of warp 0 returns column c0 + l's sum (others
 * 0); columns from cols on read nothing. Every thread of the block calls it (one barrier); s is
 * not read by another call before the block's next barrier. */
template <int WARPS>
__device__ __forceinline__ float column_sum(const float *part, int blocks, long long cols,
                                            long long c0, float (&s)[WARPS][QF_REDUCE_COLS]) {
    static_assert(QF_REDUCE_COLS == 32, "a lane per column");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc = 0.0f;
    if (c0 + lane < cols) {
        const float *col = part + c0 + lane;
#pragma unroll 8
        for (int blk = warp; blk < blocks; blk += WARPS)
            acc += col[static_cast<long long>(blk) * cols];
    }
    s[warp][lane] = acc;
    __syncthreads();
    float t = 0.0f;
    if (warp == 0)
#pragma unroll
        for (int w = 0; w < WARPS; w++)
            t += s[w][lane];
    return t;
}

} // namespace

#endif /* QF_DEV_REDUCE_CUH */
