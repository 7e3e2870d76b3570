/* mlp_model.h: the LayerNorm + MLP block in double precision, unquantized (numerics 6): the fp64
 * reference the GPU tests check qf_layernorm_mlp_fwd / _bwd against, and the baseline the demo
 * trains beside the recipes. Host arrays, row-major; the loops over rows use OpenMP when the
 * caller is built with -fopenmp (results do not depend on the thread count). */
#ifndef QF_MLP_MODEL_H
#define QF_MLP_MODEL_H

#include <stdint.h>

#include "qf_formats.h"

/* The block's parameters. x [M, K] -> xn = norm(x) [M, K] -> h = xn W1^T + b1 [M, Fin]
 * -> a = act(h) [M, F] -> y = a W2^T + b2 [M, N], Fin = 2F for swiglu (h = [h1 | h2]), else F. */
typedef struct qf_mlp_params {
    int64_t K, F, N;
    qf_norm norm;            /* QF_NORM_LAYERNORM or QF_NORM_RMSNORM (gamma not zero-centered) */
    qf_activation act;       /* gelu (tanh approximation), swiglu or relu */
    double eps;
    const double *gamma;     /* [K] */
    const double *beta;      /* [K]; LayerNorm only (NULL: zero) */
    const double *w1, *b1;   /* [Fin, K], [Fin] (b1 NULL: no bias) */
    const double *w2, *b2;   /* [N, F], [N] (b2 NULL: no bias) */
} qf_mlp_params;

/* What the forward keeps for the backward; owned by the struct (qf_mlp_saved_free). */
typedef struct qf_mlp_saved {
    int64_t M;
    double *xh;              /* [M, K] (x - mu) * rsigma (RMSNorm: x * rsigma) */
    double *rsigma;          /* [M] */
    double *xn, *h, *a;      /* [M, K], [M, Fin], [M, F] */
} qf_mlp_saved;

/* Outputs of the backward, caller-allocated; a NULL one is not written (the others still are). */
typedef struct qf_mlp_grads {
    double *dx;              /* [M, K] */
    double *dgamma, *dbeta;  /* [K] (dbeta: LayerNorm) */
    double *dw1, *db1;       /* [Fin, K], [Fin] */
    double *dw2, *db2;       /* [N, F], [N] */
} qf_mlp_grads;

/* The activation of one row: a [F] from h [Fin] (numerics 6, in double). */
void qf_mlp_act_row(qf_activation act, const double *h, int64_t F, double *a);

/* Its backward for one row: dh [Fin] from da [F] and the forward's h [Fin]. */
void qf_mlp_act_bwd_row(qf_activation act, const double *h, const double *da, int64_t F,
                        double *dh);

/* out [R, C] = a [R, Kd] b^T (+ bias [C] when not NULL) for b [C, Kd]; every sum in k order. */
void qf_mlp_mm_nt(const double *a, const double *b, const double *bias, int64_t R, int64_t C,
                  int64_t Kd, double *out);

/* y [M, N] = the block of x [M, K]. With s not NULL, the forward's tensors are kept in *s (s->M
 * is set; free with qf_mlp_saved_free); with s NULL they are freed before returning.
 * Returns 0, or -1 when out of host memory (nothing kept then). */
int qf_mlp_forward(const qf_mlp_params *p, const double *x, int64_t M, double *y,
                   qf_mlp_saved *s);

/* The gradients of the block at the forward s for dy [s->M, N]: each weight's and bias's over the
 * M rows, and dx (numerics 6's norm backward, from the saved xh and rsigma). Returns 0 or -1 when
 * out of host memory (nothing written then). */
int qf_mlp_backward(const qf_mlp_params *p, const qf_mlp_saved *s, const double *dy,
                    const qf_mlp_grads *g);

void qf_mlp_saved_free(qf_mlp_saved *s);

#endif /* QF_MLP_MODEL_H */
