/* linear.c: LayerNorm/RMSNorm + Linear and LayerNorm/RMSNorm + MLP under any recipe (DESIGN
 * "Ops", numerics 6), as stages of the public ops. Linear forward: y = gemm(quant(norm(x)),
 * quant(W)) + bias, the weight quantized only when it changed; backward: q(dy) -> dgrad, wgrad,
 * dbias -> the norm's backward. The MLP: the same with fc1, the activation and fc2. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctx.h"
#include "names.h"
#include "validate.h"

/* The stages, forward then backward. */
enum {
    QF_LL_WEIGHT,
    QF_LL_WEIGHT_BF16,
    QF_LL_NORM,
    QF_LL_GEMM,
    QF_LL_DY,
    QF_LL_DGRAD,
    QF_LL_WGRAD,
    QF_LL_NORM_BWD,
    QF_LL_STAGES
};
#define QF_LL_BIT(s) (1u << (s))

/* What each stage does, in the caller's names (prefixed to a failing stage's message). */
static const char *const qf_ll_stage_names[] = {
    [QF_LL_WEIGHT] = "quantizing ll->weight into ll->wq (qf_quantize)",
    [QF_LL_WEIGHT_BF16] = "dequantizing ll->wq into ll->wq_bf16 (qf_dequantize)",
    [QF_LL_NORM] = "norm + quantize of x into ll->xq (qf_quantize)",
    [QF_LL_GEMM] = "GEMM of ll->xq and ll->wq into y (qf_gemm)",
    [QF_LL_DY] = "quantizing dy into g->dyq (qf_quantize; with g->dbias, qf_quantize_dbias)",
    [QF_LL_DGRAD] = "dgrad GEMM of g->dyq (rowwise) and ll->wq (columnwise) into g->dxn (qf_gemm)",
    [QF_LL_WGRAD] = "wgrad GEMM of g->dyq and ll->xq (columnwise) into g->dweight (qf_gemm_ex)",
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

/* out (named out_name: y or dy) [..., N] with x's leading dims (N from n_from). */
static qf_status qf_check_rows_of(const char *op, const qf_tensor *x, const qf_tensor *out,
                                  const char *out_name, int64_t N, const char *n_from) {
    int same = out->ndim == x->ndim && out->ndim >= 1 && out->ndim <= QF_MAX_DIMS &&
               out->dims[out->ndim - 1] == N;
    for (int i = 0; same && i + 1 < x->ndim; i++)
        same = out->dims[i] == x->dims[i];
    if (same)
        return QF_OK;
    if (out->ndim < 1 || out->ndim > QF_MAX_DIMS || out->ndim != x->ndim)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has %d dims; expected x's %d, with x's "
                            "leading dims and N = %lld (%s)", op, out_name, out->ndim, x->ndim,
                            (long long)N, n_from);
    char got[256] = "", want[256] = "";
    for (int i = 0, w = 0; i < out->ndim && i < QF_MAX_DIMS && w >= 0 && w < (int)sizeof got; i++)
        w += snprintf(got + w, sizeof got - (size_t)w, "%s%lld", i ? ", " : "",
                      (long long)out->dims[i]);
    for (int i = 0, w = 0; i + 1 < x->ndim && w >= 0 && w < (int)sizeof want; i++)
        w += snprintf(want + w, sizeof want - (size_t)w, "%lld, ", (long long)x->dims[i]);
    return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is [%s]; expected [%sN = %lld] (x's leading "
                        "dims, N %s)", op, out_name, got, want, (long long)N, n_from);
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
    return qf_check_rows_of(op, x, y, y_name, N, "ll->weight's rows");
}

/* Re-records failure s with the context printf's fmt makes in front of its message. */
static qf_status qf_fail_in(qf_status s, const char *fmt, ...) QF_PRINTF(2, 3);
static qf_status qf_fail_in(qf_status s, const char *fmt, ...) {
    char inner[1024], where[512];
    snprintf(inner, sizeof inner, "%s", qf_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(where, sizeof where, fmt, ap);
    va_end(ap);
    return qf_set_error(s, "%s: %s", where, inner);
}

/* Re-records the failure of a stage with the op and the stage in front of its message. */
static qf_status qf_ll_fail(const char *op, const char *stage, qf_status s) {
    return qf_fail_in(s, "%s: %s", op, stage);
}

/* The GEMM of copies (qa, ca) and (qb, cb) into out (2-D view), with the options opts. */
static qf_status qf_stage_gemm(qf_ctx_t *ctx, const char *recipe, const qf_quantized *qa,
                              qf_copy ca, const qf_quantized *qb, qf_copy cb,
                              const qf_tensor *bias, const qf_tensor *out,
                              const qf_gemm_opts *opts, void *stream) {
    qf_quantized a = *qa;
    a.t[QF_SLOT_ROWWISE_DATA] = qf_flat2d(&qa->t[QF_SLOT_ROWWISE_DATA]);
    qf_tensor y = qf_flat2d(out);
    const qf_operand oa = {&a, ca}, ob = {qb, cb};
    return qf_gemm_ex(ctx, recipe, &oa, &ob, bias && bias->data ? bias : NULL, &y, opts, stream);
}

/* The bf16 values of both copies of a weight's wq into kept[copy] (named kept_arg[copy] in
 * messages) where its data is set. Every copy is checked: on the device-less twin
 * (qf_stages_run) each call that accepts its arguments answers QF_ERR_NO_DEVICE, which does not
 * end the stage. A failure names the copy ("the columnwise copy, ll->wq_bf16[1]: ..."). */
static qf_status qf_stage_weight_bf16(qf_ctx_t *ctx, const char *recipe, const qf_quantized *wq,
                                      qf_tensor kept[QF_COPY_COUNT], const char *kept_arg,
                                      void *stream) {
    qf_status res = QF_OK;
    for (int c = 0; c < QF_COPY_COUNT; c++) {
        const qf_operand w = {wq, (qf_copy)c};
        const qf_status s =
            kept[c].data ? qf_dequantize(ctx, recipe, QF_ROLE_WEIGHT, &w, &kept[c], stream)
                         : QF_OK;
        if (s != QF_OK && s != QF_ERR_NO_DEVICE)
            return qf_fail_in(s, "the %s copy, %s[%d]", qf_enum_name(QF_ENUM_COPY, c), kept_arg,
                              c);
        res = s != QF_OK ? s : res;
    }
    return res;
}

/* 1 when any of a weight's bf16 copies is kept (its data set). */
static int qf_kept_any(const qf_tensor kept[QF_COPY_COUNT]) {
    return kept[QF_COPY_ROWWISE].data || kept[QF_COPY_COLUMNWISE].data;
}

/* The tensors of one call, for its overlap checks (qf_check_call): each with where its name
 * comes from (formatted only for a message) and its role in the stages the call runs: read,
 * written, or a kept bf16 weight copy (apart from every other tensor of the call, in both
 * directions). Two entries whose `same` masks share a bit may be the same buffer (the same data
 * and dtype): an in-place stage. */
#define QF_TLIST_MAX 96
enum { QF_TL_READ, QF_TL_WRITTEN, QF_TL_KEPT };
typedef struct qf_tl_entry {
    const qf_tensor *t;
    const char *arg; /* "x", "ll->xq", "mlp->w1q_bf16" */
    int index;       /* the slot of a qf_quantized (form 1), or the copy of a kept array (2) */
    unsigned char form, role, same; /* form 0: arg; 1: arg->slot; 2: arg[index] */
    uintptr_t lo, hi;               /* its bytes [lo, hi) */
} qf_tl_entry;
typedef struct qf_tlist {
    int n, n_scales;
    qf_tl_entry e[QF_TLIST_MAX];
    qf_tensor scales[4]; /* fp8_delayed's scales, one float each */
} qf_tlist;
/* the MLP's backward: 4 kept copies, 14 tensors and scales, 6 quantized and 10 gradients */
_Static_assert(2 * QF_COPY_COUNT + 14 + 6 * QF_SLOT_COUNT + 10 <= QF_TLIST_MAX, "QF_TLIST_MAX");

/* Adds t when it has data and well-formed dims (a malformed one is left to its stage's checks,
 * which name it). The lists are sized for every argument of the largest call. */
static void qf_tl_put(qf_tlist *l, const qf_tensor *t, const char *arg, int index, int form,
                      int role) {
    if (!t || !t->data || qf_tensor_numel(t) < 1 || l->n == QF_TLIST_MAX)
        return;
    l->e[l->n] = (qf_tl_entry){t, arg, index, (unsigned char)form, (unsigned char)role, 0, 0, 0};
    qf_tensor_span(t, &l->e[l->n].lo, &l->e[l->n].hi);
    l->n++;
}

static void qf_tl_add(qf_tlist *l, const qf_tensor *t, const char *arg, int role) {
    qf_tl_put(l, t, arg, 0, 0, role);
}

/* The scale a stage reads from scale (fp8_delayed's, one float; the other families ignore it). */
static void qf_tl_add_scale(qf_tlist *l, const qf_recipe *r, const float *scale,
                            const char *arg) {
    if (r->family != QF_FAMILY_FP8_DELAYED || !scale || l->n_scales == 4)
        return;
    qf_tensor *t = &l->scales[l->n_scales++];
    *t = (qf_tensor){.data = (void *)scale, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}};
    qf_tl_add(l, t, arg, QF_TL_READ);
}

/* The slots a stage's quantization of role (norm `norm`) of an input [M, K] into q uses: those
 * its fake shapes list for the copies q asks for (their data set). A slot set but not listed
 * (left over from another recipe) is no tensor of the call; where q asks for no copy or the
 * query fails, none: the stage names what is wrong. */
static unsigned qf_q_slots_of(const qf_recipe *r, qf_role role, qf_norm norm, int64_t M,
                              int64_t K, const qf_quantized *q) {
    const unsigned outputs = qf_outputs_of(q);
    const qf_shape_query sq = qf_quantize_query(role, norm, outputs, M, K);
    qf_shape shapes[QF_FAKE_MAX_OUTPUTS];
    const int n = outputs && M > 0 && K > 0 ? qf_recipe_shapes(r, &sq, shapes, QF_FAKE_MAX_OUTPUTS)
                                            : 0;
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        const int slot = qf_slot_from_name(shapes[i].name);
        m |= slot >= 0 ? 1u << slot : 0u;
    }
    return m;
}

/* The slots of q that a stage's quantization of role (norm `norm`, input [M, K]) uses
 * (qf_q_slots_of), named "<arg>-><slot>". */
static void qf_tl_add_q(qf_tlist *l, const qf_recipe *r, qf_role role, qf_norm norm, int64_t M,
                        int64_t K, const qf_quantized *q, const char *arg, int tl_role) {
    const unsigned used = qf_q_slots_of(r, role, norm, M, K, q);
    for (int s = 0; s < QF_SLOT_COUNT; s++)
        if (used >> s & 1u)
            qf_tl_put(l, &q->t[s], arg, s, 1, tl_role);
}

/* Both copies of a kept bf16 weight array, named "<arg>[c]". */
static void qf_tl_add_kept(qf_tlist *l, const qf_tensor kept[QF_COPY_COUNT], const char *arg) {
    for (int c = 0; c < QF_COPY_COUNT; c++)
        qf_tl_put(l, &kept[c], arg, c, 2, QF_TL_KEPT);
}

/* A norm's gamma and, under LayerNorm, beta (read; RMSNorm ignores beta). */
static void qf_tl_add_norm(qf_tlist *l, const qf_norm_desc *n, const char *gamma,
                           const char *beta) {
    qf_tl_add(l, &n->gamma, gamma, QF_TL_READ);
    if (n->norm == QF_NORM_LAYERNORM)
        qf_tl_add(l, &n->beta, beta, QF_TL_READ);
}

/* The name of entry e in messages. */
static void qf_tl_name(const qf_tl_entry *e, char *buf, size_t n) {
    if (e->form == 1)
        snprintf(buf, n, "%s->%s", e->arg, qf_slot_name((qf_slot)e->index));
    else if (e->form == 2)
        snprintf(buf, n, "%s[%d]", e->arg, e->index);
    else
        snprintf(buf, n, "%s", e->arg);
}

/* No tensor a call writes (or keeps) shares a byte with another tensor of the call, but where
 * an in-place stage takes one buffer for both (their `same` masks): each stage checks its own
 * arguments, and this the ones that meet across stages (fc1's h written by one stage and read by
 * a later one, a weight's copies written over x). The entries sorted by their first byte, each is
 * compared with those that start before it ends. QF_ERR_INVALID_ARG names both, the written one
 * first (qf_check_disjoint's message). */
static qf_status qf_check_call(const char *op, qf_tlist *l) {
    for (int i = 1; i < l->n; i++) { /* insertion sort by lo: a few dozen entries */
        const qf_tl_entry e = l->e[i];
        int j = i - 1;
        for (; j >= 0 && l->e[j].lo > e.lo; j--)
            l->e[j + 1] = l->e[j];
        l->e[j + 1] = e;
    }
    for (int i = 0; i < l->n; i++)
        for (int j = i + 1; j < l->n && l->e[j].lo < l->e[i].hi; j++) {
            const qf_tl_entry *p = &l->e[i], *q = &l->e[j];
            if (p->role == QF_TL_READ && q->role == QF_TL_READ)
                continue;
            if ((p->same & q->same) && p->t->data == q->t->data && p->t->dtype == q->t->dtype &&
                p->hi == q->hi)
                continue; /* one buffer, in place */
            if (q->role > p->role) /* the written (or kept) one named first */
                p = &l->e[j], q = &l->e[i];
            char a[64], b[64];
            qf_tl_name(p, a, sizeof a), qf_tl_name(q, b, sizeof b);
            const qf_status st = qf_check_disjoint(op, a, p->t, b, q->t);
            if (st != QF_OK)
                return st;
        }
    return QF_OK;
}

/* Kept bf16 weight copies (kept, named arg, where either is set) only where the recipe's GEMM
 * on this arch multiplies bf16 values (its generated GEMM module's staged path: MXFP8 and NVFP4
 * on sm_89..99). QF_ERR_INVALID_ARG names the first set. */
static qf_status qf_check_kept(const char *op, const qf_ctx_t *ctx, const qf_recipe *r,
                               const qf_tensor kept[QF_COPY_COUNT], const char *arg) {
    if (!qf_kept_any(kept))
        return QF_OK;
    char first_arg[64];
    snprintf(first_arg, sizeof first_arg, "%s[%d]", arg, kept[0].data ? 0 : 1);
    if (qf_family_gemm_path(r->family, ctx->arch).engine != QF_GEMM_KERNEL)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is set, but recipe '%s' (%s) on sm_%d "
                            "multiplies its quantized copies directly: there is no bf16 weight "
                            "to keep (MXFP8 and NVFP4 keep one on sm_89..99); leave it NULL", op,
                            first_arg, r->name, qf_family_name(r->family), ctx->arch);
    return QF_OK;
}

/* The tensors of a LayerNorm + Linear call running the stages of mask: x, y (forward, written)
 * or dy (backward, read), the tensors of ll and g (NULL: the forward's) those stages use, each
 * written by one of them or read. */
static void qf_ll_tensors(qf_tlist *l, const qf_recipe *r, const qf_ln_linear *ll,
                          const qf_tensor *x, const qf_tensor *out, const char *out_name,
                          const qf_ln_linear_grads *g, unsigned mask) {
    const int fwd = g == NULL, W = QF_TL_WRITTEN, R = QF_TL_READ;
    /* x and the weight passed qf_check_activation (qf_ll_check_dims): their 2-D views' rows */
    const int64_t K = x->dims[x->ndim - 1], M = qf_flat2d(x).dims[0];
    const int64_t N = qf_flat2d(&ll->weight).dims[0];
    const qf_role in = QF_ROLE_INPUT, wt = QF_ROLE_WEIGHT, gr = QF_ROLE_GRAD;
    const int w_q = (mask & QF_LL_BIT(QF_LL_WEIGHT)) != 0;
    l->n = l->n_scales = 0;
    qf_tl_add_kept(l, ll->wq_bf16, "ll->wq_bf16");
    qf_tl_add(l, x, "x", R), qf_tl_add(l, out, out_name, fwd ? W : R);
    qf_tl_add(l, &ll->weight, "ll->weight", R), qf_tl_add(l, &ll->bias, "ll->bias", R);
    qf_tl_add_norm(l, &ll->norm, "ll->norm.gamma", "ll->norm.beta");
    qf_tl_add_q(l, r, in, ll->norm.norm, M, K, &ll->xq, "ll->xq", fwd ? W : R);
    qf_tl_add_q(l, r, wt, QF_NORM_NONE, N, K, &ll->wq, "ll->wq", w_q ? W : R);
    if (fwd) {
        qf_tl_add_scale(l, r, ll->x_scale, "ll->x_scale");
        if (w_q)
            qf_tl_add_scale(l, r, ll->w_scale, "ll->w_scale");
        return;
    }
    qf_tl_add_scale(l, r, g->dy_scale, "g->dy_scale");
    qf_tl_add_q(l, r, gr, QF_NORM_NONE, M, N, &g->dyq, "g->dyq", W);
    qf_tl_add(l, &g->dxn, "g->dxn", W), qf_tl_add(l, &g->dbias, "g->dbias", W);
    if (mask & QF_LL_BIT(QF_LL_WGRAD))
        qf_tl_add(l, &g->dweight, "g->dweight", W);
    qf_tl_add(l, &g->norm.dx, "g->norm.dx", W);
    qf_tl_add(l, &g->norm.dgamma, "g->norm.dgamma", W);
    if (ll->norm.norm == QF_NORM_LAYERNORM)
        qf_tl_add(l, &g->norm.dbeta, "g->norm.dbeta", W);
}

/* The options of a GEMM whose b is a weight's copy: b_dequantized = kept where its data is set
 * (the weight's bf16 values, qf_stage_weight_bf16). */
static qf_gemm_opts qf_weight_opts(const qf_tensor *kept) {
    return (qf_gemm_opts){.b_dequantized = kept->data ? kept : NULL};
}

/* A gradient's quantization (2-D view x) into out, with its dbias where dbias->data is set
 * (qf_quantize_dbias: one kernel where it can). */
static qf_status qf_stage_q_grad(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                 const float *scale, const qf_rng *rng, qf_quantized *out,
                                 qf_tensor *dbias, void *stream) {
    if (dbias->data)
        return qf_quantize_dbias(ctx, recipe, x, scale, rng, out, dbias, stream);
    return qf_quantize(ctx, recipe, QF_ROLE_GRAD, x, NULL, scale, rng, out, stream);
}

/* The norm backward of a composition from the statistics its forward saved in xq (MU, RSIGMA),
 * with x, dxn and dx viewed 2-D. */
static qf_status qf_stage_norm_bwd(qf_ctx_t *ctx, const char *recipe, const qf_norm_desc *norm,
                                   const qf_quantized *xq, const qf_tensor *x,
                                   const qf_tensor *dxn, const qf_norm_grads *out, void *stream) {
    const qf_tensor x2 = qf_flat2d(x), dxn2 = qf_flat2d(dxn);
    qf_norm_grads ng = *out;
    ng.dx = qf_flat2d(&out->dx);
    return qf_norm_backward(ctx, recipe, norm, &x2, &dxn2, &xq->t[QF_SLOT_MU],
                            &xq->t[QF_SLOT_RSIGMA], &ng, stream);
}

/* One stage; the family does not matter here: each op dispatches on the recipe itself. */
static qf_status qf_ll_stage(qf_ctx_t *ctx, int i, const void *call, void *stream) {
    const qf_ll_call *c = call;
    qf_ln_linear *ll = c->ll;
    qf_ln_linear_grads *g = c->g;
    const char *recipe = c->recipe;
    switch (i) {
    case QF_LL_WEIGHT: /* weights never round stochastically (numerics 2.4): no rng */
        return qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight, NULL, ll->w_scale, NULL,
                           &ll->wq, stream);
    case QF_LL_WEIGHT_BF16:
        return qf_stage_weight_bf16(ctx, recipe, &ll->wq, ll->wq_bf16, "ll->wq_bf16", stream);
    case QF_LL_NORM:
        return qf_quantize(ctx, recipe, QF_ROLE_INPUT, c->x, &ll->norm, ll->x_scale, NULL,
                           &ll->xq, stream);
    case QF_LL_GEMM: {
        const qf_gemm_opts o = qf_weight_opts(&ll->wq_bf16[QF_COPY_ROWWISE]);
        return qf_stage_gemm(ctx, recipe, &ll->xq, QF_COPY_ROWWISE, &ll->wq, QF_COPY_ROWWISE,
                             &ll->bias, c->y, &o, stream);
    }
    case QF_LL_DY: {
        const qf_tensor dy2 = qf_flat2d(c->dy);
        return qf_stage_q_grad(ctx, recipe, &dy2, g->dy_scale, &g->rng, &g->dyq, &g->dbias,
                               stream);
    }
    case QF_LL_DGRAD: {
        const qf_gemm_opts o = qf_weight_opts(&ll->wq_bf16[QF_COPY_COLUMNWISE]);
        return qf_stage_gemm(ctx, recipe, &g->dyq, QF_COPY_ROWWISE, &ll->wq, QF_COPY_COLUMNWISE,
                             NULL, &g->dxn, &o, stream);
    }
    case QF_LL_WGRAD: {
        const qf_gemm_opts o = {.accumulate = g->accumulate_wgrad};
        return qf_stage_gemm(ctx, recipe, &g->dyq, QF_COPY_COLUMNWISE, &ll->xq,
                             QF_COPY_COLUMNWISE, NULL, &g->dweight, &o, stream);
    }
    default:
        return qf_stage_norm_bwd(ctx, recipe, &ll->norm, &ll->xq, c->x, &g->dxn, &g->norm, stream);
    }
}

/* A composition: its stages' names, in order, and the function that runs stage i. */
typedef qf_status (*qf_stage_fn)(qf_ctx_t *ctx, int stage, const void *call, void *stream);
typedef struct qf_stages {
    const char *const *names;
    int n;
    qf_stage_fn run;
    unsigned weights; /* the stages that quantize weights: *weight_changed is cleared after them */
    unsigned gemms;   /* the GEMM stages (qf_stage_times) */
} qf_stages;

qf_status qf_stage_times_attach(qf_ctx_t *ctx, qf_stage_times *t) {
    if (!ctx || !t || ctx->host || ctx->stage_times)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_stage_times_attach: %s",
                            !ctx || !t ? "NULL argument" : ctx->host ? "a host context"
                                                                     : "one is attached");
    memset(t, 0, sizeof *t);
    for (int i = 0; i < 2 * QF_STAGE_TIMES_MAX; i++)
        if (cudaEventCreate(&t->ev[i]) != cudaSuccess) {
            while (i-- > 0)
                cudaEventDestroy(t->ev[i]);
            return qf_set_error(QF_ERR_CUDA, "qf_stage_times_attach: cudaEventCreate failed");
        }
    ctx->stage_times = t;
    return QF_OK;
}

void qf_stage_times_detach(qf_ctx_t *ctx) {
    if (!ctx || !ctx->stage_times)
        return;
    for (int i = 0; i < 2 * QF_STAGE_TIMES_MAX; i++)
        cudaEventDestroy(ctx->stage_times->ev[i]);
    ctx->stage_times = NULL;
}

float qf_stage_times_ms(const qf_stage_times *t, int i) {
    float ms = 0.0f;
    if (i < 0 || i >= t->n || cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]) !=
                                  cudaSuccess)
        return -1.0f;
    return ms;
}

/* Stage i of t on ctx, timed when a qf_stage_times is attached and has room. */
static qf_status qf_stage_timed(qf_ctx_t *ctx, const qf_stages *t, int i, const void *call,
                                void *stream) {
    qf_stage_times *st = ctx->stage_times;
    if (!st || st->n >= QF_STAGE_TIMES_MAX)
        return t->run(ctx, i, call, stream);
    const int k = st->n++;
    st->name[k] = t->names[i], st->is_gemm[k] = (t->gemms & QF_LL_BIT(i)) != 0;
    cudaEventRecord(st->ev[2 * k], (cudaStream_t)stream);
    const qf_status s = t->run(ctx, i, call, stream);
    cudaEventRecord(st->ev[2 * k + 1], (cudaStream_t)stream);
    return s;
}

/* Runs the stages of mask in order (the tensors of the call, tl, checked across them first; NULL:
 * none); after the weight stages, clears *weight_changed.
 * NOTES: "bad input launches nothing" must hold for the composition too, so every stage is first
 * checked against a device-less twin of ctx (the ops validate, then stop before any device work
 * with QF_ERR_NO_DEVICE), and only then run for real. The price is a second pass of host-side
 * argument checks, microseconds per call. */
static qf_status qf_stages_run(const char *op, qf_ctx_t *ctx, const qf_stages *t, unsigned mask,
                               const void *call, qf_tlist *tl, int *weight_changed,
                               void *stream) {
    qf_status s = QF_ERR_NO_DEVICE;
    int i;
    qf_ctx_t twin;
    qf_ctx_twin(ctx, &twin);
    for (i = 0; i < t->n && s == QF_ERR_NO_DEVICE; i++)
        if (mask & QF_LL_BIT(i))
            s = t->run(&twin, i, call, stream);
    qf_ctx_twin_free(&twin);
    if (s != QF_ERR_NO_DEVICE)
        return qf_ll_fail(op, t->names[i - 1], s);
    if (tl) /* each stage's own arguments are right: now those that meet across stages */
        QF_TRY(qf_check_call(op, tl));
    unsigned left = mask & t->weights;
    for (i = 0; i < t->n; i++) {
        if (!(mask & QF_LL_BIT(i)))
            continue;
        if ((s = qf_stage_timed(ctx, t, i, call, stream)) != QF_OK)
            return qf_ll_fail(op, t->names[i], s);
        if (left && !(left &= ~QF_LL_BIT(i)))
            *weight_changed = 0;
    }
    return QF_OK;
}

qf_weight_key qf_weight_key_of(const void *d0, const qf_tensor *kept0, const void *d1,
                               const qf_tensor *kept1, uint64_t version, const qf_recipe *r) {
    qf_weight_key k = {.data = {d0, d1}, .version = version, .recipe = r, .valid = 1};
    const qf_tensor *kept[2] = {kept0, kept1};
    for (int w = 0; w < 2; w++)
        for (int c = 0; kept[w] && c < QF_COPY_COUNT; c++)
            k.kept[w * QF_COPY_COUNT + c] = kept[w][c].data;
    return k;
}

int qf_weights_stale(const qf_weight_key *cached, int changed, const qf_weight_key *now) {
    if (changed < 0) /* the caller quantized the weights itself */
        return 0;
    if (changed || !cached->valid || cached->version != now->version ||
        cached->recipe != now->recipe)
        return 1;
    for (int i = 0; i < 2; i++)
        if (cached->data[i] != now->data[i])
            return 1;
    for (int i = 0; i < 4; i++)
        if (cached->kept[i] != now->kept[i])
            return 1;
    return 0;
}

static const qf_stages qf_ll_stages = {
    qf_ll_stage_names, QF_LL_STAGES, qf_ll_stage,
    QF_LL_BIT(QF_LL_WEIGHT) | QF_LL_BIT(QF_LL_WEIGHT_BF16),
    QF_LL_BIT(QF_LL_GEMM) | QF_LL_BIT(QF_LL_DGRAD) | QF_LL_BIT(QF_LL_WGRAD)};

/* The checks every entry point makes first: non-NULL arguments (named) and a fused norm. */
static qf_status qf_ll_begin(const char *op, qf_ctx_t *ctx, const qf_tensor *x,
                             const qf_ln_linear *ll, const void *out, const char *out_name) {
    qf_clear_error();
    if (!ctx || !ll || !out || !x)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !x ? "x" : !ll ? "ll" : out_name);
    return qf_check_fused_norm(op, "ll->norm.norm", ll->norm.norm);
}

qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_linear_fwd";
    QF_TRY(qf_ll_begin(op, ctx, x, ll, y, "y"));
    QF_TRY(qf_ll_check_dims(op, x, &ll->weight, y, "y"));
    const qf_recipe *r = NULL;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_kept(op, ctx, r, ll->wq_bf16, "ll->wq_bf16"));
    const qf_weight_key key =
        qf_weight_key_of(ll->weight.data, ll->wq_bf16, NULL, NULL, ll->weight_version, r);
    const int stale = qf_weights_stale(&ll->cached, ll->weight_changed, &key);
    const unsigned mask =
        (stale ? QF_LL_BIT(QF_LL_WEIGHT) : 0u) |
        (stale && qf_kept_any(ll->wq_bf16) ? QF_LL_BIT(QF_LL_WEIGHT_BF16) : 0u) |
        QF_LL_BIT(QF_LL_NORM) | QF_LL_BIT(QF_LL_GEMM);
    const qf_ll_call c = {recipe, x, ll, y, NULL, NULL};
    qf_tlist tl;
    qf_ll_tensors(&tl, r, ll, x, y, "y", NULL, mask);
    QF_TRY(qf_stages_run(op, ctx, &qf_ll_stages, mask, &c, &tl, &ll->weight_changed, stream));
    if (stale)
        ll->cached = key;
    return QF_OK;
}

qf_status qf_layernorm_linear_bwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  const qf_tensor *dy, qf_ln_linear *ll, qf_ln_linear_grads *g,
                                  void *stream) {
    static const char op[] = "qf_layernorm_linear_bwd";
    QF_TRY(qf_ll_begin(op, ctx, x, ll, g, "g"));
    if (!dy)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: dy is NULL", op);
    QF_TRY(qf_ll_check_dims(op, x, &ll->weight, dy, "dy"));
    if (g->defer_wgrad != 0 && g->defer_wgrad != 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: g->defer_wgrad is %d; expected 0 (wgrad in "
                            "this call) or 1 (deferred to qf_layernorm_linear_wgrad)", op,
                            g->defer_wgrad);
    const qf_recipe *r = NULL;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_kept(op, ctx, r, ll->wq_bf16, "ll->wq_bf16"));
    const unsigned mask = QF_LL_BIT(QF_LL_DY) | QF_LL_BIT(QF_LL_DGRAD) |
                          (g->defer_wgrad ? 0u : QF_LL_BIT(QF_LL_WGRAD)) |
                          QF_LL_BIT(QF_LL_NORM_BWD);
    const qf_ll_call c = {recipe, x, ll, NULL, dy, g};
    qf_tlist tl;
    qf_ll_tensors(&tl, r, ll, x, dy, "dy", g, mask);
    return qf_stages_run(op, ctx, &qf_ll_stages, mask, &c, &tl, &ll->weight_changed, stream);
}

qf_status qf_layernorm_linear_wgrad(qf_ctx_t *ctx, const char *recipe, qf_ln_linear *ll,
                                    qf_ln_linear_grads *g, void *stream) {
    static const char op[] = "qf_layernorm_linear_wgrad";
    qf_clear_error();
    if (!ctx || !ll || !g)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !ll ? "ll" : "g");
    const qf_ll_call c = {recipe, NULL, ll, NULL, NULL, g};
    return qf_stages_run(op, ctx, &qf_ll_stages, QF_LL_BIT(QF_LL_WGRAD), &c, NULL,
                         &ll->weight_changed, stream);
}

/* {===================================================================== LayerNorm + MLP */

enum {
    QF_MLP_W1,
    QF_MLP_W2,
    QF_MLP_W1_BF16,
    QF_MLP_W2_BF16,
    QF_MLP_NORM,
    QF_MLP_FC1,
    QF_MLP_ACT,
    QF_MLP_AQ,
    QF_MLP_ACT_Q,
    QF_MLP_ACT_AMAX,
    QF_MLP_AQ_CAST,
    QF_MLP_FC2,
    QF_MLP_DY,
    QF_MLP_DGRAD2,
    QF_MLP_WGRAD2,
    QF_MLP_ACT_BWD,
    QF_MLP_DH,
    QF_MLP_DH_ACT,
    QF_MLP_DGRAD1,
    QF_MLP_WGRAD1,
    QF_MLP_NORM_BWD,
    QF_MLP_STAGES
};

static const char *const qf_mlp_stage_names[] = {
    [QF_MLP_W1] = "quantizing mlp->w1 into mlp->w1q (qf_quantize)",
    [QF_MLP_W2] = "quantizing mlp->w2 into mlp->w2q (qf_quantize)",
    [QF_MLP_W1_BF16] = "dequantizing mlp->w1q into mlp->w1q_bf16 (qf_dequantize)",
    [QF_MLP_W2_BF16] = "dequantizing mlp->w2q into mlp->w2q_bf16 (qf_dequantize)",
    [QF_MLP_NORM] = "norm + quantize of x into mlp->xq (qf_quantize)",
    [QF_MLP_FC1] = "fc1 GEMM of mlp->xq and mlp->w1q into mlp->h (qf_gemm)",
    [QF_MLP_ACT] = "activation of mlp->h into mlp->a (qf_activation_fwd)",
    [QF_MLP_AQ] = "quantizing mlp->a into mlp->aq (qf_quantize)",
    [QF_MLP_ACT_Q] = "activation of mlp->h quantized into mlp->aq (qf_quantize_act)",
    [QF_MLP_ACT_AMAX] = "activation of mlp->h into mlp->a, its amax into mlp->aq's "
                        "(qf_activation_amax)",
    [QF_MLP_AQ_CAST] = "quantizing mlp->a into mlp->aq from that amax (qf_quantize_cast)",
    [QF_MLP_FC2] = "fc2 GEMM of mlp->aq and mlp->w2q into y (qf_gemm)",
    [QF_MLP_DY] = "quantizing dy into g->dyq (qf_quantize; with g->db2, qf_quantize_dbias)",
    [QF_MLP_DGRAD2] = "fc2 dgrad of g->dyq and mlp->w2q (columnwise) into g->da (qf_gemm)",
    [QF_MLP_WGRAD2] = "fc2 wgrad of g->dyq and mlp->aq (columnwise) into g->dw2 (qf_gemm_ex)",
    [QF_MLP_ACT_BWD] = "activation backward of g->da into g->dh (qf_activation_bwd)",
    [QF_MLP_DH] = "quantizing g->dh into g->dhq (qf_quantize; with g->db1, qf_quantize_dbias)",
    [QF_MLP_DH_ACT] = "activation backward of g->da quantized into g->dhq, with db1 "
                      "(qf_quantize_dbias_act)",
    [QF_MLP_DGRAD1] = "fc1 dgrad of g->dhq and mlp->w1q (columnwise) into g->dxn (qf_gemm)",
    [QF_MLP_WGRAD1] = "fc1 wgrad of g->dhq and mlp->xq (columnwise) into g->dw1 (qf_gemm_ex)",
    [QF_MLP_NORM_BWD] = "norm backward of g->dxn into g->norm (qf_norm_backward)",
};
_Static_assert(sizeof qf_mlp_stage_names / sizeof qf_mlp_stage_names[0] == QF_MLP_STAGES,
               "qf_mlp_stage_names");

typedef struct qf_mlp_call {
    const char *recipe;
    const qf_tensor *x;
    qf_ln_mlp *mlp;
    qf_tensor *y;
    const qf_tensor *dy;
    qf_ln_mlp_grads *g;
} qf_mlp_call;

static qf_status qf_mlp_stage(qf_ctx_t *ctx, int i, const void *call, void *stream) {
    const qf_mlp_call *c = call;
    qf_ln_mlp *m = c->mlp;
    qf_ln_mlp_grads *g = c->g;
    const char *r = c->recipe;
    const qf_copy R = QF_COPY_ROWWISE, C = QF_COPY_COLUMNWISE;
    const qf_gemm_opts acc = {.accumulate = g ? g->accumulate_wgrad : 0};
    switch (i) {
    case QF_MLP_W1:
        return qf_quantize(ctx, r, QF_ROLE_WEIGHT, &m->w1, NULL, m->w1_scale, NULL, &m->w1q,
                           stream);
    case QF_MLP_W2:
        return qf_quantize(ctx, r, QF_ROLE_WEIGHT, &m->w2, NULL, m->w2_scale, NULL, &m->w2q,
                           stream);
    case QF_MLP_W1_BF16:
        return qf_stage_weight_bf16(ctx, r, &m->w1q, m->w1q_bf16, "mlp->w1q_bf16", stream);
    case QF_MLP_W2_BF16:
        return qf_stage_weight_bf16(ctx, r, &m->w2q, m->w2q_bf16, "mlp->w2q_bf16", stream);
    case QF_MLP_NORM:
        return qf_quantize(ctx, r, QF_ROLE_INPUT, c->x, &m->norm, m->x_scale, NULL, &m->xq,
                           stream);
    case QF_MLP_FC1: {
        const qf_gemm_opts o = qf_weight_opts(&m->w1q_bf16[R]);
        return qf_stage_gemm(ctx, r, &m->xq, R, &m->w1q, R, &m->b1, &m->h, &o, stream);
    }
    case QF_MLP_ACT: {
        const qf_tensor h = qf_flat2d(&m->h);
        qf_tensor a = qf_flat2d(&m->a);
        return qf_activation_fwd(ctx, r, m->act, &h, &a, stream);
    }
    case QF_MLP_AQ: {
        const qf_tensor a = qf_flat2d(&m->a);
        return qf_quantize(ctx, r, QF_ROLE_INPUT, &a, NULL, m->a_scale, NULL, &m->aq, stream);
    }
    case QF_MLP_ACT_Q: {
        const qf_tensor h = qf_flat2d(&m->h);
        return qf_quantize_act(ctx, r, m->act, &h, NULL, m->a_scale, NULL, &m->aq, stream);
    }
    case QF_MLP_ACT_AMAX: {
        const qf_tensor h = qf_flat2d(&m->h);
        qf_tensor a = qf_flat2d(&m->a);
        return qf_activation_amax(ctx, r, m->act, &h, NULL, &a, &m->aq.t[QF_SLOT_AMAX], stream);
    }
    case QF_MLP_AQ_CAST: {
        const qf_tensor a = qf_flat2d(&m->a);
        return qf_quantize_cast(ctx, r, QF_ROLE_INPUT, &a, &m->aq, stream);
    }
    case QF_MLP_FC2: {
        const qf_gemm_opts o = qf_weight_opts(&m->w2q_bf16[R]);
        return qf_stage_gemm(ctx, r, &m->aq, R, &m->w2q, R, &m->b2, c->y, &o, stream);
    }
    case QF_MLP_DY: {
        const qf_tensor dy = qf_flat2d(c->dy);
        return qf_stage_q_grad(ctx, r, &dy, g->dy_scale, &g->rng_dy, &g->dyq, &g->db2, stream);
    }
    case QF_MLP_DGRAD2: {
        const qf_gemm_opts o = qf_weight_opts(&m->w2q_bf16[C]);
        return qf_stage_gemm(ctx, r, &g->dyq, R, &m->w2q, C, NULL, &g->da, &o, stream);
    }
    case QF_MLP_WGRAD2:
        return qf_stage_gemm(ctx, r, &g->dyq, C, &m->aq, C, NULL, &g->dw2, &acc, stream);
    case QF_MLP_ACT_BWD: {
        const qf_tensor h = qf_flat2d(&m->h), da = qf_flat2d(&g->da);
        qf_tensor dh = qf_flat2d(&g->dh);
        return qf_activation_bwd(ctx, r, m->act, &h, &da, &dh, stream);
    }
    case QF_MLP_DH: {
        const qf_tensor dh = qf_flat2d(&g->dh);
        return qf_stage_q_grad(ctx, r, &dh, g->dh_scale, &g->rng_dh, &g->dhq, &g->db1, stream);
    }
    case QF_MLP_DH_ACT: {
        const qf_tensor h = qf_flat2d(&m->h), da = qf_flat2d(&g->da);
        if (!g->db1.data)
            return qf_quantize_act(ctx, r, m->act, &h, &da, g->dh_scale, &g->rng_dh, &g->dhq,
                                   stream);
        return qf_quantize_dbias_act(ctx, r, m->act, &h, &da, g->dh_scale, &g->rng_dh, &g->dhq,
                                     &g->db1, stream);
    }
    case QF_MLP_DGRAD1: {
        const qf_gemm_opts o = qf_weight_opts(&m->w1q_bf16[C]);
        return qf_stage_gemm(ctx, r, &g->dhq, R, &m->w1q, C, NULL, &g->dxn, &o, stream);
    }
    case QF_MLP_WGRAD1:
        return qf_stage_gemm(ctx, r, &g->dhq, C, &m->xq, C, NULL, &g->dw1, &acc, stream);
    default:
        return qf_stage_norm_bwd(ctx, r, &m->norm, &m->xq, c->x, &g->dxn, &g->norm, stream);
    }
}

/* The tensors of a LayerNorm + MLP call running the stages of mask, as qf_ll_tensors: the
 * forward writes y, mlp->xq, h, a (where a stage writes it), aq, and the weights' copies where
 * their stages run; the backward g's (dh where a stage writes it), where dh may be da's or h's
 * buffer under a non-gated activation (qf_activation_bwd in place; nothing after it reads
 * them). */
static void qf_mlp_tensors(qf_tlist *l, const qf_recipe *r, const qf_ln_mlp *m,
                           const qf_tensor *x, const qf_tensor *out, const char *out_name,
                           const qf_ln_mlp_grads *g, unsigned mask) {
    const int fwd = g == NULL, W = QF_TL_WRITTEN, R = QF_TL_READ, F = fwd ? W : R;
    const int w_q = (mask & QF_LL_BIT(QF_MLP_W1)) != 0, Fw = w_q ? W : R;
    /* x and the weights passed qf_check_activation (qf_mlp_begin): their 2-D views' rows */
    const int64_t K = x->dims[x->ndim - 1], M = qf_flat2d(x).dims[0];
    const int64_t Fin = qf_flat2d(&m->w1).dims[0], N = qf_flat2d(&m->w2).dims[0];
    const int64_t F2 = m->w2.dims[m->w2.ndim - 1];
    const qf_role in = QF_ROLE_INPUT, wt = QF_ROLE_WEIGHT, gr = QF_ROLE_GRAD;
    const qf_norm none = QF_NORM_NONE;
    l->n = l->n_scales = 0;
    qf_tl_add_kept(l, m->w1q_bf16, "mlp->w1q_bf16");
    qf_tl_add_kept(l, m->w2q_bf16, "mlp->w2q_bf16");
    qf_tl_add(l, x, "x", R), qf_tl_add(l, out, out_name, F);
    qf_tl_add(l, &m->w1, "mlp->w1", R), qf_tl_add(l, &m->b1, "mlp->b1", R);
    qf_tl_add(l, &m->w2, "mlp->w2", R), qf_tl_add(l, &m->b2, "mlp->b2", R);
    qf_tl_add_norm(l, &m->norm, "mlp->norm.gamma", "mlp->norm.beta");
    qf_tl_add_q(l, r, in, m->norm.norm, M, K, &m->xq, "mlp->xq", F);
    qf_tl_add_q(l, r, in, none, M, F2, &m->aq, "mlp->aq", F);
    qf_tl_add_q(l, r, wt, none, Fin, K, &m->w1q, "mlp->w1q", Fw);
    qf_tl_add_q(l, r, wt, none, N, F2, &m->w2q, "mlp->w2q", Fw);
    const int gated = m->act == QF_ACT_SWIGLU;
    const int n_h = l->n;
    qf_tl_add(l, &m->h, "mlp->h", F);
    if (l->n > n_h && !fwd && !gated)
        l->e[n_h].same = 2u;
    if (fwd) {
        if (mask & (QF_LL_BIT(QF_MLP_ACT) | QF_LL_BIT(QF_MLP_ACT_AMAX)))
            qf_tl_add(l, &m->a, "mlp->a", W);
        qf_tl_add_scale(l, r, m->x_scale, "mlp->x_scale");
        qf_tl_add_scale(l, r, m->a_scale, "mlp->a_scale");
        if (w_q) {
            qf_tl_add_scale(l, r, m->w1_scale, "mlp->w1_scale");
            qf_tl_add_scale(l, r, m->w2_scale, "mlp->w2_scale");
        }
        return;
    }
    qf_tl_add_scale(l, r, g->dy_scale, "g->dy_scale");
    qf_tl_add_scale(l, r, g->dh_scale, "g->dh_scale");
    qf_tl_add_q(l, r, gr, none, M, N, &g->dyq, "g->dyq", W);
    qf_tl_add_q(l, r, gr, none, M, Fin, &g->dhq, "g->dhq", W);
    const int n_da = l->n;
    qf_tl_add(l, &g->da, "g->da", W);
    if (l->n > n_da && !gated)
        l->e[n_da].same = 1u;
    if (mask & QF_LL_BIT(QF_MLP_ACT_BWD)) {
        const int n_dh = l->n;
        qf_tl_add(l, &g->dh, "g->dh", W);
        if (l->n > n_dh && !gated)
            l->e[n_dh].same = 3u; /* da's (1) or h's (2) */
    }
    qf_tl_add(l, &g->dxn, "g->dxn", W), qf_tl_add(l, &g->dw1, "g->dw1", W);
    qf_tl_add(l, &g->dw2, "g->dw2", W), qf_tl_add(l, &g->db1, "g->db1", W);
    qf_tl_add(l, &g->db2, "g->db2", W), qf_tl_add(l, &g->norm.dx, "g->norm.dx", W);
    qf_tl_add(l, &g->norm.dgamma, "g->norm.dgamma", W);
    if (m->norm.norm == QF_NORM_LAYERNORM)
        qf_tl_add(l, &g->norm.dbeta, "g->norm.dbeta", W);
}

static const qf_stages qf_mlp_stages = {
    qf_mlp_stage_names, QF_MLP_STAGES, qf_mlp_stage,
    QF_LL_BIT(QF_MLP_W1) | QF_LL_BIT(QF_MLP_W2) | QF_LL_BIT(QF_MLP_W1_BF16) |
        QF_LL_BIT(QF_MLP_W2_BF16),
    QF_LL_BIT(QF_MLP_FC1) | QF_LL_BIT(QF_MLP_FC2) | QF_LL_BIT(QF_MLP_DGRAD2) |
        QF_LL_BIT(QF_MLP_WGRAD2) | QF_LL_BIT(QF_MLP_DGRAD1) | QF_LL_BIT(QF_MLP_WGRAD1)};

/* The checks the MLP's entry points make first: non-NULL arguments, a fused norm, W1's K, h and
 * a in bf16, and out (y or dy) [..., N] with W2's N and x's leading dims. */
static qf_status qf_mlp_begin(const char *op, qf_ctx_t *ctx, const qf_tensor *x,
                              const qf_ln_mlp *mlp, const qf_tensor *out, const char *out_name,
                              const void *g) {
    qf_clear_error();
    if (!ctx || !x || !mlp || !out || !g)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op,
                            !ctx ? "ctx" : !x ? "x" : !mlp ? "mlp" : !out ? out_name : "g");
    QF_TRY(qf_check_fused_norm(op, "mlp->norm.norm", mlp->norm.norm));
    int64_t M, K, F1, K1;
    QF_TRY(qf_check_activation(op, "x", x, &M, &K));
    QF_TRY(qf_check_activation(op, "mlp->w1", &mlp->w1, &F1, &K1));
    if (K1 != K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: mlp->w1 is [%lld, %lld]; its last dimension "
                            "must equal x's K = %lld", op, (long long)F1, (long long)K1,
                            (long long)K);
    if (mlp->h.dtype != QF_DTYPE_BF16 || mlp->a.dtype != QF_DTYPE_BF16)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: mlp->%s.dtype is %s; the MLP keeps fc1's "
                            "output h and the activation a in bf16", op,
                            mlp->h.dtype != QF_DTYPE_BF16 ? "h" : "a",
                            qf_dtype_name(mlp->h.dtype != QF_DTYPE_BF16 ? mlp->h.dtype
                                                                        : mlp->a.dtype));
    int64_t N2, F2;
    QF_TRY(qf_check_activation(op, "mlp->w2", &mlp->w2, &N2, &F2));
    return qf_check_rows_of(op, x, out, out_name, N2, "mlp->w2's rows");
}

/* 1 when the forward quantizes act(h) of [M, F] in one kernel and the backward q(dh) with db1
 * (the family's act_tile divides M and F): a and dh are then not written. */
static int qf_mlp_act_fused(const qf_recipe *r, int64_t M, int64_t F) {
    const unsigned t = qf_families[r->family].act_tile;
    return t > 0 && M % t == 0 && F % t == 0;
}

/* qf_mlp_act_fused for a call checked by qf_mlp_begin: M rows of x, F = mlp->w2's width. */
static int qf_mlp_fused(const qf_recipe *r, const qf_tensor *x, const qf_ln_mlp *mlp) {
    const qf_tensor x2 = qf_flat2d(x);
    return qf_mlp_act_fused(r, x2.dims[0], mlp->w2.dims[mlp->w2.ndim - 1]);
}

/* The forward's activation stages: a and its amax in one kernel, then the cast (the family's
 * act_amax); q(act(h)) in one kernel (qf_mlp_act_fused); else a, then its quantization. */
static unsigned qf_mlp_act_stages(const qf_recipe *r, int fused) {
    if (qf_families[r->family].act_amax)
        return QF_LL_BIT(QF_MLP_ACT_AMAX) | QF_LL_BIT(QF_MLP_AQ_CAST);
    return fused ? QF_LL_BIT(QF_MLP_ACT_Q) : QF_LL_BIT(QF_MLP_ACT) | QF_LL_BIT(QF_MLP_AQ);
}

int qf_layernorm_mlp_writes_a(const qf_ctx_t *ctx, const char *recipe, int64_t M, int64_t F) {
    static const char op[] = "qf_layernorm_mlp_writes_a";
    qf_clear_error();
    const qf_recipe *r = NULL;
    qf_status s = ctx ? qf_check_recipe(op, ctx, recipe, &r)
                      : qf_set_error(QF_ERR_INVALID_ARG, "%s: ctx is NULL", op);
    if (s == QF_OK && (M < 1 || F < 1))
        s = qf_set_error(QF_ERR_INVALID_ARG, "%s: M = %lld and F = %lld must be positive", op,
                         (long long)M, (long long)F);
    if (s != QF_OK)
        return -(int)s;
    return (qf_mlp_act_stages(r, qf_mlp_act_fused(r, M, F)) & QF_LL_BIT(QF_MLP_ACT_Q)) == 0;
}

qf_status qf_layernorm_mlp_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                               qf_ln_mlp *mlp, qf_tensor *y, void *stream) {
    static const char op[] = "qf_layernorm_mlp_fwd";
    QF_TRY(qf_mlp_begin(op, ctx, x, mlp, y, "y", y));
    const qf_recipe *r = NULL;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_kept(op, ctx, r, mlp->w1q_bf16, "mlp->w1q_bf16"));
    QF_TRY(qf_check_kept(op, ctx, r, mlp->w2q_bf16, "mlp->w2q_bf16"));
    const qf_weight_key key = qf_weight_key_of(mlp->w1.data, mlp->w1q_bf16, mlp->w2.data,
                                               mlp->w2q_bf16, mlp->weight_version, r);
    const int stale = qf_weights_stale(&mlp->cached, mlp->weight_changed, &key);
    const unsigned w = QF_LL_BIT(QF_MLP_W1) | QF_LL_BIT(QF_MLP_W2) |
                       (qf_kept_any(mlp->w1q_bf16) ? QF_LL_BIT(QF_MLP_W1_BF16) : 0u) |
                       (qf_kept_any(mlp->w2q_bf16) ? QF_LL_BIT(QF_MLP_W2_BF16) : 0u);
    const unsigned act = qf_mlp_act_stages(r, qf_mlp_fused(r, x, mlp));
    const unsigned mask = (stale ? w : 0u) | QF_LL_BIT(QF_MLP_NORM) | QF_LL_BIT(QF_MLP_FC1) |
                          act | QF_LL_BIT(QF_MLP_FC2);
    const qf_mlp_call c = {recipe, x, mlp, y, NULL, NULL};
    qf_tlist tl;
    qf_mlp_tensors(&tl, r, mlp, x, y, "y", NULL, mask);
    QF_TRY(qf_stages_run(op, ctx, &qf_mlp_stages, mask, &c, &tl, &mlp->weight_changed, stream));
    if (stale)
        mlp->cached = key;
    return QF_OK;
}

qf_status qf_layernorm_mlp_bwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                               const qf_tensor *dy, qf_ln_mlp *mlp, qf_ln_mlp_grads *g,
                               void *stream) {
    static const char op[] = "qf_layernorm_mlp_bwd";
    QF_TRY(qf_mlp_begin(op, ctx, x, mlp, dy, "dy", g));
    const qf_recipe *r = NULL;
    QF_TRY(qf_check_recipe(op, ctx, recipe, &r));
    QF_TRY(qf_check_kept(op, ctx, r, mlp->w1q_bf16, "mlp->w1q_bf16"));
    QF_TRY(qf_check_kept(op, ctx, r, mlp->w2q_bf16, "mlp->w2q_bf16"));
    /* dh and its quantization with db1: in one kernel, dh never stored (qf_mlp_fused); else dh,
     * then q(dh) */
    const unsigned dh = qf_mlp_fused(r, x, mlp) ? QF_LL_BIT(QF_MLP_DH_ACT)
                                                : QF_LL_BIT(QF_MLP_ACT_BWD) | QF_LL_BIT(QF_MLP_DH);
    const unsigned mask = QF_LL_BIT(QF_MLP_DY) | QF_LL_BIT(QF_MLP_DGRAD2) |
                          QF_LL_BIT(QF_MLP_WGRAD2) | dh | QF_LL_BIT(QF_MLP_DGRAD1) |
                          QF_LL_BIT(QF_MLP_WGRAD1) | QF_LL_BIT(QF_MLP_NORM_BWD);
    const qf_mlp_call c = {recipe, x, mlp, NULL, dy, g};
    qf_tlist tl;
    qf_mlp_tensors(&tl, r, mlp, x, dy, "dy", g, mask);
    return qf_stages_run(op, ctx, &qf_mlp_stages, mask, &c, &tl, &mlp->weight_changed, stream);
}

/* =====================================================================} */
