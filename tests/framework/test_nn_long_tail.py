"""torch.nn's long tail (minidl/nn/layers/composite.py) against torch: the same reprs and state-dict keys,
and the same outputs and input gradients with copied weights. The functions underneath are checked sample by
sample by PyTorch's OpInfo (tests/test_opinfo.py); this file checks the layers around them."""
import contextlib

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn

LAYERS = [
    lambda m: m.GroupNorm(3, 6), lambda m: m.GroupNorm(2, 6, affine=False), lambda m: m.GroupNorm(3, 6, bias=False),
    lambda m: m.InstanceNorm2d(6, affine=True), lambda m: m.InstanceNorm2d(6, track_running_stats=True),
    lambda m: m.PReLU(6), lambda m: m.PReLU(), lambda m: m.SiLU(), lambda m: m.Mish(), lambda m: m.SELU(),
    lambda m: m.CELU(0.7), lambda m: m.Hardtanh(-0.5, 0.7), lambda m: m.Hardsigmoid(), lambda m: m.Hardswish(),
    lambda m: m.LogSigmoid(), lambda m: m.Softsign(), lambda m: m.Tanhshrink(), lambda m: m.Softshrink(0.3),
    lambda m: m.Hardshrink(0.3), lambda m: m.Threshold(0.1, 2.0), lambda m: m.GLU(1), lambda m: m.Softmin(1),
    lambda m: m.PixelShuffle(2), lambda m: m.PixelUnshuffle(1),
    lambda m: m.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
    lambda m: m.Upsample(size=(7, 3), mode="nearest"), lambda m: m.UpsamplingBilinear2d(scale_factor=2),
    lambda m: m.UpsamplingNearest2d(scale_factor=3),
]


@pytest.mark.parametrize("make", LAYERS, ids=lambda f: f"layer{LAYERS.index(f)}")
def test_layer_matches_torch(make):
    """(The ids do not build the torch module: an older torch, e.g. the GPU machine's 2.11, lacks some
    arguments -- GroupNorm's bias arrived in 2.13 -- and an error while making ids stops the whole
    collection. Such a case skips here instead.)"""
    torch.manual_seed(0)
    try:
        tm = make(torch.nn)
    except TypeError as e:
        pytest.skip(f"this torch ({torch.__version__}) does not take these arguments: {e}")
    mm = make(nn)
    assert repr(mm) == repr(tm)
    state = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    assert list(mm.state_dict()) == list(state)
    if state:
        rng = np.random.default_rng(1)      # non-trivial weights (torch's initial ones are all 1 / 0.25)
        state = {k: (v + rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
                 for k, v in state.items()}
        tm.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        mm.load_state_dict(state)
    x = np.random.default_rng(0).standard_normal((2, 8, 5, 4)).astype(np.float32)
    if isinstance(tm, (torch.nn.GroupNorm, torch.nn.InstanceNorm2d, torch.nn.PReLU)) and "6" in repr(tm):
        x = x[:, :6]
    tx, mx = torch.tensor(x, requires_grad=True), minidl.tensor(x, requires_grad=True)
    ty, my = tm(tx), mm(mx)
    c = np.random.default_rng(2).standard_normal(tuple(ty.shape)).astype(np.float32)
    (ty * torch.tensor(c)).sum().backward()
    (my * minidl.tensor(c)).sum().backward()
    np.testing.assert_allclose(my.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    for (name, tp), (_, mp) in zip(tm.named_parameters(), mm.named_parameters()):
        np.testing.assert_allclose(mp.grad.numpy(), tp.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
    for (name, tb), (_, mb) in zip(tm.named_buffers(), mm.named_buffers()):
        np.testing.assert_allclose(mb.numpy(), tb.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


LOSSES = [
    ("KLDivLoss", dict(reduction="batchmean"), "logprob_prob"), ("KLDivLoss", dict(log_target=True), "logprob_logprob"),
    ("HuberLoss", dict(delta=0.5), "pair"), ("SoftMarginLoss", {}, "sign"),
    ("MarginRankingLoss", dict(margin=0.2), "rank"), ("HingeEmbeddingLoss", dict(margin=0.5), "sign"),
    ("PoissonNLLLoss", {}, "pair"), ("CosineEmbeddingLoss", dict(margin=0.1), "rank"),
    ("TripletMarginLoss", dict(margin=0.5), "triplet"), ("MultiLabelSoftMarginLoss", {}, "multilabel"),
]


@pytest.mark.parametrize("name, kwargs, kind", LOSSES, ids=[f"{n}-{k}" for n, _, k in LOSSES])
def test_loss_matches_torch(name, kwargs, kind):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    sign = np.where(rng.standard_normal(4) > 0, 1.0, -1.0).astype(np.float32)
    args = {
        "pair": [x, y], "sign": [x, np.sign(y)], "rank": [x, y, sign],
        "logprob_prob": [np.log(np.exp(x) / np.exp(x).sum(1, keepdims=True)), np.exp(y) / np.exp(y).sum(1, keepdims=True)],
        "logprob_logprob": [x - np.log(np.exp(x).sum(1, keepdims=True)), y - np.log(np.exp(y).sum(1, keepdims=True))],
        "triplet": [x, y, rng.standard_normal((4, 5)).astype(np.float32)], "multilabel": [x, (y > 0).astype(np.float32)],
    }[kind]
    if name == "MarginRankingLoss":
        args = [x[:, 0], y[:, 0], sign]
    tl, ml = getattr(torch.nn, name)(**kwargs), getattr(nn, name)(**kwargs)
    targs = [torch.tensor(a, requires_grad=(i == 0)) for i, a in enumerate(args)]
    margs = [minidl.tensor(a, requires_grad=(i == 0)) for i, a in enumerate(args)]
    tv, mv = tl(*targs), ml(*margs)
    tv.backward(), mv.backward()
    np.testing.assert_allclose(float(mv.item()), float(tv.item()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(margs[0].grad.numpy(), targs[0].grad.numpy(), rtol=1e-4, atol=1e-6)


def test_parameter_list_and_dict_register_their_parameters():
    tpl = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(3))])
    pl = nn.ParameterList([nn.Parameter(minidl.ones(2)), nn.Parameter(minidl.zeros(3))])
    assert list(pl.state_dict()) == list(tpl.state_dict()) and len(pl) == 2 and pl[1].shape == (3,)
    pl.append(nn.Parameter(minidl.ones(1)))
    assert len(list(pl.parameters())) == 3
    pd = nn.ParameterDict({"a": nn.Parameter(minidl.ones(2)), "b": nn.Parameter(minidl.ones(1))})
    assert list(pd.state_dict()) == ["a", "b"] and "a" in pd and len(pd) == 2

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(minidl.ones(2)) for _ in range(2)])

    assert list(Holder().state_dict()) == ["ws.0", "ws.1"]
    with pytest.raises(NotImplementedError, match="container"):
        pl(minidl.ones(1))


def test_interpolate_and_group_norm_refuse_bad_arguments():
    x = minidl.ones(1, 4, 3, 3)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        minidl.nn.functional.interpolate(x)
    with pytest.raises(NotImplementedError, match="mode 'lanczos' is not supported.*bicubic"):
        minidl.nn.functional.interpolate(x, scale_factor=2, mode="lanczos")
    with pytest.raises(ValueError, match="mode 'bicubic' expects 4-D input"):
        minidl.nn.functional.interpolate(minidl.ones(1, 4, 3), scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        minidl.nn.functional.interpolate(x, scale_factor=2, mode="nearest", align_corners=True)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        minidl.nn.functional.group_norm(x, 3)
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(3, 4)


@pytest.mark.parametrize("dims, size", [(1, 3), (2, (3, 2)), (2, (None, 2)), (3, 2)])
def test_adaptive_max_pool_values_and_indices_match_torch(dims, size):
    x = np.random.default_rng(dims).standard_normal((2, 3) + (7, 5, 4)[:dims]).astype(np.float32)
    name = f"AdaptiveMaxPool{dims}d"
    m, t = getattr(nn, name)(size, return_indices=True), getattr(torch.nn, name)(size, return_indices=True)
    mx, tx = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (my, mi), (ty, ti) = m(mx), t(tx)
    assert repr(m) == repr(t)
    np.testing.assert_array_equal(my.detach().numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(mi.numpy(), ti.numpy())
    (my * my).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_matches_torch(mode):
    w = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    idx, off = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 4, 4])      # the middle bag is empty
    tb, mb = torch.nn.EmbeddingBag(10, 4, mode=mode), nn.EmbeddingBag(10, 4, mode=mode)
    tb.weight.data = torch.tensor(w)
    mb.load_state_dict({"weight": w})
    assert repr(mb) == repr(tb)
    ty, my = tb(torch.tensor(idx), torch.tensor(off)), mb(minidl.tensor(idx), minidl.tensor(off))
    np.testing.assert_allclose(my.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-6)
    (ty * ty).sum().backward()
    (my * my).sum().backward()
    np.testing.assert_allclose(mb.weight.grad.numpy(), tb.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_grid_sample_match_torch_with_gradients(align_corners):
    """The spatial-transformer tutorial's two functions: theta -> grid -> sampled image, gradients to theta too."""
    theta = np.array([[[0.9, 0.1, 0.05], [-0.2, 1.1, 0.0]], [[1.2, 0.0, -0.1], [0.3, 0.8, 0.2]]], dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 5))
    tt, tx = torch.tensor(theta, requires_grad=True), torch.tensor(x, requires_grad=True)
    mt, mx = minidl.tensor(theta, requires_grad=True), minidl.tensor(x, requires_grad=True)
    ty = torch.nn.functional.grid_sample(tx, torch.nn.functional.affine_grid(tt, (2, 3, 4, 7), align_corners=align_corners),
                                         align_corners=align_corners)
    my = nn.functional.grid_sample(mx, nn.functional.affine_grid(mt, (2, 3, 4, 7), align_corners=align_corners),
                                   align_corners=align_corners)
    np.testing.assert_allclose(my.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    c = np.random.default_rng(1).standard_normal(tuple(ty.shape))
    (ty * torch.tensor(c)).sum().backward()
    (my * minidl.tensor(c)).sum().backward()
    np.testing.assert_allclose(mt.grad.numpy(), tt.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(mx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("div_value,head_bias", [(2.0, False), (4.0, True)])
def test_adaptive_log_softmax_with_loss_matches_torch(div_value, head_bias):
    """nn.AdaptiveLogSoftmaxWithLoss with torch's weights loaded: output, loss, the input's and the head's
    gradients, log_prob and predict; targets in the shortlist and in every cluster. div_value 4 leaves the last
    cluster 0 wide (16 // 64), which torch allows (its zero-element weights are not initialised, with a warning)."""
    rng = np.random.default_rng(14)
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 30, [5, 12, 20], div_value=div_value, head_bias=head_bias)
    theirs = theirs.double()
    with pytest.warns(UserWarning, match="zero-element") if div_value == 4.0 else contextlib.nullcontext():
        ours = minidl.nn.AdaptiveLogSoftmaxWithLoss(16, 30, [5, 12, 20], div_value=div_value, head_bias=head_bias)
    ours = ours.double()
    assert list(ours.state_dict()) == list(theirs.state_dict()) and repr(ours) == repr(theirs)
    ours.load_state_dict({k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x, y = rng.standard_normal((9, 16)), np.array([0, 4, 5, 11, 12, 19, 20, 29, 3])
    got = []
    for lib, m in ((minidl, ours), (torch, theirs)):
        xi = lib.tensor(x, requires_grad=True)
        output, loss = m(xi, lib.tensor(y))
        loss.backward()
        got.append((output.detach().numpy(), loss.detach().numpy(), xi.grad.numpy(), m.head.weight.grad.numpy(),
                    m.log_prob(xi).detach().numpy(), m.predict(xi).numpy(), m(xi[0], lib.tensor(y[0])).output.item()))
    for a, b in zip(*got):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="cutoffs"):
        minidl.nn.AdaptiveLogSoftmaxWithLoss(16, 30, [12, 5])
    with pytest.raises(RuntimeError, match="target values"):
        ours(minidl.tensor(x), minidl.tensor(np.array([0, 1, 2, 3, 4, 5, 6, 7, 30])))
