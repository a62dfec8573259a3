"""CuPy launchers of kernels/activation.cu: pointwise activations, forward and backward.

The arguments were validated by minidl/primitives/activation.py. This module also holds the few
launch helpers the other launchers of the memory-bound families share (contiguous float32 inputs,
where the kernel writes its output, grid sizes).
"""
from __future__ import annotations

import functools

import cupy
import numpy as np

from ._compile import get_kernel

# Mode numbers of kernels/activation.cu (#define ACT_*).
MODES = {"relu": 0, "leaky_relu": 1, "elu": 2, "clipped_relu": 3, "sigmoid": 4, "tanh": 5, "gelu": 6,
         "gelu_tanh": 7}
# The coefficient a mode uses when the descriptor leaves it as None (PyTorch's defaults; ReLU6).
DEFAULT_COEF = {"leaky_relu": 0.01, "elu": 1.0, "clipped_relu": 6.0}
# Modes whose gradient is computed from y (cheaper: no exp); the others use x.
GRADIENT_FROM_Y = ("sigmoid", "tanh")

THREADS = 256


# ----------------------------------------------------------------------------------------------
# Launch helpers shared by the launchers of the memory-bound families.
# ----------------------------------------------------------------------------------------------


def as_kernel_input(op: str, a):
    """A C-contiguous float32 CuPy array (copied only if it is not one already)."""
    if a.dtype != cupy.float32:
        raise TypeError(f"{op}: the CUDA kernels are float32, got {a.dtype}")
    return cupy.ascontiguousarray(a)


def kernel_output(op: str, out, shape, beta: float, *inputs):
    """(target, original): the C-contiguous float32 array the kernel writes, and the user's `out`
    to copy it into afterwards (None when the kernel can write `out` directly).

    The kernel writes `out` itself unless `out` is not C-contiguous or overlaps an input (the
    kernels read neighbours, so writing in place could read already-written values). Then it
    writes a scratch array holding a copy of `out` (needed when beta != 0), and finish() copies
    it back.
    """
    shape = tuple(int(s) for s in shape)
    if out is None:
        return cupy.empty(shape, dtype=cupy.float32), None
    if tuple(out.shape) != shape:
        raise ValueError(f"{op}: out has shape {tuple(out.shape)}, expected {shape}")
    if out.dtype != cupy.float32:
        raise TypeError(f"{op}: out has dtype {out.dtype}, expected float32")
    overlaps = any(a is not None and cupy.may_share_memory(out, a) for a in inputs)
    if out.flags.c_contiguous and not overlaps:
        return out, None
    scratch = out.copy(order="C") if beta != 0 else cupy.empty(shape, dtype=cupy.float32)
    return scratch, out


def finish(target, original):
    """Copy the kernel's output into the user's `out` when the kernel wrote a scratch array."""
    if original is None:
        return target
    original[...] = target
    return original


def is_aligned(*arrays) -> bool:
    """True when every array's data starts on a 16-byte boundary (float4 loads are legal)."""
    return all(a is None or a.data.ptr % 16 == 0 for a in arrays)


@functools.lru_cache(maxsize=None)
def _sm_count_of(device_id: int) -> int:
    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def sm_count() -> int:
    """Multiprocessors of the current device (cached: reading device attributes is slow)."""
    return _sm_count_of(cupy.cuda.runtime.getDevice())


def grid_stride_blocks(work_items: int, threads: int = THREADS, blocks_per_sm: int = 8) -> int:
    """Blocks for a grid-stride loop: enough to fill every SM, never more than the work needs."""
    return max(1, min((int(work_items) + threads - 1) // threads, sm_count() * blocks_per_sm))


def null_pointer():
    """What a kernel receives for an absent optional array (a 64-bit zero = nullptr)."""
    return np.uint64(0)


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
    """y = alpha * f(x) + beta * out, any shape; x float32 on the GPU."""
    op = "activation_forward"
    x = as_kernel_input(op, x)
    mode, coef = _mode_and_coef(desc)
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
