"""Linear (fully connected) layer and the shape-only layers Identity, Flatten, Unflatten."""
from __future__ import annotations

import math

from .. import functional as F
from .. import init
from ..._device import Device
from ...autograd.function import no_grad
from ...ops import normalize_dim
from ...ops.creation import empty
from ..module import Module, Parameter, mark_uninitialized, materialize_parameters


def _factory(device, dtype):
    return dict(device=None if device is None else Device(device), dtype=dtype)


class Identity(Module):
    """Returns its input unchanged (any constructor arguments are ignored, as in PyTorch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


def _weight_and_bias(module, weight_shape, bias, device, dtype):
    """module.weight of weight_shape and module.bias of its first size (or a registered None), then the module's
    reset_parameters() (Linear's and Bilinear's constructors)."""
    module.weight = Parameter(empty(*weight_shape, **_factory(device, dtype)))
    if bias:
        module.bias = Parameter(empty(weight_shape[0], **_factory(device, dtype)))
    else:
        module.register_parameter("bias", None)
    module.reset_parameters()


class Bilinear(Module):
    """y = x1^T A x2 + b: x1 (..., in1_features), x2 (..., in2_features) -> (..., out_features). weight
    (out_features, in1_features, in2_features) and bias start as torch's: U(-1/sqrt(in1), 1/sqrt(in1))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        for name, v in (("in1_features", in1_features), ("in2_features", in2_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Bilinear: {name} must be an int >= 0, got {v!r}")
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        _weight_and_bias(self, (out_features, in1_features, in2_features), bias, device, dtype)

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.weight.shape[1]) if self.weight.shape[1] else 0
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class Linear(Module):
    """y = x W^T + b.  x (..., in_features) -> y (..., out_features).

    weight (out_features, in_features) and bias (out_features,) start as in PyTorch: kaiming_uniform_
    with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), and the bias U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"Linear: {name} must be an int, got {type(v).__name__} {v!r}")
        if in_features < 0 or out_features < 0:
            raise ValueError(f"Linear: in_features ({in_features}) and out_features ({out_features}) must be >= 0")
        self.in_features, self.out_features = in_features, out_features
        _weight_and_bias(self, (out_features, in_features), bias, device, dtype)

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        if input.ndim < 1 or input.shape[-1] != self.in_features:
            raise ValueError(
                f"Linear: expected input with last dim in_features={self.in_features}, got input of shape {input.shape}"
            )
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Splits dim `dim` into `unflattened_size`: Unflatten(1, (C, H, W)) turns (N, C*H*W) into (N, C, H, W)."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        d = normalize_dim(self.dim, input.ndim, "Unflatten")
        known = [s for s in self.unflattened_size if s != -1]
        size = 1
        for s in known:
            size *= s
        if (-1 not in self.unflattened_size and size != input.shape[d]) or (size and input.shape[d] % size):
            raise ValueError(
                f"Unflatten: dim {self.dim} of input {input.shape} has size {input.shape[d]}, which cannot be "
                f"unflattened to {self.unflattened_size}"
            )
        return input.reshape(input.shape[:d] + self.unflattened_size + input.shape[d + 1 :])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"

class LazyLinear(Linear):
    """nn.LazyLinear(out_features): in_features is taken from the first input. Until then the weight is an empty
    (out_features, 0) Parameter, which the first forward fills in place and initialises as Linear does (the same
    Parameter object, so an optimizer made before it steps the real weight, as torch's UninitializedParameter
    allows); then the module is a Linear (torch's cls_to_become)."""

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__(0, out_features, bias, device, dtype)
        mark_uninitialized(self)   # (torch's UninitializedParameter until the first input)

    def reset_parameters(self):
        if self.in_features:   # (nothing to initialise before the first input)
            super().reset_parameters()

    def forward(self, input):
        if input.ndim < 1:
            raise ValueError(f"LazyLinear: expected an input with a feature dim, got shape {tuple(input.shape)}")
        with no_grad():
            self.in_features = input.shape[-1]
            self.weight.data = self.weight.new_empty((self.out_features, self.in_features))
            self.reset_parameters()
        materialize_parameters(self)
        self.__class__ = Linear
        return Linear.forward(self, input)
