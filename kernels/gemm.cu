// gemm.cu: single-precision GEMM, C = alpha * op(A) * op(B) + beta * C, strided-batched.
//
// Algorithm: the tiled main loop of common.cuh (128 x 128 tile per block of 256 threads, 8 x 8
// outputs per thread in registers, 8-deep reduction steps double-buffered in shared memory, and the
// shared-memory fragments double-buffered in registers (PREFETCH); a
// 128 x 64 tile variant for N <= 64, the launcher turns a product with few rows into its transpose).
// op(A) is M x K, op(B) is K x N. Which loader fetches an operand depends on how it is stored:
//     A not transposed, stored (M, K): contiguous along k   -> KContiguousLoader
//     A transposed,     stored (K, M): contiguous along m   -> RowContiguousLoader
//     B not transposed, stored (K, N): contiguous along n   -> RowContiguousLoader (rows are n)
//     B transposed,     stored (N, K): contiguous along k   -> KContiguousLoader
// so every global load walks memory in its contiguous direction (coalesced), and is one float4 when
// the leading dimension and the base pointer allow it (the fast path: any tile fully inside the
// matrix); edge tiles load element by element with bounds checks (the correct path for any M, N, K).
//
// Grid: x over tiles of M, y over tiles of N (BN wide), z over batch * split_k. C element (m, n) of batch b
// lives at C[b * stride_c + m * ldc_row + n * ldc_col], so a GEMM can write straight into a
// non-row-major result (e.g. a convolution's NCHW output). With split_k > 1 each z-slice reduces
// a range of K and writes its raw partial sums to `partial` (split, batch, M, N); the kernel
// gemm_splitk_reduce then sums the slices and blends into C. That keeps small-M*N, large-K products
// (weight gradients) busy on all SMs, deterministically.
//
// Bias (optional, nn.Linear's): C = alpha * (op(A) op(B) + bias) + beta * C with bias element (m, n) at
// bias[m * bias_row + n * bias_col]: (0, 1) for a bias per column, (1, 0) once the launcher has turned the
// product into its transpose. With split-K the reduce kernel adds it, once.
#include "common.cuh"

using namespace minidl;

struct GemmEpilogue {
    float* c;
    float* partial;  // non-null: write raw sums here (split-K)
    long long ldc_row, ldc_col;
    int M, N, m0, n0;
    float alpha, beta;
    const float* bias;
    long long bias_row, bias_col;

    __device__ __forceinline__ void operator()(int row, int col, float value) const
    {
        const int m = m0 + row, n = n0 + col;
        if (m >= M || n >= N) return;
        if (partial != nullptr) {
            partial[(long long)m * N + n] = value;
        } else {
            float* dst = c + m * ldc_row + n * ldc_col;
            if (bias != nullptr) value += bias[m * bias_row + n * bias_col];
            *dst = blend_value(value, alpha, beta, dst);
        }
    }
};

template <bool TRANS_A, bool TRANS_B, int BN>
__device__ __forceinline__ void sgemm_body(int M, int N, int K, float alpha,
                                           const float* A, long long lda, long long stride_a,
                                           const float* B, long long ldb, long long stride_b,
                                           float beta, float* C, long long ldc_row, long long ldc_col,
                                           long long stride_c, int batch, int split_k, int k_per_split,
                                           float* partial, int vec_a, int vec_b, const float* bias,
                                           long long bias_row, long long bias_col)
{
    const int z = blockIdx.z;
    const int b = z % batch;
    const int split = z / batch;
    const int m0 = blockIdx.x * TILE_M;
    const int n0 = blockIdx.y * BN;
    const int k_begin = split * k_per_split;
    const int k_end = min(K, k_begin + k_per_split);

    A += b * stride_a;
    B += b * stride_b;
    C += b * stride_c;
    float* part = nullptr;
    if (split_k > 1) part = partial + ((long long)split * batch + b) * M * (long long)N;

    GemmEpilogue epilogue{C, part, ldc_row, ldc_col, M, N, m0, n0, alpha, beta, bias, bias_row, bias_col};
    if (TRANS_A) {
        RowContiguousLoader<TILE_M> load_a(A + m0, lda, M - m0, K, 0, vec_a);
        if (TRANS_B) {
            KContiguousLoader<BN> load_b(B + n0 * ldb, ldb, N - n0, K, 0, vec_b);
            gemm_mainloop<BN, true>(load_a, load_b, epilogue, k_begin, k_end);
        } else {
            RowContiguousLoader<BN> load_b(B + n0, ldb, N - n0, K, 0, vec_b);
            gemm_mainloop<BN, true>(load_a, load_b, epilogue, k_begin, k_end);
        }
    } else {
        KContiguousLoader<TILE_M> load_a(A + m0 * lda, lda, M - m0, K, 0, vec_a);
        if (TRANS_B) {
            KContiguousLoader<BN> load_b(B + n0 * ldb, ldb, N - n0, K, 0, vec_b);
            gemm_mainloop<BN, true>(load_a, load_b, epilogue, k_begin, k_end);
        } else {
            RowContiguousLoader<BN> load_b(B + n0, ldb, N - n0, K, 0, vec_b);
            gemm_mainloop<BN, true>(load_a, load_b, epilogue, k_begin, k_end);
        }
    }
}

// The scalar arguments of a launch in one struct passed by value, the arrays after it: the launcher makes the
// struct once per problem (minidl/primitives/cuda/gemm.py, SGEMM_PARAMS), and CuPy hands a kernel one 112-byte
// argument for ~1/3 of the host time of 19 scalars. Members by size, so that no padding differs from NumPy's.
struct SgemmParams {
    long long lda, stride_a, ldb, stride_b, ldc_row, ldc_col, stride_c, bias_row, bias_col;
    int M, N, K, batch, split_k, k_per_split, vec_a, vec_b;
    float alpha, beta;
};

// One kernel per (op(A), op(B), tile width): gemm_<n|t><n|t>_bn<128|64>.
#define MINIDL_SGEMM_KERNEL(name, ta, tb, bn)                                                              \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2)                                          \
        name(const SgemmParams q, const float* A, const float* B, float* C, float* partial, const float* bias) \
    {                                                                                                      \
        sgemm_body<ta, tb, bn>(q.M, q.N, q.K, q.alpha, A, q.lda, q.stride_a, B, q.ldb, q.stride_b, q.beta, C,  \
                               q.ldc_row, q.ldc_col, q.stride_c, q.batch, q.split_k, q.k_per_split, partial,    \
                               q.vec_a, q.vec_b, bias, q.bias_row, q.bias_col);                              \
    }
MINIDL_SGEMM_KERNEL(gemm_nn_bn128, false, false, 128)
MINIDL_SGEMM_KERNEL(gemm_nt_bn128, false, true, 128)
MINIDL_SGEMM_KERNEL(gemm_tn_bn128, true, false, 128)
MINIDL_SGEMM_KERNEL(gemm_tt_bn128, true, true, 128)
MINIDL_SGEMM_KERNEL(gemm_nn_bn64, false, false, 64)
MINIDL_SGEMM_KERNEL(gemm_nt_bn64, false, true, 64)
MINIDL_SGEMM_KERNEL(gemm_tn_bn64, true, false, 64)
MINIDL_SGEMM_KERNEL(gemm_tt_bn64, true, true, 64)

// Sum the split-K partial products and blend into C. One thread per element of C (grid-stride):
// partial is (split_k, batch, M, N) row-major, C element (b, m, n) as in the GEMM.
extern "C" __global__ void gemm_splitk_reduce(const float* __restrict__ partial, int split_k, int batch,
                                              int M, int N, float alpha, float beta, float* C,
                                              long long ldc_row, long long ldc_col, long long stride_c,
                                              const float* bias, long long bias_row, long long bias_col)
{
    const long long total = (long long)batch * M * N;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int s = 0; s < split_k; ++s) sum += partial[s * total + i];
        const long long b = i / ((long long)M * N);
        const long long mn = i - b * M * (long long)N;
        const long long m = mn / N, n = mn - m * N;
        float* dst = C + b * stride_c + m * ldc_row + n * ldc_col;
        if (bias != nullptr) sum += bias[m * bias_row + n * bias_col];
        *dst = blend_value(sum, alpha, beta, dst);
    }
}
