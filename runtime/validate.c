/* validate.c: argument and buffer checks for the ops (DESIGN "Errors"). */
#include "validate.h"

#include "ctx.h"
#include "recipe_file.h"
#include "family.h"
#include "names.h"
#include "qf_arch.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#define QF_BUFFER_ALIGN 16

static int qf_is_hp_dtype(qf_dtype dt) {
    return dt == QF_DTYPE_BF16 || dt == QF_DTYPE_FP16 || dt == QF_DTYPE_FP32;
}

qf_status qf_check_tensor_struct(const char *op, const char *arg, const qf_tensor *t) {
    if (!t)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, arg);
    if (!t->data)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.data is NULL", op, arg);
    if (t->ndim < 1 || t->ndim > QF_MAX_DIMS)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.ndim is %d; expected 1..%d", op, arg,
                            t->ndim, QF_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->dims[i] < 1)
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dims[%d] is %lld; expected >= 1", op,
                                arg, i, (long long)t->dims[i]);
    if ((unsigned)t->dtype >= QF_DTYPE_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype %d is not a qf_dtype", op, arg,
                            (int)t->dtype);
    const int64_t n = qf_tensor_numel(t);
    if (n < 0 || n > (INT64_MAX >> 4)) /* so that bytes and padded sizes fit in int64_t too */
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has more than 2^59 elements (its dims' "
                            "product overflows)", op, arg);
    return QF_OK;
}

qf_status qf_check_activation(const char *op, const char *arg, const qf_tensor *t, int64_t *M,
                              int64_t *K) {
    QF_TRY(qf_check_tensor_struct(op, arg, t));
    if (!qf_is_hp_dtype(t->dtype))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; expected bf16, fp16 or fp32",
                            op, arg, qf_dtype_name(t->dtype));
    if ((uintptr_t)t->data % qf_dtype_size(t->dtype))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.data %p is not aligned to its %zu-byte "
                            "elements", op, arg, t->data, qf_dtype_size(t->dtype));
    *K = t->dims[t->ndim - 1];
    *M = qf_tensor_numel(t) / *K;
    return QF_OK;
}

qf_status qf_check_buffer(const char *op, const char *arg, const qf_tensor *t, const qf_shape *s) {
    QF_TRY(qf_check_tensor_struct(op, arg, t));
    if (t->dtype != s->dtype)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; expected %s", op, arg,
                            qf_dtype_name(t->dtype), qf_dtype_name(s->dtype));
    int64_t want = 1;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] < 0 || (s->dims[i] > 0 && want > INT64_MAX / s->dims[i]))
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s would need more than 2^63 elements "
                                "for this operand's size; the sizes are too large", op, arg);
        want *= s->dims[i];
    }
    int64_t have = qf_tensor_numel(t);
    int64_t last = s->dims[s->ndim - 1];
    if (have != want || (s->ndim == 2 && t->dims[t->ndim - 1] != last))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has %lld elements (last dim %lld); the "
                            "shape function requires %lld (last dim %lld)", op, arg,
                            (long long)have, (long long)t->dims[t->ndim - 1], (long long)want,
                            (long long)last);
    /* Matrices are stored with 4-byte vectors and read by cuBLASLt: 16-byte alignment. Vectors
     * (statistics, amax and scale slots that may sit inside a larger array) need element
     * alignment only. */
    size_t align = s->ndim >= 2 ? QF_BUFFER_ALIGN : qf_dtype_size(s->dtype);
    if (align && (uintptr_t)t->data % align)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.data %p is not %zu-byte aligned", op, arg,
                            t->data, align);
    return QF_OK;
}

void qf_tensor_span(const qf_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    /* an E2M1 tensor's dims count its bytes (two values per byte) */
    const size_t e = qf_dtype_size(t->dtype);
    const int64_t n = qf_tensor_numel(t);
    uintptr_t bytes;
    *lo = (uintptr_t)t->data;
    if (n < 0 || __builtin_mul_overflow((uintptr_t)n, (uintptr_t)(e ? e : 1), &bytes) ||
        __builtin_add_overflow(*lo, bytes, hi))
        *hi = UINTPTR_MAX; /* past the address space: it overlaps whatever lies after it */
}

qf_status qf_check_disjoint(const char *op, const char *arg_a, const qf_tensor *a,
                            const char *arg_b, const qf_tensor *b) {
    if (!a || !b || !a->data || !b->data)
        return QF_OK;
    uintptr_t pa, pb, ea, eb;
    qf_tensor_span(a, &pa, &ea), qf_tensor_span(b, &pb, &eb);
    const uintptr_t na = ea - pa, nb = eb - pb;
    if (pa < eb && pb < ea)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s (%p, %zu bytes) and %s (%p, %zu bytes) "
                            "overlap; an output shares memory with no other argument", op, arg_a,
                            a->data, (size_t)na, arg_b, b->data, (size_t)nb);
    return QF_OK;
}

qf_status qf_check_apart(const char *op, const char *out_arg, const qf_tensor *out,
                         const qf_inputs *in) {
    for (int i = 0; in && i < in->n; i++)
        QF_TRY(qf_check_disjoint(op, out_arg, out, in->name[i], in->t[i]));
    return QF_OK;
}

qf_status qf_check_slots(const char *op, const qf_shape *shapes, int n, const char *arg,
                         const qf_quantized *q, const qf_inputs *in) {
    char names[QF_SLOT_COUNT][64];
    int slots[QF_SLOT_COUNT], m = 0;
    for (int i = 0; i < n; i++) {
        const int slot = qf_slot_from_name(shapes[i].name);
        if (slot < 0)
            return qf_set_error(QF_ERR_INTERNAL, "%s: output '%s' of the shape function names no "
                                "qf_slot", op, shapes[i].name);
        char name[64];
        snprintf(name, sizeof name, "%s->%s", arg, shapes[i].name);
        QF_TRY(qf_check_buffer(op, name, &q->t[slot], &shapes[i]));
        if (m < QF_SLOT_COUNT) {
            slots[m] = slot;
            snprintf(names[m++], sizeof names[0], "%s", name);
        }
    }
    for (int i = 0; i < m; i++) { /* checked above: every one has data */
        for (int j = i + 1; j < m; j++)
            QF_TRY(qf_check_disjoint(op, names[i], &q->t[slots[i]], names[j], &q->t[slots[j]]));
        QF_TRY(qf_check_apart(op, names[i], &q->t[slots[i]], in));
    }
    return QF_OK;
}

qf_status qf_check_vector(const char *op, const char *arg, const qf_tensor *t, int64_t K,
                          qf_dtype dt) {
    QF_TRY(qf_check_tensor_struct(op, arg, t));
    if (t->dtype != dt && t->dtype != QF_DTYPE_FP32)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; expected %s%s", op, arg,
                            qf_dtype_name(t->dtype), qf_dtype_name(dt),
                            dt == QF_DTYPE_FP32 ? "" : " or fp32");
    if (t->ndim != 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.ndim is %d; expected 1 ([K] = [%lld])", op,
                            arg, t->ndim, (long long)K);
    if (qf_tensor_numel(t) != K)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has %lld elements; expected K = %lld", op,
                            arg, (long long)qf_tensor_numel(t), (long long)K);
    if ((uintptr_t)t->data % qf_dtype_size(t->dtype))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.data is not element-aligned", op, arg);
    return QF_OK;
}

/* The name of value v of enum kind, or "?" when v is out of range (for messages). */
static const char *qf_name_or_q(qf_enum kind, int v) {
    const char *s = qf_enum_name(kind, v);
    return s ? s : "?";
}

qf_status qf_query_shapes(const char *op, const qf_recipe *r, const qf_shape_query *q,
                          qf_shape *out, int cap, int *n) {
    *n = qf_recipe_shapes(r, q, out, cap); /* generated, or the family table of a loaded recipe */
    char why[192];
    if (*n == -1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe '%s' rejects the shape query (op %s, "
                            "role %s, norm %s, dtype %s, M=%lld N=%lld K=%lld outputs=%u): %s",
                            op, r->name, qf_name_or_q(QF_ENUM_OP, (int)q->op),
                            qf_name_or_q(QF_ENUM_ROLE, (int)q->role),
                            qf_name_or_q(QF_ENUM_NORM, (int)q->norm), qf_dtype_name(q->dtype),
                            (long long)q->M, (long long)q->N, (long long)q->K, q->outputs,
                            qf_family_query_why(r, q, why, sizeof why));
    if (*n < 0)
        return qf_set_error(QF_ERR_INTERNAL, "%s: shape function of '%s' needs more than %d slots",
                            op, r->name, cap);
    return QF_OK;
}

/* qf_recipe_find, its message prefixed with the op that asked ("qf_gemm: recipe 'x' not
 * found ..."). */
static qf_status qf_recipe_find_for(const char *op, const char *recipe, const qf_recipe **r) {
    const qf_status s = qf_recipe_find(recipe, r);
    if (s != QF_OK) {
        static _Thread_local char msg[8192];
        snprintf(msg, sizeof msg, "%s", qf_last_error());
        qf_set_error(s, "%s: %s", op, msg);
    }
    return s;
}

qf_status qf_check_recipe(const char *op, const qf_ctx_t *ctx, const char *recipe,
                          const qf_recipe **r) {
    qf_clear_error();
    if (!ctx || !recipe)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, !ctx ? "ctx" : "recipe");
    return qf_recipe_find_for(op, recipe, r);
}

qf_status qf_family_unsupported(const char *op, const qf_recipe *r) {
    return qf_set_error(QF_ERR_UNSUPPORTED, "%s: not implemented scaling mode: %s (recipe '%s')",
                        op, qf_family_name(r->family), r->name);
}

qf_status qf_check_norm_args(const char *op, const qf_norm_desc *nd, const qf_tensor *x,
                             int64_t K, const qf_quantized *out) {
    if ((unsigned)nd->norm >= QF_NORM_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: norm->norm %d is not QF_NORM_NONE, "
                            "QF_NORM_LAYERNORM or QF_NORM_RMSNORM", op, (int)nd->norm);
    if (nd->norm == QF_NORM_NONE)
        return QF_OK;
    QF_TRY(qf_check_zcg(op, nd));
    if (!(nd->eps >= 0.0f) || isinf(nd->eps))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: eps must be finite and >= 0 (got %g)", op,
                            (double)nd->eps);
    QF_TRY(qf_check_vector(op, "gamma", &nd->gamma, K, x->dtype));
    if (nd->norm == QF_NORM_LAYERNORM) {
        QF_TRY(qf_check_vector(op, "beta", &nd->beta, K, x->dtype));
        if (nd->beta.dtype != nd->gamma.dtype)
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: beta.dtype %s differs from gamma.dtype %s",
                                op, qf_dtype_name(nd->beta.dtype), qf_dtype_name(nd->gamma.dtype));
    } else if (nd->beta.data || out->t[QF_SLOT_MU].data) {
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: rmsnorm takes no beta and produces no mu; "
                            "leave norm->beta.data and out->mu.data NULL", op);
    }
    return QF_OK;
}

qf_status qf_check_zcg(const char *op, const qf_norm_desc *nd) {
    if (nd->zero_centered_gamma != 0 && nd->zero_centered_gamma != 1)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: norm->zero_centered_gamma %d is not 0 or 1",
                            op, nd->zero_centered_gamma);
    return QF_OK;
}

qf_status qf_check_fused_norm(const char *op, const char *arg, qf_norm norm) {
    if (norm != QF_NORM_LAYERNORM && norm != QF_NORM_RMSNORM)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s %d is not QF_NORM_LAYERNORM or "
                            "QF_NORM_RMSNORM", op, arg, (int)norm);
    return QF_OK;
}

qf_status qf_check_act_input(const char *op, qf_activation act, const qf_tensor *h,
                             int64_t *M, int64_t *Fin, int64_t *F) {
    if ((unsigned)act >= QF_ACT_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: act %d is not a qf_activation", op,
                            (int)act);
    QF_TRY(qf_check_activation(op, "h", h, M, Fin));
    const int gated = act == QF_ACT_SWIGLU;
    if (gated && *Fin % 2)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: h's last dimension %lld is odd; swiglu takes "
                            "h = [h1 | h2] of [M, 2F]", op, (long long)*Fin);
    *F = gated ? *Fin / 2 : *Fin;
    return QF_OK;
}

qf_status qf_check_grad_input(const char *op, const char *arg, const qf_tensor *t, int64_t rows,
                              int64_t cols, const char *what, const char *dims) {
    if (!t)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL", op, arg);
    QF_TRY(qf_check_tensor_struct(op, arg, t)); /* an out-of-range dtype named as a number */
    if (t->dtype != QF_DTYPE_BF16 && t->dtype != QF_DTYPE_FP32)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.dtype is %s; %s is bf16 or fp32 %s", op,
                            arg, qf_dtype_name(t->dtype), what, dims);
    const qf_shape s = {arg, t->dtype, 2, {rows, cols}, 0};
    const qf_status st = qf_check_buffer(op, arg, t, &s);
    if (st == QF_OK || t->ndim < 1 || t->ndim > QF_MAX_DIMS)
        return st;
    const int64_t last = t->dims[t->ndim - 1], n = qf_tensor_numel(t);
    if (n <= 0 || (n == rows * cols && last == cols))
        return st; /* not a shape mismatch: the buffer check's own message */
    /* a shape mismatch: say the expected shape in the caller's terms */
    return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s has %lld elements (last dim %lld); %s is %s "
                        "= [%lld, %lld]", op, arg, (long long)n,
                        (long long)last, what, dims, (long long)rows, (long long)cols);
}

unsigned qf_outputs_of(const qf_quantized *out) {
    return (out->t[QF_SLOT_ROWWISE_DATA].data ? QF_OUT_ROWWISE : 0u) |
           (out->t[QF_SLOT_COLUMNWISE_DATA].data ? QF_OUT_COLUMNWISE : 0u);
}

qf_shape_query qf_quantize_query(qf_role role, qf_norm norm, unsigned outputs, int64_t M,
                                 int64_t K) {
    return (qf_shape_query){.op = norm != QF_NORM_NONE ? QF_OP_NORM_QUANTIZE : QF_OP_QUANTIZE,
                            .role = role, .norm = norm, .outputs = outputs, .M = M, .K = K};
}

qf_status qf_check_outputs_selected(const char *op, const qf_quantized *out, unsigned *outputs) {
    *outputs = qf_outputs_of(out);
    if (!*outputs)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out->rowwise_data.data and "
                            "out->columnwise_data.data are both NULL; request at least one copy",
                            op);
    return QF_OK;
}

qf_status qf_check_layout(const char *op, const qf_quantized *out) {
    if ((unsigned)out->layout >= QF_SCALE_LAYOUT_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out->layout %d is not a qf_scale_layout", op,
                            (int)out->layout);
    return QF_OK;
}

qf_status qf_check_gemm_outputs(const char *op, const qf_recipe *r, const qf_tensor *bias,
                                const qf_tensor *y, int64_t M, int64_t N, int64_t K) {
    qf_shape shapes[4];
    int n = 0;
    if (!y)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: y is NULL", op);
    if (y->dtype != QF_DTYPE_BF16 && y->dtype != QF_DTYPE_FP32)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: y.dtype is %s; a GEMM writes bf16, or fp32 "
                            "(the fake shapes of a query with QF_OUT_FP32)", op,
                            qf_dtype_name(y->dtype));
    qf_shape_query q = {.op = QF_OP_GEMM, .role = QF_ROLE_INPUT,
                        .outputs = y->dtype == QF_DTYPE_FP32 ? QF_OUT_FP32 : 0u, .M = M, .N = N,
                        .K = K};
    QF_TRY(qf_query_shapes(op, r, &q, shapes, 4, &n));
    for (int i = 0; i < n; i++) {
        if (strcmp(shapes[i].name, "y") != 0)
            return qf_set_error(QF_ERR_INTERNAL, "%s: no buffer for GEMM output '%s'", op,
                                shapes[i].name);
        QF_TRY(qf_check_buffer(op, "y", y, &shapes[i]));
    }
    qf_shape sb = {"bias", QF_DTYPE_BF16, 1, {N}, 0};
    return bias ? qf_check_buffer(op, "bias", bias, &sb) : QF_OK;
}

qf_status qf_check_gemm_path(const char *op, const qf_recipe *r, int arch, qf_scale_layout layout,
                             int64_t N, qf_gemm_path *path) {
    const qf_family_traits *t = qf_family_get(r->family);
    char fam[24];
    size_t i = 0;
    for (const char *c = qf_family_name(r->family); *c && i + 1 < sizeof fam; c++)
        fam[i++] = (char)toupper((unsigned char)*c);
    fam[i] = '\0';
    if ((unsigned)layout >= QF_SCALE_LAYOUT_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: layout %d is not a qf_scale_layout", op,
                            (int)layout);
    *path = qf_family_gemm_path(r->family, arch);
    if (path->engine == QF_GEMM_NONE)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: %s GEMMs need sm_%d or newer; device is "
                            "sm_%d", op, fam, t ? t->gemm[0].arch_lo : 0, arch);
    if (layout != path->layout) {
        char who[64] = "qfuse's generated kernel";
        if (path->engine == QF_GEMM_CUBLASLT)
            snprintf(who, sizeof who, "cuBLASLt's %s mode", path->lt_mode);
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: on sm_%d the GEMM is %s, which reads %s "
                            "scales; quantize with layout %s", op, arch, who,
                            qf_enum_name(QF_ENUM_SCALE_LAYOUT, path->layout),
                            qf_enum_c(QF_ENUM_SCALE_LAYOUT, path->layout));
    }
    if (path->n_align > 0 && N % path->n_align)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: N = %lld must be a multiple of %d on sm_%d "
                            "(cuBLASLt %s; N is the GEMM's output width: the layer's input "
                            "width in a dgrad)", op, (long long)N, path->n_align, arch,
                            path->lt_mode);
    return QF_OK;
}

/* {===================================================================== public shape queries */

/* The argument checks and recipe lookup of both public shape queries. */
static qf_status qf_fake_begin(const char *op, const char *recipe, const qf_shape_query *q,
                               const void *out, int cap, const int *n, const qf_recipe **r) {
    qf_clear_error();
    if (!recipe || !q || !n || cap < 0 || (cap > 0 && !out))
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe, q, n (and out when cap > 0) must not "
                            "be NULL, cap >= 0", op);
    return qf_recipe_find_for(op, recipe, r);
}

/* The caller's out has room for the n outputs of the query (cap of them). */
static qf_status qf_fake_room(const char *op, const qf_recipe *r, int n, int cap) {
    if (n > cap)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: this query of '%s' has %d output(s); out has "
                            "room for cap = %d (QF_FAKE_MAX_OUTPUTS = %d is always enough)", op,
                            r->name, n, cap, QF_FAKE_MAX_OUTPUTS);
    return QF_OK;
}

qf_status qf_fake_shapes(const char *recipe, const qf_shape_query *q, qf_shape *out, int cap,
                         int *n) {
    static const char op[] = "qf_fake_shapes";
    const qf_recipe *r = NULL;
    qf_shape s[QF_FAKE_MAX_OUTPUTS];
    QF_TRY(qf_fake_begin(op, recipe, q, out, cap, n, &r));
    QF_TRY(qf_query_shapes(op, r, q, s, QF_FAKE_MAX_OUTPUTS, n));
    QF_TRY(qf_fake_room(op, r, *n, cap));
    memcpy(out, s, (size_t)*n * sizeof *s);
    return QF_OK;
}

qf_status qf_fake_shape_formulas(const char *recipe, const qf_shape_query *q,
                                 qf_shape_formula *out, int cap, int *n) {
    static const char op[] = "qf_fake_shape_formulas";
    const qf_recipe *r = NULL;
    qf_shape s[QF_FAKE_MAX_OUTPUTS];
    QF_TRY(qf_fake_begin(op, recipe, q, out, cap, n, &r));
    QF_TRY(qf_query_shapes(op, r, q, s, QF_FAKE_MAX_OUTPUTS, n)); /* checks q as qf_fake_shapes */
    QF_TRY(qf_fake_room(op, r, *n, cap));
    if (qf_family_formulas(r, q, out, *n) != *n)
        return qf_set_error(QF_ERR_INTERNAL, "%s: the formulas of '%s' do not match its shape "
                            "function", op, r->name);
    return QF_OK;
}

qf_status qf_recipe_query(const char *recipe, qf_recipe_info *info) {
    static const char op[] = "qf_recipe_query";
    const qf_recipe *r = NULL;
    qf_clear_error();
    if (!recipe || !info)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe and info must not be NULL", op);
    QF_TRY(qf_recipe_find_for(op, recipe, &r));
    *info = (qf_recipe_info){.family = r->family,
                             .amax_history_len = r->family == QF_FAMILY_FP8_DELAYED
                                                     ? r->amax_history_len
                                                     : 0};
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        info->fmt[i] = r->fmt[i];
    return QF_OK;
}

qf_status qf_gemm_scale_layout(const char *recipe, int arch, qf_scale_layout *layout) {
    static const char op[] = "qf_gemm_scale_layout";
    const qf_recipe *r = NULL;
    qf_clear_error();
    if (!recipe || !layout)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe and layout must not be NULL", op);
    QF_TRY(qf_recipe_find_for(op, recipe, &r));
    if (arch < 10 || arch > QF_ARCH_MAX) /* an older GPU is one: UNSUPPORTED below */
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: arch %d is not a compute capability; "
                            "expected 10*major+minor up to %d (e.g. 90 for sm_90)", op, arch,
                            QF_ARCH_MAX);
    const qf_gemm_path path = qf_family_gemm_path(r->family, arch);
    if (path.engine == QF_GEMM_NONE)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: recipe '%s' (%s) has no GEMM on sm_%d", op,
                            r->name, qf_family_name(r->family), arch);
    *layout = path.layout;
    return QF_OK;
}

/* =====================================================================} */
