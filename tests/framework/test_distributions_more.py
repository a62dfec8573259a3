"""Exponential, Laplace, MultivariateNormal (covariance, scale_tril or precision) and Independent against
torch.distributions in float64: log_prob, entropy, mean and variance, and the gradients of log_prob + entropy with
respect to the parameters (the covariance's through the Cholesky factor); samples with the right moments."""
import numpy as np
import pytest
import torch

import minidl
from tests.conftest import DEVICES

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


GAMMA_FAMILY_CASES = [
    ("Gamma", ([2.0, 0.7], [1.5, 3.0]), [0.3, 2.0]),
    ("Chi2", ([3.0, 5.0],), [1.0, 4.0]),
    ("Beta", ([2.0, 0.5], [3.0, 0.7]), [0.3, 0.9]),
    ("Dirichlet", ([[1.0, 2.0, 3.0], [0.5, 0.5, 4.0]],), [[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]),
    ("LogNormal", ([0.1, -0.5], [0.7, 1.2]), [0.5, 2.0]),
    ("Gumbel", ([0.1, -0.5], [0.7, 1.2]), [0.5, 2.0]),
    ("Cauchy", ([0.1, -0.5], [0.7, 1.2]), [0.5, 2.0]),
    ("HalfNormal", ([0.7, 1.2],), [0.5, 2.0]),
    ("Poisson", ([2.5, 0.7],), [1.0, 3.0]),
]


@pytest.mark.parametrize("name,params,value", GAMMA_FAMILY_CASES, ids=[c[0] for c in GAMMA_FAMILY_CASES])
def test_more_distributions_match_torch_with_gradients(name, params, value):
    """log_prob, entropy, mean and variance as torch's, and the gradients of log_prob + entropy in the parameters
    (through lgamma -> digamma -> polygamma for the gamma family)."""
    results = []
    for lib in (minidl, torch):
        ps = [lib.tensor(np.array(p, dtype=np.float64), requires_grad=True) for p in params]
        d = getattr(lib.distributions, name)(*ps)
        out = [d.log_prob(lib.tensor(np.array(value)))] + ([] if name == "Poisson" else [d.entropy()])
        sum(o.sum() for o in out).backward()
        out += [d.mean, d.variance]
        results.append([o.detach().numpy() for o in out] + [p.grad.numpy() for p in ps])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_more_distributions_sample_on_the_device_with_the_right_mean(device):
    minidl.manual_seed(0)
    D = minidl.distributions

    def t(v):
        return minidl.tensor(v, device=device)

    cases = [D.Gamma(t([2.0, 5.0]), t([4.0, 1.0])), D.Beta(t([2.0]), t([6.0])), D.Dirichlet(t([1.0, 3.0])),
             D.Poisson(t([3.0])), D.Gumbel(t([1.0]), t([2.0])), D.LogNormal(t([0.0]), t([0.5])), D.HalfNormal(t([2.0])),
             D.Chi2(t([4.0]))]
    for d in cases:
        s = d.sample((20000,))
        assert tuple(s.shape) == (20000,) + d.batch_shape + d.event_shape and s.device == d.mean.device
        np.testing.assert_allclose(s.mean(0).cpu().numpy(), d.mean.cpu().numpy(), rtol=0.05)
    with pytest.raises(NotImplementedError, match="Beta.rsample: a reparameterised gamma draw"):
        D.Beta(t([2.0]), t([3.0])).rsample()
    x = minidl.tensor([0.3], device=device, requires_grad=True)
    D.Gumbel(x, t([1.0])).rsample((4,)).sum().backward()   # loc + noise: d/dloc = 4
    assert float(x.grad.cpu().numpy()[0]) == 4.0


def test_polygamma_digamma_mvlgamma_and_special_names_match_torch():
    import torch.special as ts

    import minidl.special as ms

    x = np.array([0.3, 1.0, 2.5, 7.0, 30.0, -0.5, -2.7, 1e-3])
    for n in range(4):
        ours, theirs = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        a = ours.digamma() if n == 0 else minidl.polygamma(n, ours)
        b = theirs.digamma() if n == 0 else torch.polygamma(n, theirs)
        a.sum().backward()
        b.sum().backward()
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9)
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-9)
    assert minidl.tensor([2.0]).polygamma(1).item() == pytest.approx(torch.tensor([2.0]).polygamma(1).item())
    y = np.array([1.5, 3.0])
    np.testing.assert_allclose(minidl.mvlgamma(minidl.tensor(y), 2).numpy(), torch.mvlgamma(torch.tensor(y), 2).numpy())
    z = np.array([-3.0, -0.5, 0.0, 1.2])
    for name in ("ndtr", "log_ndtr", "digamma", "psi"):
        np.testing.assert_allclose(getattr(ms, name)(minidl.tensor(z + 4)).numpy(),
                                   getattr(ts, name)(torch.tensor(z + 4)).numpy(), rtol=1e-7)
    p = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(ms.ndtri(minidl.tensor(p)).numpy(), ts.ndtri(torch.tensor(p)).numpy(), rtol=1e-7)
    u, v = np.array([0.0, 2.0, 0.0]), np.array([-1.0, 0.5, 3.0])
    np.testing.assert_allclose(ms.xlog1py(minidl.tensor(u), minidl.tensor(v)).numpy(),
                               ts.xlog1py(torch.tensor(u), torch.tensor(v)).numpy())
    with pytest.raises(ValueError, match="polygamma: n must be a non-negative integer"):
        minidl.polygamma(-1, minidl.tensor([1.0]))
    with pytest.raises(ValueError, match=r"All elements must be greater than \(p-1\)/2"):
        minidl.mvlgamma(minidl.tensor([0.2]), 2)


def test_transformed_distributions_match_torch_and_the_tanh_cache_keeps_log_prob_finite():
    """TransformedDistribution with Tanh (a squashed Gaussian policy), Affine + Sigmoid, and Exp: log_prob and its
    gradients as torch's. With TanhTransform(cache_size=1), log_prob of a sample takes x back from the cache: finite
    where tanh(x) rounded to 1 and atanh would give inf."""
    mu, sig = np.array([0.3, -1.0, 2.5]), np.array([0.5, 1.2, 0.8])
    results = []
    for lib in (minidl, torch):
        D = lib.distributions
        m, s = lib.tensor(mu, requires_grad=True), lib.tensor(sig, requires_grad=True)
        squashed = D.TransformedDistribution(D.Normal(m, s), [D.transforms.TanhTransform(cache_size=1)])
        squeezed = D.TransformedDistribution(D.Normal(m, s), [D.transforms.AffineTransform(1.0, 2.0),
                                                              D.transforms.SigmoidTransform()])
        lognormal = D.TransformedDistribution(D.Normal(m, s), D.transforms.ExpTransform())
        lps = [squashed.log_prob(lib.tensor(np.array([0.1, -0.7, 0.95]))),
               squeezed.log_prob(lib.tensor(np.array([0.2, 0.5, 0.9]))),
               lognormal.log_prob(lib.tensor(np.array([0.5, 1.0, 3.0])))]
        sum(lp.sum() for lp in lps).backward()
        results.append([lp.detach().numpy() for lp in lps] + [m.grad.numpy(), s.grad.numpy()])
        assert squashed.has_rsample and tuple(squashed.batch_shape) == (3,) and tuple(squashed.event_shape) == ()
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    D = minidl.distributions
    tanh = D.transforms.TanhTransform(cache_size=1)
    base = D.Normal(minidl.tensor([20.0, 0.5]), minidl.tensor([1.0, 1.0]))
    policy = D.TransformedDistribution(base, [tanh])
    x = minidl.tensor([20.0, 0.5], requires_grad=True)
    y = tanh(x)
    assert float(y[0]) == 1.0 and np.isinf(float(y[0].atanh()))
    lp = policy.log_prob(y)
    want = base.log_prob(x) - tanh.log_abs_det_jacobian(x, y)
    assert np.isfinite(lp.detach().numpy()).all()
    np.testing.assert_allclose(lp.detach().numpy(), want.detach().numpy())
    lp.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


def _mixture_cases(lib):
    D = lib.distributions
    w = lib.tensor(np.array([[0.2, 1.0, -0.5], [0.0, 0.3, 0.1]]), requires_grad=True)
    mu = lib.tensor(np.array([[-1.0, 0.5, 2.0], [0.0, 1.0, -2.0]]), requires_grad=True)
    sd = lib.tensor(np.array([[0.5, 1.0, 0.7], [1.2, 0.3, 0.9]]), requires_grad=True)
    logits = lib.tensor(np.array([[0.1, -0.3, 0.7], [1.0, 0.0, -1.0]]), requires_grad=True)
    df = lib.tensor(np.array([3.0, 1.5, 0.8]), requires_grad=True)
    p = lib.tensor(np.array([0.3, 0.8]), requires_grad=True)
    gmm = D.MixtureSameFamily(D.Categorical(logits=w), D.Normal(mu, sd))
    mixture_2d = D.MixtureSameFamily(D.Categorical(logits=w[0]), D.Independent(D.Normal(mu.T, sd.T), 1))
    relaxed = D.RelaxedOneHotCategorical(lib.tensor(np.array(0.7)), logits=logits)
    relaxed_b = D.RelaxedBernoulli(lib.tensor(np.array([0.7, 1.3])), logits=logits[:, 0])
    st = D.StudentT(df, lib.tensor(np.array([0.0, 1.0, -1.0])), lib.tensor(np.array([1.0, 2.0, 0.5])))
    geo, binom = D.Geometric(probs=p), D.Binomial(lib.tensor(np.array([10.0, 4.0])), probs=p)
    out = [gmm.log_prob(lib.tensor(np.array([0.3, -1.5]))), gmm.mean, gmm.variance,
           mixture_2d.log_prob(lib.tensor(np.array([0.1, 0.4]))), mixture_2d.mean,
           relaxed.log_prob(lib.tensor(np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]))),
           relaxed_b.log_prob(lib.tensor(np.array([0.3, 0.8]))),
           st.log_prob(lib.tensor(np.array([0.5, -1.0, 2.0]))), st.entropy(), st.mean, st.variance,
           geo.log_prob(lib.tensor(np.array([2.0, 0.0]))), geo.entropy(), geo.mean, geo.variance,
           binom.log_prob(lib.tensor(np.array([3.0, 4.0]))), binom.mean, binom.variance]
    sum(o.sum() for o in out if o.requires_grad and np.isfinite(o.detach().numpy()).all()).backward()
    return [o.detach().numpy() for o in out] + [x.grad.numpy() for x in (w, mu, sd, logits, df, p)]


def test_mixtures_relaxed_student_t_geometric_binomial_match_torch():
    """MixtureSameFamily (scalar and vector components), RelaxedOneHotCategorical / RelaxedBernoulli, StudentT (every
    df regime of its mean and variance), Geometric and Binomial: values and gradients as torch's (df's gradient goes
    through digamma, which agrees with torch's to ~1e-10)."""
    for ours, theirs in zip(_mixture_cases(minidl), _mixture_cases(torch)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("device", DEVICES)
def test_mixture_and_relaxed_samples(device):
    minidl.manual_seed(0)
    D = minidl.distributions

    def t(v, **kw):
        return minidl.tensor(v, device=device, **kw)

    gmm = D.MixtureSameFamily(D.Categorical(logits=t([0.0, 1.0])), D.Normal(t([-2.0, 3.0]), t([0.5, 0.5])))
    s = gmm.sample((20000,))
    assert tuple(s.shape) == (20000,) and abs(float(s.mean()) - float(gmm.mean)) < 0.1
    assert abs(float(D.StudentT(t([5.0])).sample((20000,)).var()) - 5 / 3) < 0.2
    assert abs(float(D.Geometric(t([0.3])).sample((20000,)).mean()) - 7 / 3) < 0.1
    assert abs(float(D.Binomial(10, t([0.3])).sample((20000,)).mean()) - 3.0) < 0.05
    squashed = D.TransformedDistribution(D.Normal(t([0.0, 1.0]), t([1.0, 0.5])), [D.transforms.TanhTransform(1)])
    a = squashed.rsample((5,))
    assert a.device == s.device and np.isfinite(squashed.log_prob(a).detach().cpu().numpy()).all()
    logits = t([0.0, 1.0, 2.0], requires_grad=True)
    y = D.RelaxedOneHotCategorical(t(0.5), logits=logits).rsample((4,))
    np.testing.assert_allclose(y.sum(-1).detach().cpu().numpy(), 1.0, rtol=1e-6)
    (y[:, 2]).sum().backward()          # differentiable in the logits
    assert logits.grad is not None and float(logits.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="must end with the mixture's 3 components"):
        D.MixtureSameFamily(D.Categorical(logits=minidl.zeros(3)), D.Normal(minidl.zeros(2), minidl.ones(2)))


def _counts_and_kl_cases(lib):
    D = lib.distributions

    def T(v, grad=True):
        return lib.tensor(np.array(v, dtype=np.float64), requires_grad=grad)

    params = [T([1.5, 0.7]), T([2.0, 3.0]), T([0.3, 0.8]), T([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8]]),
              T([[1.0, 0.5], [0.2, 2.0], [0.3, 0.1]]), T([0.5, 1.0, 2.0])]
    a, b, pr, cat, W, Dg = params
    w, pa = D.Weibull(a, b), D.Pareto(a, b + 1.5)
    nb, mn = D.NegativeBinomial(b, probs=pr), D.Multinomial(5, probs=cat)
    lr = D.LowRankMultivariateNormal(T([0.1, -0.2, 0.3]), W, Dg)
    kl = D.kl_divergence
    mvn_p = D.MultivariateNormal(T([0.1, 0.2, 0.3], False), scale_tril=lib.linalg.cholesky(W @ W.mT + Dg.diag_embed()))
    mvn_q = D.MultivariateNormal(T([0.0, -0.1, 0.5], False), covariance_matrix=T(np.eye(3) * 2.0, False))
    out = [w.log_prob(T([0.4, 2.0], False)), w.entropy(), w.mean, w.variance,
           pa.log_prob(T([2.0, 3.5], False)), pa.entropy(), pa.mean, pa.variance,
           nb.log_prob(T([3.0, 0.0], False)), nb.mean, nb.variance,
           mn.log_prob(T([[1.0, 2.0, 2.0], [0.0, 0.0, 5.0]], False)), mn.mean, mn.variance,
           lr.log_prob(T([0.0, 0.5, -1.0], False)), lr.entropy(),
           kl(D.Bernoulli(probs=pr), D.Bernoulli(probs=pr.flip(0))), kl(D.Beta(a, b), D.Beta(b, a)),
           kl(D.Gamma(a, b), D.Gamma(b, a)), kl(D.Dirichlet(cat + 0.5), D.Dirichlet(cat.flip(0) + 1.0)),
           kl(D.Exponential(a), D.Exponential(b)), kl(D.Laplace(a, b), D.Laplace(b, a)),
           kl(D.Poisson(a), D.Poisson(b)), kl(D.Categorical(probs=cat), D.Categorical(probs=cat.flip(0))),
           kl(D.Independent(D.Normal(a, b), 1), D.Independent(D.Normal(b, a), 1)), kl(mvn_p, mvn_q),
           kl(D.Uniform(T([0.0], False), T([1.0], False)), D.Uniform(T([-1.0], False), T([2.0], False)))]
    sum(o.sum() for o in out if o.requires_grad and np.isfinite(o.detach().numpy()).all()).backward()
    return [o.detach().numpy() for o in out] + [p.grad.numpy() for p in params]


def test_weibull_pareto_negative_binomial_multinomial_low_rank_and_kl_pairs_match_torch():
    """Values and gradients as torch's, and kl_divergence for the pairs torch registers most (Bernoulli, Beta, Gamma,
    Dirichlet, Exponential, Laplace, Poisson, Categorical, Independent of Normals, MultivariateNormal, Uniform)."""
    for ours, theirs in zip(_counts_and_kl_cases(minidl), _counts_and_kl_cases(torch)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-10, equal_nan=True)


def test_register_kl_and_count_samples():
    D = minidl.distributions

    class Shifted(D.Normal):
        pass

    with pytest.raises(NotImplementedError, match="no formula for Gamma and Normal"):
        D.kl_divergence(D.Gamma(minidl.tensor([1.0]), minidl.tensor([1.0])), D.Normal(minidl.tensor([0.0]),
                                                                                     minidl.tensor([1.0])))
    p, q = Shifted(minidl.tensor([0.0]), minidl.tensor([1.0])), D.Normal(minidl.tensor([1.0]), minidl.tensor([1.0]))
    assert float(D.kl_divergence(p, q)) == pytest.approx(0.5)   # a subclass finds its base class's formula

    @D.register_kl(Shifted, D.Normal)
    def _kl(p, q):
        return minidl.tensor([42.0])

    assert float(D.kl_divergence(p, q)) == 42.0
    minidl.manual_seed(0)
    assert abs(float(D.NegativeBinomial(3.0, probs=minidl.tensor([0.4])).sample((20000,)).mean()) - 2.0) < 0.1
    counts = D.Multinomial(5, probs=minidl.tensor([0.2, 0.3, 0.5])).sample((4,))
    assert tuple(counts.shape) == (4, 3) and (counts.sum(-1).numpy() == 5).all()
    assert abs(float(D.Weibull(minidl.tensor([1.5]), minidl.tensor([2.0])).sample((20000,)).mean()) - 1.3293) < 0.03


def test_constraints_utils_and_the_kl_module_as_torch():
    """torch.distributions.constraints' checks, .utils' helpers and the .kl module's names, for programs that write
    their own Distribution subclasses."""
    import torch.distributions.constraints as TC
    import torch.distributions.utils as TU

    from minidl.distributions import constraints as C, utils as U

    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    for name in ("real", "positive", "nonnegative", "unit_interval", "boolean", "nonnegative_integer",
                 "positive_integer"):
        np.testing.assert_array_equal(getattr(C, name).check(minidl.tensor(x)).numpy(),
                                      getattr(TC, name).check(torch.tensor(x)).numpy())
    for make in ("interval", "half_open_interval", "integer_interval"):
        np.testing.assert_array_equal(getattr(C, make)(0, 1).check(minidl.tensor(x)).numpy(),
                                      getattr(TC, make)(0, 1).check(torch.tensor(x)).numpy())
    for make in ("greater_than", "greater_than_eq", "less_than"):
        np.testing.assert_array_equal(getattr(C, make)(0.5).check(minidl.tensor(x)).numpy(),
                                      getattr(TC, make)(0.5).check(torch.tensor(x)).numpy())
    s = np.array([[0.2, 0.8], [0.5, 0.6]])
    np.testing.assert_array_equal(C.simplex.check(minidl.tensor(s)).numpy(), TC.simplex.check(torch.tensor(s)).numpy())
    spd = np.array([[[2.0, 0.5], [0.5, 1.0]], [[1.0, 2.0], [2.0, 1.0]]])
    np.testing.assert_array_equal(C.positive_definite.check(minidl.tensor(spd)).numpy(),
                                  TC.positive_definite.check(torch.tensor(spd)).numpy())
    assert C.is_dependent(C.dependent) and not C.is_dependent(C.real)
    p = np.array([0.2, 0.7])
    for binary in (True, False):
        np.testing.assert_allclose(U.probs_to_logits(minidl.tensor(p), binary).numpy(),
                                   TU.probs_to_logits(torch.tensor(p), binary).numpy(), rtol=1e-12)
        np.testing.assert_allclose(U.logits_to_probs(minidl.tensor(p), binary).numpy(),
                                   TU.logits_to_probs(torch.tensor(p), binary).numpy(), rtol=1e-12)
    a, b = U.broadcast_all(minidl.tensor([1.0, 2.0]), 3.0)
    assert a.shape == b.shape == (2,) and b.numpy().tolist() == [3.0, 3.0]
    from torch.distributions import kl as tkl

    assert hasattr(tkl, "kl_divergence") and hasattr(minidl.distributions, "register_kl")


MORE_CASES = [
    ("HalfCauchy", ([0.5, 2.0],), [0.3, 4.0], ("mean", "variance", "entropy")),
    ("InverseGamma", ([0.5, 2.5, 3.5], [1.0, 2.0, 0.7]), [0.3, 4.0, 1.2], ("mean", "variance", "entropy", "mode")),
    ("FisherSnedecor", ([1.5, 5.0, 7.0], [5.0, 4.5, 9.0]), [0.3, 4.0, 1.2], ("mean", "variance", "mode")),
    ("Kumaraswamy", ([0.5, 2.0, 3.0], [1.5, 0.7, 4.0]), [0.3, 0.9, 0.5], ("mean", "variance", "entropy")),
    ("ContinuousBernoulli", ([0.2, 0.4995, 0.5004, 0.9],), [0.3, 0.9, 0.5, 0.1], ("mean", "variance", "entropy")),
    ("VonMises", ([0.5, -1.0, 2.0], [0.3, 2.0, 40.0]), [0.3, 0.9, -2.5], ("mean", "variance")),
]


@pytest.mark.parametrize("name,params,value,props", MORE_CASES, ids=[c[0] for c in MORE_CASES])
def test_session13_distributions_match_torch_with_gradients(name, params, value, props):
    """log_prob and the listed properties as torch's, and the gradients of a weighted sum of them in the parameters.
    ContinuousBernoulli includes probabilities inside its Taylor band around 1/2. VonMises' normaliser is exact here
    and a polynomial approximation in torch (good to ~1e-7; its circular variance at kappa = 40 to ~3e-5): compared
    at those tolerances."""
    results = []
    for lib in (minidl, torch):
        ps = [lib.tensor(np.array(p, dtype=np.float64), requires_grad=True) for p in params]
        d = getattr(lib.distributions, name)(*ps)
        out = [d.log_prob(lib.tensor(np.array(value)))] + [d.entropy() if p == "entropy" else getattr(d, p)
                                                            for p in props]
        sum((o * (k + 1)).sum() for k, o in enumerate(out) if o.requires_grad).backward()
        results.append([o.detach().numpy() for o in out] + [p.grad.numpy() for p in ps])
    rtol = {"VonMises": 1e-4}.get(name, 1e-9)
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-12)
    cdf_pairs = [(minidl.distributions.HalfCauchy(minidl.tensor([1.5])), torch.distributions.HalfCauchy(
        torch.tensor([1.5])), "cdf"),
        (minidl.distributions.ContinuousBernoulli(minidl.tensor([0.2, 0.7])),
         torch.distributions.ContinuousBernoulli(torch.tensor([0.2, 0.7])), "cdf"),
        (minidl.distributions.ContinuousBernoulli(minidl.tensor([0.2, 0.7])),
         torch.distributions.ContinuousBernoulli(torch.tensor([0.2, 0.7])), "icdf")]
    for ours, theirs, method in cdf_pairs:
        np.testing.assert_allclose(getattr(ours, method)(minidl.tensor([0.3, 0.6])).numpy(),
                                   getattr(theirs, method)(torch.tensor([0.3, 0.6])).numpy(), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_session13_distributions_sample_with_the_right_moments(device):
    """Samples of the six new families: their means (VonMises: the circular mean and 1 - circular variance)."""
    minidl.manual_seed(0)
    D = minidl.distributions

    def t(v):
        return minidl.tensor(v, device=device)

    for d in (D.Kumaraswamy(t([2.0]), t([3.0])), D.FisherSnedecor(t([5.0]), t([9.0])),
              D.InverseGamma(t([4.0]), t([2.0])), D.ContinuousBernoulli(t([0.2, 0.7]))):
        s = d.sample((40000,))
        assert tuple(s.shape) == (40000,) + d.batch_shape
        np.testing.assert_allclose(s.mean(0).cpu().numpy(), d.mean.cpu().numpy(), rtol=0.03)
    vm = D.VonMises(t([0.5, 2.0]), t([4.0, 0.5]))
    s = vm.sample((40000,)).cpu().numpy()
    assert s.min() >= -np.pi and s.max() < np.pi
    sin, cos = np.sin(s).mean(0), np.cos(s).mean(0)
    np.testing.assert_allclose(np.arctan2(sin, cos), [0.5, 2.0], atol=0.03)
    np.testing.assert_allclose(np.hypot(sin, cos), 1 - vm.variance.cpu().numpy(), atol=0.01)
    hc = D.HalfCauchy(t([1.0])).sample((40000,)).cpu().numpy()
    assert hc.min() >= 0 and abs(np.median(hc) - 1.0) < 0.03   # (its median is the scale)
    with pytest.raises(ValueError, match="either `probs` or `logits`"):
        D.ContinuousBernoulli()
