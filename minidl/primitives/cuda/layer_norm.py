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
from ._launch import STORAGE_KINDS as KINDS, arrival_counters, grid_stride_blocks, null_pointer, sm_count

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


def layer_norm_forward(x, weight=None, bias=None, *, normalized_ndim=1, eps=1e-5, rms=False):
    x = cupy.ascontiguousarray(x)
    rows, n = _rows_n(x, normalized_ndim)
    lead = x.shape[:x.ndim - normalized_ndim]
    y = cupy.ndarray(x.shape, dtype=x.dtype)
    if rms:
        mean, rstd = None, cupy.ndarray(lead, dtype=cupy.float32)
    else:   # the two statistics in one allocation (each allocation costs more host time than a view)
        mean, rstd = cupy.ndarray((2, *lead), dtype=cupy.float32)
    if rows and n:
        blocks = grid_stride_blocks(rows, WARPS_PER_BLOCK, blocks_per_sm=16)
        _kernel("layer_norm_forward", x.dtype)(
            (blocks,), (32 * WARPS_PER_BLOCK,),
            (x, _ptr(weight), _ptr(bias), y, null_pointer() if mean is None else mean, rstd, np.int64(rows),
             np.int32(n), np.float32(eps), np.int32(bool(rms))))
    return y, mean, rstd


def layer_norm_backward(x, dy, weight, mean, rstd, *, normalized_ndim=1, rms=False, has_bias=True):
    x, dy = cupy.ascontiguousarray(x), cupy.ascontiguousarray(dy)
    rows, n = _rows_n(x, normalized_ndim)
    dx = cupy.ndarray(x.shape, dtype=x.dtype)
    mean_arg = null_pointer() if mean is None else cupy.ascontiguousarray(mean, dtype=cupy.float32)
    rstd = cupy.ascontiguousarray(rstd, dtype=cupy.float32)
    if rows and n:
        blocks = grid_stride_blocks(rows, WARPS_PER_BLOCK, blocks_per_sm=16)
        _kernel("layer_norm_backward_data", x.dtype)(
            (blocks,), (32 * WARPS_PER_BLOCK,),
            (x, dy, _ptr(weight), mean_arg, rstd, dx, np.int64(rows), np.int32(n)))
    if weight is None:
        return dx, None, None
    shape = x.shape[x.ndim - normalized_ndim:]
    dweight = cupy.ndarray(shape, dtype=weight.dtype)
    dbias = cupy.ndarray(shape, dtype=weight.dtype) if has_bias and not rms else None
    if not rows:
        dweight.fill(0)
        if dbias is not None:
            dbias.fill(0)
        return dx, dweight, dbias
    col_blocks = (n + 31) // 32
    # enough chunks of rows to give every SM a few blocks, each chunk at least 32 rows long
    chunks = max(1, min((rows + 31) // 32, (4 * sm_count() + col_blocks - 1) // col_blocks))
    rows_per_chunk = (rows + chunks - 1) // chunks
    chunks = (rows + rows_per_chunk - 1) // rows_per_chunk
    # the partial sums of dweight and dbias in one allocation: rows [0, chunks) and [chunks, 2 chunks), passed by
    # address (no views made)
    part = cupy.ndarray((2 * chunks if dbias is not None else chunks, n), dtype=cupy.float32)
    part_w = part.data.ptr
    part_b = part_w + 4 * chunks * n if dbias is not None else None
    arrivals = arrival_counters(col_blocks)   # the last block of each column tile writes dweight, dbias: one launch
    _kernel("layer_norm_backward_params", x.dtype)(
        (col_blocks, chunks), PARAM_ROWS,
        (x, dy, mean_arg, rstd, part_w, _ptr(part_b), np.int64(rows), np.int32(n), np.int64(rows_per_chunk),
         null_pointer() if arrivals is None else arrivals, dweight, _ptr(dbias)))
    if arrivals is None:
        _kernel("layer_norm_params_finish", x.dtype)(
            ((n + 255) // 256,), (256,), (part_w, _ptr(part_b), dweight, _ptr(dbias), np.int32(chunks), np.int32(n)))
    return dx, dweight, dbias
