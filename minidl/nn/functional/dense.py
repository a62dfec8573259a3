"""F.linear: y = x @ W^T + b over the primitive library's GEMM."""
from __future__ import annotations

import numpy as np

from ... import backends
from ... import primitives as P
from ..._device import is_cuda_array
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ...amp import autocast_mode as _amp
from ._checks import _check_float_tensor, _check_same_device, _check_same_dtype


def _gemm(a, b, trans_a=False, trans_b=False, bias=None):
    """op(a) @ op(b) for 2-D arrays through the primitive library's GEMM, in the math mode of
    minidl.backends.cuda.matmul.allow_tf32 (math_for_matmul: "tf32" or "fp32", as torch).

    On the GPU: float32 on minidl's own SGEMM (kernels/gemm.cu), or with allow_tf32 on our TF32
    tensor-core GEMM (kernels/gemm_tc.cu); float16 / bfloat16 on the tensor cores; cuBLAS when
    minidl.backends.cuda.use_cublas is set or the arrays are float64 (our kernels have no float64).
    On the CPU it is NumPy's matmul (the BLAS), always exact (as torch's CPU path)."""
    on_gpu = is_cuda_array(a)
    use_cublas = on_gpu and (backends.cuda.use_cublas or a.dtype == np.float64)
    math = backends.math_for_matmul(a.dtype) if on_gpu else "fp32"  # the CPU path stays exact
    return P.gemm(a, b, trans_a=trans_a, trans_b=trans_b, use_cublas=use_cublas, math=math, bias=bias)


class Linear(Function):
    """y = x @ W^T + b.  x (..., in), W (out, in), b (out,) -> y (..., out).

    The leading dims of x are flattened into the rows of one GEMM: x2 (M, in) with M = prod(...).
    Forward:  y2 = x2 W^T + b             (gemm with trans_b: W is stored (out, in); b added in its epilogue)
    Backward: dx2 = dy2 W                 (plain gemm)
              dW  = dy2^T x2              (gemm with trans_a: sums over all M rows at once)
              db  = sum of dy2 over rows.
    """

    def forward(self, x, weight, bias=None):
        self.x, self.weight, self.has_bias = x, weight, bias is not None
        x2 = x.reshape(-1, x.shape[-1])
        y = _gemm(x2, weight, trans_b=True, bias=bias)   # the bias in the GEMM's epilogue: no launch of its own
        return y.reshape(x.shape[:-1] + (weight.shape[0],))

    def backward(self, dy):
        dx = dw = db = None
        dy2 = dy.reshape(-1, dy.shape[-1])
        if self.needs_input_grad[0]:
            dx = _gemm(dy2, self.weight).reshape(self.x.shape)
        if self.needs_input_grad[1]:
            dw = _gemm(dy2, self.x.reshape(-1, self.x.shape[-1]), trans_a=True)
        if self.has_bias and self.needs_input_grad[2]:
            # the column sums of dy: on the GPU the bias gradient of a 1x1 convolution in channels-last
            # layout (a coalesced kernel; CuPy's sum over axis 0 walks each column with a stride)
            db = P.convolution_backward_bias(dy2.reshape(dy2.shape[0], 1, dy2.shape[1]), layout="NHWC") \
                if is_cuda_array(dy2) else dy2.sum(axis=0)
        return (dx, dw, db) if self.has_bias else (dx, dw)


def linear(input, weight, bias=None):
    """input (..., in_features), weight (out_features, in_features), bias (out_features,) or None."""
    op = "linear"
    if _amp.regions:
        input, weight, bias = _amp.cast_inputs(op, input, weight, bias)
    if isinstance(input, Tensor) and isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor)):
        # The common CPU call, already valid (issue 23: the host cost of a step): what the checks below
        # would accept, tested on the arrays directly; anything else goes through them for its message.
        x, w = input._data, weight._data
        if (type(x) is np.ndarray and type(w) is np.ndarray and x.dtype == w.dtype and x.dtype.kind == "f"
                and w.ndim == 2 and x.ndim >= 1 and x.shape[-1] == w.shape[1]):
            if bias is None:
                return Linear.apply(input, weight)
            bd = bias._data
            if type(bd) is np.ndarray and bd.dtype == x.dtype and bd.shape == (w.shape[0],):
                return Linear.apply(input, weight, bias)
    _check_float_tensor(op, "input", input)
    _check_float_tensor(op, "weight", weight)
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-D (out_features, in_features), got shape {weight.shape}")
    if input.ndim < 1 or input.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"{op}: input of shape {input.shape} has last dim {input.shape[-1] if input.ndim else None}, but "
            f"weight {weight.shape} expects in_features={weight.shape[1]}"
        )
    if bias is not None:
        _check_float_tensor(op, "bias", bias)
        if bias.shape != (weight.shape[0],):
            raise ValueError(f"{op}: bias has shape {bias.shape}, expected ({weight.shape[0]},)")
    _check_same_device(op, input=input, weight=weight, bias=bias)
    _check_same_dtype(op, input=input, weight=weight, bias=bias)
    if bias is None:
        return Linear.apply(input, weight)
    return Linear.apply(input, weight, bias)


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o] (torch.nn.functional.bilinear),
    by einsum, with gradients."""
    from ... import einsum

    op = "bilinear"
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"{op}: weight (out, in1, in2) {tuple(weight.shape)} does not fit input1 "
                           f"{tuple(input1.shape)} and input2 {tuple(input2.shape)}")
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError(f"{op}: input1 {tuple(input1.shape)} and input2 {tuple(input2.shape)} must share their "
                           "leading dimensions")
    y = einsum("...i,oij,...j->...o", input1, weight, input2)
    return y if bias is None else y + bias
