"""Layers over nn/functional/longtail.py (torch's names, arguments and reprs): ChannelShuffle, Softmax2d, RReLU,
AlphaDropout, FeatureAlphaDropout, LPPool1d, LPPool2d, LPPool3d, MultiMarginLoss, MultiLabelMarginLoss,
TripletMarginWithDistanceLoss. The stateless ones come from composite.py's _simple, the dropouts are Dropout's."""
from __future__ import annotations

from .. import functional as F
from ..module import Module
from .composite import _Loss, _simple
from .dropout import Dropout


def _softmax2d(input):
    if input.ndim not in (3, 4):
        raise ValueError(f"Softmax2d: expected input of 3 or 4 dims, got {input.ndim}")
    return F.softmax(input, -3)


ChannelShuffle = _simple("ChannelShuffle", F.channel_shuffle, [("groups", None)])
Softmax2d = _simple("Softmax2d", _softmax2d, doc="softmax over the channels at every position of (N, C, H, W) or (C, H, W)")
LPPool1d = _simple("LPPool1d", F.lp_pool1d, [("norm_type", None), ("kernel_size", None), ("stride", None),
                                             ("ceil_mode", False)])
LPPool2d = _simple("LPPool2d", F.lp_pool2d, [("norm_type", None), ("kernel_size", None), ("stride", None),
                                             ("ceil_mode", False)])
LPPool3d = _simple("LPPool3d", F.lp_pool3d, [("norm_type", None), ("kernel_size", None), ("stride", None),
                                             ("ceil_mode", False)])


class RReLU(Module):
    def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}"


def _dropout(name, fn):
    """A Dropout layer (its p, its checks and repr) whose forward is fn(input, p, training)."""
    return type(name, (Dropout,), {"forward": lambda self, input: fn(input, self.p, self.training),
                                   "__module__": __name__, "__doc__": f"torch.nn.{name} (F.{fn.__name__})"})


AlphaDropout = _dropout("AlphaDropout", F.alpha_dropout)
FeatureAlphaDropout = _dropout("FeatureAlphaDropout", F.feature_alpha_dropout)


class MultiMarginLoss(_Loss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.p, self.margin = p, margin
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function=None, margin=1.0, swap=False, reduction="mean"):
        super().__init__(reduction=reduction)
        self.distance_function, self.margin, self.swap = distance_function, margin, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_with_distance_loss(anchor, positive, negative, distance_function=self.distance_function,
                                                   margin=self.margin, swap=self.swap, reduction=self.reduction)
