// attention_common.cuh: what the fused attention kernels share (kernels/attention.cu, mma.sync; kernels/
// attention_wgmma.cu, Hopper's wgmma): the operand layout (Rows), the mask and dropout arguments, the scaled
// and masked score, one step of the online softmax over a 16-row tile's scores, and the backward's element.
// attention.cu's header says what each computes.
#pragma once

#include "tc_common.cuh"
#include "philox.cuh"

namespace minidl_attention {

using namespace minidl_tc;

constexpr int BN = 64;    // keys per block step (forward) and per block (backward)
constexpr int PAD = 8;    // elements of padding per shared row (16 bytes)
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }   // NVRTC has no INFINITY

template <int KIND>
__device__ __forceinline__ unsigned pack2(float lo, float hi)
{
    unsigned r;
    if (KIND == KIND_F16)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// An operand (batch, heads, rows, D) in global memory: D contiguous, the element strides of batch, head and
// row given (the launcher checks that each is a multiple of 16 bytes), so that q, k, v and dO are read
// where they lie, e.g. heads split out of one (B, T, 3 * H * D) projection, without a copy.
struct Rows {
    long long sb, sh, sl;
};

template <typename T>
__device__ __forceinline__ const T* head_base(const T* p, const Rows& r, int b, int h)
{
    return p + b * r.sb + h * r.sh;
}

// Copy `rows` rows (of D 16-bit elements, `ld` elements apart in global memory) starting at global row `row0`
// (of `extent`) into a shared tile [rows][D + PAD]; rows past the extent are zero-filled.
template <int D, int THREADS>
__device__ __forceinline__ void load_tile(unsigned short* tile, const unsigned short* g, long long ld, int row0,
                                          int extent, int rows)
{
    constexpr int CPR = D / 8;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < rows * CPR; c += THREADS) {
        const int r = c / CPR, col = (c % CPR) * 8;
        const bool inside = row0 + r < extent;
        const unsigned short* src = inside ? g + (row0 + r) * ld + col : g;
        cp_async16(smem_addr(tile + r * (D + PAD) + col), src, inside ? 16 : 0);
    }
}

// The dropout decision of element n of the (B, H, L, S) probability array.
__device__ __forceinline__ bool keep_element(unsigned long long n, uint2 key, unsigned threshold)
{
    const unsigned long long q = n >> 2;
    const uint4 r = philox4x32_10(make_uint4((unsigned)q, (unsigned)(q >> 32), 0u, 0u), key);
    const unsigned w = (n & 3) == 0 ? r.x : (n & 3) == 1 ? r.y : (n & 3) == 2 ? r.z : r.w;
    return (w >> 8) >= threshold;
}

struct MaskArgs {
    const float* mask;  // nullptr: no explicit mask
    long long sb, sh, sl, ss;  // element strides of (batch, head, query, key); 0 where broadcast
};

struct DropArgs {
    float p_scale;          // 1 / (1 - p); 0 when dropout is off
    unsigned threshold;     // keep iff (word >> 8) >= threshold
    uint2 key;
    unsigned long long offset;
};

__device__ __forceinline__ DropArgs drop_args(float p_scale, unsigned threshold, unsigned long long seed,
                                              unsigned long long offset, const unsigned long long* state)
{
    if (state != nullptr) {  // the device-resident (seed, offset) of a CUDA-graph-safe dropout call
        seed = state[0];
        offset += state[1];
    }
    DropArgs d;
    d.p_scale = p_scale;
    d.threshold = threshold;
    d.key = make_uint2((unsigned)seed, (unsigned)(seed >> 32));
    d.offset = offset;
    return d;
}

// exp2 on the special-function unit (MUFU.EX2, ~2 ulp): P is rounded to 16 bits right after, and
// ex2.approx(-inf) = +0, which is what hidden pairs need.
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two adjacent fp32 sums into global memory in one reduction (sm_90's red.global.add.v2.f32): half the
// atomic operations of two scalar atomicAdds. dQ's partial sums from every key block meet here.
__device__ __forceinline__ void red_add2(float* p, float a, float b)
{
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// ------------------------------------------------------------------------------------------------
// What the 16-bit and the float32 kernels share: the scores' scale and mask, one online-softmax step
// over a 16-row tile's scores, and the backward's P and dS of one element.
// ------------------------------------------------------------------------------------------------
// The score of query i and key kj in log2 units, masked: -inf where the pair is hidden. Only a block
// that crosses the diagonal or the end of the keys (edge) or carries an explicit mask looks at (i, kj).
template <bool CAUSAL, bool MASK>
__device__ __forceinline__ float masked_score(float s, float sl2, bool edge, int i, int kj, int b, int h, int L, int S,
                                              const MaskArgs& m)
{
    float x = s * sl2;
    if (MASK || edge) {
        if (MASK && kj < S && i < L) x += m.mask[b * m.sb + h * m.sh + i * m.sl + kj * m.ss] * LOG2E;
        if (kj >= S || (CAUSAL && kj > i)) x = -pos_inf();
    }
    return x;
}

// One key block of the online softmax for a 16-row tile: s (the tile's NT score fragments, rows g and
// g + 8 of this thread) are scaled and masked, the running max and sum of the two rows updated, the output
// accumulators acc rescaled, and s replaced by P (dropped out where DROPOUT). EXACT: exp2f (fp32 P); else
// ex2.approx (P is rounded to 16 bits right after).
template <bool CAUSAL, bool MASK, bool DROPOUT, bool EXACT, int NT, int DT>
__device__ __forceinline__ void online_softmax_step(float (&s)[NT][4], float (&acc)[DT][4], float (&row_max)[2],
                                                    float (&row_sum)[2], const int (&qi)[2], int k0, bool edge,
                                                    float sl2, int t, int b, int h, long long bh, int L, int S,
                                                    const MaskArgs& m, const DropArgs& drop)
{
    float mx[2] = {-pos_inf(), -pos_inf()};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float x = masked_score<CAUSAL, MASK>(s[nt][e], sl2, edge, qi[e >> 1], k0 + nt * 8 + 2 * t + (e & 1),
                                                       b, h, L, S, m);
            s[nt][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
    float use[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float m_new = fmaxf(row_max[r], mx[r]);
        use[r] = m_new == -pos_inf() ? 0.f : m_new;   // a row with nothing visible yet: exp2(-inf) = 0
        const float alpha = EXACT ? exp2f(row_max[r] - use[r]) : fast_exp2(row_max[r] - use[r]);
        row_max[r] = m_new;
        row_sum[r] *= alpha;
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) {
            acc[dt][2 * r] *= alpha;
            acc[dt][2 * r + 1] *= alpha;
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float p = EXACT ? exp2f(s[nt][e] - use[e >> 1]) : fast_exp2(s[nt][e] - use[e >> 1]);
            row_sum[e >> 1] += p;
            if (DROPOUT) {
                const int i = qi[e >> 1], kj = k0 + nt * 8 + 2 * t + (e & 1);
                const unsigned long long n = drop.offset + ((unsigned long long)bh * L + i) * S + kj;
                p = (i < L && kj < S && keep_element(n, drop.key, drop.threshold)) ? p * drop.p_scale : 0.f;
            }
            s[nt][e] = p;
        }
    }
}

// The backward's element (key j, query i): from the score s and dP = dO V^T, P = exp2(x - LSE) (pd: P
// dropped out, for dV) and dS = P * (dP' - Delta) (dP' dropped out too), in place of s and dp.
template <bool CAUSAL, bool MASK, bool DROPOUT, bool EXACT>
__device__ __forceinline__ void backward_element(float& s, float& dp, float sl2, bool edge, int i, int j, int b, int h,
                                                 long long bh, int L, int S, float lse2, float delta,
                                                 const MaskArgs& m, const DropArgs& drop)
{
    const float x = masked_score<CAUSAL, MASK>(s, sl2, edge, i, j, b, h, L, S, m);
    const float p = EXACT ? exp2f(x - lse2) : fast_exp2(x - lse2);
    float pd = p, dpv = dp;
    if (DROPOUT) {
        const unsigned long long n = drop.offset + ((unsigned long long)bh * L + i) * S + j;
        const bool kept = i < L && j < S && keep_element(n, drop.key, drop.threshold);
        pd = kept ? p * drop.p_scale : 0.f;
        dpv = kept ? dpv * drop.p_scale : 0.f;
    }
    s = pd;
    dp = p * (dpv - delta);
}


}  // namespace minidl_attention
