"""CuPy launchers of kernels/batch_norm.cu: batch normalization, training forward (Welford batch
statistics split over blocks, running averages updated in the kernel), inference forward and backward.

x is viewed as (outer, C, inner) with one statistic per c (see the kernel's header). x, y, dy, dx are float32,
float16 or bfloat16 (each kernel a template of the data's storage KIND, STORAGE_KINDS); the parameters and the
statistics are float32 whatever the data, as in cuDNN. Arguments were validated by
minidl/primitives/batch_norm.py.
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from ._compile import get_kernel, get_template_kernel
from ._launch import STORAGE_KINDS, THREADS, Plans, arrival_counters, as_kernel_input, as_storage_input, \
    grid_stride_blocks, is_aligned, null_pointer, sm_count

ROW_TILE = (32, 8)           # blockDim of the "rows" kernels (channels x row groups)
BLOCKS_PER_SM = 8            # how many reduction blocks to aim for per SM (a full SM's worth)
MIN_PIECE = 2048             # never split a plane into pieces smaller than this


def _view(x_shape, mode, layout):
    """(outer, C, inner): the statistic axis C between the dims before and after it."""
    x_shape = tuple(int(s) for s in x_shape)
    if mode == "per_activation":
        return x_shape[0], math.prod(x_shape[1:]), 1
    if layout == "NCHW":
        return x_shape[0], x_shape[1], math.prod(x_shape[2:])
    return math.prod(x_shape[:-1]), x_shape[-1], 1


def _vec_mode(C, inner, aligned: bool):
    """The elementwise passes' float4 mode: 1 along the planes (inner % 4 == 0), 2 along the channels (NHWC rows,
    C % 4 == 0), 0 scalar; aligned: whether every array the pass reads or writes starts on a 16-byte boundary."""
    if not aligned:
        return 0
    if inner % 4 == 0:
        return 1
    if inner == 1 and C % 4 == 0:
        return 2
    return 0


def _pointer(a, op):
    return null_pointer() if a is None else as_kernel_input(op, a)


def _kernel(name, data):
    """Kernel `name` instantiated for the storage of the data array."""
    return get_template_kernel("batch_norm", f"{name}<{STORAGE_KINDS[data.dtype]}>")


def _reduction_plan(outer, C, inner):
    """Launch geometry of the statistics/gradient reductions and the number of splits S."""
    target_blocks = BLOCKS_PER_SM * sm_count()
    if inner > 1:
        # Planes: S splits of the N * chunks pieces of each channel; chunk planes only when N
        # alone cannot give enough splits.
        want = max(1, -(-target_blocks // C))
        chunks = 1
        if outer < want:
            chunks = max(1, min(-(-want // outer), inner // MIN_PIECE))
        chunk_len = -(-inner // chunks)
        chunk_len = -(-chunk_len // 4) * 4        # keep float4 pieces aligned
        chunks = -(-inner // chunk_len)
        splits = max(1, min(want, outer * chunks))
        return "planes", (C, splits), (THREADS,), splits, chunks, chunk_len
    tiles = -(-C // ROW_TILE[0])
    splits = max(1, min(-(-target_blocks // tiles), -(-outer // ROW_TILE[1])))
    return "rows", (tiles, splits), ROW_TILE, splits, 1, 1


# The pass-1 kernels by (what they reduce, how the grid covers the data), named literally (one primitive,
# one name: tests/primitives/test_backend_contract.py finds each kernel's name in this file).
_REDUCTION_KERNELS = {
    ("batch_norm_stats", "planes"): "batch_norm_stats_planes", ("batch_norm_stats", "rows"): "batch_norm_stats_rows",
    ("batch_norm_grads", "planes"): "batch_norm_grads_planes", ("batch_norm_grads", "rows"): "batch_norm_grads_rows",
    ("batch_norm_relu_grads", "planes"): "batch_norm_relu_grads_planes",
    ("batch_norm_relu_grads", "rows"): "batch_norm_relu_grads_rows",
}


def _reduction_args(kind, aligned, outer, C, inner, chunks, chunk_len):
    """The reduction kernel's shape arguments (after its arrays and partial sums); aligned: whether the arrays it
    streams (x, and dy) start on 16-byte boundaries (the planes kernel's float4 loads)."""
    if kind == "planes":
        return (np.int32(outer), np.int32(C), np.int64(inner), np.int32(chunks), np.int64(chunk_len),
                np.int32(inner % 4 == 0 and aligned))
    return np.int64(outer), np.int32(C)


def _apply_args(aligned, outer, C, inner):
    """(grid, shape arguments) of an elementwise pass (apply, dx) over the whole of x."""
    total = outer * C * inner
    vec_mode = _vec_mode(C, inner, aligned)
    work = total // 4 if vec_mode else total
    return (grid_stride_blocks(max(work, 1)),), (np.int64(total), np.int32(C), np.int64(inner), np.int32(vec_mode))


# Launch plans (issue 23: a layer normalises the same shapes every step). Per (op, shape, dtype, mode, layout,
# whether x and dy start on 16-byte boundaries (the outputs are new, so aligned), device): everything a training
# forward or a backward launches but the addresses: the reduction's kernel, grid and shape arguments, the
# elementwise pass's. Made for non-empty x only.
_plans = Plans()


def _param_shape(x_shape, mode, layout):
    return x_shape[1:] if mode == "per_activation" else (x_shape[1] if layout == "NCHW" else x_shape[-1],)


class _Plan:
    __slots__ = ("param_shape", "C", "partial_shape", "grid", "block", "reduction", "reduction_args", "apply",
                 "apply_grid", "apply_args", "count")


def _plan(op, family, apply_name, x, aligned, mode, layout):
    key = (op, x.shape, x.dtype, mode, layout, aligned, cupy.cuda.runtime.getDevice())
    plan = _plans.get(key)
    if plan is None:
        outer, C, inner = _view(x.shape, mode, layout)
        kind, grid, block, splits, chunks, chunk_len = _reduction_plan(outer, C, inner)
        plan = _Plan()
        plan.param_shape = _param_shape(x.shape, mode, layout)
        plan.C, plan.grid, plan.block, plan.count = C, grid, block, np.float32(outer * inner)
        plan.partial_shape = (3 if family == "batch_norm_stats" else 2, splits, C)
        plan.reduction = _kernel(_REDUCTION_KERNELS[family, kind], x)
        plan.reduction_args = _reduction_args(kind, aligned, outer, C, inner, chunks, chunk_len)
        plan.apply = _kernel(apply_name, x)
        plan.apply_grid, plan.apply_args = _apply_args(aligned, outer, C, inner)
        _plans.keep(key, plan)
    return plan


def batch_norm_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                mode="spatial", layout="NCHW", num_batches_tracked=None):
    """(y, saved_mean, saved_invstd); running_mean/running_var updated in place when given, num_batches_tracked (0-d
    int64) counted by the finalize."""
    return _forward_training("batch_norm_forward_training", "batch_norm_apply", x, gamma, beta_, running_mean,
                             running_var, momentum, eps, mode, layout, num_batches_tracked)


def batch_norm_relu_forward_training(x, gamma, beta_, running_mean, running_var, *, momentum=0.1, eps=1e-5,
                                     mode="spatial", layout="NCHW", num_batches_tracked=None):
    """(max(BN(x), 0), saved_mean, saved_invstd): the training forward with the ReLU in its apply pass."""
    return _forward_training("batch_norm_relu_forward_training", "batch_norm_relu_apply", x, gamma, beta_,
                             running_mean, running_var, momentum, eps, mode, layout, num_batches_tracked)


def _forward_training(op, apply_name, x, gamma, beta_, running_mean, running_var, momentum, eps, mode, layout,
                      num_batches_tracked):
    x = as_storage_input(op, x)
    # The running statistics are updated in place, so they must be the caller's own arrays.
    for name, a in (("running_mean", running_mean), ("running_var", running_var)):
        if a is not None and (a.dtype != cupy.float32 or not a.flags.c_contiguous):
            raise TypeError(f"{op}: {name} must be a C-contiguous float32 array (it is updated in place)")
    y = cupy.ndarray(x.shape, dtype=x.dtype)
    if x.size == 0:   # (the front refuses an empty training batch)
        param_shape = _param_shape(x.shape, mode, layout)
        return y, cupy.ndarray(param_shape, dtype=cupy.float32), cupy.ndarray(param_shape, dtype=cupy.float32)
    plan = _plan(op, "batch_norm_stats", apply_name, x, not x.data.ptr % 16, mode, layout)
    saved_mean = cupy.ndarray(plan.param_shape, dtype=cupy.float32)
    saved_invstd = cupy.ndarray(plan.param_shape, dtype=cupy.float32)

    partial = cupy.ndarray(plan.partial_shape, dtype=cupy.float32)
    affine = cupy.ndarray((3, plan.C), dtype=cupy.float32)
    statistics = (np.float32(eps), np.float32(momentum), _pointer(gamma, op), _pointer(beta_, op),
                  null_pointer() if running_mean is None else running_mean,
                  null_pointer() if running_var is None else running_var, saved_mean, saved_invstd, affine,
                  null_pointer() if num_batches_tracked is None else num_batches_tracked)
    # pass 1, the statistics; with arrival counters its last block of each channel (tile) also runs the finalize
    arrivals = arrival_counters(plan.grid[0])
    plan.reduction(plan.grid, plan.block, (x, partial, *plan.reduction_args,
                                           null_pointer() if arrivals is None else arrivals, *statistics))
    if arrivals is None:
        finalize = get_kernel("batch_norm", "batch_norm_finalize_stats")
        finalize((-(-plan.C // THREADS),), (THREADS,),
                 (partial, np.int32(plan.partial_shape[1]), np.int32(plan.C), *statistics))
    plan.apply(plan.apply_grid, (THREADS,), (x, y, affine, *plan.apply_args))
    return y, saved_mean, saved_invstd


def batch_norm_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                 layout="NCHW"):
    """y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta_."""
    return _forward_inference("batch_norm_forward_inference", "batch_norm_apply", x, gamma, beta_, running_mean,
                              running_var, eps, mode, layout)


def batch_norm_relu_forward_inference(x, gamma, beta_, running_mean, running_var, *, eps=1e-5, mode="spatial",
                                      layout="NCHW"):
    """max(BN(x), 0) with the running statistics, one elementwise pass."""
    return _forward_inference("batch_norm_relu_forward_inference", "batch_norm_relu_apply", x, gamma, beta_,
                              running_mean, running_var, eps, mode, layout)


def _forward_inference(op, apply_name, x, gamma, beta_, running_mean, running_var, eps, mode, layout):
    x = as_storage_input(op, x)
    outer, C, inner = _view(x.shape, mode, layout)
    y = cupy.ndarray(x.shape, dtype=x.dtype)
    if x.size == 0:
        return y
    affine = cupy.ndarray((3, C), dtype=cupy.float32)
    prepare = get_kernel("batch_norm", "batch_norm_inference_affine")
    prepare((-(-C // THREADS),), (THREADS,),
            (as_kernel_input(op, running_mean), as_kernel_input(op, running_var), _pointer(gamma, op),
             _pointer(beta_, op), np.float32(eps), np.int32(C), affine))
    grid, shape_args = _apply_args(is_aligned(x), outer, C, inner)
    _kernel(apply_name, x)(grid, (THREADS,), (x, y, affine, *shape_args))
    return y


def batch_norm_backward(x, dy, gamma, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    """(dx, dgamma, dbeta); dgamma and dbeta are None when gamma is None."""
    return _backward("batch_norm_backward", False, x, dy, gamma, None, saved_mean, saved_invstd, mode, layout)


def batch_norm_relu_backward(x, dy, gamma, beta_, saved_mean, saved_invstd, *, mode="spatial", layout="NCHW"):
    """(dx, dgamma, dbeta) of max(BN(x), 0): dy is masked where the recomputed BN output is <= 0,
    inside the reductions and the dx pass (no masked copy of dy is written)."""
    return _backward("batch_norm_relu_backward", True, x, dy, gamma, beta_, saved_mean, saved_invstd, mode, layout)


def _backward(op, relu, x, dy, gamma, beta_, saved_mean, saved_invstd, mode, layout):
    x, dy = as_storage_input(op, x), as_storage_input(op, dy)
    if dy.dtype != x.dtype:
        raise TypeError(f"{op}: dy is {dy.dtype} but x is {x.dtype}")
    saved_mean = as_kernel_input(op, saved_mean)
    saved_invstd = as_kernel_input(op, saved_invstd)
    dx = cupy.ndarray(x.shape, dtype=x.dtype)
    dgamma = None if gamma is None else cupy.ndarray(saved_mean.shape, dtype=cupy.float32)
    dbeta = None if gamma is None else cupy.ndarray(saved_mean.shape, dtype=cupy.float32)
    if x.size == 0:
        return dx, dgamma, dbeta
    plan = _plan(op, "batch_norm_relu_grads" if relu else "batch_norm_grads",
                 "batch_norm_relu_backward_dx" if relu else "batch_norm_backward_dx", x,
                 not (x.data.ptr % 16 or dy.data.ptr % 16), mode, layout)

    partial = cupy.ndarray(plan.partial_shape, dtype=cupy.float32)
    gamma_ptr = _pointer(gamma, op)
    mask = (gamma_ptr, _pointer(beta_, op), saved_invstd) if relu else ()
    coef = cupy.ndarray((4, plan.C), dtype=cupy.float32)
    outputs = (null_pointer() if dgamma is None else dgamma, null_pointer() if dbeta is None else dbeta, coef)
    arrivals = arrival_counters(plan.grid[0])
    plan.reduction(plan.grid, plan.block,
                   (x, dy, saved_mean, partial, *plan.reduction_args, *mask,
                    null_pointer() if arrivals is None else arrivals, plan.count, gamma_ptr, saved_invstd, *outputs))
    if arrivals is None:
        finalize = get_kernel("batch_norm", "batch_norm_finalize_grads")
        finalize((-(-plan.C // THREADS),), (THREADS,),
                 (partial, np.int32(plan.partial_shape[1]), np.int32(plan.C), plan.count, gamma_ptr, saved_mean,
                  saved_invstd, *outputs))
    plan.apply(plan.apply_grid, (THREADS,), (x, dy, dx, coef, *plan.apply_args, *mask))
    return dx, dgamma, dbeta
