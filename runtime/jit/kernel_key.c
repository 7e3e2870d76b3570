/* kernel_key.c: fusion key and NVRTC options of one registry kernel (numerics 5). */
#include "kernel_key.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"

/* ORDER ENTRY */
static const char *const qf_entry_suffixes[] = {
    [QF_ENTRY_MAIN] = "",        [QF_ENTRY_ROWS1] = "_rows1", [QF_ENTRY_ROWS2] = "_rows2",
    [QF_ENTRY_ROWS4] = "_rows4", [QF_ENTRY_ROWS8] = "_rows8", [QF_ENTRY_AMAX] = "_amax",
    [QF_ENTRY_COLS] = "_cols",   [QF_ENTRY_ALPHA] = "_alpha", [QF_ENTRY_DEQUANT] = "_dequant",
    [QF_ENTRY_REDUCE] = "_reduce", [QF_ENTRY_GRAD] = "_grad",
};
_Static_assert(sizeof(qf_entry_suffixes) / sizeof(qf_entry_suffixes[0]) == QF_ENTRY_COUNT,
               "qf_entry_suffixes");

const char *qf_kernel_entry_suffix(qf_entry e) {
    return (unsigned)e < QF_ENTRY_COUNT ? qf_entry_suffixes[e] : NULL;
}

char *qf_kernel_text(const qf_kernel_entry *k) {
    size_t np = strlen(k->prelude), nt = strlen(k->tpl->text);
    char *s = malloc(np + nt + 1);
    if (!s)
        return NULL;
    memcpy(s, k->prelude, np);
    memcpy(s + np, k->tpl->text, nt + 1);
    return s;
}

/* 1 when k is a quantizer of a family that writes block scales (its row's scale_layout): its
 * instances also choose the scale layout. NOTES: only these kernels see the layout, so no other
 * kernel's key changed when it was added. */
static int qf_kernel_has_layout(const qf_kernel_entry *k) {
    const qf_family_traits *t = qf_family_get(k->family);
    return t && t->scale_layout && (k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE);
}

int qf_kernel_instance_equal(const qf_kernel_instance *a, const qf_kernel_instance *b) {
    return a->outputs == b->outputs && a->gamma_dtype == b->gamma_dtype &&
           a->layout == b->layout && a->prologue == b->prologue && a->staged == b->staged;
}

qf_kernel_instance qf_kernel_instance_default(const qf_kernel_entry *k) {
    qf_kernel_instance inst = {.outputs = QF_OUT_ROWWISE,
                               .gamma_dtype = k->in_dtype,
                               .layout = QF_SCALE_LAYOUT_COMPACT};
    return inst;
}

int qf_kernel_instances(const qf_kernel_entry *k, qf_kernel_instance out[QF_KERNEL_MAX_INSTANCES]) {
    static const unsigned outputs[] = {QF_OUT_ROWWISE, QF_OUT_COLUMNWISE,
                                       QF_OUT_ROWWISE | QF_OUT_COLUMNWISE};
    out[0] = qf_kernel_instance_default(k);
    if (k->op == QF_OP_NORM_BACKWARD && k->in_dtype != QF_DTYPE_FP32) { /* gamma x's or fp32 */
        out[1] = out[0];
        out[1].gamma_dtype = QF_DTYPE_FP32;
        return 2;
    }
    if (k->op == QF_OP_GEMM) {
        out[1] = out[0], out[1].staged = 1;
        return 2;
    }
    if (k->op == QF_OP_DBIAS) {
        for (int a = 0; a < QF_ACT_COUNT; a++)
            out[1 + a] = out[0], out[1 + a].prologue = QF_PROLOGUE_DACT(a);
        return 1 + QF_ACT_COUNT;
    }
    if (k->op != QF_OP_NORM_QUANTIZE && k->op != QF_OP_QUANTIZE)
        return 1;
    /* NOTES: fp32 gamma is a distinct instance only when x is not fp32 already. */
    int n_gamma = k->op == QF_OP_NORM_QUANTIZE && k->in_dtype != QF_DTYPE_FP32 ? 2 : 1, n = 0;
    int n_layout = qf_kernel_has_layout(k) ? 2 : 1;
    for (int g = 0; g < n_gamma; g++)
        for (int l = 0; l < n_layout; l++)
            for (int o = 0; o < 3; o++)
                out[n++] = (qf_kernel_instance){
                    .outputs = outputs[o],
                    .gamma_dtype = g ? QF_DTYPE_FP32 : k->in_dtype,
                    .layout = l ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT};
    const int fwd = k->role == QF_ROLE_INPUT, grad = k->role == QF_ROLE_GRAD;
    if (k->op == QF_OP_QUANTIZE && (fwd || grad))
        for (int l = 0; l < n_layout; l++)
            for (int a = 0; a < QF_ACT_COUNT; a++)
                out[n++] = (qf_kernel_instance){
                    .outputs = QF_OUT_ROWWISE | QF_OUT_COLUMNWISE, .gamma_dtype = k->in_dtype,
                    .layout = l ? QF_SCALE_LAYOUT_SWIZZLED : QF_SCALE_LAYOUT_COMPACT,
                    .prologue = fwd ? QF_PROLOGUE_ACT(a) : QF_PROLOGUE_DACT(a)};
    return n;
}

unsigned qf_kernel_instance_entries(const qf_kernel_entry *k, const qf_kernel_instance *inst) {
    const unsigned main = QF_ENTRY_BIT(QF_ENTRY_MAIN);
    if (k->op != QF_OP_GEMM)
        return k->entries;
    return inst->staged ? k->entries & ~main : k->entries & main;
}

void qf_kernel_variant_string(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                              char *buf, size_t n) {
    int w = snprintf(buf, n,
                     "op=%s;role=%s;norm=%s;zcg=%d;in=%s;out=%s;outputs=%u;gamma=%s;block=%u;"
                     "tile_m=%u",
                     qf_enum_name(QF_ENUM_OP, k->op), qf_enum_name(QF_ENUM_ROLE, k->role),
                     qf_enum_name(QF_ENUM_NORM, k->norm),
                     k->zero_centered_gamma, qf_dtype_name(k->in_dtype),
                     qf_dtype_name(k->out_dtype), inst->outputs, qf_dtype_name(inst->gamma_dtype),
                     k->block_threads, k->tile_m);
    const char *layout = qf_enum_name(QF_ENUM_SCALE_LAYOUT, (int)inst->layout);
    if (qf_kernel_has_layout(k) && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, ";layout=%s", layout ? layout : "?");
    if (inst->prologue != QF_PROLOGUE_NONE && w >= 0 && (size_t)w < n)
        w += snprintf(buf + w, n - (size_t)w, ";prologue=%d", inst->prologue);
    if (inst->staged && w >= 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, ";staged=1");
}

int qf_kernel_extra_options(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                            char store[QF_KERNEL_MAX_EXTRA][48],
                            const char *opts[QF_KERNEL_MAX_EXTRA]) {
    int n = 0;
    const int quant = k->op == QF_OP_NORM_QUANTIZE || k->op == QF_OP_QUANTIZE;
    if (quant) {
        snprintf(store[n], 48, "-DQF_OUTPUTS=%u", inst->outputs);
        opts[n] = store[n];
        n++;
    }
    if (quant || k->op == QF_OP_NORM_BACKWARD) {
        snprintf(store[n], 48, "-DQF_GAMMA_DTYPE=%d", (int)inst->gamma_dtype);
        opts[n] = store[n];
        n++;
    }
    if (qf_kernel_has_layout(k)) {
        snprintf(store[n], 48, "-DQF_SCALE_SWIZZLED=%d",
                 inst->layout == QF_SCALE_LAYOUT_SWIZZLED);
        opts[n] = store[n];
        n++;
    }
    if (inst->prologue != QF_PROLOGUE_NONE) {
        snprintf(store[n], 48, "-DQF_PROLOGUE=%d", inst->prologue);
        opts[n] = store[n];
        n++;
    }
    if (inst->staged) {
        snprintf(store[n], 48, "-DQF_GEMM_STAGED=1");
        opts[n] = store[n];
        n++;
    }
    return n;
}

void qf_kernel_key(const qf_recipe *r, const qf_kernel_entry *k,
                   const qf_kernel_instance *inst, const char *const *hdr_names,
                   const char *const *hdrs, int n_hdr, int arch, char hex[QF_KEY_HEX_LEN + 1]) {
    char store[QF_KERNEL_MAX_EXTRA][48], archbuf[64], variant[256];
    const char *extra[QF_KERNEL_MAX_EXTRA], *opts[QF_JIT_MAX_OPTIONS];
    int n_extra = qf_kernel_extra_options(k, inst, store, extra);
    int n_opts = qf_jit_options(arch, extra, n_extra, opts, archbuf);
    QF_ASSERT(n_opts >= 0); /* at most QF_KERNEL_MAX_EXTRA extras: always fits */
    qf_kernel_variant_string(k, inst, variant, sizeof variant);
    qf_key_input in = {
        .name = k->name, .recipe_options = r->options, .variant = variant,
        .source_prelude = k->prelude, .source = k->tpl->text,
        .header_names = hdr_names, .headers = hdrs, .n_headers = n_hdr,
        .options = opts, .n_options = n_opts, .arch = arch,
    };
    qf_jit_nvrtc_version(&in.nvrtc_major, &in.nvrtc_minor);
    qf_key_compute(&in, hex);
}
