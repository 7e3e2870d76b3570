/* qf_dev_norm.cuh: LayerNorm/RMSNorm pieces shared by the quantizer templates (numerics 3): the
 * normalized value, exact two-pass row statistics by one warp (from memory, the tiled entries'
 * phase 1) or by a whole block (from registers, the rows entries), gamma loads, and the loads
 * and statistics of a columnwise tile. An in-memory NVRTC header; see qf_dev_load.cuh. */
#ifndef QF_DEV_NORM_CUH
#define QF_DEV_NORM_CUH

#include "qf_dev_act.cuh"
#include "qf_dev_load.cuh"
#include "qf_dev_reduce.cuh"

namespace {

/* The value that is quantized (numerics 3), in the reference's exact operation order. */
template <int NORM>
__device__ __forceinline__ float normalize(float x, float mu, float rsigma, float g, float b) {
    if (NORM == QF_NORM_LAYERNORM)
        return fmaf((x - mu) * rsigma, g, b);
    if (NORM == QF_NORM_RMSNORM)
        return (x * rsigma) * g;
    return x;
}

/* The warp's sum over one row of x - mu, or of (x - mu)^2 when SQ (x of dtype DT from element
 * base, nvec vectors of VEC elements; lane l adds vectors l, l + 32, ... in order). */
template <int DT, int VEC, bool SQ>
__device__ __forceinline__ float row_sum(const void *x, long long base, long long nvec, float mu) {
    float s = 0.0f;
#pragma unroll 8
    for (long long v = threadIdx.x & 31; v < nvec; v += 32) {
        float e[VEC];
        load_n<DT, VEC>(x, base + v * VEC, e);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const float d = e[j] - mu; /* exact e[j] when mu is 0 */
            s += SQ ? d * d : d;
        }
    }
    return warp_sum(s);
}

/* mu and rsigma of one row of K elements of dtype DT, by one warp, in two passes over x (numerics
 * 3: eps inside the square root), VEC consecutive elements per load (VEC divides K). */
template <int NORM, int DT, int VEC = 1>
__device__ void row_stats(const void *x, long long row, long long K, float eps, float *mu_out,
                          float *rsigma_out) {
    const long long base = row * K, nvec = K / VEC;
    const float mu = NORM == QF_NORM_LAYERNORM
                         ? row_sum<DT, VEC, false>(x, base, nvec, 0.0f) / static_cast<float>(K)
                         : 0.0f;
    *mu_out = mu;
    *rsigma_out =
        1.0f / sqrtf(row_sum<DT, VEC, true>(x, base, nvec, mu) / static_cast<float>(K) + eps);
}

/* The lanes that share a span in rows_vec, for blocks of BV vectors: spans of S = max(BV, 8 IT)
 * vectors, G = S / IT >= 8 lanes each, so that each load instruction reads whole 128-byte lines
 * per group. A block lies in L = min(G, BV) aligned lanes of the group, V = BV / L vectors in
 * each; a lane's vector `it` lies in its block it / V, of NB = IT / V. */
template <int IT, int BV>
struct RowsSpan {
    static constexpr int S = BV > 8 * IT ? BV : 8 * IT;
    static constexpr int G = S / IT;
    static constexpr int L = G < BV ? G : BV;
    static constexpr int V = BV / L;
    static constexpr int NB = IT / V;
    static_assert(IT % V == 0 && BV % L == 0, "whole blocks per lane");
};

/* Which vector of EPV elements of a row chunk (IT * THREADS vectors) register vector `it` of
 * thread tid holds. The chunk is cut into spans of S vectors (RowsSpan: whole quantization
 * blocks of BV vectors, 1x128 or 1x32 elements), each held by G consecutive lanes: lane tid % G
 * holds vectors it * G + tid % G of its span. BV = IT * THREADS is the interleaved chunk:
 * vector it * THREADS + tid, a warp's load 512 contiguous bytes. */
template <int IT, int THREADS, int BV>
__host__ __device__ __forceinline__ constexpr int rows_vec(int tid, int it) {
    constexpr int G = RowsSpan<IT, BV>::G;
    return (tid / G) * (IT * G) + it * G + tid % G;
}

/* 1 when register vector `it` of thread tid (rows_vec) is the first vector of its block, held by
 * the first of the block's lanes: the one that writes the block's scale. */
template <int IT, int BV>
__host__ __device__ __forceinline__ constexpr bool rows_block_first(int tid, int it) {
    constexpr int G = RowsSpan<IT, BV>::G;
    return (it * G + tid % G) % BV == 0;
}

/* Where thread tid's IT register vectors lie in a rows chunk from column k0 (rows_vec, spans of
 * BV vectors): vector it covers columns col + it * STRIDE .. + EPV - 1 (STRIDE = RowsSpan's G
 * times EPV: rows_vec(tid, it) = rows_vec(tid, 0) + it * G), and bit it of valid is set when
 * they lie before K (the others hold 0 and are neither normalized nor stored). With a norm the
 * chunk is the whole row, so this is computed once per block and holds for every row. */
struct RowsLane {
    long long col;
    unsigned valid;
};

template <int IT, int EPV, int THREADS, int BV>
__device__ __forceinline__ RowsLane rows_lane(long long K, long long k0, int tid) {
    constexpr long long kStride = static_cast<long long>(RowsSpan<IT, BV>::G) * EPV;
    RowsLane ln{k0 + static_cast<long long>(rows_vec<IT, THREADS, BV>(tid, 0)) * EPV, 0u};
#pragma unroll
    for (int it = 0; it < IT; it++)
        if (ln.col + it * kStride < K)
            ln.valid |= 1u << it;
    return ln;
}

/* Column of register vector it of a rows lane (RowsLane). */
template <int IT, int EPV, int BV>
__device__ __forceinline__ long long rows_col(const RowsLane &ln, int it) {
    return ln.col + static_cast<long long>(it) * RowsSpan<IT, BV>::G * EPV;
}

/* Row statistics from registers, by a block of WARPS warps that holds the row as IT vectors of
 * EPV elements per thread (bit it of valid set where vector it lies before K; rows_lane):
 * exact two-pass mean and variance (numerics 3; the squares accumulated with fmaf, one rounding
 * each, so these statistics can differ in the last bit from the one-warp row_stats of the
 * tiled entries, within the statistics' tolerance). Slots past K hold 0 and are skipped by the
 * variance pass. CENTER (LayerNorm): v is left holding x - mu, the value the normalization
 * starts from, so it is computed once. s_red: two reduction buffers, alternated by red. */
template <int IT, int NORM, int EPV, int WARPS, bool CENTER = false>
__device__ __forceinline__ void rows_stats(float (&v)[IT][EPV], long long K, float eps,
                                           float (*s_red)[WARPS], int &red, float &mu, float &rs,
                                           unsigned valid) {
    mu = 0.0f;
    if (NORM == QF_NORM_LAYERNORM) {
        float s = 0.0f;
#pragma unroll
        for (int it = 0; it < IT; it++)
#pragma unroll
            for (int j = 0; j < EPV; j++)
                s += v[it][j]; /* out-of-row slots hold 0 */
        mu = block_sum<WARPS>(s, s_red[red++ & 1]) / static_cast<float>(K);
    }
    float ss = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        if (valid >> it & 1u) {
#pragma unroll
            for (int j = 0; j < EPV; j++) {
                float d = v[it][j] - mu;
                ss = fmaf(d, d, ss);
                if (CENTER && NORM == QF_NORM_LAYERNORM)
                    v[it][j] = d; /* x - mu once, for the variance and for y */
            }
        }
    }
    const float var = block_sum<WARPS>(ss, s_red[red++ & 1]) / static_cast<float>(K);
    rs = 1.0f / sqrtf(var + eps);
}

/* Element k of gamma (+1 when ZCG, zero-centered) of dtype DT as fp32. */
template <int DT, int ZCG>
__device__ __forceinline__ float load_gamma(const void *gamma, long long k) {
    float g = load_elem<DT>(gamma, k);
    return ZCG ? g + 1.0f : g;
}

/* EPV elements of gamma (+1 when ZCG, zero-centered) of dtype DT from element k. */
template <int DT, int ZCG, int EPV>
__device__ __forceinline__ void load_gamma_vec(const void *gamma, long long k, float (&g)[EPV]) {
    load_n<DT, EPV>(gamma, k, g);
    if (ZCG)
#pragma unroll
        for (int j = 0; j < EPV; j++)
            g[j] += 1.0f;
}

/* The norm parameters a row's normalization reads (QF_NORM_PARAMS). */
template <int NORM>
constexpr int kNormParams = QF_NORM_PARAMS(NORM);

/* 1 when a rows entry of IT vectors of EPV elements per thread holds its gamma and beta in
 * dynamic shared memory (QF_ROWS_PARAM_SMEM bytes, which the runtime gives its launch). */
template <int IT, int NORM, int EPV, int THREADS>
constexpr bool kRowsParamsSmem = QF_ROWS_PARAM_SMEM(IT, 16 / EPV, NORM, THREADS) > 0;

/* Slot (it, h, q) of the calling thread in a rows entry's dynamic shared memory: floats 4h ..
 * 4h + 3 of its vector it of parameter q (0: gamma, + 1 when zero-centered; 1: beta), at float4
 * ((it * EPV / 4 + h) * params + q) * THREADS + tid, so that a warp reads 512 consecutive bytes.
 * Only the thread itself writes and reads its slots: no barrier. */
template <int NORM, int EPV, int THREADS>
__device__ __forceinline__ float4 *rows_param_slot(int it, int h, int q) {
    extern __shared__ __align__(16) float4 qf_rows_params[];
    return &qf_rows_params[((it * (EPV / 4) + h) * kNormParams<NORM> + q) * THREADS +
                           threadIdx.x];
}

/* Stores gamma (+1 when ZCG) and beta of dtype GDT at the thread's columns ln (vectors before K)
 * as fp32 in its slots (rows_param_slot), once per block, where kRowsParamsSmem. */
template <int IT, int NORM, int GDT, int ZCG, int EPV, int THREADS, int BV, typename P>
__device__ __forceinline__ void rows_params_store(const P &p, const RowsLane &ln) {
    if constexpr (kRowsParamsSmem<IT, NORM, EPV, THREADS>) {
#pragma unroll
        for (int it = 0; it < IT; it++) {
            if (!(ln.valid >> it & 1u))
                continue;
            float e[kNormParams<NORM>][EPV];
            const long long k = rows_col<IT, EPV, BV>(ln, it);
            load_gamma_vec<GDT, ZCG, EPV>(p.gamma, k, e[0]);
            if (NORM == QF_NORM_LAYERNORM)
                load_n<GDT, EPV>(p.beta, k, e[kNormParams<NORM> - 1]);
#pragma unroll
            for (int q = 0; q < kNormParams<NORM>; q++)
#pragma unroll
                for (int h = 0; h < EPV / 4; h++)
                    *rows_param_slot<NORM, EPV, THREADS>(it, h, q) =
                        make_float4(e[q][4 * h], e[q][4 * h + 1], e[q][4 * h + 2], e[q][4 * h + 3]);
        }
    }
}

/* gamma (+1 when ZCG) and beta of the thread's vector it at column k: from its shared-memory
 * slots where kRowsParamsSmem (rows_params_store ran), else from memory. */
template <int IT, int NORM, int GDT, int ZCG, int EPV, int THREADS, typename P>
__device__ __forceinline__ void rows_params(const P &p, int it, long long k, float (&g)[EPV],
                                            float (&b)[EPV]) {
    if constexpr (kRowsParamsSmem<IT, NORM, EPV, THREADS>) {
#pragma unroll
        for (int h = 0; h < EPV / 4; h++) {
            const float4 gv = *rows_param_slot<NORM, EPV, THREADS>(it, h, 0);
            g[4 * h] = gv.x, g[4 * h + 1] = gv.y, g[4 * h + 2] = gv.z, g[4 * h + 3] = gv.w;
            if (NORM == QF_NORM_LAYERNORM) {
                const float4 bv = *rows_param_slot<NORM, EPV, THREADS>(it, h, 1);
                b[4 * h] = bv.x, b[4 * h + 1] = bv.y, b[4 * h + 2] = bv.z, b[4 * h + 3] = bv.w;
            }
        }
    } else {
        if (NORM != QF_NORM_NONE)
            load_gamma_vec<GDT, ZCG, EPV>(p.gamma, k, g);
        if (NORM == QF_NORM_LAYERNORM)
            load_n<GDT, EPV>(p.beta, k, b);
    }
}

/* Phase 1 of a tiled quantizer: mu and rsigma of the TILE_M rows from m0 (those below p.M), one
 * warp per row (row_stats), into s_mu/s_rsigma and the outputs p.mu (LayerNorm) and p.rsigma,
 * then a barrier; nothing without a norm. P: a params block with x, M, K, eps, mu, rsigma. */
template <int NORM, int DT, int TILE_M, int WARPS, typename P>
__device__ __forceinline__ void tile_stats(const P &p, long long m0, float *s_mu,
                                           float *s_rsigma) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (NORM != QF_NORM_NONE) {
        for (int r = warp; r < TILE_M; r += WARPS) {
            if (m0 + r >= p.M)
                continue;
            float mu, rs;
            row_stats<NORM, DT>(p.x, m0 + r, p.K, p.eps, &mu, &rs);
            if (lane == 0) {
                s_mu[r] = mu;
                s_rsigma[r] = rs;
                if (NORM == QF_NORM_LAYERNORM)
                    p.mu[m0 + r] = mu;
                p.rsigma[m0 + r] = rs;
            }
        }
        __syncthreads();
    }
}

/* Columns k0 .. k0 + IT THREADS EPV - 1 of row m of the input (p.x of dtype DT through the
 * activation prologue, p.K elements; src_n) into the registers of a block of THREADS threads, as
 * rows_stats holds them: vector it of EPV elements at rows_col(ln, it), 0 past K. Without a
 * norm a rows entry walks the row in such chunks, so any K runs. */
template <int IT, int DT, int EPV, int BV, typename P>
__device__ __forceinline__ void rows_load(const P &p, long long m, const RowsLane &ln,
                                          float (&v)[IT][EPV]) {
#pragma unroll
    for (int it = 0; it < IT; it++) {
        if (ln.valid >> it & 1u)
            src_n<DT, EPV>(p, m, rows_col<IT, EPV, BV>(ln, it), v[it]);
        else
#pragma unroll
            for (int j = 0; j < EPV; j++)
                v[it][j] = 0.0f;
    }
}

/* Where element (m, k) of x ([M, K] of dtype DT) lies. */
template <int DT>
__device__ __forceinline__ const unsigned char *rows_at(const void *x, long long m, long long K,
                                                        long long k) {
    return static_cast<const unsigned char *>(x) + (m * K + k) * kElemSize<DT>;
}

/* The 16-byte vectors of row m of x ([M, K] of dtype DT, no prologue) that rows_load would
 * convert, as they are in memory (vectors past K untouched): a rows walk with a norm loads the
 * next row's while it works on this one (with L2's evict_last priority: ldg_evict_last). */
template <int IT, int DT, int EPV, int BV>
__device__ __forceinline__ void rows_load_raw(const void *x, long long m, long long K,
                                              const RowsLane &ln, uint4 (&raw)[IT]) {
    const uint4 *row = reinterpret_cast<const uint4 *>(rows_at<DT>(x, m, K, ln.col));
#pragma unroll
    for (int it = 0; it < IT; it++)
        if (ln.valid >> it & 1u)
            raw[it] = ldg_evict_last(row + it * RowsSpan<IT, BV>::G);
}

/* Row m of x ([M, K] of dtype DT, 16-byte aligned, K * sizeof(DT) a multiple of 16: what the
 * rows entries require) into L2, by thread 0 of the block and only where m < M: a rows walk that
 * reduces a row's statistics over the block and holds nothing of the next row in registers asks
 * for that row here, so that its loads find it in L2 (rows at K = 12288 1.04-1.20x on the H200;
 * docs/bench.md, "The next row into L2"). Walks that load the next row into registers do not
 * ask: there, asking for rows further ahead measured 0.78-1.07x. */
template <int DT, typename P>
__device__ __forceinline__ void rows_prefetch(const P &p, long long m) {
    if (threadIdx.x == 0 && m < p.M)
        prefetch_l2_bulk(rows_at<DT>(p.x, m, p.K, 0),
                         static_cast<unsigned>(p.K * kElemSize<DT>));
}

/* The rows of a rows walk with a norm (rows_walk): each row one chunk, the thread's vectors at
 * the columns ln0 gives. FULL: every vector of every thread lies before K (K = IT THREADS EPV),
 * so the validity tests fold away; the caller decides it for the whole block (the shuffles and
 * barriers of both paths must be reached by every thread of it), and at up to 4 vectors per
 * thread (at 8, ptxas gave the branch-free path more registers than the entries could keep).
 * KEEP (rows_walk). */
template <int IT, int DT, int GDT, int ZCG, int NORM, int EPV, int THREADS, int WARPS, int BV,
          bool EMIT, bool KEEP, bool FULL, typename P, typename Emit>
__device__ __forceinline__ void rows_walk_norm(const P &p, Emit emit, const RowsLane &ln0,
                                               float (*s_red)[WARPS]) {
    static_assert(NORM == QF_NORM_NONE || !kHasPrologue, "an activation prologue has no norm");
    const long long K = p.K;
    if (EMIT)
        rows_params_store<IT, NORM, GDT, ZCG, EPV, THREADS, BV>(p, ln0);
    int red = 0;
    /* the next row's vectors loaded ahead, up to 4 per thread (8 would cost a block per SM) */
    constexpr bool kAhead = IT <= 4;
    uint4 raw[IT];
    long long m = blockIdx.x;
    if (kAhead && m < p.M)
        rows_load_raw<IT, DT, EPV, BV>(p.x, m, K, ln0, raw);
    for (; m < p.M; m += gridDim.x) {
        /* the same columns in every row, but derived again in each: kept live across the
         * loop, their addresses would take registers the row needs */
        RowsLane ln = ln0;
        asm volatile("" : "+l"(ln.col));
        if (FULL)
            ln.valid = (1u << IT) - 1u;
        float v[IT][EPV];
        if (kAhead) {
#pragma unroll
            for (int it = 0; it < IT; it++) {
                if (ln.valid >> it & 1u) {
                    unpack16<DT, EPV>(raw[it], v[it]);
                    if (KEEP && NORM == QF_NORM_LAYERNORM)
#pragma unroll
                        for (int j = 0; j < EPV; j++)
                            asm volatile("" : "+f"(v[it][j])); /* opaque: not rebuilt */
                } else
#pragma unroll
                    for (int j = 0; j < EPV; j++)
                        v[it][j] = 0.0f;
            }
        } else {
            rows_load<IT, DT, EPV, BV>(p, m, ln, v);
        }
        if (kAhead && m + gridDim.x < p.M)
            rows_load_raw<IT, DT, EPV, BV>(p.x, m + gridDim.x, K, ln, raw);
        if (!kAhead)
            rows_prefetch<DT>(p, m + gridDim.x);
        float mu, rs;
        rows_stats<IT, NORM, EPV, WARPS, true>(v, K, p.eps, s_red, red, mu, rs, ln.valid);
        if (threadIdx.x == 0) {
            if (NORM == QF_NORM_LAYERNORM)
                p.mu[m] = mu;
            p.rsigma[m] = rs;
        }
        if (EMIT) /* LayerNorm: v holds x - mu (rows_stats' CENTER), so emit gets mu = 0 */
            emit(v, m, ln, 0.0f, rs);
    }
}

/* The walk of a rows entry of a block quantizer (numerics 3): rows m = blockIdx.x, + gridDim.x,
 * ...; each row in chunks of IT THREADS EPV elements held in registers in spans of BV vectors
 * (rows_lane, rows_vec; a row with a norm is one chunk, rows_walk_norm, with gamma and beta of
 * dtype GDT, + 1 when ZCG, in shared memory where kRowsParamsSmem), its statistics
 * (rows_stats, stored in p.mu / p.rsigma by thread 0), then emit(v, m, ln, 0, rs) with the
 * thread's IT vectors (with LayerNorm already x - mu: normalize(v, 0, rs, ...) is then the same
 * value) and their columns (RowsLane), called by every thread (some of its vectors may lie past
 * K: emit's shuffles see whole warps). With a norm and up to 4 vectors per thread, the next
 * row's vectors are loaded (rows_load_raw) before this row's statistics, so that their loads
 * overlap this row's work; at 8 vectors, where nothing is loaded ahead, the next row is asked of
 * L2 (rows_prefetch). EMIT false: the statistics only. KEEP (LayerNorm, where those vectors
 * are loaded ahead): x - mu is kept in registers from the statistics to emit. Without it ptxas,
 * short of registers while the next row's vectors are in flight, unpacks x and subtracts mu a
 * second time from the raw vectors, which it copies aside (SASS of fp8_block's `_rows2`, NVRTC
 * sm_90: 363 instructions per row, 330 with KEEP); where the kept values do not fit the
 * entry's registers they spill, which costs more than the rebuild (fp8_block's `_rows4` on
 * bf16 x: 0.84x), so each template decides (docs/bench.md, "x - mu kept in the rows walk"). */
template <int IT, int DT, int GDT, int ZCG, int NORM, int EPV, int THREADS, int WARPS, int BV,
          bool EMIT, bool KEEP, typename P, typename Emit>
__device__ __forceinline__ void rows_walk(const P &p, Emit emit) {
    __shared__ float s_red[2][WARPS];
    const int tid = threadIdx.x;
    const long long K = p.K;
    if constexpr (NORM != QF_NORM_NONE) {
        const RowsLane ln0 = rows_lane<IT, EPV, THREADS, BV>(K, 0, tid);
        if (IT <= 4 && K == static_cast<long long>(IT) * THREADS * EPV)
            rows_walk_norm<IT, DT, GDT, ZCG, NORM, EPV, THREADS, WARPS, BV, EMIT, KEEP, true>(
                p, emit, ln0, s_red);
        else
            rows_walk_norm<IT, DT, GDT, ZCG, NORM, EPV, THREADS, WARPS, BV, EMIT, KEEP, false>(
                p, emit, ln0, s_red);
    } else {
        constexpr long long kChunk = static_cast<long long>(IT) * THREADS * EPV;
        for (long long m = blockIdx.x; m < p.M; m += gridDim.x)
            for (long long k0 = 0; k0 < K; k0 += kChunk) {
                const RowsLane ln = rows_lane<IT, EPV, THREADS, BV>(K, k0, tid);
                float v[IT][EPV];
                rows_load<IT, DT, EPV, BV>(p, m, ln, v);
                if (EMIT)
                    emit(v, m, ln, 0.0f, 1.0f);
            }
    }
}

/* y = the normalized values of the EPV register-held elements v (gamma g and beta b, as
 * rows_params gives them), in the reference's order; returns amax merged over y (FAST: with
 * amax_merge_fast). y may be v. */
template <int NORM, int EPV, bool FAST = false>
__device__ __forceinline__ float normalize_vec(const float (&v)[EPV], float mu, float rs,
                                               const float (&g)[EPV], const float (&b)[EPV],
                                               float (&y)[EPV], float amax) {
#pragma unroll
    for (int j = 0; j < EPV; j++) {
        y[j] = normalize<NORM>(v[j], mu, rs, NORM != QF_NORM_NONE ? g[j] : 1.0f,
                               NORM == QF_NORM_LAYERNORM ? b[j] : 0.0f);
        amax = FAST ? amax_merge_fast(amax, y[j]) : amax_merge(amax, y[j]);
    }
    return amax;
}

/* The quantization blocks of the thread's IT register vectors in a rows walk (rows_vec, blocks of
 * BV vectors; columns and validity from ln): each vector normalized in place (normalize_vec;
 * zeros past K), and the amax of each of the thread's NB blocks (RowsSpan; vector it lies in
 * block it / V), merged over the block's L lanes with shuffles. The amaxes are exact or NaN
 * (amax_merge_fast: a NaN's payload is not kept; the block scales only ask whether they are
 * NaN). Every lane of the warp must call it. */
template <int NORM, int GDT, int ZCG, int EPV, int IT, int BV, int THREADS, typename P>
__device__ __forceinline__ void rows_block_amax(const P &p, const RowsLane &ln,
                                                float (&v)[IT][EPV], float mu, float rs,
                                                float (&amax)[RowsSpan<IT, BV>::NB]) {
    constexpr int NB = RowsSpan<IT, BV>::NB, L = RowsSpan<IT, BV>::L, V = RowsSpan<IT, BV>::V;
#pragma unroll
    for (int b = 0; b < NB; b++)
        amax[b] = 0.0f;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        if (ln.valid >> it & 1u) {
            float g[EPV], b[EPV];
            rows_params<IT, NORM, GDT, ZCG, EPV, THREADS>(p, it, rows_col<IT, EPV, BV>(ln, it), g,
                                                          b);
            amax[it / V] =
                normalize_vec<NORM, EPV, true>(v[it], mu, rs, g, b, v[it], amax[it / V]);
        } else {
#pragma unroll
            for (int j = 0; j < EPV; j++)
                v[it][j] = 0.0f;
        }
    }
#pragma unroll
    for (int b = 0; b < NB; b++)
#pragma unroll
        for (int o = 1; o < L; o <<= 1)
            amax[b] = amax_merge_fast(amax[b], __shfl_xor_sync(0xffffffffu, amax[b], o));
}

/* Where this thread works in the columnwise tile at tile row tm and tile column tk (TILE x TILE
 * tiles): the tile's first row m0 and column k0, the thread's first column c of EPV and its first
 * row r0 (CHUNKS threads per tile row). */
struct ColsTile {
    long long m0, k0;
    int c, r0;
};

template <int TILE, int EPV, int CHUNKS>
__device__ __forceinline__ ColsTile cols_tile_at(long long tm, long long tk) {
    return {tm * TILE, tk * TILE, static_cast<int>((threadIdx.x % CHUNKS) * EPV),
            static_cast<int>(threadIdx.x / CHUNKS)};
}

/* The same for tile t, row-major over [M/TILE, K/TILE]: tile row t / (K/TILE), column
 * t % (K/TILE). */
template <int TILE, int EPV, int CHUNKS>
__device__ __forceinline__ ColsTile cols_tile(long long K, long long t) {
    const long long tiles_k = K / TILE;
    return cols_tile_at<TILE, EPV, CHUNKS>(t / tiles_k, t % tiles_k);
}

/* mu and rsigma of row m as a rows entry wrote them (0 and 1 where the norm has none). */
template <int NORM, typename P>
__device__ __forceinline__ void stats_of_row(const P &p, long long m, float &mu, float &rs) {
    mu = NORM == QF_NORM_LAYERNORM ? p.mu[m] : 0.0f;
    rs = NORM != QF_NORM_NONE ? p.rsigma[m] : 1.0f;
}

/* The normalized x vectors of a columnwise 64-column tile: PASSES vectors of EPV elements (x of
 * dtype DT through the loader ld and the activation prologue, load_src_from) per thread, rows
 * r0 + i * ROWS_PER_PASS from m0, columns k0 + c ..; gamma (+1 when ZCG) and beta of dtype
 * GDT, mu and rsigma as the rows entry wrote them (stats_of_row). */
template <int NORM, int DT, int GDT, int ZCG, int EPV, int PASSES, int ROWS_PER_PASS, typename P,
          typename L>
__device__ __forceinline__ void cols_load(L &ld, const P &p, long long m0, long long k0, int c,
                                          int r0, float (&y)[PASSES][EPV]) {
    float g[EPV], b[EPV];
#pragma unroll
    for (int i = 0; i < PASSES; i++)
        load_src_from<DT, EPV>(ld, p.x, p.da, p.da_fp32, m0 + r0 + i * ROWS_PER_PASS, p.K,
                               k0 + c, y[i]);
    if (NORM != QF_NORM_NONE)
        load_gamma_vec<GDT, ZCG, EPV>(p.gamma, k0 + c, g);
    if (NORM == QF_NORM_LAYERNORM)
        load_n<GDT, EPV>(p.beta, k0 + c, b);
#pragma unroll
    for (int i = 0; i < PASSES; i++) {
        float mu, rs;
        stats_of_row<NORM>(p, m0 + r0 + i * ROWS_PER_PASS, mu, rs);
#pragma unroll
        for (int j = 0; j < EPV; j++)
            y[i][j] = normalize<NORM>(y[i][j], mu, rs, NORM != QF_NORM_NONE ? g[j] : 1.0f,
                                      NORM == QF_NORM_LAYERNORM ? b[j] : 0.0f);
    }
}

} // namespace

#endif /* QF_DEV_NORM_CUH */
