/* ops_nvfp4.c: NVFP4 quantizers (SPEC 2.4, 3): fused norm + quantize and plain quantize, each
 * two launches of one module (statistics and global amax, then quantize). */
#include "ctx.h"
#include "validate.h"

#define QF_NV_MAX_SHAPES 8
#define QF_NV_ALIGN 16

/* M and K multiples of 16 (SPEC 2.4), and x 16-byte aligned (the kernels' vector loads). */
static qf_status qf_nv_check_x(const char *op, const qf_tensor *x, int64_t M, int64_t K) {
    if (M % 16 != 0 || K % 16 != 0)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: x is viewed as [M, K] = [%lld, %lld]; NVFP4 "
                            "needs M and K to be multiples of 16 (SPEC 2.4)", op, (long long)M,
                            (long long)K);
    if ((uintptr_t)x->data % QF_NV_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: x.data %p is not 16-byte aligned", op,
                            x->data);
    return QF_OK;
}

/* gamma and beta (when given) 16-byte aligned, after qf_check_norm_args. */
static qf_status qf_nv_check_affine(const char *op, const qf_tensor *gamma,
                                    const qf_tensor *beta) {
    if ((uintptr_t)gamma->data % QF_NV_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: gamma.data %p is not 16-byte aligned", op,
                            gamma->data);
    if (beta && beta->data && (uintptr_t)beta->data % QF_NV_ALIGN)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: beta.data %p is not 16-byte aligned", op,
                            beta->data);
    return QF_OK;
}

/* The selected outputs of out, and its scale layout checked. */
static qf_status qf_nv_outputs(const char *op, const qf_nv_out *out, unsigned *outputs) {
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out is NULL", op);
    return qf_check_block_outputs(op, &out->rowwise, &out->columnwise, out->layout, outputs);
}

/* Every output against the recipe's fake shapes: each produced copy needs its data, scale matrix
 * and amax slot (names as in the generated shape table). */
static qf_status qf_nv_check_buffers(const char *op, const qf_recipe *r,
                                     const qf_shape_query *q, const qf_nv_out *out,
                                     const qf_tensor *mu, const qf_tensor *rsigma) {
    qf_shape shapes[QF_NV_MAX_SHAPES];
    int n = 0;
    QF_TRY(qf_query_shapes(op, r, q, shapes, QF_NV_MAX_SHAPES, &n));
    static const char *const names[] = {"rowwise_data", "rowwise_scale_inv", "columnwise_data",
                                        "columnwise_scale_inv", "amax_rowwise",
                                        "amax_columnwise", "mu", "rsigma"};
    static const char *const args[] = {"out->rowwise", "out->rowwise_scale_inv",
                                       "out->columnwise", "out->columnwise_scale_inv",
                                       "out->amax_rowwise", "out->amax_columnwise", "mu",
                                       "rsigma"};
    const qf_tensor *tensors[] = {&out->rowwise, &out->rowwise_scale_inv, &out->columnwise,
                                  &out->columnwise_scale_inv, &out->amax_rowwise,
                                  &out->amax_columnwise, mu, rsigma};
    return qf_check_buffers_as(op, shapes, n, names, args, tensors, 8);
}

/* Zeroes the scale matrices (padding is 0x00; pass 2 writes every real entry) and the amax slots
 * (pass 1 max-merges into them). */
static qf_status qf_nv_zero_outputs(const qf_nv_out *out, void *stream) {
    QF_TRY(qf_zero_async(out->rowwise.data ? out->rowwise_scale_inv.data : NULL,
                         (size_t)qf_tensor_numel(&out->rowwise_scale_inv),
                         "out->rowwise_scale_inv", stream));
    QF_TRY(qf_zero_async(out->columnwise.data ? out->columnwise_scale_inv.data : NULL,
                         (size_t)qf_tensor_numel(&out->columnwise_scale_inv),
                         "out->columnwise_scale_inv", stream));
    QF_TRY(qf_zero_async(out->rowwise.data ? out->amax_rowwise.data : NULL, sizeof(float),
                         "out->amax_rowwise", stream));
    return qf_zero_async(out->columnwise.data ? out->amax_columnwise.data : NULL, sizeof(float),
                         "out->amax_columnwise", stream);
}

/* Pass 1 on cdiv(M, tile_m) blocks, then pass 2 on one thread per 16x8 work item. */
static qf_status qf_nv_launch(qf_ctx_t *ctx, const char *op, int kidx,
                              const qf_kernel_instance *inst, qf_nv_params *p,
                              const qf_nv_out *out, void *stream) {
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_ready(ctx, op, stream)); /* device-less contexts stop here; foreign streams too */
    QF_TRY(qf_ctx_kernel(ctx, kidx, inst, &lk));
    const qf_kernel_entry *k = &qf_kernels[kidx];
    if (!lk.fn_amax)
        return qf_set_error(QF_ERR_INTERNAL, "%s: kernel %s has no %s_amax entry", op, k->name,
                            k->name);
    const int64_t grid1 = (p->M + k->tile_m - 1) / k->tile_m;
    const int64_t items = (p->M / 16) * (p->K / 8);
    const int64_t grid2 = (items + k->block_threads - 1) / k->block_threads;
    if (grid1 > 0x7fffffff || grid2 > 0x7fffffff)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: M * K = %lld * %lld is too large for one "
                            "launch", op, (long long)p->M, (long long)p->K);
    QF_TRY(qf_nv_zero_outputs(out, stream));
    QF_TRY(qf_ctx_launch(ctx, lk.fn_amax, (unsigned)grid1, k->block_threads, 0, p, stream));
    return qf_ctx_launch(ctx, lk.fn, (unsigned)grid2, k->block_threads, 0, p, stream);
}

static void qf_nv_params_outputs(qf_nv_params *p, const qf_nv_out *out) {
    const int row = out->rowwise.data != NULL, col = out->columnwise.data != NULL;
    p->out_row = out->rowwise.data;
    p->scale_row = row ? out->rowwise_scale_inv.data : NULL;
    p->amax_row = row ? out->amax_rowwise.data : NULL;
    p->out_col = out->columnwise.data;
    p->scale_col = col ? out->columnwise_scale_inv.data : NULL;
    p->amax_col = col ? out->amax_columnwise.data : NULL;
}

qf_status qf_norm_quantize_nvfp4(qf_ctx_t *ctx, const char *recipe, qf_norm norm, int zcg,
                                 const qf_tensor *x, const qf_tensor *gamma,
                                 const qf_tensor *beta, float eps, qf_nv_out *out, qf_tensor *mu,
                                 qf_tensor *rsigma, void *stream) {
    static const char op[] = "qf_norm_quantize_nvfp4";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_NVFP4, "an NVFP4 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_nv_check_x(op, x, M, K));
    QF_TRY(qf_check_norm_args(op, norm, x, gamma, beta, K, mu, eps));
    QF_TRY(qf_nv_check_affine(op, gamma, beta));
    unsigned outputs;
    QF_TRY(qf_nv_outputs(op, out, &outputs));
    qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT, .norm = norm,
                        .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_nv_check_buffers(op, &qf_recipes[ri], &q, out, mu, rsigma));
    int kidx = qf_registry_kernel(ri, QF_OP_NORM_QUANTIZE, QF_ROLE_INPUT, norm, zcg, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    inst.outputs = outputs, inst.gamma_dtype = gamma->dtype, inst.layout = out->layout;
    qf_nv_params p = {.x = x->data, .gamma = gamma->data, .beta = beta ? beta->data : NULL,
                      .mu = mu ? mu->data : NULL, .rsigma = rsigma->data, .M = M, .K = K,
                      .eps = eps};
    qf_nv_params_outputs(&p, out);
    return qf_nv_launch(ctx, op, kidx, &inst, &p, out, stream);
}

qf_status qf_quantize_nvfp4(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                            const qf_nv_rng *rng, qf_nv_out *out, void *stream) {
    static const char op[] = "qf_quantize_nvfp4";
    int ri;
    int64_t M, K;
    QF_TRY(qf_check_recipe(op, ctx, recipe, QF_FAMILY_NVFP4, "an NVFP4 recipe", &ri));
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_nv_check_x(op, x, M, K));
    if (role != QF_ROLE_WEIGHT && role != QF_ROLE_GRAD)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d is not QF_ROLE_WEIGHT or "
                            "QF_ROLE_GRAD", op, (int)role);
    const int sr = role == QF_ROLE_GRAD && qf_recipes[ri].sr_grad;
    if (sr && !rng)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: rng is NULL, but recipe '%s' rounds "
                            "gradients stochastically; pass a seed and offset", op, recipe);
    unsigned outputs;
    QF_TRY(qf_nv_outputs(op, out, &outputs));
    qf_shape_query q = {.op = QF_OP_QUANTIZE, .role = role, .outputs = outputs, .M = M, .K = K};
    QF_TRY(qf_nv_check_buffers(op, &qf_recipes[ri], &q, out, NULL, NULL));
    int kidx = qf_registry_kernel(ri, QF_OP_QUANTIZE, role, QF_NORM_NONE, 0, x->dtype);
    if (kidx < 0)
        return QF_ERR_NOT_FOUND;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    inst.outputs = outputs, inst.gamma_dtype = x->dtype, inst.layout = out->layout;
    qf_nv_params p = {.x = x->data, .M = M, .K = K};
    if (sr)
        p.sr_seed = rng->seed, p.sr_offset = rng->offset;
    qf_nv_params_outputs(&p, out);
    return qf_nv_launch(ctx, op, kidx, &inst, &p, out, stream);
}
