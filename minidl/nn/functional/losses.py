"""Losses. cross_entropy is one Function whose backward is (softmax - target) scaled, instead of a chain
of small ops each saving its own intermediate; the others are ordinary array math, written once for
NumPy and CuPy."""
from __future__ import annotations

import warnings

import numpy as np

from ..._dtypes import is_floating, is_half, promote_floats
from ... import _device, backends
from ... import primitives as P
from ..._device import get_array_module, is_cuda_array
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from ...amp import autocast_mode as _amp
from ...ops import where
from ._checks import (_check_float_tensor, _check_reduction, _check_same_device, _check_same_dtype, _check_tensor, _reduce)


def _check_class_targets(op, input, target, ignore_index):
    """Check class-index targets (N, d1, ...) against input (N, C, d1, ...): dtype, shape, and, on the CPU
    (or with minidl.backends.cuda.check_indices), that every index is in range or ignore_index. On the
    GPU that check would read a flag back and wait for the GPU in every step, so there an out-of-range
    index makes its row's loss and gradient NaN instead (in the kernels) and nothing raises."""
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
    if is_cuda_array(t) and not backends.cuda.check_indices:
        return
    if is_cuda_array(t):
        _device.check_not_capturing(f"{op} with minidl.backends.cuda.check_indices=True",
                                    "the eager index check reads a flag back from the GPU")
    if not t.size or (is_cuda_array(t) is False and 0 <= t.min() and t.max() < C):   # the CPU's common case
        return
    bad = (t != ignore_index) & ((t < 0) | (t >= C))
    if bool(bad.any()):  # on the GPU: one reduction read back, so one sync
        xp = get_array_module(t)
        first = int(t[xp.nonzero(bad)[0][0]])
        raise ValueError(
            f"{op}: target holds class index {first}, out of range for {C} classes (input {input.shape}); "
            f"valid indices are 0..{C - 1} or ignore_index={ignore_index}"
        )


def _class_targets(op, input, target, ignore_index):
    """_check_class_targets, then (C, t, valid, bad) for the losses written as array math (nll_loss): t the
    targets as (M,), valid the rows that count, bad the rows out of range (None when checked above)."""
    _check_class_targets(op, input, target, ignore_index)
    C, t = input.shape[1], target._data.reshape(-1)
    in_range = (t >= 0) & (t < C)
    not_ignored = t != ignore_index
    checked = not is_cuda_array(t) or backends.cuda.check_indices
    return C, t, not_ignored & in_range, None if checked else not_ignored & ~in_range


def _check_weight(op, weight, C, input):
    if weight is None:
        return
    _check_float_tensor(op, "weight", weight)
    if weight.shape != (C,):
        raise ValueError(f"{op}: weight has shape {weight.shape}, expected ({C},) for input {input.shape}")
    _check_same_device(op, input=input, weight=weight)


def _to_rows(x):
    """(N, C, d1, ...) -> (N * d1 * ..., C): classes last, one row per prediction."""
    if x.ndim == 2:   # (N, C) already is (a classifier's logits: no moveaxis, whose checks cost more than this loss)
        return x
    C = x.shape[1]
    return get_array_module(x).moveaxis(x, 1, -1).reshape(-1, C)


def _from_rows(rows, shape):
    """Inverse of _to_rows for an array of shape `shape` = (N, C, d1, ...)."""
    if len(shape) == 2:
        return rows.reshape(shape)
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


def _reduce_rows(per_row, reduction, denom, out_shape):
    """The per-row losses reduced: their sum / denom ("mean": denom counts the weighted, non-ignored
    rows), their sum, or each row in the input's batch shape ("none")."""
    if reduction == "mean":
        return per_row.sum() / denom
    if reduction == "sum":
        return per_row.sum()
    return per_row.reshape(out_shape)


class CrossEntropy(Function):
    """log-softmax and the negative log-likelihood at class indices, one op over one primitive pair
    (primitives.cross_entropy_forward / _backward: on the GPU one kernel pass each way, plus one block
    for the reduction). Saved for backward: the logits, the targets and two numbers per row (max, log-sum-exp)."""

    def forward(self, x, target, weight, reduction="mean", ignore_index=-100, label_smoothing=0.0, loss_dtype=None):
        self.params = dict(reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
        loss, self.stats, self.denom = P.cross_entropy_forward(x, target, weight, loss_dtype=loss_dtype, **self.params)
        self.x, self.target, self.weight = x, target, weight
        return loss

    def backward(self, g):
        dx = P.cross_entropy_backward(self.x, self.target, self.stats, g, self.denom, self.weight, **self.params)
        return dx, None, None

    def backward_graph(self, g):
        """The same gradient as tensor ops (create_graph=True): scale * (sum_c q_c softmax(x) - q), q the weighted,
        smoothed one-hot targets (_class_weights_matrix), for (N, C) logits."""
        x = self.inputs[0]
        if x.ndim != 2:
            raise NotImplementedError("cross_entropy with create_graph=True: (N, C) logits only in minidl (reshape "
                                      "(N, C, d1, ...) logits to rows first)")
        valid = self.target != self.params["ignore_index"]
        q, denom = _class_weights_matrix(self.target, valid, self.weight, x.shape[1], self.params["label_smoothing"],
                                         np.dtype(x.dtype))
        q = Tensor._make(q)
        reduction = self.params["reduction"]
        scale = g / Tensor._make(denom) if reduction == "mean" else (g if reduction == "sum" else g.reshape(-1, 1))
        return (q.sum(1, keepdim=True) * x.softmax(1) - q) * scale, None, None


class CrossEntropyProbabilities(Function):
    """log-softmax and the negative log-likelihood against class probabilities in one op.

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
        return _reduce_rows(per_row, reduction, denom, out_shape)

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


def _class_loss_arguments(op, input, target, weight, size_average, reduce, reduction, keep_input=False):
    """What cross_entropy and nll_loss check first: no deprecated reduction flags, autocast (both run in
    float32; keep_input: the input stays 16-bit, the op reads it in float32 itself), a float input, a target tensor,
    a known reduction. Returns (input, target, weight)."""
    if size_average is not None or reduce is not None:
        raise ValueError(f"{op}: size_average and reduce are deprecated; use reduction=")
    if _amp.regions and not keep_input:
        input, target, weight = _amp.cast_inputs(op, input, target, weight)
    _check_float_tensor(op, "input", input)
    _check_tensor(op, "target", target)
    _check_reduction(op, reduction)
    return input, target, weight


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross-entropy of logits `input` (N, C) or (N, C, d1, ...) (or (C,) unbatched) against
    class indices `target` (N) / (N, d1, ...) (integers) or class probabilities (float, input's shape)."""
    op = "cross_entropy"
    # Under autocast, 16-bit logits on the GPU against class indices are not cast to float32: the kernels read them
    # as they are, in float32 (torch's log_softmax(x, dtype=float32) does the same), return a float32 loss and write the
    # gradient in the logits' dtype: the values of the cast, without its two passes over the logits.
    half_logits = bool(_amp.regions) and weight is None and getattr(input, "is_cuda", False) and \
        getattr(target, "dtype", None) is not None and not is_floating(target.dtype) and _amp.casts_to_float32(op, input)
    input, target, weight = _class_loss_arguments(op, input, target, weight, size_average, reduce, reduction,
                                                  keep_input=half_logits)
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
        if ignore_index != -100:
            raise RuntimeError(f"{op}: ignore_index is not supported for floating point (probability) targets; "
                               "zero those rows' weights instead (as torch raises)")
        xp = get_array_module(input._data)
        p = _to_rows(target._data)
        if label_smoothing:
            p = p * dtype.type(1 - label_smoothing) + dtype.type(label_smoothing / C)
        w_arr = w if w is not None else xp.ones((C,), dtype=dtype)
        q = p * w_arr[None, :]
        denom = dtype.type(p.shape[0])  # PyTorch: mean over the predictions, not the weights
        return CrossEntropyProbabilities.apply(input, target, q, denom, reduction=reduction,
                                               out_shape=(input.shape[0],) + input.shape[2:],
                                               prob_smoothing=(label_smoothing, w_arr))
    _check_class_targets(op, input, target, ignore_index)
    return CrossEntropy.apply(input, target, weight, reduction=reduction, ignore_index=ignore_index,
                              label_smoothing=label_smoothing, loss_dtype=np.float32 if half_logits else None)


class NLLLoss(Function):
    """loss_m = -sum_c q_mc x_mc for log-probabilities x; the gradient is -q (scaled by the reduction)."""

    def forward(self, x, q, denom, reduction="mean", out_shape=None):
        self.in_shape, self.q, self.denom, self.reduction = x.shape, q, denom, reduction
        per_row = -(q * _to_rows(x)).sum(axis=1)
        return _reduce_rows(per_row, reduction, denom, out_shape)

    def backward(self, g):
        scale = CrossEntropyProbabilities._row_grad_scale(self, g)
        return _from_rows(-scale * self.q, self.in_shape), None, None


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """Negative log-likelihood of log-probabilities `input` (N, C) / (N, C, d1, ...) at class indices `target`."""
    op = "nll_loss"
    input, target, weight = _class_loss_arguments(op, input, target, weight, size_average, reduce, reduction)
    if input.ndim == 1:
        out = nll_loss(input.reshape(1, -1), target.reshape((1,) + target.shape), weight, None, ignore_index,
                       None, reduction)
        return out.reshape(()) if reduction == "none" else out
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C) or (N, C, d1, ...), got shape {input.shape}")
    _check_same_device(op, input=input, target=target)
    C = input.shape[1]
    _check_weight(op, weight, C, input)
    C, t, valid, bad = _class_targets(op, input, target, ignore_index)
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
    if _amp.regions:
        input, target = _amp.cast_inputs("mse_loss", input, target)
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
    if _amp.regions:
        input, target = _amp.cast_inputs("l1_loss", input, target)
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
    if _amp.regions:
        input, target, weight, pos_weight = _amp.cast_inputs(op, input, target, weight, pos_weight)
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


class BinaryCrossEntropy(Function):
    """-w [y log p + (1 - y) log(1 - p)] on probabilities p, each log clamped to >= -100 (as torch, so that
    p = 0 or 1 gives a finite loss); dL/dp = w (p - y) / max(p (1 - p), 1e-12), dL/dy = w (log(1 - p) - log p)."""

    def forward(self, p, y, weight=None):
        xp = get_array_module(p)
        self.p, self.y, self.weight = p, y, weight
        with np.errstate(divide="ignore"):   # log(0) = -inf, clamped to -100 just below
            self.log_p = xp.maximum(xp.log(p), -100)
            self.log_1mp = xp.maximum(xp.log1p(-p), -100)
        loss = -(y * self.log_p + (1 - y) * self.log_1mp)
        return (loss if weight is None else loss * weight).astype(p.dtype)

    def backward(self, g):
        xp = get_array_module(g)
        if self.weight is not None:
            g = g * self.weight
        dp = dy = None
        if self.needs_input_grad[0]:
            dp = (g * (self.p - self.y) / xp.maximum(self.p * (1 - self.p), 1e-12)).astype(self.p.dtype)
        if self.needs_input_grad[1]:
            dy = (g * (self.log_1mp - self.log_p)).astype(self.p.dtype)
        return dp, dy, None


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Binary cross-entropy on probabilities input in [0, 1] (after a sigmoid); prefer
    binary_cross_entropy_with_logits on the logits, which is exact where the sigmoid saturates."""
    op = "binary_cross_entropy"
    _check_same_shape(op, input, target)
    _check_reduction(op, reduction)
    xp = get_array_module(input._data)
    if bool(xp.any((input._data < 0) | (input._data > 1))):
        raise RuntimeError(f"{op}: all elements of input should be between 0 and 1")
    if weight is not None:
        _check_float_tensor(op, "weight", weight)
        try:
            if np.broadcast_shapes(weight.shape, input.shape) != input.shape:
                raise ValueError
        except ValueError:
            raise ValueError(f"{op}: weight of shape {weight.shape} does not broadcast to input {input.shape}") from None
    loss = BinaryCrossEntropy.apply(input, target, None if weight is None else weight._data)
    return _reduce(loss, reduction)
