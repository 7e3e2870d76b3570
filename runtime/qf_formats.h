/* qf_formats.h: element formats, dtypes and kernel-variant enums shared by C11 and CUDA (numerics
 * 1).
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

/* Activation between the two GEMMs of layernorm_mlp (numerics 6). SWIGLU takes h = [h1 | h2]
 * ([M, 2F]) and gives silu(h1) * h2 ([M, F]). */
typedef enum qf_activation {
    QF_ACT_GELU = 0,   /* tanh approximation: 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3))) */
    QF_ACT_SWIGLU = 1, /* silu(h1) * h2, silu(v) = v / (1 + exp(-v)) */
    QF_ACT_RELU = 2,   /* max(h, 0) */
    QF_ACT_COUNT
} qf_activation;

/* The activation prologue of a quantizer or dbias instance (templates/qf_dev_act.cuh): none, the
 * input is a = act(h) (QF_PROLOGUE_ACT), or it is dh = da act'(h) (QF_PROLOGUE_DACT). */
#define QF_PROLOGUE_NONE 0
#define QF_PROLOGUE_ACT(act) (1 + (act))
#define QF_PROLOGUE_DACT(act) (4 + (act))
#define QF_PROLOGUE_COUNT 7
QF_STATIC_ASSERT(QF_ACT_COUNT == 3, "QF_PROLOGUE_DACT(0) follows the QF_PROLOGUE_ACT values");

/* Recipe families (numerics 2). */
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
    QF_OP_NORM_BACKWARD = 4, /* LayerNorm / RMSNorm backward: dx, dgamma, dbeta (numerics 6) */
    QF_OP_DBIAS = 5,         /* dbias = sum_M dy (numerics 6) */
    QF_OP_ACTIVATION = 6,    /* layernorm_mlp's activation and (<name>_grad) its backward */
    QF_OP_COUNT
} qf_op;

/* How the delayed-scaling amax is reduced over the history (numerics 2.1). */
typedef enum qf_amax_compute {
    QF_AMAX_COMPUTE_MAX = 0,
    QF_AMAX_COMPUTE_MOST_RECENT = 1,
    QF_AMAX_COMPUTE_COUNT
} qf_amax_compute;

/* The per-tensor FP8 `format` recipe option (numerics 2.1, 2.2): the element format of each role.
 */
typedef enum qf_fp8_format {
    QF_FP8_FORMAT_HYBRID = 0, /* E4M3 input and weight, E5M2 grad */
    QF_FP8_FORMAT_E4M3 = 1,   /* E4M3 everywhere */
    QF_FP8_FORMAT_COUNT
} qf_fp8_format;

/* Output selection bits of a fake-shape query (qf_shape_query.outputs): the copies of a
 * quantizing op, and the dtype of a GEMM's y (bf16 unless QF_OUT_FP32). */
#define QF_OUT_ROWWISE 1u
#define QF_OUT_COLUMNWISE 2u
#define QF_OUT_FP32 4u /* QF_OP_GEMM: y in fp32 (a wgrad into its main_grad) */
#define QF_OUT_GATED 8u /* QF_OP_ACTIVATION: a gated activation (SwiGLU): h and dh are [M, 2N]
                         * (dh's fake shape [M, 2, N]: the same bytes) */

/* Largest finite magnitudes (numerics 1). */
#define QF_E4M3_MAX 448.0f
#define QF_E5M2_MAX 57344.0f
#define QF_E2M1_MAX 6.0f

/* Parameter block of every quantizer kernel (norm + quantize, each family): one struct so that
 * the C launcher and every kernel agree on one ABI. All pointers are device pointers; a pointer
 * field holds the output slot (qf_slot) its comment names, or NULL where the call's fake shapes
 * list no such slot (that copy is not produced); a kernel reads only its family's fields. Fields
 * no family uses together share storage (the two unions), which keeps the block at 128 bytes:
 * measured with NVRTC 13.0 for sm_90, a larger block costs the quantizers 6 to 16 registers
 * (the NVFP4 quantize entry 64 -> 70, one block fewer per SM) and up to 17% of their speed.
 * Layouts and shapes: qfuse.h (qf_slot) and numerics 2.1-2.4. */
typedef struct qf_q_params {
    const void *x;        /* [M, K] input dtype */
    union {
        const void *gamma; /* [K] input dtype or fp32; NULL for QF_NORM_NONE */
        const void *da;    /* QF_PROLOGUE_DACT (no norm): [M, F] bf16, or fp32 when da_fp32 */
    };
    const void *beta;     /* [K] same dtype as gamma; layernorm only */
    uint8_t *out_row;     /* ROWWISE_DATA: FP8 [M, K]; NVFP4 [M, K/2] packed E2M1 */
    uint8_t *out_col;     /* COLUMNWISE_DATA: per-tensor FP8 [K, M] (transposed); MXFP8 [M, K]
                           * (32x1 blocks along M, NOT transposed); NVFP4 [K, M/2] packed E2M1
                           * of the transpose (after the RHT when on) */
    union {
        float *mu;         /* MU [M]: layernorm only */
        float *dbias_part; /* no norm, per-tensor FP8's `_cols` entry: NULL, or
                            * [QF_DBIAS_PARTS(M), K] fp32, the column sums of its input (dy, or
                            * dh through the prologue) over each group of QF_DBIAS_GROUP 64-row
                            * tiles: the partials of dbias, summed by the dbias module's
                            * _reduce */
    };
    float *rsigma;        /* RSIGMA [M]: norms only */
    float *amax;          /* [1] per-tensor FP8: AMAX, the atomically max-merged amax of the
                           * quantized tensor (pre-scale; fp8_current: complete after pass 0);
                           * NVFP4: AMAX_ROWWISE, the rowwise copy's global amax (zeroed first) */
    float *amax_col;      /* [1] NVFP4: AMAX_COLUMNWISE (zeroed by the runtime) */
    union {
        struct {                /* per-tensor FP8 */
            const float *scale; /* [1] fp8_delayed's scale, from the scale update
                                 * (fp8_current takes it from amax, numerics 2.2) */
            float *scale_inv;   /* SCALE_INV [1]: 1/scale, written by block 0 */
        };
        struct {                /* MXFP8 and NVFP4 block scales; FP8 block scaling's fp32
                                 * scale_inv in TE's GEMM_READY layouts (numerics 2.5), as
                                 * bytes */
            uint8_t *scale_row; /* ROWWISE_SCALE_INV: MXFP8 E8M0 [roundup(M,128),
                                 * roundup(cdiv(K,32),4)]; NVFP4 E4M3 [roundup(M,128),
                                 * roundup(K/16,4)] */
            uint8_t *scale_col; /* COLUMNWISE_SCALE_INV: MXFP8 E8M0 [roundup(cdiv(M,32),4),
                                 * roundup(K,128)]; NVFP4 E4M3 [roundup(K,128), roundup(M/16,4)] */
        };
    };
    int64_t M;
    int64_t K;
    union {
        struct {                    /* NVFP4 stochastic rounding, when the variant rounds so */
            uint64_t sr_seed;       /* Philox key */
            uint64_t sr_offset;     /* counter high half; the columnwise copy xors in 1 << 63 */
        };
        struct {                    /* fp8_current and fp8_block (numerics 2.2, 2.5) */
            float amax_epsilon;     /* lower bound of the amax the scale is taken from */
            int32_t power_2_scales; /* 1 = scales rounded down to powers of two */
            int32_t pass;           /* fp8_current: 0 = statistics and amax, 1 = quantize;
                                     * fp8_block's tiled entry: 1 = mu/rsigma given, the
                                     * columnwise copy only */
        };
    };
    float eps;
    int32_t da_fp32;      /* QF_PROLOGUE_DACT: 1 = da is fp32 */
} qf_q_params;
QF_STATIC_ASSERT(sizeof(qf_q_params) == 128, "qf_q_params ABI: at most 128 bytes (see above)");

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

/* MXFP8 scale layouts (numerics 2.3). NOTE: the kernels' -DQF_SCALE_SWIZZLED=0|1 option selects
 * one. */
typedef enum qf_scale_layout {
    QF_SCALE_LAYOUT_COMPACT = 0,   /* row-major padded scale matrix */
    QF_SCALE_LAYOUT_SWIZZLED = 1,  /* 128x4 tiles of 512 bytes, as cuBLASLt's block-scaled GEMM reads */
    QF_SCALE_LAYOUT_COUNT
} qf_scale_layout;

/* E8M0 exponent rounding of an MXFP8 block scale (numerics 2.3). */
typedef enum qf_scale_rounding {
    QF_SCALE_ROUNDING_CEIL = 0,   /* ceil(log2(amax / fp8_max)): TE and cvt.rp.satfinite.ue8m0 */
    QF_SCALE_ROUNDING_FLOOR = 1,  /* OCP MX v1.0: floor(log2(amax)) - emax of the element format */
    QF_SCALE_ROUNDING_COUNT
} qf_scale_rounding;

#define QF_MX_BLOCK 32
#define QF_FP8_BLOCK 128 /* FP8 block scaling (numerics 2.5): 1x128, 128x1, 128x128 blocks */
/* Rows and columns of a `<name>_cols` entry's tiles (per-tensor FP8, MXFP8). */
#define QF_COLS_TILE 64
/* Tiles per partial of dbias in per-tensor FP8's `_cols` entry: dbias_part holds one row of
 * column sums per group of QF_DBIAS_GROUP tile rows (QF_DBIAS_GROUP * QF_COLS_TILE rows of the
 * input; the last group may be shorter). */
#define QF_DBIAS_GROUP 8
/* The rows of dbias_part for M rows (a multiple of QF_COLS_TILE). */
#define QF_DBIAS_PARTS(M) (((M) / QF_COLS_TILE + QF_DBIAS_GROUP - 1) / QF_DBIAS_GROUP)
/* Dynamic shared memory of the FP8 block-scaling tiled quantizer for x of in_size bytes per
 * element: two staged 128x128 chunks of 16-bit x, none for fp32 x. */
#define QF_FP8_BLOCK_TILED_SMEM(in_size) ((in_size) == 2 ? 2 * QF_FP8_BLOCK * QF_FP8_BLOCK * 2 : 0)

/* The [K] vectors a norm reads (qf_norm): 2 for LayerNorm (gamma, beta), 1 for RMSNorm (gamma), 0
 * without a norm. */
#define QF_NORM_PARAMS(norm) ((norm) == QF_NORM_LAYERNORM ? 2 : (norm) == QF_NORM_RMSNORM ? 1 : 0)

/* Dynamic shared memory of a row-in-registers quantizer entry `<name>_rowsIT` with norm `norm`,
 * for x of in_size bytes per element: each thread's IT 16-byte vectors of the norm's parameters
 * (QF_NORM_PARAMS) as fp32 (templates/qf_dev_norm.cuh rows_params); none without a norm or past 4
 * vectors per thread, whose entries read them from global memory (in_size is then not used). */
#define QF_ROWS_PARAM_SMEM(it, in_size, norm, threads)                                             \
    ((it) <= 4 && QF_NORM_PARAMS(norm) > 0                                                         \
         ? (it) * (threads) * (16 / (in_size)) * 4 * QF_NORM_PARAMS(norm)                          \
         : 0)

/* Parameter block of the MXFP8 GEMM on Hopper: y[M, N] = A[M, K] B[N, K]^T (+ bias), both operands
 * rowwise MXFP8 (1x32 blocks along K) with compact E8M0 scales. */
typedef struct qf_mx_gemm_params {
    const uint8_t *a;        /* [M, K] */
    const uint8_t *a_scale;  /* [roundup(M,128), roundup(cdiv(K,32),4)] compact */
    const uint8_t *b;        /* [N, K] */
    const uint8_t *b_scale;  /* [roundup(N,128), roundup(cdiv(K,32),4)] compact */
    const uint16_t *bias;    /* [N] bf16, or NULL */
    uint16_t *y;             /* [M, N] bf16 */
    int64_t M;
    int64_t N;
    int64_t K;
    int64_t scale_cols;      /* roundup(cdiv(K,32),4): row stride of both scale matrices */
} qf_mx_gemm_params;
QF_STATIC_ASSERT(sizeof(qf_mx_gemm_params) == 10 * 8, "qf_mx_gemm_params ABI");

/* Tiling of that kernel (templates/sm90_mxfp8_gemm.cu), shared with its launcher
 * (runtime/ops_mxfp8_gemm.c) so that both agree on the grid (one block per TILE_M x TILE_N tile
 * of y) and the dynamic shared memory: per stage, the A and B k-tiles (FP8 bytes), their decoded
 * scales (fp32) and one scale-byte range per warp. sm_89 offers 99 KiB per block, hence fewer
 * stages there. TILE_N 128: 8 warps of 64 x 32, one block per SM (255 registers); TILE_N 64: 8
 * warps of 32 x 32, two blocks per SM (MIN_BLOCKS 2 caps registers at 128), measured slower. */
#define QF_MX_GEMM_TILE_M 128
#define QF_MX_GEMM_TILE_N 128
#define QF_MX_GEMM_MIN_BLOCKS 1 /* resident blocks per SM the registers are sized for */
#define QF_MX_GEMM_TILE_K 128
#define QF_MX_GEMM_STAGES 4      /* sm_90 and later */
#define QF_MX_GEMM_STAGES_SM89 2 /* sm_89 */
#define QF_MX_GEMM_SMEM_BYTES_FOR(stages)                                                       \
    ((stages) * ((QF_MX_GEMM_TILE_M + QF_MX_GEMM_TILE_N) *                                      \
                     (QF_MX_GEMM_TILE_K + 4 * (QF_MX_GEMM_TILE_K / QF_MX_BLOCK)) +             \
                 4 * 8))
#define QF_MX_GEMM_SMEM_BYTES QF_MX_GEMM_SMEM_BYTES_FOR(QF_MX_GEMM_STAGES)

/* An opaque TMA descriptor (CUtensorMap: 128 bytes, 64-byte aligned), encoded by the host with
 * cuTensorMapEncodeTiled and read by cp.async.bulk.tensor from the kernel's parameter space. */
#if defined(__cplusplus)
typedef struct alignas(64) qf_tma_desc {
    uint64_t w[16];
} qf_tma_desc;
#else
typedef struct qf_tma_desc {
    _Alignas(64) uint64_t w[16];
} qf_tma_desc;
#endif
QF_STATIC_ASSERT(sizeof(qf_tma_desc) == 128, "qf_tma_desc is a CUtensorMap");

/* Parameter block of the warp-specialized block-scaled GEMM that the MXFP8 and NVFP4 GEMM modules
 * run when compiled for sm_90a (templates/qf_dev_ws_gemm.cuh):
 * y[M, N] = alpha * deq(A) deq(B)^T (+ bias[N]) (+ y when accumulate), A [M, K] and B [N, K]
 * K-major in the copy's format (MXFP8: one byte per element; NVFP4: two per byte), each read
 * through its TMA descriptor (2-D, uint8, dims {row bytes, rows}, box {QF_WS_RAW_ROW_*, tile
 * rows}, zero fill past the edges; B's with the swizzle of its box width, 64 or 32 bytes) and
 * its compact scale matrix (row stride scale_cols).
 * alpha is NVFP4's fl(fl(amax_a * amax_b) / (6*6*448*448)) (numerics 2.4), 1 for MXFP8 (amax_a
 * NULL). y is bf16, or fp32 when y_fp32 (accumulate adds into it). */
typedef struct qf_ws_gemm_params {
    qf_tma_desc tma_a;
    qf_tma_desc tma_b;
    const uint8_t *a_scale;  /* compact: [roundup(M,128), scale_cols] */
    const uint8_t *b_scale;  /* compact: [roundup(N,128), scale_cols] */
    const float *amax_a;     /* NVFP4: [1] global amax of A; NULL for MXFP8 */
    const float *amax_b;     /* NVFP4: [1] global amax of B */
    const uint16_t *bias;    /* [N] bf16, or NULL */
    void *y;                 /* [M, N] bf16, or fp32 when y_fp32 */
    int64_t M;
    int64_t N;
    int64_t K;               /* elements; a multiple of 32 */
    int64_t scale_cols;      /* row stride of both scale matrices */
    int32_t y_fp32;          /* 1: y is fp32 */
    int32_t accumulate;      /* 1: y += the product (fp32 y, no bias) */
} qf_ws_gemm_params;
QF_STATIC_ASSERT(sizeof(qf_ws_gemm_params) == 384,
                 "qf_ws_gemm_params ABI (padded to 64 bytes)");
/* Its tiling: one persistent block of QF_WS_THREADS per SM (a warpgroup of QF_WS_DQ_THREADS
 * dequantizing threads, then two warpgroups of MMAs; 168 registers per thread at launch, moved
 * to the MMA warpgroups by setmaxnreg), output tiles of QF_WS_TILE_M x QF_WS_TILE_N, k-tiles of
 * QF_WS_TILE_K elements; QF_WS_RAW_STAGES stages of packed data, QF_WS_BF_STAGES of
 * dequantized 16-bit B tiles. */
#define QF_WS_THREADS 384
#define QF_WS_DQ_THREADS 128
#define QF_WS_TILE_M 128
#define QF_WS_TILE_N 256
#define QF_WS_TILE_K 64
#define QF_WS_RAW_STAGES 4
#define QF_WS_BF_STAGES 3
#define QF_WS_RAW_ROW_MXFP8 QF_WS_TILE_K       /* bytes of one row's k-tile: MXFP8 */
#define QF_WS_RAW_ROW_NVFP4 (QF_WS_TILE_K / 2) /* NVFP4 */
/* Dynamic shared memory for raw rows of r bytes: the 16-bit B tiles, the raw stages, 16
 * mbarriers and 1024 bytes to align the allocation to the 128-byte swizzle atom. */
#define QF_WS_SMEM_BYTES(r)                                                                       \
    (QF_WS_BF_STAGES * QF_WS_TILE_N * QF_WS_TILE_K * 2 +                                         \
     QF_WS_RAW_STAGES * (QF_WS_TILE_M + QF_WS_TILE_N) * (r) + 16 * 8 + 1024)

/* Parameter block of the `<name>_dequant` entry of the MXFP8 and NVFP4 GEMM modules
 * (templates/qf_dev_dequant.cuh): out [rows, cols] bf16 = each element of one quantized copy times
 * its block scale (numerics 7: exact in bf16 for MXFP8 scale exponents in [-117, 119], always for
 * NVFP4; NVFP4's global scale is left to the GEMM's alpha). The data is [rows, cols] elements
 * (E2M1: cols/2 bytes, low nibble first); the scale of element (r, c) is
 * scale[(r / block_rows) * scale_ld + c / block_cols] (compact layouts of numerics 2.3, 2.4), so
 * padding entries are never read; block_rows and block_cols are powers of two. Each thread writes
 * QF_DQ_CHUNKS chunks of QF_DQ_VEC consecutive elements of one row; chunk i is in row i / per_row,
 * per_row = cdiv(cols, QF_DQ_VEC), which the kernel forms as the high 64 bits of i *
 * per_row_magic (qf_dq_magic, runtime/op_gemm.c).
 * With elem QF_DTYPE_BF16 the entry broadcasts a bias instead: data is bf16 [cols], out [rows,
 * cols] (fp32 when out_fp32) gets it in every row, and scale, when not NULL, is an fp32 slot set
 * to 1 (the GEMM's device beta; rows 0 sets only that). */
typedef struct qf_dq_params {
    const uint8_t *data;
    const uint8_t *scale;
    uint16_t *out;           /* [rows, cols] bf16 */
    int64_t rows;
    int64_t cols;            /* any; multiples of QF_DQ_VEC take the vector path */
    int64_t scale_ld;        /* entries per scale row */
    int32_t elem;            /* QF_DTYPE_E4M3, E5M2 (E8M0 scales) or E2M1 (E4M3 scales) */
    int32_t block_rows;      /* 1 (1x32, 1x16 blocks) or 32 (MXFP8's columnwise 32x1 blocks) */
    int32_t block_cols;      /* 32, 16 or 1 */
    int32_t out_fp32;        /* the bias broadcast only: 1 writes out as fp32 [rows, cols] */
    uint64_t per_row_magic;  /* ceil(2^64 / per_row), 0 when per_row is 1 (qf_dq_magic) */
} qf_dq_params;
QF_STATIC_ASSERT(sizeof(qf_dq_params) == 9 * 8, "qf_dq_params ABI");
#define QF_DQ_THREADS 256 /* threads per block of `<name>_dequant` */
#define QF_DQ_VEC 8       /* elements per chunk: an 8-byte FP8 load, a 16-byte bf16 store */
#define QF_DQ_CHUNKS 2    /* chunks per thread, QF_DQ_THREADS apart */

/* Parameter block of the norm backward module (templates/smxx_norm_backward.cu, numerics 6):
 * dx [M, K] of x's dtype and, through per-block partial sums, dgamma and dbeta [K] fp32. The main
 * entry runs `blocks` blocks of rows_per_block consecutive rows each and writes its column sums
 * of dxn * xh and dxn to part[blk * K + k] and part[(blocks + blk) * K + k]; the <name>_reduce
 * entry (QF_REDUCE_COLS columns per block) adds each column's in a fixed order into dgamma and
 * dbeta. */
typedef struct qf_nb_params {
    const void *x;           /* [M, K], the kernel's dtype */
    const void *dxn;         /* [M, K] bf16, or fp32 when dxn_fp32 */
    const void *gamma;       /* [K] x's dtype, or fp32 when gamma_fp32 */
    const float *mu;         /* [M] (LayerNorm; unused for RMSNorm) */
    const float *rsigma;     /* [M] */
    void *dx;                /* [M, K], x's dtype */
    float *part;             /* [2, blocks, K] scratch */
    float *dgamma;           /* [K] */
    float *dbeta;            /* [K] (LayerNorm; NULL for RMSNorm) */
    int64_t M;
    int64_t K;
    int64_t rows_per_block;
    int32_t blocks;
    int32_t dxn_fp32;
    int32_t gamma_fp32;
    int32_t pad_;
} qf_nb_params;
QF_STATIC_ASSERT(sizeof(qf_nb_params) == 14 * 8, "qf_nb_params ABI");
#define QF_NB_MAX_BLOCKS 512   /* at most this many row blocks (the partials' height) */
#define QF_NB_MAX_K 24576      /* 2 K fp32 accumulators in shared memory (192 KiB) */
/* The norm backward's accumulators of dgamma and of dbeta in shared memory: this many floats each
 * for K columns at `threads` threads per block (K rounded up to 8 columns per thread; at most
 * QF_NB_MAX_K for K <= QF_NB_MAX_K at 256 threads). */
#define QF_NB_ACC(K, threads) (((K) + 8 * (threads) - 1) / (8 * (threads)) * (8 * (threads)))
#define QF_REDUCE_COLS 32      /* columns per block of a _reduce entry (column_sum) */

/* Parameter block of the activation module (templates/smxx_activation.cu, numerics 6): forward
 * out = a [M, F] from h [M, Fin]; <name>_grad out = dh [M, Fin] from da [M, F] and h; Fin = 2F
 * for QF_ACT_SWIGLU, else F. h, a and dh in the kernel's dtype; optionally the amax of out. */
typedef struct qf_act_params {
    const void *h;
    const void *da;          /* bf16, or fp32 when da_fp32 (<name>_grad only) */
    void *out;
    int64_t M;
    int64_t F;
    int32_t act;             /* qf_activation */
    int32_t da_fp32;
    float *amax;             /* NULL, or [1] fp32 zeroed by the runtime: max-merged with |out| as
                              * stored (after rounding to the kernel's dtype), NaN kept (current
                              * scaling's amax of a or dh, numerics 2.2) */
} qf_act_params;
QF_STATIC_ASSERT(sizeof(qf_act_params) == 7 * 8, "qf_act_params ABI");

/* Parameter block of the dbias module (templates/smxx_dbias.cu, numerics 6): dbias [N] = sum_M dy
 * for dy [M, N], both of the kernel's dtype, through per-block partials as qf_nb_params (blocks of
 * rows_per_block rows, at most QF_NB_MAX_BLOCKS; N <= 2^30, QF_DB_MAX_N in op_bwd.c). */
typedef struct qf_db_params {
    const void *dy;          /* [M, N] */
    float *part;             /* [blocks, N] scratch */
    void *dbias;             /* [N] */
    int64_t M;
    int64_t N;
    int64_t rows_per_block;
    int32_t blocks;
    int32_t da_fp32;         /* QF_PROLOGUE_DACT: 1 = da is fp32 */
    const void *da;          /* QF_PROLOGUE_DACT: [M, F] (dy is then h, the sums are dh's) */
} qf_db_params;
QF_STATIC_ASSERT(sizeof(qf_db_params) == 8 * 8, "qf_db_params ABI");

/* Parameter block of the NVFP4 GEMM on Hopper (numerics 2.4): y[M, N] = alpha * A B^T (+ bias),
 * both operands rowwise NVFP4 (packed E2M1, 1x16 blocks along K) with compact E4M3 scales, and
 * alpha = fl(fl(amax_a * amax_b) * fl(1/(6*6*448*448))) read from the device amaxes. The same
 * block feeds the module's <name>_alpha entry (one thread writes {alpha, 0} to alpha_out: the
 * device alpha and beta of the cuBLASLt path on sm_100 and later). */
typedef struct qf_nv_gemm_params {
    const uint8_t *a;        /* [M, K/2] packed E2M1 */
    const uint8_t *a_scale;  /* [roundup(M,128), roundup(K/16,4)] E4M3, compact */
    const uint8_t *b;        /* [N, K/2] packed E2M1 */
    const uint8_t *b_scale;  /* [roundup(N,128), roundup(K/16,4)] E4M3, compact */
    const float *amax_a;     /* [1] global amax of A */
    const float *amax_b;     /* [1] global amax of B */
    const uint16_t *bias;    /* [N] bf16, or NULL */
    uint16_t *y;             /* [M, N] bf16 */
    float *alpha_out;        /* [2] <name>_alpha only; NULL for the GEMM */
    int64_t M;
    int64_t N;
    int64_t K;               /* elements; a multiple of 32 */
    int64_t scale_cols;      /* roundup(K/16,4): row stride of both scale matrices */
} qf_nv_gemm_params;
QF_STATIC_ASSERT(sizeof(qf_nv_gemm_params) == 13 * 8, "qf_nv_gemm_params ABI");

/* Tiling of that kernel (templates/sm90_nvfp4_gemm.cu), shared with its launcher
 * (runtime/ops_nvfp4_gemm.c) and qfuse-gen: one block of 8 warps per TILE_M x TILE_N tile of y,
 * k-tiles of TILE_K elements (TILE_K/2 bytes of packed data and TILE_K/16 scale bytes per row).
 * Dynamic shared memory per stage: the A and B k-tiles and their raw scale bytes. sm_89 offers
 * 99 KiB per block, hence fewer stages there. */
#define QF_NV_GEMM_TILE_M 128
#define QF_NV_GEMM_TILE_N 128
#define QF_NV_GEMM_MIN_BLOCKS 1 /* resident blocks per SM the registers are sized for */
#define QF_NV_GEMM_TILE_K 256
#define QF_NV_GEMM_STAGES 4      /* sm_90 and later */
#define QF_NV_GEMM_STAGES_SM89 2 /* sm_89 */
#define QF_NV_GEMM_SMEM_BYTES_FOR(stages)                                                       \
    ((stages) * (QF_NV_GEMM_TILE_M + QF_NV_GEMM_TILE_N) *                                      \
     (QF_NV_GEMM_TILE_K / 2 + QF_NV_GEMM_TILE_K / 16))
#define QF_NV_GEMM_SMEM_BYTES QF_NV_GEMM_SMEM_BYTES_FOR(QF_NV_GEMM_STAGES)

#endif /* QF_FORMATS_H */
