"""NumPy reference of cross-channel LRN (formulas in minidl/primitives/lrn.py).

The channel-window sums are `size` shifted slices of a zero-padded array added together: a loop
over the window, not over channels or pixels.
"""
from __future__ import annotations

import numpy as np

from .._common import blend, to_channels_first, to_channels_last


def _window_sum(a, before: int, after: int):
    """sum_{j = c - before}^{c + after} a[:, j], zero outside, for every channel c (axis 1)."""
    c = a.shape[1]
    padded = np.zeros((a.shape[0], c + before + after) + a.shape[2:], dtype=a.dtype)
    padded[:, before:before + c] = a
    total = np.zeros_like(a)
    for shift in range(before + after + 1):
        total += padded[:, shift:shift + c]
    return total


def _scale(xc, desc):
    """s = k + alpha / size * (window sum of x^2), channels-first."""
    t = xc.dtype.type
    energy = _window_sum(xc * xc, desc.size // 2, (desc.size - 1) // 2)
    return t(desc.k) + t(desc.alpha / desc.size) * energy


def lrn_forward(x, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    xc = to_channels_first(x, layout)
    y = xc * _scale(xc, desc) ** xc.dtype.type(-desc.beta)
    return blend("lrn_forward", np.ascontiguousarray(to_channels_last(y, layout)), out, alpha, beta)


def lrn_backward(x, y, dy, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    t = x.dtype.type
    xc, yc, dyc = (to_channels_first(a, layout) for a in (x, y, dy))
    s = _scale(xc, desc)  # recomputed from x: cheaper than storing it, and y/x would divide by 0
    # Channel c's window covers [c - size//2, c + (size-1)//2], so the channels whose window
    # covers j are [j - (size-1)//2, j + size//2]: the same sum with the padding swapped.
    through_s = _window_sum(dyc * yc / s, (desc.size - 1) // 2, desc.size // 2)
    dx = dyc * s ** t(-desc.beta) - t(2 * desc.alpha * desc.beta / desc.size) * xc * through_s
    return blend("lrn_backward", np.ascontiguousarray(to_channels_last(dx, layout)), out, alpha, beta)
