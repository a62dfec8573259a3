"""PyTorch's type promotion, in one table used by every op that combines tensors (arithmetic,
comparisons, matmul, cat/stack, where, maximum/minimum).

Two rules, as torch.result_type:

1. Between two dtypes (`promote_types`): bool < integers < floating. Within the integers NumPy's
   table is torch's (uint8 + int8 -> int16, int32 + int64 -> int64). An integer with a float gives
   that float (int64 + float16 -> float16, where NumPy would say float64). float16 + bfloat16 ->
   float32; otherwise the wider float.
2. Between operands (`result_type`): tensors with dims outrank 0-d tensors, which outrank Python
   numbers; a lower-ranked operand changes the result only if it is of a higher *category*
   (bool < integer < float). So float32 tensor + float64 0-d tensor -> float32, int64 tensor + 2.5
   -> the default float dtype, uint8 tensor + 1000 -> uint8 (as torch).

NumPy alone gives float64 for int64 @ float32 and for cat([int64, float32]); this table is why
minidl gives float32 like PyTorch.
"""
from __future__ import annotations

import numbers

import numpy as np

from .._dtypes import bfloat16

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3


def category(dtype) -> int:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return _BOOL
    if dtype.kind in "iu":
        return _INT
    if dtype.kind == "c":
        return _COMPLEX
    return _FLOAT  # 'f' and the ml_dtypes floats (bfloat16 has kind 'V')


def _is_bfloat16(dtype) -> bool:
    return np.dtype(dtype) == bfloat16


def promote_types(a, b) -> np.dtype:
    """torch.promote_types for bool, uint8, int8..int64, float16, bfloat16, float32, float64."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        # The higher category wins whole: int64 + float16 -> float16, bool + int8 -> int8.
        return a if ca > cb else b
    if ca == _FLOAT and (_is_bfloat16(a) or _is_bfloat16(b)):
        other = b if _is_bfloat16(a) else a
        return np.dtype(np.float32) if other.itemsize <= 2 else other
    return np.promote_types(a, b)


def can_cast(from_, to) -> bool:
    """torch.can_cast: a cast is allowed unless it lowers the kind (complex -> float -> integer -> bool)."""
    return category(np.dtype(from_)) <= category(np.dtype(to))


def _scalar_dtype(value, default_float):
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(value, numbers.Integral):
        return np.dtype(np.int64)
    if isinstance(value, numbers.Real):
        return np.dtype(default_float)
    if isinstance(value, numbers.Complex):
        return np.dtype(np.complex64 if np.dtype(default_float) == np.float32 else np.complex128)
    raise TypeError(f"type promotion: {type(value).__name__} {value!r} is not a number")


def _combine(higher, lower):
    """torch's combine_categories: the lower-priority result counts only if of a higher category."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if category(higher) >= _FLOAT and category(higher) >= category(lower):
        return higher
    if category(higher) == _BOOL or category(lower) > category(higher):
        return promote_types(higher, lower)
    return higher


def result_type(*operands, default_float=np.float32) -> np.dtype:
    """The dtype an op on these operands computes in. Operands are objects with .dtype and .ndim
    (Tensors, arrays) or Python numbers."""
    dim_result = zero_result = scalar_result = None
    for x in operands:
        if x is None:
            continue
        if isinstance(x, (numbers.Number, np.bool_)) and not hasattr(x, "ndim"):
            dt = _scalar_dtype(x, default_float)
            scalar_result = dt if scalar_result is None else promote_types(scalar_result, dt)
        elif isinstance(x, np.generic):
            dt = _scalar_dtype(x.item(), default_float)  # a NumPy scalar counts as a Python number
            scalar_result = dt if scalar_result is None else promote_types(scalar_result, dt)
        elif x.ndim == 0:
            zero_result = x.dtype if zero_result is None else promote_types(zero_result, x.dtype)
        else:
            dim_result = x.dtype if dim_result is None else promote_types(dim_result, x.dtype)
    out = _combine(dim_result, _combine(zero_result, scalar_result))
    if out is None:
        raise ValueError("type promotion: no operands")
    return np.dtype(out)
