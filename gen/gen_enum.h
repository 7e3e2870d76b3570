/* gen_enum.h: names of the qf_formats.h enums as written by qfuse-gen (C constants, short names).
 */
#ifndef QF_ENUM_H
#define QF_ENUM_H

#include "qf_formats.h"

/* Which enum of qf_formats.h a value belongs to. ORDER GEN_ENUM */
typedef enum qf_gen_enum {
    QF_ENUM_DTYPE = 0,
    QF_ENUM_NORM = 1,
    QF_ENUM_FAMILY = 2,
    QF_ENUM_ROLE = 3,
    QF_ENUM_OP = 4,
    QF_ENUM_AMAX_COMPUTE = 5,
    QF_ENUM_SCALE_ROUNDING = 6,
    QF_ENUM_COUNT
} qf_gen_enum;

/* The C constant of value v ("QF_DTYPE_BF16"), or NULL when v is out of range. */
const char *qf_enum_c(qf_gen_enum kind, int v);
/* The short name of value v ("bf16", "layernorm", "norm_quantize"), or NULL when out of range. */
const char *qf_enum_name(qf_gen_enum kind, int v);
/* Number of values of the enum (its _COUNT sentinel). */
int qf_enum_count(qf_gen_enum kind);

#endif /* QF_ENUM_H */
