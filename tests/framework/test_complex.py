"""Complex tensors as rotary position embeddings use them (minidl/ops/complexops.py): values and gradients against
torch, for LLaMA's rotary embedding written as its reference code writes it, for polar / complex / conj /
view_as_real / view_as_complex, and for complex products and quotients (the other factor conjugated in the
backward, torch's convention); the dtypes and the messages."""
import numpy as np
import pytest
import torch

import minidl


def rel_err(a, b):
    """max |a - b| / max |b|, for complex arrays too."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _rotary(lib, xq, xk, freqs):
    """Meta's LLaMA reference: precompute_freqs_cis, reshape_for_broadcast and apply_rotary_emb, in library `lib`."""
    T = xq.shape[1]
    freqs_cis = lib.polar(lib.ones_like(freqs), freqs)[:T]
    xq_ = lib.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = lib.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = lib.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = lib.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def test_llama_rotary_embedding_matches_torch():
    rng = np.random.default_rng(0)
    B, T, H, D = 2, 7, 3, 8
    inv = 1.0 / (10000 ** (np.arange(0, D, 2)[: D // 2].astype(np.float32) / D))
    freqs = np.outer(np.arange(16, dtype=np.float32), inv).astype(np.float32)
    q, k = (rng.standard_normal((B, T, H, D)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((B, T, H, D)).astype(np.float32)
    ours, theirs = [], []
    for lib, store in ((minidl, ours), (torch, theirs)):
        xq, xk = lib.tensor(q, requires_grad=True), lib.tensor(k, requires_grad=True)
        oq, ok = _rotary(lib, xq, xk, lib.tensor(freqs))
        ((oq * lib.tensor(w)).sum() + (ok * ok).sum()).backward()
        store += [oq.detach().numpy(), ok.detach().numpy(), xq.grad.numpy(), xk.grad.numpy()]
    for a, b in zip(ours, theirs):
        assert a.dtype == np.float32 and np.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_polar_complex_conj_and_views_match_torch():
    rng = np.random.default_rng(1)
    r, a, re, im = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(4))
    r = np.abs(r) + 0.1
    w = rng.standard_normal((3, 4, 2)).astype(np.float32)
    grads = []
    for lib in (minidl, torch):
        tr, ta, tre, tim = (lib.tensor(v, requires_grad=True) for v in (r, a, re, im))
        z = lib.polar(tr, ta) * lib.complex(tre, tim).conj() + lib.view_as_complex(lib.tensor(w)) / lib.complex(tre, tr)
        assert z.dtype == lib.complex64 and lib.view_as_real(z).shape == (3, 4, 2)
        (lib.view_as_real(z) * lib.tensor(w)).sum().backward()
        grads.append([z.detach().numpy()] + [t.grad.numpy() for t in (tr, ta, tre, tim)])
    for x, y in zip(*grads):
        assert rel_err(x, y) < 1e-5


def test_complex_products_conjugate_the_other_factor():
    """d(z w)/dz under torch's convention: the gradient times conj(w), for a complex leaf, a real leaf (the real
    part) and a broadcast factor."""
    rng = np.random.default_rng(2)
    zr = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    wr = rng.standard_normal(3) + 1j * rng.standard_normal(3)
    xr = rng.standard_normal((4, 3)).astype(np.float32)
    got = []
    for lib in (minidl, torch):
        z = lib.tensor(zr.astype(np.complex64), requires_grad=True)
        w = lib.tensor(wr.astype(np.complex64), requires_grad=True)
        x = lib.tensor(xr, requires_grad=True)
        y = lib.view_as_real(z * w * x)
        (y * y).sum().backward()
        got.append([z.grad.numpy(), w.grad.numpy(), x.grad.numpy()])
    for a, b in zip(*got):
        assert a.dtype == b.dtype and rel_err(a, b) < 1e-5


def test_complex_dtypes_and_messages():
    assert minidl.tensor([1 + 2j]).dtype == minidl.complex64 == minidl.cfloat
    assert minidl.tensor([1j], dtype=minidl.cdouble).dtype == minidl.complex128
    z = minidl.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    assert z.is_complex() and z.requires_grad and not minidl.tensor([1.0]).is_complex()
    with pytest.raises(RuntimeError, match="last dimension must have size 2"):
        minidl.view_as_complex(minidl.randn(3, 4))
    with pytest.raises(TypeError, match="float32 or float64"):
        minidl.view_as_complex(minidl.randn(3, 2).half())
    with pytest.raises(RuntimeError, match="must be complex64 or complex128"):
        minidl.view_as_real(minidl.randn(3))
    with pytest.raises(TypeError, match="one dtype"):
        minidl.polar(minidl.ones(2), minidl.ones(2, dtype=minidl.float64))
    assert minidl.randn(2).conj().dtype == minidl.float32


@pytest.mark.parametrize("part", ["real", "imag", "angle", "abs"])
def test_real_imag_angle_abs_match_torch(part):
    """The parts a program reads back from a complex result, with gradients (z = 0 included: torch gives 0 there)."""
    rng = np.random.default_rng(3)
    a, b, w = (rng.standard_normal((3, 4)) for _ in range(3))
    a[0, 0] = b[0, 0] = 0.0
    results = []
    for lib in (minidl, torch):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        z = lib.complex(x, y) * lib.complex(y, x)
        out = getattr(z, part) if part in ("real", "imag") else getattr(lib, part)(z)
        (out * lib.tensor(w)).sum().backward()
        results.append([out.detach().numpy(), x.grad.numpy(), y.grad.numpy()])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_real_and_angle_of_a_real_tensor_and_imag_says_why_not():
    t = minidl.tensor([-1.0, 2.0])
    assert t.real is t
    assert minidl.angle(t).tolist() == torch.angle(torch.tensor([-1.0, 2.0])).tolist()
    with pytest.raises(RuntimeError, match="imag: .*no imaginary part"):
        t.imag
