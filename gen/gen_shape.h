/* gen_shape.h: the fake-shape tables (numerics 4) and what qfuse-gen derives from them: the C shape
 * functions of build/generated/shapes.c and the symbolic formulas of its manifest.json. */
#ifndef QF_GEN_SHAPE_H
#define QF_GEN_SHAPE_H

#include <cjson/cJSON.h>

#include "gen_buf.h"
#include "family.h"
#include "gen_recipe.h"

/* Checks a table: well-formed dim formulas, ndim 1..4, ops listed once. Returns 0 or -1. */
int qf_gen_shape_table_check(const qf_fake_table *t, qf_gen_err *e);

/* Appends to b the declaration (header) or definition (source) of
 * `int qf_shapes_<r->name>(const qf_shape_query *q, qf_shape *out, int cap)`. */
void qf_gen_shape_emit_decl(qf_gen_buf *b, const qf_recipe *r);
void qf_gen_shape_emit_def(qf_gen_buf *b, const qf_recipe *r, const qf_fake_table *t);
/* The helpers every generated shape function calls (qf_shape_add, and qf_shape_cdiv /
 * qf_shape_roundup for formulas); emitted once per shapes.c. */
void qf_gen_shape_emit_helpers(qf_gen_buf *b);

/* The formulas of t for recipe r as a JSON object {op: [{name, dtype, dims, bytes, condition}]}. */
cJSON *qf_gen_shape_json(const qf_recipe *r, const qf_fake_table *t);

#endif /* QF_GEN_SHAPE_H */
