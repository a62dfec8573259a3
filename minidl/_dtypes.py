"""Floating-point dtypes, including the half-precision ones, shared by every layer of minidl.

dtypes are NumPy dtype objects (minidl.float32 == np.dtype("float32")). NumPy has float16 but no
bfloat16; `ml_dtypes` (the package JAX uses) adds it as a NumPy dtype, and CuPy >= 14 uses that same
dtype for its bfloat16 arrays, so one object names bfloat16 on the CPU and on the GPU. Its dtype
kind is "V" (a user-defined type), not "f": code that asks "is this a float?" must ask
`is_floating(dtype)` here, never `dtype.kind == "f"`.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

float16 = np.dtype(np.float16)
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int8, uint8, int16 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16)
int32, int64, bool_ = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_)

complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)   # (minidl/ops/complexops.py)

HALF_DTYPES = (float16, bfloat16)
FLOATING_DTYPES = (float16, bfloat16, float32, float64)
FLOATING_SET = frozenset(FLOATING_DTYPES)   # `a.dtype in FLOATING_SET`: is_floating for a dtype object, one lookup
DIFFERENTIABLE_SET = FLOATING_SET | {complex64, complex128}   # the dtypes whose tensors carry gradients
COMPLEX_OF = {float32: complex64, float64: complex128}           # a real dtype's complex counterpart ...
REAL_OF = {complex64: float32, complex128: float64}              # ... and back
_BY_NAME = {d.name: d for d in FLOATING_DTYPES}


def by_dtype(table: dict) -> dict:
    """A table keyed by dtype names ({"float16": 1, ...}) that answers dtype objects too: `table[a.dtype]`
    costs one dict lookup, where `a.dtype.name` is a Python property of NumPy's (~2 us) that a launcher
    would pay at every launch (issue 23: the host cost of an op)."""
    return {**table, **{_BY_NAME[name]: v for name, v in table.items()}}


def is_floating(dtype) -> bool:
    """float16, bfloat16, float32 or float64 (PyTorch's is_floating_point)."""
    return np.dtype(dtype) in FLOATING_SET


def is_half(dtype) -> bool:
    """float16 or bfloat16: the 16-bit floats, computed in float32 where no half kernel exists."""
    return np.dtype(dtype) in HALF_DTYPES


def promote_floats(a, b) -> np.dtype:
    """PyTorch's promotion of two floating dtypes: the wider wins; float16 with bfloat16 gives float32
    (neither holds the other: float16 has more mantissa, bfloat16 more exponent)."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.itemsize > b.itemsize else b


def finfo(dtype):
    """np.finfo that knows bfloat16 (np.finfo rejects it)."""
    dtype = np.dtype(dtype)
    return ml_dtypes.finfo(dtype) if dtype == bfloat16 else np.finfo(dtype)


def iinfo(dtype):
    """np.iinfo (bits, min, max) of an integer dtype, as torch.iinfo."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "iu":
        raise TypeError(f"iinfo: {dtype} is not an integer type (finfo is for floating types)")
    return np.iinfo(dtype)


def where(xp, cond, a, b):
    """xp.where(cond, a, b) for `a` and `b` (arrays or scalars) of one floating dtype, keeping that dtype.

    CuPy's where computes bfloat16 (ml_dtypes' dtype, kind "V") in float32 and returns float32 (seen on
    the H200 at 4b8d734), so the 16-bit floats are selected bit for bit through uint16 views, on both
    devices: a select copies bits, it does no arithmetic. Other dtypes go to xp.where as they are."""
    dtype = next(np.dtype(v.dtype) for v in (a, b) if hasattr(v, "dtype"))
    if not is_half(dtype):
        return xp.where(cond, a, b)

    def bits(v):
        if hasattr(v, "view") and not np.isscalar(v) and not isinstance(v, np.generic):
            if np.dtype(v.dtype) != dtype:
                raise TypeError(f"where: both operands must be {dtype.name}, got {np.dtype(v.dtype).name}")
            return v.view(np.uint16)
        return np.asarray(v, dtype=dtype).view(np.uint16)[()]   # a host scalar: passed by value, no copy

    return xp.where(cond, bits(a), bits(b)).view(dtype)
