"""NumPy reference of the layout_transform primitive: the same values in the other memory format (a transposed
copy, contiguous)."""
from __future__ import annotations

import numpy as np

from .._common import to_channels_first, to_channels_last


def layout_transform(x, layout: str):
    """layout "NHWC": x (N, C, *spatial) -> contiguous (N, *spatial, C); "NCHW": x (N, *spatial, C) -> contiguous
    (N, C, *spatial)."""
    return np.ascontiguousarray(to_channels_last(x, "NHWC") if layout == "NHWC" else to_channels_first(x, "NHWC"))
