/* test_util.h: helpers shared by the cmocka tests (includes, GPU detection, deterministic data). */
#ifndef QF_TEST_UTIL_H
#define QF_TEST_UTIL_H

#include <fnmatch.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "ref.h"
#include "status.h"

/* QFUSE_TEST_QUICK=1 (sanitizer and valgrind runs): the large shapes are skipped (GPU tests) and
 * test_kernels compiles one kernel per op. A boolean as the library reads its switches
 * (qf_env_flag: 1, true, yes, on; another value is read as off with a warning). */
static inline int test_quick(void) {
    return qf_env_flag("QFUSE_TEST_QUICK");
}

/* Nonzero when a CUDA device is usable. Decided once per process. */
static inline int qf_test_have_gpu(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        cached = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        if (!cached)
            (void)cudaGetLastError();
    }
    return cached;
}

/* Call first in every GPU test: skips cleanly (cmocka skip) without a GPU, saying so. */
#define QF_SKIP_WITHOUT_GPU()                                                                 \
    do {                                                                                      \
        if (!qf_test_have_gpu()) {                                                            \
            printf("skipped: %s needs a CUDA device (none found)\n", __func__);              \
            skip();                                                                           \
        }                                                                                     \
    } while (0)

/* splitmix64: deterministic, seedable test data. */
static inline uint64_t qf_test_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float qf_test_rng_uniform(uint64_t *s) {
    return (float)((double)(qf_test_rng_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* Element i of a bf16/fp16/fp32 array set to v (rounded to nearest even). */
static inline void store_as(void *p, qf_dtype dt, int64_t i, float v) {
    if (dt == QF_DTYPE_FP32)
        ((float *)p)[i] = v;
    else if (dt == QF_DTYPE_BF16)
        ((uint16_t *)p)[i] = qf_float_to_bf16(v);
    else
        ((uint16_t *)p)[i] = qf_float_to_fp16(v);
}

/* A temporary directory of one test: made with qf_test_dir_make, removed (with everything in it)
 * by qf_test_dir_remove. */
typedef struct qf_test_dir {
    char path[256];
} qf_test_dir;

static inline void qf_test_dir_make(qf_test_dir *d, const char *tag) {
    snprintf(d->path, sizeof d->path, "/tmp/qf_test_%s.XXXXXX", tag);
    assert_non_null(mkdtemp(d->path));
}

static inline int qf_test_dir_rm_entry(const char *p, const struct stat *sb, int flag,
                                       struct FTW *ftw) {
    (void)sb, (void)ftw;
    if (flag == FTW_DP)
        chmod(p, 0700); /* a test may have left it read-only */
    return remove(p);
}

/* Removes path and everything below it (read-only directories included). */
static inline void qf_test_dir_remove(const char *path) {
    nftw(path, qf_test_dir_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* d's path joined with rel ("a/b.csv"), in a static rotating buffer of four. */
static inline const char *qf_test_dir_path(const qf_test_dir *d, const char *rel) {
    static char bufs[4][600];
    static int next;
    char *p = bufs[next++ % 4];
    int w = snprintf(p, 600, "%s/%s", d->path, rel);
    assert_true(w > 0 && w < 600);
    return p;
}

/* Writes text to dir/name and returns the path in a static rotating buffer. */
static inline const char *qf_test_dir_write(const char *dir, const char *name, const char *text) {
    static char bufs[4][512];
    static int next;
    char *path = bufs[next++ % 4];
    int w = snprintf(path, 512, "%s/%s", dir, name);
    assert_true(w > 0 && w < 512);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* The whole of the file at path as a malloc'ed string (the caller frees it). */
static inline char *qf_test_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    s[fread(s, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return s;
}

/* How many times sub occurs in s (overlapping occurrences count). */
static inline int qf_test_count_substr(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

/* fd 2 redirected into a temporary file, from qf_test_capture_begin to qf_test_capture_end,
 * which returns what was written (malloc'ed). NOTES: keep cmocka asserts outside the window; a
 * failing assert would leave stderr redirected. */
typedef struct qf_test_capture {
    int saved;
    char path[64];
} qf_test_capture;

static inline void qf_test_capture_begin(qf_test_capture *c) {
    snprintf(c->path, sizeof c->path, "/tmp/qf_test_stderr.XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    fflush(stderr);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

static inline char *qf_test_capture_end(qf_test_capture *c) {
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    char *s = qf_test_read_text(c->path);
    unlink(c->path);
    return s;
}

/* Runs one cmocka group: `per_case` once for each of the n_cases elements of a case table (each
 * run's state points at its element; run i is named `name#i`, its index in the table), then the
 * n_tests other tests. */
static inline int qf_test_run_cases(const char *group, const char *name,
                                    CMUnitTestFunction per_case, const void *cases, size_t size,
                                    size_t n_cases, const struct CMUnitTest *tests,
                                    size_t n_tests) {
    struct CMUnitTest *all = calloc(n_cases + n_tests, sizeof *all);
    char(*names)[96] = calloc(n_cases ? n_cases : 1, sizeof *names);
    if (!all || !names) {
        fprintf(stderr, "%s: out of memory\n", group);
        free(all);
        free(names);
        return 1;
    }
    for (size_t i = 0; i < n_cases; i++) {
        snprintf(names[i], sizeof names[i], "%s#%zu", name, i);
        all[i] = (struct CMUnitTest){.name = names[i],
                                     .test_func = per_case,
                                     .initial_state = (void *)((const char *)cases + i * size)};
    }
    memcpy(all + n_cases, tests, n_tests * sizeof *tests);
    int failed = _cmocka_run_group_tests(group, all, n_cases + n_tests, NULL, NULL);
    free(all);
    free(names);
    return failed;
}

/* qf_test_run_cases over the arrays `cases` and `tests`, the case runs named after per_case. */
#define QF_TEST_RUN_CASES(group, per_case, cases, tests)                                           \
    qf_test_run_cases(group, #per_case, per_case, cases, sizeof(cases)[0],                         \
                      sizeof(cases) / sizeof(cases)[0], tests, sizeof(tests) / sizeof(tests)[0])

/* The cmocka test `name`: f, after setup (NULL: none), with the integer p as its state (read by
 * qf_test_param): one test function over several values of a parameter. */
#define QF_TEST_PARAM(name, f, setup, p)                                                           \
    { #name, f, setup, NULL, (void *)(uintptr_t)(p) }

static inline int qf_test_param(void **state) {
    return (int)(uintptr_t)*state;
}

/* QFUSE_TEST_FILTER, when set: only the tests whose names match that pattern run; QFUSE_TEST_SKIP:
 * those matching it are skipped (cmocka's filters: `*` and `?`; to split a long GPU binary over
 * several processes, e.g. QFUSE_TEST_FILTER=test_nq_fp16). A filter that matches none of the
 * group's n tests says so on stderr, naming them (cmocka would report 0 tests passed). Call in
 * main before running the group. */
static inline void qf_test_filter_set(const char *group, const struct CMUnitTest *tests,
                                      size_t n) {
    const char *f = getenv("QFUSE_TEST_FILTER"), *skip = getenv("QFUSE_TEST_SKIP");
    if (f && *f) {
        cmocka_set_test_filter(f);
        size_t hits = 0;
        for (size_t i = 0; i < n; i++)
            hits += fnmatch(f, tests[i].name, 0) == 0;
        if (!hits) {
            fprintf(stderr, "%s: QFUSE_TEST_FILTER='%s' matches none of its %zu tests:", group, f,
                    n);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %s", tests[i].name);
            fputc('\n', stderr);
        }
    }
    if (skip && *skip)
        cmocka_set_skip_filter(skip);
}
#define qf_test_filter_from_env(group, tests)                                                     \
    qf_test_filter_set(group, tests, sizeof(tests) / sizeof((tests)[0]))

#endif /* QF_TEST_UTIL_H */
