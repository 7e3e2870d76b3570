/* registry.h: types of the generated registry (build/generated/registry.c) and shape functions
 * (build/generated/shapes.c).
 *
 * The generator qfuse-gen emits one qf_recipe per recipe file, each CUDA template and each
 * shared device header once, and one qf_kernel_entry per kernel variant: the variant's short
 * prelude (its constants) and a pointer to its template. The text handed to NVRTC is prelude +
 * template (qf_kernel_text), so the runtime needs no file access to compile a kernel. */
#ifndef QF_REGISTRY_H
#define QF_REGISTRY_H

#include "family.h"
#include "qfuse.h"

/* Every QF_OUT_* bit (qf_formats.h): a query with another one is invalid. NOTES: here, not in
 * qf_formats.h, which every kernel includes: a host-only name there would change every kernel's
 * source text, hence every fusion key. */
#define QF_OUT_KNOWN (QF_OUT_ROWWISE | QF_OUT_COLUMNWISE | QF_OUT_FP32 | QF_OUT_GATED)

/* Question asked of a fake-shape function (numerics 4). Sizes, role, norm and dtype the op does
 * not use are ignored; enums out of range, and outputs bits other than the op's, are refused. */
typedef struct qf_shape_query {
    qf_op op;           /* any qf_op but QF_OP_SCALE_UPDATE */
    qf_role role;       /* QF_OP_QUANTIZE: which role's format */
    qf_norm norm;       /* QF_OP_NORM_QUANTIZE: layernorm has mu, rmsnorm does not;
                         * QF_OP_NORM_BACKWARD: layernorm has dbeta; QF_OP_QUANTIZE: none */
    unsigned outputs;   /* quantizers: QF_OUT_ROWWISE | QF_OUT_COLUMNWISE; GEMM: QF_OUT_FP32;
                         * activation: QF_OUT_GATED for swiglu */
    int64_t M, N, K;    /* GEMM: y[M, N] = A[M, K] B[N, K]^T; quantizers, norm backward: x[M, K];
                         * dbias: dy [M, N]; activation: a [M, N] (N = F) */
    qf_dtype dtype;     /* norm backward (x's dtype, dx's), dbias (dy's, dbias's), activation
                         * (h's, a's, dh's), quantizers (x's; the shapes do not depend on it):
                         * bf16, fp16 or fp32. NOTES: QF_DTYPE_FP32 is 0, so a query that leaves
                         * it unset asks for fp32. */
} qf_shape_query;

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
    QF_ENTRY_DEQUANT = 8, /* <name>_dequant: one block-scaled copy to bf16 (QF_DEQUANT_ENTRY) */
    QF_ENTRY_REDUCE = 9,  /* <name>_reduce: column sums of per-block partials (QF_REDUCE_ENTRY) */
    QF_ENTRY_GRAD = 10,   /* <name>_grad: the backward of an elementwise module (QF_GRAD_ENTRY) */
    QF_ENTRY_COUNT
} qf_entry;
#define QF_ENTRY_BIT(e) (1u << (e))

typedef struct qf_kernel_entry {
    const char *name;                 /* unique variant name = CUDA entry symbol */
    const qf_recipe *recipe;          /* the recipe it belongs to (qf_recipes or one loaded from a
                                       * file at run time) */
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

extern const qf_recipe qf_recipes[];
extern const int qf_recipe_count;
extern const qf_kernel_entry qf_kernels[];
extern const int qf_kernel_count;

#endif /* QF_REGISTRY_H */
