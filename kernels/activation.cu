// Activations: y = f(x) and dx = dy * f'(x), pointwise, for relu, leaky_relu, elu, clipped_relu,
// sigmoid, tanh, gelu (erf form) and gelu_tanh (PyTorch's approximate="tanh").
//
// Algorithm: nothing to compute but one function per element, so the kernel is pure memory
// traffic and its speed is the DRAM bandwidth it reaches. Two habits get there:
//   * 16-byte accesses: each thread loads and stores float4 (4 elements), so a warp moves 512
//     contiguous bytes per instruction and fewer instructions are in flight per byte;
//   * a grid-stride loop over a grid sized to fill the GPU (a few blocks per SM), so that any size
//     runs with the same launch, unrolled so that every thread issues UNROLL independent float4
//     loads before using any: HBM latency times bandwidth needs ~tens of KB in flight per SM, more
//     than one 16-byte load per resident thread gives.
// Threads -> data: thread t handles float4 number t, t + stride, t + 2*stride, ...; the tail that is
// not a multiple of 4 (or a whole array whose pointers are not 16-byte aligned) goes through a
// scalar grid-stride loop.
// The mode is a runtime argument: the switch is uniform across the grid, so it costs a few
// instructions per element and no divergence, and one kernel serves every activation.
// The backward uses whichever of x and y is cheaper: y for sigmoid, tanh and elu (no exp needed),
// x for the others. When y was not given (has_y == 0) it is recomputed from x.
#include "elementwise_common.cuh"

#define ACT_RELU 0
#define ACT_LEAKY_RELU 1
#define ACT_ELU 2
#define ACT_CLIPPED_RELU 3
#define ACT_SIGMOID 4
#define ACT_TANH 5
#define ACT_GELU 6
#define ACT_GELU_TANH 7

#define GELU_TANH_CUBIC 0.044715f

__device__ __forceinline__ float activation_value(int mode, float x, float coef)
{
    switch (mode) {
    case ACT_RELU: return x < 0.0f ? 0.0f : x;            // written so that NaN passes through
    case ACT_LEAKY_RELU: return x < 0.0f ? coef * x : x;  // coef = negative slope
    case ACT_ELU: return x > 0.0f ? x : coef * expm1f(x);  // coef = alpha; expm1 is exact near 0
    case ACT_CLIPPED_RELU: return x < 0.0f ? 0.0f : (x > coef ? coef : x);  // coef = ceiling
    case ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case ACT_TANH: return tanhf(x);
    case ACT_GELU: return 0.5f * x * (1.0f + erff(x * MINIDL_SQRT1_2));
    case ACT_GELU_TANH: {
        const float inner = MINIDL_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
        return 0.5f * x * (1.0f + tanhf(inner));
    }
    }
    return 0.0f;
}

__device__ __forceinline__ float activation_gradient(int mode, float x, float y, float dy, float coef)
{
    switch (mode) {
    case ACT_RELU: return x > 0.0f ? dy : 0.0f;
    case ACT_LEAKY_RELU: return x > 0.0f ? dy : coef * dy;
    case ACT_ELU: return x > 0.0f ? dy : dy * (y + coef);  // d/dx coef*(e^x - 1) = y + coef
    case ACT_CLIPPED_RELU: return (x > 0.0f && x < coef) ? dy : 0.0f;
    case ACT_SIGMOID: return dy * y * (1.0f - y);
    case ACT_TANH: return dy * (1.0f - y * y);
    case ACT_GELU: {
        const float cdf = 0.5f * (1.0f + erff(x * MINIDL_SQRT1_2));
        const float pdf = MINIDL_INV_SQRT_2PI * expf(-0.5f * x * x);
        return dy * (cdf + x * pdf);
    }
    case ACT_GELU_TANH: {
        const float inner = MINIDL_SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * x * x * x);
        const float t = tanhf(inner);
        const float dinner = MINIDL_SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_TANH_CUBIC * x * x);
        return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner);
    }
    }
    return 0.0f;
}

__device__ __forceinline__ float4 activation_value4(int mode, float4 a, float coef)
{
    return make_float4(activation_value(mode, a.x, coef), activation_value(mode, a.y, coef),
                       activation_value(mode, a.z, coef), activation_value(mode, a.w, coef));
}

__device__ __forceinline__ float4 activation_gradient4(int mode, float4 a, float4 b, float4 g, float coef)
{
    return make_float4(activation_gradient(mode, a.x, b.x, g.x, coef), activation_gradient(mode, a.y, b.y, g.y, coef),
                       activation_gradient(mode, a.z, b.z, g.z, coef), activation_gradient(mode, a.w, b.w, g.w, coef));
}

// float4 loads in flight per thread in the main loop (4 x 16 bytes).
#define UNROLL 4

// out[i] = alpha * f(x[i]) + beta * out[i], i < n. vectorized != 0 promises 16-byte aligned pointers.
extern "C" __global__ void activation_forward(const float* x, float* out, long long n, int vectorized,
                                              int mode, float coef, float alpha, float beta)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = vectorized ? n / 4 : 0;

    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* out4 = reinterpret_cast<float4*>(out);
    long long v = start;
    // Main loop: UNROLL independent float4 loads issued before any is used (memory-level parallelism).
    for (; v + (UNROLL - 1) * stride < n_vec; v += UNROLL * stride) {
        float4 a[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) a[k] = x4[v + k * stride];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) out4[v + k * stride] = blend4(activation_value4(mode, a[k], coef), out4, v + k * stride, alpha, beta);
    }
    for (; v < n_vec; v += stride) out4[v] = blend4(activation_value4(mode, x4[v], coef), out4, v, alpha, beta);
    for (long long i = n_vec * 4 + start; i < n; i += stride) {
        out[i] = blend(activation_value(mode, x[i], coef), out, i, alpha, beta);
    }
}

// float16 / bfloat16 (kind 1 / 2): y = f(x) in fp32, rounded once; no alpha / beta (the launcher sends those
// calls through float32 copies). Scalar 16-bit accesses in a grid-stride loop.
// 16-bit data: 4 elements (8 bytes) per load and store where every array is 8-byte aligned (decided here, the same
// for the whole grid), then the tail one by one; each element computed in fp32 and rounded once.
__device__ __forceinline__ bool aligned8(const void* a, const void* b, const void* c = nullptr,
                                         const void* d = nullptr)
{
    return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b) |
             reinterpret_cast<unsigned long long>(c) | reinterpret_cast<unsigned long long>(d)) & 7) == 0;
}

extern "C" __global__ void activation_forward_half(const unsigned short* x, unsigned short* out, long long n,
                                                   int mode, float coef, int kind)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = aligned8(x, out) ? n / 4 : 0;
    for (long long v = start; v < n_vec; v += stride) {
        const float4 a = load4(x, v, kind);
        store4(out, v, make_float4(activation_value(mode, a.x, coef), activation_value(mode, a.y, coef),
                                   activation_value(mode, a.z, coef), activation_value(mode, a.w, coef)), kind);
    }
    for (long long i = n_vec * 4 + start; i < n; i += stride)
        half_store(out, i, activation_value(mode, half_load(x, i, kind), coef), kind);
}

__device__ __forceinline__ float gradient_of(int mode, float a, float b, float g, float coef, int has_y)
{
    return activation_gradient(mode, a, has_y ? b : activation_value(mode, a, coef), g, coef);
}

extern "C" __global__ void activation_backward_half(const unsigned short* x, const unsigned short* y,
                                                    const unsigned short* dy, unsigned short* out, long long n,
                                                    int has_y, int mode, float coef, int kind)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = aligned8(x, dy, out, has_y ? y : nullptr) ? n / 4 : 0;
    for (long long v = start; v < n_vec; v += stride) {
        const float4 a = load4(x, v, kind), g = load4(dy, v, kind);
        const float4 b = has_y ? load4(y, v, kind) : make_float4(0.f, 0.f, 0.f, 0.f);
        store4(out, v, make_float4(gradient_of(mode, a.x, b.x, g.x, coef, has_y),
                                   gradient_of(mode, a.y, b.y, g.y, coef, has_y),
                                   gradient_of(mode, a.z, b.z, g.z, coef, has_y),
                                   gradient_of(mode, a.w, b.w, g.w, coef, has_y)), kind);
    }
    for (long long i = n_vec * 4 + start; i < n; i += stride) {
        const float a = half_load(x, i, kind);
        const float b = has_y ? half_load(y, i, kind) : activation_value(mode, a, coef);
        half_store(out, i, activation_gradient(mode, a, b, half_load(dy, i, kind), coef), kind);
    }
}

// out[i] = alpha * dy[i] * f'(x[i]) + beta * out[i]. y may be unused (has_y == 0): then it is
// recomputed from x where the gradient needs it.
extern "C" __global__ void activation_backward(const float* x, const float* y, const float* dy, float* out,
                                               long long n, int vectorized, int has_y, int mode, float coef,
                                               float alpha, float beta)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = vectorized ? n / 4 : 0;

    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const float4* dy4 = reinterpret_cast<const float4*>(dy);
    float4* out4 = reinterpret_cast<float4*>(out);
    long long v = start;
    for (; v + (UNROLL - 1) * stride < n_vec; v += UNROLL * stride) {
        float4 a[UNROLL], b[UNROLL], g[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            a[k] = x4[v + k * stride];
            g[k] = dy4[v + k * stride];
            if (has_y) b[k] = y4[v + k * stride];
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            if (!has_y) b[k] = activation_value4(mode, a[k], coef);
            out4[v + k * stride] = blend4(activation_gradient4(mode, a[k], b[k], g[k], coef), out4, v + k * stride, alpha, beta);
        }
    }
    for (; v < n_vec; v += stride) {
        const float4 a = x4[v];
        const float4 b = has_y ? y4[v] : activation_value4(mode, a, coef);
        out4[v] = blend4(activation_gradient4(mode, a, b, dy4[v], coef), out4, v, alpha, beta);
    }
    for (long long i = n_vec * 4 + start; i < n; i += stride) {
        const float yi = has_y ? y[i] : activation_value(mode, x[i], coef);
        out[i] = blend(activation_gradient(mode, x[i], yi, dy[i], coef), out, i, alpha, beta);
    }
}

// ---------------------------------------------------------------------------------------------
// Residual add + ReLU, fused (the end of a ResNet block): y = max(a + b, 0) in one pass instead of
// an add kernel writing a + b and a ReLU kernel reading it back (3 full-size passes instead of 5,
// one launch instead of two). Backward: the gradient of both a and b is dy where y > 0, which is
// the ReLU's rule x > 0 (y > 0 exactly where a + b > 0), one pass, one launch.
// Same thread mapping as above: float4 grid-stride loop, scalar tail.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float add_relu_value(float a, float b)
{
    return activation_value(ACT_RELU, __fadd_rn(a, b), 0.0f);
}

extern "C" __global__ void add_relu_forward(const float* a, const float* b, float* y, long long n, int vectorized)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = vectorized ? n / 4 : 0;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (long long v = start; v < n_vec; v += stride) {
        const float4 p = a4[v], q = b4[v];
        y4[v] = make_float4(add_relu_value(p.x, q.x), add_relu_value(p.y, q.y), add_relu_value(p.z, q.z),
                            add_relu_value(p.w, q.w));
    }
    for (long long i = n_vec * 4 + start; i < n; i += stride) y[i] = add_relu_value(a[i], b[i]);
}

extern "C" __global__ void add_relu_backward(const float* y, const float* dy, float* dx, long long n, int vectorized)
{
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long n_vec = vectorized ? n / 4 : 0;
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const float4* g4 = reinterpret_cast<const float4*>(dy);
    float4* dx4 = reinterpret_cast<float4*>(dx);
    for (long long v = start; v < n_vec; v += stride) {
        const float4 p = y4[v], g = g4[v];
        dx4[v] = make_float4(p.x > 0.0f ? g.x : 0.0f, p.y > 0.0f ? g.y : 0.0f, p.z > 0.0f ? g.z : 0.0f,
                             p.w > 0.0f ? g.w : 0.0f);
    }
    for (long long i = n_vec * 4 + start; i < n; i += stride) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
