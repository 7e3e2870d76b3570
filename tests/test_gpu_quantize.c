/* test_gpu_quantize.c: the quantizers of every family on the GPU against the C references
 * (numerics 2, 3), by looping over the registry's recipes: each recipe's family has a row of hooks
 * (kHooks: how a case runs and is checked, test_gpu_quantize.h) and of case plans (the norm +
 * quantize sweep over shapes, the option combinations, weights and gradients); the loops over
 * recipes, roles, norms, dtypes, outputs and shapes are shared. A family without hooks yet has its
 * recipes skipped with a message. A plan's cases are spread over the family's recipes by their
 * rank in the registry (registry order): case options and seeds are the same whatever the recipe
 * count. Then the checks of one family: the kernel cache and the disk cache across processes and
 * the scale update (fp8_delayed), stochastic rounding streams, zero and NaN inputs and the RHT in
 * the key (nvfp4). Every test skips cleanly without a GPU; QFUSE_TEST_QUICK=1 drops the large
 * shapes. */
#include "test_gpu_quantize.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jit_cache.h"
#include "qfuse.h"
#include "ref.h"

/* {===================================================================== plans */

/* The norm + quantize sweep of one x dtype: every (M, K) of Ms x Ks, case i = a * nK + b. */
typedef struct nq_plan {
    const int64_t *Ms, *Ks;
    int nM, nK;
    int64_t quick_max;    /* QFUSE_TEST_QUICK=1: shapes of more elements are skipped */
    int64_t max_elems[3]; /* per x dtype (bf16, fp16, fp32): bounds the reference's CPU time */
    /* The options of case i (norm, zcg, gamma dtype, layout, outputs) and its seed; returns the
     * rank of its recipe in the family. */
    int (*make)(int i, int a, int b, qf_dtype xdt, qcase *c, uint64_t *seed);
} nq_plan;

/* Every option combination once: shapes x dtypes x recipe ranks x norms x zcg x gamma dtype (x's,
 * fp32) x outputs (1..3) x layouts, case i counting in that order (the last fastest). */
typedef struct opt_plan {
    const int64_t (*shapes)[2];
    int n_shapes;
    const qf_dtype *dts;
    int n_dts, n_ranks, n_zcg, n_gdt, n_layout;
    uint64_t seed0;                 /* case i: seed0 + i */
    void (*fixup)(int i, qcase *c); /* options that rotate with i instead, or NULL */
} opt_plan;

/* Weights and gradients: variants (recipe rank, role) x dtypes x shapes, case i counting in that
 * order; each case once per entry of outputs, with the same seed. */
typedef struct quant_plan {
    const int64_t (*shapes)[2];
    int n_shapes, n_variants;
    int (*variant)(int v, qf_role *role); /* the role of variant v; returns its recipe rank */
    const unsigned *outputs;
    int n_outputs;
    int64_t quick_max; /* QFUSE_TEST_QUICK=1: shapes of more elements are skipped */
    uint64_t seed0;    /* case i: seed0 + i */
    void (*fixup)(int i, qcase *c);
} quant_plan;

/* One family: how a case runs and is checked (test_gpu_quantize.h), and its plans. */
typedef struct quant_hooks {
    const char *summary; /* printf format of the family's count line */
    void (*run)(qf_ctx_t *ctx, const qcase *c, uint64_t seed);
    const nq_plan *nq;
    const opt_plan *options;
    const quant_plan *quantize;
} quant_hooks;

#define COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define NO_LIMIT INT64_MAX
static const qf_dtype kDts[] = {QF_DTYPE_BF16, QF_DTYPE_FP16, QF_DTYPE_FP32};
static const unsigned kBoth[] = {QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};

/* }=====================================================================} */

/* {===================================================================== fp8_delayed plans */

static const int64_t kFp8Ms[] = {1, 3, 128, 1000, 16384};
static const int64_t kFp8Ks[] = {16, 768, 769, 4096, 8192, 65536};

static int fp8_nq_make(int i, int a, int b, qf_dtype xdt, qcase *c, uint64_t *seed) {
    c->gdt = (i % 3 == 2) ? QF_DTYPE_FP32 : xdt;
    c->norm = (i % 2) ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM;
    c->zcg = (i / 2) % 2;
    c->outputs = (a + b) % 2 ? QF_OUT_ROWWISE : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    *seed = 1000u + (uint64_t)i * 7919u + (uint64_t)xdt;
    return 0;
}

static const nq_plan kFp8Nq = {kFp8Ms, kFp8Ks, COUNTOF(kFp8Ms), COUNTOF(kFp8Ks), 1 << 26,
                               {NO_LIMIT, NO_LIMIT, NO_LIMIT}, fp8_nq_make};

/* Every norm x zcg x dtype variant and each output selection alone, on an odd shape (the tiled
 * entry) and on one of 64x64 tiles (the rows entry, then the columnwise entry). */
static const int64_t kFp8OptShapes[][2] = {{217, 259}, {192, 320}};
static const opt_plan kFp8Options = {kFp8OptShapes, 2, kDts, 3, 1, 2, 1, 1, 77, NULL};

/* Weights, gradients (hybrid: E4M3 and E5M2) and inputs without a norm, rowwise alone and both
 * copies. */
static int fp8_variant(int v, qf_role *role) {
    *role = v == 2 ? QF_ROLE_INPUT : (qf_role)(QF_ROLE_WEIGHT + v);
    return 0;
}

static const int64_t kFp8QShapes[][2] = {{1, 16}, {5, 160}, {217, 256}, {4096, 4096}, {1000, 769}};
static const unsigned kFp8QOutputs[] = {QF_OUT_ROWWISE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
static const quant_plan kFp8Quantize = {kFp8QShapes, COUNTOF(kFp8QShapes), 3, fp8_variant,
                                        kFp8QOutputs, 2, NO_LIMIT, 900, NULL};

/* }=====================================================================} */

/* {===================================================================== mxfp8 plans */

static const int64_t kMxDims[] = {32, 64, 96, 993, 1024, 8192};

static int mx_nq_make(int i, int a, int b, qf_dtype xdt, qcase *c, uint64_t *seed) {
    c->norm = (a + b) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM;
    c->zcg = (i / 2) % 2;
    c->gdt = xdt;
    c->layout = (i / 3) % 2 ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT;
    c->outputs = i % 5 == 4 ? QF_OUT_ROWWISE : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    *seed = 31u * (uint64_t)i + (uint64_t)xdt;
    return 0;
}

static const nq_plan kMxNq = {kMxDims, kMxDims, COUNTOF(kMxDims), COUNTOF(kMxDims), 1 << 22,
                              {NO_LIMIT, NO_LIMIT, NO_LIMIT}, mx_nq_make};

/* Partial blocks in both directions, every norm/zcg/output/layout combination once; the last
 * shape is whole 64x64 tiles (the rows entry, then the columnwise entry). */
static void mx_opt_fixup(int i, qcase *c) {
    c->zcg = i % 2;
    c->layout = (qf_scale_layout)(i / 2 % 2);
}

static const int64_t kMxOptShapes[][2] = {{1, 1},     {1, 33},    {33, 1},  {7, 769},
                                          {217, 259}, {65, 95},   {128, 192}};
static const opt_plan kMxOptions = {kMxOptShapes, COUNTOF(kMxOptShapes), kDts, 1, 1, 1, 1, 1,
                                    500, mx_opt_fixup};

/* Weights (1D, and 32x32 under the family's second recipe, mxfp8_2d), gradients and inputs
 * without a norm, both layouts, all dtypes. */
static int mx_variant(int v, qf_role *role) {
    *role = v == 1 ? QF_ROLE_GRAD : v == 3 ? QF_ROLE_INPUT : QF_ROLE_WEIGHT;
    return v == 2;
}

static void mx_quant_fixup(int i, qcase *c) {
    c->layout = (qf_scale_layout)(i % 2);
}

static const int64_t kMxQShapes[][2] = {{32, 32}, {96, 993}, {993, 64}, {1024, 1024}, {8192, 96}};
static const quant_plan kMxQuantize = {kMxQShapes, COUNTOF(kMxQShapes), 4, mx_variant, kBoth, 1,
                                       NO_LIMIT, 900, mx_quant_fixup};

/* }=====================================================================} */

/* {===================================================================== nvfp4 plans */

static const int64_t kNvDims[] = {16, 32, 64, 96, 1024, 8192};

/* Recipe rank 0 (nvfp4: RHT) and 1 (nvfp4_nort) alternate every 4 cases. */
static int nv_nq_make(int i, int a, int b, qf_dtype xdt, qcase *c, uint64_t *seed) {
    c->norm = (a + b) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM;
    c->zcg = (i / 2) % 2;
    c->gdt = xdt != QF_DTYPE_FP32 && i % 7 == 3 ? QF_DTYPE_FP32 : xdt;
    c->layout = (i / 3) % 2 ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT;
    c->outputs = i % 5 == 4   ? QF_OUT_ROWWISE
                 : i % 5 == 2 ? QF_OUT_COLUMNWISE
                              : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    *seed = 31u * (uint64_t)i + (uint64_t)xdt;
    return (i / 4) % 2;
}

static const nq_plan kNvNq = {kNvDims, kNvDims, COUNTOF(kNvDims), COUNTOF(kNvDims), 1 << 22,
                              {(int64_t)8192 * 8192, (int64_t)8192 * 1024, (int64_t)8192 * 1024},
                              nv_nq_make};

/* Every norm / zcg / gamma dtype / output / layout / recipe combination once, on a small
 * non-square shape. */
static const int64_t kNvOptShapes[][2] = {{48, 272}};
static const opt_plan kNvOptions = {kNvOptShapes, 1, kDts, 1, 2, 2, 2, 2, 700, NULL};

/* Gradients (RHT per recipe, SR), weights (16x16 tiles) and inputs without a norm (RHT per
 * recipe, no SR), under both recipes, all dtypes, square and not. */
static int nv_variant(int v, qf_role *role) {
    *role = v < 2 ? QF_ROLE_GRAD : v < 4 ? QF_ROLE_WEIGHT : QF_ROLE_INPUT;
    return v % 2;
}

static void nv_quant_fixup(int i, qcase *c) {
    c->layout = (qf_scale_layout)(i % 2);
    c->outputs = i % 3 == 1 ? QF_OUT_COLUMNWISE : QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    c->seed = 0x5EEDull + (uint64_t)i, c->offset = 977u * (uint64_t)i;
}

static const int64_t kNvQShapes[][2] = {{16, 16},   {32, 8192},   {8192, 32},  {96, 1040},
                                        {1040, 96}, {1024, 1024}, {4096, 2048}};
static const quant_plan kNvQuantize = {kNvQShapes, COUNTOF(kNvQShapes), 6, nv_variant, kBoth, 1,
                                       1 << 22, 900, nv_quant_fixup};

/* }=====================================================================} */

/* {===================================================================== fp8_block plans */

/* Partial 1x128 blocks (K 130, 1000) and 128-row strips (M 5, 300), whole ones (128, 4096). */
static const int64_t kFbMs[] = {5, 128, 300, 1024};
static const int64_t kFbKs[] = {128, 130, 1000, 4096};

/* Both copies (the tiled entry), rowwise alone (the rows entry where K allows) and columnwise
 * alone rotate; LayerNorm and RMSNorm, zcg and fp32 gamma too. */
static int fb_nq_make(int i, int a, int b, qf_dtype xdt, qcase *c, uint64_t *seed) {
    c->norm = (a + b) % 2 ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM;
    c->zcg = (i / 2) % 2;
    c->gdt = xdt != QF_DTYPE_FP32 && i % 7 == 3 ? QF_DTYPE_FP32 : xdt;
    c->outputs = i % 3 == 0   ? QF_OUT_ROWWISE | QF_OUT_COLUMNWISE
                 : i % 3 == 1 ? QF_OUT_ROWWISE
                              : QF_OUT_COLUMNWISE;
    *seed = 4099u + 31u * (uint64_t)i + (uint64_t)xdt;
    return 0;
}

static const nq_plan kFbNq = {kFbMs, kFbKs, COUNTOF(kFbMs), COUNTOF(kFbKs), 1 << 22,
                              {NO_LIMIT, NO_LIMIT, NO_LIMIT}, fb_nq_make};

/* Every norm / zcg / gamma dtype / output combination on a partial shape and whole-vector ones
 * (rowwise alone: the rows entry; with a columnwise copy the rows entry, then the tiled entry on
 * its 2-D grid: 1 block of 2 chunks along K, 5 of 19 (129 rows: a partial strip), or, for 16-bit
 * x at 256 x 8192 (whole 128 x 64 tiles), the `_cols` entry; fp32 x there: the tiled entry). */
static const int64_t kFbOptShapes[][2] = {{5, 130}, {300, 256}, {129, 2432}, {256, 8192}};
static const opt_plan kFbOptions = {kFbOptShapes, COUNTOF(kFbOptShapes), kDts, 3, 1, 2, 2, 1,
                                    1300, NULL};

/* Gradients, weights (128x128 tiles) and inputs without a norm, each copy alone and both. */
static int fb_variant(int v, qf_role *role) {
    *role = v == 0 ? QF_ROLE_GRAD : v == 1 ? QF_ROLE_WEIGHT : QF_ROLE_INPUT;
    return 0;
}

static const int64_t kFbQShapes[][2] = {{1, 1},     {5, 130},    {130, 5},
                                        {257, 384}, {300, 4096}, {1024, 1024}};
static const unsigned kFbQOutputs[] = {QF_OUT_ROWWISE, QF_OUT_COLUMNWISE,
                                       QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
static const quant_plan kFbQuantize = {kFbQShapes, COUNTOF(kFbQShapes), 3, fb_variant,
                                       kFbQOutputs, COUNTOF(kFbQOutputs), NO_LIMIT, 1900, NULL};

/* }=====================================================================} */

/* {===================================================================== the hooks table */

/* One row per family, NULL run: no hooks yet (its recipes are skipped with a message). A family
 * is a run function (test_gpu_quantize.h) and its plans; fp8_current shares fp8_delayed's. */
static const quant_hooks kHooks[QF_FAMILY_COUNT] = {
    [QF_FAMILY_FP8_DELAYED] = {"gpu_fp8: %d cases checked against the C references\n", fp8_run,
                               &kFp8Nq, &kFp8Options, &kFp8Quantize},
    [QF_FAMILY_FP8_CURRENT] = {"gpu_fp8_current: %d cases checked bit for bit against the C "
                               "reference\n",
                               fp8_run, &kFp8Nq, &kFp8Options, &kFp8Quantize},
    [QF_FAMILY_MXFP8] = {"gpu_mxfp8: %d cases checked bit for bit against the C reference\n",
                         blk_run, &kMxNq, &kMxOptions, &kMxQuantize},
    [QF_FAMILY_NVFP4] = {"gpu_nvfp4: %d cases checked bit for bit against the C reference\n",
                         blk_run, &kNvNq, &kNvOptions, &kNvQuantize},
    [QF_FAMILY_FP8_BLOCK] = {"gpu_fp8_block: %d cases checked bit for bit against the C "
                             "reference\n",
                             blk_run, &kFbNq, &kFbOptions, &kFbQuantize},
};
static_assert(QF_FAMILY_COUNT == 5, "a new family: give it a row in kHooks (or leave it empty)");

/* The hooks of r's family; NULL (and a message, once per family) when it has none yet. */
static const quant_hooks *hooks_of(const qf_recipe *r) {
    static unsigned said;
    if ((unsigned)r->family < QF_FAMILY_COUNT && kHooks[r->family].run)
        return &kHooks[r->family];
    if (!(said & (1u << r->family)))
        printf("gpu_quantize: recipe %s: family %s has no test hooks yet (kHooks); its recipes "
               "are skipped\n", r->name, qf_family_name(r->family));
    said |= 1u << r->family;
    return NULL;
}

/* }=====================================================================} */

/* {===================================================================== shared loops */

/* A recipe whose family has hooks, in a loop over the registry: the loop's context, the hooks
 * and the recipe's rank among its family's nfam recipes. */
typedef struct recipe_run {
    qf_ctx_t *ctx;
    const qf_recipe *r;
    const quant_hooks *h;
    int rank, nfam;
} recipe_run;

/* 1 unless QFUSE_TEST_RECIPE names another recipe (one recipe's cases alone). */
static int recipe_selected(const qf_recipe *r) {
    const char *only = getenv("QFUSE_TEST_RECIPE");
    return !only || !*only || strcmp(only, r->name) == 0;
}

/* 1 when QFUSE_TEST_RECIPE is unset, empty or a built-in recipe's name (else every sweep would
 * check nothing and pass). */
static int recipe_filter_ok(void) {
    for (int r = 0; r < qf_recipe_count; r++)
        if (recipe_selected(&qf_recipes[r]))
            return 1;
    fprintf(stderr, "test_gpu_quantize: QFUSE_TEST_RECIPE=%s is not a built-in recipe's name; "
            "they are:", getenv("QFUSE_TEST_RECIPE"));
    for (int r = 0; r < qf_recipe_count; r++)
        fprintf(stderr, " %s", qf_recipes[r].name);
    fprintf(stderr, "\n");
    return 0;
}

/* fn(run, arg) for every selected recipe whose family has hooks, in registry order, on one
 * context. */
static void for_each_recipe(void (*fn)(const recipe_run *run, int arg), int arg) {
    qf_ctx_t *ctx = gpu_ctx();
    for (int r = 0; r < qf_recipe_count; r++) {
        recipe_run run = {.ctx = ctx, .r = &qf_recipes[r], .h = hooks_of(&qf_recipes[r])};
        if (!run.h || !recipe_selected(run.r))
            continue;
        run.rank = recipe_rank(run.r, &run.nfam);
        fn(&run, arg);
    }
    qf_ctx_free(ctx);
}

/* Norm + quantize over the family's Ms x Ks for x dtype kDts[d]. */
static void nq_sweep(const recipe_run *run, int d) {
    const nq_plan *p = run->h->nq;
    const qf_dtype xdt = kDts[d];
    for (int i = 0; i < p->nM * p->nK; i++) {
        const int a = i / p->nK, b = i % p->nK;
        const int64_t n = p->Ms[a] * p->Ks[b];
        if (n > p->max_elems[d] || (test_quick() && n > p->quick_max))
            continue;
        qcase c = {.recipe = run->r, .role = QF_ROLE_INPUT, .xdt = xdt, .M = p->Ms[a],
                   .K = p->Ks[b]};
        uint64_t seed;
        if (p->make(i, a, b, xdt, &c, &seed) % run->nfam == run->rank)
            run->h->run(run->ctx, &c, seed);
    }
}

/* Norm + quantize of every family for x dtype kDts[test_arg(state)]. */
static void test_nq(void **state) {
    for_each_recipe(nq_sweep, test_arg(state));
}

/* Case i of an option plan (the axes decoded from i, the last fastest); *rank: its recipe's. */
static qcase opt_case(const opt_plan *p, int i, const qf_recipe *r, int *rank) {
    int k = i;
    const int l = k % p->n_layout;
    k /= p->n_layout;
    const unsigned o = 1u + (unsigned)(k % 3);
    k /= 3;
    const int gf = k % p->n_gdt;
    k /= p->n_gdt;
    const int z = k % p->n_zcg;
    k /= p->n_zcg;
    const qf_norm norm = (qf_norm)(QF_NORM_LAYERNORM + k % 2);
    k /= 2;
    *rank = k % p->n_ranks;
    k /= p->n_ranks;
    const qf_dtype xdt = p->dts[k % p->n_dts];
    const int s = k / p->n_dts;
    qcase c = {.recipe = r, .role = QF_ROLE_INPUT, .norm = norm, .zcg = z, .xdt = xdt,
               .gdt = gf ? QF_DTYPE_FP32 : xdt, .layout = (qf_scale_layout)l, .outputs = o,
               .M = p->shapes[s][0], .K = p->shapes[s][1]};
    if (p->fixup)
        p->fixup(i, &c);
    return c;
}

/* Every option combination of the family's plan. */
static void nq_options(const recipe_run *run, int unused) {
    (void)unused;
    const opt_plan *p = run->h->options;
    const int n = p->n_shapes * p->n_dts * p->n_ranks * 2 * p->n_zcg * p->n_gdt * 3 * p->n_layout;
    int crank;
    for (int i = 0; i < n; i++) {
        const qcase c = opt_case(p, i, run->r, &crank);
        if (crank % run->nfam == run->rank)
            run->h->run(run->ctx, &c, p->seed0 + (uint64_t)i);
    }
}

static void test_nq_options(void **state) {
    (void)state;
    for_each_recipe(nq_options, 0);
}

/* Weights, gradients and plain-quantized inputs of the family's plan. */
static void quantize_plan(const recipe_run *run, int unused) {
    (void)unused;
    const quant_plan *p = run->h->quantize;
    for (int i = 0; i < p->n_variants * COUNTOF(kDts) * p->n_shapes; i++) {
        const int v = i / (COUNTOF(kDts) * p->n_shapes), s = i % p->n_shapes;
        const int64_t M = p->shapes[s][0], K = p->shapes[s][1];
        qf_role role;
        if ((test_quick() && M * K > p->quick_max) || p->variant(v, &role) % run->nfam != run->rank)
            continue;
        for (int o = 0; o < p->n_outputs; o++) {
            const qf_dtype xdt = kDts[i / p->n_shapes % COUNTOF(kDts)];
            qcase c = {.recipe = run->r, .role = role, .xdt = xdt, .gdt = xdt,
                       .outputs = p->outputs[o], .M = M, .K = K};
            if (p->fixup)
                p->fixup(i, &c);
            run->h->run(run->ctx, &c, p->seed0 + (uint64_t)i);
        }
    }
}

static void test_quantize(void **state) {
    (void)state;
    for_each_recipe(quantize_plan, 0);
}

/* }=====================================================================} */
/* {============================================ fp8_delayed: kernel and disk cache, scale update */

static const char *const kFp8Recipe = "fp8_delayed"; /* the recipe of the cache tests */

/* A new M (and a new K) reuses the loaded kernel: served from memory, no compile. */
static void test_new_m_does_not_recompile(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    qcase c = {.recipe = recipe_of(kFp8Recipe), .role = QF_ROLE_INPUT, .M = 128, .K = 768,
               .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16, .norm = QF_NORM_LAYERNORM,
               .outputs = QF_OUT_ROWWISE};
    fp8_run_nq(ctx, &c, 5);
    char key[33];
    memcpy(key, qf_ctx_last_kernel(ctx)->key, sizeof key);
    c.M = 1000;
    fp8_run_nq(ctx, &c, 6);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    assert_string_equal(qf_ctx_last_kernel(ctx)->key, key);
    c.M = 3, c.K = 4096;
    fp8_run_nq(ctx, &c, 7);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    qf_ctx_free(ctx);
}

/* The case of the disk-cache test. */
static const int64_t kCacheM = 128, kCacheK = 768;
static qcase cache_case(void) {
    const qcase c = {.recipe = recipe_of(kFp8Recipe), .role = QF_ROLE_INPUT, .M = kCacheM,
                     .K = kCacheK, .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
                     .norm = QF_NORM_LAYERNORM, .outputs = QF_OUT_ROWWISE};
    return c;
}

/* Runs cache_case() in a fresh context and returns how its kernel was obtained. */
static qf_kernel_source fresh_ctx_source(char key[33]) {
    qf_ctx_t *ctx = gpu_ctx();
    const qcase c = cache_case();
    fp8_run_nq(ctx, &c, 11);
    qf_kernel_source src = qf_ctx_last_kernel(ctx)->source;
    if (key)
        memcpy(key, qf_ctx_last_kernel(ctx)->key, 33);
    qf_ctx_free(ctx);
    return src;
}

/* Flips the last byte of the cache entry whose name holds key. */
static void corrupt_entry(const char *dir, const char *key) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strstr(e->d_name, key))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, -1, SEEK_END), 0);
        int c = fgetc(f);
        assert_int_equal(fseek(f, -1, SEEK_END), 0);
        fputc(c ^ 0x5A, f);
        fclose(f);
        found = 1;
    }
    closedir(d);
    assert_true(found);
}

/* A second process finds the entry on disk; a corrupted entry is recompiled, then replaced. */
static void test_disk_cache_across_processes(void **state) {
    (void)state;
    QF_SKIP_WITHOUT_GPU();
    char dir[] = "/tmp/qfuse-gpu-cache-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    char key[33];
    assert_int_equal(fresh_ctx_source(key), QF_KSRC_COMPILED);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_gpu_quantize", "--child-disk-hit", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* the child saw a disk-cache hit */
    corrupt_entry(dir, key);
    assert_int_equal(fresh_ctx_source(NULL), QF_KSRC_COMPILED); /* detected, not loaded */
    assert_int_equal(fresh_ctx_source(NULL), QF_KSRC_DISK);     /* replaced by a good entry */
    unsetenv("QFUSE_CACHE_DIR");
    qf_cache_reset();
}

/* Child side of test_disk_cache_across_processes (no cmocka here): exit 0 iff the kernel of
 * cache_case() came from the disk cache. */
static int child_disk_hit(void) {
    const int64_t M = kCacheM, K = kCacheK;
    qf_ctx_t *ctx = NULL;
    void *x, *g, *b, *row, *st;
    if (qf_ctx_init(&ctx, 0) != QF_OK || cudaMalloc(&x, (size_t)M * K * 2) ||
        cudaMalloc(&g, (size_t)K * 4) || cudaMalloc(&b, (size_t)K * 4) ||
        cudaMalloc(&row, (size_t)M * K) || cudaMalloc(&st, (size_t)(2 * M + 8) * 4))
        return 3;
    cudaMemset(x, 0, (size_t)M * K * 2), cudaMemset(st, 0, (size_t)(2 * M + 8) * 4);
    float *f = st;
    qf_tensor tx = {.data = x, .dtype = QF_DTYPE_BF16, .ndim = 2, .dims = {M, K}};
    qf_tensor tg = {.data = g, .dtype = QF_DTYPE_BF16, .ndim = 1, .dims = {K}}, tb = tg;
    tb.data = b;
    qf_tensor tmu = {.data = f + 8, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {M}};
    qf_tensor trs = tmu;
    trs.data = f + 8 + M;
    qf_quantized out = {
        .t = {[QF_SLOT_ROWWISE_DATA] = {.data = row, .dtype = QF_DTYPE_E4M3, .ndim = 2,
                                        .dims = {M, K}},
              [QF_SLOT_AMAX] = {.data = f, .dtype = QF_DTYPE_FP32, .ndim = 1, .dims = {1}},
              [QF_SLOT_SCALE_INV] = {.data = f + 1, .dtype = QF_DTYPE_FP32, .ndim = 1,
                                     .dims = {1}},
              [QF_SLOT_MU] = tmu, [QF_SLOT_RSIGMA] = trs}};
    const qf_norm_desc nd = {.norm = QF_NORM_LAYERNORM, .eps = 1e-5f, .gamma = tg, .beta = tb};
    if (qf_quantize(ctx, kFp8Recipe, QF_ROLE_INPUT, &tx, &nd, f + 2, NULL, &out, NULL) != QF_OK ||
        cudaDeviceSynchronize() != cudaSuccess)
        return 4;
    int rc = qf_ctx_last_kernel(ctx)->source == QF_KSRC_DISK ? 0 : 5;
    qf_ctx_free(ctx);
    return rc;
}

/* The delayed-scaling update of recipe r (numerics 2.1): 9 tensors (zero, tiny, inf, NaN amaxes
 * first), 5 steps, every output bit for bit against the reference with the recipe's options. */
static void scale_update_recipe(qf_ctx_t *ctx, const qf_recipe *r) {
    enum { N = 9, H = 1024, STEPS = 5 };
    dual amax = dual_alloc(N * 4), hist = dual_alloc(N * H * 4), scale = dual_alloc(N * 4);
    dual sinv = dual_alloc(N * 4), fmt = dual_alloc(N);
    float ref_amax[N], ref_scale[N], ref_sinv[N], *ref_hist = malloc(N * H * 4);
    uint64_t s = 42;
    for (int i = 0; i < N * H; i++)
        ((float *)hist.h)[i] = ref_hist[i] = fabsf(qf_test_rng_uniform(&s)) * 10.0f;
    for (int t = 0; t < N; t++) {
        ((float *)scale.h)[t] = ref_scale[t] = 1.0f + t;
        ((float *)sinv.h)[t] = ref_sinv[t] = 1.0f / (1.0f + t);
        ((uint8_t *)fmt.h)[t] = ref_sinv[t] > 0.3f ? QF_DTYPE_E4M3 : QF_DTYPE_E5M2;
    }
    dual_up(&hist), dual_up(&scale), dual_up(&sinv), dual_up(&fmt);
    const float special[N] = {0.0f, 1e-38f, INFINITY, NAN, 3.5f, 1e30f, 0.0f, 448.0f, 2e-3f};
    for (int step = 0; step < STEPS; step++) {
        for (int t = 0; t < N; t++)
            ((float *)amax.h)[t] = ref_amax[t] =
                step == 0 ? special[t] : (t == 6 ? 0.0f : fabsf(qf_test_rng_uniform(&s)) * 50.0f);
        dual_up(&amax);
        QF_OK_OR_FAIL(qf_scale_update(ctx, r->name, N, H, amax.d, hist.d, scale.d, sinv.d,
                                      fmt.d, NULL));
        CK(cudaDeviceSynchronize());
        qf_fp8_scale_update_ref(N, H, ref_amax, ref_hist, ref_scale, ref_sinv, fmt.h,
                                (float)r->margin, r->amax_compute);
        dual_down(&amax), dual_down(&hist), dual_down(&scale), dual_down(&sinv);
        assert_memory_equal(ref_amax, amax.h, sizeof ref_amax);
        assert_memory_equal(ref_hist, hist.h, (size_t)N * H * 4);
        assert_memory_equal(ref_scale, scale.h, sizeof ref_scale);
        assert_memory_equal(ref_sinv, sinv.h, sizeof ref_sinv);
        g_cases[r->family]++;
    }
    free(ref_hist);
    dual *all[] = {&amax, &hist, &scale, &sinv, &fmt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dual_free(all[i]);
}

/* Every recipe whose family has a scale-update op (fp8_delayed). */
static void test_scale_update(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    for (int r = 0; r < qf_recipe_count; r++) {
        const qf_family_traits *t = qf_family_get(qf_recipes[r].family);
        if (t && t->implemented && t->ops[QF_OP_SCALE_UPDATE].tpl)
            scale_update_recipe(ctx, &qf_recipes[r]);
    }
    qf_ctx_free(ctx);
}
/* }=====================================================================} */

/* {============================================ nvfp4: SR streams, zero and NaN inputs, RHT key */

/* Runs a grad case and returns its device bytes (row then col), malloc'ed. */
static uint8_t *grad_bytes(qf_ctx_t *ctx, const qcase *c, size_t *n) {
    blk_bufs B;
    blk_bufs_alloc(c, &B);
    blk_make_inputs(c, &B, 4242);
    blk_run_op(ctx, c, &B);
    *n = B.row.bytes + B.col.bytes;
    uint8_t *r = malloc(*n);
    memcpy(r, B.row.h, B.row.bytes);
    memcpy(r + B.row.bytes, B.col.h, B.col.bytes);
    blk_bufs_free(&B);
    return r;
}

/* Stochastic rounding: (seed, offset) fixes every byte; another offset or seed changes them. */
static void test_nv_sr_streams(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    qcase c = {.recipe = recipe_of("nvfp4"), .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16,
                 .gdt = QF_DTYPE_BF16, .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 256,
                 .K = 512, .seed = 1234, .offset = 10};
    size_t n;
    uint8_t *a = grad_bytes(ctx, &c, &n), *b = grad_bytes(ctx, &c, &n);
    assert_memory_equal(a, b, n);
    c.offset = 11;
    uint8_t *d = grad_bytes(ctx, &c, &n);
    if (memcmp(a, d, n) == 0)
        fail_msg("offsets 10 and 11 gave identical bytes");
    c.offset = 10, c.seed = 1235;
    uint8_t *s = grad_bytes(ctx, &c, &n);
    if (memcmp(a, s, n) == 0)
        fail_msg("seeds 1234 and 1235 gave identical bytes");
    free(a), free(b), free(d), free(s);
    c.offset = 11; /* and each is still the reference's */
    blk_run(ctx, &c, 4242);
    qf_ctx_free(ctx);
}

/* The thread's amax reduction (qf_set_amax_reduce). x [M, K] is one rank's rows of a tensor
 * cat = [x; x2] whose other rows x2 (8x larger) sit on another rank; a reduction that writes
 * cat's amax (what a MAX all-reduce gives) makes x's quantization the first M rows of cat's:
 * rowwise data and scales identical (fp8_current: the columnwise copy's first M columns too),
 * the reduced amax in the slot, one call per amax slot. Without it they differ; a failing
 * reduction fails the op, naming it. */
typedef struct amax_src {
    int calls;
    const void *src[2]; /* cat's amax slots, in call order */
} amax_src;

static qf_status amax_from_cat(void *user, float *amax, void *stream) {
    amax_src *a = user;
    if (a->calls >= 2)
        return QF_ERR_INTERNAL;
    const cudaError_t e = cudaMemcpyAsync(amax, a->src[a->calls++], sizeof *amax,
                                          cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
    return e == cudaSuccess ? QF_OK : QF_ERR_CUDA;
}

static qf_status amax_fails(void *user, float *amax, void *stream) {
    (void)user, (void)amax, (void)stream;
    return QF_ERR_CUDA;
}

static void test_amax_reduce(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    static const struct {
        const char *recipe;
        qf_role role;
        qf_slot amax[2];
        int n_amax;
        int fp8; /* per-element scale: the columnwise copy compares too */
    } cases[] = {
        {"fp8_current", QF_ROLE_GRAD, {QF_SLOT_AMAX}, 1, 1},
        {"fp8_current", QF_ROLE_WEIGHT, {QF_SLOT_AMAX}, 1, 1},
        {"nvfp4", QF_ROLE_WEIGHT, {QF_SLOT_AMAX_ROWWISE, QF_SLOT_AMAX_COLUMNWISE}, 2, 0},
    };
    const int64_t M = 64, M2 = 32, K = 256;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *recipe = cases[i].recipe;
        dual x = dual_alloc((size_t)(M + M2) * K * 2);
        fill(x.h, QF_DTYPE_BF16, M, K, 11 + i, 0.1f);
        uint16_t *x2 = (uint16_t *)x.h + M * K;
        fill(x2, QF_DTYPE_BF16, M2, K, 12 + i, 0.1f);
        for (int64_t j = 0; j < M2 * K; j++) /* exact in bf16 */
            store_as(x2, QF_DTYPE_BF16, j, 8.0f * qf_load_as_float(x2, QF_DTYPE_BF16, j));
        dual_up(&x);
        qtensor cat, mine, plain;
        qt_alloc(&cat, recipe, cases[i].role, QF_NORM_NONE, M + M2, K, QF_SCALE_LAYOUT_COMPACT);
        qt_alloc(&mine, recipe, cases[i].role, QF_NORM_NONE, M, K, QF_SCALE_LAYOUT_COMPACT);
        qt_alloc(&plain, recipe, cases[i].role, QF_NORM_NONE, M, K, QF_SCALE_LAYOUT_COMPACT);
        const qf_role role = cases[i].role;
        const qf_tensor xc = tv(&x, QF_DTYPE_BF16, 2, M + M2, K);
        const qf_tensor xm = tv(&x, QF_DTYPE_BF16, 2, M, K);
        QF_OK_OR_FAIL(qf_quantize(ctx, recipe, role, &xc, NULL, NULL, NULL, &cat.q, NULL));
        amax_src src = {0, {cat.q.t[cases[i].amax[0]].data, cat.q.t[cases[i].amax[1]].data}};
        qf_set_amax_reduce(amax_from_cat, &src);
        const qf_status st = qf_quantize(ctx, recipe, role, &xm, NULL, NULL, NULL, &mine.q, NULL);
        qf_set_amax_reduce(amax_fails, NULL);
        const qf_status bad = qf_quantize(ctx, recipe, role, &xm, NULL, NULL, NULL, &plain.q, NULL);
        const char *msg = qf_last_error();
        qf_set_amax_reduce(NULL, NULL);
        assert_int_equal(bad, QF_ERR_CUDA);
        assert_non_null(strstr(msg, "amax reduction"));
        QF_OK_OR_FAIL(st);
        QF_OK_OR_FAIL(qf_quantize(ctx, recipe, role, &xm, NULL, NULL, NULL, &plain.q, NULL));
        CK(cudaDeviceSynchronize());
        qt_down(&cat), qt_down(&mine), qt_down(&plain);
        assert_int_equal(src.calls, cases[i].n_amax);
        for (int a = 0; a < cases[i].n_amax; a++) {
            const qf_slot s = cases[i].amax[a];
            assert_true(qt_float(&mine, s) == qt_float(&cat, s));
            assert_true(qt_float(&plain, s) < qt_float(&cat, s));
        }
        const qf_slot rows[] = {QF_SLOT_ROWWISE_DATA, QF_SLOT_ROWWISE_SCALE_INV};
        for (int r = 0; r < 2; r++) { /* row-major: x's rows are cat's first M */
            if (cases[i].fp8 && r == 1)
                continue; /* one scale_inv per tensor, compared below */
            const size_t row = mine.buf[rows[r]].bytes / (size_t)mine.q.t[rows[r]].dims[0];
            assert_true(row == cat.buf[rows[r]].bytes / (size_t)cat.q.t[rows[r]].dims[0]);
            assert_memory_equal(qt_host(&mine, rows[r]), qt_host(&cat, rows[r]), row * M);
        }
        if (memcmp(qt_host(&plain, QF_SLOT_ROWWISE_DATA), qt_host(&mine, QF_SLOT_ROWWISE_DATA),
                   mine.buf[QF_SLOT_ROWWISE_DATA].bytes) == 0)
            fail_msg("%s: the reduction changed nothing", recipe);
        if (cases[i].fp8) {
            assert_memory_equal(qt_host(&mine, QF_SLOT_SCALE_INV), qt_host(&cat, QF_SLOT_SCALE_INV),
                                4);
            for (int64_t k = 0; k < K; k++) /* columnwise [K, M]: cat's rows are M + M2 wide */
                assert_memory_equal(qt_host(&mine, QF_SLOT_COLUMNWISE_DATA) + k * M,
                                    qt_host(&cat, QF_SLOT_COLUMNWISE_DATA) + k * (M + M2),
                                    (size_t)M);
        }
        qt_free(&cat), qt_free(&mine), qt_free(&plain);
        dual_free(&x);
    }
    qf_ctx_free(ctx);
}

/* All-zero input: finite global scale (S_enc = 1), zero scale bytes and data, amax 0. */
static void test_nv_zero_input(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    static const qf_role roles[] = {QF_ROLE_WEIGHT, QF_ROLE_GRAD, QF_ROLE_INPUT};
    for (int i = 0; i < 3; i++) {
        /* the input role through its norm, the others plain (a norm is only for inputs) */
        qcase c = {.recipe = recipe_of("nvfp4"), .role = roles[i],
                     .norm = roles[i] == QF_ROLE_INPUT ? QF_NORM_RMSNORM : QF_NORM_NONE,
                     .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
                     .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 64, .K = 128,
                     .seed = 9, .offset = 3, .data = DATA_ZERO};
        blk_bufs B;
        blk_bufs_alloc(&c, &B);
        blk_make_inputs(&c, &B, 1);
        blk_run_op(ctx, &c, &B);
        assert_true(*(float *)B.amr.h == 0.0f && *(float *)B.amc.h == 0.0f);
        for (size_t j = 0; j < B.srb; j++)
            if (((uint8_t *)B.srow.h)[j] != 0)
                fail_msg("%s: rowwise scale byte %zu is 0x%02X", describe(&c), j,
                         ((uint8_t *)B.srow.h)[j]);
        for (size_t j = 0; j < B.row.bytes; j++)
            if (((uint8_t *)B.row.h)[j] & 0x77) /* +-0 only */
                fail_msg("%s: rowwise data byte %zu is 0x%02X", describe(&c), j,
                         ((uint8_t *)B.row.h)[j]);
        blk_bufs_free(&B);
        blk_run(ctx, &c, 1); /* and bit for bit the reference's */
    }
    qf_ctx_free(ctx);
}

/* A NaN in x: both amaxes are NaN (0x7FC00000), its blocks get scale 0x7F; as the reference. */
static void test_nv_nan_input(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    const qcase cases[] = {
        {.recipe = recipe_of("nvfp4"), .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16,
         .gdt = QF_DTYPE_BF16, .outputs = 3, .M = 64, .K = 96, .seed = 5, .data = DATA_NAN},
        {.recipe = recipe_of("nvfp4"), .role = QF_ROLE_WEIGHT, .xdt = QF_DTYPE_FP32,
         .gdt = QF_DTYPE_FP32, .outputs = 3, .M = 48, .K = 64, .layout = QF_SCALE_LAYOUT_SWIZZLED,
         .data = DATA_NAN},
        {.recipe = recipe_of("nvfp4_nort"), .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_FP16,
         .gdt = QF_DTYPE_FP16, .outputs = 3, .M = 32, .K = 32, .seed = 5, .data = DATA_NAN},
        {.recipe = recipe_of("nvfp4"), .role = QF_ROLE_INPUT, .norm = QF_NORM_LAYERNORM,
         .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16, .outputs = 3, .M = 32, .K = 64,
         .data = DATA_NAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        blk_bufs B;
        blk_bufs_alloc(&cases[i], &B);
        blk_make_inputs(&cases[i], &B, 77);
        blk_run_op(ctx, &cases[i], &B);
        uint32_t r, c;
        memcpy(&r, B.amr.h, 4), memcpy(&c, B.amc.h, 4);
        if (r != 0x7FC00000u || c != 0x7FC00000u)
            fail_msg("%s: amaxes 0x%08X / 0x%08X, expected NaN 0x7FC00000", describe(&cases[i]),
                     r, c);
        blk_bufs_free(&B);
        blk_run(ctx, &cases[i], 77);
    }
    qf_ctx_free(ctx);
}

/* FP8 block scaling with a NaN in x (numerics 2.5): its blocks (a whole row of blocks under a
 * norm, whose statistics are NaN) get scale_inv 1 and NaN elements 0x7F, the other blocks their
 * own scales; bit for bit the reference, 1D and 128x128 tiles, every x dtype, the columnwise copy
 * of a norm from the tiled entry and from the `_cols` entry. */
static void test_fb_nan_input(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    const qf_recipe *r = recipe_of("fp8_block");
    const unsigned both = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    const qcase cases[] = {
        {.recipe = r, .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
         .outputs = both, .M = 300, .K = 130, .data = DATA_NAN},
        {.recipe = r, .role = QF_ROLE_WEIGHT, .xdt = QF_DTYPE_FP32, .gdt = QF_DTYPE_FP32,
         .outputs = both, .M = 257, .K = 384, .data = DATA_NAN},
        {.recipe = r, .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_FP16, .gdt = QF_DTYPE_FP16,
         .outputs = QF_OUT_ROWWISE, .M = 64, .K = 1024, .data = DATA_NAN},
        {.recipe = r, .role = QF_ROLE_INPUT, .norm = QF_NORM_LAYERNORM, .xdt = QF_DTYPE_BF16,
         .gdt = QF_DTYPE_BF16, .outputs = both, .M = 130, .K = 256, .data = DATA_NAN},
        {.recipe = r, .role = QF_ROLE_INPUT, .xdt = QF_DTYPE_BF16, .gdt = QF_DTYPE_BF16,
         .outputs = both, .M = 5, .K = 4096, .data = DATA_ZERO},
        /* the `_cols` entry after the rows entry (16-bit x, whole 128 x 64 tiles) */
        {.recipe = r, .role = QF_ROLE_INPUT, .norm = QF_NORM_LAYERNORM, .xdt = QF_DTYPE_BF16,
         .gdt = QF_DTYPE_BF16, .outputs = both, .M = 256, .K = 192, .data = DATA_NAN},
        {.recipe = r, .role = QF_ROLE_INPUT, .norm = QF_NORM_RMSNORM, .xdt = QF_DTYPE_FP16,
         .gdt = QF_DTYPE_FP32, .outputs = QF_OUT_COLUMNWISE, .M = 384, .K = 320,
         .data = DATA_NAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        blk_run(ctx, &cases[i], 91);
    qf_ctx_free(ctx);
}

/* The RHT setting reaches the fusion key and the bytes: nvfp4 and nvfp4_nort grads differ in
 * key and columnwise data, and each matches its own reference. */
static void test_nv_rht_changes_key(void **state) {
    (void)state;
    qf_ctx_t *ctx = gpu_ctx();
    qcase c = {.recipe = recipe_of("nvfp4"), .role = QF_ROLE_GRAD, .xdt = QF_DTYPE_BF16,
                 .gdt = QF_DTYPE_BF16, .outputs = QF_OUT_COLUMNWISE, .M = 128, .K = 64,
                 .seed = 1, .offset = 2};
    size_t n;
    uint8_t *a = grad_bytes(ctx, &c, &n);
    char key_rht[33];
    memcpy(key_rht, qf_ctx_last_kernel(ctx)->key, sizeof key_rht);
    assert_string_equal(qf_ctx_last_kernel(ctx)->name, "qf_nvfp4_quant_grad_bf16");
    c.recipe = recipe_of("nvfp4_nort");
    uint8_t *b = grad_bytes(ctx, &c, &n);
    assert_string_equal(qf_ctx_last_kernel(ctx)->name, "qf_nvfp4_nort_quant_grad_bf16");
    assert_string_not_equal(qf_ctx_last_kernel(ctx)->key, key_rht);
    if (memcmp(a, b, n) == 0)
        fail_msg("RHT on and off gave identical columnwise bytes");
    free(a), free(b);
    blk_run(ctx, &c, 4242);
    c.recipe = recipe_of("nvfp4");
    blk_run(ctx, &c, 4242);
    qf_ctx_free(ctx);
}

/* }=====================================================================} */

static int print_counts(void **state) {
    (void)state;
    if (qf_test_have_gpu())
        for (int f = 0; f < QF_FAMILY_COUNT; f++)
            if (kHooks[f].run)
                printf(kHooks[f].summary, g_cases[f]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--child-disk-hit") == 0)
        return child_disk_hit();
    if (!recipe_filter_ok())
        return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_cache_across_processes),
        cmocka_unit_test(test_new_m_does_not_recompile),
        cmocka_unit_test(test_scale_update),
        cmocka_unit_test(test_nv_rht_changes_key),
        cmocka_unit_test(test_nv_sr_streams),
        cmocka_unit_test(test_nv_zero_input),
        cmocka_unit_test(test_amax_reduce),
        cmocka_unit_test(test_nv_nan_input),
        cmocka_unit_test(test_fb_nan_input),
        cmocka_unit_test(test_nq_options),
        cmocka_unit_test(test_quantize),
        QF_TEST_ARG(test_nq_bf16, test_nq, 0),
        QF_TEST_ARG(test_nq_fp16, test_nq, 1),
        QF_TEST_ARG(test_nq_fp32, test_nq, 2),
    };
    qf_test_filter_from_env("gpu_quantize", tests);
    return cmocka_run_group_tests_name("gpu_quantize", tests, NULL, print_counts);
}
