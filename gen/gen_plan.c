/* gen_plan.c: everything one qfuse-gen run produces, computed in memory before anything is
 * written: validated recipes, their variants, the templates and shared headers, and each
 * kernel's prelude, entry points and full source. */
#include "gen_plan.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_render.h"
#include "kernel_key.h"

/* The text (len bytes) read from path, a `what` ("template", "header") that NVRTC compiles: C
 * text, so neither empty nor holding a NUL byte (which would end it early). 0, or -1 with e set. */
static int qf_gen_text_check(const char *path, const char *what, const char *text, size_t len,
                             qf_gen_err *e) {
    if (len == 0)
        return qf_gen_fail(e, "%s: %s is empty", path, what);
    if (strlen(text) != len)
        return qf_gen_fail(e, "%s: %s contains a NUL byte", path, what);
    return 0;
}

/* The text of template `name` under dir, read into p on first use. Returns NULL on error. */
static const char *qf_gen_tpl_get(qf_gen_plan *p, const char *dir, const char *name,
                                  qf_gen_err *e) {
    for (int i = 0; i < p->n_templates; i++)
        if (strcmp(p->templates[i], name) == 0)
            return p->template_texts[i];
    if (p->n_templates == QF_GEN_TEMPLATES_MAX) {
        qf_gen_fail(e, "more than %d templates", QF_GEN_TEMPLATES_MAX);
        return NULL;
    }
    char path[4096];
    size_t len;
    char *text;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (qf_gen_read_file(path, "template", &text, &len, e) != 0)
        return NULL;
    if (qf_gen_text_check(path, "template", text, len, e) != 0) {
        free(text);
        return NULL;
    }
    p->templates[p->n_templates] = name;
    return p->template_texts[p->n_templates++] = text;
}

/* Renders variant vi of pr: its prelude, entry points and full source (prelude + template). */
static int qf_gen_render_variant(qf_gen_plan *p, qf_gen_plan_recipe *pr, int vi,
                                 const qf_gen_opts *o, qf_gen_err *e) {
    const qf_gen_variant *v = &pr->variants[vi];
    const char *tname = v->cfg.template_name;
    const char *tpl = qf_gen_tpl_get(p, o->templates_dir, tname, e);
    if (!tpl)
        return -1;
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s/%s", o->templates_dir, tname);
    if (qf_gen_template_entries(tpath, tpl, &pr->entries[vi], e) != 0)
        return -1;
    pr->preludes[vi] = qf_gen_variant_prelude(&pr->recipe, v, tpath, tpl, e);
    if (!pr->preludes[vi])
        return -1;
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    qf_gen_buf_adds(&b, pr->preludes[vi]);
    qf_gen_buf_adds(&b, tpl);
    pr->source_lens[vi] = b.len;
    pr->sources[vi] = qf_gen_buf_take(&b);
    return pr->sources[vi] ? 0 : qf_gen_fail(e, "out of memory rendering %s", v->desc.name);
}

/* Shape table, variants and their invariants of one recipe. */
static int qf_gen_plan_expand(qf_gen_plan_recipe *pr, qf_gen_err *e) {
    pr->shapes = qf_families[pr->recipe.family].shapes;
    if (!pr->shapes)
        return qf_gen_fail(e, "%s: no shape table for the recipe's family", pr->recipe.path);
    if (qf_gen_shape_table_check(pr->shapes, e) != 0)
        return -1;
    pr->n_variants = qf_gen_variants_expand(&pr->recipe, pr->variants, QF_GEN_VARIANTS_MAX, e);
    if (pr->n_variants < 0)
        return -1;
    return qf_gen_variants_check(&pr->recipe, pr->variants, pr->n_variants, e);
}

/* By name, then in the order given (so that two files of one name are said in that order). */
static int qf_gen_recipe_cmp(const void *a, const void *b) {
    const qf_gen_plan_recipe *x = a, *y = b;
    const int c = strcmp(x->recipe.name, y->recipe.name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Loads every recipe, sorted by name; two files of one name are an error. */
static int qf_gen_plan_load(qf_gen_plan *p, const qf_gen_opts *o, const char *const *paths, int n,
                            qf_gen_err *e) {
    p->recipes = calloc((size_t)n, sizeof *p->recipes);
    if (!p->recipes)
        return qf_gen_fail(e, "out of memory");
    for (int i = 0; i < n; i++, p->n_recipes++) {
        p->recipes[i].path = paths[i], p->recipes[i].index = i;
        if (qf_gen_recipe_load(paths[i], &o->limits, &p->recipes[i].recipe, e) != 0)
            return -1;
    }
    qsort(p->recipes, (size_t)n, sizeof *p->recipes, qf_gen_recipe_cmp);
    for (int i = 1; i < n; i++) {
        const qf_gen_plan_recipe *a = &p->recipes[i - 1], *b = &p->recipes[i];
        if (strcmp(a->recipe.name, b->recipe.name) != 0)
            continue;
        qf_gen_shown sa, sb;
        if (strcmp(a->path, b->path) == 0)
            return qf_gen_fail(e, "recipe '%s' is given twice (%s)", b->recipe.name,
                               qf_gen_path_shown(b->path, &sb));
        return qf_gen_fail(e, "recipe '%s' is given twice: %s and %s (a recipe is named after its "
                           "file, and the name is in its kernels' names, which must differ)",
                           b->recipe.name, qf_gen_path_shown(a->path, &sa),
                           qf_gen_path_shown(b->path, &sb));
    }
    return 0;
}

/* Kernel names are CUDA symbols of one registry: unique across recipes too. */
static int qf_gen_plan_check_names(const qf_gen_plan *p, qf_gen_err *e) {
    for (int a = 0; a < p->n_recipes; a++)
        for (int b = 0; b < a; b++)
            for (int i = 0; i < p->recipes[a].n_variants; i++)
                for (int j = 0; j < p->recipes[b].n_variants; j++)
                    if (strcmp(p->recipes[a].variants[i].desc.name,
                               p->recipes[b].variants[j].desc.name) == 0)
                        return qf_gen_fail(e, "kernel name '%s' is produced by recipes %s and %s",
                                           p->recipes[a].variants[i].desc.name,
                                           p->recipes[b].recipe.path, p->recipes[a].recipe.path);
    return 0;
}

/* Sorts names[0..n) with texts[] along (insertion sort: a handful of entries). */
static void qf_gen_sort_named(int n, const char **names, char **texts) {
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            const char *name = names[j];
            char *text = texts[j];
            names[j] = names[j - 1], texts[j] = texts[j - 1];
            names[j - 1] = name, texts[j - 1] = text;
        }
}

/* Renders all kernels and records the templates in use, sorted by name. */
static int qf_gen_plan_render(qf_gen_plan *p, const qf_gen_opts *o, qf_gen_err *e) {
    int rc = 0;
    for (int r = 0; r < p->n_recipes && rc == 0; r++)
        for (int v = 0; v < p->recipes[r].n_variants && rc == 0; v++)
            rc = qf_gen_render_variant(p, &p->recipes[r], v, o, e);
    qf_gen_sort_named(p->n_templates, p->templates, p->template_texts);
    return rc;
}

/* Adds header `name` (dir/name) to the plan after checking it holds no placeholder. */
static int qf_gen_plan_add_header(qf_gen_plan *p, const char *dir, const char *name,
                                  qf_gen_err *e) {
    char path[4096];
    size_t len;
    if (p->n_headers == QF_GEN_HEADERS_MAX)
        return qf_gen_fail(e, "more than %d NVRTC headers", QF_GEN_HEADERS_MAX);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text, *copy = strdup(name);
    if (!copy)
        return qf_gen_fail(e, "out of memory");
    if (qf_gen_read_file(path, "header", &text, &len, e) != 0) {
        free(copy);
        return -1;
    }
    p->header_names[p->n_headers] = copy;
    p->header_texts[p->n_headers++] = text;
    if (qf_gen_text_check(path, "header", text, len, e) != 0)
        return -1;
    return qf_gen_header_check(path, text, e);
}

/* 1 when a file name is a shared device header: qf_dev_*.cuh. */
static int qf_gen_is_dev_header(const char *name) {
    size_t n = strlen(name);
    return n > 11 && strncmp(name, "qf_dev_", 7) == 0 && strcmp(name + n - 4, ".cuh") == 0;
}

/* qf_formats.h and every templates_dir/qf_dev_*.cuh, sorted by name. */
static int qf_gen_plan_headers(qf_gen_plan *p, const qf_gen_opts *o, qf_gen_err *e) {
    if (qf_gen_plan_add_header(p, o->include_dir, "qf_formats.h", e) != 0)
        return -1;
    DIR *d = opendir(o->templates_dir);
    if (!d)
        return qf_gen_fail(e, "%s: cannot open directory (%s)", o->templates_dir,
                           strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL)
        if (qf_gen_is_dev_header(de->d_name))
            rc = qf_gen_plan_add_header(p, o->templates_dir, de->d_name, e);
    closedir(d);
    qf_gen_sort_named(p->n_headers, (const char **)p->header_names, p->header_texts);
    return rc;
}

int qf_gen_plan_build(qf_gen_plan *p, const qf_gen_opts *o, const char *const *paths, int n,
                      qf_gen_err *e) {
    memset(p, 0, sizeof *p);
    if (n < 1)
        return qf_gen_fail(e, "no recipe given");
    int rc = qf_gen_plan_headers(p, o, e);
    if (rc == 0)
        rc = qf_gen_plan_load(p, o, paths, n, e);
    for (int i = 0; i < p->n_recipes && rc == 0; i++)
        rc = qf_gen_plan_expand(&p->recipes[i], e);
    if (rc == 0)
        rc = qf_gen_plan_check_names(p, e);
    if (rc == 0)
        rc = qf_gen_plan_render(p, o, e);
    if (rc != 0)
        qf_gen_plan_free(p);
    return rc;
}

void qf_gen_plan_free(qf_gen_plan *p) {
    for (int r = 0; r < p->n_recipes; r++)
        for (int v = 0; v < p->recipes[r].n_variants; v++) {
            free(p->recipes[r].sources[v]);
            free(p->recipes[r].preludes[v]);
        }
    free(p->recipes);
    for (int i = 0; i < p->n_headers; i++) {
        free(p->header_names[i]);
        free(p->header_texts[i]);
    }
    for (int i = 0; i < p->n_templates; i++)
        free(p->template_texts[i]);
    memset(p, 0, sizeof *p);
}

int qf_gen_plan_template_index(const qf_gen_plan *p, const char *tname) {
    for (int i = 0; i < p->n_templates; i++)
        if (strcmp(p->templates[i], tname) == 0)
            return i;
    return -1;
}

/* The registry entries registry.c holds for variant vi of recipe ri, so that the key equals the
 * runtime's. Strings point into p and tpl. */
static void qf_gen_plan_entries(const qf_gen_plan *p, int ri, int vi, qf_kernel_template *tpl,
                                qf_recipe *re, qf_kernel_entry *ke) {
    const qf_gen_plan_recipe *pr = &p->recipes[ri];
    const qf_gen_variant *v = &pr->variants[vi];
    int ti = qf_gen_plan_template_index(p, v->cfg.template_name);
    QF_ASSERT(ti >= 0); /* every variant's template was read when it was rendered */
    *tpl = (qf_kernel_template){.file = NULL, .text = p->template_texts[ti]};
    *re = pr->recipe;
    *ke = qf_gen_variant_entry(re, v, tpl, pr->preludes[vi], pr->entries[vi]);
}

void qf_gen_plan_key_instance(const qf_gen_plan *p, int ri, int vi, int arch,
                              const qf_kernel_instance *inst, char hex[33]) {
    qf_kernel_template tpl;
    qf_recipe re;
    qf_kernel_entry ke;
    qf_gen_plan_entries(p, ri, vi, &tpl, &re, &ke);
    qf_kernel_instance def = qf_kernel_instance_default(&ke);
    qf_kernel_key(&re, &ke, inst ? inst : &def, (const char *const *)p->header_names,
                  (const char *const *)p->header_texts, p->n_headers, arch, hex);
}

void qf_gen_plan_key(const qf_gen_plan *p, int ri, int vi, int arch, char hex[33]) {
    qf_gen_plan_key_instance(p, ri, vi, arch, NULL, hex);
}

void qf_gen_plan_recipe_list(const qf_gen_plan *p, qf_gen_buf *b) {
    for (int i = 0; i < p->n_recipes; i++)
        qf_gen_buf_addf(b, "%s%s", i ? ", " : "", p->recipes[i].recipe.file);
}

void qf_gen_plan_template_list(const qf_gen_plan *p, qf_gen_buf *b) {
    for (int i = 0; i < p->n_templates; i++)
        qf_gen_buf_addf(b, "%stemplates/%s", i ? ", " : "", p->templates[i]);
}
