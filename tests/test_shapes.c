/* test_shapes.c: the generated fake-shape functions (build/generated/shapes.c, numerics 4) of
 * fp8_delayed, of mxfp8 / mxfp8_2d (padded E8M0 scales, numerics 2.3) and of the nvfp4 recipes
 * (packed E2M1, numerics 2.4), of fp8_block (fp32 GEMM_READY block scales, numerics 2.5), and
 * their place in the registry. */
#include "test_util.h"

#include "family.h"
#include "ref_fp8_block.h"
#include "registry.h"
#include "shapes.h"

#define CAP 8

/* A valid quantizer query of x[M, K] (LayerNorm for a norm + quantize, no norm otherwise). */
static qf_shape_query qf_test_query(qf_op op, unsigned outputs, int64_t M, int64_t K) {
    qf_shape_query q = {.op = op,
                        .role = QF_ROLE_INPUT,
                        .norm = op == QF_OP_NORM_QUANTIZE ? QF_NORM_LAYERNORM : QF_NORM_NONE,
                        .outputs = outputs,
                        .M = M,
                        .K = K};
    return q;
}

/* The output named name among out[0..n), or NULL. */
static const qf_shape *qf_test_find(const qf_shape *out, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(out[i].name, name) == 0)
            return &out[i];
    return NULL;
}

static void qf_test_expect(const qf_shape *s, qf_dtype dt, int ndim, int64_t d0, int64_t d1,
                           uint64_t bytes) {
    assert_non_null(s);
    assert_int_equal(s->dtype, dt);
    assert_int_equal(s->ndim, ndim);
    assert_int_equal(s->dims[0], d0);
    if (ndim > 1)
        assert_int_equal(s->dims[1], d1);
    assert_int_equal(s->bytes, bytes);
}

/* One expected output: its name, dtype, dims (d1 only when ndim > 1) and bytes. */
typedef struct qf_test_out {
    const char *name;
    qf_dtype dtype;
    int ndim;
    int64_t d0, d1;
    uint64_t bytes;
} qf_test_out;

/* Asserts every output of want[0..n_want) among out[0..n) by name (as out[i] for want[i] when
 * in_order), with its dtype, dims and bytes. */
static void qf_test_expect_outs(const qf_shape *out, int n, const qf_test_out *want, int n_want,
                                int in_order) {
    for (int i = 0; i < n_want; i++) {
        const qf_test_out *w = &want[i];
        const qf_shape *s = qf_test_find(out, n, w->name);
        if (in_order) {
            assert_true(i < n);
            assert_string_equal(out[i].name, w->name);
            s = &out[i];
        }
        if (!s)
            fail_msg("no output %s", w->name);
        qf_test_expect(s, w->dtype, w->ndim, w->d0, w->d1, w->bytes);
    }
}

#define QF_TEST_EXPECT_OUTS(out, n, want, in_order)                                                \
    qf_test_expect_outs(out, n, want, (int)(sizeof want / sizeof want[0]), in_order)

static void test_nq_rowwise_only(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 3, 769);
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 5); /* rowwise, amax, scale_inv, mu, rsigma */
    static const qf_test_out want[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 3, 769, 3 * 769},
        {"amax", QF_DTYPE_FP32, 1, 1, 0, 4},
        {"scale_inv", QF_DTYPE_FP32, 1, 1, 0, 4},
        {"mu", QF_DTYPE_FP32, 1, 3, 0, 12},
        {"rsigma", QF_DTYPE_FP32, 1, 3, 0, 12},
    };
    assert_string_equal(out[0].name, "rowwise_data");
    assert_null(qf_test_find(out, n, "columnwise_data"));
    QF_TEST_EXPECT_OUTS(out, n, want, 0);
}

static void test_nq_columnwise_only(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_COLUMNWISE, 3, 769);
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 5);
    assert_null(qf_test_find(out, n, "rowwise_data"));
    qf_test_expect(qf_test_find(out, n, "columnwise_data"), QF_DTYPE_E4M3, 2, 769, 3, 3 * 769);
}

static void test_nq_both(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q =
        qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 217, 256);
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 6);
    qf_test_expect(qf_test_find(out, n, "rowwise_data"), QF_DTYPE_E4M3, 2, 217, 256, 217 * 256);
    qf_test_expect(qf_test_find(out, n, "columnwise_data"), QF_DTYPE_E4M3, 2, 256, 217, 217 * 256);
}

/* RMSNorm has rsigma but no mu. */
static void test_nq_rmsnorm_no_mu(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 5, 160);
    q.norm = QF_NORM_RMSNORM;
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 4);
    assert_null(qf_test_find(out, n, "mu"));
    qf_test_expect(qf_test_find(out, n, "rsigma"), QF_DTYPE_FP32, 1, 5, 0, 20);
}

/* hybrid: weights E4M3, gradients E5M2; quantize has no norm outputs. */
static void test_quantize_roles(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 1, 16);
    q.role = QF_ROLE_GRAD;
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 4);
    qf_test_expect(qf_test_find(out, n, "rowwise_data"), QF_DTYPE_E5M2, 2, 1, 16, 16);
    qf_test_expect(qf_test_find(out, n, "columnwise_data"), QF_DTYPE_E5M2, 2, 16, 1, 16);
    assert_null(qf_test_find(out, n, "mu"));
    assert_null(qf_test_find(out, n, "rsigma"));
    q.role = QF_ROLE_WEIGHT;
    n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 4);
    assert_int_equal(qf_test_find(out, n, "rowwise_data")->dtype, QF_DTYPE_E4M3);
}

/* y [M, N]; cuBLASLt's FP8 GEMM takes K and N multiples of 16, and so do the fake shapes (a
 * query the op would refuse is invalid here too). */
static void test_gemm_y(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = {.op = QF_OP_GEMM, .M = 7, .N = 48, .K = 768};
    int n = qf_shapes_fp8_delayed(&q, out, CAP);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].name, "y");
    qf_test_expect(&out[0], QF_DTYPE_BF16, 2, 7, 48, 2 * 7 * 48);
    q.K = 769;
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, CAP), -1);
    q.K = 768, q.N = 40;
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, CAP), -1);
}

static void test_invalid_queries(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query bad[] = {
        qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 0, 16),
        qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 4, -1),
        qf_test_query(QF_OP_NORM_QUANTIZE, 0, 4, 16),
        qf_test_query(QF_OP_QUANTIZE, 0, 4, 16),
        qf_test_query(QF_OP_SCALE_UPDATE, QF_OUT_ROWWISE, 4, 16),
        qf_test_query(QF_OP_COUNT, QF_OUT_ROWWISE, 4, 16),
        {.op = QF_OP_GEMM, .M = 4, .N = 0, .K = 16},
        {.op = QF_OP_GEMM, .M = 4, .N = 16, .K = 0},
        qf_test_query(QF_OP_QUANTIZE, 0x80000000u | QF_OUT_ROWWISE, 4, 16), /* unknown bits */
        qf_test_query(QF_OP_NORM_QUANTIZE, 16u | QF_OUT_COLUMNWISE, 4, 16),
        {.op = QF_OP_GEMM, .outputs = 0xFFFFFFFFu, .M = 4, .N = 16, .K = 16},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (qf_shapes_fp8_delayed(&bad[i], out, CAP) != -1)
            fail_msg("query %zu is not rejected", i);
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 4, 16);
    q.norm = QF_NORM_NONE;
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE, 4, 16);
    q.role = QF_ROLE_COUNT;
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, CAP), -1);
    assert_int_equal(qf_shapes_fp8_delayed(NULL, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE, INT64_MAX, INT64_MAX);
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, CAP), -1); /* bytes overflow */
}

/* cap too small gives -2 and writes nothing past cap. */
static void test_small_cap(void **state) {
    (void)state;
    qf_shape out[CAP];
    memset(out, 0xAB, sizeof out);
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 3, 5);
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, 5), -2);
    unsigned char poison[sizeof out[0]];
    memset(poison, 0xAB, sizeof poison);
    assert_memory_equal(&out[5], poison, sizeof poison);
    assert_int_equal(qf_shapes_fp8_delayed(&q, NULL, 0), -2);
    assert_int_equal(qf_shapes_fp8_delayed(&q, out, 6), 6);
}

/* The registry entry of the recipe points at its shape function and holds its options. */
static void test_registry_points_to_shapes(void **state) {
    (void)state;
    int found = 0;
    for (int i = 0; i < qf_recipe_count; i++) {
        assert_non_null(qf_recipes[i].shapes);
        if (strcmp(qf_recipes[i].name, "fp8_delayed") != 0)
            continue;
        found = 1;
        assert_true(qf_recipes[i].shapes == qf_shapes_fp8_delayed);
        assert_string_equal(qf_recipes[i].file, "recipes/fp8_delayed.lua");
        assert_string_equal(qf_recipes[i].options, "amax_compute=max;amax_history_len=1024;"
                                                   "family=fp8_delayed;format=hybrid;margin=0");
        assert_int_equal(qf_recipes[i].fmt[QF_ROLE_GRAD], QF_DTYPE_E5M2);
    }
    assert_true(found);
    /* Every kernel points at its recipe, and each recipe's kernel list is exactly its own. */
    int listed = 0;
    for (int k = 0; k < qf_kernel_count; k++)
        assert_true(qf_kernels[k].recipe >= qf_recipes &&
                    qf_kernels[k].recipe < qf_recipes + qf_recipe_count);
    for (int i = 0; i < qf_recipe_count; i++) {
        for (int k = 0; k < qf_recipes[i].n_kernels; k++)
            assert_ptr_equal(qf_recipes[i].kernels[k].recipe, &qf_recipes[i]);
        listed += qf_recipes[i].n_kernels;
    }
    assert_int_equal(listed, qf_kernel_count);
}

/* A formula of qf_fake_shape_formulas at (M, N, K), by its grammar (numerics 4): a symbol, a
 * decimal constant, roundup(a,b) or cdiv(a,b). */
static int64_t formula_eval(const char **s, int64_t M, int64_t N, int64_t K) {
    const int up = strncmp(*s, "roundup(", 8) == 0, cd = strncmp(*s, "cdiv(", 5) == 0;
    if (up || cd) {
        *s += up ? 8 : 5;
        const int64_t a = formula_eval(s, M, N, K);
        assert_int_equal(*(*s)++, ',');
        const int64_t b = formula_eval(s, M, N, K);
        assert_int_equal(*(*s)++, ')');
        return up ? (a + b - 1) / b * b : (a + b - 1) / b;
    }
    const char c = *(*s)++;
    if (c == 'M' || c == 'N' || c == 'K')
        return c == 'M' ? M : c == 'N' ? N : K;
    assert_true(c >= '0' && c <= '9');
    int64_t v = c - '0';
    while (**s >= '0' && **s <= '9')
        v = v * 10 + (*(*s)++ - '0');
    return v;
}

/* Every recipe's formulas give qf_fake_shapes' outputs (names, dtypes, dims) for the queries of
 * every op at two sizes, and refuse what it refuses. */
static void test_shape_formulas(void **state) {
    (void)state;
    static const int64_t sizes[][3] = {{48, 96, 160}, {1024, 272, 4128}};
    int checked = 0;
    for (int r = 0; r < qf_recipe_count; r++)
        for (int op = 0; op < QF_OP_COUNT; op++)
            for (unsigned outputs = 0; outputs < 16; outputs++)
                for (int nr = 0; nr < QF_NORM_COUNT * QF_ROLE_COUNT; nr++)
                    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
                        const int64_t M = sizes[z][0], N = sizes[z][1], K = sizes[z][2];
                        const int norm = nr % QF_NORM_COUNT; /* every role: fp8_block's weight
                                                              * scales differ from the others' */
                        const qf_shape_query q = {.op = (qf_op)op,
                                                  .role = (qf_role)(nr / QF_NORM_COUNT),
                                                  .norm = (qf_norm)norm, .outputs = outputs,
                                                  .M = M, .N = N, .K = K,
                                                  .dtype = QF_DTYPE_BF16};
                        qf_shape sh[CAP];
                        qf_shape_formula f[CAP];
                        int n = -1, nf = -1;
                        const qf_status s = qf_fake_shapes(qf_recipes[r].name, &q, sh, CAP, &n);
                        const qf_status sf =
                            qf_fake_shape_formulas(qf_recipes[r].name, &q, f, CAP, &nf);
                        assert_int_equal(sf, s);
                        if (s != QF_OK)
                            continue;
                        assert_int_equal(nf, n);
                        for (int i = 0; i < n; i++) {
                            assert_string_equal(f[i].name, sh[i].name);
                            assert_int_equal(f[i].dtype, sh[i].dtype);
                            assert_int_equal(f[i].ndim, sh[i].ndim);
                            for (int d = 0; d < f[i].ndim; d++) {
                                const char *p = f[i].dims[d];
                                assert_int_equal(formula_eval(&p, M, N, K), sh[i].dims[d]);
                                assert_int_equal(*p, '\0');
                            }
                        }
                        checked++;
                    }
    printf("formulas checked for %d valid queries\n", checked);
    assert_true(checked > 50);
    qf_shape_formula f[CAP];
    int n = 0;
    const qf_shape_query gemm = {.op = QF_OP_GEMM, .M = 7, .N = 48, .K = 768};
    assert_int_equal(qf_fake_shape_formulas("fp8_delayed", &gemm, f, 0, &n), QF_ERR_INVALID_ARG);
    assert_int_equal(qf_fake_shape_formulas("fp8_delayed", &gemm, f, 1, &n), QF_OK);
    assert_string_equal(f[0].dims[0], "M");
    assert_string_equal(f[0].dims[1], "N");
    assert_int_equal(qf_fake_shape_formulas("nope", &gemm, f, 1, &n), QF_ERR_NOT_FOUND);
    assert_int_equal(qf_fake_shape_formulas("fp8_delayed", NULL, f, 1, &n), QF_ERR_INVALID_ARG);
}

/* ========================================================================= mxfp8 */

/* The registry entry of recipe `name`; fails when it is not generated. NOTES: looked up by name,
 * not called as qf_shapes_mxfp8, so this file builds whatever recipes out/ holds. */
static const qf_recipe *qf_test_recipe(const char *name) {
    for (int i = 0; i < qf_recipe_count; i++)
        if (strcmp(qf_recipes[i].name, name) == 0)
            return &qf_recipes[i];
    fail_msg("recipe %s is not in the registry (recipes/%s.lua)", name, name);
    return NULL;
}

/* Both outputs of the smallest tensor: every scale matrix is padding but one entry. */
static void test_mx_nq_padding_1x1(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 1, 1);
    static const qf_test_out want[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 1, 1, 1},
        {"rowwise_scale_inv", QF_DTYPE_E8M0, 2, 128, 4, 512},
        {"columnwise_data", QF_DTYPE_E4M3, 2, 1, 1, 1}, /* [M, K]: not transposed */
        {"columnwise_scale_inv", QF_DTYPE_E8M0, 2, 4, 128, 512},
        {"mu", QF_DTYPE_FP32, 1, 1, 0, 4},
        {"rsigma", QF_DTYPE_FP32, 1, 1, 0, 4},
    };
    int n = qf_test_recipe("mxfp8")->shapes(&q, out, CAP);
    assert_int_equal(n, 6);
    QF_TEST_EXPECT_OUTS(out, n, want, 1);
}

/* A real layer (M = 993 tokens, K = 8192), rowwise RMSNorm: no mu, no columnwise outputs. */
static void test_mx_nq_rowwise_993x8192(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 993, 8192);
    q.norm = QF_NORM_RMSNORM;
    static const qf_test_out rows[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 993, 8192, 993 * 8192},
        {"rowwise_scale_inv", QF_DTYPE_E8M0, 2, 1024, 256, 1024 * 256},
        {"rsigma", QF_DTYPE_FP32, 1, 993, 0, 4 * 993},
    };
    static const qf_test_out cols[] = {
        {"columnwise_data", QF_DTYPE_E4M3, 2, 993, 8192, 993 * 8192},
        {"columnwise_scale_inv", QF_DTYPE_E8M0, 2, 32, 8192, 32 * 8192},
    };
    int n = qf_test_recipe("mxfp8")->shapes(&q, out, CAP);
    assert_int_equal(n, 3);
    QF_TEST_EXPECT_OUTS(out, n, rows, 0);
    assert_null(qf_test_find(out, n, "mu"));
    assert_null(qf_test_find(out, n, "columnwise_scale_inv"));
    q.outputs = QF_OUT_COLUMNWISE;
    n = qf_test_recipe("mxfp8")->shapes(&q, out, CAP);
    assert_int_equal(n, 3);
    QF_TEST_EXPECT_OUTS(out, n, cols, 0);
}

/* Asserts that each of the n_fns shape functions fns answers the quantize query of x[M, K] with
 * both copies, for every role, with exactly the outputs of want[0..n_want), in order. */
static void qf_test_quantize_roles(const qf_shapes_fn *fns, int n_fns, int64_t M, int64_t K,
                                   const qf_test_out *want, int n_want) {
    qf_shape out[CAP];
    for (int f = 0; f < n_fns; f++)
        for (int role = 0; role < QF_ROLE_COUNT; role++) {
            qf_shape_query q =
                qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, M, K);
            q.role = (qf_role)role;
            int n = fns[f](&q, out, CAP);
            assert_int_equal(n, n_want);
            qf_test_expect_outs(out, n, want, n_want, 1);
        }
}

/* One 32x32 block, quantize of each role, in both recipes: same shapes, 1D or 2D; no norm
 * outputs. */
static void test_mx_quantize_32x32(void **state) {
    (void)state;
    const qf_shapes_fn fns[] = {qf_test_recipe("mxfp8")->shapes,
                                qf_test_recipe("mxfp8_2d")->shapes};
    static const qf_test_out want[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 32, 32, 1024},
        {"rowwise_scale_inv", QF_DTYPE_E8M0, 2, 128, 4, 512},
        {"columnwise_data", QF_DTYPE_E4M3, 2, 32, 32, 1024},
        {"columnwise_scale_inv", QF_DTYPE_E8M0, 2, 4, 128, 512},
    };
    qf_test_quantize_roles(fns, 2, 32, 32, want, 4);
}

static void test_mx_gemm_and_invalid(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shapes_fn fn = qf_test_recipe("mxfp8_2d")->shapes;
    qf_shape_query q = {.op = QF_OP_GEMM, .M = 7, .N = 48, .K = 768};
    assert_int_equal(fn(&q, out, CAP), 1);
    qf_test_expect(&out[0], QF_DTYPE_BF16, 2, 7, 48, 2 * 7 * 48);
    q.K = 784; /* MXFP8's GEMM takes K multiples of 32 */
    assert_int_equal(fn(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_SCALE_UPDATE, QF_OUT_ROWWISE, 4, 16); /* mxfp8 has no scale update */
    assert_int_equal(fn(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, 0, 4, 16);
    assert_int_equal(fn(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE, INT64_MAX, 1); /* roundup(M,128) overflows */
    assert_int_equal(fn(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_COLUMNWISE, 1, INT64_MAX); /* roundup(K,128) */
    assert_int_equal(fn(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 1, 1);
    assert_int_equal(fn(&q, out, 5), -2);
}

/* The registry entries of the mxfp8 recipes, and every kernel's family is its recipe's. */
static void test_mx_registry(void **state) {
    (void)state;
    const qf_recipe *a = qf_test_recipe("mxfp8"), *b = qf_test_recipe("mxfp8_2d");
    assert_int_equal(a->family, QF_FAMILY_MXFP8);
    assert_int_equal(a->scale_rounding, QF_SCALE_ROUNDING_CEIL);
    assert_int_equal(a->block_2d[QF_ROLE_WEIGHT], 0);
    assert_int_equal(b->block_2d[QF_ROLE_WEIGHT], 1);
    assert_string_equal(a->options, "family=mxfp8;grad_format=e4m3;input_format=e4m3;"
                                    "scale_rounding=ceil;weight_2d=false;weight_format=e4m3");
    assert_string_equal(b->options, "family=mxfp8;grad_format=e4m3;input_format=e4m3;"
                                    "scale_rounding=ceil;weight_2d=true;weight_format=e4m3");
    for (int i = 0; i < QF_ROLE_COUNT; i++)
        assert_int_equal(a->fmt[i], QF_DTYPE_E4M3);
    for (int k = 0; k < qf_kernel_count; k++)
        assert_int_equal(qf_kernels[k].family, qf_kernels[k].recipe->family);
}

/* ---- nvfp4 (numerics 2.4) */

/* Both copies of one quantize (each role, both recipes): packed E2M1 data with dims in bytes,
 * the columnwise copy transposed, padded E4M3 scales, one fp32 amax per copy. */
static void test_nv_quantize_32x64(void **state) {
    (void)state;
    const qf_shapes_fn fns[] = {qf_shapes_nvfp4, qf_shapes_nvfp4_nort};
    static const qf_test_out want[] = {
        {"rowwise_data", QF_DTYPE_E2M1, 2, 32, 32, 32 * 64 / 2},
        {"rowwise_scale_inv", QF_DTYPE_E4M3, 2, 128, 4, 512},
        {"columnwise_data", QF_DTYPE_E2M1, 2, 64, 16, 64 * 32 / 2},
        {"columnwise_scale_inv", QF_DTYPE_E4M3, 2, 128, 4, 512},
        {"amax_rowwise", QF_DTYPE_FP32, 1, 1, 0, 4},
        {"amax_columnwise", QF_DTYPE_FP32, 1, 1, 0, 4},
    };
    qf_test_quantize_roles(fns, 2, 32, 64, want, 6);
}

/* A real layer (M = 4096, K = 1040: K/16 = 65 scale columns, padded to 68), one copy at a time:
 * the other copy's data, scales and amax are absent; rmsnorm has no mu. */
static void test_nv_nq_4096x1040(void **state) {
    (void)state;
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 4096, 1040);
    static const qf_test_out rows[] = {
        {"rowwise_data", QF_DTYPE_E2M1, 2, 4096, 520, 4096 * 520},
        {"rowwise_scale_inv", QF_DTYPE_E4M3, 2, 4096, 68, 4096 * 68},
        {"amax_rowwise", QF_DTYPE_FP32, 1, 1, 0, 4},
        {"mu", QF_DTYPE_FP32, 1, 4096, 0, 4 * 4096},
    };
    static const qf_test_out cols[] = {
        {"columnwise_data", QF_DTYPE_E2M1, 2, 1040, 2048, 1040 * 2048},
        {"columnwise_scale_inv", QF_DTYPE_E4M3, 2, 1152, 256, 1152 * 256},
        {"amax_columnwise", QF_DTYPE_FP32, 1, 1, 0, 4},
    };
    int n = qf_shapes_nvfp4(&q, out, CAP);
    assert_int_equal(n, 5);
    QF_TEST_EXPECT_OUTS(out, n, rows, 0);
    assert_null(qf_test_find(out, n, "amax_columnwise"));
    q.outputs = QF_OUT_COLUMNWISE;
    q.norm = QF_NORM_RMSNORM;
    n = qf_shapes_nvfp4(&q, out, CAP);
    assert_int_equal(n, 4);
    QF_TEST_EXPECT_OUTS(out, n, cols, 0);
    assert_null(qf_test_find(out, n, "mu"));
    assert_null(qf_test_find(out, n, "rowwise_data"));
}

/* M and K must be multiples of 16 (the GEMM: K a multiple of 32); otherwise the query is
 * invalid (-1). */
static void test_nv_multiple_of_16(void **state) {
    (void)state;
    static const int64_t bad[][2] = {{17, 16}, {16, 24}, {8, 16}, {16, 1}, {1, 1}, {16, 1040 + 8}};
    qf_shape out[CAP];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int op = 0; op < 2; op++) {
            qf_shape_query q =
                qf_test_query(op ? QF_OP_QUANTIZE : QF_OP_NORM_QUANTIZE,
                              QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, bad[i][0], bad[i][1]);
            if (qf_shapes_nvfp4(&q, out, CAP) != -1)
                fail_msg("M=%lld K=%lld accepted", (long long)bad[i][0], (long long)bad[i][1]);
        }
    qf_shape_query q = {.op = QF_OP_GEMM, .M = 5, .N = 3, .K = 32};
    assert_int_equal(qf_shapes_nvfp4(&q, out, CAP), 1);
    qf_test_expect(&out[0], QF_DTYPE_BF16, 2, 5, 3, 2 * 5 * 3);
    q.K = 40;
    assert_int_equal(qf_shapes_nvfp4(&q, out, CAP), -1);
    q.K = 48; /* whole 1x16 blocks, but not whole 16-byte rows of packed data */
    assert_int_equal(qf_shapes_nvfp4(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_SCALE_UPDATE, QF_OUT_ROWWISE, 16, 16); /* no scale update */
    assert_int_equal(qf_shapes_nvfp4(&q, out, CAP), -1);
    q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 16, 16);
    assert_int_equal(qf_shapes_nvfp4(&q, out, 5), -2);
}

/* The family-table interpreter (qf_family_shapes, for recipes loaded at run time) answers every
 * query exactly as each shipped recipe's generated function: counts (-1, -2 included), names,
 * dtypes, dims and bytes, over ops, roles, norms, outputs, small caps and odd, aligned, zero,
 * negative and huge sizes. */
/* ========================================================================= fp8_block */

/* x [5, 130], both copies (numerics 2.5, TE's get_scale_shape): input and grad have 1x128 rowwise
 * scales [cdiv(K,128), roundup(M,4)] = [2, 8] and 128x1 columnwise [cdiv(M,128), roundup(K,4)]
 * = [1, 132]; the weight's 128x128 tiles [cdiv(M,128), roundup(cdiv(K,128),4)] = [1, 4] and, for
 * the transposed copy, [cdiv(K,128), roundup(cdiv(M,128),4)] = [2, 4]. fp32 scales, E4M3 data,
 * the columnwise copy transposed. */
static void test_blk_quantize_roles(void **state) {
    (void)state;
    static const qf_test_out one_d[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 5, 130, 650},
        {"rowwise_scale_inv", QF_DTYPE_FP32, 2, 2, 8, 64},
        {"columnwise_data", QF_DTYPE_E4M3, 2, 130, 5, 650},
        {"columnwise_scale_inv", QF_DTYPE_FP32, 2, 1, 132, 528},
    };
    static const qf_test_out two_d[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 5, 130, 650},
        {"rowwise_scale_inv", QF_DTYPE_FP32, 2, 1, 4, 16},
        {"columnwise_data", QF_DTYPE_E4M3, 2, 130, 5, 650},
        {"columnwise_scale_inv", QF_DTYPE_FP32, 2, 2, 4, 32},
    };
    const qf_recipe *r = qf_test_recipe("fp8_block");
    qf_shape out[CAP];
    for (int role = 0; role < QF_ROLE_COUNT; role++) {
        qf_shape_query q =
            qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, 5, 130);
        q.role = (qf_role)role;
        int n = r->shapes(&q, out, CAP);
        assert_int_equal(n, 4);
        if (role == QF_ROLE_WEIGHT)
            QF_TEST_EXPECT_OUTS(out, n, two_d, 1);
        else
            QF_TEST_EXPECT_OUTS(out, n, one_d, 1);
        q.outputs = QF_OUT_COLUMNWISE; /* one copy: its two outputs only */
        assert_int_equal(r->shapes(&q, out, CAP), 2);
        assert_string_equal(out[1].name, "columnwise_scale_inv");
        assert_int_equal(out[1].dims[0], role == QF_ROLE_WEIGHT ? 2 : 1);
        q.outputs = QF_OUT_ROWWISE | QF_OUT_FP32; /* a bit a quantizer does not take */
        assert_int_equal(r->shapes(&q, out, CAP), -1);
    }
}

/* The table agrees with the reference's own layout function over sizes around the block edges,
 * for every role and copy (the reference writes exactly what the runtime allocates). */
static void test_blk_shapes_match_reference(void **state) {
    (void)state;
    static const int64_t sizes[] = {1, 3, 4, 5, 127, 128, 129, 255, 256, 257, 511, 513, 4100};
    const qf_recipe *r = qf_test_recipe("fp8_block");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
            for (int role = 0; role < QF_ROLE_COUNT; role++) {
                const int64_t M = sizes[i], K = sizes[j];
                const int d2 = role == QF_ROLE_WEIGHT;
                qf_shape_query q = qf_test_query(QF_OP_QUANTIZE, 3, M, K);
                q.role = (qf_role)role;
                qf_shape out[CAP];
                assert_int_equal(r->shapes(&q, out, CAP), 4);
                int64_t rows, cols;
                qf_fp8_block_scale_shape(d2, M, K, &rows, &cols);
                qf_test_expect(&out[1], QF_DTYPE_FP32, 2, rows, cols, (uint64_t)(rows * cols * 4));
                qf_fp8_block_scale_shape(d2, K, M, &rows, &cols);
                qf_test_expect(&out[3], QF_DTYPE_FP32, 2, rows, cols, (uint64_t)(rows * cols * 4));
            }
}

/* norm_quantize quantizes the input role (1x128; another role is an invalid query), with mu
 * (layernorm) and rsigma; the GEMM, norm
 * backward, dbias and activation queries are answered as for every family. */
static void test_blk_nq_and_other_ops(void **state) {
    (void)state;
    const qf_recipe *r = qf_test_recipe("fp8_block");
    qf_shape out[CAP];
    qf_shape_query q = qf_test_query(QF_OP_NORM_QUANTIZE, QF_OUT_ROWWISE, 993, 8192);
    q.role = QF_ROLE_WEIGHT; /* refused: a norm + quantize is the input's, as qf_quantize says */
    assert_int_equal(r->shapes(&q, out, CAP), -1);
    assert_int_equal(qf_family_shapes(r, &q, out, CAP), -1);
    q.role = QF_ROLE_INPUT;
    static const qf_test_out rows[] = {
        {"rowwise_data", QF_DTYPE_E4M3, 2, 993, 8192, 993 * 8192},
        {"rowwise_scale_inv", QF_DTYPE_FP32, 2, 64, 996, 64 * 996 * 4},
        {"mu", QF_DTYPE_FP32, 1, 993, 0, 993 * 4},
        {"rsigma", QF_DTYPE_FP32, 1, 993, 0, 993 * 4},
    };
    int n = r->shapes(&q, out, CAP);
    assert_int_equal(n, 4);
    QF_TEST_EXPECT_OUTS(out, n, rows, 1);
    q.outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE;
    assert_int_equal(r->shapes(&q, out, CAP), 6);
    qf_test_expect(qf_test_find(out, 6, "columnwise_scale_inv"), QF_DTYPE_FP32, 2, 8, 8192,
                   8 * 8192 * 4);
    q.outputs = 0; /* a quantizer needs a copy */
    assert_int_equal(r->shapes(&q, out, CAP), -1);
    const qf_shape_query others[] = {
        {.op = QF_OP_GEMM, .M = 7, .N = 48, .K = 768},
        {.op = QF_OP_NORM_BACKWARD, .norm = QF_NORM_LAYERNORM, .M = 7, .K = 769,
         .dtype = QF_DTYPE_BF16},
        {.op = QF_OP_DBIAS, .M = 7, .N = 48, .dtype = QF_DTYPE_BF16},
        {.op = QF_OP_ACTIVATION, .M = 7, .N = 48, .dtype = QF_DTYPE_BF16}};
    const int counts[] = {1, 3, 1, 2};
    for (int i = 0; i < 4; i++)
        assert_int_equal(r->shapes(&others[i], out, CAP), counts[i]);
    qf_test_expect(&out[0], QF_DTYPE_BF16, 2, 7, 48, 7 * 48 * 2); /* the activation's a */
}

/* Enum fields out of range are refused, with their value named, whether the op reads them or
 * not (a GEMM reads no role, norm or dtype); the same query in range passes. */
static void test_enums_out_of_range(void **state) {
    (void)state;
    const qf_shape_query ok = {.op = QF_OP_QUANTIZE, .role = QF_ROLE_WEIGHT,
                               .outputs = QF_OUT_ROWWISE, .M = 32, .K = 32};
    const qf_shape_query gemm = {.op = QF_OP_GEMM, .M = 32, .N = 32, .K = 32};
    qf_shape sh[CAP];
    int n = 0;
    assert_int_equal(qf_fake_shapes("mxfp8", &ok, sh, CAP, &n), QF_OK);
    assert_int_equal(qf_fake_shapes("fp8_delayed", &gemm, sh, CAP, &n), QF_OK);
    static const struct {
        int field, value;
        const char *why;
    } bad[] = {{0, 42, "dtype 42 is not a qf_dtype"}, {0, -3, "dtype -3 is not a qf_dtype"},
               {1, 9, "norm 9 is not a qf_norm"},     {2, 7, "role is not a qf_role"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int g = 0; g < 2; g++) {
            qf_shape_query q = g ? gemm : ok;
            if (bad[i].field == 0)
                q.dtype = (qf_dtype)bad[i].value;
            else if (bad[i].field == 1)
                q.norm = (qf_norm)bad[i].value;
            else
                q.role = (qf_role)bad[i].value;
            assert_int_equal(qf_fake_shapes(g ? "fp8_delayed" : "mxfp8", &q, sh, CAP, &n),
                             QF_ERR_INVALID_ARG);
            assert_non_null(strstr(qf_last_error(), bad[i].why));
            const qf_recipe *gen = qf_test_recipe(g ? "fp8_delayed" : "mxfp8");
            assert_int_equal(gen->shapes(&q, sh, CAP), -1); /* the generated function */
        }
    }
}

/* A quantizer's query names its input's dtype (bf16, fp16 or fp32; the shapes do not depend on
 * it) and, for a plain quantize, no norm (a norm + quantize is QF_OP_NORM_QUANTIZE): every
 * recipe's generated function, the family table (a recipe loaded at run time) and
 * qf_fake_shapes / qf_fake_shape_formulas refuse the others, saying why. A GEMM reads no dtype:
 * an E4M3 one is ignored there. */
static void test_quantizer_query_norm_and_dtype(void **state) {
    (void)state;
    static const qf_dtype quantized[] = {QF_DTYPE_E4M3, QF_DTYPE_E5M2, QF_DTYPE_E8M0,
                                         QF_DTYPE_E2M1};
    static const qf_dtype inputs[] = {QF_DTYPE_FP32, QF_DTYPE_FP16, QF_DTYPE_BF16};
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        const char *name = qf_recipes[ri].name;
        qf_recipe interp = qf_recipes[ri];
        interp.shapes = NULL; /* the same recipe, answered by its family's table */
        qf_shape sh[CAP];
        qf_shape_formula f[CAP];
        int n = 0;
        for (int op = QF_OP_NORM_QUANTIZE; op <= QF_OP_QUANTIZE; op++) {
            qf_shape_query q = qf_test_query((qf_op)op, QF_OUT_ROWWISE, 64, 128);
            for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
                q.dtype = inputs[i];
                assert_int_equal(qf_fake_shapes(name, &q, sh, CAP, &n), QF_OK);
                assert_true(qf_recipes[ri].shapes(&q, sh, CAP) > 0);
                assert_true(qf_recipe_shapes(&interp, &q, sh, CAP) > 0);
            }
            for (size_t i = 0; i < sizeof quantized / sizeof quantized[0]; i++) {
                q.dtype = quantized[i];
                assert_int_equal(qf_fake_shapes(name, &q, sh, CAP, &n), QF_ERR_INVALID_ARG);
                assert_non_null(strstr(qf_last_error(), "the op takes dtype bf16, fp16 or fp32"));
                assert_int_equal(qf_fake_shape_formulas(name, &q, f, CAP, &n),
                                 QF_ERR_INVALID_ARG);
                assert_int_equal(qf_recipes[ri].shapes(&q, sh, CAP), -1);
                assert_int_equal(qf_recipe_shapes(&interp, &q, sh, CAP), -1);
            }
        }
        qf_shape_query q = qf_test_query(QF_OP_QUANTIZE, QF_OUT_ROWWISE, 64, 128);
        for (int norm = QF_NORM_LAYERNORM; norm < QF_NORM_COUNT; norm++) {
            q.norm = (qf_norm)norm;
            assert_int_equal(qf_fake_shapes(name, &q, sh, CAP, &n), QF_ERR_INVALID_ARG);
            assert_non_null(strstr(qf_last_error(), "a plain quantize takes norm none"));
            assert_int_equal(qf_fake_shape_formulas(name, &q, f, CAP, &n), QF_ERR_INVALID_ARG);
            assert_int_equal(qf_recipes[ri].shapes(&q, sh, CAP), -1);
            assert_int_equal(qf_recipe_shapes(&interp, &q, sh, CAP), -1);
        }
        const qf_shape_query gemm = {.op = QF_OP_GEMM, .M = 64, .N = 128, .K = 128,
                                     .dtype = QF_DTYPE_E4M3};
        assert_int_equal(qf_fake_shapes(name, &gemm, sh, CAP, &n), QF_OK);
        assert_int_equal(qf_recipe_shapes(&interp, &gemm, sh, CAP), 1);
    }
}

static void test_interpreter_matches_generated(void **state) {
    (void)state;
    static const int64_t sizes[] = {-1, 0, 1, 5, 16, 31, 32, 160, 217, 4096, 1040,
                                    (int64_t)1 << 40, INT64_MAX / 2};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    long compared = 0;
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        qf_recipe r = qf_recipes[ri];
        assert_non_null(r.shapes);
        r.shapes = NULL; /* the same recipe, interpreted */
        for (int op = 0; op <= QF_OP_COUNT; op++)
            for (int role = 0; role <= QF_ROLE_COUNT; role++)
                for (int norm = 0; norm <= QF_NORM_COUNT; norm++)
                    for (unsigned oi = 0; oi < 6; oi++)
                        for (int m = 0; m < ns; m++)
                            for (int k = 0; k < ns; k += 2)
                                for (int cap = 0; cap <= CAP; cap += 4) {
                                    static const unsigned outs[] = {0, 1, 2, 3, 16 | 1,
                                                                    0x80000003u};
                                    qf_shape_query q = {.op = (qf_op)op, .role = (qf_role)role,
                                                        .norm = (qf_norm)norm, .outputs = outs[oi],
                                                        .M = sizes[m], .N = sizes[(m + k) % ns],
                                                        .K = sizes[k],
                                                        .dtype = m == 3   ? QF_DTYPE_COUNT
                                                                 : m == 4 ? QF_DTYPE_E4M3
                                                                          : QF_DTYPE_BF16};
                                    qf_shape a[CAP], b[CAP];
                                    int na = qf_recipes[ri].shapes(&q, a, cap);
                                    int nb = qf_recipe_shapes(&r, &q, b, cap);
                                    assert_int_equal(na, nb);
                                    for (int i = 0; i < na && i < cap; i++) {
                                        assert_string_equal(a[i].name, b[i].name);
                                        assert_int_equal(a[i].dtype, b[i].dtype);
                                        assert_int_equal(a[i].ndim, b[i].ndim);
                                        assert_memory_equal(a[i].dims, b[i].dims,
                                                            sizeof a[i].dims);
                                        assert_true(a[i].bytes == b[i].bytes);
                                    }
                                    compared += na > 0;
                                }
    }
    assert_true(compared > 1000); /* the grid reaches valid queries of every recipe */
}

/* Each condition of every op (qf_fake_op_checks), broken alone in an otherwise valid query: the
 * generated function and the family's table refuse it, qf_family_query_why gives that check's
 * reason, and the manifest text and the generated C name its dim. The three renderings come from
 * one list; this ties each to the check it renders. */
static void test_each_check_refused_by_name(void **state) {
    (void)state;
    int broken = 0;
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        qf_recipe interp = qf_recipes[ri];
        interp.shapes = NULL;
        const qf_fake_table *t = qf_family_get(interp.family)->shapes;
        for (int i = 0; i < t->n_ops; i++) {
            const qf_fake_op *o = &t->ops[i];
            const qf_shape_query ok = {.op = o->op,
                                       .role = o->role == QF_FAKE_ROLE_QUERY ? QF_ROLE_INPUT
                                                                             : (qf_role)o->role,
                                       .norm = o->needs_norm ? QF_NORM_LAYERNORM : QF_NORM_NONE,
                                       .outputs = o->quantizer ? QF_OUT_ROWWISE : 0u,
                                       .M = 256,
                                       .N = 256,
                                       .K = 256,
                                       .dtype = QF_DTYPE_BF16};
            qf_shape sh[CAP];
            assert_true(qf_recipes[ri].shapes(&ok, sh, CAP) > 0);
            qf_fake_check c[QF_FAKE_MAX_CHECKS];
            const int nc = qf_fake_op_checks(t, o, c);
            assert_true(nc >= 2 && nc <= QF_FAKE_MAX_CHECKS);
            for (int k = 0; k < nc; k++) {
                qf_shape_query q = ok;
                int64_t *dim = c[k].dim == 'M' ? &q.M : c[k].dim == 'N' ? &q.N : &q.K;
                switch (c[k].kind) {
                case QF_FAKE_CHECK_POSITIVE:
                    *dim = 0;
                    break;
                case QF_FAKE_CHECK_COPY:
                    q.outputs &= ~(QF_OUT_ROWWISE | QF_OUT_COLUMNWISE);
                    break;
                case QF_FAKE_CHECK_NORM:
                    q.norm = QF_NORM_NONE;
                    break;
                case QF_FAKE_CHECK_NO_NORM:
                    q.norm = QF_NORM_RMSNORM;
                    break;
                case QF_FAKE_CHECK_ROLE:
                    q.role = QF_ROLE_WEIGHT;
                    break;
                case QF_FAKE_CHECK_DTYPE:
                    q.dtype = QF_DTYPE_E4M3;
                    break;
                case QF_FAKE_CHECK_ALIGN:
                    *dim = 256 + c[k].value / 2;
                    break;
                case QF_FAKE_CHECK_MAX:
                    *dim = c[k].value + 256;
                    break;
                default:
                    fail_msg("check kind %d", (int)c[k].kind);
                }
                assert_false(qf_fake_check_holds(&c[k], &q));
                assert_true(qf_fake_check_holds(&c[k], &ok));
                assert_int_equal(qf_recipes[ri].shapes(&q, sh, CAP), -1);
                assert_int_equal(qf_recipe_shapes(&interp, &q, sh, CAP), -1);
                char why[128], want[128], text[96], expr[160];
                qf_fake_check_render(&c[k], QF_FAKE_AS_WHY, &q, want, sizeof want);
                assert_string_equal(qf_family_query_why(&interp, &q, why, sizeof why), want);
                qf_fake_check_render(&c[k], QF_FAKE_AS_TEXT, NULL, text, sizeof text);
                qf_fake_check_render(&c[k], QF_FAKE_AS_C, NULL, expr, sizeof expr);
                if (c[k].dim) {
                    const char d[] = {c[k].dim, '\0'};
                    assert_non_null(strstr(want, d));
                    assert_true(text[0] == c[k].dim);
                    assert_true(strncmp(expr, "q->", 3) == 0 && expr[3] == c[k].dim);
                }
                broken++;
            }
        }
    }
    assert_true(broken > 50);
}

/* The norm backward's K and dbias's N up to what their kernels hold (QF_NB_MAX_K, QF_DB_MAX_N),
 * and no further: refused by name by qf_fake_shapes, by the generated functions and by the
 * family's table alike, as the ops refuse them (QF_ERR_UNSUPPORTED). */
static void test_backward_size_bounds(void **state) {
    (void)state;
    for (int ri = 0; ri < qf_recipe_count; ri++) {
        const char *name = qf_recipes[ri].name;
        qf_recipe interp = qf_recipes[ri];
        interp.shapes = NULL;
        qf_shape sh[CAP];
        int n = 0;
        const qf_shape_query nb = {.op = QF_OP_NORM_BACKWARD, .norm = QF_NORM_LAYERNORM, .M = 32,
                                   .K = QF_NB_MAX_K, .dtype = QF_DTYPE_BF16};
        const qf_shape_query db = {.op = QF_OP_DBIAS, .M = 1, .N = QF_DB_MAX_N,
                                   .dtype = QF_DTYPE_BF16};
        const qf_shape_query *qs[] = {&nb, &db};
        const char *why[] = {"K = 24577 is more than the op's kernel holds, 24576",
                             "N = 1073741825 is more than the op's kernel holds, 1073741824"};
        for (int i = 0; i < 2; i++) {
            qf_shape_query q = *qs[i];
            assert_int_equal(qf_fake_shapes(name, &q, sh, CAP, &n), QF_OK);
            assert_true(qf_recipes[ri].shapes(&q, sh, CAP) > 0);
            assert_true(qf_recipe_shapes(&interp, &q, sh, CAP) > 0);
            *(i ? &q.N : &q.K) += 1;
            assert_int_equal(qf_fake_shapes(name, &q, sh, CAP, &n), QF_ERR_INVALID_ARG);
            assert_non_null(strstr(qf_last_error(), why[i]));
            assert_int_equal(qf_recipes[ri].shapes(&q, sh, CAP), -1);
            assert_int_equal(qf_recipe_shapes(&interp, &q, sh, CAP), -1);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nq_rowwise_only),
        cmocka_unit_test(test_nq_columnwise_only),
        cmocka_unit_test(test_nq_both),
        cmocka_unit_test(test_nq_rmsnorm_no_mu),
        cmocka_unit_test(test_quantize_roles),
        cmocka_unit_test(test_gemm_y),
        cmocka_unit_test(test_invalid_queries),
        cmocka_unit_test(test_small_cap),
        cmocka_unit_test(test_registry_points_to_shapes),
        cmocka_unit_test(test_shape_formulas),
        cmocka_unit_test(test_mx_nq_padding_1x1),
        cmocka_unit_test(test_mx_nq_rowwise_993x8192),
        cmocka_unit_test(test_mx_quantize_32x32),
        cmocka_unit_test(test_mx_gemm_and_invalid),
        cmocka_unit_test(test_mx_registry),
        cmocka_unit_test(test_nv_quantize_32x64),
        cmocka_unit_test(test_nv_nq_4096x1040),
        cmocka_unit_test(test_nv_multiple_of_16),
        cmocka_unit_test(test_blk_quantize_roles),
        cmocka_unit_test(test_blk_shapes_match_reference),
        cmocka_unit_test(test_blk_nq_and_other_ops),
        cmocka_unit_test(test_interpreter_matches_generated),
        cmocka_unit_test(test_enums_out_of_range),
        cmocka_unit_test(test_quantizer_query_norm_and_dtype),
        cmocka_unit_test(test_backward_size_bounds),
        cmocka_unit_test(test_each_check_refused_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
