"""torchvision.transforms.v2: the same transforms (minidl.vision.transforms), which take PIL images, uint8 arrays
and tensors alike, plus v2's conversions: ToImage (an image as a uint8 tensor (C, H, W)), ToDtype (with scale=True,
0..255 integers to 0..1 floats and back) and ToPureTensor, and the batch transforms MixUp and CutMix (after the
DataLoader's collate, on a batch of images and its labels)."""
from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from .. import random as _random
from . import functional  # noqa: F401  (torchvision.transforms.v2.functional)
from .augment import ConvertImageDtype
from .transforms import *  # noqa: F401,F403  (v2 keeps v1's names)
from .transforms import Compose, PILToTensor, __getattr__ as _missing  # noqa: F401


class ToImage:
    """A PIL image or an array (H, W[, C]) as a tensor (C, H, W) of its dtype; a tensor as it is."""

    def __call__(self, img):
        if isinstance(img, Tensor):
            return img
        return PILToTensor()(np.asarray(img))


class ToDtype:
    """A tensor to dtype; with scale=True its values rescaled between the integer (0..255) and float (0..1)
    ranges, as ConvertImageDtype. dtype may be a dict {type: dtype} (v2's form); the image's entry is used."""

    def __init__(self, dtype, scale=False):
        if isinstance(dtype, dict):
            dtype = next((v for k, v in dtype.items() if k is not None and v is not None), None) or dtype.get(None)
        self.dtype, self.scale = np.dtype(dtype), scale

    def __call__(self, img):
        if not isinstance(img, Tensor):
            return img
        return ConvertImageDtype(self.dtype)(img) if self.scale else img.type(self.dtype)


class ToPureTensor:
    def __call__(self, img):
        return img


class _BatchMix:
    """What MixUp and CutMix share: a batch (B, C, H, W) and its labels (B,) class indices (or (B, num_classes)
    already one-hot), a mixing ratio lam ~ Beta(alpha, alpha), each sample mixed with the one before it in the batch
    (the batch rolled by one), and the labels mixed by the same ratio into soft targets (B, num_classes), which
    cross_entropy takes as probabilities."""

    def __init__(self, *, alpha=1.0, num_classes=None, labels_getter="default"):
        if alpha <= 0:
            raise ValueError(f"{type(self).__name__}: alpha must be > 0, got {alpha}")
        if num_classes is not None and num_classes < 1:
            raise ValueError(f"{type(self).__name__}: num_classes must be >= 1, got {num_classes}")
        if labels_getter != "default":
            raise NotImplementedError(f"{type(self).__name__}: only labels_getter='default' (call it as "
                                      f"{type(self).__name__.lower()}(images, labels))")
        self.alpha, self.num_classes = float(alpha), num_classes

    def _inputs(self, *inputs):
        images, labels = inputs if len(inputs) == 2 else (inputs[0] if len(inputs) == 1 else (None, None))
        name = type(self).__name__
        if not isinstance(images, Tensor) or not isinstance(labels, Tensor) or images.ndim != 4:
            raise ValueError(f"{name}: expects a batch of images (B, C, H, W) and its labels, as {name.lower()}"
                             f"(images, labels) after the DataLoader's collate")
        if labels.ndim == 1:
            if self.num_classes is None:
                raise ValueError(f"{name}: num_classes is needed to one-hot the labels (B,) (or pass one-hot "
                                 f"labels (B, num_classes))")
            from ..nn import functional as nnF

            labels = nnF.one_hot(labels, self.num_classes).type(images.dtype if images.dtype.kind == "f" else
                                                                np.float32)
        if labels.shape[0] != images.shape[0]:
            raise ValueError(f"{name}: {images.shape[0]} images but {labels.shape[0]} labels")
        return images, labels

    def _lam(self):
        return float(_random.cpu_generator().beta(self.alpha, self.alpha))

    @staticmethod
    def _mix(x, lam):
        return x.roll(1, 0) * (1.0 - lam) + x * lam


class MixUp(_BatchMix):
    """MixUp (Zhang et al., 2018): images and labels both lam * x + (1 - lam) * x_rolled."""

    def __call__(self, *inputs):
        images, labels = self._inputs(*inputs)
        lam = self._lam()
        mixed = self._mix(images, lam)
        return (mixed if images.dtype.kind == "f" else mixed.type(images.dtype)), self._mix(labels, lam)


class CutMix(_BatchMix):
    """CutMix (Yun et al., 2019): a box of area about (1 - lam) of each image replaced by the rolled batch's, the labels
    mixed by the box's exact share (torchvision's box: centre uniform in the image, sides sqrt(1 - lam) of the
    image's, clipped at the borders)."""

    def __call__(self, *inputs):
        images, labels = self._inputs(*inputs)
        lam = self._lam()
        h, w = images.shape[-2:]
        rng = _random.cpu_generator()
        rx, ry = int(rng.integers(w)), int(rng.integers(h))
        r = 0.5 * np.sqrt(1.0 - lam)
        half_w, half_h = int(r * w), int(r * h)
        x1, y1, x2, y2 = max(rx - half_w, 0), max(ry - half_h, 0), min(rx + half_w, w), min(ry + half_h, h)
        out = images.clone()
        out[..., y1:y2, x1:x2] = images.roll(1, 0)[..., y1:y2, x1:x2]
        lam = 1.0 - (x2 - x1) * (y2 - y1) / (w * h)
        return out, self._mix(labels, lam)


def __getattr__(name):
    return _missing(name)
