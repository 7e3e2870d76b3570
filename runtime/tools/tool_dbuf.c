/* tool_dbuf.c: device buffers of the tools (tool_dbuf.h). */
#include "tool_dbuf.h"

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define QF_TOOL_NAME "qfuse"
#include "tool_util.h"

dbuf dbuf_alloc(size_t bytes) {
    dbuf b = {NULL, bytes};
    CUDA_OR_DIE(cudaMalloc(&b.d, bytes + TOOL_GUARD_BYTES));
    CUDA_OR_DIE(cudaMemset((char *)b.d + bytes, TOOL_GUARD_BYTE, TOOL_GUARD_BYTES));
    return b;
}

int dbuf_guard_ok(const dbuf *b) {
    unsigned char g[TOOL_GUARD_BYTES];
    CUDA_OR_DIE(cudaMemcpy(g, (char *)b->d + b->bytes, TOOL_GUARD_BYTES, cudaMemcpyDeviceToHost));
    for (int i = 0; i < TOOL_GUARD_BYTES; i++)
        if (g[i] != TOOL_GUARD_BYTE)
            return 0;
    return 1;
}

dbuf dbuf_upload(const void *h, size_t bytes) {
    dbuf b = dbuf_alloc(bytes);
    CUDA_OR_DIE(cudaMemcpy(b.d, h, bytes, cudaMemcpyHostToDevice));
    return b;
}

void dbuf_free(dbuf *b) {
    cudaFree(b->d);
    b->d = NULL;
}

qf_tensor tens(const dbuf *b, qf_dtype dt, int ndim, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = b->d, .dtype = dt, .ndim = ndim, .dims = {d0, d1}};
    return t;
}

/* Allocates one output per fake shape and returns how many; shapes and dbufs in parallel. */
int alloc_from_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *sh,
                             dbuf *bufs, int cap) {
    int n = r->shapes(q, sh, cap);
    if (n < 0) {
        fprintf(stderr, QF_TOOL_NAME ": shape function of %s rejected the query\n", r->name);
        exit(1);
    }
    for (int i = 0; i < n; i++)
        bufs[i] = dbuf_alloc(sh[i].bytes);
    return n;
}

/* Binds every fake-shape buffer to the slot of q with its name (the quantizer outputs). */
void bind_slots(const qf_shape *sh, const dbuf *bufs, int n, qf_quantized *q) {
    for (int i = 0; i < n; i++) {
        int slot = qf_slot_from_name(sh[i].name);
        if (slot < 0) {
            fprintf(stderr, QF_TOOL_NAME ": fake shape '%s' names no qf_slot\n", sh[i].name);
            exit(1);
        }
        q->t[slot] = tens(&bufs[i], sh[i].dtype, sh[i].ndim, sh[i].dims[0], sh[i].dims[1]);
    }
}

qf_scale_layout tool_gemm_scale_layout(const qf_recipe *r) {
    int dev = 0, major = 0, minor = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    qf_scale_layout l = QF_SCALE_LAYOUT_COMPACT;
    return qf_gemm_scale_layout(r->name, major * 10 + minor, &l) == QF_OK ? l
                                                                         : QF_SCALE_LAYOUT_COMPACT;
}


void tool_mlp_queries(int64_t M, int64_t K, int64_t F, int64_t N, qf_activation act,
                      qf_norm norm, qf_shape_query q[TOOL_MLP_COUNT]) {
    static const qf_role roles[TOOL_MLP_COUNT] = {QF_ROLE_INPUT, QF_ROLE_WEIGHT, QF_ROLE_INPUT,
                                                  QF_ROLE_WEIGHT, QF_ROLE_GRAD, QF_ROLE_GRAD};
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    const int64_t rows[TOOL_MLP_COUNT] = {M, Fin, M, N, M, M};
    const int64_t cols[TOOL_MLP_COUNT] = {K, K, F, F, N, Fin};
    for (int i = 0; i < TOOL_MLP_COUNT; i++)
        q[i] = (qf_shape_query){.op = i == TOOL_MLP_X ? QF_OP_NORM_QUANTIZE : QF_OP_QUANTIZE,
                                .role = roles[i], .norm = i == TOOL_MLP_X ? norm : QF_NORM_NONE,
                                .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = rows[i],
                                .K = cols[i]};
}

void tool_mlp_quantized(qf_ln_mlp *m, qf_ln_mlp_grads *g, qf_quantized *q[TOOL_MLP_COUNT]) {
    q[TOOL_MLP_X] = &m->xq, q[TOOL_MLP_W1] = &m->w1q, q[TOOL_MLP_A] = &m->aq;
    q[TOOL_MLP_W2] = &m->w2q, q[TOOL_MLP_DY] = &g->dyq, q[TOOL_MLP_DH] = &g->dhq;
}

void tool_mlp_gemm_queries(int64_t M, int64_t K, int64_t F, int64_t N, qf_activation act,
                           qf_shape_query q[TOOL_MLP_GEMM_COUNT]) {
    const int64_t Fin = act == QF_ACT_SWIGLU ? 2 * F : F;
    const int64_t mnk[TOOL_MLP_GEMM_COUNT][3] = {
        [TOOL_MLP_FC1_FPROP] = {M, Fin, K}, [TOOL_MLP_FC2_FPROP] = {M, N, F},
        [TOOL_MLP_FC2_DGRAD] = {M, F, N},   [TOOL_MLP_FC1_DGRAD] = {M, K, Fin},
        [TOOL_MLP_FC2_WGRAD] = {N, F, M},   [TOOL_MLP_FC1_WGRAD] = {Fin, K, M}};
    for (int i = 0; i < TOOL_MLP_GEMM_COUNT; i++) {
        const int wgrad = i == TOOL_MLP_FC2_WGRAD || i == TOOL_MLP_FC1_WGRAD;
        q[i] = (qf_shape_query){.op = QF_OP_GEMM, .role = QF_ROLE_INPUT,
                                .outputs = wgrad ? QF_OUT_FP32 : 0u, .M = mnk[i][0],
                                .N = mnk[i][1], .K = mnk[i][2]};
    }
}
