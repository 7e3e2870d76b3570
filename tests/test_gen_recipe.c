/* test_gen_recipe.c: qfuse-gen's recipe loader (gen_recipe.c): validation errors naming the file,
 * field and what was expected, the sandbox (empty environment, memory cap, instruction budget,
 * text-only chunks), and the values and options string of each family's recipes. */
#include "test_gen_util.h"

#include <time.h>

#include <float.h>
#include <math.h>

/* ========================================================================= helpers */

/* Writes text as name in the test's dir and returns its path (qf_test_dir_write's buffer). */
static const char *qf_test_recipe_file(void **state, const char *name, const char *text) {
    const qf_test_dir *d = *state;
    return qf_test_dir_write(d->path, name, text);
}

/* Writes text as name in the test's dir and loads it; fails the test with the loader's message. */
static void qf_test_load_text(void **state, const char *name, const char *text, qf_recipe *r) {
    qf_test_load_ok(qf_test_recipe_file(state, name, text), r);
}

/* Asserts that the options string of r is want. */
static void qf_test_options(const qf_recipe *r, const char *want) {
    char opts[256];
    qf_gen_recipe_options(r, opts, sizeof opts);
    assert_string_equal(opts, want);
}

/* Fills o with the option list of r, asserts that its keys are sorted, returns how many. */
static int qf_test_option_list_sorted(const qf_recipe *r, qf_gen_option o[QF_GEN_OPTIONS_MAX]) {
    int n = qf_gen_recipe_option_list(r, o);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(o[i - 1].key, o[i].key) < 0);
    return n;
}

/* ========================================================================= recipe errors */

typedef struct qf_error_case {
    const char *file; /* written into a temp dir */
    const char *text;
    const char *expect; /* message after "<path>: " (exact), or a substring when contains */
    int contains;
} qf_error_case;

#define FAM "family = \"fp8_delayed\", "
#define MX "family = \"mxfp8\", "
#define NV "family = \"nvfp4\", "
/* What an unknown-field error adds: the fields each family accepts. */
#define FAM_FIELDS                                                                                 \
    " (this family's fields: family, description, amax_compute, amax_history_len, format, margin)"
#define MX_FIELDS                                                                                  \
    " (this family's fields: family, description, grad_format, input_format, scale_rounding, "   \
    "weight_2d, weight_format)"
#define NV_FIELDS                                                                                  \
    " (this family's fields: family, description, rht_grad, rht_input, rht_seed, "               \
    "stochastic_rounding_grad, weight_2d)"
static const qf_error_case qf_error_cases[] = {
    {"x.lua", "return {" FAM "margin = \"2\"}", "field 'margin' (integer expected, got string)", 0},
    {"x.lua", "return {" FAM "format = \"e5m3\"}",
     "field 'format' (one of 'hybrid', 'e4m3' expected, got 'e5m3')", 0},
    {"x.lua", "return {" FAM "marg = 1}", "unknown field 'marg'" FAM_FIELDS, 0},
    {"x.lua", "return {" FAM "zeta = 1, beta = 2}", "unknown field 'beta'" FAM_FIELDS, 0},
    {"x.lua", "return {" FAM "margin = 99}", "field 'margin' (value 99 out of range 0..32)", 0},
    {"x.lua", "return {" FAM "margin = -1}", "field 'margin' (value -1 out of range 0..32)", 0},
    {"x.lua", "return {" FAM "margin = 1.5}",
     "field 'margin' (1.5: an integer in 0..32 expected)", 0},
    {"x.lua", "return {" FAM "amax_history_len = 0}",
     "field 'amax_history_len' (value 0 out of range 1..8192)", 0},
    {"x.lua", "return {" FAM "amax_history_len = 8193}",
     "field 'amax_history_len' (value 8193 out of range 1..8192)", 0},
    {"x.lua", "return {" FAM "amax_history_len = {}}",
     "field 'amax_history_len' (integer expected, got table)", 0},
    {"x.lua", "return {" FAM "amax_compute = \"mean\"}",
     "field 'amax_compute' (one of 'max', 'most_recent' expected, got 'mean')", 0},
    {"x.lua", "return {" FAM "amax_compute = true}",
     "field 'amax_compute' (one of 'max', 'most_recent' expected, got boolean)", 0},
    {"x.lua", "return {" FAM "description = 5}",
     "field 'description' (string expected, got number)", 0},
    {"x.lua", "return {margin = 1}",
     "field 'family' is missing (one of 'fp8_delayed', 'fp8_current', 'mxfp8', 'nvfp4', "
     "'fp8_block' expected)",
     0},
    {"x.lua", "return {family = \"fp9\"}",
     "field 'family' (one of 'fp8_delayed', 'fp8_current', 'mxfp8', 'nvfp4', 'fp8_block' "
     "expected, got 'fp9')",
     0},
    {"x.lua", "return {family = \"fp8_current\", amax_epsilon = -1}",
     "field 'amax_epsilon' (value -1.0 out of range 0.0..3.4028234663853e+38)", 0},
    {"x.lua", "return {family = \"fp8_current\", amax_epsilon = 0/0}",
     "field 'amax_epsilon' (a number expected, got nan)", 0},
    {"x.lua", "return {family = \"fp8_current\", power_2_scales = 1}",
     "field 'power_2_scales' (boolean expected, got number)", 0},
    {"x.lua", "return {family = \"fp8_current\", margin = 0}",
     "unknown field 'margin' (this family's fields: family, description, amax_epsilon, format, "
     "power_2_scales)",
     0},
    /* fp8_block (numerics 2.5): TE's two scale options, E4M3 fixed (no format option) */
    {"x.lua", "return {family = \"fp8_block\", format = \"e4m3\"}",
     "unknown field 'format' (this family's fields: family, description, amax_epsilon, "
     "power_2_scales)",
     0},
    {"x.lua", "return {family = \"fp8_block\", power_2_scales = \"false\"}",
     "field 'power_2_scales' (boolean expected, got string)", 0},
    {"x.lua", "return {family = \"fp8_block\", amax_epsilon = -1e-12}",
     "field 'amax_epsilon' (value -1e-12 out of range 0.0..3.4028234663853e+38)", 0},
    {"x.lua", "return {family = \"fp8_block\", amax_epsilon = 1/0}",
     "field 'amax_epsilon' (value inf out of range 0.0..3.4028234663853e+38)", 0},
    /* an fp32 field: checked after the rounding to fp32 */
    {"x.lua", "return {family = \"fp8_block\", amax_epsilon = 3.4028236e38}",
     "field 'amax_epsilon' (value 3.4028236e+38 out of range 0.0..3.4028234663853e+38)", 0},
    {"x.lua", "return {family = \"fp8_block\", amax_epsilon = 1e-46}",
     "field 'amax_epsilon' (value 1e-46 is 0 in fp32: at most 2^-150, half its smallest "
     "subnormal; write 0 if 0 is meant)",
     0},
    {"x.lua", "return {family = \"fp8_block\", amax_epsilon = -1e-46}",
     "field 'amax_epsilon' (value -1e-46 out of range 0.0..3.4028234663853e+38)", 0},
    {"x.lua", "return {family = \"fp8_block\", weight_2d = false}",
     "unknown field 'weight_2d' (this family's fields: family, description, amax_epsilon, "
     "power_2_scales)",
     0},
    {"x.lua", "return {" FAM "\"extra\"}", "unknown field [number] (fields are named: key = value)",
     0},
    {"x.lua", "return 42", "recipe must return a table (got number)", 0},
    {"x.lua", "local t = {}", "recipe must return a table (got nil)", 0},
    {"x.lua", "return {", "1: unexpected symbol near <eof>", 1},
    /* an unquoted string or a misspelt boolean is an undefined name, not the field's default */
    {"x.lua", "return {family = \"mxfp8\", grad_format = e5m2}",
     ".lua:1: undefined name 'e5m2' (a recipe sees no globals; a string value needs quotes: "
     "\"e5m2\")",
     1},
    {"x.lua", "return {family = \"mxfp8\",\n weight_2d = True}", ".lua:2: undefined name 'True'",
     1},
    {"x.lua", "os.exit(3) return {}", "undefined name 'os'", 1},
    {"x.lua", "return require('x')", "undefined name 'require'", 1},
    {"x.lua", "return load('return {}')()", "undefined name 'load'", 1},
    {"x.lua", "return dofile('recipes/fp8_delayed.lua')",
     "undefined name 'dofile'", 1},
    {"x.lua", "return io.open('/etc/passwd')", "undefined name 'io'", 1},
    {"x.lua", "return {family = (\"x\"):rep(3)}", "attempt to index a string value", 1},
    {"x.lua", "while true do end", "instruction budget of 10000000 exceeded", 1},
    {"x.lua", "local s = 'x' for i = 1, 40 do s = s .. s end return {}",
     "memory limit of 33554432 bytes (32 MiB) exceeded", 0},
    {"Bad-Name.lua", "return {" FAM "}", "recipe name 'Bad-Name' must match [a-z0-9_]+", 0},
    {"x.txt", "return {" FAM "}", "recipe file name must end in .lua", 0},
    {".lua", "return {" FAM "}",
     "recipe file name has nothing before .lua (the name is the file name without .lua)", 0},
    /* mxfp8 (numerics 2.3) */
    {"x.lua", "return {" MX "input_format = \"e5m2\"}",
     "field 'input_format' (one of 'e4m3' expected, got 'e5m2')", 0},
    {"x.lua", "return {" MX "input_format = 8}",
     "field 'input_format' (one of 'e4m3' expected, got number)", 0},
    {"x.lua", "return {" MX "weight_format = \"e5m2\"}",
     "field 'weight_format' (one of 'e4m3' expected, got 'e5m2')", 0},
    {"x.lua", "return {" MX "weight_format = {}}",
     "field 'weight_format' (one of 'e4m3' expected, got table)", 0},
    {"x.lua", "return {" MX "grad_format = \"e2m1\"}",
     "field 'grad_format' (one of 'e4m3', 'e5m2' expected, got 'e2m1')", 0},
    {"x.lua", "return {" MX "grad_format = true}",
     "field 'grad_format' (one of 'e4m3', 'e5m2' expected, got boolean)", 0},
    {"x.lua", "return {" MX "scale_rounding = \"nearest\"}",
     "field 'scale_rounding' (one of 'ceil', 'floor' expected, got 'nearest')", 0},
    {"x.lua", "return {" MX "scale_rounding = 1}",
     "field 'scale_rounding' (one of 'ceil', 'floor' expected, got number)", 0},
    {"x.lua", "return {" MX "weight_2d = \"true\"}",
     "field 'weight_2d' (boolean expected, got string)", 0},
    {"x.lua", "return {" MX "weight_2d = 1}", "field 'weight_2d' (boolean expected, got number)",
     0},
    {"x.lua", "return {" MX "description = {}}", "field 'description' (string expected, got table)",
     0},
    {"x.lua", "return {" MX "block = 32}", "unknown field 'block'" MX_FIELDS, 0},
    {"x.lua", "return {" MX "margin = 0, format = \"e4m3\"}", "unknown field 'format'" MX_FIELDS,
     0},
    {"x.lua", "return {" FAM "weight_2d = true}", "unknown field 'weight_2d'" FAM_FIELDS, 0},
    /* nvfp4 (numerics 2.4) */
    {"x.lua", "return {" NV "rht_input = 1}", "field 'rht_input' (boolean expected, got number)",
     0},
    {"x.lua", "return {" NV "rht_grad = \"false\"}",
     "field 'rht_grad' (boolean expected, got string)", 0},
    {"x.lua", "return {" NV "stochastic_rounding_grad = 0}",
     "field 'stochastic_rounding_grad' (boolean expected, got number)", 0},
    {"x.lua", "return {" NV "weight_2d = \"yes\"}",
     "field 'weight_2d' (boolean expected, got string)", 0},
    {"x.lua", "return {" NV "rht_seed = -1}",
     "field 'rht_seed' (value -1 out of range 0..9223372036854775807; if written in hex: a "
     "literal above 0x7FFFFFFFFFFFFFFF wraps to a negative integer, 0xFFFFFFFFFFFFFFFF reads as -1)",
     0},
    {"x.lua", "return {" NV "rht_seed = 0xFFFFFFFFFFFFFFFE}",
     "field 'rht_seed' (value -2 out of range 0..9223372036854775807; if written in hex: a "
     "literal above 0x7FFFFFFFFFFFFFFF wraps to a negative integer, 0xFFFFFFFFFFFFFFFE reads as -2)",
     0},
    {"x.lua", "return {" NV "rht_seed = 1.5}",
     "field 'rht_seed' (1.5: an integer in 0..9223372036854775807 expected)", 0},
    {"x.lua", "return {" NV "rht_seed = \"7\"}", "field 'rht_seed' (integer expected, got string)",
     0},
    {"x.lua", "return {" NV "rht_seed = 7, rht_input = false, rht_grad = false}",
     "field 'rht_seed' (no effect: rht_input and rht_grad are both false)", 0},
    {"x.lua", "return {" NV "description = 1}", "field 'description' (string expected, got number)",
     0},
    {"x.lua", "return {" NV "block = 16}", "unknown field 'block'" NV_FIELDS, 0},
    {"x.lua", "return {" NV "grad_format = \"e2m1\"}", "unknown field 'grad_format'" NV_FIELDS, 0},
    {"x.lua", "return {" NV "stochastic_rounding = true}",
     "unknown field 'stochastic_rounding'" NV_FIELDS, 0},
    {"x.lua", "return {" FAM "rht_input = true}", "unknown field 'rht_input'" FAM_FIELDS, 0},
    {"x.lua", "return {" MX "rht_seed = 1}", "unknown field 'rht_seed'" MX_FIELDS, 0},
};

static void test_recipe_error(void **state) {
    const qf_error_case *c = *state;
    qf_test_dir d;
    qf_test_dir_make_gen(&d);
    qf_test_refused(qf_test_dir_write(d.path, c->file, c->text), NULL, c->expect, c->contains);
    qf_test_dir_remove(d.path);
}

/* ========================================================================= sandbox */

/* A recipe's _ENV holds only what it assigns: io, os, require, load, string... are undefined
 * names. */
static void test_recipe_empty_env(void **state) {
    qf_recipe r;
    /* a name the recipe assigns reads back; io, never assigned, is refused */
    qf_test_load_text(state, "env.lua", "m = 7\nreturn {family = 'fp8_delayed', margin = m}\n", &r);
    assert_int_equal(r.margin, 7);
    qf_test_refused(qf_test_recipe_file(state, "env2.lua",
                                        "m = 7\nreturn {family = 'fp8_delayed', margin = io}\n"),
                    NULL, ".lua:2: undefined name 'io'", 1);
}

/* A huge table hits a smaller heap cap with the memory message, not the instruction budget. */
static void test_recipe_memory_table(void **state) {
    qf_gen_limits lim = {.mem_bytes = 1u << 20};
    const char *text = "local t = {} for i = 1, 1e8 do t[i] = i end return {}";
    qf_test_refused(qf_test_recipe_file(state, "big.lua", text), &lim,
                    "memory limit of 1048576 bytes (1 MiB) exceeded", 0);
}

/* A smaller instruction budget applies and is named. */
static void test_recipe_budget_custom(void **state) {
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    qf_gen_limits lim = {.instructions = 5000};
    const char *text = "local n = 0 for i = 1, 100000 do n = n + i end return {}";
    const char *path = qf_test_recipe_file(state, "loop.lua", text);
    assert_int_equal(qf_gen_recipe_load(path, &lim, &r, &e), -1);
    assert_non_null(strstr(e.msg, "instruction budget of 5000 exceeded"));
    assert_null(strstr(e.msg, "stack traceback:")); /* one line; the traceback under QFUSE_VERBOSE */
    setenv("QFUSE_VERBOSE", "1", 1);
    assert_int_equal(qf_gen_recipe_load(path, &lim, &r, &e), -1);
    unsetenv("QFUSE_VERBOSE");
    assert_non_null(strstr(e.msg, "stack traceback:"));
}

/* One VM instruction can copy or compare megabytes: a loop of them is stopped by the wall-clock
 * budget, long before its instruction budget (4 MiB concatenations: minutes without it). */
static void test_recipe_budget_time(void **state) {
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    qf_gen_limits lim = {.seconds = 0.3};
    const char *text = "local s = 'x' for i = 1, 22 do s = s .. s end\n"
                       "while true do local a = s .. 'y' end";
    const char *path = qf_test_recipe_file(state, "slow.lua", text);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(qf_gen_recipe_load(path, &lim, &r, &e), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_non_null(strstr(e.msg, "ran longer than 0.3 s"));
    assert_true(secs < 5.0); /* stopped at the budget (the hook runs every 1000 instructions) */
}

/* A precompiled (binary) chunk is refused: recipes are text. */
static void test_recipe_binary_chunk(void **state) {
    const qf_test_dir *d = *state;
    qf_gen_buf b;
    char path[512];
    qf_gen_buf_init(&b);
    qf_test_binary_chunk(&b);
    assert_false(b.failed);
    qf_test_write(d->path, "bin.lua", b.p, b.len, path);
    qf_gen_buf_free(&b);
    qf_test_refused(path, NULL, "attempt to load a binary chunk (mode is 't')", 0);
}

static void test_recipe_missing_file(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_err e;
    assert_int_equal(qf_gen_recipe_load("/nonexistent/nope.lua", NULL, &r, &e), -1);
    assert_non_null(strstr(e.msg, "cannot open /nonexistent/nope.lua"));
}

/* ========================================================================= recipe values */

static void test_recipe_defaults(void **state) {
    (void)state;
    qf_recipe r;
    qf_test_load_ok("recipes/fp8_delayed.lua", &r);
    assert_string_equal(r.name, "fp8_delayed");
    assert_string_equal(r.file, "recipes/fp8_delayed.lua");
    assert_int_equal(r.family, QF_FAMILY_FP8_DELAYED);
    assert_int_equal(r.format, QF_FP8_FORMAT_HYBRID);
    assert_int_equal(r.margin, 0);
    assert_int_equal(r.amax_history_len, 1024);
    assert_int_equal(r.amax_compute, QF_AMAX_COMPUTE_MAX);
    assert_int_equal(r.fmt[QF_ROLE_INPUT], QF_DTYPE_E4M3);
    assert_int_equal(r.fmt[QF_ROLE_WEIGHT], QF_DTYPE_E4M3);
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    qf_test_options(
        &r, "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;margin=0");
}

/* Every option set, a float with an integer value accepted, and the sorted options string. */
static void test_recipe_all_options(void **state) {
    qf_recipe r;
    const char *text = "return {family = 'fp8_delayed', format = 'e4m3', margin = 3.0,\n"
                       "  amax_history_len = 16, amax_compute = 'most_recent',\n"
                       "  description = 'all E4M3'}";
    qf_test_load_text(state, "all_e4m3.lua", text, &r);
    assert_string_equal(r.name, "all_e4m3");
    assert_string_equal(r.description, "all E4M3");
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E4M3);
    qf_test_options(&r, "amax_compute=most_recent;amax_history_len=16;family=fp8_delayed;"
                        "format=e4m3;margin=3");
}

/* ========================================================================= mxfp8 recipes */

/* The shipped recipes: TE's MXFP8BlockScaling defaults, and the same with 32x32 weight blocks. */
static void test_recipe_mxfp8_shipped(void **state) {
    (void)state;
    qf_recipe r;
    qf_test_load_ok("recipes/mxfp8.lua", &r);
    assert_string_equal(r.name, "mxfp8");
    assert_int_equal(r.family, QF_FAMILY_MXFP8);
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(r.fmt[i], QF_DTYPE_E4M3);
    assert_int_equal(r.scale_rounding, QF_SCALE_ROUNDING_CEIL);
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 0);
    qf_test_options(&r, QF_MX_OPTIONS_1D);
    qf_test_load_ok("recipes/mxfp8_2d.lua", &r);
    assert_string_equal(r.name, "mxfp8_2d");
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 1);
    qf_test_options(&r, QF_MX_OPTIONS_2D);
}

/* fp8_current's defaults are TE's (numerics 2.2) and shipped as recipes/fp8_current.lua; an
 * amax_epsilon of -0.0 is 0 (one options string, one key); a given epsilon and power_2_scales
 * reach the recipe and the options string. */
static void test_recipe_fp8_current(void **state) {
    qf_recipe r, shipped;
    qf_test_load_ok("recipes/fp8_current.lua", &shipped);
    assert_string_equal(shipped.options,
                        "amax_epsilon=0;family=fp8_current;format=hybrid;power_2_scales=false");
    assert_int_equal(shipped.fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    qf_test_load_text(state, "z.lua", "return {family = 'fp8_current', amax_epsilon = -0.0}", &r);
    assert_string_equal(r.options, shipped.options);
    assert_false(signbit(r.amax_epsilon));
    qf_test_load_text(state, "p.lua",
                      "return {family = 'fp8_current', format = 'e4m3', amax_epsilon = 1e-12, "
                      "power_2_scales = true}",
                      &r);
    assert_true(r.amax_epsilon == 1e-12f && r.power_2_scales);
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E4M3);
    assert_string_equal(r.options, "amax_epsilon=9.99999996e-13;family=fp8_current;format=e4m3;"
                                   "power_2_scales=true");
    /* 3.4028235e38, the usual spelling of FLT_MAX, rounds to it; so does 1e-45 to the smallest
     * subnormal */
    qf_test_load_text(state, "m.lua",
                      "return {family = 'fp8_current', amax_epsilon = 3.4028235e38}", &r);
    assert_true(r.amax_epsilon == FLT_MAX);
    qf_test_load_text(state, "s.lua", "return {family = 'fp8_current', amax_epsilon = 1e-45}", &r);
    assert_true(r.amax_epsilon == 0x1p-149f);
}

/* A bare {family = "mxfp8"} has every default: the options string still names all options. */
static void test_recipe_mxfp8_defaults(void **state) {
    qf_recipe r;
    qf_test_load_text(state, "bare.lua", "return {family = 'mxfp8'}", &r);
    qf_test_options(&r, QF_MX_OPTIONS_1D);
    assert_string_equal(r.description, "");
}

/* Every option away from its default, and the option list sorted, weight_2d a boolean. */
static void test_recipe_mxfp8_all_options(void **state) {
    qf_recipe r;
    qf_gen_option o[QF_GEN_OPTIONS_MAX];
    const char *text = "return {family = 'mxfp8', input_format = 'e4m3', weight_format = 'e4m3',\n"
                       "  grad_format = 'e5m2', scale_rounding = 'floor', weight_2d = true,\n"
                       "  description = 'OCP rounding'}";
    qf_test_load_text(state, "mx_ocp.lua", text, &r);
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    assert_int_equal(r.scale_rounding, QF_SCALE_ROUNDING_FLOOR);
    assert_string_equal(r.description, "OCP rounding");
    qf_test_options(&r, "family=mxfp8;grad_format=e5m2;input_format=e4m3;"
                        "scale_rounding=floor;weight_2d=true;weight_format=e4m3");
    assert_int_equal(qf_test_option_list_sorted(&r, o), 6);
    assert_string_equal(o[4].key, "weight_2d");
    assert_true(o[4].is_boolean && !o[4].is_integer);
    /* weight_2d = false is a boolean too */
    qf_test_load_text(state, "mx_1d.lua", "return {family = 'mxfp8', weight_2d = false}", &r);
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 0);
}

/* ========================================================================= nvfp4 recipes */

/* The shipped recipes: TE's NVFP4BlockScaling defaults, and the same without RHT. */
static void test_recipe_nvfp4_data(void **state) {
    (void)state;
    qf_recipe r;
    qf_test_load_ok(QF_NV_RECIPE, &r);
    assert_string_equal(r.name, "nvfp4");
    assert_string_equal(r.file, "recipes/nvfp4.lua");
    assert_int_equal(r.family, QF_FAMILY_NVFP4);
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(r.fmt[i], QF_DTYPE_E2M1);
    assert_true(r.rht[QF_ROLE_INPUT] && r.rht[QF_ROLE_GRAD] && !r.rht[QF_ROLE_WEIGHT]);
    assert_true(r.sr[QF_ROLE_GRAD] && r.block_2d[QF_ROLE_WEIGHT] && r.rht_seed < 0);
    qf_test_options(&r, QF_NV_OPTIONS);
    qf_test_load_ok(QF_NV_NORT_RECIPE, &r);
    assert_true(!r.rht[QF_ROLE_INPUT] && !r.rht[QF_ROLE_GRAD] && !r.rht[QF_ROLE_WEIGHT]);
    qf_test_options(&r, QF_NV_OPTIONS_NORT);
}

/* A bare {family = "nvfp4"} has TE's defaults; every option away from its default, the list
 * sorted, booleans and a given rht_seed typed, an absent one the string "none". */
static void test_recipe_nvfp4_options(void **state) {
    qf_recipe r;
    qf_gen_option o[QF_GEN_OPTIONS_MAX];
    qf_test_load_text(state, "b.lua", "return {family = 'nvfp4'}", &r);
    qf_test_options(&r, QF_NV_OPTIONS);
    assert_int_equal(qf_gen_recipe_option_list(&r, o), 6);
    assert_true(!o[3].is_integer && !o[3].is_boolean); /* rht_seed=none */
    const char *text = "return {family = 'nvfp4', rht_input = true, rht_grad = false,\n"
                       "  stochastic_rounding_grad = false, weight_2d = false,\n"
                       "  rht_seed = 9223372036854775807, description = 'seeded'}";
    qf_test_load_text(state, "s.lua", text, &r);
    assert_true(r.rht[QF_ROLE_INPUT] && !r.rht[QF_ROLE_GRAD]);
    assert_true(r.rht_seed == 9223372036854775807ll);
    qf_test_options(&r, "family=nvfp4;rht_grad=false;rht_input=true;"
                        "rht_seed=9223372036854775807;stochastic_rounding_grad=false;"
                        "weight_2d=false");
    qf_test_option_list_sorted(&r, o);
    assert_true(o[3].is_integer && o[1].is_boolean && o[5].is_boolean);
}

/* fp8_block's defaults are TE's Float8BlockScaling (numerics 2.5): E4M3 for every role,
 * amax_epsilon 0 and power_2_scales on, where fp8_current's default is off (same member, two
 * defaults); the shipped file spells them out; given options reach the recipe and the options
 * string (so the fusion key: test_gen_plan.c). */
static void test_recipe_fp8_block(void **state) {
    qf_recipe r, shipped;
    qf_test_load_ok("recipes/fp8_block.lua", &shipped);
    assert_int_equal(shipped.family, QF_FAMILY_FP8_BLOCK);
    assert_string_equal(shipped.options, "amax_epsilon=0;family=fp8_block;power_2_scales=true");
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(shipped.fmt[i], QF_DTYPE_E4M3);
    qf_test_load_text(state, "d.lua", "return {family = 'fp8_block'}", &r);
    assert_true(r.power_2_scales == 1 && r.amax_epsilon == 0.0f);
    assert_string_equal(r.options, shipped.options);
    qf_test_load_text(state, "c.lua", "return {family = 'fp8_current'}", &r);
    assert_int_equal(r.power_2_scales, 0);
    qf_test_load_text(state, "o.lua",
                      "return {family = 'fp8_block', power_2_scales = false, amax_epsilon = 0.5}",
                      &r);
    assert_true(r.power_2_scales == 0 && r.amax_epsilon == 0.5f);
    assert_string_equal(r.options, "amax_epsilon=0.5;family=fp8_block;power_2_scales=false");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_recipe_empty_env),
        T(test_recipe_memory_table),
        T(test_recipe_budget_custom),
        T(test_recipe_budget_time),
        T(test_recipe_binary_chunk),
        cmocka_unit_test(test_recipe_missing_file),
        cmocka_unit_test(test_recipe_defaults),
        T(test_recipe_all_options),
        cmocka_unit_test(test_recipe_mxfp8_shipped),
        T(test_recipe_mxfp8_defaults),
        T(test_recipe_fp8_current),
        T(test_recipe_fp8_block),
        T(test_recipe_mxfp8_all_options),
        cmocka_unit_test(test_recipe_nvfp4_data),
        T(test_recipe_nvfp4_options),
    };
    return QF_TEST_RUN_CASES("gen_recipe", test_recipe_error, qf_error_cases, tests);
}
