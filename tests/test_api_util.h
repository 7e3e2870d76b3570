/* test_api_util.h: what the bad-input tests of the public API share (test_api_errors.c,
 * test_api_gemm.c): shapes, stand-in device buffers, tensor builders, the message check and a
 * device-less sm_90 context per test. */
#ifndef QF_TEST_API_UTIL_H
#define QF_TEST_API_UTIL_H

#include "test_util.h"

#include "ctx.h"

static const char *const kRecipe = "fp8_delayed"; /* used by every file that includes this */

#define M 4
#define K 64
#define N 32
#define HIST 1024 /* fp8_delayed.lua's amax_history_len */

/* Stand-ins for device buffers, 256-byte aligned so that +1 is a misalignment, each larger
 * than any tensor the tests describe (the calls check that outputs do not overlap). */
static _Alignas(256) unsigned char g_mem[16][1 << 20];

static inline void *slot(int i) {
    return g_mem[i];
}

static inline qf_tensor t2(void *data, qf_dtype dt, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = data, .dtype = dt, .ndim = 2, .dims = {d0, d1}};
    return t;
}

static inline qf_tensor t1(void *data, qf_dtype dt, int64_t d0) {
    qf_tensor t = {.data = data, .dtype = dt, .ndim = 1, .dims = {d0}};
    return t;
}

/* Asserts status s == want and that qf_last_error() holds every string of the NULL-ended list. */
static inline void expect_(qf_status s, qf_status want, const char *const *subs) {
    const char *msg = qf_last_error();
    if (s != want)
        fail_msg("status %s, expected %s; message: %s", qf_status_name(s), qf_status_name(want),
                 msg);
    for (; *subs; subs++)
        if (!strstr(msg, *subs))
            fail_msg("message \"%s\" lacks \"%s\"", msg, *subs);
}
#define expect(s, want, ...) expect_((s), (want), (const char *const[]){__VA_ARGS__, NULL})

/* Fresh valid arguments `a` (of type `type`, from valid(state)) changed by `change`, one
 * expression (a comma expression in parentheses), make run(&a) return want with a message that
 * holds every string that follows. */
#define expect_changed(type, valid, run, change, want, ...)                                        \
    do {                                                                                           \
        type a = valid(state);                                                                     \
        change;                                                                                    \
        expect(run(&a), want, __VA_ARGS__);                                                        \
    } while (0)

/* Defines the test `name` of one bad argument: expect_changed(type, valid, run, change, ...). */
#define QF_BAD_ARG_TEST(name, type, valid, run, change, ...)                                       \
    static void name(void **state) {                                                               \
        expect_changed(type, valid, run, change, __VA_ARGS__);                                     \
    }

static inline int setup(void **state) {
    qf_ctx_t *ctx = NULL;
    if (qf_ctx_init_host(&ctx, 90) != QF_OK)
        return -1;
    *state = ctx;
    return 0;
}

static inline int teardown(void **state) {
    qf_ctx_free(*state);
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

#endif /* QF_TEST_API_UTIL_H */
