/* ctx.c: context creation and release, device-less contexts (qf_ctx_init_host) and their twins. */
#include "ctx.h"

#include <limits.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "jit/jit_compile.h"
#include "qf_arch.h"
#include "stream.h"

#define QF_WORKSPACE_BYTES (32u << 20)

/* ==================================================================== context */

static qf_status qf_ctx_open_device(qf_ctx_t *c, int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return qf_set_error(QF_ERR_NO_DEVICE, "no CUDA device present");
    }
    if (device < 0 || device >= n)
        return qf_set_error(QF_ERR_INVALID_ARG, "device %d out of range: %d device(s)", device, n);
    /* cudart creates and binds the primary context; the driver calls then share it. */
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "cannot initialize device %d: %s", device,
                            cudaGetErrorString(cudaGetLastError()));
    const qf_cu_api *cu = qf_cu();
    if (!cu)
        return QF_ERR_NO_DEVICE;
    CUdevice dev;
    int major = 0, minor = 0;
    QF_CU_CHECK(cu->DeviceGet(&dev, device));
    QF_CU_CHECK(cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    QF_CU_CHECK(cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    QF_CU_CHECK(cu->DeviceGetAttribute(&c->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    QF_CU_CHECK(cu->CtxGetCurrent(&c->cu_ctx));
    c->device = device;
    c->arch = major * 10 + minor;
    if (c->arch < QF_ARCH_MIN)
        return qf_set_error(QF_ERR_UNSUPPORTED, "device %d is sm_%d; qfuse needs sm_%d or newer "
                            "(FP8 conversions and tensor cores)", device, c->arch, QF_ARCH_MIN);
    return QF_OK;
}

static qf_status qf_ctx_open_blas(qf_ctx_t *c) {
    cublasStatus_t s = cublasLtCreate(&c->lt);
    if (s != CUBLAS_STATUS_SUCCESS)
        return qf_set_error(QF_ERR_CUBLAS, "cublasLtCreate failed: %s", cublasLtGetStatusString(s));
    if (cudaMalloc(&c->workspace, QF_WORKSPACE_BYTES) != cudaSuccess) {
        (void)cudaGetLastError();
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "cannot allocate %u bytes of cuBLASLt workspace",
                            QF_WORKSPACE_BYTES);
    }
    c->workspace_size = QF_WORKSPACE_BYTES;
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = c->device;
    uint64_t keep = UINT64_MAX;
    if (cudaMemPoolCreate(&c->pool, &props) != cudaSuccess ||
        cudaMemPoolSetAttribute(c->pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess)
        return qf_set_error(QF_ERR_CUDA, "cannot create the scratch memory pool of device %d: %s",
                            c->device, cudaGetErrorString(cudaGetLastError()));
    return QF_OK;
}

/* Under ctx->lock: the captured call's scratch, ctx->graph_scratch. */
static qf_status qf_ctx_graph_take(qf_ctx_t *ctx, size_t n, void **p, const char *what) {
    if (n > ctx->graph_scratch_bytes || ctx->graph_scratch_taken)
        return qf_set_error(QF_ERR_UNSUPPORTED, "%zu bytes of device scratch for %s while the "
                            "stream is being captured: %s; run each op once outside the capture "
                            "first (the context then keeps scratch of the largest size for "
                            "graphs)", n, what,
                            ctx->graph_scratch_taken ? "another captured call holds it"
                                                     : "no call outside a capture asked as much");
    ctx->graph_scratch_taken = 1;
    *p = ctx->graph_scratch;
    return QF_OK;
}

/* Under ctx->lock: grows ctx->graph_scratch to n bytes (outside a capture), keeping the old
 * buffer for the graphs that captured it. Best effort: a failure leaves it as it was. */
static void qf_ctx_graph_grow(qf_ctx_t *ctx, size_t n) {
    if (n <= ctx->graph_scratch_bytes || ctx->n_graph_scratch_old == QF_GRAPH_SCRATCH_OLD)
        return;
    void *b = NULL;
    if (cudaMalloc(&b, n) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (ctx->graph_scratch)
        ctx->graph_scratch_old[ctx->n_graph_scratch_old++] = ctx->graph_scratch;
    ctx->graph_scratch = b;
    ctx->graph_scratch_bytes = n;
}

qf_status qf_ctx_scratch(qf_ctx_t *ctx, size_t n, void **p, const char *what, void *stream) {
    *p = NULL;
    if (qf_stream_capturing(stream) == 1) {
        pthread_mutex_lock(&ctx->lock);
        const qf_status s = qf_ctx_graph_take(ctx, n, p, what);
        pthread_mutex_unlock(&ctx->lock);
        return s;
    }
    const cudaError_t e = cudaMallocFromPoolAsync(p, n, ctx->pool, (cudaStream_t)stream);
    if (e == cudaSuccess) {
        pthread_mutex_lock(&ctx->lock);
        qf_ctx_graph_grow(ctx, n);
        pthread_mutex_unlock(&ctx->lock);
        return QF_OK;
    }
    (void)cudaGetLastError();
    *p = NULL;
    return qf_set_error(e == cudaErrorMemoryAllocation ? QF_ERR_OUT_OF_MEMORY : QF_ERR_CUDA,
                        "cannot allocate %zu bytes of device scratch for %s: %s", n, what,
                        cudaGetErrorString(e));
}

qf_status qf_ctx_scratch_free(qf_ctx_t *ctx, void *p, void *stream) {
    if (!p)
        return QF_OK;
    pthread_mutex_lock(&ctx->lock);
    const int graph = p == ctx->graph_scratch && ctx->graph_scratch_taken;
    if (graph)
        ctx->graph_scratch_taken = 0;
    pthread_mutex_unlock(&ctx->lock);
    if (graph)
        return QF_OK;
    const cudaError_t e = cudaFreeAsync(p, (cudaStream_t)stream);
    if (e == cudaSuccess)
        return QF_OK;
    (void)cudaGetLastError();
    return qf_set_error(QF_ERR_CUDA, "cudaFreeAsync of device scratch failed: %s",
                        cudaGetErrorString(e));
}

qf_status qf_ctx_table_grow(void **items, int n, int *cap, size_t size, const char *what) {
    if (n < *cap)
        return QF_OK;
    if (*cap > INT_MAX / 2)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "%s: the table is full (%d items)", what, n);
    const int grown = *cap ? 2 * *cap : 16;
    void *t = realloc(*items, (size_t)grown * size);
    if (!t)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    *items = t;
    *cap = grown;
    return QF_OK;
}

qf_status qf_ctx_init(qf_ctx_t **out, int device) {
    qf_clear_error();
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init: out is NULL");
    *out = NULL;
    if (device < 0) /* out of range on any machine, with or without a GPU */
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init: device %d is negative; CUDA "
                            "devices are numbered from 0", device);
    qf_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_ctx_init: out of host memory");
    pthread_mutex_init(&c->lock, NULL);
    qf_status s = qf_ctx_open_device(c, device);
    if (s == QF_OK)
        s = qf_ctx_open_blas(c);
    if (s != QF_OK) {
        qf_ctx_free(c);
        return s;
    }
    *out = c;
    return QF_OK;
}

void qf_ctx_free(qf_ctx_t *c) {
    if (!c)
        return;
    const qf_cu_api *cu = c->n_kernels && !c->host ? qf_cu() : NULL;
    for (int i = 0; cu && i < c->n_kernels; i++)
        cu->ModuleUnload(c->kernels[i].module);
    free(c->kernels);
    if (c->plans_free)
        c->plans_free(c);
    if (c->workspace)
        cudaFree(c->workspace);
    if (c->graph_scratch)
        cudaFree(c->graph_scratch);
    for (int i = 0; i < c->n_graph_scratch_old; i++)
        cudaFree(c->graph_scratch_old[i]);
    if (c->pool)
        cudaMemPoolDestroy(c->pool);
    if (c->lt)
        cublasLtDestroy(c->lt);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int qf_ctx_arch(const qf_ctx_t *ctx) {
    return ctx ? ctx->arch : 0;
}

const qf_kernel_info *qf_ctx_last_kernel(const qf_ctx_t *ctx) {
    return ctx ? &ctx->last : NULL;
}

/* ==================================================================== device-less contexts */

qf_status qf_ctx_init_host(qf_ctx_t **out, int arch) {
    qf_clear_error();
    if (!out)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init_host: out is NULL");
    *out = NULL;
    if (arch < QF_ARCH_MIN || arch > QF_ARCH_MAX)
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init_host: arch %d is not a compute "
                            "capability qfuse runs on; expected 10*major+minor in %d..%d (e.g. "
                            "90 for sm_90)", arch, QF_ARCH_MIN, QF_ARCH_MAX);
    char known[256];
    if (!qf_jit_arch_known(arch, known, sizeof known))
        return qf_set_error(QF_ERR_INVALID_ARG, "qf_ctx_init_host: sm_%d is not a GPU "
                            "architecture this NVRTC compiles for (%s)", arch, known);
    qf_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return qf_set_error(QF_ERR_OUT_OF_MEMORY, "qf_ctx_init_host: out of host memory");
    pthread_mutex_init(&c->lock, NULL);
    c->host = 1;
    c->device = -1;
    c->arch = arch;
    *out = c;
    return QF_OK;
}

void qf_ctx_twin(const qf_ctx_t *ctx, qf_ctx_t *twin) {
    memset(twin, 0, sizeof *twin);
    pthread_mutex_init(&twin->lock, NULL);
    twin->host = 2;
    twin->device = ctx->device;
    twin->arch = ctx->arch;
    twin->sm_count = ctx->sm_count;
}

void qf_ctx_twin_free(qf_ctx_t *twin) {
    free(twin->kernels); /* empty unless an op looked up a kernel before qf_ctx_ready (a bug) */
    if (twin->plans_free)
        twin->plans_free(twin);
    pthread_mutex_destroy(&twin->lock);
}
