/* qf_arch.h: the one spelling of a GPU architecture on the command line, shared by qfuse-gen and
 * qfuse-cache. Header-only, host code. */
#ifndef QF_ARCH_H
#define QF_ARCH_H

#include <string.h>

#define QF_ARCH_MIN 89  /* FP8 (E4M3/E5M2) conversions and tensor cores: Ada, Hopper and later */
#define QF_ARCH_MAX 199

/* The feature suffix of the NVRTC target qfuse compiles for compute capability arch: "a" for
 * sm_90 (sm_90a: the architecture-specific instructions of Hopper, wgmma and setmaxnreg; such a
 * binary runs on sm_90 devices only, which is all a JIT needs), "" for every other arch. The
 * target, suffix included, is in every fusion key (its NVRTC options). */
static inline const char *qf_arch_feature(int arch) {
    return arch == 90 ? "a" : "";
}

/* "sm_90" -> 90; -1 unless the text is "sm_" and two or three digits in QF_ARCH_MIN..QF_ARCH_MAX,
 * optionally followed by the arch's own feature suffix (qf_arch_feature: "sm_90a" is sm_90, the
 * target the runtime compiles for it); no sign, space, leading zero or other suffix. */
static inline int qf_arch_parse(const char *s) {
    if (!s || strncmp(s, "sm_", 3) != 0)
        return -1;
    size_t n = strspn(s + 3, "0123456789");
    if (n < 2 || n > 3 || s[3] == '0') /* "sm_090" is not a spelling of sm_90 */
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++)
        v = 10 * v + (s[3 + i] - '0');
    if (v < QF_ARCH_MIN || v > QF_ARCH_MAX)
        return -1;
    const char *rest = s + 3 + n;
    return *rest == '\0' || (*qf_arch_feature(v) && strcmp(rest, qf_arch_feature(v)) == 0) ? v : -1;
}

#endif /* QF_ARCH_H */
