/* qf_dev_reduce.cuh: the NaN-keeping amax merge and the warp and block reductions shared by the
 * quantizer templates (an in-memory NVRTC header; see qf_dev_load.cuh). */
#ifndef QF_DEV_REDUCE_CUH
#define QF_DEV_REDUCE_CUH

namespace {

/* max(m, |v|) keeping NaN (same rule as qf_amax_merge). */
__device__ __forceinline__ float amax_merge(float m, float v) {
    const float a = fabsf(v);
    return (a > m || a != a) ? a : m;
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

/* The sum of part[blk * ld + c] over blk = 0 .. blocks - 1, in block order: the second pass of the
 * backward's column sums (dgamma, dbeta, dbias), deterministic for a given block count. */
__device__ __forceinline__ float column_sum(const float *part, int blocks, long long ld,
                                            long long c) {
    float s = 0.0f;
    for (int blk = 0; blk < blocks; blk++)
        s += part[static_cast<long long>(blk) * ld + c];
    return s;
}

} // namespace

#endif /* QF_DEV_REDUCE_CUH */
