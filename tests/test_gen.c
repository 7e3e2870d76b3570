/* test_gen.c: qfuse-gen: recipe sandbox and validation errors, variants, template rendering,
 * reproducible output, banners, the CLI, and agreement of out/ with the compiled registry. */
#include "test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <lua.h>

#include "gen_buf.h"
#include "gen_cli.h"
#include "gen_emit.h"
#include "gen_plan.h"
#include "gen_recipe.h"
#include "gen_render.h"
#include "gen_variant.h"
#include "kernel_key.h"
#include "ref_nvfp4.h"
#include "registry.h"

#define QF_BANNER_END " \xe2\x80\x94 do not edit */"

/* ========================================================================= helpers */

static void qf_test_dir_make_gen(qf_test_dir *d) {
    qf_test_dir_make(d, "gen");
}

static int qf_test_starts(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Reads a whole file (malloc'ed; caller frees) or returns NULL. */
static char *qf_test_read(const char *path, size_t *len) {
    char *text = NULL;
    size_t n = 0;
    if (qf_gen_read_file(path, "file", &text, &n, NULL) != 0)
        return NULL;
    if (len)
        *len = n;
    return text;
}

/* Loads recipe text written as dir/name.lua; returns the status, message in e. */
static int qf_test_load(const char *dir, const char *name, const char *text,
                        const qf_gen_limits *lim, qf_recipe *r, qf_gen_err *e, char *path_out,
                        size_t n) {
    const char *path = qf_test_dir_write(dir, name, text);
    if (path_out)
        snprintf(path_out, n, "%s", path);
    memset(e, 0, sizeof *e);
    return qf_gen_recipe_load(path, lim, r, e);
}

/* Runs the CLI with up to 15 arguments; captures stdout/stderr into out/err (malloc'ed). */
static int qf_test_cli(char **out, char **err, const char *const *args) {
    char *argv[16] = {(char *)"qfuse-gen"};
    int argc = 1;
    for (; args[argc - 1] && argc < 16; argc++)
        argv[argc] = (char *)args[argc - 1];
    FILE *fo = tmpfile(), *fe = tmpfile();
    assert_non_null(fo);
    assert_non_null(fe);
    int rc = qf_gen_cli_main(argc, argv, fo, fe);
    FILE *fs[2] = {fo, fe};
    char **dst[2] = {out, err};
    for (int i = 0; i < 2; i++) {
        long n = ftell(fs[i]);
        rewind(fs[i]);
        *dst[i] = calloc((size_t)n + 1, 1);
        assert_int_equal(fread(*dst[i], 1, (size_t)n, fs[i]), (size_t)n);
        fclose(fs[i]);
    }
    return rc;
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
     "field 'margin' (number has no integer representation)", 0},
    {"x.lua", "return {" FAM "amax_history_len = 0}",
     "field 'amax_history_len' (value 0 out of range 1..8192)", 0},
    {"x.lua", "return {" FAM "amax_history_len = 8193}",
     "field 'amax_history_len' (value 8193 out of range 1..8192)", 0},
    {"x.lua", "return {" FAM "amax_history_len = {}}",
     "field 'amax_history_len' (integer expected, got table)", 0},
    {"x.lua", "return {" FAM "amax_compute = \"mean\"}",
     "field 'amax_compute' (one of 'max', 'most_recent' expected, got 'mean')", 0},
    {"x.lua", "return {" FAM "amax_compute = true}",
     "field 'amax_compute' (string expected, got boolean)", 0},
    {"x.lua", "return {" FAM "description = 5}",
     "field 'description' (string expected, got number)", 0},
    {"x.lua", "return {margin = 1}", "field 'family' (string expected, got nil)", 0},
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
     "power_2_scales)", 0},
    {"x.lua", "return {family = \"fp8_block\"}", "family 'fp8_block' is not implemented yet", 0},
    {"x.lua", "return {" FAM "\"extra\"}", "unknown field [number] (fields are named: key = value)",
     0},
    {"x.lua", "return 42", "recipe must return a table (got number)", 0},
    {"x.lua", "local t = {}", "recipe must return a table (got nil)", 0},
    {"x.lua", "return {", "1: unexpected symbol near <eof>", 1},
    {"x.lua", "os.exit(3) return {}", "attempt to index a nil value (global 'os')", 1},
    {"x.lua", "return require('x')", "attempt to call a nil value (global 'require')", 1},
    {"x.lua", "return load('return {}')()", "attempt to call a nil value (global 'load')", 1},
    {"x.lua", "return dofile('recipes/fp8_delayed.lua')",
     "attempt to call a nil value (global 'dofile')", 1},
    {"x.lua", "return io.open('/etc/passwd')", "attempt to index a nil value (global 'io')", 1},
    {"x.lua", "return {family = (\"x\"):rep(3)}", "attempt to index a string value", 1},
    {"x.lua", "while true do end", "instruction budget of 10000000 exceeded", 1},
    {"x.lua", "local s = 'x' for i = 1, 40 do s = s .. s end return {}",
     "memory limit of 33554432 bytes (32 MiB) exceeded", 0},
    {"Bad-Name.lua", "return {" FAM "}", "recipe name 'Bad-Name' must match [a-z0-9_]+", 0},
    {"x.txt", "return {" FAM "}", "recipe file name must end in .lua", 0},
    /* mxfp8 (SPEC 2.3) */
    {"x.lua", "return {" MX "input_format = \"e5m2\"}",
     "field 'input_format' (one of 'e4m3' expected, got 'e5m2')", 0},
    {"x.lua", "return {" MX "input_format = 8}",
     "field 'input_format' (string expected, got number)", 0},
    {"x.lua", "return {" MX "weight_format = \"e5m2\"}",
     "field 'weight_format' (one of 'e4m3' expected, got 'e5m2')", 0},
    {"x.lua", "return {" MX "weight_format = {}}",
     "field 'weight_format' (string expected, got table)", 0},
    {"x.lua", "return {" MX "grad_format = \"e2m1\"}",
     "field 'grad_format' (one of 'e4m3', 'e5m2' expected, got 'e2m1')", 0},
    {"x.lua", "return {" MX "grad_format = true}",
     "field 'grad_format' (string expected, got boolean)", 0},
    {"x.lua", "return {" MX "scale_rounding = \"nearest\"}",
     "field 'scale_rounding' (one of 'ceil', 'floor' expected, got 'nearest')", 0},
    {"x.lua", "return {" MX "scale_rounding = 1}",
     "field 'scale_rounding' (string expected, got number)", 0},
    {"x.lua", "return {" MX "weight_2d = \"true\"}",
     "field 'weight_2d' (boolean expected, got string)", 0},
    {"x.lua", "return {" MX "weight_2d = 1}",
     "field 'weight_2d' (boolean expected, got number)", 0},
    {"x.lua", "return {" MX "description = {}}",
     "field 'description' (string expected, got table)", 0},
    {"x.lua", "return {" MX "block = 32}", "unknown field 'block'" MX_FIELDS, 0},
    {"x.lua", "return {" MX "margin = 0, format = \"e4m3\"}", "unknown field 'format'" MX_FIELDS,
     0},
    {"x.lua", "return {" FAM "weight_2d = true}", "unknown field 'weight_2d'" FAM_FIELDS, 0},
    /* nvfp4 (SPEC 2.4) */
    {"x.lua", "return {" NV "rht_input = 1}", "field 'rht_input' (boolean expected, got number)",
     0},
    {"x.lua", "return {" NV "rht_grad = \"false\"}",
     "field 'rht_grad' (boolean expected, got string)", 0},
    {"x.lua", "return {" NV "stochastic_rounding_grad = 0}",
     "field 'stochastic_rounding_grad' (boolean expected, got number)", 0},
    {"x.lua", "return {" NV "weight_2d = \"yes\"}",
     "field 'weight_2d' (boolean expected, got string)", 0},
    {"x.lua", "return {" NV "rht_seed = -1}",
     "field 'rht_seed' (value -1 out of range 0..9223372036854775807)", 0},
    {"x.lua", "return {" NV "rht_seed = 1.5}",
     "field 'rht_seed' (number has no integer representation)", 0},
    {"x.lua", "return {" NV "rht_seed = \"7\"}", "field 'rht_seed' (integer expected, got string)",
     0},
    {"x.lua", "return {" NV "rht_seed = 7, rht_input = false, rht_grad = false}",
     "field 'rht_seed' (no effect: rht_input and rht_grad are both false)", 0},
    {"x.lua", "return {" NV "description = 1}", "field 'description' (string expected, got number)",
     0},
    {"x.lua", "return {" NV "block = 16}", "unknown field 'block'" NV_FIELDS, 0},
    {"x.lua", "return {" NV "grad_format = \"e2m1\"}", "unknown field 'grad_format'" NV_FIELDS,
     0},
    {"x.lua", "return {" NV "stochastic_rounding = true}",
     "unknown field 'stochastic_rounding'" NV_FIELDS,
     0},
    {"x.lua", "return {" FAM "rht_input = true}", "unknown field 'rht_input'" FAM_FIELDS, 0},
    {"x.lua", "return {" MX "rht_seed = 1}", "unknown field 'rht_seed'" MX_FIELDS, 0},
};

static void test_recipe_error(void **state) {
    const qf_error_case *c = *state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    char path[512], expect[1024];
    qf_test_dir_make_gen(&d);
    assert_int_equal(qf_test_load(d.path, c->file, c->text, NULL, &r, &e, path, sizeof path), -1);
    snprintf(expect, sizeof expect, "%s: %s", path, c->expect);
    if (c->contains) {
        if (!strstr(e.msg, c->expect) || strncmp(e.msg, path, strlen(path)) != 0)
            fail_msg("message '%s' lacks '%s'", e.msg, expect);
    } else {
        assert_string_equal(e.msg, expect);
    }
    qf_test_dir_remove(d.path);
}

#define QF_ERROR_TEST(i) cmocka_unit_test_prestate(test_recipe_error, (void *)&qf_error_cases[i])

/* ========================================================================= sandbox */

/* io, os, require, load, dofile, string... are all nil inside a recipe. */
static void test_recipe_empty_env(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    qf_test_dir_make_gen(&d);
    const char *text =
        "local none = io == nil and os == nil and require == nil and load == nil and\n"
        "  dofile == nil and string == nil and print == nil and pcall == nil and\n"
        "  setmetatable == nil and _G == nil and loadstring == nil and debug == nil\n"
        "return {family = 'fp8_delayed', margin = none and 7 or 8}\n";
    assert_int_equal(qf_test_load(d.path, "env.lua", text, NULL, &r, &e, NULL, 0), 0);
    assert_int_equal(r.margin, 7);
    qf_test_dir_remove(d.path);
}

/* A huge table hits a smaller heap cap with the memory message, not the instruction budget. */
static void test_recipe_memory_table(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    qf_gen_limits lim = {.mem_bytes = 1u << 20};
    char path[512], expect[1024];
    qf_test_dir_make_gen(&d);
    const char *text = "local t = {} for i = 1, 1e8 do t[i] = i end return {}";
    assert_int_equal(qf_test_load(d.path, "big.lua", text, &lim, &r, &e, path, sizeof path), -1);
    snprintf(expect, sizeof expect, "%s: memory limit of 1048576 bytes (1 MiB) exceeded", path);
    assert_string_equal(e.msg, expect);
    qf_test_dir_remove(d.path);
}

/* A smaller instruction budget applies and is named. */
static void test_recipe_budget_custom(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    qf_gen_limits lim = {.instructions = 5000};
    qf_test_dir_make_gen(&d);
    const char *text = "local n = 0 for i = 1, 100000 do n = n + i end return {}";
    assert_int_equal(qf_test_load(d.path, "loop.lua", text, &lim, &r, &e, NULL, 0), -1);
    assert_non_null(strstr(e.msg, "instruction budget of 5000 exceeded"));
    assert_non_null(strstr(e.msg, "stack traceback:")); /* errors in recipe code are located */
    qf_test_dir_remove(d.path);
}

static int qf_test_lua_writer(lua_State *L, const void *p, size_t n, void *ud) {
    (void)L;
    return fwrite(p, 1, n, ud) != n;
}

/* A precompiled (binary) chunk is refused: recipes are text. */
static void test_recipe_binary_chunk(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    char path[512], expect[1024];
    qf_test_dir_make_gen(&d);
    snprintf(path, sizeof path, "%s/bin.lua", d.path);
    lua_State *L = luaL_newstate();
    assert_int_equal(luaL_loadstring(L, "return {family = 'fp8_delayed'}"), LUA_OK);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(lua_dump(L, qf_test_lua_writer, f, 1), 0);
    fclose(f);
    lua_close(L);
    assert_int_equal(qf_gen_recipe_load(path, NULL, &r, &e), -1);
    snprintf(expect, sizeof expect, "%s: attempt to load a binary chunk (mode is 't')", path);
    assert_string_equal(e.msg, expect);
    qf_test_dir_remove(d.path);
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
    qf_gen_err e;
    char opts[256];
    assert_int_equal(qf_gen_recipe_load("recipes/fp8_delayed.lua", NULL, &r, &e), 0);
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
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(
        opts, "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;margin=0");
}

/* Every option set, a float with an integer value accepted, and the sorted options string. */
static void test_recipe_all_options(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    char opts[256];
    qf_test_dir_make_gen(&d);
    const char *text = "return {family = 'fp8_delayed', format = 'e4m3', margin = 3.0,\n"
                       "  amax_history_len = 16, amax_compute = 'most_recent',\n"
                       "  description = 'all E4M3'}";
    assert_int_equal(qf_test_load(d.path, "all_e4m3.lua", text, NULL, &r, &e, NULL, 0), 0);
    assert_string_equal(r.name, "all_e4m3");
    assert_string_equal(r.description, "all E4M3");
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E4M3);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, "amax_compute=most_recent;amax_history_len=16;family=fp8_delayed;"
                              "format=e4m3;margin=3");
    qf_test_dir_remove(d.path);
}

/* ========================================================================= variants */

/* The variant named name among v[0..n); fails the test when absent. */
static const qf_gen_variant *qf_test_variant(const qf_gen_variant *v, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(v[i].desc.name, name) == 0)
            return &v[i];
    fail_msg("no variant %s", name);
    return NULL;
}

/* The shipped recipe's variants into v; returns the count. */
static int qf_test_shipped_variants(qf_recipe *r, qf_gen_variant *v) {
    qf_gen_err e;
    assert_int_equal(qf_gen_recipe_load("recipes/fp8_delayed.lua", NULL, r, &e), 0);
    int n = qf_gen_variants_expand(r, v, QF_GEN_VARIANTS_MAX, &e);
    assert_int_equal(n, 12 + 6 + 1);
    assert_int_equal(qf_gen_variants_check(r, v, n, &e), 0);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(v[i - 1].desc.name, v[i].desc.name) < 0); /* sorted */
    return n;
}

static void test_variants_fp8_delayed(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    int n = qf_test_shipped_variants(&r, v);
    const qf_gen_variant *a = qf_test_variant(v, n, "qf_fp8_delayed_nq_rmsnorm_zcg_fp16");
    assert_int_equal(a->desc.norm, QF_NORM_RMSNORM);
    assert_int_equal(a->desc.zero_centered_gamma, 1);
    assert_int_equal(a->desc.in_dtype, QF_DTYPE_FP16);
    assert_int_equal(a->desc.out_dtype, QF_DTYPE_E4M3);
    assert_int_equal(a->cfg.block_threads, 256);
    assert_int_equal(a->cfg.tile_m, 32);
    const qf_gen_variant *g = qf_test_variant(v, n, "qf_fp8_delayed_quant_grad_bf16");
    assert_int_equal(g->desc.op, QF_OP_QUANTIZE);
    assert_int_equal(g->desc.out_dtype, QF_DTYPE_E5M2);
    const qf_gen_variant *su = qf_test_variant(v, n, "qf_fp8_delayed_scale_update");
    assert_int_equal(su->desc.in_dtype, QF_DTYPE_FP32);
    assert_int_equal(su->cfg.tile_m, 1);
    assert_int_equal(su->cfg.smem_bytes, 1024 * 4);
}

/* Breaks one invariant of a copy of the variants; the check must name it and the kernel. */
typedef struct qf_break_case {
    int index;
    enum {
        BREAK_THREADS,
        BREAK_THREADS_BIG,
        BREAK_TILE,
        BREAK_SMEM,
        BREAK_DUP,
        BREAK_DTYPE,
        BREAK_NAME
    } what;
    const char *msg;
} qf_break_case;

static void qf_test_break(qf_gen_variant *w, const qf_break_case *c) {
    qf_gen_variant *x = &w[c->index];
    switch (c->what) {
    case BREAK_THREADS:
        x->cfg.block_threads = 100;
        break;
    case BREAK_THREADS_BIG:
        x->cfg.block_threads = 2048;
        break;
    case BREAK_TILE:
        x->cfg.tile_m = 0;
        break;
    case BREAK_SMEM:
        x->cfg.smem_bytes = 64 * 1024;
        break;
    case BREAK_DUP:
        strcpy(x->desc.name, w[c->index + 1].desc.name);
        break;
    case BREAK_DTYPE:
        x->desc.in_dtype = QF_DTYPE_COUNT;
        break;
    case BREAK_NAME:
        strcpy(x->desc.name, "qf bad");
        break;
    }
}

static void test_variants_invariants(void **state) {
    (void)state;
    static const qf_break_case cases[] = {
        {0, BREAK_THREADS, "block_threads is not a multiple of 32 in 32..1024"},
        {1, BREAK_THREADS_BIG, "block_threads is not a multiple of 32 in 32..1024"},
        {2, BREAK_TILE, "tile_m is 0"},
        {3, BREAK_SMEM, "shared memory exceeds 48 KiB"},
        {4, BREAK_DUP, "is not unique"},
        {6, BREAK_DTYPE, "enum value out of range"},
        {7, BREAK_NAME, "name is not a C identifier"},
    };
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX], w[QF_GEN_VARIANTS_MAX];
    qf_gen_err e;
    int n = qf_test_shipped_variants(&r, v);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(w, v, sizeof v);
        qf_test_break(w, &cases[i]);
        assert_int_equal(qf_gen_variants_check(&r, w, n, &e), -1);
        if (!strstr(e.msg, cases[i].msg) || !strstr(e.msg, "recipes/fp8_delayed.lua: kernel"))
            fail_msg("case %zu: '%s' lacks '%s'", i, e.msg, cases[i].msg);
    }
}

/* ========================================================================= mxfp8 recipes */

#define QF_MX_OPTIONS_1D                                                                           \
    "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=false;"         \
    "weight_format=e4m3"
#define QF_MX_OPTIONS_2D                                                                           \
    "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=true;"          \
    "weight_format=e4m3"

/* Loads the recipe at path; fails the test with the loader's message. */
static void qf_test_load_ok(const char *path, qf_recipe *r) {
    qf_gen_err e;
    if (qf_gen_recipe_load(path, NULL, r, &e) != 0)
        fail_msg("%s", e.msg);
}

/* The shipped recipes: TE's MXFP8BlockScaling defaults, and the same with 32x32 weight blocks. */
static void test_recipe_mxfp8_shipped(void **state) {
    (void)state;
    qf_recipe r;
    char opts[256];
    qf_test_load_ok("recipes/mxfp8.lua", &r);
    assert_string_equal(r.name, "mxfp8");
    assert_int_equal(r.family, QF_FAMILY_MXFP8);
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(r.fmt[i], QF_DTYPE_E4M3);
    assert_int_equal(r.scale_rounding, QF_SCALE_ROUNDING_CEIL);
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 0);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_MX_OPTIONS_1D);
    qf_test_load_ok("recipes/mxfp8_2d.lua", &r);
    assert_string_equal(r.name, "mxfp8_2d");
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 1);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_MX_OPTIONS_2D);
}

/* A bare {family = "mxfp8"} has every default: the options string still names all options. */
static void test_recipe_mxfp8_defaults(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    char opts[256];
    qf_test_dir_make_gen(&d);
    assert_int_equal(qf_test_load(d.path, "bare.lua", "return {family = 'mxfp8'}", NULL, &r, &e,
                                  NULL, 0),
                     0);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_MX_OPTIONS_1D);
    assert_string_equal(r.description, "");
    qf_test_dir_remove(d.path);
}

/* Every option away from its default, and the option list sorted, weight_2d a boolean. */
static void test_recipe_mxfp8_all_options(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    qf_gen_option o[QF_GEN_OPTIONS_MAX];
    char opts[256];
    qf_test_dir_make_gen(&d);
    const char *text = "return {family = 'mxfp8', input_format = 'e4m3', weight_format = 'e4m3',\n"
                       "  grad_format = 'e5m2', scale_rounding = 'floor', weight_2d = true,\n"
                       "  description = 'OCP rounding'}";
    assert_int_equal(qf_test_load(d.path, "mx_ocp.lua", text, NULL, &r, &e, NULL, 0), 0);
    assert_int_equal(r.fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    assert_int_equal(r.scale_rounding, QF_SCALE_ROUNDING_FLOOR);
    assert_string_equal(r.description, "OCP rounding");
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, "family=mxfp8;grad_format=e5m2;input_format=e4m3;"
                              "scale_rounding=floor;weight_2d=true;weight_format=e4m3");
    int n = qf_gen_recipe_option_list(&r, o);
    assert_int_equal(n, 6);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(o[i - 1].key, o[i].key) < 0);
    assert_string_equal(o[4].key, "weight_2d");
    assert_true(o[4].is_boolean && !o[4].is_integer);
    /* weight_2d = false is a boolean too */
    assert_int_equal(qf_test_load(d.path, "mx_1d.lua", "return {family = 'mxfp8', weight_2d = "
                                  "false}", NULL, &r, &e, NULL, 0),
                     0);
    assert_int_equal(r.block_2d[QF_ROLE_WEIGHT], 0);
    qf_test_dir_remove(d.path);
}

/* ========================================================================= mxfp8 variants */

/* The variants of the recipe at path into v (checked, sorted); returns the count. */
static int qf_test_variants_of(const char *path, qf_recipe *r, qf_gen_variant *v) {
    qf_gen_err e;
    qf_test_load_ok(path, r);
    int n = qf_gen_variants_expand(r, v, QF_GEN_VARIANTS_MAX, &e);
    if (n < 0 || qf_gen_variants_check(r, v, n, &e) != 0)
        fail_msg("%s", e.msg);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(v[i - 1].desc.name, v[i].desc.name) < 0);
    return n;
}

/* The kernels of recipes/mxfp8.lua, sorted. */
static const char *const qf_test_mx_names[] = {
    "qf_mxfp8_gemm",
    "qf_mxfp8_nq_layernorm_bf16",     "qf_mxfp8_nq_layernorm_fp16",
    "qf_mxfp8_nq_layernorm_fp32",     "qf_mxfp8_nq_layernorm_zcg_bf16",
    "qf_mxfp8_nq_layernorm_zcg_fp16", "qf_mxfp8_nq_layernorm_zcg_fp32",
    "qf_mxfp8_nq_rmsnorm_bf16",       "qf_mxfp8_nq_rmsnorm_fp16",
    "qf_mxfp8_nq_rmsnorm_fp32",       "qf_mxfp8_nq_rmsnorm_zcg_bf16",
    "qf_mxfp8_nq_rmsnorm_zcg_fp16",   "qf_mxfp8_nq_rmsnorm_zcg_fp32",
    "qf_mxfp8_quant_grad_bf16",       "qf_mxfp8_quant_grad_fp16",
    "qf_mxfp8_quant_grad_fp32",       "qf_mxfp8_quant_weight_bf16",
    "qf_mxfp8_quant_weight_fp16",     "qf_mxfp8_quant_weight_fp32",
};

/* Every kernel of recipes/mxfp8.lua by name, and its template and config. */
static void test_variants_mxfp8_names(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    int n = qf_test_variants_of("recipes/mxfp8.lua", &r, v);
    assert_int_equal(n, 12 + 6 + 1); /* norm_quantize, quantize, gemm; no scale update */
    for (int i = 0; i < n; i++) {
        assert_string_equal(v[i].desc.name, qf_test_mx_names[i]);
        int gemm = v[i].desc.op == QF_OP_GEMM;
        assert_string_equal(v[i].cfg.template_name,
                            gemm ? "sm90_mxfp8_gemm.cu" : "smxx_mxfp8_norm_quantize.cu");
        assert_int_equal(v[i].cfg.block_threads, 256);
        assert_int_equal(v[i].cfg.tile_m, gemm ? 128 : 32);
        assert_int_equal(v[i].desc.out_dtype, gemm ? QF_DTYPE_BF16 : QF_DTYPE_E4M3);
    }
    assert_int_equal(v[0].desc.in_dtype, QF_DTYPE_E4M3);
    const qf_gen_variant *a = qf_test_variant(v, n, "qf_mxfp8_nq_rmsnorm_zcg_fp16");
    assert_int_equal(a->desc.norm, QF_NORM_RMSNORM);
    assert_int_equal(a->desc.zero_centered_gamma, 1);
    assert_int_equal(a->desc.in_dtype, QF_DTYPE_FP16);
}

/* mxfp8_2d: the same 19 kernels under its own prefix; only the weight quantizers are 2D. */
static void test_variants_mxfp8_2d(void **state) {
    (void)state;
    qf_recipe r1, r2;
    qf_gen_variant v1[QF_GEN_VARIANTS_MAX], v2[QF_GEN_VARIANTS_MAX];
    int n1 = qf_test_variants_of("recipes/mxfp8.lua", &r1, v1);
    int n2 = qf_test_variants_of("recipes/mxfp8_2d.lua", &r2, v2);
    assert_int_equal(n1, n2);
    for (int i = 0; i < n2; i++) {
        char expect[128];
        snprintf(expect, sizeof expect, "qf_mxfp8_2d_%s", v1[i].desc.name + strlen("qf_mxfp8_"));
        assert_string_equal(v2[i].desc.name, expect);
        int weight = strstr(v2[i].desc.name, "_quant_weight_") != NULL;
        assert_int_equal(r2.block_2d[v2[i].desc.role], weight);
        assert_int_equal(r1.block_2d[v1[i].desc.role], 0);
    }
}

/* The value of placeholder name in v, or NULL. */
static const char *qf_test_value(const qf_gen_values *v, const char *name) {
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->name[i], name) == 0)
            return v->value[i];
    return NULL;
}

/* Asserts that v holds exactly the n pairs kv[0..2n). */
static void qf_test_values_are(const qf_gen_values *v, int n, const char *const *kv) {
    assert_int_equal(v->n, n);
    for (int i = 0; i < n; i++) {
        const char *got = qf_test_value(v, kv[2 * i]);
        if (!got || strcmp(got, kv[2 * i + 1]) != 0)
            fail_msg("%s = '%s', expected '%s'", kv[2 * i], got ? got : "(none)", kv[2 * i + 1]);
    }
}

/* The placeholder contract of the two MXFP8 templates (gen_variant.h). */
static void test_variants_mxfp8_values(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    qf_gen_values vals;
    int n = qf_test_variants_of("recipes/mxfp8_2d.lua", &r, v);
    const char *w[] = {"__KERNEL_NAME__", "qf_mxfp8_2d_quant_weight_bf16", "__BLOCK_THREADS__",
                       "256", "__NORM__", "QF_NORM_NONE", "__ZERO_CENTERED_GAMMA__", "0",
                       "__IN_DTYPE__", "QF_DTYPE_BF16", "__OUT_DTYPE__", "QF_DTYPE_E4M3",
                       "__SCALE_ROUNDING__", "QF_SCALE_ROUNDING_CEIL", "__BLOCK_2D__", "1",
                       "__TILE_M__", "32"};
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mxfp8_2d_quant_weight_bf16"), &vals);
    qf_test_values_are(&vals, 9, w);
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mxfp8_2d_quant_grad_fp32"), &vals);
    assert_string_equal(qf_test_value(&vals, "__BLOCK_2D__"), "0");
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mxfp8_2d_nq_layernorm_zcg_fp16"), &vals);
    assert_string_equal(qf_test_value(&vals, "__NORM__"), "QF_NORM_LAYERNORM");
    assert_string_equal(qf_test_value(&vals, "__ZERO_CENTERED_GAMMA__"), "1");
    assert_string_equal(qf_test_value(&vals, "__BLOCK_2D__"), "0");
    const char *g[] = {"__KERNEL_NAME__", "qf_mxfp8_2d_gemm", "__BLOCK_THREADS__", "256",
                       "__A_DTYPE__", "QF_DTYPE_E4M3", "__B_DTYPE__", "QF_DTYPE_E4M3",
                       "__TILE_M__", "128"};
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mxfp8_2d_gemm"), &vals);
    qf_test_values_are(&vals, 5, g);
}

/* grad_format and scale_rounding reach the grad quantizers' values. */
static void test_variants_mxfp8_options_reach_values(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    qf_gen_values vals;
    qf_test_dir_make_gen(&d);
    const char *path = qf_test_dir_write(d.path, "mx_e5m2.lua", "return {family = 'mxfp8', "
                                     "grad_format = 'e5m2', scale_rounding = 'floor'}");
    int n = qf_test_variants_of(path, &r, v);
    const qf_gen_variant *g = qf_test_variant(v, n, "qf_mx_e5m2_quant_grad_bf16");
    assert_int_equal(g->desc.out_dtype, QF_DTYPE_E5M2);
    qf_gen_variant_values(&r, g, &vals);
    assert_string_equal(qf_test_value(&vals, "__OUT_DTYPE__"), "QF_DTYPE_E5M2");
    assert_string_equal(qf_test_value(&vals, "__SCALE_ROUNDING__"), "QF_SCALE_ROUNDING_FLOOR");
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mx_e5m2_quant_weight_bf16"), &vals);
    assert_string_equal(qf_test_value(&vals, "__OUT_DTYPE__"), "QF_DTYPE_E4M3");
    qf_test_dir_remove(d.path);
}

/* ========================================================================= rendering */

static void qf_test_values(qf_gen_values *v, int n, const char *const *kv) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < n; i++) {
        snprintf(v->name[i], sizeof v->name[i], "%s", kv[2 * i]);
        snprintf(v->value[i], sizeof v->value[i], "%s", kv[2 * i + 1]);
    }
    v->n = n;
}

/* Placeholders are whole tokens; CUDA's own __x__ names and macros are none (x__TILE_M__ alone
 * would leave __TILE_M__ unused). */
static void test_render_ok(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k", "__TILE_M__", "32"};
    qf_gen_values v;
    qf_gen_buf b;
    qf_gen_err e;
    qf_test_values(&v, 2, kv);
    qf_gen_buf_init(&b);
    const char *tpl = "extern \"C\" __global__ void __launch_bounds__(256) __KERNEL_NAME__() {\n"
                      "#if defined(__CUDACC_RTC__) && __CUDA_ARCH__ >= 900 && __NVCC_X__\n"
                      "  __shared__ int s[__TILE_M__]; __syncthreads(); x__TILE_M__ = __LINE__;\n"
                      "#endif\n}\n";
    assert_int_equal(qf_gen_render("t.cu", tpl, &v, &b, &e), 0);
    /* the prelude: one #define per value, in order; the template itself goes to NVRTC as is */
    assert_string_equal(b.p, "#define __KERNEL_NAME__ qf_k\n#define __TILE_M__ 32\n");
    qf_gen_buf_free(&b);
}

static void test_render_unfilled(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k"};
    qf_gen_values v;
    qf_gen_buf b;
    qf_gen_err e;
    qf_test_values(&v, 1, kv);
    qf_gen_buf_init(&b);
    assert_int_equal(
        qf_gen_render("t.cu", "void __KERNEL_NAME__()\n{ int a = __TILE_Q__; }", &v, &b, &e), -1);
    assert_string_equal(e.msg, "t.cu:2: placeholder '__TILE_Q__' has no value");
    qf_gen_buf_free(&b);
}

static void test_render_unused(void **state) {
    (void)state;
    const char *kv[] = {"__KERNEL_NAME__", "qf_k", "__MARGIN__", "0.0f"};
    qf_gen_values v;
    qf_gen_buf b;
    qf_gen_err e;
    qf_test_values(&v, 2, kv);
    qf_gen_buf_init(&b);
    assert_int_equal(qf_gen_render("t.cu", "void __KERNEL_NAME__() {}\n", &v, &b, &e), -1);
    assert_string_equal(e.msg, "t.cu: value for placeholder '__MARGIN__' is never used");
    qf_gen_buf_free(&b);
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
                      "QF_ROWS_ENTRIES(__KERNEL_NAME__, 256, P)\n/* QF_AMAX_ENTRY(x) */\n"
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

/* ========================================================================= generator runs */

/* Writes a template dir whose norm-quantize template is `nq` and scale-update template valid. */
static void qf_test_templates(const char *dir, const char *nq) {
    qf_test_dir_write(dir, "smxx_fp8_norm_quantize.cu", nq);
    qf_test_dir_write(dir, "smxx_fp8_scale_update.cu",
                  "void __KERNEL_NAME__() { float m = __MARGIN__; int a = __AMAX_COMPUTE__, "
                  "t = __BLOCK_THREADS__; }\n");
}

static const char qf_test_nq_ok[] =
    "void __KERNEL_NAME__() { int a[] = {__FAMILY__, __NORM__, __ZERO_CENTERED_GAMMA__, "
    "__IN_DTYPE__, __OUT_DTYPE__, __BLOCK_THREADS__, __TILE_M__}; }\n";

static void test_gen_template_unfilled(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[512];
    qf_test_dir_make_gen(&d);
    char nq[512];
    snprintf(nq, sizeof nq, "%s// __ROWS__ per block\n", qf_test_nq_ok);
    qf_test_templates(d.path, nq);
    const char *args[] = {"--check", "--templates", d.path, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(expect, sizeof expect,
             "qfuse-gen: %s/smxx_fp8_norm_quantize.cu:2: placeholder '__ROWS__' has no value\n",
             d.path);
    assert_string_equal(err, expect);
    assert_string_equal(out, "");
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* Every templates/qf_dev_*.cuh is a shared header: one holding a placeholder stops the run before
 * anything is written, naming it. */
static void test_gen_header_placeholder(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[512], path[512];
    struct stat st;
    qf_test_dir_make_gen(&d);
    qf_test_templates(d.path, qf_test_nq_ok);
    qf_test_dir_write(d.path, "qf_dev_bad.cuh", "namespace {\nconstexpr int kT = __TILE_M__;\n}\n");
    const char *args[] = {"-o", d.path, "--templates", d.path, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(expect, sizeof expect,
             "qfuse-gen: %s/qf_dev_bad.cuh:2: placeholder '__TILE_M__' in a shared header "
             "(headers take template parameters; only templates have placeholders)\n",
             d.path);
    assert_string_equal(err, expect);
    snprintf(path, sizeof path, "%s/registry.c", d.path);
    assert_int_not_equal(stat(path, &st), 0); /* nothing written */
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

static void test_gen_template_unused_value(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[512];
    qf_test_dir_make_gen(&d);
    qf_test_templates(d.path, "void __KERNEL_NAME__() { int a[] = {__FAMILY__, __NORM__, "
                              "__ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __OUT_DTYPE__, "
                              "__BLOCK_THREADS__}; }\n");
    const char *args[] = {"-o", d.path, "--templates", d.path, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(expect, sizeof expect,
             "qfuse-gen: %s/smxx_fp8_norm_quantize.cu: value for placeholder '__TILE_M__' is "
             "never used\n",
             d.path);
    assert_string_equal(err, expect);
    struct stat st;
    char path[512];
    snprintf(path, sizeof path, "%s/registry.c", d.path);
    assert_int_not_equal(stat(path, &st), 0); /* nothing written */
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* ---- tree comparison */

typedef struct qf_test_tree {
    int n;
    char rel[64][160];
} qf_test_tree;

static qf_test_tree *qf_test_tree_cur;
static size_t qf_test_tree_root;

static int qf_test_tree_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    if (flag == FTW_F && qf_test_tree_cur->n < 64)
        snprintf(qf_test_tree_cur->rel[qf_test_tree_cur->n++], 160, "%s", p + qf_test_tree_root);
    return 0;
}

static int qf_test_strcmp(const void *a, const void *b) {
    return strcmp(a, b);
}

static void qf_test_list(const char *dir, qf_test_tree *t) {
    t->n = 0;
    qf_test_tree_cur = t;
    qf_test_tree_root = strlen(dir) + 1;
    assert_int_equal(nftw(dir, qf_test_tree_entry, 16, FTW_PHYS), 0);
    qsort(t->rel, (size_t)t->n, sizeof t->rel[0], qf_test_strcmp);
}

/* Generates into a fresh dir/out (default templates) and asserts success. */
static void qf_test_generate(const char *outdir) {
    char *out, *err;
    const char *args[] = {"-o", outdir, "recipes/fp8_delayed.lua", NULL};
    int rc = qf_test_cli(&out, &err, args);
    if (rc != 0)
        fail_msg("qfuse-gen failed: %s", err);
    assert_string_equal(err, "");
    free(out), free(err);
}

/* Two runs into two dirs give identical trees, byte for byte, holding only the expected files. */
static void test_gen_reproducible(void **state) {
    (void)state;
    qf_test_dir d1, d2;
    static qf_test_tree t1, t2;
    char p1[512], p2[512];
    qf_test_dir_make_gen(&d1);
    qf_test_dir_make_gen(&d2);
    qf_test_generate(d1.path);
    qf_test_generate(d2.path);
    qf_test_list(d1.path, &t1);
    qf_test_list(d2.path, &t2);
    assert_int_equal(t1.n, 19 + 4);
    assert_int_equal(t1.n, t2.n);
    for (int i = 0; i < t1.n; i++) {
        assert_string_equal(t1.rel[i], t2.rel[i]);
        snprintf(p1, sizeof p1, "%s/%s", d1.path, t1.rel[i]);
        snprintf(p2, sizeof p2, "%s/%s", d2.path, t2.rel[i]);
        size_t n1 = 0, n2 = 0;
        char *a = qf_test_read(p1, &n1), *b = qf_test_read(p2, &n2);
        assert_non_null(a);
        assert_non_null(b);
        if (n1 != n2 || memcmp(a, b, n1) != 0)
            fail_msg("%s differs between runs", t1.rel[i]);
        assert_null(strstr(a, d1.path)); /* no absolute (temp) path leaks into the output */
        free(a), free(b);
    }
    qf_test_dir_remove(d1.path);
    qf_test_dir_remove(d2.path);
}

/* Every file opens with the banner; manifest.json carries it in "generated_by". */
#define QF_BANNER_START "Generated by gen/qfuse-gen from recipes/fp8_delayed.lua + "

/* Asserts the banner of one generated file (rel under the output dir). */
static void qf_test_banner(const char *rel, char *text) {
    if (strcmp(rel, "manifest.json") == 0) {
        cJSON *j = cJSON_Parse(text);
        assert_non_null(j);
        const char *g = cJSON_GetStringValue(cJSON_GetObjectItem(j, "generated_by"));
        assert_non_null(g);
        assert_true(qf_test_starts(g, QF_BANNER_START));
        assert_non_null(strstr(g, " \xe2\x80\x94 do not edit"));
        cJSON_Delete(j);
        return;
    }
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_true(qf_test_starts(text, "/* " QF_BANNER_START));
    size_t n = strlen(text), m = strlen(QF_BANNER_END);
    assert_true(n > m && strcmp(text + n - m, QF_BANNER_END) == 0);
    if (!qf_test_starts(rel, "kernels/"))
        return;
    /* then the template's constants, then the #line back to the template */
    const char *line = nl + 1;
    int defines = 0;
    for (; qf_test_starts(line, "#define __"); line = strchr(line, '\n') + 1)
        defines++;
    assert_true(defines >= 2); /* __KERNEL_NAME__ and __BLOCK_THREADS__ at least */
    assert_true(qf_test_starts(line, "#line 1 \"templates/smxx_fp8_"));
}

/* Every file opens with the banner; manifest.json carries it in "generated_by". */
static void test_gen_banners(void **state) {
    (void)state;
    qf_test_dir d;
    static qf_test_tree t;
    char p[512];
    qf_test_dir_make_gen(&d);
    qf_test_generate(d.path);
    qf_test_list(d.path, &t);
    assert_int_equal(t.n, 19 + 4);
    for (int i = 0; i < t.n; i++) {
        snprintf(p, sizeof p, "%s/%s", d.path, t.rel[i]);
        char *text = qf_test_read(p, NULL);
        assert_non_null(text);
        qf_test_banner(t.rel[i], text);
        free(text);
    }
    qf_test_dir_remove(d.path);
}

/* A stale kernels/qf_*.cu is removed by the next run; other files under out/ are left alone. */
static void test_gen_stale_removed(void **state) {
    (void)state;
    qf_test_dir d;
    char kdir[512], stale[600], keep[600];
    struct stat st;
    qf_test_dir_make_gen(&d);
    snprintf(kdir, sizeof kdir, "%s/kernels", d.path);
    assert_int_equal(mkdir(kdir, 0777), 0);
    snprintf(stale, sizeof stale, "%s", qf_test_dir_write(kdir, "qf_gone_kernel.cu", "x"));
    snprintf(keep, sizeof keep, "%s", qf_test_dir_write(d.path, "notes.txt", "x"));
    qf_test_generate(d.path);
    assert_int_not_equal(stat(stale, &st), 0);
    assert_int_equal(stat(keep, &st), 0);
    qf_test_dir_remove(d.path);
}

/* The first recipe of the manifest in dir (parsed; the caller deletes *root). */
static cJSON *qf_test_manifest_recipe(const char *dir, cJSON **root) {
    char p[512];
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    char *text = qf_test_read(p, NULL);
    assert_non_null(text);
    *root = cJSON_Parse(text);
    free(text);
    assert_non_null(*root);
    return cJSON_GetArrayItem(cJSON_GetObjectItem(*root, "recipes"), 0);
}

static const char *qf_test_json_str(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
    assert_non_null(s);
    return s;
}

/* --fields prints every implemented family's schema from the families table: each field, what
 * it accepts and the default the loader fills in; reserved families are not offered. */
static void test_cli_fields(void **state) {
    (void)state;
    const char *args[] = {"--fields", NULL};
    char *out, *err;
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    for (int f = 0; f < QF_FAMILY_COUNT; f++) {
        const qf_family_traits *t = &qf_families[f];
        char head[64];
        snprintf(head, sizeof head, "family '%s' (%s)", t->name, t->spec);
        assert_true((strstr(out, head) != NULL) == t->implemented);
        for (int i = 0; t->implemented && i < t->n_fields; i++)
            assert_non_null(strstr(out, t->fields[i].name));
    }
    assert_non_null(strstr(out, "amax_history_len           integer 1..8192"));
    assert_non_null(strstr(out, "default 1024"));
    assert_non_null(strstr(out, "'e4m3' | 'e5m2'"));
    assert_non_null(strstr(out, "rht_seed                   integer 0..9223372036854775807"
                                "       default none"));
    assert_string_equal(err, "");
    free(out), free(err);
}

/* Generates every recipe the registry was built from into a fresh outdir (default templates). */
static void qf_test_generate_registry(const char *outdir) {
    const char *args[16] = {"-o", outdir};
    char *out, *err;
    assert_true(qf_recipe_count > 0 && qf_recipe_count <= 12);
    for (int i = 0; i < qf_recipe_count; i++)
        args[2 + i] = qf_recipes[i].file;
    int rc = qf_test_cli(&out, &err, args);
    if (rc != 0)
        fail_msg("qfuse-gen failed: %s", err);
    free(out), free(err);
}

/* Kernel k of the registry equals kernels/<name>.cu under dir and its manifest entry j. */
static void qf_test_registry_kernel(const char *dir, const qf_kernel_entry *k, const cJSON *j) {
    char p[512], key[QF_KEY_HEX_LEN + 1];
    snprintf(p, sizeof p, "%s/kernels/%s.cu", dir, k->name);
    char *src = qf_test_read(p, NULL), *text = qf_kernel_text(k);
    assert_non_null(src);
    assert_non_null(text);
    assert_string_equal(src, text); /* prelude + template = the readable kernels/<name>.cu */
    assert_true(qf_test_starts(src, k->prelude));
    assert_string_equal(src + strlen(k->prelude), k->tpl->text);
    assert_string_equal(k->tpl->file, qf_test_json_str(j, "template"));
    free(src), free(text);
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_kernel_key(k->recipe, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, 90, key);
    assert_string_equal(qf_test_json_str(j, "name"), k->name);
    assert_string_equal(qf_test_json_str(j, "key_sm90"), key);
}

/* The registry's NVRTC headers are runtime/qf_formats.h and every templates/qf_dev_*.cuh, sorted
 * by name, byte for byte. */
static void qf_test_registry_headers(void) {
    int n_dev = 0;
    DIR *dir = opendir("templates");
    assert_non_null(dir);
    for (struct dirent *de; (de = readdir(dir)) != NULL;)
        n_dev += qf_test_starts(de->d_name, "qf_dev_") && strstr(de->d_name, ".cuh") != NULL;
    closedir(dir);
    assert_int_equal(qf_nvrtc_header_count, 1 + n_dev);
    for (int i = 0; i < qf_nvrtc_header_count; i++) {
        char p[512];
        const char *name = qf_nvrtc_header_names[i];
        if (i > 0)
            assert_true(strcmp(qf_nvrtc_header_names[i - 1], name) < 0);
        snprintf(p, sizeof p, "%s/%s", strcmp(name, "qf_formats.h") ? "templates" : "runtime",
                 name);
        char *hdr = qf_test_read(p, NULL);
        assert_non_null(hdr);
        assert_string_equal(qf_nvrtc_headers[i], hdr);
        free(hdr);
    }
}

/* Each template is stored once, byte for byte, and every kernel points at one of them. */
static void qf_test_registry_templates(void) {
    assert_true(qf_template_count > 0);
    for (int i = 0; i < qf_template_count; i++) {
        char *tpl = qf_test_read(qf_templates[i].file, NULL);
        assert_non_null(tpl);
        assert_string_equal(qf_templates[i].text, tpl);
        free(tpl);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(qf_templates[i].file, qf_templates[j].file);
    }
    for (int k = 0; k < qf_kernel_count; k++)
        assert_true(qf_kernels[k].tpl >= qf_templates &&
                    qf_kernels[k].tpl < qf_templates + qf_template_count);
}

/* out/ as built into libqfuse agrees with a fresh run over the same recipes: kernel sources, the
 * NVRTC header, and the fusion keys of the manifest equal the runtime's qf_kernel_key over the
 * registry. */
static void test_gen_matches_registry(void **state) {
    (void)state;
    qf_test_dir d;
    char p[512];
    qf_test_dir_make_gen(&d);
    qf_test_generate_registry(d.path);
    qf_test_registry_headers();
    qf_test_registry_templates();
    /* each template and header once, a short prelude per kernel: well under 1 MiB (the full
     * sources, one per kernel, are several MiB) */
    struct stat st;
    snprintf(p, sizeof p, "%s/registry.c", d.path);
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_size < (1 << 20));
    snprintf(p, sizeof p, "%s/manifest.json", d.path);
    char *text = qf_test_read(p, NULL);
    cJSON *root = cJSON_Parse(text), *rs = cJSON_GetObjectItem(root, "recipes"), *r;
    free(text);
    assert_int_equal(cJSON_GetArraySize(rs), qf_recipe_count);
    int k = 0;
    cJSON_ArrayForEach(r, rs) {
        cJSON *j;
        cJSON_ArrayForEach(j, cJSON_GetObjectItem(r, "kernels")) {
            assert_true(k < qf_kernel_count);
            qf_test_registry_kernel(d.path, &qf_kernels[k++], j);
        }
    }
    assert_int_equal(k, qf_kernel_count);
    cJSON_Delete(root);
    qf_test_dir_remove(d.path);
}

/* Output i of op in the manifest recipe r. */
static const cJSON *qf_test_shape_out(const cJSON *r, const char *op, int i) {
    const cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), op);
    const cJSON *item = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "outputs"), i);
    assert_non_null(item);
    return item;
}

/* The manifest's options and shape formulas (from the same table as shapes.c). */
static void test_gen_manifest_shapes(void **state) {
    (void)state;
    qf_test_dir d;
    cJSON *root;
    qf_test_dir_make_gen(&d);
    qf_test_generate(d.path);
    const cJSON *r = qf_test_manifest_recipe(d.path, &root);
    const cJSON *opts = cJSON_GetObjectItem(r, "options");
    assert_int_equal(cJSON_GetObjectItem(opts, "amax_history_len")->valueint, 1024);
    assert_string_equal(qf_test_json_str(opts, "format"), "hybrid");
    const cJSON *nq = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), "norm_quantize");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(nq, "outputs")), 6);
    const cJSON *row = qf_test_shape_out(r, "norm_quantize", 0);
    assert_string_equal(qf_test_json_str(row, "name"), "rowwise_data");
    assert_string_equal(qf_test_json_str(row, "bytes"), "M*K");
    assert_string_equal(qf_test_json_str(row, "dtype"), "format[input]");
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(row, "dims"), 1)->valuestring, "K");
    const cJSON *mu = qf_test_shape_out(r, "norm_quantize", 4);
    assert_string_equal(qf_test_json_str(mu, "condition"), "norm == layernorm");
    assert_string_equal(qf_test_json_str(mu, "bytes"), "4*M");
    assert_string_equal(qf_test_json_str(qf_test_shape_out(r, "quantize", 0), "dtype"),
                        "format[role]");
    assert_string_equal(qf_test_json_str(qf_test_shape_out(r, "gemm", 0), "bytes"), "2*M*N");
    cJSON_Delete(root);
    qf_test_dir_remove(d.path);
}

/* ========================================================================= mxfp8 runs */

/* Stub MXFP8 templates: every placeholder of the contract once (gen_variant.h), nothing else. */
static const char qf_test_mx_nq_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
    "__OUT_DTYPE__, __SCALE_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__}; }\n";
static const char qf_test_mx_gemm_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__A_DTYPE__, __B_DTYPE__, __BLOCK_THREADS__, "
    "__TILE_M__}; }\n";

/* Writes all four templates (fp8_delayed and mxfp8 stubs) to dir; nq is the MXFP8 quantizer's. */
static void qf_test_mx_templates(const char *dir, const char *nq) {
    qf_test_templates(dir, qf_test_nq_ok);
    qf_test_dir_write(dir, "smxx_mxfp8_norm_quantize.cu", nq);
    qf_test_dir_write(dir, "sm90_mxfp8_gemm.cu", qf_test_mx_gemm_stub);
}

/* Generates recipes/mxfp8.lua and recipes/mxfp8_2d.lua into dir/out with the stubs of dir/tpl. */
static void qf_test_mx_generate(const char *dir) {
    char tpl[512], outdir[512], *out, *err;
    snprintf(tpl, sizeof tpl, "%s/tpl", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    assert_int_equal(mkdir(tpl, 0777), 0);
    qf_test_mx_templates(tpl, qf_test_mx_nq_stub);
    const char *args[] = {"-o",       outdir, "--templates", tpl, "recipes/mxfp8_2d.lua",
                          "recipes/mxfp8.lua", NULL};
    int rc = qf_test_cli(&out, &err, args);
    if (rc != 0)
        fail_msg("qfuse-gen failed: %s", err);
    free(out), free(err);
}

/* Two runs give byte-identical trees of 2 x 19 kernels + 4 files; the stubs are filled in. */
static void test_gen_mxfp8_reproducible(void **state) {
    (void)state;
    qf_test_dir d1, d2;
    static qf_test_tree t1, t2;
    char p1[600], p2[600];
    qf_test_dir_make_gen(&d1);
    qf_test_dir_make_gen(&d2);
    qf_test_mx_generate(d1.path);
    qf_test_mx_generate(d2.path);
    snprintf(p1, sizeof p1, "%s/out", d1.path);
    snprintf(p2, sizeof p2, "%s/out", d2.path);
    qf_test_list(p1, &t1);
    qf_test_list(p2, &t2);
    assert_int_equal(t1.n, 2 * 19 + 4);
    assert_int_equal(t1.n, t2.n);
    for (int i = 0; i < t1.n; i++) {
        size_t n1 = 0, n2 = 0;
        snprintf(p1, sizeof p1, "%s/out/%s", d1.path, t1.rel[i]);
        snprintf(p2, sizeof p2, "%s/out/%s", d2.path, t2.rel[i]);
        char *a = qf_test_read(p1, &n1), *b = qf_test_read(p2, &n2);
        assert_non_null(a), assert_non_null(b);
        if (strcmp(t1.rel[i], t2.rel[i]) != 0 || n1 != n2 || memcmp(a, b, n1) != 0)
            fail_msg("%s differs between runs", t1.rel[i]);
        free(a), free(b);
    }
    qf_test_dir_remove(d1.path);
    qf_test_dir_remove(d2.path);
}

/* The rendered stubs: BLOCK_2D only in the 2D recipe's weight quantizers; shapes.c's formulas. */
static const struct {
    const char *file, *has;
} qf_test_mx_sources[] = {
    {"kernels/qf_mxfp8_2d_quant_weight_bf16.cu",
     "\n#define __KERNEL_NAME__ qf_mxfp8_2d_quant_weight_bf16\n#define __BLOCK_THREADS__ 256\n"
     "#define __NORM__ QF_NORM_NONE\n#define __ZERO_CENTERED_GAMMA__ 0\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __OUT_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 1\n"
     "#define __TILE_M__ 32\n#line 1 \"templates/smxx_mxfp8_norm_quantize.cu\"\n"
     "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
     "__OUT_DTYPE__, __SCALE_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"kernels/qf_mxfp8_quant_weight_bf16.cu",
     "\n#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_2d_quant_grad_fp16.cu",
     "\n#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_2d_nq_rmsnorm_zcg_fp32.cu",
     "\n#define __NORM__ QF_NORM_RMSNORM\n#define __ZERO_CENTERED_GAMMA__ 1\n"
     "#define __IN_DTYPE__ QF_DTYPE_FP32\n#define __OUT_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_gemm.cu",
     "\n#define __KERNEL_NAME__ qf_mxfp8_gemm\n#define __BLOCK_THREADS__ 256\n"
     "#define __A_DTYPE__ QF_DTYPE_E4M3\n#define __B_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __TILE_M__ 128\n#line 1 \"templates/sm90_mxfp8_gemm.cu\"\nvoid __KERNEL_NAME__() "
     "{ int a[] = {__A_DTYPE__, __B_DTYPE__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(q->M, 128), "
                 "qf_shape_roundup(qf_shape_cdiv(q->K, 32), 4)};"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(qf_shape_cdiv(q->M, 32), 4), "
                 "qf_shape_roundup(q->K, 128)};"},
    {"registry.c", ".family = QF_FAMILY_MXFP8,\n        .op = QF_OP_GEMM,"},
    {"registry.c", ".scale_rounding = QF_SCALE_ROUNDING_CEIL,\n        .block_2d[QF_ROLE_WEIGHT] = 1,"},
    {"registry.c", ".tile_m = 128,\n        .tpl = &qf_templates[0], /* templates/sm90_mxfp8_gemm.cu */\n"
                   "        .entries = QF_ENTRY_BIT(QF_ENTRY_MAIN),\n        .prelude =\n"},
};

static void test_gen_mxfp8_sources(void **state) {
    (void)state;
    qf_test_dir d;
    char p[600];
    qf_test_dir_make_gen(&d);
    qf_test_mx_generate(d.path);
    for (size_t i = 0; i < sizeof qf_test_mx_sources / sizeof qf_test_mx_sources[0]; i++) {
        snprintf(p, sizeof p, "%s/out/%s", d.path, qf_test_mx_sources[i].file);
        char *text = qf_test_read(p, NULL);
        assert_non_null(text);
        if (!strstr(text, qf_test_mx_sources[i].has))
            fail_msg("%s lacks '%s'", qf_test_mx_sources[i].file, qf_test_mx_sources[i].has);
        free(text);
    }
    qf_test_dir_remove(d.path);
}

/* An MXFP8 template without __BLOCK_2D__ is refused, naming the placeholder; nothing written. */
static void test_gen_mxfp8_template_contract(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[600], outdir[512];
    struct stat st;
    qf_test_dir_make_gen(&d);
    qf_test_mx_templates(d.path, "void __KERNEL_NAME__() { int a[] = {__NORM__, "
                                 "__ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __OUT_DTYPE__, "
                                 "__SCALE_ROUNDING__, __BLOCK_THREADS__, __TILE_M__}; }\n");
    snprintf(outdir, sizeof outdir, "%s/out", d.path);
    const char *args[] = {"-o", outdir, "--templates", d.path, "recipes/mxfp8.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(expect, sizeof expect,
             "qfuse-gen: %s/smxx_mxfp8_norm_quantize.cu: value for placeholder '__BLOCK_2D__' is "
             "never used\n",
             d.path);
    assert_string_equal(err, expect);
    assert_int_not_equal(stat(outdir, &st), 0);
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* Evaluates a manifest dim formula (M, K, constants, roundup(a,b), cdiv(a,b)) at *s. */
static int64_t qf_test_eval(const char **s, int64_t M, int64_t K) {
    const char *p = *s;
    if (*p == 'M' || *p == 'K') {
        *s = p + 1;
        return *p == 'M' ? M : K;
    }
    if (*p >= '0' && *p <= '9')
        return strtoll(p, (char **)s, 10);
    int roundup = strncmp(p, "roundup(", 8) == 0;
    assert_true(roundup || strncmp(p, "cdiv(", 5) == 0);
    *s = p + (roundup ? 8 : 5);
    int64_t a = qf_test_eval(s, M, K);
    assert_int_equal(*(*s)++, ',');
    int64_t b = qf_test_eval(s, M, K);
    assert_int_equal(*(*s)++, ')');
    return roundup ? (a + b - 1) / b * b : (a + b - 1) / b;
}

/* Asserts that the dims of manifest output o evaluate to [d0, d1] at M, K. */
static void qf_test_dims_at(const cJSON *o, int64_t M, int64_t K, int64_t d0, int64_t d1) {
    const cJSON *dims = cJSON_GetObjectItem(o, "dims");
    assert_int_equal(cJSON_GetArraySize(dims), 2);
    int64_t want[2] = {d0, d1};
    for (int i = 0; i < 2; i++) {
        const char *f = cJSON_GetArrayItem(dims, i)->valuestring, *s = f;
        int64_t got = qf_test_eval(&s, M, K);
        assert_int_equal(*s, '\0');
        if (got != want[i])
            fail_msg("%s at M=%lld, K=%lld is %lld, expected %lld", f, (long long)M,
                     (long long)K, (long long)got, (long long)want[i]);
    }
}

/* The mxfp8 manifest recipe r's formulas evaluated at SPEC 2.3's padding cases. */
static void qf_test_mx_formulas(const cJSON *r) {
    const cJSON *rs = qf_test_shape_out(r, "norm_quantize", 1);
    const cJSON *cs = qf_test_shape_out(r, "quantize", 3);
    qf_test_dims_at(qf_test_shape_out(r, "quantize", 2), 5, 7, 5, 7); /* [M, K], not transposed */
    qf_test_dims_at(rs, 1, 1, 128, 4);
    qf_test_dims_at(cs, 1, 1, 4, 128);
    qf_test_dims_at(rs, 993, 8192, 1024, 256);
    qf_test_dims_at(cs, 993, 8192, 32, 8192);
    qf_test_dims_at(rs, 32, 32, 128, 4);
    qf_test_dims_at(cs, 32, 32, 4, 128);
    assert_null(cJSON_GetObjectItem(qf_test_shape_out(r, "quantize", 0), "layout"));
}

/* The manifest's mxfp8 options (weight_2d a JSON boolean) and scale formulas. */
static void test_gen_mxfp8_manifest(void **state) {
    (void)state;
    qf_test_dir d;
    cJSON *root;
    char out[512];
    qf_test_dir_make_gen(&d);
    qf_test_mx_generate(d.path);
    snprintf(out, sizeof out, "%s/out", d.path);
    const cJSON *r = qf_test_manifest_recipe(out, &root); /* mxfp8 sorts before mxfp8_2d */
    assert_string_equal(qf_test_json_str(r, "options_string"), QF_MX_OPTIONS_1D);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "options"), "weight_2d")));
    const cJSON *r2 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "recipes"), 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(r2, "options"), "weight_2d")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "kernels")), 19);
    const cJSON *rs = qf_test_shape_out(r, "norm_quantize", 1), *cs;
    assert_string_equal(qf_test_json_str(rs, "name"), "rowwise_scale_inv");
    assert_string_equal(qf_test_json_str(rs, "dtype"), "e8m0");
    assert_string_equal(qf_test_json_str(rs, "bytes"), "roundup(M,128)*roundup(cdiv(K,32),4)");
    assert_string_equal(qf_test_json_str(rs, "layout"), "compact or swizzled (QF_SCALE_SWIZZLED)");
    cs = qf_test_shape_out(r, "quantize", 3);
    assert_string_equal(qf_test_json_str(cs, "name"), "columnwise_scale_inv");
    assert_string_equal(qf_test_json_str(cs, "bytes"), "roundup(cdiv(M,32),4)*roundup(K,128)");
    assert_string_equal(qf_test_json_str(cs, "condition"), "columnwise");
    assert_non_null(strstr(qf_test_json_str(cs, "layout_note"), "same dims and bytes"));
    qf_test_mx_formulas(r);
    cJSON_Delete(root);
    qf_test_dir_remove(d.path);
}

/* Index of the variant named name in recipe ri of plan p; fails the test when absent. */
static int qf_test_plan_variant(const qf_gen_plan *p, int ri, const char *name) {
    for (int i = 0; i < p->recipes[ri].n_variants; i++)
        if (strcmp(p->recipes[ri].variants[i].desc.name, name) == 0)
            return i;
    fail_msg("no variant %s in recipe %d", name, ri);
    return -1;
}

/* Asserts that the keys of kernel `name` of recipe ri as compact and swizzled instances differ
 * exactly when layout_in_key, and that compact is the default instance. */
static void qf_test_layout_key(const qf_gen_plan *p, int ri, const char *name, int layout_in_key) {
    char kd[33], k1[33], k2[33];
    int vi = qf_test_plan_variant(p, ri, name);
    qf_kernel_instance inst = {.outputs = QF_OUT_ROWWISE,
                               .gamma_dtype = p->recipes[ri].variants[vi].desc.in_dtype,
                               .layout = QF_SCALE_LAYOUT_COMPACT};
    qf_gen_plan_key(p, ri, vi, 90, kd);
    qf_gen_plan_key_instance(p, ri, vi, 90, &inst, k1);
    inst.layout = QF_SCALE_LAYOUT_SWIZZLED;
    qf_gen_plan_key_instance(p, ri, vi, 90, &inst, k2);
    assert_string_equal(kd, k1);
    if ((strcmp(k1, k2) != 0) != layout_in_key)
        fail_msg("%s: compact and swizzled keys %s", name, layout_in_key ? "are equal" : "differ");
}

/* Fusion keys (SPEC 5): the 2D weight kernels differ from the 1D ones, and the scale layout
 * changes the key of MXFP8 quantizers only (no GEMM, no fp8_delayed key moved). */
static void test_gen_mxfp8_keys(void **state) {
    (void)state;
    static const struct {
        int ri; /* plan order: fp8_delayed, mxfp8, mxfp8_2d */
        const char *name;
        int layout_in_key;
    } cases[] = {
        {1, "qf_mxfp8_quant_weight_bf16", 1},     {2, "qf_mxfp8_2d_quant_weight_bf16", 1},
        {2, "qf_mxfp8_2d_nq_layernorm_fp16", 1},  {1, "qf_mxfp8_gemm", 0},
        {0, "qf_fp8_delayed_nq_rmsnorm_bf16", 0}, {0, "qf_fp8_delayed_quant_grad_fp32", 0},
    };
    qf_test_dir d;
    qf_gen_plan plan;
    qf_gen_err e;
    char k1[33], k2[33];
    qf_test_dir_make_gen(&d);
    qf_test_mx_templates(d.path, qf_test_mx_nq_stub);
    const qf_gen_opts o = {.templates_dir = d.path, .include_dir = "runtime"};
    const char *paths[] = {"recipes/mxfp8_2d.lua", "recipes/fp8_delayed.lua", "recipes/mxfp8.lua"};
    assert_int_equal(qf_gen_plan_build(&plan, &o, paths, 3, &e), 0);
    qf_gen_plan_key(&plan, 1, qf_test_plan_variant(&plan, 1, "qf_mxfp8_quant_weight_bf16"), 90, k1);
    qf_gen_plan_key(&plan, 2, qf_test_plan_variant(&plan, 2, "qf_mxfp8_2d_quant_weight_bf16"), 90,
                    k2);
    assert_string_not_equal(k1, k2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        qf_test_layout_key(&plan, cases[i].ri, cases[i].name, cases[i].layout_in_key);
    qf_gen_plan_free(&plan);
    qf_test_dir_remove(d.path);
}

/* The layout reaches the variant string and -DQF_SCALE_SWIZZLED of MXFP8 quantizers only; the
 * fp8_delayed variant string is what it was before MXFP8 existed. */
static void test_kernel_key_layout(void **state) {
    (void)state;
    qf_kernel_entry mx = {.name = "qf_x", .family = QF_FAMILY_MXFP8, .op = QF_OP_QUANTIZE,
                          .role = QF_ROLE_WEIGHT, .norm = QF_NORM_NONE, .in_dtype = QF_DTYPE_BF16,
                          .out_dtype = QF_DTYPE_E4M3, .block_threads = 256, .tile_m = 32};
    qf_kernel_entry fp8 = mx, gemm = mx;
    fp8.family = QF_FAMILY_FP8_DELAYED;
    gemm.op = QF_OP_GEMM;
    char buf[256], store[QF_KERNEL_MAX_EXTRA][48];
    const char *opts[QF_KERNEL_MAX_EXTRA];
    qf_kernel_instance inst = qf_kernel_instance_default(&mx);
    assert_int_equal(inst.layout, QF_SCALE_LAYOUT_COMPACT);
    inst.layout = QF_SCALE_LAYOUT_SWIZZLED;
    qf_kernel_variant_string(&fp8, &inst, buf, sizeof buf);
    assert_string_equal(buf, "op=quantize;role=weight;norm=none;zcg=0;in=bf16;out=e4m3;outputs=1;"
                             "gamma=bf16;block=256;tile_m=32");
    assert_int_equal(qf_kernel_extra_options(&fp8, &inst, store, opts), 2);
    qf_kernel_variant_string(&mx, &inst, buf, sizeof buf);
    assert_string_equal(buf, "op=quantize;role=weight;norm=none;zcg=0;in=bf16;out=e4m3;outputs=1;"
                             "gamma=bf16;block=256;tile_m=32;layout=swizzled");
    assert_int_equal(qf_kernel_extra_options(&mx, &inst, store, opts), 3);
    assert_string_equal(opts[2], "-DQF_SCALE_SWIZZLED=1");
    inst.layout = QF_SCALE_LAYOUT_COMPACT;
    assert_int_equal(qf_kernel_extra_options(&mx, &inst, store, opts), 3);
    assert_string_equal(opts[2], "-DQF_SCALE_SWIZZLED=0");
    assert_int_equal(qf_kernel_extra_options(&gemm, &inst, store, opts), 0);
    qf_kernel_variant_string(&gemm, &inst, buf, sizeof buf);
    assert_null(strstr(buf, "layout"));
}

/* qfuse-cache warm's instance lists: MXFP8 quantizers twice over (compact, swizzled). */
static void test_kernel_instances_mxfp8(void **state) {
    (void)state;
    qf_kernel_instance out[QF_KERNEL_MAX_INSTANCES];
    qf_kernel_entry k = {.family = QF_FAMILY_MXFP8, .op = QF_OP_NORM_QUANTIZE,
                         .norm = QF_NORM_LAYERNORM, .in_dtype = QF_DTYPE_BF16};
    assert_int_equal(qf_kernel_instances(&k, out), 12);
    qf_kernel_instance def = qf_kernel_instance_default(&k);
    assert_memory_equal(&out[0], &def, sizeof def);
    int swizzled = 0;
    for (int i = 0; i < 12; i++)
        swizzled += out[i].layout == QF_SCALE_LAYOUT_SWIZZLED;
    assert_int_equal(swizzled, 6);
    k.in_dtype = QF_DTYPE_FP32;
    assert_int_equal(qf_kernel_instances(&k, out), 6);
    k.op = QF_OP_QUANTIZE;
    assert_int_equal(qf_kernel_instances(&k, out), 6);
    k.op = QF_OP_GEMM;
    assert_int_equal(qf_kernel_instances(&k, out), 1);
    k = (qf_kernel_entry){.family = QF_FAMILY_FP8_DELAYED, .op = QF_OP_NORM_QUANTIZE,
                          .norm = QF_NORM_LAYERNORM, .in_dtype = QF_DTYPE_BF16};
    assert_int_equal(qf_kernel_instances(&k, out), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(out[i].layout, QF_SCALE_LAYOUT_COMPACT);
}

/* A malformed formula in a shape table is refused before anything is emitted. */
static void test_shape_formula_check(void **state) {
    (void)state;
    static const char *const bad[] = {"roundup(M,128", "cdiv(M)", "roundup(M,0)", "Q", "MK",
                                      "roundup(cdiv(cdiv(cdiv(cdiv(M,2),2),2),2),2)", "",
                                      "roundup (M,4)", "1234567890"};
    static const char *const good[] = {"roundup(M,128)", "roundup(cdiv(K,32),4)", "cdiv(N,K)",
                                       "123456789"};
    static const qf_fake_op op = {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 0, NULL};
    qf_gen_err e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + sizeof good / sizeof good[0]; i++) {
        int ok = i >= sizeof bad / sizeof bad[0];
        const char *f = ok ? good[i - sizeof bad / sizeof bad[0]] : bad[i];
        qf_fake_out o = {QF_OP_GEMM, "y", QF_DTYPE_BF16, 2, {"M", f}, QF_FAKE_COND_ALWAYS, 0};
        qf_fake_table t = {&op, 1, &o, 1};
        if ((qf_gen_shape_table_check(&t, &e) == 0) != ok)
            fail_msg("formula '%s' is %s", f, ok ? "refused" : "accepted");
        if (!ok)
            assert_string_equal(e.msg, "shape table: output 'y' dim 1 is not a formula of M, N, "
                                       "K, constants, roundup and cdiv");
    }
}

/* ========================================================================= nvfp4 */
/* These tests run the NVFP4 recipes against stub templates (every placeholder of the contract
 * once, nothing else), so they check the generator alone. */

#define QF_NV_RECIPE "recipes/nvfp4.lua"
#define QF_NV_NORT_RECIPE "recipes/nvfp4_nort.lua"
#define QF_NV_OPTIONS                                                                              \
    "family=nvfp4;rht_grad=true;rht_input=true;rht_seed=none;stochastic_rounding_grad=true;"       \
    "weight_2d=true"
#define QF_NV_OPTIONS_NORT                                                                         \
    "family=nvfp4;rht_grad=false;rht_input=false;rht_seed=none;stochastic_rounding_grad=true;"     \
    "weight_2d=true"

static const char qf_test_nv_nq_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
    "__RHT__, __RHT_MASK__, __STOCHASTIC_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, "
    "__TILE_M__}; }\n";
static const char qf_test_nv_gemm_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__BLOCK_THREADS__, __TILE_M__}; }\n";

/* Writes the two NVFP4 stub templates to dir. */
static void qf_test_nv_templates(const char *dir) {
    qf_test_dir_write(dir, "smxx_nvfp4_norm_quantize.cu", qf_test_nv_nq_stub);
    qf_test_dir_write(dir, "sm90_nvfp4_gemm.cu", qf_test_nv_gemm_stub);
}

/* The shipped recipes: TE's NVFP4BlockScaling defaults, and the same without RHT. */
static void test_recipe_nvfp4_data(void **state) {
    (void)state;
    qf_recipe r;
    char opts[256];
    qf_test_load_ok(QF_NV_RECIPE, &r);
    assert_string_equal(r.name, "nvfp4");
    assert_string_equal(r.file, "recipes/nvfp4.lua");
    assert_int_equal(r.family, QF_FAMILY_NVFP4);
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(r.fmt[i], QF_DTYPE_E2M1);
    assert_true(r.rht[QF_ROLE_INPUT] && r.rht[QF_ROLE_GRAD] && !r.rht[QF_ROLE_WEIGHT]);
    assert_true(r.sr[QF_ROLE_GRAD] && r.block_2d[QF_ROLE_WEIGHT] && r.rht_seed < 0);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_NV_OPTIONS);
    qf_test_load_ok(QF_NV_NORT_RECIPE, &r);
    assert_true(!r.rht[QF_ROLE_INPUT] && !r.rht[QF_ROLE_GRAD] && !r.rht[QF_ROLE_WEIGHT]);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_NV_OPTIONS_NORT);
}

/* A bare {family = "nvfp4"} has TE's defaults; every option away from its default, the list
 * sorted, booleans and a given rht_seed typed, an absent one the string "none". */
static void test_recipe_nvfp4_options(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_err e;
    qf_gen_option o[QF_GEN_OPTIONS_MAX];
    char opts[256];
    qf_test_dir_make_gen(&d);
    assert_int_equal(
        qf_test_load(d.path, "b.lua", "return {family = 'nvfp4'}", NULL, &r, &e, NULL, 0), 0);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, QF_NV_OPTIONS);
    assert_int_equal(qf_gen_recipe_option_list(&r, o), 6);
    assert_true(!o[3].is_integer && !o[3].is_boolean); /* rht_seed=none */
    const char *text = "return {family = 'nvfp4', rht_input = true, rht_grad = false,\n"
                       "  stochastic_rounding_grad = false, weight_2d = false,\n"
                       "  rht_seed = 9223372036854775807, description = 'seeded'}";
    assert_int_equal(qf_test_load(d.path, "s.lua", text, NULL, &r, &e, NULL, 0), 0);
    assert_true(r.rht[QF_ROLE_INPUT] && !r.rht[QF_ROLE_GRAD]);
    assert_true(r.rht_seed == 9223372036854775807ll);
    qf_gen_recipe_options(&r, opts, sizeof opts);
    assert_string_equal(opts, "family=nvfp4;rht_grad=false;rht_input=true;"
                              "rht_seed=9223372036854775807;stochastic_rounding_grad=false;"
                              "weight_2d=false");
    int n = qf_gen_recipe_option_list(&r, o);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(o[i - 1].key, o[i].key) < 0);
    assert_true(o[3].is_integer && o[1].is_boolean && o[5].is_boolean);
    qf_test_dir_remove(d.path);
}

/* The 19 kernels of nvfp4.lua (the MXFP8 set under the nvfp4 prefix) and their configs. */
static void test_variants_nvfp4_names(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    char expect[128];
    int n = qf_test_variants_of(QF_NV_RECIPE, &r, v);
    assert_int_equal(n, 12 + 6 + 1);
    for (int i = 0; i < n; i++) {
        snprintf(expect, sizeof expect, "qf_nvfp4_%s", qf_test_mx_names[i] + strlen("qf_mxfp8_"));
        assert_string_equal(v[i].desc.name, expect);
        int gemm = v[i].desc.op == QF_OP_GEMM;
        assert_string_equal(v[i].cfg.template_name,
                            gemm ? "sm90_nvfp4_gemm.cu" : "smxx_nvfp4_norm_quantize.cu");
        assert_int_equal(v[i].cfg.block_threads, 256);
        assert_int_equal(v[i].cfg.tile_m, gemm ? 128 : 32);
        assert_int_equal(v[i].desc.out_dtype, gemm ? QF_DTYPE_BF16 : QF_DTYPE_E2M1);
    }
    assert_int_equal(v[0].desc.in_dtype, QF_DTYPE_E2M1);
}

/* Asserts __RHT__ __RHT_MASK__ __STOCHASTIC_ROUNDING__ __BLOCK_2D__ of kernel name. */
static void qf_test_nv_flags(const qf_recipe *r, const qf_gen_variant *v, int n,
                             const char *name, const char *rht, const char *mask, const char *sr,
                             const char *b2d) {
    qf_gen_values vals;
    qf_gen_variant_values(r, qf_test_variant(v, n, name), &vals);
    const char *kv[] = {"__RHT__",      rht, "__RHT_MASK__", mask, "__STOCHASTIC_ROUNDING__", sr,
                        "__BLOCK_2D__", b2d};
    for (int i = 0; i < 4; i++)
        if (strcmp(qf_test_value(&vals, kv[2 * i]), kv[2 * i + 1]) != 0)
            fail_msg("%s: %s = %s, expected %s", name, kv[2 * i], qf_test_value(&vals, kv[2 * i]),
                     kv[2 * i + 1]);
}

/* The placeholder contract of the NVFP4 templates (gen_variant.h) and RHT/SR/2D per role. */
static void test_variants_nvfp4_values(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    qf_gen_values vals;
    int n = qf_test_variants_of(QF_NV_RECIPE, &r, v);
    const char *nq[] = {"__KERNEL_NAME__",
                        "qf_nvfp4_nq_rmsnorm_zcg_fp16",
                        "__BLOCK_THREADS__",
                        "256",
                        "__NORM__",
                        "QF_NORM_RMSNORM",
                        "__ZERO_CENTERED_GAMMA__",
                        "1",
                        "__IN_DTYPE__",
                        "QF_DTYPE_FP16",
                        "__RHT__",
                        "1",
                        "__RHT_MASK__",
                        "0xD7E8",
                        "__STOCHASTIC_ROUNDING__",
                        "0",
                        "__BLOCK_2D__",
                        "0",
                        "__TILE_M__",
                        "32"};
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_nvfp4_nq_rmsnorm_zcg_fp16"), &vals);
    qf_test_values_are(&vals, 10, nq);
    const char *g[] = {
        "__KERNEL_NAME__", "qf_nvfp4_gemm", "__BLOCK_THREADS__", "256", "__TILE_M__", "128"};
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_nvfp4_gemm"), &vals);
    qf_test_values_are(&vals, 3, g);
    qf_test_nv_flags(&r, v, n, "qf_nvfp4_quant_weight_bf16", "0", "0x0000", "0", "1");
    qf_test_nv_flags(&r, v, n, "qf_nvfp4_quant_grad_fp32", "1", "0xD7E8", "1", "0");
    n = qf_test_variants_of(QF_NV_NORT_RECIPE, &r, v);
    qf_test_nv_flags(&r, v, n, "qf_nvfp4_nort_nq_layernorm_bf16", "0", "0x0000", "0", "0");
    qf_test_nv_flags(&r, v, n, "qf_nvfp4_nort_quant_grad_bf16", "0", "0x0000", "1", "0");
    qf_test_nv_flags(&r, v, n, "qf_nvfp4_nort_quant_weight_fp16", "0", "0x0000", "0", "1");
}

/* rht_seed: the mask of the RHT kernels is drawn from the seed (SPEC 2.4); the others keep 0. */
static void test_variants_nvfp4_seed(void **state) {
    (void)state;
    qf_test_dir d;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    char mask[16];
    qf_test_dir_make_gen(&d);
    const char *path = qf_test_dir_write(d.path, "nvs.lua",
                                     "return {family = 'nvfp4', rht_seed = 42,"
                                     " rht_grad = false}");
    int n = qf_test_variants_of(path, &r, v);
    snprintf(mask, sizeof mask, "0x%04X", (unsigned)qf_nvfp4_rht_mask_from_seed_ref(42));
    assert_string_not_equal(mask, "0xD7E8");
    qf_test_nv_flags(&r, v, n, "qf_nvs_nq_layernorm_fp32", "1", mask, "0", "0");
    qf_test_nv_flags(&r, v, n, "qf_nvs_quant_grad_fp32", "0", "0x0000", "1", "0");
    qf_test_dir_remove(d.path);
}

/* Without its templates the NVFP4 recipe is refused naming the missing file (first the GEMM's,
 * whose kernel sorts first), and nothing is written. */
static void test_gen_nvfp4_missing_template(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[600], outdir[512];
    struct stat st;
    qf_test_dir_make_gen(&d);
    snprintf(outdir, sizeof outdir, "%s/out", d.path);
    const char *args[] = {"-o", outdir, "--templates", d.path, QF_NV_RECIPE, NULL};
    const char *const files[] = {"sm90_nvfp4_gemm.cu", "smxx_nvfp4_norm_quantize.cu"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(qf_test_cli(&out, &err, args), 1);
        snprintf(expect, sizeof expect,
                 "qfuse-gen: %s/%s: cannot open template (No such file or directory)\n", d.path,
                 files[i]);
        assert_string_equal(err, expect);
        assert_int_not_equal(stat(outdir, &st), 0);
        free(out), free(err);
        qf_test_dir_write(d.path, "sm90_nvfp4_gemm.cu", qf_test_nv_gemm_stub);
    }
    qf_test_dir_remove(d.path);
}

/* Generates the two test-data NVFP4 recipes into dir/out with the stubs of dir/tpl. */
static void qf_test_nv_generate(const char *dir) {
    char tpl[512], outdir[512], *out, *err;
    snprintf(tpl, sizeof tpl, "%s/tpl", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    assert_int_equal(mkdir(tpl, 0777), 0);
    qf_test_nv_templates(tpl);
    const char *args[] = {"-o", outdir, "--templates", tpl, QF_NV_NORT_RECIPE, QF_NV_RECIPE, NULL};
    if (qf_test_cli(&out, &err, args) != 0)
        fail_msg("qfuse-gen failed: %s", err);
    free(out), free(err);
}

/* The rendered stubs, shapes.c's multiple-of-16 (GEMM: 32) checks and packed dims, registry.c's
 * fields. */
static const struct {
    const char *file, *has;
} qf_test_nv_sources[] = {
    {"kernels/qf_nvfp4_quant_grad_bf16.cu",
     "\n#define __KERNEL_NAME__ qf_nvfp4_quant_grad_bf16\n#define __BLOCK_THREADS__ 256\n"
     "#define __NORM__ QF_NORM_NONE\n#define __ZERO_CENTERED_GAMMA__ 0\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 1\n#define __RHT_MASK__ 0xD7E8\n"
     "#define __STOCHASTIC_ROUNDING__ 1\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n"
     "#line 1 \"templates/smxx_nvfp4_norm_quantize.cu\"\nvoid __KERNEL_NAME__() { int a[] = "
     "{__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __RHT__, __RHT_MASK__, "
     "__STOCHASTIC_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"kernels/qf_nvfp4_nort_quant_grad_bf16.cu",
     "\n#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 0\n#define __RHT_MASK__ 0x0000\n"
     "#define __STOCHASTIC_ROUNDING__ 1\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_quant_weight_fp32.cu",
     "\n#define __IN_DTYPE__ QF_DTYPE_FP32\n#define __RHT__ 0\n#define __RHT_MASK__ 0x0000\n"
     "#define __STOCHASTIC_ROUNDING__ 0\n#define __BLOCK_2D__ 1\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_nq_layernorm_zcg_bf16.cu",
     "\n#define __NORM__ QF_NORM_LAYERNORM\n#define __ZERO_CENTERED_GAMMA__ 1\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 1\n#define __RHT_MASK__ 0xD7E8\n"
     "#define __STOCHASTIC_ROUNDING__ 0\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_gemm.cu",
     "\n#define __KERNEL_NAME__ qf_nvfp4_gemm\n#define __BLOCK_THREADS__ 256\n"
     "#define __TILE_M__ 128\n#line 1 \"templates/sm90_nvfp4_gemm.cu\"\n"},
    {"shapes.c", "    if (q->M % 16 != 0 || q->K % 16 != 0)\n        return -1;\n"},
    {"shapes.c", "    if (q->K % 32 != 0)\n        return -1;\n"},
    {"shapes.c", "const int64_t d[] = {q->M, qf_shape_cdiv(q->K, 2)};"},
    {"shapes.c", "const int64_t d[] = {q->K, qf_shape_cdiv(q->M, 2)};"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(q->K, 128), "
                 "qf_shape_roundup(qf_shape_cdiv(q->M, 16), 4)};"},
    {"shapes.c", "uint64_t bytes = dt == QF_DTYPE_E2M1 ? 1 : qf_dtype_size(dt);"},
    {"registry.c", ".rht[QF_ROLE_GRAD] = 1,\n        .rht[QF_ROLE_INPUT] = 1,\n"
                   "        .rht_seed = -1LL,\n        .sr[QF_ROLE_GRAD] = 1,\n"
                   "        .block_2d[QF_ROLE_WEIGHT] = 1,\n"},
    {"registry.c", ".family = QF_FAMILY_NVFP4,\n        .op = QF_OP_GEMM,"},
};

static void test_gen_nvfp4_sources(void **state) {
    (void)state;
    qf_test_dir d;
    char p[600];
    qf_test_dir_make_gen(&d);
    qf_test_nv_generate(d.path);
    for (size_t i = 0; i < sizeof qf_test_nv_sources / sizeof qf_test_nv_sources[0]; i++) {
        snprintf(p, sizeof p, "%s/out/%s", d.path, qf_test_nv_sources[i].file);
        char *text = qf_test_read(p, NULL);
        assert_non_null(text);
        if (!strstr(text, qf_test_nv_sources[i].has))
            fail_msg("%s lacks '%s'", qf_test_nv_sources[i].file, qf_test_nv_sources[i].has);
        free(text);
    }
    qf_test_dir_remove(d.path);
}

/* The nvfp4 quantizer formulas of manifest recipe r at SPEC 2.4's cases: output i of op at
 * (M, K) is [d0, d1]. */
static void qf_test_nv_formulas(const cJSON *r) {
    static const struct {
        const char *op;
        int i;
        int64_t M, K, d0, d1;
    } c[] = {
        {"quantize", 0, 32, 64, 32, 32},
        {"quantize", 2, 32, 64, 64, 16},
        {"quantize", 1, 16, 16, 128, 4},
        {"quantize", 3, 16, 16, 128, 4},
        {"norm_quantize", 1, 16, 8192, 128, 512},
        {"norm_quantize", 3, 16, 8192, 8192, 4},
        {"norm_quantize", 1, 4096, 1040, 4096, 68},
        {"norm_quantize", 3, 4096, 1040, 1152, 256},
        {"norm_quantize", 2, 4096, 1040, 1040, 2048},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        qf_test_dims_at(qf_test_shape_out(r, c[i].op, c[i].i), c[i].M, c[i].K, c[i].d0, c[i].d1);
}

/* Asserts name, dtype, bytes and condition of output i of op in manifest recipe r. */
static void qf_test_nv_out(const cJSON *r, const char *op, int i, const char *name,
                           const char *dtype, const char *bytes, const char *cond) {
    const cJSON *o = qf_test_shape_out(r, op, i);
    assert_string_equal(qf_test_json_str(o, "name"), name);
    assert_string_equal(qf_test_json_str(o, "dtype"), dtype);
    assert_string_equal(qf_test_json_str(o, "bytes"), bytes);
    assert_string_equal(qf_test_json_str(o, "condition"), cond);
}

/* The nvfp4 outputs of manifest recipe r: packed data (dims in bytes), E4M3 scales, amaxes. */
static void qf_test_nv_outputs(const cJSON *r) {
    qf_test_nv_out(r, "norm_quantize", 0, "rowwise_data", "format[input]", "M*cdiv(K,2)",
                   "rowwise");
    assert_non_null(strstr(qf_test_json_str(qf_test_shape_out(r, "norm_quantize", 0), "packing"),
                           "dims count bytes"));
    qf_test_nv_out(r, "norm_quantize", 1, "rowwise_scale_inv", "e4m3",
                   "roundup(M,128)*roundup(cdiv(K,16),4)", "rowwise");
    qf_test_nv_out(r, "quantize", 2, "columnwise_data", "format[role]", "K*cdiv(M,2)",
                   "columnwise");
    qf_test_nv_out(r, "quantize", 3, "columnwise_scale_inv", "e4m3",
                   "roundup(K,128)*roundup(cdiv(M,16),4)", "columnwise");
    qf_test_nv_out(r, "quantize", 4, "amax_rowwise", "fp32", "4", "rowwise");
    qf_test_nv_out(r, "quantize", 5, "amax_columnwise", "fp32", "4", "columnwise");
    qf_test_nv_out(r, "norm_quantize", 6, "mu", "fp32", "4*M", "norm == layernorm");
    qf_test_nv_out(r, "gemm", 0, "y", "bf16", "2*M*N", "always");
    assert_null(cJSON_GetObjectItem(qf_test_shape_out(r, "quantize", 4), "packing"));
}

/* The manifest's nvfp4 options (rht_seed "none"), requirements and shape formulas (SPEC 2.4). */
static void test_gen_nvfp4_manifest(void **state) {
    (void)state;
    qf_test_dir d;
    cJSON *root;
    char out[512];
    qf_test_dir_make_gen(&d);
    qf_test_nv_generate(d.path);
    snprintf(out, sizeof out, "%s/out", d.path);
    const cJSON *r = qf_test_manifest_recipe(out, &root), *opts = cJSON_GetObjectItem(r, "options");
    assert_string_equal(qf_test_json_str(r, "options_string"), QF_NV_OPTIONS);
    assert_string_equal(qf_test_json_str(opts, "rht_seed"), "none");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(opts, "rht_input")));
    assert_string_equal(qf_test_json_str(cJSON_GetObjectItem(r, "formats"), "grad"), "e2m1");
    const cJSON *nq = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), "norm_quantize");
    assert_string_equal(qf_test_json_str(nq, "requires"),
                        "M > 0 && K > 0 && (rowwise || columnwise) && M % 16 == 0 && K % 16 == 0");
    const cJSON *gm = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), "gemm");
    assert_string_equal(qf_test_json_str(gm, "requires"), "M > 0 && N > 0 && K > 0 && K % 32 == 0");
    qf_test_nv_outputs(r);
    qf_test_nv_formulas(r);
    cJSON_Delete(root);
    qf_test_dir_remove(d.path);
}

/* Builds a plan of recipe text written as dir/nvx.lua (one name: keys comparable across plans)
 * with the NVFP4 stubs of dir. */
static void qf_test_nv_plan(const char *dir, const char *text, qf_gen_plan *p) {
    qf_gen_err e;
    const qf_gen_opts o = {.templates_dir = dir, .include_dir = "runtime"};
    const char *paths[] = {qf_test_dir_write(dir, "nvx.lua", text)};
    qf_test_nv_templates(dir);
    if (qf_gen_plan_build(p, &o, paths, 1, &e) != 0)
        fail_msg("%s", e.msg);
}

/* Asserts that kernel name's source (and so its key) differs between plans a and b exactly when
 * changed; its key differs in any case when the options do (SPEC 5). */
static void qf_test_nv_diff(const qf_gen_plan *a, const qf_gen_plan *b, const char *name,
                            int changed) {
    char ka[33], kb[33];
    int va = qf_test_plan_variant(a, 0, name), vb = qf_test_plan_variant(b, 0, name);
    int src = strcmp(a->recipes[0].sources[va], b->recipes[0].sources[vb]) != 0;
    if (src != changed)
        fail_msg("%s: source %s", name, changed ? "unchanged" : "changed");
    qf_gen_plan_key(a, 0, va, 90, ka);
    qf_gen_plan_key(b, 0, vb, 90, kb);
    assert_string_not_equal(ka, kb);
}

/* Fusion keys (SPEC 5; TE's ops/fuser.py reused an NVFP4 plan after RHT was disabled): turning
 * off RHT, SR or 2D, or seeding the RHT, changes the source and key of exactly the kernels that
 * use it. */
static void test_gen_nvfp4_keys(void **state) {
    (void)state;
    static const struct {
        const char *opt;
        int nq, grad, weight; /* source changes of nq_layernorm_bf16, quant_grad/weight_bf16 */
    } c[] = {
        {"rht_input = false", 1, 0, 0},
        {"rht_grad = false", 0, 1, 0},
        {"stochastic_rounding_grad = false", 0, 1, 0},
        {"weight_2d = false", 0, 0, 1},
        {"rht_seed = 42", 1, 1, 0},
    };
    qf_test_dir d0, d1;
    qf_gen_plan base, p;
    char text[256];
    qf_test_dir_make_gen(&d0);
    qf_test_nv_plan(d0.path, "return {family = 'nvfp4'}", &base);
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        qf_test_dir_make_gen(&d1);
        snprintf(text, sizeof text, "return {family = 'nvfp4', %s}", c[i].opt);
        qf_test_nv_plan(d1.path, text, &p);
        qf_test_nv_diff(&base, &p, "qf_nvx_nq_layernorm_bf16", c[i].nq);
        qf_test_nv_diff(&base, &p, "qf_nvx_quant_grad_bf16", c[i].grad);
        qf_test_nv_diff(&base, &p, "qf_nvx_quant_weight_bf16", c[i].weight);
        qf_test_nv_diff(&base, &p, "qf_nvx_gemm", 0);
        qf_gen_plan_free(&p);
        qf_test_dir_remove(d1.path);
    }
    qf_gen_plan_free(&base);
    qf_test_dir_remove(d0.path);
}

/* ========================================================================= CLI */

static void test_cli_check_shipped(void **state) {
    (void)state;
    char *out, *err;
    const char *args[] = {"--check", "recipes/fp8_delayed.lua", "recipes/mxfp8.lua",
                          "recipes/mxfp8_2d.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    assert_string_equal(out, "recipes/fp8_delayed.lua: ok\nrecipes/mxfp8.lua: ok\n"
                             "recipes/mxfp8_2d.lua: ok\n");
    assert_string_equal(err, "");
    free(out), free(err);
}

/* --list prints every variant with a key and writes nothing. */
static void test_cli_list(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, outdir[512];
    struct stat st;
    qf_test_dir_make_gen(&d);
    snprintf(outdir, sizeof outdir, "%s/none", d.path);
    const char *args[] = {"--list", "-o", outdir, "--arch", "sm_100", "recipes/fp8_delayed.lua",
                          NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    assert_non_null(strstr(out, "keys for sm_100"));
    assert_non_null(strstr(out, "qf_fp8_delayed_nq_rmsnorm_zcg_fp16: op=norm_quantize"));
    int lines = 0;
    for (const char *s = out; *s; s++)
        lines += *s == '\n';
    assert_int_equal(lines, 1 + 19);
    assert_int_not_equal(stat(outdir, &st), 0);
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* The key depends on the arch. */
static void test_cli_list_arch_changes_key(void **state) {
    (void)state;
    char *o90, *o100, *err;
    const char *a90[] = {"--list", "recipes/fp8_delayed.lua", NULL};
    const char *a100[] = {"--list", "--arch=sm_100", "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&o90, &err, a90), 0);
    free(err);
    assert_int_equal(qf_test_cli(&o100, &err, a100), 0);
    free(err);
    const char *l90 = strchr(o90, '\n') + 1, *l100 = strchr(o100, '\n') + 1;
    assert_memory_not_equal(l90, l100, 34);
    free(o90), free(o100);
}

typedef struct qf_cli_case {
    const char *args[6];
    int rc;
    const char *out_has, *err_has;
} qf_cli_case;

static void test_cli_usage(void **state) {
    (void)state;
    static const qf_cli_case cases[] = {
        {{"--help", NULL}, 0, "usage: qfuse-gen", ""},
        {{"--version", NULL}, 0, "qfuse-gen " QF_GEN_VERSION "\n", ""},
        {{NULL}, 2, "", "no recipe given"},
        {{"--bogus", "recipes/fp8_delayed.lua", NULL}, 2, "", "unknown option '--bogus'"},
        {{"--arch", "90", "recipes/fp8_delayed.lua", NULL}, 2, "", "--arch '90' is not a supported"},
        {{"--check", "--list", "recipes/fp8_delayed.lua", NULL}, 2, "", "exclusive"},
        {{"--list", "--arch", "sm_80", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "expected sm_XX with XX in 89..199"},
        {{"recipes/fp8_delayed.lua", "-o", NULL}, 2, "", "option '-o' needs a value"},
        {{"--check", "recipes/nope.lua", NULL}, 1, "", "cannot open recipes/nope.lua"},
        {{"--check", "--include", "/nonexistent", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "/nonexistent/qf_formats.h: cannot open header"},
        {{"--check", "recipes/fp8_delayed.lua", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "recipe 'fp8_delayed' is given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = qf_test_cli(&out, &err, cases[i].args);
        if (rc != cases[i].rc || !strstr(out, cases[i].out_has) || !strstr(err, cases[i].err_has))
            fail_msg("case %zu: rc %d, out '%s', err '%s'", i, rc, out, err);
        free(out), free(err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QF_ERROR_TEST(0),
        QF_ERROR_TEST(1),
        QF_ERROR_TEST(2),
        QF_ERROR_TEST(3),
        QF_ERROR_TEST(4),
        QF_ERROR_TEST(5),
        QF_ERROR_TEST(6),
        QF_ERROR_TEST(7),
        QF_ERROR_TEST(8),
        QF_ERROR_TEST(9),
        QF_ERROR_TEST(10),
        QF_ERROR_TEST(11),
        QF_ERROR_TEST(12),
        QF_ERROR_TEST(13),
        QF_ERROR_TEST(14),
        QF_ERROR_TEST(15),
        QF_ERROR_TEST(16),
        QF_ERROR_TEST(17),
        QF_ERROR_TEST(18),
        QF_ERROR_TEST(19),
        QF_ERROR_TEST(20),
        QF_ERROR_TEST(21),
        QF_ERROR_TEST(22),
        QF_ERROR_TEST(23),
        QF_ERROR_TEST(24),
        QF_ERROR_TEST(25),
        QF_ERROR_TEST(26),
        QF_ERROR_TEST(27),
        QF_ERROR_TEST(28),
        QF_ERROR_TEST(29),
        QF_ERROR_TEST(30),
        QF_ERROR_TEST(31),
        QF_ERROR_TEST(32),
        QF_ERROR_TEST(33),
        QF_ERROR_TEST(34),
        QF_ERROR_TEST(35),
        QF_ERROR_TEST(36),
        QF_ERROR_TEST(37),
        QF_ERROR_TEST(38),
        QF_ERROR_TEST(39),
        QF_ERROR_TEST(40),
        QF_ERROR_TEST(41),
        QF_ERROR_TEST(42),
        QF_ERROR_TEST(43),
        QF_ERROR_TEST(44),
        QF_ERROR_TEST(45),
        QF_ERROR_TEST(46),
        QF_ERROR_TEST(47),
        QF_ERROR_TEST(48),
        QF_ERROR_TEST(49),
        QF_ERROR_TEST(50),
        QF_ERROR_TEST(51),
        QF_ERROR_TEST(52),
        QF_ERROR_TEST(53),
        QF_ERROR_TEST(54),
        QF_ERROR_TEST(55),
        QF_ERROR_TEST(56),
        QF_ERROR_TEST(57),
        QF_ERROR_TEST(58),
        QF_ERROR_TEST(59),
        QF_ERROR_TEST(60),
        QF_ERROR_TEST(61),
        cmocka_unit_test(test_recipe_empty_env),
        cmocka_unit_test(test_recipe_memory_table),
        cmocka_unit_test(test_recipe_budget_custom),
        cmocka_unit_test(test_recipe_binary_chunk),
        cmocka_unit_test(test_recipe_missing_file),
        cmocka_unit_test(test_recipe_defaults),
        cmocka_unit_test(test_recipe_all_options),
        cmocka_unit_test(test_variants_fp8_delayed),
        cmocka_unit_test(test_variants_invariants),
        cmocka_unit_test(test_recipe_mxfp8_shipped),
        cmocka_unit_test(test_recipe_mxfp8_defaults),
        cmocka_unit_test(test_recipe_mxfp8_all_options),
        cmocka_unit_test(test_variants_mxfp8_names),
        cmocka_unit_test(test_variants_mxfp8_2d),
        cmocka_unit_test(test_variants_mxfp8_values),
        cmocka_unit_test(test_variants_mxfp8_options_reach_values),
        cmocka_unit_test(test_render_ok),
        cmocka_unit_test(test_render_unfilled),
        cmocka_unit_test(test_render_unused),
        cmocka_unit_test(test_placeholder_rule),
        cmocka_unit_test(test_template_entries),
        cmocka_unit_test(test_header_check),
        cmocka_unit_test(test_c_literal),
        cmocka_unit_test(test_gen_template_unfilled),
        cmocka_unit_test(test_gen_template_unused_value),
        cmocka_unit_test(test_gen_header_placeholder),
        cmocka_unit_test(test_gen_reproducible),
        cmocka_unit_test(test_gen_banners),
        cmocka_unit_test(test_gen_stale_removed),
        cmocka_unit_test(test_gen_matches_registry),
        cmocka_unit_test(test_gen_manifest_shapes),
        cmocka_unit_test(test_gen_mxfp8_reproducible),
        cmocka_unit_test(test_gen_mxfp8_sources),
        cmocka_unit_test(test_gen_mxfp8_template_contract),
        cmocka_unit_test(test_gen_mxfp8_manifest),
        cmocka_unit_test(test_gen_mxfp8_keys),
        cmocka_unit_test(test_kernel_key_layout),
        cmocka_unit_test(test_kernel_instances_mxfp8),
        cmocka_unit_test(test_recipe_nvfp4_data),
        cmocka_unit_test(test_recipe_nvfp4_options),
        cmocka_unit_test(test_variants_nvfp4_names),
        cmocka_unit_test(test_variants_nvfp4_values),
        cmocka_unit_test(test_variants_nvfp4_seed),
        cmocka_unit_test(test_gen_nvfp4_missing_template),
        cmocka_unit_test(test_gen_nvfp4_sources),
        cmocka_unit_test(test_gen_nvfp4_manifest),
        cmocka_unit_test(test_gen_nvfp4_keys),
        cmocka_unit_test(test_shape_formula_check),
        cmocka_unit_test(test_cli_fields),
        cmocka_unit_test(test_cli_check_shipped),
        cmocka_unit_test(test_cli_list),
        cmocka_unit_test(test_cli_list_arch_changes_key),
        cmocka_unit_test(test_cli_usage),
    };
    _Static_assert(sizeof qf_error_cases / sizeof qf_error_cases[0] == 62,
                   "add a QF_ERROR_TEST line per error case");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
