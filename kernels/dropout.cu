// Dropout with a counter-based random number generator (Philox4x32-10, Salmon et al. 2011,
// "Parallel random numbers: as easy as 1, 2, 3"). The mask is never stored: it is a pure
// function of (seed, element index), so the backward pass regenerates it and the NumPy reference
// (minidl/primitives/cpu/dropout.py) produces the very same mask on the CPU.
//
// The mapping, shared with the reference bit for bit: element i (flat C-order index + offset)
//   counter = (lo32(i >> 2), hi32(i >> 2), 0, 0), key = (lo32(seed), hi32(seed)),
//   word    = output word number (i & 3) of Philox4x32-10(counter, key),
//   u       = (word >> 8) * 2^-24          (24 random bits: exactly representable in float32)
//   keep    = u >= p,   y = keep ? x / (1 - p) : 0.
// The launcher passes threshold = ceil(p * 2^24), so `keep` is the integer test
// (word >> 8) >= threshold: exactly u >= p, with no float rounding of p.
//
// Threads -> data: one Philox call yields 4 words, i.e. the masks of 4 consecutive global
// indices 4q .. 4q+3, so a thread owns one "group" q at a time (grid-stride over groups). When
// offset is a multiple of 4 a group is 4 consecutive array elements and the thread moves them as
// one float4 (16-byte access); otherwise the first and last groups straddle the array ends and
// the thread falls back to scalar accesses with bounds checks.
// Generator state on the device: the launcher may pass `state`, a pointer to two uint64 words
// (seed, offset) that the kernel reads instead of the `seed` argument (and adds to `offset`). A CUDA
// graph then replays with the values the state holds at replay time, not those of the capture;
// philox_advance (below) hands each dropout call its own (seed, offset) on the device.
// Cost: 10 rounds of 2 mul.hi + 2 mul.lo per 4 elements, ~25 instructions per element: the kernel
// stays memory-bound on an H200.
#include "elementwise_common.cuh"

#include "philox.cuh"

__device__ __forceinline__ float dropout_value(float x, unsigned int word, unsigned int threshold, float scale)
{
    return (word >> 8) >= threshold ? x * scale : 0.0f;
}

// Helpers of every kernel here: word i of a Philox block, the block of global index g, the stream's key and first
// index (from the claimed state when given).
__device__ __forceinline__ unsigned int philox_word(uint4 r, unsigned int i)
{
    return i == 0 ? r.x : i == 1 ? r.y : i == 2 ? r.z : r.w;
}

__device__ __forceinline__ uint4 philox_block(unsigned long long g, uint2 key)
{
    const unsigned long long q = g >> 2;
    return philox4x32_10(make_uint4((unsigned int)q, (unsigned int)(q >> 32), 0u, 0u), key);
}

// The stream's key, and its first index in `offset`: the claimed (seed, offset) when `state` is given.
__device__ __forceinline__ uint2 philox_stream(const unsigned long long* state, unsigned long long seed,
                                               unsigned long long& offset)
{
    if (state != nullptr) {
        seed = state[0];
        offset += state[1];
    }
    return make_uint2((unsigned int)seed, (unsigned int)(seed >> 32));
}

// Claiming in the same launch (claimed != null, the forward pass of minidl.nn.functional.dropout): `state` is then
// the device's generator itself, and the call claims its n counters as philox_advance would, without a launch of
// its own. Block 0 stores the (seed, offset) every block read into `claimed` (what the backward pass regenerates the
// mask from); each block, once all its threads are done, counts itself in arrivals[0], and the last one advances
// the generator's offset by n rounded up to a multiple of 4, then sets the count back to 0. Every block read the
// generator before it arrived, so the advance cannot change what any block of this launch draws.
__device__ __forceinline__ void claim_counters(const unsigned long long* state, unsigned long long* claimed,
                                               unsigned int* arrivals, long long n, unsigned long long base)
{
    if (claimed == nullptr) return;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        claimed[0] = state[0];
        claimed[1] = base;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(arrivals, 1u) == gridDim.x - 1) {
            __threadfence();
            const_cast<unsigned long long*>(state)[1] = base + (((unsigned long long)n + 3ull) & ~3ull);
            arrivals[0] = 0u;
        }
    }
}

// y[i] = mask(offset + i) * x[i] * scale for i < n. vectorized != 0 promises 16-byte aligned
// pointers and offset % 4 == 0.
__device__ __forceinline__ void dropout_apply(const float* x, float* y, long long n, unsigned long long offset,
                                              unsigned long long seed, const unsigned long long* state,
                                              unsigned int threshold, float scale, int vectorized,
                                              unsigned long long* claimed, unsigned int* arrivals)
{
    const uint2 key = philox_stream(state, seed, offset);   // (seed, offset) read on the device: see the header
    if (state != nullptr) vectorized = vectorized && (offset & 3ull) == 0;
    const unsigned long long first_group = offset >> 2;
    const unsigned long long last_group = (offset + (unsigned long long)n - 1) >> 2;
    const long long groups = (long long)(last_group - first_group + 1);

    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long g = start; g < groups; g += stride) {
        const unsigned long long q = first_group + (unsigned long long)g;
        const uint4 r = philox4x32_10(make_uint4((unsigned int)q, (unsigned int)(q >> 32), 0u, 0u), key);
        // Array index of word 0 of this group; negative for a first group that starts before the array.
        const long long base = (long long)(q * 4 - offset);
        if (vectorized && base + 3 < n) {
            const float4 a = reinterpret_cast<const float4*>(x)[base >> 2];
            reinterpret_cast<float4*>(y)[base >> 2] =
                make_float4(dropout_value(a.x, r.x, threshold, scale), dropout_value(a.y, r.y, threshold, scale),
                            dropout_value(a.z, r.z, threshold, scale), dropout_value(a.w, r.w, threshold, scale));
        } else {
            const unsigned int words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const long long i = base + w;
                if (i >= 0 && i < n) y[i] = dropout_value(x[i], words[w], threshold, scale);
            }
        }
    }
    claim_counters(state, claimed, arrivals, n, offset);
}

extern "C" __global__ void dropout_forward(const float* x, float* y, long long n, unsigned long long offset,
                                           unsigned long long seed, const unsigned long long* state,
                                           unsigned int threshold, float scale, int vectorized,
                                           unsigned long long* claimed, unsigned int* arrivals)
{
    dropout_apply(x, y, n, offset, seed, state, threshold, scale, vectorized, claimed, arrivals);
}

// The backward pass is the same masked scaling applied to dy: the mask is regenerated, not stored.
extern "C" __global__ void dropout_backward(const float* dy, float* dx, long long n, unsigned long long offset,
                                           unsigned long long seed, const unsigned long long* state,
                                           unsigned int threshold, float scale, int vectorized)
{
    dropout_apply(dy, dx, n, offset, seed, state, threshold, scale, vectorized, nullptr, nullptr);
}

// float16 / bfloat16 data (kind 1 / 2; half_load / half_store of elementwise_common.cuh): the same mask and
// the same fp32 product, rounded once to the data's type -- what computing in float32 and rounding would
// give, without the two conversion passes. 4 elements per Philox call: one 8-byte load and store where the
// claimed offset is a multiple of 4 and both arrays 8-byte aligned (decided here, once for the grid), else one by one.
__device__ __forceinline__ void dropout_apply_half(const unsigned short* x, unsigned short* y, long long n,
                                                   unsigned long long offset, unsigned long long seed,
                                                   const unsigned long long* state, unsigned int threshold,
                                                   float scale, int kind, unsigned long long* claimed,
                                                   unsigned int* arrivals)
{
    const uint2 key = philox_stream(state, seed, offset);
    const unsigned long long first_group = offset >> 2;
    const unsigned long long last_group = (offset + (unsigned long long)n - 1) >> 2;
    const long long groups = (long long)(last_group - first_group + 1);
    const long long stride = (long long)gridDim.x * blockDim.x;
    const bool vec = (offset & 3ull) == 0 &&
                     ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(y)) & 7ull) == 0;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
        const unsigned long long q = first_group + (unsigned long long)g;
        const uint4 r = philox4x32_10(make_uint4((unsigned int)q, (unsigned int)(q >> 32), 0u, 0u), key);
        const long long base = (long long)(q * 4 - offset);
        if (vec && base + 3 < n) {   // base >= 0 and a multiple of 4 here
            const float4 a = load4(x, base / 4, kind);
            store4(y, base / 4,
                   make_float4(dropout_value(a.x, r.x, threshold, scale), dropout_value(a.y, r.y, threshold, scale),
                               dropout_value(a.z, r.z, threshold, scale), dropout_value(a.w, r.w, threshold, scale)),
                   kind);
            continue;
        }
        const unsigned int words[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const long long i = base + w;
            if (i >= 0 && i < n) half_store(y, i, dropout_value(half_load(x, i, kind), words[w], threshold, scale), kind);
        }
    }
    claim_counters(state, claimed, arrivals, n, offset);
}

extern "C" __global__ void dropout_forward_half(const unsigned short* x, unsigned short* y, long long n,
                                                unsigned long long offset, unsigned long long seed,
                                                const unsigned long long* state, unsigned int threshold, float scale,
                                                int kind, unsigned long long* claimed, unsigned int* arrivals)
{
    dropout_apply_half(x, y, n, offset, seed, state, threshold, scale, kind, claimed, arrivals);
}

extern "C" __global__ void dropout_backward_half(const unsigned short* dy, unsigned short* dx, long long n,
                                                 unsigned long long offset, unsigned long long seed,
                                                 const unsigned long long* state, unsigned int threshold,
                                                 float scale, int kind)
{
    dropout_apply_half(dy, dx, n, offset, seed, state, threshold, scale, kind, nullptr, nullptr);
}

// A device-resident Philox generator hands out counters: claimed = (seed, offset) of `generator`,
// then generator's offset advances by `count` rounded up to a multiple of 4 (so every claimed offset
// keeps the float4 path). One thread: it is two loads and three stores, launched once per dropout
// call so that the values change from replay to replay of a CUDA graph without any host involvement.
extern "C" __global__ void philox_advance(unsigned long long* generator, unsigned long long* claimed,
                                          unsigned long long count)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const unsigned long long seed = generator[0], offset = generator[1];
    claimed[0] = seed;
    claimed[1] = offset;
    generator[1] = offset + ((count + 3ull) & ~3ull);
}

// Random numbers from the same stream (minidl's GPU generator: rand, randn, normal_, uniform_, bernoulli_, randint,
// randperm and the initialisers draw here, from the device's (seed, offset) state, so that get_rng_state / set_rng_state restore a GPU
// stream exactly and a CUDA graph replays fresh numbers). Element i is global index g = offset + i, as for dropout:
//   philox_bits:    word(g) itself (uint32)
//   philox_uniform: u = (word(g) >> 8) * 2^-24, in [0, 1) (24 random bits; exact in float and double)
//   philox_normal:  Box-Muller on the pair of words (g & ~1, g | 1) (one Philox block holds both):
//                   u1 = ((word >> 8) + 1) * 2^-24 in (0, 1], u2 = (word >> 8) * 2^-24,
//                   z = sqrt(-2 log u1) * (g even ? cos(2 pi u2) : sin(2 pi u2)), in the output's precision.
// `state`: the (seed, offset) claimed by philox_advance, or null (then seed and offset are the arguments). f64: the
// output is double (else float). One thread per element (a Philox block per element: 4x the arithmetic of sharing
// one between four threads, still far below the memory time of the store).
// The raw words (randint and randperm: word % range, and the order of the words).
extern "C" __global__ void philox_bits(const unsigned long long* state, unsigned int* out, long long n,
                                      unsigned long long offset, unsigned long long seed)
{
    const uint2 key = philox_stream(state, seed, offset);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long g = offset + (unsigned long long)i;
        out[i] = philox_word(philox_block(g, key), (unsigned int)(g & 3));
    }
}

extern "C" __global__ void philox_uniform(const unsigned long long* state, void* out, long long n,
                                          unsigned long long offset, unsigned long long seed, int f64)
{
    const uint2 key = philox_stream(state, seed, offset);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long g = offset + (unsigned long long)i;
        const unsigned int bits = philox_word(philox_block(g, key), (unsigned int)(g & 3)) >> 8;
        if (f64)
            static_cast<double*>(out)[i] = bits * 5.9604644775390625e-8;
        else
            static_cast<float*>(out)[i] = bits * 5.9604644775390625e-8f;
    }
}

extern "C" __global__ void philox_normal(const unsigned long long* state, void* out, long long n,
                                         unsigned long long offset, unsigned long long seed, int f64)
{
    const uint2 key = philox_stream(state, seed, offset);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const unsigned long long g = offset + (unsigned long long)i;
        const uint4 r = philox_block(g, key);
        const unsigned int pair = (unsigned int)(g & 2);
        const unsigned int b1 = philox_word(r, pair) >> 8, b2 = philox_word(r, pair | 1) >> 8;
        if (f64) {
            const double u1 = (b1 + 1.0) * 5.9604644775390625e-8, u2 = b2 * 5.9604644775390625e-8;
            const double radius = sqrt(-2.0 * log(u1));
            static_cast<double*>(out)[i] = radius * ((g & 1) ? sinpi(2.0 * u2) : cospi(2.0 * u2));
        } else {
            const float u1 = (b1 + 1.0f) * 5.9604644775390625e-8f, u2 = b2 * 5.9604644775390625e-8f;
            const float radius = sqrtf(-2.0f * logf(u1));
            static_cast<float*>(out)[i] = radius * ((g & 1) ? sinpif(2.0f * u2) : cospif(2.0f * u2));
        }
    }
}

// Philox itself, for tests: out[4*j .. 4*j+3] = Philox4x32-10(counters[4*j .. 4*j+3], keys[2*j .. 2*j+1]).
extern "C" __global__ void philox4x32_10_kernel(const unsigned int* counters, const unsigned int* keys,
                                                unsigned int* out, long long count)
{
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= count) return;
    const uint4 c = make_uint4(counters[4 * j], counters[4 * j + 1], counters[4 * j + 2], counters[4 * j + 3]);
    const uint4 r = philox4x32_10(c, make_uint2(keys[2 * j], keys[2 * j + 1]));
    out[4 * j] = r.x;
    out[4 * j + 1] = r.y;
    out[4 * j + 2] = r.z;
    out[4 * j + 3] = r.w;
}
