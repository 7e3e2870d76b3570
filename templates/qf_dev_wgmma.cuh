/* qf_dev_wgmma.cuh: Hopper warpgroup MMA (wgmma, sm_90a) for the block-scaled GEMM templates:
 * the shared-memory matrix descriptor of a K-major bf16 tile with the 128-byte swizzle, the
 * m64n128k16 bf16 MMA with fp32 accumulators, its fences, and the async-proxy fence that makes
 * generic shared-memory stores visible to wgmma. An in-memory NVRTC header; see qf_dev_load.cuh.
 *
 * Layout of a K-major bf16 tile (rows of 64 elements = 128 bytes, 1024-byte aligned): 16-byte
 * chunk c of row r lives at r * 128 + ((c ^ (r % 8)) * 16), so 8 rows form one 1024-byte swizzle
 * atom. Its descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4,
 * bits 16-29 leading byte offset >> 4 (unused for a swizzled K-major tile: 1), bits 32-45 stride
 * byte offset >> 4 (1024: from one 8-row atom to the next), bits 62-63 the swizzle mode (1: 128
 * bytes). The k-th 16-element slice of the 64 is the same descriptor with the start 32 * k bytes
 * further (the hardware applies the swizzle to the full address). */
#ifndef QF_DEV_WGMMA_CUH
#define QF_DEV_WGMMA_CUH

namespace {

/* Byte offset of 16-byte chunk c (0..7) of row r in a 128-byte-swizzled K-major tile. */
__device__ __forceinline__ unsigned sw128_offset(int r, int c) {
    return static_cast<unsigned>(r * 128 + ((c ^ (r & 7)) << 4));
}

/* The descriptor of the tile at shared address smem (1024-byte aligned), advanced by k_bytes
 * along K (a multiple of 32 below 128). */
__device__ __forceinline__ unsigned long long sw128_desc(unsigned smem, unsigned k_bytes) {
    const unsigned long long start = ((smem + k_bytes) & 0x3FFFFu) >> 4;
    return start | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

/* Generic-proxy shared-memory stores before this are visible to the async proxy (wgmma). */
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Keeps the compiler from moving accesses of the accumulators across an MMA batch that is still
 * in flight (the asm operands alone do not order them against wgmma's asynchronous writes). */
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* d[64] (this thread's fp32 accumulators of a 64 x 128 tile) += A B^T over one 16-element
 * k-slice: A 64 x 16 and B 128 x 16 bf16, both K-major in shared memory (descriptors da, db).
 * accumulate = 0 starts from zero. Accumulator d[4 j + i] (j = 0..15) is row
 * 16 * warp + lane / 4 + 8 * (i / 2), column 8 j + 2 * (lane % 4) + i % 2 of the tile. */
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], unsigned long long da,
                                                      unsigned long long db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),
          "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(accumulate));
}

} // namespace

#endif /* QF_DEV_WGMMA_CUH */
