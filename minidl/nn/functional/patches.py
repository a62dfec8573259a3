"""F.unfold and F.fold (torch.nn.functional's im2col and col2im): the sliding blocks of a batched image as columns,
and columns summed back into an image.

    unfold(x, kernel_size, dilation=1, padding=0, stride=1)   (N, C, H, W) -> (N, C * kh * kw, L)
    fold(cols, output_size, kernel_size, dilation=1, padding=0, stride=1)   (N, C * kh * kw, L) -> (N, C, H, W)

Both are convolutions with a fixed one-hot filter bank (filter c * kh * kw + i * kw + j copies channel c at offset
(i, j)): unfold a conv2d with it, fold the transposed convolution (which sums overlapping blocks, as col2im does).
So they run on the convolution primitives of either device and have their gradients; the products are by 0 and 1,
and run in exact fp32 (TF32 off), so the values are copied exactly.
"""
from __future__ import annotations

import numpy as np

from ... import backends
from ...autograd.tensor import Tensor
from .convolution import conv2d, conv_transpose2d


def _pair(op, name, v):
    v = (v, v) if isinstance(v, (int, np.integer)) else tuple(v)
    if len(v) != 2 or any(not isinstance(x, (int, np.integer)) or x < 0 for x in v):
        raise ValueError(f"{op}: {name} must be an int or a pair of non-negative ints, got {v!r}")
    return tuple(int(x) for x in v)


def _bank(channels, kernel, like):
    """The one-hot filters (C * kh * kw, C, kh, kw) in like's dtype and device."""
    kh, kw = kernel
    w = np.zeros((channels * kh * kw, channels, kh, kw), dtype=like.dtype)
    o = np.arange(channels * kh * kw)
    w[o, o // (kh * kw), (o % (kh * kw)) // kw, o % kw] = 1
    return Tensor(w, device=like.device)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    op = "unfold"
    if not isinstance(input, Tensor) or input.ndim not in (3, 4):
        raise ValueError(f"{op}: expected a 3-d or 4-d (batched) image, got shape {getattr(input, 'shape', None)}")
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    kernel = _pair(op, "kernel_size", kernel_size)
    if 0 in kernel:
        raise ValueError(f"{op}: kernel_size must be positive, got {kernel}")
    stride, dilation = _pair(op, "stride", stride), _pair(op, "dilation", dilation)
    with backends.cudnn.flags(allow_tf32=False):
        cols = conv2d(x, _bank(x.shape[1], kernel, x), stride=stride, padding=_pair(op, "padding", padding),
                      dilation=dilation)
    cols = cols.reshape(cols.shape[0], cols.shape[1], -1)
    return cols if batched else cols.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    op = "fold"
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        raise ValueError(f"{op}: expected a 2-d or 3-d (batched) tensor of columns, got shape "
                         f"{getattr(input, 'shape', None)}")
    batched = input.ndim == 3
    cols = input if batched else input.unsqueeze(0)
    out_h, out_w = _pair(op, "output_size", output_size)
    kernel, stride = _pair(op, "kernel_size", kernel_size), _pair(op, "stride", stride)
    dilation, padding = _pair(op, "dilation", dilation), _pair(op, "padding", padding)
    kh, kw = kernel
    if cols.shape[1] % (kh * kw):
        raise RuntimeError(f"{op}: expected size of input's dimension 1 to be divisible by the product of "
                           f"kernel_size, but got input.size(1)={cols.shape[1]} and kernel_size={kernel}")
    blocks = [(size + 2 * p - d * (k - 1) - 1) // s + 1
              for size, p, d, k, s in zip((out_h, out_w), padding, dilation, kernel, stride)]
    if blocks[0] < 1 or blocks[1] < 1 or blocks[0] * blocks[1] != cols.shape[2]:
        raise RuntimeError(f"{op}: given output_size={(out_h, out_w)}, kernel_size={kernel}, dilation={dilation}, "
                           f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match the "
                           f"calculated number of sliding blocks {blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, "
                           f"but got input.size(2)={cols.shape[2]}")
    channels = cols.shape[1] // (kh * kw)
    grid = cols.reshape(cols.shape[0], cols.shape[1], blocks[0], blocks[1])
    # the transposed convolution's natural size, then what output_size adds at the end (output_padding)
    natural = [(b - 1) * s - 2 * p + d * (k - 1) + 1 for b, s, p, d, k in zip(blocks, stride, padding, dilation, kernel)]
    extra = tuple(o - n for o, n in zip((out_h, out_w), natural))
    with backends.cudnn.flags(allow_tf32=False):
        out = conv_transpose2d(grid, _bank(channels, kernel, cols), stride=stride, padding=padding,
                               output_padding=extra, dilation=dilation)
    return out if batched else out.squeeze(0)
