/* gen_buf.h: growable text buffers, error messages and file reading for qfuse-gen. */
#ifndef QF_GEN_BUF_H
#define QF_GEN_BUF_H

#include <stdarg.h>
#include <stddef.h>

#if defined(__GNUC__)
#define QF_GEN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QF_GEN_PRINTF(a, b)
#endif

#define QF_GEN_BANNER_DASH "\xe2\x80\x94" /* U+2014 EM DASH, UTF-8: generated files' banner */

/* What kind of failure a qf_gen_err records. ORDER GEN_ERR */
typedef enum qf_gen_err_kind {
    QF_GEN_ERR_INVALID = 0,     /* bad input: a recipe or template that breaks a rule */
    QF_GEN_ERR_NO_FILE = 1,     /* a file that cannot be opened */
    QF_GEN_ERR_UNSUPPORTED = 2, /* a valid request not implemented (a reserved family) */
    QF_GEN_ERR_KIND_COUNT
} qf_gen_err_kind;

/* The message of a failed generator step ("recipes/x.lua: field 'margin' (...)"). */
typedef struct qf_gen_err {
    char msg[4096];
    qf_gen_err_kind kind; /* what failed, for callers that map it to a status (the runtime) */
} qf_gen_err;

/* Formats the message into e (when e is not NULL) and returns -1, so callers write
 * `return qf_gen_fail(e, ...)`. */
int qf_gen_fail(qf_gen_err *e, const char *fmt, ...) QF_GEN_PRINTF(2, 3);

/* A growable NUL-terminated byte string. Owns p. An allocation failure sets `failed` and turns
 * every later append into a no-op, so builders check once at the end. */
typedef struct qf_gen_buf {
    char *p;
    size_t len, cap;
    int failed;
} qf_gen_buf;

void qf_gen_buf_init(qf_gen_buf *b);
void qf_gen_buf_free(qf_gen_buf *b);
void qf_gen_buf_addn(qf_gen_buf *b, const char *s, size_t n);
void qf_gen_buf_adds(qf_gen_buf *b, const char *s);
void qf_gen_buf_addf(qf_gen_buf *b, const char *fmt, ...) QF_GEN_PRINTF(2, 3);
/* Hands the string over to the caller (malloc'ed, never NULL unless failed) and resets b. */
char *qf_gen_buf_take(qf_gen_buf *b);

/* Appends s[0..n) as a sequence of adjacent C string literals, one per source line, each line
 * indented by `indent` spaces. Escapes quotes, backslashes, control and non-ASCII bytes (octal),
 * and '?' after '?' (no trigraphs), so the compiled string holds exactly the input bytes. */
void qf_gen_buf_add_c_literal(qf_gen_buf *b, const char *s, size_t n, int indent);

/* Reads a whole file into a malloc'ed NUL-terminated string (*len bytes before the NUL).
 * `what` names the file's role in the error ("template", "header"). */
int qf_gen_read_file(const char *path, const char *what, char **text, size_t *len, qf_gen_err *e);

/* Bytes of a path a message shows: a longer one is shown as "..." and its last
 * QF_GEN_PATH_SHOWN bytes (the file name and the directories nearest it, from a UTF-8 character
 * boundary), so that it leaves room in the message (qf_gen_err.msg, 4096 bytes) for the reason;
 * control characters and bytes that are not UTF-8 are shown as \xNN, so a file name cannot break
 * the message's line or reach a terminal as an escape sequence. */
#define QF_GEN_PATH_SHOWN 200
typedef char qf_gen_shown[3 + 4 * QF_GEN_PATH_SHOWN + 1];
/* path as messages show it (see QF_GEN_PATH_SHOWN), written into buf; returns buf. */
const char *qf_gen_path_shown(const char *path, qf_gen_shown *buf);
/* The same for the first n bytes of path (a leading component: shown by its own end). */
const char *qf_gen_path_shown_n(const char *path, size_t n, qf_gen_shown *buf);

#endif /* QF_GEN_BUF_H */
