"""One place where dims are checked and normalised, with PyTorch's rule and message.

Every op that takes a dim (sum, mean, max, softmax, cat, stack, unsqueeze, squeeze, permute, transpose,
flatten, split, chunk, gather, ...) calls `normalize_dim` / `normalize_dims` before touching the data:
a dim d of a tensor with n dims is valid when -n <= d < n (a 0-d tensor accepts -1 and 0, as PyTorch),
anything else is an IndexError that names the op, never a silently wrapped `d % n`.

    normalize_dim(5, 2, "unsqueeze")  -> IndexError: unsqueeze: Dimension out of range
                                          (expected to be in range of [-2, 1], but got 5)

Ops that insert a dim (unsqueeze, stack) pass ndim + 1.
"""
from __future__ import annotations

import numbers


def _as_int_dim(dim, op):
    # bool is an int in Python, but torch refuses it as a dim; so do we.
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        if hasattr(dim, "__index__") and not isinstance(dim, bool):
            try:
                return int(dim.__index__())
            except TypeError:
                pass
        raise TypeError(f"{op}: a dim must be an int, got {type(dim).__name__} {dim!r}")
    return int(dim)


def normalize_dim(dim, ndim: int, op: str) -> int:
    """dim in [-max(ndim,1), max(ndim,1)) -> its non-negative form; otherwise IndexError naming op.

    A 0-d tensor (ndim 0) accepts dim -1 and 0 (both mean 'the tensor itself'), as in PyTorch."""
    if dim.__class__ is not int:   # (a plain int, the usual dim, skips the ABC checks: ~1 us an op)
        dim = _as_int_dim(dim, op)
    n = ndim if ndim > 1 else 1
    if not -n <= dim < n:
        raise IndexError(
            f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def normalize_dims(dims, ndim: int, op: str, allow_repeats: bool = False) -> tuple:
    """An int, or a sequence of ints -> a tuple of normalised dims (each checked; no repeats unless
    allow_repeats). None is left to the caller (it usually means 'every dim')."""
    if dims.__class__ is not tuple and not isinstance(dims, list):   # (a tuple, the usual dims, tested first)
        if dims.__class__ is int or (isinstance(dims, numbers.Integral) and not isinstance(dims, bool)):
            return (normalize_dim(dims, ndim, op),)
        if not isinstance(dims, tuple):   # (a tuple subclass: torch.Size-like)
            raise TypeError(f"{op}: dims must be an int or a tuple of ints, got {type(dims).__name__}")
    n = ndim if ndim > 1 else 1
    out = tuple(d % n if d.__class__ is int and -n <= d < n else normalize_dim(d, ndim, op) for d in dims)
    if not allow_repeats and len(set(out)) != len(out):
        repeated = sorted({d for d in out if out.count(d) > 1})
        raise ValueError(f"{op}: dim {repeated[0]} appears multiple times in the list of dims {tuple(dims)}")
    return out


def reduction_axes(dim, ndim: int, op: str) -> tuple:
    """The array axes a reduction over `dim` works on: every axis for None (or an empty tuple, as
    torch.sum(x, dim=())), else the normalised dims. A 0-d tensor has no axes: dim 0/-1 reduce nothing."""
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        return tuple(range(ndim))
    dims = normalize_dims(dim, ndim, op)
    return dims if ndim else ()


def check_dim(self, dim, op):
    """Raise IndexError (torch's message, prefixed with op) for a dim (or dims) of tensor `self` out of range."""
    if dim is not None:
        normalize_dims(dim, self.ndim, op)


def dim_index(self, dim, op):
    """A dim in range for this tensor, made non-negative (0-d tensors accept 0 and -1)."""
    n = max(self.ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor of shape {tuple(self.shape)}")
    return dim % n
