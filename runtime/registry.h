/* registry.h: types of the generated registry (out/registry.c) and shape functions (out/shapes.c).
 *
 * The generator qfuse-gen emits one qf_recipe_entry per recipe file, each CUDA template and each
 * shared device header once, and one qf_kernel_entry per kernel variant: the variant's short
 * prelude (its constants) and a pointer to its template. The text handed to NVRTC is prelude +
 * template (qf_kernel_text), so the runtime needs no file access to compile a kernel. */
#ifndef QF_REGISTRY_H
#define QF_REGISTRY_H

#include "qfuse.h"

/* Question asked of a fake-shape function (SPEC 4). Unused fields are ignored. */
typedef struct qf_shape_query {
    qf_op op;           /* QF_OP_NORM_QUANTIZE, QF_OP_QUANTIZE or QF_OP_GEMM */
    qf_role role;       /* QF_OP_QUANTIZE: which role's format */
    qf_norm norm;       /* QF_OP_NORM_QUANTIZE: layernorm has mu, rmsnorm does not */
    unsigned outputs;   /* QF_OUT_ROWWISE | QF_OUT_COLUMNWISE */
    int64_t M, N, K;    /* GEMM: y[M, N] = A[M, K] B[N, K]^T; quantizers: x[M, K] */
} qf_shape_query;

/* Fills out[0..] with every output of the query and returns their count; returns -1 when the query
 * is invalid (negative or zero dims, unknown op, no output selected) and -2 when cap is too small.
 * Pure C: touches no GPU. */
typedef int (*qf_shapes_fn)(const qf_shape_query *q, qf_shape *out, int cap);

typedef struct qf_recipe_entry {
    const char *name;                 /* file stem: "fp8_delayed" */
    const char *file;                 /* "recipes/fp8_delayed.lua" */
    qf_family family;
    qf_dtype fmt[QF_ROLE_COUNT];      /* element format per role */
    float margin;                     /* fp8_delayed */
    int amax_history_len;             /* fp8_delayed */
    qf_amax_compute amax_compute;     /* fp8_delayed */
    qf_scale_rounding scale_rounding; /* mxfp8: E8M0 exponent rounding (SPEC 2.3) */
    int weight_2d;                    /* mxfp8: 1 = the weight role's quantize kernels use
                                       * 32x32 blocks, 0 = 1x32 like every other kernel;
                                       * nvfp4: 16x16 tiles vs 1x16 blocks (SPEC 2.4) */
    unsigned rht_roles;               /* nvfp4: bit (1u << role) set = RHT on the columnwise
                                       * copy of that role (input, grad) */
    int sr_grad;                      /* nvfp4: stochastic rounding of gradients */
    int has_rht_seed;                 /* nvfp4: 1 = RHT signs from rht_seed, 0 = TE's fixed mask
                                       * 0xD7E8 */
    uint64_t rht_seed;                /* nvfp4: see has_rht_seed */
    const char *options;              /* canonical "key=value;..." of every option, sorted by key */
    qf_shapes_fn shapes;
} qf_recipe_entry;

/* One CUDA template, stored once and shared by every variant rendered from it. */
typedef struct qf_kernel_template {
    const char *file;                 /* "templates/smxx_fp8_norm_quantize.cu" */
    const char *text;                 /* the template, byte for byte */
} qf_kernel_template;

/* The entry points a kernel module can hold: `<name><suffix>` (qf_kernel_entry_suffix). ORDER
 * ENTRY: qf_entry_suffixes in kernel_key.c and the entry names in gen/gen_emit.c. */
typedef enum qf_entry {
    QF_ENTRY_MAIN = 0,  /* <name> */
    QF_ENTRY_ROWS1 = 1, /* <name>_rows1 .. _rows8: row-in-registers entries (QF_ROWS_ENTRIES) */
    QF_ENTRY_ROWS2 = 2,
    QF_ENTRY_ROWS4 = 3,
    QF_ENTRY_ROWS8 = 4,
    QF_ENTRY_AMAX = 5,  /* <name>_amax: first pass of a two-pass module (QF_AMAX_ENTRY) */
    QF_ENTRY_COLS = 6,  /* <name>_cols: columnwise copy after a rows entry (QF_COLS_ENTRY) */
    QF_ENTRY_ALPHA = 7, /* <name>_alpha: device-side GEMM alpha (QF_ALPHA_ENTRY) */
    QF_ENTRY_COUNT
} qf_entry;
#define QF_ENTRY_BIT(e) (1u << (e))

typedef struct qf_kernel_entry {
    const char *name;                 /* unique variant name = CUDA entry symbol */
    int recipe;                       /* index into qf_recipes */
    qf_family family;                 /* qf_recipes[recipe].family, for code that has no
                                       * registry (kernel_key.c inside qfuse-gen) */
    qf_op op;
    qf_role role;
    qf_norm norm;                     /* QF_NORM_NONE for quantize / scale update */
    int zero_centered_gamma;
    qf_dtype in_dtype;                /* x dtype (fp32 for scale update) */
    qf_dtype out_dtype;               /* element format written */
    unsigned block_threads;           /* launch: threads per block */
    unsigned tile_m;                  /* launch: rows of x per block (grid = cdiv(M, tile_m)) */
    const qf_kernel_template *tpl;    /* the template it is rendered from (qf_templates) */
    const char *prelude;              /* banner, the template's constants as #defines, then
                                       * #line 1 back to the template (STYLE 13) */
    unsigned entries;                 /* QF_ENTRY_BIT of every entry point the module has */
} qf_kernel_entry;

/* In-memory headers handed to NVRTC with every kernel (qf_formats.h and the shared device
 * headers templates/qf_dev_*.cuh), names and texts, sorted by name. */
extern const char *const qf_nvrtc_header_names[];
extern const char *const qf_nvrtc_headers[];
extern const int qf_nvrtc_header_count;

extern const qf_kernel_template qf_templates[];
extern const int qf_template_count;

extern const qf_recipe_entry qf_recipes[];
extern const int qf_recipe_count;
extern const qf_kernel_entry qf_kernels[];
extern const int qf_kernel_count;

#endif /* QF_REGISTRY_H */
