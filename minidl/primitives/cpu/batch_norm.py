"""NumPy reference of batch normalization (formulas in minidl/primitives/batch_norm.py).

The statistics are reductions over every axis except the parameter axes; parameters are reshaped
so that they broadcast against x (e.g. (C,) -> (1, C, 1, 1) for spatial NCHW).

Written for few passes over memory: each pass over a full-size array costs about as much as the
arithmetic it carries, and each new full-size array costs its page faults on top. So there is one
full-size temporary per call (x - mean, which becomes the output), per-channel coefficients are
folded together before they touch it, the updates run in place (out=), and sums of products use
np.einsum, which reduces without materialising the product.
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


def _sum_of_products(a, b, axes):
    """sum over `axes` of a * b, one value per remaining index, without an a * b temporary."""
    letters = "abcdefghijklmnopqrstuvwxyz"[: a.ndim]
    kept = "".join(letter for axis, letter in enumerate(letters) if axis not in axes)
    return np.einsum(f"{letters},{letters}->{kept}", a, b)


def batch_norm_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                mode="spatial", layout="NCHW", num_batches_tracked=None):
    axes, shape = _axes(x.ndim, mode, layout)
    mean = x.mean(axis=axes)
    n = x.size // mean.size  # elements per statistic
    centered = x - _bcast(mean, shape)
    # biased: normalise with the batch's own spread. From the centred values, not E[x^2] - mean^2,
    # which cancels catastrophically in float32 when |mean| >> std.
    var = _sum_of_products(centered, centered, axes) / x.dtype.type(n)
    invstd = (1.0 / np.sqrt(var + x.dtype.type(eps))).astype(x.dtype)
    # y = centered * (invstd * gamma) + beta, written over `centered`: one multiply per element.
    scale = invstd if gamma is None else invstd * gamma
    y = np.multiply(centered, _bcast(scale, shape), out=centered)
    if beta_ is not None:
        y += _bcast(beta_, shape)
    if running_mean is not None:
        m = x.dtype.type(momentum)
        # The running variance estimates the population's: unbiased, n / (n - 1) (as PyTorch).
        unbiased = var * x.dtype.type(n / (n - 1))
        running_mean[...] = (1 - m) * running_mean + m * mean
        running_var[...] = (1 - m) * running_var + m * unbiased
    if num_batches_tracked is not None:
        num_batches_tracked += 1   # (0-d int64, in place)
    return y, mean.astype(x.dtype, copy=False), invstd


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
    n = x.dtype.type(x.size // saved_mean.size)
    invstd = saved_invstd
    centered = x - _bcast(saved_mean, shape)                     # x_hat = centered * invstd
    dbeta = dy.sum(axis=axes)
    dgamma = _sum_of_products(dy, centered, axes) * invstd     # sum(dy * x_hat)
    # y depends on x directly and through the batch mean and variance; those two paths subtract
    # the mean of dy and the projection of dy on x_hat:
    #   dx = gamma * invstd * (dy - dbeta / n - x_hat * dgamma / n)
    # computed in place over `centered`, the per-channel factors folded first.
    dx = np.multiply(centered, _bcast(invstd * dgamma / n, shape), out=centered)
    dx += _bcast(dbeta / n, shape)
    np.subtract(dy, dx, out=dx)
    dx *= _bcast(invstd if gamma is None else invstd * gamma, shape)
    if gamma is None:
        return dx, None, None
    return dx, dgamma, dbeta


# ------------------------------------------------------------------------------------------------
# Fused batch norm + ReLU: the unfused pair, composed (the oracle of kernels/batch_norm.cu's fused
# kernels). The backward recomputes the BN output exactly as the forward computed it.
# ------------------------------------------------------------------------------------------------
def _relu(y):
    return np.maximum(y, y.dtype.type(0), out=y)


def batch_norm_relu_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                     mode="spatial", layout="NCHW", num_batches_tracked=None):
    y, mean, invstd = batch_norm_forward_training(x, gamma, beta_, running_mean, running_var, momentum=momentum,
                                                  eps=eps, mode=mode, layout=layout,
                                                  num_batches_tracked=num_batches_tracked)
    return _relu(y), mean, invstd


def batch_norm_relu_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                      layout="NCHW"):
    return _relu(batch_norm_forward_inference(x, gamma, beta_, running_mean, running_var, eps=eps, mode=mode,
                                              layout=layout))


def batch_norm_relu_backward(x, dy, gamma, beta_, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    _, shape = _axes(x.ndim, mode, layout)
    scale = saved_invstd if gamma is None else saved_invstd * gamma
    pre = np.multiply(x - _bcast(saved_mean, shape), _bcast(scale, shape))   # the forward's BN output
    if beta_ is not None:
        pre += _bcast(beta_, shape)
    masked = np.where(pre > 0, dy, dy.dtype.type(0))                          # the ReLU's gradient
    return batch_norm_backward(x, masked, gamma, saved_mean, saved_invstd, mode=mode, layout=layout)
