"""Memory formats: how a 4-D (N, C, H, W) or 5-D (N, C, D, H, W) array lies in memory.

A tensor's shape is always PyTorch's channels-first one; its *memory format* is the order of its
elements in memory. contiguous_format is row-major (NCHW in memory); channels_last is NHWC in memory:
the array is a transposed view of an NHWC-contiguous buffer, strides (H*W*C, 1, W*C, C). The primitive
library's layout="NHWC" kernels read that buffer as it is, so a network whose tensors stay channels_last
runs its convolutions, batch norms and poolings with no transposes in between (the tensor-core
convolutions read NHWC only: NCHW costs two transposes per call).

    is_channels_last(a)    a's memory is NHWC-contiguous (size-1 dimensions may make it both)
    to_channels_last(a)    a copy in NHWC memory, as a channels-first view (the array a tensor holds)
    nhwc(a)                the (N, H, W, C) view of a channels_last array (no copy), else a copy
    nchw(a)                an (N, H, W, C) array's values as a contiguous (N, C, H, W) array (a copy)
    nhwc_view(a)           the (N, H, W, C) view of any (N, C, H, W) array (a kernel writing NHWC order into it
                           writes channels-first memory)
    from_nhwc(a)           an (N, H, W, C) array seen as (N, C, H, W) (no copy): a channels_last array
"""
from __future__ import annotations

import numpy as np

from ._device import get_array_module
from .primitives.layout import layout_transform


def _perm(ndim: int) -> tuple:
    """Channels-first axes -> channels-last axes: (0, 2, ..., ndim-1, 1)."""
    return (0,) + tuple(range(2, ndim)) + (1,)


def _inverse(ndim: int) -> tuple:
    return (0, ndim - 1) + tuple(range(1, ndim - 1))


def is_channels_last(a) -> bool:
    """True when a 4-D or 5-D array's elements lie in NHWC (NDHWC) order with no gaps."""
    return a.ndim in (4, 5) and a.transpose(_perm(a.ndim)).flags.c_contiguous


def strictly_channels_last(a) -> bool:
    """Channels-last and not also row-major (so the format says something: C > 1 and some spatial size > 1)."""
    return is_channels_last(a) and not a.flags.c_contiguous


def to_channels_last(a):
    """The values of a channels-first array, in NHWC memory (a transposed view of a contiguous copy)."""
    if is_channels_last(a):
        return a
    return layout_transform(a, "NHWC").transpose(_inverse(a.ndim))


def to_contiguous(a):
    """The values of an array in row-major memory (itself when it already is)."""
    xp = get_array_module(a)
    out = xp.ascontiguousarray(a)
    return out if out.shape == a.shape else out.reshape(a.shape)   # ascontiguousarray makes 0-d arrays 1-d


def copy_as(a, channels_last: bool):
    """A new copy of `a` in NHWC memory (channels_last) or row-major memory."""
    if channels_last:
        return from_nhwc(nhwc(a).copy()) if is_channels_last(a) else to_channels_last(a)
    return to_contiguous(a).copy() if a.flags.c_contiguous else to_contiguous(a)


def nhwc(a):
    """(N, C, *spatial) -> (N, *spatial, C): a view when `a` is channels_last, else a contiguous copy."""
    view = a.transpose(_perm(a.ndim))
    return view if view.flags.c_contiguous else layout_transform(a, "NHWC")


def nhwc_view(a):
    """(N, C, *spatial) -> the (N, *spatial, C) view of the same memory, whatever its layout (never a copy)."""
    return a.transpose(_perm(a.ndim))


def nchw(a):
    """(N, *spatial, C) -> a contiguous (N, C, *spatial) copy."""
    return layout_transform(a, "NCHW")


def from_nhwc(a):
    """(N, *spatial, C) -> the (N, C, *spatial) view of the same memory (channels_last when `a` is contiguous)."""
    return a.transpose(_inverse(a.ndim))


def element_strides(a) -> tuple:
    """PyTorch's stride(): steps in elements, not bytes."""
    return tuple(s // a.itemsize for s in a.strides)


def pointwise(f, a, b):
    """f(a, b) for an elementwise f. On CuPy, a channels_last array combined with another of its shape and
    memory format, or with a scalar (a 0-d array or a number), keeps the format (CuPy's elementwise results
    are row-major; NumPy's already follow their inputs' order)."""
    if type(a) is np.ndarray or type(b) is np.ndarray:
        return f(a, b)
    a_cl, b_cl = _cl4(a), _cl4(b)
    if a_cl and (b_cl and b.shape == a.shape or _scalar(b)):
        return from_nhwc(f(nhwc(a), b if not b_cl else nhwc(b)))
    if b_cl and _scalar(a):
        return from_nhwc(f(a, nhwc(b)))
    return f(a, b)


def _cl4(a) -> bool:
    return getattr(a, "ndim", 0) in (4, 5) and not a.flags.c_contiguous and strictly_channels_last(a)


def _scalar(a) -> bool:
    return getattr(a, "ndim", 0) == 0
