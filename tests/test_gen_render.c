/* test_gen_render.c: qfuse-gen's template rendering (gen_render.c): placeholders as whole tokens,
 * unfilled and unused values, the entry points of a template, shared headers and C literals. */
#include "test_gen_util.h"

/* ========================================================================= rendering */

/* Renders tpl as t.cu with the n name/value pairs of kv; returns qf_gen_render's status, with
 * the prelude in b (initialized here; the caller frees it) and a failure's message in e. */
static int qf_test_render(const char *tpl, int n, const char *const *kv, qf_gen_buf *b,
                          qf_gen_err *e) {
    qf_gen_values v;
    memset(&v, 0, sizeof v);
    for (int i = 0; i < n; i++) {
        snprintf(v.name[i], sizeof v.name[i], "%s", kv[2 * i]);
        snprintf(v.value[i], sizeof v.value[i], "%s", kv[2 * i + 1]);
    }
    v.n = n;
    qf_gen_buf_init(b);
    return qf_gen_render("t.cu", tpl, &v, b, e);
}

/* Asserts that rendering tpl with the n pairs of kv fails with the message msg. */
static void qf_test_render_refused(const char *tpl, int n, const char *const *kv, const char *msg) {
    qf_gen_buf b;
    qf_gen_err e;
    assert_int_equal(qf_test_render(tpl, n, kv, &b, &e), -1);
    assert_string_equal(e.msg, msg);
    qf_gen_buf_free(&b);
}

/* Placeholders are whole tokens; CUDA's own __x__ names and macros are none (x__TILE_M__ alone
 * would leave __TILE_M__ unused). */
static void test_render_ok(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k", "__TILE_M__", "32"};
    qf_gen_buf b;
    qf_gen_err e;
    const char *tpl = "extern \"C\" __global__ void __launch_bounds__(256) __KERNEL_NAME__() {\n"
                      "#if defined(__CUDACC_RTC__) && __CUDA_ARCH__ >= 900 && __NVCC_X__\n"
                      "  __shared__ int s[__TILE_M__]; __syncthreads(); x__TILE_M__ = __LINE__;\n"
                      "#endif\n}\n";
    assert_int_equal(qf_test_render(tpl, 2, kv, &b, &e), 0);
    /* the prelude: one #define per value, in order; the template itself goes to NVRTC as is */
    assert_string_equal(b.p, "#define __KERNEL_NAME__ qf_k\n#define __TILE_M__ 32\n");
    qf_gen_buf_free(&b);
}

static void test_render_unfilled(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k"};
    qf_test_render_refused("void __KERNEL_NAME__()\n{ int a = __TILE_Q__; }", 1, kv,
                           "t.cu:2: placeholder '__TILE_Q__' has no value");
}

static void test_render_unused(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k", "__MARGIN__", "0.0f"};
    qf_test_render_refused("void __KERNEL_NAME__() {}\n", 2, kv,
                           "t.cu: value for placeholder '__MARGIN__' is never used");
}

static void test_placeholder_rule(void **state) {
    (void)state;
    assert_true(qf_gen_is_placeholder("__NORM__"));
    assert_true(qf_gen_is_placeholder("__IN_DTYPE2__"));
    assert_false(qf_gen_is_placeholder("__global__"));
    assert_false(qf_gen_is_placeholder("__CUDACC_RTC__"));
    assert_false(qf_gen_is_placeholder("__CUDA_ARCH__"));
    assert_false(qf_gen_is_placeholder("__NVCC__"));
    assert_false(qf_gen_is_placeholder("__FILE__"));
    assert_false(qf_gen_is_placeholder("__syncthreads"));
    assert_false(qf_gen_is_placeholder("____"));
}

/* The entry points come from the template: the __KERNEL_NAME__( definition and the entry macros
 * invoked at a line start; a macro's own #define and a mention in a comment do not count. */
static void test_template_entries(void **state) {
    (void)state;
    unsigned entries = 0;
    qf_gen_err e;
    const char *tpl = "#define QF_AMAX_ENTRY(name) void name()\n"
                      "extern \"C\" __global__ void __KERNEL_NAME__(int p) {}\n"
                      "QF_ROWS_ENTRIES(__KERNEL_NAME__, P, (256, 6), (256, 4), (256, 3), (256))\n"
                      "/* QF_AMAX_ENTRY(x) */\n"
                      "QF_COLS_ENTRY(__KERNEL_NAME__, 256, P)\n";
    assert_int_equal(qf_gen_template_entries("t.cu", tpl, &entries, &e), 0);
    assert_int_equal(entries, QF_ENTRY_BIT(QF_ENTRY_MAIN) | QF_ENTRY_BIT(QF_ENTRY_ROWS1) |
                                  QF_ENTRY_BIT(QF_ENTRY_ROWS2) | QF_ENTRY_BIT(QF_ENTRY_ROWS4) |
                                  QF_ENTRY_BIT(QF_ENTRY_ROWS8) | QF_ENTRY_BIT(QF_ENTRY_COLS));
    assert_int_equal(qf_gen_template_entries("t.cu", "QF_AMAX_ENTRY(__KERNEL_NAME__)\n",
                                             &entries, &e),
                     -1);
    assert_string_equal(e.msg, "t.cu: no main entry point (`__KERNEL_NAME__(`)");
    assert_string_equal(qf_kernel_entry_suffix(QF_ENTRY_MAIN), "");
    assert_string_equal(qf_kernel_entry_suffix(QF_ENTRY_ROWS8), "_rows8");
    assert_string_equal(qf_kernel_entry_suffix(QF_ENTRY_ALPHA), "_alpha");
    assert_string_equal(qf_kernel_entry_suffix(QF_ENTRY_DEQUANT), "_dequant");
    assert_int_equal(qf_gen_template_entries("t.cu", "void __KERNEL_NAME__(int p) {}\n"
                                             "QF_DEQUANT_ENTRY(__KERNEL_NAME__, false)\n",
                                             &entries, &e),
                     0);
    assert_int_equal(entries, QF_ENTRY_BIT(QF_ENTRY_MAIN) | QF_ENTRY_BIT(QF_ENTRY_DEQUANT));
    /* the `_cols` entry with a resident-blocks bound is the same entry point */
    assert_int_equal(qf_gen_template_entries("t.cu", "void __KERNEL_NAME__(int p) {}\n"
                                             "QF_COLS_ENTRY_MIN(__KERNEL_NAME__, 256, 4, P)\n",
                                             &entries, &e),
                     0);
    assert_int_equal(entries, QF_ENTRY_BIT(QF_ENTRY_MAIN) | QF_ENTRY_BIT(QF_ENTRY_COLS));
    assert_null(qf_kernel_entry_suffix(QF_ENTRY_COUNT));
}

/* A shared header is the same text for every variant: a placeholder there is an error naming the
 * header, the line and the token; compiler macros are fine. */
static void test_header_check(void **state) {
    (void)state;
    qf_gen_err e;
    assert_int_equal(qf_gen_header_check("h.cuh", "#if __CUDA_ARCH__ >= 900\n#endif\n", &e), 0);
    assert_int_equal(qf_gen_header_check("h.cuh", "int a;\nint b = __TILE_M__;\n", &e), -1);
    assert_string_equal(e.msg, "h.cuh:2: placeholder '__TILE_M__' in a shared header (headers take "
                               "template parameters; only templates have placeholders)");
}

/* A C literal of any bytes compiles back to the same bytes (checked via the registry below);
 * here: the escaping of the risky characters. */
static void test_c_literal(void **state) {
    (void)state;
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    const char s[] = "a\"b\\c?\?=d\te\x01\xe2\x80\x94"
                     "1\nnext";
    qf_gen_buf_add_c_literal(&b, s, sizeof s - 1, 2);
    assert_string_equal(b.p, "  \"a\\\"b\\\\c?\\?=d\\te\\001\\342\\200\\2241\\n\"\n  \"next\"");
    qf_gen_buf_free(&b);
}

/* A buffer taken with nothing added is an empty C string: a file read empty (a template, a
 * header) is then measured safely. The chunk freed first (filled with 'x') is the one malloc
 * hands back, so an unterminated allocation would show. */
static void test_buf_take_empty(void **state) {
    (void)state;
    char *junk = malloc(256);
    assert_non_null(junk);
    memset(junk, 'x', 256);
    free(junk);
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    char *p = qf_gen_buf_take(&b);
    assert_non_null(p);
    assert_int_equal(p[0], '\0');
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_take_empty),
        cmocka_unit_test(test_render_ok),
        cmocka_unit_test(test_render_unfilled),
        cmocka_unit_test(test_render_unused),
        cmocka_unit_test(test_placeholder_rule),
        cmocka_unit_test(test_template_entries),
        cmocka_unit_test(test_header_check),
        cmocka_unit_test(test_c_literal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
