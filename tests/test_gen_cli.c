/* test_gen_cli.c: qfuse-gen's command line (gen_cli.c): --fields, --check, --list and its keys,
 * usage errors and their exit codes. */
#include "test_gen_util.h"

#include <dirent.h>

/* ========================================================================= CLI */

/* --fields prints every implemented family's schema from the families table: each field, what
 * it accepts and the default the loader fills in; reserved families are not offered. */
static void test_cli_fields(void **state) {
    (void)state;
    const char *args[] = {"--fields", NULL};
    char *out, *err;
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    for (int f = 0; f < QF_FAMILY_COUNT; f++) {
        const qf_family_traits *t = &qf_families[f];
        char head[64];
        snprintf(head, sizeof head, "family '%s' (%s)", t->name, t->spec);
        assert_true((strstr(out, head) != NULL) == t->implemented);
        for (int i = 0; t->implemented && i < t->n_fields; i++)
            assert_non_null(strstr(out, t->fields[i].name));
    }
    assert_non_null(strstr(out, "amax_history_len           integer 1..8192"));
    assert_non_null(strstr(out, "default 1024"));
    assert_non_null(strstr(out, "'e4m3' | 'e5m2'"));
    assert_non_null(strstr(out, "rht_seed                   integer 0..9223372036854775807"
                                "       default none"));
    assert_string_equal(err, "");
    free(out), free(err);
}

static void test_cli_check_shipped(void **state) {
    (void)state;
    char *out, *err;
    const char *args[] = {"--check", "recipes/fp8_delayed.lua", "recipes/mxfp8.lua",
                          "recipes/mxfp8_2d.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    assert_string_equal(out, "recipes/fp8_delayed.lua: ok\nrecipes/mxfp8.lua: ok\n"
                             "recipes/mxfp8_2d.lua: ok\n");
    assert_string_equal(err, "");
    free(out), free(err);
}

/* --list prints every variant with a key and writes nothing (an -o, which it would ignore, is
 * refused). */
static void test_cli_list(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, outdir[512];
    struct stat st;
    qf_test_dir_make_gen(&d);
    snprintf(outdir, sizeof outdir, "%s/none", d.path);
    const char *with_o[] = {"--list", "-o", outdir, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, with_o), 2);
    assert_non_null(strstr(err, "-o/--output has no effect with --list"));
    assert_int_not_equal(stat(outdir, &st), 0);
    free(out), free(err);
    const char *args[] = {"--list", "--arch", "sm_100", "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    assert_non_null(strstr(out, "keys for sm_100"));
    assert_non_null(strstr(out, "qf_fp8_delayed_nq_rmsnorm_zcg_fp16: op=norm_quantize"));
    int lines = 0;
    for (const char *s = out; *s; s++)
        lines += *s == '\n';
    assert_int_equal(lines, 1 + 22 + 18); /* 22 forward; 12 norm backward, 3 dbias, 3 act */
    assert_int_not_equal(stat(outdir, &st), 0);
    free(out), free(err);
    /* sm_90's keys are those of its compile target, sm_90a, and say so */
    const char *args90[] = {"--list", "--arch", "sm_90", "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args90), 0);
    assert_non_null(strstr(out, "keys for sm_90a\n"));
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* -o naming a regular file: the error names that path, not a directory inside it. */
static void test_cli_out_is_file(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, path[512], want[600];
    qf_test_dir_make_gen(&d);
    snprintf(path, sizeof path, "%s/afile", d.path);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    const char *args[] = {"-o", path, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(want, sizeof want, "qfuse-gen: %s: exists and is not a directory\n", path);
    assert_string_equal(err, want);
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* The names in folder dir, but for "." and "..". */
static int files_in(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* An output name held by a directory: refused before any file is written. */
static void test_cli_output_is_directory(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, path[512], want[600];
    qf_test_dir_make_gen(&d);
    snprintf(path, sizeof path, "%s/registry.c", d.path);
    assert_int_equal(mkdir(path, 0700), 0);
    const char *args[] = {"-o", d.path, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(want, sizeof want,
             "qfuse-gen: %s: exists and is not a regular file; nothing was written\n", path);
    assert_string_equal(err, want);
    char kdir[600];
    snprintf(kdir, sizeof kdir, "%s/kernels", d.path);
    struct stat st;
    assert_int_not_equal(stat(kdir, &st), 0); /* nothing made either: not even DIR/kernels */
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* -o=DIR, the form for a folder whose name starts with '-' (docs/tools.md): generates into it. */
static void test_cli_output_after_eq(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, arg[600], manifest[600];
    qf_test_dir_make_gen(&d);
    snprintf(arg, sizeof arg, "-o=%s/-x", d.path);
    const char *args[] = {arg, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 0);
    snprintf(manifest, sizeof manifest, "%s/-x/manifest.json", d.path);
    assert_int_equal(access(manifest, F_OK), 0);
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* An output path too long for the generator: the message keeps its reason, with the path shown
 * by its end ("..." and the last 200 bytes), whatever the path's length. */
static void test_cli_output_path_too_long(void **state) {
    (void)state;
    static char dir[100001];
    memset(dir, 'a', sizeof dir - 1);
    dir[0] = '/';
    memcpy(dir + sizeof dir - 11, "/the_end_z", 10); /* the path's end is what is shown */
    char *out, *err;
    const char *args[] = {"-o", dir, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    assert_non_null(strstr(err, "qfuse-gen: ...aaa"));
    assert_non_null(strstr(err, "aaa/the_end_z: output directory path too long"));
    assert_non_null(strstr(err, ": output directory path too long (at most 3895 bytes)\n"));
    assert_true(strlen(err) < 400);
    free(out), free(err);
}

/* DIR/kernels as a symbolic link to another folder: refused, nothing written or removed there. */
static void test_cli_kernels_link(void **state) {
    (void)state;
    qf_test_dir d;
    char *out, *err, link[512], other[512];
    qf_test_dir_make_gen(&d);
    snprintf(other, sizeof other, "%s/other", d.path);
    assert_int_equal(mkdir(other, 0700), 0);
    const char *mine = qf_test_dir_write(other, "qf_my_own_kernel.cu", "x");
    snprintf(link, sizeof link, "%s/out/kernels", d.path);
    char outdir[512];
    snprintf(outdir, sizeof outdir, "%s/out", d.path);
    assert_int_equal(mkdir(outdir, 0700), 0);
    assert_int_equal(symlink(other, link), 0);
    const char *args[] = {"-o", outdir, "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    assert_non_null(strstr(err, "is a symbolic link; qfuse-gen writes only under"));
    assert_int_equal(access(mine, F_OK), 0); /* not removed as a stale kernel */
    assert_int_equal(files_in(other), 1);
    free(out), free(err);
    qf_test_dir_remove(d.path);
}

/* The key depends on the arch. */
static void test_cli_list_arch_changes_key(void **state) {
    (void)state;
    char *o90, *o100, *err;
    const char *a90[] = {"--list", "recipes/fp8_delayed.lua", NULL};
    const char *a100[] = {"--list", "--arch=sm_100", "recipes/fp8_delayed.lua", NULL};
    assert_int_equal(qf_test_cli(&o90, &err, a90), 0);
    free(err);
    assert_int_equal(qf_test_cli(&o100, &err, a100), 0);
    free(err);
    const char *l90 = strchr(o90, '\n') + 1, *l100 = strchr(o100, '\n') + 1;
    assert_memory_not_equal(l90, l100, 34);
    free(o90), free(o100);
}

typedef struct qf_cli_case {
    const char *args[6];
    int rc;
    const char *out_has, *err_has;
} qf_cli_case;

static void test_cli_usage(void **state) {
    (void)state;
    static const qf_cli_case cases[] = {
        {{"--help", NULL}, 0, "usage: qfuse-gen", ""},
        {{"--version", NULL}, 0, "qfuse-gen " QF_GEN_VERSION "\n", ""},
        /* --help ignores every other argument, command flags included */
        {{"--help", "--version", NULL}, 0, "usage: qfuse-gen", ""},
        {{"--fields", "--help", NULL}, 0, "usage: qfuse-gen", ""},
        {{"--version", NULL}, 0, "qfuse-gen " QF_GEN_VERSION "\n", ""},
        /* --version is a command like the others: it drops none in silence */
        {{"--version", "--fields", NULL}, 2, "", "--version and --fields are exclusive"},
        {{"--version", "--check", "recipes/fp8_delayed.lua", NULL}, 2, "", "are exclusive"},
        /* --help (-h) before "--" wins over everything, a bad argument too (docs/tools.md) */
        {{"--bogus", "--help", NULL}, 0, "usage: qfuse-gen", ""},
        {{"-o", "a", "-o", "b", "-h", NULL}, 0, "usage: qfuse-gen", ""},
        /* a value is not taken from the next argument when that is an option */
        {{"-o", "--list", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "option '-o' needs a value (the next argument, '--list', is an option"},
        {{"--fields", "recipes/mxfp8.lua", NULL}, 2, "", "--fields takes no recipe"},
        {{"--version", "x.lua", NULL}, 2, "", "--version takes no recipe (got 'x.lua')"},
        {{NULL}, 2, "", "no recipe given"},
        {{"--bogus", "recipes/fp8_delayed.lua", NULL}, 2, "", "unknown option '--bogus'"},
        {{"--arch", "90", "recipes/fp8_delayed.lua", NULL}, 2, "", "--arch '90' is not a supported"},
        {{"--check", "--list", "recipes/fp8_delayed.lua", NULL}, 2, "", "exclusive"},
        /* one of --list, --check and --fields, once: none is dropped in silence */
        {{"--fields", "--check", NULL}, 2, "", "--fields and --check are exclusive"},
        {{"--list", "--fields", NULL}, 2, "", "--list and --fields are exclusive"},
        {{"--check", "--check", "recipes/fp8_delayed.lua", NULL}, 2, "", "--check given twice"},
        {{"--list", "--list", "recipes/fp8_delayed.lua", NULL}, 2, "", "--list given twice"},
        {{"--list", "--arch", "sm_80", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "expected sm_XX with XX in 89..199"},
        /* sm_100's target has no suffix: sm_100a is refused, and the message says why */
        {{"--list", "--arch", "sm_100a", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "sm_90a, its compile target, is the only suffixed spelling"},
        {{"recipes/fp8_delayed.lua", "-o", NULL}, 2, "", "option '-o' needs a value"},
        {{"-o=", "recipes/fp8_delayed.lua", NULL}, 2, "", "option '-o=' needs a value"},
        {{"-ox", "recipes/fp8_delayed.lua", NULL}, 2, "", "unknown option '-ox'"},
        {{"-o=a", "-o", "b", "recipes/fp8_delayed.lua", NULL}, 2, "", "-o/--output given twice"},
        /* a valued option once: the last one no longer wins in silence */
        {{"-o", "a", "--output=b", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "-o/--output given twice"},
        {{"--list", "--arch", "sm_90", "--arch=sm_100", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "--arch given twice"},
        /* an option the command would ignore */
        {{"-o", "x", "--arch", "sm_100", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "--arch has no effect when generating (the manifest's fusion keys are sm_90's"},
        {{"--check", "-o", "x", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "-o/--output has no effect with --check (it writes nothing)"},
        {{"--list", "--output=x", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "-o/--output has no effect with --list"},
        {{"--check", "--arch", "sm_90", "recipes/fp8_delayed.lua", NULL},
         2,
         "",
         "--arch has no effect with --check (it makes no fusion key)"},
        {{"--fields", "--arch", "sm_90", NULL},
         2,
         "",
         "--arch has no effect with --fields (it makes no fusion key)"},
        {{"--version", "--templates", "templates", NULL},
         2,
         "",
         "--templates has no effect with --version (it reads no template)"},
        {{"--help", "-o", "x", NULL}, 0, "usage: qfuse-gen", ""},
        {{"--check", "recipes/nope.lua", NULL}, 1, "", "cannot open recipes/nope.lua"},
        /* after --, every argument is a recipe */
        {{"--check", "--", "recipes/fp8_delayed.lua", NULL}, 0, "fp8_delayed.lua: ok", ""},
        {{"--check", "--", "--list", NULL}, 1, "", "--list: recipe file name must end in .lua"},
        {{"--check", "", NULL}, 1, "", "'': no recipe file name (a path ending in <name>.lua)"},
        {{"--check", "recipes/", NULL}, 1, "", "'recipes/': no recipe file name"},
        /* one bad file does not stop the check of the others */
        {{"--check", "recipes/nope.lua", "recipes/fp8_delayed.lua", NULL},
         1,
         "recipes/fp8_delayed.lua: ok",
         "1 of 2 recipes failed the check"},
        {{"--check", "--include", "/nonexistent", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "--include /nonexistent does not exist (the folder of qf_formats.h)"},
        {{"--templates", "/nonexistent", "-o", "x", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "--templates /nonexistent does not exist (the folder of the CUDA templates)"},
        {{"--check", "--templates", "README.md", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "--templates README.md is not a directory (the folder of the CUDA templates)"},
        {{"--check", "recipes/fp8_delayed.lua", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "recipe 'fp8_delayed' is given twice (recipes/fp8_delayed.lua)"},
        /* ".." after a folder the run would make: refused, nothing made (it left "nope" behind) */
        {{"-o", "/tmp/qf_test_gen_dotdot/nope/../out", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "/tmp/qf_test_gen_dotdot/nope/..: cannot create directory (a '..' after a folder that "
         "does not exist yet); nothing was made"},
        /* two paths of one name: both said, and why one name is too many */
        {{"--check", "./recipes/fp8_delayed.lua", "recipes/fp8_delayed.lua", NULL},
         1,
         "",
         "is given twice: ./recipes/fp8_delayed.lua and recipes/fp8_delayed.lua (a recipe is "
         "named after its file"},
        {{"--check", "recipes/fp8_delayed.lua", "recipes/fp8_delayed.lua", NULL},
         1,
         "recipes/fp8_delayed.lua: ok",
         "each recipe passes on its own, but not all 2 together"},
        /* the ones that pass are checked together even when another fails */
        {{"--check", "recipes/fp8_delayed.lua", "recipes/nope.lua", "recipes/fp8_delayed.lua",
          NULL},
         1,
         "recipes/fp8_delayed.lua: ok",
         "recipe 'fp8_delayed' is given twice"},
        {{"--check", "recipes/fp8_delayed.lua", "recipes/nope.lua", "recipes/fp8_delayed.lua",
          NULL},
         1,
         "",
         "the 2 recipes that pass on their own fail together"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = qf_test_cli(&out, &err, cases[i].args);
        if (rc != cases[i].rc || !strstr(out, cases[i].out_has) || !strstr(err, cases[i].err_has))
            fail_msg("case %zu: rc %d, out '%s', err '%s'", i, rc, out, err);
        /* a usage error ends in the other tools' pointer to --help, not the whole text */
        static const char try_help[] = "\nTry 'qfuse-gen --help'.\n";
        const size_t n = strlen(err), t = sizeof try_help - 1;
        if (rc == 2 && (n < t || strcmp(err + n - t, try_help) != 0 || strstr(err, "usage:")))
            fail_msg("case %zu: usage error's message '%s'", i, err);
        free(out), free(err);
    }
    /* a missing folder is said once, as the option's value, not also as the error it caused */
    const char *missing[][6] = {
        {"--check", "--include", "/nonexistent", "recipes/fp8_delayed.lua", NULL},
        {"--templates", "/nonexistent", "-o", "x", "recipes/fp8_delayed.lua", NULL}};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        char *out, *err;
        assert_int_equal(qf_test_cli(&out, &err, missing[i]), 1);
        if (qf_test_count_substr(err, "qfuse-gen: ") != 1 ||
            !strstr(err, "does not exist (the folder"))
            fail_msg("%s %s: err '%s'", missing[i][0], missing[i][1], err);
        free(out), free(err);
    }
}

/* build/qfuse-gen run from a folder without templates/ reads those of the source tree it was
 * built in (the folder above build/), not the install prefix. */
static void test_cli_from_another_folder(void **state) {
    (void)state;
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/'); /* build/tests/test_gen_cli -> build/tests */
    assert_non_null(slash);
    *slash = '\0';
    qf_test_dir d;
    qf_test_dir_make(&d, "gen_cwd");
    qf_test_dir_write(d.path, "mine.lua", "return {family = 'mxfp8'}\n");
    char cmd[PATH_MAX + 600];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/../qfuse-gen' --check mine.lua 2>&1", d.path, self);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[4096] = "";
    const size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = '\0';
    const int st = pclose(p);
    qf_test_dir_remove(d.path);
    if (st != 0 || strcmp(out, "mine.lua: ok\n") != 0)
        fail_msg("status %d, output '%s'", st, out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_fields),
        cmocka_unit_test(test_cli_check_shipped),
        cmocka_unit_test(test_cli_list),
        cmocka_unit_test(test_cli_out_is_file),
        cmocka_unit_test(test_cli_output_is_directory),
        cmocka_unit_test(test_cli_output_after_eq),
        cmocka_unit_test(test_cli_kernels_link),
        cmocka_unit_test(test_cli_output_path_too_long),
        cmocka_unit_test(test_cli_list_arch_changes_key),
        cmocka_unit_test(test_cli_usage),
        cmocka_unit_test(test_cli_from_another_folder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
