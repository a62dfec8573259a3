"""F.linear: y = x @ W^T + b over the primitive library's GEMM."""
from __future__ import annotations

import numpy as np

from ... import backends
from ... import primitives as P
from ..._device import is_cuda_array
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ..._dtypes import float32
from ...amp import autocast_mode as _amp
from ._checks import _check_float_tensor, _check_same_device, _check_same_dtype


def _gemm(a, b, trans_a=False, trans_b=False, bias=None, out_dtype=None):
    """op(a) @ op(b) through the primitive library's GEMM, for the matrices of a's and b's rows (an (..., n) array is
    the (prod(...), n) matrix of its last dim; the result (..., N) has a's leading dims, or is (M, N) with trans_a),
    in the math mode of minidl.backends.cuda.matmul.allow_tf32 (math_for_matmul: "tf32" or "fp32", as torch).

    On the GPU: float32 on minidl's own SGEMM (kernels/gemm.cu), or with allow_tf32 on our TF32
    tensor-core GEMM (kernels/gemm_tc.cu); float16 / bfloat16 on the tensor cores; cuBLAS when
    minidl.backends.cuda.use_cublas is set or the arrays are float64 (our kernels have no float64).
    On the CPU it is NumPy's matmul (the BLAS), always exact (as torch's CPU path). out_dtype: float32 for
    16-bit a and b (their fp32 sums, not rounded: AutocastLinear's gradients). Each problem runs through its
    P.GemmPlan (_PLANS): on the GPU, once planned, one allocation and one launch."""
    on_gpu = is_cuda_array(a)
    use_cublas = on_gpu and (backends.cuda.use_cublas or a.dtype == np.float64)
    math = backends.math_for_matmul(a.dtype) if on_gpu else "fp32"  # the CPU path stays exact
    key = (a.shape, b.shape, a.dtype, trans_a, trans_b, None if bias is None else bias.dtype, out_dtype, math,
           use_cublas, on_gpu)
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        plan = _PLANS[key] = P.GemmPlan(trans_a=trans_a, trans_b=trans_b, math=math, out_dtype=out_dtype,
                                        use_cublas=use_cublas)
    return plan(a, b, bias)


# The GEMM plans of the layers' calls, by problem (shapes, dtype, transposes, bias dtype, result dtype, math, cuBLAS,
# device kind): a Linear layer's three GEMMs a step skip gemm()'s checks, key and the reshapes once planned.
_PLANS: dict = {}


def _rows(a):
    """a as a matrix of its last dimension's rows (a 0-wide last dimension too, where reshape(-1, 0) is ambiguous)."""
    rows = 1
    for n in a.shape[:-1]:
        rows *= n
    return a.reshape(rows, a.shape[-1])


class Linear(Function):
    """y = x @ W^T + b.  x (..., in), W (out, in), b (out,) -> y (..., out).

    The leading dims of x are the rows of one GEMM: x2 (M, in) with M = prod(...), as _gemm reads any (..., n)
    array (no reshape made on the GPU's planned path).
    Forward:  y2 = x2 W^T + b             (gemm with trans_b: W is stored (out, in); b added in its epilogue)
    Backward: dx2 = dy2 W                 (plain gemm)
              dW  = dy2^T x2              (gemm with trans_a: sums over all M rows at once)
              db  = sum of dy2 over rows.
    """
    grad_dtypes = (None, None, None)   # (dx, dW, db): None = the product's own dtype (AutocastLinear's differ)

    def forward(self, x, weight, bias=None):
        self.x, self.weight, self.has_bias = x, weight, bias is not None
        return _gemm(x, weight, trans_b=True, bias=bias)   # the bias in the GEMM's epilogue: no launch of its own

    def backward(self, dy):
        dx = dw = db = None
        dx_dtype, dw_dtype, db_dtype = self.grad_dtypes
        if self.needs_input_grad[0]:
            dx = _gemm(dy, self.weight, out_dtype=dx_dtype)
        if self.needs_input_grad[1]:
            dw = _gemm(dy, self.x, trans_a=True, out_dtype=dw_dtype)
        if self.has_bias and self.needs_input_grad[2]:
            # the column sums of dy: on the GPU the bias gradient of a 1x1 convolution in channels-last
            # layout (a coalesced kernel; CuPy's sum over axis 0 walks each column with a stride): dy (N, *spatial, K)
            # as it is for 1-3 leading dims after the first, else its rows as (M, 1, K); float64 has no kernel there
            # and is summed by the array library
            # (an autocast layer's float32 bias of 16-bit dy: the kernel writes its fp32 sums as they are, no cast)
            if is_cuda_array(dy) and dy.dtype != np.float64:
                dyb = dy if 3 <= dy.ndim <= 5 else _rows(dy)
                dyb = dyb if dyb is dy else dyb.reshape(dyb.shape[0], 1, dyb.shape[1])
                db = P.convolution_backward_bias(dyb, layout="NHWC", out_dtype=db_dtype)
            elif dy.dtype.itemsize == 2:   # 16-bit dy summed in fp32 (as the GPU kernel), rounded once
                db = _rows(dy).sum(axis=0, dtype=np.float32).astype(dy.dtype if db_dtype is None else db_dtype)
            else:
                db = _rows(dy).sum(axis=0)
            if db_dtype is not None and db.dtype != db_dtype:
                db = P.cast(db, db_dtype)
        return (dx, dw, db) if self.has_bias else (dx, dw)

    def backward_graph(self, dy):   # (the backward as tensor ops, for create_graph=True: autograd/higher_order.py)
        x, w = self.inputs[0], self.inputs[1]
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = (dy2 @ w).reshape(x.shape) if self.needs_input_grad[0] else None
        dw = dy2.mT @ x.reshape(-1, x.shape[-1]) if self.needs_input_grad[1] else None
        if not self.has_bias:
            return dx, dw
        return dx, dw, (dy2.sum(0) if self.needs_input_grad[2] else None)


def _as(a, dtype):
    return a if a is None or a.dtype == dtype else P.cast(a, dtype)


class AutocastLinear(Linear):
    """F.linear under autocast as one op: x, W and b are cast to autocast's 16-bit `dtype` inside it and
    y = x W^T + b comes out in that dtype, as torch's autocast gives; each gradient comes back in its input's
    own dtype straight from its GEMM (gemm's out_dtype: the fp32 sums stored as they are, not rounded to 16 bits
    and cast). torch records the same step as a cast op per float32 input and an addmm, and its backward adds a
    cast back per input: here one tape record instead of up to four, and no casts of dx and dW. A parameter's
    cast is made once per autocast region (autocast_mode.cast_array), as torch's autocast caches its weight casts.
    A float32 bias is not cast at all: the GEMM's epilogue adds it to the fp32 sums before the one rounding to 16
    bits, and its gradient comes out of the bias-gradient kernel in float32 (torch casts it to 16 bits, then the
    gradient back: two launches per layer and step that minidl does not make)."""

    backward_graph = None   # (its products run in 16 bits: create_graph=True says so instead of a float32 graph)

    def forward(self, x, weight, bias=None, dtype=None, weight16=None):
        """weight16: the weight already in `dtype` (autocast's per-region cast of a parameter), or None."""
        self.grad_dtypes = (x.dtype, weight.dtype, None if bias is None else bias.dtype)
        keep = bias is None or bias.dtype == np.float32   # (the epilogue reads a float32 bias as it is)
        return super().forward(_as(x, dtype), _as(weight, dtype) if weight16 is None else weight16,
                               bias if keep else _as(bias, dtype))


def linear(input, weight, bias=None):
    """input (..., in_features), weight (out_features, in_features), bias (out_features,) or None."""
    op = "linear"
    if _amp.regions:
        low = _amp.lower_precision_dtype(op, input, weight, bias)
        if low is not None and _autocast_linear_takes(input, weight, bias, low):
            weight16 = _amp.cast_array(weight, low) if weight.dtype != low else None
            if bias is None:
                return AutocastLinear.apply(input, weight, dtype=low, weight16=weight16)
            return AutocastLinear.apply(input, weight, bias, dtype=low, weight16=weight16)
        input, weight, bias = _amp.cast_inputs(op, input, weight, bias)
    if isinstance(input, Tensor) and isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor)):
        # The common call, already valid (issue 23: the host cost of a step): what the checks below would accept,
        # tested on the arrays directly (one array type; on the GPU, one device); anything else goes through them
        # for its message.
        x, w = input._data, weight._data
        kind = type(x)
        if (kind is type(w) and x.dtype == w.dtype and x.dtype.kind == "f" and w.ndim == 2 and x.ndim >= 1
                and x.shape[-1] == w.shape[1]
                and (kind is np.ndarray or (is_cuda_array(x) and x.data.device_id == w.data.device_id))):
            if bias is None:
                return Linear.apply(input, weight)
            bd = bias._data
            if (type(bd) is kind and bd.dtype == x.dtype and bd.shape == (w.shape[0],)
                    and (kind is np.ndarray or bd.data.device_id == x.data.device_id)):
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


def _autocast_linear_takes(input, weight, bias, low) -> bool:
    """Whether AutocastLinear takes F.linear's arguments under autocast: tensors of float32 or the 16-bit dtype
    `low` on one device, of fitting shapes (anything else goes the general way, and its checks explain it)."""
    if not (isinstance(input, Tensor) and isinstance(weight, Tensor) and (bias is None or isinstance(bias, Tensor))):
        return False
    x, w = input._data, weight._data   # (the arrays' own attributes: no Tensor property calls, no Device objects)
    b = None if bias is None else bias._data
    if x.dtype not in (float32, low) or w.dtype not in (float32, low) or (b is not None and b.dtype not in (float32, low)):
        return False
    if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1] or (b is not None and b.shape != (w.shape[0],)):
        return False
    if type(w) is not type(x) or (b is not None and type(b) is not type(x)):
        return False
    if type(x) is np.ndarray:
        return True
    try:   # CuPy: one GPU for the three
        return w.data.device_id == x.data.device_id and (b is None or b.data.device_id == x.data.device_id)
    except AttributeError:   # (another array type, e.g. the meta device's: the general way)
        return False


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
