/* test_demo_fits.c: which recipes the demo trains a checkpoint block with (demo_block_fits,
 * runtime/tools/demo_train.c), decided on the host from the fake shapes of every quantized tensor
 * and every GEMM of the block's training step, so that qfuse-demo can say it without a GPU. Each
 * case below is refused by one kind of check only: a quantizer's multiple (NVFP4's 16 rows), a
 * GEMM's K (MXFP8's 32), an FP8 GEMM's N, fc2's dgrad (its K is N) and the wgrads (their K is
 * the token count). No GPU. */
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

static void test_each_check_leaves_recipes_out(void **state) {
    (void)state;
    /* M = 17: NVFP4's quantizers need M % 16 == 0; the FP8 wgrads K = 17 % 16; MXFP8's 32 */
    for (int i = 0; i < qf_recipe_count; i++)
        assert_false(fits(qf_recipes[i].name, 17, 64, 64, 64));
    /* F = 48: fc2's K (fprop) is F, not a multiple of 32 (MXFP8, NVFP4); FP8 takes 16 */
    static const char *const f48_fits[] = {"fp8_delayed", "fp8_current", "fp8_block"};
    static const char *const f48_not[] = {"mxfp8", "mxfp8_2d", "nvfp4", "nvfp4_nort"};
    for (int i = 0; i < 3; i++)
        assert_true(fits(f48_fits[i], 64, 64, 48, 64));
    for (int i = 0; i < 4; i++)
        assert_false(fits(f48_not[i], 64, 64, 48, 64));
    /* N = 40: fc2's fprop N, not a multiple of 16 (FP8) */
    assert_false(fits("fp8_delayed", 64, 64, 64, 40));
    assert_false(fits("fp8_block", 64, 64, 64, 40));
    /* N = 48: only fc2's dgrad (K = N) refuses it, under the families of 32 */
    for (int i = 0; i < 3; i++)
        assert_true(fits(f48_fits[i], 64, 64, 64, 48));
    for (int i = 0; i < 4; i++)
        assert_false(fits(f48_not[i], 64, 64, 64, 48));
    /* M = 24: only the wgrads (K = M tokens) refuse it under FP8; fprop and dgrad take any M */
    assert_false(fits("fp8_current", 24, 64, 64, 64));
    assert_true(fits("fp8_current", 32, 64, 64, 64));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_block_fits_every_recipe),
        cmocka_unit_test(test_each_check_leaves_recipes_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
