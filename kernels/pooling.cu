// Pooling: max and average (padding counted or not) over 1, 2 or 3 spatial dims, and adaptive
// average pooling. Every problem is run as 3-D: the launcher gives 1-D and 2-D inputs unit
// leading spatial dims (D = 1, kernel 1, stride 1, padding 0), which cost nothing at run time.
//
// Forward: one thread per OUTPUT element, grid-stride. The thread decomposes its flat index into
// (n, c, od, oh, ow) in the array's own order, so adjacent threads write adjacent outputs and read
// neighbouring inputs: in NCHW neighbours along W, in NHWC neighbours along C (coalesced in both).
// It scans its window in (d, h, w) order and keeps the first maximum (strict >), or sums.
//
// Backward: one thread per INPUT element (a gather, not a scatter): the thread finds the outputs
// whose windows cover it (a small range per dim) and adds their contributions. No atomics, so the
// result is deterministic, and no zero-fill pass is needed before the alpha/beta epilogue.
// For max pooling the thread recomputes each covering window's argmax from x, first maximum in
// window order wins (as PyTorch), instead of reading an index tensor saved by the forward pass:
// nothing extra is written to DRAM, the forward stays a pure read-x / write-y kernel, and the
// result does not depend on y (which an alpha/beta blend may have changed). The cost is a window
// re-scan per covering output, cheap for the usual small, non-overlapping windows.
//
// Average divisor (PyTorch): include_pad counts the window clipped to the padded input (the cells
// that ceil mode adds beyond the right padding never count); exclude_pad counts real cells only.
//
// Dilation (max pooling only, as PyTorch): a window's taps are `dilation` apart, start + t * dil for
// t in [0, k); the loops walk the taps that fall inside the input. With dilation 1 this is the
// plain window. The backward's covering range uses the window's extent dil * (k - 1) + 1; an output
// in that range whose taps skip this input simply never names it as its argmax.
//
// Indices (max_pooling_forward_with_indices, PyTorch's return_indices=True): the same forward,
// also writing each argmax as an int64 flat position within the (n, c) plane. Why does cuDNN (and
// the plain forward and backward here) recompute the argmax instead of storing it? The index array
// is as large as y in int64, twice y's bytes in float32: storing it makes the forward write 3x the
// bytes and the backward read them, and a memory-bound kernel's time is its bytes; the recompute
// re-reads the window from x, which the backward reads anyway and which is mostly cache-resident for
// small windows. Indices are written only when the user asks for them (for max_unpool), and the
// gradient never reads them. Measured on the H200 (benchmarks/results/gpu_pooling_indices.md and
// gpu_primitives.md, 2x2 / stride 2, 1024x64x32x32): the argument holds only for a backward kernel
// that streams. The 2x2 fast path recomputes at 79% of copy bandwidth: forward 0.105 ms + backward
// 0.184 ms, against 0.396 + 0.293 ms for storing int64 indices and scattering dy through them (and
// torch's stored-index backward takes 0.685 ms). The GENERIC backward here, one thread per input
// element searching every window that covers it, reaches 8%: 1.77-2.23 ms, 6-7x the scatter through
// stored indices. So for windows the fast path does not take, storing would win today; the fix
// to make is a generic backward that streams, not a stored index.
//
// Max unpooling (max_unpooling_forward / _backward): one thread per pooled element scatters
// (forward, into a zeroed x) or gathers (backward) through its index. Repeated indices in the
// forward race: one of the writers wins, unspecified which (as PyTorch's CUDA kernel); out-of-range
// indices are skipped (forward) or read as 0 (backward) - the CPU path raises instead.
//
// Index arithmetic: the flat-index decomposition divides by the sizes, and 64-bit division costs
// several times the 32-bit one, so each kernel branches (uniformly) to a 32-bit instantiation when
// the tensor has fewer than 2^31 elements, and to a 64-bit one otherwise.
#include "elementwise_common.cuh"

#define POOL_MAX 0
#define POOL_AVG_INCLUDE_PAD 1
#define POOL_AVG_EXCLUDE_PAD 2

struct PoolShape {
    int N, C, D, H, W;       // input
    int OD, OH, OW;          // output
    int KD, KH, KW;          // window
    int SD, SH, SW;          // stride
    int PD, PH, PW;          // padding (before; after is implied by the output size)
    int channels_last;
    int DD, DH, DW;          // dilation (1 except for dilated max pooling)
};

template <typename Index>
__device__ __forceinline__ Index input_offset(const PoolShape& s, Index n, Index c, Index d, Index h, Index w)
{
    return s.channels_last ? (((n * s.D + d) * s.H + h) * s.W + w) * s.C + c
                           : (((n * s.C + c) * s.D + d) * s.H + h) * s.W + w;
}

template <typename Index>
__device__ __forceinline__ Index output_offset(const PoolShape& s, Index n, Index c, Index d, Index h, Index w)
{
    return s.channels_last ? (((n * s.OD + d) * s.OH + h) * s.OW + w) * s.C + c
                           : (((n * s.C + c) * s.OD + d) * s.OH + h) * s.OW + w;
}

// Split a flat index of an (N, C, D, H, W)-sized array stored in the given order.
template <typename Index>
__device__ __forceinline__ void split_index(Index idx, int channels_last, int C, int D, int H, int W, Index& n,
                                            Index& c, Index& d, Index& h, Index& w)
{
    if (channels_last) {
        c = idx % C; idx /= C;
        w = idx % W; idx /= W;
        h = idx % H; idx /= H;
        d = idx % D; n = idx / D;
    } else {
        w = idx % W; idx /= W;
        h = idx % H; idx /= H;
        d = idx % D; idx /= D;
        c = idx % C; n = idx / C;
    }
}

// Window of output position o along one dim: [start, start + k) in padded coordinates; the real
// cells are [max(start, 0), min(start + k, L)); include_pad counts up to min(start + k, L + p).
struct Window {
    int lo, hi, padded_count;
};

__device__ __forceinline__ Window window_of(int o, int k, int s, int p, int L)
{
    const int start = o * s - p;
    Window win;
    win.lo = max(start, 0);
    win.hi = min(start + k, L);
    win.padded_count = min(start + k, L + p) - start;
    return win;
}

// The taps of a dilated window along one dim that fall inside [0, L): t in [t_lo, t_hi), at
// position start + t * dil.
struct Taps {
    int start, t_lo, t_hi;
};

__device__ __forceinline__ Taps taps_of(int o, int k, int s, int p, int dil, int L)
{
    Taps taps;
    taps.start = o * s - p;
    taps.t_lo = taps.start >= 0 ? 0 : (-taps.start + dil - 1) / dil;     // first t with start + t*dil >= 0
    taps.t_hi = L > taps.start ? min(k, (L - taps.start + dil - 1) / dil) : 0;  // first t with pos >= L
    return taps;
}

// The reduction of one output's window. For max, also returns the flat (d, h, w) position of the
// first maximum through `arg` (as d * H * W + h * W + w); where the window holds NaNs, the maximum
// is NaN and `arg` the last NaN in scan order (PyTorch's rule: every NaN replaces the best so far).
template <int KIND, typename Index>
__device__ __forceinline__ float pool_window(const typename Data<KIND>::T* x, const PoolShape& s, int mode, Index n, Index c,
                                             int od, int oh, int ow, int& arg)
{
    if (mode == POOL_MAX) {
        const Taps td = taps_of(od, s.KD, s.SD, s.PD, s.DD, s.D);
        const Taps th = taps_of(oh, s.KH, s.SH, s.PH, s.DH, s.H);
        const Taps tw = taps_of(ow, s.KW, s.SW, s.PW, s.DW, s.W);
        float best = MINIDL_NEG_INF;
        arg = -1;
        for (int i = td.t_lo; i < td.t_hi; ++i)
            for (int j = th.t_lo; j < th.t_hi; ++j)
                for (int l = tw.t_lo; l < tw.t_hi; ++l) {
                    const int d = td.start + i * s.DD, h = th.start + j * s.DH, w = tw.start + l * s.DW;
                    const float v = load_data(x, input_offset<Index>(s, n, c, d, h, w), KIND);
                    if (v > best || v != v || arg < 0) {  // first max; the last NaN wins
                        best = v;
                        arg = (d * s.H + h) * s.W + w;
                    }
                }
        return best;
    }
    const Window wd = window_of(od, s.KD, s.SD, s.PD, s.D);
    const Window wh = window_of(oh, s.KH, s.SH, s.PH, s.H);
    const Window ww = window_of(ow, s.KW, s.SW, s.PW, s.W);
    float sum = 0.0f;
    for (int d = wd.lo; d < wd.hi; ++d)
        for (int h = wh.lo; h < wh.hi; ++h)
            for (int w = ww.lo; w < ww.hi; ++w) sum += load_data(x, input_offset<Index>(s, n, c, d, h, w), KIND);
    const int count = mode == POOL_AVG_INCLUDE_PAD
                          ? wd.padded_count * wh.padded_count * ww.padded_count
                          : (wd.hi - wd.lo) * (wh.hi - wh.lo) * (ww.hi - ww.lo);
    return sum / (float)count;
}

// The output of one element: alpha * r (+ beta * what is there, float32 only: the launcher passes beta = 0 for
// 16-bit data, which it never blends).
__device__ __forceinline__ void put(float* p, long long i, float r, float alpha, float beta) { p[i] = blend(r, p, i, alpha, beta); }
__device__ __forceinline__ void put(unsigned short* p, long long i, float r, float alpha, float, int kind)
{
    half_store(p, i, alpha * r, kind);
}
__device__ __forceinline__ void put(float* p, long long i, float r, float alpha, float beta, int) { put(p, i, r, alpha, beta); }

template <int KIND, typename Index>
__device__ void pooling_forward_impl(const typename Data<KIND>::T* x, typename Data<KIND>::T* y, const PoolShape& s,
                                     int mode, float alpha, float beta)
{
    const Index total = (Index)s.N * s.C * s.OD * s.OH * s.OW;
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        Index n, c, od, oh, ow;
        split_index<Index>(idx, s.channels_last, s.C, s.OD, s.OH, s.OW, n, c, od, oh, ow);
        int arg;
        const float r = pool_window<KIND, Index>(x, s, mode, n, c, (int)od, (int)oh, (int)ow, arg);
        put(y, idx, r, alpha, beta, KIND);
    }
}

// Outputs along one dim whose windows' extent covers input position i: [lo, hi). k is the
// extent dil * (k - 1) + 1 for a dilated window.
__device__ __forceinline__ void covering_outputs(int i, int k, int s, int p, int out_len, int& lo, int& hi)
{
    const int shifted = i + p;  // position in padded coordinates; window o covers [o*s, o*s + k)
    lo = shifted < k ? 0 : (shifted - k) / s + 1;
    hi = min(shifted / s + 1, out_len);
}

template <int KIND, typename Index>
__device__ void pooling_backward_impl(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                      typename Data<KIND>::T* dx, const PoolShape& s, int mode, float alpha, float beta)
{
    const Index total = (Index)s.N * s.C * s.D * s.H * s.W;
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        Index n, c, d, h, w;
        split_index<Index>(idx, s.channels_last, s.C, s.D, s.H, s.W, n, c, d, h, w);
        int od_lo, od_hi, oh_lo, oh_hi, ow_lo, ow_hi;
        covering_outputs((int)d, s.DD * (s.KD - 1) + 1, s.SD, s.PD, s.OD, od_lo, od_hi);
        covering_outputs((int)h, s.DH * (s.KH - 1) + 1, s.SH, s.PH, s.OH, oh_lo, oh_hi);
        covering_outputs((int)w, s.DW * (s.KW - 1) + 1, s.SW, s.PW, s.OW, ow_lo, ow_hi);
        const int me = ((int)d * s.H + (int)h) * s.W + (int)w;

        float grad = 0.0f;
        for (int od = od_lo; od < od_hi; ++od)
            for (int oh = oh_lo; oh < oh_hi; ++oh)
                for (int ow = ow_lo; ow < ow_hi; ++ow) {
                    const float g = load_data(dy, output_offset<Index>(s, n, c, od, oh, ow), KIND);
                    if (mode == POOL_MAX) {
                        int arg;
                        pool_window<KIND, Index>(x, s, mode, n, c, od, oh, ow, arg);
                        if (arg == me) grad += g;
                    } else {
                        const Window wd = window_of(od, s.KD, s.SD, s.PD, s.D);
                        const Window wh = window_of(oh, s.KH, s.SH, s.PH, s.H);
                        const Window ww = window_of(ow, s.KW, s.SW, s.PW, s.W);
                        const int count = mode == POOL_AVG_INCLUDE_PAD
                                              ? wd.padded_count * wh.padded_count * ww.padded_count
                                              : (wd.hi - wd.lo) * (wh.hi - wh.lo) * (ww.hi - ww.lo);
                        grad += g / (float)count;
                    }
                }
        put(dx, idx, grad, alpha, beta, KIND);
    }
}

#define POOL_SHAPE_PARAMS                                                                               \
    int N, int C, int D, int H, int W, int OD, int OH, int OW, int KD, int KH, int KW, int SD, int SH, \
        int SW, int PD, int PH, int PW, int channels_last, int DD, int DH, int DW
#define POOL_SHAPE_INIT {N, C, D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, PD, PH, PW, channels_last, DD, DH, DW}
// Below 2^30 a 32-bit index cannot overflow even after the last grid-stride step.
#define FITS_INT32(count) ((count) < (1LL << 30))

// KIND: the data's storage (0 float, 1 float16, 2 bfloat16; Data in elementwise_common.cuh). Window sums and
// maxima are taken in fp32 and rounded once.
template <int KIND>
__global__ void pooling_forward(const typename Data<KIND>::T* x, typename Data<KIND>::T* y, POOL_SHAPE_PARAMS,
                                int mode, float alpha, float beta)
{
    const PoolShape s = POOL_SHAPE_INIT;
    const long long count = (long long)N * C * max((long long)D * H * W, (long long)OD * OH * OW);
    if (FITS_INT32(count)) pooling_forward_impl<KIND, int>(x, y, s, mode, alpha, beta);
    else pooling_forward_impl<KIND, long long>(x, y, s, mode, alpha, beta);
}

template <int KIND>
__global__ void pooling_backward(const typename Data<KIND>::T* x, const typename Data<KIND>::T* dy,
                                 typename Data<KIND>::T* dx, POOL_SHAPE_PARAMS, int mode, float alpha, float beta)
{
    const PoolShape s = POOL_SHAPE_INIT;
    const long long count = (long long)N * C * max((long long)D * H * W, (long long)OD * OH * OW);
    if (FITS_INT32(count)) pooling_backward_impl<KIND, int>(x, dy, dx, s, mode, alpha, beta);
    else pooling_backward_impl<KIND, long long>(x, dy, dx, s, mode, alpha, beta);
}

// ---------------------------------------------------------------------------------------------
// Fast path of pooling_forward / pooling_backward for the pooling most CNNs use: 2-D, window 2x2,
// stride 2, no padding, NCHW, W a multiple of 4, 16-byte aligned arrays (the launcher checks all
// of it). One thread per pair of neighbouring outputs (ow = 2j, 2j + 1) of one output row: the
// 2 x 4 input patch under them is two float4 loads, the pair one float2 load or store. The generic
// kernels above spend their time on index arithmetic (five divisions by run-time sizes per
// element) and scalar loads; a thread here divides twice for two outputs. The results are bit for
// bit the generic kernels': the same scan order (top-left, top-right, bottom-left, bottom-right),
// the same first-maximum and last-NaN rule, the same order of summation.
// ---------------------------------------------------------------------------------------------

// Position 0..3 of the first maximum of a 2 x 2 window given in scan order (the last NaN wins).
__device__ __forceinline__ int first_max_of4(float v0, float v1, float v2, float v3)
{
    float best = v0;
    int arg = 0;
    if (v1 > best || v1 != v1) { best = v1; arg = 1; }
    if (v2 > best || v2 != v2) { best = v2; arg = 2; }
    if (v3 > best || v3 != v3) { arg = 3; }
    return arg;
}

__device__ __forceinline__ float pick4(int i, float v0, float v1, float v2, float v3)
{
    return i == 0 ? v0 : i == 1 ? v1 : i == 2 ? v2 : v3;
}

// The first input row of the windows of output pair p: (row over N*C*OH, pair j within the row).
template <typename Index>
__device__ __forceinline__ Index k2s2_top(Index p, int H, int W, int OH, int& j)
{
    const Index pairs_per_row = W >> 2;
    const Index row = p / pairs_per_row;
    j = (int)(p - row * pairs_per_row);
    const Index nc = row / OH;
    const Index oh = row - nc * OH;
    return (nc * H + 2 * oh) * W;
}

template <int KIND, typename Index>
__device__ void pooling_forward_k2s2_impl(const typename Data<KIND>::T* __restrict__ x, typename Data<KIND>::T* y,
                                          int H, int W, int OH, int mode, float alpha, float beta, Index pairs)
{
    for (Index p = (Index)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += (Index)gridDim.x * blockDim.x) {
        int j;
        const Index top = k2s2_top<Index>(p, H, W, OH, j);
        const float4 a = load4(x + top, j, KIND);      // row 2*oh, columns 4j..4j+3
        const float4 b = load4(x + top + W, j, KIND);  // row 2*oh + 1
        float2 r;
        if (mode == POOL_MAX) {
            r.x = pick4(first_max_of4(a.x, a.y, b.x, b.y), a.x, a.y, b.x, b.y);
            r.y = pick4(first_max_of4(a.z, a.w, b.z, b.w), a.z, a.w, b.z, b.w);
        } else {  // no padding: both average modes divide by 4
            r.x = ((((0.0f + a.x) + a.y) + b.x) + b.y) / 4.0f;
            r.y = ((((0.0f + a.z) + a.w) + b.z) + b.w) / 4.0f;
        }
        if (KIND != 0) {   // 16-bit data: never blended (beta = 0)
            store_data(y, 2 * (long long)p, alpha * r.x, KIND);
            store_data(y, 2 * (long long)p + 1, alpha * r.y, KIND);
        } else if (beta == 0.0f) {
            reinterpret_cast<float2*>(y)[p] = make_float2(alpha * r.x, alpha * r.y);
        } else {
            float2* y2 = reinterpret_cast<float2*>(y);
            const float2 o = y2[p];
            y2[p] = make_float2(alpha * r.x + beta * o.x, alpha * r.y + beta * o.y);
        }
    }
}

// Backward: also H == 2 * OH (every input cell lies in exactly one window), so writing the 2 x 4
// patch of each output pair covers dx exactly once.
template <int KIND, typename Index>
__device__ void pooling_backward_k2s2_impl(const typename Data<KIND>::T* __restrict__ x,
                                           const typename Data<KIND>::T* __restrict__ dy, typename Data<KIND>::T* dx,
                                           int H, int W, int OH, int mode, float alpha, float beta, Index pairs)
{
    for (Index p = (Index)blockIdx.x * blockDim.x + threadIdx.x; p < pairs; p += (Index)gridDim.x * blockDim.x) {
        int j;
        const Index top = k2s2_top<Index>(p, H, W, OH, j);
        const float2 g = make_float2(load_data(dy, 2 * (long long)p, KIND), load_data(dy, 2 * (long long)p + 1, KIND));
        float4 da, db;  // the gradient of the top and bottom rows of the patch
        if (mode == POOL_MAX) {
            const float4 a = load4(x + top, j, KIND);
            const float4 b = load4(x + top + W, j, KIND);
            const int l = first_max_of4(a.x, a.y, b.x, b.y), r = first_max_of4(a.z, a.w, b.z, b.w);
            const float gl = 0.0f + g.x, gr = 0.0f + g.y;  // as the generic kernel's grad = 0; grad += g
            da = make_float4(l == 0 ? gl : 0.0f, l == 1 ? gl : 0.0f, r == 0 ? gr : 0.0f, r == 1 ? gr : 0.0f);
            db = make_float4(l == 2 ? gl : 0.0f, l == 3 ? gl : 0.0f, r == 2 ? gr : 0.0f, r == 3 ? gr : 0.0f);
        } else {
            const float gl = 0.0f + g.x / 4.0f, gr = 0.0f + g.y / 4.0f;
            da = make_float4(gl, gl, gr, gr);
            db = da;
        }
        if (KIND != 0) {   // 16-bit data: never blended (beta = 0)
            store4(dx + top, j, make_float4(alpha * da.x, alpha * da.y, alpha * da.z, alpha * da.w), KIND);
            store4(dx + top + W, j, make_float4(alpha * db.x, alpha * db.y, alpha * db.z, alpha * db.w), KIND);
        } else {
            float4* top4 = reinterpret_cast<float4*>(dx + top) + j;
            float4* bottom4 = reinterpret_cast<float4*>(dx + top + W) + j;
            *top4 = blend4(da, top4, 0, alpha, beta);
            *bottom4 = blend4(db, bottom4, 0, alpha, beta);
        }
    }
}

template <int KIND>
__global__ void pooling_forward_k2s2(const typename Data<KIND>::T* __restrict__ x, typename Data<KIND>::T* y, int H,
                                     int W, int OH, int mode, float alpha, float beta, long long pairs,
                                     long long x_count)
{
    if (FITS_INT32(x_count)) pooling_forward_k2s2_impl<KIND, int>(x, y, H, W, OH, mode, alpha, beta, (int)pairs);
    else pooling_forward_k2s2_impl<KIND, long long>(x, y, H, W, OH, mode, alpha, beta, pairs);
}

template <int KIND>
__global__ void pooling_backward_k2s2(const typename Data<KIND>::T* __restrict__ x,
                                      const typename Data<KIND>::T* __restrict__ dy, typename Data<KIND>::T* dx, int H,
                                      int W, int OH, int mode, float alpha, float beta, long long pairs,
                                      long long x_count)
{
    if (FITS_INT32(x_count)) pooling_backward_k2s2_impl<KIND, int>(x, dy, dx, H, W, OH, mode, alpha, beta, (int)pairs);
    else pooling_backward_k2s2_impl<KIND, long long>(x, dy, dx, H, W, OH, mode, alpha, beta, pairs);
}

// ---------------------------------------------------------------------------------------------
// Adaptive average pooling: output i of a dim (In inputs, Out outputs) averages inputs
// [floor(i*In/Out), ceil((i+1)*In/Out)). Same thread mappings as above.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ int adaptive_start(int o, int in_len, int out_len)
{
    return (int)(((long long)o * in_len) / out_len);
}

__device__ __forceinline__ int adaptive_end(int o, int in_len, int out_len)
{
    return (int)(((long long)(o + 1) * in_len + out_len - 1) / out_len);
}

template <typename Index>
__device__ void adaptive_forward_impl(const float* x, float* y, const PoolShape& s, float alpha, float beta)
{
    const Index total = (Index)s.N * s.C * s.OD * s.OH * s.OW;
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        Index n, c, od, oh, ow;
        split_index<Index>(idx, s.channels_last, s.C, s.OD, s.OH, s.OW, n, c, od, oh, ow);
        const int d0 = adaptive_start((int)od, s.D, s.OD), d1 = adaptive_end((int)od, s.D, s.OD);
        const int h0 = adaptive_start((int)oh, s.H, s.OH), h1 = adaptive_end((int)oh, s.H, s.OH);
        const int w0 = adaptive_start((int)ow, s.W, s.OW), w1 = adaptive_end((int)ow, s.W, s.OW);
        float sum = 0.0f;
        for (int d = d0; d < d1; ++d)
            for (int h = h0; h < h1; ++h)
                for (int w = w0; w < w1; ++w) sum += x[input_offset<Index>(s, n, c, d, h, w)];
        y[idx] = blend(sum / (float)((d1 - d0) * (h1 - h0) * (w1 - w0)), y, idx, alpha, beta);
    }
}

// Outputs whose adaptive windows contain input i: o in [floor(i*Out/In), ceil((i+1)*Out/In)),
// each checked against its window (the bounds can include one output too many).
template <typename Index>
__device__ void adaptive_backward_impl(const float* dy, float* dx, const PoolShape& s, float alpha, float beta)
{
    const Index total = (Index)s.N * s.C * s.D * s.H * s.W;
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        Index n, c, d, h, w;
        split_index<Index>(idx, s.channels_last, s.C, s.D, s.H, s.W, n, c, d, h, w);
        float grad = 0.0f;
        for (int od = adaptive_start((int)d, s.OD, s.D); od < min(adaptive_end((int)d, s.OD, s.D), s.OD); ++od) {
            const int d0 = adaptive_start(od, s.D, s.OD), d1 = adaptive_end(od, s.D, s.OD);
            if (d < d0 || d >= d1) continue;
            for (int oh = adaptive_start((int)h, s.OH, s.H); oh < min(adaptive_end((int)h, s.OH, s.H), s.OH); ++oh) {
                const int h0 = adaptive_start(oh, s.H, s.OH), h1 = adaptive_end(oh, s.H, s.OH);
                if (h < h0 || h >= h1) continue;
                for (int ow = adaptive_start((int)w, s.OW, s.W); ow < min(adaptive_end((int)w, s.OW, s.W), s.OW); ++ow) {
                    const int w0 = adaptive_start(ow, s.W, s.OW), w1 = adaptive_end(ow, s.W, s.OW);
                    if (w < w0 || w >= w1) continue;
                    grad += dy[output_offset<Index>(s, n, c, od, oh, ow)] / (float)((d1 - d0) * (h1 - h0) * (w1 - w0));
                }
            }
        }
        dx[idx] = blend(grad, dx, idx, alpha, beta);
    }
}

extern "C" __global__ void adaptive_avg_pooling_forward(const float* x, float* y, POOL_SHAPE_PARAMS, float alpha,
                                                        float beta)
{
    const PoolShape s = POOL_SHAPE_INIT;
    const long long count = (long long)N * C * max((long long)D * H * W, (long long)OD * OH * OW);
    if (FITS_INT32(count)) adaptive_forward_impl<int>(x, y, s, alpha, beta);
    else adaptive_forward_impl<long long>(x, y, s, alpha, beta);
}

extern "C" __global__ void adaptive_avg_pooling_backward(const float* dy, float* dx, POOL_SHAPE_PARAMS, float alpha,
                                                         float beta)
{
    const PoolShape s = POOL_SHAPE_INIT;
    const long long count = (long long)N * C * max((long long)D * H * W, (long long)OD * OH * OW);
    if (FITS_INT32(count)) adaptive_backward_impl<int>(dy, dx, s, alpha, beta);
    else adaptive_backward_impl<long long>(dy, dx, s, alpha, beta);
}

// ---------------------------------------------------------------------------------------------
// Max pooling with indices, and max unpooling (see the header). One thread per pooled element.
// ---------------------------------------------------------------------------------------------
template <typename Index>
__device__ void max_pooling_forward_with_indices_impl(const float* x, float* y, long long* indices,
                                                      const PoolShape& s)
{
    const Index total = (Index)s.N * s.C * s.OD * s.OH * s.OW;
    for (Index idx = (Index)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (Index)gridDim.x * blockDim.x) {
        Index n, c, od, oh, ow;
        split_index<Index>(idx, s.channels_last, s.C, s.OD, s.OH, s.OW, n, c, od, oh, ow);
        int arg;
        y[idx] = pool_window<0, Index>(x, s, POOL_MAX, n, c, (int)od, (int)oh, (int)ow, arg);
        indices[idx] = (long long)arg;
    }
}

extern "C" __global__ void max_pooling_forward_with_indices(const float* x, float* y, long long* indices,
                                                            POOL_SHAPE_PARAMS)
{
    const PoolShape s = POOL_SHAPE_INIT;
    const long long count = (long long)N * C * max((long long)D * H * W, (long long)OD * OH * OW);
    if (FITS_INT32(count)) max_pooling_forward_with_indices_impl<int>(x, y, indices, s);
    else max_pooling_forward_with_indices_impl<long long>(x, y, indices, s);
}

// The element of the unpooled plane that pooled element idx (of planes `in_plane` long) maps to,
// or -1 when its index is out of range. Channels-last planes are strided by C.
__device__ __forceinline__ long long unpool_target(long long idx, const long long* indices, int C, long long in_plane,
                                                   long long out_plane, int channels_last)
{
    const long long index = indices[idx];
    if (index < 0 || index >= out_plane) return -1;
    if (channels_last) {
        const long long c = idx % C, n = idx / C / in_plane;
        return (n * out_plane + index) * C + c;
    }
    const long long plane = idx / in_plane;  // n * C + c
    return plane * out_plane + index;
}

extern "C" __global__ void max_unpooling_forward(const float* y, const long long* indices, float* x, long long total,
                                                 int C, long long in_plane, long long out_plane, int channels_last)
{
    // x was zeroed by the launcher; each pooled value is written to its recorded position.
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long target = unpool_target(idx, indices, C, in_plane, out_plane, channels_last);
        if (target >= 0) x[target] = y[idx];
    }
}

extern "C" __global__ void max_unpooling_backward(const float* dx, const long long* indices, float* dy,
                                                  long long total, int C, long long in_plane, long long out_plane,
                                                  int channels_last)
{
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long target = unpool_target(idx, indices, C, in_plane, out_plane, channels_last);
        dy[idx] = target >= 0 ? dx[target] : 0.0f;
    }
}

#if defined(MINIDL_INSTANTIATE_ALL) && !defined(__CUDACC_RTC__)
// scripts/compile_kernels.sh: every data kind of the templated kernels, compiled by nvcc (NVRTC instantiates by
// name: minidl/primitives/cuda/pooling.py).
#define MINIDL_POOLING_KIND(K) (void*)&pooling_forward<K>, (void*)&pooling_backward<K>, \
    (void*)&pooling_forward_k2s2<K>, (void*)&pooling_backward_k2s2<K>
void* minidl_pooling_instances[] = {MINIDL_POOLING_KIND(0), MINIDL_POOLING_KIND(1), MINIDL_POOLING_KIND(2)};
#endif
