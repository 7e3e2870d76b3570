/* kernel_key.h: fusion key and NVRTC options of one registry kernel (shared by qfuse-gen and the
 * runtime, so `qfuse-gen --list` prints the key the runtime will use). */
#ifndef QF_KERNEL_KEY_H
#define QF_KERNEL_KEY_H

#include "jit_compile.h"
#include "jit_key.h"
#include "registry.h"

#define QF_KERNEL_MAX_EXTRA 4

/* Compile-time choices of one kernel instance beyond its generated source. */
typedef struct qf_kernel_instance {
    unsigned outputs;       /* QF_OUT_ROWWISE | QF_OUT_COLUMNWISE (quantizing ops) */
    qf_dtype gamma_dtype;   /* norm ops: gamma/beta dtype (x's dtype or fp32) */
    qf_scale_layout layout; /* MXFP8/NVFP4 quantizers: scale layout written (-DQF_SCALE_SWIZZLED);
                             * ignored, and not part of the key, for every other kernel */
    int prologue;           /* plain quantizers and dbias: QF_PROLOGUE_* (-DQF_PROLOGUE; in the
                             * key only when not QF_PROLOGUE_NONE) */
    int staged;             /* GEMM modules: 1 = the staged path's entries (<name>_dequant,
                             * NVFP4's <name>_alpha; -DQF_GEMM_STAGED=1), 0 = the GEMM kernel
                             * alone, whose compile is most of the module's
                             * (qf_kernel_instance_entries); in the key only when 1 */
} qf_kernel_instance;

/* Nonzero when a and b select the same binary (every field compared). */
QF_INTERNAL int qf_kernel_instance_equal(const qf_kernel_instance *a, const qf_kernel_instance *b);

/* The default instance of k: rowwise only, gamma in x's dtype, compact scales. */
QF_INTERNAL qf_kernel_instance qf_kernel_instance_default(const qf_kernel_entry *k);

/* Most instances one kernel has (qf_kernel_instances). */
#define QF_KERNEL_MAX_INSTANCES 12

/* Every instance of k an op can request, default first: quantizers take outputs rowwise, columnwise
 * or both, norm + quantize also gamma in x's dtype or fp32 (qf_norm_quantize), and MXFP8 and NVFP4
 * quantizers also compact or swizzled scales; plain quantizers of the input role also each
 * QF_PROLOGUE_ACT and those of the grad role each QF_PROLOGUE_DACT (both copies; qf_quantize_act),
 * dbias each QF_PROLOGUE_DACT (qf_dbias_act), GEMM modules also the staged one (qf_gemm's staged
 * path, qf_dequantize, NVFP4's alpha); other ops have the default only. Writes them to
 * out[0..] and returns the count. Used to fill a cache ahead of time (qfuse-cache warm) and to
 * recognise current entries. */
QF_INTERNAL int qf_kernel_instances(const qf_kernel_entry *k,
                                    qf_kernel_instance out[QF_KERNEL_MAX_INSTANCES]);

/* The entry points (QF_ENTRY_BIT of each) the CUBIN of k as inst holds: k->entries, except for a
 * GEMM module, whose instances split them: the default one holds its GEMM kernel (the main entry)
 * only, the staged one every other entry (<name>_dequant, NVFP4's <name>_alpha). */
QF_INTERNAL unsigned qf_kernel_instance_entries(const qf_kernel_entry *k,
                                                const qf_kernel_instance *inst);

/* Canonical "op=...;role=...;norm=...;zcg=...;in=...;out=...;outputs=...;gamma=..." string,
 * with ";layout=compact|swizzled" at the end for MXFP8 and NVFP4 quantizers, ";prologue=N"
 * after it for an activation prologue and ";staged=1" for a GEMM module's staged instance. */
QF_INTERNAL void qf_kernel_variant_string(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                          char *buf, size_t n);

/* The -D options that select inst (QF_OUTPUTS, QF_GAMMA_DTYPE, QF_SCALE_SWIZZLED for MXFP8
 * and NVFP4 quantizers, QF_PROLOGUE for an activation prologue, QF_GEMM_STAGED). Returns the count; strings are
 * written to store and pointed to by opts. */
QF_INTERNAL int qf_kernel_extra_options(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                        char store[QF_KERNEL_MAX_EXTRA][48],
                                        const char *opts[QF_KERNEL_MAX_EXTRA]);

/* "" for QF_ENTRY_MAIN, "_rows1", ..., "_cols", "_alpha": the entry point's symbol is
 * k->name followed by it. NULL for a value out of range. */
QF_INTERNAL const char *qf_kernel_entry_suffix(qf_entry e);

/* The text handed to NVRTC for k: k->prelude followed by k->tpl->text, malloc'ed and
 * NUL-terminated (the caller frees it); NULL when out of memory. */
QF_INTERNAL char *qf_kernel_text(const qf_kernel_entry *k);

/* Fusion key (numerics 5) of kernel k of recipe r as instance inst for arch, with the given NVRTC
 * headers. The source hashed is qf_kernel_text(k), prelude and template as one text. */
QF_INTERNAL void qf_kernel_key(const qf_recipe *r, const qf_kernel_entry *k,
                               const qf_kernel_instance *inst, const char *const *hdr_names,
                               const char *const *hdrs, int n_hdr, int arch,
                               char hex[QF_KEY_HEX_LEN + 1]);

#endif /* QF_KERNEL_KEY_H */
