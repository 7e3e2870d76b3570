/* demo_train.c: the demo trains the checkpoint's LayerNorm + MLP block (demo_train.h). */
#include "demo_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "mlp_model.h"
#include "ref.h"
#include "registry.h"
#include "safetensors.h"
#include "tool_dbuf.h"
#define QF_TOOL_NAME "qfuse-demo"
#include "tool_util.h"

#define BLOCK_MAX_BYTES (2ull << 30)

/* ==================================================================== the block file */

enum { T_X, T_LN_W, T_LN_B, T_W1, T_B1, T_W2, T_B2, T_COUNT };
static const char *const tensor_names[T_COUNT] = {"x", "ln.weight", "ln.bias", "fc1.weight",
                                                   "fc1.bias", "fc2.weight", "fc2.bias"};

void demo_block_load(const char *path, demo_block *b) {
    static const int ndims[T_COUNT] = {2, 1, 1, 2, 1, 2, 1};
    qf_st_file *f = NULL;
    qf_dtype dt[T_COUNT];
    int64_t d[T_COUNT][8];
    const void *data[T_COUNT];
    QF_OR_DIE(qf_st_open_max(path, BLOCK_MAX_BYTES, &f));
    for (int i = 0; i < T_COUNT; i++) {
        int ndim = 0;
        QF_OR_DIE(qf_st_get(f, tensor_names[i], &dt[i], &ndim, d[i], &data[i]));
        int ok = ndim == ndims[i];
        for (int j = 0; ok && j < ndim; j++)
            ok = d[i][j] >= 1;
        if (!ok) {
            char shape[160] = "";
            for (int j = 0; j < ndim; j++)
                snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld",
                         j ? ", " : "", (long long)d[i][j]);
            fprintf(stderr, "qfuse-demo: %s: tensor '%s' has shape [%s]; expected %d dims, each "
                    "at least 1\n", path, tensor_names[i], shape, ndims[i]);
            exit(1);
        }
    }
    const int64_t M = d[T_X][0], K = d[T_X][1], F = d[T_W1][0], N = d[T_W2][0];
    if (d[T_LN_W][0] != K || d[T_LN_B][0] != K || d[T_W1][1] != K || d[T_B1][0] != F ||
        d[T_W2][1] != F || d[T_B2][0] != N) {
        fprintf(stderr, "qfuse-demo: %s: x is [%lld, %lld], ln.weight [%lld], ln.bias [%lld], "
                "fc1.weight [%lld, %lld], fc1.bias [%lld], fc2.weight [%lld, %lld], fc2.bias "
                "[%lld]; expected x [M, K], ln.weight and ln.bias [K], fc1.weight [F, K], "
                "fc1.bias [F], fc2.weight [N, F], fc2.bias [N]\n", path, (long long)M,
                (long long)K, (long long)d[T_LN_W][0], (long long)d[T_LN_B][0], (long long)F,
                (long long)d[T_W1][1], (long long)d[T_B1][0], (long long)N, (long long)d[T_W2][1],
                (long long)d[T_B2][0]);
        exit(1);
    }
    *b = (demo_block){.M = M, .K = K, .F = F, .N = N, .eps = 1e-12};
    double **dst[T_COUNT] = {&b->x, &b->ln_w, &b->ln_b, &b->w1, &b->b1, &b->w2, &b->b2};
    for (int i = 0; i < T_COUNT; i++) {
        const int64_t n = d[i][0] * (ndims[i] == 2 ? d[i][1] : 1);
        double *v = tool_xmalloc((size_t)n * sizeof *v);
        for (int64_t j = 0; j < n; j++) {
            const float e = qf_load_as_float(data[i], dt[i], j);
            const float h = qf_bf16_to_float(qf_float_to_bf16(e)); /* as the GPU gets it */
            v[j] = i == T_X ? h : e;
            if (!isfinite(h)) { /* training on it would give NaN losses, not an answer */
                fprintf(stderr, "qfuse-demo: %s: tensor '%s' holds %s at element %lld (in "
                        "bf16, as the demo uploads it); the demo trains on finite values only\n",
                        path, tensor_names[i], isnan(h) ? "NaN" : "an infinity", (long long)j);
                exit(1);
            }
        }
        *dst[i] = v;
    }
    qf_st_close(f);
}

void demo_block_free(demo_block *b) {
    free(b->x), free(b->ln_w), free(b->ln_b), free(b->w1), free(b->b1), free(b->w2), free(b->b2);
    memset(b, 0, sizeof *b);
}

/* ==================================================================== parameters and Adam */

enum { P_W1, P_B1, P_W2, P_B2, P_GAMMA, P_BETA, P_COUNT };

/* The trained parameters (fp64 master copies), their gradients and Adam's moments. */
typedef struct trainee {
    int64_t n[P_COUNT];
    double *p[P_COUNT], *g[P_COUNT], *m1[P_COUNT], *m2[P_COUNT];
    int t;
} trainee;

#define ADAM_B1 0.9
#define ADAM_B2 0.999
#define ADAM_EPS 1e-8

static double rms(const double *v, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s / (double)n);
}

/* Elements of each parameter of the block (W1 [F, K], b1 [F], W2 [N, F], b2 [N], gamma, beta). */
static void param_sizes(const demo_block *b, int64_t n[P_COUNT]) {
    const int64_t v[P_COUNT] = {b->F * b->K, b->F, b->N * b->F, b->N, b->K, b->K};
    memcpy(n, v, sizeof v);
}

/* The block's parameters with W1 and W2 perturbed (the same start for every run). */
static void trainee_init(trainee *t, const demo_block *b, const demo_train_opts *o) {
    memset(t, 0, sizeof *t);
    const double *src[P_COUNT] = {b->w1, b->b1, b->w2, b->b2, b->ln_w, b->ln_b};
    int64_t *n = t->n;
    param_sizes(b, n);
    uint64_t s = o->seed;
    for (int i = 0; i < P_COUNT; i++) {
        const size_t bytes = (size_t)n[i] * 8;
        t->p[i] = tool_xmalloc(bytes), t->g[i] = tool_xmalloc(bytes);
        t->m1[i] = memset(tool_xmalloc(bytes), 0, bytes);
        t->m2[i] = memset(tool_xmalloc(bytes), 0, bytes);
        const double sd = i == P_W1 || i == P_W2 ? o->noise * rms(src[i], n[i]) : 0.0;
        for (int64_t j = 0; j < n[i]; j++)
            t->p[i][j] = src[i][j] + (sd > 0.0 ? sd * rng_normal(&s) : 0.0);
    }
}

static void trainee_free(trainee *t) {
    for (int i = 0; i < P_COUNT; i++)
        free(t->p[i]), free(t->g[i]), free(t->m1[i]), free(t->m2[i]);
}

/* One Adam step (Kingma & Ba 2015, bias-corrected) of every parameter from t->g. */
static void adam_step(trainee *t, double lr) {
    t->t++;
    const double c1 = 1.0 - pow(ADAM_B1, t->t), c2 = 1.0 - pow(ADAM_B2, t->t);
    for (int i = 0; i < P_COUNT; i++)
        for (int64_t j = 0; j < t->n[i]; j++) {
            const double g = t->g[i][j];
            t->m1[i][j] = ADAM_B1 * t->m1[i][j] + (1.0 - ADAM_B1) * g;
            t->m2[i][j] = ADAM_B2 * t->m2[i][j] + (1.0 - ADAM_B2) * g * g;
            t->p[i][j] -= lr * (t->m1[i][j] / c1) / (sqrt(t->m2[i][j] / c2) + ADAM_EPS);
        }
}

/* ==================================================================== the loss */

/* The task: y* and ||y*||^2. */
typedef struct task {
    const demo_block *b;
    double *ystar, ss;
} task;

/* Loss ||y - y*||^2 / ||y*||^2 of y [M, N]; with dy not NULL also dy = (y - y*) / rms(y*): the
 * loss's gradient times the constant sqrt(n ||y*||^2) / 2, which keeps dy near 1 for FP8's
 * ranges (Adam's step does not depend on a constant factor of the gradient). */
static double loss_of(const task *tk, const double *y, double *dy) {
    const int64_t n = tk->b->M * tk->b->N;
    const double inv_rms = 1.0 / sqrt(tk->ss / (double)n);
    double e = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = y[i] - tk->ystar[i];
        e += d * d;
        if (dy)
            dy[i] = d * inv_rms;
    }
    return e / tk->ss;
}

static qf_mlp_params model_of(const demo_block *b, const double *const *p) {
    return (qf_mlp_params){.K = b->K, .F = b->F, .N = b->N, .norm = QF_NORM_LAYERNORM,
                           .act = QF_ACT_GELU, .eps = b->eps, .gamma = p[P_GAMMA],
                           .beta = p[P_BETA], .w1 = p[P_W1], .b1 = p[P_B1], .w2 = p[P_W2],
                           .b2 = p[P_B2]};
}

/* y [M, N] = the fp64 block with parameters p on the block's x (qf_mlp_forward; its tensors kept
 * in *sv when sv is not NULL). */
static void model_forward(const demo_block *b, const double *const *p, double *y,
                          qf_mlp_saved *sv) {
    const qf_mlp_params mp = model_of(b, p);
    if (qf_mlp_forward(&mp, b->x, b->M, y, sv) != 0)
        tool_out_of_memory(0);
}

/* ==================================================================== one run */

/* A run computes the loss of the trainee's parameters and, when asked, their gradients. */
typedef struct runner {
    double (*loss)(struct runner *r, trainee *t, int grads);
    const task *tk;
} runner;

/* The fp64 baseline: mlp_model.c. */
typedef struct base_run {
    runner base;
    double *y, *dy;
} base_run;

static double base_loss(runner *rr, trainee *t, int grads) {
    base_run *r = (base_run *)rr;
    const demo_block *b = rr->tk->b;
    qf_mlp_saved sv;
    model_forward(b, (const double *const *)t->p, r->y, grads ? &sv : NULL);
    const double l = loss_of(rr->tk, r->y, grads ? r->dy : NULL);
    if (grads) {
        const qf_mlp_grads g = {.dgamma = t->g[P_GAMMA], .dbeta = t->g[P_BETA],
                                .dw1 = t->g[P_W1], .db1 = t->g[P_B1], .dw2 = t->g[P_W2],
                                .db2 = t->g[P_B2]};
        const qf_mlp_params mp = model_of(b, (const double *const *)t->p);
        const int rc = qf_mlp_backward(&mp, &sv, r->dy, &g);
        qf_mlp_saved_free(&sv);
        if (rc != 0)
            tool_out_of_memory(0);
    }
    return l;
}

/* A recipe: qf_layernorm_mlp_fwd / _bwd on the GPU. Its quantized tensors are indexed by
 * TOOL_MLP_*, the order of delayed scaling's arrays. */
typedef struct gpu_run {
    runner base;
    qf_ctx_t *ctx;
    const qf_recipe *r;
    dbuf x, prm[P_COUNT], y, dy, h, a, da, dh, dxn, dx, grad[P_COUNT];
    qf_shape qs[TOOL_MLP_COUNT][TOOL_MAX_SHAPES];
    dbuf qb[TOOL_MLP_COUNT][TOOL_MAX_SHAPES];
    int nq[TOOL_MLP_COUNT];
    dbuf amax, hist, scale, sinv, fmt; /* delayed scaling: [TOOL_MLP_COUNT] each, hist
                                        * [TOOL_MLP_COUNT, H] */
    qf_ln_mlp mlp;
    qf_ln_mlp_grads g;
    qf_tensor tx, ty, tdy;
    uint16_t *stage;                   /* host bf16 staging */
    float *fstage;                     /* host fp32 staging */
    double *yh, *dyh;
    uint64_t seed, step;
} gpu_run;

/* Dtypes of the gradients the op writes: fp32 weight and norm gradients, bf16 biases (the dtype
 * of dh and dy). */
static qf_dtype grad_dtype(int i) {
    return i == P_B1 || i == P_B2 ? QF_DTYPE_BF16 : QF_DTYPE_FP32;
}

static void upload_bf16(gpu_run *r, const dbuf *d, const double *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        r->stage[i] = qf_float_to_bf16((float)v[i]);
    CUDA_OR_DIE(cudaMemcpy(d->d, r->stage, (size_t)n * 2, cudaMemcpyHostToDevice));
}

static void download(gpu_run *r, const dbuf *d, qf_dtype dt, int64_t n, double *v) {
    void *h = dt == QF_DTYPE_FP32 ? (void *)r->fstage : (void *)r->stage;
    CUDA_OR_DIE(cudaMemcpy(h, d->d, (size_t)n * qf_dtype_size(dt), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++)
        v[i] = qf_load_as_float(h, dt, i);
}

static double gpu_loss(runner *rr, trainee *t, int grads) {
    gpu_run *r = (gpu_run *)rr;
    const demo_block *b = rr->tk->b;
    const char *rn = r->r->name;
    for (int i = 0; i < P_COUNT; i++)
        upload_bf16(r, &r->prm[i], t->p[i], t->n[i]);
    r->mlp.weight_version++; /* the weight cache quantizes W1 and W2 again */
    QF_OR_DIE(qf_layernorm_mlp_fwd(r->ctx, rn, &r->tx, &r->mlp, &r->ty, NULL));
    download(r, &r->y, QF_DTYPE_BF16, b->M * b->N, r->yh);
    const double l = loss_of(rr->tk, r->yh, grads ? r->dyh : NULL);
    if (grads) {
        upload_bf16(r, &r->dy, r->dyh, b->M * b->N);
        r->g.rng_dy = (qf_rng){r->seed, 2 * r->step};
        r->g.rng_dh = (qf_rng){r->seed, 2 * r->step + 1};
        QF_OR_DIE(qf_layernorm_mlp_bwd(r->ctx, rn, &r->tx, &r->tdy, &r->mlp, &r->g, NULL));
        for (int i = 0; i < P_COUNT; i++)
            download(r, &r->grad[i], grad_dtype(i), t->n[i], t->g[i]);
        r->step++;
    }
    if (r->r->family == QF_FAMILY_FP8_DELAYED) /* the step's amaxes into the next step's scales */
        QF_OR_DIE(qf_scale_update(r->ctx, rn, TOOL_MLP_COUNT, r->r->amax_history_len, r->amax.d,
                                  r->hist.d, r->scale.d, r->sinv.d, r->fmt.d, NULL));
    return l;
}

/* Both copies of every quantized tensor, sized by the fake shapes, and their slots. */
static void gpu_alloc_quantized(gpu_run *r, const qf_shape_query qs[TOOL_MLP_COUNT]) {
    qf_quantized *dst[TOOL_MLP_COUNT];
    tool_mlp_quantized(&r->mlp, &r->g, dst);
    const qf_scale_layout layout = tool_gemm_scale_layout(r->r);
    const int delayed = r->r->family == QF_FAMILY_FP8_DELAYED;
    for (int i = 0; i < TOOL_MLP_COUNT; i++) {
        r->nq[i] = alloc_from_shapes(r->r, &qs[i], r->qs[i], r->qb[i], TOOL_MAX_SHAPES);
        bind_slots(r->qs[i], r->qb[i], r->nq[i], dst[i]);
        dst[i]->layout = layout;
        if (delayed) /* each amax into its entry of the scale update's array */
            dst[i]->t[QF_SLOT_AMAX].data = (float *)r->amax.d + i;
    }
}

static void gpu_setup(gpu_run *r, qf_ctx_t *ctx, const qf_recipe *rec, const task *tk,
                      uint64_t seed) {
    const demo_block *b = tk->b;
    const int64_t M = b->M, K = b->K, F = b->F, N = b->N;
    memset(r, 0, sizeof *r);
    r->base = (runner){gpu_loss, tk};
    r->ctx = ctx, r->r = rec, r->seed = seed;
    int64_t big = 0; /* the largest tensor staged */
    const int64_t sizes[] = {M * K, M * F, F * K, N * F, M * N};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        big = sizes[i] > big ? sizes[i] : big;
    r->stage = tool_xmalloc((size_t)big * 2), r->fstage = tool_xmalloc((size_t)big * 4);
    r->yh = tool_xmalloc((size_t)(M * N) * 8), r->dyh = tool_xmalloc((size_t)(M * N) * 8);
    r->x = dbuf_alloc((size_t)(M * K) * 2);
    upload_bf16(r, &r->x, b->x, M * K);
    int64_t pn[P_COUNT];
    param_sizes(b, pn);
    for (int i = 0; i < P_COUNT; i++) {
        r->prm[i] = dbuf_alloc((size_t)pn[i] * 2);
        r->grad[i] = dbuf_alloc((size_t)pn[i] * qf_dtype_size(grad_dtype(i)));
    }
    r->y = dbuf_alloc((size_t)(M * N) * 2), r->dy = dbuf_alloc((size_t)(M * N) * 2);
    r->h = dbuf_alloc((size_t)(M * F) * 2), r->a = dbuf_alloc((size_t)(M * F) * 2);
    r->da = dbuf_alloc((size_t)(M * F) * 4), r->dh = dbuf_alloc((size_t)(M * F) * 2);
    r->dxn = dbuf_alloc((size_t)(M * K) * 4), r->dx = dbuf_alloc((size_t)(M * K) * 2);
    const int H = rec->amax_history_len > 0 ? rec->amax_history_len : 1;
    float ones[TOOL_MLP_COUNT];
    uint8_t fmt[TOOL_MLP_COUNT];
    qf_shape_query qs[TOOL_MLP_COUNT];
    tool_mlp_queries(M, K, F, N, QF_ACT_GELU, QF_NORM_LAYERNORM, qs);
    for (int i = 0; i < TOOL_MLP_COUNT; i++)
        ones[i] = 1.0f, fmt[i] = (uint8_t)rec->fmt[qs[i].role];
    r->amax = dbuf_alloc(sizeof ones), r->hist = dbuf_alloc((size_t)TOOL_MLP_COUNT * H * 4);
    r->scale = dbuf_upload(ones, sizeof ones), r->sinv = dbuf_upload(ones, sizeof ones);
    r->fmt = dbuf_upload(fmt, sizeof fmt);
    CUDA_OR_DIE(cudaMemset(r->amax.d, 0, sizeof ones));
    CUDA_OR_DIE(cudaMemset(r->hist.d, 0, (size_t)TOOL_MLP_COUNT * H * 4));
    const float *sc = r->scale.d;
    r->mlp = (qf_ln_mlp){
        .norm = {.norm = QF_NORM_LAYERNORM, .eps = (float)b->eps,
                 .gamma = tens(&r->prm[P_GAMMA], QF_DTYPE_BF16, 1, K, 0),
                 .beta = tens(&r->prm[P_BETA], QF_DTYPE_BF16, 1, K, 0)},
        .act = QF_ACT_GELU,
        .w1 = tens(&r->prm[P_W1], QF_DTYPE_BF16, 2, F, K),
        .b1 = tens(&r->prm[P_B1], QF_DTYPE_BF16, 1, F, 0),
        .w2 = tens(&r->prm[P_W2], QF_DTYPE_BF16, 2, N, F),
        .b2 = tens(&r->prm[P_B2], QF_DTYPE_BF16, 1, N, 0),
        .x_scale = sc + TOOL_MLP_X, .w1_scale = sc + TOOL_MLP_W1, .a_scale = sc + TOOL_MLP_A,
        .w2_scale = sc + TOOL_MLP_W2,
        .h = tens(&r->h, QF_DTYPE_BF16, 2, M, F), .a = tens(&r->a, QF_DTYPE_BF16, 2, M, F)};
    r->g = (qf_ln_mlp_grads){
        .dy_scale = sc + TOOL_MLP_DY, .dh_scale = sc + TOOL_MLP_DH,
        .da = tens(&r->da, QF_DTYPE_FP32, 2, M, F), .dh = tens(&r->dh, QF_DTYPE_BF16, 2, M, F),
        .dxn = tens(&r->dxn, QF_DTYPE_FP32, 2, M, K),
        .dw1 = tens(&r->grad[P_W1], QF_DTYPE_FP32, 2, F, K),
        .dw2 = tens(&r->grad[P_W2], QF_DTYPE_FP32, 2, N, F),
        .db1 = tens(&r->grad[P_B1], QF_DTYPE_BF16, 1, F, 0),
        .db2 = tens(&r->grad[P_B2], QF_DTYPE_BF16, 1, N, 0)};
    r->g.norm.dx = tens(&r->dx, QF_DTYPE_BF16, 2, M, K);
    r->g.norm.dgamma = tens(&r->grad[P_GAMMA], QF_DTYPE_FP32, 1, K, 0);
    r->g.norm.dbeta = tens(&r->grad[P_BETA], QF_DTYPE_FP32, 1, K, 0);
    gpu_alloc_quantized(r, qs);
    r->tx = tens(&r->x, QF_DTYPE_BF16, 2, M, K);
    r->ty = tens(&r->y, QF_DTYPE_BF16, 2, M, N), r->tdy = tens(&r->dy, QF_DTYPE_BF16, 2, M, N);
}

static void gpu_free(gpu_run *r) {
    dbuf *all[] = {&r->x, &r->y, &r->dy, &r->h, &r->a, &r->da, &r->dh, &r->dxn, &r->dx,
                   &r->amax, &r->hist, &r->scale, &r->sinv, &r->fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dbuf_free(all[i]);
    for (int i = 0; i < P_COUNT; i++)
        dbuf_free(&r->prm[i]), dbuf_free(&r->grad[i]);
    for (int i = 0; i < TOOL_MLP_COUNT; i++)
        for (int j = 0; j < r->nq[i]; j++)
            dbuf_free(&r->qb[i][j]);
    free(r->stage), free(r->fstage), free(r->yh), free(r->dyh);
}

/* ==================================================================== training */

/* Trains from the common start; loss[s] for s < steps is the loss before update s, loss[steps]
 * the final parameters', *loss64 theirs through the fp64 model. Returns the milliseconds per
 * step. */
static double train(runner *rn, const demo_block *b, const demo_train_opts *o, double *loss,
                    double *loss64) {
    trainee t;
    trainee_init(&t, b, o);
    const double t0 = now_ms();
    for (int s = 0; s < o->steps; s++) {
        loss[s] = rn->loss(rn, &t, 1);
        if (!isfinite(loss[s])) {
            for (int j = s + 1; j <= o->steps; j++)
                loss[j] = loss[s];
            *loss64 = loss[s];
            trainee_free(&t);
            return (now_ms() - t0) / (s + 1);
        }
        adam_step(&t, o->lr);
    }
    const double ms = (now_ms() - t0) / o->steps;
    loss[o->steps] = rn->loss(rn, &t, 0);
    double *y = tool_xmalloc((size_t)(b->M * b->N) * 8); /* through the fp64 model */
    model_forward(b, (const double *const *)t.p, y, NULL);
    *loss64 = loss_of(rn->tk, y, NULL);
    free(y);
    trainee_free(&t);
    return ms;
}

int demo_block_fits(const qf_recipe *r, const demo_block *b) {
    if (!tool_recipe_quantizes((int)(r - qf_recipes))) {
        printf("| %-12s | not trained: family %s has no quantizer or no GEMM yet\n", r->name,
               qf_family_name(r->family));
        return 0;
    }
    /* what each query is, in the block's terms (its M, K, F, N), for the line that refuses it */
    static const char *const what[TOOL_MLP_COUNT + TOOL_MLP_GEMM_COUNT] = {
        [TOOL_MLP_X] = "quantizing x [M, K]",
        [TOOL_MLP_W1] = "quantizing fc1.weight [F, K]",
        [TOOL_MLP_A] = "quantizing a [M, F]",
        [TOOL_MLP_W2] = "quantizing fc2.weight [N, F]",
        [TOOL_MLP_DY] = "quantizing dy [M, N]",
        [TOOL_MLP_DH] = "quantizing dh [M, F]",
        [TOOL_MLP_COUNT + TOOL_MLP_FC1_FPROP] = "fc1 fprop (M, F, K)",
        [TOOL_MLP_COUNT + TOOL_MLP_FC2_FPROP] = "fc2 fprop (M, N, F)",
        [TOOL_MLP_COUNT + TOOL_MLP_FC2_DGRAD] = "fc2 dgrad (M, F, N)",
        [TOOL_MLP_COUNT + TOOL_MLP_FC1_DGRAD] = "fc1 dgrad (M, K, F)",
        [TOOL_MLP_COUNT + TOOL_MLP_FC2_WGRAD] = "fc2 wgrad (N, F, M: its K is the token count)",
        [TOOL_MLP_COUNT + TOOL_MLP_FC1_WGRAD] = "fc1 wgrad (F, K, M: its K is the token count)"};
    qf_shape_query qs[TOOL_MLP_COUNT + TOOL_MLP_GEMM_COUNT];
    tool_mlp_queries(b->M, b->K, b->F, b->N, QF_ACT_GELU, QF_NORM_LAYERNORM, qs);
    tool_mlp_gemm_queries(b->M, b->K, b->F, b->N, QF_ACT_GELU, qs + TOOL_MLP_COUNT);
    for (int i = 0; i < TOOL_MLP_COUNT + TOOL_MLP_GEMM_COUNT; i++) {
        qf_shape sh[TOOL_MAX_SHAPES];
        int n = 0;
        if (qf_fake_shapes(r->name, &qs[i], sh, TOOL_MAX_SHAPES, &n) != QF_OK) {
            printf("| %-12s | not trained: %s: %s\n", r->name, what[i], qf_last_error());
            return 0;
        }
    }
    if (b->K > QF_NB_MAX_K) {
        printf("| %-12s | not trained: the norm backward needs K <= %d (K = %lld)\n", r->name,
               QF_NB_MAX_K, (long long)b->K);
        return 0;
    }
    return 1;
}

int demo_train(qf_ctx_t *ctx, const demo_block *b, const demo_train_opts *o) {
    const int64_t M = b->M, N = b->N;
    task tk = {.b = b, .ystar = tool_xmalloc((size_t)(M * N) * 8)};
    const double *orig[P_COUNT] = {b->w1, b->b1, b->w2, b->b2, b->ln_w, b->ln_b};
    model_forward(b, orig, tk.ystar, NULL);
    tk.ss = 0.0;
    for (int64_t i = 0; i < M * N; i++)
        tk.ss += tk.ystar[i] * tk.ystar[i];
    if (!(tk.ss > 0.0 && isfinite(tk.ss))) { /* before any GPU work: the loss has no scale */
        printf("\nNot training the checkpoint's block: its output y* = fc2(gelu(fc1(ln(x)))) has "
               "||y*||^2 = %g on these weights and activations, so the loss ||y - y*||^2 / "
               "||y*||^2 is not defined (a block file of zeros, or one whose values overflow).\n",
               tk.ss);
        free(tk.ystar);
        return 1;
    }
    printf("\nTraining the checkpoint's LayerNorm + MLP block: x [%lld, %lld] (real activations), "
           "fc1 [%lld, %lld], gelu, fc2 [%lld, %lld].\n"
           "Task: recover the block's own output y* = fc2(gelu(fc1(ln(x)))) from W1, W2 perturbed "
           "by %.2f rms(W) N(0, 1);\nloss ||y - y*||^2 / ||y*||^2, full batch, %d Adam steps "
           "(lr %g) on fp64 master weights, all six parameters trained.\n",
           (long long)M, (long long)b->K, (long long)b->F, (long long)b->K, (long long)N,
           (long long)b->F, o->noise, o->steps, o->lr);
    FILE *csv = o->csv;
    if (csv)
        fprintf(csv, "run,step,loss\n");
    double *base = tool_xmalloc((size_t)(o->steps + 1) * 8);
    double *loss = tool_xmalloc((size_t)(o->steps + 1) * 8);
    const int marks[] = {0, o->steps / 10, o->steps / 4, o->steps / 2, o->steps};
    printf("\n| run          | loss at step %-5d| %-8d | %-8d | %-8d | %-8d | vs fp64 | its weights"
           " | ms/step |\n", marks[0], marks[1], marks[2], marks[3], marks[4]);
    printf("|              |                   |          |          |          |          |"
           "         | in fp64     |         |\n");
    printf("|--------------|-------------------|----------|----------|----------|----------|"
           "---------|-------------|---------|\n");
    int failed = 0;
    for (int ri = -1; ri < qf_recipe_count; ri++) {
        if (ri >= 0 && !tool_recipe_selected(o->recipes, ri))
            continue;
        if (ri >= 0 && !demo_block_fits(&qf_recipes[ri], b))
            continue;
        double ms, l64 = 0.0;
        const char *name = ri < 0 ? "fp64 (none)" : qf_recipes[ri].name;
        double *l = ri < 0 ? base : loss;
        if (ri < 0) {
            base_run br = {.base = {base_loss, &tk}, .y = tool_xmalloc((size_t)(M * N) * 8),
                           .dy = tool_xmalloc((size_t)(M * N) * 8)};
            ms = train(&br.base, b, o, l, &l64);
            free(br.y), free(br.dy);
        } else {
            gpu_run gr;
            gpu_setup(&gr, ctx, &qf_recipes[ri], &tk, o->seed);
            ms = train(&gr.base, b, o, l, &l64);
            gpu_free(&gr);
        }
        const int bad = !isfinite(l[o->steps]) || !(l[o->steps] < 0.5 * l[0]);
        failed += bad;
        printf("| %-12s | %-17.4e | %.2e | %.2e | %.2e | %.2e | %6.2fx | %.2e    | %7.1f |%s\n",
               name, l[marks[0]], l[marks[1]], l[marks[2]], l[marks[3]], l[marks[4]],
               l[o->steps] / base[o->steps], l64, ms, bad ? " did not train" : "");
        for (int s = 0; csv && s <= o->steps; s++)
            fprintf(csv, "%s,%d,%.9e\n", name, s, l[s]);
    }
    printf("\nloss: through the run's own forward (the recipe's quantized one). vs fp64: the final "
           "loss over the fp64\nbaseline's. its weights in fp64: the final loss of the run's "
           "trained weights through the unquantized\nfp64 model. ms/step: forward + backward + "
           "Adam, host transfers included (the baseline runs on\nthe CPU).\n");
    if (csv && (fflush(csv) != 0 || ferror(csv))) {
        fprintf(stderr, "qfuse-demo: writing the loss curves failed\n");
        failed++;
    }
    free(base), free(loss), free(tk.ystar);
    return failed;
}
