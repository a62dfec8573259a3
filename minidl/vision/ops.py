"""torchvision.ops: box geometry, non-maximum suppression, the focal loss and the small layers torchvision's models
are made of (Conv2dNormActivation, SqueezeExcitation, MLP, StochasticDepth, FrozenBatchNorm2d, Permute).

Boxes are (N, 4) tensors in (x1, y1, x2, y2) unless said otherwise. The box functions are tensor ops, so they are
differentiable where torchvision's are (the IoU losses of detectors train through generalized_box_iou). nms and
batched_nms decide on the host (greedy, in order of decreasing score, as torchvision's CPU kernel) and return int64
indices on the boxes' device. roi_align finds its sample points on the host and gathers with tensor ops. Not here:
roi_pool, ps_roi_align, deform_conv2d, the detection models."""
from __future__ import annotations

import math

import numpy as np

from .. import nn
from ..autograd.tensor import Tensor
from ..ops import where


def box_area(boxes):
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def _intersection_union(boxes1, boxes2):
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = boxes1[:, None, :2].maximum(boxes2[None, :, :2])
    rb = boxes1[:, None, 2:].minimum(boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter, area1[:, None] + area2[None, :] - inter


def box_iou(boxes1, boxes2):
    """(N, M) intersection over union of every pair."""
    inter, union = _intersection_union(boxes1, boxes2)
    return inter / union


def _enclosing(boxes1, boxes2):
    lt = boxes1[:, None, :2].minimum(boxes2[None, :, :2])
    rb = boxes1[:, None, 2:].maximum(boxes2[None, :, 2:])
    return (rb - lt).clamp(min=0)


def generalized_box_iou(boxes1, boxes2):
    """IoU - (area of the enclosing box not covered by the union) / (area of the enclosing box)."""
    inter, union = _intersection_union(boxes1, boxes2)
    wh = _enclosing(boxes1, boxes2)
    area = wh[..., 0] * wh[..., 1]
    return inter / union - (area - union) / area


def _diou(boxes1, boxes2, eps):
    iou = box_iou(boxes1, boxes2)
    wh = _enclosing(boxes1, boxes2)
    diagonal = wh[..., 0] ** 2 + wh[..., 1] ** 2 + eps
    c1 = (boxes1[:, :2] + boxes1[:, 2:]) / 2
    c2 = (boxes2[:, :2] + boxes2[:, 2:]) / 2
    distance = ((c1[:, None, :] - c2[None, :, :]) ** 2).sum(-1)
    return iou - distance / diagonal, iou


def distance_box_iou(boxes1, boxes2, eps=1e-7):
    """IoU - (distance of the centres)^2 / (diagonal of the enclosing box)^2."""
    return _diou(boxes1, boxes2, eps)[0]


def complete_box_iou(boxes1, boxes2, eps=1e-7):
    """distance_box_iou - alpha v, v = (4 / pi^2) (atan(w2 / h2) - atan(w1 / h1))^2 the aspect-ratio term."""
    diou, iou = _diou(boxes1, boxes2, eps)
    w1, h1 = boxes1[:, 2] - boxes1[:, 0], boxes1[:, 3] - boxes1[:, 1]
    w2, h2 = boxes2[:, 2] - boxes2[:, 0], boxes2[:, 3] - boxes2[:, 1]
    v = (4 / math.pi ** 2) * ((w2 / h2).atan()[None, :] - (w1 / h1).atan()[:, None]) ** 2
    alpha = (v / (1 - iou + v + eps)).detach()
    return diou - alpha * v


def box_convert(boxes, in_fmt, out_fmt):
    """Between 'xyxy', 'xywh' (corner, size) and 'cxcywh' (centre, size)."""
    fmts = ("xyxy", "xywh", "cxcywh")
    if in_fmt not in fmts or out_fmt not in fmts:
        raise ValueError(f"box_convert: unsupported box format, expected one of {fmts}, got {in_fmt!r} / {out_fmt!r}")
    if in_fmt == out_fmt:
        return boxes.clone()
    from ..ops.joining import stack

    a, b, c, d = boxes.unbind(-1)
    if in_fmt == "xywh":
        a, b, c, d = a, b, a + c, b + d
    elif in_fmt == "cxcywh":
        a, b, c, d = a - c / 2, b - d / 2, a + c / 2, b + d / 2
    if out_fmt == "xywh":
        return stack([a, b, c - a, d - b], -1)
    if out_fmt == "cxcywh":
        return stack([(a + c) / 2, (b + d) / 2, c - a, d - b], -1)
    return stack([a, b, c, d], -1)


def clip_boxes_to_image(boxes, size):
    """Boxes clipped to an image of size (height, width)."""
    from ..ops.joining import stack

    height, width = size
    x1, y1, x2, y2 = boxes.unbind(-1)
    return stack([x1.clamp(0, width), y1.clamp(0, height), x2.clamp(0, width), y2.clamp(0, height)], -1)


def remove_small_boxes(boxes, min_size):
    """The indices of the boxes whose sides are both at least min_size."""
    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return ((ws >= min_size) & (hs >= min_size)).nonzero().reshape(-1)


def nms(boxes, scores, iou_threshold):
    """Greedy non-maximum suppression: the indices of the boxes kept, by decreasing score; a box is dropped when its
    IoU with a kept one exceeds iou_threshold."""
    if boxes.ndim != 2 or boxes.shape[-1] != 4 or scores.shape != boxes.shape[:1]:
        raise ValueError(f"nms: boxes must be (N, 4) and scores (N,), got {tuple(boxes.shape)} and "
                         f"{tuple(scores.shape)}")
    b = boxes.detach()._host_array().astype(np.float64)
    order = np.argsort(-scores.detach()._host_array(), kind="stable")
    areas = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    suppressed = np.zeros(len(b), dtype=bool)
    keep = []
    for i in order:
        if suppressed[i]:
            continue
        keep.append(i)
        lt = np.maximum(b[i, :2], b[:, :2])
        rb = np.minimum(b[i, 2:], b[:, 2:])
        wh = np.clip(rb - lt, 0, None)
        inter = wh[:, 0] * wh[:, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return Tensor(np.asarray(keep, dtype=np.int64), device=boxes.device)


def batched_nms(boxes, scores, idxs, iou_threshold):
    """nms within each category idxs (boxes of different categories never suppress each other)."""
    if boxes.numel() == 0:
        return Tensor(np.zeros(0, dtype=np.int64), device=boxes.device)
    offsets = idxs.type(boxes.dtype) * (boxes.max() + 1)
    return nms(boxes + offsets[:, None], scores, iou_threshold)


def _rois(boxes):
    """(K, 5) rows (batch index, x1, y1, x2, y2) as a float64 host array: from such a tensor, or from a list of
    (L, 4) box tensors, one per image."""
    if isinstance(boxes, (list, tuple)):
        rows = [np.concatenate([np.full((len(b), 1), i), b.detach()._host_array()], 1) for i, b in enumerate(boxes)]
        return np.concatenate(rows, 0).astype(np.float64) if rows else np.zeros((0, 5))
    return boxes.detach()._host_array().astype(np.float64)


def _bilinear_taps(y, x, height, width):
    """torchvision's roi_align sampling of one point: four (flat index, weight) taps, none outside the map."""
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return []
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= height - 1:
        y0 = y1 = height - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= width - 1:
        x0 = x1 = width - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return [(y0 * width + x0, (1 - ly) * (1 - lx)), (y0 * width + x1, (1 - ly) * lx),
            (y1 * width + x0, ly * (1 - lx)), (y1 * width + x1, ly * lx)]


def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    """Each region's features pooled to output_size by averaging bilinear samples on a regular grid in each bin
    (He et al., Mask R-CNN; torchvision's sampling rules: sampling_ratio <= 0 takes ceil(bin size) samples a side,
    aligned=True shifts the boxes by half a pixel). (K, C, out_h, out_w); differentiable in input (not in boxes, as
    torchvision's). The sample positions are found on the host, the features gathered with tensor ops."""
    out_h, out_w = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    n, channels, height, width = input.shape
    rois = _rois(boxes)
    if len(rois) and (rois[:, 0].min() < 0 or rois[:, 0].max() >= n):
        bad = int(rois[:, 0].max() if rois[:, 0].max() >= n else rois[:, 0].min())
        raise IndexError(f"roi_align: a box refers to image {bad}, but the input holds {n} images (boxes are rows "
                         "(batch index, x1, y1, x2, y2), or a list of (L, 4) tensors, one per image)")
    index, weight, cell = [], [], []
    offset = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois):
        sx, sy = x1 * spatial_scale - offset, y1 * spatial_scale - offset
        rw, rh = x2 * spatial_scale - offset - sx, y2 * spatial_scale - offset - sy
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / out_h, rw / out_w
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / out_h))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / out_w))
        count = max(gh * gw, 1)
        base = int(b) * height * width
        for ph in range(out_h):
            for pw in range(out_w):
                target = (k * out_h + ph) * out_w + pw
                for iy in range(gh):
                    y = sy + ph * bh + (iy + 0.5) * bh / gh
                    for ix in range(gw):
                        x = sx + pw * bw + (ix + 0.5) * bw / gw
                        for flat, w in _bilinear_taps(y, x, height, width):
                            index.append(base + flat)
                            weight.append(w / count)
                            cell.append(target)
    cells = len(rois) * out_h * out_w
    if not index:
        return input.new_zeros(len(rois), channels, out_h, out_w)
    features = input.permute(1, 0, 2, 3).reshape(channels, n * height * width)
    taps = features.index_select(1, Tensor(np.asarray(index, dtype=np.int64), device=input.device))
    taps = taps * Tensor(np.asarray(weight), dtype=input.dtype, device=input.device)
    pooled = input.new_zeros(channels, cells).index_add(1, Tensor(np.asarray(cell, dtype=np.int64),
                                                                  device=input.device), taps)
    return pooled.reshape(channels, len(rois), out_h, out_w).permute(1, 0, 2, 3)


class RoIAlign(nn.Module):
    def __init__(self, output_size, spatial_scale, sampling_ratio, aligned=False):
        super().__init__()
        self.output_size, self.spatial_scale = output_size, spatial_scale
        self.sampling_ratio, self.aligned = sampling_ratio, aligned

    def forward(self, input, rois):
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def extra_repr(self):
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")


def sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2.0, reduction="none"):
    """The focal loss of RetinaNet (Lin et al., 2017): binary cross-entropy weighted by (1 - p_t)^gamma, and by
    alpha for the positives (1 - alpha for the negatives) when alpha >= 0."""
    from ..nn import functional as F

    p = inputs.sigmoid()
    ce = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * ((1 - p_t) ** gamma)
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    if reduction == "none":
        return loss
    if reduction in ("mean", "sum"):
        return getattr(loss, reduction)()
    raise ValueError(f"Invalid Value for arg 'reduction': '{reduction}' \\n Supported reduction modes: 'none', "
                     "'mean', 'sum'")


def stochastic_depth(input, p, mode, training=True):
    """Each sample's residual branch (mode 'row') or the whole batch's ('batch') dropped with probability p, the
    kept ones scaled by 1 / (1 - p) (Huang et al., 2016)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ("batch", "row"):
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival = 1.0 - p
    size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
    noise = input.new_empty(*size).bernoulli_(survival)
    if survival > 0.0:
        noise = noise / survival
    return input * noise


class StochasticDepth(nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, input):
        return stochastic_depth(input, self.p, self.mode, self.training)

    def extra_repr(self):
        return f"p={self.p}, mode={self.mode}"


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = list(dims)

    def forward(self, x):
        return x.permute(*self.dims)


class FrozenBatchNorm2d(nn.Module):
    """Batch norm with its statistics and affine parameters fixed (buffers, not parameters): x * w / sqrt(var + eps)
    + (b - mean * w / sqrt(var + eps)), as detection backbones freeze theirs."""

    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        from ..ops.creation import ones, zeros

        self.eps = eps
        self.register_buffer("weight", ones(num_features))
        self.register_buffer("bias", zeros(num_features))
        self.register_buffer("running_mean", zeros(num_features))
        self.register_buffer("running_var", ones(num_features))

    def forward(self, x):
        scale = self.weight.reshape(1, -1, 1, 1) * (self.running_var.reshape(1, -1, 1, 1) + self.eps).rsqrt()
        bias = self.bias.reshape(1, -1, 1, 1) - self.running_mean.reshape(1, -1, 1, 1) * scale
        return x * scale + bias

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


class _ConvNormActivation(nn.Sequential):
    def __init__(self, conv, in_channels, out_channels, kernel_size=3, stride=1, padding=None, groups=1,
                 norm_layer=None, activation_layer=None, dilation=1, inplace=True, bias=None, dims=2):
        norm_layer = nn.BatchNorm2d if norm_layer is None and dims == 2 else (
            nn.BatchNorm3d if norm_layer is None else norm_layer)
        activation_layer = nn.ReLU if activation_layer is None else activation_layer
        if padding is None:
            k = kernel_size if isinstance(kernel_size, int) else kernel_size[0]
            d = dilation if isinstance(dilation, int) else dilation[0]
            padding = (k - 1) // 2 * d
        if bias is None:
            bias = norm_layer is False
        layers = [conv(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation, groups=groups,
                       bias=bias)]
        if norm_layer is not False:
            layers.append(norm_layer(out_channels))
        if activation_layer is not False:
            layers.append(activation_layer(inplace=inplace) if inplace is not None else activation_layer())
        super().__init__(*layers)
        self.out_channels = out_channels


class Conv2dNormActivation(_ConvNormActivation):
    """conv -> norm (BatchNorm2d by default; False for none) -> activation (ReLU by default; False for none), the
    padding 'same' for odd kernels, and no bias when a norm follows (torchvision.ops.Conv2dNormActivation)."""

    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=None, groups=1,
                 norm_layer=None, activation_layer=None, dilation=1, inplace=True, bias=None):
        super().__init__(nn.Conv2d, in_channels, out_channels, kernel_size, stride, padding, groups, norm_layer,
                         activation_layer, dilation, inplace, bias, dims=2)


class Conv3dNormActivation(_ConvNormActivation):
    def __init__(self, in_channels, out_channels, kernel_size=3, stride=1, padding=None, groups=1,
                 norm_layer=None, activation_layer=None, dilation=1, inplace=True, bias=None):
        super().__init__(nn.Conv3d, in_channels, out_channels, kernel_size, stride, padding, groups, norm_layer,
                         activation_layer, dilation, inplace, bias, dims=3)


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation (Hu et al., 2018): channels rescaled by sigmoid(fc2(act(fc1(mean over space))))."""

    def __init__(self, input_channels, squeeze_channels, activation=None, scale_activation=None):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = (activation or nn.ReLU)()
        self.scale_activation = (scale_activation or nn.Sigmoid)()

    def forward(self, input):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(input)))))
        return scale * input


class MLP(nn.Sequential):
    """Linear layers of hidden_channels, each but the last followed by norm (optional), activation and dropout; the
    last by dropout (torchvision.ops.MLP)."""

    def __init__(self, in_channels, hidden_channels, norm_layer=None, activation_layer=None, inplace=None, bias=True,
                 dropout=0.0):
        activation_layer = nn.ReLU if activation_layer is None else activation_layer
        params = {} if inplace is None else {"inplace": inplace}
        layers, width = [], in_channels
        for hidden in hidden_channels[:-1]:
            layers.append(nn.Linear(width, hidden, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(hidden))
            layers.append(activation_layer(**params))
            layers.append(nn.Dropout(dropout, **params))
            width = hidden
        layers.append(nn.Linear(width, hidden_channels[-1], bias=bias))
        layers.append(nn.Dropout(dropout, **params))
        super().__init__(*layers)


__all__ = ["roi_align", "RoIAlign", "box_area", "box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou", "box_convert",
           "clip_boxes_to_image", "remove_small_boxes", "nms", "batched_nms", "sigmoid_focal_loss",
           "stochastic_depth", "StochasticDepth", "Permute", "FrozenBatchNorm2d", "Conv2dNormActivation",
           "Conv3dNormActivation", "SqueezeExcitation", "MLP"]
