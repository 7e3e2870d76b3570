/* gen_enum.c: names of the qf_formats.h enums as written by qfuse-gen (C constants, short names).
 */
#include "names.h"

#include <stddef.h>

typedef struct qf_gen_enum_entry {
    const char *c;    /* C constant */
    const char *name; /* short name in variant names, manifest and --list */
} qf_gen_enum_entry;

#define QF_GEN_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ORDER DTYPE */
static const qf_gen_enum_entry qf_gen_dtypes[] = {
    [QF_DTYPE_FP32] = {"QF_DTYPE_FP32", "fp32"}, [QF_DTYPE_FP16] = {"QF_DTYPE_FP16", "fp16"},
    [QF_DTYPE_BF16] = {"QF_DTYPE_BF16", "bf16"}, [QF_DTYPE_E4M3] = {"QF_DTYPE_E4M3", "e4m3"},
    [QF_DTYPE_E5M2] = {"QF_DTYPE_E5M2", "e5m2"}, [QF_DTYPE_E8M0] = {"QF_DTYPE_E8M0", "e8m0"},
    [QF_DTYPE_E2M1] = {"QF_DTYPE_E2M1", "e2m1"},
};
_Static_assert(sizeof(qf_gen_dtypes) / sizeof(qf_gen_dtypes[0]) == QF_DTYPE_COUNT, "dtypes");

static const qf_gen_enum_entry qf_gen_norms[] = {
    [QF_NORM_NONE] = {"QF_NORM_NONE", "none"},
    [QF_NORM_LAYERNORM] = {"QF_NORM_LAYERNORM", "layernorm"},
    [QF_NORM_RMSNORM] = {"QF_NORM_RMSNORM", "rmsnorm"},
};
_Static_assert(sizeof(qf_gen_norms) / sizeof(qf_gen_norms[0]) == QF_NORM_COUNT, "norms");

static const qf_gen_enum_entry qf_gen_families[] = {
    [QF_FAMILY_FP8_DELAYED] = {"QF_FAMILY_FP8_DELAYED", "fp8_delayed"},
    [QF_FAMILY_FP8_CURRENT] = {"QF_FAMILY_FP8_CURRENT", "fp8_current"},
    [QF_FAMILY_MXFP8] = {"QF_FAMILY_MXFP8", "mxfp8"},
    [QF_FAMILY_NVFP4] = {"QF_FAMILY_NVFP4", "nvfp4"},
    [QF_FAMILY_FP8_BLOCK] = {"QF_FAMILY_FP8_BLOCK", "fp8_block"},
};
_Static_assert(sizeof(qf_gen_families) / sizeof(qf_gen_families[0]) == QF_FAMILY_COUNT, "families");

static const qf_gen_enum_entry qf_gen_roles[] = {
    [QF_ROLE_INPUT] = {"QF_ROLE_INPUT", "input"},
    [QF_ROLE_WEIGHT] = {"QF_ROLE_WEIGHT", "weight"},
    [QF_ROLE_GRAD] = {"QF_ROLE_GRAD", "grad"},
};
_Static_assert(sizeof(qf_gen_roles) / sizeof(qf_gen_roles[0]) == QF_ROLE_COUNT, "roles");

static const qf_gen_enum_entry qf_gen_ops[] = {
    [QF_OP_NORM_QUANTIZE] = {"QF_OP_NORM_QUANTIZE", "norm_quantize"},
    [QF_OP_QUANTIZE] = {"QF_OP_QUANTIZE", "quantize"},
    [QF_OP_SCALE_UPDATE] = {"QF_OP_SCALE_UPDATE", "scale_update"},
    [QF_OP_GEMM] = {"QF_OP_GEMM", "gemm"},
};
_Static_assert(sizeof(qf_gen_ops) / sizeof(qf_gen_ops[0]) == QF_OP_COUNT, "ops");

static const qf_gen_enum_entry qf_gen_amax_computes[] = {
    [QF_AMAX_COMPUTE_MAX] = {"QF_AMAX_COMPUTE_MAX", "max"},
    [QF_AMAX_COMPUTE_MOST_RECENT] = {"QF_AMAX_COMPUTE_MOST_RECENT", "most_recent"},
};
_Static_assert(sizeof(qf_gen_amax_computes) / sizeof(qf_gen_amax_computes[0]) ==
                   QF_AMAX_COMPUTE_COUNT,
               "amax_computes");

static const qf_gen_enum_entry qf_gen_scale_roundings[] = {
    [QF_SCALE_ROUNDING_CEIL] = {"QF_SCALE_ROUNDING_CEIL", "ceil"},
    [QF_SCALE_ROUNDING_FLOOR] = {"QF_SCALE_ROUNDING_FLOOR", "floor"},
};
_Static_assert(sizeof(qf_gen_scale_roundings) / sizeof(qf_gen_scale_roundings[0]) ==
                   QF_SCALE_ROUNDING_COUNT,
               "scale_roundings");

typedef struct qf_gen_enum_table {
    const qf_gen_enum_entry *entries;
    int count;
} qf_gen_enum_table;

/* ORDER GEN_ENUM */
static const qf_gen_enum_table qf_gen_enum_tables[] = {
    [QF_ENUM_DTYPE] = {qf_gen_dtypes, QF_GEN_COUNTOF(qf_gen_dtypes)},
    [QF_ENUM_NORM] = {qf_gen_norms, QF_GEN_COUNTOF(qf_gen_norms)},
    [QF_ENUM_FAMILY] = {qf_gen_families, QF_GEN_COUNTOF(qf_gen_families)},
    [QF_ENUM_ROLE] = {qf_gen_roles, QF_GEN_COUNTOF(qf_gen_roles)},
    [QF_ENUM_OP] = {qf_gen_ops, QF_GEN_COUNTOF(qf_gen_ops)},
    [QF_ENUM_AMAX_COMPUTE] = {qf_gen_amax_computes, QF_GEN_COUNTOF(qf_gen_amax_computes)},
    [QF_ENUM_SCALE_ROUNDING] = {qf_gen_scale_roundings, QF_GEN_COUNTOF(qf_gen_scale_roundings)},
};
_Static_assert(sizeof(qf_gen_enum_tables) / sizeof(qf_gen_enum_tables[0]) == QF_ENUM_COUNT,
               "enum tables");

static const qf_gen_enum_entry *qf_gen_enum_get(qf_gen_enum kind, int v) {
    if ((unsigned)kind >= QF_ENUM_COUNT)
        return NULL;
    const qf_gen_enum_table *t = &qf_gen_enum_tables[kind];
    return v >= 0 && v < t->count ? &t->entries[v] : NULL;
}

const char *qf_enum_c(qf_gen_enum kind, int v) {
    const qf_gen_enum_entry *e = qf_gen_enum_get(kind, v);
    return e ? e->c : NULL;
}

const char *qf_enum_name(qf_gen_enum kind, int v) {
    const qf_gen_enum_entry *e = qf_gen_enum_get(kind, v);
    return e ? e->name : NULL;
}

int qf_enum_count(qf_gen_enum kind) {
    return (unsigned)kind < QF_ENUM_COUNT ? qf_gen_enum_tables[kind].count : 0;
}
