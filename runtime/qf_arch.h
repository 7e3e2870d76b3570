/* qf_arch.h: the one spelling of a GPU architecture on the command line, shared by qfuse-gen and
 * qfuse-cache. Header-only, host code. */
#ifndef QF_ARCH_H
#define QF_ARCH_H

#include <string.h>

#define QF_ARCH_MIN 89  /* FP8 (E4M3/E5M2) conversions and tensor cores: Ada, Hopper and later */
#define QF_ARCH_MAX 199

/* "sm_90" -> 90; -1 unless the text is "sm_" and two or three digits in QF_ARCH_MIN..QF_ARCH_MAX
 * (no sign, space or suffix such as "sm_90a"). */
static inline int qf_arch_parse(const char *s) {
    if (!s || strncmp(s, "sm_", 3) != 0)
        return -1;
    size_t n = strspn(s + 3, "0123456789");
    if (n < 2 || n > 3 || s[3 + n] != '\0')
        return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++)
        v = 10 * v + (s[3 + i] - '0');
    return v >= QF_ARCH_MIN && v <= QF_ARCH_MAX ? v : -1;
}

#endif /* QF_ARCH_H */
