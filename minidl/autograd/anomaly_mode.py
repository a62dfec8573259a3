"""Anomaly detection (torch.autograd.detect_anomaly / set_detect_anomaly): a debugging mode of the tape.

While it is on,
- every op recorded on the tape keeps the stack of the Python code that ran its forward pass;
- when a backward pass fails inside an op's backward, that stack is printed (as a warning) before the error
  goes on: the line of *your* forward code that made the op, not only the tape's frames;
- with check_nan (the default), every gradient an op's backward returns is checked, and the first one holding
  a NaN stops the backward pass with a RuntimeError naming the op and the position of that gradient, as torch
  does ("Function 'MulBackward' returned nan values in its 0th output.").

Both cost time (a stack per op; on the GPU each check waits for the device), which is why it is a mode and off
by default. Turn it on for a few steps while hunting a NaN, as with torch:

    with minidl.autograd.detect_anomaly():
        loss = model(x).sum()
        loss.backward()

    minidl.autograd.set_detect_anomaly(True)     # on until set_detect_anomaly(False); also a context manager
"""
from __future__ import annotations

import traceback
import warnings

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled", "is_anomaly_check_nan_enabled"]

# [enabled, check_nan]: read by Function.apply (the forward stack) and the backward loop (function.py)
MODE = [False, True]


def is_anomaly_enabled() -> bool:
    return MODE[0]


def is_anomaly_check_nan_enabled() -> bool:
    return MODE[1]


class set_detect_anomaly:
    """Anomaly detection on or off (mode), as a function call or a context manager (the old mode comes back at
    its exit)."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self.prev = tuple(MODE)
        MODE[0], MODE[1] = bool(mode), bool(check_nan)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        MODE[0], MODE[1] = self.prev
        return False


class detect_anomaly:
    """Anomaly detection inside a `with` block, or around a function as a decorator; warns that it slows the
    program down, as torch's does."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should only "
                      "be enabled for debugging.", stacklevel=2)

    def __enter__(self):
        self.prev = tuple(MODE)
        MODE[0], MODE[1] = True, self.check_nan
        return self

    def __exit__(self, *exc):
        MODE[0], MODE[1] = self.prev
        return False

    def __call__(self, fn):
        check_nan = self.check_nan

        def wrapper(*args, **kwargs):
            prev = tuple(MODE)
            MODE[0], MODE[1] = True, check_nan
            try:
                return fn(*args, **kwargs)
            finally:
                MODE[0], MODE[1] = prev

        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


def forward_stack() -> list:
    """The stack of the code that is running an op's forward (its last frames are Function.apply's own)."""
    return traceback.format_stack()[:-2]


def checked_backward(fn, grads_out):
    """fn.backward(*grads_out) under anomaly detection: the op's forward stack printed if it raises, and each
    returned gradient checked for NaN (check_nan)."""
    try:
        grads_in = fn.backward(*grads_out)
    except Exception:
        _show_forward(fn)
        raise
    if MODE[1]:
        for i, g in enumerate(grads_in if isinstance(grads_in, tuple) else (grads_in,)):
            if g is not None and g.dtype.kind in "fcV" and bool(_any_nan(g)):
                _show_forward(fn)
                raise RuntimeError(f"Function '{fn.name}Backward' returned nan values in its {i}th output.")
    return grads_in


def _any_nan(g):
    if g.dtype.kind == "V":   # bfloat16 (ml_dtypes' on NumPy, 16-bit storage on CuPy): checked as float32
        from .. import primitives as P

        g = P.cast(g, "float32")
    return bool((g != g).any())   # NaN is the one value unequal to itself (on the GPU this waits for the device)


def _show_forward(fn):
    stack = getattr(fn, "_anomaly_stack", None)
    if stack is None:
        warnings.warn(f"Error detected in {fn.name}Backward. No forward pass information available. Enable detect "
                      "anomaly during forward pass for more information.", stacklevel=3)
        return
    warnings.warn(f"Error detected in {fn.name}Backward. Traceback of forward call that caused the error:\n"
                  + "".join(stack), stacklevel=3)
