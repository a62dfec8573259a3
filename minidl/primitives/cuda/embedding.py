"""CuPy launchers of kernels/embedding.cu: one launch for the lookup, one (plus a memset, and for 16-bit data a
cast) for its gradient. float64 tables, which the kernels do not take, go through CuPy's indexing and scatter-add
with the same rules. Arguments were validated by minidl/primitives/embedding.py."""
from __future__ import annotations

import cupy
import numpy as np

from ._compile import get_template_kernel
from ._launch import STORAGE_KINDS as KINDS, contiguous, grid_stride_blocks

WARPS = 8   # rows (one warp each) per block
_INDEX = {np.dtype(np.int64): "long long", np.dtype(np.int32): "int"}


def _kernel(name, kind, ctype):
    """The instantiation of the template kernel `name` for the storage kind and the index type."""
    return get_template_kernel("embedding", f"{name}<{kind}, {ctype}>")


def _indices(indices):
    """indices as a contiguous int64 or int32 array (other integer dtypes converted) and its C type."""
    ctype = _INDEX.get(indices.dtype)
    if ctype is None:
        indices, ctype = indices.astype(cupy.int64), "long long"
    return contiguous(indices), ctype   # (a 0-d index stays 0-d)


def embedding_forward(weight, indices, *, padding_idx=None):
    kind = KINDS.get(weight.dtype)
    if kind is None:   # float64: CuPy's gather, out-of-range rows NaN
        bad = (indices < 0) | (indices >= weight.shape[0])
        return cupy.where(bad[..., None], cupy.nan, weight[cupy.where(bad, 0, indices)]).astype(weight.dtype)
    weight = cupy.ascontiguousarray(weight)
    indices, ctype = _indices(indices)
    dim = weight.shape[1]
    out = cupy.ndarray(indices.shape + (dim,), dtype=weight.dtype)
    n = indices.size
    if n and dim:
        vec = (dim * weight.itemsize) % 16 == 0 and weight.data.ptr % 16 == 0
        _kernel("embedding_forward", kind, ctype)(
            (grid_stride_blocks(n, WARPS, blocks_per_sm=16),), (32 * WARPS,),
            (weight, indices, out, np.int64(n), np.int64(weight.shape[0]), np.int32(dim), np.int32(vec)))
    return out


def embedding_backward(dout, indices, num, *, padding_idx=None):
    kind = KINDS.get(dout.dtype)
    dim = dout.shape[-1]
    if kind is None:   # float64
        dweight = cupy.zeros((num, dim), dtype=dout.dtype)
        flat = indices.reshape(-1)
        keep = (flat >= 0) & (flat < num)
        if padding_idx is not None:
            keep &= flat != padding_idx
        cupy.add.at(dweight, flat[keep], dout.reshape(-1, dim)[keep])
        return dweight
    dout = cupy.ascontiguousarray(dout)
    indices, ctype = _indices(indices)
    dweight = cupy.zeros((num, dim), dtype=cupy.float32)
    n = indices.size
    if n and dim and num:
        _kernel("embedding_backward", kind, ctype)(
            (grid_stride_blocks(n, WARPS, blocks_per_sm=16),), (32 * WARPS,),
            (dout, indices, dweight, np.int64(n), np.int64(num), np.int32(dim),
             np.int64(-1 if padding_idx is None else padding_idx)))
    if kind == 0:
        return dweight
    from .cast import cast

    return cast(dweight, dout.dtype)
