"""layout_transform: a tensor's values in the other memory format (cuDNN's cudnnTransformTensor, for the
layout only).

    y = layout_transform(x, "NHWC")    x (N, C, *spatial), any strides -> y (N, *spatial, C), contiguous
    y = layout_transform(x, "NCHW")    x (N, *spatial, C), any strides -> y (N, C, *spatial), contiguous

The bits are copied, never rounded. On the GPU one launch of kernels/layout.cu's `layout_transform` (a tiled
transpose) when x is C-contiguous in its own layout; the CPU reference is NumPy's transposed copy.
"""
from __future__ import annotations

from ._common import backend, check_arrays

__all__ = ["layout_transform"]

LAYOUTS = ("NCHW", "NHWC")


def layout_transform(x, layout: str):
    check_arrays("layout_transform", x=x)
    if layout not in LAYOUTS:
        raise ValueError(f"layout_transform: layout must be one of {LAYOUTS}, got {layout!r}")
    if x.ndim < 3:
        raise ValueError(f"layout_transform: x must have a batch, a channel and at least one spatial dimension, "
                         f"got shape {tuple(x.shape)}")
    return backend("layout", x).layout_transform(x, layout)
