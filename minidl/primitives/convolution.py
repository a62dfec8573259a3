"""Convolution, cuDNN-style: descriptors, argument checks, algorithm selection, dispatch.

A convolution is described once (`ConvolutionDescriptor`: padding, stride, dilation, groups), then
run in three directions: forward (y from x and w), backward data (dx from w and dy) and backward
filter (dw from x and dy), plus backward bias (db from dy). Each direction can be computed by
several algorithms (see cpu/convolution.py for the CPU ones, cuda/convolution.py for the GPU ones);
they compute the same function with different speed and scratch memory ("workspace").

This module does what cuDNN's front end does:

1. Check every argument at the boundary and describe the call as a hashable `ConvolutionProblem`.
2. Pick an algorithm. `algo="auto"` asks the selection policy (set with `set_convolution_policy` or
   the `convolution_policy(...)` context manager):

   * ``heuristic`` (default) -- a preference order, no measuring (cudnnGetConvolutionForwardAlgorithm_v7's
     idea): ranked per problem and direction on the GPU (cuda/convolution.py: heuristic_order), the fixed
     `HEURISTIC_ORDER["cpu"]` on the CPU.
   * ``prefer_fastest``      -- run every applicable algorithm once on random data of the problem's
     shape, keep the fastest in a cache keyed by (device, direction, problem): the first call of a
     new shape pays the measuring, later calls are free (torch.backends.cudnn.benchmark = True).
   * ``no_workspace``        -- the first algorithm in heuristic order that needs no workspace.
   * ``workspace_limit``     -- the first algorithm in heuristic order whose workspace fits the limit.
   * ``deterministic``       -- the first algorithm in heuristic order that gives bit-identical
     results from run to run (on the GPU, no atomics).
3. Dispatch to the backend of the arrays' device: cpu.convolution (NumPy) or cuda.convolution (CuPy).

Math (cuDNN's math type), the `math=` argument of every direction and of the algorithm queries:

   * ``"fp32"`` (default) -- float32 data is computed in fp32 on CUDA cores; the tensor-core
     algorithm (``implicit_gemm_tc``) does not apply to float32.
   * ``"tf32"`` -- float32 data may also run on TF32 tensor cores (``implicit_gemm_tc``, preferred
     where it applies; the fp32 algorithms remain valid choices). On the CPU the NumPy reference
     emulates TF32: operands rounded to 10 mantissa bits, products summed in fp32.
   float16 / bfloat16 data always run on tensor cores on the GPU (fp32 accumulation) and in fp32 on
   the CPU, whatever `math` says. Where no algorithm of the device takes 16-bit data (on the GPU:
   groups > 1, 3-D), the operands are widened to float32, an fp32 algorithm runs, and the result is
   rounded once to the data's dtype (`HalfInFloat32`; cuDNN's "pseudo-half" configuration). `AlgorithmPerf.math` says which arithmetic each listed algorithm
   uses ("fp32", "tf32", "fp16", "bf16").
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import replace

import numpy as np

from ._common import backend, check_float, check_float_or_half, check_same_device, is_cuda_array, normalize_layout, \
    shape_str

__all__ = [
    "ConvolutionDescriptor", "ConvolutionProblem", "AlgorithmPerf", "ConvolutionPlan",
    "convolution_forward", "convolution_bias_activation_forward", "convolution_backward_data",
    "convolution_backward_filter",
    "convolution_backward_bias", "convolution_output_shape",
    "find_convolution_algorithms", "get_convolution_algorithm",
    "set_convolution_policy", "get_convolution_policy", "convolution_policy",
    "clear_convolution_algorithm_cache",
]

from .convolution_problem import (  # noqa: F401  (the descriptions, re-exported: minidl.primitives.convolution.X)
    DIRECTIONS, HALF_DTYPES, HEURISTIC_ORDER, MATHS, POLICIES, AlgorithmPerf, ConvolutionDescriptor, ConvolutionProblem,
    HalfInFloat32, _check_array_shape, _check_blend_args, _check_math, _device_key, _dtype_name, _half_needs_float32,
    _is_int, _make_problem, convolution_output_shape,
)


def _resolve_algorithm(op, algo, direction, problem, is_cuda, policy=None, workspace_limit=None):
    """The backend and the algorithm to run: the policy's choice for "auto" (policy None: the
    process-wide one), else the one asked for, checked to apply (an error naming it and the reason
    when it does not). 16-bit data that no algorithm takes runs through HalfInFloat32: the returned
    backend is then that wrapper, the algorithm an fp32 one."""
    impl = backend("convolution", is_cuda)
    if _half_needs_float32(impl, direction, problem):
        staged = HalfInFloat32(impl, problem)
        if algo in impl.ALGORITHMS and not impl.is_supported(algo, direction, staged.problem32)[0]:
            _check_applies(op, impl, algo, direction, problem)  # why not, said for the data as given
        _, algo = _resolve_algorithm(op, algo, direction, staged.problem32, is_cuda, policy, workspace_limit)
        return staged, algo
    if algo == "auto":
        return impl, _select(impl, _device_key(is_cuda), direction, problem, policy, workspace_limit)
    device = "cuda" if is_cuda else "cpu"
    if algo not in impl.ALGORITHMS:
        raise ValueError(f"{op}: unknown algorithm {algo!r} on {device}; use 'auto' or one of "
                         f"{', '.join(impl.ALGORITHMS)}")
    _check_applies(op, impl, algo, direction, problem)
    return impl, algo


def _check_applies(op, impl, algo, direction, problem):
    ok, reason = impl.is_supported(algo, direction, problem)
    if not ok:
        raise ValueError(f"{op}: algorithm {algo!r} does not apply to input {shape_str(problem.x_shape)}, "
                         f"weight {shape_str(problem.w_shape)} ({problem.dtype}): {reason}")


# ----------------------------------------------------------------------------------------------
# The primitives
# ----------------------------------------------------------------------------------------------


def convolution_forward(x, w, desc, bias=None, *, algo="auto", layout="NCHW", alpha=1.0, beta=0.0,
                        out=None, policy=None, math="fp32"):
    """y = alpha * (conv(x, w) + bias) + beta * out   (a cross-correlation, as in PyTorch).

    x: (N, C, *in) for layout "NCHW" or (N, *in, C) for "NHWC";
    w: (K, C/groups, *kernel) for "NCHW" or (K, *kernel, C/groups) for "NHWC";
    bias: (K,) or None. Returns y: (N, K, *out) or (N, *out, K), see convolution_output_shape.
    policy: the selection policy for algo="auto" (None: the process-wide one, set_convolution_policy).
    math: "fp32" or "tf32" (whether float32 data may run on TF32 tensor cores; module docstring).
    """
    op = "convolution_forward"
    layout = normalize_layout(op, layout)
    check_same_device(op, x=x, w=w, bias=bias, out=out)
    dtype = check_float_or_half(op, x=x, w=w, bias=bias, out=out)
    problem = _make_problem(op, x.shape, w.shape, desc, layout, dtype, math)
    _check_array_shape(op, "bias", bias, (problem.K,),
                       f" (one value per output channel; weight {shape_str(w.shape)})")
    _check_array_shape(op, "out", out, problem.y_shape)
    _check_blend_args(op, out, beta)
    impl, algo = _resolve_algorithm(op, algo, "forward", problem, is_cuda_array(x), *_policy_arg(op, policy))
    return impl.convolution_forward(x, w, problem, bias, algo, alpha, beta, out)


def convolution_bias_activation_forward(x, w, desc, bias, activation_desc, *, algo="auto", layout="NCHW", alpha=1.0,
                                        beta=0.0, out=None, policy=None):
    """y = act(alpha * (conv(x, w) + bias) + beta * out): cuDNN's cudnnConvolutionBiasActivationForward
    (without its second input z). Shapes as convolution_forward; bias (K,) or None; activation_desc
    an ActivationDescriptor.

    On the GPU a ReLU runs in the convolution kernel's epilogue (direct, implicit GEMM, Winograd; no
    extra launch, y written once); other activations, and im2col_gemm, apply it in one in-place pass
    after the convolution. The NumPy reference is the unfused pair.
    """
    from .activation import ActivationDescriptor

    op = "convolution_bias_activation_forward"
    if not isinstance(activation_desc, ActivationDescriptor):
        raise TypeError(f"{op}: activation_desc must be an ActivationDescriptor, got {type(activation_desc).__name__}")
    layout = normalize_layout(op, layout)
    check_same_device(op, x=x, w=w, bias=bias, out=out)
    dtype = check_float(op, x=x, w=w, bias=bias, out=out)
    problem = _make_problem(op, x.shape, w.shape, desc, layout, dtype)
    _check_array_shape(op, "bias", bias, (problem.K,),
                       f" (one value per output channel; weight {shape_str(w.shape)})")
    _check_array_shape(op, "out", out, problem.y_shape)
    _check_blend_args(op, out, beta)
    impl, algo = _resolve_algorithm(op, algo, "forward", problem, is_cuda_array(x), *_policy_arg(op, policy))
    return _forward_with_activation(impl, x, w, problem, bias, algo, alpha, beta, out, activation_desc)


def _forward_with_activation(impl, x, w, problem, bias, algo, alpha, beta, out, activation_desc):
    """The backend's forward with a ReLU in its epilogue (GPU), else the forward then one in-place pass."""
    from .activation import activation_forward

    if is_cuda_array(x) and activation_desc.mode == "relu":
        return impl.convolution_forward(x, w, problem, bias, algo, alpha, beta, out, relu=True)
    y = impl.convolution_forward(x, w, problem, bias, algo, alpha, beta, out)
    return activation_forward(y, activation_desc, out=y)


def convolution_backward_data(w, dy, desc, x_shape, *, algo="auto", layout="NCHW", alpha=1.0,
                              beta=0.0, out=None, policy=None, math="fp32"):
    """dx = alpha * dL/dx + beta * out: the gradient of the input (a transposed convolution of dy).

    w: the forward weight; dy: shaped like y; x_shape: the forward input's shape. Returns dx: x_shape.
    """
    op = "convolution_backward_data"
    layout = normalize_layout(op, layout)
    check_same_device(op, w=w, dy=dy, out=out)
    dtype = check_float_or_half(op, w=w, dy=dy, out=out)
    problem = _make_problem(op, x_shape, w.shape, desc, layout, dtype, math)
    _check_dy(op, dy, problem)
    _check_array_shape(op, "out", out, problem.x_shape)
    _check_blend_args(op, out, beta)
    impl, algo = _resolve_algorithm(op, algo, "backward_data", problem, is_cuda_array(dy), *_policy_arg(op, policy))
    return impl.convolution_backward_data(w, dy, problem, algo, alpha, beta, out)


def _check_dy(op, dy, problem):
    """dy must have the forward output's shape; the message says where that shape comes from."""
    _check_array_shape(op, "dy", dy, problem.y_shape,
                       f" (the output shape of input {shape_str(problem.x_shape)} and weight "
                       f"{shape_str(problem.w_shape)})")


def convolution_backward_filter(x, dy, desc, w_shape, *, algo="auto", layout="NCHW", alpha=1.0,
                                beta=0.0, out=None, policy=None, math="fp32"):
    """dw = alpha * dL/dw + beta * out: the gradient of the weight. Returns dw: w_shape."""
    op = "convolution_backward_filter"
    layout = normalize_layout(op, layout)
    check_same_device(op, x=x, dy=dy, out=out)
    dtype = check_float_or_half(op, x=x, dy=dy, out=out)
    problem = _make_problem(op, x.shape, w_shape, desc, layout, dtype, math)
    _check_dy(op, dy, problem)
    _check_array_shape(op, "out", out, problem.w_shape)
    _check_blend_args(op, out, beta)
    impl, algo = _resolve_algorithm(op, algo, "backward_filter", problem, is_cuda_array(x), *_policy_arg(op, policy))
    return impl.convolution_backward_filter(x, dy, problem, algo, alpha, beta, out)


def convolution_backward_bias(dy, *, layout="NCHW", alpha=1.0, beta=0.0, out=None, out_dtype=None):
    """db = alpha * (dy summed over the batch and every spatial position) + beta * out. Shape (K,).

    dy: (N, K, *out) for "NCHW" or (N, *out, K) for "NHWC", with 1 to 3 spatial dims.
    out_dtype: None (db in dy's dtype), or float32 for float16/bfloat16 dy without out: the fp32 sums as they are
    (the gradient of an autocast Linear's float32 bias, with no cast after).
    """
    if out is None and beta == 0 and type(layout) is str:
        # The usual call (every nn.Linear's bias gradient on the GPU): a shape, dtype, layout and array type seen
        # before passed every check then; its backend and problem were kept (_BIAS_PLANS).
        found = _BIAS_PLANS.get((dy.shape, dy.dtype, layout, type(dy), out_dtype))
        if found is not None:
            return found[0].convolution_backward_bias(dy, found[1], alpha, beta, None, out_dtype)
    op = "convolution_backward_bias"
    key = (dy.shape, dy.dtype, layout, type(dy), out_dtype)
    layout = normalize_layout(op, layout)
    check_same_device(op, dy=dy, out=out)
    dtype = check_float_or_half(op, dy=dy, out=out)
    if out_dtype is not None:
        if np.dtype(out_dtype) == dtype:
            out_dtype = None
        elif np.dtype(out_dtype) != np.float32 or dtype.itemsize != 2 or out is not None:
            raise ValueError(f"{op}: out_dtype={np.dtype(out_dtype)} is for a float32 db of float16/bfloat16 dy "
                             f"(without out=), got dy of {dtype}" + (" and out=" if out is not None else ""))
        else:
            out_dtype = np.dtype(np.float32)
    if dy.ndim not in (3, 4, 5):
        raise ValueError(f"{op}: dy must be 3-D, 4-D or 5-D (N, K, *spatial) or (N, *spatial, K), "
                         f"got shape {shape_str(dy.shape)}")
    shape = tuple(int(s) for s in dy.shape)
    K = shape[1] if layout == "NCHW" else shape[-1]
    out_size = shape[2:] if layout == "NCHW" else shape[1:-1]
    _check_array_shape(op, "out", out, (K,))
    _check_blend_args(op, out, beta)
    problem = ConvolutionProblem(
        x_shape=None, w_shape=None, y_shape=shape, layout=layout, dtype=str(dtype),
        spatial_dims=dy.ndim - 2, N=shape[0], C=None, K=K, groups=None, in_size=None,
        kernel_size=None, out_size=out_size, padding=None, stride=None, dilation=None)
    impl = backend("convolution", is_cuda_array(dy))
    if out is None and beta == 0 and type(key[2]) is str:
        if len(_BIAS_PLANS) >= 1024:
            _BIAS_PLANS.clear()
        _BIAS_PLANS[key] = (impl, problem)
    return impl.convolution_backward_bias(dy, problem, alpha, beta, out, out_dtype)


_BIAS_PLANS: dict = {}   # (dy's shape, dtype, layout argument, array type, out_dtype) -> (backend, problem) of a checked call


# ----------------------------------------------------------------------------------------------
# Plans: one problem described and resolved once, run many times
# ----------------------------------------------------------------------------------------------


class ConvolutionPlan:
    """One convolution problem, described once: its checked ConvolutionProblem, the backend of its
    device and, per direction, the algorithm the policy resolved (cuDNN's descriptor + chosen algo).

    For a caller that runs the same shapes again and again, as a layer does in a training loop: the
    argument checks, the problem description and the algorithm lookup run when the plan is made (and
    on the first call of each direction), and each call then costs a shape comparison and the backend
    call. `policy` is an argument (a name, or (name, workspace_limit); None: the process-wide policy
    read now), never a global swapped around a call.

        plan = ConvolutionPlan(x.shape, w.shape, desc, device="cuda", dtype="float32")
        y = plan.forward(x, w, bias); dx = plan.backward_data(w, dy); dw = plan.backward_filter(x, dy)

    algo: "auto", or one algorithm: it must apply to the forward pass (ValueError otherwise); a
    backward direction it does not apply to (winograd has no filter-gradient form) uses the policy.
    Shapes are in `layout` (x (N, C, *in) / (N, *in, C), w (K, C/groups, *k) / (K, *k, C/groups)).
    """

    def __init__(self, x_shape, w_shape, desc, *, device="cpu", dtype="float32", layout="NCHW",
                 algo="auto", policy=None, math="fp32"):
        op = "ConvolutionPlan"
        self.is_cuda = _check_device(op, device)
        self.layout = normalize_layout(op, layout)
        # Errors name the primitive the plan runs first (the forward pass), as a direct call would.
        self.problem = _make_problem("convolution_forward", x_shape, w_shape, desc, self.layout,
                                     _check_dtype(op, dtype), math)
        self.desc, self.dtype = desc, _numpy_dtype(self.problem.dtype)
        self.impl = backend("convolution", self.is_cuda)
        if policy is None:
            policy = get_convolution_policy()
        self.policy, self.workspace_limit = _policy_arg(op, policy)
        self.requested_algo = algo
        # the NHWC plan a channels-first training layer runs instead (nn.functional.convolution._tensor_core_twin):
        # None until asked, False where none applies
        self.nhwc_twin = None
        # on an NHWC plan: the channels-first plan of the same problem that a recorded backward (create_graph=True)
        # runs its ops on (nn.functional.convolution._graph_plan); None until asked
        self.graph_plan = None
        self.algos: dict = {}
        self._impls: dict = {}   # per direction: the backend, or HalfInFloat32 around it (16-bit data)
        self.algos["forward"] = self._resolve("forward", algo, strict=True)
        p = self.problem
        self.bias_problem = ConvolutionProblem(
            x_shape=None, w_shape=None, y_shape=p.y_shape, layout=p.layout, dtype=p.dtype,
            spatial_dims=p.spatial_dims, N=p.N, C=None, K=p.K, groups=None, in_size=None,
            kernel_size=None, out_size=p.out_size, padding=None, stride=None, dilation=None)

    def _resolve(self, direction, algo, strict=False):
        op = f"convolution_{direction}"
        if algo != "auto" and not strict:
            problem = (replace(self.problem, dtype="float32")
                       if _half_needs_float32(self.impl, direction, self.problem) else self.problem)
            ok, _ = (self.impl.is_supported(algo, direction, problem) if algo in self.impl.ALGORITHMS
                     else (False, ""))
            if not ok:
                algo = "auto"
        impl, chosen = _resolve_algorithm(op, algo, direction, self.problem, self.is_cuda, self.policy,
                                          self.workspace_limit)
        self._impls[direction] = impl
        return chosen

    def algorithm(self, direction) -> str:
        """The algorithm this plan runs for `direction` (resolved on first use)."""
        algo = self.algos.get(direction)
        if algo is None:
            _check_direction("ConvolutionPlan.algorithm", direction)
            algo = self.algos[direction] = self._resolve(direction, self.requested_algo)
        return algo

    def reads_channels_first(self, direction) -> bool:
        """True when this plan runs `direction` on channels-first arrays as they are: no transposes into NHWC
        (a channels-first plan on algorithms that read NHWC otherwise transposes its inputs and its result)."""
        check = getattr(self.impl, "reads_channels_first", None)
        return self.layout == "NCHW" and check is not None and check(direction, self.algorithm(direction), self.problem)

    def _check(self, op, name, a, expected):
        """The cheap per-call check: the array is what the plan was made for."""
        if a.dtype != self.dtype:
            raise TypeError(f"{op}: all arrays must have the same dtype: {name} is {a.dtype}, the plan "
                            f"(input) is {self.dtype}")
        if a.shape != expected or (not isinstance(a, np.ndarray)) != self.is_cuda:   # NumPy or CuPy (checked before)
            where = "cuda" if is_cuda_array(a) else "cpu"
            raise ValueError(f"{op}: {name} is {shape_str(a.shape)} on {where}, but the plan is for "
                             f"{shape_str(expected)} on {'cuda' if self.is_cuda else 'cpu'}")

    def forward(self, x, w, bias=None, activation=None, out=None, transformed_filter=None):
        """y = conv(x, w) + bias, shaped problem.y_shape; with an ActivationDescriptor `activation`,
        act(conv(x, w) + bias) as convolution_bias_activation_forward (a GPU ReLU in the epilogue). out: an array of
        y's shape and dtype to write (any strides: a channels-last plan may write channels-first memory through an
        (N, *spatial, K) view of it, as cuDNN's strided tensor descriptors).

        transformed_filter: a list, kept by the caller for a backward_data of the same w that will run before w
        changes (the framework's autograd node; its version check guarantees it): a GPU Winograd forward leaves its
        transformed filters there, so that a Winograd backward_data skips its own filter transform (a launch per
        layer and step; cuda/convolution.py, _winograd). Other algorithms leave it empty. Like cuDNN's reserve
        space, what is in it is the caller's to keep, not to read."""
        p = self.problem
        self._check("convolution_forward", "x", x, p.x_shape)
        self._check("convolution_forward", "w", w, p.w_shape)
        if bias is not None:
            self._check("convolution_forward", "bias", bias, (p.K,))
        if out is not None:
            self._check("convolution_forward", "out", out, p.y_shape)
        impl = self._impls["forward"]
        if activation is not None:
            return _forward_with_activation(impl, x, w, p, bias, self.algos["forward"], 1.0, 0.0, out, activation)
        if transformed_filter is not None and impl is self.impl and self.is_cuda:
            return impl.convolution_forward(x, w, p, bias, self.algos["forward"], 1.0, 0.0, out,
                                            transformed_filter=transformed_filter)
        return impl.convolution_forward(x, w, p, bias, self.algos["forward"], 1.0, 0.0, out)

    def backward_data(self, w, dy, out=None, transformed_filter=None):
        """dx, shaped problem.x_shape (written into `out` when given, as forward's); transformed_filter: the list
        the forward of this w filled (see forward), emptied here."""
        p = self.problem
        self._check("convolution_backward_data", "w", w, p.w_shape)
        self._check("convolution_backward_data", "dy", dy, p.y_shape)
        if out is not None:
            self._check("convolution_backward_data", "out", out, p.x_shape)
        algo = self.algorithm("backward_data")
        impl = self._impls["backward_data"]
        if transformed_filter and impl is self.impl and self.is_cuda:
            return impl.convolution_backward_data(w, dy, p, algo, 1.0, 0.0, out, transformed_filter=transformed_filter)
        return impl.convolution_backward_data(w, dy, p, algo, 1.0, 0.0, out)

    def backward_filter(self, x, dy):
        """dw, shaped problem.w_shape."""
        p = self.problem
        self._check("convolution_backward_filter", "x", x, p.x_shape)
        self._check("convolution_backward_filter", "dy", dy, p.y_shape)
        algo = self.algorithm("backward_filter")
        return self._impls["backward_filter"].convolution_backward_filter(x, dy, p, algo, 1.0, 0.0, None)

    def backward_bias(self, dy):
        """db (K,): dy summed over the batch and every spatial position."""
        self._check("convolution_backward_bias", "dy", dy, self.problem.y_shape)
        return self.impl.convolution_backward_bias(dy, self.bias_problem, 1.0, 0.0, None)

    def __getstate__(self):  # copy.deepcopy / pickle: the backend is a module, found again on load
        state = dict(self.__dict__)
        del state["impl"], state["_impls"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.impl = backend("convolution", self.is_cuda)
        self._impls = {}
        for direction in self.algos:   # the same backends again (HalfInFloat32 where it was one)
            self._impls[direction] = (HalfInFloat32(self.impl, self.problem)
                                      if _half_needs_float32(self.impl, direction, self.problem) else self.impl)

    def __repr__(self):
        return (f"ConvolutionPlan(x {shape_str(self.problem.x_shape)}, w {shape_str(self.problem.w_shape)}, "
                f"{self.layout}, {self.dtype}, {'cuda' if self.is_cuda else 'cpu'}, algos={self.algos})")


# ----------------------------------------------------------------------------------------------
# Finding and choosing algorithms
# ----------------------------------------------------------------------------------------------


def _check_direction(op, direction):
    if direction not in DIRECTIONS:
        raise ValueError(f"{op}: direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")


def _check_device(op, device) -> bool:
    """True for "cuda" (or "gpu"), False for "cpu"."""
    name = str(device).lower()
    if name not in ("cpu", "cuda", "gpu"):
        raise ValueError(f"{op}: device must be 'cpu' or 'cuda', got {device!r}")
    return name != "cpu"


def _heuristic_order(impl, direction, problem):
    """The backend's algorithms in preference order (unlisted ones go last).

    A backend may rank per problem (cudnnGet's idea) with `heuristic_order(direction, problem)`, as the
    GPU's does; otherwise the CPU's fixed HEURISTIC_ORDER applies."""
    if hasattr(impl, "heuristic_order"):
        preferred = impl.heuristic_order(direction, problem)
    else:
        preferred = HEURISTIC_ORDER["cpu"]
    ranked = [a for a in preferred if a in impl.ALGORITHMS]
    return ranked + [a for a in impl.ALGORITHMS if a not in ranked]


def _run_once(impl, algo, direction, problem, data):
    if direction == "forward":
        x, w, _ = data
        return impl.convolution_forward(x, w, problem, None, algo, 1.0, 0.0, None)
    if direction == "backward_data":
        _, w, dy = data
        return impl.convolution_backward_data(w, dy, problem, algo, 1.0, 0.0, None)
    x, _, dy = data
    return impl.convolution_backward_filter(x, dy, problem, algo, 1.0, 0.0, None)


def _time_ms(impl, algo, direction, problem, data, is_cuda, repeats) -> float:
    """Best of `repeats` runs after one warm-up run (which also compiles GPU kernels)."""
    _run_once(impl, algo, direction, problem, data)
    if is_cuda:
        import cupy

        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        best = math.inf
        for _ in range(repeats):
            start.record()
            _run_once(impl, algo, direction, problem, data)
            stop.record()
            stop.synchronize()
            best = min(best, cupy.cuda.get_elapsed_time(start, stop))
        return float(best)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        _run_once(impl, algo, direction, problem, data)
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def _random_data(problem, is_cuda):
    """Random x, w, dy of the problem's shapes, on the problem's device."""
    rng = np.random.default_rng(0)
    dtype = _numpy_dtype(problem.dtype)
    arrays = [rng.standard_normal(s).astype(np.float32).astype(dtype)
              for s in (problem.x_shape, problem.w_shape, problem.y_shape)]
    if is_cuda:
        import cupy

        arrays = [cupy.asarray(a) for a in arrays]
    return arrays


def _numpy_dtype(name):
    """np.dtype of a dtype name; bfloat16 comes from ml_dtypes (NumPy has none)."""
    if str(name) == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _find(impl, direction, problem, is_cuda, measure, repeats=3):
    perfs = []
    data = _random_data(problem, is_cuda) if measure else None
    for algo in _heuristic_order(impl, direction, problem):
        ok, reason = impl.is_supported(algo, direction, problem)
        math = impl.algorithm_math(algo, problem)
        if not ok:
            perfs.append(AlgorithmPerf(algo, 0, None, f"not_supported: {reason}", math))
            continue
        workspace = int(impl.workspace_bytes(algo, direction, problem))
        elapsed = _time_ms(impl, algo, direction, problem, data, is_cuda, repeats) if measure else None
        perfs.append(AlgorithmPerf(algo, workspace, elapsed, "ok", math))
    if measure:
        # Like cudnnFind: the algorithms that ran, fastest first, then those that do not apply.
        perfs.sort(key=lambda p: (p.status != "ok", p.time_ms if p.time_ms is not None else 0.0))
    else:
        perfs.sort(key=lambda p: p.status != "ok")                # stable: keeps heuristic order
    return perfs


def find_convolution_algorithms(x_shape, w_shape, desc, *, direction="forward", device="cpu",
                                dtype="float32", layout="NCHW", measure=True, math="fp32") -> list:
    """Every algorithm of the device for this problem, as AlgorithmPerf(algo, workspace_bytes,
    time_ms, status, math). With math="tf32" the tensor-core variants apply to float32 data too.

    With measure=True each applicable algorithm runs on random data of the problem's shapes (one
    warm-up, then the best of 3; CUDA events on the GPU) and the list is sorted fastest first, like
    cudnnFindConvolutionForwardAlgorithm. With measure=False nothing runs: time_ms is None and the
    list is in heuristic order. Algorithms that do not apply come last, their status saying why.
    """
    op = "find_convolution_algorithms"
    _check_direction(op, direction)
    is_cuda = _check_device(op, device)
    layout = normalize_layout(op, layout)
    problem = _make_problem(op, x_shape, w_shape, desc, layout, _check_dtype(op, dtype), math)
    return _find(backend("convolution", is_cuda), direction, problem, is_cuda, measure)


def _check_dtype(op, dtype):
    name = str(getattr(dtype, "name", dtype))
    if name in HALF_DTYPES:
        return name
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{op}: dtype must be float32, float64, float16 or bfloat16, got {dt}")
    return dt


# The global policy used by algo="auto", and the cache of measured choices for prefer_fastest.
# One tuple, replaced whole, so that a reader in another thread never sees half of an update.
process_policy = ("heuristic", None)   # read by nn.functional.convolution as part of a layer's plan key
_cache: dict = {}               # (device, direction, problem) -> list[AlgorithmPerf], fastest first
_cache_lock = threading.Lock()


def _check_policy(op, policy, workspace_limit):
    if policy not in POLICIES:
        raise ValueError(f"{op}: unknown policy {policy!r}; use one of {', '.join(POLICIES)}")
    if workspace_limit is not None and (not _is_int(workspace_limit) or workspace_limit < 0):
        raise ValueError(f"{op}: workspace_limit must be an int >= 0 (bytes) or None, got {workspace_limit!r}")
    if policy == "workspace_limit" and workspace_limit is None:
        raise ValueError(f"{op}: policy 'workspace_limit' needs workspace_limit= (bytes)")


def set_convolution_policy(policy: str, workspace_limit: int | None = None) -> None:
    """Set the process-wide policy used by algo="auto" (see the module docstring for the policies).

    workspace_limit (bytes) is required by "workspace_limit" and also bounds "prefer_fastest".
    """
    global process_policy
    _check_policy("set_convolution_policy", policy, workspace_limit)
    process_policy = (policy, workspace_limit)


def get_convolution_policy() -> tuple:
    """(policy, workspace_limit) currently used by algo="auto"."""
    return process_policy


@contextlib.contextmanager
def convolution_policy(policy: str, workspace_limit: int | None = None):
    """Use another policy inside a `with` block, then restore the previous one."""
    previous = get_convolution_policy()
    set_convolution_policy(policy, workspace_limit)
    try:
        yield
    finally:
        set_convolution_policy(*previous)


def clear_convolution_algorithm_cache() -> None:
    """Forget every algorithm measured by prefer_fastest (the next call of each shape re-measures)."""
    with _cache_lock:
        _cache.clear()


def _select(impl, device_key, direction, problem, policy, workspace_limit) -> str:
    """The algorithm the policy picks for this problem (policy None: the global setting)."""
    op = "get_convolution_algorithm"
    if policy is None:
        policy, workspace_limit = get_convolution_policy()
    is_cuda = device_key != "cpu"

    def fits(perf):
        return perf.status == "ok" and (workspace_limit is None or perf.workspace_bytes <= workspace_limit)

    if policy == "prefer_fastest":
        key = (device_key, direction, problem)
        # Measure under the lock: threads asking for the same new shape wait for one measurement
        # instead of all measuring at once (and timing each other).
        with _cache_lock:
            perfs = _cache.get(key)
            if perfs is None:
                if is_cuda:
                    _check_not_capturing(direction, problem)
                perfs = _find(impl, direction, problem, is_cuda, measure=True)
                _cache[key] = perfs
    else:
        perfs = _find(impl, direction, problem, is_cuda, measure=False)
        if policy == "no_workspace":
            workspace_limit = 0
        elif policy == "deterministic":
            # A backend may list its nondeterministic (algo, direction) pairs, e.g. GPU kernels that
            # accumulate with atomicAdd; every CPU algorithm is deterministic.
            nondeterministic = getattr(impl, "NONDETERMINISTIC", ())
            perfs = [p for p in perfs if (p.algo, direction) not in nondeterministic]
    for perf in perfs:
        if fits(perf):
            return perf.algo
    tried = "; ".join(f"{p.algo}: {p.status}, {p.workspace_bytes} bytes" for p in perfs)
    raise ValueError(f"{op}: no {direction} algorithm fits policy {policy!r} "
                     f"(workspace_limit={workspace_limit}) for input {shape_str(problem.x_shape)}, "
                     f"weight {shape_str(problem.w_shape)}: {tried}")


def _check_not_capturing(direction, problem):
    """An algorithm search runs and times every algorithm: host work a CUDA graph cannot replay."""
    import cupy

    if cupy.cuda.get_current_stream().is_capturing():
        raise RuntimeError(
            f"convolution algorithm search ({direction}, input {shape_str(problem.x_shape)}, weight "
            f"{shape_str(problem.w_shape)}) cannot run inside a CUDA graph capture: policy "
            "'prefer_fastest' (backends.cudnn.benchmark=True) measures a new shape on first use. Run the "
            "step eagerly once with these shapes before capturing (warm-up), or use the heuristic policy")


def _policy_arg(op, policy):
    """(policy, workspace_limit) for _select: a policy name (or None: the process-wide setting) or a
    (policy, workspace_limit) pair. A bare "prefer_fastest" keeps the process-wide workspace_limit."""
    if policy is None:
        return None, None
    if isinstance(policy, tuple):
        name, limit = policy
    else:
        name, limit = policy, None
        if name == "prefer_fastest":
            limit = process_policy[1]
    _check_policy(op, name, limit)
    return name, limit


def get_convolution_algorithm(x_shape, w_shape, desc, *, direction="forward", device="cpu",
                              dtype="float32", layout="NCHW", policy=None, workspace_limit=None,
                              math="fp32") -> str:
    """The algorithm `policy` picks for this problem (policy None: the global one, see
    set_convolution_policy). Raises ValueError when no algorithm qualifies. For 16-bit data that no
    algorithm takes, the fp32 algorithm HalfInFloat32 will run (find_convolution_algorithms still
    lists the algorithms for the data's own dtype, each with why it does not apply)."""
    op = "get_convolution_algorithm"
    _check_direction(op, direction)
    is_cuda = _check_device(op, device)
    layout = normalize_layout(op, layout)
    if policy is not None:
        _check_policy(op, policy, workspace_limit)
    problem = _make_problem(op, x_shape, w_shape, desc, layout, _check_dtype(op, dtype), math)
    impl = backend("convolution", is_cuda)
    if _half_needs_float32(impl, direction, problem):   # what convolution_forward & co. will run (HalfInFloat32)
        problem = replace(problem, dtype="float32")
    return _select(impl, _device_key(is_cuda), direction, problem, policy, workspace_limit)
