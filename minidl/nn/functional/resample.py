"""F.interpolate and the upsample functions: resizing the spatial dimensions of (N, C, *spatial), nearest
(torch's floor rule and the "exact" half-pixel one), linear / bilinear / trilinear, bicubic (Keys' cubic convolution,
A = -0.75, torch's), and area (adaptive average pooling's windows). Each is written as tensor ops, so the gradient flows back to
the input through the tape."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ... import _dtypes
from ...autograd.tensor import Tensor


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """Resize the spatial dims of (N, C, *spatial): mode 'nearest' / 'nearest-exact' (1-3 spatial dims), 'linear'
    (1), 'bilinear' (2), 'bicubic' (2) or 'trilinear' (3), with align_corners as torch, or 'area' (1-3: adaptive
    average pooling to the output size). Built from index_select, weighted sums and matrix products, so the gradient flows
    back to the input."""
    spatial = input.ndim - 2
    if spatial < 1:
        raise ValueError(f"interpolate: expected an input of shape (N, C, *spatial), got {tuple(input.shape)}")
    linear_modes = {"linear": 1, "bilinear": 2, "trilinear": 3, "bicubic": 2}
    if mode not in ("nearest", "nearest-exact", "area") and mode not in linear_modes:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported in minidl (nearest, nearest-exact, "
                                  "linear, bilinear, bicubic, trilinear, area)")
    if mode in linear_modes and linear_modes[mode] != spatial:
        raise ValueError(f"interpolate: mode {mode!r} expects {linear_modes[mode] + 2}-D input, got {input.ndim}-D")
    if mode not in linear_modes and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    if antialias and (mode not in ("bilinear", "bicubic") or spatial != 2):
        raise ValueError("interpolate: anti-alias option is only supported for bilinear and bicubic modes on 4-D "
                         "input, as torch's")
    in_sizes = tuple(input.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        out_sizes = tuple(size) if not isinstance(size, numbers.Integral) else (size,) * spatial
        scales = [None] * spatial
    else:
        sf = tuple(scale_factor) if isinstance(scale_factor, (list, tuple)) else (scale_factor,) * spatial
        out_sizes = tuple(int(math.floor(s * f)) for s, f in zip(in_sizes, sf))
        scales = [None if recompute_scale_factor else float(f) for f in sf]
    if len(out_sizes) != spatial:
        raise ValueError(f"interpolate: size has {len(out_sizes)} entries for {spatial} spatial dims")
    half = input.dtype in _dtypes.HALF_DTYPES and (mode in linear_modes or mode == "area")
    x = input.float() if half else input      # the weighted sums in float32, rounded once (as torch)
    for k in range(spatial):
        dim = 2 + k
        n_in, n_out = in_sizes[k], out_sizes[k]
        if antialias and not align_corners:
            x = _antialiased_axis(x, dim, n_in, n_out, scales[k], mode)
        elif mode == "bicubic":
            x = _cubic_axis(x, dim, n_in, n_out, bool(align_corners), scales[k])
        elif mode == "area":
            x = _area_axis(x, dim, n_in, n_out)
        elif mode in linear_modes:
            x = _linear_axis(x, dim, n_in, n_out, bool(align_corners), scales[k])
        else:
            x = x.index_select(dim, _nearest_index(x, n_in, n_out, scales[k], exact=mode == "nearest-exact"))
    return x.type(input.dtype) if half else x


def _nearest_index(like, n_in, n_out, scale, exact):
    s = (1.0 / scale) if scale else n_in / n_out
    pos = np.arange(n_out, dtype=np.float64)
    src = np.floor((pos + 0.5) * s) if exact else np.floor(pos * s)
    src = np.minimum(src.astype(np.int64), n_in - 1)
    return Tensor(src, device=like.device)


def _linear_axis(x, dim, n_in, n_out, align_corners, scale):
    pos = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = pos * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        s = (1.0 / scale) if scale else n_in / n_out
        src = np.maximum((pos + 0.5) * s - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo).astype(np.float64)
    shape = [1] * x.ndim
    shape[dim] = n_out
    w = Tensor(frac.reshape(shape), dtype=x.dtype, device=x.device)
    a = x.index_select(dim, Tensor(lo, device=x.device))
    b = x.index_select(dim, Tensor(hi, device=x.device))
    return a + (b - a) * w


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)




def _cubic_axis(x, dim, n_in, n_out, align_corners, scale):
    """One axis of bicubic resampling as a matrix product: each output sample the four nearest inputs weighted by
    Keys' cubic convolution with A = -0.75 (torch's), the indices clamped at the borders and the source position not
    (torch's cubic rule)."""
    pos = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = pos * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        s = (1.0 / scale) if scale else n_in / n_out
        src = (pos + 0.5) * s - 0.5
    base = np.floor(src)
    t = src - base
    weights = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    for offset, d in ((-1, t + 1), (0, t), (1, 1 - t), (2, 2 - t)):
        np.add.at(weights, (rows, np.clip(base.astype(np.int64) + offset, 0, n_in - 1)), _keys_cubic(d, -0.75))
    return _apply_axis(x, dim, weights)


def _keys_cubic(d, a):
    """Keys' cubic convolution kernel at distance d: a = -0.75 for torch's bicubic, -0.5 for PIL's (antialias)."""
    d = np.abs(d)
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))


def _antialiased_axis(x, dim, n_in, n_out, scale, mode):
    """One axis resampled with the filter widened by the downscale factor (a triangle for bilinear, Keys' cubic with
    a = -0.5 for bicubic), each output's weights normalised: PIL's resampling, which torch's antialias=True
    reproduces. Upscaling it is the plain filter."""
    s = (1.0 / scale) if scale else n_in / n_out
    size = 2 if mode == "bilinear" else 4
    support = size * 0.5 * s if s >= 1.0 else size * 0.5
    inv = 1.0 / s if s >= 1.0 else 1.0

    def kernel(d):
        return np.maximum(0.0, 1.0 - np.abs(d)) if mode == "bilinear" else _keys_cubic(d, -0.5)

    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = s * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = kernel((np.arange(lo, hi) - center + 0.5) * inv)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    return _apply_axis(x, dim, weights)


def _area_axis(x, dim, n_in, n_out):
    """One axis of 'area' resampling: output i the mean of inputs [floor(i n_in / n_out), ceil((i + 1) n_in / n_out))
    (adaptive average pooling's windows; a rectangle's mean is the product of its two axes' means)."""
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        weights[i, lo:hi] = 1.0 / (hi - lo)
    return _apply_axis(x, dim, weights)


def _apply_axis(x, dim, weights):
    """x's dimension dim (length n_in) mapped through the (n_out, n_in) matrix weights: a matrix product."""
    W = Tensor(weights, dtype=x.dtype, device=x.device)
    return (x.movedim(dim, -1) @ W.mT).movedim(-1, dim)


FUNCTIONS = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]
