"""Softmax and log-softmax over one axis, forward and backward (cuDNN's cudnnSoftmaxForward/Backward).

    accurate:  y_i = exp(x_i - m) / sum_j exp(x_j - m),     m = max_j x_j
    log:       y_i = x_i - m - log(sum_j exp(x_j - m))

Subtracting the maximum changes nothing mathematically but keeps every exponent <= 0, so exp never
overflows ("accurate" in cuDNN's naming). The backward pass needs only the output y:
    accurate:  dx = y * (dy - sum_j dy_j y_j)
    log:       dx = dy - exp(y) * sum_j dy_j
The axis defaults to 1, the channels of an NCHW array (cuDNN's CUDNN_SOFTMAX_MODE_CHANNEL); pass
axis=-1 for the classes of an (N, classes) array or the channels of an NHWC array.
"""
from __future__ import annotations

from ._common import (
    backend, check_arrays, check_blend_out, check_float, check_same_device, computes_half_in_float32, is_cuda_array,
    shape_str,
)

__all__ = ["softmax_forward", "softmax_backward", "SOFTMAX_ALGORITHMS"]

SOFTMAX_ALGORITHMS = ("accurate", "log")


def _check_args(op: str, a, axis, algorithm) -> int:
    """Validate algorithm and axis; return the axis as a non-negative int."""
    check_arrays(op, x=a)
    if algorithm not in SOFTMAX_ALGORITHMS:
        raise ValueError(f"{op}: unknown algorithm {algorithm!r}; use 'accurate' or 'log'")
    if a.ndim < 1:
        raise ValueError(f"{op}: input must have at least 1 dimension, got shape {shape_str(a.shape)}")
    if not isinstance(axis, int) or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"{op}: axis {axis!r} is out of range for an input of shape {shape_str(a.shape)}")
    return axis % a.ndim


@computes_half_in_float32()
def softmax_forward(x, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    """Softmax (algorithm="accurate") or log-softmax ("log") of x along `axis`. y has x's shape."""
    op = "softmax_forward"
    axis = _check_args(op, x, axis, algorithm)
    check_same_device(op, x=x, out=out)
    dtype = check_float(op, x=x)
    check_blend_out(op, out, x.shape, dtype, beta)
    return backend("softmax", x).softmax_forward(x, axis=axis, algorithm=algorithm, alpha=alpha, beta=beta, out=out)


@computes_half_in_float32()
def softmax_backward(y, dy, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    """dx from the forward output y and the gradient dy (all of one shape), along `axis`."""
    op = "softmax_backward"
    axis = _check_args(op, y, axis, algorithm)
    check_same_device(op, y=y, dy=dy, out=out)
    dtype = check_float(op, y=y, dy=dy)
    if tuple(y.shape) != tuple(dy.shape):
        raise ValueError(f"{op}: y {shape_str(y.shape)} and dy {shape_str(dy.shape)} must have the same shape")
    check_blend_out(op, out, y.shape, dtype, beta)
    return backend("softmax", y).softmax_backward(y, dy, axis=axis, algorithm=algorithm, alpha=alpha, beta=beta, out=out)
