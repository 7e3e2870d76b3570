/* smxx_norm_backward.cu: LayerNorm / RMSNorm backward (numerics 6), the same module for every
 * family. C reference: qf_norm_backward_ref in runtime/ref/ref_bwd.c.
 *
 * With xh = (x - mu) * rsigma (RMSNorm: x * rsigma), g = gamma (+1 in fp32 when zero-centered)
 * and dxh = dxn * g:
 *   dx = rsigma * (dxh - mean_K(dxh) - xh * mean_K(dxh * xh))   (RMSNorm: no mean_K(dxh) term)
 *   dgamma = sum_M dxn * xh,   dbeta = sum_M dxn (LayerNorm)
 * in fp32, from the forward's mu and rsigma (never recomputed).
 *
 * Main entry (qf_nb_params): block b takes rows [b * rows_per_block, ...) one at a time. Pass 1
 * over a row adds up dxh and dxh * xh (thread t takes columns t, t + THREADS, ...; then a block
 * reduction), and each thread adds dxn * xh and dxn of its columns into its own shared-memory
 * accumulators; pass 2 re-reads the row and writes dx in x's dtype. At the end the block writes
 * its accumulators to the partials. <name>_reduce: one thread per column adds the partials of
 * every block in block order (deterministic). Shared memory: 2 K floats (dynamic). */
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kWarps = kThreads / 32;
constexpr bool kLayerNorm = kNorm == QF_NORM_LAYERNORM;

/* Element i of dxn (bf16, or fp32 when p.dxn_fp32) as fp32. */
__device__ __forceinline__ float load_dxn(const qf_nb_params &p, long long i) {
    return p.dxn_fp32 ? load_elem<QF_DTYPE_FP32>(p.dxn, i) : load_elem<QF_DTYPE_BF16>(p.dxn, i);
}

/* g of column k: gamma (x's dtype or fp32, the instance's) + 1 when zero-centered. */
__device__ __forceinline__ float load_g(const qf_nb_params &p, long long k) {
    const float g = load_elem<kGammaDtype>(p.gamma, k);
    return kZeroCenteredGamma ? g + 1.0f : g;
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_nb_params p) {
    extern __shared__ float s_acc[]; /* [0, K): dgamma, [K, 2K): dbeta */
    __shared__ float s_red[2][2][kWarps];
    const long long K = p.K;
    for (long long c = threadIdx.x; c < 2 * K; c += kThreads)
        s_acc[c] = 0.0f;
    __syncthreads(); /* zeroed by other threads than the ones that add into them below */
    const long long r0 = static_cast<long long>(blockIdx.x) * p.rows_per_block;
    const long long r1 = r0 + p.rows_per_block < p.M ? r0 + p.rows_per_block : p.M;
    for (long long r = r0; r < r1; r++) {
        const float mu = kLayerNorm ? p.mu[r] : 0.0f, rs = p.rsigma[r];
        float s1 = 0.0f, s2 = 0.0f; /* sum dxh, sum dxh * xh over this thread's columns */
        for (long long c = threadIdx.x; c < K; c += kThreads) {
            const float xv = load_elem<kInDtype>(p.x, r * K + c);
            const float xh = kLayerNorm ? (xv - mu) * rs : xv * rs;
            const float d = load_dxn(p, r * K + c);
            const float dxh = d * load_g(p, c);
            s1 += dxh;
            s2 += dxh * xh;
            s_acc[c] += d * xh;
            if (kLayerNorm)
                s_acc[K + c] += d;
        }
        /* two buffers, alternated per row: a row's reads finish before the next row writes the
         * same buffer, behind the next row's first barrier */
        float (*red)[kWarps] = s_red[(r - r0) & 1];
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        if ((threadIdx.x & 31) == 0) {
            red[0][threadIdx.x >> 5] = s1;
            red[1][threadIdx.x >> 5] = s2;
        }
        __syncthreads();
        float t1 = 0.0f, t2 = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) {
            t1 += red[0][w];
            t2 += red[1][w];
        }
        const float m1 = kLayerNorm ? t1 / static_cast<float>(K) : 0.0f;
        const float m2 = t2 / static_cast<float>(K);
        for (long long c = threadIdx.x; c < K; c += kThreads) {
            const float xv = load_elem<kInDtype>(p.x, r * K + c);
            const float xh = kLayerNorm ? (xv - mu) * rs : xv * rs;
            const float dxh = load_dxn(p, r * K + c) * load_g(p, c);
            store_elem<kInDtype>(p.dx, r * K + c, rs * (dxh - m1 - xh * m2));
        }
    }
    /* each thread reads back only the accumulators it added into */
    float *pg = p.part + static_cast<long long>(blockIdx.x) * K;
    float *pb = p.part + (static_cast<long long>(p.blocks) + blockIdx.x) * K;
    for (long long c = threadIdx.x; c < K; c += kThreads) {
        pg[c] = s_acc[c];
        if (kLayerNorm)
            pb[c] = s_acc[K + c];
    }
}

namespace {

/* <name>_reduce (grid cdiv(K, THREADS)): dgamma[k] (and dbeta[k]) = the main entry's partials of
 * column k summed over its blocks, in block order. */
__device__ __forceinline__ void reduce_body(const qf_nb_params &p) {
    const long long c = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    if (c >= p.K)
        return;
    p.dgamma[c] = column_sum(p.part, p.blocks, p.K, c);
    if (kLayerNorm)
        p.dbeta[c] = column_sum(p.part + static_cast<long long>(p.blocks) * p.K, p.blocks, p.K, c);
}

} // namespace

QF_REDUCE_ENTRY(__KERNEL_NAME__, kThreads, qf_nb_params)
