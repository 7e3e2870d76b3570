/* test_jit_cache_dir.c: how the disk cache picks its directory and whether it writes there: a
 * relative QFUSE_CACHE_DIR is refused (memory-only, one warning), QFUSE_CACHE_READONLY makes
 * the directory read but never written (a directory without write permission: test_jit_cache.c),
 * and the outcome of each store
 * is reported (qf_cache_last_stored) so that `qfuse-cache warm` counts a failed store; a
 * directory or an entry writable by every user is not trusted. The
 * boolean variables' spellings (qf_env_flag) are checked here too. */
#include "test_jit_cache_util.h"

#include <errno.h>

/* {===================================================================== boolean variables */

static void test_env_flag_spellings(void **state) {
    (void)state;
    static const char *const on[] = {"1", "true", "TRUE", "yes", "On"};
    static const char *const off[] = {"0", "false", "No", "off", ""};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        setenv("QFUSE_CACHE_FSYNC", on[i], 1);
        if (qf_env_flag("QFUSE_CACHE_FSYNC") != 1)
            fail_msg("QFUSE_CACHE_FSYNC=%s read as off", on[i]);
    }
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        setenv("QFUSE_CACHE_FSYNC", off[i], 1);
        if (qf_env_flag("QFUSE_CACHE_FSYNC") != 0)
            fail_msg("QFUSE_CACHE_FSYNC=%s read as on", off[i]);
    }
    unsetenv("QFUSE_CACHE_FSYNC");
    assert_int_equal(qf_env_flag("QFUSE_CACHE_FSYNC"), 0);
}

/* Any other value is off, with one warning per process for that variable. */
static void test_env_flag_unknown_warns_once(void **state) {
    (void)state;
    setenv("QFUSE_LINEINFO", "maybe", 1);
    qf_test_capture c;
    qf_test_capture_begin(&c);
    const int a = qf_env_flag("QFUSE_LINEINFO"), b = qf_env_flag("QFUSE_LINEINFO");
    char *err = qf_test_capture_end(&c);
    unsetenv("QFUSE_LINEINFO");
    assert_int_equal(a, 0);
    assert_int_equal(b, 0);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, "QFUSE_LINEINFO=maybe is not a boolean"));
    free(err);
}

/* =====================================================================} */

/* {===================================================================== directory choice */

/* qf_cache_dir() decided afresh, with what it wrote to stderr into *err (malloc'ed). */
static const char *dir_captured(char **err) {
    qf_cache_reset();
    qf_test_capture c;
    qf_test_capture_begin(&c);
    const char *dir = qf_cache_dir();
    *err = qf_test_capture_end(&c);
    return dir;
}

static void test_relative_dir_refused(void **state) {
    fixture *fx = *state;
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(fx->root), 0);
    setenv("QFUSE_CACHE_DIR", "rel/cache", 1);
    char *err;
    const char *dir = dir_captured(&err);
    struct stat st;
    const int made = stat("rel", &st) == 0;
    assert_int_equal(chdir(cwd), 0);
    assert_null(dir);
    assert_int_equal(made, 0); /* nothing created under the working directory */
    assert_non_null(strstr(err, "QFUSE_CACHE_DIR=rel/cache is not an absolute path"));
    free(err);
    char buf[PATH_MAX];
    assert_int_equal(qf_cache_resolve(buf, sizeof buf), EINVAL);
}

/* Nothing configured (QFUSE_CACHE_DIR, XDG_CACHE_HOME and HOME unset, or relative): ENOENT, and
 * one warning that says which variables, with the memory-only fallback. qf_cache_resolve_why
 * words each error, naming the variable's value. */
static void test_nothing_configured(void **state) {
    (void)state; /* the fixture's teardown restores HOME and XDG_CACHE_HOME */
    unsetenv("QFUSE_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "relative/xdg", 1); /* counts only when absolute */
    unsetenv("HOME");
    char buf[PATH_MAX], why[PATH_MAX + 128];
    assert_int_equal(qf_cache_resolve(buf, sizeof buf), ENOENT);
    char *err;
    const char *dir = dir_captured(&err);
    assert_null(dir);
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(strstr(err, "QFUSE_CACHE_DIR, XDG_CACHE_HOME and HOME are unset, empty or "
                                "not absolute paths, so there is no kernel cache directory; "
                                "using the in-memory cache only"));
    free(err);
    /* trailing slashes are not doubled in the joined path; "/" itself joins to "/.cache" */
    char buf2[PATH_MAX];
    setenv("HOME", "/tmp//", 1);
    assert_int_equal(qf_cache_resolve(buf2, sizeof buf2), 0);
    assert_string_equal(buf2, "/tmp/.cache/qfuse");
    setenv("XDG_CACHE_HOME", "/", 1);
    assert_int_equal(qf_cache_resolve(buf2, sizeof buf2), 0);
    assert_string_equal(buf2, "/qfuse");
    setenv("XDG_CACHE_HOME", "relative/xdg", 1);
    unsetenv("HOME");
    setenv("QFUSE_CACHE_DIR", "a/b", 1);
    assert_string_equal(qf_cache_resolve_why(EINVAL, why, sizeof why),
                        "QFUSE_CACHE_DIR=a/b is not an absolute path");
    setenv("HOME", "/nonexistent", 1);
    assert_string_equal(qf_cache_resolve_why(ENOTDIR, why, sizeof why),
                        "HOME=/nonexistent is not an existing directory, so there is no "
                        "~/.cache/qfuse");
    assert_non_null(strstr(qf_cache_resolve_why(ENAMETOOLONG, why, sizeof why),
                           "path (QFUSE_CACHE_DIR, or qfuse-cache's --dir) is longer than"));
    unsetenv("QFUSE_CACHE_DIR"); /* then HOME's (XDG_CACHE_HOME is relative here) */
    assert_non_null(strstr(qf_cache_resolve_why(ENAMETOOLONG, why, sizeof why),
                           "path ($HOME/.cache/qfuse) is longer than"));
    assert_non_null(strstr(qf_cache_resolve_why(EIO, why, sizeof why), "cannot be formed"));
    why[39] = 'x';
    assert_int_equal(strlen(qf_cache_resolve_why(ENOTDIR, why, 40)), 39); /* cut, terminated */
}

/* The default below HOME: made below an existing HOME (.cache and .cache/qfuse), never HOME
 * itself (a service account's /nonexistent): memory-only then, one warning naming HOME. */
static void test_home_not_created(void **state) {
    fixture *fx = *state; /* its teardown restores HOME and XDG_CACHE_HOME */
    char home[PATH_MAX], made[PATH_MAX];
    path_fmt(home, "%s/nohome", fx->root);
    unsetenv("QFUSE_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", home, 1);
    char *err;
    const char *dir = dir_captured(&err);
    setenv("QFUSE_CACHE_DIR", "", 1); /* empty: the default, so the same, said in one warning */
    char *err_empty;
    const char *dir_empty = dir_captured(&err_empty);
    unsetenv("QFUSE_CACHE_DIR");
    char buf[PATH_MAX];
    const int resolved = qf_cache_resolve(buf, sizeof buf);
    struct stat st;
    const int home_made = stat(home, &st) == 0;
    setenv("HOME", fx->root, 1);
    char *err2;
    const char *dir2 = dir_captured(&err2);
    path_fmt(made, "%s/.cache/qfuse", fx->root);
    const int cache_made = stat(made, &st) == 0 && S_ISDIR(st.st_mode);
    assert_null(dir);
    assert_null(dir_empty);
    assert_int_equal(resolved, ENOTDIR);
    assert_int_equal(home_made, 0);
    assert_int_equal(qf_test_count_substr(err_empty, WARNING), 1);
    assert_non_null(strstr(err_empty, "QFUSE_CACHE_DIR is set but empty: set it to a directory"));
    free(err_empty);
    assert_non_null(strstr(err, "is not an existing directory"));
    assert_non_null(strstr(err, home));
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    assert_non_null(dir2);
    assert_string_equal(dir2, made);
    assert_int_equal(cache_made, 1);
    assert_string_equal(err2, "");
    free(err);
    free(err2);
}

/* A stored entry is read back through a read-only cache; a new store writes nothing. */
static void assert_read_only_use(const fixture *fx) {
    assert_int_equal(qf_cache_dir_read_only(), 1);
    assert_hit_a();
    unsigned char byte = 7;
    char *before = list_dir(fx->dir);
    assert_int_equal(qf_cache_store("k", KEY_B, 90, &byte, 1), QF_OK);
    assert_int_equal(qf_cache_last_stored(), 0);
    char *after = list_dir(fx->dir);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* QFUSE_CACHE_READONLY: entries are read, nothing is stored, a damaged entry is left alone. */
static void test_readonly_flag(void **state) {
    fixture *fx = *state;
    char path[PATH_MAX];
    store_a(fx, path);
    assert_int_equal(qf_cache_last_stored(), 1);
    setenv("QFUSE_CACHE_READONLY", "1", 1);
    qf_cache_reset();
    assert_read_only_use(fx);
    /* a damaged entry is not used, and left as it is: the warning does not promise a replacement */
    assert_int_equal(truncate(path, 20), 0);
    void *data = NULL;
    size_t size = 0;
    char *err;
    const int hit = load_captured(KEY_A, 90, &data, &size, &err);
    unsetenv("QFUSE_CACHE_READONLY");
    assert_int_equal(hit, 0);
    assert_non_null(strstr(err, "the cache is read-only: the kernel is compiled in memory"));
    assert_null(strstr(err, "replaced"));
    free(err);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 20);
}

/* QFUSE_CACHE_READONLY never creates the directory: memory-only when it is missing. */
static void test_readonly_flag_missing_dir(void **state) {
    fixture *fx = *state;
    setenv("QFUSE_CACHE_READONLY", "on", 1);
    char *err;
    const char *dir = dir_captured(&err);
    unsetenv("QFUSE_CACHE_READONLY");
    struct stat st;
    assert_null(dir);
    assert_int_not_equal(stat(fx->dir, &st), 0);
    assert_non_null(strstr(err, "does not exist"));
    free(err);
}

/* A store that fails (the directory replaced by a file after it was chosen) reports -1. */
static void test_failed_store_reported(void **state) {
    fixture *fx = *state;
    assert_non_null(qf_cache_dir()); /* chosen and created */
    qf_test_dir_remove(fx->dir);
    FILE *f = fopen(fx->dir, "w");
    assert_non_null(f);
    fclose(f);
    unsigned char byte = 1;
    qf_test_capture c;
    qf_test_capture_begin(&c);
    qf_status s = qf_cache_store("k", KEY_A, 90, &byte, 1);
    char *err = qf_test_capture_end(&c);
    assert_int_equal(s, QF_OK); /* the cache is an optimization: the op goes on */
    assert_int_equal(qf_cache_last_stored(), -1);
    assert_non_null(strstr(err, "could not store kernel cache entry"));
    free(err);
    unlink(fx->dir);
}

/* A directory writable by every user is not used (anyone could plant an entry under a name
 * this process asks for): memory-only, one warning; a group-writable one (a team's shared
 * cache) is. An entry writable by every user is not loaded, and the next store replaces it. */
static void test_world_writable(void **state) {
    fixture *fx = *state;
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    assert_int_equal(chmod(fx->dir, 01777), 0);
    char *err;
    assert_null(dir_captured(&err));
    assert_non_null(strstr(err, "is writable by every user (mode 1777)"));
    assert_int_equal(qf_test_count_substr(err, WARNING), 1);
    free(err);
    setenv("QFUSE_CACHE_READONLY", "1", 1); /* read-only use is refused alike */
    assert_null(dir_captured(&err));
    unsetenv("QFUSE_CACHE_READONLY");
    assert_non_null(strstr(err, "writable by every user"));
    free(err);
    assert_int_equal(chmod(fx->dir, 02770), 0);
    assert_non_null(dir_captured(&err));
    assert_string_equal(err, "");
    free(err);
    char path[PATH_MAX];
    store_a(fx, path);
    assert_int_equal(chmod(path, 0666), 0);
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(load_captured(KEY_A, 90, &data, &size, &err), 0);
    assert_non_null(strstr(err, "ignoring untrusted kernel cache entry"));
    assert_non_null(strstr(err, "writable by every user (mode 0666)"));
    free(err);
    store_a(fx, path); /* replaced by this process's own file */
    assert_hit_a();
}

/* =====================================================================} */

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_env_flag_spellings),   T(test_env_flag_unknown_warns_once),
        T(test_relative_dir_refused), T(test_nothing_configured), T(test_home_not_created),
        T(test_readonly_flag),        T(test_readonly_flag_missing_dir),
        T(test_failed_store_reported), T(test_world_writable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
