/* tensor.c: dtype traits and tensor helpers of the public API. */
#include "qfuse.h"

typedef struct qf_dtype_traits {
    const char *name;
    size_t size; /* bytes per element; 0 for packed sub-byte types */
} qf_dtype_traits;

/* ORDER DTYPE */
static const qf_dtype_traits qf_dtype_table[] = {
    [QF_DTYPE_FP32] = {"fp32", 4},
    [QF_DTYPE_FP16] = {"fp16", 2},
    [QF_DTYPE_BF16] = {"bf16", 2},
    [QF_DTYPE_E4M3] = {"e4m3", 1},
    [QF_DTYPE_E5M2] = {"e5m2", 1},
    [QF_DTYPE_E8M0] = {"e8m0", 1},
    [QF_DTYPE_E2M1] = {"e2m1", 0},
};
_Static_assert(sizeof(qf_dtype_table) / sizeof(qf_dtype_table[0]) == QF_DTYPE_COUNT,
               "qf_dtype_table out of sync with qf_dtype");

size_t qf_dtype_size(qf_dtype dt) {
    return (unsigned)dt < QF_DTYPE_COUNT ? qf_dtype_table[dt].size : 0;
}

const char *qf_dtype_name(qf_dtype dt) {
    return (unsigned)dt < QF_DTYPE_COUNT ? qf_dtype_table[dt].name : "?";
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
