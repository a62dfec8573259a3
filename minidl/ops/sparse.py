"""Sparse COO tensors: torch.sparse_coo_tensor, Tensor.to_sparse, and the sparse-dense product.

A sparse COO tensor stores only its nonzero entries: `indices` (ndim x nnz, int64), the coordinates of each entry,
and `values` (nnz,), the entries themselves. A graph's adjacency matrix is the usual example: a 2708-node graph
(Cora) has 7.3 million places and about 13 thousand edges. The operations a graph network needs are:

    sparse @ dense     out[i] = sum over entries (i, j, v) of v * dense[j]: gather the rows dense[j], scale them by v,
                       add them into out[i] (scatter_add). nnz x K multiply-adds, not M x N x K.
    dense @ sparse     the same product transposed: (sparse.t() @ dense.t()).t()
    dense + sparse     a dense result: the entries added into a copy of the dense tensor

Everything is written with the dense tensor operations (index_select, *, scatter_add), so gradients flow to the
dense operand and to `values` through the ordinary tape, on the CPU and the GPU alike. Entries may repeat an
index (an "uncoalesced" tensor, as torch builds them): repeated entries add up, in to_dense, in the products and in
`coalesce()`, which merges them. Only plain sparse tensors (sparse_dim == ndim, values of shape (nnz,)) are kept;
torch's hybrid tensors (dense trailing dimensions) are not.

Any other operation on a sparse tensor runs on its dense form where minidl meets one as an operand of a dense
op (ops/_args.operand), which is correct but not sparse: `to_dense()` says so explicitly.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor
from .._dtypes import int64
from ._promotion import promote_types
from .creation import zeros
from .joining import cat


class Layout:
    """torch.strided / torch.sparse_coo: how a tensor's elements are stored (Tensor.layout)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


strided = Layout("strided")
sparse_coo = Layout("sparse_coo")


def _index_tensor(indices, device):
    """indices as an int64 tensor on `device` (from a tensor, a NumPy array or nested lists)."""
    out = indices.detach() if isinstance(indices, Tensor) else Tensor(np.asarray(indices, dtype=np.int64))
    out = out.type(int64) if out.dtype != int64 else out
    return out.to(device)


class SparseTensor:
    """A sparse COO tensor (layout torch.sparse_coo): `indices()` (ndim x nnz) and `values()` (nnz,) of `shape`."""

    is_sparse = True
    layout = sparse_coo

    def __init__(self, indices: Tensor, values: Tensor, shape, coalesced: bool = False):
        if indices.ndim != 2 or values.ndim != 1 or indices.shape[1] != values.shape[0]:
            raise ValueError(f"sparse_coo_tensor: indices must be (ndim, nnz) and values (nnz,) (hybrid tensors with "
                             f"dense dimensions are not supported), got {tuple(indices.shape)} and "
                             f"{tuple(values.shape)}")
        if indices.shape[0] != len(shape):
            raise ValueError(f"sparse_coo_tensor: {indices.shape[0]} index rows for a {len(shape)}-d size "
                             f"{tuple(shape)}")
        self._idx, self._val, self.shape = indices, values, tuple(int(s) for s in shape)
        self._coalesced = coalesced

    # ---- what it is ----------------------------------------------------------------------------
    def size(self, dim=None):
        from ..autograd.return_types import Size

        return Size(self.shape) if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    ndim = property(dim)
    dtype = property(lambda self: self._val.dtype)
    device = property(lambda self: self._val.device)
    is_cuda = property(lambda self: self._val.is_cuda)
    requires_grad = property(lambda self: self._val.requires_grad)
    grad = property(lambda self: self._val.grad)

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return self._idx

    def values(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return self._val

    def _indices(self):
        return self._idx

    def _values(self):
        return self._val

    def _nnz(self):
        return self._val.shape[0]

    def is_coalesced(self):
        return self._coalesced

    def sparse_dim(self):
        return len(self.shape)

    def dense_dim(self):
        return 0

    def numel(self):
        return math.prod(self.shape)

    def __repr__(self):
        return (f"tensor(indices={self._idx!r},\n       values={self._val!r},\n       size={self.shape}, "
                f"nnz={self._nnz()}, layout=torch.sparse_coo)")

    # ---- conversions ---------------------------------------------------------------------------
    def _flat(self):
        """Each entry's row-major position in the dense tensor (int64, nnz)."""
        if not self.shape:   # a 0-d sparse tensor: every entry is the one element
            return zeros(self._nnz(), dtype=int64, device=self.device)
        flat = self._idx[0]
        for d in range(1, len(self.shape)):
            flat = flat * self.shape[d] + self._idx[d]
        return flat

    def to_dense(self):
        """The dense tensor: zeros with the entries added in (repeated ones add up). With gradients to values."""
        out = zeros(self.numel(), dtype=self.dtype, device=self.device)
        return out.scatter_add(0, self._flat(), self._val).reshape(self.shape)

    def coalesce(self):
        """The same tensor with each index once (repeated entries summed), indices sorted row-major."""
        if self._coalesced:
            return self
        flat = self._flat()._host_array()
        unique, inverse = np.unique(flat, return_inverse=True)
        values = zeros(len(unique), dtype=self.dtype, device=self.device)
        values = values.scatter_add(0, Tensor(inverse.astype(np.int64), device=self.device), self._val)
        coords = (np.stack(np.unravel_index(unique, self.shape)).astype(np.int64) if self.shape
                  else np.zeros((0, len(unique)), dtype=np.int64))
        return SparseTensor(Tensor(coords, device=self.device), values, self.shape, coalesced=True)

    def to_sparse(self):
        return self

    def to(self, *args, **kwargs):
        values = self._val.to(*args, **kwargs)
        return SparseTensor(self._idx.to(values.device), values, self.shape, self._coalesced)

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def type(self, dtype):
        return SparseTensor(self._idx, self._val.type(dtype), self.shape, self._coalesced)

    def float(self):
        return self.type(np.float32)

    def double(self):
        return self.type(np.float64)

    def long(self):
        return self.type(np.int64)

    def detach(self):
        return SparseTensor(self._idx, self._val.detach(), self.shape, self._coalesced)

    def requires_grad_(self, requires_grad=True):
        self._val.requires_grad_(requires_grad)
        return self

    def t(self):
        if len(self.shape) != 2:
            raise RuntimeError(f"t(): expects a 2-D sparse tensor, got {len(self.shape)}-D")
        return SparseTensor(self._idx.flip(0), self._val, self.shape[::-1])

    def transpose(self, dim0, dim1):
        order = list(range(len(self.shape)))
        order[dim0], order[dim1] = order[dim1], order[dim0]
        return SparseTensor(self._idx[order], self._val, tuple(self.shape[d] for d in order))

    # ---- arithmetic ----------------------------------------------------------------------------
    def __matmul__(self, other):
        return mm(self, other)

    def __rmatmul__(self, other):
        return mm(other, self)

    def __add__(self, other):
        if isinstance(other, SparseTensor):
            if other.shape != self.shape:
                raise RuntimeError(f"add: sparse sizes {self.shape} and {other.shape} differ")
            dtype = promote_types(self.dtype, other.dtype)   # (torch's promotion: int64 with float32 is float32)
            return SparseTensor(cat([self._idx, other._idx], 1), cat([self._val.type(dtype), other._val.type(dtype)]),
                                self.shape)
        return self.to_dense() + other    # sparse + dense: a dense tensor, as in torch

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __neg__(self):
        return SparseTensor(self._idx, -self._val, self.shape, self._coalesced)

    def __mul__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, Tensor) and other.ndim == 0):
            return SparseTensor(self._idx, self._val * other, self.shape, self._coalesced)
        if isinstance(other, Tensor):   # sparse * dense: the entries times the dense values at their indices
            picked = other.expand(self.shape).reshape(-1).index_select(0, self._flat())
            return SparseTensor(self._idx, self._val * picked, self.shape, self._coalesced)
        return NotImplemented

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, Tensor) and other.ndim == 0):
            return SparseTensor(self._idx, self._val / other, self.shape, self._coalesced)
        return NotImplemented

    def sum(self, dim=None, keepdim=False, dtype=None):
        """All entries summed (a 0-d tensor); along dims: the dense form's sum (a dense tensor)."""
        if dim is None:
            return self._val.sum(dtype=dtype) if dtype is not None else self._val.sum()
        return self.to_dense().sum(dim, keepdim=keepdim)


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, requires_grad=False,
                      is_coalesced=None, check_invariants=None):
    """A sparse COO tensor from indices (ndim x nnz, any integer array or tensor) and values (nnz,); size: the dense
    shape (default: each dimension's largest index + 1). Repeated indices are kept (uncoalesced) and add up."""
    if not isinstance(values, Tensor):   # (torch.tensor's rules: Python floats become the default dtype)
        from .creation import tensor

        values = tensor(values)
    if device is not None:
        values = values.to(device)
    if dtype is not None:
        values = values.type(dtype)
    if requires_grad:
        values = values.detach().requires_grad_(True)
    index = _index_tensor(indices, values.device)
    if index.ndim != 2:
        raise ValueError(f"sparse_coo_tensor: indices must be 2-D (ndim x nnz), got shape {tuple(index.shape)}")
    host = index._host_array()
    if host.size and host.min() < 0:
        raise ValueError("sparse_coo_tensor: indices must be non-negative")
    largest = host.max(axis=1) + 1 if host.size else np.zeros(index.shape[0], dtype=np.int64)
    if size is None:
        size = tuple(int(n) for n in largest)
    size = tuple(int(s) for s in size)
    if host.size and any(int(n) > s for n, s in zip(largest, size)):
        raise ValueError(f"sparse_coo_tensor: an index is out of bounds for size {size} (largest indices "
                         f"{tuple(int(n) - 1 for n in largest)})")
    return SparseTensor(index, values, size, coalesced=bool(is_coalesced))


def to_sparse(self, sparse_dim=None, *, layout=None):
    """Tensor.to_sparse(): the nonzero entries as a coalesced COO tensor (values keep their gradients)."""
    if layout not in (None, sparse_coo):
        raise NotImplementedError(f"to_sparse: layout {layout} is not supported; minidl has sparse_coo only")
    if sparse_dim not in (None, self.ndim):
        raise NotImplementedError("to_sparse: hybrid sparse tensors (sparse_dim < ndim) are not supported")
    coords = np.stack(np.nonzero(self._host_array())).astype(np.int64) if self.ndim else np.zeros((0, 1), np.int64)
    index = Tensor(coords, device=self.device)
    if self.ndim == 0:
        return SparseTensor(index, self.reshape(1), (), coalesced=True)
    flat = index[0]
    for d in range(1, self.ndim):
        flat = flat * self.shape[d] + index[d]
    return SparseTensor(index, self.reshape(-1).index_select(0, flat), self.shape, coalesced=True)


def to_dense(self, dtype=None):
    """Tensor.to_dense(): a dense tensor is its own dense form."""
    return self if dtype is None else self.type(dtype)


def is_sparse(self):
    return False


def layout(self):
    return strided


def mm(a, b):
    """The product of a sparse and a dense matrix, either order (torch.sparse.mm, torch.spmm, @): a dense result.
    sparse @ dense gathers the rows of `dense` the entries name, scales them by the entries and adds them into the
    rows of the result (scatter_add); gradients flow to the dense operand and to the entries."""
    if isinstance(a, SparseTensor) and isinstance(b, SparseTensor):
        return mm(a, b.to_dense()).to_sparse()
    if isinstance(b, SparseTensor):                # dense @ sparse = (sparse^T @ dense^T)^T
        if b.ndim != 2:
            raise RuntimeError(f"mm: the sparse operand must be 2-D, got size {b.shape}")
        return mm(b.t(), a.t()).t() if a.ndim == 2 else mm(b.t(), a)
    if not isinstance(a, SparseTensor):   # two dense matrices (torch.spmm takes them too): the dense product
        from .linalg import mm as dense_mm

        return dense_mm(a, b)
    if a.ndim != 2:
        raise RuntimeError(f"mm: the sparse operand must be 2-D, got size {a.shape}")
    if not isinstance(b, Tensor):
        b = Tensor(b, device=a.device)
    if b.ndim not in (1, 2) or b.shape[0] != a.shape[1]:
        raise RuntimeError(f"mm: sizes {a.shape} (sparse) and {tuple(b.shape)} cannot be multiplied")
    if b.is_cuda != a.is_cuda:
        raise RuntimeError(f"mm: expected both tensors on the same device, got {a.device} and {b.device}")
    dtype = promote_types(a.dtype, b.dtype)
    rows, cols = a._idx[0], a._idx[1]
    values = a._val.type(dtype)
    b = b.type(dtype)
    gathered = b.index_select(0, cols)                                     # (nnz, K) or (nnz,)
    contribution = gathered * (values.unsqueeze(1) if b.ndim == 2 else values)
    out = zeros((a.shape[0],) + tuple(b.shape[1:]), dtype=dtype, device=b.device)   # (allocated on b's device)
    index = rows.unsqueeze(1).expand(contribution.shape) if b.ndim == 2 else rows
    return out.scatter_add(0, index, contribution)


spmm = mm
