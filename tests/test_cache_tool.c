/* test_cache_tool.c: qfuse-cache (list, clear, prune, warm) run as a program, as a cluster script
 * would, against a temporary QFUSE_CACHE_DIR. The tool is found next to this binary's directory
 * ($(BUILD_DIR)/qfuse-cache for $(BUILD_DIR)/tests/test_cache_tool). */
#include "test_jit_cache_util.h"

#include <fnmatch.h>
#include <libgen.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernel_key.h"
#include "registry.h"

#define KEY_X "00112233445566778899aabbccddeeff"

static char g_tool[PATH_MAX];

typedef struct result {
    int status; /* exit status, or -1 when killed */
    char *out, *err;
} result;

/* {===================================================================== helpers */

/* The child's side of run_tool: environment, output files, exec. Never returns. */
static void exec_tool(const fixture *fx, char *const *argv, int disable_disk) {
    char out[PATH_MAX + 8], err[PATH_MAX + 8];
    snprintf(out, sizeof out, "%s/out", fx->root);
    snprintf(err, sizeof err, "%s/err", fx->root);
    int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
        _exit(126);
    setenv("QFUSE_CACHE_DIR", fx->dir, 1);
    if (disable_disk)
        setenv("QFUSE_DISABLE_DISK_CACHE", "1", 1);
    else
        unsetenv("QFUSE_DISABLE_DISK_CACHE");
    execv(g_tool, argv);
    _exit(127);
}

/* Runs qfuse-cache with args (NULL-terminated); stdout and stderr are captured. */
static result run_tool_env(const fixture *fx, const char *const *args, int disable_disk) {
    char *argv[16] = {g_tool};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = (char *)args[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        exec_tool(fx, argv, disable_disk);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char path[PATH_MAX + 8];
    result r = {WIFEXITED(st) ? WEXITSTATUS(st) : -1, NULL, NULL};
    snprintf(path, sizeof path, "%s/out", fx->root);
    r.out = qf_test_read_text(path);
    snprintf(path, sizeof path, "%s/err", fx->root);
    r.err = qf_test_read_text(path);
    return r;
}

#define run_tool(fx, ...) run_tool_env((fx), (const char *const[]){__VA_ARGS__, NULL}, 0)

/* Asserts the exit status and that stdout (or stderr) holds sub; frees r. */
static void expect_run(result r, int status, const char *out_sub, const char *err_sub) {
    if (r.status != status || (out_sub && !strstr(r.out, out_sub)) ||
        (err_sub && !strstr(r.err, err_sub)))
        fail_msg("exit %d (expected %d)\nstdout:\n%s\nstderr:\n%s\nexpected stdout to hold "
                 "\"%s\" and stderr \"%s\"", r.status, status, r.out, r.err,
                 out_sub ? out_sub : "", err_sub ? err_sub : "");
    free(r.out);
    free(r.err);
}

/* Files of fx->dir whose name contains sub. */
static int count_files(const fixture *fx, const char *sub) {
    DIR *d = opendir(fx->dir);
    int n = 0;
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, sub) != NULL;
    closedir(d);
    return n;
}

/* Variants warm compiles for the per-tensor FP8 kernels matching glob, counted from the registry:
 * norm + quantize 3 outputs x 2 gamma dtypes (1 when x is fp32), quantize 3 outputs, others 1. */
static int expected_variants(const char *glob) {
    int n = 0;
    for (int i = 0; i < qf_kernel_count; i++) {
        const qf_kernel_entry *k = &qf_kernels[i];
        if (fnmatch(glob, k->name, 0) != 0)
            continue;
        if (k->op == QF_OP_NORM_QUANTIZE)
            n += k->in_dtype == QF_DTYPE_FP32 ? 3 : 6;
        else
            n += k->op == QF_OP_QUANTIZE ? 3 : 1;
    }
    return n;
}

/* Creates fx->dir/name with some bytes and the given age in seconds. */
static void make_file(const fixture *fx, const char *name, const char *text, long age) {
    const char *path = qf_test_dir_write(fx->dir, name, text);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age;
    t[1] = t[0];
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

static int exists(const fixture *fx, const char *name) {
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", fx->dir, name);
    return access(path, F_OK) == 0;
}

/* =====================================================================} */

/* {===================================================================== tests */

static void test_help(void **state) {
    expect_run(run_tool(*state, "--help"), 0, "usage: qfuse-cache", NULL);
    expect_run(run_tool(*state, "warm", "--help"), 0, "prune --older-than", NULL);
    /* -- ends the options: before the command, and before warm's recipes */
    expect_run(run_tool(*state, "--", "list"), 0, "0 entries", NULL);
    expect_run(run_tool(*state, "warm", "--", "--arch"), 2, NULL, "unknown recipe '--arch'");
    expect_run(run_tool(*state, "warm", "--", "--help"), 2, NULL, "unknown recipe '--help'");
}

/* Bad arguments exit 2 with a message naming them, and touch nothing (no directory made). */
static void test_bad_arguments(void **state) {
    fixture *fx = *state;
    expect_run(run_tool(fx, "bogus"), 2, NULL, "unknown command 'bogus'");
    expect_run(run_tool(fx, "--frobnicate", "list"), 2, NULL, "unknown option '--frobnicate'");
    expect_run(run_tool(fx, "--dir"), 2, NULL, "--dir needs a directory");
    expect_run(run_tool(fx, "list", "extra"), 2, NULL, "list: unexpected argument 'extra'");
    /* an option every command takes as such, as warm always did */
    expect_run(run_tool(fx, "list", "--bogus"), 2, NULL, "list: unknown option '--bogus'");
    expect_run(run_tool(fx, "clear", "-x"), 2, NULL, "clear: unknown option '-x'");
    /* --dir after the command: the message says where it goes */
    expect_run(run_tool(fx, "prune", "--older-than", "7d", "--dir", "x"), 2, NULL,
               "prune: unknown option '--dir' (--dir goes before the command");
    expect_run(run_tool(fx, "list", "--dir", "x"), 2, NULL, "(--dir goes before the command");
    expect_run(run_tool(fx, "warm", "--dir", "x"), 2, NULL,
               "warm: unknown option '--dir' (--dir goes before the command");
    expect_run(run_tool(fx, "warm", "--dir=x"), 2, NULL, "(--dir goes before the command");
    /* another option that starts with --dir gets no such hint */
    result dirt = run_tool(fx, "warm", "--dirt");
    assert_null(strstr(dirt.err, "goes before the command"));
    expect_run(dirt, 2, NULL, "warm: unknown option '--dirt'");
    expect_run(run_tool(fx, "prune"), 2, NULL, "prune: --older-than AGE is required");
    expect_run(run_tool(fx, "prune", "--older-than", "7x"), 2, NULL,
               "--older-than '7x' is not a duration");
    expect_run(run_tool(fx, "prune", "--older-than=-1d"), 2, NULL, "'-1d' is not a duration");
    expect_run(run_tool(fx, "prune", "--older-than", "99999999999999999999w"), 2, NULL,
               "--older-than '99999999999999999999w' is too large");
    expect_run(run_tool(fx, "prune", "--older-than", "20000000000000w"), 2, NULL, "is too large");
    expect_run(run_tool(fx, "warm", "--arch", ""), 2, NULL, "warm: --arch needs a value");
    expect_run(run_tool(fx, "warm", "--arch", "sm_9"), 2, NULL,
               "--arch 'sm_9' is not a supported architecture");
    expect_run(run_tool(fx, "warm", "--arch", "sm_80"), 2, NULL,
               "--arch 'sm_80' is not a supported architecture; expected sm_XX with XX in 89..199");
    expect_run(run_tool(fx, "warm", "--arch", "sm_090"), 2, NULL,
               "--arch 'sm_090' is not a supported architecture");
    expect_run(run_tool(fx, "warm", "--arch", "sm_91"), 2, NULL,
               "--arch 'sm_91' is not a GPU architecture this NVRTC compiles for (sm_89, sm_90");
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--arch", "sm_100"), 2, NULL,
               "warm: --arch given twice");
    expect_run(run_tool(fx, "warm", "--jobs", "2", "--jobs=4"), 2, NULL,
               "warm: --jobs given twice");
    expect_run(run_tool(fx, "prune", "--older-than", "1d", "--older-than", "2d"), 2, NULL,
               "prune: --older-than given twice");
    expect_run(run_tool(fx, "--dir", "/tmp/a", "--dir", "/tmp/b", "list"), 2, NULL,
               "--dir given twice");
    expect_run(run_tool(fx, "warm", "--jobs", "0"), 2, NULL, "--jobs '0' must be an integer");
    expect_run(run_tool(fx, "warm", "--jobs", ""), 2, NULL, "warm: --jobs needs a value");
    expect_run(run_tool(fx, "warm", "no_such_recipe"), 2, NULL, "unknown recipe 'no_such_recipe'");
    expect_run(run_tool_env(fx, (const char *const[]){NULL}, 0), 2, NULL, "missing command");
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
    /* list reads, never creates: a missing directory lists nothing and stays missing */
    expect_run(run_tool(fx, "list"), 0, "0 entries, 0B in", NULL);
    assert_int_equal(stat(fx->dir, &st), -1);
}

/* warm fills the cache with every variant once; a second warm compiles nothing; list shows them
 * as current; prune keeps young entries and removes old ones; clear empties the directory but
 * leaves foreign files and a store in progress alone. */
static void test_warm_list_prune_clear(void **state) {
    fixture *fx = *state;
    static const char glob[] = "qf_fp8_delayed_quant_weight_bf16";
    char want[128];
    int n = expected_variants(glob);
    assert_int_equal(n, 3);
    snprintf(want, sizeof want, "%d compiled, 0 already cached, 0 failed", n);
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--jobs", "2", "--kernel", glob), 0, want,
               "[3/3]");
    assert_int_equal(count_files(fx, ".cubin"), n);
    snprintf(want, sizeof want, "0 compiled, %d already cached", n);
    expect_run(run_tool(fx, "warm", "--arch=sm_90", "--kernel", glob, "fp8_delayed"), 0, want,
               NULL);
    result r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, "qf_fp8_delayed_quant_weight_bf16"), n);
    assert_int_equal(qf_test_count_substr(r.out, "  ok\n"), n);
    assert_int_equal(qf_test_count_substr(r.out, "fp8_delayed  "), n);
    assert_int_equal(qf_test_count_substr(r.out, "sm_90a "), n); /* the target compiled */
    /* the INSTANCE column tells the three entries of the one kernel apart */
    assert_int_equal(qf_test_count_substr(r.out, "  rowwise  "), 1);
    assert_int_equal(qf_test_count_substr(r.out, "  columnwise  "), 1);
    assert_int_equal(qf_test_count_substr(r.out, "  rowwise+columnwise  "), 1);
    expect_run(r, 0, "3 entries", NULL);
    make_file(fx, "notes.txt", "not ours\n", 30 * 86400);
    make_file(fx, "k." KEY_X ".cubin.tmp.1.2", "in progress", 0);
    make_file(fx, "k." KEY_X ".cubin.tmp.3.4", "crashed writer", 3600);
    make_file(fx, "qf_fp8_delayed_quant_weight_bf16." KEY_X ".cubin", "old", 2 * 86400);
    /* the crashed writer's temp file goes too, counted apart */
    expect_run(run_tool(fx, "prune", "--older-than", "1d"), 0,
               "removed 1 entry and 1 temporary file from", NULL);
    assert_int_equal(count_files(fx, ".cubin"), n + 1); /* n entries + the young temp file */
    assert_false(exists(fx, "k." KEY_X ".cubin.tmp.3.4"));
    expect_run(run_tool(fx, "prune", "--older-than", "12h"), 0, "removed 0 entries", NULL);
    /* the young temp file is a listed row, counted apart from the entries */
    expect_run(run_tool(fx, "list"), 0, "3 entries and 1 temporary file, ", NULL);
    expect_run(run_tool(fx, "clear"), 0, "removed 3 entries from", NULL);
    assert_int_equal(count_files(fx, ".cubin"), 1);
    assert_true(exists(fx, "notes.txt"));
    assert_true(exists(fx, "k." KEY_X ".cubin.tmp.1.2"));
    expect_run(run_tool(fx, "list"), 0, "0 entries and 1 temporary file", NULL);
}

/* warm on a cache this process must not write (QFUSE_CACHE_READONLY) compiles and writes
 * nothing: it checks that every selected variant is cached, fails naming the first three that
 * are not (then a count), and succeeds once all are (a pre-filled, shared cache); clear refuses. */
static void test_warm_read_only(void **state) {
    fixture *fx = *state;
    static const char weights[] = "qf_fp8_delayed_quant_weight_*";
    static const char *const two[] = {"warm", "--arch", "sm_90", "--kernel",
                                      "qf_fp8_delayed_scale_update", "--kernel", weights, NULL};
    const int n_weights = expected_variants(weights);
    assert_true(n_weights > 4);
    char want[128];
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    setenv("QFUSE_CACHE_READONLY", "1", 1);
    result r = run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_fp8_delayed_scale_update");
    unsetenv("QFUSE_CACHE_READONLY");
    assert_non_null(strstr(r.err, "not cached: qf_fp8_delayed_scale_update\n"));
    expect_run(r, 1, NULL, "is used read-only (QFUSE_CACHE_READONLY is on): 1 of 1 variant for "
                           "sm_90a is not cached");
    assert_int_equal(count_files(fx, ".cubin"), 0);
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_fp8_delayed_scale_update"),
               0, "1 compiled", NULL);
    setenv("QFUSE_CACHE_READONLY", "1", 1);
    r = run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_fp8_delayed_scale_update");
    result r2 = run_tool_env(fx, two, 0);
    unsetenv("QFUSE_CACHE_READONLY");
    expect_run(r, 0, "warm: sm_90a, 1 variant: all already cached", NULL);
    /* the cached one is not named; three missing ones are, then the rest counted */
    assert_int_equal(qf_test_count_substr(r2.err, "not cached: qf_fp8_delayed_scale_update"), 0);
    assert_int_equal(qf_test_count_substr(r2.err, "not cached: qf_fp8_delayed_quant_weight_"), 3);
    snprintf(want, sizeof want, "and %d more not cached", n_weights - 3);
    assert_non_null(strstr(r2.err, want));
    snprintf(want, sizeof want, "%d of %d variants for sm_90a are not cached", n_weights,
             n_weights + 1);
    expect_run(r2, 1, NULL, want);
    assert_int_equal(count_files(fx, ".cubin"), 1);
    /* nor do clear and prune write it */
    setenv("QFUSE_CACHE_READONLY", "1", 1);
    r = run_tool(fx, "clear");
    unsetenv("QFUSE_CACHE_READONLY");
    expect_run(r, 1, NULL, "clear: QFUSE_CACHE_READONLY is on");
    assert_int_equal(count_files(fx, ".cubin"), 1);
}

/* `qfuse-cache --dir dir warm --arch sm_90 --kernel kernel` run from fx->root; *made: what dir
 * (relative, under fx->root) is afterwards: 1 a directory, 0 something else, -1 nothing. */
static result warm_in_root(const fixture *fx, const char *dir, const char *kernel, int *made) {
    char cwd[PATH_MAX];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(fx->root), 0);
    result r = run_tool_env(fx, (const char *const[]){"--dir", dir, "warm", "--arch", "sm_90",
                                                       "--kernel", kernel, NULL},
                            0);
    struct stat st;
    *made = lstat(dir, &st) != 0 ? -1 : S_ISDIR(st.st_mode) ? 1 : 0;
    assert_int_equal(chdir(cwd), 0);
    return r;
}

/* A relative --dir is the directory of that name under the working directory (the run's own
 * QFUSE_CACHE_DIR is made absolute), not an error about QFUSE_CACHE_DIR. */
static void test_relative_dir_option(void **state) {
    int made = 0;
    result r = warm_in_root(*state, "rel", "qf_fp8_delayed_scale_update", &made);
    expect_run(r, 0, "1 compiled", NULL);
    assert_int_equal(made, 1);
}

/* A warm with nothing to compile (no kernel matches) leaves no cache directory behind. */
static void test_warm_nothing_makes_no_dir(void **state) {
    int made = 0;
    result r = warm_in_root(*state, "none", "no_kernel_is_named_so", &made);
    expect_run(r, 1, NULL, "no kernel of the selected recipes matches the --kernel patterns "
                           "(kernel names are qf_<recipe>_<op>");
    assert_int_equal(made, -1);
}

/* prune --older-than 0s removes every entry, however young. */
static void test_prune_zero_removes_all(void **state) {
    fixture *fx = *state;
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_fp8_delayed_scale_update"),
               0, "1 compiled", NULL);
    expect_run(run_tool(fx, "prune", "--older-than", "0s"), 0, "removed 1 entry", NULL);
    assert_int_equal(count_files(fx, ".cubin"), 0);
}

/* A recipe file outside the tree warms without a rebuild: its kernels compile under its own
 * name; a second warm finds them cached; a bad file is a usage error naming the field. */
static void test_warm_recipe_file(void **state) {
    fixture *fx = *state;
    const char *path = qf_test_dir_write(fx->root, "user_fp8.lua",
                                         "return {family = 'fp8_delayed', format = 'e4m3', "
                                         "margin = 2}\n");
    const char *bad = qf_test_dir_write(fx->root, "bad_fp8.lua",
                                        "return {family = 'fp8_delayed', margin = 40}\n");
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "*scale_update", path), 0,
               "warm: sm_90a, 1 variant: 1 compiled", NULL);
    assert_int_equal(count_files(fx, "qf_user_fp8_scale_update"), 1);
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "*scale_update", path), 0,
               "0 compiled, 1 already cached", NULL);
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", bad), 1, NULL,
               "field 'margin' (value 40 out of range 0..32)");
    /* a file of a built-in recipe's name: its kernels have the same names; with the same fields
     * (the defaults are the built-in's) they are the same kernels, compiled once; with another
     * margin, other kernels, both compiled */
    char same[4096 + 16], other[4096 + 16];
    snprintf(same, sizeof same, "%s/same", fx->root);
    snprintf(other, sizeof other, "%s/other", fx->root);
    assert_int_equal(mkdir(same, 0755), 0);
    assert_int_equal(mkdir(other, 0755), 0);
    const char *twin =
        qf_test_dir_write(same, "fp8_delayed.lua", "return {family = 'fp8_delayed'}\n");
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "*delayed_scale_update",
                        "fp8_delayed", twin),
               0, "warm: sm_90a, 1 variant:", NULL);
    twin = qf_test_dir_write(other, "fp8_delayed.lua",
                             "return {family = 'fp8_delayed', margin = 1}\n");
    char from[4096 + 64]; /* the progress line of the file's kernel names the file */
    snprintf(from, sizeof from, "compiled qf_fp8_delayed_scale_update from %s", twin);
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "*delayed_scale_update",
                        "fp8_delayed", twin),
               0, "warm: sm_90a, 2 variants:", from);
}

/* warm compiles a generated GEMM only for the architectures its family's row runs it on: the
 * MXFP8 GEMM for sm_90, not for sm_100 (cuBLASLt's VEC32_UE8M0 there). */
static void test_warm_gemm_by_arch(void **state) {
    fixture *fx = *state;
    /* the whole module and its staged instance (kernel_key.h) */
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_mxfp8_gemm", "mxfp8"), 0,
               "warm: sm_90a, 2 variants: 2 compiled", NULL);
    expect_run(run_tool(fx, "warm", "--arch", "sm_100", "--kernel", "qf_mxfp8_gemm", "mxfp8"), 1,
               NULL, "the matching GEMM kernels do not run on sm_100 (the runtime uses cuBLASLt");
    /* an sm_100 entry of that GEMM, under the key the runtime would use, is stale: on sm_100 the
     * runtime calls cuBLASLt and never asks for it */
    const qf_kernel_entry *k = NULL;
    for (int i = 0; i < qf_kernel_count; i++)
        if (strcmp(qf_kernels[i].name, "qf_mxfp8_gemm") == 0)
            k = &qf_kernels[i];
    assert_non_null(k);
    const qf_kernel_instance inst = qf_kernel_instance_default(k);
    char key[QF_KEY_HEX_LEN + 1];
    qf_kernel_key(k->recipe, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, 100, key);
    unsigned char payload[64] = {1};
    setenv("QFUSE_CACHE_DIR", fx->dir, 1);
    qf_cache_reset();
    assert_int_equal(qf_cache_store(k->name, key, 100, payload, sizeof payload), QF_OK);
    unsetenv("QFUSE_CACHE_DIR");
    qf_cache_reset();
    result r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, "  ok\n"), 2);    /* the sm_90 ones */
    assert_int_equal(qf_test_count_substr(r.out, "  stale\n"), 1); /* the sm_100 one */
    assert_int_equal(qf_test_count_substr(r.out, "staged: no GEMM kernel"), 1);
    expect_run(r, 0, "3 entries", NULL);    /* several --kernel patterns: any may match */
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--kernel", "qf_mxfp8_gemm", "--kernel",
                        "qf_mxfp8_scale_update", "--kernel", "qf_fp8_delayed_scale_update",
                        "mxfp8", "fp8_delayed"),
               0, "3 variants: 1 compiled, 2 already cached", NULL);
}

/* On sm_100 the runtime multiplies NVFP4 with cuBLASLt but reads its alpha from the module's
 * staged instance: warm compiles that instance only, and list calls it ok. */
static void test_warm_gemm_staged_on_sm100(void **state) {
    fixture *fx = *state;
    expect_run(run_tool(fx, "warm", "--arch", "sm_100", "--kernel", "qf_nvfp4_gemm", "nvfp4"), 0,
               "warm: sm_100, 1 variant: 1 compiled", "(staged: no GEMM kernel)");
    result r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, "staged: no GEMM kernel  sm_100"), 1);
    assert_int_equal(qf_test_count_substr(r.out, "  ok\n"), 1);
    expect_run(r, 0, "1 entry", NULL);
}

/* A norm backward's two instances (gamma in x's dtype, gamma fp32): warm's progress lines and
 * list's INSTANCE column tell them apart (warm's progress goes to stderr). */
static void test_warm_norm_backward_instances(void **state) {
    fixture *fx = *state;
    result r = run_tool(fx, "warm", "--arch", "sm_90", "--jobs", "2", "--kernel",
                        "qf_mxfp8_nbwd_layernorm_bf16", "mxfp8");
    assert_int_equal(qf_test_count_substr(r.err, "qf_mxfp8_nbwd_layernorm_bf16 (gamma bf16)"), 1);
    assert_int_equal(qf_test_count_substr(r.err, "qf_mxfp8_nbwd_layernorm_bf16 (gamma fp32)"), 1);
    expect_run(r, 0, "2 variants: 2 compiled", NULL);
    r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, "qf_mxfp8_nbwd_layernorm_bf16  gamma bf16  "), 1);
    assert_int_equal(qf_test_count_substr(r.out, "qf_mxfp8_nbwd_layernorm_bf16  gamma fp32  "), 1);
    expect_run(r, 0, "2 entries", NULL);
}

/* A named architecture is compiled for, whatever the machine has. */
static void test_warm_named_arch(void **state) {
    fixture *fx = *state;
    expect_run(run_tool(fx, "warm", "--arch", "sm_100", "--kernel", "*fp8_delayed_scale_upd?te"),
               0, "warm: sm_100, 1 variant: 1 compiled", NULL);
    expect_run(run_tool(fx, "list"), 0, "sm_100 ", NULL);
}

/* An entry written "in the future" (a clock set wrong) is listed with the age "future", not 0s;
 * prune keeps it as a young entry. A large entry's size is given in G. */
/* list on a directory writable by every user says the runtime does not use it. */
static void test_list_world_writable(void **state) {
    fixture *fx = *state;
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    assert_int_equal(chmod(fx->dir, 0777), 0);
    expect_run(run_tool(fx, "list"), 0, "0 entries", "writable by every user (mode 0777)");
    assert_int_equal(chmod(fx->dir, 0700), 0);
    result r = run_tool(fx, "list");
    assert_null(strstr(r.err, "writable by every user"));
    expect_run(r, 0, "0 entries", NULL);
}

static void test_list_future_age(void **state) {
    fixture *fx = *state;
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    make_file(fx, "qf_fp8_delayed_scale_update." KEY_X ".cubin", "from tomorrow", -86400);
    result r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, " future "), 1);
    assert_int_equal(qf_test_count_substr(r.out, " 0s "), 0);
    expect_run(r, 0, "1 entry, ", NULL);
    /* sizes from a GiB on in G (a sparse file: no disk used) */
    const char *big = qf_test_dir_write(fx->dir, "k." KEY_X ".cubin", "");
    assert_int_equal(truncate(big, 3LL << 30), 0);
    r = run_tool(fx, "list");
    assert_int_equal(qf_test_count_substr(r.out, " 3.0G "), 2); /* its row and the total */
    expect_run(r, 0, "2 entries, ", NULL);
    assert_int_equal(unlink(big), 0);
    expect_run(run_tool(fx, "prune", "--older-than", "1s"), 0, "removed 0 entries", NULL);
}

/* list says what is wrong with an entry that would not load, and which valid entries this build
 * would never ask for (another build's keys, unknown kernels). */
static void test_list_invalid_and_stale(void **state) {
    fixture *fx = *state;
    unsigned char payload[100] = {1, 2, 3};
    char garbage[121], unknown[64];
    memset(garbage, 'x', sizeof garbage - 1);
    garbage[sizeof garbage - 1] = '\0'; /* longer than a header: rejected for its magic */
    snprintf(unknown, sizeof unknown, "%s", "no_such_kernel");
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    make_file(fx, "qf_fp8_delayed_scale_update.ffffffffffffffffffffffffffffffff.cubin", garbage,
              0);
    setenv("QFUSE_CACHE_DIR", fx->dir, 1);
    qf_cache_reset();
    assert_int_equal(qf_cache_store("qf_fp8_delayed_scale_update", KEY_X, 90, payload, 100),
                     QF_OK);
    assert_int_equal(qf_cache_store("no_such_kernel", KEY_X, 90, payload, 100), QF_OK);
    /* an entry whose header names an architecture no GPU has (a corrupt arch field, offset 44) */
    assert_int_equal(qf_cache_store("qf_fp8_delayed_quant_weight_bf16", KEY_X, 90, payload, 100),
                     QF_OK);
    char odd[PATH_MAX + 128];
    snprintf(odd, sizeof odd, "%s/qf_fp8_delayed_quant_weight_bf16." KEY_X ".cubin", fx->dir);
    FILE *f = fopen(odd, "r+b");
    assert_non_null(f);
    const int32_t bad_arch = -91;
    assert_int_equal(fseek(f, 44, SEEK_SET), 0);
    assert_int_equal(fwrite(&bad_arch, sizeof bad_arch, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    unsetenv("QFUSE_CACHE_DIR");
    qf_cache_reset();
    result r = run_tool(fx, "list");
    assert_null(strstr(r.out, "sm_-")); /* that entry's ARCH is "?", not the number */
    assert_non_null(strstr(r.out, "invalid: the header names no GPU architecture (-91)"));
    const char *bad = strstr(r.out, "invalid: bad magic");
    assert_non_null(bad);
    const char *line = bad;
    while (line > r.out && line[-1] != '\n')
        line--;
    assert_non_null(strstr(line, " ?   ")); /* no architecture read from a foreign header */
    assert_true(strstr(line, "sm_") == NULL || strstr(line, "sm_") > bad);
    assert_int_equal(qf_test_count_substr(r.out, "  stale\n"), 1);   /* a key no longer asked for */
    assert_int_equal(qf_test_count_substr(r.out, "  foreign\n"), 1); /* a kernel of no recipe here */
    /* the unknown kernel's row: recipe "?", then its name (columns padded to their widest) */
    const char *name = strstr(r.out, unknown);
    assert_non_null(name);
    const char *p = name;
    while (p > r.out && p[-1] == ' ')
        p--;
    assert_true(p > r.out + 2 && p[-1] == '?' && p[-2] == ' ' && name - p >= 2);
    expect_run(r, 0, "4 entries", NULL);
}

/* Every row of list, the header's included, has its columns at the same places, however long
 * the texts: some INSTANCE texts of MXFP8's norm quantizer are longer than 40 characters. */
static void test_list_columns_aligned(void **state) {
    fixture *fx = *state;
    expect_run(run_tool(fx, "warm", "--arch", "sm_90", "--jobs", "2", "--kernel",
                        "qf_mxfp8_nq_layernorm_bf16", "mxfp8"),
               0, "0 failed", NULL);
    result r = run_tool(fx, "list");
    assert_non_null(strstr(r.out, "  rowwise+columnwise, gamma fp32, swizzled scales  "));
    assert_non_null(strstr(r.out, "  rowwise, gamma fp32, compact scales  "));
    const char *state_col = strstr(r.out, "STATE\n"); /* the last column's start, in the header */
    assert_non_null(state_col);
    const long at = (long)(state_col - r.out);
    int rows = 0;
    for (const char *line = strchr(r.out, '\n') + 1; *line && strstr(line, " ok\n");
         line = strchr(line, '\n') + 1, rows++) {
        const char *end = strchr(line, '\n');
        assert_true(end - line == at + 2); /* "ok" starts where "STATE" does */
    }
    assert_true(rows >= 3);
    expect_run(r, 0, "entries", NULL);
}

/* A symbolic link named like an entry is listed as invalid and removed by clear (its target
 * stays); a directory named like one is listed and left alone, without failing clear. */
static void test_symlink_and_directory_entries(void **state) {
    fixture *fx = *state;
    char link[PATH_MAX + 64], sub[PATH_MAX + 64];
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    const char *target = qf_test_dir_write(fx->root, "target", "not a cache entry\n");
    snprintf(link, sizeof link, "%s/qf_x." KEY_X ".cubin", fx->dir);
    snprintf(sub, sizeof sub, "%s/qf_y." KEY_X ".cubin", fx->dir);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    result r = run_tool(fx, "list");
    assert_non_null(strstr(r.out, "not a regular file (a symbolic link)"));
    assert_non_null(strstr(r.out, "not a regular file (a directory)"));
    expect_run(r, 0, "2 entries", NULL);
    expect_run(run_tool(fx, "clear"), 0, "removed 1 entry", "leaving");
    struct stat st;
    assert_int_equal(lstat(link, &st), -1);
    assert_int_equal(stat(target, &st), 0);
    assert_int_equal(stat(sub, &st), 0);
}

/* clear and prune on a directory that does not exist say so and create nothing. */
static void test_remove_does_not_create(void **state) {
    fixture *fx = *state;
    struct stat st;
    expect_run(run_tool(fx, "clear"), 0, "nothing to remove", NULL);
    expect_run(run_tool(fx, "prune", "--older-than", "1d"), 0, "does not exist", NULL);
    assert_int_equal(stat(fx->dir, &st), -1);
}

/* An explicit --dir is used even when QFUSE_DISABLE_DISK_CACHE is set. */
static void test_dir_option_overrides_disable(void **state) {
    fixture *fx = *state;
    expect_run(run_tool_env(fx, (const char *const[]){"--dir", fx->dir, "list", NULL}, 1), 0,
               "0 entries", NULL);
}

/* With the disk cache disabled there is nothing to warm or list: exit 1 and say why. */
static void test_warm_without_disk_cache(void **state) {
    fixture *fx = *state;
    expect_run(run_tool_env(fx, (const char *const[]){"warm", "--arch", "sm_90", NULL}, 1), 1,
               NULL, "the disk cache is disabled (QFUSE_DISABLE_DISK_CACHE=1)");
    expect_run(run_tool_env(fx, (const char *const[]){"list", NULL}, 1), 1, NULL,
               "the disk cache is disabled");
}

/* =====================================================================} */

/* The tool sits in the build directory, one level above this binary's tests/ directory. */
static int find_tool(void) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *tests_dir = dirname(self);
    snprintf(g_tool, sizeof g_tool, "%s/../qfuse-cache", tests_dir);
    return access(g_tool, X_OK);
}

int main(void) {
    if (find_tool() != 0) {
        fprintf(stderr, "test_cache_tool: %s not found; build it first (make)\n", g_tool);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        T(test_help),
        T(test_bad_arguments),
        T(test_warm_list_prune_clear),
        T(test_warm_recipe_file),
        T(test_warm_gemm_by_arch),
        T(test_warm_gemm_staged_on_sm100),
        T(test_warm_norm_backward_instances),
        T(test_prune_zero_removes_all),
        T(test_warm_read_only),
        T(test_relative_dir_option),
        T(test_warm_nothing_makes_no_dir),
        T(test_warm_named_arch),
        T(test_list_invalid_and_stale),
        T(test_list_world_writable), T(test_list_future_age),
        T(test_list_columns_aligned),
        T(test_warm_without_disk_cache),
        T(test_symlink_and_directory_entries),
        T(test_remove_does_not_create),
        T(test_dir_option_overrides_disable),
    };
    return RUN_CACHE_TESTS("cache_tool", tests);
}
