/* test_gen_plan.c: qfuse-gen's plans (gen_plan.c) and their fusion keys: which recipe options and
 * scale layouts change the source and key of which kernels, and the instances qfuse-cache warms. */
#include "test_gen_util.h"

/* ========================================================================= mxfp8 keys */

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

/* Fusion keys (numerics 5): the 2D weight kernels differ from the 1D ones, and the scale layout
 * changes the key of MXFP8 quantizers only (no GEMM, no fp8_delayed key moved). */
static void test_gen_mxfp8_keys(void **state) {
    static const struct {
        int ri; /* plan order: fp8_delayed, mxfp8, mxfp8_2d */
        const char *name;
        int layout_in_key;
    } cases[] = {
        {1, "qf_mxfp8_quant_weight_bf16", 1},     {2, "qf_mxfp8_2d_quant_weight_bf16", 1},
        {2, "qf_mxfp8_2d_nq_layernorm_fp16", 1},  {1, "qf_mxfp8_gemm", 0},
        {0, "qf_fp8_delayed_nq_rmsnorm_bf16", 0}, {0, "qf_fp8_delayed_quant_grad_fp32", 0},
    };
    const qf_test_dir *d = *state;
    qf_gen_plan plan;
    qf_gen_err e;
    char k1[33], k2[33];
    qf_test_mx_templates(d->path, qf_test_mx_nq_stub);
    const qf_gen_opts o = {.templates_dir = d->path, .include_dir = "runtime"};
    const char *paths[] = {"recipes/mxfp8_2d.lua", "recipes/fp8_delayed.lua", "recipes/mxfp8.lua"};
    assert_int_equal(qf_gen_plan_build(&plan, &o, paths, 3, &e), 0);
    qf_gen_plan_key(&plan, 1, qf_test_plan_variant(&plan, 1, "qf_mxfp8_quant_weight_bf16"), 90, k1);
    qf_gen_plan_key(&plan, 2, qf_test_plan_variant(&plan, 2, "qf_mxfp8_2d_quant_weight_bf16"), 90,
                    k2);
    assert_string_not_equal(k1, k2);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        qf_test_layout_key(&plan, cases[i].ri, cases[i].name, cases[i].layout_in_key);
    qf_gen_plan_free(&plan);
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

/* qfuse-cache warm's instance lists: MXFP8 quantizers twice over (compact, swizzled), the
 * activation prologues of the plain quantizers and dbias. */
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
    /* plain quantizers: the input role also has a = act(h) and the grad role dh = da act'(h)
     * for each activation and layout, both copies; the weight role none */
    k.op = QF_OP_QUANTIZE;
    k.role = QF_ROLE_WEIGHT;
    assert_int_equal(qf_kernel_instances(&k, out), 6);
    const qf_role roles[] = {QF_ROLE_INPUT, QF_ROLE_GRAD};
    for (int r = 0; r < 2; r++) {
        k.role = roles[r];
        assert_int_equal(qf_kernel_instances(&k, out), 12);
        int pro[QF_PROLOGUE_COUNT] = {0};
        for (int i = 0; i < 12; i++) {
            assert_true(out[i].prologue >= 0 && out[i].prologue < QF_PROLOGUE_COUNT);
            pro[out[i].prologue]++;
            if (out[i].prologue)
                assert_int_equal(out[i].outputs, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE);
        }
        assert_int_equal(pro[QF_PROLOGUE_NONE], 6);
        for (int a = 0; a < QF_ACT_COUNT; a++)
            assert_int_equal(pro[r ? QF_PROLOGUE_DACT(a) : QF_PROLOGUE_ACT(a)], 2);
    }
    /* the prologue is in the key's variant only when set */
    char buf[256];
    qf_kernel_variant_string(&k, &out[0], buf, sizeof buf);
    assert_null(strstr(buf, "prologue"));
    qf_kernel_variant_string(&k, &out[11], buf, sizeof buf);
    assert_non_null(strstr(buf, ";prologue="));
    k.op = QF_OP_DBIAS;
    assert_int_equal(qf_kernel_instances(&k, out), 1 + QF_ACT_COUNT);
    assert_int_equal(out[1 + QF_ACT_SWIGLU].prologue, QF_PROLOGUE_DACT(QF_ACT_SWIGLU));
    /* a GEMM module: whole, and its staged instance (-DQF_GEMM_STAGED=1, ";staged=1" in the
     * key's variant, another key) */
    k.op = QF_OP_GEMM;
    assert_int_equal(qf_kernel_instances(&k, out), 2);
    assert_int_equal(out[0].staged, 0);
    assert_int_equal(out[1].staged, 1);
    assert_false(qf_kernel_instance_equal(&out[0], &out[1]));
    char store[QF_KERNEL_MAX_EXTRA][48];
    const char *opts[QF_KERNEL_MAX_EXTRA];
    assert_int_equal(qf_kernel_extra_options(&k, &out[0], store, opts), 0);
    assert_int_equal(qf_kernel_extra_options(&k, &out[1], store, opts), 1);
    assert_string_equal(opts[0], "-DQF_GEMM_STAGED=1");
    qf_kernel_variant_string(&k, &out[0], buf, sizeof buf);
    assert_null(strstr(buf, "staged"));
    qf_kernel_variant_string(&k, &out[1], buf, sizeof buf);
    assert_non_null(strstr(buf, ";staged=1"));
    /* the two split the module's entries: the GEMM kernel, and the staged path's */
    const unsigned main = QF_ENTRY_BIT(QF_ENTRY_MAIN), dq = QF_ENTRY_BIT(QF_ENTRY_DEQUANT),
                   alpha = QF_ENTRY_BIT(QF_ENTRY_ALPHA);
    k.entries = main | dq | alpha;
    assert_int_equal(qf_kernel_instance_entries(&k, &out[0]), main);
    assert_int_equal(qf_kernel_instance_entries(&k, &out[1]), dq | alpha);
    k.op = QF_OP_DBIAS; /* any other op: every instance holds them all */
    assert_int_equal(qf_kernel_instance_entries(&k, &out[1]), main | dq | alpha);
    k = (qf_kernel_entry){.family = QF_FAMILY_FP8_DELAYED, .op = QF_OP_NORM_QUANTIZE,
                          .norm = QF_NORM_LAYERNORM, .in_dtype = QF_DTYPE_BF16};
    assert_int_equal(qf_kernel_instances(&k, out), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(out[i].layout, QF_SCALE_LAYOUT_COMPACT);
}

/* ========================================================================= nvfp4 keys */

/* Builds a plan of recipe text written as dir/nvx.lua (one name: keys comparable across plans)
 * with the NVFP4 stubs of dir. */
static void qf_test_nv_plan(const char *dir, const char *text, qf_gen_plan *p) {
    qf_gen_err e;
    const qf_gen_opts o = {.templates_dir = dir, .include_dir = "runtime"};
    char path[512];
    snprintf(path, sizeof path, "%s", qf_test_dir_write(dir, "nvx.lua", text));
    const char *paths[] = {path};
    qf_test_nv_templates(dir); /* after the copy: qf_test_dir_write's buffers are reused */
    if (qf_gen_plan_build(p, &o, paths, 1, &e) != 0)
        fail_msg("%s", e.msg);
}

/* Asserts that kernel name's source (and so its key) differs between plans a and b exactly when
 * changed; its key differs in any case when the options do (numerics 5). */
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

/* Fusion keys (numerics 5; TE's ops/fuser.py reused an NVFP4 plan after RHT was disabled): turning
 * off RHT, SR or 2D, or seeding the RHT, changes the source and key of exactly the kernels that
 * use it. */
static void test_gen_nvfp4_keys(void **state) {
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
    const qf_test_dir *d0 = *state;
    qf_test_dir d1;
    qf_gen_plan base, p;
    char text[256];
    qf_test_nv_plan(d0->path, "return {family = 'nvfp4'}", &base);
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
}

/* ========================================================================= fp8_block keys */

/* Builds a plan of recipe text written as dir/fbx.lua (one name: keys comparable across plans)
 * with the real templates. */
static void qf_test_text_plan(const char *dir, const char *text, qf_gen_plan *p) {
    qf_gen_err e;
    const qf_gen_opts o = {.templates_dir = "templates", .include_dir = "runtime"};
    char path[512];
    snprintf(path, sizeof path, "%s", qf_test_dir_write(dir, "fbx.lua", text));
    const char *paths[] = {path};
    if (qf_gen_plan_build(p, &o, paths, 1, &e) != 0)
        fail_msg("%s", e.msg);
}

/* Fusion keys (numerics 5): fp8_block's two scale options change the key of every kernel of the
 * recipe (its backward modules today, which take no constant from them: same source), and the
 * same recipe twice gives the same keys. */
static void test_gen_fp8_block_keys(void **state) {
    static const char *const changed[] = {"power_2_scales = false", "amax_epsilon = 1e-6",
                                          "amax_epsilon = 2e-6"};
    static const char *const names[] = {"qf_fbx_dbias_bf16", "qf_fbx_nbwd_layernorm_fp16",
                                        "qf_fbx_act_fp32"};
    const qf_test_dir *d0 = *state;
    qf_test_dir d1;
    qf_gen_plan base, p;
    char text[256], ka[33], kb[33];
    qf_test_text_plan(d0->path, "return {family = 'fp8_block'}", &base);
    for (size_t i = 0; i <= sizeof changed / sizeof changed[0]; i++) {
        const int same = i == sizeof changed / sizeof changed[0]; /* the defaults, spelled out */
        qf_test_dir_make_gen(&d1);
        snprintf(text, sizeof text, "return {family = 'fp8_block', %s}",
                 same ? "power_2_scales = true, amax_epsilon = 0" : changed[i]);
        qf_test_text_plan(d1.path, text, &p);
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            const int va = qf_test_plan_variant(&base, 0, names[k]);
            const int vb = qf_test_plan_variant(&p, 0, names[k]);
            assert_string_equal(base.recipes[0].sources[va], p.recipes[0].sources[vb]);
            qf_gen_plan_key(&base, 0, va, 90, ka);
            qf_gen_plan_key(&p, 0, vb, 90, kb);
            if ((strcmp(ka, kb) == 0) != same)
                fail_msg("%s with '%s': keys %s", names[k], text, same ? "differ" : "are equal");
        }
        qf_gen_plan_free(&p);
        qf_test_dir_remove(d1.path);
    }
    qf_gen_plan_free(&base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_gen_mxfp8_keys),
        cmocka_unit_test(test_kernel_key_layout),
        cmocka_unit_test(test_kernel_instances_mxfp8),
        T(test_gen_nvfp4_keys),
        T(test_gen_fp8_block_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
