"""NumPy reference of the embedding primitive (minidl/primitives/embedding.py): the lookup, with NaN rows for
out-of-range indices, and its gradient by np.add.at (16-bit gradients summed in float32, rounded once)."""
from __future__ import annotations

import numpy as np

from ..._dtypes import is_half


def embedding_forward(weight, indices, *, padding_idx=None):
    num = weight.shape[0]
    if indices.size and (indices.min() < 0 or indices.max() >= num):
        bad = (indices < 0) | (indices >= num)
        out = weight[np.where(bad, 0, indices)]
        out[bad] = np.nan
        return out
    return weight[indices]


def embedding_backward(dout, indices, num, *, padding_idx=None):
    dim = dout.shape[-1]
    acc = np.float32 if is_half(dout.dtype) else dout.dtype
    dweight = np.zeros((num, dim), dtype=acc)
    flat = indices.reshape(-1)
    rows = dout.reshape(-1, dim).astype(acc, copy=False)
    keep = (flat >= 0) & (flat < num)
    if padding_idx is not None:
        keep &= flat != padding_idx
    np.add.at(dweight, flat[keep], rows[keep])
    return dweight.astype(dout.dtype, copy=False)
