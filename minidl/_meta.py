"""The meta device: tensors with a shape and a dtype and no values (torch's device='meta').

What it is for, in the programs that use it:
- building a model without memory, then giving it a real device and real weights:
      with minidl.device("meta"):                  # or nn.Linear(..., device="meta")
          model = Model()                          # no values drawn, nothing allocated
      model.to_empty(device="cpu")                 # uninitialised arrays of the right shapes
      model.load_state_dict(weights)               # (or load_state_dict(weights, assign=True) on the meta model)
- a model's skeleton for torch.func.functional_call, whose parameters are all replaced at the call (the model
  ensembling tutorial: `base = copy.deepcopy(model).to("meta")`).

A meta tensor's array is a MetaArray: shape and dtype only. Elementwise arithmetic (NumPy's ufuncs), matmul,
reshape, transpose and indexing give meta results of the right shape and dtype, and writing into one does nothing
(an initialiser on a meta parameter draws no numbers). Anything that would need values (printing them, .item(),
.numpy(), a convolution, a copy to another device) raises an error that says so.
"""
from __future__ import annotations

import numpy as np


def _no_values(what):
    return RuntimeError(f"{what}: a meta tensor has a shape and a dtype but no values, so minidl cannot compute this "
                        "on it. Give the module a real device with module.to_empty(device='cpu') (or 'cuda') and "
                        "load its weights, or make the tensor on a real device")


def _shape_dtype(x):
    if isinstance(x, MetaArray):
        return x.shape, x.dtype
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    return (), None   # a Python or NumPy scalar


class _Flags:
    """A meta array's memory flags (it is laid out as a C-contiguous array would be)."""

    def __init__(self, c, f):
        self.c_contiguous = self.contiguous = c
        self.f_contiguous = f
        self.writeable = True

    def __getitem__(self, key):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous, "WRITEABLE": True}[key]


class MetaArray:
    """An array's shape and dtype without its values (the array of a tensor on the meta device)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    T = property(lambda self: MetaArray(self.shape[::-1], self.dtype))

    @property
    def strides(self):
        out, step = [], self.dtype.itemsize
        for s in reversed(self.shape):
            out.append(step)
            step *= max(s, 1)
        return tuple(reversed(out))

    @property
    def flags(self):
        return _Flags(True, self.ndim <= 1)

    def _view(self):
        """A zero-stride NumPy stand-in of this shape (no memory), for working out a result's shape."""
        return np.broadcast_to(np.zeros((), self.dtype), self.shape)

    def astype(self, dtype, copy=True):
        return MetaArray(self.shape, dtype)

    def copy(self, order="C"):
        return MetaArray(self.shape, self.dtype)

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return MetaArray(self._view().reshape(shape).shape, self.dtype)

    def transpose(self, *axes):
        axes = axes[0] if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else axes
        return MetaArray(self._view().transpose(*axes).shape, self.dtype)

    def __getitem__(self, key):
        return MetaArray(self._view()[key].shape, self.dtype)

    def __setitem__(self, key, value):
        pass   # no values to write: an initialiser on a meta parameter, or copy_ into one, does nothing (torch's)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d meta tensor")
        return self.shape[0]

    def __repr__(self):
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"

    def __array__(self, dtype=None, copy=None):
        raise _no_values("reading the values of a meta tensor")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """Elementwise ops and matmul: the result's shape by broadcasting, its dtype as NumPy's for these dtypes."""
        out = kwargs.pop("out", None)
        if method != "__call__" or ufunc.nout != 1 or kwargs.get("where") is not None:
            raise _no_values(f"numpy.{ufunc.__name__}.{method}")
        shapes, probes = [], []
        for x in inputs:
            shape, dtype = _shape_dtype(x)
            shapes.append(shape)
            probes.append(x if dtype is None else np.zeros((1,) * len(shape) if ufunc is np.matmul else (), dtype))
        if ufunc is np.matmul:
            a, b = (s if len(s) > 1 else ((1,) + s if i == 0 else s + (1,)) for i, s in enumerate(shapes))
            batch = np.broadcast_shapes(a[:-2], b[:-2])
            shape = batch + ((a[-2],) if len(shapes[0]) > 1 else ()) + ((b[-1],) if len(shapes[1]) > 1 else ())
            probes = [np.zeros((1, 1), p.dtype) if isinstance(p, np.ndarray) else p for p in probes]
        else:
            shape = np.broadcast_shapes(*shapes)
        dtype = np.asarray(ufunc(*probes, **{k: v for k, v in kwargs.items() if k in ("dtype", "casting")})).dtype
        result = MetaArray(shape, dtype)
        return result if out is None else out[0]

    def __array_function__(self, func, types, args, kwargs):
        name = func.__name__
        if name in ("empty_like", "zeros_like", "ones_like", "full_like"):
            dtype = kwargs.get("dtype") or (args[2] if name == "full_like" and len(args) > 2 else None)
            shape = kwargs.get("shape") or self.shape
            return MetaArray(shape, dtype or self.dtype)
        if name in ("shape", "ndim", "size"):
            return getattr(self, name)
        if name in ("reshape", "transpose", "copy", "ascontiguousarray", "broadcast_to"):
            rest = list(args[1:]) + list(kwargs.values())
            if name == "broadcast_to":
                return MetaArray(np.broadcast_shapes(self.shape, tuple(rest[0])), self.dtype)
            if name in ("copy", "ascontiguousarray"):
                return self.copy()
            return getattr(self, name)(*rest) if rest else getattr(self, name)()
        raise _no_values(f"numpy.{name}")

    # Python's operators go through the ufuncs above
    def _binary(ufunc, reflected=False):
        if reflected:
            return lambda self, other: ufunc(other, self)
        return lambda self, other: ufunc(self, other)

    __add__, __radd__ = _binary(np.add), _binary(np.add, True)
    __sub__, __rsub__ = _binary(np.subtract), _binary(np.subtract, True)
    __mul__, __rmul__ = _binary(np.multiply), _binary(np.multiply, True)
    __truediv__, __rtruediv__ = _binary(np.true_divide), _binary(np.true_divide, True)
    __pow__, __rpow__ = _binary(np.power), _binary(np.power, True)
    __matmul__, __rmatmul__ = _binary(np.matmul), _binary(np.matmul, True)
    __lt__, __le__, __gt__, __ge__ = _binary(np.less), _binary(np.less_equal), _binary(np.greater), \
        _binary(np.greater_equal)
    __neg__ = lambda self: np.negative(self)   # noqa: E731
    del _binary

    def __iadd__(self, other):
        return self

    __isub__ = __imul__ = __itruediv__ = __iadd__

    def __bool__(self):
        raise _no_values("the truth value of a meta tensor")

    def __float__(self):
        raise _no_values("float() of a meta tensor")

    def __int__(self):
        raise _no_values("int() of a meta tensor")

    def item(self):
        raise _no_values("item()")

    def get(self):
        raise _no_values("copying a meta tensor to the host")

    def tolist(self):
        raise _no_values("tolist()")

    def fill(self, value):
        pass

    def __getattr__(self, name):
        # (an AttributeError, so that getattr(a, "base", None) and hasattr keep working on meta arrays)
        raise AttributeError(str(_no_values(f"{name} (an array attribute that needs values)")))


class _MetaModule:
    """The 'array module' of the meta device (numpy for the CPU, cupy for a GPU): its factories make MetaArrays."""

    def empty(self, shape, dtype=np.float64, **kwargs):
        return MetaArray(shape if isinstance(shape, (tuple, list)) else (shape,), dtype)

    zeros = ones = empty

    def full(self, shape, fill_value, dtype=None, **kwargs):
        return self.empty(shape, dtype if dtype is not None else np.asarray(fill_value).dtype)

    def eye(self, n, m=None, dtype=np.float64, **kwargs):
        return MetaArray((n, n if m is None else m), dtype)

    def arange(self, start, stop=None, step=1, dtype=None, **kwargs):
        return MetaArray(np.arange(start, stop, step).shape, dtype or np.arange(start, stop, step).dtype)

    def linspace(self, start, stop, num=50, dtype=None, **kwargs):
        return MetaArray((num,), dtype or np.float64)

    def __getattr__(self, name):
        raise _no_values(f"numpy.{name} on the meta device")


xp = _MetaModule()


class _MetaRng:
    """A random generator of the meta device: every draw is a MetaArray of the asked size, and no number is drawn
    (an initialiser on a meta parameter does not move any generator, as torch's)."""

    def __getattr__(self, name):
        def draw(*args, size=None, shape=None, dtype=np.float64, **kwargs):
            size = size if size is not None else shape
            if size is None:
                size = next((a for a in args if isinstance(a, (tuple, list))), ())
            return MetaArray(size if isinstance(size, (tuple, list)) else (size,), dtype)

        return draw


rng = _MetaRng()


def copy_out_error(device):
    return NotImplementedError(f"Cannot copy out of meta tensor; no data! (to '{device}'.) Please use "
                               "Module.to_empty(device=...) instead of Module.to() when moving a module from meta to "
                               "a different device, then load its weights (torch's rule)")
