"""Argument checks of the ops that take Tensors (raised at the framework boundary, naming the op)."""
from __future__ import annotations

from .._dtypes import FLOATING_SET
from ..autograd.tensor import Tensor


def check_tensor(op, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")


def check_float_tensor(op, name, t):
    if not isinstance(t, Tensor):
        check_tensor(op, name, t)   # raises
    if t._data.dtype not in FLOATING_SET:   # (the array's dtype: no property call on the hot path)
        raise TypeError(f"{op}: {name} must be a floating-point tensor, got dtype {t.dtype}")
