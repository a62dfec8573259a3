"""Convolution layers Conv1d / Conv2d / Conv3d (PyTorch's arguments, plus `algo` and `layout`).

The weight is always stored as PyTorch stores it, (out_channels, in_channels/groups, *kernel_size),
and the layer always takes and returns channels-first tensors (N, C, *spatial), so state dicts and
code move between PyTorch and minidl unchanged. Two minidl extras choose what runs underneath:

* `algo`: "auto" (the policy: minidl.backends.cudnn.benchmark / deterministic, or the primitive
  library's heuristic), or one algorithm by name: "direct", "im2col_gemm", "winograd", "fft" (CPU and
  GPU), "implicit_gemm", "implicit_precomp_gemm", "implicit_gemm_tc" (GPU; tensor cores, used for
  float32 when minidl.backends.cudnn.allow_tf32 is set and for float16 / bfloat16).
* `layout`: "NCHW" runs the channels-first kernels on the tensors as they are; "NHWC" transposes the
  input to (N, *spatial, C) and the filter to (K, *kernel, C/groups) (cuDNN's KRSC), runs the
  channels-last kernels, and transposes the output back. The numbers are the same; what changes is
  the memory order the kernels read (channels-last suits tensor-core GEMMs) and the two extra copies.
"""
from __future__ import annotations

import math

from ..._device import Device
from ...ops.creation import empty
from ... import primitives as P
from ...primitives import as_tuple, normalize_layout
from ..functional.convolution import conv_nd
from .. import init
from ..module import Module, Parameter

_ALGOS = ("auto", "direct", "im2col_gemm", "implicit_gemm", "implicit_precomp_gemm", "winograd", "implicit_gemm_tc",
          "fft")


class _ConvNd(Module):
    _dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, *, algo="auto", layout="NCHW"):
        super().__init__()
        name, n = type(self).__name__, self._dims
        if padding_mode != "zeros":
            raise NotImplementedError(f"{name}: only padding_mode='zeros' is implemented, got {padding_mode!r}")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})"
            )
        if algo not in _ALGOS:
            raise ValueError(f"{name}: algo must be one of {_ALGOS}, got {algo!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = as_tuple(name, "kernel_size", kernel_size, n, minimum=1)
        self.stride = as_tuple(name, "stride", stride, n, minimum=1)
        self.dilation = as_tuple(name, "dilation", dilation, n, minimum=1)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"{name}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
            if padding == "same" and any(s != 1 for s in self.stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = as_tuple(name, "padding", padding, n, minimum=0)
        self.padding_mode, self.algo = padding_mode, algo
        self.layout = normalize_layout(name, layout)
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size, **factory))
        if bias:
            self.bias = Parameter(empty(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        # The layer owns its convolution: the descriptor (made once, here) and one ConvolutionPlan per
        # input shape (problem described and algorithms resolved on first use, then reused).
        self._desc = None if isinstance(self.padding, str) else P.ConvolutionDescriptor(
            padding=self.padding, stride=self.stride, dilation=self.dilation, groups=groups, spatial_dims=n)
        self._conv_plans: dict = {}
        self.channels_last = False  # set by Module.to(memory_format=channels_last): NHWC kernels and results
        self.reset_parameters()

    def __getstate__(self):   # pickle / deepcopy: the plans are per-device caches, made again on first use
        state = self.__dict__.copy()
        state["_conv_plans"] = {}
        return state

    def reset_parameters(self):
        # PyTorch's default: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), same for the bias.
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        op = ("conv1d", "conv2d", "conv3d")[self._dims - 1]
        # the parameters from their registry, as Module.__getattr__ finds them (one call fewer per step); a weight
        # or bias replaced by a plain attribute is found where it is
        params = self._parameters
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        return conv_nd(op, self._dims, input, weight, bias, self.stride, self.padding, self.dilation,
                       self.groups, self.algo, self.layout, desc=self._desc, plans=self._conv_plans,
                       channels_last=self.channels_last)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self._dims:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.algo != "auto":
            s += f", algo={self.algo!r}"
        if self.layout != "NCHW":
            s += f", layout={self.layout!r}"
        return s


class Conv1d(_ConvNd):
    """(N, C_in, L) -> (N, C_out, L_out)."""

    _dims = 1


class Conv2d(_ConvNd):
    """(N, C_in, H, W) -> (N, C_out, H_out, W_out)."""

    _dims = 2


class Conv3d(_ConvNd):
    """(N, C_in, D, H, W) -> (N, C_out, D_out, H_out, W_out)."""

    _dims = 3


class _ConvTransposeNd(Module):
    """nn.ConvTranspose1d/2d/3d: weight (in_channels, out_channels/groups, *kernel_size), as PyTorch's, so its
    state dicts load; forward(input, output_size=None) picks output_padding from output_size as torch does."""

    _dims = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        n = self._dims
        name = f"ConvTranspose{n}d"
        if padding_mode != "zeros":
            raise ValueError(f"{name}: only padding_mode='zeros' is supported (as in PyTorch)")
        for what, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}: {what} must be a positive integer, got {v!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = as_tuple(name, "kernel_size", kernel_size, n, minimum=1)
        self.stride = as_tuple(name, "stride", stride, n, minimum=1)
        self.padding = as_tuple(name, "padding", padding, n, minimum=0)
        self.output_padding = as_tuple(name, "output_padding", output_padding, n, minimum=0)
        self.dilation = as_tuple(name, "dilation", dilation, n, minimum=1)
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        self.weight = Parameter(empty(in_channels, out_channels // groups, *self.kernel_size, **factory))
        if bias:
            self.bias = Parameter(empty(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        self._conv_plans: dict = {}
        self.reset_parameters()

    def __getstate__(self):   # pickle / deepcopy: the plans are per-device caches, made again on first use
        state = self.__dict__.copy()
        state["_conv_plans"] = {}
        return state

    reset_parameters = _ConvNd.reset_parameters   # torch's default init, read from the stored weight's fans

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        n = self._dims
        size = tuple(output_size)[-n:]
        pads = []
        for d in range(n):
            base = ((input.shape[-n + d] - 1) * self.stride[d] - 2 * self.padding[d]
                    + self.dilation[d] * (self.kernel_size[d] - 1) + 1)
            extra = size[d] - base
            if not 0 <= extra < max(self.stride[d], self.dilation[d]):
                raise ValueError(f"ConvTranspose{n}d: output_size {tuple(output_size)} is not reachable from input "
                                 f"{tuple(input.shape)} (sizes between {base} and {base + self.stride[d] - 1})")
            pads.append(extra)
        return tuple(pads)

    def forward(self, input, output_size=None):
        from ..functional.convolution import conv_transpose_nd

        op = f"conv_transpose{self._dims}d"
        return conv_transpose_nd(op, self._dims, input, self.weight, self.bias, self.stride, self.padding,
                               self._output_padding(input, output_size), self.groups, self.dilation,
                               plans=self._conv_plans)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self._dims:
            s += f", padding={self.padding}"
        if self.output_padding != (0,) * self._dims:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose1d(_ConvTransposeNd):
    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    _dims = 2


class ConvTranspose3d(_ConvTransposeNd):
    _dims = 3
