/* smxx_norm_backward.cu: LayerNorm / RMSNorm backward (numerics 6), the same module for every
 * family. C reference: qf_norm_backward_ref in runtime/ref/ref_bwd.c.
 *
 * With xh = (x - mu) * rsigma (RMSNorm: x * rsigma), g = gamma (+1 in fp32 when zero-centered)
 * and dxh = dxn * g:
 *   dx = rsigma * (dxh - mean_K(dxh) - xh * mean_K(dxh * xh))   (RMSNorm: no mean_K(dxh) term)
 *   dgamma = sum_M dxn * xh,   dbeta = sum_M dxn (LayerNorm)
 * in fp32, from the forward's mu and rsigma (never recomputed).
 *
 * Main entry (qf_nb_params): block b takes rows [b * rows_per_block, ...) one at a time. Pass 1
 * over a row adds up dxh and dxh * xh (thread t takes the 16-byte vectors of 8 columns t, t +
 * THREADS, ... where K % 8 == 0 and the arrays are 16-byte aligned, else the columns t, t +
 * THREADS, ...; then a block reduction), and each thread adds dxn * xh and dxn of its columns
 * into its own shared-memory accumulators; pass 2 re-reads the row and writes dx in x's dtype.
 * Where x and dxn are 16-bit and a row is at most 4 vectors per thread (K <= 8192 at 256
 * threads), the block holds the x and dxn vectors of its rows in registers from pass 1 to pass 2
 * (rows_held), two rows at a time up to 2 vectors per thread: all of a step's loads in flight at
 * once (the rows walk has one vector's in flight per thread), no re-read; a row's sums are added
 * in the same order, and a step's two rows of dxn * xh and dxn are added to each other before
 * their one add into the accumulators (the shared-memory traffic, which bound the kernel, halved:
 * docs/bench.md, "The norm backward's accumulators"). The runtime launches at most as many blocks
 * as are resident at once (a second wave would double the time: each block walks its rows).
 * At the end the block writes its accumulators to the partials. <name>_reduce adds each column's
 * partials in a fixed order (column_sum: deterministic). Shared memory: 2 QF_NB_ACC(K, THREADS)
 * floats (dynamic; acc_at). */
#include "qf_dev_load.cuh"
#include "qf_dev_module.cuh"
#include "qf_dev_reduce.cuh"
#include "qf_formats.h"

namespace {

constexpr int kNorm = __NORM__;
constexpr int kZeroCenteredGamma = __ZERO_CENTERED_GAMMA__;
constexpr int kInDtype = __IN_DTYPE__;
constexpr int kGammaDtype = QF_DEV_GAMMA_DTYPE(__IN_DTYPE__);
constexpr int kThreads = __BLOCK_THREADS__;
constexpr int kWarps = kThreads / 32;
constexpr bool kLayerNorm = kNorm == QF_NORM_LAYERNORM;

/* Elements i..i+V-1 of dxn (bf16, or fp32 when p.dxn_fp32) as fp32 (load_n's V and alignment). */
template <int V>
__device__ __forceinline__ void load_dxn(const qf_nb_params &p, long long i, float (&v)[V]) {
    if (p.dxn_fp32)
        load_n<QF_DTYPE_FP32, V>(p.dxn, i, v);
    else
        load_n<QF_DTYPE_BF16, V>(p.dxn, i, v);
}

/* g of columns k..k+V-1: gamma (x's dtype or fp32, the instance's) + 1 when zero-centered. */
template <int V>
__device__ __forceinline__ void load_g(const qf_nb_params &p, long long k, float (&g)[V]) {
    load_n<kGammaDtype, V>(p.gamma, k, g);
#pragma unroll
    for (int j = 0; j < V; j++)
        g[j] = kZeroCenteredGamma ? g[j] + 1.0f : g[j];
}

/* The accumulators in shared memory (s_acc): dgamma's in [0, R), dbeta's in [R, 2 R), R =
 * QF_NB_ACC(K, THREADS) floats. A column's place in its half (acc_at): in the 16-byte walks (V =
 * 8; thread t's vector i is columns c = 8 (t + i THREADS) .. c + 7) columns c .. c + 3 sit at 4
 * (2 i THREADS + t) and c + 4 .. c + 7 at 4 THREADS floats on, so that a warp's 16-byte accesses
 * are 512 consecutive bytes, without bank conflicts (at 32 bytes per thread they were 2-way
 * conflicted); elsewhere (V = 1) column c at c. */
__device__ __forceinline__ long long acc_half(long long K) {
    return QF_NB_ACC(K, static_cast<long long>(kThreads));
}

constexpr int kAccHi = 4 * kThreads; /* acc_at: a vector's columns c + 4 .. c + 7, floats on */

template <int V>
__device__ __forceinline__ float *acc_at(float *s_acc, long long c) {
    if (V == 1)
        return s_acc + c;
    const int u = static_cast<int>(c / 8); /* t + i THREADS (K <= QF_NB_MAX_K) */
    return s_acc + 4 * (u + u / kThreads * kThreads);
}

/* acc[0..V-1] += v (shared memory at acc_at<V>; V = 8: two 16-byte accesses). */
template <int V>
__device__ __forceinline__ void smem_add(float *acc, const float (&v)[V]) {
    if constexpr (V == 8) {
        float4 *q = reinterpret_cast<float4 *>(acc);
        float4 *h = reinterpret_cast<float4 *>(acc + kAccHi);
        const float4 a = q[0], b = h[0];
        q[0] = make_float4(a.x + v[0], a.y + v[1], a.z + v[2], a.w + v[3]);
        h[0] = make_float4(b.x + v[4], b.y + v[5], b.z + v[6], b.w + v[7]);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++)
            acc[j] += v[j];
    }
}

/* Pass 1 on one element: xh, then the row sums s1 += dxh, s2 += dxh * xh and the column term
 * dxn * xh (returned; dxn is the other); dxh * xh is fused into s2 (fmaf: one rounding where the
 * plain expression has two, still fp32 arithmetic in any order, numerics 6). */
__device__ __forceinline__ float pass1_elem(float x, float d, float g, float mu, float rs,
                                            float &s1, float &s2) {
    const float xh = kLayerNorm ? (x - mu) * rs : x * rs;
    const float dxh = d * g;
    s1 += dxh;
    s2 = fmaf(dxh, xh, s2);
    return d * xh;
}

/* Pass 2 on one element: dx = rsigma (dxh - m1 - xh m2), with xh m2 = (x - mu) (rsigma m2), as
 * rsigma fma(-(x - mu), rm2, fma(dxn, g, -m1)) (m1 = mean_K(dxh), 0 for RMSNorm; rm2 = rsigma
 * mean_K(dxh xh), once per row; RMSNorm: x for x - mu). */
__device__ __forceinline__ float pass2_elem(float x, float d, float g, float mu, float rs,
                                            float m1, float rm2) {
    const float xm = kLayerNorm ? x - mu : x;
    return rs * fmaf(-xm, rm2, fmaf(d, g, -m1));
}

/* Row q's sums over this thread's columns, s1 = sum dxh and s2 = sum dxh * xh, summed over the
 * warp; lane 0 writes them to red[2q] and red[2q + 1] (one slot per warp). */
__device__ __forceinline__ void row_sums_put(float (*red)[kWarps], int q, float s1, float s2) {
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    if ((threadIdx.x & 31) == 0) {
        red[2 * q][threadIdx.x >> 5] = s1;
        red[2 * q + 1][threadIdx.x >> 5] = s2;
    }
}

/* After the barrier that follows row_sums_put: row q's m1 = mean_K(dxh) (LayerNorm; 0 for
 * RMSNorm) and rm2 = rsigma mean_K(dxh * xh), pass2_elem's operands (numerics 6). */
__device__ __forceinline__ void row_means(const float (*red)[kWarps], int q, float rs,
                                          long long K, float &m1, float &rm2) {
    float t1 = 0.0f, t2 = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; w++) {
        t1 += red[2 * q][w];
        t2 += red[2 * q + 1][w];
    }
    m1 = kLayerNorm ? t1 / static_cast<float>(K) : 0.0f;
    rm2 = rs * (t2 / static_cast<float>(K));
}

/* Columns c..c+V-1 of row r: x, dxn and g. */
template <int V>
__device__ __forceinline__ void load_cols(const qf_nb_params &p, long long r, long long c,
                                          float (&xv)[V], float (&d)[V], float (&g)[V]) {
    load_n<kInDtype, V>(p.x, r * p.K + c, xv);
    load_dxn<V>(p, r * p.K + c, d);
    load_g<V>(p, c, g);
}

/* Rows r0..r1-1, V consecutive columns per thread and step (V = 8: 16-byte vectors; 1: one
 * element, columns t, t + THREADS, ...). */
template <int V>
__device__ __forceinline__ void rows(const qf_nb_params &p, float *s_acc,
                                     float (&s_red)[2][4][kWarps], long long r0, long long r1) {
    const long long K = p.K;
    for (long long r = r0; r < r1; r++) {
        const float mu = kLayerNorm ? p.mu[r] : 0.0f, rs = p.rsigma[r];
        float s1 = 0.0f, s2 = 0.0f; /* sum dxh, sum dxh * xh over this thread's columns */
        for (long long c = static_cast<long long>(threadIdx.x) * V; c < K; c += kThreads * V) {
            float xv[V], d[V], g[V], dg[V];
            load_cols<V>(p, r, c, xv, d, g);
#pragma unroll
            for (int j = 0; j < V; j++)
                dg[j] = pass1_elem(xv[j], d[j], g[j], mu, rs, s1, s2);
            smem_add<V>(acc_at<V>(s_acc, c), dg);
            if (kLayerNorm)
                smem_add<V>(acc_at<V>(s_acc + acc_half(K), c), d);
        }
        /* two buffers, alternated per row: a row's reads finish before the next row writes the
         * same buffer, behind the next row's first barrier */
        float (*red)[kWarps] = s_red[(r - r0) & 1];
        row_sums_put(red, 0, s1, s2);
        __syncthreads();
        float m1, rm2;
        row_means(red, 0, rs, K, m1, rm2);
        for (long long c = static_cast<long long>(threadIdx.x) * V; c < K; c += kThreads * V) {
            float xv[V], d[V], g[V], dx[V];
            load_cols<V>(p, r, c, xv, d, g);
#pragma unroll
            for (int j = 0; j < V; j++)
                dx[j] = pass2_elem(xv[j], d[j], g[j], mu, rs, m1, rm2);
            store_n<kInDtype, V>(p.dx, r * K + c, dx);
        }
    }
}

/* f(q, c, x, dxn, g) for each held vector: row q < nr of the step, columns c .. c + 7 (before K),
 * x and dxn unpacked from the raw vectors xr and dr (rows_held), g as load_g gives it; then
 * after(c) once the step's rows of those columns are done. */
template <int RV, int NR, typename F, typename A>
__device__ __forceinline__ void held_each(const qf_nb_params &p, const uint4 (&xr)[NR][RV],
                                          const uint4 (&dr)[NR][RV], int nr, F f, A after) {
#pragma unroll
    for (int i = 0; i < RV; i++) {
        const long long c = (static_cast<long long>(threadIdx.x) + i * kThreads) * 8;
        if (c >= p.K)
            break;
        float g[8];
        load_g<8>(p, c, g);
#pragma unroll
        for (int q = 0; q < NR; q++) {
            if (q >= nr)
                break;
            float xv[8], d[8];
            unpack16<kInDtype, 8>(xr[q][i], xv);
            unpack16<QF_DTYPE_BF16, 8>(dr[q][i], d);
            f(q, c, xv, d, g);
        }
        after(c);
    }
}

/* Rows r0..r1-1, NR (1 or 2) at a time, where x and dxn are 16-bit, every array 16-byte aligned
 * and K <= RV x 8 x THREADS: thread t's vectors are columns 8 (t + i THREADS), i < RV, the same
 * as rows<8>'s, and their raw 16 bytes of x and dxn stay in registers from pass 1 to pass 2
 * (NR x RV x 2 16-byte vectors per thread). */
template <int RV, int NR>
__device__ __forceinline__ void rows_held(const qf_nb_params &p, float *s_acc,
                                          float (&s_red)[2][4][kWarps], long long r0,
                                          long long r1) {
    static_assert(NR == 1 || NR == 2, "1 or 2 rows at a time");
    const long long K = p.K;
    for (long long r = r0; r < r1; r += NR) {
        const int nr = r + NR <= r1 ? NR : 1;
        uint4 xr[NR][RV], dr[NR][RV];
#pragma unroll
        for (int q = 0; q < NR; q++)
#pragma unroll
            for (int i = 0; i < RV; i++) {
                const long long c = (static_cast<long long>(threadIdx.x) + i * kThreads) * 8;
                const bool ok = c < K && q < nr;
                const long long e = (r + q) * K + c;
                xr[q][i] = ok ? __ldg(reinterpret_cast<const uint4 *>(
                                    static_cast<const unsigned short *>(p.x) + e))
                              : make_uint4(0u, 0u, 0u, 0u);
                dr[q][i] = ok ? __ldg(reinterpret_cast<const uint4 *>(
                                    static_cast<const unsigned short *>(p.dxn) + e))
                              : make_uint4(0u, 0u, 0u, 0u);
            }
        float mu[NR], rs[NR], s1[NR], s2[NR];
#pragma unroll
        for (int q = 0; q < NR; q++) {
            s1[q] = 0.0f, s2[q] = 0.0f;
            const long long rq = q < nr ? r + q : r;
            mu[q] = kLayerNorm ? p.mu[rq] : 0.0f;
            rs[q] = p.rsigma[rq];
        }
        /* a vector's dxn * xh and dxn summed over the step's rows in registers (row by row),
         * then added into the accumulators once */
        float sg[8], sb[8];
        held_each<RV, NR>(
            p, xr, dr, nr,
            [&](int q, long long, const float (&xv)[8], const float (&d)[8], const float (&g)[8]) {
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const float dg = pass1_elem(xv[j], d[j], g[j], mu[q], rs[q], s1[q], s2[q]);
                    sg[j] = q ? sg[j] + dg : dg;
                    sb[j] = q ? sb[j] + d[j] : d[j];
                }
            },
            [&](long long c) {
                smem_add<8>(acc_at<8>(s_acc, c), sg);
                if (kLayerNorm)
                    smem_add<8>(acc_at<8>(s_acc + acc_half(K), c), sb);
            });
        /* two buffers, alternated per step (as in rows) */
        float (*red)[kWarps] = s_red[((r - r0) / NR) & 1];
#pragma unroll
        for (int q = 0; q < NR; q++)
            row_sums_put(red, q, s1[q], s2[q]);
        __syncthreads();
        float m1[NR], rm2[NR];
#pragma unroll
        for (int q = 0; q < NR; q++)
            row_means(red, q, rs[q], K, m1[q], rm2[q]);
        held_each<RV, NR>(p, xr, dr, nr,
                          [&](int q, long long c, const float (&xv)[8], const float (&d)[8],
                              const float (&g)[8]) {
                              float dx[8];
#pragma unroll
                              for (int j = 0; j < 8; j++)
                                  dx[j] = pass2_elem(xv[j], d[j], g[j], mu[q], rs[q], m1[q],
                                                     rm2[q]);
                              store_n<kInDtype, 8>(p.dx, (r + q) * K + c, dx);
                          },
                          [](long long) {});
    }
}

/* 1 when the rows can be walked in 16-byte vectors of 8 elements: K a multiple of 8, every
 * array 16-byte aligned (a uniform choice per launch). */
__device__ __forceinline__ bool vec_ok(const qf_nb_params &p) {
    const unsigned long long a = reinterpret_cast<unsigned long long>(p.x) |
                                 reinterpret_cast<unsigned long long>(p.dxn) |
                                 reinterpret_cast<unsigned long long>(p.gamma) |
                                 reinterpret_cast<unsigned long long>(p.dx);
    return p.K % 8 == 0 && (a & 15ull) == 0;
}

/* Rows r0..r1-1: rows_held where it applies (16-bit x and dxn, vec_ok, K <= 4 x 8 x THREADS),
 * else rows<8> where vec_ok, else rows<1>. */
__device__ __forceinline__ void walk(const qf_nb_params &p, float *s_acc,
                                     float (&s_red)[2][4][kWarps], long long r0, long long r1) {
    const bool vec = vec_ok(p);
    if constexpr (kInDtype != QF_DTYPE_FP32) {
        const long long kv = (p.K + 8 * kThreads - 1) / (8 * kThreads); /* vectors per thread */
        if (vec && !p.dxn_fp32 && kv <= 4) {
            if (kv == 1)
                rows_held<1, 2>(p, s_acc, s_red, r0, r1);
            else if (kv == 2)
                rows_held<2, 2>(p, s_acc, s_red, r0, r1);
            else
                rows_held<4, 1>(p, s_acc, s_red, r0, r1);
            return;
        }
    }
    if (vec)
        rows<8>(p, s_acc, s_red, r0, r1);
    else
        rows<1>(p, s_acc, s_red, r0, r1);
}

} // namespace

/* 3 blocks of 256 threads per SM (80 registers): left alone, ptxas gave rows_held's LayerNorm
 * 123-128 registers, 2 blocks. */
extern "C" __global__ void __launch_bounds__(kThreads, 3) __KERNEL_NAME__(const qf_nb_params p) {
    extern __shared__ __align__(16) float s_acc[]; /* dgamma's and dbeta's (acc_at) */
    __shared__ float s_red[2][4][kWarps];
    const long long K = p.K, R = acc_half(K);
    for (long long c = threadIdx.x; c < 2 * R; c += kThreads)
        s_acc[c] = 0.0f;
    __syncthreads(); /* zeroed by other threads than the ones that add into them below */
    const long long r0 = static_cast<long long>(blockIdx.x) * p.rows_per_block;
    const long long r1 = r0 + p.rows_per_block < p.M ? r0 + p.rows_per_block : p.M;
    walk(p, s_acc, s_red, r0, r1);
    /* each thread reads back only the accumulators it added into */
    float *pg = p.part + static_cast<long long>(blockIdx.x) * K;
    float *pb = p.part + (static_cast<long long>(p.blocks) + blockIdx.x) * K;
    const int v = vec_ok(p) ? 8 : 1;
    for (long long c0 = static_cast<long long>(threadIdx.x) * v; c0 < K; c0 += kThreads * v) {
        const long long a = v == 8 ? acc_at<8>(s_acc, c0) - s_acc : c0;
        for (int j = 0; j < v; j++) {
            const long long o = a + (j < 4 ? j : kAccHi + j - 4); /* acc_at's halves */
            pg[c0 + j] = s_acc[o];
            if (kLayerNorm)
                pb[c0 + j] = s_acc[R + o];
        }
    }
}

namespace {

/* <name>_reduce (grid cdiv(K, QF_REDUCE_COLS)): dgamma[k] (and dbeta[k]) = the main entry's
 * partials of column k summed over its blocks (column_sum's fixed order). */
__device__ __forceinline__ void reduce_body(const qf_nb_params &p) {
    __shared__ float s_g[kWarps][QF_REDUCE_COLS], s_b[kWarps][QF_REDUCE_COLS];
    const long long c0 = static_cast<long long>(blockIdx.x) * QF_REDUCE_COLS;
    const long long c = c0 + threadIdx.x;
    const float g = column_sum<kWarps>(p.part, p.blocks, p.K, c0, s_g);
    if (threadIdx.x < QF_REDUCE_COLS && c < p.K)
        p.dgamma[c] = g;
    if (kLayerNorm) {
        const float b = column_sum<kWarps>(p.part + static_cast<long long>(p.blocks) * p.K,
                                           p.blocks, p.K, c0, s_b);
        if (threadIdx.x < QF_REDUCE_COLS && c < p.K)
            p.dbeta[c] = b;
    }
}

} // namespace

QF_REDUCE_ENTRY(__KERNEL_NAME__, kThreads, qf_nb_params)
