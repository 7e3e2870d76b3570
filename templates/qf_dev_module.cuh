/* qf_dev_module.cuh: what a kernel module exposes: the instance options the runtime passes with
 * -D (runtime/jit/kernel_key.c), with their defaults, and the macros that define the optional
 * entry points `<name>_rows{1,2,4,8}`, `<name>_cols`, `<name>_amax` and `<name>_reduce`.
 *
 * qfuse-gen lists a module's entry points in the registry from the entry macros its template
 * invokes at the start of a line (gen/gen_render.c), so the runtime never searches source text.
 * The entries run the template's rows_body<IT>, cols_body or amax_body on the params block. An
 * in-memory NVRTC header; see qf_dev_load.cuh. */
#ifndef QF_DEV_MODULE_CUH
#define QF_DEV_MODULE_CUH

#include "qf_formats.h"

/* Quantizer instances: outputs written (default rowwise only), scale layout (default compact),
 * gamma/beta dtype (default: x's dtype). */
#ifndef QF_OUTPUTS
#define QF_OUTPUTS QF_OUT_ROWWISE
#endif
#ifndef QF_SCALE_SWIZZLED
#define QF_SCALE_SWIZZLED 0
#endif
#ifdef QF_GAMMA_DTYPE
#define QF_DEV_GAMMA_DTYPE(x_dtype) QF_GAMMA_DTYPE
#else
#define QF_DEV_GAMMA_DTYPE(x_dtype) x_dtype
#endif

/* GEMM modules: QF_GEMM_STAGED=1 is the staged instance (qf_kernel_instance.staged), which
 * holds the staged path's entries (<name>_dequant, <name>_alpha) and no main entry; 0 is the GEMM
 * kernel alone (qf_kernel_instance_entries). Each compiles without the other's code. */
#ifndef QF_GEMM_STAGED
#define QF_GEMM_STAGED 0
#endif

#define QF_CAT_(a, b) a##b
#define QF_CAT(a, b) QF_CAT_(a, b)

/* extern "C" entry `name` with the __launch_bounds__ arguments B, parenthesized ((THREADS) or
 * (THREADS, MIN_BLOCKS)), taking params block P by value: runs body. */
#define QF_DEV_ENTRY_B(name, B, P, body)                                                          \
    extern "C" __global__ void __launch_bounds__ B name(const P p) {                               \
        body;                                                                                     \
    }

/* The same, launch bounds THREADS. */
#define QF_DEV_ENTRY(name, THREADS, P, body) QF_DEV_ENTRY_B(name, (THREADS), P, body)

/* The same, with at least MIN_BLOCKS resident blocks per SM asked of the register allocator
 * (__launch_bounds__'s second argument; QF_DEV_ENTRY gives none, which ptxas reads differently
 * from 1). */
#define QF_DEV_ENTRY_MIN(name, THREADS, MIN_BLOCKS, P, body)                                      \
    QF_DEV_ENTRY_B(name, (THREADS, MIN_BLOCKS), P, body)

/* <name>_rows1 .. _rows8: rows_body<IT> for rows of up to IT vectors per thread, each with the
 * __launch_bounds__ arguments B1 .. B8, parenthesized: (THREADS) or (THREADS, MIN_BLOCKS), the
 * resident blocks per SM asked of the register allocator where ptxas would otherwise give the
 * entry more registers than its occupancy allows (with gamma and beta in shared memory and the
 * block walks' branch-free path, it did for some). */
#define QF_ROWS_ENTRIES(name, P, B1, B2, B4, B8)                                                  \
    QF_DEV_ENTRY_B(QF_CAT(name, _rows1), B1, P, rows_body<1>(p))                                  \
    QF_DEV_ENTRY_B(QF_CAT(name, _rows2), B2, P, rows_body<2>(p))                                  \
    QF_DEV_ENTRY_B(QF_CAT(name, _rows4), B4, P, rows_body<4>(p))                                  \
    QF_DEV_ENTRY_B(QF_CAT(name, _rows8), B8, P, rows_body<8>(p))

/* <name>_cols: cols_body, the columnwise copy after a rows entry. */
#define QF_COLS_ENTRY(name, THREADS, P) QF_DEV_ENTRY(QF_CAT(name, _cols), THREADS, P, cols_body(p))

/* <name>_cols with at least MIN_BLOCKS resident blocks per SM (QF_DEV_ENTRY_MIN). */
#define QF_COLS_ENTRY_MIN(name, THREADS, MIN_BLOCKS, P)                                           \
    QF_DEV_ENTRY_MIN(QF_CAT(name, _cols), THREADS, MIN_BLOCKS, P, cols_body(p))

/* <name>_amax: amax_body, the first pass of a two-pass module. */
#define QF_AMAX_ENTRY(name, THREADS, P) QF_DEV_ENTRY(QF_CAT(name, _amax), THREADS, P, amax_body(p))

/* <name>_amax with at least MIN_BLOCKS resident blocks per SM (QF_DEV_ENTRY_MIN). */
#define QF_AMAX_ENTRY_MIN(name, THREADS, MIN_BLOCKS, P)                                           \
    QF_DEV_ENTRY_MIN(QF_CAT(name, _amax), THREADS, MIN_BLOCKS, P, amax_body(p))

/* <name>_reduce: reduce_body, the column sums of a partial-sums entry's per-block partials. */
#define QF_REDUCE_ENTRY(name, THREADS, P)                                                         \
    QF_DEV_ENTRY(QF_CAT(name, _reduce), THREADS, P, reduce_body(p))

/* <name>_grad: grad_body, the backward of an elementwise module. */
#define QF_GRAD_ENTRY(name, THREADS, P) QF_DEV_ENTRY(QF_CAT(name, _grad), THREADS, P, grad_body(p))

#endif /* QF_DEV_MODULE_CUH */
