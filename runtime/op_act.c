/* op_act.c: layernorm_mlp's activation and its backward (numerics 6), the same module for every
 * family (templates/smxx_activation.cu): checks against the fake shapes of a QF_OP_ACTIVATION
 * query, then one elementwise launch (the main entry, or <name>_grad). */
#include <string.h>

#include "ctx.h"
#include "validate.h"

#define QF_ACT_SHAPES 4

/* One checked call: h [M, Fin] viewed 2-D, F the activation's width. */
typedef struct qf_act_call {
    const qf_recipe *r;
    int64_t M, Fin, F;
    qf_shape shapes[QF_ACT_SHAPES];
    int n;
} qf_act_call;

/* act, h and the fake shapes of the call (QF_OUT_GATED for SwiGLU). */
static qf_status qf_act_check(const char *op, const qf_ctx_t *ctx, const char *recipe,
                              qf_activation act, const qf_tensor *h, qf_act_call *c) {
    QF_TRY(qf_check_recipe(op, ctx, recipe, &c->r));
    QF_TRY(qf_check_act_input(op, act, h, &c->M, &c->Fin, &c->F));
    const int gated = act == QF_ACT_SWIGLU;
    const qf_shape_query q = {.op = QF_OP_ACTIVATION, .role = QF_ROLE_INPUT,
                              .outputs = gated ? QF_OUT_GATED : 0u, .M = c->M, .N = c->F,
                              .dtype = h->dtype};
    return qf_query_shapes(op, c->r, &q, c->shapes, QF_ACT_SHAPES, &c->n);
}

/* Buffer t against the call's fake shape named `name`. */
static qf_status qf_act_out(const char *op, const qf_act_call *c, const char *name,
                            const qf_tensor *t) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->shapes[i].name, name) == 0)
            return qf_check_buffer(op, name, t, &c->shapes[i]);
    return qf_set_error(QF_ERR_INTERNAL, "%s: the shape function of '%s' lists no %s", op,
                        c->r->name, name);
}

/* Output `out` against input `in`: they must not overlap, except as the same buffer of the same
 * dtype under a non-gated activation, whose elementwise kernel reads an element before it writes
 * it there (in place); a SwiGLU output, half of h's width, would overwrite rows still to be read. */
static qf_status qf_act_apart(const char *op, qf_activation act, const char *out_arg,
                              const qf_tensor *out, const char *in_arg, const qf_tensor *in) {
    if (act != QF_ACT_SWIGLU && out->data == in->data && out->dtype == in->dtype)
        return QF_OK;
    return qf_check_disjoint(op, out_arg, out, in_arg, in);
}

/* The module of h's dtype, loaded, and one grid-stride launch of fn_grad (grad) or fn on at most
 * the blocks the device holds at once (qf_ctx_wave), after p->amax (if any) is zeroed on stream. */
static qf_status qf_act_launch(qf_ctx_t *ctx, const char *op, const qf_act_call *c,
                               qf_dtype dt, int grad, qf_act_params *p, void *stream) {
    const qf_kernel_entry *k =
        qf_registry_kernel(c->r, QF_OP_ACTIVATION, QF_ROLE_INPUT, QF_NORM_NONE, 0, dt);
    qf_loaded_kernel lk;
    QF_TRY(qf_ctx_load(ctx, op, stream, k, NULL, &lk));
    CUfunction fn = grad ? lk.fn_grad : lk.fn;
    if (!fn)
        return qf_set_error(QF_ERR_NOT_FOUND, "%s: kernel %s has no _grad entry", op, k->name);
    QF_TRY(qf_zero_async(p->amax, sizeof(float), "amax", stream)); /* NULL: nothing */
    const int64_t n = c->M * c->F, per = k->block_threads;
    const int64_t wave = qf_ctx_wave(ctx, fn, k->block_threads, 0, ctx->sm_count);
    int64_t blocks = (n + per - 1) / per;
    blocks = blocks < wave ? blocks : wave;
    return qf_ctx_launch(ctx, fn, (unsigned)(blocks > 0 ? blocks : 1), k->block_threads, 0, p,
                         stream);
}

/* The forward (grad 0: out = a) or backward (grad 1: out = dh, from da) of one call, with amax
 * (NULL, or [1] fp32: zeroed on stream by qf_act_launch, then the kernel max-merges |out| into
 * it). */
static qf_status qf_act_run(qf_ctx_t *ctx, const char *op, const char *recipe, qf_activation act,
                            const qf_tensor *h, int grad, const qf_tensor *da, qf_tensor *out,
                            qf_tensor *amax, void *stream) {
    qf_act_call c;
    QF_TRY(qf_act_check(op, ctx, recipe, act, h, &c));
    const char *out_arg = grad ? "dh" : "a";
    if (grad)
        QF_TRY(qf_check_grad_input(op, "da", da, c.M, c.F,
                                   "the gradient of the activation's output", "[M, F]"));
    QF_TRY(qf_act_out(op, &c, out_arg, out));
    QF_TRY(qf_act_apart(op, act, out_arg, out, "h", h));
    if (grad)
        QF_TRY(qf_act_apart(op, act, out_arg, out, "da", da));
    qf_act_params p = {.h = h->data, .da = grad ? da->data : NULL, .out = out->data, .M = c.M,
                       .F = c.F, .act = (int32_t)act,
                       .da_fp32 = grad && da->dtype == QF_DTYPE_FP32};
    if (amax) {
        const qf_shape sa = {"amax", QF_DTYPE_FP32, 1, {1}, sizeof(float)};
        QF_TRY(qf_check_buffer(op, "amax", amax, &sa));
        const qf_inputs in = {3, {"h", "da", out_arg}, {h, grad ? da : NULL, out}};
        QF_TRY(qf_check_apart(op, "amax", amax, &in));
        p.amax = amax->data;
    }
    return qf_act_launch(ctx, op, &c, h->dtype, grad, &p, stream);
}

qf_status qf_activation_fwd(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                            const qf_tensor *h, qf_tensor *a, void *stream) {
    return qf_act_run(ctx, "qf_activation_fwd", recipe, act, h, 0, NULL, a, NULL, stream);
}

qf_status qf_activation_bwd(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                            const qf_tensor *h, const qf_tensor *da, qf_tensor *dh,
                            void *stream) {
    return qf_act_run(ctx, "qf_activation_bwd", recipe, act, h, 1, da, dh, NULL, stream);
}

qf_status qf_activation_amax(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                             const qf_tensor *h, const qf_tensor *da, qf_tensor *out,
                             qf_tensor *amax, void *stream) {
    if (!amax)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_activation_amax: amax is NULL");
    return qf_act_run(ctx, "qf_activation_amax", recipe, act, h, da != NULL, da, out, amax,
                      stream);
}
