"""Layers over nn/functional/composite.py (torch.nn's long tail), plus ParameterList and ParameterDict.

Activations: SiLU, Mish, SELU, CELU, Hardtanh, Hardsigmoid, Hardswish, LogSigmoid, Softsign, Tanhshrink,
Softshrink, Hardshrink, Threshold, GLU, PReLU (a learned slope), Softmin. Normalisation: GroupNorm,
InstanceNorm1d/2d/3d. Distances: CosineSimilarity, PairwiseDistance. Losses: KLDivLoss, HuberLoss,
SoftMarginLoss, MarginRankingLoss, HingeEmbeddingLoss, PoissonNLLLoss, GaussianNLLLoss, CosineEmbeddingLoss,
TripletMarginLoss, MultiLabelSoftMarginLoss. Vision: PixelShuffle, PixelUnshuffle, Upsample,
UpsamplingNearest2d, UpsamplingBilinear2d. Names, arguments, parameters and state-dict keys are torch's.
"""
from __future__ import annotations

from collections import OrderedDict

from ..._device import Device
from ...ops.creation import full, ones, zeros
from .. import functional as F
from ..module import Module, Parameter
from .loss import _Loss
from .normalization import _NormBase
from .pooling import _AdaptiveAvgPoolNd


def _simple(name, fn, params=(), doc=""):
    """A layer whose forward is fn(input, **its arguments) and whose repr lists them, as torch's."""
    names = [p for p, _ in params]

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = dict(params)
        for key, value in zip(names + ["inplace"], args):
            values[key] = value
        for key, value in kwargs.items():
            if key != "inplace" and key not in values:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument '{key}'")
            values[key] = value
        self.inplace = values.pop("inplace", False)
        for key in names:
            setattr(self, key, values[key])

    def forward(self, input):
        return fn(input, *[getattr(self, k) for k in names])

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)}" for k in names)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__doc__": doc or f"torch.nn.{name} (minidl.nn.functional.{fn.__name__})",
                                  "__module__": __name__})


SiLU = _simple("SiLU", F.silu)
Mish = _simple("Mish", F.mish)
SELU = _simple("SELU", F.selu)
CELU = _simple("CELU", F.celu, [("alpha", 1.0)])
Hardsigmoid = _simple("Hardsigmoid", F.hardsigmoid)
Hardswish = _simple("Hardswish", F.hardswish)
LogSigmoid = _simple("LogSigmoid", F.logsigmoid)
Softsign = _simple("Softsign", F.softsign)
Tanhshrink = _simple("Tanhshrink", F.tanhshrink)
Softshrink = _simple("Softshrink", F.softshrink, [("lambd", 0.5)])
Hardshrink = _simple("Hardshrink", F.hardshrink, [("lambd", 0.5)])
Softshrink.extra_repr = Hardshrink.extra_repr = lambda self: str(self.lambd)     # torch's: Softshrink(0.3)
GLU = _simple("GLU", F.glu, [("dim", -1)])


class Hardtanh(Module):
    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False):
        super().__init__()
        if min_val > max_val:
            raise ValueError("min_val cannot be greater than max_val")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Threshold(Module):
    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}"


class Softmin(Module):
    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return F.softmin(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class PReLU(Module):
    """A leaky ReLU whose negative slope is learned: one for all channels, or one per channel."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, dtype=dtype, device=None if device is None else Device(device)))

    def reset_parameters(self):
        self.weight.data.fill_(self.init)

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


# ------------------------------------------------------------------------------------------------ normalization
class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        factory = dict(dtype=dtype, device=None if device is None else Device(device))
        if affine:
            self.weight = Parameter(ones(num_channels, **factory))
            if bias:
                self.bias = Parameter(zeros(num_channels, **factory))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _InstanceNorm(_NormBase):
    """Parameters, buffers and repr from _NormBase (as batch norm's); here affine and track_running_stats are
    off by default, as in torch."""
    _ranks = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False, device=None,
                 dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input):
        name = type(self).__name__
        if input.ndim not in self._ranks:
            raise ValueError(f"{name}: expected {' or '.join(f'{r}D' for r in self._ranks)} input "
                             f"(got {input.ndim}D input)")
        batched = input.ndim == self._ranks[-1]
        x = input if batched else input.unsqueeze(0)
        use_input_stats = self.training or not self.track_running_stats
        y = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_input_stats,
                            self.momentum if self.momentum is not None else 0.1, self.eps)
        return y if batched else y.squeeze(0)


class InstanceNorm1d(_InstanceNorm):
    _ranks = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    _ranks = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    _ranks = (4, 5)


# ------------------------------------------------------------------------------------------------ distances
class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


# ------------------------------------------------------------------------------------------------ losses
class CTCLoss(_Loss):
    """nn.CTCLoss(blank=0, reduction='mean', zero_infinity=False): F.ctc_loss (nn/functional/ctc.py)."""

    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction=reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)


class KLDivLoss(_Loss):
    reductions = ("mean", "sum", "none", "batchmean")

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input, target):
        return F.huber_loss(input, target, self.reduction, self.delta)


class SoftMarginLoss(_Loss):
    def forward(self, input, target):
        return F.soft_margin_loss(input, target, reduction=self.reduction)


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return F.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return F.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                     reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(reduction=reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


# ------------------------------------------------------------------------------------------------ vision
class Unfold(Module):
    """Sliding local blocks as columns: F.unfold (nn/functional/patches.py)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """Columns summed back into an image: F.fold (nn/functional/patches.py)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.size, self.mode, self.align_corners = size, mode, align_corners
        self.scale_factor = float(scale_factor) if isinstance(scale_factor, (int, float)) else scale_factor
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        info = f"size={self.size}" if self.scale_factor is None else f"scale_factor={self.scale_factor}"
        return info + f", mode='{self.mode}'"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class _AdaptiveMaxPool(_AdaptiveAvgPoolNd):
    """Adaptive pooling (pooling.py's base: output_size, its repr) that can also return the argmax indices."""

    def __init__(self, output_size, return_indices=False):
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input):
        return type(self)._fn(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(_AdaptiveMaxPool):
    _fn = staticmethod(F.adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMaxPool):
    _fn = staticmethod(F.adaptive_max_pool2d)


class AdaptiveMaxPool3d(_AdaptiveMaxPool):
    _fn = staticmethod(F.adaptive_max_pool3d)


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings (torch.nn.EmbeddingBag): the text-classification layer of
    PyTorch's torchtext tutorial. weight starts N(0, 1), as torch's."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None, device=None,
                 dtype=None):
        super().__init__()
        from ...ops.creation import randn

        self.num_embeddings, self.embedding_dim, self.max_norm, self.norm_type = (num_embeddings, embedding_dim,
                                                                                  max_norm, norm_type)
        self.scale_grad_by_freq, self.mode, self.sparse = scale_grad_by_freq, mode, sparse
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(randn(num_embeddings, embedding_dim, dtype=dtype,
                                          device=None if device is None else Device(device)))
            if padding_idx is not None:
                self.weight.data[padding_idx] = 0

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        """An EmbeddingBag holding `embeddings` (rows, dim) as its weight; freeze=True: not trained."""
        if embeddings.ndim != 2:
            raise ValueError(f"EmbeddingBag.from_pretrained: embeddings must be 2-D, got shape {tuple(embeddings.shape)}")
        bag = cls(embeddings.shape[0], embeddings.shape[1], max_norm=max_norm, norm_type=norm_type,
                  scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse, _weight=embeddings,
                  include_last_offset=include_last_offset, padding_idx=padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        s += f", mode='{self.mode}'"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


# ------------------------------------------------------------------------------------------------ containers
class ParameterList(Module):
    """A list of Parameters that the module registers (named "0", "1", ... in the state dict, as torch)."""

    def __init__(self, values=None):
        super().__init__()
        for v in values or []:
            self.append(v)

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __getitem__(self, idx):
        items = list(self._parameters.values())
        if isinstance(idx, slice):
            return ParameterList(items[idx])
        return items[idx]

    def __setitem__(self, idx, value):
        key = str(idx % len(self) if idx < 0 else idx)
        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))

    def append(self, value):
        self.register_parameter(str(len(self)), value if isinstance(value, Parameter) else Parameter(value))
        return self

    def extend(self, values):
        for v in values:
            self.append(v)
        return self

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList is a container, not a layer: use its parameters in your forward()")

    def extra_repr(self):
        return "\n".join(f"({i}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
                         for i, p in enumerate(self))


class ParameterDict(Module):
    """A dict of Parameters that the module registers (insertion-ordered, as torch)."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, value):
        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))

    def __delitem__(self, key):
        del self._parameters[key]

    def __contains__(self, key):
        return key in self._parameters

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in (OrderedDict(items) if not isinstance(parameters, dict) else items):
            self[k] = v

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterDict is a container, not a layer: use its parameters in your forward()")


LAYERS = [
    "SiLU", "Mish", "SELU", "CELU", "Hardtanh", "Hardsigmoid", "Hardswish", "LogSigmoid", "Softsign", "Tanhshrink",
    "Softshrink", "Hardshrink", "Threshold", "GLU", "PReLU", "Softmin", "GroupNorm", "InstanceNorm1d",
    "InstanceNorm2d", "InstanceNorm3d", "CosineSimilarity", "PairwiseDistance", "KLDivLoss", "HuberLoss",
    "SoftMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "PoissonNLLLoss", "GaussianNLLLoss",
    "CosineEmbeddingLoss", "TripletMarginLoss", "MultiLabelSoftMarginLoss", "PixelShuffle", "PixelUnshuffle",
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "ParameterList", "ParameterDict",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "EmbeddingBag",
]
