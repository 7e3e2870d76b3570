/* gen_shape.h: the fake-shape tables (SPEC 4) and what qfuse-gen derives from them: the C shape
 * functions of out/shapes.c and the symbolic formulas of out/manifest.json. */
#ifndef QF_GEN_SHAPE_H
#define QF_GEN_SHAPE_H

#include <cjson/cJSON.h>

#include "gen_buf.h"
#include "gen_recipe.h"

/* When an output exists. ORDER GEN_COND (qf_gen_cond_info in gen_shape.c) */
typedef enum qf_fake_cond {
    QF_FAKE_COND_ALWAYS = 0,
    QF_FAKE_COND_ROWWISE = 1,    /* QF_OUT_ROWWISE selected */
    QF_FAKE_COND_COLUMNWISE = 2, /* QF_OUT_COLUMNWISE selected */
    QF_FAKE_COND_LAYERNORM = 3,  /* norm is layernorm */
    QF_FAKE_COND_NORM = 4,       /* norm is not none */
    QF_FAKE_COND_COUNT
} qf_fake_cond;

/* dtype value meaning "the format of the op's role" (qf_recipe.fmt). */
#define QF_FAKE_DTYPE_ROLE (-1)
/* role value meaning "the role the query names" (QF_OP_QUANTIZE). */
#define QF_FAKE_ROLE_QUERY (-1)

/* One output of one op. A dim is a formula in SPEC notation, without spaces: a symbol "M", "N",
 * "K", a decimal constant ("1"), or "roundup(a,b)" / "cdiv(a,b)" of formulas
 * ("roundup(cdiv(K,32),4)"). Dims of an E2M1 output count bytes, two elements each (low nibble
 * first): packed data [M, K/2] is written [M, cdiv(K,2)], exact as nvfp4 needs K % 16 == 0, and
 * its bytes are the product of its dims. */
typedef struct qf_fake_out {
    qf_op op;
    const char *name;
    int dtype; /* a qf_dtype or QF_FAKE_DTYPE_ROLE */
    int ndim;
    const char *dims[4];
    qf_fake_cond cond;
    int scale_layout; /* 1: a block-scale matrix, compact or swizzled (same shape and bytes) */
} qf_fake_out;

/* One op a shape function answers. */
typedef struct qf_fake_op {
    qf_op op;
    const char *dims_used; /* symbols that must be > 0: "MK", "MNK" */
    int quantizer;         /* needs an output bit (rowwise/columnwise) */
    int role;              /* the role whose format QF_FAKE_DTYPE_ROLE means, or QF_FAKE_ROLE_QUERY */
    int needs_norm;        /* the query's norm must be layernorm or rmsnorm */
    int align;             /* > 0: the symbols of dims_aligned must be multiples of it */
    const char *dims_aligned; /* "MK" (nvfp4: 1x16 blocks and 16-row groups), or NULL */
} qf_fake_op;

/* The shape table of a family: its ops and all their outputs. */
typedef struct qf_fake_table {
    const qf_fake_op *ops;
    int n_ops;
    const qf_fake_out *outs;
    int n_outs;
} qf_fake_table;

/* The table of family f, or NULL when the family has none yet. */
const qf_fake_table *qf_gen_shape_table_get(qf_family f);

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
