/* gen_variant.h: recipe -> kernel variants (descriptor + config), their invariants and the
 * placeholder values of their templates. */
#ifndef QF_GEN_VARIANT_H
#define QF_GEN_VARIANT_H

#include <stdio.h>

#include "gen_buf.h"
#include "gen_recipe.h"

#define QF_KERNEL_NAME_MAX 95 /* qf_kernel_info.name holds 96 bytes */
#define QF_GEN_VARIANTS_MAX 32    /* per recipe */

/* The problem: what one kernel computes. Dimensions M and K are run-time arguments; no dimension
 * is baked into the source as a constant (a new M or K never changes the code). */
typedef struct qf_kernel_desc {
    char name[QF_KERNEL_NAME_MAX + 1]; /* C identifier, unique, the CUDA entry symbol */
    qf_op op;
    qf_role role;
    qf_norm norm;            /* QF_NORM_NONE for quantize and scale update */
    int zero_centered_gamma; /* 0/1 */
    qf_dtype in_dtype;       /* x (fp32 for the scale update; A's format for a GEMM) */
    qf_dtype out_dtype;      /* element format written (E4M3 for the scale update, bf16 y for a
                              * GEMM) */
} qf_kernel_desc;

/* The chosen config: how the kernel runs. */
typedef struct qf_gen_kernel_config {
    unsigned block_threads;    /* threads per block */
    unsigned tile_m;           /* rows of x per block: grid = cdiv(M, tile_m) */
    unsigned smem_bytes;       /* dynamic shared memory per block */
    const char *template_name; /* file name under the templates dir ("smxx_fp8_scale_update.cu") */
} qf_gen_kernel_config;

typedef struct qf_gen_variant {
    qf_kernel_desc desc;
    qf_gen_kernel_config cfg;
} qf_gen_variant;

/* Expands recipe r into its kernel variants, sorted by name. Returns the count (<= cap) or -1. */
int qf_gen_variants_expand(const qf_recipe *r, qf_gen_variant *out, int cap, qf_gen_err *e);

/* Checks the invariants of r's variants before anything is written (STYLE 14): valid unique
 * names, enums in range, block_threads a multiple of 32 in 32..1024, tile_m > 0, shared memory
 * within 48 KiB. Returns 0 or -1 naming the variant and the broken rule. */
int qf_gen_variants_check(const qf_recipe *r, const qf_gen_variant *v, int n, qf_gen_err *e);

void qf_gen_kernel_desc_print(FILE *f, const qf_kernel_desc *d);
void qf_gen_kernel_config_print(FILE *f, const qf_gen_kernel_config *c);

/* Placeholder values of one variant's template: "__NAME__" -> text. */
#define QF_GEN_VALUES_MAX 12
typedef struct qf_gen_values {
    int n;
    char name[QF_GEN_VALUES_MAX][32];
    char value[QF_GEN_VALUES_MAX][QF_KERNEL_NAME_MAX + 1];
} qf_gen_values;

/* The values the variant's template expects (the placeholder contract of templates/):
 * every kernel: __KERNEL_NAME__ __BLOCK_THREADS__;
 * scale update (fp8_delayed): __MARGIN__ __AMAX_COMPUTE__;
 * norm/quantize: __NORM__ __ZERO_CENTERED_GAMMA__ __IN_DTYPE__ __OUT_DTYPE__ __TILE_M__, and for
 *   mxfp8 also __SCALE_ROUNDING__ (QF_SCALE_ROUNDING_*) and __BLOCK_2D__ (0/1);
 * GEMM (mxfp8): __A_DTYPE__ __B_DTYPE__ __TILE_M__;
 * nvfp4 norm/quantize: __NORM__ __ZERO_CENTERED_GAMMA__ __IN_DTYPE__ __RHT__ (0/1) __RHT_MASK__
 *   (hex literal "0xD7E8", 0x0000 without RHT) __STOCHASTIC_ROUNDING__ (0/1) __BLOCK_2D__ (0/1)
 *   __TILE_M__ (no __OUT_DTYPE__: always E2M1); GEMM (nvfp4): __TILE_M__ only. */
void qf_gen_variant_values(const qf_recipe *r, const qf_gen_variant *v, qf_gen_values *out);

/* 1 when kernel d of recipe r quantizes weights in 2D tiles (weight_2d: mxfp8 32x32, SPEC 2.3;
 * nvfp4 16x16, SPEC 2.4), 0 for 1D blocks or a kernel of another family. */
int qf_gen_variant_block_2d(const qf_recipe *r, const qf_kernel_desc *d);

/* nvfp4 (SPEC 2.4): 1 when quantizer d applies the RHT to its columnwise copy (input with
 * rht_input, grad with rht_grad), 0 otherwise and for every kernel of another family. */
int qf_gen_variant_rht(const qf_recipe *r, const qf_kernel_desc *d);
/* nvfp4: 1 when quantizer d rounds stochastically (grad with stochastic_rounding_grad). */
int qf_gen_variant_sr(const qf_recipe *r, const qf_kernel_desc *d);
/* nvfp4: the RHT sign mask of d (bit k set: s_k = -1): TE's 0xD7E8, or drawn from rht_seed
 * (qf_nvfp4_rht_mask_from_seed_ref); 0 when d applies no RHT. */
unsigned qf_gen_variant_rht_mask(const qf_recipe *r, const qf_kernel_desc *d);

#endif /* QF_GEN_VARIANT_H */
