"""Activations and softmax over the primitive library (activation_*, softmax_*, add_relu_*).

relu, sigmoid, tanh, softmax and log_softmax, with their Functions, live one layer down in
minidl/ops/activation.py (Tensor.relu() and friends use them too); the rest are here."""
from __future__ import annotations

from ... import primitives as P
from ..._device import get_array_module
from ...autograd.function import Function
from ...ops.activation import (  # noqa: F401 (re-exported by the package)
    Activation, Softmax, apply_activation, log_softmax, relu, sigmoid, softmax, tanh)
from ._checks import _check_float_tensor, _check_same_device


class AddReLU(Function):
    """y = max(a + b, 0) in one pass (the residual add of a ResNet block and its ReLU, fused); the
    gradient of both a and b is dy where y > 0."""

    def forward(self, a, b):
        self.y = P.add_relu_forward(a, b)
        return self.y

    def backward(self, dy):
        g = P.add_relu_backward(self.y, dy)
        return g, g


def add_relu(input, other):
    """relu(input + other) fused (a minidl extra). Tensors of one shape and dtype; anything else
    (broadcasting) runs the unfused pair."""
    _check_float_tensor("add_relu", "input", input)
    _check_float_tensor("add_relu", "other", other)
    _check_same_device("add_relu", input=input, other=other)
    if input.shape != other.shape or input.dtype != other.dtype:
        return relu(input + other)
    return AddReLU.apply(input, other)


def relu6(input, inplace=False):
    return apply_activation("relu6", input, "clipped_relu", 6.0)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return apply_activation("leaky_relu", input, "leaky_relu", negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return apply_activation("elu", input, "elu", alpha)


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return apply_activation("gelu", input, "gelu" if approximate == "none" else "gelu_tanh")




class Softplus(Function):
    """y = log(1 + exp(beta x)) / beta, and y = x where beta x > threshold (torch's linear tail);
    dy/dx = sigmoid(beta x) (1 in the tail). Computed as max(z, 0) + log1p(exp(-|z|)), which never
    exponentiates a large positive number."""

    def forward(self, x, beta=1.0, threshold=20.0):
        xp = get_array_module(x)
        z = x * x.dtype.type(beta)
        self.z, self.beta, self.tail = z, beta, z > threshold
        y = (xp.maximum(z, 0) + xp.log1p(xp.exp(-xp.abs(z)))) / x.dtype.type(beta)
        return xp.where(self.tail, x, y).astype(x.dtype)

    def backward(self, dy):
        xp = get_array_module(dy)
        sig = 1 / (1 + xp.exp(-self.z))
        return xp.where(self.tail, dy, dy * sig).astype(dy.dtype)


def softplus(input, beta=1.0, threshold=20.0):
    """torch.nn.functional.softplus: a smooth ReLU, log(1 + exp(beta x)) / beta."""
    _check_float_tensor("softplus", "input", input)
    if beta == 0:
        raise ValueError("softplus: beta must not be 0")
    return Softplus.apply(input, beta=float(beta), threshold=float(threshold))
