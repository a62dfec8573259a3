// minidl: arch sm_90a   (wgmma exists only on sm_90a; see _compile.py and compile_kernels.sh)
//
// attention_wgmma.cu: the fused attention on Hopper's warpgroup MMA (wgmma), 16-bit data: the forward pass at
// head dims 64 and 128, the backward pass at 64 (its section below). The algorithm is attention.cu's forward (FlashAttention-2: Q resident, K and V
// streamed, the online softmax, S never written); what changes is who multiplies:
//
//   attention.cu (mma.sync)  each warp multiplies its own 16 or 32 query rows, reading every K and V
//                            fragment from shared memory into registers with ldmatrix first;
//   here (wgmma)             the 4 warps of a warpgroup issue one 64 x 64 x 16 product together, and the
//                            tensor cores read Q, K and V straight from shared memory (no ldmatrix, no
//                            registers for the operands), asynchronously.
//
// One block: 2 warpgroups (256 threads), BM = 128 queries of one (batch, head), warpgroup w owning rows
// 64w..64w+63 (so warp i of the block owns rows 16i..16i+15, as attention.cu's 8-warp kernel). Per key
// block of BN = 64 keys:
//   1. S = Q K^T        wgmma m64n64k16, D / 16 of them; A = Q and B = K both K-major in shared memory
//                       (a row of Q or K is D contiguous elements = the k dimension);
//   2. online softmax   on S's accumulators, which lie in each warp exactly as mma.sync's 16 x 8 C
//                       fragments (wgmma_pipeline.cuh, section 3): attention_common.cuh's
//                       online_softmax_step, unchanged;
//   3. O += P V         wgmma m64nDk16 with A = P from *registers*: P's accumulators, rounded to 16 bits,
//                       are the A fragment (the same identity attention.cu uses), and B = V read N-major
//                       (V is stored keys x D: its k dimension, the keys, is the strided one), which the
//                       instruction's transpose bit allows for 16-bit data.
//
// Shared memory: every tile (Q: 128 rows, K and V: 64 rows, two stages of each) is stored in D / 64
// column blocks of 128-byte rows with the 128-byte swizzle of wgmma_pipeline.cuh section 1 (16-byte chunk c
// of row r at chunk position c ^ (r % 8), each block 1024-byte aligned). The same bytes serve as a K-major
// operand (Q, K: column block = the 64 k values of 4 k steps) and as an N-major one (V: column block = a
// 64-column slab; LBO = one slab, SBO = 8 rows). The tiles are filled with cp.async (rows past the end
// read as zero) and handed to the tensor cores with fence.proxy.async: wgmma reads shared memory through
// the async proxy, which does not see ordinary writes without it.
//
// Masks, dropout, causal skipping, the LSE and the output are attention.cu's (attention_common.cuh); only
// the products differ, so the two kernels agree to the rounding of fp32 sums taken in another order.
// The backward pass (below, D = 64) is attention.cu's backward loop with its five products on wgmma; at D = 128
// its accumulators would not fit one warpgroup's registers, and attention.cu's mma.sync kernel runs it.
//
// Each forward step waits for its product before the next begins (S, then the softmax, then P V); two blocks per SM
// (D = 64) overlap one block's softmax with the other's products. FlashAttention-3's overlap inside a warpgroup
// (S_{j+1} = Q K_{j+1}^T issued before the softmax of block j, with a third K/V stage) was tried: on an H200
// it was slower (forward time against the mma.sync kernel in the same run 0.82-1.02x, against 0.70-0.93x for
// this kernel; benchmarks/results/gpu_attention.md), so it is not here.
#include "attention_common.cuh"
#include "wgmma_pipeline.cuh"

namespace minidl_attention_wgmma {

using namespace minidl_attention;
using minidl_wgmma::fence_acc;
using minidl_wgmma::smem_desc;
using minidl_wgmma::wgmma_commit;
using minidl_wgmma::wgmma_fence;
using minidl_wgmma::wgmma_wait;

constexpr int WG_THREADS = 256;   // the forward block: two warpgroups
constexpr int BWD_THREADS = 128;  // the backward block: one warpgroup
constexpr int BM = 128;           // queries per block
constexpr int ROW = 128;          // bytes per swizzled row (64 16-bit elements)

// Shared memory of one block (bytes): Q + two stages of K and V, plus 1024 to align the swizzle atoms.
template <int D>
struct Smem {
    static constexpr int Q = BM * D * 2, KV = BN * D * 2;
    static constexpr int TOTAL = 1024 + Q + 4 * KV;   // two stages of K and of V
};

// Rows [row0, row0 + rows) of a (rows, D) 16-bit operand (`ld` elements apart) into the swizzled tile at the
// shared address `tile`: column block cb (elements 64cb..64cb+63 of each row) at tile + cb * rows * 128.
template <int D, int THREADS = WG_THREADS>
__device__ __forceinline__ void load_swizzled(unsigned tile, const unsigned short* g, long long ld, int row0,
                                              int extent, int rows)
{
    constexpr int CPR = D / 8;   // 16-byte chunks per row
    for (int c = threadIdx.x; c < rows * CPR; c += THREADS) {
        const int r = c / CPR, cc = c % CPR, cb = cc >> 3, ch = cc & 7;
        const bool inside = row0 + r < extent;
        const unsigned short* src = inside ? g + (long long)(row0 + r) * ld + cc * 8 : g;
        cp_async16(tile + cb * rows * ROW + r * ROW + ((ch ^ (r & 7)) << 4), src, inside ? 16 : 0);
    }
}

// The cp.async copies this thread waited for, made visible to the tensor cores' (async proxy) reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int KIND>
__device__ __forceinline__ void wgmma_qk(float (&s)[BN / 2], unsigned long long dq, unsigned long long dk)
{
    if constexpr (KIND == KIND_F16) minidl_wgmma::wgmma_f16_n64<0, 0>(s, dq, dk);
    else minidl_wgmma::wgmma_bf16_n64<0, 0>(s, dq, dk);
}

template <int KIND, int D>
__device__ __forceinline__ void wgmma_pv(float (&o)[D / 2], const unsigned (&a)[4], unsigned long long dv)
{
    if constexpr (KIND == KIND_F16) {
        if constexpr (D == 64) minidl_wgmma::wgmma_f16_rs_n64<1>(o, a, dv);
        else minidl_wgmma::wgmma_f16_rs_n128<1>(o, a, dv);
    } else {
        if constexpr (D == 64) minidl_wgmma::wgmma_bf16_rs_n64<1>(o, a, dv);
        else minidl_wgmma::wgmma_bf16_rs_n128<1>(o, a, dv);
    }
}

// Keeps the A registers of an issued wgmma alive (and unmoved) until after the wait: the instruction reads
// them asynchronously, which the compiler cannot know.
template <int N>
__device__ __forceinline__ void fence_regs(unsigned (&a)[N][4])
{
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}

template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_forward_wgmma_impl(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    unsigned short* __restrict__ o, float* __restrict__ lse, int H, int HK, int L, int S, float scale, MaskArgs m,
    DropArgs drop, Rows rq, Rows rk, Rows rv)
{
    static_assert(D == 64 || D == 128, "head dims 64 and 128 (one or two 128-byte column blocks)");
    constexpr int KD = D / 16;    // k steps of Q K^T
    constexpr int NT = BN / 8;    // 16 x 8 score fragments per warp and key block
    constexpr int DT = D / 8;     // 16 x 8 output fragments per warp
    using Sm = Smem<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned sQ = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned sK = sQ + Sm::Q, sV = sK + 2 * Sm::KV;   // [2 stages] each

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wg = warp / 4;
    const int m_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest blocks first
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int bhk = b * HK + h / (H / HK);
    const int q0 = m_block * BM, w0 = q0 + warp * 16;   // the block's and this warp's first query
    const int wg_last = q0 + wg * 64 + 63;              // this warpgroup's last query
    const unsigned short* qg = head_base(q, rq, b, h);
    const unsigned short* kg = head_base(k, rk, b, bhk - b * HK);
    const unsigned short* vg = head_base(v, rv, b, bhk - b * HK);

    int n_blocks = (S + BN - 1) / BN;
    if (CAUSAL) n_blocks = min(n_blocks, (min(q0 + BM, L) - 1) / BN + 1);   // keys j <= the last query

    load_swizzled<D>(sQ, qg, rq.sl, q0, L, BM);
    if (n_blocks > 0) {
        load_swizzled<D>(sK, kg, rk.sl, 0, S, BN);
        load_swizzled<D>(sV, vg, rv.sl, 0, S, BN);
    }
    cp_async_commit();

    const float sl2 = scale * LOG2E;
    float acc[DT][4];
    float row_max[2] = {-pos_inf(), -pos_inf()}, row_sum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < DT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float(&acc_flat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&acc[0][0]);

    // Q's rows of this warpgroup; k step kk lies in column block kk / 4, 32 bytes further per step
    const unsigned q_rows = sQ + wg * 64 * ROW;
    const int qi[2] = {w0 + g, w0 + g + 8};   // this thread's two query rows

    for (int j = 0; j < n_blocks; ++j) {
        const int stage = j & 1;
        if (j + 1 < n_blocks) {   // the next key/value block streams in behind this one's math
            load_swizzled<D>(sK + (stage ^ 1) * Sm::KV, kg, rk.sl, (j + 1) * BN, S, BN);
            load_swizzled<D>(sV + (stage ^ 1) * Sm::KV, vg, rv.sl, (j + 1) * BN, S, BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const int k0 = j * BN;
        if (!CAUSAL || k0 <= wg_last) {   // (a key block wholly above this warpgroup's diagonal adds nothing)
            const unsigned ks = sK + stage * Sm::KV, vs = sV + stage * Sm::KV;

            // 1. S = Q K^T
            float s[NT][4];
#pragma unroll
            for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
            float(&s_flat)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&s[0][0]);
            fence_acc(s_flat);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
                const unsigned off = (kk & 3) * 32;   // 16 elements = 32 bytes per k step inside a column block
                wgmma_qk<KIND>(s_flat, smem_desc(q_rows + (kk >> 2) * BM * ROW + off, 16, 1024),
                               smem_desc(ks + (kk >> 2) * BN * ROW + off, 16, 1024));
            }
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(s_flat);

            // 2. scale, mask, online softmax (rescales acc: the previous block's P V is complete)
            const bool edge = k0 + BN > S || (CAUSAL && k0 + BN - 1 > w0);   // a hidden pair is possible
            online_softmax_step<CAUSAL, MASK, DROPOUT, false>(s, acc, row_max, row_sum, qi, k0, edge, sl2, t, b, h,
                                                              bh, L, S, m, drop);

            // 3. O += P V: P's accumulators, rounded, are the A fragments of the four 64 x 16 k steps; keys
            //    16kb..16kb+15 lie 16 rows of V further
            unsigned a[BN / 16][4];
#pragma unroll
            for (int kb = 0; kb < BN / 16; ++kb) {
                a[kb][0] = pack2<KIND>(s[2 * kb][0], s[2 * kb][1]);
                a[kb][1] = pack2<KIND>(s[2 * kb][2], s[2 * kb][3]);
                a[kb][2] = pack2<KIND>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
                a[kb][3] = pack2<KIND>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
            }
            fence_regs(a);
            fence_acc(acc_flat);
            wgmma_fence();
#pragma unroll
            for (int kb = 0; kb < BN / 16; ++kb)
                wgmma_pv<KIND, D>(acc_flat, a[kb], smem_desc(vs + kb * 16 * ROW, BN * ROW, 1024));
            wgmma_commit();
            wgmma_wait<0>();
            fence_acc(acc_flat);
            fence_regs(a);
        }
        __syncthreads();   // everyone is done with this stage before it is refilled
    }

    // O = acc / l, LSE = m + log(l)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int i = w0 + g + 8 * r;
        if (i < L) {
            unsigned short* orow = o + ((long long)bh * L + i) * D;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                store_c_pair<KIND>(orow + dt * 8 + 2 * t, acc[dt][2 * r] * inv, acc[dt][2 * r + 1] * inv);
            if (t == 0) lse[(long long)bh * L + i] = l > 0.f ? (row_max[r] + log2f(l)) * LN2 : pos_inf();
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Backward (D = 64): attention.cu's backward loop, each of its five products one wgmma per 16 of k
// ------------------------------------------------------------------------------------------------
// One block = one warpgroup = 64 keys of one key/value head (warp w: keys 16w..16w+15), dK and dV in its
// registers, looping over every (query head, block of 64 queries) that reads those keys, Q and dO double-buffered:
//   S^T  = K Q^T        A = K, B = Q: both K-major (rows of D)             (m64n64k16, D / 16 of them)
//   dP^T = V dO^T       A = V, B = dO: both K-major
//   P^T, dS^T           attention_common.cuh's backward_element, in the accumulators (keys as rows)
//   dV  += P^T dO       A = P^T from registers, B = dO N-major (its k, the queries, is the strided dimension)
//   dK  += dS^T Q       A = dS^T from registers, B = Q N-major
//   dQ   = dS K         queries as rows: dS^T is written to shared memory (swizzled, keys as rows), read back as
//                       an M-major A (transpose bit), B = K N-major; each warp adds its 16 queries x D into the
//                       fp32 dQ buffer with red.global.add.v2 (attention_dq_finish scales and rounds it)
// The five products of a query block run as two commit groups; dS^T's shared-memory stores are made visible to
// the tensor cores (fence.proxy.async) before the third.
template <int D>
struct BwdSmem {
    static constexpr int TILE = 64 * D * 2;                      // one 64-row operand tile
    static constexpr int DS = 64 * 64 * 2;                       // dS^T, 64 keys x 64 queries
    static constexpr int TOTAL = 1024 + 6 * TILE + DS + 4 * 64 * 4;   // K, V, 2 x (Q, dO), dS^T, 2 x (LSE, Delta)
};

template <int D>
__device__ __forceinline__ void load_query_block_swizzled(unsigned sQ, unsigned sdO, float* sLse, float* sDelta,
                                                          const unsigned short* q, const unsigned short* dout,
                                                          const float* lse, const float* delta, int b, int h, int H,
                                                          int q0, int L, const Rows& rq, const Rows& rd)
{
    const long long bh = (long long)b * H + h;
    load_swizzled<D, BWD_THREADS>(sQ, head_base(q, rq, b, h), rq.sl, q0, L, 64);
    load_swizzled<D, BWD_THREADS>(sdO, head_base(dout, rd, b, h), rd.sl, q0, L, 64);
    cp_async_commit();
    for (int i = threadIdx.x; i < 64; i += BWD_THREADS) {
        const bool inside = q0 + i < L;
        sLse[i] = inside ? lse[bh * L + q0 + i] * LOG2E : pos_inf();   // rows past L: P = 0
        sDelta[i] = inside ? delta[bh * L + q0 + i] : 0.f;
    }
}

template <int KIND>
__device__ __forceinline__ void wgmma_dq(float (&d)[32], unsigned long long ds, unsigned long long dk)
{
    if constexpr (KIND == KIND_F16) minidl_wgmma::wgmma_f16_n64<1, 1>(d, ds, dk);   // A M-major, B N-major
    else minidl_wgmma::wgmma_bf16_n64<1, 1>(d, ds, dk);
}

template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_backward_wgmma_impl(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    const unsigned short* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int H, int HK, int L,
    int S, float scale, MaskArgs m, DropArgs drop, Rows rq, Rows rk, Rows rv, Rows rd, Rows rdk, Rows rdv)
{
    static_assert(D == 64, "head dim 64: dK, dV, S^T, dP^T and dQ's accumulators fill one warpgroup's registers");
    constexpr int BM = 64, KD = D / 16, NT = BM / 8, DT = D / 8;
    using Sm = BwdSmem<D>;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned sK = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const unsigned sV = sK + Sm::TILE, sQ = sV + Sm::TILE, sdO = sQ + 2 * Sm::TILE, sdS = sdO + 2 * Sm::TILE;
    float* sLse = reinterpret_cast<float*>(smem_raw + (sdS + Sm::DS - smem_addr(smem_raw)));   // [2][64], log2 units
    float* sDelta = sLse + 2 * BM;                                                             // [2][64]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n_block = blockIdx.x, bhk = blockIdx.y, b = bhk / HK, hk = bhk % HK, group = H / HK;
    const int k0 = n_block * BN;
    load_swizzled<D, BWD_THREADS>(sK, head_base(k, rk, b, hk), rk.sl, k0, S, BN);
    load_swizzled<D, BWD_THREADS>(sV, head_base(v, rv, b, hk), rv.sl, k0, S, BN);
    const int m_first = CAUSAL ? k0 / BM : 0, m_blocks = (L + BM - 1) / BM;
    const int per_head = m_blocks - m_first, n_iter = group * per_head;
    if (n_iter > 0)   // the first query block travels with K and V
        load_query_block_swizzled<D>(sQ, sdO, sLse, sDelta, q, dout, lse, delta, b, hk * group, H, m_first * BM, L,
                                     rq, rd);
    else
        cp_async_commit();

    const float sl2 = scale * LOG2E;
    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.f;
    float(&dk_flat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dk_acc[0][0]);
    float(&dv_flat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dv_acc[0][0]);
    const int kj[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};   // this thread's two key rows

    for (int it = 0; it < n_iter; ++it) {
        const int stage = it & 1;
        const int h = hk * group + it / per_head, q0 = (m_first + it % per_head) * BM;
        const long long bh = (long long)b * H + h;
        if (it + 1 < n_iter) {
            const int h1 = hk * group + (it + 1) / per_head, q1 = (m_first + (it + 1) % per_head) * BM;
            load_query_block_swizzled<D>(sQ + (stage ^ 1) * Sm::TILE, sdO + (stage ^ 1) * Sm::TILE,
                                         sLse + (stage ^ 1) * BM, sDelta + (stage ^ 1) * BM, q, dout, lse, delta, b,
                                         h1, H, q1, L, rq, rd);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        const unsigned Qs = sQ + stage * Sm::TILE, dOs = sdO + stage * Sm::TILE;
        const float* Lse = sLse + stage * BM;
        const float* Dl = sDelta + stage * BM;

        // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries each)
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
        float(&s_flat)[BM / 2] = *reinterpret_cast<float(*)[BM / 2]>(&s[0][0]);
        float(&dp_flat)[BM / 2] = *reinterpret_cast<float(*)[BM / 2]>(&dp[0][0]);
        fence_acc(s_flat);
        fence_acc(dp_flat);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            const unsigned off = (kk >> 2) * 64 * ROW + (kk & 3) * 32;
            wgmma_qk<KIND>(s_flat, smem_desc(sK + off, 16, 1024), smem_desc(Qs + off, 16, 1024));
            wgmma_qk<KIND>(dp_flat, smem_desc(sV + off, 16, 1024), smem_desc(dOs + off, 16, 1024));
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(s_flat);
        fence_acc(dp_flat);

        // P^T (dropped, into s: for dV), dS^T (into dp)
        const bool edge = k0 + BN > S || (CAUSAL && q0 < k0 + warp * 16 + 15);   // a hidden pair possible
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t + (e & 1);
                backward_element<CAUSAL, MASK, DROPOUT, false>(s[nt][e], dp[nt][e], sl2, edge, q0 + col, kj[e >> 1], b,
                                                               h, bh, L, S, Lse[col], Dl[col], m, drop);
            }
        }
        // rounded to 16 bits: the A fragments of dV's and dK's products; dS^T also into shared memory, swizzled
        // (row = key, 128 bytes of queries; 16-byte chunk c of row r at c ^ (r % 8)), for dQ's
        unsigned pa[BM / 16][4], da[BM / 16][4];
        const int r0 = warp * 16 + g;
#pragma unroll
        for (int kb = 0; kb < BM / 16; ++kb) {
            pa[kb][0] = pack2<KIND>(s[2 * kb][0], s[2 * kb][1]);
            pa[kb][1] = pack2<KIND>(s[2 * kb][2], s[2 * kb][3]);
            pa[kb][2] = pack2<KIND>(s[2 * kb + 1][0], s[2 * kb + 1][1]);
            pa[kb][3] = pack2<KIND>(s[2 * kb + 1][2], s[2 * kb + 1][3]);
            da[kb][0] = pack2<KIND>(dp[2 * kb][0], dp[2 * kb][1]);
            da[kb][1] = pack2<KIND>(dp[2 * kb][2], dp[2 * kb][3]);
            da[kb][2] = pack2<KIND>(dp[2 * kb + 1][0], dp[2 * kb + 1][1]);
            da[kb][3] = pack2<KIND>(dp[2 * kb + 1][2], dp[2 * kb + 1][3]);
#pragma unroll
            for (int half = 0; half < 2; ++half) {   // query columns 16kb + 8 half + 2t, +1: chunk 2kb + half
                const int chunk = 2 * kb + half;
#pragma unroll
                for (int rr = 0; rr < 2; ++rr) {      // key rows r0, r0 + 8
                    const int r = r0 + 8 * rr;
                    const unsigned addr = sdS + r * ROW + ((chunk ^ (r & 7)) << 4) + 4 * t;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(da[kb][2 * half + rr]) : "memory");
                }
            }
        }
        fence_proxy_async();   // dS^T's stores, visible to the tensor cores (after the barrier below)

        // dV += P^T dO and dK += dS^T Q: A from registers; B = dO, Q N-major, 16 queries (rows) per k step
        fence_regs(pa);
        fence_regs(da);
        fence_acc(dv_flat);
        fence_acc(dk_flat);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < BM / 16; ++kb) {
            wgmma_pv<KIND, D>(dv_flat, pa[kb], smem_desc(dOs + kb * 16 * ROW, 64 * ROW, 1024));
            wgmma_pv<KIND, D>(dk_flat, da[kb], smem_desc(Qs + kb * 16 * ROW, 64 * ROW, 1024));
        }
        wgmma_commit();
        __syncthreads();   // every warp's dS^T rows are in shared memory

        // dQ (64 queries x D) = dS K: A = dS read M-major from dS^T (16 keys = 16 rows per k step), B = K N-major
        float dqa[DT][4];
#pragma unroll
        for (int i = 0; i < DT; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
        float(&dq_flat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&dqa[0][0]);
        fence_acc(dq_flat);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            wgmma_dq<KIND>(dq_flat, smem_desc(sdS + kk * 16 * ROW, 64 * ROW, 1024),
                           smem_desc(sK + kk * 16 * ROW, 64 * ROW, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(dq_flat);
        fence_acc(dv_flat);
        fence_acc(dk_flat);
        fence_regs(pa);
        fence_regs(da);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = q0 + warp * 16 + g + 8 * r;
            if (i < L) {
                float* row = dq_acc + (bh * L + i) * D;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) red_add2(row + dt * 8 + 2 * t, dqa[dt][2 * r], dqa[dt][2 * r + 1]);
            }
        }
        __syncthreads();   // this stage's Q, dO and dS^T are refilled next
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = kj[r];
        if (j < S) {
            unsigned short* dkrow = dk + b * rdk.sb + hk * rdk.sh + j * rdk.sl;
            unsigned short* dvrow = dv + b * rdv.sb + hk * rdv.sh + j * rdv.sl;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                store_c_pair<KIND>(dkrow + dt * 8 + 2 * t, dk_acc[dt][2 * r] * scale, dk_acc[dt][2 * r + 1] * scale);
                store_c_pair<KIND>(dvrow + dt * 8 + 2 * t, dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
            }
        }
    }
}

}  // namespace minidl_attention_wgmma

// Entry point (instantiated by name: attention_forward_wgmma<KIND, D, CAUSAL, MASK, DROPOUT>); the arguments
// are attention.cu's attention_forward's. Two blocks per SM at D = 64 (their softmax and their products
// overlap), one at D = 128 (its 64 output accumulators per thread).
template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(256, D <= 64 ? 2 : 1) attention_forward_wgmma(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o, float* lse, int H,
    int HK, int L, int S, float scale, const float* mask, long long msb, long long msh, long long msl, long long mss,
    float p_scale, unsigned threshold, unsigned long long seed, unsigned long long offset,
    const unsigned long long* rng_state, long long qsb, long long qsh, long long qsl, long long ksb, long long ksh,
    long long ksl, long long vsb, long long vsh, long long vsl)
{
    using namespace minidl_attention;
    const MaskArgs m{mask, msb, msh, msl, mss};
    minidl_attention_wgmma::attention_forward_wgmma_impl<KIND, D, CAUSAL, MASK, DROPOUT>(
        q, k, v, o, lse, H, HK, L, S, scale, m, drop_args(p_scale, threshold, seed, offset, rng_state),
        Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl}, Rows{vsb, vsh, vsl});
}

// Entry point (instantiated by name: attention_backward_wgmma<KIND, D, CAUSAL, MASK, DROPOUT>, D = 64); the
// arguments are attention.cu's attention_backward's.
template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(128) attention_backward_wgmma(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, const unsigned short* dout,
    const float* lse, const float* delta, float* dq_acc, unsigned short* dk, unsigned short* dv, int H, int HK, int L,
    int S, float scale, const float* mask, long long msb, long long msh, long long msl, long long mss, float p_scale,
    unsigned threshold, unsigned long long seed, unsigned long long offset, const unsigned long long* rng_state,
    long long qsb, long long qsh, long long qsl, long long ksb, long long ksh, long long ksl, long long vsb,
    long long vsh, long long vsl, long long dsb, long long dsh, long long dsl, long long dksb, long long dksh,
    long long dksl, long long dvsb, long long dvsh, long long dvsl)
{
    using namespace minidl_attention;
    const MaskArgs m{mask, msb, msh, msl, mss};
    minidl_attention_wgmma::attention_backward_wgmma_impl<KIND, D, CAUSAL, MASK, DROPOUT>(
        q, k, v, dout, lse, delta, dq_acc, dk, dv, H, HK, L, S, scale, m,
        drop_args(p_scale, threshold, seed, offset, rng_state), Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl},
        Rows{vsb, vsh, vsl}, Rows{dsb, dsh, dsl}, Rows{dksb, dksh, dksl}, Rows{dvsb, dvsh, dvsl});
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh: both head dims and both 16-bit kinds, plain and causal; every flag at D = 64.
void* minidl_attention_wgmma_instances[] = {
    (void*)&attention_forward_wgmma<2, 64, false, false, false>, (void*)&attention_forward_wgmma<2, 64, true, false, false>,
    (void*)&attention_forward_wgmma<2, 128, false, false, false>, (void*)&attention_forward_wgmma<2, 128, true, false, false>,
    (void*)&attention_forward_wgmma<1, 64, true, false, false>, (void*)&attention_forward_wgmma<1, 128, false, false, false>,
    (void*)&attention_forward_wgmma<2, 64, true, true, true>, (void*)&attention_forward_wgmma<1, 64, false, true, false>,
    (void*)&attention_forward_wgmma<2, 64, false, false, true>,
    (void*)&attention_backward_wgmma<2, 64, false, false, false>, (void*)&attention_backward_wgmma<2, 64, true, false, false>,
    (void*)&attention_backward_wgmma<1, 64, true, false, false>, (void*)&attention_backward_wgmma<2, 64, true, true, true>,
    (void*)&attention_backward_wgmma<1, 64, false, true, false>};
#endif
