"""Batch transforms: data augmentation and normalisation on whole batches (N, C, H, W).

torchvision transforms one PIL image at a time in worker processes. Here a transform takes a whole
batch, as a NumPy or CuPy array (or a minidl Tensor holding one) and returns the same kind, so the
same code runs on the CPU and, after the DataLoader has put the dataset on the GPU, on the GPU:
the pipeline never leaves the device. Random choices (crop offsets, flips, cutout squares) are drawn
on the host
from a seeded NumPy Generator, one per sample, and applied to all samples at once by indexing, with
no Python loop over samples; so a seed gives the same augmentation on either device.
"""
from __future__ import annotations

import numpy as np

from ..primitives import get_array_module
from ._random import make_rng


def _unwrap(batch, name=None):
    """(array, rewrap): a minidl Tensor is unwrapped, and rewrap turns the result back into one.

    With `name`, a tensor that requires grad is refused: this transform works on the array and would
    cut the graph silently (Normalize and RandomHorizontalFlip keep it, through tensor ops)."""
    data = getattr(batch, "_data", None)
    if data is None:
        return batch, (lambda a: a)
    if name is not None and getattr(batch, "requires_grad", False):
        raise RuntimeError(f"{name}: the batch requires grad, and this augmentation does not record the "
                           "autograd graph (it would silently cut it); apply it to the data before it requires "
                           "grad, or detach() it")
    from ..autograd.tensor import Tensor

    return data, Tensor


def _needs_graph(batch) -> bool:
    return getattr(batch, "requires_grad", False) and hasattr(batch, "_data")


def _check_nchw(name: str, x):
    if x.ndim != 4:
        raise ValueError(f"{name}: expects a batch of shape (N, C, H, W), got shape {tuple(x.shape)}")


def _nchw_batch(batch, name: str, refuse_grad: bool = True):
    """(array, rewrap) of an (N, C, H, W) batch (_unwrap; refuse_grad: a batch that requires grad is refused)."""
    x, rewrap = _unwrap(batch, name if refuse_grad else None)
    _check_nchw(name, x)
    return x, rewrap


def _rng_of(generator, name: str):
    """The random stream of a transform given a generator (None: a fresh stream per call, minidl's global seed)."""
    return None if generator is None else make_rng(generator, name)


def _to_device_like(values: np.ndarray, like):
    """Move a small host array of random choices to the device of `like`."""
    xp = get_array_module(like)
    return values if xp is np else xp.asarray(values)


class Compose:
    """Apply transforms in order: Compose([RandomCrop(32, 4), RandomHorizontalFlip(), Normalize(m, s)])."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, batch):
        for transform in self.transforms:
            batch = transform(batch)
        return batch

    def __repr__(self):
        inner = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose([{inner}\n])"


class ToFloat:
    """Integer pixels -> float: (N, H, W, C) or (N, C, H, W) uint8 -> float32 in [0, 1] (x * scale).

    channels_last_input=True also transposes NHWC (how CIFAR10.data is stored) to NCHW.
    """

    def __init__(self, scale=1.0 / 255.0, dtype=np.float32, channels_last_input=False):
        self.scale = float(scale)
        self.dtype = np.dtype(dtype)
        self.channels_last_input = bool(channels_last_input)

    def __call__(self, batch):
        x, rewrap = _nchw_batch(batch, "ToFloat", refuse_grad=False)
        if self.channels_last_input:
            x = x.transpose(0, 3, 1, 2)
        xp = get_array_module(x)
        y = x.astype(self.dtype) * self.dtype.type(self.scale)
        return rewrap(xp.ascontiguousarray(y))

    def __repr__(self):
        return f"ToFloat(scale={self.scale}, dtype={self.dtype}, channels_last_input={self.channels_last_input})"


class Normalize:
    """y[:, c] = (x[:, c] - mean[c]) / std[c], per channel, on float batches (N, C, H, W)."""

    def __init__(self, mean, std):
        self.mean = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        self.std = np.atleast_1d(np.asarray(std, dtype=np.float64))
        if self.mean.ndim != 1 or self.std.ndim != 1 or self.mean.shape != self.std.shape:
            raise ValueError(f"Normalize: mean and std must be 1-d of one length, got shapes "
                             f"{self.mean.shape} and {self.std.shape}")
        if np.any(self.std <= 0):
            raise ValueError(f"Normalize: std must be positive, got {self.std.tolist()}")

    def __call__(self, batch):
        x, rewrap = _nchw_batch(batch, "Normalize", refuse_grad=False)
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"Normalize: expects a float32 or float64 batch, got {x.dtype}; "
                            "convert integer pixels first (ToFloat)")
        channels = x.shape[1]
        if self.mean.size not in (1, channels):
            raise ValueError(f"Normalize: {self.mean.size} means for a batch of shape {tuple(x.shape)} "
                             f"with {channels} channels")
        xp = get_array_module(x)
        mean = xp.asarray(self.mean.astype(x.dtype)).reshape(1, -1, 1, 1)
        inv_std = xp.asarray((1.0 / self.std).astype(x.dtype)).reshape(1, -1, 1, 1)
        if _needs_graph(batch):   # a tensor that requires grad: tensor ops, so its graph goes on
            return (batch - rewrap(mean)) * rewrap(inv_std)
        return rewrap((x - mean) * inv_std)

    def __repr__(self):
        return f"Normalize(mean={self.mean.tolist()}, std={self.std.tolist()})"


class RandomCrop:
    """Pad each image by `padding` then cut a random `size` window from it, a new offset per sample.

    size: int or (h, w). padding: int or (top/bottom, left/right) pixels. padding_mode: "constant"
    (fill with `fill`) or "reflect". generator: int seed, numpy Generator, or None (global seed).
    """

    def __init__(self, size, padding=0, padding_mode="constant", fill=0, generator=None):
        self.size = (int(size), int(size)) if np.isscalar(size) else tuple(int(s) for s in size)
        self.padding = (int(padding), int(padding)) if np.isscalar(padding) else tuple(int(p) for p in padding)
        if len(self.size) != 2 or min(self.size) < 1:
            raise ValueError(f"RandomCrop: size must be a positive int or (h, w), got {size!r}")
        if len(self.padding) != 2 or min(self.padding) < 0:
            raise ValueError(f"RandomCrop: padding must be a non-negative int or (ph, pw), got {padding!r}")
        if padding_mode not in ("constant", "reflect"):
            raise ValueError(f"RandomCrop: padding_mode must be 'constant' or 'reflect', got {padding_mode!r}")
        self.padding_mode = padding_mode
        self.fill = fill
        self.generator, self._rng = generator, _rng_of(generator, "RandomCrop")

    def __call__(self, batch):
        x, rewrap = _nchw_batch(batch, "RandomCrop")
        n, c, h, w = x.shape
        ph, pw = self.padding
        out_h, out_w = self.size
        if out_h > h + 2 * ph or out_w > w + 2 * pw:
            raise ValueError(f"RandomCrop: crop {self.size} is larger than the padded image "
                             f"({h + 2 * ph}, {w + 2 * pw}) of a batch of shape {tuple(x.shape)}")
        xp = get_array_module(x)
        pad_width = ((0, 0), (0, 0), (ph, ph), (pw, pw))
        if self.padding_mode == "constant":
            padded = xp.pad(x, pad_width, mode="constant", constant_values=self.fill)
        else:
            padded = xp.pad(x, pad_width, mode="reflect")

        rng = self._rng if self._rng is not None else make_rng(None)
        top = rng.integers(0, h + 2 * ph - out_h + 1, size=n)
        left = rng.integers(0, w + 2 * pw - out_w + 1, size=n)
        # Per-sample row and column indices, (N, out_h) and (N, out_w); broadcast together with the
        # sample and channel indices they gather every sample's window in one fancy index.
        rows = _to_device_like(top[:, None] + np.arange(out_h)[None, :], x)
        cols = _to_device_like(left[:, None] + np.arange(out_w)[None, :], x)
        samples = xp.arange(n)[:, None, None, None]
        channels = xp.arange(c)[None, :, None, None]
        return rewrap(padded[samples, channels, rows[:, None, :, None], cols[:, None, None, :]])

    def __repr__(self):
        return f"RandomCrop(size={self.size}, padding={self.padding}, padding_mode={self.padding_mode!r})"


class RandomHorizontalFlip:
    """Mirror each image left-right with probability p, independently per sample."""

    def __init__(self, p=0.5, generator=None):
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"RandomHorizontalFlip: p must lie in [0, 1], got {p!r}")
        self.p = float(p)
        self.generator, self._rng = generator, _rng_of(generator, "RandomHorizontalFlip")

    def __call__(self, batch):
        x, rewrap = _nchw_batch(batch, "RandomHorizontalFlip", refuse_grad=False)
        xp = get_array_module(x)
        rng = self._rng if self._rng is not None else make_rng(None)
        flip = _to_device_like(rng.random(x.shape[0]) < self.p, x)
        if _needs_graph(batch):
            from ..ops import where

            return where(rewrap(flip[:, None, None, None]), batch.flip(-1), batch)
        return rewrap(xp.where(flip[:, None, None, None], x[..., ::-1], x))

    def __repr__(self):
        return f"RandomHorizontalFlip(p={self.p})"


class Cutout:
    """Blank out one random `size` square per image with `fill` (DeVries & Taylor 2017), on (N, C, H, W).

    The square's centre is drawn uniformly over the image, a new one per sample, so a square near
    the border is clipped and covers less than size_h * size_w pixels (as in the paper: the network
    also sees partly occluded borders). Each sample is cut with probability p. The same square is
    blanked in every channel. fill=0 is the dataset mean once the batch is normalised.

    size: int or (h, w). generator: int seed, numpy Generator, or None (global seed).
    """

    def __init__(self, size, fill=0, p=1.0, generator=None):
        self.size = (int(size), int(size)) if np.isscalar(size) else tuple(int(s) for s in size)
        if len(self.size) != 2 or min(self.size) < 1:
            raise ValueError(f"Cutout: size must be a positive int or (h, w), got {size!r}")
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"Cutout: p must lie in [0, 1], got {p!r}")
        if not (np.isscalar(fill) and np.isreal(fill)) or isinstance(fill, (bool, str)):
            raise ValueError(f"Cutout: fill must be a real number, got {fill!r}")
        self.fill = fill
        self.p = float(p)
        self.generator, self._rng = generator, _rng_of(generator, "Cutout")

    def __call__(self, batch):
        x, rewrap = _nchw_batch(batch, "Cutout")
        n, _, h, w = x.shape
        size_h, size_w = self.size
        xp = get_array_module(x)

        rng = self._rng if self._rng is not None else make_rng(None)
        centre_y = rng.integers(0, h, size=n)
        centre_x = rng.integers(0, w, size=n)
        chosen = rng.random(n) < self.p
        # Half-open bounds [top, bottom) x [left, right), (N,) each; they may run past the image,
        # which the comparisons below clip for free. A sample not chosen gets an empty square
        # (bottom == top), so one mask covers both cases.
        top = centre_y - size_h // 2
        left = centre_x - size_w // 2
        bottom = np.where(chosen, top + size_h, top)
        right = left + size_w
        top, bottom, left, right = (_to_device_like(b, x)[:, None] for b in (top, bottom, left, right))

        rows = xp.arange(h)[None, :]  # (1, H) against (N, 1) bounds -> (N, H)
        cols = xp.arange(w)[None, :]
        in_rows = (rows >= top) & (rows < bottom)
        in_cols = (cols >= left) & (cols < right)
        mask = in_rows[:, None, :, None] & in_cols[:, None, None, :]  # (N, 1, H, W), broadcast over C
        # A NumPy scalar of x's dtype keeps the result's dtype (a Python float could upcast it).
        return rewrap(xp.where(mask, x.dtype.type(self.fill), x))

    def __repr__(self):
        fill = self.fill.item() if isinstance(self.fill, np.generic) else self.fill  # 0.0, not np.float32(0.0)
        return f"Cutout(size={self.size}, fill={fill!r}, p={self.p})"
