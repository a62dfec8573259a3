"""CuPy launchers of kernels/softmax.cu: softmax / log-softmax over any axis, forward and backward.

The input is viewed as (outer, L, inner) with L the softmax axis. inner == 1 runs one warp per row
(the row in registers) up to L = 1024 and one block per row beyond; inner > 1 runs one thread per
(outer, inner) column. Arguments were validated by minidl/primitives/softmax.py.
"""
from __future__ import annotations

import math

import numpy as np

from ._compile import get_kernel
from ._launch import THREADS, as_kernel_input, finish, grid_stride_blocks, kernel_output

WARP_ROWS_PER_BLOCK = 4     # 128 threads: four rows per block
MAX_WARP_ROW = 1024         # 32 registers per lane for the row
BLOCK_THREADS = 512         # one block per row beyond that


def _split(shape, axis):
    axis = axis % len(shape)
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1:])
    return outer, int(shape[axis]), inner


def _log_mode(algorithm) -> np.int32:
    return np.int32(1 if algorithm == "log" else 0)


def _warp_cols(L: int) -> int:
    """Register-array size of the warp kernel: the smallest power of two with 32 * cols >= L."""
    cols = 1
    while 32 * cols < L:
        cols *= 2
    return cols


def _launch(direction, arrays, shape, axis, algorithm, alpha, beta, target):
    outer, L, inner = _split(shape, axis)
    if outer * L * inner == 0:
        return
    args_tail = (_log_mode(algorithm), np.float32(alpha), np.float32(beta))
    if inner == 1 and L <= MAX_WARP_ROW:
        rows = outer
        kernel = get_kernel("softmax", f"softmax_{direction}_warp_{_warp_cols(L)}")
        blocks = (rows + WARP_ROWS_PER_BLOCK - 1) // WARP_ROWS_PER_BLOCK
        kernel((blocks,), (32 * WARP_ROWS_PER_BLOCK,), (*arrays, target, np.int64(rows), np.int32(L), *args_tail))
    elif inner == 1:
        kernel = get_kernel("softmax", f"softmax_{direction}_block")
        kernel((outer,), (BLOCK_THREADS,), (*arrays, target, np.int64(outer), np.int64(L), *args_tail))
    else:
        kernel = get_kernel("softmax", f"softmax_{direction}_strided")
        kernel((grid_stride_blocks(outer * inner),), (THREADS,),
               (*arrays, target, np.int64(outer), np.int64(L), np.int64(inner), *args_tail))


def softmax_forward(x, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    """y = softmax(x) (or log_softmax) along `axis`, same shape as x."""
    op = "softmax_forward"
    x = as_kernel_input(op, x)
    target, original = kernel_output(op, out, x.shape, beta, x)
    _launch("forward", (x,), x.shape, axis, algorithm, alpha, beta, target)
    return finish(target, original)


def softmax_backward(y, dy, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    """dx from the forward output y and the gradient dy, same shape."""
    op = "softmax_backward"
    y = as_kernel_input(op, y)
    dy = as_kernel_input(op, dy)
    target, original = kernel_output(op, out, y.shape, beta, y, dy)
    _launch("backward", (y, dy), y.shape, axis, algorithm, alpha, beta, target)
    return finish(target, original)
