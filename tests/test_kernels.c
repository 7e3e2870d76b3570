/* test_kernels.c: every generated kernel compiles with NVRTC for sm_90 and sm_100 (no GPU needed)
 * to a CUBIN with exactly the entry points the registry lists and without a ptxas "Potential
 * Performance Loss" note (such as serialized wgmma MMAs), and the fusion key of a registry
 * kernel changes with every field that changes its code (numerics 5). */
#include "test_util.h"

#include <stdio.h>

#include "kernel_key.h"
#include "registry.h"

/* ==================================================================== rows layout */

/* The rows entries' register layout (qf_dev_norm.cuh: RowsSpan, rows_vec, rows_block_first),
 * checked by NVRTC at compile time: for IT = 1, 2, 4, 8 vectors per thread, 256 threads and
 * blocks of BV = 4 (MXFP8, 16-bit x), 8, 16 (FP8 block, 16-bit x) and 32 vectors, every vector
 * of the chunk is held exactly once; the V vectors a lane holds of one block and the same
 * vectors of the L lanes of its aligned group (one warp) lie in that block; and exactly one of
 * them, the block's first vector, is marked first. VEC and FIRST name the mapping checked. */
static const char rows_layout_src[] =
    "#include \"qf_dev_norm.cuh\"\n"
    "template <int IT, int T, int BV, int (*VEC)(int, int), bool (*FIRST)(int, int)>\n"
    "__host__ __device__ constexpr bool span_ok() {\n"
    "    using S = RowsSpan<IT, BV>;\n"
    "    if (32 % S::L != 0 || S::V * S::NB != IT) return false;\n"
    "    int count[IT * T] = {}, first[IT * T / BV] = {};\n"
    "    for (int tid = 0; tid < T; tid++)\n"
    "        for (int it = 0; it < IT; it++) {\n"
    "            const int v = VEC(tid, it);\n"
    "            if (v < 0 || v >= IT * T || count[v]++) return false;\n"
    "            if (FIRST(tid, it)) { if (v % BV != 0 || first[v / BV]++) return false; }\n"
    "            if (tid % S::L == 0 && it % S::V == 0)\n"
    "                for (int u = tid; u < tid + S::L; u++)\n"
    "                    for (int j = it; j < it + S::V; j++)\n"
    "                        if (VEC(u, j) / BV != v / BV) return false;\n"
    "        }\n"
    "    for (int b = 0; b < IT * T / BV; b++) if (first[b] != 1) return false;\n"
    "    return true;\n"
    "}\n"
    "template <int IT, int T, int BV>\n"
    "__host__ __device__ constexpr int rows_vec_interleaved(int tid, int it) {\n"
    "    return it * T + tid;\n"
    "}\n"
    "#define OK(IT, BV) span_ok<IT, 256, BV, ROWS_VEC<IT, 256, BV>, rows_block_first<IT, BV>>()\n"
    "#define ALL(BV) (OK(1, BV) && OK(2, BV) && OK(4, BV) && OK(8, BV))\n"
    "static_assert(ALL(4) && ALL(8) && ALL(16) && ALL(32), \"rows layout\");\n"
    "extern \"C\" __global__ void qf_rows_layout_check() {}\n";

/* 0 when rows_layout_src compiles for sm_90 with ROWS_VEC defined as vec (a template of <IT,
 * THREADS, BV>), else 1 with NVRTC's message in msg. */
static int rows_layout_compiles(const char *vec, char *msg, size_t cap) {
    char def[96], archbuf[64];
    snprintf(def, sizeof def, "-DROWS_VEC=%s", vec);
    const char *extra[] = {def}, *opts[QF_JIT_MAX_OPTIONS];
    const int no = qf_jit_options(90, extra, 1, opts, archbuf);
    void *cubin = NULL;
    size_t size = 0;
    const qf_status s = no > 0 ? qf_jit_compile("qf_rows_layout_check", rows_layout_src,
                                                qf_nvrtc_header_names, qf_nvrtc_headers,
                                                qf_nvrtc_header_count, opts, no, &cubin, &size)
                               : QF_ERR_INTERNAL;
    free(cubin);
    snprintf(msg, cap, "%s", s == QF_OK ? "" : qf_last_error());
    return s != QF_OK;
}

static void test_rows_layout(void **state) {
    (void)state;
    char msg[4096];
    if (rows_layout_compiles("rows_vec", msg, sizeof msg))
        fail_msg("the rows layout check failed: %s", msg);
    /* the check can fail: the interleaved chunk (vector it * 256 + tid) spreads a block over more
     * lanes than RowsSpan's L, and the compile must say so */
    assert_int_equal(rows_layout_compiles("rows_vec_interleaved", msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "rows layout"));
}

/* ==================================================================== NVRTC compiles */

/* 0 when the CUBIN of k as inst defines exactly the entry points the registry lists for that
 * instance (qf_kernel_instance_entries of k->entries): each listed `<name><suffix>` has its .text
 * section, no unlisted one has; else 1 and a message. */
static int check_entries(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                         const void *cubin, size_t size, char *msg, size_t cap) {
    const unsigned entries = qf_kernel_instance_entries(k, inst);
    for (int e = 0; e < QF_ENTRY_COUNT; e++) {
        char sect[200];
        int n = snprintf(sect, sizeof sect, ".text.%s%s", k->name, qf_kernel_entry_suffix(e));
        const int listed = (entries & QF_ENTRY_BIT(e)) != 0;
        const int found = memmem(cubin, size, sect, (size_t)n + 1) != NULL; /* with its NUL */
        if (listed != found) {
            snprintf(msg, cap, "%s: entry %s%s is %s but %s in the CUBIN", k->name, k->name,
                     qf_kernel_entry_suffix(e), listed ? "listed" : "not listed",
                     found ? "present" : "absent");
            return 1;
        }
    }
    return 0;
}

/* One NVRTC compile of k as inst for arch; returns 0, or 1 with a message in msg. Thread-safe
 * (qf_last_error is per thread, NVRTC programs are independent). */
static int compile_kernel(const qf_kernel_entry *k, const qf_kernel_instance *inst, int arch,
                          char *msg, size_t cap) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int ne = qf_kernel_extra_options(k, inst, store, extra);
    int no = qf_jit_options(arch, extra, ne, opts, archbuf);
    void *cubin = NULL;
    size_t size = 0;
    char *text = qf_kernel_text(k), *log = NULL;
    qf_status s = no > 0 && text ? qf_jit_compile_log(k->name, text, qf_nvrtc_header_names,
                                                      qf_nvrtc_headers, qf_nvrtc_header_count,
                                                      opts, no, &cubin, &size, &log)
                                 : QF_ERR_INTERNAL;
    free(text);
    int bad = s != QF_OK || size <= 64 || memcmp(cubin, "\177ELF", 4) != 0;
    /* ptxas's performance notes: "wgmma.mma_async instructions are serialized" would make the
     * warp-specialized GEMM wait for each MMA before issuing the next */
    const char *loss = log ? strstr(log, "Potential Performance Loss") : NULL;
    if (bad)
        snprintf(msg, cap, "%s for sm_%d: %s", k->name, arch,
                 s != QF_OK ? qf_last_error() : "the output is not an ELF CUBIN");
    else if (loss)
        bad = snprintf(msg, cap, "%s for sm_%d: ptxas: %.*s", k->name, arch,
                       (int)strcspn(loss, "\n"), loss) > 0;
    else
        bad = check_entries(k, inst, cubin, size, msg, cap);
    free(log);
    free(cubin);
    return bad;
}

/* Nonzero when kernel i is the first of its op in the registry. */
static int first_of_op(int i) {
    for (int j = 0; j < i; j++)
        if (qf_kernels[j].op == qf_kernels[i].op)
            return 0;
    return 1;
}

#define QF_TEST_INSTANCES 3 /* per kernel: default; both outputs + fp32 gamma; columnwise only */

/* Instance j of kernel k (QF_TEST_INSTANCES of them for quantizers, 2 for GEMM modules: the
 * staged one, 1 otherwise); 0 if none. */
static int test_instance(const qf_kernel_entry *k, int j, qf_kernel_instance *inst) {
    *inst = qf_kernel_instance_default(k);
    if (j == 0)
        return 1;
    if (k->op == QF_OP_GEMM && j == 1) {
        inst->staged = 1;
        return 1;
    }
    if (k->op != QF_OP_NORM_QUANTIZE && k->op != QF_OP_QUANTIZE)
        return 0;
    inst->outputs = j == 1 ? QF_OUT_ROWWISE | QF_OUT_COLUMNWISE : QF_OUT_COLUMNWISE;
    inst->gamma_dtype = QF_DTYPE_FP32;
    return 1;
}

/* 1 when job (kernel job / QF_TEST_INSTANCES, its instance job % QF_TEST_INSTANCES) is compiled,
 * with that instance in *inst. */
static int job_instance(int job, int quick, qf_kernel_instance *inst) {
    const int i = job / QF_TEST_INSTANCES;
    return !(quick && !first_of_op(i)) &&
           test_instance(&qf_kernels[i], job % QF_TEST_INSTANCES, inst);
}

/* Each kernel as its default instance and, for quantizers, with both outputs and fp32 gamma and
 * with the columnwise output only; compiled in parallel (OpenMP), failures reported together,
 * with a progress line every tenth of the compiles (minutes on two cores).
 * NOTES: QFUSE_TEST_QUICK=1 (sanitizer runs, where NVRTC runs some 50x slower under valgrind)
 * compiles the first kernel of each op only: NVRTC is not the code under test there. */
static void compile_all(int arch) {
    const int quick = test_quick();
    assert_true(qf_kernel_count > 0);
    const int jobs = qf_kernel_count * QF_TEST_INSTANCES;
    char(*msgs)[512] = calloc((size_t)jobs, sizeof *msgs);
    int *bad = calloc((size_t)jobs, sizeof *bad);
    assert_non_null(msgs);
    assert_non_null(bad);
    int total = 0, done = 0;
    for (int job = 0; job < jobs; job++) {
        qf_kernel_instance inst;
        total += job_instance(job, quick, &inst);
    }
    const int step = total / 10 > 0 ? total / 10 : 1;
#pragma omp parallel for schedule(dynamic)
    for (int job = 0; job < jobs; job++) {
        qf_kernel_instance inst;
        if (!job_instance(job, quick, &inst))
            continue;
        bad[job] = compile_kernel(&qf_kernels[job / QF_TEST_INSTANCES], &inst, arch, msgs[job],
                                  sizeof msgs[job]);
        int n;
#pragma omp atomic capture
        n = ++done;
        if (n % step == 0 || n == total) {
            printf("  sm_%d: %d of %d NVRTC compiles done\n", arch, n, total);
            fflush(stdout);
        }
    }
    int failures = 0, first = -1;
    for (int job = 0; job < jobs; job++)
        if (bad[job]) {
            fprintf(stderr, "%s\n", msgs[job]);
            failures++;
            first = first < 0 ? job : first;
        }
    char msg[512];
    snprintf(msg, sizeof msg, "%s", first >= 0 ? msgs[first] : "");
    free(msgs);
    free(bad);
    if (failures)
        fail_msg("%d NVRTC compiles failed or drew a ptxas performance note for sm_%d; the "
                 "first: %s", failures, arch, msg);
}

/* compile_all for the arch of the state (QF_TEST_PARAM). */
static void test_compile_all(void **state) {
    compile_all(qf_test_param(state));
}

/* CUBIN bytes of k as inst for arch (0 when the compile fails). */
static size_t cubin_size(const qf_kernel_entry *k, const qf_kernel_instance *inst, int arch) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    const int no = qf_jit_options(arch, extra, qf_kernel_extra_options(k, inst, store, extra),
                                  opts, archbuf);
    void *cubin = NULL;
    size_t size = 0;
    char *text = qf_kernel_text(k);
    if (no <= 0 || !text || qf_jit_compile(k->name, text, qf_nvrtc_header_names, qf_nvrtc_headers,
                                           qf_nvrtc_header_count, opts, no, &cubin,
                                           &size) != QF_OK)
        size = 0;
    free(text);
    free(cubin);
    return size;
}

/* Each GEMM module's staged instance for sm_90 (the one its staged path, qf_dequantize and
 * NVFP4's alpha load) holds its entries without the warp-specialized GEMM kernel: a CUBIN smaller
 * than the GEMM kernel's instance (holding that kernel too, it would be larger; sm_90a: 49 KB
 * against 141 KB for MXFP8). test_compile_all checks each instance's entry names. */
static void test_gemm_staged_instance(void **state) {
    (void)state;
    int n = 0;
    for (int i = 0; i < qf_kernel_count; i++) {
        const qf_kernel_entry *k = &qf_kernels[i];
        if (k->op != QF_OP_GEMM)
            continue;
        qf_kernel_instance whole = qf_kernel_instance_default(k), staged = whole;
        staged.staged = 1;
        const size_t sw = cubin_size(k, &whole, 90), ss = cubin_size(k, &staged, 90);
        if (!sw || !ss || ss >= sw)
            fail_msg("%s for sm_90: GEMM kernel's instance %zu bytes, staged instance %zu", k->name,
                     sw, ss);
        n++;
    }
    assert_true(n >= 2); /* mxfp8 and nvfp4 at least */
}

/* ==================================================================== fusion key fields */

#define QF_TEST_MAX_HEADERS 16

static void key_of(const qf_recipe *r, const qf_kernel_entry *k,
                   const qf_kernel_instance *inst, int arch, char hex[QF_KEY_HEX_LEN + 1]) {
    qf_kernel_key(r, k, inst, qf_nvrtc_header_names, qf_nvrtc_headers, qf_nvrtc_header_count,
                  arch, hex);
}

/* The first norm + quantize kernel: the most fields to vary. */
static const qf_kernel_entry *first_nq(void) {
    for (int i = 0; i < qf_kernel_count; i++)
        if (qf_kernels[i].op == QF_OP_NORM_QUANTIZE)
            return &qf_kernels[i];
    fail_msg("no norm_quantize kernel in the registry");
    return NULL;
}

typedef struct key_fixture {
    qf_recipe r;
    qf_kernel_entry k;
    qf_kernel_instance inst;
    int arch;
    char base[QF_KEY_HEX_LEN + 1];
} key_fixture;

static int key_setup(void **state) {
    key_fixture *f = calloc(1, sizeof *f);
    f->k = *first_nq();
    f->r = *f->k.recipe;
    f->inst = qf_kernel_instance_default(&f->k);
    f->arch = 90;
    key_of(&f->r, &f->k, &f->inst, f->arch, f->base);
    *state = f;
    return 0;
}

static int key_teardown(void **state) {
    free(*state);
    return 0;
}

static void assert_key_changed(const key_fixture *f) {
    char hex[QF_KEY_HEX_LEN + 1];
    key_of(&f->r, &f->k, &f->inst, f->arch, hex);
    assert_string_not_equal(hex, f->base);
}

/* A test that `change`, one expression on the fixture f, changes the key. */
#define KEY_CHANGE_TEST(name, change)                                                              \
    static void name(void **state) {                                                               \
        key_fixture *f = *state;                                                                   \
        change;                                                                                    \
        assert_key_changed(f);                                                                     \
    }

static void test_key_deterministic(void **state) {
    key_fixture *f = *state;
    char hex[QF_KEY_HEX_LEN + 1];
    key_of(&f->r, &f->k, &f->inst, f->arch, hex);
    assert_string_equal(hex, f->base);
    assert_int_equal(strlen(hex), QF_KEY_HEX_LEN);
}

static void test_key_all_kernels_distinct(void **state) {
    (void)state;
    char (*keys)[QF_KEY_HEX_LEN + 1] = calloc((size_t)qf_kernel_count, sizeof *keys);
    for (int i = 0; i < qf_kernel_count; i++) {
        qf_kernel_instance inst = qf_kernel_instance_default(&qf_kernels[i]);
        key_of(qf_kernels[i].recipe, &qf_kernels[i], &inst, 90, keys[i]);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(keys[i], keys[j]);
    }
    free(keys);
}

KEY_CHANGE_TEST(test_key_recipe_options,
                snprintf(f->r.options, sizeof f->r.options, "%s",
                         "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=e4m3;"
                         "margin=0"))

KEY_CHANGE_TEST(test_key_margin,
                snprintf(f->r.options, sizeof f->r.options, "%s",
                         "amax_compute=max;amax_history_len=1024;family=fp8_delayed;format=hybrid;"
                         "margin=1"))

KEY_CHANGE_TEST(test_key_norm,
                f->k.norm = f->k.norm == QF_NORM_LAYERNORM ? QF_NORM_RMSNORM : QF_NORM_LAYERNORM)

KEY_CHANGE_TEST(test_key_zero_centered_gamma, f->k.zero_centered_gamma = !f->k.zero_centered_gamma)

KEY_CHANGE_TEST(test_key_input_dtype,
                f->k.in_dtype = f->k.in_dtype == QF_DTYPE_BF16 ? QF_DTYPE_FP16 : QF_DTYPE_BF16)

KEY_CHANGE_TEST(test_key_output_format,
                f->k.out_dtype = f->k.out_dtype == QF_DTYPE_E4M3 ? QF_DTYPE_E5M2 : QF_DTYPE_E4M3)

KEY_CHANGE_TEST(test_key_outputs, f->inst.outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE)

KEY_CHANGE_TEST(test_key_gamma_dtype, f->inst.gamma_dtype = QF_DTYPE_FP32 == f->inst.gamma_dtype
                                                                ? QF_DTYPE_BF16
                                                                : QF_DTYPE_FP32)

KEY_CHANGE_TEST(test_key_arch, f->arch = 100)

/* One more byte at the end of text: a changed copy (caller frees). */
static char *with_trailing_byte(const char *text) {
    size_t n = strlen(text);
    char *s = malloc(n + 2);
    assert_non_null(s);
    memcpy(s, text, n);
    memcpy(s + n, " ", 2);
    return s;
}

static void test_key_template(void **state) {
    key_fixture *f = *state;
    qf_kernel_template tpl = *f->k.tpl;
    char *text = with_trailing_byte(tpl.text);
    tpl.text = text;
    f->k.tpl = &tpl;
    assert_key_changed(f);
    free(text);
}

static void test_key_prelude(void **state) {
    key_fixture *f = *state;
    char *text = with_trailing_byte(f->k.prelude);
    f->k.prelude = text;
    assert_key_changed(f);
    free(text);
}

/* The key hashes the text NVRTC sees, prelude + template, not where the split falls: moving a
 * byte from the prelude to the template keeps it (the compiled program is the same). */
static void test_key_joined_text(void **state) {
    key_fixture *f = *state;
    const char *pre = f->k.prelude;
    size_t n = strlen(pre), nt = strlen(f->k.tpl->text);
    char *short_pre = strdup(pre), *long_tpl = malloc(nt + 2);
    assert_non_null(short_pre);
    assert_non_null(long_tpl);
    short_pre[n - 1] = '\0';
    long_tpl[0] = pre[n - 1];
    memcpy(long_tpl + 1, f->k.tpl->text, nt + 1);
    qf_kernel_template tpl = {.file = f->k.tpl->file, .text = long_tpl};
    f->k.prelude = short_pre;
    f->k.tpl = &tpl;
    char hex[QF_KEY_HEX_LEN + 1];
    key_of(&f->r, &f->k, &f->inst, f->arch, hex);
    assert_string_equal(hex, f->base);
    free(short_pre), free(long_tpl);
}

/* Every header handed to NVRTC enters the key: one changed byte in any of them (qf_formats.h and
 * each shared qf_dev_*.cuh) changes it. */
static void test_key_headers(void **state) {
    key_fixture *f = *state;
    assert_true(qf_nvrtc_header_count >= 2); /* qf_formats.h and the shared device headers */
    for (int i = 0; i < qf_nvrtc_header_count; i++) {
        const char *texts[QF_TEST_MAX_HEADERS];
        assert_true(qf_nvrtc_header_count <= QF_TEST_MAX_HEADERS);
        memcpy(texts, qf_nvrtc_headers, (size_t)qf_nvrtc_header_count * sizeof texts[0]);
        char *changed = with_trailing_byte(texts[i]), hex[QF_KEY_HEX_LEN + 1];
        texts[i] = changed;
        qf_kernel_key(&f->r, &f->k, &f->inst, qf_nvrtc_header_names, texts,
                      qf_nvrtc_header_count, f->arch, hex);
        if (strcmp(hex, f->base) == 0)
            fail_msg("a change to header %s keeps the key", qf_nvrtc_header_names[i]);
        free(changed);
    }
}

KEY_CHANGE_TEST(test_key_name, f->k.name = "qf_other_name")

KEY_CHANGE_TEST(test_key_launch_config, f->k.tile_m *= 2)

/* A test run with a fresh key fixture. */
#define KEY_T(f) cmocka_unit_test_setup_teardown(f, key_setup, key_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        KEY_T(test_key_deterministic),
        cmocka_unit_test(test_key_all_kernels_distinct),
        KEY_T(test_key_recipe_options),
        KEY_T(test_key_margin),
        KEY_T(test_key_norm),
        KEY_T(test_key_zero_centered_gamma),
        KEY_T(test_key_input_dtype),
        KEY_T(test_key_output_format),
        KEY_T(test_key_outputs),
        KEY_T(test_key_gamma_dtype),
        KEY_T(test_key_arch),
        KEY_T(test_key_template),
        KEY_T(test_key_prelude),
        KEY_T(test_key_joined_text),
        KEY_T(test_key_headers),
        KEY_T(test_key_name),
        KEY_T(test_key_launch_config),
        cmocka_unit_test(test_rows_layout),
        cmocka_unit_test(test_gemm_staged_instance),
        QF_TEST_PARAM(test_compile_all_sm90, test_compile_all, NULL, 90),
        QF_TEST_PARAM(test_compile_all_sm100, test_compile_all, NULL, 100),
    };
    qf_test_filter_from_env("kernels", tests);
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
