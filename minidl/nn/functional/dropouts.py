"""Dropout over the dropout primitive: the mask is regenerated from the Philox counter, never stored."""
from __future__ import annotations

from ... import random
from ... import _layout
from ... import primitives as P
from ...autograd.function import Function
from ...ops.conversion import Relayout
from ._checks import _check_float_tensor


class Dropout(Function):
    """y = x * keep / (1 - p) with keep drawn from Philox(seed); backward regenerates the same mask
    from the seed, so nothing but two numbers is saved. `generator`: the (2,) uint64 (seed, offset) state of the
    input's device (minidl.random.philox_state), from which the forward claims its counters (on the GPU in the
    dropout launch itself); `seed` is then the claimed (seed, offset), kept for the backward. (A call with `seed`
    and no generator draws from that seed: backward_graph's.)"""

    saves_inputs = False  # backward regenerates the mask; it reads no input array

    def forward(self, x, p=0.5, seed=0, generator=None):
        self.p, self.seed = p, seed
        # channels_last memory: drop over the NHWC view (the mask is a function of the memory position, so
        # the backward regenerates it on the NHWC view of dy)
        self.cl = x.ndim in (4, 5) and not x.flags.c_contiguous and _layout.strictly_channels_last(x)
        if generator is not None:
            y, self.seed = P.dropout_forward(_layout.nhwc(x) if self.cl else x, p, generator, claim=True)
            return _layout.from_nhwc(y) if self.cl else y
        if self.cl:
            return _layout.from_nhwc(P.dropout_forward(_layout.nhwc(x), p, seed))
        return P.dropout_forward(x, p, seed)

    def backward(self, dy):
        if self.cl:
            return _layout.from_nhwc(P.dropout_backward(_layout.nhwc(dy), self.p, self.seed))
        return P.dropout_backward(dy, self.p, self.seed)

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        """dx = dy * keep / (1 - p) is this op again, on dy in x's memory format (the mask follows the memory
        position) with the same seed: the same mask."""
        return Dropout.apply(Relayout.apply(dy, channels_last=self.cl), p=self.p, seed=self.seed)


def dropout(input, p=0.5, training=True, inplace=False):
    op = "dropout"
    _check_float_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    # The call claims its counters from the device's generator on the device (in the dropout launch on the GPU):
    # no host value is frozen into a captured CUDA graph.
    return Dropout.apply(input, p=float(p), generator=random.philox_state_of(input._data))


def _feature_dropout(op, input, p, training, spatial):
    """Channel-wise ("feature") dropout: each (sample, channel) plane is zeroed with probability p and the
    rest scaled by 1/(1-p), as torch.nn.functional.dropout{1,2,3}d. The mask comes from dropout itself,
    drawn over a tensor of ones of shape (N, C, 1, ...) and broadcast, so it uses the same Philox stream
    and the gradient is the same mask times dy."""
    _check_float_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    if input.ndim not in (spatial + 1, spatial + 2):
        if spatial == 2 and input.ndim == 2:   # torch: deprecated; each element is its own "channel"
            return dropout(input, p, training)
        raise ValueError(f"{op}: expected a {spatial + 2}-D (N, C, {spatial} spatial) or {spatial + 1}-D unbatched "
                         f"input, got shape {tuple(input.shape)}")
    if not training or p == 0.0:
        return input
    from ...ops.creation import ones
    if spatial == 2 and input.ndim == 3:
        # torch reads a 3-D input to dropout2d as (N, C, L) and drops whole (n, c) rows (with a warning
        # that this will change); minidl does the same, so programs get torch's result.
        planes, spatial = input.shape[:2], 1
    else:
        planes = input.shape[:input.ndim - spatial]
    mask = dropout(ones(*planes, *([1] * spatial), dtype=input.dtype, device=input.device), p, True)
    return input * mask


def dropout1d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout1d", input, p, training, 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout2d", input, p, training, 2)


def dropout3d(input, p=0.5, training=True, inplace=False):
    return _feature_dropout("dropout3d", input, p, training, 3)
