/* linear.c: LayerNorm/RMSNorm + Linear forward under an FP8, MXFP8 or NVFP4 recipe (DESIGN "Ops"):
 * y = gemm(quant(norm(x)), quant(W)) + bias, the weight quantized only when it changed. */
#include "ctx.h"
#include "validate.h"

enum { QF_LL_WEIGHT, QF_LL_NORM, QF_LL_GEMM, QF_LL_STAGES };

/* One stage of a composition; ll is the family's state struct. */
typedef qf_status (*qf_ll_stage_fn)(qf_ctx_t *ctx, int stage, const char *recipe,
                                    const qf_tensor *x, void *ll, qf_tensor *y, void *stream);

/* A family's composition: its stages and what each does, in the caller's names (prefixed to a
 * failing stage's message). */
typedef struct qf_ll_family {
    qf_ll_stage_fn stage;
    const char *names[QF_LL_STAGES];
} qf_ll_family;

/* The 2-D [M, N] view of y must have x's leading dims; checked by qf_gemm_fp8 on the flat view.
 * A malformed t is returned as is, for qf_gemm_fp8 to reject. */
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

/* Runs the stages of f (the weight's only when *weight_changed, which is then cleared).
 * NOTES: "bad input launches nothing" must hold for the composition too, so every stage is first
 * checked against a device-less twin of ctx (the ops validate, then stop before any device work
 * with QF_ERR_NO_DEVICE), and only then run for real. The price is a second pass of host-side
 * argument checks, microseconds per call. */
static qf_status qf_ll_run(const char *op, const qf_ll_family *f, qf_ctx_t *ctx,
                           const char *recipe, const qf_tensor *x, const qf_tensor *weight,
                           int *weight_changed, void *ll, qf_tensor *y, void *stream) {
    QF_TRY(qf_ll_check_dims(op, x, weight, y));
    int first = *weight_changed ? QF_LL_WEIGHT : QF_LL_NORM, i;
    qf_status s = QF_ERR_NO_DEVICE;
    qf_ctx_t twin;
    qf_ctx_twin(ctx, &twin);
    for (i = first; i < QF_LL_STAGES && s == QF_ERR_NO_DEVICE; i++)
        s = f->stage(&twin, i, recipe, x, ll, y, stream);
    qf_ctx_twin_free(&twin);
    if (s != QF_ERR_NO_DEVICE)
        return qf_ll_fail(op, f->names[i - 1], s);
    for (i = first; i < QF_LL_STAGES; i++) {
        if ((s = f->stage(ctx, i, recipe, x, ll, y, stream)) != QF_OK)
            return qf_ll_fail(op, f->names[i], s);
        if (i == QF_LL_WEIGHT)
            *weight_changed = 0;
    }
    return QF_OK;
}

/* The NULL checks every composition starts with. */
static qf_status qf_ll_args(const char *op, const qf_ctx_t *ctx, const qf_tensor *x,
                            const void *ll, const qf_tensor *y) {
    qf_clear_error();
    if (!ctx || !ll || !y || !x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !x ? "x" : !ll ? "ll" : "y");
    return QF_OK;
}

/* ---- per-tensor FP8 */

static qf_status qf_ll_fp8_stage(qf_ctx_t *ctx, int i, const char *recipe, const qf_tensor *x,
                                 void *state, qf_tensor *y, void *stream) {
    qf_ln_linear *ll = state;
    if (i == QF_LL_WEIGHT)
        return qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, ll->w_scale, &ll->wq, stream);
    if (i == QF_LL_NORM)
        return qf_norm_quantize(ctx, recipe, ll->norm, ll->zero_centered_gamma, x, &ll->gamma,
                                &ll->beta, ll->eps, ll->x_scale, &ll->xq, &ll->mu, &ll->rsigma,
                                stream);
    qf_tensor a = qf_flat2d(&ll->xq.rowwise), y2 = qf_flat2d(y);
    return qf_gemm_fp8(ctx, &a, ll->xq.scale_inv.data, &ll->wq.rowwise, ll->wq.scale_inv.data,
                       ll->bias.data ? &ll->bias : NULL, &y2, stream);
}

static const qf_ll_family qf_ll_fp8 = {
    qf_ll_fp8_stage,
    {[QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize)",
     [QF_LL_NORM] = "norm + quantize of x into ll->xq, ll->mu, ll->rsigma (qf_norm_quantize)",
     [QF_LL_GEMM] = "GEMM of ll->xq.rowwise and ll->wq.rowwise into y (qf_gemm_fp8)"}};

qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_fwd";
    QF_TRY(qf_ll_args(op, ctx, x, ll, y));
    return qf_ll_run(op, &qf_ll_fp8, ctx, recipe, x, &ll->weight, &ll->weight_changed, ll, y,
                     stream);
}

/* ---- MXFP8 */

static qf_status qf_ll_mx_stage(qf_ctx_t *ctx, int i, const char *recipe, const qf_tensor *x,
                                void *state, qf_tensor *y, void *stream) {
    qf_ln_linear_mx *ll = state;
    if (i == QF_LL_WEIGHT)
        return qf_quantize_mxfp8(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, &ll->wq, stream);
    if (i == QF_LL_NORM)
        return qf_norm_quantize_mxfp8(ctx, recipe, ll->norm, ll->zero_centered_gamma, x,
                                      &ll->gamma, &ll->beta, ll->eps, &ll->xq, &ll->mu,
                                      &ll->rsigma, stream);
    qf_tensor a = qf_flat2d(&ll->xq.rowwise), y2 = qf_flat2d(y);
    return qf_gemm_mxfp8(ctx, recipe, &a, &ll->xq.rowwise_scale_inv, &ll->wq.rowwise,
                         &ll->wq.rowwise_scale_inv, ll->xq.layout,
                         ll->bias.data ? &ll->bias : NULL, &y2, stream);
}

static const qf_ll_family qf_ll_mx = {
    qf_ll_mx_stage,
    {[QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize_mxfp8)",
     [QF_LL_NORM] = "norm + quantize of x into ll->xq, ll->mu, ll->rsigma "
                    "(qf_norm_quantize_mxfp8)",
     [QF_LL_GEMM] = "GEMM of ll->xq.rowwise and ll->wq.rowwise into y (qf_gemm_mxfp8)"}};

qf_status qf_layernorm_linear_mxfp8_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                        qf_ln_linear_mx *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_mxfp8_fwd";
    QF_TRY(qf_ll_args(op, ctx, x, ll, y));
    return qf_ll_run(op, &qf_ll_mx, ctx, recipe, x, &ll->weight, &ll->weight_changed, ll, y,
                     stream);
}

/* ---- NVFP4 */

static qf_status qf_ll_nv_stage(qf_ctx_t *ctx, int i, const char *recipe, const qf_tensor *x,
                                void *state, qf_tensor *y, void *stream) {
    qf_ln_linear_nv *ll = state;
    if (i == QF_LL_WEIGHT) /* weights never round stochastically (SPEC 2.4): no rng */
        return qf_quantize_nvfp4(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, NULL, &ll->wq, stream);
    if (i == QF_LL_NORM)
        return qf_norm_quantize_nvfp4(ctx, recipe, ll->norm, ll->zero_centered_gamma, x,
                                      &ll->gamma, &ll->beta, ll->eps, &ll->xq, &ll->mu,
                                      &ll->rsigma, stream);
    qf_tensor a = qf_flat2d(&ll->xq.rowwise), y2 = qf_flat2d(y);
    return qf_gemm_nvfp4(ctx, recipe, &a, &ll->xq.rowwise_scale_inv, &ll->xq.amax_rowwise,
                         &ll->wq.rowwise, &ll->wq.rowwise_scale_inv, &ll->wq.amax_rowwise,
                         ll->xq.layout, ll->bias.data ? &ll->bias : NULL, &y2, stream);
}

static const qf_ll_family qf_ll_nv = {
    qf_ll_nv_stage,
    {[QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize_nvfp4)",
     [QF_LL_NORM] = "norm + quantize of x into ll->xq, ll->mu, ll->rsigma "
                    "(qf_norm_quantize_nvfp4)",
     [QF_LL_GEMM] = "GEMM of ll->xq.rowwise and ll->wq.rowwise into y (qf_gemm_nvfp4)"}};

qf_status qf_layernorm_linear_nvfp4_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                        qf_ln_linear_nv *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_nvfp4_fwd";
    QF_TRY(qf_ll_args(op, ctx, x, ll, y));
    return qf_ll_run(op, &qf_ll_nv, ctx, recipe, x, &ll->weight, &ll->weight_changed, ll, y,
                     stream);
}
