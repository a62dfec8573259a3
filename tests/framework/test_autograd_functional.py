"""torch.autograd.functional against torch: the first-order functions (jacobian, vjp, jvp), one and several inputs
and outputs; the second-order ones (hessian, hvp, vhp) and create_graph=True, through the recorded backward pass
(minidl/autograd/higher_order.py)."""
import numpy as np
import pytest
import torch

import minidl


def _f(x):
    return (x ** 2).sin() * 3


def _g(x, w):
    return w @ x.tanh(), x.sum() * w.sum()


def _flat(result):
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in _flat(r)]
    return [result.detach().numpy()]


@pytest.mark.parametrize("what", ["jacobian_one", "jacobian_tuple", "vjp", "jvp"])
def test_first_order_functional_matches_torch(what):
    rng = np.random.default_rng(0)
    a, b, v = rng.standard_normal(3), rng.standard_normal((2, 3)), rng.standard_normal(3)
    got = []
    for lib in (minidl, torch):
        F = lib.autograd.functional
        if what == "jacobian_one":
            r = F.jacobian(_f, lib.tensor(a))
        elif what == "jacobian_tuple":
            r = F.jacobian(_g, (lib.tensor(a), lib.tensor(b)))
        elif what == "vjp":
            r = F.vjp(_f, lib.tensor(a), lib.tensor(v))
        else:
            r = F.jvp(_f, lib.tensor(a), lib.tensor(v))
        got.append(_flat(r))
    assert len(got[0]) == len(got[1])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def _h(x, w):
    return (x.tanh() ** 2).sum() * w.sum() + (x[:2] * w).exp().sum()


@pytest.mark.parametrize("what", ["hessian_one", "hessian_tuple", "hvp", "vhp", "jacobian_create_graph"])
def test_second_order_functional_matches_torch(what):
    rng = np.random.default_rng(1)
    a, b, va, vb = rng.standard_normal(3), rng.standard_normal(2), rng.standard_normal(3), rng.standard_normal(2)
    got = []
    for lib in (minidl, torch):
        F = lib.autograd.functional
        x, w = lib.tensor(a), lib.tensor(b)
        if what == "hessian_one":
            r = F.hessian(lambda t: (t ** 3).sum() + t.sin().sum() * t.sum(), x)
        elif what == "hessian_tuple":
            r = F.hessian(_h, (x, w))
        elif what in ("hvp", "vhp"):
            r = getattr(F, what)(_h, (x, w), (lib.tensor(va), lib.tensor(vb)))
        else:   # the Jacobian keeps its graph: differentiate its trace
            x.requires_grad_(True)
            jac = F.jacobian(_f, x, create_graph=True)
            assert jac.requires_grad
            (gx,) = lib.autograd.grad(jac.diagonal().sum(), x)
            r = (jac, gx)
        got.append(_flat(r))
    assert len(got[0]) == len(got[1])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_second_order_messages():
    with pytest.raises(RuntimeError, match="hessian: the function must return a single one-element tensor"):
        minidl.autograd.functional.hessian(_f, minidl.randn(3))
    with pytest.raises(NotImplementedError, match="create_graph=True: the gradient of .* cannot be differentiated"):
        minidl.autograd.functional.hessian(lambda t: t.cumsum(0).sum() * t.sum(), minidl.randn(3))
