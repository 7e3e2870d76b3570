/* test_gen_util.h: what the qfuse-gen tests share (tests/test_gen_*.c): temp dirs, reading
 * files, loading recipe text, running the CLI in-process, the stub templates of each family
 * and the runs over them, and reading the manifest. */
#ifndef QF_TEST_GEN_UTIL_H
#define QF_TEST_GEN_UTIL_H

#include "test_util.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

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

/* ========================================================================= generator runs */

/* Writes a template dir whose norm-quantize template is `nq` and scale-update template valid. */
static inline void qf_test_templates(const char *dir, const char *nq) {
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

/* Generates recipes/mxfp8.lua and recipes/mxfp8_2d.lua into dir/out with the stubs of dir/tpl. */
static inline void qf_test_mx_generate(const char *dir) {
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

/* Writes the two NVFP4 stub templates to dir. */
static inline void qf_test_nv_templates(const char *dir) {
    qf_test_dir_write(dir, "smxx_nvfp4_norm_quantize.cu", qf_test_nv_nq_stub);
    qf_test_dir_write(dir, "sm90_nvfp4_gemm.cu", qf_test_nv_gemm_stub);
}

/* Generates the two test-data NVFP4 recipes into dir/out with the stubs of dir/tpl. */
static inline void qf_test_nv_generate(const char *dir) {
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

#endif /* QF_TEST_GEN_UTIL_H */
