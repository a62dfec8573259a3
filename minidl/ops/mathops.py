"""The long tail of PyTorch's elementwise math, table-driven: each op is a row (its forward and its
derivative, side by side), and two Functions run every row, one for unary and one for binary ops.

    tan, sinh, cosh, asin, acos, atan, asinh, acosh, atanh, exp2, expm1, log2, log10, reciprocal, sinc,
    deg2rad, rad2deg, frac, logit                                  (unary, differentiable)
    atan2, hypot, logaddexp, logaddexp2, xlogy, fmod, copysign     (binary, differentiable)

Integer and bool inputs compute in the default float dtype, as torch's float ops do. float16 and
bfloat16 compute in float32 and round once at the end (what torch's CPU and CUDA kernels do). Outside
their domain they give NaN or inf as torch does, without NumPy's warnings. The rows use `xp` (NumPy or
CuPy), so each op is written once for both devices. Every op here is checked against torch by
PyTorch's own OpInfo samples (tests/test_opinfo.py), gradients included.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from .._dtypes import float32
from ..autograd.function import Function, unbroadcast
from ..autograd.tensor import Tensor, get_default_dtype
from . import elementwise
from .elementwise import where
from .logical import _as_tensor_like, isneginf, isposinf

LN2, LN10 = math.log(2.0), math.log(10.0)


def quiet_float_errors(xp):
    """NumPy's floating-point warnings off (torch gives NaN/inf silently); CuPy never warns."""
    return np.errstate(all="ignore") if xp is np else _NoWarnings()


class _NoWarnings:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _sinc(xp, a):
    return xp.sinc(a)


def _dsinc(xp, a, out, g):
    pa = np.pi * a
    with quiet_float_errors(xp):
        d = (xp.cos(pa) * pa - xp.sin(pa)) / (pa * a)
    return g * xp.where(a == 0, 0.0, d).astype(a.dtype, copy=False)


# Special functions. NumPy has none: on the CPU, erf/erfc/lgamma are Python's math functions applied element
# by element (exact, and slow on big arrays: a reference, not a kernel), digamma a recurrence and asymptotic
# series; on the GPU, CuPy's cupyx.scipy.special.
def _special(name):
    import math as _m

    def run(xp, a):
        if xp is np:
            if name == "digamma":
                return _digamma(a)
            if name == "erfinv":
                return _erfinv(a) if a.size else a.copy()
            return np.vectorize(_safe(getattr(_m, name)), otypes=[a.dtype])(a) if a.size else a.copy()
        from cupyx.scipy import special
        return getattr(special, "gammaln" if name == "lgamma" else name)(a)
    return run


def _erfinv(a):
    """erf^-1 in float64 on the CPU: Giles's approximation ("Approximating the erfinv function", 2010) as the start,
    then Newton steps for |x| on math.erf below 0.5 and math.erfc above (so that no difference cancels: near 1,
    erf(y) - x would), which give double precision; +-1 -> +-inf, |x| > 1 -> NaN."""
    import math as _m

    x = np.asarray(a, dtype=np.float64)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        w = -np.log((1.0 - ax) * (1.0 + ax))
        ws, wl = w - 2.5, np.sqrt(w) - 3.0
        p_small = np.polyval([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                              -0.00125372503, -0.00417768164, 0.246640727, 1.50140941], ws)
        p_large = np.polyval([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                              -0.0076224613, 0.00943887047, 1.00167406, 2.83297682], wl)
        y = np.where(w < 5.0, p_small, p_large) * ax
        erf, erfc = np.vectorize(_m.erf, otypes=[np.float64]), np.vectorize(_m.erfc, otypes=[np.float64])
        inside, low = ax < 1, ax < 0.5   # Newton on erf below 0.5, on erfc above (neither difference cancels)
        for _ in range(4):
            yi = np.where(inside, y, 0.0)
            residual = np.where(low, erf(yi) - ax, (1.0 - ax) - erfc(yi))
            y = np.where(inside, y - residual / (_TWO_OVER_SQRT_PI * np.exp(-y * y)), y)
        y = np.copysign(y, x)
        y = np.where(np.abs(x) == 1, np.copysign(np.inf, x), y)
        y = np.where((np.abs(x) > 1) | np.isnan(x), np.nan, y)
    return y.astype(a.dtype, copy=False)


def _safe(fn):
    """math.lgamma raises at its poles (0, -1, -2, ...), where torch gives inf; NaN stays NaN."""
    def f(v):
        try:
            return fn(v)
        except (ValueError, OverflowError):
            return float("inf")
    return f


def _digamma(a):
    """psi(x) in float64: the reflection formula below 0.5, the recurrence psi(x) = psi(x + 1) - 1/x up to 6,
    then the asymptotic series (error below 1e-15 there)."""
    x = np.asarray(a, dtype=np.float64)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        poles = (x <= 0) & (x == np.floor(x))
        refl = x < 0.5
        y = np.where(refl, 1 - x, x)
        shift = np.zeros_like(y)
        while True:
            small = y < 6
            if not small.any():
                break
            shift -= np.where(small, 1 / y, 0)
            y = np.where(small, y + 1, y)
        inv2 = 1 / (y * y)
        series = (np.log(y) - 0.5 / y - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132)))))
        out = series + shift
        out = np.where(refl, out - np.pi / np.tan(np.pi * x), out)
        out = np.where(poles, np.nan, out)
    return out.astype(a.dtype, copy=False)


_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)
_B2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)   # Bernoulli numbers B_2k


def _polygamma_cpu(n: int, a):
    """psi^(n)(x), n >= 1, in float64: the recurrence psi^(n)(x) = psi^(n)(x + 1) - (-1)^n n! / x^(n+1) up to
    x >= 20 + n, then the asymptotic series (-1)^(n+1) [(n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B_2k (2k+n-1)! /
    ((2k)! x^(2k+n))]; +inf (n odd) or NaN (n even) at the poles 0, -1, -2, ..."""
    x = np.asarray(a, dtype=np.float64)
    with np.errstate(all="ignore"):
        poles = (x <= 0) & (x == np.floor(x))
        y, acc = np.where(poles | np.isnan(x), 1.0, x), np.zeros_like(x)
        step = (-1.0) ** n * math.factorial(n)
        while True:
            small = y < 20.0 + n
            if not small.any():
                break
            acc -= np.where(small, step / y ** (n + 1), 0.0)
            y = np.where(small, y + 1, y)
        series = math.factorial(n - 1) / y ** n + math.factorial(n) / (2 * y ** (n + 1))
        for k, b in enumerate(_B2K, start=1):
            series += b * math.factorial(2 * k + n - 1) / (math.factorial(2 * k) * y ** (2 * k + n))
        out = (-1.0) ** (n + 1) * series + acc
        out = np.where(poles, np.inf if n % 2 else np.nan, np.where(np.isnan(x), np.nan, out))
    return out.astype(a.dtype, copy=False)


def _polygamma(xp, n: int, a):
    """psi^(n)(a): digamma for n = 0; on the GPU CuPy's cupyx.scipy.special."""
    if xp is np:
        return _digamma(a) if n == 0 else _polygamma_cpu(n, a)
    from cupyx.scipy import special

    return special.digamma(a) if n == 0 else special.polygamma(n, a)

# name: (forward(xp, a), derivative(xp, a, out, g))
UNARY = {
    "erf": (_special("erf"), lambda xp, a, o, g: g * _TWO_OVER_SQRT_PI * xp.exp(-a * a)),
    "erfc": (_special("erfc"), lambda xp, a, o, g: -g * _TWO_OVER_SQRT_PI * xp.exp(-a * a)),
    "lgamma": (_special("lgamma"), lambda xp, a, o, g: g * _special("digamma")(xp, a)),
    "digamma": (_special("digamma"), lambda xp, a, o, g: g * _polygamma(xp, 1, a)),
    "erfinv": (_special("erfinv"), lambda xp, a, o, g: g * (math.sqrt(math.pi) / 2) * xp.exp(o * o)),
    "tan": (lambda xp, a: xp.tan(a), lambda xp, a, o, g: g * (1 + o * o)),
    "sinh": (lambda xp, a: xp.sinh(a), lambda xp, a, o, g: g * xp.cosh(a)),
    "cosh": (lambda xp, a: xp.cosh(a), lambda xp, a, o, g: g * xp.sinh(a)),
    "asin": (lambda xp, a: xp.arcsin(a), lambda xp, a, o, g: g / xp.sqrt(1 - a * a)),
    "acos": (lambda xp, a: xp.arccos(a), lambda xp, a, o, g: -g / xp.sqrt(1 - a * a)),
    "atan": (lambda xp, a: xp.arctan(a), lambda xp, a, o, g: g / (1 + a * a)),
    "asinh": (lambda xp, a: xp.arcsinh(a), lambda xp, a, o, g: g / xp.sqrt(a * a + 1)),
    "acosh": (lambda xp, a: xp.arccosh(a), lambda xp, a, o, g: g / xp.sqrt(a * a - 1)),
    "atanh": (lambda xp, a: xp.arctanh(a), lambda xp, a, o, g: g / (1 - a * a)),
    "exp2": (lambda xp, a: xp.exp2(a), lambda xp, a, o, g: g * o * LN2),
    "expm1": (lambda xp, a: xp.expm1(a), lambda xp, a, o, g: g * (o + 1)),
    "log2": (lambda xp, a: xp.log2(a), lambda xp, a, o, g: g / (a * LN2)),
    "log10": (lambda xp, a: xp.log10(a), lambda xp, a, o, g: g / (a * LN10)),
    "reciprocal": (lambda xp, a: 1 / a, lambda xp, a, o, g: -g * o * o),
    "sinc": (_sinc, _dsinc),
    "deg2rad": (lambda xp, a: a * (np.pi / 180), lambda xp, a, o, g: g * (np.pi / 180)),
    "rad2deg": (lambda xp, a: a * (180 / np.pi), lambda xp, a, o, g: g * (180 / np.pi)),
    "frac": (lambda xp, a: a - xp.trunc(a), lambda xp, a, o, g: g),
    "logit": (lambda xp, a: xp.log(a / (1 - a)), lambda xp, a, o, g: g / (a * (1 - a))),
}
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
           "arctanh": "atanh", "arctan2": "atan2"}


class UnaryMath(Function):
    """One row of UNARY: forward and derivative of an elementwise function of one float tensor."""

    saves_output = True

    def forward(self, a, which=None, eps=None):
        xp = get_array_module(a)
        self.op, self.eps = which, eps
        work = a.astype(float32) if a.dtype in _dtypes.HALF_DTYPES else a
        if eps is not None:                         # logit(x, eps): x clamped to [eps, 1 - eps] first
            work = xp.clip(work, eps, 1 - eps)
        with quiet_float_errors(xp):
            out = UNARY[which][0](xp, work)
        self.a, self.out = work, out
        return out.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        gw = g.astype(self.a.dtype, copy=False)
        with quiet_float_errors(xp):
            grad = UNARY[self.op][1](xp, self.a, self.out, gw)
        if self.eps is not None:                    # flat where the input was clamped
            raw = self.inputs[0]._data
            grad = xp.where((raw < self.eps) | (raw > 1 - self.eps), 0, grad)
        return grad.astype(g.dtype, copy=False)

    @property
    def name(self):
        return self.op.capitalize() if self.op else "UnaryMath"


def _xlogy(xp, a, b):
    with quiet_float_errors(xp):
        return xp.where((a == 0) & ~xp.isnan(b), 0, a * xp.log(b))


def _dxlogy(xp, a, b, o, g):
    with quiet_float_errors(xp):
        ga = xp.where((a == 0) & ~xp.isnan(b), 0, g * xp.log(b))
        return ga, g * a / b


# name: (forward(xp, a, b), gradients(xp, a, b, out, g) -> (ga, gb))
BINARY = {
    "atan2": (lambda xp, a, b: xp.arctan2(a, b),
              lambda xp, a, b, o, g: (g * b / (a * a + b * b), -g * a / (a * a + b * b))),
    "hypot": (lambda xp, a, b: xp.hypot(a, b), lambda xp, a, b, o, g: (g * a / o, g * b / o)),
    "logaddexp": (lambda xp, a, b: xp.logaddexp(a, b),
                  lambda xp, a, b, o, g: (g * xp.exp(a - o), g * xp.exp(b - o))),
    "logaddexp2": (lambda xp, a, b: xp.logaddexp2(a, b),
                   lambda xp, a, b, o, g: (g * xp.exp2(a - o), g * xp.exp2(b - o))),
    "xlogy": (_xlogy, _dxlogy),
    "fmod": (lambda xp, a, b: xp.fmod(a, b), lambda xp, a, b, o, g: (g, -g * xp.trunc(a / b))),
    "copysign": (lambda xp, a, b: xp.copysign(a, b),
                 lambda xp, a, b, o, g: (g * xp.where(a == 0, 0, o / xp.where(a == 0, 1, a)), xp.zeros_like(g))),
}


class BinaryMath(Function):
    """One row of BINARY: forward and gradients of an elementwise function of two float tensors."""

    def forward(self, a, b, which=None):
        xp = get_array_module(a)
        self.op, self.shapes = which, (a.shape, b.shape)
        half = a.dtype in _dtypes.HALF_DTYPES
        wa, wb = (a.astype(float32), b.astype(float32)) if half else (a, b)
        with quiet_float_errors(xp):
            out = BINARY[which][0](xp, wa, wb)
        self.a, self.b, self.out = wa, wb, out
        return out.astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        gw = g.astype(self.a.dtype, copy=False)
        with quiet_float_errors(xp):
            ga, gb = BINARY[self.op][1](xp, self.a, self.b, self.out, gw)
        ga = unbroadcast(xp.broadcast_to(ga, g.shape), self.shapes[0]).astype(g.dtype, copy=False)
        gb = unbroadcast(xp.broadcast_to(gb, g.shape), self.shapes[1]).astype(g.dtype, copy=False)
        return ga, gb

    @property
    def name(self):
        return self.op.capitalize() if self.op else "BinaryMath"


def _as_float(t):
    return t if _dtypes.is_floating(t.dtype) else t.type(get_default_dtype())


def unary(op):
    def method(self, *args, **kwargs):
        if op == "logit":
            eps = args[0] if args else kwargs.get("eps")
            return UnaryMath.apply(_as_float(self), which=op, eps=None if eps is None else float(eps))
        if args or kwargs:
            raise TypeError(f"{op}() takes no arguments besides the tensor, got {args} {kwargs}")
        return UnaryMath.apply(_as_float(self), which=op)

    method.__name__ = op
    method.__doc__ = f"torch.{op}, elementwise, with its gradient (minidl.ops.mathops)."
    return method


def binary(op):
    def method(self, other):
        if isinstance(other, Tensor) and other.device != self.device:
            raise RuntimeError(f"{op}: expected both tensors on the same device, got {self.device} and {other.device}")
        a = _as_float(self)
        b = _as_float(other) if isinstance(other, Tensor) else other
        if isinstance(b, Tensor) and a.dtype != b.dtype:       # the wider float, as torch's promotion
            dt = _dtypes.promote_floats(a.dtype, b.dtype)
            a, b = a.type(dt), b.type(dt)
        return elementwise.binary(a, b, BinaryMath, op, which=op)

    method.__name__ = op
    method.__doc__ = f"torch.{op}, elementwise with broadcasting, with its gradients (minidl.ops.mathops)."
    return method


# The rows as functions (Tensor methods and minidl.<name>, bound from minidl/ops/__init__.py's table)
erf = unary("erf")
erfc = unary("erfc")
erfinv = unary("erfinv")
lgamma = unary("lgamma")
digamma = unary("digamma")
tan = unary("tan")
sinh = unary("sinh")
cosh = unary("cosh")
asin = unary("asin")
acos = unary("acos")
atan = unary("atan")
asinh = unary("asinh")
acosh = unary("acosh")
atanh = unary("atanh")
exp2 = unary("exp2")
expm1 = unary("expm1")
log2 = unary("log2")
log10 = unary("log10")
reciprocal = unary("reciprocal")
sinc = unary("sinc")
deg2rad = unary("deg2rad")
rad2deg = unary("rad2deg")
frac = unary("frac")
logit = unary("logit")
atan2 = binary("atan2")
hypot = binary("hypot")
logaddexp = binary("logaddexp")
logaddexp2 = binary("logaddexp2")
xlogy = binary("xlogy")
fmod = binary("fmod")
copysign = binary("copysign")
arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2

# ------------------------------------------------------------------------------------------------
# torch's aliases and small compositions of the elementwise ops
# ------------------------------------------------------------------------------------------------


# torch's aliases of operations minidl has under another name
def multiply(a, b):
    return a * b


def divide(a, b, *, rounding_mode=None):
    return a.div(b, rounding_mode=rounding_mode) if rounding_mode is not None else a / b

true_divide = divide


def subtract(a, b, *, alpha=1):
    return a - (b if alpha == 1 else b * alpha)


def negative(t):
    return -t


def positive(t):
    return t


def absolute(t):
    return t.abs()


def sgn(t):
    return t.sign()


def greater(a, b):
    return a > b


def greater_equal(a, b):
    return a >= b


def less(a, b):
    return a < b


def less_equal(a, b):
    return a <= b


def not_equal(a, b):
    return a != b


def floor_divide(a, b):
    a = a if isinstance(a, Tensor) else _as_tensor_like(b, a)
    return a.div(b, rounding_mode="floor")


def fmax(a, b):
    """The larger of a and b, ignoring a NaN when the other is a number (torch.fmax)."""
    return where(a.isnan(), b, where(b.isnan(), a, a.maximum(b)))


def fmin(a, b):
    return where(a.isnan(), b, where(b.isnan(), a, a.minimum(b)))


def clamp_min(t, min):
    return t.clamp(min=min)


def clamp_max(t, max):
    return t.clamp(max=max)


def nan_to_num(t, nan=0.0, posinf=None, neginf=None):
    if not _dtypes.is_floating(t.dtype):
        return t.clone()
    fin = _dtypes.finfo(t.dtype)
    big = float(fin.max) if posinf is None else posinf
    small = float(fin.min) if neginf is None else neginf
    out = where(t.isnan(), t.new_full((), nan), t)
    out = where(isposinf(t), t.new_full((), big), out)
    return where(isneginf(t), t.new_full((), small), out)


def addcmul(input, tensor1, tensor2, *, value=1):
    return input + (tensor1 * tensor2 if value == 1 else tensor1 * tensor2 * value)


def addcdiv(input, tensor1, tensor2, *, value=1):
    if not _dtypes.is_floating(tensor1.dtype) and not _dtypes.is_floating(tensor2.dtype):
        raise RuntimeError("addcdiv: integer division with addcdiv is no longer supported, use torch.div")
    return input + (tensor1 / tensor2 if value == 1 else tensor1 / tensor2 * value)


def gcd(input, other):
    """The greatest common divisor, elementwise (integers)."""
    return _integer_binary("gcd", input, other)


def lcm(input, other):
    """The least common multiple, elementwise (integers)."""
    return _integer_binary("lcm", input, other)


def _integer_binary(name, input, other):
    from .creation import tensor

    other = other if isinstance(other, Tensor) else tensor(other, dtype=input.dtype, device=input.device)
    if input.dtype.kind not in "iu" or other.dtype.kind not in "iu":
        raise RuntimeError(f'"{name}_cpu" not implemented for \'{input.dtype if input.dtype.kind not in "iu" else other.dtype}\'')
    xp = get_array_module(input._data)
    return Tensor._make(getattr(xp, name)(input._data, other._data))


def ldexp(input, other):
    """input * 2 ** other (differentiable in input)."""
    return input * (2.0 ** other.float() if isinstance(other, Tensor) else 2.0 ** other)


def renorm(input, p, dim, maxnorm):
    """Each sub-tensor along dim (input.select(dim, i)) whose p-norm exceeds maxnorm scaled down to norm maxnorm
    (torch.renorm: maxnorm / (norm + 1e-7), differentiated through the norm)."""
    others = tuple(d for d in range(input.ndim) if d != dim % input.ndim)
    norms = input.abs().pow(p).sum(others, keepdim=True).pow(1.0 / p)
    return input * where(norms > maxnorm, maxnorm / (norms + 1e-7), norms.new_ones(()))


class Polygamma(Function):
    """psi^(n)(x), the n-th derivative of digamma (n = 0: digamma itself); its gradient is psi^(n+1)(x)."""

    def forward(self, a, n=0):
        xp = get_array_module(a)
        self.n = n
        self.a = a.astype(float32) if a.dtype in _dtypes.HALF_DTYPES else a
        with quiet_float_errors(xp):
            return _polygamma(xp, n, self.a).astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        with quiet_float_errors(xp):
            return (g.astype(self.a.dtype, copy=False) * _polygamma(xp, self.n + 1, self.a)).astype(g.dtype, copy=False)


def polygamma(n, input):
    """torch.polygamma(n, input): the n-th derivative of digamma, elementwise (n an int >= 0)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"polygamma: n must be a non-negative integer, got {n!r}")
    if not isinstance(input, Tensor):
        raise TypeError(f"polygamma: input must be a Tensor, got {type(input).__name__}")
    return Polygamma.apply(_as_float(input), n=int(n))


def tensor_polygamma(self, n):
    """Tensor.polygamma(n) (the tensor first, as torch's method)."""
    return polygamma(n, self)


def mvlgamma(input, p):
    """The multivariate log-gamma function of dimension p (torch.mvlgamma, special.multigammaln):
    sum_{i<p} lgamma(x - i/2) + p (p - 1) / 4 log(pi); every element must be > (p - 1) / 2."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"mvlgamma: p has to be greater than or equal to 1, got {p!r}")
    x = _as_float(input)
    if bool((x <= (p - 1) / 2).any()):
        raise ValueError(f"mvlgamma: All elements must be greater than (p-1)/2 = {(p - 1) / 2}")
    total = None
    for i in range(p):
        term = (x - i / 2).lgamma()
        total = term if total is None else total + term
    return total + p * (p - 1) / 4 * math.log(math.pi)


def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2^exponent, |mantissa| in [0.5, 1) (torch.frexp; no gradient)."""
    from ..autograd.return_types import namedtuple

    if not isinstance(input, Tensor) or not _dtypes.is_floating(input.dtype):
        raise TypeError("frexp: input must be a floating-point Tensor")
    xp = get_array_module(input._data)
    mantissa, exponent = xp.frexp(input._data)
    result = namedtuple("frexp", ["mantissa", "exponent"])
    return result(Tensor._make(mantissa.astype(input._data.dtype)), Tensor._make(exponent.astype(np.int32)))


# --- Modified Bessel functions of the first kind, orders 0 and 1 (torch.i0, torch.special.i0e / i1 / i1e) ---------
def _bessel_scaled(xp, x, order):
    """exp(-|x|) I_order(|x|) in float64: the power series sum (x^2/4)^k / (k! (k + order)!) (x/2)^order for
    |x| <= 30 (all terms positive: no cancellation; 90 terms reach double precision there), and above it Hankel's
    asymptotic series 1/sqrt(2 pi x) sum_k (-1)^k a_k(order) / x^k, a_k = prod_j (4 order^2 - (2j - 1)^2) / (k! 8^k)."""
    ax = xp.abs(x)
    small = xp.minimum(ax, 30.0)
    quarter = small * small / 4
    term = (small / 2) ** order
    total = xp.zeros_like(small)
    for k in range(90):
        total = total + term
        term = term * quarter / ((k + 1) * (k + 1 + order))
    series = total * xp.exp(-small)
    big = xp.maximum(ax, 30.0)
    mu, coefficient, asymptotic = 4.0 * order * order, 1.0, xp.ones_like(big)
    for k in range(1, 25):
        coefficient = coefficient * -(mu - (2 * k - 1) ** 2) / (k * 8.0)
        asymptotic = asymptotic + coefficient / big ** k
    asymptotic = asymptotic / xp.sqrt(2 * math.pi * big)
    return xp.where(ax <= 30.0, series, asymptotic)


class _Bessel(Function):
    """I0, I1 and their exponentially scaled forms: forward in float64, rounded to the input's dtype. Gradients:
    I0' = I1, I1' = I0 - I1 / x (1/2 at 0); for the scaled ones (e^-|x| I), the same minus sign(x) times itself."""

    def forward(self, a, order=0, scaled=False):
        xp = get_array_module(a)
        x = a.astype(np.float64)
        self.x, self.order, self.scaled = x, order, scaled
        e0, e1 = _bessel_scaled(xp, x, 0), _bessel_scaled(xp, x, 1) * xp.sign(x)   # (I1 is odd)
        self.e0, self.e1 = e0, e1
        scaled_value = e0 if order == 0 else e1
        with np.errstate(over="ignore"):
            value = scaled_value if scaled else scaled_value * xp.exp(xp.abs(x))
        return value.astype(a.dtype)

    def backward(self, g):
        xp = get_array_module(self.x)
        x, e0, e1 = self.x, self.e0, self.e1
        if self.order == 0:
            d = e1 - (xp.sign(x) * e0 if self.scaled else 0)
        else:
            safe = xp.where(x == 0, 1.0, x)
            d = xp.where(x == 0, 0.5, e0 - e1 / safe) - (xp.sign(x) * e1 if self.scaled else 0)
        with np.errstate(over="ignore"):
            d = d if self.scaled else d * xp.exp(xp.abs(x))
        return (g * d).astype(g.dtype)


def _bessel(op, input, order, scaled):
    if input.dtype.kind not in "fiub":
        raise RuntimeError(f"{op}: expected a real tensor, got {input.dtype}")
    if input.dtype.kind != "f":
        input = input.type(get_default_dtype())
    return _Bessel.apply(input, order=order, scaled=scaled)


def i0(input):
    """The modified Bessel function of the first kind of order 0, I0(x) (torch.i0 / special.i0), with its gradient."""
    return _bessel("i0", input, 0, False)


def i0e(input):
    """exp(-|x|) I0(x): finite where I0 overflows (torch.special.i0e)."""
    return _bessel("i0e", input, 0, True)


def i1(input):
    """The modified Bessel function of the first kind of order 1, I1(x) (torch.special.i1)."""
    return _bessel("i1", input, 1, False)


def i1e(input):
    """exp(-|x|) I1(x) (torch.special.i1e)."""
    return _bessel("i1e", input, 1, True)


def nextafter(input, other):
    """The next float after input toward other, elementwise (torch.nextafter; no gradient, as torch's)."""
    from ._promotion import result_type

    dtype = result_type(input, other)
    other = _as_tensor_like(input, other)
    xp = get_array_module(input._data)
    return Tensor._make(xp.nextafter(input._data.astype(dtype, copy=False), other._data.astype(dtype, copy=False)))
