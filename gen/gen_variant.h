/* gen_variant.h: recipe -> kernel variants (descriptor + config), their invariants and the
 * placeholder values of their templates. */
#ifndef QF_GEN_VARIANT_H
#define QF_GEN_VARIANT_H

#include <stdio.h>

#include "gen_buf.h"
#include "gen_recipe.h"

#define QF_GEN_KERNEL_NAME_MAX 95 /* qf_kernel_info.name holds 96 bytes */
#define QF_GEN_VARIANTS_MAX 32    /* per recipe */

/* The problem: what one kernel computes. Dimensions M and K are run-time arguments; no dimension
 * is baked into the source as a constant (a new M or K never changes the code). */
typedef struct qf_gen_kernel_desc {
    char name[QF_GEN_KERNEL_NAME_MAX + 1]; /* C identifier, unique, the CUDA entry symbol */
    qf_op op;
    qf_role role;
    qf_norm norm;            /* QF_NORM_NONE for quantize and scale update */
    int zero_centered_gamma; /* 0/1 */
    qf_dtype in_dtype;       /* x (fp32 for the scale update; A's format for a GEMM) */
    qf_dtype out_dtype;      /* element format written (E4M3 for the scale update, bf16 y for a
                              * GEMM) */
} qf_gen_kernel_desc;

/* The chosen config: how the kernel runs. */
typedef struct qf_gen_kernel_config {
    unsigned block_threads;    /* threads per block */
    unsigned tile_m;           /* rows of x per block: grid = cdiv(M, tile_m) */
    unsigned smem_bytes;       /* dynamic shared memory per block */
    const char *template_name; /* file name under the templates dir ("smxx_fp8_scale_update.cu") */
} qf_gen_kernel_config;

typedef struct qf_gen_variant {
    qf_gen_kernel_desc desc;
    qf_gen_kernel_config cfg;
} qf_gen_variant;

/* Expands recipe r into its kernel variants, sorted by name. Returns the count (<= cap) or -1. */
int qf_gen_variants_expand(const qf_gen_recipe *r, qf_gen_variant *out, int cap, qf_gen_err *e);

/* Checks the invariants of r's variants before anything is written (STYLE 14): valid unique
 * names, enums in range, block_threads a multiple of 32 in 32..1024, tile_m > 0, shared memory
 * within 48 KiB. Returns 0 or -1 naming the variant and the broken rule. */
int qf_gen_variants_check(const qf_gen_recipe *r, const qf_gen_variant *v, int n, qf_gen_err *e);

void qf_gen_kernel_desc_print(FILE *f, const qf_gen_kernel_desc *d);
void qf_gen_kernel_config_print(FILE *f, const qf_gen_kernel_config *c);

/* Placeholder values of one variant's template: "__NAME__" -> text. */
#define QF_GEN_VALUES_MAX 12
typedef struct qf_gen_values {
    int n;
    char name[QF_GEN_VALUES_MAX][32];
    char value[QF_GEN_VALUES_MAX][QF_GEN_KERNEL_NAME_MAX + 1];
} qf_gen_values;

/* The values the variant's template expects (the placeholder contract of templates/):
 * every kernel: __KERNEL_NAME__ __BLOCK_THREADS__;
 * scale update (fp8_delayed): __MARGIN__ __AMAX_COMPUTE__;
 * norm/quantize: __NORM__ __ZERO_CENTERED_GAMMA__ __IN_DTYPE__ __OUT_DTYPE__ __TILE_M__, and for
 *   mxfp8 also __SCALE_ROUNDING__ (QF_SCALE_ROUNDING_*) and __BLOCK_2D__ (0/1);
 * GEMM (mxfp8): __A_DTYPE__ __B_DTYPE__ __TILE_M__. */
void qf_gen_variant_values(const qf_gen_recipe *r, const qf_gen_variant *v, qf_gen_values *out);

/* 1 when kernel d of recipe r quantizes in 32x32 blocks (mxfp8 weights with weight_2d, SPEC 2.3),
 * 0 for 1x32 blocks or a non-MXFP8 kernel. */
int qf_gen_variant_block_2d(const qf_gen_recipe *r, const qf_gen_kernel_desc *d);

#endif /* QF_GEN_VARIANT_H */
