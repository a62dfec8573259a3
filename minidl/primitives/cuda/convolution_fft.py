"""The FFT convolution on the GPU (algo="fft", cuDNN's CUDNN_CONVOLUTION_FWD_ALGO_FFT).

By the convolution theorem a stride-1 cross-correlation is a pointwise product of spectra:
transform the (padded) input and the filters with real 2-D FFTs of size Hf x Wf, multiply per
frequency and sum over channels, transform back and crop. cuFFT (through cupy.fft) does the
transforms; the per-frequency products, which are a small complex GEMM at each of the
Hf * (Wf/2 + 1) frequencies, are our kernel convolution_fft_products (kernels/convolution_tc.cu):

    forward          Y[n, k]  = sum_c X[n, c] * conj(W[k, c])      y  = irfft2(Y)[:P, :Q]
    backward data    DX[n, c] = sum_k DY[n, k] * W[k, c]            dx = irfft2(DX)[ph:ph+H, pw:pw+W]
    backward filter  DW[k, c] = sum_n conj(DY[n, k]) * X[n, c]      dw = irfft2(DW)[:R, :S]

Hf >= H + 2*ph (the padded input) makes the circular correlation equal to the linear one on every
output the crop keeps; Hf is rounded up to a 2^a 3^b 5^c 7^d size (cuFFT's fast radices).
The cost no longer depends on the filter size (R*S multiplies per output for a direct method),
so it pays for large filters; the spectra are large (workspace_bytes), and the transforms of x
and y dominate for small filters. Covered: float32, 1-D and 2-D, stride 1, dilation 1, groups 1,
both layouts (NHWC is transposed to channels-first around the transforms).
"""
from __future__ import annotations

import math

import cupy
import numpy as np

from .._common import fft_convolution_refusal
from ._compile import get_kernel

THREADS = 128
TI = TJ = 4  # FFT_TI, FFT_TJ of the kernel


def is_supported(direction: str, problem) -> tuple[bool, str]:
    if problem.dtype != "float32":
        return False, f"the FFT convolution runs float32 only, got {problem.dtype}"
    if problem.spatial_dims > 2:
        return False, "the FFT convolution is 1-D and 2-D only"
    refusal = fft_convolution_refusal(problem)
    return not refusal, refusal


def _good_size(n: int) -> int:
    """The smallest 2^a 3^b 5^c 7^d >= n."""
    m = n
    while True:
        r = m
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def fft_sizes(problem) -> tuple:
    """(Hf, Wf) of the transforms (1-D: Hf = 1)."""
    lead = 2 - problem.spatial_dims
    in_size = (1,) * lead + tuple(problem.in_size)
    padding = (0,) * lead + tuple(problem.padding)
    return tuple(1 if n + 2 * p == 1 else _good_size(n + 2 * p) for n, p in zip(in_size, padding))


def workspace_bytes(direction: str, problem) -> int:
    """The padded input (float32) and the three spectra (complex64) the FFT algorithm allocates."""
    hf, wf = fft_sizes(problem)
    freqs = hf * (wf // 2 + 1)
    N, C, K = problem.N, problem.C, problem.K
    padded = 4 * hf * wf * (N * C if direction != "backward_data" else N * K)
    spectra = 8 * freqs * (N * C + K * C + N * K)
    return padded + spectra


def _channels_first_2d(a, layout):
    """(N, C, *s) or (N, *s, C) -> float32 (N, C, H, W) (1-D gets H = 1); a view when possible."""
    if layout == "NHWC":
        a = a.transpose((0, a.ndim - 1) + tuple(range(1, a.ndim - 1)))
    if a.ndim == 3:
        a = a[:, :, None, :]
    return a


def _from_channels_first(a, problem, spatial_dims):
    """(N, C, H, W) -> the problem's layout and rank, contiguous."""
    if spatial_dims == 1:
        a = a[:, :, 0, :]
    if problem.layout == "NHWC":
        a = a.transpose((0,) + tuple(range(2, a.ndim)) + (1,))
    return cupy.ascontiguousarray(a)


def _spectrum(a, shape, offset=(0, 0)):
    """rfft2 of `a` (..., h, w) placed at `offset` inside zeros of `shape` (..., Hf, Wf)."""
    if tuple(a.shape[-2:]) == tuple(shape[-2:]) and offset == (0, 0):
        return cupy.fft.rfft2(a)
    buf = cupy.zeros(tuple(a.shape[:-2]) + tuple(shape[-2:]), dtype=cupy.float32)
    h, w = a.shape[-2:]
    buf[..., offset[0]:offset[0] + h, offset[1]:offset[1] + w] = a
    return cupy.fft.rfft2(buf)


def _products(a, b, I, J, L, a_si, a_sl, b_sl, b_sj, conj_a, conj_b):
    """out[i, j, f] = sum_l op(a(i, l, f)) op(b(l, j, f)) by kernels/convolution_tc.cu."""
    F = a.shape[-1] * a.shape[-2]
    out = cupy.ndarray((I, J) + tuple(a.shape[-2:]), dtype=cupy.complex64)
    kernel = get_kernel("convolution_tc", "convolution_fft_products", options=("-DCONV_TC_KIND=-1",))
    a, b = cupy.ascontiguousarray(a, dtype=cupy.complex64), cupy.ascontiguousarray(b, dtype=cupy.complex64)
    grid = (math.ceil(F / THREADS), math.ceil(I / TI), math.ceil(J / TJ))
    kernel(grid, (THREADS,), (a, b, out, np.int32(I), np.int32(J), np.int32(L), np.int64(F), np.int64(a_si),
                              np.int64(a_sl), np.int64(b_sl), np.int64(b_sj), np.int32(conj_a), np.int32(conj_b)))
    return out


def _blend(result, out, alpha, beta):
    """alpha * result + beta * out into out (or a new array)."""
    if alpha != 1:
        result = result * np.float32(alpha)
    if out is None:
        return result
    if beta == 0:
        out[...] = result
    else:
        out[...] = result + np.float32(beta) * out
    return out


def _geometry(problem):
    lead = 2 - problem.spatial_dims
    H, W = (1,) * lead + tuple(problem.in_size)
    R, S = (1,) * lead + tuple(problem.kernel_size)
    P, Q = (1,) * lead + tuple(problem.out_size)
    ph, pw = (0,) * lead + tuple(problem.padding)
    return H, W, R, S, P, Q, ph, pw


def convolution_forward(x, w, problem, bias, alpha, beta, out):
    """y = alpha * (conv(x, w) + bias) + beta * out by FFT."""
    N, C, K = problem.N, problem.C, problem.K
    H, W, R, S, P, Q, ph, pw = _geometry(problem)
    shape, X, Wspec = _spectra(problem, (x, (ph, pw)), (w, None))               # (N, C, Hf, Wf/2+1), (K, C, ..)
    Y = _products(X, Wspec, N, K, C, C, 1, 1, C, 0, 1)                          # b(l=c, j=k) = W[k, c]
    y = cupy.fft.irfft2(Y, s=shape)[:, :, :P, :Q]
    if bias is not None:
        y = y + bias.reshape(1, K, 1, 1)
    return _result(y, problem, alpha, beta, out)


def convolution_backward_data(w, dy, problem, alpha, beta, out):
    """dx = alpha * conv_transpose(dy, w) + beta * out by FFT."""
    N, C, K = problem.N, problem.C, problem.K
    H, W, R, S, P, Q, ph, pw = _geometry(problem)
    shape, DY, Wspec = _spectra(problem, (dy, None), (w, None))                 # (N, K, ...), (K, C, ...)
    DX = _products(DY, Wspec, N, C, K, K, 1, C, 1, 0, 0)
    dx = cupy.fft.irfft2(DX, s=shape)[:, :, ph:ph + H, pw:pw + W]
    return _result(dx, problem, alpha, beta, out)


def convolution_backward_filter(x, dy, problem, alpha, beta, out):
    """dw = alpha * dL/dw + beta * out by FFT."""
    N, C, K = problem.N, problem.C, problem.K
    H, W, R, S, P, Q, ph, pw = _geometry(problem)
    shape, X, DY = _spectra(problem, (x, (ph, pw)), (dy, None))                 # (N, C, ...), (N, K, ...)
    DW = _products(DY, X, K, C, N, 1, K, C, 1, 1, 0)                            # a(i=k, l=n) = DY[n, k]
    dw = cupy.fft.irfft2(DW, s=shape)[:, :, :R, :S]
    return _result(dw, problem, alpha, beta, out)


def _spectra(problem, *operands):
    """The FFT size of the problem, and the spectra of its operands, (array, padding or None) each: channels-first 2-D
    views placed at offset (ph, pw) inside the zeros when padded."""
    shape = fft_sizes(problem)
    return (shape, *(_spectrum(_channels_first_2d(a, problem.layout), shape, pad or (0, 0)) for a, pad in operands))


def _result(a, problem, alpha, beta, out):
    """A direction's channels-first result in the problem's layout, blended into out (alpha, beta)."""
    return _blend(_from_channels_first(a, problem, problem.spatial_dims), out, alpha, beta)
