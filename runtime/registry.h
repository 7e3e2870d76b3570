/* registry.h: types of the generated registry (out/registry.c) and shape functions (out/shapes.c).
 *
 * The generator qfuse-gen emits one qf_recipe per recipe file and one qf_kernel_entry per
 * kernel variant, with the full CUDA source of the variant embedded, so the runtime needs no file
 * access to compile a kernel. */
#ifndef QF_REGISTRY_H
#define QF_REGISTRY_H

#include "family.h"
#include "qfuse.h"

/* Question asked of a fake-shape function (SPEC 4). Unused fields are ignored. */
typedef struct qf_shape_query {
    qf_op op;           /* QF_OP_NORM_QUANTIZE, QF_OP_QUANTIZE or QF_OP_GEMM */
    qf_role role;       /* QF_OP_QUANTIZE: which role's format */
    qf_norm norm;       /* QF_OP_NORM_QUANTIZE: layernorm has mu, rmsnorm does not */
    unsigned outputs;   /* QF_OUT_ROWWISE | QF_OUT_COLUMNWISE */
    int64_t M, N, K;    /* GEMM: y[M, N] = A[M, K] B[N, K]^T; quantizers: x[M, K] */
} qf_shape_query;

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
    const char *template_file;        /* "templates/smxx_fp8_norm_quantize.cu" */
    const char *source;               /* full generated CUDA source */
} qf_kernel_entry;

/* In-memory headers handed to NVRTC with every kernel (qf_formats.h), names and texts. */
extern const char *const qf_nvrtc_header_names[];
extern const char *const qf_nvrtc_headers[];
extern const int qf_nvrtc_header_count;

extern const qf_recipe qf_recipes[];
extern const int qf_recipe_count;
extern const qf_kernel_entry qf_kernels[];
extern const int qf_kernel_count;

#endif /* QF_REGISTRY_H */
