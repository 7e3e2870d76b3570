/* family_shapes.c: the fake-shape tables of the families (SPEC 4), one per family, referenced by
 * its row in qf_families: the single source of the generated shape functions (out/shapes.c),
 * the manifest's formulas and the runtime's interpreter for recipes loaded at run time. */
#include "family.h"

#define QF_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define QF_FAKE_ROLE_FMT QF_FAKE_DTYPE_ROLE

extern const qf_fake_table qf_fake_fp8, qf_fake_mxfp8, qf_fake_nvfp4;

static const qf_fake_op qf_fake_fp8_delayed_ops[] = {
    {QF_OP_NORM_QUANTIZE, "MK", 1, QF_ROLE_INPUT, 1, 0, NULL},
    {QF_OP_QUANTIZE, "MK", 1, QF_FAKE_ROLE_QUERY, 0, 0, NULL},
    {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 0, NULL},
};

static const qf_fake_out qf_fake_fp8_delayed_outs[] = {
    {QF_OP_NORM_QUANTIZE, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0},
    {QF_OP_NORM_QUANTIZE, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "M"},
     QF_FAKE_COND_COLUMNWISE, 0},
    {QF_OP_NORM_QUANTIZE, "amax", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0},
    {QF_OP_NORM_QUANTIZE, "scale_inv", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0},
    {QF_OP_NORM_QUANTIZE, "mu", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_LAYERNORM, 0},
    {QF_OP_NORM_QUANTIZE, "rsigma", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_NORM, 0},
    {QF_OP_QUANTIZE, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0},
    {QF_OP_QUANTIZE, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "M"}, QF_FAKE_COND_COLUMNWISE, 0},
    {QF_OP_QUANTIZE, "amax", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0},
    {QF_OP_QUANTIZE, "scale_inv", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ALWAYS, 0},
    {QF_OP_GEMM, "y", QF_DTYPE_BF16, 2, {"M", "N"}, QF_FAKE_COND_ALWAYS, 0},
};

const qf_fake_table qf_fake_fp8 = {
    qf_fake_fp8_delayed_ops, QF_COUNTOF(qf_fake_fp8_delayed_ops), qf_fake_fp8_delayed_outs,
    QF_COUNTOF(qf_fake_fp8_delayed_outs)};

/* mxfp8 (SPEC 2.3): data [M, K] both ways (columnwise NOT transposed) and padded E8M0 scales,
 * rowwise one per 1x32 block along K, columnwise one per 32x1 block along M. Same ops as
 * fp8_delayed. */
#define QF_FAKE_MX_ROW_SCALE {"roundup(M,128)", "roundup(cdiv(K,32),4)"}
#define QF_FAKE_MX_COL_SCALE {"roundup(cdiv(M,32),4)", "roundup(K,128)"}
static const qf_fake_out qf_fake_mxfp8_outs[] = {
    {QF_OP_NORM_QUANTIZE, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0},
    {QF_OP_NORM_QUANTIZE, "rowwise_scale_inv", QF_DTYPE_E8M0, 2, QF_FAKE_MX_ROW_SCALE,
     QF_FAKE_COND_ROWWISE, 1},
    {QF_OP_NORM_QUANTIZE, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"},
     QF_FAKE_COND_COLUMNWISE, 0},
    {QF_OP_NORM_QUANTIZE, "columnwise_scale_inv", QF_DTYPE_E8M0, 2, QF_FAKE_MX_COL_SCALE,
     QF_FAKE_COND_COLUMNWISE, 1},
    {QF_OP_NORM_QUANTIZE, "mu", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_LAYERNORM, 0},
    {QF_OP_NORM_QUANTIZE, "rsigma", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_NORM, 0},
    {QF_OP_QUANTIZE, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_ROWWISE, 0},
    {QF_OP_QUANTIZE, "rowwise_scale_inv", QF_DTYPE_E8M0, 2, QF_FAKE_MX_ROW_SCALE,
     QF_FAKE_COND_ROWWISE, 1},
    {QF_OP_QUANTIZE, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "K"}, QF_FAKE_COND_COLUMNWISE, 0},
    {QF_OP_QUANTIZE, "columnwise_scale_inv", QF_DTYPE_E8M0, 2, QF_FAKE_MX_COL_SCALE,
     QF_FAKE_COND_COLUMNWISE, 1},
    {QF_OP_GEMM, "y", QF_DTYPE_BF16, 2, {"M", "N"}, QF_FAKE_COND_ALWAYS, 0},
};

const qf_fake_table qf_fake_mxfp8 = {
    qf_fake_fp8_delayed_ops, QF_COUNTOF(qf_fake_fp8_delayed_ops), qf_fake_mxfp8_outs,
    QF_COUNTOF(qf_fake_mxfp8_outs)};

/* nvfp4 (SPEC 2.4): packed E2M1 data, rowwise [M, K/2] and columnwise transposed [K, M/2] bytes
 * (dims in bytes, see qf_fake_out), E4M3 block scales padded like MXFP8's, one fp32 global
 * amax per copy. M and K must be multiples of 16; the GEMM's K a multiple of 32 (whole 16-byte
 * rows of packed data, as its kernel and cuBLASLt's FP4 operands need). */
#define QF_FAKE_NV_ROW_SCALE {"roundup(M,128)", "roundup(cdiv(K,16),4)"}
#define QF_FAKE_NV_COL_SCALE {"roundup(K,128)", "roundup(cdiv(M,16),4)"}
static const qf_fake_op qf_fake_nvfp4_ops[] = {
    {QF_OP_NORM_QUANTIZE, "MK", 1, QF_ROLE_INPUT, 1, 16, "MK"},
    {QF_OP_QUANTIZE, "MK", 1, QF_FAKE_ROLE_QUERY, 0, 16, "MK"},
    {QF_OP_GEMM, "MNK", 0, QF_ROLE_INPUT, 0, 32, "K"},
};

/* The outputs of NVFP4 quantizer op: both copies, their scales and amaxes. */
#define QF_FAKE_NV_QUANT_OUTS(op)                                                                   \
    {op, "rowwise_data", QF_FAKE_ROLE_FMT, 2, {"M", "cdiv(K,2)"}, QF_FAKE_COND_ROWWISE, 0},          \
        {op, "rowwise_scale_inv", QF_DTYPE_E4M3, 2, QF_FAKE_NV_ROW_SCALE, QF_FAKE_COND_ROWWISE, 1},  \
        {op, "columnwise_data", QF_FAKE_ROLE_FMT, 2, {"K", "cdiv(M,2)"}, QF_FAKE_COND_COLUMNWISE,    \
         0},                                                                                       \
        {op, "columnwise_scale_inv", QF_DTYPE_E4M3, 2, QF_FAKE_NV_COL_SCALE,                       \
         QF_FAKE_COND_COLUMNWISE, 1},                                                               \
        {op, "amax_rowwise", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_ROWWISE, 0},                     \
        {op, "amax_columnwise", QF_DTYPE_FP32, 1, {"1"}, QF_FAKE_COND_COLUMNWISE, 0}
static const qf_fake_out qf_fake_nvfp4_outs[] = {
    QF_FAKE_NV_QUANT_OUTS(QF_OP_NORM_QUANTIZE),
    {QF_OP_NORM_QUANTIZE, "mu", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_LAYERNORM, 0},
    {QF_OP_NORM_QUANTIZE, "rsigma", QF_DTYPE_FP32, 1, {"M"}, QF_FAKE_COND_NORM, 0},
    QF_FAKE_NV_QUANT_OUTS(QF_OP_QUANTIZE),
    {QF_OP_GEMM, "y", QF_DTYPE_BF16, 2, {"M", "N"}, QF_FAKE_COND_ALWAYS, 0},
};

const qf_fake_table qf_fake_nvfp4 = {
    qf_fake_nvfp4_ops, QF_COUNTOF(qf_fake_nvfp4_ops), qf_fake_nvfp4_outs,
    QF_COUNTOF(qf_fake_nvfp4_outs)};
