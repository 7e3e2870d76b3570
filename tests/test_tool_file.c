/* test_tool_file.c: the tools' output files (runtime/tools/tool_file.c), as qfuse-bench --csv and
 * qfuse-demo --loss-csv use them: a path that cannot be written is refused before any work (and
 * the check creates nothing), and the missing folders of one that can are made when it is
 * written; and the standard descriptors every tool holds open (tool_common.h). */
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool_common.h"
#include "tool_file.h"

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* What can be written passes, and nothing is made or changed by the check. */
static void test_out_check_accepts(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "toolfile");
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "new.csv")), 0);
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "a/b/c/new.csv")),
                     0); /* folders to be made */
    assert_false(exists(qf_test_dir_path(&d, "new.csv")));
    assert_false(exists(qf_test_dir_path(&d, "a")));
    const char *old = qf_test_dir_write(d.path, "old.csv", "kept");
    assert_int_equal(tool_out_check(old), 0);
    char *text = qf_test_read_text(old);
    assert_string_equal(text, "kept");
    free(text);
    qf_test_dir_remove(d.path);
}

/* What cannot be written is refused with the reason in errno. */
static void test_out_check_refuses(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "toolfile");
    errno = 0;
    assert_int_equal(tool_out_check(""), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(tool_out_check(d.path), -1); /* a directory */
    assert_int_equal(errno, EISDIR);
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "new/")),
                     -1); /* a folder's name, not yet made */
    assert_int_equal(errno, EISDIR);
    const char *file = qf_test_dir_write(d.path, "afile", "x");
    char under[700];
    snprintf(under, sizeof under, "%s/sub/x.csv", file); /* a file in the way of its folders */
    assert_int_equal(tool_out_check(under), -1);
    assert_int_equal(errno, ENOTDIR);
    /* "." or ".." after a folder not made yet: open(2) would fail there today, and once the
     * folders were made the path could name an existing file the same-file check never saw */
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "new/../afile")), -1);
    assert_int_equal(errno, ENOENT);
    assert_non_null(strstr(tool_out_why(qf_test_dir_path(&d, "new/../afile"), errno),
                           "after a folder that does not exist yet")); /* said, not just ENOENT */
    assert_string_equal(tool_out_why("", ENOENT), strerror(ENOENT));
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "new/./x.csv")), -1);
    assert_int_equal(errno, ENOENT);
    assert_false(exists(qf_test_dir_path(&d, "new")));
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "./new/x.csv")), 0); /* d exists */
    assert_int_equal(tool_same_file(qf_test_dir_path(&d, "./afile"), file), 1);
    assert_int_equal(tool_same_file(qf_test_dir_path(&d, "other"), file), 0);
    assert_int_equal(tool_out_check("/dev/null"), -1); /* not a regular file */
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(tool_out_why("/dev/null", errno), "not a regular file"));
    /* a folder whose filesystem takes no new file though access(2) lets root pass: the new
     * file is tried there */
    struct stat proc;
    if (stat("/proc/self", &proc) == 0) {
        errno = 0;
        assert_int_equal(tool_out_check("/proc/qfuse-test-new.csv"), -1);
        assert_int_not_equal(errno, 0);
        assert_false(exists("/proc/qfuse-test-new.csv"));
    }
    assert_string_equal(tool_out_why(d.path, EISDIR), strerror(EISDIR));
    /* a trailing '/' names a folder whether it exists or not, and the message says so */
    assert_int_equal(tool_out_check(qf_test_dir_path(&d, "nx/x.csv/")), -1);
    assert_int_equal(errno, EISDIR);
    assert_non_null(strstr(tool_out_why(qf_test_dir_path(&d, "nx/x.csv/"), errno),
                           "a path ending in '/' names a folder"));
    /* "-" is not taken for the standard output, nor for a file of that name ("./-" is) */
    assert_int_equal(tool_out_check("-"), -1);
    assert_int_equal(errno, ESPIPE);
    assert_non_null(strstr(tool_out_why("-", errno), "./-"));
    if (geteuid() != 0) { /* root writes anywhere */
        assert_int_equal(mkdir(qf_test_dir_path(&d, "ro"), 0500), 0);
        assert_int_equal(tool_out_check(qf_test_dir_path(&d, "ro/x/y.csv")), -1);
        assert_int_equal(errno, EACCES);
    }
    qf_test_dir_remove(d.path);
}

/* The missing folders are made (the file is not); a file in their way fails with ENOTDIR. */
static void test_make_parents(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "toolfile");
    struct stat st;
    assert_int_equal(tool_make_parents(qf_test_dir_path(&d, "a/b/x.csv")), 0);
    assert_int_equal(stat(qf_test_dir_path(&d, "a/b"), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_false(exists(qf_test_dir_path(&d, "a/b/x.csv")));
    assert_int_equal(tool_make_parents(qf_test_dir_path(&d, "a/b/x.csv")), 0); /* already there */
    const char *file = qf_test_dir_write(d.path, "afile", "x");
    char under[700];
    snprintf(under, sizeof under, "%s/sub/x.csv", file);
    errno = 0;
    assert_int_equal(tool_make_parents(under), -1);
    assert_int_equal(errno, ENOTDIR);
    qf_test_dir_remove(d.path);
}

/* A tool started with its standard output closed: tool_std_fds holds the number, so the next
 * file opened does not take it (the tool's printing would land in that file), and a write to the
 * standard output still fails with EBADF. In a child process, which may close its descriptors. */
static void test_std_fds_held(void **state) {
    (void)state;
    qf_test_dir d;
    qf_test_dir_make(&d, "toolfds");
    const char *path = qf_test_dir_path(&d, "out.csv");
    for (int hold = 0; hold < 2; hold++) {
        const pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(1);
            if (hold)
                tool_std_fds();
            const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            const int write_fails = write(1, "x", 1) < 0 && errno == EBADF;
            _exit(fd == 1 ? 1 : fd > 2 && (hold ? write_fails : 1) ? 0 : 2);
        }
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        /* without the hold the file takes number 1 (what the tools did), with it another */
        assert_int_equal(WEXITSTATUS(st), hold ? 0 : 1);
    }
    qf_test_dir_remove(d.path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_check_accepts),
        cmocka_unit_test(test_out_check_refuses),
        cmocka_unit_test(test_make_parents),
        cmocka_unit_test(test_std_fds_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
