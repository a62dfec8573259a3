"""NumPy reference of the layout_transform primitive: the same values in the other memory format (a transposed
copy, contiguous)."""
from __future__ import annotations

import numpy as np


def layout_transform(x, layout: str):
    """layout "NHWC": x (N, C, *spatial) -> contiguous (N, *spatial, C); "NCHW": x (N, *spatial, C) -> contiguous
    (N, C, *spatial)."""
    axes = (0,) + tuple(range(2, x.ndim)) + (1,) if layout == "NHWC" else (0, x.ndim - 1) + tuple(range(1, x.ndim - 1))
    return np.ascontiguousarray(x.transpose(axes))
