# Source of tutorials/02_gpu_primitives.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 02

# %% [markdown]
# # 2. How GPU primitives work
#
# Every layer of a network ends up in a handful of **primitives**: pointwise functions (ReLU),
# reductions (softmax, batch-norm statistics) and matrix products (linear layers, and convolutions
# once lowered). minidl has each one twice: a NumPy reference in `minidl/primitives/cpu/` and a
# hand-written CUDA kernel in `kernels/`, launched from `minidl/primitives/cuda/`. In this notebook
# we read the two side by side, for three kernels of rising difficulty:
#
# 1. an **elementwise** kernel (activations): one thread per element, nothing to share;
# 2. a **reduction** (softmax): threads must combine their values, through warp shuffles;
# 3. a **tiled matrix product** (GEMM): threads share data through on-chip memory to reuse it.
#
# Then we time them, and explain the numbers with three ideas: **bandwidth** (bytes per second the
# memory delivers), **arithmetic intensity** (FLOPs per byte a kernel needs) and **occupancy**
# (how many threads the chip keeps in flight to hide latency). A **roofline** plot puts them together.
#
# Small mode times the NumPy references on the CPU (and draws the CPU's roofline); full mode on a
# GPU machine times minidl's kernels against the NumPy results and against cuBLAS.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes a few seconds on a 2-core CPU: the NumPy
# references at small sizes and the CPU's roofline. The kernels themselves need a CUDA GPU. Full mode
# without one times the NumPy references at the GPU's sizes (arrays up to 1 GiB: several GiB of
# memory and minutes) and skips the GPU cells, so on a laptop stay in small mode. The saved outputs
# come from a full run on an H200 (47 s).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile=["activation", "softmax", "gemm"])   # no timing below may include NVRTC

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
from minidl import primitives as P
from minidl.primitives.cpu import activation as cpu_activation, softmax as cpu_softmax
from minidl.primitives.gemm import gemm      # BLAS-style GEMM: np.matmul on the CPU, kernels/gemm.cu on the GPU

if USE_GPU:
    import cupy
    xp = cupy
else:
    xp = np

rel_err = tu.rel_err   # ||a - b|| / ||b|| in float64 (tutorial_utils.py)

def time_ms(fn, on_gpu):
    return tu.time_gpu_ms(fn) if on_gpu else tu.time_cpu_ms(fn, repeats=5 if MODE == "small" else 20)

# %% [markdown]
# ## 2.1 What a kernel is
#
# A CUDA kernel is one function that the GPU runs in many threads at once. Threads come in
# **warps** of 32 that execute the same instruction together, warps in **blocks** (up to 1024
# threads) that run on one **streaming multiprocessor** (SM) and can share its fast on-chip memory,
# and blocks in a **grid** that covers the whole problem. An H200 has 132 SMs, each holding up to
# 2048 threads (64 warps) at a time.
#
# minidl keeps its kernels as plain `.cu` files and compiles them at run time with NVRTC through
# CuPy's `RawModule`, once per process (then CuPy's disk cache). This is the whole mechanism:

# %%
# Read from the file rather than imported: importing minidl/primitives/cuda/ needs CuPy.
print(tu.python_function_from_file("minidl/primitives/cuda/_compile.py", "get_module"))

# %% [markdown]
# ## 2.2 Elementwise: activations
#
# The NumPy reference and the kernel compute the same function per element. The kernel adds two
# habits that matter on a GPU:
#
# * **16-byte accesses** (`float4`): each thread moves 4 floats per load, so a warp moves 512
#   contiguous bytes with one instruction. Neighbouring threads reading neighbouring addresses is
#   called **coalescing**; it is what lets the memory system deliver full bandwidth.
# * a **grid-stride loop**: a fixed grid sized to fill the GPU, each thread walking the array with a
#   stride of the whole grid, so any size runs with the same launch.

# %% tags=["listing"]
display(tu.SideBySide(
    "kernels/activation.cu (CUDA)",
    tu.cuda_function("activation", "activation_value") + "\n\n" + tu.cuda_function("activation", "activation_forward"),
    "minidl/primitives/cpu/activation.py (NumPy)",
    tu.python_source(cpu_activation._forward)))

# %% [markdown]
# A ReLU reads 4 bytes and writes 4 bytes per element and does one comparison: its
# arithmetic intensity is 1 FLOP / 8 bytes = 0.125 FLOP/byte. No processor can feed that from
# memory fast enough to be busy computing, so its speed is simply the **bandwidth** it reaches:
# `achieved GB/s = bytes moved / time`. We time it at several sizes, because small arrays are
# dominated by fixed costs (a kernel launch from Python costs several microseconds).
#
# On the GPU we also time the simplest possible kernel, one thread per element and scalar
# loads, written right here, to see what `float4` and the grid-stride loop buy.

# %%
NAIVE_RELU = r"""
extern "C" __global__ void relu_naive(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;   // one thread per element
    if (i < n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
"""
relu = P.ActivationDescriptor("relu")
sizes = [1 << 16, 1 << 18, 1 << 20] if MODE == "small" else [1 << 20, 1 << 24, 1 << 26, 1 << 28]
results = []      # (kernel, size label, ms, bytes, flops)
rng = np.random.default_rng(0)
for n in tqdm(sizes, desc="relu"):
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_ref = P.activation_forward(x_host, relu)
    nbytes = 2 * x_host.nbytes
    results.append(("relu (NumPy, CPU)", f"{n:,}", time_ms(lambda: P.activation_forward(x_host, relu), False),
                    nbytes, n))
    if USE_GPU:
        x_dev = cupy.asarray(x_host)
        y_dev = P.activation_forward(x_dev, relu)
        assert rel_err(y_dev, y_ref) == 0.0, "the kernel must match NumPy exactly for ReLU"
        results.append(("relu (minidl kernel)", f"{n:,}", time_ms(lambda: P.activation_forward(x_dev, relu), True),
                        nbytes, n))
        naive = cupy.RawKernel(NAIVE_RELU, "relu_naive")
        y_naive = cupy.empty_like(x_dev)
        launch = lambda: naive(((n + 255) // 256,), (256,), (x_dev, y_naive, np.int64(n)))
        launch()
        assert rel_err(y_naive, y_ref) == 0.0
        results.append(("relu (naive kernel)", f"{n:,}", time_ms(launch, True), nbytes, n))
        del x_dev, y_dev, y_naive

def table(rows):
    return tu.Table(["kernel", "size", "time ms", "GB/s", "GFLOP/s"],
                    [[k, s, ms, b / ms / 1e6, f / ms / 1e6] for k, s, ms, b, f in rows])

display(table(results))

# %% [markdown]
# ## 2.3 A reduction: softmax
#
# Softmax over a row needs the row's maximum and the sum of exponentials: every thread's values
# must be combined. The NumPy version is three lines. The kernel used for rows of up to 1024
# values gives each row to **one warp**: lane `l` holds columns `l, l+32, l+64, ...` in registers
# (so the row is read from memory once), and the warp combines its 32 partial results with
# **shuffles** (`__shfl_xor_sync`), which pass registers between lanes without touching memory.
# In five steps (offsets 16, 8, 4, 2, 1) every lane holds the total: a butterfly reduction.

# %% tags=["listing"]
display(tu.SideBySide(
    "kernels/softmax.cu + elementwise_common.cuh (CUDA)",
    tu.cuda_function("elementwise_common.cuh", "warp_max") + "\n\n"
    + tu.cuda_function("softmax", "softmax_forward_warp"),
    "minidl/primitives/cpu/softmax.py (NumPy)",
    tu.python_source(cpu_softmax.softmax_forward)))

# %% [markdown]
# Per element, softmax reads 4 bytes and writes 4 and does about 5 operations (max, subtract, exp,
# add, divide): still far below one FLOP per byte, so it too is judged by bandwidth. Large-row
# softmax (beyond 1024 columns) and the channel axis of an NCHW tensor use the other two kernels
# described at the top of `kernels/softmax.cu`.

# %%
rows_list = [64, 256, 1024] if MODE == "small" else [1024, 8192, 65536]
L = 1000
for rows in tqdm(rows_list, desc="softmax"):
    x_host = rng.standard_normal((rows, L), dtype=np.float32)
    y_ref = P.softmax_forward(x_host.astype(np.float64), axis=-1)
    assert rel_err(P.softmax_forward(x_host, axis=-1), y_ref) < 1e-6
    label = f"{rows}x{L}"
    results.append(("softmax (NumPy, CPU)", label,
                    time_ms(lambda: P.softmax_forward(x_host, axis=-1), False), 2 * x_host.nbytes, 5 * x_host.size))
    if USE_GPU:
        x_dev = cupy.asarray(x_host)
        err = rel_err(P.softmax_forward(x_dev, axis=-1), y_ref)
        assert err < 1e-5, f"softmax kernel error {err}"
        results.append(("softmax (minidl kernel)", label, time_ms(lambda: P.softmax_forward(x_dev, axis=-1), True),
                        2 * x_host.nbytes, 5 * x_host.size))
        del x_dev

display(table([r for r in results if r[0].startswith("softmax")]))

# %% [markdown]
# ## 2.4 The tiled matrix product
#
# `C = A @ B` with A (M, K) and B (K, N) does 2·M·N·K FLOPs on only 4·(MK + KN + MN) bytes of
# data: for square 4096 matrices, 683 FLOPs per byte. A GEMM *could* be compute-bound, but only
# if every value loaded from memory is reused many times. The naive kernel (one thread per output,
# reading a row of A and a column of B from DRAM) reuses nothing and runs at a few percent of peak.
#
# minidl's GEMM (`kernels/common.cuh`, used by `gemm.cu` and by the convolutions) reuses at two
# levels:
#
# * **shared memory tiles**: a block of 256 threads computes a 128 x 128 tile of C (narrower, 64 or
#   32 columns, when the problem has few columns: see the header below). Each step copies an 8-deep
#   slice of A (128 x 8) and of B (8 x 128) into shared memory once, and all 256 threads read it
#   from there: 2 x 128 x 8 floats loaded for 128 x 128 x 8 multiply-adds, 64 FMAs per float;
# * **register blocking**: each thread keeps an 8 x 8 block of C in registers and, per step, reads
#   8 values of A and 8 of B to do 64 FMAs: 4 FMAs per shared-memory float instead of 1/2.
#
# **Double buffering** overlaps the global loads of the next slice with the math on this one.
# The NumPy side is a single `np.matmul`, which calls the CPU's BLAS, itself a tiled GEMM of the
# same design tuned to the CPU's caches and vector registers.

# %% tags=["listing"]
display(tu.SideBySide(
    "kernels/common.cuh: the main loop (CUDA)",
    tu.header_comment("common.cuh") + "\n\n" + tu.cuda_function("common.cuh", "gemm_mainloop"),
    "minidl/primitives/gemm.py (the CPU path is the last lines: np.matmul)",
    tu.python_source(gemm)))

# %%

gemm_sizes = [64, 128, 256] if MODE == "small" else [256, 1024, 2048, 4096]
for n in tqdm(gemm_sizes, desc="gemm"):
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    c_ref = a_host.astype(np.float64) @ b_host.astype(np.float64)
    flops, nbytes = 2 * n ** 3, 4 * 3 * n * n
    assert rel_err(gemm(a_host, b_host), c_ref) < 1e-5
    results.append(("gemm (NumPy BLAS, CPU)", f"{n}^3", time_ms(lambda: gemm(a_host, b_host), False), nbytes, flops))
    if USE_GPU:
        a_dev, b_dev = cupy.asarray(a_host), cupy.asarray(b_host)
        err = rel_err(gemm(a_dev, b_dev), c_ref)
        assert err < 1e-4, f"gemm kernel error {err}"
        results.append(("gemm (minidl kernel)", f"{n}^3", time_ms(lambda: gemm(a_dev, b_dev), True), nbytes, flops))
        results.append(("gemm (cuBLAS)", f"{n}^3", time_ms(lambda: gemm(a_dev, b_dev, use_cublas=True), True),
                        nbytes, flops))
        del a_dev, b_dev

display(table([r for r in results if r[0].startswith("gemm")]))

# %% [markdown]
# ## 2.5 The ceilings: measured bandwidth and peak
#
# To judge a kernel we need the two limits of the machine, **measured here**, not copied from a
# datasheet:
#
# * **bandwidth**: a large device-to-device copy (GPU) or `np.copyto` (CPU), counting bytes read
#   plus bytes written. No real kernel moves data faster than a copy.
# * **peak FLOP/s**: on the GPU a kernel that does nothing but independent fused multiply-adds
#   (8 chains per thread, so every FP32 unit has work every cycle) over a grid that fills every SM;
#   on the CPU a large BLAS matrix product, which is the best float32 rate we can get from it.

# %%
FMA_PEAK = r"""
extern "C" __global__ void fma_peak(float* out, int iters, float a, float b) {
    // 8 independent chains: an FMA's result is ready ~4 cycles later, so a warp needs several
    // independent instructions in flight to keep its FP32 units busy.
    float x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
    #pragma unroll 16
    for (int i = 0; i < iters; ++i) {
        x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
        x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;  // keep the work alive
}
"""

if USE_GPU:
    nbytes = 1 << 30
    src, dst = cupy.ones(nbytes // 4, dtype=cupy.float32), cupy.empty(nbytes // 4, dtype=cupy.float32)
    copy_ms = tu.time_gpu_ms(lambda: dst.data.copy_from_device(src.data, nbytes))
    bandwidth = 2 * nbytes / (copy_ms * 1e-3)
    del src, dst
    sms = tu.gpu_attribute("MultiProcessorCount")
    peak_kernel = cupy.RawKernel(FMA_PEAK, "fma_peak")
    blocks, threads, iters = sms * 8, 256, 4096
    out = cupy.empty(blocks * threads, dtype=cupy.float32)
    peak_ms = tu.time_gpu_ms(lambda: peak_kernel((blocks,), (threads,),
                                                 (out, np.int32(iters), np.float32(0.999), np.float32(0.001))))
    peak = 2 * 8 * iters * blocks * threads / (peak_ms * 1e-3)
    clock_khz = tu.gpu_attribute("ClockRate")
    cc = (tu.gpu_attribute("ComputeCapabilityMajor"), tu.gpu_attribute("ComputeCapabilityMinor"))
    if clock_khz and cc == (9, 0):   # Hopper: 128 FP32 lanes per SM, 2 FLOPs per FMA
        print(f"datasheet-style peak: {sms} SMs x 128 lanes x 2 x {clock_khz / 1e6:.2f} GHz = "
              f"{sms * 128 * 2 * clock_khz * 1e3 / 1e12:.1f} TFLOP/s")
else:
    n_copy = (1 << 23) if MODE == "small" else (1 << 27)         # 32 MB or 512 MB of float32
    src, dst = np.ones(n_copy, dtype=np.float32), np.empty(n_copy, dtype=np.float32)
    copy_ms = tu.time_cpu_ms(lambda: np.copyto(dst, src), repeats=5)
    bandwidth = 2 * src.nbytes / (copy_ms * 1e-3)
    del src, dst
    n_peak = 512 if MODE == "small" else 2048
    a_host = rng.standard_normal((n_peak, n_peak), dtype=np.float32)
    peak_ms = tu.time_cpu_ms(lambda: a_host @ a_host, repeats=3)
    peak = 2 * n_peak ** 3 / (peak_ms * 1e-3)

ridge = peak / bandwidth
print(f"measured bandwidth {bandwidth / 1e9:,.0f} GB/s, measured peak {peak / 1e9:,.0f} GFLOP/s "
      f"({'FMA kernel' if USE_GPU else 'BLAS matmul'})")
print(f"ridge point: {ridge:.1f} FLOP/byte. A kernel needing fewer FLOPs per byte than this is memory-bound.")

# %% [markdown]
# ## 2.6 The roofline
#
# For a kernel with arithmetic intensity *I* (FLOPs per byte of compulsory memory traffic), the
# best possible rate is `min(peak, bandwidth x I)`: a sloped roof where memory limits, a flat one
# where arithmetic does, meeting at the ridge point. Each measured kernel is a point under the roof;
# the gap to the roof is what is left to win.
#
# Intensities here count **compulsory** traffic only: read each input once, write each output once.
# ReLU is 1/8, softmax about 5/8, an n x n x n GEMM is n/6.

# %%
# Only the kernels of the device whose roof this is (the NumPy rows belong to the CPU's roofline).
on_roof = [r for r in results if r[0].endswith("CPU)") != USE_GPU]
fig, ax = plt.subplots(figsize=(8, 5.5))
ai = np.logspace(-2, 4, 200)
ax.loglog(ai, np.minimum(peak, bandwidth * ai) / 1e9, "k-", lw=2,
          label=f"roof: {bandwidth / 1e9:,.0f} GB/s, {peak / 1e9:,.0f} GFLOP/s")
markers = dict(relu="o", softmax="s", gemm="^")
colors = {}
for kernel, size, ms, nbytes, flops in on_roof:
    color = colors.setdefault(kernel, f"C{len(colors)}")
    intensity = flops / nbytes
    ax.loglog(intensity, flops / ms / 1e6, markers[kernel.split()[0]], color=color, ms=7, alpha=0.8,
              label=kernel if kernel not in ax.get_legend_handles_labels()[1] else None)
    ax.annotate(size, (intensity, flops / ms / 1e6), fontsize=6, xytext=(3, 3), textcoords="offset points")
ax.axvline(ridge, color="0.6", ls=":", lw=1)
ax.set_xlabel("arithmetic intensity (FLOP / byte of compulsory traffic)")
ax.set_ylabel("achieved GFLOP/s")
ax.set_title(f"Roofline: {DEVICE}")
ax.legend(fontsize=7, loc="lower right")
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %%
best = {}   # kernel -> (fraction of bandwidth, fraction of peak, size) at the size nearest its roof
for kernel, size, ms, nbytes, flops in on_roof:
    frac_bw, frac_peak = nbytes / (ms * 1e-3) / bandwidth, flops / (ms * 1e-3) / peak
    if kernel not in best or max(frac_bw, frac_peak) > max(best[kernel][:2]):
        best[kernel] = (frac_bw, frac_peak, size)
display(tu.Table(["kernel", "best size", "% of measured bandwidth", "% of measured peak"],
                 [[k, s, 100 * b, 100 * p] for k, (b, p, s) in best.items()],
                 title="How close each kernel gets to its roof (best size)"))

# %% [markdown]
# ## 2.7 Occupancy: why the GPU needs so many threads
#
# A load from DRAM takes hundreds of cycles. A GPU hides that latency not with big caches but with
# **other warps**: while one waits, the scheduler issues instructions of another. The number of
# warps an SM can hold at once is its **occupancy**, limited by whichever runs out first:
#
# * threads: at most 2048 per SM (64 warps);
# * registers: 65,536 per SM, shared by every resident thread;
# * shared memory: about 228 KB per SM on an H200, shared by every resident block;
# * blocks: at most 32 per SM.
#
# The GEMM trades occupancy for reuse on purpose: 64 accumulators per thread cost registers, and its
# double-buffered tiles cost shared memory, so fewer blocks fit. It hides latency with
# **instruction-level parallelism** (64 independent FMAs per step) instead of with more warps.
# On the GPU the table below reads each kernel's registers and shared memory from the compiled code.

# %%
if USE_GPU:
    import re
    from minidl.primitives.cuda._compile import get_kernel

    limits = dict(threads=tu.gpu_attribute("MaxThreadsPerMultiProcessor"),
                  regs=tu.gpu_attribute("MaxRegistersPerMultiprocessor"),
                  smem=tu.gpu_attribute("MaxSharedMemoryPerMultiprocessor"),
                  blocks=tu.gpu_attribute("MaxBlocksPerMultiprocessor"))
    rows = []
    # The GEMM entry point's name carries its tile width in newer versions of kernels/gemm.cu.
    gemm_name = next(n for n in ("gemm_nn_bn128", "gemm_nn")
                     if re.search(rf"\b{n}\b", tu.kernel_source("gemm")))
    for family, name, block in [("activation", "activation_forward", 256), ("softmax", "softmax_forward_warp_32", 128),
                                ("gemm", gemm_name, 256)]:
        k = get_kernel(family, name)
        regs, smem = k.attributes["num_regs"], k.attributes["shared_size_bytes"]
        # Registers are allocated per warp in units of 256.
        regs_per_warp = -(-regs * 32 // 256) * 256
        fit = dict(threads=limits["threads"] // block,
                   regs=limits["regs"] // (regs_per_warp * (block // 32)),
                   smem=limits["smem"] // smem if smem else limits["blocks"],
                   blocks=limits["blocks"])
        resident = min(fit.values())
        limiter = min(fit, key=fit.get)
        rows.append([name, block, regs, smem, resident, limiter, 100 * resident * block / limits["threads"]])
    display(tu.Table(["kernel", "threads/block", "registers/thread", "shared bytes/block", "blocks/SM",
                      "limited by", "occupancy %"], rows))
else:
    print("Occupancy needs the compiled kernels (GPU) and was skipped:", WHY_NOT_GPU)
    print("The CPU analogue: a core hides memory latency with out-of-order execution and prefetching, "
          "and uses SIMD lanes (8 or 16 floats) instead of thousands of threads.")

# %% [markdown]
# ## What the numbers say
#
# * **Elementwise and softmax kernels are memory-bound**: their points sit on the sloped part of the
#   roof, and the right yardstick is the fraction of the copy bandwidth they reach (80-90% is good).
#   Small sizes fall short because a launch and a few microseconds of fixed cost dominate: batching
#   and fusing operations is the only cure. On the GPU, compare the naive ReLU with minidl's: at large
#   sizes both are limited by DRAM and come close; `float4` accesses mostly help by needing fewer
#   instructions (and fewer threads) per byte.
# * **GEMM is compute-bound** at large sizes: its intensity grows as n/6, so it moves right along the
#   x-axis as n grows, and its height shows how good the tiling is. cuBLAS on the GPU is the
#   yardstick; minidl's simple 128 x 128 tile with 8 x 8 register blocks reaches a good fraction of it
#   (see `benchmarks/results/` for the latest measured ratio), and the rest is warp tiling, tensor cores
#   and Hopper's asynchronous copies.
# * On the **CPU**, the same picture holds with smaller numbers: `np.copyto` bandwidth is the roof
#   for NumPy's elementwise code (which also makes temporaries: each extra array is another pass over
#   memory), and BLAS is the roof for everything else.
#
# ## Exercises
#
# 1. Write a `sigmoid_naive` RawKernel (one thread per element) and compare its GB/s with
#    `P.activation_forward(x, P.ActivationDescriptor("sigmoid"))`. Is sigmoid still memory-bound?
#    Compute its arithmetic intensity counting `expf` as ~20 FLOPs.
# 2. Count the bytes of the NumPy softmax reference: how many full passes over the array do
#    `x - max`, `exp`, `sum` and `/` make? Why is the one-warp-per-row kernel faster than that count
#    would allow for NumPy?
# 3. For the GEMM tile of 128 x 128 with K-steps of 8, compute the FLOPs per byte of global memory
#    traffic. Where does that put the kernel relative to the ridge point? What about a 32 x 32 tile?
# 4. Time `gemm` at n = 1000, 1023, 1024 and 1025 on the GPU. Explain the differences using the tile
#    size and the float4 fast path (`vec_a`, `vec_b` in `minidl/primitives/cuda/gemm.py`).
# 5. In the occupancy table, which resource limits the GEMM? Change `__launch_bounds__(GEMM_THREADS, 2)`
#    in `kernels/gemm.cu` to `(GEMM_THREADS, 1)`, re-run, and compare registers, occupancy and speed.
