/* smxx_activation.cu: the activation of layernorm_mlp (numerics 6) and its backward, the same
 * module for every family. C references: qf_activation_ref, qf_activation_backward_ref in
 * runtime/ref/ref_bwd.c (the same operations in the same order, in fp32).
 *
 * Main entry (qf_act_params, forward): a[m, f] = act(h[m, f]) for h [M, F], or for SwiGLU
 * a[m, f] = silu(h[m, f]) * h[m, F + f] for h = [h1 | h2] of [M, 2F]. <name>_grad (backward):
 * dh from da [M, F] (bf16, or fp32 when da_fp32) and the forward's h: gelu dh = da gelu'(h), relu
 * dh = da where h > 0 (else 0), swiglu dh1 = da h2 silu'(h1), dh2 = da silu(h1). Elementwise,
 * one thread per (m, f), grid-stride; h, a and dh in the kernel's dtype, rounded once. */
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_formats.h"

namespace {

constexpr int kDtype = __IN_DTYPE__;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr float kGeluC = 0.7978845608028654f; /* fl(sqrt(2 / pi)) */
constexpr float kGeluA = 0.044715f;

/* The scalar functions, in the references' operation order (the compiler may contract a multiply
 * and an add into one rounding: within a few ulps of the references). */
__device__ __forceinline__ float gelu(float h) {
    const float u = kGeluC * (h + kGeluA * h * h * h);
    return 0.5f * h * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad(float h) {
    const float u = kGeluC * (h + kGeluA * h * h * h), t = tanhf(u);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * h * h);
    return 0.5f * (1.0f + t) + 0.5f * h * (1.0f - t * t) * du;
}

__device__ __forceinline__ float silu(float v) {
    return v / (1.0f + expf(-v));
}

__device__ __forceinline__ float silu_grad(float v) {
    const float s = 1.0f / (1.0f + expf(-v));
    return s * (1.0f + v * (1.0f - s));
}

/* <name>_grad: dh of every (m, f). */
__device__ __forceinline__ void grad_body(const qf_act_params &p) {
    const long long n = p.M * p.F, fin = p.act == QF_ACT_SWIGLU ? 2 * p.F : p.F;
    for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * kThreads) {
        const long long m = i / p.F, f = i - m * p.F, hi = m * fin + f;
        const float v = load_elem<kDtype>(p.h, hi);
        const float d = p.da_fp32 ? load_elem<QF_DTYPE_FP32>(p.da, i)
                                  : load_elem<QF_DTYPE_BF16>(p.da, i);
        if (p.act == QF_ACT_GELU) {
            store_elem<kDtype>(p.out, hi, d * gelu_grad(v));
        } else if (p.act == QF_ACT_RELU) {
            store_elem<kDtype>(p.out, hi, v > 0.0f ? d : 0.0f);
        } else {
            const float h2 = load_elem<kDtype>(p.h, hi + p.F);
            store_elem<kDtype>(p.out, hi, d * h2 * silu_grad(v));
            store_elem<kDtype>(p.out, hi + p.F, d * silu(v));
        }
    }
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_act_params p) {
    const long long n = p.M * p.F, fin = p.act == QF_ACT_SWIGLU ? 2 * p.F : p.F;
    for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * kThreads) {
        const long long m = i / p.F, f = i - m * p.F;
        const float v = load_elem<kDtype>(p.h, m * fin + f);
        float a = p.act == QF_ACT_GELU ? gelu(v) : v > 0.0f ? v : 0.0f;
        if (p.act == QF_ACT_SWIGLU)
            a = silu(v) * load_elem<kDtype>(p.h, m * fin + p.F + f);
        store_elem<kDtype>(p.out, i, a);
    }
}

QF_GRAD_ENTRY(__KERNEL_NAME__, kThreads, qf_act_params)
