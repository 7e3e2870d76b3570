/* test_jit_compile.c: NVRTC options, version and CUBIN compiles (no GPU needed). */
#include "test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

/* nvrtc.h tests undefined macros in an #if; see jit_compile.c. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#include <nvrtc.h>
#pragma GCC diagnostic pop

#include "jit_compile.h"
#include "qf_arch.h"

static const char kernel_src[] =
    "extern \"C\" __global__ void k(float *p){ p[threadIdx.x] = 1.0f; }\n";

/* {===================================================================== helpers */

/* Index of opt in opts, or -1. */
static int find_option(const char *const *opts, int n, const char *opt) {
    for (int i = 0; i < n; i++)
        if (strcmp(opts[i], opt) == 0)
            return i;
    return -1;
}

/* qfuse's NVRTC options for one arch (qf_jit_options): v[0..n), the arch option in arch. */
typedef struct jit_opts {
    const char *v[QF_JIT_MAX_OPTIONS];
    char arch[64];
    int n;
} jit_opts;

/* Fills o for arch with the n_extra options extra appended; returns o->n (-1: refused). */
static int options_for(jit_opts *o, int arch, const char *const *extra, int n_extra) {
    o->n = qf_jit_options(arch, extra, n_extra, o->v, o->arch);
    return o->n;
}

/* Compiles src for arch with qfuse's options; returns the status, CUBIN in *cubin. */
static qf_status compile_for(int arch, const char *src, int n_headers, const char *const *names,
                             const char *const *texts, void **cubin, size_t *size) {
    jit_opts o;
    assert_true(options_for(&o, arch, NULL, 0) > 0);
    return qf_jit_compile("k.cu", src, names, texts, n_headers, o.v, o.n, cubin, size);
}

/* compile_for(90, src) with stderr captured: returns the status, *err what was written there
 * (malloc'ed; the caller frees it). */
static qf_status compile_captured(const char *src, void **cubin, size_t *size, char **err) {
    qf_test_capture c;
    qf_test_capture_begin(&c);
    qf_status s = compile_for(90, src, 0, NULL, NULL, cubin, size);
    *err = qf_test_capture_end(&c);
    return s;
}

/* Asserts buf is a CUDA ELF object: ELF magic and e_machine EM_CUDA (190). */
static void assert_cubin(const void *buf, size_t size) {
    const unsigned char *b = buf;
    assert_non_null(b);
    assert_true(size > 64);
    assert_memory_equal(b, "\177ELF", 4);
    assert_int_equal(b[18] | b[19] << 8, 190);
}

static int setup(void **state) {
    (void)state;
    unsetenv("QFUSE_LINEINFO");
    unsetenv("QFUSE_VERBOSE");
    unsetenv("QFUSE_DUMP_SOURCE");
    qf_clear_error();
    return 0;
}

/* =====================================================================} */

/* {===================================================================== options and version */

static void test_options_default(void **state) {
    (void)state;
    jit_opts o;
    assert_int_equal(options_for(&o, 90, NULL, 0), 4);
    assert_string_equal(o.v[0], "--gpu-architecture=sm_90a"); /* Hopper: wgmma, setmaxnreg */
    assert_string_equal(o.v[1], "--std=c++17");
    assert_string_equal(o.v[2], "-default-device");
    assert_string_equal(o.v[3], "--fmad=false");
    options_for(&o, 100, NULL, 0);
    assert_string_equal(o.v[0], "--gpu-architecture=sm_100");
    options_for(&o, 89, NULL, 0);
    assert_string_equal(o.v[0], "--gpu-architecture=sm_89");
}

/* The tools spell an arch sm_XX; sm_90a is sm_90 (the target the runtime compiles for it), and no
 * other suffix is accepted. */
static void test_arch_parse(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int arch;
    } cases[] = {{"sm_90", 90},   {"sm_90a", 90},  {"sm_89", 89},    {"sm_100", 100},
                 {"sm_89a", -1},  {"sm_100a", -1}, {"sm_90b", -1},   {"sm_90aa", -1},
                 {"sm_80", -1},   {"sm_9", -1},    {"sm_1000", -1},  {"90", -1},
                 {"sm_ 90", -1},  {"", -1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (qf_arch_parse(cases[i].text) != cases[i].arch)
            fail_msg("qf_arch_parse(\"%s\") = %d, want %d", cases[i].text,
                     qf_arch_parse(cases[i].text), cases[i].arch);
    assert_int_equal(qf_arch_parse(NULL), -1);
}

static void test_options_extras_appended(void **state) {
    (void)state;
    const char *extra[] = {"-DQF_K=4096", "-DQF_ROWWISE=1"};
    jit_opts o;
    assert_int_equal(options_for(&o, 90, extra, 2), 6);
    assert_string_equal(o.v[4], "-DQF_K=4096");
    assert_string_equal(o.v[5], "-DQF_ROWWISE=1");
}

static void test_options_too_many(void **state) {
    (void)state;
    const char *extra[QF_JIT_MAX_OPTIONS];
    for (int i = 0; i < QF_JIT_MAX_OPTIONS; i++)
        extra[i] = "-DX";
    jit_opts o;
    assert_int_equal(options_for(&o, 90, extra, QF_JIT_MAX_OPTIONS), -1);
    assert_non_null(strstr(qf_last_error(), "QF_JIT_MAX_OPTIONS"));
}

/* A device newer than this NVRTC is compiled for the newest arch NVRTC supports (STYLE 18). */
static void test_options_clamp_to_nvrtc_max(void **state) {
    (void)state;
    int n = 0, archs[64], max = 0;
    assert_int_equal(nvrtcGetNumSupportedArchs(&n), NVRTC_SUCCESS);
    assert_true(n > 0 && n <= 64);
    assert_int_equal(nvrtcGetSupportedArchs(archs), NVRTC_SUCCESS);
    for (int i = 0; i < n; i++)
        max = archs[i] > max ? archs[i] : max;
    char want[64];
    snprintf(want, sizeof want, "--gpu-architecture=sm_%d", max);
    jit_opts o;
    options_for(&o, max + 10, NULL, 0);
    assert_string_equal(o.v[0], want);
    options_for(&o, max, NULL, 0);
    assert_string_equal(o.v[0], want);
}

static void test_options_lineinfo(void **state) {
    (void)state;
    jit_opts o;
    setenv("QFUSE_LINEINFO", "1", 1);
    options_for(&o, 90, NULL, 0);
    unsetenv("QFUSE_LINEINFO");
    assert_true(find_option(o.v, o.n, "-lineinfo") >= 0);
    options_for(&o, 90, NULL, 0);
    assert_int_equal(find_option(o.v, o.n, "-lineinfo"), -1);
}

static void test_nvrtc_version(void **state) {
    (void)state;
    int major = -1, minor = -1, m2 = -1, n2 = -1;
    qf_jit_nvrtc_version(&major, &minor);
    assert_int_equal(nvrtcVersion(&m2, &n2), NVRTC_SUCCESS);
    assert_int_equal(major, m2);
    assert_int_equal(minor, n2);
    assert_true(major >= 12);
}

/* =====================================================================} */

/* {===================================================================== compile */

/* kernel_src compiles for the arch of the state (QF_TEST_PARAM) into a CUDA ELF object. */
static void test_compile_arch(void **state) {
    void *cubin = NULL;
    size_t size = 0;
    assert_int_equal(compile_for(qf_test_param(state), kernel_src, 0, NULL, NULL, &cubin, &size),
                     QF_OK);
    assert_cubin(cubin, size);
    free(cubin);
}

/* The message carries NVRTC's log (naming the bad identifier), the options and the versions. */
static void test_compile_syntax_error(void **state) {
    (void)state;
    static const char bad[] =
        "extern \"C\" __global__ void k(float *p){ p[0] = qf_no_such_identifier; }\n";
    void *cubin = (void *)1;
    size_t size = 1;
    assert_int_equal(compile_for(90, bad, 0, NULL, NULL, &cubin, &size), QF_ERR_NVRTC);
    assert_null(cubin);
    assert_int_equal(size, 0);
    const char *msg = qf_last_error();
    assert_non_null(strstr(msg, "qf_no_such_identifier"));
    assert_non_null(strstr(msg, "k.cu"));
    assert_non_null(strstr(msg, "--gpu-architecture=sm_90"));
    assert_non_null(strstr(msg, "--fmad=false"));
    int major = 0, minor = 0;
    char ver[32];
    qf_jit_nvrtc_version(&major, &minor);
    snprintf(ver, sizeof ver, "NVRTC %d.%d", major, minor);
    assert_non_null(strstr(msg, ver));
}

static void test_compile_bad_option(void **state) {
    (void)state;
    const char *opts[] = {"--gpu-architecture=sm_90", "--qf-no-such-option"};
    void *cubin = NULL;
    size_t size = 0;
    assert_int_equal(qf_jit_compile("k.cu", kernel_src, NULL, NULL, 0, opts, 2, &cubin, &size),
                     QF_ERR_NVRTC);
    assert_null(cubin);
    assert_non_null(strstr(qf_last_error(), "--qf-no-such-option"));
}

/* An in-memory header is found by #include; without it the compile fails naming the header. */
static void test_compile_in_memory_header(void **state) {
    (void)state;
    static const char src[] = "#include \"qf_probe.h\"\n"
                              "extern \"C\" __global__ void k(float *p){ p[0] = QF_PROBE; }\n";
    const char *names[] = {"qf_probe.h"}, *texts[] = {"#define QF_PROBE 3.0f\n"};
    void *cubin = NULL;
    size_t size = 0;
    assert_int_equal(compile_for(90, src, 1, names, texts, &cubin, &size), QF_OK);
    assert_cubin(cubin, size);
    free(cubin);
    assert_int_equal(compile_for(90, src, 0, NULL, NULL, &cubin, &size), QF_ERR_NVRTC);
    assert_non_null(strstr(qf_last_error(), "qf_probe.h"));
}

/* A log longer than the message can hold is cut there, and printed whole to stderr. */
static void test_compile_long_log(void **state) {
    (void)state;
    size_t cap = 64 * 1024, len = 0;
    char *src = malloc(cap);
    assert_non_null(src);
    len += (size_t)snprintf(src + len, cap - len, "extern \"C\" __global__ void k(float *p){\n");
    for (int i = 0; i < 90; i++)
        len += (size_t)snprintf(src + len, cap - len, "  p[%d] = qf_undefined_%03d;\n", i, i);
    snprintf(src + len, cap - len, "}\n");
    void *cubin = NULL;
    size_t size = 0;
    char *err;
    assert_int_equal(compile_captured(src, &cubin, &size, &err), QF_ERR_NVRTC);
    assert_non_null(strstr(qf_last_error(), "qf_undefined_000"));
    assert_non_null(strstr(qf_last_error(), "[log truncated; full log on stderr]"));
    assert_non_null(strstr(err, "qf_undefined_000"));
    assert_non_null(strstr(err, "qf_undefined_089"));
    free(err);
    free(src);
}

static void test_compile_invalid_args(void **state) {
    (void)state;
    void *cubin = NULL;
    size_t size = 0;
    assert_int_equal(qf_jit_compile("k.cu", NULL, NULL, NULL, 0, NULL, 0, &cubin, &size),
                     QF_ERR_INVALID_ARG);
    assert_int_equal(qf_jit_compile("k.cu", kernel_src, NULL, NULL, 1, NULL, 0, &cubin, &size),
                     QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "qf_jit_compile"));
}

/* =====================================================================} */

/* {===================================================================== environment knobs */

static void test_compile_dump_source(void **state) {
    (void)state;
    void *cubin = NULL;
    size_t size = 0;
    char *err;
    setenv("QFUSE_DUMP_SOURCE", "1", 1);
    qf_status s = compile_captured(kernel_src, &cubin, &size, &err);
    unsetenv("QFUSE_DUMP_SOURCE");
    assert_int_equal(s, QF_OK);
    assert_non_null(strstr(err, kernel_src));
    free(err);
    free(cubin);
}

/* QFUSE_VERBOSE=1 shows the options and NVRTC's log (here a warning) even when it succeeds. */
static void test_compile_verbose_log(void **state) {
    (void)state;
    static const char src[] =
        "extern \"C\" __global__ void k(float *p){ int qf_unused_var; p[0] = 1.0f; }\n";
    void *cubin = NULL;
    size_t size = 0;
    char *quiet_err, *err;
    qf_status quiet = compile_captured(src, &cubin, &size, &quiet_err);
    free(cubin);
    setenv("QFUSE_VERBOSE", "1", 1);
    qf_status s = compile_captured(src, &cubin, &size, &err);
    unsetenv("QFUSE_VERBOSE");
    assert_int_equal(quiet, QF_OK);
    assert_int_equal(s, QF_OK);
    assert_string_equal(quiet_err, "");
    assert_non_null(strstr(err, "--gpu-architecture=sm_90"));
    assert_non_null(strstr(err, "qf_unused_var"));
    free(quiet_err);
    free(err);
    free(cubin);
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_options_default, setup),
        cmocka_unit_test(test_arch_parse),
        cmocka_unit_test_setup(test_options_extras_appended, setup),
        cmocka_unit_test_setup(test_options_too_many, setup),
        cmocka_unit_test_setup(test_options_clamp_to_nvrtc_max, setup),
        cmocka_unit_test_setup(test_options_lineinfo, setup),
        cmocka_unit_test_setup(test_nvrtc_version, setup),
        QF_TEST_PARAM(test_compile_sm90, test_compile_arch, setup, 90),
        QF_TEST_PARAM(test_compile_sm100, test_compile_arch, setup, 100),
        cmocka_unit_test_setup(test_compile_syntax_error, setup),
        cmocka_unit_test_setup(test_compile_bad_option, setup),
        cmocka_unit_test_setup(test_compile_in_memory_header, setup),
        cmocka_unit_test_setup(test_compile_long_log, setup),
        cmocka_unit_test_setup(test_compile_invalid_args, setup),
        cmocka_unit_test_setup(test_compile_dump_source, setup),
        cmocka_unit_test_setup(test_compile_verbose_log, setup),
    };
    return cmocka_run_group_tests_name("jit_compile", tests, NULL, NULL);
}
