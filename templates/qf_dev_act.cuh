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

/* The activations, on N elements at a time, in the C references' operation order
 * (qf_activation_ref, ref_bwd.c): gelu as h sigmoid(2 u) (= 0.5 h (1 + tanh(u))), each sigmoid
 * one fast exponential (MUFU.EX2, a few ulps) and an exact reciprocal. A fused quantizer
 * evaluates them once per pass over its input, so they are kept cheap; the compiler may also
 * contract a multiply and an add: within a few ulps of the references, and identical between the
 * fused and unfused kernels, which both call these. */

/* 1 + exp(-v) as 1 + __expf(-v) gives it, in one MUFU.EX2: __expf rescales an argument below
 * -126 to keep a subnormal result's bits, which 1 + exp(-v) rounds away, so the flushed result
 * (ex2.approx.ftz) gives the same sum. */
__device__ __forceinline__ float one_plus_exp_neg(float v) {
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(v * -1.44269504f /* fl(log2 e) */));
    return 1.0f + e;
}

/* 1 / x correctly rounded for 1 <= x < 2^126 (or NaN): __frcp_rn's own fast path, MUFU.RCP and
 * one Newton step, exact wherever 1 / x is a normal float. Past 2^126, where 1 / x is subnormal,
 * __frcp_rn takes its general path (it decides by an exponent test of three instructions). */
__device__ __forceinline__ float rcp_rn_fast(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return fmaf(r, fmaf(-x, r, 1.0f), r);
}

/* s[j] = sigmoid(v[j]) for N values: the fast reciprocal for all, then __frcp_rn for those past
 * 2^126 (v below -87) behind one test for the N of them, not one branch each. */
template <int N>
__device__ __forceinline__ void sigmoid_n(const float (&v)[N], float (&s)[N]) {
    float big = 0.0f;
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float x = one_plus_exp_neg(v[j]);
        big = fmaxf(big, x); /* a NaN x is dropped here: the fast path gives it NaN too */
        s[j] = rcp_rn_fast(x);
    }
    if (big >= 0x1p126f) /* x again rather than N more live registers */
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float x = one_plus_exp_neg(v[j]);
            if (x >= 0x1p126f)
                s[j] = __frcp_rn(x);
        }
}

/* The argument of gelu's sigmoid, 2 u with u = sqrt(2 / pi) (h + 0.044715 h^3). */
__device__ __forceinline__ float gelu_arg(float h) {
    const float u = kGeluC * (h + kGeluA * h * h * h);
    return 2.0f * u;
}

/* s[j] = the sigmoid in act(v[j]): of 2 u (gelu_arg) for gelu, of v itself for silu. */
template <int N>
__device__ __forceinline__ void act_sigmoid_n(int act, const float (&v)[N], float (&s)[N]) {
    float arg[N];
#pragma unroll
    for (int j = 0; j < N; j++)
        arg[j] = act == QF_ACT_GELU ? gelu_arg(v[j]) : v[j];
    sigmoid_n(arg, s);
}

/* a = act(v) of N elements, with one sigmoid_n for the N: gelu h sigmoid(2 u), SwiGLU
 * silu(v) u = (v sigmoid(v)) u (v = h1, u = h2; u is not read otherwise), relu max(v, 0). */
template <int N>
__device__ __forceinline__ void act_fwd_n(int act, const float (&v)[N], const float (&u)[N],
                                          float (&a)[N]) {
    if (act == QF_ACT_RELU) {
#pragma unroll
        for (int j = 0; j < N; j++)
            a[j] = v[j] > 0.0f ? v[j] : 0.0f;
        return;
    }
    float s[N];
    act_sigmoid_n(act, v, s);
#pragma unroll
    for (int j = 0; j < N; j++)
        a[j] = act == QF_ACT_SWIGLU ? (v[j] * s[j]) * u[j] : v[j] * s[j];
}

/* dh = d act'(v) of N elements of a non-gated activation from da d and h v: gelu
 * d (s + 2 h s (1 - s) du) with s = sigmoid(2 u), du = sqrt(2 / pi) (1 + 3 0.044715 h^2); relu
 * d where h > 0, else 0. */
template <int N>
__device__ __forceinline__ void act_grad_n(int act, const float (&d)[N], const float (&v)[N],
                                           float (&g)[N]) {
    if (act != QF_ACT_GELU) {
#pragma unroll
        for (int j = 0; j < N; j++)
            g[j] = v[j] > 0.0f ? d[j] : 0.0f;
        return;
    }
    float s[N];
    act_sigmoid_n(QF_ACT_GELU, v, s);
#pragma unroll
    for (int j = 0; j < N; j++) {
        const float h = v[j], du = kGeluC * (1.0f + 3.0f * kGeluA * h * h);
        g[j] = d[j] * (s[j] + 2.0f * h * s[j] * (1.0f - s[j]) * du);
    }
}

/* Both halves of a SwiGLU dh of N elements from da d, h1 v and h2 u, one sigmoid_n for both:
 * dh1 = d u silu'(v) = d u (s (1 + v (1 - s))) and dh2 = d silu(v) = d (v s). */
template <int N>
__device__ __forceinline__ void swiglu_grad_n(const float (&d)[N], const float (&v)[N],
                                              const float (&u)[N], float (&dh1)[N],
                                              float (&dh2)[N]) {
    float s[N];
    sigmoid_n(v, s);
#pragma unroll
    for (int j = 0; j < N; j++) {
        dh1[j] = d[j] * u[j] * (s[j] * (1.0f + v[j] * (1.0f - s[j])));
        dh2[j] = d[j] * (v[j] * s[j]);
    }
}

/* v rounded to dtype DT and back (exact for fp32). */
template <int DT>
__device__ __forceinline__ float round_to(float v) {
    if (DT == QF_DTYPE_FP32)
        return v;
    return half_bits_to_float<DT>(float_to_half_bits<DT>(v));
}

/* round_to of a and b, two 16-bit values converted by one instruction (cvt.rn.bf16x2.f32 or
 * cvt.rn.f16x2.f32). */
template <int DT>
__device__ __forceinline__ void round_to2(float &a, float &b) {
    if (DT == QF_DTYPE_FP32)
        return;
    unsigned w;
    if (DT == QF_DTYPE_BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a)); /* a in the low half */
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
    a = half_bits_to_float<DT>(w & 0xFFFFu);
    b = half_bits_to_float<DT>(w >> 16);
}

/* round_to of each of the N values of v, in pairs where N is even. */
template <int DT, int N>
__device__ __forceinline__ void round_all(float (&v)[N]) {
#pragma unroll
    for (int j = 0; j + 1 < N; j += 2)
        round_to2<DT>(v[j], v[j + 1]);
    if (N % 2)
        v[N - 1] = round_to<DT>(v[N - 1]);
}

/* Elements i..i+N-1 of da (bf16, or fp32 when da_fp32) as load_n gives them, through the
 * loader ld (LoadGlobal, LoadFetch, LoadStaged, LoadAhead or LoadHeld: qf_dev_load.cuh). */
template <int N, typename L>
__device__ __forceinline__ void load_da(L &ld, const void *da, int da_fp32, long long i,
                                        float (&d)[N]) {
    if (da_fp32)
        ld.template vec<QF_DTYPE_FP32, N>(da, i, d);
    else
        ld.template vec<QF_DTYPE_BF16, N>(da, i, d);
}

constexpr int kPrologue = QF_PROLOGUE;
constexpr bool kHasPrologue = kPrologue != QF_PROLOGUE_NONE;
constexpr bool kPrologueGrad = kPrologue >= QF_PROLOGUE_DACT(0);
constexpr int kPrologueAct = kPrologueGrad ? kPrologue - QF_PROLOGUE_DACT(0)
                                           : kPrologue - QF_PROLOGUE_ACT(0);

/* Elements k..k+N-1 of row m of the kernel's [M, K] input as fp32, read through the loader ld
 * and computed through the prologue: x itself (x [M, K] of dtype DT); a = act(h) (x = h); dh
 * from h = x [M, K] and da [M, F] (bf16, or fp32 when da_fp32). N = 1, 4 or 8 as load_n; for
 * N > 1 the elements lie in one half of a SwiGLU dh (F a multiple of N) and every array is
 * 16-byte aligned. !ROUND: the prologue's values before their rounding to DT (for an amax,
 * which may be rounded once instead: rounding to nearest is monotonic and odd). */
template <int DT, int N, typename L, bool ROUND = true>
__device__ __forceinline__ void load_src_from(L &ld, const void *x, const void *da, int da_fp32,
                                              long long m, long long K, long long k,
                                              float (&v)[N]) {
    if constexpr (!kHasPrologue) {
        ld.template vec<DT, N>(x, m * K + k, v);
    } else if constexpr (!kPrologueGrad) {
        const long long fin = kPrologueAct == QF_ACT_SWIGLU ? 2 * K : K;
        float u[N];
        ld.template vec<DT, N>(x, m * fin + k, v);
        if (kPrologueAct == QF_ACT_SWIGLU)
            ld.template vec<DT, N>(x, m * fin + K + k, u);
        act_fwd_n(kPrologueAct, v, u, v);
        if (ROUND)
            round_all<DT>(v);
    } else {
        const bool gated = kPrologueAct == QF_ACT_SWIGLU;
        const long long F = gated ? K / 2 : K;
        const bool second = gated && k >= F; /* dh2 = da silu(h1) */
        const long long f = second ? k - F : k;
        float d[N], h1[N], h2[N];
        load_da<N>(ld, da, da_fp32, m * F + f, d);
        ld.template vec<DT, N>(x, m * K + f, h1);
        if (gated && !second)
            ld.template vec<DT, N>(x, m * K + F + f, h2);
        else
#pragma unroll
            for (int j = 0; j < N; j++)
                h2[j] = h1[j]; /* not read: dh2 does without h2 */
        if (!gated) {
            act_grad_n(kPrologueAct, d, h1, v);
        } else {
            float dh1[N], dh2[N];
            swiglu_grad_n(d, h1, h2, dh1, dh2);
#pragma unroll
            for (int j = 0; j < N; j++)
                v[j] = second ? dh2[j] : dh1[j];
        }
        if (ROUND)
            round_all<DT>(v);
    }
}

/* load_src_from global memory. */
template <int DT, int N>
__device__ __forceinline__ void load_src(const void *x, const void *da, int da_fp32, long long m,
                                         long long K, long long k, float (&v)[N]) {
    LoadGlobal g;
    load_src_from<DT, N>(g, x, da, da_fp32, m, K, k, v);
}

/* Both halves of a SwiGLU dh at columns f..f+N-1 of each half (F = K / 2): dh1 = da h2 silu'(h1)
 * and dh2 = da silu(h1) from one load of da, h1 and h2, each value as load_src gives it (the
 * same expressions, rounded once to DT; !ROUND: not rounded, as load_src_from's), through the
 * loader ld. N as load_n; the arrays 16-byte aligned. */
template <int DT, int N, typename L, bool ROUND = true>
__device__ __forceinline__ void load_swiglu_grad_pair(L &ld, const void *x, const void *da,
                                                      int da_fp32, long long m, long long K,
                                                      long long f, float (&dh1)[N],
                                                      float (&dh2)[N]) {
    const long long F = K / 2;
    float d[N], h1[N], h2[N];
    load_da<N>(ld, da, da_fp32, m * F + f, d);
    ld.template vec<DT, N>(x, m * K + f, h1);
    ld.template vec<DT, N>(x, m * K + F + f, h2);
    swiglu_grad_n(d, h1, h2, dh1, dh2);
    if (ROUND)
#pragma unroll
        for (int j = 0; j < N; j++)
            round_to2<DT>(dh1[j], dh2[j]);
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
