/* recipe_file.c: a recipe file run without rebuilding anything: an op takes the path of a .lua
 * file wherever it takes a recipe name.
 *
 *   recipe_file [RECIPE.lua]    default examples/my_recipe.lua (a path from the source tree's
 *                               top, where `make test` runs it; elsewhere name the file)
 *
 * The first op that names the path loads the file with the same sandbox and checks as
 * `qfuse-gen --check`, expands it into the kernel variants qfuse-gen would emit (named after the
 * file stem: qf_my_recipe_...) and compiles each kernel on first use; the disk cache keeps it
 * for the next process. A file that is not a valid recipe is QF_ERR_INVALID_ARG with a message
 * naming the file and the field. This program sizes x's outputs with the file's fake shapes
 * (qf_fake_shapes takes the path too), then runs LayerNorm + quantize of x [M, K] under it,
 * twice; without a GPU it makes the call on a device-less sm_90 context, where the file is loaded
 * and every argument checked but nothing launches.
 *
 * Build against an installed qfuse:
 *   cc -std=c11 recipe_file.c $(pkg-config --cflags --libs qfuse) -L/usr/local/cuda/lib64 -lcudart
 */
#define EXAMPLE_NAME "recipe_file"
#include <errno.h>
#include <unistd.h>

#include "example_util.h"

#include "registry.h" /* qf_shape_query */

enum { M = 128, K = 256, MAX_OUT = 12 };

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

/* Every output of x's norm + quantize under the recipe at path, bound to its slot, in the scale
 * layout the GEMM of arch reads. */
static qf_status alloc_outputs(const char *path, int arch, qf_quantized *xq) {
    const qf_shape_query q = {.op = QF_OP_NORM_QUANTIZE, .role = QF_ROLE_INPUT,
                              .norm = QF_NORM_LAYERNORM, .outputs = QF_OUT_ROWWISE, .M = M,
                              .K = K};
    qf_shape sh[MAX_OUT];
    int n = 0;
    qf_status s = qf_fake_shapes(path, &q, sh, MAX_OUT, &n);
    for (int i = 0; s == QF_OK && i < n; i++) {
        const int slot = qf_slot_from_name(sh[i].name);
        xq->t[slot] = tensor(buf_alloc(sh[i].bytes), sh[i].dtype, sh[i].ndim, sh[i].dims);
        printf("  %-18s %-5s %lld bytes\n", sh[i].name, qf_dtype_name(sh[i].dtype),
               (long long)sh[i].bytes);
    }
    return s == QF_OK ? qf_gemm_scale_layout(path, arch, &xq->layout) : s;
}

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

int main(int argc, char **argv) {
    const char *path = NULL;
    static const char usage[] =
        "usage: recipe_file [RECIPE.lua]   (default examples/my_recipe.lua)";
    static const char dflt_path[] = "examples/my_recipe.lua";
    const int done = example_arg(argc, argv, usage, dflt_path, &path);
    if (done >= 0)
        return done;
    if (!example_is_recipe_path(path)) {
        fprintf(stderr, "recipe_file: '%s' is not a recipe file's path (a path has a '/' or ends "
                "in .lua; a bare name is a shipped recipe); %s\n", path, usage);
        return 2;
    }
    if (access(path, R_OK) != 0) { /* the default is relative to the repository's root */
        const int err = errno, dflt = path == dflt_path;
        fprintf(stderr, "recipe_file: cannot read %s: %s%s\n", path, strerror(err),
                dflt && err == ENOENT
                    ? " (run it from the repository root, or pass a recipe file's path)"
                    : "");
        return 1;
    }
    static const float one = 1.0f; /* the scale an fp8_delayed recipe quantizes with */
    qf_ctx_t *ctx = open_ctx("loads the recipe file and checks the call, and launches nothing");
    if (!ctx)
        return 1;
    printf("recipe file %s: LayerNorm + quantize of x [%d, %d]\n", path, M, K);
    const int64_t xd[2] = {M, K}, kd[1] = {K};
    const qf_tensor x = tensor(buf_bf16(M * K), QF_DTYPE_BF16, 2, xd);
    const qf_norm_desc ln = {.norm = QF_NORM_LAYERNORM, .eps = 1e-5f,
                             .gamma = tensor(buf_bf16(K), QF_DTYPE_BF16, 1, kd),
                             .beta = tensor(buf_alloc(K * 2), QF_DTYPE_BF16, 1, kd)};
    const float *scale = buf_upload(&one, sizeof one);
    qf_quantized xq = {.layout = QF_SCALE_LAYOUT_COMPACT};
    qf_status s = alloc_outputs(path, qf_ctx_arch(ctx), &xq);
    for (int i = 0; i < 2 && s == QF_OK; i++) /* the second call finds the kernel in memory */
        s = run_once(ctx, path, &x, &ln, scale, &xq);
    if (s == QF_ERR_NO_DEVICE && !g_gpu)
        printf("  the recipe file is valid and so is every argument (%s)\n", qf_last_error());
    else if (s != QF_OK)
        fprintf(stderr, "recipe_file: %s: %s\n", qf_status_name(s), qf_last_error());
    buf_free_all();
    qf_ctx_free(ctx);
    return example_exit(s == QF_OK || (s == QF_ERR_NO_DEVICE && !g_gpu) ? 0 : 1);
}
