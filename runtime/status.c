/* status.c: thread-local error messages, warnings and status names. */
#include "status.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

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

/* Warns once per process about variable `name` (a string literal: compared by address). */
static int qf_env_warn_once(const char *name) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static const char *warned[16];
    int first = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 16 && first; i++) {
        if (warned[i] == name)
            first = 0;
        else if (!warned[i]) {
            warned[i] = name;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return first;
}

int qf_env_flag(const char *name) {
    static const char *const on[] = {"1", "true", "yes", "on"};
    static const char *const off[] = {"0", "false", "no", "off"};
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        if (strcasecmp(v, on[i]) == 0)
            return 1;
        if (strcasecmp(v, off[i]) == 0)
            return 0;
    }
    if (qf_env_warn_once(name))
        qf_warn("%s=%s is not a boolean (1, true, yes, on or 0, false, no, off): read as off",
                name, v);
    return 0;
}

int qf_env_choice(const char *name, const char *const *values, int n) {
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    for (int i = 0; i < n; i++)
        if (strcasecmp(v, values[i]) == 0)
            return i;
    if (qf_env_warn_once(name)) {
        char list[160] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                     values[i]);
        qf_warn("%s=%s is not one of %s: read as %s", name, v, list, values[0]);
    }
    return 0;
}

int qf_verbose(void) {
    return qf_env_flag("QFUSE_VERBOSE");
}
