"""Special functions beyond mathops.py: the regularized incomplete gamma functions and the classical orthogonal
polynomials (torch.special's names; torch.igamma / igammac).

    igamma(a, x)  = P(a, x) = gamma(a, x) / Gamma(a)      (torch.special.gammainc)
    igammac(a, x) = Q(a, x) = 1 - P(a, x)                 (torch.special.gammaincc)

computed in float64 on the host by the series of P for x < a + 1 and Lentz's continued fraction of Q otherwise
(Numerical Recipes 6.2), 1e-15 relative. Their gradient is for x only, d P / dx = x^(a-1) e^(-x) / Gamma(a), as
torch's (the derivative in a is not implemented there either). The polynomials (Chebyshev T, U, V, W and their
shifted forms, Hermite H and He, Laguerre L, Legendre P) follow their three-term recurrences in tensor ops, for an
integer degree n (a number or a tensor, broadcast), 0 for n < 0 as torch's."""
from __future__ import annotations

import math

import numpy as np

from .. import _device
from ..autograd.function import Function
from ..autograd.tensor import Tensor, get_default_dtype

_EPS, _TINY, _ITER = 1e-16, 1e-300, 2000


def _p_series(a, x):
    term = total = 1.0 / a
    ap = a
    for _ in range(_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _q_fraction(a, x):
    b = x + 1.0 - a
    c, d = 1.0 / _TINY, 1.0 / b
    h = d
    for i in range(1, _ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def _regularized(a, x, upper):
    """P(a, x) (upper=False) or Q(a, x), elementwise over broadcast float64 arrays (torch's edge values)."""
    a, x = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(x, dtype=np.float64))
    out = np.empty(a.shape)
    for idx, (ai, xi) in enumerate(zip(a.ravel(), x.ravel())):
        if np.isnan(ai) or np.isnan(xi) or ai < 0 or xi < 0:
            p = math.nan
        elif ai == 0:
            p = 1.0 if xi > 0 else math.nan
        elif xi == 0:
            p = 0.0
        elif math.isinf(ai):
            p = 0.0 if not math.isinf(xi) else math.nan
        elif math.isinf(xi):
            p = 1.0
        elif xi < ai + 1.0:
            p = _p_series(ai, xi)
        else:
            p = 1.0 - _q_fraction(ai, xi)
            if upper:
                out.flat[idx] = _q_fraction(ai, xi)
                continue
        out.flat[idx] = (1.0 - p) if upper else p
    return out


class IncompleteGamma(Function):
    """P(a, x) or Q(a, x); the gradient flows to x only."""

    def forward(self, a, x, upper=False):
        self.a, self.x, self.upper = a, x, upper
        dtype = np.result_type(a.dtype, x.dtype)
        dtype = dtype if dtype.kind == "f" else np.dtype(get_default_dtype())
        host = _regularized(_device.move_array(a, "cpu"), _device.move_array(x, "cpu"), upper)
        return _device.move_array(host.astype(dtype), _device.device_of(x))

    def backward(self, g):
        if self.needs_input_grad[0]:
            raise NotImplementedError("igamma / igammac: the derivative with respect to the first argument (a) is "
                                      "not implemented, as in torch; differentiate with respect to x")
        from .mathops import _special   # (log Gamma on the array's own device: no host copy)

        xp = _device.get_array_module(g)
        a, x = self.a.astype(np.float64), self.x.astype(np.float64)
        with np.errstate(all="ignore"):
            density = xp.exp((a - 1.0) * xp.log(x) - x - _special("lgamma")(xp, a))
        dx = (-density if self.upper else density) * g
        from ..autograd.function import unbroadcast

        return None, unbroadcast(dx.astype(g.dtype), self.x.shape)


def _pair(a, x):
    like = a if isinstance(a, Tensor) else x
    a = a if isinstance(a, Tensor) else Tensor(np.asarray(a, dtype=like.dtype), device=like.device)
    x = x if isinstance(x, Tensor) else Tensor(np.asarray(x, dtype=like.dtype), device=like.device)
    return a, x


def igamma(input, other):
    """The regularized lower incomplete gamma function P(input, other) (torch.igamma, special.gammainc)."""
    return IncompleteGamma.apply(*_pair(input, other), upper=False)


def igammac(input, other):
    """The regularized upper incomplete gamma function Q(input, other) (torch.igammac, special.gammaincc)."""
    return IncompleteGamma.apply(*_pair(input, other), upper=True)


# ------------------------------------------------------------------------------------------------ polynomials
def _polynomial(name, first, step):
    """P_n(x) by a three-term recurrence: P_0 = 1, P_1 = first(x), P_(k+1) = step(k, x, P_k, P_(k-1))."""
    def fn(input, n):
        x = input if isinstance(input, Tensor) else Tensor(np.asarray(input, dtype=get_default_dtype()))
        degrees = n._host_array() if isinstance(n, Tensor) else np.asarray(n)
        top = int(np.max(degrees)) if degrees.size else 0
        terms = [x * 0 + 1, first(x)]
        for k in range(1, top):
            terms.append(step(k, x, terms[-1], terms[-2]))
        if degrees.ndim == 0:
            d = int(degrees)
            return x * 0 if d < 0 else terms[d]
        from .joining import stack

        table = stack(terms[:max(top, 0) + 1], dim=0)   # P_0 .. P_top (P_0 alone when every degree is <= 0)
        index = Tensor(np.clip(degrees.astype(np.int64), 0, None), device=x.device)
        shape = np.broadcast_shapes(tuple(x.shape), tuple(index.shape))
        picked = table.expand((table.shape[0],) + shape).gather(0, index.expand(shape).unsqueeze(0)).squeeze(0)
        return picked * Tensor(np.broadcast_to(degrees >= 0, shape).astype(np.float64), dtype=x.dtype,
                               device=x.device)

    fn.__name__ = name
    fn.__doc__ = f"torch.special.{name}(input, n): the degree-n polynomial at input (its recurrence; 0 for n < 0)."
    return fn


chebyshev_polynomial_t = _polynomial("chebyshev_polynomial_t", lambda x: x, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_u = _polynomial("chebyshev_polynomial_u", lambda x: 2 * x, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_v = _polynomial("chebyshev_polynomial_v", lambda x: 2 * x - 1, lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_w = _polynomial("chebyshev_polynomial_w", lambda x: 2 * x + 1, lambda k, x, p, q: 2 * x * p - q)
hermite_polynomial_h = _polynomial("hermite_polynomial_h", lambda x: 2 * x, lambda k, x, p, q: 2 * x * p - 2 * k * q)
hermite_polynomial_he = _polynomial("hermite_polynomial_he", lambda x: x, lambda k, x, p, q: x * p - k * q)
laguerre_polynomial_l = _polynomial("laguerre_polynomial_l", lambda x: 1 - x,
                                    lambda k, x, p, q: ((2 * k + 1 - x) * p - k * q) / (k + 1))
legendre_polynomial_p = _polynomial("legendre_polynomial_p", lambda x: x,
                                    lambda k, x, p, q: ((2 * k + 1) * x * p - k * q) / (k + 1))


def _shifted(name, base):
    def fn(input, n):
        return base(2 * input - 1, n)

    fn.__name__ = name
    fn.__doc__ = f"torch.special.{name}: {base.__name__} at 2 x - 1 (on [0, 1])."
    return fn


shifted_chebyshev_polynomial_t = _shifted("shifted_chebyshev_polynomial_t", chebyshev_polynomial_t)
shifted_chebyshev_polynomial_u = _shifted("shifted_chebyshev_polynomial_u", chebyshev_polynomial_u)
shifted_chebyshev_polynomial_v = _shifted("shifted_chebyshev_polynomial_v", chebyshev_polynomial_v)
shifted_chebyshev_polynomial_w = _shifted("shifted_chebyshev_polynomial_w", chebyshev_polynomial_w)


# ------------------------------------------------------------------------------------------------ zeta, erfcx
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15, 1.8152105401943546773e17,
           -7.1661652561756670113e18)


def _hurwitz(x, q):
    """zeta(x, q) = sum over k >= 0 of (k + q)^-x, by Euler-Maclaurin summation (Cephes' zeta): nine terms, then the
    integral and twelve Bernoulli corrections."""
    if math.isnan(x) or math.isnan(q):
        return math.nan
    if x == 1.0:
        return math.inf
    if x < 1.0:
        return math.nan
    if q <= 0.0:
        if q == math.floor(q):
            return math.inf
        if x != math.floor(x):
            return math.nan
    s, a, i, b = q ** -x, q, 0, 0.0
    while i < 9 or a <= 9.0:
        i += 1
        a += 1.0
        b = a ** -x
        s += b
        if abs(b / s) < 1.1e-16:
            return s
    w = a
    s += b * w / (x - 1.0) - 0.5 * b
    factor, k = 1.0, 0.0
    for coefficient in _ZETA_A:
        factor *= x + k
        b /= w
        t = factor * b / coefficient
        s += t
        if abs(t / s) < 1.1e-16:
            break
        k += 1.0
        factor *= x + k
        b /= w
        k += 1.0
    return s


def zeta(input, other):
    """The Hurwitz zeta function zeta(x, q) (torch.special.zeta; no gradient, as torch's), computed on the host in
    float64 and returned on input's device."""
    x, q = _pair(input, other)
    host = np.vectorize(_hurwitz, otypes=[np.float64])(_device.move_array(x._data, "cpu").astype(np.float64),
                                                       _device.move_array(q._data, "cpu").astype(np.float64))
    dtype = np.result_type(x.dtype, q.dtype)
    dtype = dtype if dtype.kind == "f" else np.dtype(get_default_dtype())
    return Tensor._make(_device.move_array(np.asarray(host, dtype=dtype), _device.device_of(x._data)))


def erfcx(input):
    """exp(x^2) erfc(x), without its overflow: the product below x = 26, the asymptotic series
    (1 / (x sqrt(pi))) (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6) + 105/(16x^8)) above; differentiable (as torch's)."""
    from .elementwise import where

    x = input
    small = x.clamp(max=26.0)
    direct = (small * small).exp() * small.erfc()
    big = x.clamp(min=26.0)
    inv2 = 1.0 / (big * big)
    series = (1 - inv2 * (0.5 - inv2 * (0.75 - inv2 * (1.875 - inv2 * 6.5625)))) / (big * math.sqrt(math.pi))
    return where(x <= 26.0, direct, series)
