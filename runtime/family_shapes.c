/* family_shapes.c: the families' fake-shape tables (numerics 4), one per family, referenced by its
 * row in qf_families: the single source of the generated shape functions
 * (build/generated/shapes.c), the manifest's formulas and the runtime's interpreter for recipes
 * loaded at run time. */
#include <stdio.h>
#include <string.h>

#include "family.h"
#include "names.h"
#include "qf_formats.h"
#include "registry.h"

#define QF_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define QF_FAKE_ROLE_FMT QF_FAKE_DTYPE_ROLE

extern const qf_fake_table qf_fake_fp8, qf_fake_mxfp8, qf_fake_nvfp4, qf_fake_fp8_block;

/* The backward ops of every family (numerics 6): the norm's, of x [M, K] of the query's dtype
 * (K <= QF_NB_MAX_K: its column sums live in shared memory), and dbias, of dy [M, N] of the
 * query's dtype (N <= QF_DB_MAX_N: one launch). */
#define QF_FAKE_NORM_BWD_OP                                                                        \
    {QF_OP_NORM_BACKWARD, "MK", 0, QF_ROLE_INPUT, 1, 0, NULL, QF_NB_MAX_K, "K"},                   \
        {QF_OP_DBIAS, "MN", 0, QF_ROLE_GRAD, 0, 0, NULL, QF_DB_MAX_N, "N"},                        \
        {QF_OP_ACTIVATION, "MN", 0, QF_ROLE_INPUT, 0, 0, NULL, 0, NULL}

/* The FP8 families' ops: their GEMM is cuBLASLt's FP8 GEMM, which takes K and N multiples of 16
 * (per-tensor and block scales alike). */
static const qf_fake_op qf_fake_fp8_delayed_ops[] = {
    {QF_OP_NORM_QUANTIZE, "MK", 1, QF_ROLE_INPUT, 1, 0, NULL, 0, NULL},
    {QF_OP_QUANTIZE, "MK", 1, QF_FAKE_ROLE_QUERY, 0, 0, NULL, 0, NULL},
    {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 16, "NK", 0, NULL},
    QF_FAKE_NORM_BWD_OP,
};

/* MXFP8's ops: its GEMM takes K multiples of 32 (one E8M0 scale per 32 along K, every path). */
static const qf_fake_op qf_fake_mxfp8_ops[] = {
    {QF_OP_NORM_QUANTIZE, "MK", 1, QF_ROLE_INPUT, 1, 0, NULL, 0, NULL},
    {QF_OP_QUANTIZE, "MK", 1, QF_FAKE_ROLE_QUERY, 0, 0, NULL, 0, NULL},
    {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 32, "K", 0, NULL},
    QF_FAKE_NORM_BWD_OP,
};

/* The outputs of a fused norm (numerics 3), after the quantized copies. */
#define QF_FAKE_NORM_OUTS                                                                          \
    {QF_FAKE_OP(QF_OP_NORM_QUANTIZE), "mu", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_LAYERNORM, 0,    \
     0},                                                                                           \
        {QF_FAKE_OP(QF_OP_NORM_QUANTIZE), "rsigma", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_NORM, 0, \
         0}
/* The norm backward's outputs (numerics 6): dx in x's dtype, fp32 dgamma and (LayerNorm) dbeta. */
#define QF_FAKE_NORM_BWD_OUTS                                                                      \
    {QF_FAKE_OP(QF_OP_NORM_BACKWARD), "dx", QF_FAKE_DTYPE_QUERY, 2, {"M", "K"},                    \
     QF_FAKE_COND_ALWAYS, 0, 0},                                                                   \
        {QF_FAKE_OP(QF_OP_NORM_BACKWARD), "dgamma", QF_DTYPE_FP32, 1, {"K"}, QF_FAKE_COND_ALWAYS,  \
         0, 0},                                                                                    \
        {QF_FAKE_OP(QF_OP_NORM_BACKWARD), "dbeta", QF_DTYPE_FP32, 1, {"K"},                        \
         QF_FAKE_COND_LAYERNORM, 0, 0},                                                            \
        {QF_FAKE_OP(QF_OP_DBIAS), "dbias", QF_FAKE_DTYPE_QUERY, 1, {"N"}, QF_FAKE_COND_ALWAYS, 0,  \
         0},                                                                                       \
        {QF_FAKE_OP(QF_OP_ACTIVATION), "a", QF_FAKE_DTYPE_QUERY, 2, {"M", "N"},                    \
         QF_FAKE_COND_ALWAYS, 0, 0},                                                               \
        {QF_FAKE_OP(QF_OP_ACTIVATION), "dh", QF_FAKE_DTYPE_QUERY, 2, {"M", "N"},                   \
         QF_FAKE_COND_NOT_GATED, 0, 0},                                                            \
        {QF_FAKE_OP(QF_OP_ACTIVATION), "dh", QF_FAKE_DTYPE_QUERY, 3, {"M", "2", "N"},              \
         QF_FAKE_COND_GATED, 0, 0}
/* A GEMM's y, bf16 or (QF_OUT_FP32) fp32. */
#define QF_FAKE_GEMM_OUTS                                                                          \
    {QF_FAKE_OP(QF_OP_GEMM), "y", QF_DTYPE_BF16, 2, {"M", "N"}, QF_FAKE_COND_OUT_BF16, 0, 0},      \
        {QF_FAKE_OP(QF_OP_GEMM), "y", QF_DTYPE_FP32, 2, {"M", "N"}, QF_FAKE_COND_OUT_FP32, 0, 0}

/* per-tensor FP8 (numerics 2.1, 2.2): data [M, K] rowwise, transposed [K, M] columnwise, one fp32
 * amax and scale_inv. */
static const qf_fake_out qf_fake_fp8_delayed_outs[] = {
    {QF_FAKE_QUANTIZERS, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0,
     0},
    {QF_FAKE_QUANTIZERS, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "M"},
     QF_FAKE_COND_COLUMNWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "amax", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0, 0},
    {QF_FAKE_QUANTIZERS, "scale_inv", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0, 0},
    QF_FAKE_NORM_OUTS,
    QF_FAKE_GEMM_OUTS,
    QF_FAKE_NORM_BWD_OUTS,
};

const qf_fake_table qf_fake_fp8 = {
    qf_fake_fp8_delayed_ops, QF_COUNTOF(qf_fake_fp8_delayed_ops), qf_fake_fp8_delayed_outs,
    QF_COUNTOF(qf_fake_fp8_delayed_outs)};

/* mxfp8 (numerics 2.3): data [M, K] both ways (columnwise NOT transposed) and padded E8M0 scales,
 * rowwise one per 1x32 block along K, columnwise one per 32x1 block along M. Same ops as
 * fp8_delayed. */
static const qf_fake_out qf_fake_mxfp8_outs[] = {
    {QF_FAKE_QUANTIZERS, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0,
     0},
    {QF_FAKE_QUANTIZERS, "rowwise_scale_inv", QF_DTYPE_E8M0, 2,
     {"roundup(M,128)", "roundup(cdiv(K,32),4)"}, QF_FAKE_COND_ROWWISE, 1, 0},
    {QF_FAKE_QUANTIZERS, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"},
     QF_FAKE_COND_COLUMNWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "columnwise_scale_inv", QF_DTYPE_E8M0, 2,
     {"roundup(cdiv(M,32),4)", "roundup(K,128)"}, QF_FAKE_COND_COLUMNWISE, 1, 0},
    QF_FAKE_NORM_OUTS,
    QF_FAKE_GEMM_OUTS,
    QF_FAKE_NORM_BWD_OUTS,
};

const qf_fake_table qf_fake_mxfp8 = {
    qf_fake_mxfp8_ops, QF_COUNTOF(qf_fake_mxfp8_ops), qf_fake_mxfp8_outs,
    QF_COUNTOF(qf_fake_mxfp8_outs)};

/* nvfp4 (numerics 2.4): packed E2M1 data, rowwise [M, K/2] and columnwise transposed [K, M/2] bytes
 * (dims in bytes, see qf_fake_out), E4M3 block scales padded like MXFP8's, one fp32 global
 * amax per copy. M and K must be multiples of 16; the GEMM's K a multiple of 32 (whole 16-byte
 * rows of packed data, as its kernel and cuBLASLt's FP4 operands need). */
static const qf_fake_op qf_fake_nvfp4_ops[] = {
    {QF_OP_NORM_QUANTIZE, "MK", 1, QF_ROLE_INPUT, 1, 16, "MK", 0, NULL},
    {QF_OP_QUANTIZE, "MK", 1, QF_FAKE_ROLE_QUERY, 0, 16, "MK", 0, NULL},
    {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 32, "K", 0, NULL},
    QF_FAKE_NORM_BWD_OP,
};

static const qf_fake_out qf_fake_nvfp4_outs[] = {
    {QF_FAKE_QUANTIZERS, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "cdiv(K,2)"},
     QF_FAKE_COND_ROWWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "rowwise_scale_inv", QF_DTYPE_E4M3, 2,
     {"roundup(M,128)", "roundup(cdiv(K,16),4)"}, QF_FAKE_COND_ROWWISE, 1, 0},
    {QF_FAKE_QUANTIZERS, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "cdiv(M,2)"},
     QF_FAKE_COND_COLUMNWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "columnwise_scale_inv", QF_DTYPE_E4M3, 2,
     {"roundup(K,128)", "roundup(cdiv(M,16),4)"}, QF_FAKE_COND_COLUMNWISE, 1, 0},
    {QF_FAKE_QUANTIZERS, "amax_rowwise", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ROWWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "amax_columnwise", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_COLUMNWISE, 0, 0},
    QF_FAKE_NORM_OUTS,
    QF_FAKE_GEMM_OUTS,
    QF_FAKE_NORM_BWD_OUTS,
};

const qf_fake_table qf_fake_nvfp4 = {
    qf_fake_nvfp4_ops, QF_COUNTOF(qf_fake_nvfp4_ops), qf_fake_nvfp4_outs,
    QF_COUNTOF(qf_fake_nvfp4_outs)};

/* fp8_block (numerics 2.5): E4M3 data, rowwise [M, K] and columnwise transposed [K, M] (TN-only
 * Hopper GEMMs), fp32 scale_inv in TE's GEMM_READY layouts (what cuBLASLt's VEC128_32F and
 * BLK128x128_32F read). Inputs and grads: 1x128 blocks along K for the rowwise copy, scale_inv
 * [cdiv(K,128), roundup(M,4)] (M-major); 128x1 blocks along M for the columnwise copy, scale_inv
 * [cdiv(M,128), roundup(K,4)] (the rowwise layout of x^T). Weights: 128x128 tiles, scale_inv
 * [cdiv(M,128), roundup(cdiv(K,128),4)] rowwise and the same layout of the transposed tile grid
 * for the columnwise copy, [cdiv(K,128), roundup(cdiv(M,128),4)] (TE's get_scale_shape). Any M
 * and K (partial blocks use the elements that exist). Same ops as fp8_delayed. */
#define QF_FAKE_BLOCK_1D (QF_FAKE_ROLE(QF_ROLE_INPUT) | QF_FAKE_ROLE(QF_ROLE_GRAD))
#define QF_FAKE_BLOCK_2D QF_FAKE_ROLE(QF_ROLE_WEIGHT)
static const qf_fake_out qf_fake_fp8_block_outs[] = {
    {QF_FAKE_QUANTIZERS, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0,
     0},
    {QF_FAKE_QUANTIZERS, "rowwise_scale_inv", QF_DTYPE_FP32, 2, {"cdiv(K,128)", "roundup(M,4)"},
     QF_FAKE_COND_ROWWISE, 0, QF_FAKE_BLOCK_1D},
    {QF_FAKE_QUANTIZERS, "rowwise_scale_inv", QF_DTYPE_FP32, 2,
     {"cdiv(M,128)", "roundup(cdiv(K,128),4)"}, QF_FAKE_COND_ROWWISE, 0, QF_FAKE_BLOCK_2D},
    {QF_FAKE_QUANTIZERS, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "M"},
     QF_FAKE_COND_COLUMNWISE, 0, 0},
    {QF_FAKE_QUANTIZERS, "columnwise_scale_inv", QF_DTYPE_FP32, 2, {"cdiv(M,128)", "roundup(K,4)"},
     QF_FAKE_COND_COLUMNWISE, 0, QF_FAKE_BLOCK_1D},
    {QF_FAKE_QUANTIZERS, "columnwise_scale_inv", QF_DTYPE_FP32, 2,
     {"cdiv(K,128)", "roundup(cdiv(M,128),4)"}, QF_FAKE_COND_COLUMNWISE, 0, QF_FAKE_BLOCK_2D},
    QF_FAKE_NORM_OUTS,
    QF_FAKE_GEMM_OUTS,
    QF_FAKE_NORM_BWD_OUTS,
};

const qf_fake_table qf_fake_fp8_block = {
    qf_fake_fp8_delayed_ops, QF_COUNTOF(qf_fake_fp8_delayed_ops), qf_fake_fp8_block_outs,
    QF_COUNTOF(qf_fake_fp8_block_outs)};

/* ========================================================================= the interpreter */

/* cdiv(a,b) and roundup(a,b) for a >= 0, b > 0; -1 when a is -1 or the result overflows (the
 * helpers of the generated build/generated/shapes.c, gen/gen_shape.c). */
static int64_t qf_fake_cdiv(int64_t a, int64_t b) {
    return a < 0 || b <= 0 ? -1 : a / b + (a % b != 0);
}

static int64_t qf_fake_roundup(int64_t a, int64_t b) {
    int64_t c = qf_fake_cdiv(a, b);
    return c < 0 || c > INT64_MAX / b ? -1 : c * b;
}

/* The value of symbol c of q. */
static int64_t qf_fake_symbol(const qf_shape_query *q, char c) {
    return c == 'M' ? q->M : c == 'N' ? q->N : q->K;
}

/* Evaluates the formula at *s (numerics.md notation, as gen/gen_shape.c checks it) for q and
 * advances *s past it; -1 when malformed. */
static int64_t qf_fake_eval(const char **s, const qf_shape_query *q) {
    const int up = strncmp(*s, "roundup(", 8) == 0;
    if (up || strncmp(*s, "cdiv(", 5) == 0) {
        *s += up ? 8 : 5;
        int64_t a = qf_fake_eval(s, q);
        if (*(*s)++ != ',')
            return -1;
        int64_t b = qf_fake_eval(s, q);
        if (*(*s)++ != ')')
            return -1;
        return up ? qf_fake_roundup(a, b) : qf_fake_cdiv(a, b);
    }
    const char c = *(*s)++;
    if (c == 'M' || c == 'N' || c == 'K')
        return qf_fake_symbol(q, c);
    if (c < '0' || c > '9')
        return -1;
    int64_t v = c - '0';
    while (**s >= '0' && **s <= '9' && v < INT64_MAX / 10)
        v = v * 10 + (*(*s)++ - '0');
    return v;
}

unsigned qf_fake_op_outputs(const qf_fake_table *t, const qf_fake_op *o) {
    static const unsigned tested[QF_FAKE_COND_COUNT] = {
        [QF_FAKE_COND_ROWWISE] = QF_OUT_ROWWISE, [QF_FAKE_COND_COLUMNWISE] = QF_OUT_COLUMNWISE,
        [QF_FAKE_COND_OUT_BF16] = QF_OUT_FP32,   [QF_FAKE_COND_OUT_FP32] = QF_OUT_FP32,
        [QF_FAKE_COND_NOT_GATED] = QF_OUT_GATED, [QF_FAKE_COND_GATED] = QF_OUT_GATED};
    unsigned bits = o->quantizer ? QF_OUT_ROWWISE | QF_OUT_COLUMNWISE : 0u;
    for (int i = 0; i < t->n_outs; i++)
        if (t->outs[i].ops & QF_FAKE_OP(o->op))
            bits |= tested[t->outs[i].cond];
    return bits;
}

/* The names of the QF_OUT_* bits set in bits ("QF_OUT_ROWWISE | QF_OUT_FP32", or "none"). */
static void qf_fake_out_bits(unsigned bits, char *buf, size_t n) {
    static const char *const names[] = {"QF_OUT_ROWWISE", "QF_OUT_COLUMNWISE", "QF_OUT_FP32",
                                        "QF_OUT_GATED"};
    size_t len = 0;
    buf[0] = '\0';
    for (unsigned b = 0; b < sizeof names / sizeof names[0]; b++)
        if (bits & (1u << b) && len < n)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? " | " : "", names[b]);
    if (!buf[0])
        snprintf(buf, n, "none");
}

int qf_fake_op_checks(const qf_fake_table *t, const qf_fake_op *o, qf_fake_check *out) {
    int n = 0;
    for (const char *s = o->dims_used; *s; s++)
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_POSITIVE, *s, 0};
    if (o->quantizer)
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_COPY, 0, 0};
    if (o->needs_norm)
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_NORM, 0, 0};
    if (o->quantizer && !o->needs_norm) /* a plain quantize fuses no norm */
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_NO_NORM, 0, 0};
    if (o->quantizer && o->needs_norm) /* a norm + quantize is its role's only */
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_ROLE, 0, o->role};
    if (qf_fake_op_checks_dtype(t, o))
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_DTYPE, 0, 0};
    for (const char *s = o->align > 0 ? o->dims_aligned : ""; *s; s++)
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_ALIGN, *s, o->align};
    for (const char *s = o->max > 0 ? o->dims_max : ""; *s; s++)
        out[n++] = (qf_fake_check){QF_FAKE_CHECK_MAX, *s, o->max};
    return n;
}

int qf_fake_check_holds(const qf_fake_check *c, const qf_shape_query *q) {
    switch (c->kind) {
    case QF_FAKE_CHECK_POSITIVE:
        return qf_fake_symbol(q, c->dim) > 0;
    case QF_FAKE_CHECK_COPY:
        return (q->outputs & (QF_OUT_ROWWISE | QF_OUT_COLUMNWISE)) != 0;
    case QF_FAKE_CHECK_NORM:
        return q->norm == QF_NORM_LAYERNORM || q->norm == QF_NORM_RMSNORM;
    case QF_FAKE_CHECK_NO_NORM:
        return q->norm == QF_NORM_NONE;
    case QF_FAKE_CHECK_ROLE:
        return q->role == (qf_role)c->value;
    case QF_FAKE_CHECK_DTYPE:
        return q->dtype == QF_DTYPE_BF16 || q->dtype == QF_DTYPE_FP16 || q->dtype == QF_DTYPE_FP32;
    case QF_FAKE_CHECK_ALIGN:
        return qf_fake_symbol(q, c->dim) % c->value == 0;
    case QF_FAKE_CHECK_MAX:
        return qf_fake_symbol(q, c->dim) <= c->value;
    default:
        return 0;
    }
}

/* Each check's three renderings (qf_fake_style), printf formats of strings only: the C and
 * text formats take (a, value), the reason (a, the query's value of the dim, value); a is the dim
 * ("K"), or for QF_FAKE_CHECK_ROLE the role (its C name in C, else its name). ORDER FAKE_CHECK */
static const struct {
    const char *c, *text, *why;
} qf_fake_check_info[QF_FAKE_CHECK_COUNT] = {
    [QF_FAKE_CHECK_POSITIVE] = {"q->%s <= 0", "%s > 0", "%s = %s is not positive"},
    [QF_FAKE_CHECK_COPY] = {"(q->outputs & (QF_OUT_ROWWISE | QF_OUT_COLUMNWISE)) == 0",
                            "(rowwise || columnwise)",
                            "a quantizer needs outputs QF_OUT_ROWWISE and/or QF_OUT_COLUMNWISE"},
    [QF_FAKE_CHECK_NORM] = {"q->norm != QF_NORM_LAYERNORM && q->norm != QF_NORM_RMSNORM",
                            "norm in {layernorm, rmsnorm}",
                            "the op needs norm layernorm or rmsnorm"},
    [QF_FAKE_CHECK_NO_NORM] = {"q->norm != QF_NORM_NONE", "norm == none",
                               "a plain quantize takes norm none (a norm + quantize is "
                               "QF_OP_NORM_QUANTIZE)"},
    [QF_FAKE_CHECK_ROLE] = {"q->role != %s", "role == %s",
                            "a norm + quantize is the %s role's only"},
    [QF_FAKE_CHECK_DTYPE] = {"q->dtype != QF_DTYPE_BF16 && q->dtype != QF_DTYPE_FP16 && "
                             "q->dtype != QF_DTYPE_FP32",
                             "dtype in {bf16, fp16, fp32}",
                             "the op takes dtype bf16, fp16 or fp32"},
    [QF_FAKE_CHECK_ALIGN] = {"q->%s %% %s != 0", "%s %% %s == 0",
                             "%s = %s is not a multiple of %s (numerics 4)"},
    [QF_FAKE_CHECK_MAX] = {"q->%s > %s", "%s <= %s",
                           "%s = %s is more than the op's kernel holds, %s (numerics 4)"},
};

void qf_fake_check_render(const qf_fake_check *c, qf_fake_style s, const qf_shape_query *q,
                          char *buf, size_t n) {
    if ((unsigned)c->kind >= QF_FAKE_CHECK_COUNT) {
        snprintf(buf, n, "check %d", (int)c->kind);
        return;
    }
    char dim[2] = {c->dim, '\0'}, value[24], has[24] = "";
    const char *a = dim;
    snprintf(value, sizeof value, "%lld", (long long)c->value);
    if (c->kind == QF_FAKE_CHECK_ROLE)
        a = s == QF_FAKE_AS_C ? qf_enum_c(QF_ENUM_ROLE, (int)c->value)
                              : qf_enum_name(QF_ENUM_ROLE, (int)c->value);
    if (q && c->dim)
        snprintf(has, sizeof has, "%lld", (long long)qf_fake_symbol(q, c->dim));
    if (s == QF_FAKE_AS_WHY)
        snprintf(buf, n, qf_fake_check_info[c->kind].why, a, has, value);
    else
        snprintf(buf, n,
                 s == QF_FAKE_AS_C ? qf_fake_check_info[c->kind].c
                                   : qf_fake_check_info[c->kind].text,
                 a, value);
}

/* NULL when q is a valid query of op o (the checks of the generated functions), else why not,
 * in buf (n bytes) or a literal. */
static const char *qf_fake_query_why(const qf_fake_table *t, const qf_fake_op *o,
                                     const qf_shape_query *q, char *buf, size_t n) {
    if (q->outputs & ~QF_OUT_KNOWN)
        return "outputs has bits other than QF_OUT_ROWWISE, _COLUMNWISE, _FP32 and _GATED";
    /* enums out of range are refused whether the op reads them or not */
    if ((unsigned)q->dtype >= QF_DTYPE_COUNT) {
        snprintf(buf, n, "dtype %d is not a qf_dtype", (int)q->dtype);
        return buf;
    }
    if ((unsigned)q->norm >= QF_NORM_COUNT) {
        snprintf(buf, n, "norm %d is not a qf_norm", (int)q->norm);
        return buf;
    }
    if ((unsigned)q->role >= QF_ROLE_COUNT)
        return "role is not a qf_role";
    const unsigned reads = qf_fake_op_outputs(t, o);
    if (q->outputs & ~reads) {
        char has[64], takes[64];
        qf_fake_out_bits(q->outputs & ~reads, has, sizeof has);
        qf_fake_out_bits(reads, takes, sizeof takes);
        snprintf(buf, n, "outputs has %s, which %s does not take (it takes %s)", has,
                 qf_enum_name(QF_ENUM_OP, o->op), takes);
        return buf;
    }
    qf_fake_check c[QF_FAKE_MAX_CHECKS];
    const int nc = qf_fake_op_checks(t, o, c);
    for (int i = 0; i < nc; i++)
        if (!qf_fake_check_holds(&c[i], q)) {
            qf_fake_check_render(&c[i], QF_FAKE_AS_WHY, q, buf, n);
            return buf;
        }
    return NULL;
}

/* ORDER FAKE_COND */
const qf_fake_cond_text qf_fake_cond_info[QF_FAKE_COND_COUNT] = {
    [QF_FAKE_COND_ALWAYS] = {NULL, "always"},
    [QF_FAKE_COND_ROWWISE] = {"(q->outputs & QF_OUT_ROWWISE) != 0", "rowwise"},
    [QF_FAKE_COND_COLUMNWISE] = {"(q->outputs & QF_OUT_COLUMNWISE) != 0", "columnwise"},
    [QF_FAKE_COND_LAYERNORM] = {"q->norm == QF_NORM_LAYERNORM", "norm == layernorm"},
    [QF_FAKE_COND_NORM] = {"q->norm != QF_NORM_NONE", "norm != none"},
    [QF_FAKE_COND_OUT_BF16] = {"(q->outputs & QF_OUT_FP32) == 0", "bf16 output"},
    [QF_FAKE_COND_OUT_FP32] = {"(q->outputs & QF_OUT_FP32) != 0", "fp32 output"},
    [QF_FAKE_COND_NOT_GATED] = {"(q->outputs & QF_OUT_GATED) == 0", "not gated"},
    [QF_FAKE_COND_GATED] = {"(q->outputs & QF_OUT_GATED) != 0", "gated"},
};

/* 1 when output o exists for q. */
static int qf_fake_cond_holds(qf_fake_cond c, const qf_shape_query *q) {
    switch (c) {
    case QF_FAKE_COND_ROWWISE:
        return (q->outputs & QF_OUT_ROWWISE) != 0;
    case QF_FAKE_COND_COLUMNWISE:
        return (q->outputs & QF_OUT_COLUMNWISE) != 0;
    case QF_FAKE_COND_LAYERNORM:
        return q->norm == QF_NORM_LAYERNORM;
    case QF_FAKE_COND_NORM:
        return q->norm != QF_NORM_NONE;
    case QF_FAKE_COND_OUT_BF16:
        return (q->outputs & QF_OUT_FP32) == 0;
    case QF_FAKE_COND_OUT_FP32:
        return (q->outputs & QF_OUT_FP32) != 0;
    case QF_FAKE_COND_NOT_GATED:
        return (q->outputs & QF_OUT_GATED) == 0;
    case QF_FAKE_COND_GATED:
        return (q->outputs & QF_OUT_GATED) != 0;
    default:
        return 1;
    }
}

/* Fills *s with output o (dtype dt) for q; -1 when a dim overflows or the bytes exceed INT64_MAX
 * (as the generated qf_shape_add). */
static int qf_fake_fill(const qf_fake_out *o, qf_dtype dt, const qf_shape_query *q, qf_shape *s) {
    uint64_t bytes = dt == QF_DTYPE_E2M1 ? 1 : qf_dtype_size(dt); /* E2M1 dims: bytes */
    memset(s, 0, sizeof *s);
    for (int i = 0; i < o->ndim; i++) {
        const char *f = o->dims[i];
        const int64_t d = qf_fake_eval(&f, q);
        if (d < 0 || *f || (d > 0 && bytes > (uint64_t)INT64_MAX / (uint64_t)d))
            return -1;
        s->dims[i] = d;
        bytes *= (uint64_t)d;
    }
    s->name = o->name;
    s->dtype = dt;
    s->ndim = o->ndim;
    s->bytes = bytes;
    return 0;
}

/* The outputs of q under r from its family's table: each into out[i] (evaluated) and, when f is
 * not NULL, f[i] (its formulas), for i < cap; the count, -1 for an invalid query, -2 past cap. */
static int qf_family_walk(const qf_recipe *r, const qf_shape_query *q, qf_shape *out,
                          qf_shape_formula *f, int cap) {
    const qf_family_traits *t = r ? qf_family_get(r->family) : NULL;
    if (!t || !t->shapes || !q || cap < 0 || (cap > 0 && !out))
        return -1;
    const qf_fake_op *o = NULL;
    for (int i = 0; i < t->shapes->n_ops; i++)
        if (t->shapes->ops[i].op == q->op)
            o = &t->shapes->ops[i];
    char why[96];
    if (!o || qf_fake_query_why(t->shapes, o, q, why, sizeof why))
        return -1;
    const qf_role role = o->role == QF_FAKE_ROLE_QUERY ? q->role : (qf_role)o->role;
    const qf_dtype fmt = r->fmt[role];
    int n = 0;
    for (int i = 0; i < t->shapes->n_outs; i++) {
        const qf_fake_out *fo = &t->shapes->outs[i];
        if (!(fo->ops & QF_FAKE_OP(q->op)) || !qf_fake_cond_holds(fo->cond, q) ||
            !qf_fake_out_has_role(fo, role))
            continue;
        qf_shape s;
        const qf_dtype dt = fo->dtype == QF_FAKE_DTYPE_ROLE    ? fmt
                            : fo->dtype == QF_FAKE_DTYPE_QUERY ? q->dtype
                                                               : (qf_dtype)fo->dtype;
        if (qf_fake_fill(fo, dt, q, &s))
            return -1;
        if (n < cap)
            out[n] = s;
        if (n < cap && f) {
            f[n] = (qf_shape_formula){.name = fo->name, .dtype = dt, .ndim = fo->ndim};
            memcpy(f[n].dims, fo->dims, sizeof f[n].dims);
        }
        n++;
    }
    return n > cap ? -2 : n;
}

const char *qf_family_query_why(const qf_recipe *r, const qf_shape_query *q, char *buf,
                                size_t n) {
    const qf_family_traits *t = r ? qf_family_get(r->family) : NULL;
    if (!t || !t->shapes || !q)
        return "no shape table";
    for (int i = 0; i < t->shapes->n_ops; i++)
        if (t->shapes->ops[i].op == q->op) {
            const char *why = qf_fake_query_why(t->shapes, &t->shapes->ops[i], q, buf, n);
            return why ? why : "an output's size overflows int64";
        }
    if ((unsigned)q->op < QF_OP_COUNT && t->ops[q->op].tpl)
        return "the op has no fake shapes (it writes into buffers the caller sizes)";
    return "the family has no such op";
}

int qf_family_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *out, int cap) {
    return qf_family_walk(r, q, out, NULL, cap);
}

int qf_family_formulas(const qf_recipe *r, const qf_shape_query *q, qf_shape_formula *out,
                       int cap) {
    qf_shape s[QF_FAKE_MAX_OUTPUTS];
    if (cap < 0 || cap > QF_FAKE_MAX_OUTPUTS || (cap > 0 && !out))
        return -1;
    return qf_family_walk(r, q, s, out, cap);
}

int qf_recipe_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *out, int cap) {
    return r && r->shapes ? r->shapes(q, out, cap) : qf_family_shapes(r, q, out, cap);
}
