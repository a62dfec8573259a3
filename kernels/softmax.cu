// Softmax and log-softmax ("accurate": the row maximum is subtracted before exp), forward and
// backward, over any axis.
//
// The launcher views the input as (outer, L, inner): L is the softmax axis, inner the product of
// the dims after it. Three kernels cover the cases, each chosen so that global accesses coalesce:
//
//  * inner == 1, L <= 1024: one WARP per row, the row held in registers (COLS = ceil(L/32) values
//    per lane, compile-time via a template, so the array stays in registers). Lane l reads columns
//    l, l+32, ... (coalesced); max and sum are warp shuffles; x is read once from DRAM and y
//    written once: the minimum traffic (OneFlow's softmax.cuh design).
//  * inner == 1, L > 1024: one BLOCK per row. Pass 1 keeps an "online" (max, sum) per thread
//    (Milakov & Gimelshein 2018: when a larger max appears the running sum is rescaled), then a
//    block reduction; pass 2 re-reads the row (from L2: it was just read) and writes y.
//  * inner > 1 (e.g. the channel axis of NCHW): one THREAD per (outer, inner) column. Adjacent
//    threads own adjacent inner positions, so every step along L is a coalesced warp load; each
//    thread does the online (max, sum) pass and then the writing pass over its column.
//
// Backward, with y the forward output: softmax  dx = y * (dy - sum(dy * y));
//                                      log      dx = dy - exp(y) * sum(dy).
// Everything is float32 with expf/logf (no fast-math intrinsics) so results match the reference
// to rounding. alpha/beta blend in the epilogue.
#include "elementwise_common.cuh"

// ---------------------------------------------------------------------------------------------
// One warp per row, the row in registers.
// ---------------------------------------------------------------------------------------------
template <int COLS>
__device__ __forceinline__ void softmax_forward_warp(const float* x, float* y, long long rows, int L,
                                                     int log_mode, float alpha, float beta)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // whole warps leave together, so the shuffles below stay full-warp
    const float* xr = x + row * L;
    float* yr = y + row * L;

    float v[COLS];
    float m = MINIDL_NEG_INF;
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const int col = lane + 32 * k;
        v[k] = col < L ? xr[col] : MINIDL_NEG_INF;
        m = fmaxf(m, v[k]);
    }
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const int col = lane + 32 * k;
        const float e = col < L ? expf(v[k] - m) : 0.0f;
        if (!log_mode) v[k] = e;
        s += e;
    }
    s = warp_sum(s);
    const float log_s = logf(s);
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const int col = lane + 32 * k;
        if (col < L) {
            const float r = log_mode ? (v[k] - m) - log_s : v[k] / s;
            yr[col] = blend(r, yr, col, alpha, beta);
        }
    }
}

template <int COLS>
__device__ __forceinline__ void softmax_backward_warp(const float* y, const float* dy, float* dx, long long rows,
                                                      int L, int log_mode, float alpha, float beta)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const float* yr = y + row * L;
    const float* dyr = dy + row * L;
    float* dxr = dx + row * L;

    float yv[COLS], gv[COLS];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const int col = lane + 32 * k;
        yv[k] = col < L ? yr[col] : 0.0f;
        gv[k] = col < L ? dyr[col] : 0.0f;
        s += log_mode ? gv[k] : gv[k] * yv[k];
    }
    s = warp_sum(s);
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
        const int col = lane + 32 * k;
        if (col < L) {
            const float r = log_mode ? gv[k] - expf(yv[k]) * s : yv[k] * (gv[k] - s);
            dxr[col] = blend(r, dxr, col, alpha, beta);
        }
    }
}

// extern "C" entry points, one per register-array size, so the launcher needs no name mangling.
#define SOFTMAX_WARP_KERNELS(COLS)                                                                          \
    extern "C" __global__ void softmax_forward_warp_##COLS(const float* x, float* y, long long rows, int L,  \
                                                           int log_mode, float alpha, float beta)           \
    {                                                                                                       \
        softmax_forward_warp<COLS>(x, y, rows, L, log_mode, alpha, beta);                                   \
    }                                                                                                       \
    extern "C" __global__ void softmax_backward_warp_##COLS(const float* y, const float* dy, float* dx,     \
                                                            long long rows, int L, int log_mode,            \
                                                            float alpha, float beta)                        \
    {                                                                                                       \
        softmax_backward_warp<COLS>(y, dy, dx, rows, L, log_mode, alpha, beta);                             \
    }

SOFTMAX_WARP_KERNELS(1)
SOFTMAX_WARP_KERNELS(2)
SOFTMAX_WARP_KERNELS(4)
SOFTMAX_WARP_KERNELS(8)
SOFTMAX_WARP_KERNELS(16)
SOFTMAX_WARP_KERNELS(32)

// ---------------------------------------------------------------------------------------------
// Online (max, sum of exp(x - max)) pairs: merging two of them rescales the smaller-max sum.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void online_add(float& m, float& s, float v)
{
    if (v > m) {
        s = s * expf(m - v) + 1.0f;  // m == -inf on the first element: s == 0, exp(-inf) == 0
        m = v;
    } else {
        s += expf(v - m);
    }
}

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2)
{
    const float mm = fmaxf(m, m2);
    if (mm == MINIDL_NEG_INF) return;  // both empty
    s = (m == MINIDL_NEG_INF ? 0.0f : s * expf(m - mm)) + (m2 == MINIDL_NEG_INF ? 0.0f : s2 * expf(m2 - mm));
    m = mm;
}

// ---------------------------------------------------------------------------------------------
// One block per row (long rows, inner == 1).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void softmax_forward_block(const float* x, float* y, long long rows, long long L,
                                                 int log_mode, float alpha, float beta)
{
    __shared__ float shared_m[32], shared_s[32];
    const long long row = blockIdx.x;
    const float* xr = x + row * L;
    float* yr = y + row * L;

    float m = MINIDL_NEG_INF, s = 0.0f;
    for (long long col = threadIdx.x; col < L; col += blockDim.x) online_add(m, s, xr[col]);
    // Warp, then block merge of the (m, s) pairs.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        online_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        shared_m[warp] = m;
        shared_s[warp] = s;
    }
    __syncthreads();
    m = MINIDL_NEG_INF;
    s = 0.0f;
    for (int w = 0; w < warps; ++w) online_merge(m, s, shared_m[w], shared_s[w]);  // same order in every thread

    const float log_s = logf(s);
    for (long long col = threadIdx.x; col < L; col += blockDim.x) {
        const float r = log_mode ? (xr[col] - m) - log_s : expf(xr[col] - m) / s;
        yr[col] = blend(r, yr, col, alpha, beta);
    }
}

extern "C" __global__ void softmax_backward_block(const float* y, const float* dy, float* dx, long long rows,
                                                  long long L, int log_mode, float alpha, float beta)
{
    __shared__ float scratch[32];
    const long long row = blockIdx.x;
    const float* yr = y + row * L;
    const float* dyr = dy + row * L;
    float* dxr = dx + row * L;

    float s = 0.0f;
    for (long long col = threadIdx.x; col < L; col += blockDim.x) s += log_mode ? dyr[col] : dyr[col] * yr[col];
    s = block_sum(s, scratch);
    for (long long col = threadIdx.x; col < L; col += blockDim.x) {
        const float r = log_mode ? dyr[col] - expf(yr[col]) * s : yr[col] * (dyr[col] - s);
        dxr[col] = blend(r, dxr, col, alpha, beta);
    }
}

// ---------------------------------------------------------------------------------------------
// One thread per (outer, inner) column, the softmax axis strided by `inner`.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void softmax_forward_strided(const float* x, float* y, long long outer, long long L,
                                                   long long inner, int log_mode, float alpha, float beta)
{
    const long long columns = outer * inner;
    for (long long column = (long long)blockIdx.x * blockDim.x + threadIdx.x; column < columns;
         column += (long long)gridDim.x * blockDim.x) {
        const long long o = column / inner, i = column - o * inner;
        const long long base = o * L * inner + i;
        float m = MINIDL_NEG_INF, s = 0.0f;
        for (long long l = 0; l < L; ++l) online_add(m, s, x[base + l * inner]);
        const float log_s = logf(s);
        for (long long l = 0; l < L; ++l) {
            const long long idx = base + l * inner;
            const float r = log_mode ? (x[idx] - m) - log_s : expf(x[idx] - m) / s;
            y[idx] = blend(r, y, idx, alpha, beta);
        }
    }
}

extern "C" __global__ void softmax_backward_strided(const float* y, const float* dy, float* dx, long long outer,
                                                    long long L, long long inner, int log_mode, float alpha,
                                                    float beta)
{
    const long long columns = outer * inner;
    for (long long column = (long long)blockIdx.x * blockDim.x + threadIdx.x; column < columns;
         column += (long long)gridDim.x * blockDim.x) {
        const long long o = column / inner, i = column - o * inner;
        const long long base = o * L * inner + i;
        float s = 0.0f;
        for (long long l = 0; l < L; ++l) {
            const long long idx = base + l * inner;
            s += log_mode ? dy[idx] : dy[idx] * y[idx];
        }
        for (long long l = 0; l < L; ++l) {
            const long long idx = base + l * inner;
            const float r = log_mode ? dy[idx] - expf(y[idx]) * s : y[idx] * (dy[idx] - s);
            dx[idx] = blend(r, dx, idx, alpha, beta);
        }
    }
}
