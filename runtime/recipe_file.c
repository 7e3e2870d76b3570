/* recipe_file.c: recipes loaded from .lua files at run time (DESIGN data flow 4).
 *
 * Wherever an op takes a recipe name it also takes a path to a recipe file ("my/recipe.lua"):
 * the file is read with the generator's sandboxed loader (gen/gen_recipe.c), validated against
 * its family's schema, expanded into the same variants qfuse-gen would emit, and each variant
 * gets the prelude qfuse-gen would write, over the template text the registry holds. The kernels
 * are JIT-compiled on first use like any other, so a recipe author edits a file and runs, with no
 * rebuild. A process loads each file once, found by its absolute path (a relative path joined
 * to the working directory of the call: after a chdir, "x.lua" names another file); the recipes
 * and kernel entries it makes live until the process ends (ops hand out pointers to them). */
#include "recipe_file.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctx.h"
#include "gen_recipe.h"
#include "gen_render.h"
#include "gen_variant.h"

/* One loaded recipe and everything its kernel entries point to. */
typedef struct qf_loaded_recipe {
    qf_recipe r;
    qf_kernel_entry kernels[QF_GEN_VARIANTS_MAX];
    qf_gen_variant variants[QF_GEN_VARIANTS_MAX]; /* the kernels' names live here */
    char *preludes[QF_GEN_VARIANTS_MAX];
    char *request; /* the lookup key: the path made absolute (qf_recipe_file_key) */
    struct qf_loaded_recipe *next;
} qf_loaded_recipe;

static pthread_mutex_t qf_recipe_file_lock = PTHREAD_MUTEX_INITIALIZER;
static qf_loaded_recipe *qf_recipe_files;

int qf_recipe_is_path(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && (strchr(s, '/') || (n >= 4 && strcmp(s + n - 4, ".lua") == 0));
}

/* The registry's template `templates/<name>`, or NULL. */
static const qf_kernel_template *qf_recipe_file_template(const char *name) {
    char file[160];
    snprintf(file, sizeof file, "templates/%s", name);
    for (int i = 0; i < qf_template_count; i++)
        if (strcmp(qf_templates[i].file, file) == 0)
            return &qf_templates[i];
    return NULL;
}

/* Kernel entry i of lr from its variant: the entry qfuse-gen would emit. */
static int qf_recipe_file_kernel(qf_loaded_recipe *lr, int i, qf_gen_err *e) {
    const qf_gen_variant *v = &lr->variants[i];
    const qf_kernel_template *t = qf_recipe_file_template(v->cfg.template_name);
    if (!t)
        return qf_gen_fail(e, "%s: kernel %s needs template templates/%s, which this build's "
                           "registry does not hold", lr->r.path, v->desc.name,
                           v->cfg.template_name);
    unsigned entries = 0;
    if (qf_gen_template_entries(t->file, t->text, &entries, e) != 0)
        return -1;
    lr->preludes[i] = qf_gen_variant_prelude(&lr->r, v, t->file, t->text, e);
    if (!lr->preludes[i])
        return -1;
    lr->kernels[i] = qf_gen_variant_entry(&lr->r, v, t, lr->preludes[i], entries);
    return 0;
}

static void qf_recipe_file_free(qf_loaded_recipe *lr) {
    for (int i = 0; lr && i < QF_GEN_VARIANTS_MAX; i++)
        free(lr->preludes[i]);
    if (lr)
        free(lr->request);
    free(lr);
}

/* The lookup key of path: path itself when absolute, else the working directory joined with it
 * (nothing resolved or normalized, so the key does not depend on the file: a recipe stays
 * loaded while its file is replaced), so that a relative path means the file it names under the
 * directory of each call. path itself when the working directory cannot be had. buf holds
 * PATH_MAX bytes. */
static const char *qf_recipe_file_key(const char *path, char *buf) {
    char cwd[PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd))
        return path;
    const int n = snprintf(buf, PATH_MAX, "%s/%s", cwd, path);
    return n > 0 && n < PATH_MAX ? buf : path;
}

/* Loads, validates and expands the recipe at path into a new entry under key. NULL with e set
 * on error. */
static qf_loaded_recipe *qf_recipe_file_build(const char *path, const char *key, qf_gen_err *e) {
    qf_loaded_recipe *lr = calloc(1, sizeof *lr);
    if (!lr || !(lr->request = strdup(key))) {
        qf_gen_fail(e, "%s: out of host memory", path);
        qf_recipe_file_free(lr);
        return NULL;
    }
    int n = -1;
    if (qf_gen_recipe_load(path, NULL, &lr->r, e) == 0)
        n = qf_gen_variants_expand(&lr->r, lr->variants, QF_GEN_VARIANTS_MAX, e);
    if (n >= 0 && qf_gen_variants_check(&lr->r, lr->variants, n, e) != 0)
        n = -1;
    for (int i = 0; i < n; i++)
        if (qf_recipe_file_kernel(lr, i, e) != 0)
            n = -1;
    if (n < 0) {
        qf_recipe_file_free(lr);
        return NULL;
    }
    lr->r.kernels = lr->kernels;
    lr->r.n_kernels = n;
    lr->r.shapes = NULL; /* the family's table, interpreted (qf_family_shapes) */
    return lr;
}

/* The entry loaded under key, or NULL. Called with the lock held. */
static const qf_recipe *qf_recipe_file_find(const char *key) {
    for (const qf_loaded_recipe *lr = qf_recipe_files; lr; lr = lr->next)
        if (strcmp(lr->request, key) == 0)
            return &lr->r;
    return NULL;
}

/* The status of a failed load: a missing file is QF_ERR_NOT_FOUND, a reserved family
 * QF_ERR_UNSUPPORTED, anything else a bad recipe (QF_ERR_INVALID_ARG). */
static qf_status qf_recipe_file_status(const qf_gen_err *e) {
    switch (e->kind) {
    case QF_GEN_ERR_NO_FILE:
        return QF_ERR_NOT_FOUND;
    case QF_GEN_ERR_UNSUPPORTED:
        return QF_ERR_UNSUPPORTED;
    default:
        return QF_ERR_INVALID_ARG;
    }
}

qf_status qf_recipe_file_load(const char *path, const qf_recipe **out) {
    qf_status s = QF_OK;
    char buf[PATH_MAX];
    const char *key = qf_recipe_file_key(path, buf);
    pthread_mutex_lock(&qf_recipe_file_lock);
    *out = qf_recipe_file_find(key);
    if (!*out) {
        qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
        qf_loaded_recipe *lr = qf_recipe_file_build(path, key, &e);
        if (lr) {
            lr->next = qf_recipe_files;
            qf_recipe_files = lr;
            *out = &lr->r;
        } else {
            s = qf_set_error(qf_recipe_file_status(&e), "%s", e.msg);
        }
    }
    pthread_mutex_unlock(&qf_recipe_file_lock);
    return s;
}

qf_status qf_recipe_find(const char *name, const qf_recipe **out) {
    if (qf_recipe_is_path(name))
        return qf_recipe_file_load(name, out);
    *out = qf_registry_recipe(name);
    return *out ? QF_OK : QF_ERR_NOT_FOUND;
}
