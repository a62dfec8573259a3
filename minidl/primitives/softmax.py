"""Softmax and log-softmax over one axis, forward and backward (cuDNN's cudnnSoftmaxForward/Backward).

    accurate:  y_i = exp(x_i - m) / sum_j exp(x_j - m),     m = max_j x_j
    log:       y_i = x_i - m - log(sum_j exp(x_j - m))

Subtracting the maximum changes nothing mathematically but keeps every exponent <= 0, so exp never
overflows ("accurate" in cuDNN's naming). The backward pass needs only the output y:
    accurate:  dx = y * (dy - sum_j dy_j y_j)
    log:       dx = dy - exp(y) * sum_j dy_j
cross_entropy_forward / _backward fuse log-softmax over the classes with the negative log-likelihood at
class indices (PyTorch's cross_entropy; cuDNN has no such primitive, but every classifier ends with it):
    loss_m = -((1 - eps) w_t log p_mt + eps / C sum_c w_c log p_mc),   dx_mc = (sum_c q_mc) p_mc - q_mc
one pass over the logits forward, one backward, nothing saved but two numbers per row (max, log-sum-exp).
The axis defaults to 1, the channels of an NCHW array (cuDNN's CUDNN_SOFTMAX_MODE_CHANNEL); pass
axis=-1 for the classes of an (N, classes) array or the channels of an NHWC array.
"""
from __future__ import annotations

import numpy as np

from .._dtypes import HALF_DTYPES, float32
from ._common import (
    FLOAT_DTYPES, backend, check_arrays, check_blend_out, check_float, check_float_or_half, check_same_device,
    computes_half_in_float32, is_cuda_array, shape_str,
)

__all__ = ["softmax_forward", "softmax_backward", "cross_entropy_forward", "cross_entropy_backward",
           "SOFTMAX_ALGORITHMS"]

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


def _check_cross_entropy(op, x, target, weight, reduction, **more):
    if {type(a) is np.ndarray for a in (x, target, weight, *more.values()) if a is not None} != {True}:
        check_same_device(op, x=x, target=target, weight=weight, **more)   # not all NumPy arrays: look closer
    if x.dtype not in FLOAT_DTYPES or (weight is not None and weight.dtype != x.dtype):
        check_float_or_half(op, x=x, weight=weight)
    if x.ndim < 2:
        raise ValueError(f"{op}: x must be (N, C) or (N, C, d1, ...), got shape {shape_str(x.shape)}")
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices, got dtype {target.dtype}")
    if target.shape != x.shape[:1] + x.shape[2:]:
        raise ValueError(f"{op}: x {shape_str(x.shape)} expects a target of shape "
                         f"{shape_str(x.shape[:1] + x.shape[2:])}, got {shape_str(target.shape)}")
    if weight is not None and weight.shape != (x.shape[1],):
        raise ValueError(f"{op}: weight has shape {shape_str(weight.shape)}, expected ({x.shape[1]},)")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy_forward(x, target, weight=None, *, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                          loss_dtype=None):
    """Cross-entropy of logits x (N, C, d1, ...) at class indices target (N, d1, ...).

    Returns (loss, stats, denom): the loss (0-d for "mean" / "sum", the target's shape for "none"), each
    row's (max, log sum exp(x - max)) as an (N * d1 * ..., 2) array (the backward's only saved array: log p =
    (x - max) - log-sum, in PyTorch's order) and the mean's denominator (0-d: the summed weights of the rows
    whose index is not ignore_index). A row whose index is out of range gets a NaN loss (the caller checks
    indices where it can afford to: the GPU would have to stop). float16 / bfloat16 logits are computed in
    float32 (on the GPU the kernels read them as they are); the loss is rounded once to `loss_dtype` (default: x's
    dtype; float32 is what autocast's cross_entropy returns); stats and denom stay float32."""
    op = "cross_entropy_forward"
    _check_cross_entropy(op, x, target, weight, reduction)
    if x.dtype in HALF_DTYPES:
        if is_cuda_array(x):
            loss, stats, denom = backend("softmax", x).cross_entropy_forward(
                x, target, weight, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
        else:
            loss, stats, denom = cross_entropy_forward(
                x.astype(float32), target, None if weight is None else weight.astype(float32), reduction=reduction,
                ignore_index=ignore_index, label_smoothing=label_smoothing)
        return loss.astype(loss_dtype if loss_dtype is not None else x.dtype), stats, denom
    loss, stats, denom = backend("softmax", x).cross_entropy_forward(
        x, target, weight, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
    return (loss if loss_dtype is None else loss.astype(loss_dtype)), stats, denom


def cross_entropy_backward(x, target, stats, dloss, denom, weight=None, *, reduction="mean", ignore_index=-100,
                           label_smoothing=0.0):
    """dx (x's shape and dtype) from cross_entropy_forward's stats and denom and the loss's gradient dloss."""
    op = "cross_entropy_backward"
    _check_cross_entropy(op, x, target, weight, reduction, stats=stats, dloss=dloss, denom=denom)
    if x.dtype in HALF_DTYPES:
        if is_cuda_array(x):   # the kernels write the 16-bit gradient directly (rounded once)
            return backend("softmax", x).cross_entropy_backward(
                x, target, stats, dloss, denom, weight, reduction=reduction, ignore_index=ignore_index,
                label_smoothing=label_smoothing)
        dx = cross_entropy_backward(
            x.astype(float32), target, stats, dloss.astype(float32), denom,
            None if weight is None else weight.astype(float32), reduction=reduction, ignore_index=ignore_index,
            label_smoothing=label_smoothing)
        return dx.astype(x.dtype)
    return backend("softmax", x).cross_entropy_backward(x, target, stats, dloss, denom, weight, reduction=reduction,
                                                        ignore_index=ignore_index, label_smoothing=label_smoothing)
