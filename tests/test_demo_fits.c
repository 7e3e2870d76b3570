/* test_demo_fits.c: which recipes the demo trains a checkpoint block with (demo_block_fits,
 * runtime/tools/demo_train.c), decided on the host from the fake shapes of every quantized tensor
 * and every GEMM of the block's training step, so that qfuse-demo can say it without a GPU. The
 * cases reach each kind of check: a quantizer's multiple (NVFP4's 16 rows), a GEMM's K (MXFP8's
 * 32), an FP8 GEMM's N, fc2's dgrad (its K is N) and the wgrads (their K is the token count). A
 * fit that checked the quantizers alone would train M = 24 under FP8. No GPU. */
#include "test_util.h"

#include "demo_train.h"
#include "registry.h"

/* 1 when recipe `name` would train a block of x [M, K], fc1 [F, K], fc2 [N, F]. */
static int fits(const char *name, int64_t M, int64_t K, int64_t F, int64_t N) {
    const qf_recipe *r = NULL;
    for (int i = 0; i < qf_recipe_count && !r; i++)
        r = strcmp(qf_recipes[i].name, name) == 0 ? &qf_recipes[i] : NULL;
    assert_non_null(r);
    const demo_block b = {.M = M, .K = K, .F = F, .N = N};
    return demo_block_fits(r, &b);
}

static void test_real_block_fits_every_recipe(void **state) {
    (void)state;
    for (int i = 0; i < qf_recipe_count; i++) /* scripts/get-real-weights' block */
        assert_true(fits(qf_recipes[i].name, 2048, 384, 1536, 384));
}

/* The recipes that train each block, and the check that leaves the others out. */
static void test_each_check_leaves_recipes_out(void **state) {
    (void)state;
    static const struct {
        int64_t M, K, F, N;
        const char *fit; /* the recipes that train it, each between spaces */
    } cases[] = {
        /* NVFP4's quantizers need M % 16 == 0; the wgrads' K is M (16 for FP8, 32 for MX) */
        {17, 64, 64, 64, ""},
        {24, 64, 64, 64, ""},
        {32, 64, 64, 64, " fp8_delayed fp8_current fp8_block mxfp8 mxfp8_2d nvfp4 nvfp4_nort "},
        /* F = 48: fc2's fprop K, not a multiple of 32 (MXFP8's and NVFP4's GEMMs) */
        {64, 64, 48, 64, " fp8_delayed fp8_current fp8_block "},
        /* N = 48: only fc2's dgrad (K = N) refuses it, under the same families */
        {64, 64, 64, 48, " fp8_delayed fp8_current fp8_block "},
        /* N = 40: fc2's fprop N (FP8: 16), its dgrad's K (MX: 32), dy's quantizer (NVFP4: 16) */
        {64, 64, 64, 40, ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int i = 0; i < qf_recipe_count; i++) {
            char word[64];
            snprintf(word, sizeof word, " %s ", qf_recipes[i].name);
            const int want = strstr(cases[c].fit, word) != NULL;
            if (fits(qf_recipes[i].name, cases[c].M, cases[c].K, cases[c].F, cases[c].N) != want)
                fail_msg("%s on M=%lld K=%lld F=%lld N=%lld: expected %s", qf_recipes[i].name,
                         (long long)cases[c].M, (long long)cases[c].K, (long long)cases[c].F,
                         (long long)cases[c].N, want ? "trained" : "left out");
        }
}

/* A block whose output is zero (a file of zeros) has no loss scale: demo_train refuses it before
 * any GPU work (ctx NULL here) and counts one failure, instead of training towards 0/0. */
static void test_zero_block_not_trained(void **state) {
    (void)state;
    enum { M = 32, K = 64, F = 64, N = 64 };
    demo_block b = {.M = M, .K = K, .F = F, .N = N, .eps = 1e-12};
    double **arrays[] = {&b.x, &b.ln_w, &b.ln_b, &b.w1, &b.b1, &b.w2, &b.b2};
    const size_t sizes[] = {M * K, K, K, F * K, F, N * F, N};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        *arrays[i] = calloc(sizes[i], sizeof(double));
        assert_non_null(*arrays[i]);
    }
    const demo_train_opts o = {.steps = 2, .lr = 1e-3, .noise = 0.5, .seed = 1};
    assert_int_equal(demo_train(NULL, &b, &o), 1);
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(*arrays[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_block_fits_every_recipe),
        cmocka_unit_test(test_each_check_leaves_recipes_out),
        cmocka_unit_test(test_zero_block_not_trained),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
