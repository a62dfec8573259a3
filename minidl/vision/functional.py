"""torchvision.transforms.functional: the image operations the transforms are made of, as functions.

An image is what minidl.vision.transforms takes: a uint8 NumPy array (H, W) or (H, W, C) as minidl's datasets
give, a PIL image, or a tensor (..., C, H, W) (after ToTensor, floats in [0, 1]). Each function returns the kind it
was given (a PIL image comes back as a uint8 array). Colour operations follow torchvision's tensor formulas:
grayscale is 0.2989 R + 0.587 G + 0.114 B, a blend is clamp(ratio * img + (1 - ratio) * other) to the value range
(255 for uint8, 1 for floats), hue is shifted in HSV.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..autograd.tensor import Tensor


class InterpolationMode:
    """torchvision.transforms.InterpolationMode's names (their value is the string the transforms read)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _to_chw(img):
    """(float64 array (..., C, H, W), a function that turns such an array back into the input's kind)."""
    if isinstance(img, Tensor):
        array = img._host_array()
        dtype = array.dtype
        return array.astype(np.float64), lambda x: Tensor._make(np.ascontiguousarray(x.astype(dtype)))
    array = np.asarray(img)
    gray = array.ndim == 2
    chw = (array[None] if gray else np.moveaxis(array, 2, 0)).astype(np.float64)

    def back(x):
        x = np.round(x).clip(0, 255) if array.dtype == np.uint8 else x
        x = x.astype(array.dtype)
        return np.ascontiguousarray(x[0] if gray and x.shape[0] == 1 else np.moveaxis(x, 0, 2))

    return chw, back


def _bound(img):
    if isinstance(img, Tensor):
        return 1.0 if img.dtype.kind == "f" else 255.0
    return 255.0 if np.asarray(img).dtype == np.uint8 else 1.0


def to_tensor(pic):
    from .transforms import ToTensor

    return ToTensor()(pic)


def to_pil_image(pic, mode=None):
    """A PIL image of a tensor (C, H, W) (floats in [0, 1] scaled to 0..255, as torchvision's) or an array."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("to_pil_image needs Pillow: pip install pillow (or the project's `vision` extra)") from None
    if isinstance(pic, Tensor):
        array = pic.detach()._host_array()
        if array.ndim == 3:
            array = np.moveaxis(array, 0, 2)
        if array.dtype.kind == "f":
            array = (array * 255).astype(np.uint8)   # (torchvision: pic.mul(255).byte(), truncating)
    else:
        array = np.asarray(pic)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    return Image.fromarray(array, mode=mode) if mode is not None else Image.fromarray(array)


def normalize(tensor, mean, std, inplace=False):
    from .transforms import Normalize

    return Normalize(mean, std, inplace)(tensor)


def resize(img, size, interpolation="bilinear", max_size=None, antialias=None):
    from .transforms import Resize

    return Resize(size, interpolation)(img)


def crop(img, top, left, height, width):
    if isinstance(img, Tensor):
        return img[..., top:top + height, left:left + width]
    return np.ascontiguousarray(np.asarray(img)[top:top + height, left:left + width])


def center_crop(img, output_size):
    from .transforms import CenterCrop

    return CenterCrop(output_size)(img)


def resized_crop(img, top, left, height, width, size, interpolation="bilinear", antialias=None):
    return resize(crop(img, top, left, height, width), size, interpolation)


def hflip(img):
    if isinstance(img, Tensor):
        return img.flip(-1)
    return np.ascontiguousarray(np.asarray(img)[:, ::-1])


def vflip(img):
    if isinstance(img, Tensor):
        return img.flip(-2)
    return np.ascontiguousarray(np.asarray(img)[::-1])


def _gray(x):
    """Luma of (..., 3, H, W) as (..., 1, H, W); a one-channel image as it is."""
    if x.shape[-3] == 1:
        return x
    return (0.2989 * x[..., 0:1, :, :] + 0.587 * x[..., 1:2, :, :] + 0.114 * x[..., 2:3, :, :])


def rgb_to_grayscale(img, num_output_channels=1):
    x, back = _to_chw(img)
    if x.shape[-3] not in (1, 3):
        raise TypeError(f"rgb_to_grayscale: expects 1 or 3 channels, got {x.shape[-3]}")
    g = _gray(x)
    if not isinstance(img, Tensor) or img.dtype.kind != "f":
        g = np.floor(g)   # (torchvision: .to(uint8) truncates)
    return back(np.repeat(g, num_output_channels, axis=-3))


def _blend(x, other, ratio, bound):
    return np.clip(ratio * x + (1.0 - ratio) * other, 0.0, bound)


def adjust_brightness(img, brightness_factor):
    x, back = _to_chw(img)
    return back(_blend(x, 0.0, brightness_factor, _bound(img)))


def adjust_contrast(img, contrast_factor):
    x, back = _to_chw(img)
    gray = _gray(x)
    if not isinstance(img, Tensor) or img.dtype.kind != "f":
        gray = np.floor(gray)
    mean = gray.mean(axis=(-3, -2, -1), keepdims=True)
    return back(_blend(x, mean, contrast_factor, _bound(img)))


def adjust_saturation(img, saturation_factor):
    x, back = _to_chw(img)
    gray = _gray(x)
    if not isinstance(img, Tensor) or img.dtype.kind != "f":
        gray = np.floor(gray)
    return back(_blend(x, gray, saturation_factor, _bound(img)))


def adjust_hue(img, hue_factor):
    """The hue rotated by hue_factor (in [-0.5, 0.5], a fraction of the colour circle), in HSV."""
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f"adjust_hue: hue_factor ({hue_factor}) is not in [-0.5, 0.5]")
    x, back = _to_chw(img)
    bound = _bound(img)
    rgb = x / bound
    r, g, b = rgb[..., 0, :, :], rgb[..., 1, :, :], rgb[..., 2, :, :]
    maxc, minc = rgb.max(axis=-3), rgb.min(axis=-3)
    v, delta = maxc, maxc - minc
    s = np.where(maxc > 0, delta / np.where(maxc > 0, maxc, 1), 0)
    safe = np.where(delta > 0, delta, 1)
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    h = np.where(maxc == r, bc - gc, np.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = np.where(delta > 0, (h / 6.0) % 1.0, 0.0)
    h = (h + hue_factor) % 1.0
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.astype(np.int64) % 6
    choose = lambda *options: np.choose(i, options)   # noqa: E731
    out = np.stack([choose(v, q, p, p, t, v), choose(t, v, v, q, p, p), choose(p, p, t, v, v, q)], axis=-3)
    return back(out * bound)


def _inverse_affine(h, w, angle, translate, scale, shear, center):
    """The matrix that maps an output pixel (x, y, 1) to the input position it samples (torchvision's
    _get_inverse_affine_matrix: rotation counter-clockwise by `angle` degrees about `center`)."""
    cx, cy = center
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = np.array([[d, -b, 0.0], [-c, a, 0.0]]) / scale
    tx, ty = translate
    matrix[0, 2] = matrix[0, 0] * (-cx - tx) + matrix[0, 1] * (-cy - ty) + cx
    matrix[1, 2] = matrix[1, 0] * (-cx - tx) + matrix[1, 1] * (-cy - ty) + cy
    return matrix


def _interpolation(op, interpolation):
    interpolation = str(getattr(interpolation, "value", interpolation)).lower()
    if interpolation not in ("nearest", "bilinear"):
        raise NotImplementedError(f"{op}: interpolation {interpolation!r} is not implemented (nearest, bilinear)")
    return interpolation


def _sample(x, sx, sy, interpolation, fill):
    """x (..., C, H, W) read at the input positions (sx, sy) (pixel-index coordinates) of each output pixel, nearest
    or bilinear, as torchvision's grid transform: zeros outside the image; with a fill, nearest puts the fill where
    the read fell outside, and bilinear blends value * m + fill * (1 - m), m the inside share of the read (which
    also scales the border's zero-padded value, as torchvision's does)."""
    h, w = x.shape[-2:]
    if interpolation == "nearest":
        ix, iy = np.round(sx).astype(np.int64), np.round(sy).astype(np.int64)
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        out = np.where(inside, x[..., np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)], 0.0)
        return out if fill is None else np.where(inside, out, _fill_of(fill, x))
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    fx, fy = sx - x0, sy - y0
    out, share = 0.0, 0.0
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xi, yi = x0 + dx, y0 + dy
            inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            out = out + np.where(inside, x[..., np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)], 0.0) * (wx * wy)
            share = share + inside * (wx * wy)
    return out if fill is None else out * share + (1.0 - share) * _fill_of(fill, x)


def _fill_of(fill, x):
    return np.broadcast_to(np.asarray(fill, dtype=np.float64).reshape(-1, 1, 1), x.shape[-3:])


def affine(img, angle, translate, scale, shear, interpolation="nearest", fill=None, center=None):
    """The image rotated (degrees, clockwise, as torchvision's affine), translated (pixels), scaled and sheared
    (degrees) about its centre (or `center`, (x, y) from the upper-left corner); outside pixels are `fill` (None:
    zeros, without torchvision's fill blend). Nearest or bilinear sampling."""
    interpolation = _interpolation("affine / rotate", interpolation)
    shear = (shear, 0.0) if isinstance(shear, numbers.Number) else tuple(shear) + (0.0,) * (2 - len(tuple(shear)))
    x, back = _to_chw(img)
    h, w = x.shape[-2:]
    # center: (x, y) with the origin at the image's upper-left corner, as torchvision's; in pixel-index coordinates
    # (pixel i's centre at i) that is half a pixel less
    center = ((w - 1) * 0.5, (h - 1) * 0.5) if center is None else (center[0] - 0.5, center[1] - 0.5)
    m = _inverse_affine(h, w, angle, translate, scale, shear, center)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    sx = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    sy = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    return back(_sample(x, sx, sy, interpolation, fill))


def _perspective_coefficients(startpoints, endpoints):
    """The 8 coefficients of the projective map from an output point (an endpoint) to its input point (a
    startpoint): the least-squares solution of the 8 equations the four point pairs give (torchvision's)."""
    rows, rhs = [], []
    for (x, y), (u, v) in zip(endpoints, startpoints):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    return np.linalg.lstsq(np.asarray(rows, dtype=np.float64), np.asarray(rhs, dtype=np.float64), rcond=None)[0]


def perspective(img, startpoints, endpoints, interpolation="bilinear", fill=None):
    """The image warped so that its four corners `startpoints` ([x, y], top-left, top-right, bottom-right,
    bottom-left) go to `endpoints` (torchvision's perspective: pixel centres at half-integers from the corner)."""
    interpolation = _interpolation("perspective", interpolation)
    c = _perspective_coefficients(startpoints, endpoints)
    x, back = _to_chw(img)
    h, w = x.shape[-2:]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    denominator = c[6] * xs + c[7] * ys + 1.0
    sx = (c[0] * xs + c[1] * ys + c[2]) / denominator - 0.5
    sy = (c[3] * xs + c[4] * ys + c[5]) / denominator - 0.5
    return back(_sample(x, sx, sy, interpolation, fill))


def rotate(img, angle, interpolation="nearest", expand=False, center=None, fill=None):
    """The image rotated by angle degrees counter-clockwise (torchvision's rotate; affine's angle is clockwise)."""
    if expand:
        raise NotImplementedError("rotate: expand=True is not implemented (the output keeps the input's size)")
    return affine(img, -angle, (0.0, 0.0), 1.0, (0.0, 0.0), interpolation, fill, center)


def gaussian_blur(img, kernel_size, sigma=None):
    """A separable Gaussian blur (odd kernel sizes), the image's borders reflected, as torchvision's."""
    ks = (kernel_size, kernel_size) if isinstance(kernel_size, numbers.Integral) else tuple(kernel_size)
    if any(k % 2 == 0 or k < 1 for k in ks):
        raise ValueError(f"gaussian_blur: kernel_size must be odd and positive, got {kernel_size}")
    sigma = [0.3 * ((k - 1) * 0.5 - 1) + 0.8 for k in ks] if sigma is None else (
        [float(sigma)] * 2 if isinstance(sigma, numbers.Number) else [float(s) for s in sigma])
    x, back = _to_chw(img)
    for axis, (k, s) in zip((-1, -2), zip(ks, sigma)):
        half = k // 2
        t = np.linspace(-half, half, k)
        kernel = np.exp(-0.5 * (t / s) ** 2)
        kernel /= kernel.sum()
        pad = [(0, 0)] * x.ndim
        pad[axis] = (half, half)
        padded = np.pad(x, pad, mode="reflect")
        n = x.shape[axis]
        x = sum(kernel[i] * np.take(padded, np.arange(i, i + n), axis=axis) for i in range(k))
    return back(x)


def erase(img, i, j, h, w, v, inplace=False):
    """Tensor (C, H, W): the region [i:i+h, j:j+w] set to v (a number, or a tensor of the region's shape)."""
    out = img if inplace else img.clone()
    out[..., i:i + h, j:j + w] = v
    return out


def get_dimensions(img):
    """[channels, height, width] (torchvision's get_dimensions)."""
    x, _ = _to_chw(img)
    return [int(x.shape[-3]), int(x.shape[-2]), int(x.shape[-1])]


def get_image_size(img):
    """[width, height] (torchvision's order)."""
    _, h, w = get_dimensions(img)
    return [w, h]


def get_image_num_channels(img):
    return get_dimensions(img)[0]


def _require_uint8(img, op):
    dtype = img.dtype if isinstance(img, Tensor) else np.asarray(img).dtype
    if dtype != np.uint8:
        raise TypeError(f"{op}: only uint8 images are supported (a PIL image, a uint8 array or a uint8 tensor), got "
                        f"{dtype}; apply it before ToTensor / ConvertImageDtype, as in torchvision")


def invert(img):
    """bound - img: 255 - x for uint8, 1 - x for floats."""
    x, back = _to_chw(img)
    return back(_bound(img) - x)


def posterize(img, bits):
    """Keep the top `bits` bits of each uint8 value (x & ~(2**(8 - bits) - 1))."""
    _require_uint8(img, "posterize")
    if not 0 <= int(bits) <= 8:
        raise ValueError(f"posterize: bits must be in [0, 8], got {bits}")
    x, back = _to_chw(img)
    mask = 0xFF & ~((1 << (8 - int(bits))) - 1)
    return back(np.bitwise_and(x.astype(np.int64), mask).astype(np.float64))


def solarize(img, threshold):
    """Every value >= threshold inverted (bound - x)."""
    if threshold > _bound(img):
        raise TypeError(f"solarize: the threshold ({threshold}) should be less than the bound of the image "
                        f"({_bound(img):g})")
    x, back = _to_chw(img)
    return back(np.where(x >= threshold, _bound(img) - x, x))


def adjust_sharpness(img, sharpness_factor):
    """A blend with the image smoothed by the 3x3 kernel [[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13 (its border pixels
    kept): factor 0 gives the smoothed image, 1 the original, 2 twice as sharp (torchvision's formula)."""
    if sharpness_factor < 0:
        raise ValueError(f"adjust_sharpness: sharpness_factor ({sharpness_factor}) is not non-negative")
    x, back = _to_chw(img)
    h, w = x.shape[-2:]
    if h <= 2 or w <= 2:
        return back(x)
    weights = np.ones((3, 3))
    weights[1, 1] = 5.0
    weights /= weights.sum()
    smooth = sum(weights[i, j] * x[..., i:i + h - 2, j:j + w - 2] for i in range(3) for j in range(3))
    if not isinstance(img, Tensor) or img.dtype.kind != "f":
        smooth = np.round(smooth)
    degenerate = x.copy()
    degenerate[..., 1:-1, 1:-1] = smooth
    return back(_blend(x, degenerate, sharpness_factor, _bound(img)))


def autocontrast(img):
    """Each channel stretched so that its minimum becomes 0 and its maximum the bound (a flat channel kept)."""
    x, back = _to_chw(img)
    bound = _bound(img)
    low, high = x.min(axis=(-2, -1), keepdims=True), x.max(axis=(-2, -1), keepdims=True)
    flat = high == low
    scale = np.where(flat, 1.0, bound / np.where(flat, 1.0, high - low))
    low = np.where(flat, 0.0, low)
    if bound == 255.0:   # uint8: PIL's table, x * scale - low * scale truncated (its rounding, to the last bit)
        return back(np.clip(np.trunc(x * scale + (-low * scale)), 0.0, 255.0))
    return back(np.clip((x - low) * scale, 0.0, bound))


def equalize(img):
    """Histogram equalisation of each channel of a uint8 image (torchvision's lookup table: the cumulative
    histogram divided by step = (pixels but the last level's) // 255; a channel with step 0 is kept)."""
    _require_uint8(img, "equalize")
    x, back = _to_chw(img)
    values = x.astype(np.int64)
    flat = values.reshape(-1, values.shape[-2] * values.shape[-1])
    out = np.empty_like(flat)
    for c, channel in enumerate(flat):
        hist = np.bincount(channel, minlength=256)
        step = hist[hist != 0][:-1].sum() // 255
        if step == 0:
            out[c] = channel
            continue
        lut = (np.cumsum(hist) + step // 2) // step
        lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255)
        out[c] = lut[channel]
    return back(out.reshape(values.shape).astype(np.float64))


def adjust_gamma(img, gamma, gain=1.0):
    """gain * img ** gamma on values in [0, 1] (uint8 images through [0, 1] and back, as torchvision converts)."""
    if gamma < 0:
        raise ValueError(f"adjust_gamma: gamma ({gamma}) is not non-negative")
    x, back = _to_chw(img)
    bound = _bound(img)
    y = np.clip(gain * (x / bound) ** gamma, 0.0, 1.0)
    return back(np.floor(y * (256.0 - 1e-3)) if bound == 255.0 else y)


__all__ = ["InterpolationMode", "to_tensor", "to_pil_image", "normalize", "resize", "crop", "center_crop",
           "resized_crop", "hflip", "vflip", "rgb_to_grayscale", "adjust_brightness", "adjust_contrast",
           "adjust_saturation", "adjust_hue", "affine", "rotate", "gaussian_blur", "erase", "get_dimensions",
           "get_image_size", "get_image_num_channels", "invert", "posterize", "solarize", "adjust_sharpness",
           "autocontrast", "equalize", "adjust_gamma", "perspective"]
