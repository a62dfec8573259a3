"""pad (one of torch.nn.functional's "vision functions")."""
from __future__ import annotations

import numpy as np

from ..._device import get_array_module
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ._checks import _check_tensor


class Pad(Function):
    """Constant padding; the gradient is the slice of dy that covers the original input."""

    def forward(self, x, widths=None, value=0.0):
        xp = get_array_module(x)
        self.slices = tuple(slice(before, before + n) for (before, _), n in zip(widths, x.shape))
        return xp.pad(x, widths, mode="constant", constant_values=value)

    def backward(self, dy):
        return dy[self.slices].copy()


def _source_positions(mode, n, before, after):
    """For each position of the padded dim (negative pads crop), the input position it copies."""
    if mode == "circular":   # crop first (negative pads), then wrap around what is left, as torch
        start, stop = max(-before, 0), n - max(-after, 0)
        if stop <= start:
            if max(before, 0) or max(after, 0):
                raise ValueError(f"pad: mode='circular' crops a dim of size {n} to nothing by ({before}, {after}), "
                                 "then has nothing to wrap around")
            return np.zeros(0, dtype=np.int64)
        return start + np.arange(-max(before, 0), stop - start + max(after, 0)) % (stop - start)
    j = np.arange(-before, n + after)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    j = np.abs(j)                         # reflect: mirror at both edges without repeating them
    return np.where(j >= n, 2 * (n - 1) - j, j)


def pad(input, pad, mode="constant", value=None):
    """pad = (left_last, right_last, left_second_last, right_second_last, ...), as torch.nn.functional.pad.

    mode 'constant' (value, default 0) pads any dims. 'reflect' (mirror without repeating the edge),
    'replicate' (repeat the edge) and 'circular' (wrap around) pad the last 1, 2 or 3 dims of a
    batched or unbatched input ((N,) C + spatial), as torch; a negative pad crops. Their gradient adds
    up over every place an input element was copied to."""
    op = "pad"
    _check_tensor(op, "input", input)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"{op}: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"{op}: pad {pad} must have an even length of at most 2 * ndim for input {input.shape}")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode != "constant":
        if value not in (None, 0):
            raise ValueError(f"{op}: value={value} applies to mode='constant' only, got mode={mode!r}")
        k = len(pad) // 2
        if not 1 <= k <= 3 or input.ndim not in (k + 1, k + 2):
            raise NotImplementedError(
                f"{op}: mode={mode!r} pads the last 1, 2 or 3 dims of an (N,) C + spatial input (as torch): "
                f"{k} padded dims need a {k + 1}-D or {k + 2}-D input, got {input.shape}")
        out = input
        for d in range(input.ndim - k, input.ndim):
            (before, after), n = widths[d], input.shape[d]
            if before == after == 0:
                continue
            limit = n if mode == "circular" else n - 1
            if mode != "replicate" and (before > limit or after > limit):
                raise ValueError(f"{op}: mode={mode!r} pads dim {d} of size {n} by ({before}, {after}): each must be "
                                 f"at most {limit} ({'the size' if mode == 'circular' else 'size - 1'})")
            if n == 0 or n + before + after < 0:
                raise ValueError(f"{op}: mode={mode!r} cannot pad dim {d} of size {n} by ({before}, {after})")
            idx = Tensor._make(_source_positions(mode, n, before, after)).to(input.device)
            out = out.index_select(d, idx)
        return out
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
