/* gen_variant.h: recipe -> kernel variants (descriptor + config), their invariants and the
 * placeholder values of their templates. */
#ifndef QF_GEN_VARIANT_H
#define QF_GEN_VARIANT_H

#include <stdio.h>

#include "gen_buf.h"
#include "gen_recipe.h"
#include "registry.h"

#define QF_GEN_VARIANTS_MAX 64    /* per recipe (34 today: 19 forward, 15 backward) */

/* The problem: qf_kernel_desc (runtime/family.h). */

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

/* The values the variant's template expects (the placeholder contract of templates/), from its
 * family's row: __KERNEL_NAME__ and __BLOCK_THREADS__ always; the descriptor's constants the op
 * declares (QF_TC_*: __NORM__ __ZERO_CENTERED_GAMMA__ __IN_DTYPE__ __OUT_DTYPE__ __TILE_M__);
 * and every schema field's template constant for this op (a constant set by several fields,
 * one per role, appears once, with the kernel's role's value). */
void qf_gen_variant_values(const qf_recipe *r, const qf_gen_variant *v, qf_gen_values *out);

/* The registry entry (registry.h) of variant v of recipe r over template tpl, with its rendered
 * prelude and entry points (QF_ENTRY_BIT flags): what qfuse-gen emits into
 * build/generated/registry.c and the runtime builds for a recipe file. Points into r, v, tpl and
 * prelude (not owned). */
qf_kernel_entry qf_gen_variant_entry(const qf_recipe *r, const qf_gen_variant *v,
                                     const qf_kernel_template *tpl, const char *prelude,
                                     unsigned entries);

#endif /* QF_GEN_VARIANT_H */
