/* sm90_nvfp4_gemm.cu: SKELETON (work in progress): block-scaled NVFP4 GEMM for Hopper.
 * Every placeholder of the generator's contract appears once; the kernel does nothing yet. */
#include "qf_formats.h"

namespace {
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const void *p) {}
