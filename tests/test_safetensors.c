/* test_safetensors.c: qf_st_* reader: valid files round-trip, hostile files fail cleanly. */
#include "test_util.h"

#include <sys/stat.h>

#include <math.h>
#include <stdio.h>
#include <unistd.h>

#include "safetensors.h"

#define REAL_BLOCK "out/data/block.safetensors"

static char tmpdir[256];
static char path[512];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/qf_test_st.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Sets `path` to a fresh file name in the test directory. */
static const char *case_path(const char *stem) {
    snprintf(path, sizeof path, "%s/%s.safetensors", tmpdir, stem);
    return path;
}

static void write_raw(const char *p, const void *buf, size_t n) {
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

/* Writes a safetensors file: little-endian length, hdr padded with spaces to 8 bytes, data. */
static void write_st(const char *p, const char *hdr, const void *data, size_t dn) {
    size_t hn = strlen(hdr), padded = (hn + 7) / 8 * 8;
    unsigned char *buf = calloc(1, 8 + padded + dn + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, hdr, hn);
    memset(buf + 8 + hn, ' ', padded - hn);
    if (dn)
        memcpy(buf + 8 + padded, data, dn);
    write_raw(p, buf, 8 + padded + dn);
    free(buf);
}

/* Opens p expecting failure `want`; the message must name the file and contain `word`. */
static void expect_open_error(const char *p, qf_status want, const char *word) {
    qf_st_file *f = (qf_st_file *)&f; /* must be reset to NULL on failure */
    qf_status s = qf_st_open(p, &f);
    if (s != want || !strstr(qf_last_error(), p) || !strstr(qf_last_error(), word))
        print_error("case %s: status %s, message '%s' (want %s with '%s')\n", p,
                    qf_status_name(s), qf_last_error(), qf_status_name(want), word);
    assert_int_equal(s, want);
    assert_null(f);
    assert_non_null(strstr(qf_last_error(), p));
    assert_non_null(strstr(qf_last_error(), word));
}

/* A header with one F32 tensor "a" over an 8-byte data section, varying one piece. */
static void expect_bad_header(const char *stem, const char *hdr, const char *word) {
    static const float data[2] = {1.0f, 2.0f};
    write_st(case_path(stem), hdr, data, sizeof data);
    expect_open_error(path, QF_ERR_INVALID_ARG, word);
}

/* Data section of the valid file: w F32 [2,3], h F16 [2], b BF16 [2], pos I64 [2], s F32 []. */
typedef struct valid_data {
    float w[6];
    uint16_t h[2];
    uint16_t b[2];
    int64_t pos[2];
    float s;
} valid_data;

static const char valid_hdr[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"source\":\"test\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[28,32]},"
    "\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[32,48]},"
    "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[48,52]},"
    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[52,52]}}";

static void write_valid(const char *p) {
    valid_data d = {{1, -2, 3.5f, 0, 1e-3f, -7}, {0x3C00, 0xC000}, {0x3FC0, 0xBF80}, {0, 1}, 42};
    _Static_assert(offsetof(valid_data, s) == 48, "valid_data layout");
    write_st(p, valid_hdr, &d, 52);
}

/* Writes the valid file as stem in the test directory (its path in `path`) and opens it. */
static qf_st_file *open_valid(const char *stem) {
    qf_st_file *f = NULL;
    write_valid(case_path(stem));
    assert_int_equal(qf_st_open(path, &f), QF_OK);
    return f;
}

/* Tensor name of f, asserted present with dtype want and shape [d0, d1]; returns its data. */
static const void *get_2d(qf_st_file *f, const char *name, qf_dtype want, int64_t d0, int64_t d1) {
    qf_dtype dt;
    int nd;
    int64_t dims[8];
    const void *data;
    assert_int_equal(qf_st_get(f, name, &dt, &nd, dims, &data), QF_OK);
    assert_int_equal(dt, want);
    assert_int_equal(nd, 2);
    assert_int_equal(dims[0], d0);
    assert_int_equal(dims[1], d1);
    return data;
}

static void test_valid_roundtrip(void **state) {
    (void)state;
    qf_st_file *f = open_valid("valid");
    assert_int_equal(qf_st_count(f), 6);
    qf_dtype dt;
    int nd;
    int64_t dims[8];
    const void *data = get_2d(f, "w", QF_DTYPE_FP32, 2, 3);
    assert_true(((const float *)data)[2] == 3.5f && ((const float *)data)[5] == -7.0f);
    assert_int_equal((uintptr_t)data % 16, 0);
    assert_int_equal(qf_st_get(f, "h", &dt, &nd, dims, &data), QF_OK);
    assert_int_equal(dt, QF_DTYPE_FP16);
    assert_int_equal(((const uint16_t *)data)[1], 0xC000);
    assert_int_equal(qf_st_get(f, "b", &dt, &nd, dims, &data), QF_OK);
    assert_int_equal(dt, QF_DTYPE_BF16);
    assert_int_equal(((const uint16_t *)data)[0], 0x3FC0);
    qf_st_close(f);
}

static void test_scalar_empty_and_null_outputs(void **state) {
    (void)state;
    qf_st_file *f = open_valid("valid2");
    int nd = -1;
    const void *data = NULL;
    assert_int_equal(qf_st_get(f, "s", NULL, &nd, NULL, &data), QF_OK);
    assert_int_equal(nd, 0);
    assert_true(*(const float *)data == 42.0f);
    int64_t dims[8] = {0};
    assert_int_equal(qf_st_get(f, "e", NULL, &nd, dims, NULL), QF_OK);
    assert_int_equal(nd, 2);
    assert_int_equal(dims[1], 4);
    assert_string_equal(qf_st_name(f, 0), "b"); /* sorted by name */
    assert_null(qf_st_name(f, 6));
    qf_st_close(f);
}

static void test_get_errors(void **state) {
    (void)state;
    qf_st_file *f = open_valid("geterr");
    const void *data = (const void *)&data;
    assert_int_equal(qf_st_get(f, "pos", NULL, NULL, NULL, &data), QF_ERR_UNSUPPORTED);
    assert_non_null(strstr(qf_last_error(), "I64"));
    assert_non_null(strstr(qf_last_error(), path));
    assert_ptr_equal(data, (const void *)&data); /* untouched on error */
    assert_int_equal(qf_st_get(f, "nope", NULL, NULL, NULL, &data), QF_ERR_NOT_FOUND);
    assert_non_null(strstr(qf_last_error(), "nope"));
    assert_int_equal(qf_st_get(f, NULL, NULL, NULL, NULL, &data), QF_ERR_INVALID_ARG);
    assert_int_equal(qf_st_get(NULL, "w", NULL, NULL, NULL, &data), QF_ERR_INVALID_ARG);
    qf_st_close(f);
    qf_st_close(NULL);
    assert_int_equal(qf_st_open(NULL, &f), QF_ERR_INVALID_ARG);
    assert_int_equal(qf_st_open(path, NULL), QF_ERR_INVALID_ARG);
}

static void test_missing_and_not_regular(void **state) {
    (void)state;
    expect_open_error(case_path("does_not_exist"), QF_ERR_NOT_FOUND, "No such file");
    expect_open_error(tmpdir, QF_ERR_INVALID_ARG, "regular file");
    /* a FIFO without a writer: refused at once (opening it must not block) */
    const char *fifo = case_path("fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_open_error(fifo, QF_ERR_INVALID_ARG, "not a regular file");
    unlink(fifo);
}

/* qf_st_open_max: a file over the cap is refused before it is read; one at the cap opens. */
static void test_size_cap(void **state) {
    (void)state;
    write_valid(case_path("capped"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    const uint64_t size = (uint64_t)st.st_size;
    qf_st_file *f = (qf_st_file *)1;
    assert_int_equal(qf_st_open_max(path, size - 1, &f), QF_ERR_INVALID_ARG);
    assert_null(f);
    char want[96];
    snprintf(want, sizeof want, "%llu bytes, more than the %llu this reader takes",
             (unsigned long long)size, (unsigned long long)(size - 1));
    assert_non_null(strstr(qf_last_error(), want));
    assert_int_equal(qf_st_open_max(path, size, &f), QF_OK);
    qf_st_close(f);
}

static void test_bad_lengths(void **state) {
    (void)state;
    write_raw(case_path("short"), "\x10\0\0\0\0", 5);
    expect_open_error(path, QF_ERR_INVALID_ARG, "truncated");
    unsigned char big[16] = {0x64}; /* header length 100, 8 bytes follow */
    write_raw(case_path("hdr_past_end"), big, sizeof big);
    expect_open_error(path, QF_ERR_INVALID_ARG, "not a safetensors file");
    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'}; /* 2^63 */
    write_raw(case_path("hdr_huge"), huge, sizeof huge);
    expect_open_error(path, QF_ERR_INVALID_ARG, "more than the 8 bytes that follow");
    unsigned char zero[8] = {0};
    write_raw(case_path("hdr_zero"), zero, sizeof zero);
    expect_open_error(path, QF_ERR_INVALID_ARG, "not a safetensors file: header length 0");
}

static void test_bad_json(void **state) {
    (void)state;
    expect_bad_header("json_cut", "{\"a\":{\"dtype\":\"F32\",", "JSON");
    expect_bad_header("json_garbage", "{} xyz", "garbage");
    expect_bad_header("json_array", "[1,2]", "not an object");
    expect_bad_header("json_meta", "{\"__metadata__\":3}", "__metadata__");
    /* a name cut short by a NUL would be another tensor's: refused, raw or escaped */
    expect_bad_header("json_ctrl", "{\"a\x01" "b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                   "\"data_offsets\":[0,8]}}",
                      "control byte 0x01");
    expect_bad_header("json_nul_escape", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                         "\"data_offsets\":[0,8]}}",
                      "\\u0000 escape");
    char deep[4200];
    memset(deep, '[', 4000); /* deeper than cJSON's nesting limit: no stack exhaustion */
    deep[4000] = '\0';
    expect_bad_header("json_deep", deep, "JSON");
}

static void test_bad_types(void **state) {
    (void)state;
    expect_bad_header("entry_num", "{\"a\":5}", "not a JSON object");
    expect_bad_header("dtype_num", "{\"a\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}",
                      "dtype");
    expect_bad_header("dtype_unknown",
                      "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      "unknown dtype");
    expect_bad_header("shape_str", "{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}",
                      "shape");
    expect_bad_header("shape_neg", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                      "shape");
    expect_bad_header("shape_frac",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", "shape");
    expect_bad_header("shape_9d", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],"
                      "\"data_offsets\":[0,8]}}", "dims");
    expect_bad_header("offs_str", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":\"0\"}}",
                      "data_offsets");
    expect_bad_header("offs_three",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}",
                      "data_offsets");
    expect_bad_header("offs_huge",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}",
                      "data_offsets are not integers in 0..2^53");
    expect_bad_header("offs_2p62",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                      "\"data_offsets\":[0,4611686018427387904]}}",
                      "data_offsets are not integers in 0..2^53");
}

static void test_bad_shapes_and_offsets(void **state) {
    (void)state;
    expect_bad_header("overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,"
                      "4294967296],\"data_offsets\":[0,8]}}", "overflow");
    expect_bad_header("overflow_bits", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,"
                      "2147483648],\"data_offsets\":[0,8]}}", "overflow");
    expect_bad_header("offs_past_end",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}",
                      "out of range");
    expect_bad_header("offs_reversed",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
                      "begin after end");
    expect_bad_header("size_mismatch",
                      "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
                      "does not match");
    expect_bad_header("overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[2,6]}}", "overlap");
    expect_bad_header("duplicate", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", "twice");
    /* the data section holds the tensors end to end, nothing before, between or after them */
    expect_bad_header("trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      "has 4 bytes after its last tensor (4 of 8 bytes held)");
    expect_bad_header("gap_first", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "tensor 'a' begins at data byte 4, after a gap of 4 bytes");
    expect_bad_header("gap_between",
                      "{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "tensor 'b' begins at data byte 4, after a gap of 2 bytes");
    expect_bad_header("empty_only", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                      "has 8 bytes after its last tensor");
}

/* The header is UTF-8: a name in UTF-8 opens and reads back as written; bytes that are not
 * UTF-8 (a raw 0xFF, a cut sequence, an overlong form, a surrogate) are refused by position. */
static void test_utf8_names(void **state) {
    (void)state;
    static const float data[2] = {1.0f, 2.0f};
    write_st(case_path("utf8_ok"),
             "{\"w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":{\"dtype\":\"F32\",\"shape\":[2],"
             "\"data_offsets\":[0,8]}}",
             data, sizeof data);
    qf_st_file *f = NULL;
    assert_int_equal(qf_st_open(path, &f), QF_OK);
    assert_int_equal(qf_st_count(f), 1);
    assert_string_equal(qf_st_name(f, 0), "w\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    qf_st_close(f);
    static const struct {
        const char *stem, *name, *word;
    } bad[] = {
        {"utf8_ff", "\xff\xfe", "header is not UTF-8 (byte 0xff at byte 2)"},
        {"utf8_cut", "a\xc3", "header is not UTF-8 (byte 0xc3 at byte 3)"},
        {"utf8_overlong", "\xc0\xaf", "header is not UTF-8 (byte 0xc0 at byte 2)"},
        {"utf8_overlong3", "\xe0\x80\xaf", "header is not UTF-8 (byte 0xe0 at byte 2)"},
        {"utf8_surrogate", "\xed\xa0\x80", "header is not UTF-8 (byte 0xed at byte 2)"},
        {"utf8_past_max", "\xf4\x90\x80\x80", "header is not UTF-8 (byte 0xf4 at byte 2)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr,
                 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", bad[i].name);
        expect_bad_header(bad[i].stem, hdr, bad[i].word);
    }
}

/* Every truncation of a valid file fails cleanly (valgrind checks there are no stray reads). */
static void test_every_truncation(void **state) {
    (void)state;
    write_valid(case_path("full"));
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char buf[2048];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    assert_true(n > 8 && n < sizeof buf);
    for (size_t len = 0; len < n; len++) {
        write_raw(case_path("trunc"), buf, len);
        qf_st_file *f = NULL;
        assert_int_not_equal(qf_st_open(path, &f), QF_OK);
        assert_null(f);
    }
}

/* Random byte flips in the header either open or fail; neither may crash or read out of bounds. */
static void test_header_corruption(void **state) {
    (void)state;
    write_valid(case_path("flip_src"));
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char buf[2048], mut[2048];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    uint64_t rng = 12345;
    for (int it = 0; it < 300; it++) {
        memcpy(mut, buf, n);
        for (int k = 0; k < 3; k++) /* flips inside the length field and the header */
            mut[qf_test_rng_next(&rng) % (n - 52)] ^= (unsigned char)(1 + qf_test_rng_next(&rng) % 255);
        write_raw(case_path("flip"), mut, n);
        qf_st_file *f = NULL;
        if (qf_st_open(path, &f) == QF_OK) {
            const void *data;
            for (int i = 0; i < qf_st_count(f); i++)
                (void)qf_st_get(f, qf_st_name(f, i), NULL, NULL, NULL, &data);
            qf_st_close(f);
        } else {
            assert_null(f);
        }
    }
}

static void test_real_block(void **state) {
    (void)state;
    if (access(REAL_BLOCK, R_OK) != 0) { /* produced by scripts/get-real-weights (make demo) */
        print_message("skipped: %s not found (make demo fetches it)\n", REAL_BLOCK);
        skip();
    }
    qf_st_file *f = NULL;
    assert_int_equal(qf_st_open(REAL_BLOCK, &f), QF_OK);
    qf_dtype dt;
    int nd;
    int64_t dims[8];
    const void *data = get_2d(f, "fc1.weight", QF_DTYPE_FP32, 1536, 384);
    for (int64_t i = 0; i < 1536 * 384; i++)
        assert_true(isfinite(((const float *)data)[i]));
    assert_int_equal(qf_st_get(f, "x", &dt, &nd, dims, &data), QF_OK);
    assert_true(nd == 2 && dims[0] == 2048 && dims[1] == 384);
    assert_int_equal(qf_st_get(f, "ln.weight", &dt, &nd, dims, &data), QF_OK);
    assert_true(nd == 1 && dims[0] == 384);
    assert_int_equal(qf_st_get(f, "ln.bias", &dt, &nd, dims, &data), QF_OK);
    assert_int_equal(qf_st_get(f, "fc1.bias", &dt, &nd, dims, &data), QF_OK);
    assert_true(nd == 1 && dims[0] == 1536);
    data = get_2d(f, "fc2.weight", QF_DTYPE_FP32, 384, 1536); /* the MLP's second Linear */
    for (int64_t i = 0; i < 384 * 1536; i++)
        assert_true(isfinite(((const float *)data)[i]));
    static const char *const vec384[] = {"fc2.bias", "ln2.weight", "ln2.bias"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(qf_st_get(f, vec384[i], &dt, &nd, dims, &data), QF_OK);
        assert_true(dt == QF_DTYPE_FP32 && nd == 1 && dims[0] == 384);
    }
    qf_st_close(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_roundtrip),
        cmocka_unit_test(test_scalar_empty_and_null_outputs),
        cmocka_unit_test(test_get_errors),
        cmocka_unit_test(test_missing_and_not_regular),
        cmocka_unit_test(test_size_cap),
        cmocka_unit_test(test_bad_lengths),
        cmocka_unit_test(test_bad_json),
        cmocka_unit_test(test_bad_types),
        cmocka_unit_test(test_bad_shapes_and_offsets),
        cmocka_unit_test(test_utf8_names),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_header_corruption),
        cmocka_unit_test(test_real_block),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
