/* jit_compile.h: NVRTC compile of a generated kernel to a CUBIN for one architecture. */
#ifndef QF_JIT_COMPILE_H
#define QF_JIT_COMPILE_H

#include "status.h"

#define QF_JIT_MAX_OPTIONS 16

/* The NVRTC options qfuse uses for arch (90 -> "--gpu-architecture=sm_90a", with the feature
 * suffix of qf_arch_feature; 89 -> "--gpu-architecture=sm_89"; an arch above the newest one this
 * NVRTC supports is clamped to that one), "--std=c++17", "-default-device", "--fmad=false", "-lineinfo" when QFUSE_LINEINFO=1, then the caller's extra options (-D...).
 * [out] opts: pointers into static storage, archbuf or `extra` (does not copy them; they must
 *             outlive opts). [out] archbuf: holds the arch option.
 * Returns the count, or -1 (QF_ERR_INVALID_ARG recorded) when the extras do not fit in
 * QF_JIT_MAX_OPTIONS. These exact options go into the fusion key. */
QF_INTERNAL int qf_jit_options(int arch, const char *const *extra, int n_extra,
                               const char *opts[QF_JIT_MAX_OPTIONS], char archbuf[64]);

/* Version of the NVRTC library loaded at run time. */
QF_INTERNAL void qf_jit_nvrtc_version(int *major, int *minor);

/* Highest architecture this NVRTC can target (e.g. 121), or 0 when it cannot say. A newer device
 * gets code for this one (qf_jit_options). */
QF_INTERNAL int qf_jit_max_arch(void);

/* 1 when this NVRTC compiles for compute capability arch, or arch is newer than all it knows (a
 * newer device gets the newest target, qf_jit_options), or NVRTC cannot list its targets; 0 for
 * an arch inside its range that it does not list (sm_91: no such GPU). list (list_size bytes, may
 * be NULL) gets the targets from QF_ARCH_MIN on, "sm_89, sm_90, ...". */
QF_INTERNAL int qf_jit_arch_known(int arch, char *list, size_t list_size);

/* Compiles `source` (program name `name`, with the in-memory headers: header_names[i] is what
 * #include names, headers[i] its text; neither copied past the call) to a CUBIN with exactly opts.
 * On success *cubin is malloc'ed (caller frees) and *size set. On failure *cubin is NULL and it
 * returns QF_ERR_NVRTC with the NVRTC log, the options and the NVRTC and CUDA header versions in
 * qf_last_error() (a log too long for the message is also printed whole to stderr).
 * QFUSE_DUMP_SOURCE=1 prints the source to stderr before compiling; QFUSE_VERBOSE=1 prints the
 * options and the log even on success. */
QF_INTERNAL qf_status qf_jit_compile(const char *name, const char *source,
                                     const char *const *header_names, const char *const *headers,
                                     int n_headers, const char *const *opts, int n_opts,
                                     void **cubin, size_t *size);

/* qf_jit_compile that also hands over the compile log (NVRTC's and ptxas's messages: ptxas's
 * "Potential Performance Loss" notes land there) of a successful compile in *log (malloc'ed,
 * "" when empty; the caller frees it). On failure *log is NULL. log NULL: as qf_jit_compile. */
QF_INTERNAL qf_status qf_jit_compile_log(const char *name, const char *source,
                                         const char *const *header_names,
                                         const char *const *headers, int n_headers,
                                         const char *const *opts, int n_opts, void **cubin,
                                         size_t *size, char **log);

#endif /* QF_JIT_COMPILE_H */
