/* tool_util.h: helpers shared by the command-line tools (qfuse-demo, qfuse-bench): fatal-error
 * checks, a wall clock and deterministic random inputs. Header-only; define QF_TOOL_NAME (the
 * program name used in messages) before including it. */
#ifndef QF_TOOL_UTIL_H
#define QF_TOOL_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "qfuse.h"

#ifndef QF_TOOL_NAME
#error "define QF_TOOL_NAME before including tool_util.h"
#endif

/* A CUDA runtime call that must succeed: prints the call and the error, exits 1. */
#define CUDA_OR_DIE(call)                                                                     \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, QF_TOOL_NAME ": %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* A qfuse call that must succeed: prints the call, the status and qf_last_error(), exits 1. */
#define QF_OR_DIE(call)                                                                       \
    do {                                                                                      \
        qf_status s_ = (call);                                                                \
        if (s_ != QF_OK) {                                                                    \
            fprintf(stderr, QF_TOOL_NAME ": %s: %s: %s\n", #call, qf_status_name(s_),         \
                    qf_last_error());                                                         \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Monotonic wall clock in milliseconds. */
static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* splitmix64: deterministic, seedable input data. */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_uniform(uint64_t *s) {
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Approximately N(0, 1): the sum of four uniforms, rescaled. */
static inline float rng_normal(uint64_t *s) {
    double u = rng_uniform(s) + rng_uniform(s) + rng_uniform(s) + rng_uniform(s);
    return (float)((u - 2.0) * 1.7320508);
}

#endif /* QF_TOOL_UTIL_H */
