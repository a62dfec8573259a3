"""minidl.special: torch.special's names for functions minidl has (most live in ops/mathops.py), so that
`torch.special.erf(x)` runs. Not here: the Bessel, zeta, polygamma and erfinv families."""
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
           "softmax", "log_softmax", "entr", "Tensor"]
