// attention.cu: fused scaled dot-product attention, FlashAttention-2 style (Dao 2023, arXiv 2307.08691),
// forward and backward, on the tensor cores (mma.sync m16n8k16, fp16 or bf16 data, fp32 accumulation).
//
//     O = softmax(Q K^T * scale + mask) V          per (batch, head): Q (L x D), K and V (S x D)
//
// The NumPy reference (minidl/primitives/cpu/attention.py) forms the L x S score matrix and its softmax
// in memory: O(L * S) bytes per head, written and read again, which makes the plain algorithm
// memory-bound (at L = S = 4096 a head's fp32 scores are 64 MiB). Here the scores never leave the chip.
//
// 1. Forward (attention_forward). One block of WARPS warps owns BM = 16 * MT * WARPS = 128 queries of one
//    head; each warp MT tiles of 16 (their Q stays on chip: registers or shared memory). Keys and values
//    stream through shared memory in blocks of BN = 64 (two buffers: cp.async fills block j+1 while the
//    tensor cores work on block j). For each key block a warp computes its 16 MT x 64 scores S = Q K^T
//    (mma, fp32), and then the
//    ONLINE SOFTMAX, row by row:
//        m_new = max(m, max_j s_j);   p_j = exp(s_j - m_new);   l = l * exp(m - m_new) + sum_j p_j
//        O     = O * exp(m - m_new) + P V
//    so that after the last block O / l is the softmax-weighted average of V, exactly, although no row
//    was ever seen whole. exp is computed as exp2 of scores pre-multiplied by log2(e) (one FFMA less
//    per element). The probabilities P (fp32 accumulators) become the A operand of the next mma
//    directly in registers: the accumulator layout of two adjacent 16 x 8 tiles IS the A fragment of a
//    16 x 16 tile (see gemm_tc.cu's picture), so P is rounded to fp16/bf16 and never stored.
//    Besides O the kernel writes LSE = m + log(l) per query (natural log, fp32): all the backward pass
//    needs to recompute P.
// 2. Backward (attention_backward): with dO, the per-query Delta = rowsum(dO * O) (attention_delta),
//        P = exp(S - LSE),  dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dQ = dS K,  dK = dS^T Q
//    (times the scale for dQ and dK). One block owns 64 keys of one key/value head, keeps dK and dV in
//    registers (each warp 16 keys) and loops over every query block of every query head that reads that
//    key head (several with grouped-query attention). It computes S^T = K Q^T directly (keys as rows), so
//    P^T and dS^T come out in the A-fragment layout that dV += P^T dO and dK += dS^T Q need. dQ needs dS
//    with queries as rows: dS^T goes through shared memory (ldmatrix.trans reads it transposed) and each
//    warp adds its 16 queries x D slice of dS K to an fp32 dQ buffer with atomicAdd (attention_dq_finish
//    scales and rounds it).
// 3. Masks and dropout. causal: key j is visible to query i iff j <= i (torch's is_causal: top-left
//    aligned); key blocks wholly above the diagonal are skipped in both passes. mask: an fp32 array added
//    to the scores (a bool mask arrives as 0 / -inf), read through four strides so that any broadcast
//    (batch, head, query, key) costs no copy. A query with no visible key gets O = 0 and LSE = +inf
//    (so that the backward's P = exp(S - LSE) is 0, not NaN). Dropout on P: keep(b, h, i, j) is
//    Philox4x32-10 word (n & 3) of counter n >> 2, n = offset + ((b * H + h) * L + i) * S + j -- the same
//    stream kernels/dropout.cu draws for a (B, H, L, S) array, so the NumPy reference reproduces the mask;
//    l sums the undropped P (dropout comes after the softmax), O accumulates the dropped, rescaled P.
//
// Forward blocks are always 128 queries: 4 warps of 2 x 16 rows for D <= 64, 8 warps of 16 rows for
// D = 96, 128 (two row tiles' accumulators would not fit in the registers there).
// Layouts: q, o (B, H, L, D); k, v (B, HK, S, D); o, lse, delta contiguous; q, k, v, dO read and dQ, dK, dV
// written at any strides with D contiguous and 16-byte aligned rows and heads (struct Rows; the launcher copies
// an input that breaks this, and lays each gradient out as its input when q, k, v are pieces of one array). H a multiple of HK (query head h reads key head h / (H / HK)); lse, delta (B, H, L) fp32. D in {32, 64, 96, 128} (a template argument: the
// fragments are register arrays). Grid: forward (ceil(L / BM), B * H), causal blocks largest-first;
// backward (ceil(S / 64), B * HK). Dynamic shared memory: see forward_smem_bytes / backward_smem_bytes
// in minidl/primitives/cuda/attention.py; rows are padded by 16 bytes, so ldmatrix reads no bank twice.
#include "attention_common.cuh"

namespace minidl_attention {

// ------------------------------------------------------------------------------------------------
// Forward
// ------------------------------------------------------------------------------------------------
// CAUSAL, MASK, DROPOUT are template flags: the common case (no explicit mask, no dropout) carries no
// per-element test, and causal blocks wholly below the diagonal skip the mask too; only a block that
// crosses the diagonal or the end of the keys looks at each (query, key) pair.
// MT: 16-row tiles of queries per warp. With MT = 2 every K or V fragment read from shared memory feeds
// two mma instead of one: at one tile per warp, the ldmatrix traffic alone (256 bytes per mma) is more
// than shared memory delivers per clock at the tensor cores' rate. Q fragments stay in registers when
// they fit (QREG: D = 32, or one tile); otherwise they are re-read per key block (half as many reads as
// K's; at D = 64 keeping them costs 32 registers, and the causal kernel then spills).
template <int KIND, int D, int WARPS, int MT, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_forward_impl(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    unsigned short* __restrict__ o, float* __restrict__ lse, int H, int HK, int L, int S, float scale, MaskArgs m,
    DropArgs drop, Rows rq, Rows rk, Rows rv)
{
    constexpr int THREADS = 32 * WARPS, WM = 16 * MT, BM = WM * WARPS, LD = D + PAD;
    constexpr int KD = D / 16;   // k steps of Q K^T
    constexpr int NT = BN / 8;   // 16 x 8 score tiles per m-tile per key block
    constexpr int DT = D / 8;    // 16 x 8 output tiles per m-tile
    constexpr bool QREG = MT == 1 || D <= 32;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned short* sQ = reinterpret_cast<unsigned short*>(smem_raw);
    unsigned short* sK = sQ + BM * LD;      // [2][BN][LD]
    unsigned short* sV = sK + 2 * BN * LD;  // [2][BN][LD]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int m_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest blocks first
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int bhk = b * HK + h / (H / HK);
    const int q0 = m_block * BM, w0 = q0 + warp * WM;   // the block's and this warp's first query
    const unsigned short* qg = head_base(q, rq, b, h);
    const unsigned short* kg = head_base(k, rk, b, bhk - b * HK);
    const unsigned short* vg = head_base(v, rv, b, bhk - b * HK);

    int n_blocks = (S + BN - 1) / BN;
    if (CAUSAL) n_blocks = min(n_blocks, (min(q0 + BM, L) - 1) / BN + 1);   // keys j <= the last query

    load_tile<D, THREADS>(sQ, qg, rq.sl, q0, L, BM);
    if (n_blocks > 0) {
        load_tile<D, THREADS>(sK, kg, rk.sl, 0, S, BN);
        load_tile<D, THREADS>(sV, vg, rv.sl, 0, S, BN);
    }
    cp_async_commit();

    const float sl2 = scale * LOG2E;  // scores in log2 units: exp(x) = exp2(x * log2 e)
    float acc[MT][DT][4];
    float row_max[MT][2], row_sum[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < DT; ++i) acc[mt][i][0] = acc[mt][i][1] = acc[mt][i][2] = acc[mt][i][3] = 0.f;
        row_max[mt][0] = row_max[mt][1] = -pos_inf();
        row_sum[mt][0] = row_sum[mt][1] = 0.f;
    }
    unsigned qf[QREG ? MT : 1][KD][4];

    for (int j = 0; j < n_blocks; ++j) {
        const int stage = j & 1;
        if (j + 1 < n_blocks) {   // the next key/value block streams in behind this one's math
            load_tile<D, THREADS>(sK + (stage ^ 1) * BN * LD, kg, rk.sl, (j + 1) * BN, S, BN);
            load_tile<D, THREADS>(sV + (stage ^ 1) * BN * LD, vg, rv.sl, (j + 1) * BN, S, BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (QREG && j == 0) {
#pragma unroll
            for (int mt = 0; mt < (QREG ? MT : 1); ++mt)
#pragma unroll
                for (int kk = 0; kk < KD; ++kk) {
                    const int row = warp * WM + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    ldmatrix_x4(qf[mt][kk], smem_addr(sQ + row * LD + kk * 16 + (lane >> 4) * 8));
                }
        }
        const unsigned short* Ks = sK + stage * BN * LD;
        const unsigned short* Vs = sV + stage * BN * LD;

        // S = Q K^T for this warp's WM queries x 64 keys
        float s[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < NT; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) qa[mt][e] = qf[QREG ? mt : 0][kk][e];
                } else {
                    const int row = warp * WM + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    ldmatrix_x4(qa[mt], smem_addr(sQ + row * LD + kk * 16 + (lane >> 4) * 8));
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4];
                const int row = np * 16 + ((lane >> 4) & 1) * 8 + (lane & 7), col = kk * 16 + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(r, smem_addr(Ks + row * LD + col));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<KIND>(s[mt][2 * np], qa[mt], b0);
                    mma<KIND>(s[mt][2 * np + 1], qa[mt], b1);
                }
            }
        }

        // scale, mask, online softmax
        const int k0 = j * BN;
        const bool edge = k0 + BN > S || (CAUSAL && k0 + BN - 1 > w0);   // a hidden pair is possible
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int qi[2] = {w0 + mt * 16 + g, w0 + mt * 16 + g + 8};   // this thread's two query rows
            online_softmax_step<CAUSAL, MASK, DROPOUT, false>(s[mt], acc[mt], row_max[mt], row_sum[mt], qi, k0, edge,
                                                              sl2, t, b, h, bh, L, S, m, drop);
        }

        // O += P V: P's accumulators are already the A fragments of 16 x 16 tiles
#pragma unroll
        for (int kb = 0; kb < BN / 16; ++kb) {
            unsigned a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                a[mt][0] = pack2<KIND>(s[mt][2 * kb][0], s[mt][2 * kb][1]);
                a[mt][1] = pack2<KIND>(s[mt][2 * kb][2], s[mt][2 * kb][3]);
                a[mt][2] = pack2<KIND>(s[mt][2 * kb + 1][0], s[mt][2 * kb + 1][1]);
                a[mt][3] = pack2<KIND>(s[mt][2 * kb + 1][2], s[mt][2 * kb + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < DT / 2; ++dp) {
                unsigned r[4];
                const int row = kb * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), col = dp * 16 + (lane >> 4) * 8;
                ldmatrix_x4_trans(r, smem_addr(Vs + row * LD + col));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma<KIND>(acc[mt][2 * dp], a[mt], b0);
                    mma<KIND>(acc[mt][2 * dp + 1], a[mt], b1);
                }
            }
        }
        __syncthreads();   // everyone is done with this stage before it is refilled
    }

    // O = acc / l, LSE = m + log(l)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_sum[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int i = w0 + mt * 16 + g + 8 * r;
            if (i < L) {
                unsigned short* orow = o + ((long long)bh * L + i) * D;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt)
                    store_c_pair<KIND>(orow + dt * 8 + 2 * t, acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
                if (t == 0) lse[(long long)bh * L + i] = l > 0.f ? (row_max[mt][r] + log2f(l)) * LN2 : pos_inf();
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Backward
// ------------------------------------------------------------------------------------------------
// Delta[i] = sum_d dO[i, d] * O[i, d] (fp32), one warp per query row.
template <int KIND>
__device__ __forceinline__ void attention_delta_impl(const typename Storage<KIND>::T* o,
                                                     const typename Storage<KIND>::T* dout, float* delta,
                                                     long long rows, int D, int H, int L, Rows rd)
{
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const long long bh = row / L, b = bh / H;   // o is (B, H, L, D) contiguous; dO has strides rd
    const typename Storage<KIND>::T* drow = dout + b * rd.sb + (bh - b * H) * rd.sh + (row - bh * L) * rd.sl;
    float s = 0.f;
    for (int d = lane; d < D; d += 32) s += load_c<KIND>(o + row * D + d) * load_c<KIND>(drow + d);
#pragma unroll
    for (int w = 16; w > 0; w >>= 1) s += __shfl_xor_sync(0xffffffffu, s, w);
    if (lane == 0) delta[row] = s;
}

// The query blocks of one backward block are a list of (query head, query block) pairs; their Q and dO
// tiles (and LSE, Delta) are double-buffered: pair it + 1 is copied in while pair it is computed.
template <int D>
__device__ __forceinline__ void load_query_block(unsigned short* sQ, unsigned short* sdO, float* sLse, float* sDelta,
                                                 const unsigned short* q, const unsigned short* dout,
                                                 const float* lse, const float* delta, int b, int h, int H, int q0,
                                                 int L, const Rows& rq, const Rows& rd)
{
    constexpr int BM = 64;
    const long long bh = (long long)b * H + h;
    load_tile<D, 128>(sQ, head_base(q, rq, b, h), rq.sl, q0, L, BM);
    load_tile<D, 128>(sdO, head_base(dout, rd, b, h), rd.sl, q0, L, BM);
    cp_async_commit();
    for (int i = threadIdx.x; i < BM; i += 128) {
        const bool inside = q0 + i < L;
        sLse[i] = inside ? lse[bh * L + q0 + i] * LOG2E : pos_inf();   // rows past L: P = 0
        sDelta[i] = inside ? delta[bh * L + q0 + i] : 0.f;
    }
}

template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_backward_impl(
    const unsigned short* __restrict__ q, const unsigned short* __restrict__ k, const unsigned short* __restrict__ v,
    const unsigned short* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, unsigned short* __restrict__ dk, unsigned short* __restrict__ dv, int H, int HK, int L,
    int S, float scale, MaskArgs m, DropArgs drop, Rows rq, Rows rk, Rows rv, Rows rd, Rows rdk, Rows rdv)
{
    constexpr int THREADS = 128, BM = 64, LD = D + PAD, LDS = BM + PAD;
    constexpr int KD = D / 16, NT = BM / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned short* sK = reinterpret_cast<unsigned short*>(smem_raw);   // [BN][LD]
    unsigned short* sV = sK + BN * LD;                                  // [BN][LD]
    unsigned short* sQ = sV + BN * LD;                                  // [2][BM][LD]
    unsigned short* sdO = sQ + 2 * BM * LD;                             // [2][BM][LD]
    unsigned short* sdS = sdO + 2 * BM * LD;                            // [BN][LDS]: dS^T, keys as rows
    float* sLse = reinterpret_cast<float*>(sdS + BN * LDS);            // [2][BM], in log2 units
    float* sDelta = sLse + 2 * BM;                                      // [2][BM]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n_block = blockIdx.x, bhk = blockIdx.y, b = bhk / HK, hk = bhk % HK, group = H / HK;
    const int k0 = n_block * BN;
    load_tile<D, THREADS>(sK, head_base(k, rk, b, hk), rk.sl, k0, S, BN);
    load_tile<D, THREADS>(sV, head_base(v, rv, b, hk), rv.sl, k0, S, BN);
    const int m_first = CAUSAL ? k0 / BM : 0, m_blocks = (L + BM - 1) / BM;
    const int per_head = m_blocks - m_first, n_iter = group * per_head;
    if (n_iter > 0)   // the first query block travels with K and V
        load_query_block<D>(sQ, sdO, sLse, sDelta, q, dout, lse, delta, b, hk * group, H, m_first * BM, L, rq, rd);
    else
        cp_async_commit();

    const float sl2 = scale * LOG2E;
    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.f;
    const int kj[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};   // this thread's two key rows

    for (int it = 0; it < n_iter; ++it) {
        const int stage = it & 1;
        const int h = hk * group + it / per_head, q0 = (m_first + it % per_head) * BM;
        const long long bh = (long long)b * H + h;
        if (it + 1 < n_iter) {
            const int h1 = hk * group + (it + 1) / per_head, q1 = (m_first + (it + 1) % per_head) * BM;
            load_query_block<D>(sQ + (stage ^ 1) * BM * LD, sdO + (stage ^ 1) * BM * LD, sLse + (stage ^ 1) * BM,
                                sDelta + (stage ^ 1) * BM, q, dout, lse, delta, b, h1, H, q1, L, rq, rd);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const unsigned short* Qs = sQ + stage * BM * LD;
        const unsigned short* dOs = sdO + stage * BM * LD;
        const float* Lse = sLse + stage * BM;
        const float* Dl = sDelta + stage * BM;

        // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x 64 queries
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned ka[4], va[4];
            const int arow = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, acol = kk * 16 + (lane >> 4) * 8;
            ldmatrix_x4(ka, smem_addr(sK + arow * LD + acol));
            ldmatrix_x4(va, smem_addr(sV + arow * LD + acol));
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4], w[4];
                const int row = np * 16 + ((lane >> 4) & 1) * 8 + (lane & 7), col = kk * 16 + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(r, smem_addr(Qs + row * LD + col));
                ldmatrix_x4(w, smem_addr(dOs + row * LD + col));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                const unsigned c0[2] = {w[0], w[1]}, c1[2] = {w[2], w[3]};
                mma<KIND>(s[2 * np], ka, b0);
                mma<KIND>(s[2 * np + 1], ka, b1);
                mma<KIND>(dp[2 * np], va, c0);
                mma<KIND>(dp[2 * np + 1], va, c1);
            }
        }

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

        // dV += P^T dO and dK += dS^T Q (B operands n-contiguous: ldmatrix.trans); dS^T to shared
#pragma unroll
        for (int kb = 0; kb < BM / 16; ++kb) {
            const unsigned pa[4] = {pack2<KIND>(s[2 * kb][0], s[2 * kb][1]), pack2<KIND>(s[2 * kb][2], s[2 * kb][3]),
                                    pack2<KIND>(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                                    pack2<KIND>(s[2 * kb + 1][2], s[2 * kb + 1][3])};
            const unsigned da[4] = {pack2<KIND>(dp[2 * kb][0], dp[2 * kb][1]),
                                    pack2<KIND>(dp[2 * kb][2], dp[2 * kb][3]),
                                    pack2<KIND>(dp[2 * kb + 1][0], dp[2 * kb + 1][1]),
                                    pack2<KIND>(dp[2 * kb + 1][2], dp[2 * kb + 1][3])};
            // dS^T rows (keys) g and g+8 of this warp, columns (queries) of tiles 2kb, 2kb+1
            unsigned* srow0 = reinterpret_cast<unsigned*>(sdS + (warp * 16 + g) * LDS + kb * 16 + 2 * t);
            unsigned* srow1 = reinterpret_cast<unsigned*>(sdS + (warp * 16 + g + 8) * LDS + kb * 16 + 2 * t);
            srow0[0] = da[0];
            srow1[0] = da[1];
            srow0[4] = da[2];
            srow1[4] = da[3];
#pragma unroll
            for (int dq2 = 0; dq2 < DT / 2; ++dq2) {
                unsigned r[4], w[4];
                const int row = kb * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), col = dq2 * 16 + (lane >> 4) * 8;
                ldmatrix_x4_trans(r, smem_addr(dOs + row * LD + col));
                ldmatrix_x4_trans(w, smem_addr(Qs + row * LD + col));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                const unsigned c0[2] = {w[0], w[1]}, c1[2] = {w[2], w[3]};
                mma<KIND>(dv_acc[2 * dq2], pa, b0);
                mma<KIND>(dv_acc[2 * dq2 + 1], pa, b1);
                mma<KIND>(dk_acc[2 * dq2], da, c0);
                mma<KIND>(dk_acc[2 * dq2 + 1], da, c1);
            }
        }
        __syncthreads();

        // dQ (this warp's 16 queries x D) += dS K, summed into the fp32 buffer
        float dqa[DT][4];
#pragma unroll
        for (int i = 0; i < DT; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            unsigned a[4];
            // A = dS (queries x keys) read from dS^T [key][query] transposed
            const int mat = lane >> 3;
            const int krow = kk * 16 + (mat >> 1) * 8 + (lane & 7), qcol = warp * 16 + (mat & 1) * 8;
            ldmatrix_x4_trans(a, smem_addr(sdS + krow * LDS + qcol));
#pragma unroll
            for (int dq2 = 0; dq2 < DT / 2; ++dq2) {
                unsigned r[4];
                const int row = kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), col = dq2 * 16 + (lane >> 4) * 8;
                ldmatrix_x4_trans(r, smem_addr(sK + row * LD + col));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                mma<KIND>(dqa[2 * dq2], a, b0);
                mma<KIND>(dqa[2 * dq2 + 1], a, b1);
            }
        }
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


// ------------------------------------------------------------------------------------------------
// float32 data: the same two passes on TF32 tensor cores (mma.sync m16n8k8)
// ------------------------------------------------------------------------------------------------
// PRECISE (fp32 math): every product is split as in 3xTF32 (x = big + small, both TF32; a*b ~ big*big +
// big*small + small*big), which keeps fp32's accuracy at three times the mma count. Without it (TF32 math,
// backends.cuda.matmul.allow_tf32) one mma per product on the operands rounded to TF32.
// Fragments. Shared rows are D + 4 floats (a row starts 4 banks after the one above it), so that
//  - ldmatrix (b16 pairs = one fp32) gives A fragments of Q, K, V rows and B fragments of K, Q, dO rows
//    (an 8 x 4-float matrix per lane group: thread (g, t) gets row g, word t, as m16n8k8 wants);
//  - a B operand that is n-contiguous (V in O = P V, dO and Q in dV/dK, K in dQ) is read as scalars.
// P and dS come from the fp32 accumulators, whose pairs are (2t, 2t+1) where the A fragment wants
// (t, t + 4): the k index of that mma is permuted (k = t <-> key 2t, k = t + 4 <-> key 2t + 1), and
// the B operand is read in the same order, rows 2t and 2t + 1 -- banks 8t + g, all 32 different.
constexpr int PADF = 4;

struct FragA {
    unsigned big[4], small[4];
};
struct FragB {
    unsigned big[2], small[2];
};

// The operands split (x = big + small, tc_common's split_tf32) for 3xTF32, or rounded to TF32 alone.
template <bool PRECISE>
__device__ __forceinline__ FragA frag_a(const unsigned (&x)[4])
{
    FragA f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        if (PRECISE)
            split_tf32(__uint_as_float(x[e]), f.big[e], f.small[e]);
        else
            f.big[e] = round_tf32(__uint_as_float(x[e]));
    }
    return f;
}
template <bool PRECISE>
__device__ __forceinline__ FragB frag_b(unsigned x0, unsigned x1)
{
    FragB f;
    const unsigned x[2] = {x0, x1};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        if (PRECISE)
            split_tf32(__uint_as_float(x[e]), f.big[e], f.small[e]);
        else
            f.big[e] = round_tf32(__uint_as_float(x[e]));
    }
    return f;
}

template <bool PRECISE>
__device__ __forceinline__ void mma_f32(float (&d)[4], const FragA& a, const FragB& b)
{
    if (PRECISE) {   // the small terms first: they are the ones the big product's rounding would swallow
        mma<KIND_TF32>(d, a.small, b.big);
        mma<KIND_TF32>(d, a.big, b.small);
    }
    mma<KIND_TF32>(d, a.big, b.big);
}

template <int D, int THREADS>
__device__ __forceinline__ void load_tile_f32(float* tile, const float* g, long long ld, int row0, int extent,
                                              int rows)
{
    constexpr int CPR = D / 4;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < rows * CPR; c += THREADS) {
        const int r = c / CPR, col = (c % CPR) * 4;
        const bool inside = row0 + r < extent;
        const float* src = inside ? g + (row0 + r) * ld + col : g;
        cp_async16(smem_addr(tile + r * (D + PADF) + col), src, inside ? 16 : 0);
    }
}

// Forward, fp32: 4 warps of one 16-query tile each (BM = 64 queries per block); Q re-read from shared
// memory per key block (its fragments are split again there: 3xTF32 would double the registers).
template <bool PRECISE, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_forward_tf32_impl(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ o,
    float* __restrict__ lse, int H, int HK, int L, int S, float scale, MaskArgs m, DropArgs drop, Rows rq, Rows rk,
    Rows rv)
{
    constexpr int THREADS = 128, BM = 64, LD = D + PADF, KD = D / 8, NT = BN / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* sQ = reinterpret_cast<float*>(smem_raw);  // [BM][LD]
    float* sK = sQ + BM * LD;                         // [2][BN][LD]
    float* sV = sK + 2 * BN * LD;                     // [2][BN][LD]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int m_block = CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const int bhk = b * HK + h / (H / HK);
    const int q0 = m_block * BM, w0 = q0 + warp * 16;
    const float* qg = head_base(q, rq, b, h);
    const float* kg = head_base(k, rk, b, bhk - b * HK);
    const float* vg = head_base(v, rv, b, bhk - b * HK);

    int n_blocks = (S + BN - 1) / BN;
    if (CAUSAL) n_blocks = min(n_blocks, (min(q0 + BM, L) - 1) / BN + 1);

    load_tile_f32<D, THREADS>(sQ, qg, rq.sl, q0, L, BM);
    if (n_blocks > 0) {
        load_tile_f32<D, THREADS>(sK, kg, rk.sl, 0, S, BN);
        load_tile_f32<D, THREADS>(sV, vg, rv.sl, 0, S, BN);
    }
    cp_async_commit();

    const float sl2 = scale * LOG2E;
    float acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    float row_max[2] = {-pos_inf(), -pos_inf()}, row_sum[2] = {0.f, 0.f};
    const int qi[2] = {w0 + g, w0 + g + 8};

    for (int j = 0; j < n_blocks; ++j) {
        const int stage = j & 1;
        if (j + 1 < n_blocks) {
            load_tile_f32<D, THREADS>(sK + (stage ^ 1) * BN * LD, kg, rk.sl, (j + 1) * BN, S, BN);
            load_tile_f32<D, THREADS>(sV + (stage ^ 1) * BN * LD, vg, rv.sl, (j + 1) * BN, S, BN);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const float* Ks = sK + stage * BN * LD;
        const float* Vs = sV + stage * BN * LD;

        // S = Q K^T: this warp's 16 queries x 64 keys
        float s[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned x[4];
            ldmatrix_x4(x, smem_addr(sQ + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 8 +
                                     (lane >> 4) * 4));
            const FragA qa = frag_a<PRECISE>(x);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4];
                const int row = np * 16 + ((lane >> 4) & 1) * 8 + (lane & 7), col = kk * 8 + ((lane >> 3) & 1) * 4;
                ldmatrix_x4(r, smem_addr(Ks + row * LD + col));
                mma_f32<PRECISE>(s[2 * np], qa, frag_b<PRECISE>(r[0], r[1]));
                mma_f32<PRECISE>(s[2 * np + 1], qa, frag_b<PRECISE>(r[2], r[3]));
            }
        }

        // scale, mask, online softmax (fp32 exp2: P is not rounded to 16 bits here)
        const int k0 = j * BN;
        const bool edge = k0 + BN > S || (CAUSAL && k0 + BN - 1 > w0);
        online_softmax_step<CAUSAL, MASK, DROPOUT, true>(s, acc, row_max, row_sum, qi, k0, edge, sl2, t, b, h, bh, L, S,
                                                         m, drop);

        // O += P V, one k step of 8 keys per score tile (k permuted: see the section's header)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const unsigned x[4] = {__float_as_uint(s[nt][0]), __float_as_uint(s[nt][2]), __float_as_uint(s[nt][1]),
                                   __float_as_uint(s[nt][3])};
            const FragA pa = frag_a<PRECISE>(x);
            const float* vrow = Vs + (nt * 8 + 2 * t) * LD + g;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                mma_f32<PRECISE>(acc[dt], pa, frag_b<PRECISE>(__float_as_uint(vrow[dt * 8]),
                                                              __float_as_uint(vrow[LD + dt * 8])));
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int i = qi[r];
        if (i < L) {
            float* orow = o + ((long long)bh * L + i) * D;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                *reinterpret_cast<float2*>(orow + dt * 8 + 2 * t) =
                    make_float2(acc[dt][2 * r] * inv, acc[dt][2 * r + 1] * inv);
            if (t == 0) lse[(long long)bh * L + i] = l > 0.f ? (row_max[r] + log2f(l)) * LN2 : pos_inf();
        }
    }
}

template <int D>
__device__ __forceinline__ void load_query_block_f32(float* sQ, float* sdO, float* sLse, float* sDelta, const float* q,
                                                     const float* dout, const float* lse, const float* delta,
                                                     int b, int h, int H, int q0, int L, const Rows& rq, const Rows& rd)
{
    constexpr int BM = 64;
    const long long bh = (long long)b * H + h;
    load_tile_f32<D, 128>(sQ, head_base(q, rq, b, h), rq.sl, q0, L, BM);
    load_tile_f32<D, 128>(sdO, head_base(dout, rd, b, h), rd.sl, q0, L, BM);
    cp_async_commit();
    for (int i = threadIdx.x; i < BM; i += 128) {
        const bool inside = q0 + i < L;
        sLse[i] = inside ? lse[bh * L + q0 + i] * LOG2E : pos_inf();
        sDelta[i] = inside ? delta[bh * L + q0 + i] : 0.f;
    }
}

// Backward, fp32: the 16-bit kernel's loop (one block per 64 keys of a key/value head, dK and dV in
// registers, dQ summed with atomics), with the fragments of the header above. Its tiles are twice the
// 16-bit ones, so Q and dO have one stage, not two (88 KB of shared memory at D = 64: two blocks per SM,
// where double buffers would allow one): the next query block is copied in while dQ is computed, which
// reads only dS^T and K.
template <bool PRECISE, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__device__ __forceinline__ void attention_backward_tf32_impl(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
    float* __restrict__ dq_acc, float* __restrict__ dk, float* __restrict__ dv, int H, int HK, int L, int S,
    float scale, MaskArgs m, DropArgs drop, Rows rq, Rows rk, Rows rv, Rows rd, Rows rdk, Rows rdv)
{
    constexpr int THREADS = 128, BM = 64, LD = D + PADF, LDS = BM + PADF;
    constexpr int KD = D / 8, NT = BM / 8, DT = D / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* sK = reinterpret_cast<float*>(smem_raw);   // [BN][LD]
    float* sV = sK + BN * LD;                          // [BN][LD]
    float* sQ = sV + BN * LD;                          // [BM][LD]
    float* sdO = sQ + BM * LD;                         // [BM][LD]
    float* sdS = sdO + BM * LD;                        // [BN][LDS]: dS^T, keys as rows
    float* sLse = sdS + BN * LDS;                      // [BM], log2 units
    float* sDelta = sLse + BM;                         // [BM]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int n_block = blockIdx.x, bhk = blockIdx.y, b = bhk / HK, hk = bhk % HK, group = H / HK;
    const int k0 = n_block * BN;
    load_tile_f32<D, THREADS>(sK, head_base(k, rk, b, hk), rk.sl, k0, S, BN);
    load_tile_f32<D, THREADS>(sV, head_base(v, rv, b, hk), rv.sl, k0, S, BN);
    const int m_first = CAUSAL ? k0 / BM : 0, m_blocks = (L + BM - 1) / BM;
    const int per_head = m_blocks - m_first, n_iter = group * per_head;
    if (n_iter > 0)
        load_query_block_f32<D>(sQ, sdO, sLse, sDelta, q, dout, lse, delta, b, hk * group, H, m_first * BM, L, rq,
                                rd);
    else
        cp_async_commit();

    const float sl2 = scale * LOG2E;
    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk_acc[i][e] = dv_acc[i][e] = 0.f;
    const int kj[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};

    for (int it = 0; it < n_iter; ++it) {
        const int h = hk * group + it / per_head, q0 = (m_first + it % per_head) * BM;
        const long long bh = (long long)b * H + h;
        cp_async_wait<0>();
        __syncthreads();
        const float* Qs = sQ;
        const float* dOs = sdO;
        const float* Lse = sLse;
        const float* Dl = sDelta;

        // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x 64 queries
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
            unsigned x[4], y[4];
            const int arow = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, acol = kk * 8 + (lane >> 4) * 4;
            ldmatrix_x4(x, smem_addr(sK + arow * LD + acol));
            ldmatrix_x4(y, smem_addr(sV + arow * LD + acol));
            const FragA ka = frag_a<PRECISE>(x), va = frag_a<PRECISE>(y);
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                unsigned r[4], w[4];
                const int row = np * 16 + ((lane >> 4) & 1) * 8 + (lane & 7), col = kk * 8 + ((lane >> 3) & 1) * 4;
                ldmatrix_x4(r, smem_addr(Qs + row * LD + col));
                ldmatrix_x4(w, smem_addr(dOs + row * LD + col));
                mma_f32<PRECISE>(s[2 * np], ka, frag_b<PRECISE>(r[0], r[1]));
                mma_f32<PRECISE>(s[2 * np + 1], ka, frag_b<PRECISE>(r[2], r[3]));
                mma_f32<PRECISE>(dp[2 * np], va, frag_b<PRECISE>(w[0], w[1]));
                mma_f32<PRECISE>(dp[2 * np + 1], va, frag_b<PRECISE>(w[2], w[3]));
            }
        }

        // P^T (dropped, into s: for dV), dS^T (into dp); dS^T to shared for dQ
        const bool edge = k0 + BN > S || (CAUSAL && q0 < k0 + warp * 16 + 15);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t + (e & 1);
                backward_element<CAUSAL, MASK, DROPOUT, true>(s[nt][e], dp[nt][e], sl2, edge, q0 + col, kj[e >> 1], b, h,
                                                              bh, L, S, Lse[col], Dl[col], m, drop);
            }
            *reinterpret_cast<float2*>(sdS + (warp * 16 + g) * LDS + nt * 8 + 2 * t) = make_float2(dp[nt][0], dp[nt][1]);
            *reinterpret_cast<float2*>(sdS + (warp * 16 + g + 8) * LDS + nt * 8 + 2 * t) =
                make_float2(dp[nt][2], dp[nt][3]);
        }

        // dV += P^T dO and dK += dS^T Q: one k step of 8 queries per score tile
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const unsigned xp[4] = {__float_as_uint(s[nt][0]), __float_as_uint(s[nt][2]), __float_as_uint(s[nt][1]),
                                    __float_as_uint(s[nt][3])};
            const unsigned xd[4] = {__float_as_uint(dp[nt][0]), __float_as_uint(dp[nt][2]),
                                    __float_as_uint(dp[nt][1]), __float_as_uint(dp[nt][3])};
            const FragA pa = frag_a<PRECISE>(xp), da = frag_a<PRECISE>(xd);
            const float* orow = dOs + (nt * 8 + 2 * t) * LD + g;
            const float* qrow = Qs + (nt * 8 + 2 * t) * LD + g;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                mma_f32<PRECISE>(dv_acc[dt], pa, frag_b<PRECISE>(__float_as_uint(orow[dt * 8]),
                                                                 __float_as_uint(orow[LD + dt * 8])));
                mma_f32<PRECISE>(dk_acc[dt], da, frag_b<PRECISE>(__float_as_uint(qrow[dt * 8]),
                                                                 __float_as_uint(qrow[LD + dt * 8])));
            }
        }
        __syncthreads();   // Q, dO, LSE and Delta are free; dS^T is complete
        if (it + 1 < n_iter) {   // the next query block streams in behind dQ
            const int h1 = hk * group + (it + 1) / per_head, q1 = (m_first + (it + 1) % per_head) * BM;
            load_query_block_f32<D>(sQ, sdO, sLse, sDelta, q, dout, lse, delta, b, h1, H, q1, L, rq, rd);
        }

        // dQ (this warp's 16 queries x D) += dS K, summed into the fp32 buffer
        float dqa[DT][4];
#pragma unroll
        for (int i = 0; i < DT; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < BN / 8; ++kk) {
            const float* srow = sdS + (kk * 8 + 2 * t) * LDS + warp * 16 + g;
            const unsigned x[4] = {__float_as_uint(srow[0]), __float_as_uint(srow[8]), __float_as_uint(srow[LDS]),
                                   __float_as_uint(srow[LDS + 8])};
            const FragA a = frag_a<PRECISE>(x);
            const float* krow = sK + (kk * 8 + 2 * t) * LD + g;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt)
                mma_f32<PRECISE>(dqa[dt], a, frag_b<PRECISE>(__float_as_uint(krow[dt * 8]),
                                                             __float_as_uint(krow[LD + dt * 8])));
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = q0 + warp * 16 + g + 8 * r;
            if (i < L) {
                float* row = dq_acc + (bh * L + i) * D;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) red_add2(row + dt * 8 + 2 * t, dqa[dt][2 * r], dqa[dt][2 * r + 1]);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = kj[r];
        if (j < S) {
            float* dkrow = dk + b * rdk.sb + hk * rdk.sh + j * rdk.sl;
            float* dvrow = dv + b * rdv.sb + hk * rdv.sh + j * rdv.sl;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) {
                *reinterpret_cast<float2*>(dkrow + dt * 8 + 2 * t) =
                    make_float2(dk_acc[dt][2 * r] * scale, dk_acc[dt][2 * r + 1] * scale);
                *reinterpret_cast<float2*>(dvrow + dt * 8 + 2 * t) = make_float2(dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
            }
        }
    }
}

}  // namespace minidl_attention

// ------------------------------------------------------------------------------------------------
// Entry points (instantiated by name: attention_forward<KIND, D, WARPS, MT, CAUSAL, MASK, DROPOUT>,
// attention_backward<KIND, D, CAUSAL, MASK, DROPOUT>)
// ------------------------------------------------------------------------------------------------
template <int KIND, int D, int WARPS, int MT, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(32 * WARPS) attention_forward(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* o, float* lse, int H,
    int HK, int L, int S, float scale, const float* mask, long long msb, long long msh, long long msl, long long mss,
    float p_scale, unsigned threshold, unsigned long long seed, unsigned long long offset,
    const unsigned long long* rng_state, long long qsb, long long qsh, long long qsl, long long ksb, long long ksh,
    long long ksl, long long vsb, long long vsh, long long vsl)
{
    using namespace minidl_attention;
    const MaskArgs m{mask, msb, msh, msl, mss};
    attention_forward_impl<KIND, D, WARPS, MT, CAUSAL, MASK, DROPOUT>(
        q, k, v, o, lse, H, HK, L, S, scale, m, drop_args(p_scale, threshold, seed, offset, rng_state),
        Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl}, Rows{vsb, vsh, vsl});
}

template <int KIND>
__global__ void attention_delta(const typename minidl_tc::Storage<KIND>::T* o,
                                const typename minidl_tc::Storage<KIND>::T* dout, float* delta, long long rows, int D,
                                int H, int L, long long dsb, long long dsh, long long dsl)
{
    minidl_attention::attention_delta_impl<KIND>(o, dout, delta, rows, D, H, L, minidl_attention::Rows{dsb, dsh, dsl});
}

template <int KIND, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(128) attention_backward(
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
    attention_backward_impl<KIND, D, CAUSAL, MASK, DROPOUT>(
        q, k, v, dout, lse, delta, dq_acc, dk, dv, H, HK, L, S, scale, m,
        drop_args(p_scale, threshold, seed, offset, rng_state), Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl},
        Rows{vsb, vsh, vsl}, Rows{dsb, dsh, dsl}, Rows{dksb, dksh, dksl}, Rows{dvsb, dvsh, dvsl});
}

// dQ = scale * dq_acc, rounded to the data type; dq_acc (B, H, L, D) contiguous, dQ at its strides (sb, sh, sl).
template <int KIND>
__global__ void attention_dq_finish(const float* dq_acc, typename minidl_tc::Storage<KIND>::T* dq, long long n,
                                    float scale, int D, int H, int L, long long sb, long long sh, long long sl)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / D, bh = row / L;
        const long long at = (bh / H) * sb + (bh % H) * sh + (row % L) * sl + i % D;
        minidl_tc::store_c<KIND>(dq + at, dq_acc[i] * scale);
    }
}

// float32 data: attention_forward_tf32<PRECISE, D, CAUSAL, MASK, DROPOUT> / attention_backward_tf32<...>;
// attention_delta<0> and attention_dq_finish<0> (KIND_TF32: float storage) finish the backward pass.
template <bool PRECISE, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(128) attention_forward_tf32(
    const float* q, const float* k, const float* v, float* o, float* lse, int H, int HK, int L, int S, float scale,
    const float* mask, long long msb, long long msh, long long msl, long long mss, float p_scale, unsigned threshold,
    unsigned long long seed, unsigned long long offset, const unsigned long long* rng_state, long long qsb,
    long long qsh, long long qsl, long long ksb, long long ksh, long long ksl, long long vsb, long long vsh,
    long long vsl)
{
    using namespace minidl_attention;
    const MaskArgs m{mask, msb, msh, msl, mss};
    attention_forward_tf32_impl<PRECISE, D, CAUSAL, MASK, DROPOUT>(
        q, k, v, o, lse, H, HK, L, S, scale, m, drop_args(p_scale, threshold, seed, offset, rng_state),
        Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl}, Rows{vsb, vsh, vsl});
}

template <bool PRECISE, int D, bool CAUSAL, bool MASK, bool DROPOUT>
__global__ void __launch_bounds__(128) attention_backward_tf32(
    const float* q, const float* k, const float* v, const float* dout, const float* lse, const float* delta,
    float* dq_acc, float* dk, float* dv, int H, int HK, int L, int S, float scale, const float* mask, long long msb,
    long long msh, long long msl, long long mss, float p_scale, unsigned threshold, unsigned long long seed,
    unsigned long long offset, const unsigned long long* rng_state, long long qsb, long long qsh, long long qsl,
    long long ksb, long long ksh, long long ksl, long long vsb, long long vsh, long long vsl, long long dsb,
    long long dsh, long long dsl, long long dksb, long long dksh, long long dksl, long long dvsb, long long dvsh,
    long long dvsl)
{
    using namespace minidl_attention;
    const MaskArgs m{mask, msb, msh, msl, mss};
    attention_backward_tf32_impl<PRECISE, D, CAUSAL, MASK, DROPOUT>(
        q, k, v, dout, lse, delta, dq_acc, dk, dv, H, HK, L, S, scale, m,
        drop_args(p_scale, threshold, seed, offset, rng_state), Rows{qsb, qsh, qsl}, Rows{ksb, ksh, ksl},
        Rows{vsb, vsh, vsl}, Rows{dsb, dsh, dsl}, Rows{dksb, dksh, dksl}, Rows{dvsb, dvsh, dvsl});
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh defines MINIDL_INSTANTIATE_ALL: every instantiation the launcher can ask for is
// compiled (and register use reported) by nvcc, so a template error fails CI without a GPU. NVRTC never
// sees this; it instantiates by name (minidl/primitives/cuda/attention.py).
// All head dims for the plain and causal kernels; every flag combination at D = 64.
#define MINIDL_ATTENTION_D(K, D, C) (void*)&attention_forward<K, D, (D > 64 ? 8 : 4), (D > 64 ? 1 : 2), C, false, \
    false>, \
    (void*)&attention_backward<K, D, C, false, false>
#define MINIDL_ATTENTION_FLAGS(K, C, M, P) (void*)&attention_forward<K, 64, 4, 2, C, M, P>, \
    (void*)&attention_backward<K, 64, C, M, P>
#define MINIDL_ATTENTION_F32(P, D, C, M, R) (void*)&attention_forward_tf32<P, D, C, M, R>, \
    (void*)&attention_backward_tf32<P, D, C, M, R>
void* minidl_attention_instances[] = {
    MINIDL_ATTENTION_D(1, 32, false), MINIDL_ATTENTION_D(1, 96, true), MINIDL_ATTENTION_D(1, 128, true),
    MINIDL_ATTENTION_D(2, 32, true), MINIDL_ATTENTION_D(2, 96, false), MINIDL_ATTENTION_D(2, 128, false),
    MINIDL_ATTENTION_FLAGS(2, false, false, false), MINIDL_ATTENTION_FLAGS(2, true, false, false),
    MINIDL_ATTENTION_FLAGS(2, false, true, false), MINIDL_ATTENTION_FLAGS(2, true, true, true),
    MINIDL_ATTENTION_FLAGS(1, false, false, true), MINIDL_ATTENTION_FLAGS(1, true, true, false),
    (void*)&attention_delta<1>, (void*)&attention_delta<2>, (void*)&attention_dq_finish<1>,
    (void*)&attention_dq_finish<2>, (void*)&attention_delta<0>, (void*)&attention_dq_finish<0>,
    MINIDL_ATTENTION_F32(true, 32, false, false, false), MINIDL_ATTENTION_F32(true, 64, true, false, false),
    MINIDL_ATTENTION_F32(true, 96, false, false, false), MINIDL_ATTENTION_F32(true, 128, true, false, false),
    MINIDL_ATTENTION_F32(false, 64, false, false, false), MINIDL_ATTENTION_F32(false, 128, true, false, false),
    MINIDL_ATTENTION_F32(true, 64, true, true, true), MINIDL_ATTENTION_F32(false, 64, false, true, true)};
#endif
