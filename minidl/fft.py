"""minidl.fft: torch.fft's discrete Fourier transforms on NumPy's or CuPy's FFT, with gradients.

    fft / ifft, fft2 / ifft2, fftn / ifftn        complex to complex (a real input is taken as complex)
    rfft / irfft, rfft2 / irfft2, rfftn / irfftn  real to the one-sided half spectrum, and back
    fftfreq, rfftfreq, fftshift, ifftshift        the frequency grids and the zero-frequency shifts

norm: "backward" (the forward transform unscaled, the inverse scaled by 1/n; the default), "forward" (the
opposite), "ortho" (both by 1/sqrt(n)). Write F for the unscaled DFT over the transformed dims and F^H for its
conjugate transpose (n times the unscaled inverse). A transform is y = c F x (or c F^H x for an inverse) with c its
norm's constant, so by torch's convention for complex gradients (complexops.py) the gradient is g -> c F^H g (or
c F g): a transform of the other direction with the same constant. The one-sided transforms add two steps: rfft's
gradient is the real part of the full inverse transform of g padded with zeros; irfft's is rfft of g, the bins
that stand for two (all but the zero and the Nyquist frequency) doubled. Complex tensors: ops/complexops.py.
"""
from __future__ import annotations

import math

import numpy as np

from . import _dtypes
from ._device import get_array_module
from .autograd.function import Function
from .autograd.tensor import Tensor

__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "forward", "ortho")
_COMPLEX_OF = {_dtypes.float32: np.dtype(np.complex64), _dtypes.float64: np.dtype(np.complex128),
               np.dtype(np.complex64): np.dtype(np.complex64), np.dtype(np.complex128): np.dtype(np.complex128)}
_REAL_OF = {np.dtype(np.complex64): _dtypes.float32, np.dtype(np.complex128): _dtypes.float64}


def _scale(norm, n, inverse):
    """The constant c of y = c F x (forward transform) or y = c F^H x (inverse) under `norm`."""
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1.0 if (norm == "backward") != inverse else 1 / n


def _unscaled(xp, x, s, axes, inverse, kind):
    """The unscaled transform: F x, or F^H x (= n * NumPy's default inverse); kind "c2c", "r2c" or "c2r"."""
    n = math.prod(s)
    if kind == "r2c":
        return xp.fft.rfftn(x, s=s, axes=axes)
    if kind == "c2r":
        return xp.fft.irfftn(x, s=s, axes=axes) * n
    return xp.fft.ifftn(x, s=s, axes=axes) * n if inverse else xp.fft.fftn(x, s=s, axes=axes)


class FFT(Function):
    """One transform over `axes` with output sizes `s` (the last axis of c2r: the real length)."""

    saves_inputs = False

    def forward(self, x, s=None, axes=None, inverse=False, kind="c2c", norm="backward"):
        xp = get_array_module(x)
        self.in_shape, self.in_dtype, self.s, self.axes, self.inverse, self.kind, self.norm = \
            x.shape, x.dtype, s, axes, inverse, kind, norm
        self.c = _scale(norm, math.prod(s), inverse)
        y = _unscaled(xp, x, s, axes, inverse, kind) * self.c
        out_dtype = _REAL_OF[_COMPLEX_OF[x.dtype]] if kind == "c2r" else _COMPLEX_OF[x.dtype]
        return y.astype(out_dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        s, axes, c = self.s, self.axes, self.c
        if self.kind == "c2c":
            gx = _unscaled(xp, g, s, axes, not self.inverse, "c2c") * c
        elif self.kind == "r2c":   # pad the half spectrum with zeros, the full F^H, the real part
            full = xp.zeros(g.shape[:axes[-1]] + (s[-1],) + g.shape[axes[-1] + 1:], dtype=g.dtype)
            full[(slice(None),) * axes[-1] + (slice(0, g.shape[axes[-1]]),)] = g
            gx = (_unscaled(xp, full, s, axes, True, "c2c") * c).real
        else:                      # c2r: rfft of g, the bins that stand for two doubled
            gx = xp.fft.rfftn(g, s=s, axes=axes) * c
            half = gx.shape[axes[-1]]
            doubled = half - 1 - (1 if s[-1] % 2 == 0 else 0)
            if doubled > 0:
                index = (slice(None),) * axes[-1] + (slice(1, 1 + doubled),)
                gx[index] *= 2
        gx = _fit(xp, gx, self.in_shape, axes)
        if self.in_dtype.kind != "c":
            gx = gx.real
        return gx.astype(self.in_dtype, copy=False)


def _fit(xp, a, shape, axes):
    """a cropped or zero-padded along `axes` to `shape` (the input's: a transform of size s pads or crops it)."""
    if a.shape == tuple(shape):
        return a
    out = xp.zeros(shape, dtype=a.dtype)
    index = tuple(slice(0, min(a.shape[d], shape[d])) for d in range(len(shape)))
    out[index] = a[index]
    return out


def _plan(op, x, s, dim, default_dims):
    """(s, axes) as tuples: dim defaults to default_dims (or s's length of last dims), s to the input's sizes."""
    if not isinstance(x, Tensor):
        raise TypeError(f"fft.{op}: input must be a Tensor, got {type(x).__name__}")
    if x.dtype not in _COMPLEX_OF and not _dtypes.is_floating(x.dtype) and x.dtype.kind not in "iub":
        raise TypeError(f"fft.{op}: input of dtype {x.dtype} is not supported")
    if dim is None:
        dim = tuple(range(-len(s), 0)) if s is not None else (default_dims if default_dims is not None
                                                              else tuple(range(x.ndim)))
    dim = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(d % x.ndim for d in dim)
    if s is None:
        s = tuple(x.shape[a] for a in axes)
    s = (s,) if isinstance(s, int) else tuple(s)
    if len(s) != len(axes):
        raise RuntimeError(f"fft.{op}: s has {len(s)} sizes for {len(axes)} dims")
    return s, axes


def _floated(x):
    """Integers and 16-bit floats in the default float (torch transforms float32/float64 and complex)."""
    if x.dtype in _COMPLEX_OF:
        return x
    return x.float()


def _check_norm(op, norm):
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise ValueError(f"fft.{op}: norm must be one of {_NORMS}, got {norm!r}")
    return norm


def _c2c(op, x, s, dim, norm, inverse, default_dims):
    norm = _check_norm(op, norm)
    s, axes = _plan(op, x, s, dim, default_dims)
    return FFT.apply(_floated(x), s=s, axes=axes, inverse=inverse, kind="c2c", norm=norm)


def _r2c(op, x, s, dim, norm, default_dims):
    norm = _check_norm(op, norm)
    if x.dtype.kind == "c":
        raise RuntimeError(f"fft.{op} expects a real input tensor, but got {x.dtype}")
    s, axes = _plan(op, x, s, dim, default_dims)
    return FFT.apply(_floated(x), s=s, axes=axes, inverse=False, kind="r2c", norm=norm)


def _c2r(op, x, s, dim, norm, default_dims):
    norm = _check_norm(op, norm)
    if s is None:
        _, axes = _plan(op, x, None, dim, default_dims)
        s = tuple(x.shape[a] for a in axes[:-1]) + (2 * (x.shape[axes[-1]] - 1),)
    s, axes = _plan(op, x, s, dim, default_dims)
    if x.dtype.kind != "c":
        x = _floated(x).type(_COMPLEX_OF[_floated(x).dtype])
    return FFT.apply(x, s=s, axes=axes, inverse=True, kind="c2r", norm=norm)


def fft(input, n=None, dim=-1, norm=None):
    return _c2c("fft", input, None if n is None else (n,), (dim,), norm, False, None)


def ifft(input, n=None, dim=-1, norm=None):
    return _c2c("ifft", input, None if n is None else (n,), (dim,), norm, True, None)


def fft2(input, s=None, dim=(-2, -1), norm=None):
    return _c2c("fft2", input, s, dim, norm, False, None)


def ifft2(input, s=None, dim=(-2, -1), norm=None):
    return _c2c("ifft2", input, s, dim, norm, True, None)


def fftn(input, s=None, dim=None, norm=None):
    return _c2c("fftn", input, s, dim, norm, False, None)


def ifftn(input, s=None, dim=None, norm=None):
    return _c2c("ifftn", input, s, dim, norm, True, None)


def rfft(input, n=None, dim=-1, norm=None):
    return _r2c("rfft", input, None if n is None else (n,), (dim,), norm, None)


def irfft(input, n=None, dim=-1, norm=None):
    return _c2r("irfft", input, None if n is None else (n,), (dim,), norm, None)


def rfft2(input, s=None, dim=(-2, -1), norm=None):
    return _r2c("rfft2", input, s, dim, norm, None)


def irfft2(input, s=None, dim=(-2, -1), norm=None):
    return _c2r("irfft2", input, s, dim, norm, None)


def rfftn(input, s=None, dim=None, norm=None):
    return _r2c("rfftn", input, s, dim, norm, None)


def irfftn(input, s=None, dim=None, norm=None):
    return _c2r("irfftn", input, s, dim, norm, None)


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    from .ops.creation import tensor

    return tensor(np.fft.fftfreq(n, d), dtype=dtype or _dtypes.float32, device=device, requires_grad=requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    from .ops.creation import tensor

    return tensor(np.fft.rfftfreq(n, d), dtype=dtype or _dtypes.float32, device=device, requires_grad=requires_grad)


def fftshift(input, dim=None):
    dims = tuple(range(input.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    return input.roll([input.shape[d] // 2 for d in dims], dims)


def ifftshift(input, dim=None):
    dims = tuple(range(input.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    return input.roll([-(input.shape[d] // 2) for d in dims], dims)
