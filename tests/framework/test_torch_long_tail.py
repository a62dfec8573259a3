"""The long tail of PyTorch that real programs use (issue 28), each against torch where torch can compute
the reference: transposed convolutions, BCELoss, softplus, in-place ops on 0-d tensors, in-place shape ops,
matmul's keywords, Generator objects, multinomial / normal / bernoulli (by the rules every draw obeys), a
lazy RandomSampler, and the errors torch raises for bad random-number arguments."""
import math

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err


def _pair(shape, seed=0, requires_grad=False):
    x = np.random.default_rng(seed).standard_normal(shape)
    return (minidl.tensor(x, requires_grad=requires_grad), torch.tensor(x, requires_grad=requires_grad))


@pytest.mark.parametrize("dims, kw", [
    (1, dict(stride=2, padding=1, output_padding=1)),
    (2, dict(stride=2, padding=1)),
    (2, dict(stride=(2, 1), padding=(0, 1), output_padding=(1, 0), groups=2)),
    (2, dict(stride=1, padding=2, dilation=2)),
    (3, dict(stride=2, padding=0)),
])
def test_conv_transpose_matches_torch(dims, kw):
    groups = kw.get("groups", 1)
    mine = getattr(nn, f"ConvTranspose{dims}d")(4, 6, 3, **kw).double()
    theirs = getattr(torch.nn, f"ConvTranspose{dims}d")(4, 6, 3, **kw).double()
    theirs.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in mine.state_dict().items()})
    assert mine.weight.shape == (4, 6 // groups) + (3,) * dims
    x, tx = _pair((2, 4) + (5,) * dims, seed=dims, requires_grad=True)
    y, ty = mine(x), theirs(tx)
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= 1e-12
    g = np.random.default_rng(9).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= 1e-12
    assert rel_err(mine.weight.grad.numpy(), theirs.weight.grad.numpy()) <= 1e-12
    assert rel_err(mine.bias.grad.numpy(), theirs.bias.grad.numpy()) <= 1e-12


def test_conv_transpose_output_size_and_errors():
    layer = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    x = minidl.randn(1, 3, 4, 4)
    assert layer(x).shape == (1, 2, 7, 7)
    assert layer(x, output_size=(8, 8)).shape == (1, 2, 8, 8)
    with pytest.raises(ValueError, match="not reachable"):
        layer(x, output_size=(10, 10))
    with pytest.raises(ValueError, match="channels"):
        layer(minidl.randn(1, 4, 4, 4))
    with pytest.raises(ValueError, match="output_padding"):
        F.conv_transpose2d(x, layer.weight, stride=1, output_padding=1)


def test_bce_loss_matches_torch():
    p = 1 / (1 + np.exp(-np.random.default_rng(1).standard_normal((5, 3))))
    p[0, 0], p[1, 1] = 0.0, 1.0   # saturated: torch clamps each log at -100
    y = np.random.default_rng(2).integers(0, 2, (5, 3)).astype(np.float64)
    w = np.random.default_rng(3).random((3,))
    for reduction in ("mean", "sum", "none"):
        x, tx = minidl.tensor(p, requires_grad=True), torch.tensor(p, requires_grad=True)
        out = nn.BCELoss(weight=minidl.tensor(w), reduction=reduction)(x, minidl.tensor(y))
        tout = torch.nn.BCELoss(weight=torch.tensor(w), reduction=reduction)(tx, torch.tensor(y))
        assert np.allclose(out.detach().numpy(), tout.detach().numpy())
        out.sum().backward()
        tout.sum().backward()
        assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-6)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(minidl.tensor([1.5]), minidl.tensor([1.0]))


def test_softplus_matches_torch():
    x, tx = _pair((4, 7), seed=4, requires_grad=True)
    for beta, threshold in ((1.0, 20.0), (2.0, 3.0), (0.5, 20.0)):
        x.grad, tx.grad = None, None
        y, ty = nn.Softplus(beta, threshold)(x * 8), torch.nn.Softplus(beta, threshold)(tx * 8)
        assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= 1e-12
        y.sum().backward()
        ty.sum().backward()
        assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= 1e-12


def test_in_place_ops_on_zero_d_tensors():
    for make in (lambda lib: lib.randn(()), lambda lib: lib.randn(3).sum(), lambda lib: lib.tensor(2.0)):
        a, t = make(minidl), make(torch)
        a -= 1
        a *= 3
        a += a
        t -= 1
        t *= 3
        t += t
        assert a.shape == () and a.dtype == minidl.float32
    x = minidl.tensor(3.0)
    x.add_(2, minidl.tensor(4.0))      # torch's old add_(value, other): x += value * other
    assert float(x) == 11.0


def test_in_place_shape_ops_and_their_gradient():
    x, tx = _pair((2, 3), requires_grad=True)
    y, ty = x * 2, tx * 2
    y.unsqueeze_(1)
    ty.unsqueeze_(1)
    y.squeeze_()
    ty.squeeze_()
    y.t_()
    ty.t_()
    assert y.shape == tuple(ty.shape)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy())
    z = minidl.randn(2, 3, 4)
    z.transpose_(0, 2)
    assert z.shape == (4, 3, 2)
    with pytest.raises(RuntimeError, match="leaf"):
        minidl.randn(3, requires_grad=True).unsqueeze_(0)


def test_matmul_keywords_and_roll_function():
    a, b = minidl.randn(2, 3), minidl.randn(3, 4)
    assert np.allclose(minidl.matmul(input=a, other=b).numpy(), a.numpy() @ b.numpy())
    assert minidl.roll(minidl.arange(6), 2).tolist() == torch.roll(torch.arange(6), 2).tolist()


def test_generator_objects():
    g1, g2 = minidl.Generator().manual_seed(5), minidl.Generator().manual_seed(5)
    assert minidl.randperm(10, generator=g1).tolist() == minidl.randperm(10, generator=g2).tolist()
    assert np.array_equal(minidl.rand(3, generator=g1).numpy(), minidl.rand(3, generator=g2).numpy())
    assert g1.initial_seed() == 5
    state = g1.get_state()
    first = minidl.randn(4, generator=g1).numpy()
    g1.set_state(state)
    assert np.array_equal(minidl.randn(4, generator=g1).numpy(), first)
    loader = minidl.data.DataLoader(list(range(10)), batch_size=10, shuffle=True,
                                    generator=minidl.Generator().manual_seed(7))
    again = minidl.data.DataLoader(list(range(10)), batch_size=10, shuffle=True,
                                   generator=minidl.Generator().manual_seed(7))
    assert next(iter(loader)).tolist() == next(iter(again)).tolist()


def test_multinomial_normal_bernoulli_by_their_rules():
    minidl.manual_seed(0)
    w = minidl.tensor([0.0, 1.0, 3.0, 0.0])
    draws = minidl.multinomial(w, 4000, replacement=True)
    assert draws.dtype == minidl.int64 and draws.shape == (4000,)
    counts = np.bincount(draws.numpy(), minlength=4)
    assert counts[0] == counts[3] == 0 and 0.2 < counts[1] / 4000 < 0.3
    rows = minidl.multinomial(minidl.ones(3, 5), 5)                    # without replacement: a permutation
    assert all(sorted(r) == list(range(5)) for r in rows.tolist())
    with pytest.raises(RuntimeError, match="without replacement"):
        minidl.multinomial(w, 3)
    with pytest.raises(RuntimeError, match="< 0"):
        minidl.multinomial(minidl.tensor([0.5, -0.1]), 1)
    z = minidl.normal(minidl.full((20000,), 3.0), minidl.full((20000,), 2.0)).numpy()
    assert abs(z.mean() - 3.0) < 0.1 and abs(z.std() - 2.0) < 0.1
    assert minidl.normal(0.0, 1.0, size=(2, 3)).shape == (2, 3)
    assert minidl.normal(minidl.zeros(2, 1), 1.0).shape == (2, 1)
    b = minidl.bernoulli(minidl.full((10000,), 0.25)).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and 0.22 < b.mean() < 0.28


def test_random_argument_errors_as_torch():
    with pytest.raises(TypeError, match="floating-point"):
        minidl.rand(2, dtype=minidl.int64)
    with pytest.raises(ValueError, match="non-negative"):
        minidl.randperm(-1)


def test_random_sampler_with_replacement_is_lazy():
    sampler = minidl.data.RandomSampler(list(range(5)), replacement=True, num_samples=int(1e10))
    it = iter(sampler)
    first = [next(it) for _ in range(100)]
    assert len(sampler) == int(1e10) and all(0 <= i < 5 for i in first)


class _Tripwire(minidl.data.Sampler):
    """An "endless" sampler (minGPT's trainer: RandomSampler(replacement=True, num_samples=int(1e10))) that fails
    loudly, instead of hanging, when something lists far more of it than a few batches need."""

    def __init__(self, n, length=int(1e10)):
        self.n, self.length = n, length

    def __iter__(self):
        for k in range(100_000):
            yield k % self.n
        raise AssertionError("the sampler was drawn far past the batches asked for")

    def __len__(self):
        return self.length


@pytest.mark.parametrize("kind", ["samples", "workers", "arrays", "batch_sampler"])
def test_a_loader_draws_an_endless_sampler_batch_by_batch(kind):
    class Squares(minidl.data.Dataset):
        def __len__(self):
            return 10

        def __getitem__(self, i):
            return np.float32(i * i), i

    dataset = minidl.data.TensorDataset(minidl.arange(10.0) ** 2, minidl.arange(10)) if kind == "arrays" else Squares()
    if kind == "batch_sampler":
        loader = minidl.data.DataLoader(dataset, batch_sampler=minidl.data.BatchSampler(_Tripwire(10), 4, False))
    else:
        loader = minidl.data.DataLoader(dataset, sampler=_Tripwire(10), batch_size=4,
                                        num_workers=2 if kind == "workers" else 0)
    it = iter(loader)
    batches = [next(it) for _ in range(3)]   # minGPT's loop: next() until max_iters, never the end of the epoch
    squares, indices = zip(*batches)
    assert [b.tolist() for b in indices] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert np.array_equal(np.concatenate([s.numpy() for s in squares]), [0, 1, 4, 9, 16, 25, 36, 49, 64, 81, 0, 1])


def test_distributions_match_torch():
    from minidl import distributions as D
    import torch.distributions as TD

    logits = np.random.default_rng(0).standard_normal((3, 5))
    c, tc = D.Categorical(logits=minidl.tensor(logits)), TD.Categorical(logits=torch.tensor(logits))
    v = np.array([0, 4, 2])
    assert np.allclose(c.log_prob(minidl.tensor(v)).numpy(), tc.log_prob(torch.tensor(v)).numpy())
    assert np.allclose(c.entropy().numpy(), tc.entropy().numpy())
    assert c.sample((7,)).shape == tuple(tc.sample((7,)).shape)
    p = np.array([0.2, 0.7, 0.5])
    b, tb = D.Bernoulli(probs=minidl.tensor(p)), TD.Bernoulli(probs=torch.tensor(p))
    assert np.allclose(b.log_prob(minidl.tensor([1.0, 0.0, 1.0])).numpy(),
                       tb.log_prob(torch.tensor([1.0, 0.0, 1.0])).numpy(), atol=1e-6)
    assert np.allclose(b.entropy().numpy(), tb.entropy().numpy(), atol=1e-6)
    n = D.Normal(minidl.tensor([0.0, 1.0]), minidl.tensor([1.0, 2.0]))
    tn = TD.Normal(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 2.0]))
    for fn in ("log_prob", "cdf"):
        assert np.allclose(getattr(n, fn)(minidl.tensor([0.5, -1.0])).numpy(),
                           getattr(tn, fn)(torch.tensor([0.5, -1.0])).numpy(), atol=1e-6), fn
    assert np.allclose(n.entropy().numpy(), tn.entropy().numpy())
    u, tu = D.Uniform(minidl.tensor(0.0), minidl.tensor(2.0)), TD.Uniform(torch.tensor(0.0), torch.tensor(2.0))
    assert np.allclose(u.log_prob(minidl.tensor([0.5])).numpy(), tu.log_prob(torch.tensor([0.5])).numpy())
    oh, toh = D.OneHotCategorical(logits=minidl.tensor(logits)), TD.OneHotCategorical(logits=torch.tensor(logits))
    s = oh.sample()
    assert s.shape == (3, 5) and np.allclose(s.numpy().sum(-1), 1)
    assert np.allclose(oh.log_prob(s).numpy(), toh.log_prob(torch.tensor(s.numpy())).numpy())
    q, tq = D.Normal(minidl.tensor([1.0, 1.0]), minidl.tensor([1.0, 1.0])), TD.Normal(torch.ones(2), torch.ones(2))
    assert np.allclose(D.kl_divergence(n, q).numpy(), TD.kl_divergence(tn, tq).numpy())


def test_distribution_gradients_flow():
    """REINFORCE's -log_prob * reward and a reparameterised Normal sample both reach the parameters."""
    from minidl import distributions as D

    logits = minidl.randn(4, 3, requires_grad=True)
    dist = D.Categorical(logits=logits)
    (-(dist.log_prob(dist.sample()) * 2.0).sum()).backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0
    loc, scale = minidl.zeros(5, requires_grad=True), minidl.ones(5, requires_grad=True)
    D.Normal(loc, scale).rsample().sum().backward()
    assert np.allclose(loc.grad.numpy(), 1.0) and scale.grad is not None


def test_logsumexp_matches_torch():
    x = np.random.default_rng(0).standard_normal((3, 4)) * 30
    a, t = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = a.logsumexp(1), t.logsumexp(1)
    assert np.allclose(ya.detach().numpy(), yt.detach().numpy())
    ya.sum().backward()
    yt.sum().backward()
    assert np.allclose(a.grad.numpy(), t.grad.numpy())


def test_module_hooks_match_torch():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).double()
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double()
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    seen, tseen, back, tback = [], [], [], []
    handle = m[1].register_forward_hook(lambda mod, args, out: seen.append(out.detach().numpy().copy()))
    tm[1].register_forward_hook(lambda mod, args, out: tseen.append(out.detach().numpy().copy()))
    m[2].register_full_backward_hook(lambda mod, gi, go: back.append((gi[0].numpy().copy(), go[0].numpy().copy())))
    tm[2].register_full_backward_hook(lambda mod, gi, go: tback.append((gi[0].numpy().copy(), go[0].numpy().copy())))
    x = np.random.default_rng(1).standard_normal((5, 3))
    (m(minidl.tensor(x)) ** 2).sum().backward()
    (tm(torch.tensor(x)) ** 2).sum().backward()
    assert np.allclose(seen[0], tseen[0])
    assert np.allclose(back[0][0], tback[0][0]) and np.allclose(back[0][1], tback[0][1])
    handle.remove()
    m(minidl.tensor(x))
    assert len(seen) == 1
    m[0].register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    assert np.allclose(m[0](minidl.tensor(x)).detach().numpy(), m[0].bias.detach().numpy())


def test_tensor_hooks_fire_on_non_leaves_and_refuse_constants():
    x = minidl.randn(3, requires_grad=True)
    y = x * 2
    got = []
    handle = y.register_hook(lambda g: got.append(g.numpy().copy()) or g * 10)
    (y * y).sum().backward()
    assert np.allclose(got[0], 2 * y.detach().numpy())
    assert np.allclose(x.grad.numpy(), 10 * 2 * 2 * y.detach().numpy())
    handle.remove()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        minidl.randn(3).register_hook(lambda g: g)


def test_iterable_dataset_and_sampler_checks():
    from minidl.data import DataLoader, IterableDataset, Sampler

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(list(DataLoader(Stream(), batch_size=4, drop_last=True))) == 2
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(Stream(), shuffle=True)

    class Longer(Sampler):
        def __init__(self):
            pass

        def __iter__(self):
            return iter([0, 1, 2, 3, 4, 5])

        def __len__(self):
            return 3

    assert [b.tolist() for b in DataLoader(list(range(10)), batch_size=2, sampler=Longer())] == [[0, 1], [2, 3], [4, 5]]

    class Floats(Longer):
        def __iter__(self):
            return iter([0.5])

    with pytest.raises(TypeError, match="integers"):
        list(DataLoader(list(range(3)), sampler=Floats()))


def _through_runner(tmp_path, source):
    """`python -m minidl.run` on a program of that source; it must succeed."""
    import subprocess
    import sys

    prog = tmp_path / "prog.py"
    prog.write_text(source)
    result = subprocess.run([sys.executable, "-m", "minidl.run", str(prog)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def test_runner_long_tail(tmp_path):
    """torch.__version__, torch.compile, torch.cuda.amp, torch.nn.parallel.DataParallel, torch.distributions,
    torch.multiprocessing and set_default_device, through `python -m minidl.run`."""
    result = _through_runner(
        tmp_path,
        "import torch, torch.nn as nn\n"
        "from torch.cuda.amp import GradScaler, autocast\n"
        "import torch.multiprocessing as mp\n"
        "from torch.distributions import Categorical\n"
        "assert torch.__version__.startswith('2.')\n"
        "model = torch.compile(nn.DataParallel(nn.Linear(3, 2)))\n"
        "torch.set_default_device('cpu')\n"
        "x = torch.randn(4, 3)\n"
        "print('state', sorted(model.state_dict()))\n"
        "print('sample', Categorical(logits=model(x)).sample().shape)\n"
        "print('ok', mp.get_start_method())\n")
    assert "state ['module.bias', 'module.weight']" in result.stdout and "ok fork" in result.stdout


def test_runner_names_the_line_where_a_missing_name_is_used(tmp_path):
    import subprocess
    import sys

    (tmp_path / "helper.py").write_text("import torch\n\ndef make():\n    return torch.not_a_real_name(3)\n")
    prog = tmp_path / "main.py"
    prog.write_text("import helper\nhelper.make()\n")
    result = subprocess.run([sys.executable, "-m", "minidl.run", str(prog)], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 1
    assert "helper.py:4" in result.stderr and "torch.not_a_real_name" in result.stderr


# Parameter counts of torchvision's models (torchvision's documentation), the check that the architectures
# and their state-dict names are torchvision's.
TORCHVISION_PARAMS = {"resnet18": 11689512, "resnet34": 21797672, "resnet50": 25557032, "mobilenet_v2": 3504872,
                      "alexnet": 61100840, "vgg11": 132863336, "resnet101": 44549160, "resnext50_32x4d": 25028904,
                      "wide_resnet50_2": 68883240, "vit_b_16": 86567656, "vit_b_32": 88224232}


@pytest.mark.parametrize("name", list(TORCHVISION_PARAMS))
def test_torchvision_models_have_torchvisions_parameters(name):
    from minidl.vision import models

    model = getattr(models, name)()
    assert sum(p.numel() for p in model.parameters()) == TORCHVISION_PARAMS[name]
    keys = list(model.state_dict())
    first = {"mobilenet_v2": "features.0.0.weight", "alexnet": "features.0.weight", "vgg11": "features.0.weight",
             "vit_b_16": "class_token", "vit_b_32": "class_token"}
    assert keys[0] == first.get(name, "conv1.weight")
    if name.startswith("vit"):   # torchvision's names for the encoder blocks (a torchvision checkpoint loads)
        assert keys[1:4] == ["conv_proj.weight", "conv_proj.bias", "encoder.pos_embedding"]
        assert "encoder.layers.encoder_layer_11.self_attention.in_proj_weight" in keys
        assert {"encoder.layers.encoder_layer_0.mlp.0.weight", "encoder.layers.encoder_layer_0.mlp.3.bias",
                "encoder.ln.weight", "heads.head.weight"} <= set(keys)
    with pytest.raises(ValueError, match="no pretrained weights"):
        getattr(models, name)(weights="DEFAULT")


def _train_losses(model, opt, steps):
    """The cross-entropy losses of `steps` steps on 4 random 32x32 images of classes 0..3."""
    x, y = minidl.randn(4, 3, 32, 32), minidl.tensor([0, 1, 2, 3])
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_models_train_a_step(name):
    from minidl.vision import models

    minidl.manual_seed(0)
    model = getattr(models, name)(num_classes=5).eval()   # running statistics: a smooth loss on 4 samples
    losses = _train_losses(model, minidl.optim.SGD(model.parameters(), lr=0.01), 4)
    assert losses[-1] < losses[0]


def test_a_small_vision_transformer_trains():
    """torchvision's VisionTransformer at 32x32 (patches of 8, 2 blocks): its loss falls on 4 samples."""
    from minidl.vision import models

    minidl.manual_seed(0)
    model = models.VisionTransformer(32, 8, 2, 4, 64, 128, num_classes=4)
    model.heads.head.weight.data = minidl.randn(4, 64) * 0.02   # (torchvision zero-initialises the head)
    losses = _train_losses(model, minidl.optim.AdamW(model.parameters(), lr=1e-3), 8)
    assert losses[-1] < 0.8 * losses[0], losses
    with pytest.raises(ValueError, match="wrong image size: expected 32"):
        model(minidl.randn(1, 3, 16, 16))


def test_resnet50_forward_and_backward():
    from minidl.vision import models

    model = models.resnet50(num_classes=3)
    F.cross_entropy(model(minidl.randn(2, 3, 32, 32)), minidl.tensor([0, 2])).backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())


def test_save_image_and_pad(tmp_path):
    from PIL import Image

    from minidl.vision import transforms as T
    from minidl.vision.utils import save_image

    batch = minidl.rand(6, 3, 8, 8)
    save_image(batch, tmp_path / "grid.png", nrow=3, padding=1)
    img = Image.open(tmp_path / "grid.png")
    assert img.size == (3 * 9 + 1, 2 * 9 + 1)
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for mode in ("constant", "edge", "reflect", "symmetric"):
        ours = T.Pad((1, 2), fill=7, padding_mode=mode)(arr)
        want = np.pad(arr, ((2, 2), (1, 1)), mode=mode, **({"constant_values": 7} if mode == "constant" else {}))
        assert np.array_equal(ours, want), mode


def test_mnist_legacy_names_and_pil_images(tmp_path):
    import gzip
    import struct

    from PIL import Image

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.random.default_rng(0).integers(0, 255, (3, 28, 28), dtype=np.uint8)
    for prefix in ("train", "t10k"):
        with gzip.open(raw / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">IIII", 2051, 3, 28, 28) + images.tobytes())
        with gzip.open(raw / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">II", 2049, 3) + bytes([1, 2, 3]))
    seen = []
    ds = minidl.vision.datasets.MNIST(str(tmp_path), train=True, transform=lambda img: seen.append(img) or 0)
    ds[0]
    assert isinstance(seen[0], Image.Image) and seen[0].mode == "L"
    with pytest.warns(UserWarning, match="renamed"):
        assert ds.train_data.shape == (3, 28, 28) and ds.train_labels.tolist() == [1, 2, 3]


# ---- silent wrong answers found by running torch programs: each now matches torch or refuses as torch ----
def test_default_collate_mixed_int_float_is_float():
    from minidl.data import default_collate
    batch = default_collate([1, 2.5, 3])
    assert batch.dtype == np.float64 and batch.numpy().tolist() == [1.0, 2.5, 3.0]
    assert default_collate([1, 2, 3]).dtype == np.int64


def test_remainder_matches_torch_with_gradient():
    x, tx = _pair((4, 5), seed=3, requires_grad=True)
    d, td = _pair((5,), seed=4, requires_grad=True)
    d_shift, td_shift = d.detach() * 0 + 0.7, td.detach() * 0 + 0.7
    y = minidl.remainder(x * 3, d + d_shift)
    ty = torch.remainder(tx * 3, td + td_shift)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= 1e-12
    g = np.random.default_rng(5).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= 1e-12
    assert rel_err(d.grad.numpy(), td.grad.numpy()) <= 1e-12
    assert ((minidl.tensor([-3.0, 3.0]) % 2).numpy() == torch.remainder(torch.tensor([-3.0, 3.0]), 2).numpy()).all()


@pytest.mark.parametrize("method, value", [
    ("register_buffer", lambda: minidl.zeros(2)),
    ("register_parameter", lambda: nn.Parameter(minidl.zeros(2))),
    ("add_module", lambda: nn.ReLU()),
])
def test_register_refuses_taken_names_as_torch(method, value):
    for taken in ("weight", "forward", "plain"):
        if method == "register_parameter" and taken == "weight":
            continue   # a parameter over a parameter: replaced (below)
        mine, theirs = nn.Linear(2, 2), torch.nn.Linear(2, 2)
        mine.plain, theirs.plain = 3, 3
        with pytest.raises(KeyError) as theirs_err:
            getattr(theirs, method)(taken, {"register_buffer": torch.zeros(2),
                                            "register_parameter": torch.nn.Parameter(torch.zeros(2)),
                                            "add_module": torch.nn.ReLU()}[method])
        with pytest.raises(KeyError, match="already exists"):
            getattr(mine, method)(taken, value())
        assert "already exists" in str(theirs_err.value)
    m = nn.Linear(2, 2)
    getattr(m, method)("fresh", value())
    getattr(m, method)("fresh", value())   # the same kind again: replaced, as torch


def test_autocast_flags_must_be_bool():
    with pytest.raises(TypeError, match="enabled must be a bool"):
        minidl.autocast("cpu", enabled="no")
    with pytest.raises(TypeError, match="cache_enabled"):
        minidl.autocast("cpu", cache_enabled=1)


def test_add_param_group_without_params():
    opt = minidl.optim.SGD([nn.Parameter(minidl.zeros(2))], lr=0.1)
    with pytest.raises(KeyError, match="no 'params'"):
        opt.add_param_group({"lr": 0.01})
    assert len(opt.param_groups) == 1


def test_cross_entropy_probabilities_refuse_ignore_index():
    logits, target = minidl.randn(3, 4), F.softmax(minidl.randn(3, 4), dim=1)
    with pytest.raises(RuntimeError):
        torch.nn.functional.cross_entropy(torch.randn(3, 4), torch.softmax(torch.randn(3, 4), 1), ignore_index=1)
    with pytest.raises(RuntimeError, match="ignore_index"):
        F.cross_entropy(logits, target, ignore_index=1)


def test_grad_scaler_refuses_fp16_before_touching_any_gradient():
    a, b = nn.Parameter(minidl.ones(2)), nn.Parameter(minidl.ones(2, dtype=np.float16))
    a.grad, b.grad = minidl.full((2,), 8.0), minidl.full((2,), 8.0, dtype=np.float16)
    opt = minidl.optim.SGD([a, b], lr=0.1)
    scaler = minidl.amp.GradScaler("cpu", init_scale=4.0)
    scaler.scale(minidl.ones(()))
    with pytest.raises(ValueError, match="float16"):
        scaler.unscale_(opt)
    assert a.grad.numpy().tolist() == [8.0, 8.0]   # not half-unscaled


def test_grad_scaler_load_state_dict_is_all_or_nothing():
    scaler = minidl.amp.GradScaler("cpu", init_scale=4.0)
    state = dict(scaler.state_dict(), growth_interval="often")
    with pytest.raises(TypeError, match="not a number"):
        scaler.load_state_dict(dict(state, scale=1024.0))
    assert scaler.get_scale() == 4.0 and scaler.state_dict()["growth_interval"] == 2000


def test_softmax_without_dim_warns_as_torch():
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        y = F.softmax(minidl.randn(2, 3))
    assert np.allclose(y.numpy().sum(axis=1), 1.0)
    with pytest.warns(UserWarning, match="log_softmax"):
        F.log_softmax(minidl.randn(4))


def test_batch_transform_given_to_a_dataset_names_the_mix_up(tmp_path):
    from minidl.data import transforms as batch_transforms
    from minidl.data.dataset import ImageArrayDataset

    class Images(ImageArrayDataset):
        def __init__(self, transform):
            self.data = np.zeros((2, 8, 8, 3), np.uint8)
            self.targets = np.zeros(2, np.int64)
            self.transform = transform

    with pytest.raises(TypeError, match="minidl.vision.transforms"):
        Images(batch_transforms.RandomHorizontalFlip())[0]
    from minidl.vision import transforms as per_image

    image, _ = Images(per_image.ToTensor())[0]
    assert tuple(image.shape) == (3, 8, 8)


# ---- what airbench94 uses next (issue 28) ---------------------------------------------------------
def test_airbench_names():
    assert str(minidl.device(0)) == "cuda:0"   # torch.device(0): the accelerator (CUDA on a GPU machine)
    with pytest.raises(ValueError, match=">= 0"):
        minidl.device(-1)
    for shape, groups in (((6, 3, 3, 3), 1), ((6, 2, 3), 2), ((4, 4, 1, 3, 3), 1)):
        w, tw = minidl.empty(*shape), torch.empty(*shape)
        nn.init.dirac_(w, groups=groups)
        torch.nn.init.dirac_(tw, groups=groups)
        assert np.array_equal(w.numpy(), tw.numpy())
    a, ta = _pair((3, 4), seed=1, requires_grad=True)
    b, tb = _pair((3, 4), seed=2)
    y, ty = minidl.lerp(a, b, 0.3), torch.lerp(ta, tb, 0.3)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= 1e-15
    y.sum().backward()
    ty.sum().backward()
    assert rel_err(a.grad.numpy(), ta.grad.numpy()) <= 1e-15
    x, tx = minidl.zeros(3), torch.zeros(3)
    x.lerp_(minidl.ones(3), 0.25)
    tx.lerp_(torch.ones(3), 0.25)
    assert x.numpy().tolist() == tx.numpy().tolist()


def test_seed_draws_a_fresh_seed():
    first = minidl.seed()
    assert minidl.initial_seed() == first
    assert minidl.seed() != first          # 63 random bits: equal by chance with probability 2^-63
    minidl.manual_seed(0)
    assert minidl.initial_seed() == 0


def test_cuda_event_says_why_without_a_gpu():
    if minidl.cuda.is_available():
        pytest.skip("a GPU is present: tests/gpu covers the event")
    with pytest.raises(RuntimeError, match="cuda.Event"):
        minidl.cuda.Event(enable_timing=True)


def test_half_network_with_float_batch_norms():
    """airbench's net.half() then batch norms back to float: half activations, float32 statistics."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding="same", bias=False), nn.BatchNorm2d(4), nn.ReLU()).half()
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.float()
    y = net(minidl.randn(2, 3, 6, 6).half())
    assert y.dtype == minidl.float16
    y.float().sum().backward()
    assert net[1].weight.grad.dtype == minidl.float32 and net[0].weight.grad.dtype == minidl.float16


def test_reduce_lr_on_plateau_matches_torch():
    metrics = [1.0, 0.9, 0.91, 0.92, 0.93, 0.89, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0, 0.5, 0.6, 0.7, 0.8, 0.9]
    for kw in (dict(patience=2), dict(patience=1, cooldown=2, factor=0.5),
               dict(mode="max", patience=1, threshold_mode="abs", threshold=0.05), dict(patience=0, min_lr=0.004)):
        p, tp = nn.Parameter(minidl.zeros(2)), torch.nn.Parameter(torch.zeros(2))
        opt, topt = minidl.optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
        sched = minidl.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
        for m in metrics:
            sched.step(minidl.tensor(m))
            tsched.step(m)
            assert opt.param_groups[0]["lr"] == pytest.approx(topt.param_groups[0]["lr"], rel=1e-12), kw
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr())
    state = sched.state_dict()
    again = minidl.optim.lr_scheduler.ReduceLROnPlateau(minidl.optim.SGD([p], lr=0.1), patience=0, min_lr=0.004)
    again.load_state_dict(state)
    assert again.best == sched.best and again.last_epoch == sched.last_epoch
    with pytest.raises(ValueError, match="factor should be < 1.0"):
        minidl.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.5)


@pytest.mark.parametrize("make, message", [
    (lambda o: minidl.optim.lr_scheduler.StepLR(o, step_size="2"), "StepLR: step_size must be an integer, got str"),
    (lambda o: minidl.optim.lr_scheduler.StepLR(o, 2, gamma="a"), "StepLR: gamma must be a number, got str"),
    (lambda o: minidl.optim.lr_scheduler.CosineAnnealingLR(o, T_max="3"), "CosineAnnealingLR: T_max must be a number"),
    (lambda o: minidl.optim.lr_scheduler.MultiStepLR(o, milestones=3), "MultiStepLR: milestones must be a list"),
    (lambda o: minidl.optim.lr_scheduler.LambdaLR(o, lr_lambda=3), "LambdaLR: lr_lambda must be a function"),
    (lambda o: minidl.optim.lr_scheduler.ExponentialLR(o, gamma=None), "ExponentialLR: gamma must be a number"),
])
def test_scheduler_options_of_the_wrong_type_are_named(make, message):
    opt = minidl.optim.SGD([nn.Parameter(minidl.zeros(2))], lr=0.1)
    with pytest.raises(TypeError, match=message):
        make(opt)
    assert opt.param_groups[0]["lr"] == 0.1


def test_adam_betas_must_be_a_pair():
    with pytest.raises(ValueError, match=r"betas must be a pair \(beta1, beta2\), got 0.9"):
        minidl.optim.Adam([nn.Parameter(minidl.zeros(2))], betas=0.9)


def test_a_hook_on_an_intermediate_fires_even_after_a_garbage_collection(monkeypatch):
    """The tensor a hook sits on may be kept alive only by a reference cycle (the hook's closure): its
    consumer's backward frees its inputs, and a collection at that moment used to drop the hook (a module's
    full backward hook then never fired, depending on when the collector ran). Here a collection follows
    every release."""
    import gc

    from minidl.autograd.function import Function

    release = Function._release

    def release_then_collect(self):
        release(self)
        gc.collect()

    monkeypatch.setattr(Function, "_release", release_then_collect)
    x = minidl.randn(3, requires_grad=True)
    fired = []

    def make():
        holder = [x * 2]                       # the hook's closure references the tensor: a cycle
        holder[0].register_hook(lambda g: fired.append(len(holder)) or None)
        return holder[0] * 3                  # the only other reference: this op's inputs

    make().sum().backward()
    assert fired == [1] and np.allclose(x.grad.numpy(), 6.0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    seen = []
    m[2].register_full_backward_hook(lambda mod, gi, go: seen.append(gi[0].shape))
    m(minidl.randn(5, 3)).sum().backward()
    assert seen == [(5, 4)]


def test_equal_isclose_allclose_match_torch():
    import torch

    cases = [([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [1.0, 2.0, 3.001]), ([1.0, float("nan")], [1.0, float("nan")]),
             ([[1.0, 2.0]], [1.0, 2.0]), ([1e-9, 1.0], [0.0, 1.0 + 1e-6])]
    for a, b in cases:
        ma, mb, ta, tb = minidl.tensor(a), minidl.tensor(b), torch.tensor(a), torch.tensor(b)
        assert minidl.equal(ma, mb) == torch.equal(ta, tb), (a, b)
        for kw in ({}, {"rtol": 1e-2}, {"atol": 1e-2, "equal_nan": True}):
            assert np.array_equal(minidl.isclose(ma, mb, **kw).numpy(), torch.isclose(ta, tb, **kw).numpy()), (a, b, kw)
            assert ma.allclose(mb, **kw) == torch.allclose(ta, tb, **kw), (a, b, kw)
    assert minidl.equal(minidl.tensor([1.0, 2.0]), minidl.tensor([1, 2])) == torch.equal(torch.tensor([1.0, 2.0]), torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="equal: expected two tensors"):
        minidl.equal(minidl.ones(2), [1.0, 1.0])


def test_special_functions_match_torch_including_poles_and_infinities():
    x = np.array([-2.0, -1.5, -0.0, 0.0, 0.5, 1.0, 2.5, 30.0, np.nan, np.inf, -np.inf])
    for name in ("erf", "erfc", "expit", "gammaln", "expm1", "log1p", "sinc"):
        got = getattr(minidl.special, name)(minidl.tensor(x)).numpy()
        want = getattr(torch.special, name)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14, equal_nan=True, err_msg=name)
    p = np.array([0.0, 0.25, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(minidl.special.entr(minidl.tensor(p)).numpy(), torch.special.entr(torch.tensor(p)).numpy())
    t = minidl.tensor([0.3, 1.7], dtype=minidl.float64, requires_grad=True)
    minidl.special.gammaln(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), torch.special.digamma(torch.tensor([0.3, 1.7], dtype=torch.float64)).numpy(), rtol=1e-10)


def test_tensor_extras_match_torch():
    x = np.arange(12.0).reshape(3, 4)
    assert minidl.tensor(x).sum_to_size(1, 4).numpy().tolist() == torch.tensor(x).sum_to_size(1, 4).numpy().tolist()
    t, tt = minidl.tensor(np.zeros((4, 2))), torch.tensor(np.zeros((4, 2)))
    src = np.random.default_rng(0).standard_normal((3, 2))
    idx = np.array([3, 0, 3])
    t.index_add_(0, minidl.tensor(idx), minidl.tensor(src), alpha=0.5)
    tt.index_add_(0, torch.tensor(idx), torch.tensor(src), alpha=0.5)
    np.testing.assert_allclose(t.numpy(), tt.numpy())
    assert minidl.ones(2).pin_memory().is_pinned() is False
    a = minidl.ones(2, requires_grad=True) * 3
    assert a.retains_grad is False
    a.retain_grad()
    assert a.retains_grad is True
    v = minidl.arange(10.0)[3:]
    assert v.storage_offset() == torch.arange(10.0)[3:].storage_offset()
    y = minidl.tensor([float("nan"), float("inf"), 1.0])
    y.nan_to_num_(nan=0.0, posinf=5.0)
    assert y.numpy().tolist() == [0.0, 5.0, 1.0]


def test_init_old_names_warn_and_sparse_init_is_seeded():
    w = minidl.empty(6, 4)
    with pytest.warns(FutureWarning, match="xavier_uniform is now deprecated in favor of nn.init.xavier_uniform_"):
        nn.init.xavier_uniform(w)
    minidl.manual_seed(3)
    nn.init.sparse_(w, 0.5)
    first = w.numpy().copy()
    assert ((first == 0).sum(0) == 3).all()
    minidl.manual_seed(3)
    nn.init.sparse_(w, 0.5)
    np.testing.assert_array_equal(w.numpy(), first)


def test_float32_matmul_precision_sets_tf32_as_torch():
    saved = minidl.backends.cuda.matmul.allow_tf32
    try:
        for precision, tf32 in (("high", True), ("medium", True), ("highest", False)):
            minidl.set_float32_matmul_precision(precision)
            assert minidl.backends.cuda.matmul.allow_tf32 is tf32
            assert minidl.get_float32_matmul_precision() == precision
        minidl.backends.cuda.matmul.allow_tf32 = True   # set directly: torch then reports "high"
        assert minidl.get_float32_matmul_precision() == "high"
        with pytest.raises(ValueError, match="'highest', 'high' or 'medium'"):
            minidl.set_float32_matmul_precision("low")
    finally:
        minidl.backends.cuda.matmul.allow_tf32 = saved


def test_checkpoint_gives_the_plain_values_and_gradients():
    from minidl.utils.checkpoint import checkpoint, checkpoint_sequential

    minidl.manual_seed(0)
    net = minidl.nn.Sequential(minidl.nn.Linear(4, 8), minidl.nn.GELU(), minidl.nn.Linear(8, 3))
    x = minidl.randn(5, 4, requires_grad=True)
    grads = []
    for run in (lambda: net(x), lambda: checkpoint(net, x, use_reentrant=False),
                lambda: checkpoint_sequential(net, 2, x, use_reentrant=False)):
        net.zero_grad()
        x.grad = None
        y = run()
        y.pow(2).sum().backward()
        grads.append([y.detach().numpy(), x.grad.numpy()] + [p.grad.numpy() for p in net.parameters()])
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="segments must be a positive integer"):
        checkpoint_sequential(net, 0, x)


def test_assert_close_passes_and_fails_as_torch():
    import torch.testing

    good = ([1.0, 2.0], [1.0, 2.0 + 1e-6])
    minidl.testing.assert_close(minidl.tensor(good[0]), minidl.tensor(good[1]))
    torch.testing.assert_close(torch.tensor(good[0]), torch.tensor(good[1]))
    bad = ([1.0, 2.0, 3.0], [1.0, 2.1, 3.0])
    with pytest.raises(AssertionError) as ours:
        minidl.testing.assert_close(minidl.tensor(bad[0]), minidl.tensor(bad[1]))
    with pytest.raises(AssertionError) as theirs:
        torch.testing.assert_close(torch.tensor(bad[0]), torch.tensor(bad[1]))
    assert str(ours.value).splitlines()[:3] == str(theirs.value).splitlines()[:3]   # "not close!", mismatched 1 / 3
    minidl.testing.assert_close(minidl.tensor(bad[0]), minidl.tensor(bad[1]), rtol=0.1, atol=0.0)
    with pytest.raises(AssertionError, match="attribute 'dtype' do not match"):
        minidl.testing.assert_close(minidl.tensor([1.0]), minidl.tensor([1.0], dtype=minidl.float64))
    with pytest.raises(AssertionError, match="attribute 'shape' do not match"):
        minidl.testing.assert_close(minidl.tensor([1.0]), minidl.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="pass both rtol and atol"):
        minidl.testing.assert_close(minidl.tensor([1.0]), minidl.tensor([1.0]), rtol=1e-3)
    minidl.testing.assert_close({"a": minidl.tensor([float("nan")])}, {"a": minidl.tensor([float("nan")])},
                                equal_nan=True)


def test_parameters_to_vector_and_back_match_torch():
    m, t = minidl.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    v = minidl.nn.utils.parameters_to_vector(m.parameters())
    assert v.shape == (8,) and v.requires_grad
    minidl.nn.utils.vector_to_parameters(minidl.arange(8.0), m.parameters())
    torch.nn.utils.vector_to_parameters(torch.arange(8.0), t.parameters())
    assert m.weight.tolist() == t.weight.tolist() and m.bias.tolist() == t.bias.tolist()
    with pytest.raises(ValueError, match="must be 1-D with 8 elements"):
        minidl.nn.utils.vector_to_parameters(minidl.arange(7.0), m.parameters())


def test_autograd_grad_matches_torch_and_leaves_grad_alone():
    rng = np.random.default_rng(0)
    xv, wv, gv = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal((3, 4))
    x, w = minidl.tensor(xv, requires_grad=True), minidl.tensor(wv, requires_grad=True)
    tx, tw = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)

    def model(lib, a, b):
        h = a * b            # an intermediate tensor, an input of grad below
        return h, lib.sin(h) * a

    h, y = model(minidl, x, w)
    th, ty = model(torch, tx, tw)
    ours = minidl.autograd.grad(y, [x, w, h], grad_outputs=minidl.tensor(gv), retain_graph=True)
    theirs = torch.autograd.grad(ty, [tx, tw, th], grad_outputs=torch.tensor(gv), retain_graph=True)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    assert x.grad is None and w.grad is None   # grad() accumulates into nothing
    # two outputs, a scalar seed each; the graph kept above is used again
    (gx,) = minidl.autograd.grad([y.sum(), (h * h).sum()], x)
    (tgx,) = torch.autograd.grad([ty.sum(), (th * th).sum()], tx)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12)
    # an input the output does not use
    z = minidl.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="was not used in the graph.*allow_unused=True"):
        minidl.autograd.grad((x * 2).sum(), [x, z])
    gx2, gz = minidl.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gz is None and np.array_equal(gx2.numpy(), np.full((3, 4), 2.0))
    _, gz = minidl.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert gz.tolist() == [0.0]
    (g2,) = minidl.autograd.grad((x * x).sum(), x, create_graph=True)   # the gradient with a graph of its own
    assert g2.requires_grad and g2.grad_fn is not None
    lrn_in = minidl.randn(1, 3, 4, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="create_graph=True: the gradient of LocalResponseNorm .* cannot be "
                                                  "differentiated again"):
        minidl.autograd.grad(minidl.nn.functional.local_response_norm(lrn_in, 2).sum(), lrn_in, create_graph=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        minidl.autograd.grad(x * 2, x)
    # without retain_graph the graph is freed, as torch's
    y2 = (x * w).sum()
    minidl.autograd.grad(y2, x)
    with pytest.raises(RuntimeError, match="a second time"):
        minidl.autograd.grad(y2, x)


def test_gumbel_softmax_samples_the_softmax_and_passes_gradients_straight_through():
    import minidl.nn.functional as F

    logits = minidl.tensor([1.0, 2.0, 0.5]).expand(20000, 3)
    minidl.manual_seed(0)
    hard = F.gumbel_softmax(logits, tau=0.7, hard=True)
    assert set(np.unique(hard.numpy())) == {0.0, 1.0} and np.array_equal(hard.numpy().sum(1), np.ones(20000))
    freq = hard.numpy().mean(0)
    want = torch.softmax(torch.tensor([1.0, 2.0, 0.5]), 0).numpy()   # the Gumbel-max trick: argmax ~ softmax
    assert np.abs(freq - want).max() < 0.015
    x = minidl.tensor(np.random.default_rng(1).standard_normal((6, 4)), requires_grad=True)
    w = minidl.tensor(np.arange(24.0).reshape(6, 4))
    grads = []
    for hard in (True, False):
        minidl.manual_seed(5)   # the same noise: the hard sample's gradient is the soft sample's
        x.grad = None
        (F.gumbel_softmax(x, tau=0.5, hard=hard) * w).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)


def test_erfinv_matches_torch():
    x = np.concatenate([np.linspace(-0.999, 0.999, 1001), [0.0, 1e-10, -1e-300, 0.5, 0.4999999, 1.0, -1.0, 1.5, np.nan]])
    ours, theirs = minidl.tensor(x).erfinv().numpy(), torch.tensor(x).erfinv().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)   # (inf, -inf and NaN where torch has them)
    tails = np.array([0.9999999999, -0.9999999999999])   # ill-conditioned: 1 - |x| holds a few digits
    np.testing.assert_allclose(minidl.tensor(tails).erfinv().numpy(), torch.tensor(tails).erfinv().numpy(), rtol=1e-6)
    t, tt = minidl.tensor([0.3, -0.6], requires_grad=True), torch.tensor([0.3, -0.6], requires_grad=True)
    t.erfinv().sum().backward()
    tt.erfinv().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6)
    u = minidl.tensor([0.2, 0.7], dtype=minidl.float64)
    assert u.erfinv_() is u and np.allclose(u.numpy(), torch.tensor([0.2, 0.7], dtype=torch.float64).erfinv().numpy(), rtol=1e-12)


def test_random_fills_conversions_and_sizes_as_torch():
    minidl.manual_seed(0)
    x = minidl.empty(200000, dtype=minidl.float64)
    assert abs(x.bernoulli_(0.3).mean().item() - 0.3) < 0.005 and set(np.unique(x.numpy())) == {0.0, 1.0}
    assert abs(x.exponential_(2.0).mean().item() - 0.5) < 0.01 and x.min().item() >= 0
    assert set(np.unique(x.random_(3, 10).numpy())) == set(range(3, 10))
    assert set(np.unique(minidl.empty(1000, dtype=minidl.int64).random_(4).numpy())) == {0, 1, 2, 3}
    p = minidl.tensor([0.0, 1.0]).expand(1000, 2)
    assert minidl.empty(1000, 2).bernoulli_(p).mean(0).tolist() == [0.0, 1.0]
    with pytest.raises(RuntimeError, match="expects lambda > 0.0"):
        x.exponential_(0.0)
    v = [1.7, -2.2, 300.0]
    for name in ("byte", "char", "short"):
        ours, theirs = getattr(minidl.tensor(v[:2]), name)(), getattr(torch.tensor(v[:2]), name)()
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1] and ours.tolist() == theirs.tolist()
    assert minidl.zeros(3, 5).nbytes == torch.zeros(3, 5).nbytes and minidl.zeros(2, dtype=minidl.float16).itemsize == 2


def test_timm_style_drop_path_and_trunc_normal_run():
    """Two helpers that ViT code copies from timm: stochastic depth (new_empty(...).bernoulli_) and a truncated
    normal init by the inverse CDF (uniform_, erfinv_)."""
    def drop_path(x, drop_prob=0.0, training=False):
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
        return x.div(keep_prob) * random_tensor

    def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
        def norm_cdf(v):
            return (1.0 + math.erf(v / math.sqrt(2.0))) / 2.0
        with minidl.no_grad():
            lo, hi = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
            tensor.uniform_(2 * lo - 1, 2 * hi - 1)
            tensor.erfinv_()
            tensor.mul_(std * math.sqrt(2.0))
            tensor.add_(mean)
            tensor.clamp_(min=a, max=b)
            return tensor

    minidl.manual_seed(0)
    y = drop_path(minidl.ones(4000, 3), 0.25, True)
    kept = (y[:, 0] != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.03 and np.allclose(y.numpy()[y.numpy() != 0], 1 / 0.75)
    w = trunc_normal_(minidl.empty(20000, dtype=minidl.float64), std=0.5, a=-1.0, b=1.0)
    assert w.min().item() >= -1.0 and w.max().item() <= 1.0 and abs(w.mean().item()) < 0.02
    assert abs(w.std().item() - 0.5 * math.sqrt(0.7737)) < 0.01   # truncated at +-2 sigma: 77% of the variance


def test_index_copy_put_fill_and_histc_match_torch():
    a = np.arange(12.0).reshape(3, 4)
    w = np.arange(12.0).reshape(3, 4) % 5
    results = []
    for lib in (minidl, torch):
        x = lib.tensor(a.copy(), requires_grad=True)
        src = lib.tensor(np.full((3, 2), -1.0), requires_grad=True)
        y = x.index_copy(1, lib.tensor([3, 0]), src)
        vals = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        z = x.index_put((lib.tensor([0, 0, 2]), lib.tensor([1, 1, 3])), vals, accumulate=True)
        u = x.index_put((lib.tensor([2, 0]),), lib.tensor([7.0], dtype=lib.float64))   # whole rows, no accumulate
        ((y + z + u) * lib.tensor(w)).sum().backward()
        filled = lib.zeros(3, 4)
        filled.index_fill_(1, lib.tensor([0, 2]), 5.0)
        copied = lib.zeros(2, 3)
        copied.index_copy_(0, lib.tensor([1]), lib.ones(1, 3))
        put = lib.zeros(4)
        put.index_put_((lib.tensor([1, 1, 3]),), lib.tensor(2.0), accumulate=True)
        results.append([t.detach().numpy() for t in (y, z, u, x.grad, src.grad, vals.grad, filled, copied, put)])
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)
    x = np.random.default_rng(0).standard_normal(1000)
    for args in ((20, -2, 2), (7,), (5, 0.5, 0.5)):
        np.testing.assert_array_equal(minidl.tensor(x).histc(*args).numpy(), torch.tensor(x).histc(*args).numpy())
    with pytest.raises(NotImplementedError, match="integer index tensors"):
        minidl.zeros(3).index_put((minidl.tensor([True, False, True]),), minidl.tensor(1.0), accumulate=True)


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=(2, 3), stride=2, padding=1, dilation=(1, 2)),
                                dict(kernel_size=4, stride=3)], ids=str)
def test_unfold_and_fold_match_torch_with_gradients(kw):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 8))
    ours = nn.Unfold(**kw)(xm := minidl.tensor(x, requires_grad=True))
    theirs = torch.nn.Unfold(**kw)(xt := torch.tensor(x, requires_grad=True))
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    w = rng.standard_normal(tuple(theirs.shape))
    back = nn.Fold((9, 8), **kw)(ours * minidl.tensor(w))
    tback = torch.nn.Fold((9, 8), **kw)(theirs * torch.tensor(w))
    np.testing.assert_allclose(back.detach().numpy(), tback.detach().numpy(), rtol=1e-12, atol=1e-12)
    (back * minidl.tensor(x)).sum().backward()
    (tback * torch.tensor(x)).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(F.unfold(minidl.tensor(x[0]), **kw).numpy(), torch.nn.functional.unfold(torch.tensor(x[0]), **kw).numpy())
    with pytest.raises(RuntimeError, match="expected size of input's dimension 2 to match"):
        F.fold(ours[:, :, :-1], (9, 8), **kw)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, float("inf"), 0.5])
def test_cdist_matches_torch_with_gradients(p):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((1, 4, 3))
    b[0, 1] = a[0, 2]   # a zero distance: its gradient is zero, as torch's
    x1, x2 = minidl.tensor(a, requires_grad=True), minidl.tensor(b, requires_grad=True)
    t1, t2 = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    d, td = minidl.cdist(x1, x2, p), torch.cdist(t1, t2, p)
    w = rng.standard_normal(tuple(td.shape))
    (d * minidl.tensor(w)).sum().backward()
    (td * torch.tensor(w)).sum().backward()
    for ours, theirs in ((d, td), (x1.grad, t1.grad), (x2.grad, t2.grad)):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-13)
    with pytest.raises(RuntimeError, match="same number of columns"):
        minidl.cdist(x1, minidl.zeros(4, 2, dtype=minidl.float64))


def test_masked_scatter_and_bilinear_match_torch():
    a, src = np.arange(12.0).reshape(3, 4), np.arange(100.0, 112.0).reshape(3, 4)
    mask = np.array([True, False, True, False])
    results = []
    for lib in (minidl, torch):
        x, s = lib.tensor(a, requires_grad=True), lib.tensor(src, requires_grad=True)
        y = x.masked_scatter(lib.tensor(mask), s)
        (y * lib.tensor(a)).sum().backward()
        z = lib.zeros(2, 3)
        z.masked_scatter_(lib.tensor([[True, False, True], [False, True, False]]), lib.arange(5.0) + 1)
        results.append([t.detach().numpy() for t in (y, x.grad, s.grad, z)])
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(RuntimeError, match="selects 2 elements and source has only 1"):
        minidl.zeros(2).masked_scatter(minidl.tensor([True, True]), minidl.ones(1))

    rng = np.random.default_rng(0)
    x1, x2, w, b = (rng.standard_normal(s) for s in ((4, 3), (4, 5), (2, 3, 5), (2,)))
    m, t = nn.Bilinear(3, 5, 2, dtype=minidl.float64), torch.nn.Bilinear(3, 5, 2).double()
    assert sorted(m.state_dict()) == sorted(t.state_dict()) and m.weight.shape == tuple(t.weight.shape)
    assert m.weight.abs().max().item() <= 1 / math.sqrt(3)
    m.load_state_dict({"weight": minidl.tensor(w), "bias": minidl.tensor(b)})
    t.load_state_dict({"weight": torch.tensor(w), "bias": torch.tensor(b)})
    ins, tins = [minidl.tensor(v, requires_grad=True) for v in (x1, x2)], [torch.tensor(v, requires_grad=True) for v in (x1, x2)]
    y, ty = m(*ins), t(*tins)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for ours, theirs in ((y, ty), (ins[0].grad, tins[0].grad), (ins[1].grad, tins[1].grad), (m.weight.grad, t.weight.grad),
                         (m.bias.grad, t.bias.grad)):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_matches_torch(reduce, include_self, dim):
    """Values and both gradients against torch, repeated indices and a tie (amax / amin split the gradient evenly
    among the elements equal to the result, as torch)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    src = rng.standard_normal((3, 4)).astype(np.float32)
    src[0, 0] = src[1, 0] = 5.0
    idx = rng.integers(0, a.shape[dim], (3, 4))
    w = rng.standard_normal((4, 5)).astype(np.float32)
    got = []
    for lib in (minidl, torch):
        ta, ts = lib.tensor(a, requires_grad=True), lib.tensor(src, requires_grad=True)
        out = ta.scatter_reduce(dim, lib.tensor(idx), ts, reduce, include_self=include_self)
        (out * lib.tensor(w)).sum().backward()
        got.append([out.detach().numpy(), ta.grad.numpy(), ts.grad.numpy()])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_scatter_reduce_integers_in_place_and_errors():
    ours = minidl.zeros(3, dtype=minidl.int64)
    ours.scatter_reduce_(0, minidl.tensor([0, 1, 0]), minidl.tensor([1, 2, 4]), "mean", include_self=False)
    theirs = torch.zeros(3, dtype=torch.int64).scatter_reduce_(0, torch.tensor([0, 1, 0]), torch.tensor([1, 2, 4]),
                                                              "mean", include_self=False)
    assert ours.tolist() == theirs.tolist() == [2, 2, 0]
    with pytest.raises(ValueError, match="reduce must be one of"):
        minidl.zeros(3).scatter_reduce(0, minidl.tensor([0]), minidl.tensor([1.0]), "max")
    with pytest.raises(NotImplementedError, match="reduce='prod'"):
        a = minidl.ones(3, requires_grad=True)
        a.scatter_reduce(0, minidl.tensor([0]), minidl.tensor([0.0]), "prod").sum().backward()


def test_cartesian_prod_and_block_diag_match_torch():
    a, b = [1, 2], [3, 4, 5]
    assert minidl.cartesian_prod(minidl.tensor(a), minidl.tensor(b)).tolist() == \
        torch.cartesian_prod(torch.tensor(a), torch.tensor(b)).tolist()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    ours = minidl.block_diag(minidl.tensor(x, requires_grad=True), minidl.tensor(5.0), minidl.tensor([1.0, 2.0]))
    theirs = torch.block_diag(torch.tensor(x), torch.tensor(5.0), torch.tensor([1.0, 2.0]))
    assert ours.shape == tuple(theirs.shape) and np.array_equal(ours.detach().numpy(), theirs.numpy())
    ours.sum().backward()
    with pytest.raises(RuntimeError, match="1-D tensors"):
        minidl.cartesian_prod(minidl.ones(2, 2))


def test_lazy_linear_materializes_on_first_input():
    m, t = minidl.nn.LazyLinear(4), torch.nn.LazyLinear(4)
    opt = minidl.optim.SGD(m.parameters(), lr=0.1)
    weight = m.weight
    y = m(minidl.randn(2, 7))
    t(torch.randn(2, 7))
    assert type(m).__name__ == type(t).__name__ == "Linear" and m.in_features == t.in_features == 7
    assert tuple(m.weight.shape) == tuple(t.weight.shape) and m.weight is weight
    bound = 1 / np.sqrt(7)
    assert np.abs(m.weight.detach().numpy()).max() <= bound and np.abs(m.bias.detach().numpy()).max() <= bound
    y.sum().backward()
    opt.step()
    assert m(minidl.randn(3, 7)).shape == (3, 4)


def test_scatter_reduce_extremes_by_sorting_match_the_ufuncs():
    """The GPU's amax / amin route (ops/indexing._extreme_at: a sort instead of CuPy's maximum.at, which rounds
    float64 through float32), run here on NumPy against NumPy's maximum.at / minimum.at, ties and integers included."""
    from minidl.ops.indexing import _extreme_at, open_grid

    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32, np.int64):
        base = (rng.standard_normal((4, 5)) * 10).round().astype(dtype)
        index, src = rng.integers(0, 5, (4, 7)), (rng.standard_normal((4, 9)) * 10).round().astype(dtype)[:, :7]
        grids = open_grid(np, index.shape)
        grids[1] = index
        for reduce, ufunc in (("amax", np.maximum), ("amin", np.minimum)):
            expected, got = base.copy(), base.copy()
            ufunc.at(expected, tuple(grids), src)
            _extreme_at(np, got, tuple(grids), src, reduce)
            np.testing.assert_array_equal(got, expected)


def test_runner_prints_shapes_as_torch_and_maps_functorch(tmp_path):
    """Under the runner a shape prints as torch.Size([...]) (print(x.shape) is in most tutorials), and `functorch`
    (torch.func's name before PyTorch 2.0) is minidl.func; outside it minidl's own spelling stays."""
    result = _through_runner(
        tmp_path,
        "import torch, functorch\n"
        "x = torch.zeros(2, 3)\n"
        "print(x.shape, repr(x.size()), f'{x.shape}')\n"
        "print(functorch.grad(lambda t: (t ** 2).sum())(torch.ones(2)))\n")
    assert result.stdout.splitlines() == ["torch.Size([2, 3]) torch.Size([2, 3]) torch.Size([2, 3])",
                                          "tensor([2., 2.])"]
    assert str(minidl.zeros(2, 3).shape) == "(2, 3)" and repr(minidl.zeros(2).shape) == "minidl.Size([2])"


def test_set_printoptions_prints_what_torch_prints(tmp_path):
    """torch.set_printoptions (precision, sci_mode forced on and off, the short / full / default profiles,
    threshold and edgeitems, linewidth): the program's output equals torch's, line for line."""
    import subprocess
    import sys

    source = (
        "import torch\n"
        "x = torch.linspace(-2, 3, 7) / 3\n"
        "big = torch.arange(2000.0).reshape(40, 50) / 7\n"
        "print(x)\n"
        "torch.set_printoptions(precision=2)\n"
        "print(x)\n"
        "torch.set_printoptions(sci_mode=True)\n"
        "print(x)\n"
        "torch.set_printoptions(sci_mode=False, precision=6)\n"
        "print(x * 1e-6)\n"
        "torch.set_printoptions(profile='short')\n"
        "print(big)\n"
        "torch.set_printoptions(threshold=5, edgeitems=1)\n"
        "print(x)\n"
        "torch.set_printoptions(profile='full', linewidth=120)\n"
        "print(big[:2, :30])\n"
        "torch.set_printoptions(profile='default')\n"
        "print(big)\n")
    ours = _through_runner(tmp_path, source).stdout
    theirs = subprocess.run([sys.executable, str(tmp_path / "prog.py")], capture_output=True, text=True, timeout=120)
    assert theirs.returncode == 0, theirs.stderr
    assert ours.splitlines() == theirs.stdout.splitlines()
    assert "1.67e-01" in ours and "-0.000001" in ours
