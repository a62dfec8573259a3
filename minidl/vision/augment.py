"""torchvision's random augmentations and the remaining per-sample transforms, over minidl.vision.functional.

Random choices come from minidl's global generator (minidl.manual_seed; each DataLoader worker seeds its own), as
the other transforms' do. Their parameters are drawn as torchvision draws them, so the distributions match; the
numbers do not, since the generators differ:
- RandomResizedCrop: ten tries at an area in `scale` and a log-uniform aspect ratio, then a central crop;
- ColorJitter: the four factors, in a random order;
- RandomErasing: a rectangle of area in `scale` and ratio in `ratio`.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from .. import random as _random
from ..autograd.tensor import Tensor
from . import functional as F


def _rng():
    return _random.cpu_generator()


def _hw(img):
    if isinstance(img, Tensor):
        return tuple(img.shape[-2:])
    return tuple(np.asarray(img).shape[:2])


def _range(value, name, center=1.0, bound=(0, float("inf"))):
    """A jitter amount as a (min, max) range: a number v gives (center - v, center + v), clipped to bound."""
    if value is None:
        return None
    if isinstance(value, numbers.Number):
        if value < 0:
            raise ValueError(f"ColorJitter: if {name} is a single number, it must be non negative, got {value}")
        low, high = center - value, center + value
        low = max(low, bound[0]) if bound[0] is not None else low
    else:
        low, high = (float(v) for v in value)
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"ColorJitter: {name} values should be between {bound}, got ({low}, {high})")
    return None if low == high == center else (low, high)


class RandomResizedCrop:
    """A random crop of area scale * the image's and aspect ratio in `ratio`, resized to `size`."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0), interpolation="bilinear",
                 antialias=True):
        self.size = (size, size) if isinstance(size, numbers.Integral) else tuple(size)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"RandomResizedCrop: scale and ratio should be of kind (min, max), got {scale}, {ratio}")
        self.scale, self.ratio, self.interpolation = tuple(scale), tuple(ratio), interpolation

    @staticmethod
    def get_params(img, scale, ratio):
        """(top, left, height, width) of the crop."""
        height, width = _hw(img)
        area = height * width
        rng = _rng()
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(scale[0], scale[1])
            aspect = math.exp(rng.uniform(*log_ratio))
            w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        in_ratio = width / height
        if in_ratio < min(ratio):
            w, h = width, int(round(width / min(ratio)))
        elif in_ratio > max(ratio):
            h, w = height, int(round(height * max(ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        top, left, h, w = self.get_params(img, self.scale, self.ratio)
        return F.resized_crop(img, top, left, h, w, self.size, self.interpolation)

    def __repr__(self):
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class RandomAffine:
    """A random rotation (degrees), translation (fractions of the size), scale and shear (degrees)."""

    def __init__(self, degrees, translate=None, scale=None, shear=None, interpolation="nearest", fill=0, center=None):
        self.degrees = (-degrees, degrees) if isinstance(degrees, numbers.Number) else tuple(degrees)
        self.translate, self.scale, self.interpolation, self.fill, self.center = translate, scale, interpolation, \
            fill, center
        self.shear = None if shear is None else ((-shear, shear) if isinstance(shear, numbers.Number) else tuple(shear))

    def __call__(self, img):
        rng = _rng()
        h, w = _hw(img)
        angle = rng.uniform(*self.degrees)
        tx = ty = 0.0
        if self.translate is not None:
            tx = float(round(rng.uniform(-self.translate[0] * w, self.translate[0] * w)))
            ty = float(round(rng.uniform(-self.translate[1] * h, self.translate[1] * h)))
        scale = 1.0 if self.scale is None else rng.uniform(*self.scale)
        shear = (0.0, 0.0)
        if self.shear is not None:
            shear = (rng.uniform(self.shear[0], self.shear[1]),
                     rng.uniform(self.shear[2], self.shear[3]) if len(self.shear) == 4 else 0.0)
        return F.affine(img, angle, (tx, ty), scale, shear, self.interpolation, self.fill, self.center)

    def __repr__(self):
        return f"RandomAffine(degrees={self.degrees})"


class RandomRotation(RandomAffine):
    """A rotation by an angle drawn uniformly from degrees ((-d, d) for a number)."""

    def __init__(self, degrees, interpolation="nearest", expand=False, center=None, fill=0):
        if expand:
            raise NotImplementedError("RandomRotation: expand=True is not implemented (the output keeps the size)")
        super().__init__(degrees, interpolation=interpolation, fill=fill, center=center)

    def __call__(self, img):
        return F.rotate(img, float(_rng().uniform(*self.degrees)), self.interpolation, False, self.center, self.fill)

    def __repr__(self):
        return f"RandomRotation(degrees={self.degrees})"


class ColorJitter:
    """Random brightness, contrast, saturation and hue changes, applied in a random order."""

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        self.brightness = _range(brightness, "brightness")
        self.contrast = _range(contrast, "contrast")
        self.saturation = _range(saturation, "saturation")
        self.hue = _range(hue, "hue", center=0.0, bound=(-0.5, 0.5))

    def __call__(self, img):
        rng = _rng()
        adjust = {0: (self.brightness, F.adjust_brightness), 1: (self.contrast, F.adjust_contrast),
                  2: (self.saturation, F.adjust_saturation), 3: (self.hue, F.adjust_hue)}
        for k in rng.permutation(4):
            bounds, fn = adjust[int(k)]
            if bounds is not None:
                img = fn(img, float(rng.uniform(*bounds)))
        return img

    def __repr__(self):
        return (f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}, "
                f"hue={self.hue})")


class Grayscale:
    def __init__(self, num_output_channels=1):
        self.num_output_channels = num_output_channels

    def __call__(self, img):
        return F.rgb_to_grayscale(img, self.num_output_channels)

    def __repr__(self):
        return f"Grayscale(num_output_channels={self.num_output_channels})"


class RandomGrayscale:
    """Grayscale with probability p, keeping the number of channels."""

    def __init__(self, p=0.1):
        self.p = float(p)

    def __call__(self, img):
        if _rng().random() >= self.p:
            return img
        channels = img.shape[-3] if isinstance(img, Tensor) else (1 if np.asarray(img).ndim == 2 else
                                                                   np.asarray(img).shape[2])
        return F.rgb_to_grayscale(img, channels)


class RandomApply:
    """The transforms, in order, with probability p (else the image as it is)."""

    def __init__(self, transforms, p=0.5):
        self.transforms, self.p = list(transforms), float(p)

    def __call__(self, img):
        if _rng().random() >= self.p:
            return img
        for t in self.transforms:
            img = t(img)
        return img


class RandomChoice:
    """One of the transforms, picked at random (with probabilities p). Several inputs are passed on together (v2's
    form: RandomChoice([MixUp(...), CutMix(...)])(images, labels))."""

    def __init__(self, transforms, p=None):
        self.transforms, self.p = list(transforms), p

    def __call__(self, *inputs):
        weights = None if self.p is None else np.asarray(self.p, dtype=np.float64) / np.sum(self.p)
        return self.transforms[int(_rng().choice(len(self.transforms), p=weights))](*inputs)


class RandomOrder:
    """The transforms in a random order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for k in _rng().permutation(len(self.transforms)):
            img = self.transforms[int(k)](img)
        return img


class GaussianBlur:
    """A Gaussian blur of an odd kernel_size, sigma drawn uniformly from sigma (a range, or a number)."""

    def __init__(self, kernel_size, sigma=(0.1, 2.0)):
        self.kernel_size = kernel_size
        self.sigma = (float(sigma), float(sigma)) if isinstance(sigma, numbers.Number) else tuple(sigma)

    def __call__(self, img):
        s = float(_rng().uniform(*self.sigma))
        return F.gaussian_blur(img, self.kernel_size, [s, s])


class RandomPerspective:
    """With probability p, a perspective warp: each corner moved inwards by up to distortion_scale of half the
    image's side (torchvision's get_params), bilinear by default."""

    def __init__(self, distortion_scale=0.5, p=0.5, interpolation="bilinear", fill=0):
        if not 0 <= distortion_scale <= 1:
            raise ValueError(f"RandomPerspective: distortion_scale must be in [0, 1], got {distortion_scale}")
        self.distortion_scale, self.p, self.interpolation, self.fill = distortion_scale, float(p), interpolation, fill

    @staticmethod
    def get_params(width, height, distortion_scale):
        """(startpoints, endpoints): the image's corners, and each corner moved inwards at random."""
        rng = _rng()
        dw, dh = int(distortion_scale * (width // 2)), int(distortion_scale * (height // 2))
        near = lambda limit: int(rng.integers(0, limit + 1))   # noqa: E731
        far = lambda size, limit: int(rng.integers(size - limit - 1, size))   # noqa: E731
        endpoints = [[near(dw), near(dh)], [far(width, dw), near(dh)], [far(width, dw), far(height, dh)],
                     [near(dw), far(height, dh)]]
        startpoints = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
        return startpoints, endpoints

    def __call__(self, img):
        if _rng().random() >= self.p:
            return img
        h, w = _hw(img)
        start, end = self.get_params(w, h, self.distortion_scale)
        return F.perspective(img, start, end, self.interpolation, self.fill)

    def __repr__(self):
        return f"RandomPerspective(p={self.p})"


class _RandomOp:
    """With probability p, one of transforms.functional's operations (the Random<Op> transforms of torchvision)."""

    def __init__(self, p=0.5):
        self.p = float(p)

    def __call__(self, img):
        return self.apply(img) if _rng().random() < self.p else img

    def __repr__(self):
        return f"{type(self).__name__}(p={self.p})"


class RandomVerticalFlip(_RandomOp):
    """Mirror top-bottom with probability p."""

    def apply(self, img):
        return F.vflip(img)


class RandomInvert(_RandomOp):
    def apply(self, img):
        return F.invert(img)


class RandomAutocontrast(_RandomOp):
    def apply(self, img):
        return F.autocontrast(img)


class RandomEqualize(_RandomOp):
    def apply(self, img):
        return F.equalize(img)


class RandomPosterize(_RandomOp):
    def __init__(self, bits, p=0.5):
        super().__init__(p)
        self.bits = bits

    def apply(self, img):
        return F.posterize(img, self.bits)


class RandomSolarize(_RandomOp):
    def __init__(self, threshold, p=0.5):
        super().__init__(p)
        self.threshold = threshold

    def apply(self, img):
        return F.solarize(img, self.threshold)


class RandomAdjustSharpness(_RandomOp):
    def __init__(self, sharpness_factor, p=0.5):
        super().__init__(p)
        self.sharpness_factor = sharpness_factor

    def apply(self, img):
        return F.adjust_sharpness(img, self.sharpness_factor)


class RandomErasing:
    """On a tensor (C, H, W), with probability p: a rectangle of area in `scale` (fraction of the image) and aspect
    ratio in `ratio` set to value (a number, per-channel values, or "random" for normal noise)."""

    def __init__(self, p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False):
        if not 0 <= p <= 1:
            raise ValueError(f"RandomErasing: p should be between 0 and 1, got {p}")
        self.p, self.scale, self.ratio, self.value, self.inplace = float(p), scale, ratio, value, inplace

    def __call__(self, img):
        if not isinstance(img, Tensor):
            raise TypeError(f"RandomErasing: expects a tensor (C, H, W) (after ToTensor), got {type(img).__name__}")
        rng = _rng()
        if rng.random() >= self.p:
            return img
        c, h, w = img.shape[-3:]
        area = h * w
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            erase_area = area * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(*log_ratio))
            eh, ew = int(round(math.sqrt(erase_area * aspect))), int(round(math.sqrt(erase_area / aspect)))
            if eh < h and ew < w:
                if self.value == "random":
                    v = Tensor._make(rng.standard_normal((c, eh, ew)).astype(img.dtype))
                else:
                    v = Tensor._make(np.broadcast_to(np.asarray(self.value, dtype=img.dtype).reshape(-1, 1, 1),
                                                     (c, eh, ew)).copy())
                i, j = int(rng.integers(0, h - eh + 1)), int(rng.integers(0, w - ew + 1))
                return F.erase(img, i, j, eh, ew, v, self.inplace)
        return img


class ToPILImage:
    def __init__(self, mode=None):
        self.mode = mode

    def __call__(self, pic):
        return F.to_pil_image(pic, self.mode)


class ConvertImageDtype:
    """A tensor image to another dtype, rescaling between integer (0..255) and float (0..1) ranges."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def __call__(self, image):
        src, dst = image.dtype, self.dtype
        if src.kind == dst.kind or (src.kind in "iu" and dst.kind in "iu"):
            return image.type(dst)
        if dst.kind == "f":
            return image.type(dst) / float(np.iinfo(src).max)
        top = float(np.iinfo(dst).max)
        return (image * (top + 1.0 - 1e-3)).floor().clamp(0, top).type(dst)


__all__ = ["RandomResizedCrop", "RandomVerticalFlip", "RandomAffine", "RandomRotation", "ColorJitter", "Grayscale",
           "RandomGrayscale", "RandomApply", "RandomChoice", "RandomOrder", "GaussianBlur", "RandomErasing",
           "ToPILImage", "ConvertImageDtype"]
