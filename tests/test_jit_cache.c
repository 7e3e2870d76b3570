/* test_jit_cache.c: disk kernel cache within one process: directory choice, round trips, damaged
 * and foreign entries. Other processes: test_jit_cache_procs.c. */
#include "test_jit_cache_util.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jit_compile.h"

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

/* The directory qf_cache_dir picks with the three variables set as given (NULL = unset), as a
 * string ("(null)" for NULL); the fixture restores HOME and XDG_CACHE_HOME. */
static void dir_with_env(const char *qdir, const char *xdg, const char *home, char out[PATH_MAX]) {
    set_or_unset("QFUSE_CACHE_DIR", qdir);
    set_or_unset("XDG_CACHE_HOME", xdg);
    set_or_unset("HOME", home);
    qf_cache_reset();
    const char *d = qf_cache_dir();
    snprintf(out, PATH_MAX, "%s", d ? d : "(null)");
}

/* QFUSE_CACHE_DIR, else an absolute XDG_CACHE_HOME/qfuse, else HOME/.cache/qfuse (HOME exists). */
static void test_dir_resolution_order(void **state) {
    fixture *fx = *state;
    char xdg[PATH_MAX], home[PATH_MAX], want[PATH_MAX], got[PATH_MAX];
    path_fmt(xdg, "%s/xdg", fx->root);
    path_fmt(home, "%s/home", fx->root);
    assert_int_equal(mkdir(home, 0700), 0); /* below HOME only (test_jit_cache_dir.c) */
    dir_with_env(fx->dir, xdg, home, got);
    assert_string_equal(got, fx->dir);
    dir_with_env(NULL, xdg, home, got);
    path_fmt(want, "%s/qfuse", xdg);
    assert_string_equal(got, want);
    path_fmt(want, "%s/.cache/qfuse", home);
    printf("expected below: the warning for an empty QFUSE_CACHE_DIR\n");
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
    qf_test_capture c;
    qf_test_capture_begin(&c);
    const char *d1 = qf_cache_dir(), *d2 = qf_cache_dir();
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    int hit = qf_cache_load("k", KEY_A, 90, &data, &size);
    char *err = qf_test_capture_end(&c);
    assert_null(d1);
    assert_null(d2);
    assert_int_equal(s, QF_OK);
    assert_int_equal(hit, 0);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "cannot be created or written (Not a directory); using the "
                                "in-memory cache only"));
    free(err);
}

/* A path that is a symbolic link to nothing degrades to NULL, the warning saying so (qf_mkdirs
 * answers EEXIST, which strerror would call "File exists"). */
static void test_dir_dangling_link_degrades(void **state) {
    fixture *fx = *state;
    char target[PATH_MAX], dir[PATH_MAX];
    path_fmt(target, "%s/nothere", fx->root);
    path_fmt(dir, "%s/link", fx->root);
    assert_int_equal(symlink(target, dir), 0);
    setenv("QFUSE_CACHE_DIR", dir, 1);
    qf_cache_reset();
    qf_test_capture c;
    qf_test_capture_begin(&c);
    const char *d = qf_cache_dir();
    char *err = qf_test_capture_end(&c);
    assert_null(d);
    assert_non_null(strstr(err, "cannot be created or written (a symbolic link to nothing); "
                                "using the in-memory cache only"));
    struct stat st;
    assert_int_not_equal(stat(target, &st), 0); /* nothing made at the link's target */
    free(err);
}

/* The read-only test's child: with stderr on errfd, the directory must be used read-only (a
 * shared node cache: entries read, none written; the parent checks the single warning and that
 * nothing was written). Returns 0 when it is. */
static int readonly_check(int errfd, const char *dir) {
    dup2(errfd, 2);
    qf_cache_reset();
    unsigned char byte = 7;
    const char *d1 = qf_cache_dir(), *d2 = qf_cache_dir();
    qf_cache_store("k", KEY_A, 90, &byte, 1);
    fflush(stderr);
    return d1 && d1 == d2 && strcmp(d1, dir) == 0 && qf_cache_dir_read_only() &&
                   qf_cache_last_stored() == 0
               ? 0
               : 1;
}

/* Makes fx->dir a mode-0500 directory owned by the user the check runs as (nobody when we are
 * root: see test_dir_readonly_read). */
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
static void test_dir_readonly_read(void **state) {
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
        exit(readonly_check(errfd, fx->dir));
    }
    close(errfd);
    int rc = wait_exit(pid);
    if (rc == 77) {
        printf("skipped: no permission to drop privileges here (the read-only check needs it)\n");
        skip();
    }
    assert_int_equal(rc, 0);
    char *err = qf_test_read_text(errpath);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, fx->dir));
    assert_non_null(strstr(err, "is read-only (Permission denied); its entries are used"));
    free(err);
    char *names = list_dir(fx->dir);
    assert_string_equal(names, ""); /* the store wrote nothing */
    free(names);
}

/* QFUSE_DISABLE_DISK_CACHE=1: no directory, no warning, nothing created; "0" and "false" leave
 * it on, "yes" is on too (qf_env_flag). */
static void test_dir_disabled(void **state) {
    fixture *fx = *state;
    setenv("QFUSE_DISABLE_DISK_CACHE", "1", 1);
    qf_cache_reset();
    qf_test_capture c;
    qf_test_capture_begin(&c);
    const char *d = qf_cache_dir();
    unsigned char byte = 7;
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    char *err = qf_test_capture_end(&c);
    assert_null(d);
    assert_int_equal(s, QF_OK);
    assert_string_equal(err, "");
    free(err);
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
    setenv("QFUSE_DISABLE_DISK_CACHE", "0", 1);
    qf_cache_reset();
    assert_non_null(qf_cache_dir());
    setenv("QFUSE_DISABLE_DISK_CACHE", "false", 1);
    qf_cache_reset();
    assert_string_equal(qf_cache_dir(), fx->dir);
    setenv("QFUSE_DISABLE_DISK_CACHE", "yes", 1);
    qf_cache_reset();
    assert_null(qf_cache_dir());
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
    const mode_t mask = umask(022);
    umask(mask);
    assert_int_equal(st.st_mode & 0777, 0644 & ~mask); /* the group of a shared folder reads it */
    assert_int_equal(st.st_mode & 0022, 0);              /* only its owner writes it */
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
    assert_int_equal(qf_test_count_substr(names, "\n"), 2);
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
    qf_test_capture c;
    qf_test_capture_begin(&c);
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    char *err = qf_test_capture_end(&c);
    assert_int_equal(s, QF_OK);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
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

/* Stores KEY_A (its entry's path in path), overwrites n bytes at off of the entry, and asserts a
 * miss at sm_90 with one warning holding every string of want[0..n_want). */
static void assert_patched_misses(const fixture *fx, char *path, long off, const void *bytes,
                                  size_t n, const char *const *want, int n_want) {
    store_a(fx, path);
    patch_file(path, off, bytes, n);
    assert_miss_warns(path, 90, want, n_want);
}

static void test_bit_flipped_payload(void **state) {
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "checksum mismatch"};
    unsigned char *p = make_payload(1, PAYLOAD_SIZE);
    unsigned char flipped = p[1234] ^ 0x10;
    free(p);
    assert_patched_misses(*state, path, HEADER_SIZE + 1234, &flipped, 1, want, 2);
}

static void test_bad_magic(void **state) {
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "bad magic"};
    assert_patched_misses(*state, path, 0, "NOTQFUSE", 8, want, 2);
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

/* A stored key of other bytes than hex digits (here a terminal escape sequence) is damage: the
 * warning says so and does not print those bytes. */
static void test_stored_key_not_hex(void **state) {
    char path[PATH_MAX];
    const char *want[] = {"corrupt", "stored key is not 32 lowercase hex digits"};
    const char esc[] = "\x1b[2J\x1b]0;title\x07";
    store_a(*state, path);
    patch_file(path, 12, esc, sizeof esc - 1);
    void *data = (void *)1;
    size_t size = 1;
    char *err = NULL;
    assert_int_equal(load_captured(KEY_A, 90, &data, &size, &err), 0);
    for (int i = 0; i < 2; i++)
        assert_non_null(strstr(err, want[i]));
    assert_null(strchr(err, '\x1b'));
    assert_null(strchr(err, '\x07'));
    free(err);
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
    char path[PATH_MAX], want_ver[64];
    int major = 0, minor = 0;
    qf_jit_nvrtc_version(&major, &minor);
    int32_t other = major + 1;
    snprintf(want_ver, sizeof want_ver, "built with NVRTC %d.%d", major + 1, minor);
    const char *want[] = {want_ver};
    /* nvrtc_major: see qf_cache_header */
    assert_patched_misses(*state, path, 48, &other, sizeof other, want, 1);
}

static void test_wrong_format_version(void **state) {
    char path[PATH_MAX];
    const char *want[] = {"format version 99"};
    uint32_t v = 99;
    assert_patched_misses(*state, path, 8, &v, sizeof v, want, 1);
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
    assert_info_invalid(fx, path, "not a regular file (a FIFO)");
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
    assert_patched_misses(fx, path, HEADER_SIZE + 5, "\xff\xff\xff", 3, want, 1);
    store_a(fx, path);
    assert_hit_a();
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_dir_created_0700),
        T(test_dir_resolution_order),
        T(test_dir_under_file_degrades),
        T(test_dir_dangling_link_degrades),
        T(test_dir_readonly_read),
        T(test_dir_disabled),
        T(test_store_then_load),
        T(test_absent_is_silent_miss),
        T(test_label_sanitized),
        T(test_no_temp_files_left),
        T(test_store_failure_warns_and_cleans_up),
        T(test_truncated_entry),
        T(test_bit_flipped_payload),
        T(test_bad_magic),
        T(test_foreign_key),
        T(test_stored_key_not_hex),
        T(test_wrong_arch),
        T(test_wrong_nvrtc_version),
        T(test_wrong_format_version),
        T(test_store_replaces_damaged_entry),
        T(test_fifo_entry),
        T(test_symlink_entry),
    };
    return RUN_CACHE_TESTS("jit_cache", tests);
}
