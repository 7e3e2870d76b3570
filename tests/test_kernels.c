/* test_kernels.c: every generated kernel compiles with NVRTC for sm_90 and sm_100 (no GPU needed),
 * and the fusion key of a registry kernel changes with every field that changes its code (SPEC 5). */
#include "test_util.h"

#include <stdio.h>

#include "kernel_key.h"
#include "registry.h"

/* ==================================================================== NVRTC compiles */

/* One NVRTC compile of k as inst for arch; returns 0, or 1 with a message in msg. Thread-safe
 * (qf_last_error is per thread, NVRTC programs are independent). */
static int compile_kernel(const qf_kernel_entry *k, const qf_kernel_instance *inst, int arch,
                          char *msg, size_t cap) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int ne = qf_kernel_extra_options(k, inst, store, extra);
    int no = qf_jit_options(arch, extra, ne, opts, archbuf);
    void *cubin = NULL;
    size_t size = 0;
    qf_status s = no > 0 ? qf_jit_compile(k->name, k->source, qf_nvrtc_header_names,
                                          qf_nvrtc_headers, qf_nvrtc_header_count, opts, no,
                                          &cubin, &size)
                         : QF_ERR_INTERNAL;
    int bad = s != QF_OK || size <= 64 || memcmp(cubin, "\177ELF", 4) != 0;
    if (bad)
        snprintf(msg, cap, "%s for sm_%d: %s", k->name, arch,
                 s != QF_OK ? qf_last_error() : "the output is not an ELF CUBIN");
    free(cubin);
    return bad;
}

/* Nonzero when kernel i is the first of its op in the registry. */
static int first_of_op(int i) {
    for (int j = 0; j < i; j++)
        if (qf_kernels[j].op == qf_kernels[i].op)
            return 0;
    return 1;
}

#define QF_TEST_INSTANCES 3 /* per kernel: default; both outputs + fp32 gamma; columnwise only */

/* Instance j of kernel k (QF_TEST_INSTANCES of them for quantizers, 1 otherwise); 0 if none. */
static int test_instance(const qf_kernel_entry *k, int j, qf_kernel_instance *inst) {
    *inst = qf_kernel_instance_default(k);
    if (j == 0)
        return 1;
    if (k->op != QF_OP_NORM_QUANTIZE && k->op != QF_OP_QUANTIZE)
        return 0;
    inst->outputs = j == 1 ? QF_OUT_ROWWISE | QF_OUT_COLUMNWISE : QF_OUT_COLUMNWISE;
    inst->gamma_dtype = QF_DTYPE_FP32;
    return 1;
}

/* Each kernel as its default instance and, for quantizers, with both outputs and fp32 gamma and
 * with the columnwise output only; compiled in parallel (OpenMP), failures reported together.
 * NOTES: QFUSE_TEST_QUICK=1 (sanitizer runs, where NVRTC runs some 50x slower under valgrind)
 * compiles the first kernel of each op only: NVRTC is not the code under test there. */
static void compile_all(int arch) {
    const int quick = getenv("QFUSE_TEST_QUICK") && atoi(getenv("QFUSE_TEST_QUICK"));
    assert_true(qf_kernel_count > 0);
    const int jobs = qf_kernel_count * QF_TEST_INSTANCES;
    char(*msgs)[512] = calloc((size_t)jobs, sizeof *msgs);
    int *bad = calloc((size_t)jobs, sizeof *bad);
    assert_non_null(msgs);
    assert_non_null(bad);
#pragma omp parallel for schedule(dynamic)
    for (int job = 0; job < jobs; job++) {
        const int i = job / QF_TEST_INSTANCES;
        qf_kernel_instance inst;
        if ((quick && !first_of_op(i)) || !test_instance(&qf_kernels[i], job % QF_TEST_INSTANCES,
                                                         &inst))
            continue;
        bad[job] = compile_kernel(&qf_kernels[i], &inst, arch, msgs[job], sizeof msgs[job]);
    }
    int failures = 0, first = -1;
    for (int job = 0; job < jobs; job++)
        if (bad[job]) {
            fprintf(stderr, "%s\n", msgs[job]);
            failures++;
            first = first < 0 ? job : first;
        }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", first >= 0 ? msgs[first] : "");
    free(msgs);
    free(bad);
    if (failures)
        fail_msg("%d NVRTC compiles failed for sm_%d; the first: %s", failures, arch, msg);
}

static void test_compile_all_sm90(void **state) {
    (void)state;
    compile_all(90);
}

static void test_compile_all_sm100(void **state) {
    (void)state;
    compile_all(100);
}

/* ==================================================================== fusion key fields */

static void key_of(const qf_recipe *r, const qf_kernel_entry *k,
                   const qf_kernel_instance *inst, int arch, char hex[QF_KEY_HEX_LEN + 1]) {
    qf_kernel_key(r, k, inst, qf_nvrtc_header_names, qf_nvrtc_headers, qf_nvrtc_header_count,
                  arch, hex);
}

/* The first norm + quantize kernel: the most fields to vary. */
static const qf_kernel_entry *first_nq(void) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (qf_kernels[i].op == QF_OP_NORM_QUANTIZE)
            return &qf_kernels[i];
    fail_msg("no norm_quantize kernel in the registry");
    return NULL;
}

typedef struct key_fixture {
    qf_recipe r;
    qf_kernel_entry k;
    qf_kernel_instance inst;
    int arch;
    char base[QF_KEY_HEX_LEN + 1];
} key_fixture;

static int key_setup(void **state) {
    key_fixture *f = calloc(1, sizeof *f);
    f->k = *first_nq();
    f->r = qf_recipes[f->k.recipe];
    f->inst = qf_kernel_instance_default(&f->k);
    f->arch = 90;
    key_of(&f->r, &f->k, &f->inst, f->arch, f->base);
    *state = f;
    return 0;
}

static int key_teardown(void **state) {
    free(*state);
    return 0;
}

static void assert_key_changed(const key_fixture *f) {
    char hex[QF_KEY_HEX_LEN + 1];
    key_of(&f->r, &f->k, &f->inst, f->arch, hex);
    assert_string_not_equal(hex, f->base);
}

static void test_key_deterministic(void **state) {
    key_fixture *f = *state;
    char hex[QF_KEY_HEX_LEN + 1];
    key_of(&f->r, &f->k, &f->inst, f->arch, hex);
    assert_string_equal(hex, f->base);
    assert_int_equal(strlen(hex), QF_KEY_HEX_LEN);
}

static void test_key_all_kernels_distinct(void **state) {
    (void)state;
    char (*keys)[QF_KEY_HEX_LEN + 1] = calloc((size_t)qf_kernel_count, sizeof *keys);
    for (int i = 0; i < qf_kernel_count; i++) {
        qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[i]);
        key_of(&qf_recipes[qf_kernels[i].recipe], &qf_kernels[i], &inst, 90, keys[i]);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(keys[i], keys[j]);
    }
    free(keys);
}

static void test_key_recipe_options(void **state) {
    key_fixture *f = *state;
    snprintf(f->r.options, sizeof f->r.options, "%s",
             "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=e4m3;margin=0");
    assert_key_changed(f);
}

static void test_key_margin(void **state) {
    key_fixture *f = *state;
    snprintf(f->r.options, sizeof f->r.options, "%s",
             "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;margin=1");
    assert_key_changed(f);
}

static void test_key_norm(void **state) {
    key_fixture *f = *state;
    f->k.norm = f->k.norm == QF_NORM_LAYERNORM ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM;
    assert_key_changed(f);
}

static void test_key_zero_centered_gamma(void **state) {
    key_fixture *f = *state;
    f->k.zero_centered_gamma = !f->k.zero_centered_gamma;
    assert_key_changed(f);
}

static void test_key_input_dtype(void **state) {
    key_fixture *f = *state;
    f->k.in_dtype = f->k.in_dtype == QF_DTYPE_BF16 ? QF_DTYPE_FP16 : QF_DTYPE_BF16;
    assert_key_changed(f);
}

static void test_key_output_format(void **state) {
    key_fixture *f = *state;
    f->k.out_dtype = f->k.out_dtype == QF_DTYPE_E4M3 ? QF_DTYPE_E5M2 : QF_DTYPE_E4M3;
    assert_key_changed(f);
}

static void test_key_outputs(void **state) {
    key_fixture *f = *state;
    f->inst.outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    assert_key_changed(f);
}

static void test_key_gamma_dtype(void **state) {
    key_fixture *f = *state;
    f->inst.gamma_dtype = QF_DTYPE_FP32 == f->inst.gamma_dtype ? QF_DTYPE_BF16 : QF_DTYPE_FP32;
    assert_key_changed(f);
}

static void test_key_arch(void **state) {
    key_fixture *f = *state;
    f->arch = 100;
    assert_key_changed(f);
}

static void test_key_source(void **state) {
    key_fixture *f = *state;
    size_t n = strlen(f->k.source);
    char *src = malloc(n + 2);
    memcpy(src, f->k.source, n);
    memcpy(src + n, " ", 2); /* one trailing byte */
    f->k.source = src;
    assert_key_changed(f);
    free(src);
}

static void test_key_name(void **state) {
    key_fixture *f = *state;
    f->k.name = "qf_other_name";
    assert_key_changed(f);
}

static void test_key_launch_config(void **state) {
    key_fixture *f = *state;
    f->k.tile_m *= 2;
    assert_key_changed(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_key_deterministic, key_setup, key_teardown),
        cmocka_unit_test(test_key_all_kernels_distinct),
        cmocka_unit_test_setup_teardown(test_key_recipe_options, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_margin, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_norm, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_zero_centered_gamma, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_input_dtype, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_output_format, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_outputs, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_gamma_dtype, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_arch, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_source, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_name, key_setup, key_teardown),
        cmocka_unit_test_setup_teardown(test_key_launch_config, key_setup, key_teardown),
        cmocka_unit_test(test_compile_all_sm90),
        cmocka_unit_test(test_compile_all_sm100),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
