"""Probe for issue 24: what the exchange of the state between the CTAs of a persistent RNN step costs, alone, in
four designs (no product, no cell: only what every step of kernels/rnn_persistent.cu does to hand h from the CTAs
that made it to all the CTAs that read it).

The persistent forward in bf16 (benchmarks/results/gpu_rnn.md, session 20's trace) spends ~6.6 us a step at batch 32,
H = 512, of which the product is ~1 us: the rest is a chain of latencies. Of it, the exchange is: each CTA writes
its U units of h (bfloat16) to a global array, __syncthreads, one thread fences and adds 1 to a global counter
("arrive", ~0.4 us), waits until the counter says every CTA has arrived ("barrier wait", ~0.8), and then every CTA
stages all of h (B x H bfloat16, 32 KB at B32) from L2 into shared memory with cp.async ("first chunk landed"
~1.4 us, and the product waits on the second chunk). Session 20 named the next lever: fewer round trips a step, e.g.
flags carried with the data. This probe measures that before the kernels are rewritten for it. Designs:

- counter: today's kernels, as above (cp.async.cg, 16 bytes a thread, chunks of 256 columns, every chunk in flight).
- ll: no counter and no fence. Each 8-byte word of the exchange carries 2 bfloat16 values and the step's flag (the
  "LL" protocol of NCCL: an aligned 8-byte store is single-copy atomic, so a reader that sees the flag sees the data).
  A reader loads the words it stages (16 bytes: 2 words) and loads again any whose flag is not yet this step's: the
  wait and the staging are one round trip. Twice the bytes through L2 (the flags). Two slots, flag = step + 1, so a
  word of step s - 2 never passes for one of step s.
- mcastN: the counter as today, then the staging by Hopper's bulk copy (cp.async.bulk ... multicast::cluster, no
  tensor map) in clusters of N CTAs: each CTA of a cluster copies 1/N of the rows and the copy lands in every CTA of
  the cluster (an mbarrier per chunk counts the bytes). L2 serves each row to N CTAs at once: 1/N of the reads.
- the parts of `counter` alone: its barrier without the staging ("counter, no staging") and its staging without the
  barrier ("staging only": the data are then wrong and not checked).

Every CTA checks all the state it staged, every step, against the values the writers made (a step- and
position-dependent pattern): a design that loses or mixes up data counts errors and says so; the check's cost (16
warps reading 32 KB of shared memory, about what the product reads) is in every design alike. Grid: H / U CTAs of 512
threads, one a SM (120 KB of shared memory each), as the real kernels run. Timed: the kernel at T = 16 and T = 80
(median of --repeats launches each); the slope is the cost of one step.

    python3 benchmarks/probe_rnn_exchange.py [--hidden 512] [--batches 32,64] [--units 4,8] [--repeats 15]

The kernels are inline, compiled here; not part of the library.
"""
from __future__ import annotations

import argparse
import ctypes
import sys

import numpy as np

SOURCE = r"""
constexpr int PT = 512;
constexpr int CHUNK = 256;            // columns of a staged chunk (the kernels' PKC_H)
constexpr int ROW = CHUNK + 16;       // its padded row in halves (the kernels' PKCPH)

__device__ __forceinline__ unsigned pattern(int s, int b, int k) { return (unsigned)(s * 131 + b * 7 + k * 3) & 0xffffu; }
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned load_acquire(const unsigned* p)
{
    unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}

// the writers' part: this CTA's units j0 .. j0 + U - 1 of step s, as bfloat16 bits, into the slot of step s
__device__ __forceinline__ void write_own(unsigned short* slot, int s, int B, int H, int U, int j0)
{
    for (int e = threadIdx.x; e < B * U; e += PT) {
        const int b = e / U, k = j0 + e % U;
        slot[b * H + k] = (unsigned short)pattern(s, b, k);
    }
}

__device__ __forceinline__ void counter_barrier(unsigned* counter, unsigned target, bool red_release = false)
{
    __syncthreads();
    if (threadIdx.x == 0 && red_release) {   // the fence and the add as one release reduction, no fence after the wait
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter) : "memory");
        const long long start = clock64();
        while (load_acquire(counter) < target) {
            if (clock64() - start > (1LL << 32)) __trap();
        }
    } else if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        const long long start = clock64();
        while (load_acquire(counter) < target) {
            if (clock64() - start > (1LL << 32)) __trap();   // ~2 s: the grid is not co-resident
        }
        __threadfence();
    }
    __syncthreads();
}

// every element of the staged state against the writers' pattern (64-bit reads of shared memory); errors counted
__device__ __forceinline__ void check(const unsigned short* ring, int s, int B, int H, int* errors)
{
    int bad = 0;
    for (int i = threadIdx.x; i < B * H / 4; i += PT) {
        const int b = i / (H / 4), k = 4 * (i % (H / 4)), chunk = k / CHUNK;
        const uint2 v = *reinterpret_cast<const uint2*>(ring + (chunk * B + b) * ROW + k % CHUNK);
        bad += (v.x & 0xffffu) != pattern(s, b, k) || (v.x >> 16) != pattern(s, b, k + 1)
             || (v.y & 0xffffu) != pattern(s, b, k + 2) || (v.y >> 16) != pattern(s, b, k + 3);
    }
    if (bad) atomicAdd(errors, bad);
}

// A barrier without a shared counter: CTA c releases its own word, flag[c] = s + 1 (after __syncthreads: the CTA's
// writes before it), and threads 0 .. n - 1 of every CTA each wait for one CTA's word (ld.acquire; a warp's 32 words
// are one line, so a CTA's poll is n / 32 requests), then __syncthreads. No 128 atomics queue on one L2 address.
__device__ __forceinline__ void flag_barrier(unsigned* flag, unsigned s1)
{
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("st.release.gpu.global.u32 [%0], %1;" :: "l"(flag + blockIdx.x), "r"(s1) : "memory");
    if (threadIdx.x < gridDim.x) {
        const long long start = clock64();
        while (load_acquire(flag + threadIdx.x) < s1) {
            if (clock64() - start > (1LL << 32)) __trap();
        }
    }
    __syncthreads();
}

// flags: 1 no barrier, 2 no staging, 4 no check, 8 the barrier's arrival as red.release (no __threadfence), 16 the
// barrier by a word a CTA (flag_barrier; `counter` holds the words)
extern "C" __global__ void __launch_bounds__(PT, 1)
xchg_counter(unsigned short* xchg, unsigned* counter, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int j0 = blockIdx.x * U, chunks = H / CHUNK;
    for (int s = 0; s < T; ++s) {
        unsigned short* slot = xchg + (size_t)(s & 1) * B * H;
        write_own(slot, s, B, H, U, j0);
        if (flags & 16) flag_barrier(counter, (unsigned)(s + 1));
        else if (!(flags & 1)) counter_barrier(counter, gridDim.x * (unsigned)(s + 1), flags & 8);
        else __syncthreads();
        if (!(flags & 2)) {
            for (int i = threadIdx.x; i < chunks * B * (CHUNK / 8); i += PT) {   // 16 bytes a copy
                const int v = i % (CHUNK / 8), row = i / (CHUNK / 8), b = row % B, chunk = row / B;
                const unsigned short* src = slot + b * H + chunk * CHUNK + 8 * v;
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                             :: "r"(smem_u32(ring + (chunk * B + b) * ROW + 8 * v)), "l"(src));
            }
            asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
        }
        __syncthreads();
        if (!(flags & 4)) check(ring, s, B, H, errors);
        __syncthreads();
    }
}

// NCCL's LL protocol: word w of row b = (flag << 32) | columns 2w, 2w + 1; two slots of B x H/2 words
extern "C" __global__ void __launch_bounds__(PT, 1)
xchg_ll(unsigned long long* ll, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int j0 = blockIdx.x * U, W = H / 2;
    for (int s = 0; s < T; ++s) {
        unsigned long long* slot = ll + (size_t)(s & 1) * B * W;
        const unsigned long long flag = (unsigned long long)(s + 1) << 32;
        for (int e = threadIdx.x; e < B * (U / 4); e += PT) {    // two words (4 columns) a store
            const int b = e / (U / 4), k = j0 + 4 * (e % (U / 4));
            const unsigned long long w0 = flag | pattern(s, b, k) | (pattern(s, b, k + 1) << 16);
            const unsigned long long w1 = flag | pattern(s, b, k + 2) | (pattern(s, b, k + 3) << 16);
            asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" :: "l"(slot + b * W + k / 2), "l"(w0), "l"(w1)
                         : "memory");
        }
        // every thread reads 2 words (16 bytes) at a time, all of its loads in flight before it looks at any flag
        constexpr int MAXP = 16;   // pairs a thread (B * W / 2 / PT <= 16: B * H <= 32768)
        const int pairs = B * W / 2;
        unsigned long long got[MAXP][2];
#pragma unroll
        for (int q = 0; q < MAXP; ++q) {
            const int p = threadIdx.x + q * PT;
            if (p < pairs)
                asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(got[q][0]), "=l"(got[q][1])
                             : "l"(slot + 2 * p) : "memory");
        }
        const long long start = clock64();
#pragma unroll
        for (int q = 0; q < MAXP; ++q) {
            const int p = threadIdx.x + q * PT;
            if (p >= pairs) continue;
            while ((got[q][0] >> 32) != (flag >> 32) || (got[q][1] >> 32) != (flag >> 32)) {
                if (clock64() - start > (1LL << 32)) __trap();
                asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(got[q][0]), "=l"(got[q][1])
                             : "l"(slot + 2 * p) : "memory");
            }
            const int b = (2 * p) / W, k = 2 * ((2 * p) % W), chunk = k / CHUNK;
            *reinterpret_cast<uint2*>(ring + (chunk * B + b) * ROW + k % CHUNK) =
                make_uint2((unsigned)got[q][0], (unsigned)got[q][1]);
        }
        __syncthreads();
        if (!(flags & 4)) check(ring, s, B, H, errors);
        __syncthreads();
    }
}

// a flag a writer (no counter): CTA c writes its slice (B x U, contiguous: the exchange laid out writer by writer),
// then one thread releases flag[c] = s + 1. A reader's threads split the writers (PT / n threads each): they wait for
// their writer's flag, then load its slice (16 bytes a thread at a time, through L2) into the ring. No CTA waits for
// all of them at one point: a slice is fetched as soon as its writer is done.
extern "C" __global__ void __launch_bounds__(PT, 1)
xchg_flags(unsigned short* xchg, unsigned* flag, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int c = blockIdx.x, n = gridDim.x, j0 = c * U, G = PT / n, p = threadIdx.x / G, lane = threadIdx.x % G;
    const int pieces = B * U / 8;   // 16-byte pieces of a slice
    for (int s = 0; s < T; ++s) {
        unsigned short* slot = xchg + (size_t)(s & 1) * B * H;
        for (int e = threadIdx.x; e < B * U; e += PT) slot[c * B * U + e] = (unsigned short)pattern(s, e / U, j0 + e % U);
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" :: "l"(flag + c), "r"((unsigned)(s + 1)) : "memory");
        }
        if (p < n) {
            const long long start = clock64();
            while (load_acquire(flag + p) < (unsigned)(s + 1)) {
                if (clock64() - start > (1LL << 32)) __trap();
            }
            const uint4* src = reinterpret_cast<const uint4*>(slot + p * B * U);
            for (int q = lane; q < pieces; q += G) {
                const uint4 v = __ldcg(src + q);
                const unsigned w[4] = {v.x, v.y, v.z, v.w};
                // piece q: elements 8q .. 8q + 7 of the slice, (b, u) = (e / U, e % U), U % 4 == 0: runs of 4
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int e = 8 * q + 4 * r, b = e / U, k = p * U + e % U, chunk = k / CHUNK;
                    *reinterpret_cast<uint2*>(ring + (chunk * B + b) * ROW + k % CHUNK) = make_uint2(w[2 * r], w[2 * r + 1]);
                }
            }
        }
        __syncthreads();
        if (!(flags & 4)) check(ring, s, B, H, errors);
        __syncthreads();
    }
}

// the counter as today, the exchange laid out writer by writer: CTA c's B x U values contiguous in global memory (its
// own lines, written by one SM) and in shared memory (a padded run per writer: WSTRIDE halves), copied 16 bytes at a
// time with no scatter. Value (b, k) of writer c = k / U sits at c * WSTRIDE + b * U + k % U in shared memory (U % 4
// == 0: the product's 64-bit fragment loads, 4 columns of one row, stay within one writer's run).
extern "C" __global__ void __launch_bounds__(PT, 1)
xchg_wmajor(unsigned short* xchg, unsigned* counter, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int c = blockIdx.x, n = gridDim.x, j0 = c * U, run = B * U, WSTRIDE = run + 16;   // (+8 words: 8 mod 32)
    for (int s = 0; s < T; ++s) {
        unsigned short* slot = xchg + (size_t)(s & 1) * B * H;
        for (int e = threadIdx.x; e < run; e += PT) slot[c * run + e] = (unsigned short)pattern(s, e / U, j0 + e % U);
        counter_barrier(counter, n * (unsigned)(s + 1), flags & 8);
        for (int i = threadIdx.x; i < n * run / 8; i += PT) {   // 16 bytes a copy
            const int w = i / (run / 8), q = i % (run / 8);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                         :: "r"(smem_u32(ring + w * WSTRIDE + 8 * q)), "l"(slot + w * run + 8 * q));
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        if (!(flags & 4)) {
            int bad = 0;
            for (int i = threadIdx.x; i < B * H / 4; i += PT) {
                const int b = i / (H / 4), k = 4 * (i % (H / 4)), w = k / U;
                const uint2 v = *reinterpret_cast<const uint2*>(ring + w * WSTRIDE + b * U + k % U);
                bad += (v.x & 0xffffu) != pattern(s, b, k) || (v.x >> 16) != pattern(s, b, k + 1)
                     || (v.y & 0xffffu) != pattern(s, b, k + 2) || (v.y >> 16) != pattern(s, b, k + 3);
            }
            if (bad) atomicAdd(errors, bad);
        }
        __syncthreads();
    }
}

// A counter a staged chunk (CTA c arrives on the counter of the chunk its units fall in, counter + 32 * chunk: one line
// each), and each chunk's copies issued as soon as its own writers have arrived: the first chunk's staging overlaps
// the wait for the second chunk's writers, and half as many atomics queue on each address.
extern "C" __global__ void __launch_bounds__(PT, 1)
xchg_chunked(unsigned short* xchg, unsigned* counter, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int j0 = blockIdx.x * U, chunks = H / CHUNK, per_chunk = CHUNK / U;   // writers a chunk
    for (int s = 0; s < T; ++s) {
        unsigned short* slot = xchg + (size_t)(s & 1) * B * H;
        write_own(slot, s, B, H, U, j0);
        __syncthreads();
        if (threadIdx.x == 0)
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(counter + 32 * (j0 / CHUNK)) : "memory");
        for (int chunk = 0; chunk < chunks; ++chunk) {
            if (threadIdx.x == 0) {
                const long long start = clock64();
                while (load_acquire(counter + 32 * chunk) < per_chunk * (unsigned)(s + 1)) {
                    if (clock64() - start > (1LL << 32)) __trap();
                }
            }
            __syncthreads();
            for (int i = threadIdx.x; i < B * (CHUNK / 8); i += PT) {   // 16 bytes a copy
                const int v = i % (CHUNK / 8), b = i / (CHUNK / 8);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                             :: "r"(smem_u32(ring + (chunk * B + b) * ROW + 8 * v)), "l"(slot + b * H + chunk * CHUNK + 8 * v));
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        }
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        if (!(flags & 4)) check(ring, s, B, H, errors);
        __syncthreads();
    }
}

#ifdef CLUSTER
// the counter, then the rows staged by bulk copies multicast to the CLUSTER CTAs of the cluster
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(PT, 1)
xchg_mcast(unsigned short* xchg, unsigned* counter, int T, int B, int H, int U, int* errors, int flags)
{
    extern __shared__ __align__(16) unsigned short ring[];
    const int j0 = blockIdx.x * U, chunks = H / CHUNK;
    unsigned long long* mbar = reinterpret_cast<unsigned long long*>(ring + chunks * B * ROW);   // one a chunk
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (threadIdx.x == 0) {
        for (int c = 0; c < chunks; ++c) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(mbar + c)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    const int rows = (B - (int)rank + CLUSTER - 1) / CLUSTER;   // this CTA's rows of a chunk: rank, rank + CLUSTER, ...
    for (int s = 0; s < T; ++s) {
        unsigned short* slot = xchg + (size_t)(s & 1) * B * H;
        write_own(slot, s, B, H, U, j0);
        counter_barrier(counter, gridDim.x * (unsigned)(s + 1));
        if (threadIdx.x < chunks) {   // this step's bytes, expected by each chunk's mbarrier (all rows, every CTA's copies)
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(smem_u32(mbar + threadIdx.x)), "r"(B * CHUNK * 2) : "memory");
        }
        if (threadIdx.x < chunks * rows) {
            const int chunk = threadIdx.x / rows, b = (int)rank + CLUSTER * (threadIdx.x % rows);
            asm volatile("fence.proxy.async.global;" ::: "memory");   // the generic writes (acquired) before the async reads
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                         " [%0], [%1], %2, [%3], %4;"
                         :: "r"(smem_u32(ring + (chunk * B + b) * ROW)), "l"(slot + b * H + chunk * CHUNK),
                            "r"(CHUNK * 2), "r"(smem_u32(mbar + chunk)), "h"((unsigned short)((1u << CLUSTER) - 1))
                         : "memory");
        }
        for (int c = 0; c < chunks; ++c) {
            unsigned done = 0;
            const long long start = clock64();
            while (!done) {
                asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                             : "=r"(done) : "r"(smem_u32(mbar + c)), "r"((unsigned)(s & 1)) : "memory");
                if (clock64() - start > (1LL << 32)) __trap();
            }
        }
        if (!(flags & 4)) check(ring, s, B, H, errors);
        __syncthreads();
    }
    // no CTA leaves while a peer's copy may still write into its shared memory
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
#endif
"""


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("nattrs", ctypes.c_uint)]


SMEM = 120 * 1024   # one CTA a SM, as the real kernels run


def max_active_clusters(kernel) -> int:
    """cuOccupancyMaxActiveClusters for the kernel's compile-time cluster at SMEM bytes, 512 threads (0 if unknown)."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    fn = libcuda.cuOccupancyMaxActiveClusters
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(_Config)]
    fn.restype = ctypes.c_int
    n = ctypes.c_int(0)
    cfg = _Config(132, 1, 1, 512, 1, 1, SMEM, None, None, 0)
    err = fn(ctypes.byref(n), ctypes.c_void_p(kernel.kernel.ptr), ctypes.byref(cfg))
    return n.value if err == 0 else -err


def launch(k, kname, n, B, H, U, T, flags, xchg, ll, counter, errors):
    """One launch of design `kname` on n CTAs (SMEM bytes of shared memory each)."""
    ints = [np.int32(v) for v in (T, B, H, U)]
    if kname == "ll":
        k((n,), (512,), (ll, *ints, errors, np.int32(flags)), shared_mem=SMEM)
    elif kname == "flags":   # (the counter array holds the writers' flags: n words)
        k((n,), (512,), (xchg, counter, *ints, errors, np.int32(flags)), shared_mem=SMEM)
    else:
        k((n,), (512,), (xchg, counter, *ints, errors, np.int32(flags)), shared_mem=SMEM)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--batches", default="32,64")
    ap.add_argument("--units", default="4,8", help="units a CTA (H / units CTAs)")
    ap.add_argument("--clusters", default="2", help="cluster sizes for mcast (4 is not co-resident at 128 CTAs: "
                                                         "30 clusters of 4 on an H200)")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args(argv)
    import cupy

    H = args.hidden
    assert H % 256 == 0, "H must be a multiple of 256 (the staged chunk)"
    kernels = {name: cupy.RawKernel(SOURCE, f"xchg_{name}", options=("-std=c++17",))
               for name in ("counter", "ll", "flags", "wmajor", "chunked")}
    for cs in (int(c) for c in args.clusters.split(",") if c):
        kernels[f"mcast{cs}"] = cupy.RawKernel(SOURCE, "xchg_mcast",
                                               options=("-std=c++17", "-arch=sm_90a", f"-DCLUSTER={cs}"))
    for k in kernels.values():
        k.max_dynamic_shared_size_bytes = SMEM
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"{props['name'].decode()} ({props['multiProcessorCount']} SMs), H {H}, CTAs of 512 threads, "
          f"{SMEM // 1024} KB of shared memory each; us a step = slope between T = 16 and T = 80, median of "
          f"{args.repeats} launches", flush=True)
    for name, k in kernels.items():
        if name.startswith("mcast"):
            print(f"  {name}: cuOccupancyMaxActiveClusters = {max_active_clusters(k)}", flush=True)

    counter = cupy.zeros(1024, cupy.uint32)   # (the flags design: a word a writer)
    errors = cupy.zeros(1, cupy.int32)
    designs = [("counter", "counter", 0), ("counter, no staging", "counter", 2 | 4), ("staging only", "counter", 1 | 4),
               ("empty loop", "counter", 1 | 2 | 4), ("counter, red.release", "counter", 8),
               ("red.release, no staging", "counter", 8 | 2 | 4), ("flag barrier", "counter", 16),
               ("flag barrier, no staging", "counter", 16 | 2 | 4), ("a counter a chunk", "chunked", 0),
               ("counter, writer-major", "wmajor", 0), ("writer-major, red.release", "wmajor", 8), ("ll", "ll", 0),
               ("flags", "flags", 0)]
    designs += [(name, name, 0) for name in kernels if name.startswith("mcast")]
    for B in (int(b) for b in args.batches.split(",")):
        for U in (int(u) for u in args.units.split(",")):
            n = H // U
            assert U % 4 == 0 and H % U == 0 and B * H <= 32768
            xchg = cupy.zeros(2 * B * H, cupy.uint16)
            ll = cupy.zeros(B * H, cupy.uint64)   # two slots of B x H/2 words
            print(f"B {B}, U {U}: {n} CTAs", flush=True)
            for label, kname, flags in designs:
                k = kernels[kname]
                if kname.startswith("mcast") and n % int(kname[5:]):
                    continue
                per_T = {}
                try:
                    errors.fill(0)
                    for T in (16, 80):
                        times = []
                        for r in range(args.repeats + 1):   # (the first: warm-up)
                            counter.fill(0)
                            ll.fill(0)
                            start, end = cupy.cuda.Event(), cupy.cuda.Event()
                            start.record()
                            launch(k, kname, n, B, H, U, T, flags, xchg, ll, counter, errors)
                            end.record()
                            end.synchronize()
                            if r:
                                times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
                        per_T[T] = float(np.median(times))
                    bad = int(errors.get()[0])
                except (RuntimeError, cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError) as e:
                    # (a design that traps ends the CUDA context: report and stop)
                    print(f"  {label:22s} FAILED: {type(e).__name__}: {e}", flush=True)
                    return 1
                slope = (per_T[80] - per_T[16]) / 64
                verdict = "" if flags & 4 else (", data ok" if bad == 0 else f", {bad} WRONG elements")
                print(f"  {label:22s} T=16 {per_T[16]:8.1f} us, T=80 {per_T[80]:8.1f} us: {slope:6.2f} us a step"
                      f"{verdict}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
