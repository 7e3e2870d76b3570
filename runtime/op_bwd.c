/* op_bwd.c: the backward reductions of numerics 6, each the same module for every family: the
 * LayerNorm / RMSNorm backward (templates/smxx_norm_backward.cu) and dbias (smxx_dbias.cu).
 * Both check their arguments against the fake shapes, then run a partial-sums entry over blocks
 * of rows and its _reduce entry (column sums in a fixed order: deterministic). */
#include <stdio.h>
#include <string.h>

#include "ctx.h"
#include "validate.h"

#define QF_NB_SHAPES 4
#define QF_DB_TILE(k) ((int64_t)(k)->block_threads * 8) /* dbias columns per block (smxx_dbias) */

/* {===================================================================== common */

/* One run of a backward module: its kernel, the blocks of rows and their partials' scratch. */
typedef struct qf_bwd_run {
    qf_loaded_kernel lk;
    int64_t rows;   /* rows per block */
    int32_t blocks; /* at most QF_NB_MAX_BLOCKS */
    float *part;    /* [blocks, width] fp32 scratch */
} qf_bwd_run;

/* Loads k (instance inst; after the device checks, with its _reduce entry), lets its main entry
 * take smem bytes of dynamic shared memory, splits M rows into blocks and takes scratch for width
 * fp32 partials per block (`what` names it in errors). The blocks are at most QF_NB_MAX_BLOCKS and,
 * when one_wave, at most the SMs times the main entry's resident blocks: each block walks its rows
 * in turn, so a second wave would take as long as the first. The count is a function of the
 * device, the kernel and smem, so the partials' order, and the sums, are the same on every call
 * there. */
static qf_status qf_bwd_begin(qf_ctx_t *ctx, const char *op, const qf_kernel_entry *k,
                              const qf_kernel_instance *inst, int64_t M, int64_t width,
                              unsigned smem, int one_wave, const char *what, qf_bwd_run *b,
                              void *stream) {
    QF_TRY(qf_ctx_load(ctx, op, stream, k, inst, &b->lk));
    if (!b->lk.fn_reduce)
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no _reduce entry", op, k->name);
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    if (cu->FuncSetAttribute(b->lk.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             (int)smem) != CUDA_SUCCESS)
        return qf_set_error(QF_ERR_CUDA, "%s: %u bytes of shared memory per block refused for %s",
                            op, smem, k->name);
    int64_t max_blocks = QF_NB_MAX_BLOCKS;
    if (one_wave) {
        const int64_t wave = qf_ctx_wave(ctx, b->lk.fn, k->block_threads, smem, max_blocks);
        max_blocks = wave < max_blocks ? wave : max_blocks;
    }
    b->rows = (M + max_blocks - 1) / max_blocks;
    b->blocks = (int32_t)((M + b->rows - 1) / b->rows);
    return qf_ctx_scratch(ctx, (size_t)(b->blocks * width) * sizeof(float), (void **)&b->part,
                          what, stream);
}

/* The _reduce entry of lk (kernel k) on `cols` columns (QF_REDUCE_COLS per block), parameter
 * block p. */
static qf_status qf_launch_reduce(qf_ctx_t *ctx, const qf_loaded_kernel *lk,
                                  const qf_kernel_entry *k, int64_t cols, void *p, void *stream) {
    return qf_ctx_launch(ctx, lk->fn_reduce,
                         (unsigned)((cols + QF_REDUCE_COLS - 1) / QF_REDUCE_COLS),
                         k->block_threads, 0, p, stream);
}

/* The partial-sums entry on b's blocks times `tiles` (column tiles per block of rows) with smem
 * bytes of dynamic shared memory (qf_bwd_begin's), then the _reduce entry on the columns `cols`
 * (both take the parameter block p), then the scratch is released. */
static qf_status qf_bwd_finish(qf_ctx_t *ctx, const qf_kernel_entry *k, const qf_bwd_run *b,
                               int64_t tiles, unsigned smem, int64_t cols, void *p, void *stream) {
    qf_status s = qf_ctx_launch(ctx, b->lk.fn, (unsigned)(b->blocks * tiles), k->block_threads,
                                smem, p, stream);
    if (s == QF_OK)
        s = qf_launch_reduce(ctx, &b->lk, k, cols, p, stream);
    const qf_status f = qf_ctx_scratch_free(ctx, b->part, stream);
    return s != QF_OK ? s : f;
}

/* =====================================================================} */

/* {===================================================================== norm backward */

/* The norm, gamma, dxn, mu and rsigma of one call against x [M, K]. */
static qf_status qf_nb_check_inputs(const char *op, const qf_norm_desc *nd, const qf_tensor *x,
                                    const qf_tensor *dxn, const qf_tensor *mu,
                                    const qf_tensor *rsigma, int64_t M, int64_t K) {
    if (!nd)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: norm is NULL", op);
    QF_TRY(qf_check_fused_norm(op, "norm->norm", nd->norm));
    QF_TRY(qf_check_zcg(op, nd));
    QF_TRY(qf_check_vector(op, "norm->gamma", &nd->gamma, K, x->dtype));
    QF_TRY(qf_check_grad_input(op, "dxn", dxn, M, K, "the gradient of the norm's output",
                               "[M, K]"));
    const qf_shape sv = {"rsigma", QF_DTYPE_FP32, 1, {M}, 0};
    QF_TRY(qf_check_buffer(op, "rsigma", rsigma, &sv));
    if (nd->norm == QF_NORM_LAYERNORM) {
        const qf_shape sm = {"mu", QF_DTYPE_FP32, 1, {M}, 0};
        QF_TRY(qf_check_buffer(op, "mu", mu, &sm));
    }
    if (K > QF_NB_MAX_K)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: K = %lld; the norm backward keeps 2 K fp32 "
                            "column sums in shared memory, K <= %d", op, (long long)K,
                            QF_NB_MAX_K);
    return QF_OK;
}

/* dx, dgamma and (LayerNorm) dbeta against the recipe's fake shapes of the query, apart from
 * each other and from the inputs `in`. */
static qf_status qf_nb_check_outputs(const char *op, const qf_recipe *r, const qf_norm_desc *nd,
                                     const qf_tensor *x, int64_t M, int64_t K,
                                     const qf_inputs *in, qf_norm_grads *out) {
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out is NULL", op);
    if (nd->norm == QF_NORM_RMSNORM && out->dbeta.data)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: rmsnorm has no beta; leave out->dbeta.data "
                            "NULL", op);
    const qf_shape_query q = {.op = QF_OP_NORM_BACKWARD, .role = QF_ROLE_INPUT, .norm = nd->norm,
                              .M = M, .K = K, .dtype = x->dtype};
    qf_shape sh[QF_NB_SHAPES];
    int n = 0;
    QF_TRY(qf_query_shapes(op, r, &q, sh, QF_NB_SHAPES, &n));
    const struct {
        const char *name;
        const qf_tensor *t;
    } slots[] = {{"dx", &out->dx}, {"dgamma", &out->dgamma}, {"dbeta", &out->dbeta}};
    for (int i = 0; i < n; i++) {
        size_t j = 0;
        while (j < sizeof slots / sizeof slots[0] && strcmp(slots[j].name, sh[i].name) != 0)
            j++;
        if (j == sizeof slots / sizeof slots[0])
            return qf_set_error(QF_ERR_INTERNAL, "%s: output '%s' of the shape function has no "
                                "field in qf_norm_grads", op, sh[i].name);
        char arg[32];
        snprintf(arg, sizeof arg, "out->%s", sh[i].name);
        QF_TRY(qf_check_buffer(op, arg, slots[j].t, &sh[i]));
        QF_TRY(qf_check_apart(op, arg, slots[j].t, in));
    }
    QF_TRY(qf_check_disjoint(op, "out->dx", &out->dx, "out->dgamma", &out->dgamma));
    if (nd->norm == QF_NORM_LAYERNORM) {
        QF_TRY(qf_check_disjoint(op, "out->dx", &out->dx, "out->dbeta", &out->dbeta));
        QF_TRY(qf_check_disjoint(op, "out->dgamma", &out->dgamma, "out->dbeta", &out->dbeta));
    }
    return QF_OK;
}

qf_status qf_norm_backward(qf_ctx_t *ctx, const char *recipe, const qf_norm_desc *norm,
                           const qf_tensor *x, const qf_tensor *dxn, const qf_tensor *mu,
                           const qf_tensor *rsigma, qf_norm_grads *out, void *stream) {
    static const char op[] = "qf_norm_backward";
    const qf_recipe *r = NULL;
    int64_t M = 0, K = 0;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_nb_check_inputs(op, norm, x, dxn, mu, rsigma, M, K));
    const int ln = norm->norm == QF_NORM_LAYERNORM; /* RMSNorm ignores mu and beta */
    const qf_inputs in = {6, {"x", "dxn", "norm->gamma", "norm->beta", "mu", "rsigma"},
                          {x, dxn, &norm->gamma, ln ? &norm->beta : NULL, ln ? mu : NULL, rsigma}};
    QF_TRY(qf_nb_check_outputs(op, r, norm, x, M, K, &in, out));
    const qf_kernel_entry *k = qf_registry_kernel(r, QF_OP_NORM_BACKWARD, QF_ROLE_INPUT,
                                                  norm->norm, norm->zero_centered_gamma,
                                                  x->dtype);
    qf_kernel_instance inst = k ? qf_kernel_instance_default(k) : (qf_kernel_instance){0};
    inst.gamma_dtype = norm->gamma.dtype;
    qf_bwd_run b = {0};
    /* dgamma's and dbeta's accumulators (k is NULL past the checks' errors) */
    const unsigned smem =
        k ? (unsigned)(2 * QF_NB_ACC(K, (int64_t)k->block_threads) * (int64_t)sizeof(float)) : 0;
    QF_TRY(qf_bwd_begin(ctx, op, k, &inst, M, 2 * K, smem, 1,
                        "the norm backward's partial column sums", &b, stream));
    const int layernorm = norm->norm == QF_NORM_LAYERNORM;
    qf_nb_params p = {.x = x->data, .dxn = dxn->data, .gamma = norm->gamma.data,
                      .mu = layernorm ? mu->data : NULL, .rsigma = rsigma->data,
                      .dx = out->dx.data, .part = b.part, .dgamma = out->dgamma.data,
                      .dbeta = layernorm ? out->dbeta.data : NULL, .M = M, .K = K,
                      .rows_per_block = b.rows, .blocks = b.blocks,
                      .dxn_fp32 = dxn->dtype == QF_DTYPE_FP32,
                      .gamma_fp32 = norm->gamma.dtype == QF_DTYPE_FP32};
    return qf_bwd_finish(ctx, k, &b, 1, smem, K, &p, stream);
}

/* =====================================================================} */

/* {===================================================================== dbias */

qf_status qf_dbias_check(const char *op, const qf_recipe *r, qf_dtype dt, int64_t M, int64_t N,
                         const char *dy_name, const qf_tensor *dbias, const qf_inputs *in,
                         const qf_kernel_entry **k) {
    if (!dbias)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: dbias is NULL", op);
    if (N > QF_DB_MAX_N)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: %s's last dimension N = %lld is too large "
                            "for one launch (N <= %lld)", op, dy_name, (long long)N,
                            (long long)QF_DB_MAX_N);
    const qf_shape_query q = {.op = QF_OP_DBIAS, .role = QF_ROLE_GRAD, .M = M, .N = N,
                              .dtype = dt};
    qf_shape sh[QF_NB_SHAPES];
    int n = 0;
    QF_TRY(qf_query_shapes(op, r, &q, sh, QF_NB_SHAPES, &n));
    if (n != 1 || strcmp(sh[0].name, "dbias") != 0)
        return qf_set_error(QF_ERR_INTERNAL, "%s: the shape function of '%s' does not list dbias "
                            "alone", op, r->name);
    QF_TRY(qf_check_buffer(op, "dbias", dbias, &sh[0]));
    QF_TRY(qf_check_apart(op, "dbias", dbias, in));
    *k = qf_registry_kernel(r, QF_OP_DBIAS, QF_ROLE_INPUT, QF_NORM_NONE, 0, dt);
    return *k ? QF_OK : qf_set_error(QF_ERR_NOT_FOUND, "%s: recipe '%s' has no dbias kernel "
                                     "for %s", op, r->name, qf_dtype_name(dt));
}

qf_status qf_dbias_reduce(qf_ctx_t *ctx, const char *op, const qf_kernel_entry *k,
                          const float *part, int32_t blocks, int64_t N, qf_tensor *dbias,
                          void *stream) {
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_load(ctx, op, stream, k, NULL, &lk));
    if (!lk.fn_reduce)
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no _reduce entry", op, k->name);
    qf_db_params p = {.part = (float *)part, .dbias = dbias->data, .N = N, .blocks = blocks};
    return qf_launch_reduce(ctx, &lk, k, N, &p, stream);
}

/* dbias [N] of dy [M, N], or (prologue QF_PROLOGUE_DACT, dy = h) of dh [M, N] from h and da. */
static qf_status qf_dbias_run(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                              const qf_tensor *dy, int64_t M, int64_t N, int prologue,
                              const qf_tensor *da, qf_tensor *dbias, void *stream) {
    const qf_kernel_entry *k = NULL;
    const qf_inputs in = {2, {da ? "h" : "dy", "da"}, {dy, da}};
    QF_TRY(qf_dbias_check(op, r, dy->dtype, M, N, da ? "h" : "dy", dbias, &in, &k));
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    inst.prologue = prologue;
    qf_bwd_run b = {0};
    QF_TRY(qf_bwd_begin(ctx, op, k, &inst, M, N, 0, 0, "dbias's partial column sums", &b,
                        stream));
    qf_db_params p = {.dy = dy->data, .part = b.part, .dbias = dbias->data, .M = M, .N = N,
                      .rows_per_block = b.rows, .blocks = b.blocks,
                      .da = da ? da->data : NULL,
                      .da_fp32 = da && da->dtype == QF_DTYPE_FP32};
    const int64_t tiles = (N + QF_DB_TILE(k) - 1) / QF_DB_TILE(k);
    return qf_bwd_finish(ctx, k, &b, tiles, 0, N, &p, stream);
}

qf_status qf_dbias(qf_ctx_t *ctx, const char *recipe, const qf_tensor *dy, qf_tensor *dbias,
                   void *stream) {
    static const char op[] = "qf_dbias";
    const qf_recipe *r = NULL;
    int64_t M = 0, N = 0;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_activation(op, "dy", dy, &M, &N));
    return qf_dbias_run(ctx, op, r, dy, M, N, QF_PROLOGUE_NONE, NULL, dbias, stream);
}

qf_status qf_dbias_act(qf_ctx_t *ctx, const char *recipe, qf_activation act, const qf_tensor *h,
                       const qf_tensor *da, qf_tensor *dbias, void *stream) {
    static const char op[] = "qf_dbias_act";
    const qf_recipe *r = NULL;
    int64_t M = 0, N = 0;
    int64_t F = 0;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_act_input(op, act, h, &M, &N, &F));
    QF_TRY(qf_check_grad_input(op, "da", da, M, F, "the gradient of the activation's output",
                               "[M, F]"));
    return qf_dbias_run(ctx, op, r, h, M, N, QF_PROLOGUE_DACT(act), da, dbias, stream);
}

/* =====================================================================} */
