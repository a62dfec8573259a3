"""NumPy reference of softmax / log-softmax (see minidl/primitives/softmax.py for the formulas)."""
from __future__ import annotations

import numpy as np

from .._common import blend


def softmax_forward(x, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    shifted = x - np.max(x, axis=axis, keepdims=True)  # every exponent <= 0: no overflow
    if algorithm == "log":
        y = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    else:
        e = np.exp(shifted)
        y = e / np.sum(e, axis=axis, keepdims=True)
    return blend("softmax_forward", y, out, alpha, beta)


def softmax_backward(y, dy, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    if algorithm == "log":
        # y = log p, so p = exp(y); d(log p_i)/dx_j = delta_ij - p_j.
        dx = dy - np.exp(y) * np.sum(dy, axis=axis, keepdims=True)
    else:
        # Jacobian of softmax is diag(y) - y y^T; applied to dy without forming it.
        dx = y * (dy - np.sum(dy * y, axis=axis, keepdims=True))
    return blend("softmax_backward", dx, out, alpha, beta)
