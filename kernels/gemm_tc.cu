// gemm_tc.cu: GEMM on the tensor cores, C = alpha * op(A) * op(B) + beta * C, strided-batched.
//
// One kernel template, gemm_tc<KIND, BM, BK_BYTES, TRANS_A, TRANS_B>:
//   KIND 0 (TF32)  float32 data, TF32 math: operands rounded to 10 mantissa bits (cvt.rna.tf32.f32),
//                  products summed in fp32 (mma m16n8k8); float32 result
//   KIND 1 (F16)   float16 data, fp32 accumulation, float16 result (mma m16n8k16)
//   KIND 2 (BF16)  bfloat16 data, fp32 accumulation, bfloat16 result (mma m16n8k16)
// TRANS_A / TRANS_B: op(A) = A^T / op(B) = B^T (all four cases NN, NT, TN, TT, as the backward
// passes need them); BM = 128 (a 128 x 128 tile of C per block) or 64 (64 x 64, for problems with too
// few 128-tiles to fill the GPU); BK_BYTES = 64 or 128, the bytes of k per block step (see 2. and 4.).
// kernels/gemm.cu stays the fp32 SGEMM on the CUDA cores (math="fp32").
//
// ---------------------------------------------------------------------------------------------
// 1. The instruction. mma.sync is a WARP-level instruction: the 32 threads of a warp together hold
//    a 16 x 8 tile of C (fp32) in registers, four floats each, and each call adds A(16 x k) * B(k x 8)
//    to it, k = 8 for TF32 and 16 for fp16/bf16 (both are 256 bytes of A per call). Which thread holds
//    which element is fixed by the PTX ISA. With g = lane / 4 (the "group", 0..7) and t = lane % 4:
//
//    mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (one 32-bit element per register)
//
//          A (16 x 8, row)                  B (8 x 8, col)            C, D (16 x 8, fp32)
//          k: 0 .. 3 | 4 .. 7               n: 0 ..... 7              n: 2t  2t+1
//    m  0 +---------+---------+       k 0 +--------------+      m  0 +----------+
//       . |  a0     |  a2     |         . |  b0 = B[t][g] |        . | c0   c1  |  row g
//       7 | (g, t)  | (g, t+4)|         3 +--------------+        7 |          |
//       8 +---------+---------+         4 |  b1 =        |        8 +----------+
//       . |  a1     |  a3     |         . |  B[t+4][g]   |        . | c2   c3  |  row g+8
//      15 | (g+8,t) |(g+8,t+4)|         7 +--------------+       15 +----------+
//
//    mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: the same picture with every
//    A and B register holding TWO 16-bit elements adjacent in k: a0 = A[g][2t, 2t+1],
//    a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g],
//    b1 = B[2t+8, 2t+9][g]; C as above.
//
//    ldmatrix.x4 fills those registers from shared memory in one instruction: it reads four 8 x 8
//    matrices of 16-bit elements (each row 16 bytes, its address given by one of 8 lanes) and hands
//    thread `lane` the pair (row lane/4, columns 2*(lane%4), +1) of each: exactly the fragment above
//    when the rows run along m (A) or n (B) and k is contiguous. Its .trans form hands out the
//    transposed pair, so the same instruction serves operands stored with m (or n) contiguous.
//    For TF32 a 16-byte row is four fp32 values and the untransposed ldmatrix hands thread `lane`
//    the 32-bit word (lane/4, lane%4) = (g, t): the TF32 fragment, again. There is no 32-bit
//    transpose, so a TF32 operand stored m- (or n-) contiguous is read with plain 32-bit loads.
//
// 2. The tile hierarchy. One block of 128 threads (4 warps, 2 x 2) computes a BM x BN tile of C
//    (128 x 128, or 64 x 64); each warp a (BM/2) x (BN/2) tile = (BM/32) x (BN/16) mma tiles of
//    16 x 8, kept in registers (128 fp32 accumulators per thread at 128 x 128). The reduction runs
//    in block steps of BK = BK_BYTES of k (64 bytes: 16 fp32 or 32 halves; or 128 bytes), each step
//    being BK/8 (TF32) or BK/16 (16-bit) warp steps of mma. Blocks are numbered in groups of 8 tile rows (GROUP_M) so
//    that blocks running at the same time share panels of A and B in L2.
//
// 3. The shared layout. Each operand tile is stored in shared memory as it lies in global memory
//    (k-contiguous: [rows][BK]; m/n-contiguous: [BK][rows]), so global->shared copies are straight
//    16-byte cp.async copies and the transposes cost nothing (ldmatrix.trans does them). Rows are
//    PADDED (not swizzled): k-contiguous rows by 16 bytes (80- or 144-byte rows: the 8 rows one
//    ldmatrix phase reads start in 8 different 16-byte bank groups), m/n-contiguous rows by 8 elements
//    (8 ldmatrix rows -> 8 bank groups; for the TF32 scalar loads, lanes (g, t) hit bank 8t + g).
//    So every fragment load is free of bank conflicts, at 6% (k-contiguous) or 3-6% more memory.
//
// 4. The pipeline. STAGES shared buffers (4 with 64-byte steps, 3 with 128-byte steps). cp.async
//    copies global -> shared without going through registers and without blocking; each block
//    step's copies are one "commit group". Before the main loop the first STAGES-1 steps are in
//    flight; in step kt a thread waits until step kt's group has landed (cp.async.wait_group
//    STAGES-2: that many younger groups may still be pending), one __syncthreads makes every
//    thread's copies visible and guarantees everyone is done reading the buffer of step kt-1, which
//    is then refilled with step kt+STAGES-1 while the tensor cores work on step kt. So STAGES-1
//    block steps of loads are always in flight behind the math.
//
// 5. Edges (any M, N, K). A 16-byte copy whose elements run past the matrix copies only the bytes
//    inside (cp.async's src-size operand) and zero-fills the rest; rows past M or N copy 0 bytes. The
//    zeros contribute nothing to the sums, and the epilogue stores only elements inside C. 16-byte
//    copies need 16-byte aligned addresses: when a leading dimension, batch stride or base pointer
//    is not a multiple of 16 bytes (vec_a/vec_b = 0, decided by the launcher) the tile is loaded
//    element by element through registers instead (correct, slower).
//
// 6. Epilogue: C[b*stride_c + m*ldc_row + n*ldc_col] = alpha * (acc + bias) + beta * C, the bias optional
//    (nn.Linear's: element (m, n) at bias[m*bias_row + n*bias_col], of C's type, or float32 when bias_f32) (C is not read when
//    beta == 0, so NaN there is ignored, as in cuDNN), converted to C's type (round to nearest even).
//
// Grid: x = tile index (grouped order), z = batch. Block: 128 threads. Dynamic shared memory:
// STAGES * (A tile + B tile) bytes (see tc_smem_bytes in minidl/primitives/cuda/gemm.py; > 48 KiB, so
// the launcher raises the kernel's limit).
//
// Not here: a wgmma (sm_90a warpgroup MMA, with TMA) version, which is what reaches near-peak on
// Hopper; this file is mma.sync only. Measured on an H200 at 4096^3 (benchmarks/results/gpu_gemm_tc.md):
// 2.65x cuBLAS's time in TF32 and 2.29x in fp16 (NN, 128-byte k step); ncu shows the tensor pipe ~45%
// busy, limited by latency with 2 warps per scheduler (register-heavy 64 x 64 warp tiles), not by
// memory or bank conflicts. That file says what would close the gap.

#include "tc_common.cuh"

namespace minidl_tc {

constexpr int THREADS = 128;  // 4 warps, 2 x 2
constexpr int GROUP_M = 8;    // tile rows per group in the block order (L2 reuse)
constexpr int MN_PAD = 8;     // elements of padding of an m/n-contiguous shared row

// Compile-time geometry of one kernel.
template <int KIND, int BM, int BN, int BK_BYTES, bool TRANS_A, bool TRANS_B>
struct Config {
    using T = typename Storage<KIND>::T;
    static constexpr int ES = sizeof(T);         // bytes per element
    static constexpr int V = 16 / ES;            // elements per 16-byte chunk
    static constexpr int BK = BK_BYTES / ES;     // k per block step: 16 fp32 or 32 halves per 64 bytes
    static constexpr int STAGES = BK_BYTES == 64 ? 4 : 3;  // pipeline depth (shared memory per block
                                                           // ~75 or ~108 KiB: two blocks per SM fit)
    static constexpr int KSTEP = (KIND == KIND_TF32) ? 8 : 16;  // k per mma
    static constexpr bool A_KCONTIG = !TRANS_A;  // A stored (M, K): k contiguous
    static constexpr bool B_KCONTIG = TRANS_B;   // B stored (N, K): k contiguous
    static constexpr int K_LD = BK + V;          // k-contiguous shared row: BK + 16 bytes
    static constexpr int A_LD = A_KCONTIG ? K_LD : BM + MN_PAD;
    static constexpr int B_LD = B_KCONTIG ? K_LD : BN + MN_PAD;
    static constexpr int A_ELEMS = A_KCONTIG ? BM * K_LD : BK * A_LD;
    static constexpr int B_ELEMS = B_KCONTIG ? BN * K_LD : BK * B_LD;
    static constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
    static constexpr int WM = BM / 2, WN = BN / 2;  // warp tile
    static constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp
    static_assert((A_ELEMS * ES) % 16 == 0 && (B_ELEMS * ES) % 16 == 0, "tiles must stay 16-byte aligned");
    static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles at a time");
};

// Copies one operand's tile for each block step into shared memory. Rows of the tile run along m
// (A) or n (B), `extent` (M or N) of them exist; the operand is KCONTIG (element (row, k) at
// g[row * ld + k], shared tile [ROWS][LD]) or m/n-contiguous (g[k * ld + row], shared tile [BK][LD]).
// Thread t copies 16-byte chunks: chunk column c0 and first shared row r0 fixed by t, then PASSES
// more rows ROWS_PER_PASS apart. Everything that does not change with the block step (pointers,
// which rows exist) is computed once here, so the main loop spends a few integer instructions per
// copy; only the last block step (k0 + BK > K) looks at K.
template <class Cfg, bool KCONTIG, int ROWS, int LD>
struct TileLoader {
    using T = typename Cfg::T;
    static constexpr int V = Cfg::V, BK = Cfg::BK, ES = Cfg::ES;
    static constexpr int CPR = KCONTIG ? BK / V : ROWS / V;  // 16-byte chunks per shared row
    static constexpr int ROWS_PER_PASS = THREADS / CPR;
    static constexpr int PASSES = (KCONTIG ? ROWS : BK) / ROWS_PER_PASS;
    static_assert(THREADS % CPR == 0 && (KCONTIG ? ROWS : BK) % ROWS_PER_PASS == 0, "chunks must tile the block");
    static_assert(PASSES <= 32, "row_mask has 32 bits");

    const T* g0;      // the operand (this batch's matrix)
    const T* g;       // this thread's first chunk at block step 0
    long long ld, pass_step, k_step;
    int row0, extent, r0, c0, smem_off;
    unsigned row_mask;  // KCONTIG: bit p set when pass p's row exists
    int mn_bytes;       // m/n-contiguous: bytes of this thread's chunk inside the extent (0..16)

    __device__ __forceinline__ TileLoader(const T* g0_, long long ld_, int row0_, int extent_)
        : g0(g0_), ld(ld_), row0(row0_), extent(extent_)
    {
        r0 = threadIdx.x / CPR;
        c0 = (threadIdx.x % CPR) * V;
        smem_off = r0 * LD + c0;
        pass_step = ROWS_PER_PASS * ld;
        row_mask = 0u;
        mn_bytes = 16;
        if (KCONTIG) {
            g = g0 + (row0 + r0) * ld + c0;
            k_step = BK;
#pragma unroll
            for (int p = 0; p < PASSES; ++p)
                if (row0 + r0 + p * ROWS_PER_PASS < extent) row_mask |= 1u << p;
        } else {
            g = g0 + r0 * ld + row0 + c0;
            k_step = BK * ld;
            mn_bytes = min(max(extent - (row0 + c0), 0), V) * ES;
        }
    }

    // Issue the copies of block step kt into `tile` (shared address, bytes; generic pointer for the
    // element-wise path). vec = 0: element by element through registers (unaligned operands).
    __device__ __forceinline__ void load(unsigned tile_addr, T* tile, int kt, int K, int vec) const
    {
        const int k0 = kt * BK;
        if (vec) {
            const T* src = g + kt * k_step;
            const bool full = k0 + BK <= K;
#pragma unroll
            for (int p = 0; p < PASSES; ++p) {
                int bytes;
                if (KCONTIG)
                    bytes = ((row_mask >> p) & 1u) ? (full ? 16 : min(max(K - (k0 + c0), 0), V) * ES) : 0;
                else
                    bytes = (full || k0 + r0 + p * ROWS_PER_PASS < K) ? mn_bytes : 0;
                cp_async16(tile_addr + (smem_off + p * ROWS_PER_PASS * LD) * ES,
                           bytes > 0 ? src + p * pass_step : g0, bytes);
            }
        } else if (KCONTIG) {
            for (int e = threadIdx.x; e < ROWS * BK; e += THREADS) {
                const int r = e / BK, kk = e % BK;
                const int row = row0 + r, k = k0 + kk;
                tile[r * LD + kk] = (row < extent && k < K) ? g0[row * ld + k] : T(0);
            }
        } else {
            for (int e = threadIdx.x; e < ROWS * BK; e += THREADS) {
                const int kr = e / ROWS, r = e % ROWS;
                const int row = row0 + r, k = k0 + kr;
                tile[kr * LD + r] = (row < extent && k < K) ? g0[k * ld + row] : T(0);
            }
        }
    }
};

// This lane's byte offset, inside a shared A tile, of its ldmatrix row address (or, for the TF32
// m-contiguous case, of its first plain load) for the mma tile at m 0, k 0. The tile at (m0, kk)
// adds a compile-time constant: a_frag_offset(m0, kk).
template <class Cfg, int KIND>
__device__ __forceinline__ int a_lane_offset(int lane)
{
    constexpr int LD = Cfg::A_LD, V = Cfg::V, ES = Cfg::ES;
    const int j = lane >> 3, r = lane & 7;
    if (Cfg::A_KCONTIG)  // [m][k]: lanes 0-15 give rows 0..15 at k 0, lanes 16-31 at k + 16 bytes
        return ((lane & 15) * LD + (lane >> 4) * V) * ES;
    if (KIND != KIND_TF32)  // [k][m], 16-bit, .trans: matrix j covers k + 8*(j/2), m + 8*(j%2)
        return ((r + (j >> 1) * 8) * LD + (j & 1) * 8) * ES;
    return ((lane & 3) * LD + (lane >> 2)) * ES;  // [k][m], TF32: element (k = t, m = g)
}
template <class Cfg>
__device__ __forceinline__ constexpr int a_frag_offset(int m0, int kk)
{
    return (Cfg::A_KCONTIG ? m0 * Cfg::A_LD + kk : kk * Cfg::A_LD + m0) * Cfg::ES;
}

// Likewise for B, for the PAIR of 8-column mma tiles at n 0 and n 8.
template <class Cfg, int KIND>
__device__ __forceinline__ int b_lane_offset(int lane)
{
    constexpr int LD = Cfg::B_LD, V = Cfg::V, ES = Cfg::ES;
    const int j = lane >> 3, r = lane & 7;
    if (Cfg::B_KCONTIG)  // [n][k]: matrix j covers n + 8*(j/2), k + V*(j%2)
        return ((r + (j >> 1) * 8) * LD + (j & 1) * V) * ES;
    if (KIND != KIND_TF32)  // [k][n], 16-bit, .trans: matrix j covers k + 8*(j%2), n + 8*(j/2)
        return ((r + (j & 1) * 8) * LD + (j >> 1) * 8) * ES;
    return ((lane & 3) * LD + (lane >> 2)) * ES;  // [k][n], TF32: element (k = t, n = g)
}
template <class Cfg>
__device__ __forceinline__ constexpr int b_frag_offset(int n0, int kk)
{
    return (Cfg::B_KCONTIG ? n0 * Cfg::B_LD + kk : kk * Cfg::B_LD + n0) * Cfg::ES;
}

__device__ __forceinline__ unsigned lds32(unsigned addr)
{
    unsigned v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
    return v;
}

// The A fragment of one 16 x KSTEP mma tile; `addr` = tile + a_lane_offset + a_frag_offset.
template <class Cfg, int KIND>
__device__ __forceinline__ void load_a_frag(unsigned (&a)[4], unsigned addr)
{
    constexpr int LDB = Cfg::A_LD * Cfg::ES;  // bytes per shared row
    if (Cfg::A_KCONTIG) {
        ldmatrix_x4(a, addr);
    } else if (KIND != KIND_TF32) {
        ldmatrix_x4_trans(a, addr);
    } else {  // a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); rows of the tile are k
        a[0] = lds32(addr);
        a[1] = lds32(addr + 8 * 4);
        a[2] = lds32(addr + 4 * LDB);
        a[3] = lds32(addr + 4 * LDB + 8 * 4);
    }
}

// The B fragments of the two 8-column mma tiles at n0 and n0 + 8; `addr` as for A.
template <class Cfg, int KIND>
__device__ __forceinline__ void load_b_frags(unsigned (&b0)[2], unsigned (&b1)[2], unsigned addr)
{
    constexpr int LDB = Cfg::B_LD * Cfg::ES;
    unsigned r[4];
    if (Cfg::B_KCONTIG) {
        ldmatrix_x4(r, addr);
    } else if (KIND != KIND_TF32) {
        ldmatrix_x4_trans(r, addr);
    } else {  // b0 = (k t, n g), b1 = (k t+4, n g), for n g and n g+8
        r[0] = lds32(addr);
        r[1] = lds32(addr + 4 * LDB);
        r[2] = lds32(addr + 8 * 4);
        r[3] = lds32(addr + 4 * LDB + 8 * 4);
    }
    b0[0] = r[0];
    b0[1] = r[1];
    b1[0] = r[2];
    b1[1] = r[3];
}

template <int KIND, int BM, int BN, int BK_BYTES, bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void gemm_tc_body(int M, int N, int K, float alpha,
                                             const typename Storage<KIND>::T* A, long long lda, long long stride_a,
                                             const typename Storage<KIND>::T* B, long long ldb, long long stride_b,
                                             float beta, typename Storage<KIND>::T* C, long long ldc_row,
                                             long long ldc_col, long long stride_c, int vec_a, int vec_b, int vec_c,
                                             const void* bias, long long bias_row, long long bias_col,
                                             int bias_f32)
{
    using Cfg = Config<KIND, BM, BN, BK_BYTES, TRANS_A, TRANS_B>;
    using T = typename Cfg::T;
    constexpr int BK = Cfg::BK, KSTEP = Cfg::KSTEP, MI = Cfg::MI, NI = Cfg::NI, ES = Cfg::ES;
    constexpr int STAGES = Cfg::STAGES;
    constexpr int STAGE_BYTES = Cfg::STAGE_ELEMS * ES, A_BYTES = Cfg::A_ELEMS * ES;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const unsigned smem_base = smem_addr(smem_raw);

    // Block -> tile, in groups of GROUP_M tile rows (consecutive blocks walk down a group's column).
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (pid / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int tile_m = first_m + (pid % per_group) % group_rows;
    const int tile_n = (pid % per_group) / group_rows;
    const int m_block = tile_m * BM, n_block = tile_n * BN;

    const long long b = blockIdx.z;
    A += b * stride_a;
    B += b * stride_b;
    C += b * stride_c;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = (warp >> 1) * Cfg::WM, wn = (warp & 1) * Cfg::WN;

    // The A operand's rows are m (extent M), B's rows are n (extent N); both reduce over K.
    const TileLoader<Cfg, Cfg::A_KCONTIG, BM, Cfg::A_LD> load_a(A, lda, m_block, M);
    const TileLoader<Cfg, Cfg::B_KCONTIG, BN, Cfg::B_LD> load_b(B, ldb, n_block, N);
    auto load_stage = [&](int stage, int kt) {
        const unsigned a_addr = smem_base + stage * STAGE_BYTES;
        T* a_tile = smem + stage * Cfg::STAGE_ELEMS;
        load_a.load(a_addr, a_tile, kt, K, vec_a);
        load_b.load(a_addr + A_BYTES, a_tile + Cfg::A_ELEMS, kt, K, vec_b);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // This warp's and lane's fragment addresses inside a stage (bytes), for mma tile (0, 0).
    const unsigned a_lane = smem_base + a_lane_offset<Cfg, KIND>(lane) + a_frag_offset<Cfg>(wm, 0);
    const unsigned b_lane = smem_base + A_BYTES + b_lane_offset<Cfg, KIND>(lane) + b_frag_offset<Cfg>(wn, 0);

    const int k_tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }

    int stage = 0;  // = kt % STAGES
    for (int kt = 0; kt < k_tiles; ++kt) {
        cp_async_wait<STAGES - 2>();  // this thread's copies of step kt have landed
        __syncthreads();              // ... everyone's; and step kt-1's buffer is free
        const int next = kt + STAGES - 1;
        if (next < k_tiles) load_stage(stage == 0 ? STAGES - 1 : stage - 1, next);
        cp_async_commit();            // (an empty group at the tail keeps the count uniform)

        const unsigned a_stage = a_lane + stage * STAGE_BYTES, b_stage = b_lane + stage * STAGE_BYTES;
#pragma unroll
        for (int kk = 0; kk < BK; kk += KSTEP) {
            unsigned af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) load_a_frag<Cfg, KIND>(af[i], a_stage + a_frag_offset<Cfg>(i * 16, kk));
#pragma unroll
            for (int j = 0; j < NI; j += 2)
                load_b_frags<Cfg, KIND>(bf[j], bf[j + 1], b_stage + b_frag_offset<Cfg>(j * 8, kk));
            if (KIND == KIND_TF32) {
#pragma unroll
                for (int i = 0; i < MI; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) af[i][e] = to_tf32(af[i][e]);
#pragma unroll
                for (int j = 0; j < NI; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) bf[j][e] = to_tf32(bf[j][e]);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma<KIND>(acc[i][j], af[i], bf[j]);
        }
        stage = stage == STAGES - 1 ? 0 : stage + 1;
    }
    cp_async_wait<0>();

    // Epilogue: thread (g, t) holds rows g and g+8, columns 2t and 2t+1 of every 16 x 8 mma tile.
    // vec_c (C row-major, rows and base aligned to two elements): the two columns in one store.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m_block + wm + i * 16 + g + h * 8;
                const int n = n_block + wn + j * 8 + 2 * t;
                if (m >= M) continue;
                T* dst = C + m * ldc_row + n * ldc_col;
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (bias != nullptr) {
                    const long long bi = m * bias_row + n * bias_col;
                    if (n < N) v0 += load_bias<KIND>(bias, bi, bias_f32);
                    if (n + 1 < N) v1 += load_bias<KIND>(bias, bi + bias_col, bias_f32);
                }
                v0 *= alpha;
                v1 *= alpha;
                if (vec_c && n + 1 < N) {
                    if (beta != 0.0f) {
                        v0 += beta * load_c<KIND>(dst);
                        v1 += beta * load_c<KIND>(dst + 1);
                    }
                    store_c_pair<KIND>(dst, v0, v1);
                } else {
                    if (n < N) store_c<KIND>(dst, beta != 0.0f ? v0 + beta * load_c<KIND>(dst) : v0);
                    if (n + 1 < N) {
                        T* dst1 = dst + ldc_col;
                        store_c<KIND>(dst1, beta != 0.0f ? v1 + beta * load_c<KIND>(dst1) : v1);
                    }
                }
            }
        }
    }
}

}  // namespace minidl_tc

// The scalar arguments, one struct passed by value (minidl/primitives/cuda/gemm.py's TC_PARAMS builds it once per
// problem: CuPy hands a kernel one 112-byte argument for a fraction of the host time of 17 NumPy scalars, as
// kernels/gemm.cu's SgemmParams). Members by size, so that no padding differs from NumPy's.
struct GemmTcParams {
    long long lda, stride_a, ldb, stride_b, ldc_row, ldc_col, stride_c, bias_row, bias_col;
    int M, N, K, vec_a, vec_b, vec_c;
    float alpha, beta;
    int bias_f32, pad;   // bias_f32: the bias is float32 while C is 16-bit (an autocast Linear's); pad: 8-byte size
};

// One kernel template; the launcher asks NVRTC for just the instantiation it needs (name expression
// "gemm_tc<KIND, BM, BK_BYTES, TRANS_A, TRANS_B>", e.g. "gemm_tc<0, 128, 64, false, true>"), so a process compiles
// only the variants it uses (each takes ~2 s of NVRTC). A, B, C are float (TF32) or 16-bit bits.
template <int KIND, int BM, int BK_BYTES, bool TRANS_A, bool TRANS_B>
__global__ void __launch_bounds__(minidl_tc::THREADS, 2)
    gemm_tc(const GemmTcParams q, const void* A, const void* B, void* C, const void* bias)
{
    using T = typename minidl_tc::Storage<KIND>::T;
    minidl_tc::gemm_tc_body<KIND, BM, BM, BK_BYTES, TRANS_A, TRANS_B>(
        q.M, q.N, q.K, q.alpha, static_cast<const T*>(A), q.lda, q.stride_a, static_cast<const T*>(B), q.ldb,
        q.stride_b, q.beta, static_cast<T*>(C), q.ldc_row, q.ldc_col, q.stride_c, q.vec_a, q.vec_b, q.vec_c,
        bias, q.bias_row, q.bias_col, q.bias_f32);
}

#ifndef __CUDACC_RTC__
// For scripts/compile_kernels.sh (nvcc, no name expressions): instantiations that between them take
// every code path (both kinds of mma, k- and m/n-contiguous A and B, both tiles).
template __global__ void gemm_tc<minidl_tc::KIND_TF32, 128, 64, false, false>(const GemmTcParams, const void*, const void*,
                                                                              void*, const void*);
template __global__ void gemm_tc<minidl_tc::KIND_TF32, 64, 128, true, true>(const GemmTcParams, const void*, const void*,
                                                                            void*, const void*);
template __global__ void gemm_tc<minidl_tc::KIND_F16, 128, 128, true, false>(const GemmTcParams, const void*, const void*,
                                                                             void*, const void*);
template __global__ void gemm_tc<minidl_tc::KIND_BF16, 64, 64, false, true>(const GemmTcParams, const void*, const void*,
                                                                            void*, const void*);
#endif
