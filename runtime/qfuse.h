/* qfuse.h: public C API of libqfuse: one function per op (quantize, scale update, GEMM,
 * layernorm_linear), the family chosen by the recipe; fake shapes name every output slot.
 *
 * Conventions
 * - Tensors are row-major and contiguous; a tensor of any rank [..., K] is viewed as [M, K] with M
 *   the product of the leading dimensions (docs/numerics.md, notation).
 * - Every data pointer is a device pointer unless the comment says host. qfuse never takes
 *   ownership of caller memory.
 * - Functions return a qf_status; on failure qf_last_error() gives a thread-local message saying
 *   what failed, where, and what to do. Bad input launches nothing.
 * - `stream` (a cudaStream_t or CUstream) must be NULL, a special handle (cudaStreamLegacy,
 *   cudaStreamPerThread) or a stream of ctx's device primary context (the one qf_ctx_init binds);
 *   a stream of another CUDA context is QF_ERR_INVALID_ARG ("... belongs to another CUDA
 *   context"), checked after the arguments and before any launch.
 * - `recipe` names a recipe of the generated registry ("mxfp8") or is the path of a recipe .lua
 *   file, loaded and validated on first use (docs/recipes.md); the recipe picks the family, and
 *   the family the path each op takes.
 * - Numerics follow docs/numerics.md; "numerics 2.4" below is its section 2.4.
 */
#ifndef QFUSE_H
#define QFUSE_H

#include <stddef.h>
#include <stdint.h>

#include "qf_formats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum qf_status {
    QF_OK = 0,
    QF_ERR_INVALID_ARG = 1,  /* null pointer, wrong shape/dtype, misaligned or too-small buffer */
    QF_ERR_UNSUPPORTED = 2,  /* valid request this build or GPU cannot run */
    QF_ERR_NO_DEVICE = 3,    /* no CUDA driver or no GPU */
    QF_ERR_CUDA = 4,         /* CUDA driver/runtime call failed */
    QF_ERR_NVRTC = 5,        /* kernel compile failed; message holds the NVRTC log */
    QF_ERR_CUBLAS = 6,       /* cuBLASLt call failed or found no algorithm */
    QF_ERR_CACHE = 7,        /* disk-cache I/O failure that could not be degraded */
    QF_ERR_OUT_OF_MEMORY = 8,
    QF_ERR_NOT_FOUND = 9,    /* unknown recipe or kernel variant */
    QF_ERR_INTERNAL = 10,
    QF_STATUS_COUNT
} qf_status;

/* Name of a status ("QF_ERR_INVALID_ARG"); never null. */
const char *qf_status_name(qf_status s);

/* Message of the last failure on this thread; "" when none. Owned by qfuse, valid until the next
 * qfuse call on this thread. */
const char *qf_last_error(void);

/* ------------------------------------------------------------------ tensors and fake shapes */

#define QF_MAX_DIMS 8

/* A view of caller memory. Does not own data. ndim in [1, QF_MAX_DIMS]. */
typedef struct qf_tensor {
    void *data;
    qf_dtype dtype;
    int ndim;
    int64_t dims[QF_MAX_DIMS];
} qf_tensor;

/* One output as described by a fake-shape function (numerics 4). */
typedef struct qf_shape {
    const char *name;   /* "rowwise_data", "columnwise_data", "amax", "scale_inv", "mu", ... */
    qf_dtype dtype;
    int ndim;
    int64_t dims[4];
    uint64_t bytes;     /* exact bytes written, at most INT64_MAX */
} qf_shape;

/* Bytes of one element of dtype; 0 for E2M1 (packed two per byte: an E2M1 tensor's dims count
 * bytes, as in the NVFP4 slots below). */
size_t qf_dtype_size(qf_dtype dt);
/* Name of a dtype ("bf16", "e4m3", ...); "?" when out of range. */
const char *qf_dtype_name(qf_dtype dt);
/* Product of dims[0..ndim-1]; -1 when ndim is out of range, a dim is negative or the product
 * overflows int64_t. */
int64_t qf_tensor_numel(const qf_tensor *t);

/* ------------------------------------------------------------------ context */

typedef struct qf_ctx qf_ctx_t; /* opaque: device, arch, cuBLASLt handle, kernel table */

/* Creates a context on CUDA device `device` (primary context). Returns QF_ERR_NO_DEVICE when no
 * driver or GPU is present (callers and tests use that to skip GPU work), QF_ERR_UNSUPPORTED for
 * a GPU older than sm_89 (QF_ARCH_MIN: FP8 conversions), QF_ERR_INVALID_ARG for a negative
 * device index, or one past the devices present (on a machine with none, QF_ERR_NO_DEVICE comes
 * first). *out is owned by the caller and released with qf_ctx_free. */
qf_status qf_ctx_init(qf_ctx_t **out, int device);
/* A dry-run context with no device, for compute capability `arch` (10*major+minor, 89..199, the
 * range qf_ctx_init accepts and the tools' --arch spells sm_89..sm_199): every
 * op validates its arguments exactly as on a GPU (recipe, shapes against the fake-shape
 * functions, dtypes, alignment, GEMM constraints of that arch) and then returns
 * QF_ERR_NO_DEVICE ("arguments are valid, but the context has no device") instead of launching;
 * a bad argument returns its own error first. Works on machines without a driver or GPU (build
 * machines, CI). *out is owned by the caller (qf_ctx_free). Errors: QF_ERR_INVALID_ARG (out NULL,
 * arch out of range), QF_ERR_OUT_OF_MEMORY. */
qf_status qf_ctx_init_host(qf_ctx_t **out, int arch);
void qf_ctx_free(qf_ctx_t *ctx);
/* Compute capability as 10*major+minor (90 for H100/H200). */
int qf_ctx_arch(const qf_ctx_t *ctx);

/* How the last kernel lookup of an op was served. */
typedef enum qf_kernel_source {
    QF_KSRC_COMPILED = 0,  /* NVRTC compile (and stored to the disk cache) */
    QF_KSRC_MEMORY = 1,    /* in-memory table */
    QF_KSRC_DISK = 2,      /* disk cache */
    QF_KSRC_COUNT
} qf_kernel_source;

typedef struct qf_kernel_info {
    char name[96];          /* variant name, also the CUDA entry symbol */
    char key[33];           /* fusion key, 32 hex digits (numerics 5) */
    qf_kernel_source source;
    double ms;              /* wall time of the lookup (compile, disk load or memory hit) */
    int on_disk;            /* 1 when the binary is in the disk cache after this lookup (loaded
                             * from it, or compiled and stored); 0 for a memory hit, a disabled,
                             * memory-only or read-only disk cache, or a failed store */
} qf_kernel_info;

/* Info about the most recent kernel lookup made by ctx on this thread (for reporting). */
const qf_kernel_info *qf_ctx_last_kernel(const qf_ctx_t *ctx);

/* Name of a recipe family ("fp8_delayed", "mxfp8", ...), the scaling mode in messages; "?" when
 * out of range. */
const char *qf_family_name(qf_family f);

/* ------------------------------------------------------------------ quantized tensors */

/* Named slots of a quantized tensor. Each is an output of the fake shapes (numerics 4), named
 * as qf_slot_name says; an op validates every buffer by matching the fake shapes to the slots
 * by those names. Which slots a family uses, shapes as [rows, cols]:
 *   per-tensor FP8 (numerics 2.1): ROWWISE_DATA [M, K] and/or COLUMNWISE_DATA [K, M] (transposed),
 *       E4M3/E5M2; AMAX [1] fp32 (max-merged, caller zeroes it); SCALE_INV [1] fp32 (1/scale)
 *   MXFP8 (numerics 2.3): ROWWISE_DATA [M, K] with ROWWISE_SCALE_INV [roundup(M,128),
 *       roundup(cdiv(K,32),4)] E8M0; COLUMNWISE_DATA [M, K] (NOT transposed) with
 *       COLUMNWISE_SCALE_INV [roundup(cdiv(M,32),4), roundup(K,128)]
 *   NVFP4 (numerics 2.4): ROWWISE_DATA [M, K/2] bytes (E2M1, two per byte, low nibble first) with
 *       ROWWISE_SCALE_INV [roundup(M,128), roundup(K/16,4)] E4M3 and AMAX_ROWWISE [1] fp32;
 *       COLUMNWISE_DATA [K, M/2] (transposed; RHT when the recipe applies it to the role) with
 *       COLUMNWISE_SCALE_INV [roundup(K,128), roundup(M/16,4)] and AMAX_COLUMNWISE [1]
 *   FP8 block scaling (numerics 2.5): ROWWISE_DATA [M, K] E4M3 with ROWWISE_SCALE_INV fp32
 *       [cdiv(K,128), roundup(M,4)] (1x128 blocks; weights: [cdiv(M,128), roundup(cdiv(K,128),4)],
 *       128x128 tiles); COLUMNWISE_DATA [K, M] (transposed) with COLUMNWISE_SCALE_INV fp32
 *       [cdiv(M,128), roundup(K,4)] (weights: [cdiv(K,128), roundup(cdiv(M,128),4)])
 *   a fused norm (numerics 3): MU [M] fp32 (layernorm only), RSIGMA [M] fp32
 * Append-only (STYLE 4): never renumber a slot. */
typedef enum qf_slot {
    QF_SLOT_ROWWISE_DATA = 0,
    QF_SLOT_ROWWISE_SCALE_INV = 1,
    QF_SLOT_COLUMNWISE_DATA = 2,
    QF_SLOT_COLUMNWISE_SCALE_INV = 3,
    QF_SLOT_AMAX = 4,
    QF_SLOT_SCALE_INV = 5,
    QF_SLOT_AMAX_ROWWISE = 6,
    QF_SLOT_AMAX_COLUMNWISE = 7,
    QF_SLOT_MU = 8,
    QF_SLOT_RSIGMA = 9,
    QF_SLOT_COUNT
} qf_slot;

/* The fake-shape name of a slot ("rowwise_data", ...); NULL when s is out of range. */
const char *qf_slot_name(qf_slot s);
/* The slot whose fake-shape name is `name`; -1 when none is. */
int qf_slot_from_name(const char *name);

/* The query of a fake-shape function (registry.h): op, role, norm, outputs, M, N, K. */
typedef struct qf_shape_query qf_shape_query;

/* The fake shapes (numerics 4) of query q under `recipe`, a shipped recipe's name or the path of a
 * .lua recipe file (loaded once per process, as the ops load it: no GPU needed): every output of
 * the op, in order, into out[0..cap), and their count into *n. Sizes every buffer an op takes
 * for any recipe. Errors: QF_ERR_INVALID_ARG (NULL argument, a query the recipe rejects, an
 * invalid recipe file, more outputs than cap: QF_FAKE_MAX_OUTPUTS of family.h, 16, is enough),
 * QF_ERR_NOT_FOUND (no such recipe or file), QF_ERR_UNSUPPORTED (a family not implemented
 * yet). */
qf_status qf_fake_shapes(const char *recipe, const qf_shape_query *q, qf_shape *out, int cap,
                         int *n);

/* One output of a fake-shape query as formulas (numerics 4 notation): each dim is a symbol of the
 * query ("M", "N", "K"), a decimal constant ("1"), or "roundup(a,b)" / "cdiv(a,b)" of formulas,
 * which the query's sizes turn into qf_fake_shapes' dims. For shape planners that carry the sizes
 * as symbols (torch.compile with dynamic dims). Strings are static, owned by qfuse. */
typedef struct qf_shape_formula {
    const char *name;
    qf_dtype dtype;
    int ndim;
    const char *dims[4];
} qf_shape_formula;

/* The fake shapes of query q under `recipe` as formulas: the same outputs, in the same order,
 * with the same names and dtypes as qf_fake_shapes for q (which checks q the same way), each dim
 * as its formula in M, N and K. Errors as qf_fake_shapes. */
qf_status qf_fake_shape_formulas(const char *recipe, const qf_shape_query *q,
                                 qf_shape_formula *out, int cap, int *n);

/* What a caller that keeps a recipe's state needs to know of it (qf_recipe_query). */
typedef struct qf_recipe_info {
    qf_family family;
    qf_dtype fmt[QF_ROLE_COUNT]; /* element format of each role's data */
    int64_t amax_history_len;    /* fp8_delayed: the history length qf_scale_update takes (H);
                                  * 0 for the families that compute their own scales */
    int reserved[8];             /* for later fields: written 0 */
} qf_recipe_info;

/* The family, formats and delayed-scaling history length of `recipe` (a shipped recipe's name or
 * a .lua path, loaded as the ops load it) into *info. Errors as qf_fake_shapes. */
qf_status qf_recipe_query(const char *recipe, qf_recipe_info *info);

/* The block-scale layout the GEMM of compute capability arch reads for `recipe` (name or .lua
 * path): quantize with it the operands of that arch's GEMM (numerics 6). Errors as
 * qf_fake_shapes, and QF_ERR_UNSUPPORTED when the family has no GEMM on arch. */
qf_status qf_gemm_scale_layout(const char *recipe, int arch, qf_scale_layout *layout);

/* A quantized tensor: one caller buffer per slot (data == NULL: absent) and the layout of its
 * block-scale matrices. A quantizer produces the rowwise copy when t[QF_SLOT_ROWWISE_DATA].data
 * is set and the columnwise copy when t[QF_SLOT_COLUMNWISE_DATA].data is, and writes the other
 * slots its recipe's fake shapes list for them; slots it does not list are ignored. The GEMM
 * reads the data, scales and amax of the copy it is given. Does not own any memory. */
typedef struct qf_quantized {
    qf_tensor t[QF_SLOT_COUNT];
    qf_scale_layout layout; /* MXFP8, NVFP4: compact (the generated Hopper GEMM) or swizzled
                             * (cuBLASLt on sm_100+); FP8 block scaling: compact, its one
                             * layout (another is refused); per-tensor FP8 ignores it */
} qf_quantized;

/* The copies of a quantized tensor. */
typedef enum qf_copy {
    QF_COPY_ROWWISE = 0,    /* contiguous along K of the forward GEMM (fprop operands) */
    QF_COPY_COLUMNWISE = 1, /* the copy for the backward GEMMs (dgrad, wgrad; numerics 6) */
    QF_COPY_COUNT
} qf_copy;

/* A GEMM operand: one copy of a quantized tensor (not owned). */
typedef struct qf_operand {
    const qf_quantized *q;
    qf_copy copy;
} qf_operand;

/* ------------------------------------------------------------------ ops (numerics 2, 3, 6) */

/* The norm fused in front of a quantizer (numerics 3). QF_NORM_NONE: plain quantize. */
typedef struct qf_norm_desc {
    qf_norm norm;
    int zero_centered_gamma; /* 0 or 1 (else QF_ERR_INVALID_ARG); 1: g = fl(gamma) + 1 in fp32 */
    float eps;               /* finite, >= 0, inside the square root */
    qf_tensor gamma;         /* [K], x's dtype or fp32 */
    qf_tensor beta;          /* [K], gamma's dtype; layernorm only (data NULL for rmsnorm) */
} qf_norm_desc;

/* Stochastic-rounding stream of one quantization (NVFP4 grads, numerics 2.4): element i of a copy
 * is rounded with word i % 4 of Philox4x32-10(counter {i/4, offset}, key seed). A training job
 * advances offset every step. */
typedef struct qf_rng {
    uint64_t seed;
    uint64_t offset;
} qf_rng;

/* Quantizes x under the recipe's rules for `role`, optionally fused with a norm (numerics 2, 3).
 *   x:     [..., K] bf16, fp16 or fp32, viewed as [M, K] (M = product of the leading dims);
 *          NVFP4 needs M and K multiples of 16 and x 16-byte aligned.
 *   role:  QF_ROLE_INPUT with a norm (layernorm or rmsnorm: the fused norm + quantize of the
 *          activation) or without one (the input of a second Linear, as layernorm_mlp's fc2);
 *          QF_ROLE_WEIGHT or QF_ROLE_GRAD without one (norm NULL or QF_NORM_NONE).
 *   norm:  gamma/beta [K] (16-byte aligned for NVFP4), eps, zero_centered_gamma; NULL = none.
 *   scale: device fp32 [1], the quantization scale of delayed scaling (from qf_scale_update);
 *          required by fp8_delayed, ignored by the families that compute their scales.
 *   rng:   host struct; required where the recipe rounds stochastically (NVFP4 gradients),
 *          ignored elsewhere.
 *   out:   the slots the recipe's fake shapes list for the copies asked for (and MU, RSIGMA for a
 *          norm); block-scale padding is written 0x00 (MXFP8, NVFP4; 1.0 for FP8 block
 *          scaling's fp32 scales), the NVFP4 amaxes are zeroed by the op.
 * Numerics: fp8_delayed q = rn_sat(y * scale); MXFP8 1x32 (32x32 for weights when weight_2d)
 * E8M0 blocks; NVFP4 1x16 E4M3 blocks with a global amax, RHT on columnwise copies, stochastic
 * rounding of gradients (two launches: statistics and amax, then quantize).
 * Errors: QF_ERR_INVALID_ARG (names the argument: NULL ctx, recipe, x or out, a bad tensor, x
 * dtype, misaligned x, a norm or role that does not fit, gamma/beta of the wrong length or
 * dtype, beta or mu given for rmsnorm, no copy requested, a slot whose dtype, size or alignment
 * differs from its fake shape, two slots, or a slot and x, gamma, beta or (fp8_delayed) the
 * scale, whose bytes overlap, a bad layout, NULL scale for delayed scaling, NULL rng where
 * required, a stream of another context),
 * QF_ERR_NOT_FOUND (recipe or kernel variant),
 * QF_ERR_UNSUPPORTED (a family without a quantizer yet: "not implemented scaling mode"),
 * QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on `stream`. Does not own any buffer. */
qf_status qf_quantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_tensor *x,
                      const qf_norm_desc *norm, const float *scale, const qf_rng *rng,
                      qf_quantized *out, void *stream);

/* An amax reduction: called with one device fp32 amax [1] of a quantization and the stream the
 * op runs on, it must enqueue on that stream whatever makes *amax the MAX over a group (an NCCL
 * all-reduce over the data- or tensor-parallel ranks, numerics 2.2), and return QF_OK, or an
 * error status, which the op then returns with a message naming the slot. */
typedef qf_status (*qf_amax_reduce_fn)(void *user, float *amax, void *stream);

/* Sets the calling thread's amax reduction (fn NULL: none, the default). Every quantization the
 * thread runs afterwards whose scale comes from a per-tensor amax of the tensor itself (its
 * amax pass, then its cast pass) calls fn(user, amax, stream) between the two passes, so that
 * the scale is computed from the reduced amax: fp8_current (the AMAX slot) and NVFP4's global
 * amaxes (AMAX_ROWWISE and AMAX_COLUMNWISE, one call each), including those inside
 * qf_quantize_act and the layernorm_linear / layernorm_mlp compositions. Delayed scaling reduces
 * its amaxes before qf_scale_update instead; MXFP8 and FP8 block scaling have no per-tensor
 * amax. Not called by a device-less context. fn runs on the calling thread, inside the op, on
 * the host: while the stream is being captured into a CUDA graph it runs at capture time, and
 * what it enqueues on the stream is captured (an NCCL all-reduce can be). user is not owned. */
void qf_set_amax_reduce(qf_amax_reduce_fn fn, void *user);

/* The calling thread's amax reduction (NULL: none) and, in *user when user is not NULL, its user
 * pointer: for a caller that installs its own around some ops and restores the previous one. */
qf_amax_reduce_fn qf_get_amax_reduce(void **user);

/* Delayed-scaling update of all n tensors of a step in one launch (numerics 2.1).
 *   amax [n] fp32 (consumed: reset to 0), history [n, H] fp32 newest first, scale [n],
 *   scale_inv [n] fp32, fmt [n] uint8 (QF_DTYPE_E4M3 or QF_DTYPE_E5M2). All device pointers.
 *   H must be the recipe's amax_history_len (the layout of history the caller allocated).
 * A tensor whose amax is 0 did not run: its history and scale stay unchanged.
 * Errors: QF_ERR_INVALID_ARG (n < 1, H not the recipe's amax_history_len (1..8192),
 * a NULL pointer named, a float array not 4-byte aligned, two arrays that overlap, a stream of
 * another context), QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED (a
 * recipe whose family computes its scales in the quantizer, or "not implemented scaling mode"),
 * QF_ERR_NVRTC, QF_ERR_CUDA. */
qf_status qf_scale_update(qf_ctx_t *ctx, const char *recipe, int n, int H, float *amax,
                          float *history, float *scale, float *scale_inv, const uint8_t *fmt,
                          void *stream);

/* y[M, N] = A[M, K] B[N, K]^T (+ bias), bf16 or fp32, under the recipe's scaling (numerics 2,
 * 6), both operands K-major ("TN"), each one copy of a quantized tensor; the copies name the
 * training GEMM (numerics 6): fprop y = x W^T (a: x rowwise, b: W rowwise), dgrad dx = dy W (a: dy
 * rowwise, b: W columnwise), wgrad dW = dy^T x (a: dy columnwise, b: x columnwise; M is then
 * the layer's N and K its token count). a columnwise with b rowwise is QF_ERR_INVALID_ARG.
 * The per-tensor FP8, FP8 block and NVFP4 columnwise copies are transposed ([K, M]: every GEMM
 * is TN; NVFP4's wgrad needs the RHT on both columnwise copies or on neither); MXFP8's are not
 * (stored [M, K] like the rowwise copy, 32x1 blocks down M): its dgrad reads b [K, N] and its
 * wgrad a [K, M] and b [K, N], which sm_89..99 runs and sm_100+ does not yet
 * (QF_ERR_UNSUPPORTED). Per
 * family:
 *   fp8_delayed, fp8_current: cuBLASLt, y = (a.scale_inv * b.scale_inv) A B^T; a E4M3/E5M2,
 *       b E4M3; K and N multiples of 16; data and both SCALE_INV slots 16-byte aligned; sm_89+.
 *   fp8_block: cuBLASLt with each copy's block scales (VEC128_32F for inputs and gradients,
 *       BLK128x128_32F for weights; numerics 2.5), split accumulation; E4M3; K and N multiples
 *       of 16; sm_90+.
 *   mxfp8: every element times its 1x32 block's E8M0 scale, fp32 sums, one rounding after the
 *       bias; K % 32 == 0; scale padding is never read.
 *   nvfp4: alpha = fl(fl(amax_a * amax_b) * fl(1/(6*6*448*448))) (the amax slot of each
 *       operand's copy, read on the device) times the block-scaled products; K % 32 == 0.
 *   MXFP8 and NVFP4 on sm_89..99 (compact scales): staged, each operand dequantized to bf16
 *   (exact, numerics 7) into stream-ordered scratch of 2 (M + N) K bytes from the context's
 *   pool, then a bf16 cuBLASLt GEMM with fp32 sums (a bias enters as C, before the one
 *   rounding); M or N under 256 runs the generated kernel directly for the GEMMs it covers
 *   (QFUSE_HOPPER_GEMM overrides; on sm_89 an fp32 y or an accumulation always runs staged).
 *   On sm_100+ cuBLASLt's block-scaled GEMM (swizzled scales, N % 16 == 0). a and b must share
 *   one layout. The first call of a plan (shape, dtypes, bias, operand orders) on a cuBLASLt
 *   path times up to 8 algorithms (synchronizing the stream; skipped while it is being
 *   captured, for a staged GEMM with a bias, which accumulates onto y, and under
 *   QFUSE_GEMM_NO_TUNE=1).
 *   a: [..., K] data viewed as [M, K]; b: [N, K]; bias: [N] bf16 or NULL (or data NULL);
 *   y: [M, N] bf16 (the leading dims of a may be kept), or fp32: the fake shapes of a GEMM query
 *   with QF_OUT_FP32; an fp32 y holds the fp32 sums (plus bias) unrounded (numerics 6).
 * Errors: QF_ERR_INVALID_ARG (names the operand and slot: NULL operand, data, scale or amax, wrong
 * dtype, size or alignment, different K, K or N not a multiple the path needs, the wrong layout
 * for the arch, a pair of copies no training GEMM reads, NVFP4's wgrad with the RHT on one
 * copy only, y overlapping the bias or a slot the GEMM reads, a stream of another context),
 * QF_ERR_NOT_FOUND, QF_ERR_UNSUPPORTED (arch < 89,
 * MXFP8's dgrad or wgrad on sm_100+, "not implemented scaling mode", an operand or output too
 * large for one launch, a cuBLASLt too old for block scales), QF_ERR_OUT_OF_MEMORY (the staged
 * path's scratch), QF_ERR_NO_DEVICE (a device-less context), QF_ERR_NVRTC, QF_ERR_CUDA,
 * QF_ERR_CUBLAS. Asynchronous on stream. Does not own any buffer. */
qf_status qf_gemm(qf_ctx_t *ctx, const char *recipe, const qf_operand *a, const qf_operand *b,
                  const qf_tensor *bias, qf_tensor *y, void *stream);

/* Options of qf_gemm_ex; all zero (or a NULL pointer) is qf_gemm. */
typedef struct qf_gemm_opts {
    int accumulate;  /* 1: y += A B^T (beta = 1) into an fp32 y [M, N] (in a wgrad, y is the
                      * layer's main_grad [N, K]; numerics 6); takes no bias. Not tuned
                      * (qf_gemm's first-call timing would add up in y). */
    /* b's bf16 copy, written by qf_dequantize from the same operand b (same recipe and role)
     * and kept by the caller, e.g. a weight's across the micro-batches of a step (numerics 7):
     * a staged GEMM (MXFP8, NVFP4 on sm_89..99) reads it instead of dequantizing b, and runs
     * staged at every size unless QFUSE_HOPPER_GEMM=direct; the result is bit-identical to the
     * GEMM without it. Other paths (sm_100+) check it and do not read it; per-tensor FP8
     * recipes refuse it. bf16, the dims of b's stored copy in elements (what qf_dequantize
     * writes: [N, K] in this GEMM's terms, MXFP8's columnwise copy [K, N] as stored), 16-byte
     * aligned, overlapping neither y nor a's data and scales (refused, QF_ERR_INVALID_ARG). b
     * itself is still checked and read (its shapes, NVFP4's amax); that b_dequantized holds b's
     * values is the caller's promise. NULL: dequantize b in the call. */
    const qf_tensor *b_dequantized;
    int reserved[4]; /* for later options, so that the struct keeps its size: must be 0 */
} qf_gemm_opts;

/* qf_gemm with options (opts may be NULL). Errors as qf_gemm, and QF_ERR_INVALID_ARG for
 * opts->accumulate other than 0 or 1, or set with a y that is not fp32 or with a bias, for an
 * opts->b_dequantized of the wrong dtype, dims or alignment or under a per-tensor FP8 recipe, and
 * for a nonzero opts->reserved. */
qf_status qf_gemm_ex(qf_ctx_t *ctx, const char *recipe, const qf_operand *a, const qf_operand *b,
                     const qf_tensor *bias, qf_tensor *y, const qf_gemm_opts *opts,
                     void *stream);

/* The bf16 values of one copy of an MXFP8 or NVFP4 tensor, as the staged Hopper GEMM multiplies
 * them (numerics 7): out = bf16(decode(element) * decode(block scale)), exact for MXFP8 scale
 * exponents in [-117, 119] and every NVFP4 product; NVFP4's global alpha is not applied (the
 * GEMM applies it to its sums). A NaN scale makes its block NaN; scale padding is never read.
 *   role: the role x was quantized for (its element dtype is the recipe's format for it).
 *   x:    one copy of a quantized tensor (not owned): its data and scale_inv slots of the
 *         copy, compact scales (numerics 2.3, 2.4).
 *   out:  [R, C] bf16 (any view with that element count and last dim C), 16-byte aligned: the
 *         dims of the copy's data in elements (for NVFP4 C is twice the packed bytes), e.g. a
 *         weight W [N, K]'s rowwise copy [N, K], and MXFP8's columnwise copy of W, stored [N, K]
 *         too (32x1 blocks down N). Not overlapping x's data or scales (refused). Caller
 *         memory, not owned; may be passed as
 *         qf_gemm_opts.b_dequantized. An NVFP4 columnwise copy with the RHT (numerics 2.4) comes
 *         out in the transformed domain, as the GEMM multiplies it. MXFP8 takes any C (a last,
 *         shorter block); the GEMM takes whole 32-element blocks of K.
 * Errors: QF_ERR_INVALID_ARG (NULL or wrongly sized x, its data or scales, role not a qf_role,
 * x->copy not a qf_copy, scales not compact, out not bf16 of the copy's dims or misaligned, a
 * stream of another context), QF_ERR_UNSUPPORTED (a recipe whose family is not MXFP8 or NVFP4,
 * a copy too large for one launch), QF_ERR_NOT_FOUND, QF_ERR_NO_DEVICE, QF_ERR_NVRTC,
 * QF_ERR_CUDA. Asynchronous on stream. */
qf_status qf_dequantize(qf_ctx_t *ctx, const char *recipe, qf_role role, const qf_operand *x,
                        qf_tensor *out, void *stream);

/* The dims [R, C] of qf_dequantize's out for copy `copy` of q (and of a layer's kept bf16 weight
 * copies, qf_ln_linear.wq_bf16): that copy's data slot viewed 2-D, R its leading dims' product
 * and C its last dim in elements (two per byte for E2M1). q: a quantized tensor whose data slot
 * of `copy` has its dims set (its fake shape; the data may be NULL). No device needed. Errors:
 * QF_ERR_INVALID_ARG (q or dims NULL, copy not a qf_copy, a slot without dims). */
qf_status qf_dequantized_dims(const qf_quantized *q, qf_copy copy, int64_t dims[2]);

/* The gradients of a fused norm (numerics 6), caller memory sized by the fake shapes of a
 * QF_OP_NORM_BACKWARD query (norm, M, K, dtype = x's dtype). */
typedef struct qf_norm_grads {
    qf_tensor dx;     /* [M, K], x's dtype */
    qf_tensor dgamma; /* [K] fp32 (written, not accumulated) */
    qf_tensor dbeta;  /* [K] fp32, LayerNorm only (data NULL for RMSNorm) */
} qf_norm_grads;

/* Backward of xn = norm(x) (LayerNorm or RMSNorm, numerics 6) for the gradient dxn of its output:
 * with xh = (x - mu) * rsigma (RMSNorm: x * rsigma), g = gamma (+1 in fp32 when
 * zero_centered_gamma) and dxh = dxn * g,
 *   dx = rsigma * (dxh - mean_K(dxh) - xh * mean_K(dxh * xh))   (RMSNorm: no mean_K(dxh)),
 *   dgamma = sum_M dxn * xh,   dbeta = sum_M dxn (LayerNorm),
 * in fp32 from the forward's statistics (never recomputed); dx rounded once to x's dtype.
 *   norm:   the forward's norm, zero_centered_gamma and gamma [K] (x's dtype or fp32); eps and
 *           beta are not used.
 *   x:      [..., K] bf16, fp16 or fp32, the forward's input, viewed as [M, K]; K <= 24576.
 *   dxn:    [M, K] bf16 or fp32 (the dgrad GEMM's output).
 *   mu:     [M] fp32 (LayerNorm; ignored, and may be NULL, for RMSNorm), rsigma: [M] fp32: the
 *           MU and RSIGMA slots the forward's norm + quantize wrote.
 * No output may overlap an input or another output (QF_ERR_INVALID_ARG; RMSNorm's ignored mu
 * and beta excepted).
 *   out:    dx, dgamma, dbeta as the fake shapes list them.
 * Uses stream-ordered scratch of 2 cdiv(M, cdiv(M, 512)) K floats from the context's pool. Sums
 * over M run per block of rows, then over the blocks in a fixed order: deterministic, not the
 * reference's row order (within rel 1e-5 of fp64, numerics 6). Errors: QF_ERR_INVALID_ARG
 * (names the argument: NULL ctx, recipe, norm, x, dxn, mu, rsigma or out, a norm other than
 * layernorm or rmsnorm, a wrong dtype, size or alignment, an output overlapping an input or
 * another output, dbeta given for rmsnorm, a stream of another context; mu only for layernorm),
 * QF_ERR_UNSUPPORTED (K > 24576), QF_ERR_NOT_FOUND, QF_ERR_OUT_OF_MEMORY, QF_ERR_NO_DEVICE
 * (a device-less context, after every check), QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on
 * stream. Does not own any buffer. */
qf_status qf_norm_backward(qf_ctx_t *ctx, const char *recipe, const qf_norm_desc *norm,
                           const qf_tensor *x, const qf_tensor *dxn, const qf_tensor *mu,
                           const qf_tensor *rsigma, qf_norm_grads *out, void *stream);

/* dbias [N] = sum over the M rows of dy [..., N] (viewed as [M, N]; bf16, fp16 or fp32), in fp32,
 * stored in dy's dtype (numerics 6; the fake shapes of a QF_OP_DBIAS query with N and dtype).
 * N <= 2^30. Uses stream-ordered scratch of cdiv(M, cdiv(M, 512)) N floats; the sums over M run
 * per block of rows, then over the blocks in a fixed order (deterministic). Errors:
 * QF_ERR_INVALID_ARG (NULL ctx, recipe, dy or dbias, a wrong dtype, size or alignment, a stream
 * of another context),
 * QF_ERR_UNSUPPORTED (N > 2^30), QF_ERR_NOT_FOUND, QF_ERR_OUT_OF_MEMORY, QF_ERR_NO_DEVICE,
 * QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on stream. Does not own any buffer. */
qf_status qf_dbias(qf_ctx_t *ctx, const char *recipe, const qf_tensor *dy, qf_tensor *dbias,
                   void *stream);

/* The activation of layernorm_mlp (numerics 6): a = act(h), one elementwise pass in fp32 rounded
 * once to h's dtype. gelu (tanh approximation), relu: h [..., F] -> a [..., F]; swiglu: h = [h1 |
 * h2] of [..., 2F] -> a = silu(h1) * h2 [..., F]. h bf16, fp16 or fp32; a in h's dtype (the fake
 * shapes of a QF_OP_ACTIVATION query: M, N = F, dtype, QF_OUT_GATED for swiglu). Errors:
 * QF_ERR_INVALID_ARG (NULL ctx, recipe, h or a, act out of range, swiglu with an odd last dim, a
 * wrong dtype, size or alignment, a overlapping h other than as the same buffer under gelu or
 * relu (in place), a stream of another context), QF_ERR_NOT_FOUND, QF_ERR_NO_DEVICE,
 * QF_ERR_NVRTC, QF_ERR_CUDA. Asynchronous on stream. */
qf_status qf_activation_fwd(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                            const qf_tensor *h, qf_tensor *a, void *stream);

/* Its backward: dh [..., Fin] (h's dtype; [M, 2, F] in the fake shapes for swiglu) from
 * da [..., F] (bf16 or fp32) and the forward's h: gelu dh = da gelu'(h); relu dh = da where
 * h > 0, else 0; swiglu dh1 = da h2 silu'(h1), dh2 = da silu(h1) (numerics 6). Errors as
 * qf_activation_fwd (dh in a's place: it may lie on h or da only as the same buffer of the same
 * dtype under gelu or relu), and QF_ERR_INVALID_ARG for da (NULL, dtype, size). */
qf_status qf_activation_bwd(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                            const qf_tensor *h, const qf_tensor *da, qf_tensor *dh,
                            void *stream);

/* The activation fused with the quantization of its output, or its derivative with the gradient
 * quantization (numerics 6): a or dh is computed from h (and da) inside the quantizer and never
 * stored.
 *   h:   [..., Fin] bf16, fp16 or fp32 (fc1's output), viewed as [M, Fin]; swiglu: Fin = 2F,
 *        else F = Fin.
 *   da:  NULL: quantize a = act(h) [M, F] under the recipe's input role (fc2's input). Else
 *        [..., F] bf16 or fp32 (fc2's dgrad): quantize dh = da act'(h) [M, Fin] under the grad
 *        role (dh as qf_activation_bwd defines it).
 *   scale, rng, out: as qf_quantize for that role and [M, F] or [M, Fin] (no norm, no MU/RSIGMA).
 * Each value of a or dh is rounded to h's dtype first, as qf_activation_fwd / _bwd store it, so
 * the bytes equal qf_quantize of their output. h's alignment and the shapes as qf_quantize of
 * that tensor (NVFP4: a or dh [M, F or Fin] in multiples of 16); da 16-byte aligned. Every shape
 * runs (16-byte vectors where h, da and the rows allow, else one element at a time). No output
 * may overlap an input. Errors as qf_quantize, and QF_ERR_INVALID_ARG for act, an odd swiglu
 * Fin, h's dtype, da (NULL, dtype, size, alignment). Asynchronous on stream. Does not own any
 * buffer. */
qf_status qf_quantize_act(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                          const qf_tensor *h, const qf_tensor *da, const float *scale,
                          const qf_rng *rng, qf_quantized *out, void *stream);

/* dbias [Fin] of dh = da act'(h) (numerics 6) without dh in memory: the column sums of the dh
 * qf_activation_bwd would write (each value rounded to h's dtype, then summed in fp32 as
 * qf_dbias: the same bytes), stored in h's dtype. h [..., Fin] and da [..., F] as
 * qf_quantize_act (da 16-byte aligned; the fake shapes of a QF_OP_DBIAS query with N = Fin and
 * h's dtype); dbias may not overlap h or da. Limits, scratch and errors as qf_dbias, and
 * QF_ERR_INVALID_ARG for act, an odd swiglu Fin, da (NULL, dtype, size, alignment). */
qf_status qf_dbias_act(qf_ctx_t *ctx, const char *recipe, qf_activation act, const qf_tensor *h,
                       const qf_tensor *da, qf_tensor *dbias, void *stream);

/* qf_quantize_act of dh = da act'(h) (grad role; da [..., F] required) and dbias [Fin] of dh,
 * from one read of h and da where it can: per-tensor FP8, M and Fin multiples of 64, both copies
 * asked for, h, da and the copies' data 16-byte aligned. There the quantizer's 64x64-tile entry
 * also writes each tile's column sums of dh (fp32, in a fixed order: its two rows per thread,
 * the warp's lanes by shuffles, then the warps in order) to scratch [M/64, Fin], which the dbias
 * module's _reduce entry adds in order and rounds once to h's dtype: q(dh) is qf_quantize_act's
 * bytes, dbias a deterministic fp32 sum of the same dh values as qf_dbias_act's (numerics 6)
 * whose bits may differ from it (another grouping of the rows). Elsewhere it runs qf_quantize_act,
 * then qf_dbias_act. Arguments, limits and errors as the two (both checked before any launch;
 * dbias may also not overlap any slot of out); scratch as qf_dbias. Asynchronous on stream.
 * Does not own any buffer. */
qf_status qf_quantize_dbias_act(qf_ctx_t *ctx, const char *recipe, qf_activation act,
                                const qf_tensor *h, const qf_tensor *da, const float *scale,
                                const qf_rng *rng, qf_quantized *out, qf_tensor *dbias,
                                void *stream);

/* q(dy) under the grad role (as qf_quantize of dy [..., N], no norm) and dbias [N] = sum_M dy
 * (numerics 6), from one read of dy where it can: per-tensor FP8, M and N multiples of 64, both
 * copies asked for, dy and the copies' data 16-byte aligned. There the quantizer's 64x64-tile
 * entry also writes each tile's fp32 column sums of dy, added in a fixed order as in
 * qf_quantize_dbias_act: q(dy) is qf_quantize's bytes, dbias a deterministic fp32 sum of the same
 * values as qf_dbias's whose bits may differ from it. Elsewhere it runs qf_quantize, then
 * qf_dbias. Arguments, limits and errors as the two (both checked before any launch; dbias, in
 * dy's dtype, may not overlap dy, scale or any slot of out); scratch as qf_dbias. Asynchronous on
 * stream. Does not own any buffer. */
qf_status qf_quantize_dbias(qf_ctx_t *ctx, const char *recipe, const qf_tensor *dy,
                            const float *scale, const qf_rng *rng, qf_quantized *out,
                            qf_tensor *dbias, void *stream);

/* The weight cache of a layer (SPEC 6): what its weights' quantized copies were made from, the
 * weights' storage, the caller's weight_version and the recipe. The ops keep it; zero means
 * nothing is cached yet. A layer's weights are quantized again when any of these changes (or
 * when the caller sets weight_changed), and only then: the copies are reused across the
 * micro-batches of a step, bit-identical to quantizing again. */
typedef struct qf_weight_key {
    const void *data[2];  /* the weights' data pointers (W; W1 and W2) */
    const void *kept[4];  /* the data pointers of their kept bf16 copies (wq_bf16; w1q_bf16 and
                           * w2q_bf16), NULL where not kept */
    uint64_t version;
    const void *recipe;   /* the recipe the copies are quantized under */
    int valid;
} qf_weight_key;

/* State and scratch of one LayerNorm/RMSNorm + Linear under any recipe (numerics 3, 6). All device
 * memory, owned by the caller, shaped as the fake-shape functions say. */
typedef struct qf_ln_linear {
    qf_norm_desc norm;          /* QF_NORM_LAYERNORM or QF_NORM_RMSNORM, gamma, beta, eps */
    qf_tensor weight;           /* [N, K] bf16/fp16/fp32 high-precision weight */
    qf_tensor bias;             /* [N] bf16, or data NULL */
    const float *x_scale;       /* [1] fp8_delayed: scales of x and the weight; else ignored */
    const float *w_scale;
    qf_quantized xq;            /* rowwise (+ columnwise for the backward) copy of norm(x), its
                                 * scales and amax, and the MU / RSIGMA slots; layout as wq */
    qf_quantized wq;            /* rowwise copy of the weight (32x32 / 16x16 tiles under
                                 * weight_2d), its scales and amax */
    qf_tensor wq_bf16[QF_COPY_COUNT]; /* optional (data NULL: not kept), MXFP8 and NVFP4 on
                                 * sm_89..99 only (elsewhere refused, as is one overlapping any
                                 * other tensor of the call): the bf16 values of wq's
                                 * rowwise and columnwise copies (qf_dequantize's out: each
                                 * copy's data dims in elements), written whenever the weight
                                 * is quantized and read by the fprop and dgrad GEMMs in place
                                 * of dequantizing wq at every call (qf_gemm_opts.b_dequantized):
                                 * the same results, 2 more bytes per weight element and copy,
                                 * for micro-batches that reuse the weight (numerics 7) */
    int weight_changed;         /* > 0: quantize the weight this call; 0: reuse wq unless the
                                 * weight cache's key differs (cached); < 0: wq is current, the
                                 * caller quantized it (qf_quantize, weight role, both copies)
                                 * and wrote wq_bf16 where set (qf_dequantize): never quantize,
                                 * the key is left as it is */
    uint64_t weight_version;    /* the caller's version of the weight: bump it after an update */
    qf_weight_key cached;       /* written by the ops (the weight cache) */
} qf_ln_linear;

/* y[..., N] = gemm(quant(norm(x)), quant(W)) + bias with x [..., K] (numerics 3, 6); y is bf16 with
 * the leading dims of x. Every stage (weight quantize when weight_changed, norm + quantize, GEMM)
 * is checked before the first one launches; a message names the stage and the argument
 * ("qf_layernorm_linear_fwd: GEMM of ll->xq and ll->wq into y (qf_gemm): qf_gemm: bias has 31
 * elements; ..."); y or dy without x's leading dims is refused first. Then, still before any
 * launch, QF_ERR_INVALID_ARG (naming both) where a tensor one of the call's stages writes (y,
 * ll->xq, ll->wq where the weight is quantized, the backward's g) or keeps (wq_bf16) shares a
 * byte with another tensor the call uses, fp8_delayed's scales included: each stage checks only
 * its own. The weight is quantized when weight_changed is set (then cleared) or the
 * weight cache's key (ll->cached: the weight's data pointer, weight_version, the recipe) differs
 * from the last quantization's, so a zeroed ll quantizes on its first call; captured in a CUDA
 * graph, a call keeps what it did at capture. With ll->wq_bf16 set, quantizing the weight is
 * followed by its dequantization into them (qf_dequantize) and the GEMM reads the rowwise one.
 * Errors as qf_quantize, qf_dequantize and qf_gemm; ll->weight [N, K'] with K' != K is
 * QF_ERR_INVALID_ARG. */
qf_status qf_layernorm_linear_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  qf_ln_linear *ll, qf_tensor *y, void *stream);

/* The gradients and scratch of qf_layernorm_linear_bwd (numerics 6), caller memory sized by the
 * fake shapes. */
typedef struct qf_ln_linear_grads {
    qf_quantized dyq;       /* both copies of q(dy) under the grad role (fake shapes of a quantize
                             * query, QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, [M, N]): rowwise for
                             * dgrad, columnwise for wgrad; layout as ll->wq */
    const float *dy_scale;  /* [1] fp8_delayed: dy's quantization scale; else ignored */
    qf_rng rng;             /* stochastic rounding of dy where the recipe uses it (NVFP4) */
    qf_tensor dxn;          /* [M, K] bf16 or fp32: dgrad's output, read by the norm backward */
    qf_norm_grads norm;     /* dx [..., K] in x's dtype, dgamma, dbeta [K] fp32 */
    qf_tensor dweight;      /* [N, K] bf16, or fp32 */
    int accumulate_wgrad;   /* 1: dweight (fp32, a main_grad) += dy^T xn */
    int defer_wgrad;        /* 1: no wgrad in qf_layernorm_linear_bwd; qf_layernorm_linear_wgrad
                             * computes it later from g->dyq and ll->xq */
    qf_tensor dbias;        /* [N] in dy's dtype, or data NULL: not computed */
} qf_ln_linear_grads;

/* Backward of qf_layernorm_linear_fwd (numerics 6) for dy [..., N] (x's leading dims; bf16, fp16
 * or fp32), in stages: dy quantized into g->dyq (grad role, both copies: E5M2 under hybrid FP8,
 * NVFP4 with RHT on the columnwise copy and stochastic rounding from g->rng), with dbias when
 * g->dbias.data is set (qf_quantize_dbias); dgrad g->dxn = q(dy) q(W) from ll->wq's columnwise
 * copy; wgrad g->dweight (=, or += with accumulate_wgrad) q(dy)^T q(xn) from ll->xq's columnwise
 * copy, unless defer_wgrad; then the norm backward into g->norm from x, g->dxn and the MU and RSIGMA
 * slots of ll->xq. So the forward must have written the columnwise copies of ll->xq and ll->wq
 * (give their slots data before qf_layernorm_linear_fwd). Every stage's arguments are checked
 * before the first one launches; a message names the stage ("qf_layernorm_linear_bwd: dgrad GEMM
 * of g->dyq (rowwise) and ll->wq (columnwise) into g->dxn (qf_gemm): qf_gemm: ..."). Errors as
 * the ops of the stages; dy not [..., N] with x's leading dims is QF_ERR_INVALID_ARG. */
qf_status qf_layernorm_linear_bwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                                  const qf_tensor *dy, qf_ln_linear *ll, qf_ln_linear_grads *g,
                                  void *stream);

/* The wgrad stage of qf_layernorm_linear_bwd alone, for a call made with defer_wgrad: from
 * g->dyq and ll->xq as that call left them, into g->dweight (accumulate_wgrad as set now). */
qf_status qf_layernorm_linear_wgrad(qf_ctx_t *ctx, const char *recipe, qf_ln_linear *ll,
                                    qf_ln_linear_grads *g, void *stream);

/* State, saved tensors and scratch of one LayerNorm/RMSNorm + MLP (numerics 6): xn = norm(x),
 * h = q(xn) q(W1)^T + b1, a = act(h), y = q(a) q(W2)^T + b2. With x [M, K], F the activation's
 * width and Fin = 2F for swiglu (else F). All device memory, owned by the caller, sized by the
 * fake shapes. */
typedef struct qf_ln_mlp {
    qf_norm_desc norm;          /* QF_NORM_LAYERNORM or QF_NORM_RMSNORM, gamma, beta, eps */
    qf_activation act;
    qf_tensor w1;               /* [Fin, K] bf16/fp16/fp32 */
    qf_tensor b1;               /* [Fin] bf16, or data NULL */
    qf_tensor w2;               /* [N, F] */
    qf_tensor b2;               /* [N] bf16, or data NULL */
    const float *x_scale, *w1_scale, *a_scale, *w2_scale; /* [1] fp8_delayed: the scales of x,
                                                             * W1, a and W2; else ignored */
    qf_quantized xq;            /* q(xn): rowwise (+ columnwise for the backward), MU, RSIGMA */
    qf_quantized w1q, w2q;      /* the weights' copies (+ columnwise for the backward) */
    qf_tensor w1q_bf16[QF_COPY_COUNT], w2q_bf16[QF_COPY_COUNT]; /* optional: the bf16 values of
                                 * w1q's and w2q's copies, as qf_ln_linear's wq_bf16 */
    qf_quantized aq;            /* q(a), input role: rowwise (+ columnwise for the backward) */
    qf_tensor h;                /* [M, Fin] bf16: fc1's output, saved for act' */
    qf_tensor a;                /* [M, F] bf16: the activation before its quantization; not
                                 * written where the forward quantizes act(h) in one kernel
                                 * (fp8_delayed with M and F multiples of 64,
                                 * qf_layernorm_mlp_writes_a): there its dtype must still be
                                 * bf16, and data may be NULL */
    int weight_changed;         /* > 0: quantize both weights this call; 0: reuse w1q, w2q
                                 * unless the weight cache's key differs (cached); < 0: both are
                                 * current, quantized (and w1q_bf16, w2q_bf16 written) by the
                                 * caller: never quantize */
    uint64_t weight_version;    /* the caller's version of the weights: bump it after an update */
    qf_weight_key cached;       /* written by the ops (the weight cache) */
} qf_ln_mlp;

/* The gradients and scratch of qf_layernorm_mlp_bwd. */
typedef struct qf_ln_mlp_grads {
    qf_quantized dyq;           /* both copies of q(dy), grad role, [M, N] */
    qf_quantized dhq;           /* both copies of q(dh), grad role, [M, Fin] */
    const float *dy_scale, *dh_scale; /* [1] fp8_delayed */
    qf_rng rng_dy, rng_dh;      /* stochastic rounding of dy and dh (NVFP4) */
    qf_tensor da;               /* [M, F] bf16 or fp32: fc2's dgrad */
    qf_tensor dh;               /* [M, Fin] bf16: act's backward; not written where the backward
                                 * quantizes dh in one kernel (qf_quantize_dbias_act:
                                 * per-tensor FP8 with M and F multiples of 64) */
    qf_tensor dxn;              /* [M, K] bf16 or fp32: fc1's dgrad */
    qf_norm_grads norm;         /* dx [..., K], dgamma, dbeta */
    qf_tensor dw1, dw2;         /* [Fin, K], [N, F]: bf16 or fp32 */
    int accumulate_wgrad;       /* 1: dw1, dw2 (fp32 main_grads) += their wgrads */
    qf_tensor db1, db2;         /* [Fin] (dh's dtype), [N] (dy's dtype), or data NULL */
} qf_ln_mlp_grads;

/* y [..., N] = the MLP of x [..., K] (numerics 6), bf16 with x's leading dims, in stages: both
 * weights' quantization (when weight_changed, which is then cleared, or when the weight cache's
 * key, mlp->cached, differs: as qf_layernorm_linear_fwd), norm + quantize of x, fc1 into mlp->h
 * (bias b1), the activation into mlp->a, its quantization (input role) into mlp->aq, fc2 into y
 * (bias b2). fp8_delayed with M and F multiples of 64 quantizes act(h) in one kernel instead
 * (qf_quantize_act; the same bytes, mlp->a not written); fp8_current writes a and its amax in
 * one kernel and then casts a (the same bytes as the unfused stages). Every stage's arguments are
 * checked before the first one launches; a message names the stage. Errors as the ops of the
 * stages, and as qf_layernorm_linear_fwd's across stages (here also h, aq, and a where a stage
 * writes it; the backward's g->dh where a stage writes it, which under gelu or relu may be
 * g->da's or mlp->h's buffer: the activation backward in place). */
qf_status qf_layernorm_mlp_fwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                               qf_ln_mlp *mlp, qf_tensor *y, void *stream);

/* Whether qf_layernorm_mlp_fwd under recipe writes mlp->a for x of M rows and an activation of
 * width F: 1 when it does, 0 when it quantizes act(h) in one kernel and leaves mlp->a unwritten
 * (fp8_delayed with M and F multiples of 64; the bytes of q(a) are the same). Errors, as the
 * negated qf_status (the message in qf_last_error): -QF_ERR_INVALID_ARG (ctx or recipe NULL, M
 * or F not positive), -QF_ERR_NOT_FOUND (unknown recipe). NOTE: 1 is not a status here (it
 * equals QF_ERR_INVALID_ARG): test for a negative result. */
int qf_layernorm_mlp_writes_a(const qf_ctx_t *ctx, const char *recipe, int64_t M, int64_t F);

/* Its backward for dy [..., N]: q(dy) with db2 (qf_quantize_dbias, where g->db2 is set); fc2's
 * dgrad into g->da and wgrad into g->dw2; the activation's backward into g->dh (from mlp->h);
 * q(dh) with db1 (likewise; per-tensor FP8 with M and F multiples of 64: q(dh) and db1 from
 * g->da and mlp->h in one kernel, qf_quantize_dbias_act, g->dh not written); fc1's dgrad into
 * g->dxn and wgrad into g->dw1; the norm backward into g->norm. The forward must have written the columnwise copies of
 * mlp->xq, w1q, w2q and aq. Errors as the ops of the stages. */
qf_status qf_layernorm_mlp_bwd(qf_ctx_t *ctx, const char *recipe, const qf_tensor *x,
                               const qf_tensor *dy, qf_ln_mlp *mlp, qf_ln_mlp_grads *g,
                               void *stream);

#ifdef __cplusplus
}
#endif
#endif /* QFUSE_H */
