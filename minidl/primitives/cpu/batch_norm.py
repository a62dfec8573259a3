"""NumPy reference of batch normalization (formulas in minidl/primitives/batch_norm.py).

The statistics are reductions over every axis except the parameter axes; parameters are reshaped
so that they broadcast against x (e.g. (C,) -> (1, C, 1, 1) for spatial NCHW).
"""
from __future__ import annotations

import numpy as np


def _axes(x_ndim: int, mode: str, layout: str):
    """(axes reduced for one statistic, shape that broadcasts a parameter against x)."""
    if mode == "per_activation":
        return (0,), None  # parameters of shape x.shape[1:] already broadcast
    channel_axis = 1 if layout == "NCHW" else x_ndim - 1
    axes = tuple(a for a in range(x_ndim) if a != channel_axis)
    shape = [1] * x_ndim
    shape[channel_axis] = -1
    return axes, tuple(shape)


def _bcast(p, shape):
    return p if (p is None or shape is None) else p.reshape(shape)


def batch_norm_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                mode="spatial", layout="NCHW"):
    axes, shape = _axes(x.ndim, mode, layout)
    mean = x.mean(axis=axes)
    n = x.size // mean.size  # elements per statistic
    centered = x - _bcast(mean, shape)
    var = np.mean(centered * centered, axis=axes)  # biased: normalise with the batch's own spread
    invstd = (1.0 / np.sqrt(var + x.dtype.type(eps))).astype(x.dtype)
    y = centered * _bcast(invstd, shape)
    if gamma is not None:
        y = y * _bcast(gamma, shape)
    if beta_ is not None:
        y = y + _bcast(beta_, shape)
    if running_mean is not None:
        m = x.dtype.type(momentum)
        # The running variance estimates the population's: unbiased, n / (n - 1) (as PyTorch).
        unbiased = var * x.dtype.type(n / (n - 1))
        running_mean[...] = (1 - m) * running_mean + m * mean
        running_var[...] = (1 - m) * running_var + m * unbiased
    return y.astype(x.dtype, copy=False), mean.astype(x.dtype, copy=False), invstd


def batch_norm_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                 layout="NCHW"):
    _, shape = _axes(x.ndim, mode, layout)
    invstd = 1.0 / np.sqrt(running_var + x.dtype.type(eps))
    y = (x - _bcast(running_mean, shape)) * _bcast(invstd, shape)
    if gamma is not None:
        y = y * _bcast(gamma, shape)
    if beta_ is not None:
        y = y + _bcast(beta_, shape)
    return y.astype(x.dtype, copy=False)


def batch_norm_backward(x, dy, gamma, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    axes, shape = _axes(x.ndim, mode, layout)
    invstd = _bcast(saved_invstd, shape)
    x_hat = (x - _bcast(saved_mean, shape)) * invstd
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * x_hat).sum(axis=axes)
    n = x.dtype.type(x.size // dbeta.size)
    # y depends on x directly and through the batch mean and variance; those two paths subtract
    # the mean of dy and the projection of dy on x_hat.
    scale = invstd if gamma is None else invstd * _bcast(gamma, shape)
    dx = scale * (dy - _bcast(dbeta / n, shape) - x_hat * _bcast(dgamma / n, shape))
    if gamma is None:
        return dx.astype(x.dtype, copy=False), None, None
    return dx.astype(x.dtype, copy=False), dgamma, dbeta
