"""conv1d/2d/3d and conv2d_relu over the convolution primitive, through the layer's ConvolutionPlan."""
from __future__ import annotations

import numpy as np

from ... import _layout, backends
from ..._dtypes import FLOATING_SET
from ... import primitives as P
from ...autograd.function import Function, is_grad_enabled
from ...autograd.tensor import Tensor
from ...amp import autocast_mode as _amp
from ._checks import _batched, _check_float_tensor, _check_same_device
from . import activations, vision


class Convolution(Function):
    """y = conv(x, w) + b over the convolution primitive; x, w, y have PyTorch's channels-first shapes.

    `plan` is the P.ConvolutionPlan of these shapes (described and resolved once: the layer keeps one
    per input shape; a training layer on tensor cores may hand its NHWC twin instead, _tensor_core_twin); forward
    and backward run its directions. plan.layout "NHWC" runs the
    channels-last kernels on the (N, *spatial, C) arrays and (K, *kernel, C/groups) filters. A tensor in
    channels_last memory (minidl._layout) already is that array: no copy, and the result comes back
    channels_last too (out_cl). A channels-first tensor is transposed on the way in, and y (dx) is written
    channels-first: the plan gets an (N, *spatial, K) view of channels-first memory as `out`, which the Hopper
    tensor-core kernels write directly (elsewhere the primitive copies its result into it).
    """

    kept = None      # the forward's transformed filters for backward_data (ConvolutionPlan.forward), or None

    def forward(self, x, w, b=None, plan=None, out_cl=False):
        self.plan, self.has_bias, self.out_cl = plan, b is not None, out_cl
        self.w_cl = not w.flags.c_contiguous and _layout.strictly_channels_last(w)
        if plan.layout == "NHWC":
            x, w = _layout.nhwc(x), _layout.nhwc(w)
        self.x, self.w = x, w
        if plan.layout == "NHWC" and not out_cl:   # the NHWC plan writes channels-first memory: no transpose after
            y = _channels_first_like(x, plan.problem.y_shape)
            plan.forward(x, w, b, out=_layout.nhwc_view(y))
            return y
        # what the forward can hand its backward_data (Winograd's transformed filters): only when dx will be asked
        self.kept = [] if self.needs_input_grad[0] and self.inputs else None
        y = plan.forward(x, w, b, transformed_filter=self.kept)
        return _layout.from_nhwc(y) if plan.layout == "NHWC" else y

    def backward(self, dy):
        plan, nhwc = self.plan, self.plan.layout == "NHWC"
        if nhwc:
            dy = _layout.nhwc(dy)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            if nhwc and not self.out_cl:
                dx = _channels_first_like(dy, plan.problem.x_shape)
                plan.backward_data(self.w, dy, out=_layout.nhwc_view(dx))
            else:
                dx = plan.backward_data(self.w, dy, transformed_filter=self.kept)
                dx = _layout.from_nhwc(dx) if nhwc else dx
        if self.needs_input_grad[1]:
            dw = plan.backward_filter(self.x, dy)
            if nhwc:  # in the filter's own memory format, so an optimizer updates both alike
                dw = _layout.from_nhwc(dw) if self.w_cl else _layout.nchw(dw)
        if self.has_bias and self.needs_input_grad[2]:
            db = plan.backward_bias(dy)
        return (dx, dw, db) if self.has_bias else (dx, dw)

    def backward_graph(self, dy):   # (the backward as tensor ops, for create_graph=True: autograd/higher_order.py)
        """dx and dw as ops of their own, so a gradient taken with create_graph=True (WGAN-GP's penalty through a
        convolutional critic, a Hessian-vector product of a CNN) can be differentiated again. Both are linear in
        each argument: dx is the transposed convolution of dy with w (ConvolutionTranspose), dw is
        ConvolutionBackwardFilter(x, dy); their own backwards are convolutions of the same plan."""
        x, w = self.inputs[0], self.inputs[1]
        plan = _graph_plan(self.plan, x.shape, w.shape)
        dy = dy.contiguous()
        dx = ConvolutionTranspose.apply(dy, w.contiguous(), plan=plan) if self.needs_input_grad[0] else None
        dw = ConvolutionBackwardFilter.apply(x.contiguous(), dy, plan=plan) if self.needs_input_grad[1] else None
        if not self.has_bias:
            return dx, dw
        return dx, dw, (dy.sum((0,) + tuple(range(2, dy.ndim))) if self.needs_input_grad[2] else None)


class ConvolutionBackwardFilter(Function):
    """dw = the filter gradient of the convolution `plan` describes, for input x and output gradient dy, as an op:
    Convolution's backward_graph records it. It is linear in x and in dy: <g, dw(x, dy)> = <conv(x, g), dy>, so
    its gradients are plan.backward_data(g, dy) for x and plan.forward(x, g) for dy."""

    def forward(self, x, dy, plan=None):
        self.plan, self.x, self.dy = plan, x, dy
        return plan.backward_filter(x, dy)

    def backward(self, g):
        g = _layout.to_contiguous(g)
        dx = self.plan.backward_data(g, self.dy) if self.needs_input_grad[0] else None
        ddy = self.plan.forward(self.x, g) if self.needs_input_grad[1] else None
        return dx, ddy

    def backward_graph(self, g):
        x, dy = self.inputs
        g = g.contiguous()
        return (ConvolutionTranspose.apply(dy, g, plan=self.plan) if self.needs_input_grad[0] else None,
                Convolution.apply(x, g, plan=self.plan) if self.needs_input_grad[1] else None)


def _graph_plan(plan, x_shape, w_shape):
    """The channels-first plan of `plan`'s problem, which the ops of a recorded backward run on (tensors are
    channels-first): `plan` itself when it is one, else made once and kept on it."""
    if plan.layout == "NCHW":
        return plan
    nchw = plan.graph_plan
    if nchw is None:
        nchw = plan.graph_plan = P.ConvolutionPlan(
            tuple(x_shape), tuple(w_shape), plan.desc, device="cuda" if plan.is_cuda else "cpu", dtype=plan.dtype,
            policy=plan.policy, math=plan.problem.math)
    return nchw


def _channels_first_like(a, shape_nhwc):
    """A new channels-first array (N, C, *spatial) of the NHWC shape (N, *spatial, C), of a's type (NumPy's or CuPy's
    ndarray, made by its own constructor: empty_like's dispatch costs more host time than the array) and dtype."""
    make = np.empty if isinstance(a, np.ndarray) else type(a)
    return make((shape_nhwc[0], shape_nhwc[-1], *shape_nhwc[1:-1]), dtype=a.dtype)


def _kernel_layout_shape(shape, layout):
    """A channels-first shape (N, C, *spatial) as the kernels of `layout` see it."""
    return tuple(shape) if layout == "NCHW" else (shape[0], *shape[2:], shape[1])


def _convolution(x, weight, bias, desc, algo, layout, plans=None, relu=False, out_cl=False):
    """Run Convolution with the plan of these shapes: from `plans` (a layer's dict, filled on first
    use of a shape) or made for this call. The policy is read here, once, and is part of the key; so
    is the math: float32 on the GPU may use TF32 tensor cores when minidl.backends.cudnn.allow_tf32
    is set (as in PyTorch); the CPU always computes exact fp32."""
    data = x._data
    on_cuda = not isinstance(data, np.ndarray)
    # The key holds the settings the plan depends on as they are (attributes, no calls): the device as its index
    # (-1: the CPU), minidl.backends.cudnn's flags (policy and TF32), the process-wide convolution policy.
    cudnn = backends.cudnn
    key = (data.shape, weight._data.shape, data.dtype, data.device.id if on_cuda else -1, desc, algo, layout,
           cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32, P.convolution.process_policy)
    plan = plans.get(key) if plans is not None else None
    if plan is None:
        policy, math = _settings(algo, on_cuda, data.dtype)
        plan = P.ConvolutionPlan(_kernel_layout_shape(data.shape, layout),
                                 _kernel_layout_shape(weight._data.shape, layout), desc,
                                 device="cuda" if on_cuda else "cpu", dtype=data.dtype, layout=layout, algo=algo,
                                 policy=policy, math=math)
        if plans is not None:
            plans[key] = plan
    args = (x, weight) if bias is None else (x, weight, bias)
    if relu:
        return ConvolutionReLU.apply(*args, plan=plan)
    if on_cuda and layout == "NCHW" and is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        twin = plan.nhwc_twin
        if twin is None:
            twin = plan.nhwc_twin = _tensor_core_twin(plan, algo, *_settings(algo, on_cuda, data.dtype))
        if twin:
            plan = twin
    return Convolution.apply(*args, plan=plan, out_cl=out_cl)


def _settings(algo, on_cuda, dtype):
    """(policy, math) of a plan made now: the policy algo="auto" follows (backends.cudnn's flags, else the
    process-wide one), and whether float32 may run on TF32 tensor cores (the CPU always computes exact fp32)."""
    policy = backends._conv_policy_for(algo)
    if policy is None and algo == "auto":
        policy = P.get_convolution_policy()
    return policy, backends.math_for_conv(dtype) if on_cuda else "fp32"


def _tensor_core_twin(plan, algo, policy, math):
    """The NHWC plan of a channels-first training problem whose three directions all run implicit_gemm_tc, or
    False. Those kernels work in NHWC: on channels-first arrays each direction transposes its inputs into NHWC and
    its result back (x, w, y; w, dy, dx; x, dy, dw: 9 copies per layer and step, a third of a bf16 ResNet-9 step's
    GPU time). With the twin the Convolution Function transposes instead, once each: x and w in the forward (kept
    for the backward), dy once for both backward directions; y and dx come back written channels-first by the kernels
    (an `out` view, Convolution.forward), dw is transposed back (4 copies). The same kernels on the same values: the
    same results.

    No twin where the channels-first plan needs no more copies than a twin would: TF32 on Hopper with a weight
    gradient that reads x and dy as they are (plan.reads_channels_first). That plan transposes x and w in its forward
    and dy in backward data, writes y and dx channels-first, and makes backward data's (C, R, S, K) filters from the
    channels-first ones in one transpose: 4 copies, a twin's 3 plus its copy of those filters, and the layer stays
    out of the layout business (no transposes of its own, no second plan)."""
    if algo not in ("auto", "implicit_gemm_tc") or any(
            plan.algorithm(d) != "implicit_gemm_tc" for d in ("forward", "backward_data", "backward_filter")):
        return False
    if plan.reads_channels_first("backward_filter"):
        return False
    p = plan.problem
    twin = P.ConvolutionPlan(_kernel_layout_shape(p.x_shape, "NHWC"), _kernel_layout_shape(p.w_shape, "NHWC"),
                             plan.desc, device="cuda", dtype=plan.dtype, layout="NHWC", algo="implicit_gemm_tc",
                             policy=policy, math=math)
    if any(twin.algorithm(d) != "implicit_gemm_tc" for d in ("backward_data", "backward_filter")):
        return False
    return twin


class ConvolutionReLU(Convolution):
    """relu(conv(x, w) + b) through convolution_bias_activation_forward (the ReLU in the convolution
    kernel's epilogue on the GPU); backward: dy masked where y > 0 (the ReLU's rule, one kernel),
    then the convolution's backward. Channels-first (NCHW) plans only."""

    _RELU = P.ActivationDescriptor("relu")
    backward_graph = None   # (its ReLU mask is array code: create_graph=True names the op; conv2d + relu records)

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


def conv_nd(op, dims, input, weight, bias, stride, padding, dilation, groups, algo, layout, *, desc=None, plans=None,
          relu=False, channels_last=False):
    """F.conv1d/2d/3d. A layer passes its own descriptor (`desc`, made once) and plan dict (`plans`);
    relu=True: relu(conv) with the ReLU in the convolution's epilogue (conv2d_relu). channels_last (a layer
    after Module.to(memory_format=channels_last)), or an input or filter in channels_last memory: the
    channels-last kernels, and a channels_last result, as PyTorch's memory-format propagation."""
    if _amp.regions:
        input, weight, bias = _amp.cast_inputs(op, input, weight, bias)
    x, unbatched = _checked(op, dims, input, weight, bias)
    xd, wd = x._data, weight._data
    # (c_contiguous first: a row-major array is not channels_last, and the test costs no call)
    out_cl = xd.ndim in (4, 5) and (channels_last or (not xd.flags.c_contiguous and _layout.strictly_channels_last(xd))
                                    or (not wd.flags.c_contiguous and _layout.strictly_channels_last(wd)))
    if out_cl:
        layout = "NHWC"
    if desc is not None:
        y = _conv_run(x, weight, bias, desc, algo, layout, plans, relu, out_cl)
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
    y = _conv_run(x, weight, bias, desc, algo, layout, plans, relu, out_cl)
    return y.squeeze(0) if unbatched else y


def _checked(op, dims, input, weight, bias):
    """(input with a batch dim, whether one was added), after conv_nd's argument checks. The usual call (float
    tensors of the right ranks on one device) is recognised here in a few comparisons; anything else goes through
    the checks of ._checks, which raise naming the op."""
    if isinstance(input, Tensor) and isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor)):
        xd, wd = input._data, weight._data
        if (xd.ndim == dims + 2 and wd.ndim == dims + 2 and xd.dtype in FLOATING_SET and wd.dtype in FLOATING_SET
                and type(xd) is type(wd)
                and (bias is None or (bias._data.dtype in FLOATING_SET and type(bias._data) is type(xd)))):
            return input, False
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "weight", weight)
    if weight.ndim != dims + 2:
        raise ValueError(f"{op}: weight must be {dims + 2}-D (out_channels, in_channels/groups, *kernel), got {weight.shape}")
    if bias is not None:
        _check_float_tensor(op, "bias", bias)
    _check_same_device(op, input=input, weight=weight, bias=bias)
    return x, unbatched


def _conv_run(x, weight, bias, desc, algo, layout, plans, relu, out_cl=False):
    if relu and P._common.normalize_layout("conv", layout) != "NCHW":  # the fused Function is channels-first
        return activations.relu(_convolution(x, weight, bias, desc, algo, layout, plans, out_cl=out_cl))
    return _convolution(x, weight, bias, desc, algo, layout, plans, relu=relu, out_cl=out_cl)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, L), weight (K, C/groups, k) -> (N, K, L_out). `algo` and `layout` are minidl extras."""
    return conv_nd("conv1d", 1, input, weight, bias, stride, padding, dilation, groups, algo, layout)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, H, W), weight (K, C/groups, kh, kw) -> (N, K, H_out, W_out)."""
    return conv_nd("conv2d", 2, input, weight, bias, stride, padding, dilation, groups, algo, layout)


def conv2d_relu(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """relu(conv2d(...)) with the ReLU in the convolution's epilogue on the GPU (a minidl extra,
    convolution_bias_activation_forward). Same arguments and result as the unfused pair."""
    return conv_nd("conv2d_relu", 2, input, weight, bias, stride, padding, dilation, groups, algo, layout, relu=True)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="auto", layout="NCHW"):
    """input (N, C, D, H, W), weight (K, C/groups, kd, kh, kw) -> (N, K, D_out, H_out, W_out)."""
    return conv_nd("conv3d", 3, input, weight, bias, stride, padding, dilation, groups, algo, layout)


# ------------------------------------------------------------------------------------------------
# Transposed convolution (PyTorch's conv_transpose1d/2d/3d, nn.ConvTranspose*d)
# ------------------------------------------------------------------------------------------------


class ConvolutionTranspose(Function):
    """y = conv_transpose(x, w) + b: the gradient-of-input of the convolution whose filter is w, run
    forward. `plan` describes that convolution: its input is y's shape (N, C_out, *out), its filter w
    (C_in, C_out/groups, *k), its output x's shape. So the forward is plan.backward_data(w, x), and the
    backward swaps the roles: dx = plan.forward(dy, w) (a convolution of dy), dw = plan.backward_filter(dy, x)."""

    def forward(self, x, w, b=None, plan=None):
        self.plan, self.has_bias = plan, b is not None
        self.x, self.w = x, w
        y = plan.backward_data(w, x)
        if b is not None:
            y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
        return y

    def backward(self, dy):
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dx = self.plan.forward(dy, self.w)
        if self.needs_input_grad[1]:
            dw = self.plan.backward_filter(dy, self.x)
        if self.has_bias and self.needs_input_grad[2]:
            db = dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))
        return (dx, dw, db) if self.has_bias else (dx, dw)

    def backward_graph(self, dy):   # (the backward as tensor ops, for create_graph=True: autograd/higher_order.py)
        x, w = self.inputs[0], self.inputs[1]
        dy = dy.contiguous()
        dx = Convolution.apply(dy, w.contiguous(), plan=self.plan) if self.needs_input_grad[0] else None
        dw = ConvolutionBackwardFilter.apply(dy, x.contiguous(), plan=self.plan) if self.needs_input_grad[1] else None
        if not self.has_bias:
            return dx, dw
        return dx, dw, (dy.sum((0,) + tuple(range(2, dy.ndim))) if self.needs_input_grad[2] else None)


def conv_transpose_nd(op, dims, input, weight, bias, stride, padding, output_padding, groups, dilation, plans=None):
    if _amp.regions:
        input, weight, bias = _amp.cast_inputs(op, input, weight, bias)
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "weight", weight)
    if weight.ndim != dims + 2:
        raise ValueError(f"{op}: weight must be {dims + 2}-D (in_channels, out_channels/groups, *kernel), got "
                         f"{weight.shape}")
    if bias is not None:
        _check_float_tensor(op, "bias", bias)
    _check_same_device(op, input=input, weight=weight, bias=bias)
    if x.shape[1] != weight.shape[0]:
        raise ValueError(f"{op}: input has {x.shape[1]} channels but the weight {weight.shape} expects "
                         f"{weight.shape[0]} (weight is (in_channels, out_channels/groups, *kernel))")
    stride = P._common.as_tuple(op, "stride", stride, dims, minimum=1)
    padding = P._common.as_tuple(op, "padding", padding, dims, minimum=0)
    output_padding = P._common.as_tuple(op, "output_padding", output_padding, dims, minimum=0)
    dilation = P._common.as_tuple(op, "dilation", dilation, dims, minimum=1)
    for op_, s, d in zip(output_padding, stride, dilation):
        if op_ >= max(s, d):
            raise ValueError(f"{op}: output_padding {output_padding} must be smaller than the stride {stride} or "
                             f"the dilation {dilation}")
    k = weight.shape[2:]
    out = tuple((i - 1) * s - 2 * p + d * (kk - 1) + o + 1
                for i, s, p, d, kk, o in zip(x.shape[2:], stride, padding, dilation, k, output_padding))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: the output would have size {out} for input {x.shape}; check stride/padding")
    y_shape = (x.shape[0], weight.shape[1] * groups) + out
    desc = P.ConvolutionDescriptor(padding=padding, stride=stride, dilation=dilation, groups=groups, spatial_dims=dims)
    math = backends.math_for_conv(x.dtype) if x.is_cuda else "fp32"
    key = (y_shape, weight.shape, x.dtype, x.device, desc, math)
    plan = plans.get(key) if plans is not None else None
    if plan is None:
        plan = P.ConvolutionPlan(y_shape, weight.shape, desc, device="cuda" if x.is_cuda else "cpu", dtype=x.dtype,
                                 math=math, policy=backends._conv_policy_for("auto") or P.get_convolution_policy())
        if plans is not None:
            plans[key] = plan
    args = (x, weight) if bias is None else (x, weight, bias)
    y = ConvolutionTranspose.apply(*args, plan=plan)
    return y.squeeze(0) if unbatched else y


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """input (N, C_in, L), weight (C_in, C_out/groups, k) -> (N, C_out, L_out)."""
    return conv_transpose_nd("conv_transpose1d", 1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """input (N, C_in, H, W), weight (C_in, C_out/groups, kh, kw) -> (N, C_out, H_out, W_out)."""
    return conv_transpose_nd("conv_transpose2d", 2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return conv_transpose_nd("conv_transpose3d", 3, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)
