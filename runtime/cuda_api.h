/* cuda_api.h: the CUDA driver API, loaded at run time with dlopen.
 *
 * NOTES: libqfuse must load and run its CPU paths (generation, NVRTC, shape functions) on machines
 * without a GPU driver, where libcuda.so.1 does not exist; linking it directly would make every
 * binary fail to start there. So the driver entry points we use are resolved from libcuda.so.1
 * on first use, and a missing driver becomes QF_ERR_NO_DEVICE. */
#ifndef QF_CUDA_API_H
#define QF_CUDA_API_H

#include <cuda.h>

#include "status.h"

typedef struct qf_cu_api {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
    CUresult (*StreamGetCtx)(CUstream, CUcontext *);
    CUresult (*PointerGetAttribute)(void *, CUpointer_attribute, CUdeviceptr);
    CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
    /* NULL when the driver lacks it (the warp-specialized GEMM is then never chosen) */
    CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion,
                                     CUtensorMapFloatOOBfill);
} qf_cu_api;

/* The driver API table, loading libcuda.so.1 and calling cuInit(0) on first use (thread-safe).
 * Returns NULL (and sets QF_ERR_NO_DEVICE with the dlopen or cuInit error) when unavailable. */
QF_INTERNAL const qf_cu_api *qf_cu(void);

/* Records a driver failure: "<what> failed at <file>:<line>: <CUDA error string>". */
QF_INTERNAL qf_status qf_cu_fail(CUresult r, const char *what, const char *file, int line);

/* Checks one driver call through the table (STYLE 21). */
#define QF_CU_CHECK(call)                                                                     \
    do {                                                                                      \
        CUresult qf_cu_r_ = (call);                                                           \
        if (qf_cu_r_ != CUDA_SUCCESS)                                                         \
            return qf_cu_fail(qf_cu_r_, #call, __FILE__, __LINE__);                           \
    } while (0)

#endif /* QF_CUDA_API_H */
