/* smxx_fp8_scale_update.cu: delayed-scaling amax-history and scale update for all of a step's
 * tensors in one launch (numerics 2.1). C reference: qf_fp8_scale_update_ref in runtime/ref/ref.c.
 *
 * One block per tensor. A tensor whose amax is 0 did not run this step and keeps its history and
 * scale (TE PR #825). Otherwise the history rolls (newest at index 0, oldest dropped), the reduced
 * amax is the history's max (or the newest value), and scale = fp8_max * 2^-margin / amax when
 * that amax is finite and positive; an infinite scale becomes FLT_MAX (TE PR #786). The amax slot
 * is consumed: it is reset to 0 for the next step. Shared memory: H floats (dynamic). */
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr float kMargin = __MARGIN__;
constexpr int kAmaxCompute = __AMAX_COMPUTE__;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kWarps = kThreads / 32;
constexpr float kFltMax = 3.402823466e+38f;

/* max |v| over the block, keeping NaN (amax_merge), valid in every thread. */
__device__ float block_amax(float v, float *s_red) {
    v = warp_amax(v);
    if ((threadIdx.x & 31) == 0)
        s_red[threadIdx.x >> 5] = v;
    __syncthreads();
    float a = s_red[0];
    for (int w = 1; w < kWarps; w++)
        a = amax_merge(a, s_red[w]);
    return a;
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_su_params p) {
    extern __shared__ float s_hist[];
    __shared__ float s_red[kWarps];
    const int t = blockIdx.x;
    const int H = p.H;
    float *hist = p.history + static_cast<long long>(t) * H;
    const float a = p.amax[t];
    if (a == 0.0f)
        return; /* uniform across the block: the tensor did not run */

    for (int i = threadIdx.x; i < H; i += kThreads)
        s_hist[i] = hist[i];
    __syncthreads();
    float m = 0.0f;
    for (int i = threadIdx.x; i < H; i += kThreads) {
        const float v = i == 0 ? a : s_hist[i - 1];
        hist[i] = v;
        m = amax_merge(m, v);
    }
    const float reduced = kAmaxCompute == QF_AMAX_COMPUTE_MOST_RECENT ? fabsf(a) : block_amax(m, s_red);
    if (threadIdx.x == 0) {
        const float fp8_max = p.fmt[t] == QF_DTYPE_E5M2 ? QF_E5M2_MAX : QF_E4M3_MAX;
        float scale = p.scale[t];
        if (reduced > 0.0f && reduced <= kFltMax) {
            scale = ldexpf(fp8_max, -static_cast<int>(kMargin)) / reduced;
            if (scale > kFltMax)
                scale = kFltMax;
        }
        p.scale[t] = scale;
        p.scale_inv[t] = 1.0f / scale;
        p.amax[t] = 0.0f;
    }
}
