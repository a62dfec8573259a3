"""Tensor: an n-dimensional array (NumPy on the CPU, CuPy on the GPU) that records how it was made.

This file is the core of autograd, and only the core: the array (`_data`), its gradient (`.grad`),
the version counter that in-place changes bump, `backward()`, and what a tensor is to Python (its
shape, repr, truth value, conversion to numbers and to NumPy). Ops on tensors call `Function.apply`
(function.py: the tape), which computes the result and, when a gradient is wanted, remembers the op
in `result._ctx`, so that `backward()` can walk the graph in reverse.

Every operation -- `a + b`, `x.sum()`, `x.reshape(...)`, `x[i]`, `x.to("cuda")` -- lives in
minidl/ops/<family>.py, and is bound onto Tensor (and into `minidl.<name>`) from the one table in
minidl/ops/__init__.py. Names and semantics follow PyTorch.
"""
from __future__ import annotations

import builtins
import weakref

import numpy as np

from .. import _device, _dtypes, _meta
from .._device import Device, is_cuda_array
from .._dtypes import bfloat16, bool_, float16, float32, float64, int8, int16, int32, int64, uint8  # noqa: F401
from . import printing
from .function import is_grad_enabled, run_backward
from .return_types import Size

# dtypes are NumPy dtype objects: minidl.float32 == np.dtype("float32"); bfloat16 is ml_dtypes' (see _dtypes)
_default_dtype = float32


class _HookHandle:
    """What Tensor.register_hook returns: remove() takes the hook out again."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def set_default_dtype(dtype):
    global _default_dtype
    dtype = np.dtype(dtype)
    if dtype not in (float32, float64):
        raise TypeError(f"set_default_dtype: only float32 and float64 are supported, got {dtype}")
    _default_dtype = dtype


def get_default_dtype():
    return _default_dtype


def to_array(data, dtype=None, device=None):
    """Anything array-like -> an array of the right dtype on the right device."""
    if isinstance(data, Tensor):
        arr = data._data
    elif is_cuda_array(data) or isinstance(data, (np.ndarray, _meta.MetaArray)):
        arr = data
    else:
        try:
            arr = np.asarray(data)
        except ValueError:
            raise ValueError(f"tensor: the nested lists of {type(data).__name__} data have different lengths "
                             "(a tensor needs a rectangular shape)") from None
        if arr.dtype.kind in "US":
            raise TypeError(f"tensor: cannot make a tensor from strings: {data!r:.60}")
        if dtype is None:
            # Python floats become the default float dtype (float32), Python ints int64, complex numbers its
            # complex counterpart (complex64), as PyTorch.
            if arr.dtype.kind == "f":
                arr = arr.astype(_default_dtype)
            elif arr.dtype.kind == "c":
                arr = arr.astype(np.complex64 if _default_dtype == float32 else np.complex128)
            elif arr.dtype.kind in "iu":
                arr = arr.astype(int64)
    if isinstance(arr, np.ndarray) and arr.dtype == object:
        raise TypeError(f"tensor: cannot make a tensor from {type(data).__name__} holding mixed objects")
    if dtype is not None:
        arr = arr.astype(np.dtype(dtype), copy=False)
    if device is not None:
        arr = _device.move_array(arr, device)
    return arr



class Tensor:
    """An array with autograd. Create with `minidl.tensor(...)`, `minidl.zeros(...)`, etc. Its operations
    are bound from minidl/ops (see the module docstring)."""

    __array_priority__ = 1000  # so `ndarray + Tensor` calls Tensor.__radd__
    __hash__ = object.__hash__  # a tensor is hashed by identity, although == compares elementwise

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
            array = to_array(data, dtype, device)
        elif all(isinstance(d, (builtins.int, np.integer)) and not isinstance(d, builtins.bool) for d in data):
            array = to_array(np.zeros(tuple(builtins.int(d) for d in data) or (0,), dtype=dtype or _default_dtype),
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
        return type(self._data) is not np.ndarray and is_cuda_array(self._data)

    @property
    def is_meta(self) -> bool:
        """On the meta device: a shape and a dtype, no values (minidl/_meta.py)."""
        return type(self._data) is _meta.MetaArray

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

    @property
    def H(self):
        """The conjugate transpose of a matrix (of a real one, its transpose)."""
        return self.T.conj() if self.is_complex() else self.T

    @property
    def mH(self):
        return self.mT.conj() if self.is_complex() else self.mT

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

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.dtype.itemsize * self.numel()

    def is_floating_point(self):
        return _dtypes.is_floating(self.dtype)

    def nelement(self):
        return self.numel()

    def ndimension(self):
        return self.ndim

    # --------------------------------------------------------------------------------------------
    # Autograd: the tape
    # --------------------------------------------------------------------------------------------

    def requires_grad_(self, requires_grad=True):
        if requires_grad and not (_dtypes.is_floating(self.dtype) or self.dtype.kind == "c"):
            raise RuntimeError(f"only floating-point tensors can require gradients, got dtype {self.dtype}")
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor: use .detach() instead")
        self.requires_grad = bool(requires_grad)
        return self

    @property
    def retains_grad(self):
        """True after retain_grad() on a non-leaf tensor (torch's attribute)."""
        return self._retains_grad

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

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's .grad. `gradient` is needed unless self is a scalar.
        create_graph=True records the backward pass too (autograd/higher_order.py): the .grad tensors then have a
        graph of their own, for second derivatives. inputs: accumulate into these tensors' .grad only."""
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
            g = np.ones_like(self._data)   # (NumPy's function hands a CuPy array to CuPy: NEP 18)
        else:
            g = to_array(gradient, dtype=self.dtype)
            if tuple(g.shape) != self.shape:
                raise RuntimeError(f"backward: gradient has shape {tuple(g.shape)}, expected {self.shape}")
            if is_cuda_array(g) != self.is_cuda:
                raise RuntimeError(f"backward: gradient is on {_device.device_of(g)}, tensor on {self.device}")
        if inputs is not None:   # (torch's inputs=: only these leaves' .grad)
            from .function import grad as _grad

            inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
            found = _grad(self, inputs, Tensor._make(g) if gradient is None or not isinstance(gradient, Tensor)
                          else gradient, retain_graph=retain_graph, create_graph=create_graph, allow_unused=True)
            for t, tg in zip(inputs, found):
                if tg is not None:
                    t._grad = tg if t._grad is None else t._grad + tg
            return
        if create_graph:
            from .higher_order import run_backward_graph

            run_backward_graph(self, gradient if isinstance(gradient, Tensor) else Tensor._make(g))
            return
        run_backward(self, g, retain_graph=bool(retain_graph))

    def detach(self):
        """A tensor sharing this one's array (and version counter, as PyTorch) outside the graph."""
        t = Tensor._make(self._data)
        t._vbox = self._vbox
        return t

    def detach_(self):
        self._ctx, self.requires_grad = None, False
        return self

    # --------------------------------------------------------------------------------------------
    # To the host, and Python's protocols
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
        if self.is_meta:   # torch's form: no values to show
            extras = ["device='meta'", f"size={tuple(self.shape)}"]
            if self.dtype not in (_default_dtype, int64, bool_):
                extras.append(f"dtype={Size.spelling}.{self.dtype.name}")
            if self.requires_grad:
                extras.append("requires_grad=True")
            return "tensor(..., " + ", ".join(extras) + ")"
        body = printing.body(self._host_array())   # (torch's format and print options: autograd/printing.py)
        extras = []
        if self.is_cuda:
            extras.append(f"device='{self.device}'")
        if self.dtype not in (_default_dtype, int64, bool_):
            extras.append(f"dtype={Size.spelling}.{self.dtype.name}")
        if self._ctx is not None:
            extras.append(f"grad_fn=<{self._ctx.name}Backward>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # --------------------------------------------------------------------------------------------
    # In-place changes on the tape (the ops themselves: minidl/ops/inplace.py)
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
