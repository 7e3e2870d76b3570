/* gen_emit.h: the files of out/ (kernels, registry.c, shapes.c/.h, manifest.json) and writing
 * them atomically. */
#ifndef QF_GEN_EMIT_H
#define QF_GEN_EMIT_H

#include <stddef.h>

#include "gen_plan.h"

/* One generated file: path relative to the output dir, and its bytes. */
typedef struct qf_gen_file {
    char rel[160];
    char *text; /* owned */
    size_t len;
} qf_gen_file;

typedef struct qf_gen_files {
    int n, cap;
    qf_gen_file *v;
} qf_gen_files;

/* Builds every output file of plan p in memory, in a fixed order. Returns 0 or -1. */
int qf_gen_emit_build(const qf_gen_plan *p, qf_gen_files *out, qf_gen_err *e);
void qf_gen_files_free(qf_gen_files *f);

/* Writes the files under dir (created as needed): each to a temporary name, then renamed over
 * the target; a file whose bytes are unchanged is left alone (its mtime too). Removes stale
 * dir/kernels/qf_*.cu files the plan no longer produces. Returns 0 or -1. */
int qf_gen_emit_write(const char *dir, const qf_gen_files *f, qf_gen_err *e);

/* The individual builders (exposed for tests). Each returns a malloc'ed text or NULL. */
char *qf_gen_emit_registry(const qf_gen_plan *p);
char *qf_gen_emit_shapes_h(const qf_gen_plan *p);
char *qf_gen_emit_shapes_c(const qf_gen_plan *p);
char *qf_gen_emit_manifest(const qf_gen_plan *p);

#endif /* QF_GEN_EMIT_H */
