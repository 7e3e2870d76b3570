/* gen_render.h: a variant's prelude (the `__NAME__` placeholders of its CUDA template as
 * #defines, STYLE 12), the entry points a template defines, and the placeholder-free check of
 * shared headers. */
#ifndef QF_GEN_RENDER_H
#define QF_GEN_RENDER_H

#include "gen_buf.h"
#include "gen_variant.h"

/* Checks template text tpl (named tpl_name in errors, "templates/x.cu") against vals and appends
 * the prelude lines that fill its placeholders to out: `#define NAME value` per value, in vals'
 * order (the template text itself is handed to NVRTC unchanged, after the prelude). A
 * placeholder is a whole identifier token that is one of vals' names, or any all-upper-case
 * `__NAME__` token that is not a compiler or CUDA macro (__CUDA_ARCH__, __CUDACC_RTC__, __NV*,
 * __FILE__, ...): the template declares what it needs by using it. Fails, naming it, when a
 * placeholder has no value or a value is never used. Returns 0 or -1. */
int qf_gen_render(const char *tpl_name, const char *tpl, const qf_gen_values *vals, qf_gen_buf *out,
                  qf_gen_err *e);

/* 1 when tok (NUL-terminated) looks like a placeholder: `__[A-Z][A-Z0-9_]*__` and not a known
 * compiler/CUDA macro. */
int qf_gen_is_placeholder(const char *tok);

/* Fails (naming the header, line and token) when shared header text holds a placeholder: a
 * header is the same text for every variant, so it takes template parameters instead. */
int qf_gen_header_check(const char *name, const char *text, qf_gen_err *e);

/* The entry points template tpl defines, as QF_ENTRY_BIT flags: the main entry (the placeholder
 * `__KERNEL_NAME__(`, which every template has; else an error), the four _rowsN entries of
 * QF_ROWS_ENTRIES and the QF_AMAX_ENTRY, QF_COLS_ENTRY, QF_ALPHA_ENTRY and QF_DEQUANT_ENTRY entries,
 * each macro invoked at the start of a line. */
int qf_gen_template_entries(const char *tpl_name, const char *tpl, unsigned *entries,
                            qf_gen_err *e);

/* The prelude of variant v of recipe r (malloc'ed; the caller frees it): the banner, one #define
 * per placeholder of its template text tpl (checked by qf_gen_render; tpath names the template in
 * errors), then #line back to the template. NOTES: the banner and #line name the canonical
 * templates/ path, never the directory it was read from, so the text (and the fusion key, which
 * hashes it) does not depend on where the tree sits. qfuse-gen and the runtime's recipe-file
 * loader both call it, so a recipe gives the same kernels either way. NULL with e set on error. */
char *qf_gen_variant_prelude(const qf_recipe *r, const qf_gen_variant *v, const char *tpath,
                             const char *tpl, qf_gen_err *e);

#endif /* QF_GEN_RENDER_H */
