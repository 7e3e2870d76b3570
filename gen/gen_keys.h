/* gen_keys.h: a key given twice in a recipe's returned table (gen_keys.c). */
#ifndef QF_GEN_KEYS_H
#define QF_GEN_KEYS_H

#include <stddef.h>

/* The first key found twice: its name (cut to 63 bytes) and both lines (1-based). */
typedef struct qf_gen_dup {
    char key[64];
    int first_line, line;
} qf_gen_dup;

/* Scans the recipe source text[0..len) (not NUL-terminated) for two fields of the table
 * constructor after its last top-level `return` with the same key (`name = v` or `["name"] = v`).
 * Returns 1 with *dup filled, else 0. Reads only text; writes only *dup. */
int qf_gen_duplicate_key(const char *text, size_t len, qf_gen_dup *dup);

#endif /* QF_GEN_KEYS_H */
