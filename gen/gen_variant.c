/* gen_variant.c: recipe -> kernel variants (descriptor + config), their invariants and the
 * placeholder values of their templates. */
#include "gen_variant.h"

#include <stdlib.h>
#include <string.h>

#include "names.h"

#define QF_GEN_SMEM_MAX (48u * 1024u) /* static + dynamic without an opt-in attribute */

/* Quantizer axes (every family): every combination is one variant. */
static const qf_norm qf_gen_nq_norms[] = {QF_NORM_LAYERNORM, QF_NORM_RMSNORM};
static const qf_dtype qf_gen_in_dtypes[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
/* plain quantize: weights, gradients, and inputs without a norm (layernorm_mlp's fc2 input) */
static const qf_role qf_gen_quant_roles[] = {QF_ROLE_INPUT, QF_ROLE_WEIGHT, QF_ROLE_GRAD};

#define QF_GEN_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Appends a variant unless the array is full (the caller reports that). */
static void qf_gen_push(qf_gen_variant *out, int cap, int *n, const qf_gen_variant *v) {
    if (*n < cap)
        out[*n] = *v;
    (*n)++;
}

/* The ops with a norm: {layernorm, rmsnorm} x zcg {0, 1} x in dtype, named qf_<r>_<infix>_...:
 * norm_quantize ("nq", output in the input role's format) and norm_backward ("nbwd", dx in x's
 * dtype, numerics 6). */
static void qf_gen_expand_norm_op(const qf_recipe *r, const qf_gen_kernel_config *cfg, qf_op op,
                                  const char *infix, qf_gen_variant *out, int cap, int *n) {
    for (int i = 0; i < QF_GEN_COUNTOF(qf_gen_nq_norms); i++)
        for (int z = 0; z <= 1; z++)
            for (int d = 0; d < QF_GEN_COUNTOF(qf_gen_in_dtypes); d++) {
                qf_gen_variant v = {.cfg = *cfg};
                const qf_dtype in = qf_gen_in_dtypes[d];
                v.desc = (qf_kernel_desc){
                    .op = op,
                    .role = QF_ROLE_INPUT,
                    .norm = qf_gen_nq_norms[i],
                    .zero_centered_gamma = z,
                    .in_dtype = in,
                    .out_dtype = op == QF_OP_NORM_QUANTIZE ? r->fmt[QF_ROLE_INPUT] : in};
                snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_%s_%s%s_%s", r->name, infix,
                         qf_enum_name(QF_ENUM_NORM, v.desc.norm), z ? "_zcg" : "",
                         qf_enum_name(QF_ENUM_DTYPE, in));
                qf_gen_push(out, cap, n, &v);
            }
}

/* quantize (no norm) for weights and gradients x in dtype, output in that role's format. */
static void qf_gen_expand_quant(const qf_recipe *r, const qf_gen_kernel_config *cfg,
                                qf_gen_variant *out, int cap, int *n) {
    for (int i = 0; i < QF_GEN_COUNTOF(qf_gen_quant_roles); i++)
        for (int d = 0; d < QF_GEN_COUNTOF(qf_gen_in_dtypes); d++) {
            qf_gen_variant v = {.cfg = *cfg};
            qf_role role = qf_gen_quant_roles[i];
            v.desc = (qf_kernel_desc){.op = QF_OP_QUANTIZE,
                                          .role = role,
                                          .norm = QF_NORM_NONE,
                                          .in_dtype = qf_gen_in_dtypes[d],
                                          .out_dtype = r->fmt[role]};
            snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_quant_%s_%s", r->name,
                     qf_enum_name(QF_ENUM_ROLE, role),
                     qf_enum_name(QF_ENUM_DTYPE, v.desc.in_dtype));
            qf_gen_push(out, cap, n, &v);
        }
}

/* A kernel of which a recipe has one: qf_<recipe>_<suffix>, for op with in/out formats. */
static void qf_gen_push_single(const qf_recipe *r, const qf_gen_kernel_config *cfg, qf_op op,
                               qf_dtype in, qf_dtype outdt, const char *suffix,
                               qf_gen_variant *out, int cap, int *n) {
    qf_gen_variant v = {.cfg = *cfg};
    v.desc = (qf_kernel_desc){
        .op = op, .role = QF_ROLE_INPUT, .norm = QF_NORM_NONE, .in_dtype = in, .out_dtype = outdt};
    snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_%s", r->name, suffix);
    if (op == QF_OP_SCALE_UPDATE) /* dynamic shared memory: one amax history */
        v.cfg.smem_bytes = (unsigned)r->amax_history_len * 4u;
    qf_gen_push(out, cap, n, &v);
}

static int qf_gen_variant_cmp(const void *a, const void *b) {
    return strcmp(((const qf_gen_variant *)a)->desc.name, ((const qf_gen_variant *)b)->desc.name);
}

/* Appends the variants of op `op` of r's family, whose row entry is fo. */
static void qf_gen_expand_op(const qf_recipe *r, qf_op op, const qf_family_op *fo,
                             qf_gen_variant *out, int cap, int *n) {
    const qf_gen_kernel_config cfg = {.block_threads = fo->block_threads,
                                      .tile_m = fo->tile_m,
                                      .smem_bytes = 0,
                                      .template_name = fo->tpl};
    switch (op) {
    case QF_OP_NORM_QUANTIZE:
        qf_gen_expand_norm_op(r, &cfg, op, "nq", out, cap, n);
        break;
    case QF_OP_QUANTIZE:
        qf_gen_expand_quant(r, &cfg, out, cap, n);
        break;
    case QF_OP_SCALE_UPDATE: /* fp32 amaxes in, the E4M3/E5M2 scales of each tensor out */
        qf_gen_push_single(r, &cfg, op, QF_DTYPE_FP32, QF_DTYPE_E4M3, "scale_update", out, cap, n);
        break;
    case QF_OP_GEMM: /* y[M, N] bf16 = A (input format) x B (weight format)^T */
        qf_gen_push_single(r, &cfg, op, r->fmt[QF_ROLE_INPUT], QF_DTYPE_BF16, "gemm", out, cap, n);
        break;
    case QF_OP_NORM_BACKWARD:
        qf_gen_expand_norm_op(r, &cfg, op, "nbwd", out, cap, n);
        break;
    case QF_OP_DBIAS:      /* dy in dtype, dbias in dy's dtype */
    case QF_OP_ACTIVATION: /* h, a, dh in dtype (the activation is a run-time argument) */
        for (int d = 0; d < QF_GEN_COUNTOF(qf_gen_in_dtypes); d++) {
            char suffix[32];
            snprintf(suffix, sizeof suffix, "%s_%s", op == QF_OP_DBIAS ? "dbias" : "act",
                     qf_enum_name(QF_ENUM_DTYPE, qf_gen_in_dtypes[d]));
            qf_gen_push_single(r, &cfg, op, qf_gen_in_dtypes[d], qf_gen_in_dtypes[d], suffix, out,
                               cap, n);
        }
        break;
    default:
        break;
    }
}

int qf_gen_variants_expand(const qf_recipe *r, qf_gen_variant *out, int cap, qf_gen_err *e) {
    const qf_family_traits *t = qf_family_get(r->family);
    int n = 0;
    if (!t || !t->implemented)
        return qf_gen_fail(e, "%s: not implemented scaling mode: %s", r->path,
                           t ? t->name : "?");
    for (int op = 0; op < QF_OP_COUNT; op++)
        if (t->ops[op].tpl)
            qf_gen_expand_op(r, (qf_op)op, &t->ops[op], out, cap, &n);
    if (n > cap)
        return qf_gen_fail(e, "%s: %d kernel variants, more than the limit of %d", r->path, n, cap);
    qsort(out, (size_t)n, sizeof *out, qf_gen_variant_cmp); /* sorted: reproducible output */
    return n;
}

/* ========================================================================= invariants */

static int qf_gen_is_identifier(const char *s) {
    if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
        return 0;
    size_t ok = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    return s[ok] == '\0';
}

/* Enum ranges and the output format of one descriptor. */
static const char *qf_gen_desc_problem(const qf_kernel_desc *d) {
    if (!qf_gen_is_identifier(d->name))
        return "name is not a C identifier";
    if ((unsigned)d->op >= QF_OP_COUNT || (unsigned)d->role >= QF_ROLE_COUNT ||
        (unsigned)d->norm >= QF_NORM_COUNT || (unsigned)d->in_dtype >= QF_DTYPE_COUNT)
        return "enum value out of range";
    if (d->zero_centered_gamma != 0 && d->zero_centered_gamma != 1)
        return "zero_centered_gamma is not 0 or 1";
    if (d->op == QF_OP_NORM_BACKWARD || d->op == QF_OP_DBIAS || d->op == QF_OP_ACTIVATION) {
        if (d->out_dtype != d->in_dtype)
            return "output dtype (dx, dbias, a, dh) is not the input's";
    } else if (d->op == QF_OP_GEMM ? d->out_dtype != QF_DTYPE_BF16
                                   : d->out_dtype != QF_DTYPE_E4M3 &&
                                         d->out_dtype != QF_DTYPE_E5M2 &&
                                         d->out_dtype != QF_DTYPE_E2M1) {
        return d->op == QF_OP_GEMM ? "GEMM output dtype is not bf16"
                                   : "output dtype is not an FP8 or FP4 format";
    }
    if ((d->op == QF_OP_NORM_QUANTIZE || d->op == QF_OP_NORM_BACKWARD) !=
        (d->norm != QF_NORM_NONE))
        return "norm does not match the op";
    return NULL;
}

/* Launch limits of one config. */
static const char *qf_gen_config_problem(const qf_gen_kernel_config *c) {
    if (c->block_threads == 0 || c->block_threads % 32 != 0 || c->block_threads > 1024)
        return "block_threads is not a multiple of 32 in 32..1024";
    if (c->tile_m == 0)
        return "tile_m is 0";
    if (c->smem_bytes > QF_GEN_SMEM_MAX)
        return "shared memory exceeds 48 KiB";
    if (!c->template_name)
        return "no template";
    return NULL;
}

int qf_gen_variants_check(const qf_recipe *r, const qf_gen_variant *v, int n, qf_gen_err *e) {
    for (int i = 0; i < n; i++) {
        const char *p = qf_gen_desc_problem(&v[i].desc);
        if (!p)
            p = qf_gen_config_problem(&v[i].cfg);
        if (p)
            return qf_gen_fail(e, "%s: kernel '%s': %s (block_threads %u, tile_m %u, smem %u)",
                               r->path, v[i].desc.name, p, v[i].cfg.block_threads, v[i].cfg.tile_m,
                               v[i].cfg.smem_bytes);
        for (int j = 0; j < i; j++)
            if (strcmp(v[i].desc.name, v[j].desc.name) == 0)
                return qf_gen_fail(e, "%s: kernel name '%s' is not unique", r->path,
                                   v[i].desc.name);
    }
    return 0;
}

/* ========================================================================= printing */

void qf_gen_kernel_desc_print(FILE *f, const qf_kernel_desc *d) {
    fprintf(f, "%s: op=%s role=%s norm=%s zcg=%d in=%s out=%s", d->name,
            qf_enum_name(QF_ENUM_OP, d->op), qf_enum_name(QF_ENUM_ROLE, d->role),
            qf_enum_name(QF_ENUM_NORM, d->norm), d->zero_centered_gamma,
            qf_enum_name(QF_ENUM_DTYPE, d->in_dtype),
            qf_enum_name(QF_ENUM_DTYPE, d->out_dtype));
}

void qf_gen_kernel_config_print(FILE *f, const qf_gen_kernel_config *c) {
    fprintf(f, "block_threads=%u tile_m=%u smem=%u template=%s", c->block_threads, c->tile_m,
            c->smem_bytes, c->template_name ? c->template_name : "-");
}

/* ========================================================================= template values */

static void qf_gen_values_add(qf_gen_values *vals, const char *name, const char *value) {
    if (vals->n >= QF_GEN_VALUES_MAX)
        abort(); /* a programming error: the contract below lists fewer */
    snprintf(vals->name[vals->n], sizeof vals->name[0], "%s", name);
    snprintf(vals->value[vals->n], sizeof vals->value[0], "%s", value);
    vals->n++;
}

/* 1 when vals already holds constant `name`. */
static int qf_gen_values_has(const qf_gen_values *vals, const char *name) {
    for (int i = 0; i < vals->n; i++)
        if (strcmp(vals->name[i], name) == 0)
            return 1;
    return 0;
}

/* The value of field fd's template constant for kernel d of r. */
static void qf_gen_field_value(const qf_recipe *r, const qf_field *fd, const qf_kernel_desc *d,
                               char *buf, size_t n) {
    const char *p = (const char *)r + fd->offset;
    if (fd->tpl_value)
        fd->tpl_value(r, d, buf, n);
    else if (fd->tpl_array)
        snprintf(buf, n, "%d", (unsigned)d->role < QF_ROLE_COUNT
                                   ? ((const int *)((const char *)r + fd->tpl_array))[d->role]
                                   : 0);
    else if (fd->type == QF_FIELD_OPTION)
        snprintf(buf, n, "%s", qf_enum_c((qf_enum)fd->names, *(const int *)p));
    else if (fd->type == QF_FIELD_INTEGER)
        snprintf(buf, n, "%lld", (long long)*(const int64_t *)p);
    else if (fd->type == QF_FIELD_NUMBER)
        snprintf(buf, n, "%af", (double)*(const float *)p);
    else
        snprintf(buf, n, "%d", *(const int *)p);
}

/* The descriptor's constants the op declares (QF_TC_*), but __TILE_M__, which comes last. */
static void qf_gen_values_desc(const qf_recipe *r, const qf_kernel_desc *d, unsigned consts,
                               qf_gen_values *out) {
    if (consts & QF_TC_FAMILY)
        qf_gen_values_add(out, "__FAMILY__", qf_enum_c(QF_ENUM_FAMILY, r->family));
    if (consts & QF_TC_NORM)
        qf_gen_values_add(out, "__NORM__", qf_enum_c(QF_ENUM_NORM, d->norm));
    if (consts & QF_TC_ROLE)
        qf_gen_values_add(out, "__ROLE__", qf_enum_c(QF_ENUM_ROLE, d->role));
    if (consts & QF_TC_ZCG)
        qf_gen_values_add(out, "__ZERO_CENTERED_GAMMA__", d->zero_centered_gamma ? "1" : "0");
    if (consts & QF_TC_IN_DTYPE)
        qf_gen_values_add(out, "__IN_DTYPE__", qf_enum_c(QF_ENUM_DTYPE, d->in_dtype));
    if (consts & QF_TC_OUT_DTYPE)
        qf_gen_values_add(out, "__OUT_DTYPE__", qf_enum_c(QF_ENUM_DTYPE, d->out_dtype));
}

void qf_gen_variant_values(const qf_recipe *r, const qf_gen_variant *v, qf_gen_values *out) {
    const qf_family_traits *t = &qf_families[r->family];
    const unsigned consts = t->ops[v->desc.op].consts;
    char num[QF_KERNEL_NAME_MAX + 1];
    out->n = 0;
    qf_gen_values_add(out, "__KERNEL_NAME__", v->desc.name);
    snprintf(num, sizeof num, "%u", v->cfg.block_threads);
    qf_gen_values_add(out, "__BLOCK_THREADS__", num);
    qf_gen_values_desc(r, &v->desc, consts, out);
    for (int i = 0; i < t->n_fields; i++) {
        const qf_field *fd = &t->fields[i];
        if (!fd->tpl || !(fd->tpl_ops & (1u << v->desc.op)) || qf_gen_values_has(out, fd->tpl))
            continue;
        qf_gen_field_value(r, fd, &v->desc, num, sizeof num);
        qf_gen_values_add(out, fd->tpl, num);
    }
    if (consts & QF_TC_TILE_M) {
        snprintf(num, sizeof num, "%u", v->cfg.tile_m);
        qf_gen_values_add(out, "__TILE_M__", num);
    }
}

qf_kernel_entry qf_gen_variant_entry(const qf_recipe *r, const qf_gen_variant *v,
                                     const qf_kernel_template *tpl, const char *prelude,
                                     unsigned entries) {
    return (qf_kernel_entry){.name = v->desc.name,
                             .recipe = r,
                             .family = r->family,
                             .op = v->desc.op,
                             .role = v->desc.role,
                             .norm = v->desc.norm,
                             .zero_centered_gamma = v->desc.zero_centered_gamma,
                             .in_dtype = v->desc.in_dtype,
                             .out_dtype = v->desc.out_dtype,
                             .block_threads = v->cfg.block_threads,
                             .tile_m = v->cfg.tile_m,
                             .tpl = tpl,
                             .prelude = prelude,
                             .entries = entries};
}
