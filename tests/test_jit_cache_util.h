/* test_jit_cache_util.h: what the disk cache tests share (test_jit_cache.c,
 * test_jit_cache_procs.c, test_cache_tool.c): keys and payloads, the per-test fixture (a fresh
 * QFUSE_CACHE_DIR), entry paths, store/load checks and child-process helpers. */
#ifndef QF_TEST_JIT_CACHE_UTIL_H
#define QF_TEST_JIT_CACHE_UTIL_H

#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "jit_cache.h"

#define KEY_A "0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210"
#define PAYLOAD_SIZE 4099 /* odd, so nothing lines up by accident */
#define HEADER_SIZE 72
#define WARNING "qfuse: warning:"

/* Per-test state: a fresh temporary root, with the cache directory below it, and HOME and
 * XDG_CACHE_HOME as they were (teardown restores them, so a test may set them freely). */
typedef struct fixture {
    char root[PATH_MAX];
    char dir[PATH_MAX];
    char *home, *xdg; /* malloc'ed copies, or NULL where unset */
} fixture;

/* Sets (or, for NULL, unsets) name. */
static inline void set_or_unset(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* {===================================================================== helpers */

/* snprintf into a PATH_MAX buffer, failing the test rather than truncating. */
static inline void path_fmt(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && n < PATH_MAX);
}

/* Deterministic CUBIN stand-in derived from seed. Caller frees. */
static inline unsigned char *make_payload(uint64_t seed, size_t n) {
    unsigned char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)qf_test_rng_next(&seed);
    return p;
}

/* The path the cache uses for (label, key) in dir. */
static inline void entry_path(char *buf, const char *dir, const char *label, const char *key) {
    path_fmt(buf, "%s/%s.%s.cubin", dir, label, key);
}

/* qf_cache_load under stderr capture: returns hit/miss, *err the warnings (malloc'ed). */
static inline int load_captured(const char *key, int arch, void **data, size_t *size, char **err) {
    qf_test_capture c;
    qf_test_capture_begin(&c);
    int hit = qf_cache_load("k", key, arch, data, size);
    *err = qf_test_capture_end(&c);
    return hit;
}

/* Stores seed's payload under KEY_A, arch 90, label "k"; returns the entry path in path. */
static inline void store_a(const fixture *fx, char *path) {
    unsigned char *p = make_payload(1, PAYLOAD_SIZE);
    assert_int_equal(qf_cache_store("k", KEY_A, 90, p, PAYLOAD_SIZE), QF_OK);
    free(p);
    entry_path(path, fx->dir, "k", KEY_A);
}

/* Loads KEY_A and asserts a hit with seed 1's bytes. */
static inline void assert_hit_a(void) {
    void *data = NULL;
    size_t size = 0;
    unsigned char *want = make_payload(1, PAYLOAD_SIZE);
    assert_int_equal(qf_cache_load("k", KEY_A, 90, &data, &size), 1);
    assert_int_equal(size, PAYLOAD_SIZE);
    assert_memory_equal(data, want, PAYLOAD_SIZE);
    free(data);
    free(want);
}

/* Loads KEY_A at arch, asserts a miss with exactly one warning holding every string in want[]. */
static inline void assert_miss_warns(const char *path, int arch, const char *const *want,
                                     int n_want) {
    void *data = (void *)1;
    size_t size = 1;
    char *err = NULL;
    int hit = load_captured(KEY_A, arch, &data, &size, &err);
    assert_int_equal(hit, 0);
    assert_null(data);
    assert_int_equal(size, 0);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, path));
    for (int i = 0; i < n_want; i++)
        assert_non_null(strstr(err, want[i]));
    free(err);
}

/* Overwrites n bytes at off in the file at path. */
static inline void patch_file(const char *path, long off, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

/* fork() for children that run test code and then exit(). NOTES: stdio is flushed first so the
 * child cannot write the parent's buffered cmocka output a second time; children use exit(), not
 * _exit(), so libnvrtc's destructors run and valgrind sees no leak in them. */
static inline pid_t fork_child(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    return pid;
}

/* Waits for pid, which must exit normally; returns its exit status. */
static inline int wait_exit(pid_t pid) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Names in dir (one per line) as a malloc'ed string. */
static inline char *list_dir(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    size_t cap = 4096, len = 0;
    char *s = calloc(1, cap);
    assert_non_null(s);
    for (struct dirent *e; len + NAME_MAX + 2 < cap && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            len += (size_t)snprintf(s + len, cap - len, "%s\n", e->d_name);
    }
    closedir(d);
    return s;
}

/* =====================================================================} */

/* {===================================================================== fixture */

static inline int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    snprintf(fx->root, sizeof fx->root, "/tmp/qf_test_cache.XXXXXX");
    if (!mkdtemp(fx->root))
        return -1;
    path_fmt(fx->dir, "%s/cache", fx->root);
    fx->home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    fx->xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("QFUSE_CACHE_DIR", fx->dir, 1);
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    unsetenv("QFUSE_CACHE_FSYNC");
    qf_cache_reset();
    *state = fx;
    return 0;
}

static inline int teardown(void **state) {
    fixture *fx = *state;
    chmod(fx->root, 0700);
    qf_test_dir_remove(fx->root);
    unsetenv("QFUSE_CACHE_DIR");
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    unsetenv("QFUSE_CACHE_FSYNC");
    set_or_unset("HOME", fx->home);
    set_or_unset("XDG_CACHE_HOME", fx->xdg);
    free(fx->home);
    free(fx->xdg);
    qf_cache_reset();
    free(fx);
    return 0;
}

/* =====================================================================} */

/* A test run with a fresh fixture. */
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

/* Runs the n tests as the cmocka group `group` under the usual umask (022), which the mode checks
 * assume. */
static inline int run_cache_tests(const char *group, const struct CMUnitTest *tests, size_t n) {
    umask(022);
    return _cmocka_run_group_tests(group, tests, n, NULL, NULL);
}

#define RUN_CACHE_TESTS(group, tests) run_cache_tests(group, tests, sizeof tests / sizeof tests[0])

#endif /* QF_TEST_JIT_CACHE_UTIL_H */
