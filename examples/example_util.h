/* example_util.h: what the examples share: buffers that are device memory on a GPU and host
 * memory on a device-less context (which checks every argument and launches nothing, so their
 * contents are never read there), and the context itself. Define EXAMPLE_NAME (messages) before
 * including it. */
#ifndef EXAMPLE_UTIL_H
#define EXAMPLE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "qfuse.h"

#define EXAMPLE_MAX_BUFS 64

/* The exit status for rc (0 or 1), 1 when the standard output could not be written (a full
 * disk, a closed pipe), with a message: what the example printed is its result. */
static int example_exit(int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, EXAMPLE_NAME ": cannot write the standard output\n");
        return 1;
    }
    return rc;
}

/* The one optional positional argument of an example: *arg is it, or dflt. Returns -1 to go on
 * (stdout then line-buffered, so that its lines and stderr's keep their order through a pipe),
 * else the exit status: 0 after -h/--help (usage on stdout), 2 after an unknown option or a
 * second argument (what was wrong and the usage on stderr). A first "--" ends the options. */
static int example_arg(int argc, char **argv, const char *usage, const char *dflt,
                       const char **arg) {
    const int first = argc >= 2 && strcmp(argv[1], "--") == 0 ? 2 : 1, n = argc - first;
    const int opt = n == 1 && first == 1 && argv[1][0] == '-'; /* not after "--" */
    if (opt && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("%s\n", usage);
        return example_exit(0);
    }
    if (n > 1 || opt) {
        fprintf(stderr, EXAMPLE_NAME ": %s '%s'; %s\n",
                opt ? "unknown option" : "one argument at most, not also", argv[first + !opt],
                usage);
        return 2;
    }
    *arg = n ? argv[first] : dflt;
    setvbuf(stdout, NULL, _IOLBF, 0);
    return -1;
}

/* 1 when s is what an op takes as a recipe file's path rather than a shipped recipe's name: it
 * holds a '/' or ends in ".lua" (docs/api.md). */
static int example_is_recipe_path(const char *s) {
    const size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n >= 4 && strcmp(s + n - 4, ".lua") == 0);
}

static int g_gpu; /* 1: a GPU context; 0: a device-less one, host memory stands in */
static void *g_bufs[EXAMPLE_MAX_BUFS];
static int g_nbufs;

/* A zeroed buffer of `bytes`, freed by buf_free_all; exits on failure. */
static void *buf_alloc(size_t bytes) {
    void *p = NULL;
    if (g_nbufs < EXAMPLE_MAX_BUFS && g_gpu &&
        (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess))
        p = NULL;
    if (g_nbufs < EXAMPLE_MAX_BUFS && !g_gpu &&
        (p = aligned_alloc(256, (bytes + 255) / 256 * 256)) != NULL)
        memset(p, 0, bytes);
    if (!p) {
        fprintf(stderr, EXAMPLE_NAME ": cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return g_bufs[g_nbufs++] = p;
}

/* A buffer holding a copy of src. */
static void *buf_upload(const void *src, size_t bytes) {
    void *p = buf_alloc(bytes);
    if (g_gpu && cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
        exit(1);
    if (!g_gpu)
        memcpy(p, src, bytes);
    return p;
}

static void buf_free_all(void) {
    for (int i = 0; i < g_nbufs; i++)
        g_gpu ? (void)cudaFree(g_bufs[i]) : free(g_bufs[i]);
    g_nbufs = 0;
}

/* A context on GPU 0, else a device-less one for sm_90 (saying so, and what it does instead:
 * `instead`); NULL after the error. */
static qf_ctx_t *open_ctx(const char *instead) {
    qf_ctx_t *ctx = NULL;
    qf_status s = qf_ctx_init(&ctx, 0);
    g_gpu = s == QF_OK;
    if (s == QF_ERR_NO_DEVICE) {
        printf("no GPU (%s): the GPU part is skipped; a device-less sm_90 context %s\n",
               qf_last_error(), instead);
        s = qf_ctx_init_host(&ctx, 90);
    }
    if (s != QF_OK)
        fprintf(stderr, EXAMPLE_NAME ": %s: %s\n", qf_status_name(s), qf_last_error());
    return s == QF_OK ? ctx : NULL;
}

#endif /* EXAMPLE_UTIL_H */
