/* smxx_dbias.cu: dbias = sum_M dy (numerics 6), fp32 sums stored in dy's dtype, the same module
 * for every family. C reference: qf_dbias_ref in runtime/ref/ref_bwd.c.
 *
 * Main entry (qf_db_params): block b adds rows [b * rows_per_block, ...) of dy [M, N] column by
 * column (thread t takes columns t, t + THREADS, ...; coalesced rows) into fp32 registers of
 * shared memory and writes them to part[b * N + n]; <name>_reduce (one thread per column) adds
 * the partials in block order and rounds once to dy's dtype. Shared memory: N floats (dynamic). */
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kInDtype = __IN_DTYPE__;
constexpr int kThreads = __BLOCK_THREADS__;

/* <name>_reduce (grid cdiv(N, THREADS)): dbias[n] = the partials of column n, in block order. */
__device__ __forceinline__ void reduce_body(const qf_db_params &p) {
    const long long c = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
    if (c < p.N)
        store_elem<kInDtype>(p.dbias, c, column_sum(p.part, p.blocks, p.N, c));
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_db_params p) {
    extern __shared__ float s_acc[];
    const long long N = p.N;
    for (long long c = threadIdx.x; c < N; c += kThreads)
        s_acc[c] = 0.0f;
    const long long r0 = static_cast<long long>(blockIdx.x) * p.rows_per_block;
    const long long r1 = r0 + p.rows_per_block < p.M ? r0 + p.rows_per_block : p.M;
    /* each thread adds into and reads back only its own columns: no barrier */
    for (long long r = r0; r < r1; r++)
        for (long long c = threadIdx.x; c < N; c += kThreads)
            s_acc[c] += load_elem<kInDtype>(p.dy, r * N + c);
    float *part = p.part + static_cast<long long>(blockIdx.x) * N;
    for (long long c = threadIdx.x; c < N; c += kThreads)
        part[c] = s_acc[c];
}

QF_REDUCE_ENTRY(__KERNEL_NAME__, kThreads, qf_db_params)
