"""CuPy launchers of kernels/activation.cu: pointwise activations, forward and backward.

The arguments were validated by minidl/primitives/activation.py. The launch helpers shared with the
other launchers (contiguous float32 inputs, where the kernel writes its output, grid sizes) are in
_launch.py.
"""
from __future__ import annotations

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import HALF_KINDS as _HALF_KINDS, THREADS, as_kernel_input, contiguous, finish, grid_stride_blocks, is_aligned, kernel_output, on_host

# Mode numbers of kernels/activation.cu (#define ACT_*).
MODES = {"relu": 0, "leaky_relu": 1, "elu": 2, "clipped_relu": 3, "sigmoid": 4, "tanh": 5, "gelu": 6,
         "gelu_tanh": 7}
# The coefficient a mode uses when the descriptor leaves it as None (PyTorch's defaults; ReLU6).
DEFAULT_COEF = {"leaky_relu": 0.01, "elu": 1.0, "clipped_relu": 6.0}
# Modes whose gradient is computed from y (cheaper: no exp); the others use x.
GRADIENT_FROM_Y = ("sigmoid", "tanh")


# ----------------------------------------------------------------------------------------------
# Activations
# ----------------------------------------------------------------------------------------------


def _mode_and_coef(desc):
    mode = desc.mode
    coef = getattr(desc, "coef", None)
    if coef is None:
        coef = DEFAULT_COEF.get(mode, 0.0)
    return MODES[mode], np.float32(coef)




def activation_forward(x, desc, *, alpha=1.0, beta=0.0, out=None):
    """y = alpha * f(x) + beta * out, any shape; x float32 on the GPU (float16/bfloat16: activation_forward_half,
    alpha = 1, beta = 0, no out)."""
    if x.dtype == np.float64:   # no float64 kernel: the NumPy reference on host copies
        from ..cpu import activation as reference
        return on_host(reference.activation_forward, x, desc, alpha=alpha, beta=beta, out=out)
    mode, coef = _mode_and_coef(desc)
    if x.dtype in _HALF_KINDS:
        x = contiguous(x)
        y = cupy.ndarray(x.shape, dtype=x.dtype)
        if x.size:
            get_kernel("activation", "activation_forward_half")(
                (grid_stride_blocks(x.size),), (THREADS,),
                (x, y, np.int64(x.size), np.int32(mode), coef, np.int32(_HALF_KINDS[x.dtype])))
        return y
    return _forward(x, mode, coef, alpha, beta, out)


def _backward_half(x, y, dy, mode, coef):
    dy = contiguous(dy)
    x = contiguous(x if x is not None else y)
    dx = cupy.ndarray(dy.shape, dtype=dy.dtype)
    if dy.size:
        get_kernel("activation", "activation_backward_half")(
            (grid_stride_blocks(dy.size),), (THREADS,),
            (x, contiguous(y) if y is not None else x, dy, dx, np.int64(dy.size), np.int32(y is not None),
             np.int32(mode), coef, np.int32(_HALF_KINDS[dy.dtype])))
    return dx


def relu_forward_in_place(y):
    """y = max(y, 0) over y itself (for the convolution's ReLU after an im2col forward)."""
    return _forward(y, MODES["relu"], np.float32(0.0), 1.0, 0.0, y)


def _forward(x, mode, coef, alpha, beta, out):
    op = "activation_forward"
    x = as_kernel_input(op, x)
    target, original = kernel_output(op, out, x.shape, beta)
    n = x.size
    if n > 0:
        vectorized = int(is_aligned(x, target))
        work = n // 4 if vectorized else n
        kernel = get_kernel("activation", "activation_forward")
        kernel((grid_stride_blocks(max(work, 1)),), (THREADS,),
               (x, target, np.int64(n), np.int32(vectorized), np.int32(mode), coef,
                np.float32(alpha), np.float32(beta)))
    return finish(target, original)


def activation_backward(x, y, dy, desc, *, alpha=1.0, beta=0.0, out=None):
    """dx = alpha * dy * f'(x) + beta * out. sigmoid/tanh read y (x may be None); the others read x
    (y may be None; elu then recomputes it)."""
    op = "activation_backward"
    if dy.dtype == np.float64:
        from ..cpu import activation as reference
        return on_host(reference.activation_backward, x, y, dy, desc, alpha=alpha, beta=beta, out=out)
    if dy.dtype in _HALF_KINDS:
        mode, coef = _mode_and_coef(desc)
        if desc.mode in GRADIENT_FROM_Y and y is not None:
            return _backward_half(y if x is None else x, y, dy, mode, coef)
        if x is None:
            raise ValueError(f"{op}: mode {desc.mode!r} needs x")
        return _backward_half(x, y, dy, mode, coef)
    dy = as_kernel_input(op, dy)
    if desc.mode in GRADIENT_FROM_Y and y is not None:
        y = as_kernel_input(op, y)
        x = y if x is None else as_kernel_input(op, x)  # x is not read by these modes
    else:
        if x is None:
            raise ValueError(f"{op}: mode {desc.mode!r} needs x")
        x = as_kernel_input(op, x)
        y = None if y is None else as_kernel_input(op, y)
    mode, coef = _mode_and_coef(desc)
    target, original = kernel_output(op, out, dy.shape, beta)
    n = dy.size
    if n > 0:
        y_arg = y if y is not None else x  # never read when has_y == 0
        vectorized = int(is_aligned(x, y_arg, dy, target))
        work = n // 4 if vectorized else n
        kernel = get_kernel("activation", "activation_backward")
        kernel((grid_stride_blocks(max(work, 1)),), (THREADS,),
               (x, y_arg, dy, target, np.int64(n), np.int32(vectorized), np.int32(y is not None),
                np.int32(mode), coef, np.float32(alpha), np.float32(beta)))
    return finish(target, original)


# ----------------------------------------------------------------------------------------------
# Residual add + ReLU (fused)
# ----------------------------------------------------------------------------------------------


def _elementwise(name, first, second):
    first, second = as_kernel_input(name, first), as_kernel_input(name, second)
    out = cupy.ndarray(first.shape, dtype=cupy.float32)
    n = first.size
    if n > 0:
        vectorized = int(is_aligned(first, second, out))
        work = n // 4 if vectorized else n
        get_kernel("activation", name)((grid_stride_blocks(max(work, 1)),), (THREADS,),
                                       (first, second, out, np.int64(n), np.int32(vectorized)))
    return out


def add_relu_forward(a, b):
    """y = max(a + b, 0), one pass."""
    return _elementwise("add_relu_forward", a, b)


def add_relu_backward(y, dy):
    """The gradient of a (and of b): dy where y > 0, else 0."""
    return _elementwise("add_relu_backward", y, dy)
