/* gen_shape.c: the fake-shape tables (numerics 4) and what qfuse-gen derives from them: the C shape
 * functions of build/generated/shapes.c and the symbolic formulas of build/generated/manifest.json.
 *
 * NOTES: one table per family is the single source of both outputs, so the shapes the runtime
 * allocates through shapes.c and the formulas the manifest publishes cannot differ. */
#include "gen_shape.h"

#include <stdio.h>
#include <string.h>

#include "names.h"
#include "qfuse.h"

#define QF_GEN_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ========================================================================= checks */

/* Formulas nest at most this deep ("roundup(cdiv(K,32),4)" is 2). */
#define QF_GEN_DIM_DEPTH 4

/* Parses one formula at *s: a symbol M, N, K, a positive decimal constant of at most 9 digits,
 * or roundup(a,b) / cdiv(a,b). Advances *s past it; returns 0 when malformed. */
static int qf_gen_dim_parse(const char **s, int depth) {
    const char *p = *s;
    size_t f = strncmp(p, "roundup(", 8) == 0 ? 8 : strncmp(p, "cdiv(", 5) == 0 ? 5 : 0;
    if (*p == 'M' || *p == 'N' || *p == 'K') {
        *s = p + 1;
        return 1;
    }
    if (*p >= '1' && *p <= '9') {
        size_t n = strspn(p, "0123456789");
        *s = p + n;
        return n < 10;
    }
    if (f == 0 || depth >= QF_GEN_DIM_DEPTH)
        return 0;
    p += f;
    if (!qf_gen_dim_parse(&p, depth + 1) || *p != ',')
        return 0;
    p++;
    if (!qf_gen_dim_parse(&p, depth + 1) || *p != ')')
        return 0;
    *s = p + 1;
    return 1;
}

/* A dim is one whole formula (gen_shape.h). */
static int qf_gen_dim_ok(const char *d) {
    return qf_gen_dim_parse(&d, 0) && *d == '\0';
}

static int qf_gen_shape_out_check(const qf_fake_out *o, qf_gen_err *e) {
    if (o->ndim < 1 || o->ndim > 4)
        return qf_gen_fail(e, "shape table: output '%s' has %d dims (1..4)", o->name, o->ndim);
    for (int d = 0; d < o->ndim; d++)
        if (!o->dims[d] || !qf_gen_dim_ok(o->dims[d]))
            return qf_gen_fail(e, "shape table: output '%s' dim %d is not a formula of M, N, K, "
                               "constants, roundup and cdiv", o->name, d);
    const unsigned all_ops = QF_FAKE_OP(QF_OP_COUNT) - 1u;
    const unsigned all_roles = QF_FAKE_ROLE(QF_ROLE_COUNT) - 1u;
    if ((unsigned)o->cond >= QF_FAKE_COND_COUNT || !o->ops || (o->ops & ~all_ops) != 0 ||
        (o->roles & ~all_roles) != 0 ||
        (o->dtype != QF_FAKE_DTYPE_ROLE && o->dtype != QF_FAKE_DTYPE_QUERY &&
         (unsigned)o->dtype >= QF_DTYPE_COUNT))
        return qf_gen_fail(e, "shape table: output '%s' has an enum out of range", o->name);
    return 0;
}

/* A bound (an alignment or a largest size) names symbols the op uses ("MK" of "MNK"). */
static int qf_gen_bound_ok(int64_t bound, const char *dims, const char *used) {
    if (bound <= 0)
        return bound == 0;
    return dims && dims[0] && strspn(dims, used) == strlen(dims);
}

int qf_gen_shape_table_check(const qf_fake_table *t, qf_gen_err *e) {
    for (int i = 0; i < t->n_ops; i++) {
        for (int j = 0; j < i; j++)
            if (t->ops[i].op == t->ops[j].op)
                return qf_gen_fail(e, "shape table: op %d listed twice", (int)t->ops[i].op);
        const qf_fake_op *op = &t->ops[i];
        if (!qf_gen_bound_ok(op->align, op->dims_aligned, op->dims_used) ||
            !qf_gen_bound_ok(op->max, op->dims_max, op->dims_used))
            return qf_gen_fail(e, "shape table: op %d has an alignment or a largest size on "
                               "symbols it does not use", (int)op->op);
    }
    for (int i = 0; i < t->n_outs; i++)
        if (qf_gen_shape_out_check(&t->outs[i], e) != 0)
            return -1;
    return 0;
}

/* ========================================================================= C emission */

void qf_gen_shape_emit_decl(qf_gen_buf *b, const qf_recipe *r) {
    qf_gen_buf_addf(
        b,
        "/* Fake shapes of recipe %s (%s): every output of an op, see qf_shapes_fn. */\n"
        "int qf_shapes_%s(const qf_shape_query *q, qf_shape *out, int cap);\n",
        r->name, r->file, r->name);
}

/* cdiv and roundup of the notation of docs/numerics.md, for formulas; static inline: no
 * unused-function warning in a shapes.c without formulas. */
static void qf_gen_shape_emit_formula_helpers(qf_gen_buf *b) {
    qf_gen_buf_adds(
        b, "/* cdiv(a,b) and roundup(a,b) (docs/numerics.md) for a >= 0 and b > 0; -1 (a dim\n"
           " * that qf_shape_add refuses) when a is -1 or the result does not fit in int64_t. */\n"
           "static inline int64_t qf_shape_cdiv(int64_t a, int64_t b) {\n"
           "    return a < 0 ? -1 : a / b + (a % b != 0);\n"
           "}\n\n"
           "static inline int64_t qf_shape_roundup(int64_t a, int64_t b) {\n"
           "    int64_t c = qf_shape_cdiv(a, b);\n"
           "    return c < 0 || c > INT64_MAX / b ? -1 : c * b;\n"
           "}\n\n");
}

void qf_gen_shape_emit_helpers(qf_gen_buf *b) {
    qf_gen_shape_emit_formula_helpers(b);
    qf_gen_buf_adds(
        b,
        "/* Writes output *n when it fits in cap, with bytes = product(dims) * dtype size, and\n"
        " * counts past cap so the caller can answer -2. Returns -1 when a dim is negative (a\n"
        " * formula overflowed) or the bytes exceed INT64_MAX. */\n"
        "static int qf_shape_add(qf_shape *out, int cap, int *n, const char *name, qf_dtype dt,\n"
        "                        int ndim, const int64_t *dims) {\n"
        "    uint64_t bytes = dt == QF_DTYPE_E2M1 ? 1 : qf_dtype_size(dt); /* E2M1 dims: bytes */\n"
        "    for (int i = 0; i < ndim; i++) {\n"
        "        if (dims[i] < 0 ||\n"
        "            (dims[i] > 0 && bytes > (uint64_t)INT64_MAX / (uint64_t)dims[i]))\n"
        "            return -1;\n"
        "        bytes *= (uint64_t)dims[i];\n"
        "    }\n"
        "    if (*n < cap) {\n"
        "        qf_shape *s = &out[*n];\n"
        "        memset(s, 0, sizeof *s);\n"
        "        s->name = name;\n"
        "        s->dtype = dt;\n"
        "        s->ndim = ndim;\n"
        "        for (int i = 0; i < ndim; i++)\n"
        "            s->dims[i] = dims[i];\n"
        "        s->bytes = bytes;\n"
        "    }\n"
        "    (*n)++;\n"
        "    return 0;\n"
        "}\n");
}

/* Appends the C expression of formula d (checked by qf_gen_dim_ok): symbols become q->M, q->N,
 * q->K and roundup / cdiv the helpers qf_shape_roundup / qf_shape_cdiv. */
static void qf_gen_dim_emit_c(qf_gen_buf *b, const char *d) {
    for (const char *s = d; *s; s++) {
        if (strncmp(s, "roundup(", 8) == 0 || strncmp(s, "cdiv(", 5) == 0)
            qf_gen_buf_adds(b, "qf_shape_"); /* then the function's own name */
        if (*s == 'M' || *s == 'N' || *s == 'K')
            qf_gen_buf_addf(b, "q->%c", *s);
        else if (*s == ',')
            qf_gen_buf_adds(b, ", ");
        else
            qf_gen_buf_addn(b, s, 1);
    }
}

/* The checks that make a query invalid (-1) for op of table t (qf_family_query_why's). */
static void qf_gen_emit_op_checks(qf_gen_buf *b, const qf_fake_table *t, const qf_fake_op *op) {
    qf_gen_buf_addf(b, "    if (q->outputs & ~0x%xu) /* bits other than the op's */\n"
                       "        return -1;\n", qf_fake_op_outputs(t, op));
    qf_gen_buf_adds(b, "    if ((unsigned)q->dtype >= QF_DTYPE_COUNT || (unsigned)q->norm >= "
                       "QF_NORM_COUNT ||\n        (unsigned)q->role >= QF_ROLE_COUNT)\n"
                       "        return -1; /* enums out of range, read or not */\n");
    qf_fake_check c[QF_FAKE_MAX_CHECKS];
    const int nc = qf_fake_op_checks(t, op, c);
    for (int i = 0; i < nc; i++) { /* a run of one kind in one if: "q->M <= 0 || q->K <= 0" */
        char expr[160];
        qf_fake_check_render(&c[i], QF_FAKE_AS_C, NULL, expr, sizeof expr);
        const int first = i == 0 || c[i - 1].kind != c[i].kind;
        const int last = i + 1 == nc || c[i + 1].kind != c[i].kind;
        qf_gen_buf_addf(b, "%s%s%s", first ? "    if (" : " || ", expr,
                        last ? ")\n        return -1;\n" : "");
    }
}

/* One `if (cond) { dims; add }` block of output o; query_role: the op takes the query's role,
 * so o's roles (if any) are a run-time condition (a fixed role is decided by the caller). */
static void qf_gen_emit_out(qf_gen_buf *b, const qf_fake_out *o, int query_role) {
    const char *cond = qf_fake_cond_info[o->cond].c;
    const char *ind = "        ";
    const int roles = query_role && o->roles != 0;
    if (cond || roles)
        qf_gen_buf_addf(b, "    if (%s%s", cond ? cond : "", cond && roles ? " && " : "");
    else
        qf_gen_buf_adds(b, "    {\n");
    if (roles)
        qf_gen_buf_addf(b, "((0x%xu >> q->role) & 1u) != 0", o->roles);
    if (cond || roles)
        qf_gen_buf_adds(b, ") {\n");
    qf_gen_buf_addf(b, "%sconst int64_t d[] = {", ind);
    for (int d = 0; d < o->ndim; d++) {
        qf_gen_buf_adds(b, d ? ", " : "");
        qf_gen_dim_emit_c(b, o->dims[d]);
    }
    qf_gen_buf_addf(
        b, "};\n%sif (qf_shape_add(out, cap, &n, \"%s\", %s, %d, d) != 0)\n", ind, o->name,
        o->dtype == QF_FAKE_DTYPE_ROLE    ? "fmt"
        : o->dtype == QF_FAKE_DTYPE_QUERY ? "q->dtype"
                                          : qf_enum_c(QF_ENUM_DTYPE, o->dtype),
        o->ndim);
    qf_gen_buf_addf(b, "%s    return -1;\n    }\n", ind);
}

/* static int qf_shapes_<r>_<op>(q, out, cap): checks, then every output of op in table order. */
static void qf_gen_emit_op_fn(qf_gen_buf *b, const qf_recipe *r, const qf_fake_table *t,
                              const qf_fake_op *op) {
    const char *opname = qf_enum_name(QF_ENUM_OP, op->op);
    qf_gen_buf_addf(b,
                    "\nstatic int qf_shapes_%s_%s(const qf_shape_query *q, qf_shape *out, "
                    "int cap) {\n",
                    r->name, opname);
    qf_gen_emit_op_checks(b, t, op);
    if (qf_fake_op_uses_dtype(t, op->op, QF_FAKE_DTYPE_ROLE))
        qf_gen_buf_addf(b, "    const qf_dtype fmt = qf_fmt_%s[%s];\n", r->name,
                        op->role == QF_FAKE_ROLE_QUERY ? "q->role"
                                                      : qf_enum_c(QF_ENUM_ROLE, op->role));
    qf_gen_buf_adds(b, "    int n = 0;\n");
    const int query_role = op->role == QF_FAKE_ROLE_QUERY;
    for (int i = 0; i < t->n_outs; i++)
        if ((t->outs[i].ops & QF_FAKE_OP(op->op)) &&
            (query_role || qf_fake_out_has_role(&t->outs[i], op->role)))
            qf_gen_emit_out(b, &t->outs[i], query_role);
    qf_gen_buf_adds(b, "    return n > cap ? -2 : n;\n}\n");
}

/* The recipe's format per role, as a static table. */
static void qf_gen_emit_fmt_table(qf_gen_buf *b, const qf_recipe *r) {
    qf_gen_buf_addf(b,
                    "\n/* Element format per role of recipe %s. */\n"
                    "static const qf_dtype qf_fmt_%s[QF_ROLE_COUNT] = {\n",
                    r->name, r->name);
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        qf_gen_buf_addf(b, "    [%s] = %s,\n", qf_enum_c(QF_ENUM_ROLE, i),
                        qf_enum_c(QF_ENUM_DTYPE, r->fmt[i]));
    qf_gen_buf_adds(b, "};\n");
}

void qf_gen_shape_emit_def(qf_gen_buf *b, const qf_recipe *r, const qf_fake_table *t) {
    qf_gen_buf_addf(b, "\n/* ---- recipe %s (%s) */\n", r->name, r->file);
    qf_gen_emit_fmt_table(b, r);
    for (int i = 0; i < t->n_ops; i++)
        qf_gen_emit_op_fn(b, r, t, &t->ops[i]);
    qf_gen_buf_addf(b,
                    "\nint qf_shapes_%s(const qf_shape_query *q, qf_shape *out, int cap) {\n"
                    "    if (!q || cap < 0 || (cap > 0 && !out))\n        return -1;\n"
                    "    switch (q->op) {\n",
                    r->name);
    for (int i = 0; i < t->n_ops; i++) {
        const char *opname = qf_enum_name(QF_ENUM_OP, t->ops[i].op);
        qf_gen_buf_addf(b, "    case %s:\n        return qf_shapes_%s_%s(q, out, cap);\n",
                        qf_enum_c(QF_ENUM_OP, t->ops[i].op), r->name, opname);
    }
    qf_gen_buf_adds(b, "    default:\n        return -1;\n    }\n}\n");
}

/* ========================================================================= JSON formulas */

/* Bytes per unit of a dim of dtype dt: its element size, 1 for E2M1 (dims count bytes). */
static size_t qf_gen_unit_size(qf_dtype dt) {
    return dt == QF_DTYPE_E2M1 ? 1 : qf_dtype_size(dt);
}

/* Bytes per dim unit of output o of op in recipe r, or 0 when it depends on the query's role and
 * the roles' formats differ in size. */
static size_t qf_gen_out_size(const qf_recipe *r, const qf_fake_op *op,
                              const qf_fake_out *o) {
    if (o->dtype == QF_FAKE_DTYPE_QUERY)
        return 0;
    if (o->dtype != QF_FAKE_DTYPE_ROLE)
        return qf_gen_unit_size((qf_dtype)o->dtype);
    if (op->role != QF_FAKE_ROLE_QUERY)
        return qf_gen_unit_size(r->fmt[op->role]);
    size_t s = qf_gen_unit_size(r->fmt[0]);
    for (int i = 1; i < QF_ROLE_COUNT; i++)
        if (qf_gen_unit_size(r->fmt[i]) != s)
            return 0;
    return s;
}

/* 1 when output o of op is packed E2M1 in recipe r (every role's format, for a query role). */
static int qf_gen_out_packed(const qf_recipe *r, const qf_fake_op *op,
                             const qf_fake_out *o) {
    if (o->dtype == QF_FAKE_DTYPE_QUERY)
        return 0;
    if (o->dtype != QF_FAKE_DTYPE_ROLE)
        return o->dtype == QF_DTYPE_E2M1;
    if (op->role != QF_FAKE_ROLE_QUERY)
        return r->fmt[op->role] == QF_DTYPE_E2M1;
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        if (r->fmt[i] != QF_DTYPE_E2M1)
            return 0;
    return 1;
}

/* "M*K", "4*M", "2*M*N", "4": element size (when not 1) times the non-constant-1 dims. */
static void qf_gen_bytes_formula(char *buf, size_t n, size_t size, const qf_fake_out *o) {
    size_t used = 0;
    buf[0] = '\0';
    if (size != 1)
        used += (size_t)snprintf(buf, n, size ? "%zu" : "size(dtype)", size);
    for (int d = 0; d < o->ndim && used < n; d++)
        if (strcmp(o->dims[d], "1") != 0)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? "*" : "", o->dims[d]);
    if (used == 0)
        snprintf(buf, n, "1");
}

/* The manifest condition of output o of op: its cond's text, and for an op taking the query's
 * role, the roles that have it ("rowwise && role in {weight}"). */
static void qf_gen_cond_text(char *buf, size_t n, const qf_fake_op *op, const qf_fake_out *o) {
    size_t used = (size_t)snprintf(buf, n, "%s", qf_fake_cond_info[o->cond].text);
    if (o->roles == 0 || op->role != QF_FAKE_ROLE_QUERY)
        return;
    used = o->cond == QF_FAKE_COND_ALWAYS ? 0 : used; /* "role in {...}" alone */
    used += (size_t)snprintf(buf + used, n - used, "%srole in {", used ? " && " : "");
    for (int r = 0, k = 0; r < QF_ROLE_COUNT && used < n; r++)
        if ((o->roles >> r) & 1u)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", k++ ? ", " : "",
                                     qf_enum_name(QF_ENUM_ROLE, r));
    if (used < n)
        snprintf(buf + used, n - used, "}");
}

static cJSON *qf_gen_out_json(const qf_recipe *r, const qf_fake_op *op,
                              const qf_fake_out *o) {
    char dtype[64], bytes[128], cond[128];
    cJSON *j = cJSON_CreateObject(), *dims = cJSON_CreateArray();
    if (o->dtype == QF_FAKE_DTYPE_QUERY)
        snprintf(dtype, sizeof dtype, "dtype");
    else if (o->dtype == QF_FAKE_DTYPE_ROLE)
        snprintf(dtype, sizeof dtype, "format[%s]",
                 op->role == QF_FAKE_ROLE_QUERY ? "role"
                                               : qf_enum_name(QF_ENUM_ROLE, op->role));
    else
        snprintf(dtype, sizeof dtype, "%s", qf_enum_name(QF_ENUM_DTYPE, o->dtype));
    for (int d = 0; d < o->ndim; d++)
        cJSON_AddItemToArray(dims, cJSON_CreateString(o->dims[d]));
    qf_gen_bytes_formula(bytes, sizeof bytes, qf_gen_out_size(r, op, o), o);
    cJSON_AddStringToObject(j, "name", o->name);
    cJSON_AddStringToObject(j, "dtype", dtype);
    cJSON_AddItemToObject(j, "dims", dims);
    cJSON_AddStringToObject(j, "bytes", bytes);
    qf_gen_cond_text(cond, sizeof cond, op, o);
    cJSON_AddStringToObject(j, "condition", cond);
    if (qf_gen_out_packed(r, op, o))
        cJSON_AddStringToObject(j, "packing",
                                "two E2M1 elements per byte, low nibble first; dims count bytes");
    if (o->scale_layout) {
        cJSON_AddStringToObject(j, "layout", "compact or swizzled (QF_SCALE_SWIZZLED)");
        cJSON_AddStringToObject(j, "layout_note",
                                "swizzled scales (128x4 tiles of 512 bytes, numerics 2.3) have the "
                                "same dims and bytes as compact");
    }
    return j;
}

/* {"role", "requires", "outputs": [...]} of one op. "requires" states, in the conditions'
 * syntax, the checks the op's generated function tests (qf_fake_op_checks), but for the enums'
 * ranges and the output bits other than the op's. */
static cJSON *qf_gen_op_json(const qf_recipe *r, const qf_fake_table *t,
                             const qf_fake_op *op) {
    char req[512];
    size_t used = 0;
    cJSON *j = cJSON_CreateObject(), *outs = cJSON_CreateArray();
    qf_fake_check c[QF_FAKE_MAX_CHECKS];
    const int nc = qf_fake_op_checks(t, op, c);
    req[0] = '\0';
    for (int i = 0; i < nc && used < sizeof req; i++) {
        char text[96];
        qf_fake_check_render(&c[i], QF_FAKE_AS_TEXT, NULL, text, sizeof text);
        used += (size_t)snprintf(req + used, sizeof req - used, "%s%s", i ? " && " : "", text);
    }
    cJSON_AddStringToObject(
        j, "role",
        op->role == QF_FAKE_ROLE_QUERY ? "query" : qf_enum_name(QF_ENUM_ROLE, op->role));
    cJSON_AddStringToObject(j, "requires", req);
    for (int i = 0; i < t->n_outs; i++)
        if ((t->outs[i].ops & QF_FAKE_OP(op->op)) &&
            (op->role == QF_FAKE_ROLE_QUERY || qf_fake_out_has_role(&t->outs[i], op->role)))
            cJSON_AddItemToArray(outs, qf_gen_out_json(r, op, &t->outs[i]));
    cJSON_AddItemToObject(j, "outputs", outs);
    return j;
}

cJSON *qf_gen_shape_json(const qf_recipe *r, const qf_fake_table *t) {
    cJSON *j = cJSON_CreateObject();
    for (int i = 0; i < t->n_ops; i++)
        cJSON_AddItemToObject(j, qf_enum_name(QF_ENUM_OP, t->ops[i].op),
                              qf_gen_op_json(r, t, &t->ops[i]));
    return j;
}
