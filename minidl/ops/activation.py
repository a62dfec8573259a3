"""Activations and softmax over the primitive library: relu, sigmoid, tanh, softmax, log_softmax.

Their autograd Functions (forward and backward over activation_forward / activation_backward and
softmax_forward / softmax_backward) live in minidl.ops, not in nn, because Tensor has them as methods
(x.relu(), x.softmax(dim)) and the ops never reach up into nn. minidl.nn.functional
re-exports these and adds the other activations (relu6, leaky_relu, elu, gelu, add_relu).
"""
from __future__ import annotations

import math

from .. import _layout
from .. import primitives as P
from ..amp import autocast_mode as _amp
from ._checks import check_float_tensor
from ._dims import normalize_dim
from ..autograd.function import Function


_SQRT_HALF, _INV_SQRT_2PI, _SQRT_2_OVER_PI = math.sqrt(0.5), 1 / math.sqrt(2 * math.pi), math.sqrt(2 / math.pi)


class Activation(Function):
    """y = f(x) elementwise, f chosen by an ActivationDescriptor; backward dx = dy * f'(x)."""

    saves_output = True  # backward reads y

    def forward(self, x, desc=None):
        self.desc = desc
        # channels_last memory (minidl._layout): the primitive runs on the NHWC view, the result stays NHWC
        self.cl = x.ndim in (4, 5) and not x.flags.c_contiguous and _layout.strictly_channels_last(x)
        self.x = _layout.nhwc(x) if self.cl else x
        self.y = P.activation_forward(self.x, desc)
        return _layout.from_nhwc(self.y) if self.cl else self.y

    def backward(self, dy):
        if self.cl:
            return _layout.from_nhwc(P.activation_backward(self.x, self.y, _layout.nhwc(dy), self.desc))
        return P.activation_backward(self.x, self.y, dy, self.desc)

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        x, mode, coef = self.inputs[0], self.desc.mode, self.desc.coef
        zero = dy.new_zeros(())
        # A piecewise-linear activation's dx depends on x only through its mask: the derivative in x is zero, and
        # torch records it (x * 0 here) so that x's producers (a bias before a ReLU in a WGAN-GP critic) receive a
        # zero gradient, not None (which an optimizer with momentum would treat differently).
        if mode == "relu":
            return dy.where(x > 0, zero) + x * 0
        if mode == "leaky_relu":
            return dy.where(x > 0, dy * coef) + x * 0
        if mode == "elu":
            return dy.where(x > 0, dy * coef * x.exp())
        if mode == "clipped_relu":
            return dy.where((x > 0) & (x < coef), zero) + x * 0
        if mode == "sigmoid":
            y = x.sigmoid()
            return dy * y * (1 - y)
        if mode == "tanh":
            y = x.tanh()
            return dy * (1 - y * y)
        if mode == "gelu":       # d/dx x Phi(x) = Phi(x) + x phi(x)
            cdf = 0.5 * (1 + (x * _SQRT_HALF).erf())
            return dy * (cdf + x * (x * x * -0.5).exp() * _INV_SQRT_2PI)
        if mode == "gelu_tanh":  # y = x (1 + t) / 2, t = tanh(k (x + 0.044715 x^3))
            t = ((x + 0.044715 * x * x * x) * _SQRT_2_OVER_PI).tanh()
            return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x))
        raise NotImplementedError(f"create_graph=True through {mode}: its derivative is not written as tensor ops in "
                                  "minidl (relu, leaky_relu, elu, hardtanh/relu6, sigmoid, tanh and gelu are)")


_DESCRIPTORS: dict = {}   # (mode, coef) -> its ActivationDescriptor, made (and checked) once


def apply_activation(op, input, mode, coef=None):
    check_float_tensor(op, "input", input)
    plain = coef is None or type(coef) in (int, float)   # (anything else is described, and checked, each call)
    desc = _DESCRIPTORS.get((mode, coef)) if plain else None
    if desc is None:
        desc = P.ActivationDescriptor(mode, coef)
        if plain and len(_DESCRIPTORS) < 256:   # (a coef swept over many values is described each call instead)
            _DESCRIPTORS[(mode, coef)] = desc
    return Activation.apply(input, desc=desc)


def relu(input, inplace=False):
    return apply_activation("relu", input, "relu")


def sigmoid(input):
    return apply_activation("sigmoid", input, "sigmoid")


def tanh(input):
    return apply_activation("tanh", input, "tanh")


class Softmax(Function):
    """softmax ("accurate") or log-softmax ("log") along one axis; backward needs only the output."""

    saves_inputs, saves_output = False, True  # backward reads y only

    def forward(self, x, axis=-1, algorithm="accurate"):
        self.axis, self.algorithm = axis, algorithm
        self.y = P.softmax_forward(x, axis=axis, algorithm=algorithm)
        return self.y

    def backward(self, dy):
        return P.softmax_backward(self.y, dy, axis=self.axis, algorithm=self.algorithm)

    def backward_graph(self, dy):
        x = self.inputs[0]
        if self.algorithm == "log":
            return dy - x.log_softmax(self.axis).exp() * dy.sum(self.axis, keepdim=True)
        y = x.softmax(self.axis)
        return y * (dy - (dy * y).sum(self.axis, keepdim=True))


def _softmax_dim(op, input, dim):
    check_float_tensor(op, "input", input)
    if dim is None:
        # PyTorch's legacy rule for an omitted dim: 0 for 0-, 1- and 3-D inputs, else 1. A guess, so
        # warned about as torch does: on a (batch, classes) input it is right, on a 3-D one it is dim 0.
        dim = 0 if input.ndim in (0, 1, 3) else 1
        import warnings

        warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call to include "
                      f"dim=X as an argument (for this {input.ndim}-D input it chose dim={dim}).", stacklevel=4)
    return normalize_dim(dim, input.ndim, op)


def softmax(input, dim=None, dtype=None):
    return _softmax("softmax", "accurate", input, dim, dtype)


def log_softmax(input, dim=None, dtype=None):
    return _softmax("log_softmax", "log", input, dim, dtype)


def _softmax(op, algorithm, input, dim, dtype):
    """softmax / log_softmax (the Softmax primitive's "accurate" / "log" algorithms) along dim."""
    if _amp.regions:
        (input,) = _amp.cast_inputs(op, input)
    dim = _softmax_dim(op, input, dim)
    if dtype is not None:
        input = input.type(dtype)
    if input.ndim == 0:
        return Softmax.apply(input.reshape(1), axis=0, algorithm=algorithm).reshape(())
    if input.numel() == 0:  # nothing to normalise: an empty result of the same shape (torch)
        return input * 1
    return Softmax.apply(input, axis=dim, algorithm=algorithm)
