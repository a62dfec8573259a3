"""nn.Module machinery: registration, tree walks, state_dict round trips (incl. from PyTorch), strict
loading errors that change nothing, to(dtype), train/eval, repr, containers, init schemes."""
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
from minidl.nn import init
from tests.conftest import DEVICES, rel_err


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(6, 3, bias=False)
        self.register_buffer("steps", minidl.zeros(1))
        self.register_buffer("scratch", minidl.ones(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 6)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(6, 3, bias=False)
        self.register_buffer("steps", torch.zeros(1))


def test_registration_and_walks():
    m = nn.Sequential(Block(), nn.Linear(3, 2))
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.fc1.weight", "0.fc1.bias", "0.fc2.weight", "1.weight", "1.bias"]
    assert [n for n, _ in m.named_buffers()] == ["0.steps", "0.scratch"]
    assert [n for n, _ in m.named_modules()] == ["", "0", "0.fc1", "0.act", "0.fc2", "1"]
    assert [n for n, _ in m.named_children()] == ["0", "1"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    assert len(list(m[0].parameters(recurse=False))) == 0
    # state_dict: own entries before the children's (PyTorch's order), no non-persistent buffer
    assert list(m.state_dict()) == ["0.steps", "0.fc1.weight", "0.fc1.bias", "0.fc2.weight", "1.weight", "1.bias"]
    assert list(m[0].state_dict()) == list(TorchBlock().state_dict())


def test_shared_parameter_reported_once():
    a = nn.Linear(3, 3)
    m = nn.Sequential(a, nn.ReLU(), a)
    assert len(list(m.parameters())) == 2
    assert len(list(m.modules())) == 3  # Sequential, Linear (once), ReLU


def test_attribute_reassignment_and_delete():
    m = Block()
    with pytest.raises(TypeError, match="fc1"):
        m.fc1 = 3  # a child slot takes a Module or None
    m.fc1 = None
    assert "fc1" not in [n for n, _ in m.named_children()]
    del m.steps
    assert "steps" not in dict(m.named_buffers())
    with pytest.raises(AttributeError):
        _ = m.does_not_exist


def test_assign_before_init_is_an_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(minidl.zeros(2))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_state_dict_round_trip_between_modules():
    minidl.manual_seed(1)
    a, b = Block(), Block()
    assert rel_err(a.fc1.weight.detach().numpy(), b.fc1.weight.detach().numpy()) > 1e-3
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = minidl.randn(5, 4)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    # values are copied, not aliased
    with minidl.no_grad():
        a.fc1.weight.add_(1.0)
    assert not np.allclose(a.fc1.weight.detach().numpy(), b.fc1.weight.detach().numpy())


def test_load_keeps_parameter_objects():
    m = Block()
    w = m.fc1.weight
    array = w._data
    m.load_state_dict(Block().state_dict())
    assert m.fc1.weight is w and w._data is array  # optimizers holding w still see the model


def test_torch_state_dict_loads_and_matches():
    torch.manual_seed(0)
    tm = TorchBlock()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    m = Block()
    m.load_state_dict(sd)
    x = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    ref = tm.fc2(tm.act(tm.fc1(torch.from_numpy(x)))).detach().numpy()
    assert rel_err(m(minidl.tensor(x)).detach().numpy(), ref) <= 1e-6
    # torch tensors themselves are accepted too (they convert through __array__)
    m2 = Block()
    m2.load_state_dict(tm.state_dict())
    assert rel_err(m2.fc1.bias.detach().numpy(), tm.fc1.bias.detach().numpy()) == 0


def _snapshot(m):
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}


def test_strict_errors_list_keys_and_change_nothing():
    m = Block()
    before = _snapshot(m)
    sd = {k: np.full(v.shape, 7.0, np.float32) for k, v in before.items()}
    del sd["fc1.bias"]
    sd["extra.weight"] = np.zeros(3, np.float32)
    sd["fc2.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert 'Missing key(s) in state_dict: "fc1.bias"' in msg
    assert 'Unexpected key(s) in state_dict: "extra.weight"' in msg
    assert "size mismatch for fc2.weight" in msg and "(2, 2)" in msg and "(3, 6)" in msg
    after = _snapshot(m)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


def test_non_strict_returns_incompatible_keys():
    m = Block()
    sd = {k: np.full(v.shape, 3.0, np.float32) for k, v in _snapshot(m).items()}
    del sd["steps"]
    sd["junk"] = np.zeros(1, np.float32)
    result = m.load_state_dict(sd, strict=False)
    assert isinstance(result, nn._IncompatibleKeys)
    assert result.missing_keys == ["steps"] and result.unexpected_keys == ["junk"]
    assert np.all(m.fc1.weight.detach().numpy() == 3.0)
    # shape mismatches are errors even when not strict, and again nothing changes
    sd["fc1.weight"] = np.zeros((1, 1), np.float32)
    sd["fc1.bias"] = np.full(6, -5.0, np.float32)
    with pytest.raises(RuntimeError, match="size mismatch for fc1.weight"):
        m.load_state_dict(sd, strict=False)
    assert np.all(m.fc1.bias.detach().numpy() == 3.0)


def test_to_dtype_in_place_and_int_buffers_kept():
    m = Block()
    m.register_buffer("count", minidl.tensor(3))
    w = m.fc1.weight
    m.double()
    assert m.fc1.weight is w and w.dtype == minidl.float64 and m.steps.dtype == minidl.float64
    assert m.count.dtype == minidl.int64
    y = m(minidl.randn(2, 4, dtype=minidl.float64))
    assert y.dtype == minidl.float64
    m.to(minidl.float32)
    assert w.dtype == minidl.float32
    with pytest.raises(TypeError, match="floating-point"):
        m.to(minidl.int32)


@pytest.mark.parametrize("device", DEVICES)
def test_to_device_keeps_parameter_objects(device):
    m = Block()
    params = list(m.parameters())
    m.to(device)
    assert [id(p) for p in m.parameters()] == [id(p) for p in params]
    assert all(p.device == device for p in m.parameters()) and m.steps.device == device
    m.cpu()
    assert all(p.device == "cpu" for p in m.parameters())


def test_train_eval_flags_recursive():
    m = nn.Sequential(Block(), nn.Sequential(nn.ReLU()))
    assert all(x.training for x in m.modules())
    assert m.eval() is m
    assert not any(x.training for x in m.modules())
    m.train()
    assert all(x.training for x in m.modules())


def test_zero_grad():
    m = Block()
    m(minidl.randn(3, 4)).sum().backward()
    assert m.fc1.weight.grad is not None
    m.zero_grad(set_to_none=False)
    assert np.all(m.fc1.weight.grad.numpy() == 0)
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_apply_visits_children_first():
    m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "ReLU", "Sequential"]


def test_repr_matches_torch():
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Sequential(nn.LeakyReLU(0.2), nn.Linear(4, 1, bias=False)))
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(),
                            torch.nn.Sequential(torch.nn.LeakyReLU(0.2), torch.nn.Linear(4, 1, bias=False)))
    assert repr(m) == repr(t)
    p = nn.Parameter(minidl.zeros(2))
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert repr(nn.Embedding(10, 3, padding_idx=0)) == repr(torch.nn.Embedding(10, 3, padding_idx=0))
    assert repr(nn.Flatten()) == repr(torch.nn.Flatten())


def test_containers():
    s = nn.Sequential(nn.Linear(2, 3))
    s.append(nn.ReLU())
    assert len(s) == 2 and isinstance(s[-1], nn.ReLU) and isinstance(s[:1], nn.Sequential)
    with pytest.raises(IndexError, match="out of range"):
        s[5]
    named = nn.Sequential(OrderedDict(first=nn.Linear(2, 2), second=nn.Tanh()))
    assert list(named.state_dict()) == ["first.weight", "first.bias"]
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    ml.append(nn.Linear(2, 1))
    assert len(list(ml.parameters())) == 8 and [n for n, _ in ml.named_children()] == ["0", "1", "2", "3"]
    md = nn.ModuleDict({"a": nn.Linear(2, 2), "b": nn.ReLU()})
    assert list(md.keys()) == ["a", "b"] and "a" in md and len(list(md.parameters())) == 2


def test_parameter_shares_array():
    t = minidl.randn(3)
    p = nn.Parameter(t)
    assert p._data is t._data and p.requires_grad and p.is_leaf
    assert not nn.Parameter(t, requires_grad=False).requires_grad


# ------------------------------------------------------------------------------------------------
# init
# ------------------------------------------------------------------------------------------------


def test_gain_and_fans_match_torch():
    for name, param in [("linear", None), ("relu", None), ("tanh", None), ("leaky_relu", 0.2), ("leaky_relu", None),
                        ("sigmoid", None), ("selu", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))
    for shape in [(5, 3), (8, 4, 3, 3), (6, 2, 5)]:
        assert init._calculate_fan_in_and_fan_out(minidl.zeros(*shape)) == \
            torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(*shape))
    with pytest.raises(ValueError, match="at least 2 dims"):
        init._calculate_fan_in_and_fan_out(minidl.zeros(3))


@pytest.mark.parametrize("fn,kwargs,bound", [
    (init.kaiming_uniform_, dict(a=math.sqrt(5)), 1 / math.sqrt(40)),          # 1/sqrt(fan_in)
    (init.kaiming_uniform_, dict(nonlinearity="relu"), math.sqrt(6 / 40)),
    (init.xavier_uniform_, dict(), math.sqrt(6 / (40 + 120))),
])
def test_uniform_inits_fill_their_bound(fn, kwargs, bound):
    minidl.manual_seed(0)
    w = minidl.empty(30, 10, 2, 2)  # receptive field 4: fan_in = 10 * 4 = 40, fan_out = 30 * 4 = 120
    fn(w, **kwargs)
    a = w.numpy()
    assert a.max() <= bound and a.min() >= -bound
    assert a.max() > 0.95 * bound and a.min() < -0.95 * bound  # the whole interval is used
    assert abs(a.std() - bound / math.sqrt(3)) < 0.1 * bound


def test_normal_inits_std():
    minidl.manual_seed(0)
    w = minidl.empty(200, 50)
    init.kaiming_normal_(w, nonlinearity="relu")
    assert abs(w.numpy().std() - math.sqrt(2 / 50)) < 0.02 * math.sqrt(2 / 50) * 5
    init.xavier_normal_(w, gain=2.0)
    assert abs(w.numpy().std() - 2 * math.sqrt(2 / 250)) < 0.05 * 2 * math.sqrt(2 / 250)
    init.constant_(w, 0.5)
    assert np.all(w.numpy() == 0.5)
    init.zeros_(w)
    assert np.all(w.numpy() == 0)
    init.ones_(w)
    assert np.all(w.numpy() == 1)


@pytest.mark.parametrize("shape", [(4, 7), (7, 4), (6, 2, 3)])
def test_orthogonal(shape):
    w = minidl.empty(*shape)
    init.orthogonal_(w, gain=1.5)
    flat = w.numpy().reshape(shape[0], -1).astype(np.float64)
    small = flat @ flat.T if shape[0] <= flat.shape[1] else flat.T @ flat
    np.testing.assert_allclose(small, 1.5**2 * np.eye(small.shape[0]), atol=1e-5)


def test_init_works_on_parameters_without_recording():
    p = nn.Parameter(minidl.zeros(3, 3))
    init.uniform_(p, -1, 1)
    assert p.is_leaf and p.grad_fn is None and np.any(p.detach().numpy() != 0)


def test_default_layer_init_ranges():
    minidl.manual_seed(0)
    lin = nn.Linear(50, 40)
    bound = 1 / math.sqrt(50)
    assert np.abs(lin.weight.detach().numpy()).max() <= bound and np.abs(lin.weight.detach().numpy()).max() > 0.9 * bound
    assert np.abs(lin.bias.detach().numpy()).max() <= bound
    emb = nn.Embedding(300, 20, padding_idx=3)
    assert abs(emb.weight.detach().numpy().std() - 1) < 0.05
    assert np.all(emb.weight.detach().numpy()[3] == 0)


def test_backward_pre_hooks_state_dict_hooks_and_get_parameter_as_torch():
    """register_full_backward_pre_hook (it sees grad_output and may replace it, before the input gradients and the
    full backward hook), the state-dict pre/post hooks, a load pre-hook renaming an old checkpoint's keys, a load
    post-hook clearing a missing key before the strict check, and get_parameter: the same calls and results as
    torch's."""
    import torch

    def run(lib):
        calls = []
        lib.manual_seed(0)
        model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2))
        with lib.no_grad():
            for i, p in enumerate(model.parameters()):
                p.copy_(lib.tensor(np.sin(np.arange(p.numel()) + i).reshape(tuple(p.shape))))
        layer = model[2]
        layer.register_full_backward_pre_hook(lambda m, g: (calls.append(("pre", g[0].sum().item())), (g[0] * 2,))[1])
        layer.register_full_backward_hook(lambda m, gi, go: calls.append(("full", go[0].sum().item(),
                                                                          gi[0].sum().item())))
        x = lib.tensor(np.cos(np.arange(6.0)).reshape(2, 3).astype(np.float32), requires_grad=True)
        model(x).sum().backward()
        calls.append(("x.grad", x.grad.sum().item()))
        model.register_state_dict_pre_hook(lambda m, prefix, keep_vars: calls.append(("sd pre", prefix)))
        model.register_state_dict_post_hook(lambda m, sd, prefix, meta: calls.append(("sd post", len(sd))))
        state = model.state_dict()
        old = {k.replace("0.", "first."): v for k, v in state.items() if k != "2.bias"}

        def rename(module, sd, prefix, meta, strict, missing, unexpected, errors):
            for k in [k for k in sd if k.startswith(prefix + "first.")]:
                sd[prefix + "0." + k[len(prefix + "first."):]] = sd.pop(k)

        def forgive(module, keys):
            calls.append(("post", sorted(keys.missing_keys)))
            keys.missing_keys.clear()

        model.register_load_state_dict_pre_hook(rename)
        model.register_load_state_dict_post_hook(forgive)
        result = model.load_state_dict(old)
        calls.append(("result", list(result.missing_keys), list(result.unexpected_keys)))
        calls.append(("get_parameter", tuple(model.get_parameter("2.weight").shape)))
        return calls

    ours, theirs = run(minidl), run(torch)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a[0] == b[0] and np.allclose([v for v in a[1:] if isinstance(v, float)],
                                            [v for v in b[1:] if isinstance(v, float)], rtol=1e-6), (a, b)
        assert [v for v in a[1:] if not isinstance(v, float)] == [v for v in b[1:] if not isinstance(v, float)], (a, b)
    with pytest.raises(AttributeError, match="no parameter `nope`"):
        minidl.nn.Linear(2, 2).get_parameter("nope")
