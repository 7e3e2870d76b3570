/* linear.c: LayerNorm/RMSNorm + Linear forward under any recipe (DESIGN "Ops"):
 * y = gemm(quant(norm(x)), quant(W)) + bias, the weight quantized only when it changed. */
#include "ctx.h"
#include "validate.h"

enum { QF_LL_WEIGHT, QF_LL_NORM, QF_LL_GEMM, QF_LL_STAGES };

/* What each stage does, in the caller's names (prefixed to a failing stage's message). */
static const char *const qf_ll_stage_names[] = {
    [QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize)",
    [QF_LL_NORM] = "norm + quantize of x into ll->xq (qf_quantize)",
    [QF_LL_GEMM] = "GEMM of ll->xq and ll->wq into y (qf_gemm)",
};
_Static_assert(sizeof qf_ll_stage_names / sizeof qf_ll_stage_names[0] == QF_LL_STAGES,
               "qf_ll_stage_names");

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

/* x [..., K], weight [N, K] and y [..., N] with x's leading dims. */
static qf_status qf_ll_check_dims(const char *op, const qf_tensor *x, const qf_tensor *weight,
                                  const qf_tensor *y) {
    int64_t M, K, N, Kw;
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_activation(op, "ll->weight", weight, &N, &Kw));
    if (Kw != K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: ll->weight is [%lld, %lld]; its last "
                            "dimension must equal x's K = %lld", op, (long long)N, (long long)Kw,
                            (long long)K);
    if (y->ndim != x->ndim || qf_tensor_numel(y) != M * N)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: y has %d dims and %lld elements; expected "
                            "[..., N = %lld] with x's %d dims and leading dims (%lld elements)",
                            op, y->ndim, (long long)qf_tensor_numel(y), (long long)N, x->ndim,
                            (long long)(M * N));
    return QF_OK;
}

/* Re-records the failure of a stage with the op and the stage in front of its message. */
static qf_status qf_ll_fail(const char *op, const char *stage, qf_status s) {
    char inner[1024];
    snprintf(inner, sizeof inner, "%s", qf_last_error());
    return qf_set_error(s, "%s: %s: %s", op, stage, inner);
}

/* One stage; the family does not matter here: each op dispatches on the recipe itself. */
static qf_status qf_ll_stage(qf_ctx_t *ctx, int i, const char *recipe, const qf_tensor *x,
                             qf_ln_linear *ll, qf_tensor *y, void *stream) {
    if (i == QF_LL_WEIGHT) /* weights never round stochastically (numerics 2.4): no rng */
        return qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, NULL, ll->w_scale, NULL,
                           &ll->wq, stream);
    if (i == QF_LL_NORM)
        return qf_quantize(ctx, recipe, QF_ROLE_INPUT, x, &ll->norm, ll->x_scale, NULL, &ll->xq,
                           stream);
    qf_quantized xq = ll->xq;
    xq.t[QF_SLOT_ROWWISE_DATA] = qf_flat2d(&ll->xq.t[QF_SLOT_ROWWISE_DATA]);
    qf_tensor y2 = qf_flat2d(y);
    const qf_operand a = {&xq, QF_COPY_ROWWISE}, b = {&ll->wq, QF_COPY_ROWWISE};
    return qf_gemm(ctx, recipe, &a, &b, ll->bias.data ? &ll->bias : NULL, &y2, stream);
}

/* Runs the stages (the weight's only when ll->weight_changed, which is then cleared).
 * NOTES: "bad input launches nothing" must hold for the composition too, so every stage is first
 * checked against a device-less twin of ctx (the ops validate, then stop before any device work
 * with QF_ERR_NO_DEVICE), and only then run for real. The price is a second pass of host-side
 * argument checks, microseconds per call. */
static qf_status qf_ll_run(const char *op, qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                           qf_ln_linear *ll, qf_tensor *y, void *stream) {
    QF_TRY(qf_ll_check_dims(op, x, &ll->weight, y));
    int first = ll->weight_changed ? QF_LL_WEIGHT : QF_LL_NORM, i;
    qf_status s = QF_ERR_NO_DEVICE;
    qf_ctx_t twin;
    qf_ctx_twin(ctx, &twin);
    for (i = first; i < QF_LL_STAGES && s == QF_ERR_NO_DEVICE; i++)
        s = qf_ll_stage(&twin, i, recipe, x, ll, y, stream);
    qf_ctx_twin_free(&twin);
    if (s != QF_ERR_NO_DEVICE)
        return qf_ll_fail(op, qf_ll_stage_names[i - 1], s);
    for (i = first; i < QF_LL_STAGES; i++) {
        if ((s = qf_ll_stage(ctx, i, recipe, x, ll, y, stream)) != QF_OK)
            return qf_ll_fail(op, qf_ll_stage_names[i], s);
        if (i == QF_LL_WEIGHT)
            ll->weight_changed = 0;
    }
    return QF_OK;
}

qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_fwd";
    qf_clear_error();
    if (!ctx || !ll || !y || !x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !x ? "x" : !ll ? "ll" : "y");
    if (ll->norm.norm != QF_NORM_LAYERNORM && ll->norm.norm != QF_NORM_RMSNORM)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: ll->norm.norm %d is not QF_NORM_LAYERNORM or "
                            "QF_NORM_RMSNORM", op, (int)ll->norm.norm);
    return qf_ll_run(op, ctx, recipe, x, ll, y, stream);
}
