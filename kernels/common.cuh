// common.cuh: the tiled GEMM main loop shared by kernels/gemm.cu and kernels/convolution.cu.
//
// Algorithm. C (M x N) = A (M x K) * B (K x N), one 128 x BN tile of C per thread block of 256
// threads (BN = 128, 64 or 32: a narrow tile for problems with few columns, e.g. 32 or 64 output
// channels, so that no work is wasted on columns that do not exist). The reduction runs in steps of
// 8: each step copies an 8 x 128 slice of A and an 8 x BN slice of B into shared memory, then every
// thread does 8 rank-1 updates of its own 8 x (BN/16) block of C, kept in registers (2-D register
// blocking: with BN = 128, 16 FMAs per shared-memory float loaded, instead of 1).
//
// Thread mapping of the compute: thread t has tx = t % 16, ty = t / 16 and owns the rows
// {ty*4 .. ty*4+3} and {64+ty*4 .. 64+ty*4+3} of the tile; for BN = 128 the columns follow the same
// pattern with tx, for BN = 64 they are tx*4 .. +3, for BN = 32 tx*2, tx*2+1. Splitting the 8 rows
// into two float4s 64 apart keeps the shared-memory reads 16-byte vector loads that are broadcast
// (A) or conflict-free (B) across a warp.
//
// Double buffering. Two shared buffers: while the block computes on one, each thread has already
// issued the global loads of the next step into registers; it writes them into the other buffer
// after the compute, and one __syncthreads per step separates the two. The global-memory latency
// is hidden behind 8 x 64 FMAs per thread.
//
// Fragment prefetch (PREFETCH = true, used by the GEMM kernels): the 8 + BN/16 values a thread reads
// from shared memory for reduction step kk + 1 are loaded into a second set of registers while the
// FMAs of step kk run, and step 0 of the next tile right after the barrier. Measured on an H200 at
// 4096^3: 3.46 -> 3.27 ms NN, 3.92 -> 3.35 ms NT (benchmarks/results/gpu_gemm.md). The implicit-GEMM
// convolutions keep PREFETCH = false: their gather loaders already fill the 128-register budget,
// and with the extra 16 registers nvcc -Xptxas -v reports them spilling more.
//
// Who loads what is NOT fixed here: the main loop takes two "loaders" and an "epilogue". A loader
// knows where element (row, k) of its operand lives (a plain matrix for the GEMM, a gather from the
// image for an implicit-GEMM convolution) and which elements this thread fetches:
//     loader.load(k0)        fetch this thread's part of rows [0,ROWS) x k in [k0, k0+8) to registers
//     loader.store(tile)     write them into the shared tile, stored k-major: tile[k * (ROWS+PAD) + row]
// Out-of-range elements are loaded as 0, so edge tiles need no special case in the compute.
// The epilogue gets each accumulated value with its (row, col) inside the tile.
#pragma once

namespace minidl {

constexpr int TILE_M = 128;        // rows of C per block
constexpr int TILE_K = 8;          // reduction step
constexpr int GEMM_THREADS = 256;  // 16 x 16 threads, 8 x (BN/16) outputs each
constexpr int SMEM_PAD = 4;        // keeps rows 16-byte aligned and spreads the transposing stores over banks

// A shared tile holding ROWS rows of an operand for TILE_K reduction indices, k-major.
template <int ROWS>
__device__ __forceinline__ float& tile_at(float* tile, int k, int row)
{
    return tile[k * (ROWS + SMEM_PAD) + row];
}

template <int BN, bool PREFETCH = false, class LoaderA, class LoaderB, class Epilogue>
__device__ __forceinline__ void gemm_mainloop(LoaderA& load_a, LoaderB& load_b, Epilogue& epilogue,
                                              int k_begin, int k_end)
{
    static_assert(BN == 128 || BN == 64 || BN == 32, "BN must be 128, 64 or 32");
    constexpr int TN = BN / 16;  // columns per thread
    __shared__ __align__(16) float a_tiles[2][TILE_K][TILE_M + SMEM_PAD];
    __shared__ __align__(16) float b_tiles[2][TILE_K][BN + SMEM_PAD];

    const int tx = threadIdx.x % 16;
    const int ty = threadIdx.x / 16;

    float acc[8][TN];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    int buf = 0;
    if (k_begin < k_end) {
        load_a.load(k_begin);
        load_b.load(k_begin);
        load_a.store(&a_tiles[0][0][0]);
        load_b.store(&b_tiles[0][0][0]);
    }
    __syncthreads();

    float a_frag[2][8], b_frag[2][TN];
    auto read_frags = [&](float (&a)[8], float (&b)[TN], int which_buf, int kk) {
        const float4 a_lo = *reinterpret_cast<const float4*>(&a_tiles[which_buf][kk][ty * 4]);
        const float4 a_hi = *reinterpret_cast<const float4*>(&a_tiles[which_buf][kk][64 + ty * 4]);
        a[0] = a_lo.x; a[1] = a_lo.y; a[2] = a_lo.z; a[3] = a_lo.w;
        a[4] = a_hi.x; a[5] = a_hi.y; a[6] = a_hi.z; a[7] = a_hi.w;
        const float* brow = &b_tiles[which_buf][kk][0];
        if constexpr (BN == 128) {
            const float4 b_lo = *reinterpret_cast<const float4*>(brow + tx * 4);
            const float4 b_hi = *reinterpret_cast<const float4*>(brow + 64 + tx * 4);
            b[0] = b_lo.x; b[1] = b_lo.y; b[2] = b_lo.z; b[3] = b_lo.w;
            b[4] = b_hi.x; b[5] = b_hi.y; b[6] = b_hi.z; b[7] = b_hi.w;
        } else if constexpr (BN == 64) {
            const float4 b4 = *reinterpret_cast<const float4*>(brow + tx * 4);
            b[0] = b4.x; b[1] = b4.y; b[2] = b4.z; b[3] = b4.w;
        } else {
            const float2 b2 = *reinterpret_cast<const float2*>(brow + tx * 2);
            b[0] = b2.x; b[1] = b2.y;
        }
    };
    if (PREFETCH && k_begin < k_end) read_frags(a_frag[0], b_frag[0], 0, 0);

    for (int k0 = k_begin; k0 < k_end; k0 += TILE_K) {
        const bool has_next = k0 + TILE_K < k_end;
        if (has_next) {  // issue the next step's global loads now; they land while we compute
            load_a.load(k0 + TILE_K);
            load_b.load(k0 + TILE_K);
        }
#pragma unroll
        for (int kk = 0; kk < TILE_K; ++kk) {
            // With PREFETCH the fragments of step kk + 1 are read from shared memory before the FMAs of
            // step kk (register double buffering), so their latency hides behind 8 x TN FMAs.
            // Without it each step reads its own fragments, then waits for them.
            const int cur = PREFETCH ? (kk & 1) : 0;
            if constexpr (PREFETCH) {
                if (kk + 1 < TILE_K) read_frags(a_frag[(kk + 1) & 1], b_frag[(kk + 1) & 1], buf, kk + 1);
            } else {
                read_frags(a_frag[0], b_frag[0], buf, kk);
            }
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[cur][i], b_frag[cur][j], acc[i][j]);
        }
        if (has_next) {
            load_a.store(&a_tiles[buf ^ 1][0][0]);
            load_b.store(&b_tiles[buf ^ 1][0][0]);
        }
        __syncthreads();
        buf ^= 1;
        if (PREFETCH && has_next) read_frags(a_frag[0], b_frag[0], buf, 0);
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int row = (i < 4) ? ty * 4 + i : 64 + ty * 4 + (i - 4);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int col = BN == 128 ? ((j < 4) ? tx * 4 + j : 64 + tx * 4 + (j - 4)) : tx * TN + j;
            epilogue(row, col, acc[i][j]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Loaders of plain strided matrices (used by the GEMM, and by convolutions where an operand is one).
// ROWS is the tile height they fill: TILE_M for A, BN for B.
// ---------------------------------------------------------------------------------------------

// Operand element (row, k) at base[row * ld + k]: contiguous along k (A not transposed, B transposed).
// Thread t < 2*ROWS fetches row t/2 and the 4 consecutive k's (t%2)*4 .. +3: one float4 when aligned.
template <int ROWS>
struct KContiguousLoader {
    const float* base;
    long long ld;
    int rows, depth;  // valid rows (from row0), reduction length
    bool vec;         // ld % 4 == 0 and base 16-byte aligned: float4 loads on full tiles
    int row, kq;
    float v[4];

    __device__ KContiguousLoader(const float* base_, long long ld_, int rows_, int depth_, int row0, bool vec_)
        : base(base_), ld(ld_), rows(rows_), depth(depth_), vec(vec_)
    {
        row = row0 + threadIdx.x / 2;
        kq = (threadIdx.x % 2) * 4;
    }
    // Threads beyond 2*ROWS have nothing to load (only when ROWS < 128; compile-time otherwise).
    __device__ __forceinline__ bool active() const { return 2 * ROWS >= GEMM_THREADS || threadIdx.x < 2 * ROWS; }
    __device__ __forceinline__ void load(int k0)
    {
        if (!active()) return;
        const int k = k0 + kq;
        const float* p = base + row * ld + k;
        if (vec && row < rows && k + 3 < depth) {
            const float4 t = __ldg(reinterpret_cast<const float4*>(p));
            v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = (row < rows && k + j < depth) ? __ldg(p + j) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
        if (!active()) return;
#pragma unroll
        for (int j = 0; j < 4; ++j) tile_at<ROWS>(tile, kq + j, threadIdx.x / 2) = v[j];
    }
};

// Operand element (row, k) at base[k * ld + row]: contiguous along rows (A transposed, B not).
// ROWS/4 threads per k; thread t fetches k = t / (ROWS/4) and the 4 consecutive rows
// 4*(t % (ROWS/4)) .. +3: one float4 when aligned.
template <int ROWS>
struct RowContiguousLoader {
    static constexpr int PER_K = ROWS / 4;
    const float* base;
    long long ld;
    int rows, depth;
    bool vec;
    int row, kl;
    float v[4];

    __device__ RowContiguousLoader(const float* base_, long long ld_, int rows_, int depth_, int row0, bool vec_)
        : base(base_), ld(ld_), rows(rows_), depth(depth_), vec(vec_)
    {
        row = row0 + 4 * (threadIdx.x % PER_K);
        kl = threadIdx.x / PER_K;
    }
    __device__ __forceinline__ bool active() const
    {
        return TILE_K * PER_K >= GEMM_THREADS || threadIdx.x < TILE_K * PER_K;
    }
    __device__ __forceinline__ void load(int k0)
    {
        if (!active()) return;
        const int k = k0 + kl;
        const float* p = base + k * ld + row;
        if (vec && k < depth && row + 3 < rows) {
            const float4 t = __ldg(reinterpret_cast<const float4*>(p));
            v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = (k < depth && row + j < rows) ? __ldg(p + j) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
        if (!active()) return;
        *reinterpret_cast<float4*>(&tile_at<ROWS>(tile, kl, 4 * (threadIdx.x % PER_K))) =
            make_float4(v[0], v[1], v[2], v[3]);
    }
};

// alpha * value + beta * prior, without reading the prior when beta == 0 (so NaN there is ignored,
// as in cuDNN and BLAS).
__device__ __forceinline__ float blend_value(float value, float alpha, float beta, const float* prior)
{
    return beta == 0.0f ? alpha * value : alpha * value + beta * (*prior);
}

}  // namespace minidl
