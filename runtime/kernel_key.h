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
} qf_kernel_instance;

/* The default instance of k: rowwise only, gamma in x's dtype. */
QF_INTERNAL qf_kernel_instance qf_kernel_instance_default(const qf_kernel_entry *k);

/* Canonical "op=...;role=...;norm=...;zcg=...;in=...;out=...;outputs=...;gamma=..." string. */
QF_INTERNAL void qf_kernel_variant_string(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                          char *buf, size_t n);

/* The -D options that select inst (QF_OUTPUTS, QF_GAMMA_DTYPE). Returns the count; strings are
 * written to store and pointed to by opts. */
QF_INTERNAL int qf_kernel_extra_options(const qf_kernel_entry *k, const qf_kernel_instance *inst,
                                        char store[QF_KERNEL_MAX_EXTRA][48],
                                        const char *opts[QF_KERNEL_MAX_EXTRA]);

/* Fusion key (SPEC 5) of kernel k of recipe r as instance inst for arch, with the given NVRTC
 * headers. */
QF_INTERNAL void qf_kernel_key(const qf_recipe_entry *r, const qf_kernel_entry *k,
                               const qf_kernel_instance *inst, const char *const *hdr_names,
                               const char *const *hdrs, int n_hdr, int arch,
                               char hex[QF_KEY_HEX_LEN + 1]);

#endif /* QF_KERNEL_KEY_H */
