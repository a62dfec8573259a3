"""CuPy launcher of kernels/cast.cu: float32 / float16 / bfloat16 among themselves in one launch of `cast`
(CuPy's astype costs ~20 us of host time per call, the kernel launch a quarter of that: autocast makes
~150 casts per GPT step). Other dtypes, and strided arrays, go through CuPy's astype. Arguments were
validated by minidl/primitives/cast.py."""
from __future__ import annotations

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import STORAGE_KINDS as KINDS, THREADS, Plans, grid_stride_blocks


_plans = Plans()   # (size, dtype, target dtype, device) -> (kernel, grid, its arguments after the two arrays)
_ASTYPE = ("astype",)   # the plan of a pair of dtypes the kernel does not take (float64, integers): CuPy's astype


def cast(x, dtype):
    key = (x.size, x.dtype, dtype, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        in_kind, out_kind = KINDS.get(x.dtype), KINDS.get(dtype)
        n = x.size
        plan = _plans.keep(key, _ASTYPE if in_kind is None or out_kind is None else (
            get_kernel("cast", "cast") if n else None, (grid_stride_blocks(n),),
            (np.int64(n), np.int32(in_kind), np.int32(out_kind))))
    if plan is _ASTYPE or not x._c_contiguous:
        return x.astype(dtype)
    y = cupy.ndarray(x.shape, dtype=dtype)
    kernel, grid, args = plan
    if kernel is not None:
        kernel(grid, (THREADS,), (x, y, *args))
    return y
