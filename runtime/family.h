/* family.h: the families table (DESIGN "The families table"): one row per recipe family, read by
 * the generator and the runtime alike, and the one recipe struct both of them fill.
 *
 * A row holds the family's recipe schema (every field: name, type, allowed values or range,
 * default, whether it enters the fusion key, which template constant it sets), its element
 * format per role, the ops it supports with their template, launch config and template
 * constants, its fake-shape table (numerics 4), its GEMM path per architecture. Reading a recipe,
 * defaults, validation, the options string (the key), registry emission, the manifest and the
 * template values are loops over these rows (ggml's type_traits is the model). Adding a family
 * is a row, its template step, its reference, its recipe file and tests. */
#ifndef QF_FAMILY_H
#define QF_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "qfuse.h"

/* ========================================================================= the recipe */

#define QF_RECIPE_NAME_MAX 48 /* recipe names are part of every kernel name */
#define QF_RECIPE_DESCRIPTION_MAX 255
#define QF_RECIPE_OPTIONS_MAX 320 /* the canonical options string, NUL included */

/* Shape function of one recipe (numerics 4): fills out[0..] with every output of the query and
 * returns their count; -1 when the query is invalid, -2 when cap is too small. Pure C. */
typedef struct qf_shape_query qf_shape_query;
typedef int (*qf_shapes_fn)(const qf_shape_query *q, qf_shape *out, int cap);

/* A validated recipe, every option holding its value (defaults filled in). The generator fills it
 * from a recipe file and emits it into the registry (build/generated/registry.c); the runtime reads
 * the registry's or loads a recipe file into one itself. Members a family's schema does not name
 * keep their zero (or per-family) defaults. Does not own anything. */
typedef struct qf_recipe {
    char name[QF_RECIPE_NAME_MAX + 1];  /* file stem: "fp8_delayed" ([a-z0-9_]+) */
    char file[QF_RECIPE_NAME_MAX + 16]; /* canonical "recipes/<name>.lua" (generated files) */
    char path[256];                     /* the path it was read from (messages) */
    char description[QF_RECIPE_DESCRIPTION_MAX + 1];
    qf_family family;
    qf_dtype fmt[QF_ROLE_COUNT];      /* element format per role */
    qf_fp8_format format;             /* per-tensor FP8: the `format` option */
    int64_t margin;                   /* fp8_delayed: 0..32 */
    int64_t amax_history_len;         /* fp8_delayed: 1..8192 */
    qf_amax_compute amax_compute;     /* fp8_delayed */
    qf_scale_rounding scale_rounding; /* mxfp8: E8M0 exponent rounding (numerics 2.3) */
    int block_2d[QF_ROLE_COUNT];      /* 2D weight tiles (mxfp8 32x32, nvfp4 16x16): weight only */
    int rht[QF_ROLE_COUNT];           /* nvfp4: RHT on that role's columnwise copy */
    int sr[QF_ROLE_COUNT];            /* nvfp4: stochastic rounding of that role */
    int64_t rht_seed;                 /* nvfp4: RHT signs from this seed; -1: TE's mask 0xD7E8 */
    float amax_epsilon;               /* fp8_current: lower bound of the amax (numerics 2.2) */
    int power_2_scales;               /* fp8_current: scales rounded down to powers of two */
    char options[QF_RECIPE_OPTIONS_MAX]; /* canonical "key=value;..." of every key field */
    qf_shapes_fn shapes;              /* generated shape function; NULL: the family's table is
                                       * interpreted (qf_family_shapes) */
    const struct qf_kernel_entry *kernels; /* its kernel variants (registry.h), sorted by name */
    int n_kernels;
} qf_recipe;

/* ========================================================================= the schema */

/* How a recipe field is read and stored. ORDER FIELD */
typedef enum qf_field_type {
    QF_FIELD_OPTION = 0,  /* a string naming a value of enum `names`; stored as that enum */
    QF_FIELD_INTEGER = 1, /* an integer in lo..hi; stored as int64_t */
    QF_FIELD_BOOLEAN = 2, /* true/false; stored as int 0/1 */
    QF_FIELD_NUMBER = 3,  /* a number in lo..hi (finite); stored as float */
    QF_FIELD_COUNT
} qf_field_type;

/* A template constant's value for one kernel (e.g. the RHT sign mask of its role). */
typedef struct qf_kernel_desc qf_kernel_desc;
typedef void (*qf_field_value_fn)(const qf_recipe *r, const qf_kernel_desc *d, char *buf,
                                  size_t n);

/* One field of a recipe schema. */
typedef struct qf_field {
    const char *name;    /* the recipe key: "margin" */
    qf_field_type type;
    size_t offset;       /* of its value in qf_recipe */
    const char *member;  /* that member as C ("margin", "rht[QF_ROLE_INPUT]"): registry code */
    int names;           /* QF_FIELD_OPTION: the qf_enum of its values */
    unsigned allowed;    /* QF_FIELD_OPTION: bit v set = value v allowed (0: every value) */
    int64_t lo, hi;      /* QF_FIELD_INTEGER: the range */
    double min, max;     /* QF_FIELD_NUMBER: the range */
    double def;          /* default: enum value, integer, 0/1 or number */
    const char *absent;  /* QF_FIELD_INTEGER: the text of the default, a value outside lo..hi
                          * meaning "not given" ("none": rht_seed), else NULL */
    int key;             /* 1: enters the options string, hence the fusion key (numerics 5) */
    int sets_formats;    /* QF_FIELD_OPTION over QF_ENUM_FP8_FORMAT: sets fmt[] per role */
    const char *tpl;     /* template constant it sets ("__MARGIN__"), or NULL */
    unsigned tpl_ops;    /* ops (1u << qf_op) whose templates take tpl */
    size_t tpl_array;    /* > 0: tpl's value is element [role of the kernel] of the int array
                          * at this offset in qf_recipe (the field sets one of its elements) */
    qf_field_value_fn tpl_value; /* tpl's value when not derived from the type, else NULL */
} qf_field;

/* ========================================================================= ops and kernels */

/* Template constants every kernel of an op may take from its descriptor. */
#define QF_TC_NORM 1u       /* __NORM__ */
#define QF_TC_ZCG 2u        /* __ZERO_CENTERED_GAMMA__ */
#define QF_TC_IN_DTYPE 4u   /* __IN_DTYPE__ */
#define QF_TC_OUT_DTYPE 8u  /* __OUT_DTYPE__ */
#define QF_TC_TILE_M 16u    /* __TILE_M__ */
#define QF_TC_FAMILY 32u    /* __FAMILY__: the recipe's family (a template two families share) */
#define QF_TC_ROLE 64u      /* __ROLE__: the kernel's role (fp8_block: 128x128 weight tiles) */

/* One op of a family: its template and launch config. A NULL template: not supported. */
typedef struct qf_family_op {
    const char *tpl;        /* file name under templates/ ("smxx_fp8_norm_quantize.cu") */
    unsigned block_threads; /* threads per block */
    unsigned tile_m;        /* rows of x (or y) per block: grid = cdiv(M, tile_m) */
    unsigned consts;        /* QF_TC_* the template takes besides __KERNEL_NAME__ and
                             * __BLOCK_THREADS__ */
} qf_family_op;

/* The problem one kernel variant computes (STYLE 15). M, N and K are run-time arguments. */
#define QF_KERNEL_NAME_MAX 95 /* qf_kernel_info.name holds 96 bytes */
struct qf_kernel_desc {
    char name[QF_KERNEL_NAME_MAX + 1]; /* C identifier, unique, the CUDA entry symbol */
    qf_op op;
    qf_role role;
    qf_norm norm;            /* QF_NORM_NONE for quantize, scale update and GEMM */
    int zero_centered_gamma; /* 0/1 */
    qf_dtype in_dtype;       /* x (fp32 for the scale update; A's format for a GEMM) */
    qf_dtype out_dtype;      /* element format written (bf16 y for a GEMM) */
};

/* ========================================================================= GEMM paths */

/* Who runs a family's GEMM on an architecture. ORDER GEMM_ENGINE */
typedef enum qf_gemm_engine {
    QF_GEMM_NONE = 0,      /* no GEMM on these architectures */
    QF_GEMM_CUBLASLT = 1,  /* cuBLASLt, scale mode lt_mode */
    QF_GEMM_KERNEL = 2,    /* the family's generated GEMM module (QF_OP_GEMM): its GEMM
                            * kernel (direct_kinds, small problems), or staged: its _dequant
                            * entry writes both operands in bf16 and cuBLASLt multiplies them
                            * (op_gemm.c) */
    QF_GEMM_ENGINE_COUNT
} qf_gemm_engine;

/* The GEMM path for compute capabilities arch_lo..arch_hi. */
typedef struct qf_gemm_path {
    int arch_lo, arch_hi;
    qf_gemm_engine engine;
    const char *lt_mode;    /* cuBLASLt scale mode ("VEC32_UE8M0"), for messages */
    qf_scale_layout layout; /* the scale layout that path reads */
    int n_align;            /* N must be a multiple of it (0: any N) */
    unsigned kinds;         /* QF_GEMM_KIND_BIT of each training GEMM the path runs */
    unsigned direct_kinds;  /* QF_GEMM_KERNEL: the kinds its GEMM kernel runs itself */
} qf_gemm_path;

/* The training GEMMs (numerics 6), told apart by the copies of their operands. ORDER GEMM_KIND */
typedef enum qf_gemm_kind {
    QF_GEMM_FPROP = 0, /* y = x W^T: a, b rowwise */
    QF_GEMM_DGRAD = 1, /* dx = dy W: a rowwise (dy), b columnwise (W) */
    QF_GEMM_WGRAD = 2, /* dW = dy^T x: a columnwise (dy), b columnwise (x) */
    QF_GEMM_KIND_COUNT
} qf_gemm_kind;
#define QF_GEMM_KIND_BIT(k) (1u << (k))
#define QF_GEMM_KINDS_ALL (QF_GEMM_KIND_BIT(QF_GEMM_KIND_COUNT) - 1u)

/* What a training GEMM reads: the copy and the quantizer role of each operand. */
typedef struct qf_gemm_kind_traits {
    const char *name; /* "fprop" */
    qf_copy a_copy, b_copy;
    qf_role a_role, b_role;
} qf_gemm_kind_traits;
extern const qf_gemm_kind_traits qf_gemm_kinds[QF_GEMM_KIND_COUNT];

#define QF_GEMM_PATHS_MAX 3

/* ========================================================================= fake shapes */

/* When an output exists. ORDER FAKE_COND */
typedef enum qf_fake_cond {
    QF_FAKE_COND_ALWAYS = 0,
    QF_FAKE_COND_ROWWISE = 1,    /* QF_OUT_ROWWISE selected */
    QF_FAKE_COND_COLUMNWISE = 2, /* QF_OUT_COLUMNWISE selected */
    QF_FAKE_COND_LAYERNORM = 3,  /* norm is layernorm */
    QF_FAKE_COND_NORM = 4,       /* norm is not none */
    QF_FAKE_COND_OUT_BF16 = 5,   /* QF_OUT_FP32 not selected (a GEMM's y in bf16) */
    QF_FAKE_COND_OUT_FP32 = 6,   /* QF_OUT_FP32 selected */
    QF_FAKE_COND_NOT_GATED = 7,  /* QF_OUT_GATED not selected */
    QF_FAKE_COND_GATED = 8,      /* QF_OUT_GATED selected */
    QF_FAKE_COND_COUNT
} qf_fake_cond;

/* dtype value meaning "the format of the op's role" (qf_recipe.fmt). */
#define QF_FAKE_DTYPE_ROLE (-1)
/* dtype value meaning "the query's dtype" (qf_shape_query.dtype: bf16, fp16 or fp32; an op with
 * such an output refuses a query of another dtype). */
#define QF_FAKE_DTYPE_QUERY (-2)
/* role value meaning "the role the query names" (QF_OP_QUANTIZE). */
#define QF_FAKE_ROLE_QUERY (-1)

/* The bit of op in qf_fake_out.ops, and the two quantizer ops (with and without a fused norm). */
#define QF_FAKE_OP(op) (1u << (op))
#define QF_FAKE_QUANTIZERS (QF_FAKE_OP(QF_OP_NORM_QUANTIZE) | QF_FAKE_OP(QF_OP_QUANTIZE))

/* One output of one or more ops. A dim is a formula (numerics.md notation, no spaces): a symbol
 * "M", "N", "K", a decimal constant ("1"), or "roundup(a,b)" / "cdiv(a,b)" of formulas
 * ("roundup(cdiv(K,32),4)"). Dims of an E2M1 output count bytes, two elements each (low nibble
 * first): packed data [M, K/2] is written [M, cdiv(K,2)], and its bytes are the product of its
 * dims. */
typedef struct qf_fake_out {
    unsigned ops; /* the ops that have this output: QF_FAKE_OPS(...) bits */
    const char *name;
    int dtype; /* a qf_dtype, QF_FAKE_DTYPE_ROLE or QF_FAKE_DTYPE_QUERY */
    int ndim;
    const char *dims[4];
    qf_fake_cond cond;
    int scale_layout; /* 1: a block-scale matrix, compact or swizzled (same shape and bytes) */
    unsigned roles;   /* 0: every role; else the QF_FAKE_ROLE bits of the roles that have this
                       * output (the op's role, or the query's for QF_FAKE_ROLE_QUERY): FP8 block
                       * scaling's weights have 128x128 scales, its inputs and grads 1x128 */
} qf_fake_out;

/* The bit of role r in qf_fake_out.roles. */
#define QF_FAKE_ROLE(r) (1u << (r))

/* 1 when output o exists for role (a qf_role; any other value matches only o->roles == 0). */
static inline int qf_fake_out_has_role(const qf_fake_out *o, int role) {
    return o->roles == 0 || (role >= 0 && role < QF_ROLE_COUNT && ((o->roles >> role) & 1u));
}

/* One op a shape function answers. */
/* dbias's largest N (QF_OP_DBIAS, op_bwd.c): its grid (QF_NB_MAX_BLOCKS blocks of rows x column
 * tiles of 256 x 8) fits 2^31 - 1 blocks. Host-only: kept out of qf_formats.h, whose text is in
 * every kernel's source (and fusion key). */
#define QF_DB_MAX_N ((int64_t)1 << 30)

typedef struct qf_fake_op {
    qf_op op;
    const char *dims_used;    /* symbols that must be > 0: "MK", "MNK" */
    int quantizer;            /* needs an output bit (rowwise/columnwise) */
    int role;                 /* the role whose format QF_FAKE_DTYPE_ROLE means, or
                               * QF_FAKE_ROLE_QUERY */
    int needs_norm;           /* the query's norm must be layernorm or rmsnorm */
    int align;                /* > 0: the symbols of dims_aligned must be multiples of it */
    const char *dims_aligned; /* "MK" (nvfp4: 1x16 blocks and 16-row groups), or NULL */
    int64_t max;              /* > 0: the symbols of dims_max must be at most it (what the op's
                               * kernel holds) */
    const char *dims_max;     /* "K" (the norm backward), "N" (dbias), or NULL */
} qf_fake_op;

/* The shape table of a family: its ops and all their outputs. */
typedef struct qf_fake_table {
    const qf_fake_op *ops;
    int n_ops;
    const qf_fake_out *outs;
    int n_outs;
} qf_fake_table;

/* 1 when an output of op in t has dtype `kind` (QF_FAKE_DTYPE_ROLE or QF_FAKE_DTYPE_QUERY). */
static inline int qf_fake_op_uses_dtype(const qf_fake_table *t, qf_op op, int kind) {
    for (int i = 0; i < t->n_outs; i++)
        if ((t->outs[i].ops & QF_FAKE_OP(op)) && t->outs[i].dtype == kind)
            return 1;
    return 0;
}

/* 1 when a query of op o must name dtype bf16, fp16 or fp32: a quantizer's (its input's; the
 * shapes do not depend on it), or one whose outputs take the query's dtype. */
static inline int qf_fake_op_checks_dtype(const qf_fake_table *t, const qf_fake_op *o) {
    return o->quantizer || qf_fake_op_uses_dtype(t, o->op, QF_FAKE_DTYPE_QUERY);
}

/* The conditions a shape query of an op must meet (numerics 4), beyond the ranges of its enums
 * and the output bits the op takes (qf_fake_op_outputs). qf_fake_op_checks lists them once, in
 * the order they are tested; qfuse-gen writes them as C into the generated shape functions and as
 * the manifest's "requires", and qf_family_query_why tells which one a query fails, all three
 * through qf_fake_check_render. ORDER FAKE_CHECK */
typedef enum qf_fake_check_kind {
    QF_FAKE_CHECK_POSITIVE = 0, /* dim > 0 */
    QF_FAKE_CHECK_COPY = 1,     /* rowwise || columnwise (a quantizer) */
    QF_FAKE_CHECK_NORM = 2,     /* norm in {layernorm, rmsnorm} */
    QF_FAKE_CHECK_NO_NORM = 3,  /* norm == none (a plain quantize) */
    QF_FAKE_CHECK_ROLE = 4,     /* role == value (a norm + quantize: its role's only) */
    QF_FAKE_CHECK_DTYPE = 5,    /* dtype in {bf16, fp16, fp32} */
    QF_FAKE_CHECK_ALIGN = 6,    /* dim % value == 0 */
    QF_FAKE_CHECK_MAX = 7,      /* dim <= value */
    QF_FAKE_CHECK_COUNT
} qf_fake_check_kind;

typedef struct qf_fake_check {
    qf_fake_check_kind kind;
    char dim;      /* 'M', 'N' or 'K' (POSITIVE, ALIGN, MAX) */
    int64_t value; /* ALIGN's multiple, MAX's bound, ROLE's qf_role */
} qf_fake_check;

/* The most checks of one op: 3 dims positive, 5 single checks, 3 aligned and 3 bounded dims. */
#define QF_FAKE_MAX_CHECKS 14

/* The checks of op o of table t into out[0..QF_FAKE_MAX_CHECKS), in the order they are tested;
 * returns their count. */
int qf_fake_op_checks(const qf_fake_table *t, const qf_fake_op *o, qf_fake_check *out);

/* 1 when q meets check c. */
int qf_fake_check_holds(const qf_fake_check *c, const qf_shape_query *q);

/* How qf_fake_check_render writes a check: a C expression over `const qf_shape_query *q`, true
 * when q fails it ("q->K % 32 != 0": the generated functions return -1 then); the manifest's
 * condition syntax, true when q meets it ("K % 32 == 0"); why q fails it ("K = 24 is not a
 * multiple of 32 (numerics 4)"; q is read for this one only). */
typedef enum qf_fake_style { QF_FAKE_AS_C, QF_FAKE_AS_TEXT, QF_FAKE_AS_WHY } qf_fake_style;

/* Check c in style s into buf (n bytes, NUL-terminated, truncated to fit). */
void qf_fake_check_render(const qf_fake_check *c, qf_fake_style s, const qf_shape_query *q,
                          char *buf, size_t n);

/* An output's condition (qf_fake_out.cond) as a C expression over q (NULL: always) and in the
 * manifest's syntax ("norm == layernorm"). */
typedef struct qf_fake_cond_text {
    const char *c;
    const char *text;
} qf_fake_cond_text;
extern const qf_fake_cond_text qf_fake_cond_info[QF_FAKE_COND_COUNT];

/* ========================================================================= the row */

typedef struct qf_family_traits {
    const char *name;             /* the recipe's `family` value */
    const char *spec;             /* its numerics section ("numerics 2.1") */
    int implemented;              /* 0: named and reserved, not implemented yet */
    const qf_field *fields;       /* the schema, sorted by name */
    int n_fields;
    qf_dtype fmt[QF_ROLE_COUNT];  /* default element format per role */
    qf_family_op ops[QF_OP_COUNT];
    int scale_layout;             /* 1: quantizers write block scales, compact or swizzled */
    unsigned act_tile;            /* > 0: where M and F are multiples of it, layernorm_mlp
                                   * quantizes a = act(h) in one kernel (qf_quantize_act) and
                                   * its backward q(dh) with db1 (qf_quantize_dbias_act): a and
                                   * dh never stored, the quantizer reading h (and da) once for
                                   * both copies; 0: the unfused stages */
    int act_amax;                 /* 1: layernorm_mlp's forward writes a with its amax in one
                                   * kernel (qf_activation_amax) and casts it (qf_quantize_cast),
                                   * whatever act_tile says: current scaling's amax pass then reads
                                   * nothing, where through act_tile it reads h, twice a's bytes
                                   * under SwiGLU (docs/bench.md; the backward keeps act_tile's
                                   * q(dh): dh written and cast measured slower) */
    const qf_fake_table *shapes;
    qf_gemm_path gemm[QF_GEMM_PATHS_MAX];
    /* Cross-field rules, after every field is read: NULL or a message ("field 'rht_seed' (no
     * effect: ...)") written to msg. NULL function: none. */
    const char *(*check)(const qf_recipe *r, char *msg, size_t n);
} qf_family_traits;

/* The table, indexed by qf_family (designated initializers, pinned to QF_FAMILY_COUNT). */
extern const qf_family_traits qf_families[QF_FAMILY_COUNT];

/* The row of family f, or NULL when f is out of range. */
const qf_family_traits *qf_family_get(qf_family f);

/* The GEMM path of family f on compute capability arch (its engine is QF_GEMM_NONE when no path
 * covers arch). */
qf_gemm_path qf_family_gemm_path(qf_family f, int arch);

/* Fake shapes (numerics 4) of query q under recipe r, interpreted from its family's table: the same
 * answers as the generated shape function of a shipped recipe (build/generated/shapes.c), for
 * recipes loaded at run time. Returns the count of outputs written to out[0..cap), -1 for an
 * invalid query, -2 when cap is too small. Pure C. */
int qf_family_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *out, int cap);

/* Why qf_family_shapes (and so the generated function) rejects q: a reason in buf (n bytes) or
 * a literal; for a query it accepts, the one check left, an output's size overflowing. */
const char *qf_family_query_why(const qf_recipe *r, const qf_shape_query *q, char *buf,
                                size_t n);

/* The QF_OUT_* bits op o of table t reads (a quantizer's rowwise and columnwise, and the bits
 * the conditions of its outputs test): a query with any other bit is invalid (numerics 4). */
unsigned qf_fake_op_outputs(const qf_fake_table *t, const qf_fake_op *o);

/* The most outputs one fake-shape query has (a norm + quantize with both copies: 8). */
#define QF_FAKE_MAX_OUTPUTS 16

/* The formulas of the outputs qf_family_shapes gives for q (the same outputs, order, names and
 * dtypes), into out[0..cap), cap <= QF_FAKE_MAX_OUTPUTS: the family table's strings. Returns
 * the count, -1 for an invalid query, -2 when cap is too small. Pure C. */
int qf_family_formulas(const qf_recipe *r, const qf_shape_query *q, qf_shape_formula *out,
                       int cap);

/* r's generated shape function when it has one, else qf_family_shapes. */
int qf_recipe_shapes(const qf_recipe *r, const qf_shape_query *q, qf_shape *out, int cap);

/* The value of recipe field fd in r, as stored (int for options and booleans). */
const void *qf_field_ptr(const qf_recipe *r, const qf_field *fd);

#endif /* QF_FAMILY_H */
