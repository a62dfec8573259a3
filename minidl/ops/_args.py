"""Argument normalisation of the ops (one module for one kind of rule): Python numbers become 0-d tensors of
the promoted dtype, dims are checked, shapes resolved (-1) and broadcast, tensor lists checked for devices.
Dims themselves: _dims.py; dtypes: _promotion.py."""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from .. import _dtypes
from .._device import get_array_module, is_cuda_array
from ..autograd.tensor import Tensor, get_default_dtype
from ._promotion import result_type


def operand(self, other, op, dtype=None):
    """Python numbers become 0-d arrays of `dtype` (default: the dtype the promotion table gives
    this tensor with that number, so float32 + 2.5 stays float32); tensors are checked for device."""
    if isinstance(other, Tensor):
        if other.is_cuda != self.is_cuda:
            raise RuntimeError(
                f"{op}: expected both tensors on the same device, got {self.device} and {other.device}"
            )
        return other
    if isinstance(other, (numbers.Number, np.bool_)):
        xp = get_array_module(self._data)
        dt = result_type(self, other, default_float=get_default_dtype()) if dtype is None else dtype
        if xp is np:
            return Tensor._make(np.asarray(other, dtype=dt))
        # On the GPU a fill kernel, not a copy from host memory: a CUDA graph captures the fill with
        # the value as its argument (a captured host copy would read a staging buffer CuPy reuses).
        return Tensor._make(xp.full((), other, dtype=dt))
    if isinstance(other, (np.ndarray, list, tuple)) or is_cuda_array(other):
        return Tensor(other, device=self.device)
    if getattr(other, "is_sparse", False) is True:   # a sparse COO tensor (ops/sparse.py) beside a dense one: dense
        return operand(self, other.to_dense(), op, dtype)
    raise TypeError(f"{op}: unsupported operand of type {type(other).__name__} (expected a Tensor or a number)")


def promote(a, b, op):
    """Both tensors cast to the dtype of minidl.autograd._promotion.result_type (torch's rules);
    true division of integers gives the default float dtype, as torch.div does."""
    if a._data.dtype == b._data.dtype and (op != "div" or a._data.dtype.kind in "fcV"):
        return a, b
    dtype = result_type(a, b, default_float=get_default_dtype())
    if op == "div" and not _dtypes.is_floating(dtype):
        dtype = get_default_dtype()
    return a.type(dtype), b.type(dtype)


def comparable(o) -> bool:
    return isinstance(o, (Tensor, numbers.Number, np.bool_, np.ndarray, list, tuple)) or is_cuda_array(o)


def fits(number, dtype) -> bool:
    """Whether a Python number is exactly a value of `dtype` (0.5 is a float16, 0.1 and 1e5 are not)."""
    if isinstance(number, complex):
        return False
    with np.errstate(over="ignore", under="ignore"):
        v = np.asarray(number, dtype=np.float64).astype(dtype).astype(np.float64)
    return bool(v == number) or (np.isnan(number) and bool(np.isnan(v)))


def can_view(array, shape) -> bool:
    """Can `array` take `shape` without a copy? (NumPy decides from the strides; CuPy: contiguous only.)"""
    if tuple(array.shape) == tuple(shape) or array.flags.c_contiguous:
        return True
    if not isinstance(array, np.ndarray):
        return False
    try:
        np.reshape(array, shape, copy=False)   # raises when a copy would be needed (NumPy >= 2.1)
    except ValueError:
        return False
    except TypeError:   # NumPy < 2.1 has no copy argument: setting the shape of a view raises instead
        v = array.view()
        try:
            v.shape = shape
        except AttributeError:
            return False
    return True


def shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def resolve_shape(old, new):
    """The shape `new` (ints, one of them may be -1) for a tensor of shape `old`, checked. The usual call (plain
    non-negative ints of the same element count) is decided in one loop and one product."""
    unknown = -1
    for i, s in enumerate(new):
        if type(s) is not int or s < -1 or (s == -1 and unknown >= 0):
            break
        if s == -1:
            unknown = i
    else:   # plain ints, at most one of them -1 (x.view(n, -1)): one product each side
        if unknown < 0:
            if math.prod(new) == math.prod(old):
                return tuple(new)
        else:
            known, size = -math.prod(new), math.prod(old)
            if known and size % known == 0:
                return tuple(size // known if s == -1 else s for s in new)
    for s in new:
        if isinstance(s, bool) or not isinstance(s, (numbers.Integral, Tensor)):
            raise TypeError(f"shape entries must be ints, got {type(s).__name__} {s!r}")
    new = tuple(builtins.int(s) for s in new)
    bad = [s for s in new if s < -1]
    if bad:
        raise ValueError(f"invalid shape dimension {bad[0]}")
    size = builtins.int(np.prod(old))
    unknown = [i for i, s in enumerate(new) if s == -1]
    if len(unknown) > 1:
        raise ValueError("only one dimension can be -1")
    known = builtins.int(np.prod([s for s in new if s != -1]))
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"{size} elements do not divide into {new}")
        new = tuple(size // known if s == -1 else s for s in new)
    if builtins.int(np.prod(new)) != size:
        raise ValueError(f"{size} elements cannot take shape {new}")
    return tuple(new)


def check_devices(op, tensors):
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"{op}: expected all tensors on one device, got {sorted(map(str, devices))}")


def check_tensor_list(op, tensors):
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}: expected a sequence of tensors, got a single Tensor (wrap it in a list)")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected a sequence of tensors, but item {i} is a {type(t).__name__}")
    check_devices(op, tensors)
    return tensors


def cast_all(tensors):
    dtype = result_type(*tensors, default_float=get_default_dtype())
    return [t.type(dtype) for t in tensors]

FULL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))   # _binary's scalar fast path


def bfloat16_on_gpu(a) -> bool:
    """CuPy cannot sort, cumsum or round bfloat16 arrays (no kernels for that type): those ops widen
    them to float32, where every bfloat16 value is exact, and round the result back once."""
    return a.dtype == _dtypes.bfloat16 and get_array_module(a) is not np
