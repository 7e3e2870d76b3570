/* safetensors.c: reads a whole .safetensors file and validates its header (cJSON) before any use. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

/* The reference implementation refuses larger headers; a bigger one is hostile or corrupt. */
#define QF_ST_MAX_HEADER ((uint64_t)100 << 20)
/* JSON numbers are doubles: integers above 2^53 cannot be exact, so they are refused. */
#define QF_ST_MAX_INT 9007199254740992.0

typedef struct qf_st_tensor {
    const char *name;     /* owned by f->json */
    const char *st_dtype; /* safetensors dtype string, owned by f->json */
    int qf;               /* qf_dtype, or -1 when qfuse cannot use the dtype */
    int ndim;
    int64_t dims[QF_MAX_DIMS];
    uint64_t begin, end; /* byte range relative to the data section, validated */
} qf_st_tensor;

struct qf_st_file {
    char *path;
    unsigned char *data; /* the data section, in its own allocation so malloc aligns it */
    uint64_t data_size;
    cJSON *json;
    qf_st_tensor *t; /* sorted by name (bsearch lookups, duplicate detection) */
    int n;
};

typedef struct qf_st_dtype_info {
    const char *name;
    unsigned bits; /* sub-byte dtypes exist (F4, F6_*) */
    int qf;
} qf_st_dtype_info;

/* Every dtype the safetensors format defines, so files with extra tensors (e.g. I64 position ids)
 * still open; only the first three map to qfuse dtypes. */
static const qf_st_dtype_info qf_st_dtypes[] = {
    {"F32", 32, QF_DTYPE_FP32}, {"F16", 16, QF_DTYPE_FP16}, {"BF16", 16, QF_DTYPE_BF16},
    {"F64", 64, -1},            {"C64", 64, -1},            {"I64", 64, -1},
    {"U64", 64, -1},            {"I32", 32, -1},            {"U32", 32, -1},
    {"I16", 16, -1},            {"U16", 16, -1},            {"I8", 8, -1},
    {"U8", 8, -1},              {"BOOL", 8, -1},            {"F8_E4M3", 8, -1},
    {"F8_E5M2", 8, -1},         {"F8_E8M0", 8, -1},         {"F6_E2M3", 6, -1},
    {"F6_E3M2", 6, -1},         {"F4", 4, -1},
};

/* Records "safetensors file PATH: <message>" as a QF_ERR_INVALID_ARG. */
QF_PRINTF(2, 3) static qf_status st_bad(const qf_st_file *f, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return qf_set_error(QF_ERR_INVALID_ARG, "safetensors file %s: %s", f->path, msg);
}

static const qf_st_dtype_info *st_dtype_lookup(const char *s) {
    for (size_t i = 0; i < sizeof qf_st_dtypes / sizeof qf_st_dtypes[0]; i++)
        if (strcmp(s, qf_st_dtypes[i].name) == 0)
            return &qf_st_dtypes[i];
    return NULL;
}

/* Reads exactly n bytes; 0 on a short read (I/O error or the file shrank meanwhile). */
static int st_read_exact(FILE *fp, void *buf, uint64_t n) {
    return n == 0 || fread(buf, 1, (size_t)n, fp) == (size_t)n;
}

static uint64_t st_le64(const unsigned char b[8]) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

/* Opens path and returns its size; NOT_FOUND only for a missing file. O_NONBLOCK: opening a FIFO
 * must not wait for a writer (it is then refused as not a regular file). */
static qf_status st_open_fp(qf_st_file *f, FILE **fp, uint64_t *size) {
    struct stat st;
    const int fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!*fp) {
        const int err = errno;
        if (fd >= 0)
            close(fd);
        qf_status s = err == ENOENT ? QF_ERR_NOT_FOUND : QF_ERR_INVALID_ARG;
        return qf_set_error(s, "safetensors file %s: cannot open: %s", f->path, strerror(err));
    }
    if (fstat(fileno(*fp), &st) != 0 || !S_ISREG(st.st_mode))
        return st_bad(f, "not a regular file");
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* a regular file: plain reads */
    *size = (uint64_t)st.st_size;
    if (*size < 8)
        return st_bad(f, "truncated: %llu bytes, shorter than the 8-byte header length",
                      (unsigned long long)*size);
    return QF_OK;
}

/* Reads the header length, the header (NUL-terminated into *hdr) and the data section. */
static qf_status st_read_parts(qf_st_file *f, FILE *fp, uint64_t size, char **hdr, uint64_t *n) {
    unsigned char len[8];
    if (!st_read_exact(fp, len, 8))
        return st_bad(f, "read failed (truncated or I/O error)");
    *n = st_le64(len);
    if (*n > size - 8)
        return st_bad(f, "not a safetensors file: its first 8 bytes, read as the header length, "
                      "give %llu, more than the %llu bytes that follow",
                      (unsigned long long)*n, (unsigned long long)(size - 8));
    if (*n < 2 || *n > QF_ST_MAX_HEADER)
        return st_bad(f, "not a safetensors file: header length %llu is outside 2 .. 100 MiB",
                      (unsigned long long)*n);
    f->data_size = size - 8 - *n;
    *hdr = malloc((size_t)*n + 1);
    f->data = malloc(f->data_size ? (size_t)f->data_size : 1);
    if (!*hdr || !f->data)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "safetensors file %s: out of memory (%llu bytes)",
                            f->path, (unsigned long long)size);
    if (!st_read_exact(fp, *hdr, *n) || !st_read_exact(fp, f->data, f->data_size))
        return st_bad(f, "read failed (truncated while reading, or I/O error)");
    (*hdr)[*n] = '\0';
    return QF_OK;
}

/* Exact non-negative JSON integer below 2^53 into *out; 0 when v is anything else. */
static int st_json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v))
        return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= QF_ST_MAX_INT) || d != (double)(uint64_t)d)
        return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Fills t->ndim/dims from "shape" and returns its element count in *numel (overflow-checked). */
static qf_status st_parse_shape(const qf_st_file *f, qf_st_tensor *t, const cJSON *shape,
                                uint64_t *numel) {
    if (!cJSON_IsArray(shape))
        return st_bad(f, "tensor '%s': shape missing or not an array", t->name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > QF_MAX_DIMS)
        return st_bad(f, "tensor '%s': shape has %d dims, more than %d", t->name, nd, QF_MAX_DIMS);
    uint64_t prod = 1;
    const cJSON *d;
    t->ndim = 0;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (!st_json_u64(d, &v))
            return st_bad(f, "tensor '%s': shape entry is not an integer in 0..2^53", t->name);
        if (v != 0 && prod > UINT64_MAX / v)
            return st_bad(f, "tensor '%s': shape product overflows", t->name);
        prod *= v;
        t->dims[t->ndim++] = (int64_t)v;
    }
    *numel = prod;
    return QF_OK;
}

/* Fills t->begin/end from "data_offsets" and checks them against the data section. */
static qf_status st_parse_offsets(const qf_st_file *f, qf_st_tensor *t, const cJSON *offs) {
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return st_bad(f, "tensor '%s': data_offsets missing or not a [begin, end] array", t->name);
    if (!st_json_u64(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        !st_json_u64(cJSON_GetArrayItem(offs, 1), &t->end))
        return st_bad(f, "tensor '%s': data_offsets are not integers in 0..2^53 (JSON numbers "
                      "exact in a double)", t->name);
    if (t->begin > t->end)
        return st_bad(f, "tensor '%s': data_offsets [%llu, %llu] begin after end", t->name,
                      (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > f->data_size)
        return st_bad(f, "tensor '%s': data_offsets [%llu, %llu] out of range of the %llu-byte "
                      "data section", t->name, (unsigned long long)t->begin,
                      (unsigned long long)t->end, (unsigned long long)f->data_size);
    return QF_OK;
}

/* Checks that end - begin equals the size that dtype and shape imply. */
static qf_status st_check_size(const qf_st_file *f, const qf_st_tensor *t,
                               const qf_st_dtype_info *di, uint64_t numel) {
    if (numel > UINT64_MAX / di->bits)
        return st_bad(f, "tensor '%s': shape product overflows (in bits)", t->name);
    uint64_t bits = numel * di->bits;
    if (bits % 8 != 0)
        return st_bad(f, "tensor '%s': %s size is not a whole number of bytes", t->name,
                      di->name);
    if (t->end - t->begin != bits / 8)
        return st_bad(f, "tensor '%s': data size %llu bytes does not match dtype %s x shape "
                      "(%llu bytes)", t->name, (unsigned long long)(t->end - t->begin),
                      di->name, (unsigned long long)(bits / 8));
    return QF_OK;
}

/* Parses and validates one header entry {"dtype", "shape", "data_offsets"} into t. */
static qf_status st_parse_entry(const qf_st_file *f, const cJSON *e, qf_st_tensor *t) {
    t->name = e->string;
    if (!cJSON_IsObject(e))
        return st_bad(f, "tensor '%s': entry is not a JSON object", t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return st_bad(f, "tensor '%s': dtype missing or not a string", t->name);
    const qf_st_dtype_info *di = st_dtype_lookup(dt->valuestring);
    if (!di)
        return st_bad(f, "tensor '%s': unknown dtype '%.40s'", t->name, dt->valuestring);
    t->st_dtype = di->name;
    t->qf = di->qf;
    uint64_t numel = 0; /* set by st_parse_shape on success */
    QF_TRY(st_parse_shape(f, t, cJSON_GetObjectItemCaseSensitive(e, "shape"), &numel));
    QF_TRY(st_parse_offsets(f, t, cJSON_GetObjectItemCaseSensitive(e, "data_offsets")));
    return st_check_size(f, t, di, numel);
}

static int st_cmp_name(const void *a, const void *b) {
    return strcmp(((const qf_st_tensor *)a)->name, ((const qf_st_tensor *)b)->name);
}

static int st_cmp_begin(const void *a, const void *b) {
    const qf_st_tensor *x = *(const qf_st_tensor *const *)a, *y = *(const qf_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The data section is the tensors' bytes and nothing else, as the format's reference reader
 * requires: by begin, the tensors (empty ones occupy no bytes) follow each other from byte 0 to
 * the section's end. Two sharing bytes would alias data; a gap or trailing bytes mean a file
 * cut, padded or written by something else. */
static qf_status st_check_layout(const qf_st_file *f) {
    const qf_st_tensor **by = malloc(((size_t)f->n + 1) * sizeof *by);
    if (!by)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "safetensors file %s: out of memory", f->path);
    int m = 0;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > f->t[i].begin)
            by[m++] = &f->t[i];
    qsort(by, (size_t)m, sizeof *by, st_cmp_begin);
    qf_status s = QF_OK;
    uint64_t at = 0; /* where the next tensor must begin */
    for (int i = 0; i < m && s == QF_OK; i++) {
        if (by[i]->begin < at)
            s = st_bad(f, "tensors '%s' and '%s' overlap in the data section", by[i - 1]->name,
                       by[i]->name);
        else if (by[i]->begin > at)
            s = st_bad(f, "tensor '%s' begins at data byte %llu, after a gap of %llu bytes no "
                          "tensor holds", by[i]->name, (unsigned long long)by[i]->begin,
                       (unsigned long long)(by[i]->begin - at));
        at = by[i]->end;
    }
    if (s == QF_OK && at != f->data_size)
        s = st_bad(f, "the data section has %llu bytes after its last tensor (%llu of %llu "
                      "bytes held)", (unsigned long long)(f->data_size - at),
                   (unsigned long long)at, (unsigned long long)f->data_size);
    free(by);
    return s;
}

/* The length of the UTF-8 sequence at s (at most n bytes left), or 0 where it is not one:
 * overlong forms, UTF-16 surrogates and code points past U+10FFFF are not (RFC 3629, 4). */
static size_t st_utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80)
        return 1;
    const size_t len = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
                       : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                       : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                                      : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
        return 0;
    return len;
}

/* Parses the header text; validates every entry, name uniqueness and the data's layout. */
static qf_status st_parse_header(qf_st_file *f, const char *hdr, size_t n) {
    /* JSON allows no raw control byte but whitespace, and a name is a C string here: such a byte,
     * or a \u0000 escape (which would cut a name short), is refused before parsing */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)hdr[i];
        if (c >= 0x80) { /* JSON text is UTF-8 (RFC 8259, 8.1); names are printed as they are */
            const size_t len = st_utf8_len((const unsigned char *)hdr + i, n - i);
            if (len == 0)
                return st_bad(f, "header is not UTF-8 (byte 0x%02x at byte %zu)", c, i);
            i += len - 1;
            continue;
        }
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return st_bad(f, "header has a control byte 0x%02x at byte %zu (JSON allows none)",
                          c, i);
        if (c == '\\' && i + 5 < n && memcmp(hdr + i + 1, "u0000", 5) == 0)
            return st_bad(f, "header has a \\u0000 escape at byte %zu (a name cannot hold NUL)",
                          i);
        if (c == '\\')
            i++; /* the escaped character: "\\\\u0000" is a backslash, then text */
    }
    const char *end = NULL;
    f->json = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!f->json)
        return st_bad(f, "header is not valid JSON (error near header byte %ld)",
                      end ? (long)(end - hdr) : -1L);
    for (; end && end < hdr + n; end++) /* writers pad with spaces to 8 bytes; nothing else */
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
            return st_bad(f, "header JSON has trailing garbage at byte %ld", (long)(end - hdr));
    if (!cJSON_IsObject(f->json))
        return st_bad(f, "header JSON is not an object");
    f->t = calloc((size_t)cJSON_GetArraySize(f->json) + 1, sizeof *f->t);
    if (!f->t)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "safetensors file %s: out of memory", f->path);
    const cJSON *e;
    cJSON_ArrayForEach(e, f->json) {
        if (e->string && strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e))
                return st_bad(f, "__metadata__ is not a JSON object");
            continue;
        }
        QF_TRY(st_parse_entry(f, e, &f->t[f->n]));
        f->n++;
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, st_cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->t[i - 1].name, f->t[i].name) == 0)
            return st_bad(f, "tensor '%s' appears twice in the header", f->t[i].name);
    return st_check_layout(f);
}

/* Reads and validates f->path into f: a file of at most max_bytes. */
static qf_status st_load(qf_st_file *f, uint64_t max_bytes) {
    FILE *fp = NULL;
    char *hdr = NULL;
    uint64_t size = 0, n = 0;
    qf_status s = st_open_fp(f, &fp, &size);
    if (s == QF_OK && size > max_bytes)
        s = st_bad(f, "%llu bytes, more than the %llu this reader takes (it holds the whole "
                   "file in memory)", (unsigned long long)size, (unsigned long long)max_bytes);
    if (s == QF_OK)
        s = st_read_parts(f, fp, size, &hdr, &n);
    if (fp)
        fclose(fp);
    if (s == QF_OK)
        s = st_parse_header(f, hdr, (size_t)n);
    free(hdr); /* cJSON copied what it keeps */
    return s;
}

qf_status qf_st_open(const char *path, qf_st_file **out) {
    return qf_st_open_max(path, UINT64_MAX, out);
}

qf_status qf_st_open_max(const char *path, uint64_t max_bytes, qf_st_file **out) {
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_st_open: out must not be NULL");
    *out = NULL;
    if (!path)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_st_open: path must not be NULL");
    qf_st_file *f = calloc(1, sizeof *f);
    size_t len = strlen(path);
    if (f)
        f->path = malloc(len + 1);
    if (!f || !f->path) {
        free(f);
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_st_open: out of memory opening %s", path);
    }
    memcpy(f->path, path, len + 1);
    qf_status s = st_load(f, max_bytes);
    if (s != QF_OK) {
        qf_st_close(f);
        return s;
    }
    *out = f;
    return QF_OK;
}

void qf_st_close(qf_st_file *f) {
    if (!f)
        return;
    cJSON_Delete(f->json);
    free(f->t);
    free(f->data);
    free(f->path);
    free(f);
}

qf_status qf_st_get(const qf_st_file *f, const char *name, qf_dtype *dtype, int *ndim,
                    int64_t dims[8], const void **data) {
    if (!f || !name)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_st_get: f and name must not be NULL");
    qf_st_tensor key = {.name = name};
    const qf_st_tensor *t = f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, st_cmp_name)
                                 : NULL;
    if (!t)
        return qf_set_error(QF_ERR_NOT_FOUND, "safetensors file %s: no tensor named '%s'",
                            f->path, name);
    if (t->qf < 0)
        return qf_set_error(QF_ERR_UNSUPPORTED,
                            "safetensors file %s: tensor '%s' has dtype %s; qfuse reads only "
                            "F32, F16 and BF16", f->path, name, t->st_dtype);
    if (dtype)
        *dtype = (qf_dtype)t->qf;
    if (ndim)
        *ndim = t->ndim;
    if (dims)
        memcpy(dims, t->dims, (size_t)t->ndim * sizeof dims[0]);
    if (data)
        *data = f->data + t->begin;
    return QF_OK;
}

int qf_st_count(const qf_st_file *f) {
    return f ? f->n : 0;
}

const char *qf_st_name(const qf_st_file *f, int i) {
    return f && i >= 0 && i < f->n ? f->t[i].name : NULL;
}
