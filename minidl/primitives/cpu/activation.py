"""NumPy reference of the pointwise activations (see minidl/primitives/activation.py for the modes).

Arguments arrive already checked by the public functions. Everything is computed in the input's
dtype except GELU's normal CDF, computed in float64: NumPy has no erf, and minidl does not depend on
SciPy. For float64 inputs it is Python's math.erf element by element (exact to float64 rounding, and
slow: ~125 ms per million values); for float32 and half inputs a vectorised erfc (Numerical Recipes'
Chebyshev fit, relative error < 1.2e-7 everywhere, far below float32's rounding of the result) that
runs ~10x faster, so a Transformer's GELU does not dominate a CPU training step.
"""
from __future__ import annotations

import math

import numpy as np

from .._common import blend

_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_TANH_C = math.sqrt(2.0 / math.pi)
_GELU_TANH_A = 0.044715

# math.erf applied element by element: exact to float64 rounding, slower than a ufunc but simple.
_erf_object = np.frompyfunc(math.erf, 1, 1)


def erf(x):
    """The error function of a float array, in float64 (the caller casts back)."""
    return _erf_object(np.asarray(x, dtype=np.float64)).astype(np.float64)


def _sigmoid(x):
    # exp(-|x|) never overflows: for x < 0 use the equivalent form e^x / (1 + e^x).
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + z), z / (1 + z))


# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0 (Numerical Recipes' erfcc): relative error
# < 1.2e-7 over all z (checked against math.erfc in tests/primitives/test_activation.py).
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                1.48851587, -0.82215223, 0.17087277)


def erfc_fast(z):
    """erfc(|z|) of a float64 array, to a relative error below 1.2e-7."""
    z = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * z)
    p = _ERFC_COEFFS[-1]
    for c in _ERFC_COEFFS[-2::-1]:
        p = c + t * p
    return t * np.exp(p - z * z)


def _normal_cdf(x, exact=True):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, in float64: exactly (math.erf) or, with exact=False, through
    erfc_fast, to a relative error below 1.2e-7 on both tails (Phi(x) = erfc(-x / sqrt 2) / 2 for x < 0)."""
    x = np.asarray(x, dtype=np.float64)
    if exact:
        return 0.5 * (1.0 + erf(x / _SQRT_2))
    half_tail = 0.5 * erfc_fast(x / _SQRT_2)
    return np.where(x < 0, half_tail, 1.0 - half_tail)


def _forward(x, mode: str, coef: float):
    t = x.dtype.type
    if mode == "relu":
        return np.maximum(x, t(0))
    if mode == "leaky_relu":
        return np.where(x > 0, x, x * t(coef))
    if mode == "elu":
        # expm1 of min(x, 0): accurate near 0 and no overflow warning from the discarded branch.
        return np.where(x > 0, x, t(coef) * np.expm1(np.minimum(x, t(0))))
    if mode == "clipped_relu":
        return np.minimum(np.maximum(x, t(0)), t(coef))
    if mode == "sigmoid":
        return _sigmoid(x)
    if mode == "tanh":
        return np.tanh(x)
    if mode == "gelu":
        return (x * _normal_cdf(x, exact=x.dtype == np.float64)).astype(x.dtype)
    if mode == "gelu_tanh":
        inner = t(_GELU_TANH_C) * (x + t(_GELU_TANH_A) * x * x * x)
        return t(0.5) * x * (t(1) + np.tanh(inner))
    raise NotImplementedError(f"activation_forward: mode {mode!r} has no CPU implementation")


def _backward(x, y, dy, mode: str, coef: float):
    """dy * f'(.), reading whichever of x and y makes f' cheapest."""
    t = x.dtype.type
    if mode == "relu":
        # dy * (x > 0): a multiply by a boolean mask runs several times faster than np.where, whose
        # float select NumPy does not vectorise. The two differ only where dy is inf or NaN and
        # x <= 0 (0 * inf = NaN, PyTorch's answer is 0); a NaN in the product, rare and cheap to
        # test for, sends the whole array through np.where instead.
        with np.errstate(invalid="ignore"):
            dx = np.multiply(dy, x > t(0))
        if np.isnan(dx).any():
            dx = np.where(x > 0, dy, t(0))
        return dx
    if mode == "leaky_relu":
        return np.where(x > 0, dy, dy * t(coef))
    if mode == "elu":
        # For x <= 0, f'(x) = coef * e^x = y + coef: the output saves an exponential.
        return np.where(x > 0, dy, dy * (y + t(coef)))
    if mode == "clipped_relu":
        # Zero gradient at and beyond both kinks, as PyTorch's hardtanh/ReLU6.
        return np.where((x > 0) & (x < t(coef)), dy, t(0))
    if mode == "sigmoid":
        return dy * y * (t(1) - y)  # from y: no exponential
    if mode == "tanh":
        return dy * (t(1) - y * y)  # from y: no tanh
    if mode == "gelu":
        # f'(x) = Phi(x) + x * phi(x): needs x (y alone does not determine Phi(x)).
        x64 = x.astype(np.float64)
        if x.dtype == np.float64:
            cdf = _normal_cdf(x64)
        else:   # below float64, Phi(x) = y / x from the saved output: no second erfc pass (Phi(0) = 1/2)
            cdf = np.divide(y.astype(np.float64), x64, out=np.full(x64.shape, 0.5), where=x64 != 0)
        slope = cdf + x64 * _INV_SQRT_2PI * np.exp(-0.5 * x64 * x64)
        return (dy * slope).astype(x.dtype)
    if mode == "gelu_tanh":
        inner = t(_GELU_TANH_C) * (x + t(_GELU_TANH_A) * x * x * x)
        th = np.tanh(inner)
        d_inner = t(_GELU_TANH_C) * (t(1) + t(3 * _GELU_TANH_A) * x * x)
        slope = t(0.5) * (t(1) + th) + t(0.5) * x * (t(1) - th * th) * d_inner
        return dy * slope
    raise NotImplementedError(f"activation_backward: mode {mode!r} has no CPU implementation")


def activation_forward(x, desc, *, alpha=1.0, beta=0.0, out=None):
    y = _forward(x, desc.mode, desc.coef)
    return blend("activation_forward", y.astype(x.dtype, copy=False), out, alpha, beta)


def activation_backward(x, y, dy, desc, *, alpha=1.0, beta=0.0, out=None):
    dx = _backward(x, y, dy, desc.mode, desc.coef)
    return blend("activation_backward", dx.astype(x.dtype, copy=False), out, alpha, beta)


def add_relu_forward(a, b):
    """The unfused pair: a + b, then the ReLU."""
    return _forward(a + b, "relu", 0.0)


def add_relu_backward(y, dy):
    """The ReLU's gradient rule on its output: dy where y > 0 (y > 0 exactly where a + b > 0)."""
    return np.where(y > 0, dy, dy.dtype.type(0))
