/* test_gen_util.h: what the qfuse-gen tests share (tests/test_gen_*.c): temp dirs, reading and
 * writing files, loading recipe text and checking its messages, running the CLI in-process, the
 * stub templates of each family and the runs over them, and reading the manifest. */
#ifndef QF_TEST_GEN_UTIL_H
#define QF_TEST_GEN_UTIL_H

#include "test_util.h"

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

/* ========================================================================= helpers */

static inline void qf_test_dir_make_gen(qf_test_dir *d) {
    qf_test_dir_make(d, "gen");
}

/* A test's state that is a fresh temp dir (a qf_test_dir), removed after the test. */
static inline int qf_test_dir_setup(void **state) {
    qf_test_dir *d = malloc(sizeof *d);
    assert_non_null(d);
    qf_test_dir_make_gen(d);
    *state = d;
    return 0;
}

static inline int qf_test_dir_teardown(void **state) {
    qf_test_dir *d = *state;
    qf_test_dir_remove(d->path);
    free(d);
    return 0;
}

/* A test run with a fresh temp dir as its state. */
#define T(f) cmocka_unit_test_setup_teardown(f, qf_test_dir_setup, qf_test_dir_teardown)

/* Reads a whole file (malloc'ed; caller frees) or returns NULL. */
static inline char *qf_test_read(const char *path, size_t *len) {
    char *text = NULL;
    size_t n = 0;
    if (qf_gen_read_file(path, "file", &text, &n, NULL) != 0)
        return NULL;
    if (len)
        *len = n;
    return text;
}

/* Runs the CLI with up to 15 arguments; captures stdout/stderr into out/err (malloc'ed). */
static inline int qf_test_cli(char **out, char **err, const char *const *args) {
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

/* ========================================================================= recipes */

#define QF_MX_OPTIONS_1D                                                                           \
    "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=false;"         \
    "weight_format=e4m3"
#define QF_MX_OPTIONS_2D                                                                           \
    "family=mxfp8;grad_format=e4m3;input_format=e4m3;scale_rounding=ceil;weight_2d=true;"          \
    "weight_format=e4m3"

/* Loads the recipe at path; fails the test with the loader's message. */
static inline void qf_test_load_ok(const char *path, qf_recipe *r) {
    qf_gen_err e;
    if (qf_gen_recipe_load(path, NULL, r, &e) != 0)
        fail_msg("%s", e.msg);
}

/* Asserts that msg is want, or contains want when `contains`; prints both otherwise. */
static inline void qf_test_message(const char *msg, const char *want, int contains) {
    if (contains ? strstr(msg, want) == NULL : strcmp(msg, want) != 0)
        fail_msg("message\n  '%s'\n%s\n  '%s'", msg, contains ? "lacks" : "is not", want);
}

/* Asserts that the recipe file at path is refused (limits lim; NULL: the defaults) with the
 * message "<path>: <what>", or, when `contains`, with one that starts with path and contains
 * what. */
static inline void qf_test_refused(const char *path, const qf_gen_limits *lim, const char *what,
                                   int contains) {
    qf_recipe r;
    qf_gen_err e = {{0}, QF_GEN_ERR_INVALID};
    char want[1024];
    assert_int_equal(qf_gen_recipe_load(path, lim, &r, &e), -1);
    snprintf(want, sizeof want, "%s: %s", path, what);
    qf_test_message(e.msg, contains ? what : want, contains);
    assert_true(strncmp(e.msg, path, strlen(path)) == 0);
}

/* Writes n bytes of text to dir/name; path gets its path. */
static inline void qf_test_write(const char *dir, const char *name, const void *text, size_t n,
                                 char path[512]) {
    snprintf(path, 512, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static inline int qf_test_lua_writer(lua_State *L, const void *p, size_t n, void *ud) {
    (void)L;
    qf_gen_buf_addn(ud, p, n);
    return 0;
}

/* Appends the binary chunk of `return {family = 'fp8_delayed'}` (lua_dump, stripped) to b. */
static inline void qf_test_binary_chunk(qf_gen_buf *b) {
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    assert_int_equal(luaL_loadstring(L, "return {family = 'fp8_delayed'}"), LUA_OK);
    assert_int_equal(lua_dump(L, qf_test_lua_writer, b, 1), 0);
    lua_close(L);
}

/* ========================================================================= generator runs */

/* The backward templates every family shares: their placeholders once, nothing else. */
static const char qf_test_nbwd_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
    "__BLOCK_THREADS__}; }\n";
static const char qf_test_dbias_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__IN_DTYPE__, __BLOCK_THREADS__}; }\n";
static const char qf_test_act_stub[] =
    "void __KERNEL_NAME__() { int a[] = {__IN_DTYPE__, __BLOCK_THREADS__}; }\n";

/* Writes the shared stubs (norm backward, dbias, activation) to dir. */
static inline void qf_test_bwd_templates(const char *dir) {
    qf_test_dir_write(dir, "smxx_norm_backward.cu", qf_test_nbwd_stub);
    qf_test_dir_write(dir, "smxx_dbias.cu", qf_test_dbias_stub);
    qf_test_dir_write(dir, "smxx_activation.cu", qf_test_act_stub);
}

/* Writes a template dir whose norm-quantize template is `nq` and the scale-update and norm
 * backward templates valid. */
static inline void qf_test_templates(const char *dir, const char *nq) {
    qf_test_bwd_templates(dir);
    qf_test_dir_write(dir, "smxx_fp8_norm_quantize.cu", nq);
    qf_test_dir_write(dir, "smxx_fp8_scale_update.cu",
                  "void __KERNEL_NAME__() { float m = __MARGIN__; int a = __AMAX_COMPUTE__, "
                  "t = __BLOCK_THREADS__; }\n");
}

static const char qf_test_nq_ok[] =
    "void __KERNEL_NAME__() { int a[] = {__FAMILY__, __NORM__, __ZERO_CENTERED_GAMMA__, "
    "__IN_DTYPE__, __OUT_DTYPE__, __BLOCK_THREADS__, __TILE_M__}; }\n";

/* Generates into a fresh dir/out (default templates) and asserts success. */
static inline void qf_test_generate(const char *outdir) {
    char *out, *err;
    const char *args[] = {"-o", outdir, "recipes/fp8_delayed.lua", NULL};
    int rc = qf_test_cli(&out, &err, args);
    if (rc != 0)
        fail_msg("qfuse-gen failed: %s", err);
    assert_string_equal(err, "");
    free(out), free(err);
}

static inline const char *qf_test_json_str(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItem(o, key));
    assert_non_null(s);
    return s;
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
static inline void qf_test_mx_templates(const char *dir, const char *nq) {
    qf_test_templates(dir, qf_test_nq_ok);
    qf_test_dir_write(dir, "smxx_mxfp8_norm_quantize.cu", nq);
    qf_test_dir_write(dir, "sm90_mxfp8_gemm.cu", qf_test_mx_gemm_stub);
}

/* Generates the recipes r1 and r2 into dir/out with the templates that write_templates writes
 * to dir/tpl; asserts success. */
static inline void qf_test_stub_generate(const char *dir, void (*write_templates)(const char *),
                                         const char *r1, const char *r2) {
    char tpl[512], outdir[512], *out, *err;
    snprintf(tpl, sizeof tpl, "%s/tpl", dir);
    snprintf(outdir, sizeof outdir, "%s/out", dir);
    assert_int_equal(mkdir(tpl, 0777), 0);
    write_templates(tpl);
    const char *args[] = {"-o", outdir, "--templates", tpl, r1, r2, NULL};
    if (qf_test_cli(&out, &err, args) != 0)
        fail_msg("qfuse-gen failed: %s", err);
    free(out), free(err);
}

/* The four templates with the MXFP8 stubs. */
static inline void qf_test_mx_stub_templates(const char *dir) {
    qf_test_mx_templates(dir, qf_test_mx_nq_stub);
}

/* Generates recipes/mxfp8.lua and recipes/mxfp8_2d.lua into dir/out with the stubs of dir/tpl. */
static inline void qf_test_mx_generate(const char *dir) {
    qf_test_stub_generate(dir, qf_test_mx_stub_templates, "recipes/mxfp8_2d.lua",
                          "recipes/mxfp8.lua");
}

/* ========================================================================= nvfp4 */
/* The NVFP4 tests run the recipes against stub templates (every placeholder of the contract
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

/* Writes the two NVFP4 stub templates and the shared backward ones to dir. */
static inline void qf_test_nv_templates(const char *dir) {
    qf_test_bwd_templates(dir);
    qf_test_dir_write(dir, "smxx_nvfp4_norm_quantize.cu", qf_test_nv_nq_stub);
    qf_test_dir_write(dir, "sm90_nvfp4_gemm.cu", qf_test_nv_gemm_stub);
}

/* Generates the two test-data NVFP4 recipes into dir/out with the stubs of dir/tpl. */
static inline void qf_test_nv_generate(const char *dir) {
    qf_test_stub_generate(dir, qf_test_nv_templates, QF_NV_NORT_RECIPE, QF_NV_RECIPE);
}

#endif /* QF_TEST_GEN_UTIL_H */
