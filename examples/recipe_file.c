/* recipe_file.c: a recipe file run without rebuilding anything: an op takes the path of a .lua
 * file wherever it takes a recipe name.
 *
 *   recipe_file [RECIPE.lua [FAMILY]]    default examples/my_recipe.lua and its family, mxfp8
 *
 * The first op that names the path loads the file with the same sandbox and checks as
 * `qfuse-gen --check`, expands it into the kernel variants qfuse-gen would emit (named after the
 * file stem: qf_my_recipe_...) and compiles each kernel on first use; the disk cache keeps it
 * for the next process. A file that is not a valid recipe is QF_ERR_INVALID_ARG with a message
 * naming the file and the field. This program runs LayerNorm + quantize of x [M, K] under the
 * file's recipe, twice; without a GPU it makes the call on a device-less sm_90 context, where
 * the file is loaded and every argument checked but nothing launches.
 *
 * x's outputs are sized by the fake shapes of the recipe's family (FAMILY): the input role's
 * element format is the same in every recipe of a family (qfuse-gen --fields), so the family's
 * table answers for any recipe file of it, as it does inside the runtime.
 *
 * Build against an installed qfuse:
 *   cc -std=c11 recipe_file.c $(pkg-config --cflags --libs qfuse) -L/usr/local/cuda/lib64 -lcudart
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "family.h" /* qf_families, qf_family_shapes; with qfuse.h and registry.h */
#include "registry.h"

enum { M = 128, K = 256, MAX_OUT = 12 };

static int g_gpu; /* 1: a GPU context; 0: a device-less one, host memory stands in */

/* A zeroed buffer: device memory on a GPU, host memory otherwise (never read there). */
static void *buf_alloc(size_t bytes) {
    void *p = NULL;
    if (g_gpu && (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess))
        p = NULL;
    if (!g_gpu && (p = aligned_alloc(256, (bytes + 255) / 256 * 256)) != NULL)
        memset(p, 0, bytes);
    if (!p) {
        fprintf(stderr, "recipe_file: cannot allocate %zu bytes\n", bytes);
        exit(1);
    }
    return p;
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

/* `count` bf16 values from 1.0 to 1.75, not all equal. */
static void *buf_bf16(size_t count) {
    uint16_t *h = malloc(count * sizeof *h);
    if (!h)
        exit(1);
    for (size_t i = 0; i < count; i++)
        h[i] = (uint16_t)(0x3F80u + (i * 7919u) % 97u); /* 0x3F80 is 1.0 */
    void *p = buf_upload(h, count * sizeof *h);
    free(h);
    return p;
}

static qf_tensor tensor(void *p, qf_dtype dt, int ndim, const int64_t *dims) {
    qf_tensor t = {.data = p, .dtype = dt, .ndim = ndim};
    memcpy(t.dims, dims, (size_t)ndim * sizeof *dims);
    return t;
}

/* Every output of x's norm + quantize under a recipe of `family`, bound to its slot. */
static int alloc_outputs(const char *family, int arch, qf_quantized *xq) {
    qf_recipe fam = {.family = QF_FAMILY_COUNT};
    for (int f = 0; f < QF_FAMILY_COUNT; f++)
        if (strcmp(qf_families[f].name, family) == 0 && qf_families[f].implemented)
            fam.family = (qf_family)f;
    if (fam.family == QF_FAMILY_COUNT) {
        fprintf(stderr, "recipe_file: '%s' is not an implemented family\n", family);
        return -1;
    }
    memcpy(fam.fmt, qf_families[fam.family].fmt, sizeof fam.fmt);
    const qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT,
                              .norm = QF_NORM_LAYERNORM, .outputs = QF_OUT_ROWWISE, .M = M,
                              .K = K};
    qf_shape sh[MAX_OUT];
    const int n = qf_family_shapes(&fam, &q, sh, MAX_OUT);
    for (int i = 0; i < n; i++) {
        const int slot = qf_slot_from_name(sh[i].name);
        xq->t[slot] = tensor(buf_alloc(sh[i].bytes), sh[i].dtype, sh[i].ndim, sh[i].dims);
        printf("  %-18s %-5s %lld bytes\n", sh[i].name, qf_dtype_name(sh[i].dtype),
               (long long)sh[i].bytes);
    }
    /* Block scales in the layout this architecture's GEMM reads. */
    xq->layout = qf_family_gemm_path(fam.family, arch).layout;
    return n > 0 ? 0 : -1;
}

/* One norm + quantize of x under the recipe file; on a GPU, how its kernel was obtained. */
static qf_status run_once(qf_ctx_t *ctx, const char *path, const qf_tensor *x,
                          const qf_norm_desc *ln, const float *scale, qf_quantized *xq) {
    static const char *const how[QF_KSRC_COUNT] = {"compiled by NVRTC", "found in memory",
                                                   "loaded from the disk cache"};
    const qf_status s = qf_quantize(ctx, path, QF_ROLE_INPUT, x, ln, scale, NULL, xq, NULL);
    if (s == QF_OK && cudaDeviceSynchronize() == cudaSuccess) {
        const qf_kernel_info *ki = qf_ctx_last_kernel(ctx);
        printf("  kernel %s, key %s: %s\n", ki->name, ki->key, how[ki->source]);
    }
    return s;
}

/* A context on GPU 0, else a device-less one for sm_90. */
static qf_ctx_t *open_ctx(void) {
    qf_ctx_t *ctx = NULL;
    qf_status s = qf_ctx_init(&ctx, 0);
    g_gpu = s == QF_OK;
    if (s == QF_ERR_NO_DEVICE) {
        printf("no GPU (%s): the GPU part is skipped; a device-less sm_90 context loads the "
               "recipe file and checks the call, and launches nothing\n", qf_last_error());
        s = qf_ctx_init_host(&ctx, 90);
    }
    if (s != QF_OK)
        fprintf(stderr, "recipe_file: %s: %s\n", qf_status_name(s), qf_last_error());
    return s == QF_OK ? ctx : NULL;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "examples/my_recipe.lua";
    const char *family = argc > 2 ? argv[2] : "mxfp8";
    static const float one = 1.0f; /* the scale an fp8_delayed recipe quantizes with */
    qf_ctx_t *ctx = open_ctx();
    if (!ctx)
        return 1;
    printf("recipe file %s (family %s): LayerNorm + quantize of x [%d, %d]\n", path, family, M,
           K);
    const int64_t xd[2] = {M, K}, kd[1] = {K};
    const qf_tensor x = tensor(buf_bf16(M * K), QF_DTYPE_BF16, 2, xd);
    const qf_norm_desc ln = {.norm = QF_NORM_LAYERNORM, .eps = 1e-5f,
                             .gamma = tensor(buf_bf16(K), QF_DTYPE_BF16, 1, kd),
                             .beta = tensor(buf_alloc(K * 2), QF_DTYPE_BF16, 1, kd)};
    const float *scale = buf_upload(&one, sizeof one);
    qf_quantized xq = {.layout = QF_SCALE_LAYOUT_COMPACT};
    qf_status s = alloc_outputs(family, qf_ctx_arch(ctx), &xq) == 0 ? QF_OK : QF_ERR_INVALID_ARG;
    for (int i = 0; i < 2 && s == QF_OK; i++) /* the second call finds the kernel in memory */
        s = run_once(ctx, path, &x, &ln, scale, &xq);
    if (s == QF_ERR_NO_DEVICE && !g_gpu)
        printf("  the recipe file is valid and so is every argument (%s)\n", qf_last_error());
    else if (s != QF_OK)
        fprintf(stderr, "recipe_file: %s: %s\n", qf_status_name(s), qf_last_error());
    qf_ctx_free(ctx);
    return s == QF_OK || (s == QF_ERR_NO_DEVICE && !g_gpu) ? 0 : 1;
}
