"""CuPy launchers of kernels/convolution.cu: the GPU backend of minidl.primitives.convolution.

Same interface as cpu/convolution.py: ALGORITHMS, is_supported, workspace_bytes and one function per
direction taking the already-validated (problem, algo, alpha, beta, out). Every problem is run as a
3-D convolution (1-D and 2-D get size-1 leading spatial dims), float32 only. Scratch memory comes
from the calling thread's Handle (handle.py); `workspace_bytes` says how much each algorithm takes.

Which kernels each algorithm launches (see the header of kernels/convolution.cu):
    direct                  convolution_{forward,backward_data,backward_filter}_direct; for first
                            layers (small_channel_kernel) forward and backward_filter run the tiled
                            convolution_<direction>_direct_small_c_* kernels instead
                            (+ convolution_splitk_reduce for backward_filter)
    implicit_gemm           convolution_<direction>_implicit_gemm_{nchw,nhwc}
                            (+ gemm_splitk_reduce for backward_filter when K is split)
    implicit_precomp_gemm   convolution_tap_table, then ..._implicit_precomp_gemm_{nchw,nhwc}
    im2col_gemm             convolution_im2col / convolution_col2im around gemm.cu's SGEMM: launchers in
                            convolution_im2col.py (listed in the tables below as the others)
    winograd                filter, input and output transforms around 16 batched SGEMMs
    implicit_gemm_tc        kernels/convolution_tc.cu on tensor cores (TF32 for float32 with
                            math="tf32", fp16/bf16 for half data): launchers in convolution_tc.py
    fft                     cuFFT around convolution_fft_products (convolution_tc.cu): convolution_fft.py
"""
from __future__ import annotations

import functools
import math

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import (HALF_KINDS, STORAGE_KINDS, Plans, arrival_counters, finish, grid_stride_blocks,
                      kernel_output, null_pointer, sm_count)
from .gemm import TILE, THREADS, sgemm, split_k_plan, split_k_workspace_bytes, tile_n
from .handle import get_handle
from . import convolution_fft as _fft
from . import convolution_im2col as _im2col
from . import convolution_tc as _tc
from .convolution_im2col import (convolution_backward_data_im2col_gemm, convolution_backward_filter_im2col_gemm,
                                 convolution_forward_im2col_gemm)

ALGORITHMS = ("direct", "im2col_gemm", "implicit_gemm", "implicit_precomp_gemm", "winograd", "implicit_gemm_tc",
              "fft")

_INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------------------------
# Problem geometry as the kernels see it
# ----------------------------------------------------------------------------------------------


class _Geometry:
    """A problem's sizes padded to 3 spatial dims, and the derived GEMM sizes."""

    def __init__(self, problem):
        lead = 3 - problem.spatial_dims
        self.N, self.C, self.K, self.groups = problem.N, problem.C, problem.K, problem.groups
        self.D, self.H, self.W = (1,) * lead + tuple(problem.in_size)
        self.T, self.R, self.S = (1,) * lead + tuple(problem.kernel_size)
        self.O, self.P, self.Q = (1,) * lead + tuple(problem.out_size)
        self.pad = (0,) * lead + tuple(problem.padding)
        self.stride = (1,) * lead + tuple(problem.stride)
        self.dilation = (1,) * lead + tuple(problem.dilation)
        self.Cg, self.Kg = self.C // self.groups, self.K // self.groups
        self.TRS = self.T * self.R * self.S
        self.DHW, self.OPQ = self.D * self.H * self.W, self.O * self.P * self.Q
        self.channels_last = problem.layout == "NHWC"
        values = (self.N, self.C, self.D, self.H, self.W, self.K, self.T, self.R, self.S, self.O, self.P,
                  self.Q, *self.pad, *self.stride, *self.dilation, self.groups)
        self._args = (np.array(values, dtype=np.int32).view(np.dtype((np.void, 4 * len(values)))),)

    def args(self):
        """The CONV_GEOM_ARGS of the kernels: one struct ConvGeom (22 ints) passed by value, one argument."""
        return self._args

    @property
    def suffix(self):
        return "nhwc" if self.channels_last else "nchw"


@functools.lru_cache(maxsize=512)
def _geometry(problem) -> _Geometry:
    """The geometry of a problem, made once per problem (problems are frozen and hashable): a training
    loop runs the same few problems every step, so this is host time saved on every call."""
    return _Geometry(problem)


def _flag(b) -> np.int32:
    return np.int32(1 if b else 0)


CONV_TILE_WIDTHS = (128, 64, 32)   # the BN variants compiled in kernels/convolution.cu


# The small-channel kernels (kernels/convolution.cu, "Small-channel kernels"): first layers.
SMALL_C_MAX_CHANNELS = 4      # input channels
SMALL_C_MAX_TAPS = 160        # C * T*R*S: SC_MAX_CRS / SW_MAX_CRS of the kernels
SMALL_C_FWD_ROWS, SMALL_C_FWD_COLS, SMALL_C_FWD_CHANNELS = 8, 32, 32   # SC_TP, SC_TQ, SC_KB
SMALL_C_FWD_MAX_TILE = 6144   # SC_MAX_INPUT_TILE (floats)
SMALL_C_WGRAD_PIXELS = 32     # SW_PIX
SMALL_C_WGRAD_VARIANTS = {32: (2, 6), 64: (2, 4, 10)}   # compiled (KB, CT): KB output channels per block


def small_channel_kernel(direction: str, problem) -> bool:
    """Whether `direction` of this problem runs the small-channel kernel of its algorithm.

    Those are the first layers of a network (1-4 input channels, at most 160 filter taps in all,
    groups = 1); the kernels are variants of `direct`, for forward and backward_filter only.
    """
    if direction == "backward_data":
        return False
    g = _geometry(problem)
    if g.groups != 1 or g.C > SMALL_C_MAX_CHANNELS or g.C * g.TRS > SMALL_C_MAX_TAPS or g.C == 0:
        return False
    if direction == "backward_filter":
        return g.K > 0
    if problem.spatial_dims > 2 or g.N > 65535:     # 2-D tiles; the batch is grid z
        return False
    sh, sw = g.stride[1:]
    dh, dw = g.dilation[1:]
    tile_h = (SMALL_C_FWD_ROWS - 1) * sh + (g.R - 1) * dh + 1
    tile_w = (SMALL_C_FWD_COLS - 1) * sw + (g.S - 1) * dw + 1
    return g.C * tile_h * tile_w <= SMALL_C_FWD_MAX_TILE


def _small_c_wgrad_plan(g):
    """(KB, CT, slices, chunks_per_slice) of the small-channel weight-gradient kernel.

    KB output channels per block (32 or 64), CT taps per thread (the narrowest compiled variant that
    covers C*T*R*S), and the split of the N*O*P*Q output pixels (chunks of 32) over about three
    blocks per SM (the kernel's occupancy: one full wave, no tail).
    """
    kb = 32 if g.K <= 32 else 64
    tap_groups = THREADS // (kb // 4)
    taps = g.C * g.TRS
    ct = next(ct for ct in SMALL_C_WGRAD_VARIANTS[kb] if tap_groups * ct >= taps)
    chunks = math.ceil(g.N * g.OPQ / SMALL_C_WGRAD_PIXELS)
    k_blocks = math.ceil(g.K / kb)
    slices = max(1, min(chunks, (2 * sm_count()) // k_blocks))
    per_slice = math.ceil(chunks / slices)
    return kb, ct, math.ceil(chunks / per_slice), per_slice


def _aligned(a, multiple_of_four: int) -> np.int32:
    """float4 loads are legal: 16-byte aligned data and a row length that keeps rows aligned."""
    return _flag(a.data.ptr % 16 == 0 and multiple_of_four % 4 == 0)


# ----------------------------------------------------------------------------------------------
# Which algorithm applies, and its scratch memory
# ----------------------------------------------------------------------------------------------


def is_supported(algo: str, direction: str, problem) -> tuple[bool, str]:
    if algo not in ALGORITHMS:
        return False, f"unknown algorithm {algo!r}"
    if algo == "implicit_gemm_tc":
        return _tc.is_supported(direction, problem)
    if algo == "fft":
        return _fft.is_supported(direction, problem)
    if problem.dtype in ("float16", "bfloat16"):
        return False, f"{problem.dtype} data runs on tensor cores only (implicit_gemm_tc)"
    if problem.dtype != "float32":
        return False, f"the GPU kernels are float32, got {problem.dtype}"
    g = _geometry(problem)
    # Indices of rows/pixels inside one launch are 32-bit: the lowered matrix's M and one image.
    if max(g.N * g.OPQ, g.N * g.DHW, g.C * g.DHW, g.K * g.OPQ) > _INT32_MAX:
        return False, "too large for 32-bit pixel indices (split the batch)"
    if algo == "implicit_precomp_gemm" and direction == "backward_filter":
        return False, ("backward_filter's filter taps are the GEMM columns, decomposed once per thread: "
                       "no tap table to precompute (use implicit_gemm)")
    if algo == "im2col_gemm" and g.N * g.OPQ * g.Cg * g.TRS > _INT32_MAX:
        return False, "the column matrix would exceed 2^31 elements"
    if algo == "winograd":
        if problem.spatial_dims != 2:
            return False, "winograd F(2x2,3x3) is 2-D only"
        if tuple(problem.kernel_size) != (3, 3):
            return False, f"winograd needs a 3x3 kernel, got {problem.kernel_size}"
        if tuple(problem.stride) != (1, 1) or tuple(problem.dilation) != (1, 1):
            return False, "winograd needs stride 1 and dilation 1"
        if problem.groups != 1:
            return False, "winograd runs groups=1 only"
        if direction == "backward_filter":
            return False, "winograd backward_filter is not implemented (use implicit_gemm)"
        if direction == "backward_data" and max(problem.padding) > 2:
            return False, "winograd backward_data needs padding <= 2"
    return True, ""


def heuristic_order(direction: str, problem) -> tuple:
    """Algorithms in the order to try them without measuring (cudnnGet's idea), for this problem.

    The rules come from the measured table in benchmarks/results/gpu_conv.md (H200):
    - first layers (1-4 input channels): the small-channel `direct` kernels win forward and filter
      gradient; their data gradient is best as im2col + GEMM (implicit GEMM tiles are mostly empty);
    - 3x3, stride 1: Winograd F(2x2, 3x3) wins forward and data gradient (2.25x fewer multiplies);
    - strided data gradients: implicit GEMM wastes most of its work on the stride's holes, so
      im2col + GEMM goes first;
    - otherwise the precomputed-offset implicit GEMM, then plain implicit GEMM;
    - fft last: where it wins has not been measured on the GPU yet (benchmarks/bench_gpu_conv_tc.py
      has the comparison), so only `prefer_fastest` (cudnn.benchmark) picks it, by measuring.
    `is_supported` still filters the list, so a rule may name an algorithm that does not apply.
    """
    g = _geometry(problem)
    order = []
    # Tensor cores first wherever they apply (math="tf32" or half data) with 16-byte gathers; float32
    # with channel counts off the vector width (first layers: C = 1, 3) keeps the fp32 kernels first.
    tc_ok = _tc.is_supported(direction, problem)[0]
    if tc_ok and (problem.dtype != "float32" or _tc.vector_path(direction, problem)):
        order.append("implicit_gemm_tc")
    if small_channel_kernel(direction, problem):
        order.append("direct")
    if direction == "backward_data" and (g.C <= SMALL_C_MAX_CHANNELS or max(g.stride) > 1):
        order.append("im2col_gemm")
    if direction in ("forward", "backward_data") and is_supported("winograd", direction, problem)[0]:
        order.append("winograd")
    if direction == "backward_filter":
        order += ["implicit_gemm", "im2col_gemm"]
    order += ["implicit_precomp_gemm", "implicit_gemm", "im2col_gemm", "winograd", "direct", "implicit_gemm_tc",
              "fft"]
    return tuple(dict.fromkeys(order))  # first occurrence wins


def algorithm_math(algo: str, problem) -> str:
    """The arithmetic `algo` uses for this problem: the tensor-core kind for implicit_gemm_tc, else fp32."""
    return _tc.math_of(problem) if algo == "implicit_gemm_tc" else "fp32"


def _winograd_sizes(g, direction):
    """(in channels, out channels, tiles) of the forward Winograd convolution that computes `direction`."""
    if direction == "forward":
        cin, cout, out_h, out_w = g.C, g.K, g.P, g.Q
    else:  # backward data: a forward convolution of dy (K channels) producing dx (C channels)
        cin, cout, out_h, out_w = g.K, g.C, g.H, g.W
    tiles = g.N * math.ceil(out_h / 2) * math.ceil(out_w / 2)
    return cin, cout, tiles


def workspace_bytes(algo: str, direction: str, problem) -> int:
    if algo == "implicit_gemm_tc":
        return _tc.workspace_bytes(direction, problem)
    if algo == "fft":
        return _fft.workspace_bytes(direction, problem)
    g = _geometry(problem)
    if algo == "direct":
        if direction == "backward_filter" and small_channel_kernel(direction, problem):
            _, _, slices, _ = _small_c_wgrad_plan(g)
            return 0 if slices == 1 else 4 * slices * g.K * g.C * g.TRS
        return 0
    if algo == "implicit_gemm":
        if direction == "backward_filter":
            return split_k_workspace_bytes(g.Kg, g.Cg * g.TRS, g.N * g.OPQ, g.groups)
        return 0
    if algo == "implicit_precomp_gemm":
        if direction == "forward":
            return 16 * g.Cg * g.TRS
        return 16 * g.Kg * g.TRS + 4 * g.K * g.Cg * g.TRS   # tap table + GEMM-ready filters
    if algo == "im2col_gemm":
        return _im2col.workspace_bytes(direction, g)
    if algo == "winograd":
        cin, cout, tiles = _winograd_sizes(g, direction)
        return 4 * 16 * (cout * cin + cin * tiles + cout * tiles)
    raise ValueError(f"convolution: unknown algorithm {algo!r}")


# ----------------------------------------------------------------------------------------------
# Inputs and outputs
# ----------------------------------------------------------------------------------------------


def _input(a):
    return None if a is None else cupy.ascontiguousarray(a)


def _scale_only(target, alpha, beta):
    """The result of an empty reduction (zero-size batch): out = alpha * 0 + beta * out."""
    if beta == 0:
        target.fill(0)
    else:
        target *= np.float32(beta)


def _tap_table(g, handle, channels, nbytes):
    """Write the int4 (channel, t*dil, r*dil, s*dil) table of implicit_precomp_gemm into the workspace."""
    count = channels * g.TRS
    table = handle.workspace(nbytes)[: 4 * count].view(cupy.int32)
    get_kernel("convolution", "convolution_tap_table")(
        (math.ceil(count / 256),), (256,), (table, np.int32(count), np.int32(channels), _flag(g.channels_last), *g.args()))
    return table


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------


# convolution_bias_activation_forward: the forward kernels compiled with the ReLU in their epilogue
# (kernels/convolution.cu, conv_forward_activation). im2col_gemm ends in the GEMM's epilogue
# (kernels/gemm.cu), which has no activation: there the ReLU is a separate in-place pass.
RELU_OPTIONS = ("-DMINIDL_CONV_RELU_EPILOGUE",)
RELU_EPILOGUE_ALGOS = ("direct", "implicit_gemm", "implicit_precomp_gemm", "winograd")


def convolution_forward(x, w, problem, bias, algo, alpha, beta, out, relu=False, transformed_filter=None):
    """y = alpha * (conv(x, w) + bias) + beta * out, on the GPU; relu=True applies max(., 0) in the
    epilogue (convolution_bias_activation_forward) where the algorithm's kernels have it
    (RELU_EPILOGUE_ALGOS), else in one in-place pass after. The algorithm's own function (FORWARD,
    named as its kernels and as the NumPy reference's) does the launching. transformed_filter: see _winograd
    (other algorithms leave it empty)."""
    if algo in OWN_MODULE:
        y = OWN_MODULE[algo].convolution_forward(x, w, problem, bias, alpha, beta, out)
        return _relu_in_place(y) if relu else y
    run = _algorithm("convolution_forward", FORWARD, algo)
    g = _geometry(problem)
    x, w, bias = _input(x), _input(w), _input(bias)
    y, original = kernel_output("convolution_forward", out, problem.y_shape, beta, x, w, bias)
    if y.size == 0:
        return finish(y, original)
    options = RELU_OPTIONS if relu and algo in RELU_EPILOGUE_ALGOS else ()
    if g.N * g.OPQ:
        run(x, w, bias, y, g, get_handle(), problem, alpha, beta, options, **_kept(algo, transformed_filter))
    if relu and not options:
        _relu_in_place(y)
    return finish(y, original)


def _kept(algo, transformed_filter) -> dict:
    """The launcher's transformed_filter argument: Winograd's launchers take one (_winograd), no other has it."""
    keep = transformed_filter is not None and algo == "winograd"
    return {"transformed_filter": transformed_filter} if keep else {}


def _algorithm(op, table, algo):
    """The launcher function of `algo` for one direction (the tables are at the end of the file)."""
    run = table.get(algo)
    if run is None:
        raise ValueError(f"{op}: unknown algorithm {algo!r} on the GPU; it has "
                         f"{', '.join(list(table) + list(OWN_MODULE))}")
    return run


def convolution_forward_direct(x, w, bias, y, g, handle, problem, alpha, beta, options=()):
    """One thread per output element (kernels/convolution.cu), or, for first layers with few input
    channels, the small-channel kernel that stages the input tile and all filters in shared memory."""
    if small_channel_kernel("forward", problem):
        kernel = get_kernel("convolution", f"convolution_forward_direct_small_c_{g.suffix}", options)
        grid = (math.ceil(g.P / SMALL_C_FWD_ROWS) * math.ceil(g.Q / SMALL_C_FWD_COLS),
                math.ceil(g.K / SMALL_C_FWD_CHANNELS), g.N)
        kernel(grid, (THREADS,), (x, w, bias, y, *g.args(), np.float32(alpha), np.float32(beta)))
        return
    kernel = get_kernel("convolution", "convolution_forward_direct", options)
    kernel((grid_stride_blocks(y.size),), (256,),
           (x, w, bias, y, *g.args(), np.float32(alpha), np.float32(beta), _flag(g.channels_last)))


def _forward_implicit(algo, x, w, bias, y, g, handle, problem, alpha, beta, options):
    taps = None
    if algo == "implicit_precomp_gemm":
        taps = _tap_table(g, handle, g.Cg, workspace_bytes(algo, "forward", problem))
    bn = tile_n(g.Kg, CONV_TILE_WIDTHS)
    kernel = get_kernel("convolution", f"convolution_forward_{algo}_{g.suffix}_bn{bn}", options)
    grid = (math.ceil(g.N * g.OPQ / TILE), math.ceil(g.Kg / bn), g.groups)
    kernel(grid, (THREADS,), (x, w, bias, y, taps, *g.args(), np.float32(alpha), np.float32(beta),
                              _aligned(w, g.Cg * g.TRS)))


def convolution_forward_implicit_gemm(x, w, bias, y, g, handle, problem, alpha, beta, options=()):
    """The GEMM y = W x_col with the im2col gather done on the fly while loading tiles (no workspace)."""
    _forward_implicit("implicit_gemm", x, w, bias, y, g, handle, problem, alpha, beta, options)


def convolution_forward_implicit_precomp_gemm(x, w, bias, y, g, handle, problem, alpha, beta, options=()):
    """implicit_gemm with the filter-tap offsets precomputed once into a small workspace table."""
    _forward_implicit("implicit_precomp_gemm", x, w, bias, y, g, handle, problem, alpha, beta, options)


def convolution_forward_winograd(x, w, bias, y, g, handle, problem, alpha, beta, options=(), transformed_filter=None):
    """F(2x2, 3x3): transform filters and input tiles, 16 batched GEMMs, transform back (_winograd)."""
    _winograd(x, w, bias, y, g, handle, "forward", alpha, beta, options, transformed_filter)


def _relu_in_place(y):
    """max(y, 0) written over y (elementwise, so in place is safe): the activation kernel for float32,
    CuPy's maximum for half data (both pass NaN through)."""
    if y.dtype == cupy.float32:
        from .activation import relu_forward_in_place

        return relu_forward_in_place(y)
    return cupy.maximum(y, 0, out=y)


@functools.lru_cache(maxsize=512)
def _winograd_plan(g, direction):
    """What _winograd's launches of a problem's direction need but the addresses and alpha / beta (issue 23: made once
    per problem, not every step): (cin, cout, tiles, U's and V's floats, the filter transform's grid and scalars,
    the input transform's, the output transform's)."""
    cin, cout, tiles = _winograd_sizes(g, direction)
    if direction == "forward":
        in_h, in_w, out_h, out_w = g.H, g.W, g.P, g.Q
        pad_h, pad_w = g.pad[1], g.pad[2]
    else:
        in_h, in_w, out_h, out_w = g.P, g.Q, g.H, g.W
        pad_h, pad_w = 2 - g.pad[1], 2 - g.pad[2]
    tiles_h, tiles_w = math.ceil(out_h / 2), math.ceil(out_w / 2)
    cl, i32 = _flag(g.channels_last), np.int32
    filter_transform = ((math.ceil(cout * cin / 256),), (i32(g.K), i32(g.C), _flag(direction != "forward"), cl))
    input_transform = ((grid_stride_blocks(cin * tiles),),
                       (i32(g.N), i32(cin), i32(in_h), i32(in_w), i32(pad_h), i32(pad_w), i32(tiles_h), i32(tiles_w),
                        cl))
    output_transform = ((grid_stride_blocks(cout * tiles),),
                        (i32(g.N), i32(cout), i32(out_h), i32(out_w), i32(tiles_h), i32(tiles_w)))
    return cin, cout, tiles, 16 * cout * cin, 16 * cin * tiles, filter_transform, input_transform, output_transform


def _winograd(inp, w, bias, out, g, handle, direction, alpha, beta, options=(), transformed_filter=None):
    """The forward F(2x2,3x3) convolution of `inp`; for backward_data inp = dy, out = dx.

    transformed_filter: a list the caller keeps from a forward to the backward_data of the same, unchanged w (the
    framework's Convolution node: autograd's version check guarantees it). The forward appends its U (w's address,
    U in memory of its own); the backward_data that finds it there takes its filters from it, with the input and
    output transforms permuted (kernels/convolution.cu: a rotated filter is a permuted U), and no filter transform.
    The workspace holds [U unless kept or own | V (16 x cin x tiles) | M (16 x cout x tiles)], passed as addresses."""
    cin, cout, tiles, u_floats, v_floats, filter_transform, input_transform, output_transform = \
        _winograd_plan(g, direction)
    kept = None
    if direction == "backward_data" and transformed_filter:
        ptr, U = transformed_filter[0]
        kept = U if ptr == w.data.ptr and U.size == u_floats else None
        transformed_filter.clear()   # (used once: the memory goes back with it)
    own_u = kept is None and direction == "forward" and transformed_filter is not None
    u_size = 0 if kept is not None or own_u else u_floats
    ws = handle.workspace(4 * (u_size + v_floats + 16 * cout * tiles)).data.ptr
    V, M = ws + 4 * u_size, ws + 4 * (u_size + v_floats)
    if kept is None:
        U = cupy.ndarray((u_floats,), dtype=cupy.float32) if own_u else ws
        grid, scalars = filter_transform
        get_kernel("convolution", "convolution_winograd_filter_transform")(grid, (256,), (w, U, *scalars))
        if own_u:   # (the latest forward's only: a list handed to two forwards keeps the second's)
            transformed_filter[:] = [(w.data.ptr, U)]
    permute = _flag(kept is not None)
    grid, scalars = input_transform
    get_kernel("convolution", "convolution_winograd_input_transform")(grid, (256,), (inp, V, *scalars, permute))
    # 16 GEMMs: M[xi] (cout, tiles) = U[xi] (cout, cin) @ V[xi] (cin, tiles); the forward's U is (cin, cout): read
    # transposed
    if kept is None:
        sgemm(cout, tiles, cin, U, cin, V, tiles, M, batch=16, stride_a=cout * cin, stride_b=cin * tiles,
              stride_c=cout * tiles)
    else:
        sgemm(cout, tiles, cin, kept, cout, V, tiles, M, trans_a=True, batch=16, stride_a=cout * cin,
              stride_b=cin * tiles, stride_c=cout * tiles)
    grid, scalars = output_transform
    get_kernel("convolution", "convolution_winograd_output_transform", options)(
        grid, (256,), (M, out, bias, *scalars, np.float32(alpha), np.float32(beta), _flag(g.channels_last), permute))


# ----------------------------------------------------------------------------------------------
# Backward data
# ----------------------------------------------------------------------------------------------


def convolution_backward_data(w, dy, problem, algo, alpha, beta, out, transformed_filter=None):
    """dx = alpha * conv_transpose(dy, w) + beta * out, on the GPU (BACKWARD_DATA names the launchers);
    transformed_filter: the forward's, see _winograd."""
    if algo in OWN_MODULE:
        return OWN_MODULE[algo].convolution_backward_data(w, dy, problem, alpha, beta, out)
    return _backward("convolution_backward_data", BACKWARD_DATA, algo, w, dy, problem, problem.x_shape, alpha, beta,
                     out, transformed_filter)


def _backward(op, table, algo, a, b, problem, shape, alpha, beta, out, transformed_filter=None):
    """What both backward directions do around the algorithm's launcher: the result of `shape` (written into
    `out` when that is safe), alpha * the gradient + beta * out; with no output positions the gradient is zero."""
    run = _algorithm(op, table, algo)
    g = _geometry(problem)
    a, b = _input(a), _input(b)
    result, original = kernel_output(op, out, shape, beta, a, b)
    if result.size and g.N * g.OPQ:
        run(a, b, result, g, get_handle(), problem, alpha, beta, **_kept(algo, transformed_filter))
    elif result.size:
        _scale_only(result, alpha, beta)
    return finish(result, original)


def convolution_backward_data_direct(w, dy, dx, g, handle, problem, alpha, beta):
    """One thread per input element, gathering over the output positions whose windows cover it."""
    kernel = get_kernel("convolution", "convolution_backward_data_direct")
    kernel((grid_stride_blocks(dx.size),), (256,),
           (w, dy, dx, *g.args(), np.float32(alpha), np.float32(beta), _flag(g.channels_last)))


def _backward_data_implicit(algo, w, dy, dx, g, handle, problem, alpha, beta):
    taps, filters, vec_w = None, w, _flag(False)
    if algo == "implicit_precomp_gemm":
        nbytes = workspace_bytes(algo, "backward_data", problem)
        taps = _tap_table(g, handle, g.Kg, nbytes)
        filters = _gemm_ready_filters(w, g, handle.workspace(nbytes)[4 * g.Kg * g.TRS:])
        vec_w = _aligned(filters, g.Cg)
    bn = tile_n(g.Cg, CONV_TILE_WIDTHS)
    kernel = get_kernel("convolution", f"convolution_backward_data_{algo}_{g.suffix}_bn{bn}")
    grid = (math.ceil(g.N * g.DHW / TILE), math.ceil(g.Cg / bn), g.groups)
    kernel(grid, (THREADS,), (filters, dy, dx, taps, *g.args(), np.float32(alpha), np.float32(beta), vec_w))


def convolution_backward_data_implicit_gemm(w, dy, dx, g, handle, problem, alpha, beta):
    """The GEMM dx = W^T dy_col, gathering dy on the fly (no workspace)."""
    _backward_data_implicit("implicit_gemm", w, dy, dx, g, handle, problem, alpha, beta)


def convolution_backward_data_implicit_precomp_gemm(w, dy, dx, g, handle, problem, alpha, beta):
    """implicit_gemm with a tap table and the filters copied once into GEMM-ready order."""
    _backward_data_implicit("implicit_precomp_gemm", w, dy, dx, g, handle, problem, alpha, beta)


def convolution_backward_data_winograd(w, dy, dx, g, handle, problem, alpha, beta, transformed_filter=None):
    """The data gradient of a stride-1 3x3 convolution is a forward Winograd convolution of dy with the
    flipped, transposed filters (_winograd with direction 'backward_data'), or the forward's, permuted."""
    _winograd(dy, w, None, dx, g, handle, "backward_data", alpha, beta, transformed_filter=transformed_filter)


def _gemm_ready_filters(w, g, space):
    """Copy the filters into `space` as, per group, the (Kg*TRS, Cg) matrix B of backward-data's GEMM.

    Row k follows the reduction order of kernels/convolution.cu: (kk, t, r, s) for NCHW filters
    (K, Cg, T, R, S), (t, r, s, kk) for NHWC filters (K, T, R, S, Cg).
    """
    G, Kg, Cg, TRS = g.groups, g.Kg, g.Cg, g.TRS
    dest = space[: w.size]
    if g.channels_last:
        dest.reshape(G, TRS, Kg, Cg)[...] = w.reshape(G, Kg, TRS, Cg).transpose(0, 2, 1, 3)
    else:
        dest.reshape(G, Kg, TRS, Cg)[...] = w.reshape(G, Kg, Cg, TRS).transpose(0, 1, 3, 2)
    return dest


# ----------------------------------------------------------------------------------------------
# Backward filter
# ----------------------------------------------------------------------------------------------


def reads_channels_first(direction: str, algo: str, problem) -> bool:
    """True when `algo` runs `direction` of a channels-first problem with no transposes into NHWC (convolution_tc's)."""
    return algo == "implicit_gemm_tc" and _tc.reads_channels_first(direction, problem)


def convolution_backward_filter(x, dy, problem, algo, alpha, beta, out):
    """dw = alpha * dL/dw + beta * out, on the GPU (shaped like w; BACKWARD_FILTER names the launchers)."""
    if algo in OWN_MODULE:
        return OWN_MODULE[algo].convolution_backward_filter(x, dy, problem, alpha, beta, out)
    return _backward("convolution_backward_filter", BACKWARD_FILTER, algo, x, dy, problem, problem.w_shape, alpha,
                     beta, out)


def convolution_backward_filter_direct(x, dy, dw, g, handle, problem, alpha, beta):
    """One thread per filter element summing over the batch and output positions, or, for first layers,
    the small-channel GEMM split over pixel chunks and reduced in a fixed order (_backward_filter_small_c)."""
    if small_channel_kernel("backward_filter", problem):
        _backward_filter_small_c(x, dy, dw, g, handle, problem, alpha, beta)
        return
    kernel = get_kernel("convolution", "convolution_backward_filter_direct")
    kernel((grid_stride_blocks(dw.size),), (256,),
           (x, dy, dw, *g.args(), np.float32(alpha), np.float32(beta), _flag(g.channels_last)))


def convolution_backward_filter_implicit_gemm(x, dy, dw, g, handle, problem, alpha, beta):
    """The GEMM dw = dy x_col^T over N*OPQ, split over K slices when few tiles would fill the GPU."""
    algo = "implicit_gemm"
    cols, depth = g.Cg * g.TRS, g.N * g.OPQ
    splits, k_per_split = split_k_plan(g.Kg, cols, depth, g.groups)
    partial = None
    if splits > 1:
        partial = handle.workspace(workspace_bytes(algo, "backward_filter", problem))
    if g.Kg <= 64 < cols:  # few output channels: compute dw^T so they fill the narrow side
        bn = tile_n(g.Kg, (64, 32))
        kernel = get_kernel("convolution", f"convolution_backward_filter_implicit_gemm_{g.suffix}_t_bn{bn}")
        grid = (math.ceil(cols / TILE), math.ceil(g.Kg / bn), g.groups * splits)
    else:
        bn = tile_n(cols, CONV_TILE_WIDTHS)
        kernel = get_kernel("convolution", f"convolution_backward_filter_implicit_gemm_{g.suffix}_bn{bn}")
        grid = (math.ceil(g.Kg / TILE), math.ceil(cols / bn), g.groups * splits)
    kernel(grid, (THREADS,), (x, dy, dw, partial, np.int32(k_per_split), *g.args(),
                              np.float32(alpha), np.float32(beta), _aligned(dy, g.OPQ)))
    if splits > 1:  # dw = alpha * (sum of the slices) + beta * dw; dw is flat (K, cols)
        get_kernel("gemm", "gemm_splitk_reduce")(
            (grid_stride_blocks(dw.size),), (THREADS,),
            (partial, np.int32(splits), np.int32(1), np.int32(1), np.int32(dw.size),
             np.float32(alpha), np.float32(beta), dw, np.int64(0), np.int64(1), np.int64(0), np.uint64(0), np.int64(0),
             np.int64(0)))


def _backward_filter_small_c(x, dy, dw, g, handle, problem, alpha, beta):
    """First layers: the small-channel wgrad GEMM, split over pixel chunks, then a fixed-order sum."""
    kb, ct, slices, per_slice = _small_c_wgrad_plan(g)
    partial = None
    if slices > 1:
        partial = handle.workspace(workspace_bytes("direct", "backward_filter", problem))
    kernel = get_kernel("convolution", f"convolution_backward_filter_direct_small_c_{g.suffix}_kb{kb}_ct{ct}")
    kernel((slices, math.ceil(g.K / kb), 1), (THREADS,),
           (x, dy, dw, partial, np.int32(per_slice), *g.args(), np.float32(alpha), np.float32(beta)))
    if slices > 1:
        get_kernel("convolution", "convolution_splitk_reduce")(
            (math.ceil(dw.size / 32),), (THREADS,),
            (partial, np.int32(slices), np.int64(dw.size), np.float32(alpha), np.float32(beta), dw))


# ----------------------------------------------------------------------------------------------
# Backward bias
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _bias_split(rows: int, K: int):
    """(column tiles, rows per chunk, chunks) of convolution_backward_bias_nhwc: chunks of rows, whole 8-row steps,
    for about two waves of blocks."""
    col_tiles = (K + 31) // 32
    per_chunk = math.ceil(rows / max(1, min(math.ceil(rows / 8), math.ceil(528 / col_tiles))))
    per_chunk = max(8, math.ceil(per_chunk / 8) * 8)
    return col_tiles, per_chunk, max(1, math.ceil(rows / per_chunk))


def convolution_backward_bias_nhwc(dy, K, alpha, beta, out, out_dtype=None):
    """Channels-last db: column sums of dy viewed as (rows, K), in fp32 chunks (convolution_backward_bias_nhwc)
    added in order by convolution_backward_bias_finish, which writes db in dy's dtype (blended with out), or in
    out_dtype (float32 for 16-bit dy, no out: the fp32 sums rounded once, to float32)."""
    dy = cupy.ascontiguousarray(dy)
    db_dtype = dy.dtype if out_dtype is None else out_dtype
    db = out if out is not None and out.flags.c_contiguous and out.dtype == dy.dtype else cupy.ndarray((K,), db_dtype)
    if out is not None and db is not out and beta != 0:
        db[...] = out
    if K:
        kernel, grid, chunks, shape_args, finish_kernel, finish_grid = _bias_nhwc_plan(dy, K, db.dtype)
        partial = cupy.ndarray((chunks, K), dtype=cupy.float32)
        arrivals = arrival_counters(grid[0])   # the last block of each column tile writes db: one launch
        kernel(grid, (32, 8), (dy, partial, *shape_args[:-1], null_pointer() if arrivals is None else arrivals, db,
                               np.float32(alpha), np.float32(beta), shape_args[-1]))
        if arrivals is None:
            finish_kernel(finish_grid, (256,), (partial, np.int32(chunks), np.int32(K), db, np.float32(alpha),
                                                np.float32(beta), shape_args[-1]))
    return db if out is None or db is out else finish(db, out)


_bias_nhwc_plans = Plans()   # (dy's size and dtype, K, db's dtype, device) -> the launch (every Linear's bias, a step)


def _bias_nhwc_plan(dy, K, db_dtype):
    """(kernel, grid, chunks, shape arguments (rows, K, rows per chunk, dy's kind, then db's kind), the finishing
    kernel, its grid) of convolution_backward_bias_nhwc for dy."""
    key = (dy.size, dy.dtype, K, db_dtype, cupy.cuda.runtime.getDevice())
    plan = _bias_nhwc_plans.get(key)
    if plan is None:
        rows = dy.size // K
        col_tiles, per_chunk, chunks = _bias_split(rows, K)
        plan = (get_kernel("convolution", "convolution_backward_bias_nhwc"), (col_tiles, chunks), chunks,
                (np.int64(rows), np.int32(K), np.int64(per_chunk), np.int32(STORAGE_KINDS[dy.dtype]),
                 np.int32(STORAGE_KINDS[db_dtype])),
                get_kernel("convolution", "convolution_backward_bias_finish"), ((K + 255) // 256,))
        _bias_nhwc_plans.keep(key, plan)
    return plan


# device -> convolution_backward_bias (every training step of a layer with a bias launches it)
_bias_kernels: dict = {}


def _bias_kernel():
    device = cupy.cuda.runtime.getDevice()
    kernel = _bias_kernels.get(device)
    if kernel is None:
        kernel = _bias_kernels[device] = get_kernel("convolution", "convolution_backward_bias")
    return kernel


def convolution_backward_bias(dy, problem, alpha, beta, out, out_dtype=None):
    """db[k] = alpha * sum of dy over the batch and every output position + beta * out (out_dtype: float32 for
    16-bit dy, without out: db in float32)."""
    if problem.layout == "NHWC" and dy.dtype in STORAGE_KINDS:
        return convolution_backward_bias_nhwc(dy, problem.K, alpha, beta, out, out_dtype)
    if dy.dtype in HALF_KINDS:  # NCHW: summed in fp32, rounded once to the data's dtype
        db = dy.astype(cupy.float32).sum(axis=(0,) + tuple(range(2, dy.ndim))) * np.float32(alpha)
        if out is None:
            return db.astype(dy.dtype if out_dtype is None else out_dtype)
        if beta != 0:
            db += np.float32(beta) * out.astype(cupy.float32)
        out[...] = db.astype(out.dtype)
        return out
    if dy.dtype != cupy.float32:
        raise TypeError(f"convolution_backward_bias: the GPU kernels are float32, got {dy.dtype}")
    dy = _input(dy)
    db, original = kernel_output("convolution_backward_bias", out, (problem.K,), beta, dy)
    if problem.K:
        _bias_kernel()((problem.K,), (256,), (
            dy, db, np.int32(problem.N), np.int32(problem.K), np.int32(math.prod(problem.out_size)), np.float32(alpha),
            np.float32(beta)))
    return finish(db, original)


# ----------------------------------------------------------------------------------------------
# The algorithms, per direction: each name is its kernels' and its NumPy reference's
# (minidl/primitives/cpu/convolution.py has the same tables). implicit_gemm_tc and fft have modules of
# their own (convolution_tc.py, convolution_fft.py), called with the whole arrays.
# ----------------------------------------------------------------------------------------------

FORWARD = {"direct": convolution_forward_direct, "implicit_gemm": convolution_forward_implicit_gemm,
           "implicit_precomp_gemm": convolution_forward_implicit_precomp_gemm,
           "im2col_gemm": convolution_forward_im2col_gemm, "winograd": convolution_forward_winograd}
BACKWARD_DATA = {"direct": convolution_backward_data_direct, "implicit_gemm": convolution_backward_data_implicit_gemm,
                 "implicit_precomp_gemm": convolution_backward_data_implicit_precomp_gemm,
                 "im2col_gemm": convolution_backward_data_im2col_gemm, "winograd": convolution_backward_data_winograd}
BACKWARD_FILTER = {"direct": convolution_backward_filter_direct,
                   "implicit_gemm": convolution_backward_filter_implicit_gemm,
                   "im2col_gemm": convolution_backward_filter_im2col_gemm}
OWN_MODULE = {"implicit_gemm_tc": _tc, "fft": _fft}
