/* test_gpu_util.h: helpers shared by the GPU tests: CUDA and qfuse status checks, host/device
 * buffer pairs poisoned on allocation, tensor views, and activation-like input data. */
#ifndef QF_TEST_GPU_UTIL_H
#define QF_TEST_GPU_UTIL_H

#include "test_util.h"

#include <math.h>

#include "qfuse.h"
#include "ref.h"

/* Fails the test unless a CUDA runtime call returns cudaSuccess. */
#define CK(call) assert_int_equal((int)(call), (int)cudaSuccess)

/* Fails the test with the status name and qfuse's message unless call returns QF_OK. */
#define QF_OK_OR_FAIL(call)                                                                   \
    do {                                                                                      \
        qf_status s_ = (call);                                                                \
        if (s_ != QF_OK)                                                                      \
            fail_msg("%s -> %s: %s", #call, qf_status_name(s_), qf_last_error());             \
    } while (0)

/* The byte every output buffer holds before a launch: a kernel that skips an entry is caught. */
#define QF_TEST_POISON 0xAB

/* A host buffer h and a device buffer d of the same size (at least 1 byte each). */
typedef struct dual {
    void *d;
    void *h;
    size_t bytes;
} dual;

/* Allocates both halves; the device half is filled with QF_TEST_POISON. */
static inline dual dual_alloc(size_t bytes) {
    dual b = {NULL, malloc(bytes ? bytes : 1), bytes};
    assert_non_null(b.h);
    CK(cudaMalloc(&b.d, bytes ? bytes : 1));
    CK(cudaMemset(b.d, QF_TEST_POISON, bytes ? bytes : 1));
    return b;
}

static inline void dual_free(dual *b) {
    cudaFree(b->d);
    free(b->h);
}

/* Host to device. */
static inline void dual_up(dual *b) {
    CK(cudaMemcpy(b->d, b->h, b->bytes, cudaMemcpyHostToDevice));
}

/* Device to host. */
static inline void dual_down(dual *b) {
    CK(cudaMemcpy(b->h, b->d, b->bytes, cudaMemcpyDeviceToHost));
}

/* A tensor view of the device half: [d0] (ndim 1) or [d0, d1]. */
static inline qf_tensor tv(const dual *b, qf_dtype dt, int ndim, int64_t d0, int64_t d1) {
    qf_tensor t = {.data = b->d, .dtype = dt, .ndim = ndim, .dims = {d0, d1}};
    return t;
}

/* Activation-like [M, K] data: base + uniform noise under a per-row scale spanning 11 octaves,
 * and every 61st channel 40x larger, so that block scales and element codes vary. */
static inline void fill(void *p, qf_dtype dt, int64_t M, int64_t K, uint64_t seed, float base) {
    for (int64_t m = 0; m < M; m++) {
        uint64_t s = seed ^ ((uint64_t)m * 0x9E3779B97F4A7C15ull);
        float rowscale = ldexpf(1.0f, (int)(m % 11) - 5);
        for (int64_t k = 0; k < K; k++) {
            float v = base + qf_test_rng_uniform(&s) * rowscale * 1.7f;
            if (k % 61 == 5)
                v *= 40.0f;
            store_as(p, dt, m * K + k, v);
        }
    }
}

#endif /* QF_TEST_GPU_UTIL_H */
