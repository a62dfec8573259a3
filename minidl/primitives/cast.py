"""cast: an array in another floating-point dtype (cuDNN's cudnnTransformTensor, for the data type only).

    y = cast(x, dtype)        x: float32 / float16 / bfloat16 (float64 too, and integers, through the
                              array library's own conversion); y: a new array of x's shape in dtype

Rounded to nearest even; float16 overflows to inf and NaN stays NaN, as NumPy's and PyTorch's casts.
On the GPU one launch of kernels/cast.cu's `cast` for the three floating-point storage types.
"""
from __future__ import annotations

import numpy as np

from ._common import backend, check_arrays

__all__ = ["cast"]


def cast(x, dtype):
    check_arrays("cast", x=x)
    return backend("cast", x).cast(x, np.dtype(dtype))
