// minidl: arch sm_90a   (wgmma and setmaxnreg exist only on sm_90a; see _compile.py and compile_kernels.sh)
//
// convolution_wgmma.cu: the implicit-GEMM convolution of kernels/convolution_tc.cu (algorithm
// "implicit_gemm_tc"), on Hopper: wgmma fed by TMA, on the machinery of kernels/wgmma_pipeline.cuh. NHWC
// tensors (the launcher transposes NCHW ones), 2-D (1-D as H = 1), groups = 1. What changes against the
// mma.sync kernels is how the lowered matrix is gathered: not by every thread computing addresses, but by
// the copy engine, because a tile of the lowered matrix is a *box* of the NHWC tensor:
//
//   fprop  A[(n, p, q), (r, s, c)] = x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]. Take a tile of 128
//          output pixels that is a rectangle: BNI images x BP rows x BQ columns (BNI*BP*BQ = 128), and
//          one tap (r, s) and 64 channels (128 bytes; 32 for TF32) of the reduction. Its rows are x's
//          pixels (n0.., p0*sh - ph + r*dh + sh*i, q0*sw - pw + s*dw + sw*j): one TMA box of the 4-D
//          tensor (C, W, H, N) at those coordinates, with element strides (1, sw, sh, 1) for a strided
//          convolution. Coordinates outside the image are the zero padding: TMA fills them with zeros.
//          The box lands as 128 rows of 128 bytes, 128-byte swizzled: the K-major A tile wgmma reads.
//          B[(r, s, c), k] = w[k, r, s, c]: the box (64 channels, tap r*S+s, BN filters) of the filter
//          seen as a 3-D tensor (C, R*S, K). K-major too, so TF32 runs here without any transpose.
//   dgrad  (stride 1) A[(n, h, w), (r, s, k)] = dy[n, h + ph - r*dh, w + pw - s*dw, k]: the same kind of
//          box on dy (offsets of the opposite sign), B from the filter rearranged (C, R, S, K) by the
//          launcher. Strided dgrad is not a box (only every sh-th row of dy contributes): the launcher
//          uses the mma.sync kernel for it.
//   wgrad  (16-bit) dw[k, (r, s, c)] = sum over pixels of dy[pix, k] x[pix shifted by (r, s), c]: the
//          reduction runs over 64-pixel rectangles; A = dy's box (64 channels k, 64 pixels) twice, B = x's
//          box (64 channels c, the same 64 pixels shifted by the tap) BN/64 times: both M/N-major (the
//          channels are contiguous), which wgmma's transpose bits read for 16-bit data and TF32 cannot:
//          TF32 reads them from channels-first tensors instead (below). The reduction is long and the
//          output small, so it is split over `splits` slices (fp32 partial sums, added in a fixed order by
//          convolution_tc_splitk_reduce_*: deterministic).
//   wgrad  (TF32, channels-first) dw[k, c, r, s] = sum over pixels of dy[n, k, p, q] x[n, c, p + r*dh - ph,
//          q + s*dw - pw] (stride 1). In NCHW memory the pixels are the contiguous dimension of both dy and
//          x: the reduction is K-major on both sides, the one layout TF32 wgmma reads. A k step is 32
//          consecutive pixels of one image, flat index f = p*Q + q .. f + 31 (128 bytes of fp32: the box's
//          innermost dimension must fill the 128-byte swizzle row): A = dy's box (32 pixels, 128 * MI channels
//          k, 1 image) of dy seen as (P*Q, K, N). For B, a box must also *start* on a 16-byte boundary of its
//          innermost dimension, so a tap's column offset s*dw - pw cannot be a coordinate: the launcher
//          first copies x once per filter column, moved (convolution_wgmma_shift_columns: xs[s][n, c, h, q] =
//          x[n, c, h, q + s*dw - pw], zeros outside x, Q columns wide). Pixel (p, q) then meets xs[s] at flat
//          index f + (r*dh - ph) * Q: the same 32-pixel run moved by whole rows (16-byte aligned when Q is a
//          multiple of 4), and rows above or below the image fall outside the (H*Q, C, S*N) tensor, where TMA
//          reads zeros. B = that box (32 pixels, BN channels c, 1 image of copy s). A tile is 128 * MI output
//          channels x BN input channels of one tap; its column c lands on dw[k, c0 + c, r, s], R*S elements
//          from the next (ldc_col). No transposes: the launcher hands over the layer's channels-first x and dy
//          as they are.
//
// The output tile: row mm of a fprop / dgrad tile is pixel (n0 + mm / (BP*BQ), p0 + mm / BQ % BP,
// q0 + mm % BQ); rows outside the image are computed from the padding and not stored. With ConvShape.nchw the
// tile is written channels-first, column j of row mm at out[n, n0 + j, p, q] (columns P*Q apart): a training layer
// on NCHW tensors gets its y and dx with no transpose after (8 adjacent pixels of a column per warp store). Epilogue (cuDNN's
// blending): out = alpha * (acc + bias) + beta * out, optionally max(., 0).
//
// The scalar geometry arrives as one struct of ints, ConvShape, whose field order the launcher
// (minidl/primitives/cuda/convolution_wgmma.py, SHAPE_FIELDS) repeats; a CPU test checks the two agree.

#include "wgmma_pipeline.cuh"

namespace minidl_wgmma {

struct ConvShape {
    int N, H, W, C;        // the GEMM rows' input tensor (fprop: x; dgrad: dy as N, P, Q, K)
    int K;                 // output channels (fprop: K; dgrad: C)
    int R, S;              // filter taps
    int P, Q;              // the output's rows and columns (fprop: P, Q; dgrad: H, W)
    int off_h, off_w;      // input coordinate of output (0, 0) at tap (0, 0): fprop -ph, -pw; dgrad +ph, +pw
    int sh, sw;            // input step per output row / column (the stride; dgrad: 1)
    int tap_h, tap_w;      // input step per tap: fprop dh, dw; dgrad -dh, -dw
    int BNI, BP, BQ;       // the output-pixel rectangle of a tile (BNI * BP * BQ = 128; wgrad: 64 pixels)
    int c_steps;           // k steps per tap: ceil(C / BK) (wgrad: unused)
    int splits;            // wgrad: slices of the pixel reduction
    int vec_c, relu;       // epilogue: 2 = 16-byte stores, 1 = pairs; 1 = max(., 0)
    int nchw;              // fprop / dgrad: 1 = write the output channels-first, (N, K, P, Q) (no transpose after)
};

// fprop and stride-1 dgrad: rows = output pixels, reduction = (tap, input channel).
template <int KIND, int BN, int MI>
struct ConvRowsProblem {
    using T = typename minidl_tc::Storage<KIND>::T;
    using Cfg = Config<KIND, BN, false, MI>;
    struct Tile {
        int img0, p0, q0, n0, kt0, kt1, cols;  // n0: the first output channel (the epilogue's first column)
    };
    const TensorMap* map_in;   // 4-D (C, W, H, N)
    const TensorMap* map_w;    // 3-D (C, R*S, K)
    const TensorMap* map_out;  // 4-D (K, Q, P, N): the staged epilogue's TMA store (nullptr: register stores)
    ConvShape g;
    int tiles_n, tiles_p, tiles_q, tiles_k;
    float alpha, beta;
    T* out;                    // (N, P, Q, K)
    const void* bias;
    long long ldc_col;
    int vec_c, relu, bias_f32;   // bias_f32: the epilogue's bias is float32 (never here: 0)

    __device__ int tiles() const { return tiles_n * tiles_p * tiles_q * tiles_k; }
    __device__ Tile tile(int t) const
    {
        int b, tm, tn;
        grouped_tile(t, tiles_n * tiles_p * tiles_q, tiles_k, b, tm, tn);
        Tile tl;
        tl.q0 = (tm % tiles_q) * g.BQ;
        tl.p0 = (tm / tiles_q % tiles_p) * g.BP;
        tl.img0 = (tm / (tiles_q * tiles_p)) * g.BNI;
        tl.n0 = tn * BN;
        tl.kt0 = 0;
        tl.kt1 = g.R * g.S * g.c_steps;
        tl.cols = min(BN, g.K - tl.n0);
        return tl;
    }
    __device__ void load(const Tile& tl, int kt, unsigned a_dst, unsigned b_dst, unsigned bar) const
    {
        const int rs = kt / g.c_steps, c0 = (kt - rs * g.c_steps) * Cfg::BK;
        const int r = rs / g.S, s = rs - r * g.S;
        tma_load(a_dst, map_in, bar, c0, tl.q0 * g.sw + g.off_w + s * g.tap_w, tl.p0 * g.sh + g.off_h + r * g.tap_h,
                 tl.img0);
        tma_load(b_dst, map_w, bar, c0, rs, tl.n0);
    }
    __device__ void* row(const Tile& tl, int mm) const
    {
        const int q = tl.q0 + mm % g.BQ, p = tl.p0 + mm / g.BQ % g.BP, n = tl.img0 + mm / (g.BQ * g.BP);
        if (n >= g.N || p >= g.P || q >= g.Q) return nullptr;
        if (g.nchw) return out + (((long long)n * g.K + tl.n0) * g.P + p) * g.Q + q;   // columns P*Q apart: ldc_col
        return out + (((long long)n * g.P + p) * g.Q + q) * g.K + tl.n0;
    }
    // The tile's rows are the box (BN channels, BQ columns, BP rows, BNI images) of the output, in that order.
    __device__ void store(const Tile& tl, unsigned smem) const { tma_store(map_out, smem, tl.n0, tl.q0, tl.p0, tl.img0); }
    template <class Acc>
    __device__ bool split_fixup(const Tile&, Acc&) const { return true; }   // (no split-K)
};

// A weight-gradient tile t of the split-K grid (both wgrad problems below): its split, its first row m0 and its k
// steps [kt0, kt1) (per_split of the k_total steps each); returns its column block for the problem to place.
template <class Tile>
__device__ __forceinline__ int split_k_tile(Tile& tl, int t, int tiles_m, int tiles_n, int tile_m, int per_split,
                                            int k_total)
{
    int tm, tn;
    grouped_tile(t, tiles_m, tiles_n, tl.split, tm, tn);
    tl.m0 = tm * tile_m;
    tl.kt0 = min(tl.split * per_split, k_total);
    tl.kt1 = min(tl.kt0 + per_split, k_total);
    return tn;
}

// wgrad (16-bit): rows = output channels k, columns = (tap, input channel), reduction = pixels. With C a
// multiple of 64 a column tile spans taps (slab j = columns n0 + 64j .. of the flat (r, s, c) space: one
// tile of 256 columns covers 4 taps of 64 channels), so dy's boxes are re-read for R*S*C/BN column tiles
// instead of R*S * ceil(C/BN); otherwise a tile stays inside one tap.
template <int KIND, int BN, int OUT_KIND, int MI>
struct ConvWgradProblem {
    using OutT = typename minidl_tc::Storage<OUT_KIND>::T;
    using Cfg = Config<KIND, BN, false, MI>;
    struct Tile {
        int split, m0, rs, c0, n0, kt0, kt1, cols;
    };
    const TensorMap* map_dy;   // 4-D (K, Q, P, N): A, M-major
    const TensorMap* map_x;    // 4-D (C, W, H, N), element strides (1, sw, sh, 1): B, N-major
    ConvShape g;               // N, H, W, C of x; K; R, S; P, Q of dy; off_h = -ph, tap_h = dh, ...
    int tiles_m, tiles_n, c_blocks, pix_q, pix_p, per_split, k_total, flat;
    float alpha, beta;
    OutT* out;                 // dw (K, R, S, C), or fp32 partial sums [split][K][R*S*C]
    const TensorMap* map_out;  // (register stores only)
    const void* bias;
    long long ldc_col;
    int vec_c, relu, bias_f32;   // bias_f32: the epilogue's bias is float32 (never here: 0)

    __device__ int tiles() const { return g.splits * tiles_m * tiles_n; }
    __device__ Tile tile(int t) const
    {
        Tile tl;
        const int tn = split_k_tile(tl, t, tiles_m, tiles_n, Cfg::TILE_M, per_split, k_total);
        if (flat) {
            tl.n0 = tn * BN;
            tl.rs = tl.c0 = 0;
            tl.cols = min(BN, g.R * g.S * g.C - tl.n0);
        } else {
            tl.rs = tn / c_blocks;
            tl.c0 = (tn - tl.rs * c_blocks) * BN;
            tl.n0 = tl.rs * g.C + tl.c0;
            tl.cols = min(BN, g.C - tl.c0);
        }
        return tl;
    }
    __device__ void load(const Tile& tl, int kt, unsigned a_dst, unsigned b_dst, unsigned bar) const
    {
        const int qi = kt % pix_q, pi = kt / pix_q % pix_p, ni = kt / (pix_q * pix_p);
        const int q0 = qi * g.BQ, p0 = pi * g.BP, n0 = ni * g.BNI;
#pragma unroll
        for (int j = 0; j < Cfg::TILE_M / SLAB; ++j)
            tma_load(a_dst + j * Cfg::SLAB_BYTES, map_dy, bar, tl.m0 + j * SLAB, q0, p0, n0);
#pragma unroll
        for (int j = 0; j < BN / SLAB; ++j) {
            int rs = tl.rs, c = tl.c0 + j * SLAB;
            if (flat) {  // columns past the last tap load a valid box nobody stores (the copy still counts)
                const int col = tl.n0 + j * SLAB;
                rs = min(col / g.C, g.R * g.S - 1);
                c = col - (col / g.C) * g.C;
            }
            const int r = rs / g.S, s = rs - r * g.S;
            tma_load(b_dst + j * Cfg::SLAB_BYTES, map_x, bar, c, q0 * g.sw + g.off_w + s * g.tap_w,
                     p0 * g.sh + g.off_h + r * g.tap_h, n0);
        }
    }
    __device__ void* row(const Tile& tl, int mm) const
    {
        const int k = tl.m0 + mm;
        if (k >= g.K) return nullptr;
        const long long rsc = (long long)g.R * g.S * g.C;
        return out + (long long)tl.split * g.K * rsc * (g.splits > 1) + k * rsc + tl.n0;
    }
    __device__ void store(const Tile&, unsigned) const {}
    template <class Acc>
    __device__ bool split_fixup(const Tile&, Acc&) const { return true; }   // (split-K sums: a reduce kernel)
};

// wgrad, TF32, channels-first (see the top of the file): rows = output channels k, columns = input channels c of
// one tap, reduction = pixels, both operands K-major.
template <int BN, int MI>
struct ConvWgradNchwProblem {
    using Cfg = Config<KIND_TF32, BN, false, MI>;
    struct Tile {
        int split, m0, rs, c0, n0, kt0, kt1, cols;   // n0 = c0 (the epilogue's first column, for a bias: none)
    };
    const TensorMap* map_dy;   // 3-D (P*Q, K, N), boxes (32, 128 * MI, 1): A, K-major
    const TensorMap* map_x;    // 3-D (H*Q, C, S*N): x's shifted copies, boxes (32, BN, 1): B, K-major
    ConvShape g;               // N, H, W, C of x; K; R, S; P, Q of dy; off_h = -ph, tap_h = dh
    int tiles_m, tiles_n, c_blocks, runs, per_split, k_total;   // runs: k steps (32-pixel runs) per image
    float alpha, beta;
    float* out;                // dw (K, C, R, S), or fp32 partial sums [split][K][C*R*S]
    const TensorMap* map_out;  // (register stores only)
    const void* bias;
    long long ldc_col;         // R * S: one input channel to the next in dw
    int vec_c, relu, bias_f32;   // bias_f32: the epilogue's bias is float32 (never here: 0)

    __device__ int tiles() const { return g.splits * tiles_m * tiles_n; }
    __device__ Tile tile(int t) const
    {
        Tile tl;
        const int tn = split_k_tile(tl, t, tiles_m, tiles_n, Cfg::TILE_M, per_split, k_total);
        tl.rs = tn / c_blocks;
        tl.c0 = tl.n0 = (tn - tl.rs * c_blocks) * BN;
        tl.cols = min(BN, g.C - tl.c0);
        return tl;
    }
    __device__ void load(const Tile& tl, int kt, unsigned a_dst, unsigned b_dst, unsigned bar) const
    {
        const int n = kt / runs, f = (kt - n * runs) * Cfg::BK;
        const int r = tl.rs / g.S, s = tl.rs - r * g.S;
        tma_load(a_dst, map_dy, bar, f, tl.m0, n);
        tma_load(b_dst, map_x, bar, f + (g.off_h + r * g.tap_h) * g.Q, tl.c0, s * g.N + n);
    }
    __device__ void* row(const Tile& tl, int mm) const
    {
        const int k = tl.m0 + mm;
        if (k >= g.K) return nullptr;
        const long long crs = (long long)g.C * g.R * g.S;
        return out + (long long)tl.split * g.K * crs * (g.splits > 1) + k * crs + (long long)tl.c0 * g.R * g.S + tl.rs;
    }
    __device__ void store(const Tile&, unsigned) const {}
    template <class Acc>
    __device__ bool split_fixup(const Tile&, Acc&) const { return true; }   // (split-K sums: a reduce kernel)
};

template <class Problem>
__device__ __forceinline__ void set_epilogue(Problem& p, float alpha, float beta, void* out, const void* bias,
                                             const ConvShape& g)
{
    p.alpha = alpha;
    p.beta = beta;
    p.out = static_cast<decltype(p.out)>(out);
    p.bias = bias;
    p.bias_f32 = 0;   // (a convolution's bias is of the data's type)
    p.ldc_col = 1;
    p.vec_c = g.vec_c;
    p.relu = g.relu;
}

}  // namespace minidl_wgmma

// fprop: x (N, H, W, C), w (K, R, S, C) -> y (N, P, Q, K). dgrad runs the same kernel on dy and the
// rearranged filter (ConvShape's dgrad fields), under its own name for the profiler and the tables.
// STAGED: the 16-bit output tile leaves through shared memory and a TMA store (map_out, when use_map_out).
#define MINIDL_CONV_ROWS_KERNEL(name)                                                                              \
    template <int KIND, int BN, bool STAGED, int MI>                                                               \
    __global__ void __launch_bounds__(minidl_wgmma::THREADS, 1)                                                    \
        name(const __grid_constant__ minidl_wgmma::TensorMap map_in, const __grid_constant__ minidl_wgmma::TensorMap \
                 map_w, const __grid_constant__ minidl_wgmma::TensorMap map_out, int use_map_out,                  \
             const minidl_wgmma::ConvShape g, float alpha, float beta, void* out, const void* bias)                \
    {                                                                                                              \
        using namespace minidl_wgmma;                                                                              \
        ConvRowsProblem<KIND, BN, MI> p;                                                                           \
        p.map_in = &map_in;                                                                                        \
        p.map_w = &map_w;                                                                                          \
        p.map_out = use_map_out ? &map_out : nullptr;                                                              \
        p.g = g;                                                                                                   \
        p.tiles_n = (g.N + g.BNI - 1) / g.BNI;                                                                     \
        p.tiles_p = (g.P + g.BP - 1) / g.BP;                                                                       \
        p.tiles_q = (g.Q + g.BQ - 1) / g.BQ;                                                                       \
        p.tiles_k = (g.K + BN - 1) / BN;                                                                           \
        set_epilogue(p, alpha, beta, out, bias, g);                                                                \
        if (g.nchw) p.ldc_col = (long long)g.P * g.Q;                                                              \
        wgmma_run<KIND, BN, false, true, KIND, STAGED && KIND != KIND_TF32, MI>(p);                                \
    }
MINIDL_CONV_ROWS_KERNEL(convolution_forward_wgmma)
MINIDL_CONV_ROWS_KERNEL(convolution_backward_data_wgmma)

// wgrad: dy (N, P, Q, K), x (N, H, W, C) -> dw (K, R, S, C) (SPLIT = 0), or fp32 partial sums (SPLIT = 1).
template <int KIND, int BN, int SPLIT, int MI>
__global__ void __launch_bounds__(minidl_wgmma::THREADS, 1)
    convolution_backward_filter_wgmma(const __grid_constant__ minidl_wgmma::TensorMap map_dy,
                                      const __grid_constant__ minidl_wgmma::TensorMap map_x,
                                      const minidl_wgmma::ConvShape g, float alpha, float beta, void* out)
{
    using namespace minidl_wgmma;
    static_assert(KIND != KIND_TF32, "TF32 wgmma cannot read wgrad's M/N-major operands");
    constexpr int OUT_KIND = SPLIT ? KIND_TF32 : KIND;  // split: fp32 partial sums
    ConvWgradProblem<KIND, BN, OUT_KIND, MI> p;
    p.map_dy = &map_dy;
    p.map_x = &map_x;
    p.g = g;
    p.tiles_m = (g.K + BM * MI - 1) / (BM * MI);
    p.c_blocks = (g.C + BN - 1) / BN;
    p.flat = g.C % SLAB == 0;
    p.tiles_n = p.flat ? (g.R * g.S * g.C + BN - 1) / BN : g.R * g.S * p.c_blocks;
    p.pix_q = (g.Q + g.BQ - 1) / g.BQ;
    p.pix_p = (g.P + g.BP - 1) / g.BP;
    p.k_total = p.pix_q * p.pix_p * ((g.N + g.BNI - 1) / g.BNI);
    p.per_split = (p.k_total + g.splits - 1) / g.splits;
    set_epilogue(p, SPLIT ? 1.0f : alpha, SPLIT ? 0.0f : beta, out, nullptr, g);
    p.map_out = nullptr;
    if (SPLIT) p.vec_c = 1;
    wgmma_run<KIND, BN, true, false, OUT_KIND, false, MI>(p);
}

// The B operand of the channels-first TF32 wgrad: xs[s, row, q] = x[row, q + s * step + first] (0 outside x's row),
// for rows = N*C*H rows, q < Q (dy's columns: the pixels x meets; a multiple of 4) and s < S (step = dw, first =
// -pw). A thread takes 4 adjacent columns of one row and writes them to every copy as one 16-byte store (its loads
// are one column off from alignment and come from L1), grid-stride over rows * Q / 4.
extern "C" __global__ void convolution_wgmma_shift_columns(const float* __restrict__ x, float* __restrict__ xs,
                                                           long long rows, int W, int Q, int S, int step, int first)
{
    const int quads = Q / 4;
    const long long total = rows * quads;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / quads;
        const int q = (int)(i - row * quads) * 4;
        const float* src = x + row * W;
        float4* dst = reinterpret_cast<float4*>(xs + row * Q + q);
        for (int s = 0, off = first; s < S; ++s, off += step) {
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int w = q + j + off;
                v[j] = w >= 0 && w < W ? __ldg(src + w) : 0.0f;
            }
            dst[(long long)s * rows * quads] = make_float4(v[0], v[1], v[2], v[3]);
        }
    }
}

// wgrad, TF32, channels-first: dy (N, K, P, Q), x (N, C, H, W) -> dw (K, C, R, S) (splits == 1), or fp32 partial
// sums (splits > 1, added up by convolution_tc_splitk_reduce_tf32).
template <int BN, int MI>
__global__ void __launch_bounds__(minidl_wgmma::THREADS, 1)
    convolution_backward_filter_wgmma_nchw(const __grid_constant__ minidl_wgmma::TensorMap map_dy,
                                           const __grid_constant__ minidl_wgmma::TensorMap map_x,
                                           const minidl_wgmma::ConvShape g, float alpha, float beta, float* out)
{
    using namespace minidl_wgmma;
    ConvWgradNchwProblem<BN, MI> p;
    p.map_dy = &map_dy;
    p.map_x = &map_x;
    p.g = g;
    p.tiles_m = (g.K + BM * MI - 1) / (BM * MI);
    p.c_blocks = (g.C + BN - 1) / BN;
    p.tiles_n = g.R * g.S * p.c_blocks;
    p.runs = (g.P * g.Q + 31) / 32;
    p.k_total = p.runs * g.N;
    p.per_split = (p.k_total + g.splits - 1) / g.splits;
    const bool split = g.splits > 1;
    set_epilogue(p, split ? 1.0f : alpha, split ? 0.0f : beta, out, nullptr, g);
    p.ldc_col = (long long)g.R * g.S;
    p.map_out = nullptr;
    wgmma_run<KIND_TF32, BN, false, true, KIND_TF32, false, MI>(p);   // both K-major
}

#ifndef __CUDACC_RTC__
// For scripts/compile_kernels.sh (nvcc, no name expressions): every kernel, both 16-bit kinds and TF32,
// the tile widths, both epilogues.
#define MINIDL_CONV_ROWS_INSTANCE(name, KIND, BN, ST, MI)                                                         \
    template __global__ void name<KIND, BN, ST, MI>(const __grid_constant__ minidl_wgmma::TensorMap,             \
                                                    const __grid_constant__ minidl_wgmma::TensorMap,             \
                                                    const __grid_constant__ minidl_wgmma::TensorMap, int,        \
                                                    const minidl_wgmma::ConvShape, float, float, void*, const void*);
MINIDL_CONV_ROWS_INSTANCE(convolution_forward_wgmma, 0, 128, false, 2)
MINIDL_CONV_ROWS_INSTANCE(convolution_forward_wgmma, 2, 256, true, 1)
MINIDL_CONV_ROWS_INSTANCE(convolution_backward_data_wgmma, 1, 64, true, 2)
template __global__ void convolution_backward_filter_wgmma<2, 128, 1, 2>(const __grid_constant__ minidl_wgmma::TensorMap,
    const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::ConvShape, float, float, void*);
template __global__ void convolution_backward_filter_wgmma<1, 64, 0, 1>(const __grid_constant__ minidl_wgmma::TensorMap,
    const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::ConvShape, float, float, void*);
template __global__ void convolution_backward_filter_wgmma_nchw<128, 2>(const __grid_constant__ minidl_wgmma::TensorMap,
    const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::ConvShape, float, float, float*);
template __global__ void convolution_backward_filter_wgmma_nchw<256, 1>(const __grid_constant__ minidl_wgmma::TensorMap,
    const __grid_constant__ minidl_wgmma::TensorMap, const minidl_wgmma::ConvShape, float, float, float*);
#endif
