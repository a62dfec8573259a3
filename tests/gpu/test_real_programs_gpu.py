"""Session 9's additions for real programs, on the GPU (they were written and checked on the CPU; CuPy runs the same
array code): complex tensors and rotary embeddings, torch.fft and stft/istft, torch.linalg's decompositions,
CTC loss, scatter_reduce, weight and spectral norm, and the small builders. Each case runs on both devices with the
same float64 inputs and compares values and gradients."""
import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")


def _both(fn, *arrays, rtol=1e-9, atol=1e-10):
    """fn(*tensors) -> a tensor (or tuple of tensors) on each device; the outputs, then the gradients of
    sum(real parts) with respect to every input, must agree."""
    results = []
    for device in ("cpu", "cuda"):
        ts = [minidl.tensor(a, device=device, requires_grad=True) for a in arrays]
        out = fn(*ts)
        outs = out if isinstance(out, tuple) else (out,)
        assert all(o.device.type == device for o in outs), (device, [o.device for o in outs])
        loss = sum((o.real if o.is_complex() else o).sum() for o in outs)
        loss.backward()
        results.append(([o.detach().cpu().numpy() for o in outs], [t.grad.cpu().numpy() for t in ts]))
    (cpu_out, cpu_grad), (gpu_out, gpu_grad) = results
    for a, b in zip(cpu_out + cpu_grad, gpu_out + gpu_grad):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


RNG = np.random.default_rng(0)


def test_complex_rotary_embedding_on_the_gpu():
    x = RNG.standard_normal((2, 5, 4, 8))
    angles = RNG.standard_normal((5, 4))

    def rope(t, a):
        freqs = minidl.polar(minidl.ones_like(a), a)
        tc = minidl.view_as_complex(t.reshape(2, 5, 4, 4, 2))
        return minidl.view_as_real(tc * freqs.reshape(1, 5, 1, 4)).flatten(3)

    _both(rope, x, angles)
    _both(lambda a, b: (minidl.complex(a, b).conj() * minidl.complex(b, a)).abs(), x, x[::-1].copy())


@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "fft2", "rfftn"])
def test_fft_on_the_gpu(name):
    x = RNG.standard_normal((3, 8, 6))
    _both(lambda t: getattr(minidl.fft, name)(t, norm="ortho"), x)


def test_irfft_and_stft_istft_on_the_gpu():
    spec = RNG.standard_normal((2, 5, 2))
    _both(lambda t: minidl.fft.irfft(minidl.view_as_complex(t), n=8), spec)
    signal = RNG.standard_normal((2, 200))

    def roundtrip(s):
        win = minidl.hann_window(64, dtype=minidl.float64, device=s.device)
        spec = minidl.stft(s, 64, hop_length=16, window=win, return_complex=True)
        return spec, minidl.istft(spec, 64, hop_length=16, window=win, length=200)

    _both(roundtrip, signal)


def test_linalg_decompositions_on_the_gpu():
    a = RNG.standard_normal((3, 5, 5))
    sym = lambda t: t + t.mT  # noqa: E731
    _both(lambda t: minidl.linalg.eigvalsh(sym(t)), a)
    _both(lambda t: minidl.linalg.eigh(sym(t))[1].abs(), a)  # eigenvectors up to sign
    q, r = minidl.linalg.qr(minidl.tensor(a, device="cuda"))
    np.testing.assert_allclose((q @ r).cpu().numpy(), a, atol=1e-12)
    _both(minidl.linalg.svdvals, RNG.standard_normal((2, 6, 4)))
    _both(lambda t: minidl.linalg.matrix_norm(t, "nuc"), a)


def test_linalg_solvers_on_the_gpu():
    a, b = RNG.standard_normal((2, 4, 4)), RNG.standard_normal((2, 4, 3))
    spd = lambda t: t @ t.mT + 4 * minidl.eye(4, dtype=t.dtype, device=t.device)  # noqa: E731
    _both(lambda t: minidl.linalg.cholesky(spd(t)), a)
    _both(lambda t, u: minidl.linalg.solve_triangular(t + 4 * minidl.eye(4, dtype=t.dtype, device=t.device), u,
                                                      upper=True), a, b)
    _both(lambda t, u: minidl.cholesky_solve(u, minidl.linalg.cholesky(spd(t))), a, b)
    _both(minidl.linalg.pinv, RNG.standard_normal((2, 5, 3)))
    _both(lambda t: minidl.linalg.matrix_exp(t * 2.0), a)
    _both(lambda t, u: minidl.linalg.lstsq(t, u).solution, RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2)))


def test_ctc_loss_on_the_gpu():
    T, N, C, S = 12, 3, 6, 4
    log_probs = RNG.standard_normal((T, N, C))
    targets = RNG.integers(1, C, (N, S))
    lengths = [12, 10, 9]
    target_lengths = [4, 3, 2]

    def loss(lp):
        tg = minidl.tensor(targets, device=lp.device)
        return F.ctc_loss(F.log_softmax(lp, 2), tg, lengths, target_lengths)

    _both(loss, log_probs)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_scatter_reduce_on_the_gpu(reduce):
    src = RNG.standard_normal((4, 6)).round(1)  # ties for amax/amin
    index = RNG.integers(0, 3, (4, 6))

    def op(base, s):
        return base.scatter_reduce(1, minidl.tensor(index, device=s.device), s, reduce, include_self=False)

    _both(op, RNG.standard_normal((4, 3)), src)


def test_scatter_reduce_prod_on_the_gpu_says_why_not():
    t = minidl.ones(3, device="cuda")
    with pytest.raises(NotImplementedError, match="prod"):
        t.scatter_reduce(0, minidl.tensor([0, 0, 1], device="cuda"), minidl.ones(3, device="cuda"), "prod")


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_weight_and_spectral_norm_on_the_gpu(kind):
    from minidl.nn.utils import parametrizations

    x = RNG.standard_normal((4, 6))
    outs = []
    for device in ("cpu", "cuda"):
        minidl.manual_seed(0)
        layer = nn.Linear(6, 5).double()
        layer = getattr(parametrizations, kind)(layer).to(device)
        layer.eval()
        xt = minidl.tensor(x, device=device, requires_grad=True)
        y = layer(xt)
        y.sum().backward()
        outs.append([y.detach().cpu().numpy(), xt.grad.cpu().numpy()])
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-8)


def test_builders_and_lazy_linear_on_the_gpu():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((1, 2))
    _both(minidl.block_diag, a, b)
    _both(lambda u, v: minidl.cartesian_prod(u, v), RNG.standard_normal(3), RNG.standard_normal(2))
    lazy = nn.LazyLinear(4).to("cuda")
    y = lazy(minidl.randn(2, 7, device="cuda"))
    assert y.shape == (2, 4) and lazy.weight.shape == (4, 7) and lazy.weight.device.type == "cuda"
    net = nn.Sequential(nn.LazyConv2d(6, 3, padding=1), nn.LazyBatchNorm2d(), nn.ReLU()).to("cuda")
    y = net(minidl.randn(2, 3, 8, 8, device="cuda"))
    assert y.shape == (2, 6, 8, 8) and type(net[0]) is nn.Conv2d and net[0].weight.shape == (6, 3, 3, 3)
    assert all(p.device.type == "cuda" for p in net.parameters()) and net[1].running_mean.device.type == "cuda"
    net.cpu()
    np.testing.assert_allclose(net(minidl.randn(2, 3, 8, 8)).shape, (2, 6, 8, 8))


def test_second_derivatives_on_the_gpu():
    """create_graph=True (autograd/higher_order.py) on CuPy arrays: a Hessian-vector product of a tanh MLP and a
    gradient penalty, as on the CPU."""
    import minidl.nn.functional as F

    x, w1, w2, v = (RNG.standard_normal(s) for s in ((5, 3), (4, 3), (2, 4), (4, 3)))
    results = []
    for device in ("cpu", "cuda"):
        xt = minidl.tensor(x, device=device, requires_grad=True)
        a, b = minidl.tensor(w1, device=device, requires_grad=True), minidl.tensor(w2, device=device, requires_grad=True)
        def critic():
            return F.linear(F.leaky_relu(F.linear(xt, a).tanh(), 0.2), b)

        ga, gb = minidl.autograd.grad((critic() ** 2).mean(), [a, b], create_graph=True)
        hv = minidl.autograd.grad((ga * minidl.tensor(v, device=device)).sum() + (gb ** 2).sum(), [a, b])
        (gx,) = minidl.autograd.grad(critic().sum(), xt, create_graph=True)   # (a new forward: hv freed the first)
        ((gx.pow(2).sum(1).sqrt() - 1) ** 2).mean().backward()
        results.append([t.detach().cpu().numpy() for t in (ga, gb, *hv, gx, a.grad, b.grad)])
    for gpu, cpu in zip(results[1], results[0]):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-9, atol=1e-11)


def test_session_10_long_tail_on_the_gpu():
    """quantile / cov / trapezoid / diag_embed / unique_consecutive and the nn long tail (channel_shuffle, lp_pool,
    the margin losses, pdist) on CuPy arrays, as on the CPU; get_total_norm of GPU gradients."""
    import minidl.nn.functional as F

    a = RNG.standard_normal((4, 7))
    _both(lambda t: minidl.quantile(t, 0.3, dim=1) + minidl.quantile(t, 0.5), a)
    _both(lambda t: (minidl.cov(t), minidl.corrcoef(t), minidl.trapezoid(t, dx=0.5)), a)
    _both(lambda t: minidl.diag_embed(t, 1), a)
    x4 = RNG.standard_normal((2, 6, 3, 3))
    _both(lambda t: (F.channel_shuffle(t, 3), F.lp_pool2d(t.abs() + 0.1, 2, 2, 1)), x4)
    t = np.array([0, 3, 1, 1, 2])
    _both(lambda s: F.multi_margin_loss(s, minidl.tensor(t, device=s.device), p=2), RNG.standard_normal((5, 4)))
    _both(lambda s: F.pdist(s), RNG.standard_normal((5, 3)))
    u = minidl.tensor([1, 1, 2, 2, 3, 1], device="cuda").unique_consecutive(return_counts=True)
    assert [v.tolist() for v in u] == [[1, 2, 3, 1], [2, 2, 1, 1]]
    # float64 through the families whose kernels are float32 / 16-bit only (the reference on host copies)
    _both(lambda s: (F.leaky_relu(s, 0.2), s.tanh(), F.gelu(s), F.max_pool2d(s, 2), F.avg_pool2d(s, 3, 1, 1)), x4)
    minidl.manual_seed(0)
    d = F.dropout(minidl.ones(10000, dtype=minidl.float64, device="cuda"), 0.3)
    assert d.dtype == minidl.float64 and abs(float((d > 0).double().mean()) - 0.7) < 0.02
    assert set(np.unique(d.cpu().numpy()).round(6)) <= {0.0, round(1 / 0.7, 6)}
    grads = [minidl.tensor(RNG.standard_normal(s), device="cuda") for s in ((3, 4), (5,))]
    total = minidl.nn.utils.get_total_norm(grads)
    assert total.device.type == "cuda"
    np.testing.assert_allclose(float(total), np.sqrt(sum(float((g.cpu().numpy() ** 2).sum()) for g in grads)),
                               rtol=1e-12)


def test_multivariate_normal_on_the_gpu():
    """MultivariateNormal's log_prob, entropy and their gradients (through cholesky and solve_triangular on CuPy)."""
    a = RNG.standard_normal((3, 3))
    cov = a @ a.T + 3 * np.eye(3)

    def dist(mu, c):
        d = minidl.distributions.MultivariateNormal(mu, covariance_matrix=c)
        return d.log_prob(minidl.tensor(np.arange(12.0).reshape(4, 3) / 10, device=mu.device)) + d.entropy()

    _both(dist, RNG.standard_normal(3), cov)


def test_sparse_adam_on_the_gpu():
    """Embedding(sparse=True) + SparseAdam (boolean row masks on CuPy arrays): the same rows move as on the CPU."""
    w = RNG.standard_normal((12, 3))
    results = []
    for device in ("cpu", "cuda"):
        emb = nn.Embedding(12, 3, sparse=True).double().to(device)
        emb.weight.data = minidl.tensor(w.copy(), device=device)
        opt = minidl.optim.SparseAdam(list(emb.parameters()), lr=0.1)
        for step in range(3):
            idx = minidl.tensor([step, step + 1, 5], device=device)
            opt.zero_grad()
            (emb(idx) ** 2).sum().backward()
            opt.step()
        results.append(emb.weight.detach().cpu().numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)
    assert np.array_equal(results[0][6:], w[6:])   # rows never looked up never moved


def test_session_10_tensor_methods_on_the_gpu():
    """fill_diagonal_, tril_ / triu_ in a graph, renorm and the in-place functional forms on CuPy arrays."""
    import minidl.nn.functional as F

    a = RNG.standard_normal((5, 3))
    _both(lambda t: (t * 1).tril_(-1) + (t * 2).triu_(1) + t.renorm(2, 0, 1.0) + F.leaky_relu_(t * 1, 0.2), a)
    z = minidl.zeros(7, 3, device="cuda").fill_diagonal_(2.0, wrap=True)
    expected = np.zeros((7, 3))
    np.fill_diagonal(expected, 2.0, wrap=True)
    np.testing.assert_array_equal(z.cpu().numpy(), expected)


@pytest.mark.parametrize("channels_last", [False, True])
def test_second_derivatives_through_convolutions_on_the_gpu(channels_last):
    """WGAN-GP on a convolutional critic with max / average / adaptive pooling and a transposed convolution (their
    double backwards: nn/functional/convolution.py, pooling.py) in float32 on the GPU's kernels (TF32 off) against
    float64 on the CPU."""
    rng = np.random.default_rng(9)
    xs, w1, b1, w2, wt = (rng.standard_normal(s) for s in ((2, 4, 9, 8), (6, 2, 3, 3), (6,), (3, 6, 3, 3),
                                                          (3, 2, 3, 3)))
    def run(device, dtype):
        x = minidl.tensor(xs, device=device, dtype=dtype, requires_grad=True)
        if channels_last:
            x = x.to(memory_format=minidl.channels_last)
        a, b, c, t = (minidl.tensor(v, device=device, dtype=dtype, requires_grad=True) for v in (w1, b1, w2, wt))
        h = F.leaky_relu(F.conv2d(x, a, b, stride=2, padding=1, groups=2), 0.2)
        h = F.max_pool2d(h, 3, stride=1, padding=1) + F.avg_pool2d(h, 3, stride=1, padding=1)
        h = h.tanh() if not channels_last else h.tanh().contiguous(memory_format=minidl.channels_last)
        d = F.conv_transpose2d(F.conv2d(h, c, padding=1).tanh(), t, stride=2, output_padding=1)
        d = d + F.adaptive_avg_pool2d(d, (2, 3)).sum() * 0.1
        (g,) = minidl.autograd.grad(d.sum(), x, create_graph=True)
        ((g.pow(2).sum((1, 2, 3)).sqrt() - 1) ** 2).mean().backward()
        return g, a.grad, b.grad, c.grad, t.grad

    _gpu32_matches_cpu64(run, rtol=2e-4)


def _gpu32_matches_cpu64(run, rtol):
    """run(device, dtype) -> tensors, in float64 on the CPU and float32 on the GPU with TF32 off: equal to rtol
    (and to rtol of each result's largest value)."""
    results = []
    old = minidl.backends.cudnn.allow_tf32
    minidl.backends.cudnn.allow_tf32 = False
    try:
        for device, dtype in (("cpu", minidl.float64), ("cuda", minidl.float32)):
            results.append([v.detach().cpu().numpy().astype(np.float64) for v in run(device, dtype)])
    finally:
        minidl.backends.cudnn.allow_tf32 = old
    for gpu, cpu in zip(results[1], results[0]):
        np.testing.assert_allclose(gpu, cpu, rtol=rtol, atol=rtol * np.abs(cpu).max())


def test_second_derivatives_through_normalization_and_gelu_on_the_gpu():
    """The gradient penalty through batch norm (training and eval), layer norm, RMS norm and gelu (exact and tanh)
    after a convolution, with create_graph to the weights: float32 on the GPU against float64 on the CPU."""
    rng = np.random.default_rng(10)
    xs, cw, w, b = (rng.standard_normal(s) for s in ((3, 2, 5, 6), (4, 2, 3, 3), (4,), (4,)))
    def run(device, dtype):
        x = minidl.tensor(xs, device=device, dtype=dtype, requires_grad=True)
        c, g_, b_ = (minidl.tensor(v, device=device, dtype=dtype, requires_grad=True) for v in (cw, w, b))
        h = F.conv2d(x, c, padding=1)
        h = F.gelu(F.batch_norm(h, None, None, g_, b_, training=True))
        h = F.gelu(F.layer_norm(h, (6,)), approximate="tanh")
        rm = minidl.tensor([0.1, -0.2, 0.3, 0.0], device=device, dtype=dtype)
        rv = minidl.tensor([1.5, 0.5, 2.0, 1.0], device=device, dtype=dtype)
        h = F.rms_norm(F.batch_norm(h, rm, rv, g_, b_), (5, 6), eps=1e-6)
        (g,) = minidl.autograd.grad((h ** 3).sum(), x, create_graph=True)   # (h ** 2 is constant under rms_norm)
        penalty = ((g.pow(2).sum((1, 2, 3)).sqrt() - 1) ** 2).mean()
        return (g, penalty, *minidl.autograd.grad(penalty, [c, g_, b_]))

    _gpu32_matches_cpu64(run, rtol=1e-3)


def test_second_derivatives_through_dropout_on_the_gpu():
    """Dropout's double backward on the GPU regenerates the forward's mask (Philox, same seed): the penalty through
    a dropped-out critic equals the one with the forward's mask applied as a constant."""
    rng = np.random.default_rng(12)
    xs, w = rng.standard_normal((2, 3, 8, 8)), rng.standard_normal((3, 3, 1, 1))
    x = minidl.tensor(xs, device="cuda", dtype=minidl.float32, requires_grad=True)
    wt = minidl.tensor(w, device="cuda", dtype=minidl.float32, requires_grad=True)
    y = F.dropout(F.conv2d(x, wt).tanh(), 0.4)
    mask = minidl.tensor((y.detach().cpu().numpy() != 0) / np.float32(0.6), device="cuda")
    (g,) = minidl.autograd.grad((y ** 3).sum(), x, create_graph=True)
    (gw,) = minidl.autograd.grad((g ** 2).sum(), wt)
    x2 = minidl.tensor(xs, device="cuda", dtype=minidl.float32, requires_grad=True)
    w2 = minidl.tensor(w, device="cuda", dtype=minidl.float32, requires_grad=True)
    (g2,) = minidl.autograd.grad(((F.conv2d(x2, w2).tanh() * mask) ** 3).sum(), x2, create_graph=True)
    (gw2,) = minidl.autograd.grad((g2 ** 2).sum(), w2)
    np.testing.assert_allclose(g.detach().cpu().numpy(), g2.detach().cpu().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw.cpu().numpy(), gw2.cpu().numpy(), rtol=1e-4, atol=1e-4)


def test_sparse_coo_products_on_the_gpu():
    """Session 11's sparse COO tensors (ops/sparse.py): built on the GPU from repeated indices, multiplied from both
    sides (scatter_add of gathered rows), added to a dense tensor; values and gradients to the dense operand and to
    the entries as on the CPU."""
    indices = np.stack([RNG.integers(0, 6, 12), RNG.integers(0, 5, 12)])
    indices[:, -1] = indices[:, 0]   # a repeated coordinate

    def products(values, right, left):
        s = minidl.sparse_coo_tensor(minidl.tensor(indices, device=values.device), values, (6, 5))
        return s @ right, left @ s, minidl.spmm(s.coalesce(), right), (left.t() @ left[:, :5] + s).sum(0), s.to_dense()

    _both(products, RNG.standard_normal(12), RNG.standard_normal((5, 3)), RNG.standard_normal((4, 6)))


def test_gcn_and_gat_programs_run_on_the_gpu(tmp_path):
    """The two graph programs of tests/torch_programs run through minidl.run on the GPU (torch.accelerator finds it):
    sparse features and adjacency on the device, and the attention network's dense masking."""
    from tests.framework.test_torch_programs import PROGRAMS, _synthetic_cora, ok, run

    _synthetic_cora(tmp_path / "cora")
    for program, extra in (("gcn.py", ()), ("gat.py", ("--concat-heads",))):
        out = ok(run(PROGRAMS / program, "--data", tmp_path / "cora", "--epochs", 40, "--val-every", 20, *extra,
                     cwd=tmp_path))
        assert "Using cuda" in out, out
        accuracy = float(out.split("Test set results: loss ")[1].split("accuracy ")[1].split()[0])
        assert accuracy >= 0.7, out
