"""embedding: a table lookup and its gradient (the first layer of every language model; cuDNN has none, the
frameworks write their own).

    out = embedding_forward(weight, indices, *, padding_idx=None)
          weight (num, dim) float32 / float16 / bfloat16 (float64 too); indices: any shape, int64 or int32;
          out: indices.shape + (dim,) in weight's dtype. An index outside [0, num) gives a NaN row: never a read
          past the table (the framework checks indices on the host first where it can afford the read-back).
    dweight = embedding_backward(dout, indices, num, *, padding_idx=None)
          dout: indices.shape + (dim,); dweight (num, dim) in dout's dtype: the rows of dout added into the rows
          their indices name (16-bit dout summed in fp32, rounded once). Out-of-range indices and padding_idx
          contribute nothing (the padding row stays the padding vector).

On the GPU one launch each (kernels/embedding.cu; the backward's additions are atomic, so their order is not
fixed), where CuPy's fancy indexing and scatter-add cost several library calls and their host time.
"""
from __future__ import annotations

import numpy as np

from ._common import backend, check_float_or_half, check_same_device, is_cuda_array, shape_str

__all__ = ["embedding_forward", "embedding_backward"]

def _check_indices(op, indices):
    if indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be integers, got dtype {indices.dtype}")


def _check_padding(op, padding_idx, num):
    if padding_idx is not None and not (isinstance(padding_idx, (int, np.integer)) and 0 <= padding_idx < num):
        raise ValueError(f"{op}: padding_idx must be None or an int in [0, {num}), got {padding_idx!r}")


def embedding_forward(weight, indices, *, padding_idx=None):
    op = "embedding_forward"
    check_same_device(op, weight=weight, indices=indices)
    check_float_or_half(op, weight=weight)
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-D (num_embeddings, embedding_dim), got shape {shape_str(weight.shape)}")
    _check_indices(op, indices)
    _check_padding(op, padding_idx, weight.shape[0])
    return backend("embedding", is_cuda_array(weight)).embedding_forward(weight, indices, padding_idx=padding_idx)


def embedding_backward(dout, indices, num, *, padding_idx=None):
    op = "embedding_backward"
    check_same_device(op, dout=dout, indices=indices)
    check_float_or_half(op, dout=dout)
    _check_indices(op, indices)
    if dout.ndim != indices.ndim + 1 or tuple(dout.shape[:-1]) != tuple(indices.shape):
        raise ValueError(f"{op}: dout must have shape indices.shape + (dim,) = {shape_str(tuple(indices.shape))} + "
                         f"(dim,), got {shape_str(dout.shape)}")
    num = int(num)
    if num < 0:
        raise ValueError(f"{op}: num must be >= 0, got {num}")
    _check_padding(op, padding_idx, num)
    return backend("embedding", is_cuda_array(dout)).embedding_backward(dout, indices, num, padding_idx=padding_idx)
