# Source of tutorials/03_convolution_algorithms.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 03

# %% [markdown]
# # 3. Convolution algorithms
#
# A convolution layer computes one function, but there are many ways to compute it, and no single
# way is fastest for every shape. cuDNN therefore offers several **algorithms** per convolution, each
# with its own speed and its own need for scratch memory (**workspace**), and lets the framework
# choose: by a fixed heuristic, by measuring them all (`torch.backends.cudnn.benchmark = True`), or
# under a memory budget. minidl's primitive library does the same; these five algorithms are the subject here:
#
# | algorithm | idea | workspace |
# | --- | --- | --- |
# | `direct` | the definition: loop over the filter window | none |
# | `im2col_gemm` | copy every input window into a big matrix, then one matrix product | the column matrix |
# | `implicit_gemm` | the same matrix product, but gather the windows on the fly, never storing them | none (GPU) |
# | `implicit_precomp_gemm` | implicit GEMM with the index arithmetic precomputed into a table | a small table |
# | `winograd` | F(2x2, 3x3): fewer multiplications per output for 3x3 stride-1 filters | transformed tiles |
#
# The CPU has `direct`, `im2col_gemm` and `winograd` (NumPy references); the GPU all five (CUDA
# kernels). Both also have an FFT convolution (`fft`), and the GPU a tensor-core implicit GEMM
# (`implicit_gemm_tc`, tutorial 7): they appear in the tables below too. Below we read each algorithm's code, run the same layer with each, measure time and
# workspace on several shapes, try the selection policies, and compare the NCHW and NHWC layouts.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes a few seconds on a 2-core CPU, full mode
# (larger layers; the GPU-only algorithms skipped without a GPU) ~30 s. The saved outputs come from a
# full run on an H200 (50 s, 27 s of it compiling the kernels on a fresh machine: the timings exclude it).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile=["convolution", "gemm"])   # no timing below may include NVRTC

import math
import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
from minidl import primitives as P
from minidl.primitives.cpu import convolution as cpu_conv

DEV = "cuda" if USE_GPU else "cpu"
if USE_GPU:
    import cupy
    to_device = cupy.asarray
    to_host = cupy.asnumpy
else:
    to_device = to_host = np.asarray

rel_err = tu.rel_err   # ||a - b|| / ||b|| in float64 (tutorial_utils.py)

# %% [markdown]
# ## 3.1 The function, and how to describe it
#
# For an input `x` of shape (N, C, H, W) and filters `w` of shape (K, C, R, S), with padding *p*,
# stride *s* and dilation *d*,
#
# `y[n, k, i, j] = sum over c, a, b of w[k, c, a, b] * x_padded[n, c, i*s + a*d, j*s + b*d]`
#
# (a cross-correlation, as in every framework). It costs 2·N·K·P·Q·C·R·S FLOPs for an output of
# P x Q pixels. As in cuDNN, the hyper-parameters go into a **descriptor**, and the shapes are
# checked once at the boundary, with errors that name the shapes:

# %%
desc = P.ConvolutionDescriptor(padding=1, stride=1, dilation=1, groups=1)
print(desc)
print("output shape:", P.convolution_output_shape((8, 3, 32, 32), (16, 3, 3, 3), desc))
try:
    P.convolution_forward(np.zeros((8, 4, 32, 32), np.float32), np.zeros((16, 3, 3, 3), np.float32), desc)
except ValueError as e:
    print("ValueError:", e)

# %% [markdown]
# ## 3.2 `direct`
#
# The definition, vectorised over the batch and the output pixels: for each of the R·S filter taps,
# multiply a strided window of the input by that tap's weights and add it to the output. No
# scratch memory. On the GPU, one thread per output element loops over its window: simple and
# obviously right, which is why the GPU tests use it as the reference for the other algorithms, and
# slow, because neighbouring threads re-read the same inputs from memory instead of sharing them.

# %% tags=["listing"]
direct_file, direct_kernel = tu.find_cuda_function("convolution_forward_direct", missing_ok=True)
display(tu.SideBySide(f"kernels/{direct_file}: convolution_forward_direct (CUDA)", direct_kernel,
                      "minidl/primitives/cpu/convolution.py (NumPy)", tu.python_source(cpu_conv.convolution_forward_direct)))

# %% [markdown]
# ## 3.3 `im2col_gemm`: lower, then multiply
#
# Put every input window the filter sees into one column of a matrix (**im2col**): rows are
# (c, a, b), columns are output pixels (n, i, j). Then the whole convolution is one matrix product,
# `y (K, N·P·Q) = W (K, C·R·S) @ cols (C·R·S, N·P·Q)`, which runs at the speed of the best GEMM
# available (BLAS on the CPU). The price is memory: each input value is copied up to R·S times, so the
# workspace is R·S times the input. Here is the column matrix of a single 5x5 image and a 3x3 filter:

# %%
tiny = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
# _make_problem is the front end's (internal) checked description of a call; the CPU functions take it.
tiny_problem = P.convolution._make_problem("demo", tiny.shape, (1, 1, 3, 3), P.ConvolutionDescriptor(padding=0),
                                           "NCHW", np.dtype(np.float32))
cols = cpu_conv.convolution_im2col(tiny, tiny_problem).reshape(9, -1)        # (C*R*S, N*P*Q) = (9, 9)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.2))
ax1.imshow(tiny[0, 0], cmap="viridis"); ax1.set_title("input 5x5 (values 0..24)")
for (i, j), v in np.ndenumerate(tiny[0, 0]):
    ax1.text(j, i, int(v), ha="center", va="center", color="w", fontsize=8)
ax2.imshow(cols, cmap="viridis"); ax2.set_title("im2col: 9 taps x 9 output pixels")
for (i, j), v in np.ndenumerate(cols):
    ax2.text(j, i, int(v), ha="center", va="center", color="w", fontsize=7)
ax2.set_xlabel("output pixel (i, j)"); ax2.set_ylabel("filter tap (a, b)")
tu.stamp(fig, DEVICE, MODE)
plt.show()
print(f"the input has {tiny.size} values; the column matrix {cols.size}: each value appears up to 9 times")

# %% tags=["listing"]
im2col_file, im2col_kernel = tu.find_cuda_function("convolution_im2col", missing_ok=True)
display(tu.SideBySide(f"kernels/{im2col_file}: convolution_im2col (CUDA; then gemm.cu multiplies)", im2col_kernel,
                      "minidl/primitives/cpu/convolution.py (NumPy)",
                      tu.python_source(cpu_conv.convolution_im2col, cpu_conv.convolution_forward_im2col_gemm)))

# %% [markdown]
# ## 3.4 `implicit_gemm` and `implicit_precomp_gemm`: the matrix that is never written
#
# The GEMM never needs the whole column matrix at once: a block computing a 128 x 128 tile of the
# output only needs, at each step, an 8-deep slice of its rows. **Implicit GEMM** (cuDNN's
# `IMPLICIT_GEMM`, CUTLASS's mapping) lets each thread compute *where* its elements of that slice live
# in the input tensor and load them straight into shared memory, with zeros for padding. Same
# arithmetic as im2col + GEMM, no workspace, and no extra pass over memory to write and re-read the
# columns. In the GPU kernels the GEMM rows `m` are output pixels (n, o, p, q), the columns output
# channels, and the reduction index `k` a filter tap (c, t, r, s).
#
# Turning `k` back into (channel, tap offsets) costs integer divisions in the inner loop.
# `implicit_precomp_gemm` computes that decomposition once per call into a small table in the
# workspace (16 bytes per tap) and reads it instead.
#
# These two exist only on the GPU: on a CPU, BLAS wants a plain matrix, so im2col is the way to reach
# it. Below: the loader that gathers the lowered input, and the tap decomposition it needs.

# %% tags=["listing"]
loader = tu.cuda_excerpt("convolution", r"struct FpropInputLoader\b")
taps = tu.cuda_function("convolution", "filter_tap") + "\n\n" + tu.cuda_function("convolution", "convolution_tap_table")
display(tu.SideBySide("kernels/convolution.cu: FpropInputLoader (implicit GEMM's A operand)", loader,
                      "kernels/convolution.cu: the tap decomposition and its precomputed table", taps))

# %% [markdown]
# ## 3.5 `winograd`: fewer multiplications
#
# Winograd's minimal filtering algorithm F(2, 3) computes two outputs of a 3-tap filter from four
# inputs with **4** multiplications instead of 6, by transforming the input tile (`B^T d`) and the
# filter (`G g`), multiplying elementwise, and transforming back (`A^T`):
#
# `y = A^T [(G g) * (B^T d)]`
#
# Let us check that with numbers before trusting it in 2-D:

# %%
BT, G, AT = cpu_conv._WINOGRAD_BT, cpu_conv._WINOGRAD_G, cpu_conv._WINOGRAD_AT
d = np.array([1.0, 2.0, -1.0, 3.0])         # 4 inputs
g = np.array([0.5, -2.0, 1.0])              # a 3-tap filter
direct_result = np.array([d[0:3] @ g, d[1:4] @ g])
m = (G @ g) * (BT @ d)                      # the only 4 multiplications that depend on the data
print("direct  :", direct_result, "(6 multiplications)")
print("winograd:", AT @ m, "(4 multiplications; G g is computed once per filter)")
assert np.allclose(direct_result, AT @ m)

# %% [markdown]
# Nested in 2-D, F(2x2, 3x3) makes a 2x2 output tile from a 4x4 input tile with 16 multiplications
# instead of 36: 2.25 times fewer. The channel sum happens in the transformed domain, so for each of
# the 16 tile positions it is a matrix product over channels (16 batched GEMMs). It applies to 3x3,
# stride-1, dilation-1 filters only, and its transforms change the rounding (more additions before the
# products); we measure the error below: on the layer of 3.6 it is no larger than the GEMM-based
# algorithms' (2.6e-07 against 4.2e-07 in the saved run; fft 2.4e-07), and exercise 3 looks for where it grows.

# %% tags=["listing"]
wino_file, wino_kernel = tu.find_cuda_function("convolution_winograd_input_transform", missing_ok=True)
display(tu.SideBySide(f"kernels/{wino_file}: the input transform B^T d B (CUDA)", wino_kernel,
                      "minidl/primitives/cpu/convolution.py (NumPy)", tu.python_source(cpu_conv._winograd_f2x2_3x3)))

# %% [markdown]
# The backward pass needs the data gradient too, and for a stride-1 3x3 convolution that is again a
# convolution: of dy with every filter rotated by 180 degrees (input and output channels swapped).
# Winograd then needs the transformed *rotated* filters `G rot(g) G^T`, and they are the forward's,
# permuted. `G` maps a reversed filter row to its own result reversed at the ends and untouched in
# the middle (`G rev(g) = Pi G g`, `Pi` swapping entries 0 and 3: try it on the `G` and `g` above,
# `G @ g[::-1]` against `(G @ g)[[3, 1, 2, 0]]`), so `G rot(g) G^T = Pi (G g G^T) Pi^T`. So when a GPU
# layer runs both its forward and its backward data on Winograd, the backward reuses the forward's
# transformed filters (the autograd node keeps them from the forward to the backward of one step), and its
# input and output transforms store and load their 16 matrices at permuted positions (the `permute`
# argument of the kernel listed above): one filter transform per layer and step instead of two
# (`tests/gpu/test_convolution_gpu.py` counts them).

# %% [markdown]
# ## 3.6 One layer, every algorithm
#
# `find_convolution_algorithms` lists every algorithm of a device for a problem with its workspace
# and, with `measure=True`, its measured time (the best of 3 runs after a warm-up), fastest first;
# algorithms that do not apply come last with the reason. `convolution_forward(..., algo=...)` runs a
# chosen one. All must agree with a float64 reference.

# %%
rng = np.random.default_rng(0)
N0, C0, K0, H0 = (4, 16, 32, 16) if MODE == "small" else (32, 64, 64, 32)
x = rng.standard_normal((N0, C0, H0, H0)).astype(np.float32)
w = (rng.standard_normal((K0, C0, 3, 3)) / math.sqrt(C0 * 9)).astype(np.float32)
reference = P.convolution_forward(x.astype(np.float64), w.astype(np.float64), desc, algo="direct")
rows = []
for perf in P.find_convolution_algorithms(x.shape, w.shape, desc, device=DEV, dtype="float32"):
    if perf.status != "ok":
        rows.append([perf.algo, None, None, None, perf.status])
        continue
    y = P.convolution_forward(to_device(x), to_device(w), desc, algo=perf.algo)
    rows.append([perf.algo, perf.time_ms, perf.workspace_bytes / 2**20, rel_err(to_host(y), reference), perf.status])
    assert rows[-1][3] < 1e-4, rows[-1]
display(tu.Table(["algorithm", "time ms", "workspace MiB", "rel. error vs float64", "status"], rows,
                 title=f"x {x.shape}, w {w.shape}, padding 1, on {DEV}"))

# %% [markdown]
# ## 3.7 Time and workspace on several shapes
#
# The best algorithm depends on the shape: Winograd only applies to 3x3 stride 1; a 1x1 filter makes
# im2col a plain copy; a single input channel leaves the GEMM's reduction almost empty; large images
# with few channels make the column matrix huge. Small mode uses small shapes on the CPU; full mode on
# a GPU uses the layers of real CNNs (the shapes of `docs/GPU.md`, where cuDNN's times on
# the same GPU are listed as the yardstick).

# %%
def shape_set():
    """(label, x shape, w shape, descriptor)."""
    if USE_GPU:
        return [
            ("3x3 N128 C64>128 32x32", (128, 64, 32, 32), (128, 64, 3, 3), P.ConvolutionDescriptor(padding=1)),
            ("3x3 N128 C128>256 16x16", (128, 128, 16, 16), (256, 128, 3, 3), P.ConvolutionDescriptor(padding=1)),
            ("3x3 N128 C256>512 8x8", (128, 256, 8, 8), (512, 256, 3, 3), P.ConvolutionDescriptor(padding=1)),
            ("3x3 N64 C64>64 56x56", (64, 64, 56, 56), (64, 64, 3, 3), P.ConvolutionDescriptor(padding=1)),
            ("1x1 N64 C256>64 56x56", (64, 256, 56, 56), (64, 256, 1, 1), P.ConvolutionDescriptor(padding=0)),
            ("5x5 N128 C1>32 28x28", (128, 1, 28, 28), (32, 1, 5, 5), P.ConvolutionDescriptor(padding=2)),
            ("3x3 N128 C3>64 32x32", (128, 3, 32, 32), (64, 3, 3, 3), P.ConvolutionDescriptor(padding=1)),
            ("7x7/2 N32 C3>64 224x224", (32, 3, 224, 224), (64, 3, 7, 7), P.ConvolutionDescriptor(padding=3, stride=2)),
        ]
    n = 4 if MODE == "small" else 16
    return [
        (f"3x3 N{n} C16>32 16x16", (n, 16, 16, 16), (32, 16, 3, 3), P.ConvolutionDescriptor(padding=1)),
        (f"3x3 N{n} C32>64 8x8", (n, 32, 8, 8), (64, 32, 3, 3), P.ConvolutionDescriptor(padding=1)),
        (f"1x1 N{n} C32>16 16x16", (n, 32, 16, 16), (16, 32, 1, 1), P.ConvolutionDescriptor(padding=0)),
        (f"5x5 N{n} C1>8 28x28", (n, 1, 28, 28), (8, 1, 5, 5), P.ConvolutionDescriptor(padding=2)),
        (f"3x3/2 N{n} C8>16 32x32", (n, 8, 32, 32), (16, 8, 3, 3), P.ConvolutionDescriptor(padding=1, stride=2)),
    ]

SHAPES = shape_set()
# The algorithms to time: every one the device has. (The CPU prefers them in this fixed order; the GPU ranks
# them per problem, so the order of these columns is only the order of the table.)
GPU_ALGORITHMS = ("implicit_gemm_tc", "implicit_precomp_gemm", "implicit_gemm", "winograd", "im2col_gemm", "direct",
                  "fft")
ALGOS = list(GPU_ALGORITHMS if USE_GPU else P.convolution.HEURISTIC_ORDER["cpu"])
found = {}       # label -> {algo: AlgorithmPerf}
for label, xs, ws, d_ in tqdm(SHAPES, desc="find_convolution_algorithms"):
    found[label] = {p.algo: p for p in P.find_convolution_algorithms(xs, ws, d_, device=DEV, dtype="float32")}

def flops(xs, ws, d_):
    out = P.convolution_output_shape(xs, ws, d_)
    return 2 * out[0] * out[1] * math.prod(out[2:]) * ws[1] * math.prod(ws[2:])

table_rows = []
for label, xs, ws, d_ in SHAPES:
    for algo in ALGOS:
        p = found[label][algo]
        ok = p.status == "ok"
        table_rows.append([label, algo, p.time_ms if ok else None,
                           flops(xs, ws, d_) / p.time_ms / 1e6 if ok else None,
                           p.workspace_bytes / 2**20 if ok else None, "ok" if ok else p.status[:60]])
display(tu.Table(["shape", "algorithm", "time ms", "GFLOP/s", "workspace MiB", "status"], table_rows))

# %%
fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(13, 4.5))
width = 0.8 / len(ALGOS)
positions = np.arange(len(SHAPES))
for i, algo in enumerate(ALGOS):
    times = [found[label][algo].time_ms if found[label][algo].status == "ok" else np.nan for label, *_ in SHAPES]
    space = [found[label][algo].workspace_bytes / 2**20 if found[label][algo].status == "ok" else np.nan
             for label, *_ in SHAPES]
    ax_t.bar(positions + i * width, times, width, label=algo, color=f"C{i}")
    ax_w.bar(positions + i * width, np.maximum(space, 1e-3), width, label=algo, color=f"C{i}")
for ax, ylabel in ((ax_t, "time ms (lower is better)"), (ax_w, "workspace MiB (0 drawn as 0.001)")):
    ax.set_yscale("log")
    ax.set_xticks(positions + 0.4 - width / 2)
    ax.set_xticklabels([label for label, *_ in SHAPES], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
ax_t.set_title(f"forward time per algorithm ({DEV}; missing bar = not applicable)")
ax_w.set_title("workspace per algorithm")
ax_t.legend(fontsize=7)
fig.tight_layout()
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# ## 3.8 Choosing: the policies
#
# `algo="auto"` (the default of `convolution_forward`, and what `nn.Conv2d` uses) asks the
# process-wide **policy**, set with `P.set_convolution_policy(...)` or, for a block of code, the
# `P.convolution_policy(...)` context manager. `get_convolution_algorithm` tells you what a policy picks:
#
# * `heuristic` (the default): a preference order, nothing measured: fixed on the CPU, ranked per problem
#   on the GPU (cuDNN's `cudnnGet` idea: Winograd, say, only for 3x3 filters at stride 1);
# * `prefer_fastest`: measure every applicable algorithm on the first call of a new shape and cache the
#   winner (the first call pays for the measuring);
# * `no_workspace`: the first algorithm in heuristic order that needs no scratch memory;
# * `workspace_limit`: the first whose workspace fits a byte budget;
# * `deterministic`: the first that gives bit-identical results from run to run.

# %%
if USE_GPU:
    print("the GPU ranks its algorithms per problem; the heuristic column below shows its pick for each shape")
else:
    print("heuristic order on", DEV, ":", " > ".join(ALGOS))
# A budget that splits the shapes: the median of the nonzero workspaces measured above.
limit = int(np.median([p.workspace_bytes for per_shape in found.values() for p in per_shape.values()
                       if p.status == "ok" and p.workspace_bytes > 0]))
print(f"workspace_limit = {limit / 2**20:.2f} MiB")
policy_rows = []
for label, xs, ws, d_ in SHAPES:
    pick = lambda **kw: P.get_convolution_algorithm(xs, ws, d_, device=DEV, dtype="float32", **kw)
    policy_rows.append([label, pick(policy="heuristic"), pick(policy="prefer_fastest"), pick(policy="no_workspace"),
                        pick(policy="workspace_limit", workspace_limit=limit), pick(policy="deterministic")])
display(tu.Table(["shape", "heuristic", "prefer_fastest", "no_workspace", f"workspace_limit {limit / 2**20:.2f} MiB", "deterministic"],
                 policy_rows))

# %%
label, xs, ws, d_ = SHAPES[0]
x_dev = to_device(rng.standard_normal(xs).astype(np.float32))
w_dev = to_device(rng.standard_normal(ws).astype(np.float32))
with P.convolution_policy("no_workspace"):
    y_auto = P.convolution_forward(x_dev, w_dev, d_)           # algo="auto": the policy chooses
    chosen = P.get_convolution_algorithm(xs, ws, d_, device=DEV, dtype="float32")
print(f"inside convolution_policy('no_workspace'), algo='auto' ran {chosen!r}; "
      f"outside, the policy is back to {P.get_convolution_policy()}")
assert rel_err(to_host(y_auto), to_host(P.convolution_forward(x_dev, w_dev, d_, algo=chosen))) < 1e-6

# %% [markdown]
# ## 3.9 NCHW against NHWC
#
# The same tensor can be stored channels-first (NCHW, PyTorch's default) or channels-last (NHWC,
# what tensor-core kernels prefer); in NHWC minidl's filters are (K, R, S, C), cuDNN's KRSC. The
# layout decides which neighbours are adjacent in memory, and so which loads coalesce:
#
# * in NCHW, neighbouring **pixels** of one channel are adjacent: good for the direct kernel and for
#   implicit GEMM's gather along output pixels;
# * in NHWC, the **channels** of one pixel are adjacent: the reduction dimension (c, r, s) of implicit
#   GEMM walks contiguous memory, the layout the tensor-core kernels of tutorial 7 read.
#
# Which one is faster is a property of the kernels as written, not of the layout alone: measure it.
# The results must be identical up to rounding; only the time changes.

# %%
layout_rows = []
for label, xs, ws, d_ in tqdm(SHAPES[:3], desc="layouts"):
    x_cf = rng.standard_normal(xs).astype(np.float32)
    w_cf = rng.standard_normal(ws).astype(np.float32)
    x_cl = np.ascontiguousarray(x_cf.transpose(0, 2, 3, 1))     # (N, H, W, C)
    w_cl = np.ascontiguousarray(w_cf.transpose(0, 2, 3, 1))     # (K, R, S, C)
    nchw = {p.algo: p for p in P.find_convolution_algorithms(xs, ws, d_, device=DEV, dtype="float32", layout="NCHW")}
    nhwc = {p.algo: p for p in P.find_convolution_algorithms(x_cl.shape, w_cl.shape, d_, device=DEV, dtype="float32",
                                                             layout="NHWC")}
    for algo in ALGOS:
        if nchw[algo].status != "ok" or nhwc[algo].status != "ok":
            continue
        y_cf = to_host(P.convolution_forward(to_device(x_cf), to_device(w_cf), d_, algo=algo, layout="NCHW"))
        y_cl = to_host(P.convolution_forward(to_device(x_cl), to_device(w_cl), d_, algo=algo, layout="NHWC"))
        err = rel_err(y_cl.transpose(0, 3, 1, 2), y_cf)
        assert err < 1e-5, (label, algo, err)
        layout_rows.append([label, algo, nchw[algo].time_ms, nhwc[algo].time_ms, nchw[algo].time_ms / nhwc[algo].time_ms,
                            err])
display(tu.Table(["shape", "algorithm", "NCHW ms", "NHWC ms", "NCHW/NHWC", "rel. difference"], layout_rows))

# %% [markdown]
# On the CPU, the NumPy references compute in channels-first and view NHWC arrays through a
# transpose, so NHWC costs extra copies there: the CPU numbers show the price of a layout the code was
# not written for, not a property of the layout. On the GPU each kernel is compiled for both layouts,
# and in the saved run (float32, an H200) NCHW was the faster one for the implicit GEMMs, Winograd and
# direct (NCHW/NHWC 0.39-0.85); im2col_gemm was about even (1.03-1.08) and fft went either way (0.94-1.17).
#
# ## 3.10 The backward directions
#
# Training runs three convolutions per layer: forward, **backward data** (dx, a convolution of dy with
# the flipped filters) and **backward filter** (dw, a correlation of x with dy, whose GEMM has a huge
# reduction over every output pixel). Each has its own list of algorithms:

# %%
label, xs, ws, d_ = SHAPES[0]
bw_rows = []
for direction in ("forward", "backward_data", "backward_filter"):
    for p in P.find_convolution_algorithms(xs, ws, d_, direction=direction, device=DEV, dtype="float32"):
        bw_rows.append([direction, p.algo, p.time_ms, p.workspace_bytes / 2**20 if p.status == "ok" else None,
                        p.status[:70]])
display(tu.Table(["direction", "algorithm", "time ms", "workspace MiB", "status"], bw_rows, title=label))

# %% [markdown]
# ## What to take away
#
# * One function, several algorithms: the **fastest depends on the shape**, which is why frameworks
#   measure (`prefer_fastest`) instead of guessing, and cache the answer per shape.
# * **Workspace is the currency**: im2col trades memory for a plain GEMM; implicit GEMM gets the same
#   GEMM without the memory by doing the gather inside the kernel; Winograd trades transform work and
#   memory for fewer multiplications.
# * The **layout** decides which accesses coalesce; a kernel is written for one, and a layout it was
#   not written for costs transposes.
#
# ## Exercises
#
# 1. From the definition, compute the workspace of `im2col_gemm` for the shape `3x3 N128 C64>128 32x32`
#    and compare with the table. How large is it for `7x7/2 N32 C3>64 224x224`?
# 2. Count the multiplications of F(2x2, 3x3) per output pixel, including the transforms of input and
#    output (the filter transform is paid once). For which channel counts does Winograd still win?
# 3. Measure the Winograd error against a float64 reference as the input's magnitude grows (scale x by
#    1, 10, 100). Compare with `im2col_gemm`. Why does Winograd lose more precision?
# 4. Use `P.convolution_policy("workspace_limit", workspace_limit=...)` with limits from 0 to 64 MiB on
#    one shape and plot which algorithm is chosen and its time. Where are the steps?
# 5. Write `F(2, 3)` for a 1-D signal of length 10 with NumPy (tile, transform, multiply, inverse
#    transform) and check it against `np.correlate`.
# 6. On the GPU: time `implicit_gemm` against `implicit_precomp_gemm` for a 1x1 and a 7x7 filter. When
#    does the precomputed table pay off, and why?
