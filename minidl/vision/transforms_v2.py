"""torchvision.transforms.v2: the same transforms (minidl.vision.transforms), which take PIL images, uint8 arrays
and tensors alike, plus v2's conversions: ToImage (an image as a uint8 tensor (C, H, W)), ToDtype (with scale=True,
0..255 integers to 0..1 floats and back) and ToPureTensor."""
from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
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


def __getattr__(name):
    return _missing(name)
