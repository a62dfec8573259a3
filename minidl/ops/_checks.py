"""Argument checks of the ops that take Tensors (raised at the framework boundary, naming the op)."""
from __future__ import annotations

from .._dtypes import FLOATING_DTYPES
from ..autograd.tensor import Tensor

_FLOATING = frozenset(FLOATING_DTYPES)


def check_tensor(op, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")


def check_float_tensor(op, name, t):
    if not isinstance(t, Tensor):
        check_tensor(op, name, t)   # raises
    if t._data.dtype not in _FLOATING:   # (the array's dtype: no property call on the hot path)
        raise TypeError(f"{op}: {name} must be a floating-point tensor, got dtype {t.dtype}")
