"""Devices: where a tensor's array lives, and the array module (NumPy or CuPy) that works on it.

minidl keeps one code path for the CPU and the GPU wherever NumPy and CuPy share an API (DeZero's
`get_array_module` idea). This is the only module of the framework layer that imports CuPy, and it
does so lazily: `import minidl` works on a machine without CuPy or without a GPU.
"""
from __future__ import annotations

import numpy as np

from . import _meta

# One definition of "which array module" for the whole library: the primitive library's (the lowest layer).
from .primitives import get_array_module, is_cuda_array  # noqa: F401

_cupy = None
_cupy_error: str | None = None


def _load_cupy():
    """Import CuPy once; remember why it failed so the error can say which part is missing."""
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy

            _cupy = cupy
        except Exception as e:  # ImportError, or a CUDA library that fails to load
            _cupy_error = f"CuPy is not installed or failed to import ({type(e).__name__}: {e})"
    return _cupy


def cuda_unavailable_reason() -> str | None:
    """None when the GPU path can run; otherwise a sentence saying whether CuPy or the GPU is missing."""
    cupy = _load_cupy()
    if cupy is None:
        return (
            f"{_cupy_error}. Install the GPU extra that matches your CUDA toolkit, e.g. "
            "`pip install -e \".[cuda13]\"` in a checkout (`.[cuda12]` for CUDA 12)."
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"CuPy is installed but no usable CUDA GPU was found ({type(e).__name__}: {e})."
    if count < 1:
        return "CuPy is installed but no CUDA GPU is visible (getDeviceCount() == 0)."
    return None


class Device:
    """A device: `Device("cpu")`, `Device("cuda")`, `Device("cuda:1")`. Compares equal to its string."""

    def __init__(self, spec="cpu"):
        if isinstance(spec, Device):
            self.type, self.index = spec.type, spec.index
            return
        if isinstance(spec, int) and not isinstance(spec, bool):   # torch.device(0) is cuda:0
            if spec < 0:
                raise ValueError(f"unknown device {spec!r}: a device index must be >= 0")
            spec = f"cuda:{spec}"
        text = str(spec).strip().lower()
        kind, _, idx = text.partition(":")
        if kind not in ("cpu", "cuda", "meta"):
            raise ValueError(f"unknown device {spec!r}: use 'cpu', 'cuda', 'cuda:N' or 'meta'")
        if kind in ("cpu", "meta"):
            if idx not in ("", "0"):
                raise ValueError(f"unknown device {spec!r}: the {kind} device has no index")
            self.type, self.index = kind, None
        else:
            if idx and not idx.isdigit():
                raise ValueError(f"unknown device {spec!r}: the index after 'cuda:' must be a number >= 0")
            self.type = "cuda"
            # "cuda" alone is the current GPU (cuda.set_device), as in torch; GPU 0 until one is set
            self.index = int(idx) if idx else (_cupy.cuda.runtime.getDevice() if _cupy is not None else 0)

    def __str__(self):
        return self.type if self.index is None else f"cuda:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other):
        try:
            other = Device(other)
        except (ValueError, TypeError):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __enter__(self):
        """`with minidl.device("meta"):` (torch's): factories and layers without device= make their tensors here."""
        from .ops import creation

        self._outer = creation._default_device
        creation.set_default_device(self)
        return self

    def __exit__(self, *exc):
        from .ops import creation

        creation.set_default_device(self._outer)
        return False


CPU = Device("cpu")


def require_cuda(op: str = "to('cuda')"):
    """Return the cupy module, or raise a RuntimeError that says what is missing."""
    reason = cuda_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"{op}: the CUDA path is not available: {reason}")
    return _cupy


META = Device("meta")


def device_of(array) -> Device:
    if is_cuda_array(array):
        return Device(f"cuda:{array.device.id}")
    return META if type(array) is _meta.MetaArray else CPU


def array_module(device) -> object:
    """numpy for the CPU, cupy for a GPU (the meta device's factories make shape-only arrays)."""
    kind = Device(device).type
    return np if kind == "cpu" else (_meta.xp if kind == "meta" else require_cuda())


def move_array(array, device):
    """Copy an array to a device (no copy if it is already there), keeping a channels_last array's memory
    format (minidl._layout): the NHWC buffer is what moves."""
    if array.ndim in (4, 5) and not array.flags.c_contiguous:
        from . import _layout

        if _layout.is_channels_last(array):
            return _layout.from_nhwc(move_array(_layout.nhwc(array), device))
    device = Device(device)
    if type(array) is _meta.MetaArray or device.type == "meta":
        if device.type != "meta":
            raise _meta.copy_out_error(device)
        return array if type(array) is _meta.MetaArray else _meta.MetaArray(array.shape, array.dtype)
    if device.type == "cpu":
        if is_cuda_array(array):
            check_not_capturing("to('cpu')", "it copies a GPU array to the host and waits for it")
            return array.get()
        return array
    cupy = require_cuda()
    with cupy.cuda.Device(device.index):
        if is_cuda_array(array) and array.device.id == device.index:
            return array
        if not is_cuda_array(array):
            check_not_capturing("to('cuda')", "a copy from host memory is not part of a graph (copy each "
                                "batch into the static input tensors before the replay instead)")
        return cupy.asarray(array)


def parse_to_args(op: str, args, kwargs, tensor_type):
    """The (device, dtype) that `to(...)` asks for, as in PyTorch: `to(device)` (a GPU index too), `to(dtype)`,
    `to(device, dtype)`, `to(other_tensor)`, or the keywords device=, dtype= (non_blocking is ignored).
    Either may be None (unchanged)."""
    kwargs = dict(kwargs)
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"{op}: unexpected arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, tensor_type):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (Device, str)) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a   # (an int is a GPU index: model.to(0) is model.to("cuda:0"), as torch's)
        else:
            dtype = a
    return device, dtype


def is_capturing() -> bool:
    """True while the current CuPy stream is being captured into a CUDA graph (minidl.cuda.graph)."""
    if _cupy is None:
        return False
    return bool(_cupy.cuda.get_current_stream().is_capturing())


def check_not_capturing(op: str, why: str) -> None:
    """Raise a RuntimeError naming `op` when called during CUDA graph capture.

    A captured graph records kernel launches only; host work inside the capture runs once and is then
    frozen (a value read back, a check, a measurement). Ops that need such host work call this first,
    so the user gets an error naming the op instead of a graph that silently replays a stale value.
    """
    if is_capturing():
        raise RuntimeError(
            f"{op} cannot run inside a CUDA graph capture: {why}. Move it out of the captured step "
            "(do it before or after the replay), or run this step eagerly."
        )
