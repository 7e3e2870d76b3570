/* tensor.c: dtype traits, tensor helpers, slot and family names of the public API. */
#include <string.h>

#include "qfuse.h"

#include "names.h"

/* Bytes per element; 0 for packed sub-byte types. ORDER DTYPE */
static const size_t qf_dtype_sizes[] = {
    [QF_DTYPE_FP32] = 4, [QF_DTYPE_FP16] = 2, [QF_DTYPE_BF16] = 2, [QF_DTYPE_E4M3] = 1,
    [QF_DTYPE_E5M2] = 1, [QF_DTYPE_E8M0] = 1, [QF_DTYPE_E2M1] = 0,
};
_Static_assert(sizeof(qf_dtype_sizes) / sizeof(qf_dtype_sizes[0]) == QF_DTYPE_COUNT,
               "qf_dtype_sizes out of sync with qf_dtype");

size_t qf_dtype_size(qf_dtype dt) {
    return (unsigned)dt < QF_DTYPE_COUNT ? qf_dtype_sizes[dt] : 0;
}

const char *qf_dtype_name(qf_dtype dt) {
    const char *n = qf_enum_name(QF_ENUM_DTYPE, (int)dt);
    return n ? n : "?";
}

int64_t qf_tensor_numel(const qf_tensor *t) {
    if (!t || t->ndim < 1 || t->ndim > QF_MAX_DIMS)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] < 0 || __builtin_mul_overflow(n, t->dims[i], &n))
            return -1;
    }
    return n;
}

/* Fake-shape names of the slots of a quantized tensor (gen/gen_shape.c emits the same names). */
const char *qf_slot_name(qf_slot s) {
    return qf_enum_name(QF_ENUM_SLOT, (int)s); /* the one enum-name table (names.c) */
}

int qf_slot_from_name(const char *name) {
    return name ? qf_enum_find(QF_ENUM_SLOT, name, strlen(name)) : -1;
}

const char *qf_family_name(qf_family f) {
    const char *n = qf_enum_name(QF_ENUM_FAMILY, (int)f); /* the one enum-name table (names.c) */
    return n ? n : "?";
}
