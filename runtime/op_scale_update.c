/* op_scale_update.c: the scale update (numerics 2.1): delayed scaling's amax-history roll and new
 * scales for all tensors of a step in one launch. Families that compute their scales in the
 * quantizer have none. */
#include "ctx.h"
#include "validate.h"

/* The longest history: amax_history_len's range (runtime/family.c); the kernel holds a tensor's
 * history in shared memory (32 KiB). */
#define QF_SCALE_UPDATE_MAX_H 8192

static qf_status qf_su_check(const char *op, int n, int H, const float *amax,
                             const float *history, const float *scale, const float *scale_inv,
                             const uint8_t *fmt) {
    if (n < 1 || H < 1 || H > QF_SCALE_UPDATE_MAX_H)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: n = %d and H = %d; expected n >= 1 and "
                            "1 <= H <= %d", op, n, H, QF_SCALE_UPDATE_MAX_H);
    if (!amax || !history || !scale || !scale_inv || !fmt)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL; amax, history, scale, scale_inv "
                            "and fmt must all be device pointers", op,
                            !amax ? "amax" : !history ? "history" : !scale ? "scale"
                                          : !scale_inv ? "scale_inv" : "fmt");
    /* the float arrays are read and written as floats; none may overlap another (fmt is read
     * only, but a write to an array over it would change a format mid-launch) */
    const qf_tensor t[5] = {
        {.data = (void *)amax, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {n}},
        {.data = (void *)history, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {(int64_t)n * H}},
        {.data = (void *)scale, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {n}},
        {.data = (void *)scale_inv, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {n}},
        {.data = (void *)fmt, .dtype = QF_DTYPE_E4M3, .ndim = 1, .dims = {n}}};
    static const char *const names[5] = {"amax", "history", "scale", "scale_inv", "fmt"};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)t[i].data % sizeof(float) != 0)
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s %p is not 4-byte aligned", op,
                                names[i], t[i].data);
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            QF_TRY(qf_check_disjoint(op, names[i], &t[i], names[j], &t[j]));
    return QF_OK;
}

static qf_status qf_su_delayed(qf_ctx_t *ctx, const char *op, const qf_recipe *r,
                               qf_su_params *p, void *stream) {
    if (p->H != r->amax_history_len)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: H = %d, but recipe '%s' keeps an amax "
                            "history of amax_history_len = %lld steps; history is [n, %lld]",
                            op, (int)p->H, r->name, (long long)r->amax_history_len,
                            (long long)r->amax_history_len);
    const qf_kernel_entry *k = qf_registry_kernel(r, QF_OP_SCALE_UPDATE, QF_ROLE_INPUT,
                                                  QF_NORM_NONE, 0, QF_DTYPE_FP32);
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_load(ctx, op, stream, k, NULL, &lk));
    return qf_ctx_launch(ctx, lk.fn, (unsigned)p->n, k->block_threads,
                         (unsigned)p->H * sizeof(float), p, stream);
}

qf_status qf_scale_update(qf_ctx_t *ctx, const char *recipe, int n, int H, float *amax,
                          float *history, float *scale, float *scale_inv, const uint8_t *fmt,
                          void *stream) {
    static const char op[] = "qf_scale_update";
    const qf_recipe *r;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    const qf_family_traits *f = &qf_families[r->family];
    if (!f->implemented)
        return qf_family_unsupported(op, r);
    /* the families table: only a family with a scale-update template (delayed scaling) has one */
    if (!f->ops[QF_OP_SCALE_UPDATE].tpl)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: recipe '%s' (%s) has no scale update: its "
                            "quantizer computes the scales from the data", op, r->name,
                            qf_family_name(r->family));
    QF_TRY(qf_su_check(op, n, H, amax, history, scale, scale_inv, fmt));
    qf_su_params p = {.amax = amax, .history = history, .scale = scale, .scale_inv = scale_inv,
                      .fmt = fmt, .n = n, .H = H};
    return qf_su_delayed(ctx, op, r, &p, stream);
}
