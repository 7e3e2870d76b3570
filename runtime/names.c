/* names.c: the one enum-name table of the project: every qf_formats.h enum (and the recipe option
 * enums) with its C constant and its short name (variant names, manifest, messages, options). */
#include "names.h"

#include "qfuse.h"

#include <string.h>

typedef struct qf_enum_entry {
    const char *c;    /* C constant */
    const char *name; /* short name in variant names, manifest and --list */
} qf_enum_entry;

#define QF_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ORDER DTYPE */
static const qf_enum_entry qf_names_dtypes[] = {
    [QF_DTYPE_FP32] = {"QF_DTYPE_FP32", "fp32"}, [QF_DTYPE_FP16] = {"QF_DTYPE_FP16", "fp16"},
    [QF_DTYPE_BF16] = {"QF_DTYPE_BF16", "bf16"}, [QF_DTYPE_E4M3] = {"QF_DTYPE_E4M3", "e4m3"},
    [QF_DTYPE_E5M2] = {"QF_DTYPE_E5M2", "e5m2"}, [QF_DTYPE_E8M0] = {"QF_DTYPE_E8M0", "e8m0"},
    [QF_DTYPE_E2M1] = {"QF_DTYPE_E2M1", "e2m1"},
};
_Static_assert(sizeof(qf_names_dtypes) / sizeof(qf_names_dtypes[0]) == QF_DTYPE_COUNT, "dtypes");

static const qf_enum_entry qf_names_norms[] = {
    [QF_NORM_NONE] = {"QF_NORM_NONE", "none"},
    [QF_NORM_LAYERNORM] = {"QF_NORM_LAYERNORM", "layernorm"},
    [QF_NORM_RMSNORM] = {"QF_NORM_RMSNORM", "rmsnorm"},
};
_Static_assert(sizeof(qf_names_norms) / sizeof(qf_names_norms[0]) == QF_NORM_COUNT, "norms");

static const qf_enum_entry qf_names_families[] = {
    [QF_FAMILY_FP8_DELAYED] = {"QF_FAMILY_FP8_DELAYED", "fp8_delayed"},
    [QF_FAMILY_FP8_CURRENT] = {"QF_FAMILY_FP8_CURRENT", "fp8_current"},
    [QF_FAMILY_MXFP8] = {"QF_FAMILY_MXFP8", "mxfp8"},
    [QF_FAMILY_NVFP4] = {"QF_FAMILY_NVFP4", "nvfp4"},
    [QF_FAMILY_FP8_BLOCK] = {"QF_FAMILY_FP8_BLOCK", "fp8_block"},
};
_Static_assert(sizeof(qf_names_families) / sizeof(qf_names_families[0]) == QF_FAMILY_COUNT, "families");

static const qf_enum_entry qf_names_roles[] = {
    [QF_ROLE_INPUT] = {"QF_ROLE_INPUT", "input"},
    [QF_ROLE_WEIGHT] = {"QF_ROLE_WEIGHT", "weight"},
    [QF_ROLE_GRAD] = {"QF_ROLE_GRAD", "grad"},
};
_Static_assert(sizeof(qf_names_roles) / sizeof(qf_names_roles[0]) == QF_ROLE_COUNT, "roles");

static const qf_enum_entry qf_names_ops[] = {
    [QF_OP_NORM_QUANTIZE] = {"QF_OP_NORM_QUANTIZE", "norm_quantize"},
    [QF_OP_QUANTIZE] = {"QF_OP_QUANTIZE", "quantize"},
    [QF_OP_SCALE_UPDATE] = {"QF_OP_SCALE_UPDATE", "scale_update"},
    [QF_OP_GEMM] = {"QF_OP_GEMM", "gemm"},
};
_Static_assert(sizeof(qf_names_ops) / sizeof(qf_names_ops[0]) == QF_OP_COUNT, "ops");

static const qf_enum_entry qf_names_amax_computes[] = {
    [QF_AMAX_COMPUTE_MAX] = {"QF_AMAX_COMPUTE_MAX", "max"},
    [QF_AMAX_COMPUTE_MOST_RECENT] = {"QF_AMAX_COMPUTE_MOST_RECENT", "most_recent"},
};
_Static_assert(sizeof(qf_names_amax_computes) / sizeof(qf_names_amax_computes[0]) ==
                   QF_AMAX_COMPUTE_COUNT,
               "amax_computes");

static const qf_enum_entry qf_names_scale_roundings[] = {
    [QF_SCALE_ROUNDING_CEIL] = {"QF_SCALE_ROUNDING_CEIL", "ceil"},
    [QF_SCALE_ROUNDING_FLOOR] = {"QF_SCALE_ROUNDING_FLOOR", "floor"},
};
_Static_assert(sizeof(qf_names_scale_roundings) / sizeof(qf_names_scale_roundings[0]) ==
                   QF_SCALE_ROUNDING_COUNT,
               "scale_roundings");

static const qf_enum_entry qf_names_scale_layouts[] = {
    [QF_SCALE_LAYOUT_COMPACT] = {"QF_SCALE_LAYOUT_COMPACT", "compact"},
    [QF_SCALE_LAYOUT_SWIZZLED] = {"QF_SCALE_LAYOUT_SWIZZLED", "swizzled"},
};
_Static_assert(sizeof(qf_names_scale_layouts) / sizeof(qf_names_scale_layouts[0]) ==
                   QF_SCALE_LAYOUT_COUNT,
               "scale_layouts");

static const qf_enum_entry qf_names_fp8_formats[] = {
    [QF_FP8_FORMAT_HYBRID] = {"QF_FP8_FORMAT_HYBRID", "hybrid"},
    [QF_FP8_FORMAT_E4M3] = {"QF_FP8_FORMAT_E4M3", "e4m3"},
};
_Static_assert(sizeof(qf_names_fp8_formats) / sizeof(qf_names_fp8_formats[0]) ==
                   QF_FP8_FORMAT_COUNT,
               "fp8_formats");

static const qf_enum_entry qf_names_slots[] = {
    [QF_SLOT_ROWWISE_DATA] = {"QF_SLOT_ROWWISE_DATA", "rowwise_data"},
    [QF_SLOT_ROWWISE_SCALE_INV] = {"QF_SLOT_ROWWISE_SCALE_INV", "rowwise_scale_inv"},
    [QF_SLOT_COLUMNWISE_DATA] = {"QF_SLOT_COLUMNWISE_DATA", "columnwise_data"},
    [QF_SLOT_COLUMNWISE_SCALE_INV] = {"QF_SLOT_COLUMNWISE_SCALE_INV", "columnwise_scale_inv"},
    [QF_SLOT_AMAX] = {"QF_SLOT_AMAX", "amax"},
    [QF_SLOT_SCALE_INV] = {"QF_SLOT_SCALE_INV", "scale_inv"},
    [QF_SLOT_AMAX_ROWWISE] = {"QF_SLOT_AMAX_ROWWISE", "amax_rowwise"},
    [QF_SLOT_AMAX_COLUMNWISE] = {"QF_SLOT_AMAX_COLUMNWISE", "amax_columnwise"},
    [QF_SLOT_MU] = {"QF_SLOT_MU", "mu"},
    [QF_SLOT_RSIGMA] = {"QF_SLOT_RSIGMA", "rsigma"},
};
_Static_assert(sizeof(qf_names_slots) / sizeof(qf_names_slots[0]) == QF_SLOT_COUNT, "slots");

typedef struct qf_enum_table {
    const qf_enum_entry *entries;
    int count;
} qf_enum_table;

/* ORDER ENUM */
static const qf_enum_table qf_names_tables[] = {
    [QF_ENUM_DTYPE] = {qf_names_dtypes, QF_COUNTOF(qf_names_dtypes)},
    [QF_ENUM_NORM] = {qf_names_norms, QF_COUNTOF(qf_names_norms)},
    [QF_ENUM_FAMILY] = {qf_names_families, QF_COUNTOF(qf_names_families)},
    [QF_ENUM_ROLE] = {qf_names_roles, QF_COUNTOF(qf_names_roles)},
    [QF_ENUM_OP] = {qf_names_ops, QF_COUNTOF(qf_names_ops)},
    [QF_ENUM_AMAX_COMPUTE] = {qf_names_amax_computes, QF_COUNTOF(qf_names_amax_computes)},
    [QF_ENUM_SCALE_ROUNDING] = {qf_names_scale_roundings, QF_COUNTOF(qf_names_scale_roundings)},
    [QF_ENUM_SCALE_LAYOUT] = {qf_names_scale_layouts, QF_COUNTOF(qf_names_scale_layouts)},
    [QF_ENUM_FP8_FORMAT] = {qf_names_fp8_formats, QF_COUNTOF(qf_names_fp8_formats)},
    [QF_ENUM_SLOT] = {qf_names_slots, QF_COUNTOF(qf_names_slots)},
};
_Static_assert(sizeof(qf_names_tables) / sizeof(qf_names_tables[0]) == QF_ENUM_COUNT,
               "enum tables");

static const qf_enum_entry *qf_names_get(qf_enum kind, int v) {
    if ((unsigned)kind >= QF_ENUM_COUNT)
        return NULL;
    const qf_enum_table *t = &qf_names_tables[kind];
    return v >= 0 && v < t->count ? &t->entries[v] : NULL;
}

const char *qf_enum_c(qf_enum kind, int v) {
    const qf_enum_entry *e = qf_names_get(kind, v);
    return e ? e->c : NULL;
}

const char *qf_enum_name(qf_enum kind, int v) {
    const qf_enum_entry *e = qf_names_get(kind, v);
    return e ? e->name : NULL;
}

int qf_enum_count(qf_enum kind) {
    return (unsigned)kind < QF_ENUM_COUNT ? qf_names_tables[kind].count : 0;
}

int qf_enum_find(qf_enum kind, const char *s, size_t len) {
    for (int v = 0; v < qf_enum_count(kind); v++) {
        const char *n = qf_enum_name(kind, v);
        if (strlen(n) == len && memcmp(n, s, len) == 0)
            return v;
    }
    return -1;
}
