/* test_fs.c: qf_mkdirs (runtime/qf_fs.c), the one mkdir -p of the kernel cache, qfuse-gen's
 * output and the tools' output files: what it makes, with what mode, what it keeps, and which
 * component it names when it fails. */
#include "test_util.h"

#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "qf_fs.h"

static int is_dir(const char *p, mode_t *mode) {
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    if (mode)
        *mode = st.st_mode & 07777;
    return 1;
}

/* Every missing component is made with the mode asked (under umask 022); existing ones are kept
 * with their own mode; doubled and trailing slashes are accepted. */
static void test_makes_every_component(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    const mode_t old = umask(022);
    mode_t m = 0;
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "a/b/c"), 0700, NULL), 0);
    assert_true(is_dir(qf_test_dir_path(&d, "a"), &m));
    assert_int_equal(m, 0700);
    assert_true(is_dir(qf_test_dir_path(&d, "a/b/c"), &m));
    assert_int_equal(m, 0700);
    assert_int_equal(chmod(qf_test_dir_path(&d, "a"), 0750), 0);
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "a/b/c"), 0777, NULL),
                     0); /* all there: nothing changes */
    assert_true(is_dir(qf_test_dir_path(&d, "a"), &m));
    assert_int_equal(m, 0750);
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "a//x/"), 0777, NULL), 0);
    assert_true(is_dir(qf_test_dir_path(&d, "a/x"), &m));
    assert_int_equal(m, 0755); /* 0777 under the umask */
    assert_int_equal(qf_mkdirs("/", 0700, NULL), 0);
    umask(old);
    qf_test_dir_remove(d.path);
}

/* A file in the way: ENOTDIR, and failed_len names the file's own path, whether it is the last
 * component or an ancestor; nothing is made past it. */
static void test_file_in_the_way(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    const char *file = qf_test_dir_write(d.path, "f", "x");
    size_t bad = 0;
    assert_int_equal(qf_mkdirs(file, 0700, &bad), ENOTDIR);
    assert_int_equal(bad, strlen(file));
    char under[700];
    snprintf(under, sizeof under, "%s/sub/deeper", file);
    bad = 0;
    assert_int_equal(qf_mkdirs(under, 0700, &bad), ENOTDIR);
    assert_int_equal(bad, strlen(file));
    bad = 1;
    assert_int_equal(qf_mkdirs("", 0700, &bad), ENOENT);
    assert_int_equal(bad, 0);
    qf_test_dir_remove(d.path);
}

/* All or nothing: a component that cannot be made (a name longer than NAME_MAX, below three new
 * directories) leaves none of the directories this call made; those that were there stay. */
static void test_failure_makes_nothing(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "kept"), 0700, NULL), 0);
    char path[1024], name[300];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(path, sizeof path, "%s/kept/a//b/c/%s/d", d.path, name);
    size_t bad = 0;
    assert_int_equal(qf_mkdirs(path, 0700, &bad), ENAMETOOLONG);
    assert_int_equal(bad, strlen(path) - 2); /* the long component, named */
    mode_t m;
    assert_true(is_dir(qf_test_dir_path(&d, "kept"), &m));
    assert_false(is_dir(qf_test_dir_path(&d, "kept/a"), &m));
    qf_test_dir_remove(d.path);
}

/* ".." after a directory that exists is walked as the system walks it; after one the call would
 * make, ENOENT naming the path up to it, and nothing left behind (before, "new/../x" made new,
 * and x beside it). "." is the directory before it, made or not. */
static void test_dots(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "old"), 0700, NULL), 0);
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "old/../x/./y"), 0700, NULL), 0);
    assert_true(is_dir(qf_test_dir_path(&d, "x/y"), NULL));
    size_t bad = 0;
    const char *path = qf_test_dir_path(&d, "new/../z");
    assert_int_equal(qf_mkdirs(path, 0700, &bad), ENOENT);
    assert_int_equal(bad, strlen(path) - 2); /* ".../new/.." */
    assert_true(qf_mkdirs_dotdot(ENOENT, path, bad)); /* what a message says instead of ENOENT */
    assert_false(qf_mkdirs_dotdot(EACCES, path, bad));
    assert_false(qf_mkdirs_dotdot(ENOENT, "x/a..", 5)); /* a name ending in "..", not ".." */
    assert_false(qf_mkdirs_dotdot(ENOENT, path, strlen(path)));
    /* the words of each answer (qf_mkdirs_why) */
    assert_string_equal(qf_mkdirs_why(ENOENT, path, bad),
                        "a '..' after a folder that does not exist yet");
    assert_string_equal(qf_mkdirs_why(EEXIST, path, strlen(path)), "a symbolic link to nothing");
    assert_string_equal(qf_mkdirs_why(EACCES, path, bad), strerror(EACCES));
    assert_string_equal(qf_mkdirs_why(ENOENT, path, strlen(path)), strerror(ENOENT));
    assert_false(is_dir(qf_test_dir_path(&d, "new"), NULL));
    assert_false(is_dir(qf_test_dir_path(&d, "z"), NULL));
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "n2/./n3/../../n4"), 0700, &bad), ENOENT);
    assert_false(is_dir(qf_test_dir_path(&d, "n2"), NULL)); /* n2 and n3 made, then removed */
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "n5/."), 0700, NULL), 0);
    assert_true(is_dir(qf_test_dir_path(&d, "n5"), NULL));
    qf_test_dir_remove(d.path);
}

/* Links: one to a directory is that directory; one to nothing is EEXIST, naming the link. A
 * relative path is made under the working directory. */
static void test_links_and_relative(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    assert_int_equal(mkdir(qf_test_dir_path(&d, "real"), 0700), 0);
    assert_int_equal(symlink("real", qf_test_dir_path(&d, "to_dir")), 0);
    assert_int_equal(symlink("nothing", qf_test_dir_path(&d, "to_nothing")), 0);
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "to_dir/sub"), 0700, NULL), 0);
    assert_true(is_dir(qf_test_dir_path(&d, "real/sub"), NULL));
    size_t bad = 0;
    const char *dangling = qf_test_dir_path(&d, "to_nothing");
    const size_t dangling_len = strlen(dangling);
    assert_int_equal(qf_mkdirs(qf_test_dir_path(&d, "to_nothing/sub"), 0700, &bad), EEXIST);
    assert_int_equal(bad, dangling_len);
    char here[PATH_MAX];
    assert_non_null(getcwd(here, sizeof here));
    int made = -1;
    if (chdir(d.path) == 0) { /* no assert until the working directory is back */
        made = qf_mkdirs("rel/a/", 0700, NULL);
        assert_int_equal(chdir(here), 0);
    }
    assert_int_equal(made, 0);
    assert_true(is_dir(qf_test_dir_path(&d, "rel/a"), NULL));
    qf_test_dir_remove(d.path);
}

/* The checks of test_read_only_parent, as a user that cannot write ro: 0, or the line that
 * failed. */
static int read_only_checks(const char *base) {
    char ro[600], kept[700], made[700], deep[710];
    snprintf(ro, sizeof ro, "%s/ro", base);
    snprintf(kept, sizeof kept, "%s/kept", ro);
    snprintf(made, sizeof made, "%s/new", ro);
    snprintf(deep, sizeof deep, "%s/x", made);
    if (mkdir(ro, 0700) != 0 || mkdir(kept, 0700) != 0 || chmod(ro, 0500) != 0)
        return __LINE__;
    size_t bad = 0;
    int line = 0;
    if (qf_mkdirs(kept, 0700, NULL) != 0) /* already there: accepted */
        line = __LINE__;
    else if (qf_mkdirs(deep, 0700, &bad) != EACCES || bad != strlen(made))
        line = __LINE__;
    else if (is_dir(made, NULL))
        line = __LINE__;
    chmod(ro, 0700); /* whatever failed: the folder can be removed */
    return line;
}

/* Under a folder this process may not write: an existing directory there is accepted (the
 * caller checks writability), a new one fails with EACCES naming it. Root writes anywhere, so
 * as root the checks run in a child that becomes nobody (65534). */
static void test_read_only_parent(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "fs");
    assert_int_equal(chmod(d.path, 0777), 0); /* the child, as nobody, makes its folders here */
    fflush(stdout);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(255);
        const int line = read_only_checks(d.path);
        _exit(line ? 1 + line % 250 : 0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    qf_test_dir_remove(d.path);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 255) {
        printf("skipped: cannot become nobody (65534) here, and root writes anywhere\n");
        skip();
    }
    if (WEXITSTATUS(st) != 0)
        fail_msg("a read-only check failed (exit %d: 1 + its line %% 250)", WEXITSTATUS(st));
}

/* A path at PATH_MAX or longer is refused before anything is made. */
static void test_too_long(void **state) {
    (void)state;
    char *p = malloc(PATH_MAX + 8);
    assert_non_null(p);
    memset(p, 'a', PATH_MAX + 7);
    p[0] = '/';
    p[PATH_MAX + 7] = '\0';
    assert_int_equal(qf_mkdirs(p, 0700, NULL), ENAMETOOLONG);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_makes_every_component),
        cmocka_unit_test(test_file_in_the_way),
        cmocka_unit_test(test_failure_makes_nothing),
        cmocka_unit_test(test_dots),
        cmocka_unit_test(test_links_and_relative),
        cmocka_unit_test(test_read_only_parent),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
