"""pad (one of torch.nn.functional's "vision functions")."""
from __future__ import annotations

from ..._device import get_array_module
from ...autograd.function import Function
from ._checks import _check_tensor


class Pad(Function):
    """Constant padding; the gradient is the slice of dy that covers the original input."""

    def forward(self, x, widths=None, value=0.0):
        xp = get_array_module(x)
        self.slices = tuple(slice(before, before + n) for (before, _), n in zip(widths, x.shape))
        return xp.pad(x, widths, mode="constant", constant_values=value)

    def backward(self, dy):
        return dy[self.slices].copy()


def pad(input, pad, mode="constant", value=None):
    """pad = (left_last, right_last, left_second_last, right_second_last, ...), as torch.nn.functional.pad."""
    op = "pad"
    _check_tensor(op, "input", input)
    if mode != "constant":
        raise NotImplementedError(f"{op}: only mode='constant' is implemented in minidl, got {mode!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"{op}: pad {pad} must have an even length of at most 2 * ndim for input {input.shape}")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if any(p < 0 for p in pad):
        # A negative pad crops, as torch: slice first, then pad by the positive amounts.
        crop = []
        for (before, after), n in zip(widths, input.shape):
            start, stop = max(-before, 0), n - max(-after, 0)
            if stop - start + max(before, 0) + max(after, 0) < 0:
                raise ValueError(f"{op}: pad {pad} crops more than input {input.shape} has")
            crop.append(slice(start, max(stop, start)))
        input = input[tuple(crop)]
        widths = [(max(b, 0), max(a, 0)) for b, a in widths]
    return Pad.apply(input, widths=tuple(widths), value=0.0 if value is None else value)
