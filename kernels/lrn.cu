// Local response normalization across channels, PyTorch's local_response_norm definition:
//   s_c = k + alpha / size * sum_{j = c - size/2}^{c + (size-1)/2} x_j^2      (out-of-range j: 0)
//   y_c = x_c * s_c^(-beta)
// Backward (window(c) as above; c runs over the channels whose window holds j):
//   dx_j = dy_j * s_j^(-beta) - 2 alpha beta / size * x_j * sum_{c = j - (size-1)/2}^{j + size/2} dy_c x_c s_c^(-beta-1)
//
// The launcher views x as (outer, C, inner): NCHW (N, C, H*W) or NHWC (N*H*W, C, 1), so the
// channel neighbours of element j are j +- inner.
// Threads -> data: one thread per element (grid-stride over the flat index), so adjacent threads
// read and write adjacent addresses in both layouts (coalesced). Each thread sums its window of
// `size` squares directly; the neighbours it reads are the ones its neighbouring threads (NHWC)
// or the blocks of nearby channels (NCHW) read too, so they come from L1/L2 and DRAM traffic stays
// near one read of x and one write of y. A sliding running sum would read less but accumulates
// rounding along C and serialises a thread over the whole channel axis.
// The backward recomputes s_c for each of the `size` channels around j (size^2 loads from cache,
// size + 1 powers) instead of reading y: it needs s_c anyway, and it stays correct when y was
// blended with alpha/beta.
#include "elementwise_common.cuh"

struct LRNParams {
    int size, before, after;  // window: [c - before, c + after], before = size/2, after = (size-1)/2
    float alpha_over_size, beta, k;
};

// s^e for s >= k > 0 as exp2(e * log2(s)): powf's general path (negative bases, integer
// exponents, overflow care) costs several times more, and its extra accuracy is not needed:
// the relative error here is about |e * log2(s)| * 2^-23, ~1e-6 for the usual ranges.
__device__ __forceinline__ float lrn_pow(float s, float e)
{
    return exp2f(e * log2f(s));
}

template <typename Index>
__device__ __forceinline__ float lrn_scale(const float* x, Index base, int c, int C, Index inner, const LRNParams& p)
{
    const int lo = max(c - p.before, 0), hi = min(c + p.after, C - 1);
    float sum = 0.0f;
    for (int j = lo; j <= hi; ++j) {
        const float v = x[base + (Index)j * inner];
        sum += v * v;
    }
    return p.k + p.alpha_over_size * sum;
}

template <typename Index>
__device__ void lrn_forward_impl(const float* x, float* y, Index total, int C, Index inner, LRNParams p, float alpha,
                                 float beta)
{
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        const Index o = idx / (inner * C), i = idx % inner;
        const int c = (int)((idx / inner) % C);
        const Index base = o * C * inner + i;  // channel 0 of this column
        const float s = lrn_scale<Index>(x, base, c, C, inner, p);
        y[idx] = blend(x[idx] * lrn_pow(s, -p.beta), y, idx, alpha, beta);
    }
}

template <typename Index>
__device__ void lrn_backward_impl(const float* x, const float* dy, float* dx, Index total, int C, Index inner,
                                  LRNParams p, float alpha, float beta)
{
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        const Index o = idx / (inner * C), i = idx % inner;
        const int j = (int)((idx / inner) % C);
        const Index base = o * C * inner + i;
        // Channels c whose window holds j: [j - after, j + before].
        const int lo = max(j - p.after, 0), hi = min(j + p.before, C - 1);
        float acc = 0.0f;
        for (int c = lo; c <= hi; ++c) {
            const Index at = base + (Index)c * inner;
            const float s_c = lrn_scale<Index>(x, base, c, C, inner, p);
            acc += dy[at] * x[at] * lrn_pow(s_c, -p.beta - 1.0f);
        }
        const float s_j = lrn_scale<Index>(x, base, j, C, inner, p);
        const float r = dy[idx] * lrn_pow(s_j, -p.beta) - 2.0f * p.alpha_over_size * p.beta * x[idx] * acc;
        dx[idx] = blend(r, dx, idx, alpha, beta);
    }
}

extern "C" __global__ void lrn_forward(const float* x, float* y, long long total, int C, long long inner, int size,
                                       float lrn_alpha, float lrn_beta, float lrn_k, float alpha, float beta)
{
    const LRNParams p = {size, size / 2, (size - 1) / 2, lrn_alpha / size, lrn_beta, lrn_k};
    if (total < (1LL << 30)) lrn_forward_impl<int>(x, y, (int)total, C, (int)inner, p, alpha, beta);
    else lrn_forward_impl<long long>(x, y, total, C, inner, p, alpha, beta);
}

extern "C" __global__ void lrn_backward(const float* x, const float* dy, float* dx, long long total, int C,
                                        long long inner, int size, float lrn_alpha, float lrn_beta, float lrn_k,
                                        float alpha, float beta)
{
    const LRNParams p = {size, size / 2, (size - 1) / 2, lrn_alpha / size, lrn_beta, lrn_k};
    if (total < (1LL << 30)) lrn_backward_impl<int>(x, dy, dx, (int)total, C, (int)inner, p, alpha, beta);
    else lrn_backward_impl<long long>(x, dy, dx, total, C, inner, p, alpha, beta);
}
