# Source of tutorials/07_tensor_cores.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 07

# %% [markdown]
# # 7. Tensor cores
#
# Tutorial 2 wrote a matrix product for the GPU's ordinary arithmetic units (the "CUDA cores"): each
# thread does scalar fused multiply-adds, 2 FLOPs each. An H200 has 132 SMs x 128 of those lanes, about
# **67 TFLOP/s** in fp32. Next to them every SM has four **tensor cores**: units that multiply small
# *matrices* in one instruction. They reach about **495 TFLOP/s** on TF32 inputs and **990 TFLOP/s** on
# fp16 / bf16 inputs (dense, with fp32 accumulation) — 7 to 15 times the CUDA cores. Every framework
# trains on them today: PyTorch runs convolutions in TF32 by default and `torch.autocast` runs matrix
# work in half precision.
#
# This notebook opens them up:
#
# 1. **one warp-level instruction**, `mma.sync.m16n8k8` (TF32): which thread holds which matrix element
#    (the *fragment layout*), drawn, and checked with a NumPy simulation of the warp;
# 2. **what TF32, fp16 and bf16 do to the numbers**: the formats, the error of a product against an fp64
#    reference as the reduction gets longer, a histogram;
# 3. **our tensor-core GEMM read beside the fp32 one** (`kernels/gemm_tc.cu` against `kernels/gemm.cu`);
# 4. **the roofline with both roofs**, and the **speed table** (ours against cuBLAS, same process).
#
# **Running it on a CPU.** Small mode (the default) takes a few seconds on a 2-core CPU: the fragment
# layout and the warp simulation, the TF32 / bf16 / fp16 errors from the NumPy reference (which emulates
# TF32 rounding) at K up to 1024, the kernel sources and the H200's datasheet roofline. Full mode on a
# CPU adds longer reductions (K up to 16384, about a minute) and skips the GPU cells; on a GPU machine
# it times our tensor-core GEMMs against cuBLAS (under a minute on an H200).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile=["gemm"])
# (gemm_tc compiles each variant on first use, in the warm-up calls of every timing: no timing includes NVRTC)

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
from minidl import primitives as P

if USE_GPU:
    import cupy

rel_err = tu.rel_err   # ||a - b|| / ||b|| in float64 (tutorial_utils.py)

# %% [markdown]
# ## 7.1 One instruction, one warp, one 16x8x8 product
#
# A tensor-core instruction is executed by a whole **warp** (32 threads) together. PTX's
#
# ```
# mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32  {d0,d1,d2,d3}, {a0,a1,a2,a3}, {b0,b1}, {c0,c1,c2,c3};
# ```
#
# computes D = A x B + C for A of 16 x 8, B of 8 x 8 and C, D of 16 x 8 (M=16, N=8, K=8). No thread
# holds a whole matrix: the 128 elements of A are spread over the 32 threads, **4 registers each**
# (a0..a3), the 64 of B 2 each, the 128 of C and D 4 each. Which element sits in which register of
# which thread is fixed by the hardware, and a kernel must load its data into exactly that
# arrangement — the **fragment layout**. With `lane` the thread's index in the warp,
# `group = lane // 4` and `t = lane % 4`:
#
# | fragment | register | row | column |
# | --- | --- | --- | --- |
# | A (16x8, row-major) | a0, a1, a2, a3 | group, group+8, group, group+8 | t, t, t+4, t+4 |
# | B (8x8, "col": K down the rows) | b0, b1 | t, t+4 | group |
# | C, D (16x8) | c0, c1, c2, c3 | group, group, group+8, group+8 | 2t, 2t+1, 2t, 2t+1 |
#
# Written as code (the same index arithmetic sits in the kernel's fragment loads):

# %%
def frag_a(lane, reg):
    """(row, col) of A (16 x 8) held in register `reg` (0-3) of thread `lane` (0-31)."""
    group, t = lane // 4, lane % 4
    return group + 8 * (reg % 2), t + 4 * (reg // 2)

def frag_b(lane, reg):
    """(row = k, col = n) of B (8 x 8) in register `reg` (0-1) of thread `lane`."""
    group, t = lane // 4, lane % 4
    return t + 4 * reg, group

def frag_c(lane, reg):
    """(row, col) of C / D (16 x 8) in register `reg` (0-3) of thread `lane`."""
    group, t = lane // 4, lane % 4
    return group + 8 * (reg // 2), 2 * t + reg % 2

# Every element has exactly one owner: the layout is a bijection onto the matrix.
for frag, regs, shape in ((frag_a, 4, (16, 8)), (frag_b, 2, (8, 8)), (frag_c, 4, (16, 8))):
    owners = {frag(lane, r) for lane in range(32) for r in range(regs)}
    assert len(owners) == shape[0] * shape[1] == 32 * regs, frag.__name__
print("each of the 32 threads holds 4 elements of A, 2 of B, 4 of C: every element exactly once")

# %% [markdown]
# Drawn: each cell shows the thread (T) that holds the element and the register (a, b, c index).
# The four threads of a *group* share a row of A and of C; the colours are the eight groups.

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 6.2), gridspec_kw={"width_ratios": [8, 8, 8]})
for ax, frag, regs, shape, name in ((axes[0], frag_a, 4, (16, 8), "A (16 x 8): registers a0..a3"),
                                    (axes[1], frag_b, 2, (8, 8), "B (8 x 8): registers b0, b1"),
                                    (axes[2], frag_c, 4, (16, 8), "C, D (16 x 8): registers c0..c3")):
    colour = np.zeros(shape)
    for lane in range(32):
        for r in range(regs):
            row, col = frag(lane, r)
            colour[row, col] = lane // 4
            ax.text(col, row, f"T{lane}\n{name[0].lower()}{r}", ha="center", va="center", fontsize=6.5)
    ax.imshow(colour, cmap="Pastel2", aspect="equal")
    ax.set_title(name, fontsize=10)
    ax.set_xticks(range(shape[1]))
    ax.set_yticks(range(shape[0]))
    ax.set_xlabel("column (N for B and C, K for A)")
    ax.set_ylabel("row (M for A and C, K for B)")
fig.suptitle("mma.sync.m16n8k8 (TF32): which thread holds which element")
tu.stamp(fig, "layout from the PTX ISA (no device needed)", MODE)
plt.show()

# %% [markdown]
# ### The warp in NumPy
#
# To make sure the table means what we think, we play the warp: scatter A and B into 32 threads'
# registers by the layout, let "the tensor core" gather them, multiply and scatter D back into the
# threads' c-registers, then read D out of the registers again and compare with `A @ B + C`. (The
# hardware does the gather and the multiply inside the instruction; the kernel only has to put the
# right value in the right register of the right thread.)

# %%
def warp_registers(matrix, frag, regs):
    """(32, regs) array: what each thread holds of `matrix` under the layout `frag`."""
    return np.array([[matrix[frag(lane, r)] for r in range(regs)] for lane in range(32)])

def tensor_core_mma(a_regs, b_regs, c_regs):
    """What the instruction does: gather the fragments, D = A B + C, scatter D into c-registers."""
    A, B, C = np.zeros((16, 8)), np.zeros((8, 8)), np.zeros((16, 8))
    for lane in range(32):
        for r in range(4):
            A[frag_a(lane, r)] = a_regs[lane, r]
            C[frag_c(lane, r)] = c_regs[lane, r]
        for r in range(2):
            B[frag_b(lane, r)] = b_regs[lane, r]
    return warp_registers(A @ B + C, frag_c, 4)

rng = np.random.default_rng(0)
A, B, C = rng.standard_normal((16, 8)), rng.standard_normal((8, 8)), rng.standard_normal((16, 8))
d_regs = tensor_core_mma(warp_registers(A, frag_a, 4), warp_registers(B, frag_b, 2), warp_registers(C, frag_c, 4))
D = np.zeros((16, 8))
for lane in range(32):
    for r in range(4):
        D[frag_c(lane, r)] = d_regs[lane, r]
print("max |D - (A @ B + C)| =", float(np.abs(D - (A @ B + C)).max()))
print("thread 5 holds A", [frag_a(5, r) for r in range(4)], " B", [frag_b(5, r) for r in range(2)],
      " C", [frag_c(5, r) for r in range(4)])

# %% [markdown]
# A GEMM on tensor cores is then the tiled GEMM of tutorial 2 with the innermost loop replaced: a
# block stages tiles of A and B in shared memory (with `cp.async`, which copies global to shared
# memory without passing through registers, several tiles ahead: a **multi-stage pipeline**), each
# warp loads its fragments from shared memory in the layout above, and issues `mma.sync` over its
# part of the block's tile. For 16-bit inputs the instruction is `m16n8k16` and the loads use
# `ldmatrix`, which reads an 8x8 tile of 16-bit values from shared memory straight into that
# layout. The layout of the shared tiles is **swizzled** (addresses XOR-permuted) so that the 32
# threads of a fragment load hit 32 different memory banks.

# %% [markdown]
# ## 7.2 What TF32, fp16 and bf16 do to the numbers
#
# | format | sign / exponent / mantissa bits | unit roundoff (2^-(mantissa+1)) | largest finite |
# | --- | --- | --- | --- |
# | fp32 | 1 / 8 / 23 | 6.0e-8 | 3.4e38 |
# | TF32 (tensor-core input) | 1 / 8 / 10 | 4.9e-4 | 3.4e38 |
# | bf16 | 1 / 8 / 7 | 3.9e-3 | 3.4e38 |
# | fp16 | 1 / 5 / 10 | 4.9e-4 | 65504 |
#
# TF32 is not a storage format: the tensors stay fp32 in memory, the tensor core rounds each *input*
# to 10 mantissa bits, multiplies exactly and **accumulates in fp32**. bf16 keeps fp32's range with
# fewer digits; fp16 has TF32's digits but a small range (hence loss scaling, below). The product's
# error therefore comes from rounding the inputs, not from the sum: it does not grow with K the way
# an fp16 *accumulator* would.
#
# minidl's primitive library takes the math mode as an argument, as cuDNN does (`math="fp32"` or
# `"tf32"`); half inputs run in half. On the CPU the NumPy reference **emulates** TF32 (it rounds both
# operands to 10 mantissa bits, then multiplies in fp32), so we can measure the errors without a GPU:

# %%
Ks = [64, 256, 1024] if MODE == "small" else [64, 256, 1024, 4096, 16384]
M = N = 64 if MODE == "small" else 256
errors = {"fp32": [], "tf32": [], "bf16": [], "fp16": []}
try:
    import ml_dtypes
    BF16 = ml_dtypes.bfloat16
except ImportError:            # ml_dtypes comes with minidl's dependencies; without it, no bf16 row
    BF16 = None
for K in tqdm(Ks, desc="K"):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    errors["fp32"].append(rel_err(P.gemm(a, b), exact))
    errors["tf32"].append(rel_err(P.gemm(a, b, math="tf32"), exact))
    errors["fp16"].append(rel_err(P.gemm(a.astype(np.float16), b.astype(np.float16)), exact))
    if BF16 is not None:
        errors["bf16"].append(rel_err(P.gemm(a.astype(BF16), b.astype(BF16)), exact))
rows = [[K] + [errors[k][i] if i < len(errors[k]) else None for k in errors] for i, K in enumerate(Ks)]
display(tu.Table(["K", "fp32", "TF32 (emulated)", "bf16 inputs", "fp16 inputs"], rows,
                 title=f"relative error ||C - C_fp64|| / ||C_fp64|| of a ({M} x K) @ (K x {N}) product, CPU reference"))

fig, ax = plt.subplots(figsize=(7, 4))
for k, v in errors.items():
    if v:
        ax.loglog(Ks[:len(v)], v, "o-", label=k)
ax.set_xlabel("K (length of each dot product)")
ax.set_ylabel("relative error against fp64")
ax.set_title("Input rounding, fp32 accumulation: the error hardly grows with K")
ax.legend()
tu.stamp(fig, "NumPy reference (CPU)", MODE)
plt.show()

# %% [markdown]
# The testing rule of this project follows from the table: fp32 results are checked to 1e-5 (CPU) /
# 1e-4 (GPU) relative, TF32 to 5e-3, bf16 and fp16 by their precision. The histogram shows the
# element-wise picture for one product: most elements are far better than the norm-wise figure, a
# few (those whose dot product cancels to a small value) far worse — which is why relative error
# is measured on the whole matrix.

# %%
K = Ks[-1]
a = rng.standard_normal((M, K)).astype(np.float32)
b = rng.standard_normal((K, N)).astype(np.float32)
exact = a.astype(np.float64) @ b.astype(np.float64)
scale = np.abs(exact).mean()
fig, ax = plt.subplots(figsize=(7, 4))
for name, c in (("fp32", P.gemm(a, b)), ("tf32", P.gemm(a, b, math="tf32")),
                ("fp16", P.gemm(a.astype(np.float16), b.astype(np.float16)))):
    err = np.abs(np.asarray(c, dtype=np.float64) - exact) / scale
    ax.hist(np.log10(err.ravel() + 1e-30), bins=60, alpha=0.6, label=name)
ax.set_xlabel("log10(|error| / mean |C|) per element")
ax.set_ylabel("elements")
ax.set_title(f"Element-wise error of one {M}x{K} @ {K}x{N} product")
ax.legend()
tu.stamp(fig, "NumPy reference (CPU)", MODE)
plt.show()

# %% [markdown]
# In the framework the math mode is a switch with PyTorch's names and defaults:
# `minidl.backends.cudnn.allow_tf32` (convolutions and RNNs, **on** by default, as in PyTorch) and
# `minidl.backends.cuda.matmul.allow_tf32` (Linear and matmul, **off** by default). Half precision comes
# through `minidl.autocast("cuda", dtype=minidl.float16)`, which runs matrix work in half and keeps
# reductions, softmax, norms and losses in fp32, and `minidl.amp.GradScaler`, which multiplies the loss
# so that small fp16 gradients do not flush to zero, and skips a step whose gradients overflowed.

# %%
print("cudnn.allow_tf32 =", minidl.backends.cudnn.allow_tf32,
      "| cuda.matmul.allow_tf32 =", minidl.backends.cuda.matmul.allow_tf32)
model = minidl.nn.Linear(64, 10)
x = minidl.randn(8, 64)
with minidl.autocast("cpu", dtype=minidl.bfloat16):
    y = model(x)                              # matrix work in bf16 (the CPU's autocast dtype)
    loss = minidl.nn.functional.cross_entropy(y, minidl.randint(0, 10, (8,)))   # losses in fp32
print("inside autocast: linear ->", y.dtype, "| cross_entropy ->", loss.dtype)
loss.backward()
print("the master weights and their gradient stay fp32:", model.weight.dtype, model.weight.grad.dtype)

# %% [markdown]
# ## 7.3 Our tensor-core GEMM beside the fp32 one
#
# The header of `kernels/gemm_tc.cu` says how it is built: the tile hierarchy (block tile, warp tile,
# instruction tile), the pipeline, the fragment layouts of the table above.

# %%
print(tu.header_comment("gemm_tc"))

# %% [markdown]
# The inner loops side by side: the fp32 kernel's thread multiplies its register tile of A by its
# register tile of B with scalar FMAs; the tensor-core kernel's warp loads fragments and issues one
# `mma` per 16 x 8 x 8 (TF32) or 16 x 8 x 16 (half) piece.

# %% tags=["listing"]
fp32_file, fp32_loop = tu.find_cuda_function("gemm_mainloop")
display(tu.SideBySide(f"kernels/{fp32_file}: the fp32 main loop (CUDA cores, scalar FMAs)", fp32_loop,
                      "kernels/tc_common.cuh (gemm_tc.cu's and attention.cu's): the tensor-core instructions "
                      "(one per 16x8 tile of C)",
                      tu.cuda_function("tc_common.cuh", "to_tf32") + "\n\n" + tu.cuda_function("tc_common.cuh", "mma")))

# %% [markdown]
# ## 7.4 The roofline with both roofs, and the speed table
#
# A kernel's best rate is `min(peak, bandwidth x intensity)`. Tensor cores raise the flat roof
# 7-15x but not the sloped one: the ridge point (the intensity needed to be compute-bound) moves
# from ~14 FLOP/byte (fp32) to ~100 (TF32) and ~200 (fp16) on an H200. A 4096^3 GEMM
# (intensity ~680 FLOP/byte in fp32, twice that in half) is still under the flat roof; small or thin
# GEMMs (K <= 64, the first convolution layers) are not, and gain little.
#
# Full mode measures our kernels and cuBLAS (through CuPy, which calls cuBLAS with the same math) in
# the same process; small mode draws the H200's datasheet roofs.

# %%
BANDWIDTH = 4.8e12          # H200 HBM3e, bytes/s (datasheet)
ROOFS = {"fp32 (CUDA cores)": 67e12, "TF32 (tensor cores)": 495e12, "fp16 / bf16 (tensor cores)": 990e12}
points = []                 # (label, intensity, FLOP/s)
speed_rows = []
if USE_GPU:
    import torch             # the yardstick only: cuBLAS with the same math, on the same arrays (DLPack)
    n = 4096
    for label, dtype, math in (("fp32", np.float32, "fp32"), ("TF32", np.float32, "tf32"),
                               ("fp16", np.float16, None), ("bf16", "bfloat16", None)):
        a_dev = cupy.random.standard_normal((n, n), dtype=np.float32).astype(dtype)
        b_dev = cupy.random.standard_normal((n, n), dtype=np.float32).astype(dtype)
        kwargs = {"math": math} if math else {}
        ours = tu.time_gpu_ms(lambda: P.gemm(a_dev, b_dev, **kwargs), repeats=20)
        a_t, b_t = torch.from_dlpack(a_dev), torch.from_dlpack(b_dev)
        torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
        cublas = tu.time_gpu_ms(lambda: torch.matmul(a_t, b_t), repeats=20)
        torch.backends.cuda.matmul.allow_tf32 = False
        flops = 2 * n ** 3
        nbytes = 3 * n * n * a_dev.itemsize
        points.append((f"ours {label}", flops / nbytes, flops / (ours * 1e-3)))
        points.append((f"cuBLAS {label}", flops / nbytes, flops / (cublas * 1e-3)))
        speed_rows.append([label, ours, flops / (ours * 1e-3) / 1e12, cublas, flops / (cublas * 1e-3) / 1e12,
                           ours / cublas])
        del a_dev, b_dev, a_t, b_t
    display(tu.Table(["GEMM 4096^3", "ours ms", "ours TFLOP/s", "cuBLAS ms", "cuBLAS TFLOP/s", "ours / cuBLAS"],
                     speed_rows, title=f"{DEVICE}, same process, CUDA events, median of 20"))

fig, ax = plt.subplots(figsize=(8, 5))
ai = np.logspace(-1, 4, 200)
for (name, peak), style in zip(ROOFS.items(), ("k-", "b--", "r-.")):
    ax.loglog(ai, np.minimum(peak, BANDWIDTH * ai) / 1e12, style, lw=2, label=f"{name}: {peak / 1e12:.0f} TFLOP/s")
for label, intensity, rate in points:
    ax.plot(intensity, rate / 1e12, "o")
    ax.annotate(label, (intensity, rate / 1e12), textcoords="offset points", xytext=(5, -10), fontsize=8)
ax.set_xlabel("arithmetic intensity (FLOP / byte of DRAM traffic)")
ax.set_ylabel("TFLOP/s")
ax.set_title("Roofline of an H200: the CUDA-core roof and the tensor-core roofs")
ax.legend(loc="lower right", fontsize=8)
tu.stamp(fig, DEVICE if USE_GPU else "H200 datasheet roofs (no measurements in small mode)", MODE)
plt.show()

# %% [markdown]
# The committed measurements of every tensor-core kernel against cuBLAS / cuDNN (GEMM 4096^3, the
# convolution layers of `docs/GPU.md` forward + backward, the training steps with
# autocast) are in `benchmarks/results/gpu_gemm_tc.md` and `gpu_conv_tc.md`, each with its date,
# commit and device, and the command that reproduces it.
