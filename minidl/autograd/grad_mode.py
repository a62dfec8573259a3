"""torch.inference_mode: no_grad (autograd/function.py keeps the grad modes every step uses), and
is_inference_mode_enabled() says so. torch's tensors made there cannot join a graph later; minidl's can: they
are ordinary tensors."""
from __future__ import annotations

from .function import _state, is_grad_enabled, no_grad

def is_inference_mode_enabled() -> bool:
    return getattr(_state, "inference", False)


class inference_mode(no_grad):
    """torch.inference_mode(mode=True): no_grad (when mode), noted for is_inference_mode_enabled(). A context
    manager or a decorator, with or without the call: @inference_mode or @inference_mode()."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):   # used bare as a decorator: @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev, self.prev_inference = is_grad_enabled(), is_inference_mode_enabled()
        if self.mode:
            _state.enabled = False
        _state.inference = self.mode

    def __exit__(self, *exc):
        _state.enabled, _state.inference = self.prev, self.prev_inference
        return False

    def __call__(self, fn):
        mode = self.mode

        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)

        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper
