"""Session 14: torch.distributions' vector and matrix transforms (distributions/bijections.py), the constraint
registries biject_to / transform_to, OneHotCategoricalStraightThrough and the ExponentialFamily base, against
torch 2.13 on the CPU: values, inverses, log-determinants and their gradients."""
import numpy as np
import pytest
import torch

import minidl

X = np.array([[0.3, -1.2, 0.5], [2.0, 0.1, -0.4]])
M = np.array([[0.2, 0.0], [1.0, -0.3]])


def _both(fn):
    return [fn(lib) for lib in (minidl, torch)]


def _close(a, b, rtol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name,data,args", [
    ("StickBreakingTransform", X, ()), ("SoftplusTransform", X, ()), ("SoftmaxTransform", X, ()),
    ("LowerCholeskyTransform", M, ()), ("PositiveDefiniteTransform", M, ()),
    ("ReshapeTransform", X, ((3,), (3, 1))),
])
def test_transforms_values_inverses_and_log_determinants_as_torch(name, data, args):
    def run(lib):
        x = lib.tensor(data.copy(), requires_grad=True)
        t = getattr(lib.distributions, name)(*args)
        y = t(x)
        out = [y.detach().numpy(), t.inv(y).detach().numpy()]
        if name not in ("SoftmaxTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform"):
            ladj = t.log_abs_det_jacobian(x, y)
            (ladj.sum() + y.sum()).backward()
            out += [ladj.detach().numpy(), x.grad.numpy()]
        return out

    ours, theirs = _both(run)
    for a, b in zip(ours, theirs):
        _close(a, b)


def test_composite_transforms_as_torch():
    def run(lib):
        D = lib.distributions
        x = lib.tensor(X.copy())
        ind = D.IndependentTransform(D.ExpTransform(), 1)
        cat = D.CatTransform([D.ExpTransform(), D.identity_transform], dim=1, lengths=[1, 2])
        stack = D.StackTransform([D.ExpTransform(), D.SigmoidTransform()], dim=0)
        cdf = D.CumulativeDistributionTransform(D.Normal(lib.tensor(0.0, dtype=lib.float64),
                                                         lib.tensor(1.0, dtype=lib.float64)))
        return [ind(x).numpy(), ind.log_abs_det_jacobian(x, ind(x)).numpy(), cat(x).numpy(), cat.inv(cat(x)).numpy(),
                cat.log_abs_det_jacobian(x, cat(x)).numpy(), stack(x).numpy(), stack.inv(stack(x)).numpy(),
                stack.log_abs_det_jacobian(x, stack(x)).numpy(), cdf(x).numpy(),
                cdf.log_abs_det_jacobian(x, cdf(x)).numpy()]

    for a, b in zip(*_both(run)):
        _close(a, b, rtol=1e-9)


@pytest.mark.parametrize("constraint,registry", [
    ("simplex", "biject_to"), ("simplex", "transform_to"), ("positive", "biject_to"), ("real", "biject_to"),
    ("unit_interval", "biject_to"), ("lower_cholesky", "transform_to"), ("positive_definite", "transform_to"),
    ("interval(-1.0, 3.0)", "biject_to"), ("greater_than(2.0)", "transform_to"), ("less_than(1.5)", "biject_to"),
    ("independent(positive, 1)", "biject_to"),
])
def test_constraint_registries_choose_torchs_transforms(constraint, registry):
    def run(lib):
        C = lib.distributions.constraints
        c = eval(constraint, {**{n: getattr(C, n) for n in dir(C) if not n.startswith("_")}})
        t = getattr(lib.distributions, registry)(c)
        x = lib.tensor(M.copy() if "cholesky" in constraint or "definite" in constraint else X.copy())
        y = t(x)
        return type(t).__name__, y.numpy(), bool(c.check(y).all())

    (n1, y1, ok1), (n2, y2, ok2) = _both(run)
    assert n1 == n2 and ok1 and ok2
    _close(y1, y2, rtol=1e-9)


def test_registering_a_constraint_and_an_unknown_one():
    D = minidl.distributions

    class Odd(D.constraints.Constraint):
        pass

    with pytest.raises(NotImplementedError, match="Cannot transform Odd constraints"):
        D.biject_to(Odd())
    D.biject_to.register(Odd, lambda c: D.ExpTransform())
    assert type(D.biject_to(Odd())).__name__ == "ExpTransform"


def test_one_hot_straight_through_and_exponential_family_as_torch():
    probs = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    w = np.array([1.0, 2.0, 3.0])
    for lib in (minidl, torch):
        p = lib.tensor(probs, requires_grad=True)
        d = lib.distributions.OneHotCategoricalStraightThrough(probs=p)
        s = d.rsample((4,))
        assert tuple(s.shape) == (4, 2, 3) and bool((s.sum(-1) == 1).all()) and d.has_rsample
        (s * lib.tensor(w)).sum().backward()
        # the straight-through gradient, through probs' normalisation (rows summing to 1): 4 (w - <probs, w>)
        _close(p.grad.numpy(), 4 * (w - (probs * w).sum(-1, keepdims=True)))

    def entropy(lib):
        class Exp(lib.distributions.ExponentialFamily):   # Exponential(rate) as an exponential family
            def __init__(self, rate):
                self.rate = rate
                super().__init__(batch_shape=rate.shape)

            @property
            def _natural_params(self):
                return (-self.rate,)

            def _log_normalizer(self, theta):
                return -(-theta).log()

            @property
            def _mean_carrier_measure(self):
                return 0

        return Exp(lib.tensor([0.5, 2.0], dtype=lib.float64)).entropy().detach().numpy()

    ours, theirs = _both(entropy)
    _close(ours, theirs)
    _close(ours, 1 - np.log([0.5, 2.0]))
    with pytest.raises(NotImplementedError, match="Cannot transform"):   # no bijection onto these, as torch
        minidl.distributions.biject_to(minidl.distributions.constraints.positive_definite)


def test_normal_cdf_and_icdf_are_exact_and_differentiable_as_torch():
    """Normal.cdf used a 1.5e-7 erf approximation and no gradient before session 14; now erf and erfinv ops."""
    out = []
    for lib in (minidl, torch):
        loc = lib.tensor([0.5, -1.0], dtype=lib.float64, requires_grad=True)
        scale = lib.tensor([2.0, 0.7], dtype=lib.float64, requires_grad=True)
        d = lib.distributions.Normal(loc, scale)
        c = d.cdf(lib.tensor([1.3, -2.5], dtype=lib.float64))
        q = d.icdf(lib.tensor([0.1, 0.975], dtype=lib.float64))
        (c.sum() + q.sum()).backward()
        out.append([c.detach().numpy(), q.detach().numpy(), loc.grad.numpy(), scale.grad.numpy()])
    for a, b in zip(*out):
        _close(a, b, rtol=1e-12)


def test_logistic_normal_as_torch():
    loc = np.array([[0.3, -0.2, 0.5], [0.0, 1.0, -1.0]])
    scale = np.array([[1.0, 0.5, 2.0], [0.3, 0.3, 0.3]])
    v = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    out = []
    for lib in (minidl, torch):
        l, s = lib.tensor(loc, requires_grad=True), lib.tensor(scale, requires_grad=True)
        d = lib.distributions.LogisticNormal(l, s)
        lp = d.log_prob(lib.tensor(v))
        lp.sum().backward()
        sample = d.rsample((5,))
        assert tuple(sample.shape) == (5, 2, 4) and bool(((sample.sum(-1) - 1).abs() < 1e-9).all())
        out.append([tuple(d.batch_shape), tuple(d.event_shape), lp.detach().numpy(), l.grad.numpy(), s.grad.numpy()])
    assert out[0][:2] == out[1][:2]
    for a, b in zip(out[0][2:], out[1][2:]):
        _close(a, b)


def test_generalized_pareto_as_torch():
    """In float32: torch's own GeneralizedPareto fails in float64 (isclose against a float32 zero)."""
    loc, scale, conc = (np.array(a, np.float32) for a in ([0.1, 0.0, -1.0], [2.0, 1.0, 0.5], [0.4, 0.0, -0.3]))
    v, u = np.array([1.5, 0.7, -0.9], np.float32), np.array([0.2, 0.5, 0.9], np.float32)
    out = []
    for lib in (minidl, torch):
        l, s, c = (lib.tensor(a, requires_grad=True) for a in (loc, scale, conc))
        d = lib.distributions.GeneralizedPareto(l, s, c)
        lp, cdf, q = d.log_prob(lib.tensor(v)), d.cdf(lib.tensor(v)), d.icdf(lib.tensor(u))
        (lp.sum() + cdf.sum() + q.sum()).backward()
        assert tuple(d.rsample((4,)).shape) == (4, 3)
        out.append([t.detach().numpy() for t in (lp, cdf, q, d.mean, d.variance, d.entropy(), l.grad, s.grad,
                                                  c.grad)])
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
