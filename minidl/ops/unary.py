"""The unary elementwise Functions (each with its backward, and its backward as tensor ops for second derivatives):
negation, sign, exp, log, log1p, sqrt, abs, clamp (by numbers and by tensors), sin, cos, rounding. Their function
forms and Tensor methods are in elementwise.py (the ops table binds them from there)."""
from __future__ import annotations

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from ..autograd.function import Function, unbroadcast
from ..autograd.higher_order import saved_input
from ._args import bfloat16_on_gpu
from .._dtypes import float32


class Neg(Function):
    saves_inputs = False

    def forward(self, a):
        return -a

    def backward(self, g):
        return -g

    def backward_graph(self, g):
        return -g


class Sign(Function):
    def forward(self, a):
        return get_array_module(a).sign(a)

    def backward(self, g):
        return get_array_module(g).zeros_like(g)


class Exp(Function):
    saves_output = True

    def forward(self, a):
        if type(a) is np.ndarray:
            with np.errstate(over="ignore"):     # overflow gives inf silently, as torch
                self.out = np.exp(a)
        else:
            self.out = get_array_module(a).exp(a)
        return self.out

    def backward(self, g):
        return g * self.out

    def backward_graph(self, g):
        return g * saved_input(self, 0, None).exp()


# log, log1p and sqrt outside their domain give -inf / NaN as in torch, without NumPy's RuntimeWarnings.
_QUIET = dict(divide="ignore", invalid="ignore")


class Log(Function):
    """log(a); the gradient is 1 / a. Log1p is the same with log1p (accurate for small a) and 1 / (1 + a)."""

    _function, _shift = "log", 0

    def forward(self, a):
        self.a = a
        with np.errstate(**_QUIET):
            return getattr(get_array_module(a), self._function)(a)

    def backward(self, g):
        with np.errstate(**_QUIET):
            return g / (self.a + self._shift if self._shift else self.a)

    def backward_graph(self, g):
        a = saved_input(self, 0, self.a)
        return g / (a + self._shift if self._shift else a)


class Log1p(Log):
    """log(1 + a), accurate for small a (not log of a rounded 1 + a); the gradient is 1 / (1 + a)."""

    _function, _shift = "log1p", 1


class Sqrt(Function):
    saves_output = True

    def forward(self, a):
        with np.errstate(**_QUIET):
            self.out = get_array_module(a).sqrt(a)
        return self.out

    def backward(self, g):
        with np.errstate(**_QUIET):
            return g / (2 * self.out)

    def backward_graph(self, g):
        return g / (2 * saved_input(self, 0, None).sqrt())


class Abs(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).abs(a)

    def backward(self, g):
        xp, a = get_array_module(g), self.a
        if a.dtype.kind == "c":  # torch's convention: g z / |z| (NumPy 2 and CuPy differ on sign(z))
            r = xp.abs(a)
            return xp.where(r > 0, g * a / xp.where(r > 0, r, 1), 0).astype(a.dtype)
        return g * xp.sign(a)

    def backward_graph(self, g):
        return g * saved_input(self, 0, self.a).sign()


class Clamp(Function):
    saves_inputs = False

    def forward(self, a, min=None, max=None):
        xp = get_array_module(a)
        self.mask = xp.ones(a.shape, dtype=bool)
        if min is not None:
            self.mask &= a >= min
        if max is not None:
            self.mask &= a <= max
        if xp is not np and a.dtype == _dtypes.bfloat16:
            # CuPy's clip takes no None bound for bfloat16 ("Unsupported type NoneType"): bound by bound,
            # each a 0-d bfloat16 array
            out = a
            if min is not None:
                out = xp.maximum(out, xp.asarray(min, dtype=a.dtype))
            if max is not None:
                out = xp.minimum(out, xp.asarray(max, dtype=a.dtype))
            return out.copy() if out is a else out
        # astype: NumPy clips a bfloat16 array against Python floats in float32
        return xp.clip(a, min, max).astype(a.dtype, copy=False)

    def backward(self, g):
        return g * self.mask


class ClampTensor(Function):
    """clamp with tensor bounds (lo, hi broadcast against a; either may be None). Gradients as torch:
    a gets g where lo <= a <= hi; lo where a < lo (and lo < hi); hi where a > hi (or hi < lo)."""

    def forward(self, a, lo=None, hi=None):
        xp = get_array_module(a)
        self.a, self.lo, self.hi = a, lo, hi
        out = a
        if lo is not None:
            out = xp.maximum(out, lo)
        if hi is not None:
            out = xp.minimum(out, hi)
        return xp.broadcast_to(out, np.broadcast_shapes(*(x.shape for x in (a, lo, hi) if x is not None))).copy()

    def backward(self, g):
        xp = get_array_module(g)
        a, lo, hi = self.a, self.lo, self.hi
        zero = g.dtype.type(0)
        keep_a = xp.ones(a.shape, dtype=bool)
        if lo is not None:
            keep_a = keep_a & (a >= lo)
        if hi is not None:
            keep_a = keep_a & (a <= hi)
        ga = unbroadcast(xp.where(keep_a, g, zero), a.shape) if self.needs_input_grad[0] else None
        glo = ghi = None
        if lo is not None and self.needs_input_grad[1]:
            to_lo = (a < lo) & (lo < hi) if hi is not None else a < lo
            glo = unbroadcast(xp.where(to_lo, g, zero), lo.shape)
        if hi is not None and self.needs_input_grad[2]:
            to_hi = (a > hi) | (hi < lo) if lo is not None else a > hi
            ghi = unbroadcast(xp.where(to_hi, g, zero), hi.shape)
        return ga, glo, ghi


class Sin(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).sin(a)

    def backward(self, g):
        return g * get_array_module(g).cos(self.a)

    def backward_graph(self, g):
        return g * saved_input(self, 0, self.a).cos()


class Cos(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).cos(a)

    def backward(self, g):
        return -g * get_array_module(g).sin(self.a)

    def backward_graph(self, g):
        return -g * saved_input(self, 0, self.a).sin()


class Round(Function):
    """floor / ceil / round (half to even, as torch) / trunc; the gradient is zero almost everywhere,
    and PyTorch defines it as zero."""

    saves_inputs = False

    def forward(self, a, how="round"):
        fn = getattr(get_array_module(a), {"round": "round", "floor": "floor", "ceil": "ceil", "trunc": "trunc"}[how])
        if bfloat16_on_gpu(a):
            return fn(a.astype(float32)).astype(a.dtype)
        return fn(a)

    def backward(self, g):
        return get_array_module(g).zeros_like(g)
