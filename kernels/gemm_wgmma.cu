// minidl: arch sm_90a   (wgmma and setmaxnreg exist only on sm_90a; see _compile.py and compile_kernels.sh)
//
// gemm_wgmma.cu: GEMM on Hopper's tensor cores, C = alpha * op(A) * op(B) + beta * C, strided-batched.
// The same contract as kernels/gemm_tc.cu (the mma.sync kernel, kept for pre-Hopper GPUs and as the
// teaching step before this one), built from the three things that take an H100 to its peak:
//
//   wgmma  (warpgroup MMA): four warps together issue one asynchronous 64 x N x k product whose A and B
//          are read by the tensor cores straight from shared memory; no ldmatrix, no registers for A/B.
//   TMA    (cp.async.bulk.tensor): one thread asks the copy engine for a whole 2-D tile; it arrives in
//          shared memory already swizzled, and its arrival is counted on an mbarrier.
//   warp specialisation: one producer warpgroup only issues copies, two consumer warpgroups only issue
//          wgmma; the two sides meet at a ring of shared-memory stages guarded by mbarriers.
//
// One kernel template, gemm_wgmma<KIND, BN, TRANS_A, TRANS_B>:
//   KIND 0 (TF32)  float32 data, TF32 math, float32 result (wgmma ...k8.f32.tf32.tf32)
//   KIND 1 (F16)   float16 data, fp32 accumulation, float16 result (k16)
//   KIND 2 (BF16)  bfloat16 data, fp32 accumulation, bfloat16 result (k16)
//   BN             64, 128 or 256: the tile is 128 x BN (BM = 128: one 64-row half per consumer warpgroup)
//   TRANS_A/B      op(A) = A^T / op(B) = B^T, as in gemm_tc.cu. For 16-bit data every case runs here (the
//                  wgmma transpose bits); TF32 wgmma takes K-major operands only, i.e. A stored (M, K) and
//                  B stored (N, K) (TRANS_A = false, TRANS_B = true): the launcher transposes the others.
//
// ---------------------------------------------------------------------------------------------
// 1. Shared memory. A stage holds the A tile (128 rows) and the B tile (BN rows) of one block step of
//    128 bytes of k (BK = 64 halves or 32 floats). Each operand is stored in the layout the tensor
//    cores read, and TMA writes exactly that layout:
//
//    K-major operand (A stored (M, K); B stored (N, K)): row r of the tile (m or n) is 128 bytes of k,
//    rows follow each other, and within each group of 8 rows (a 1024-byte "swizzle atom") the 16-byte
//    chunk c of row r is stored at chunk position c XOR (r % 8) ("128-byte swizzle"). Reading one k
//    column then touches 8 different bank groups: no bank conflicts, without padding.
//
//       row 0:  c0 c1 c2 c3 c4 c5 c6 c7         (chunk c = 8 elements of k, 16 bytes)
//       row 1:  c1 c0 c3 c2 c5 c4 c7 c6
//       row 2:  c2 c3 c0 c1 c6 c7 c4 c5    ...  row 7: c7 c6 c5 c4 c3 c2 c1 c0
//
//    M/N-major operand (16-bit only; A stored (K, M), B stored (K, N)): the tile is cut into 64-column
//    slabs (64 halves = 128 bytes of m or n); slab j holds BK rows of k, each 128 bytes of m (or n),
//    swizzled the same way; slab j starts at j * BK * 128 bytes.
//
// 2. Matrix descriptors. wgmma does not take addresses: it takes a 64-bit descriptor per operand,
//       bits  0-13  start address >> 4           bits 32-45  SBO >> 4 ("stride byte offset")
//       bits 16-29  LBO >> 4 ("leading byte offset")   bits 62-63  swizzle (1 = 128-byte)
//    K-major: SBO = 1024 (from one group of 8 rows to the next), LBO unused (a k16 step lies inside
//    one 128-byte row); the step kk of the stage starts kk * 32 bytes into the row: the hardware
//    applies the swizzle to the address it forms, so moving the start inside the atom is legal.
//    M/N-major: LBO = BK * 128 (from one 64-column slab to the next), SBO = 1024 (from 8 rows of k to
//    the next 8); the step kk starts kk * 16 rows = kk * 2048 bytes further.
//
// 3. The accumulators. A warpgroup's 64 x BN fp32 tile lives in its 128 threads' registers, BN/2 each.
//    Warp w of the group holds rows 16w..16w+15, and inside the warp the layout is mma.sync's 16 x 8 C
//    fragment repeated along n: with g = lane / 4, t = lane % 4, acc[4j + 0, 1] = (row g, columns 8j + 2t,
//    8j + 2t + 1), acc[4j + 2, 3] = (row g + 8, the same columns).
//
// 4. The pipeline (STAGES deep, two mbarriers per stage). full[s] is armed by the producer with the
//    stage's byte count (mbarrier.arrive.expect_tx) and completes when TMA has written those bytes;
//    empty[s] completes when all 8 consumer warps have arrived on it, i.e. their wgmmas that read stage
//    s are finished. Each barrier's phase flips every time it completes, so a waiter passes the phase
//    parity it expects: the producer's k-th pass over stage s waits for empty[s] phase (k & 1) ^ 1 (on a
//    fresh barrier the "previous" phase counts as complete, so the first pass does not wait), a consumer
//    waits for full[s] phase k & 1. A consumer issues the 4 (16-bit) or 4 (TF32, k8) wgmmas of step kt,
//    commits them as a group, then waits until only that group is in flight (wgmma.wait_group 1): step
//    kt-1's group is done, and stage kt-1 goes back to the producer while step kt still computes.
//
// 5. Persistent tiles. The grid is one block per SM (the 192 KiB of stages allow one), and block b
//    computes tiles b, b + gridDim.x, ... in the grouped order of gemm_tc.cu (GROUP_M tile rows at a
//    time, for L2 reuse), batch outermost. The stage ring runs on across tiles, so the producer loads
//    the next tile's first stages while the consumers run the epilogue of this one.
//
// 6. Edges: TMA fills every element outside the matrix with zero (rows past M or N, k past K), and
//    the epilogue writes only elements inside C. What TMA needs, the launcher checks (else it runs
//    gemm_tc.cu): 16-byte aligned base pointers, leading dimensions and batch strides that are
//    multiples of 16 bytes.
//
// 7. Epilogue: C[b*stride_c + m*ldc_row + n*ldc_col] = alpha * acc + beta * C (C not read when beta == 0),
//    converted to C's type; pairs of adjacent columns in one store when C is row-major (vec_c = 1). For
//    16-bit C with 16-byte aligned rows and beta = 0 (vec_c = 2), the 4 threads of a row first exchange
//    their packed pairs with shuffles so that each stores 8 adjacent elements at once (store_tile_16byte).
//
// Grid: min(tiles, SMs) blocks of 384 threads (warpgroup 0 the producer, 1-2 the consumers). Dynamic
// shared memory: STAGES * (A + B tile) + 1024 (alignment of the 1024-byte swizzle atoms) + barriers.

#include "tc_common.cuh"
#include "wgmma_instructions.cuh"

namespace minidl_wgmma {

using minidl_tc::KIND_BF16;
using minidl_tc::KIND_F16;
using minidl_tc::KIND_TF32;

constexpr int BM = 128;          // tile rows: two consumer warpgroups of 64
constexpr int CONSUMERS = 2;     // consumer warpgroups
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int ROW_BYTES = 128;   // bytes of k per stage row = the swizzle span
constexpr int SLAB = 64;         // columns of an M/N-major slab (64 halves = 128 bytes)
constexpr int GROUP_M = 8;       // tile rows per group in the tile order (L2 reuse)
constexpr int SMEM_BUDGET = 196608;  // bytes of stages: 192 KiB of the 227 KiB a block may have

// A CUtensorMap (the driver's 128-byte, 64-byte aligned TMA descriptor), passed by value as a
// __grid_constant__ kernel parameter: TMA reads it from the parameter space.
struct __align__(64) TensorMap {
    unsigned long long v[16];
};

template <int KIND, int BN>
struct Config {
    static constexpr int ES = KIND == KIND_TF32 ? 4 : 2;        // bytes per element
    static constexpr int BK = ROW_BYTES / ES;                   // k per stage: 32 floats or 64 halves
    static constexpr int KSTEP = KIND == KIND_TF32 ? 8 : 16;    // k per wgmma
    static constexpr int A_BYTES = BM * ROW_BYTES;              // 16 KiB
    static constexpr int B_BYTES = BN * ROW_BYTES;              // 8, 16 or 32 KiB
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int STAGES = SMEM_BUDGET / STAGE_BYTES > 8 ? 8 : SMEM_BUDGET / STAGE_BYTES;
    static constexpr int SLAB_BYTES = BK * ROW_BYTES;           // one M/N-major slab: BK rows of 128 bytes
    static constexpr int ACC = BN / 2;                          // fp32 accumulators per consumer thread
    static_assert(BN == 64 || BN == 128 || BN == 256, "tile widths with a wgmma shape");
};

// ---- mbarrier ---------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spin until the barrier's phase of this parity has completed. A pipeline bug would make this wait
// forever and hang the process; after 2^28 tries (tens of seconds, far beyond any real wait) the kernel
// traps instead, so the launch fails with an error the host sees.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    for (unsigned tries = 0; !done; ++tries) {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
        if (tries == (1u << 28)) __trap();
    }
}

// ---- TMA --------------------------------------------------------------------------------------------
// The box at coordinates (c0 innermost, c1, c2 = batch) of `map` into shared memory at `dst`, counted on `bar`.
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, unsigned bar, int c0, int c1, int c2)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// ---- wgmma ------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo, unsigned sbo)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);  // 1 << 62: 128-byte swizzle
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Keeps the compiler from moving reads or writes of the accumulators across a wgmma fence or wait
// (the asynchronous instruction owns those registers in between).
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int KIND, int BN, bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void wgmma_step(float (&d)[BN / 2], unsigned long long da, unsigned long long db)
{
    constexpr int TA = TRANS_A ? 1 : 0, TB = TRANS_B ? 0 : 1;  // 1: the operand is M- or N-major
    if constexpr (KIND == KIND_TF32) {
        static_assert(!TRANS_A && TRANS_B, "TF32 wgmma takes K-major A and B only");
        if constexpr (BN == 64) wgmma_tf32_n64(d, da, db);
        else if constexpr (BN == 128) wgmma_tf32_n128(d, da, db);
        else wgmma_tf32_n256(d, da, db);
    } else if constexpr (KIND == KIND_F16) {
        if constexpr (BN == 64) wgmma_f16_n64<TA, TB>(d, da, db);
        else if constexpr (BN == 128) wgmma_f16_n128<TA, TB>(d, da, db);
        else wgmma_f16_n256<TA, TB>(d, da, db);
    } else {
        if constexpr (BN == 64) wgmma_bf16_n64<TA, TB>(d, da, db);
        else if constexpr (BN == 128) wgmma_bf16_n128<TA, TB>(d, da, db);
        else wgmma_bf16_n256<TA, TB>(d, da, db);
    }
}

// Tile `tile` of the persistent loop -> (batch, first row, first column), grouped as in gemm_tc.cu.
__device__ __forceinline__ void tile_origin(int tile, int tiles_m, int tiles_n, int bn, int& b, int& m0, int& n0)
{
    const int per_batch = tiles_m * tiles_n;
    b = tile / per_batch;
    const int r = tile - b * per_batch;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (r / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    m0 = (first_m + (r % per_group) % group_rows) * BM;
    n0 = ((r % per_group) / group_rows) * bn;
}

// The 16-bit epilogue's fast path (row-major C, rows 16-byte aligned, beta = 0): 16-byte stores. A quad
// (the 4 threads t = 0..3 of row g) holds 4 adjacent 8-column blocks as 2-element pairs; rounded and
// packed two to a register, a 4 x 4 exchange of registers inside the quad (three shuffles) gives thread
// t the whole block 4i + t: 8 adjacent elements, one 16-byte store. A warp's store then covers 64
// contiguous bytes in each of its 8 rows instead of 16 (a quarter of the store instructions and sectors).
template <int KIND>
__device__ __forceinline__ unsigned pack_pair(float v0, float v1)
{
    unsigned packed;
    if constexpr (KIND == KIND_F16)
        asm("cvt.rn.f16x2.f32 %0, %2, %1;\n" : "=r"(packed) : "f"(v0), "f"(v1));  // v0 in the low half
    else
        asm("cvt.rn.bf16x2.f32 %0, %2, %1;\n" : "=r"(packed) : "f"(v0), "f"(v1));
    return packed;
}

__device__ __forceinline__ unsigned pick4(const unsigned (&v)[4], int i)
{
    return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}

template <int KIND, int BN>
__device__ __forceinline__ void store_tile_16byte(const float (&acc)[BN / 2], unsigned short* C, int M, int N,
                                                  long long ldc_row, int row0, int n0, int t, float alpha)
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int m = row0 + h * 8;
#pragma unroll
        for (int i = 0; i < BN / 32; ++i) {
            unsigned v[4], w[4];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = 4 * i + jj;
                v[jj] = pack_pair<KIND>(alpha * acc[4 * j + 2 * h], alpha * acc[4 * j + 2 * h + 1]);
            }
            // w[u] = thread u's pair of block 4i + t (every lane takes part: the shuffles need the whole warp)
            const unsigned own = pick4(v, t);
#pragma unroll
            for (int u = 0; u < 4; ++u) w[u] = own;   // w[t] stays; the others are replaced below
#pragma unroll
            for (int k = 1; k < 4; ++k) {
                const int p = t ^ k;
                const unsigned got = __shfl_xor_sync(0xffffffffu, pick4(v, p), k);
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (u == p) w[u] = got;
            }
            const int n = n0 + 8 * (4 * i + t);
            if (m >= M || n >= N) continue;
            unsigned short* dst = C + m * ldc_row + n;
            if (n + 7 < N) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
                for (int e = 0; e < N - n; ++e) dst[e] = (unsigned short)(pick4(w, e >> 1) >> (16 * (e & 1)));
            }
        }
    }
}

}  // namespace minidl_wgmma

// A_BATCHED/B_BATCHED (runtime): 1 when the operand has a matrix per batch entry, 0 when one matrix is
// broadcast over the batch (its tensor map has a batch extent of 1).
template <int KIND, int BN, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(minidl_wgmma::THREADS, 1)
    gemm_wgmma(const __grid_constant__ minidl_wgmma::TensorMap map_a, const __grid_constant__ minidl_wgmma::TensorMap map_b,
               int M, int N, int K, int batch, int a_batched, int b_batched, float alpha, float beta, void* C_,
               long long ldc_row, long long ldc_col, long long stride_c, int vec_c)
{
    using namespace minidl_wgmma;
    using Cfg = Config<KIND, BN>;
    using T = typename minidl_tc::Storage<KIND>::T;
    constexpr int STAGES = Cfg::STAGES, BK = Cfg::BK, KSTEP = Cfg::KSTEP, ES = Cfg::ES;

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (minidl_tc::smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms: 1024-aligned
    const unsigned full_bar = base + STAGES * Cfg::STAGE_BYTES;               // STAGES barriers of 8 bytes
    const unsigned empty_bar = full_bar + STAGES * 8;

    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n * batch;
    const int k_tiles = (K + BK - 1) / BK;
    const int warpgroup = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full_bar + 8 * s, 1);                  // the producer's arrive.expect_tx
            mbar_init(empty_bar + 8 * s, CONSUMERS * 4);     // one arrival per consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    if (warpgroup == 0) {
        // ---- producer: one thread issues every copy; the warpgroup gives its registers to the consumers
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (threadIdx.x == 0) {
            int s = 0;
            unsigned phase = 0;
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int b, m0, n0;
                tile_origin(tile, tiles_m, tiles_n, BN, b, m0, n0);
                const int ba = b * a_batched, bb = b * b_batched;
                for (int kt = 0; kt < k_tiles; ++kt) {
                    mbar_wait(empty_bar + 8 * s, phase ^ 1);
                    const unsigned full = full_bar + 8 * s;
                    mbar_expect_tx(full, Cfg::STAGE_BYTES);  // zero-filled bytes past the edges count too
                    const unsigned a_dst = base + s * Cfg::STAGE_BYTES, b_dst = a_dst + Cfg::A_BYTES;
                    const int k0 = kt * BK;
                    if (!TRANS_A) {
                        tma_load(a_dst, map_a, full, k0, m0, ba);  // box (BK, 128): k innermost
                    } else {
#pragma unroll
                        for (int j = 0; j < BM / SLAB; ++j)         // boxes (64 of m, BK of k)
                            tma_load(a_dst + j * Cfg::SLAB_BYTES, map_a, full, m0 + j * SLAB, k0, ba);
                    }
                    if (TRANS_B) {
                        tma_load(b_dst, map_b, full, k0, n0, bb);  // box (BK, BN)
                    } else {
#pragma unroll
                        for (int j = 0; j < BN / SLAB; ++j)
                            tma_load(b_dst + j * Cfg::SLAB_BYTES, map_b, full, n0 + j * SLAB, k0, bb);
                    }
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        return;
    }

    // ---- consumers: warpgroup c computes rows 64c .. 64c + 63 of each tile
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = warpgroup - 1;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    T* C = static_cast<T*>(C_);
    int s = 0;
    unsigned phase = 0;
    float acc[Cfg::ACC];

    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int b, m0, n0;
        tile_origin(tile, tiles_m, tiles_n, BN, b, m0, n0);
#pragma unroll
        for (int i = 0; i < Cfg::ACC; ++i) acc[i] = 0.0f;

        int prev = 0;
        for (int kt = 0; kt < k_tiles; ++kt) {
            mbar_wait(full_bar + 8 * s, phase);
            const unsigned a_stage = base + s * Cfg::STAGE_BYTES, b_stage = a_stage + Cfg::A_BYTES;
            fence_acc(acc);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / KSTEP; ++kk) {
                const unsigned long long da =
                    TRANS_A ? smem_desc(a_stage + c * Cfg::SLAB_BYTES + kk * KSTEP * ROW_BYTES, Cfg::SLAB_BYTES, 1024)
                            : smem_desc(a_stage + c * 64 * ROW_BYTES + kk * KSTEP * ES, 16, 1024);
                const unsigned long long db =
                    TRANS_B ? smem_desc(b_stage + kk * KSTEP * ES, 16, 1024)
                            : smem_desc(b_stage + kk * KSTEP * ROW_BYTES, Cfg::SLAB_BYTES, 1024);
                wgmma_step<KIND, BN, TRANS_A, TRANS_B>(acc, da, db);
            }
            wgmma_commit();
            fence_acc(acc);
            wgmma_wait<1>();                                   // step kt-1's wgmmas are done ...
            if (kt > 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);  // ... so its stage is free
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
        wgmma_wait<0>();
        fence_acc(acc);
        if (k_tiles > 0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);

        // Epilogue (section 3's layout): rows g and g + 8 of this warp's 16, columns 8j + 2t, 8j + 2t + 1.
        T* Cb = C + b * stride_c;
        const int g = lane >> 2, t = lane & 3;
        if constexpr (KIND != KIND_TF32) {
            if (vec_c == 2 && beta == 0.0f) {
                store_tile_16byte<KIND, BN>(acc, Cb, M, N, ldc_row, m0 + c * 64 + warp * 16 + g, n0, t, alpha);
                continue;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + c * 64 + warp * 16 + g + h * 8;
            if (m >= M) continue;
            T* row = Cb + m * ldc_row;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int n = n0 + j * 8 + 2 * t;
                float v0 = alpha * acc[4 * j + 2 * h], v1 = alpha * acc[4 * j + 2 * h + 1];
                T* dst = row + n * ldc_col;
                if (vec_c && n + 1 < N) {
                    if (beta != 0.0f) {
                        v0 += beta * minidl_tc::load_c<KIND>(dst);
                        v1 += beta * minidl_tc::load_c<KIND>(dst + 1);
                    }
                    minidl_tc::store_c_pair<KIND>(dst, v0, v1);
                } else {
                    if (n < N) minidl_tc::store_c<KIND>(dst, beta != 0.0f ? v0 + beta * minidl_tc::load_c<KIND>(dst) : v0);
                    if (n + 1 < N) {
                        T* dst1 = dst + ldc_col;
                        minidl_tc::store_c<KIND>(dst1, beta != 0.0f ? v1 + beta * minidl_tc::load_c<KIND>(dst1) : v1);
                    }
                }
            }
        }
    }
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
#define MINIDL_WGMMA_INSTANCE(KIND, BN, TA, TB)                                                                  \
    template __global__ void gemm_wgmma<KIND, BN, TA, TB>(const __grid_constant__ minidl_wgmma::TensorMap,      \
                                                          const __grid_constant__ minidl_wgmma::TensorMap, int, int, \
                                                          int, int, int, int, float, float, void*, long long,      \
                                                          long long, long long, int);
MINIDL_WGMMA_INSTANCE(0, 256, false, true)
MINIDL_WGMMA_INSTANCE(0, 64, false, true)
MINIDL_WGMMA_INSTANCE(1, 128, true, false)
MINIDL_WGMMA_INSTANCE(2, 256, false, false)
MINIDL_WGMMA_INSTANCE(2, 64, true, true)
#endif
