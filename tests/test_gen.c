/* test_gen.c: qfuse-gen: recipe sandbox and validation errors, variants, template rendering,
 * reproducible output, banners, the CLI, and agreement of out/ with the compiled registry. */
#include "test_util.h"

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
#include "registry.h"

#define QF_BANNER_END " \xe2\x80\x94 do not edit */"

/* ========================================================================= helpers */

typedef struct qf_test_dir {
    char path[256];
} qf_test_dir;

static void qf_test_mkdtemp(qf_test_dir *d) {
    snprintf(d->path, sizeof d->path, "/tmp/qf_test_gen.XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static int qf_test_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void qf_test_rmtree(const char *path) {
    nftw(path, qf_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes text to dir/name and returns the path in a static rotating buffer. */
static const char *qf_test_write(const char *dir, const char *name, const char *text) {
    static char bufs[4][512];
    static int next;
    char *path = bufs[next++ % 4];
    snprintf(path, 512, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
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
                        const qf_gen_limits *lim, qf_gen_recipe *r, qf_gen_err *e, char *path_out,
                        size_t n) {
    const char *path = qf_test_write(dir, name, text);
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
static const qf_error_case qf_error_cases[] = {
    {"x.lua", "return {" FAM "margin = \"2\"}", "field 'margin' (integer expected, got string)", 0},
    {"x.lua", "return {" FAM "format = \"e5m3\"}",
     "field 'format' (one of 'hybrid', 'e4m3' expected, got 'e5m3')", 0},
    {"x.lua", "return {" FAM "marg = 1}", "unknown field 'marg'", 0},
    {"x.lua", "return {" FAM "zeta = 1, beta = 2}", "unknown field 'beta'", 0},
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
    {"x.lua", "return {family = \"mxfp8\"}", "family 'mxfp8' is not implemented yet", 0},
    {"x.lua", "return {family = \"nvfp4\", block = 16}", "family 'nvfp4' is not implemented yet",
     0},
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
};

static void test_recipe_error(void **state) {
    const qf_error_case *c = *state;
    qf_test_dir d;
    qf_gen_recipe r;
    qf_gen_err e;
    char path[512], expect[1024];
    qf_test_mkdtemp(&d);
    assert_int_equal(qf_test_load(d.path, c->file, c->text, NULL, &r, &e, path, sizeof path), -1);
    snprintf(expect, sizeof expect, "%s: %s", path, c->expect);
    if (c->contains) {
        if (!strstr(e.msg, c->expect) || strncmp(e.msg, path, strlen(path)) != 0)
            fail_msg("message '%s' lacks '%s'", e.msg, expect);
    } else {
        assert_string_equal(e.msg, expect);
    }
    qf_test_rmtree(d.path);
}

#define QF_ERROR_TEST(i) cmocka_unit_test_prestate(test_recipe_error, (void *)&qf_error_cases[i])

/* ========================================================================= sandbox */

/* io, os, require, load, dofile, string... are all nil inside a recipe. */
static void test_recipe_empty_env(void **state) {
    (void)state;
    qf_test_dir d;
    qf_gen_recipe r;
    qf_gen_err e;
    qf_test_mkdtemp(&d);
    const char *text =
        "local none = io == nil and os == nil and require == nil and load == nil and\n"
        "  dofile == nil and string == nil and print == nil and pcall == nil and\n"
        "  setmetatable == nil and _G == nil and loadstring == nil and debug == nil\n"
        "return {family = 'fp8_delayed', margin = none and 7 or 8}\n";
    assert_int_equal(qf_test_load(d.path, "env.lua", text, NULL, &r, &e, NULL, 0), 0);
    assert_int_equal(r.margin, 7);
    qf_test_rmtree(d.path);
}

/* A huge table hits a smaller heap cap with the memory message, not the instruction budget. */
static void test_recipe_memory_table(void **state) {
    (void)state;
    qf_test_dir d;
    qf_gen_recipe r;
    qf_gen_err e;
    qf_gen_limits lim = {.mem_bytes = 1u << 20};
    char path[512], expect[1024];
    qf_test_mkdtemp(&d);
    const char *text = "local t = {} for i = 1, 1e8 do t[i] = i end return {}";
    assert_int_equal(qf_test_load(d.path, "big.lua", text, &lim, &r, &e, path, sizeof path), -1);
    snprintf(expect, sizeof expect, "%s: memory limit of 1048576 bytes (1 MiB) exceeded", path);
    assert_string_equal(e.msg, expect);
    qf_test_rmtree(d.path);
}

/* A smaller instruction budget applies and is named. */
static void test_recipe_budget_custom(void **state) {
    (void)state;
    qf_test_dir d;
    qf_gen_recipe r;
    qf_gen_err e;
    qf_gen_limits lim = {.instructions = 5000};
    qf_test_mkdtemp(&d);
    const char *text = "local n = 0 for i = 1, 100000 do n = n + i end return {}";
    assert_int_equal(qf_test_load(d.path, "loop.lua", text, &lim, &r, &e, NULL, 0), -1);
    assert_non_null(strstr(e.msg, "instruction budget of 5000 exceeded"));
    assert_non_null(strstr(e.msg, "stack traceback:")); /* errors in recipe code are located */
    qf_test_rmtree(d.path);
}

static int qf_test_lua_writer(lua_State *L, const void *p, size_t n, void *ud) {
    (void)L;
    return fwrite(p, 1, n, ud) != n;
}

/* A precompiled (binary) chunk is refused: recipes are text. */
static void test_recipe_binary_chunk(void **state) {
    (void)state;
    qf_test_dir d;
    qf_gen_recipe r;
    qf_gen_err e;
    char path[512], expect[1024];
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
}

static void test_recipe_missing_file(void **state) {
    (void)state;
    qf_gen_recipe r;
    qf_gen_err e;
    assert_int_equal(qf_gen_recipe_load("/nonexistent/nope.lua", NULL, &r, &e), -1);
    assert_non_null(strstr(e.msg, "cannot open /nonexistent/nope.lua"));
}

/* ========================================================================= recipe values */

static void test_recipe_defaults(void **state) {
    (void)state;
    qf_gen_recipe r;
    qf_gen_err e;
    char opts[256];
    assert_int_equal(qf_gen_recipe_load("recipes/fp8_delayed.lua", NULL, &r, &e), 0);
    assert_string_equal(r.name, "fp8_delayed");
    assert_string_equal(r.file, "recipes/fp8_delayed.lua");
    assert_int_equal(r.family, QF_FAMILY_FP8_DELAYED);
    assert_int_equal(r.format, QF_GEN_FORMAT_HYBRID);
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
    qf_gen_recipe r;
    qf_gen_err e;
    char opts[256];
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
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
static int qf_test_shipped_variants(qf_gen_recipe *r, qf_gen_variant *v) {
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
    qf_gen_recipe r;
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
    qf_gen_recipe r;
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

/* ========================================================================= rendering */

static void qf_test_values(qf_gen_values *v, int n, const char *const *kv) {
    memset(v, 0, sizeof *v);
    for (int i = 0; i < n; i++) {
        snprintf(v->name[i], sizeof v->name[i], "%s", kv[2 * i]);
        snprintf(v->value[i], sizeof v->value[i], "%s", kv[2 * i + 1]);
    }
    v->n = n;
}

/* Placeholders are whole tokens; CUDA's own __x__ names and macros pass through untouched. */
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
    assert_string_equal(b.p, "extern \"C\" __global__ void __launch_bounds__(256) qf_k() {\n"
                             "#if defined(__CUDACC_RTC__) && __CUDA_ARCH__ >= 900 && __NVCC_X__\n"
                             "  __shared__ int s[32]; __syncthreads(); x__TILE_M__ = __LINE__;\n"
                             "#endif\n}\n");
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
    qf_test_write(dir, "smxx_fp8_norm_quantize.cu", nq);
    qf_test_write(dir, "smxx_fp8_scale_update.cu",
                  "void __KERNEL_NAME__() { float m = __MARGIN__; int a = __AMAX_COMPUTE__, "
                  "t = __BLOCK_THREADS__; }\n");
}

static const char qf_test_nq_ok[] =
    "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
    "__OUT_DTYPE__, __BLOCK_THREADS__, __TILE_M__}; }\n";

static void test_gen_template_unfilled(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[512];
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
}

static void test_gen_template_unused_value(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, expect[512];
    qf_test_mkdtemp(&d);
    qf_test_templates(d.path, "void __KERNEL_NAME__() { int a[] = {__NORM__, "
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
    qf_test_rmtree(d.path);
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
    qf_test_mkdtemp(&d1);
    qf_test_mkdtemp(&d2);
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
    qf_test_rmtree(d1.path);
    qf_test_rmtree(d2.path);
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
    if (qf_test_starts(rel, "kernels/")) /* then the #line back to the template */
        assert_true(qf_test_starts(nl + 1, "#line 1 \"templates/smxx_fp8_"));
}

/* Every file opens with the banner; manifest.json carries it in "generated_by". */
static void test_gen_banners(void **state) {
    (void)state;
    qf_test_dir d;
    static qf_test_tree t;
    char p[512];
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
}

/* A stale kernels/qf_*.cu is removed by the next run; other files under out/ are left alone. */
static void test_gen_stale_removed(void **state) {
    (void)state;
    qf_test_dir d;
    char kdir[512], stale[600], keep[600];
    struct stat st;
    qf_test_mkdtemp(&d);
    snprintf(kdir, sizeof kdir, "%s/kernels", d.path);
    assert_int_equal(mkdir(kdir, 0777), 0);
    snprintf(stale, sizeof stale, "%s", qf_test_write(kdir, "qf_gone_kernel.cu", "x"));
    snprintf(keep, sizeof keep, "%s", qf_test_write(d.path, "notes.txt", "x"));
    qf_test_generate(d.path);
    assert_int_not_equal(stat(stale, &st), 0);
    assert_int_equal(stat(keep, &st), 0);
    qf_test_rmtree(d.path);
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

/* out/ as built into libqfuse agrees with a fresh run: kernel sources, the NVRTC header, and
 * the fusion keys of the manifest equal the runtime's qf_kernel_key over the registry. */
static void test_gen_matches_registry(void **state) {
    (void)state;
    qf_test_dir d;
    char p[512], key[QF_KEY_HEX_LEN + 1];
    cJSON *root;
    qf_test_mkdtemp(&d);
    qf_test_generate(d.path);
    assert_int_equal(qf_kernel_count, 19);
    assert_int_equal(qf_nvrtc_header_count, 1);
    assert_string_equal(qf_nvrtc_header_names[0], "qf_formats.h");
    char *hdr = qf_test_read("runtime/qf_formats.h", NULL);
    assert_string_equal(qf_nvrtc_headers[0], hdr);
    free(hdr);
    cJSON *ks = cJSON_GetObjectItem(qf_test_manifest_recipe(d.path, &root), "kernels");
    assert_int_equal(cJSON_GetArraySize(ks), qf_kernel_count);
    for (int i = 0; i < qf_kernel_count; i++) {
        const qf_kernel_entry *k = &qf_kernels[i];
        snprintf(p, sizeof p, "%s/kernels/%s.cu", d.path, k->name);
        char *src = qf_test_read(p, NULL);
        assert_non_null(src);
        assert_string_equal(src, k->source);
        free(src);
        qf_kernel_instance inst = qf_kernel_instance_default(k);
        qf_kernel_key(&qf_recipes[k->recipe], k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                      qf_nvrtc_header_count, 90, key);
        assert_string_equal(qf_test_json_str(cJSON_GetArrayItem(ks, i), "name"), k->name);
        assert_string_equal(qf_test_json_str(cJSON_GetArrayItem(ks, i), "key_sm90"), key);
    }
    cJSON_Delete(root);
    qf_test_rmtree(d.path);
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
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
}

/* ========================================================================= CLI */

static void test_cli_check_shipped(void **state) {
    (void)state;
    char *out, *err;
    const char *args[] = {"--check", "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    assert_string_equal(out, "recipes/fp8_delayed.lua: ok\n");
    assert_string_equal(err, "");
    free(out), free(err);
}

/* --list prints every variant with a key and writes nothing. */
static void test_cli_list(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, outdir[512];
    struct stat st;
    qf_test_mkdtemp(&d);
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
    qf_test_rmtree(d.path);
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
        {{"--arch", "90", "recipes/fp8_delayed.lua", NULL}, 2, "", "--arch '90' (sm_XX expected"},
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
        cmocka_unit_test(test_recipe_empty_env),
        cmocka_unit_test(test_recipe_memory_table),
        cmocka_unit_test(test_recipe_budget_custom),
        cmocka_unit_test(test_recipe_binary_chunk),
        cmocka_unit_test(test_recipe_missing_file),
        cmocka_unit_test(test_recipe_defaults),
        cmocka_unit_test(test_recipe_all_options),
        cmocka_unit_test(test_variants_fp8_delayed),
        cmocka_unit_test(test_variants_invariants),
        cmocka_unit_test(test_render_ok),
        cmocka_unit_test(test_render_unfilled),
        cmocka_unit_test(test_render_unused),
        cmocka_unit_test(test_placeholder_rule),
        cmocka_unit_test(test_c_literal),
        cmocka_unit_test(test_gen_template_unfilled),
        cmocka_unit_test(test_gen_template_unused_value),
        cmocka_unit_test(test_gen_reproducible),
        cmocka_unit_test(test_gen_banners),
        cmocka_unit_test(test_gen_stale_removed),
        cmocka_unit_test(test_gen_matches_registry),
        cmocka_unit_test(test_gen_manifest_shapes),
        cmocka_unit_test(test_cli_check_shipped),
        cmocka_unit_test(test_cli_list),
        cmocka_unit_test(test_cli_list_arch_changes_key),
        cmocka_unit_test(test_cli_usage),
    };
    _Static_assert(sizeof qf_error_cases / sizeof qf_error_cases[0] == 31,
                   "add a QF_ERROR_TEST line per error case");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
