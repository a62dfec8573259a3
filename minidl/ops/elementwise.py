"""Elementwise ops: arithmetic (+ - * / ** % //), comparisons, and unary math (exp, log, sqrt, abs, clamp,
round, sin, ...). Each op is a Function -- its forward and its backward side by side, on plain arrays, with
`xp` = NumPy or CuPy, so it is written once for both devices -- followed by its function form.

The function forms take the tensor as `self`: they are Tensor's methods, bound from the table in
minidl/ops/__init__.py (and minidl.<name> where torch has that function). A binary op goes through
`binary`: two tensors of one dtype on one device go straight to the Function; otherwise Python scalars
are wrapped, dtypes promoted with torch's rules (_promotion.py) and the shapes checked.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import _device, _dtypes, _layout
from .._device import get_array_module, is_cuda_array
from .._dtypes import float32, is_floating
from ..amp import autocast_mode as _amp
from ..autograd.function import Function, is_grad_enabled, unbroadcast
from ..autograd.higher_order import saved_input, sum_to
from ..autograd.tensor import Tensor, get_default_dtype
from ._args import FULL_FLOATS, bfloat16_on_gpu, fits, operand
from .conversion import _astype
from .unary import (  # noqa: F401  (the unary Functions: unary.py)
    Abs, Clamp, ClampTensor, Cos, Exp, Log, Log1p, Neg, Round, Sign, Sin, Sqrt,
)
from ._promotion import result_type


# ------------------------------------------------------------------------------------------------
# Functions: binary, with broadcasting (gradients are summed back to each input's shape)
# ------------------------------------------------------------------------------------------------


def _as_inputs(fn, ga, gb):
    """The gradients in their inputs' dtypes where the op promoted a 16-bit input to float32 (binary's mixed
    path); the cast as the cast op's backward makes it (kernels/cast.cu on the GPU)."""
    a_dtype, b_dtype = fn.mixed
    return (ga if ga is None or ga.dtype == a_dtype else _astype(ga, a_dtype),
            gb if gb is None or gb.dtype == b_dtype else _astype(gb, b_dtype))


class Add(Function):
    saves_inputs = False

    def forward(self, a, b):
        self.shapes = (a.shape, b.shape)
        self.mixed = (a.dtype, b.dtype) if a.dtype != b.dtype else None
        return _layout.pointwise(lambda x, y: x + y, a, b)

    def backward(self, g):
        ga, gb = unbroadcast(g, self.shapes[0]), unbroadcast(g, self.shapes[1])
        return (ga, gb) if self.mixed is None else _as_inputs(self, ga, gb)

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        return sum_to(g, self.shapes[0]), sum_to(g, self.shapes[1])


class Sub(Function):
    saves_inputs = False

    def forward(self, a, b):
        self.shapes = (a.shape, b.shape)
        self.mixed = (a.dtype, b.dtype) if a.dtype != b.dtype else None
        return _layout.pointwise(lambda x, y: x - y, a, b)

    def backward(self, g):
        ga, gb = unbroadcast(g, self.shapes[0]), unbroadcast(-g, self.shapes[1])
        return (ga, gb) if self.mixed is None else _as_inputs(self, ga, gb)

    def backward_graph(self, g):
        return sum_to(g, self.shapes[0]), sum_to(-g, self.shapes[1])


def _conj_of(x):
    """A tensor's conjugate (itself when real), or a number as it is (backward_graph's saved scalars)."""
    return x.conj() if isinstance(x, Tensor) else x


def _conj(a):
    """a's complex conjugate, a itself when real: a product's gradient takes the other factor conjugated (torch's
    convention for complex tensors, ops/complexops.py)."""
    return a.conj() if a.dtype.kind == "c" else a


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        self.mixed = (a.dtype, b.dtype) if a.dtype != b.dtype else None
        return _layout.pointwise(lambda x, y: x * y, a, b)

    def backward(self, g):
        ga = unbroadcast(g * _conj(self.b), self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * _conj(self.a), self.b.shape) if self.needs_input_grad[1] else None
        return (ga, gb) if self.mixed is None else _as_inputs(self, ga, gb)

    def backward_graph(self, g):
        a, b = saved_input(self, 0, self.a), saved_input(self, 1, self.b)
        return (sum_to(g * _conj_of(b), self.a.shape) if self.needs_input_grad[0] else None,
                sum_to(g * _conj_of(a), self.b.shape) if self.needs_input_grad[1] else None)


class Div(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return _layout.pointwise(lambda x, y: x / y, a, b)

    def backward(self, g):
        ga = unbroadcast(g / _conj(self.b), self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * _conj(self.a / (self.b * self.b)), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb

    def backward_graph(self, g):
        a, b = saved_input(self, 0, self.a), saved_input(self, 1, self.b)
        return (sum_to(g / b, self.a.shape) if self.needs_input_grad[0] else None,
                sum_to(-g * a / (b * b), self.b.shape) if self.needs_input_grad[1] else None)


class Pow(Function):
    """a ** b for tensors a and b (b may be a broadcast scalar array)."""

    saves_output = True

    def forward(self, a, b):
        self.a, self.b = a, b
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/inf as torch, no warning
            self.out = a**b
        return self.out

    def backward(self, g):
        xp = get_array_module(g)
        ga = gb = None
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.needs_input_grad[0]:
                ga = unbroadcast(g * self.b * self.a ** (self.b - 1), self.a.shape)
            if self.needs_input_grad[1]:
                # d(a^b)/db = a^b log a, defined as 0 where a^b == 0 (the limit for a -> 0+).
                log_a = xp.log(xp.where(self.a > 0, self.a, 1))
                gb = unbroadcast(g * self.out * log_a, self.b.shape)
        return ga, gb

    def backward_graph(self, g):
        a, b = saved_input(self, 0, self.a), saved_input(self, 1, self.b)
        ga = sum_to(g * b * a ** (b - 1), self.a.shape) if self.needs_input_grad[0] else None
        gb = None
        if self.needs_input_grad[1]:   # (a may be a number: 2 ** x)
            log_a = a.where(a > 0, a.new_ones(())).log() if isinstance(a, Tensor) else (math.log(a) if a > 0 else 0.0)
            gb = sum_to(g * (a ** b) * log_a, self.b.shape)
        return ga, gb


class Maximum(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return get_array_module(a).maximum(a, b)

    def backward(self, g):
        # Ties split the gradient evenly, as PyTorch does.
        a_wins = (self.a > self.b).astype(g.dtype) + 0.5 * (self.a == self.b).astype(g.dtype)
        return unbroadcast(g * a_wins, self.a.shape), unbroadcast(g * (1 - a_wins), self.b.shape)


class Minimum(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return get_array_module(a).minimum(a, b)

    def backward(self, g):
        a_wins = (self.a < self.b).astype(g.dtype) + 0.5 * (self.a == self.b).astype(g.dtype)
        return unbroadcast(g * a_wins, self.a.shape), unbroadcast(g * (1 - a_wins), self.b.shape)


class Where(Function):
    saves_inputs = False

    def forward(self, cond, a, b):
        self.cond, self.shapes = cond, (a.shape, b.shape)
        return _dtypes.where(get_array_module(a), cond, a, b)

    def backward(self, g):
        xp, zero = get_array_module(g), g.dtype.type(0)
        ga = unbroadcast(_dtypes.where(xp, self.cond, g, zero), self.shapes[0])
        gb = unbroadcast(_dtypes.where(xp, self.cond, zero, g), self.shapes[1])
        return None, ga, gb

    def backward_graph(self, g):
        cond, zero = saved_input(self, 0, self.cond), g.new_zeros(())
        return None, sum_to(g.where(cond, zero), self.shapes[0]), sum_to(zero.where(cond, g), self.shapes[1])


class Remainder(Function):
    """a - b * floor(a / b) (Python's %, torch.remainder: the sign of b); da = 1, db = -floor(a / b)."""

    def forward(self, a, b):
        self.a, self.b = a, b
        return a % b

    def backward(self, g):
        xp = get_array_module(g)
        ga = unbroadcast(g, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * xp.floor(self.a / self.b), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class RoundedDiv(Function):
    """a / b rounded toward zero (mode 'trunc') or down (mode 'floor': Python's and torch's floor
    division), in a's dtype (integers stay integers). torch defines the gradient as zero."""

    saves_inputs = False

    def forward(self, a, b, mode="trunc"):
        xp = get_array_module(a)
        self.shapes = (a.shape, b.shape)
        if bfloat16_on_gpu(a):
            # As torch (and ml_dtypes on the CPU): the quotient rounded to bfloat16, then rounded down/to zero.
            a, b = a.astype(float32), b.astype(float32)
            if mode == "trunc":
                return xp.trunc((a / b).astype(_dtypes.bfloat16).astype(float32)).astype(_dtypes.bfloat16)
            return self.forward(a, b, mode).astype(_dtypes.bfloat16)
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode == "floor" and xp is not np and is_floating(a.dtype):
                return _python_floor_divide(xp, a, b)
            if mode == "floor":
                return xp.floor_divide(a, b)
            if is_floating(a.dtype):
                return xp.trunc(a / b)
            q = xp.floor_divide(a, b)   # integers toward zero: floor, plus one where it rounded a negative down
            return q + ((q < 0) & (q * b != a)).astype(q.dtype)

    def backward(self, g):
        xp = get_array_module(g)
        return xp.zeros(self.shapes[0], dtype=g.dtype), xp.zeros(self.shapes[1], dtype=g.dtype)


def _python_floor_divide(xp, a, b):
    """Floor division with Python's (NumPy's, torch's) rounding for floats: from fmod, so -1e-30 // 3 is
    -1 (CuPy's floor_divide is floor(a / b), which gives -0 there)."""
    mod = xp.fmod(a, b)
    div = (a - mod) / b
    div = xp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = xp.floor(div)
    floored = xp.where(div - floored > 0.5, floored + 1, floored)
    return xp.where(div == 0, xp.copysign(xp.zeros_like(div), a / b), floored).astype(a.dtype, copy=False)


# ------------------------------------------------------------------------------------------------
# Dispatch of a binary op: the common case first, then promotion and Python scalars
# ------------------------------------------------------------------------------------------------


_MIXED_OPS = frozenset(("add", "sub", "mul"))   # computed directly on a float32 and a 16-bit operand
_HALVES = frozenset(_dtypes.HALF_DTYPES)


def binary(self, other, fn, op, reverse=False, **kwargs):
    # The common case first (issue 23: the host cost of one op): two tensors of one dtype on one device
    # need no promotion, no scalar wrapping and no casts; shapes are checked only when they differ.
    if type(other) is Tensor or isinstance(other, Tensor):
        sd, od = self._data, other._data
        if type(sd) is type(od) and (
                (sd.dtype == od.dtype and (op != "div" or sd.dtype.kind in "fcV"))
                # float32 with a 16-bit float (autocast's residual stream, x + attn(x)): promoted to float32 inside
                # the array op, as torch's kernels promote, instead of a cast op and its launch first; the op's
                # backward casts the 16-bit input's gradient back (_as_inputs). (A 0-d tensor beside a dimensioned
                # one follows torch's category rule instead: the general path.)
                or (op in _MIXED_OPS and (sd.ndim == 0) == (od.ndim == 0)
                    and ((sd.dtype == float32 and od.dtype in _HALVES) or (od.dtype == float32 and sd.dtype in _HALVES)))):
            a, b = (other, self) if reverse else (self, other)
            if sd.shape != od.shape:
                try:
                    np.broadcast_shapes(a.shape, b.shape)
                except ValueError:
                    raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None
            return fn.apply(a, b, **kwargs)
    elif (type(other) is float or type(other) is int) and self._data.dtype in FULL_FLOATS:
        # a float32/float64 tensor and a Python number: the tensor's dtype, as torch's promotion gives. On the
        # GPU the number goes to the kernel as a NumPy scalar of that dtype, an argument passed by value (as
        # torch passes it): no 0-d array to fill first, one launch instead of two, and a CUDA graph captures
        # the value with the kernel.
        data = self._data
        if type(data) is np.ndarray:
            o = operand(self, other, op, data.dtype)
        else:
            o = Tensor._make(None)
            o._data = data.dtype.type(other)   # (after _make, which would turn a NumPy scalar into a 0-d array)
        return fn.apply(*((o, self) if reverse else (self, o)), **kwargs)
    if _dtypes.is_half(self.dtype) and isinstance(other, numbers.Number) and not fits(other, self.dtype):
        # PyTorch keeps a Python scalar at float32 precision against a half tensor ("opmath": x * 0.1,
        # x * 1e5 in float16 compute in float32 and round once) instead of rounding the scalar to half
        # first (0.1 -> 0.09998, 1e5 -> inf, so 0 * 1e5 = NaN). Scalars that are exactly half values
        # (0.5, 2, 3) give the same result directly, without the two casts.
        return binary(self.float(), other, fn, op, reverse, **kwargs).type(self.dtype)
    if not isinstance(other, (Tensor, numbers.Number, np.bool_)):
        other = operand(self, other, op)  # arrays and lists become tensors; anything else: TypeError
    dtype = result_type(self, other, default_float=get_default_dtype())
    if op == "div" and not _dtypes.is_floating(dtype):
        dtype = get_default_dtype()  # true division of integers gives the default float, as torch.div
    other = operand(self, other, op, dtype)
    a, b = (other, self) if reverse else (self, other)
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None
    return fn.apply(a.type(dtype), b.type(dtype), **kwargs)


# comparisons: no gradient, boolean results
# ------------------------------------------------------------------------------------------------
# Arithmetic operators and their named forms
# ------------------------------------------------------------------------------------------------


def __add__(self, o):
    return binary(self, o, Add, "add")


def __radd__(self, o):
    return binary(self, o, Add, "add", reverse=True)


def __sub__(self, o):
    return binary(self, o, Sub, "sub")


def __rsub__(self, o):
    return binary(self, o, Sub, "sub", reverse=True)


def __mul__(self, o):
    return binary(self, o, Mul, "mul")


def __rmul__(self, o):
    return binary(self, o, Mul, "mul", reverse=True)


def __truediv__(self, o):
    return binary(self, o, Div, "div")


def __rtruediv__(self, o):
    t = self
    if _amp.regions:
        (t,) = _amp.cast_inputs("rtruediv", self)
    return binary(t, o, Div, "div", reverse=True)


def __pow__(self, o):
    t = self
    if _amp.regions:
        t, o = _amp.cast_inputs("pow", self, o)
    return binary(t, o, Pow, "pow")


def __rpow__(self, o):
    t = self
    if _amp.regions:
        t, o = _amp.cast_inputs("pow", self, o)
    return binary(t, o, Pow, "pow", reverse=True)


def __neg__(self):
    return Neg.apply(self)


def __pos__(self):
    return self


def __floordiv__(self, o):
    o = operand(self, o, "floor_divide")
    return Tensor._make(self._data // o._data)


def __mod__(self, o):
    o = operand(self, o, "remainder")
    if _dtypes.is_floating(self.dtype) and (self.requires_grad or o.requires_grad) and is_grad_enabled():
        return Remainder.apply(self, o)
    return Tensor._make(self._data % o._data)


def __rfloordiv__(self, o):
    return __floordiv__(operand(self, o, "floor_divide"), self)


def __rmod__(self, o):
    return __mod__(operand(self, o, "remainder"), self)


def __abs__(self):
    return self.abs()


def remainder(self, other):
    """Python's modulo, the sign of the divisor (torch.remainder), with its gradient."""
    return self % other


def add(self, o, alpha=1):
    return self + (o * alpha if alpha != 1 else o)


def sub(self, o, alpha=1):
    return self - (o * alpha if alpha != 1 else o)


def rsub(self, o, alpha=1):
    """o - alpha * self (torch.rsub: sub with its operands swapped)."""
    return o - (self * alpha if alpha != 1 else self)


def mul(self, o):
    return self * o


def div(self, o, rounding_mode=None):
    """self / o; rounding_mode 'trunc' rounds toward zero, 'floor' down (integers then stay
    integers), as torch.div. The rounded forms have a zero gradient (as in torch)."""
    if rounding_mode is None:
        return self / o
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return binary(self, o, RoundedDiv, "div_" + rounding_mode, mode=rounding_mode)


def pow(self, o):
    return self**o


def float_power(self, exponent):
    """self ** exponent in double precision (complex128 when either is complex), as torch.float_power."""
    wide = _dtypes.complex128 if self.is_complex() or isinstance(exponent, complex) or (
        isinstance(exponent, Tensor) and exponent.is_complex()) else _dtypes.float64
    base = self.type(wide)
    return base ** (exponent.type(wide) if isinstance(exponent, Tensor) else exponent)


def neg(self):
    return -self


def square(self):
    return self * self


def lerp(self, end, weight):
    """self + weight * (end - self) (torch.lerp): weight a number or a tensor, with its gradient."""
    return self + (end - self) * weight


# ------------------------------------------------------------------------------------------------
# Unary math
# ------------------------------------------------------------------------------------------------


def exp(self):
    if _amp.regions:
        (self,) = _amp.cast_inputs("exp", self)
    return Exp.apply(self)


def log(self):
    if _amp.regions:
        (self,) = _amp.cast_inputs("log", self)
    return Log.apply(self)


def sqrt(self):
    return Sqrt.apply(self)


def rsqrt(self):
    if _amp.regions:
        (self,) = _amp.cast_inputs("rsqrt", self)
    return 1.0 / Sqrt.apply(self)


def abs(self):
    return Abs.apply(self)


def sign(self):
    """-1, 0 or 1; its gradient is zero everywhere (as torch, which still records it)."""
    return Sign.apply(self)


def clamp(self, min=None, max=None):
    """Elementwise min(max(self, min), max); min and max may be numbers or tensors (broadcast).
    Where min > max the result is max, as torch. The gradient flows where min <= self <= max."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        dtype = result_type(self, min, max, default_float=get_default_dtype())
        lo = None if min is None else operand(self, min, "clamp", dtype).type(dtype)
        hi = None if max is None else operand(self, max, "clamp", dtype).type(dtype)
        shapes = [x.shape for x in (self, lo, hi) if x is not None]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(f"clamp: shapes {shapes} of input, min and max cannot be broadcast together") from None
        return ClampTensor.apply(self.type(dtype), lo, hi)
    return Clamp.apply(self, min=min, max=max)


def maximum(self, o):
    return binary(self, o, Maximum, "maximum")


def minimum(self, o):
    return binary(self, o, Minimum, "minimum")


def round(self, decimals=0):
    """Round half to even (torch.round); with decimals, to that many decimal places (negative:
    to tens, hundreds, ...), computed as torch does: round(x * 10**d) / 10**d for d > 0,
    round(x / 10**-d) * 10**-d for d < 0 (so 1234.5 rounds to exactly 1000 at d = -3)."""
    if not _dtypes.is_floating(self.dtype):
        return self
    if decimals == 0:
        return Round.apply(self, how="round")
    if decimals > 0:
        scale = 10.0 ** decimals
        return Round.apply(self * scale, how="round") / scale
    scale = 10.0 ** -decimals
    return Round.apply(self / scale, how="round") * scale


def floor(self):
    return Round.apply(self, how="floor") if _dtypes.is_floating(self.dtype) else self


def ceil(self):
    return Round.apply(self, how="ceil") if _dtypes.is_floating(self.dtype) else self


def trunc(self):
    return Round.apply(self, how="trunc") if _dtypes.is_floating(self.dtype) else self


def sin(self):
    return Sin.apply(self)


def cos(self):
    return Cos.apply(self)


def log1p(self):
    x = self if _dtypes.is_floating(self.dtype) else self.type(get_default_dtype())
    if _amp.regions:
        (x,) = _amp.cast_inputs("log1p", x)
    return Log1p.apply(x)


def tensor_where(self, condition, other):
    """x.where(c, y) == minidl.where(c, x, y) (Tensor.where)."""
    return where(condition, self, other)


def where(condition, a, b):
    """Elements of a where condition (a bool tensor) is true, else of b; a and b promote as torch."""
    cond = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if cond.dtype != np.bool_:
        raise TypeError(f"where: expected condition to be a bool tensor, got {cond.dtype}")
    ref = a if isinstance(a, Tensor) else b
    if not isinstance(ref, Tensor):
        ref = Tensor(a)
    dtype = result_type(a, b, default_float=get_default_dtype())
    a, b = operand(ref, a, "where", dtype), operand(ref, b, "where", dtype)
    try:
        np.broadcast_shapes(tuple(cond.shape), a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"where: condition {tuple(cond.shape)}, input {a.shape} and other {b.shape} cannot be broadcast together"
        ) from None
    if is_cuda_array(cond) != ref.is_cuda:
        cond = _device.move_array(cond, ref.device)
    return Where.apply(cond, a.type(dtype), b.type(dtype))
