/* linear.c: LayerNorm/RMSNorm + Linear under any recipe (DESIGN "Ops", numerics 6), as stages
 * of the public ops, forward: y = gemm(quant(norm(x)), quant(W)) + bias, the weight quantized only
 * when it changed; backward: q(dy) -> dgrad, wgrad, dbias -> the norm's backward. */
#include "ctx.h"
#include "validate.h"

/* The stages, forward then backward. */
enum {
    QF_LL_WEIGHT,
    QF_LL_NORM,
    QF_LL_GEMM,
    QF_LL_DY,
    QF_LL_DGRAD,
    QF_LL_WGRAD,
    QF_LL_DBIAS,
    QF_LL_NORM_BWD,
    QF_LL_STAGES
};
#define QF_LL_BIT(s) (1u << (s))

/* What each stage does, in the caller's names (prefixed to a failing stage's message). */
static const char *const qf_ll_stage_names[] = {
    [QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize)",
    [QF_LL_NORM] = "norm + quantize of x into ll->xq (qf_quantize)",
    [QF_LL_GEMM] = "GEMM of ll->xq and ll->wq into y (qf_gemm)",
    [QF_LL_DY] = "quantizing dy into g->dyq (qf_quantize)",
    [QF_LL_DGRAD] = "dgrad GEMM of g->dyq (rowwise) and ll->wq (columnwise) into g->dxn (qf_gemm)",
    [QF_LL_WGRAD] = "wgrad GEMM of g->dyq and ll->xq (columnwise) into g->dweight (qf_gemm_ex)",
    [QF_LL_DBIAS] = "dbias of dy into g->dbias (qf_dbias)",
    [QF_LL_NORM_BWD] = "norm backward of g->dxn into g->norm (qf_norm_backward)",
};
_Static_assert(sizeof qf_ll_stage_names / sizeof qf_ll_stage_names[0] == QF_LL_STAGES,
               "qf_ll_stage_names");

/* The arguments of one call (forward: y; backward: dy and g). */
typedef struct qf_ll_call {
    const char *recipe;
    const qf_tensor *x;
    qf_ln_linear *ll;
    qf_tensor *y;
    const qf_tensor *dy;
    qf_ln_linear_grads *g;
} qf_ll_call;

/* The 2-D [M, N] view of a tensor of any rank (y, the rowwise copy of x); qf_gemm checks the flat
 * view. A malformed t is returned as is, for qf_gemm to reject. */
static qf_tensor qf_flat2d(const qf_tensor *t) {
    qf_tensor f = *t;
    int64_t n = qf_tensor_numel(t);
    if (n < 1)
        return f;
    int64_t last = t->dims[t->ndim - 1];
    f.ndim = 2;
    f.dims[0] = n / last;
    f.dims[1] = last;
    return f;
}

/* x [..., K], weight [N, K] and y (named y_name: y or dy) [..., N] with x's leading dims. */
static qf_status qf_ll_check_dims(const char *op, const qf_tensor *x, const qf_tensor *weight,
                                  const qf_tensor *y, const char *y_name) {
    int64_t M, K, N, Kw;
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_activation(op, "ll->weight", weight, &N, &Kw));
    if (Kw != K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: ll->weight is [%lld, %lld]; its last "
                            "dimension must equal x's K = %lld", op, (long long)N, (long long)Kw,
                            (long long)K);
    if (y->ndim != x->ndim || qf_tensor_numel(y) != M * N)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has %d dims and %lld elements; expected "
                            "[..., N = %lld] with x's %d dims and leading dims (%lld elements)",
                            op, y_name, y->ndim, (long long)qf_tensor_numel(y), (long long)N,
                            x->ndim, (long long)(M * N));
    return QF_OK;
}

/* Re-records the failure of a stage with the op and the stage in front of its message. */
static qf_status qf_ll_fail(const char *op, const char *stage, qf_status s) {
    char inner[1024];
    snprintf(inner, sizeof inner, "%s", qf_last_error());
    return qf_set_error(s, "%s: %s: %s", op, stage, inner);
}

/* One stage; the family does not matter here: each op dispatches on the recipe itself. */
static qf_status qf_ll_stage(qf_ctx_t *ctx, int i, const qf_ll_call *c, void *stream) {
    qf_ln_linear *ll = c->ll;
    qf_ln_linear_grads *g = c->g;
    const char *recipe = c->recipe;
    switch (i) {
    case QF_LL_WEIGHT: /* weights never round stochastically (numerics 2.4): no rng */
        return qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, NULL, ll->w_scale, NULL,
                           &ll->wq, stream);
    case QF_LL_NORM:
        return qf_quantize(ctx, recipe, QF_ROLE_INPUT, c->x, &ll->norm, ll->x_scale, NULL,
                           &ll->xq, stream);
    case QF_LL_GEMM: {
        qf_quantized xq = ll->xq;
        xq.t[QF_SLOT_ROWWISE_DATA] = qf_flat2d(&ll->xq.t[QF_SLOT_ROWWISE_DATA]);
        qf_tensor y2 = qf_flat2d(c->y);
        const qf_operand a = {&xq, QF_COPY_ROWWISE}, b = {&ll->wq, QF_COPY_ROWWISE};
        return qf_gemm(ctx, recipe, &a, &b, ll->bias.data ? &ll->bias : NULL, &y2, stream);
    }
    case QF_LL_DY: {
        const qf_tensor dy2 = qf_flat2d(c->dy);
        return qf_quantize(ctx, recipe, QF_ROLE_GRAD, &dy2, NULL, g->dy_scale, &g->rng, &g->dyq,
                           stream);
    }
    case QF_LL_DGRAD: {
        const qf_operand a = {&g->dyq, QF_COPY_ROWWISE}, b = {&ll->wq, QF_COPY_COLUMNWISE};
        qf_tensor dxn = qf_flat2d(&g->dxn);
        return qf_gemm(ctx, recipe, &a, &b, NULL, &dxn, stream);
    }
    case QF_LL_WGRAD: {
        const qf_operand a = {&g->dyq, QF_COPY_COLUMNWISE}, b = {&ll->xq, QF_COPY_COLUMNWISE};
        const qf_gemm_opts o = {.accumulate = g->accumulate_wgrad};
        return qf_gemm_ex(ctx, recipe, &a, &b, NULL, &g->dweight, &o, stream);
    }
    case QF_LL_DBIAS: {
        const qf_tensor dy2 = qf_flat2d(c->dy);
        return qf_dbias(ctx, recipe, &dy2, &g->dbias, stream);
    }
    default: { /* from the statistics the forward saved in ll->xq */
        const qf_tensor x2 = qf_flat2d(c->x), dxn = qf_flat2d(&g->dxn);
        qf_norm_grads ng = g->norm;
        ng.dx = qf_flat2d(&g->norm.dx);
        return qf_norm_backward(ctx, recipe, &ll->norm, &x2, &dxn, &ll->xq.t[QF_SLOT_MU],
                                &ll->xq.t[QF_SLOT_RSIGMA], &ng, stream);
    }
    }
}

/* Runs the stages of mask in order (the weight's clears ll->weight_changed).
 * NOTES: "bad input launches nothing" must hold for the composition too, so every stage is first
 * checked against a device-less twin of ctx (the ops validate, then stop before any device work
 * with QF_ERR_NO_DEVICE), and only then run for real. The price is a second pass of host-side
 * argument checks, microseconds per call. */
static qf_status qf_ll_run(const char *op, qf_ctx_t *ctx, unsigned mask, const qf_ll_call *c,
                           void *stream) {
    qf_status s = QF_ERR_NO_DEVICE;
    int i;
    qf_ctx_t twin;
    qf_ctx_twin(ctx, &twin);
    for (i = 0; i < QF_LL_STAGES && s == QF_ERR_NO_DEVICE; i++)
        if (mask & QF_LL_BIT(i))
            s = qf_ll_stage(&twin, i, c, stream);
    qf_ctx_twin_free(&twin);
    if (s != QF_ERR_NO_DEVICE)
        return qf_ll_fail(op, qf_ll_stage_names[i - 1], s);
    for (i = 0; i < QF_LL_STAGES; i++) {
        if (!(mask & QF_LL_BIT(i)))
            continue;
        if ((s = qf_ll_stage(ctx, i, c, stream)) != QF_OK)
            return qf_ll_fail(op, qf_ll_stage_names[i], s);
        if (i == QF_LL_WEIGHT)
            c->ll->weight_changed = 0;
    }
    return QF_OK;
}

/* The checks every entry point makes first: non-NULL arguments (named) and a fused norm. */
static qf_status qf_ll_begin(const char *op, qf_ctx_t *ctx, const qf_tensor *x,
                             const qf_ln_linear *ll, const void *out, const char *out_name) {
    qf_clear_error();
    if (!ctx || !ll || !out || !x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !x ? "x" : !ll ? "ll" : out_name);
    if (ll->norm.norm != QF_NORM_LAYERNORM && ll->norm.norm != QF_NORM_RMSNORM)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: ll->norm.norm %d is not QF_NORM_LAYERNORM or "
                            "QF_NORM_RMSNORM", op, (int)ll->norm.norm);
    return QF_OK;
}

qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_fwd";
    QF_TRY(qf_ll_begin(op, ctx, x, ll, y, "y"));
    QF_TRY(qf_ll_check_dims(op, x, &ll->weight, y, "y"));
    const unsigned mask = (ll->weight_changed ? QF_LL_BIT(QF_LL_WEIGHT) : 0u) |
                          QF_LL_BIT(QF_LL_NORM) | QF_LL_BIT(QF_LL_GEMM);
    const qf_ll_call c = {recipe, x, ll, y, NULL, NULL};
    return qf_ll_run(op, ctx, mask, &c, stream);
}

qf_status qf_layernorm_linear_bwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  const qf_tensor *dy, qf_ln_linear *ll, qf_ln_linear_grads *g,
                                  void *stream) {
    static const char op[] = "qf_layernorm_linear_bwd";
    QF_TRY(qf_ll_begin(op, ctx, x, ll, g, "g"));
    if (!dy)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: dy is NULL", op);
    QF_TRY(qf_ll_check_dims(op, x, &ll->weight, dy, "dy"));
    const unsigned mask = QF_LL_BIT(QF_LL_DY) | QF_LL_BIT(QF_LL_DGRAD) |
                          (g->defer_wgrad ? 0u : QF_LL_BIT(QF_LL_WGRAD)) |
                          (g->dbias.data ? QF_LL_BIT(QF_LL_DBIAS) : 0u) |
                          QF_LL_BIT(QF_LL_NORM_BWD);
    const qf_ll_call c = {recipe, x, ll, NULL, dy, g};
    return qf_ll_run(op, ctx, mask, &c, stream);
}

qf_status qf_layernorm_linear_wgrad(qf_ctx_t *ctx, const char *recipe, qf_ln_linear *ll,
                                    qf_ln_linear_grads *g, void *stream) {
    static const char op[] = "qf_layernorm_linear_wgrad";
    qf_clear_error();
    if (!ctx || !ll || !g)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !ll ? "ll" : "g");
    const qf_ll_call c = {recipe, NULL, ll, NULL, NULL, g};
    return qf_ll_run(op, ctx, QF_LL_BIT(QF_LL_WGRAD), &c, stream);
}
