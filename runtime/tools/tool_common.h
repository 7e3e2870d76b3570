/* tool_common.h: what every command-line tool shares (qfuse-gen, qfuse-cache, qfuse-bench,
 * qfuse-demo), with no CUDA: integer option values read strictly, the standard descriptors held
 * open, and the exit status of a run whose standard output could not be written. Header-only. */
#ifndef QF_TOOL_COMMON_H
#define QF_TOOL_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The decimal integer in v[0, len) into *out when it lies in lo..hi (lo >= 0): digits only (no
 * sign, space or leading zero before another digit), so that "+5", " 5" and "08" are refused
 * rather than read as 5 and 8. 0; -1 without a message when v is not such digits or is under
 * lo; -2 when it is digits above hi (too large, whatever its length). */
static inline int tool_count_parse(const char *v, size_t len, long long lo, long long hi,
                                   long long *out) {
    if (len == 0 || (v[0] == '0' && len > 1) || strspn(v, "0123456789") < len)
        return -1;
    long long n = 0;
    for (size_t i = 0; i < len; i++) { /* n * 10 + d <= hi, checked before it is made */
        const int d = v[i] - '0';
        if (d > hi || n > (hi - d) / 10)
            return -2;
        n = n * 10 + d;
    }
    if (n < lo)
        return -1;
    *out = n;
    return 0;
}

/* Nonzero when a separate argument reads as an option ("-x", "--x"; not "-" alone, nor a
 * negative number, which the value's own check refuses): the tools do not take it as the value
 * of the option before it ("--csv --help"); "--opt=-x" gives such a value. */
static inline int tool_looks_like_opt(const char *arg) {
    return arg && arg[0] == '-' && arg[1] != '\0' && (arg[1] < '0' || arg[1] > '9');
}

/* Nonzero when argv asks for the usage: "--help" or "-h" before "--" (after it every argument
 * is an operand). qfuse-gen and qfuse-cache then print their usage and exit 0, whatever else is
 * given; qfuse-bench and qfuse-demo read their options in order instead, so that a test can
 * check a parse by ending it with --help (docs/tools.md). */
static inline int tool_help_asked(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

/* Called first in main: each standard descriptor (0, 1, 2) that is closed is held by /dev/null
 * opened read-only, so that no file the tool opens (a CSV, a cache entry, a generated source)
 * takes its number and receives what the tool prints. Writes to it still fail with EBADF, as on
 * the closed descriptor (tool_stdout_status reports them), and reads see an empty input. */
static inline void tool_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            const int got = open("/dev/null", O_RDONLY);
            if (got >= 0 && got != fd) /* cannot happen: the lowest free number is fd */
                close(got);
        }
}

/* The exit status of a run that returns rc, once standard output is flushed: rc, or 1 (when rc
 * is 0) after "<prog>: cannot write the standard output: <reason>" on stderr when a write to it
 * failed (a full disk, a closed pipe, a descriptor closed at start: tool_std_fds), so that a
 * cut-off listing never passes for a whole one. */
static inline int tool_stdout_status(const char *prog, int rc) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    /* an earlier write failed and took its errno along: an empty write still says EBADF for a
     * descriptor that takes no writes (a device that fills up, /dev/full, takes it) */
    if (errno == 0 && write(STDOUT_FILENO, "", 0) == 0)
        errno = 0;
    fprintf(stderr, "%s: cannot write the standard output: %s\n", prog,
            errno ? strerror(errno) : "write error");
    return rc ? rc : 1;
}

#endif /* QF_TOOL_COMMON_H */
