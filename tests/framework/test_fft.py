"""minidl.fft against torch.fft in float64: every transform and norm, sizes that pad or crop (n, s), odd lengths
of the one-sided transforms; values and the gradient of a weighted sum of the outputs (real and imaginary parts)."""
import numpy as np
import pytest
import torch

import minidl

CASES = {
    "fft": (lambda lib, t, norm: lib.fft.fft(t, norm=norm), (3, 8), False),
    "fft_complex": (lambda lib, t, norm: lib.fft.fft(t, norm=norm), (3, 8), True),
    "ifft_n6": (lambda lib, t, norm: lib.fft.ifft(t, n=6, norm=norm), (3, 8), True),
    "rfft": (lambda lib, t, norm: lib.fft.rfft(t, norm=norm), (3, 8), False),
    "rfft_n7": (lambda lib, t, norm: lib.fft.rfft(t, n=7, norm=norm), (3, 8), False),
    "irfft": (lambda lib, t, norm: lib.fft.irfft(t, norm=norm), (3, 5), True),
    "irfft_n9": (lambda lib, t, norm: lib.fft.irfft(t, n=9, norm=norm), (3, 5), True),
    "rfft2": (lambda lib, t, norm: lib.fft.rfft2(t, norm=norm), (2, 4, 6), False),
    "irfft2": (lambda lib, t, norm: lib.fft.irfft2(t, norm=norm), (2, 4, 4), True),
    "fftn": (lambda lib, t, norm: lib.fft.fftn(t, norm=norm), (2, 3, 4), True),
    "ifft2_s": (lambda lib, t, norm: lib.fft.ifft2(t, s=(3, 5), norm=norm), (2, 4, 4), True),
    "rfftn_dims": (lambda lib, t, norm: lib.fft.rfftn(t, dim=(0, 2), norm=norm), (4, 2, 6), False),
}


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fft_matches_torch(case, norm):
    fn, shape, complex_in = CASES[case]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_in else 0)
    got = []
    for lib in (minidl, torch):
        t = lib.tensor(x, requires_grad=True)
        y = fn(lib, t, norm)
        yr = lib.view_as_real(y) if y.is_complex() else y
        w = np.random.default_rng(5).standard_normal(tuple(yr.shape))
        (yr * lib.tensor(w)).sum().backward()
        got.append([yr.detach().numpy(), t.grad.numpy()])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)


def test_fft_helpers_dtypes_and_messages():
    assert np.allclose(minidl.fft.fftfreq(5).numpy(), torch.fft.fftfreq(5).numpy())
    assert np.allclose(minidl.fft.rfftfreq(6, 0.5).numpy(), torch.fft.rfftfreq(6, 0.5).numpy())
    x = np.arange(6.0)
    assert np.array_equal(minidl.fft.fftshift(minidl.tensor(x)).numpy(), torch.fft.fftshift(torch.tensor(x)).numpy())
    assert np.array_equal(minidl.fft.ifftshift(minidl.tensor(x)).numpy(), torch.fft.ifftshift(torch.tensor(x)).numpy())
    spectrum = minidl.fft.rfft(minidl.randn(8))
    assert spectrum.dtype == minidl.complex64 and minidl.fft.irfft(spectrum).dtype == minidl.float32
    with pytest.raises(ValueError, match="norm must be one of"):
        minidl.fft.fft(minidl.randn(4), norm="unitary")
    with pytest.raises(RuntimeError, match="expects a real input"):
        minidl.fft.rfft(spectrum)


STFT_CASES = [dict(n_fft=16), dict(n_fft=16, hop_length=5, win_length=12, hann=True),
              dict(n_fft=16, normalized=True, hann=True), dict(n_fft=15, hop_length=4, onesided=False, hann=True)]


@pytest.mark.parametrize("case", range(len(STFT_CASES)))
def test_stft_and_istft_match_torch(case):
    kw = dict(STFT_CASES[case])
    hann = kw.pop("hann", False)
    x = np.random.default_rng(0).standard_normal((2, 50))
    got = []
    for lib in (minidl, torch):
        t = lib.tensor(x, requires_grad=True)
        w = lib.tensor(np.hanning(kw.get("win_length", kw["n_fft"]) + 1)[:-1]) if hann else \
            lib.ones(kw["n_fft"], dtype=lib.float64)
        spec = lib.view_as_real(lib.stft(t, window=w, return_complex=True, **kw))
        (spec * lib.tensor(np.random.default_rng(3).standard_normal(tuple(spec.shape)))).sum().backward()
        back = lib.istft(lib.stft(lib.tensor(x), window=w, return_complex=True, **kw), window=w, length=50, **kw)
        got.append([spec.detach().numpy(), t.grad.numpy(), back.numpy()])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got[0][2], x, atol=1e-10)   # the round trip gives the signal back


def test_stft_messages():
    with pytest.raises(RuntimeError, match="return_complex parameter be given"):
        minidl.stft(minidl.randn(40), 8)
    hann = minidl.tensor(np.hanning(9)[:-1])
    with pytest.raises(RuntimeError, match="NOLA"):
        minidl.istft(minidl.stft(minidl.randn(40), 8, window=hann, center=False, return_complex=True), 8, window=hann,
                     center=False)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
                                  "kaiser_window"])
def test_window_functions_match_torch(name):
    for length in (0, 1, 2, 7, 64):
        for periodic in (True, False):
            ours = getattr(minidl, name)(length, periodic, dtype=minidl.float64).numpy()
            theirs = getattr(torch, name)(length, periodic, dtype=torch.float64).numpy()
            np.testing.assert_allclose(ours, theirs, atol=1e-12, err_msg=f"{name}({length}, {periodic})")
    assert getattr(minidl, name)(8).dtype == minidl.float32
    with pytest.raises(ValueError, match=f"{name}: window_length must be an int >= 0"):
        getattr(minidl, name)(-1)
    with pytest.raises(TypeError, match=f"{name}: dtype int64 is not a floating-point type"):
        getattr(minidl, name)(4, dtype=minidl.int64)
