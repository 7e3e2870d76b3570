/* smxx_nvfp4_norm_quantize.cu: SKELETON (work in progress): fused norm + NVFP4 quantize.
 * Every placeholder of the generator's contract appears once; the kernel does nothing yet. */
#include "qf_formats.h"

namespace {
constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kRht = __RHT__;
constexpr unsigned kRhtMask = __RHT_MASK__;
constexpr int kSr = __STOCHASTIC_ROUNDING__;
constexpr int kBlock2d = __BLOCK_2D__;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kTileM = __TILE_M__;
} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const void *p) {}
