/* family.c: the families table, one row per recipe family (family.h). */
#include "family.h"

#include <float.h>
#include <stdio.h>

#include "names.h"
#include "ref_nvfp4.h"

#define QF_COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define QF_OFF(m) offsetof(qf_recipe, m)
#define QF_BIT(op) (1u << (op))
#define QF_QUANT_OPS (QF_BIT(QF_OP_NORM_QUANTIZE) | QF_BIT(QF_OP_QUANTIZE))
#define QF_TC_QUANT (QF_TC_NORM | QF_TC_ZCG | QF_TC_IN_DTYPE | QF_TC_OUT_DTYPE | QF_TC_TILE_M)

/* Fake-shape tables of family_shapes.c. */
extern const qf_fake_table qf_fake_fp8, qf_fake_mxfp8, qf_fake_nvfp4, qf_fake_fp8_block;

/* ========================================================================= template values */

/* __MARGIN__ is a float literal ("0.0f"). */
static void qf_value_margin(const qf_recipe *r, const qf_kernel_desc *d, char *buf, size_t n) {
    (void)d;
    snprintf(buf, n, "%lld.0f", (long long)r->margin);
}

/* __RHT_MASK__ of an NVFP4 quantizer (numerics 2.4): TE's 0xD7E8 or the seed's mask where the
 * kernel's role takes the RHT, 0x0000 elsewhere (so a seed changes only the sources using it). */
static void qf_value_rht_mask(const qf_recipe *r, const qf_kernel_desc *d, char *buf, size_t n) {
    unsigned mask = 0;
    if ((unsigned)d->role < QF_ROLE_COUNT && r->rht[d->role])
        mask = r->rht_seed >= 0 ? qf_nvfp4_rht_mask_from_seed_ref((uint64_t)r->rht_seed)
                                : QF_NVFP4_RHT_MASK_DEFAULT;
    snprintf(buf, n, "0x%04X", mask);
}

/* ========================================================================= fp8_delayed */

static const qf_field qf_fields_fp8_delayed[] = {
    {.name = "amax_compute", .type = QF_FIELD_OPTION, .offset = QF_OFF(amax_compute),
     .member = "amax_compute", .names = QF_ENUM_AMAX_COMPUTE, .def = QF_AMAX_COMPUTE_MAX,
     .key = 1, .tpl = "__AMAX_COMPUTE__", .tpl_ops = QF_BIT(QF_OP_SCALE_UPDATE)},
    {.name = "amax_history_len", .type = QF_FIELD_INTEGER, .offset = QF_OFF(amax_history_len),
     .member = "amax_history_len", .lo = 1, .hi = 8192, .def = 1024, .key = 1},
    {.name = "format", .type = QF_FIELD_OPTION, .offset = QF_OFF(format), .member = "format",
     .names = QF_ENUM_FP8_FORMAT, .def = QF_FP8_FORMAT_HYBRID, .key = 1, .sets_formats = 1},
    {.name = "margin", .type = QF_FIELD_INTEGER, .offset = QF_OFF(margin), .member = "margin",
     .lo = 0, .hi = 32, .def = 0, .key = 1, .tpl = "__MARGIN__",
     .tpl_ops = QF_BIT(QF_OP_SCALE_UPDATE), .tpl_value = qf_value_margin},
};

/* ========================================================================= fp8_current */

/* The scale options of FP8 current scaling and FP8 block scaling (numerics 2.2, 2.5), one pair of
 * qf_recipe members; the families differ only in power_2_scales's default (TE's: off for
 * Float8CurrentScaling, on for Float8BlockScaling). */
#define QF_FIELD_AMAX_EPSILON                                                                      \
    {.name = "amax_epsilon", .type = QF_FIELD_NUMBER, .offset = QF_OFF(amax_epsilon),              \
     .member = "amax_epsilon", .min = 0.0, .max = FLT_MAX, .def = 0.0, .key = 1}
#define QF_FIELD_POWER_2_SCALES(d)                                                                 \
    {.name = "power_2_scales", .type = QF_FIELD_BOOLEAN, .offset = QF_OFF(power_2_scales),         \
     .member = "power_2_scales", .def = (d), .key = 1}

/* TE's Float8CurrentScaling defaults (numerics 2.2). amax_epsilon and power_2_scales reach the
 * kernels through their parameter block (qf_q_params), not as template constants: the template
 * is fp8_delayed's too, told apart by __FAMILY__. */
static const qf_field qf_fields_fp8_current[] = {
    QF_FIELD_AMAX_EPSILON,
    {.name = "format", .type = QF_FIELD_OPTION, .offset = QF_OFF(format), .member = "format",
     .names = QF_ENUM_FP8_FORMAT, .def = QF_FP8_FORMAT_HYBRID, .key = 1, .sets_formats = 1},
    QF_FIELD_POWER_2_SCALES(0),
};

/* ========================================================================= fp8_block */

/* TE's Float8BlockScaling defaults (numerics 2.5): E4M3 for every role (no `format` option),
 * amax_epsilon 0, power-of-two scales. Both enter the fusion key like every key field; the block
 * geometry (1x128 inputs and grads, 128x128 weights) is the family's, in its shape table. */
static const qf_field qf_fields_fp8_block[] = {
    QF_FIELD_AMAX_EPSILON,
    QF_FIELD_POWER_2_SCALES(1),
};

/* ========================================================================= mxfp8 */

#define QF_ALLOW(dt) (1u << (dt))

static const qf_field qf_fields_mxfp8[] = {
    {.name = "grad_format", .type = QF_FIELD_OPTION, .offset = QF_OFF(fmt[QF_ROLE_GRAD]),
     .member = "fmt[QF_ROLE_GRAD]", .names = QF_ENUM_DTYPE,
     .allowed = QF_ALLOW(QF_DTYPE_E4M3) | QF_ALLOW(QF_DTYPE_E5M2), .def = QF_DTYPE_E4M3,
     .key = 1},
    {.name = "input_format", .type = QF_FIELD_OPTION, .offset = QF_OFF(fmt[QF_ROLE_INPUT]),
     .member = "fmt[QF_ROLE_INPUT]", .names = QF_ENUM_DTYPE, .allowed = QF_ALLOW(QF_DTYPE_E4M3),
     .def = QF_DTYPE_E4M3, .key = 1, .tpl = "__A_DTYPE__", .tpl_ops = QF_BIT(QF_OP_GEMM)},
    {.name = "scale_rounding", .type = QF_FIELD_OPTION, .offset = QF_OFF(scale_rounding),
     .member = "scale_rounding", .names = QF_ENUM_SCALE_ROUNDING, .def = QF_SCALE_ROUNDING_CEIL,
     .key = 1, .tpl = "__SCALE_ROUNDING__", .tpl_ops = QF_QUANT_OPS},
    {.name = "weight_2d", .type = QF_FIELD_BOOLEAN, .offset = QF_OFF(block_2d[QF_ROLE_WEIGHT]),
     .member = "block_2d[QF_ROLE_WEIGHT]", .def = 0, .key = 1, .tpl = "__BLOCK_2D__",
     .tpl_ops = QF_QUANT_OPS, .tpl_array = QF_OFF(block_2d)},
    {.name = "weight_format", .type = QF_FIELD_OPTION, .offset = QF_OFF(fmt[QF_ROLE_WEIGHT]),
     .member = "fmt[QF_ROLE_WEIGHT]", .names = QF_ENUM_DTYPE, .allowed = QF_ALLOW(QF_DTYPE_E4M3),
     .def = QF_DTYPE_E4M3, .key = 1, .tpl = "__B_DTYPE__", .tpl_ops = QF_BIT(QF_OP_GEMM)},
};

/* ========================================================================= nvfp4 */

static const qf_field qf_fields_nvfp4[] = {
    {.name = "rht_grad", .type = QF_FIELD_BOOLEAN, .offset = QF_OFF(rht[QF_ROLE_GRAD]),
     .member = "rht[QF_ROLE_GRAD]", .def = 1, .key = 1, .tpl = "__RHT__",
     .tpl_ops = QF_QUANT_OPS, .tpl_array = QF_OFF(rht)},
    {.name = "rht_input", .type = QF_FIELD_BOOLEAN, .offset = QF_OFF(rht[QF_ROLE_INPUT]),
     .member = "rht[QF_ROLE_INPUT]", .def = 1, .key = 1, .tpl = "__RHT__",
     .tpl_ops = QF_QUANT_OPS, .tpl_array = QF_OFF(rht)},
    {.name = "rht_seed", .type = QF_FIELD_INTEGER, .offset = QF_OFF(rht_seed),
     .member = "rht_seed", .lo = 0, .hi = INT64_MAX, .def = -1, .absent = "none", .key = 1,
     .tpl = "__RHT_MASK__", .tpl_ops = QF_QUANT_OPS, .tpl_value = qf_value_rht_mask},
    {.name = "stochastic_rounding_grad", .type = QF_FIELD_BOOLEAN,
     .offset = QF_OFF(sr[QF_ROLE_GRAD]), .member = "sr[QF_ROLE_GRAD]", .def = 1, .key = 1,
     .tpl = "__STOCHASTIC_ROUNDING__", .tpl_ops = QF_QUANT_OPS, .tpl_array = QF_OFF(sr)},
    {.name = "weight_2d", .type = QF_FIELD_BOOLEAN, .offset = QF_OFF(block_2d[QF_ROLE_WEIGHT]),
     .member = "block_2d[QF_ROLE_WEIGHT]", .def = 1, .key = 1, .tpl = "__BLOCK_2D__",
     .tpl_ops = QF_QUANT_OPS, .tpl_array = QF_OFF(block_2d)},
};

/* NOTES: a seed no kernel uses would still change every key; refuse it as a likely mistake. */
static const char *qf_check_nvfp4(const qf_recipe *r, char *msg, size_t n) {
    if (r->rht_seed < 0 || r->rht[QF_ROLE_INPUT] || r->rht[QF_ROLE_GRAD])
        return NULL;
    snprintf(msg, n, "field 'rht_seed' (no effect: rht_input and rht_grad are both false)");
    return msg;
}

/* ========================================================================= the table */

#define QF_FIELDS(a) .fields = (a), .n_fields = QF_COUNTOF(a)
#define QF_E4M3_ALL {QF_DTYPE_E4M3, QF_DTYPE_E4M3, QF_DTYPE_E4M3}
/* The backward ops of every family: one template each, no recipe constant (numerics 6). */
#define QF_NORM_BWD_OP                                                                             \
    [QF_OP_NORM_BACKWARD] = {"smxx_norm_backward.cu", 256, 1,                                      \
                             QF_TC_NORM | QF_TC_ZCG | QF_TC_IN_DTYPE},                             \
    [QF_OP_DBIAS] = {"smxx_dbias.cu", 256, 1, QF_TC_IN_DTYPE},                                    \
    [QF_OP_ACTIVATION] = {"smxx_activation.cu", 256, 1, QF_TC_IN_DTYPE}
/* Both per-tensor FP8 families quantize with one template (its __FAMILY__ step picks the scale). */
#define QF_FP8_QUANTIZERS                                                                          \
    [QF_OP_NORM_QUANTIZE] = {"smxx_fp8_norm_quantize.cu", 256, 32, QF_TC_QUANT | QF_TC_FAMILY},    \
    [QF_OP_QUANTIZE] = {"smxx_fp8_norm_quantize.cu", 256, 32, QF_TC_QUANT | QF_TC_FAMILY},         \
    QF_NORM_BWD_OP

const qf_family_traits qf_families[QF_FAMILY_COUNT] = {
    [QF_FAMILY_FP8_DELAYED] =
        {.name = "fp8_delayed",
         .spec = "numerics 2.1",
         .implemented = 1,
         QF_FIELDS(qf_fields_fp8_delayed),
         .fmt = {QF_DTYPE_E4M3, QF_DTYPE_E4M3, QF_DTYPE_E5M2},
         .ops = {QF_FP8_QUANTIZERS, [QF_OP_SCALE_UPDATE] = {"smxx_fp8_scale_update.cu", 256, 1, 0}},
         .act_tile = QF_COLS_TILE,
         .shapes = &qf_fake_fp8,
         .gemm = {{89, 199, QF_GEMM_CUBLASLT, "per-tensor FP8", QF_SCALE_LAYOUT_COMPACT, 0,
                   QF_GEMM_KINDS_ALL, 0}}},
    [QF_FAMILY_FP8_CURRENT] = {.name = "fp8_current",
                               .spec = "numerics 2.2",
                               .implemented = 1,
                               QF_FIELDS(qf_fields_fp8_current),
                               .fmt = {QF_DTYPE_E4M3, QF_DTYPE_E4M3, QF_DTYPE_E5M2},
                               .ops = {QF_FP8_QUANTIZERS},
                               .act_tile = QF_COLS_TILE,
                               .act_amax = 1,
                               .shapes = &qf_fake_fp8,
                               .gemm = {{89, 199, QF_GEMM_CUBLASLT, "per-tensor FP8",
                                         QF_SCALE_LAYOUT_COMPACT, 0, QF_GEMM_KINDS_ALL, 0}}},
    [QF_FAMILY_MXFP8] =
        {.name = "mxfp8",
         .spec = "numerics 2.3",
         .implemented = 1,
         QF_FIELDS(qf_fields_mxfp8),
         .fmt = QF_E4M3_ALL,
         .ops = {[QF_OP_NORM_QUANTIZE] = {"smxx_mxfp8_norm_quantize.cu", 256, 32, QF_TC_QUANT},
                 [QF_OP_QUANTIZE] = {"smxx_mxfp8_norm_quantize.cu", 256, 32, QF_TC_QUANT},
                 [QF_OP_GEMM] = {"sm90_mxfp8_gemm.cu", 256, QF_MX_GEMM_TILE_M, QF_TC_TILE_M},
                 QF_NORM_BWD_OP},
         .scale_layout = 1,
         .shapes = &qf_fake_mxfp8,
         /* The columnwise copies are not transposed (32x1 blocks down M): the GEMM kernel and
          * the cuBLASLt call read K-major operands (fprop only); the staged path reads both
          * orders, so sm_89..99 runs every GEMM. */
         .gemm = {{89, 99, QF_GEMM_KERNEL, NULL, QF_SCALE_LAYOUT_COMPACT, 0, QF_GEMM_KINDS_ALL,
                   QF_GEMM_KIND_BIT(QF_GEMM_FPROP)},
                  {100, 199, QF_GEMM_CUBLASLT, "VEC32_UE8M0", QF_SCALE_LAYOUT_SWIZZLED, 16,
                   QF_GEMM_KIND_BIT(QF_GEMM_FPROP), 0}}},
    [QF_FAMILY_NVFP4] = {.name = "nvfp4",
                         .spec = "numerics 2.4",
                         .implemented = 1,
                         QF_FIELDS(qf_fields_nvfp4),
                         .fmt = {QF_DTYPE_E2M1, QF_DTYPE_E2M1, QF_DTYPE_E2M1},
                         .ops = {[QF_OP_NORM_QUANTIZE] = {"smxx_nvfp4_norm_quantize.cu", 256, 32,
                                                          QF_TC_QUANT & ~QF_TC_OUT_DTYPE},
                                 [QF_OP_QUANTIZE] = {"smxx_nvfp4_norm_quantize.cu", 256, 32,
                                                     QF_TC_QUANT & ~QF_TC_OUT_DTYPE},
                                 [QF_OP_GEMM] = {"sm90_nvfp4_gemm.cu", 256, QF_NV_GEMM_TILE_M,
                                                 QF_TC_TILE_M},
                                 QF_NORM_BWD_OP},
                         .scale_layout = 1,
                         .shapes = &qf_fake_nvfp4,
                         /* the columnwise copies are transposed: every GEMM is TN */
                         .gemm = {{89, 99, QF_GEMM_KERNEL, NULL, QF_SCALE_LAYOUT_COMPACT, 0,
                                   QF_GEMM_KINDS_ALL, QF_GEMM_KINDS_ALL},
                                  {100, 199, QF_GEMM_CUBLASLT, "VEC16_UE4M3",
                                   QF_SCALE_LAYOUT_SWIZZLED, 16, QF_GEMM_KINDS_ALL, 0}},
                         .check = qf_check_nvfp4},
    /* One quantizer template for every role (__ROLE__ picks 1x128 blocks or 128x128 weight
     * tiles); the GEMMs are cuBLASLt's with VEC128_32F / BLK128x128_32F block scales (sm_90 and
     * later; op_gemm.c). */
    [QF_FAMILY_FP8_BLOCK] = {.name = "fp8_block",
                             .spec = "numerics 2.5",
                             .implemented = 1,
                             QF_FIELDS(qf_fields_fp8_block),
                             .fmt = QF_E4M3_ALL,
                             .ops = {[QF_OP_NORM_QUANTIZE] = {"smxx_fp8_block_norm_quantize.cu",
                                                              256, QF_FP8_BLOCK,
                                                              QF_TC_QUANT | QF_TC_ROLE},
                                     [QF_OP_QUANTIZE] = {"smxx_fp8_block_norm_quantize.cu", 256,
                                                         QF_FP8_BLOCK, QF_TC_QUANT | QF_TC_ROLE},
                                     QF_NORM_BWD_OP},
                             .shapes = &qf_fake_fp8_block,
                             .gemm = {{90, 199, QF_GEMM_CUBLASLT, "VEC128_32F/BLK128x128_32F",
                                       QF_SCALE_LAYOUT_COMPACT, 16, QF_GEMM_KINDS_ALL, 0}}},
};
_Static_assert(QF_FAMILY_COUNT == 5, "a new family needs its row in qf_families");

const qf_gemm_kind_traits qf_gemm_kinds[QF_GEMM_KIND_COUNT] = {
    [QF_GEMM_FPROP] = {"fprop", QF_COPY_ROWWISE, QF_COPY_ROWWISE, QF_ROLE_INPUT, QF_ROLE_WEIGHT},
    [QF_GEMM_DGRAD] = {"dgrad", QF_COPY_ROWWISE, QF_COPY_COLUMNWISE, QF_ROLE_GRAD, QF_ROLE_WEIGHT},
    [QF_GEMM_WGRAD] = {"wgrad", QF_COPY_COLUMNWISE, QF_COPY_COLUMNWISE, QF_ROLE_GRAD,
                       QF_ROLE_INPUT},
};

const qf_family_traits *qf_family_get(qf_family f) {
    return (unsigned)f < QF_FAMILY_COUNT ? &qf_families[f] : NULL;
}

qf_gemm_path qf_family_gemm_path(qf_family f, int arch) {
    const qf_family_traits *t = qf_family_get(f);
    for (int i = 0; t && i < QF_GEMM_PATHS_MAX; i++)
        if (t->gemm[i].engine != QF_GEMM_NONE && arch >= t->gemm[i].arch_lo &&
            arch <= t->gemm[i].arch_hi)
            return t->gemm[i];
    return (qf_gemm_path){.engine = QF_GEMM_NONE};
}

const void *qf_field_ptr(const qf_recipe *r, const qf_field *fd) {
    return (const char *)r + fd->offset;
}
