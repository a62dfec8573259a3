// convolution_tc.cu: convolution forward, backward-data and backward-filter on tensor cores
// (algorithm "implicit_gemm_tc" of minidl.primitives), and the per-frequency products of the FFT
// convolution (algorithm "fft").
//
// Arithmetic. Three element kinds, each a separate set of kernels:
//   tf32  float32 data, math="tf32": operands rounded to TF32 (cvt.rna.tf32.f32: 10 mantissa bits,
//         round to nearest, ties away) when they are read from shared memory, then
//         mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (fp32 accumulation).
//   fp16  float16 data:  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (fp32 accumulation).
//   bf16  bfloat16 data: the same with .bf16 operands.
// Half data is handled as raw 16-bit words (unsigned short) with PTX conversions, so the file needs
// no cuda_fp16.h / cuda_bf16.h (NVRTC finds them only with extra include paths).
//
// Implicit GEMM, as CUTLASS maps a 2-D convolution (1-D runs as H = 1) onto C[M,N] = A[M,K] B[K,N]:
//   fprop  M = N*P*Q output pixels, N = K output channels, K = R*S*C taps (r, s, c), c fastest:
//          A[m, (r,s,c)] = x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] (zero outside the image),
//          B[(r,s,c), k] = w[k, r, s, c]            (the NHWC filter read as it is).
//   dgrad  M = N*H*W input pixels, N = C, K = R*S*K (r, s, k), k fastest:
//          A[m, (r,s,k)] = dy[n, (h + ph - r*dh)/sh, (w + pw - s*dw)/sw, k] where that divides
//          exactly and lies inside dy, else 0;  B[(r,s,k), c] = w[k, r, s, c], read from a
//          GEMM-ready copy (C, R, S, K) that the launcher writes into the workspace.
//   wgrad  M = K, N = R*S*C, K = N*P*Q output pixels:  A[pix, k] = dy[pix, k],
//          B[pix, (r,s,c)] = x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]. M*N is small and the
//          reduction huge, so it is split over grid z (split-K); the slices' fp32 partial sums are
//          added in a fixed order by convolution_tc_splitk_reduce (deterministic, no atomics).
//          With K <= 64 the kernel computes dw^T (M = R*S*C, N = K) so the narrow side is the 64-wide
//          tile and no MMA work is spent on channels that do not exist.
//   The lowered matrices never exist in memory: each block gathers its tiles straight from the
//   tensors into shared memory.
//
// Why NHWC is the fast layout. In all three directions the reduction index's fastest part is a
// channel (c for fprop and wgrad's B, k for dgrad), and in NHWC the channels of one pixel are
// contiguous. So 4 (fp32) or 8 (half) consecutive reduction indices are one aligned 16-byte
// `cp.async.cg` straight from global to shared memory, with its src-size operand 0 for padding
// (the hardware writes the zeros). That needs C (fprop, wgrad) or K (dgrad) to be a multiple of
// 4 / 8 and 16-byte-aligned tensors; otherwise the kernel takes its scalar path (same tiles, one
// element at a time through registers: correct, slower). NCHW is served by the launcher
// transposing to NHWC on the way in and back on the way out (a measured cost, see
// benchmarks/results/gpu_conv_tc.md); in NCHW a 16-byte vector would run along one channel's
// pixels, which are not the reduction's fastest index.
//
// Tiles and threads. 256 threads (8 warps) per block, a 128 x BN tile of C (BN = 128, or 64 when
// the GEMM's N is at most 64), reduction steps of BK = 32 elements, a cp.async pipeline of
// STAGES = 3 (tf32) or 4 (half) shared-memory stages: while the tensor cores work on stage i, the
// copies of stages i+1 .. i+STAGES-1 are in flight. Warps are laid out 2 x 4 (BN = 128: warp tile
// 64 x 32) or 4 x 2 (BN = 64: warp tile 32 x 32); a warp issues (warp tile / 16x8) MMAs per k-step.
// Shared tiles are stored K-major ([row][k], fprop and dgrad operands) or MN-major ([k][row],
// wgrad's operands, contiguous along the channel) with a row padding that makes the fragment reads
// conflict-free: tf32 reads 32-bit words (the m16n8k8 fragments: a thread reads (g, t), g = lane/4,
// t = lane%4); half uses ldmatrix.x4 (K-major) or ldmatrix.x4.trans (MN-major), which hand out the
// m16n8k16 fragments directly.
//
// Epilogue (blending as in cuDNN): out = alpha * (acc + bias) + beta * out; with beta == 0 out is
// never read. With split-K the block writes its raw fp32 sums to the workspace instead.

typedef unsigned short half_bits;  // float16 or bfloat16, as raw bits

// ------------------------------------------------------------------------------------------------
// Element kinds
// ------------------------------------------------------------------------------------------------

constexpr int KIND_TF32 = 0, KIND_FP16 = 1, KIND_BF16 = 2;

template <int KIND> struct TcElem;

template <> struct TcElem<KIND_TF32> {
    typedef float T;
    static constexpr int VEC = 4;      // elements per 16-byte copy
    static constexpr int KSTEP = 8;    // k of one MMA
    static constexpr int STAGES = 3;
    static __device__ __forceinline__ float to_float(float v) { return v; }
    static __device__ __forceinline__ float from_float(float v) { return v; }
    static __device__ __forceinline__ float zero() { return 0.0f; }
};

template <> struct TcElem<KIND_FP16> {
    typedef half_bits T;
    static constexpr int VEC = 8;
    static constexpr int KSTEP = 16;
    static constexpr int STAGES = 4;
    static __device__ __forceinline__ float to_float(half_bits v)
    {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f;
    }
    static __device__ __forceinline__ half_bits from_float(float v)
    {
        half_bits h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
    static __device__ __forceinline__ half_bits zero() { return 0; }
};

template <> struct TcElem<KIND_BF16> {
    typedef half_bits T;
    static constexpr int VEC = 8;
    static constexpr int KSTEP = 16;
    static constexpr int STAGES = 4;
    static __device__ __forceinline__ float to_float(half_bits v) { return __uint_as_float(((unsigned)v) << 16); }
    static __device__ __forceinline__ half_bits from_float(float v)
    {
        half_bits h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
    static __device__ __forceinline__ half_bits zero() { return 0; }
};

// ------------------------------------------------------------------------------------------------
// PTX wrappers
// ------------------------------------------------------------------------------------------------

__device__ __forceinline__ unsigned smem_addr(const void* p)  // generic -> 32-bit shared-window address
{
    unsigned addr;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(p));
    return addr;
}

// 16 bytes global -> shared, asynchronously; valid == false writes 16 zero bytes (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid)
{
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

__device__ __forceinline__ unsigned to_tf32(float v)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

template <int KIND>
__device__ __forceinline__ void mma(float (&c)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    if constexpr (KIND == KIND_TF32) {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else if constexpr (KIND == KIND_FP16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// ------------------------------------------------------------------------------------------------
// Tile configuration
// ------------------------------------------------------------------------------------------------

constexpr int TC_THREADS = 256;
constexpr int TC_BM = 128;
constexpr int TC_BK = 32;

template <int KIND, int BN, bool A_KMAJOR, bool B_KMAJOR>
struct TcConfig {
    typedef TcElem<KIND> E;
    typedef typename E::T T;
    static constexpr int BM = TC_BM, BK = TC_BK, VEC = E::VEC, KSTEP = E::KSTEP, STAGES = E::STAGES;
    static constexpr int WARPS_M = (BN == 128) ? 2 : 4;
    static constexpr int WARPS_N = 8 / WARPS_M;
    static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;   // warp tile
    static constexpr int MT = WTM / 16, NT = WTN / 8;                // MMA tiles per warp
    // padding (elements) of a K-major row [row][BK] and of an MN-major row [k][ROWS]
    static constexpr int PAD_K = (KIND == KIND_TF32) ? 4 : 8;
    static constexpr int PAD_MN = 8;
    static constexpr int LDA = A_KMAJOR ? BK + PAD_K : BM + PAD_MN;
    static constexpr int LDB = B_KMAJOR ? BK + PAD_K : BN + PAD_MN;
    static constexpr int A_STAGE = A_KMAJOR ? BM * LDA : BK * LDA;   // elements
    static constexpr int B_STAGE = B_KMAJOR ? BN * LDB : BK * LDB;
    static constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * (int)sizeof(T);
    static_assert(NT % 2 == 0, "ldmatrix loads B fragments two n-tiles at a time");
};

// ------------------------------------------------------------------------------------------------
// Fragments from shared memory and the MMAs of one stage
// ------------------------------------------------------------------------------------------------

// A fragment of the 16 x KSTEP block at (m0, k0) of the A tile.
template <class Cfg, bool KMAJOR>
__device__ __forceinline__ void load_a_frag(unsigned (&a)[4], const typename Cfg::T* As, int m0, int k0, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    constexpr int LD = Cfg::LDA;
    if constexpr (Cfg::KSTEP == 8) {  // tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
        if constexpr (KMAJOR) {
            a[0] = to_tf32(As[(m0 + g) * LD + k0 + t]);
            a[1] = to_tf32(As[(m0 + g + 8) * LD + k0 + t]);
            a[2] = to_tf32(As[(m0 + g) * LD + k0 + t + 4]);
            a[3] = to_tf32(As[(m0 + g + 8) * LD + k0 + t + 4]);
        } else {
            a[0] = to_tf32(As[(k0 + t) * LD + m0 + g]);
            a[1] = to_tf32(As[(k0 + t) * LD + m0 + g + 8]);
            a[2] = to_tf32(As[(k0 + t + 4) * LD + m0 + g]);
            a[3] = to_tf32(As[(k0 + t + 4) * LD + m0 + g + 8]);
        }
    } else {  // half: four 8x8 matrices (m0, k0) (m0+8, k0) (m0, k0+8) (m0+8, k0+8)
        if constexpr (KMAJOR) {
            ldmatrix_x4(a, As + (m0 + (lane & 15)) * LD + k0 + (lane >> 4) * 8);
        } else {
            ldmatrix_x4_trans(a, As + (k0 + (lane & 7) + ((lane >> 4) << 3)) * LD + m0 + ((lane >> 3) & 1) * 8);
        }
    }
}

// B fragments of the two KSTEP x 8 blocks at (k0, n0) and (k0, n0 + 8).
template <class Cfg, bool KMAJOR>
__device__ __forceinline__ void load_b_frag2(unsigned (&b0)[2], unsigned (&b1)[2], const typename Cfg::T* Bs,
                                             int n0, int k0, int lane)
{
    const int g = lane >> 2, t = lane & 3;
    constexpr int LD = Cfg::LDB;
    if constexpr (Cfg::KSTEP == 8) {  // tf32: b0 (k=t, n=g), b1 (k=t+4, n=g)
        if constexpr (KMAJOR) {
            b0[0] = to_tf32(Bs[(n0 + g) * LD + k0 + t]);
            b0[1] = to_tf32(Bs[(n0 + g) * LD + k0 + t + 4]);
            b1[0] = to_tf32(Bs[(n0 + 8 + g) * LD + k0 + t]);
            b1[1] = to_tf32(Bs[(n0 + 8 + g) * LD + k0 + t + 4]);
        } else {
            b0[0] = to_tf32(Bs[(k0 + t) * LD + n0 + g]);
            b0[1] = to_tf32(Bs[(k0 + t + 4) * LD + n0 + g]);
            b1[0] = to_tf32(Bs[(k0 + t) * LD + n0 + 8 + g]);
            b1[1] = to_tf32(Bs[(k0 + t + 4) * LD + n0 + 8 + g]);
        }
    } else {
        unsigned r[4];
        if constexpr (KMAJOR) {  // matrices (n0, k0) (n0, k0+8) (n0+8, k0) (n0+8, k0+8)
            ldmatrix_x4(r, Bs + (n0 + (lane & 7) + ((lane >> 4) << 3)) * LD + k0 + ((lane >> 3) & 1) * 8);
        } else {                 // stored [k][n]: transposed loads of the same four
            ldmatrix_x4_trans(r, Bs + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + n0 + (lane >> 4) * 8);
        }
        b0[0] = r[0];
        b0[1] = r[1];
        b1[0] = r[2];
        b1[1] = r[3];
    }
}

template <class Cfg, int KIND, bool A_KMAJOR, bool B_KMAJOR>
__device__ __forceinline__ void mma_stage(float (&acc)[Cfg::MT][Cfg::NT][4], const typename Cfg::T* As,
                                          const typename Cfg::T* Bs, int warp_m, int warp_n, int lane)
{
#pragma unroll
    for (int k0 = 0; k0 < Cfg::BK; k0 += Cfg::KSTEP) {
        unsigned a[Cfg::MT][4], b[Cfg::NT][2];
#pragma unroll
        for (int mt = 0; mt < Cfg::MT; ++mt) load_a_frag<Cfg, A_KMAJOR>(a[mt], As, warp_m * Cfg::WTM + mt * 16, k0, lane);
#pragma unroll
        for (int nt = 0; nt < Cfg::NT; nt += 2)
            load_b_frag2<Cfg, B_KMAJOR>(b[nt], b[nt + 1], Bs, warp_n * Cfg::WTN + nt * 8, k0, lane);
#pragma unroll
        for (int mt = 0; mt < Cfg::MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < Cfg::NT; ++nt) mma<KIND>(acc[mt][nt], a[mt], b[nt]);
    }
}

// ------------------------------------------------------------------------------------------------
// The pipelined main loop and the epilogue, shared by the three directions
// ------------------------------------------------------------------------------------------------

template <class Cfg, int KIND, bool A_KMAJOR, bool B_KMAJOR, class Loader>
__device__ __forceinline__ void tc_mainloop(Loader& loader, float (&acc)[Cfg::MT][Cfg::NT][4], int kt_begin,
                                            int kt_end, typename Cfg::T* smem)
{
    typedef typename Cfg::T T;
    T* As = smem;
    T* Bs = smem + Cfg::STAGES * Cfg::A_STAGE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_m = warp % Cfg::WARPS_M, warp_n = warp / Cfg::WARPS_M;
    const int tiles = kt_end - kt_begin;
#pragma unroll
    for (int s = 0; s < Cfg::STAGES - 1; ++s) {
        if (s < tiles) loader.load(As + s * Cfg::A_STAGE, Bs + s * Cfg::B_STAGE, kt_begin + s);
        cp_async_commit();
    }
    for (int i = 0; i < tiles; ++i) {
        cp_async_wait<Cfg::STAGES - 2>();  // stage i has landed (this thread's copies)
        __syncthreads();                   // ... everyone's, and stage i-1 is no longer being read
        const int next = i + Cfg::STAGES - 1;
        if (next < tiles) {
            const int s = next % Cfg::STAGES;
            loader.load(As + s * Cfg::A_STAGE, Bs + s * Cfg::B_STAGE, kt_begin + next);
        }
        cp_async_commit();
        const int s = i % Cfg::STAGES;
        mma_stage<Cfg, KIND, A_KMAJOR, B_KMAJOR>(acc, As + s * Cfg::A_STAGE, Bs + s * Cfg::B_STAGE, warp_m, warp_n,
                                                 lane);
    }
    cp_async_wait<0>();
}

// C element (m, n) lives at out[m * ld_m + n * ld_n]; bias[n] (fprop) is added before blending.
// partial != nullptr: split-K, the raw sums go to partial[blockIdx.z][m * ld_m + n * ld_n] (size M*N).
template <class Cfg, int KIND>
__device__ __forceinline__ void tc_epilogue(const float (&acc)[Cfg::MT][Cfg::NT][4], typename Cfg::T* out,
                                            const typename Cfg::T* bias, float* partial, int M, int N,
                                            long long ld_m, long long ld_n, float alpha, float beta)
{
    typedef TcElem<KIND> E;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int warp_m = warp % Cfg::WARPS_M, warp_n = warp / Cfg::WARPS_M;
    const int g = lane >> 2, t = lane & 3;
    const int m_base = blockIdx.x * Cfg::BM + warp_m * Cfg::WTM;
    const int n_base = blockIdx.y * (Cfg::WARPS_N * Cfg::WTN) + warp_n * Cfg::WTN;
    float* slice = partial ? partial + (long long)blockIdx.z * M * N : nullptr;
#pragma unroll
    for (int mt = 0; mt < Cfg::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < Cfg::NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int m = m_base + mt * 16 + g + (i >= 2 ? 8 : 0);
                const int n = n_base + nt * 8 + 2 * t + (i & 1);
                if (m >= M || n >= N) continue;
                const long long at = m * ld_m + n * ld_n;
                if (slice) {
                    slice[at] = acc[mt][nt][i];
                    continue;
                }
                float v = acc[mt][nt][i];
                if (bias) v += E::to_float(bias[n]);
                v *= alpha;
                if (beta != 0.0f) v += beta * E::to_float(out[at]);
                out[at] = E::from_float(v);
            }
}

struct TcGeom {  // a 2-D NHWC convolution (1-D: H = R = P = 1)
    int N, H, W, C, K, R, S, P, Q, pad_h, pad_w, str_h, str_w, dil_h, dil_w;
};

#define TC_GEOM_ARGS                                                                                  \
    int N, int H, int W, int C, int K, int R, int S, int P, int Q, int pad_h, int pad_w, int str_h,   \
        int str_w, int dil_h, int dil_w
#define TC_GEOM TcGeom{N, H, W, C, K, R, S, P, Q, pad_h, pad_w, str_h, str_w, dil_h, dil_w}

// ------------------------------------------------------------------------------------------------
// Loaders: which global elements go where in a stage. `vec` (uniform per launch): 16-byte cp.async
// chunks are legal (channel counts multiple of VEC, tensors 16-byte aligned); else element by element.
// ------------------------------------------------------------------------------------------------

// A K-major tile: rows x BK, this thread's chunks are (row = tid / CPR + j * ROWS_PER_PASS, k chunk tid % CPR).
template <class Cfg, int ROWS>
struct KMajorMap {
    static constexpr int CPR = Cfg::BK / Cfg::VEC;               // 16-byte chunks per row
    static constexpr int ROWS_PER_PASS = TC_THREADS / CPR;
    static constexpr int PASSES = ROWS / ROWS_PER_PASS;
    static_assert(PASSES * ROWS_PER_PASS == ROWS, "tile rows must be a multiple of a pass");
};

// An MN-major tile: BK x cols, chunks along cols: (k row = tid / CPR + j * ROWS_PER_PASS, col chunk tid % CPR).
template <class Cfg, int COLS>
struct MNMajorMap {
    static constexpr int CPR = COLS / Cfg::VEC;
    static constexpr int ROWS_PER_PASS = TC_THREADS / CPR;
    static constexpr int PASSES = Cfg::BK / ROWS_PER_PASS;
    static_assert(PASSES * ROWS_PER_PASS == Cfg::BK, "BK must be a multiple of a pass");
};

// fprop: A = im2col(x) (K-major, rows = output pixels), B = w (K-major, rows = output channels).
template <class Cfg, int KIND, int BN>
struct FpropLoader {
    typedef typename Cfg::T T;
    typedef KMajorMap<Cfg, Cfg::BM> AMap;
    typedef KMajorMap<Cfg, BN> BMap;
    const T* x;
    const T* w;
    TcGeom g;
    int kdim;  // R*S*C
    bool vec;
    int a_img[AMap::PASSES], a_h0[AMap::PASSES], a_w0[AMap::PASSES];  // a_img < 0: row past M
    int b_row0;

    __device__ void init(const T* x_, const T* w_, const TcGeom& g_, bool vec_)
    {
        x = x_;
        w = w_;
        g = g_;
        vec = vec_;
        kdim = g.R * g.S * g.C;
        const int M = g.N * g.P * g.Q;
        const int row = threadIdx.x / AMap::CPR;
#pragma unroll
        for (int j = 0; j < AMap::PASSES; ++j) {
            const int m = blockIdx.x * Cfg::BM + row + j * AMap::ROWS_PER_PASS;
            if (m < M) {
                const int img = m / (g.P * g.Q), pq = m % (g.P * g.Q);
                a_img[j] = img;
                a_h0[j] = (pq / g.Q) * g.str_h - g.pad_h;
                a_w0[j] = (pq % g.Q) * g.str_w - g.pad_w;
            } else {
                a_img[j] = -1;
                a_h0[j] = a_w0[j] = 0;
            }
        }
        b_row0 = blockIdx.y * BN + threadIdx.x / BMap::CPR;
    }

    __device__ T x_at(int j, int kk) const  // scalar path: A element (row j of this thread, k index kk)
    {
        if (a_img[j] < 0 || kk >= kdim) return TcElem<KIND>::zero();
        const int c = kk % g.C, rs = kk / g.C;
        const int ih = a_h0[j] + (rs / g.S) * g.dil_h, iw = a_w0[j] + (rs % g.S) * g.dil_w;
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return TcElem<KIND>::zero();
        return x[(((long long)a_img[j] * g.H + ih) * g.W + iw) * g.C + c];
    }

    __device__ void load(T* As, T* Bs, int kt)
    {
        const int kc = (threadIdx.x % AMap::CPR) * Cfg::VEC;  // this thread's k offset inside the tile
        const int kk = kt * Cfg::BK + kc;
        const int arow = threadIdx.x / AMap::CPR, brow = threadIdx.x / BMap::CPR;
        if (vec) {
            const bool kvalid = kk < kdim;
            const int c = kk % g.C, rs = kk / g.C;
            const int dh = (rs / g.S) * g.dil_h, dw = (rs % g.S) * g.dil_w;
#pragma unroll
            for (int j = 0; j < AMap::PASSES; ++j) {
                const int ih = a_h0[j] + dh, iw = a_w0[j] + dw;
                const bool ok = kvalid && a_img[j] >= 0 && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
                const T* src = ok ? x + (((long long)a_img[j] * g.H + ih) * g.W + iw) * g.C + c : x;
                cp_async16(As + (arow + j * AMap::ROWS_PER_PASS) * Cfg::LDA + kc, src, ok);
            }
#pragma unroll
            for (int j = 0; j < BMap::PASSES; ++j) {
                const int n = b_row0 + j * BMap::ROWS_PER_PASS;
                const bool ok = kvalid && n < g.K;
                cp_async16(Bs + (brow + j * BMap::ROWS_PER_PASS) * Cfg::LDB + kc,
                           ok ? w + (long long)n * kdim + kk : w, ok);
            }
        } else {
#pragma unroll
            for (int j = 0; j < AMap::PASSES; ++j)
#pragma unroll
                for (int e = 0; e < Cfg::VEC; ++e)
                    As[(arow + j * AMap::ROWS_PER_PASS) * Cfg::LDA + kc + e] = x_at(j, kk + e);
#pragma unroll
            for (int j = 0; j < BMap::PASSES; ++j) {
                const int n = b_row0 + j * BMap::ROWS_PER_PASS;
#pragma unroll
                for (int e = 0; e < Cfg::VEC; ++e)
                    Bs[(brow + j * BMap::ROWS_PER_PASS) * Cfg::LDB + kc + e] =
                        (n < g.K && kk + e < kdim) ? w[(long long)n * kdim + kk + e] : TcElem<KIND>::zero();
            }
        }
    }
};

// dgrad: A = dy gathered at the output positions that read input pixel m (K-major, rows = input
// pixels), B = the GEMM-ready filters wt (C, R, S, K) (K-major, rows = input channels).
template <class Cfg, int KIND, int BN>
struct DgradLoader {
    typedef typename Cfg::T T;
    typedef KMajorMap<Cfg, Cfg::BM> AMap;
    typedef KMajorMap<Cfg, BN> BMap;
    const T* dy;
    const T* wt;
    TcGeom g;
    int kdim;  // R*S*K
    bool vec;
    int a_img[AMap::PASSES], a_h[AMap::PASSES], a_w[AMap::PASSES];  // h + pad_h, w + pad_w
    int b_row0;

    __device__ void init(const T* dy_, const T* wt_, const TcGeom& g_, bool vec_)
    {
        dy = dy_;
        wt = wt_;
        g = g_;
        vec = vec_;
        kdim = g.R * g.S * g.K;
        const int M = g.N * g.H * g.W;
        const int row = threadIdx.x / AMap::CPR;
#pragma unroll
        for (int j = 0; j < AMap::PASSES; ++j) {
            const int m = blockIdx.x * Cfg::BM + row + j * AMap::ROWS_PER_PASS;
            if (m < M) {
                const int img = m / (g.H * g.W), hw = m % (g.H * g.W);
                a_img[j] = img;
                a_h[j] = hw / g.W + g.pad_h;
                a_w[j] = hw % g.W + g.pad_w;
            } else {
                a_img[j] = -1;
                a_h[j] = a_w[j] = 0;
            }
        }
        b_row0 = blockIdx.y * BN + threadIdx.x / BMap::CPR;
    }

    // the dy row (output pixel offset, in elements) that input row j reads for tap rs, or -1
    __device__ long long dy_row(int j, int rs) const
    {
        if (a_img[j] < 0) return -1;
        const int ph = a_h[j] - (rs / g.S) * g.dil_h, pw = a_w[j] - (rs % g.S) * g.dil_w;
        if (ph < 0 || pw < 0 || ph % g.str_h != 0 || pw % g.str_w != 0) return -1;
        const int p = ph / g.str_h, q = pw / g.str_w;
        if (p >= g.P || q >= g.Q) return -1;
        return (((long long)a_img[j] * g.P + p) * g.Q + q) * g.K;
    }

    __device__ void load(T* As, T* Bs, int kt)
    {
        const int kc = (threadIdx.x % AMap::CPR) * Cfg::VEC;
        const int kk = kt * Cfg::BK + kc;
        const int arow = threadIdx.x / AMap::CPR, brow = threadIdx.x / BMap::CPR;
        if (vec) {
            const bool kvalid = kk < kdim;
            const int k = kk % g.K, rs = kk / g.K;
#pragma unroll
            for (int j = 0; j < AMap::PASSES; ++j) {
                const long long row = kvalid ? dy_row(j, rs) : -1;
                cp_async16(As + (arow + j * AMap::ROWS_PER_PASS) * Cfg::LDA + kc, row >= 0 ? dy + row + k : dy,
                           row >= 0);
            }
#pragma unroll
            for (int j = 0; j < BMap::PASSES; ++j) {
                const int n = b_row0 + j * BMap::ROWS_PER_PASS;
                const bool ok = kvalid && n < g.C;
                cp_async16(Bs + (brow + j * BMap::ROWS_PER_PASS) * Cfg::LDB + kc,
                           ok ? wt + (long long)n * kdim + kk : wt, ok);
            }
        } else {
#pragma unroll
            for (int j = 0; j < AMap::PASSES; ++j)
#pragma unroll
                for (int e = 0; e < Cfg::VEC; ++e) {
                    const int kke = kk + e;
                    T v = TcElem<KIND>::zero();
                    if (kke < kdim) {
                        const long long row = dy_row(j, kke / g.K);
                        if (row >= 0) v = dy[row + kke % g.K];
                    }
                    As[(arow + j * AMap::ROWS_PER_PASS) * Cfg::LDA + kc + e] = v;
                }
#pragma unroll
            for (int j = 0; j < BMap::PASSES; ++j) {
                const int n = b_row0 + j * BMap::ROWS_PER_PASS;
#pragma unroll
                for (int e = 0; e < Cfg::VEC; ++e)
                    Bs[(brow + j * BMap::ROWS_PER_PASS) * Cfg::LDB + kc + e] =
                        (n < g.C && kk + e < kdim) ? wt[(long long)n * kdim + kk + e] : TcElem<KIND>::zero();
            }
        }
    }
};

// wgrad: both operands MN-major ([pixel][channel] tiles): dy rows (pixel, output channel k) and
// the gathered x (pixel, tap (r, s, c)). SWAP = false: A = dy (M = K), B = x (N = R*S*C);
// SWAP = true (K <= 64): A = x (M = R*S*C), B = dy (N = K), i.e. dw^T.
template <class Cfg, int KIND, int BN, bool SWAP>
struct WgradLoader {
    typedef typename Cfg::T T;
    static constexpr int DY_COLS = SWAP ? BN : Cfg::BM;
    static constexpr int X_COLS = SWAP ? Cfg::BM : BN;
    typedef MNMajorMap<Cfg, DY_COLS> DyMap;
    typedef MNMajorMap<Cfg, X_COLS> XMap;
    const T* x;
    const T* dy;
    TcGeom g;
    int npq, rsc;
    bool vec;
    int dy_col0, x_col0;  // first GEMM column of this block in each operand

    __device__ void init(const T* x_, const T* dy_, const TcGeom& g_, bool vec_)
    {
        x = x_;
        dy = dy_;
        g = g_;
        vec = vec_;
        npq = g.N * g.P * g.Q;
        rsc = g.R * g.S * g.C;
        dy_col0 = SWAP ? blockIdx.y * BN : blockIdx.x * Cfg::BM;
        x_col0 = SWAP ? blockIdx.x * Cfg::BM : blockIdx.y * BN;
    }

    // x offset of pixel pix for tap (r, s) and channel c, or -1 for padding / past the end
    __device__ long long x_offset(int pix, int r, int s, int c) const
    {
        if (pix >= npq) return -1;
        const int img = pix / (g.P * g.Q), pq = pix % (g.P * g.Q);
        const int ih = (pq / g.Q) * g.str_h - g.pad_h + r * g.dil_h;
        const int iw = (pq % g.Q) * g.str_w - g.pad_w + s * g.dil_w;
        if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) return -1;
        return (((long long)img * g.H + ih) * g.W + iw) * g.C + c;
    }

    __device__ void load(T* As, T* Bs, int kt)
    {
        T* dy_tile = SWAP ? Bs : As;
        T* x_tile = SWAP ? As : Bs;
        constexpr int LD_DY = SWAP ? Cfg::LDB : Cfg::LDA;
        constexpr int LD_X = SWAP ? Cfg::LDA : Cfg::LDB;
        const int pix0 = kt * Cfg::BK;
        // dy: columns = output channels
        {
            const int cc = (threadIdx.x % DyMap::CPR) * Cfg::VEC, krow = threadIdx.x / DyMap::CPR;
            const int k = dy_col0 + cc;
#pragma unroll
            for (int j = 0; j < DyMap::PASSES; ++j) {
                const int r = krow + j * DyMap::ROWS_PER_PASS, pix = pix0 + r;
                T* dst = dy_tile + r * LD_DY + cc;
                if (vec) {
                    const bool ok = pix < npq && k < g.K;
                    cp_async16(dst, ok ? dy + (long long)pix * g.K + k : dy, ok);
                } else {
#pragma unroll
                    for (int e = 0; e < Cfg::VEC; ++e)
                        dst[e] = (pix < npq && k + e < g.K) ? dy[(long long)pix * g.K + k + e] : TcElem<KIND>::zero();
                }
            }
        }
        // x: columns = taps (r, s, c)
        {
            const int cc = (threadIdx.x % XMap::CPR) * Cfg::VEC, krow = threadIdx.x / XMap::CPR;
            const int n = x_col0 + cc;
            if (vec) {
                const int c = n % g.C, rs = n / g.C, r = rs / g.S, s = rs % g.S;
#pragma unroll
                for (int j = 0; j < XMap::PASSES; ++j) {
                    const int row = krow + j * XMap::ROWS_PER_PASS;
                    const long long at = n < rsc ? x_offset(pix0 + row, r, s, c) : -1;
                    cp_async16(x_tile + row * LD_X + cc, at >= 0 ? x + at : x, at >= 0);
                }
            } else {
#pragma unroll
                for (int j = 0; j < XMap::PASSES; ++j) {
                    const int row = krow + j * XMap::ROWS_PER_PASS;
#pragma unroll
                    for (int e = 0; e < Cfg::VEC; ++e) {
                        const int ne = n + e;
                        long long at = -1;
                        if (ne < rsc) {
                            const int c = ne % g.C, rs = ne / g.C;
                            at = x_offset(pix0 + row, rs / g.S, rs % g.S, c);
                        }
                        x_tile[row * LD_X + cc + e] = at >= 0 ? x[at] : TcElem<KIND>::zero();
                    }
                }
            }
        }
    }
};

// ------------------------------------------------------------------------------------------------
// The kernels
// ------------------------------------------------------------------------------------------------

template <int KIND, int BN>
__device__ __forceinline__ void convolution_forward_tc(const typename TcElem<KIND>::T* x,
                                                       const typename TcElem<KIND>::T* w,
                                                       const typename TcElem<KIND>::T* bias,
                                                       typename TcElem<KIND>::T* y, const TcGeom& g, float alpha,
                                                       float beta, int vec)
{
    typedef TcConfig<KIND, BN, true, true> Cfg;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    FpropLoader<Cfg, KIND, BN> loader;
    loader.init(x, w, g, vec != 0);
    float acc[Cfg::MT][Cfg::NT][4] = {};
    const int ktiles = (g.R * g.S * g.C + Cfg::BK - 1) / Cfg::BK;
    tc_mainloop<Cfg, KIND, true, true>(loader, acc, 0, ktiles, reinterpret_cast<typename Cfg::T*>(tc_smem));
    tc_epilogue<Cfg, KIND>(acc, y, bias, nullptr, g.N * g.P * g.Q, g.K, g.K, 1, alpha, beta);
}

template <int KIND, int BN>
__device__ __forceinline__ void convolution_backward_data_tc(const typename TcElem<KIND>::T* wt,
                                                             const typename TcElem<KIND>::T* dy,
                                                             typename TcElem<KIND>::T* dx, const TcGeom& g,
                                                             float alpha, float beta, int vec)
{
    typedef TcConfig<KIND, BN, true, true> Cfg;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    DgradLoader<Cfg, KIND, BN> loader;
    loader.init(dy, wt, g, vec != 0);
    float acc[Cfg::MT][Cfg::NT][4] = {};
    const int ktiles = (g.R * g.S * g.K + Cfg::BK - 1) / Cfg::BK;
    tc_mainloop<Cfg, KIND, true, true>(loader, acc, 0, ktiles, reinterpret_cast<typename Cfg::T*>(tc_smem));
    tc_epilogue<Cfg, KIND>(acc, dx, nullptr, nullptr, g.N * g.H * g.W, g.C, g.C, 1, alpha, beta);
}

// grid z = split-K slices of tiles_per_slice reduction tiles each; partial: fp32 (slices, K*R*S*C)
// when there is more than one slice, else nullptr and the block blends into dw.
template <int KIND, int BN, bool SWAP>
__device__ __forceinline__ void convolution_backward_filter_tc(const typename TcElem<KIND>::T* x,
                                                               const typename TcElem<KIND>::T* dy,
                                                               typename TcElem<KIND>::T* dw, float* partial,
                                                               int tiles_per_slice, const TcGeom& g, float alpha,
                                                               float beta, int vec)
{
    typedef TcConfig<KIND, BN, false, false> Cfg;
    extern __shared__ __align__(16) unsigned char tc_smem[];
    WgradLoader<Cfg, KIND, BN, SWAP> loader;
    loader.init(x, dy, g, vec != 0);
    float acc[Cfg::MT][Cfg::NT][4] = {};
    const int ktiles = (g.N * g.P * g.Q + Cfg::BK - 1) / Cfg::BK;
    const int kt_begin = blockIdx.z * tiles_per_slice;
    const int kt_end = min(ktiles, kt_begin + tiles_per_slice);
    tc_mainloop<Cfg, KIND, false, false>(loader, acc, kt_begin, kt_end, reinterpret_cast<typename Cfg::T*>(tc_smem));
    const int rsc = g.R * g.S * g.C;
    if (SWAP)  // C = dw^T: row m = tap, column n = output channel
        tc_epilogue<Cfg, KIND>(acc, dw, nullptr, partial, rsc, g.K, 1, rsc, alpha, beta);
    else
        tc_epilogue<Cfg, KIND>(acc, dw, nullptr, partial, g.K, rsc, rsc, 1, alpha, beta);
}

#define TC_KERNELS(KIND, NAME, T)                                                                               \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_forward_tc_##NAME##_bn128(             \
        const T* x, const T* w, const T* bias, T* y, TC_GEOM_ARGS, float alpha, float beta, int vec)            \
    {                                                                                                           \
        convolution_forward_tc<KIND, 128>(x, w, bias, y, TC_GEOM, alpha, beta, vec);                            \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_forward_tc_##NAME##_bn64(              \
        const T* x, const T* w, const T* bias, T* y, TC_GEOM_ARGS, float alpha, float beta, int vec)            \
    {                                                                                                           \
        convolution_forward_tc<KIND, 64>(x, w, bias, y, TC_GEOM, alpha, beta, vec);                             \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_backward_data_tc_##NAME##_bn128(       \
        const T* wt, const T* dy, T* dx, TC_GEOM_ARGS, float alpha, float beta, int vec)                        \
    {                                                                                                           \
        convolution_backward_data_tc<KIND, 128>(wt, dy, dx, TC_GEOM, alpha, beta, vec);                         \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_backward_data_tc_##NAME##_bn64(        \
        const T* wt, const T* dy, T* dx, TC_GEOM_ARGS, float alpha, float beta, int vec)                        \
    {                                                                                                           \
        convolution_backward_data_tc<KIND, 64>(wt, dy, dx, TC_GEOM, alpha, beta, vec);                          \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_backward_filter_tc_##NAME##_bn128(     \
        const T* x, const T* dy, T* dw, float* partial, int tiles_per_slice, TC_GEOM_ARGS, float alpha,         \
        float beta, int vec)                                                                                    \
    {                                                                                                           \
        convolution_backward_filter_tc<KIND, 128, false>(x, dy, dw, partial, tiles_per_slice, TC_GEOM, alpha,   \
                                                         beta, vec);                                            \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(TC_THREADS) convolution_backward_filter_tc_##NAME##_t_bn64(    \
        const T* x, const T* dy, T* dw, float* partial, int tiles_per_slice, TC_GEOM_ARGS, float alpha,         \
        float beta, int vec)                                                                                    \
    {                                                                                                           \
        convolution_backward_filter_tc<KIND, 64, true>(x, dy, dw, partial, tiles_per_slice, TC_GEOM, alpha,     \
                                                       beta, vec);                                              \
    }                                                                                                           \
    extern "C" __global__ void convolution_tc_splitk_reduce_##NAME(const float* partial, int splits,            \
                                                                   long long total, float alpha, float beta,    \
                                                                   T* out)                                      \
    {                                                                                                           \
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;                         \
             i += (long long)gridDim.x * blockDim.x) {                                                          \
            float s = 0.0f;                                                                                     \
            for (int z = 0; z < splits; ++z) s += partial[z * total + i];                                       \
            s *= alpha;                                                                                         \
            if (beta != 0.0f) s += beta * TcElem<KIND>::to_float(out[i]);                                       \
            out[i] = TcElem<KIND>::from_float(s);                                                               \
        }                                                                                                       \
    }

// A module compiled with -DCONV_TC_KIND=<0|1|2> holds one kind's kernels (a third of the compile
// time); without it (scripts/compile_kernels.sh) all three are compiled.
#if !defined(CONV_TC_KIND) || CONV_TC_KIND == 0
TC_KERNELS(KIND_TF32, tf32, float)
#endif
#if !defined(CONV_TC_KIND) || CONV_TC_KIND == 1
TC_KERNELS(KIND_FP16, fp16, half_bits)
#endif
#if !defined(CONV_TC_KIND) || CONV_TC_KIND == 2
TC_KERNELS(KIND_BF16, bf16, half_bits)
#endif

// ------------------------------------------------------------------------------------------------
// FFT convolution: the per-frequency complex products summed over channels
// ------------------------------------------------------------------------------------------------
//
// For every frequency f (F of them: the rfft2 grid Hf x (Wf/2 + 1)) a small complex GEMM
//     out[i, j, f] = sum_l op(a[i, l, f]) * op(b[l, j, f])         (op = conjugate if asked)
// with a(i, l) at a[(i * a_si + l * a_sl) * F + f], b(l, j) at b[(l * b_sl + j * b_sj) * F + f]:
//   forward          Y[n, k]  = sum_c X[n, c] conj(W[k, c])
//   backward data    DX[n, c] = sum_k DY[n, k] W[k, c]
//   backward filter  DW[k, c] = sum_n conj(DY[n, k]) X[n, c]
// Thread mapping: one thread per frequency (consecutive threads read consecutive frequencies:
// coalesced), a 4 x 4 block of (i, j) outputs in registers (16 complex FMAs per 8 complex loads);
// grid y and z run over the blocks of i and j.
constexpr int FFT_TI = 4, FFT_TJ = 4;

extern "C" __global__ void convolution_fft_products(const float2* __restrict__ a, const float2* __restrict__ b,
                                                    float2* __restrict__ out, int I, int J, int L, long long F,
                                                    long long a_si, long long a_sl, long long b_sl,
                                                    long long b_sj, int conj_a, int conj_b)
{
    const long long f = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (f >= F) return;
    const int i0 = blockIdx.y * FFT_TI, j0 = blockIdx.z * FFT_TJ;
    float2 acc[FFT_TI][FFT_TJ];
#pragma unroll
    for (int i = 0; i < FFT_TI; ++i)
#pragma unroll
        for (int j = 0; j < FFT_TJ; ++j) acc[i][j] = make_float2(0.0f, 0.0f);
    const float sa = conj_a ? -1.0f : 1.0f, sb = conj_b ? -1.0f : 1.0f;
    for (int l = 0; l < L; ++l) {
        float2 av[FFT_TI], bv[FFT_TJ];
#pragma unroll
        for (int i = 0; i < FFT_TI; ++i) {
            av[i] = (i0 + i < I) ? a[((i0 + i) * a_si + l * a_sl) * F + f] : make_float2(0.0f, 0.0f);
            av[i].y *= sa;
        }
#pragma unroll
        for (int j = 0; j < FFT_TJ; ++j) {
            bv[j] = (j0 + j < J) ? b[(l * b_sl + (j0 + j) * b_sj) * F + f] : make_float2(0.0f, 0.0f);
            bv[j].y *= sb;
        }
#pragma unroll
        for (int i = 0; i < FFT_TI; ++i)
#pragma unroll
            for (int j = 0; j < FFT_TJ; ++j) {
                acc[i][j].x += av[i].x * bv[j].x - av[i].y * bv[j].y;
                acc[i][j].y += av[i].x * bv[j].y + av[i].y * bv[j].x;
            }
    }
#pragma unroll
    for (int i = 0; i < FFT_TI; ++i)
#pragma unroll
        for (int j = 0; j < FFT_TJ; ++j)
            if (i0 + i < I && j0 + j < J) out[((long long)(i0 + i) * J + j0 + j) * F + f] = acc[i][j];
}
