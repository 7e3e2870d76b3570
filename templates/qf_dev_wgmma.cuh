/* qf_dev_wgmma.cuh: Hopper's asynchronous primitives (sm_90a) for the block-scaled GEMM templates:
 * the shared-memory matrix descriptor of a K-major 16-bit tile with the 128-byte swizzle, the
 * m64n256k16 warpgroup MMA with A from registers (bf16 or f16 operands, fp32 accumulators) and
 * its fences, the
 * async-proxy fence that makes generic shared-memory stores visible to wgmma, mbarriers and 2-D
 * TMA loads. An in-memory NVRTC header; see qf_dev_load.cuh.
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

/* The operands of one m64n256k16 wgmma with A from registers: the 128 accumulators (%0..%127),
 * A's four registers (%128..%131), B's descriptor (%132) and the accumulate flag (%133, as the
 * predicate p, wgmma's scale-d); then imm-scale-a and imm-scale-b 1 (no negation) and
 * imm-trans-b 0 (B K-major). */
#define QF_D4(i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define QF_D16(i) QF_D4(i), QF_D4((i) + 4), QF_D4((i) + 8), QF_D4((i) + 12)
#define QF_D64(i) QF_D16(i), QF_D16((i) + 16), QF_D16((i) + 32), QF_D16((i) + 48)
#define QF_WGMMA_N256_ACC                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "      \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "       \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "       \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, "       \
    "%70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, "       \
    "%87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, "         \
    "%103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, "        \
    "%117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define QF_WGMMA_N256_RS_OPERANDS                                                                 \
    QF_WGMMA_N256_ACC ", {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"                      \
    : QF_D64(0), QF_D64(64)                                                                       \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate)

/* d[128] (this thread's fp32 accumulators of a 64 x 256 tile) += A B^T over one 16-element
 * k-slice: A 64 x 16 from registers, B 256 x 16 K-major in shared memory (descriptor db), bf16
 * (f16 when F16). accumulate = 0 starts from zero. a[4] is this thread's fragment of A (bf16 or
 * f16 pairs): a[0] row g, columns 2 q, 2 q + 1; a[1] row g + 8, the same columns; a[2] and a[3]
 * the same rows at columns 2 q + 8, 2 q + 9 (g = 16 * warp + lane / 4, q = lane % 4).
 * Accumulator d[4 j + i] (j = 0..31) is row 16 * warp + lane / 4 + 8 * (i / 2), column
 * 8 j + 2 * (lane % 4) + i % 2 of the tile (PTX ISA, "Register Fragments and Shared Memory Matrix
 * Layouts", wgmma .m64nNk16 A and D). The registers of a are read asynchronously: they must not
 * change until a wgmma_wait covers this MMA. */
template <bool F16>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const unsigned (&a)[4],
                                                    unsigned long long db, int accumulate) {
#define QF_WGMMA_N256_RS(T)                                                                       \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                 \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " "
    if constexpr (F16)
        asm volatile(QF_WGMMA_N256_RS("f16") QF_WGMMA_N256_RS_OPERANDS);
    else
        asm volatile(QF_WGMMA_N256_RS("bf16") QF_WGMMA_N256_RS_OPERANDS);
#undef QF_WGMMA_N256_RS
}

/* ==================================================================== mbarriers, TMA */

/* An mbarrier (8 bytes of shared memory at shared address bar) expecting `count` arrivals per
 * phase. Call from one thread, then fence_barrier_init and a block barrier before any use. */
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* Makes mbarrier initializations visible to the async proxy (TMA). */
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrival (release: this thread's earlier memory accesses happen before the phase ends). */
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* One arrival that also expects `bytes` more bytes of TMA transactions in this phase. */
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

/* Waits (acquire) until the phase of parity `parity` has completed. A fresh barrier is in phase
 * 0, so waiting for parity 1 returns at once: producers start on the "empty" barriers that way. */
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* TMA: the box at coordinates (x, y) (x: the inner dimension, in elements) of the 2-D tensor of
 * descriptor `desc` (a generic address of a __grid_constant__ parameter) into shared memory at
 * dst, completing `bar`'s transaction bytes. Elements past the tensor's edges are zero. */
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void *desc, unsigned bar, int x,
                                            int y) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"(desc), "r"(bar), "r"(x), "r"(y)
                 : "memory");
}

} // namespace

#endif /* QF_DEV_WGMMA_CUH */
