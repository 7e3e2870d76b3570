/* test_gpu_util.h: helpers shared by the GPU tests: CUDA and qfuse status checks, a context or a
 * clean skip, tests that take an argument, host/device buffer pairs poisoned on allocation, tensor
 * views, activation-like input data, byte comparison and the registry's recipes by name and by
 * family. */
#ifndef QF_TEST_GPU_UTIL_H
#define QF_TEST_GPU_UTIL_H

#include "test_util.h"

#include <math.h>

#include "family.h"
#include "qfuse.h"
#include "ref.h"
#include "registry.h"

/* Fails the test unless a CUDA runtime call returns cudaSuccess. */
#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

/* Fails the test with the status name and qfuse's message unless call returns QF_OK. */
#define QF_OK_OR_FAIL(call)                                                                   \
    do {                                                                                      \
        qf_status s_ = (call);                                                                \
        if (s_ != QF_OK)                                                                      \
            fail_msg("%s -> %s: %s", #call, qf_status_name(s_), qf_last_error());             \
    } while (0)

/* A context on device 0; without a GPU the test skips (QF_SKIP_WITHOUT_GPU) before anything is
 * allocated. Released with qf_ctx_free. */
static inline qf_ctx_t *gpu_ctx(void) {
    QF_SKIP_WITHOUT_GPU();
    qf_ctx_t *ctx = NULL;
    QF_OK_OR_FAIL(qf_ctx_init(&ctx, 0));
    return ctx;
}

/* A cmocka test named `name` that runs fn with an int argument (read back with test_arg): one
 * function serves the tests that differ only by it. */
#define QF_TEST_ARG(name, fn, arg) {#name, fn, NULL, NULL, (void *)(intptr_t)(arg)}

/* The argument of a QF_TEST_ARG test. */
static inline int test_arg(void **state) {
    return (int)(intptr_t)*state;
}

/* The registry entry of recipe `name`; fails the test when there is none. */
static inline const qf_recipe *recipe_of(const char *name) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    fail_msg("recipe %s is not in the registry", name);
    return NULL;
}

/* 1 when r's family runs a whole training step: its quantizer (a quantize template in its row)
 * and a GEMM path on some architecture; else 0 (silently when test is NULL, else after printing
 * that `test` skips r). Every built-in recipe does; a family added without a GEMM would not. */
static inline int recipe_trains(const qf_recipe *r, const char *test) {
    const qf_family_traits *t = qf_family_get(r->family);
    const int quantizer = t->ops[QF_OP_QUANTIZE].tpl != NULL;
    if (quantizer && t->gemm[0].engine != QF_GEMM_NONE)
        return 1;
    if (test)
        printf("%s: recipe %s skipped: family %s has no %s yet\n", test, r->name,
               qf_family_name(r->family), quantizer ? "GEMM" : "quantizer");
    return 0;
}

/* 1 when r's family runs a training step (recipe_trains), else 0 after printing that `test`
 * skips r. */
static inline int recipe_quantizes(const qf_recipe *r, const char *test) {
    return recipe_trains(r, test);
}

/* How many of the registry's recipes run a training step (recipe_trains, silently). */
static inline int recipes_quantizing(void) {
    int n = 0;
    for (int i = 0; i < qf_recipe_count; i++)
        n += recipe_trains(&qf_recipes[i], NULL);
    return n;
}

/* The rank of r among the registry's recipes of its family (registry order), and their count. */
static inline int recipe_rank(const qf_recipe *r, int *n_family) {
    int rank = -1, n = 0;
    for (int i = 0; i < qf_recipe_count; i++)
        if (qf_recipes[i].family == r->family) {
            if (&qf_recipes[i] == r)
                rank = n;
            n++;
        }
    *n_family = n;
    return rank;
}

/* Counts bytes where got differs from want. */
static inline int64_t count_mismatches(const uint8_t *want, const uint8_t *got, int64_t n) {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (int64_t i = 0; i < n; i++)
        bad += want[i] != got[i];
    return bad;
}

/* The first and last byte where got differs from want (n bytes; both -1 where none does). */
static inline void mismatch_bounds(const uint8_t *want, const uint8_t *got, int64_t n,
                                   int64_t *first, int64_t *last) {
    *first = *last = -1;
    for (int64_t i = 0; i < n; i++)
        if (want[i] != got[i]) {
            *first = *first < 0 ? i : *first;
            *last = i;
        }
}

/* The byte every output buffer holds before a launch: a kernel that skips an entry is caught. */
#define QF_TEST_POISON 0xAB

/* A host buffer h and a device buffer d of the same size (at least 1 byte each). */
typedef struct dual {
    void *d;
    void *h;
    size_t bytes;
} dual;

/* Allocates both halves; the device half is filled with QF_TEST_POISON. The fill and dual_up's
 * copy run on the legacy default stream, which the tests' non-blocking streams do not wait for,
 * and a copy from pageable memory may return before it lands: both end with a device
 * synchronization, so that an op on any stream finds the buffer as set. */
static inline dual dual_alloc(size_t bytes) {
    dual b = {NULL, malloc(bytes ? bytes : 1), bytes};
    assert_non_null(b.h);
    CK(cudaMalloc(&b.d, bytes ? bytes : 1));
    CK(cudaMemset(b.d, QF_TEST_POISON, bytes ? bytes : 1));
    CK(cudaDeviceSynchronize());
    return b;
}

static inline void dual_free(dual *b) {
    cudaFree(b->d);
    free(b->h);
}

/* Host to device (then a device synchronization: dual_alloc). */
static inline void dual_up(dual *b) {
    CK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
}

/* Device to host. */
static inline void dual_down(dual *b) {
    CK(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost));
}

/* A tensor view of the device half: [d0] (ndim 1) or [d0, d1]. */
static inline qf_tensor tv(const dual *b, qf_dtype dt, int ndim, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = b->d, .dtype = dt, .ndim = ndim, .dims = {d0, d1}};
    return t;
}

/* Activation-like [M, K] data: base + uniform noise under a per-row scale spanning 11 octaves,
 * and every 61st channel 40x larger, so that block scales and element codes vary. */
static inline void fill(void *p, qf_dtype dt, int64_t M, int64_t K, uint64_t seed, float base) {
    for (int64_t m = 0; m < M; m++) {
        uint64_t s = seed ^ ((uint64_t)m * 0x9E3779B97F4A7C15ull);
        float rowscale = ldexpf(1.0f, (int)(m % 11) - 5);
        for (int64_t k = 0; k < K; k++) {
            float v = base + qf_test_rng_uniform(&s) * rowscale * 1.7f;
            if (k % 61 == 5)
                v *= 40.0f;
            store_as(p, dt, m * K + k, v);
        }
    }
}

/* ||got - want|| / ||size|| (Frobenius; size = want when NULL; ||got - want|| when the norm is 0)
 * of n host values got of dtype dt; *bad, when not NULL, counts the non-finite ones. */
static inline double rel_frob_sized(const void *got, qf_dtype dt, const double *want,
                                    const double *size, int64_t n, int64_t *bad) {
    double num = 0.0, den = 0.0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = qf_load_as_float(got, dt, i), z = size ? size[i] : want[i];
        nonfinite += !isfinite(v);
        num += (v - want[i]) * (v - want[i]);
        den += z * z;
    }
    if (bad)
        *bad = nonfinite;
    return sqrt(num / (den > 0.0 ? den : 1.0));
}

/* sqrt(sum (got - want)^2 / sum want^2) of n host values got of dtype dt against want. */
static inline double rel_frob(const void *got, qf_dtype dt, const double *want, int64_t n) {
    return rel_frob_sized(got, dt, want, NULL, n, NULL);
}

/* n bf16 values offset + scale * U[-1, 1) from seed. */
static inline void fill_uniform_bf16(void *p, int64_t n, float scale, float offset,
                                     uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        store_as(p, QF_DTYPE_BF16, i, offset + scale * qf_test_rng_uniform(&seed));
}

/* One step of work queued on a stream (graph_check). */
typedef void (*step_fn)(void *arg, cudaStream_t st);

/* The device bytes of outs[0..n) in host copies (free with snap_free). */
static inline void **snap(dual **outs, int n) {
    void **s = malloc((size_t)n * sizeof *s);
    assert_non_null(s);
    for (int i = 0; i < n; i++) {
        dual_down(outs[i]);
        s[i] = malloc(outs[i]->bytes);
        assert_non_null(s[i]);
        memcpy(s[i], outs[i]->h, outs[i]->bytes);
    }
    return s;
}

static inline void snap_free(void **s, int n) {
    for (int i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* A step captured as a CUDA graph against the same step run eagerly (SPEC 6): outs[0..n) hold
 * the eager step's results; their bytes are saved and the buffers poisoned (0xFF), then run(arg)
 * is captured on st in global capture mode (an allocation or synchronization inside fails the
 * capture), replayed twice, and every output compared with the saved bytes. Returns the graph's
 * node count. */
static inline size_t graph_check(step_fn run, void *arg, cudaStream_t st, dual **outs, int n,
                                 const char *what) {
    CK(cudaDeviceSynchronize()); /* the eager step done, on whatever stream it ran */
    void **eager = snap(outs, n);
    for (int i = 0; i < n; i++) /* on st: a non-blocking st would not wait for the legacy stream */
        CK(cudaMemsetAsync(outs[i]->d, 0xFF, outs[i]->bytes, st));
    CK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    run(arg, st);
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        for (int i = 0; i < n; i++) {
            dual_down(outs[i]);
            const uint8_t *e = eager[i], *g = outs[i]->h;
            const int64_t bad = count_mismatches(e, g, (int64_t)outs[i]->bytes);
            if (bad) {
                int64_t first, last;
                mismatch_bounds(e, g, (int64_t)outs[i]->bytes, &first, &last);
                fail_msg("%s: graph replay %d: output %d (%zu bytes) differs from eager in %lld "
                         "bytes, from byte %lld (eager 0x%02x, replay 0x%02x) to %lld", what, rep,
                         i, outs[i]->bytes, (long long)bad, (long long)first, e[first], g[first],
                         (long long)last);
            }
        }
    }
    snap_free(eager, n);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return nodes;
}

/* A quantized tensor with one host/device buffer per slot its fake shapes list. */
typedef struct qtensor {
    qf_quantized q;
    dual buf[QF_SLOT_COUNT];
    int has[QF_SLOT_COUNT];
} qtensor;

/* Buffers of both copies of a [rows, cols] tensor of `role`: through the fused norm + quantize
 * with a norm (the input role; its statistics too), else through the plain quantizer. */
static inline void qt_alloc(qtensor *t, const char *recipe, qf_role role, qf_norm norm,
                            int64_t rows, int64_t cols, qf_scale_layout layout) {
    const int fused = role == QF_ROLE_INPUT && norm != QF_NORM_NONE;
    const qf_shape_query q = {.op = fused ? QF_OP_NORM_QUANTIZE : QF_OP_QUANTIZE, .role = role,
                              .norm = fused ? norm : QF_NORM_NONE,
                              .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = rows,
                              .K = cols};
    qf_shape sh[QF_SLOT_COUNT];
    int n = 0;
    QF_OK_OR_FAIL(qf_fake_shapes(recipe, &q, sh, QF_SLOT_COUNT, &n));
    memset(t, 0, sizeof *t);
    t->q.layout = layout;
    for (int i = 0; i < n; i++) {
        const int s = qf_slot_from_name(sh[i].name);
        assert_true(s >= 0 && !t->has[s]);
        t->buf[s] = dual_alloc(sh[i].bytes);
        t->has[s] = 1;
        t->q.t[s] = (qf_tensor){.data = t->buf[s].d, .dtype = sh[i].dtype, .ndim = sh[i].ndim};
        memcpy(t->q.t[s].dims, sh[i].dims, sizeof sh[i].dims);
    }
}

static inline void qt_down(qtensor *t) {
    for (int s = 0; s < QF_SLOT_COUNT; s++)
        if (t->has[s])
            dual_down(&t->buf[s]);
}

static inline void qt_free(qtensor *t) {
    for (int s = 0; s < QF_SLOT_COUNT; s++)
        if (t->has[s])
            dual_free(&t->buf[s]);
}

/* Device buffers buf[] for the bf16 values of both copies of a weight's t, as a layer keeps them
 * (qf_ln_linear.wq_bf16; qf_dequantized_dims), and their tensors kept[]. */
static inline void kept_alloc(const qtensor *t, dual buf[QF_COPY_COUNT],
                              qf_tensor kept[QF_COPY_COUNT]) {
    for (int c = 0; c < QF_COPY_COUNT; c++) {
        int64_t d[2];
        QF_OK_OR_FAIL(qf_dequantized_dims(&t->q, (qf_copy)c, d));
        buf[c] = dual_alloc((size_t)(d[0] * d[1]) * 2);
        kept[c] = tv(&buf[c], QF_DTYPE_BF16, 2, d[0], d[1]);
    }
}

/* Host bytes of slot s of t (the slot must exist). */
static inline const uint8_t *qt_host(const qtensor *t, qf_slot s) {
    assert_true(t->has[s]);
    return t->buf[s].h;
}

static inline float qt_float(const qtensor *t, qf_slot s) {
    float v;
    memcpy(&v, qt_host(t, s), sizeof v);
    return v;
}

#endif /* QF_TEST_GPU_UTIL_H */
