// Batch normalization, spatial and per-activation: training forward (batch statistics, running
// averages), inference forward and the backward pass. Formulas: minidl/primitives/batch_norm.py.
//
// The launcher views x as (outer, C, inner) with one statistic per c:
//   spatial NCHW: (N, C, H*W)      spatial NHWC: (N*H*W, C, 1)      per_activation: (N, F, 1).
//
// Training forward, two launches (cuDNN's count): pass 1 runs step 2 in its last block per channel (the
// threadFenceReduction pattern, last_of_column below); the finalize kernels run separately only inside a
// CUDA-graph capture that has no counters yet. The steps:
//  1. partial statistics, one-pass Welford (count, mean, M2): the whole reduction of one channel
//     (N*H*W values) is split over S blocks so that C*S blocks fill the GPU even when C is small.
//       * inner > 1 ("planes"): grid (C, S); the S blocks of channel c walk its N planes as one flat
//         range of float4s (PlaneWalk: block `split`'s threads take float4s split * 256 + t, then every
//         S * 256th), coalesced, UNROLL = 4 float4s in flight per thread, folded into the thread's Welford
//         state as one two-pass batch of 16 (Chan's merge: one division per 16 values). (Without float4
//         alignment: pieces (n, chunk) number split, split + S, ..., one value at a time.)
//       * inner == 1 ("rows", x is an (R, C) matrix): a block is 32 channels x 8 row groups, so a
//         warp reads 32 consecutive channels of one row (128 coalesced bytes); grid (C/32, S).
//     Each block merges its threads' states (warp shuffles, then shared memory) and writes one
//     partial (count, mean, M2) per channel.
//  2. finalize, one thread per channel: merges the S partials in a fixed order (deterministic),
//     writes saved_mean and saved_invstd, updates running_mean/running_var in place (unbiased
//     variance, momentum), and the per-channel affine (mean, scale = gamma * invstd, shift = beta);
//     the thread of channel 0 also counts the batch in the layer's num_batches_tracked when given
//     (what would otherwise be one more launch per layer and step, `num_batches_tracked += 1`).
//  3. apply: y = (x - mean[c]) * scale[c] + shift[c], a float4 grid-stride elementwise pass.
// DRAM traffic: read x twice, write y once (the minimum for a two-pass method without keeping the
// whole batch on chip).
//
// Backward, two launches likewise: the same two reductions (sum dy and sum dy * x_hat, split over blocks)
// with, in the last block per channel, the finalize that folds them into dx = k1[c] * dy + k2[c] * (x -
// mean[c]) + k3[c]; then that elementwise pass.
//
// Fused batch norm + ReLU (the "fewer, fatter kernels" of a conv-BN-ReLU block): the forward runs
// the same statistics and finalize, and its apply writes max(y, 0) (batch_norm_relu_apply); the
// backward recomputes the BN output from x and the saved statistics (no extra saved array) and
// masks dy where it is <= 0 inside the reductions and the dx pass (batch_norm_relu_grads_*,
// batch_norm_relu_backward_dx). Against BN then ReLU: one launch fewer each way, and the
// backward no longer writes and re-reads the masked gradient (5 full-size passes instead of 8).
// Results equal the unfused pair bit for bit: both go through bn_value(), one fixed rounding.
//
// Welford (1962) rather than sum / sum of squares: E[x^2] - E[x]^2 cancels catastrophically in
// float32 when |mean| >> std; Welford's running mean and M2 do not.
#include "elementwise_common.cuh"

// float4 loads each thread issues before using them (memory-level parallelism).
#define UNROLL 4

// ---------------------------------------------------------------------------------------------
// Welford states and their merge (Chan, Golub & LeVeque 1979).
// ---------------------------------------------------------------------------------------------
struct Welford {
    float count, mean, m2;
};

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b)
{
    const float count = a.count + b.count;
    if (count == 0.0f) return a;
    const float delta = b.mean - a.mean;
    const float b_share = b.count / count;
    Welford r;
    r.count = count;
    r.mean = a.mean + delta * b_share;
    r.m2 = a.m2 + b.m2 + delta * delta * a.count * b_share;
    return r;
}

__device__ __forceinline__ void welford_add(Welford& w, float v)
{
    w.count += 1.0f;
    const float delta = v - w.mean;
    w.mean += delta / w.count;
    w.m2 += delta * (v - w.mean);
}

__device__ __forceinline__ void welford_add4(Welford& w, float4 v)
{
    Welford batch;
    batch.count = 4.0f;
    batch.mean = 0.25f * ((v.x + v.y) + (v.z + v.w));
    const float dx = v.x - batch.mean, dy = v.y - batch.mean, dz = v.z - batch.mean, dw = v.w - batch.mean;
    batch.m2 = (dx * dx + dy * dy) + (dz * dz + dw * dw);
    w = welford_merge(w, batch);
}

// The first `valid` of UNROLL float4s (the rest zeros) as one batch: mean and M2 in two passes over the
// registers, then one merge (one division per 4 * UNROLL values instead of per 4).
__device__ __forceinline__ void welford_add_batch(Welford& w, const float4 (&v)[UNROLL], int valid)
{
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    Welford batch;
    batch.count = 4.0f * valid;
    batch.mean = sum / batch.count;
    float m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) {
        const float dx = v[k].x - batch.mean, dy = v[k].y - batch.mean, dz = v[k].z - batch.mean,
                    dw = v[k].w - batch.mean;
        m2 += k < valid ? (dx * dx + dy * dy) + (dz * dz + dw * dw) : 0.0f;
    }
    batch.m2 = m2;
    w = welford_merge(w, batch);
}

__device__ __forceinline__ Welford welford_shfl_xor(Welford w, int offset)
{
    Welford r;
    r.count = __shfl_xor_sync(0xffffffffu, w.count, offset);
    r.mean = __shfl_xor_sync(0xffffffffu, w.mean, offset);
    r.m2 = __shfl_xor_sync(0xffffffffu, w.m2, offset);
    return r;
}

// Merge over the block (blockDim.x a multiple of 32); thread 0 gets the result.
__device__ __forceinline__ Welford welford_block_merge(Welford w)
{
    __shared__ Welford warp_states[32];
    for (int offset = 16; offset > 0; offset >>= 1) w = welford_merge(w, welford_shfl_xor(w, offset));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_states[warp] = w;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); ++i) w = welford_merge(w, warp_states[i]);
    }
    return w;
}

// The planes kernels' vectorized walk over one channel: its N planes of q = inner / 4 float4s seen as one flat
// range v = n * q + i, taken by the S blocks of the channel's column and their threads in turn (v += step = S *
// blockDim), UNROLL float4s in flight per thread. (n, i) advance by constants, so the walk divides once per thread;
// small planes (a 4x4 map is 4 float4s) keep every thread busy, where one piece per pass left most of them idle.
struct PlaneWalk {
    long long v, n, i;          // this thread's next float4: flat index, plane, offset in the plane
    long long q, total, step, dn, di;
    int c, C;
    __device__ PlaneWalk(int c_, int C_, int N, long long inner, int split, int S) : c(c_), C(C_)
    {
        q = inner / 4;
        total = (long long)N * q;
        step = (long long)S * blockDim.x;
        dn = step / q;
        di = step - dn * q;
        v = (long long)split * blockDim.x + threadIdx.x;
        n = v / q;
        i = v - n * q;
    }
    __device__ __forceinline__ bool more() const { return v < total; }
    __device__ __forceinline__ long long index() const { return (n * C + c) * q + i; }   // in float4s of the data
    __device__ __forceinline__ void next()
    {
        v += step;
        n += dn;
        i += di;
        if (i >= q) {
            i -= q;
            ++n;
        }
    }
};

// A piece of channel c for the planes kernels: piece u = (n, chunk) covers
// x[(n*C + c)*inner + chunk*chunk_len ...], at most chunk_len values.
struct Piece {
    long long begin, length;
};

__device__ __forceinline__ Piece piece_of(long long u, int c, int C, long long inner, int chunks, long long chunk_len)
{
    const long long n = u / chunks, chunk = u - n * chunks;
    const long long start = chunk * chunk_len;
    Piece p;
    p.begin = (n * C + c) * inner + start;
    p.length = min(chunk_len, inner - start);
    return p;
}

// One launch per reduction: the last block of each column of the grid (blockIdx.x: a channel, or a tile of
// 32 channels) to finish its partial sums runs the finalize for that column, the same code as the finalize
// kernel (so the same bits). Blocks count themselves in arrivals[blockIdx.x] after a fence that makes their
// partial sums visible (CUDA's threadFenceReduction pattern); the last sets the count back to zero, so the
// counters stay zeroed between launches and a CUDA graph can replay the kernel. arrivals == null: the
// launcher runs the finalize kernel after (a capture that has no counters yet).
__device__ __forceinline__ bool last_of_column(unsigned int* arrivals)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = atomicAdd(arrivals + blockIdx.x, 1u) == gridDim.y - 1;
        if (last) arrivals[blockIdx.x] = 0u;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// The finalize of the statistics, one channel (see batch_norm_finalize_stats). Partial sums read through L2
// (__ldcg): other blocks wrote them during this launch.
struct StatsFinish {
    float eps, momentum;
    const float *gamma, *beta_;
    float *running_mean, *running_var, *saved_mean, *saved_invstd, *affine;
    long long* batches;   // the layer's num_batches_tracked (0-d int64), counted here; may be null
};

__device__ __forceinline__ void finalize_stats_channel(int c, const float* partial, int S, int C, const StatsFinish& f)
{
    const long long plane = (long long)S * C;
    Welford w = {0.0f, 0.0f, 0.0f};
    for (int s = 0; s < S; ++s) {
        const long long slot = (long long)s * C + c;
        const Welford p = {__ldcg(partial + slot), __ldcg(partial + plane + slot), __ldcg(partial + 2 * plane + slot)};
        w = welford_merge(w, p);
    }
    const float var = w.m2 / w.count;  // biased: what normalises this batch
    const float invstd = 1.0f / sqrtf(var + f.eps);
    f.saved_mean[c] = w.mean;
    f.saved_invstd[c] = invstd;
    if (f.running_mean != nullptr) {
        const float unbiased = w.m2 / (w.count - 1.0f);
        f.running_mean[c] = (1.0f - f.momentum) * f.running_mean[c] + f.momentum * w.mean;
        f.running_var[c] = (1.0f - f.momentum) * f.running_var[c] + f.momentum * unbiased;
    }
    if (c == 0 && f.batches != nullptr) *f.batches += 1;   // one batch more: channel 0 is finalized once a launch
    f.affine[c] = w.mean;
    f.affine[C + c] = f.gamma != nullptr ? f.gamma[c] * invstd : invstd;
    f.affine[2 * C + c] = f.beta_ != nullptr ? f.beta_[c] : 0.0f;
}

#define STATS_FINISH_PARAMS unsigned int *arrivals, float eps, float momentum, const float *gamma, const float *beta_, \
    float *running_mean, float *running_var, float *saved_mean, float *saved_invstd, float *affine, long long *batches
#define STATS_FINISH {eps, momentum, gamma, beta_, running_mean, running_var, saved_mean, saved_invstd, affine, batches}

// partial: (3, S, C) = counts, means, M2s of each (split, channel).
template <int KIND>
__global__ void batch_norm_stats_planes(const typename Data<KIND>::T* x, float* partial, int N, int C, long long inner,
                                        int chunks, long long chunk_len, int vectorized, STATS_FINISH_PARAMS)
{
    const int c = blockIdx.x, split = blockIdx.y, S = gridDim.y;
    Welford w = {0.0f, 0.0f, 0.0f};
    if (vectorized) {  // inner a multiple of 4: one Welford merge per UNROLL float4s (a two-pass batch of 16)
        for (PlaneWalk walk(c, C, N, inner, split, S); walk.more();) {
            float4 values[UNROLL];  // loads in flight before the (dependent) update
            int valid = 0;
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                values[k] = walk.more() ? load4(x, walk.index(), KIND) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                valid += walk.more();
                walk.next();
            }
            welford_add_batch(w, values, valid);
        }
    } else {
        for (long long u = split; u < (long long)N * chunks; u += S) {
            const Piece p = piece_of(u, c, C, inner, chunks, chunk_len);
            for (long long i = threadIdx.x; i < p.length; i += blockDim.x) welford_add(w, load_data(x, p.begin + i, KIND));
        }
    }
    w = welford_block_merge(w);
    if (threadIdx.x == 0) {
        const long long slot = (long long)split * C + c, plane = (long long)S * C;
        partial[slot] = w.count;
        partial[plane + slot] = w.mean;
        partial[2 * plane + slot] = w.m2;
    }
    if (arrivals != nullptr && last_of_column(arrivals) && threadIdx.x == 0)
        finalize_stats_channel(c, partial, S, C, StatsFinish STATS_FINISH);
}

#define ROW_TILE_CHANNELS 32
#define ROW_TILE_GROUPS 8   // blockDim = (32, 8)

template <int KIND>
__global__ void batch_norm_stats_rows(const typename Data<KIND>::T* x, float* partial, long long R, int C,
                                      STATS_FINISH_PARAMS)
{
    __shared__ Welford states[ROW_TILE_GROUPS][ROW_TILE_CHANNELS];
    const int tx = threadIdx.x, ty = threadIdx.y, split = blockIdx.y, S = gridDim.y;
    const int c = blockIdx.x * ROW_TILE_CHANNELS + tx;
    Welford w = {0.0f, 0.0f, 0.0f};
    if (c < C) {
        for (long long r = (long long)split * ROW_TILE_GROUPS + ty; r < R; r += (long long)S * ROW_TILE_GROUPS)
            welford_add(w, load_data(x, r * C + c, KIND));
    }
    states[ty][tx] = w;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int g = 1; g < ROW_TILE_GROUPS; ++g) w = welford_merge(w, states[g][tx]);
        const long long slot = (long long)split * C + c, plane = (long long)S * C;
        partial[slot] = w.count;
        partial[plane + slot] = w.mean;
        partial[2 * plane + slot] = w.m2;
    }
    if (arrivals != nullptr && last_of_column(arrivals) && ty == 0 && c < C)
        finalize_stats_channel(c, partial, S, C, StatsFinish STATS_FINISH);
}

// One thread per channel. gamma, beta_, running_mean, running_var may be null.
// affine: (3, C) = mean, scale, shift for the apply kernel.
extern "C" __global__ void batch_norm_finalize_stats(const float* partial, int S, int C, float eps, float momentum,
                                                     const float* gamma, const float* beta_, float* running_mean,
                                                     float* running_var, float* saved_mean, float* saved_invstd,
                                                     float* affine, long long* batches)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) finalize_stats_channel(c, partial, S, C, StatsFinish STATS_FINISH);
}

// Inference: the affine from the running statistics.
extern "C" __global__ void batch_norm_inference_affine(const float* running_mean, const float* running_var,
                                                       const float* gamma, const float* beta_, float eps, int C,
                                                       float* affine)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float invstd = 1.0f / sqrtf(running_var[c] + eps);
    affine[c] = running_mean[c];
    affine[C + c] = gamma != nullptr ? gamma[c] * invstd : invstd;
    affine[2 * C + c] = beta_ != nullptr ? beta_[c] : 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Elementwise passes with a per-channel lookup, c = (j / inner) % C.
// vec_mode: 0 scalar; 1 float4 with inner % 4 == 0 (the 4 values share a channel);
//           2 float4 with inner == 1 and C % 4 == 0 (4 consecutive channels).
// 32-bit index arithmetic when it cannot overflow (the division is much cheaper).
// ---------------------------------------------------------------------------------------------
template <typename Index>
__device__ __forceinline__ int channel_of(Index j, Index inner, int C)
{
    return (int)((j / inner) % C);
}

// The batch-norm output of one value, (x - mean) * scale + shift, with a fixed rounding (no FMA
// contraction): the apply pass writes it, and the fused BN+ReLU backward recomputes it to know
// where the ReLU passed the gradient, so the two must agree to the bit.
__device__ __forceinline__ float bn_value(float x, float mean, float scale, float shift)
{
    return __fadd_rn(__fmul_rn(scale, __fsub_rn(x, mean)), shift);
}

// The ReLU of kernels/activation.cu (ACT_RELU): NaN passes through.
__device__ __forceinline__ float relu_value(float v)
{
    return v < 0.0f ? 0.0f : v;
}

// Where the fused BN+ReLU backward lets dy through: the recomputed BN output is > 0 (the ReLU's
// gradient rule, x > 0 ? dy : 0). scale = gamma * invstd as in batch_norm_finalize_stats.
struct ReluMask {
    const float *gamma, *beta_, *invstd;  // invstd == nullptr: no mask
    __device__ __forceinline__ float scale(int c) const { return gamma != nullptr ? __fmul_rn(gamma[c], invstd[c]) : invstd[c]; }
    __device__ __forceinline__ float shift(int c) const { return beta_ != nullptr ? beta_[c] : 0.0f; }
    __device__ __forceinline__ float apply(float dy, float x, float mean, float scale, float shift) const
    {
        return bn_value(x, mean, scale, shift) > 0.0f ? dy : 0.0f;
    }
};

// out = k1[c] * a + k2[c] * (b - mean[c]) + k3[c]:
//   apply:    a = 0,  b = x, k2 = scale, k3 = shift                 y = (x - mean) * scale + shift
//   backward: a = dy, b = x, k1, k2, k3 from the finalize           dx
// relu: the apply of the fused BN+ReLU (y = max(v, 0)); mask: the fused backward (a = masked dy).
struct ChannelAffine {
    const float *mean, *k1, *k2, *k3;
    int relu;
    ReluMask mask;
    __device__ __forceinline__ float operator()(int c, float a, float b) const
    {
        const float m = mean[c];
        if (k1 == nullptr) {
            const float v = bn_value(b, m, k2[c], k3[c]);
            return relu ? relu_value(v) : v;
        }
        if (mask.invstd != nullptr) a = mask.apply(a, b, m, mask.scale(c), mask.shift(c));
        return __fadd_rn(__fadd_rn(__fmul_rn(k1[c], a), __fmul_rn(k2[c], __fsub_rn(b, m))), k3[c]);
    }
};

template <int KIND, typename Index>
__device__ void channel_affine_impl(const typename Data<KIND>::T* a, const typename Data<KIND>::T* b,
                                    typename Data<KIND>::T* out, Index total, int C, Index inner, int vec_mode,
                                    ChannelAffine f)
{
    const Index start = (Index)blockIdx.x * blockDim.x + threadIdx.x;
    const Index stride = (Index)gridDim.x * blockDim.x;
    const Index n_vec = vec_mode ? total / 4 : 0;
    const int step = vec_mode == 2 ? 1 : 0;  // channel step between the 4 values of a float4
    Index v = start;
    // UNROLL independent float4 loads in flight per thread before any is used.
    for (; v + (UNROLL - 1) * stride < n_vec; v += UNROLL * stride) {
        float4 av[UNROLL], bv[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            bv[k] = load4(b, v + k * stride, KIND);
            av[k] = a != nullptr ? load4(a, v + k * stride, KIND) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            const int c0 = channel_of<Index>(4 * (v + k * stride), inner, C);
            store4(out, v + k * stride, make_float4(f(c0, av[k].x, bv[k].x), f(c0 + step, av[k].y, bv[k].y),
                                                    f(c0 + 2 * step, av[k].z, bv[k].z),
                                                    f(c0 + 3 * step, av[k].w, bv[k].w)), KIND);
        }
    }
    for (; v < n_vec; v += stride) {
        const int c0 = channel_of<Index>(4 * v, inner, C);
        const float4 bv = load4(b, v, KIND);
        const float4 av = a != nullptr ? load4(a, v, KIND) : make_float4(0.f, 0.f, 0.f, 0.f);
        store4(out, v, make_float4(f(c0, av.x, bv.x), f(c0 + step, av.y, bv.y), f(c0 + 2 * step, av.z, bv.z),
                                   f(c0 + 3 * step, av.w, bv.w)), KIND);
    }
    for (Index j = n_vec * 4 + start; j < total; j += stride) {
        store_data(out, j, f(channel_of<Index>(j, inner, C), a != nullptr ? load_data(a, j, KIND) : 0.0f,
                             load_data(b, j, KIND)), KIND);
    }
}

template <int KIND>
__device__ __forceinline__ void channel_affine(const typename Data<KIND>::T* a, const typename Data<KIND>::T* b,
                                               typename Data<KIND>::T* out, long long total, int C, long long inner,
                                               int vec_mode, ChannelAffine f)
{
    if (total < (1LL << 30)) channel_affine_impl<KIND, int>(a, b, out, (int)total, C, (int)inner, vec_mode, f);
    else channel_affine_impl<KIND, long long>(a, b, out, total, C, inner, vec_mode, f);
}

// y = (x - mean[c]) * scale[c] + shift[c]; affine = (3, C) from a finalize kernel.
template <int KIND>
__global__ void batch_norm_apply(const typename Data<KIND>::T* x, typename Data<KIND>::T* y, const float* affine,
                                 long long total, int C, long long inner, int vec_mode)
{
    const ChannelAffine f = {affine, nullptr, affine + C, affine + 2 * C, 0, {nullptr, nullptr, nullptr}};
    channel_affine<KIND>(nullptr, x, y, total, C, inner, vec_mode, f);
}

// Fused BN + ReLU forward: y = max((x - mean[c]) * scale[c] + shift[c], 0) in the same pass.
template <int KIND>
__global__ void batch_norm_relu_apply(const typename Data<KIND>::T* x, typename Data<KIND>::T* y, const float* affine,
                                      long long total, int C, long long inner, int vec_mode)
{
    const ChannelAffine f = {affine, nullptr, affine + C, affine + 2 * C, 1, {nullptr, nullptr, nullptr}};
    channel_affine<KIND>(nullptr, x, y, total, C, inner, vec_mode, f);
}

// ---------------------------------------------------------------------------------------------
// Backward reductions: sum(dy) and sum(dy * (x - mean)) per channel (x_hat = (x - mean) * invstd
// is applied in the finalize). partial: (2, S, C).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void block_sum2(float& s0, float& s1)
{
    __shared__ float scratch[32];
    s0 = block_sum(s0, scratch);
    s1 = block_sum(s1, scratch);
}

// The finalize of the gradients, one channel (see batch_norm_finalize_grads).
struct GradsFinish {
    unsigned int* arrivals;
    float count;
    const float *gamma, *saved_mean, *saved_invstd;
    float *dgamma, *dbeta, *coef;
};

__device__ __forceinline__ void finalize_grads_channel(int c, const float* partial, int S, int C, const GradsFinish& f)
{
    float sum_dy = 0.0f, sum_dy_xc = 0.0f;
    for (int s = 0; s < S; ++s) {
        sum_dy += __ldcg(partial + (long long)s * C + c);
        sum_dy_xc += __ldcg(partial + (long long)S * C + (long long)s * C + c);
    }
    const float invstd = f.saved_invstd[c];
    const float g = f.gamma != nullptr ? f.gamma[c] : 1.0f;
    const float dg = invstd * sum_dy_xc;
    if (f.dgamma != nullptr) f.dgamma[c] = dg;
    if (f.dbeta != nullptr) f.dbeta[c] = sum_dy;
    f.coef[c] = f.saved_mean[c];
    f.coef[C + c] = g * invstd;
    f.coef[2 * C + c] = -g * invstd * invstd * dg / f.count;
    f.coef[3 * C + c] = -g * invstd * sum_dy / f.count;
}

#define GRADS_FINISH_PARAMS unsigned int *arrivals, float count, const float *gamma_f, const float *saved_invstd, \
    float *dgamma, float *dbeta, float *coef
#define GRADS_FINISH {arrivals, count, gamma_f, mean, saved_invstd, dgamma, dbeta, coef}

template <int KIND, bool MASKED>
__device__ __forceinline__ void grads_planes(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                             const float* mean, float* partial, int N,
                                             int C, long long inner, int chunks, long long chunk_len, int vectorized,
                                             ReluMask mask, const GradsFinish& fin)
{
    const int c = blockIdx.x, split = blockIdx.y, S = gridDim.y;
    const float m = mean[c];
    const float scale = MASKED ? mask.scale(c) : 0.0f, shift = MASKED ? mask.shift(c) : 0.0f;
    float sum_dy = 0.0f, sum_dy_xc = 0.0f;
    if (vectorized) {  // UNROLL float4s of x and of dy in flight per thread (PlaneWalk)
        for (PlaneWalk walk(c, C, N, inner, split, S); walk.more();) {
            float4 xs[UNROLL], gs[UNROLL];
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const bool in = walk.more();
                xs[k] = in ? load4(x, walk.index(), KIND) : make_float4(m, m, m, m);
                gs[k] = in ? load4(dy, walk.index(), KIND) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                walk.next();
            }
#pragma unroll
            for (int k = 0; k < UNROLL; ++k) {
                const float4 xv = xs[k];
                float4 gv = gs[k];
                if (MASKED) {
                    gv.x = mask.apply(gv.x, xv.x, m, scale, shift);
                    gv.y = mask.apply(gv.y, xv.y, m, scale, shift);
                    gv.z = mask.apply(gv.z, xv.z, m, scale, shift);
                    gv.w = mask.apply(gv.w, xv.w, m, scale, shift);
                }
                sum_dy += (gv.x + gv.y) + (gv.z + gv.w);
                sum_dy_xc += (gv.x * (xv.x - m) + gv.y * (xv.y - m)) + (gv.z * (xv.z - m) + gv.w * (xv.w - m));
            }
        }
    } else {
        for (long long u = split; u < (long long)N * chunks; u += S) {
            const Piece p = piece_of(u, c, C, inner, chunks, chunk_len);
            for (long long i = threadIdx.x; i < p.length; i += blockDim.x) {
                const float xi = load_data(x, p.begin + i, KIND), dyi = load_data(dy, p.begin + i, KIND);
                const float g = MASKED ? mask.apply(dyi, xi, m, scale, shift) : dyi;
                sum_dy += g;
                sum_dy_xc += g * (xi - m);
            }
        }
    }
    block_sum2(sum_dy, sum_dy_xc);
    if (threadIdx.x == 0) {
        const long long slot = (long long)split * C + c;
        partial[slot] = sum_dy;
        partial[(long long)S * C + slot] = sum_dy_xc;
    }
    if (fin.arrivals != nullptr && last_of_column(fin.arrivals) && threadIdx.x == 0)
        finalize_grads_channel(c, partial, S, C, fin);
}

template <int KIND, bool MASKED>
__device__ __forceinline__ void grads_rows(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                           const float* mean, float* partial, long long R, int C, ReluMask mask,
                                           const GradsFinish& fin)
{
    __shared__ float sums[2][ROW_TILE_GROUPS][ROW_TILE_CHANNELS];
    const int tx = threadIdx.x, ty = threadIdx.y, split = blockIdx.y, S = gridDim.y;
    const int c = blockIdx.x * ROW_TILE_CHANNELS + tx;
    float sum_dy = 0.0f, sum_dy_xc = 0.0f;
    if (c < C) {
        const float m = mean[c];
        const float scale = MASKED ? mask.scale(c) : 0.0f, shift = MASKED ? mask.shift(c) : 0.0f;
        for (long long r = (long long)split * ROW_TILE_GROUPS + ty; r < R; r += (long long)S * ROW_TILE_GROUPS) {
            const float xi = load_data(x, r * C + c, KIND), dyi = load_data(dy, r * C + c, KIND);
            const float g = MASKED ? mask.apply(dyi, xi, m, scale, shift) : dyi;
            sum_dy += g;
            sum_dy_xc += g * (xi - m);
        }
    }
    sums[0][ty][tx] = sum_dy;
    sums[1][ty][tx] = sum_dy_xc;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int g = 1; g < ROW_TILE_GROUPS; ++g) {
            sum_dy += sums[0][g][tx];
            sum_dy_xc += sums[1][g][tx];
        }
        const long long slot = (long long)split * C + c;
        partial[slot] = sum_dy;
        partial[(long long)S * C + slot] = sum_dy_xc;
    }
    if (fin.arrivals != nullptr && last_of_column(fin.arrivals) && ty == 0 && c < C)
        finalize_grads_channel(c, partial, S, C, fin);
}

template <int KIND>
__global__ void batch_norm_grads_planes(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                        const float* mean, float* partial, int N, int C, long long inner, int chunks,
                                        long long chunk_len, int vectorized, GRADS_FINISH_PARAMS)
{
    grads_planes<KIND, false>(x, dy, mean, partial, N, C, inner, chunks, chunk_len, vectorized, {nullptr, nullptr, nullptr},
                        GradsFinish GRADS_FINISH);
}

template <int KIND>
__global__ void batch_norm_grads_rows(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                      const float* mean, float* partial, long long R, int C, GRADS_FINISH_PARAMS)
{
    grads_rows<KIND, false>(x, dy, mean, partial, R, C, {nullptr, nullptr, nullptr}, GradsFinish GRADS_FINISH);
}

// Fused BN + ReLU backward reductions: dy masked where the recomputed BN output is <= 0.
template <int KIND>
__global__ void batch_norm_relu_grads_planes(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                             const float* mean, float* partial, int N, int C, long long inner,
                                             int chunks, long long chunk_len, int vectorized, const float* gamma,
                                             const float* beta_, const float* invstd, GRADS_FINISH_PARAMS)
{
    grads_planes<KIND, true>(x, dy, mean, partial, N, C, inner, chunks, chunk_len, vectorized, {gamma, beta_, invstd},
                       GradsFinish GRADS_FINISH);
}

template <int KIND>
__global__ void batch_norm_relu_grads_rows(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                           const float* mean, float* partial, long long R, int C, const float* gamma,
                                           const float* beta_, const float* invstd, GRADS_FINISH_PARAMS)
{
    grads_rows<KIND, true>(x, dy, mean, partial, R, C, {gamma, beta_, invstd}, GradsFinish GRADS_FINISH);
}

// One thread per channel: dbeta = sum dy, dgamma = invstd * sum dy (x - mean), and the
// coefficients of dx = k1 * dy + k2 * (x - mean) + k3, M values per channel:
//   k1 = g * invstd,  k2 = -g * invstd^2 * dgamma / M,  k3 = -g * invstd * dbeta / M   (g = gamma or 1).
// coef: (4, C) = mean, k1, k2, k3. dgamma/dbeta may be null (affine=False).
extern "C" __global__ void batch_norm_finalize_grads(const float* partial, int S, int C, float count,
                                                     const float* gamma, const float* saved_mean,
                                                     const float* saved_invstd, float* dgamma, float* dbeta,
                                                     float* coef)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) finalize_grads_channel(c, partial, S, C, GradsFinish{nullptr, count, gamma, saved_mean, saved_invstd,
                                                                      dgamma, dbeta, coef});
}

template <int KIND>
__global__ void batch_norm_backward_dx(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                       typename Data<KIND>::T* dx, const float* coef, long long total, int C,
                                       long long inner, int vec_mode)
{
    const ChannelAffine f = {coef, coef + C, coef + 2 * C, coef + 3 * C, 0, {nullptr, nullptr, nullptr}};
    channel_affine<KIND>(dy, x, dx, total, C, inner, vec_mode, f);
}

// Fused BN + ReLU backward dx: dy masked as in the reductions, then the BN backward's affine.
template <int KIND>
__global__ void batch_norm_relu_backward_dx(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                            typename Data<KIND>::T* dx, const float* coef, long long total, int C,
                                            long long inner, int vec_mode, const float* gamma, const float* beta_,
                                            const float* invstd)
{
    const ChannelAffine f = {coef, coef + C, coef + 2 * C, coef + 3 * C, 0, {gamma, beta_, invstd}};
    channel_affine<KIND>(dy, x, dx, total, C, inner, vec_mode, f);
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh: every data kind of the templated kernels, compiled by nvcc (NVRTC instantiates by
// name: minidl/primitives/cuda/batch_norm.py).
#define MINIDL_BATCH_NORM_KIND(K) (void*)&batch_norm_stats_planes<K>, (void*)&batch_norm_stats_rows<K>, \
    (void*)&batch_norm_apply<K>, (void*)&batch_norm_relu_apply<K>, (void*)&batch_norm_grads_planes<K>, \
    (void*)&batch_norm_grads_rows<K>, (void*)&batch_norm_relu_grads_planes<K>, (void*)&batch_norm_relu_grads_rows<K>, \
    (void*)&batch_norm_backward_dx<K>, (void*)&batch_norm_relu_backward_dx<K>
void* minidl_batch_norm_instances[] = {MINIDL_BATCH_NORM_KIND(0), MINIDL_BATCH_NORM_KIND(1), MINIDL_BATCH_NORM_KIND(2)};
#endif
