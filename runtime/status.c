/* status.c: thread-local error messages, warnings and status names. */
#include "status.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char qf_errbuf[8192];

static const char *const qf_status_names[] = {
    [QF_OK] = "QF_OK",
    [QF_ERR_INVALID_ARG] = "QF_ERR_INVALID_ARG",
    [QF_ERR_UNSUPPORTED] = "QF_ERR_UNSUPPORTED",
    [QF_ERR_NO_DEVICE] = "QF_ERR_NO_DEVICE",
    [QF_ERR_CUDA] = "QF_ERR_CUDA",
    [QF_ERR_NVRTC] = "QF_ERR_NVRTC",
    [QF_ERR_CUBLAS] = "QF_ERR_CUBLAS",
    [QF_ERR_CACHE] = "QF_ERR_CACHE",
    [QF_ERR_OUT_OF_MEMORY] = "QF_ERR_OUT_OF_MEMORY",
    [QF_ERR_NOT_FOUND] = "QF_ERR_NOT_FOUND",
    [QF_ERR_INTERNAL] = "QF_ERR_INTERNAL",
};
_Static_assert(sizeof(qf_status_names) / sizeof(qf_status_names[0]) == QF_STATUS_COUNT,
               "qf_status_names out of sync with qf_status");

const char *qf_status_name(qf_status s) {
    if ((unsigned)s >= QF_STATUS_COUNT)
        return "QF_STATUS_UNKNOWN";
    return qf_status_names[s];
}

const char *qf_last_error(void) {
    return qf_errbuf;
}

qf_status qf_set_error(qf_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qf_errbuf, sizeof qf_errbuf, fmt, ap);
    va_end(ap);
    if (qf_verbose())
        fprintf(stderr, "qfuse: %s: %s\n", qf_status_name(s), qf_errbuf);
    return s;
}

void qf_clear_error(void) {
    qf_errbuf[0] = '\0';
}

void qf_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("qfuse: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int qf_verbose(void) {
    const char *v = getenv("QFUSE_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}
