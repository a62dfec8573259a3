"""Batch normalization (Ioffe & Szegedy, 2015), forward (training and inference) and backward.

Training normalises with the statistics of the batch, then scales and shifts:
    mean = E[x],  var = E[(x - mean)^2]   (biased: divide by n)   over the reduced elements
    x_hat = (x - mean) * invstd,  invstd = 1 / sqrt(var + eps)
    y = gamma * x_hat + beta_
and keeps running statistics for inference, updated in place as PyTorch does:
    running_mean = (1 - momentum) * running_mean + momentum * mean
    running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)   (unbiased)
Inference uses the running statistics instead of the batch's.

Which elements share one statistic (cuDNN's modes):
    spatial         one per channel, over N and every spatial position; parameters of shape (C,)
                    (PyTorch's BatchNorm1d/2d/3d). The channel axis is 1 (NCHW) or last (NHWC).
    per_activation  one per feature, over N only; parameters of shape x.shape[1:] (an (N, F)
                    input, or one statistic per (C, H, W) element).

The backward pass (with m = mean over the reduced elements) is
    dbeta = sum(dy),  dgamma = sum(dy * x_hat)
    dx = gamma * invstd * (dy - m(dy) - x_hat * m(dy * x_hat))
gamma/beta_ may be None (PyTorch's affine=False): gamma acts as 1 and beta_ as 0, and the backward
returns None for dgamma and dbeta. running_mean/running_var may be None in training
(track_running_stats=False).

Fused with a ReLU (one kernel family, fewer launches and passes; results equal BN then ReLU):
    batch_norm_relu_forward_training / _inference -> max(y, 0)
    batch_norm_relu_backward(x, dy, gamma, beta_, saved_mean, saved_invstd) recomputes the BN
    output from x and masks dy where it is <= 0 (so it needs beta_ too).

Unlike the other families, these calls take no alpha/beta blending arguments: `beta_` is the shift
parameter, and the training pass returns three arrays.

16-bit data (float16, bfloat16; autocast's convolution outputs): on the GPU the kernels read and write x, y, dy
and dx in their own dtype, with float32 parameters and statistics (cuDNN's mixed-precision batch norm); the CPU,
and 16-bit parameters, compute on float32 copies (computes_half_in_float32). The values are the same: every
kernel computes in fp32 and rounds its output once.
"""
from __future__ import annotations

import numpy as np

from ._common import (
    Checked,
    backend, check_arrays, check_float_or_half, check_same_device, computes_half_in_float32, gpu_half_data,
    normalize_layout, shape_str,
)

__all__ = [
    "batch_norm_relu_forward_training",
    "batch_norm_relu_forward_inference",
    "batch_norm_relu_backward",
    "batch_norm_forward_training",
    "batch_norm_forward_inference",
    "batch_norm_backward",
    "batch_norm_param_shape",
    "BATCH_NORM_MODES",
]

BATCH_NORM_MODES = ("spatial", "per_activation")


def batch_norm_param_shape(x_shape, mode: str = "spatial", layout: str = "NCHW") -> tuple:
    """Shape of gamma, beta_, the running and the saved statistics for an input of x_shape."""
    if mode == "per_activation":
        return tuple(int(s) for s in x_shape[1:])
    channel_axis = 1 if normalize_layout("batch_norm_param_shape", layout) == "NCHW" else len(x_shape) - 1
    return (int(x_shape[channel_axis]),)


def _reduced_count(x_shape, mode: str, layout: str) -> int:
    """How many elements share one statistic: the size of x over the size of one parameter array."""
    total = 1
    for s in x_shape:
        total *= int(s)
    per_statistic = 1
    for s in batch_norm_param_shape(x_shape, mode, layout):
        per_statistic *= s
    return total // max(per_statistic, 1)


def _check_common(op: str, x, mode: str, layout: str, params: dict) -> tuple:
    """Mode, rank and parameter shapes; returns the parameter shape."""
    if mode not in BATCH_NORM_MODES:
        raise ValueError(f"{op}: unknown mode {mode!r}; use 'spatial' or 'per_activation'")
    if x.ndim < 2:
        raise ValueError(f"{op}: x must have at least 2 dims (N, C, ...), got shape {shape_str(x.shape)}")
    expected = batch_norm_param_shape(x.shape, mode, layout)
    for name, p in params.items():
        if p is not None and tuple(p.shape) != expected:
            raise ValueError(
                f"{op}: {name} has shape {shape_str(p.shape)}, but x {shape_str(x.shape)} "
                f"({layout}, mode={mode}) needs {shape_str(expected)}"
            )
    return expected


@computes_half_in_float32(out_dtypes=("x", None, None), inplace=("running_mean", "running_var"), mixed_dtypes=True,
                          native=gpu_half_data(1))
def batch_norm_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                mode="spatial", layout="NCHW", num_batches_tracked=None):
    """Normalise with batch statistics. Returns (y, saved_mean, saved_invstd).

    x, y: (N, C, *spatial) or (N, *spatial, C). gamma, beta_, running_mean, running_var,
    saved_mean, saved_invstd: batch_norm_param_shape(x.shape, mode, layout). The running statistics
    are updated in place (skipped when None). num_batches_tracked: a 0-d int64 array (a framework layer's
    counter) incremented in place by one, on the GPU by the statistics' finalize (no launch of its own).
    """
    return _forward_training("batch_norm_forward_training", x, gamma, beta_, running_mean, running_var, momentum,
                             eps, mode, layout, num_batches_tracked)


@computes_half_in_float32(out_dtypes=("x", None, None), inplace=("running_mean", "running_var"), mixed_dtypes=True,
                          native=gpu_half_data(1))
def batch_norm_relu_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                     mode="spatial", layout="NCHW", num_batches_tracked=None):
    """max(batch_norm_forward_training(...)[0], 0) in the same kernels. Returns (y, saved_mean, saved_invstd)."""
    return _forward_training("batch_norm_relu_forward_training", x, gamma, beta_, running_mean, running_var,
                             momentum, eps, mode, layout, num_batches_tracked)


# The argument signatures whose checks passed (issue 23: a layer calls with the same ones every step), with the
# layout they normalised to: their later calls go straight to the backend.
_training_checked, _backward_checked = Checked(), Checked()


def _forward_training(op, x, gamma, beta_, running_mean, running_var, momentum, eps, mode, layout,
                      num_batches_tracked=None):
    key = Checked.key((x, gamma, beta_, running_mean, running_var, num_batches_tracked), op, momentum, eps, mode,
                      layout)
    layout = _training_checked.value(key, lambda: _check_training(
        op, x, gamma, beta_, running_mean, running_var, momentum, eps, mode, layout, num_batches_tracked))
    return getattr(backend("batch_norm", x), op)(
        x, gamma, beta_, running_mean, running_var, momentum=float(momentum), eps=float(eps), mode=mode, layout=layout,
        num_batches_tracked=num_batches_tracked)


def _check_training(op, x, gamma, beta_, running_mean, running_var, momentum, eps, mode, layout, num_batches_tracked):
    """The training forward's checks (raising naming the op); returns the normalised layout."""
    check_arrays(op, x=x, gamma=gamma, beta_=beta_, running_mean=running_mean, running_var=running_var)
    layout = normalize_layout(op, layout)
    arrays = dict(gamma=gamma, beta_=beta_, running_mean=running_mean, running_var=running_var)
    _check_common(op, x, mode, layout, arrays)
    check_same_device(op, x=x, **arrays)
    check_float_or_half(op, half_with_float32=True, x=x, **arrays)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: pass both running_mean and running_var, or neither")
    if not 0.0 <= float(momentum) <= 1.0:
        raise ValueError(f"{op}: momentum must be in [0, 1], got {momentum}")
    if not float(eps) > 0:
        raise ValueError(f"{op}: eps must be > 0, got {eps}")
    if _reduced_count(x.shape, mode, layout) < 2:
        raise ValueError(
            f"{op}: x {shape_str(x.shape)} has only one value per statistic (mode={mode}); "
            "training needs more than one to estimate a variance"
        )
    if num_batches_tracked is not None:
        check_same_device(op, x=x, num_batches_tracked=num_batches_tracked)
        if num_batches_tracked.dtype != np.int64 or num_batches_tracked.shape != ():
            raise TypeError(f"{op}: num_batches_tracked must be a 0-d int64 array (a layer's counter), got "
                            f"{num_batches_tracked.dtype} of shape {shape_str(num_batches_tracked.shape)}")
    return layout


@computes_half_in_float32(mixed_dtypes=True, native=gpu_half_data(1))
def batch_norm_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                 layout="NCHW"):
    """y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta_, elementwise per statistic."""
    return _forward_inference("batch_norm_forward_inference", x, gamma, beta_, running_mean, running_var, eps, mode,
                              layout)


@computes_half_in_float32(mixed_dtypes=True, native=gpu_half_data(1))
def batch_norm_relu_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                      layout="NCHW"):
    """max(batch_norm_forward_inference(...), 0) in one elementwise pass."""
    return _forward_inference("batch_norm_relu_forward_inference", x, gamma, beta_, running_mean, running_var, eps,
                              mode, layout)


def _forward_inference(op, x, gamma, beta_, running_mean, running_var, eps, mode, layout):
    check_arrays(op, x=x, gamma=gamma, beta_=beta_, running_mean=running_mean, running_var=running_var)
    layout = normalize_layout(op, layout)
    arrays = dict(gamma=gamma, beta_=beta_, running_mean=running_mean, running_var=running_var)
    _check_common(op, x, mode, layout, arrays)
    if running_mean is None or running_var is None:
        raise ValueError(f"{op}: inference needs running_mean and running_var (without them, normalise "
                         "with the batch statistics: batch_norm_forward_training)")
    check_same_device(op, x=x, **arrays)
    check_float_or_half(op, half_with_float32=True, x=x, **arrays)
    if not float(eps) > 0:
        raise ValueError(f"{op}: eps must be > 0, got {eps}")
    return getattr(backend("batch_norm", x), op)(
        x, gamma, beta_, running_mean, running_var, eps=float(eps), mode=mode, layout=layout
    )


@computes_half_in_float32(out_dtypes=("x", "gamma", "gamma"), mixed_dtypes=True, native=gpu_half_data(2))
def batch_norm_backward(x, dy, gamma, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    """(dx, dgamma, dbeta) of the training pass, from the saved batch statistics.

    dx has x's shape; dgamma and dbeta have the parameter shape, or are None when gamma is None.
    """
    return _backward("batch_norm_backward", x, dy, gamma, None, saved_mean, saved_invstd, mode, layout)


@computes_half_in_float32(out_dtypes=("x", "gamma", "gamma"), mixed_dtypes=True, native=gpu_half_data(2))
def batch_norm_relu_backward(x, dy, gamma, beta_, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    """(dx, dgamma, dbeta) of y = max(BN(x), 0), from the saved statistics: dy counts where the BN output
    (recomputed from x, gamma, beta_) is > 0. dy has the output's shape; beta_ may be None (affine=False)."""
    return _backward("batch_norm_relu_backward", x, dy, gamma, beta_, saved_mean, saved_invstd, mode, layout)


def _backward(op, x, dy, gamma, beta_, saved_mean, saved_invstd, mode, layout):
    key = Checked.key((x, dy, gamma, beta_, saved_mean, saved_invstd), op, mode, layout)
    layout = _backward_checked.value(key, lambda: _check_backward(op, x, dy, gamma, beta_, saved_mean, saved_invstd,
                                                                   mode, layout))
    if op == "batch_norm_relu_backward":
        return backend("batch_norm", x).batch_norm_relu_backward(x, dy, gamma, beta_, saved_mean, saved_invstd, mode=mode,
                                                    layout=layout)
    return backend("batch_norm", x).batch_norm_backward(x, dy, gamma, saved_mean, saved_invstd, mode=mode, layout=layout)


def _check_backward(op, x, dy, gamma, beta_, saved_mean, saved_invstd, mode, layout):
    """The backward's checks (raising naming the op); returns the normalised layout."""
    check_arrays(op, x=x, dy=dy, gamma=gamma, saved_mean=saved_mean, saved_invstd=saved_invstd)
    layout = normalize_layout(op, layout)
    if saved_mean is None or saved_invstd is None:
        raise ValueError(f"{op}: saved_mean and saved_invstd (from batch_norm_forward_training) are required")
    arrays = dict(gamma=gamma, saved_mean=saved_mean, saved_invstd=saved_invstd)
    if beta_ is not None:
        arrays["beta_"] = beta_
    _check_common(op, x, mode, layout, arrays)
    if tuple(dy.shape) != tuple(x.shape):
        raise ValueError(f"{op}: dy has shape {shape_str(dy.shape)}, but x has shape {shape_str(x.shape)}")
    check_same_device(op, x=x, dy=dy, **arrays)
    check_float_or_half(op, half_with_float32=True, x=x, dy=dy, **arrays)
    return layout
