"""torchvision.utils' make_grid (a batch of images tiled into one image, to look at a batch) and save_image
(that grid written to a PNG or JPEG file, through Pillow)."""
from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor


def make_grid(tensor, nrow=8, padding=2, normalize=False, value_range=None, scale_each=False, pad_value=0.0):
    """(B, C, H, W) images (or a list of (C, H, W)) -> one (C', H', W') image: nrow images per row,
    `padding` pixels of pad_value between and around them; one-channel images become three channels.
    normalize=True shifts each image (scale_each) or the batch into [0, 1] by value_range or its
    min and max, as torchvision.utils.make_grid."""
    if isinstance(tensor, (list, tuple)):
        tensor = np.stack([t._host_array() if isinstance(t, Tensor) else np.asarray(t) for t in tensor])
    x = tensor._host_array() if isinstance(tensor, Tensor) else np.asarray(tensor)
    if x.ndim == 2:
        x = x[None]
    if x.ndim == 3:
        x = x[None] if x.shape[0] in (1, 3) else x[:, None]
    if x.ndim != 4:
        raise ValueError(f"make_grid: expects images (B, C, H, W), got shape {tuple(x.shape)}")
    if x.shape[1] == 1:
        x = np.concatenate([x, x, x], axis=1)
    x = x.astype(np.float32) if normalize and x.dtype.kind != "f" else x.copy()
    if normalize:
        def norm(img):
            low, high = value_range if value_range is not None else (img.min(), img.max())
            return (np.clip(img, low, high) - low) / max(high - low, 1e-5)

        x = np.stack([norm(img) for img in x]) if scale_each else norm(x)
    b, c, h, w = x.shape
    xmaps = min(nrow, b)
    ymaps = int(math.ceil(b / xmaps))
    height, width = h + padding, w + padding
    grid = np.full((c, height * ymaps + padding, width * xmaps + padding), pad_value, dtype=x.dtype)
    for k in range(b):
        y0, x0 = (k // xmaps) * height + padding, (k % xmaps) * width + padding
        grid[:, y0:y0 + h, x0:x0 + w] = x[k]
    return Tensor._make(grid)


def save_image(tensor, fp, format=None, **grid_kwargs):
    """Write a batch of images (or one image) to `fp` (a path or a file object) as one picture: make_grid's
    tiling with its keyword arguments, values in [0, 1] mapped to 0..255 (rounded, clipped), as
    torchvision.utils.save_image. Needs Pillow (pip install pillow)."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError("save_image: writing image files needs Pillow (pip install pillow)") from exc
    grid = make_grid(tensor, **grid_kwargs)._host_array().astype(np.float32)
    pixels = np.clip(grid * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)
    Image.fromarray(pixels).save(fp, format=format)
