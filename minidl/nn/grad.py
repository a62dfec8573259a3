"""torch.nn.grad: the two gradients of a convolution as functions of their own, conv{1,2,3}d_input and
conv{1,2,3}d_weight. They are the convolution primitive's other two directions, called directly: backward_data
(the input gradient, a transposed convolution of grad_output with the filter) and backward_filter (the filter
gradient, a correlation of the input with grad_output), on the plan of the forward problem these shapes describe.
Both are ops on the tape (ConvolutionTranspose, ConvolutionBackwardFilter), so they are differentiable again, as
torch's are: custom autograd Functions that fuse a convolution with something else call them in their backward
(PyTorch's tutorial "Fusing Convolution and Batch Norm using Custom Function")."""
from __future__ import annotations

from .. import backends
from .. import primitives as P
from ..autograd.tensor import Tensor
from .functional.convolution import ConvolutionBackwardFilter, ConvolutionTranspose


def _plan(op, dims, input_shape, weight_shape, like, stride, padding, dilation, groups):
    """The ConvolutionPlan of the forward problem input_shape * weight_shape (channels-first), on like's device."""
    input_shape, weight_shape = tuple(int(d) for d in input_shape), tuple(int(d) for d in weight_shape)
    if len(input_shape) != dims + 2 or len(weight_shape) != dims + 2:
        raise ValueError(f"{op}: expected {dims + 2}-D input and weight shapes (N, C, *spatial) and (K, C/groups, "
                         f"*kernel), got {input_shape} and {weight_shape}")
    desc = P.ConvolutionDescriptor(padding=P._common.as_tuple(op, "padding", padding, dims, minimum=0),
                                   stride=P._common.as_tuple(op, "stride", stride, dims, minimum=1),
                                   dilation=P._common.as_tuple(op, "dilation", dilation, dims, minimum=1),
                                   groups=groups, spatial_dims=dims)
    math = backends.math_for_conv(like.dtype) if like.is_cuda else "fp32"
    return P.ConvolutionPlan(input_shape, weight_shape, desc, device="cuda" if like.is_cuda else "cpu",
                             dtype=like.dtype, math=math,
                             policy=backends._conv_policy_for("auto") or P.get_convolution_policy())


def _check_output(op, plan, grad_output):
    want = tuple(plan.problem.y_shape)
    if tuple(grad_output.shape) != want:
        raise ValueError(f"{op}: grad_output has shape {tuple(grad_output.shape)}, but the convolution of these "
                         f"shapes produces {want}")


def _input_grad(op, dims, input_size, weight, grad_output, stride, padding, dilation, groups):
    """The gradient of the convolution's input (shape input_size) for grad_output, with filter `weight`."""
    if not isinstance(weight, Tensor) or not isinstance(grad_output, Tensor):
        raise TypeError(f"{op}: weight and grad_output must be tensors")
    plan = _plan(op, dims, input_size, weight.shape, grad_output, stride, padding, dilation, groups)
    _check_output(op, plan, grad_output)
    return ConvolutionTranspose.apply(grad_output.contiguous(), weight.contiguous(), plan=plan)


def _weight_grad(op, dims, input, weight_size, grad_output, stride, padding, dilation, groups):
    """The gradient of the convolution's filter (shape weight_size) for input and grad_output."""
    if not isinstance(input, Tensor) or not isinstance(grad_output, Tensor):
        raise TypeError(f"{op}: input and grad_output must be tensors")
    plan = _plan(op, dims, input.shape, weight_size, input, stride, padding, dilation, groups)
    _check_output(op, plan, grad_output)
    return ConvolutionBackwardFilter.apply(input.contiguous(), grad_output.contiguous(), plan=plan)


def _input_form(dims):
    def fn(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
        return _input_grad(f"conv{dims}d_input", dims, input_size, weight, grad_output, stride, padding, dilation,
                           groups)

    fn.__name__ = f"conv{dims}d_input"
    fn.__doc__ = f"The gradient of conv{dims}d's input (of shape input_size) for grad_output, with filter weight."
    return fn


def _weight_form(dims):
    def fn(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        return _weight_grad(f"conv{dims}d_weight", dims, input, weight_size, grad_output, stride, padding, dilation,
                            groups)

    fn.__name__ = f"conv{dims}d_weight"
    fn.__doc__ = f"The gradient of conv{dims}d's filter (of shape weight_size) for input and grad_output."
    return fn


conv1d_input, conv2d_input, conv3d_input = (_input_form(d) for d in (1, 2, 3))
conv1d_weight, conv2d_weight, conv3d_weight = (_weight_form(d) for d in (1, 2, 3))
