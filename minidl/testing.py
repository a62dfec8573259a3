"""torch.testing.assert_close: two tensors (or numbers, NumPy arrays, sequences, dicts of them) equal to within a
tolerance, |actual - expected| <= atol + rtol * |expected| elementwise, with PyTorch's default tolerances per dtype
and its checks of shape, dtype and device first. Raises AssertionError saying how far apart they are."""
from __future__ import annotations

import numbers

import numpy as np

__all__ = ["assert_close"]

# PyTorch's defaults (rtol, atol) by dtype name; other dtypes (integers, bool): exact
_TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
               "float64": (1e-7, 1e-7), "complex64": (1.3e-6, 1e-5), "complex128": (1e-7, 1e-7)}


def _host(x):
    """(NumPy array, dtype name, device name, is a tensor) of one tensor-like."""
    from .autograd.tensor import Tensor

    if isinstance(x, Tensor):
        return x.detach().cpu().numpy(), str(x.dtype).replace("minidl.", ""), str(x.device.type), True
    if isinstance(x, np.ndarray):
        return x, x.dtype.name, "cpu", True
    if isinstance(x, (bool, numbers.Number)):
        a = np.asarray(x)
        return a, a.dtype.name, "cpu", False
    raise TypeError(f"assert_close: cannot compare {type(x).__name__} values (tensors, arrays, numbers, and "
                    "sequences or dicts of them)")


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False, check_device=True,
                 check_dtype=True, check_layout=True, check_stride=False, msg=None):
    if (rtol is None) != (atol is None):
        raise ValueError(f"assert_close: pass both rtol and atol, or neither (got rtol={rtol}, atol={atol})")
    if isinstance(actual, dict) and isinstance(expected, dict):
        if actual.keys() != expected.keys():
            raise AssertionError(f"The keys of the mappings do not match: {sorted(actual)} != {sorted(expected)}")
        for key in actual:
            _close(actual[key], expected[key], rtol, atol, equal_nan, check_device, check_dtype, msg, f"item [{key!r}]")
        return
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            raise AssertionError(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=check_device,
                         check_dtype=check_dtype, msg=msg)
        return
    _close(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, "")


def _close(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, where):
    a, a_dtype, a_device, _ = _host(actual)
    e, e_dtype, e_device, _ = _host(expected)
    prefix = f"{where}: " if where else ""
    if a.shape != e.shape:
        raise AssertionError(msg or f"{prefix}The values for attribute 'shape' do not match: {a.shape} != {e.shape}.")
    if check_dtype and a_dtype != e_dtype:
        raise AssertionError(msg or f"{prefix}The values for attribute 'dtype' do not match: {a_dtype} != {e_dtype}.")
    if check_device and a_device != e_device:
        raise AssertionError(msg or f"{prefix}The values for attribute 'device' do not match: {a_device} != "
                                    f"{e_device}.")
    if rtol is None:
        rtol, atol = max(_TOLERANCES.get(a_dtype, (0.0, 0.0)), _TOLERANCES.get(e_dtype, (0.0, 0.0)))
    a64, e64 = a.astype(np.float64) if a.dtype.kind != "c" else a, e.astype(np.float64) if e.dtype.kind != "c" else e
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a64 - e64)
        ok = diff <= atol + rtol * np.abs(e64)
        ok |= a64 == e64   # infinities of one sign
        if equal_nan:
            ok |= np.isnan(a64) & np.isnan(e64)
    if ok.all():
        return
    if msg is not None:
        raise AssertionError(msg)
    bad = int((~ok).sum())
    finite = np.where(np.isnan(diff), np.inf, diff)
    worst = np.unravel_index(int(np.argmax(finite)), finite.shape) if finite.size else ()
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(e64 != 0, finite / np.abs(e64), np.inf)
    worst_rel = np.unravel_index(int(np.argmax(rel)), rel.shape) if rel.size else ()
    kind = "Scalars are" if a.ndim == 0 else "Tensor-likes are"
    raise AssertionError(
        f"{prefix}{kind} not close!\n\nMismatched elements: {bad} / {ok.size} ({100 * bad / max(ok.size, 1):.1f}%)\n"
        f"Greatest absolute difference: {finite[worst]} at index {tuple(int(i) for i in worst)} (up to {atol} "
        f"allowed)\nGreatest relative difference: {rel[worst_rel]} at index {tuple(int(i) for i in worst_rel)} "
        f"(up to {rtol} allowed)")


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """torch.testing.assert_allclose, the deprecated form of assert_close: numbers and arrays become tensors of the
    other side's kind, NaNs are equal by default, and dtypes need not match."""
    import warnings

    from .autograd.tensor import Tensor

    warnings.warn("testing.assert_allclose() is deprecated since torch 1.12; use testing.assert_close()",
                  FutureWarning, stacklevel=2)
    if not isinstance(actual, Tensor):
        actual = Tensor(np.asarray(actual))
    if not isinstance(expected, Tensor):
        expected = Tensor(np.asarray(expected, dtype=actual.dtype))
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=False,
                 msg=msg or None)


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    """A tensor of random values for tests (torch.testing.make_tensor): floating and integer values uniform in
    [low, high) (default [-9, 9] and [-9, 10)), booleans at random; exclude_zero replaces zeros by the smallest
    positive step; noncontiguous gives a strided view of the same values."""
    from . import random as _random
    from .ops.creation import tensor as _tensor

    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    dtype = np.dtype(dtype)
    rng = _random.cpu_generator()
    if dtype == np.bool_:
        values = rng.integers(0, 2, size=shape).astype(bool)
    elif dtype.kind in "iu":
        lo = -9 if low is None else int(np.ceil(low))
        hi = 10 if high is None else int(np.ceil(high))
        lo = max(lo, 0) if dtype.kind == "u" else lo
        values = rng.integers(lo, hi, size=shape).astype(dtype)
    else:
        lo, hi = (-9.0 if low is None else float(low)), (9.0 if high is None else float(high))
        if dtype.kind == "c":
            part = rng.uniform(lo, hi, size=shape + (2,))
            values = (part[..., 0] + 1j * part[..., 1]).astype(dtype)
        else:
            values = rng.uniform(lo, hi, size=shape).astype(dtype)
    if exclude_zero:
        tiny = 1 if dtype.kind in "iub" else np.finfo(np.float32 if dtype.kind == "V" else dtype).tiny
        values = np.where(values == 0, values.dtype.type(tiny), values)
    t = _tensor(values, dtype=dtype, device=device)
    if noncontiguous and t.numel() > 1:
        doubled = t.repeat_interleave(2, dim=-1) if t.ndim else t
        t = doubled[..., ::2] if t.ndim else t
    if memory_format is not None:
        t = t.contiguous(memory_format=memory_format)
    return t.requires_grad_(True) if requires_grad else t
