/* gen_render.h: filling the `__NAME__` placeholders of a CUDA template (STYLE 12). */
#ifndef QF_GEN_RENDER_H
#define QF_GEN_RENDER_H

#include "gen_buf.h"
#include "gen_variant.h"

/* Renders template text tpl (named tpl_name in errors, "templates/x.cu") with vals, appending the
 * result to out. A placeholder is a whole identifier token that is one of vals' names, or any
 * all-upper-case `__NAME__` token that is not a compiler or CUDA macro (__CUDA_ARCH__,
 * __CUDACC_RTC__, __NV*, __FILE__, ...). Fails, naming it, when a placeholder has no value or a
 * value is never used. Returns 0 or -1. */
int qf_gen_render(const char *tpl_name, const char *tpl, const qf_gen_values *vals, qf_gen_buf *out,
                  qf_gen_err *e);

/* 1 when tok (NUL-terminated) looks like a placeholder: `__[A-Z][A-Z0-9_]*__` and not a known
 * compiler/CUDA macro. */
int qf_gen_is_placeholder(const char *tok);

#endif /* QF_GEN_RENDER_H */
