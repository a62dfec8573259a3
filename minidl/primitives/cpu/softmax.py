"""NumPy reference of softmax / log-softmax (see minidl/primitives/softmax.py for the formulas)."""
from __future__ import annotations

import numpy as np

from .._common import blend, get_array_module


def softmax_forward(x, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    shifted = x - np.max(x, axis=axis, keepdims=True)  # every exponent <= 0: no overflow
    if algorithm == "log":
        y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    else:
        e = np.exp(shifted)
        y = e / np.sum(e, axis=axis, keepdims=True)
    return blend("softmax_forward", y, out, alpha, beta)


def softmax_backward(y, dy, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    if algorithm == "log":
        # y = log p, so p = exp(y); d(log p_i)/dx_j = delta_ij - p_j.
        dx = dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)
    else:
        # Jacobian of softmax is diag(y) - y y^T; applied to dy without forming it.
        dx = y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
    return blend("softmax_backward", dx, out, alpha, beta)


def _rows(x):
    """(N, C, d1, ...) -> (N * d1 * ..., C): one row of class scores per prediction."""
    if x.ndim == 2:
        return x
    return get_array_module(x).moveaxis(x, 1, -1).reshape(-1, x.shape[1])


def _target_weights(t, C, weight, ignore_index, dtype):
    """valid (M,) bool: the rows that count; w_t (M,): the target's weight there (0 elsewhere); bad (M,) bool:
    the rows whose index is neither in range nor ignore_index, or None when there is none."""
    xp = get_array_module(t)
    in_range = t.astype(xp.uint64) < C          # a negative index wraps to a huge one: one test for both ends
    counted = t != ignore_index
    valid = in_range & counted
    w_t = valid.astype(dtype) if weight is None else xp.where(valid, weight[xp.where(valid, t, 0)], dtype.type(0))
    if xp is np and in_range.all():           # (on CuPy, all() would wait for the GPU)
        return valid, w_t, None
    return valid, w_t, ~in_range & counted


def cross_entropy_forward(x, target, weight=None, *, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    # Row m: log p_c = (z_c - max) - L with L = log sum_c exp(z_c - max) (in this order, as PyTorch's log_softmax),
    # loss = -((1 - eps) w_t log p_t + eps / C sum_c w_c log p_c), 0 where ignored, NaN where t is out of range.
    xp = get_array_module(x)      # NumPy here; CuPy where the GPU launcher falls back for float64
    z, t = _rows(x), target.reshape(-1)
    C, eps = x.shape[1], label_smoothing
    valid, w_t, bad = _target_weights(t, C, weight, ignore_index, x.dtype)
    stats = xp.empty((z.shape[0], 2), dtype=x.dtype)   # (max, L) per row: all the backward pass needs
    top, log_sum = stats[:, 0], stats[:, 1]
    z.max(axis=1, out=top)
    shifted = z - top[:, None]
    xp.log(xp.exp(shifted).sum(axis=1), out=log_sum)
    loss = (shifted[xp.arange(z.shape[0]), xp.where(valid, t, 0)] - log_sum) * (-(1.0 - eps) * w_t)
    if eps:
        w = weight if weight is not None else xp.ones(C, dtype=x.dtype)
        loss -= eps / C * ((shifted - log_sum[:, None]) @ w) * valid
    if bad is not None:
        loss[bad] = float("nan")
    denom = w_t.sum()        # the mean's denominator: the summed weights of the rows that count
    if reduction == "mean":
        loss = loss.sum() / denom
    elif reduction == "sum":
        loss = loss.sum()
    else:
        loss = loss.reshape(target.shape)
    return xp.asarray(loss, dtype=x.dtype), stats, xp.asarray(denom, dtype=x.dtype)


def cross_entropy_backward(x, target, stats, dloss, denom, weight=None, *, reduction="mean", ignore_index=-100,
                           label_smoothing=0.0):
    # dx = scale * ((sum_c q_c) p - q), q_c = (1 - eps) w_t [c == t] + eps / C w_c on the rows that count,
    # grouped as (1 - eps) w_t (p - onehot) + eps / C (W p - w): p - 1 first, as PyTorch (a confident row's
    # small gradient is then not the difference of two rounded products).
    xp = get_array_module(x)
    z, t = _rows(x), target.reshape(-1)
    C, eps = x.shape[1], label_smoothing
    valid, w_t, bad = _target_weights(t, C, weight, ignore_index, x.dtype)
    p = xp.exp((z - stats[:, :1]) - stats[:, 1:])
    p[xp.arange(z.shape[0]), xp.where(valid, t, 0)] -= 1        # p - onehot (rows not valid get w_t = 0 below)
    rows = p * ((1.0 - eps) * w_t)[:, None]
    if eps:
        w = weight if weight is not None else xp.ones(C, dtype=x.dtype)
        p_again = xp.exp((z - stats[:, :1]) - stats[:, 1:])
        rows += (eps / C) * (w.sum() * p_again - w[None, :]) * valid[:, None]
    if reduction == "none":
        rows *= dloss.reshape(-1, 1)
    else:
        rows *= dloss / denom if reduction == "mean" else dloss
    if bad is not None:
        rows[bad] = float("nan")
    if x.ndim == 2:
        return rows.astype(x.dtype, copy=False)
    moved = rows.reshape((x.shape[0],) + x.shape[2:] + (C,))
    return xp.ascontiguousarray(xp.moveaxis(moved, -1, 1)).astype(x.dtype, copy=False)
