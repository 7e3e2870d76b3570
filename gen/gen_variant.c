/* gen_variant.c: recipe -> kernel variants (descriptor + config), their invariants and the
 * placeholder values of their templates. */
#include "gen_variant.h"

#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "ref_nvfp4.h"

#define QF_GEN_TPL_NORM_QUANTIZE "smxx_fp8_norm_quantize.cu"
#define QF_GEN_TPL_SCALE_UPDATE "smxx_fp8_scale_update.cu"
#define QF_GEN_TPL_MX_NORM_QUANTIZE "smxx_mxfp8_norm_quantize.cu"
#define QF_GEN_TPL_MX_GEMM "sm90_mxfp8_gemm.cu"
#define QF_GEN_TPL_NV_NORM_QUANTIZE "smxx_nvfp4_norm_quantize.cu"
#define QF_GEN_TPL_NV_GEMM "sm90_nvfp4_gemm.cu"
#define QF_GEN_SMEM_MAX (48u * 1024u) /* static + dynamic without an opt-in attribute */

/* Quantizer axes (fp8_delayed, mxfp8 and nvfp4): every combination is one variant. */
static const qf_norm qf_gen_nq_norms[] = {QF_NORM_LAYERNORM, QF_NORM_RMSNORM};
static const qf_dtype qf_gen_in_dtypes[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
static const qf_role qf_gen_quant_roles[] = {QF_ROLE_WEIGHT, QF_ROLE_GRAD};

#define QF_GEN_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Config of the quantizers: the templates' sub-tile mapping assumes 32 rows x 256 threads. */
static const qf_gen_kernel_config qf_gen_quant_config = {
    .block_threads = 256, .tile_m = 32, .smem_bytes = 0, .template_name = QF_GEN_TPL_NORM_QUANTIZE};
static const qf_gen_kernel_config qf_gen_mx_quant_config = {
    .block_threads = 256,
    .tile_m = 32,
    .smem_bytes = 0,
    .template_name = QF_GEN_TPL_MX_NORM_QUANTIZE};
/* NOTES: a fixed config for the MXFP8 GEMM: 8 warps, QF_MX_GEMM_TILE_M rows of y per block (the
 * template static_asserts both). Its dynamic shared memory, QF_MX_GEMM_SMEM_BYTES of
 * qf_formats.h, is past 48 KiB and opted into by the launcher, so it is not counted here. */
static const qf_gen_kernel_config qf_gen_mx_gemm_config = {.block_threads = 256,
                                                           .tile_m = QF_MX_GEMM_TILE_M,
                                                           .smem_bytes = 0,
                                                           .template_name = QF_GEN_TPL_MX_GEMM};

/* NVFP4 (SPEC 2.4): the quantizers as MXFP8's (tile_m 32 is two 16-row RHT groups / 2D tiles). */
static const qf_gen_kernel_config qf_gen_nv_quant_config = {
    .block_threads = 256,
    .tile_m = 32,
    .smem_bytes = 0,
    .template_name = QF_GEN_TPL_NV_NORM_QUANTIZE};
/* NOTES: the NVFP4 GEMM's config mirrors the MXFP8 GEMM's: 8 warps, QF_NV_GEMM_TILE_M rows of y
 * per block (the template static_asserts both); its dynamic shared memory, QF_NV_GEMM_SMEM_BYTES,
 * is opted into by the launcher (runtime/ops_nvfp4_gemm.c). */
static const qf_gen_kernel_config qf_gen_nv_gemm_config = {.block_threads = 256,
                                                           .tile_m = QF_NV_GEMM_TILE_M,
                                                           .smem_bytes = 0,
                                                           .template_name = QF_GEN_TPL_NV_GEMM};

/* Appends a variant unless the array is full (the caller reports that). */
static void qf_gen_push(qf_gen_variant *out, int cap, int *n, const qf_gen_variant *v) {
    if (*n < cap)
        out[*n] = *v;
    (*n)++;
}

/* norm_quantize: {layernorm, rmsnorm} x zcg {0, 1} x in dtype, output in the input role's format.
 */
static void qf_gen_expand_nq(const qf_recipe *r, const qf_gen_kernel_config *cfg,
                             qf_gen_variant *out, int cap, int *n) {
    for (int i = 0; i < QF_GEN_COUNTOF(qf_gen_nq_norms); i++)
        for (int z = 0; z <= 1; z++)
            for (int d = 0; d < QF_GEN_COUNTOF(qf_gen_in_dtypes); d++) {
                qf_gen_variant v = {.cfg = *cfg};
                v.desc = (qf_kernel_desc){.op = QF_OP_NORM_QUANTIZE,
                                              .role = QF_ROLE_INPUT,
                                              .norm = qf_gen_nq_norms[i],
                                              .zero_centered_gamma = z,
                                              .in_dtype = qf_gen_in_dtypes[d],
                                              .out_dtype = r->fmt[QF_ROLE_INPUT]};
                snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_nq_%s%s_%s", r->name,
                         qf_enum_name(QF_ENUM_NORM, v.desc.norm), z ? "_zcg" : "",
                         qf_enum_name(QF_ENUM_DTYPE, v.desc.in_dtype));
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

/* The one scale-update kernel; its dynamic shared memory holds one amax history. */
static void qf_gen_expand_scale_update(const qf_recipe *r, qf_gen_variant *out, int cap,
                                       int *n) {
    qf_gen_variant v = {0};
    v.desc = (qf_kernel_desc){.op = QF_OP_SCALE_UPDATE,
                                  .role = QF_ROLE_INPUT,
                                  .norm = QF_NORM_NONE,
                                  .in_dtype = QF_DTYPE_FP32,
                                  .out_dtype = QF_DTYPE_E4M3};
    snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_scale_update", r->name);
    v.cfg = (qf_gen_kernel_config){.block_threads = 256,
                                   .tile_m = 1,
                                   .smem_bytes = (unsigned)r->amax_history_len * 4u,
                                   .template_name = QF_GEN_TPL_SCALE_UPDATE};
    qf_gen_push(out, cap, n, &v);
}

/* The one block-scaled GEMM (mxfp8, nvfp4): y[M, N] bf16 = A (input format) x B (weight
 * format)^T, compact scales. */
static void qf_gen_expand_gemm(const qf_recipe *r, const qf_gen_kernel_config *cfg,
                               qf_gen_variant *out, int cap, int *n) {
    qf_gen_variant v = {.cfg = *cfg};
    v.desc = (qf_kernel_desc){.op = QF_OP_GEMM,
                                  .role = QF_ROLE_INPUT,
                                  .norm = QF_NORM_NONE,
                                  .in_dtype = r->fmt[QF_ROLE_INPUT],
                                  .out_dtype = QF_DTYPE_BF16};
    snprintf(v.desc.name, sizeof v.desc.name, "qf_%s_gemm", r->name);
    qf_gen_push(out, cap, n, &v);
}

static int qf_gen_variant_cmp(const void *a, const void *b) {
    return strcmp(((const qf_gen_variant *)a)->desc.name, ((const qf_gen_variant *)b)->desc.name);
}

int qf_gen_variants_expand(const qf_recipe *r, qf_gen_variant *out, int cap, qf_gen_err *e) {
    int n = 0;
    switch (r->family) {
    case QF_FAMILY_FP8_DELAYED:
        qf_gen_expand_nq(r, &qf_gen_quant_config, out, cap, &n);
        qf_gen_expand_quant(r, &qf_gen_quant_config, out, cap, &n);
        qf_gen_expand_scale_update(r, out, cap, &n);
        break;
    case QF_FAMILY_MXFP8: /* no scale update: block scales come from the data itself */
        qf_gen_expand_nq(r, &qf_gen_mx_quant_config, out, cap, &n);
        qf_gen_expand_quant(r, &qf_gen_mx_quant_config, out, cap, &n);
        qf_gen_expand_gemm(r, &qf_gen_mx_gemm_config, out, cap, &n);
        break;
    case QF_FAMILY_NVFP4: /* no scale update: the global amax comes with the data */
        qf_gen_expand_nq(r, &qf_gen_nv_quant_config, out, cap, &n);
        qf_gen_expand_quant(r, &qf_gen_nv_quant_config, out, cap, &n);
        qf_gen_expand_gemm(r, &qf_gen_nv_gemm_config, out, cap, &n);
        break;
    default:
        return qf_gen_fail(e, "%s: not implemented scaling mode: %s", r->path,
                           qf_enum_name(QF_ENUM_FAMILY, r->family));
    }
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
    if (d->op == QF_OP_GEMM ? d->out_dtype != QF_DTYPE_BF16
                            : d->out_dtype != QF_DTYPE_E4M3 && d->out_dtype != QF_DTYPE_E5M2 &&
                                  d->out_dtype != QF_DTYPE_E2M1)
        return d->op == QF_OP_GEMM ? "GEMM output dtype is not bf16"
                                   : "output dtype is not an FP8 or FP4 format";
    if ((d->op == QF_OP_NORM_QUANTIZE) != (d->norm != QF_NORM_NONE))
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

int qf_gen_variant_block_2d(const qf_recipe *r, const qf_kernel_desc *d) {
    return (r->family == QF_FAMILY_MXFP8 || r->family == QF_FAMILY_NVFP4) && r->weight_2d &&
           d->op == QF_OP_QUANTIZE && d->role == QF_ROLE_WEIGHT;
}

/* 1 when d is an NVFP4 quantizer (norm_quantize or quantize). */
static int qf_gen_nv_quantizer(const qf_recipe *r, const qf_kernel_desc *d) {
    return r->family == QF_FAMILY_NVFP4 &&
           (d->op == QF_OP_NORM_QUANTIZE || d->op == QF_OP_QUANTIZE);
}

int qf_gen_variant_rht(const qf_recipe *r, const qf_kernel_desc *d) {
    return qf_gen_nv_quantizer(r, d) && (unsigned)d->role < QF_ROLE_COUNT &&
           ((r->rht_roles >> d->role) & 1u);
}

int qf_gen_variant_sr(const qf_recipe *r, const qf_kernel_desc *d) {
    return qf_gen_nv_quantizer(r, d) && d->role == QF_ROLE_GRAD && r->sr_grad;
}

unsigned qf_gen_variant_rht_mask(const qf_recipe *r, const qf_kernel_desc *d) {
    if (!qf_gen_variant_rht(r, d))
        return 0;
    return r->has_rht_seed ? qf_nvfp4_rht_mask_from_seed_ref(r->rht_seed)
                           : QF_NVFP4_RHT_MASK_DEFAULT;
}

/* __MARGIN__ and __AMAX_COMPUTE__ of the fp8_delayed scale update. */
static void qf_gen_values_scale_update(const qf_recipe *r, qf_gen_values *out) {
    char num[32];
    snprintf(num, sizeof num, "%d.0f", r->margin);
    qf_gen_values_add(out, "__MARGIN__", num);
    qf_gen_values_add(out, "__AMAX_COMPUTE__",
                      qf_enum_c(QF_ENUM_AMAX_COMPUTE, r->amax_compute));
}

/* __A_DTYPE__ and __B_DTYPE__ of the MXFP8 GEMM: A in the input format, B in the weight format.
 * The NVFP4 GEMM has none: both operands are E2M1. */
static void qf_gen_values_gemm(const qf_recipe *r, qf_gen_values *out) {
    if (r->family == QF_FAMILY_NVFP4)
        return;
    qf_gen_values_add(out, "__A_DTYPE__", qf_enum_c(QF_ENUM_DTYPE, r->fmt[QF_ROLE_INPUT]));
    qf_gen_values_add(out, "__B_DTYPE__",
                      qf_enum_c(QF_ENUM_DTYPE, r->fmt[QF_ROLE_WEIGHT]));
}

/* __RHT__ __RHT_MASK__ __STOCHASTIC_ROUNDING__ __BLOCK_2D__ of an NVFP4 quantizer (SPEC 2.4).
 * NOTES: the mask is 0x0000 where RHT is off, so a seed changes only the sources that use it. */
static void qf_gen_values_nvfp4(const qf_recipe *r, const qf_kernel_desc *d,
                                qf_gen_values *out) {
    char mask[16];
    snprintf(mask, sizeof mask, "0x%04X", qf_gen_variant_rht_mask(r, d));
    qf_gen_values_add(out, "__RHT__", qf_gen_variant_rht(r, d) ? "1" : "0");
    qf_gen_values_add(out, "__RHT_MASK__", mask);
    qf_gen_values_add(out, "__STOCHASTIC_ROUNDING__", qf_gen_variant_sr(r, d) ? "1" : "0");
    qf_gen_values_add(out, "__BLOCK_2D__", qf_gen_variant_block_2d(r, d) ? "1" : "0");
}

/* The norm/quantize values; mxfp8 adds __SCALE_ROUNDING__ and __BLOCK_2D__ (SPEC 2.3); nvfp4
 * has no __OUT_DTYPE__ (always E2M1) and adds its own (qf_gen_values_nvfp4). */
static void qf_gen_values_quant(const qf_recipe *r, const qf_kernel_desc *d,
                                qf_gen_values *out) {
    qf_gen_values_add(out, "__NORM__", qf_enum_c(QF_ENUM_NORM, d->norm));
    qf_gen_values_add(out, "__ZERO_CENTERED_GAMMA__", d->zero_centered_gamma ? "1" : "0");
    qf_gen_values_add(out, "__IN_DTYPE__", qf_enum_c(QF_ENUM_DTYPE, d->in_dtype));
    if (r->family == QF_FAMILY_NVFP4) {
        qf_gen_values_nvfp4(r, d, out);
        return;
    }
    qf_gen_values_add(out, "__OUT_DTYPE__", qf_enum_c(QF_ENUM_DTYPE, d->out_dtype));
    if (r->family != QF_FAMILY_MXFP8)
        return;
    qf_gen_values_add(out, "__SCALE_ROUNDING__",
                      qf_enum_c(QF_ENUM_SCALE_ROUNDING, r->scale_rounding));
    qf_gen_values_add(out, "__BLOCK_2D__", qf_gen_variant_block_2d(r, d) ? "1" : "0");
}

void qf_gen_variant_values(const qf_recipe *r, const qf_gen_variant *v, qf_gen_values *out) {
    char num[32];
    out->n = 0;
    qf_gen_values_add(out, "__KERNEL_NAME__", v->desc.name);
    snprintf(num, sizeof num, "%u", v->cfg.block_threads);
    qf_gen_values_add(out, "__BLOCK_THREADS__", num);
    if (v->desc.op == QF_OP_SCALE_UPDATE) {
        qf_gen_values_scale_update(r, out);
        return;
    }
    if (v->desc.op == QF_OP_GEMM)
        qf_gen_values_gemm(r, out);
    else
        qf_gen_values_quant(r, &v->desc, out);
    snprintf(num, sizeof num, "%u", v->cfg.tile_m);
    qf_gen_values_add(out, "__TILE_M__", num);
}
