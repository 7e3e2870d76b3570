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
/* One entry: [C] = {"C", short name}. */
#define QF_NAME(c, name) [c] = {#c, name}
/* A table has one entry per enum value (STYLE 5). */
#define QF_PINNED(table, count) _Static_assert(QF_COUNTOF(table) == (count), #table " vs " #count)

/* ORDER DTYPE */
static const qf_enum_entry qf_names_dtypes[] = {
    QF_NAME(QF_DTYPE_FP32, "fp32"), QF_NAME(QF_DTYPE_FP16, "fp16"),
    QF_NAME(QF_DTYPE_BF16, "bf16"), QF_NAME(QF_DTYPE_E4M3, "e4m3"),
    QF_NAME(QF_DTYPE_E5M2, "e5m2"), QF_NAME(QF_DTYPE_E8M0, "e8m0"),
    QF_NAME(QF_DTYPE_E2M1, "e2m1"),
};
QF_PINNED(qf_names_dtypes, QF_DTYPE_COUNT);

static const qf_enum_entry qf_names_norms[] = {
    QF_NAME(QF_NORM_NONE, "none"),
    QF_NAME(QF_NORM_LAYERNORM, "layernorm"),
    QF_NAME(QF_NORM_RMSNORM, "rmsnorm"),
};
QF_PINNED(qf_names_norms, QF_NORM_COUNT);

static const qf_enum_entry qf_names_families[] = {
    QF_NAME(QF_FAMILY_FP8_DELAYED, "fp8_delayed"),
    QF_NAME(QF_FAMILY_FP8_CURRENT, "fp8_current"),
    QF_NAME(QF_FAMILY_MXFP8, "mxfp8"),
    QF_NAME(QF_FAMILY_NVFP4, "nvfp4"),
    QF_NAME(QF_FAMILY_FP8_BLOCK, "fp8_block"),
};
QF_PINNED(qf_names_families, QF_FAMILY_COUNT);

static const qf_enum_entry qf_names_roles[] = {
    QF_NAME(QF_ROLE_INPUT, "input"),
    QF_NAME(QF_ROLE_WEIGHT, "weight"),
    QF_NAME(QF_ROLE_GRAD, "grad"),
};
QF_PINNED(qf_names_roles, QF_ROLE_COUNT);

static const qf_enum_entry qf_names_ops[] = {
    QF_NAME(QF_OP_NORM_QUANTIZE, "norm_quantize"),
    QF_NAME(QF_OP_QUANTIZE, "quantize"),
    QF_NAME(QF_OP_SCALE_UPDATE, "scale_update"),
    QF_NAME(QF_OP_GEMM, "gemm"),
    QF_NAME(QF_OP_NORM_BACKWARD, "norm_backward"),
    QF_NAME(QF_OP_DBIAS, "dbias"),
    QF_NAME(QF_OP_ACTIVATION, "activation"),
};
QF_PINNED(qf_names_ops, QF_OP_COUNT);

static const qf_enum_entry qf_names_amax_computes[] = {
    QF_NAME(QF_AMAX_COMPUTE_MAX, "max"),
    QF_NAME(QF_AMAX_COMPUTE_MOST_RECENT, "most_recent"),
};
QF_PINNED(qf_names_amax_computes, QF_AMAX_COMPUTE_COUNT);

static const qf_enum_entry qf_names_scale_roundings[] = {
    QF_NAME(QF_SCALE_ROUNDING_CEIL, "ceil"),
    QF_NAME(QF_SCALE_ROUNDING_FLOOR, "floor"),
};
QF_PINNED(qf_names_scale_roundings, QF_SCALE_ROUNDING_COUNT);

static const qf_enum_entry qf_names_scale_layouts[] = {
    QF_NAME(QF_SCALE_LAYOUT_COMPACT, "compact"),
    QF_NAME(QF_SCALE_LAYOUT_SWIZZLED, "swizzled"),
};
QF_PINNED(qf_names_scale_layouts, QF_SCALE_LAYOUT_COUNT);

static const qf_enum_entry qf_names_fp8_formats[] = {
    QF_NAME(QF_FP8_FORMAT_HYBRID, "hybrid"),
    QF_NAME(QF_FP8_FORMAT_E4M3, "e4m3"),
};
QF_PINNED(qf_names_fp8_formats, QF_FP8_FORMAT_COUNT);

static const qf_enum_entry qf_names_slots[] = {
    QF_NAME(QF_SLOT_ROWWISE_DATA, "rowwise_data"),
    QF_NAME(QF_SLOT_ROWWISE_SCALE_INV, "rowwise_scale_inv"),
    QF_NAME(QF_SLOT_COLUMNWISE_DATA, "columnwise_data"),
    QF_NAME(QF_SLOT_COLUMNWISE_SCALE_INV, "columnwise_scale_inv"),
    QF_NAME(QF_SLOT_AMAX, "amax"),
    QF_NAME(QF_SLOT_SCALE_INV, "scale_inv"),
    QF_NAME(QF_SLOT_AMAX_ROWWISE, "amax_rowwise"),
    QF_NAME(QF_SLOT_AMAX_COLUMNWISE, "amax_columnwise"),
    QF_NAME(QF_SLOT_MU, "mu"),
    QF_NAME(QF_SLOT_RSIGMA, "rsigma"),
};
QF_PINNED(qf_names_slots, QF_SLOT_COUNT);

static const qf_enum_entry qf_names_activations[] = {
    QF_NAME(QF_ACT_GELU, "gelu"),
    QF_NAME(QF_ACT_SWIGLU, "swiglu"),
    QF_NAME(QF_ACT_RELU, "relu"),
};
QF_PINNED(qf_names_activations, QF_ACT_COUNT);

static const qf_enum_entry qf_names_copies[] = {
    QF_NAME(QF_COPY_ROWWISE, "rowwise"),
    QF_NAME(QF_COPY_COLUMNWISE, "columnwise"),
};
QF_PINNED(qf_names_copies, QF_COPY_COUNT);

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
    [QF_ENUM_ACTIVATION] = {qf_names_activations, QF_COUNTOF(qf_names_activations)},
    [QF_ENUM_COPY] = {qf_names_copies, QF_COUNTOF(qf_names_copies)},
};
QF_PINNED(qf_names_tables, QF_ENUM_COUNT);

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
