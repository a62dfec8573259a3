"""torchvision's automatic augmentation policies: AutoAugment (Cubuk et al., 2018: 25 sub-policies of two operations
learned on ImageNet, CIFAR-10 or SVHN), RandAugment (Cubuk et al., 2019: N random operations at one magnitude),
TrivialAugmentWide (Müller and Hutter, 2021: one random operation at a random magnitude) and AugMix (Hendrycks et
al., 2020: random chains of operations, mixed).

Each operation is one of minidl.vision.functional's (affine shears and translations, rotate, the colour
adjustments, posterize, solarize, autocontrast, equalize, invert) with torchvision's magnitude tables, so a
program's policy does here what it does in torchvision. Images are uint8 (a PIL image, a uint8 (H, W[, C]) array
as minidl's datasets give, or a uint8 (C, H, W) tensor): put these before ToTensor. The random choices come from
minidl's global generator, as the other transforms' do (the same distributions, not torch's numbers).
"""
from __future__ import annotations

import enum
import math

import numpy as np

from .. import random as _random
from ..autograd.tensor import Tensor
from . import functional as F

# The sub-policies of AutoAugment, as published: ((operation, probability, magnitude bin), twice); None: no
# magnitude. (The tables of torchvision.transforms.AutoAugmentPolicy.)
_POLICIES = {
    "imagenet": [
        (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
        (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
        (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
        (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
        (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
        (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
        (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
        (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
        (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
        (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
        (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    ],
    "cifar10": [
        (("Invert", 0.1, None), ("Contrast", 0.2, 6)), (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
        (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)), (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)), (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
        (("Color", 0.4, 3), ("Brightness", 0.6, 7)), (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
        (("Equalize", 0.6, None), ("Equalize", 0.5, None)), (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
        (("Color", 0.7, 7), ("TranslateX", 0.5, 8)), (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
        (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)), (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
        (("Solarize", 0.5, 2), ("Invert", 0.0, None)), (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
        (("Equalize", 0.2, None), ("Equalize", 0.6, None)), (("Color", 0.9, 9), ("Equalize", 0.6, None)),
        (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)), (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
        (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)), (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
        (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)), (("Equalize", 0.8, None), ("Invert", 0.1, None)),
        (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
    ],
    "svhn": [
        (("ShearX", 0.9, 4), ("Invert", 0.2, None)), (("ShearY", 0.9, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.6, None), ("Solarize", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Equalize", 0.6, None), ("Rotate", 0.9, 3)), (("ShearX", 0.9, 4), ("AutoContrast", 0.8, None)),
        (("ShearY", 0.9, 8), ("Invert", 0.4, None)), (("ShearY", 0.9, 5), ("Solarize", 0.2, 6)),
        (("Invert", 0.9, None), ("AutoContrast", 0.8, None)), (("Equalize", 0.6, None), ("Rotate", 0.9, 3)),
        (("ShearX", 0.9, 4), ("Solarize", 0.3, 3)), (("ShearY", 0.8, 8), ("Invert", 0.7, None)),
        (("Equalize", 0.9, None), ("TranslateY", 0.6, 6)), (("Invert", 0.9, None), ("Equalize", 0.6, None)),
        (("Contrast", 0.3, 3), ("Rotate", 0.8, 4)), (("Invert", 0.8, None), ("TranslateY", 0.0, 2)),
        (("ShearY", 0.7, 6), ("Solarize", 0.4, 8)), (("Invert", 0.6, None), ("Rotate", 0.8, 4)),
        (("ShearY", 0.3, 7), ("TranslateX", 0.9, 3)), (("ShearX", 0.1, 6), ("Invert", 0.6, None)),
        (("Solarize", 0.7, 2), ("TranslateY", 0.6, 7)), (("ShearY", 0.8, 4), ("Invert", 0.8, None)),
        (("ShearX", 0.7, 9), ("TranslateY", 0.8, 3)), (("ShearY", 0.8, 5), ("AutoContrast", 0.7, None)),
        (("ShearX", 0.7, 2), ("Invert", 0.1, None)),
    ],
}


class AutoAugmentPolicy(enum.Enum):
    """The datasets AutoAugment's policies were learned on."""

    IMAGENET = "imagenet"
    CIFAR10 = "cifar10"
    SVHN = "svhn"


def magnitudes(op, bins, size, wide=False):
    """(the magnitude of each bin, whether its sign is random) for one operation: torchvision's tables. size is
    (height, width); wide: TrivialAugmentWide's wider ranges."""
    top = 0.99 if wide else 0.9
    linear = {"ShearX": 0.99 if wide else 0.3, "ShearY": 0.99 if wide else 0.3,
              "TranslateX": 32.0 if wide else 150.0 / 331.0 * size[1],
              "TranslateY": 32.0 if wide else 150.0 / 331.0 * size[0],
              "Rotate": 135.0 if wide else 30.0, "Brightness": top, "Color": top, "Contrast": top, "Sharpness": top}
    if op in linear:
        return np.linspace(0.0, linear[op], bins), True
    if op == "Posterize":
        return 8 - np.round(np.arange(bins) / ((bins - 1) / (6 if wide else 4))).astype(np.int64), False
    if op == "Solarize":
        return np.linspace(255.0, 0.0, bins), False
    return None, False   # AutoContrast, Equalize, Invert, Identity: no magnitude


def apply_op(img, op, magnitude, interpolation="nearest", fill=None):
    """One named operation at one magnitude (torchvision's _apply_op)."""
    if op in ("ShearX", "ShearY"):   # the shear's tangent is the magnitude, about the upper-left corner
        shear = math.degrees(math.atan(magnitude))
        return F.affine(img, 0.0, (0, 0), 1.0, (shear, 0.0) if op == "ShearX" else (0.0, shear), interpolation, fill,
                        center=(0, 0))
    if op in ("TranslateX", "TranslateY"):
        shift = (int(magnitude), 0) if op == "TranslateX" else (0, int(magnitude))
        return F.affine(img, 0.0, shift, 1.0, (0.0, 0.0), interpolation, fill)
    simple = {
        "Rotate": lambda: F.rotate(img, magnitude, interpolation, fill=fill),
        "Brightness": lambda: F.adjust_brightness(img, 1.0 + magnitude),
        "Color": lambda: F.adjust_saturation(img, 1.0 + magnitude),
        "Contrast": lambda: F.adjust_contrast(img, 1.0 + magnitude),
        "Sharpness": lambda: F.adjust_sharpness(img, 1.0 + magnitude),
        "Posterize": lambda: F.posterize(img, int(magnitude)),
        "Solarize": lambda: F.solarize(img, magnitude),
        "AutoContrast": lambda: F.autocontrast(img),
        "Equalize": lambda: F.equalize(img),
        "Invert": lambda: F.invert(img),
        "Identity": lambda: img,
    }
    if op not in simple:
        raise ValueError(f"augmentation operation {op!r} is not recognized (one of ShearX, ShearY, TranslateX, "
                         f"TranslateY, {', '.join(simple)})")
    return simple[op]()


class _Policy:
    """What the three share: uint8 images only, the fill per channel, an interpolation mode, and torch's call
    forms (transform(img) and transform.forward(img))."""

    def __init__(self, interpolation, fill):
        self.interpolation = str(getattr(interpolation, "value", interpolation)).lower()
        self.fill = fill

    def _check(self, img):
        """(the image, a PIL image as its uint8 array (what every operation returns for one), the fill)."""
        if not isinstance(img, (Tensor, np.ndarray)):
            img = np.asarray(img)
        dtype = img.dtype
        if dtype != np.uint8:
            raise TypeError(f"{type(self).__name__}: expects a uint8 image (a PIL image, a uint8 array or a uint8 "
                            f"tensor), got {dtype}; put it before ToTensor, as torchvision's docs ask")
        if isinstance(self.fill, (int, float)):
            return img, [float(self.fill)] * F.get_image_num_channels(img)
        return img, None if self.fill is None else [float(f) for f in self.fill]

    def forward(self, img):
        return self(img)


class AutoAugment(_Policy):
    """AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation=NEAREST, fill=None): one of the policy's 25
    sub-policies at random; each of its two operations applied with its probability, at its magnitude, with a random
    sign where the operation has one."""

    def __init__(self, policy=AutoAugmentPolicy.IMAGENET, interpolation="nearest", fill=None):
        super().__init__(interpolation, fill)
        self.policy = AutoAugmentPolicy(policy)
        self.policies = _POLICIES[self.policy.value]

    @staticmethod
    def get_params(transform_num):
        """(sub-policy index, the two probabilities drawn, the two signs drawn), as torchvision's."""
        rng = _random.cpu_generator()
        return int(rng.integers(transform_num)), rng.random(2), rng.integers(0, 2, size=2)

    def __call__(self, img):
        img, fill = self._check(img)
        index, probs, signs = self.get_params(len(self.policies))
        _, h, w = F.get_dimensions(img)
        for i, (op, p, bin_) in enumerate(self.policies[index]):
            if probs[i] <= p:
                table, signed = magnitudes(op, 10, (h, w))
                magnitude = float(table[bin_]) if bin_ is not None else 0.0
                if signed and signs[i] == 0:
                    magnitude = -magnitude
                img = apply_op(img, op, magnitude, self.interpolation, fill)
        return img

    def __repr__(self):
        return f"AutoAugment(policy={self.policy}, fill={self.fill})"


_RAND_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
             "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")


class RandAugment(_Policy):
    """RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation=NEAREST, fill=None): num_ops
    operations drawn uniformly from 14 (with Identity), each at bin `magnitude`, with a random sign."""

    def __init__(self, num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation="nearest", fill=None):
        super().__init__(interpolation, fill)
        if not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"RandAugment: magnitude ({magnitude}) must be a bin in [0, num_magnitude_bins = "
                             f"{num_magnitude_bins})")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins

    def __call__(self, img):
        img, fill = self._check(img)
        rng = _random.cpu_generator()
        for _ in range(self.num_ops):
            _, h, w = F.get_dimensions(img)
            op = _RAND_OPS[int(rng.integers(len(_RAND_OPS)))]
            table, signed = magnitudes(op, self.num_magnitude_bins, (h, w))
            magnitude = float(table[self.magnitude]) if table is not None else 0.0
            if signed and rng.integers(2):
                magnitude = -magnitude
            img = apply_op(img, op, magnitude, self.interpolation, fill)
        return img

    def __repr__(self):
        return (f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude}, num_magnitude_bins="
                f"{self.num_magnitude_bins}, interpolation={self.interpolation}, fill={self.fill})")


class TrivialAugmentWide(_Policy):
    """TrivialAugmentWide(num_magnitude_bins=31, interpolation=NEAREST, fill=None): one operation of the 14, at a
    bin drawn uniformly from its wide range, with a random sign."""

    def __init__(self, num_magnitude_bins=31, interpolation="nearest", fill=None):
        super().__init__(interpolation, fill)
        self.num_magnitude_bins = num_magnitude_bins

    def __call__(self, img):
        img, fill = self._check(img)
        rng = _random.cpu_generator()
        op = _RAND_OPS[int(rng.integers(len(_RAND_OPS)))]
        table, signed = magnitudes(op, self.num_magnitude_bins, (0, 0), wide=True)
        magnitude = float(table[int(rng.integers(len(table)))]) if table is not None else 0.0
        if signed and rng.integers(2):
            magnitude = -magnitude
        return apply_op(img, op, magnitude, self.interpolation, fill)

    def __repr__(self):
        return (f"TrivialAugmentWide(num_magnitude_bins={self.num_magnitude_bins}, interpolation="
                f"{self.interpolation}, fill={self.fill})")


class AugMix(_Policy):
    """AugMix (Hendrycks et al., 2020): mixture_width chains of 1-3 random operations (chain_depth fixes it), each at a
    random bin below severity; the chains mixed with Dirichlet(alpha) weights, and the result mixed with the original
    by a Beta(alpha, alpha) ratio (torchvision's: the Dirichlet of (alpha, alpha) for that ratio). all_ops=False
    leaves out the colour operations that overlap ImageNet-C's corruptions (brightness, color, contrast, sharpness)."""

    _BINS = 10

    def __init__(self, severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True, interpolation="bilinear",
                 fill=None):
        super().__init__(interpolation, fill)
        if not 1 <= severity <= self._BINS:
            raise ValueError(f"AugMix: the severity must be between [1, {self._BINS}], got {severity}")
        self.severity, self.mixture_width, self.chain_depth = severity, mixture_width, chain_depth
        self.alpha, self.all_ops = alpha, all_ops
        self.ops = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Posterize", "Solarize", "AutoContrast",
                    "Equalize"] + (["Brightness", "Color", "Contrast", "Sharpness"] if all_ops else [])

    @staticmethod
    def _table(op, size):
        """AugMix's own ranges: translations up to a third of the side, posterize from 4 bits down to 0."""
        if op in ("TranslateX", "TranslateY"):
            return np.linspace(0.0, (size[1] if op == "TranslateX" else size[0]) / 3.0, AugMix._BINS), True
        if op == "Posterize":
            return 4 - np.round(np.arange(AugMix._BINS) / ((AugMix._BINS - 1) / 4)).astype(np.int64), False
        return magnitudes(op, AugMix._BINS, size)

    def __call__(self, img):
        img, fill = self._check(img)
        rng = _random.cpu_generator()
        chw, back = F._to_chw(img)
        _, h, w = F.get_dimensions(img)
        m = rng.dirichlet([self.alpha, self.alpha])
        weights = rng.dirichlet([self.alpha] * self.mixture_width) * m[1]
        mix = m[0] * chw
        for i in range(self.mixture_width):
            aug = img
            depth = self.chain_depth if self.chain_depth > 0 else int(rng.integers(1, 4))
            for _ in range(depth):
                op = self.ops[int(rng.integers(len(self.ops)))]
                table, signed = self._table(op, (h, w))
                magnitude = float(table[int(rng.integers(self.severity))]) if table is not None else 0.0
                if signed and rng.integers(2):
                    magnitude = -magnitude
                aug = apply_op(aug, op, magnitude, self.interpolation, fill)
            mix = mix + weights[i] * F._to_chw(aug)[0]
        return back(np.floor(mix))   # (uint8: truncated, as torchvision's .to(dtype))

    def __repr__(self):
        return (f"AugMix(severity={self.severity}, mixture_width={self.mixture_width}, chain_depth={self.chain_depth}, "
                f"alpha={self.alpha}, all_ops={self.all_ops}, interpolation={self.interpolation}, fill={self.fill})")
