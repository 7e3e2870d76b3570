/* jit_compile.c: NVRTC options, version and the compile of one kernel source to a CUBIN. */
#include "jit_compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUDA_VERSION only: which toolkit's headers this file was built against */
/* NOTES: the build passes the toolkit as -I, not -isystem, and nvrtc.h tests undefined macros in
 * an #if; silence just that here rather than drop -Wundef for the whole file. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#include <nvrtc.h>

#include "qf_arch.h"
#pragma GCC diagnostic pop

/* One check for every NVRTC call (STYLE 21): records the expression, where it failed and NVRTC's
 * own error string, then returns QF_ERR_NVRTC from the enclosing function. */
#define QF_NVRTC_CHECK(expr)                                                                       \
    do {                                                                                           \
        nvrtcResult qf_nvrtc_r_ = (expr);                                                          \
        if (qf_nvrtc_r_ != NVRTC_SUCCESS)                                                          \
            return qf_set_error(QF_ERR_NVRTC, "%s failed at %s:%d (%s): %s", #expr, __FILE__,      \
                                __LINE__, __func__, nvrtcGetErrorString(qf_nvrtc_r_));             \
    } while (0)

/* Longest log kept inline in the 8 KiB thread-local message; a longer one also goes to stderr. */
#define QF_JIT_LOG_INLINE 6000

/* {===================================================================== options and version */

/* The architectures this NVRTC targets, ascending as NVRTC lists them: their count (at most cap
 * stored in archs), 0 when it cannot say. */
static int qf_jit_archs(int *archs, int cap) {
    int n = 0;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0)
        return 0;
    int *all = malloc((size_t)n * sizeof *all);
    if (!all || nvrtcGetSupportedArchs(all) != NVRTC_SUCCESS) {
        free(all);
        return 0;
    }
    for (int i = 0; i < n && i < cap; i++)
        archs[i] = all[i];
    free(all);
    return n < cap ? n : cap;
}

int qf_jit_max_arch(void) {
    int archs[64], best = 0;
    const int n = qf_jit_archs(archs, 64);
    for (int i = 0; i < n; i++)
        best = archs[i] > best ? archs[i] : best;
    return best;
}

int qf_jit_arch_known(int arch, char *list, size_t list_size) {
    int archs[64], known = 0, best = 0;
    const int n = qf_jit_archs(archs, 64);
    if (list && list_size)
        list[0] = '\0';
    for (int i = 0; i < n; i++) {
        known |= archs[i] == arch;
        best = archs[i] > best ? archs[i] : best;
        if (list && archs[i] >= QF_ARCH_MIN) {
            const size_t used = strlen(list);
            snprintf(list + used, list_size - used, "%ssm_%d", used ? ", " : "", archs[i]);
        }
    }
    return n == 0 || known || arch > best;
}

/* NOTES: STYLE 18: a device newer than this NVRTC gets the newest arch NVRTC knows rather than a
 * compile error. -lineinfo is decided here, not in qf_jit_compile, because it changes the CUBIN
 * and these options go into the fusion key. */
int qf_jit_options(int arch, const char *const *extra, int n_extra,
                   const char *opts[QF_JIT_MAX_OPTIONS], char archbuf[64]) {
    static const char *const base[] = {"--std=c++17", "-default-device", "--fmad=false"};
    QF_ASSERT(opts && archbuf && n_extra >= 0 && (n_extra == 0 || extra));
    int max = qf_jit_max_arch();
    int n = 0;
    const int target = max > 0 && arch > max ? max : arch;
    snprintf(archbuf, 64, "--gpu-architecture=sm_%d%s", target, qf_arch_feature(target));
    opts[n++] = archbuf;
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        opts[n++] = base[i];
    if (qf_env_flag("QFUSE_LINEINFO"))
        opts[n++] = "-lineinfo";
    if (n + n_extra > QF_JIT_MAX_OPTIONS) {
        qf_set_error(QF_ERR_INVALID_ARG,
                     "qf_jit_options: %d extra options do not fit in QF_JIT_MAX_OPTIONS (%d) with "
                     "qfuse's own %d",
                     n_extra, QF_JIT_MAX_OPTIONS, n);
        return -1;
    }
    for (int i = 0; i < n_extra; i++)
        opts[n++] = extra[i];
    return n;
}

void qf_jit_nvrtc_version(int *major, int *minor) {
    if (nvrtcVersion(major, minor) != NVRTC_SUCCESS)
        *major = *minor = 0; /* cannot happen with a loadable libnvrtc; keys stay well defined */
}

/* =====================================================================} */

/* {===================================================================== compile */

/* Joins opts with spaces into buf (truncating, always terminated). */
static void qf_jit_join(const char *const *opts, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++) {
        int w = snprintf(buf + len, cap - len, "%s%s", i ? " " : "", opts[i]);
        len += w > 0 ? (size_t)w : 0;
    }
}

/* The program log as a malloc'ed string ("" when empty). */
static qf_status qf_jit_get_log(nvrtcProgram prog, char **log) {
    size_t n = 0;
    QF_NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &n));
    *log = malloc(n + 1);
    if (!*log)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_jit_compile: no memory for a %zu-byte log",
                            n);
    (*log)[0] = (*log)[n] = '\0';
    if (n > 0)
        QF_NVRTC_CHECK(nvrtcGetProgramLog(prog, *log));
    return QF_OK;
}

/* Records a failed compile: what, why, the options, both versions and the log (STYLE 18). */
static qf_status qf_jit_fail(const char *name, nvrtcResult r, const char *log,
                             const char *const *opts, int n_opts) {
    char optstr[1024];
    int major = 0, minor = 0;
    size_t loglen = strlen(log);
    qf_jit_join(opts, n_opts, optstr, sizeof optstr);
    qf_jit_nvrtc_version(&major, &minor);
    if (loglen > QF_JIT_LOG_INLINE) /* the message would cut it; keep the whole log visible */
        fprintf(stderr, "qfuse: NVRTC log for %s (full):\n%s\n", name, log);
    return qf_set_error(QF_ERR_NVRTC,
                        "NVRTC could not compile %s: %s\n  options: %s\n  NVRTC %d.%d at run "
                        "time; built against CUDA %d.%d headers\n  (QFUSE_DUMP_SOURCE=1 prints "
                        "the source)\n%.*s%s",
                        name, nvrtcGetErrorString(r), optstr, major, minor, CUDA_VERSION / 1000,
                        CUDA_VERSION % 1000 / 10, QF_JIT_LOG_INLINE, log,
                        loglen > QF_JIT_LOG_INLINE ? "\n[log truncated; full log on stderr]" : "");
}

/* Compiles prog; on failure records the log. QFUSE_VERBOSE prints the options and log anyway.
 * On success the log goes to *log_out (when not NULL; the caller frees it). */
static qf_status qf_jit_build(nvrtcProgram prog, const char *name, const char *const *opts,
                              int n_opts, char **log_out) {
    char *log = NULL;
    nvrtcResult r = nvrtcCompileProgram(prog, n_opts, opts);
    QF_TRY(qf_jit_get_log(prog, &log));
    qf_status s = QF_OK;
    if (r != NVRTC_SUCCESS) {
        s = qf_jit_fail(name, r, log, opts, n_opts);
    } else {
        if (qf_verbose()) {
            char optstr[1024];
            qf_jit_join(opts, n_opts, optstr, sizeof optstr);
            fprintf(stderr, "qfuse: compiled %s with %s\n%s", name, optstr, log);
        }
        if (log_out) {
            *log_out = log;
            log = NULL;
        }
    }
    free(log);
    return s;
}

/* Copies the CUBIN out of prog into malloc'ed memory. */
static qf_status qf_jit_get_cubin(nvrtcProgram prog, const char *name, void **cubin, size_t *size) {
    size_t n = 0;
    QF_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n));
    if (n == 0) /* e.g. a compute_XX target: NVRTC made PTX only */
        return qf_set_error(QF_ERR_NVRTC,
                            "NVRTC produced no CUBIN for %s; pass an sm_XX architecture", name);
    char *buf = malloc(n);
    if (!buf)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY,
                            "qf_jit_compile: no memory for a %zu-byte CUBIN of %s", n, name);
    *cubin = buf; /* handed over first so qf_jit_compile frees it if the copy fails */
    *size = n;
    QF_NVRTC_CHECK(nvrtcGetCUBIN(prog, buf));
    return QF_OK;
}

qf_status qf_jit_compile(const char *name, const char *source, const char *const *header_names,
                         const char *const *headers, int n_headers, const char *const *opts,
                         int n_opts, void **cubin, size_t *size) {
    return qf_jit_compile_log(name, source, header_names, headers, n_headers, opts, n_opts, cubin,
                              size, NULL);
}

qf_status qf_jit_compile_log(const char *name, const char *source,
                             const char *const *header_names, const char *const *headers,
                             int n_headers, const char *const *opts, int n_opts, void **cubin,
                             size_t *size, char **log) {
    if (log)
        *log = NULL;
    if (!name || !source || !cubin || !size || n_headers < 0 || n_opts < 0 ||
        (n_headers > 0 && (!header_names || !headers)) || (n_opts > 0 && !opts))
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_jit_compile: null or negative argument");
    *cubin = NULL;
    *size = 0;
    if (qf_env_flag("QFUSE_DUMP_SOURCE"))
        fprintf(stderr, "qfuse: source of %s:\n%s\nqfuse: end of source of %s\n", name, source,
                name);
    nvrtcProgram prog;
    QF_NVRTC_CHECK(nvrtcCreateProgram(&prog, source, name, n_headers, headers, header_names));
    qf_status s = qf_jit_build(prog, name, opts, n_opts, log);
    if (s == QF_OK)
        s = qf_jit_get_cubin(prog, name, cubin, size);
    nvrtcDestroyProgram(&prog); /* nothing useful to do if this fails */
    if (s != QF_OK) {
        free(*cubin);
        *cubin = NULL;
        *size = 0;
        if (log) {
            free(*log);
            *log = NULL;
        }
    }
    return s;
}

/* =====================================================================} */
