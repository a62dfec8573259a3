"""minidl.nn.functional: the stateless side of nn, with torch.nn.functional's names and signatures.

Each op here is an autograd Function (forward and backward on plain arrays) over one primitive of
`minidl.primitives`, so on the GPU the forward and the backward run our own CUDA kernels:

    activations        -> activation_forward / activation_backward   (ActivationDescriptor)
    softmax, log_softmax -> softmax_forward / softmax_backward
    conv1d/2d/3d       -> convolution_forward / _backward_data / _backward_filter / _backward_bias
    pooling            -> pooling_forward / pooling_backward, adaptive_avg_pooling_*
    batch_norm         -> batch_norm_forward_training / _inference / batch_norm_backward
    local_response_norm -> lrn_forward / lrn_backward
    dropout            -> dropout_forward / dropout_backward (the mask is regenerated, never stored)
    linear             -> gemm (our SGEMM on the GPU, or our tensor-core GEMM for TF32 / float16 /
                          bfloat16; cuBLAS with minidl.backends.cuda.use_cublas)

The rest (the losses, embedding, pad, one_hot) is ordinary array math written once for NumPy
and CuPy. Losses are fused: cross_entropy is one Function whose backward is (softmax - target) scaled,
instead of a chain of small ops each saving its own intermediate.

Arguments are checked here, at the framework boundary, before any computation; shape errors that
only the primitive knows about come from the primitive, naming it and the shapes.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._dtypes import is_floating, is_half, promote_floats
from .. import _device, backends, random
from .. import primitives as P
from .._device import get_array_module, is_cuda_array
from ..autograd.function import Function
from ..amp.autocast_mode import cast_inputs as _autocast
from ..autograd._dims import normalize_dim
from ..autograd.tensor import Tensor, where

# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------


def _check_tensor(op, name, t):
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")


def _check_float_tensor(op, name, t):
    _check_tensor(op, name, t)
    if not is_floating(t.dtype):
        raise TypeError(f"{op}: {name} must be a floating-point tensor, got dtype {t.dtype}")


def _check_same_device(op, **tensors):
    kinds = {k: ("cuda" if t.is_cuda else "cpu") for k, t in tensors.items() if t is not None}
    if len(set(kinds.values())) > 1:
        raise RuntimeError(f"{op}: all tensors must be on one device, got " + ", ".join(f"{k} on {v}" for k, v in kinds.items()))


def _check_same_dtype(op, **tensors):
    dtypes = {k: t.dtype for k, t in tensors.items() if t is not None}
    if len(set(dtypes.values())) > 1:
        raise TypeError(f"{op}: all tensors must have one dtype, got " + ", ".join(f"{k}={v}" for k, v in dtypes.items()))


def _check_reduction(op, reduction):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


# ------------------------------------------------------------------------------------------------
# Linear
# ------------------------------------------------------------------------------------------------


def _gemm(a, b, trans_a=False, trans_b=False):
    """op(a) @ op(b) for 2-D arrays through the primitive library's GEMM, in the math mode of
    minidl.backends.cuda.matmul.allow_tf32 (math_for_matmul: "tf32" or "fp32", as torch).

    On the GPU: float32 on minidl's own SGEMM (kernels/gemm.cu), or with allow_tf32 on our TF32
    tensor-core GEMM (kernels/gemm_tc.cu); float16 / bfloat16 on the tensor cores; cuBLAS when
    minidl.backends.cuda.use_cublas is set or the arrays are float64 (our kernels have no float64).
    On the CPU it is NumPy's matmul (the BLAS), always exact (as torch's CPU path)."""
    on_gpu = is_cuda_array(a)
    use_cublas = on_gpu and (backends.cuda.use_cublas or a.dtype == np.float64)
    math = backends.math_for_matmul(a.dtype) if on_gpu else "fp32"  # the CPU path stays exact
    return P.gemm(a, b, trans_a=trans_a, trans_b=trans_b, use_cublas=use_cublas, math=math)


class Linear(Function):
    """y = x @ W^T + b.  x (..., in), W (out, in), b (out,) -> y (..., out).

    The leading dims of x are flattened into the rows of one GEMM: x2 (M, in) with M = prod(...).
    Forward:  y2 = x2 W^T                 (gemm with trans_b: W is stored (out, in))
    Backward: dx2 = dy2 W                 (plain gemm)
              dW  = dy2^T x2              (gemm with trans_a: sums over all M rows at once)
              db  = sum of dy2 over rows.
    """

    def forward(self, x, weight, bias=None):
        self.x, self.weight, self.has_bias = x, weight, bias is not None
        x2 = x.reshape(-1, x.shape[-1])
        y = _gemm(x2, weight, trans_b=True)
        if bias is not None:
            y += bias  # y is a fresh array: add the bias in place, no extra allocation
        return y.reshape(x.shape[:-1] + (weight.shape[0],))

    def backward(self, dy):
        dx = dw = db = None
        dy2 = dy.reshape(-1, dy.shape[-1])
        if self.needs_input_grad[0]:
            dx = _gemm(dy2, self.weight).reshape(self.x.shape)
        if self.needs_input_grad[1]:
            dw = _gemm(dy2, self.x.reshape(-1, self.x.shape[-1]), trans_a=True)
        if self.has_bias and self.needs_input_grad[2]:
            db = dy2.sum(axis=0)
        return (dx, dw, db) if self.has_bias else (dx, dw)


def linear(input, weight, bias=None):
    """input (..., in_features), weight (out_features, in_features), bias (out_features,) or None."""
    op = "linear"
    input, weight, bias = _autocast(op, input, weight, bias)
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


# ------------------------------------------------------------------------------------------------
# Activations and softmax, over the primitive library
# ------------------------------------------------------------------------------------------------


class Activation(Function):
    """y = f(x) elementwise, f chosen by an ActivationDescriptor; backward dx = dy * f'(x)."""

    saves_output = True  # backward reads y

    def forward(self, x, desc=None):
        self.desc = desc
        self.x = x
        self.y = P.activation_forward(x, desc)
        return self.y

    def backward(self, dy):
        return P.activation_backward(self.x, self.y, dy, self.desc)


def _activation(op, input, mode, coef=None):
    _check_float_tensor(op, "input", input)
    return Activation.apply(input, desc=P.ActivationDescriptor(mode, coef))


def relu(input, inplace=False):
    return _activation("relu", input, "relu")


class AddReLU(Function):
    """y = max(a + b, 0) in one pass (the residual add of a ResNet block and its ReLU, fused); the
    gradient of both a and b is dy where y > 0."""

    def forward(self, a, b):
        self.y = P.add_relu_forward(a, b)
        return self.y

    def backward(self, dy):
        g = P.add_relu_backward(self.y, dy)
        return g, g


def add_relu(input, other):
    """relu(input + other) fused (a minidl extra). Tensors of one shape and dtype; anything else
    (broadcasting) runs the unfused pair."""
    _check_float_tensor("add_relu", "input", input)
    _check_float_tensor("add_relu", "other", other)
    _check_same_device("add_relu", input=input, other=other)
    if input.shape != other.shape or input.dtype != other.dtype:
        return relu(input + other)
    return AddReLU.apply(input, other)


def relu6(input, inplace=False):
    return _activation("relu6", input, "clipped_relu", 6.0)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _activation("leaky_relu", input, "leaky_relu", negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _activation("elu", input, "elu", alpha)


def sigmoid(input):
    return _activation("sigmoid", input, "sigmoid")


def tanh(input):
    return _activation("tanh", input, "tanh")


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _activation("gelu", input, "gelu" if approximate == "none" else "gelu_tanh")


class Softmax(Function):
    """softmax ("accurate") or log-softmax ("log") along one axis; backward needs only the output."""

    saves_inputs, saves_output = False, True  # backward reads y only

    def forward(self, x, axis=-1, algorithm="accurate"):
        self.axis, self.algorithm = axis, algorithm
        self.y = P.softmax_forward(x, axis=axis, algorithm=algorithm)
        return self.y

    def backward(self, dy):
        return P.softmax_backward(self.y, dy, axis=self.axis, algorithm=self.algorithm)


def _softmax_dim(op, input, dim):
    _check_float_tensor(op, "input", input)
    if dim is None:
        # PyTorch's legacy rule for an omitted dim: 0 for 0-, 1- and 3-D inputs, else 1.
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return normalize_dim(dim, input.ndim, op)


def softmax(input, dim=None, dtype=None):
    (input,) = _autocast("softmax", input)
    dim = _softmax_dim("softmax", input, dim)
    if dtype is not None:
        input = input.type(dtype)
    if input.ndim == 0:
        return Softmax.apply(input.reshape(1), axis=0).reshape(())
    if input.numel() == 0:  # nothing to normalise: an empty result of the same shape (torch)
        return input * 1
    return Softmax.apply(input, axis=dim, algorithm="accurate")


def log_softmax(input, dim=None, dtype=None):
    (input,) = _autocast("log_softmax", input)
    dim = _softmax_dim("log_softmax", input, dim)
    if dtype is not None:
        input = input.type(dtype)
    if input.ndim == 0:
        return Softmax.apply(input.reshape(1), axis=0, algorithm="log").reshape(())
    if input.numel() == 0:
        return input * 1
    return Softmax.apply(input, axis=dim, algorithm="log")


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------


def _class_targets(op, input, target, weight, ignore_index):
    """Check class-index targets against input (N, C, d1, ...).

    Returns (C, t, valid, bad): t the targets as (M,), valid the rows that count (not ignore_index,
    index in range), bad the rows whose index is out of range, or None when that was checked here.
    On the CPU (or with minidl.backends.cuda.check_indices) an out-of-range index raises now; on the
    GPU the check stays on the device (reading its result would wait for the GPU in every step) and
    the bad rows' losses become NaN instead (see _class_weights_matrix).
    """
    C = input.shape[1]
    expected = (input.shape[0],) + input.shape[2:]
    if target.dtype.kind not in "iu":
        raise TypeError(
            f"{op}: class-index target must be an integer tensor (e.g. int64), got dtype {target.dtype} "
            f"(for probability targets pass a float tensor of the input's shape {input.shape})"
        )
    if target.shape != expected:
        raise ValueError(f"{op}: input {input.shape} expects a target of shape {expected}, got {target.shape}")
    t = target._data.reshape(-1)
    in_range = (t >= 0) & (t < C)
    not_ignored = t != ignore_index
    bad = not_ignored & ~in_range
    if not is_cuda_array(t) or backends.cuda.check_indices:
        if is_cuda_array(t):
            _device.check_not_capturing(f"{op} with minidl.backends.cuda.check_indices=True",
                                        "the eager index check reads a flag back from the GPU")
        if t.size and bool(bad.any()):  # on the GPU: one reduction read back, so one sync
            xp = get_array_module(t)
            first = int(t[xp.nonzero(bad)[0][0]])
            raise ValueError(
                f"{op}: target holds class index {first}, out of range for {C} classes (input {input.shape}); "
                f"valid indices are 0..{C - 1} or ignore_index={ignore_index}"
            )
        bad = None
    return C, t, not_ignored & in_range, bad


def _check_weight(op, weight, C, input):
    if weight is None:
        return
    _check_float_tensor(op, "weight", weight)
    if weight.shape != (C,):
        raise ValueError(f"{op}: weight has shape {weight.shape}, expected ({C},) for input {input.shape}")
    _check_same_device(op, input=input, weight=weight)


def _to_rows(x):
    """(N, C, d1, ...) -> (N * d1 * ..., C): classes last, one row per prediction."""
    C = x.shape[1]
    return get_array_module(x).moveaxis(x, 1, -1).reshape(-1, C)


def _from_rows(rows, shape):
    """Inverse of _to_rows for an array of shape `shape` = (N, C, d1, ...)."""
    xp = get_array_module(rows)
    moved = rows.reshape((shape[0],) + tuple(shape[2:]) + (shape[1],))
    return xp.ascontiguousarray(xp.moveaxis(moved, -1, 1))


def _class_weights_matrix(t, valid, weight, C, smoothing, dtype, bad=None):
    """q (M, C): how much each -log p[m, c] counts. With class indices t (rows not valid all zero):
    q = (1 - eps) * w[t] * onehot(t) + eps / C * w; the loss of row m is -sum_c q[m, c] log p[m, c].
    Rows flagged in `bad` (out-of-range targets found on the GPU) are NaN, so their loss and every
    gradient through them is NaN rather than silently computed from a wrong class."""
    xp = get_array_module(t)
    M = t.shape[0]
    w = weight if weight is not None else xp.ones((C,), dtype=dtype)
    safe_t = xp.where(valid, t, 0)
    q = xp.zeros((M, C), dtype=dtype)
    rows = xp.arange(M)
    q[rows, safe_t] = dtype.type(1.0 - smoothing) * w[safe_t]
    if smoothing:
        q += dtype.type(smoothing / C) * w[None, :]
    q *= valid[:, None].astype(dtype)
    if bad is not None:
        q += xp.where(bad, dtype.type(np.nan), dtype.type(0))[:, None]
    # The "mean" denominator, as PyTorch: the summed weights of the targets that count.
    denom = (w[safe_t] * valid.astype(dtype)).sum()
    return q, denom


class CrossEntropy(Function):
    """log-softmax and negative log-likelihood in one op.

    Rows: z (M, C) logits, q (M, C) target weights (see _class_weights_matrix; for probability targets
    q = w * p). Forward: log p = z - max z - log sum exp(z - max z); loss_m = -sum_c q_mc log p_mc.
    Backward: d loss_m / d z_mc = (sum_c' q_mc') softmax_mc - q_mc, which is softmax - onehot for
    plain class targets: one pass, and nothing saved but the softmax and q.
    """

    def forward(self, x, target_rows, q, denom, reduction="mean", out_shape=None, prob_smoothing=None):
        if is_half(x.dtype):
            # float16/bfloat16 logits: the log-sum-exp over the classes in float32, one rounding at the end
            out = self.forward(x.astype(np.float32), target_rows, q.astype(np.float32), denom.astype(np.float32),
                               reduction, out_shape, prob_smoothing)
            return out.astype(x.dtype)
        xp = get_array_module(x)
        self.in_shape, self.reduction, self.out_shape = x.shape, reduction, out_shape
        z = _to_rows(x)
        shifted = z - z.max(axis=1, keepdims=True)
        log_p = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
        per_row = -(q * log_p).sum(axis=1)
        self.softmax, self.q, self.denom = xp.exp(log_p), q, denom
        self.log_p, self.prob_smoothing = log_p, prob_smoothing
        if reduction == "mean":
            return per_row.sum() / denom
        if reduction == "sum":
            return per_row.sum()
        return per_row.reshape(out_shape)

    def _row_grad_scale(self, g):
        if self.reduction == "mean":
            return (g / self.denom).reshape(1, 1)
        if self.reduction == "sum":
            return g.reshape(1, 1)
        return g.reshape(-1, 1)

    def backward(self, g):
        scale = self._row_grad_scale(g)
        dx = d_target = None
        if self.needs_input_grad[0]:
            q_sum = self.q.sum(axis=1, keepdims=True)
            dx = _from_rows(scale * (q_sum * self.softmax - self.q), self.in_shape)
        if self.prob_smoothing is not None and self.needs_input_grad[1]:
            # Probability targets: loss = -sum w_c ((1-eps) p_c + eps/C) log p_c, so d/dp_c = -(1-eps) w_c log p_c.
            eps, w = self.prob_smoothing
            d_rows = -scale * (1.0 - eps) * w[None, :] * self.log_p
            d_target = _from_rows(d_rows.astype(self.log_p.dtype), self.in_shape)
        return dx, d_target, None, None


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits `input` (N, C) or (N, C, d1, ...) (or (C,) unbatched) against
    class indices `target` (N) / (N, d1, ...) (integers) or class probabilities (float, input's shape)."""
    op = "cross_entropy"
    if size_average is not None or reduce is not None:
        raise ValueError(f"{op}: size_average and reduce are deprecated; use reduction=")
    input, target, weight = _autocast(op, input, target, weight)
    _check_float_tensor(op, "input", input)
    _check_tensor(op, "target", target)
    _check_reduction(op, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have a class dim, got a scalar")
    if input.ndim == 1:  # unbatched (C,)
        out = cross_entropy(input.reshape(1, -1), target.reshape((1,) + target.shape), weight, None,
                            ignore_index, None, reduction, label_smoothing)
        return out.reshape(()) if reduction == "none" else out
    _check_same_device(op, input=input, target=target)
    C = input.shape[1]
    _check_weight(op, weight, C, input)
    if weight is not None:
        _check_same_dtype(op, input=input, weight=weight)
    w = weight._data if weight is not None else None
    dtype = input.dtype
    index_shape = (input.shape[0],) + input.shape[2:]
    if is_floating(target.dtype) and target.shape == index_shape and target.shape != input.shape:
        raise TypeError(
            f"{op}: class-index target of shape {target.shape} must be an integer tensor (e.g. int64), got dtype "
            f"{target.dtype} (probability targets need the input's shape {input.shape})"
        )
    if is_floating(target.dtype):
        if target.shape != input.shape:
            raise ValueError(
                f"{op}: probability target must have the input's shape {input.shape}, got {target.shape} "
                f"(for class indices pass an integer tensor of shape {(input.shape[0],) + input.shape[2:]})"
            )
        _check_same_dtype(op, input=input, target=target)
        xp = get_array_module(input._data)
        p = _to_rows(target._data)
        if label_smoothing:
            p = p * dtype.type(1 - label_smoothing) + dtype.type(label_smoothing / C)
        w_arr = w if w is not None else xp.ones((C,), dtype=dtype)
        q = p * w_arr[None, :]
        denom = dtype.type(p.shape[0])  # PyTorch: mean over the predictions, not the weights
        return CrossEntropy.apply(input, target, q, denom, reduction=reduction,
                                  out_shape=(input.shape[0],) + input.shape[2:],
                                  prob_smoothing=(label_smoothing, w_arr))
    C, t, valid, bad = _class_targets(op, input, target, weight, ignore_index)
    q, denom = _class_weights_matrix(t, valid, w, C, label_smoothing, dtype, bad)
    return CrossEntropy.apply(input, None, q, denom, reduction=reduction, out_shape=target.shape)


class NLLLoss(Function):
    """loss_m = -sum_c q_mc x_mc for log-probabilities x; the gradient is -q (scaled by the reduction)."""

    def forward(self, x, q, denom, reduction="mean", out_shape=None):
        self.in_shape, self.q, self.denom, self.reduction = x.shape, q, denom, reduction
        per_row = -(q * _to_rows(x)).sum(axis=1)
        if reduction == "mean":
            return per_row.sum() / denom
        if reduction == "sum":
            return per_row.sum()
        return per_row.reshape(out_shape)

    def backward(self, g):
        scale = CrossEntropy._row_grad_scale(self, g)
        return _from_rows(-scale * self.q, self.in_shape), None, None


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of log-probabilities `input` (N, C) / (N, C, d1, ...) at class indices `target`."""
    op = "nll_loss"
    if size_average is not None or reduce is not None:
        raise ValueError(f"{op}: size_average and reduce are deprecated; use reduction=")
    input, target, weight = _autocast(op, input, target, weight)
    _check_float_tensor(op, "input", input)
    _check_tensor(op, "target", target)
    _check_reduction(op, reduction)
    if input.ndim == 1:
        out = nll_loss(input.reshape(1, -1), target.reshape((1,) + target.shape), weight, None, ignore_index,
                       None, reduction)
        return out.reshape(()) if reduction == "none" else out
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C) or (N, C, d1, ...), got shape {input.shape}")
    _check_same_device(op, input=input, target=target)
    C = input.shape[1]
    _check_weight(op, weight, C, input)
    C, t, valid, bad = _class_targets(op, input, target, weight, ignore_index)
    q, denom = _class_weights_matrix(t, valid, weight._data if weight is not None else None, C, 0.0, input.dtype,
                                     bad)
    return NLLLoss.apply(input, q, denom, reduction=reduction, out_shape=target.shape)


def _check_same_shape(op, input, target):
    _check_float_tensor(op, "input", input)
    _check_tensor(op, "target", target)
    if input.shape != target.shape:
        raise ValueError(f"{op}: input {input.shape} and target {target.shape} must have the same shape")
    _check_same_device(op, input=input, target=target)
    _check_same_dtype(op, input=input, target=target)


def _regression_pair(op, input, target):
    """input and target of mse_loss/l1_loss with PyTorch's rules: an integer target takes the input's
    float dtype, two float dtypes promote to the wider, and different shapes broadcast with a warning
    (usually a bug: (N, 1) against (N,) gives an (N, N) loss)."""
    _check_float_tensor(op, "input", input)
    _check_tensor(op, "target", target)
    _check_same_device(op, input=input, target=target)
    if not is_floating(target.dtype):
        target = target.type(input.dtype)
    elif target.dtype != input.dtype:
        wider = promote_floats(input.dtype, target.dtype)
        input, target = input.type(wider), target.type(wider)
    if input.shape != target.shape:
        try:
            np.broadcast_shapes(input.shape, target.shape)
        except ValueError:
            raise ValueError(f"{op}: input {input.shape} and target {target.shape} cannot be broadcast together") from None
        warnings.warn(
            f"{op}: using a target size ({tuple(target.shape)}) that is different to the input size "
            f"({tuple(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.", UserWarning, stacklevel=3)
    return input, target


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean squared error: reduce((input - target)^2). Integer targets are promoted, as PyTorch."""
    input, target = _autocast("mse_loss", input, target)
    input, target = _regression_pair("mse_loss", input, target)
    _check_reduction("mse_loss", reduction)
    diff = input - target
    return _reduce(diff * diff, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Huber-like loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target);
    beta = 0 is the L1 loss."""
    input, target = _regression_pair("smooth_l1_loss", input, target)
    _check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta), reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean absolute error: reduce(|input - target|). Integer targets are promoted, as PyTorch."""
    input, target = _autocast("l1_loss", input, target)
    input, target = _regression_pair("l1_loss", input, target)
    _check_reduction("l1_loss", reduction)
    return _reduce((input - target).abs(), reduction)


class BCEWithLogits(Function):
    """Binary cross-entropy on logits x with targets y in [0, 1], in the softplus form:

        loss = (1 - y) x + (1 + (pw - 1) y) softplus(-x),   softplus(-x) = max(-x, 0) + log(1 + exp(-|x|))

    which never exponentiates a positive number. With pw = 1 this is -[y log s(x) + (1-y) log(1 - s(x))].
    d loss/dx = (1 - y) - (1 + (pw - 1) y) s(-x);  d loss/dy = -x + (pw - 1) softplus(-x).
    """

    def forward(self, x, y, weight=None, pos_weight=None):
        xp = get_array_module(x)
        softplus_neg = xp.maximum(-x, 0) + xp.log1p(xp.exp(-xp.abs(x)))
        coef = 1 if pos_weight is None else 1 + (pos_weight - 1) * y
        self.x, self.y, self.weight, self.pos_weight = x, y, weight, pos_weight
        self.softplus_neg, self.coef = softplus_neg, coef
        loss = (1 - y) * x + coef * softplus_neg
        return loss if weight is None else loss * weight

    def backward(self, g):
        xp = get_array_module(g)
        if self.weight is not None:
            g = g * self.weight
        dx = dy = None
        if self.needs_input_grad[0]:
            sig_neg = xp.exp(-self.softplus_neg)  # = sigmoid(x); so sigmoid(-x) = 1 - that
            dx = g * ((1 - self.y) - self.coef * (1 - sig_neg))
        if self.needs_input_grad[1]:
            pw_minus_1 = 0 if self.pos_weight is None else self.pos_weight - 1
            dy = g * (-self.x + pw_minus_1 * self.softplus_neg)
        return dx, dy, None, None


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    """input, target: the same shape; weight broadcasts to it; pos_weight (C,) broadcasts along the last dim.
    (No gradient flows to weight or pos_weight.)"""
    op = "binary_cross_entropy_with_logits"
    input, target, weight, pos_weight = _autocast(op, input, target, weight, pos_weight)
    _check_same_shape(op, input, target)
    _check_reduction(op, reduction)
    for name, extra in (("weight", weight), ("pos_weight", pos_weight)):
        if extra is None:
            continue
        _check_float_tensor(op, name, extra)
        _check_same_device(op, input=input, **{name: extra})
        try:
            if np.broadcast_shapes(extra.shape, input.shape) != input.shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"{op}: {name} of shape {extra.shape} does not broadcast to input {input.shape}") from None
    loss = BCEWithLogits.apply(
        input, target, None if weight is None else weight._data, None if pos_weight is None else pos_weight._data
    )
    return _reduce(loss, reduction)


# ------------------------------------------------------------------------------------------------
# Embedding, one_hot, pad
# ------------------------------------------------------------------------------------------------


class Embedding(Function):
    """out[...] = weight[indices[...]]; backward scatters dy rows back with add (repeated indices sum).
    The padding_idx row gets no gradient (it stays the padding vector). `bad` (GPU only, see
    embedding()) flags out-of-range indices, already replaced by 0 in `indices`: their rows are NaN."""

    def forward(self, weight, indices=None, padding_idx=None, bad=None, scale_grad_by_freq=False):
        self.indices, self.padding_idx, self.num = indices, padding_idx, weight.shape[0]
        self.scale_grad_by_freq = scale_grad_by_freq
        self.weight_shape = weight.shape
        out = weight[indices]
        if bad is not None:
            out = get_array_module(out).where(bad[..., None], weight.dtype.type(np.nan), out)
        return out

    def backward(self, dy):
        xp = get_array_module(dy)
        # Half gradients are summed in float32 (repeated indices add up; no half atomics needed on the GPU).
        acc = np.float32 if is_half(dy.dtype) else dy.dtype
        dw = xp.zeros(self.weight_shape, dtype=acc)
        flat_idx = self.indices.reshape(-1)
        rows = dy.reshape(-1, self.weight_shape[1]).astype(acc, copy=False)
        if self.scale_grad_by_freq:
            # each row's gradient divided by how often its index occurs in this batch (torch)
            counts = xp.bincount(flat_idx, minlength=self.weight_shape[0]).astype(dy.dtype)
            rows = rows / counts[flat_idx][:, None]
        if xp is np:
            np.add.at(dw, flat_idx, rows)
        else:
            xp.add.at(dw, flat_idx, rows)
        if self.padding_idx is not None:
            dw[self.padding_idx] = 0
        return dw.astype(dy.dtype, copy=False)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight (num_embeddings, embedding_dim) at the integer indices `input` (any shape).

    max_norm: the rows looked up whose norm_type-norm exceeds max_norm are first rescaled to norm
    max_norm, in place in weight (as torch). scale_grad_by_freq: each row's gradient is divided by
    the number of times its index occurs in input. sparse gradients are not implemented."""
    op = "embedding"
    _check_tensor(op, "input", input)
    _check_float_tensor(op, "weight", weight)
    if sparse:
        raise NotImplementedError(f"{op}: sparse gradients are not implemented in minidl (use sparse=False)")
    if input.dtype.kind not in "iu":
        raise TypeError(f"{op}: input must hold integer indices, got dtype {input.dtype}")
    if weight.ndim != 2:
        raise ValueError(f"{op}: weight must be 2-D (num_embeddings, embedding_dim), got shape {weight.shape}")
    _check_same_device(op, input=input, weight=weight)
    num = weight.shape[0]
    idx = input._data
    bad = (idx < 0) | (idx >= num)
    if not is_cuda_array(idx) or backends.cuda.check_indices:
        if is_cuda_array(idx):
            _device.check_not_capturing(f"{op} with minidl.backends.cuda.check_indices=True",
                                        "the eager index check reads a flag back from the GPU")
        if idx.size and bool(bad.any()):  # on the GPU: one value read back, so one sync
            raise ValueError(
                f"{op}: index out of range: input {input.shape} holds values in [{int(idx.min())}, {int(idx.max())}] "
                f"but weight {weight.shape} has {num} rows"
            )
        bad = None
    else:
        # On the GPU the check stays on the device (see minidl.backends.cuda.check_indices): bad indices
        # read row 0 instead of memory past the table, and their output rows are NaN.
        idx = get_array_module(idx).where(bad, 0, idx)
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise ValueError(f"{op}: padding_idx {padding_idx} must be within [{-num}, {num - 1}]")
        padding_idx = padding_idx % num
    if max_norm is not None:
        _embedding_renorm_(weight, idx, float(max_norm), float(norm_type))
    return Embedding.apply(weight, indices=idx, padding_idx=padding_idx, bad=bad,
                           scale_grad_by_freq=bool(scale_grad_by_freq))


def _embedding_renorm_(weight, idx, max_norm, norm_type):
    """torch.embedding_renorm_: rows of weight at idx with norm > max_norm scaled to max_norm / (norm + 1e-7),
    in place and outside the graph."""
    xp = get_array_module(weight._data)
    rows = xp.unique(idx.reshape(-1))
    if rows.size == 0:
        return
    w = weight._data[rows]
    if norm_type == float("inf"):
        norms = xp.abs(w).max(axis=1)
    else:
        norms = (xp.abs(w) ** norm_type).sum(axis=1) ** (1.0 / norm_type)
    scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0).astype(w.dtype)
    weight._data[rows] = w * scale[:, None]


def one_hot(tensor, num_classes=-1):
    """int64 (..., num_classes) with a 1 at each index (no gradient)."""
    op = "one_hot"
    _check_tensor(op, "tensor", tensor)
    if tensor.dtype.kind not in "iu":
        raise TypeError(f"{op}: needs an integer tensor of class indices, got dtype {tensor.dtype}")
    xp = get_array_module(tensor._data)
    idx = tensor._data
    if num_classes == -1:
        num_classes = int(idx.max()) + 1 if idx.size else 0
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_classes):
        raise ValueError(f"{op}: class values must be in [0, {num_classes}), got [{int(idx.min())}, {int(idx.max())}]")
    out = (idx[..., None] == xp.arange(num_classes)).astype(np.int64)
    return Tensor._make(out)


class Pad(Function):
    """Constant padding; the gradient is the slice of dy that covers the original input."""

    def forward(self, x, widths=None, value=0.0):
        xp = get_array_module(x)
        self.slices = tuple(slice(before, before + n) for (before, _), n in zip(widths, x.shape))
        return xp.pad(x, widths, mode="constant", constant_values=value)

    def backward(self, dy):
        return dy[self.slices].copy()


def pad(input, pad, mode="constant", value=None):
    """pad = (left_last, right_last, left_second_last, right_second_last, ...), as torch.nn.functional.pad."""
    op = "pad"
    _check_tensor(op, "input", input)
    if mode != "constant":
        raise NotImplementedError(f"{op}: only mode='constant' is implemented in minidl, got {mode!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"{op}: pad {pad} must have an even length of at most 2 * ndim for input {input.shape}")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
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


# ------------------------------------------------------------------------------------------------
# Shared by the spatial ops: unbatched inputs and the rank check
# ------------------------------------------------------------------------------------------------


def _batched(op, input, spatial_dims):
    """(input with a batch dim, whether one was added). Accepts (N, C, *spatial) or (C, *spatial)."""
    _check_float_tensor(op, "input", input)
    if input.ndim == spatial_dims + 2:
        return input, False
    if input.ndim == spatial_dims + 1:
        return input.unsqueeze(0), True
    raise ValueError(
        f"{op}: expected a {spatial_dims + 2}-D input (N, C, {spatial_dims} spatial dims) or a "
        f"{spatial_dims + 1}-D unbatched one, got shape {input.shape}"
    )


# ------------------------------------------------------------------------------------------------
# Convolution
# ------------------------------------------------------------------------------------------------


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
                x = globals()["pad"](x, flat)
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
        return globals()["relu"](_convolution(x, weight, bias, desc, algo, layout, plans))
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


# ------------------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------------------


class Pooling(Function):
    """Max or average pooling; the max backward recomputes the argmax from x and y (nothing stored).
    With return_indices, max pooling also returns each maximum's flat position (no gradient)."""

    saves_output = True  # backward reads y

    def forward(self, x, desc=None, return_indices=False):
        self.x, self.desc = x, desc
        if return_indices:
            self.y, indices = P.max_pooling_forward_with_indices(x, desc)
            return self.y, indices
        self.y = P.pooling_forward(x, desc)
        return self.y

    def backward(self, dy, d_indices=None):
        return P.pooling_backward(self.x, self.y, dy, self.desc)


def _pool(op, dims, mode, input, kernel_size, stride, padding, ceil_mode, dilation=1, return_indices=False):
    x, unbatched = _batched(op, input, dims)
    _check_float_tensor(op, "input", x)
    if stride is None or (not isinstance(stride, int) and len(stride) == 0):
        stride = None  # the kernel size, as PyTorch
    try:
        desc = P.PoolingDescriptor(mode=mode, kernel_size=kernel_size, stride=stride, padding=padding,
                                   ceil_mode=ceil_mode, spatial_dims=dims, dilation=dilation)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{op}: {e}") from None
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


# ------------------------------------------------------------------------------------------------
# Normalization
# ------------------------------------------------------------------------------------------------


class BatchNormTraining(Function):
    """Normalise with the batch's statistics; the running statistics (plain arrays, not inputs) are
    updated in place by the primitive. Backward from the saved mean and 1/std."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, momentum=0.1, eps=1e-5):
        self.x, self.gamma = x, gamma
        y, self.mean, self.invstd = P.batch_norm_forward_training(
            x, gamma, beta, running_mean, running_var, momentum=momentum, eps=eps)
        return y

    def backward(self, dy):
        dx, dgamma, dbeta = P.batch_norm_backward(self.x, dy, self.gamma, self.mean, self.invstd)
        return dx, dgamma, dbeta


class BatchNormInference(Function):
    """y = gamma (x - running_mean) / sqrt(running_var + eps) + beta: an affine map per channel, so
    dx = dy gamma / std, dgamma = sum(dy x_hat), dbeta = sum(dy)."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, eps=1e-5):
        xp = get_array_module(x)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        self.axes = (0,) + tuple(range(2, x.ndim))
        self.invstd = (1.0 / xp.sqrt(running_var + x.dtype.type(eps))).reshape(shape)
        self.x_hat = (x - running_mean.reshape(shape)) * self.invstd
        self.gamma, self.shape = gamma, shape
        return P.batch_norm_forward_inference(x, gamma, beta, running_mean, running_var, eps=eps)

    def backward(self, dy):
        scale = self.invstd if self.gamma is None else self.invstd * self.gamma.reshape(self.shape)
        dx = dy * scale
        dgamma = (dy * self.x_hat).sum(axis=self.axes) if self.gamma is not None else None
        dbeta = dy.sum(axis=self.axes) if self.needs_input_grad[2] else None
        return dx, dgamma, dbeta


class BatchNormReLUTraining(Function):
    """max(BN(x), 0) with the batch's statistics, fused (batch_norm_relu_* primitives): the backward
    recomputes the BN output from x to mask dy, so nothing but the statistics is saved."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, momentum=0.1, eps=1e-5):
        self.x, self.gamma, self.beta = x, gamma, beta
        y, self.mean, self.invstd = P.batch_norm_relu_forward_training(
            x, gamma, beta, running_mean, running_var, momentum=momentum, eps=eps)
        return y

    def backward(self, dy):
        return P.batch_norm_relu_backward(self.x, dy, self.gamma, self.beta, self.mean, self.invstd)


class BatchNormReLUInference(Function):
    """max(BN(x), 0) with the running statistics, one fused pass; backward: dy masked where y > 0,
    then the inference BN's affine gradients."""

    def forward(self, x, gamma=None, beta=None, running_mean=None, running_var=None, eps=1e-5):
        xp = get_array_module(x)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        self.axes = (0,) + tuple(range(2, x.ndim))
        self.invstd = (1.0 / xp.sqrt(running_var + x.dtype.type(eps))).reshape(shape)
        self.x_hat = (x - running_mean.reshape(shape)) * self.invstd
        self.gamma, self.shape = gamma, shape
        self.y = P.batch_norm_relu_forward_inference(x, gamma, beta, running_mean, running_var, eps=eps)
        return self.y

    def backward(self, dy):
        dy = get_array_module(dy).where(self.y > 0, dy, dy.dtype.type(0))
        scale = self.invstd if self.gamma is None else self.invstd * self.gamma.reshape(self.shape)
        dx = dy * scale
        dgamma = (dy * self.x_hat).sum(axis=self.axes) if self.gamma is not None else None
        dbeta = dy.sum(axis=self.axes) if self.needs_input_grad[2] else None
        return dx, dgamma, dbeta


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """input (N, C, *spatial); running_mean/var (C,) buffers (updated in place when training), or None;
    weight (gamma), bias (beta): (C,) or None."""
    return _batch_norm("batch_norm", False, input, running_mean, running_var, weight, bias, training, momentum, eps)


def batch_norm_relu(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                    eps=1e-5):
    """relu(batch_norm(...)) in fused kernels (a minidl extra; same arguments as batch_norm). Equal to the
    unfused pair bit for bit on the GPU; one launch fewer forward and backward, and no masked gradient
    written and read back."""
    return _batch_norm("batch_norm_relu", True, input, running_mean, running_var, weight, bias, training, momentum,
                       eps)


def _batch_norm(op, relu, input, running_mean, running_var, weight, bias, training, momentum, eps):
    _check_float_tensor(op, "input", input)
    if input.numel() == 0 and input.ndim < 2:
        return input * 1  # torch returns an empty tensor for an empty input of any rank
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C, ...), got shape {input.shape}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None:
            _check_float_tensor(op, name, t)
    _check_same_device(op, input=input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    rm = None if running_mean is None else running_mean._data
    rv = None if running_var is None else running_var._data
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.shape != (input.shape[1],):
            raise ValueError(f"{op}: {name} has shape {t.shape}, expected ({input.shape[1]},) for input {input.shape}")
    if training and input.numel() // input.shape[1] == 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got input of shape {input.shape}")
    if input.numel() == 0:
        # torch's rule for an empty batch: an empty output, running statistics untouched; weight and bias
        # still take part, so their gradients are zeros rather than missing.
        out = input * 1
        if weight is not None:
            out = out * weight[0]
        if bias is not None:
            out = out + bias[0]
        return out
    params = tuple(t for t in (weight, bias))
    if training:
        fn = BatchNormReLUTraining if relu else BatchNormTraining
        return fn.apply(input, *params, running_mean=rm, running_var=rv, momentum=momentum, eps=eps)
    if rm is None or rv is None:
        raise ValueError(f"{op}: training=False needs running_mean and running_var")
    fn = BatchNormReLUInference if relu else BatchNormInference
    return fn.apply(input, *params, running_mean=rm, running_var=rv, eps=eps)


class LocalResponseNorm(Function):
    def forward(self, x, desc=None):
        self.x, self.desc = x, desc
        self.y = P.lrn_forward(x, desc)
        return self.y

    def backward(self, dy):
        return P.lrn_backward(self.x, self.y, dy, self.desc)


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """Normalise each channel by its `size` neighbours' energy (AlexNet). input (N, C, *spatial), >= 3 dims."""
    op = "local_response_norm"
    _check_float_tensor(op, "input", input)
    if input.ndim < 3:
        raise ValueError(f"{op}: input must have at least 3 dims (N, C, spatial...), got shape {input.shape}")
    return LocalResponseNorm.apply(input, desc=P.LRNDescriptor(size, alpha, beta, k))


# ------------------------------------------------------------------------------------------------
# Dropout
# ------------------------------------------------------------------------------------------------


class Dropout(Function):
    """y = x * keep / (1 - p) with keep drawn from Philox(seed); backward regenerates the same mask
    from the seed, so nothing but two numbers is saved. `seed` is the (2,) uint64 (seed, offset) array
    this call claimed from its device's generator (minidl.random.philox_state)."""

    saves_inputs = False  # backward regenerates the mask; it reads no input array

    def forward(self, x, p=0.5, seed=0):
        self.p, self.seed = p, seed
        return P.dropout_forward(x, p, seed)

    def backward(self, dy):
        return P.dropout_backward(dy, self.p, self.seed)


def dropout(input, p=0.5, training=True, inplace=False):
    op = "dropout"
    _check_float_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p (the drop probability) must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    # Claim this call's counters on the device: no host value is frozen into a captured CUDA graph.
    claimed = P.philox_advance(random.philox_state(input.device), input.numel())
    return Dropout.apply(input, p=float(p), seed=claimed)
