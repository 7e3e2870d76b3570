/* test_jit_cache_procs.c: disk kernel cache seen from other processes and threads: a second
 * process, concurrent stores, bad keys, cold starts of real kernels, readers during writers and a
 * damaged entry recompiled once. */
#include "test_jit_cache_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctx.h"
#include "jit_compile.h"

#define N_THREAD_ITER 25
#define N_COLD 8             /* processes cold-starting on one key, as one job per GPU of a node */
#define PAYLOAD_B_SIZE 12289 /* a second valid payload for the same key, of another size */

/* A real generated kernel (small, so N_COLD concurrent NVRTC compiles stay quick). */
static const char kColdKernel[] = "qf_fp8_delayed_quant_weight_bf16";

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
    char *err = qf_test_read_text(errpath);
    int n = qf_test_count_substr(err, WARNING);
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

/* A child's sm_90 host context with dir as its cache: returns kColdKernel's index, or -1 (and
 * no context) when either is missing. */
static int child_ctx(const char *dir, qf_ctx_t **ctx) {
    setenv("QFUSE_CACHE_DIR", dir, 1);
    int kidx = cold_kernel_index();
    if (kidx < 0 || qf_ctx_init_host(ctx, 90) != QF_OK)
        return -1;
    return kidx;
}

/* Looks kColdKernel (index kidx) up through ctx with its default instance, as an op does. */
static qf_status cold_lookup(qf_ctx_t *ctx, int kidx) {
    qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[kidx]);
    qf_loaded_kernel lk;
    return qf_ctx_kernel(ctx, &qf_kernels[kidx], &inst, &lk);
}

/* Child mode (--child-cold <dir> <ready> <go>): one job starting on a node with an empty cache:
 * looks kColdKernel up for sm_90 through a context, as an op does on first use (disk cache,
 * else NVRTC and store). Exits 0 on success. */
static int child_cold(const char *dir, const char *ready_fd, const char *go_fd) {
    qf_ctx_t *ctx = NULL;
    int kidx = child_ctx(dir, &ctx);
    if (kidx < 0)
        return 3;
    qf_status s = start_line_wait(ready_fd, go_fd) == 0 ? cold_lookup(ctx, kidx) : QF_ERR_INTERNAL;
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
    assert_int_equal(qf_test_count_substr(names, "\n"), 1);
    free(names);
}

/* Child mode (--child-lookup <dir>): looks kColdKernel up once; exits 0 when it came from the
 * disk cache (what a second job finds after the first replaced a damaged entry). */
static int child_lookup(const char *dir) {
    qf_ctx_t *ctx = NULL;
    int kidx = child_ctx(dir, &ctx);
    if (kidx < 0)
        return 3;
    qf_status s = cold_lookup(ctx, kidx);
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
    qf_test_capture c;
    qf_test_capture_begin(&c);
    qf_status s = cold_lookup(ctx, kidx);
    qf_kernel_source first = qf_ctx_last_kernel(ctx)->source;
    qf_status s2 = cold_lookup(ctx, kidx);
    *err = qf_test_capture_end(&c);
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
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
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
    const struct CMUnitTest tests[] = {
        T(test_second_process_hits),
        T(test_concurrent_processes),
        T(test_concurrent_threads),
        T(test_bad_key_aborts),
        T(test_cold_start_processes),
        T(test_readers_during_writers),
        T(test_damaged_entry_recompiled_once),
    };
    return RUN_CACHE_TESTS("jit_cache_procs", tests);
}
