/* qf_dev_mx_wgmma.cuh: the MXFP8 GEMM on bf16 warpgroup MMAs, the body of templates/
 * sm90_mxfp8_gemm.cu when it is compiled for sm_90a (Hopper's wgmma). An in-memory NVRTC
 * header; see qf_dev_load.cuh.
 *
 * y[M, N] = A[M, K] B[N, K]^T (+ bias[N]), y bf16 (round to nearest even), A and B E4M3 (or
 * E5M2) row-major and K-major with one E8M0 scale per 32 elements along K in the compact padded
 * scale matrices of numerics 2.3 (qf_mx_gemm_params). The oracle is qf_gemm_mxfp8_ref.
 *
 * Numerics (numerics 7): each element is dequantized to bf16 as x * 2^(b - 127), exact for every
 * b in [10, 246] (outside, bf16 rounding of the product applies), and the tensor cores sum the
 * products in fp32.
 *
 * Structure: one block of 256 threads (two warpgroups) per 128 x 128 tile of y, k-tiles of 64.
 * - Each thread copies two 16-byte chunks of A and two of B per k-tile into a raw FP8 stage with
 *   cp.async (zero-filled past M, N or K), two stages deep.
 * - Each thread dequantizes the chunks it copied (its own cp.async group is complete after its
 *   wait) into the bf16 tile of that k-tile, K-major with the 128-byte swizzle that the wgmma
 *   descriptors read (qf_dev_wgmma.cuh), after a barrier that follows both warpgroups' waits for
 *   the MMAs that read that tile two k-tiles ago; two bf16 tiles, so that the dequantization of
 *   k-tile kt + 1 overlaps the MMAs of kt.
 * - Warpgroup g issues four m64n128k16 MMAs per k-tile on rows 64 g .. 64 g + 63 of A and all of
 *   B, then waits until at most one MMA group (this k-tile's) is in flight, which frees the other
 *   bf16 tile.
 * - Epilogue: acc + bias in fp32, one rounding to bf16, stores of bf16 pairs.
 * Scales are read only for real rows (< M, < N) and real blocks (< K/32): padding is never read.
 * Shared memory: QF_MX_GEMM_SM90A_SMEM_BYTES (qf_formats.h). */
#ifndef QF_DEV_MX_WGMMA_CUH
#define QF_DEV_MX_WGMMA_CUH

#include "qf_dev_dequant.cuh"
#include "qf_dev_mma.cuh"
#include "qf_dev_wgmma.cuh"
#include "qf_formats.h"

namespace {
namespace mxw {

constexpr int kThreads = 256, kTileM = 128, kTileN = 128, kTileK = 64;
constexpr unsigned kBf16Tile = kTileM * kTileK * 2; /* 16 KiB: one bf16 tile of A or B */
constexpr unsigned kRawTile = kTileM * kTileK;      /* 8 KiB: one FP8 tile of A or B */
/* Shared memory: bf16 A[2], bf16 B[2] (1024-byte aligned: the swizzle atom), raw A[2], raw B[2];
 * the launch asks for 1024 bytes more, to align the dynamic allocation. */
constexpr unsigned kSmemBytes = 4 * kBf16Tile + 4 * kRawTile + 1024;
static_assert(kSmemBytes == QF_MX_GEMM_SM90A_SMEM_BYTES, "qf_formats.h's launch size");
static_assert(kThreads * 2 * 16 == kRawTile, "two 16-byte chunks per thread per operand");

/* 16 FP8 values (raw, 16 bytes at shared address `raw`) times scale s -> 16 bf16 in two 16-byte
 * chunks at dst0 and dst1 (shared addresses). */
template <int DT>
__device__ __forceinline__ void dequant16(const unsigned char *raw, float s, unsigned char *dst0,
                                          unsigned char *dst1) {
    const uint4 q = *reinterpret_cast<const uint4 *>(raw);
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
    unsigned out[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float a, b, c, d;
        fp8x2_to_float2<DT>(w[i], a, b);
        fp8x2_to_float2<DT>(w[i] >> 16, c, d);
        out[2 * i] = float2_to_bf16x2(a * s, b * s);
        out[2 * i + 1] = float2_to_bf16x2(c * s, d * s);
    }
    *reinterpret_cast<uint4 *>(dst0) = make_uint4(out[0], out[1], out[2], out[3]);
    *reinterpret_cast<uint4 *>(dst1) = make_uint4(out[4], out[5], out[6], out[7]);
}

/* One operand's part of this thread: rows r0 and r0 + 64 of the tile, 16-byte chunk c. */
struct Chunks {
    int r0, c;
};

/* cp.async of this thread's two chunks of k-tile kt of an operand (rows row0.., `rows` real
 * ones, K bytes per row) into raw (shared address). */
__device__ __forceinline__ void load_chunks(unsigned raw, const unsigned char *src, long long row0,
                                            long long rows, long long K, long long kt, Chunks t) {
    const long long kb = kt * kTileK + 16 * t.c;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = t.r0 + 64 * j;
        const bool ok = row0 + r < rows && kb < K;
        cp_async16(raw + static_cast<unsigned>(r * kTileK + 16 * t.c),
                   ok ? src + (row0 + r) * K + kb : src, ok ? 16 : 0);
    }
}

/* Dequantizes this thread's two chunks of k-tile kt of an operand from raw into the swizzled
 * bf16 tile: each chunk is 16 elements of one 32-element scale block (scale row stride
 * scale_cols). Rows past `rows` and blocks past K/32 are zero data: their scale is taken as 1
 * without reading the padding. */
template <int DT>
__device__ __forceinline__ void dequant_chunks(const unsigned char *raw, unsigned char *tile,
                                               const unsigned char *scale, long long scale_cols,
                                               long long row0, long long rows, long long K,
                                               long long kt, Chunks t) {
    const long long kblock = (kt * kTileK + 16 * t.c) / QF_MX_BLOCK;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int r = t.r0 + 64 * j;
        const bool real = row0 + r < rows && kblock < K / QF_MX_BLOCK;
        const float s = real ? e8m0_value(__ldg(scale + (row0 + r) * scale_cols + kblock)) : 1.0f;
        dequant16<DT>(raw + r * kTileK + 16 * t.c, s, tile + sw128_offset(r, 2 * t.c),
                      tile + sw128_offset(r, 2 * t.c + 1));
    }
}

/* y[row, col..col+1] = bf16(acc + bias), as far as the columns exist. */
__device__ __forceinline__ void store_pair(const qf_mx_gemm_params &p, long long row,
                                           long long col, float a0, float a1) {
    if (row >= p.M || col >= p.N)
        return;
    if (p.bias) {
        a0 += __uint_as_float(static_cast<unsigned>(p.bias[col]) << 16);
        if (col + 1 < p.N)
            a1 += __uint_as_float(static_cast<unsigned>(p.bias[col + 1]) << 16);
    }
    unsigned short *dst = p.y + row * p.N + col;
    if (col + 1 < p.N && (reinterpret_cast<unsigned long long>(dst) & 3u) == 0) {
        *reinterpret_cast<unsigned *>(dst) = float2_to_bf16x2(a0, a1);
    } else {
        dst[0] = to_bf16(a0);
        if (col + 1 < p.N)
            dst[1] = to_bf16(a1);
    }
}

/* The GEMM of this block (256 threads), A of dtype ADT and B of BDT. */
template <int ADT, int BDT>
__device__ __forceinline__ void gemm(const qf_mx_gemm_params &p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char *const bf_a = smem, *const bf_b = smem + 2 * kBf16Tile;
    unsigned char *const raw_a = smem + 4 * kBf16Tile, *const raw_b = raw_a + 2 * kRawTile;
    long long m0, n0;
    tile_origin<kTileM, kTileN, 8>(p, &m0, &n0);
    const int tid = threadIdx.x, wg = tid / 128;
    const Chunks t = {tid / 4, tid % 4};
    const long long KT = (p.K + kTileK - 1) / kTileK;
    for (int s = 0; s < 2; s++) {
        if (s < KT) {
            load_chunks(smem_u32(raw_a + s * kRawTile), p.a, m0, p.M, p.K, s, t);
            load_chunks(smem_u32(raw_b + s * kRawTile), p.b, n0, p.N, p.K, s, t);
        }
        cp_async_commit();
    }
    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i] = 0.0f;
    for (long long kt = 0; kt < KT; kt++) {
        const int s = static_cast<int>(kt & 1);
        cp_async_wait<1>(); /* this thread's copies of k-tile kt */
        __syncthreads(); /* both warpgroups' MMAs of kt - 2 are done: bf16 tiles s are free */
        dequant_chunks<ADT>(raw_a + s * kRawTile, bf_a + s * kBf16Tile, p.a_scale,
                                p.scale_cols, m0, p.M, p.K, kt, t);
        dequant_chunks<BDT>(raw_b + s * kRawTile, bf_b + s * kBf16Tile, p.b_scale,
                                p.scale_cols, n0, p.N, p.K, kt, t);
        fence_proxy_async_smem();
        __syncthreads(); /* bf16 tiles of kt complete; raw stage s free */
        if (kt + 2 < KT) {
            load_chunks(smem_u32(raw_a + s * kRawTile), p.a, m0, p.M, p.K, kt + 2, t);
            load_chunks(smem_u32(raw_b + s * kRawTile), p.b, n0, p.N, p.K, kt + 2, t);
        }
        cp_async_commit();
        const unsigned a_tile = smem_u32(bf_a + s * kBf16Tile) + wg * 64 * 128;
        const unsigned b_tile = smem_u32(bf_b + s * kBf16Tile);
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kTileK / 16; k++)
            wgmma_m64n128k16_bf16(acc, sw128_desc(a_tile, 32 * k), sw128_desc(b_tile, 32 * k),
                                  kt > 0 || k > 0);
        wgmma_commit();
        wgmma_fence_operands(acc);
        wgmma_wait<1>(); /* k-tile kt - 1's MMAs are done: its bf16 tiles may be overwritten */
    }
    wgmma_wait<0>();
    wgmma_fence_operands(acc);
    const int w = (tid % 128) / 32, lane = tid % 32;
    const long long row = m0 + wg * 64 + 16 * w + lane / 4;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const long long col = n0 + 8 * j + 2 * (lane % 4);
        store_pair(p, row, col, acc[4 * j], acc[4 * j + 1]);
        store_pair(p, row + 8, col, acc[4 * j + 2], acc[4 * j + 3]);
    }
}

} // namespace mxw
} // namespace

#endif /* QF_DEV_MX_WGMMA_CUH */
