"""torch.autograd.functional's first-order functions (jacobian, vjp, jvp) against torch, one and several inputs and
outputs; the second-order ones say why they are not there."""
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


def test_second_order_and_create_graph_say_why():
    with pytest.raises(NotImplementedError, match="second derivatives"):
        minidl.autograd.functional.hessian(_f, minidl.randn(3))
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        minidl.autograd.functional.jacobian(_f, minidl.randn(3), create_graph=True)
