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
           "fftfreq", "rfftfreq", "fftshift", "ifftshift", "stft", "istft"]

_NORMS = ("backward", "forward", "ortho")
_COMPLEX_OF = {**_dtypes.COMPLEX_OF, **{c: c for c in _dtypes.REAL_OF}}   # (a complex dtype is its own)
_REAL_OF = _dtypes.REAL_OF


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


# ---- short-time Fourier transforms (torch.stft / torch.istft), composed of the ops above ---------------------
def _window(window, win_length, n_fft, like):
    """The analysis window padded (centred) to n_fft; a rectangular one when None."""
    from .ops.creation import ones
    from .nn.functional import pad

    if window is None:
        window = ones(win_length, dtype=like.dtype if like.dtype.kind == "f" else _dtypes.float32, device=like.device)
    if window.shape[0] != win_length:
        raise RuntimeError(f"stft: window of length {window.shape[0]} for win_length {win_length}")
    left = (n_fft - win_length) // 2
    return pad(window, (left, n_fft - win_length - left)) if win_length < n_fft else window


def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None):
    """torch.stft: frames of n_fft samples every hop_length (default n_fft // 4), times the window, transformed;
    (..., n_fft // 2 + 1 (onesided) or n_fft, frames), complex (return_complex=True) or its real view."""
    from .nn.functional import pad

    if return_complex is None:
        raise RuntimeError("stft requires the return_complex parameter be given for real inputs, and will further "
                           "require that return_complex=True in a future PyTorch release.")
    hop = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if input.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1-D or 2-D input, got shape {tuple(input.shape)}")
    x = _floated(input)
    if center:
        x = pad(x.unsqueeze(-2), (n_fft // 2, n_fft // 2), mode=pad_mode).squeeze(-2)
    if x.shape[-1] < n_fft:
        raise RuntimeError(f"stft: input of {x.shape[-1]} samples (after padding) is shorter than n_fft = {n_fft}")
    frames = x.unfold(-1, n_fft, hop) * _window(window, win_length, n_fft, x)
    onesided = x.dtype.kind != "c" if onesided is None else onesided
    spectrum = (rfft if onesided else fft)(frames, norm="ortho" if normalized else "backward")
    spectrum = spectrum.transpose(-1, -2)
    from .ops.complexops import view_as_real

    return spectrum if return_complex else view_as_real(spectrum)


def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
          onesided=None, length=None, return_complex=False):
    """torch.istft: the inverse of stft by overlap-add, divided by the summed squared window (which must be
    nonzero everywhere it counts, torch's NOLA condition)."""
    from .ops.complexops import view_as_complex
    from .ops.creation import arange, zeros

    if return_complex:
        raise NotImplementedError("istft: return_complex=True (a complex signal) is not in minidl")
    spec = input if input.dtype.kind == "c" else view_as_complex(input)
    hop = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    batched = spec.ndim == 3
    if not batched:
        spec = spec.unsqueeze(0)
    onesided = spec.shape[-2] != n_fft if onesided is None else onesided
    frames = (irfft if onesided else ifft)(spec.transpose(-1, -2), n=n_fft,
                                           norm="ortho" if normalized else "backward")
    if not onesided:
        from .ops.complexops import view_as_real

        frames = view_as_real(frames)[..., 0]
    w = _window(window, win_length, n_fft, frames)
    n_frames = frames.shape[-2]
    total = n_fft + hop * (n_frames - 1)
    # overlap-add: frame f's sample k lands at f * hop + k (index_add: any dtype on any device, unlike fold's
    # convolution, which has no float64 kernel on the GPU)
    positions = (arange(n_frames, device=frames.device).reshape(-1, 1) * hop
                 + arange(n_fft, device=frames.device).reshape(1, -1)).reshape(-1)
    signal = zeros(frames.shape[0], total, dtype=frames.dtype, device=frames.device).index_add(
        1, positions, (frames * w).reshape(frames.shape[0], -1))
    envelope = zeros(total, dtype=w.dtype, device=w.device).index_add(
        0, positions, (w * w).reshape(1, n_fft).expand(n_frames, n_fft).reshape(-1))
    start = n_fft // 2 if center else 0
    end = total - (n_fft // 2 if center else 0) if length is None else start + length
    envelope = envelope[start:min(end, total)]
    if bool((envelope.abs() < 1e-11).any()):
        raise RuntimeError("istft: window overlap add min: 0 (the window does not satisfy NOLA: its squares, overlapped, "
                           "vanish somewhere)")
    y = signal[:, start:min(end, total)] / envelope
    if length is not None and y.shape[-1] < length:
        from .nn.functional import pad

        y = pad(y, (0, length - y.shape[-1]))
    return y if batched else y.squeeze(0)
