"""conv1d/2d/3d and conv2d_relu over the convolution primitive, through the layer's ConvolutionPlan."""
from __future__ import annotations

from ... import backends
from ... import primitives as P
from ..._device import get_array_module
from ...autograd.function import Function
from ...amp.autocast_mode import cast_inputs as _autocast
from ._checks import _batched, _check_float_tensor, _check_same_device
from . import activations, vision


def _channels_last(a):
    """(N, C, *spatial) -> contiguous (N, *spatial, C); also (K, C/g, *k) -> (K, *k, C/g) for filters."""
    return get_array_module(a).ascontiguousarray(P._common.to_channels_last(a, "NHWC"))


def _channels_first(a):
    return get_array_module(a).ascontiguousarray(P._common.to_channels_first(a, "NHWC"))


class Convolution(Function):
    """y = conv(x, w) + b over the convolution primitive; x, w, y in PyTorch's channels-first layout.

    `plan` is the P.ConvolutionPlan of these shapes (described and resolved once: the layer keeps one
    per input shape); forward and backward run its directions. plan.layout "NHWC" runs the
    channels-last kernels: the arrays are transposed to (N, *spatial, C) and the filter to
    (K, *kernel, C/groups) on the way in and back on the way out. The values are the same; only the
    memory order the kernels read differs (and the transposes cost a copy each).
    """

    def forward(self, x, w, b=None, plan=None):
        self.plan, self.has_bias = plan, b is not None
        if plan.layout == "NHWC":
            x, w = _channels_last(x), _channels_last(w)
        self.x, self.w = x, w
        y = plan.forward(x, w, b)
        return _channels_first(y) if plan.layout == "NHWC" else y

    def backward(self, dy):
        plan, nhwc = self.plan, self.plan.layout == "NHWC"
        if nhwc:
            dy = _channels_last(dy)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dx = plan.backward_data(self.w, dy)
            dx = _channels_first(dx) if nhwc else dx
        if self.needs_input_grad[1]:
            dw = plan.backward_filter(self.x, dy)
            dw = _channels_first(dw) if nhwc else dw
        if self.has_bias and self.needs_input_grad[2]:
            db = plan.backward_bias(dy)
        return (dx, dw, db) if self.has_bias else (dx, dw)


def _kernel_layout_shape(shape, layout):
    """A channels-first shape (N, C, *spatial) as the kernels of `layout` see it."""
    return tuple(shape) if layout == "NCHW" else (shape[0], *shape[2:], shape[1])


def _convolution(x, weight, bias, desc, algo, layout, plans=None, relu=False):
    """Run Convolution with the plan of these shapes: from `plans` (a layer's dict, filled on first
    use of a shape) or made for this call. The policy is read here, once, and is part of the key; so
    is the math: float32 on the GPU may use TF32 tensor cores when minidl.backends.cudnn.allow_tf32
    is set (as in PyTorch); the CPU always computes exact fp32."""
    policy = backends._conv_policy_for(algo)
    if policy is None and algo == "auto":
        policy = P.get_convolution_policy()
    math = backends.math_for_conv(x.dtype) if x.is_cuda else "fp32"
    key = (x.shape, weight.shape, x.dtype, x.device, desc, algo, layout, policy, math)
    plan = plans.get(key) if plans is not None else None
    if plan is None:
        plan = P.ConvolutionPlan(_kernel_layout_shape(x.shape, layout), _kernel_layout_shape(weight.shape, layout),
                                 desc, device="cuda" if x.is_cuda else "cpu", dtype=x.dtype, layout=layout,
                                 algo=algo, policy=policy, math=math)
        if plans is not None:
            plans[key] = plan
    args = (x, weight) if bias is None else (x, weight, bias)
    return (ConvolutionReLU if relu else Convolution).apply(*args, plan=plan)


class ConvolutionReLU(Convolution):
    """relu(conv(x, w) + b) through convolution_bias_activation_forward (the ReLU in the convolution
    kernel's epilogue on the GPU); backward: dy masked where y > 0 (the ReLU's rule, one kernel),
    then the convolution's backward. Channels-first (NCHW) plans only."""

    _RELU = P.ActivationDescriptor("relu")

    def forward(self, x, w, b=None, plan=None):
        self.plan, self.has_bias = plan, b is not None
        self.x, self.w = x, w
        self.y = plan.forward(x, w, b, activation=self._RELU)
        return self.y

    def backward(self, dy):
        dy = P.activation_backward(self.y, self.y, dy, self._RELU)  # y > 0 exactly where conv + b > 0
        return super().backward(dy)


def _same_padding(op, kernel, stride, dilation):
    """Per dim (left, right) padding that keeps the size at stride 1; PyTorch puts an odd extra on the right."""
    if any(s != 1 for s in stride):
        raise ValueError(f"{op}: padding='same' is not supported for strided convolutions (stride={stride})")
    pads = []
    for k, d in zip(kernel, dilation):
        total = d * (k - 1)
        pads.append((total // 2, total - total // 2))
    return pads


def _conv(op, dims, input, weight, bias, stride, padding, dilation, groups, algo, layout, *, desc=None, plans=None,
          relu=False):
    """F.conv1d/2d/3d. A layer passes its own descriptor (`desc`, made once) and plan dict (`plans`);
    relu=True: relu(conv) with the ReLU in the convolution's epilogue (conv2d_relu)."""
    input, weight, bias = _autocast(op, input, weight, bias)
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "weight", weight)
    if weight.ndim != dims + 2:
        raise ValueError(f"{op}: weight must be {dims + 2}-D (out_channels, in_channels/groups, *kernel), got {weight.shape}")
    if bias is not None:
        _check_float_tensor(op, "bias", bias)
    _check_same_device(op, input=input, weight=weight, bias=bias)
    if desc is not None:
        y = _conv_run(x, weight, bias, desc, algo, layout, plans, relu)
        return y.squeeze(0) if unbatched else y
    stride = P._common.as_tuple(op, "stride", stride, dims, minimum=1)
    dilation = P._common.as_tuple(op, "dilation", dilation, dims, minimum=1)
    layout = P._common.normalize_layout(op, layout)
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            pads = _same_padding(op, weight.shape[2:], stride, dilation)
            extra = [right - left for left, right in pads]
            if any(extra):
                # Odd total padding: the primitive pads symmetrically, so pad the extra one explicitly.
                flat = []
                for e in reversed(extra):
                    flat += [0, e]
                x = vision.pad(x, flat)
            padding = tuple(left for left, _ in pads)
        else:
            raise ValueError(f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    desc = P.ConvolutionDescriptor(padding=P._common.as_tuple(op, "padding", padding, dims, minimum=0), stride=stride,
                                   dilation=dilation, groups=groups, spatial_dims=dims)
    # algo="auto" follows minidl.backends.cudnn (benchmark / deterministic), read once per call
    y = _conv_run(x, weight, bias, desc, algo, layout, plans, relu)
    return y.squeeze(0) if unbatched else y


def _conv_run(x, weight, bias, desc, algo, layout, plans, relu):
    if relu and P._common.normalize_layout("conv", layout) != "NCHW":  # the fused Function is channels-first
        return activations.relu(_convolution(x, weight, bias, desc, algo, layout, plans))
    return _convolution(x, weight, bias, desc, algo, layout, plans, relu=relu)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, L), weight (K, C/groups, k) -> (N, K, L_out). `algo` and `layout` are minidl extras."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups, algo, layout)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, H, W), weight (K, C/groups, kh, kw) -> (N, K, H_out, W_out)."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups, algo, layout)


def conv2d_relu(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """relu(conv2d(...)) with the ReLU in the convolution's epilogue on the GPU (a minidl extra,
    convolution_bias_activation_forward). Same arguments and result as the unfused pair."""
    return _conv("conv2d_relu", 2, input, weight, bias, stride, padding, dilation, groups, algo, layout, relu=True)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, D, H, W), weight (K, C/groups, kd, kh, kw) -> (N, K, D_out, H_out, W_out)."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups, algo, layout)
