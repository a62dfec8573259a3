"""CuPy launchers of kernels/convolution_tc.cu: the tensor-core convolution ("implicit_gemm_tc").

Called by cuda/convolution.py for algo="implicit_gemm_tc"; same interface as its other algorithms
(is_supported / workspace_bytes / one function per direction taking the validated problem).

What is covered (anything else reports not_supported, with the reason):
  * dtypes: float32 with math="tf32" (TF32 tensor cores, fp32 accumulation), float16 and bfloat16
    (fp16/bf16 tensor cores, fp32 accumulation; outputs rounded to the data's dtype);
  * 1-D and 2-D convolutions, groups = 1, any padding, stride and dilation, any channel counts;
  * both layouts: NHWC runs directly; NCHW is transposed to NHWC on the way in (backward data's
    filters go straight from (K, C, R, S) to (C, R, S, K), one transpose) and back on the way out,
    except where Hopper's kernels write channels-first memory themselves (forward, backward data) or
    read it as it is (the TF32 weight gradient); measured in benchmarks/results/gpu_conv_tc.md;
  * the 16-byte cp.async path needs C (forward, backward filter) or K (backward data, and backward
    filter) to be a multiple of 4 (float32) or 8 (half) and 16-byte-aligned arrays; otherwise the
    same kernels gather element by element (correct, slower).
Float32 with math="fp32" and float64 are not covered: the policy then uses the fp32 algorithms.
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from . import convolution_wgmma as _wgmma
from ._compile import get_kernel
from ._launch import grid_stride_blocks, sm_count
from .handle import get_handle
from .layout import layout_transform

_INT32_MAX = 2**31 - 1
THREADS = 256
BM, BK = 128, 32

# dtype name -> (kernel-name suffix, CONV_TC_KIND, elements per 16-byte copy)
KINDS = {"float32": ("tf32", 0, 4), "float16": ("fp16", 1, 8), "bfloat16": ("bf16", 2, 8)}


def math_of(problem) -> str:
    """The arithmetic the tensor-core kernels use for this problem's dtype."""
    return KINDS[problem.dtype][0] if problem.dtype in KINDS else "fp32"


def is_supported(direction: str, problem) -> tuple[bool, str]:
    if problem.dtype not in KINDS:
        return False, f"the tensor-core kernels take float32 (math='tf32'), float16 or bfloat16, got {problem.dtype}"
    if problem.dtype == "float32" and problem.math != "tf32":
        return False, "float32 runs on tensor cores only with math='tf32' (this call asked for math='fp32')"
    if problem.spatial_dims > 2:
        return False, "the tensor-core kernels are 1-D and 2-D only (3-D: use math='fp32' algorithms)"
    if problem.groups != 1:
        return False, f"the tensor-core kernels run groups=1 only, got groups={problem.groups}"
    g = _geometry(problem)
    if max(g["N"] * g["P"] * g["Q"], g["N"] * g["H"] * g["W"]) * max(g["C"], g["K"]) > _INT32_MAX * 8:
        return False, "too large for one launch (split the batch)"
    if max(g["N"] * g["P"] * g["Q"], g["N"] * g["H"] * g["W"], g["R"] * g["S"] * max(g["C"], g["K"])) > _INT32_MAX:
        return False, "too large for 32-bit GEMM indices (split the batch)"
    return True, ""


def vector_path(direction: str, problem) -> bool:
    """Whether the kernels can gather with 16-byte cp.async (channel counts multiples of 4 / 8);
    otherwise they gather element by element, which the heuristic avoids for float32."""
    vec = KINDS[problem.dtype][2] if problem.dtype in KINDS else 4
    C, K = problem.C, problem.K
    if direction == "forward":
        return C % vec == 0
    if direction == "backward_data":
        return K % vec == 0
    return C % vec == 0 and K % vec == 0


def _geometry(problem) -> dict:
    """The problem as the kernels see it: 2-D, NHWC (1-D gets H = R = P = 1). Made once per problem and kept on it
    (a training step asks for it in every direction, every step); callers read it and never change it."""
    g = problem.__dict__.get("_tc_geometry")
    if g is None:
        g = _make_geometry(problem)
        object.__setattr__(problem, "_tc_geometry", g)   # (the problem is a frozen dataclass: not one of its fields)
    return g


def _make_geometry(problem) -> dict:
    lead = 2 - problem.spatial_dims
    H, W = (1,) * lead + tuple(problem.in_size)
    R, S = (1,) * lead + tuple(problem.kernel_size)
    P, Q = (1,) * lead + tuple(problem.out_size)
    ph, pw = (0,) * lead + tuple(problem.padding)
    sh, sw = (1,) * lead + tuple(problem.stride)
    dh, dw = (1,) * lead + tuple(problem.dilation)
    return dict(N=problem.N, H=H, W=W, C=problem.C, K=problem.K, R=R, S=S, P=P, Q=Q, ph=ph, pw=pw, sh=sh, sw=sw,
                dh=dh, dw=dw)


def _geom_args(g) -> tuple:
    return tuple(np.int32(g[k]) for k in ("N", "H", "W", "C", "K", "R", "S", "P", "Q", "ph", "pw", "sh", "sw", "dh",
                                           "dw"))


def _itemsize(problem) -> int:
    return 4 if problem.dtype == "float32" else 2


def _tile_n(gemm_m, gemm_n) -> int:
    """BN = 64 for narrow GEMMs (N <= 64), or when 128-wide tiles would not fill the SMs once."""
    if gemm_n <= 64:
        return 64
    if math.ceil(gemm_m / BM) * math.ceil(gemm_n / 128) < sm_count():
        return 64
    return 128


def _wgrad_plan(g):
    """(swap, bn, splits, tiles_per_slice) of the filter-gradient kernel."""
    rsc = g["R"] * g["S"] * g["C"]
    swap = g["K"] <= 64
    gemm_m, gemm_n = (rsc, g["K"]) if swap else (g["K"], rsc)
    bn = 64 if swap else 128
    tiles = math.ceil(gemm_m / BM) * math.ceil(gemm_n / bn)
    ktiles = max(1, math.ceil(g["N"] * g["P"] * g["Q"] / BK))
    splits = max(1, min(max(1, ktiles // 4), math.ceil(2 * sm_count() / tiles)))
    per_slice = math.ceil(ktiles / splits)
    return swap, bn, math.ceil(ktiles / per_slice), per_slice


def workspace_bytes(direction: str, problem) -> int:
    """Scratch bytes: the NHWC copies of an NCHW call, the GEMM-ready filters of backward data,
    the split-K partial sums of backward filter (fp32)."""
    g = _geometry(problem)
    item = _itemsize(problem)
    x_elems = g["N"] * g["H"] * g["W"] * g["C"]
    y_elems = g["N"] * g["P"] * g["Q"] * g["K"]
    w_elems = g["K"] * g["R"] * g["S"] * g["C"]
    total = 0
    if problem.layout == "NCHW":  # x, w, y (or dy, dx, dw) in NHWC
        total += item * (x_elems + y_elems + w_elems)
    if direction == "backward_data":
        total += item * w_elems
    if direction == "backward_filter":
        _, _, splits, _ = _wgrad_plan(g)
        if splits > 1:
            total += 4 * splits * w_elems
    return total


# ----------------------------------------------------------------------------------------------
# Launch helpers
# ----------------------------------------------------------------------------------------------


def _smem_bytes(kind: int, bn: int, k_major: bool) -> int:
    """Dynamic shared memory of a TcConfig<kind, bn, k_major, k_major> (kernels/convolution_tc.cu)."""
    item, stages = (4, 3) if kind == 0 else (2, 4)
    if k_major:
        ld = BK + (4 if kind == 0 else 8)
        a, b = BM * ld, bn * ld
    else:
        a, b = BK * (BM + 8), BK * (bn + 8)
    return stages * (a + b) * item


_configured = set()


def _kernel(problem, name, smem):
    """The compiled kernel `name` of the problem's kind, allowed `smem` bytes of dynamic shared memory."""
    suffix, kind, _ = KINDS[problem.dtype]
    name = name.format(kind=suffix)
    kernel = get_kernel("convolution_tc", name, options=(f"-DCONV_TC_KIND={kind}",))
    # Keyed by device and name, not by the Python object: get_kernel may hand out a new wrapper each
    # time, and a recycled id() would skip the opt-in for a function that never had it (measured: a
    # launch then fails with CUDA_ERROR_INVALID_VALUE).
    key = (cupy.cuda.Device().id, name, smem)
    if key not in _configured:
        # cudaFuncAttributeMaxDynamicSharedMemorySize: above 48 KiB a kernel must opt in
        kernel.max_dynamic_shared_size_bytes = int(smem)
        _configured.add(key)
    return kernel


def _to_nhwc(a):
    """(N, C, *spatial) -> contiguous (N, *spatial, C); filters (K, C, *k) -> (K, *k, C) alike."""
    return layout_transform(a, "NHWC")


def _operands(problem, *arrays):
    """The problem's geometry, and its operands as the kernels read them: contiguous NHWC arrays (KRSC filters),
    channels-first ones transposed."""
    nhwc = _to_nhwc if problem.layout == "NCHW" else cupy.ascontiguousarray
    return (_geometry(problem), *(nhwc(a) for a in arrays))


def _to_nchw(a):
    return layout_transform(a, "NCHW")


def _aligned(*arrays) -> bool:
    return all(a is None or a.data.ptr % 16 == 0 for a in arrays)


def _output(op, out, shape_nhwc, dtype, beta, layout, *inputs):
    """(target, original): the contiguous NHWC array the kernel writes, and the user's array to copy
    it into afterwards (None when the kernel writes the user's `out` itself)."""
    if out is None:
        return cupy.ndarray(shape_nhwc, dtype=dtype), None
    if out.dtype != dtype:
        raise TypeError(f"{op}: out has dtype {out.dtype}, expected {dtype}")
    if layout == "NCHW":
        target = _to_nhwc(out) if beta != 0 else cupy.ndarray(shape_nhwc, dtype=dtype)
        return target, out
    overlaps = any(a is not None and cupy.may_share_memory(out, a) for a in inputs)
    if out.flags.c_contiguous and not overlaps:
        return out, None
    target = out.copy(order="C") if beta != 0 else cupy.ndarray(shape_nhwc, dtype=dtype)
    return target, out


def _channels_first_output(out, shape, layout, dtype, *inputs):
    """(the array the wgmma kernel writes, channels-first memory seen as (N, P, Q, K); the result to return) when the
    result can be written channels-first directly, else None. A channels-first problem's own result (a new array,
    or `out` when contiguous): no transpose after. A channels-last problem's `out` when it is an (N, P, Q, K) view of
    channels-first memory: what a training layer on NCHW tensors hands its NHWC plan (nn.functional.convolution)."""
    if layout == "NCHW":
        if out is None:
            y = cupy.ndarray(tuple(int(s) for s in shape), dtype=dtype)
        elif out.dtype == dtype and out.flags.c_contiguous and not _overlaps(out, inputs):
            y = out
        else:
            return None
        return y.transpose((0,) + tuple(range(2, y.ndim)) + (1,)), y
    if out is not None and out.dtype == dtype and not _overlaps(out, inputs) and _channels_first_view(out):
        return out, out
    return None


def _channels_first_view(a) -> bool:
    """Whether a (N, *spatial, C) array is a view of contiguous channels-first memory."""
    return a.transpose((0, a.ndim - 1) + tuple(range(1, a.ndim - 1))).flags.c_contiguous


def _overlaps(out, inputs) -> bool:
    """Whether out's memory (one contiguous span) meets any input's (their spans, from first to last byte)."""
    lo, hi = out.data.ptr, out.data.ptr + out.nbytes
    return any(a is not None and a.data.ptr < hi and lo < a.data.ptr + max(a.nbytes, 1) for a in inputs)


def _finish(target, original, layout):
    if original is None:
        return target
    if layout == "NCHW":
        original[...] = _to_nchw(target)
    elif _channels_first_view(original):
        # an (N, P, Q, K) view of channels-first memory (a training layer's twin): one transpose into it
        nd = original.ndim
        layout_transform(target, "NCHW", out=original.transpose((0, nd - 1) + tuple(range(1, nd - 1))))
    else:
        original[...] = target
    return original


def _result(target, original, layout):
    """The array to return: the user's out, or the new result in the problem's layout."""
    if original is not None:
        return _finish(target, original, layout)
    return _to_nchw(target) if layout == "NCHW" else target


def _scale_only(target, alpha, beta):
    if beta == 0:
        target.fill(0)
    else:
        target[...] = (target.astype(cupy.float32) * np.float32(beta)).astype(target.dtype)


def _nhwc_shape(shape, layout):
    shape = tuple(int(s) for s in shape)
    return shape if layout == "NHWC" else (shape[0],) + shape[2:] + (shape[1],)


# ----------------------------------------------------------------------------------------------
# The three directions
# ----------------------------------------------------------------------------------------------


def convolution_forward(x, w, problem, bias, alpha, beta, out):
    """y = alpha * (conv(x, w) + bias) + beta * out on tensor cores (fprop implicit GEMM)."""
    layout, dtype = problem.layout, x.dtype
    g, x, w = _operands(problem, x, w)
    bias = bias if bias is None or bias.flags.c_contiguous else cupy.ascontiguousarray(bias)
    M, N = g["N"] * g["P"] * g["Q"], g["K"]
    why = _wgmma.reason("forward", g, problem.dtype, (x, w, bias)) if M and N else "no work"
    if why is None:
        direct = _channels_first_output(out, problem.y_shape, layout, dtype, x, w, bias)
        if direct is not None and _wgmma.convolution_forward(x, w, bias, direct[0], g, problem.dtype, alpha, beta,
                                                             nchw=True, why=why):
            return direct[1]
    y, original = _output("convolution_forward", out, _nhwc_shape(problem.y_shape, layout), dtype, beta, layout,
                          x, w, bias)
    if y.size and M and _wgmma.convolution_forward(x, w, bias, y, g, problem.dtype, alpha, beta, why=why):
        pass  # Hopper: wgmma fed by TMA (convolution_wgmma.py says when it declines)
    elif y.size and M:
        _, kind, vec_elems = KINDS[problem.dtype]
        bn = _tile_n(M, N)
        kernel = _kernel(problem, "convolution_forward_tc_{kind}_bn%d" % bn, _smem_bytes(kind, bn, True))
        vec = g["C"] % vec_elems == 0 and _aligned(x, w)
        kernel((math.ceil(M / BM), math.ceil(N / bn), 1), (THREADS,),
               (x, w, bias, y, *_geom_args(g), np.float32(alpha), np.float32(beta), np.int32(vec)),
               shared_mem=_smem_bytes(kind, bn, True))
    elif y.size:
        _scale_only(y, alpha, beta)
    return _result(y, original, layout)


def _dgrad_filters(w, g, layout):
    """The GEMM-ready filters of backward data: (C, R, S, K), rows = input channel, the reduction (r, s, k) contiguous.
    From channels-first filters (K, C, R, S) that is one 2-D transpose, (K, C*R*S) -> (C*R*S, K): one launch of the
    layout kernel (the (1, K, C*R*S) array as channels-first, to channels-last); from NHWC ones (K, R, S, C) a copy of
    a transposed view into the workspace."""
    C, R, S, K = g["C"], g["R"], g["S"], g["K"]
    if layout == "NCHW":
        return layout_transform(w.reshape(1, K, C * R * S), "NHWC").reshape(C, R, S, K)
    nbytes = w.size * w.itemsize
    wt = get_handle().workspace(nbytes).view(cupy.uint8)[:nbytes].view(w.dtype).reshape(C, R, S, K)
    wt[...] = w.reshape(K, R, S, C).transpose(3, 1, 2, 0)
    return wt


def convolution_backward_data(w, dy, problem, alpha, beta, out):
    """dx = alpha * conv_transpose(dy, w) + beta * out on tensor cores (dgrad implicit GEMM)."""
    layout, dtype = problem.layout, dy.dtype
    if layout == "NCHW":   # the filters go straight to (C, R, S, K) (_dgrad_filters): no NHWC copy of them
        g, dy = _operands(problem, dy)
    else:
        g, w, dy = _operands(problem, w, dy)
    M, N = g["N"] * g["H"] * g["W"], g["C"]
    work = M * N and g["N"] * g["P"] * g["Q"]
    if work:
        wt = _dgrad_filters(w, g, layout)
        why = _wgmma.reason("backward_data", g, problem.dtype, (wt, dy))
        if why is None:
            direct = _channels_first_output(out, problem.x_shape, layout, dtype, wt, dy)
            if direct is not None and _wgmma.convolution_backward_data(wt, dy, direct[0], g, problem.dtype, alpha,
                                                                       beta, nchw=True, why=why):
                return direct[1]
    dx, original = _output("convolution_backward_data", out, _nhwc_shape(problem.x_shape, layout), dtype, beta,
                           layout, w, dy)
    if work:
        if _wgmma.convolution_backward_data(wt, dy, dx, g, problem.dtype, alpha, beta, why=why):
            return _result(dx, original, layout)
        _, kind, vec_elems = KINDS[problem.dtype]
        bn = _tile_n(M, N)
        kernel = _kernel(problem, "convolution_backward_data_tc_{kind}_bn%d" % bn, _smem_bytes(kind, bn, True))
        vec = g["K"] % vec_elems == 0 and _aligned(wt, dy)
        kernel((math.ceil(M / BM), math.ceil(N / bn), 1), (THREADS,),
               (wt, dy, dx, *_geom_args(g), np.float32(alpha), np.float32(beta), np.int32(vec)),
               shared_mem=_smem_bytes(kind, bn, True))
    elif dx.size:
        _scale_only(dx, alpha, beta)
    return _result(dx, original, layout)


def reads_channels_first(direction: str, problem, g=None) -> bool:
    """True when `direction` of this channels-first problem runs on its NCHW arrays as they are, with no
    transposes: today the TF32 weight gradient on Hopper's wgmma (convolution_wgmma, the channels-first wgrad).
    g: the problem's _geometry, when the caller has it."""
    return (direction == "backward_filter" and problem.layout == "NCHW" and problem.groups == 1
            and problem.spatial_dims <= 2
            and _wgmma.nchw_filter_gradient_reason(g or _geometry(problem), problem.dtype) is None)


_reduce_kernels: dict = {}   # (dtype, device) -> convolution_tc_splitk_reduce_<kind>


def _reduce_kernel(dtype):
    key = (dtype, cupy.cuda.runtime.getDevice())
    kernel = _reduce_kernels.get(key)
    if kernel is None:
        suffix, kind, _ = KINDS[dtype]
        kernel = _reduce_kernels[key] = get_kernel("convolution_tc", f"convolution_tc_splitk_reduce_{suffix}",
                                                   options=(f"-DCONV_TC_KIND={kind}",))
    return kernel


def _splitk_reduce(dtype):
    """What hands out the kernel that adds up a weight gradient's split-K partial sums (fetched when a split happens,
    then kept)."""
    return lambda: _reduce_kernel(dtype)


def _scratch(nbytes: int):
    """Scratch for the split-K partial sums of the channels-first weight gradient: a new float32 array from CuPy's
    pool (stream-ordered, as the Handle's workspace; under graph capture from the graph's pool)."""
    return cupy.ndarray(max(1, (int(nbytes) + 3) // 4), dtype=cupy.float32)


def _filter_gradient_channels_first(x, dy, problem, alpha, beta, out):
    """dw (K, C, R, S) straight from channels-first x and dy (the TF32 wgmma kernel), written into `out` when it is
    a contiguous float32 array of its own, or None where this does not apply (the caller then transposes to NHWC)."""
    g = _geometry(problem)
    if not reads_channels_first("backward_filter", problem, g) or not g["N"] * g["P"] * g["Q"] * problem.K * problem.C:
        return None
    if out is None:
        dw = cupy.ndarray(problem.w_shape, dtype=cupy.float32)
    elif (out.dtype == cupy.float32 and out.flags.c_contiguous and tuple(out.shape) == tuple(problem.w_shape)
          and not _overlaps(out, (x, dy))):
        dw = out
    else:
        return None
    x, dy = cupy.ascontiguousarray(x), cupy.ascontiguousarray(dy)
    if not _wgmma.convolution_backward_filter_nchw(x, dy, dw, g, alpha, beta, _scratch, _splitk_reduce("float32")):
        return None
    return dw


def convolution_backward_filter(x, dy, problem, alpha, beta, out):
    """dw = alpha * dL/dw + beta * out on tensor cores (wgrad implicit GEMM, split-K)."""
    layout, dtype = problem.layout, x.dtype
    if layout == "NCHW":
        dw = _filter_gradient_channels_first(x, dy, problem, alpha, beta, out)
        if dw is not None:
            return dw
    g, x, dy = _operands(problem, x, dy)
    dw, original = _output("convolution_backward_filter", out, _nhwc_shape(problem.w_shape, layout), dtype, beta,
                           layout, x, dy)
    if dw.size and g["N"] * g["P"] * g["Q"]:
        _, kind, vec_elems = KINDS[problem.dtype]
        reduce_kernel = _splitk_reduce(problem.dtype)
        if _wgmma.convolution_backward_filter(x, dy, dw, g, problem.dtype, alpha, beta, get_handle().workspace,
                                              reduce_kernel):
            return _result(dw, original, layout)
        swap, bn, splits, per_slice = _wgrad_plan(g)
        rsc = g["R"] * g["S"] * g["C"]
        gemm_m, gemm_n = (rsc, g["K"]) if swap else (g["K"], rsc)
        handle = get_handle()
        partial = None
        if splits > 1:
            partial = handle.workspace(4 * splits * dw.size)
        name = "convolution_backward_filter_tc_{kind}_" + ("t_bn64" if swap else "bn128")
        smem = _smem_bytes(kind, bn, False)
        kernel = _kernel(problem, name, smem)
        vec = g["C"] % vec_elems == 0 and g["K"] % vec_elems == 0 and _aligned(x, dy)
        kernel((math.ceil(gemm_m / BM), math.ceil(gemm_n / bn), splits), (THREADS,),
               (x, dy, dw, partial, np.int32(per_slice), *_geom_args(g), np.float32(alpha), np.float32(beta),
                np.int32(vec)), shared_mem=smem)
        if splits > 1:
            reduce = reduce_kernel()
            reduce((grid_stride_blocks(dw.size),), (THREADS,),
                   (partial, np.int32(splits), np.int64(dw.size), np.float32(alpha), np.float32(beta), dw))
    elif dw.size:
        _scale_only(dw, alpha, beta)
    return _result(dw, original, layout)
