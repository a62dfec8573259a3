"""torchvision.ops on minidl (vision/ops.py): box geometry, nms, the focal loss and the small layers. torchvision
does not import beside the CPU torch here, so the CPU checks are each function's defining properties and torch
formulas (BCE for the focal loss); where torchvision imports (the GPU machine), the same inputs are compared with
torchvision's own functions."""
import math

import numpy as np
import pytest
import torch

import minidl
from minidl.vision import ops

RNG = np.random.default_rng(0)
XY = RNG.uniform(0, 50, (7, 2))
BOXES = np.concatenate([XY, XY + RNG.uniform(5, 30, (7, 2))], 1)
SCORES = RNG.uniform(0, 1, 7)


def _pairwise_iou(a, b):
    out = np.zeros((len(a), len(b)))
    for i, p in enumerate(a):
        for j, q in enumerate(b):
            w = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
            h = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
            inter = w * h
            out[i, j] = inter / ((p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter)
    return out


def test_box_ious_are_their_definitions():
    t = minidl.tensor(BOXES)
    iou = ops.box_iou(t, t[:4]).numpy()
    np.testing.assert_allclose(iou, _pairwise_iou(BOXES, BOXES[:4]), rtol=1e-12)
    np.testing.assert_allclose(np.diag(ops.box_iou(t, t).numpy()), 1.0)
    giou, diou, ciou = (f(t, t[:4]).numpy() for f in (ops.generalized_box_iou, ops.distance_box_iou,
                                                       ops.complete_box_iou))
    assert (giou <= iou + 1e-12).all() and (giou >= -1).all() and (diou <= iou + 1e-12).all()
    assert (ciou <= diou + 1e-12).all()
    np.testing.assert_allclose(np.diag(ops.generalized_box_iou(t, t).numpy()), 1.0)
    far = minidl.tensor([[0.0, 0.0, 1.0, 1.0], [2.0, 0.0, 3.0, 1.0]], dtype=minidl.float64)   # disjoint: 3 x 1 around
    assert abs(float(ops.generalized_box_iou(far, far)[0, 1]) - (0 - (3 - 2) / 3)) < 1e-12


def test_box_geometry_helpers():
    t = minidl.tensor(BOXES)
    for fmt in ("xywh", "cxcywh"):
        np.testing.assert_allclose(ops.box_convert(ops.box_convert(t, "xyxy", fmt), fmt, "xyxy").numpy(), BOXES,
                                   rtol=1e-12)
    np.testing.assert_allclose(ops.box_convert(t, "xyxy", "xywh").numpy()[:, 2:], BOXES[:, 2:] - BOXES[:, :2])
    clipped = ops.clip_boxes_to_image(t, (40, 30)).numpy()
    assert clipped[:, [0, 2]].max() <= 30 and clipped[:, [1, 3]].max() <= 40
    sides = np.minimum(BOXES[:, 2] - BOXES[:, 0], BOXES[:, 3] - BOXES[:, 1])
    assert ops.remove_small_boxes(t, 15).tolist() == np.nonzero(sides >= 15)[0].tolist()
    np.testing.assert_allclose(ops.box_area(t).numpy(), (BOXES[:, 2] - BOXES[:, 0]) * (BOXES[:, 3] - BOXES[:, 1]))


def test_nms_is_the_greedy_rule():
    keep = ops.nms(minidl.tensor(BOXES), minidl.tensor(SCORES), 0.1).tolist()
    iou = _pairwise_iou(BOXES, BOXES)
    want, alive = [], np.ones(len(BOXES), bool)
    for i in np.argsort(-SCORES):
        if alive[i]:
            want.append(int(i))
            alive &= ~(iou[i] > 0.1)
    assert keep == want
    cats = minidl.tensor(np.arange(7) % 2)
    per_class = ops.batched_nms(minidl.tensor(BOXES), minidl.tensor(SCORES), cats, 0.1).tolist()
    for c in (0, 1):
        idx = np.nonzero(np.arange(7) % 2 == c)[0]
        sub = ops.nms(minidl.tensor(BOXES[idx]), minidl.tensor(SCORES[idx]), 0.1).tolist()
        assert [i for i in per_class if i % 2 == c] == idx[sub].tolist()


def test_focal_loss_and_stochastic_depth():
    x = RNG.standard_normal((4, 3))
    y = (RNG.uniform(size=(4, 3)) > 0.5).astype(np.float64)
    ours = ops.sigmoid_focal_loss(minidl.tensor(x), minidl.tensor(y), reduction="sum").item()
    p = torch.sigmoid(torch.tensor(x))
    ce = torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(x), torch.tensor(y), reduction="none")
    p_t = p * torch.tensor(y) + (1 - p) * (1 - torch.tensor(y))
    alpha_t = 0.25 * torch.tensor(y) + 0.75 * (1 - torch.tensor(y))
    assert abs(ours - float((alpha_t * ce * (1 - p_t) ** 2).sum())) < 1e-12
    minidl.manual_seed(0)
    z = minidl.ones(1000, 3, dtype=minidl.float64)
    out = ops.stochastic_depth(z, 0.25, "row").numpy()
    assert set(np.unique(out).tolist()) <= {0.0, 1 / 0.75} and abs((out[:, 0] > 0).mean() - 0.75) < 0.06
    assert (out == out[:, :1]).all()   # a whole row kept or dropped
    assert ops.stochastic_depth(z, 0.5, "batch", training=False) is z


def test_the_small_layers_have_torchvisions_structure():
    c = ops.Conv2dNormActivation(3, 8, 3, stride=2)
    assert [type(m).__name__ for m in c] == ["Conv2d", "BatchNorm2d", "ReLU"] and c[0].bias is None
    assert c[0].padding == (1, 1) and tuple(c(minidl.rand(1, 3, 8, 8)).shape) == (1, 8, 4, 4)
    assert [type(m).__name__ for m in ops.Conv2dNormActivation(3, 8, 1, norm_layer=False)] == ["Conv2d", "ReLU"]
    se = ops.SqueezeExcitation(8, 2)
    assert set(se.state_dict()) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    mlp = ops.MLP(4, [8, 3], dropout=0.1)
    assert [type(m).__name__ for m in mlp] == ["Linear", "ReLU", "Dropout", "Linear", "Dropout"]
    frozen = ops.FrozenBatchNorm2d(2)
    assert set(frozen.state_dict()) == {"weight", "bias", "running_mean", "running_var"} and not list(
        frozen.parameters())
    x = minidl.rand(1, 2, 3, 3)
    np.testing.assert_allclose(frozen(x).numpy(), x.numpy() / math.sqrt(1 + 1e-5), rtol=1e-6)


def test_against_torchvision_where_it_imports():
    tv = pytest.importorskip("torchvision.ops")
    tb, ts = torch.tensor(BOXES), torch.tensor(SCORES)
    mb, ms = minidl.tensor(BOXES), minidl.tensor(SCORES)
    for name in ("box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou"):
        np.testing.assert_allclose(getattr(ops, name)(mb, mb[:4]).numpy(), getattr(tv, name)(tb, tb[:4]).numpy(),
                                   rtol=1e-10, atol=1e-12)
    assert ops.nms(mb, ms, 0.1).tolist() == tv.nms(tb, ts, 0.1).tolist()
    cats = np.arange(7) % 3
    assert ops.batched_nms(mb, ms, minidl.tensor(cats), 0.2).tolist() == tv.batched_nms(
        tb, ts, torch.tensor(cats), 0.2).tolist()
    for fmt in ("xywh", "cxcywh"):
        np.testing.assert_allclose(ops.box_convert(mb, "xyxy", fmt).numpy(), tv.box_convert(tb, "xyxy", fmt).numpy())
    x, y = RNG.standard_normal((4, 3)), (RNG.uniform(size=(4, 3)) > 0.5).astype(np.float64)
    np.testing.assert_allclose(ops.sigmoid_focal_loss(minidl.tensor(x), minidl.tensor(y)).numpy(),
                               tv.sigmoid_focal_loss(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-12)


def test_roi_align_averages_bilinear_samples_over_each_bin():
    """On a map whose value is its x coordinate, bilinear samples are exact, so each bin's value is its centre's x;
    a constant map stays constant; the gradient spreads each bin's weight (summing to one) over the map."""
    h, w = 12, 16
    xs = np.tile(np.arange(w, dtype=np.float64), (h, 1))
    feat = minidl.tensor(np.stack([xs, xs * 0 + 7.0])[None], requires_grad=True)
    box = [0.0, 2.0, 2.0, 13.0, 9.0]   # (batch index, x1, y1, x2, y2)
    for aligned in (False, True):
        out = ops.roi_align(feat, minidl.tensor([box]), (3, 4), sampling_ratio=2, aligned=aligned)
        shift = 0.5 if aligned else 0.0
        start, bin_w = box[1] - shift, (box[3] - box[1]) / 4
        np.testing.assert_allclose(out.detach().numpy()[0, 0], np.tile(start + (np.arange(4) + 0.5) * bin_w, (3, 1)),
                                   rtol=1e-12)
        np.testing.assert_allclose(out.detach().numpy()[0, 1], 7.0, rtol=1e-12)
    feat.grad = None
    ops.roi_align(feat, [minidl.tensor([box[1:]])], 2, sampling_ratio=-1).sum().backward()
    np.testing.assert_allclose(feat.grad.numpy().sum(axis=(0, 2, 3)), [4.0, 4.0])   # 2 x 2 bins, weights sum to 1
    with pytest.raises(IndexError, match="image 3"):
        ops.roi_align(feat, minidl.tensor([[3.0, 1.0, 1.0, 4.0, 4.0]]), 2)


def test_roi_align_against_torchvision_where_it_imports():
    tv = pytest.importorskip("torchvision.ops")
    x = np.random.default_rng(5).standard_normal((2, 3, 10, 12))
    boxes = np.array([[0, 1.0, 1.0, 6.0, 5.0], [1, 0.5, 2.0, 11.5, 9.5], [0, 3.0, 3.0, 3.5, 3.2],
                      [1, -2.0, -1.0, 4.0, 20.0]])
    for ratio in (-1, 2):
        for aligned in (False, True):
            ours = minidl.tensor(x, requires_grad=True)
            theirs = torch.tensor(x, requires_grad=True)
            a = ops.roi_align(ours, minidl.tensor(boxes), (3, 2), 0.5, ratio, aligned)
            b = tv.roi_align(theirs, torch.tensor(boxes), (3, 2), 0.5, ratio, aligned)
            (a * a).sum().backward()
            (b * b).sum().backward()
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)
