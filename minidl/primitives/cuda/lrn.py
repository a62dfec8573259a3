"""CuPy launchers of kernels/lrn.cu: cross-channel local response normalization (PyTorch's
definition), forward and backward, NCHW or NHWC, any rank >= 3 (or (N, C)). Arguments were
validated by minidl/primitives/lrn.py.
"""
from __future__ import annotations

import math

import numpy as np

from ._compile import get_kernel
from ._launch import THREADS, as_kernel_input, finish, grid_stride_blocks, kernel_output


def _view(shape, layout):
    """(C, inner): channel count and the stride between neighbouring channels."""
    shape = tuple(int(s) for s in shape)
    if layout == "NCHW":
        return shape[1], math.prod(shape[2:])
    return shape[-1], 1


def _desc_args(desc):
    return (np.int32(desc.size), np.float32(desc.alpha), np.float32(desc.beta), np.float32(desc.k))


def lrn_forward(x, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """y = alpha * x * s^(-desc.beta) + beta * out, x's shape."""
    op = "lrn_forward"
    x = as_kernel_input(op, x)
    target, original = kernel_output(op, out, x.shape, beta, x)
    if x.size:
        C, inner = _view(x.shape, layout)
        kernel = get_kernel("lrn", "lrn_forward")
        kernel((grid_stride_blocks(x.size),), (THREADS,),
               (x, target, np.int64(x.size), np.int32(C), np.int64(inner), *_desc_args(desc),
                np.float32(alpha), np.float32(beta)))
    return finish(target, original)


def lrn_backward(x, y, dy, desc, *, layout="NCHW", alpha=1.0, beta=0.0, out=None):
    """dx (x's shape). The scales are recomputed from x; y is accepted (as in cuDNN) but not read."""
    op = "lrn_backward"
    x = as_kernel_input(op, x)
    dy = as_kernel_input(op, dy)
    target, original = kernel_output(op, out, x.shape, beta, x, dy)
    if x.size:
        C, inner = _view(x.shape, layout)
        kernel = get_kernel("lrn", "lrn_backward")
        kernel((grid_stride_blocks(x.size),), (THREADS,),
               (x, dy, target, np.int64(x.size), np.int32(C), np.int64(inner), *_desc_args(desc),
                np.float32(alpha), np.float32(beta)))
    return finish(target, original)
