"""Weight and spectral normalisation, both of torch's APIs (minidl/nn/utils/weight_norm.py, parametrize.py,
parametrizations.py), against torch on copied weights (and, for spectral norm, copied power-iteration vectors):
state-dict names, outputs, gradients of the new parameters, removal, assignment through right_inverse."""
import warnings

import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
from tests.conftest import rel_err


def _D(t):
    return t.detach().numpy()


def _pair(make_torch, make_ours):
    t, m = make_torch(), make_ours()
    for name, p in t.named_parameters():
        getattr(m, name).data = minidl.tensor(_D(p).copy())
    return t, m


def _linear():
    return _pair(lambda: torch.nn.Linear(3, 4), lambda: nn.Linear(3, 4))


def _grads(t, m, x):
    ty, my = t(torch.tensor(x)), m(minidl.tensor(x))
    (ty ** 2).sum().backward()
    (my ** 2).sum().backward()
    assert rel_err(_D(my), _D(ty)) < 1e-6
    tg = {n: p.grad.numpy() for n, p in t.named_parameters()}
    mg = {n: p.grad.numpy() for n, p in m.named_parameters()}
    assert tg.keys() == mg.keys()
    for name in tg:
        assert rel_err(mg[name], tg[name]) < 1e-5, name


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_hooks_match_torch(dim):
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    t, m = _linear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)   # (torch deprecates this API in favour of parametrizations)
        torch.nn.utils.weight_norm(t, dim=dim)
        torch_shape = tuple(t.weight_g.shape)
    nn.utils.weight_norm(m, dim=dim)
    assert list(m.state_dict()) == list(t.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert tuple(m.weight_g.shape) == torch_shape
    _grads(t, m, x)
    with pytest.raises(RuntimeError, match="two weight_norm hooks"):
        nn.utils.weight_norm(m, dim=dim)
    torch.nn.utils.remove_weight_norm(t)
    nn.utils.remove_weight_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"] and rel_err(_D(m.weight), _D(t.weight)) < 1e-6
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found"):
        nn.utils.remove_weight_norm(m)


def test_spectral_norm_hooks_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    t, m = _pair(lambda: torch.nn.Linear(6, 4), lambda: nn.Linear(6, 4))
    torch.nn.utils.spectral_norm(t)
    nn.utils.spectral_norm(m)
    assert list(m.state_dict()) == list(t.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    m.weight_u.data, m.weight_v.data = minidl.tensor(t.weight_u.numpy().copy()), minidl.tensor(t.weight_v.numpy().copy())
    for _ in range(2):   # training mode: a power-iteration step per call, the buffers updated in place
        t(torch.tensor(x)), m(minidl.tensor(x))
    assert rel_err(m.weight_u.numpy(), t.weight_u.numpy()) < 1e-6
    _grads(t, m, x)
    t.eval(), m.eval()
    assert rel_err(_D(m(minidl.tensor(x))), _D(t(torch.tensor(x)))) < 1e-6
    nn.utils.remove_spectral_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"]


@pytest.mark.parametrize("dim", [0, None])
def test_weight_norm_parametrization_matches_torch(dim):
    x = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    t, m = _linear()
    torch.nn.utils.parametrizations.weight_norm(t, dim=dim)
    nn.utils.parametrizations.weight_norm(m, dim=dim)
    assert list(m.state_dict()) == list(t.state_dict()) == \
        ["bias", "parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert type(m).__name__ == "ParametrizedLinear" and nn.utils.parametrize.is_parametrized(m, "weight")
    _grads(t, m, x)
    t.weight, m.weight = torch.ones(4, 3), minidl.ones(4, 3)   # assignment: through right_inverse
    assert rel_err(_D(m.weight), _D(t.weight)) < 1e-6
    with nn.utils.parametrize.cached():
        assert m.weight is m.weight
    assert m.weight is not m.weight
    nn.utils.parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and list(m.state_dict()) == ["bias", "weight"]
    assert rel_err(_D(m.weight), np.ones((4, 3))) < 1e-6


def test_spectral_norm_parametrization_matches_torch_and_reloads():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    t, m = _pair(lambda: torch.nn.Conv2d(2, 3, 3), lambda: nn.Conv2d(2, 3, 3))
    torch.nn.utils.parametrizations.spectral_norm(t)
    nn.utils.parametrizations.spectral_norm(m)
    assert list(m.state_dict()) == list(t.state_dict())
    for name in ("_u", "_v"):
        getattr(m.parametrizations.weight[0], name).data = \
            minidl.tensor(getattr(t.parametrizations.weight[0], name).numpy().copy())
    t(torch.tensor(x)), m(minidl.tensor(x))
    _grads(t, m, x)
    again = nn.Conv2d(2, 3, 3)
    nn.utils.parametrizations.spectral_norm(again)
    again.load_state_dict(m.state_dict())
    again.eval(), m.eval()
    assert rel_err(_D(again(minidl.tensor(x))), _D(m(minidl.tensor(x)))) < 1e-6


def test_assigning_through_a_parametrization_without_right_inverse_is_refused_as_torch():
    """A parametrization chain whose last module has no right_inverse cannot take an assigned value: torch raises
    (minidl used to skip that module silently, leaving the weight not equal to what was assigned)."""
    class Skew(nn.Module):
        def forward(self, X):
            return X.triu(1) - X.triu(1).transpose(-1, -2)

        def right_inverse(self, A):
            return A.triu(1)

    class Double(nn.Module):
        def forward(self, X):
            return X * 2

    layer = nn.Linear(3, 3)
    nn.utils.parametrize.register_parametrization(layer, "weight", Skew())
    nn.utils.parametrize.register_parametrization(layer, "weight", Double())
    before = layer.parametrizations.weight.original.detach().numpy().copy()
    with pytest.raises(RuntimeError, match="Double does not implement right_inverse"):
        layer.weight = minidl.zeros(3, 3)
    np.testing.assert_array_equal(layer.parametrizations.weight.original.detach().numpy(), before)
