"""Pointwise activation functions, forward and backward (cuDNN's cudnnActivationForward/Backward).

An activation is applied element by element, so the forward pass is one elementwise map
y = f(x) and the backward pass is dx = dy * f'(x). The derivative can often be written with the
output y instead of x (sigmoid: y(1 - y), tanh: 1 - y^2), which saves recomputing an exponential;
the backward therefore receives x, y and dy, as in cuDNN, and each mode reads what is cheapest.

Modes (coef is the mode's one parameter, as cuDNN's `coef`):
    relu          max(x, 0)
    leaky_relu    x if x > 0 else coef * x            (coef = negative slope, default 0.01)
    elu           x if x > 0 else coef * (exp(x) - 1) (coef = alpha, default 1.0)
    clipped_relu  min(max(x, 0), coef)                (coef = ceiling, default 6.0: ReLU6)
    sigmoid       1 / (1 + exp(-x))
    tanh          tanh(x)
    gelu          x * Phi(x), Phi the standard normal CDF (erf form, PyTorch's default)
    gelu_tanh     0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (PyTorch's approximate="tanh")

Fused with the residual add of a ResNet block (one pass and one launch instead of two):
    add_relu_forward(a, b) -> y = max(a + b, 0)
    add_relu_backward(y, dy) -> the gradient of a and of b: dy where y > 0
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._dtypes import HALF_DTYPES, is_half
from ._common import (
    FLOAT_DTYPES, _CUDA_TYPES, backend, check_blend_out, check_float, check_float_or_half, check_same_device,
    computes_half_in_float32, is_cuda_array, shape_str,
)

__all__ = ["ActivationDescriptor", "activation_forward", "activation_backward", "ACTIVATION_MODES", "add_relu_forward",
           "add_relu_backward"]

_GPU_DTYPES = frozenset((*FLOAT_DTYPES, *HALF_DTYPES))   # what the GPU's activation kernels take as it is

# mode -> default coef (None: the mode has no parameter)
ACTIVATION_MODES = {
    "relu": None,
    "leaky_relu": 0.01,
    "elu": 1.0,
    "clipped_relu": 6.0,
    "sigmoid": None,
    "tanh": None,
    "gelu": None,
    "gelu_tanh": None,
}


@dataclass(frozen=True)
class ActivationDescriptor:
    """Which activation, and its parameter. Frozen (hashable) so it can key kernel caches.

    coef=None takes the mode's default (see ACTIVATION_MODES); modes without a parameter store 0.0.
    """

    mode: str = "relu"
    coef: float | None = None

    def __post_init__(self):
        if self.mode not in ACTIVATION_MODES:
            raise ValueError(
                f"ActivationDescriptor: unknown mode {self.mode!r}; choose one of {sorted(ACTIVATION_MODES)}"
            )
        default = ACTIVATION_MODES[self.mode]
        coef = self.coef if self.coef is not None else (default if default is not None else 0.0)
        coef = float(coef)
        if self.mode == "clipped_relu" and not coef > 0:
            raise ValueError(f"ActivationDescriptor: clipped_relu needs a ceiling coef > 0, got {coef}")
        if self.mode == "elu" and coef < 0:
            raise ValueError(f"ActivationDescriptor: elu needs alpha coef >= 0, got {coef}")
        object.__setattr__(self, "coef", coef)


def _check_descriptor(op: str, desc) -> None:
    if not isinstance(desc, ActivationDescriptor):
        raise TypeError(f"{op}: desc must be an ActivationDescriptor, got {type(desc).__name__}")


def _half_on_gpu(a, alpha, beta, out) -> bool:
    """16-bit data on the GPU with no blending: the kernels' _half forms run it in place; anything else with
    16-bit data computes on float32 copies (computes_half_in_float32) and rounds once -- the same values."""
    return is_half(a.dtype) and is_cuda_array(a) and alpha == 1.0 and beta == 0.0 and out is None


@computes_half_in_float32()
def _forward(x, desc, *, alpha=1.0, beta=0.0, out=None):
    op = "activation_forward"
    dtype = check_float(op, x=x)
    check_blend_out(op, out, x.shape, dtype, beta)
    return backend("activation", x).activation_forward(x, desc, alpha=alpha, beta=beta, out=out)


def _usual(*arrays) -> bool:
    """Whether the arrays are the usual call's (issue 23: every ReLU of a network, every step), decided in a few
    comparisons: one array type, one shape and one float dtype a backend takes as it is (NumPy: float32 / float64;
    CuPy: those and float16 / bfloat16, which the GPU's kernels take natively). Anything else goes through the checks,
    which raise naming the op, and the half-precision wrapper."""
    first = arrays[0]
    kind, shape, dtype = type(first), first.shape, first.dtype
    for a in arrays[1:]:
        if type(a) is not kind or a.shape != shape or a.dtype != dtype:
            return False
    return (dtype in FLOAT_DTYPES) if kind is np.ndarray else (kind in _CUDA_TYPES and dtype in _GPU_DTYPES)


def activation_forward(x, desc: ActivationDescriptor, *, alpha=1.0, beta=0.0, out=None):
    """y = alpha * f(x) + beta * out, elementwise. x: any shape; y: the same shape."""
    if out is None and alpha == 1.0 and beta == 0.0 and type(desc) is ActivationDescriptor and _usual(x):
        return backend("activation", type(x) is not np.ndarray).activation_forward(x, desc)
    op = "activation_forward"
    _check_descriptor(op, desc)
    check_same_device(op, x=x, out=out)
    if hasattr(x, "dtype") and _half_on_gpu(x, alpha, beta, out):
        check_float_or_half(op, x=x)
        return backend("activation", x).activation_forward(x, desc)
    return _forward(x, desc, alpha=alpha, beta=beta, out=out)


@computes_half_in_float32()
def _backward(x, y, dy, desc, *, alpha=1.0, beta=0.0, out=None):
    op = "activation_backward"
    dtype = check_float(op, x=x, y=y, dy=dy)
    check_blend_out(op, out, x.shape, dtype, beta)
    return backend("activation", x).activation_backward(x, y, dy, desc, alpha=alpha, beta=beta, out=out)


def activation_backward(x, y, dy, desc: ActivationDescriptor, *, alpha=1.0, beta=0.0, out=None):
    """dx = alpha * dy * f'(x) + beta * out. x, y (= f(x)), dy, dx: all the same shape."""
    if (out is None and alpha == 1.0 and beta == 0.0 and type(desc) is ActivationDescriptor and x is not None
            and y is not None and dy is not None and _usual(x, y, dy)):
        return backend("activation", type(x) is not np.ndarray).activation_backward(x, y, dy, desc)
    op = "activation_backward"
    _check_descriptor(op, desc)
    if x is None or y is None or dy is None:
        raise ValueError(f"{op}: x, y and dy are all required (each mode reads the cheaper of x and y)")
    check_same_device(op, x=x, y=y, dy=dy, out=out)
    if not (tuple(x.shape) == tuple(y.shape) == tuple(dy.shape)):
        raise ValueError(
            f"{op}: x {shape_str(x.shape)}, y {shape_str(y.shape)} and dy {shape_str(dy.shape)} "
            "must have the same shape"
        )
    if hasattr(dy, "dtype") and _half_on_gpu(dy, alpha, beta, out) and x.dtype == y.dtype == dy.dtype:
        check_float_or_half(op, x=x, y=y, dy=dy)
        return backend("activation", x).activation_backward(x, y, dy, desc)
    return _backward(x, y, dy, desc, alpha=alpha, beta=beta, out=out)


def _check_pair(op, **two):
    """Two float arrays of one shape (no broadcasting) on one device."""
    (na, a), (nb, b) = two.items()
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"{op}: {na} has shape {shape_str(a.shape)} but {nb} has shape {shape_str(b.shape)} "
                         "(no broadcasting)")
    check_same_device(op, **two)
    check_float(op, **two)


@computes_half_in_float32()
def add_relu_forward(a, b):
    """y = max(a + b, 0), elementwise; a, b, y of one shape (the residual add and ReLU of a ResNet block)."""
    _check_pair("add_relu_forward", a=a, b=b)
    return backend("activation", a).add_relu_forward(a, b)


@computes_half_in_float32()
def add_relu_backward(y, dy):
    """The gradient of both inputs of add_relu_forward: dy where y > 0, else 0; y, dy of one shape."""
    _check_pair("add_relu_backward", y=y, dy=dy)
    return backend("activation", y).add_relu_backward(y, dy)
