/* test_ref_util.h: what the CPU tests of the scalar references share (test_ref*.c): bit-exact
 * and relative checks, brute-force FP8 codes, deterministic data, guarded output buffers, scale
 * padding and the outputs of one fp8_current call. */
#ifndef QF_TEST_REF_UTIL_H
#define QF_TEST_REF_UTIL_H

#include "test_util.h"

#include <math.h>

#include "ref.h"
#include "ref_fp8_current.h"

/* NOTES: these are oracles and fixtures, independent of the code under test (qf_f32_bits is a
 * memcpy); a test's expected values never come from the reference it checks. */

/* {================================================================== checks */

/* Bit-exact float equality (distinguishes -0.0, treats equal NaN payloads as equal). */
#define assert_float_bits_equal(a, b) assert_int_equal(qf_f32_bits(a), qf_f32_bits(b))

/* |a - b| <= tol * |b|, with a message naming both values on failure. */
static inline void assert_rel_close(double a, double b, double tol) {
    if (!(fabs(a - b) <= tol * fabs(b))) {
        print_error("expected %.17g, got %.17g (rel tol %g)\n", b, a, tol);
        fail();
    }
}

/* got[0..n) == want[0..n), naming the first differing byte. */
static inline void assert_bytes(const uint8_t *got, const uint8_t *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            print_error("byte %d: got 0x%02X, want 0x%02X\n", i, got[i], want[i]);
            fail();
        }
}

/* Every entry of compact [R, C] outside the leading [r, c] is 0x00. */
static inline void check_padding(const uint8_t *s, int64_t R, int64_t C, int64_t r, int64_t c) {
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (i >= r || j >= c)
                assert_int_equal(s[i * C + j], 0x00);
}

/* }================================================================== */

/* {================================================================== FP8 codes */

static const qf_dtype k_fp8_fmts[2] = {QF_DTYPE_E4M3, QF_DTYPE_E5M2};

/* Largest finite magnitude code of an FP8 format (numerics 1 table). */
static inline uint8_t max_code(qf_dtype fmt) {
    return fmt == QF_DTYPE_E4M3 ? 0x7E : 0x7B;
}

/* Brute force: the finite code nearest to v (exact double), ties to the even code (even
 * mantissa), past the largest finite value the largest (satfinite); the sign of v. */
static inline uint8_t nearest_code(qf_dtype fmt, double v) {
    double a = fabs(v), best_d = INFINITY;
    int best = -1;
    for (int c = 0; c <= max_code(fmt); c++) {
        double d = fabs(a - (double)qf_fp8_to_float_ref(fmt, (uint8_t)c));
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(v) ? 0x80 : 0));
}

/* max |v| over n values with stride, NaN if any is NaN (independent of qf_amax_merge). */
static inline float amax_of(const float *v, int64_t n, int64_t stride) {
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(v[i * stride]))
            return NAN;
        a = fabsf(v[i * stride]) > a ? fabsf(v[i * stride]) : a;
    }
    return a;
}

/* }================================================================== */

/* {================================================================== data and buffers */

/* Fills n elements of dtype dt (fp32/fp16/bf16) with off + amp * uniform[-1, 1). */
static inline void fill_random(void *p, qf_dtype dt, int64_t n, float off, float amp,
                               uint64_t seed) {
    for (int64_t i = 0; i < n; i++)
        store_as(p, dt, i, off + amp * qf_test_rng_uniform(&seed));
}

static inline size_t dt_size(qf_dtype dt) {
    return dt == QF_DTYPE_FP32 ? 4 : 2;
}

/* Random fp32 [n] with a magnitude 2^e per group of `group` values, e in [-emax, emax]. */
static inline void fill_blocky(float *x, int64_t n, int64_t group, int emax, uint64_t seed) {
    float mag = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (i % group == 0)
            mag = ldexpf(1.0f, (int)(qf_test_rng_next(&seed) % (uint64_t)(2 * emax + 1)) - emax);
        x[i] = mag * qf_test_rng_uniform(&seed);
    }
}

/* n bytes followed by GUARD more, all POISON, so that an unwritten entry or an overrun shows. */
enum { GUARD = 64, POISON = 0xAB };

static inline uint8_t *poisoned(int64_t n) {
    uint8_t *p = malloc((size_t)n + GUARD);
    memset(p, POISON, (size_t)n + GUARD);
    return p;
}

/* Outputs of one current-scaling call, poisoned (0xCD bytes, -1 scalars) so that an unwritten
 * entry shows. b->out points into b itself: pass cur_bufs by pointer only. */
typedef struct cur_bufs {
    uint8_t row[8], col[8];
    float amax, scale, scale_inv, mu[2], rsigma[2];
    qf_fp8_current_out out;
} cur_bufs;

static inline void cur_bufs_init(cur_bufs *b) {
    memset(b->row, 0xCD, sizeof b->row);
    memset(b->col, 0xCD, sizeof b->col);
    b->amax = b->scale = b->scale_inv = -1.0f;
    b->mu[0] = b->mu[1] = b->rsigma[0] = b->rsigma[1] = -1.0f;
    b->out =
        (qf_fp8_current_out){b->row, b->col, &b->amax, &b->scale, &b->scale_inv, b->mu, b->rsigma};
}

/* Plain quantize of x [M, K] (M * K <= 8) into fresh buffers; asserts QF_OK. */
static inline void cur_plain(cur_bufs *b, qf_dtype xdt, const void *x, int64_t M, int64_t K,
                             qf_dtype fmt, float amax_epsilon, int power_2_scales) {
    const qf_fp8_current_opts o = {fmt, amax_epsilon, power_2_scales};
    cur_bufs_init(b);
    assert_int_equal(qf_quantize_fp8_current_ref(xdt, x, M, K, &o, &b->out), QF_OK);
}

/* }================================================================== */

#endif /* QF_TEST_REF_UTIL_H */
