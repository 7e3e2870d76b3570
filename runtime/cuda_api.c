/* cuda_api.c: resolve the CUDA driver entry points from libcuda.so.1 at run time. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

static qf_cu_api qf_cu_table;
static int qf_cu_ok;
static char qf_cu_why[512];
static pthread_once_t qf_cu_once = PTHREAD_ONCE_INIT;

/* dlsym into a function-pointer slot; POSIX guarantees the object/function pointer round trip. */
static int qf_cu_sym(void *lib, const char *name, void *slot) {
    void *f = dlsym(lib, name);
    if (!f) {
        snprintf(qf_cu_why, sizeof qf_cu_why, "libcuda.so.1 lacks %s", name);
        return 0;
    }
    memcpy(slot, &f, sizeof f);
    return 1;
}

static void qf_cu_load(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(qf_cu_why, sizeof qf_cu_why, "no CUDA driver (%s)", dlerror());
        return;
    }
    qf_cu_api *t = &qf_cu_table;
    int ok = qf_cu_sym(lib, "cuInit", &t->Init) && qf_cu_sym(lib, "cuDeviceGet", &t->DeviceGet) &&
             qf_cu_sym(lib, "cuDeviceGetAttribute", &t->DeviceGetAttribute) &&
             qf_cu_sym(lib, "cuCtxGetCurrent", &t->CtxGetCurrent) &&
             qf_cu_sym(lib, "cuCtxSetCurrent", &t->CtxSetCurrent) &&
             qf_cu_sym(lib, "cuModuleLoadData", &t->ModuleLoadData) &&
             qf_cu_sym(lib, "cuModuleUnload", &t->ModuleUnload) &&
             qf_cu_sym(lib, "cuModuleGetFunction", &t->ModuleGetFunction) &&
             qf_cu_sym(lib, "cuLaunchKernel", &t->LaunchKernel) &&
             qf_cu_sym(lib, "cuGetErrorString", &t->GetErrorString) &&
             qf_cu_sym(lib, "cuFuncSetAttribute", &t->FuncSetAttribute) &&
             qf_cu_sym(lib, "cuStreamGetCtx", &t->StreamGetCtx) &&
             qf_cu_sym(lib, "cuPointerGetAttribute", &t->PointerGetAttribute) &&
             qf_cu_sym(lib, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                       &t->OccupancyMaxActiveBlocksPerMultiprocessor);
    if (!ok)
        return;
    /* optional (drivers for CUDA 12.0 and later): without it, GEMMs take the staged path */
    void *encode = dlsym(lib, "cuTensorMapEncodeTiled");
    memcpy(&t->TensorMapEncodeTiled, &encode, sizeof encode);
    CUresult r = t->Init(0);
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        t->GetErrorString(r, &s);
        snprintf(qf_cu_why, sizeof qf_cu_why, "cuInit failed: %s", s ? s : "unknown error");
        return;
    }
    qf_cu_ok = 1;
}

const qf_cu_api *qf_cu(void) {
    pthread_once(&qf_cu_once, qf_cu_load);
    if (!qf_cu_ok) {
        qf_set_error(QF_ERR_NO_DEVICE, "CUDA driver unavailable: %s", qf_cu_why);
        return NULL;
    }
    return &qf_cu_table;
}

qf_status qf_cu_fail(CUresult r, const char *what, const char *file, int line) {
    const char *s = NULL;
    if (qf_cu_ok)
        qf_cu_table.GetErrorString(r, &s);
    return qf_set_error(QF_ERR_CUDA, "%s failed at %s:%d: %s (CUresult %d)", what, file, line,
                        s ? s : "unknown error", (int)r);
}
