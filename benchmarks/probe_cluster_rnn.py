"""Probe for issue 24: what one step of a persistent LSTM costs when a layer runs in ONE thread-block cluster
(Hopper: up to 16 CTAs of one GPC) instead of a grid of ~128 CTAs that meet at a global-memory barrier.

The persistent kernels of kernels/rnn_persistent.cu spread a layer over one CTA per SM and exchange the new state h
through L2 after every step, with a barrier built from a global counter. Their bf16 forward measures ~5 us a step
at batch 32 (H = 512), of which the product is ~1.2 us (benchmarks/results/gpu_rnn.md, "Where a persistent step's
time goes"): the rest is latency (staging h from L2, the fence and the counter's round trips, the cell). A cluster
offers two things the grid does not: distributed shared memory (a CTA stores into a peer's shared memory) and a
hardware barrier (barrier.cluster.arrive.release / wait.acquire). Its cost: 16 SMs instead of ~128 for the product,
and the recurrent weights must fit 16 CTAs' shared memory (bf16 LSTM: 4H x H x 2 bytes / 16 = 128 KB at H = 512).

The kernel below (inline, compiled here; not part of the library) is the smallest honest version of that design,
bf16 math, one direction, no padded batches:
- CTA c of the cluster owns hidden units j0 = c*U .. j0+U-1 (U = H / cluster size); its 4U rows of W_hh sit in
  shared memory as bfloat16, gate-interleaved (row 4u + g), so that one mma tile's 8 columns are two units' four
  gates and the cell runs on the accumulators (one shuffle gives a lane the four gates of one unit and batch row);
- the state h of all H units sits in every CTA's shared memory (bfloat16, two buffers: step s reads one while the
  peers write step s + 1's into the other); each CTA broadcasts its own U units to all peers (16-byte DSMEM stores)
  and the hardware barrier ends the step;
- the input projection (gates_x, both biases folded in) is read from global memory at the start of each step, the
  outputs h_t (fp32) written to global memory, as the real kernels do.
Ablations (bit flags, the timing only): 1 no product, 2 no DSMEM broadcast, 4 no cluster barrier.

Checks the result against a NumPy LSTM that rounds W and h to bfloat16 as the product does, then times T = 8, 40,
72 (the slope is the cost of one step) for each batch and variant.

    python3 benchmarks/probe_cluster_rnn.py [--hidden 512] [--batches 32,64] [--cluster 16]
"""
from __future__ import annotations

import argparse
import ctypes
import sys

import numpy as np

SOURCE = r"""
constexpr int PT = 512, NWARPS = PT / 32;

__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_size() { unsigned r; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync_all()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned map_to_rank(unsigned addr, unsigned rank)
{
    unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank)); return r;
}
__device__ __forceinline__ void st_cluster_v4(unsigned addr, uint4 v)
{
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ unsigned short bf16_bits(float v)
{
    unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(0.0f), "f"(v)); return (unsigned short)(r & 0xffffu);
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + __expf(-x)); }

// gates_x (T, B, 4H) fp32 with both biases; w (4H, H) bfloat16 bits, PyTorch's row order (gate g, unit j: g*H + j);
// h0, c0 (B, H) fp32; hs (T, B, H) fp32 out; c_last (B, H) out. H % 64 == 0, U = H / cluster % 8 == 0, B <= 64.
extern "C" __global__ void __launch_bounds__(PT, 1)
cluster_lstm_forward(const float* __restrict__ gates_x, const unsigned short* __restrict__ w, const float* __restrict__ h0,
                     const float* __restrict__ c0, float* __restrict__ hs, float* __restrict__ c_last, int T, int B, int H,
                     int ablate, int single)
{
    extern __shared__ uint4 smem4[];
    const int CS = cluster_size(), c = cluster_rank(), U = H / CS, j0 = c * U, R = 4 * U;
    const int KP = H + 16, BP = (B + 15) / 16 * 16, MT = BP / 16, NT = R / 8, tiles = MT * NT;
    unsigned short* Ws = reinterpret_cast<unsigned short*>(smem4);        // R x KP
    unsigned short* hb = Ws + R * KP;                                      // 2 x BP x KP
    const int nbuf = single ? 1 : 2;   // single: one h buffer, and a second barrier a step (the peers' stores wait
                                       // until every CTA's product has read it)
    unsigned short* own = hb + nbuf * BP * KP;                             // B x U: this CTA's new h, to broadcast
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3, odd = t & 1;

    for (int i = threadIdx.x; i < R * KP; i += PT) {
        const int r = i / KP, k = i % KP, u = r / 4, gate = r % 4;
        Ws[i] = k < H ? w[(long long)(gate * H + j0 + u) * H + k] : (unsigned short)0;
    }
    for (int i = threadIdx.x; i < nbuf * BP * KP; i += PT) {
        const int buf = i / (BP * KP), b = (i / KP) % BP, k = i % KP;
        hb[i] = (buf == 0 && b < B && k < H) ? bf16_bits(h0[b * H + k]) : (unsigned short)0;
    }
    // This lane's cells: for each of its tiles q (tile = warp + 16 q), batch row and unit after the gate shuffle.
    float cst[4];
    int cb[4], cu[4];
    int my = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int tile = warp + NWARPS * q;
        const int mt = tile / NT, nt = tile % NT;
        cb[q] = mt * 16 + g + 8 * odd;
        cu[q] = nt * 2 + (t >> 1);
        my += tile < tiles;
        cst[q] = (tile < tiles && cb[q] < B) ? c0[cb[q] * H + j0 + cu[q]] : 0.0f;
    }
    cluster_sync_all();   // every CTA's buffers are ready before any peer stores into them

    for (int s = 0; s < T; ++s) {
        const unsigned short* hcur = hb + (single ? 0 : (s & 1)) * BP * KP;
        unsigned short* hnext = hb + (single ? 0 : ((s + 1) & 1)) * BP * KP;
        float gx[4][4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const bool live = q < my && cb[q] < B;
            const float* src = gates_x + ((long long)s * B + (live ? cb[q] : 0)) * 4 * H + j0 + cu[q];
#pragma unroll
            for (int gate = 0; gate < 4; ++gate) gx[q][gate] = live ? __ldg(src + gate * H) : 0.0f;
        }
        float acc[4][4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[q][e] = 0.0f;
        if (!(ablate & 1)) {
            for (int k0 = 0; k0 < H; k0 += 16) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if (q >= my) break;
                    const int tile = warp + NWARPS * q, mt = tile / NT, nt = tile % NT;
                    const uint2 lo = *reinterpret_cast<const uint2*>(hcur + (mt * 16 + g) * KP + k0 + 4 * t);
                    const uint2 hi = *reinterpret_cast<const uint2*>(hcur + (mt * 16 + g + 8) * KP + k0 + 4 * t);
                    const uint2 wb = *reinterpret_cast<const uint2*>(Ws + (nt * 8 + g) * KP + k0 + 4 * t);
                    const unsigned a[4] = {lo.x, hi.x, lo.y, hi.y};
                    const unsigned b[2] = {wb.x, wb.y};
                    mma_bf16(acc[q], a, b);
                }
            }
        }
        if (single && !(ablate & 4)) asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            // even lanes: gates 0,1 of their unit at batch g (c0, c1) + the partner's gates 2,3 there;
            // odd lanes: the partner's gates 0,1 at batch g + 8 + their own gates 2,3 there (c2, c3)
            const float s0 = odd ? acc[q][0] : acc[q][2], s1 = odd ? acc[q][1] : acc[q][3];
            const float r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
            if (q >= my || cb[q] >= B) continue;
            const float p0 = (odd ? r0 : acc[q][0]) + gx[q][0], p1 = (odd ? r1 : acc[q][1]) + gx[q][1];
            const float p2 = (odd ? acc[q][2] : r0) + gx[q][2], p3 = (odd ? acc[q][3] : r1) + gx[q][3];
            const float ig = sigm(p0), fg = sigm(p1), gg = tanhf(p2), og = sigm(p3);
            cst[q] = fg * cst[q] + ig * gg;
            const float h = og * tanhf(cst[q]);
            hs[((long long)s * B + cb[q]) * H + j0 + cu[q]] = h;
            own[cb[q] * U + cu[q]] = bf16_bits(h);
        }
        __syncthreads();   // own is complete
        if (single && !(ablate & 4)) asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
        if (!(ablate & 2)) {
            const int per_row = U / 8, chunks = B * per_row;
            for (int i = threadIdx.x; i < chunks * CS; i += PT) {
                const int dest = i / chunks, chunk = i % chunks, b = chunk / per_row, c8 = chunk % per_row;
                const uint4 v = *reinterpret_cast<const uint4*>(own + b * U + c8 * 8);
                st_cluster_v4(map_to_rank(smem_u32(hnext + b * KP + j0 + c8 * 8), dest), v);
            }
        }
        if (ablate & 4) __syncthreads();
        else cluster_sync_all();
    }
    cluster_sync_all();   // no CTA leaves while a peer may still store into its shared memory
#pragma unroll
    for (int q = 0; q < 4; ++q)
        if (q < my && cb[q] < B) c_last[cb[q] * H + j0 + cu[q]] = cst[q];
}
"""


class _Attr(ctypes.Structure):   # CUlaunchAttribute: id, 4 pad bytes, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("rest", ctypes.c_char * 52)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("nattrs", ctypes.c_uint)]


CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14


def bf16_round(x):
    """float32 -> bfloat16 (round to nearest even), as float32 values."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def reference(gx, w, h0, c0):
    """The LSTM forward with W and h rounded to bfloat16 before each product (float64 sums)."""
    T, B, G = gx.shape
    H = G // 4
    wb, h, c = bf16_round(w).astype(np.float64), h0.astype(np.float64), c0.astype(np.float64)
    out = np.empty((T, B, H))
    sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
    for s in range(T):
        pre = gx[s] + bf16_round(h.astype(np.float32)).astype(np.float64) @ wb.T
        i, f, g, o = (pre[:, k * H:(k + 1) * H] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        out[s] = h
    return out, c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batches", default="32,64")
    ap.add_argument("--cluster", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    import cupy

    H, CS = args.hidden, args.cluster
    U = H // CS
    assert H % 64 == 0 and H % CS == 0 and U % 8 == 0, "H % 64, H % cluster and U % 8 must be 0"
    kernel = cupy.RawKernel(SOURCE, "cluster_lstm_forward", options=("-std=c++17",))
    func = kernel.kernel.ptr
    if CS > 8:
        cupy.cuda.driver.funcSetAttribute(func, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    libcuda = ctypes.CDLL("libcuda.so.1")
    launch_ex = libcuda.cuLaunchKernelEx
    launch_ex.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    launch_ex.restype = ctypes.c_int
    print(f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: H {H}, cluster {CS} CTAs of 512 threads, "
          f"{U} units each", flush=True)

    rng = np.random.default_rng(0)
    w = (rng.uniform(-1, 1, (4 * H, H)) / np.sqrt(H)).astype(np.float32)
    w_bits = cupy.asarray(bf16_round(w).view(np.uint32) >> 16).astype(cupy.uint16)

    def run(gx_d, h0_d, c0_d, hs_d, cl_d, T, B, ablate):
        BP = (B + 15) // 16 * 16
        single = int(2 * (4 * U * (H + 16) + 2 * BP * (H + 16) + B * U) > 232448)
        smem = 2 * (4 * U * (H + 16) + (2 - single) * BP * (H + 16) + B * U)
        kernel.max_dynamic_shared_size_bytes = smem
        attr = _Attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, b"", CS, 1, 1, b"")
        cfg = _Config(CS, 1, 1, 512, 1, 1, smem, cupy.cuda.get_current_stream().ptr, ctypes.pointer(attr), 1)
        vals = [ctypes.c_void_p(a.data.ptr) for a in (gx_d, w_bits, h0_d, c0_d, hs_d, cl_d)] + \
               [ctypes.c_int(v) for v in (T, B, H, ablate, single)]
        params = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
        err = launch_ex(ctypes.byref(cfg), ctypes.c_void_p(func), params, None)
        if err:
            raise RuntimeError(f"cuLaunchKernelEx failed: CUresult {err} (smem {smem} bytes)")
        return smem, single

    for B in (int(b) for b in args.batches.split(",")):
        # correctness first (T = 12), then the timings
        T = 12
        gx = rng.standard_normal((T, B, 4 * H)).astype(np.float32) * 0.5
        h0 = rng.standard_normal((B, H)).astype(np.float32) * 0.3
        c0 = rng.standard_normal((B, H)).astype(np.float32) * 0.3
        dev = [cupy.asarray(a) for a in (gx, h0, c0)]
        hs_d, cl_d = cupy.zeros((T, B, H), cupy.float32), cupy.zeros((B, H), cupy.float32)
        smem, single = run(*dev, hs_d, cl_d, T, B, 0)
        cupy.cuda.Device().synchronize()
        ref_h, ref_c = reference(gx, w, h0, c0)
        err_h = float(np.abs(cupy.asnumpy(hs_d) - ref_h).max())
        err_c = float(np.abs(cupy.asnumpy(cl_d) - ref_c).max())
        print(f"B {B}: {smem // 1024} KB of shared memory a CTA, {2 - single} h buffer(s); max |h - ref| {err_h:.2e}, |c - ref| {err_c:.2e} "
              f"({'ok' if err_h < 2e-3 and err_c < 5e-3 else 'WRONG'})", flush=True)
        for ablate, name in ((0, "whole"), (1, "no product"), (2, "no broadcast"), (4, "no cluster barrier"),
                             (3, "no product, no broadcast"), (7, "barrier-free shell")):
            per_T = {}
            for T in (8, 40, 72):
                gx_d = cupy.asarray(rng.standard_normal((T, B, 4 * H)).astype(np.float32) * 0.5)
                hs_d = cupy.zeros((T, B, H), cupy.float32)
                run(gx_d, dev[1], dev[2], hs_d, cl_d, T, B, ablate)
                times = []
                for _ in range(args.repeats):
                    start, end = cupy.cuda.Event(), cupy.cuda.Event()
                    start.record()
                    run(gx_d, dev[1], dev[2], hs_d, cl_d, T, B, ablate)
                    end.record()
                    end.synchronize()
                    times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
                per_T[T] = float(np.median(times))
            slope = (per_T[72] - per_T[8]) / 64
            print(f"  B {B} {name:26s} " + " ".join(f"T={T}: {v:8.1f} us" for T, v in per_T.items())
                  + f"   {slope:.2f} us a step", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
