"""channels_last (NHWC memory behind NCHW shapes), as PyTorch has it: the tensor API (to, contiguous, clone,
is_contiguous, stride, the dtype methods), Module.to(memory_format=), and the layers that keep it (conv,
batch norm, activations, pooling, dropout, elementwise arithmetic), forward and backward, against torch:
equal values, and the same strides where torch defines them (outputs, parameters and their gradients).
The same tests run on the GPU (tests/gpu/test_channels_last_gpu.py reuses them)."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err

DEVICE = "cpu"


def _pair(shape, seed=0, requires_grad=False, device=None):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    ours = minidl.tensor(x, requires_grad=requires_grad).to(device or DEVICE)
    if requires_grad:
        ours = ours.detach().requires_grad_()
    return ours, torch.tensor(x, requires_grad=requires_grad)


def _np(t):
    return t.detach().cpu().numpy() if isinstance(t, minidl.Tensor) else t.detach().numpy()


def test_tensor_api_matches_torch():
    x, tx = _pair((2, 3, 5, 4))
    for fmt, tfmt in ((minidl.channels_last, torch.channels_last), (minidl.contiguous_format, torch.contiguous_format)):
        y, ty = x.to(memory_format=fmt), tx.to(memory_format=tfmt)
        assert y.stride() == ty.stride() and np.array_equal(_np(y), _np(ty))
        for f in (minidl.channels_last, minidl.contiguous_format):
            tf = torch.channels_last if f is minidl.channels_last else torch.contiguous_format
            assert y.is_contiguous(memory_format=f) == ty.is_contiguous(memory_format=tf)
        assert y.is_contiguous() == ty.is_contiguous()
        assert y.clone().stride() == ty.clone().stride()                       # preserve_format
        assert y.contiguous().stride() == ty.contiguous().stride()
        assert y.contiguous(memory_format=minidl.channels_last).stride() == \
            ty.contiguous(memory_format=torch.channels_last).stride()
        assert y.half(memory_format=minidl.channels_last).stride() == ty.half(memory_format=torch.channels_last).stride()
    assert x.stride(1) == tx.stride(1) and x.stride(-1) == tx.stride(-1)
    x5, tx5 = _pair((2, 3, 2, 4, 5))
    assert x5.to(memory_format=minidl.channels_last_3d).stride() == \
        tx5.to(memory_format=torch.channels_last_3d).stride()


def test_memory_format_of_the_wrong_rank_is_refused():
    x, _ = _pair((3, 4))
    with pytest.raises(RuntimeError, match="needs a 4-D tensor"):
        x.to(memory_format=minidl.channels_last)
    with pytest.raises(RuntimeError, match="needs a 5-D tensor"):
        _pair((2, 3, 4, 5))[0].contiguous(memory_format=minidl.channels_last_3d)
    with pytest.raises(TypeError, match="memory_format must be"):
        x.clone(memory_format="channels_last")


def test_relayout_carries_the_gradient():
    x, tx = _pair((2, 3, 4, 4), requires_grad=True)
    w = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
    (x.to(memory_format=minidl.channels_last) * minidl.tensor(w).to(DEVICE)).sum().backward()
    (tx.to(memory_format=torch.channels_last) * torch.tensor(w)).sum().backward()
    assert np.allclose(_np(x.grad), _np(tx.grad))


def _nets(seed=0):
    torch.manual_seed(seed)
    # (a bias right before a training-mode batch norm has a zero gradient: only noise to compare)
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3, padding=1),
                               torch.nn.ReLU(), torch.nn.AvgPool2d(2))
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2))
    net.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    return net.to(DEVICE), tnet


@pytest.mark.parametrize("train", [True, False])
def test_network_keeps_channels_last_and_matches_torch(train):
    net, tnet = _nets()
    net.to(memory_format=minidl.channels_last)
    tnet.to(memory_format=torch.channels_last)
    net.train(train)
    tnet.train(train)
    for (_, p), (_, tp) in zip(net.named_parameters(), tnet.named_parameters()):
        assert p.stride() == tp.stride()
    x, tx = _pair((4, 3, 12, 10), seed=2, requires_grad=True)
    xc, txc = x.to(memory_format=minidl.channels_last), tx.to(memory_format=torch.channels_last)
    h, th = net[:4](xc), tnet[:4](txc)
    assert h.is_contiguous(memory_format=minidl.channels_last) and th.is_contiguous(memory_format=torch.channels_last)
    y, ty = net[4:](h), tnet[4:](th)
    assert y.stride() == ty.stride()
    assert rel_err(_np(y), _np(ty)) <= 1e-5
    g = np.random.default_rng(3).standard_normal(ty.shape).astype(np.float32)
    y.backward(minidl.tensor(g).to(DEVICE))
    ty.backward(torch.tensor(g))
    assert rel_err(_np(x.grad), _np(tx.grad)) <= 1e-5
    for (name, p), (_, tp) in zip(net.named_parameters(), tnet.named_parameters()):
        assert rel_err(_np(p.grad), _np(tp.grad)) <= 1e-5, name
        assert p.grad.stride() == tp.grad.stride(), name


def test_residual_add_and_dropout_keep_channels_last():
    conv = nn.Conv2d(4, 4, 3, padding=1).to(DEVICE).to(memory_format=minidl.channels_last)
    x, _ = _pair((2, 4, 6, 6), seed=4)
    x = x.to(memory_format=minidl.channels_last)
    h = conv(x)
    y = F.relu(h + x)
    z = F.dropout(y * 2.0, 0.5, training=True)
    for t in (h, h + x, y, y * y, z):
        assert t.is_contiguous(memory_format=minidl.channels_last)
    # dropout: each element 0 or 2 * y / (1 - p), as on a row-major tensor
    ratio = _np(z)[_np(z) != 0] / (_np(y)[_np(z) != 0] * 4.0)
    assert np.allclose(ratio, 1.0, rtol=1e-5)


def test_conv_of_a_channels_last_input_alone():
    """A contiguous filter and a channels_last input: the result is channels_last, as torch's (whose
    convolutions follow the input's suggested memory format)."""
    x, tx = _pair((2, 5, 7, 6), seed=5)
    w, tw = _pair((3, 5, 3, 3), seed=6)
    y = F.conv2d(x.to(memory_format=minidl.channels_last), w, padding=1)
    ty = torch.nn.functional.conv2d(tx.to(memory_format=torch.channels_last), tw, padding=1)
    assert y.stride() == ty.stride()
    assert rel_err(_np(y), _np(ty)) <= 1e-5


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_optimizer_steps_on_channels_last_parameters(opt):
    net, tnet = _nets(seed=7)
    net.to(memory_format=minidl.channels_last)
    tnet.to(memory_format=torch.channels_last)
    make = {"sgd": (lambda p: minidl.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
            "adam": (lambda p: minidl.optim.Adam(p, lr=1e-2), lambda p: torch.optim.Adam(p, lr=1e-2))}[opt]
    o, to = make[0](net.parameters()), make[1](tnet.parameters())
    for step in range(3):
        x, tx = _pair((4, 3, 8, 8), seed=10 + step)
        loss = (net(x.to(memory_format=minidl.channels_last)) ** 2).mean()
        tloss = (tnet(tx.to(memory_format=torch.channels_last)) ** 2).mean()
        o.zero_grad()
        to.zero_grad()
        loss.backward()
        tloss.backward()
        o.step()
        to.step()
    for (name, p), (_, tp) in zip(net.named_parameters(), tnet.named_parameters()):
        assert rel_err(_np(p), _np(tp)) <= 1e-5, name
        assert p.stride() == tp.stride(), name


def test_state_dict_of_a_channels_last_model_round_trips(tmp_path):
    net, _ = _nets(seed=8)
    net.to(memory_format=minidl.channels_last)
    minidl.save(net.state_dict(), tmp_path / "cl.ckpt")
    other, _ = _nets(seed=9)
    other.load_state_dict(minidl.load(tmp_path / "cl.ckpt"))
    for (name, p), (_, q) in zip(net.named_parameters(), other.named_parameters()):
        assert np.array_equal(_np(p), _np(q)), name
