/* test_gen_variant.c: qfuse-gen's variants (gen_variant.c): the kernels each recipe expands to,
 * their configs and the invariant checks, and the placeholder values each template is given. */
#include "test_gen_util.h"

#include "ref_nvfp4.h"

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
    assert_int_equal(n, 12 + 9 + 1 + 12 + 3 + 3); /* nq, quant, scale update, backward */
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
    "qf_mxfp8_quant_grad_fp32",       "qf_mxfp8_quant_input_bf16",
    "qf_mxfp8_quant_input_fp16",      "qf_mxfp8_quant_input_fp32",
    "qf_mxfp8_quant_weight_bf16",
    "qf_mxfp8_quant_weight_fp16",     "qf_mxfp8_quant_weight_fp32",
};

/* The variants of the block-scaled recipe at path into v, checked against the kernels of
 * qf_test_mx_names under the prefix qf_<fam>_: the GEMM on sm90_<fam>_gemm.cu (128-row tiles, bf16
 * out), the quantizers on smxx_<fam>_norm_quantize.cu (32-row tiles, q out), 256 threads each,
 * and the GEMM's input q; returns the count. */
static int qf_test_block_scaled_variants(const char *path, const char *fam, qf_dtype q,
                                         qf_recipe *r, qf_gen_variant *v) {
    char name[128], gemm_tpl[64], nq_tpl[64];
    snprintf(gemm_tpl, sizeof gemm_tpl, "sm90_%s_gemm.cu", fam);
    snprintf(nq_tpl, sizeof nq_tpl, "smxx_%s_norm_quantize.cu", fam);
    int n = qf_test_variants_of(path, r, v), f = 0;
    assert_int_equal(n, 12 + 9 + 1 + 12 + 3 + 3); /* nq, quant, gemm, backward; no scale update */
    for (int i = 0; i < n; i++) {
        if (v[i].desc.op == QF_OP_NORM_BACKWARD || v[i].desc.op == QF_OP_DBIAS ||
            v[i].desc.op == QF_OP_ACTIVATION) {
            /* the shared modules: dx, dbias, a and dh in the input's dtype */
            const int nb = v[i].desc.op == QF_OP_NORM_BACKWARD;
            assert_string_equal(v[i].cfg.template_name,
                                nb                                 ? "smxx_norm_backward.cu"
                                : v[i].desc.op == QF_OP_DBIAS ? "smxx_dbias.cu"
                                                                   : "smxx_activation.cu");
            assert_int_equal(v[i].desc.out_dtype, v[i].desc.in_dtype);
            assert_int_equal(v[i].desc.norm != QF_NORM_NONE, nb);
            continue;
        }
        snprintf(name, sizeof name, "qf_%s_%s", fam, qf_test_mx_names[f++] + strlen("qf_mxfp8_"));
        assert_string_equal(v[i].desc.name, name);
        int gemm = v[i].desc.op == QF_OP_GEMM;
        assert_string_equal(v[i].cfg.template_name, gemm ? gemm_tpl : nq_tpl);
        assert_int_equal(v[i].cfg.block_threads, 256);
        assert_int_equal(v[i].cfg.tile_m, gemm ? 128 : 32);
        assert_int_equal(v[i].desc.out_dtype, gemm ? QF_DTYPE_BF16 : q);
    }
    assert_int_equal(f, 12 + 9 + 1);
    snprintf(name, sizeof name, "qf_%s_gemm", fam);
    assert_int_equal(qf_test_variant(v, n, name)->desc.in_dtype, q);
    return n;
}

/* Every kernel of recipes/mxfp8.lua by name, and its template and config. */
static void test_variants_mxfp8_names(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    int n = qf_test_block_scaled_variants("recipes/mxfp8.lua", "mxfp8", QF_DTYPE_E4M3, &r, v);
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
    const qf_test_dir *d = *state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    qf_gen_values vals;
    const char *path = qf_test_dir_write(d->path, "mx_e5m2.lua",
                                         "return {family = 'mxfp8', "
                                         "grad_format = 'e5m2', scale_rounding = 'floor'}");
    int n = qf_test_variants_of(path, &r, v);
    const qf_gen_variant *g = qf_test_variant(v, n, "qf_mx_e5m2_quant_grad_bf16");
    assert_int_equal(g->desc.out_dtype, QF_DTYPE_E5M2);
    qf_gen_variant_values(&r, g, &vals);
    assert_string_equal(qf_test_value(&vals, "__OUT_DTYPE__"), "QF_DTYPE_E5M2");
    assert_string_equal(qf_test_value(&vals, "__SCALE_ROUNDING__"), "QF_SCALE_ROUNDING_FLOOR");
    qf_gen_variant_values(&r, qf_test_variant(v, n, "qf_mx_e5m2_quant_weight_bf16"), &vals);
    assert_string_equal(qf_test_value(&vals, "__OUT_DTYPE__"), "QF_DTYPE_E4M3");
}

/* ========================================================================= nvfp4 variants */

/* The 19 kernels of nvfp4.lua (the MXFP8 set under the nvfp4 prefix) and their configs. */
static void test_variants_nvfp4_names(void **state) {
    (void)state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    qf_test_block_scaled_variants(QF_NV_RECIPE, "nvfp4", QF_DTYPE_E2M1, &r, v);
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

/* rht_seed: the mask of the RHT kernels is drawn from the seed (numerics 2.4); the others keep 0.
 */
static void test_variants_nvfp4_seed(void **state) {
    const qf_test_dir *d = *state;
    qf_recipe r;
    qf_gen_variant v[QF_GEN_VARIANTS_MAX];
    char mask[16];
    const char *path = qf_test_dir_write(d->path, "nvs.lua",
                                         "return {family = 'nvfp4', rht_seed = 42,"
                                         " rht_grad = false}");
    int n = qf_test_variants_of(path, &r, v);
    snprintf(mask, sizeof mask, "0x%04X", (unsigned)qf_nvfp4_rht_mask_from_seed_ref(42));
    assert_string_not_equal(mask, "0xD7E8");
    qf_test_nv_flags(&r, v, n, "qf_nvs_nq_layernorm_fp32", "1", mask, "0", "0");
    qf_test_nv_flags(&r, v, n, "qf_nvs_quant_grad_fp32", "0", "0x0000", "1", "0");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variants_fp8_delayed),
        cmocka_unit_test(test_variants_invariants),
        cmocka_unit_test(test_variants_mxfp8_names),
        cmocka_unit_test(test_variants_mxfp8_2d),
        cmocka_unit_test(test_variants_mxfp8_values),
        T(test_variants_mxfp8_options_reach_values),
        cmocka_unit_test(test_variants_nvfp4_names),
        cmocka_unit_test(test_variants_nvfp4_values),
        T(test_variants_nvfp4_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
