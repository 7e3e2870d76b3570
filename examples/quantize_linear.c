/* quantize_linear.c: LayerNorm + Linear under a shipped recipe, every buffer sized by the
 * recipe's generated fake-shape function.
 *
 *   quantize_linear [RECIPE]       RECIPE: a shipped recipe (default mxfp8; qfuse-gen --list)
 *
 * On a GPU it quantizes the weight (qf_quantize), runs y = Linear(LayerNorm(x)) with that
 * quantized weight (qf_layernorm_linear_fwd) and compares y with an fp64 reference. Without one
 * it makes the same calls on a device-less sm_90 context (qf_ctx_init_host): every op checks all
 * of its arguments there and returns QF_ERR_NO_DEVICE instead of launching. Exit status 0 when
 * every step did what it should.
 *
 * Build against an installed qfuse:
 *   cc -std=c11 quantize_linear.c $(pkg-config --cflags --libs qfuse) \
 *       -L/usr/local/cuda/lib64 -lcudart -lm
 */
#include <math.h>

#define EXAMPLE_NAME "quantize_linear"
#include "example_util.h"

#include "shapes.h" /* generated: qf_shapes_<recipe>(), and through it qfuse.h and registry.h */

enum { M = 256, K = 512, N = 384, MAX_OUT = 12 };

/* y's tolerance, ||y - y_ref|| / ||y_ref||: on this data the C references of the formats give
 * about 0.035 (per-tensor FP8, MXFP8) and 0.15 (NVFP4). The limits catch a wrong layout, scale
 * or buffer, not last-bit differences. */
#define Y_REL_TOL_FP8 0.06
#define Y_REL_TOL_NVFP4 0.25

/* ================================================================== buffers */

/* Device memory on a GPU; host memory on a device-less context, whose ops check each pointer
 * (set, aligned) but never read it. Every buffer starts zeroed (fp8_delayed max-merges into its
 * amax slots). */
/* A [d0] (d1 == 0) or [d0, d1] view of p. */
static qf_tensor tensor(void *p, qf_dtype dt, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = p, .dtype = dt, .ndim = d1 ? 2 : 1, .dims = {d0, d1}};
    return t;
}

/* Allocates every output the recipe's fake-shape function lists for q and binds each to the slot
 * of its name (the names are qf_slot_name's). -1 when the recipe rejects the query. */
static int alloc_outputs(const qf_recipe *r, const qf_shape_query *q, qf_quantized *out) {
    qf_shape sh[MAX_OUT];
    const int n = qf_recipe_shapes(r, q, sh, MAX_OUT); /* r->shapes: qf_shapes_<name> */
    for (int i = 0; i < n; i++) {
        const int slot = qf_slot_from_name(sh[i].name);
        if (slot < 0)
            return -1;
        out->t[slot] = tensor(buf_alloc(sh[i].bytes), sh[i].dtype, sh[i].dims[0],
                              sh[i].ndim > 1 ? sh[i].dims[1] : 0);
    }
    return n < 0 ? -1 : 0;
}

/* ================================================================== the layer */

typedef struct layer {
    uint16_t x[M * K], gamma[K], beta[K], w[N * K], bias[N], y[M * N]; /* bf16 */
} layer;

static float bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t bf16_from_float(float f) { /* round to nearest even; f is finite */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* Uniform in [lo, hi), from a fixed xorshift sequence. */
static uint16_t rand_bf16(float lo, float hi) {
    static uint32_t s = 12345u;
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return bf16_from_float(lo + (hi - lo) * (float)(s >> 8) * 0x1p-24f);
}

static void layer_fill(layer *L) {
    for (int i = 0; i < M * K; i++)
        L->x[i] = rand_bf16(-1.5f, 2.5f);
    for (int k = 0; k < K; k++)
        L->gamma[k] = rand_bf16(0.9f, 1.1f), L->beta[k] = rand_bf16(-0.1f, 0.1f);
    for (int i = 0; i < N * K; i++)
        L->w[i] = rand_bf16(-1.0f, 1.0f);
    for (int n = 0; n < N; n++)
        L->bias[n] = rand_bf16(-0.1f, 0.1f);
}

/* ||y - y_ref|| / ||y_ref||, y_ref = LayerNorm(x) W^T + bias in fp64 from the bf16 inputs. */
static double y_rel_err(const layer *L) {
    static double xn[K];
    double num = 0.0, den = 0.0;
    for (int m = 0; m < M; m++) {
        double mu = 0.0, var = 0.0;
        for (int k = 0; k < K; k++)
            mu += bf16_to_float(L->x[m * K + k]) / K;
        for (int k = 0; k < K; k++)
            var += pow(bf16_to_float(L->x[m * K + k]) - mu, 2) / K;
        for (int k = 0; k < K; k++)
            xn[k] = (bf16_to_float(L->x[m * K + k]) - mu) / sqrt(var + 1e-5) *
                        bf16_to_float(L->gamma[k]) + bf16_to_float(L->beta[k]);
        for (int n = 0; n < N; n++) {
            double ref = bf16_to_float(L->bias[n]);
            for (int k = 0; k < K; k++)
                ref += xn[k] * bf16_to_float(L->w[n * K + k]);
            const double d = bf16_to_float(L->y[m * N + n]) - ref;
            num += d * d, den += ref * ref;
        }
    }
    return sqrt(num / den); /* NaN when y holds a NaN */
}

/* ================================================================== the run */

/* 1 when s is what a call with valid arguments returns here: QF_OK on a GPU, QF_ERR_NO_DEVICE
 * ("arguments are valid, but the context has no device") on a device-less context. */
static int step_ok(const char *what, qf_status s) {
    if (s == (g_gpu ? QF_OK : QF_ERR_NO_DEVICE)) {
        printf("  %-34s %s\n", what, g_gpu ? "done" : "arguments valid");
        return 1;
    }
    fprintf(stderr, "quantize_linear: %s: %s: %s\n", what, qf_status_name(s), qf_last_error());
    return 0;
}

static const qf_recipe *find_recipe(const char *name) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    fprintf(stderr, "quantize_linear: no shipped recipe '%s'; the registry has:", name);
    for (int i = 0; i < qf_recipe_count; i++)
        fprintf(stderr, " %s", qf_recipes[i].name);
    fprintf(stderr, "\n");
    if (example_is_recipe_path(name))
        fprintf(stderr, "quantize_linear: a recipe file runs through build/examples/recipe_file "
                        "%s\n", name);
    return NULL;
}

/* The inputs, the scales and every output of the layer, bound into *ll, x and y. */
static int layer_bind(const qf_recipe *r, int arch, layer *L, qf_ln_linear *ll, qf_tensor *x,
                      qf_tensor *y) {
    static const float ones[2] = {1.0f, 1.0f};
    *x = tensor(buf_upload(L->x, sizeof L->x), QF_DTYPE_BF16, M, K);
    ll->norm = (qf_norm_desc){.norm = QF_NORM_LAYERNORM, .eps = 1e-5f,
                              .gamma = tensor(buf_upload(L->gamma, sizeof L->gamma),
                                              QF_DTYPE_BF16, K, 0),
                              .beta = tensor(buf_upload(L->beta, sizeof L->beta),
                                             QF_DTYPE_BF16, K, 0)};
    ll->weight = tensor(buf_upload(L->w, sizeof L->w), QF_DTYPE_BF16, N, K);
    ll->bias = tensor(buf_upload(L->bias, sizeof L->bias), QF_DTYPE_BF16, N, 0);
    /* Delayed scaling's scales (a training loop updates them with qf_scale_update); every
     * other family computes its scales itself and ignores these. */
    ll->x_scale = buf_upload(ones, sizeof ones);
    ll->w_scale = ll->x_scale + 1;
    /* Outputs: the rowwise copies of norm(x) and of W (the forward GEMM's operands), y. */
    const qf_shape_query qx = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT,
                               .norm = QF_NORM_LAYERNORM, .outputs = QF_OUT_ROWWISE, .M = M,
                               .K = K};
    const qf_shape_query qw = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_WEIGHT,
                               .outputs = QF_OUT_ROWWISE, .M = N, .K = K};
    const qf_shape_query qy = {.op = QF_OP_GEMM, .M = M, .N = N, .K = K};
    qf_shape ys[1];
    if (alloc_outputs(r, &qx, &ll->xq) || alloc_outputs(r, &qw, &ll->wq) ||
        qf_recipe_shapes(r, &qy, ys, 1) != 1)
        return -1;
    *y = tensor(buf_alloc(ys[0].bytes), ys[0].dtype, ys[0].dims[0], ys[0].dims[1]);
    /* Block scales in the layout this architecture's GEMM reads (compact for qfuse's Hopper
     * kernels, swizzled for cuBLASLt on sm_100 and later); per-tensor FP8 ignores it. */
    ll->xq.layout = ll->wq.layout = qf_family_gemm_path(r->family, arch).layout;
    return 0;
}

/* Quantize W, the layer with that W, then one call with a bad argument, which must be refused. */
static int layer_run(qf_ctx_t *ctx, const char *recipe, qf_ln_linear *ll, qf_tensor *x,
                     qf_tensor *y) {
    if (!step_ok("qf_quantize (weight)", qf_quantize(ctx, recipe, QF_ROLE_WEIGHT, &ll->weight,
                                                     NULL, ll->w_scale, NULL, &ll->wq, NULL)))
        return -1;
    /* The layer keeps a weight cache (ll->cached): its first call quantizes W into ll->wq, later
     * ones reuse it until W's storage, ll->weight_version or the recipe changes. */
    ll->weight_changed = 0;
    if (!step_ok("qf_layernorm_linear_fwd", qf_layernorm_linear_fwd(ctx, recipe, x, ll, y, NULL)))
        return -1;
    ll->bias.dims[0] = N - 1; /* one element short: refused before anything launches */
    const qf_status s = qf_layernorm_linear_fwd(ctx, recipe, x, ll, y, NULL);
    ll->bias.dims[0] = N;
    printf("  bias of N - 1 elements refused:    %s\n    (%s)\n", qf_status_name(s),
           qf_last_error());
    return s == QF_ERR_INVALID_ARG ? 0 : -1;
}

/* GPU only: y against the fp64 reference. */
static int layer_check(layer *L, const qf_tensor *y, qf_family family) {
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(L->y, y->data, sizeof L->y, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "quantize_linear: %s\n", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    const double err = y_rel_err(L);
    const double tol = family == QF_FAMILY_NVFP4 ? Y_REL_TOL_NVFP4 : Y_REL_TOL_FP8;
    printf("  y against an fp64 reference:       rel err %.3e (limit %.2f)\n", err, tol);
    return err < tol ? 0 : -1; /* false for NaN too */
}

int main(int argc, char **argv) {
    static layer L;
    const char *name = NULL;
    const int done = example_arg(
        argc, argv, "usage: quantize_linear [RECIPE]   (a shipped recipe; default mxfp8)", "mxfp8",
        &name);
    if (done >= 0)
        return done;
    const qf_recipe *r = find_recipe(name);
    qf_ctx_t *ctx = r ? open_ctx("runs every call, which checks its arguments and launches "
                                 "nothing") : NULL;
    if (!ctx)
        return r ? 1 : 2;
    printf("recipe %s (%s): x [%d, %d], W [%d, %d], y [%d, %d]\n", r->name,
           qf_family_name(r->family), M, K, N, K, M, N);
    layer_fill(&L);
    qf_ln_linear ll = {0};
    qf_tensor x, y;
    int rc = layer_bind(r, qf_ctx_arch(ctx), &L, &ll, &x, &y);
    if (rc)
        fprintf(stderr, "quantize_linear: recipe %s rejects the fake-shape queries\n", name);
    if (!rc)
        rc = layer_run(ctx, name, &ll, &x, &y);
    if (!rc && g_gpu)
        rc = layer_check(&L, &y, r->family);
    else if (!rc)
        printf("  skipped the GPU part (no GPU): y not computed\n");
    buf_free_all();
    qf_ctx_free(ctx);
    return example_exit(rc ? 1 : 0);
}
