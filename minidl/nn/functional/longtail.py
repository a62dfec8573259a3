"""More of torch.nn.functional's long tail, composed of minidl's ops as composite.py's (the gradients are the
tape's through the parts; torch's names, arguments and formulas):

    vision       channel_shuffle (ShuffleNet)
    dropout      alpha_dropout, feature_alpha_dropout (SELU networks: the mean and variance kept)
    activation   rrelu (randomized leaky ReLU)
    pooling      lp_pool1d, lp_pool2d, lp_pool3d (the power-average pool)
    losses       multi_margin_loss, multilabel_margin_loss, triplet_margin_with_distance_loss
    distances    pdist (the distances between the rows of one matrix)
"""
from __future__ import annotations

import numpy as np

from ...autograd.tensor import Tensor
from ...ops import where
from ._checks import _check_float_tensor, _reduce
from .composite import _check_reduction, pairwise_distance

# ------------------------------------------------------------------------------------------------ vision


def channel_shuffle(input, groups):
    """(N, C, *) -> the channels regrouped: split into `groups`, then interleaved (ShuffleNet's shuffle)."""
    if input.ndim < 3:
        raise ValueError(f"channel_shuffle: expected an input of at least 3 dims (N, C, *), got {tuple(input.shape)}")
    n, c = input.shape[0], input.shape[1]
    if groups <= 0 or c % groups:
        raise ValueError(f"channel_shuffle: number of channels ({c}) must be divisible by groups ({groups})")
    rest = tuple(input.shape[2:])
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(n, c, *rest)


# ------------------------------------------------------------------------------------------------ dropout
_SELU_ALPHA_PRIME = -1.7580993408473766   # -scale * alpha of SELU: where a dropped unit goes


def _alpha_dropout(op, input, p, training, feature):
    _check_float_tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    from ...ops.creation import rand

    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2) if feature else tuple(input.shape)
    keep = (rand(*shape, dtype=input.dtype, device=input.device) >= p).to(input.dtype)
    a = ((1 - p) * (1 + p * _SELU_ALPHA_PRIME ** 2)) ** -0.5
    b = -a * _SELU_ALPHA_PRIME * p
    return (input * keep + _SELU_ALPHA_PRIME * (1 - keep)) * a + b


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks (Klambauer et al. 2017): dropped units take SELU's negative saturation value, then
    an affine map restores the mean 0 and variance 1 of the input."""
    return _alpha_dropout("alpha_dropout", input, p, training, feature=False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout of whole channels (one draw per (N, C))."""
    return _alpha_dropout("feature_alpha_dropout", input, p, training, feature=True)


# ------------------------------------------------------------------------------------------------ activation
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU (Xu et al. 2015): negative inputs scaled by a slope drawn from U(lower, upper) per
    element in training, by their mean (lower + upper) / 2 in evaluation."""
    _check_float_tensor("rrelu", "input", input)
    if training:
        from ...ops.creation import rand

        slope = rand(*input.shape, dtype=input.dtype, device=input.device) * (upper - lower) + lower
    else:
        slope = (lower + upper) / 2
    return where(input >= 0, input, input * slope)


# ------------------------------------------------------------------------------------------------ pooling
def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    """(sum over each window of x^p)^(1/p): average pooling of x^p, times the window, to the power 1/p."""
    from .pooling import avg_pool1d

    k = kernel_size if isinstance(kernel_size, int) else kernel_size[0]
    out = avg_pool1d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * k).pow(1.0 / norm_type)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    from .pooling import avg_pool2d

    kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
    out = avg_pool2d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * (kh * kw)).pow(1.0 / norm_type)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    from .pooling import avg_pool3d

    kd, kh, kw = (kernel_size,) * 3 if isinstance(kernel_size, int) else kernel_size
    out = avg_pool3d(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (out.sign() * out.abs().relu() * (kd * kh * kw)).pow(1.0 / norm_type)


# ------------------------------------------------------------------------------------------------ losses
def _class_rows(op, input, target):
    if input.ndim not in (1, 2):
        raise ValueError(f"{op}: input must be (C,) or (N, C), got {tuple(input.shape)}")
    unbatched = input.ndim == 1
    return ((input.unsqueeze(0), target.reshape(1, -1)) if unbatched else (input, target)), unbatched


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
    """The multi-class hinge loss: per row, sum over the classes i != y of max(0, margin - x[y] + x[i])^p / C
    (each term times weight[y] with weights)."""
    op = "multi_margin_loss"
    _check_reduction(op, reduction)
    if p not in (1, 2):
        raise ValueError(f"{op}: only p == 1 and p == 2 supported")
    (x, t), unbatched = _class_rows(op, input, target)
    t = t.reshape(-1)
    C = x.shape[1]
    picked = x.gather(1, t.unsqueeze(1))                                  # x[y]
    terms = (margin - picked + x).clamp(min=0)
    if p == 2:
        terms = terms * terms
    if weight is not None:
        terms = terms * weight[t].unsqueeze(1)
    from ...ops.creation import arange

    others = arange(C, device=x.device).unsqueeze(0) != t.unsqueeze(1)   # every class but the row's own
    per_row = (terms * others.to(terms.dtype)).sum(1) / C
    out = _reduce(per_row, reduction)
    return out.squeeze(0) if unbatched and reduction == "none" else out


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Per row: sum over its target classes j (target's entries up to the first -1) and the other classes i of
    max(0, 1 - (x[j] - x[i])) / C. (The targets are read on the host: a sync on the GPU.)"""
    op = "multilabel_margin_loss"
    _check_reduction(op, reduction)
    (x, t), unbatched = _class_rows(op, input, target)
    C = x.shape[1]
    tt = t.detach().cpu().numpy().astype(np.int64)
    is_target = np.zeros(tt.shape[:1] + (C,), dtype=bool)
    pairs = np.zeros(tt.shape[:1] + (C,), dtype=np.float64)   # how often class j counts as a target of the row
    for row, labels in enumerate(tt):
        for j in labels:
            if j < 0:
                break
            is_target[row, j] = True
            pairs[row, j] += 1
    device = x.device
    weight_j = Tensor._make(pairs).to(device).to(x.dtype)                       # (N, C): target multiplicities
    non_target = Tensor._make(~is_target).to(device).to(x.dtype)               # (N, C)
    hinge = (1 - (x.unsqueeze(2) - x.unsqueeze(1))).clamp(min=0)                # [n, j, i]
    per_row = (hinge * weight_j.unsqueeze(2) * non_target.unsqueeze(1)).sum((1, 2)) / C
    out = _reduce(per_row, reduction)
    return out.squeeze(0) if unbatched and reduction == "none" else out


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) with any distance function (pairwise_distance by
    default); swap: d(anchor, negative) replaced by d(positive, negative) where that is smaller."""
    _check_reduction("triplet_margin_with_distance_loss", reduction)
    dist = distance_function if distance_function is not None else pairwise_distance
    d_ap, d_an = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_an = d_an.minimum(dist(positive, negative))
    return _reduce((margin + d_ap - d_an).clamp(min=0), reduction)


# ------------------------------------------------------------------------------------------------ distances
def pdist(input, p=2):
    """The p-norm distances between the rows of input (N, M), for every pair i < j in order: N (N - 1) / 2 values
    (torch.pdist; the distances of cdist, whose gradient at a zero distance is zero)."""
    from ...ops.creation import triu_indices
    from ...ops.linalg import cdist

    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    n = input.shape[0]
    rows, cols = triu_indices(n, n, 1, device=input.device)
    return cdist(input, input, p=p)[rows, cols]


# ------------------------------------------------------------------------------------------------ in-place forms
def _in_place(name, fn):
    """F.<name>_(input, ...): fn's result written into input (a Tensor in-place op: the tape records it as
    torch's does)."""
    def inplace(input, *args, **kwargs):
        return input._inplace(f"{name}_", lambda t: fn(t, *args, **kwargs))

    inplace.__name__ = inplace.__qualname__ = f"{name}_"
    inplace.__doc__ = f"torch.nn.functional.{name}_: {name}, in place."
    return inplace


def _with_indices(fn):
    def with_indices(input, *args, **kwargs):
        kwargs["return_indices"] = True
        return fn(input, *args, **kwargs)

    with_indices.__name__ = with_indices.__qualname__ = f"{fn.__name__}_with_indices"
    return with_indices


def _late(name):   # (the functions of nn.functional, looked up when called: this module is imported inside it)
    def call(*args, **kwargs):
        from .. import functional as F

        return getattr(F, name)(*args, **kwargs)

    call.__name__ = name
    return call


relu_ = _in_place("relu", _late("relu"))
elu_ = _in_place("elu", _late("elu"))
leaky_relu_ = _in_place("leaky_relu", _late("leaky_relu"))
hardtanh_ = _in_place("hardtanh", _late("hardtanh"))
selu_ = _in_place("selu", _late("selu"))
celu_ = _in_place("celu", _late("celu"))
threshold_ = _in_place("threshold", _late("threshold"))
rrelu_ = _in_place("rrelu", rrelu)
max_pool1d_with_indices = _with_indices(_late("max_pool1d"))
max_pool2d_with_indices = _with_indices(_late("max_pool2d"))
max_pool3d_with_indices = _with_indices(_late("max_pool3d"))
adaptive_max_pool1d_with_indices = _with_indices(_late("adaptive_max_pool1d"))
adaptive_max_pool2d_with_indices = _with_indices(_late("adaptive_max_pool2d"))
adaptive_max_pool3d_with_indices = _with_indices(_late("adaptive_max_pool3d"))

FUNCTIONS = ["channel_shuffle", "alpha_dropout", "feature_alpha_dropout", "rrelu", "lp_pool1d", "lp_pool2d", "lp_pool3d",
             "multi_margin_loss", "multilabel_margin_loss", "triplet_margin_with_distance_loss", "pdist", "relu_", "elu_",
             "leaky_relu_", "hardtanh_", "selu_", "celu_", "threshold_", "rrelu_", "max_pool1d_with_indices",
             "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_max_pool1d_with_indices",
             "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices"]
