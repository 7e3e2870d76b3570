/* status.h: internal error recording (thread-local message) and assertion macros. */
#ifndef QF_STATUS_H
#define QF_STATUS_H

#include <stdio.h>
#include <stdlib.h>

#include "qfuse.h"

#if defined(__GNUC__)
#define QF_INTERNAL __attribute__((visibility("hidden")))
#define QF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define QF_INTERNAL
#define QF_PRINTF(a, b)
#endif

/* Records a printf-style message as this thread's last error and returns s. */
QF_INTERNAL qf_status qf_set_error(qf_status s, const char *fmt, ...) QF_PRINTF(2, 3);
/* Clears this thread's last error (called at the start of every public op). */
QF_INTERNAL void qf_clear_error(void);
/* Prints "qfuse: warning: ..." to stderr (one line). */
QF_INTERNAL void qf_warn(const char *fmt, ...) QF_PRINTF(1, 2);
/* The boolean environment variable `name` (a string literal): 1 for 1, true, yes or on, 0 when
 * unset, empty, 0, false, no or off (any case); any other value is read as 0, with one warning
 * per process. */
QF_INTERNAL int qf_env_flag(const char *name);
/* The index of environment variable `name`'s value in values[0..n) (case-insensitive); 0, the
 * default, when it is unset or empty, and, with one warning per variable, when it is none of
 * them. */
QF_INTERNAL int qf_env_choice(const char *name, const char *const *values, int n);
/* qf_env_flag("QFUSE_VERBOSE"): errors are also printed to stderr. */
QF_INTERNAL int qf_verbose(void);

/* Internal invariants: abort with file:line:func. On in every build (cheap checks only). */
#define QF_ASSERT(c)                                                                           \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "qfuse: %s:%d:%s: assertion '%s' failed\n", __FILE__, __LINE__,   \
                    __func__, #c);                                                             \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* Propagates a non-QF_OK status. */
#define QF_TRY(expr)                                                                           \
    do {                                                                                       \
        qf_status qf_try_s_ = (expr);                                                          \
        if (qf_try_s_ != QF_OK)                                                                \
            return qf_try_s_;                                                                  \
    } while (0)

#endif /* QF_STATUS_H */
