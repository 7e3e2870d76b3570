/* smxx_activation.cu: the activation of layernorm_mlp (numerics 6) and its backward, the same
 * module for every family. C references: qf_activation_ref, qf_activation_backward_ref in
 * runtime/ref/ref_bwd.c (the same operations in the same order, in fp32).
 *
 * Main entry (qf_act_params, forward): a[m, f] = act(h[m, f]) for h [M, F], or for SwiGLU
 * a[m, f] = silu(h[m, f]) * h[m, F + f] for h = [h1 | h2] of [M, 2F]. <name>_grad (backward):
 * dh from da [M, F] (bf16, or fp32 when da_fp32) and the forward's h: gelu dh = da gelu'(h), relu
 * dh = da where h > 0 (else 0), swiglu dh1 = da h2 silu'(h1), dh2 = da silu(h1). Elementwise,
 * grid-stride over groups of 8 consecutive f (16-byte loads and stores) when F is a multiple of
 * 8 and every array is 16-byte aligned, else of one; h, a and dh in the kernel's dtype, rounded
 * once. The scalar functions are qf_dev_act.cuh's, which the quantizers' activation prologue
 * shares. With p.amax, the kernel also max-merges |out| as stored into *p.amax (per thread, then
 * per warp, one atomicMax per warp), so that current scaling's quantizer of a or dh can skip its
 * own amax pass (numerics 2.2). */
#include "qf_dev_act.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kDtype = __IN_DTYPE__;
constexpr int kThreads = __BLOCK_THREADS__;

/* 1 when the launch can work in groups of kVec elements: F a multiple of kVec and every array
 * 16-byte aligned (else one element per group). */
constexpr int kVec = 8;
__device__ __forceinline__ bool vec_ok(const qf_act_params &p, bool grad) {
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.h) |
                                 reinterpret_cast<unsigned long long>(p.out) |
                                 (grad ? reinterpret_cast<unsigned long long>(p.da) : 0ull);
    return p.F % kVec == 0 && (a & 15ull) == 0;
}

/* am max-merged with |v| of V values (each already rounded to the stored dtype). */
template <int V>
__device__ __forceinline__ float amax_of(float am, const float (&v)[V]) {
#pragma unroll
    for (int j = 0; j < V; j++)
        am = amax_merge(am, v[j]);
    return am;
}

/* a of the V elements of group g (elements g V .. g V + V - 1 of a, within one row); with Amax,
 * am merged with their |a| as stored. */
template <int V, bool Amax>
__device__ __forceinline__ void fwd_group(const qf_act_params &p, long long g, float &am) {
    const long long fin = p.act == QF_ACT_SWIGLU ? 2 * p.F : p.F;
    const long long i = g * V, m = i / p.F, f = i - m * p.F;
    float v[V], a[V];
    load_n<kDtype, V>(p.h, m * fin + f, v);
    if (p.act == QF_ACT_SWIGLU) {
        float u[V];
        load_n<kDtype, V>(p.h, m * fin + p.F + f, u);
        act_fwd_n(QF_ACT_SWIGLU, v, u, a);
    } else {
        act_fwd_n(p.act, v, v, a); /* u is not read */
    }
    if (Amax) {
        round_all<kDtype>(a); /* store_n rounds the same values to the same bits */
        am = amax_of(am, a);
    }
    store_n<kDtype, V>(p.out, i, a);
}

/* dh of the V elements of group g of da (with Amax, am merged as in fwd_group). */
template <int V, bool Amax>
__device__ __forceinline__ void grad_group(const qf_act_params &p, long long g, float &am) {
    const long long fin = p.act == QF_ACT_SWIGLU ? 2 * p.F : p.F;
    const long long i = g * V, m = i / p.F, f = i - m * p.F, hi = m * fin + f;
    float v[V], d[V], o[V];
    load_n<kDtype, V>(p.h, hi, v);
    if (p.da_fp32)
        load_n<QF_DTYPE_FP32, V>(p.da, i, d);
    else
        load_n<QF_DTYPE_BF16, V>(p.da, i, d);
    if (p.act == QF_ACT_SWIGLU) {
        float u[V], o2[V];
        load_n<kDtype, V>(p.h, hi + p.F, u);
        swiglu_grad_n(d, v, u, o, o2);
        if (Amax) {
            round_all<kDtype>(o2);
            am = amax_of(am, o2);
        }
        store_n<kDtype, V>(p.out, hi + p.F, o2);
    } else {
        act_grad_n(p.act, d, v, o);
    }
    if (Amax) {
        round_all<kDtype>(o);
        am = amax_of(am, o);
    }
    store_n<kDtype, V>(p.out, hi, o);
}

/* Every group of the launch, grid-stride; with Amax, the warp's amax of what it stored merged
 * into *p.amax by lane 0 (every lane reaches the merge: the loop has no early exit). */
template <int V, bool Grad, bool Amax>
__device__ __forceinline__ void run_groups(const qf_act_params &p) {
    const long long groups = p.M * p.F / V;
    float am = 0.0f;
    for (long long g = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; g < groups;
         g += static_cast<long long>(gridDim.x) * kThreads) {
        if (Grad)
            grad_group<V, Amax>(p, g, am);
        else
            fwd_group<V, Amax>(p, g, am);
    }
    if (Amax) {
        am = warp_amax(am);
        if ((threadIdx.x & 31) == 0) /* non-negative floats (and NaN above them) order as ints */
            atomicMax(reinterpret_cast<int *>(p.amax), __float_as_int(am));
    }
}

/* One pass of every group: 16-byte groups where vec_ok, else one element each. */
template <bool Grad>
__device__ __forceinline__ void run(const qf_act_params &p) {
    const bool vec = vec_ok(p, Grad);
    if (p.amax)
        vec ? run_groups<kVec, Grad, true>(p) : run_groups<1, Grad, true>(p);
    else
        vec ? run_groups<kVec, Grad, false>(p) : run_groups<1, Grad, false>(p);
}

/* <name>_grad: dh of every (m, f). */
__device__ __forceinline__ void grad_body(const qf_act_params &p) {
    run<true>(p);
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_act_params p) {
    run<false>(p);
}

QF_GRAD_ENTRY(__KERNEL_NAME__, kThreads, qf_act_params)
