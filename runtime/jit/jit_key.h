/* jit_key.h: the fusion key (numerics 5): a digest of everything that changes a kernel's code. */
#ifndef QF_JIT_KEY_H
#define QF_JIT_KEY_H

#include "status.h"

/* Everything a kernel binary depends on. M is never part of it. */
typedef struct qf_key_input {
    const char *name;                 /* kernel variant name (entry symbol) */
    const char *recipe_options;       /* canonical recipe options (qf_recipe.options) */
    const char *variant;              /* canonical variant string: op, role, norm, zcg, dtypes */
    const char *source_prelude;       /* NULL, or the text NVRTC sees before source (a kernel's
                                       * prelude): hashed as one string with source */
    const char *source;               /* exact source handed to NVRTC (after source_prelude) */
    const char *const *header_names;  /* in-memory headers handed to NVRTC (names and texts) */
    const char *const *headers;
    int n_headers;
    const char *const *options;       /* NVRTC options (include -arch and every -D) */
    int n_options;
    int arch;                         /* target compute capability, 10*major+minor (90, 100) */
    int nvrtc_major, nvrtc_minor;     /* NVRTC version the binary is built with */
} qf_key_input;

#define QF_KEY_HEX_LEN 32

/* Writes the 128-bit fusion key of in as 32 lower-case hex digits plus NUL into hex[33].
 * Deterministic across processes and machines; each field is length-prefixed so no two different
 * inputs share an encoding. Digest: XXH3-128 (canonical byte order) over, in this order: the tag
 * "qfuse-key-v1", name, recipe_options, variant, source (source_prelude + source as one string:
 * the key of a split text equals that of the joined one), n_headers, each (header name, text),
 * n_options, each option, arch, nvrtc_major, nvrtc_minor. A string is its length as 8
 * little-endian bytes then its bytes (NULL: length UINT64_MAX, no bytes); an int is 8
 * little-endian bytes. [in] in: not retained. */
QF_INTERNAL void qf_key_compute(const qf_key_input *in, char hex[QF_KEY_HEX_LEN + 1]);

#endif /* QF_JIT_KEY_H */
