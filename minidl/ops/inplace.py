"""In-place operations: `x += y`, add_, mul_, clamp_, fill_, zero_, copy_, scatter_, unsqueeze_, ...

They change this tensor's array (so every alias of it sees the change: optimizers, views held by a caller)
and bump its version counter. Two cases, as in PyTorch:
- nothing to record (under no_grad, or no operand requires grad): the array is updated with one
  NumPy/CuPy call, `out=` this array (optimizers and `w -= lr * w.grad` take this path);
- recording: Tensor._inplace (the tape's part, autograd/tensor.py) applies the op to a copy of the old
  value, which takes over this tensor's place in the graph, and this tensor becomes the op's output.
"""
from __future__ import annotations

import builtins
import numbers
import weakref

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from ..autograd.function import is_grad_enabled
from ..autograd.tensor import Tensor, get_default_dtype, to_array
from ._args import operand
from .indexing import SetItem, _scatter, index_add, index_copy, index_put, index_reduce, masked_scatter, scatter_reduce
from .mathops import nan_to_num


def _inplace_binary(self, other, method, op, ufunc=None):
    """self <op>= other. Fast path: one ufunc writing into this array (no copy, no graph)."""
    if ufunc is not None and not self._records_with(other):
        self._check_inplace(op)
        o = operand(self, other, op)._data
        if isinstance(other, (builtins.bool, builtins.float)) or not isinstance(other, numbers.Number):
            other_kind = "b" if isinstance(other, builtins.bool) else (
                "f" if isinstance(other, builtins.float) or _dtypes.is_floating(o.dtype) else o.dtype.kind)
        else:
            other_kind = "i"
        if self.dtype.kind == "b" and other_kind != "b":
            raise RuntimeError(f"{op}: result type {'Float' if other_kind == 'f' else 'Long'} can't be cast to the "
                               f"desired output type {self.dtype}")
        if self.dtype.kind in "iub" and (_dtypes.is_floating(o.dtype) or ufunc == "true_divide"):
            result = o.dtype if _dtypes.is_floating(o.dtype) else get_default_dtype()
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
    return _inplace_binary(self, o, "__add__", "add_", "add")


def __isub__(self, o):
    return _inplace_binary(self, o, "__sub__", "sub_", "subtract")


def __imul__(self, o):
    return _inplace_binary(self, o, "__mul__", "mul_", "multiply")


def __itruediv__(self, o):
    return _inplace_binary(self, o, "__truediv__", "div_", "true_divide")


def __ipow__(self, o):
    return _inplace_binary(self, o, "__pow__", "pow_")


def add_(self, other, alpha=1):
    return _inplace_binary(self, other * alpha if alpha != 1 else other, "__add__", "add_", "add")


def sub_(self, other, alpha=1):
    return _inplace_binary(self, other * alpha if alpha != 1 else other, "__sub__", "sub_", "subtract")


def mul_(self, other):
    return _inplace_binary(self, other, "__mul__", "mul_", "multiply")


def div_(self, other):
    return _inplace_binary(self, other, "__truediv__", "div_", "true_divide")


def pow_(self, other):
    return _inplace_binary(self, other, "__pow__", "pow_")


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


def lerp_(self, end, weight):
    return self._inplace("lerp_", lambda t: t.lerp(end, weight))


def masked_fill_(self, mask, value):
    return self._inplace("masked_fill_", lambda t: t.masked_fill(mask, value), value)


def clamp_(self, min=None, max=None):
    return self._inplace("clamp_", lambda t: t.clamp(min, max))


def fill_(self, value):
    """Every element := value. Inside a graph the gradient to the old value is zero."""
    if self._records_with(value):  # SetItem over everything: the old value gets a zero gradient
        if not isinstance(value, Tensor):
            value = Tensor._make(get_array_module(self._data).asarray(value, dtype=self.dtype))
        return self._inplace("fill_", lambda t: SetItem.apply(t, value.type(self.dtype), key=Ellipsis), value)
    self._check_inplace("fill_")
    self._data[...] = value._data if isinstance(value, Tensor) else value
    self._version += 1
    return self


def zero_(self):
    return self.fill_(0)


def copy_(self, src):
    """self := src (broadcast to this shape, cast to this dtype, moved to this device)."""
    if not isinstance(src, Tensor):
        src = Tensor._make(to_array(src))
    if src.is_cuda != self.is_cuda:
        src = src.to(self.device)
    if self._records_with(src):
        return self._inplace("copy_", lambda t: SetItem.apply(t, src.type(self.dtype), key=Ellipsis), src)
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


def _random_fill(self, op, make):
    """self := make(u), u uniform in [0, 1) of self's shape in float64 (minidl's generator), cast to self's dtype."""
    self._check_inplace(op)
    from .. import random

    u = random.uniform_array(self.shape, 0.0, 1.0, np.float64, self.device)
    self._data[...] = make(get_array_module(self._data), u).astype(self.dtype, copy=False)
    self._version += 1
    return self


def bernoulli_(self, p=0.5, *, generator=None):
    """Each element := 1 with probability p (a number, or a tensor of probabilities broadcast to self), else 0."""
    probs = p._data if isinstance(p, Tensor) else p
    return _random_fill(self, "bernoulli_", lambda xp, u: u < probs)


def tril_(self, diagonal=0):
    return self._inplace("tril_", lambda t: t.tril(diagonal))


def triu_(self, diagonal=0):
    return self._inplace("triu_", lambda t: t.triu(diagonal))


def fill_diagonal_(self, fill_value, wrap=False):
    """The main diagonal := fill_value (all dims equal, or a tall 2-D matrix: its first square, or with wrap every
    N + 1 rows again, as torch's)."""
    if self.ndim < 2 or (self.ndim > 2 and len(set(self.shape)) != 1):
        raise RuntimeError(f"fill_diagonal_: dimensions must be larger than 1 (and all equal above 2-D), got shape "
                           f"{tuple(self.shape)}")
    xp = get_array_module(self._data)
    mask = xp.zeros(self.shape, dtype=bool)
    if self.ndim == 2:   # positions every cols + 1 elements of the row-major storage (numpy.fill_diagonal's)
        rows, cols = self.shape
        flat = xp.arange(0, rows * cols, cols + 1) if wrap else xp.arange(min(rows, cols)) * (cols + 1)
        mask.reshape(-1)[flat] = True
    else:
        n = self.shape[0]
        mask[(xp.arange(n),) * self.ndim] = True
    keep = Tensor._make(mask)
    return self._inplace("fill_diagonal_", lambda t: t.masked_fill(keep, fill_value))


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Each element := a draw of Cauchy(median, sigma): median + sigma tan(pi (u - 1/2))."""
    return _random_fill(self, "cauchy_", lambda xp, u: median + sigma * xp.tan(np.pi * (u - 0.5)))


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Each element := exp of a draw of Normal(mean, std)."""
    from .. import random

    self._check_inplace("log_normal_")
    z = random.normal_array(self.shape, mean, std, np.float64, self.device)
    self._data[...] = get_array_module(self._data).exp(z).astype(self.dtype, copy=False)
    self._version += 1
    return self


def geometric_(self, p, *, generator=None):
    """Each element := the number of Bernoulli(p) trials up to the first success: ceil(log(1 - u) / log(1 - p))."""
    if not 0 < p <= 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1], but got p={p}")
    if p == 1:
        return self.fill_(1)
    return _random_fill(self, "geometric_", lambda xp, u: xp.maximum(xp.ceil(xp.log1p(-u) / np.log1p(-p)), 1))


def exponential_(self, lambd=1.0, *, generator=None):
    """Each element := a draw of Exponential(lambd): -log(1 - u) / lambd."""
    if lambd <= 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _random_fill(self, "exponential_", lambda xp, u: -xp.log1p(-u) / lambd)


def random_(self, from_=0, to=None, *, generator=None):
    """Each element := an integer drawn uniformly from [from, to) (torch's Tensor.random_; one argument is `to`;
    without `to`: up to 2^mantissa bits for floating dtypes, the dtype's maximum + 1 for integers)."""
    if to is None and from_ != 0:
        from_, to = 0, from_
    if to is None:
        to = (2 ** (np.finfo(self.dtype).nmant + 1) if _dtypes.is_floating(self.dtype) else
              int(np.iinfo(self.dtype).max) + 1 if self.dtype.kind in "iu" else 2)
    if to <= from_:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={from_} >= to={to}")
    return _random_fill(self, "random_", lambda xp, u: xp.floor(from_ + u * (to - from_)))


def masked_scatter_(self, mask, source):
    return self._inplace("masked_scatter_", lambda t: masked_scatter(t, mask, source), source)


def index_fill_(self, dim, index, value):
    return self._inplace("index_fill_", lambda t: t.index_fill(dim, index, value), value)


def index_copy_(self, dim, index, source):
    return self._inplace("index_copy_", lambda t: index_copy(t, dim, index, source), source)


def index_put_(self, indices, values, accumulate=False):
    return self._inplace("index_put_", lambda t: index_put(t, indices, values, accumulate), values)


def erfinv_(self):
    return self._inplace("erfinv_", lambda t: t.erfinv())


def scatter_(self, dim, index, src=None, value=None):
    src = value if src is None else src
    return self._inplace("scatter_", lambda t: _scatter(t, dim, index, src, False, "scatter_"), src)


def scatter_add_(self, dim, index, src):
    return self._inplace("scatter_add_", lambda t: _scatter(t, dim, index, src, True, "scatter_add_"), src)


def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    return self._inplace("scatter_reduce_", lambda t: scatter_reduce(t, dim, index, src, reduce,
                                                                       include_self=include_self), src)


def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return self._inplace("index_reduce_", lambda t: index_reduce(t, dim, index, source, reduce,
                                                                 include_self=include_self), source)


def index_add_(self, dim, index, source, *, alpha=1):
    return self._inplace("index_add_", lambda t: index_add(t, dim, index, source, alpha=alpha))


def log_(self):
    return self._inplace("log_", lambda t: t.log())


def nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
    return self._inplace("nan_to_num_", lambda t: nan_to_num(t, nan, posinf, neginf))


def write_out(out, result, name):
    """torch's out= argument: the result is written into `out` (resized as torch does), which is returned."""
    if out.requires_grad and is_grad_enabled():
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad")
    if out.shape != result.shape:
        out._data = result._data.astype(out.dtype, copy=True)
        out._version += 1
        return out
    return out.copy_(result.detach())


# ------------------------------------------------------------------------------------------------
# In-place shape changes
# ------------------------------------------------------------------------------------------------


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
    return _inplace_shape(self, "unsqueeze_", lambda t: t.unsqueeze(dim))


def squeeze_(self, dim=None):
    return _inplace_shape(self, "squeeze_", lambda t: t.squeeze(dim))


def t_(self):
    return _inplace_shape(self, "t_", lambda t: t.t())


def transpose_(self, dim0, dim1):
    return _inplace_shape(self, "transpose_", lambda t: t.transpose(dim0, dim1))


# --- In-place forms of out-of-place ops (t.sin_() is t's value replaced by t.sin(), recorded as any in-place op) --
def _inplace_of(method):
    def inplace(self, *args, **kwargs):
        return self._inplace(f"{method}_", lambda t: getattr(t, method)(*args, **kwargs),
                             other=next((a for a in args if isinstance(a, Tensor)), None))

    inplace.__name__ = f"{method}_"
    inplace.__doc__ = f"self = self.{method}(...), in place (torch's Tensor.{method}_)."
    return inplace


sin_, cos_, tan_, sinh_, cosh_ = (_inplace_of(m) for m in ("sin", "cos", "tan", "sinh", "cosh"))
asin_, acos_, atan_, log2_, log10_ = (_inplace_of(m) for m in ("asin", "acos", "atan", "log2", "log10"))
floor_, ceil_, trunc_, frac_, sign_ = (_inplace_of(m) for m in ("floor", "ceil", "trunc", "frac", "sign"))
round_, square_, reciprocal_, rsqrt_ = (_inplace_of(m) for m in ("round", "square", "reciprocal", "rsqrt"))
log1p_, expm1_, erf_, erfc_, logit_ = (_inplace_of(m) for m in ("log1p", "expm1", "erf", "erfc", "logit"))
atan2_, hypot_, remainder_, fmod_ = (_inplace_of(m) for m in ("atan2", "hypot", "remainder", "fmod"))
floor_divide_, clamp_min_, clamp_max_ = (_inplace_of(m) for m in ("floor_divide", "clamp_min", "clamp_max"))
copysign_, xlogy_, logical_not_, addmm_ = (_inplace_of(m) for m in ("copysign", "xlogy", "logical_not", "addmm"))
baddbmm_, addmv_, addbmm_ = (_inplace_of(m) for m in ("baddbmm", "addmv", "addbmm"))
# The comparisons (x.gt_(0): x becomes 1 where it was > 0, 0 elsewhere, in its own dtype), the other arithmetic,
# logical, bitwise and special functions, and the arc- spellings: each name's in-place form, bound in ops/__init__.
DERIVED_INPLACE = (
    "eq ne lt le gt ge greater greater_equal less less_equal not_equal divide multiply subtract true_divide "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift "
    "bitwise_right_shift cumsum cumprod addr float_power heaviside sgn lcm gcd ldexp lgamma digamma polygamma "
    "mvlgamma sinc i0 deg2rad rad2deg fix exp2 nextafter arccos arccosh arcsin arcsinh arctan arctan2 arctanh acosh "
    "asinh atanh absolute negative renorm").split()
globals().update({f"{_m}_": _inplace_of(_m) for _m in DERIVED_INPLACE})
