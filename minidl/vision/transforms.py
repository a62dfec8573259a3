"""Per-sample image transforms with torchvision's names and semantics (torchvision.transforms).

An image is a NumPy uint8 array (H, W) or (H, W, C) as minidl's datasets return it, a PIL image
(anything with __array_interface__), or, after ToTensor, a float tensor (C, H, W). Random choices
come from minidl's global generator (`minidl.manual_seed`), which each DataLoader worker seeds with
base_seed + worker_id, as torch does. For fast augmentation of whole batches on the GPU use
minidl.data.transforms instead (see minidl.vision's docstring).
"""
from __future__ import annotations

import numbers

import numpy as np

from .. import random as _random
from .._dtypes import is_floating
from ..autograd.tensor import Tensor


def _pair(size, name):
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"{name}: size must be an int or (h, w), got {size!r}")
    return size


def _is_image_array(img):
    return isinstance(img, np.ndarray) or hasattr(img, "__array_interface__")


def _hw(img):
    """(height, width) of an image array (H, W[, C]) or a tensor (..., H, W)."""
    if isinstance(img, Tensor):
        return tuple(img.shape[-2:])
    return tuple(np.asarray(img).shape[:2])


class Compose:
    """Apply transforms in order: Compose([RandomCrop(28, 2), ToTensor(), Normalize((0.13,), (0.31,))])."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self):
        return "Compose(" + "".join(f"\n    {t!r}" for t in self.transforms) + "\n)"


class ToTensor:
    """An image (H, W) or (H, W, C) -> a float32 tensor (C, H, W); uint8 pixels are scaled to [0, 1],
    other dtypes keep their values (as torchvision.transforms.ToTensor)."""

    def __call__(self, pic):
        if isinstance(pic, Tensor):
            raise TypeError("ToTensor: the input is already a tensor (torchvision raises too); drop ToTensor")
        if not _is_image_array(pic):
            raise TypeError(f"ToTensor: expects a NumPy image (H, W[, C]) or a PIL image, got {type(pic).__name__}")
        arr = np.asarray(pic)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.ndim != 3:
            raise ValueError(f"ToTensor: expects an image of shape (H, W) or (H, W, C), got {arr.shape}")
        chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
        if chw.dtype == np.uint8:
            return Tensor._make(chw.astype(np.float32) / np.float32(255))
        if chw.dtype == np.bool_:
            chw = chw.astype(np.uint8)
        return Tensor._make(chw if is_floating(chw.dtype) else chw.astype(np.float32))

    def __repr__(self):
        return "ToTensor()"


class PILToTensor:
    """An image (H, W[, C]) -> a tensor (C, H, W) of the same dtype (no scaling)."""

    def __call__(self, pic):
        arr = np.asarray(pic)
        arr = arr[:, :, None] if arr.ndim == 2 else arr
        return Tensor._make(np.ascontiguousarray(arr.transpose(2, 0, 1)))


class Normalize:
    """(x - mean[c]) / std[c] on a float tensor (C, H, W) or (N, C, H, W) (torchvision.transforms.Normalize)."""

    def __init__(self, mean, std, inplace=False):
        self.mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        self.std = np.atleast_1d(np.asarray(std, dtype=np.float64))
        if (self.std == 0).any():
            raise ValueError(f"Normalize: std evaluated to zero after conversion to float, {self.std.tolist()}")
        self.inplace = inplace

    def __call__(self, tensor):
        if not isinstance(tensor, Tensor) or not is_floating(tensor.dtype) or tensor.ndim < 3:
            raise TypeError("Normalize: expects a float tensor (C, H, W) (apply ToTensor first), got "
                            f"{type(tensor).__name__} {getattr(tensor, 'shape', '')}")
        c = tensor.shape[-3]
        if self.mean.size not in (1, c) or self.std.size not in (1, c):
            raise ValueError(f"Normalize: {self.mean.size} means / {self.std.size} stds for an image with {c} channels")
        mean = Tensor._make(self.mean.astype(tensor.dtype).reshape(-1, 1, 1))
        std = Tensor._make(self.std.astype(tensor.dtype).reshape(-1, 1, 1))
        if self.inplace:
            return tensor.sub_(mean).div_(std)
        return (tensor - mean) / std

    def __repr__(self):
        return f"Normalize(mean={self.mean.tolist()}, std={self.std.tolist()})"


def _crop(img, top, left, h, w):
    if isinstance(img, Tensor):
        return img[..., top:top + h, left:left + w]
    return np.asarray(img)[top:top + h, left:left + w]


def _pad(img, padding, fill, padding_mode):
    """padding: (left, top, right, bottom), torchvision's order."""
    left, top, right, bottom = padding
    mode = {"constant": "constant", "edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}[padding_mode]
    kw = {"constant_values": fill} if mode == "constant" else {}
    if isinstance(img, Tensor):
        width = [(0, 0)] * (img.ndim - 2) + [(top, bottom), (left, right)]
        return Tensor._make(np.pad(img._host_array(), width, mode=mode, **kw))
    arr = np.asarray(img)
    width = [(top, bottom), (left, right)] + [(0, 0)] * (arr.ndim - 2)
    return np.pad(arr, width, mode=mode, **kw)


def _padding4(padding):
    if padding is None:
        return (0, 0, 0, 0)
    if isinstance(padding, numbers.Integral):
        return (padding,) * 4
    padding = tuple(int(p) for p in padding)
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    if len(padding) == 4:
        return padding
    raise ValueError(f"padding must be an int or a sequence of 2 or 4 ints, got {padding!r}")


class Pad:
    """Pad(padding, fill=0, padding_mode="constant"): pad an image (H, W[, C] array / PIL image, or a
    (..., H, W) tensor) on each side; padding an int, (left/right, top/bottom) or (left, top, right,
    bottom); padding_mode "constant", "edge", "reflect" or "symmetric", as torchvision."""

    def __init__(self, padding, fill=0, padding_mode="constant"):
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError(f"Pad: padding_mode must be constant, edge, reflect or symmetric, got {padding_mode!r}")
        self.padding, self.fill, self.padding_mode = _padding4(padding), fill, padding_mode

    def __call__(self, img):
        return _pad(img, self.padding, self.fill, self.padding_mode)

    def __repr__(self):
        return f"Pad(padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode})"


class RandomCrop:
    """Pad (optionally), then cut a random (h, w) window (torchvision.transforms.RandomCrop)."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant"):
        self.size = _pair(size, "RandomCrop")
        self.padding = _padding4(padding)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError(f"RandomCrop: padding_mode must be constant, edge, reflect or symmetric, got {padding_mode!r}")
        self.pad_if_needed, self.fill, self.padding_mode = pad_if_needed, fill, padding_mode

    def __call__(self, img):
        if any(self.padding):
            img = _pad(img, self.padding, self.fill, self.padding_mode)
        h, w = _hw(img)
        th, tw = self.size
        if self.pad_if_needed and (h < th or w < tw):
            img = _pad(img, (max(tw - w, 0), max(th - h, 0)) * 2, self.fill, self.padding_mode)
            h, w = _hw(img)
        if h < th or w < tw:
            raise ValueError(f"RandomCrop: required crop size {(th, tw)} is larger than the input image size {(h, w)}")
        rng = _random.cpu_generator()
        top = int(rng.integers(0, h - th + 1))
        left = int(rng.integers(0, w - tw + 1))
        return _crop(img, top, left, th, tw)

    def __repr__(self):
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class CenterCrop:
    def __init__(self, size):
        self.size = _pair(size, "CenterCrop")

    def __call__(self, img):
        h, w = _hw(img)
        th, tw = self.size
        if h < th or w < tw:
            raise ValueError(f"CenterCrop: crop size {(th, tw)} is larger than the image {(h, w)} (padding it is not implemented)")
        return _crop(img, int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)

    def __repr__(self):
        return f"CenterCrop(size={self.size})"


class RandomHorizontalFlip:
    """Mirror left-right with probability p."""

    def __init__(self, p=0.5):
        self.p = float(p)

    def __call__(self, img):
        if _random.cpu_generator().random() >= self.p:
            return img
        if isinstance(img, Tensor):
            return img.flip(-1)
        return np.ascontiguousarray(np.asarray(img)[:, ::-1])

    def __repr__(self):
        return f"RandomHorizontalFlip(p={self.p})"


class Resize:
    """Resize to `size` (h, w), or the smaller edge to `size` keeping the aspect ratio (an int), with bilinear
    (default), bicubic or nearest interpolation. antialias (True by default, as torchvision's since 0.17; and PIL's,
    which torchvision uses for PIL images) widens the filter when shrinking: F.interpolate(antialias=True), which
    reproduces PIL's resampling. uint8 images are rounded back to uint8."""

    def __init__(self, size, interpolation="bilinear", max_size=None, antialias=True):
        interpolation = str(getattr(interpolation, "value", interpolation)).lower()
        if interpolation not in ("bilinear", "nearest", "bicubic"):
            raise NotImplementedError(f"Resize: interpolation {interpolation!r} is not implemented (bilinear, nearest, "
                                      "bicubic)")
        sizes = [size] if isinstance(size, numbers.Integral) else list(size) if isinstance(size, (tuple, list)) else None
        if not sizes or len(sizes) > 2 or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1
                                               for s in sizes):
            raise ValueError(f"Resize: size must be an int >= 1 or a pair (h, w) of them, got {size!r}")
        self.size, self.interpolation = size, interpolation
        self.antialias = True if antialias is None else bool(antialias)

    def _target(self, h, w):
        if isinstance(self.size, numbers.Integral) or len(self.size) == 1:
            s = int(self.size if isinstance(self.size, numbers.Integral) else self.size[0])
            return (s, int(s * w / h)) if h <= w else (int(s * h / w), s)
        return _pair(self.size, "Resize")

    def __call__(self, img):
        is_tensor = isinstance(img, Tensor)
        arr = img._host_array() if is_tensor else np.asarray(img)
        h, w = (arr.shape[-2:] if is_tensor else arr.shape[:2])
        th, tw = self._target(h, w)
        x = arr if is_tensor else np.moveaxis(arr.reshape(h, w, -1), 2, 0)  # (C, H, W)
        if self.interpolation == "nearest":
            rows = np.minimum(np.floor(np.arange(th) * (h / th)).astype(np.int64), h - 1)
            cols = np.minimum(np.floor(np.arange(tw) * (w / tw)).astype(np.int64), w - 1)
            out = x[..., rows[:, None], cols[None, :]]
        else:   # F.interpolate on the host, in float64
            from ..nn.functional import interpolate

            lead = x.shape[:-2]
            xf = Tensor._make(x.astype(np.float64).reshape((-1, 1) + x.shape[-2:]))
            out = interpolate(xf, size=(th, tw), mode=self.interpolation, align_corners=False,
                              antialias=self.antialias)._data.reshape(lead + (th, tw))
            out = np.round(out).clip(0, 255).astype(x.dtype) if x.dtype == np.uint8 else out.astype(x.dtype)
        if is_tensor:
            return Tensor._make(np.ascontiguousarray(out))
        out = np.moveaxis(out, 0, 2)
        return np.ascontiguousarray(out.reshape(th, tw) if arr.ndim == 2 else out)

    def __repr__(self):
        return f"Resize(size={self.size}, interpolation={self.interpolation})"


class Lambda:
    """Apply a user function: Lambda(lambda x: x.view(-1))."""

    def __init__(self, lambd):
        if not callable(lambd):
            raise TypeError(f"Lambda: argument should be callable, got {type(lambd).__name__}")
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)

    def __repr__(self):
        return "Lambda()"


from . import functional  # noqa: E402,F401  (torchvision.transforms.functional)
from .augment import (  # noqa: E402,F401  (the random augmentations and the remaining transforms: augment.py)
    ColorJitter, ConvertImageDtype, GaussianBlur, Grayscale, RandomAffine, RandomApply, RandomChoice, RandomErasing,
    RandomGrayscale, RandomOrder, RandomResizedCrop, RandomRotation, RandomVerticalFlip, ToPILImage,
    RandomAdjustSharpness, RandomAutocontrast, RandomEqualize, RandomInvert, RandomPerspective, RandomPosterize,
    RandomSolarize,
)
from . import autoaugment  # noqa: E402,F401  (torchvision.transforms.autoaugment)
from . import transforms  # noqa: E402,F401  (torchvision.transforms.transforms: this module, its classes' home)
from .autoaugment import AugMix, AutoAugment, AutoAugmentPolicy, RandAugment, TrivialAugmentWide  # noqa: E402,F401
from .functional import InterpolationMode  # noqa: E402,F401


def __getattr__(name):
    raise AttributeError(
        f"minidl.vision.transforms has no {name!r} (torchvision.transforms.{name}); it has Compose, ToTensor, "
        "PILToTensor, Normalize, Pad, RandomCrop, CenterCrop, RandomHorizontalFlip, RandomVerticalFlip, Resize, "
        "RandomResizedCrop, RandomRotation, RandomAffine, ColorJitter, Grayscale, RandomGrayscale, GaussianBlur, "
        "RandomErasing, RandomApply, RandomChoice, RandomOrder, ToPILImage, ConvertImageDtype, Lambda, AutoAugment, "
        "RandAugment, TrivialAugmentWide, AugMix, RandomInvert, RandomPosterize, RandomSolarize, RandomAdjustSharpness, "
        "RandomAutocontrast, RandomEqualize, RandomPerspective. docs/TORCH_COMPAT.md lists what exists; minidl.data.transforms has the batched GPU transforms."
    )
