// cast: y = x converted to another floating-point type (cuDNN's cudnnTransformTensor, for the data type
// only). Storage kinds: 0 float32, 1 float16, 2 bfloat16 (kernels/tc_common.cuh's KIND). The value goes
// through fp32 and is rounded once to nearest even (half_store): float16 overflows to +-inf, NaN stays
// NaN, as NumPy's and PyTorch's casts. Autocast casts every weight and activation it hands a 16-bit GEMM,
// and the backward casts the gradients back: one launch each, instead of a library elementwise call.
//
// Thread mapping: grid-stride, one element per thread per step (the copy is memory-bound; the loads and
// stores of consecutive threads are consecutive).
#include "elementwise_common.cuh"

__device__ __forceinline__ float cast_load(const void* p, long long i, int kind)
{
    return kind == 0 ? static_cast<const float*>(p)[i] : half_load(static_cast<const unsigned short*>(p), i, kind);
}

extern "C" __global__ void cast(const void* x, void* y, long long n, int in_kind, int out_kind)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = cast_load(x, i, in_kind);
        if (out_kind == 0)
            static_cast<float*>(y)[i] = v;
        else
            half_store(static_cast<unsigned short*>(y), i, v, out_kind);
    }
}
