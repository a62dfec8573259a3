// layer_norm.cu: layer norm and RMS norm over the last dimensions, forward and backward (formulas in
// minidl/primitives/layer_norm.py). x is viewed as (rows, n); every row is normalised on its own.
//
// KIND 0: float32 data; 1: float16; 2: bfloat16 (tc_common.cuh's storage types). Statistics and every
// sum are fp32 whatever the data type (as cuDNN's and torch's half kernels); weight and bias have x's type.
//
// Forward (layer_norm_forward): one warp per row. Each lane runs Welford's update over its elements
// (j = lane, lane + 32, ...: a warp reads 32 consecutive elements at a time), giving (count, mean, M2)
// for its part of the row; the 32 partial results are merged across the warp with shuffles (Chan et al.'s
// pairwise formula: n = na + nb, mean = ma + d nb / n, M2 = M2a + M2b + d^2 na nb / n with d = mb - ma).
// One pass for the statistics, free of the cancellation of sum(x^2) - n mean^2; a second pass over the
// row (from L1/L2: a row is at most a few KiB) writes y. RMS norm needs only sum(x^2).
//
// Backward, dx (layer_norm_backward_data): one warp per row; the two row means <g> and <g xhat> (g = dy
// weight) in one pass, then dx = rstd (g - <g> - xhat <g xhat>) in a second.
// Backward, dweight and dbias (layer_norm_backward_params): column sums over the rows of dy xhat and dy.
// Blocks of 32 x 8 threads own 32 columns of one chunk of rows (32 threads read 32 consecutive columns of a
// row: coalesced), reduce their 8 partial sums in shared memory and write one partial row per chunk; the last
// block of each column tile to finish adds the chunks up, in chunk order (one launch; `arrivals`: the blocks of a
// column tile count themselves there after a fence, the threadFenceReduction pattern, as the convolution's bias
// gradient does, and the last one sets the count back to zero). Without `arrivals` (a CUDA graph capture before
// the counters exist) layer_norm_params_finish adds them in a second launch: the same order, the same bits.
// Deterministic: the atomics only count; the sums are ordered.
#include "tc_common.cuh"

namespace minidl_layer_norm {

using namespace minidl_tc;

__device__ __forceinline__ void welford_merge(float& count, float& mean, float& m2, float cb, float mb, float m2b)
{
    const float n = count + cb;
    if (n == 0.f) return;
    const float d = mb - mean;
    mean += d * (cb / n);
    m2 += m2b + d * d * (count * cb / n);
    count = n;
}

__device__ __forceinline__ float warp_sum(float s)
{
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
    return s;
}

}  // namespace minidl_layer_norm

template <int KIND>
__global__ void layer_norm_forward(const typename minidl_tc::Storage<KIND>::T* x,
                                   const typename minidl_tc::Storage<KIND>::T* weight,
                                   const typename minidl_tc::Storage<KIND>::T* bias,
                                   typename minidl_tc::Storage<KIND>::T* y, float* mean_out, float* rstd_out,
                                   long long rows, int n, float eps, int rms)
{
    using namespace minidl_layer_norm;
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < rows;
         row += (long long)gridDim.x * warps) {
        const auto* xr = x + row * n;
        float mean = 0.f, rstd;
        if (rms) {
            float ss = 0.f;
            for (int j = lane; j < n; j += 32) {
                const float v = load_c<KIND>(xr + j);
                ss += v * v;
            }
            rstd = 1.f / sqrtf(warp_sum(ss) / n + eps);
        } else {
            float count = 0.f, m2 = 0.f;
            for (int j = lane; j < n; j += 32) {
                const float v = load_c<KIND>(xr + j);
                count += 1.f;
                const float d = v - mean;
                mean += d / count;
                m2 += d * (v - mean);
            }
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) {
                const float cb = __shfl_xor_sync(0xffffffffu, count, w);
                const float mb = __shfl_xor_sync(0xffffffffu, mean, w);
                const float m2b = __shfl_xor_sync(0xffffffffu, m2, w);
                welford_merge(count, mean, m2, cb, mb, m2b);
            }
            rstd = 1.f / sqrtf(m2 / n + eps);
        }
        auto* yr = y + row * n;
        for (int j = lane; j < n; j += 32) {
            float v = (load_c<KIND>(xr + j) - mean) * rstd;
            if (weight != nullptr) v *= load_c<KIND>(weight + j);
            if (bias != nullptr) v += load_c<KIND>(bias + j);
            store_c<KIND>(yr + j, v);
        }
        if (lane == 0) {
            if (mean_out != nullptr) mean_out[row] = mean;
            rstd_out[row] = rstd;
        }
    }
}

// dx = rstd (g - <g> - xhat <g xhat>) (layer norm), rstd (g - xhat <g xhat>) (RMS norm, mean == nullptr).
template <int KIND>
__global__ void layer_norm_backward_data(const typename minidl_tc::Storage<KIND>::T* x,
                                         const typename minidl_tc::Storage<KIND>::T* dy,
                                         const typename minidl_tc::Storage<KIND>::T* weight, const float* mean,
                                         const float* rstd, typename minidl_tc::Storage<KIND>::T* dx, long long rows,
                                         int n)
{
    using namespace minidl_layer_norm;
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < rows;
         row += (long long)gridDim.x * warps) {
        const auto* xr = x + row * n;
        const auto* gr = dy + row * n;
        const float mu = mean != nullptr ? mean[row] : 0.f, r = rstd[row];
        float sg = 0.f, sgx = 0.f;
        for (int j = lane; j < n; j += 32) {
            float g = load_c<KIND>(gr + j);
            if (weight != nullptr) g *= load_c<KIND>(weight + j);
            const float xhat = (load_c<KIND>(xr + j) - mu) * r;
            sg += g;
            sgx += g * xhat;
        }
        const float mg = mean != nullptr ? warp_sum(sg) / n : 0.f, mgx = warp_sum(sgx) / n;
        auto* dxr = dx + row * n;
        for (int j = lane; j < n; j += 32) {
            float g = load_c<KIND>(gr + j);
            if (weight != nullptr) g *= load_c<KIND>(weight + j);
            const float xhat = (load_c<KIND>(xr + j) - mu) * r;
            store_c<KIND>(dxr + j, r * (g - mg - xhat * mgx));
        }
    }
}

// Partial column sums of dy * xhat (-> part_w) and dy (-> part_b, when not null) over rows
// [chunk * rows_per_chunk, +rows_per_chunk): block (32, 8), grid (ceil(n / 32), chunks).
// Column `col` of dweight (and dbias) from the chunks' partial sums, added in chunk order (read through L2: other
// blocks of this launch wrote them).
template <int KIND>
__device__ __forceinline__ void params_finish_column(const float* part_w, const float* part_b,
                                                     typename minidl_tc::Storage<KIND>::T* dweight,
                                                     typename minidl_tc::Storage<KIND>::T* dbias, int chunks, int n,
                                                     int col)
{
    float w = 0.f, b = 0.f;
    for (int c = 0; c < chunks; ++c) {
        w += __ldcg(part_w + (long long)c * n + col);
        if (part_b != nullptr) b += __ldcg(part_b + (long long)c * n + col);
    }
    minidl_tc::store_c<KIND>(dweight + col, w);
    if (dbias != nullptr) minidl_tc::store_c<KIND>(dbias + col, b);
}

template <int KIND>
__global__ void layer_norm_backward_params(const typename minidl_tc::Storage<KIND>::T* x,
                                           const typename minidl_tc::Storage<KIND>::T* dy, const float* mean,
                                           const float* rstd, float* part_w, float* part_b, long long rows, int n,
                                           long long rows_per_chunk, unsigned int* arrivals,
                                           typename minidl_tc::Storage<KIND>::T* dweight,
                                           typename minidl_tc::Storage<KIND>::T* dbias)
{
    __shared__ bool last;
    using namespace minidl_tc;
    __shared__ float sw[8][33], sb[8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * 32 + tx;
    const long long start = (long long)blockIdx.y * rows_per_chunk;
    const long long end = min(rows, start + rows_per_chunk);
    float aw = 0.f, ab = 0.f;
    if (col < n) {
        for (long long row = start + ty; row < end; row += 8) {
            const float g = load_c<KIND>(dy + row * n + col);
            const float mu = mean != nullptr ? mean[row] : 0.f;
            aw += g * (load_c<KIND>(x + row * n + col) - mu) * rstd[row];
            ab += g;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && col < n) {
        float w = 0.f, b = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            w += sw[i][tx];
            b += sb[i][tx];
        }
        part_w[(long long)blockIdx.y * n + col] = w;
        if (part_b != nullptr) part_b[(long long)blockIdx.y * n + col] = b;
    }
    if (arrivals == nullptr) return;          // layer_norm_params_finish follows
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) last = atomicAdd(arrivals + blockIdx.x, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (ty == 0 && col < n) params_finish_column<KIND>(part_w, part_b, dweight, dbias, gridDim.y, n, col);
    if (tx == 0 && ty == 0) arrivals[blockIdx.x] = 0u;
}

template <int KIND>
__global__ void layer_norm_params_finish(const float* part_w, const float* part_b,
                                         typename minidl_tc::Storage<KIND>::T* dweight,
                                         typename minidl_tc::Storage<KIND>::T* dbias, int chunks, int n)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col < n) params_finish_column<KIND>(part_w, part_b, dweight, dbias, chunks, n, col);
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh: every instantiation the launcher can ask for (KIND 0, 1, 2), compiled by nvcc.
#define MINIDL_LAYER_NORM_KIND(K) \
    (void*)&layer_norm_forward<K>, (void*)&layer_norm_backward_data<K>, (void*)&layer_norm_backward_params<K>, \
    (void*)&layer_norm_params_finish<K>
void* minidl_layer_norm_instances[] = {MINIDL_LAYER_NORM_KIND(0), MINIDL_LAYER_NORM_KIND(1), MINIDL_LAYER_NORM_KIND(2)};
#endif
