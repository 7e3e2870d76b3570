/* validate.h: argument checks shared by the ops; every failure names the argument and the
 * requirement, and nothing is launched. Buffers are checked against the fake-shape functions. */
#ifndef QF_VALIDATE_H
#define QF_VALIDATE_H

#include "registry.h"
#include "status.h"

/* An activation act and its input h [..., Fin] (qf_check_activation, named "h"), viewed as
 * [M, Fin]: act a qf_activation, Fin even for swiglu (h = [h1 | h2]); *F, the activation's
 * output width: Fin / 2 for swiglu, else Fin. */
QF_INTERNAL qf_status qf_check_act_input(const char *op, qf_activation act, const qf_tensor *h,
                                         int64_t *M, int64_t *Fin, int64_t *F);

/* x: non-NULL, data non-NULL, 1 <= ndim <= QF_MAX_DIMS, all dims >= 1, dtype bf16/fp16/fp32,
 * element-aligned. Returns the [M, K] view (M = product of leading dims). */
QF_INTERNAL qf_status qf_check_activation(const char *op, const char *arg, const qf_tensor *t,
                                          int64_t *M, int64_t *K);

/* t must be a non-NULL tensor with data, dtype s->dtype, the same element count as s and, for a
 * 2-D shape, the same last dimension; data aligned to 16 bytes (2-D) or to its element (1-D). */
/* A tensor's struct: not NULL, data set, ndim 1..QF_MAX_DIMS, every dim >= 1, a qf_dtype, at
 * most 2^59 elements; a message names arg and the field. */
QF_INTERNAL qf_status qf_check_tensor_struct(const char *op, const char *arg, const qf_tensor *t);

QF_INTERNAL qf_status qf_check_buffer(const char *op, const char *arg, const qf_tensor *t,
                                      const qf_shape *s);

/* The bytes [*lo, *hi) of t's data: numel x dtype size (an E2M1 tensor's dims count bytes);
 * *hi is UINTPTR_MAX where that overflows or the dims are malformed. */
QF_INTERNAL void qf_tensor_span(const qf_tensor *t, uintptr_t *lo, uintptr_t *hi);

/* QF_ERR_INVALID_ARG naming both when the bytes of a and b (numel x dtype size from data; an
 * E2M1 tensor's dims count bytes) overlap; QF_OK when they do not or either is NULL or has no
 * data. */
QF_INTERNAL qf_status qf_check_disjoint(const char *op, const char *arg_a, const qf_tensor *a,
                                        const char *arg_b, const qf_tensor *b);

/* The inputs of a call that its outputs must not overlap: n tensors (NULL entries, and tensors
 * without data, are skipped), each with its name for messages. */
typedef struct qf_inputs {
    int n;
    const char *name[8];
    const qf_tensor *t[8];
} qf_inputs;

/* QF_ERR_INVALID_ARG naming both when output `out` (named out_arg) overlaps one of `in`
 * (qf_check_disjoint); QF_OK otherwise. */
QF_INTERNAL qf_status qf_check_apart(const char *op, const char *out_arg, const qf_tensor *out,
                                     const qf_inputs *in);

/* dbias's checks (op_bwd.c): dbias [N] of dtype dt against the fake shapes of a QF_OP_DBIAS query
 * for an input [M, N] named dy_name, N within one launch, dbias apart from every tensor of in;
 * *k the dbias module of recipe r for dt. Errors: QF_ERR_INVALID_ARG, QF_ERR_UNSUPPORTED,
 * QF_ERR_NOT_FOUND. */
QF_INTERNAL qf_status qf_dbias_check(const char *op, const qf_recipe *r, qf_dtype dt, int64_t M,
                                     int64_t N, const char *dy_name, const qf_tensor *dbias,
                                     const qf_inputs *in, const qf_kernel_entry **k);
/* For every shape in shapes[0..n), finds the slot of q with the shape's name (qf_slot_from_name,
 * the one name table) and checks it with qf_check_buffer, naming it "<arg>-><slot name>" in
 * messages (arg: "out", "ll->xq"), then that no two of those slots overlap, nor any of them an
 * input of `in` (NULL: none) (qf_check_disjoint). A shape that names no slot is an internal
 * error. */
QF_INTERNAL qf_status qf_check_slots(const char *op, const qf_shape *shapes, int n,
                                     const char *arg, const qf_quantized *q, const qf_inputs *in);

/* A [K] vector of dtype fp32 or `dt` (gamma, beta). */
QF_INTERNAL qf_status qf_check_vector(const char *op, const char *arg, const qf_tensor *t,
                                      int64_t K, qf_dtype dt);

/* Clears the last error, checks ctx, and finds recipe (*r). QF_ERR_NOT_FOUND for an unknown
 * name. */
QF_INTERNAL qf_status qf_check_recipe(const char *op, const qf_ctx_t *ctx, const char *recipe,
                                      const qf_recipe **r);

/* The default of an op's family dispatch (STYLE 10): QF_ERR_UNSUPPORTED, "not implemented scaling
 * mode: <family>". */
QF_INTERNAL qf_status qf_family_unsupported(const char *op, const qf_recipe *r);

/* Norm, eps and the gamma/beta vectors of a norm + quantize op (numerics 3): nd->norm a qf_norm;
 * for a norm gamma [K] (x's dtype or fp32), layernorm: beta [K] of gamma's dtype; rmsnorm: no
 * beta and no mu (out's MU slot empty). QF_NORM_NONE checks nothing else. */
QF_INTERNAL qf_status qf_check_norm_args(const char *op, const qf_norm_desc *nd,
                                         const qf_tensor *x, int64_t K, const qf_quantized *out);

/* A fused norm's kind, named arg in the message ("ll->norm.norm"): layernorm or rmsnorm. */
QF_INTERNAL qf_status qf_check_fused_norm(const char *op, const char *arg, qf_norm norm);

/* The norm descriptor's zero_centered_gamma flag: 0 or 1 (any other value is a caller's error,
 * not a "true"). Errors: QF_ERR_INVALID_ARG naming op. */
QF_INTERNAL qf_status qf_check_zcg(const char *op, const qf_norm_desc *nd);

/* A gradient input t (named arg) of [rows, cols] in bf16 or fp32 (dxn, da: a dgrad GEMM's
 * output); what and dims name it in the message ("the gradient of the norm's output", "[M, K]"). */
QF_INTERNAL qf_status qf_check_grad_input(const char *op, const char *arg, const qf_tensor *t,
                                          int64_t rows, int64_t cols, const char *what,
                                          const char *dims);

/* The copies a quantizer is asked for: QF_OUT_ROWWISE when the ROWWISE_DATA slot has data, plus
 * QF_OUT_COLUMNWISE when COLUMNWISE_DATA has (0: none). */
QF_INTERNAL unsigned qf_outputs_of(const qf_quantized *out);

/* qf_outputs_of into *outputs; QF_ERR_INVALID_ARG when it is none. */
QF_INTERNAL qf_status qf_check_outputs_selected(const char *op, const qf_quantized *out,
                                                unsigned *outputs);

/* The fake-shape query of a quantization (role, with norm `norm` or none) of an input [M, K]
 * into the copies `outputs`: QF_OP_NORM_QUANTIZE with a norm, else QF_OP_QUANTIZE. */
QF_INTERNAL qf_shape_query qf_quantize_query(qf_role role, qf_norm norm, unsigned outputs,
                                             int64_t M, int64_t K);

/* out->layout of a block-scaled quantizer (MXFP8, NVFP4): QF_ERR_INVALID_ARG when it is not a
 * qf_scale_layout. */
QF_INTERNAL qf_status qf_check_layout(const char *op, const qf_quantized *out);

/* y [M, N] (bf16, or fp32: the query's QF_OUT_FP32) against the recipe's fake shape of its
 * GEMM, and bias [N] bf16 when not NULL. */
QF_INTERNAL qf_status qf_check_gemm_outputs(const char *op, const qf_recipe *r,
                                            const qf_tensor *bias, const qf_tensor *y, int64_t M,
                                            int64_t N, int64_t K);

/* The GEMM path of recipe r's family on compute capability arch (its row of qf_families,
 * family.h: a generated kernel or a cuBLASLt scale mode) into *path, and the limits it sets: the
 * operands' scale layout must be the one the path reads, N a multiple of its n_align. Errors:
 * QF_ERR_UNSUPPORTED (no path on this arch), QF_ERR_INVALID_ARG. */
QF_INTERNAL qf_status qf_check_gemm_path(const char *op, const qf_recipe *r, int arch,
                                         qf_scale_layout layout, int64_t N, qf_gemm_path *path);

/* Runs the recipe's shape function (qf_recipe_shapes: a recipe loaded from a .lua file has its
 * family's table interpreted); translates -1/-2 into QF_ERR_INVALID_ARG / QF_ERR_INTERNAL. */
QF_INTERNAL qf_status qf_query_shapes(const char *op, const qf_recipe *r,
                                      const qf_shape_query *q, qf_shape *out, int cap, int *n);

/* The weight cache of the composed ops (linear.c, SPEC 6): the key of weights d0 (and d1, or
 * NULL) with their kept bf16 copies kept0, kept1 (QF_COPY_COUNT each: wq_bf16, or w1q_bf16 and
 * w2q_bf16; NULL, or data NULL, where not kept) at the caller's version under recipe r, and
 * whether a layer's weights must be quantized (again): the caller says so (changed), or its
 * cached copies were made from other storage, into other bf16 copies, at another version or
 * under another recipe, or nothing is cached. */
QF_INTERNAL qf_weight_key qf_weight_key_of(const void *d0, const qf_tensor *kept0, const void *d1,
                                           const qf_tensor *kept1, uint64_t version,
                                           const qf_recipe *r);
QF_INTERNAL int qf_weights_stale(const qf_weight_key *cached, int changed,
                                 const qf_weight_key *now);

#endif /* QF_VALIDATE_H */
