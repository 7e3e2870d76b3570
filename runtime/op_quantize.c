/* op_quantize.c: the quantize op (numerics 2, 3) of every family, with or without a fused norm: the
 * common argument checks, one dispatch on the recipe's family, and each family's launcher. */
#include "ctx.h"
#include "names.h"
#include "validate.h"

#define QF_MAX_SHAPES 12
#define QF_NV_ALIGN 16

/* One quantize call whose common arguments are checked (qf_q_check). */
typedef struct qf_qcall {
    const char *op;
    const qf_recipe *r;
    qf_role role;
    const qf_norm_desc *nd; /* never NULL: qf_norm_none for a plain quantize */
    const qf_tensor *x;
    int64_t M, K;
    unsigned outputs;       /* QF_OUT_ROWWISE | QF_OUT_COLUMNWISE */
    qf_quantized *out;
    unsigned slots;         /* 1u << qf_slot for each slot the call's fake shapes list */
    int prologue;           /* QF_PROLOGUE_*: x is h; the input is a = act(h) or dh */
    const qf_tensor *da;    /* QF_PROLOGUE_DACT: [M, F] */
    qf_tensor *dbias;       /* qf_quantize_dbias_act's fused path: dbias [K] of dh, or NULL */
    const qf_kernel_entry *dbias_k; /* its dbias module (the _reduce entry) */
    int amax_given;         /* current scaling: out's amax already holds x's (qf_quantize_cast) */
    const char *x_name;     /* x's name in messages when not "x" or "h" (qf_quantize_dbias: dy) */
} qf_qcall;

/* The name of c's input x in messages: x_name, else h under an activation prologue, else x. */
static const char *qf_q_x_name(const qf_qcall *c) {
    return c->x_name ? c->x_name : c->prologue != QF_PROLOGUE_NONE ? "h" : "x";
}

static const qf_norm_desc qf_norm_none = {.norm = QF_NORM_NONE};

/* {===================================================================== common checks */

/* A fused norm quantizes the input role; a plain quantize any role (the input role without a
 * norm: layernorm_mlp's fc2 input). */
static qf_status qf_q_check_role(const char *op, qf_role role, const qf_norm_desc *nd) {
    if ((unsigned)role >= QF_ROLE_COUNT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d is not a qf_role (QF_ROLE_INPUT, "
                            "QF_ROLE_WEIGHT or QF_ROLE_GRAD)", op, (int)role);
    if (nd->norm != QF_NORM_NONE && role != QF_ROLE_INPUT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: role %d with a fused norm; norm + quantize "
                            "is for QF_ROLE_INPUT (pass norm NULL for weights and gradients)", op,
                            (int)role);
    return QF_OK;
}

/* The checks after the input's (c->r, c->M, c->K set): the role, out, the norm's arguments and
 * the copies asked for. */
static qf_status qf_q_check_out(qf_qcall *c) {
    if ((unsigned)c->nd->norm < QF_NORM_COUNT)
        QF_TRY(qf_q_check_role(c->op, c->role, c->nd));
    if (!c->out)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out is NULL", c->op);
    QF_TRY(qf_check_norm_args(c->op, c->nd, c->x, c->K, c->out));
    return qf_check_outputs_selected(c->op, c->out, &c->outputs);
}

static qf_status qf_q_check(qf_qcall *c, const qf_ctx_t *ctx, const char *recipe) {
    QF_TRY(qf_check_recipe(c->op, ctx, recipe, &c->r));
    QF_TRY(qf_check_activation(c->op, qf_q_x_name(c), c->x, &c->M, &c->K));
    return qf_q_check_out(c);
}

/* The recipe's fake shapes of c's outputs (n of them, at most QF_MAX_SHAPES), q the query. */
static qf_status qf_q_shapes(const qf_qcall *c, qf_shape_query *q, qf_shape *shapes, int *n) {
    *q = qf_quantize_query(c->role, c->nd->norm, c->outputs, c->M, c->K);
    return qf_query_shapes(c->op, c->r, q, shapes, QF_MAX_SHAPES, n);
}

/* The scale a call reads (fp8_delayed's; the other families ignore it, and it may then be
 * anything) as a tensor of one float for the overlap checks (no data: none read). */
static qf_tensor qf_q_scale_tensor(const qf_qcall *c, const float *scale) {
    const int used = c->r->family == QF_FAMILY_FP8_DELAYED;
    return (qf_tensor){.data = used ? (void *)scale : NULL, .dtype = QF_DTYPE_FP32, .ndim = 1,
                       .dims = {1}};
}

/* Every slot the recipe's fake shapes list for this call (checked, apart from the inputs and
 * from the scale it reads, and noted in c->slots), then the kernel variant, whose tiled entry's
 * grid (cdiv(M, tile_m) blocks) must fit one launch: checked here, before any device work. */
static qf_status qf_q_slots_kernel(qf_qcall *c, const float *scale, const qf_kernel_entry **k) {
    qf_shape_query q;
    qf_shape shapes[QF_MAX_SHAPES];
    int n = 0;
    QF_TRY(qf_q_shapes(c, &q, shapes, &n));
    const qf_tensor scale_t = qf_q_scale_tensor(c, scale);
    const qf_inputs in = {5, {qf_q_x_name(c), "norm->gamma", "norm->beta", "da", "scale"},
                          {c->x, &c->nd->gamma, &c->nd->beta, c->da, &scale_t}};
    QF_TRY(qf_check_slots(c->op, shapes, n, "out", c->out, &in));
    c->slots = 0;
    for (int i = 0; i < n; i++)
        c->slots |= 1u << qf_slot_from_name(shapes[i].name); /* a qf_slot: checked above */
    *k = qf_registry_kernel(c->r, q.op, c->role, c->nd->norm, c->nd->zero_centered_gamma,
                            c->x->dtype);
    if (!*k)
        return QF_ERR_NOT_FOUND;
    if ((c->M + (*k)->tile_m - 1) / (*k)->tile_m > 0x7fffffff)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: M = %lld is too large for one launch",
                            c->op, (long long)c->M);
    return QF_OK;
}

/* The kernel instance of the call: outputs, gamma dtype (x's without a norm) and the scale
 * layout (out->layout for block-scaled families; per-tensor FP8 has none and keeps the default,
 * so that its table entries do not depend on a field it ignores). */
static qf_kernel_instance qf_q_instance(const qf_qcall *c, const qf_kernel_entry *k,
                                        qf_scale_layout layout) {
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    inst.outputs = c->outputs;
    inst.gamma_dtype = c->nd->norm != QF_NORM_NONE ? c->nd->gamma.dtype : c->x->dtype;
    inst.layout = layout;
    inst.prologue = c->prologue;
    return inst;
}

/* 1 when the call's fake shapes list slot s. */
static int qf_q_listed(const qf_qcall *c, qf_slot s) {
    return (c->slots & (1u << s)) != 0;
}

/* The device pointer of slot s, or NULL where the call's fake shapes list no such slot. */
static void *qf_q_data(const qf_qcall *c, qf_slot s) {
    return qf_q_listed(c, s) ? c->out->t[s].data : NULL;
}

/* The parameter block of a checked call (qf_q_slots_kernel): x, the norm's inputs and every
 * listed output slot (NULL for the others). The per-tensor and the block scales share storage
 * (qf_q_params): only the family's own are assigned. */
static qf_q_params qf_q_params_of(const qf_qcall *c) {
    const qf_norm n = c->nd->norm;
    qf_q_params p = {.x = c->x->data,
                     .gamma = n != QF_NORM_NONE ? c->nd->gamma.data : NULL,
                     .beta = n == QF_NORM_LAYERNORM ? c->nd->beta.data : NULL,
                     .out_row = qf_q_data(c, QF_SLOT_ROWWISE_DATA),
                     .out_col = qf_q_data(c, QF_SLOT_COLUMNWISE_DATA),
                     .mu = qf_q_data(c, QF_SLOT_MU),
                     .rsigma = qf_q_data(c, QF_SLOT_RSIGMA),
                     .amax_col = qf_q_data(c, QF_SLOT_AMAX_COLUMNWISE),
                     .M = c->M,
                     .K = c->K,
                     .eps = c->nd->eps};
    p.amax = qf_q_data(c, qf_q_listed(c, QF_SLOT_AMAX) ? QF_SLOT_AMAX : QF_SLOT_AMAX_ROWWISE);
    if (c->da) /* no norm: the gamma storage carries da */
        p.da = c->da->data, p.da_fp32 = c->da->dtype == QF_DTYPE_FP32;
    if (qf_q_listed(c, QF_SLOT_SCALE_INV)) { /* per-tensor FP8 */
        p.scale_inv = qf_q_data(c, QF_SLOT_SCALE_INV);
    } else { /* block scales */
        p.scale_row = qf_q_data(c, QF_SLOT_ROWWISE_SCALE_INV);
        p.scale_col = qf_q_data(c, QF_SLOT_COLUMNWISE_SCALE_INV);
    }
    return p;
}

/* Loads the call's kernel (outputs, gamma dtype, scale layout) after the device checks:
 * device-less contexts stop here, as do foreign streams. */
static qf_status qf_q_load(qf_ctx_t *ctx, const qf_qcall *c, const qf_kernel_entry *k,
                           qf_scale_layout layout, void *stream, qf_loaded_kernel *lk) {
    const qf_kernel_instance inst = qf_q_instance(c, k, layout);
    return qf_ctx_load(ctx, c->op, stream, k, &inst, lk);
}

/* cudaMemsetAsync of a selected copy's slot (its scale matrix or amax), checked beforehand. */
static qf_status qf_q_zero(const qf_qcall *c, unsigned copy, qf_slot s, void *stream) {
    if (!(c->outputs & copy))
        return QF_OK;
    const qf_tensor *t = &c->out->t[s];
    const size_t bytes = (size_t)qf_tensor_numel(t) * qf_dtype_size(t->dtype);
    char what[48];
    snprintf(what, sizeof what, "out->%s", qf_slot_name(s));
    return qf_zero_async(t->data, bytes, what, stream);
}

/* =====================================================================} */

/* {===================================================================== amax reduction */

/* The calling thread's amax reduction (qf_set_amax_reduce), or NULL. */
static _Thread_local qf_amax_reduce_fn qf_amax_reduce_hook;
static _Thread_local void *qf_amax_reduce_user;

void qf_set_amax_reduce(qf_amax_reduce_fn fn, void *user) {
    qf_amax_reduce_hook = fn;
    qf_amax_reduce_user = fn ? user : NULL;
}

qf_amax_reduce_fn qf_get_amax_reduce(void **user) {
    if (user)
        *user = qf_amax_reduce_user;
    return qf_amax_reduce_hook;
}

/* Runs the thread's amax reduction on a selected copy's amax slot s, between a two-pass
 * quantization's amax pass and its cast pass. */
static qf_status qf_q_reduce(const qf_qcall *c, unsigned copy, qf_slot s, void *stream) {
    if (!qf_amax_reduce_hook || !(c->outputs & copy))
        return QF_OK;
    const qf_status st = qf_amax_reduce_hook(qf_amax_reduce_user, c->out->t[s].data, stream);
    if (st != QF_OK)
        return qf_set_error(st, "%s: the amax reduction (qf_set_amax_reduce) of out->%s failed "
                            "(status %d)", c->op, qf_slot_name(s), (int)st);
    return QF_OK;
}

/* =====================================================================} */

/* {===================================================================== per-tensor FP8 */

/* Current scaling's amax pass of an input without a norm through the module's `<name>_amax`
 * entry (amax_body in templates/smxx_fp8_norm_quantize.cu: x, or p's prologue output, streamed in
 * 16-byte vectors of its input, no copy written), on at most one wave of blocks; *s is the
 * launch's status (as qf_ctx_launch's). Returns 0 without launching where the entry cannot take
 * the call: no such entry, a norm, an empty input, or vectors that are not whole (K, F = K / 2 of
 * a SwiGLU dh, not a multiple of 16 / sizeof(x); x or da not 16-byte aligned); *s is then
 * untouched. */
static int qf_q_amax_entry(qf_ctx_t *ctx, const qf_loaded_kernel *lk, const qf_kernel_entry *k,
                           const qf_qcall *c, qf_q_params *p, void *stream, qf_status *s) {
    const int64_t epv = 16 / (int64_t)qf_dtype_size(c->x->dtype);
    const int64_t w = c->prologue == QF_PROLOGUE_DACT(QF_ACT_SWIGLU) ? p->K / 2 : p->K;
    if (!lk->fn_amax || k->norm != QF_NORM_NONE || p->M <= 0 || w <= 0 || w % epv != 0 ||
        !qf_aligned16(p->x) || !qf_aligned16(p->da))
        return 0;
    const int64_t blocks = (p->M * (w / epv) + k->block_threads - 1) / k->block_threads;
    const int64_t wave = qf_ctx_wave(ctx, lk->fn_amax, k->block_threads, 0, ctx->sm_count);
    const int64_t grid = blocks < wave ? blocks : wave; /* blocks >= 1: M, w / epv >= 1 */
    *s = qf_ctx_launch(ctx, lk->fn_amax, (unsigned)grid, k->block_threads, 0, p, stream);
    return 1;
}

/* Delayed scaling: one launch (qf_ctx_launch_rows): without a norm and with the columnwise copy,
 * the `_cols` entry alone, both copies from one read of x (or of the activation prologue's
 * inputs), where M and K are multiples of 64 and the arrays 16-byte aligned; else a
 * row-in-registers entry (then the `_cols` entry, for a columnwise copy with a norm) where the
 * call allows one; else the tiled entry. Current scaling (numerics 2.2): amax slot zeroed, then
 * pass 0 (statistics and amax, no copy written: without a norm the `_amax` entry where it can
 * run (qf_q_amax_entry), else for an activation prologue's input the `_cols` entry; for other
 * inputs a rows entry where the call allows one) and pass 1 (the cast, with pass 0's
 * statistics), launched as delayed scaling's one is, except that with a norm the `_cols` entry
 * writes both copies alone where it can (qf_cols_alone), from one read of x. At large K the rows
 * and `_cols` entries reading x twice take a third of the time the tiled entry's single read of
 * both copies does.
 * The thread's amax reduction runs between the passes. With c->amax_given (qf_quantize_cast),
 * pass 0 is skipped: the amax slot already holds x's. */
static qf_status qf_q_fp8(qf_ctx_t *ctx, qf_qcall *c, const float *scale, void *stream) {
    const int current = c->r->family == QF_FAMILY_FP8_CURRENT;
    if (!scale && !current)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: scale is NULL; recipe '%s' (%s) quantizes "
                            "with the delayed scale from qf_scale_update", c->op, c->r->name,
                            qf_family_name(c->r->family));
    if (!current && (uintptr_t)scale % sizeof(float) != 0) /* the kernels load it as a float */
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: scale %p is not 4-byte aligned", c->op,
                            (const void *)scale);
    const qf_kernel_entry *k;
    QF_TRY(qf_q_slots_kernel(c, scale, &k));
    qf_q_params p = qf_q_params_of(c);
    p.scale = current ? NULL : scale;
    if (current)
        p.amax_epsilon = c->r->amax_epsilon, p.power_2_scales = c->r->power_2_scales;
    qf_loaded_kernel lk;
    QF_TRY(qf_q_load(ctx, c, k, QF_SCALE_LAYOUT_COMPACT, stream, &lk));
    qf_rows_call rc = {.xdt = c->x->dtype, .rows_ok = 1, .cols_both = 1};
    /* dbias's partials: one row of column sums per group of QF_DBIAS_GROUP tile rows */
    const int32_t parts = (int32_t)QF_DBIAS_PARTS(c->M);
    if (c->dbias)
        QF_TRY(qf_ctx_scratch(ctx, (size_t)parts * (size_t)c->K * sizeof(float),
                              (void **)&p.dbias_part,
                              "dbias's partial column sums", stream));
    qf_status s = QF_OK;
    if (current && c->amax_given) {
        s = qf_q_reduce(c, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, QF_SLOT_AMAX, stream);
        p.pass = 1;
    } else if (current) {
        s = qf_q_zero(c, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, QF_SLOT_AMAX, stream);
        /* the amax pass of an input without a norm in the `_amax` entry where it can run, else,
         * of an activation prologue's input, in the `_cols` entry where it runs alone (a SwiGLU
         * dh's da, h1 and h2 read once; the rows entry holds 2 vectors of them per thread); of
         * other inputs in a rows entry */
        rc.no_cols = c->prologue == QF_PROLOGUE_NONE;
        if (s == QF_OK && !qf_q_amax_entry(ctx, &lk, k, c, &p, stream, &s))
            s = qf_ctx_launch_rows(ctx, &lk, k, &rc, &p, stream);
        if (s == QF_OK)
            s = qf_q_reduce(c, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, QF_SLOT_AMAX, stream);
        p.pass = 1;
        rc.no_cols = 0;
    }
    if (s == QF_OK)
        s = qf_ctx_launch_rows(ctx, &lk, k, &rc, &p, stream);
    if (!c->dbias)
        return s;
    if (s == QF_OK)
        s = qf_dbias_reduce(ctx, c->op, c->dbias_k, p.dbias_part, parts, c->K, c->dbias, stream);
    const qf_status f = qf_ctx_scratch_free(ctx, p.dbias_part, stream);
    return s != QF_OK ? s : f;
}

/* =====================================================================} */

/* {===================================================================== MXFP8 */

/* Zeroes the selected scale matrices (their padding entries are always 0x00; the kernel writes
 * every real entry), then launches the tiled entry, or a row-in-registers entry for rowwise 1x32
 * blocks (not the 32x32 weight tiles; a partial last block, K % 32 != 0, is fine). */
static qf_status qf_q_mxfp8(qf_ctx_t *ctx, qf_qcall *c, void *stream) {
    QF_TRY(qf_check_layout(c->op, c->out));
    const qf_kernel_entry *k;
    QF_TRY(qf_q_slots_kernel(c, NULL, &k));
    qf_q_params p = qf_q_params_of(c);
    qf_loaded_kernel lk;
    QF_TRY(qf_q_load(ctx, c, k, c->out->layout, stream, &lk));
    const int block_2d = qf_registry_kernel_recipe(k)->block_2d[k->role]; /* 32x32 tiles */
    const qf_rows_call rc = {.xdt = k->in_dtype, .rows_ok = !block_2d};
    QF_TRY(qf_q_zero(c, QF_OUT_ROWWISE, QF_SLOT_ROWWISE_SCALE_INV, stream));
    QF_TRY(qf_q_zero(c, QF_OUT_COLUMNWISE, QF_SLOT_COLUMNWISE_SCALE_INV, stream));
    return qf_ctx_launch_rows(ctx, &lk, k, &rc, &p, stream);
}

/* =====================================================================} */

/* {===================================================================== FP8 block scaling */

/* FP8 block scaling (numerics 2.5). A columnwise copy (and the weights' 128x128 tiles) comes
 * from the tiled entry, one block per 4 128x128 tiles of a strip: without a norm both copies
 * from one read of x; with one, where x's alignment allows a row-in-registers entry, that entry
 * first writes the statistics (and the rowwise copy) and the tiled entry the columnwise copy from
 * them (cols_after_rows; or, for 16-bit x in whole 128x64 tiles, the `_cols` entry:
 * cols_after_stats), else the tiled entry alone, one block per strip of 128 rows (the
 * statistics need whole rows). The rowwise 1x128 copy alone comes from a row-in-registers entry
 * where x's alignment allows. See qf_ctx_launch_rows.
 * The scale options reach the kernel in its parameter block; block (0, 0) writes the 1.0
 * padding of the scale matrices, so nothing is cleared before the launch. */
static qf_status qf_q_fp8_block(qf_ctx_t *ctx, qf_qcall *c, void *stream) {
    QF_TRY(qf_check_layout(c->op, c->out));
    if (c->out->layout != QF_SCALE_LAYOUT_COMPACT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: out->layout is %s; FP8 block scaling has one "
                            "scale layout, compact (numerics 2.5)", c->op,
                            qf_enum_name(QF_ENUM_SCALE_LAYOUT, c->out->layout));
    const qf_kernel_entry *k;
    QF_TRY(qf_q_slots_kernel(c, NULL, &k));
    qf_q_params p = qf_q_params_of(c);
    p.amax_epsilon = c->r->amax_epsilon, p.power_2_scales = c->r->power_2_scales;
    qf_loaded_kernel lk;
    QF_TRY(qf_q_load(ctx, c, k, QF_SCALE_LAYOUT_COMPACT, stream, &lk));
    /* 4 chunks per block of the tiled entry: the copies of the next ones overlap each chunk's work
     * (QF_FP8_BLOCK_TILED_SMEM) */
    const qf_rows_call rc = {.xdt = k->in_dtype,
                             .rows_ok = k->role != QF_ROLE_WEIGHT,
                             .tiled_k = 4 * QF_FP8_BLOCK,
                             .tiled_smem = QF_FP8_BLOCK_TILED_SMEM(qf_dtype_size(k->in_dtype)),
                             .cols_after_rows = 1,
                             .cols_after_stats = 1,
                             .cols_tile_m = QF_FP8_BLOCK};
    return qf_ctx_launch_rows(ctx, &lk, k, &rc, &p, stream);
}

/* =====================================================================} */

/* {===================================================================== NVFP4 */

/* M and K multiples of 16 (numerics 2.4); x (h), gamma, beta and da 16-byte aligned (the vector
 * loads). */
static qf_status qf_q_nv_check(const qf_qcall *c) {
    const int act = c->prologue != QF_PROLOGUE_NONE;
    const char *xn = qf_q_x_name(c);
    if (c->M % 16 != 0 || c->K % 16 != 0)
        return qf_set_error(QF_ERR_INVALID_ARG,
                            "%s: %s %s [M, K] = [%lld, %lld]; NVFP4 "
                            "needs M and K to be multiples of 16 (numerics 2.4)", c->op,
                            !act ? xn : c->da ? "the quantized dh" : "the quantized a = act(h)",
                            !act ? "is viewed as" : "is", (long long)c->M, (long long)c->K);
    const void *const ptrs[] = {c->x->data, c->nd->norm ? c->nd->gamma.data : NULL,
                                c->nd->norm == QF_NORM_LAYERNORM ? c->nd->beta.data : NULL,
                                c->da ? c->da->data : NULL};
    const char *const names[] = {xn, "gamma", "beta", "da"};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptrs[i] % QF_NV_ALIGN)
            return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s.data %p is not 16-byte aligned",
                                c->op, names[i], ptrs[i]);
    return QF_OK;
}

/* Zeroes the selected scale matrices (padding is 0x00; pass 2 writes every real entry) and amax
 * slots (pass 1 max-merges into them), then runs pass 1 on cdiv(M, tile_m) blocks, the thread's
 * amax reduction, and pass 2 on one thread per 16x8 work item. */
static qf_status qf_q_nvfp4(qf_ctx_t *ctx, qf_qcall *c, const qf_rng *rng, void *stream) {
    QF_TRY(qf_q_nv_check(c));
    QF_TRY(qf_check_layout(c->op, c->out));
    const int sr = c->r->sr[c->role];
    if (sr && !rng)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: rng is NULL, but recipe '%s' rounds "
                            "gradients stochastically; pass a seed and offset", c->op,
                            c->r->name);
    const qf_kernel_entry *k;
    QF_TRY(qf_q_slots_kernel(c, NULL, &k));
    qf_q_params p = qf_q_params_of(c);
    if (sr)
        p.sr_seed = rng->seed, p.sr_offset = rng->offset;
    const int64_t grid1 = (p.M + k->tile_m - 1) / k->tile_m;
    const int64_t grid2 = ((p.M / 16) * (p.K / 8) + k->block_threads - 1) / k->block_threads;
    if (grid1 > 0x7fffffff || grid2 > 0x7fffffff) /* before any device work */
        return qf_set_error(QF_ERR_UNSUPPORTED, "%s: M * K = %lld * %lld is too large for one "
                            "launch", c->op, (long long)p.M, (long long)p.K);
    qf_loaded_kernel lk;
    QF_TRY(qf_q_load(ctx, c, k, c->out->layout, stream, &lk));
    if (!lk.fn_amax)
        return qf_set_error(QF_ERR_INTERNAL, "%s: kernel %s has no %s_amax entry", c->op, k->name,
                            k->name);
    QF_TRY(qf_q_zero(c, QF_OUT_ROWWISE, QF_SLOT_ROWWISE_SCALE_INV, stream));
    QF_TRY(qf_q_zero(c, QF_OUT_COLUMNWISE, QF_SLOT_COLUMNWISE_SCALE_INV, stream));
    QF_TRY(qf_q_zero(c, QF_OUT_ROWWISE, QF_SLOT_AMAX_ROWWISE, stream));
    QF_TRY(qf_q_zero(c, QF_OUT_COLUMNWISE, QF_SLOT_AMAX_COLUMNWISE, stream));
    QF_TRY(qf_ctx_launch(ctx, lk.fn_amax, (unsigned)grid1, k->block_threads, 0, &p, stream));
    QF_TRY(qf_q_reduce(c, QF_OUT_ROWWISE, QF_SLOT_AMAX_ROWWISE, stream));
    QF_TRY(qf_q_reduce(c, QF_OUT_COLUMNWISE, QF_SLOT_AMAX_COLUMNWISE, stream));
    return qf_ctx_launch(ctx, lk.fn, (unsigned)grid2, k->block_threads, 0, &p, stream);
}

/* =====================================================================} */

/* The family's launcher for a checked call. */
static qf_status qf_q_run(qf_ctx_t *ctx, qf_qcall *c, const float *scale, const qf_rng *rng,
                          void *stream) {
    switch (c->r->family) {
    case QF_FAMILY_FP8_DELAYED:
    case QF_FAMILY_FP8_CURRENT:
        return qf_q_fp8(ctx, c, scale, stream);
    case QF_FAMILY_MXFP8:
        return qf_q_mxfp8(ctx, c, stream);
    case QF_FAMILY_NVFP4:
        return qf_q_nvfp4(ctx, c, rng, stream);
    case QF_FAMILY_FP8_BLOCK:
        return qf_q_fp8_block(ctx, c, stream);
    default:
        return qf_family_unsupported(c->op, c->r);
    }
}

qf_status qf_quantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                      const qf_norm_desc *norm, const float *scale, const qf_rng *rng,
                      qf_quantized *out, void *stream) {
    qf_qcall c = {.op = "qf_quantize", .role = role, .nd = norm ? norm : &qf_norm_none, .x = x,
                  .out = out};
    QF_TRY(qf_q_check(&c, ctx, recipe));
    return qf_q_run(ctx, &c, scale, rng, stream);
}

/* The checks of a quantization through an activation prologue (c's op, x = h, da, out set):
 * recipe, act and h, da, out; c's role, prologue, M and K. */
static qf_status qf_q_act_check(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                                qf_qcall *c) {
    int64_t F = 0;
    c->role = c->da ? QF_ROLE_GRAD : QF_ROLE_INPUT;
    QF_TRY(qf_check_recipe(c->op, ctx, recipe, &c->r));
    QF_TRY(qf_check_act_input(c->op, act, c->x, &c->M, &c->K, &F)); /* c->K: h's Fin */
    c->prologue = c->da ? QF_PROLOGUE_DACT(act) : QF_PROLOGUE_ACT(act);
    if (c->da)
        QF_TRY(qf_check_grad_input(c->op, "da", c->da, c->M, F, "the gradient of the "
                                   "activation's output", "[M, F]"));
    else
        c->K = F; /* the quantized a is [M, F] */
    return qf_q_check_out(c);
}

qf_status qf_quantize_act(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                          const qf_tensor *h, const qf_tensor *da, const float *scale,
                          const qf_rng *rng, qf_quantized *out, void *stream) {
    qf_qcall c = {.op = "qf_quantize_act", .nd = &qf_norm_none, .x = h, .out = out, .da = da};
    QF_TRY(qf_q_act_check(ctx, recipe, act, &c));
    return qf_q_run(ctx, &c, scale, rng, stream);
}

/* 1 when a checked call with dbias takes its fused path: the family's act_tile divides M and K
 * (x's or h's Fin), the tiles fit one grid, both copies asked for, and x (h), da (if any) and the
 * copies 16-byte aligned (the conditions of the `_cols` entry running alone,
 * qf_ctx_launch_rows). */
static int qf_q_dbias_fused(const qf_qcall *c) {
    const unsigned t = qf_families[c->r->family].act_tile;
    return t > 0 && c->M % t == 0 && c->K % t == 0 && (c->M / t) * (c->K / t) <= 0x7fffffff &&
           (c->outputs & QF_OUT_COLUMNWISE) && (c->outputs & QF_OUT_ROWWISE) &&
           qf_aligned16(c->x->data) && (!c->da || qf_aligned16(c->da->data)) &&
           qf_aligned16(c->out->t[QF_SLOT_ROWWISE_DATA].data) &&
           qf_aligned16(c->out->t[QF_SLOT_COLUMNWISE_DATA].data);
}

/* The quantization of a checked call c (grad role; through the prologue of act when c->da is
 * set) and dbias [K] of its input: dbias checked against the fake shapes of a QF_OP_DBIAS query
 * and apart from c's inputs and every slot it writes, then one kernel where qf_q_dbias_fused
 * allows, else the quantization and then qf_dbias (qf_dbias_act through a prologue). */
static qf_status qf_q_dbias_run(qf_ctx_t *ctx, const char *recipe, qf_qcall *c,
                                qf_activation act, const float *scale, const qf_rng *rng,
                                qf_tensor *dbias, void *stream) {
    const char *xname = c->da ? "h" : "dy";
    const qf_kernel_entry *dbk = NULL;
    const qf_tensor scale_t = qf_q_scale_tensor(c, scale);
    const qf_inputs in = {3, {xname, "da", "scale"}, {c->x, c->da, &scale_t}};
    QF_TRY(qf_dbias_check(c->op, c->r, c->x->dtype, c->M, c->K, xname, dbias, &in, &dbk));
    qf_shape_query q; /* dbias apart from every slot the quantization writes */
    qf_shape shapes[QF_MAX_SHAPES];
    int n = 0;
    QF_TRY(qf_q_shapes(c, &q, shapes, &n));
    for (int i = 0; i < n; i++) {
        const int slot = qf_slot_from_name(shapes[i].name);
        char name[64];
        snprintf(name, sizeof name, "out->%s", shapes[i].name);
        if (slot >= 0)
            QF_TRY(qf_check_disjoint(c->op, "dbias", dbias, name, &c->out->t[slot]));
    }
    if (!qf_q_dbias_fused(c)) {
        QF_TRY(qf_q_run(ctx, c, scale, rng, stream));
        return c->da ? qf_dbias_act(ctx, recipe, act, c->x, c->da, dbias, stream)
                     : qf_dbias(ctx, recipe, c->x, dbias, stream);
    }
    c->dbias = dbias, c->dbias_k = dbk;
    return qf_q_run(ctx, c, scale, rng, stream);
}

qf_status qf_quantize_dbias_act(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                                const qf_tensor *h, const qf_tensor *da, const float *scale,
                                const qf_rng *rng, qf_quantized *out, qf_tensor *dbias,
                                void *stream) {
    static const char op[] = "qf_quantize_dbias_act";
    qf_qcall c = {.op = op, .nd = &qf_norm_none, .x = h, .out = out, .da = da};
    QF_TRY(qf_check_recipe(op, ctx, recipe, &c.r));
    if (!h || !da)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: %s is NULL%s", op, !h ? "h" : "da",
                            !h ? "" : "; the fused dbias is of the gradient dh = da act'(h)");
    QF_TRY(qf_q_act_check(ctx, recipe, act, &c));
    return qf_q_dbias_run(ctx, recipe, &c, act, scale, rng, dbias, stream);
}

qf_status qf_quantize_dbias(qf_ctx_t *ctx, const char *recipe, const qf_tensor *dy,
                            const float *scale, const qf_rng *rng, qf_quantized *out,
                            qf_tensor *dbias, void *stream) {
    qf_qcall c = {.op = "qf_quantize_dbias", .role = QF_ROLE_GRAD, .nd = &qf_norm_none, .x = dy,
                  .out = out, .x_name = "dy"};
    if (!dy) /* named as dy, not as qf_quantize's x */
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: dy is NULL", c.op);
    QF_TRY(qf_q_check(&c, ctx, recipe));
    return qf_q_dbias_run(ctx, recipe, &c, QF_ACT_GELU /* unused */, scale, rng, dbias, stream);
}

qf_status qf_quantize_cast(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                           qf_quantized *out, void *stream) {
    qf_qcall c = {.op = "qf_quantize_cast", .role = role, .nd = &qf_norm_none, .x = x,
                  .out = out, .amax_given = 1};
    QF_TRY(qf_q_check(&c, ctx, recipe));
    if (c.r->family != QF_FAMILY_FP8_CURRENT)
        return qf_set_error(QF_ERR_INVALID_ARG, "%s: recipe '%s' is %s; a cast from a given amax "
                            "is current scaling's (fp8_current)", c.op, c.r->name,
                            qf_family_name(c.r->family));
    return qf_q_run(ctx, &c, NULL, NULL, stream);
}
