"""Batch norm (and batch norm + ReLU fused), local response normalization, layer norm and RMS norm."""
from __future__ import annotations

from ... import _dtypes, _layout
from ..._dtypes import FLOATING_SET
from ... import primitives as P
from ..._device import get_array_module
from ...amp import autocast_mode as _amp
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ._checks import _check_float_tensor, _check_same_device, _check_tensor


def _layout_of(x):
    """("NHWC", its NHWC view) for an input in channels_last memory (minidl._layout), else ("NCHW", x): the
    batch-norm primitives take either layout, so a channels_last network needs no transpose here."""
    if x.ndim in (4, 5) and not x.flags.c_contiguous and _layout.strictly_channels_last(x):
        return "NHWC", _layout.nhwc(x)
    return "NCHW", x


def _in(layout, a):
    return _layout.nhwc(a) if layout == "NHWC" else a


def _back(layout, a):
    return _layout.from_nhwc(a) if layout == "NHWC" else a


class BatchNormTraining(Function):
    """Normalise with the batch's statistics; the running statistics (plain arrays, not inputs) are
    updated in place by the primitive. Backward from the saved mean and 1/std."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, momentum=0.1, eps=1e-5,
                num_batches_tracked=None):
        self.layout, x = _layout_of(x)
        self.x, self.gamma, self.eps = x, gamma, eps
        y, self.mean, self.invstd = P.batch_norm_forward_training(
            x, gamma, beta, running_mean, running_var, momentum=momentum, eps=eps, layout=self.layout,
            num_batches_tracked=num_batches_tracked)
        return _back(self.layout, y)

    def backward(self, dy):
        dx, dgamma, dbeta = P.batch_norm_backward(self.x, _in(self.layout, dy), self.gamma, self.mean, self.invstd,
                                                  layout=self.layout)
        return _back(self.layout, dx), dgamma, dbeta

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        x, gamma = self.inputs[0], (self.inputs[1] if self.gamma is not None else None)
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        dx, x_hat = _normalization_backward_graph(x, dy, None if gamma is None else gamma.reshape(shape), axes,
                                                  self.eps, center=True)
        return (dx, (dy * x_hat).sum(axes) if self.needs_input_grad[1] else None,
                dy.sum(axes) if len(self.needs_input_grad) > 2 and self.needs_input_grad[2] else None)


def _normalization_backward_graph(x, dy, scale, axes, eps, center):
    """dx of y = x_hat * scale (+ shift), x_hat = (x - mean) / sqrt(var + eps) over `axes` (center=False: RMS norm,
    x / sqrt(mean(x^2) + eps)), as tensor ops that recompute the statistics from x, so that the result is
    differentiable again in x (create_graph=True). Returns (dx, x_hat):
        g = dy * scale;  dx = rstd (g - mean(g) - x_hat mean(g x_hat))   (no mean(g) term for RMS)."""
    if center:
        xc = x - x.mean(axes, keepdim=True)
        rstd = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
    else:
        xc = x
        rstd = ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
    x_hat = xc * rstd
    g = dy if scale is None else dy * scale
    inner = g - x_hat * (g * x_hat).mean(axes, keepdim=True)
    if center:
        inner = inner - g.mean(axes, keepdim=True)
    return rstd * inner, x_hat


class BatchNormInference(Function):
    """y = gamma (x - running_mean) / sqrt(running_var + eps) + beta: an affine map per channel, so
    dx = dy gamma / std, dgamma = sum(dy x_hat), dbeta = sum(dy)."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, eps=1e-5):
        self._keep_affine(x, gamma, running_mean, running_var, eps)
        layout, xv = _layout_of(x)
        return _back(layout, P.batch_norm_forward_inference(xv, gamma, beta, running_mean, running_var, eps=eps,
                                                            layout=layout))

    def _keep_affine(self, x, gamma, running_mean, running_var, eps):
        """What backward needs: 1/std and x_hat per channel, gamma, the axes to sum over."""
        xp = get_array_module(x)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        self.axes = (0,) + tuple(range(2, x.ndim))
        self.invstd = (1.0 / xp.sqrt(running_var + x.dtype.type(eps))).reshape(shape)
        self.running_mean = running_mean.reshape(shape)
        self.x_hat = (x - self.running_mean) * self.invstd
        self.gamma, self.shape = gamma, shape

    def backward(self, dy):
        scale = self.invstd if self.gamma is None else self.invstd * self.gamma.reshape(self.shape)
        dx = dy * scale
        dgamma = (dy * self.x_hat).sum(axis=self.axes) if self.gamma is not None else None
        dbeta = dy.sum(axis=self.axes) if self.needs_input_grad[2] else None
        return dx, dgamma, dbeta

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        x, gamma = self.inputs[0], (self.inputs[1] if self.gamma is not None else None)
        invstd = Tensor._make(self.invstd)                 # the running statistics are constants
        scale = invstd if gamma is None else invstd * gamma.reshape(self.shape)
        x_hat = (x - Tensor._make(self.running_mean)) * invstd
        dgamma = (dy * x_hat).sum(self.axes) if gamma is not None and self.needs_input_grad[1] else None
        dbeta = dy.sum(self.axes) if len(self.needs_input_grad) > 2 and self.needs_input_grad[2] else None
        return dy * scale, dgamma, dbeta


class BatchNormReLUTraining(Function):
    """max(BN(x), 0) with the batch's statistics, fused (batch_norm_relu_* primitives): the backward
    recomputes the BN output from x to mask dy, so nothing but the statistics is saved."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, momentum=0.1, eps=1e-5,
                num_batches_tracked=None):
        self.layout, x = _layout_of(x)
        self.x, self.gamma, self.beta = x, gamma, beta
        y, self.mean, self.invstd = P.batch_norm_relu_forward_training(
            x, gamma, beta, running_mean, running_var, momentum=momentum, eps=eps, layout=self.layout,
            num_batches_tracked=num_batches_tracked)
        return _back(self.layout, y)

    def backward(self, dy):
        dx, dgamma, dbeta = P.batch_norm_relu_backward(self.x, _in(self.layout, dy), self.gamma, self.beta, self.mean,
                                                       self.invstd, layout=self.layout)
        return _back(self.layout, dx), dgamma, dbeta


class BatchNormReLUInference(BatchNormInference):
    """max(BN(x), 0) with the running statistics, one fused pass; backward: dy masked where y > 0,
    then the inference BN's affine gradients."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, eps=1e-5):
        self._keep_affine(x, gamma, running_mean, running_var, eps)
        self.y = P.batch_norm_relu_forward_inference(x, gamma, beta, running_mean, running_var, eps=eps)
        return self.y

    def backward(self, dy):
        dy = _dtypes.where(get_array_module(dy), self.y > 0, dy, dy.dtype.type(0))   # keeps bfloat16 on CuPy
        return super().backward(dy)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5, *,
               num_batches_tracked=None):
    """input (N, C, *spatial); running_mean/var (C,) buffers (updated in place when training), or None;
    weight (gamma), bias (beta): (C,) or None. num_batches_tracked (a minidl extra, what nn.BatchNorm*d passes): its
    0-d int64 counter, incremented by one when training, on the GPU inside the statistics kernel (one launch fewer
    per layer and step than `num_batches_tracked += 1`)."""
    return _batch_norm("batch_norm", False, input, running_mean, running_var, weight, bias, training, momentum, eps,
                       num_batches_tracked)


def batch_norm_relu(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                    eps=1e-5, *, num_batches_tracked=None):
    """relu(batch_norm(...)) in fused kernels (a minidl extra; same arguments as batch_norm). Equal to the
    unfused pair bit for bit on the GPU; one launch fewer forward and backward, and no masked gradient
    written and read back."""
    return _batch_norm("batch_norm_relu", True, input, running_mean, running_var, weight, bias, training, momentum,
                       eps, num_batches_tracked)


def _batch_norm(op, relu, input, running_mean, running_var, weight, bias, training, momentum, eps,
                num_batches_tracked=None):
    if not _usual_arguments(input, running_mean, running_var, weight, bias, num_batches_tracked, training):
        empty = _checked_arguments(op, input, running_mean, running_var, weight, bias, training, num_batches_tracked)
        if empty is not None:
            return empty
    rm = None if running_mean is None else running_mean._data
    rv = None if running_var is None else running_var._data
    params = (weight, bias)
    if training:
        fn = BatchNormReLUTraining if relu else BatchNormTraining
        return fn.apply(input, *params, running_mean=rm, running_var=rv, momentum=momentum, eps=eps,
                        num_batches_tracked=None if num_batches_tracked is None else num_batches_tracked._data)
    if rm is None or rv is None:
        raise ValueError(f"{op}: training=False needs running_mean and running_var")
    fn = BatchNormReLUInference if relu else BatchNormInference
    return fn.apply(input, *params, running_mean=rm, running_var=rv, eps=eps)


def _usual_arguments(input, running_mean, running_var, weight, bias, num_batches_tracked, training) -> bool:
    """Whether the arguments are the usual ones (what nn.BatchNorm*d passes: a non-empty float input of at least 2
    dims, float parameters and statistics of shape (C,) and an int64 0-d counter, all of the input's array type,
    more than one value per channel when training), decided in a few comparisons. Anything else goes through
    _checked_arguments, which raises naming the op (or handles the empty batch)."""
    if not isinstance(input, Tensor):
        return False
    x = input._data
    if x.dtype not in FLOATING_SET or x.ndim < 2 or x.size == 0:
        return False
    C, kind = x.shape[1], type(x)
    for t in (running_mean, running_var, weight, bias):
        if t is not None:
            if not isinstance(t, Tensor):
                return False
            d = t._data
            if type(d) is not kind or d.dtype not in FLOATING_SET or d.shape != (C,):
                return False
    if num_batches_tracked is not None:
        if not isinstance(num_batches_tracked, Tensor):
            return False
        d = num_batches_tracked._data
        if type(d) is not kind or d.dtype != _dtypes.int64 or d.ndim:
            return False
    return not training or x.size // C > 1


def _checked_arguments(op, input, running_mean, running_var, weight, bias, training, num_batches_tracked):
    """batch_norm's checks, raising naming the op; for an empty batch, the result (torch's rule), else None."""
    _check_float_tensor(op, "input", input)
    if input.numel() == 0 and input.ndim < 2:
        return input * 1  # torch returns an empty tensor for an empty input of any rank
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C, ...), got shape {input.shape}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None:
            _check_float_tensor(op, name, t)
    if num_batches_tracked is not None:
        _check_tensor(op, "num_batches_tracked", num_batches_tracked)
    _check_same_device(op, input=input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias,
                       num_batches_tracked=num_batches_tracked)
    if num_batches_tracked is not None and (num_batches_tracked.dtype != _dtypes.int64 or num_batches_tracked.ndim):
        raise TypeError(f"{op}: num_batches_tracked must be a 0-d int64 tensor (a BatchNorm layer's counter), got "
                        f"{num_batches_tracked.dtype} of shape {tuple(num_batches_tracked.shape)}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (input.shape[1],):
            raise ValueError(f"{op}: {name} has shape {t.shape}, expected ({input.shape[1]},) for input {input.shape}")
    if training and input.numel() // input.shape[1] == 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got input of shape {input.shape}")
    if input.numel() == 0:
        # torch's rule for an empty batch: an empty output, running statistics untouched; weight and bias
        # still take part, so their gradients are zeros rather than missing.
        out = input * 1
        if weight is not None:
            out = out * weight[0]
        if bias is not None:
            out = out + bias[0]
        if training and num_batches_tracked is not None:
            num_batches_tracked._data += 1   # (an empty batch counts, as in torch)
        return out
    return None


class LocalResponseNorm(Function):
    def forward(self, x, desc=None):
        self.x, self.desc = x, desc
        self.y = P.lrn_forward(x, desc)
        return self.y

    def backward(self, dy):
        return P.lrn_backward(self.x, self.y, dy, self.desc)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Normalise each channel by its `size` neighbours' energy (AlexNet). input (N, C, *spatial), >= 3 dims."""
    op = "local_response_norm"
    _check_float_tensor(op, "input", input)
    if input.ndim < 3:
        raise ValueError(f"{op}: input must have at least 3 dims (N, C, spatial...), got shape {input.shape}")
    return LocalResponseNorm.apply(input, desc=P.LRNDescriptor(size, alpha, beta, k))


# ------------------------------------------------------------------------------------------------
# Layer norm and RMS norm (minidl/primitives/layer_norm.py)
# ------------------------------------------------------------------------------------------------


class LayerNorm(Function):
    """Normalise every row of the last `normalized_ndim` dimensions; backward from the saved per-row
    (mean, rstd). rms=True: RMS norm (no centring, no bias)."""

    def forward(self, x, weight=None, bias=None, normalized_ndim=1, eps=1e-5, rms=False):
        self.x, self.weight, self.has_bias = x, weight, bias is not None
        self.normalized_ndim, self.rms, self.eps = normalized_ndim, rms, eps
        y, self.mean, self.rstd = P.layer_norm_forward(x, weight, bias, normalized_ndim=normalized_ndim, eps=eps,
                                                       rms=rms)
        return y

    def backward(self, dy):
        dx, dweight, dbias = P.layer_norm_backward(self.x, dy, self.weight, self.mean, self.rstd,
                                                   normalized_ndim=self.normalized_ndim, rms=self.rms,
                                                   has_bias=self.has_bias)
        if self.weight is None:
            return (dx,)
        return (dx, dweight, dbias) if self.has_bias else (dx, dweight)

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        x = self.inputs[0]
        axes = tuple(range(x.ndim - self.normalized_ndim, x.ndim))
        weight = self.inputs[1] if self.weight is not None else None
        dx, x_hat = _normalization_backward_graph(x, dy, weight, axes, self.eps, center=not self.rms)
        if weight is None:
            return (dx,)
        lead = tuple(range(x.ndim - self.normalized_ndim))
        dw = (dy * x_hat).sum(lead) if lead else dy * x_hat
        if not self.has_bias:
            return dx, dw
        return dx, dw, (dy.sum(lead) if lead else dy)


def _normalized_shape(op, input, normalized_shape):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or any(not isinstance(s, int) for s in shape):
        raise TypeError(f"{op}: normalized_shape must be an int or a tuple of ints, got {normalized_shape!r}")
    if tuple(input.shape[input.ndim - len(shape):]) != shape or len(shape) > input.ndim:
        raise RuntimeError(
            f"{op}: Given normalized_shape={list(shape)}, expected input with shape [*, {', '.join(map(str, shape))}], "
            f"but got input of size {list(input.shape)} (the normalized dimensions are the input's last ones)")
    return shape


def _norm(op, input, normalized_shape, weight, bias, eps, rms):
    if _amp.regions:
        (input,) = _amp.cast_inputs(op, input)   # float32 under autocast, as torch
    n = normalized_shape[0] if type(normalized_shape) is tuple and len(normalized_shape) == 1 else normalized_shape
    if (type(n) is int and isinstance(input, Tensor) and isinstance(weight, Tensor) and eps is not None
            and (bias is None or isinstance(bias, Tensor))):
        # The usual call (nn.LayerNorm over the last dimension, its weight and bias of the input's dtype, on its
        # device): what the checks below would accept, tested on the arrays directly (issue 23: an op's host cost).
        x, w = input._data, weight._data
        if (x.dtype in FLOATING_SET and w.dtype == x.dtype and type(w) is type(x) and x.ndim
                and x.shape[-1] == n and w.shape == (n,)):
            if bias is None:
                return LayerNorm.apply(input, weight, normalized_ndim=1, eps=float(eps), rms=rms)
            b = bias._data
            if b.dtype == x.dtype and type(b) is type(x) and b.shape == w.shape and not rms:
                return LayerNorm.apply(input, weight, bias, normalized_ndim=1, eps=float(eps), rms=rms)
    _check_float_tensor(op, "input", input)
    shape = _normalized_shape(op, input, normalized_shape)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _check_float_tensor(op, name, t)
            if tuple(t.shape) != shape:
                raise RuntimeError(f"{op}: {name} has shape {tuple(t.shape)}, expected the normalized shape {shape}")
    _check_same_device(op, input=input, weight=weight, bias=bias)
    if eps is None:   # rms_norm's default, as torch: the input dtype's machine epsilon
        eps = float(_dtypes.finfo(input.dtype).eps)
    if weight is not None and weight.dtype != input.dtype:
        weight = weight.type(input.dtype)
    if bias is not None and bias.dtype != input.dtype:
        bias = bias.type(input.dtype)
    args = (input,) if weight is None else (input, weight) if bias is None else (input, weight, bias)
    kwargs = dict(normalized_ndim=len(shape), eps=float(eps), rms=rms)
    if weight is None and bias is not None:
        raise ValueError(f"{op}: a bias without a weight is not supported (pass weight=ones)")
    return LayerNorm.apply(*args, **kwargs)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalise over the last len(normalized_shape) dimensions (torch.nn.functional.layer_norm)."""
    return _norm("layer_norm", input, normalized_shape, weight, bias, eps, rms=False)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimensions (torch.nn.functional.rms_norm);
    eps=None is the input dtype's machine epsilon, as torch."""
    return _norm("rms_norm", input, normalized_shape, weight, None, eps, rms=True)
