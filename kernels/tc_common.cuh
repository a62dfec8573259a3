// tc_common.cuh: what the tensor-core GEMMs share (kernels/gemm_tc.cu, mma.sync; kernels/gemm_wgmma.cu,
// Hopper's wgmma): the data kinds, their storage types, the shared-memory address of a pointer, and the
// conversions of an element of C between its storage type and fp32 (round to nearest even), and the
// mma.sync-era instructions (cp.async, ldmatrix, mma) that gemm_tc.cu and attention.cu both issue.
#pragma once

namespace minidl_tc {

enum Kind { KIND_TF32 = 0, KIND_F16 = 1, KIND_BF16 = 2 };

template <int KIND>
struct Storage {
    using T = unsigned short;  // fp16 / bf16 bits; no arithmetic is done on them
};
template <>
struct Storage<KIND_TF32> {
    using T = float;
};

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    unsigned addr;
    asm("{ .reg .u64 u; cvta.to.shared.u64 u, %1; cvt.u32.u64 %0, u; }" : "=r"(addr) : "l"(p));
    return addr;
}

// Conversions of one element of C between its storage type and fp32.
template <int KIND>
__device__ __forceinline__ float load_c(const typename Storage<KIND>::T* p);
template <>
__device__ __forceinline__ float load_c<KIND_TF32>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float load_c<KIND_F16>(const unsigned short* p)
{
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(*p));
    return f;
}
template <>
__device__ __forceinline__ float load_c<KIND_BF16>(const unsigned short* p)
{
    return __uint_as_float(((unsigned)*p) << 16);
}
// Element i of a GEMM's bias: of C's storage type, or float32 (f32 != 0: an autocast layer's float32 bias added to
// its 16-bit product in the epilogue, in fp32 before the one rounding, with no cast launched before the GEMM).
template <int KIND>
__device__ __forceinline__ float load_bias(const void* bias, long long i, int f32)
{
    return f32 ? static_cast<const float*>(bias)[i] : load_c<KIND>(static_cast<const typename Storage<KIND>::T*>(bias) + i);
}
template <int KIND>
__device__ __forceinline__ void store_c(typename Storage<KIND>::T* p, float v);
template <>
__device__ __forceinline__ void store_c<KIND_TF32>(float* p, float v) { *p = v; }
template <>
__device__ __forceinline__ void store_c<KIND_F16>(unsigned short* p, float v)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    *p = h;
}
template <>
__device__ __forceinline__ void store_c<KIND_BF16>(unsigned short* p, float v)
{
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    *p = h;
}

// Two adjacent elements of C (the first aligned to two elements) in one store.
template <int KIND>
__device__ __forceinline__ void store_c_pair(typename Storage<KIND>::T* p, float v0, float v1);
template <>
__device__ __forceinline__ void store_c_pair<KIND_TF32>(float* p, float v0, float v1)
{
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}
template <>
__device__ __forceinline__ void store_c_pair<KIND_F16>(unsigned short* p, float v0, float v1)
{
    unsigned packed;
    asm("cvt.rn.f16x2.f32 %0, %2, %1;\n" : "=r"(packed) : "f"(v0), "f"(v1));  // v0 in the low half
    *reinterpret_cast<unsigned*>(p) = packed;
}
template <>
__device__ __forceinline__ void store_c_pair<KIND_BF16>(unsigned short* p, float v0, float v1)
{
    unsigned packed;
    asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(packed) : "f"(v0), "f"(v1));
    *reinterpret_cast<unsigned*>(p) = packed;
}

// 16-byte asynchronous copy; bytes past src_bytes (0..16) are filled with zeros.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 4-byte asynchronous copy through L1 (for scattered single floats).
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Round an fp32 bit pattern to TF32 (10 mantissa bits), to nearest, ties away from zero.
__device__ __forceinline__ unsigned to_tf32(unsigned x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
    return r;
}

// x rounded to TF32 (10 mantissa bits; to nearest, ties away from zero: cvt.rna's rounding for finite x)
// with integer operations: cvt runs at 1/8 of the ALU rate, and this is the inner loop.
__device__ __forceinline__ unsigned round_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// x = big + small, both TF32 (small's low bits, ~2^-21 of x, are dropped by the mma's own truncation).
__device__ __forceinline__ void split_tf32(float x, unsigned& big, unsigned& small)
{
    big = round_tf32(x);
    small = __float_as_uint(x - __uint_as_float(big));
}

template <int KIND>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    if (KIND == KIND_TF32) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if (KIND == KIND_F16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                     "{%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

}  // namespace minidl_tc
