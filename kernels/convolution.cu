// convolution.cu: float32 convolution forward, backward-data and backward-filter, five algorithms.
//
// Every convolution here is 3-D: a 1-D or 2-D problem is passed with size-1 depth (and height), so
// one kernel serves all three. Layouts: NCHW (channels first: x (N, C, D, H, W), w (K, C/g, T, R, S))
// and NHWC (channels last: x (N, D, H, W, C), w (K, T, R, S, C/g)). Groups split C and K into
// `groups` independent convolutions; a grid's z dimension runs over them.
//
// implicit_gemm (the fast path; CUTLASS's mapping, cuDNN's IMPLICIT_GEMM):
//     fprop  C[m, n] = sum_k A[m, k] B[k, n] with m = (n, o, p, q) output pixel, n = output channel,
//            k = filter tap (c, t, r, s): A is the im2col matrix of x, B the filters.
//     dgrad  m = (n, d, h, w) input pixel, n = input channel, k = (output channel, t, r, s):
//            A gathers dy at o = (d + pad - t*dil) / stride where that divides exactly.
//     wgrad  m = output channel, n = filter tap (c, t, r, s), k = (n, o, p, q) output pixel:
//            B gathers x. M*N is small and K huge, so K is split over grid z (split-K) and the
//            slices' partial sums are added by a second kernel (deterministic, no atomics).
//   The GEMM main loop is common.cuh's (128 x BN tiles, BN = 128/64/32 by the GEMM's N, 8 x BN/16
//   register blocking, double-buffered shared memory). The lowered matrix is never written to DRAM: each thread gathers its part of
//   the 128 x 8 tile straight from the tensor, with zero for padding and out-of-range taps.
//   Gathers use the mapping "thread t loads reduction index t/32 for rows t%32 + 32j, j<4": one
//   decomposition of k per step, 4 pixels decomposed once per thread, and a warp reads 32
//   neighbouring pixels (NCHW) or 32 neighbouring channels (NHWC) at once. Operands contiguous
//   along k (fprop filters, NCHW dy of wgrad) are read 4 consecutive k per thread, as float4.
// implicit_precomp_gemm: the same, but the decomposition k -> (channel, t*dil, r*dil, s*dil) is
//   read from a small table (int4 per k) written once per call into the workspace by
//   convolution_tap_table, instead of three integer divisions per step; backward-data also reads
//   a GEMM-ready (row per k, float4-loadable) copy of the filters from the workspace.
// im2col_gemm: convolution_im2col writes the lowered matrix (N*P*Q, C/g*T*R*S) to the workspace,
//   then gemm.cu multiplies; backward-data multiplies into the workspace and convolution_col2im
//   sums the columns back into dx (one thread per dx element: a gather, so no atomics).
// direct: one thread per output element looping over its window. Simple and obviously right.
//   First layers (1-4 input channels, C*R*S <= 160, groups = 1; "Small-channel kernels" at the end
//   of this file) get tiled kernels for forward and backward-filter instead: forward keeps the
//   input tile with halo and the weights in shared memory and 4 x 8 outputs per thread in
//   registers; backward-filter lowers 32 output pixels at a time into shared memory.
// winograd: F(2x2, 3x3) (Lavin & Gray) for 2-D 3x3 stride-1 dilation-1, groups=1: transform 4x4 input
//   tiles (B^T d B) and the filters (G g G^T), 16 batched GEMMs over channels (gemm.cu), then the
//   output transform (A^T m A) with bias and blending. Backward-data is the same forward
//   convolution of dy with the filters flipped and C/K swapped, padding 2 - pad.
//
// Blending as in cuDNN: out = alpha * result + beta * out, in each kernel's epilogue; with beta == 0
// out is never read. Flat tensor indices are 64-bit; one image's offsets are 32-bit.
#include "common.cuh"
#include "elementwise_common.cuh"  // half_load / half_store

// convolution_bias_activation_forward (cuDNN's name): this file compiled with -DMINIDL_CONV_RELU_EPILOGUE
// applies the ReLU to every forward output in the epilogue, after bias and blending, instead of a
// separate activation kernel that reads y back (one launch and two full-size passes fewer). The
// ReLU is kernels/activation.cu's (NaN passes through). The forward kernels of the direct,
// small-channel direct, implicit GEMM and Winograd paths apply it; the define changes nothing else.
__device__ __forceinline__ float conv_forward_activation(float v)
{
#ifdef MINIDL_CONV_RELU_EPILOGUE
    return v < 0.0f ? 0.0f : v;
#else
    return v;
#endif
}

using namespace minidl;

struct ConvGeom {
    int N, C, D, H, W;  // input
    int K, T, R, S;     // filters: output channels, depth, height, width
    int O, P, Q;        // output depth, height, width
    int pad_d, pad_h, pad_w, str_d, str_h, str_w, dil_d, dil_h, dil_w;
    int groups;

    __device__ int Cg() const { return C / groups; }
    __device__ int Kg() const { return K / groups; }
    __device__ int TRS() const { return T * R * S; }
    __device__ int DHW() const { return D * H * W; }
    __device__ int OPQ() const { return O * P * Q; }

    __device__ long long x_index(bool cl, int n, int c, int d, int h, int w) const
    {
        return cl ? ((((long long)n * D + d) * H + h) * W + w) * C + c
                  : ((((long long)n * C + c) * D + d) * H + h) * W + w;
    }
    __device__ long long y_index(bool cl, int n, int k, int o, int p, int q) const
    {
        return cl ? ((((long long)n * O + o) * P + p) * Q + q) * K + k
                  : ((((long long)n * K + k) * O + o) * P + p) * Q + q;
    }
    // filter (k, c, t, r, s) with c inside its group
    __device__ long long w_index(bool cl, int k, int c, int t, int r, int s) const
    {
        return cl ? ((((long long)k * T + t) * R + r) * S + s) * Cg() + c
                  : ((((long long)k * Cg() + c) * T + t) * R + r) * S + s;
    }
};

// The geometry reaches a kernel as one ConvGeom passed by value (the launcher packs it once per problem:
// _Geometry in minidl/primitives/cuda/convolution.py): one kernel argument instead of 22 ints, a third of the
// host time of a launch through CuPy.
// `const ConvGeom g = CONV_GEOM;` opens every kernel: g, and the sizes under their own names for the kernels that
// read them directly.
#define CONV_GEOM_ARGS const ConvGeom conv_geom
#define CONV_GEOM                                                                                         \
    conv_geom;                                                                                            \
    const int N = conv_geom.N, C = conv_geom.C, D = conv_geom.D, H = conv_geom.H, W = conv_geom.W,      \
              K = conv_geom.K, T = conv_geom.T, R = conv_geom.R, S = conv_geom.S, O = conv_geom.O,      \
              P = conv_geom.P, Q = conv_geom.Q, pad_d = conv_geom.pad_d, pad_h = conv_geom.pad_h,       \
              pad_w = conv_geom.pad_w, str_d = conv_geom.str_d, str_h = conv_geom.str_h,                \
              str_w = conv_geom.str_w, dil_d = conv_geom.dil_d, dil_h = conv_geom.dil_h,                \
              dil_w = conv_geom.dil_w, groups = conv_geom.groups;                                       \
    (void)N, (void)C, (void)D, (void)H, (void)W, (void)K, (void)T, (void)R, (void)S, (void)O, (void)P,   \
        (void)Q, (void)pad_d, (void)pad_h, (void)pad_w, (void)str_d, (void)str_h, (void)str_w, (void)dil_d, \
        (void)dil_h, (void)dil_w, (void)groups

// A filter tap as the reduction index of fprop/dgrad sees it: NCHW orders k as (channel, t, r, s),
// NHWC as (t, r, s, channel), the order the filters are stored in. Returns (channel, t*dil_d,
// r*dil_h, s*dil_w).
template <bool CL>
__device__ __forceinline__ int4 filter_tap(const ConvGeom& g, int k, int channels)
{
    int chan, trs;
    if (CL) {
        trs = k / channels;
        chan = k - trs * channels;
    } else {
        chan = k / g.TRS();
        trs = k - chan * g.TRS();
    }
    const int t = trs / (g.R * g.S);
    const int rs = trs - t * g.R * g.S;
    const int r = rs / g.S;
    const int s = rs - r * g.S;
    return make_int4(chan, t * g.dil_d, r * g.dil_h, s * g.dil_w);
}

// The precomputed tap table of implicit_precomp_gemm: table[k] = filter_tap(k), for k < count.
extern "C" __global__ void convolution_tap_table(int4* table, int count, int channels, int channels_last,
                                                 CONV_GEOM_ARGS)
{
    const ConvGeom g = CONV_GEOM;
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    table[k] = channels_last ? filter_tap<true>(g, k, channels) : filter_tap<false>(g, k, channels);
}

// ---------------------------------------------------------------------------------------------
// Implicit GEMM loaders
// ---------------------------------------------------------------------------------------------

// fprop A: the lowered input. Row m = output pixel (n, o, p, q); k = filter tap.
template <bool CL, bool PRECOMP>
struct FpropInputLoader {
    const float* x;
    const int4* taps;
    const ConvGeom& g;
    int depth;  // C/g * T*R*S
    long long base[4];
    int d0[4], h0[4], w0[4];
    bool ok[4];
    float v[4];

    __device__ FpropInputLoader(const float* x_, const int4* taps_, const ConvGeom& g_, int group, int m0)
        : x(x_), taps(taps_), g(g_)
    {
        depth = g.Cg() * g.TRS();
        const int rows = g.N * g.OPQ();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int m = m0 + threadIdx.x % 32 + 32 * j;
            ok[j] = m < rows;
            const int n = m / g.OPQ();
            const int opq = m - n * g.OPQ();
            const int o = opq / (g.P * g.Q);
            const int pq = opq - o * g.P * g.Q;
            const int p = pq / g.Q;
            const int q = pq - p * g.Q;
            d0[j] = o * g.str_d - g.pad_d;
            h0[j] = p * g.str_h - g.pad_h;
            w0[j] = q * g.str_w - g.pad_w;
            base[j] = CL ? (long long)n * g.DHW() * g.C + group * g.Cg()
                         : ((long long)n * g.C + group * g.Cg()) * g.DHW();
        }
    }
    __device__ __forceinline__ void load(int k0)
    {
        const int k = k0 + threadIdx.x / 32;
        int4 tap = make_int4(0, 0, 0, 0);
        if (k < depth) tap = PRECOMP ? taps[k] : filter_tap<CL>(g, k, g.Cg());
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int d = d0[j] + tap.y, h = h0[j] + tap.z, w = w0[j] + tap.w;
            const bool in = ok[j] && k < depth && (unsigned)d < (unsigned)g.D && (unsigned)h < (unsigned)g.H &&
                            (unsigned)w < (unsigned)g.W;
            const int pixel = (d * g.H + h) * g.W + w;
            const long long idx = CL ? base[j] + (long long)pixel * g.C + tap.x
                                     : base[j] + (long long)tap.x * g.DHW() + pixel;
            v[j] = in ? __ldg(x + idx) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
#pragma unroll
        for (int j = 0; j < 4; ++j) tile_at<TILE_M>(tile, threadIdx.x / 32, threadIdx.x % 32 + 32 * j) = v[j];
    }
};

// dgrad A: the lowered output gradient. Row m = input pixel (n, d, h, w); k = (output channel, tap).
// dy contributes where d + pad - t*dil = o*stride for an integer o inside the output.
template <bool CL, bool PRECOMP>
struct DgradOutputGradLoader {
    const float* dy;
    const int4* taps;
    const ConvGeom& g;
    int depth;  // K/g * T*R*S
    bool unit_stride;
    long long base[4];
    int dp[4], hp[4], wp[4];
    bool ok[4];
    float v[4];

    __device__ DgradOutputGradLoader(const float* dy_, const int4* taps_, const ConvGeom& g_, int group, int m0)
        : dy(dy_), taps(taps_), g(g_)
    {
        depth = g.Kg() * g.TRS();
        unit_stride = (g.str_d == 1) && (g.str_h == 1) && (g.str_w == 1);
        const int rows = g.N * g.DHW();
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int m = m0 + threadIdx.x % 32 + 32 * j;
            ok[j] = m < rows;
            const int n = m / g.DHW();
            const int dhw = m - n * g.DHW();
            const int d = dhw / (g.H * g.W);
            const int hw = dhw - d * g.H * g.W;
            const int h = hw / g.W;
            const int w = hw - h * g.W;
            dp[j] = d + g.pad_d;
            hp[j] = h + g.pad_h;
            wp[j] = w + g.pad_w;
            base[j] = CL ? (long long)n * g.OPQ() * g.K + group * g.Kg()
                         : ((long long)n * g.K + group * g.Kg()) * g.OPQ();
        }
    }
    __device__ __forceinline__ void load(int k0)
    {
        const int k = k0 + threadIdx.x / 32;
        int4 tap = make_int4(0, 0, 0, 0);
        if (k < depth) tap = PRECOMP ? taps[k] : filter_tap<CL>(g, k, g.Kg());
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int o = dp[j] - tap.y, p = hp[j] - tap.z, q = wp[j] - tap.w;
            bool in = ok[j] && k < depth && o >= 0 && p >= 0 && q >= 0;
            if (!unit_stride) {
                const int os = o / g.str_d, ps = p / g.str_h, qs = q / g.str_w;
                in = in && os * g.str_d == o && ps * g.str_h == p && qs * g.str_w == q;
                o = os; p = ps; q = qs;
            }
            in = in && o < g.O && p < g.P && q < g.Q;
            const int pixel = (o * g.P + p) * g.Q + q;
            const long long idx = CL ? base[j] + (long long)pixel * g.K + tap.x
                                     : base[j] + (long long)tap.x * g.OPQ() + pixel;
            v[j] = in ? __ldg(dy + idx) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
#pragma unroll
        for (int j = 0; j < 4; ++j) tile_at<TILE_M>(tile, threadIdx.x / 32, threadIdx.x % 32 + 32 * j) = v[j];
    }
};

// An operand whose element (row, k) sits at base[k_offset(k) + row * row_stride]: the filters of
// dgrad (B) and the output gradient of wgrad in NHWC (A). Same thread mapping as the gathers, with
// ROWS/32 rows per thread.
template <int ROWS, class KOffset>
struct SeparableLoader {
    static constexpr int PER_THREAD = ROWS / 32;
    const float* base;
    KOffset k_offset;
    long long row_stride;
    int rows, depth, row0;
    float v[PER_THREAD];

    __device__ SeparableLoader(const float* base_, KOffset k_offset_, long long row_stride_, int rows_,
                               int depth_, int row0_)
        : base(base_), k_offset(k_offset_), row_stride(row_stride_), rows(rows_), depth(depth_), row0(row0_)
    {
    }
    __device__ __forceinline__ void load(int k0)
    {
        const int k = k0 + threadIdx.x / 32;
        const long long ko = k < depth ? k_offset(k) : 0;
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int row = row0 + threadIdx.x % 32 + 32 * j;
            v[j] = (k < depth && row < rows) ? __ldg(base + ko + row * row_stride) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) tile_at<ROWS>(tile, threadIdx.x / 32, threadIdx.x % 32 + 32 * j) = v[j];
    }
};

template <bool CL>
struct DgradFilterOffset {  // dgrad filters: k = (output channel, tap), rows = input channel
    int Cg, TRS, Kg;
    __device__ long long operator()(int k) const
    {
        if (CL) {  // w (K, T, R, S, Cg), k = (trs, kk)
            const int trs = k / Kg, kk = k - trs * Kg;
            return ((long long)kk * TRS + trs) * Cg;
        } else {  // w (K, Cg, T, R, S), k = (kk, trs)
            const int kk = k / TRS, trs = k - kk * TRS;
            return (long long)kk * Cg * TRS + trs;
        }
    }
};

struct WgradOutputGradOffset {  // wgrad A in NHWC: dy (N*OPQ, K), k = output pixel, rows = output channel
    int K;
    __device__ long long operator()(int k) const { return (long long)k * K; }
};

// wgrad A in NCHW: dy[n, kout, opq], rows = output channel, k = (n, opq) contiguous inside an image.
// Thread t fetches row t/2 and the 4 consecutive pixels (t%2)*4 .. +3: one float4 when O*P*Q % 4 == 0
// (the 4 then never straddle two images) and dy is 16-byte aligned.
template <int ROWS>
struct WgradOutputGradLoaderNCHW {
    const float* dy;  // at channel group * Kg
    int rows, depth, OPQ;
    long long image_stride;  // K * OPQ
    bool vec;
    int row, kq;
    float v[4];

    __device__ WgradOutputGradLoaderNCHW(const float* dy_, const ConvGeom& g, int m0, bool vec_)
        : dy(dy_), rows(g.Kg()), depth(g.N * g.OPQ()), OPQ(g.OPQ()), vec(vec_)
    {
        image_stride = (long long)g.K * g.OPQ();
        row = m0 + threadIdx.x / 2;
        kq = (threadIdx.x % 2) * 4;
    }
    __device__ __forceinline__ bool active() const { return 2 * ROWS >= GEMM_THREADS || threadIdx.x < 2 * ROWS; }
    __device__ __forceinline__ void load(int k0)
    {
        if (!active()) return;
        const int k = k0 + kq;
        if (vec && row < rows && k + 3 < depth) {
            const int n = k / OPQ, opq = k - n * OPQ;
            const float4 t = __ldg(reinterpret_cast<const float4*>(dy + n * image_stride + (long long)row * OPQ + opq));
            v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int n = (k + j) / OPQ, opq = (k + j) - n * OPQ;
                v[j] = (row < rows && k + j < depth) ? __ldg(dy + n * image_stride + (long long)row * OPQ + opq) : 0.0f;
            }
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
        if (!active()) return;
#pragma unroll
        for (int j = 0; j < 4; ++j) tile_at<ROWS>(tile, kq + j, threadIdx.x / 2) = v[j];
    }
};

// wgrad B: the lowered input, transposed. Row = filter tap (c, t, r, s) [NHWC: (t, r, s, c)], fixed
// per thread; k = output pixel (n, o, p, q), decomposed once per step.
template <bool CL, int ROWS>
struct WgradInputLoader {
    static constexpr int PER_THREAD = ROWS / 32;
    const float* x;
    const ConvGeom& g;
    int depth;  // N * O*P*Q
    int chan_off[PER_THREAD], td[PER_THREAD], th[PER_THREAD], tw[PER_THREAD];
    bool ok[PER_THREAD];
    float v[PER_THREAD];

    __device__ WgradInputLoader(const float* x_, const ConvGeom& g_, int group, int n0) : x(x_), g(g_)
    {
        depth = g.N * g.OPQ();
        const int cols = g.Cg() * g.TRS();
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int col = n0 + threadIdx.x % 32 + 32 * j;
            ok[j] = col < cols;
            const int4 tap = filter_tap<CL>(g, ok[j] ? col : 0, g.Cg());
            const int c = group * g.Cg() + tap.x;
            chan_off[j] = CL ? c : c * g.DHW();
            td[j] = tap.y;
            th[j] = tap.z;
            tw[j] = tap.w;
        }
    }
    __device__ __forceinline__ void load(int k0)
    {
        const int k = k0 + threadIdx.x / 32;
        const bool k_ok = k < depth;
        const int n = k / g.OPQ();
        const int opq = k - n * g.OPQ();
        const int o = opq / (g.P * g.Q);
        const int pq = opq - o * g.P * g.Q;
        const int p = pq / g.Q;
        const int q = pq - p * g.Q;
        const int d0 = o * g.str_d - g.pad_d, h0 = p * g.str_h - g.pad_h, w0 = q * g.str_w - g.pad_w;
        const long long image = (long long)n * g.C * g.DHW();
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int d = d0 + td[j], h = h0 + th[j], w = w0 + tw[j];
            const bool in = k_ok && ok[j] && (unsigned)d < (unsigned)g.D && (unsigned)h < (unsigned)g.H &&
                            (unsigned)w < (unsigned)g.W;
            const int pixel = (d * g.H + h) * g.W + w;
            const long long idx = image + (CL ? (long long)pixel * g.C : (long long)pixel) + chan_off[j];
            v[j] = in ? __ldg(x + idx) : 0.0f;
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) tile_at<ROWS>(tile, threadIdx.x / 32, threadIdx.x % 32 + 32 * j) = v[j];
    }
};

// wgrad B in NCHW: the same gather, but x is contiguous along the output pixels (the k of this
// GEMM), so thread t < 2*ROWS takes filter tap t/2 and 4 consecutive output pixels (t%2)*4 .. +3:
// with stride 1 they read 4 neighbouring floats, and a warp touches a few cache lines instead of 32.
template <int ROWS>
struct WgradInputLoaderNCHW {
    const float* x;
    const ConvGeom& g;
    int depth;
    int kq;
    long long chan_off;  // (group * Cg + c) * DHW
    int td, th, tw;
    bool ok;
    float v[4];

    __device__ WgradInputLoaderNCHW(const float* x_, const ConvGeom& g_, int group, int n0) : x(x_), g(g_)
    {
        depth = g.N * g.OPQ();
        kq = (threadIdx.x % 2) * 4;
        const int col = n0 + threadIdx.x / 2;
        ok = threadIdx.x < 2 * ROWS && col < g.Cg() * g.TRS();
        const int4 tap = filter_tap<false>(g, ok ? col : 0, g.Cg());
        chan_off = (long long)(group * g.Cg() + tap.x) * g.DHW();
        td = tap.y;
        th = tap.z;
        tw = tap.w;
    }
    __device__ __forceinline__ void load(int k0)
    {
        if (2 * ROWS < GEMM_THREADS && threadIdx.x >= 2 * ROWS) return;
        int k = k0 + kq;
        // decompose the first pixel once, then step through the next three
        int n = k / g.OPQ();
        int opq = k - n * g.OPQ();
        int o = opq / (g.P * g.Q);
        const int pq = opq - o * g.P * g.Q;
        int p = pq / g.Q;
        int q = pq - p * g.Q;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int d = o * g.str_d - g.pad_d + td, h = p * g.str_h - g.pad_h + th, w = q * g.str_w - g.pad_w + tw;
            const bool in = ok && k + j < depth && (unsigned)d < (unsigned)g.D && (unsigned)h < (unsigned)g.H &&
                            (unsigned)w < (unsigned)g.W;
            const long long idx = (long long)n * g.C * g.DHW() + chan_off + (d * g.H + h) * g.W + w;
            v[j] = in ? __ldg(x + idx) : 0.0f;
            if (++q == g.Q) {
                q = 0;
                if (++p == g.P) {
                    p = 0;
                    if (++o == g.O) {
                        o = 0;
                        ++n;
                    }
                }
            }
        }
    }
    __device__ __forceinline__ void store(float* tile) const
    {
        if (2 * ROWS < GEMM_THREADS && threadIdx.x >= 2 * ROWS) return;
#pragma unroll
        for (int j = 0; j < 4; ++j) tile_at<ROWS>(tile, kq + j, threadIdx.x / 2) = v[j];
    }
};

// ---------------------------------------------------------------------------------------------
// Implicit GEMM epilogues
// ---------------------------------------------------------------------------------------------

template <bool CL>
struct FpropEpilogue {
    float* y;
    const float* bias;
    const ConvGeom& g;
    int group, m0, n0;
    float alpha, beta;
    __device__ __forceinline__ void operator()(int row, int col, float value) const
    {
        const int m = m0 + row, kout = n0 + col;
        if (m >= g.N * g.OPQ() || kout >= g.Kg()) return;
        const int k = group * g.Kg() + kout;
        const int n = m / g.OPQ(), opq = m - n * g.OPQ();
        const long long idx = CL ? (long long)m * g.K + k : ((long long)n * g.K + k) * g.OPQ() + opq;
        if (bias != nullptr) value += __ldg(bias + k);
        y[idx] = conv_forward_activation(blend_value(value, alpha, beta, y + idx));
    }
};

template <bool CL>
struct DgradEpilogue {
    float* dx;
    const ConvGeom& g;
    int group, m0, n0;
    float alpha, beta;
    __device__ __forceinline__ void operator()(int row, int col, float value) const
    {
        const int m = m0 + row, cin = n0 + col;
        if (m >= g.N * g.DHW() || cin >= g.Cg()) return;
        const int c = group * g.Cg() + cin;
        const int n = m / g.DHW(), dhw = m - n * g.DHW();
        const long long idx = CL ? (long long)m * g.C + c : ((long long)n * g.C + c) * g.DHW() + dhw;
        dx[idx] = blend_value(value, alpha, beta, dx + idx);
    }
};

// dw is (K, Cg*T*R*S) row-major in both layouts (the column order follows the layout). With
// split-K the raw sums go to partial[split][dw index] instead. `transposed`: the GEMM computed dw^T
// (rows = filter taps, columns = output channels).
struct WgradEpilogue {
    float* dw;
    float* partial;
    int rows, cols, row0, m0, n0;  // rows = Kg, cols = Cg*TRS, row0 = group * Kg
    float alpha, beta;
    bool transposed;
    __device__ __forceinline__ void operator()(int row, int col, float value) const
    {
        const int m = transposed ? n0 + col : m0 + row;  // output channel in the group
        const int n = transposed ? m0 + row : n0 + col;  // filter tap
        if (m >= rows || n >= cols) return;
        const long long idx = (long long)(row0 + m) * cols + n;
        if (partial != nullptr) partial[idx] = value;
        else dw[idx] = blend_value(value, alpha, beta, dw + idx);
    }
};

// ---------------------------------------------------------------------------------------------
// Implicit GEMM kernels. Grid: x = tiles of M (128), y = tiles of N (BN), z = groups (* split-K
// slices). BN is 128, 64 or 32, picked by the launcher from the N of the GEMM (output channels for
// fprop, input channels for dgrad, filter taps for wgrad). Kernel names end in _<layout>_bn<BN>.
// ---------------------------------------------------------------------------------------------

// fprop B, the filters: element (kout, k) at w[kout * depth + k], contiguous along k (float4 when
// depth % 4 == 0 and w is aligned).
template <bool CL, bool PRECOMP, int BN>
__device__ __forceinline__ void fprop_implicit(const float* x, const float* w, const float* bias, float* y,
                                               const int4* taps, const ConvGeom& g, float alpha, float beta,
                                               int vec_w)
{
    const int group = blockIdx.z;
    const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * BN;
    const int depth = g.Cg() * g.TRS();
    FpropInputLoader<CL, PRECOMP> load_a(x, taps, g, group, m0);
    KContiguousLoader<BN> load_b(w + ((long long)group * g.Kg() + n0) * depth, depth, g.Kg() - n0, depth, 0, vec_w);
    FpropEpilogue<CL> epilogue{y, bias, g, group, m0, n0, alpha, beta};
    gemm_mainloop<BN>(load_a, load_b, epilogue, 0, depth);
}

// dgrad B, the filters seen as (output channel, tap) x input channel. implicit_gemm reads them in
// place (strided); implicit_precomp_gemm reads a GEMM-ready copy w_t the launcher wrote into the
// workspace: per group a (Kg*TRS, Cg) row-major matrix whose rows follow the tap order of k, so each
// k is one contiguous float4-loadable row.
template <bool CL, bool PRECOMP, int BN>
__device__ __forceinline__ void dgrad_implicit(const float* w, const float* dy, float* dx, const int4* taps,
                                               const ConvGeom& g, float alpha, float beta, int vec_w)
{
    const int group = blockIdx.z;
    const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * BN;
    const int depth = g.Kg() * g.TRS();
    const float* w_group = w + (long long)group * g.Kg() * g.Cg() * g.TRS();
    DgradOutputGradLoader<CL, PRECOMP> load_a(dy, taps, g, group, m0);
    DgradEpilogue<CL> epilogue{dx, g, group, m0, n0, alpha, beta};
    if (PRECOMP) {
        RowContiguousLoader<BN> load_b(w_group + n0, g.Cg(), g.Cg() - n0, depth, 0, vec_w);
        gemm_mainloop<BN>(load_a, load_b, epilogue, 0, depth);
    } else {
        const DgradFilterOffset<CL> offset{g.Cg(), g.TRS(), g.Kg()};
        SeparableLoader<BN, DgradFilterOffset<CL>> load_b(w_group, offset, CL ? 1 : g.TRS(), g.Cg(), depth, n0);
        gemm_mainloop<BN>(load_a, load_b, epilogue, 0, depth);
    }
}

// SWAP computes dw^T instead (M = filter taps, N = output channels): with Kg <= 64 output channels
// the 128-row tile would otherwise be half empty.
template <bool CL, int BN, bool SWAP>
__device__ __forceinline__ void wgrad_implicit(const float* x, const float* dy, float* dw, float* partial,
                                               int k_per_split, const ConvGeom& g, float alpha, float beta,
                                               int vec_dy)
{
    const int group = blockIdx.z % g.groups;
    const int split = blockIdx.z / g.groups;
    const int m0 = blockIdx.x * TILE_M, n0 = blockIdx.y * BN;
    const int depth = g.N * g.OPQ();
    const int cols = g.Cg() * g.TRS();
    float* part = partial == nullptr ? nullptr : partial + (long long)split * g.K * cols;
    WgradEpilogue epilogue{dw, part, g.Kg(), cols, group * g.Kg(), m0, n0, alpha, beta, SWAP};
    const int k_begin = split * k_per_split;
    const int k_end = min(depth, k_begin + k_per_split);
    // the output gradient (rows = output channels) and the input gather (rows = filter taps)
    constexpr int DY_ROWS = SWAP ? BN : TILE_M, X_ROWS = SWAP ? TILE_M : BN;
    const int dy_row0 = SWAP ? n0 : m0, x_row0 = SWAP ? m0 : n0;
    if (CL) {
        SeparableLoader<DY_ROWS, WgradOutputGradOffset> load_dy(dy + (long long)group * g.Kg(),
                                                                WgradOutputGradOffset{g.K}, 1, g.Kg(), depth, dy_row0);
        WgradInputLoader<true, X_ROWS> load_x(x, g, group, x_row0);
        if constexpr (SWAP) gemm_mainloop<BN>(load_x, load_dy, epilogue, k_begin, k_end);
        else gemm_mainloop<BN>(load_dy, load_x, epilogue, k_begin, k_end);
    } else {
        WgradOutputGradLoaderNCHW<DY_ROWS> load_dy(dy + (long long)group * g.Kg() * g.OPQ(), g, dy_row0, vec_dy);
        WgradInputLoaderNCHW<X_ROWS> load_x(x, g, group, x_row0);
        if constexpr (SWAP) gemm_mainloop<BN>(load_x, load_dy, epilogue, k_begin, k_end);
        else gemm_mainloop<BN>(load_dy, load_x, epilogue, k_begin, k_end);
    }
}

#define FPROP_ARGS const float *x, const float *w, const float *bias, float *y, const int4 *taps, CONV_GEOM_ARGS, \
                   float alpha, float beta, int vec_w
#define DGRAD_ARGS const float *w, const float *dy, float *dx, const int4 *taps, CONV_GEOM_ARGS, float alpha, \
                   float beta, int vec_w
#define WGRAD_ARGS const float *x, const float *dy, float *dw, float *partial, int k_per_split, CONV_GEOM_ARGS, \
                   float alpha, float beta, int vec_dy

#define FPROP_KERNEL(name, cl, precomp, bn)                                                     \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) name(FPROP_ARGS)              \
    {                                                                                           \
        const ConvGeom g = CONV_GEOM;                                                           \
        fprop_implicit<cl, precomp, bn>(x, w, bias, y, taps, g, alpha, beta, vec_w);            \
    }
#define DGRAD_KERNEL(name, cl, precomp, bn)                                                     \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) name(DGRAD_ARGS)              \
    {                                                                                           \
        const ConvGeom g = CONV_GEOM;                                                           \
        dgrad_implicit<cl, precomp, bn>(w, dy, dx, taps, g, alpha, beta, vec_w);                \
    }
#define WGRAD_KERNEL(name, cl, bn, swap)                                                        \
    extern "C" __global__ void __launch_bounds__(GEMM_THREADS, 2) name(WGRAD_ARGS)              \
    {                                                                                           \
        const ConvGeom g = CONV_GEOM;                                                           \
        wgrad_implicit<cl, bn, swap>(x, dy, dw, partial, k_per_split, g, alpha, beta, vec_dy);  \
    }
#define CONV_KERNELS_BN(bn)                                                                          \
    FPROP_KERNEL(convolution_forward_implicit_gemm_nchw_bn##bn, false, false, bn)                    \
    FPROP_KERNEL(convolution_forward_implicit_gemm_nhwc_bn##bn, true, false, bn)                     \
    FPROP_KERNEL(convolution_forward_implicit_precomp_gemm_nchw_bn##bn, false, true, bn)             \
    FPROP_KERNEL(convolution_forward_implicit_precomp_gemm_nhwc_bn##bn, true, true, bn)              \
    DGRAD_KERNEL(convolution_backward_data_implicit_gemm_nchw_bn##bn, false, false, bn)              \
    DGRAD_KERNEL(convolution_backward_data_implicit_gemm_nhwc_bn##bn, true, false, bn)               \
    DGRAD_KERNEL(convolution_backward_data_implicit_precomp_gemm_nchw_bn##bn, false, true, bn)       \
    DGRAD_KERNEL(convolution_backward_data_implicit_precomp_gemm_nhwc_bn##bn, true, true, bn)        \
    WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nchw_bn##bn, false, bn, false)            \
    WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nhwc_bn##bn, true, bn, false)

CONV_KERNELS_BN(128)
CONV_KERNELS_BN(64)
CONV_KERNELS_BN(32)
// dw^T variants (names with _t_) for Kg <= 64 output channels per group
WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nchw_t_bn64, false, 64, true)
WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nhwc_t_bn64, true, 64, true)
WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nchw_t_bn32, false, 32, true)
WGRAD_KERNEL(convolution_backward_filter_implicit_gemm_nhwc_t_bn32, true, 32, true)

// ---------------------------------------------------------------------------------------------
// direct: one thread per output element (grid-stride loop over 64-bit flat indices).
// ---------------------------------------------------------------------------------------------

// Split a flat index of a (N, channels, A, B, C)-shaped tensor in the given layout.
__device__ __forceinline__ void split_index(long long i, bool cl, int channels, int a, int b, int c, int& n,
                                            int& ch, int& ia, int& ib, int& ic)
{
    if (cl) {
        ch = (int)(i % channels); i /= channels;
        ic = (int)(i % c); i /= c;
        ib = (int)(i % b); i /= b;
        ia = (int)(i % a); n = (int)(i / a);
    } else {
        ic = (int)(i % c); i /= c;
        ib = (int)(i % b); i /= b;
        ia = (int)(i % a); i /= a;
        ch = (int)(i % channels); n = (int)(i / channels);
    }
}

extern "C" __global__ void convolution_forward_direct(const float* __restrict__ x, const float* __restrict__ w,
                                                      const float* __restrict__ bias, float* y, CONV_GEOM_ARGS,
                                                      float alpha, float beta, int channels_last)
{
    const ConvGeom g = CONV_GEOM;
    const bool cl = channels_last != 0;
    const long long total = (long long)N * K * g.OPQ();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int n, k, o, p, q;
        split_index(i, cl, K, O, P, Q, n, k, o, p, q);
        const int group = k / g.Kg();
        float sum = 0.0f;
        for (int c = 0; c < g.Cg(); ++c)
            for (int t = 0; t < T; ++t) {
                const int d = o * str_d - pad_d + t * dil_d;
                if (d < 0 || d >= D) continue;
                for (int r = 0; r < R; ++r) {
                    const int h = p * str_h - pad_h + r * dil_h;
                    if (h < 0 || h >= H) continue;
                    for (int s = 0; s < S; ++s) {
                        const int ww = q * str_w - pad_w + s * dil_w;
                        if (ww < 0 || ww >= W) continue;
                        sum += x[g.x_index(cl, n, group * g.Cg() + c, d, h, ww)] * w[g.w_index(cl, k, c, t, r, s)];
                    }
                }
            }
        if (bias != nullptr) sum += bias[k];
        y[i] = conv_forward_activation(blend_value(sum, alpha, beta, y + i));
    }
}

extern "C" __global__ void convolution_backward_data_direct(const float* __restrict__ w,
                                                            const float* __restrict__ dy, float* dx,
                                                            CONV_GEOM_ARGS, float alpha, float beta,
                                                            int channels_last)
{
    const ConvGeom g = CONV_GEOM;
    const bool cl = channels_last != 0;
    const long long total = (long long)N * C * g.DHW();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int n, c, d, h, ww;
        split_index(i, cl, C, D, H, W, n, c, d, h, ww);
        const int group = c / g.Cg(), cin = c - group * g.Cg();
        float sum = 0.0f;
        for (int kk = 0; kk < g.Kg(); ++kk) {
            const int k = group * g.Kg() + kk;
            for (int t = 0; t < T; ++t) {
                const int on = d + pad_d - t * dil_d;  // = o * stride when this tap saw x[d]
                if (on < 0 || on % str_d != 0 || on / str_d >= O) continue;
                for (int r = 0; r < R; ++r) {
                    const int pn = h + pad_h - r * dil_h;
                    if (pn < 0 || pn % str_h != 0 || pn / str_h >= P) continue;
                    for (int s = 0; s < S; ++s) {
                        const int qn = ww + pad_w - s * dil_w;
                        if (qn < 0 || qn % str_w != 0 || qn / str_w >= Q) continue;
                        sum += dy[g.y_index(cl, n, k, on / str_d, pn / str_h, qn / str_w)] *
                               w[g.w_index(cl, k, cin, t, r, s)];
                    }
                }
            }
        }
        dx[i] = blend_value(sum, alpha, beta, dx + i);
    }
}

// One thread per filter element; dw has the filters' layout, (K, Cg, T, R, S) or (K, T, R, S, Cg).
extern "C" __global__ void convolution_backward_filter_direct(const float* __restrict__ x,
                                                              const float* __restrict__ dy, float* dw,
                                                              CONV_GEOM_ARGS, float alpha, float beta,
                                                              int channels_last)
{
    const ConvGeom g = CONV_GEOM;
    const bool cl = channels_last != 0;
    const long long total = (long long)K * g.Cg() * g.TRS();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int k, cin, t, r, s;  // a filter is laid out like one image of N=K, channels=Cg
        split_index(i, cl, g.Cg(), T, R, S, k, cin, t, r, s);
        const int c = (k / g.Kg()) * g.Cg() + cin;
        float sum = 0.0f;
        for (int n = 0; n < N; ++n)
            for (int o = 0; o < O; ++o) {
                const int d = o * str_d - pad_d + t * dil_d;
                if (d < 0 || d >= D) continue;
                for (int p = 0; p < P; ++p) {
                    const int h = p * str_h - pad_h + r * dil_h;
                    if (h < 0 || h >= H) continue;
                    for (int q = 0; q < Q; ++q) {
                        const int ww = q * str_w - pad_w + s * dil_w;
                        if (ww < 0 || ww >= W) continue;
                        sum += dy[g.y_index(cl, n, k, o, p, q)] * x[g.x_index(cl, n, c, d, h, ww)];
                    }
                }
            }
        dw[i] = blend_value(sum, alpha, beta, dw + i);
    }
}

// ---------------------------------------------------------------------------------------------
// im2col_gemm helpers
// ---------------------------------------------------------------------------------------------

// col (N*O*P*Q, Cg*T*R*S) for one group: row = output pixel, column = filter tap in the filters'
// storage order, so the filters of the group are the (Kg, Cg*T*R*S) row-major matrix that multiplies it.
extern "C" __global__ void convolution_im2col(const float* __restrict__ x, float* col, int group, CONV_GEOM_ARGS,
                                              int channels_last)
{
    const ConvGeom g = CONV_GEOM;
    const bool cl = channels_last != 0;
    const int depth = g.Cg() * g.TRS();
    const long long total = (long long)N * g.OPQ() * depth;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long row = i / depth;
        const int k = (int)(i - row * depth);
        const int n = (int)(row / g.OPQ());
        const int opq = (int)(row - (long long)n * g.OPQ());
        const int o = opq / (P * Q), p = (opq / Q) % P, q = opq % Q;
        const int4 tap = cl ? filter_tap<true>(g, k, g.Cg()) : filter_tap<false>(g, k, g.Cg());
        const int d = o * str_d - pad_d + tap.y, h = p * str_h - pad_h + tap.z, ww = q * str_w - pad_w + tap.w;
        const bool in = d >= 0 && d < D && h >= 0 && h < H && ww >= 0 && ww < W;
        col[i] = in ? x[g.x_index(cl, n, group * g.Cg() + tap.x, d, h, ww)] : 0.0f;
    }
}

// dx (this group's channels) = sum over the taps that read each input pixel of col (N*OPQ, Cg*TRS).
extern "C" __global__ void convolution_col2im(const float* __restrict__ col, float* dx, int group, CONV_GEOM_ARGS,
                                              float alpha, float beta, int channels_last)
{
    const ConvGeom g = CONV_GEOM;
    const bool cl = channels_last != 0;
    const int depth = g.Cg() * g.TRS();
    const long long total = (long long)N * g.Cg() * g.DHW();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        // i enumerates (n, cin, d, h, w) channels-first; only the write index depends on the layout
        const int w_ = (int)(i % W), h = (int)((i / W) % H), d = (int)((i / ((long long)W * H)) % D);
        const long long nc = i / g.DHW();
        const int cin = (int)(nc % g.Cg()), n = (int)(nc / g.Cg());
        float sum = 0.0f;
        for (int t = 0; t < T; ++t) {
            const int on = d + pad_d - t * dil_d;
            if (on < 0 || on % str_d != 0 || on / str_d >= O) continue;
            for (int r = 0; r < R; ++r) {
                const int pn = h + pad_h - r * dil_h;
                if (pn < 0 || pn % str_h != 0 || pn / str_h >= P) continue;
                for (int s = 0; s < S; ++s) {
                    const int qn = w_ + pad_w - s * dil_w;
                    if (qn < 0 || qn % str_w != 0 || qn / str_w >= Q) continue;
                    const long long row = (long long)n * g.OPQ() + ((on / str_d) * P + pn / str_h) * Q + qn / str_w;
                    const int k = cl ? ((t * R + r) * S + s) * g.Cg() + cin : cin * g.TRS() + (t * R + r) * S + s;
                    sum += col[row * depth + k];
                }
            }
        }
        const long long idx = g.x_index(cl, n, group * g.Cg() + cin, d, h, w_);
        dx[idx] = blend_value(sum, alpha, beta, dx + idx);
    }
}

// y = alpha * bias[k] + beta * y: prepares y so that a GEMM can then add alpha * conv with beta = 1.
extern "C" __global__ void convolution_bias_blend(float* y, const float* __restrict__ bias, long long total,
                                                  int K, int spatial, float alpha, float beta, int channels_last)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int k = channels_last ? (int)(i % K) : (int)((i / spatial) % K);
        y[i] = blend_value(bias[k], alpha, beta, y + i);
    }
}

// ---------------------------------------------------------------------------------------------
// Bias gradient, channels-first: db[k] = sum over n and pixels of dy. One block per channel, a fixed-order
// tree reduction in shared memory (deterministic). Channels-last: convolution_backward_bias_nhwc below.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void convolution_backward_bias(const float* __restrict__ dy, float* db, int N, int K,
                                                     int spatial, float alpha, float beta)
{
    __shared__ float partial[256];
    const int k = blockIdx.x;
    const long long count = (long long)N * spatial;
    float sum = 0.0f;
    for (long long i = threadIdx.x; i < count; i += blockDim.x) {
        const long long n = i / spatial, s = i - n * spatial;
        sum += dy[(n * K + k) * spatial + s];
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[k] = blend_value(partial[0], alpha, beta, db + k);
}

// Bias gradient, channels-last (dy (rows, K) row-major: NHWC, and nn.Linear's (tokens, out_features)):
// column sums. The kernel above walks each channel's column with a stride of K; here a block of 32 x 8
// threads covers 32 adjacent channels (one coalesced row segment per warp) and 8 rows at a time, over a
// chunk of rows; the chunks' fp32 sums go to partial[chunk][K], and convolution_backward_bias_finish adds
// them in order (deterministic) and writes db in out_kind's type (the data's, or float32 for 16-bit data: an
// autocast Linear's float32 bias, whose gradient needs no cast then). kind, out_kind: 0 float32, 1 float16, 2 bfloat16.
// One element of 16-bit or float32 storage as fp32 (half_load of elementwise_common.cuh for kinds 1, 2).
__device__ __forceinline__ float load_kind(const void* p, long long i, int kind)
{
    return kind == 0 ? static_cast<const float*>(p)[i] : half_load(static_cast<const unsigned short*>(p), i, kind);
}

// The last block of a column tile to finish writes db (when `arrivals` is given: one launch in all): it adds
// the chunks' partial sums in chunk order, what convolution_backward_bias_finish does in a second launch, so
// both give the same bits. Blocks count themselves in arrivals[blockIdx.x] after a fence that makes their
// partial sums visible (the threadFenceReduction pattern); the last resets the count for the next launch, so
// the counters stay zero between launches and a CUDA graph can replay it.
__device__ __forceinline__ void bias_finish_column(const float* partial, int chunks, int K, int k, void* db,
                                                   float alpha, float beta, int kind)
{
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) sum += __ldcg(partial + (long long)c * K + k);
    float v = alpha * sum;
    if (beta != 0.0f) v += beta * load_kind(db, k, kind);
    if (kind == 0)
        static_cast<float*>(db)[k] = v;
    else
        half_store(static_cast<unsigned short*>(db), k, v, kind);
}

extern "C" __global__ void __launch_bounds__(256) convolution_backward_bias_nhwc(
    const void* __restrict__ dy, float* __restrict__ partial, long long rows, int K, long long rows_per_chunk, int kind,
    unsigned int* arrivals, void* db, float alpha, float beta, int out_kind)
{
    __shared__ float part[8][33];
    __shared__ bool last;
    const int k = blockIdx.x * 32 + threadIdx.x;
    const long long r0 = blockIdx.y * rows_per_chunk;
    const long long r1 = min(rows, r0 + rows_per_chunk);
    float sum = 0.0f;
    if (k < K)
        for (long long r = r0 + threadIdx.y; r < r1; r += 8) sum += load_kind(dy, r * K + k, kind);
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && k < K) {
        float total = 0.0f;
#pragma unroll
        for (int y = 0; y < 8; ++y) total += part[y][threadIdx.x];
        partial[blockIdx.y * (long long)K + k] = total;
    }
    if (arrivals == nullptr) return;          // convolution_backward_bias_finish follows
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) last = atomicAdd(arrivals + blockIdx.x, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.y == 0 && k < K) bias_finish_column(partial, gridDim.y, K, k, db, alpha, beta, out_kind);
    if (threadIdx.x == 0 && threadIdx.y == 0) arrivals[blockIdx.x] = 0u;
}

extern "C" __global__ void convolution_backward_bias_finish(const float* __restrict__ partial, int chunks, int K,
                                                            void* db, float alpha, float beta, int kind)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < K) bias_finish_column(partial, chunks, K, k, db, alpha, beta, kind);
}

// ---------------------------------------------------------------------------------------------
// winograd F(2x2, 3x3), 2-D, groups = 1. Tiles: 4x4 input windows with stride 2, one per 2x2 output
// block; tile index = (n * tiles_h + th) * tiles_w + tw. Transformed data are 16 matrices:
//     U[xi] (Kout, Cin) filters,  V[xi] (Cin, tiles) input,  M[xi] = U[xi] V[xi] (Kout, tiles).
// ---------------------------------------------------------------------------------------------

// U = G g G^T. flip != 0 builds the filters of backward-data: out channel a = c, in channel b = k,
// g[r][s] = w[k][c][2-r][2-s]. w is (K, C, 3, 3) or (K, 3, 3, C).
//
// A backward-data can also reuse the forward's U (the launcher's `transformed_filter`, kept by the framework
// from the forward to the backward of one step). Rotating g by 180 degrees reverses its rows and columns, and G
// maps a reversed column to a reversed column with its middle two rows in place: G rev(f) = Pi G f, Pi the
// permutation that swaps positions 0 and 3 of 4. So G rot(g) G^T = Pi (G g G^T) Pi^T: the flipped filter at
// tile position (r, s) is the forward's at (pi(r), pi(s)), with k and c swapped (the GEMM reads U transposed).
// The input and output transforms then store and load their 16 matrices at pi of their positions (`permute`),
// so the 16 GEMMs pair each V with the U of its own batch index.
extern "C" __global__ void convolution_winograd_filter_transform(const float* __restrict__ w, float* U, int K,
                                                                 int C, int flip, int channels_last)
{
    const int a_count = flip ? C : K, b_count = flip ? K : C;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a_count * b_count) return;
    const int a = i / b_count, b = i - a * b_count;
    const int k = flip ? b : a, c = flip ? a : b;
    float f[3][3];
    for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) {
            const int rr = flip ? 2 - r : r, ss = flip ? 2 - s : s;
            f[r][s] = channels_last ? w[((k * 3 + rr) * 3 + ss) * C + c] : w[(k * C + c) * 9 + rr * 3 + ss];
        }
    float gf[4][3];  // G f, G = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]]
    for (int s = 0; s < 3; ++s) {
        gf[0][s] = f[0][s];
        gf[1][s] = 0.5f * (f[0][s] + f[1][s] + f[2][s]);
        gf[2][s] = 0.5f * (f[0][s] - f[1][s] + f[2][s]);
        gf[3][s] = f[2][s];
    }
    const long long plane = (long long)a_count * b_count;
    for (int r = 0; r < 4; ++r) {  // (G f) G^T
        const float u[4] = {gf[r][0], 0.5f * (gf[r][0] + gf[r][1] + gf[r][2]),
                            0.5f * (gf[r][0] - gf[r][1] + gf[r][2]), gf[r][2]};
        for (int s = 0; s < 4; ++s) U[(r * 4 + s) * plane + i] = u[s];
    }
}

// V = B^T d B for every (channel, tile). One thread per (channel, tile): consecutive threads take
// consecutive tiles, so the 16 writes are coalesced.
__device__ __forceinline__ int winograd_position(int r, int s, int permute)
{
    if (permute) {  // pi: 0 <-> 3, 1 and 2 stay
        r = (r == 0) ? 3 : (r == 3 ? 0 : r);
        s = (s == 0) ? 3 : (s == 3 ? 0 : s);
    }
    return r * 4 + s;
}

extern "C" __global__ void convolution_winograd_input_transform(const float* __restrict__ x, float* V, int N,
                                                                int C, int H, int W, int pad_h, int pad_w,
                                                                int tiles_h, int tiles_w, int channels_last,
                                                                int permute)
{
    const long long tiles = (long long)N * tiles_h * tiles_w;
    const long long total = tiles * C;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i / tiles);
        const long long tile = i - c * tiles;
        const int tw = (int)(tile % tiles_w), th = (int)((tile / tiles_w) % tiles_h), n = (int)(tile / ((long long)tiles_w * tiles_h));
        float d[4][4];
        for (int r = 0; r < 4; ++r)
            for (int s = 0; s < 4; ++s) {
                const int h = 2 * th - pad_h + r, w = 2 * tw - pad_w + s;
                const bool in = h >= 0 && h < H && w >= 0 && w < W;
                const long long idx = channels_last ? (((long long)n * H + h) * W + w) * C + c
                                                    : (((long long)n * C + c) * H + h) * W + w;
                d[r][s] = in ? x[idx] : 0.0f;
            }
        float bd[4][4];  // B^T d, B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]
        for (int s = 0; s < 4; ++s) {
            bd[0][s] = d[0][s] - d[2][s];
            bd[1][s] = d[1][s] + d[2][s];
            bd[2][s] = d[2][s] - d[1][s];
            bd[3][s] = d[1][s] - d[3][s];
        }
        for (int r = 0; r < 4; ++r) {  // (B^T d) B
            const float v[4] = {bd[r][0] - bd[r][2], bd[r][1] + bd[r][2], bd[r][2] - bd[r][1], bd[r][1] - bd[r][3]};
            for (int s = 0; s < 4; ++s) V[winograd_position(r, s, permute) * total + i] = v[s];
        }
    }
}

// y block (2x2) = A^T m A, plus bias, blended. One thread per (output channel, tile).
extern "C" __global__ void convolution_winograd_output_transform(const float* __restrict__ Mw, float* y,
                                                                 const float* __restrict__ bias, int N, int K,
                                                                 int P, int Q, int tiles_h, int tiles_w,
                                                                 float alpha, float beta, int channels_last,
                                                                 int permute)
{
    const long long tiles = (long long)N * tiles_h * tiles_w;
    const long long total = tiles * K;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int k = (int)(i / tiles);
        const long long tile = i - k * tiles;
        const int tw = (int)(tile % tiles_w), th = (int)((tile / tiles_w) % tiles_h), n = (int)(tile / ((long long)tiles_w * tiles_h));
        float m[4][4];
        for (int r = 0; r < 4; ++r)
            for (int s = 0; s < 4; ++s) m[r][s] = Mw[winograd_position(r, s, permute) * total + i];
        float am[2][4];  // A^T m, A^T = [[1,1,1,0],[0,1,-1,-1]]
        for (int s = 0; s < 4; ++s) {
            am[0][s] = m[0][s] + m[1][s] + m[2][s];
            am[1][s] = m[1][s] - m[2][s] - m[3][s];
        }
        const float b = bias != nullptr ? bias[k] : 0.0f;
        for (int r = 0; r < 2; ++r) {
            const float out[2] = {am[r][0] + am[r][1] + am[r][2], am[r][1] - am[r][2] - am[r][3]};
            for (int s = 0; s < 2; ++s) {
                const int p = 2 * th + r, q = 2 * tw + s;
                if (p >= P || q >= Q) continue;
                const long long idx = channels_last ? (((long long)n * P + p) * Q + q) * K + k
                                                    : (((long long)n * K + k) * P + p) * Q + q;
                y[idx] = conv_forward_activation(blend_value(out[s] + b, alpha, beta, y + idx));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small-channel kernels: the first layers of a network (C = 1..4 input channels, C*R*S <= 160,
// groups = 1). The GEMM mappings waste most of their tiles there (a reduction of 25 or 27 taps in
// steps of 8, or 1-3 GEMM columns in a 32-wide tile) and spend their time on index arithmetic and
// scattered stores, so two directions get a dedicated kernel, variants of `direct`:
//   forward          output tile in registers, input tile with halo + weights in shared memory
//   backward_filter  a GEMM M = K, N = C*R*S, reduction over output pixels in chunks of 32
//                    lowered into shared memory, split over blocks, deterministic second pass
// (A stride-phase gather kernel for backward_data was measured slower than im2col_gemm on the
// benchmark's first layers and removed; see benchmarks/results/gpu_conv.md.)
// ---------------------------------------------------------------------------------------------

constexpr int SC_THREADS = 256;
constexpr int FILL_BATCH = 8;  // global loads in flight per thread while staging shared memory

// Stage `count` values into shared memory: store(i, load(i)) for i < count, spread over THREADS
// threads. The loads of FILL_BATCH elements are issued before any store, so a thread waits for one
// memory latency per batch instead of one per element (a plain loop would serialise them).
template <int THREADS, class Load, class Store>
__device__ __forceinline__ void batched_fill(int count, Load load, Store store)
{
    for (int base = threadIdx.x; base < count; base += THREADS * FILL_BATCH) {
        float v[FILL_BATCH];
#pragma unroll
        for (int b = 0; b < FILL_BATCH; ++b) {
            const int i = base + b * THREADS;
            v[b] = i < count ? load(i) : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < FILL_BATCH; ++b) {
            const int i = base + b * THREADS;
            if (i < count) store(i, v[b]);
        }
    }
}
constexpr int SC_TQ = 32;                         // output columns per block: one per lane
constexpr int SC_ROWS = 4;                        // output rows per thread
constexpr int SC_ROW_GROUPS = 2;                  // warps stacked along the rows
constexpr int SC_KT = 8;                          // output channels per thread
constexpr int SC_K_GROUPS = 4;                    // warps side by side along the channels
constexpr int SC_TP = SC_ROWS * SC_ROW_GROUPS;    // 8 output rows per block
constexpr int SC_KB = SC_KT * SC_K_GROUPS;        // 32 output channels per block
constexpr int SC_WS = SC_KB + 4;                  // padded weight row: float4-aligned, fewer store conflicts
constexpr int SC_MAX_CRS = 160;                   // C*R*S limit (launcher checks)
constexpr int SC_MAX_INPUT_TILE = 6144;           // floats of input tile with halo (launcher checks)

// Forward, small C, 1-D/2-D (T = 1), groups = 1.
// Block: one image n, an 8 x 32 tile of output pixels (rows p0.., columns q0..), 32 output channels
// from k0. Shared memory holds that block's weights, w_s[(c, r, s)][k] (k fastest, so a thread's 8
// channels are two float4 broadcasts: every lane of a warp reads the same weights), and the input
// tile with its halo, zero-filled outside the image, so the inner loop has no bounds checks.
// Thread: lane = output column, warp = (row group, channel group); it accumulates 4 rows x 8
// channels = 32 outputs in registers: per filter tap, 4 shared loads of input (lanes read
// neighbouring columns: conflict-free at stride 1) and 2 float4 weight loads feed 32 FMAs.
// Stores: a warp writes 32 consecutive q of one (k, p) row in NCHW (coalesced).
template <bool CL>
__device__ __forceinline__ void fprop_small_c(const float* __restrict__ x, const float* __restrict__ w,
                                              const float* __restrict__ bias, float* y, const ConvGeom& g,
                                              float alpha, float beta)
{
    __shared__ __align__(16) float w_s[SC_MAX_CRS * SC_WS];
    __shared__ float in_s[SC_MAX_INPUT_TILE];
    const int tiles_q = (g.Q + SC_TQ - 1) / SC_TQ;
    const int p0 = (blockIdx.x / tiles_q) * SC_TP, q0 = (blockIdx.x % tiles_q) * SC_TQ;
    const int k0 = blockIdx.y * SC_KB;
    const int n = blockIdx.z;
    const int C = g.C, R = g.R, S = g.S, RS = g.R * g.S;
    const int crs_count = C * RS;
    const int sh = g.str_h, sw = g.str_w, dh = g.dil_h, dw = g.dil_w;
    const int tile_h = (SC_TP - 1) * sh + (R - 1) * dh + 1;
    const int tile_w = (SC_TQ - 1) * sw + (S - 1) * dw + 1;

    // Weights in their storage order (tap index crs = (c, r, s) in NCHW, (r, s, c) in NHWC: w is a
    // (K, C*R*S) matrix in both); consecutive threads read consecutive taps (coalesced).
    batched_fill<SC_THREADS>(
        crs_count * SC_KB,
        [&](int i) {
            const int kk = i / crs_count, crs = i - kk * crs_count;
            return k0 + kk < g.K ? __ldg(w + (long long)(k0 + kk) * crs_count + crs) : 0.0f;
        },
        [&](int i, float v) {
            const int kk = i / crs_count, crs = i - kk * crs_count;
            w_s[crs * SC_WS + kk] = v;
        });
    const int h_base = p0 * sh - g.pad_h, w_base = q0 * sw - g.pad_w;
    // input tile element i -> (c, hh, ww), channel fastest in NHWC (the order of x in memory)
    auto tile_coords = [&](int i, int& c, int& hh, int& ww) {
        if (CL) {
            c = i % C;
            const int hw = i / C;
            hh = hw / tile_w;
            ww = hw - hh * tile_w;
        } else {
            ww = i % tile_w;
            const int ch = i / tile_w;
            hh = ch % tile_h;
            c = ch / tile_h;
        }
    };
    batched_fill<SC_THREADS>(
        C * tile_h * tile_w,
        [&](int i) {
            int c, hh, ww;
            tile_coords(i, c, hh, ww);
            const int h = h_base + hh, wc = w_base + ww;
            const bool in = (unsigned)h < (unsigned)g.H && (unsigned)wc < (unsigned)g.W;
            return in ? __ldg(x + g.x_index(CL, n, c, 0, h, wc)) : 0.0f;
        },
        [&](int i, float v) {
            int c, hh, ww;
            tile_coords(i, c, hh, ww);
            in_s[(c * tile_h + hh) * tile_w + ww] = v;
        });
    __syncthreads();

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int row_group = warp % SC_ROW_GROUPS, k_group = warp / SC_ROW_GROUPS;
    float acc[SC_ROWS][SC_KT];
#pragma unroll
    for (int i = 0; i < SC_ROWS; ++i)
#pragma unroll
        for (int j = 0; j < SC_KT; ++j) acc[i][j] = 0.0f;

    const float* in_thread = in_s + row_group * SC_ROWS * sh * tile_w + lane * sw;
    const float* w_thread = w_s + k_group * SC_KT;
    const int row_step = sh * tile_w;
    const int w_s_step = (CL ? C : 1) * SC_WS;  // from tap s to s + 1 in w_s
    for (int c = 0; c < C; ++c) {
        for (int r = 0; r < R; ++r) {
            const float* in_row = in_thread + (c * tile_h + r * dh) * tile_w;
            const float* w_row = w_thread + (CL ? r * S * C + c : c * RS + r * S) * SC_WS;
            for (int s = 0; s < S; ++s) {
                float v[SC_ROWS];
#pragma unroll
                for (int i = 0; i < SC_ROWS; ++i) v[i] = in_row[i * row_step + s * dw];
                const float4 wa = *reinterpret_cast<const float4*>(w_row + s * w_s_step);
                const float4 wb = *reinterpret_cast<const float4*>(w_row + s * w_s_step + 4);
                const float wk[SC_KT] = {wa.x, wa.y, wa.z, wa.w, wb.x, wb.y, wb.z, wb.w};
#pragma unroll
                for (int i = 0; i < SC_ROWS; ++i)
#pragma unroll
                    for (int j = 0; j < SC_KT; ++j) acc[i][j] = fmaf(v[i], wk[j], acc[i][j]);
            }
        }
    }

    const int q = q0 + lane;
    if (q >= g.Q) return;
#pragma unroll
    for (int i = 0; i < SC_ROWS; ++i) {
        const int p = p0 + row_group * SC_ROWS + i;
        if (p >= g.P) continue;
#pragma unroll
        for (int j = 0; j < SC_KT; ++j) {
            const int k = k0 + k_group * SC_KT + j;
            if (k >= g.K) continue;
            const long long idx = g.y_index(CL, n, k, 0, p, q);
            const float value = acc[i][j] + (bias != nullptr ? __ldg(bias + k) : 0.0f);
            y[idx] = conv_forward_activation(blend_value(value, alpha, beta, y + idx));
        }
    }
}

#define SMALL_C_FPROP_KERNEL(name, cl)                                                                       \
    extern "C" __global__ void __launch_bounds__(SC_THREADS, 2)                                             \
        name(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,      \
             float* y, CONV_GEOM_ARGS, float alpha, float beta)                                             \
    {                                                                                                       \
        const ConvGeom g = CONV_GEOM;                                                                       \
        fprop_small_c<cl>(x, w, bias, y, g, alpha, beta);                                                   \
    }
SMALL_C_FPROP_KERNEL(convolution_forward_direct_small_c_nchw, false)
SMALL_C_FPROP_KERNEL(convolution_forward_direct_small_c_nhwc, true)

// Backward filter, small C (C*T*R*S <= 160), groups = 1: the wgrad GEMM
//     dw (K, CRS) = dy (K, N*OPQ) x im2col(x) (N*OPQ, CRS)
// with the reduction over output pixels taken 32 at a time. Per chunk the block stages dy for its
// KB output channels, dy_s[pixel][k], and the chunk's lowered input, x_s[pixel][tap], gathered
// from x with a tap table (taps_s) and a pixel table, zero outside the image. Thread: 4 output
// channels (one float4 of dy_s) x CT taps (CT/2 float2 of x_s, tap = 2*cg + 2*NCG*j + e: a warp
// reads 16 or 32 consecutive float2, conflict-free) -> 4*CT FMAs per pixel from registers.
// Split-K: grid x = slices of the pixel chunks; each slice writes its raw sums to
// partial[slice][k][tap] and convolution_splitk_reduce adds the slices in a fixed order
// (deterministic); with one slice the block blends into dw directly.
constexpr int SW_PIX = 32;       // output pixels per stage
// C*T*R*S <= 160 (SMALL_C_MAX_TAPS of the launcher) and <= NCG * CT of the variant launched

template <bool CL, int KB, int CT>
__device__ __forceinline__ void wgrad_small_c(const float* __restrict__ x, const float* __restrict__ dy, float* dw,
                                              float* partial, int chunks_per_slice, const ConvGeom& g, float alpha,
                                              float beta)
{
    constexpr int NKG = KB / 4;                // groups of 4 output channels
    constexpr int NCG = SC_THREADS / NKG;      // tap groups
    constexpr int CRS_PAD = NCG * CT;          // taps covered by the block (>= C*T*R*S)
    constexpr int XS = CRS_PAD + 4;            // x_s row: 8-byte aligned, spreads the pixel-major stores
    constexpr int DS = KB + 4;                 // dy_s row: 16-byte aligned
    static_assert(CT % 2 == 0, "CT must be even (float2 reads)");
    __shared__ __align__(16) float x_s[SW_PIX * XS];
    __shared__ __align__(16) float dy_s[SW_PIX * DS];
    __shared__ int4 taps_s[CRS_PAD];
    __shared__ long long pix_x[SW_PIX], pix_dy[SW_PIX];
    __shared__ int pix_d[SW_PIX], pix_h[SW_PIX], pix_w[SW_PIX];

    const int crs_count = g.C * g.TRS();
    const int k0 = blockIdx.y * KB;
    const int slice = blockIdx.x;
    const long long total_pix = (long long)g.N * g.OPQ();
    const long long chunk_begin = (long long)slice * chunks_per_slice;
    const long long chunk_end = min(chunk_begin + chunks_per_slice, (total_pix + SW_PIX - 1) / SW_PIX);

    for (int i = threadIdx.x; i < CRS_PAD; i += SC_THREADS)
        taps_s[i] = i < crs_count ? filter_tap<CL>(g, i, g.C) : make_int4(0, 0, 0, 0);
    // taps beyond crs_count are never gathered: zero them once so their (discarded) sums stay finite
    for (int i = threadIdx.x; i < SW_PIX * XS; i += SC_THREADS) x_s[i] = 0.0f;

    const int kg = threadIdx.x / NCG, cg = threadIdx.x % NCG;
    float acc[4][CT];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < CT; ++j) acc[i][j] = 0.0f;

    for (long long chunk = chunk_begin; chunk < chunk_end; ++chunk) {
        const long long m0 = chunk * SW_PIX;
        __syncthreads();  // the previous chunk is consumed (and the tables above are written)
        if (threadIdx.x < SW_PIX) {
            const long long m = m0 + threadIdx.x;
            if (m < total_pix) {
                const int n = (int)(m / g.OPQ()), opq = (int)(m - (long long)n * g.OPQ());
                const int o = opq / (g.P * g.Q), pq = opq - o * g.P * g.Q, p = pq / g.Q, q = pq - p * g.Q;
                pix_d[threadIdx.x] = o * g.str_d - g.pad_d;
                pix_h[threadIdx.x] = p * g.str_h - g.pad_h;
                pix_w[threadIdx.x] = q * g.str_w - g.pad_w;
                pix_x[threadIdx.x] = (long long)n * g.C * g.DHW();
                pix_dy[threadIdx.x] = CL ? m * g.K : (long long)n * g.K * g.OPQ() + opq;
            } else {
                pix_d[threadIdx.x] = -(1 << 29);  // every tap falls outside: the pixel contributes 0
                pix_h[threadIdx.x] = 0;
                pix_w[threadIdx.x] = 0;
                pix_x[threadIdx.x] = 0;
                pix_dy[threadIdx.x] = -1;
            }
        }
        __syncthreads();
        // NCHW: pixel fastest (dy is contiguous along pixels); NHWC: channel fastest
        batched_fill<SC_THREADS>(
            SW_PIX * KB,
            [&](int e) {
                const int pix = CL ? e / KB : e % SW_PIX, kk = CL ? e % KB : e / SW_PIX;
                const int k = k0 + kk;
                const long long base = pix_dy[pix];
                return (base >= 0 && k < g.K) ? __ldg(dy + base + (CL ? k : (long long)k * g.OPQ())) : 0.0f;
            },
            [&](int e, float v) {
                const int pix = CL ? e / KB : e % SW_PIX, kk = CL ? e % KB : e / SW_PIX;
                dy_s[pix * DS + kk] = v;
            });
        batched_fill<SC_THREADS>(
            SW_PIX * crs_count,
            [&](int e) {
                const int pix = e % SW_PIX, crs = e / SW_PIX;
                const int4 tap = taps_s[crs];
                const int d = pix_d[pix] + tap.y, h = pix_h[pix] + tap.z, wc = pix_w[pix] + tap.w;
                const bool in = (unsigned)d < (unsigned)g.D && (unsigned)h < (unsigned)g.H && (unsigned)wc < (unsigned)g.W;
                const int pixel = (d * g.H + h) * g.W + wc;
                const long long idx =
                    pix_x[pix] + (CL ? (long long)pixel * g.C + tap.x : (long long)tap.x * g.DHW() + pixel);
                return in ? __ldg(x + idx) : 0.0f;
            },
            [&](int e, float v) { x_s[(e % SW_PIX) * XS + e / SW_PIX] = v; });
        __syncthreads();
#pragma unroll 4
        for (int pix = 0; pix < SW_PIX; ++pix) {
            const float4 d4 = *reinterpret_cast<const float4*>(&dy_s[pix * DS + kg * 4]);
            const float dv[4] = {d4.x, d4.y, d4.z, d4.w};
            float xv[CT];
#pragma unroll
            for (int j = 0; j < CT / 2; ++j) {
                const float2 t = *reinterpret_cast<const float2*>(&x_s[pix * XS + 2 * cg + 2 * NCG * j]);
                xv[2 * j] = t.x;
                xv[2 * j + 1] = t.y;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < CT; ++j) acc[i][j] = fmaf(dv[i], xv[j], acc[i][j]);
        }
    }

    float* part = partial == nullptr ? nullptr : partial + (long long)slice * g.K * crs_count;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int k = k0 + kg * 4 + i;
        if (k >= g.K) continue;
#pragma unroll
        for (int j = 0; j < CT; ++j) {
            const int crs = 2 * cg + 2 * NCG * (j / 2) + (j % 2);
            if (crs >= crs_count) continue;
            const long long idx = (long long)k * crs_count + crs;
            if (part != nullptr) part[idx] = acc[i][j];
            else dw[idx] = blend_value(acc[i][j], alpha, beta, dw + idx);
        }
    }
}

#define SMALL_C_WGRAD_KERNEL(name, cl, kb, ct)                                                               \
    extern "C" __global__ void __launch_bounds__(SC_THREADS, 2)                                             \
        name(const float* __restrict__ x, const float* __restrict__ dy, float* dw, float* partial,          \
             int chunks_per_slice, CONV_GEOM_ARGS, float alpha, float beta)                                 \
    {                                                                                                       \
        const ConvGeom g = CONV_GEOM;                                                                       \
        wgrad_small_c<cl, kb, ct>(x, dy, dw, partial, chunks_per_slice, g, alpha, beta);                    \
    }
#define SMALL_C_WGRAD_KERNELS(kb, ct)                                                                        \
    SMALL_C_WGRAD_KERNEL(convolution_backward_filter_direct_small_c_nchw_kb##kb##_ct##ct, false, kb, ct) \
    SMALL_C_WGRAD_KERNEL(convolution_backward_filter_direct_small_c_nhwc_kb##kb##_ct##ct, true, kb, ct)
SMALL_C_WGRAD_KERNELS(32, 2)   // up to  64 taps
SMALL_C_WGRAD_KERNELS(32, 6)   // up to 192 taps
SMALL_C_WGRAD_KERNELS(64, 2)   // up to  32 taps
SMALL_C_WGRAD_KERNELS(64, 4)   // up to  64 taps
SMALL_C_WGRAD_KERNELS(64, 10)  // up to 160 taps

// Sum the split-K slices of a small weight gradient: out[i] = alpha * sum_s partial[s][i] + beta * out[i].
// Block of 256 = 32 consecutive outputs x 8 slice lanes: thread (col, part) sums slices part,
// part+8, ... (a warp reads 32 consecutive floats of one slice), then one thread per output adds the
// 8 lane sums in a fixed order. Deterministic, and with many blocks even when the output is small.
extern "C" __global__ void convolution_splitk_reduce(const float* __restrict__ partial, int splits, long long total,
                                                     float alpha, float beta, float* out)
{
    __shared__ float sums[8][33];
    const int col = threadIdx.x % 32, part = threadIdx.x / 32;
    const long long i = blockIdx.x * 32LL + col;
    float s = 0.0f;
    if (i < total)
        for (int sp = part; sp < splits; sp += 8) s += partial[(long long)sp * total + i];
    sums[part][col] = s;
    __syncthreads();
    if (part == 0 && i < total) {
        float t = 0.0f;
#pragma unroll
        for (int p = 0; p < 8; ++p) t += sums[p][col];
        out[i] = blend_value(t, alpha, beta, out + i);
    }
}
