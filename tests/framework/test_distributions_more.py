"""Exponential, Laplace, MultivariateNormal (covariance, scale_tril or precision) and Independent against
torch.distributions in float64: log_prob, entropy, mean and variance, and the gradients of log_prob + entropy with
respect to the parameters (the covariance's through the Cholesky factor); samples with the right moments."""
import numpy as np
import pytest
import torch

import minidl

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 3))
COV = A @ A.T + 3 * np.eye(3)


def _compare(make, value):
    got = []
    for lib in (minidl, torch):
        dist, params = make(lib)
        lp, ent = dist.log_prob(lib.tensor(value)), dist.entropy()
        (lp.sum() + ent.sum()).backward()
        got.append([lp.detach().numpy(), ent.detach().numpy(), dist.mean.detach().numpy(),
                    dist.variance.detach().numpy()] + [p.grad.numpy() for p in params])
    for ours, theirs in zip(*got):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def _params(lib, *arrays):
    return [lib.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def test_exponential_and_laplace_match_torch():
    _compare(lambda lib: (lambda r: (lib.distributions.Exponential(r), [r]))(*_params(lib, [0.5, 2.0, 3.0])),
             np.array([0.3, 1.0, 0.1]))
    _compare(lambda lib: (lambda m, s: (lib.distributions.Laplace(m, s), [m, s]))(*_params(lib, [0.5, -1.0], [1.0, 2.0])),
             np.array([0.1, 3.0]))


@pytest.mark.parametrize("kind", ["covariance_matrix", "scale_tril", "precision_matrix"])
def test_multivariate_normal_matches_torch(kind):
    def make(lib):
        mu, cov = _params(lib, RNG.standard_normal(3) * 0 + [0.1, -0.2, 0.3], COV)
        matrix = {"covariance_matrix": cov, "scale_tril": lib.linalg.cholesky(cov),
                  "precision_matrix": lib.linalg.inv(cov)}[kind]
        return lib.distributions.MultivariateNormal(mu, **{kind: matrix}), [mu, cov]

    _compare(make, RNG.standard_normal((4, 3)))


def test_independent_matches_torch():
    def make(lib):
        m, s = _params(lib, RNG.standard_normal((2, 3)) * 0 + 0.5, np.full((2, 3), 0.7))
        return lib.distributions.Independent(lib.distributions.Normal(m, s), 1), [m, s]

    _compare(make, RNG.standard_normal((2, 3)))
    d = minidl.distributions.Independent(minidl.distributions.Normal(minidl.zeros(2, 3), minidl.ones(2, 3)), 1)
    assert (d.batch_shape, d.event_shape) == ((2,), (3,))


def test_samples_have_the_moments():
    minidl.manual_seed(0)
    d = minidl.distributions.MultivariateNormal(minidl.tensor([1.0, -1.0, 0.0], dtype=minidl.float64),
                                                covariance_matrix=minidl.tensor(COV))
    x = d.sample((40000,)).numpy()
    assert np.abs(x.mean(0) - [1, -1, 0]).max() < 0.05 and np.abs(np.cov(x.T) - COV).max() < 0.15
    e = minidl.distributions.Exponential(minidl.tensor([2.0], dtype=minidl.float64)).sample((40000,)).numpy()
    assert abs(e.mean() - 0.5) < 0.01 and e.min() >= 0
    lap = minidl.distributions.Laplace(minidl.tensor(1.0, dtype=minidl.float64),
                                       minidl.tensor(0.5, dtype=minidl.float64)).sample((40000,)).numpy()
    assert abs(np.median(lap) - 1.0) < 0.02 and abs(lap.var() - 0.5) < 0.03
    with pytest.raises(ValueError, match="exactly one of covariance_matrix"):
        minidl.distributions.MultivariateNormal(minidl.zeros(3))
