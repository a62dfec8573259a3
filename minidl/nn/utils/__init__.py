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
        first = grads[0].data.device_id
        same = all(g.data.device_id == first for g in grads)
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
        _check_finite(op, total_norm, norm_type, error_if_nonfinite)
        P.multi_tensor_scale(grads, coef)
        return Tensor._make(total_norm)

    total_norm = _total_norm(grads, norm_type)
    _check_finite(op, total_norm, norm_type, error_if_nonfinite)
    _scale(grads, max_norm, total_norm)
    return Tensor._make(total_norm)


def _check_finite(op, total_norm, norm_type, error_if_nonfinite):
    """error_if_nonfinite: raise on an inf or NaN norm (the only host read of the norm: a sync on the GPU)."""
    if error_if_nonfinite and not bool(_device.get_array_module(total_norm).isfinite(total_norm)):
        raise RuntimeError(f"{op}: the total norm of order {norm_type} of the gradients is non-finite "
                           f"({float(total_norm)}); pass error_if_nonfinite=False to clip anyway")


def _total_norm(arrays, norm_type):
    """The p-norm of the arrays joined (the p-norm of their p-norms), a 0-d array in the widest of their dtypes
    (float64 if any is, else float32)."""
    xp = _device.get_array_module(arrays[0])
    dtype = xp.result_type(*[a.dtype for a in arrays])
    if norm_type == math.inf:
        total = xp.stack([xp.abs(a).max() if a.size else xp.zeros((), dtype) for a in arrays]).max()
    else:
        total = _pnorm(xp, xp.stack([_pnorm(xp, a.astype(dtype, copy=False), norm_type) for a in arrays]), norm_type)
    return xp.asarray(total, dtype=dtype)   # (a 0-d array: NumPy reductions give scalars)


def _scale(grads, max_norm, total_norm):
    """Every gradient times min(1, max_norm / (total_norm + 1e-6)), in place: computed as an array, so no Python
    branch reads a device value."""
    xp = _device.get_array_module(total_norm)
    scale = xp.minimum(xp.asarray(1.0, dtype=total_norm.dtype), max_norm / (total_norm + 1e-6))
    for g in grads:
        g *= scale.astype(g.dtype)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the tensors joined into one vector (torch.nn.utils.get_total_norm: what clip_grad_norm_
    computes of the gradients, for clip_grads_with_norm_)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    if not tensors:
        return Tensor._make(np.zeros((), dtype=np.float32))
    total = _total_norm([t._data for t in tensors], float(norm_type))
    _check_finite("get_total_norm", total, norm_type, error_if_nonfinite)
    return Tensor._make(total)


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the gradients of `parameters` by min(1, max_norm / (total_norm + 1e-6)) in place (the second half of
    clip_grad_norm_, with a total norm computed elsewhere, e.g. by get_total_norm across model shards)."""
    grads = _gradients(parameters, "clip_grads_with_norm_")
    if grads:
        total = total_norm._data if isinstance(total_norm, Tensor) else np.asarray(total_norm, dtype=np.float32)
        _scale(grads, float(max_norm), _device.get_array_module(grads[0]).asarray(total))


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
from .fusion import (  # noqa: E402,F401
    fuse_conv_bn_eval, fuse_conv_bn_weights, fuse_linear_bn_eval, fuse_linear_bn_weights, fuse_modules,
)
from .weight_norm import (  # noqa: E402,F401  (torch.nn.utils.weight_norm / spectral_norm: the hook API)
    remove_spectral_norm, remove_weight_norm, spectral_norm, weight_norm,
)
from . import parametrize, parametrizations  # noqa: E402,F401  (the parametrization API)
from . import prune  # noqa: E402,F401  (torch.nn.utils.prune: masks over parameters)


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm, the deprecated name of clip_grad_norm_ (torch warns; so does minidl)."""
    import warnings

    warnings.warn("nn.utils.clip_grad_norm is now deprecated in favor of nn.utils.clip_grad_norm_.", FutureWarning,
                  stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def skip_init(module_cls, *args, **kwargs):
    """The module built without running its initialisers (torch.nn.utils.skip_init): made on the meta device, then
    given uninitialised memory on `device` (the CPU by default), for weights that are about to be loaded."""
    import inspect

    from ..module import Module

    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    return module_cls(*args, **kwargs).to_empty(device=final_device)


def _convert_conv_weights(module, memory_format, classes):
    for m in module.modules():
        if isinstance(m, classes):
            m.weight.data = m.weight.data.contiguous(memory_format=memory_format)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Every Conv2d / ConvTranspose2d weight of module in memory_format (channels_last: the NHWC kernels' filters),
    in place; the module is returned (torch.nn.utils.convert_conv2d_weight_memory_format)."""
    from ..layers.conv import Conv2d, ConvTranspose2d

    return _convert_conv_weights(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module, memory_format):
    from ..layers.conv import Conv3d, ConvTranspose3d

    return _convert_conv_weights(module, memory_format, (Conv3d, ConvTranspose3d))
