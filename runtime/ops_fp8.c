/* ops_fp8.c: per-tensor FP8 ops (SPEC 2.1, 3): norm + quantize, quantize, scale update. */
#include <string.h>

#include "ctx.h"
#include "validate.h"

#define QF_MAX_SHAPES 8
#define QF_SCALE_UPDATE_MAX_H (48 * 1024 / 4) /* history fits the default shared memory */

/* Checks the quantizer outputs (and mu/rsigma) against the recipe's fake shapes. */
static qf_status qf_check_fp8_outputs(const char *op, const qf_recipe *r,
                                      const qf_shape_query *q, const qf_fp8_out *out,
                                      const qf_tensor *mu, const qf_tensor *rsigma) {
    qf_shape shapes[QF_MAX_SHAPES];
    int n = 0;
    QF_TRY(qf_query_shapes(op, r, q, shapes, QF_MAX_SHAPES, &n));
    static const char *const names[] = {"rowwise_data", "columnwise_data", "amax", "scale_inv",
                                        "mu", "rsigma"};
    static const char *const args[] = {"out->rowwise", "out->columnwise", "out->amax",
                                       "out->scale_inv", "mu", "rsigma"};
    const qf_tensor *tensors[] = {&out->rowwise, &out->columnwise, &out->amax, &out->scale_inv,
                                  mu, rsigma};
    return qf_check_buffers_as(op, shapes, n, names, args, tensors, 6);
}

/* The tiled entry, or a row-in-registers entry when the call allows one (qf_ctx_launch_rows). */
static qf_status qf_launch_nq(qf_ctx_t *ctx, int kidx, const qf_kernel_instance *inst,
                              qf_nq_params *p, qf_dtype xdt, void *stream) {
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_kernel(ctx, kidx, inst, &lk));
    const qf_rows_call c = {.M = p->M, .K = p->K, .xdt = xdt, .x = p->x, .out_row = p->out_row,
                            .out_col = p->out_col, .gamma = p->gamma, .beta = p->beta,
                            .rows_ok = 1};
    return qf_ctx_launch_rows(ctx, &lk, &qf_kernels[kidx], &c, p, stream);
}

static void qf_nq_params_outputs(qf_nq_params *p, const float *scale, qf_fp8_out *out) {
    p->scale = scale;
    p->out_row = out->rowwise.data;
    p->out_col = out->columnwise.data;
    p->amax = out->amax.data;
    p->scale_inv = out->scale_inv.data;
}

qf_status qf_norm_quantize(qf_ctx_t *ctx, const char *recipe, qf_norm norm, int zcg,
                           const qf_tensor *x, const qf_tensor *gamma, const qf_tensor *beta,
                           float eps, const float *scale, qf_fp8_out *out, qf_tensor *mu,
                           qf_tensor *rsigma, void *stream) {
    static const char op[] = "qf_norm_quantize";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_FP8_DELAYED,
                           "a per-tensor FP8 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_norm_args(op, norm, x, gamma, beta, K, mu, eps));
    if (!scale || !out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, scale ? "out" : "scale");
    unsigned outputs;
    QF_TRY(qf_check_outputs_selected(op, &out->rowwise, &out->columnwise, &outputs));
    qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT, .norm = norm,
                        .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_check_fp8_outputs(op, &qf_recipes[ri], &q, out, mu, rsigma));
    int kidx = qf_registry_kernel(ri, QF_OP_NORM_QUANTIZE, QF_ROLE_INPUT, norm, zcg, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = {.outputs = outputs, .gamma_dtype = gamma->dtype};
    qf_nq_params p = {.x = x->data, .gamma = gamma->data, .beta = beta ? beta->data : NULL,
                      .mu = mu ? mu->data : NULL, .rsigma = rsigma->data, .M = M, .K = K,
                      .eps = eps};
    qf_nq_params_outputs(&p, scale, out);
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    return qf_launch_nq(ctx, kidx, &inst, &p, x->dtype, stream);
}

qf_status qf_quantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                      const float *scale, qf_fp8_out *out, void *stream) {
    static const char op[] = "qf_quantize";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_FP8_DELAYED,
                           "a per-tensor FP8 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    if (role != QF_ROLE_WEIGHT && role != QF_ROLE_GRAD)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d is not QF_ROLE_WEIGHT or "
                            "QF_ROLE_GRAD", op, (int)role);
    if (!scale || !out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, scale ? "out" : "scale");
    unsigned outputs;
    QF_TRY(qf_check_outputs_selected(op, &out->rowwise, &out->columnwise, &outputs));
    qf_shape_query q = {.op = QF_OP_QUANTIZE, .role = role, .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_check_fp8_outputs(op, &qf_recipes[ri], &q, out, NULL, NULL));
    int kidx = qf_registry_kernel(ri, QF_OP_QUANTIZE, role, QF_NORM_NONE, 0, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = {.outputs = outputs, .gamma_dtype = x->dtype};
    qf_nq_params p = {.x = x->data, .M = M, .K = K};
    qf_nq_params_outputs(&p, scale, out);
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    return qf_launch_nq(ctx, kidx, &inst, &p, x->dtype, stream);
}

qf_status qf_fp8_scale_update(qf_ctx_t *ctx, const char *recipe, int n, int H, float *amax,
                              float *history, float *scale, float *scale_inv, const uint8_t *fmt,
                              void *stream) {
    static const char op[] = "qf_fp8_scale_update";
    int ri;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_FP8_DELAYED,
                           "a per-tensor FP8 recipe", &ri));
    if (n < 1 || H < 1 || H > QF_SCALE_UPDATE_MAX_H)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: n = %d and H = %d; expected n >= 1 and "
                            "1 <= H <= %d", op, n, H, QF_SCALE_UPDATE_MAX_H);
    if (!amax || !history || !scale || !scale_inv || !fmt)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL; amax, history, scale, scale_inv "
                            "and fmt must all be device pointers", op,
                            !amax ? "amax" : !history ? "history" : !scale ? "scale"
                                          : !scale_inv ? "scale_inv" : "fmt");
    int kidx = qf_registry_kernel(ri, QF_OP_SCALE_UPDATE, QF_ROLE_INPUT, QF_NORM_NONE, 0,
                                  QF_DTYPE_FP32);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    QF_TRY(qf_ctx_ready(ctx, op, stream));
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_kernel(ctx, kidx, &inst, &lk));
    qf_su_params p = {.amax = amax, .history = history, .scale = scale, .scale_inv = scale_inv,
                      .fmt = fmt, .n = n, .H = H};
    return qf_ctx_launch(ctx, lk.fn, (unsigned)n, qf_kernels[kidx].block_threads,
                     (unsigned)H * sizeof(float), &p, stream);
}
