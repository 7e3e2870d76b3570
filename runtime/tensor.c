/* tensor.c: dtype traits and tensor helpers of the public API. */
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
