/* test_jit_key.c: the fusion key is deterministic and changes with every field (numerics 5). */
#include "test_util.h"

#include <stdio.h>

#include "jit_key.h"

/* {===================================================================== fixture */

static const char *const base_header_names[] = {"qf_formats.h", "qf_prelude.h"};
static const char *const base_headers[] = {"#define QF_A 1\n", "#define QF_B 2\n"};
static const char *const base_options[] = {"--gpu-architecture=sm_90", "--std=c++17",
                                           "-default-device", "--fmad=false", "-DQF_K=4096"};
#define N_BASE_OPTIONS ((int)(sizeof base_options / sizeof base_options[0]))

/* A representative input; each test changes one field of a copy. */
static qf_key_input base_input(void) {
    qf_key_input in = {
        .name = "qf_norm_quantize_mxfp8_rms",
        .recipe_options = "fmt=mxfp8;block=32;round=up",
        .variant = "op=norm_quantize;role=x;norm=rms;zcg=0;in=bf16;out=e4m3",
        .source = "extern \"C\" __global__ void k(float *p) { p[0] = 1.0f; }\n",
        .header_names = base_header_names,
        .headers = base_headers,
        .n_headers = 2,
        .options = base_options,
        .n_options = N_BASE_OPTIONS,
        .arch = 90,
        .nvrtc_major = 13,
        .nvrtc_minor = 0,
    };
    return in;
}

/* Asserts that x and y have different keys. */
static void assert_keys_differ(const qf_key_input *x, const qf_key_input *y) {
    char a[QF_KEY_HEX_LEN + 1], b[QF_KEY_HEX_LEN + 1];
    qf_key_compute(x, a);
    qf_key_compute(y, b);
    assert_string_not_equal(a, b);
}

/* Asserts that `changed` (base_input with one field changed) has a different key than base. */
static void assert_key_changes(const qf_key_input *changed) {
    qf_key_input base = base_input();
    assert_keys_differ(&base, changed);
}

/* A test that `change`, one expression on the copy `in` of base_input, changes the key. */
#define KEY_FIELD_TEST(name, change)                                                               \
    static void name(void **state) {                                                               \
        (void)state;                                                                               \
        qf_key_input in = base_input();                                                            \
        change;                                                                                    \
        assert_key_changes(&in);                                                                   \
    }

/* =====================================================================} */

/* {===================================================================== determinism */

static void test_key_deterministic(void **state) {
    (void)state;
    qf_key_input in = base_input();
    char a[QF_KEY_HEX_LEN + 1], b[QF_KEY_HEX_LEN + 1];
    qf_key_compute(&in, a);
    qf_key_compute(&in, b);
    assert_string_equal(a, b);
    assert_int_equal(strlen(a), QF_KEY_HEX_LEN);
    assert_int_equal(strspn(a, "0123456789abcdef"), QF_KEY_HEX_LEN);
}

/* Same contents at different addresses: the key depends on the bytes, never on pointers. */
static void test_key_depends_on_contents_only(void **state) {
    (void)state;
    qf_key_input in = base_input();
    char name[64], src[128], hdr[32], opt[32];
    snprintf(name, sizeof name, "%s", in.name);
    snprintf(src, sizeof src, "%s", in.source);
    snprintf(hdr, sizeof hdr, "%s", base_headers[1]);
    snprintf(opt, sizeof opt, "%s", base_options[4]);
    const char *headers[] = {base_headers[0], hdr};
    const char *options[] = {base_options[0], base_options[1], base_options[2], base_options[3],
                             opt};
    qf_key_input copy = in;
    copy.name = name;
    copy.source = src;
    copy.headers = headers;
    copy.options = options;
    char a[QF_KEY_HEX_LEN + 1], b[QF_KEY_HEX_LEN + 1];
    qf_key_compute(&in, a);
    qf_key_compute(&copy, b);
    assert_string_equal(a, b);
}

/* NOTES: pins the encoding across processes, hosts and releases. If this fails the disk cache
 * of every user is invalidated: bump the domain tag in jit_key.c and update the value here.
 * The value was cross-checked against one-shot XXH3_128bits (libxxhash) over the encoding
 * described in jit_key.h, built by hand. */
#define QF_TEST_KEY_GOLDEN "95c77843bba5a3637fa78c0c0272697b"

static void test_key_golden(void **state) {
    (void)state;
    qf_key_input in = base_input();
    char a[QF_KEY_HEX_LEN + 1];
    qf_key_compute(&in, a);
    assert_string_equal(a, QF_TEST_KEY_GOLDEN);
}

/* =====================================================================} */

/* {===================================================================== one test per field */

KEY_FIELD_TEST(test_key_name, in.name = "qf_norm_quantize_mxfp8_ln")

KEY_FIELD_TEST(test_key_recipe_options, in.recipe_options = "fmt=mxfp8;block=32;round=even")

KEY_FIELD_TEST(test_key_variant,
               in.variant = "op=norm_quantize;role=x;norm=rms;zcg=1;in=bf16;out=e4m3")

/* One byte of the source differs (1.0f -> 2.0f). */
static void test_key_source_one_byte(void **state) {
    (void)state;
    qf_key_input in = base_input();
    char src[128];
    snprintf(src, sizeof src, "%s", in.source);
    char *one = strstr(src, "1.0f");
    assert_non_null(one);
    *one = '2';
    in.source = src;
    assert_key_changes(&in);
}

KEY_FIELD_TEST(test_key_header_name,
               (in.header_names = (const char *const[]){"qf_formats.h", "qf_prelude2.h"}))

KEY_FIELD_TEST(test_key_header_text,
               (in.headers = (const char *const[]){"#define QF_A 1\n", "#define QF_B 3\n"}))

/* Texts swapped between the two names: same bytes overall, different program. */
KEY_FIELD_TEST(test_key_header_pairing,
               (in.headers = (const char *const[]){base_headers[1], base_headers[0]}))

KEY_FIELD_TEST(test_key_header_count, in.n_headers = 1)

/* Each option string in turn, changed by one character. */
static void test_key_each_option(void **state) {
    (void)state;
    for (int i = 0; i < N_BASE_OPTIONS; i++) {
        const char *opts[N_BASE_OPTIONS];
        char changed[64];
        memcpy(opts, base_options, sizeof opts);
        snprintf(changed, sizeof changed, "%s ", base_options[i]);
        opts[i] = changed;
        qf_key_input in = base_input();
        in.options = opts;
        assert_key_changes(&in);
    }
}

KEY_FIELD_TEST(test_key_option_count, in.n_options = N_BASE_OPTIONS - 1)

KEY_FIELD_TEST(test_key_arch, in.arch = 100)

KEY_FIELD_TEST(test_key_nvrtc_major, in.nvrtc_major = 12)

KEY_FIELD_TEST(test_key_nvrtc_minor, in.nvrtc_minor = 1)

/* =====================================================================} */

/* {===================================================================== encoding */

/* "ab"+"c" and "a"+"bc" across two adjacent fields concatenate to the same bytes; the length
 * prefixes must keep them apart. */
static void test_key_length_prefix(void **state) {
    (void)state;
    qf_key_input x = base_input(), y = base_input();
    x.name = "ab";
    x.recipe_options = "c";
    y.name = "a";
    y.recipe_options = "bc";
    assert_keys_differ(&x, &y);
}

/* The same across the header-name/header-text boundary and the option list boundary. */
static void test_key_length_prefix_lists(void **state) {
    (void)state;
    const char *n1[] = {"h.hx"}, *t1[] = {"y"}, *n2[] = {"h.h"}, *t2[] = {"xy"};
    const char *o1[] = {"-DA", "B"}, *o2[] = {"-D", "AB"};
    qf_key_input x = base_input(), y = base_input();
    x.header_names = n1, x.headers = t1, x.n_headers = 1, x.options = o1, x.n_options = 2;
    y.header_names = n1, y.headers = t1, y.n_headers = 1, y.options = o2, y.n_options = 2;
    assert_keys_differ(&x, &y);
    y.header_names = n2, y.headers = t2, y.options = o1;
    assert_keys_differ(&x, &y);
}

/* A missing field (NULL) and an empty one are different inputs. */
/* A source split into source_prelude + source keys as the joined text (what NVRTC compiles);
 * the prelude's bytes count: dropping it, or moving a byte out of the joined text, changes it. */
static void test_key_source_prelude(void **state) {
    (void)state;
    qf_key_input joined = base_input(), split = base_input();
    char a[QF_KEY_HEX_LEN + 1], b[QF_KEY_HEX_LEN + 1], c[QF_KEY_HEX_LEN + 1];
    joined.source = "#define QF_X 1\nextern \"C\" __global__ void k() {}\n";
    split.source_prelude = "#define QF_X 1\n";
    split.source = "extern \"C\" __global__ void k() {}\n";
    qf_key_compute(&joined, a);
    qf_key_compute(&split, b);
    assert_string_equal(a, b);
    split.source_prelude = "#define QF_X 2\n";
    qf_key_compute(&split, c);
    assert_string_not_equal(a, c);
    split.source_prelude = NULL;
    qf_key_compute(&split, c);
    assert_string_not_equal(a, c);
}

static void test_key_null_vs_empty(void **state) {
    (void)state;
    qf_key_input x = base_input(), y = base_input();
    x.variant = NULL;
    y.variant = "";
    assert_keys_differ(&x, &y);
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_deterministic),
        cmocka_unit_test(test_key_depends_on_contents_only),
        cmocka_unit_test(test_key_golden),
        cmocka_unit_test(test_key_name),
        cmocka_unit_test(test_key_recipe_options),
        cmocka_unit_test(test_key_variant),
        cmocka_unit_test(test_key_source_one_byte),
        cmocka_unit_test(test_key_header_name),
        cmocka_unit_test(test_key_header_text),
        cmocka_unit_test(test_key_header_pairing),
        cmocka_unit_test(test_key_header_count),
        cmocka_unit_test(test_key_each_option),
        cmocka_unit_test(test_key_option_count),
        cmocka_unit_test(test_key_arch),
        cmocka_unit_test(test_key_nvrtc_major),
        cmocka_unit_test(test_key_nvrtc_minor),
        cmocka_unit_test(test_key_length_prefix),
        cmocka_unit_test(test_key_length_prefix_lists),
        cmocka_unit_test(test_key_source_prelude),
        cmocka_unit_test(test_key_null_vs_empty),
    };
    return cmocka_run_group_tests_name("jit_key", tests, NULL, NULL);
}
