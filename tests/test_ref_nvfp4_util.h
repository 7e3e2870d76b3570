/* test_ref_nvfp4_util.h: what the NVFP4 reference tests share (test_ref_nvfp4.c,
 * test_ref_nvfp4_rht.c): brute-force E2M1, guarded output buffers, a plain quantize and the check
 * of one 1x16-block copy. */
#ifndef QF_TEST_REF_NVFP4_UTIL_H
#define QF_TEST_REF_NVFP4_UTIL_H

#include "test_ref_util.h"

#include "ref_nvfp4.h"

/* E2M1 magnitudes, typed in from the numerics 1 table (independent of the reference's table). */
static const double k_grid[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

/* Brute force: nearest grid code to v (exact double), ties to the even code, sign of v. */
static inline uint8_t nearest_e2m1(double v) {
    double a = fabs(v), best_d = INFINITY;
    int best = 0;
    for (int c = 0; c < 8; c++) {
        double d = fabs(a - k_grid[c]);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    return (uint8_t)(best | (signbit(v) ? 0x8 : 0));
}

static inline double e2m1_value(uint8_t code) {
    return (code & 0x8) ? -k_grid[code & 7] : k_grid[code & 7];
}

/* Output buffers of one quantize call (poisoned, with guard bytes). */
typedef struct nv_bufs {
    int64_t M, K, rr, rc, cr, cc;
    float amax_row, amax_col;
    qf_nvfp4_out out;
} nv_bufs;

static inline void bufs_init(nv_bufs *b, int64_t M, int64_t K) {
    b->M = M;
    b->K = K;
    qf_nvfp4_scale_shape_row(M, K, &b->rr, &b->rc);
    qf_nvfp4_scale_shape_col(M, K, &b->cr, &b->cc);
    memset(&b->out, 0, sizeof b->out);
    b->out.row = poisoned(M * K / 2);
    b->out.col = poisoned(M * K / 2);
    b->out.scale_row = poisoned(b->rr * b->rc);
    b->out.scale_col = poisoned(b->cr * b->cc);
    b->out.amax_row = &b->amax_row;
    b->out.amax_col = &b->amax_col;
    b->amax_row = b->amax_col = -1.0f;
}

static inline void bufs_free(nv_bufs *b) {
    const uint8_t *ends[4] = {b->out.row + b->M * b->K / 2, b->out.col + b->M * b->K / 2,
                              b->out.scale_row + b->rr * b->rc, b->out.scale_col + b->cr * b->cc};
    for (int i = 0; i < 4; i++)
        for (int g = 0; g < GUARD; g++)
            assert_int_equal(ends[i][g], POISON);
    free(b->out.row);
    free(b->out.col);
    free(b->out.scale_row);
    free(b->out.scale_col);
}

static inline qf_nvfp4_opts opts_default(void) {
    qf_nvfp4_opts o = {.rowwise = 1,
                       .columnwise = 1,
                       .rht_mask = QF_NVFP4_RHT_MASK_DEFAULT,
                       .layout = QF_SCALE_LAYOUT_COMPACT};
    return o;
}

/* Plain quantize (no norm) of fp32 x [M, K]. */
static inline qf_status quant_plain(const float *x, const qf_nvfp4_opts *o, nv_bufs *b) {
    qf_nvfp4_src s = {.norm = QF_NORM_NONE,
                      .xdt = QF_DTYPE_FP32,
                      .gdt = QF_DTYPE_FP32,
                      .x = x,
                      .M = b->M,
                      .K = b->K};
    return qf_quantize_nvfp4_ref(&s, o, &b->out);
}

/* Checks one copy: v [R, C] quantized with 1x16 blocks (compact scales, stride SC), RN. */
static inline void check_copy_1d(const float *v, int64_t R, int64_t C, const uint8_t *data,
                                 const uint8_t *scale, int64_t SC, float amax) {
    const float s_enc = qf_nvfp4_global_enc_ref(amax);
    const float s_dec = qf_nvfp4_global_dec_ref(s_enc);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c0 = 0; c0 < C; c0 += 16) {
            uint8_t sf = qf_nvfp4_block_scale_ref(amax_of(v + r * C + c0, 16, 1), s_enc);
            assert_int_equal(scale[r * SC + c0 / 16], sf);
            float enc = qf_nvfp4_elem_enc_ref(sf, s_dec);
            for (int64_t k = c0; k < c0 + 16; k++)
                assert_int_equal(qf_e2m1_get_ref(data, r * C + k),
                                 nearest_e2m1((double)(v[r * C + k] * enc)));
        }
}

static inline void transpose(const float *x, int64_t M, int64_t K, float *t) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++)
            t[k * M + m] = x[m * K + k];
}

#endif /* QF_TEST_REF_NVFP4_UTIL_H */
