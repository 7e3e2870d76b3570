/* test_recipe_file.c: recipes loaded from .lua files at run time (runtime/recipe_file.c): the
 * same recipe, variants, preludes and fusion keys as qfuse-gen makes of the same file, fake
 * shapes from the family's table, NVRTC compiles of their kernels without a GPU, and clear
 * errors for missing and invalid files. */
#include "test_util.h"

#include "ctx.h"
#include "gen_plan.h"
#include "kernel_key.h"
#include "recipe_file.h"
#include "registry.h"

/* A user's MXFP8 recipe, away from every default the schema allows to change. */
static const char qf_test_mx_text[] =
    "-- a recipe outside the tree\n"
    "return {family = 'mxfp8', grad_format = 'e5m2', scale_rounding = 'floor',\n"
    "        weight_2d = true, description = 'MXFP8, E5M2 gradients, OCP rounding'}\n";

/* qf_recipe_find of name, which must answer status want; the recipe (NULL on an error). */
static const qf_recipe *qf_test_find(const char *name, qf_status want) {
    const qf_recipe *r = (const qf_recipe *)1;
    qf_status s = qf_recipe_find(name, &r);
    if (s != want)
        fail_msg("%s: status %s (%s), want %s", name, qf_status_name(s), qf_last_error(),
                 qf_status_name(want));
    assert_true(want == QF_OK ? r != NULL : r == NULL);
    return r;
}

/* The built-in recipe of that name. */
static const qf_recipe *qf_test_builtin(const char *name) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    fail_msg("recipe %s is not built in", name);
    return NULL;
}

/* A loaded recipe has exactly what qfuse-gen's plan of the same file has: options, formats,
 * kernel names, descriptors, launch configs, entry points, preludes and fusion keys. */
static void test_same_as_generator(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    const char *path = qf_test_dir_write(d.path, "user_mx.lua", qf_test_mx_text);
    const qf_recipe *r = qf_test_find(path, QF_OK);
    assert_non_null(r);
    assert_string_equal(r->name, "user_mx");
    assert_string_equal(r->path, path);
    assert_string_equal(r->description, "MXFP8, E5M2 gradients, OCP rounding");
    assert_int_equal(r->fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    assert_null(r->shapes);
    qf_gen_plan p;
    qf_gen_err e;
    const qf_gen_opts o = {.templates_dir = "templates", .include_dir = "runtime"};
    const char *paths[] = {path};
    assert_int_equal(qf_gen_plan_build(&p, &o, paths, 1, &e), 0);
    const qf_gen_plan_recipe *pr = &p.recipes[0];
    assert_string_equal(r->options, pr->recipe.options);
    assert_int_equal(r->n_kernels, pr->n_variants);
    for (int i = 0; i < r->n_kernels; i++) {
        const qf_kernel_entry *k = &r->kernels[i];
        char want[33], got[33];
        assert_string_equal(k->name, pr->variants[i].desc.name);
        assert_ptr_equal(k->recipe, r);
        assert_int_equal(k->op, pr->variants[i].desc.op);
        assert_int_equal(k->tile_m, pr->variants[i].cfg.tile_m);
        assert_int_equal(k->entries, pr->entries[i]);
        assert_string_equal(k->prelude, pr->preludes[i]);
        qf_gen_plan_key(&p, 0, i, 90, want);
        qf_kernel_instance inst = qf_kernel_instance_default(k);
        qf_kernel_key(r, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                      qf_nvrtc_header_count, 90, got);
        assert_string_equal(got, want);
    }
    qf_gen_plan_free(&p);
    qf_test_dir_remove(d.path);
}

/* A path is read once per process: the second lookup returns the same recipe, even after the
 * file changed (the next process sees the edit). */
static void test_loaded_once(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    const char *path = qf_test_dir_write(d.path, "once.lua", "return {family = 'nvfp4'}");
    char copy[512];
    snprintf(copy, sizeof copy, "%s", path);
    const qf_recipe *a = qf_test_find(copy, QF_OK);
    assert_non_null(a);
    qf_test_dir_write(d.path, "once.lua", "return {family = 'nvfp4', rht_grad = false}");
    assert_ptr_equal(qf_test_find(copy, QF_OK), a);
    /* The defaults of a bare nvfp4 recipe are the shipped nvfp4.lua's. */
    assert_string_equal(a->options, qf_test_builtin("nvfp4")->options);
    assert_int_equal(a->n_kernels, qf_test_builtin("nvfp4")->n_kernels);
    qf_test_dir_remove(d.path);
}

/* A file is known by its path made absolute: one relative path after a chdir is the file it
 * names there, not the one loaded before; its absolute spelling is the same recipe; a loaded
 * recipe stays loaded while its file is away (an editor replacing it). */
static void test_relative_path_follows_cwd(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    char a[600], b[600], here[PATH_MAX], abs_b[700], away[700];
    snprintf(a, sizeof a, "%s/a", d.path);
    snprintf(b, sizeof b, "%s/b", d.path);
    snprintf(abs_b, sizeof abs_b, "%s/x.lua", b);
    snprintf(away, sizeof away, "%s/away.lua", b);
    assert_int_equal(mkdir(a, 0700), 0);
    assert_int_equal(mkdir(b, 0700), 0);
    qf_test_dir_write(a, "x.lua", "return {family = 'mxfp8'}");
    qf_test_dir_write(b, "x.lua", "return {family = 'nvfp4'}");
    assert_non_null(getcwd(here, sizeof here));
    const qf_recipe *ra = NULL, *rb = NULL, *rb_abs = NULL, *rb_away = NULL;
    qf_status sa = QF_ERR_INTERNAL, sb = QF_ERR_INTERNAL, sw = QF_ERR_INTERNAL;
    if (chdir(a) == 0) /* no assert until the working directory is back */
        sa = qf_recipe_file_load("x.lua", &ra);
    if (chdir(b) == 0) {
        sb = qf_recipe_file_load("x.lua", &rb);
        if (rename("x.lua", "away.lua") == 0) {
            sw = qf_recipe_file_load("x.lua", &rb_away);
            rename("away.lua", "x.lua");
        }
    }
    assert_int_equal(chdir(here), 0);
    assert_int_equal(sa, QF_OK);
    assert_int_equal(sb, QF_OK);
    assert_int_equal(sw, QF_OK);
    assert_int_equal(ra->family, QF_FAMILY_MXFP8);
    assert_int_equal(rb->family, QF_FAMILY_NVFP4);
    assert_ptr_equal(rb_away, rb);
    assert_int_equal(qf_recipe_file_load(abs_b, &rb_abs), QF_OK);
    assert_ptr_equal(rb_abs, rb);
    qf_test_dir_remove(d.path);
}

/* Fake shapes of a loaded recipe (interpreted from the family's table) equal the generated
 * function's of the built-in recipe with the same formats. */
static void test_shapes(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    const qf_recipe *r =
        qf_test_find(qf_test_dir_write(d.path, "sh.lua", "return {family = 'fp8_delayed'}"), QF_OK);
    assert_non_null(r);
    const qf_recipe *b = qf_test_builtin("fp8_delayed");
    for (int role = 0; role < QF_ROLE_COUNT; role++) {
        qf_shape_query q = {.op = QF_OP_QUANTIZE, .role = (qf_role)role,
                            .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 217, .K = 769};
        qf_shape x[8], y[8];
        int n = qf_recipe_shapes(r, &q, x, 8);
        assert_int_equal(n, 4);
        assert_int_equal(qf_recipe_shapes(b, &q, y, 8), n);
        for (int i = 0; i < n; i++) {
            assert_string_equal(x[i].name, y[i].name);
            assert_int_equal(x[i].dtype, y[i].dtype);
            assert_true(x[i].bytes == y[i].bytes);
        }
    }
    qf_test_dir_remove(d.path);
}

/* The public queries take a name or a path alike: qf_fake_shapes answers as the recipe's shape
 * function (for a path, the family's table), qf_gemm_scale_layout as the family's GEMM row; bad
 * arguments, unknown names and invalid files are errors with messages. */
static void test_public_queries(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    const char *path = qf_test_dir_write(d.path, "pub.lua", qf_test_mx_text);
    const qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT,
                              .norm = QF_NORM_LAYERNORM,
                              .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .M = 100, .K = 96};
    qf_shape a[12], b[12];
    int na = 0, nb = -1;
    assert_int_equal(qf_fake_shapes("mxfp8", &q, a, 12, &na), QF_OK);
    assert_int_equal(qf_fake_shapes(path, &q, b, 12, &nb), QF_OK);
    assert_int_equal(na, 6); /* both copies and their scales, mu, rsigma */
    assert_int_equal(nb, na);
    for (int i = 0; i < na; i++) {
        assert_string_equal(a[i].name, b[i].name);
        assert_true(a[i].bytes == b[i].bytes);
    }
    assert_int_equal(qf_fake_shapes("mxfp8", &q, a, 2, &na), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "has 6 output(s); out has room for cap = 2"));
    assert_int_equal(qf_fake_shapes("no_such", &q, a, 12, &na), QF_ERR_NOT_FOUND);
    assert_non_null(strstr(qf_last_error(), "recipe 'no_such' not found: this build ships"));
    assert_int_equal(qf_fake_shapes(NULL, &q, a, 12, &na), QF_ERR_INVALID_ARG);
    const qf_shape_query bad = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_WEIGHT, .M = 0, .K = 96,
                                .outputs = QF_OUT_ROWWISE};
    assert_int_equal(qf_fake_shapes(path, &bad, a, 12, &na), QF_ERR_INVALID_ARG);
    assert_int_equal(qf_fake_shapes(qf_test_dir_write(d.path, "bad.lua", "return {family = 1}"),
                                    &q, a, 12, &na),
                     QF_ERR_INVALID_ARG);
    qf_scale_layout l = QF_SCALE_LAYOUT_COUNT;
    assert_int_equal(qf_gemm_scale_layout(path, 90, &l), QF_OK);
    assert_int_equal(l, QF_SCALE_LAYOUT_COMPACT); /* Hopper: the generated GEMM */
    assert_int_equal(qf_gemm_scale_layout("nvfp4", 100, &l), QF_OK);
    assert_int_equal(l, QF_SCALE_LAYOUT_SWIZZLED); /* Blackwell: cuBLASLt's block-scaled modes */
    assert_int_equal(qf_gemm_scale_layout("mxfp8", 80, &l), QF_ERR_UNSUPPORTED);
    assert_int_equal(qf_gemm_scale_layout("mxfp8", -90, &l), QF_ERR_INVALID_ARG);
    assert_non_null(strstr(qf_last_error(), "arch -90 is not a compute capability"));
    assert_int_equal(qf_gemm_scale_layout("mxfp8", 1000, &l), QF_ERR_INVALID_ARG);
    assert_int_equal(qf_gemm_scale_layout("mxfp8", 90, NULL), QF_ERR_INVALID_ARG);
    qf_test_dir_remove(d.path);
}

/* The kernels of a loaded recipe go through the JIT like any other: a device-less context
 * compiles them with NVRTC (no GPU needed) and a second lookup is served from memory. */
static void test_jit_compiles(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    setenv("QFUSE_DISABLE_DISK_CACHE", "1", 1);
    const qf_recipe *r =
        qf_test_find(qf_test_dir_write(d.path, "jit_mx.lua", qf_test_mx_text), QF_OK);
    assert_non_null(r);
    const qf_kernel_entry *k =
        qf_registry_kernel(r, QF_OP_QUANTIZE, QF_ROLE_GRAD, QF_NORM_NONE, 0, QF_DTYPE_BF16);
    assert_non_null(k);
    assert_int_equal(k->out_dtype, QF_DTYPE_E5M2);
    qf_ctx_t *ctx = NULL;
    assert_int_equal(qf_ctx_init_host(&ctx, 90), QF_OK);
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_loaded_kernel lk;
    assert_int_equal(qf_ctx_kernel(ctx, k, &inst, &lk), QF_OK);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_COMPILED);
    assert_string_equal(qf_ctx_last_kernel(ctx)->name, "qf_jit_mx_quant_grad_bf16");
    assert_int_equal(qf_ctx_kernel(ctx, k, &inst, &lk), QF_OK);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    qf_ctx_free(ctx);
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    qf_test_dir_remove(d.path);
}

/* Missing and invalid files: NULL, the status and a message naming the file and the problem. */
static void test_errors(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "recipe_file");
    char missing[300];
    snprintf(missing, sizeof missing, "%s/absent.lua", d.path);
    qf_test_find(missing, QF_ERR_NOT_FOUND);
    assert_non_null(strstr(qf_last_error(), "cannot open"));
    assert_non_null(strstr(qf_last_error(), "absent.lua"));
    static const struct {
        const char *file, *text, *msg;
        qf_status status;
    } bad[] = {
        {"f.lua", "return {family = 'mxfp8', margin = 1}", "unknown field 'margin'",
         QF_ERR_INVALID_ARG},
        {"g.lua", "return {family = 'nvfp4', rht_seed = -3}", "field 'rht_seed' (value -3",
         QF_ERR_INVALID_ARG},
        {"h.lua", "return {family = 'fp8_block', power_2_scales = 0}",
         "field 'power_2_scales' (boolean expected, got number)", QF_ERR_INVALID_ARG},
        {"i.lua", "while true do end", "instruction budget", QF_ERR_INVALID_ARG},
        {"Bad-Name.lua", "return {family = 'mxfp8'}", "must match [a-z0-9_]+",
         QF_ERR_INVALID_ARG},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *path = qf_test_dir_write(d.path, bad[i].file, bad[i].text);
        qf_test_find(path, bad[i].status);
        if (!strstr(qf_last_error(), bad[i].msg) || !strstr(qf_last_error(), bad[i].file))
            fail_msg("%s: got '%s', want '%s'", bad[i].file, qf_last_error(), bad[i].msg);
    }
    /* Not a path: looked up among the built-in recipes only. */
    qf_test_find("no_such_recipe", QF_ERR_NOT_FOUND);
    assert_non_null(strstr(qf_last_error(), "recipe 'no_such_recipe' not found"));
    assert_int_equal(qf_recipe_is_path("mxfp8"), 0);
    assert_int_equal(qf_recipe_is_path("mxfp8.lua"), 1);
    assert_int_equal(qf_recipe_is_path("dir/mxfp8"), 1);
    qf_test_dir_remove(d.path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_generator), cmocka_unit_test(test_loaded_once),
        cmocka_unit_test(test_shapes),            cmocka_unit_test(test_jit_compiles),
        cmocka_unit_test(test_errors),            cmocka_unit_test(test_public_queries),
        cmocka_unit_test(test_relative_path_follows_cwd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
