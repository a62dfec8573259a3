"""Dropout over the dropout primitive: the mask is regenerated from the Philox counter, never stored."""
from __future__ import annotations

from ... import random
from ... import primitives as P
from ...autograd.function import Function
from ._checks import _check_float_tensor


class Dropout(Function):
    """y = x * keep / (1 - p) with keep drawn from Philox(seed); backward regenerates the same mask
    from the seed, so nothing but two numbers is saved. `seed` is the (2,) uint64 (seed, offset) array
    this call claimed from its device's generator (minidl.random.philox_state)."""

    saves_inputs = False  # backward regenerates the mask; it reads no input array

    def forward(self, x, p=0.5, seed=0):
        self.p, self.seed = p, seed
        return P.dropout_forward(x, p, seed)

    def backward(self, dy):
        return P.dropout_backward(dy, self.p, self.seed)


def dropout(input, p=0.5, training=True, inplace=False):
    op = "dropout"
    _check_float_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    # Claim this call's counters on the device: no host value is frozen into a captured CUDA graph.
    claimed = P.philox_advance(random.philox_state(input.device), input.numel())
    return Dropout.apply(input, p=float(p), seed=claimed)
