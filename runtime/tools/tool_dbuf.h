/* tool_dbuf.h: device buffers of the tools (qfuse-demo): each sized by a fake shape and followed
 * by a poisoned guard that a later check reads back, and the binding of fake-shape buffers to the
 * slots of a qf_quantized. Every failure prints a message and exits (tool code). */
#ifndef QF_TOOL_DBUF_H
#define QF_TOOL_DBUF_H

#include <stddef.h>

#include "qfuse.h"
#include "registry.h"

#define TOOL_GUARD_BYTES 4096
#define TOOL_GUARD_BYTE 0xA5
#define TOOL_MAX_SHAPES 12

/* A device buffer of `bytes`, followed by TOOL_GUARD_BYTES of TOOL_GUARD_BYTE. */
typedef struct dbuf {
    void *d;
    size_t bytes;
} dbuf;

dbuf dbuf_alloc(size_t bytes);
/* A new dbuf holding the host bytes h. */
dbuf dbuf_upload(const void *h, size_t bytes);
/* 1 when b's guard is intact. */
int dbuf_guard_ok(const dbuf *b);
void dbuf_free(dbuf *b);

/* A qf_tensor view of b: ndim 1 ([d0]) or 2 ([d0, d1]). */
qf_tensor tens(const dbuf *b, qf_dtype dt, int ndim, int64_t d0, int64_t d1);

/* One dbuf per fake shape of query q under recipe r (at most cap); returns how many. */
int alloc_from_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *sh, dbuf *bufs,
                      int cap);

/* Binds each of the n fake-shape buffers to the slot of q its shape names. */
void bind_slots(const qf_shape *sh, const dbuf *bufs, int n, qf_quantized *q);

/* The quantized tensors of a LayerNorm + MLP training step (qf_ln_mlp, qf_ln_mlp_grads), both
 * copies each, in the order of delayed scaling's arrays: x (norm + quantize) [M, K], W1 [Fin, K],
 * a [M, F], W2 [N, F], dy [M, N], dh [M, Fin], with Fin = 2F for swiglu, else F. */
enum { TOOL_MLP_X, TOOL_MLP_W1, TOOL_MLP_A, TOOL_MLP_W2, TOOL_MLP_DY, TOOL_MLP_DH, TOOL_MLP_COUNT };

/* The fake-shape query of each of them (its role in q[i].role). */
void tool_mlp_queries(int64_t M, int64_t K, int64_t F, int64_t N, qf_activation act,
                      qf_norm norm, qf_shape_query q[TOOL_MLP_COUNT]);

/* Where each of them lives in a step's arguments (q[TOOL_MLP_X] = &m->xq, ... q[TOOL_MLP_DH] =
 * &g->dhq); the pointers are into m and g, which keep ownership. */
void tool_mlp_quantized(qf_ln_mlp *m, qf_ln_mlp_grads *g, qf_quantized *q[TOOL_MLP_COUNT]);

/* The GEMMs of the same step as fake-shape queries (y [m, n] = A [m, k] B [n, k]^T; the
 * numerics 6 names): fprop of fc1 (M, Fin, K) and fc2 (M, N, F), dgrad of fc2 (M, F, N) and fc1
 * (M, K, Fin), wgrad of fc2 (N, F, M) and fc1 (Fin, K, M), the wgrads' y in fp32. */
enum {
    TOOL_MLP_FC1_FPROP,
    TOOL_MLP_FC2_FPROP,
    TOOL_MLP_FC2_DGRAD,
    TOOL_MLP_FC1_DGRAD,
    TOOL_MLP_FC2_WGRAD,
    TOOL_MLP_FC1_WGRAD,
    TOOL_MLP_GEMM_COUNT
};
void tool_mlp_gemm_queries(int64_t M, int64_t K, int64_t F, int64_t N, qf_activation act,
                           qf_shape_query q[TOOL_MLP_GEMM_COUNT]);

/* The block-scale layout the current device's GEMM of recipe r reads (qf_gemm_scale_layout:
 * compact for qfuse's Hopper GEMMs and FP8 block scaling, swizzled for MXFP8 / NVFP4 through
 * cuBLASLt on Blackwell); compact where the recipe has no GEMM there. */
qf_scale_layout tool_gemm_scale_layout(const qf_recipe *r);

#endif /* QF_TOOL_DBUF_H */
