"""The lazy layers (minidl/nn/layers/lazy.py) against torch's: after the first input they are the ordinary layer
(its class, torch's parameter shapes and state-dict keys), keep their Parameter objects (an optimizer made before the
first forward steps them), and with torch's weights copied in compute what torch computes."""
import numpy as np
import pytest
import torch

import minidl

CASES = [
    ("LazyConv1d", (8, 3), dict(groups=2), (2, 4, 9)),
    ("LazyConv2d", (8, 3), dict(padding=1, bias=False), (2, 4, 6, 6)),
    ("LazyConv3d", (4, 2), {}, (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", (6, 3), dict(groups=2), (2, 4, 7)),
    ("LazyConvTranspose2d", (6, 3), dict(stride=2), (2, 4, 5, 5)),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 3)),
    ("LazyBatchNorm1d", (), {}, (6, 3)),
    ("LazyBatchNorm2d", (), dict(momentum=0.2), (4, 3, 5, 5)),
    ("LazyBatchNorm3d", (), {}, (2, 3, 2, 3, 3)),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 7)),
    ("LazyInstanceNorm2d", (), dict(affine=False), (2, 3, 5, 5)),
    ("LazyInstanceNorm3d", (), {}, (2, 3, 2, 3, 3)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", CASES, ids=[c[0] for c in CASES])
def test_lazy_layer_becomes_the_layer_torch_makes(name, args, kwargs, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ours, theirs = getattr(minidl.nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    before = list(ours.parameters())
    opt = minidl.optim.SGD(ours.parameters(), lr=0.1) if before else None
    ours(minidl.tensor(x))
    theirs(torch.tensor(x))
    assert type(ours).__name__ == type(theirs).__name__ == name[4:]
    assert all(a is b for a, b in zip(before, ours.parameters())) and len(before) == len(list(ours.parameters()))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    ours.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    y, ty = ours(minidl.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    if opt is not None:   # the optimizer made before the first forward steps the materialized parameters
        (y * minidl.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(np.float32))).sum().backward()
        w = before[0].detach().numpy().copy()
        opt.step()
        assert not np.array_equal(before[0].detach().numpy(), w)


def test_lazy_layers_in_a_d2l_style_model_train():
    """d2l.ai writes its CNNs with lazy layers: a LeNet of LazyConv2d / LazyBatchNorm2d / LazyLinear trains."""
    nn = minidl.nn
    minidl.manual_seed(0)
    net = nn.Sequential(nn.LazyConv2d(6, kernel_size=5, padding=2), nn.LazyBatchNorm2d(), nn.Sigmoid(),
                        nn.AvgPool2d(kernel_size=2, stride=2), nn.LazyConv2d(16, kernel_size=5), nn.LazyBatchNorm2d(),
                        nn.Sigmoid(), nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(), nn.LazyLinear(120),
                        nn.Sigmoid(), nn.LazyLinear(10))
    x, t = minidl.randn(16, 1, 28, 28), minidl.randint(0, 10, (16,))
    net(x)   # materialize, then the optimizer (d2l's order)
    opt = minidl.optim.Adam(net.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        loss = minidl.nn.functional.cross_entropy(net(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_lazy_layer_messages():
    with pytest.raises(ValueError, match="LazyConv2d: expected an input with a channel dim"):
        minidl.nn.LazyConv2d(4, 3)(minidl.randn(5))
    with pytest.raises(ValueError, match="LazyConv2d: the input's 3 channels are not divisible by groups \\(2\\)"):
        minidl.nn.LazyConv2d(4, 3, groups=2)(minidl.randn(1, 3, 5, 5))


@pytest.mark.parametrize("make,shape", [(lambda nn: nn.LazyLinear(3), (2, 5)),
                                        (lambda nn: nn.LazyConv2d(4, 3), (2, 3, 8, 8)),
                                        (lambda nn: nn.LazyBatchNorm2d(), (2, 3, 4, 4))])
def test_lazy_parameters_are_uninitialized_parameters_until_the_first_input(make, shape):
    """As torch's: isinstance(p, nn.parameter.UninitializedParameter) and nn.parameter.is_lazy(p) before the first
    forward, plain Parameters (the same objects) after it."""
    import torch

    verdicts = []
    for lib in (minidl, torch):
        m = make(lib.nn)
        before = list(m.parameters())
        first = [isinstance(p, lib.nn.parameter.UninitializedParameter) and lib.nn.parameter.is_lazy(p) for p in before]
        m(lib.randn(*shape))
        after = list(m.parameters())
        verdicts.append((first, [isinstance(p, lib.nn.parameter.UninitializedParameter) for p in after],
                         [type(p).__name__ for p in after], all(a is b for a, b in zip(before, after))))
    assert verdicts[0][:3] == verdicts[1][:3] and verdicts[0][0] == [True, True] and verdicts[0][3]
