// rnn_persistent.cu: the persistent algorithm of the RNN primitive (vanilla RNN, LSTM, GRU). One launch
// runs ALL time steps of one layer, both directions, forward or backward; the recurrent weights are
// read from global memory once and stay in shared memory for the whole sequence.
//
// Why (Diamos et al., "Persistent RNNs", ICML 2016; cuDNN's CUDNN_RNN_ALGO_PERSIST_*): a step of an
// RNN is a skinny GEMM (batch x 4H x H, e.g. 32 x 2048 x 512) and a pointwise cell. The standard
// algorithm (kernels/rnn.cu) launches a GEMM and a cell kernel per step, and each GEMM reads all of
// W_hh (4 MB at H = 512) from L2 again: the step costs launches and bandwidth, not arithmetic. Here
// every CTA owns a slice of hidden units for the whole run and keeps the weights that slice needs on
// chip; between steps the CTAs exchange only the new state h (B x H floats) through L2.
//
// Work split (CTA c of a direction owns hidden units j0 = c * U ... j0 + U - 1, U = `units`):
//   forward   gates_h[b, g*H + j] = sum_k h[b, k] W_hh[g*H + j, k]  for its j and all G gates: the rows
//             of W_hh it needs, G*U x H, sit in shared memory. All gates of a unit are in one CTA, so
//             the cell (kernels/rnn_cell.cuh) runs right after the product, in the same CTA.
//   backward  dh[b, j] = sum_k dgates_h[b, k] W_hh[k, j]  for its j: the COLUMNS of W_hh it needs,
//             U x G*H, sit in shared memory; the cell's backward follows, again for its own units.
//             The LSTM's dc and the part of dh that skips W_hh (GRU: z * dh) never leave the CTA.
//             (That is the staged backward. The LSTM and the GRU mostly run the partial-sum backward instead,
//             persistent_backward_partial below: the G*U rows of the forward, each CTA's own dgates times them, and
//             the CTAs' partial dh summed by the owner of each unit.)
// So each step is: stage the state written by every CTA at the last step (L2 -> shared memory, in
// chunks of PKC columns through a ring of NBUF buffers filled by cp.async, so that the next chunks are in
// flight while one is multiplied), a small product on the tensor cores (mma.sync TF32, three of them per
// tile for fp32 accuracy; see block_product), the cell, and one grid-wide barrier. The cell's other
// operands (this step's input projection; in backward the saved gates, states and dy) are fetched with
// the first chunk, and the CTA's own slice of the state (h, and the LSTM's c) stays in shared memory
// across steps, so the cell waits on no global load.
//
// The barrier: all CTAs must be resident at once (the launcher keeps the grid at most one CTA per SM,
// __launch_bounds__(PT, 1)). Each CTA adds 1 to its direction's global counter (zeroed before the
// launch; the two directions never wait for each other) and waits until it reaches the direction's CTA
// count * (barrier number + 1): the counter only grows, so no reset is needed and no
// CTA can run a barrier ahead. Writes before the barrier are published by the add itself, a release reduction
// (red.release.gpu: arrive_release below), and reads after it go to L2 (__ldcg), never the non-coherent L1. As in
// cooperative groups' grid sync. A CTA that waits too long (a grid that was not co-resident: a launcher bug) traps,
// which ends the process with a CUDA error instead of hanging it.
//
// Both directions of a bidirectional layer run in the same launch: CTAs 0 .. S-1 run direction 0 and
// S .. 2S-1 direction 1 (at time T-1-s at its step s), each group through its own counter.
// The wavefront (wave = 1) uses the same two groups for two stacked layers of one direction. Forward, group 0 runs
// layer l and group 1 layer l + 1. Layer l's CTAs stage h_l[s - 1] = y_l[s - 1] at their step s anyway: they multiply
// it by the rows of layer l + 1's W_ih for their units too (in shared memory beside their W_hh rows) and write that
// part of layer l + 1's gates_x[s - 1] (one step more at the end, s = T, for gates_x[T - 1]). Before its step t,
// layer l + 1 waits (wait_layer) until every CTA of layer l is past step t + 1; its step is then a single layer's.
// Layer l never waits for layer l + 1. Backward, group 0 runs layer l + 1 and group 1 layer l. Where dgates_x is
// dgates_h (LSTM, RNN) the same trick runs the other way: layer l + 1's CTAs stage its dgates[t] anyway, multiply them
// by their units' columns of its W_ih too and write layer l's dy[t] (DirBackward::dy_low), which layer l reads once
// layer l + 1 is past that step. The GRU's layer l + 1 stages dgates_h, not dgates_x: there layer l's product adds
// dgates_x[t] @ W_ih (its dy) to dgates_h @ W_hh itself. block_product takes the two operands as they lie (Operand:
// fp32, or the bfloat16 exchange), staged through one ring. Launcher: rnn_persistent.py.
// Batch groups (nb > 1, "Batch groups" below): the batch split between nb independent sets of the above, each with its
// own rows, counters and 1/nb of the SMs, so that a CTA stages 1/nb of the exchanged state a step.
// Padded batches (lengths != nullptr) follow rnn.cu exactly (the same rnn_cell.cuh functions).
// Data and state are fp32 throughout; the recurrent product runs as 3xTF32 (math = 0, fp32 accuracy),
// plain TF32 (math = 1, like the standard algorithm's TF32 GEMMs) or bfloat16 (math = 2; W then sits in shared
// memory already rounded to bfloat16, stage_w: half the bytes a step reads of it, and no conversion of W per step;
// and the CTAs exchange the state (forward, from the second step) and dgates_h (backward) as bfloat16 too,
// DirForward/DirBackward::xchg: the cell rounds once, with the cvt.rn the product applied to the fp32 array before,
// so the same bits reach the mma from half the bytes staged, in chunks of PKC_H columns).
#include "rnn_cell.cuh"
#include "tc_common.cuh"  // cp.async

using minidl_tc::cp_async16;
using minidl_tc::cp_async4;
using minidl_tc::cp_async_commit;
using minidl_tc::cp_async_wait;
using minidl_tc::smem_addr;

// Phase timestamps (benchmarks/trace_rnn_persistent.py; compiled in only with -DPERSIST_TRACE): thread 0 of every CTA
// notes clock64() at up to 16 marks of a step (MARK) and copies them to persist_trace[CTA][step][mark] at the step's
// end (TRACE_STEP), for the first TRACE_CTAS CTAs and TRACE_STEPS steps. Only thread 0 writes and reads the marks: no
// barrier is added.
#ifdef PERSIST_TRACE
constexpr int TRACE_CTAS = 264, TRACE_STEPS = 80, TRACE_MARKS = 16;   // (the script's TRACE_CTAS, ...)
__device__ long long persist_trace[TRACE_CTAS * TRACE_STEPS * TRACE_MARKS];
__shared__ long long trace_mark[TRACE_MARKS];
#define MARK(p)                                          \
    do {                                                 \
        if (threadIdx.x == 0) trace_mark[p] = clock64(); \
    } while (0)
#define TRACE_STEP(s)                                                                                           \
    do {                                                                                                        \
        if (threadIdx.x == 0 && (s) < TRACE_STEPS && blockIdx.x < TRACE_CTAS)                                    \
            for (int m_ = 0; m_ < TRACE_MARKS; ++m_) {                                                          \
                persist_trace[((long long)blockIdx.x * TRACE_STEPS + (s)) * TRACE_MARKS + m_] = trace_mark[m_]; \
                trace_mark[m_] = 0;                                                                             \
            }                                                                                                   \
    } while (0)
#else
#define MARK(p) \
    do {        \
    } while (0)
#define TRACE_STEP(s) \
    do {              \
    } while (0)
#endif

// Other CTA sizes and ring depths: benchmarks/trace_rnn_persistent.py --pt / --nbuf (the launcher's PT, NBUF
// follow), and the launcher's backward_threads (PT / 2 for the wavefront's bf16 backward).
#ifndef PERSIST_PT
#define PERSIST_PT 512
#endif
#ifndef PERSIST_NBUF
#define PERSIST_NBUF 3
#endif
constexpr int PT = PERSIST_PT;    // threads per CTA (16 warps: 4 per scheduler, to hide latencies)
constexpr int NWARPS = PT / 32;
constexpr int PKC = 128;          // columns of the exchanged state per staged chunk
constexpr int PKCP = PKC + 8;     // padded row of a chunk buffer: 8 mod 32 words, so the 64-bit fragment
                                  // loads of a half-warp hit 32 different banks
constexpr int PKC_H = 2 * PKC;    // columns per staged chunk of the bfloat16 exchange (the backward in bf16 mode): the
                                  // bytes of an fp32 chunk, so half as many chunks (and barriers of the CTA) per step
constexpr int PKCPH = PKC_H + 16; // its padded row in halves: 136 words, 8 mod 32 like PKCP, so a half-warp's 64-bit
                                  // loads of four rows hit 32 different banks; BP rows fill exactly one fp32 buffer
constexpr int NBUF = PERSIST_NBUF;  // chunk buffers: NBUF - 1 chunks in flight while one is multiplied
constexpr int RED = 4096;         // floats of the partial-sum buffer
constexpr int MODE_RNN = 0, MODE_LSTM = 1, MODE_GRU = 2;
constexpr int GATHER = 8;         // the partial-sum backward: loads of other CTAs' partials in flight per thread

// Per-direction arguments, picked by the CTA's direction.
struct DirForward {
    const float* gates_x;  // (T, B, G*H): layer_input @ W_ih^T, no bias
    const float* w_hh;     // (G*H, H)
    const float* b_ih;     // (G*H) or nullptr
    const float* b_hh;
    float* hs;             // (T+1, B, H): forward hs[t] -> hs[t+1], reverse hs[t+1] -> hs[t]
    float* cs;             // (T+1, B, H), LSTM only
    float* saved;          // (T, B, 4H): LSTM [i, f, g, o], GRU [r, z, n, h_n]; nullptr in inference
    float* y;              // y + this direction's column offset; row (t, b) at y + (t * B + b) * y_ld
    unsigned short* xchg;  // (slots, B, H) bfloat16, math = 2: each step's h rounded as the product rounds it, what the
                           // CTAs stage from the second step on (as DirBackward::xchg); slot s % slots written at step s
    long long slots;       // 2
    // The wavefront (wave = 1: CTAs of group 0 run layer l, group 1 layer l + 1, of one direction, in one launch): the
    // lower layer also projects the upper layer's input. Its CTAs stage h_l[s - 1] = y_l[s - 1] at step s anyway, for
    // their own product; they multiply it by the upper layer's W_ih rows of their units too, and write that part of
    // the upper layer's gates_x[s - 1] (without bias, as the input GEMM writes it), which the upper layer reads as its
    // gates_x. The upper layer's step is then a single layer's.
    const float* w_ih;     // (G*H, H): the upper layer's input weights (lower layer only), or nullptr
    float* gx_up;          // (T, B, G*H): the upper layer's gates_x, written (lower layer only), or nullptr
};

struct DirBackward {
    const float* w_hh;     // (G*H, H)
    const float* hs;       // the forward pass's states, as above
    const float* cs;
    const float* saved;
    const float* dy;       // dy + column offset, or nullptr
    float* dgates_x;       // (T, B, G*H) out
    float* dgates_h;       // (T, B, G*H) out; the same array as dgates_x except for the GRU
    float* dh;             // (B, H): in dhy (or zeros), out dh0
    float* dc;             // (B, H), LSTM: in dcy, out dc0
    unsigned short* xchg;  // (slots, B, G*H) bfloat16, math = 2: dgates_h rounded as the product rounds it, what the
                           // CTAs stage (half the bytes of the fp32 array); slot s % slots written at step s; or nullptr
    long long slots;       // 2
    // The GRU's wavefront (wave = 1: group 0 runs layer l + 1, group 1 layer l, both back through time in one launch):
    // the lower layer's dy at t is the upper layer's input gradient, dgates_x[t] @ W_ih, which its product adds.
    const float* w_ih;     // (G*H, H): the upper layer's input weights (the lower layer's; dy_low: its own), or nullptr
    const float* x;        // the upper layer's dgates_x (T, B, G*H), fp32, or nullptr
    float* part;           // the partial-sum backward (persistent_backward_partial): (2, CTAs, B, H) fp32, or nullptr
    // The wavefront where dgates_x is dgates_h (LSTM, RNN; group 0 runs layer l + 1, group 1 layer l): the upper layer
    // projects the lower layer's dy instead. Its CTAs stage its dgates[t] at the step after the one that made them,
    // for their own product; they multiply them by their units' columns of its W_ih too (w_ih, in shared memory beside
    // the W_hh columns) and write those columns of the lower layer's dy[t] (= dgates_x[t] @ W_ih, its input gradient),
    // which the lower layer reads as its dy. The lower layer's step is then a single layer's (x nullptr there).
    float* dy_low;         // (T, B, H): the lower layer's dy, written (the upper layer), or nullptr
};

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p)
{
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A CTA's arrival: 1 added to `counter` by thread 0, after a __syncthreads, as one release reduction (red.release.gpu):
// the CTA's writes before the __syncthreads are visible to whoever acquires the count it makes (bar.sync orders the
// other threads' writes before thread 0's release). Before, a __threadfence() and then a plain atomicAdd: the same
// ordering, one instruction more. The exchange alone ran ~0.3 us a step faster this way (benchmarks/
// probe_rnn_exchange.py, H200: 4.54 -> 4.30 us, B32, 128 CTAs), the kernels' passes 0-0.5% (the split barrier already
// hides most of the arrival; the A/B against the fence and atomicAdd: benchmarks/results/gpu_rnn.md, session 24).
__device__ __forceinline__ void arrive_release(unsigned int* counter)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" : : "l"(counter) : "memory");
}

// Barrier number `phase` (0, 1, 2, ...) of the `nblocks` CTAs that share `counter`.
__device__ __forceinline__ void grid_barrier(unsigned int* counter, unsigned int nblocks, unsigned int phase)
{
    __syncthreads();
#ifdef PERSIST_ABLATE_BARRIER  // ablation switches: benchmarks/profile_rnn_persistent.py (wrong results)
    return;
#endif
    if (threadIdx.x == 0) {
        arrive_release(counter);
        const unsigned int target = nblocks * (phase + 1);
        const long long start = clock64();
        while (load_acquire(counter) < target) {
            if (clock64() - start > (1LL << 36)) __trap();  // ~30 s: the grid was not co-resident
#ifdef PERSIST_BACKOFF
            __nanosleep(PERSIST_BACKOFF);
#endif
        }
        __threadfence();
    }
    __syncthreads();
}

// The wavefront's two layers: the CTAs of the layer that writes what the other one reads (forward the lower layer,
// backward the upper one) arrive at their own barrier after every step (grid_barrier, and grid_arrive after the last);
// the other layer's CTAs wait until all of them are past the step that wrote it (wait_layer below; grid_wait in the
// GRU's backward). The writing layer never waits for the reading one.
__device__ __forceinline__ void grid_arrive(unsigned int* counter)
{
    __syncthreads();
    if (threadIdx.x == 0) arrive_release(counter);
}

__device__ __forceinline__ void grid_wait(const unsigned int* counter, unsigned int target)
{
    __syncthreads();   // (every thread is done with what the last step staged)
    if (threadIdx.x == 0) {
        const long long start = clock64();
        while (load_acquire(counter) < target) {
            if (clock64() - start > (1LL << 36)) __trap();  // ~30 s: the grid was not co-resident
        }
        __threadfence();
    }
    __syncthreads();
}

// The split barrier (the default): a CTA arrives (grid_arrive) as soon as it has written what the other CTAs read at
// the next step (the exchanged state or gate gradients), writes the rest of its step's outputs (hs, cs, y, the gate
// record, dgates) while the others arrive, and only then waits (grid_wait): those writes leave the critical path,
// and the fence before the arrival waits for fewer stores. PERSIST_LATE_ARRIVE (benchmarks/profile_rnn_persistent.py
// "late arrive") writes everything first, then runs grid_barrier: the A/B of the two.
#ifdef PERSIST_LATE_ARRIVE
constexpr bool split_barrier = false;
#else
constexpr bool split_barrier = true;
#endif

// The rare path of issue_chunk, out of line so that it costs the common one no registers.
__device__ __noinline__ void stage_chunk_scalar(float* buf, const float* A, long long lda, int B, int K, int k0)
{
    for (int i = threadIdx.x; i < B * PKC; i += PT) {
        const int b = i / PKC, kk = i % PKC, k = k0 + kk;
        buf[b * PKCP + kk] = k < K ? __ldcg(A + b * lda + k) : 0.0f;
    }
}

// Start copying A[0:B, k0:k0+PKC] (row stride lda, K columns in all) into buf[b * PKCP + k]; columns past K
// become 0. A was written by other CTAs: cp.async.cg reads it from L2, never from L1. `vec`: rows are
// 16-byte aligned and K % 4 == 0; otherwise (a hidden size that is not a multiple of 4) plain loads
// through L2 (__ldcg), synchronous but rare.
__device__ __forceinline__ void issue_chunk(float* buf, const float* A, long long lda, int B, int K, int k0, bool vec)
{
    constexpr int V = PKC / 4, ROWS = PT / V;  // thread tid copies column group v = tid % V of rows tid / V + ROWS*n
#ifdef PERSIST_ABLATE_STAGE
    return;
#endif
    if (!vec) {
        stage_chunk_scalar(buf, A, lda, B, K, k0);
        return;
    }
    const int v = threadIdx.x % V, k = k0 + 4 * v;
    const bool inside = k < K;
    const float* src = inside ? A + (threadIdx.x / V) * lda + k : A;
    unsigned dst = smem_addr(buf + (threadIdx.x / V) * PKCP + 4 * v);
    for (int b = threadIdx.x / V; b < B; b += ROWS) {
        cp_async16(dst, src, inside ? 16 : 0);
        if (inside) src += ROWS * lda;
        dst += ROWS * PKCP * 4;
    }
}

// The bfloat16 exchange's rare path (rows not 16-byte aligned, or K % 8 != 0), as stage_chunk_scalar.
__device__ __noinline__ void stage_chunk_scalar_bf16(unsigned short* buf, const unsigned short* A, long long lda, int B,
                                                     int K, int k0)
{
    for (int i = threadIdx.x; i < B * PKC_H; i += PT) {
        const int b = i / PKC_H, kk = i % PKC_H, k = k0 + kk;
        buf[b * PKCPH + kk] = k < K ? __ldcg(A + b * lda + k) : (unsigned short)0;
    }
}

// issue_chunk for bfloat16 data (the backward's exchange in bf16 mode): A[0:B, k0:k0+PKC_H] into buf[b * PKCPH + k],
// 8 elements per 16-byte cp.async; `vec`: rows 16-byte aligned and K % 8 == 0.
__device__ __forceinline__ void issue_chunk_bf16(unsigned short* buf, const unsigned short* A, long long lda, int B, int K,
                                                 int k0, bool vec)
{
    constexpr int V = PKC_H / 8, ROWS = PT / V;
#ifdef PERSIST_ABLATE_STAGE
    return;
#endif
    if (!vec) {
        stage_chunk_scalar_bf16(buf, A, lda, B, K, k0);
        return;
    }
    const int v = threadIdx.x % V, k = k0 + 8 * v;
    const bool inside = k < K;
    const unsigned short* src = inside ? A + (threadIdx.x / V) * lda + k : A;
    unsigned dst = smem_addr(buf + (threadIdx.x / V) * PKCPH + 8 * v);
    for (int b = threadIdx.x / V; b < B; b += ROWS) {
        cp_async16(dst, src, inside ? 16 : 0);
        if (inside) src += ROWS * lda;
        dst += ROWS * PKCPH * 2;
    }
}

// Copy n consecutive floats (a run of the CTA's units) from global memory into shared memory
// asynchronously: 16 bytes at a time when `vec` (n % 4 == 0 and both ends 16-byte aligned), else 4.
__device__ __forceinline__ void fetch_run(float* dst, const float* src, int n, bool vec)
{
    if (vec) {
        for (int w = 0; w < n; w += 4) cp_async16(smem_addr(dst + w), src + w, 16);
    } else {
        for (int w = 0; w < n; ++w) cp_async4(smem_addr(dst + w), src + w);
    }
}

// The product of one step on the tensor cores: red[b * RP + r] = sum_k A[b, k] * W[r][k] for b < BP,
// r < RP, where A (B x K, row stride lda; columns past K read as zero) is in global memory and W (RP rows of KP floats) in
// shared memory. mma.sync m16n8k8 TF32 (the fragment layouts are drawn in kernels/gemm_tc.cu): M = the
// batch (BP = B rounded up to 16), N = the CTA's rows of W (RP, rounded up to 8), K = the state.
//   math = 1: operands rounded to TF32, one mma per tile: the math of cuDNN's TF32 mode.
//   math = 2: operands rounded to bfloat16, one m16n8k16 mma per tile and 16 columns (autocast's bf16).
//   math = 0: fp32 accuracy from three TF32 mmas (Henry et al.'s "3xTF32"): x = big + small with both
//             parts TF32, and a*b ~ a_big*b_big + a_big*b_small + a_small*b_big (the dropped
//             small*small term is ~2^-22 of the product).
// The NWARPS warps split the MT x NT output tiles into TG groups and the k steps of each chunk into
// KS = NWARPS/TG
// slices (warp w: tiles tg, tg + TG, ... with tg = w % TG, k steps w / TG, + KS, ...); the KS partial
// sums are added through `red` (KS x BP x RP <= RED floats). A warp with fewer than 4 tiles keeps
// several accumulators per tile (product_chunk). `ring` holds NBUF chunk buffers of BP rows
// (rows B .. BP-1 zero). `fetch()` issues the cell's own cp.async copies; they land with the first chunk.
// One chunk of the product for one warp: its tiles tg, tg + TG, ... (at most 4 / NCOPY of them) over its
// k steps kslice, kslice + KS, ... Each tile has NCOPY accumulators that take turns by k step
// (acc[q * NCOPY + copy]): a chain of dependent mmas on one accumulator runs at the mma's latency, so
// independent chains keep the tensor cores busy when a warp has one tile and a long K.
template <int NCOPY>
__device__ __forceinline__ void product_chunk(float (&acc)[4][4], const float* hbuf, const float* W, int k0, int steps,
                                              int kslice, int KS, const int (&a_off)[4], const int (&w_off)[4],
                                              int my_tiles, int tf32)
{
    constexpr int TPW = 4 / NCOPY;
    for (int ks0 = kslice; ks0 < steps; ks0 += KS * NCOPY) {
#pragma unroll
        for (int copy = 0; copy < NCOPY; ++copy) {
            const int ks = ks0 + copy * KS;
            if (ks >= steps) break;
            const int kk = ks * 8;
#pragma unroll
            for (int q = 0; q < TPW; ++q) {
                if (q >= my_tiles) break;
                // The mma's k = t and k = t + 4 are columns 2t and 2t + 1 of each 8-column step, for A and
                // W alike (a sum over k does not care which column is which): one 64-bit load per pair.
                const float2 a_lo = *reinterpret_cast<const float2*>(hbuf + a_off[q] + kk);
                const float2 a_hi = *reinterpret_cast<const float2*>(hbuf + a_off[q] + 8 * PKCP + kk);
                const float2 w = *reinterpret_cast<const float2*>(W + w_off[q] + k0 + kk);
                const float a[4] = {a_lo.x, a_hi.x, a_lo.y, a_hi.y};
                const float b[2] = {w.x, w.y};
                unsigned a_big[4], a_small[4], b_big[2], b_small[2];
#pragma unroll
                for (int e = 0; e < 4; ++e) minidl_tc::split_tf32(a[e], a_big[e], a_small[e]);
#pragma unroll
                for (int e = 0; e < 2; ++e) minidl_tc::split_tf32(b[e], b_big[e], b_small[e]);
#ifdef PERSIST_ABLATE_MMA
                acc[q * NCOPY + copy][0] += __uint_as_float(a_big[0] ^ a_small[1] ^ b_big[0] ^ b_small[1]);
                acc[q * NCOPY + copy][1] += __uint_as_float(a_big[2] ^ a_small[3] ^ b_big[1] ^ b_small[0]);
                acc[q * NCOPY + copy][2] += __uint_as_float(a_big[1] ^ a_small[0] ^ a_big[3] ^ a_small[2]);
                continue;
#endif
                if (!tf32) {  // (in TF32 mode the small parts are computed and not used)
                    minidl_tc::mma<minidl_tc::KIND_TF32>(acc[q * NCOPY + copy], a_small, b_big);
                    minidl_tc::mma<minidl_tc::KIND_TF32>(acc[q * NCOPY + copy], a_big, b_small);
                }
                minidl_tc::mma<minidl_tc::KIND_TF32>(acc[q * NCOPY + copy], a_big, b_big);
            }
        }
    }
}

// Two floats packed as bfloat16x2 (round to nearest even), `lo` in the low half (the smaller k).
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// W's entry as the bf16 path keeps it in shared memory: rounded once, when the weights are staged (math = 2), with
// the same rounding (cvt.rn) as the state's at every step.
__device__ __forceinline__ unsigned short bf16_bits(float v)
{
    return (unsigned short)(pack_bf16x2(v, 0.0f) & 0xffffu);
}

// W as the kernels stage it: float, or (math = 2) its bfloat16 rounding in the first half of the same space, so
// that a step reads half the bytes of W and converts only the state.
__device__ __forceinline__ void stage_w(float* W, int i, float v, int math)
{
    if (math == 2) reinterpret_cast<unsigned short*>(W)[i] = bf16_bits(v);
    else W[i] = v;
}

// The backward's W[i] = value(i) for i < n (stage_w: bfloat16 for math = 2), the values read from global memory
// STAGE_LOADS at a time a thread: all of a batch's loads are issued before the first store that needs one, where one
// load a loop iteration waits a round trip to L2 for each element (64 of them a thread, LSTM 2x512 B32 bf16). The
// backward passes ran ~2% faster (H200, session 23: LSTM fp32 B64 0.743 -> 0.726 ms, TF32 B32 0.556 -> 0.545).
constexpr int STAGE_LOADS = 8;   // (16 measured no better)
template <class Value>
__device__ __forceinline__ void stage_w_all(float* W, int n, int math, Value value)
{
    for (int i0 = threadIdx.x; i0 < n; i0 += PT * STAGE_LOADS) {
        float v[STAGE_LOADS];
#pragma unroll
        for (int q = 0; q < STAGE_LOADS; ++q) v[q] = i0 + q * PT < n ? value(i0 + q * PT) : 0.0f;
#pragma unroll
        for (int q = 0; q < STAGE_LOADS; ++q) if (i0 + q * PT < n) stage_w(W, i0 + q * PT, v[q], math);
    }
}

// The same as product_chunk in bf16 (math = 2): mma m16n8k16, one per tile and 16-column step, operands
// rounded to bfloat16, products summed in fp32. A lane's elements of a step are k = 2t, 2t+1 (a0/a1, b0)
// and 2t+8, 2t+9 (a2/a3, b1); they are columns 4t .. 4t+3 of the step here (the same permutation for
// A and W), so each is one load: 128 bits of the fp32 state, 64 bits of the bfloat16 W (stage_w).
// HALF: the state already bfloat16 in shared memory (the exchange, issue_chunk_bf16): the same elements of the same
// rows, read as they are (64 bits per row: k = 4t .. 4t+3, a_off in halves) instead of converted from fp32.
template <int NCOPY, bool HALF>
__device__ __forceinline__ void product_chunk_bf16(float (&acc)[4][4], const void* hbuf, const float* W, int k0,
                                                   int steps, int kslice, int KS, const int (&a_off)[4],
                                                   const int (&w_off)[4], int my_tiles)
{
    const unsigned short* Wb = reinterpret_cast<const unsigned short*>(W);
    constexpr int TPW = 4 / NCOPY;
    for (int ks0 = kslice; ks0 < steps; ks0 += KS * NCOPY) {
#pragma unroll
        for (int copy = 0; copy < NCOPY; ++copy) {
            const int ks = ks0 + copy * KS;
            if (ks >= steps) break;
            const int kk = ks * 16;
#pragma unroll
            for (int q = 0; q < TPW; ++q) {
                if (q >= my_tiles) break;
                // w_off (and the fp32 a_off) point at column 2t of the tile's row (the TF32 layout): 4t is 2t further.
                const int t2 = w_off[q] & 7;  // = 2t (rows are multiples of 8 elements apart)
                unsigned a[4];
                if (HALF) {
                    const unsigned short* hb = static_cast<const unsigned short*>(hbuf) + a_off[q] + kk;
                    const uint2 lo = *reinterpret_cast<const uint2*>(hb);
                    const uint2 hi = *reinterpret_cast<const uint2*>(hb + 8 * PKCPH);
                    a[0] = lo.x, a[1] = hi.x, a[2] = lo.y, a[3] = hi.y;
                } else {
                    const float* hf = static_cast<const float*>(hbuf) + a_off[q] + t2 + kk;
                    const float4 lo = *reinterpret_cast<const float4*>(hf);
                    const float4 hi = *reinterpret_cast<const float4*>(hf + 8 * PKCP);
                    a[0] = pack_bf16x2(lo.x, lo.y), a[1] = pack_bf16x2(hi.x, hi.y);
                    a[2] = pack_bf16x2(lo.z, lo.w), a[3] = pack_bf16x2(hi.z, hi.w);
                }
                const uint2 w = *reinterpret_cast<const uint2*>(Wb + w_off[q] + t2 + k0 + kk);
                const unsigned b[2] = {w.x, w.y};   // (little-endian: the smaller k in the low half, as packed)
                minidl_tc::mma<minidl_tc::KIND_BF16>(acc[q * NCOPY + copy], a, b);
            }
        }
    }
}

// product_chunk_bf16 with its NCOPY picked at run time (block_product's ncopy: 4, 2 or 1).
template <bool HALF>
__device__ __forceinline__ void product_bf16(int ncopy, float (&acc)[4][4], const void* hbuf, const float* W, int k0,
                                             int steps, int kslice, int KS, const int (&a_off)[4],
                                             const int (&w_off)[4], int my_tiles)
{
    if (ncopy == 4) {
        product_chunk_bf16<4, HALF>(acc, hbuf, W, k0, steps, kslice, KS, a_off, w_off, my_tiles);
    } else if (ncopy == 2) {
        product_chunk_bf16<2, HALF>(acc, hbuf, W, k0, steps, kslice, KS, a_off, w_off, my_tiles);
    } else {
        product_chunk_bf16<1, HALF>(acc, hbuf, W, k0, steps, kslice, KS, a_off, w_off, my_tiles);
    }
}

// One operand of a step's product: K columns of B rows, fp32 at `a` (row stride lda) or, math = 2, already rounded
// to bfloat16 at `ah` (the exchange; nullptr: `a` is converted); its columns meet W's columns kw .. kw + K - 1.
struct Operand {
    const float* a;
    const unsigned short* ah;
    long long lda;
    int K;
    int kw;
};

// log2 of TG, the warps' tile groups in block_product: the largest power of 2 <= min(NWARPS, tiles).
__device__ __forceinline__ int tile_group_log2(int tiles)
{
    int lg = 0;
    while ((2 << lg) <= NWARPS && (2 << lg) <= tiles) ++lg;
    return lg;
}

// red = sum over the operands of A_i @ W[:, kw_i : kw_i + K_i]^T (one operand; two for the backward wavefront's lower
// layer: its dgates_h and the upper layer's dgates_x). Each operand is staged in chunks of its own width (PKC fp32, PKC_H bfloat16 columns)
// through the one ring; columns past an operand's K are staged as zero, so W's columns there never count.
template <class Fetch>
__device__ void block_product(const Operand op0, const Operand op1, int B, int BP, const float* W, int RP, int KP,
                              float* ring, float* red, int math, Fetch fetch)
{
    // How the warps split the tiles and k steps, and this lane's fragment offsets, without an integer division: with 16
    // warps issuing them, the ~10 divisions by run-time values this took at every step were most of the ~0.8 us
    // between a step's start and the product's first __syncthreads (benchmarks/trace_rnn_persistent.py, "entry sync").
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int NT = RP >> 3, tiles = (BP >> 4) * NT, lg = tile_group_log2(tiles), TG = 1 << lg;
    const int KS = NWARPS >> lg, tg = warp & (TG - 1), kslice = warp >> lg;
    const int per_warp = (tiles + TG - 1) >> lg;  // <= 4 (the launcher's MAX_TILES)
    const int ncopy = per_warp == 1 ? 4 : (per_warp == 2 ? 2 : 1);
    const float rnt = __fdividef(1.0f, (float)NT);  // (tile + 0.5) * rnt rounds down to tile / NT for tile, NT < 2^10
    int a_off[4], ah_off[4], w_off[4], red_off[4], my_tiles = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int tile = tg + (q << lg), mt = (int)((tile + 0.5f) * rnt), nt = tile - mt * NT;
        my_tiles += tile < tiles;
        a_off[q] = (mt * 16 + g) * PKCP + 2 * t;
        ah_off[q] = (mt * 16 + g) * PKCPH + 4 * t;
        w_off[q] = (nt * 8 + g) * KP + 2 * t;
        red_off[q] = (mt * 16 + g) * RP + nt * 8 + 2 * t;
    }
    const int buffer = BP * PKCP;
    // the bfloat16 exchange: chunks of PKC_H halves, PKCPH a row (op1.K == 0: one operand)
    const bool half0 = math == 2 && op0.ah != nullptr, half1 = math == 2 && op1.ah != nullptr;
    const int n0 = half0 ? (op0.K + PKC_H - 1) / PKC_H : (op0.K + PKC - 1) / PKC;
    const int chunks = n0 + (half1 ? (op1.K + PKC_H - 1) / PKC_H : (op1.K + PKC - 1) / PKC);
    auto aligned = [](const Operand& o, bool half) {
        return half ? o.K % 8 == 0 && o.lda % 8 == 0 && (reinterpret_cast<unsigned long long>(o.ah) & 15) == 0
                    : o.K % 4 == 0 && o.lda % 4 == 0 && (reinterpret_cast<unsigned long long>(o.a) & 15) == 0;
    };
    const bool vec0 = aligned(op0, half0), vec1 = op1.K == 0 || aligned(op1, half1);
    auto issue = [&](int c) {   // start staging chunk c (of both operands' chunks) into its ring buffer
        const bool second = c >= n0, half = second ? half1 : half0, vec = second ? vec1 : vec0;
        const int l = second ? c - n0 : c, K = second ? op1.K : op0.K;
        const long long lda = second ? op1.lda : op0.lda;
        float* buf = ring + (c % NBUF) * buffer;
        if (half) issue_chunk_bf16(reinterpret_cast<unsigned short*>(buf), second ? op1.ah : op0.ah, lda, B, K,
                                   l * PKC_H, vec);
        else issue_chunk(buf, second ? op1.a : op0.a, lda, B, K, l * PKC, vec);
    };
    float acc[4][4] = {};
    __syncthreads();  // every reader of the ring and of red (the last step's cell) is done
    MARK(1);
#pragma unroll
    for (int c = 0; c < NBUF - 1; ++c) {
        if (c < chunks) issue(c);
        if (c == 0) fetch();
        cp_async_commit();
    }
    for (int c = 0; c < chunks; ++c) {
        cp_async_wait<NBUF - 2>();  // chunk c (and everything before it) has landed, for this thread
        __syncthreads();            // ... and for every thread; and chunk c - 1 is no longer read
        if (c == 0) MARK(2);
        const int next = c + NBUF - 1;
        if (next < chunks) issue(next);
        cp_async_commit();
#ifndef PERSIST_ABLATE_PRODUCT
        const bool second = c >= n0;
        const int l = second ? c - n0 : c, K = second ? op1.K : op0.K, kw = second ? op1.kw : op0.kw;
        const float* hbuf = ring + (c % NBUF) * buffer;
        if (second ? half1 : half0) {   // the exchange's bfloat16 chunk, 256 columns
            const int k0 = l * PKC_H;
            product_bf16<true>(ncopy, acc, hbuf, W, kw + k0, (min(PKC_H, K - k0) + 15) / 16, kslice, KS, ah_off,
                               w_off, my_tiles);
            continue;
        }
        const int k0 = l * PKC;
        if (math == 2) {   // columns past K are zero in the staged chunk
            product_bf16<false>(ncopy, acc, hbuf, W, kw + k0, (min(PKC, K - k0) + 15) / 16, kslice, KS, a_off,
                                w_off, my_tiles);
            continue;
        }
        const int steps = (min(PKC, K - k0) + 7) / 8;
        const int tf32 = math;
        if (ncopy == 4) {
            product_chunk<4>(acc, hbuf, W, kw + k0, steps, kslice, KS, a_off, w_off, my_tiles, tf32);
        } else if (ncopy == 2) {
            product_chunk<2>(acc, hbuf, W, kw + k0, steps, kslice, KS, a_off, w_off, my_tiles, tf32);
        } else {
            product_chunk<1>(acc, hbuf, W, kw + k0, steps, kslice, KS, a_off, w_off, my_tiles, tf32);
        }
#endif
    }
    MARK(3);
    cp_async_wait<0>();
#pragma unroll
    for (int slot = 0; slot < 4; ++slot) {  // each tile's accumulators summed, into this k slice of red
        if (slot % ncopy != 0 || slot / ncopy >= my_tiles) continue;
        float v[4] = {acc[slot][0], acc[slot][1], acc[slot][2], acc[slot][3]};
#pragma unroll
        for (int copy = 1; copy < 4; ++copy) {
            if (copy < ncopy && slot + copy < 4) {
#pragma unroll
                for (int e = 0; e < 4; ++e) v[e] += acc[slot + copy][e];
            }
        }
        float* at = red + kslice * BP * RP + red_off[slot / ncopy];
        at[0] = v[0];
        at[1] = v[1];
        at[8 * RP] = v[2];
        at[8 * RP + 1] = v[3];
    }
    __syncthreads();
    MARK(4);
    if (KS > 1) {
        for (int e = threadIdx.x; e < BP * RP; e += PT) {  // sum the partial tiles into slice 0
            float sum = red[e];
            for (int s = 1; s < KS; ++s) sum += red[s * BP * RP + e];
            red[e] = sum;
        }
        __syncthreads();
    }
    MARK(5);
}

__host__ __device__ constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

template <int MODE>
__host__ __device__ constexpr int gate_count() { return MODE == MODE_LSTM ? 4 : (MODE == MODE_GRU ? 3 : 1); }

// ---------------------------------------------------------------------------------------------
// Forward. Shared memory: W (RP x KP, KP = H rounded up to 8, + 8), the ring (NBUF x BP x PKCP), red (RED), then gx
// (B x G*U: this step's input projection of the CTA's gates), h and c (B x U each: the CTA's slice of
// the state, kept across steps), and the biases of the CTA's gates (2 x G*U: b_ih's, then b_hh's; read by every step's
// cell from here: from global memory they cost the cell ~0.6 us a step, an L2 round trip, benchmarks/
// trace_rnn_persistent.py "cell: operands").
// ---------------------------------------------------------------------------------------------
// The forward's batch groups (rows b0 .. b0 + B - 1 of a batch of BT rows: kernels below, "Batch groups") exist only
// in the compile with fewer threads a CTA (the launcher's grouped forward runs PT = 256): with 16 warps the group's
// offsets cost the step loop registers it spills (ptxas: 184 -> 340 bytes of spill stores; forward passes ~15% slower
// with one group, measured), with 8 warps there are registers to spare. Elsewhere B = BT and b0 = 0 at compile time.
constexpr bool FORWARD_GROUPS = PT < 512;

// The wavefront's layer that reads the other one's projection (forward: the upper layer, its gates_x[t], DirForward::
// gx_up; backward: the lower layer, its dy[t], DirBackward::dy_low) waits before each step until every CTA of the other
// layer is past the step that wrote it. The other layer runs ahead, so the count that
// thread 0 last read from its counter (`seen`) usually covers several steps: only when it does not does the CTA load
// the counter again (an L2 round trip, ~0.9 us a step as grid_wait, benchmarks/trace_rnn_persistent.py). Thread 0
// only; the __syncthreads that follows (block_product's first) passes what it acquired on to the CTA.
__device__ __forceinline__ void wait_layer(const unsigned int* counter, unsigned int target, unsigned int& seen)
{
    if (threadIdx.x != 0 || seen >= target) return;
    const long long start = clock64();
    while ((seen = load_acquire(counter)) < target) {
        if (clock64() - start > (1LL << 36)) __trap();  // ~30 s: the grid was not co-resident
    }
    __threadfence();
}

template <int MODE>
__device__ void persistent_forward(const DirForward& dir, int direction, int c, int per_direction,
                                   const int* lengths, int T, int B, int BT_, int b0_, int H, int U, long long y_ld,
                                   int relu, int math, unsigned int* barrier, const unsigned int* below)
{
    const int BT = FORWARD_GROUPS ? BT_ : B, b0 = FORWARD_GROUPS ? b0_ : 0;
    constexpr int G = gate_count<MODE>();
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    // The wavefront's lower layer (dir.gx_up set): W's rows R .. 2R - 1 are the upper layer's W_ih rows of the same
    // units, and the loop runs one step more (s = T: only the product, for the upper layer's gates_x[T - 1]).
    const bool project = dir.gx_up != nullptr;
    const int R = G * U, RP = round_up(project ? 2 * R : R, 8), KP = round_up(H, 8) + 8, BP = round_up(B, 16);
    float* W = smem;
    float* ring = W + (math == 2 ? RP * KP / 2 : RP * KP);   // (bf16: W as halves)
    float* red = ring + NBUF * BP * PKCP;
    float* gx = red + RED;
    float* h_own = gx + B * R;
    float* c_own = h_own + B * U;
    float* b_ih = c_own + B * U;         // b_ih[g * U + u] = dir.b_ih[g * H + j0 + u] (0 without bias, or past H)
    float* b_hh = b_ih + R;
    const int j0 = c * U;
    const int units = min(U, H - j0);    // the last CTA may own fewer
    const bool vec = U % 4 == 0 && units == U && H % 4 == 0;  // runs of units are 16-byte aligned
    const long long state = (long long)BT * H;
    const long long r0 = (long long)b0 * H;   // (the group's first row, in hs, cs and the exchange)

    // Rows g*U + u of W = row g*H + j0 + u of W_hh, and (project) rows R + g*U + u the same row of the upper layer's
    // W_ih; zero past H, in the padding rows and columns (the mma steps run over K rounded up to 8 or 16 columns).
    // (one load an iteration: staged as the backward's W, STAGE_LOADS at a time, the step loop compiled slower, 5-10%:
    // LSTM bf16 B64 0.516 -> 0.561 ms a pass, fp32 B64 0.84 -> 0.94; H200, session 23)
    for (int i = threadIdx.x; i < RP * KP; i += PT) {
        const int r = i / KP, k = i % KP, upper = r >= R, g = (r - upper * R) / U, u = (r - upper * R) % U;
        const long long row = g * H + j0 + u;
        float v = 0.0f;
        if (r < (project ? 2 * R : R) && j0 + u < H && k < H) v = (upper ? dir.w_ih : dir.w_hh)[row * H + k];
        stage_w(W, i, v, math);
    }
    for (int i = threadIdx.x; i < NBUF * BP * PKCP; i += PT) ring[i] = 0.0f;  // rows B .. BP-1 stay zero
    for (int i = threadIdx.x; i < R; i += PT) {
        const int g = i / U, j = j0 + i % U;
        b_ih[i] = j < H ? bias_at(dir.b_ih, g * H + j) : 0.0f;
        b_hh[i] = j < H ? bias_at(dir.b_hh, g * H + j) : 0.0f;
    }
    const int first = direction ? T : 0;  // where the initial state sits in hs / cs
    for (int e = threadIdx.x; e < B * U; e += PT) {
        const int b = e / U, j = j0 + e % U;
        h_own[e] = j < H ? dir.hs[first * state + r0 + b * (long long)H + j] : 0.0f;
        if (MODE == MODE_LSTM) c_own[e] = j < H ? dir.cs[first * state + r0 + b * (long long)H + j] : 0.0f;
    }
    // (block_product's first __syncthreads orders these writes before any read)

    unsigned int seen = 0;   // (wait_layer)
    const int steps = T + project;
    for (int s = 0; s < steps; ++s) {
        MARK(0);
        const bool cell = s < T;   // (the lower layer's step T: the product only)
        const int t = direction ? T - 1 - s : s;
        const float* h_in = dir.hs + (direction ? t + 1 : t) * state + r0;
        const long long out = (direction ? t : t + 1) * state + r0;
        const float* gx_t = dir.gates_x + ((long long)t * BT + b0) * G * H;
        auto fetch = [&]() {  // this step's input projection of the CTA's gates: gx[(b * G + g) * U + u]
            if (!cell) return;
            for (int i = threadIdx.x; i < B * G; i += PT) {
                const int b = i / G, g = i % G;
                fetch_run(gx + i * U, gx_t + (long long)b * G * H + g * H + j0, units, vec);
            }
        };
        // the upper layer of a wavefront: its gates_x[t], once the lower layer's CTAs are past step t + 1
        if (below != nullptr) wait_layer(below, per_direction * (unsigned int)(t + 2), seen);
        MARK(10);
        // from the second step on (math = 2) the CTAs stage the state as the last step's cells rounded it (bfloat16)
        const Operand own = {h_in, dir.xchg == nullptr || s == 0 ? nullptr : dir.xchg + ((s - 1) % dir.slots) * state + r0,
                             H, H, 0};
        block_product(own, Operand{}, B, BP, W, RP, KP, ring, red, math, fetch);
        // The cell, in two passes around the barrier's arrival (split_barrier): first what the other CTAs read at the
        // next step (the state: its bfloat16 exchange, or hs; and the upper layer's gates_x), then, while they may
        // already be staging it, the rest: hs, cs, y and the gate record, from shared memory (h_own, c_own, and the
        // record stashed over this step's gx, which only this thread reads: `stash`).
        unsigned short* xc = dir.xchg == nullptr ? nullptr : dir.xchg + (s % dir.slots) * state + r0;
        const bool hs_first = xc == nullptr;
        for (int e = threadIdx.x; e < B * U; e += PT) {
            const int b = e / U, u = e % U, j = j0 + u;
            if (j >= H) continue;
            if (project && s > 0) {   // the upper layer's gates_x[s - 1] for these units: W_ih's rows of the product
                float* up = dir.gx_up + ((long long)(s - 1) * BT + b0 + b) * G * H + j;
#pragma unroll
                for (int g = 0; g < G; ++g) up[g * H] = red[b * RP + R + g * U + u];
            }
            if (!cell) continue;
            const long long i = b * (long long)H + j;
            float* gxe = gx + b * R + u;           // gate g at gxe[g * U]; then the record's entry g (stash)
            float* ghe = red + b * RP + u;         // likewise; the GRU's fourth record entry at ghe[0]
            if (!step_is_valid(lengths, b, t)) {  // the state passes through; y and the record are 0
                if (xc != nullptr) xc[i] = bf16_bits(h_own[e]);
                if (hs_first) dir.hs[out + i] = h_own[e];
                continue;
            }
            float h_new;
            if (MODE == MODE_LSTM) {
                float pre[4], act[4], c_new;
#pragma unroll
                for (int g = 0; g < 4; ++g) {
                    pre[g] = gxe[g * U] + b_ih[g * U + u] + ghe[g * U] + b_hh[g * U + u];
                }
                MARK(11);
                lstm_cell_value(pre, c_own[e], act, c_new, h_new);
                MARK(12);
                c_own[e] = c_new;
                for (int g = 0; g < 4; ++g) gxe[g * U] = act[g];
            } else if (MODE == MODE_GRU) {
                float saved[4];
                h_new = gru_cell_value(
                    gxe[0] + b_ih[u], gxe[U] + b_ih[U + u], gxe[2 * U] + b_ih[2 * U + u], ghe[0] + b_hh[u],
                    ghe[U] + b_hh[U + u], ghe[2 * U] + b_hh[2 * U + u], h_own[e], saved);
                for (int g = 0; g < 3; ++g) gxe[g * U] = saved[g];
                ghe[0] = saved[3];
            } else {
                h_new = rnn_cell_value(gxe[0] + b_ih[u] + ghe[0] + b_hh[u], relu);
            }
            h_own[e] = h_new;
            if (xc != nullptr) xc[i] = bf16_bits(h_new);
            if (hs_first) dir.hs[out + i] = h_new;
        }
        MARK(6);
        const bool more = s + 1 < steps;
        // (the lower layer of a wavefront arrives after its last step too: the upper layer waits for it)
        if (split_barrier && (more || project)) grid_arrive(barrier);
        else __syncthreads();   // (the stash is read by the thread that wrote it; h_own and c_own likewise)
        MARK(7);
        for (int e = threadIdx.x; cell && e < B * U; e += PT) {
            const int b = e / U, u = e % U, j = j0 + u;
            if (j >= H) continue;
            const long long i = b * (long long)H + j;
            const bool valid = step_is_valid(lengths, b, t);
            if (!hs_first) dir.hs[out + i] = h_own[e];
            if (MODE == MODE_LSTM) dir.cs[out + i] = c_own[e];
            dir.y[((long long)t * BT + b0 + b) * y_ld + j] = valid ? h_own[e] : 0.0f;
            float* keep = dir.saved == nullptr ? nullptr : dir.saved + ((long long)t * BT + b0 + b) * 4 * H + j;
            float* gxe = gx + b * R + u;
            if (MODE != MODE_RNN && keep != nullptr) {
                for (int g = 0; g < 3; ++g) keep[g * H] = valid ? gxe[g * U] : 0.0f;
                keep[3 * H] = valid ? (MODE == MODE_LSTM ? gxe[3 * U] : red[b * RP + u]) : 0.0f;
            }
        }
        MARK(8);
        if (split_barrier) {
            if (more) grid_wait(barrier, per_direction * (unsigned int)(s + 1));
        } else if (more) {
            grid_barrier(barrier, per_direction, s);
        } else if (project) {
            grid_arrive(barrier);
        }
        MARK(9);
        TRACE_STEP(s);
    }
}

// The backward cell's operands at step t for the CTA's units j0 .. j0 + units - 1, copied asynchronously (cp.async)
// into ops: operand q of unit u of row b at ops[(b * NOPS + q) * U + u], so that each run of units is one copy. The
// operands: the gate record (4, LSTM/GRU), the state(s) (LSTM c_in, c_out; GRU h_in; RNN h_out), dy.
template <int MODE>
struct BackwardOperands {
    static constexpr int NREC = MODE == MODE_RNN ? 0 : 4;
    static constexpr int NSTATE = MODE == MODE_LSTM ? 2 : 1;
    static constexpr int NOPS = NREC + NSTATE + 1;
};

template <int MODE>
__device__ __forceinline__ void fetch_cell_operands(float* ops, const DirBackward& dir, int t, int direction, int T,
                                                    int B, int BT, int H, int U, int j0, int units, bool vec,
                                                    long long dy_ld)
{
    constexpr int NREC = BackwardOperands<MODE>::NREC, NSTATE = BackwardOperands<MODE>::NSTATE;
    constexpr int NOPS = BackwardOperands<MODE>::NOPS;
    const long long state = (long long)BT * H;
    for (int i = threadIdx.x; i < B * NOPS; i += PT) {
        const int b = i / NOPS, q = i % NOPS;
        const long long bj = b * (long long)H + j0;
        const float* src;
        if (q < NREC) {
            src = dir.saved + ((long long)t * BT + b) * 4 * H + q * H + j0;
        } else if (q < NREC + NSTATE) {
            const bool entering = MODE == MODE_RNN ? false : q == NREC;  // RNN reads the state it made
            const int index = entering ? (direction ? t + 1 : t) : (direction ? t : t + 1);
            src = (MODE == MODE_LSTM ? dir.cs : dir.hs) + index * state + bj;
        } else {
            if (dir.dy == nullptr) {
                for (int u = 0; u < units; ++u) ops[i * U + u] = 0.0f;
                continue;
            }
            src = dir.dy + ((long long)t * BT + b) * dy_ld + j0;
        }
        fetch_run(ops + i * U, src, units, vec);
    }
}

// The backward cell of one unit (kernels/rnn_cell.cuh), for both backwards: d = dh + dy at this step; op its
// operands (fetch_cell_operands). Out: the gradients of the gates' input pre-activations (dgate_x) and of their
// recurrent ones (dgate_h, what multiplies W_hh; the same but for the GRU's n gate, which r scales); dcarry (the
// LSTM's dc) and direct (the part of the step before's dh that skips W_hh: the GRU's z * dh, else 0) updated.
template <int MODE>
__device__ __forceinline__ void cell_backward(float d, const float* op, float& dcarry, float& direct, int relu,
                                              float (&dgate_x)[4], float (&dgate_h)[4])
{
    if (MODE == MODE_LSTM) {
        float dc_prev;
        lstm_cell_grad(d, dcarry, op, op[4], op[5], dgate_x, dc_prev);
        dcarry = dc_prev;
        direct = 0.0f;
        for (int g = 0; g < 4; ++g) dgate_h[g] = dgate_x[g];
    } else if (MODE == MODE_GRU) {
        direct = gru_cell_grad(d, op, op[4], dgate_x, dgate_h);
    } else {
        dgate_x[0] = dgate_h[0] = rnn_cell_grad(d, op[0], relu);
        direct = 0.0f;
    }
}

// The gate gradients a step's cells stashed over their operands (stash entry g: dgate_x of gate g; the GRU's dgate_h
// at 3 + g), written to dgates_x (unless `x_done`) and the GRU's dgates_h (unless `h_done`): 0 past a sequence's end.
template <int MODE>
__device__ __forceinline__ void write_stashed_dgates(const DirBackward& dir, const float* ops, const int* lengths,
                                                     int t, int B, int BT, int H, int U, int j0, bool x_done,
                                                     bool h_done)
{
    constexpr int G = gate_count<MODE>(), NOPS = BackwardOperands<MODE>::NOPS;
    for (int e = threadIdx.x; e < B * U; e += PT) {
        const int b = e / U, u = e % U, j = j0 + u;
        if (j >= H) continue;
        const long long row = ((long long)t * BT + b) * G * H + j;
        const float* stash = ops + b * NOPS * U + u;
        const bool valid = step_is_valid(lengths, b, t);
        for (int g = 0; g < G; ++g) {
            if (!x_done) dir.dgates_x[row + g * H] = valid ? stash[g * U] : 0.0f;
            if (MODE == MODE_GRU && !h_done) dir.dgates_h[row + g * H] = valid ? stash[(3 + g) * U] : 0.0f;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Backward, steps in the reverse of the forward order. Shared memory: W (RP x KP, RP = round4(U),
// KP = G*H rounded up to 8, + 8) with W[u][k] = W_hh[k, j0 + u], the ring, red, then `direct` and `dcarry` (B x U each:
// the part of dh that skips W_hh, and the LSTM's dc, owned by this CTA for the whole run) and `ops`
// (B x 7U: this step's saved gates, states and dy for the CTA's units, fetched with the first chunk;
// operand q of unit u of row b at ops[(b * NOPS + q) * U + u], so that each run of units is one copy).
// ---------------------------------------------------------------------------------------------
// The step loop is a called function (__noinline__), not inlined into its kernel: inlined, ptxas spilled ~280 bytes a
// thread in it (the kernel's struct copies and the partial-sum path beside it); called, it spills none, and the staged
// backward ran 4-18% faster (H200, session 23: LSTM bf16 B64 0.647 -> 0.623 ms a pass, GRU bf16 B64 0.658 -> 0.613, the
// bidirectional LSTM bf16 T64 B64 1.855 -> 1.520; benchmarks/results/gpu_rnn.md). The forward's loop stays inlined:
// called it measured slower (LSTM bf16 B64 0.498 -> 0.540 ms), and called with its struct in shared memory, or inlined
// once with it there, within the noise (+-5%, either way by shape). WAVE: the wavefront's roles (dy_low, x, above),
// known at compile time, so the one-layer loop compiles without them.
template <int MODE, bool WAVE>
__device__ __noinline__ void persistent_backward(const DirBackward& dir, int direction, int c, int per_direction,
                                    const int* lengths, int T, int B, int BT, int H, int U, long long dy_ld, int relu,
                                    int math, unsigned int* barrier, const unsigned int* above, bool x_shared)
{
    constexpr int G = gate_count<MODE>();
    constexpr int NOPS = BackwardOperands<MODE>::NOPS;   // the cell's operands per unit (fetch_cell_operands)
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    // The wavefront's lower layer (GRU): W's rows also hold W_ih of the layer above (its columns for these units), from
    // column KH (a multiple of 16: both operands' 64-bit fragment loads of W stay aligned). The wavefront's upper layer
    // where dgates_x is dgates_h (dir.dy_low set): W's rows RU .. RU + U - 1 hold its own W_ih's columns for these units.
    const int GH = G * H, KX = WAVE && dir.x != nullptr ? GH : 0, KH = round_up(GH, 16);
    const bool project = WAVE && dir.dy_low != nullptr;
    const int RU = round_up(U, 8), RP = project ? 2 * RU : RU, KP = round_up(KX ? KH + KX : GH, 8) + 8;
    const int BP = round_up(B, 16);
    float* W = smem;
    float* ring = W + (math == 2 ? RP * KP / 2 : RP * KP);   // (bf16: W as halves)
    float* red = ring + NBUF * BP * PKCP;
    float* direct = red + RED;
    float* dcarry = direct + B * U;
    float* ops = dcarry + B * U;
    const int j0 = c * U;
    const int units = min(U, H - j0);    // the last CTA may own fewer
    const bool vec = U % 4 == 0 && units == U && H % 4 == 0;  // runs of units are 16-byte aligned

    stage_w_all(W, RP * KP, math, [&](int i) {
        const int r = i / KP, k = i % KP, input = r >= RU, u = r - input * RU;
        float v = 0.0f;
        if (u < U && j0 + u < H) {
            if (input) v = k < GH ? dir.w_ih[(long long)k * H + j0 + u] : 0.0f;   // (project)
            else if (k < GH) v = dir.w_hh[(long long)k * H + j0 + u];
            else if (KX && k >= KH && k < KH + KX) v = dir.w_ih[(long long)(k - KH) * H + j0 + u];
        }
        return v;
    });
    for (int i = threadIdx.x; i < NBUF * BP * PKCP; i += PT) ring[i] = 0.0f;
    for (int e = threadIdx.x; e < B * U; e += PT) {
        const int b = e / U, j = j0 + e % U;
        direct[e] = j < H ? dir.dh[b * (long long)H + j] : 0.0f;
        if (MODE == MODE_LSTM) dcarry[e] = j < H ? dir.dc[b * (long long)H + j] : 0.0f;
    }

    unsigned int seen = 0;   // (wait_layer)
    for (int s = 0; s <= T; ++s) {
        MARK(0);
        const int t = direction ? s : T - 1 - s;  // (for s < T) the step whose cell runs now
        const int t_last = direction ? s - 1 : T - s;  // (for s > 0) the step processed at s - 1
        auto fetch = [&]() {  // the cell's operands at step t
            if (s < T) fetch_cell_operands<MODE>(ops, dir, t, direction, T, B, BT, H, U, j0, units, vec, dy_ld);
        };
        // the lower layer of a wavefront whose upper layer projects its dy: dy[t], once the upper layer's CTAs are past
        // their step s + 1 (the one that staged its dgates[t])
        if (WAVE && above != nullptr && !KX && s < T) {
            wait_layer(above, per_direction * (unsigned int)(s + 2), seen);
            MARK(10);
        }
        // dh entering this step's cell = direct + (dgates_h of the step processed last) @ W_hh [+ the wavefront's dy
        // at t: the upper layer's dgates_x[t] @ W_ih, once its CTAs are past their step s (KX: the GRU)].
        Operand own = {}, input = {};
        if (s > 0) {
            own = {dir.dgates_h + (long long)t_last * BT * GH,
                   dir.xchg == nullptr ? nullptr : dir.xchg + ((s - 1) % dir.slots) * (long long)BT * GH, GH, GH, 0};
        }
        if (KX && s < T) {
            grid_wait(above, per_direction * (unsigned int)(s + 1));
            MARK(10);
            input = {dir.x + (long long)t * BT * GH, nullptr, GH, GH, KH};
        }
        if (s > 0) {
            block_product(own, input, B, BP, W, RP, KP, ring, red, math, fetch);
        } else if (KX) {
            block_product(input, Operand{}, B, BP, W, RP, KP, ring, red, math, fetch);
        } else {
            __syncthreads();   // (what thread 0 acquired in wait_layer, for every thread's fetch)
            fetch();
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
        }
        if (s == T) {  // dh, dc now hold the gradients of the initial state
            for (int e = threadIdx.x; e < B * U; e += PT) {
                const int b = e / U, u = e % U, j = j0 + u;
                if (j >= H) continue;
                dir.dh[b * (long long)H + j] = direct[e] + red[b * RP + u];
                if (MODE == MODE_LSTM) dir.dc[b * (long long)H + j] = dcarry[e];
                if (project) dir.dy_low[((long long)t_last * BT + b) * H + j] = red[b * RP + RU + u];
            }
            if (project) grid_arrive(barrier);   // (the lower layer waits for its dy[t_last])
            break;
        }
        // this step's dgates_h, rounded to bfloat16, for the next step's product (math = 2): slot s & 1. As in the
        // forward, two passes around the barrier's arrival: first what the other CTAs read (the exchange, or the fp32
        // dgates_h; dgates_x too where the layer below reads it as fp32: x_first), then the rest, stashed over this
        // step's ops (which only this thread reads): LSTM dgates at q = 0..3, GRU dgates_x at 0..2 and dgates_h at 3..5.
        unsigned short* xc = dir.xchg == nullptr ? nullptr : dir.xchg + (s % dir.slots) * (long long)BT * GH;
        const bool h_first = xc == nullptr, x_first = h_first || x_shared;
        for (int e = threadIdx.x; e < B * U; e += PT) {
            const int b = e / U, u = e % U, j = j0 + u;
            if (j >= H) continue;
            // (project) the lower layer's dy[t_last] for these units: the product's W_ih columns
            if (project && s > 0) dir.dy_low[((long long)t_last * BT + b) * H + j] = red[b * RP + RU + u];
            const float dh = direct[e] + (s > 0 || KX ? red[b * RP + u] : 0.0f);
            const long long row = ((long long)t * BT + b) * GH + j;  // (t, b, gate 0, unit j) of dgates
            const long long xrow = b * (long long)GH + j;            // (b, gate 0, unit j) of the exchange slot
            float* stash = ops + b * NOPS * U + u;                    // entry q at stash[q * U]
            if (!step_is_valid(lengths, b, t)) {  // dh (and dc) pass through to the step before
                for (int g = 0; g < G; ++g) {
                    if (x_first) dir.dgates_x[row + g * H] = 0.0f;
                    if (h_first) dir.dgates_h[row + g * H] = 0.0f;
                    if (xc != nullptr) xc[xrow + g * H] = 0;
                }
                direct[e] = dh;
                continue;
            }
            float op[NOPS];  // this unit's operands (see fetch)
#pragma unroll
            for (int q = 0; q < NOPS; ++q) op[q] = stash[q * U];
            float dgx[4], dgh[4];
            cell_backward<MODE>(dh + op[NOPS - 1], op, dcarry[e], direct[e], relu, dgx, dgh);
            for (int g = 0; g < G; ++g) {
                if (x_first) dir.dgates_x[row + g * H] = dgx[g];
                if (MODE == MODE_GRU && h_first) dir.dgates_h[row + g * H] = dgh[g];
                if (xc != nullptr) xc[xrow + g * H] = bf16_bits(dgh[g]);
                stash[g * U] = dgx[g];
                if (MODE == MODE_GRU) stash[(3 + g) * U] = dgh[g];
            }
        }
        MARK(6);
        if (h_first && x_first) {   // nothing left to write
            grid_barrier(barrier, per_direction, s);
            MARK(9);
            TRACE_STEP(s);
            continue;
        }
        if (split_barrier) grid_arrive(barrier);
        else __syncthreads();
        MARK(7);
        write_stashed_dgates<MODE>(dir, ops, lengths, t, B, BT, H, U, j0, x_first, h_first);
        MARK(8);
        if (split_barrier) grid_wait(barrier, per_direction * (unsigned int)(s + 1));
        else grid_barrier(barrier, per_direction, s);
        MARK(9);
        TRACE_STEP(s);
    }
}

// ---------------------------------------------------------------------------------------------
// The partial-sum backward (dir.part set; the launcher's PARTIAL_BACKWARD: U % 4 == 0, H % 8 == 0, no wavefront).
// The backward above stages, at every step, all of the last step's dgates_h (B x G*H) into every CTA, because the
// CTA's dh[b, j] = sum_k dgates_h[b, k] W_hh[k, j] needs every k: 128 CTAs x 256 KB through L2 a step (LSTM 512, B32,
// fp32). Here the sum is split by k instead: CTA c holds the G*U ROWS of W_hh of its own units (as the forward does),
// and right after its cell multiplies its own gate gradients (B x G*U, never leaving the CTA) by them: a partial dh
// for all H units, (B x H), written to part[slot] (laid out by the CTA that reads it). After the barrier each CTA sums,
// for its own units, the CTAs' partials in a fixed order (deterministic): B x U floats from each, one contiguous block
// of 64 KB a step in all instead of 256 KB, and the product reads no staged operand. Shared memory: Wt (HP x KPW, Wt[j][g*U + u] = W_hh[g*H + j0 + u, j], KPW = G*U
// rounded up to 16, + 8; bf16: halves), dgs (BP x PKCP: this step's dgates_h of the CTA's units, the product's A),
// red (the gather's partial sums), direct, dcarry, ops (as above).
// ---------------------------------------------------------------------------------------------
template <int MODE>
__device__ __noinline__ void persistent_backward_partial(const DirBackward& dir, int direction, int c, int per_direction,
                                            const int* lengths, int T, int B, int BT, int H, int U, long long dy_ld,
                                            int relu, int math, unsigned int* barrier)
{
    constexpr int G = gate_count<MODE>();
    constexpr int NOPS = BackwardOperands<MODE>::NOPS;
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    const int GU = G * U, KW = round_up(GU, 16), KPW = KW + 8, HP = round_up(H, 8), BP = round_up(B, 16);
    float* Wt = smem;
    float* dgs = Wt + (math == 2 ? HP * KPW / 2 : HP * KPW);
    float* red = dgs + BP * PKCP;
    float* direct = red + RED;
    float* dcarry = direct + B * U;
    float* ops = dcarry + B * U;
    const int j0 = c * U;                 // (the launcher: H % U == 0, so every CTA owns U units)
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g8 = lane >> 2, t4 = lane & 3;

    stage_w_all(Wt, HP * KPW, math, [&](int i) {
        const int j = i / KPW, r = i % KPW, g = r / U, u = r % U;
        return j < H && r < GU ? dir.w_hh[(long long)(g * H + j0 + u) * H + j] : 0.0f;
    });
    for (int i = threadIdx.x; i < BP * PKCP; i += PT) dgs[i] = 0.0f;   // rows past B, columns past G*U stay zero
    for (int e = threadIdx.x; e < B * U; e += PT) {
        const int b = e / U, j = j0 + e % U;
        direct[e] = dir.dh[b * (long long)H + j];
        if (MODE == MODE_LSTM) dcarry[e] = dir.dc[b * (long long)H + j];
    }
    // The gather: thread (task, subset) sums the float4 runs of its task (row b, units 4q .. 4q + 3) over the sources
    // subset, subset + NS, ...; the NS subsets are then added in order by the cell's thread.
    const int tasks = B * (U / 4), NS = max(1, PT / tasks), BU = B * U;
    const int MT = BP / 16, NT = HP / 8, tiles = MT * NT;
    const long long slot_floats = (long long)per_direction * B * H;

    for (int s = 0; s <= T; ++s) {
        MARK(0);
        const int t = direction ? s : T - 1 - s;   // (for s < T) the step whose cell runs now
        if (s < T) fetch_cell_operands<MODE>(ops, dir, t, direction, T, B, BT, H, U, j0, U, true, dy_ld);
        cp_async_commit();
        if (s > 0) {   // the partials the CTAs wrote at step s - 1 (slot (s - 1) & 1), for this CTA's units
            const float* from = dir.part + ((s - 1) & 1) * slot_floats + (long long)c * per_direction * BU;
            for (int task = threadIdx.x % tasks; task < tasks && threadIdx.x < NS * tasks; task += PT) {
                const int b = task / (U / 4), q = task % (U / 4), subset = threadIdx.x / tasks;
                float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                // GATHER loads issued before any is added: one L2 round trip per GATHER sources, not one per source
                for (int src0 = subset; src0 < per_direction; src0 += GATHER * NS) {
                    float4 v[GATHER];
#pragma unroll
                    for (int k = 0; k < GATHER; ++k) {
                        const int src = src0 + k * NS;
                        v[k] = src < per_direction ? __ldcg(reinterpret_cast<const float4*>(
                                                         from + (long long)src * BU + b * U + 4 * q))
                                                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    }
#pragma unroll
                    for (int k = 0; k < GATHER; ++k) sum.x += v[k].x, sum.y += v[k].y, sum.z += v[k].z, sum.w += v[k].w;
                }
                *reinterpret_cast<float4*>(red + subset * BU + b * U + 4 * q) = sum;
            }
        }
        MARK(1);
        cp_async_wait<0>();
        __syncthreads();
        MARK(2);
        if (s == T) {  // dh, dc now hold the gradients of the initial state
            for (int e = threadIdx.x; e < BU; e += PT) {
                const int b = e / U, j = j0 + e % U;
                float rec = 0.0f;
                if (T > 0) for (int k = 0; k < NS; ++k) rec += red[k * BU + e];
                dir.dh[b * (long long)H + j] = direct[e] + rec;
                if (MODE == MODE_LSTM) dir.dc[b * (long long)H + j] = dcarry[e];
            }
            break;
        }
        for (int e = threadIdx.x; e < BU; e += PT) {
            const int b = e / U, u = e % U;
            float rec = 0.0f;
            if (s > 0) for (int k = 0; k < NS; ++k) rec += red[k * BU + e];
            const float dh = direct[e] + rec;
            float* stash = ops + b * NOPS * U + u;   // entry q at stash[q * U]; then the dgates to write (below)
            float* a = dgs + b * PKCP + u;           // gate g's gradient (dgates_h) at a[g * U]
            if (!step_is_valid(lengths, b, t)) {  // dh (and dc) pass through to the step before
                for (int g = 0; g < G; ++g) a[g * U] = 0.0f;
                direct[e] = dh;
                continue;
            }
            float op[NOPS];
#pragma unroll
            for (int q = 0; q < NOPS; ++q) op[q] = stash[q * U];
            float dgx[4], dgh[4];
            cell_backward<MODE>(dh + op[NOPS - 1], op, dcarry[e], direct[e], relu, dgx, dgh);
            for (int g = 0; g < G; ++g) {
                a[g * U] = dgh[g];
                stash[g * U] = dgx[g];
                if (MODE == MODE_GRU) stash[(3 + g) * U] = dgh[g];
            }
        }
        __syncthreads();
        MARK(6);
        // The partial dh of this CTA's gates for all H units: (B x G*U) @ (G*U x H), tiles of 16 x 8, at most 4 a warp
        // at a time (product_chunk with one accumulator each), written as they are done to part[s & 1], where the
        // partials each CTA gathers lie together: [its CTA][this CTA][b][u] (B x U floats from each source in a row).
        float* to = dir.part + (s & 1) * slot_floats + (long long)c * BU;
        const long long per_dest = (long long)per_direction * BU;
        for (int first = warp; first < tiles; first += 4 * NWARPS) {
            int a_off[4], w_off[4], my_tiles = 0;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int tile = first + q * NWARPS, mt = tile / NT, nt = tile % NT;
                my_tiles += tile < tiles;
                a_off[q] = (mt * 16 + g8) * PKCP + 2 * t4;
                w_off[q] = (nt * 8 + g8) * KPW + 2 * t4;
            }
            float acc[4][4] = {};
            if (math == 2) {
                product_chunk_bf16<1, false>(acc, dgs, Wt, 0, KW / 16, 0, 1, a_off, w_off, my_tiles);
            } else {
                product_chunk<1>(acc, dgs, Wt, 0, KW / 8, 0, 1, a_off, w_off, my_tiles, math);
            }
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int tile = first + q * NWARPS, mt = tile / NT, nt = tile % NT;
                const int row = mt * 16 + g8, col = nt * 8 + 2 * t4;
                if (tile >= tiles || col >= H) continue;
                float* at = to + (col / U) * per_dest + row * U + col % U;   // (col, col + 1: one CTA's, U % 4 == 0)
                if (row < B) *reinterpret_cast<float2*>(at) = make_float2(acc[q][0], acc[q][1]);
                if (row + 8 < B) *reinterpret_cast<float2*>(at + 8 * U) = make_float2(acc[q][2], acc[q][3]);
            }
        }
        MARK(3);
        grid_arrive(barrier);
        MARK(7);
        // (the split barrier) the step's dgates, from the stash, while the other CTAs arrive
        write_stashed_dgates<MODE>(dir, ops, lengths, t, B, BT, H, U, j0, false, false);
        MARK(8);
        grid_wait(barrier, per_direction * (unsigned int)(s + 1));
        MARK(9);
        TRACE_STEP(s);
    }
}

// Batch groups (the kernels' `nb`): the recurrence of batch row b reads no other row, so the batch can be split
// between nb independent groups of CTAs, each with its own barrier counters, rows b0 .. b0 + rows - 1 of every array
// and the same weights: a CTA then stages rows / B of the exchanged state a step (the staging is most of a backward
// step), for nb times the units. The launcher (batch_groups, forward_groups in minidl/primitives/cuda/
// rnn_persistent.py) says where it pays. backward_rows moves a direction's pointers to its group's first row (a copy in shared memory,
// read where used as the parameters are: a copy in registers spills); the kernel then indexes rows 0 .. rows - 1 with
// the whole batch's strides (BT). The forward adds the group's offsets where it uses its pointers, and only in the
// 256-thread compile (FORWARD_GROUPS, above persistent_forward).
template <class P>
__device__ __forceinline__ P* rows_at(P* p, long long offset) { return p == nullptr ? p : p + offset; }

// (part: the partial-sum backward's two slots, each group's apart: 2 x per_direction x Bg x H floats a group)
__device__ __forceinline__ DirBackward backward_rows(DirBackward d, long long b0, int G, int H, long long dy_ld,
                                                     long long part_floats)
{
    const long long GH = (long long)G * H;
    d.hs = rows_at(d.hs, b0 * H);
    d.cs = rows_at(d.cs, b0 * H);
    d.saved = rows_at(d.saved, b0 * 4 * H);
    d.dy = rows_at(d.dy, b0 * dy_ld);
    d.dgates_x = rows_at(d.dgates_x, b0 * GH);
    d.dgates_h = rows_at(d.dgates_h, b0 * GH);
    d.dh = rows_at(d.dh, b0 * H);
    d.dc = rows_at(d.dc, b0 * H);
    d.xchg = rows_at(d.xchg, b0 * GH);
    d.x = rows_at(d.x, b0 * GH);
    d.part = rows_at(d.part, part_floats);
    d.dy_low = rows_at(d.dy_low, b0 * H);
    return d;
}

// The kernels: one per mode and pass, each for both directions (d1 unused when there is one).
// Grid: nb * directions * ceil(H / U) CTAs of PT threads (batch group first, then direction or layer, then units; the
// forward's 512-thread compile: nb = 1); dynamic shared memory from the launcher (minidl/primitives/cuda/
// rnn_persistent.py), which also zeroes `barrier` (two counters per batch group: one per direction, or per layer in a
// wavefront).
#define PERSISTENT_FORWARD(NAME, MODE)                                                                       \
    extern "C" __global__ void __launch_bounds__(PT, 1) NAME(                                               \
        DirForward d0, DirForward d1, const int* lengths, int T, int B, int H, int U, long long y_ld, int relu, \
        int math, int wave, int nb_, unsigned int* barrier)                                                 \
    {                                                                                                       \
        /* (the 512-thread compile: one group, at compile time; the launcher passes nb = 1 to it) */          \
        const int nb = FORWARD_GROUPS ? nb_ : 1;                                                            \
        const int per_direction = (H + U - 1) / U, per_batch = gridDim.x / nb;                              \
        const int bg = FORWARD_GROUPS ? blockIdx.x / per_batch : 0;                                         \
        const int local = FORWARD_GROUPS ? blockIdx.x % per_batch : blockIdx.x;                             \
        const int group = local / per_direction, c = local % per_direction;                                 \
        const int Bg = (B + nb - 1) / nb, b0 = bg * Bg, rows = min(Bg, B - b0);                             \
        const int* lens = lengths == nullptr ? nullptr : lengths + b0;                                     \
        unsigned int* counters = barrier + 2 * bg;                                                          \
        if (group)  /* direction 1, or (wave) the upper layer, which waits for the lower one's counter */    \
            persistent_forward<MODE>(d1, wave ? 0 : 1, c, per_direction, lens, T, rows, B, b0, H, U, y_ld, relu, \
                                     math, counters + 1, wave ? counters : nullptr);                        \
        else  /* (wave: d0.gx_up is set, the lower layer also projects the upper one's input) */             \
            persistent_forward<MODE>(d0, 0, c, per_direction, lens, T, rows, B, b0, H, U, y_ld, relu, math,      \
                                     counters, nullptr);                                                    \
    }
#define PERSISTENT_BACKWARD(NAME, MODE)                                                                      \
    extern "C" __global__ void __launch_bounds__(PT, 1) NAME(                                               \
        DirBackward d0, DirBackward d1, const int* lengths, int T, int B, int H, int U, long long dy_ld,      \
        int relu, int math, int wave, int nb, unsigned int* barrier)                                        \
    {                                                                                                       \
        const int per_direction = (H + U - 1) / U, per_batch = gridDim.x / nb;                              \
        const int bg = blockIdx.x / per_batch, local = blockIdx.x % per_batch;                              \
        const int group = local / per_direction, c = local % per_direction;                                 \
        const int Bg = (B + nb - 1) / nb, b0 = bg * Bg, rows = min(Bg, B - b0);                             \
        const int* lens = lengths == nullptr ? nullptr : lengths + b0;                                     \
        unsigned int* counters = barrier + 2 * bg;                                                          \
        __shared__ DirBackward dir;   /* (the group's rows: backward_rows) */                               \
        const long long part = 2LL * bg * per_direction * Bg * H;                                           \
        if (threadIdx.x == 0) dir = backward_rows(group ? d1 : d0, b0, gate_count<MODE>(), H, dy_ld, part);  \
        __syncthreads();                                                                                    \
        if (dir.part != nullptr)  /* the partial-sum backward (never a wavefront) */                        \
            persistent_backward_partial<MODE>(dir, group, c, per_direction, lens, T, rows, B, H, U, dy_ld, relu, \
                                              math, counters + group);                                      \
        else if (!wave)  /* one layer, one or two directions (group: direction 1) */                       \
            persistent_backward<MODE, false>(dir, group, c, per_direction, lens, T, rows, B, H, U, dy_ld, relu, \
                                             math, counters + group, nullptr, false);                       \
        else if (group)  /* (wave) the lower layer, which waits for the upper one's counter */               \
            persistent_backward<MODE, true>(dir, 0, c, per_direction, lens, T, rows, B, H, U, dy_ld, relu, math, \
                                            counters + 1, counters, false);                                 \
        else  /* (wave) the upper layer (the GRU's: the layer below reads its dgates_x, x_shared) */         \
            persistent_backward<MODE, true>(dir, 0, c, per_direction, lens, T, rows, B, H, U, dy_ld, relu, math, \
                                            counters, nullptr, d1.x != nullptr);                            \
    }
PERSISTENT_FORWARD(rnn_persistent_forward, MODE_RNN)
PERSISTENT_FORWARD(lstm_persistent_forward, MODE_LSTM)
PERSISTENT_FORWARD(gru_persistent_forward, MODE_GRU)
PERSISTENT_BACKWARD(rnn_persistent_backward, MODE_RNN)
PERSISTENT_BACKWARD(lstm_persistent_backward, MODE_LSTM)
PERSISTENT_BACKWARD(gru_persistent_backward, MODE_GRU)
