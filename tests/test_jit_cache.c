/* test_jit_cache.c: disk kernel cache: directory choice, round trips, other processes (cold starts
 * of real kernels, readers during writers), damage. */
#include "test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctx.h"
#include "jit_cache.h"
#include "jit_compile.h"

#define KEY_A "0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210"
#define PAYLOAD_SIZE 4099 /* odd, so nothing lines up by accident */
#define HEADER_SIZE 72
#define WARNING "qfuse: warning:"
#define N_THREAD_ITER 25
#define N_COLD 8           /* processes cold-starting on one key, as one job per GPU of a node */
#define PAYLOAD_B_SIZE 12289 /* a second valid payload for the same key, of another size */

/* A real generated kernel (small, so N_COLD concurrent NVRTC compiles stay quick). */
static const char kColdKernel[] = "qf_fp8_delayed_quant_weight_bf16";

/* Per-test state: a fresh temporary root, with the cache directory below it. */
typedef struct fixture {
    char root[PATH_MAX];
    char dir[PATH_MAX];
} fixture;

/* {===================================================================== helpers */

/* snprintf into a PATH_MAX buffer, failing the test rather than truncating. */
static void path_fmt(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && n < PATH_MAX);
}

/* Deterministic CUBIN stand-in derived from seed. Caller frees. */
static unsigned char *make_payload(uint64_t seed, size_t n) {
    unsigned char *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)qf_test_rng_next(&seed);
    return p;
}

typedef struct capture {
    int saved;
    char path[64];
} capture;

/* Redirects fd 2 into a temporary file until capture_end, which returns what was written
 * (malloc'ed). NOTES: keep cmocka asserts outside the window; a failing assert would leave
 * stderr redirected. */
static void capture_begin(capture *c) {
    snprintf(c->path, sizeof c->path, "/tmp/qf_test_stderr.XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    fflush(stderr);
    c->saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* The whole of file path as a malloc'ed string. */
static char *read_text(const char *path) {
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

static char *capture_end(capture *c) {
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    char *s = read_text(c->path);
    unlink(c->path);
    return s;
}

static int count_substr(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
        n++;
    return n;
}

/* The path the cache uses for (label, key) in dir. */
static void entry_path(char *buf, const char *dir, const char *label, const char *key) {
    path_fmt(buf, "%s/%s.%s.cubin", dir, label, key);
}

/* qf_cache_load under stderr capture: returns hit/miss, *err the warnings (malloc'ed). */
static int load_captured(const char *key, int arch, void **data, size_t *size, char **err) {
    capture c;
    capture_begin(&c);
    int hit = qf_cache_load("k", key, arch, data, size);
    *err = capture_end(&c);
    return hit;
}

/* Stores seed's payload under KEY_A, arch 90, label "k"; returns the entry path in path. */
static void store_a(const fixture *fx, char *path) {
    unsigned char *p = make_payload(1, PAYLOAD_SIZE);
    assert_int_equal(qf_cache_store("k", KEY_A, 90, p, PAYLOAD_SIZE), QF_OK);
    free(p);
    entry_path(path, fx->dir, "k", KEY_A);
}

/* Loads KEY_A and asserts a hit with seed 1's bytes. */
static void assert_hit_a(void) {
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
static void assert_miss_warns(const char *path, int arch, const char *const *want, int n_want) {
    void *data = (void *)1;
    size_t size = 1;
    char *err = NULL;
    int hit = load_captured(KEY_A, arch, &data, &size, &err);
    assert_int_equal(hit, 0);
    assert_null(data);
    assert_int_equal(size, 0);
    assert_int_equal(count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, path));
    for (int i = 0; i < n_want; i++)
        assert_non_null(strstr(err, want[i]));
    free(err);
}

/* Overwrites n bytes at off in the file at path. */
static void patch_file(const char *path, long off, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)ftw;
    if (flag == FTW_DP)
        chmod(path, 0700); /* a test may have left it read-only */
    return remove(path);
}

/* fork() for children that run test code and then exit(). NOTES: stdio is flushed first so the
 * child cannot write the parent's buffered cmocka output a second time; children use exit(), not
 * _exit(), so libnvrtc's destructors run and valgrind sees no leak in them. */
static pid_t fork_child(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    return pid;
}

/* Waits for pid, which must exit normally; returns its exit status. */
static int wait_exit(pid_t pid) {
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Names in dir (one per line) as a malloc'ed string. */
static char *list_dir(const char *dir) {
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

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    snprintf(fx->root, sizeof fx->root, "/tmp/qf_test_cache.XXXXXX");
    if (!mkdtemp(fx->root))
        return -1;
    path_fmt(fx->dir, "%s/cache", fx->root);
    setenv("QFUSE_CACHE_DIR", fx->dir, 1);
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    unsetenv("QFUSE_CACHE_FSYNC");
    qf_cache_reset();
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    chmod(fx->root, 0700);
    nftw(fx->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    unsetenv("QFUSE_CACHE_DIR");
    unsetenv("QFUSE_DISABLE_DISK_CACHE");
    unsetenv("QFUSE_CACHE_FSYNC");
    qf_cache_reset();
    free(fx);
    return 0;
}

/* =====================================================================} */

/* {===================================================================== directory */

/* Missing directories are created, parents included, each with mode 0700. */
static void test_dir_created_0700(void **state) {
    fixture *fx = *state;
    char dir[PATH_MAX], sub[PATH_MAX];
    path_fmt(dir, "%s/a/b/c", fx->root);
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    const char *got = qf_cache_dir();
    assert_non_null(got);
    assert_string_equal(got, dir);
    const char *parts[] = {"/a", "/a/b", "/a/b/c"};
    for (int i = 0; i < 3; i++) {
        struct stat st;
        path_fmt(sub, "%s%s", fx->root, parts[i]);
        assert_int_equal(stat(sub, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0700);
    }
}

/* Sets (or, for NULL, unsets) name. */
static void set_or_unset(const char *name, const char *value) {
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* The directory qf_cache_dir picks with the three variables set as given (NULL = unset), as a
 * string ("(null)" for NULL). HOME and XDG_CACHE_HOME are restored afterwards. */
static void dir_with_env(const char *qdir, const char *xdg, const char *home, char out[PATH_MAX]) {
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    set_or_unset("QFUSE_CACHE_DIR", qdir);
    set_or_unset("XDG_CACHE_HOME", xdg);
    set_or_unset("HOME", home);
    qf_cache_reset();
    const char *d = qf_cache_dir();
    snprintf(out, PATH_MAX, "%s", d ? d : "(null)");
    set_or_unset("HOME", old_home);
    set_or_unset("XDG_CACHE_HOME", old_xdg);
    free(old_home);
    free(old_xdg);
}

/* QFUSE_CACHE_DIR, else an absolute XDG_CACHE_HOME/qfuse, else HOME/.cache/qfuse. */
static void test_dir_resolution_order(void **state) {
    fixture *fx = *state;
    char xdg[PATH_MAX], home[PATH_MAX], want[PATH_MAX], got[PATH_MAX];
    path_fmt(xdg, "%s/xdg", fx->root);
    path_fmt(home, "%s/home", fx->root);
    dir_with_env(fx->dir, xdg, home, got);
    assert_string_equal(got, fx->dir);
    dir_with_env(NULL, xdg, home, got);
    path_fmt(want, "%s/qfuse", xdg);
    assert_string_equal(got, want);
    path_fmt(want, "%s/.cache/qfuse", home);
    dir_with_env("", "", home, got); /* empty counts as unset */
    assert_string_equal(got, want);
    dir_with_env(NULL, "relative/xdg", home, got); /* not absolute: ignored, per the XDG spec */
    assert_string_equal(got, want);
}

/* A path that cannot be created (its parent is a regular file) degrades to NULL, warned once. */
static void test_dir_under_file_degrades(void **state) {
    fixture *fx = *state;
    char file[PATH_MAX], dir[PATH_MAX];
    path_fmt(file, "%s/file", fx->root);
    path_fmt(dir, "%s/sub", file);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    unsigned char byte = 7;
    void *data = NULL;
    size_t size = 0;
    capture c;
    capture_begin(&c);
    const char *d1 = qf_cache_dir(), *d2 = qf_cache_dir();
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    int hit = qf_cache_load("k", KEY_A, 90, &data, &size);
    char *err = capture_end(&c);
    assert_null(d1);
    assert_null(d2);
    assert_int_equal(s, QF_OK);
    assert_int_equal(hit, 0);
    assert_int_equal(count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "is not writable (Not a directory); using the in-memory cache "
                                "only"));
    free(err);
}

/* The read-only test's child: with stderr on errfd, the directory must degrade to NULL (the
 * parent checks the single warning). Returns 0 when it does. */
static int readonly_check(int errfd) {
    dup2(errfd, 2);
    qf_cache_reset();
    unsigned char byte = 7;
    const char *d1 = qf_cache_dir(), *d2 = qf_cache_dir();
    qf_cache_store("k", KEY_A, 90, &byte, 1);
    fflush(stderr);
    return d1 == NULL && d2 == NULL ? 0 : 1;
}

/* Makes fx->dir a mode-0500 directory owned by the user the check runs as (nobody when we are
 * root: see test_dir_readonly_degrades). */
static void make_readonly_dir(const fixture *fx, uid_t uid, gid_t gid) {
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    if (geteuid() == 0) {
        assert_int_equal(chmod(fx->root, 0711), 0); /* so nobody can reach fx->dir */
        assert_int_equal(chown(fx->dir, uid, gid), 0);
    }
    assert_int_equal(chmod(fx->dir, 0500), 0);
}

/* NOTES: root passes access(W_OK) on a mode-0500 directory, and tests usually run as root, so the
 * check runs in a child that has dropped to an unprivileged user owning the directory. */
static void test_dir_readonly_degrades(void **state) {
    fixture *fx = *state;
    char errpath[PATH_MAX];
    uid_t uid = geteuid() == 0 ? 65534 : geteuid();
    gid_t gid = geteuid() == 0 ? 65534 : getegid();
    make_readonly_dir(fx, uid, gid);
    path_fmt(errpath, "%s/stderr.txt", fx->root);
    int errfd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(errfd >= 0);
    pid_t pid = fork_child();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(gid) != 0 || setuid(uid) != 0))
            exit(77);
        exit(readonly_check(errfd));
    }
    close(errfd);
    int rc = wait_exit(pid);
    if (rc == 77)
        skip(); /* no permission to drop privileges here */
    assert_int_equal(rc, 0);
    char *err = read_text(errpath);
    assert_int_equal(count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, fx->dir));
    assert_non_null(strstr(err, "not writable (Permission denied)"));
    free(err);
}

/* QFUSE_DISABLE_DISK_CACHE=1: no directory, no warning, nothing created; "0" leaves it on. */
static void test_dir_disabled(void **state) {
    fixture *fx = *state;
    setenv("QFUSE_DISABLE_DISK_CACHE", "1", 1);
    qf_cache_reset();
    capture c;
    capture_begin(&c);
    const char *d = qf_cache_dir();
    unsigned char byte = 7;
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    char *err = capture_end(&c);
    assert_null(d);
    assert_int_equal(s, QF_OK);
    assert_string_equal(err, "");
    free(err);
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
    setenv("QFUSE_DISABLE_DISK_CACHE", "0", 1);
    qf_cache_reset();
    assert_non_null(qf_cache_dir());
}

/* =====================================================================} */

/* {===================================================================== round trips */

static void test_store_then_load(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    store_a(fx, path);
    assert_hit_a();
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, HEADER_SIZE + PAYLOAD_SIZE);
    assert_int_equal(st.st_mode & 0777, 0600);
}

/* An absent entry is a silent miss. */
static void test_absent_is_silent_miss(void **state) {
    (void)state;
    void *data = (void *)1;
    size_t size = 1;
    char *err = NULL;
    assert_int_equal(load_captured(KEY_B, 90, &data, &size, &err), 0);
    assert_null(data);
    assert_string_equal(err, "");
    free(err);
}

/* The label is only a readable prefix, reduced to [A-Za-z0-9_-]. */
static void test_label_sanitized(void **state) {
    fixture *fx = *state;
    unsigned char byte = 7;
    char path[PATH_MAX];
    assert_int_equal(qf_cache_store("norm/quant v1.x", KEY_A, 90, &byte, 1), QF_OK);
    entry_path(path, fx->dir, "norm_quant_v1_x", KEY_A);
    assert_int_equal(access(path, R_OK), 0);
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(qf_cache_load("norm/quant v1.x", KEY_A, 90, &data, &size), 1);
    assert_int_equal(size, 1);
    free(data);
}

/* Stores (new and replacing, with fsync on and off) leave only final entries behind. */
static void test_no_temp_files_left(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    store_a(fx, path);
    store_a(fx, path);
    setenv("QFUSE_CACHE_FSYNC", "1", 1);
    unsigned char byte = 7;
    assert_int_equal(qf_cache_store("other", KEY_B, 100, &byte, 1), QF_OK);
    unsetenv("QFUSE_CACHE_FSYNC");
    char *names = list_dir(fx->dir);
    char want[256];
    path_fmt(want, "k.%s.cubin\n", KEY_A);
    assert_non_null(strstr(names, want));
    path_fmt(want, "other.%s.cubin\n", KEY_B);
    assert_non_null(strstr(names, want));
    assert_null(strstr(names, ".tmp."));
    assert_int_equal(count_substr(names, "\n"), 2);
    free(names);
}

/* A failed store (the final name is a directory, so rename fails) warns and cleans up. */
static void test_store_failure_warns_and_cleans_up(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX], inner[PATH_MAX];
    assert_non_null(qf_cache_dir());
    entry_path(path, fx->dir, "k", KEY_A);
    path_fmt(inner, "%s/x", path);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(mkdir(inner, 0700), 0);
    unsigned char byte = 7;
    capture c;
    capture_begin(&c);
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    char *err = capture_end(&c);
    assert_int_equal(s, QF_OK);
    assert_int_equal(count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, "could not store kernel cache entry"));
    assert_non_null(strstr(err, "rename"));
    free(err);
    char *names = list_dir(fx->dir);
    assert_null(strstr(names, ".tmp."));
    free(names);
    const char *want[] = {"corrupt", "not a regular file"}; /* and such an entry is never read */
    assert_miss_warns(path, 90, want, 2);
}

/* =====================================================================} */

/* {===================================================================== other processes */

/* Child mode (--child-load <dir> <key>): exits 0 on a hit with seed 1's bytes, 1 on a miss,
 * 2 on wrong bytes. Runs before cmocka, in a freshly exec'd process. */
static int child_load(const char *dir, const char *key) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    void *data = NULL;
    size_t size = 0;
    if (!qf_cache_load("k", key, 90, &data, &size))
        return 1;
    unsigned char *want = make_payload(1, PAYLOAD_SIZE);
    int same = size == PAYLOAD_SIZE && memcmp(data, want, size) == 0;
    free(data);
    free(want);
    return same ? 0 : 2;
}

/* Child mode (--child-bad-key <key>): must abort in QF_ASSERT; exits 0 if it does not. */
static int child_bad_key(const char *key) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 2); /* the assertion message is expected; keep the test log clean */
    void *data = NULL;
    size_t size = 0;
    qf_cache_load("k", key, 90, &data, &size);
    return 0;
}

/* Runs this test binary again as `self mode a [b]` and returns the raw wait status.
 * NOTES: exec, not just fork, so the child is a genuinely separate process (its own directory
 * decision, no inherited state), and under valgrind it runs natively unless --trace-children. */
static int run_self(const char *mode, const char *a, const char *b) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    pid_t pid = fork_child();
    if (pid == 0) {
        execl(self, self, mode, a, b, (char *)NULL);
        _exit(127); /* exec failed: nothing of ours to clean up */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

/* Runs `self mode dir` in a new process; returns its exit status. */
static int run_child_mode(const char *mode, const char *dir) {
    int status = run_self(mode, dir, NULL);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Runs --child-load dir key in a new process; returns its exit status. */
static int run_child_load(const char *dir, const char *key) {
    int status = run_self("--child-load", dir, key);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_second_process_hits(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    store_a(fx, path);
    assert_int_equal(run_child_load(fx->dir, KEY_A), 0);
    assert_int_equal(run_child_load(fx->dir, KEY_B), 1); /* and it really looks */
}

/* One writer/reader process: stores and reloads the same key n times. Exit 0 when every load
 * hit with the right bytes. */
static int hammer(int n) {
    unsigned char *want = make_payload(1, PAYLOAD_SIZE);
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        void *data = NULL;
        size_t size = 0;
        qf_cache_store("k", KEY_A, 90, want, PAYLOAD_SIZE);
        bad = !qf_cache_load("k", KEY_A, 90, &data, &size) || size != PAYLOAD_SIZE ||
              memcmp(data, want, size) != 0;
        free(data);
    }
    free(want);
    return bad;
}

/* Several processes storing and loading one key at once never see a partial or torn entry. */
static void test_concurrent_processes(void **state) {
    fixture *fx = *state;
    enum { N_PROC = 4, N_ITER = 40 };
    pid_t pids[N_PROC];
    assert_non_null(qf_cache_dir());
    for (int i = 0; i < N_PROC; i++) {
        pids[i] = fork_child();
        if (pids[i] == 0)
            exit(hammer(N_ITER));
    }
    for (int i = 0; i < N_PROC; i++)
        assert_int_equal(wait_exit(pids[i]), 0);
    char *names = list_dir(fx->dir);
    assert_null(strstr(names, ".tmp."));
    free(names);
    assert_hit_a();
}

static void *hammer_thread(void *arg) {
    *(int *)arg = hammer(N_THREAD_ITER);
    return NULL;
}

/* The same from several threads of one process (the directory decision is shared). */
static void test_concurrent_threads(void **state) {
    (void)state;
    enum { N_THREAD = 4 };
    pthread_t threads[N_THREAD];
    int bad[N_THREAD] = {0};
    qf_cache_reset(); /* every thread races to make the directory decision */
    for (int i = 0; i < N_THREAD; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, hammer_thread, &bad[i]), 0);
    for (int i = 0; i < N_THREAD; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(bad[i], 0);
    }
    assert_hit_a();
}

/* A key that is not 32 lower-case hex digits is a bug (and would be a path component): the
 * cache aborts rather than open ../ paths. Checked in child processes that must die of SIGABRT. */
static void test_bad_key_aborts(void **state) {
    (void)state;
    const char *bad[] = {"../../../../../../../etc/passwd", "0123456789ABCDEF0123456789ABCDEF",
                         "0123456789abcdef"};
    for (int i = 0; i < 3; i++) {
        int status = run_self("--child-bad-key", bad[i], NULL);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGABRT);
    }
}

/* =====================================================================} */

/* {===================================================================== cold starts, readers during writers */

/* A start line for child processes: each writes one byte to `ready` once set up, then blocks
 * reading `go` until the parent closes it, so all of them leave the line together. */
typedef struct start_line {
    int ready[2], go[2];
    char ready_fd[16], go_fd[16];
} start_line;

static void start_line_init(start_line *l) {
    assert_int_equal(pipe(l->ready), 0);
    assert_int_equal(pipe(l->go), 0);
    /* the parent's ends must not survive exec, or `go` never reaches EOF in the children */
    assert_int_equal(fcntl(l->ready[0], F_SETFD, FD_CLOEXEC), 0);
    assert_int_equal(fcntl(l->go[1], F_SETFD, FD_CLOEXEC), 0);
    snprintf(l->ready_fd, sizeof l->ready_fd, "%d", l->ready[1]);
    snprintf(l->go_fd, sizeof l->go_fd, "%d", l->go[0]);
}

/* Waits until n children are ready, then lets them all go. */
static void start_line_release(start_line *l, int n) {
    char buf[64];
    int got = 0;
    close(l->ready[1]);
    close(l->go[0]);
    while (got < n) {
        ssize_t r = read(l->ready[0], buf, sizeof buf);
        assert_true(r > 0); /* EOF early: a child died before reaching the line */
        got += (int)r;
    }
    close(l->ready[0]);
    close(l->go[1]);
}

/* The child's side: report ready, wait for go. Returns 0, or -1 if the pipes misbehave. */
static int start_line_wait(const char *ready_fd, const char *go_fd) {
    int ready = atoi(ready_fd), go = atoi(go_fd);
    char c = 1;
    if (write(ready, &c, 1) != 1)
        return -1;
    close(ready);
    ssize_t r = read(go, &c, 1); /* 0 (EOF) is the signal */
    close(go);
    return r == 0 ? 0 : -1;
}

/* Runs this binary again with args (NULL-terminated) in a new process, its stderr into errpath.
 * Returns the pid. NOTES: exec'd, as run_self: a separate process with its own cache state. */
static pid_t spawn_self(const char *errpath, const char *const *args) {
    char self[PATH_MAX];
    char *argv[12] = {self};
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    for (int i = 0; args[i] && i < 10; i++)
        argv[i + 1] = (char *)args[i]; /* execv's prototype predates const; it never writes */
    pid_t pid = fork_child();
    if (pid == 0) {
        int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execv(self, argv);
        _exit(127); /* exec failed: nothing of ours to clean up */
    }
    return pid;
}

/* Number of warnings in the stderr file of a child. */
static int warnings_in(const char *errpath) {
    char *err = read_text(errpath);
    int n = count_substr(err, WARNING);
    if (n)
        print_message("%s:\n%s", errpath, err);
    free(err);
    return n;
}

static int cold_kernel_index(void) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (strcmp(qf_kernels[i].name, kColdKernel) == 0)
            return i;
    return -1;
}

/* Child mode (--child-cold <dir> <ready> <go>): one job starting on a node with an empty cache:
 * looks kColdKernel up for sm_90 through a context, as an op does on first use (disk cache,
 * else NVRTC and store). Exits 0 on success. */
static int child_cold(const char *dir, const char *ready_fd, const char *go_fd) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    int kidx = cold_kernel_index();
    qf_ctx_t *ctx = NULL;
    if (kidx < 0 || qf_ctx_init_host(&ctx, 90) != QF_OK)
        return 3;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    qf_loaded_kernel lk;
    qf_status s = start_line_wait(ready_fd, go_fd) == 0
                      ? qf_ctx_kernel(ctx, &qf_kernels[kidx], &inst, &lk)
                      : QF_ERR_INTERNAL;
    if (s != QF_OK)
        fprintf(stderr, "child: %s: %s\n", qf_status_name(s), qf_last_error());
    qf_ctx_free(ctx);
    return s == QF_OK ? 0 : 1;
}

/* The key kColdKernel's default instance has for sm_90. */
static void cold_key(char hex[QF_KEY_HEX_LEN + 1]) {
    int kidx = cold_kernel_index();
    assert_true(kidx >= 0);
    const qf_kernel_entry *k = &qf_kernels[kidx];
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_kernel_key(k->recipe, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, 90, hex);
}

/* N_COLD processes started together on one key and an absent directory all succeed, without a
 * warning, and leave one complete entry (no temporary file) in a 0700 directory, which loads. */
static void test_cold_start_processes(void **state) {
    fixture *fx = *state;
    start_line line;
    pid_t pids[N_COLD];
    char errs[N_COLD][PATH_MAX], key[QF_KEY_HEX_LEN + 1], want[256];
    start_line_init(&line);
    for (int i = 0; i < N_COLD; i++) {
        path_fmt(errs[i], "%s/cold%d.err", fx->root, i);
        const char *args[] = {"--child-cold", fx->dir, line.ready_fd, line.go_fd, NULL};
        pids[i] = spawn_self(errs[i], args);
    }
    start_line_release(&line, N_COLD);
    for (int i = 0; i < N_COLD; i++)
        assert_int_equal(wait_exit(pids[i]), 0);
    for (int i = 0; i < N_COLD; i++)
        assert_int_equal(warnings_in(errs[i]), 0);
    cold_key(key);
    path_fmt(want, "%s.%s.cubin\n", kColdKernel, key);
    char *names = list_dir(fx->dir);
    assert_string_equal(names, want); /* exactly the one entry */
    free(names);
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(qf_cache_load(kColdKernel, key, 90, &data, &size), 1);
    assert_true(size > 64);
    assert_memory_equal(data, "\177ELF", 4);
    free(data);
}

/* Child mode (--child-writer <dir> <ready> <go> <n>): stores KEY_A n times, alternating two valid
 * payloads of different sizes, so a torn read could not pass the checks by luck. */
static int child_writer(const char *dir, const char *ready_fd, const char *go_fd, int n) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    unsigned char *a = make_payload(1, PAYLOAD_SIZE), *b = make_payload(2, PAYLOAD_B_SIZE);
    int rc = start_line_wait(ready_fd, go_fd);
    for (int i = 0; i < n && rc == 0; i++)
        qf_cache_store("k", KEY_A, 90, i % 2 ? b : a, i % 2 ? PAYLOAD_B_SIZE : PAYLOAD_SIZE);
    free(a);
    free(b);
    return rc ? 3 : 0;
}

/* Child mode (--child-reader <dir> <ready> <go> <n>): loads KEY_A n times; every load must hit
 * with one of the writers' payloads exactly. Exits with the number of bad loads (at most 100). */
static int child_reader(const char *dir, const char *ready_fd, const char *go_fd, int n) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    unsigned char *a = make_payload(1, PAYLOAD_SIZE), *b = make_payload(2, PAYLOAD_B_SIZE);
    int bad = start_line_wait(ready_fd, go_fd) == 0 ? 0 : 100;
    for (int i = 0; i < n && bad < 100; i++) {
        void *data = NULL;
        size_t size = 0;
        int hit = qf_cache_load("k", KEY_A, 90, &data, &size);
        bad += !hit || !((size == PAYLOAD_SIZE && memcmp(data, a, size) == 0) ||
                         (size == PAYLOAD_B_SIZE && memcmp(data, b, size) == 0));
        free(data);
    }
    free(a);
    free(b);
    return bad;
}

/* Readers looping while writers keep renaming new entries over the old one never see a partial
 * or invalid entry: every load hits, and no reader prints a warning. */
static void test_readers_during_writers(void **state) {
    fixture *fx = *state;
    enum { N_WRITERS = 3, N_READERS = 3, N_WRITES = 300, N_READS = 600 };
    start_line line;
    pid_t pids[N_WRITERS + N_READERS];
    char errs[N_WRITERS + N_READERS][PATH_MAX], path[PATH_MAX], writes[16], reads[16];
    store_a(fx, path); /* readers start with an entry present */
    snprintf(writes, sizeof writes, "%d", N_WRITES);
    snprintf(reads, sizeof reads, "%d", N_READS);
    start_line_init(&line);
    for (int i = 0; i < N_WRITERS + N_READERS; i++) {
        int writer = i < N_WRITERS;
        path_fmt(errs[i], "%s/%s%d.err", fx->root, writer ? "writer" : "reader", i);
        const char *args[] = {writer ? "--child-writer" : "--child-reader", fx->dir,
                              line.ready_fd, line.go_fd, writer ? writes : reads, NULL};
        pids[i] = spawn_self(errs[i], args);
    }
    start_line_release(&line, N_WRITERS + N_READERS);
    for (int i = 0; i < N_WRITERS + N_READERS; i++)
        assert_int_equal(wait_exit(pids[i]), 0);
    for (int i = 0; i < N_WRITERS + N_READERS; i++)
        assert_int_equal(warnings_in(errs[i]), 0);
    char *names = list_dir(fx->dir);
    assert_null(strstr(names, ".tmp."));
    assert_int_equal(count_substr(names, "\n"), 1);
    free(names);
}

/* Child mode (--child-lookup <dir>): looks kColdKernel up once; exits 0 when it came from the
 * disk cache (what a second job finds after the first replaced a damaged entry). */
static int child_lookup(const char *dir) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    int kidx = cold_kernel_index();
    qf_ctx_t *ctx = NULL;
    if (kidx < 0 || qf_ctx_init_host(&ctx, 90) != QF_OK)
        return 3;
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    qf_loaded_kernel lk;
    qf_status s = qf_ctx_kernel(ctx, &qf_kernels[kidx], &inst, &lk);
    int disk = s == QF_OK && qf_ctx_last_kernel(ctx)->source == QF_KSRC_DISK;
    qf_ctx_free(ctx);
    return disk ? 0 : 1;
}

/* Looks kColdKernel up twice through a new context (the second lookup is the table's). Returns
 * how the first was served; *err holds the warnings of both. */
static qf_kernel_source lookup_captured(char **err) {
    int kidx = cold_kernel_index();
    qf_ctx_t *ctx = NULL;
    assert_true(kidx >= 0);
    assert_int_equal(qf_ctx_init_host(&ctx, 90), QF_OK);
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    qf_loaded_kernel lk;
    capture c;
    capture_begin(&c);
    qf_status s = qf_ctx_kernel(ctx, &qf_kernels[kidx], &inst, &lk);
    qf_kernel_source first = qf_ctx_last_kernel(ctx)->source;
    qf_status s2 = qf_ctx_kernel(ctx, &qf_kernels[kidx], &inst, &lk);
    *err = capture_end(&c);
    assert_int_equal(s, QF_OK);
    assert_int_equal(s2, QF_OK);
    assert_int_equal(qf_ctx_last_kernel(ctx)->source, QF_KSRC_MEMORY);
    qf_ctx_free(ctx);
    return first;
}

/* A damaged entry of a real kernel costs one warning in the process that finds it, which
 * recompiles and replaces it; later lookups (same context, a new one, another process) are
 * served from the table or the repaired entry, silently. */
static void test_damaged_entry_recompiled_once(void **state) {
    fixture *fx = *state;
    char key[QF_KEY_HEX_LEN + 1], path[PATH_MAX], *err = NULL;
    unsigned char byte = 0;
    cold_key(key);
    entry_path(path, fx->dir, kColdKernel, key);
    assert_int_equal(lookup_captured(&err), QF_KSRC_COMPILED); /* cold: compiled and stored */
    assert_string_equal(err, "");
    free(err);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &byte, 1, HEADER_SIZE + 100), 1);
    close(fd);
    byte ^= 0x40;
    patch_file(path, HEADER_SIZE + 100, &byte, 1);
    assert_int_equal(lookup_captured(&err), QF_KSRC_COMPILED);
    assert_int_equal(count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "checksum mismatch"));
    assert_non_null(strstr(err, "recompiled and replaced"));
    free(err);
    assert_int_equal(lookup_captured(&err), QF_KSRC_DISK);
    assert_string_equal(err, "");
    free(err);
    assert_int_equal(run_child_mode("--child-lookup", fx->dir), 0);
}

/* =====================================================================} */

/* {===================================================================== damaged and foreign */

static void test_truncated_entry(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "truncated", "recompiled and replaced"};
    store_a(fx, path);
    assert_int_equal(truncate(path, HEADER_SIZE + 10), 0); /* header intact, payload cut */
    assert_miss_warns(path, 90, want, 3);
    assert_int_equal(truncate(path, 20), 0); /* header cut */
    assert_miss_warns(path, 90, want, 3);
    assert_int_equal(truncate(path, 0), 0);
    assert_miss_warns(path, 90, want, 3);
}

static void test_bit_flipped_payload(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "checksum mismatch"};
    store_a(fx, path);
    unsigned char *p = make_payload(1, PAYLOAD_SIZE);
    unsigned char flipped = p[1234] ^ 0x10;
    free(p);
    patch_file(path, HEADER_SIZE + 1234, &flipped, 1);
    assert_miss_warns(path, 90, want, 2);
}

static void test_bad_magic(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "bad magic"};
    store_a(fx, path);
    patch_file(path, 0, "NOTQFUSE", 8);
    assert_miss_warns(path, 90, want, 2);
}

/* An intact entry for KEY_B renamed onto KEY_A's file name must not be served for KEY_A. */
static void test_foreign_key(void **state) {
    fixture *fx = *state;
    char path_a[PATH_MAX], path_b[PATH_MAX];
    const char *want[] = {"key mismatch", KEY_B};
    unsigned char *p = make_payload(1, PAYLOAD_SIZE);
    assert_int_equal(qf_cache_store("k", KEY_B, 90, p, PAYLOAD_SIZE), QF_OK);
    free(p);
    entry_path(path_a, fx->dir, "k", KEY_A);
    entry_path(path_b, fx->dir, "k", KEY_B);
    assert_int_equal(rename(path_b, path_a), 0);
    assert_miss_warns(path_a, 90, want, 2);
}

static void test_wrong_arch(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"built for sm_90, expected sm_100"};
    store_a(fx, path);
    assert_miss_warns(path, 100, want, 1);
    assert_hit_a(); /* the entry itself is fine for sm_90 */
}

/* An entry written by another NVRTC version (header field patched) is not loaded. */
static void test_wrong_nvrtc_version(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX], want_ver[64];
    int major = 0, minor = 0;
    qf_jit_nvrtc_version(&major, &minor);
    int32_t other = major + 1;
    snprintf(want_ver, sizeof want_ver, "built with NVRTC %d.%d", major + 1, minor);
    const char *want[] = {want_ver};
    store_a(fx, path);
    patch_file(path, 48, &other, sizeof other); /* nvrtc_major: see qf_cache_header */
    assert_miss_warns(path, 90, want, 1);
}

static void test_wrong_format_version(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"format version 99"};
    uint32_t v = 99;
    store_a(fx, path);
    patch_file(path, 8, &v, sizeof v);
    assert_miss_warns(path, 90, want, 1);
}

/* The cache tool's view of the entry at path: present, invalid, and why holds `why`. */
static void assert_info_invalid(const fixture *fx, const char *path, const char *why) {
    qf_cache_info info;
    memset(&info, 0, sizeof info);
    assert_int_equal(qf_cache_entry_info(fx->dir, strrchr(path, '/') + 1, &info), 0);
    assert_false(info.valid);
    assert_non_null(strstr(info.why, why));
}

/* A FIFO (or other non-regular file) named like an entry is a miss with a warning, never a
 * blocking read, for the loader and for the cache tool's entry info; a store replaces it. */
static void test_fifo_entry(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"not a regular file", "recompiled and replaced"};
    store_a(fx, path); /* creates the directory; the entry is then swapped for a FIFO */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_miss_warns(path, 90, want, 2); /* would block forever without O_NONBLOCK */
    assert_info_invalid(fx, path, "not a regular file");
    store_a(fx, path);
    assert_hit_a();
}

/* A symbolic link named like an entry is never followed: one warning, a miss, and the next store
 * replaces the link, not the file it points to. */
static void test_symlink_entry(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX], target[PATH_MAX + 16];
    const char *want[] = {"a symbolic link", "recompiled and replaced"};
    store_a(fx, path);
    snprintf(target, sizeof target, "%s.target", path);
    assert_int_equal(rename(path, target), 0); /* a valid entry, reachable only through the link */
    assert_int_equal(symlink(target, path), 0);
    assert_miss_warns(path, 90, want, 2);
    assert_info_invalid(fx, path, "symbolic link");
    store_a(fx, path);
    assert_hit_a();
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode)); /* the link itself was replaced */
    assert_int_equal(stat(target, &st), 0); /* its target is untouched */
}

/* After a miss on a damaged entry, the next store replaces it and loads hit again. */
static void test_store_replaces_damaged_entry(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    const char *want[] = {"checksum mismatch"};
    store_a(fx, path);
    patch_file(path, HEADER_SIZE + 5, "\xff\xff\xff", 3);
    assert_miss_warns(path, 90, want, 1);
    store_a(fx, path);
    assert_hit_a();
}

/* =====================================================================} */

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child-load") == 0)
        return child_load(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--child-bad-key") == 0)
        return child_bad_key(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--child-cold") == 0)
        return child_cold(argv[2], argv[3], argv[4]);
    if (argc == 6 && strcmp(argv[1], "--child-writer") == 0)
        return child_writer(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc == 6 && strcmp(argv[1], "--child-reader") == 0)
        return child_reader(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc == 3 && strcmp(argv[1], "--child-lookup") == 0)
        return child_lookup(argv[2]);
    umask(022); /* the mode checks below assume the usual umask */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dir_created_0700, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_resolution_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_under_file_degrades, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_readonly_degrades, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dir_disabled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_then_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_absent_is_silent_miss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_label_sanitized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_temp_files_left, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_failure_warns_and_cleans_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_second_process_hits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_key_aborts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cold_start_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readers_during_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_entry_recompiled_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncated_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bit_flipped_payload, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_arch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_nvrtc_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrong_format_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_replaces_damaged_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fifo_entry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_symlink_entry, setup, teardown),
    };
    return cmocka_run_group_tests_name("jit_cache", tests, NULL, NULL);
}
