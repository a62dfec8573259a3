"""Layer norm and RMS norm over the last dimensions, forward and backward (cuDNN's cudnnNormalization*
with CUDNN_LAYER_NORM; the normalisation of every Transformer).

x is viewed as (M, N): M rows (every leading index) of N = prod(normalized_shape) values each; every
row is normalised on its own, so unlike batch norm nothing depends on the rest of the batch, and
training and evaluation compute the same thing.

    layer norm:  mean = sum_j x_j / N,   var = sum_j (x_j - mean)^2 / N,   rstd = 1 / sqrt(var + eps)
                 xhat = (x - mean) * rstd,     y = xhat * weight + bias
    RMS norm:    rstd = 1 / sqrt(sum_j x_j^2 / N + eps),   xhat = x * rstd,   y = xhat * weight
                 (no centring, no bias: Zhang & Sennrich 2019, used by LLaMA-style models)

Backward, with g = dy * weight (dy without a weight) and <.> the mean over the row:
    layer norm:  dx = rstd * (g - <g> - xhat * <g * xhat>)
    RMS norm:    dx = rstd * (g - xhat * <g * xhat>)
    dweight = sum over rows of dy * xhat,    dbias = sum over rows of dy
The forward pass returns (y, mean, rstd), one statistic per row (mean is None for RMS norm), so
backward recomputes xhat from x without a second reduction of the variance. Statistics are float32
for half inputs, as cuDNN's and torch's are: kernels/layer_norm.cu reads and writes half data and keeps
every sum in fp32; the NumPy reference converts half arrays to float32 (computes_half_in_float32).
"""
from __future__ import annotations

import math

from ._common import (
    Checked, backend, check_arrays, check_float_or_half, check_same_device, computes_half_in_float32, is_cuda_array,
    shape_str,
)
from .._dtypes import bfloat16, float16, float32

__all__ = ["layer_norm_forward", "layer_norm_backward"]


def _rows(op: str, x, normalized_ndim) -> tuple[int, int]:
    if not isinstance(normalized_ndim, int) or not 1 <= normalized_ndim <= x.ndim:
        raise ValueError(f"{op}: normalized_ndim must be between 1 and x.ndim = {x.ndim}, got {normalized_ndim!r} "
                         f"(x {shape_str(x.shape)})")
    n = math.prod(x.shape[x.ndim - normalized_ndim:])
    return math.prod(x.shape[:x.ndim - normalized_ndim]), n


def _check_affine(op: str, x, normalized_ndim, **params) -> None:
    shape = tuple(x.shape[x.ndim - normalized_ndim:])
    for name, p in params.items():
        if p is not None and tuple(p.shape) != shape:
            raise ValueError(f"{op}: {name} has shape {shape_str(p.shape)}, expected the normalized shape "
                             f"{shape_str(shape)} of x {shape_str(x.shape)}")


_KERNEL_DTYPES = (float32, float16, bfloat16)


def _on_kernel(x, *params) -> bool:
    """kernels/layer_norm.cu runs it: a CuPy array of float32/float16/bfloat16, parameters of the same
    dtype. Anything else (float64 on the GPU, half data with float32 parameters) runs the reference's
    array code, half computed in float32."""
    return is_cuda_array(x) and x.dtype in _KERNEL_DTYPES and all(p is None or p.dtype == x.dtype for p in params)


@computes_half_in_float32(out_dtypes=("x", None, None), mixed_dtypes=True)
def _reference_forward(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, rms=False):
    return backend("layer_norm", False).layer_norm_forward(x, weight, bias, normalized_ndim=normalized_ndim, eps=eps,
                                                           rms=rms)


@computes_half_in_float32(out_dtypes=("x", "weight", "weight"), mixed_dtypes=True)
def _reference_backward(x, dy, weight, mean, rstd, *, normalized_ndim=1, rms=False, has_bias=True):
    return backend("layer_norm", False).layer_norm_backward(x, dy, weight, mean, rstd, normalized_ndim=normalized_ndim,
                                                            rms=rms, has_bias=has_bias)


_forward_checked, _backward_checked = Checked(), Checked()   # the signatures whose checks passed


def layer_norm_forward(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, rms=False):
    """Normalise x over its last `normalized_ndim` dimensions. Returns (y, mean, rstd): mean and rstd
    have one value per row (shape x.shape[:-normalized_ndim]); mean is None when rms=True."""
    op = "layer_norm_forward"
    key = Checked.key((x, weight, bias), normalized_ndim, eps, rms)
    if key not in _forward_checked:
        check_arrays(op, x=x, weight=weight, bias=bias)
        check_same_device(op, x=x, weight=weight, bias=bias)
        check_float_or_half(op, half_with_float32=True, x=x, weight=weight, bias=bias)
        _rows(op, x, normalized_ndim)
        _check_affine(op, x, normalized_ndim, weight=weight, bias=bias)
        if rms and bias is not None:
            raise ValueError(f"{op}: RMS norm has no bias")
        if not eps >= 0:
            raise ValueError(f"{op}: eps must be >= 0, got {eps!r}")
        _forward_checked.add(key)
    if _on_kernel(x, weight, bias):
        return backend("layer_norm", True).layer_norm_forward(x, weight, bias, normalized_ndim=normalized_ndim,
                                                              eps=eps, rms=rms)
    return _reference_forward(x, weight, bias, normalized_ndim=normalized_ndim, eps=eps, rms=rms)


def layer_norm_backward(x, dy, weight, mean, rstd, *, normalized_ndim=1, rms=False, has_bias=True):
    """(dx, dweight, dbias) from x, dy and the forward's saved (mean, rstd); dweight is None without a
    weight, dbias None without a weight or with has_bias=False (and always for RMS norm)."""
    op = "layer_norm_backward"
    key = Checked.key((x, dy, weight, mean, rstd), normalized_ndim, rms)
    if key not in _backward_checked:
        check_arrays(op, x=x, dy=dy, weight=weight, mean=mean, rstd=rstd)
        check_same_device(op, x=x, dy=dy, weight=weight, mean=mean, rstd=rstd)
        check_float_or_half(op, half_with_float32=True, x=x, dy=dy, weight=weight)
        if tuple(dy.shape) != tuple(x.shape):
            raise ValueError(f"{op}: dy {shape_str(dy.shape)} and x {shape_str(x.shape)} must have the same shape")
        m, _ = _rows(op, x, normalized_ndim)
        _check_affine(op, x, normalized_ndim, weight=weight)
        for name, s in (("mean", mean), ("rstd", rstd)):
            if s is not None and s.size != m:
                raise ValueError(f"{op}: {name} has {s.size} values, expected one per row ({m}) of x "
                                 f"{shape_str(x.shape)}")
        if (mean is None) != bool(rms):
            raise ValueError(f"{op}: mean must be given for layer norm and None for RMS norm (rms={rms})")
        _backward_checked.add(key)
    if _on_kernel(x, dy, weight):
        return backend("layer_norm", True).layer_norm_backward(x, dy, weight, mean, rstd,
                                                               normalized_ndim=normalized_ndim, rms=rms,
                                                               has_bias=has_bias)
    return _reference_backward(x, dy, weight, mean, rstd, normalized_ndim=normalized_ndim, rms=rms,
                               has_bias=has_bias)
