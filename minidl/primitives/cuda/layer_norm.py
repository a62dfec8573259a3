"""CuPy launchers of kernels/layer_norm.cu: layer norm and RMS norm, forward and backward, in float32,
float16 and bfloat16 (fp32 statistics). Arguments were validated by minidl/primitives/layer_norm.py.

Forward and dx run one warp per row (WARPS_PER_BLOCK rows per block, a grid-stride loop over the
rows); dweight/dbias are column sums over the rows, split into `chunks` of rows whose partial sums the last block
of each column tile adds up in order (one launch; deterministic: the atomics only count the blocks).
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from ._compile import get_template_kernel
from ._launch import STORAGE_KINDS as KINDS, Plans, arrival_counters, float32_contiguous, grid_stride_blocks, \
    null_pointer, sm_count

WARPS_PER_BLOCK = 4
PARAM_ROWS = (32, 8)   # block of layer_norm_backward_params: 32 columns x 8 row lanes


def _kernel(name, dtype):
    kind = KINDS.get(dtype)
    if kind is None:
        raise TypeError(f"{name}: the layer norm kernels take float32, float16 or bfloat16, got {dtype}")
    return get_template_kernel("layer_norm", f"{name}<{kind}>")


def _rows_n(x, normalized_ndim):
    n = math.prod(x.shape[x.ndim - normalized_ndim:])
    return (x.size // n if n else 0), n


def _ptr(a):
    """An optional array argument: a null pointer for None, an address as it is, else the C-contiguous array."""
    return null_pointer() if a is None else a if type(a) is int else cupy.ascontiguousarray(a)


# Launch plans (issue 25: a GPT block normalises the same shapes every step): per (direction, x's shape and dtype,
# normalized_ndim, rms, whether there are a weight and a bias, device) the kernels, grids and shape arguments, so that
# a call makes its arrays and launches.
_plans = Plans()


def _forward_plan(x, normalized_ndim, rms):
    key = ("forward", x.shape, x.dtype, normalized_ndim, rms, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        rows, n = _rows_n(x, normalized_ndim)
        lead = x.shape[:x.ndim - normalized_ndim]
        stats_shape = lead if rms else (2, *lead)   # mean and rstd in one allocation (views cost less than one)
        plan = _plans.keep(key, (stats_shape, _kernel("layer_norm_forward", x.dtype) if rows and n else None,
                                 (grid_stride_blocks(rows, WARPS_PER_BLOCK, blocks_per_sm=16),),
                                 (32 * WARPS_PER_BLOCK,), (np.int64(rows), np.int32(n))))
    return plan


def layer_norm_forward(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, rms=False):
    x = cupy.ascontiguousarray(x)
    stats_shape, kernel, grid, block, shape_args = _forward_plan(x, normalized_ndim, rms)
    y = cupy.ndarray(x.shape, dtype=x.dtype)
    stats = cupy.ndarray(stats_shape, dtype=cupy.float32)
    mean, rstd = (None, stats) if rms else stats
    if kernel is not None:
        kernel(grid, block, (x, _ptr(weight), _ptr(bias), y, null_pointer() if mean is None else mean, rstd,
                             *shape_args, np.float32(eps), np.int32(bool(rms))))
    return y, mean, rstd


def _backward_plan(x, normalized_ndim, has_weight, has_bias):
    key = ("backward", x.shape, x.dtype, normalized_ndim, has_weight, has_bias, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        rows, n = _rows_n(x, normalized_ndim)
        data = (_kernel("layer_norm_backward_data", x.dtype) if rows and n else None,
                (grid_stride_blocks(rows, WARPS_PER_BLOCK, blocks_per_sm=16),), (32 * WARPS_PER_BLOCK,),
                (np.int64(rows), np.int32(n)))
        params = None
        if has_weight and rows:
            col_blocks = (n + 31) // 32
            # enough chunks of rows to give every SM a few blocks, each chunk at least 32 rows long
            chunks = max(1, min((rows + 31) // 32, (4 * sm_count() + col_blocks - 1) // col_blocks))
            rows_per_chunk = (rows + chunks - 1) // chunks
            chunks = (rows + rows_per_chunk - 1) // rows_per_chunk
            params = (_kernel("layer_norm_backward_params", x.dtype), (col_blocks, chunks), chunks, n,
                      (np.int64(rows), np.int32(n), np.int64(rows_per_chunk)),
                      _kernel("layer_norm_params_finish", x.dtype), ((n + 255) // 256,),
                      (np.int32(chunks), np.int32(n)))
        plan = _plans.keep(key, (data, params, x.shape[x.ndim - normalized_ndim:], rows))
    return plan


def layer_norm_backward(x, dy, weight, mean, rstd, *, normalized_ndim=1, rms=False, has_bias=True):
    x, dy = cupy.ascontiguousarray(x), cupy.ascontiguousarray(dy)
    has_bias = has_bias and not rms and weight is not None
    (kernel, grid, block, shape_args), params, shape, rows = _backward_plan(x, normalized_ndim, weight is not None,
                                                                            has_bias)
    dx = cupy.ndarray(x.shape, dtype=x.dtype)
    mean_arg = null_pointer() if mean is None else float32_contiguous(mean)
    rstd = float32_contiguous(rstd)
    if kernel is not None:
        kernel(grid, block, (x, dy, _ptr(weight), mean_arg, rstd, dx, *shape_args))
    if weight is None:
        return dx, None, None
    dweight = cupy.ndarray(shape, dtype=weight.dtype)
    dbias = cupy.ndarray(shape, dtype=weight.dtype) if has_bias else None
    if not rows:
        dweight.fill(0)
        if dbias is not None:
            dbias.fill(0)
        return dx, dweight, dbias
    kernel, grid, chunks, n, shape_args, finish, finish_grid, finish_args = params
    # the partial sums of dweight and dbias in one allocation: rows [0, chunks) and [chunks, 2 chunks), passed by
    # address (no views made)
    part = cupy.ndarray((2 * chunks if dbias is not None else chunks, n), dtype=cupy.float32)
    part_w = part.data.ptr
    part_b = part_w + 4 * chunks * n if dbias is not None else None
    arrivals = arrival_counters(grid[0])   # the last block of each column tile writes dweight, dbias: one launch
    kernel(grid, PARAM_ROWS, (x, dy, mean_arg, rstd, part_w, _ptr(part_b), *shape_args,
                              null_pointer() if arrivals is None else arrivals, dweight, _ptr(dbias)))
    if arrivals is None:
        finish(finish_grid, (256,), (part_w, _ptr(part_b), dweight, _ptr(dbias), *finish_args))
    return dx, dweight, dbias
