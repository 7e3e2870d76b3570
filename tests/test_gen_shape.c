/* test_gen_shape.c: qfuse-gen's shape tables (gen_shape.c): the options, requirements and shape
 * formulas of each family in manifest.json, evaluated at the padding cases of docs/numerics.md, and
 * the check that refuses a malformed formula. */
#include "test_gen_util.h"

/* ========================================================================= manifest shapes */

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

/* Generates into dir/out with generate (qf_test_mx_generate, qf_test_nv_generate) and returns the
 * first recipe of its manifest (parsed; the caller deletes *root). */
static cJSON *qf_test_stub_manifest(const qf_test_dir *d, void (*generate)(const char *),
                                    cJSON **root) {
    char out[512];
    generate(d->path);
    snprintf(out, sizeof out, "%s/out", d->path);
    return qf_test_manifest_recipe(out, root);
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
    const qf_test_dir *d = *state;
    cJSON *root;
    qf_test_generate(d->path);
    const cJSON *r = qf_test_manifest_recipe(d->path, &root);
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
    /* requires: what the generated functions check (the norm, the role and the dtype too) */
    const cJSON *shapes = cJSON_GetObjectItem(r, "shapes");
    assert_string_equal(qf_test_json_str(nq, "requires"),
                        "M > 0 && K > 0 && (rowwise || columnwise) && norm in {layernorm, "
                        "rmsnorm} && role == input && dtype in {bf16, fp16, fp32}");
    assert_string_equal(qf_test_json_str(cJSON_GetObjectItem(shapes, "quantize"), "requires"),
                        "M > 0 && K > 0 && (rowwise || columnwise) && norm == none && dtype in "
                        "{bf16, fp16, fp32}");
    assert_string_equal(
        qf_test_json_str(cJSON_GetObjectItem(shapes, "norm_backward"), "requires"),
        "M > 0 && K > 0 && norm in {layernorm, rmsnorm} && dtype in {bf16, fp16, fp32} && K <= "
        "24576");
    cJSON_Delete(root);
}

/* ========================================================================= mxfp8 shapes */

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

/* The mxfp8 manifest recipe r's formulas evaluated at numerics 2.3's padding cases. */
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
    cJSON *root;
    /* mxfp8 sorts before mxfp8_2d */
    const cJSON *r = qf_test_stub_manifest(*state, qf_test_mx_generate, &root);
    assert_string_equal(qf_test_json_str(r, "options_string"), QF_MX_OPTIONS_1D);
    assert_true(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "options"), "weight_2d")));
    const cJSON *r2 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "recipes"), 1);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(r2, "options"), "weight_2d")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(r, "kernels")), 22 + 18);
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
}

/* ========================================================================= nvfp4 shapes */

/* The nvfp4 quantizer formulas of manifest recipe r at numerics 2.4's cases: output i of op at
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
    qf_test_nv_out(r, "gemm", 0, "y", "bf16", "2*M*N", "bf16 output");
    qf_test_nv_out(r, "gemm", 1, "y", "fp32", "4*M*N", "fp32 output");
    assert_null(cJSON_GetObjectItem(qf_test_shape_out(r, "quantize", 4), "packing"));
}

/* The manifest's nvfp4 options (rht_seed "none"), requirements and shape formulas (numerics 2.4).
 */
static void test_gen_nvfp4_manifest(void **state) {
    cJSON *root;
    const cJSON *r = qf_test_stub_manifest(*state, qf_test_nv_generate, &root);
    const cJSON *opts = cJSON_GetObjectItem(r, "options");
    assert_string_equal(qf_test_json_str(r, "options_string"), QF_NV_OPTIONS);
    assert_string_equal(qf_test_json_str(opts, "rht_seed"), "none");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(opts, "rht_input")));
    assert_string_equal(qf_test_json_str(cJSON_GetObjectItem(r, "formats"), "grad"), "e2m1");
    const cJSON *nq = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), "norm_quantize");
    assert_string_equal(qf_test_json_str(nq, "requires"),
                        "M > 0 && K > 0 && (rowwise || columnwise) && norm in {layernorm, "
                        "rmsnorm} && role == input && dtype in {bf16, fp16, fp32} && M % 16 == 0 "
                        "&& K % 16 == 0");
    const cJSON *gm = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "shapes"), "gemm");
    assert_string_equal(qf_test_json_str(gm, "requires"), "M > 0 && N > 0 && K > 0 && K % 32 == 0");
    qf_test_nv_outputs(r);
    qf_test_nv_formulas(r);
    cJSON_Delete(root);
}

/* ========================================================================= shape tables */

/* A malformed formula in a shape table is refused before anything is emitted. */
static void test_shape_formula_check(void **state) {
    (void)state;
    static const char *const bad[] = {"roundup(M,128", "cdiv(M)", "roundup(M,0)", "Q", "MK",
                                      "roundup(cdiv(cdiv(cdiv(cdiv(M,2),2),2),2),2)", "",
                                      "roundup (M,4)", "1234567890"};
    static const char *const good[] = {"roundup(M,128)", "roundup(cdiv(K,32),4)", "cdiv(N,K)",
                                       "123456789"};
    static const qf_fake_op op = {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 0, NULL, 0, NULL};
    qf_gen_err e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + sizeof good / sizeof good[0]; i++) {
        int ok = i >= sizeof bad / sizeof bad[0];
        const char *f = ok ? good[i - sizeof bad / sizeof bad[0]] : bad[i];
        qf_fake_out o = {QF_FAKE_OP(QF_OP_GEMM), "y", QF_DTYPE_BF16, 2, {"M", f},
                         QF_FAKE_COND_ALWAYS, 0, 0};
        qf_fake_table t = {&op, 1, &o, 1};
        if ((qf_gen_shape_table_check(&t, &e) == 0) != ok)
            fail_msg("formula '%s' is %s", f, ok ? "refused" : "accepted");
        if (!ok)
            assert_string_equal(e.msg, "shape table: output 'y' dim 1 is not a formula of M, N, "
                                       "K, constants, roundup and cdiv");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_gen_manifest_shapes),
        T(test_gen_mxfp8_manifest),
        T(test_gen_nvfp4_manifest),
        cmocka_unit_test(test_shape_formula_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
