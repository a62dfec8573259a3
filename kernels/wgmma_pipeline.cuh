// wgmma_pipeline.cuh: the machinery of minidl's Hopper tensor-core kernels (kernels/gemm_wgmma.cu,
// kernels/convolution_wgmma.cu), built from the three things that take an H100 to its peak:
//
//   wgmma  (warpgroup MMA): four warps together issue one asynchronous 64 x N x k product whose A and B
//          are read by the tensor cores straight from shared memory; no ldmatrix, no registers for A/B.
//   TMA    (cp.async.bulk.tensor): one thread asks the copy engine for a whole box of a 2- to 5-D tensor;
//          it arrives in shared memory already swizzled, elements outside the tensor read as zero, and
//          its arrival is counted on an mbarrier.
//   warp specialisation: one producer warpgroup only issues copies, two consumer warpgroups only issue
//          wgmma; the two sides meet at a ring of shared-memory stages guarded by mbarriers.
//
// A kernel is this machinery plus a *problem*: what a tile is, which boxes each k step copies, where a row
// of the result goes. `wgmma_run<KIND, BN, TRANS_A, TRANS_B, OUT_KIND>(problem)` is the whole persistent
// producer / consumer body; a problem type provides
//     int tiles() const;                       the number of 128 x BN tiles of C
//     Tile tile(int t) const;                  tile t: its k-step range [kt0, kt1), first column n0, and
//                                              `cols`, its valid columns (<= BN)
//     void load(const Tile&, int kt, unsigned a_dst, unsigned b_dst, unsigned bar) const;
//                                              issue the TMA copies of k step kt (STAGE_BYTES in all)
//     void* row(const Tile&, int mm) const;    where row mm (0..127) of the tile starts in the output
//                                              (at column n0), or nullptr if that row does not exist
//   and the epilogue's parameters (alpha, beta, bias, relu, ldc_col, vec_c).
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
// 6. Epilogue: row mm's element at column n0 + j is out[j * ldc_col] = alpha * (acc + bias[n0 + j]) +
//    beta * out (out not read when beta == 0, bias optional), then max(., 0) if relu; converted to the
//    output's type (OUT_KIND: the data's own, or fp32 for split-K partial sums). Pairs of adjacent columns
//    in one store when the row is contiguous (vec_c = 1); for 16-bit output with 16-byte aligned rows and
//    beta = 0 (vec_c = 2), the 4 threads of a row first exchange packed pairs with shuffles so that each
//    stores 8 adjacent elements at once (store_row_16byte).
//
// Grid: min(tiles, SMs) blocks of 384 threads (warpgroup 0 the producer, 1-2 the consumers). Dynamic
// shared memory: STAGES * (A + B tile) + 1024 (alignment of the 1024-byte swizzle atoms) + barriers.
#pragma once

#include "tc_common.cuh"
#include "wgmma_instructions.cuh"

namespace minidl_wgmma {

using minidl_tc::KIND_BF16;
using minidl_tc::KIND_F16;
using minidl_tc::KIND_TF32;

constexpr int BM = 128;          // tile rows per m64 sub-tile pair: two consumer warpgroups of 64 (x MI)
constexpr int CONSUMERS = 2;     // consumer warpgroups
constexpr int THREADS = 128 * (1 + CONSUMERS);
constexpr int ROW_BYTES = 128;   // bytes of k per stage row = the swizzle span
constexpr int SLAB = 64;         // columns of an M/N-major slab (64 halves = 128 bytes)
constexpr int GROUP_M = 8;       // tile rows per group in the tile order (L2 reuse)
constexpr int SMEM_BUDGET = 196608;  // bytes of stages: 192 KiB of the 227 KiB a block may have
constexpr int SMEM_BUDGET_STAGED = 229376;  // stages + the staged output tile (section 6): 224 KiB

// A CUtensorMap (the driver's 128-byte, 64-byte aligned TMA descriptor), passed by value as a
// __grid_constant__ kernel parameter: TMA reads it from the parameter space (problems keep its address).
struct __align__(64) TensorMap {
    unsigned long long v[16];
};

// MI: m64 sub-tiles per consumer warpgroup (1 or 2): the tile is (128 * MI) x BN. A 256 x 128 tile moves as
// few bytes per MMA as 128 x 256 does, for problems whose N is 128 or less.
template <int KIND, int BN, bool STAGED = false, int MI = 1>
struct Config {
    static constexpr int ES = KIND == KIND_TF32 ? 4 : 2;        // bytes per element
    static constexpr int BK = ROW_BYTES / ES;                   // k per stage: 32 floats or 64 halves
    static constexpr int KSTEP = KIND == KIND_TF32 ? 8 : 16;    // k per wgmma
    static constexpr int TILE_M = BM * MI;                      // tile rows: 128 or 256
    static constexpr int A_BYTES = TILE_M * ROW_BYTES;          // 16 or 32 KiB
    static constexpr int B_BYTES = BN * ROW_BYTES;              // 8, 16 or 32 KiB
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int C_BYTES = STAGED ? TILE_M * BN * 2 : 0;  // the staged 16-bit output tile
    static constexpr int BUDGET = STAGED ? SMEM_BUDGET_STAGED - C_BYTES : SMEM_BUDGET;
    static constexpr int STAGES = BUDGET / STAGE_BYTES > 8 ? 8 : BUDGET / STAGE_BYTES;
    static constexpr int SLAB_BYTES = BK * ROW_BYTES;           // one M/N-major slab: BK rows of 128 bytes
    static constexpr int ACC = BN / 2;                          // fp32 accumulators per thread per sub-tile
    static_assert(BN == 64 || BN == 128 || BN == 256, "tile widths with a wgmma shape");
    static_assert((MI == 1 || MI == 2) && MI * BN <= 256, "at most 128 accumulators per thread");
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
// The box at coordinates (c0 innermost, c1, c2[, c3]) of the tensor `map` describes, into shared memory at
// `dst`, its bytes counted on the mbarrier `bar`. Coordinates may be negative or past the end: those
// elements arrive as zeros (a convolution's padding costs nothing).
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2)
{
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int c2,
                                         int c3)
{
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// TMA store: the box at `src` in shared memory to coordinates (c0.., innermost first) of `map`; elements
// outside the tensor are not written. One bulk group per call; the issuing thread waits on it later.
__device__ __forceinline__ void tma_store(const TensorMap* map, unsigned src, int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n"
                 "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<unsigned long long>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
__device__ __forceinline__ void tma_store(const TensorMap* map, unsigned src, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 "cp.async.bulk.commit_group;\n" ::"l"(reinterpret_cast<unsigned long long>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
// Until the copy engine has read the shared memory of every store this thread issued (READ) or until
// the stores are complete.
template <bool READ>
__device__ __forceinline__ void tma_store_wait()
{
    if (READ) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// The 256 consumer threads only (named barrier 1; barrier 0 is __syncthreads, which the producer has left).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

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

// Row h (0: g, 1: g + 8) of this thread's part of the tile, at `row` (nullptr: the row does not exist;
// the thread still takes part in the shuffles), `cols` valid columns.
// TO_SMEM: write the 16-byte chunks into the staged output tile instead (row `smem_row`, a shared address;
// every column, the TMA store clips what lies outside the tensor).
template <int KIND, int BN, bool TO_SMEM = false>
__device__ __forceinline__ void store_row_16byte(const float (&acc)[BN / 2], int h, unsigned short* row, int cols,
                                                 int t, float alpha, const void* bias, int bias_f32, bool relu,
                                                 unsigned smem_row = 0)
{
#pragma unroll
        for (int i = 0; i < BN / 32; ++i) {
            unsigned v[4], w[4];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int j = 4 * i + jj;
                float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                if (bias != nullptr) {
                    const int n = min(8 * j + 2 * t, cols - 1);  // (a column past `cols` is never stored)
                    v0 += minidl_tc::load_bias<KIND>(bias, n, bias_f32);
                    v1 += minidl_tc::load_bias<KIND>(bias, min(n + 1, cols - 1), bias_f32);
                }
                v0 *= alpha;
                v1 *= alpha;
                if (relu) {
                    v0 = fmaxf(v0, 0.0f);
                    v1 = fmaxf(v1, 0.0f);
                }
                v[jj] = pack_pair<KIND>(v0, v1);
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
            const int n = 8 * (4 * i + t);
            if (TO_SMEM) {
                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_row + 2 * n), "r"(w[0]),
                             "r"(w[1]), "r"(w[2]), "r"(w[3])
                             : "memory");
                continue;
            }
            if (row == nullptr || n >= cols) continue;
            unsigned short* dst = row + n;
            if (n + 7 < cols) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
                for (int e = 0; e < cols - n; ++e) dst[e] = (unsigned short)(pick4(w, e >> 1) >> (16 * (e & 1)));
            }
        }
}


// Tiles in the grouped order of gemm_tc.cu: GROUP_M tile rows at a time walk down a column of tiles,
// so that blocks running at the same time share panels of A and B in L2. Tile t of `batch` x tiles_m x
// tiles_n -> (batch entry, tile row, tile column).
__device__ __forceinline__ void grouped_tile(int t, int tiles_m, int tiles_n, int& b, int& tm, int& tn)
{
    const int per_batch = tiles_m * tiles_n;
    b = t / per_batch;
    const int r = t - b * per_batch;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (r / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    tm = first_m + (r % per_group) % group_rows;
    tn = (r % per_group) / group_rows;
}

// The epilogue of one consumer warpgroup (section 6) for its MI sub-tiles of 64 rows (rows (c * MI + i) * 64 ..).
// STAGED (16-bit output, a problem with an output tensor map, beta = 0): the tile goes into shared memory at
// `c_smem` (row-major, TILE_M x BN), then one thread hands it to the copy engine and every consumer goes on
// with the next tile while it is written.
template <int OUT_KIND, int BN, bool STAGED, int MI, class Problem, class Tile>
__device__ __forceinline__ void epilogue(const Problem& p, const Tile& tl, const float (&acc)[MI][BN / 2], int c,
                                         int warp, int lane, unsigned c_smem)
{
    using OutT = typename minidl_tc::Storage<OUT_KIND>::T;
    const int g = lane >> 2, t = lane & 3;
    const int cols = tl.cols;
    // the bias from the tile's first column: of C's type, or float32 (p.bias_f32, 16-bit C: an autocast Linear's)
    const int bias_f32 = p.bias_f32;
    const void* bias = p.bias == nullptr ? nullptr
                       : bias_f32       ? static_cast<const void*>(static_cast<const float*>(p.bias) + tl.n0)
                                        : static_cast<const void*>(static_cast<const OutT*>(p.bias) + tl.n0);
    if constexpr (STAGED && OUT_KIND != KIND_TF32) {
        if (p.map_out != nullptr && p.beta == 0.0f) {
            const bool issuer = threadIdx.x == 128;    // consumer warpgroup 0, thread 0
            if (issuer) tma_store_wait<true>();         // the previous tile's store has read the buffer ...
            consumers_sync();                           // ... before anyone writes into it again
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int mm = (c * MI + i) * 64 + warp * 16 + g + h * 8;
                    store_row_16byte<OUT_KIND, BN, true>(acc[i], h, nullptr, cols, t, p.alpha, bias, bias_f32, p.relu,
                                                         c_smem + mm * BN * 2);
                }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to the copy engine
            consumers_sync();
            if (issuer) p.store(tl, c_smem);
            return;
        }
    }
    if constexpr (OUT_KIND != KIND_TF32) {
        if (p.vec_c == 2 && p.beta == 0.0f) {
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    store_row_16byte<OUT_KIND, BN>(
                        acc[i], h, static_cast<OutT*>(p.row(tl, (c * MI + i) * 64 + warp * 16 + g + h * 8)), cols, t,
                        p.alpha, bias, bias_f32, p.relu);
            return;
        }
    }
    const float alpha = p.alpha, beta = p.beta;
    const long long ldc_col = p.ldc_col;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            OutT* row = static_cast<OutT*>(p.row(tl, (c * MI + i) * 64 + warp * 16 + g + h * 8));
            if (row == nullptr) continue;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j) {
                const int n = j * 8 + 2 * t;
                if (n >= cols) continue;
                float v[2] = {acc[i][4 * j + 2 * h], acc[i][4 * j + 2 * h + 1]};
                OutT* dst = row + n * ldc_col;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (bias != nullptr && n + e < cols) v[e] += minidl_tc::load_bias<OUT_KIND>(bias, n + e, bias_f32);
                    v[e] *= alpha;
                    if (beta != 0.0f && n + e < cols) v[e] += beta * minidl_tc::load_c<OUT_KIND>(dst + e * ldc_col);
                    if (p.relu) v[e] = fmaxf(v[e], 0.0f);
                }
                if (p.vec_c && n + 1 < cols) {
                    minidl_tc::store_c_pair<OUT_KIND>(dst, v[0], v[1]);
                } else {
                    minidl_tc::store_c<OUT_KIND>(dst, v[0]);
                    if (n + 1 < cols) minidl_tc::store_c<OUT_KIND>(dst + ldc_col, v[1]);
                }
            }
        }
    }
}

// The persistent producer / consumer body (sections 4-5). Every thread of the block calls it.
template <int KIND, int BN, bool TRANS_A, bool TRANS_B, int OUT_KIND, bool STAGED, int MI, class Problem>
__device__ __forceinline__ void wgmma_run(const Problem& p)
{
    using Cfg = Config<KIND, BN, STAGED, MI>;
    constexpr int STAGES = Cfg::STAGES, BK = Cfg::BK, KSTEP = Cfg::KSTEP, ES = Cfg::ES;

    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (minidl_tc::smem_addr(smem_raw) + 1023u) & ~1023u;  // swizzle atoms: 1024-aligned
    const unsigned c_smem = base + STAGES * Cfg::STAGE_BYTES;                 // the staged output tile
    const unsigned full_bar = c_smem + Cfg::C_BYTES;                          // STAGES barriers of 8 bytes
    const unsigned empty_bar = full_bar + STAGES * 8;
    const int tiles = p.tiles();
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
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const auto tl = p.tile(t);
                for (int kt = tl.kt0; kt < tl.kt1; ++kt) {
                    mbar_wait(empty_bar + 8 * s, phase ^ 1);
                    const unsigned full = full_bar + 8 * s;
                    mbar_expect_tx(full, Cfg::STAGE_BYTES);  // zero-filled bytes past the edges count too
                    const unsigned a_dst = base + s * Cfg::STAGE_BYTES;
                    p.load(tl, kt, a_dst, a_dst + Cfg::A_BYTES, full);
                    if (++s == STAGES) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        return;
    }

    // ---- consumers: warpgroup c computes rows (c * MI + i) * 64 .. + 63 of each tile, i < MI
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int c = warpgroup - 1;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    int s = 0;
    unsigned phase = 0;
    float acc[MI][Cfg::ACC];

    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const auto tl = p.tile(t);
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < Cfg::ACC; ++j) acc[i][j] = 0.0f;

        int prev = 0;
        for (int kt = tl.kt0; kt < tl.kt1; ++kt) {
            mbar_wait(full_bar + 8 * s, phase);
            const unsigned a_stage = base + s * Cfg::STAGE_BYTES, b_stage = a_stage + Cfg::A_BYTES;
#pragma unroll
            for (int i = 0; i < MI; ++i) fence_acc(acc[i]);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / KSTEP; ++kk) {
                const unsigned long long db =
                    TRANS_B ? smem_desc(b_stage + kk * KSTEP * ES, 16, 1024)
                            : smem_desc(b_stage + kk * KSTEP * ROW_BYTES, Cfg::SLAB_BYTES, 1024);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    const int sub = c * MI + i;  // which 64-row slab of A
                    const unsigned long long da =
                        TRANS_A ? smem_desc(a_stage + sub * Cfg::SLAB_BYTES + kk * KSTEP * ROW_BYTES, Cfg::SLAB_BYTES,
                                            1024)
                                : smem_desc(a_stage + sub * 64 * ROW_BYTES + kk * KSTEP * ES, 16, 1024);
                    wgmma_step<KIND, BN, TRANS_A, TRANS_B>(acc[i], da, db);
                }
            }
            wgmma_commit();
#pragma unroll
            for (int i = 0; i < MI; ++i) fence_acc(acc[i]);
            wgmma_wait<1>();                                   // step kt-1's wgmmas are done ...
            if (kt > tl.kt0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);  // ... so its stage is free
            prev = s;
            if (++s == STAGES) {
                s = 0;
                phase ^= 1;
            }
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < MI; ++i) fence_acc(acc[i]);
        if (tl.kt1 > tl.kt0 && lane == 0) mbar_arrive(empty_bar + 8 * prev);
        if (!p.split_fixup(tl, acc)) continue;   // split-K: the tile's last slice to finish runs its epilogue
        epilogue<OUT_KIND, BN, STAGED, MI>(p, tl, acc, c, warp, lane, c_smem);
    }
    if (STAGED && threadIdx.x == 128) tma_store_wait<false>();  // the last stores, before the block's memory goes
}

}  // namespace minidl_wgmma
