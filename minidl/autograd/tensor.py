"""Tensor: an n-dimensional array (NumPy on the CPU, CuPy on the GPU) that records how it was made.

A Tensor holds its array in `_data`. Ops on tensors call `Function.apply` (see function.py), which
computes the result and, when a gradient is wanted, remembers the op in `result._ctx` so that
`backward()` can walk the graph in reverse. Names and semantics follow PyTorch.
"""
from __future__ import annotations

import builtins
import numbers
import weakref

import numpy as np

from .. import _device, _dtypes, _layout
from ..amp import autocast_mode as _autocast
from .._device import Device, get_array_module, is_cuda_array
from . import ops
from . import return_types
from ._dims import normalize_dim, normalize_dims
from ._promotion import result_type
from .function import Function, is_grad_enabled, run_backward
from .return_types import Size

# dtypes are NumPy dtype objects: minidl.float32 == np.dtype("float32"); bfloat16 is ml_dtypes' (see _dtypes)
float16 = _dtypes.float16
bfloat16 = _dtypes.bfloat16
float32 = _dtypes.float32
float64 = _dtypes.float64
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
int16 = np.dtype(np.int16)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool_ = np.dtype(np.bool_)

_default_dtype = float32


class _HookHandle:
    """What Tensor.register_hook returns: remove() takes the hook out again."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class memory_format:
    """PyTorch's memory-format tags (minidl._layout says what they mean). contiguous_format: row-major;
    channels_last (4-D) / channels_last_3d (5-D): NHWC (NDHWC) memory behind the (N, C, H, W) shape, which
    the convolution, batch norm and pooling layers run without transposes; preserve_format: as the
    source. Tensor.to / contiguous / clone / is_contiguous and Module.to take them, as in PyTorch."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"minidl.{self.name}"


preserve_format = memory_format("preserve_format")
contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


def _check_memory_format(op: str, fmt, ndim=None):
    """The format asked for (None = preserve_format); TypeError for anything else, ValueError for a
    channels-last format of the wrong rank (4-D for channels_last, 5-D for channels_last_3d)."""
    if fmt is None:
        return preserve_format
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{op}: memory_format must be minidl.preserve_format, contiguous_format, channels_last or "
                        f"channels_last_3d, got {fmt!r}")
    want = {channels_last: 4, channels_last_3d: 5}.get(fmt)
    if want is not None and ndim is not None and ndim != want:
        raise RuntimeError(f"{op}: {fmt!r} needs a {want}-D tensor, got {ndim}-D (as in PyTorch: channels_last "
                           "is for (N, C, H, W), channels_last_3d for (N, C, D, H, W))")
    return fmt


def _relayout(t, fmt, op):
    """t in memory format `fmt` (itself when it already is)."""
    fmt = _check_memory_format(op, fmt, t.ndim)
    if fmt is preserve_format:
        return t
    if fmt is contiguous_format:
        return t.contiguous()
    if _layout.is_channels_last(t._data):
        return t
    return ops.Relayout.apply(t, channels_last=True)


def _float_formatter(values):
    """PyTorch's way of printing floating tensors (torch/_tensor_str.py's _Formatter, precision 4): whole
    numbers as `1.`, others with 4 decimals, scientific notation when the nonzero magnitudes span more than
    1000x, exceed 1e8 or (not whole) go below 1e-4; every element padded to one width."""
    finite = values[np.isfinite(values) & (values != 0)]
    whole = bool(np.all(np.ceil(finite) == finite))
    sci = False
    if finite.size:
        big, small = float(np.abs(finite).max()), float(np.abs(finite).min())
        sci = big / small > 1000.0 or big > 1e8 or (not whole and small < 1e-4)

    def text(v):
        if not np.isfinite(v):
            return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
        if sci:
            return f"{v:.4e}"
        return f"{v:.0f}." if whole else f"{v:.4f}"

    width = max((len(text(v)) for v in values.flat), default=0)
    return lambda v: text(v).rjust(width)


_LEGACY_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor", "int64": "LongTensor",
                 "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
                 "bool": "BoolTensor"}


def set_default_dtype(dtype):
    global _default_dtype
    dtype = np.dtype(dtype)
    if dtype not in (float32, float64):
        raise TypeError(f"set_default_dtype: only float32 and float64 are supported, got {dtype}")
    _default_dtype = dtype


def get_default_dtype():
    return _default_dtype


def _to_array(data, dtype=None, device=None):
    """Anything array-like -> an array of the right dtype on the right device."""
    if isinstance(data, Tensor):
        arr = data._data
    elif is_cuda_array(data) or isinstance(data, np.ndarray):
        arr = data
    else:
        try:
            arr = np.asarray(data)
        except ValueError:
            raise ValueError(f"tensor: the nested lists of {type(data).__name__} data have different lengths "
                             "(a tensor needs a rectangular shape)") from None
        if arr.dtype.kind in "USc":
            what = "complex numbers (minidl has no complex dtypes)" if arr.dtype.kind == "c" else "strings"
            raise TypeError(f"tensor: cannot make a tensor from {what}: {data!r:.60}")
        if dtype is None:
            # Python floats become the default float dtype (float32), Python ints int64, as PyTorch.
            if arr.dtype.kind == "f":
                arr = arr.astype(_default_dtype)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(int64)
    if isinstance(arr, np.ndarray) and arr.dtype == object:
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} holding mixed objects")
    if dtype is not None:
        arr = arr.astype(np.dtype(dtype), copy=False)
    if device is not None:
        arr = _device.move_array(arr, device)
    return arr


_FULL_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))   # _binary's scalar fast path

class Tensor:
    """An array with autograd. Create with `minidl.tensor(...)`, `minidl.zeros(...)`, etc."""

    __array_priority__ = 1000  # so `ndarray + Tensor` calls Tensor.__radd__

    def __init__(self, *data, dtype=None, device=None, requires_grad=False):
        """`Tensor(data)` or `Tensor(d0, d1, ...)`, as torch.Tensor.

        - Python data (lists, numbers): float32 (the default dtype), as torch.Tensor([1, 2]);
          `minidl.tensor([1, 2])` infers int64 instead, as torch.tensor.
        - ints `Tensor(2, 3)`: a new float32 tensor of that shape (zero-filled; PyTorch leaves it
          uninitialised). `Tensor()` is an empty float32 tensor.
        - a NumPy/CuPy array or a Tensor: wrapped keeping its dtype, without a copy (minidl's own way
          of wrapping arrays; torch.Tensor(ndarray) converts to float32: see docs/DESIGN.md).
        """
        if len(data) == 1 and (isinstance(data[0], builtins.bool) or not isinstance(data[0], (builtins.int, np.integer))):
            data = data[0]
            if dtype is None and not (isinstance(data, (Tensor, np.ndarray)) or is_cuda_array(data)):
                dtype = _default_dtype
            array = _to_array(data, dtype, device)
        elif all(isinstance(d, (builtins.int, np.integer)) and not isinstance(d, builtins.bool) for d in data):
            array = _to_array(np.zeros(tuple(builtins.int(d) for d in data) or (0,), dtype=dtype or _default_dtype),
                              None, device)
        else:
            raise TypeError(
                f"Tensor(): expected data (a list, array or tensor) or ints giving a shape, got "
                f"{tuple(type(d).__name__ for d in data)}"
            )
        self._data = array
        self._grad = None
        self._ctx = None  # the Function that made this tensor (None for leaves)
        self._out_index = 0
        self._retains_grad = False
        self._hooks = []
        self._vbox, self._base = [0], None  # version counter (shared by views) and the viewed tensor
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _make(cls, array, requires_grad=False):
        """Wrap an array without copying or converting (internal fast path)."""
        if isinstance(array, np.generic):  # NumPy's full reductions return scalars: hold a 0-d array, which
            array = np.asarray(array)      # in-place ops (x -= 1 on a loss) can write into
        t = cls.__new__(cls)
        t._data, t._grad, t._ctx, t._out_index = array, None, None, 0
        t._retains_grad, t._hooks, t.requires_grad = False, [], requires_grad
        t._vbox, t._base = [0], None
        return t

    @property
    def grad(self):
        """The gradient accumulated by backward() (None until then), a tensor of this tensor's shape."""
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:   # checked as torch does: a wrong .grad would only fail (or be wrong) later
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad must be a Tensor or None, got {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: {tuple(value.shape)}, the tensor "
                                   f"is {tuple(self.shape)}")
            if value.is_cuda != self.is_cuda:
                raise RuntimeError(f"assigned grad is on {value.device}, the tensor on {self.device}")
            if value.dtype != self.dtype and self.dtype.kind == "f":
                raise RuntimeError(f"assigned grad has dtype {value.dtype}, the tensor {self.dtype}")
        self._grad = value

    @property
    def _version(self) -> int:
        """How many times this tensor's memory was changed in place (PyTorch's version counter). Views
        made by reshape/view/permute/expand/basic indexing/detach share their base's counter."""
        return self._vbox[0]

    @_version.setter
    def _version(self, value):
        self._vbox[0] = value

    # --------------------------------------------------------------------------------------------
    # Properties
    # --------------------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._data.shape)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def device(self) -> Device:
        return _device.device_of(self._data)

    @property
    def is_cuda(self) -> bool:
        return is_cuda_array(self._data)

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def is_leaf(self):
        return self._ctx is None

    @property
    def grad_fn(self):
        return self._ctx

    @property
    def data(self):
        """A tensor sharing this one's array but outside the graph (as in PyTorch)."""
        return Tensor._make(self._data)

    @data.setter
    def data(self, value):
        value = value._data if isinstance(value, Tensor) else value
        self._data = value

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def dim(self):
        return self._data.ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return builtins.int(self._data.size)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def element_size(self):
        return self.dtype.itemsize

    def is_floating_point(self):
        return _dtypes.is_floating(self.dtype)

    # --------------------------------------------------------------------------------------------
    # Autograd
    # --------------------------------------------------------------------------------------------
    def requires_grad_(self, requires_grad=True):
        if requires_grad and not (_dtypes.is_floating(self.dtype) or self.dtype.kind == "c"):
            raise RuntimeError(f"only floating-point tensors can require gradients, got dtype {self.dtype}")
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use .detach() instead")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self):
        """Keep .grad for a non-leaf tensor too (leaves always keep it)."""
        if self.is_leaf:
            return
        self._retains_grad = True

    def register_hook(self, hook):
        """hook(grad) -> None or a replacement gradient, called when this tensor's gradient has been computed
        (a leaf's before it is accumulated into .grad; a non-leaf's before it flows on to the op that made
        it). Returns a handle whose remove() unregisters the hook, as PyTorch."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"register_hook: hook must be callable, got {hook!r}")
        self._hooks.append(hook)
        if self._ctx is not None:
            # The tape reaches a non-leaf's hooks through its creator's weak references to its outputs; a
            # tensor nothing else keeps alive (an intermediate whose consumer's backward has already freed
            # its inputs) would take its hooks with it, and whether it did would depend on when the garbage
            # collector ran. As torch keeps tensor hooks on the grad_fn, the creator keeps the tensor.
            self._ctx.__dict__.setdefault("_hooked_outputs", []).append(self)
        return _HookHandle(self._hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) -> None, called after backward has added a gradient into this leaf's .grad (torch's
        name). DistributedDataParallel uses it to learn when a parameter's gradient is ready. Returns a handle
        whose remove() unregisters the hook."""
        if not self.requires_grad:
            raise RuntimeError("register_post_accumulate_grad_hook: cannot register a hook on a tensor that doesn't require gradient")
        if self._ctx is not None:
            raise RuntimeError("register_post_accumulate_grad_hook: only leaf tensors (parameters) accumulate gradients; "
                               "use register_hook on a non-leaf tensor")
        if not callable(hook):
            raise TypeError(f"register_post_accumulate_grad_hook: hook must be callable, got {hook!r}")
        hooks = self.__dict__.setdefault("_post_accumulate_hooks", [])
        hooks.append(hook)
        return _HookHandle(hooks, hook)

    def backward(self, gradient=None, retain_graph=False):
        """Accumulate d(self)/d(leaf) into every leaf's .grad. `gradient` is needed unless self is a scalar."""
        if not self.requires_grad:
            raise RuntimeError(
                "backward: this tensor does not require grad and has no grad_fn; make a parameter with "
                "requires_grad=True (or nn.Parameter) and compute this tensor from it"
            )
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(
                    f"backward: grad can be implicitly created only for scalar outputs; this tensor has "
                    f"shape {self.shape}: pass gradient= of that shape, or reduce it (e.g. .sum())"
                )
            g = get_array_module(self._data).ones(self.shape, dtype=self.dtype)
        else:
            g = _to_array(gradient, dtype=self.dtype)
            if tuple(g.shape) != self.shape:
                raise RuntimeError(f"backward: gradient has shape {tuple(g.shape)}, expected {self.shape}")
            if is_cuda_array(g) != self.is_cuda:
                raise RuntimeError(f"backward: gradient is on {_device.device_of(g)}, tensor on {self.device}")
        run_backward(self, g, retain_graph=retain_graph)

    def detach(self):
        """A tensor sharing this one's array (and version counter, as PyTorch) outside the graph."""
        t = Tensor._make(self._data)
        t._vbox = self._vbox
        return t

    def detach_(self):
        self._ctx, self.requires_grad = None, False
        return self

    def clone(self, memory_format=None):
        """A copy; preserve_format (the default) keeps a channels_last tensor channels_last, as PyTorch."""
        fmt = _check_memory_format("clone", memory_format, self.ndim)
        keep_cl = fmt is channels_last or fmt is channels_last_3d or (
            fmt is preserve_format and _layout.strictly_channels_last(self._data))
        if self.requires_grad:
            return ops.Relayout.apply(self, channels_last=keep_cl, copy=True)
        return Tensor._make(_layout.copy_as(self._data, keep_cl))

    # --------------------------------------------------------------------------------------------
    # Conversion and devices
    # --------------------------------------------------------------------------------------------
    def numpy(self):
        if self.requires_grad:
            raise RuntimeError("numpy(): this tensor requires grad; use tensor.detach().numpy()")
        if self.is_cuda:
            raise TypeError("numpy(): this tensor is on cuda; use tensor.cpu().numpy() to copy it to the host")
        return self._data

    def item(self):
        if self.is_cuda:
            _device.check_not_capturing("Tensor.item()", "it copies a GPU value to the host and waits for it")
        if self.numel() != 1:
            raise ValueError(f"item(): only one-element tensors can be converted, this one has shape {self.shape}")
        return self._data.reshape(()).item()

    def tolist(self):
        return self._host_array().tolist()

    def _host_array(self, op="Tensor.tolist()"):
        if self.is_cuda:
            _device.check_not_capturing(op, "it copies a GPU tensor to the host and waits for it")
            return self._data.get()
        return self._data

    def to(self, *args, **kwargs):
        """`to(device)`, `to(dtype)`, `to(device, dtype)` or `to(other_tensor)`, then optionally
        non_blocking and copy (positional or keyword) and memory_format, as in PyTorch. copy=True
        returns a new tensor even when nothing changes."""
        kwargs = dict(kwargs)
        fmt = _check_memory_format("to()", kwargs.pop("memory_format", None), self.ndim)
        flags = [a for a in args if isinstance(a, bool)]          # (non_blocking, copy) after the others
        args = [a for a in args if not isinstance(a, bool)]
        copy = bool(kwargs.pop("copy", flags[1] if len(flags) > 1 else False))
        device, dtype = _device.parse_to_args("to()", args, kwargs, Tensor)
        out = self
        if dtype is not None and np.dtype(dtype) != self.dtype:
            out = out.type(dtype)
        if device is not None and Device(device) != out.device:
            out = _ToDevice.apply(out, device=Device(device))
        out = _relayout(out, fmt, "to()")
        if copy and out is self:
            out = self.clone()
        return out

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{device}")

    def type(self, dtype=None):
        """type() -> 'torch.FloatTensor' etc. (PyTorch's names); type(dtype or FloatTensor or
        'torch.FloatTensor') -> this tensor in that dtype."""
        if dtype is None:
            return ("torch.cuda." if self.is_cuda else "torch.") + _LEGACY_NAMES.get(self.dtype.name, self.dtype.name)
        if isinstance(dtype, str) and dtype.rpartition(".")[2] in _LEGACY_NAMES.values():
            dtype = next(k for k, v in _LEGACY_NAMES.items() if v == dtype.rpartition(".")[2])
        try:
            dtype = np.dtype(getattr(dtype, "dtype", dtype))
        except TypeError:
            raise TypeError(f"type: unknown dtype {dtype!r} (use a minidl dtype such as minidl.float32, or a name "
                            "such as 'torch.FloatTensor')") from None
        if dtype == self.dtype:
            return self
        if self.requires_grad and _dtypes.is_floating(dtype):
            return ops.Cast.apply(self, dtype=dtype)
        return Tensor._make(self._data.astype(dtype))

    def float(self, memory_format=None):
        return _relayout(self.type(float32), memory_format, "float()")

    def double(self, memory_format=None):
        return _relayout(self.type(float64), memory_format, "double()")

    def half(self, memory_format=None):
        return _relayout(self.type(float16), memory_format, "half()")

    def bfloat16(self, memory_format=None):
        return _relayout(self.type(bfloat16), memory_format, "bfloat16()")

    def long(self, memory_format=None):
        _check_memory_format("long()", memory_format)
        return self.type(int64)

    def int(self, memory_format=None):
        _check_memory_format("int()", memory_format)
        return self.type(int32)

    def bool(self, memory_format=None):
        _check_memory_format("bool()", memory_format)
        return self.type(bool_)

    # DLPack (minidl/utils/dlpack.py): the array inside already speaks it; minidl adds its checks
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from ..utils.dlpack import check_exportable

        check_exportable(self)
        kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy))
                  if v is not None}
        if self.is_cuda:
            return self._data.__dlpack__(stream=stream, **kwargs)
        if stream is not None:
            raise BufferError(f"__dlpack__: stream must be None for a CPU tensor, got {stream!r}")
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __array__(self, dtype=None, copy=None):
        arr = self._host_array("Tensor.__array__() (numpy.asarray of a tensor)")
        return arr.astype(dtype) if dtype is not None else arr

    def __format__(self, spec):
        """'{:.2f}'.format(t) formats a one-element 0-d tensor's value, as PyTorch."""
        if self.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __float__(self):
        if self.is_cuda:
            _device.check_not_capturing("float(tensor)", "it copies a GPU value to the host and waits for it")
        return builtins.float(self.item())

    def __int__(self):
        if self.is_cuda:
            _device.check_not_capturing("int(tensor)", "it copies a GPU value to the host and waits for it")
        return builtins.int(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu":
            raise TypeError("only integer tensors can be used as an index")
        return builtins.int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(
                f"the truth value of a tensor with {self.numel()} elements is ambiguous; use .any() or .all()"
            )
        if self.is_cuda:
            _device.check_not_capturing("bool(tensor)", "it copies a GPU value to the host and waits for it "
                                        "(an `if` on a tensor is a host decision the graph cannot replay)")
        return builtins.bool(self.item())

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        host = self._host_array()
        options = dict(separator=", ", prefix="tensor(", threshold=1000, edgeitems=3, max_line_width=80)
        if _dtypes.is_floating(host.dtype):
            host = host.astype(np.float64) if host.dtype != np.float64 else host
            shown = host
            if host.size > options["threshold"]:   # as torch: the format is chosen from the printed items only
                for axis in range(host.ndim):
                    if shown.shape[axis] > 2 * options["edgeitems"]:
                        e = options["edgeitems"]
                        shown = np.concatenate([shown.take(range(e), axis), shown.take(range(-e, 0), axis)], axis)
            options["formatter"] = {"float_kind": _float_formatter(shown)}
        body = np.array2string(host, **options).replace(", ..., ", ",  ..., ")
        extras = []
        if self.is_cuda:
            extras.append(f"device='{self.device}'")
        if self.dtype not in (float32, int64, bool_):
            extras.append(f"dtype=minidl.{self.dtype.name}")
        if self._ctx is not None:
            extras.append(f"grad_fn=<{self._ctx.name}Backward>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # --------------------------------------------------------------------------------------------
    # Arithmetic
    # --------------------------------------------------------------------------------------------
    def _operand(self, other, op, dtype=None):
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
            dt = result_type(self, other, default_float=_default_dtype) if dtype is None else dtype
            if xp is np:
                return Tensor._make(np.asarray(other, dtype=dt))
            # On the GPU a fill kernel, not a copy from host memory: a CUDA graph captures the fill with
            # the value as its argument (a captured host copy would read a staging buffer CuPy reuses).
            return Tensor._make(xp.full((), other, dtype=dt))
        if isinstance(other, (np.ndarray, list, tuple)) or is_cuda_array(other):
            return Tensor(other, device=self.device)
        raise TypeError(f"{op}: unsupported operand of type {type(other).__name__} (expected a Tensor or a number)")

    def _binary(self, other, fn, op, reverse=False, **kwargs):
        # The common case first (issue 23: the host cost of one op): two tensors of one dtype on one device
        # need no promotion, no scalar wrapping and no casts; shapes are checked only when they differ.
        if type(other) is Tensor or isinstance(other, Tensor):
            sd, od = self._data, other._data
            if sd.dtype == od.dtype and type(sd) is type(od) and (op != "div" or sd.dtype.kind in "fcV"):
                a, b = (other, self) if reverse else (self, other)
                if sd.shape != od.shape:
                    try:
                        np.broadcast_shapes(a.shape, b.shape)
                    except ValueError:
                        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None
                return fn.apply(a, b, **kwargs)
        elif (type(other) is float or type(other) is int) and self._data.dtype in _FULL_FLOATS:
            # a float32/float64 tensor and a Python number: the tensor's dtype, as torch's promotion gives
            o = self._operand(other, op, self._data.dtype)
            return fn.apply(*((o, self) if reverse else (self, o)), **kwargs)
        if _dtypes.is_half(self.dtype) and isinstance(other, numbers.Number) and not _fits(other, self.dtype):
            # PyTorch keeps a Python scalar at float32 precision against a half tensor ("opmath": x * 0.1,
            # x * 1e5 in float16 compute in float32 and round once) instead of rounding the scalar to half
            # first (0.1 -> 0.09998, 1e5 -> inf, so 0 * 1e5 = NaN). Scalars that are exactly half values
            # (0.5, 2, 3) give the same result directly, without the two casts.
            return self.float()._binary(other, fn, op, reverse, **kwargs).type(self.dtype)
        if not isinstance(other, (Tensor, numbers.Number, np.bool_)):
            other = self._operand(other, op)  # arrays and lists become tensors; anything else: TypeError
        dtype = result_type(self, other, default_float=_default_dtype)
        if op == "div" and not _dtypes.is_floating(dtype):
            dtype = _default_dtype  # true division of integers gives the default float, as torch.div
        other = self._operand(other, op, dtype)
        a, b = (other, self) if reverse else (self, other)
        try:
            np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None
        return fn.apply(a.type(dtype), b.type(dtype), **kwargs)

    def __add__(self, o):
        return self._binary(o, ops.Add, "add")

    def __radd__(self, o):
        return self._binary(o, ops.Add, "add", reverse=True)

    def __sub__(self, o):
        return self._binary(o, ops.Sub, "sub")

    def __rsub__(self, o):
        return self._binary(o, ops.Sub, "sub", reverse=True)

    def __mul__(self, o):
        return self._binary(o, ops.Mul, "mul")

    def __rmul__(self, o):
        return self._binary(o, ops.Mul, "mul", reverse=True)

    def __truediv__(self, o):
        return self._binary(o, ops.Div, "div")

    def __rtruediv__(self, o):
        (t,) = _autocast.cast_inputs("rtruediv", self)
        return t._binary(o, ops.Div, "div", reverse=True)

    def __pow__(self, o):
        t, o = _autocast.cast_inputs("pow", self, o)
        return t._binary(o, ops.Pow, "pow")

    def __rpow__(self, o):
        t, o = _autocast.cast_inputs("pow", self, o)
        return t._binary(o, ops.Pow, "pow", reverse=True)

    def __neg__(self):
        return ops.Neg.apply(self)

    def __pos__(self):
        return self

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(self._operand(o, "matmul"), self)

    def __floordiv__(self, o):
        o = self._operand(o, "floor_divide")
        return Tensor._make(self._data // o._data)

    def __mod__(self, o):
        o = self._operand(o, "remainder")
        if _dtypes.is_floating(self.dtype) and (self.requires_grad or o.requires_grad) and is_grad_enabled():
            return ops.Remainder.apply(self, o)
        return Tensor._make(self._data % o._data)

    def remainder(self, other):
        """Python's modulo, the sign of the divisor (torch.remainder), with its gradient."""
        return self % other

    # comparisons: no gradient, boolean results
    def _compare(self, o, f, op="compare"):
        """Comparisons (and the logical/bitwise ops) compute in the promoted dtype, as torch."""
        if not isinstance(o, (Tensor, numbers.Number, np.bool_)):
            o = self._operand(o, op)
        dtype = result_type(self, o, default_float=_default_dtype)
        o = self._operand(o, op, dtype)
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
        if not _comparable(o):
            return NotImplemented  # `t == None`, `t in [None, "x"]`: Python's identity fallback, no error
        return self._compare(o, lambda a, b: a == b, "eq")

    def __ne__(self, o):
        if not _comparable(o):
            return NotImplemented
        return self._compare(o, lambda a, b: a != b, "ne")

    def __lt__(self, o):
        return self._compare(o, lambda a, b: a < b)

    def __le__(self, o):
        return self._compare(o, lambda a, b: a <= b)

    def __gt__(self, o):
        return self._compare(o, lambda a, b: a > b)

    def __ge__(self, o):
        return self._compare(o, lambda a, b: a >= b)

    def __invert__(self):
        return Tensor._make(~self._data)

    def __and__(self, o):
        return self._compare(o, lambda a, b: a & b, "bitwise_and")

    def __or__(self, o):
        return self._compare(o, lambda a, b: a | b, "bitwise_or")

    __hash__ = object.__hash__

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

    def add(self, o, alpha=1):
        return self + (o * alpha if alpha != 1 else o)

    def sub(self, o, alpha=1):
        return self - (o * alpha if alpha != 1 else o)

    def mul(self, o):
        return self * o

    def div(self, o, rounding_mode=None):
        """self / o; rounding_mode 'trunc' rounds toward zero, 'floor' down (integers then stay
        integers), as torch.div. The rounded forms have a zero gradient (as in torch)."""
        if rounding_mode is None:
            return self / o
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        return self._binary(o, ops.RoundedDiv, "div_" + rounding_mode, mode=rounding_mode)

    def pow(self, o):
        return self**o

    def neg(self):
        return -self

    def exp(self):
        return ops.Exp.apply(*_autocast.cast_inputs("exp", self))

    def log(self):
        return ops.Log.apply(*_autocast.cast_inputs("log", self))

    def sqrt(self):
        return ops.Sqrt.apply(self)

    def rsqrt(self):
        return 1.0 / ops.Sqrt.apply(*_autocast.cast_inputs("rsqrt", self))

    def abs(self):
        return ops.Abs.apply(self)

    def square(self):
        return self * self

    def clamp(self, min=None, max=None):
        """Elementwise min(max(self, min), max); min and max may be numbers or tensors (broadcast).
        Where min > max the result is max, as torch. The gradient flows where min <= self <= max."""
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            dtype = result_type(self, min, max, default_float=_default_dtype)
            lo = None if min is None else self._operand(min, "clamp", dtype).type(dtype)
            hi = None if max is None else self._operand(max, "clamp", dtype).type(dtype)
            shapes = [x.shape for x in (self, lo, hi) if x is not None]
            try:
                np.broadcast_shapes(*shapes)
            except ValueError:
                raise ValueError(f"clamp: shapes {shapes} of input, min and max cannot be broadcast together") from None
            return ops.ClampTensor.apply(self.type(dtype), lo, hi)
        return ops.Clamp.apply(self, min=min, max=max)

    clip = clamp

    def maximum(self, o):
        return self._binary(o, ops.Maximum, "maximum")

    def minimum(self, o):
        return self._binary(o, ops.Minimum, "minimum")

    def sign(self):
        """-1, 0 or 1; its gradient is zero everywhere (as torch, which still records it)."""
        return ops.Sign.apply(self)

    def isnan(self):
        return Tensor._make(get_array_module(self._data).isnan(self._data))

    def isfinite(self):
        return Tensor._make(get_array_module(self._data).isfinite(self._data))

    # activations as methods (autograd/activations.py: Functions over the primitives; nn.functional uses them too)
    def relu(self):
        from . import activations

        return activations.relu(self)

    def sigmoid(self):
        from . import activations

        return activations.sigmoid(self)

    def tanh(self):
        from . import activations

        return activations.tanh(self)

    def softmax(self, dim, dtype=None):
        from . import activations

        return activations.softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim, dtype=None):
        from . import activations

        return activations.log_softmax(self, dim, dtype=dtype)

    # --------------------------------------------------------------------------------------------
    # Reductions
    # --------------------------------------------------------------------------------------------
    def _check_dim(self, dim, op):
        """Raise IndexError (torch's message, prefixed with op) for a dim out of range; see _dims.py."""
        if dim is not None:
            normalize_dims(dim, self.ndim, op)

    def sum(self, dim=None, keepdim=False):
        self._check_dim(dim, "sum")
        return ops.Sum.apply(*_autocast.cast_inputs("sum", self), dim=dim, keepdim=keepdim)

    def mean(self, dim=None, keepdim=False):
        self._check_dim(dim, "mean")
        if not _dtypes.is_floating(self.dtype):
            raise TypeError(f"mean: needs a floating-point tensor, got {self.dtype}")
        return ops.Mean.apply(self, dim=dim, keepdim=keepdim)

    def var(self, dim=None, keepdim=False, unbiased=True, correction=None):
        if isinstance(dim, bool):  # torch's var(unbiased) overload: a lone bool is `unbiased`
            dim, unbiased = None, dim
        self._check_dim(dim, "var")
        correction = (1 if unbiased else 0) if correction is None else correction
        return ops.Var.apply(self, dim=dim, keepdim=keepdim, correction=correction)

    def std(self, dim=None, keepdim=False, unbiased=True, correction=None):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        return self.var(dim, keepdim, unbiased, correction).sqrt()

    def max(self, dim=None, keepdim=False):
        """max() -> scalar tensor; max(dim) -> (values, indices), as PyTorch. max(other) = maximum."""
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        self._check_dim(dim, "max")
        self._check_nonempty_reduction(dim, "max")
        out = ops.MaxMin.apply(self, dim=dim, keepdim=keepdim, is_max=True)
        return out if dim is None else return_types.max(*out)

    def min(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        self._check_dim(dim, "min")
        self._check_nonempty_reduction(dim, "min")
        out = ops.MaxMin.apply(self, dim=dim, keepdim=keepdim, is_max=False)
        return out if dim is None else return_types.min(*out)

    def _check_nonempty_reduction(self, dim, op):
        if self.numel() == 0 and (dim is None or self.shape[normalize_dim(dim, self.ndim, op)] == 0):
            raise IndexError(
                f"{op}: cannot reduce a tensor of shape {self.shape} with no elements "
                + ("(specify a dim of nonzero size)" if dim is None else f"over dim {dim} of size 0")
            )

    def _arg_reduce(self, dim, keepdim, op):
        self._check_dim(dim, op)
        self._check_nonempty_reduction(dim, op)
        xp = get_array_module(self._data)
        pick = self._data.argmax if op == "argmax" else self._data.argmin
        if dim is None:
            idx = xp.asarray(pick(), dtype=int64)
            # keepdim without a dim keeps every dim at size 1, as torch
            return Tensor._make(idx.reshape((1,) * self.ndim) if keepdim else idx)
        if self.ndim == 0:  # the 0-d tensor is its own only element: index 0, shape () (torch)
            return Tensor._make(xp.zeros((), dtype=int64))
        dim = normalize_dim(dim, self.ndim, op)
        idx = pick(axis=dim).astype(int64)
        return Tensor._make(xp.expand_dims(idx, dim) if keepdim else idx)

    def argmax(self, dim=None, keepdim=False):
        return self._arg_reduce(dim, keepdim, "argmax")

    def argmin(self, dim=None, keepdim=False):
        return self._arg_reduce(dim, keepdim, "argmin")

    def amax(self, dim=(), keepdim=False):
        """Largest values over dim (an int, a tuple, or () for all); ties share the gradient evenly (torch.amax)."""
        return _amax_amin(self, dim, keepdim, "amax")

    def amin(self, dim=(), keepdim=False):
        return _amax_amin(self, dim, keepdim, "amin")

    def logsumexp(self, dim, keepdim=False):
        """log(sum(exp(x))) over dim, computed as m + log(sum(exp(x - m))) with m the max (no overflow);
        its gradient is softmax(x) along dim (torch.logsumexp)."""
        m = self.amax(dim, keepdim=True).detach()
        finite = m.masked_fill(~m.isfinite(), 0.0)   # an all -inf slice: log(0) = -inf, as torch
        out = (self - finite).exp().sum(dim, keepdim=True).log() + finite
        return out if keepdim else out.squeeze(dim)

    # --------------------------------------------------------------------------------------------
    # Shapes
    # --------------------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = _shape_arg(shape)
        try:
            target = _resolve_shape(self.shape, shape)
        except ValueError as e:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {self.shape} to {shape}: {e}") from None
        return ops.Reshape.apply(self, shape=target)

    def view(self, *shape):
        """Same data, new shape, no copy: refuses (as PyTorch) when the strides do not allow it, e.g.
        after transpose/permute; use reshape() (copies when needed) or contiguous().view()."""
        shape = _shape_arg(shape)
        try:
            target = _resolve_shape(self.shape, shape)
        except ValueError as e:
            raise RuntimeError(f"view: shape {list(shape)} is invalid for input of size {self.numel()}: {e}") from None
        if not _can_view(self._data, target):
            raise RuntimeError(
                f"view size is not compatible with input tensor's size and stride (shape {list(self.shape)}, "
                f"view {list(target)}; at least one dimension spans across two contiguous subspaces). "
                "Use .reshape(...) instead."
            )
        return ops.Reshape.apply(self, shape=target)

    def is_contiguous(self, memory_format=None):
        """True when the elements lie in row-major order with no gaps (C order), or, with memory_format=
        channels_last / channels_last_3d, in NHWC / NDHWC order (minidl._layout), as PyTorch."""
        fmt = _check_memory_format("is_contiguous", memory_format)
        if fmt is channels_last or fmt is channels_last_3d:
            want = 4 if fmt is channels_last else 5
            return self.ndim == want and _layout.is_channels_last(self._data)
        if fmt is preserve_format and memory_format is not None:
            raise RuntimeError("is_contiguous: preserve_format is not a memory format (as in PyTorch)")
        return builtins.bool(self._data.flags.c_contiguous)

    def stride(self, dim=None):
        """The steps, in elements, from one index to the next along each dimension (PyTorch's stride())."""
        strides = _layout.element_strides(self._data)
        return strides if dim is None else strides[normalize_dim(dim, self.ndim, "stride")]

    def view_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        start = normalize_dim(start_dim, self.ndim, "flatten")
        end = normalize_dim(end_dim, self.ndim, "flatten")
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
        if self.ndim == 0:
            return self.reshape(1)
        new = self.shape[:start] + (builtins.int(np.prod(self.shape[start : end + 1])),) + self.shape[end + 1 :]
        return self.reshape(new)

    def squeeze(self, dim=None):
        """Drop dims of size 1: all of them (dim=None), or those of dim (an int or a tuple) that are 1."""
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        dims = normalize_dims(dim, self.ndim, "squeeze")
        if self.ndim == 0:
            return self.reshape(())
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def unsqueeze(self, dim):
        dim = normalize_dim(dim, self.ndim + 1, "unsqueeze")
        return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])

    # In-place shape changes (torch's unsqueeze_, squeeze_, t_, transpose_): this tensor takes the new
    # shape (and, when it is recorded, becomes the op's output, as the value-changing in-place ops do).
    def _inplace_shape(self, op, change):
        self._check_inplace(op)
        current = Tensor._make(self._data, requires_grad=self.requires_grad)
        if self._records_with():  # the op's input is the value before the change, as a tensor of its own
            current._ctx, current._out_index, current._vbox = self._ctx, self._out_index, [self._version]
        new = change(current)
        self._data = new._data
        self._version += 1
        if new._ctx is not None:
            self._ctx, self._out_index, self.requires_grad = new._ctx, new._out_index, True
            new._ctx._output_refs = tuple(weakref.ref(self) if i == new._out_index else r
                                          for i, r in enumerate(new._ctx._output_refs))
        return self

    def unsqueeze_(self, dim):
        return self._inplace_shape("unsqueeze_", lambda t: t.unsqueeze(dim))

    def squeeze_(self, dim=None):
        return self._inplace_shape("squeeze_", lambda t: t.squeeze(dim))

    def t_(self):
        return self._inplace_shape("t_", lambda t: t.t())

    def transpose_(self, dim0, dim1):
        return self._inplace_shape("transpose_", lambda t: t.transpose(dim0, dim1))

    def permute(self, *dims):
        dims = _shape_arg(dims)
        if len(dims) != self.ndim:
            raise ValueError(
                f"permute: number of dims don't match: the tensor of shape {self.shape} has {self.ndim} dims, "
                f"got {len(dims)} ({dims})"
            )
        dims = normalize_dims(dims, self.ndim, "permute", allow_repeats=True)
        if len(set(dims)) != len(dims):
            raise ValueError(f"permute: duplicate dims in {dims} are not allowed (tensor of shape {self.shape})")
        if self.ndim == 0:
            return self.reshape(())
        return ops.Permute.apply(self, dims=dims)

    def transpose(self, dim0, dim1):
        dim0 = normalize_dim(dim0, self.ndim, "transpose")
        dim1 = normalize_dim(dim1, self.ndim, "transpose")
        if self.ndim == 0:
            return self.reshape(())
        dims = list(range(self.ndim))
        dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
        return self.permute(*dims)

    def t(self):
        if self.ndim > 2:
            raise ValueError(f"t(): expects a tensor with <= 2 dims, got shape {self.shape}; use transpose()")
        return self.T

    def expand(self, *shape):
        shape = _shape_arg(shape)
        new = len(shape) - self.ndim
        if new < 0:
            raise ValueError(f"expand: the shape {tuple(shape)} has fewer dims than the tensor's {self.shape}")
        if any(t == -1 for t in shape[:new]):
            raise ValueError(f"expand: -1 is not allowed in a new leading dim (shape {tuple(shape)} for a tensor of "
                             f"shape {self.shape}): -1 keeps an existing size, and a new dim has none")
        full = tuple(s if t == -1 else t for s, t in zip((1,) * (len(shape) - self.ndim) + self.shape, shape))
        try:
            np.broadcast_shapes(self.shape, full)
            if np.broadcast_shapes(self.shape, full) != full:
                raise ValueError
        except ValueError:
            raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}") from None
        return ops.Expand.apply(self, shape=full)

    def expand_as(self, other):
        return self.expand(other.shape)

    def contiguous(self, memory_format=None):
        """self when already contiguous in `memory_format` (default: row-major), else a copy in that memory
        format (with its gradient); channels_last: NHWC memory (minidl._layout)."""
        fmt = _check_memory_format("contiguous", contiguous_format if memory_format is None else memory_format,
                                   self.ndim)
        if fmt is channels_last or fmt is channels_last_3d:
            return _relayout(self, fmt, "contiguous")
        if fmt is preserve_format:
            raise RuntimeError("contiguous: preserve_format is not a memory format a tensor can be made "
                               "contiguous in (as in PyTorch)")
        return self if self.is_contiguous() else ops.Contiguous.apply(self)

    def split(self, split_size, dim=0):
        return split(self, split_size, dim)

    def chunk(self, chunks, dim=0):
        return chunk(self, chunks, dim)

    def repeat(self, *sizes):
        """Tile the tensor sizes[i] times along dim i (torch.Tensor.repeat); len(sizes) >= ndim."""
        sizes = _shape_arg(sizes)
        if len(sizes) < self.ndim:
            raise RuntimeError(
                f"repeat: number of repeat dims ({len(sizes)}) can not be smaller than the number of dims "
                f"of the tensor ({self.ndim}, shape {self.shape})"
            )
        if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in sizes):
            raise ValueError(f"repeat: repeats must be non-negative ints, got {sizes}")
        return ops.Repeat.apply(self, sizes=tuple(builtins.int(n) for n in sizes))

    # --------------------------------------------------------------------------------------------
    # Indexing
    # --------------------------------------------------------------------------------------------
    def _index_key(self, key):
        """Tensors inside the key become arrays on this tensor's device."""
        xp = get_array_module(self._data)

        def conv(k):
            if isinstance(k, Tensor):
                return k._data if k.is_cuda == self.is_cuda else xp.asarray(k._host_array())
            if isinstance(k, (list, np.ndarray)) and not (isinstance(k, list) and len(k) == 0):
                arr = np.asarray(k)
                if xp is not np:
                    _device.check_not_capturing("indexing a GPU tensor with a host list/array",
                                                "the index is copied from host memory (keep it a GPU tensor)")
                return xp.asarray(arr) if xp is not np else arr
            return k

        return tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)

    def __getitem__(self, key):
        key = self._index_key(key)
        try:
            return ops.GetItem.apply(self, key=key)
        except IndexError as e:
            raise IndexError(f"index: {e} (tensor of shape {self.shape})") from None

    def __setitem__(self, key, value):
        """x[key] = value, in place (value broadcast to x[key]); inside a graph the gradient of the old
        values under key is zero and value gets the gradient of x[key] (PyTorch's CopySlices)."""
        key = self._index_key(key)
        try:
            if self._records_with(value):
                value = self._operand(value, "__setitem__")
                return self._inplace("__setitem__", lambda t: ops.SetItem.apply(t, value.type(self.dtype), key=key),
                                     value)
            self._check_inplace("__setitem__")
            self._data[key] = value._data if isinstance(value, Tensor) else value
        except IndexError as e:
            raise IndexError(f"index assignment: {e} (tensor of shape {self.shape})") from None
        except ValueError as e:
            shape = tuple(getattr(value, "shape", np.shape(value)))
            raise ValueError(f"index assignment: the value of shape {shape} does not fit the indexed part of a "
                             f"tensor of shape {self.shape}: {e}") from None
        self._version += 1

    def masked_fill(self, mask, value):
        """Elements where mask (broadcast) is True become value (a number or a 0-d tensor)."""
        if isinstance(value, Tensor):
            if value.ndim != 0:
                raise RuntimeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {tuple(value.shape)}")
            value = value.type(self.dtype)  # stays on its device (no .item(): no host sync)
        if not isinstance(value, Tensor):
            value = Tensor._make(get_array_module(self._data).asarray(value, dtype=self.dtype))
        return where(mask, value, self)

    def gather(self, dim, index):
        """out[i][j] = self[index[i][j]][j] for dim=0, etc. (torch.gather): an advanced-index GetItem."""
        xp = get_array_module(self._data)
        dim = normalize_dim(dim, self.ndim, "gather")
        if not isinstance(index, Tensor) or index.dtype.kind not in "iu":
            raise TypeError(f"gather: index must be an integer tensor, got {getattr(index, 'dtype', type(index).__name__)}")
        if index.numel() == 0:  # an empty index gathers nothing (torch allows any rank then)
            return ops.GetItem.apply(self.reshape(-1), key=index._data.reshape(-1).astype(np.int64)).reshape(index.shape)
        if index.ndim != self.ndim and not (self.ndim == 0 and index.ndim <= 1):
            raise ValueError(f"gather: index of shape {index.shape} must have as many dims as input {self.shape}")
        size = self.shape[dim] if self.ndim else 1
        # (checked on the CPU only: on the GPU this would read a device value, a host sync)
        if not index.is_cuda and not (0 <= index._data.min() and index._data.max() < size):
            bad = builtins.int(index._data.min() if index._data.min() < 0 else index._data.max())
            raise IndexError(f"gather: index {bad} is out of bounds for dim {dim} with size {size} "
                             f"(input {self.shape}, index {index.shape})")
        if self.ndim == 0:
            return ops.GetItem.apply(self.reshape(1), key=index._data)
        grids = ops.open_grid(xp, index.shape)
        grids[dim] = index._data
        return ops.GetItem.apply(self, key=tuple(grids))

    # --------------------------------------------------------------------------------------------
    # In-place operations (issue #19): `x += y`, add_, mul_, clamp_, fill_, zero_, copy_, ...
    #
    # They change this tensor's array (so every alias of it sees the change: optimizers, views held
    # by a caller) and bump `_version`. Two cases, as in PyTorch:
    # - nothing to record (under no_grad, or no operand requires grad): the array is updated with
    #   one NumPy/CuPy call, `out=` this array (optimizers and `w -= lr * w.grad` take this path);
    # - recording: the op is applied to a copy of the old value that takes over this tensor's place
    #   in the graph, the result is written into this tensor's array, and this tensor becomes the
    #   op's output (its grad_fn changes, as torch's). A leaf that requires grad refuses, and
    #   backward() refuses to use an array that was changed after a Function saved it (the version
    #   check in function.py).
    # --------------------------------------------------------------------------------------------
    def _check_inplace(self, op):
        if is_grad_enabled() and self.requires_grad and self.is_leaf:
            raise RuntimeError(
                f"{op}: a leaf Variable that requires grad is being modified in place (an in-place "
                "operation); wrap it in `with minidl.no_grad():` (as optimizers and initialisers do)"
            )

    def _records_with(self, other=None):
        return is_grad_enabled() and (self.requires_grad or (isinstance(other, Tensor) and other.requires_grad))

    def _inplace(self, op, compute, other=None):
        """Replace this tensor's value by compute(t), t a tensor holding the current value, in place."""
        self._check_inplace(op)
        if isinstance(other, Tensor) and other.is_cuda != self.is_cuda:
            raise RuntimeError(f"{op}: expected both tensors on the same device, got {self.device} and {other.device}")
        if self._records_with(other):
            if self._base is not None:
                raise NotImplementedError(
                    f"{op}: an in-place change of a view (of a tensor of shape {tuple(self._base.shape)}) "
                    "inside a graph is not supported by minidl's autograd (PyTorch rebases the base "
                    "tensor's history; minidl would silently miss it). Change the base tensor instead "
                    "(x[idx] = ..., x.masked_fill), or clone() the view first.")
            old = Tensor._make(self._data.copy(), requires_grad=self.requires_grad)
            old._ctx, old._out_index, old._vbox = self._ctx, self._out_index, [self._version]
            out = compute(old)
        else:
            out = compute(Tensor._make(self._data))
        self._check_inplace_result(op, out)
        if out.dtype != self.dtype:
            out = out.type(self.dtype) if out.requires_grad else Tensor._make(out._data.astype(self.dtype))
        self._data[...] = out._data
        self._version += 1
        if out._ctx is not None:  # this tensor is now the op's output
            self._ctx, self._out_index, self.requires_grad = out._ctx, out._out_index, True
            out._ctx._output_refs = tuple(
                weakref.ref(self) if i == out._out_index else r for i, r in enumerate(out._ctx._output_refs)
            )
            out._ctx._output_versions[out._out_index] = self._version
        return self

    def _check_inplace_result(self, op, out):
        if out.shape != self.shape:
            raise RuntimeError(
                f"{op}: output with shape {list(self.shape)} doesn't match the broadcast shape {list(out.shape)}"
            )
        if _dtypes.is_floating(out.dtype) and self.dtype.kind in "iub" or (out.dtype.kind in "iu" and self.dtype.kind == "b"):
            raise RuntimeError(f"{op}: result type {out.dtype} can't be cast to the desired output type {self.dtype}")

    def _inplace_binary(self, other, method, op, ufunc=None):
        """self <op>= other. Fast path: one ufunc writing into this array (no copy, no graph)."""
        if ufunc is not None and not self._records_with(other):
            self._check_inplace(op)
            o = self._operand(other, op)._data
            if isinstance(other, (builtins.bool, builtins.float)) or not isinstance(other, numbers.Number):
                other_kind = "b" if isinstance(other, builtins.bool) else (
                    "f" if isinstance(other, builtins.float) or _dtypes.is_floating(o.dtype) else o.dtype.kind)
            else:
                other_kind = "i"
            if self.dtype.kind == "b" and other_kind != "b":
                raise RuntimeError(f"{op}: result type {'Float' if other_kind == 'f' else 'Long'} can't be cast to the "
                                   f"desired output type {self.dtype}")
            if self.dtype.kind in "iub" and (_dtypes.is_floating(o.dtype) or ufunc == "true_divide"):
                result = o.dtype if _dtypes.is_floating(o.dtype) else _default_dtype
                raise RuntimeError(f"{op}: result type {result} can't be cast to the desired output type {self.dtype}")
            try:
                getattr(get_array_module(self._data), ufunc)(self._data, o, out=self._data, casting="same_kind")
            except TypeError:  # NumPy's UFuncTypeError: e.g. an int64 result into a bool tensor
                raise RuntimeError(f"{op}: result type of {self.dtype} and {o.dtype} can't be cast to the "
                                   f"desired output type {self.dtype}") from None
            except ValueError:
                raise RuntimeError(f"{op}: output with shape {list(self.shape)} doesn't match the broadcast "
                                   f"shape {list(np.broadcast_shapes(self.shape, tuple(o.shape)))}") from None
            self._version += 1
            return self
        return self._inplace(op, lambda t: getattr(t, method)(other), other)

    def __iadd__(self, o):
        return self._inplace_binary(o, "__add__", "add_", "add")

    def __isub__(self, o):
        return self._inplace_binary(o, "__sub__", "sub_", "subtract")

    def __imul__(self, o):
        return self._inplace_binary(o, "__mul__", "mul_", "multiply")

    def __itruediv__(self, o):
        return self._inplace_binary(o, "__truediv__", "div_", "true_divide")

    def __ipow__(self, o):
        return self._inplace_binary(o, "__pow__", "pow_")

    def add_(self, other, alpha=1):
        return self._inplace_binary(other * alpha if alpha != 1 else other, "__add__", "add_", "add")

    def sub_(self, other, alpha=1):
        return self._inplace_binary(other * alpha if alpha != 1 else other, "__sub__", "sub_", "subtract")

    def mul_(self, other):
        return self._inplace_binary(other, "__mul__", "mul_", "multiply")

    def div_(self, other):
        return self._inplace_binary(other, "__truediv__", "div_", "true_divide")

    def pow_(self, other):
        return self._inplace_binary(other, "__pow__", "pow_")

    def neg_(self):
        return self._inplace("neg_", lambda t: -t)

    def exp_(self):
        return self._inplace("exp_", lambda t: t.exp())

    def sqrt_(self):
        return self._inplace("sqrt_", lambda t: t.sqrt())

    def abs_(self):
        return self._inplace("abs_", lambda t: t.abs())

    def relu_(self):
        return self._inplace("relu_", lambda t: t.relu())

    def sigmoid_(self):
        return self._inplace("sigmoid_", lambda t: t.sigmoid())

    def tanh_(self):
        return self._inplace("tanh_", lambda t: t.tanh())

    def addcmul_(self, tensor1, tensor2, value=1):
        return self.add_(tensor1 * tensor2 * value)

    def addcdiv_(self, tensor1, tensor2, value=1):
        return self.add_(tensor1 / tensor2 * value)

    def lerp(self, end, weight):
        """self + weight * (end - self) (torch.lerp): weight a number or a tensor, with its gradient."""
        return self + (end - self) * weight

    def lerp_(self, end, weight):
        return self._inplace("lerp_", lambda t: t.lerp(end, weight))

    def masked_fill_(self, mask, value):
        return self._inplace("masked_fill_", lambda t: t.masked_fill(mask, value), value)

    def clamp_(self, min=None, max=None):
        return self._inplace("clamp_", lambda t: t.clamp(min, max))

    clip_ = clamp_

    def fill_(self, value):
        """Every element := value. Inside a graph the gradient to the old value is zero."""
        if self._records_with(value):  # SetItem over everything: the old value gets a zero gradient
            if not isinstance(value, Tensor):
                value = Tensor._make(get_array_module(self._data).asarray(value, dtype=self.dtype))
            return self._inplace("fill_", lambda t: ops.SetItem.apply(t, value.type(self.dtype), key=Ellipsis), value)
        self._check_inplace("fill_")
        self._data[...] = value._data if isinstance(value, Tensor) else value
        self._version += 1
        return self

    def zero_(self):
        return self.fill_(0)

    def copy_(self, src):
        """self := src (broadcast to this shape, cast to this dtype, moved to this device)."""
        if not isinstance(src, Tensor):
            src = Tensor._make(_to_array(src))
        if src.is_cuda != self.is_cuda:
            src = src.to(self.device)
        if self._records_with(src):
            return self._inplace("copy_", lambda t: ops.SetItem.apply(t, src.type(self.dtype), key=Ellipsis), src)
        self._check_inplace("copy_")
        try:
            self._data[...] = src._data
        except ValueError:
            raise RuntimeError(f"copy_: the source of shape {list(src.shape)} cannot be broadcast to "
                               f"{list(self.shape)}") from None
        self._version += 1
        return self

    def uniform_(self, a=0.0, b=1.0):
        self._check_inplace("uniform_")
        from .. import random

        self._data[...] = random.uniform_array(self.shape, a, b, self.dtype, self.device)
        self._version += 1
        return self

    def normal_(self, mean=0.0, std=1.0):
        self._check_inplace("normal_")
        from .. import random

        self._data[...] = random.normal_array(self.shape, mean, std, self.dtype, self.device)
        self._version += 1
        return self

    # --------------------------------------------------------------------------------------------
    # The Tensor surface of PyTorch's tutorials and example programs (issue #16). Each is composed
    # of the differentiable ops above or is one Function in ops.py (Sort, CumSum, Scatter, Norm), so
    # each has its gradient.
    # --------------------------------------------------------------------------------------------
    def _dim(self, dim, op):
        """A dim in range for this tensor, made non-negative (0-d tensors accept 0 and -1)."""
        n = max(self.ndim, 1)
        if not -n <= dim < n:
            raise IndexError(f"{op}: dim {dim} is out of range for a tensor of shape {tuple(self.shape)}")
        return dim % n

    def matmul(self, other):
        return matmul(self, other)

    def mm(self, mat2):
        """(n, m) @ (m, p) -> (n, p); both must be 2-D (torch.mm)."""
        if self.ndim != 2 or getattr(mat2, "ndim", 0) != 2:
            raise RuntimeError(f"mm: both arguments must be 2-D matrices, got shapes {tuple(self.shape)} and "
                               f"{tuple(getattr(mat2, 'shape', ()))}")
        return matmul(self, mat2)

    def bmm(self, mat2):
        """(b, n, m) @ (b, m, p) -> (b, n, p), no broadcasting (torch.bmm)."""
        if self.ndim != 3 or getattr(mat2, "ndim", 0) != 3 or self.shape[0] != mat2.shape[0]:
            raise RuntimeError(f"bmm: expects two 3-D tensors with the same batch size, got shapes "
                               f"{tuple(self.shape)} and {tuple(getattr(mat2, 'shape', ()))}")
        return matmul(self, mat2)

    def mv(self, vec):
        if self.ndim != 2 or getattr(vec, "ndim", 0) != 1:
            raise RuntimeError(f"mv: expects a matrix and a vector, got shapes {tuple(self.shape)} and "
                               f"{tuple(getattr(vec, 'shape', ()))}")
        return matmul(self, vec)

    def dot(self, other):
        if self.ndim != 1 or getattr(other, "ndim", 0) != 1:
            raise RuntimeError(f"dot: expects two 1-D tensors, got shapes {tuple(self.shape)} and "
                               f"{tuple(getattr(other, 'shape', ()))}")
        return matmul(self, other)

    def narrow(self, dim, start, length):
        """The slice [start, start + length) along dim, sharing memory (torch.narrow)."""
        d = self._dim(dim, "narrow")
        size = self.shape[d]
        start = start + size if start < 0 else start
        if not (0 <= start and length >= 0 and start + length <= size):
            raise IndexError(f"narrow: start {start} + length {length} exceeds dim {dim} of size {size}")
        return self[(slice(None),) * d + (slice(start, start + length),)]

    def index_select(self, dim, index):
        """Rows (along dim) picked by a 1-D int64 index; the gradient adds up over repeated indices."""
        d = self._dim(dim, "index_select")
        index = index if isinstance(index, Tensor) else Tensor._make(np.asarray(index, dtype=int64))
        if index.ndim > 1 or index.dtype.kind not in "iu":
            raise IndexError(f"index_select: index must be a 1-D integer tensor, got shape {tuple(index.shape)}, "
                             f"dtype {index.dtype}")
        if self.ndim == 0:  # a 0-d tensor is one row (torch): one index, a 0-d result
            if index.numel() != 1:
                raise IndexError(f"index_select: a 0-d input takes one index, got {index.numel()}")
            return self.reshape(1)[index.reshape(-1)].reshape(())
        return self[(slice(None),) * d + (index.reshape(-1),)]

    def masked_select(self, mask):
        """The elements where mask (broadcast to this shape) is True, as a 1-D tensor."""
        mask = mask._data if isinstance(mask, Tensor) else mask
        xp = get_array_module(self._data)
        if mask.dtype != np.bool_:
            raise TypeError(f"masked_select: mask must be a bool tensor, got {mask.dtype}")
        try:
            shape = np.broadcast_shapes(self.shape, tuple(mask.shape))
        except ValueError:
            raise ValueError(f"masked_select: mask {tuple(mask.shape)} and input {self.shape} cannot be broadcast "
                             "together") from None
        return self.expand(shape)[xp.broadcast_to(mask, shape)]

    def nonzero(self, as_tuple=False):
        """Indices of the non-zero elements: (n, ndim) int64, or a tuple of ndim (n,) tensors."""
        xp = get_array_module(self._data)
        if self.ndim == 0:  # torch: a 0-d tensor answers as one element with no coordinates
            n = builtins.int(bool(self._host_array()))
            if as_tuple:
                return (Tensor._make(xp.zeros(n, dtype=int64)),)
            return Tensor._make(xp.zeros((n, 0), dtype=int64))
        idx = xp.nonzero(self._data)
        if as_tuple:
            return tuple(Tensor._make(i.astype(int64)) for i in idx)
        return Tensor._make(xp.stack(idx, axis=1).astype(int64) if idx else xp.zeros((1, 0), dtype=int64))

    def _scatter(self, dim, index, src, reduce_add, op):
        d = self._dim(dim, op)
        if self.ndim == 0:  # a 0-d self is one element (torch): scatter into its 1-element view
            return self.reshape(1)._scatter(0, index.reshape(-1) if isinstance(index, Tensor) else index,
                                            src.reshape(-1) if isinstance(src, Tensor) else src,
                                            reduce_add, op).reshape(())
        if isinstance(index, Tensor) and index.ndim == 0 and self.ndim == 1:  # torch accepts a 0-d index here
            index = index.reshape(1)
            src = src.reshape(1) if isinstance(src, Tensor) and src.ndim == 0 else src
        if isinstance(index, Tensor) and index.dtype == np.int32:  # torch takes int32 indices too
            index = index.type(int64)
        if not isinstance(index, Tensor) or index.dtype != int64 or index.ndim != self.ndim:
            raise RuntimeError(f"{op}: index must be an int64 tensor with as many dims as self "
                               f"({self.ndim}), got {getattr(index, 'dtype', type(index).__name__)} of shape "
                               f"{tuple(getattr(index, 'shape', ()))}")
        if not isinstance(src, Tensor):
            src = Tensor._make(get_array_module(self._data).full(index.shape, src, dtype=self.dtype))
        elif src.dtype != self.dtype:
            raise RuntimeError(f"{op}: expected self and src to have the same dtype, got {self.dtype} and {src.dtype} "
                               f"(cast src with .to({self.dtype.name}))")
        for i, (si, ss) in enumerate(zip(index.shape, self.shape)):
            if i != d and si > ss or si > src.shape[i]:
                raise RuntimeError(f"{op}: index {tuple(index.shape)} is larger than self {tuple(self.shape)} or "
                                   f"src {tuple(src.shape)} in dim {i}")
        # (checked on the CPU only: on the GPU this would read a device value, a host sync)
        if not index.is_cuda and index.numel() and not (0 <= index._data.min() and index._data.max() < self.shape[d]):
            raise RuntimeError(f"{op}: index {builtins.int(index.max())} is out of bounds for dim {dim} with size "
                               f"{self.shape[d]}")
        return ops.Scatter.apply(self, src.type(self.dtype), index=index._data, dim=d, reduce_add=reduce_add)

    def scatter(self, dim, index, src=None, value=None, reduce=None):
        """out = self with out[index[i][j]][j] = src[i][j] for dim=0, etc. (torch.scatter). reduce='add'
        adds src instead (scatter_add), reduce='multiply' multiplies (no gradient, as in torch)."""
        src = value if src is None else src
        if reduce is None:
            return self._scatter(dim, index, src, False, "scatter")
        if reduce == "add":
            return self._scatter(dim, index, src, True, "scatter")
        if reduce == "multiply":
            if self.requires_grad or isinstance(src, Tensor) and src.requires_grad:
                raise RuntimeError("scatter(reduce='multiply'): no gradient is defined (as in torch); compute it "
                                   "under minidl.no_grad() or with detached tensors")
            # Where values land: scatter the positions 0..n-1 of a flat copy, then multiply with np.multiply.at
            # (repeated indices multiply together, as in torch). Computed on the host (no CuPy multiply.at).
            flat = self.detach().reshape(-1)
            positions = Tensor._make(np.arange(self.numel(), dtype=int64).reshape(self.shape)).to(self.device)
            where_to = positions.gather(self._dim(dim, "scatter"), index if self.ndim == 0 or index.dtype == int64
                                        else index.type(int64))
            out = flat._host_array().copy()
            values = (src._host_array() if isinstance(src, Tensor) else np.full(index.shape, src, dtype=self.dtype))
            np.multiply.at(out, where_to._host_array().reshape(-1),
                           values[tuple(slice(0, n) for n in index.shape)].reshape(-1).astype(self.dtype))
            return Tensor._make(out.reshape(self.shape)).to(self.device)
        raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")

    def scatter_add(self, dim, index, src):
        """out = self with src[i][j] added at out[index[i][j]][j] for dim=0 (repeats add up)."""
        return self._scatter(dim, index, src, True, "scatter_add")

    def scatter_(self, dim, index, src=None, value=None):
        src = value if src is None else src
        return self._inplace("scatter_", lambda t: t._scatter(dim, index, src, False, "scatter_"), src)

    def scatter_add_(self, dim, index, src):
        return self._inplace("scatter_add_", lambda t: t._scatter(dim, index, src, True, "scatter_add_"), src)

    def index_fill(self, dim, index, value):
        """self with the slices named by index along dim set to value (a number or a 0-d tensor, which
        then gets the gradient of every filled element)."""
        d = self._dim(dim, "index_fill")
        xp = get_array_module(self._data)
        mask = xp.zeros(self.shape[d] if self.ndim else 1, dtype=bool)
        mask[index._data if isinstance(index, Tensor) else index] = True
        mask = mask.reshape([-1 if i == d else 1 for i in range(self.ndim)]) if self.ndim else mask.reshape(())
        if isinstance(value, Tensor):
            if value.ndim != 0:
                raise RuntimeError(f"index_fill: value must be a number or a 0-d tensor, got shape {tuple(value.shape)}")
            value = value.type(self.dtype)
        return where(Tensor._make(mask), value, self)

    def sort(self, dim=-1, descending=False, stable=False):
        """(values, indices) sorted along dim; a named tuple, as torch.sort. Ties keep their order."""
        values, indices = ops.Sort.apply(self, dim=self._dim(dim, "sort"), descending=descending)
        return return_types.sort(values, indices)

    def argsort(self, dim=-1, descending=False, stable=False):
        return self.sort(dim, descending).indices

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """The k largest (or smallest) along dim, in order: (values, indices) as torch.topk."""
        d = self._dim(dim, "topk")
        if self.ndim == 0:  # one element (torch): k is 0 or 1, the result 0-d
            if k not in (0, 1):
                raise RuntimeError(f"topk: k ({k}) is out of range for a 0-d tensor")
            values, indices = self.reshape(1).topk(k, 0, largest, sorted)
            return return_types.topk(values.reshape(()) if k else values, indices.reshape(()) if k else indices)
        if not 0 <= k <= (self.shape[d] if self.ndim else 1):
            raise RuntimeError(f"topk: k ({k}) is out of range for dim {dim} of shape {tuple(self.shape)}")
        values, indices = self.sort(d, descending=largest)
        return return_types.topk(values.narrow(d, 0, k), indices.narrow(d, 0, k))

    def kthvalue(self, k, dim=-1, keepdim=False):
        """The k-th smallest (1-based) along dim: (values, indices) as torch.kthvalue."""
        d = self._dim(dim, "kthvalue")
        if self.ndim == 0:  # one element (torch): k must be 1, the result 0-d
            values, indices = self.reshape(1).kthvalue(k, 0)
            return return_types.kthvalue(values.reshape(()), indices.reshape(()))
        if not 1 <= k <= (self.shape[d] if self.ndim else 1):
            raise RuntimeError(f"kthvalue: k ({k}) is out of range for dim {dim} of shape {tuple(self.shape)}")
        values, indices = self.sort(d)
        values, indices = values.narrow(d, k - 1, 1), indices.narrow(d, k - 1, 1)
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return return_types.kthvalue(values, indices)

    def median(self, dim=None, keepdim=False):
        """The lower median (torch.median): a 0-d tensor, or (values, indices) along dim."""
        if dim is None:
            flat = self.reshape(-1)
            return flat.sort().values[(flat.numel() - 1) // 2]
        d = self._dim(dim, "median")
        if self.ndim == 0:
            values, indices = self.kthvalue(1)
            return return_types.median(values, indices)
        values, indices = self.kthvalue((self.shape[d] - 1) // 2 + 1, d, keepdim)
        return return_types.median(values, indices)

    def mode(self, dim=-1, keepdim=False):
        """The most frequent value along dim (ties: the smallest) and the index of its last occurrence,
        as torch.mode. Counted on the host (a loop over rows)."""
        d = self._dim(dim, "mode")
        rows = np.moveaxis(self._host_array(), d, -1) if self.ndim else self._host_array().reshape(1)
        flat = rows.reshape(-1, rows.shape[-1])
        idx = np.empty(flat.shape[0], dtype=int64)
        for r, row in enumerate(flat):
            values, counts = np.unique(row, return_counts=True)
            idx[r] = np.flatnonzero(row == values[np.argmax(counts)])[-1]
        idx = Tensor._make(idx.reshape(rows.shape[:-1])).to(self.device)
        if self.ndim == 0:
            return return_types.mode(self.clone(), idx.reshape(()))
        values = self.gather(d, idx.unsqueeze(d))
        indices = idx.unsqueeze(d)
        if not keepdim:
            values, indices = values.squeeze(d), idx
        return return_types.mode(values, indices)

    def cumsum(self, dim, dtype=None):
        """Running sum along dim (in dtype if given); the gradient is the reversed running sum of the
        output gradient. A 0-d tensor is its own running sum."""
        x = self if dtype is None else self.type(dtype)
        d = self._dim(dim, "cumsum")
        if self.ndim == 0:
            return ops.CumSum.apply(x.reshape(1), dim=0).reshape(())
        return ops.CumSum.apply(x, dim=d)

    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """The p-norm over all elements or over dim, as torch.norm: p = 'fro' (= 2), any number
        (inf: max |x|, -inf: min |x|, 0: the count of nonzeros, negative p as the formula says), or 'nuc'
        (the sum of singular values of a matrix: 2-D input, or dim = two dims). The gradient at a zero
        vector is zero (a subgradient), as PyTorch."""
        if not _dtypes.is_floating(self.dtype):
            raise RuntimeError(f"norm: needs a floating-point tensor, got {self.dtype}")
        x = self if dtype is None else self.type(dtype)
        if p == "fro":
            p = 2
        if p == "nuc":
            if dim is None and self.ndim != 2:
                raise RuntimeError(f"norm(p='nuc'): needs a 2-D input or dim= two dims, got shape {tuple(self.shape)}")
            dims = (0, 1) if dim is None else normalize_dims(dim, self.ndim, "norm")
            if len(dims) != 2:
                raise RuntimeError(f"norm(p='nuc'): dim must name two dims, got {dim!r}")
            rest = [i for i in range(self.ndim) if i not in dims]
            moved = x.permute(*rest, *dims)
            out = ops.NuclearNorm.apply(moved, keepdim=False)
            if keepdim:
                for d in sorted(dims):
                    out = out.unsqueeze(d)
            return out
        if isinstance(p, str) or isinstance(p, bool) or not isinstance(p, numbers.Real) or p != p:
            raise ValueError(f"norm: p must be 'fro', 'nuc' or a number (inf and -inf included), got {p!r}")
        self._check_dim(dim, "norm")
        return ops.Norm.apply(x, p=builtins.float(p), dim=dim, keepdim=keepdim)

    def roll(self, shifts, dims=None):
        """Elements shifted along dims by shifts, wrapping around (torch.roll); dims None: over the flattened
        tensor, then the original shape. A gather, so the gradient rolls back."""
        if dims is None:
            if not isinstance(shifts, numbers.Integral):
                raise ValueError(f"roll: without dims, shifts must be one int, got {shifts!r}")
            n = self.numel()
            idx = (np.arange(n) - builtins.int(shifts)) % max(n, 1)
            return self.reshape(-1)[Tensor._make(idx).to(self.device)].reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
        dims = normalize_dims(dims, self.ndim, "roll", allow_repeats=True)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        out = self
        for s, d in zip(shifts, dims):
            n = self.shape[d]
            if n:
                idx = Tensor._make((np.arange(n) - builtins.int(s)) % n).to(self.device)
                out = out.index_select(d, idx)
        return out

    def unbind(self, dim=0):
        d = self._dim(dim, "unbind")
        return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))

    def flip(self, *dims, **kwargs):
        if "dims" in kwargs:
            dims = (kwargs.pop("dims"),)
        if kwargs:
            raise TypeError(f"flip: unexpected arguments {sorted(kwargs)}")
        dims = list(normalize_dims(_shape_arg(dims), self.ndim, "flip"))
        return self[tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(self.ndim))]

    def tril(self, diagonal=0):
        if self.ndim < 2:
            raise RuntimeError(f"tril: input tensor must have at least 2 dimensions, got shape {tuple(self.shape)}")
        xp = get_array_module(self._data)
        zero = Tensor._make(xp.zeros((), dtype=self.dtype))   # of self's dtype: a bool mask stays bool
        return where(Tensor._make(xp.tril(xp.ones(self.shape[-2:], dtype=bool), diagonal)), self, zero)

    def triu(self, diagonal=0):
        if self.ndim < 2:
            raise RuntimeError(f"triu: input tensor must have at least 2 dimensions, got shape {tuple(self.shape)}")
        xp = get_array_module(self._data)
        zero = Tensor._make(xp.zeros((), dtype=self.dtype))   # of self's dtype: a bool mask stays bool
        return where(Tensor._make(xp.triu(xp.ones(self.shape[-2:], dtype=bool), diagonal)), self, zero)

    def any(self, dim=None, keepdim=False):
        """True where some element along dim (an int, a tuple, or None/() for all) is nonzero."""
        axes = tuple(range(self.ndim)) if dim is None else ops.reduction_axes(dim, self.ndim, "any")
        return Tensor._make(get_array_module(self._data).asarray(self._data.astype(bool).any(axis=axes, keepdims=keepdim)))

    def all(self, dim=None, keepdim=False):
        """True where every element along dim (an int, a tuple, or None/() for all) is nonzero."""
        axes = tuple(range(self.ndim)) if dim is None else ops.reduction_axes(dim, self.ndim, "all")
        return Tensor._make(get_array_module(self._data).asarray(self._data.astype(bool).all(axis=axes, keepdims=keepdim)))

    def where(self, condition, other):
        """x.where(c, y) == minidl.where(c, x, y)."""
        return where(condition, self, other)

    def type_as(self, other):
        return self.type(other.dtype).to(other.device)

    def nelement(self):
        return self.numel()

    def ndimension(self):
        return self.ndim

    def _new(self, array, dtype, device, requires_grad):
        t = Tensor._make(array).to(device=device or self.device, dtype=dtype or self.dtype)
        return t.requires_grad_(True) if requires_grad else t

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return self._new(np.zeros(_shape_arg(size), dtype=dtype or self.dtype), dtype, device, requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return self._new(np.ones(_shape_arg(size), dtype=dtype or self.dtype), dtype, device, requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return self.new_zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        if not isinstance(size, (tuple, list)):
            raise TypeError(f"new_full: size must be a tuple of ints, got {type(size).__name__} {size!r}")
        return self._new(np.full(tuple(size), fill_value, dtype=dtype or self.dtype), dtype, device, requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        """A copy of data with this tensor's dtype and device unless given (torch.Tensor.new_tensor)."""
        src = data._host_array() if isinstance(data, Tensor) else data
        return self._new(np.array(src, dtype=dtype or self.dtype), dtype, device, requires_grad)

    def round(self, decimals=0):
        """Round half to even (torch.round); with decimals, to that many decimal places (negative:
        to tens, hundreds, ...), computed as torch does: round(x * 10**d) / 10**d for d > 0,
        round(x / 10**-d) * 10**-d for d < 0 (so 1234.5 rounds to exactly 1000 at d = -3)."""
        if not _dtypes.is_floating(self.dtype):
            return self
        if decimals == 0:
            return ops.Round.apply(self, how="round")
        if decimals > 0:
            scale = 10.0 ** decimals
            return ops.Round.apply(self * scale, how="round") / scale
        scale = 10.0 ** -decimals
        return ops.Round.apply(self / scale, how="round") * scale

    def floor(self):
        return ops.Round.apply(self, how="floor") if _dtypes.is_floating(self.dtype) else self

    def ceil(self):
        return ops.Round.apply(self, how="ceil") if _dtypes.is_floating(self.dtype) else self

    def trunc(self):
        return ops.Round.apply(self, how="trunc") if _dtypes.is_floating(self.dtype) else self

    def sin(self):
        return ops.Sin.apply(self)

    def cos(self):
        return ops.Cos.apply(self)

    def log1p(self):
        x = self if _dtypes.is_floating(self.dtype) else self.type(_default_dtype)
        return ops.Log1p.apply(*_autocast.cast_inputs("log1p", x))


class _ToDevice(Function):
    """Copy to another device; the gradient is copied back."""

    def forward(self, a, device=None):
        self.src = _device.device_of(a)
        return _device.move_array(a, device)

    def backward(self, g):
        return _device.move_array(g, self.src)


def _promote(a, b, op):
    """Both tensors cast to the dtype of minidl.autograd._promotion.result_type (torch's rules);
    true division of integers gives the default float dtype, as torch.div does."""
    if a._data.dtype == b._data.dtype and (op != "div" or a._data.dtype.kind in "fcV"):
        return a, b
    dtype = result_type(a, b, default_float=_default_dtype)
    if op == "div" and not _dtypes.is_floating(dtype):
        dtype = _default_dtype
    return a.type(dtype), b.type(dtype)


def _comparable(o) -> bool:
    return isinstance(o, (Tensor, numbers.Number, np.bool_, np.ndarray, list, tuple)) or is_cuda_array(o)


def _amax_amin(t, dim, keepdim, op):
    if t.numel() == 0 and (dim in ((), None) or any(t.shape[d] == 0 for d in normalize_dims(dim, t.ndim, op))):
        raise IndexError(f"{op}: cannot reduce a tensor of shape {t.shape} with no elements over dims {dim}")
    if dim is not None:
        t._check_dim(dim, op)
    return ops.AMaxMin.apply(t, dim=dim, keepdim=keepdim, is_max=op == "amax")


def _fits(number, dtype) -> bool:
    """Whether a Python number is exactly a value of `dtype` (0.5 is a float16, 0.1 and 1e5 are not)."""
    if isinstance(number, complex):
        return False
    with np.errstate(over="ignore", under="ignore"):
        v = np.asarray(number, dtype=np.float64).astype(dtype).astype(np.float64)
    return bool(v == number) or (np.isnan(number) and bool(np.isnan(v)))


def _can_view(array, shape) -> bool:
    """Can `array` take `shape` without a copy? (NumPy decides from the strides; CuPy: contiguous only.)"""
    if tuple(array.shape) == tuple(shape) or array.flags.c_contiguous:
        return True
    if not isinstance(array, np.ndarray):
        return False
    v = array.view()
    try:
        v.shape = shape  # raises when a copy would be needed
    except AttributeError:
        return False
    return True


def _shape_arg(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _resolve_shape(old, new):
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


# ------------------------------------------------------------------------------------------------
# Functions on several tensors
# ------------------------------------------------------------------------------------------------


def _check_devices(op, tensors):
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise RuntimeError(f"{op}: expected all tensors on one device, got {sorted(map(str, devices))}")


def matmul(input, other, *, out=None):
    """Matrix product with PyTorch's rules: 1-D, 2-D and batched (broadcast leading dims)."""
    a, b = input, other
    if out is not None:
        from .. import _write_out

        return _write_out(out, matmul(a, b), "matmul")
    if not isinstance(a, Tensor):
        a = Tensor(a)
    b = a._operand(b, "matmul")   # also checks the devices
    a, b = _autocast.cast_inputs("matmul", a, b)
    ad, bd = a._data, b._data
    if ad.dtype != bd.dtype:
        a, b = _promote(a, b, "matmul")
    if type(ad) is np.ndarray and ad.ndim == 2 and bd.ndim == 2 and ad.shape[1] == bd.shape[0]:
        return ops.MatMul.apply(a, b)   # the common CPU case: two matrices that fit, nothing more to check
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both operands need at least 1 dim, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} are not aligned: the last dim of the first ({ka}) must "
            f"equal the {'only' if b.ndim == 1 else 'second-to-last'} dim of the second ({kb})"
        )
    if a.ndim > 2 and b.ndim > 2:
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch dims of {a.shape} and {b.shape} cannot be broadcast") from None
    if a.is_cuda:
        _device.check_not_capturing("matmul (the @ operator) on the GPU",
                                    "it runs on cuBLAS through cupy.matmul, which CuPy cannot call during "
                                    "stream capture (nn.Linear runs on minidl's own SGEMM and can be captured)")
    return ops.MatMul.apply(a, b)


def _check_tensor_list(op, tensors):
    if isinstance(tensors, Tensor):
        raise TypeError(f"{op}: expected a sequence of tensors, got a single Tensor (wrap it in a list)")
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{op}: expected a sequence of tensors, but item {i} is a {type(t).__name__}")
    _check_devices(op, tensors)
    return tensors


def _cast_all(tensors):
    dtype = result_type(*tensors, default_float=_default_dtype)
    return [t.type(dtype) for t in tensors]


def cat(tensors, dim=0):
    """Join tensors along an existing dim; dtypes promote as torch.cat (int64 + float32 -> float32).
    As in torch, 1-D tensors with no elements (the legacy empty tensor, shape (0,)) are skipped."""
    tensors = _check_tensor_list("cat", tensors)
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise ValueError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = result_type(*tensors, default_float=_default_dtype)
    skipped = [t.ndim == 1 and t.shape[0] == 0 for t in tensors]
    kept = [t for t, s in zip(tensors, skipped) if not s]
    if not kept:
        kept, skipped = tensors[:1], [False] + skipped[1:]
    ref = kept[0]
    d = normalize_dim(dim, ref.ndim, "cat")
    for t in kept:
        if t.ndim != ref.ndim or t.shape[:d] + t.shape[d + 1 :] != ref.shape[:d] + ref.shape[d + 1 :]:
            raise ValueError(
                f"cat: tensors must match in every dim except {dim}, got shapes {[tuple(x.shape) for x in tensors]}"
            )
    return ops.Cat.apply(*[t.type(dtype) for t in tensors], dim=d, skip=tuple(skipped))


concat = cat


def stack(tensors, dim=0):
    tensors = _check_tensor_list("stack", tensors)
    if len({t.shape for t in tensors}) != 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {[tuple(t.shape) for t in tensors]}")
    d = normalize_dim(dim, tensors[0].ndim + 1, "stack")
    return ops.Stack.apply(*_cast_all(tensors), dim=d)


def split(tensor, split_size_or_sections, dim=0):
    if tensor.ndim == 0:
        raise ValueError("split: expects at least a 1-dimensional tensor, got a 0-d one")
    dim = normalize_dim(dim, tensor.ndim, "split")
    n = tensor.shape[dim]
    if isinstance(split_size_or_sections, builtins.int) and not isinstance(split_size_or_sections, bool):
        size = split_size_or_sections
        if size < 0 or (size == 0 and n != 0):
            raise ValueError(f"split: split_size must be positive, got {size} (dim {dim} has size {n})")
        if size == 0:
            return (tensor,)
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0 for s in sizes):
            raise ValueError(f"split: sections must be non-negative ints, got {sizes}")
        if sum(sizes) != n:
            raise ValueError(f"split: sections {sizes} do not add up to dim {dim} of size {n}")
    out, start = [], 0
    for s in sizes:
        key = [slice(None)] * tensor.ndim
        key[dim] = slice(start, start + s)
        out.append(tensor[tuple(key)])
        start += s
    return tuple(out)


def chunk(tensor, chunks, dim=0):
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral):
        raise TypeError(f"chunk: chunks must be an int, got {type(chunks).__name__}")
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be greater than 0, got {chunks}")
    if tensor.ndim == 0:
        raise ValueError("chunk: expects at least a 1-dimensional tensor, got a 0-d one")
    dim = normalize_dim(dim, tensor.ndim, "chunk")
    n = tensor.shape[dim]
    size = -(-n // chunks)
    return split(tensor, size, dim)


def where(condition, a, b):
    """Elements of a where condition (a bool tensor) is true, else of b; a and b promote as torch."""
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if cond.dtype != np.bool_:
        raise TypeError(f"where: expected condition to be a bool tensor, got {cond.dtype}")
    ref = a if isinstance(a, Tensor) else b
    if not isinstance(ref, Tensor):
        ref = Tensor(a)
    dtype = result_type(a, b, default_float=_default_dtype)
    a, b = ref._operand(a, "where", dtype), ref._operand(b, "where", dtype)
    try:
        np.broadcast_shapes(tuple(cond.shape), a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"where: condition {tuple(cond.shape)}, input {a.shape} and other {b.shape} cannot be broadcast together"
        ) from None
    if is_cuda_array(cond) != ref.is_cuda:
        cond = _device.move_array(cond, ref.device)
    return ops.Where.apply(cond, a.type(dtype), b.type(dtype))


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)


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


Tensor.equal = lambda self, other: equal(self, other)
Tensor.isclose = lambda self, other, rtol=1e-05, atol=1e-08, equal_nan=False: isclose(self, other, rtol, atol, equal_nan)
Tensor.allclose = lambda self, other, rtol=1e-05, atol=1e-08, equal_nan=False: allclose(self, other, rtol, atol, equal_nan)


# The long tail of elementwise math (minidl/autograd/mathops.py): methods and, in minidl/__init__.py, functions.
from . import mathops as _mathops  # noqa: E402

for _op in _mathops.UNARY:
    setattr(Tensor, _op, _mathops.unary(_op))
for _op in _mathops.BINARY:
    setattr(Tensor, _op, _mathops.binary(_op))
for _alias, _op in _mathops.ALIASES.items():
    setattr(Tensor, _alias, getattr(Tensor, _op))
del _op, _alias

from . import composites as _composites  # noqa: E402

for _name in _composites.METHODS:
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, getattr(_composites, _name))
del _name


def _index_add_(self, dim, index, source, *, alpha=1):
    return self._inplace("index_add_", lambda t: _composites.index_add(t, dim, index, source, alpha=alpha))


Tensor.index_add_ = _index_add_
Tensor.log_ = lambda self: self._inplace("log_", lambda t: t.log())
Tensor.nan_to_num_ = lambda self, nan=0.0, posinf=None, neginf=None: self._inplace(
    "nan_to_num_", lambda t: _composites.nan_to_num(t, nan, posinf, neginf))
Tensor.retains_grad = property(lambda self: self._retains_grad,
                               doc="True after retain_grad() on a non-leaf tensor (torch's attribute)")
