/* ref_bwd.h: scalar C references of the backward pieces of layernorm_linear and layernorm_mlp
 * (numerics 6): the LayerNorm/RMSNorm backward, dbias, and the activations with their
 * derivatives. The oracles of the backward kernels; fp32 arithmetic in the order written here
 * (build with -ffp-contract=off), except where a function says it works in double. */
#ifndef QF_REF_BWD_H
#define QF_REF_BWD_H

#include <stdint.h>

#include "qf_formats.h"

/* LayerNorm / RMSNorm backward of xn = norm(x) for one dxn (numerics 6). With
 * xh = (x - mu) * rsigma (RMSNorm: x * rsigma) and g = gamma (+1 in fp32 when zcg):
 *   dxh = dxn * g;  dx = rsigma * (dxh - mean_K(dxh) - xh * mean_K(dxh * xh))  (RMSNorm: no
 *   mean_K(dxh) term);  dgamma = sum_M dxn * xh;  dbeta = sum_M dxn (LayerNorm only).
 * x [M, K] (dtype xdt: bf16, fp16 or fp32), gamma [K] (gdt), dxn [M, K] fp32, mu [M] (LayerNorm;
 * ignored for RMSNorm), rsigma [M]: the forward's statistics, never recomputed. A mean is a sum
 * in k order divided by K once; the sums over M run in row order. Outputs (fp32, caller owned;
 * dgamma and dbeta may be NULL; dbeta is not written for RMSNorm): dx [M, K], dgamma [K],
 * dbeta [K]. norm must be QF_NORM_LAYERNORM or QF_NORM_RMSNORM (QF_ASSERT). */
void qf_norm_backward_ref(qf_norm norm, int zcg, qf_dtype xdt, const void *x, qf_dtype gdt,
                          const void *gamma, const float *dxn, const float *mu,
                          const float *rsigma, int64_t M, int64_t K, float *dx, float *dgamma,
                          float *dbeta);

/* dbias [N] = sum over the M rows of dy [M, N] (dtype dydt), fp32, in row order (numerics 6). */
void qf_dbias_ref(qf_dtype dydt, const void *dy, int64_t M, int64_t N, float *dbias);

/* The activation of layernorm_mlp (numerics 6) on h [M, Fin] fp32 into a [M, F]: Fin = F, or
 * 2F for QF_ACT_SWIGLU (h = [h1 | h2] along the last dimension). */
void qf_activation_ref(qf_activation act, const float *h, int64_t M, int64_t F, float *a);

/* Its backward: dh [M, Fin] from da [M, F] and the forward's h [M, Fin]:
 *   gelu: dh = da * gelu'(h);  relu: dh = da where h > 0, else 0;
 *   swiglu: dh1 = da * h2 * silu'(h1), dh2 = da * silu(h1), with
 *   silu'(v) = s (1 + v (1 - s)), s = 1 / (1 + exp(-v)). */
void qf_activation_backward_ref(qf_activation act, const float *h, const float *da, int64_t M,
                                int64_t F, float *dh);

/* The scalar functions: gelu (tanh approximation) and its derivative, silu and its derivative. */
float qf_gelu_ref(float h);
float qf_gelu_grad_ref(float h);
float qf_silu_ref(float v);
float qf_silu_grad_ref(float v);

#endif /* QF_REF_BWD_H */
