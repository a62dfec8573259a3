"""Max, average, adaptive average pooling and max unpooling over the pooling primitives."""
from __future__ import annotations

import numpy as np

from ... import _layout
from ... import primitives as P
from ..._device import get_array_module
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ._checks import _batched, _check_float_tensor, _check_same_device


class Pooling(Function):
    """Max or average pooling; the max backward recomputes the argmax from x and y (nothing stored).
    With return_indices, max pooling also returns each maximum's flat position (no gradient)."""

    saves_output = True  # backward reads y

    def forward(self, x, desc=None, return_indices=False):
        self.x, self.desc = x, desc
        if return_indices:
            self.layout = "NCHW"  # torch's indices count positions in the channels-first order
            self.y, indices = P.max_pooling_forward_with_indices(x, desc)
            return self.y, indices
        # channels_last memory (minidl._layout): pool the NHWC view, the result stays channels_last
        cl = x.ndim in (4, 5) and not x.flags.c_contiguous and _layout.strictly_channels_last(x)
        self.layout = "NHWC" if cl else "NCHW"
        if cl:
            self.x = _layout.nhwc(x)
            self.y = P.pooling_forward(self.x, desc, layout="NHWC")
            return _layout.from_nhwc(self.y)
        self.y = P.pooling_forward(x, desc)
        return self.y

    def backward(self, dy, d_indices=None):
        if self.layout == "NHWC":
            return _layout.from_nhwc(P.pooling_backward(self.x, self.y, _layout.nhwc(dy), self.desc, layout="NHWC"))
        return P.pooling_backward(self.x, self.y, dy, self.desc)

    def backward_graph(self, dy, d_indices=None):   # (the backward as tensor ops: autograd/higher_order.py)
        """dx as an op of its own (PoolingBackward), linear in dy; on channels-first arrays (tensors are)."""
        x = self.inputs[0]
        x_arr, y_arr = ((_layout.from_nhwc(self.x), _layout.from_nhwc(self.y)) if self.layout == "NHWC"
                        else (self.x, self.y))
        dx = PoolingBackward.apply(dy.contiguous(), x=_layout.to_contiguous(x_arr), y=_layout.to_contiguous(y_arr),
                                   desc=self.desc)
        # max pooling's dx depends on x only through the argmax: a zero gradient, recorded as torch records it
        return dx + x * 0 if self.desc.mode == "max" else dx


class PoolingBackward(Function):
    """dx = pooling_backward(x, y, dy) as an op (Pooling's backward_graph records it), with x and y constants.
    It is linear in dy, and its own gradient is the adjoint: average pooling's is pooling_forward of g; max
    pooling's takes, for each window, g at the window's argmax (max_pooling_forward_with_indices's positions)."""

    def forward(self, dy, x=None, y=None, desc=None):
        self.x, self.y, self.desc = x, y, desc
        return P.pooling_backward(x, y, dy, desc)

    def backward(self, g):
        g = _layout.to_contiguous(g)
        if self.desc.mode != "max":
            return P.pooling_forward(g, self.desc)
        _, indices = P.max_pooling_forward_with_indices(self.x, self.desc)
        xp = get_array_module(g)
        N, C = g.shape[:2]
        return xp.take_along_axis(g.reshape(N, C, -1), indices.reshape(N, C, -1), axis=2).reshape(indices.shape)

    def backward_graph(self, g):
        if self.desc.mode == "max":   # (the gather at the argmax as a tensor op)
            _, indices = P.max_pooling_forward_with_indices(self.x, self.desc)
            N, C = g.shape[:2]
            return g.contiguous().reshape(N, C, -1).gather(2, Tensor._make(indices.reshape(N, C, -1))).reshape(
                indices.shape)
        return Pooling.apply(g.contiguous(), desc=self.desc)


def _pool(op, dims, mode, input, kernel_size, stride, padding, ceil_mode, dilation=1, return_indices=False):
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "input", x)
    if stride is None or (not isinstance(stride, int) and len(stride) == 0):
        stride = None  # the kernel size, as PyTorch
    desc = _descriptor(op, mode, kernel_size, stride, padding, ceil_mode, dims, dilation)
    if x.numel() == 0:
        # An empty batch (or no channels): an empty result of the pooled shape, as torch.
        shape = P.pooling_output_shape(x.shape, desc)
        if any(s < 1 for s in shape[2:]):
            raise ValueError(f"{op}: input {input.shape} is too small for kernel {desc.kernel_size}")
        y = x.reshape(-1)[:0].reshape(shape)  # still on the tape: its gradient is empty too
        out = (y, Tensor._make(get_array_module(x._data).zeros(shape, dtype=np.int64))) if return_indices else y
    else:
        out = Pooling.apply(x, desc=desc, return_indices=return_indices)
    if unbatched:
        return tuple(o.squeeze(0) for o in out) if return_indices else out.squeeze(0)
    return out


_DESCRIPTORS: dict = {}   # (mode, sizes..., dims) -> PoolingDescriptor: a layer's arguments, checked and described once


def _descriptor(op, mode, kernel_size, stride, padding, ceil_mode, dims, dilation):
    """The PoolingDescriptor of these arguments (made and checked on their first use: a layer passes the same ones
    every step). Only plain ints, tuples of ints and a bool are looked up; anything else is described, and
    checked, at every call (2.0 == 2 as a key, but PoolingDescriptor refuses a float)."""
    key = (mode, kernel_size, stride, padding, ceil_mode, dims, dilation)
    plain = type(ceil_mode) is bool and _plain(kernel_size) and _plain(stride) and _plain(padding) and _plain(dilation)
    desc = _DESCRIPTORS.get(key) if plain else None
    if desc is None:
        try:
            desc = P.PoolingDescriptor(mode=mode, kernel_size=kernel_size, stride=stride, padding=padding,
                                       ceil_mode=ceil_mode, spatial_dims=dims, dilation=dilation)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{op}: {e}") from None
        if plain and len(_DESCRIPTORS) < 1024:
            _DESCRIPTORS[key] = desc
    return desc


def _plain(v) -> bool:
    """None, an int, or a tuple of ints (exactly: not bool, not float)."""
    if v is None or type(v) is int:
        return True
    if type(v) is not tuple:
        return False
    for e in v:
        if type(e) is not int:
            return False
    return True


def _max_pool(op, dims, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    return _pool(op, dims, "max", input, kernel_size, stride, padding, ceil_mode, dilation, bool(return_indices))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


class MaxUnpooling(Function):
    """Scatter each value to its recorded position (indices from max_pool(return_indices=True));
    backward gathers the gradient from the same positions."""

    def forward(self, y, indices=None, x_spatial=None):
        self.indices = indices
        return P.max_unpooling_forward(y, indices, x_spatial)

    def backward(self, dx):
        return P.max_unpooling_backward(dx, self.indices)


def _max_unpool(op, dims, input, indices, kernel_size, stride, padding, output_size):
    """torch.nn.functional.max_unpool{1,2,3}d: the inverse of max pooling with return_indices."""
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "input", x)
    if not isinstance(indices, Tensor) or indices.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be an integer tensor (from max_pool{dims}d(return_indices=True))")
    idx = indices.reshape((1,) + indices.shape) if unbatched else indices
    if idx.shape != x.shape:
        raise ValueError(f"{op}: indices {indices.shape} must have the shape of input {input.shape}")
    kernel = P._common.as_tuple(op, "kernel_size", kernel_size, dims, minimum=1)
    stride = kernel if stride is None else P._common.as_tuple(op, "stride", stride, dims, minimum=1)
    padding = P._common.as_tuple(op, "padding", padding, dims, minimum=0)
    default = tuple((x.shape[2 + d] - 1) * stride[d] - 2 * padding[d] + kernel[d] for d in range(dims))
    if output_size is None:
        size = default
    else:
        size = tuple(int(s) for s in output_size)
        if len(size) == dims + 2:
            size = size[2:]
        elif len(size) == dims + 1:
            size = size[1:]
        if len(size) != dims:
            raise ValueError(f"{op}: output_size {tuple(output_size)} must give {dims} spatial sizes")
        for d in range(dims):
            lo, hi = default[d] - stride[d], default[d] + stride[d]
            if not lo < size[d] < hi:
                raise ValueError(f"{op}: output_size {tuple(output_size)} must be within ({lo}, {hi}) in dim {d}, "
                                 f"around the default {default}")
    _check_same_device(op, input=x, indices=idx)
    y = MaxUnpooling.apply(x, indices=idx._data, x_spatial=size)
    return y.squeeze(0) if unbatched else y


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool1d", 1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool2d", 2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool3d", 3, input, indices, kernel_size, stride, padding, output_size)


def _window_counts(x_shape, desc):
    """(1, 1, *out) float64: cells of each window up to the end of the right padding (the divisor
    of count_include_pad=True), an outer product over dims (see primitives/cpu/pooling.py)."""
    out = P.pooling_output_shape(x_shape, desc)[2:]
    counts = np.ones((1, 1) + tuple(out))
    for d, (L, n, k, s, p) in enumerate(zip(x_shape[2:], out, desc.kernel_size, desc.stride, desc.padding)):
        start = np.arange(n) * s - p
        shape = [1] * counts.ndim
        shape[2 + d] = n
        counts = counts * (np.minimum(start + k, L + p) - start).reshape(shape)
    return counts


def _avg_pool(op, dims, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    if divisor_override is None:
        mode = "avg_include_pad" if count_include_pad else "avg_exclude_pad"
        return _pool(op, dims, mode, input, kernel_size, stride, padding, ceil_mode)
    if isinstance(divisor_override, bool) or not isinstance(divisor_override, (int, np.integer)) or divisor_override == 0:
        raise ValueError(f"{op}: divisor_override must be a nonzero int, got {divisor_override!r}")
    # sum / divisor: the padded-window mean times its cell count (padding adds zeros) is the window's
    # sum, whatever count_include_pad says (torch ignores it when divisor_override is given).
    y = _pool(op, dims, "avg_include_pad", input, kernel_size, stride, padding, ceil_mode)
    x_shape = input.shape if input.ndim == dims + 2 else (1,) + input.shape
    desc = P.PoolingDescriptor(mode="avg_include_pad", kernel_size=kernel_size,
                               stride=None if stride is None or (not isinstance(stride, int) and len(stride) == 0) else stride,
                               padding=padding, ceil_mode=ceil_mode, spatial_dims=dims)
    scale = _window_counts(x_shape, desc) / float(divisor_override)
    if input.ndim != dims + 2:
        scale = scale[0]
    xp = get_array_module(y._data)
    return y * Tensor._make(xp.asarray(scale, dtype=y.dtype))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


class AdaptiveAvgPooling(Function):
    def forward(self, x, output_size=None):
        self.x_shape, self.output_size = x.shape, output_size
        return P.adaptive_avg_pooling_forward(x, output_size)

    def backward(self, dy):
        return P.adaptive_avg_pooling_backward(dy, self.x_shape, self.output_size)

    def backward_graph(self, dy):   # (the backward as tensor ops: autograd/higher_order.py)
        return AdaptiveAvgPoolingBackward.apply(dy.contiguous(), x_shape=self.x_shape, output_size=self.output_size)


class AdaptiveAvgPoolingBackward(Function):
    """AdaptiveAvgPooling's dx as an op: linear in dy, its gradient is the adaptive average pooling of g."""

    def forward(self, dy, x_shape=None, output_size=None):
        self.output_size = output_size
        return P.adaptive_avg_pooling_backward(dy, x_shape, output_size)

    def backward(self, g):
        return P.adaptive_avg_pooling_forward(_layout.to_contiguous(g), self.output_size)

    def backward_graph(self, g):
        return AdaptiveAvgPooling.apply(g.contiguous(), output_size=self.output_size)


def _adaptive_avg_pool(op, dims, input, output_size):
    x, unbatched = _batched(op, input, dims)
    sizes = (output_size,) * dims if isinstance(output_size, (int, type(None))) else tuple(output_size)
    if len(sizes) != dims:
        raise ValueError(f"{op}: output_size must be an int or {dims} values, got {output_size!r}")
    # None keeps that dim's input size, as PyTorch.
    sizes = tuple(x.shape[2 + i] if s is None else int(s) for i, s in enumerate(sizes))
    y = AdaptiveAvgPooling.apply(x, output_size=sizes)
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg_pool("adaptive_avg_pool1d", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg_pool("adaptive_avg_pool2d", 2, input, output_size)


def adaptive_avg_pool3d(input, output_size):
    return _adaptive_avg_pool("adaptive_avg_pool3d", 3, input, output_size)
