"""CuPy launchers of kernels/softmax.cu: softmax / log-softmax over any axis, forward and backward, and the
fused cross-entropy against class indices.

The input is viewed as (outer, L, inner) with L the softmax axis. inner == 1 runs one warp per row
(the row in registers) up to L = 1024 and one block per row beyond; inner > 1 runs one thread per
(outer, inner) column. Arguments were validated by minidl/primitives/softmax.py.
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from ._compile import get_kernel
from ._launch import (STORAGE_KINDS, THREADS, as_kernel_input, contiguous, finish, grid_stride_blocks, kernel_output,
                      null_pointer)

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
    if x.dtype == np.float64:   # no float64 kernel: the NumPy reference on the CuPy arrays
        from ..cpu import softmax as reference
        return reference.softmax_forward(x, axis=axis, algorithm=algorithm, alpha=alpha, beta=beta, out=out)
    x = as_kernel_input(op, x)
    target, original = kernel_output(op, out, x.shape, beta, x)
    _launch("forward", (x,), x.shape, axis, algorithm, alpha, beta, target)
    return finish(target, original)


def softmax_backward(y, dy, *, axis=1, algorithm="accurate", alpha=1.0, beta=0.0, out=None):
    """dx from the forward output y and the gradient dy, same shape."""
    op = "softmax_backward"
    if y.dtype == np.float64:
        from ..cpu import softmax as reference
        return reference.softmax_backward(y, dy, axis=axis, algorithm=algorithm, alpha=alpha, beta=beta, out=out)
    y = as_kernel_input(op, y)
    dy = as_kernel_input(op, dy)
    target, original = kernel_output(op, out, y.shape, beta, y, dy)
    _launch("backward", (y, dy), y.shape, axis, algorithm, alpha, beta, target)
    return finish(target, original)


# ------------------------------------------------------------------------------------------------
# Cross-entropy against class indices (kernels/softmax.cu, "Cross-entropy"): forward = one pass over
# the logits + one block for the reduction; backward = one elementwise pass (one block per row for (N, C) logits of
# many classes, both ways). float64 runs the reference.
# ------------------------------------------------------------------------------------------------

CE_WARP_ROWS_PER_BLOCK = 4
CE_REDUCE_THREADS = 1024
CE_BLOCK_MIN_CLASSES = 1024   # (N, C) rows of at least this many classes: a block per row (_block kernels)
CE_BLOCK_THREADS = 256


def _ce_block(x, C, inner):
    """(use the one-block-per-row kernels, vec4): (N, C) logits of many classes; four logits a load (a float4, or 8
    bytes of 16-bit logits) where every row starts aligned to that."""
    if inner != 1 or C < CE_BLOCK_MIN_CLASSES:
        return False, 0
    return True, int(C % 4 == 0 and x.data.ptr % (4 * x.dtype.itemsize) == 0)


def _ce_split(x):
    """(outer, C, inner) of logits (N, C, d1, ...): rows = outer * inner."""
    return int(x.shape[0]), int(x.shape[1]), math.prod(x.shape[2:])


def _ce_fallback(x):
    """float64 logits: the NumPy reference (on CuPy arrays); float32, float16, bfloat16: the kernels."""
    return x.dtype not in STORAGE_KINDS


def cross_entropy_forward(x, target, weight=None, *, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    """(loss, stats, denom): the loss (0-d, or the target's shape for "none"), (max, log sum exp(x - max)) per
    row (float32, kept for the backward pass) and the mean's denominator (0-d: the summed weights of the rows
    that count)."""
    if _ce_fallback(x):
        from ..cpu import softmax as reference
        return reference.cross_entropy_forward(x, target, weight, reduction=reduction, ignore_index=ignore_index,
                                               label_smoothing=label_smoothing)
    x, t = contiguous(x), _int64(target)
    outer, C, inner = _ce_split(x)
    rows = outer * inner
    kind = np.int32(STORAGE_KINDS[x.dtype])   # 16-bit logits read as they are (the loss and stats are float32)
    w = contiguous(weight.astype(cupy.float32, copy=False)) if weight is not None else None
    loss_rows = cupy.ndarray(rows, dtype=cupy.float32)
    weight_rows = cupy.ndarray(rows, dtype=cupy.float32)
    stats = cupy.ndarray((rows, 2), dtype=cupy.float32)
    wp = w if w is not None else null_pointer()
    block, vec4 = _ce_block(x, C, inner)
    if rows:
        if block:
            get_kernel("softmax", "cross_entropy_forward_block")(
                (rows,), (CE_BLOCK_THREADS,),
                (x, t, wp, loss_rows, weight_rows, stats, np.int64(rows), np.int32(C), np.int64(ignore_index),
                 np.float32(label_smoothing), np.int32(vec4), kind))
        elif inner == 1:
            blocks = (rows + CE_WARP_ROWS_PER_BLOCK - 1) // CE_WARP_ROWS_PER_BLOCK
            get_kernel("softmax", "cross_entropy_forward_warp")(
                (blocks,), (32 * CE_WARP_ROWS_PER_BLOCK,),
                (x, t, wp, loss_rows, weight_rows, stats, np.int64(rows), np.int32(C), np.int64(ignore_index),
                 np.float32(label_smoothing), kind))
        else:
            get_kernel("softmax", "cross_entropy_forward_strided")(
                (grid_stride_blocks(rows),), (THREADS,),
                (x, t, wp, loss_rows, weight_rows, stats, np.int64(rows), np.int32(C), np.int64(inner),
                 np.int64(ignore_index), np.float32(label_smoothing), kind))
    sums = cupy.ndarray(2, dtype=cupy.float32)    # the reduced loss and the mean's denominator (also for "none")
    get_kernel("softmax", "cross_entropy_reduce")(
        (1,), (CE_REDUCE_THREADS,), (loss_rows, weight_rows, np.int64(rows), np.int32(reduction == "mean"), sums))
    if reduction == "none":
        return loss_rows.reshape(target.shape), stats, sums[1]
    return sums[0], stats, sums[1]


def cross_entropy_backward(x, target, stats, dloss, denom, weight=None, *, reduction="mean", ignore_index=-100,
                           label_smoothing=0.0):
    """dx (x's shape) from the forward's stats and denom and the loss's gradient dloss."""
    if _ce_fallback(x):
        from ..cpu import softmax as reference
        return reference.cross_entropy_backward(x, target, stats, dloss, denom, weight, reduction=reduction,
                                                ignore_index=ignore_index, label_smoothing=label_smoothing)
    x, t = contiguous(x), _int64(target)
    outer, C, inner = _ce_split(x)
    dx = cupy.ndarray(x.shape, dtype=x.dtype)   # 16-bit logits: their gradient rounded once, in the kernel
    if dx.size == 0:
        return dx
    kind = np.int32(STORAGE_KINDS[x.dtype])
    dloss = contiguous(dloss.astype(cupy.float32, copy=False))
    w = contiguous(weight.astype(cupy.float32, copy=False)) if weight is not None else None
    # sum_c w_c, only where label smoothing spreads weight over every class and the weights are not all 1
    w_total = w.sum() if (w is not None and label_smoothing) else None
    block, vec4 = _ce_block(x, C, inner)
    if block:
        get_kernel("softmax", "cross_entropy_backward_block")(
            (outer,), (CE_BLOCK_THREADS,),
            (x, t, stats, w if w is not None else null_pointer(), w_total if w_total is not None else null_pointer(),
             dloss, np.int64(1 if reduction == "none" else 0), denom if reduction == "mean" else null_pointer(), dx,
             np.int32(C), np.int64(ignore_index), np.float32(label_smoothing), np.int32(vec4), kind))
        return dx
    get_kernel("softmax", "cross_entropy_backward")(
        (grid_stride_blocks(dx.size),), (THREADS,),
        (x, t, stats, w if w is not None else null_pointer(), w_total if w_total is not None else null_pointer(),
         dloss, np.int64(1 if reduction == "none" else 0), denom if reduction == "mean" else null_pointer(), dx,
         np.int64(outer), np.int32(C), np.int64(inner), np.int64(ignore_index), np.float32(label_smoothing), kind))
    return dx


def _int64(target):
    return contiguous(target if target.dtype == cupy.int64 else target.astype(cupy.int64))
