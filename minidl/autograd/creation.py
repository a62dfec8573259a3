"""Tensor factories with PyTorch's names: tensor, zeros, ones, full, empty, arange, linspace, eye,
rand, randn, randint, their *_like forms, and from_numpy."""
from __future__ import annotations

import numpy as np

from .. import _device, random
from .tensor import Tensor, _to_array, get_default_dtype


def _shape(size, op="size"):
    """A shape from (d0, d1, ...) or ((d0, d1, ...),): integers >= 0, as torch (2.5 is a TypeError)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)) or len(size) == 1 and type(size[0]).__name__ == "Size":
        size = tuple(size[0])
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) and not (
                isinstance(s, Tensor) and s.ndim == 0 and s.dtype.kind in "iu"):
            raise TypeError(f"{op}: size must be a tuple of ints, got {tuple(size)!r}")
    size = tuple(int(s) for s in size)
    if any(s < 0 for s in size):
        raise ValueError(f"{op}: negative dimension in size {size}")
    return size


def _finish(array, requires_grad):
    t = Tensor._make(array)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data` (a list, number, NumPy/CuPy array or tensor)."""
    src = data._data if isinstance(data, Tensor) else data
    t = Tensor._make(_to_array(src, dtype, device))
    if t._data is src:
        t._data = t._data.copy()
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(array: np.ndarray):
    """A tensor sharing memory with a NumPy array (no copy)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return Tensor._make(array)


def as_tensor(data, dtype=None, device=None):
    """A tensor sharing `data`'s memory when it already is an array of that dtype and device, else a copy."""
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    return Tensor._make(_to_array(data._data if isinstance(data, Tensor) else data, dtype, device))


def _xp(device):
    return _device.array_module("cpu" if device is None else device)


def _dt(dtype):
    return np.dtype(get_default_dtype() if dtype is None else dtype)


def _with_device(fn, device):
    if device is None or _device.Device(device).type == "cpu":
        return fn()
    cupy = _device.require_cuda()
    with cupy.cuda.Device(_device.Device(device).index):
        return fn()


def zeros(*size, dtype=None, device=None, requires_grad=False):
    s = _shape(size, "zeros")
    return _finish(_with_device(lambda: _xp(device).zeros(s, dtype=_dt(dtype)), device), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    s = _shape(size, "ones")
    return _finish(_with_device(lambda: _xp(device).ones(s, dtype=_dt(dtype)), device), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    s = _shape((size,), "full") if not isinstance(size, int) else _shape((size,), "full")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if isinstance(fill_value, (str, bytes)) or not np.isscalar(fill_value) and not isinstance(fill_value, np.generic):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__} {fill_value!r}")
    if dtype is None:
        dtype = np.int64 if isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, bool) else (
            np.bool_ if isinstance(fill_value, bool) else get_default_dtype()
        )
    return _finish(_with_device(lambda: _xp(device).full(s, fill_value, dtype=np.dtype(dtype)), device), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):
    s = _shape(size, "empty")
    return _finish(_with_device(lambda: _xp(device).empty(s, dtype=_dt(dtype)), device), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    _shape((n,) if m is None else (n, m), "eye")
    return _finish(_with_device(lambda: _xp(device).eye(n, m, dtype=_dt(dtype)), device), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    for name, v in (("start", start), ("end", end), ("step", step)):
        if not isinstance(v, (int, float, np.integer, np.floating, np.bool_)):   # bools count as 0/1, as torch
            raise TypeError(f"arange: {name} must be a number, got {type(v).__name__} {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise ValueError(f"arange: upper bound and larger bound inconsistent with step sign: start={start}, "
                         f"end={end}, step={step}")
    if dtype is None:
        is_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = np.int64 if is_int else get_default_dtype()
    return _finish(_with_device(lambda: _xp(device).arange(start, end, step, dtype=np.dtype(dtype)), device), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """steps values from start to end, computed in float64 and rounded once to dtype. start and end may
    be numbers or 0-d tensors (torch's tensor overload; read on the host)."""
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"linspace: steps must be an int >= 0, got {steps!r}")
    return _finish(
        _with_device(lambda: _xp(device).linspace(start, end, steps, dtype=np.float64).astype(_dt(dtype)), device),
        requires_grad,
    )


def rand(*size, dtype=None, device=None, requires_grad=False):
    """Uniform on [0, 1), from minidl's seeded generator (see manual_seed)."""
    return _finish(random.uniform_array(_shape(size, "rand"), 0.0, 1.0, _dt(dtype), device or "cpu"), requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False):
    """Standard normal, from minidl's seeded generator."""
    return _finish(random.normal_array(_shape(size, "randn"), 0.0, 1.0, _dt(dtype), device or "cpu"), requires_grad)


def randint(low, high=None, size=(), dtype=None, device=None):
    """Integers in [low, high): randint(high, size) or randint(low, high, size), as torch.randint."""
    if isinstance(high, (tuple, list)) or (high is not None and type(high).__name__ == "Size"):
        low, high, size = 0, low, high       # randint(high, size)
    if high is None:
        low, high = 0, low
    if not low < high:
        raise ValueError(f"randint: the range [low, high) = [{low}, {high}) is empty (low must be < high)")
    return _finish(random.integers_array(low, high, _shape((size,), "randint"), np.dtype(dtype or np.int64), device or "cpu"), False)


def randperm(n, device=None):
    return Tensor._make(random.permutation_array(n, device or "cpu").astype(np.int64))


def _like(t, dtype, device):
    return dict(dtype=dtype or t.dtype, device=device or t.device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    return zeros(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    return ones(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    return full(t.shape, fill_value, **_like(t, dtype, device), requires_grad=requires_grad)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return empty(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def rand_like(t, dtype=None, device=None, requires_grad=False):
    return rand(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def randn_like(t, dtype=None, device=None, requires_grad=False):
    return randn(t.shape, **_like(t, dtype, device), requires_grad=requires_grad)


def randint_like(t, low, high=None, dtype=None, device=None):
    return randint(low, high, t.shape, **_like(t, dtype, device))
