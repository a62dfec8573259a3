// Multi-tensor kernels (SGD, Adam/AdamW, RMSprop, zeroing, L2 norm, scaling, casting): one launch works on a whole list of tensors (every parameter of an
// optimizer's group, every gradient of a model) instead of one launch per tensor. The idea and the
// chunking are apex's `multi_tensor_apply` (and torch's `fused=True` optimizers).
//
// The tensor list: a device table of int64, one row of TABLE_COLS per tensor (multi_tensor.py
// builds it and caches it by pointer):
//     [0] param  [1] grad  [2] buf0  [3] buf1  [4] buf2   device pointers (0 = absent)
//     [5] numel  [6] aux (a per-tensor int: SGD's "first step" flag, the step-count slot)
//     [7] first chunk of this tensor (prefix sum of ceil(numel / CHUNK) over the rows before it)
// Thread mapping: the tensors are cut into chunks of CHUNK elements; a grid-stride loop of blocks
// walks the global chunk numbers 0 .. total_chunks-1, a block finds the tensor of its chunk by a
// binary search of column [7] (log2 of the number of tensors, reads that stay in L1) and its 256
// threads then run over the chunk's elements, coalesced. So a list of 60 tensors of very different
// sizes (a 64-element bias and a 2.4M-element weight) keeps every SM busy in one launch.
//
// Device-resident hyper-parameters: the learning rate, momentum, betas, eps, weight decay... are
// read from a small float64 array `hp` (written by the optimizer whenever group[key] is set, never
// read back on the host), the step counts from a float32 array (one slot per parameter), so a
// replayed CUDA graph sees the values a scheduler sets between replays.
// Loss scaling (GradScaler): grads are divided by *grad_scale (when given), and *found_inf != 0
// skips the whole update, step counts included, with no host read.
//
// Rounding: the per-parameter NumPy/CuPy code of minidl/optim is the reference. Every float
// operation here is written with the round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...),
// which the compiler never contracts into an FMA, in the reference's order, with the reference's
// float32 constants (the host computes them in float64 as Python does and rounds once): the
// results equal the reference bit for bit (Adam's bias corrections use the device's pow, which
// may differ from the host's in the last bit of a double; the float32 step size is then equal
// in all but rare cases).
#include "elementwise_common.cuh"

#define TABLE_COLS 8
#define CHUNK 8192

struct TensorRow {
    float *param, *grad, *buf0, *buf1, *buf2;
    long long numel, aux, first_chunk;
};

__device__ __forceinline__ TensorRow row_of(const long long* table, int t)
{
    const long long* r = table + (long long)t * TABLE_COLS;
    TensorRow row;
    row.param = reinterpret_cast<float*>(r[0]);
    row.grad = reinterpret_cast<float*>(r[1]);
    row.buf0 = reinterpret_cast<float*>(r[2]);
    row.buf1 = reinterpret_cast<float*>(r[3]);
    row.buf2 = reinterpret_cast<float*>(r[4]);
    row.numel = r[5];
    row.aux = r[6];
    row.first_chunk = r[7];
    return row;
}

// The tensor that owns global chunk `chunk`: the last t with first_chunk[t] <= chunk.
__device__ __forceinline__ int tensor_of_chunk(const long long* table, int n_tensors, long long chunk)
{
    int lo = 0, hi = n_tensors - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (table[(long long)mid * TABLE_COLS + 7] <= chunk) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Every array of the row starts on a 16-byte boundary (then so does every chunk: CHUNK % 4 == 0): float4 passes.
__device__ __forceinline__ bool aligned4(const TensorRow& row)
{
    const unsigned long long bits = reinterpret_cast<unsigned long long>(row.param) |
                                    reinterpret_cast<unsigned long long>(row.grad) |
                                    reinterpret_cast<unsigned long long>(row.buf0) |
                                    reinterpret_cast<unsigned long long>(row.buf1) |
                                    reinterpret_cast<unsigned long long>(row.buf2);
    return (bits & 15) == 0;   // (an absent buffer is a null pointer: aligned)
}

__device__ __forceinline__ bool update_skipped(const float* found_inf)
{
    return found_inf != nullptr && *found_inf != 0.0f;
}

// g as the reference sees it: unscaled (GradScaler), then negated to maximize.
__device__ __forceinline__ float effective_grad(float g, const float* grad_scale, int maximize)
{
    if (grad_scale != nullptr) g = __fdiv_rn(g, *grad_scale);
    return maximize ? -g : g;
}

// ---------------------------------------------------------------------------------------------
// SGD (momentum, dampening, Nesterov, weight decay): buf0 = momentum buffer (absent if momentum 0),
// aux = 1 on a buffer's first step (buf = g, undamped, as PyTorch).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void multi_tensor_sgd(const long long* table, int n_tensors, long long total_chunks,
                                            const double* hp, int nesterov, int maximize,
                                            const float* grad_scale, const float* found_inf)
{
    if (update_skipped(found_inf)) return;
    // hp = (lr, momentum, dampening, weight_decay), float64 on the device; the float32 constants are
    // rounded from them exactly as the host reference rounds its Python floats.
    const float lr_f = (float)hp[0], momentum = (float)hp[1], one_minus_dampening = (float)(1.0 - hp[2]);
    const float weight_decay = (float)hp[3];
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        auto update = [&](float& p, float g, float& b) {
            g = effective_grad(g, grad_scale, maximize);
            if (weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(weight_decay, p));
            if (row.buf0 != nullptr) {
                b = row.aux ? g : __fadd_rn(__fmul_rn(b, momentum), __fmul_rn(one_minus_dampening, g));
                g = nesterov ? __fadd_rn(g, __fmul_rn(momentum, b)) : b;
            }
            p = __fsub_rn(p, __fmul_rn(lr_f, g));
        };
        long long i = begin + threadIdx.x;
        if (aligned4(row)) {   // 4 elements a thread per pass: 16-byte loads, four updates in flight
            const long long end4 = begin + ((end - begin) & ~3LL);
            for (long long j = begin + 4 * threadIdx.x; j < end4; j += 4 * blockDim.x) {
                float4 p = *reinterpret_cast<const float4*>(row.param + j);
                const float4 g = *reinterpret_cast<const float4*>(row.grad + j);
                float4 b = row.buf0 != nullptr ? *reinterpret_cast<const float4*>(row.buf0 + j) : float4{};
                update(p.x, g.x, b.x), update(p.y, g.y, b.y), update(p.z, g.z, b.z), update(p.w, g.w, b.w);
                if (row.buf0 != nullptr) *reinterpret_cast<float4*>(row.buf0 + j) = b;
                *reinterpret_cast<float4*>(row.param + j) = p;
            }
            i = end4 + threadIdx.x;
        }
        for (; i < end; i += blockDim.x) {
            float p = row.param[i], b = row.buf0 != nullptr ? row.buf0[i] : 0.0f;
            update(p, row.grad[i], b);
            if (row.buf0 != nullptr) row.buf0[i] = b;
            row.param[i] = p;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Adam / AdamW: buf0 = exp_avg, buf1 = exp_avg_sq, buf2 = max_exp_avg_sq (amsgrad, else absent),
// aux = the parameter's slot in `steps` (already incremented by multi_tensor_increment_steps).
// lerp_weight = 1 - beta1 and one_minus_lerp_weight = 1 - (1 - beta1), as minidl.optim.adam.lerp_.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void multi_tensor_adam(const long long* table, int n_tensors, long long total_chunks,
                                             const double* hp, const float* steps, int decoupled, int maximize,
                                             const float* grad_scale, const float* found_inf)
{
    if (update_skipped(found_inf)) return;
    // hp = (lr, beta1, beta2, eps, weight_decay), float64 on the device (see multi_tensor_sgd).
    const double lr_d = hp[0], beta1 = hp[1], beta2 = hp[2], weight_decay = hp[4];
    const double lerp_weight_d = 1.0 - beta1;  // minidl.optim.adam.lerp_(m, g, 1 - beta1)
    const bool lerp_small = lerp_weight_d < 0.5;
    const float lerp_weight = (float)lerp_weight_d, one_minus_lerp_weight = (float)(1.0 - lerp_weight_d);
    const float beta2_f = (float)beta2, one_minus_beta2 = (float)(1.0 - beta2), eps = (float)hp[3];
    const float wd_f = (float)weight_decay;
    const float decay = (float)(1.0 - __dmul_rn(lr_d, weight_decay));  // AdamW: p *= 1 - lr * wd
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const double step = (double)steps[row.aux];
        const double bias_correction1 = 1.0 - pow(beta1, step);
        const float bias_correction2_sqrt = (float)pow(1.0 - pow(beta2, step), 0.5);
        const float step_size = (float)(lr_d / bias_correction1);
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        // one element: p, m, v (and v_max, amsgrad) updated in place from g
        auto update = [&](float& p, float g, float& m, float& v, float& v_max) {
            g = effective_grad(g, grad_scale, maximize);
            if (weight_decay != 0.0) {
                if (decoupled) p = __fmul_rn(p, decay);
                else g = __fadd_rn(g, __fmul_rn(wd_f, p));
            }
            if (lerp_small) m = __fadd_rn(m, __fmul_rn(lerp_weight, __fsub_rn(g, m)));
            else m = __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), one_minus_lerp_weight));
            v = __fadd_rn(__fmul_rn(v, beta2_f), __fmul_rn(one_minus_beta2, __fmul_rn(g, g)));
            float v_use = v;
            if (row.buf2 != nullptr) {
                v_use = (v_max > v || v_max != v_max) ? v_max : v;  // NaN-propagating, as xp.maximum
                v_max = v_use;
            }
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v_use), bias_correction2_sqrt), eps);
            p = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(m, denom)));
        };
        long long i = begin + threadIdx.x;
        if (aligned4(row)) {   // 4 elements a thread per pass: 16-byte loads, four updates in flight
            const long long end4 = begin + ((end - begin) & ~3LL);
            for (long long j = begin + 4 * threadIdx.x; j < end4; j += 4 * blockDim.x) {
                float4 p = *reinterpret_cast<const float4*>(row.param + j);
                const float4 g = *reinterpret_cast<const float4*>(row.grad + j);
                float4 m = *reinterpret_cast<const float4*>(row.buf0 + j);
                float4 v = *reinterpret_cast<const float4*>(row.buf1 + j);
                float4 w = row.buf2 != nullptr ? *reinterpret_cast<const float4*>(row.buf2 + j) : float4{};
                update(p.x, g.x, m.x, v.x, w.x), update(p.y, g.y, m.y, v.y, w.y);
                update(p.z, g.z, m.z, v.z, w.z), update(p.w, g.w, m.w, v.w, w.w);
                *reinterpret_cast<float4*>(row.buf0 + j) = m;
                *reinterpret_cast<float4*>(row.buf1 + j) = v;
                if (row.buf2 != nullptr) *reinterpret_cast<float4*>(row.buf2 + j) = w;
                *reinterpret_cast<float4*>(row.param + j) = p;
            }
            i = end4 + threadIdx.x;
        }
        for (; i < end; i += blockDim.x) {
            float p = row.param[i], m = row.buf0[i], v = row.buf1[i];
            float w = row.buf2 != nullptr ? row.buf2[i] : 0.0f;
            update(p, row.grad[i], m, v, w);
            row.buf0[i] = m;
            row.buf1[i] = v;
            if (row.buf2 != nullptr) row.buf2[i] = w;
            row.param[i] = p;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RMSprop: buf0 = square_avg, buf1 = momentum_buffer (absent when momentum == 0), buf2 = grad_avg
// (centered only). The step count (aux = slot) is kept but unused by the update, as in PyTorch.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void multi_tensor_rmsprop(const long long* table, int n_tensors, long long total_chunks,
                                                const double* hp, int maximize, const float* grad_scale,
                                                const float* found_inf)
{
    if (update_skipped(found_inf)) return;
    // hp = (lr, alpha, eps, weight_decay, momentum), float64 on the device (see multi_tensor_sgd).
    const float lr_f = (float)hp[0], alpha = (float)hp[1], one_minus_alpha = (float)(1.0 - hp[1]);
    const double lerp_weight_d = 1.0 - hp[1];
    const bool lerp_small = lerp_weight_d < 0.5;
    const float lerp_weight = (float)lerp_weight_d, one_minus_lerp_weight = (float)(1.0 - lerp_weight_d);
    const float eps = (float)hp[2], weight_decay = (float)hp[3], momentum = (float)hp[4];
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float p = row.param[i];
            float g = effective_grad(row.grad[i], grad_scale, maximize);
            if (weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(weight_decay, p));
            const float sq = __fadd_rn(__fmul_rn(row.buf0[i], alpha), __fmul_rn(one_minus_alpha, __fmul_rn(g, g)));
            row.buf0[i] = sq;
            float avg;
            if (row.buf2 != nullptr) {
                float ga = row.buf2[i];
                if (lerp_small) ga = __fadd_rn(ga, __fmul_rn(lerp_weight, __fsub_rn(g, ga)));
                else ga = __fsub_rn(g, __fmul_rn(__fsub_rn(g, ga), one_minus_lerp_weight));
                row.buf2[i] = ga;
                avg = __fsqrt_rn(__fsub_rn(sq, __fmul_rn(ga, ga)));
            } else {
                avg = __fsqrt_rn(sq);
            }
            avg = __fadd_rn(avg, eps);
            if (row.buf1 != nullptr) {
                const float b = __fadd_rn(__fmul_rn(row.buf1[i], momentum), __fdiv_rn(g, avg));
                row.buf1[i] = b;
                row.param[i] = __fsub_rn(p, __fmul_rn(lr_f, b));
            } else {
                row.param[i] = __fsub_rn(p, __fmul_rn(lr_f, __fdiv_rn(g, avg)));
            }
        }
    }
}

// steps[aux of every row] += 1, unless found_inf. One thread per tensor; runs before the update.
extern "C" __global__ void multi_tensor_increment_steps(const long long* table, int n_tensors, float* steps,
                                                        const float* found_inf)
{
    if (update_skipped(found_inf)) return;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_tensors) steps[table[(long long)t * TABLE_COLS + 6]] += 1.0f;
}

// ---------------------------------------------------------------------------------------------
// Gradient zeroing and clipping. The tensors are in column [1] (grad).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void multi_tensor_zero(const long long* table, int n_tensors, long long total_chunks)
{
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) row.grad[i] = 0.0f;
    }
}

// Sum of squares over the whole list: each block writes its partial sum to partial[blockIdx.x]
// (fixed order within a block, so the result is deterministic for a given grid).
extern "C" __global__ void multi_tensor_l2norm_partial(const long long* table, int n_tensors, long long total_chunks,
                                                       float* partial)
{
    __shared__ float scratch[32];
    float sum = 0.0f;
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float g = row.grad[i];
            sum += g * g;
        }
    }
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// One block: total_norm = sqrt(sum of the partials); clip_coef = min(1, max_norm / (norm + 1e-6)),
// exactly the float32 expression of nn.utils.clip_grad_norm_.
extern "C" __global__ void multi_tensor_l2norm_finalize(const float* partial, int n_partial, float max_norm,
                                                        float* total_norm, float* clip_coef)
{
    __shared__ float scratch[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x) sum += partial[i];
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) {
        const float norm = sqrtf(sum);
        *total_norm = norm;
        const float q = __fdiv_rn(max_norm, __fadd_rn(norm, 1e-6f));
        if (clip_coef != nullptr) clip_coef[0] = q >= 1.0f ? 1.0f : q;  // a NaN norm gives NaN, as xp.minimum
    }
}

// grad *= *coef over the list (the clip coefficient, read on the device).
extern "C" __global__ void multi_tensor_scale(const long long* table, int n_tensors, long long total_chunks,
                                              const float* coef)
{
    const float c = *coef;
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) row.grad[i] = __fmul_rn(row.grad[i], c);
    }
}

// GradScaler's unscale and inf/NaN check over the list (torch's _amp_foreach_non_finite_check_and_unscale_):
// *found_inf = 1 where any element is inf or NaN (every writer stores the same 1.0f, so the result does not
// depend on which thread wins), and, when scale is given, grad *= the float32 inverse of *scale, computed in
// float64 as the host reference does (1 / double(scale), rounded once).
extern "C" __global__ void multi_tensor_unscale(const long long* table, int n_tensors, long long total_chunks,
                                                const float* scale, float* found_inf)
{
    const float inv = scale != nullptr ? (float)(1.0 / (double)*scale) : 1.0f;
    bool bad = false;
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float g = row.grad[i];
            bad |= !isfinite(g);
            if (scale != nullptr) row.grad[i] = __fmul_rn(g, inv);
        }
    }
    if (bad) *found_inf = 1.0f;
}

// ---------------------------------------------------------------------------------------------
// Casting (autocast's per-region copies of the float32 parameters in 16 bits, all at once): the float32 tensors in
// column [0] (param) rounded to nearest even into the float16 / bfloat16 arrays in column [2] (buf0), as
// kernels/cast.cu's `cast` rounds (half_store): the same bits, one launch for the whole list.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void multi_tensor_cast(const long long* table, int n_tensors, long long total_chunks,
                                             int out_kind)
{
    for (long long chunk = blockIdx.x; chunk < total_chunks; chunk += gridDim.x) {
        const TensorRow row = row_of(table, tensor_of_chunk(table, n_tensors, chunk));
        unsigned short* out = reinterpret_cast<unsigned short*>(row.buf0);
        const long long begin = (chunk - row.first_chunk) * CHUNK;
        const long long end = min(begin + CHUNK, row.numel);
        for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) half_store(out, i, row.param[i], out_kind);
    }
}
