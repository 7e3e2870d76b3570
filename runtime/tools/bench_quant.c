/* bench_quant.c: qfuse-bench's quantizer rows: norm + quantize and weight quantize for every
 * selected recipe x norm x x dtype x outputs x shape, bytes counted from the recipe's fake
 * shapes, median time, TB/s and the ratio to the copy ceiling. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* tokens x hidden of real models' layers. */
static const int64_t nq_shapes_full[][2] = {
    {16384, 4096}, {16384, 8192}, {4096, 12288}, {8192, 4096}, {2048, 16384}};
static const int64_t nq_shapes_quick[][2] = {{8192, 4096}};
const qf_dtype bench_x_dtypes[BENCH_N_X_DTYPES] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};

/* Rotated inputs of one (shape, x dtype): x sets, gamma/beta in x's dtype, the scale. */
typedef struct input_set {
    int64_t M, K;
    qf_dtype dt;
    int n_rot;
    qf_tensor x[MAX_ROT];
    qf_tensor gamma, beta;
    float *scale;               /* device [1] */
} input_set;

static void input_alloc(input_set *in, const bench *b, qf_dtype dt, int64_t M, int64_t K) {
    *in = (input_set){.M = M, .K = K, .dt = dt};
    size_t xb = (size_t)(M * K) * qf_dtype_size(dt), gb = (size_t)K * qf_dtype_size(dt);
    in->n_rot = bench_rotation_count(b, (double)xb);
    void *h = bench_host_random(dt, M * K, 21);
    for (int i = 0; i < in->n_rot; i++)
        in->x[i] = bench_tensor_2d(bench_dev_rotated(h, xb, i, in->n_rot), dt, M, K);
    free(h);
    void *hg = bench_host_random(dt, 2 * K, 23); /* gamma, beta ~ N(0, 1): values do not matter */
    in->gamma = bench_tensor_1d(bench_dev_upload(hg, gb), dt, K);
    in->beta = bench_tensor_1d(bench_dev_upload((char *)hg + gb, gb), dt, K);
    free(hg);
    const float one = 1.0f;
    in->scale = bench_dev_upload(&one, sizeof one);
}

static void input_free(input_set *in) {
    for (int i = 0; i < in->n_rot; i++)
        cudaFree(in->x[i].data);
    cudaFree(in->gamma.data), cudaFree(in->beta.data), cudaFree(in->scale);
}

/* One norm + quantize (or weight quantize) configuration with its rotated outputs, bound to
 * the slots of one quantized tensor per set. */
typedef struct nq_run {
    bench *b;
    const qf_recipe *r;
    const input_set *in;
    qf_op op;
    qf_norm norm;
    unsigned outputs;
    out_set o[MAX_ROT];
    qf_quantized q[MAX_ROT];
} nq_run;

/* The op on set i: one code path for every family (the recipe picks it; weights never round
 * stochastically, and the scale is delayed scaling's, ignored by the other families). */
static qf_status nq_call(nq_run *q, int i) {
    const input_set *in = q->in;
    if (q->op == QF_OP_QUANTIZE)
        return qf_quantize(q->b->ctx, q->r->name, QF_ROLE_WEIGHT, &in->x[i], NULL, in->scale,
                           NULL, &q->q[i], NULL);
    const qf_norm_desc nd = {.norm = q->norm, .eps = NORM_EPS, .gamma = in->gamma,
                             .beta = q->norm == QF_NORM_LAYERNORM ? in->beta : (qf_tensor){0}};
    return qf_quantize(q->b->ctx, q->r->name, QF_ROLE_INPUT, &in->x[i], &nd, in->scale, NULL,
                       &q->q[i], NULL);
}

static void nq_launch(void *arg, int i) {
    QF_OR_DIE(nq_call(arg, i));
}

/* Bytes one launch moves: x read, gamma (and beta) read, every output written. */
static double nq_bytes(const nq_run *q) {
    const input_set *in = q->in;
    double gb = (double)in->K * (double)qf_dtype_size(in->dt);
    double bytes = (double)(in->M * in->K) * (double)qf_dtype_size(in->dt);
    if (q->op == QF_OP_NORM_QUANTIZE)
        bytes += q->norm == QF_NORM_LAYERNORM ? 2.0 * gb : gb;
    for (int i = 0; i < q->o[0].n; i++)
        bytes += (double)q->o[0].sh[i].bytes;
    return bytes;
}

static const char *outputs_name(unsigned outputs) {
    return outputs == QF_OUT_ROWWISE ? "rowwise" : "rowwise+columnwise";
}

/* Times one configuration; returns 0 (after saying so) when libqfuse does not implement the
 * recipe's family for this op, so that the caller skips the recipe. */
static int bench_nq(bench *b, const input_set *in, const qf_recipe *r, qf_op op,
                    qf_norm norm, unsigned outputs) {
    nq_run *q = calloc(1, sizeof *q); /* ~100 KiB: not on the stack */
    if (!q)
        exit(1);
    q->b = b, q->r = r, q->in = in, q->op = op, q->norm = norm, q->outputs = outputs;
    qf_shape_query sq = {.op = op, .role = op == QF_OP_QUANTIZE ? QF_ROLE_WEIGHT : QF_ROLE_INPUT,
                         .norm = norm, .outputs = outputs, .M = in->M, .K = in->K};
    for (int i = 0; i < in->n_rot; i++) {
        bench_out_alloc(&q->o[i], r, &sq);
        q->q[i] = bench_out_quantized(&q->o[i], QF_SCALE_LAYOUT_COMPACT);
    }
    qf_status s = nq_call(q, 0); /* untimed: an unimplemented family skips the recipe */
    if (s == QF_ERR_UNSUPPORTED)
        printf("recipe %s: %s; skipped\n", r->name, qf_last_error());
    else
        QF_OR_DIE(s);
    if (s == QF_OK) {
        row w = bench_row_new("qfuse", r->name,
                              op == QF_OP_QUANTIZE ? "quantize_weight" : "norm_quantize");
        w.norm = bench_norm_name(norm), w.dtype = qf_dtype_name(in->dt);
        w.outputs = outputs_name(outputs), w.M = in->M, w.K = in->K;
        w.bytes = nq_bytes(q);
        w.us = bench_time_launches(b, nq_launch, q, in->n_rot);
        w.ratio_copy = w.bytes / (w.us * 1e6) / b->copy_tbps;
        snprintf(w.note, sizeof w.note, "%d input sets rotated", in->n_rot);
        bench_row_emit(b, &w);
    }
    for (int i = 0; i < in->n_rot; i++)
        bench_out_free(&q->o[i]);
    free(q);
    return s == QF_OK;
}

/* Every op of recipe r on the inputs in. */
static void bench_recipe_ops(bench *b, const input_set *in, const qf_recipe *r) {
    static const unsigned outs[] = {QF_OUT_ROWWISE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
    for (qf_norm nm = QF_NORM_LAYERNORM; nm <= QF_NORM_RMSNORM; nm++)
        for (int o = 0; o < 2; o++)
            if (!bench_nq(b, in, r, QF_OP_NORM_QUANTIZE, nm, outs[o]))
                return;
    for (int o = 0; o < 2; o++)
        if (!bench_nq(b, in, r, QF_OP_QUANTIZE, QF_NORM_NONE, outs[o]))
            return;
}

void bench_quantizers(bench *b) {
    const int64_t(*shapes)[2] = b->o.quick ? nq_shapes_quick : nq_shapes_full;
    int n = b->o.quick ? 1 : (int)(sizeof nq_shapes_full / sizeof nq_shapes_full[0]);
    for (int s = 0; s < n; s++)
        for (size_t d = 0; d < BENCH_N_X_DTYPES; d++) {
            if (b->o.dtype >= 0 && (int)bench_x_dtypes[d] != b->o.dtype)
                continue;
            input_set in;
            input_alloc(&in, b, bench_x_dtypes[d], shapes[s][0], shapes[s][1]);
            for (int ri = 0; ri < qf_recipe_count; ri++)
                if (tool_recipe_selected(&b->o.recipes, ri))
                    bench_recipe_ops(b, &in, &qf_recipes[ri]);
            input_free(&in);
        }
}

