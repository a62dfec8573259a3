"""Argument checks of the ops that take Tensors (raised at the framework boundary, naming the op)."""
from __future__ import annotations

from .._dtypes import is_floating
from ..autograd.tensor import Tensor


def check_tensor(op, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")


def check_float_tensor(op, name, t):
    check_tensor(op, name, t)
    if not is_floating(t.dtype):
        raise TypeError(f"{op}: {name} must be a floating-point tensor, got dtype {t.dtype}")
