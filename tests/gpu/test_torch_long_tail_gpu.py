"""Session 8's additions for real programs, on the GPU: erfinv (cupyx), the in-place random fills, autograd.grad, the
scaled_dot_product_attention backends (the fused kernel against the composite), and a DataLoader over GPU arrays drawing
an endless sampler batch by batch."""
import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")


def test_erfinv_on_the_gpu_matches_the_cpu():
    x = np.concatenate([np.linspace(-0.999, 0.999, 501), [0.0, 1.0, -1.0]])
    got = minidl.tensor(x, device="cuda").erfinv().cpu().numpy()
    np.testing.assert_allclose(got, minidl.tensor(x).erfinv().numpy(), rtol=1e-12)
    t = minidl.tensor([0.3, -0.6], device="cuda", requires_grad=True)
    t.erfinv().sum().backward()
    c = minidl.tensor([0.3, -0.6], requires_grad=True)
    c.erfinv().sum().backward()
    np.testing.assert_allclose(t.grad.cpu().numpy(), c.grad.numpy(), rtol=1e-6)


def test_random_fills_on_the_gpu():
    minidl.manual_seed(0)
    x = minidl.empty(200000, device="cuda")
    assert abs(x.bernoulli_(0.3).mean().item() - 0.3) < 0.005
    assert abs(x.exponential_(2.0).mean().item() - 0.5) < 0.01
    assert set(np.unique(x.random_(3, 10).cpu().numpy())) == set(range(3, 10))
    p = minidl.tensor([0.0, 1.0], device="cuda").expand(1000, 2)
    assert minidl.empty(1000, 2, device="cuda").bernoulli_(p).mean(0).tolist() == [0.0, 1.0]


def test_autograd_grad_on_the_gpu_matches_the_cpu():
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    results = []
    for device in ("cpu", "cuda"):
        x = minidl.tensor(xv, device=device, requires_grad=True)
        w = minidl.tensor(wv, device=device, requires_grad=True)
        h = x * w
        y = (minidl.sin(h) * x).sum()
        results.append([g.cpu().numpy() for g in minidl.autograd.grad(y, [x, w, h])])
        assert x.grad is None and w.grad is None
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sdpa_backends_on_the_gpu(dtype):
    """The fused kernel (flash / mem-efficient / cuDNN allowed) against the composite (MATH only), causal, with
    gradients."""
    from minidl.nn.attention import SDPBackend, sdpa_kernel

    rng = np.random.default_rng(1)
    base = [rng.standard_normal((2, 4, 64, 32)).astype(np.float32) for _ in range(3)]
    outs = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        q, k, v = (minidl.tensor(a, device="cuda").type(getattr(minidl, dtype)).requires_grad_() for a in base)
        with sdpa_kernel(backend):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (y.float() * minidl.tensor(np.arange(y.numel()).reshape(y.shape) % 5, device="cuda")).sum().backward()
        outs.append([t.detach().float().cpu().numpy() for t in (y, q.grad, k.grad, v.grad)])
    tol = 1e-5 if dtype == "float32" else 2e-2
    for a, b in zip(*outs):
        assert rel_err(a, b) <= tol


def test_a_gpu_loader_draws_an_endless_sampler_batch_by_batch():
    from tests.framework.test_torch_long_tail import _Tripwire

    data = minidl.data.TensorDataset(minidl.arange(10.0, device="cuda") ** 2, minidl.arange(10, device="cuda"))
    it = iter(minidl.data.DataLoader(data, sampler=_Tripwire(10), batch_size=4))
    squares, indices = next(it)
    assert squares.is_cuda and indices.tolist() == [0, 1, 2, 3] and squares.tolist() == [0.0, 1.0, 4.0, 9.0]
    assert next(it)[1].tolist() == [4, 5, 6, 7]


def test_unfold_fold_index_put_and_histc_on_the_gpu():
    """The composites on the GPU's kernels: unfold/fold by convolution (exact, TF32 off), index_put with accumulate
    by index_add, histc by bincount: the CPU's values."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    for device in ("cpu", "cuda"):
        cols = F.unfold(minidl.tensor(x, device=device), (2, 3), stride=2, padding=1)
        back = F.fold(cols, (9, 8), (2, 3), stride=2, padding=1)
        if device == "cpu":
            want_cols, want_back = cols.numpy(), back.numpy()
        else:
            np.testing.assert_array_equal(cols.cpu().numpy(), want_cols)
            np.testing.assert_allclose(back.cpu().numpy(), want_back, rtol=1e-6)
    put = minidl.zeros(3, 4, device="cuda").index_put_((minidl.tensor([0, 0, 2], device="cuda"),
                                                        minidl.tensor([1, 1, 3], device="cuda")),
                                                       minidl.tensor(1.0, device="cuda"), accumulate=True)
    assert put.tolist() == [[0.0, 2.0, 0.0, 0.0], [0.0] * 4, [0.0, 0.0, 0.0, 1.0]]
    v = rng.standard_normal(1000)
    np.testing.assert_array_equal(minidl.tensor(v, device="cuda").histc(20, -2, 2).cpu().numpy(),
                                  minidl.tensor(v).histc(20, -2, 2).numpy())
