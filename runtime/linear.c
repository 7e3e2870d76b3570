/* linear.c: LayerNorm/RMSNorm + Linear forward under a per-tensor FP8 recipe (DESIGN "Ops"):
 * y = gemm(quant(norm(x)), quant(W)) + bias, the weight quantized only when it changed. */
#include "ctx.h"
#include "validate.h"

/* The 2-D [M, N] view of y must have x's leading dims; checked by qf_gemm_fp8 on the flat view. */
static qf_tensor qf_flat2d(const qf_tensor *t) {
    qf_tensor f = *t;
    int64_t last = t->dims[t->ndim - 1];
    f.ndim = 2;
    f.dims[0] = qf_tensor_numel(t) / last;
    f.dims[1] = last;
    return f;
}

qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_fwd";
    qf_clear_error();
    if (!ll || !y || !x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !x ? "x" : !ll ? "ll" : "y");
    int64_t M, K, My, N;
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_activation(op, "weight", &ll->weight, &N, &My));
    if (My != K || y->ndim != x->ndim || qf_tensor_numel(y) != M * N)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: weight is [%lld, %lld] and y has %lld "
                            "elements; expected weight [N, K=%lld] and y [..., N] with x's "
                            "leading dims", op, (long long)N, (long long)My,
                            (long long)qf_tensor_numel(y), (long long)K);
    if (ll->weight_changed)
        QF_TRY(qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, ll->w_scale, &ll->wq, stream));
    QF_TRY(qf_norm_quantize(ctx, recipe, ll->norm, ll->zero_centered_gamma, x, &ll->gamma,
                            &ll->beta, ll->eps, ll->x_scale, &ll->xq, &ll->mu, &ll->rsigma,
                            stream));
    ll->weight_changed = 0;
    qf_tensor a = qf_flat2d(&ll->xq.rowwise), y2 = qf_flat2d(y);
    return qf_gemm_fp8(ctx, &a, ll->xq.scale_inv.data, &ll->wq.rowwise, ll->wq.scale_inv.data,
                       ll->bias.data ? &ll->bias : NULL, &y2, stream);
}
