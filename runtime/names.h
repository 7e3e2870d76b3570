/* names.h: the one enum-name table: C constants and short names of the qf_formats.h enums. */
#ifndef QF_NAMES_H
#define QF_NAMES_H

#include <stddef.h>

#include "qf_formats.h"

/* Which enum of qf_formats.h (or qfuse.h) a value belongs to (internal: never stored, so the
 * values may change). ORDER ENUM */
typedef enum qf_enum {
    QF_ENUM_DTYPE,
    QF_ENUM_NORM,
    QF_ENUM_FAMILY,
    QF_ENUM_ROLE,
    QF_ENUM_OP,
    QF_ENUM_AMAX_COMPUTE,
    QF_ENUM_SCALE_ROUNDING,
    QF_ENUM_SCALE_LAYOUT,
    QF_ENUM_FP8_FORMAT,
    QF_ENUM_SLOT, /* qf_slot (qfuse.h): the fake-shape output names */
    QF_ENUM_ACTIVATION,
    QF_ENUM_COPY, /* qf_copy (qfuse.h) */
    QF_ENUM_COUNT
} qf_enum;

/* The C constant of value v ("QF_DTYPE_BF16"), or NULL when v is out of range. */
const char *qf_enum_c(qf_enum kind, int v);
/* The short name of value v ("bf16", "layernorm", "norm_quantize"), or NULL when out of range. */
const char *qf_enum_name(qf_enum kind, int v);
/* Number of values of the enum (its _COUNT sentinel). */
int qf_enum_count(qf_enum kind);
/* The value whose short name is s[0..len) (whole bytes compared: an embedded NUL matches
 * nothing), or -1. */
int qf_enum_find(qf_enum kind, const char *s, size_t len);

#endif /* QF_NAMES_H */
