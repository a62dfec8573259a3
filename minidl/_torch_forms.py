"""torch's top-level forms of nn.functional's operations: torch.conv2d, torch.dropout(input, p, train),
torch.batch_norm(input, weight, bias, running_mean, running_var, ...), torch.embedding(weight, indices), ...

Programs call these as often as the F.* forms (older code, and code translated from ATen's names). Most take the
arguments of their F.* twin in the same order and are that function; the ones whose order or names differ in torch
(dropout's `train`, the norms' weight-before-statistics order and their trailing `cudnn_enabled`, embedding's weight
first) are written out here with torch's order. minidl/__init__.py binds them on first use (`minidl.conv2d`)."""
from __future__ import annotations

import importlib

# torch.<name> that is nn.functional.<name> with the same positional arguments
SAME_AS_FUNCTIONAL = (
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "avg_pool1d",
    "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_avg_pool1d", "selu", "celu", "hardshrink", "threshold",
    "prelu", "rrelu", "pdist", "pairwise_distance", "cosine_similarity", "pixel_shuffle", "pixel_unshuffle",
    "channel_shuffle", "bilinear", "rms_norm", "relu_", "selu_", "celu_", "rrelu_", "threshold_",
)


def _F():
    return importlib.import_module("minidl.nn.functional")


def dropout(input, p, train):
    """torch.dropout(input, p, train): F.dropout with `train` for `training`."""
    return _F().dropout(input, p, training=train)


def alpha_dropout(input, p, train):
    return _F().alpha_dropout(input, p, training=train)


def feature_alpha_dropout(input, p, train):
    return _F().feature_alpha_dropout(input, p, training=train)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """torch.batch_norm: the affine parameters before the running statistics (F.batch_norm has them after)."""
    return _F().batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps,
                  cudnn_enabled=True):
    return _F().instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return _F().layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    return _F().group_norm(input, num_groups, weight, bias, eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch.embedding(weight, indices): the table first (F.embedding takes the indices first); padding_idx -1: none."""
    return _F().embedding(indices, weight, None if padding_idx == -1 else padding_idx,
                          scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


WRITTEN_OUT = ("dropout", "alpha_dropout", "feature_alpha_dropout", "batch_norm", "instance_norm", "layer_norm",
               "group_norm", "embedding")


def resolve(name):
    """The function torch.<name> is, or None when it is not one of these."""
    if name in WRITTEN_OUT:
        return globals()[name]
    if name in SAME_AS_FUNCTIONAL:
        return getattr(_F(), name)
    return None
