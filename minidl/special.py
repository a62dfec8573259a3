"""minidl.special: torch.special's names for functions minidl has (most live in ops/mathops.py; the incomplete gamma
functions, zeta, erfcx and the orthogonal polynomials in ops/special_fns.py), so that `torch.special.erf(x)` runs.
Not here: the Bessel functions other than i0 / i0e / i1 / i1e (modified_bessel_i0 / i1) and spherical_bessel_j0
(J, Y, K), airy_ai."""
from __future__ import annotations

from .autograd.tensor import Tensor


def _method(name, method=None):
    def fn(input, *args, **kwargs):
        return getattr(input, method or name)(*args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"torch.special.{name}: minidl's Tensor.{method or name}."
    return fn


erf, erfc, expm1, exp2, log1p, logit, sinc, logsumexp = (_method(n) for n in
                                                         ("erf", "erfc", "expm1", "exp2", "log1p", "logit", "sinc",
                                                          "logsumexp"))
gammaln = _method("gammaln", "lgamma")
round = _method("round")   # noqa: A001  (torch.special.round)
from .ops.mathops import i0, i0e, i1, i1e  # noqa: E402  (the modified Bessel functions, with their gradients)
digamma = psi = _method("digamma")
erfinv = _method("erfinv")
modified_bessel_i0, modified_bessel_i1 = i0, i1   # (torch.special's other names for I0 and I1)
from .ops.special_fns import (  # noqa: E402  (P(a, x), Q(a, x) and the orthogonal polynomials)
    chebyshev_polynomial_t, chebyshev_polynomial_u, chebyshev_polynomial_v, chebyshev_polynomial_w,
    hermite_polynomial_h, hermite_polynomial_he, laguerre_polynomial_l, legendre_polynomial_p,
    shifted_chebyshev_polynomial_t, shifted_chebyshev_polynomial_u, shifted_chebyshev_polynomial_v,
    shifted_chebyshev_polynomial_w,
)
from .ops.special_fns import erfcx, zeta  # noqa: E402,F401
from .ops.special_fns import igamma as gammainc  # noqa: E402
from .ops.special_fns import igammac as gammaincc  # noqa: E402


def spherical_bessel_j0(input):
    """j0(x) = sin(x) / x, 1 at 0."""
    from .ops import where

    safe = where(input == 0, input.new_full((), 1.0), input)
    return where(input == 0, input.new_full((), 1.0), safe.sin() / safe)


def polygamma(n, input):
    return input.polygamma(n)


def multigammaln(input, p):
    return input.mvlgamma(p)


def ndtr(input):
    """The standard normal CDF, 0.5 erfc(-x / sqrt(2))."""
    return 0.5 * (-input * 0.7071067811865476).erfc()


def log_ndtr(input):
    """log of the standard normal CDF (its log directly, not a log of a rounded-to-0 CDF, for x down to ~ -37)."""
    return ndtr(input).log()


def ndtri(input):
    """The inverse of the standard normal CDF, sqrt(2) erfinv(2p - 1)."""
    return (2 * input - 1).erfinv() * 1.4142135623730951


def xlog1py(input, other):
    """x * log1p(y), 0 where x is 0 (and y is not NaN), as torch.special.xlog1py."""
    from .ops import where

    other = other if isinstance(other, Tensor) else input.new_tensor(other)
    zero = (input == 0) & ~other.isnan()
    return where(zero, input.new_zeros(()), input * where(zero, other.new_zeros(()), other).log1p())
expit = _method("expit", "sigmoid")
xlogy = _method("xlogy")


def softmax(input, dim, *, dtype=None):
    return input.softmax(dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    return input.log_softmax(dim, dtype=dtype)


def entr(input):
    """-x log x (0 at 0, -inf below 0), as torch.special.entr."""
    from .ops import where

    return where(input < 0, input.new_full((), float("-inf")), -input.xlogy(input))


__all__ = ["erf", "erfc", "expm1", "exp2", "log1p", "logit", "sinc", "logsumexp", "gammaln", "expit", "xlogy",
           "softmax", "log_softmax", "entr", "digamma", "psi", "polygamma", "multigammaln", "ndtr", "log_ndtr", "ndtri",
           "xlog1py", "round", "i0", "i0e", "i1", "i1e", "Tensor", "erfinv", "modified_bessel_i0",
           "modified_bessel_i1", "spherical_bessel_j0", "gammainc", "gammaincc", "chebyshev_polynomial_t",
           "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w", "hermite_polynomial_h",
           "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p", "shifted_chebyshev_polynomial_t",
           "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w",
           "zeta", "erfcx"]
