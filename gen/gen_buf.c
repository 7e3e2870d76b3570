/* gen_buf.c: growable text buffers, error messages and file reading for qfuse-gen. */
#include "gen_buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int qf_gen_fail(qf_gen_err *e, const char *fmt, ...) {
    if (e) {
        e->kind = QF_GEN_ERR_INVALID;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void qf_gen_buf_init(qf_gen_buf *b) {
    memset(b, 0, sizeof *b);
}

void qf_gen_buf_free(qf_gen_buf *b) {
    free(b->p);
    qf_gen_buf_init(b);
}

/* Makes room for n more bytes plus the NUL. */
static int qf_gen_buf_grow(qf_gen_buf *b, size_t n) {
    if (b->failed)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void qf_gen_buf_addn(qf_gen_buf *b, const char *s, size_t n) {
    if (qf_gen_buf_grow(b, n) != 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void qf_gen_buf_adds(qf_gen_buf *b, const char *s) {
    qf_gen_buf_addn(b, s, strlen(s));
}

void qf_gen_buf_addf(qf_gen_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || qf_gen_buf_grow(b, (size_t)n) != 0) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *qf_gen_buf_take(qf_gen_buf *b) {
    if (b->failed || qf_gen_buf_grow(b, 0) != 0) {
        qf_gen_buf_free(b);
        return NULL;
    }
    char *p = b->p;
    p[b->len] = '\0'; /* nothing added yet: the allocation is fresh */
    qf_gen_buf_init(b);
    return p;
}

/* Appends the escaped form of one byte; prev is the byte before it (a second '?' is escaped:
 * no trigraph). */
static void qf_gen_buf_add_escaped(qf_gen_buf *b, unsigned char c, unsigned char prev) {
    static const char *const named[128] = {['"'] = "\\\"", ['\\'] = "\\\\", ['\n'] = "\\n",
                                           ['\t'] = "\\t"};
    if (c < 128 && named[c])
        qf_gen_buf_adds(b, named[c]);
    else if (c == '?' && prev == '?')
        qf_gen_buf_adds(b, "\\?");
    else if (c < 0x20 || c >= 0x7f) /* NOTES: 3-digit octal never swallows a following digit */
        qf_gen_buf_addf(b, "\\%03o", c);
    else
        qf_gen_buf_addn(b, (const char *)&c, 1);
}

void qf_gen_buf_add_c_literal(qf_gen_buf *b, const char *s, size_t n, int indent) {
    size_t i = 0;
    if (n == 0) {
        qf_gen_buf_addf(b, "%*s\"\"", indent, "");
        return;
    }
    while (i < n) {
        qf_gen_buf_addf(b, "%s%*s\"", i ? "\n" : "", indent, "");
        unsigned char prev = 0;
        for (; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            qf_gen_buf_add_escaped(b, c, prev);
            prev = c;
            if (c == '\n') {
                i++;
                break;
            }
        }
        qf_gen_buf_adds(b, "\"");
    }
}

int qf_gen_read_file(const char *path, const char *what, char **text, size_t *len, qf_gen_err *e) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return qf_gen_fail(e, "%s: cannot open %s (%s)", path, what, strerror(errno));
    qf_gen_buf b;
    qf_gen_buf_init(&b);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        qf_gen_buf_addn(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    size_t got = b.len;
    *text = qf_gen_buf_take(&b);
    if (bad || !*text) {
        free(*text);
        *text = NULL;
        return qf_gen_fail(e, "%s: cannot read %s", path, what);
    }
    *len = got;
    return 0;
}

/* The length of the well-formed UTF-8 character at p (1-4, none of U+0000..U+001F or U+007F)
 * within the `left` bytes there, or 0 for a byte that starts none. */
static size_t qf_gen_utf8_len(const unsigned char *p, size_t left) {
    if (p[0] >= 0x20 && p[0] < 0x7F)
        return 1;
    const size_t n = p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
    if (n == 0 || n > left || p[0] >= 0xF5)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    const unsigned cp = n == 2   ? (p[0] & 0x1Fu) << 6 | (p[1] & 0x3Fu)
                        : n == 3 ? (p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu)
                                 : (p[0] & 0x07u) << 18 | (p[1] & 0x3Fu) << 12 |
                                       (p[2] & 0x3Fu) << 6 | (p[3] & 0x3Fu);
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0; /* overlong, past Unicode, or a surrogate */
    return n;
}

const char *qf_gen_path_shown_n(const char *path, size_t n, qf_gen_shown *buf) {
    const unsigned char *p = (const unsigned char *)path, *end = p + n;
    size_t o = 0;
    if (n > QF_GEN_PATH_SHOWN) {
        p += n - QF_GEN_PATH_SHOWN;
        while (p < end && (*p & 0xC0) == 0x80) /* a continuation byte: start after its character */
            p++;
        memcpy(*buf, "...", 3), o = 3;
    }
    while (p < end) {
        const size_t c = qf_gen_utf8_len(p, (size_t)(end - p));
        if (c) {
            memcpy(*buf + o, p, c), o += c, p += c;
        } else {
            snprintf(*buf + o, sizeof *buf - o, "\\x%02X", *p++);
            o += 4;
        }
    }
    (*buf)[o] = '\0';
    return *buf;
}

const char *qf_gen_path_shown(const char *path, qf_gen_shown *buf) {
    return qf_gen_path_shown_n(path, strlen(path), buf);
}
