/* test_ctx.c: device-less contexts (qf_ctx_init_host) and the in-memory kernel table: many threads
 * looking kernels up at once leave one entry per instance under the right fusion key; lookups go
 * memory, then disk, then NVRTC; the tables grow and keep their items. No GPU needed: a
 * device-less context runs the same lookup as a GPU one, minus loading the module. */
#include "test_util.h"

#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "ctx.h"
#include "jit_cache.h"

#define N_THREADS 6
#define N_ROUNDS 3
#define N_INST 3

static const char kKernel[] = "qf_fp8_delayed_quant_weight_bf16";

/* {===================================================================== helpers */

static int kernel_index(const char *name) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (strcmp(qf_kernels[i].name, name) == 0)
            return i;
    fail_msg("kernel %s is not in the registry", name);
    return -1;
}

/* The three instances of a quantizer: rowwise, columnwise, both. */
static qf_kernel_instance instance(int kidx, int i) {
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    inst.outputs = (unsigned)(i + 1);
    return inst;
}

static void expected_key(int kidx, const qf_kernel_instance *inst, int arch, char *hex) {
    const qf_kernel_entry *k = &qf_kernels[kidx];
    qf_kernel_key(k->recipe, k, inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, arch, hex);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* =====================================================================} */

/* {===================================================================== tests */

typedef struct worker {
    qf_ctx_t *ctx;
    pthread_barrier_t *go;
    int kidx, first, bad;
    char keys[N_INST][QF_KEY_HEX_LEN + 1];
} worker;

/* Looks the N_INST instances up N_ROUNDS times, starting at a different one per thread. */
static void *lookup_worker(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->go);
    for (int r = 0; r < N_ROUNDS; r++)
        for (int j = 0; j < N_INST; j++) {
            int i = (w->first + j) % N_INST;
            qf_kernel_instance inst = instance(w->kidx, i);
            qf_loaded_kernel lk;
            if (qf_ctx_kernel(w->ctx, &qf_kernels[w->kidx], &inst, &lk) != QF_OK ||
                strcmp(lk.key, w->keys[i]) != 0 || lk.kernel != &qf_kernels[w->kidx] ||
                lk.inst.outputs != inst.outputs)
                w->bad++;
        }
    return NULL;
}

/* N_THREADS threads race on an empty table (memory only, so every miss compiles): each instance
 * is compiled and inserted once, and every thread gets the right entry every time. */
static void test_table_threads(void **state) {
    (void)state;
    setenv("QFUSE_DISABLE_DISK_CACHE", "1", 1);
    qf_cache_reset();
    qf_ctx_t *ctx = NULL;
    assert_int_equal(qf_ctx_init_host(&ctx, 90), QF_OK);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    worker w[N_THREADS];
    pthread_t th[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        w[t] = (worker){.ctx = ctx, .go = &go, .kidx = kernel_index(kKernel), .first = t};
        for (int i = 0; i < N_INST; i++) {
            qf_kernel_instance inst = instance(w[t].kidx, i);
            expected_key(w[t].kidx, &inst, 90, w[t].keys[i]);
        }
        assert_int_equal(pthread_create(&th[t], NULL, lookup_worker, &w[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        assert_int_equal(pthread_join(th[t], NULL), 0);
        assert_int_equal(w[t].bad, 0);
    }
    assert_int_equal(ctx->n_kernels, N_INST);
    for (int i = 0; i < N_INST; i++)
        for (int j = i + 1; j < N_INST; j++)
            assert_string_not_equal(ctx->kernels[i].key, ctx->kernels[j].key);
    pthread_barrier_destroy(&go);
    qf_ctx_free(ctx);
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    qf_cache_reset();
}

/* First use compiles and stores; a second context finds it on disk; a repeat is a memory hit. */
static void test_lookup_sources(void **state) {
    (void)state;
    char root[] = "/tmp/qf_test_ctx.XXXXXX";
    assert_non_null(mkdtemp(root));
    setenv("QFUSE_CACHE_DIR", root, 1);
    qf_cache_reset();
    int kidx = kernel_index(kKernel);
    qf_kernel_instance inst = instance(kidx, 0);
    qf_kernel_source want[] = {QF_KSRC_COMPILED, QF_KSRC_MEMORY, QF_KSRC_DISK};
    qf_ctx_t *a = NULL, *b = NULL;
    assert_int_equal(qf_ctx_init_host(&a, 90), QF_OK);
    assert_int_equal(qf_ctx_init_host(&b, 90), QF_OK);
    qf_ctx_t *order[] = {a, a, b};
    for (int i = 0; i < 3; i++) {
        qf_loaded_kernel lk;
        assert_int_equal(qf_ctx_kernel(order[i], &qf_kernels[kidx], &inst, &lk), QF_OK);
        assert_int_equal(qf_ctx_last_kernel(order[i])->source, want[i]);
        assert_string_equal(qf_ctx_last_kernel(order[i])->name, kKernel);
        assert_null(lk.fn); /* device-less: nothing loaded */
    }
    assert_int_equal(qf_ctx_arch(a), 90);
    qf_ctx_free(a);
    qf_ctx_free(b);
    nftw(root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    unsetenv("QFUSE_CACHE_DIR");
    qf_cache_reset();
}

/* A context's tables (kernels, cuBLASLt plans) grow by doubling and keep every item: 40 pushes
 * leave room for 64 and the 40 values in order; a table with room is left as it is. */
static void test_table_grow(void **state) {
    (void)state;
    long *items = NULL;
    int n = 0, cap = 0;
    for (long v = 0; v < 40; v++) {
        assert_int_equal(qf_ctx_table_grow((void **)&items, n, &cap, sizeof *items, "t"), QF_OK);
        assert_true(n < cap);
        items[n++] = v * v;
    }
    assert_int_equal(cap, 64);
    for (int i = 0; i < n; i++)
        assert_int_equal(items[i], (long)i * i);
    long *before = items;
    assert_int_equal(qf_ctx_table_grow((void **)&items, n, &cap, sizeof *items, "t"), QF_OK);
    assert_ptr_equal(items, before);
    assert_int_equal(cap, 64);
    int huge = INT_MAX / 2 + 1;
    assert_int_equal(qf_ctx_table_grow((void **)&items, huge, &huge, sizeof *items, "plans"),
                     QF_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(qf_last_error(), "plans: the table is full"));
    free(items);
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_threads),
        cmocka_unit_test(test_lookup_sources),
        cmocka_unit_test(test_table_grow),
    };
    return cmocka_run_group_tests_name("ctx", tests, NULL, NULL);
}
