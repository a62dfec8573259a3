"""The lazy layers (torch's nn.LazyConv2d & co.): the input size is left out of the constructor and read from the
first input. Until then the parameters exist but are empty (in torch, UninitializedParameter); the first forward
fills them in place (the same Parameter objects, so an optimizer made before it steps the real ones), initialises
them as the layer's reset_parameters does, and the module becomes the ordinary layer (torch's cls_to_become).
nn.LazyLinear is in layers/linear.py (it came first); d2l.ai's models are written with these.
"""
from __future__ import annotations

from ...autograd.function import no_grad
from ..module import mark_uninitialized, materialize_parameters
from .composite import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .normalization import BatchNorm1d, BatchNorm2d, BatchNorm3d


class _Lazy:
    """What the lazy layers share: initialize_parameters(input) from the first input, then the class swap."""

    cls_to_become = None

    def has_uninitialized_params(self) -> bool:
        return True   # (a materialized module is the ordinary class, which has no such method)

    def _input_channels(self, input) -> int:
        if input.ndim < 2:
            raise ValueError(f"{type(self).__name__}: expected an input with a channel dim (N, C, ...), got shape "
                             f"{tuple(input.shape)}")
        return input.shape[1]

    def forward(self, input, *args, **kwargs):
        with no_grad():
            self.initialize_parameters(input)
        materialize_parameters(self)
        self.__class__ = self.cls_to_become
        return self.forward(input, *args, **kwargs)


class _LazyConvolution(_Lazy):
    """What the lazy convolutions and transposed convolutions share: no initialisation before the first input,
    then the weight made from the input's channels."""

    def reset_parameters(self):
        if self.in_channels:   # (nothing to initialise before the first input)
            super().reset_parameters()

    def _materialize(self, input, leading):
        """A convolution's weight from the input's channels: leading(C) + kernel_size, initialised."""
        self.in_channels = self._input_channels(input)
        if self.in_channels % self.groups:
            raise ValueError(f"{type(self).__name__}: the input's {self.in_channels} channels are not divisible by "
                             f"groups ({self.groups})")
        self.weight.data = self.weight.new_empty(leading(self.in_channels) + tuple(self.kernel_size))
        self.reset_parameters()


class _LazyConv(_LazyConvolution):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        self.cls_to_become.__init__(self, groups, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                                    padding_mode, device, dtype)   # (a placeholder input size, replaced below)
        self.in_channels = 0
        self.weight.data = self.weight.new_empty((out_channels, 0) + tuple(self.kernel_size))
        mark_uninitialized(self)

    def initialize_parameters(self, input):
        self._materialize(input, lambda c: (self.out_channels, c // self.groups))


class _LazyConvTranspose(_LazyConvolution):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True,
                 dilation=1, padding_mode="zeros", device=None, dtype=None):
        self.cls_to_become.__init__(self, groups, out_channels, kernel_size, stride, padding, output_padding, groups,
                                    bias, dilation, padding_mode, device, dtype)
        self.in_channels = 0
        self.weight.data = self.weight.new_empty((0, out_channels // groups) + tuple(self.kernel_size))
        mark_uninitialized(self)

    def initialize_parameters(self, input):
        self._materialize(input, lambda c: (c, self.out_channels // self.groups))


class _LazyNorm(_Lazy):
    # (torch's lazy instance norms default to affine=True, track_running_stats=True too, unlike InstanceNorm*d)
    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None):
        self.cls_to_become.__init__(self, 0, eps, momentum, affine, track_running_stats, device, dtype)
        mark_uninitialized(self)

    def initialize_parameters(self, input):
        c = self.num_features = self._input_channels(input)
        for name, value in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
            t = getattr(self, name)
            if t is not None:
                t.data = t.new_full((c,), value)


def _lazy(name, mixin, base):
    return type(name, (mixin, base), {"cls_to_become": base, "__module__": __name__,
                                      "__doc__": f"nn.{name}: nn.{base.__name__} with its input channels read from the "
                                                 "first input."})


LazyConv1d, LazyConv2d, LazyConv3d = (_lazy(f"LazyConv{n}d", _LazyConv, b) for n, b in
                                      ((1, Conv1d), (2, Conv2d), (3, Conv3d)))
LazyConvTranspose1d, LazyConvTranspose2d, LazyConvTranspose3d = (
    _lazy(f"LazyConvTranspose{n}d", _LazyConvTranspose, b) for n, b in
    ((1, ConvTranspose1d), (2, ConvTranspose2d), (3, ConvTranspose3d)))
LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d = (_lazy(f"LazyBatchNorm{n}d", _LazyNorm, b) for n, b in
                                                     ((1, BatchNorm1d), (2, BatchNorm2d), (3, BatchNorm3d)))
LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d = (
    _lazy(f"LazyInstanceNorm{n}d", _LazyNorm, b) for n, b in
    ((1, InstanceNorm1d), (2, InstanceNorm2d), (3, InstanceNorm3d)))
