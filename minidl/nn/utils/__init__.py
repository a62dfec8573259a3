"""Gradient clipping: clip_grad_norm_ and clip_grad_value_ (PyTorch's torch.nn.utils names).

clip_grad_norm_ treats the gradients of all parameters as one long vector g and rescales it when its
norm is too large:

    total_norm = ||g||_p = (sum_i |g_i|^p)^(1/p)         (p = inf: max_i |g_i|)
    g <- g * min(1, max_norm / (total_norm + 1e-6))

Recurrent networks need this: backpropagation through time multiplies many Jacobians, and a rare
large one makes the gradient explode; clipping the norm keeps the step's direction and bounds its
length.

On the GPU, float32 gradients and the 2-norm take three launches whatever the number of parameters
(multi_tensor_l2norm, multi_tensor_scale). Everything stays on the gradients' device. The norm is a 0-d array, the scale factor is computed
from it with array operations (a minimum, not a Python `if`), so clipping on the GPU is a few kernel
launches and never reads a value back to the host. Only `error_if_nonfinite=True` has to look at the
norm, and so waits for the GPU.
"""
from __future__ import annotations

import math

import numpy as np

from ... import _device
from ... import primitives as P
from ...autograd.function import no_grad
from ...autograd.tensor import Tensor


def _gradients(parameters, op):
    """The gradient arrays of the parameters that have one; all on one device."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    grads = []
    for i, p in enumerate(parameters):
        if not isinstance(p, Tensor):
            raise TypeError(f"{op}: parameters must be Tensors, but item {i} is a {type(p).__name__}")
        if p.grad is not None:
            grads.append(p.grad._data)
    kind = type(grads[0]) if grads else None   # (one array type, and for CuPy one device id: no Device objects)
    same = all(type(g) is kind for g in grads)
    if same and grads and kind is not np.ndarray:
        first = grads[0].device.id
        same = all(g.device.id == first for g in grads)
    if not same:
        devices = {str(_device.device_of(g)) for g in grads}
        raise ValueError(f"{op}: gradients live on several devices {sorted(devices)}; clip each device's "
                         "parameters separately")
    return grads


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients of `parameters` in place so that their joint p-norm is at most max_norm.

    parameters: an iterable of tensors (or one tensor); those without .grad are skipped.
    max_norm:   the largest allowed norm (float). norm_type: p (float, or inf for the max norm).
    Returns the total norm *before* clipping, as a 0-d Tensor on the gradients' device (reading it
    with .item() is the caller's choice, and a host sync on the GPU). `foreach` is accepted for
    PyTorch compatibility and ignored.
    """
    op = "clip_grad_norm_"
    try:
        max_norm, norm_type = float(max_norm), float(norm_type)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: max_norm and norm_type must be numbers (norm_type may be inf), got "
                         f"max_norm={max_norm!r}, norm_type={norm_type!r}") from None
    if max_norm < 0 or math.isnan(max_norm):
        raise ValueError(f"{op}: max_norm must be >= 0, got {max_norm}")
    if not (norm_type > 0):
        raise ValueError(f"{op}: norm_type must be positive (or inf), got {norm_type}")
    grads = _gradients(parameters, op)
    if not grads:
        return Tensor._make(np.zeros((), dtype=np.float32))  # nothing to clip: the norm of nothing is 0

    if norm_type == 2.0 and P.multi_tensor_supported(*grads):
        # The GPU path: one multi-tensor sum of squares, a one-block finalize that also forms the clip
        # coefficient on the device, one multi-tensor scale (kernels/multi_tensor.cu): 3 launches.
        total_norm, coef = P.multi_tensor_l2norm(grads, max_norm)
        if error_if_nonfinite and not bool(_device.get_array_module(total_norm).isfinite(total_norm)):
            raise RuntimeError(f"{op}: the total norm of order {norm_type} of the gradients is non-finite "
                               f"({float(total_norm)}); pass error_if_nonfinite=False to clip anyway")
        P.multi_tensor_scale(grads, coef)
        return Tensor._make(total_norm)

    xp = _device.get_array_module(grads[0])
    with no_grad():
        # Accumulate in the widest gradient dtype: float64 if any gradient is, else float32.
        dtype = xp.result_type(*[g.dtype for g in grads])
        if norm_type == math.inf:
            per_param = xp.stack([xp.abs(g).max() if g.size else xp.zeros((), dtype) for g in grads])
            total_norm = per_param.max()
        else:
            # The p-norm of the concatenation = the p-norm of the per-parameter p-norms.
            per_param = xp.stack([_pnorm(xp, g.astype(dtype, copy=False), norm_type) for g in grads])
            total_norm = _pnorm(xp, per_param, norm_type)
        total_norm = xp.asarray(total_norm, dtype=dtype)  # a 0-d array (NumPy reductions give scalars)
        if error_if_nonfinite and not bool(xp.isfinite(total_norm)):
            raise RuntimeError(f"{op}: the total norm of order {norm_type} of the gradients is non-finite "
                               f"({float(total_norm)}); pass error_if_nonfinite=False to clip anyway")
        # min(1, max_norm / (norm + eps)) as an array: no Python branch on a device value.
        scale = xp.minimum(xp.asarray(1.0, dtype=dtype), max_norm / (total_norm + 1e-6))
        for g in grads:
            g *= scale.astype(g.dtype)
    return Tensor._make(total_norm)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient element of `parameters` into [-clip_value, clip_value], in place."""
    op = "clip_grad_value_"
    clip_value = float(clip_value)
    if clip_value < 0:
        raise ValueError(f"{op}: clip_value must be >= 0, got {clip_value}")
    for g in _gradients(parameters, op):
        xp = _device.get_array_module(g)
        xp.clip(g, -clip_value, clip_value, out=g)


def parameters_to_vector(parameters):
    """The parameters flattened and joined into one 1-D tensor (torch.nn.utils.parameters_to_vector), differentiable
    with respect to each of them. All must live on one device."""
    from ... import cat

    parameters = list(parameters)
    devices = {str(p.device) for p in parameters}
    if len(devices) > 1:
        raise TypeError(f"parameters_to_vector: the parameters live on several devices ({sorted(devices)}); "
                        "move them to one first")
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy the slices of a 1-D tensor into the parameters, in order (torch.nn.utils.vector_to_parameters): the
    inverse of parameters_to_vector; no gradient flows."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor, got {type(vec).__name__}")
    parameters = list(parameters)
    total = sum(p.numel() for p in parameters)
    if vec.ndim != 1 or vec.numel() != total:
        raise ValueError(f"vector_to_parameters: vec must be 1-D with {total} elements (the parameters' count), got "
                         f"shape {tuple(vec.shape)}")
    offset = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[offset:offset + n].reshape(p.shape))
            offset += n


def _pnorm(xp, a, p):
    """(sum |a|^p)^(1/p) of an array, as a 0-d array; p = 2 without the powers."""
    if a.size == 0:
        return xp.zeros((), dtype=a.dtype)
    if p == 2.0:
        return xp.sqrt(xp.sum(a * a))
    if p == 1.0:
        return xp.sum(xp.abs(a))
    return xp.sum(xp.abs(a) ** p) ** (1.0 / p)
from . import rnn  # noqa: E402,F401  (minidl.nn.utils.rnn: packed sequences)
from . import fusion  # noqa: E402,F401  (minidl.nn.utils.fusion: fuse_modules)
from .fusion import fuse_modules  # noqa: E402,F401
from .weight_norm import (  # noqa: E402,F401  (torch.nn.utils.weight_norm / spectral_norm: the hook API)
    remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm,
)
from . import parametrize, parametrizations  # noqa: E402,F401  (the parametrization API)
