// Shared helpers of the memory-bound kernel families (activation, dropout, softmax, pooling,
// batch norm, LRN): the cuDNN-style alpha/beta epilogue, warp/block reductions, constants.
// Device code only, so that the header compiles under NVRTC (no host headers).
#pragma once

#define MINIDL_NEG_INF (__int_as_float(0xff800000))
#define MINIDL_SQRT1_2 0.70710678118654752440f     // 1/sqrt(2)
#define MINIDL_INV_SQRT_2PI 0.39894228040143267794f // 1/sqrt(2*pi)
#define MINIDL_SQRT_2_OVER_PI 0.79788456080286535588f

// out = alpha * result + beta * out. With beta == 0 the prior value is never read, so an output
// full of NaN (or never initialised) is simply overwritten, as in cuDNN.
__device__ __forceinline__ float blend(float result, const float* out, long long i, float alpha, float beta)
{
    return beta == 0.0f ? alpha * result : alpha * result + beta * out[i];
}

__device__ __forceinline__ float4 blend4(float4 r, const float4* out, long long v, float alpha, float beta)
{
    if (beta == 0.0f) {
        return make_float4(alpha * r.x, alpha * r.y, alpha * r.z, alpha * r.w);
    }
    const float4 o = out[v];
    return make_float4(alpha * r.x + beta * o.x, alpha * r.y + beta * o.y,
                       alpha * r.z + beta * o.z, alpha * r.w + beta * o.w);
}

// Butterfly reductions: after the loop every lane holds the result.
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024). Every thread gets the
// result. `scratch` holds 32 floats of shared memory; the call ends with a barrier so that
// scratch can be reused by the next reduction.
__device__ __forceinline__ float block_sum(float v, float* scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = (lane < warps) ? scratch[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

// 16-bit storage (kind 1 float16, 2 bfloat16): loaded as fp32, stored rounded to nearest even. The _half
// kernels compute in fp32 and round once, which is what computing on float32 copies and rounding gives.
__device__ __forceinline__ float half_load(const unsigned short* p, long long i, int kind)
{
    const unsigned short bits = p[i];
    if (kind == 2) return __uint_as_float(((unsigned)bits) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(bits));
    return f;
}
__device__ __forceinline__ void half_store(unsigned short* p, long long i, float v, int kind)
{
    unsigned short h;
    if (kind == 2)
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    else
        asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    p[i] = h;
}

// Data in any storage (a kernel template argument KIND: 0 float, 1 float16, 2 bfloat16; STORAGE_KINDS of
// minidl/primitives/cuda/_launch.py): Data<KIND>::T is the element type; load_data / store_data convert one
// element to and from fp32; load4 / store4 move 4 consecutive elements (a float4, or 8 bytes of 16-bit data:
// the pointer 16- or 8-byte aligned), i counting groups of 4. The statistics stay fp32 whatever the data.
template <int KIND>
struct Data {
    typedef unsigned short T;
};
template <>
struct Data<0> {
    typedef float T;
};

__device__ __forceinline__ float half_bits_to_float(unsigned bits, int kind)
{
    if (kind == 2) return __uint_as_float(bits << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"((unsigned short)bits));
    return f;
}
__device__ __forceinline__ unsigned float_to_half_bits(float v, int kind)
{
    unsigned short h;
    if (kind == 2)
        asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    else
        asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ float load_data(const float* p, long long i, int) { return p[i]; }
__device__ __forceinline__ float load_data(const unsigned short* p, long long i, int kind) { return half_load(p, i, kind); }
__device__ __forceinline__ void store_data(float* p, long long i, float v, int) { p[i] = v; }
__device__ __forceinline__ void store_data(unsigned short* p, long long i, float v, int kind) { half_store(p, i, v, kind); }
__device__ __forceinline__ float4 load4(const float* p, long long i, int) { return reinterpret_cast<const float4*>(p)[i]; }
__device__ __forceinline__ float4 load4(const unsigned short* p, long long i, int kind)
{
    const uint2 w = reinterpret_cast<const uint2*>(p)[i];
    return make_float4(half_bits_to_float(w.x & 0xffffu, kind), half_bits_to_float(w.x >> 16, kind),
                       half_bits_to_float(w.y & 0xffffu, kind), half_bits_to_float(w.y >> 16, kind));
}
__device__ __forceinline__ void store4(float* p, long long i, float4 v, int) { reinterpret_cast<float4*>(p)[i] = v; }
__device__ __forceinline__ void store4(unsigned short* p, long long i, float4 v, int kind)
{
    reinterpret_cast<uint2*>(p)[i] = make_uint2(float_to_half_bits(v.x, kind) | (float_to_half_bits(v.y, kind) << 16),
                                                float_to_half_bits(v.z, kind) | (float_to_half_bits(v.w, kind) << 16));
}
