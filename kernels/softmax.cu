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

// ---------------------------------------------------------------------------------------------
// Cross-entropy against class indices: log-softmax and the negative log-likelihood fused.
//
// x is viewed as (outer, C, inner): row m = (n, i), n = m / inner, i = m % inner, holds the C logits
// x[(n * C + c) * inner + i] (inner == 1 for (N, C) logits). With t = target[m], w the class weights
// (all 1 without a weight), eps the label smoothing and W = sum_c w_c, the target weights are
//     q_mc = valid_m * ((1 - eps) w_t [c == t] + eps / C * w_c),   valid_m = t != ignore_index, 0 <= t < C
// and, with the row's max M_m and L_m = log sum_c exp(x_mc - M_m), so that log p_mc = (x_mc - M_m) - L_m
// (computed in this order, as PyTorch's log_softmax: adding L_m, often tiny, to M_m first would round it away),
//     loss_m = -sum_c q_mc log p_mc = -valid_m ((1 - eps) w_t log p_mt + eps / C sum_c w_c log p_mc)
//     d loss_m / d x_mc = (sum_c q_mc) p_mc - q_mc.
// The forward pass reads each row once (an online max and sum of exp; a second time with label smoothing)
// and writes three numbers per row:
// the loss, the weight it counts with in a mean (valid_m w_t), and stats[m] = (M_m, L_m), all that the
// backward pass needs besides x and t. A row whose index is neither in range nor ignore_index gets a NaN loss and NaN
// gradients (the GPU does not stop to raise; minidl.backends.cuda.check_indices makes the caller check).
// ---------------------------------------------------------------------------------------------
// Pass 1 over a row: the running max and sum of exp (online), and the target's logit.
struct CrossEntropyRow {
    float m, s;   // running max and sum of exp(x - m)
    float x_t;    // the target's logit (0 in the threads that do not meet it)
};

__device__ __forceinline__ void cross_entropy_add(CrossEntropyRow& r, float v, int c, long long t)
{
    online_add(r.m, r.s, v);
    if (c == t) r.x_t = v;
}

// The logits in any storage (`kind`: 0 float, 1 float16, 2 bfloat16, STORAGE_KINDS of the launchers): 16-bit
// logits (autocast's) are read as they are and widened to fp32 here, as a cast to float32 first would give, without
// the cast's pass over them; their gradient is stored rounded to their dtype (what the cast's backward would round).
__device__ __forceinline__ float logit_at(const void* x, long long i, int kind)
{
    return kind == 0 ? static_cast<const float*>(x)[i] : half_load(static_cast<const unsigned short*>(x), i, kind);
}
__device__ __forceinline__ void grad_store(void* dx, long long i, float v, int kind)
{
    if (kind == 0) static_cast<float*>(dx)[i] = v;
    else half_store(static_cast<unsigned short*>(dx), i, v, kind);
}
// Four consecutive logits (vec4: a float4, or 8 bytes of 16-bit data), q counting groups of 4.
__device__ __forceinline__ float4 logits4(const void* x, long long q, int kind)
{
    if (kind == 0) return static_cast<const float4*>(x)[q];
    const uint2 u = static_cast<const uint2*>(x)[q];
    return make_float4(half_bits_to_float(u.x & 0xffffu, kind), half_bits_to_float(u.x >> 16, kind),
                       half_bits_to_float(u.y & 0xffffu, kind), half_bits_to_float(u.y >> 16, kind));
}
__device__ __forceinline__ void grads4(void* dx, long long q, float4 v, int kind)
{
    if (kind == 0) {
        static_cast<float4*>(dx)[q] = v;
        return;
    }
    static_cast<uint2*>(dx)[q] = make_uint2(float_to_half_bits(v.x, kind) | (float_to_half_bits(v.y, kind) << 16),
                                            float_to_half_bits(v.z, kind) | (float_to_half_bits(v.w, kind) << 16));
}

// A warp's rows merged: every lane ends with the warp's (max, sum) and the target's logit (one lane held it, the others
// add 0).
__device__ __forceinline__ void cross_entropy_warp_merge(CrossEntropyRow& r)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, r.m, offset);
        const float s2 = __shfl_xor_sync(0xffffffffu, r.s, offset);
        online_merge(r.m, r.s, m2, s2);
        r.x_t += __shfl_xor_sync(0xffffffffu, r.x_t, offset);
    }
}

// The row's loss. wlp = sum_c w_c log p_c (pass 2, only with label smoothing: summed as log-probabilities,
// not as sum w x - W lse, whose two large terms would cancel in float32).
__device__ __forceinline__ void cross_entropy_finish_row(float x_t, float row_max, float log_sum, float wlp, long long t,
                                                         int C, long long ignore_index, const float* weight,
                                                         float smoothing, long long m, float* loss_rows,
                                                         float* weight_rows, float* stats)
{
    float loss = 0.0f, counted = 0.0f;
    if (t >= 0 && t < C && t != ignore_index) {
        const float w_t = weight ? weight[t] : 1.0f;
        loss = -(1.0f - smoothing) * w_t * ((x_t - row_max) - log_sum) - smoothing / C * wlp;
        counted = w_t;
    } else if (t != ignore_index) {
        loss = __int_as_float(0x7fc00000);  // NaN: an index out of range
    }
    loss_rows[m] = loss;
    weight_rows[m] = counted;
    stats[2 * m] = row_max;
    stats[2 * m + 1] = log_sum;
}

// (N, C) logits (inner == 1): one warp per row, lanes over the classes (coalesced), merged by shuffles.
extern "C" __global__ void cross_entropy_forward_warp(const void* x, const long long* target, const float* weight,
                                                      float* loss_rows, float* weight_rows, float* stats, long long rows,
                                                      int C, long long ignore_index, float smoothing, int kind)
{
    const int lane = threadIdx.x & 31;
    const long long m = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (m >= rows) return;  // whole warps leave together
    const long long row0 = m * C;
    const long long t = target[m];
    CrossEntropyRow r = {MINIDL_NEG_INF, 0.0f, 0.0f};
    for (int c = lane; c < C; c += 32) cross_entropy_add(r, logit_at(x, row0 + c, kind), c, t);
    cross_entropy_warp_merge(r);
    // lane 0's values, so that every lane uses the same ones
    const float row_max = __shfl_sync(0xffffffffu, r.m, 0), log_sum = __shfl_sync(0xffffffffu, logf(r.s), 0);
    float wlp = 0.0f;
    if (smoothing != 0.0f) {  // pass 2 (the row again, from L1/L2)
        for (int c = lane; c < C; c += 32)
            wlp += (weight ? weight[c] : 1.0f) * ((logit_at(x, row0 + c, kind) - row_max) - log_sum);
        wlp = warp_sum(wlp);
    }
    if (lane == 0)
        cross_entropy_finish_row(r.x_t, row_max, log_sum, wlp, t, C, ignore_index, weight, smoothing, m, loss_rows,
                                 weight_rows, stats);
}

// (N, C) logits with many classes (a language model's vocabulary): one block per row, its threads over the
// classes, four at a time (float4) where the rows are 16-byte aligned (vec4). A warp per row would read a
// 10,000-class row in 313 dependent steps with few warps per SM to hide them; a block reads it in ~10.
// The (max, sum) pairs merge warp by warp, then across warps in a fixed order (the same result every run).
extern "C" __global__ void cross_entropy_forward_block(const void* x, const long long* target, const float* weight,
                                                       float* loss_rows, float* weight_rows, float* stats, long long rows,
                                                       int C, long long ignore_index, float smoothing, int vec4, int kind)
{
    __shared__ float shared_m[32], shared_s[32], shared_t[32];
    const long long m = blockIdx.x;
    const long long row0 = m * C;
    const long long t = target[m];
    CrossEntropyRow r = {MINIDL_NEG_INF, 0.0f, 0.0f};
    if (vec4) {
        for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {
            const float4 v = logits4(x, row0 / 4 + q, kind);
            cross_entropy_add(r, v.x, 4 * q, t);
            cross_entropy_add(r, v.y, 4 * q + 1, t);
            cross_entropy_add(r, v.z, 4 * q + 2, t);
            cross_entropy_add(r, v.w, 4 * q + 3, t);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) cross_entropy_add(r, logit_at(x, row0 + c, kind), c, t);
    }
    cross_entropy_warp_merge(r);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        shared_m[warp] = r.m;
        shared_s[warp] = r.s;
        shared_t[warp] = r.x_t;
    }
    __syncthreads();
    float row_max = MINIDL_NEG_INF, sum = 0.0f, x_t = 0.0f;
    for (int w = 0; w < warps; ++w) {   // the same order in every thread
        online_merge(row_max, sum, shared_m[w], shared_s[w]);
        x_t += shared_t[w];
    }
    const float log_sum = logf(sum);
    float wlp = 0.0f;
    if (smoothing != 0.0f) {  // pass 2 (the row again, from L1/L2)
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            wlp += (weight ? weight[c] : 1.0f) * ((logit_at(x, row0 + c, kind) - row_max) - log_sum);
        __syncthreads();   // shared_m is reused as block_sum's scratch
        wlp = block_sum(wlp, shared_m);
    }
    if (threadIdx.x == 0)
        cross_entropy_finish_row(x_t, row_max, log_sum, wlp, t, C, ignore_index, weight, smoothing, m, loss_rows,
                                 weight_rows, stats);
}

// (N, C, d1, ...) logits (inner > 1): one thread per row; neighbouring threads read neighbouring positions
// of the same class, so each step over the classes is a coalesced load.
extern "C" __global__ void cross_entropy_forward_strided(const void* x, const long long* target, const float* weight,
                                                         float* loss_rows, float* weight_rows, float* stats,
                                                         long long rows, int C, long long inner,
                                                         long long ignore_index, float smoothing, int kind)
{
    for (long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x; m < rows;
         m += (long long)gridDim.x * blockDim.x) {
        const long long n = m / inner, i = m - n * inner;
        const long long first = n * C * inner + i;   // class c at first + c * inner
        const long long t = target[m];
        CrossEntropyRow r = {MINIDL_NEG_INF, 0.0f, 0.0f};
        for (int c = 0; c < C; ++c) cross_entropy_add(r, logit_at(x, first + (long long)c * inner, kind), c, t);
        const float log_sum = logf(r.s);
        float wlp = 0.0f;
        if (smoothing != 0.0f)
            for (int c = 0; c < C; ++c)
                wlp += (weight ? weight[c] : 1.0f) * ((logit_at(x, first + (long long)c * inner, kind) - r.m) - log_sum);
        cross_entropy_finish_row(r.x_t, r.m, log_sum, wlp, t, C, ignore_index, weight, smoothing, m, loss_rows,
                                 weight_rows, stats);
    }
}

// The reduction, in one block (a fixed order, so the same result every run): out[0] = the summed losses
// (divided by the summed weights when mean), out[1] = the summed weights (the mean's denominator).
extern "C" __global__ void cross_entropy_reduce(const float* loss_rows, const float* weight_rows, long long rows,
                                                int mean, float* out)
{
    __shared__ float scratch[32];
    float loss = 0.0f, counted = 0.0f;
    for (long long m = threadIdx.x; m < rows; m += blockDim.x) {
        loss += loss_rows[m];
        counted += weight_rows[m];
    }
    loss = block_sum(loss, scratch);
    counted = block_sum(counted, scratch);
    if (threadIdx.x == 0) {
        out[0] = mean ? loss / counted : loss;
        out[1] = counted;
    }
}

// d loss_m / d x_mc of a row that counts: scale ((1 - eps) w_t (p - [c == t]) + eps / C (W p - w_c)), p from the
// forward's stats (M, L); p - 1 before any product, so a confident row's small gradient is not the difference of
// two rounded products.
__device__ __forceinline__ float cross_entropy_grad(float xv, int c, long long t, float row_max, float log_sum, float scale,
                                                    float w_t, const float* weight, float w_total, int C, float smoothing)
{
    const float p = expf((xv - row_max) - log_sum);
    float d = (1.0f - smoothing) * w_t * (c == t ? p - 1.0f : p);
    if (smoothing != 0.0f) d += smoothing / C * (w_total * p - (weight ? weight[c] : 1.0f));
    return scale * d;
}

// dx_mc = scale_m ((sum_c q_mc) exp((x_mc - M_m) - L_m) - q_mc), one thread per element of x, in x's layout.
// scale_m = dloss[m * dloss_stride] / (denom ? denom[0] : 1): the incoming gradient of the mean, the sum
// (dloss_stride 0) or the per-row losses (stride 1). w_total = sum_c w_c (null: the weights are all 1).
extern "C" __global__ void cross_entropy_backward(const void* x, const long long* target, const float* stats,
                                                  const float* weight, const float* w_total, const float* dloss,
                                                  long long dloss_stride, const float* denom, void* dx,
                                                  long long outer, int C, long long inner, long long ignore_index,
                                                  float smoothing, int kind)
{
    const long long total = outer * C * inner;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long i = e % inner, r = e / inner;
        const int c = (int)(r % C);
        const long long m = (r / C) * inner + i;
        const long long t = target[m];
        float g = 0.0f;
        if (t >= 0 && t < C && t != ignore_index) {
            g = cross_entropy_grad(logit_at(x, e, kind), c, t, stats[2 * m], stats[2 * m + 1],
                                   dloss[m * dloss_stride] / (denom ? denom[0] : 1.0f),
                                   weight ? weight[t] : 1.0f, weight, w_total ? w_total[0] : (float)C, C, smoothing);
        } else if (t != ignore_index) {
            g = __int_as_float(0x7fc00000);
        }
        grad_store(dx, e, g, kind);
    }
}

// The backward pass of cross_entropy_forward_block's rows ((N, C) logits, many classes): one block per row, so
// the row's target, scale and stats are read once and no thread divides by C; float4 loads and stores (vec4).
extern "C" __global__ void cross_entropy_backward_block(const void* x, const long long* target, const float* stats,
                                                        const float* weight, const float* w_total, const float* dloss,
                                                        long long dloss_stride, const float* denom, void* dx, int C,
                                                        long long ignore_index, float smoothing, int vec4, int kind)
{
    const long long m = blockIdx.x;
    const long long t = target[m];
    const long long row0 = m * C;
    if (!(t >= 0 && t < C && t != ignore_index)) {   // ignored: 0; an index out of range: NaN
        const float g = t == ignore_index ? 0.0f : __int_as_float(0x7fc00000);
        for (int c = threadIdx.x; c < C; c += blockDim.x) grad_store(dx, row0 + c, g, kind);
        return;
    }
    const float scale = dloss[m * dloss_stride] / (denom ? denom[0] : 1.0f);
    const float w_t = weight ? weight[t] : 1.0f, total = w_total ? w_total[0] : (float)C;
    const float row_max = stats[2 * m], log_sum = stats[2 * m + 1];
    if (vec4) {
        for (int q = threadIdx.x; q < C / 4; q += blockDim.x) {
            const float4 v = logits4(x, row0 / 4 + q, kind);
            const int c = 4 * q;
            grads4(dx, row0 / 4 + q,
                   make_float4(cross_entropy_grad(v.x, c, t, row_max, log_sum, scale, w_t, weight, total, C, smoothing),
                               cross_entropy_grad(v.y, c + 1, t, row_max, log_sum, scale, w_t, weight, total, C, smoothing),
                               cross_entropy_grad(v.z, c + 2, t, row_max, log_sum, scale, w_t, weight, total, C, smoothing),
                               cross_entropy_grad(v.w, c + 3, t, row_max, log_sum, scale, w_t, weight, total, C, smoothing)),
                   kind);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            grad_store(dx, row0 + c,
                       cross_entropy_grad(logit_at(x, row0 + c, kind), c, t, row_max, log_sum, scale, w_t, weight, total,
                                          C, smoothing),
                       kind);
    }
}
