"""Comparisons (== != < <= > >=, equal, isclose), logical and bitwise ops, and the predicates (isnan, isinf,
signbit, isin, heaviside): no gradient, boolean results."""
from __future__ import annotations

import numbers

import numpy as np

from .. import _device, _dtypes
from .._device import get_array_module
from ..autograd.tensor import Tensor, get_default_dtype
from ._args import comparable, operand
from ._promotion import result_type
from .elementwise import where


def logical_and(a, b):
    return (a != 0) & (_as_tensor_like(a, b) != 0)


def logical_or(a, b):
    return (a != 0) | (_as_tensor_like(a, b) != 0)


def logical_xor(a, b):
    return (a != 0) != (_as_tensor_like(a, b) != 0)


def logical_not(a):
    return a == 0


def _as_tensor_like(a, b):
    return b if isinstance(b, Tensor) else Tensor._make(get_array_module(a._data).asarray(b))


def _predicate(fn):
    def run(t):
        return Tensor._make(fn(get_array_module(t._data), t._data))
    return run

isinf = _predicate(lambda xp, a: xp.isinf(a) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))

isposinf = _predicate(lambda xp, a: (xp.isinf(a) & (a > 0)) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))

isneginf = _predicate(lambda xp, a: (xp.isinf(a) & (a < 0)) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))

signbit = _predicate(lambda xp, a: xp.signbit(a) if a.dtype.kind in "fcV" else a < 0)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    e = elements._data if isinstance(elements, Tensor) else np.asarray(elements)
    t = test_elements._data if isinstance(test_elements, Tensor) else np.asarray(test_elements)
    xp = get_array_module(e)
    t = xp.asarray(t)
    if xp is not np and _dtypes.bfloat16 in (e.dtype, t.dtype):   # CuPy cannot sort bfloat16: compare in float32
        e, t = e.astype(_dtypes.float32) if e.dtype == _dtypes.bfloat16 else e, t.astype(_dtypes.float32) \
            if t.dtype == _dtypes.bfloat16 else t
    if hasattr(xp, "isin"):
        return Tensor._make(xp.isin(e, t, invert=invert))
    found = (e[..., None] == t.reshape(-1)).any(-1)      # without isin: compare with every test element
    return Tensor._make(~found if invert else found)


def heaviside(t, values):
    zero = t.new_zeros(())
    return where(t == 0, values.expand(*np.broadcast_shapes(tuple(t.shape), tuple(values.shape))),
                  where(t > 0, zero + 1, zero)).type(t.dtype)


def _bitwise(name, fn):
    def run(a, b):
        b = b if isinstance(b, Tensor) else _as_tensor_like(a, b)
        if _dtypes.is_floating(a.dtype) or _dtypes.is_floating(b.dtype):
            raise RuntimeError(f"{name}: not implemented for floating-point tensors (integer or bool only)")
        return fn(a, b)
    run.__name__ = name
    return run

bitwise_and = _bitwise("bitwise_and", lambda a, b: a & b)

bitwise_or = _bitwise("bitwise_or", lambda a, b: a | b)

bitwise_xor = _bitwise("bitwise_xor", lambda a, b: a ^ b)

bitwise_left_shift = _bitwise("bitwise_left_shift", lambda a, b: compare(a, b, lambda x, y: x << y,
                                                                         "bitwise_left_shift"))

bitwise_right_shift = _bitwise("bitwise_right_shift", lambda a, b: compare(a, b, lambda x, y: x >> y,
                                                                           "bitwise_right_shift"))


def bitwise_not(t):
    if _dtypes.is_floating(t.dtype):
        raise RuntimeError("bitwise_not: not implemented for floating-point tensors (integer or bool only)")
    return ~t


# ------------------------------------------------------------------------------------------------
# Comparisons: no gradient, boolean results, computed in the promoted dtype
# ------------------------------------------------------------------------------------------------
def compare(self, o, f, op="compare"):
    """Comparisons (and the logical/bitwise ops) compute in the promoted dtype, as torch."""
    if not isinstance(o, (Tensor, numbers.Number, np.bool_)):
        o = operand(self, o, op)
    dtype = result_type(self, o, default_float=get_default_dtype())
    o = operand(self, o, op, dtype)
    try:
        np.broadcast_shapes(self.shape, o.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {self.shape} and {o.shape} cannot be broadcast together") from None
    a, b = self._data, o._data
    if a.dtype != dtype:
        a = a.astype(dtype)
    if b.dtype != dtype:
        b = b.astype(dtype)
    return Tensor._make(f(a, b))




def __eq__(self, o):  # noqa: D105
    if not comparable(o):
        return NotImplemented  # `t == None`, `t in [None, "x"]`: Python's identity fallback, no error
    return compare(self, o, lambda a, b: a == b, "eq")


def __ne__(self, o):
    if not comparable(o):
        return NotImplemented
    return compare(self, o, lambda a, b: a != b, "ne")


def __lt__(self, o):
    return compare(self, o, lambda a, b: a < b)


def __le__(self, o):
    return compare(self, o, lambda a, b: a <= b)


def __gt__(self, o):
    return compare(self, o, lambda a, b: a > b)


def __ge__(self, o):
    return compare(self, o, lambda a, b: a >= b)


def __invert__(self):
    return Tensor._make(~self._data)


def __and__(self, o):
    return compare(self, o, lambda a, b: a & b, "bitwise_and")


def __or__(self, o):
    return compare(self, o, lambda a, b: a | b, "bitwise_or")


def __xor__(self, o):
    return compare(self, o, lambda a, b: a ^ b, "bitwise_xor")


def __lshift__(self, o):
    return bitwise_left_shift(self, o)


def __rshift__(self, o):
    return bitwise_right_shift(self, o)


def __rlshift__(self, o):
    return bitwise_left_shift(_as_tensor_like(self, o), self)


def __rrshift__(self, o):
    return bitwise_right_shift(_as_tensor_like(self, o), self)


def eq(self, o):
    return self == o


def ne(self, o):
    return self != o


def lt(self, o):
    return self < o


def le(self, o):
    return self <= o


def gt(self, o):
    return self > o


def ge(self, o):
    return self >= o


def isnan(self):
    return Tensor._make(get_array_module(self._data).isnan(self._data))


def isfinite(self):
    return Tensor._make(get_array_module(self._data).isfinite(self._data))


def _compare_pair(op, a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"{op}: expected two tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.device != b.device:
        raise RuntimeError(f"{op}: expected both tensors on the same device, got {a.device} and {b.device}")
    return a._data, b._data, _device.get_array_module(a._data)


def equal(a, b) -> bool:
    """True when a and b have the same shape and the same values (torch.equal; dtypes may differ)."""
    x, y, xp = _compare_pair("equal", a, b)
    return tuple(x.shape) == tuple(y.shape) and bool(xp.array_equal(x, y))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol * |b|, elementwise, as a bool tensor (torch.isclose; broadcasts)."""
    x, y, xp = _compare_pair("isclose", a, b)
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose: rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    return Tensor._make(xp.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """True when every element of a is close to b's: |a - b| <= atol + rtol * |b| (torch.allclose)."""
    return bool(isclose(a, b, rtol, atol, equal_nan)._data.all())
