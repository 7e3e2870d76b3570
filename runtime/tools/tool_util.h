/* tool_util.h: helpers shared by the command-line tools (qfuse-demo, qfuse-bench): fatal-error
 * checks, a wall clock and deterministic random inputs. Header-only; define QF_TOOL_NAME (the
 * program name used in messages) before including it. */
#ifndef QF_TOOL_UTIL_H
#define QF_TOOL_UTIL_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "qfuse.h"
#include "recipe_file.h"
#include "registry.h"
#include "tool_common.h"

#ifndef QF_TOOL_NAME
#error "define QF_TOOL_NAME before including tool_util.h"
#endif

/* After a usage error's one-line message (getopt's, or the tool's): where the full usage is. */
static inline void tool_usage_hint(void) {
    fputs("Try '" QF_TOOL_NAME " --help'.\n", stderr);
}

/* getopt's --help or an unknown option: with help, usage(stdout) and exit status 0; else the hint
 * and 2 (bad usage). */
static inline int tool_usage_exit(int help, void (*usage)(FILE *)) {
    if (!help) {
        tool_usage_hint();
        return 2;
    }
    usage(stdout);
    return 0;
}

/* getopt_long over the long options of longs only, each spelled in full, as --help lists them,
 * and -h for --help: another short option ("-q") is unknown to getopt, and an abbreviation
 * ("--it" for --iters), which getopt_long would take, is refused here, as is a separate value
 * that reads as an option ("--csv --help": tool_looks_like_opt). Returns getopt_long's value, or
 * '?' after the message (the tools then print the hint and exit 2). */
static inline int tool_getopt(int argc, char **argv, const struct option *longs) {
    int li = -1;
    const int c = getopt_long(argc, argv, "h", longs, &li); /* -h: --help, as qfuse-gen's */
    if (c == -1 || c == '?' || c == ':' || li < 0)
        return c;
    /* the element that named it: the one before optind, or before its separate value */
    const int separate = optarg && optind >= 2 && optarg == argv[optind - 1];
    const int at = optind - 1 - separate;
    const char *text = at > 0 ? argv[at] : "";
    const size_t n = strlen(longs[li].name);
    if (strncmp(text, "--", 2) != 0 || strncmp(text + 2, longs[li].name, n) != 0 ||
        (text[2 + n] != '\0' && text[2 + n] != '=')) {
        fprintf(stderr, QF_TOOL_NAME ": option '%.*s' is not spelled in full (--%s)\n",
                (int)strcspn(text, "="), text, longs[li].name);
        return '?';
    }
    if (separate && tool_looks_like_opt(optarg)) {
        fprintf(stderr, QF_TOOL_NAME ": option '--%s' needs a value (the next argument, '%s', is "
                "an option; a value that starts with '-' goes after '=')\n", longs[li].name,
                optarg);
        return '?';
    }
    return c;
}

/* Option c (getopt_long's return) given a second time, where its letter is not in repeatable
 * (the options that add to a list, and flags): a usage error naming it, as qfuse-gen and
 * qfuse-cache refuse a repeated option, rather than the last value silently winning. longs is
 * the getopt_long table (at most 32 entries); *seen holds a bit per entry, zero at the start.
 * 0, or -1 after the message. */
static inline int tool_once(const struct option *longs, const char *repeatable, int c,
                            unsigned *seen) {
    if (c <= 0 || strchr(repeatable, c))
        return 0;
    for (int i = 0; i < 32 && longs[i].name; i++) {
        if (longs[i].val != c)
            continue;
        if (*seen >> i & 1u) {
            fprintf(stderr, QF_TOOL_NAME ": --%s given twice\n", longs[i].name);
            tool_usage_hint();
            return -1;
        }
        *seen |= 1u << i;
        return 0;
    }
    return 0;
}

/* A file-name option's value v, or NULL after a usage error naming opt when it is empty. */
static inline const char *tool_path_arg(const char *opt, const char *v) {
    if (v && *v)
        return v;
    fprintf(stderr, QF_TOOL_NAME ": %s needs a file name\n", opt);
    tool_usage_hint();
    return NULL;
}

/* An integer option's value v in lo..hi into *out (tool_common.h's tool_count_parse). 0, or -1
 * after a usage error naming opt and the range. */
static inline int tool_count_arg(const char *opt, const char *v, long long lo, long long hi,
                                 long long *out) {
    if (tool_count_parse(v, strlen(v), lo, hi, out) == 0)
        return 0;
    fprintf(stderr, QF_TOOL_NAME ": %s '%s': expected an integer in %lld..%lld\n", opt, v, lo,
            hi);
    tool_usage_hint();
    return -1;
}

/* A CUDA runtime call that must succeed: prints the call and the error, exits 1. */
#define CUDA_OR_DIE(call)                                                                     \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, QF_TOOL_NAME ": %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* A qfuse call that must succeed: prints qf_last_error() (which names the op) and the status,
 * then exits 1. */
#define QF_OR_DIE(call)                                                                       \
    do {                                                                                      \
        qf_status s_ = (call);                                                                \
        if (s_ != QF_OK) {                                                                    \
            fprintf(stderr, QF_TOOL_NAME ": %s (%s)\n",                                       \
                    *qf_last_error() ? qf_last_error() : "failed", qf_status_name(s_));       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Exits with a message: host memory ran out (tool code); n, when known, the failed request. */
static inline void tool_out_of_memory(size_t n) {
    if (n)
        fprintf(stderr, QF_TOOL_NAME ": out of host memory (%zu bytes)\n", n);
    else
        fprintf(stderr, QF_TOOL_NAME ": out of host memory\n");
    exit(1);
}

/* malloc(n), never NULL (tool_out_of_memory instead; n = 0 allocates one byte). */
static inline void *tool_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        tool_out_of_memory(n);
    return p;
}

/* Monotonic wall clock in milliseconds. */
static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* splitmix64: deterministic, seedable input data. */
static inline uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_uniform(uint64_t *s) {
    return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Approximately N(0, 1): the sum of four uniforms, rescaled. */
static inline float rng_normal(uint64_t *s) {
    double u = rng_uniform(s) + rng_uniform(s) + rng_uniform(s) + rng_uniform(s);
    return (float)((u - 2.0) * 1.7320508);
}

/* --recipe NAME options (repeatable): which recipes of the registry a tool runs. */
#define QF_TOOL_MAX_RECIPES 16
typedef struct tool_recipes {
    int n;                                  /* 0: every recipe of the registry */
    const char *names[QF_TOOL_MAX_RECIPES];
} tool_recipes;

/* Adds one --recipe value; 0, or -1 with a message naming the registry's recipes. */
static inline int tool_recipes_add(tool_recipes *t, const char *name) {
    if (t->n == QF_TOOL_MAX_RECIPES) {
        fprintf(stderr, QF_TOOL_NAME ": more than %d --recipe options\n", QF_TOOL_MAX_RECIPES);
        tool_usage_hint();
        return -1;
    }
    for (int ri = 0; ri < qf_recipe_count; ri++)
        if (strcmp(qf_recipes[ri].name, name) == 0) {
            t->names[t->n++] = name;
            return 0;
        }
    fprintf(stderr, QF_TOOL_NAME ": --recipe '%s': no such recipe; the registry has:", name);
    for (int ri = 0; ri < qf_recipe_count; ri++)
        fprintf(stderr, " %s", qf_recipes[ri].name);
    fprintf(stderr, "%s\n", qf_recipe_is_path(name)
                                ? " (this tool takes the names of shipped recipes; a recipe file "
                                  "runs through the C API or qfuse-cache warm)"
                                : "");
    tool_usage_hint();
    return -1;
}

/* 1 when registry recipe ri is selected (named by --recipe, or no --recipe given). */
static inline int tool_recipe_selected(const tool_recipes *t, int ri) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], qf_recipes[ri].name) == 0)
            return 1;
    return t->n == 0;
}

/* 1 when registry recipe ri's family runs a training step: its quantizer and a GEMM path; a
 * family whose GEMM comes in a later step (fp8_block: quantizers and backward ops only) answers
 * "no GEMM" from qf_gemm. */
static inline int tool_recipe_quantizes(int ri) {
    const qf_family_traits *t = qf_family_get(qf_recipes[ri].family);
    return t->ops[QF_OP_QUANTIZE].tpl != NULL && t->gemm[0].engine != QF_GEMM_NONE;
}

#endif /* QF_TOOL_UTIL_H */
