/* gen_plan.h: everything one qfuse-gen run produces, computed in memory before anything is
 * written: validated recipes, their variants, the templates and shared headers, and each
 * kernel's prelude, entry points and full source. */
#ifndef QF_GEN_PLAN_H
#define QF_GEN_PLAN_H

#include "gen_buf.h"
#include "gen_recipe.h"
#include "gen_shape.h"
#include "gen_variant.h"
#include "kernel_key.h"

#define QF_GEN_TEMPLATES_MAX 16
#define QF_GEN_HEADERS_MAX 16 /* qf_formats.h + the templates' qf_dev_*.cuh */

/* Where the generator reads its inputs. */
typedef struct qf_gen_opts {
    const char *templates_dir; /* default "templates"; also holds the qf_dev_*.cuh headers */
    const char *include_dir;   /* holds qf_formats.h; default "runtime" */
    qf_gen_limits limits;      /* recipe sandbox caps; zeros = defaults */
} qf_gen_opts;

typedef struct qf_gen_plan_recipe {
    qf_recipe recipe;
    const char *path;                             /* the file it was read from (not owned) */
    int index;                                    /* its place among the paths given */
    const qf_fake_table *shapes;
    int n_variants;
    qf_gen_variant variants[QF_GEN_VARIANTS_MAX]; /* sorted by name */
    char *sources[QF_GEN_VARIANTS_MAX];           /* full text of kernels/<name>.cu: prelude +
                                                   * template, as NVRTC sees it (owned) */
    size_t source_lens[QF_GEN_VARIANTS_MAX];
    char *preludes[QF_GEN_VARIANTS_MAX];          /* banner, #defines, #line (owned) */
    unsigned entries[QF_GEN_VARIANTS_MAX];        /* QF_ENTRY_BIT of its entry points */
} qf_gen_plan_recipe;

typedef struct qf_gen_plan {
    int n_recipes;
    qf_gen_plan_recipe *recipes; /* sorted by name (owned) */
    int n_headers;               /* in-memory NVRTC headers, sorted by name */
    char *header_names[QF_GEN_HEADERS_MAX]; /* "qf_dev_load.cuh", ..., "qf_formats.h" (owned) */
    char *header_texts[QF_GEN_HEADERS_MAX]; /* their bytes (owned) */
    int n_templates;
    const char *templates[QF_GEN_TEMPLATES_MAX]; /* template file names in use, sorted */
    char *template_texts[QF_GEN_TEMPLATES_MAX];  /* their bytes, same order (owned) */
} qf_gen_plan;

/* Loads and validates the n recipe files, reads the headers (include_dir/qf_formats.h and
 * templates_dir/qf_dev_*.cuh, which may hold no placeholder), expands and checks the variants
 * and renders every kernel's prelude and source. Returns 0, or -1 with the message in e (p is
 * then empty). Writes nothing. */
int qf_gen_plan_build(qf_gen_plan *p, const qf_gen_opts *o, const char *const *paths, int n,
                      qf_gen_err *e);
void qf_gen_plan_free(qf_gen_plan *p);

/* Fusion key (numerics 5) of variant vi of recipe ri for arch (90 for sm_90), default instance, as
 * the runtime computes it from the registry. hex holds 32 hex digits + NUL. */
void qf_gen_plan_key(const qf_gen_plan *p, int ri, int vi, int arch, char hex[33]);
/* Same for instance inst (NULL = the default instance). */
void qf_gen_plan_key_instance(const qf_gen_plan *p, int ri, int vi, int arch,
                              const qf_kernel_instance *inst, char hex[33]);

/* Index of template file name tname in p->templates, or -1. */
int qf_gen_plan_template_index(const qf_gen_plan *p, const char *tname);

/* "recipes/a.lua, recipes/b.lua" of the plan; the banner's `from` list. */
void qf_gen_plan_recipe_list(const qf_gen_plan *p, qf_gen_buf *b);
/* "templates/x.cu, templates/y.cu" of the plan. */
void qf_gen_plan_template_list(const qf_gen_plan *p, qf_gen_buf *b);

#endif /* QF_GEN_PLAN_H */
