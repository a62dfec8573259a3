"""Activations and softmax over the primitive library (activation_*, softmax_*, add_relu_*).

relu, sigmoid, tanh, softmax and log_softmax, with their Functions, live one layer down in
minidl/autograd/activations.py (Tensor.relu() and friends use them too); the rest are here."""
from __future__ import annotations

from ... import primitives as P
from ...autograd.function import Function
from ...autograd.activations import (  # noqa: F401 (re-exported by the package)
    Activation, Softmax, _activation, log_softmax, relu, sigmoid, softmax, tanh)
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
    return _activation("relu6", input, "clipped_relu", 6.0)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _activation("leaky_relu", input, "leaky_relu", negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _activation("elu", input, "elu", alpha)


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation("gelu", input, "gelu" if approximate == "none" else "gelu_tanh")


