"""Multi-tensor primitives: one call updates a whole list of tensors (apex's multi_tensor_apply,
torch's fused optimizers). On the GPU each is one or two kernel launches whatever the length of the
list (kernels/multi_tensor.cu); the NumPy reference (cpu/multi_tensor.py) loops over the list.

    multi_tensor_sgd(params, grads, momentum_buffers, first_step, hparams, *, nesterov, maximize,
                     grad_scale=None, found_inf=None)           hparams = (lr, momentum, dampening, weight_decay)
    multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_slots, steps, hparams, *,
                      decoupled, maximize, grad_scale=None, found_inf=None)  (lr, beta1, beta2, eps, weight_decay)
    multi_tensor_rmsprop(params, grads, square_avgs, momentum_buffers, grad_avgs, step_slots, steps, hparams, *,
                         maximize, grad_scale=None, found_inf=None)          (lr, alpha, eps, weight_decay, momentum)
    multi_tensor_zero(tensors)
    multi_tensor_l2norm(tensors, max_norm=None) -> (total_norm, clip_coef)
    multi_tensor_scale(tensors, coef)
    multi_tensor_cast(tensors, dtype) -> new arrays   float32 tensors in float16 / bfloat16 (autocast's weight casts)

Lists hold arrays of any shapes; the arrays of one row (a parameter, its gradient, its state) share
one shape. Everything is updated in place. hparams is a small float64 array of the scalar
hyper-parameters (device-resident on the GPU, so a scheduler writes it and a replayed CUDA graph
reads it; the optimizers keep it in their ParamGroup), steps a float32 array of step counts
indexed by step_slots (incremented before use), grad_scale / found_inf optional 0-d float32 arrays:
grads are divided by grad_scale, and found_inf != 0 skips the whole update with no host read.
On the GPU, every array is a C-contiguous float32 CuPy array.
"""
from __future__ import annotations

import operator

import numpy as np

from . import _common
from .._dtypes import HALF_DTYPES
from ._common import is_cuda_array

__all__ = ["multi_tensor_sgd", "multi_tensor_adam", "multi_tensor_rmsprop", "multi_tensor_zero", "multi_tensor_l2norm", "multi_tensor_scale",
           "multi_tensor_unscale", "multi_tensor_cast", "multi_tensor_supported"]


_FLOAT32 = np.dtype(np.float32)


def multi_tensor_supported(*arrays) -> bool:
    """True when the CUDA multi-tensor kernels can take these arrays (all CuPy, float32, C-contiguous,
    on the current device). Also while a CUDA graph is being captured: the kernels' pointer table is then
    copied with cudaMemcpyAsync from a pinned buffer, which the graph records (cuda/multi_tensor.py;
    CuPy's own host-to-device copy is refused during capture)."""
    if not arrays:
        return False
    if _all_cuda_float32(arrays):
        return True
    cuda_types = _common._CUDA_TYPES
    for a in arrays:   # (runs over every parameter, gradient and state of a model each step: kept lean)
        if a is None:
            continue
        # (CuPy's own contiguity flag: a.flags makes a Flags object at every read)
        if a.dtype != _FLOAT32 or (type(a) not in cuda_types and not is_cuda_array(a)) or not a._c_contiguous:
            return False
    return True


_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_C_CONTIGUOUS = operator.attrgetter("_c_contiguous")   # (CuPy's own flag: a.flags makes a Flags object at every read)


def _all_cuda_float32(arrays) -> bool:
    """True when every array is a C-contiguous float32 array of a CuPy type already met: the usual call (an
    optimizer's parameters, gradients and states each step), by C-level maps instead of a loop. False says
    nothing: the caller's loop decides (other types, Nones, anything else)."""
    types = set(map(type, arrays))
    if not types or not types <= _common._CUDA_TYPES:
        return False
    return set(map(_DTYPE, arrays)) == {_FLOAT32} and all(map(_C_CONTIGUOUS, arrays))


def _usual_rows(lists) -> bool:
    """The usual multi-tensor call, checked by C-level maps: full lists (no None) of one length whose rows agree
    in shape, every array a C-contiguous float32 CuPy array. False: the general checks decide."""
    shapes = None
    for v in lists:
        if not _all_cuda_float32(v):
            return False
        row_shapes = list(map(_SHAPE, v))
        if shapes is None:
            shapes = row_shapes
        elif row_shapes != shapes:   # (a different length, or a row whose shapes differ)
            return False
    return shapes is not None


def _check_rows(op, **lists):
    """Whether the lists go to the GPU kernels (True) or the NumPy reference (False), after checking that they
    have one length, that the arrays of one row share a shape, and that all live on one device. One pass
    over the arrays: an optimizer calls this every step over every parameter and its state."""
    lists = {k: v for k, v in lists.items() if v is not None}
    if _usual_rows(lists.values()):
        return True
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{op}: the tensor lists differ in length: {lengths}")
    n = next(iter(lengths.values()), 0)
    shapes, arrays = [None] * n, []
    for k, v in lists.items():
        for t, a in enumerate(v):
            if a is None:
                continue
            arrays.append(a)
            if shapes[t] is None:
                shapes[t] = a.shape
            elif a.shape != shapes[t]:
                found = {name: tuple(lists[name][t].shape) for name in lists if lists[name][t] is not None}
                raise ValueError(f"{op}: tensor {t} has different shapes across the lists: {found}")
    if arrays and multi_tensor_supported(*arrays):
        return True
    on_gpu = {is_cuda_array(a) for a in arrays}
    if len(on_gpu) > 1:
        raise ValueError(f"{op}: all arrays must be on one device (got NumPy and CuPy arrays)")
    if on_gpu == {True}:
        bad = next(a for a in arrays if a.dtype != _FLOAT32 or not a.flags.c_contiguous)
        raise TypeError(f"{op}: the CUDA kernels take C-contiguous float32 arrays, got one of dtype {bad.dtype}, "
                        f"shape {tuple(bad.shape)}, contiguous={bad.flags.c_contiguous}")
    return False


def _impl(gpu):
    if gpu:
        from .cuda import multi_tensor as impl
    else:
        from .cpu import multi_tensor as impl
    return impl


def multi_tensor_sgd(params, grads, momentum_buffers, first_step, hparams, **kw):
    gpu = _check_rows("multi_tensor_sgd", params=params, grads=grads, momentum_buffers=momentum_buffers)
    return _impl(gpu).multi_tensor_sgd(params, grads, momentum_buffers, first_step, hparams, **kw)


def multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_slots, steps, hparams, **kw):
    gpu = _check_rows("multi_tensor_adam", params=params, grads=grads, exp_avgs=exp_avgs, exp_avg_sqs=exp_avg_sqs,
                      max_exp_avg_sqs=max_exp_avg_sqs)
    return _impl(gpu).multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_slots, steps,
                                        hparams, **kw)


def multi_tensor_rmsprop(params, grads, square_avgs, momentum_buffers, grad_avgs, step_slots, steps, hparams, **kw):
    gpu = _check_rows("multi_tensor_rmsprop", params=params, grads=grads, square_avgs=square_avgs,
                      momentum_buffers=momentum_buffers, grad_avgs=grad_avgs)
    return _impl(gpu).multi_tensor_rmsprop(params, grads, square_avgs, momentum_buffers, grad_avgs, step_slots, steps,
                                           hparams, **kw)


def multi_tensor_zero(tensors):
    return _impl(_check_rows("multi_tensor_zero", tensors=tensors)).multi_tensor_zero(tensors)


def multi_tensor_l2norm(tensors, max_norm=None):
    return _impl(_check_rows("multi_tensor_l2norm", tensors=tensors)).multi_tensor_l2norm(tensors, max_norm)


def multi_tensor_scale(tensors, coef):
    return _impl(_check_rows("multi_tensor_scale", tensors=tensors)).multi_tensor_scale(tensors, coef)


def multi_tensor_unscale(tensors, scale, found_inf):
    """GradScaler's check and unscale in one pass over the list: found_inf (0-d float32) becomes 1 if any
    element is inf or NaN (it is never reset here), and when scale (0-d float32) is given every element
    is multiplied by float32(1 / float64(scale)), as torch's _amp_foreach_non_finite_check_and_unscale_."""
    if not tensors:
        return
    gpu = _check_rows("multi_tensor_unscale", tensors=tensors)
    if tuple(found_inf.shape) != () or found_inf.dtype != _FLOAT32 or (gpu != is_cuda_array(found_inf)):
        raise TypeError(f"multi_tensor_unscale: found_inf must be a 0-d float32 array on the tensors' device, got "
                        f"shape {tuple(found_inf.shape)}, dtype {found_inf.dtype}")
    return _impl(gpu).multi_tensor_unscale(tensors, scale, found_inf)


def multi_tensor_cast(tensors, dtype):
    """New arrays: each float32 tensor of the list in `dtype` (float16 or bfloat16), rounded to nearest even as
    cast() rounds (the same bits). On the GPU one launch for the whole list, into one allocation (each array a
    256-byte-aligned piece of it): autocast's copies of a model's weights, made once a region
    (amp/autocast_mode.cast_array). Tensors of any shapes, C-contiguous, on one device."""
    dtype = np.dtype(dtype)
    if dtype not in HALF_DTYPES:
        raise TypeError(f"multi_tensor_cast: casts to float16 or bfloat16, got {dtype}")
    tensors = list(tensors)
    if not tensors:
        return []
    gpu = _check_rows("multi_tensor_cast", tensors=tensors)
    if not gpu:
        bad = next((a for a in tensors if a.dtype != _FLOAT32), None)
        if bad is not None:
            raise TypeError(f"multi_tensor_cast: the tensors must be float32, got one of dtype {bad.dtype}, shape "
                            f"{tuple(bad.shape)}")
    return _impl(gpu).multi_tensor_cast(tensors, dtype)
