/* qf_dev_load.cuh: element loads and stores shared by the quantizer templates: bf16/fp16/fp32
 * elements and vectors as fp32, asynchronous copies to shared memory, ragged 4-byte stores, the
 * swizzled scale layout (numerics 2.3).
 *
 * An in-memory NVRTC header (like qf_formats.h): qfuse-gen embeds it in the registry and every
 * kernel's fusion key hashes it. It holds no placeholder: what varies per variant comes in as a
 * template parameter. NOTES: the helpers sit in an anonymous namespace, as they did inside each
 * template, so every kernel keeps them at internal linkage (one NVRTC program per kernel). */
#ifndef QF_DEV_LOAD_CUH
#define QF_DEV_LOAD_CUH

#include "qf_formats.h"

namespace {

/* A bf16 or fp16 bit pattern (the low 16 bits of h, the rest 0) as fp32 (exact). */
template <int DT>
__device__ __forceinline__ float half_bits_to_float(unsigned h) {
    if (DT == QF_DTYPE_BF16)
        return __uint_as_float(h << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
    return f;
}

/* Element i of a bf16/fp16/fp32 array as fp32 (exact). */
template <int DT>
__device__ __forceinline__ float load_elem(const void *p, long long i) {
    if (DT == QF_DTYPE_FP32)
        return __ldg(static_cast<const float *>(p) + i);
    unsigned short h = __ldg(static_cast<const unsigned short *>(p) + i);
    if (DT == QF_DTYPE_BF16)
        return __uint_as_float(static_cast<unsigned>(h) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* The bf16 or fp16 bits of v, rounded to nearest even. */
template <int DT>
__device__ __forceinline__ unsigned short float_to_half_bits(float v) {
    unsigned short h;
    if (DT == QF_DTYPE_BF16)
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
    else
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}

/* Stores v as element i of a bf16/fp16/fp32 array (rounded to nearest even). */
template <int DT>
__device__ __forceinline__ void store_elem(void *out, long long i, float v) {
    if (DT == QF_DTYPE_FP32)
        static_cast<float *>(out)[i] = v;
    else
        static_cast<unsigned short *>(out)[i] = float_to_half_bits<DT>(v);
}

/* Stores elements i..i+N-1 (N = 1 or 8) of a bf16/fp16/fp32 array, each rounded as store_elem;
 * for N = 8, i is a multiple of 8 and the array 16-byte aligned: one 16-byte store (16-bit
 * types) or two (fp32). */
template <int DT, int N>
__device__ __forceinline__ void store_n(void *out, long long i, const float (&v)[N]) {
    static_assert(N == 1 || N == 8, "1 or 8 elements");
    if constexpr (N == 1) {
        store_elem<DT>(out, i, v[0]);
    } else if constexpr (DT == QF_DTYPE_FP32) {
        float4 *q = reinterpret_cast<float4 *>(static_cast<float *>(out) + i);
        q[0] = make_float4(v[0], v[1], v[2], v[3]);
        q[1] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
        unsigned w[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            w[j] = static_cast<unsigned>(float_to_half_bits<DT>(v[2 * j])) |
                   static_cast<unsigned>(float_to_half_bits<DT>(v[2 * j + 1])) << 16;
        *reinterpret_cast<uint4 *>(static_cast<unsigned short *>(out) + i) =
            make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* Bytes per element of dtype DT (bf16, fp16 or fp32). */
template <int DT>
constexpr int kElemSize = DT == QF_DTYPE_FP32 ? 4 : 2;

/* The 16 bytes of raw as 16 / sizeof(DT) elements of dtype DT in fp32 (exact). */
template <int DT, int N>
__device__ __forceinline__ void unpack16(const uint4 &raw, float (&v)[N]) {
    static_assert(N * kElemSize<DT> == 16, "16 bytes");
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < N; j++)
        v[j] = DT == QF_DTYPE_FP32 ? __uint_as_float(w[j])
                                   : half_bits_to_float<DT>((w[j / 2] >> (16 * (j % 2))) & 0xFFFFu);
}

/* Elements i..i+N-1 (N = 1, 4 or 8) of a bf16/fp16/fp32 array as fp32 (exact); for N > 1, i is
 * a multiple of N and the array is 16-byte aligned, so the load is N/4 16-byte vectors (fp32) or
 * one 8- or 16-byte vector (16-bit types). */
template <int DT, int N>
__device__ __forceinline__ void load_n(const void *p, long long i, float (&v)[N]) {
    static_assert(N == 1 || N == 4 || N == 8, "1, 4 or 8 elements");
    if constexpr (N == 1) {
        v[0] = load_elem<DT>(p, i);
    } else if constexpr (DT == QF_DTYPE_FP32) {
        const float4 *q = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i);
#pragma unroll
        for (int j = 0; j < N / 4; j++) {
            const float4 a = __ldg(q + j);
            v[4 * j] = a.x, v[4 * j + 1] = a.y, v[4 * j + 2] = a.z, v[4 * j + 3] = a.w;
        }
    } else {
        const unsigned short *h = static_cast<const unsigned short *>(p) + i;
        if constexpr (N == 8) {
            unpack16<DT, N>(__ldg(reinterpret_cast<const uint4 *>(h)), v);
        } else {
            const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(h));
            const unsigned w[2] = {raw.x, raw.y};
#pragma unroll
            for (int j = 0; j < N; j++)
                v[j] = half_bits_to_float<DT>((w[j / 2] >> (16 * (j % 2))) & 0xFFFFu);
        }
    }
}

/* 16 bytes from global memory at g (16-byte aligned) to shared memory at s (16-byte aligned),
 * asynchronously (cp.async, sm_80+, bypassing L1); cp_async_commit closes a group of them and
 * cp_async_wait<0> waits for every group of this thread, cp_async_wait<1> for all but the last
 * (then a barrier makes them visible to the block). */
__device__ __forceinline__ void cp_async16(void *s, const void *g) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most N of this thread's groups are pending (N = 0: all done). */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* 16 bytes of global memory at p (16-byte aligned, read-only for the kernel), as __ldg loads them,
 * with L2's evict_last priority (createpolicy and ld.global.nc.L2::cache_hint, PTX ISA 7.4,
 * sm_80+): other lines leave L2 before this one. The rows walk's loads of x (rows_load_raw) and
 * fp8_block's `_cols` entry take it: on an H100 the norm + quantize rows at 16384 x 8192 ran
 * 1.00-1.03x with it, the other shapes timed 0.98-1.03x (docs/bench.md, "x's second read and
 * L2"). */
__device__ __forceinline__ uint4 ldg_evict_last(const uint4 *p) {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    uint4 r;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p), "l"(policy));
    return r;
}

/* Asks L2 to fetch `bytes` (a multiple of 16, below 4 GiB) of global memory from p (16-byte
 * aligned) and returns at once: one cp.async.bulk.prefetch.L2 (PTX ISA 8.0, sm_90+; a no-op on
 * older GPUs) for a whole row, issued by one thread. */
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

/* Where a vector load of a quantizer's input comes from (the `vec` of load_src and its kin):
 * - LoadGlobal: global memory, load_n.
 * - LoadFetch: issues cp.async of the vector's 16-byte pieces into this thread's next staging
 *   slots (slot n at slot + n * stride, in uint4) and gives zeros; nothing waits for them.
 * - LoadStaged: the same slots in the same order, after cp_async_wait<0>, unpacked as load_n
 *   unpacks (the same bytes, so the same values).
 * - LoadAhead and LoadHeld (below): the same through registers.
 * A walk over an item's vectors made first with LoadFetch and then, later, with LoadStaged reads
 * the item through shared memory, its global loads in flight while the thread works on another
 * item. Only this thread writes and reads its slots, so no barrier is needed between them; the
 * vectors are whole 16-byte pieces (N * sizeof(DT) a multiple of 16, 16-byte aligned). */
struct LoadGlobal {
    template <int DT, int N>
    __device__ __forceinline__ void vec(const void *p, long long i, float (&v)[N]) {
        load_n<DT, N>(p, i, v);
    }
};

struct LoadFetch {
    uint4 *slot;
    int stride, n;
    template <int DT, int N>
    __device__ __forceinline__ void vec(const void *p, long long i, float (&v)[N]) {
        static_assert(N * kElemSize<DT> % 16 == 0, "whole 16-byte pieces");
        const char *g = static_cast<const char *>(p) + i * kElemSize<DT>;
#pragma unroll
        for (int c = 0; c < N * kElemSize<DT> / 16; c++)
            cp_async16(slot + (n++) * stride, g + 16 * c);
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = 0.0f;
    }
};

struct LoadStaged {
    const uint4 *slot;
    int stride, n;
    template <int DT, int N>
    __device__ __forceinline__ void vec(const void *, long long, float (&v)[N]) {
        constexpr int E = 16 / kElemSize<DT>;
        static_assert(N % E == 0, "whole 16-byte pieces");
#pragma unroll
        for (int c = 0; c < N / E; c++) {
            float u[E];
            unpack16<DT, E>(slot[(n++) * stride], u);
#pragma unroll
            for (int j = 0; j < E; j++)
                v[c * E + j] = u[j];
        }
    }
};

/* The same walk through registers: LoadAhead issues each whole 16-byte vector's global load into
 * the next of the caller's registers r[0..] (in call order) and gives zeros; LoadHeld unpacks
 * them in the same order, as load_n would (the same bytes, so the same values). A walk over the
 * next item's vectors made with LoadAhead before this item's work keeps those loads in flight
 * during it. Both are fully unrolled with the walk, so r stays in registers. Vectors that are
 * not one 16-byte piece are neither loaded nor given (zeros): the caller takes this way only
 * where every vector is one. */
struct LoadAhead {
    uint4 *r;
    int n;
    template <int DT, int N>
    __device__ __forceinline__ void vec(const void *p, long long i, float (&v)[N]) {
        if constexpr (N * kElemSize<DT> == 16) {
            const char *g = static_cast<const char *>(p) + i * kElemSize<DT>;
            r[n++] = __ldg(reinterpret_cast<const uint4 *>(g));
        }
#pragma unroll
        for (int j = 0; j < N; j++)
            v[j] = 0.0f;
    }
};

struct LoadHeld {
    const uint4 *r;
    int n;
    template <int DT, int N>
    __device__ __forceinline__ void vec(const void *, long long, float (&v)[N]) {
        if constexpr (N * kElemSize<DT> == 16) {
            unpack16<DT, N>(r[n++], v);
        } else {
#pragma unroll
            for (int j = 0; j < N; j++)
                v[j] = 0.0f;
        }
    }
};

/* Stores the first n (<= 4) bytes of v at p; one 4-byte store when aligned and whole. */
__device__ __forceinline__ void store4(unsigned char *p, unsigned v, int n, bool aligned) {
    if (n == 4 && aligned) {
        *reinterpret_cast<unsigned *>(p) = v;
        return;
    }
    for (int i = 0; i < n; i++)
        p[i] = static_cast<unsigned char>(v >> (8 * i));
}

/* Byte offset of entry (i, j) of a padded [R, C] scale matrix (numerics 2.3 swizzle). */
__device__ __forceinline__ long long swizzle_offset(long long i, long long j, long long C) {
    const long long tile = (i / 128) * (C / 4) + j / 4;
    return tile * 512 + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4;
}

} // namespace

#endif /* QF_DEV_LOAD_CUH */
