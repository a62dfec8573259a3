// minidl: arch sm_90a   (wgmma and setmaxnreg exist only on sm_90a; see _compile.py and compile_kernels.sh)
//
// gemm_wgmma.cu: GEMM on Hopper's tensor cores, C = alpha * op(A) * op(B) + beta * C, strided-batched.
// The same contract as kernels/gemm_tc.cu (the mma.sync kernel, kept for pre-Hopper GPUs and as the
// teaching step before this one); the machinery (TMA, mbarriers, wgmma, warp specialisation, persistent
// tiles, the epilogue) is kernels/wgmma_pipeline.cuh, which says how each part works. This file is the
// GEMM's *problem*: which boxes a k step copies and where a row of C goes.
//
// One kernel template, gemm_wgmma<KIND, BN, TRANS_A, TRANS_B>:
//   KIND 0 (TF32)  float32 data, TF32 math, float32 result (wgmma ...k8.f32.tf32.tf32)
//   KIND 1 (F16)   float16 data, fp32 accumulation, float16 result (k16)
//   KIND 2 (BF16)  bfloat16 data, fp32 accumulation, bfloat16 result (k16)
//   BN             64, 128 or 256, MI 1 or 2: the tile is (128 * MI) x BN (each consumer warpgroup 64 * MI rows;
//                  MI * BN <= 256)
//   TRANS_A/B      op(A) = A^T / op(B) = B^T, as in gemm_tc.cu. For 16-bit data every case runs here (the
//                  wgmma transpose bits); TF32 wgmma takes K-major operands only, i.e. A stored (M, K) and
//                  B stored (N, K) (TRANS_A = false, TRANS_B = true): the launcher transposes the others.
//
// The tensor maps (built by minidl/primitives/cuda/gemm_wgmma.py) are 3-D: (k, m, batch) for A stored
// (M, K), (m, k, batch) for A stored (K, M), likewise B; an operand broadcast over the batch has a batch
// extent of 1 (a_batched = 0). K-major boxes are (BK, 128) for A and (BK, BN) for B: one copy each per k
// step; M/N-major boxes are (64, BK): 2 (A) or BN/64 (B) copies, one per 64-column slab.
//
// Edges: TMA fills every element outside the matrix with zero (rows past M or N, k past K), and the
// epilogue writes only elements inside C. What TMA needs, the launcher arranges (16-byte aligned starts,
// leading dimensions and batch strides multiples of 16 bytes: it copies an operand that breaks them).

#include "wgmma_pipeline.cuh"

namespace minidl_wgmma {

// The scalar arguments of a launch in one struct passed by value (the launcher packs it once per planned problem,
// GEMM_ARGS in minidl/primitives/cuda/gemm_wgmma.py: one kernel argument where 13 scalars cost CuPy's launch about
// half a microsecond each). Members by size: no padding differs from NumPy's.
struct GemmArgs {
    long long ldc_row, ldc_col, stride_c;
    int use_map_c, M, N, K, batch, a_batched, b_batched, vec_c;
    float alpha, beta;
    int bias_f32;        // the bias is float32 while C is 16-bit (an autocast Linear's)
    int splits, per_split;   // split-K: slices of the k steps, per_split steps each (1, 0: none)
    int pad;             // (an 8-byte multiple in all)
};

template <int KIND, int BN, bool TRANS_A, bool TRANS_B, int MI, int OUT>
struct GemmProblem {
    using T = typename minidl_tc::Storage<OUT>::T;   // C's element
    using Cfg = Config<KIND, BN, false, MI>;
    struct Tile {
        int b, m0, n0, kt0, kt1, cols, split, id;   // split: which k slice; id: the output tile (batch, m, n)
    };
    const TensorMap* map_a;
    const TensorMap* map_b;
    const TensorMap* map_out;  // C as (N, M, batch) for the staged epilogue's TMA store; nullptr: register stores
    int M, N, K, batch, a_batched, b_batched, tiles_m, tiles_n;
    // epilogue
    float alpha, beta;
    T* C;
    long long ldc_row, ldc_col, stride_c;
    int vec_c, relu, bias_f32;
    const void* bias;
    // split-K (the launcher's choice for a problem with too few output tiles to fill the GPU and a long K: a weight
    // gradient dW = dy^T x over every row of a batch): `splits` slices of per_split k steps each; the slices' fp32
    // sums meet in ws (float4 [tile][split][MI * BN / 8][256 consumer threads]), and counters holds one arrival
    // count per output tile (zero between launches)
    int splits, per_split;
    float* ws;
    unsigned* counters;

    __device__ int tiles() const { return tiles_m * tiles_n * batch * splits; }
    __device__ Tile tile(int t) const
    {
        Tile tl;
        int tm, tn;
        const int outputs = tiles_m * tiles_n * batch;
        tl.split = t / outputs;   // every output tile's first slice first: one wave runs them all side by side
        tl.id = t - tl.split * outputs;
        grouped_tile(tl.id, tiles_m, tiles_n, tl.b, tm, tn);
        tl.m0 = tm * Cfg::TILE_M;
        tl.n0 = tn * BN;
        const int k_steps = (K + Cfg::BK - 1) / Cfg::BK;
        const int per = splits > 1 ? per_split : k_steps;
        tl.kt0 = min(tl.split * per, k_steps);
        tl.kt1 = min(tl.kt0 + per, k_steps);
        tl.cols = min(BN, N - tl.n0);
        return tl;
    }
    // Split-K's reduction, in the kernel (no launch of its own): every slice stores its fp32 sums in ws, and the
    // slice that finishes last (the tile's arrival counter) adds them all up in slice order -- the same sums run to
    // run whichever slice is last -- sets the counter back to zero, and goes on to the epilogue with them; the
    // others skip it (false). Each consumer thread stores and reads back the accumulators it holds, so the sums
    // need no exchange between threads; the stores are float4s, consecutive threads side by side (coalesced).
    // (Compiled for tiles of at most 64 accumulators a thread, 128 x 128 and smaller: with 128 the extra code makes
    // the compiler spill the accumulators of every launch; the launcher splits only with these tiles.)
    static constexpr bool SPLITTABLE = MI * BN <= 128;
    template <int NA>
    __device__ bool split_fixup(const Tile& tl, float (&acc)[MI][NA]) const
    {
        if constexpr (!SPLITTABLE) {
            return true;
        } else {
            if (splits == 1) return true;
            __shared__ int last;
            constexpr int V = MI * NA / 4;   // float4s per thread
            const int tid = threadIdx.x - 128;  // consumer thread 0..255
            float4* tile_ws = reinterpret_cast<float4*>(ws) + (long long)tl.id * splits * V * 256 + tid;
            float4* mine = tile_ws + (long long)tl.split * V * 256;
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NA / 4; ++j)
                    mine[(i * (NA / 4) + j) * 256] = make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2],
                                                                  acc[i][4 * j + 3]);
            __threadfence();       // the sums are visible device-wide before this slice counts itself
            consumers_sync();
            if (tid == 0) {
                const unsigned arrived = atomicAdd(counters + tl.id, 1u);
                last = arrived == (unsigned)(splits - 1);
                if (last) counters[tl.id] = 0u;   // every slice has counted: zero for the next launch
            }
            consumers_sync();
            if (!last) return false;
            __threadfence();
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NA / 4; ++j) {
                    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    for (int sp = 0; sp < splits; ++sp) {
                        const float4 v = sp == tl.split
                                             ? make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2],
                                                           acc[i][4 * j + 3])
                                             : __ldcg(tile_ws + ((long long)sp * V + i * (NA / 4) + j) * 256);
                        sum.x += v.x;
                        sum.y += v.y;
                        sum.z += v.z;
                        sum.w += v.w;
                    }
                    acc[i][4 * j] = sum.x;
                    acc[i][4 * j + 1] = sum.y;
                    acc[i][4 * j + 2] = sum.z;
                    acc[i][4 * j + 3] = sum.w;
                }
            return true;
        }
    }
    __device__ void load(const Tile& tl, int kt, unsigned a_dst, unsigned b_dst, unsigned bar) const
    {
        const int k0 = kt * Cfg::BK, ba = tl.b * a_batched, bb = tl.b * b_batched;
        if (!TRANS_A) {
            tma_load(a_dst, map_a, bar, k0, tl.m0, ba);                  // box (BK, TILE_M): k innermost
        } else {
#pragma unroll
            for (int j = 0; j < Cfg::TILE_M / SLAB; ++j)                  // boxes (64 of m, BK of k)
                tma_load(a_dst + j * Cfg::SLAB_BYTES, map_a, bar, tl.m0 + j * SLAB, k0, ba);
        }
        if (TRANS_B) {
            tma_load(b_dst, map_b, bar, k0, tl.n0, bb);                  // box (BK, BN)
        } else {
#pragma unroll
            for (int j = 0; j < BN / SLAB; ++j)
                tma_load(b_dst + j * Cfg::SLAB_BYTES, map_b, bar, tl.n0 + j * SLAB, k0, bb);
        }
    }
    __device__ void* row(const Tile& tl, int mm) const
    {
        const int m = tl.m0 + mm;
        return m < M ? C + tl.b * stride_c + m * ldc_row + tl.n0 * ldc_col : nullptr;
    }
    __device__ void store(const Tile& tl, unsigned smem) const { tma_store(map_out, smem, tl.n0, tl.m0, tl.b); }
};

}  // namespace minidl_wgmma

// A_BATCHED/B_BATCHED (runtime): 1 when the operand has a matrix per batch entry, 0 when one matrix is
// broadcast over the batch (its tensor map has a batch extent of 1). STAGED: the epilogue stages the 16-bit
// tile in shared memory and stores it with TMA through map_c (used when use_map_c and beta == 0), at the
// price of one pipeline stage for BN = 256 (wgmma_pipeline.cuh, section 6).
// OUT: C's KIND (default the data's; 0 = float32 for 16-bit data: the RNN's bf16 weight gradients, summed into
// float32 parameters' gradients).
template <int KIND, int BN, bool TRANS_A, bool TRANS_B, bool STAGED, int MI, int OUT = KIND>
__global__ void __launch_bounds__(minidl_wgmma::THREADS, 1)
    gemm_wgmma(const __grid_constant__ minidl_wgmma::TensorMap map_a, const __grid_constant__ minidl_wgmma::TensorMap map_b,
               const __grid_constant__ minidl_wgmma::TensorMap map_c, const minidl_wgmma::GemmArgs q, void* C,
               const void* bias, float* ws, unsigned* counters)
{
    using namespace minidl_wgmma;
    GemmProblem<KIND, BN, TRANS_A, TRANS_B, MI, OUT> p;
    p.map_a = &map_a;
    p.map_b = &map_b;
    p.map_out = q.use_map_c ? &map_c : nullptr;
    p.M = q.M;
    p.N = q.N;
    p.K = q.K;
    p.batch = q.batch;
    p.a_batched = q.a_batched;
    p.b_batched = q.b_batched;
    p.tiles_m = (q.M + BM * MI - 1) / (BM * MI);
    p.tiles_n = (q.N + BN - 1) / BN;
    p.alpha = q.alpha;
    p.beta = q.beta;
    p.C = static_cast<typename minidl_tc::Storage<OUT>::T*>(C);
    p.ldc_row = q.ldc_row;
    p.ldc_col = q.ldc_col;
    p.stride_c = q.stride_c;
    p.vec_c = q.vec_c;
    p.relu = 0;
    p.bias = bias;   // per column n, of C's type or float32 (q.bias_f32) (nn.Linear's), or null
    p.bias_f32 = q.bias_f32;
    p.splits = q.splits;
    p.per_split = q.per_split;
    p.ws = ws;
    p.counters = counters;
    wgmma_run<KIND, BN, TRANS_A, TRANS_B, OUT, STAGED && OUT != KIND_TF32, MI>(p);
}

// TF32 wgmma reads K-major operands only: an operand stored the other way is first copied transposed by
// this helper, out[b][r][c] = in[b][c][r] for r < rows, c < cols (in: cols x rows with leading dimension
// ld_in; out: rows x cols with leading dimension ld_out, a multiple of 4 so that TMA may read it). A 32 x 32
// tile goes through shared memory (one padding column: no bank conflicts), so that both the reads and
// the writes are coalesced. Grid: (ceil(rows / 32), ceil(cols / 32), batch); block: 32 x 8 threads.
extern "C" __global__ void gemm_wgmma_transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols,
                                     long long ld_in, long long ld_out, long long stride_in, long long stride_out)
{
    __shared__ float tile[32][33];
    in += blockIdx.z * stride_in;
    out += blockIdx.z * stride_out;
    const int r0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {  // read rows c0 + i of `in`, 32 consecutive r
        const int c = c0 + i, r = r0 + threadIdx.x;
        tile[i][threadIdx.x] = (c < cols && r < rows) ? in[c * ld_in + r] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {  // write rows r0 + i of `out`, 32 consecutive c
        const int r = r0 + i, c = c0 + threadIdx.x;
        if (r < rows && c < cols) out[r * ld_out + c] = tile[threadIdx.x][i];
    }
}

#ifndef __CUDACC_RTC__
// For scripts/compile_kernels.sh (nvcc, no name expressions): instantiations that between them take
// every code path (TF32, both 16-bit kinds, every transpose, the three tile widths).
#define MINIDL_WGMMA_INSTANCE(KIND, BN, TA, TB, ST, MI)                                                          \
    template __global__ void gemm_wgmma<KIND, BN, TA, TB, ST, MI>(                                                \
        const __grid_constant__ minidl_wgmma::TensorMap, const __grid_constant__ minidl_wgmma::TensorMap,         \
        const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::GemmArgs, void*, const void*, float*,  \
        unsigned*);
MINIDL_WGMMA_INSTANCE(0, 256, false, true, false, 1)
MINIDL_WGMMA_INSTANCE(0, 64, false, true, false, 2)
MINIDL_WGMMA_INSTANCE(1, 128, true, false, true, 2)
MINIDL_WGMMA_INSTANCE(2, 256, false, false, true, 1)
MINIDL_WGMMA_INSTANCE(2, 256, false, false, false, 1)
MINIDL_WGMMA_INSTANCE(2, 64, true, true, true, 1)
template __global__ void gemm_wgmma<2, 128, true, false, false, 1, 0>(
    const __grid_constant__ minidl_wgmma::TensorMap, const __grid_constant__ minidl_wgmma::TensorMap,
    const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::GemmArgs, void*, const void*, float*,
    unsigned*);
#endif
