"""NumPy reference of max/average pooling and adaptive average pooling.

Vectorised over the kernel taps, not over output pixels: for a tap (a, b) of a 2-D window, the
input element that tap reads for every output (i, j) is x_padded[.., i*s_h + a, j*s_w + b], i.e.
one strided slice x_padded[.., a::s_h, b::s_w] of the output's size. A window of kh * kw taps is
kh * kw whole-array operations, however large the image. For a fixed tap, distinct outputs read
distinct inputs, so the backward pass can scatter one tap with a plain `+=` on a slice.

Arguments arrive already checked (see minidl/primitives/pooling.py); arrays are computed in
channels-first order, on a transposed view when the layout is channels-last.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np

from .._common import blend, pooling_output_shape, to_channels_first, to_channels_last


def _geometry(spatial, desc):
    """Output sizes and the padded input sizes the windows need (right padding grows in ceil mode)."""
    out_sizes = pooling_output_shape((1, 1) + tuple(spatial), desc, "NCHW")[2:]
    padded = tuple(
        max(L + 2 * p, (o - 1) * s + d * (k - 1) + 1)
        for L, o, k, s, p, d in zip(spatial, out_sizes, desc.kernel_size, desc.stride, desc.padding, desc.dilation)
    )
    return out_sizes, padded


def _pad(xc, desc, padded, fill):
    """Copy xc (N, C, *spatial) into a (N, C, *padded) array filled with `fill` (0 or -inf)."""
    xp = np.full(xc.shape[:2] + padded, fill, dtype=xc.dtype)
    inner = tuple(slice(p, p + L) for p, L in zip(desc.padding, xc.shape[2:]))
    xp[(Ellipsis,) + inner] = xc
    return xp


@functools.lru_cache(maxsize=1024)
def _taps(desc, out_sizes):
    """(tap number, slices) for every tap of the window, in window (C) order; a dilated window's
    taps are `dilation` apart. Cached per (descriptor, output size): a training loop asks for the same
    few at every step."""
    ranges = [range(0, d * (k - 1) + 1, d) for k, d in zip(desc.kernel_size, desc.dilation)]
    return tuple((t, (Ellipsis,) + tuple(slice(o, o + (n - 1) * s + 1, s)
                                         for o, n, s in zip(offsets, out_sizes, desc.stride)))
                 for t, offsets in enumerate(itertools.product(*ranges)))


def _avg_divisor(spatial, out_sizes, desc, dtype):
    """Per-output divisor of average pooling, shape (1, 1, *out_sizes).

    A window starts at i*s - p. include_pad counts it up to the end of the right padding (the
    extra cells that ceil mode adds past it never count, as in PyTorch); exclude_pad counts only
    the real input cells. The count factorises over dims, so it is an outer product.
    """
    divisor = np.ones((1, 1) + tuple(out_sizes), dtype=np.float64)
    for d, (L, n, k, s, p) in enumerate(zip(spatial, out_sizes, desc.kernel_size, desc.stride, desc.padding)):
        start = np.arange(n) * s - p
        if desc.mode == "avg_include_pad":
            count = np.minimum(start + k, L + p) - start
        else:
            count = np.minimum(start + k, L) - np.maximum(start, 0)
        shape = [1] * divisor.ndim
        shape[2 + d] = n
        divisor = divisor * count.reshape(shape)
    return divisor.astype(dtype)


def _window_max(xp, desc, out_sizes):
    """Window maxima: an elementwise np.maximum over the taps' strided slices (NaN wins, as PyTorch).

    Only the maximum, no argmax: one pass per tap, with nothing to select or store, which is why
    the forward pass does not go through _max_argmax.
    """
    y = None
    for _, sl in _taps(desc, out_sizes):
        y = xp[sl].copy() if y is None else np.maximum(y, xp[sl], out=y)
    return y


def _max_argmax(xp, desc, out_sizes):
    """Window maxima and the tap number of each one's first maximum (for NaN: PyTorch's last NaN)."""
    best = None
    arg = None
    for t, sl in _taps(desc, out_sizes):
        v = xp[sl]
        if best is None:
            best = v.copy()
            arg = np.zeros(v.shape, dtype=np.int64)
            continue
        # Strictly greater: on a tie the earlier tap keeps the maximum.
        better = (v > best) | np.isnan(v)
        best = np.where(better, v, best)
        arg = np.where(better, t, arg)
    return best, arg


def _max_backward_first_match(xp, y, dyc, desc, out_sizes, padded):
    """Gradient of max pooling (padded input) when no window maximum y is NaN.

    Instead of an int64 argmax array and a where() per tap against it, walk the taps in window
    order with a boolean "still unclaimed" mask: tap t takes dy wherever it equals the window's
    maximum and no earlier tap did. Ties go to the first maximum, as in _max_argmax and PyTorch.
    """
    dxp = np.zeros(xp.shape[:2] + padded, dtype=dyc.dtype)
    unclaimed = np.ones(y.shape, dtype=bool)
    # dy * hit (a multiply by a boolean) is several times faster than np.where(hit, dy, 0), but
    # 0 * inf = NaN would leak a non-finite dy onto the other taps: then select instead.
    dy_finite = bool(np.isfinite(dyc).all())
    # With stride >= kernel every input lies in at most one window, so each tap can write its
    # slice directly (no temporary, no read-modify-write); overlapping windows must accumulate.
    disjoint = all(s >= d * (k - 1) + 1 for s, k, d in zip(desc.stride, desc.kernel_size, desc.dilation))
    zero = dyc.dtype.type(0)
    for _, sl in _taps(desc, out_sizes):
        hit = np.equal(xp[sl], y)
        hit &= unclaimed
        unclaimed ^= hit                          # hit is a subset of unclaimed: this removes it
        if disjoint and dy_finite:
            np.multiply(dyc, hit, out=dxp[sl])
        else:
            dxp[sl] += np.multiply(dyc, hit) if dy_finite else np.where(hit, dyc, zero)
    return dxp


def _to_layout(a, layout):
    return np.ascontiguousarray(to_channels_last(a, layout))


def _pad_or_view(xc, desc, padded, fill):
    """The padded input; without padding and ceil-mode overhang, xc itself (no copy)."""
    if tuple(padded) == tuple(xc.shape[2:]):
        return xc
    return _pad(xc, desc, padded, fill)


def pooling_forward(x, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    xc = to_channels_first(x, layout)
    spatial = xc.shape[2:]
    out_sizes, padded = _geometry(spatial, desc)
    if desc.mode == "max":
        y = _window_max(_pad_or_view(xc, desc, padded, -np.inf), desc, out_sizes)
    else:
        xp = _pad_or_view(xc, desc, padded, 0)
        y = np.zeros(xc.shape[:2] + tuple(out_sizes), dtype=x.dtype)
        for _, sl in _taps(desc, out_sizes):
            y += xp[sl]
        y /= _avg_divisor(spatial, out_sizes, desc, x.dtype)
    return blend("pooling_forward", _to_layout(y, layout), out, alpha, beta)


def pooling_backward(x, y, dy, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    xc = to_channels_first(x, layout)
    dyc = to_channels_first(dy, layout)
    spatial = xc.shape[2:]
    out_sizes, padded = _geometry(spatial, desc)
    if desc.mode == "max":
        # Recompute the argmax from x instead of storing it (as cuDNN): the gradient of each
        # window goes to its first maximum.
        xp = _pad_or_view(xc, desc, padded, -np.inf)
        window_max = _window_max(xp, desc, out_sizes)
        if not np.isnan(window_max).any():
            dxp = _max_backward_first_match(xp, window_max, dyc, desc, out_sizes, padded)
        else:
            # A NaN maximum equals nothing, so the mask walk cannot find it: use the argmax.
            _, arg = _max_argmax(xp, desc, out_sizes)
            dxp = np.zeros(xc.shape[:2] + padded, dtype=x.dtype)
            for t, sl in _taps(desc, out_sizes):
                dxp[sl] += np.where(arg == t, dyc, 0)
    else:
        dxp = np.zeros(xc.shape[:2] + padded, dtype=x.dtype)
        share = dyc / _avg_divisor(spatial, out_sizes, desc, x.dtype)
        for _, sl in _taps(desc, out_sizes):
            dxp[sl] += share
    inner = (Ellipsis,) + tuple(slice(p, p + L) for p, L in zip(desc.padding, spatial))
    return blend("pooling_backward", _to_layout(dxp[inner], layout), out, alpha, beta)


# ----------------------------------------------------------------------------------------------
# Adaptive average pooling: separable, so one small averaging matrix per spatial dim
# ----------------------------------------------------------------------------------------------


def adaptive_pooling_matrix(in_size: int, out_size: int, dtype=np.float64):
    """(out_size, in_size) matrix A with A[i, start_i:end_i] = 1 / (end_i - start_i).

    start_i = floor(i * In / Out), end_i = ceil((i + 1) * In / Out) (PyTorch's windows). Averaging
    a box is averaging along each dim in turn, so y = x with A applied along every spatial axis,
    and the backward pass applies A transposed.
    """
    a = np.zeros((out_size, in_size), dtype=np.float64)
    for i in range(out_size):
        start = (i * in_size) // out_size
        end = -(-((i + 1) * in_size) // out_size)
        a[i, start:end] = 1.0 / (end - start)
    return a.astype(dtype)


def _apply_along(a, matrix, axis):
    """Contract `axis` of a with the columns of matrix: result[.., i, ..] = sum_j matrix[i, j] a[.., j, ..]."""
    return np.moveaxis(np.tensordot(a, matrix, axes=([axis], [1])), -1, axis)


def adaptive_avg_pooling_forward(x, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    y = to_channels_first(x, layout)
    for d, n_out in enumerate(output_size):
        y = _apply_along(y, adaptive_pooling_matrix(y.shape[2 + d], n_out, x.dtype), 2 + d)
    return blend("adaptive_avg_pooling_forward", _to_layout(y, layout), out, alpha, beta)


def adaptive_avg_pooling_backward(dy, x_shape, output_size, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    spatial = x_shape[2:] if layout == "NCHW" else x_shape[1:-1]
    dx = to_channels_first(dy, layout)
    for d, (n_in, n_out) in enumerate(zip(spatial, output_size)):
        dx = _apply_along(dx, adaptive_pooling_matrix(n_in, n_out, dy.dtype).T, 2 + d)
    return blend("adaptive_avg_pooling_backward", _to_layout(dx, layout), out, alpha, beta)


# ----------------------------------------------------------------------------------------------
# Max pooling with indices; max unpooling
# ----------------------------------------------------------------------------------------------


def max_pooling_forward_with_indices(x, desc, *, layout="NCHW"):
    """y and the flat input position (within each (n, c) plane) of each window's maximum.

    _max_argmax gives the tap number t of the maximum; tap t sits at offset (t_1, t_2, ...) * dilation
    in the window that starts at o * stride - padding, so its input coordinate per dim is
    o * s - p + t_d * d, flattened row-major over the input's spatial dims.
    """
    xc = to_channels_first(x, layout)
    spatial = xc.shape[2:]
    out_sizes, padded = _geometry(spatial, desc)
    y, tap = _max_argmax(_pad_or_view(xc, desc, padded, -np.inf), desc, out_sizes)
    index = np.zeros(y.shape, dtype=np.int64)
    remaining = tap
    for d in reversed(range(len(spatial))):  # tap numbers are row-major over the kernel dims
        k = desc.kernel_size[d]
        offset = remaining % k
        remaining = remaining // k
        shape = [1] * y.ndim
        shape[2 + d] = out_sizes[d]
        start = (np.arange(out_sizes[d]) * desc.stride[d] - desc.padding[d]).reshape(shape)
        coord = start + offset * desc.dilation[d]
        index = index + coord * int(np.prod(spatial[d + 1:], dtype=np.int64))
    return _to_layout(y, layout), _to_layout(index, layout)


def _planes(a, layout):
    """(N*C, prod(spatial)) view of a channels-first copy, and the (N, C) sizes."""
    ac = np.ascontiguousarray(to_channels_first(a, layout))
    return ac.reshape(ac.shape[0] * ac.shape[1], -1), ac.shape[:2]


def max_unpooling_forward(y, indices, x_spatial, *, layout="NCHW"):
    y2, (n, c) = _planes(y, layout)
    i2, _ = _planes(indices, layout)
    size = int(np.prod(x_spatial, dtype=np.int64))
    if i2.size and (i2.min() < 0 or i2.max() >= size):
        bad = int(i2.min()) if i2.min() < 0 else int(i2.max())
        raise ValueError(f"max_unpooling_forward: index {bad} is out of range for output spatial size {tuple(x_spatial)}")
    x2 = np.zeros((n * c, size), dtype=y.dtype)
    # Row-wise scatter; for a repeated index the last write wins (NumPy's fancy assignment, PyTorch's CPU).
    x2[np.arange(n * c)[:, None], i2] = y2
    return _to_layout(x2.reshape((n, c) + tuple(x_spatial)), layout)


def max_unpooling_backward(dx, indices, *, layout="NCHW"):
    d2, (n, c) = _planes(dx, layout)
    i2, _ = _planes(indices, layout)
    if i2.size and (i2.min() < 0 or i2.max() >= d2.shape[1]):
        raise ValueError("max_unpooling_backward: an index is out of range for dx's spatial size")
    dy = np.take_along_axis(d2, i2, axis=1)
    return _to_layout(dy.reshape(to_channels_first(indices, layout).shape), layout)
