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


def _orthogonal_run(lib, shape, orthogonal_map, use_trivialization, base=None):
    weight = np.sin(np.arange(np.prod(shape)) * 0.7 + 0.3).reshape(shape) + 2 * np.eye(*shape)   # (full rank)
    layer = lib.nn.Linear(shape[1], shape[0], bias=False, dtype=lib.float64)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(weight))
    lib.nn.utils.parametrizations.orthogonal(layer, orthogonal_map=orthogonal_map,
                                             use_trivialization=use_trivialization)
    if base is not None:   # a non-square weight's base is completed with random columns: torch's, copied
        with lib.no_grad():
            layer.parametrizations.weight[0].base.copy_(lib.tensor(base))
    start = layer.weight.detach().numpy().copy()
    x = lib.tensor(np.cos(np.arange(shape[1] * 3).reshape(3, shape[1]) * 0.5))
    (layer(x) ** 3).sum().backward()
    original = layer.parametrizations.weight.original
    base = layer.parametrizations.weight[0].base if use_trivialization else None
    return (start, original.detach().numpy(), original.grad.numpy(), sorted(layer.state_dict()),
            None if base is None else base.detach().numpy())


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("use_trivialization", [True, False])
def test_orthogonal_parametrization_matches_torch(shape, orthogonal_map, use_trivialization):
    """nn.utils.parametrizations.orthogonal: the weight it starts from (the orthonormalised weight), the original
    it stores, the gradient reaching the original through each map, and torch's state-dict names."""
    theirs = _orthogonal_run(torch, shape, orthogonal_map, use_trivialization)
    ours = _orthogonal_run(minidl, shape, orthogonal_map, use_trivialization, base=theirs[4])
    for a, b in zip(ours[:3], theirs[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert ours[3] == theirs[3]
    w = ours[0] if shape[0] >= shape[1] else ours[0].T
    np.testing.assert_allclose(w.T @ w, np.eye(min(shape)), atol=1e-12)


def test_orthogonal_assignment_and_errors():
    layer = nn.utils.parametrizations.orthogonal(nn.Linear(3, 3, bias=False))
    q = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))[0].astype(np.float32)
    layer.weight = minidl.tensor(q)
    np.testing.assert_allclose(layer.weight.detach().numpy(), q, atol=1e-5)
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        nn.utils.parametrizations.orthogonal(nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="expected a matrix"):
        nn.utils.parametrizations.orthogonal(nn.Linear(3, 3), name="bias")
