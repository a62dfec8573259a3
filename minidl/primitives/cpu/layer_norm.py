"""NumPy reference of layer norm and RMS norm (formulas in minidl/primitives/layer_norm.py).

Written with `xp = get_array_module(x)`, so the same lines also run on CuPy arrays, for what
kernels/layer_norm.cu does not take (float64 on the GPU, half data with float32 parameters).
"""
from __future__ import annotations

import math

from .._common import get_array_module


def layer_norm_forward(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, rms=False):
    xp = get_array_module(x)
    lead = x.shape[:x.ndim - normalized_ndim]
    n = math.prod(x.shape[x.ndim - normalized_ndim:])
    rows = x.reshape(math.prod(lead), n)
    if rms:
        mean = None
        rstd = 1.0 / xp.sqrt(xp.mean(rows * rows, axis=1) + x.dtype.type(eps))
        xhat = rows * rstd[:, None]
    else:
        mean = xp.mean(rows, axis=1)
        centred = rows - mean[:, None]
        rstd = 1.0 / xp.sqrt(xp.mean(centred * centred, axis=1) + x.dtype.type(eps))
        xhat = centred * rstd[:, None]
    y = xhat
    if weight is not None:
        y = y * weight.reshape(1, n)
    if bias is not None:
        y = y + bias.reshape(1, n)
    y = xp.ascontiguousarray(y, dtype=x.dtype).reshape(x.shape)
    return y, (None if mean is None else mean.reshape(lead)), rstd.reshape(lead)


def layer_norm_backward(x, dy, weight, mean, rstd, *, normalized_ndim=1, rms=False, has_bias=True):
    xp = get_array_module(x)
    n = math.prod(x.shape[x.ndim - normalized_ndim:])
    rows, g_rows = x.reshape(-1, n), dy.reshape(-1, n)
    r = rstd.reshape(-1, 1)
    xhat = (rows if rms else rows - mean.reshape(-1, 1)) * r
    g = g_rows * weight.reshape(1, n) if weight is not None else g_rows
    inner = xp.mean(g * xhat, axis=1, keepdims=True)
    if rms:
        dx = r * (g - xhat * inner)
    else:
        dx = r * (g - xp.mean(g, axis=1, keepdims=True) - xhat * inner)
    dweight = dbias = None
    if weight is not None:
        shape = x.shape[x.ndim - normalized_ndim:]
        dweight = xp.sum(g_rows * xhat, axis=0).reshape(shape).astype(weight.dtype, copy=False)
        if has_bias and not rms:
            dbias = xp.sum(g_rows, axis=0).reshape(shape).astype(weight.dtype, copy=False)
    return dx.reshape(x.shape).astype(x.dtype, copy=False), dweight, dbias
