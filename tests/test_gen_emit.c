/* test_gen_emit.c: qfuse-gen runs (gen_emit.c): template errors that stop a run before anything is
 * written, byte-for-byte reproducible output, banners, stale kernels removed, the rendered sources
 * of each family, and agreement of out/ with the registry compiled into libqfuse. */
#include "test_gen_util.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/wait.h>

#define QF_BANNER_END " \xe2\x80\x94 do not edit */"

/* ========================================================================= helpers */

static int qf_test_starts(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Asserts that dir/name does not exist. */
static void qf_test_absent(const char *dir, const char *name) {
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_not_equal(stat(path, &st), 0);
}

/* Runs qfuse-gen with args and asserts that it fails (exit 1) with the one message
 * "qfuse-gen: <dir>/<what>" on stderr; with unwritten not NULL, that dir/unwritten does not
 * exist (nothing written). */
static void qf_test_cli_refused(const char *const *args, const char *dir, const char *what,
                                const char *unwritten) {
    char *out, *err, expect[1024];
    assert_int_equal(qf_test_cli(&out, &err, args), 1);
    snprintf(expect, sizeof expect, "qfuse-gen: %s/%s\n", dir, what);
    assert_string_equal(err, expect);
    assert_string_equal(out, "");
    free(out), free(err);
    if (unwritten)
        qf_test_absent(dir, unwritten);
}

/* ========================================================================= generator runs */

static void test_gen_template_unfilled(void **state) {
    const qf_test_dir *d = *state;
    char nq[512];
    snprintf(nq, sizeof nq, "%s// __ROWS__ per block\n", qf_test_nq_ok);
    qf_test_templates(d->path, nq);
    const char *args[] = {"--check", "--templates", d->path, "recipes/fp8_delayed.lua", NULL};
    qf_test_cli_refused(args, d->path,
                        "smxx_fp8_norm_quantize.cu:2: placeholder '__ROWS__' has no value", NULL);
}

/* Every templates/qf_dev_*.cuh is a shared header: one holding a placeholder stops the run before
 * anything is written, naming it. */
static void test_gen_header_placeholder(void **state) {
    const qf_test_dir *d = *state;
    qf_test_templates(d->path, qf_test_nq_ok);
    qf_test_dir_write(d->path, "qf_dev_bad.cuh",
                      "namespace {\nconstexpr int kT = __TILE_M__;\n}\n");
    const char *args[] = {"-o", d->path, "--templates", d->path, "recipes/fp8_delayed.lua", NULL};
    qf_test_cli_refused(args, d->path,
                        "qf_dev_bad.cuh:2: placeholder '__TILE_M__' in a shared header (headers "
                        "take template parameters; only templates have placeholders)",
                        "registry.c");
}

/* A template or shared header that is empty, or holds a NUL byte (NVRTC would see its text end
 * there), stops the run before anything is written, naming the file and what is wrong. */
static void test_gen_text_empty_or_nul(void **state) {
    const qf_test_dir *d = *state;
    const char *args[] = {"-o", d->path, "--templates", d->path, "--include", d->path,
                          "recipes/fp8_delayed.lua", NULL};
    qf_test_templates(d->path, "");
    qf_test_dir_write(d->path, "qf_formats.h", "#pragma once\n");
    qf_test_cli_refused(args, d->path, "smxx_fp8_norm_quantize.cu: template is empty",
                        "registry.c");
    qf_test_templates(d->path, qf_test_nq_ok);
    char path[512];
    qf_test_write(d->path, "qf_formats.h", "a\0b", 3, path);
    qf_test_cli_refused(args, d->path, "qf_formats.h: header contains a NUL byte", "registry.c");
    qf_test_dir_write(d->path, "qf_formats.h", "");
    qf_test_cli_refused(args, d->path, "qf_formats.h: header is empty", "registry.c");
}

static void test_gen_template_unused_value(void **state) {
    const qf_test_dir *d = *state;
    qf_test_templates(d->path, "void __KERNEL_NAME__() { int a[] = {__FAMILY__, __NORM__, "
                               "__ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __OUT_DTYPE__, "
                               "__BLOCK_THREADS__}; }\n");
    const char *args[] = {"-o", d->path, "--templates", d->path, "recipes/fp8_delayed.lua", NULL};
    qf_test_cli_refused(args, d->path,
                        "smxx_fp8_norm_quantize.cu: value for placeholder '__TILE_M__' is never "
                        "used",
                        "registry.c");
}

/* ---- tree comparison */

#define QF_TEST_TREE_MAX 128

typedef struct qf_test_tree {
    int n;
    char rel[QF_TEST_TREE_MAX][160];
} qf_test_tree;

static qf_test_tree *qf_test_tree_cur;
static size_t qf_test_tree_root;

static int qf_test_tree_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    if (flag == FTW_F && qf_test_tree_cur->n < QF_TEST_TREE_MAX)
        snprintf(qf_test_tree_cur->rel[qf_test_tree_cur->n++], 160, "%s", p + qf_test_tree_root);
    return 0;
}

static int qf_test_strcmp(const void *a, const void *b) {
    return strcmp(a, b);
}

static void qf_test_list(const char *dir, qf_test_tree *t) {
    t->n = 0;
    qf_test_tree_cur = t;
    qf_test_tree_root = strlen(dir) + 1;
    assert_int_equal(nftw(dir, qf_test_tree_entry, 16, FTW_PHYS), 0);
    qsort(t->rel, (size_t)t->n, sizeof t->rel[0], qf_test_strcmp);
}

/* Asserts that the trees under dir1 and dir2 hold the same n files, byte for byte; with leak
 * not NULL, that no file holds that string either. */
static void qf_test_same_trees(const char *dir1, const char *dir2, int n, const char *leak) {
    static qf_test_tree t1, t2;
    char p1[600], p2[600];
    qf_test_list(dir1, &t1);
    qf_test_list(dir2, &t2);
    assert_int_equal(t1.n, n);
    assert_int_equal(t1.n, t2.n);
    for (int i = 0; i < t1.n; i++) {
        assert_string_equal(t1.rel[i], t2.rel[i]);
        snprintf(p1, sizeof p1, "%s/%s", dir1, t1.rel[i]);
        snprintf(p2, sizeof p2, "%s/%s", dir2, t2.rel[i]);
        size_t n1 = 0, n2 = 0;
        char *a = qf_test_read(p1, &n1), *b = qf_test_read(p2, &n2);
        assert_non_null(a);
        assert_non_null(b);
        if (n1 != n2 || memcmp(a, b, n1) != 0)
            fail_msg("%s differs between runs", t1.rel[i]);
        if (leak)
            assert_null(strstr(a, leak));
        free(a), free(b);
    }
}

/* Two runs into two dirs give identical trees, byte for byte, holding only the expected files. */
static void test_gen_reproducible(void **state) {
    (void)state;
    qf_test_dir d1, d2;
    qf_test_dir_make_gen(&d1);
    qf_test_dir_make_gen(&d2);
    qf_test_generate(d1.path);
    qf_test_generate(d2.path);
    /* no absolute (temp) path leaks into the output */
    qf_test_same_trees(d1.path, d2.path, 22 + 18 + 4, d1.path);
    qf_test_dir_remove(d1.path);
    qf_test_dir_remove(d2.path);
}

/* Every file opens with the banner; manifest.json carries it in "generated_by". */
#define QF_BANNER_START "Generated by gen/qfuse-gen from recipes/fp8_delayed.lua + "

/* Asserts the banner of one generated file (rel under the output dir). */
static void qf_test_banner(const char *rel, char *text) {
    if (strcmp(rel, "manifest.json") == 0) {
        cJSON *j = cJSON_Parse(text);
        assert_non_null(j);
        const char *g = cJSON_GetStringValue(cJSON_GetObjectItem(j, "generated_by"));
        assert_non_null(g);
        assert_true(qf_test_starts(g, QF_BANNER_START));
        assert_non_null(strstr(g, " \xe2\x80\x94 do not edit"));
        cJSON_Delete(j);
        return;
    }
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_true(qf_test_starts(text, "/* " QF_BANNER_START));
    size_t n = strlen(text), m = strlen(QF_BANNER_END);
    assert_true(n > m && strcmp(text + n - m, QF_BANNER_END) == 0);
    if (!qf_test_starts(rel, "kernels/"))
        return;
    /* then the template's constants, then the #line back to the template */
    const char *line = nl + 1;
    int defines = 0;
    for (; qf_test_starts(line, "#define __"); line = strchr(line, '\n') + 1)
        defines++;
    assert_true(defines >= 2); /* __KERNEL_NAME__ and __BLOCK_THREADS__ at least */
    assert_true(qf_test_starts(line, "#line 1 \"templates/smxx_fp8_") ||
                qf_test_starts(line, "#line 1 \"templates/smxx_norm_backward.cu") ||
                qf_test_starts(line, "#line 1 \"templates/smxx_dbias.cu") ||
                qf_test_starts(line, "#line 1 \"templates/smxx_activation.cu"));
}

/* Every file opens with the banner; manifest.json carries it in "generated_by". */
static void test_gen_banners(void **state) {
    const qf_test_dir *d = *state;
    static qf_test_tree t;
    char p[512];
    qf_test_generate(d->path);
    qf_test_list(d->path, &t);
    assert_int_equal(t.n, 22 + 18 + 4); /* kernels (forward, backward), other files */
    for (int i = 0; i < t.n; i++) {
        snprintf(p, sizeof p, "%s/%s", d->path, t.rel[i]);
        char *text = qf_test_read(p, NULL);
        assert_non_null(text);
        qf_test_banner(t.rel[i], text);
        free(text);
    }
}

/* A stale kernels/qf_*.cu is removed by the next run; other files under out/ are left alone, and
 * so is what is not a regular file under such a name (a directory, empty or not). */
static void test_gen_stale_removed(void **state) {
    const qf_test_dir *d = *state;
    char kdir[512], keep[600], sub[600];
    struct stat st;
    snprintf(kdir, sizeof kdir, "%s/kernels", d->path);
    assert_int_equal(mkdir(kdir, 0777), 0);
    qf_test_dir_write(kdir, "qf_gone_kernel.cu", "x");
    snprintf(keep, sizeof keep, "%s", qf_test_dir_write(d->path, "notes.txt", "x"));
    snprintf(sub, sizeof sub, "%s/qf_a_dir.cu", kdir);
    assert_int_equal(mkdir(sub, 0777), 0);
    qf_test_generate(d->path);
    qf_test_absent(kdir, "qf_gone_kernel.cu");
    assert_int_equal(stat(keep, &st), 0);
    assert_int_equal(stat(sub, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    qf_test_dir_write(sub, "inside", "x"); /* not empty: the run still succeeds */
    qf_test_generate(d->path);
    assert_int_equal(stat(sub, &st), 0);
}

/* An output folder that exists but cannot take new files, beside a kernels/ folder that can, is
 * refused before anything is written (the kernels used to be written, then registry.c failed).
 * Run by a user without the folder's write permission: nobody (uid 65534) in a child process
 * when the test runs as root, which writes anywhere. */
static void test_gen_unwritable_dir(void **state) {
    const qf_test_dir *d = *state;
    char kdir[512];
    snprintf(kdir, sizeof kdir, "%s/kernels", d->path);
    assert_int_equal(mkdir(kdir, 0777), 0);
    assert_int_equal(chmod(kdir, 0777), 0);
    assert_int_equal(chmod(d->path, 0755), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(3);
        char *out, *err;
        const char *args[] = {"-o", d->path, "recipes/fp8_delayed.lua", NULL};
        const int rc = qf_test_cli(&out, &err, args);
        const int said = strstr(err, "cannot take new files") && strstr(err, "nothing was written");
        DIR *k = opendir(kdir);
        int files = 0;
        for (struct dirent *de; k && (de = readdir(k)) != NULL;)
            files += de->d_name[0] != '.';
        if (k)
            closedir(k);
        _exit(rc == 1 && said && files == 0 ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 3)
        skip(); /* no nobody user to become */
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Generates every recipe the registry was built from into a fresh outdir (default templates). */
static void qf_test_generate_registry(const char *outdir) {
    const char *args[16] = {"-o", outdir};
    char *out, *err;
    assert_true(qf_recipe_count > 0 && qf_recipe_count <= 12);
    for (int i = 0; i < qf_recipe_count; i++)
        args[2 + i] = qf_recipes[i].file;
    int rc = qf_test_cli(&out, &err, args);
    if (rc != 0)
        fail_msg("qfuse-gen failed: %s", err);
    free(out), free(err);
}

/* Kernel k of the registry equals kernels/<name>.cu under dir and its manifest entry j. */
static void qf_test_registry_kernel(const char *dir, const qf_kernel_entry *k, const cJSON *j) {
    char p[512], key[QF_KEY_HEX_LEN + 1];
    snprintf(p, sizeof p, "%s/kernels/%s.cu", dir, k->name);
    char *src = qf_test_read(p, NULL), *text = qf_kernel_text(k);
    assert_non_null(src);
    assert_non_null(text);
    assert_string_equal(src, text); /* prelude + template = the readable kernels/<name>.cu */
    assert_true(qf_test_starts(src, k->prelude));
    assert_string_equal(src + strlen(k->prelude), k->tpl->text);
    assert_string_equal(k->tpl->file, qf_test_json_str(j, "template"));
    free(src), free(text);
    qf_kernel_instance inst = qf_kernel_instance_default(k);
    qf_kernel_key(k->recipe, k, &inst, qf_nvrtc_header_names, qf_nvrtc_headers,
                  qf_nvrtc_header_count, 90, key);
    assert_string_equal(qf_test_json_str(j, "name"), k->name);
    assert_string_equal(qf_test_json_str(j, "key_sm90"), key);
}

/* The registry's NVRTC headers are runtime/qf_formats.h and every templates/qf_dev_*.cuh, sorted
 * by name, byte for byte. */
static void qf_test_registry_headers(void) {
    int n_dev = 0;
    DIR *dir = opendir("templates");
    assert_non_null(dir);
    for (struct dirent *de; (de = readdir(dir)) != NULL;)
        n_dev += qf_test_starts(de->d_name, "qf_dev_") && strstr(de->d_name, ".cuh") != NULL;
    closedir(dir);
    assert_int_equal(qf_nvrtc_header_count, 1 + n_dev);
    for (int i = 0; i < qf_nvrtc_header_count; i++) {
        char p[512];
        const char *name = qf_nvrtc_header_names[i];
        if (i > 0)
            assert_true(strcmp(qf_nvrtc_header_names[i - 1], name) < 0);
        snprintf(p, sizeof p, "%s/%s", strcmp(name, "qf_formats.h") ? "templates" : "runtime",
                 name);
        char *hdr = qf_test_read(p, NULL);
        assert_non_null(hdr);
        assert_string_equal(qf_nvrtc_headers[i], hdr);
        free(hdr);
    }
}

/* Each template is stored once, byte for byte, and every kernel points at one of them. */
static void qf_test_registry_templates(void) {
    assert_true(qf_template_count > 0);
    for (int i = 0; i < qf_template_count; i++) {
        char *tpl = qf_test_read(qf_templates[i].file, NULL);
        assert_non_null(tpl);
        assert_string_equal(qf_templates[i].text, tpl);
        free(tpl);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(qf_templates[i].file, qf_templates[j].file);
    }
    for (int k = 0; k < qf_kernel_count; k++)
        assert_true(qf_kernels[k].tpl >= qf_templates &&
                    qf_kernels[k].tpl < qf_templates + qf_template_count);
}

/* out/ as built into libqfuse agrees with a fresh run over the same recipes: kernel sources, the
 * NVRTC header, and the fusion keys of the manifest equal the runtime's qf_kernel_key over the
 * registry. */
static void test_gen_matches_registry(void **state) {
    const qf_test_dir *d = *state;
    char p[512];
    qf_test_generate_registry(d->path);
    qf_test_registry_headers();
    qf_test_registry_templates();
    /* each template and header once, a short prelude per kernel: well under 1 MiB (the full
     * sources, one per kernel, are several MiB) */
    struct stat st;
    snprintf(p, sizeof p, "%s/registry.c", d->path);
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_size < (1 << 20));
    snprintf(p, sizeof p, "%s/manifest.json", d->path);
    char *text = qf_test_read(p, NULL);
    cJSON *root = cJSON_Parse(text), *rs = cJSON_GetObjectItem(root, "recipes"), *r;
    free(text);
    assert_int_equal(cJSON_GetArraySize(rs), qf_recipe_count);
    int k = 0;
    cJSON_ArrayForEach(r, rs) {
        cJSON *j;
        cJSON_ArrayForEach(j, cJSON_GetObjectItem(r, "kernels")) {
            assert_true(k < qf_kernel_count);
            qf_test_registry_kernel(d->path, &qf_kernels[k++], j);
        }
    }
    assert_int_equal(k, qf_kernel_count);
    cJSON_Delete(root);
}

/* ========================================================================= mxfp8 runs */

/* Two runs give byte-identical trees of 2 x (22 + 18) kernels + 4 files; the stubs are filled
 * in. */
static void test_gen_mxfp8_reproducible(void **state) {
    (void)state;
    qf_test_dir d1, d2;
    char p1[600], p2[600];
    qf_test_dir_make_gen(&d1);
    qf_test_dir_make_gen(&d2);
    qf_test_mx_generate(d1.path);
    qf_test_mx_generate(d2.path);
    snprintf(p1, sizeof p1, "%s/out", d1.path);
    snprintf(p2, sizeof p2, "%s/out", d2.path);
    qf_test_same_trees(p1, p2, 2 * (22 + 18) + 4, NULL);
    qf_test_dir_remove(d1.path);
    qf_test_dir_remove(d2.path);
}

/* A text that a generated file (under out/) must hold. */
typedef struct qf_test_source {
    const char *file, *has;
} qf_test_source;

/* Asserts that each of the n files of s under dir/out holds its text. */
static void qf_test_sources_have(const char *dir, const qf_test_source *s, size_t n) {
    char p[600];
    for (size_t i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/out/%s", dir, s[i].file);
        char *text = qf_test_read(p, NULL);
        assert_non_null(text);
        if (!strstr(text, s[i].has))
            fail_msg("%s lacks '%s'", s[i].file, s[i].has);
        free(text);
    }
}

/* The rendered stubs: BLOCK_2D only in the 2D recipe's weight quantizers; shapes.c's formulas. */
static const qf_test_source qf_test_mx_sources[] = {
    {"kernels/qf_mxfp8_2d_quant_weight_bf16.cu",
     "\n#define __KERNEL_NAME__ qf_mxfp8_2d_quant_weight_bf16\n#define __BLOCK_THREADS__ 256\n"
     "#define __NORM__ QF_NORM_NONE\n#define __ZERO_CENTERED_GAMMA__ 0\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __OUT_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 1\n"
     "#define __TILE_M__ 32\n#line 1 \"templates/smxx_mxfp8_norm_quantize.cu\"\n"
     "void __KERNEL_NAME__() { int a[] = {__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, "
     "__OUT_DTYPE__, __SCALE_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"kernels/qf_mxfp8_quant_weight_bf16.cu",
     "\n#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_2d_quant_grad_fp16.cu",
     "\n#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_2d_nq_rmsnorm_zcg_fp32.cu",
     "\n#define __NORM__ QF_NORM_RMSNORM\n#define __ZERO_CENTERED_GAMMA__ 1\n"
     "#define __IN_DTYPE__ QF_DTYPE_FP32\n#define __OUT_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __SCALE_ROUNDING__ QF_SCALE_ROUNDING_CEIL\n#define __BLOCK_2D__ 0\n"
     "#define __TILE_M__ 32\n#line"},
    {"kernels/qf_mxfp8_gemm.cu",
     "\n#define __KERNEL_NAME__ qf_mxfp8_gemm\n#define __BLOCK_THREADS__ 256\n"
     "#define __A_DTYPE__ QF_DTYPE_E4M3\n#define __B_DTYPE__ QF_DTYPE_E4M3\n"
     "#define __TILE_M__ 128\n#line 1 \"templates/sm90_mxfp8_gemm.cu\"\nvoid __KERNEL_NAME__() "
     "{ int a[] = {__A_DTYPE__, __B_DTYPE__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(q->M, 128), "
                 "qf_shape_roundup(qf_shape_cdiv(q->K, 32), 4)};"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(qf_shape_cdiv(q->M, 32), 4), "
                 "qf_shape_roundup(q->K, 128)};"},
    {"registry.c", ".family = QF_FAMILY_MXFP8,\n        .op = QF_OP_GEMM,"},
    {"registry.c",
     ".scale_rounding = QF_SCALE_ROUNDING_CEIL,\n        .block_2d[QF_ROLE_WEIGHT] = 1,"},
    {"registry.c",
     ".tile_m = 128,\n        .tpl = &qf_templates[0], /* templates/sm90_mxfp8_gemm.cu */\n"
     "        .entries = QF_ENTRY_BIT(QF_ENTRY_MAIN),\n        .prelude =\n"},
};

static void test_gen_mxfp8_sources(void **state) {
    const qf_test_dir *d = *state;
    qf_test_mx_generate(d->path);
    qf_test_sources_have(d->path, qf_test_mx_sources,
                         sizeof qf_test_mx_sources / sizeof qf_test_mx_sources[0]);
}

/* An MXFP8 template without __BLOCK_2D__ is refused, naming the placeholder; nothing written. */
static void test_gen_mxfp8_template_contract(void **state) {
    const qf_test_dir *d = *state;
    char outdir[512];
    qf_test_mx_templates(d->path, "void __KERNEL_NAME__() { int a[] = {__NORM__, "
                                  "__ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __OUT_DTYPE__, "
                                  "__SCALE_ROUNDING__, __BLOCK_THREADS__, __TILE_M__}; }\n");
    snprintf(outdir, sizeof outdir, "%s/out", d->path);
    const char *args[] = {"-o", outdir, "--templates", d->path, "recipes/mxfp8.lua", NULL};
    qf_test_cli_refused(args, d->path,
                        "smxx_mxfp8_norm_quantize.cu: value for placeholder '__BLOCK_2D__' is "
                        "never used",
                        "out");
}

/* ========================================================================= nvfp4 runs */

/* Without its templates the NVFP4 recipe is refused naming the missing file in its kernels'
 * order (the activation, dbias, the GEMM, the norm backward, the quantizers), and nothing is
 * written. */
static void test_gen_nvfp4_missing_template(void **state) {
    const qf_test_dir *d = *state;
    char outdir[512], what[128];
    snprintf(outdir, sizeof outdir, "%s/out", d->path);
    const char *args[] = {"-o", outdir, "--templates", d->path, QF_NV_RECIPE, NULL};
    const char *const files[] = {"smxx_activation.cu", "smxx_dbias.cu", "sm90_nvfp4_gemm.cu",
                                 "smxx_norm_backward.cu", "smxx_nvfp4_norm_quantize.cu"};
    const char *const stubs[] = {qf_test_act_stub, qf_test_dbias_stub, qf_test_nv_gemm_stub,
                                 qf_test_nbwd_stub};
    for (int i = 0; i < 5; i++) {
        snprintf(what, sizeof what, "%s: cannot open template (No such file or directory)",
                 files[i]);
        qf_test_cli_refused(args, d->path, what, "out");
        if (i < 4)
            qf_test_dir_write(d->path, files[i], stubs[i]);
    }
}

/* The rendered stubs, shapes.c's multiple-of-16 (GEMM: 32) checks and packed dims, registry.c's
 * fields. */
static const qf_test_source qf_test_nv_sources[] = {
    {"kernels/qf_nvfp4_quant_grad_bf16.cu",
     "\n#define __KERNEL_NAME__ qf_nvfp4_quant_grad_bf16\n#define __BLOCK_THREADS__ 256\n"
     "#define __NORM__ QF_NORM_NONE\n#define __ZERO_CENTERED_GAMMA__ 0\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 1\n#define __RHT_MASK__ 0xD7E8\n"
     "#define __STOCHASTIC_ROUNDING__ 1\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n"
     "#line 1 \"templates/smxx_nvfp4_norm_quantize.cu\"\nvoid __KERNEL_NAME__() { int a[] = "
     "{__NORM__, __ZERO_CENTERED_GAMMA__, __IN_DTYPE__, __RHT__, __RHT_MASK__, "
     "__STOCHASTIC_ROUNDING__, __BLOCK_2D__, __BLOCK_THREADS__, __TILE_M__}; }\n"},
    {"kernels/qf_nvfp4_nort_quant_grad_bf16.cu",
     "\n#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 0\n#define __RHT_MASK__ 0x0000\n"
     "#define __STOCHASTIC_ROUNDING__ 1\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_quant_weight_fp32.cu",
     "\n#define __IN_DTYPE__ QF_DTYPE_FP32\n#define __RHT__ 0\n#define __RHT_MASK__ 0x0000\n"
     "#define __STOCHASTIC_ROUNDING__ 0\n#define __BLOCK_2D__ 1\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_nq_layernorm_zcg_bf16.cu",
     "\n#define __NORM__ QF_NORM_LAYERNORM\n#define __ZERO_CENTERED_GAMMA__ 1\n"
     "#define __IN_DTYPE__ QF_DTYPE_BF16\n#define __RHT__ 1\n#define __RHT_MASK__ 0xD7E8\n"
     "#define __STOCHASTIC_ROUNDING__ 0\n#define __BLOCK_2D__ 0\n#define __TILE_M__ 32\n#line"},
    {"kernels/qf_nvfp4_gemm.cu",
     "\n#define __KERNEL_NAME__ qf_nvfp4_gemm\n#define __BLOCK_THREADS__ 256\n"
     "#define __TILE_M__ 128\n#line 1 \"templates/sm90_nvfp4_gemm.cu\"\n"},
    {"shapes.c", "    if (q->M % 16 != 0 || q->K % 16 != 0)\n        return -1;\n"},
    {"shapes.c", "    if (q->K % 32 != 0)\n        return -1;\n"},
    {"shapes.c", "const int64_t d[] = {q->M, qf_shape_cdiv(q->K, 2)};"},
    {"shapes.c", "const int64_t d[] = {q->K, qf_shape_cdiv(q->M, 2)};"},
    {"shapes.c", "const int64_t d[] = {qf_shape_roundup(q->K, 128), "
                 "qf_shape_roundup(qf_shape_cdiv(q->M, 16), 4)};"},
    {"shapes.c", "uint64_t bytes = dt == QF_DTYPE_E2M1 ? 1 : qf_dtype_size(dt);"},
    {"registry.c", ".rht[QF_ROLE_GRAD] = 1,\n        .rht[QF_ROLE_INPUT] = 1,\n"
                   "        .rht_seed = -1LL,\n        .sr[QF_ROLE_GRAD] = 1,\n"
                   "        .block_2d[QF_ROLE_WEIGHT] = 1,\n"},
    {"registry.c", ".family = QF_FAMILY_NVFP4,\n        .op = QF_OP_GEMM,"},
};

static void test_gen_nvfp4_sources(void **state) {
    const qf_test_dir *d = *state;
    qf_test_nv_generate(d->path);
    qf_test_sources_have(d->path, qf_test_nv_sources,
                         sizeof qf_test_nv_sources / sizeof qf_test_nv_sources[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_gen_template_unfilled),
        T(test_gen_template_unused_value),
        T(test_gen_text_empty_or_nul),
        T(test_gen_header_placeholder),
        cmocka_unit_test(test_gen_reproducible),
        T(test_gen_banners),
        T(test_gen_stale_removed),
        T(test_gen_unwritable_dir),
        T(test_gen_matches_registry),
        cmocka_unit_test(test_gen_mxfp8_reproducible),
        T(test_gen_mxfp8_sources),
        T(test_gen_mxfp8_template_contract),
        T(test_gen_nvfp4_missing_template),
        T(test_gen_nvfp4_sources),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
