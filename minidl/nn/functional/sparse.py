"""Embedding and one_hot (torch.nn.functional's "sparse functions")."""
from __future__ import annotations

import numpy as np

from ... import _device, backends
from ... import primitives as P
from ..._device import get_array_module, is_cuda_array
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ._checks import _check_float_tensor, _check_same_device, _check_tensor


class Embedding(Function):
    """out[...] = weight[indices[...]] (the embedding primitive, minidl/primitives/embedding.py); backward adds dy's
    rows back into the rows their indices name (repeated indices sum). The padding_idx row gets no gradient (it
    stays the padding vector). On the GPU an out-of-range index (see embedding()) gives a NaN row and no gradient."""

    def forward(self, weight, indices=None, padding_idx=None, scale_grad_by_freq=False):
        self.indices, self.padding_idx, self.num = indices, padding_idx, weight.shape[0]
        self.scale_grad_by_freq = scale_grad_by_freq
        return P.embedding_forward(weight, indices, padding_idx=padding_idx)

    def backward(self, dy):
        if not self.scale_grad_by_freq:
            return P.embedding_backward(dy, self.indices, self.num, padding_idx=self.padding_idx)
        xp = get_array_module(dy)
        # each row's gradient divided by how often its index occurs in this batch (torch), then the primitive's sum
        idx = xp.where((self.indices >= 0) & (self.indices < self.num), self.indices, 0)   # (out-of-range: no gradient)
        counts = xp.bincount(idx.reshape(-1), minlength=self.num).astype(dy.dtype)
        scaled = dy / counts[idx][..., None]
        return P.embedding_backward(scaled, self.indices, self.num, padding_idx=self.padding_idx)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight (num_embeddings, embedding_dim) at the integer indices `input` (any shape).

    max_norm: the rows looked up whose norm_type-norm exceeds max_norm are first rescaled to norm
    max_norm, in place in weight (as torch). scale_grad_by_freq: each row's gradient is divided by
    the number of times its index occurs in input. sparse=True: minidl's gradient stays a dense array (the values of
    torch's sparse gradient, zeros elsewhere); optim.SparseAdam updates only the rows it touches."""
    op = "embedding"
    _check_tensor(op, "input", input)
    _check_float_tensor(op, "weight", weight)
    if input.dtype.kind not in "iu":
        raise TypeError(f"{op}: input must hold integer indices, got dtype {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    _check_same_device(op, input=input, weight=weight)
    num = weight.shape[0]
    idx = input._data
    # On the GPU the check stays on the device unless minidl.backends.cuda.check_indices asks for the host read: the
    # primitive reads no row for an out-of-range index and gives it a NaN row (and no gradient).
    if not is_cuda_array(idx) or backends.cuda.check_indices:
        if is_cuda_array(idx):
            _device.check_not_capturing(f"{op} with minidl.backends.cuda.check_indices=True",
                                        "the eager index check reads a flag back from the GPU")
        if idx.size and bool(((idx < 0) | (idx >= num)).any()):  # on the GPU: one value read back, so one sync
            raise ValueError(
                f"{op}: index out of range: input {input.shape} holds values in [{int(idx.min())}, {int(idx.max())}] "
                f"but weight {weight.shape} has {num} rows"
            )
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"{op}: padding_idx {padding_idx} must be within [{-num}, {num - 1}]")
        padding_idx = padding_idx % num
    if max_norm is not None:
        _embedding_renorm_(weight, idx, float(max_norm), float(norm_type))
    return Embedding.apply(weight, indices=idx, padding_idx=padding_idx, scale_grad_by_freq=bool(scale_grad_by_freq))


def _embedding_renorm_(weight, idx, max_norm, norm_type):
    """torch.embedding_renorm_: rows of weight at idx with norm > max_norm scaled to max_norm / (norm + 1e-7),
    in place and outside the graph."""
    xp = get_array_module(weight._data)
    rows = xp.unique(idx.reshape(-1))
    if rows.size == 0:
        return
    w = weight._data[rows]
    if norm_type == float("inf"):
        norms = xp.abs(w).max(axis=1)
    else:
        norms = (xp.abs(w) ** norm_type).sum(axis=1) ** (1.0 / norm_type)
    scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(w.dtype)
    weight._data[rows] = w * scale[:, None]


def one_hot(tensor, num_classes=-1):
    """int64 (..., num_classes) with a 1 at each index (no gradient)."""
    op = "one_hot"
    _check_tensor(op, "tensor", tensor)
    if tensor.dtype.kind not in "iu":
        raise TypeError(f"{op}: needs an integer tensor of class indices, got dtype {tensor.dtype}")
    xp = get_array_module(tensor._data)
    idx = tensor._data
    if num_classes == -1:
        num_classes = int(idx.max()) + 1 if idx.size else 0
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_classes):
        raise ValueError(f"{op}: class values must be in [0, {num_classes}), got [{int(idx.min())}, {int(idx.max())}]")
    out = (idx[..., None] == xp.arange(num_classes)).astype(np.int64)
    return Tensor._make(out)
