/* qf_formats.h: element formats, dtypes and kernel-variant enums shared by C11 and CUDA (SPEC 1).
 *
 * This header compiles as C11 (generator, runtime, references, tests) and as CUDA C++ under NVRTC,
 * where it is handed to the compiler as an in-memory header. It must therefore include nothing
 * under NVRTC and use only plain enums, constants and fixed-size structs.
 *
 * Enums are append-only: never renumber or reuse a value; each ends in a _COUNT sentinel. */
#ifndef QF_FORMATS_H
#define QF_FORMATS_H

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#define QF_STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__cplusplus)
#include <stdint.h>
#define QF_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#include <stdint.h>
#define QF_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* Storage dtypes of tensors crossing the API. ORDER DTYPE */
typedef enum qf_dtype {
    QF_DTYPE_FP32 = 0,
    QF_DTYPE_FP16 = 1,
    QF_DTYPE_BF16 = 2,
    QF_DTYPE_E4M3 = 3, /* FP8 E4M3 (fn): bias 7, max 448, no inf */
    QF_DTYPE_E5M2 = 4, /* FP8 E5M2: bias 15, max 57344, has inf */
    QF_DTYPE_E8M0 = 5, /* unsigned power-of-two scale, bias 127 */
    QF_DTYPE_E2M1 = 6, /* FP4, two per byte (low nibble first) */
    QF_DTYPE_COUNT
} qf_dtype;

/* Normalization fused in front of the quantizer. QF_NORM_NONE is the plain quantize op. */
typedef enum qf_norm {
    QF_NORM_NONE = 0,
    QF_NORM_LAYERNORM = 1,
    QF_NORM_RMSNORM = 2,
    QF_NORM_COUNT
} qf_norm;

/* Recipe families (SPEC 2). */
typedef enum qf_family {
    QF_FAMILY_FP8_DELAYED = 0,
    QF_FAMILY_FP8_CURRENT = 1,
    QF_FAMILY_MXFP8 = 2,
    QF_FAMILY_NVFP4 = 3,
    QF_FAMILY_FP8_BLOCK = 4,
    QF_FAMILY_COUNT
} qf_family;

/* Tensor roles inside a recipe. */
typedef enum qf_role {
    QF_ROLE_INPUT = 0,  /* normalized activation fed to fprop */
    QF_ROLE_WEIGHT = 1,
    QF_ROLE_GRAD = 2,   /* output gradient (dgrad / wgrad) */
    QF_ROLE_COUNT
} qf_role;

/* Ops a kernel variant implements. */
typedef enum qf_op {
    QF_OP_NORM_QUANTIZE = 0,
    QF_OP_QUANTIZE = 1,
    QF_OP_SCALE_UPDATE = 2,
    QF_OP_GEMM = 3,
    QF_OP_COUNT
} qf_op;

/* How the delayed-scaling amax is reduced over the history (SPEC 2.1). */
typedef enum qf_amax_compute {
    QF_AMAX_COMPUTE_MAX = 0,
    QF_AMAX_COMPUTE_MOST_RECENT = 1,
    QF_AMAX_COMPUTE_COUNT
} qf_amax_compute;

/* Output selection bits for quantizing ops. */
#define QF_OUT_ROWWISE 1u
#define QF_OUT_COLUMNWISE 2u

/* Largest finite magnitudes (SPEC 1). */
#define QF_E4M3_MAX 448.0f
#define QF_E5M2_MAX 57344.0f
#define QF_E2M1_MAX 6.0f

/* Parameter block of the fp8 norm/quantize kernels: one struct so that the C launcher and the
 * kernel agree on one ABI. All pointers are device pointers; a null pointer means "not produced"
 * for optional outputs. */
typedef struct qf_nq_params {
    const void *x;        /* [M, K] input dtype */
    const void *gamma;    /* [K] input dtype or fp32; null for QF_NORM_NONE */
    const void *beta;     /* [K] same dtype as gamma; layernorm only */
    const float *scale;   /* [1] quantization scale (fp8_delayed: from the scale update) */
    uint8_t *out_row;     /* [M, K] FP8 rowwise; may be null when only columnwise is produced */
    uint8_t *out_col;     /* [K, M] FP8 columnwise (transposed); null unless columnwise */
    float *mu;            /* [M] layernorm only */
    float *rsigma;        /* [M] norms only */
    float *amax;          /* [1] atomically max-merged amax of the quantized tensor (pre-scale) */
    float *scale_inv;     /* [1] 1/scale, written by block 0 */
    int64_t M;
    int64_t K;
    float eps;
    int32_t pad0;
} qf_nq_params;
QF_STATIC_ASSERT(sizeof(qf_nq_params) == 10 * 8 + 2 * 8 + 8, "qf_nq_params ABI");

/* Parameter block of the delayed-scaling update (one launch for all of a step's tensors). */
typedef struct qf_su_params {
    float *amax;          /* [n] this step's amax; consumed and reset to 0 */
    float *history;       /* [n, H] amax history, newest first */
    float *scale;         /* [n] */
    float *scale_inv;     /* [n] */
    const uint8_t *fmt;   /* [n] QF_DTYPE_E4M3 or QF_DTYPE_E5M2 per tensor */
    int32_t n;
    int32_t H;
} qf_su_params;
QF_STATIC_ASSERT(sizeof(qf_su_params) == 6 * 8, "qf_su_params ABI");

#endif /* QF_FORMATS_H */
