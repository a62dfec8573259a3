// embedding: a table lookup, the first layer of every language model. Forward out[i, :] = weight[indices[i], :];
// backward dweight[indices[i], :] += dout[i, :] (rows looked up twice get both gradients). Storage kinds (a
// template argument KIND): 0 float32, 1 float16, 2 bfloat16; indices int64 or int32 (INDEX).
//
// An index outside [0, num) is never read through: its output row is NaN (what minidl.nn.functional.embedding
// gives on the GPU without the host check of minidl.backends.cuda.check_indices: no host read in a training step),
// and its gradient goes nowhere. The padding row (padding_idx >= 0) gets no gradient.
//
// Thread mapping: one warp per looked-up row, a grid-stride loop over the rows. The forward copies bits (no
// conversion), 16 bytes per lane when a row is a whole number of 16-byte pieces and the arrays are 16-byte
// aligned (`vec`). The backward adds into an fp32 table (zeroed by the launcher; 16-bit gradients are rounded once
// afterwards, by the cast primitive) with atomicAdd, so the order of the additions to one row is not fixed: as
// torch's non-deterministic embedding backward, not bit-reproducible run to run.
#include "elementwise_common.cuh"

// The bits of a quiet NaN in each storage kind.
template <int KIND>
__device__ __forceinline__ typename Data<KIND>::T nan_bits();
template <>
__device__ __forceinline__ float nan_bits<0>() { return __uint_as_float(0x7fc00000u); }
template <>
__device__ __forceinline__ unsigned short nan_bits<1>() { return 0x7e00; }
template <>
__device__ __forceinline__ unsigned short nan_bits<2>() { return 0x7fc0; }

template <int KIND, typename INDEX>
__global__ void embedding_forward(const typename Data<KIND>::T* __restrict__ weight, const INDEX* __restrict__ indices,
                                  typename Data<KIND>::T* __restrict__ out, long long n, long long num, int dim, int vec)
{
    typedef typename Data<KIND>::T T;
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    const int per16 = 16 / sizeof(T), chunks = dim / per16;   // 16-byte pieces of a row (vec)
    for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; r < n; r += warps) {
        const long long idx = (long long)indices[r];
        T* dst = out + r * dim;
        if (idx < 0 || idx >= num) {
            for (int d = lane; d < dim; d += 32) dst[d] = nan_bits<KIND>();
            continue;
        }
        const T* src = weight + idx * dim;
        if (vec) {
            for (int c = lane; c < chunks; c += 32)
                reinterpret_cast<uint4*>(dst)[c] = __ldg(reinterpret_cast<const uint4*>(src) + c);
        } else {
            for (int d = lane; d < dim; d += 32) dst[d] = src[d];
        }
    }
}

template <int KIND, typename INDEX>
__global__ void embedding_backward(const typename Data<KIND>::T* __restrict__ dout, const INDEX* __restrict__ indices,
                                   float* __restrict__ dweight, long long n, long long num, int dim, long long padding_idx)
{
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * (blockDim.x / 32);
    for (long long r = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32; r < n; r += warps) {
        const long long idx = (long long)indices[r];
        if (idx < 0 || idx >= num || idx == padding_idx) continue;
        float* dst = dweight + idx * dim;
        for (int d = lane; d < dim; d += 32) atomicAdd(dst + d, load_data(dout, r * dim + d, KIND));
    }
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh: every instantiation the launcher can ask for (KIND 0, 1, 2; int64 and int32 indices).
#define MINIDL_EMBEDDING_KIND(K)                                                                                    \
    (void*)&embedding_forward<K, long long>, (void*)&embedding_forward<K, int>,                                  \
    (void*)&embedding_backward<K, long long>, (void*)&embedding_backward<K, int>
void* minidl_embedding_instances[] = {MINIDL_EMBEDDING_KIND(0), MINIDL_EMBEDDING_KIND(1), MINIDL_EMBEDDING_KIND(2)};
#endif
