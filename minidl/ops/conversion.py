"""Conversions: devices (to, cpu, cuda), dtypes (type, float, half, ...), memory formats (contiguous,
channels_last, clone), new tensors like one (new_zeros, ...), and what a tensor says about its storage."""
from __future__ import annotations

import builtins

import numpy as np

from .. import _device, _dtypes, _layout, _meta, primitives
from .._device import Device, get_array_module
from .. import _dtypes as _dtypes_module
from .._dtypes import bfloat16, bool_, float16, float32, float64, int32, int64
from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._args import shape_arg
from ._dims import normalize_dim


# ------------------------------------------------------------------------------------------------
# Memory formats (PyTorch's tags)
# ------------------------------------------------------------------------------------------------


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
    return Relayout.apply(t, channels_last=True)


# ------------------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------------------


class Cast(Function):
    """Change dtype; the gradient flows back in the input's dtype. A value beyond float16's range
    becomes inf, silently, as in PyTorch (GradScaler looks for exactly that)."""

    saves_inputs = False

    def forward(self, a, dtype=None):
        self.in_dtype = a.dtype
        return _astype(a, dtype)

    def backward(self, g):
        return _astype(g, self.in_dtype)

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        return g.type(self.in_dtype)


def _astype(a, dtype):
    """a in dtype, overflow to inf without NumPy's warning: on the GPU the cast primitive (one launch of
    kernels/cast.cu for float32 / float16 / bfloat16), on the CPU NumPy's astype. Complex to real keeps the real
    part (as torch, without NumPy's warning)."""
    if a.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        a = a.real
    if not isinstance(a, (np.ndarray, np.generic)):
        return a.astype(dtype) if builtins.type(a) is _meta.MetaArray else primitives.cast(a, dtype)   # (CuPy: the kernel)
    with np.errstate(over="ignore"):
        return a.astype(dtype)


class Contiguous(Function):
    saves_inputs = False

    def forward(self, a):
        # ascontiguousarray makes a 0-d array 1-d: keep the shape
        return get_array_module(a).ascontiguousarray(a).reshape(a.shape)

    def backward(self, g):
        return g

    def backward_graph(self, g):
        return g


class Relayout(Function):
    """The same values in another memory format (minidl._layout): channels_last (NHWC memory) or row-major.
    A copy; the gradient passes through unchanged (its layout is the consumer's business)."""

    saves_inputs = False

    def forward(self, a, channels_last=False, copy=False):
        if copy:
            return _layout.copy_as(a, channels_last)
        return _layout.to_channels_last(a) if channels_last else _layout.to_contiguous(a)

    def backward(self, g):
        return g

    def backward_graph(self, g):
        return g


class _ToDevice(Function):
    """Copy to another device; the gradient is copied back."""

    def forward(self, a, device=None):
        self.src = _device.device_of(a)
        return _device.move_array(a, device)

    def backward(self, g):
        return _device.move_array(g, self.src)


# ------------------------------------------------------------------------------------------------
# Devices, dtypes and layouts
# ------------------------------------------------------------------------------------------------


def to(self, *args, **kwargs):
    """`to(device)`, `to(dtype)`, `to(device, dtype)` or `to(other_tensor)`, then optionally
    non_blocking and copy (positional or keyword) and memory_format, as in PyTorch. copy=True
    returns a new tensor even when nothing changes."""
    kwargs = dict(kwargs)
    fmt = _check_memory_format("to()", kwargs.pop("memory_format", None), self.ndim)
    flags = [a for a in args if isinstance(a, bool)]          # (non_blocking, copy) after the others
    args = [a for a in args if not isinstance(a, bool)]
    copy = builtins.bool(kwargs.pop("copy", flags[1] if len(flags) > 1 else False))
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

LEGACY_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor", "int64": "LongTensor",
                "int32": "IntTensor", "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
                "bool": "BoolTensor", "bfloat16": "BFloat16Tensor"}   # Tensor.type()'s names, as torch's


def type(self, dtype=None):
    """type() -> 'torch.FloatTensor' etc. (PyTorch's names); type(dtype) -> this tensor in that dtype;
    type(FloatTensor or 'torch.FloatTensor', or a torch.cuda form) -> in that dtype, on that device (as torch's:
    x.type(torch.cuda.FloatTensor) moves x to the GPU, x.type(torch.FloatTensor) to the CPU)."""
    if dtype is None:
        return ("torch.cuda." if self.is_cuda else "torch.") + LEGACY_NAMES.get(self.dtype.name, self.dtype.name)
    if isinstance(dtype, str) and dtype.rpartition(".")[2] in LEGACY_NAMES.values():
        name = dtype.rpartition(".")[2]
        on = "cuda" if dtype.startswith(("torch.cuda.", "cuda.")) else "cpu"
        dtype = next(k for k, v in LEGACY_NAMES.items() if v == name)
        moved = self if str(self.device).startswith(on) else self.to(on)
        return type(moved, dtype)
    legacy_device = getattr(dtype, "device", None)
    if isinstance(legacy_device, str) and hasattr(dtype, "legacy_name"):   # a legacy class (autograd/legacy.py)
        moved = self if str(self.device).startswith(legacy_device) else self.to(legacy_device)
        return type(moved, dtype.dtype)
    try:
        dtype = np.dtype(getattr(dtype, "dtype", dtype))
    except TypeError:
        raise TypeError(f"type: unknown dtype {dtype!r} (use a minidl dtype such as minidl.float32, or a name "
                        "such as 'torch.FloatTensor')") from None
    if dtype == self.dtype:
        return self
    if self.requires_grad and dtype in _dtypes.DIFFERENTIABLE_SET:
        return Cast.apply(self, dtype=dtype)
    return Tensor._make(_astype(self._data, dtype))


def as_float(self, memory_format=None):
    return _relayout(self.type(float32), memory_format, "float()")


def as_double(self, memory_format=None):
    return _relayout(self.type(float64), memory_format, "double()")


def as_half(self, memory_format=None):
    return _relayout(self.type(float16), memory_format, "half()")


def as_bfloat16(self, memory_format=None):
    return _relayout(self.type(bfloat16), memory_format, "bfloat16()")


def as_long(self, memory_format=None):
    _check_memory_format("long()", memory_format)
    return self.type(int64)


def as_int(self, memory_format=None):
    _check_memory_format("int()", memory_format)
    return self.type(int32)


def as_bool(self, memory_format=None):
    _check_memory_format("bool()", memory_format)
    return self.type(bool_)


def as_byte(self, memory_format=None):
    _check_memory_format("byte()", memory_format)
    return self.type(_dtypes_module.uint8)


def as_char(self, memory_format=None):
    _check_memory_format("char()", memory_format)
    return self.type(_dtypes_module.int8)


def as_short(self, memory_format=None):
    _check_memory_format("short()", memory_format)
    return self.type(_dtypes_module.int16)


def type_as(self, other):
    return self.type(other.dtype).to(other.device)


def clone(self, memory_format=None):
    """A copy; preserve_format (the default) keeps a channels_last tensor channels_last, as PyTorch."""
    fmt = _check_memory_format("clone", memory_format, self.ndim)
    keep_cl = fmt is channels_last or fmt is channels_last_3d or (
        fmt is preserve_format and _layout.strictly_channels_last(self._data))
    if self.requires_grad:
        return Relayout.apply(self, channels_last=keep_cl, copy=True)
    return Tensor._make(_layout.copy_as(self._data, keep_cl))


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
    return self if self.is_contiguous() else Contiguous.apply(self)


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


# ------------------------------------------------------------------------------------------------
# New tensors like this one
# ------------------------------------------------------------------------------------------------


def _new(self, array, dtype, device, requires_grad):
    t = Tensor._make(array).to(device=device or self.device, dtype=dtype or self.dtype)
    return t.requires_grad_(True) if requires_grad else t


def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return _new(self, np.zeros(shape_arg(size), dtype=dtype or self.dtype), dtype, device, requires_grad)


def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return _new(self, np.ones(shape_arg(size), dtype=dtype or self.dtype), dtype, device, requires_grad)


def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return self.new_zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    if not isinstance(size, (tuple, list)):
        raise TypeError(f"new_full: size must be a tuple of ints, got {builtins.type(size).__name__} {size!r}")
    return _new(self, np.full(tuple(size), fill_value, dtype=dtype or self.dtype), dtype, device, requires_grad)


def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    """A copy of data with this tensor's dtype and device unless given (torch.Tensor.new_tensor)."""
    src = data._host_array() if isinstance(data, Tensor) else data
    return _new(self, np.array(src, dtype=dtype or self.dtype), dtype, device, requires_grad)


def new(self, *args, dtype=None, device=None):
    """torch.Tensor.new, the legacy constructor older programs call: x.new(2, 3) or x.new(x.size()) an uninitialised
    tensor of x's dtype and device, x.new([1, 2]) (a list, tuple or tensor) one holding that data, x.new() an empty
    one."""
    if len(args) == 1 and not isinstance(args[0], (int, np.integer)) and builtins.type(args[0]).__name__ != "Size":
        return self.new_tensor(args[0], dtype=dtype, device=device)
    return self.new_empty(*(args or (0,)), dtype=dtype, device=device)


# ------------------------------------------------------------------------------------------------
# Storage and type predicates
# ------------------------------------------------------------------------------------------------


def is_same_size(self, other):
    return tuple(self.shape) == tuple(other.shape)


def is_conj(self):
    """False: minidl conjugates eagerly (torch's lazy conjugate bit is never set), so resolve_conj is the tensor."""
    return False


def is_neg(self):
    """False: minidl negates eagerly (no lazy negative bit), so resolve_neg is the tensor."""
    return False


def resolve_conj(self):
    return self


def resolve_neg(self):
    return self


def typename(obj):
    """torch.typename: a tensor's legacy type name ('torch.FloatTensor'), else the object's module.qualname."""
    if isinstance(obj, Tensor):
        return obj.type()
    cls = builtins.type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def is_tensor(obj):
    return isinstance(obj, Tensor)


def is_floating_point(t):
    return _dtypes.is_floating(t.dtype)


def is_complex(t):
    return t.dtype.kind == "c"   # complex64 / complex128 (ops/complexops.py)


def is_nonzero(t):
    if t.numel() != 1:
        raise RuntimeError(f"Boolean value of Tensor with {'no values' if t.numel() == 0 else 'more than one value'} is ambiguous")
    return builtins.bool(t.item() != 0)


def pin_memory(t, device=None):
    return t


def is_pinned(t, device=None):
    return False


def _pointer(a):
    """The address of a NumPy or CuPy array's first element."""
    return builtins.int(a.data.ptr) if hasattr(a, "data") and hasattr(a.data, "ptr") else builtins.int(
        a.__array_interface__["data"][0])


def data_ptr(t):
    return _pointer(t._data)


def storage_offset(t):
    base = t._base._data if t._base is not None else None
    if base is None:
        return 0
    return (data_ptr(t) - data_ptr(t._base)) // t._data.itemsize


class UntypedStorage:
    """The memory under a tensor (torch's untyped_storage()): the whole allocation its array views, in bytes. minidl
    has no storage objects of its own; this one describes the NumPy / CuPy buffer, for the code that reads it
    (data_ptr to tell whether two tensors share memory, nbytes to count it)."""

    def __init__(self, array):
        root = array
        while getattr(root, "base", None) is not None and hasattr(root.base, "dtype"):
            root = root.base
        self._root = root

    def data_ptr(self):
        return _pointer(self._root)

    def nbytes(self):
        return builtins.int(self._root.nbytes)

    def size(self):
        return self.nbytes()

    def __len__(self):
        return self.size()

    def element_size(self):
        return 1

    @property
    def device(self):
        from .. import _device

        return _device.device_of(self._root)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def __repr__(self):
        return f"<minidl.UntypedStorage of {self.nbytes()} bytes on {self.device}>"


class TypedStorage(UntypedStorage):
    """torch's storage(): the same memory, counted in elements of the tensor's dtype (deprecated in torch, which
    warns; so does minidl)."""

    def __init__(self, array):
        super().__init__(array)
        self.dtype = array.dtype

    def size(self):
        return self.nbytes() // self.dtype.itemsize

    def element_size(self):
        return self.dtype.itemsize

    def tolist(self):
        from .. import _device

        return _device.move_array(self._root, "cpu").reshape(-1).view(self.dtype).tolist()


def untyped_storage(self):
    return UntypedStorage(self._data)


def storage(self):
    import warnings

    warnings.warn("TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the only "
                  "storage class (as in torch: use tensor.untyped_storage())", UserWarning, stacklevel=2)
    return TypedStorage(self._data)


def detach(input):
    """minidl.detach(t) is t.detach() (the tape's own method, autograd/tensor.py)."""
    return input.detach()


def get_device(self):
    """The CUDA device index, or -1 on the CPU (torch's Tensor.get_device)."""
    return self.device.index if self.is_cuda else -1


def is_signed(self):
    return self.dtype.kind in "fic" or self.dtype.name == "bfloat16"


def isreal(self):
    """True where the element has no imaginary part (everywhere for a real tensor)."""
    from .creation import ones_like

    return (self.imag == 0) if self.is_complex() else ones_like(self, dtype=bool_)


def share_memory_(self):
    """The tensor's values moved into shared memory (an anonymous shared mapping), in place: processes forked after
    this (torch.multiprocessing, the Hogwild example) see and make each other's in-place updates. A GPU tensor, or one
    already shared, stays as it is (as torch's). Processes started by spawn get copies."""
    if self.is_cuda or is_shared(self) or self.is_meta:
        return self
    import mmap

    array = self._data
    buffer = mmap.mmap(-1, max(array.nbytes, 1))
    shared = np.frombuffer(buffer, dtype=array.dtype, count=array.size).reshape(array.shape)
    shared[...] = array
    self._data = shared
    return self


def is_shared(self):
    """Whether the values live in shared memory (share_memory_)."""
    import mmap

    base = self._data
    while getattr(base, "base", None) is not None:
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


def is_cpu(self):
    """On the host: neither a GPU tensor nor a meta one (torch.Tensor.is_cpu)."""
    return not self.is_cuda and not self.is_meta


def not_this_device(self):
    """False: is_xpu, is_mps and the other backends' predicates (minidl runs on the CPU and CUDA GPUs)."""
    return False


def apply_(self, callable):
    """Each element replaced by callable(element), a Python function (torch.Tensor.apply_: CPU tensors only, slow)."""
    if self.is_cuda:
        raise TypeError("apply_ is only implemented on CPU tensors (a Python function runs per element)")
    flat = self._data.reshape(-1)
    for i, v in enumerate(flat.tolist()):
        flat[i] = callable(v)
    self._version += 1
    return self


def map_(self, tensor, callable):
    """Each element replaced by callable(element, the other's element), the other broadcast to this shape."""
    if self.is_cuda or tensor.is_cuda:
        raise TypeError("map_ is only implemented on CPU tensors (a Python function runs per element)")
    other = np.broadcast_to(tensor._data, self.shape).reshape(-1).tolist()
    flat = self._data.reshape(-1)
    for i, (a, b) in enumerate(zip(flat.tolist(), other)):
        flat[i] = callable(a, b)
    self._version += 1
    return self


def resize_(self, *sizes, memory_format=None):
    """This tensor given a new shape in place: the first elements kept in row-major order, new ones uninitialised
    (zeros in minidl), as torch's resize_. A tensor that requires grad cannot be resized (torch's rule)."""
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    shape = shape_arg(sizes)
    xp = get_array_module(self._data)
    flat = self._data.reshape(-1)
    n = int(np.prod(shape, dtype=np.int64))
    out = xp.zeros(n, dtype=self._data.dtype)
    out[:min(n, flat.size)] = flat[:min(n, flat.size)]
    self._data = out.reshape(shape)
    self._version += 1
    return self


def resize_as_(self, other, memory_format=None):
    return resize_(self, *other.shape)


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False):
    """A new uninitialised tensor of size (minidl's arrays are dense: the strides are not kept)."""
    out = self.new_empty(tuple(size), dtype=dtype, device=device)
    return out.requires_grad_(True) if requires_grad else out


def record_stream(self, stream):
    """Nothing to do: minidl allocates and runs on one CUDA stream per device, so no other stream can still be
    reading this tensor when its memory is reused (torch needs the record for its multi-stream allocator)."""
    return None
