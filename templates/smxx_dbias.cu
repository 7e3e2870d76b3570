/* smxx_dbias.cu: dbias = sum_M dy (numerics 6), fp32 sums stored in dy's dtype, the same module
 * for every family. C reference: qf_dbias_ref in runtime/ref/ref_bwd.c.
 *
 * Main entry (qf_db_params; grid blocks x tiles): block (b, j) adds rows [b * rows_per_block, ...)
 * of dy [M, N] over its tile of kThreads * 8 columns, each thread 8 consecutive columns in fp32
 * registers (one 16-byte load per row when N is a multiple of 8 and the arrays are 16-byte
 * aligned, else one element at a time), rows in order, and writes them to part[b * N + n];
 * <name>_reduce adds the partials of each column in a fixed order (column_sum) and rounds once to
 * dy's dtype. With the activation prologue QF_PROLOGUE_DACT (qf_dev_act.cuh) dy is h and the rows
 * summed are dh = da act'(h), rounded to h's dtype as the activation's backward stores it: the
 * sums of the unfused pair, bit for bit, without dh in memory. */
#include "qf_dev_act.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kInDtype = __IN_DTYPE__;
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kCols = 8; /* columns per thread */

/* <name>_reduce (grid cdiv(N, QF_REDUCE_COLS)): dbias[n] = the partials of column n summed
 * (column_sum's fixed order), rounded once to dy's dtype. */
__device__ __forceinline__ void reduce_body(const qf_db_params &p) {
    __shared__ float s[kThreads / 32][QF_REDUCE_COLS];
    const long long c0 = static_cast<long long>(blockIdx.x) * QF_REDUCE_COLS;
    const float t = column_sum<kThreads / 32>(p.part, p.blocks, p.N, c0, s);
    if (threadIdx.x < QF_REDUCE_COLS && c0 + threadIdx.x < p.N)
        store_elem<kInDtype>(p.dbias, c0 + threadIdx.x, t);
}

/* 1 when the rows can be read as 16-byte vectors of kCols elements (a vector lies in one half
 * of a SwiGLU dh). */
__device__ __forceinline__ bool vec_ok(const qf_db_params &p) {
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.dy) |
                                 reinterpret_cast<unsigned long long>(p.da);
    const bool halves = kPrologue != QF_PROLOGUE_DACT(QF_ACT_SWIGLU) || (p.N / 2) % kCols == 0;
    return p.N % kCols == 0 && (a & 15ull) == 0 && halves;
}

/* Adds rows r0..r1-1 of columns c..c+V-1 (V = kCols, or 1 at a time) into acc. */
template <int V>
__device__ __forceinline__ void add_rows(const qf_db_params &p, long long r0, long long r1,
                                         long long c, float (&acc)[kCols]) {
    for (long long r = r0; r < r1; r++)
        for (int j = 0; j < kCols; j += V) {
            if (c + j >= p.N)
                break;
            float v[V];
            load_src<kInDtype, V>(p.dy, p.da, p.da_fp32, r, p.N, c + j, v);
#pragma unroll
            for (int i = 0; i < V; i++)
                acc[j + i] += v[i];
        }
}

} // namespace

extern "C" __global__ void __launch_bounds__(kThreads) __KERNEL_NAME__(const qf_db_params p) {
    const long long N = p.N, tile = kThreads * kCols;
    const long long tiles = (N + tile - 1) / tile;
    const long long b = blockIdx.x / tiles, c = (blockIdx.x % tiles) * tile + threadIdx.x * kCols;
    const long long r0 = b * p.rows_per_block;
    const long long r1 = r0 + p.rows_per_block < p.M ? r0 + p.rows_per_block : p.M;
    if (c >= N)
        return;
    float acc[kCols];
#pragma unroll
    for (int j = 0; j < kCols; j++)
        acc[j] = 0.0f;
    if (vec_ok(p))
        add_rows<kCols>(p, r0, r1, c, acc);
    else
        add_rows<1>(p, r0, r1, c, acc);
    float *part = p.part + b * N;
#pragma unroll
    for (int j = 0; j < kCols; j++)
        if (c + j < N)
            part[c + j] = acc[j];
}

QF_REDUCE_ENTRY(__KERNEL_NAME__, kThreads, qf_db_params)
