/* qf_dev_act.cuh: layernorm_mlp's activations (numerics 6) and the activation prologue that lets
 * a quantizer or the dbias module read its input through them, so that neither a = act(h) nor
 * dh = da act'(h) is ever stored (numerics 6, "fused").
 *
 * The prologue is the instance option QF_PROLOGUE (runtime/jit/kernel_key.c; 0 = none, the
 * input read as it is): QF_PROLOGUE_ACT(act) makes the kernel's [M, K] input a = act(h) from
 * h [M, K] (SwiGLU: h = [h1 | h2] of [M, 2K]); QF_PROLOGUE_DACT(act) makes it dh [M, K] from h
 * [M, K] and da [M, F] (F = K / 2 for SwiGLU, else K). Every value is rounded to the input's
 * dtype as the activation module stores it (smxx_activation.cu), so a fused kernel gives the
 * bytes of the unfused pair. An in-memory NVRTC header; see qf_dev_load.cuh. */
#ifndef QF_DEV_ACT_CUH
#define QF_DEV_ACT_CUH

#include "qf_dev_load.cuh"
#include "qf_formats.h"

#ifndef QF_PROLOGUE
#define QF_PROLOGUE QF_PROLOGUE_NONE
#endif

namespace {

constexpr float kGeluC = 0.7978845608028654f; /* fl(sqrt(2 / pi)) */
constexpr float kGeluA = 0.044715f;

/* The scalar functions, in the C references' operation order (qf_activation_ref, ref_bwd.c):
 * gelu as h sigmoid(2 u) (= 0.5 h (1 + tanh(u))), each sigmoid one fast exponential (__expf:
 * MUFU.EX2, a few ulps) and an exact reciprocal. A fused quantizer evaluates them once per pass
 * over its input, so they are kept cheap; the compiler may also contract a multiply and an add:
 * within a few ulps of the references, and identical between the fused and unfused kernels. */
__device__ __forceinline__ float sigmoid(float v) {
    return __frcp_rn(1.0f + __expf(-v));
}

__device__ __forceinline__ float gelu(float h) {
    const float u = kGeluC * (h + kGeluA * h * h * h);
    return h * sigmoid(2.0f * u);
}

__device__ __forceinline__ float gelu_grad(float h) {
    const float u = kGeluC * (h + kGeluA * h * h * h), s = sigmoid(2.0f * u);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * h * h);
    return s + 2.0f * h * s * (1.0f - s) * du;
}

__device__ __forceinline__ float silu(float v) {
    return v * sigmoid(v);
}

__device__ __forceinline__ float silu_grad(float v) {
    const float s = sigmoid(v);
    return s * (1.0f + v * (1.0f - s));
}

/* a of one element: act(v), or silu(v) * u for SwiGLU (v = h1, u = h2). */
__device__ __forceinline__ float act_fwd(int act, float v, float u) {
    if (act == QF_ACT_SWIGLU)
        return silu(v) * u;
    return act == QF_ACT_GELU ? gelu(v) : v > 0.0f ? v : 0.0f;
}

/* dh of one element of a non-gated activation from da d and h v. */
__device__ __forceinline__ float act_grad(int act, float d, float v) {
    return act == QF_ACT_GELU ? d * gelu_grad(v) : v > 0.0f ? d : 0.0f;
}

/* v rounded to dtype DT and back (exact for fp32). */
template <int DT>
__device__ __forceinline__ float round_to(float v) {
    if (DT == QF_DTYPE_FP32)
        return v;
    return half_bits_to_float<DT>(float_to_half_bits<DT>(v));
}

/* Elements i..i+N-1 of da (bf16, or fp32 when da_fp32) as load_n gives them. */
template <int N>
__device__ __forceinline__ void load_da(const void *da, int da_fp32, long long i, float (&d)[N]) {
    if (da_fp32)
        load_n<QF_DTYPE_FP32, N>(da, i, d);
    else
        load_n<QF_DTYPE_BF16, N>(da, i, d);
}

constexpr int kPrologue = QF_PROLOGUE;
constexpr bool kHasPrologue = kPrologue != QF_PROLOGUE_NONE;
constexpr bool kPrologueGrad = kPrologue >= QF_PROLOGUE_DACT(0);
constexpr int kPrologueAct = kPrologueGrad ? kPrologue - QF_PROLOGUE_DACT(0)
                                           : kPrologue - QF_PROLOGUE_ACT(0);

/* Elements k..k+N-1 of row m of the kernel's [M, K] input as fp32, through the prologue: x
 * itself (x [M, K] of dtype DT); a = act(h) (x = h); dh from h = x [M, K] and da [M, F] (bf16, or
 * fp32 when da_fp32). N = 1, 4 or 8 as load_n; for N > 1 the elements lie in one half of a
 * SwiGLU dh (F a multiple of N) and every array is 16-byte aligned. */
template <int DT, int N>
__device__ __forceinline__ void load_src(const void *x, const void *da, int da_fp32, long long m,
                                         long long K, long long k, float (&v)[N]) {
    if constexpr (!kHasPrologue) {
        load_n<DT, N>(x, m * K + k, v);
    } else if constexpr (!kPrologueGrad) {
        const long long fin = kPrologueAct == QF_ACT_SWIGLU ? 2 * K : K;
        float u[N];
        load_n<DT, N>(x, m * fin + k, v);
        if (kPrologueAct == QF_ACT_SWIGLU)
            load_n<DT, N>(x, m * fin + K + k, u);
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = round_to<DT>(act_fwd(kPrologueAct, v[j], kPrologueAct == QF_ACT_SWIGLU ? u[j]
                                                                                         : 0.0f));
    } else {
        const bool gated = kPrologueAct == QF_ACT_SWIGLU;
        const long long F = gated ? K / 2 : K;
        const bool second = gated && k >= F; /* dh2 = da silu(h1) */
        const long long f = second ? k - F : k;
        float d[N], h1[N], h2[N];
        load_da<N>(da, da_fp32, m * F + f, d);
        load_n<DT, N>(x, m * K + f, h1);
        if (gated && !second)
            load_n<DT, N>(x, m * K + F + f, h2);
#pragma unroll
        for (int j = 0; j < N; j++) {
            float g;
            if (!gated)
                g = act_grad(kPrologueAct, d[j], h1[j]);
            else if (second)
                g = d[j] * silu(h1[j]);
            else
                g = d[j] * h2[j] * silu_grad(h1[j]);
            v[j] = round_to<DT>(g);
        }
    }
}

/* Both halves of a SwiGLU dh at columns f..f+N-1 of each half (F = K / 2): dh1 = da h2 silu'(h1)
 * and dh2 = da silu(h1) from one load of da, h1 and h2, each value as load_src gives it (the
 * same expressions, rounded once to DT). N as load_n; the arrays 16-byte aligned. */
template <int DT, int N>
__device__ __forceinline__ void load_swiglu_grad_pair(const void *x, const void *da, int da_fp32,
                                                      long long m, long long K, long long f,
                                                      float (&dh1)[N], float (&dh2)[N]) {
    const long long F = K / 2;
    float d[N], h1[N], h2[N];
    load_da<N>(da, da_fp32, m * F + f, d);
    load_n<DT, N>(x, m * K + f, h1);
    load_n<DT, N>(x, m * K + F + f, h2);
#pragma unroll
    for (int j = 0; j < N; j++) {
        dh1[j] = round_to<DT>(d[j] * h2[j] * silu_grad(h1[j]));
        dh2[j] = round_to<DT>(d[j] * silu(h1[j]));
    }
}

/* load_src on a quantizer's parameter block (x, da, da_fp32, K): N elements, or one. */
template <int DT, int N, typename P>
__device__ __forceinline__ void src_n(const P &p, long long m, long long k, float (&v)[N]) {
    load_src<DT, N>(p.x, p.da, p.da_fp32, m, p.K, k, v);
}

template <int DT, typename P>
__device__ __forceinline__ float src_elem(const P &p, long long m, long long k) {
    float v[1];
    load_src<DT, 1>(p.x, p.da, p.da_fp32, m, p.K, k, v);
    return v[0];
}

} // namespace

#endif /* QF_DEV_ACT_CUH */
