"""CuPy launcher of kernels/layout.cu: NCHW <-> NHWC as one launch of `layout_transform` (a tiled batched
transpose). CuPy's ascontiguousarray of a transposed view does the same copy with strided accesses on one side,
and costs ~40 us of host time per call against ~8 us here (the launch is planned once per shape). Arrays
that are not C-contiguous in their own layout, and element sizes other than 1, 2, 4 and 8 bytes, go through
CuPy's copy. Arguments were validated by minidl/primitives/layout.py."""
from __future__ import annotations

import cupy
import numpy as np

from .._common import to_channels_first, to_channels_last
from ._compile import get_template_kernel

KERNEL = "layout_transform"   # a template over the element: layout_transform<unsigned short> ...
PAIRS = "layout_transform_pairs"   # 2-byte elements, even rows and columns: moved as 4-byte pairs (a template
                                   # over the pair's type: layout_transform_pairs<unsigned int>)
_ELEMENT = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_plans: dict = {}   # (itemsize, shape, layout, device) -> the launch, all but the addresses (_plan)
_PLAN_CACHE_SIZE = 1024
_NOTHING_TO_COPY = "an empty array's plan: no launch"   # (a kernel slot that is not None and is never called)


def layout_transform(x, layout: str, out=None):
    """The transposed copy of x (see minidl/primitives/layout.py); out: a C-contiguous array of the result's shape and
    dtype to write instead of a new one (what a launcher hands in to write a result into the caller's memory)."""
    key = (x.itemsize, x.shape, layout, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(x.itemsize, x.shape, layout)
        if len(_plans) > _PLAN_CACHE_SIZE:
            _plans.pop(next(iter(_plans)))
    kernel, grid, args, out_shape, single = plan
    if kernel is None or not x._c_contiguous:
        view = to_channels_last(x, "NHWC") if layout == "NHWC" else to_channels_first(x, "NHWC")
        if out is None:
            return cupy.ascontiguousarray(view)
        out[...] = view
        return out
    if (x.data.ptr | (0 if out is None else out.data.ptr)) % 4 and single is not None:
        kernel, grid = single   # pairs need 4-byte aligned rows: one element at a time
    y = cupy.ndarray(out_shape, dtype=x.dtype) if out is None else out
    if grid is not None:
        kernel(grid, (32, 8), (x, y, *args))
    return y


def _plan(itemsize: int, shape: tuple, layout: str):
    """(kernel, grid, scalar arguments, output shape, the one-element-a-time (kernel, grid) when the plan moves
    pairs); kernel None: not an element size the kernel copies; grid None: nothing to copy. The kernels are the
    template's instantiations, fetched here once (get_template_kernel), so a launch enters no other file."""
    out_shape = (shape[0], *shape[2:], shape[1]) if layout == "NHWC" else (shape[0], shape[-1], *shape[1:-1])
    element = _ELEMENT.get(itemsize)
    if element is None:
        return None, None, None, out_shape, None
    batch = shape[0]
    spatial = 1
    for s in (shape[2:] if layout == "NHWC" else shape[1:-1]):
        spatial *= s
    rows, cols = (shape[1], spatial) if layout == "NHWC" else (spatial, shape[-1])
    if batch * rows * cols == 0:   # (nothing to copy: no kernel compiled for it)
        return _NOTHING_TO_COPY, None, None, out_shape, None
    args = (np.int64(batch), np.int32(rows), np.int32(cols))
    single = get_template_kernel("layout", f"{KERNEL}<{element}>"), (-(-cols // 32), -(-rows // 32), min(batch, 65535))
    if itemsize == 2 and rows % 2 == 0 and cols % 2 == 0:   # 4-byte pairs: 64 x 64 tiles
        return (get_template_kernel("layout", f"{PAIRS}<unsigned int>"), (-(-cols // 64), -(-rows // 64),
                min(batch, 65535)), args, out_shape, single)
    return (*single, args, out_shape, None)
