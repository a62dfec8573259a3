"""torch.sparse: functions of sparse COO tensors (minidl/ops/sparse.py has the tensor and the products).

    minidl.sparse.mm(sparse, dense)   the sparse-dense product (either order), a dense result, with gradients
    minidl.sparse.sum(sparse, dim)    all entries summed; along dims, the dense form's sum
"""
from __future__ import annotations

from .ops.sparse import SparseTensor, mm, sparse_coo_tensor  # noqa: F401  (torch.sparse.sparse_coo_tensor too)


def sum(input, dim=None, dtype=None):  # noqa: A001  (torch.sparse.sum)
    """The entries of a sparse tensor summed: all of them (a 0-d tensor), or along `dim` (a dense tensor)."""
    if not isinstance(input, SparseTensor):
        raise TypeError(f"sparse.sum: expects a sparse tensor, got {type(input).__name__}")
    return input.sum(dim, dtype=dtype)


def addmm(mat, mat1, mat2, *, beta=1, alpha=1):
    """beta * mat + alpha * (mat1 @ mat2) with mat1 sparse (torch.sparse.addmm): a dense result."""
    return beta * mat + alpha * mm(mat1, mat2)
