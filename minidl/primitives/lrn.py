"""Local response normalization across channels (AlexNet, 2012), PyTorch's `local_response_norm`.

Each activation is divided by a power of the energy of its neighbouring channels:
    s_c = k + alpha / size * sum_{j = c - size//2}^{c + (size-1)//2} a_j^2      (out-of-range j: 0)
    b_c = a_c * s_c^(-beta)
Backward, with the transposed window (the channels c whose window contains j):
    da_j = dy_j * s_j^(-beta) - 2 alpha beta / size * a_j * sum_{c : j in window(c)} dy_c b_c / s_c
The channel axis is 1 (NCHW: NCW, NCHW, NCDHW...) or the last (NHWC); any rank >= 3 works.
"""
from __future__ import annotations

from dataclasses import dataclass

from ._common import (
    backend, check_arrays, check_blend_out, check_float, check_same_device, computes_half_in_float32, is_cuda_array,
    normalize_layout, shape_str,
)

__all__ = ["LRNDescriptor", "lrn_forward", "lrn_backward"]


@dataclass(frozen=True)
class LRNDescriptor:
    """size: channels in the window; alpha, beta, k as in the formula (PyTorch's defaults)."""

    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0

    def __post_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"LRNDescriptor: size must be an int >= 1, got {self.size!r}")
        if not float(self.k) > 0:
            # s = k + (non-negative sum) must stay positive for its power to be defined.
            raise ValueError(f"LRNDescriptor: k must be > 0, got {self.k}")
        if float(self.alpha) < 0:
            raise ValueError(f"LRNDescriptor: alpha must be >= 0, got {self.alpha}")
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "beta", float(self.beta))
        object.__setattr__(self, "k", float(self.k))


def _check(op: str, desc, layout, **arrays) -> str:
    if not isinstance(desc, LRNDescriptor):
        raise TypeError(f"{op}: desc must be an LRNDescriptor, got {type(desc).__name__}")
    layout = normalize_layout(op, layout)
    shapes = {name: tuple(a.shape) for name, a in arrays.items()}
    x_shape = next(iter(shapes.values()))
    if len(x_shape) < 3:
        raise ValueError(f"{op}: input must have at least 3 dims (N, C, spatial...), got shape {shape_str(x_shape)}")
    if len(set(shapes.values())) > 1:
        desc_s = ", ".join(f"{k} {shape_str(v)}" for k, v in shapes.items())
        raise ValueError(f"{op}: all arrays must have the same shape, got {desc_s}")
    return layout


@computes_half_in_float32()
def lrn_forward(x, desc: LRNDescriptor, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """y (x's shape) = alpha * LRN(x) + beta * out; x is (N, C, *spatial) or (N, *spatial, C)."""
    op = "lrn_forward"
    check_arrays(op, x=x, out=out)
    layout = _check(op, desc, layout, x=x)
    check_same_device(op, x=x, out=out)
    dtype = check_float(op, x=x)
    check_blend_out(op, out, x.shape, dtype, beta)
    return backend("lrn", x).lrn_forward(x, desc, layout=layout, alpha=alpha, beta=beta, out=out)


@computes_half_in_float32()
def lrn_backward(x, y, dy, desc: LRNDescriptor, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx from x, the forward output y and dy, all of one shape."""
    op = "lrn_backward"
    check_arrays(op, x=x, y=y, dy=dy, out=out)
    layout = _check(op, desc, layout, x=x, y=y, dy=dy)
    check_same_device(op, x=x, y=y, dy=dy, out=out)
    dtype = check_float(op, x=x, y=y, dy=dy)
    check_blend_out(op, out, x.shape, dtype, beta)
    return backend("lrn", x).lrn_backward(x, y, dy, desc, layout=layout, alpha=alpha, beta=beta, out=out)
