"""Fewer, fatter kernels for a model: fuse_modules and the fused modules it puts in.

A conv-BN-ReLU block runs, unfused, a convolution, batch norm's statistics / finalize / apply, and
a ReLU forward, then the mirror image backward: each kernel a launch of its own (several µs from
Python) and each intermediate written to memory and read back. The fused primitives do the same
arithmetic in fewer kernels (minidl.primitives: batch_norm_relu_*, add_relu_*,
convolution_bias_activation_forward), with results equal to the unfused path.

fuse_modules(model) walks every Sequential in the model and replaces, in place,
    BatchNorm1d/2d/3d followed by ReLU  ->  BatchNormReLU1d/2d/3d, Identity
    Conv2d followed by ReLU             ->  ConvReLU2d, Identity
The fused module takes over the original's parameters and buffers (the same Parameter objects, so
an optimizer made before still updates them), and the ReLU's place is kept by an Identity: the
state_dict keys and values are unchanged, and a checkpoint loads either way. Residual additions
live in user forward() code; write F.add_relu(x, f(x)) there for the fused add + ReLU.

PyTorch's torch.ao.quantization.fuse_modules has the same idea (for inference); this one keeps
training semantics exactly.
"""
from __future__ import annotations

from ..functional.convolution import conv_nd
from ..layers.activation import ReLU
from ..layers.conv import Conv2d
from ..layers.linear import Identity
from ..layers.normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d
from ..layers.container import Sequential
from ..module import Module

__all__ = ["fuse_modules", "BatchNormReLU1d", "BatchNormReLU2d", "BatchNormReLU3d", "ConvReLU2d", "fuse_conv_bn_eval",
           "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


class BatchNormReLU1d(BatchNorm1d):
    """relu(BatchNorm1d(x)) in fused kernels; the parameters and buffers of a BatchNorm1d."""

    _fused_relu = True


class BatchNormReLU2d(BatchNorm2d):
    """relu(BatchNorm2d(x)) in fused kernels; the parameters and buffers of a BatchNorm2d."""

    _fused_relu = True


class BatchNormReLU3d(BatchNorm3d):
    """relu(BatchNorm3d(x)) in fused kernels; the parameters and buffers of a BatchNorm3d."""

    _fused_relu = True


class ConvReLU2d(Conv2d):
    """relu(Conv2d(x)) with the ReLU in the convolution's epilogue on the GPU."""

    def forward(self, input):
        return conv_nd("conv2d_relu", 2, input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                       self.groups, self.algo, self.layout, desc=self._desc, plans=self._conv_plans, relu=True)


_FUSED = {BatchNorm1d: BatchNormReLU1d, BatchNorm2d: BatchNormReLU2d, BatchNorm3d: BatchNormReLU3d,
          Conv2d: ConvReLU2d}


def _adopt(module: Module, cls) -> Module:
    """A `cls` instance that is `module` in all but its class: the same parameters, buffers, flags."""
    fused = cls.__new__(cls)
    fused.__dict__.update(module.__dict__)
    return fused


def fuse_modules(model: Module) -> Module:
    """Replace BN->ReLU and Conv2d->ReLU pairs inside every Sequential of `model` by fused modules,
    in place (see the module docstring). Returns the model. Pairs whose modules are subclasses
    (not exactly BatchNorm*d / Conv2d / ReLU) are left alone."""
    if not isinstance(model, Module):
        raise TypeError(f"fuse_modules: expected a Module, got {type(model).__name__}")
    for seq in [m for m in model.modules() if isinstance(m, Sequential)]:
        names = list(seq._modules)
        for first, second in zip(names, names[1:]):
            a, b = seq._modules[first], seq._modules[second]
            if type(a) in _FUSED and type(b) is ReLU:
                seq._modules[first] = _adopt(a, _FUSED[type(a)])
                seq._modules[second] = Identity()
    return model


# -- Folding an eval-mode batch norm into the layer before it (torch.nn.utils.fusion) -------------------------------
# In eval mode batch norm is an affine map per channel, y = gamma (x - mean) / sqrt(var + eps) + beta, so after a
# convolution or a linear layer it can be folded into that layer's weight and bias: W' = W * s (s = gamma /
# sqrt(var + eps), per output channel), b' = (b - mean) * s + beta. One layer instead of two at inference.

def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """(weight, bias) Parameters of the convolution that computes conv then batch norm (eval mode). transpose: a
    transposed convolution's weight, (C_in, C_out, ...), scaled along its second dimension."""
    from ... import ones_like, rsqrt, zeros_like
    from ..module import Parameter

    w_dtype = conv_w.dtype
    b_dtype = conv_b.dtype if conv_b is not None else w_dtype
    conv_b = zeros_like(bn_rm) if conv_b is None else conv_b
    bn_w = ones_like(bn_rm) if bn_w is None else bn_w
    bn_b = zeros_like(bn_rm) if bn_b is None else bn_b
    scale = rsqrt(bn_rv + bn_eps)
    shape = ([1, -1] if transpose else [-1, 1]) + [1] * (conv_w.ndim - 2)
    fused_w = (conv_w * (bn_w * scale).reshape(shape)).to(dtype=w_dtype)
    fused_b = ((conv_b - bn_rm) * scale * bn_w + bn_b).to(dtype=b_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, conv_b.requires_grad)


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of `conv` (eval mode) whose output is bn(conv(x)) for `bn` in eval mode."""
    import copy

    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("fuse_conv_bn_eval: the batch norm has no running statistics (track_running_stats)")
    fused = copy.deepcopy(conv)
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """(weight, bias) Parameters of the linear layer that computes linear then batch norm (eval mode)."""
    from ... import rsqrt, zeros_like
    from ..module import Parameter

    linear_b = zeros_like(bn_rm) if linear_b is None else linear_b
    scale = bn_w * rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * scale.unsqueeze(-1)
    fused_b = (linear_b - bn_rm) * scale + bn_b
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of `linear` (eval mode) whose output is bn(linear(x)) for a BatchNorm1d `bn` in eval mode."""
    import copy

    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    if linear.out_features != bn.num_features:
        raise AssertionError("To fuse, linear.out_features must equal bn.num_features")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused
