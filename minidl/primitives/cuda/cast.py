"""CuPy launcher of kernels/cast.cu: float32 / float16 / bfloat16 among themselves in one launch of `cast`
(CuPy's astype costs ~20 us of host time per call, the kernel launch a quarter of that: autocast makes
~150 casts per GPT step). Other dtypes, and strided arrays, go through CuPy's astype. Arguments were
validated by minidl/primitives/cast.py."""
from __future__ import annotations

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import STORAGE_KINDS as KINDS, THREADS, grid_stride_blocks


def cast(x, dtype):
    in_kind, out_kind = KINDS.get(x.dtype), KINDS.get(dtype)
    if in_kind is None or out_kind is None or not x.flags.c_contiguous:
        return x.astype(dtype)
    y = cupy.ndarray(x.shape, dtype=dtype)
    n = x.size
    if n:
        get_kernel("cast", "cast")((grid_stride_blocks(n),), (THREADS,),
                                   (x, y, np.int64(n), np.int32(in_kind), np.int32(out_kind)))
    return y
