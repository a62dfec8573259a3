"""The description of a convolution, checked: ConvolutionDescriptor (how to convolve), ConvolutionProblem
(one call's shapes, layout, dtype and math, hashable: the key of plans and algorithm caches), AlgorithmPerf
(what find_convolution_algorithms reports), the shape checks of every direction, and HalfInFloat32 (16-bit
data that no algorithm of a device takes, widened to float32 around an fp32 algorithm). convolution.py runs
the primitives over these; this module knows no algorithm and no backend."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._common import as_tuple, get_array_module, normalize_layout, shape_str

DIRECTIONS = ("forward", "backward_data", "backward_filter")
MATHS = ("fp32", "tf32")
HALF_DTYPES = ("float16", "bfloat16")
POLICIES = ("heuristic", "prefer_fastest", "no_workspace", "workspace_limit", "deterministic")

# The CPU's fixed preference order of the `heuristic` policy, best first; the policies `no_workspace`,
# `workspace_limit` and `deterministic` walk the same order and take the first algorithm that
# qualifies. The BLAS-backed algorithms come first: im2col_gemm (one big GEMM per group, works for every
# problem), then Winograd (fewer multiplies, but 16 small GEMMs and transforms), then the plain loops.
# The GPU has no fixed order: its backend ranks the algorithms per problem (cuda/convolution.py,
# heuristic_order: cudnnGetConvolutionForwardAlgorithm_v7's idea), from measured tables.
HEURISTIC_ORDER = {
    "cpu": ("im2col_gemm", "winograd", "direct"),
}


# ----------------------------------------------------------------------------------------------
# Descriptors
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvolutionDescriptor:
    """How to convolve: padding, stride and dilation (one int per spatial dim), groups, spatial_dims.

    Ints are broadcast to every spatial dim: ConvolutionDescriptor(padding=1) is a 2-D convolution
    with padding (1, 1), stride (1, 1), dilation (1, 1), groups 1. When `spatial_dims` is not given
    it is taken from the length of a tuple argument, else 2.
    """

    padding: tuple = 0
    stride: tuple = 1
    dilation: tuple = 1
    groups: int = 1
    spatial_dims: int | None = None

    def __post_init__(self):
        op = "ConvolutionDescriptor"
        dims = self.spatial_dims
        if dims is None:
            lengths = {len(v) for v in (self.padding, self.stride, self.dilation) if not _is_int(v)}
            dims = lengths.pop() if len(lengths) == 1 else 2
        if not _is_int(dims) or dims not in (1, 2, 3):
            raise ValueError(f"{op}: spatial_dims must be 1, 2 or 3, got {self.spatial_dims!r}")
        if not _is_int(self.groups) or self.groups < 1:
            raise ValueError(f"{op}: groups must be an int >= 1, got {self.groups!r}")
        # object.__setattr__ because the dataclass is frozen (so that it is hashable)
        object.__setattr__(self, "spatial_dims", int(dims))
        object.__setattr__(self, "groups", int(self.groups))
        object.__setattr__(self, "padding", as_tuple(op, "padding", self.padding, dims, minimum=0))
        object.__setattr__(self, "stride", as_tuple(op, "stride", self.stride, dims, minimum=1))
        object.__setattr__(self, "dilation", as_tuple(op, "dilation", self.dilation, dims, minimum=1))


@dataclass(frozen=True)
class ConvolutionProblem:
    """Everything a backend needs to know about one convolution, validated and hashable.

    Shapes are in the user's layout; the sizes are per spatial dim. Built by this module only,
    after every check has passed, and handed to the backends (and used as the algorithm cache key).
    For convolution_backward_bias, which has no filter, only y_shape, layout, dtype, spatial_dims,
    N, K and out_size are filled in; the rest is None.
    """

    x_shape: tuple | None
    w_shape: tuple | None
    y_shape: tuple
    layout: str
    dtype: str
    spatial_dims: int
    N: int
    C: int | None
    K: int
    groups: int | None
    in_size: tuple | None
    kernel_size: tuple | None
    out_size: tuple
    padding: tuple | None
    stride: tuple | None
    dilation: tuple | None
    math: str = "fp32"          # "fp32" or "tf32" (see the module docstring)


@dataclass(frozen=True)
class AlgorithmPerf:
    """One line of find_convolution_algorithms: status is "ok" or "not_supported: <reason>";
    math is the arithmetic the algorithm uses for this problem ("fp32", "tf32", "fp16", "bf16")."""

    algo: str
    workspace_bytes: int
    time_ms: float | None
    status: str
    math: str = "fp32"


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------------------------
# Shape checks
# ----------------------------------------------------------------------------------------------

_SPATIAL_NAMES = {1: "W", 2: "H, W", 3: "D, H, W"}


def _make_problem(op, x_shape, w_shape, desc, layout, dtype, math="fp32") -> ConvolutionProblem:
    """Check the shapes against the descriptor and each other; return the problem they describe."""
    if not isinstance(desc, ConvolutionDescriptor):
        raise TypeError(f"{op}: desc must be a ConvolutionDescriptor, got {type(desc).__name__}")
    sd = desc.spatial_dims
    x_shape = tuple(int(s) for s in x_shape)
    w_shape = tuple(int(s) for s in w_shape)
    names = _SPATIAL_NAMES[sd]
    x_form = f"(N, C, {names})" if layout == "NCHW" else f"(N, {names}, C)"
    w_form = f"(K, C/groups, {names})" if layout == "NCHW" else f"(K, {names}, C/groups)"
    if len(x_shape) != sd + 2:
        raise ValueError(f"{op}: input must be {sd + 2}-D {x_form} for a {sd}-D convolution "
                         f"(spatial_dims={sd}), got shape {shape_str(x_shape)}")
    if len(w_shape) != sd + 2:
        raise ValueError(f"{op}: weight must be {sd + 2}-D {w_form} for a {sd}-D convolution "
                         f"(spatial_dims={sd}), got shape {shape_str(w_shape)}")
    if layout == "NCHW":
        N, C, in_size = x_shape[0], x_shape[1], x_shape[2:]
        K, w_channels, kernel = w_shape[0], w_shape[1], w_shape[2:]
    else:
        N, C, in_size = x_shape[0], x_shape[-1], x_shape[1:-1]
        K, w_channels, kernel = w_shape[0], w_shape[-1], w_shape[1:-1]
    G = desc.groups
    if N < 0 or C < 1 or any(s < 1 for s in in_size):
        raise ValueError(f"{op}: input shape {shape_str(x_shape)} must have channels and spatial "
                         f"sizes >= 1 ({x_form}, layout {layout})")
    if K < 1 or w_channels < 1 or any(k < 1 for k in kernel):
        raise ValueError(f"{op}: weight shape {shape_str(w_shape)} must have sizes >= 1 ({w_form})")
    if C % G != 0:
        raise ValueError(f"{op}: input channels C={C} (input {shape_str(x_shape)}) are not divisible "
                         f"by groups={G}")
    if K % G != 0:
        raise ValueError(f"{op}: output channels K={K} (weight {shape_str(w_shape)}) are not "
                         f"divisible by groups={G}")
    if w_channels * G != C:
        raise ValueError(f"{op}: input has {C} channels but weight {shape_str(w_shape)} expects "
                         f"{w_channels * G} (groups={G}); weight is {w_form}, layout {layout}")
    out_size = []
    for i, (n, k, p, s, d) in enumerate(zip(in_size, kernel, desc.padding, desc.stride, desc.dilation)):
        extent = d * (k - 1) + 1                                  # the dilated kernel's reach
        if extent > n + 2 * p:
            raise ValueError(
                f"{op}: kernel {shape_str(kernel)} (dilation {desc.dilation}) spans {extent} in "
                f"spatial dim {i} but the padded input has only {n} + 2*{p} = {n + 2 * p} "
                f"(input {shape_str(x_shape)}, weight {shape_str(w_shape)})")
        out_size.append((n + 2 * p - extent) // s + 1)
    out_size = tuple(out_size)
    y_shape = (N, K) + out_size if layout == "NCHW" else (N,) + out_size + (K,)
    return ConvolutionProblem(
        x_shape=x_shape, w_shape=w_shape, y_shape=y_shape, layout=layout, dtype=_dtype_name(dtype),
        spatial_dims=sd, N=N, C=C, K=K, groups=G, in_size=tuple(in_size), kernel_size=tuple(kernel),
        out_size=out_size, padding=desc.padding, stride=desc.stride, dilation=desc.dilation,
        math=_check_math(op, math))


def convolution_output_shape(x_shape, w_shape, desc, layout="NCHW") -> tuple:
    """The shape of y for an input of x_shape and a weight of w_shape, in the given layout.

    Each spatial size is floor((in + 2*padding - dilation*(kernel - 1) - 1) / stride) + 1.
    """
    layout = normalize_layout("convolution_output_shape", layout)
    return _make_problem("convolution_output_shape", x_shape, w_shape, desc, layout, "float32").y_shape


def _dtype_name(dtype) -> str:
    name = str(getattr(dtype, "name", dtype))
    return name if name in HALF_DTYPES else str(np.dtype(dtype))


def _check_math(op, math) -> str:
    if math not in MATHS:
        raise ValueError(f"{op}: math must be one of {', '.join(repr(m) for m in MATHS)}, got {math!r}")
    return math


def _check_array_shape(op, name, a, expected, why=""):
    if a is not None and tuple(a.shape) != tuple(expected):
        raise ValueError(f"{op}: {name} has shape {shape_str(a.shape)}, expected "
                         f"{shape_str(expected)}{why}")


def _check_blend_args(op, out, beta):
    if beta != 0 and out is None:
        raise ValueError(f"{op}: beta={beta} blends into an existing output, so pass out=")


def _device_key(is_cuda: bool):
    if not is_cuda:
        return "cpu"
    import cupy

    return ("cuda", cupy.cuda.Device().id)


class HalfInFloat32:
    """A backend wrapper for 16-bit data that no algorithm of the device takes (on the GPU the
    tensor-core kernels, the only half ones, are 1-D/2-D with groups = 1): the operands are widened to
    float32, the wrapped backend runs an fp32 algorithm on the float32 twin of the problem, and the
    result is rounded once to the data's dtype (cuDNN's "pseudo-half" configuration: half data, float
    compute). alpha/beta blend in float32. Costs a copy of each operand in float32. (The convolution's
    form of _common.computes_half_in_float32, used only where no half algorithm applies.)"""

    def __init__(self, impl, problem):
        self.impl, self.problem32 = impl, replace(problem, dtype="float32")

    @staticmethod
    def _wide(a):
        return None if a is None else a.astype(np.float32)

    def _finish(self, r, alpha, beta, out, dtype, relu=False):
        """alpha * r + beta * out (then ReLU), in float32, rounded once into `out` or a new array."""
        if alpha != 1.0:
            r = r * np.float32(alpha)
        if out is not None and beta != 0:
            r = r + np.float32(beta) * out.astype(np.float32)
        if relu:
            r = get_array_module(r).maximum(r, np.float32(0))   # NaN stays NaN, as torch's relu
        if out is None:
            return r.astype(dtype)
        out[...] = r.astype(out.dtype)
        return out

    def convolution_forward(self, x, w, problem, bias, algo, alpha, beta, out, relu=False):
        y = self.impl.convolution_forward(self._wide(x), self._wide(w), self.problem32, self._wide(bias), algo,
                                          1.0, 0.0, None)
        return self._finish(y, alpha, beta, out, x.dtype, relu)

    def convolution_backward_data(self, w, dy, problem, algo, alpha, beta, out):
        dx = self.impl.convolution_backward_data(self._wide(w), self._wide(dy), self.problem32, algo, 1.0, 0.0, None)
        return self._finish(dx, alpha, beta, out, dy.dtype)

    def convolution_backward_filter(self, x, dy, problem, algo, alpha, beta, out):
        dw = self.impl.convolution_backward_filter(self._wide(x), self._wide(dy), self.problem32, algo, 1.0, 0.0,
                                                   None)
        return self._finish(dw, alpha, beta, out, dy.dtype)

    def convolution_backward_bias(self, dy, problem, alpha, beta, out, out_dtype=None):
        return self.impl.convolution_backward_bias(dy, problem, alpha, beta, out, out_dtype)


def _half_needs_float32(impl, direction, problem) -> bool:
    """16-bit data for which no algorithm of the backend applies, while some does for float32."""
    if problem.dtype not in HALF_DTYPES:
        return False
    if any(impl.is_supported(a, direction, problem)[0] for a in impl.ALGORITHMS):
        return False
    wide = replace(problem, dtype="float32")
    return any(impl.is_supported(a, direction, wide)[0] for a in impl.ALGORITHMS)
