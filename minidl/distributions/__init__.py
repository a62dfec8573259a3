"""minidl.distributions: torch.distributions' common distributions, written with Tensor operations, so
log_prob, entropy and rsample are differentiable (a policy gradient, a VAE's reparameterised sample):

    Categorical(probs= | logits=)      sample, log_prob, entropy, probs, logits
    OneHotCategorical(probs= | logits=) sample (one-hot), log_prob, entropy
    Bernoulli(probs= | logits=)        sample, log_prob, entropy, mean, variance
    Normal(loc, scale)                 sample, rsample, log_prob, entropy, mean, stddev, variance, cdf
    Uniform(low, high)                 sample, rsample, log_prob, entropy, mean, variance
    Exponential(rate), Laplace(loc, scale)   sample, rsample, log_prob, entropy, mean, variance
    MultivariateNormal(loc, covariance_matrix= | scale_tril= | precision_matrix=)
                                       sample, rsample, log_prob, entropy, mean, variance (through the Cholesky factor)
    Independent(base, n)               the base's last n batch dims as one event (log_prob and entropy summed)
    Gamma, Chi2, Beta, Dirichlet       sample, log_prob, entropy, mean, variance (no rsample: continuous.py says why)
    LogNormal, Gumbel, Cauchy, HalfNormal   sample, rsample, log_prob, entropy, mean, variance
    Poisson(rate)                      sample, log_prob, mean, variance
    TransformedDistribution(base, [transforms])   sample, rsample, log_prob (transforms.py: Exp, Affine, Sigmoid,
                                       Tanh, Power, Compose)
    StudentT, Weibull, Pareto (continuous.py); MixtureSameFamily, RelaxedBernoulli, RelaxedOneHotCategorical
                                       (mixtures.py); Poisson, Geometric, Binomial, NegativeBinomial, Multinomial
                                       (counts.py); LowRankMultivariateNormal; kl_divergence for the pairs torch
                                       registers most (register_kl adds more)

Samples are drawn from minidl's seeded generator (minidl.manual_seed) and never carry a gradient, except
rsample's, which is loc + scale * eps (Normal) or low + (high - low) * u (Uniform).
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd.tensor import Tensor
from .. import _device
from ..ops import creation

__all__ = ["Distribution", "Categorical", "OneHotCategorical", "Bernoulli", "Normal", "Uniform", "Exponential",
           "Laplace", "MultivariateNormal", "Independent", "kl_divergence", "Gamma", "Chi2", "Beta", "Dirichlet",
           "LogNormal", "Gumbel", "Cauchy", "HalfNormal", "Poisson", "TransformedDistribution", "transforms",
           "MixtureSameFamily", "RelaxedBernoulli", "RelaxedOneHotCategorical", "StudentT", "Geometric", "Binomial", "NegativeBinomial", "Multinomial",
           "Weibull", "Pareto", "LowRankMultivariateNormal", "register_kl", "constraints", "utils",
           "OneHotCategoricalStraightThrough", "ExponentialFamily", "biject_to", "transform_to", "LogisticNormal",
           "GeneralizedPareto"]


def _as_tensor(value, like=None):
    if isinstance(value, Tensor):
        return value
    dtype = like.dtype if like is not None else None
    device = like.device if like is not None else None
    return creation.tensor(value, dtype=dtype if dtype is not None else np.float32, device=device)


def _broadcast_pair(a, b):
    """Two parameters (loc and scale, low and high) as tensors of one dtype and device (a number takes the other's),
    expanded to their broadcast shape: (a, b, shape)."""
    a = _as_tensor(a, b if isinstance(b, Tensor) else None)
    b = _as_tensor(b, a)
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    return a.expand(shape), b.expand(shape), shape


def _shape(sample_shape):
    if isinstance(sample_shape, int):
        return (sample_shape,)
    return tuple(sample_shape)


class Distribution:
    """The common interface: batch_shape (independent distributions), event_shape (one draw's shape)."""

    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=()):
        self.batch_shape, self.event_shape = tuple(batch_shape), tuple(event_shape)

    def sample(self, sample_shape=()):
        raise NotImplementedError

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sample (rsample)")

    def log_prob(self, value):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def _extended(self, sample_shape):
        return _shape(sample_shape) + self.batch_shape + self.event_shape

    def __repr__(self):
        return f"{type(self).__name__}(batch_shape={self.batch_shape}, event_shape={self.event_shape})"


class Categorical(Distribution):
    """Categories 0..K-1 with probabilities `probs` (normalised along the last dim) or `logits`."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: give exactly one of probs or logits")
        if probs is not None:
            probs = _as_tensor(probs)
            if probs.ndim < 1:
                raise ValueError("Categorical: probs must have at least one dimension")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=1e-38).log()
        else:
            logits = _as_tensor(logits)
            if logits.ndim < 1:
                raise ValueError("Categorical: logits must have at least one dimension")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs = self.logits.exp()
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1])

    def sample(self, sample_shape=()):
        n = int(np.prod(_shape(sample_shape))) if _shape(sample_shape) else 1
        flat = self.probs.detach().reshape(-1, self._num_events)
        draws = creation.multinomial(flat, n, replacement=True)          # (batch, n)
        out = draws.T.reshape(_shape(sample_shape) + self.batch_shape)
        return out

    def log_prob(self, value):
        value = _as_tensor(value).long()
        return self.logits.gather(-1, value.unsqueeze(-1)).squeeze(-1) if value.shape == self.batch_shape else \
            self.logits.expand(value.shape + (self._num_events,)).gather(-1, value.unsqueeze(-1)).squeeze(-1)

    def entropy(self):
        return -(self.probs * self.logits).sum(-1)

    @property
    def mean(self):
        raise NotImplementedError("Categorical has no mean (as torch: its support is a set of labels)")


class OneHotCategorical(Distribution):
    """Categorical, each draw a one-hot vector of length K."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs=probs, logits=logits)
        self.probs, self.logits = self._categorical.probs, self._categorical.logits
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,))

    def sample(self, sample_shape=()):
        idx = self._categorical.sample(sample_shape)
        eye = creation.eye(self.event_shape[0], dtype=self.probs.dtype, device=self.probs.device)
        return eye[idx]

    def log_prob(self, value):
        value = _as_tensor(value, self.probs)
        return (value * self.logits).sum(-1)

    def entropy(self):
        return self._categorical.entropy()

    @property
    def mean(self):
        return self.probs


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """OneHotCategorical whose rsample is a one-hot draw with the straight-through gradient (Bengio et al., 2013):
    sample + probs - probs.detach(), which equals the sample and passes the gradient to probs (world models such as
    DreamerV2's discrete latents)."""

    has_rsample = True

    def rsample(self, sample_shape=()):
        sample = self.sample(sample_shape)
        return sample + (self.probs - self.probs.detach())


class ExponentialFamily(Distribution):
    """The base of distributions p(x) = h(x) exp(<theta, t(x)> - F(theta)) (torch.distributions.ExponentialFamily):
    a subclass gives _natural_params (theta), _log_normalizer(*theta) (F) and _mean_carrier_measure (E[log h]);
    entropy is then -<theta, grad F(theta)> + F(theta) - E[log h], by autograd (torch's Bregman formula)."""

    @property
    def _natural_params(self):
        raise NotImplementedError(f"{type(self).__name__} does not define _natural_params")

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError(f"{type(self).__name__} does not define _log_normalizer")

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError(f"{type(self).__name__} does not define _mean_carrier_measure")

    def entropy(self):
        from ..autograd.function import enable_grad
        from ..autograd.function import grad as _grad

        result = -self._mean_carrier_measure
        params = [p.detach().requires_grad_() for p in self._natural_params]
        with enable_grad():
            lg_normal = self._log_normalizer(*params)
            gradients = _grad(lg_normal.sum(), params, create_graph=True)
        result = result + lg_normal
        for p, g in zip(params, gradients):
            result = result - (p * g).reshape(tuple(self.batch_shape) + (-1,)).sum(-1)
        return result


class Bernoulli(Distribution):
    """1 with probability `probs` (or sigmoid(`logits`)), else 0."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Bernoulli: give exactly one of probs or logits")
        if probs is not None:
            self.probs = _as_tensor(probs)
            self.logits = (self.probs.clamp(1e-7, 1 - 1e-7) / (1 - self.probs.clamp(1e-7, 1 - 1e-7))).log()
        else:
            self.logits = _as_tensor(logits)
            self.probs = self.logits.sigmoid()
        super().__init__(self.probs.shape)

    def sample(self, sample_shape=()):
        p = self.probs.detach().expand(self._extended(sample_shape))
        return creation.bernoulli(p)

    def log_prob(self, value):
        value = _as_tensor(value, self.logits)
        # -BCE with logits: value * logits - softplus(logits), computed stably
        x = self.logits
        return value * x - (x.clamp(min=0) + (-(x.abs())).exp().log1p())

    def entropy(self):
        x = self.logits
        softplus = x.clamp(min=0) + (-(x.abs())).exp().log1p()
        return softplus - self.probs * x

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        return self.probs * (1 - self.probs)


class Normal(Distribution):
    """The normal distribution N(loc, scale^2), loc and scale broadcast together."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale, shape = _broadcast_pair(loc, scale)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        eps = creation.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + self.scale * eps

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        value = _as_tensor(value, self.loc)
        var = self.scale * self.scale
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def cdf(self, value):
        """(1 + erf((value - loc) / (scale sqrt 2))) / 2, differentiable in value, loc and scale (as torch's)."""
        value = _as_tensor(value, self.loc)
        return 0.5 * (1 + ((value - self.loc) * (1 / math.sqrt(2)) / self.scale).erf())

    def icdf(self, value):
        value = _as_tensor(value, self.loc)
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    @property
    def mean(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale * self.scale


class Uniform(Distribution):
    """Uniform on [low, high)."""

    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high, shape = _broadcast_pair(low, high)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = creation.rand(self._extended(sample_shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + (self.high - self.low) * u

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        value = _as_tensor(value, self.low)
        inside = ((value >= self.low) & (value < self.high)).float()
        return inside.log() - (self.high - self.low).log()

    def entropy(self):
        return (self.high - self.low).log()

    @property
    def mean(self):
        return (self.low + self.high) / 2

    @property
    def variance(self):
        return (self.high - self.low) ** 2 / 12


class Exponential(Distribution):
    """rate * exp(-rate x) on x >= 0; rsample by inverting the CDF of a uniform draw."""

    has_rsample = True

    def __init__(self, rate, validate_args=None):
        self.rate = _as_tensor(rate)
        super().__init__(self.rate.shape)

    def rsample(self, sample_shape=()):
        u = creation.rand(self._extended(sample_shape), dtype=self.rate.dtype, device=self.rate.device)
        return -(1 - u).log() / self.rate

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        return self.rate.log() - self.rate * _as_tensor(value, self.rate)

    def entropy(self):
        return 1.0 - self.rate.log()

    @property
    def mean(self):
        return 1 / self.rate

    @property
    def variance(self):
        return self.rate ** -2


class Laplace(Distribution):
    """exp(-|x - loc| / scale) / (2 scale); rsample by inverting the CDF."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale, shape = _broadcast_pair(loc, scale)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = creation.rand(self._extended(sample_shape), dtype=self.loc.dtype, device=self.loc.device) * 2 - 1
        u = u.clamp(-1 + 1e-7, 1 - 1e-7)   # (torch's eps: log(0) nowhere)
        return self.loc - self.scale * u.sign() * (1 - u.abs()).log()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        return -(2 * self.scale).log() - (_as_tensor(value, self.loc) - self.loc).abs() / self.scale

    def entropy(self):
        return 1 + (2 * self.scale).log()

    @property
    def mean(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale ** 2


class MultivariateNormal(Distribution):
    """N(loc, Sigma) over the last dim, Sigma given as covariance_matrix, its Cholesky factor scale_tril, or its
    inverse precision_matrix; everything goes through scale_tril L (Sigma = L L^T): rsample = loc + L eps,
    log_prob by a triangular solve, log det Sigma = 2 sum log diag L."""

    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args=None):
        from .. import linalg

        given = [m is not None for m in (covariance_matrix, precision_matrix, scale_tril)]
        if sum(given) != 1:
            raise ValueError("MultivariateNormal: exactly one of covariance_matrix, precision_matrix or scale_tril "
                             "may be specified")
        self.loc = _as_tensor(loc)
        if scale_tril is not None:
            tril = scale_tril
        elif covariance_matrix is not None:
            tril = linalg.cholesky(covariance_matrix)
        else:
            tril = linalg.cholesky(linalg.inv(precision_matrix))
        if tril.ndim < 2 or tril.shape[-1] != self.loc.shape[-1]:
            raise ValueError(f"MultivariateNormal: the matrix must be (..., {self.loc.shape[-1]}, "
                             f"{self.loc.shape[-1]}) for loc of shape {tuple(self.loc.shape)}")
        batch = tuple(np.broadcast_shapes(self.loc.shape[:-1], tril.shape[:-2]))
        n = self.loc.shape[-1]
        self.loc = self.loc.expand(*batch, n)
        self.scale_tril = tril.expand(*batch, n, n)
        super().__init__(batch, (n,))

    def rsample(self, sample_shape=()):
        eps = creation.randn(self._extended(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + (self.scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def _half_log_det(self):
        return self.scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        from .. import linalg

        diff = _as_tensor(value, self.loc) - self.loc
        tril = self.scale_tril.expand(*diff.shape[:-1], *self.scale_tril.shape[-2:])
        z = linalg.solve_triangular(tril, diff.unsqueeze(-1), upper=False).squeeze(-1)
        n = self.loc.shape[-1]
        return -0.5 * (z * z).sum(-1) - self._half_log_det() - 0.5 * n * math.log(2 * math.pi)

    def entropy(self):
        n = self.loc.shape[-1]
        return 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()

    @property
    def mean(self):
        return self.loc

    @property
    def covariance_matrix(self):
        return self.scale_tril @ self.scale_tril.mT

    @property
    def variance(self):
        return (self.scale_tril ** 2).sum(-1)


class Independent(Distribution):
    """The base distribution with its last `reinterpreted_batch_ndims` batch dims counted as one event: log_prob and
    entropy summed over them (a diagonal Gaussian over a vector: Independent(Normal(mu, sigma), 1))."""

    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        n = reinterpreted_batch_ndims
        if n > len(base_distribution.batch_shape):
            raise ValueError(f"Independent: reinterpreted_batch_ndims ({n}) is more than the base's batch dims "
                             f"{base_distribution.batch_shape}")
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        batch = base_distribution.batch_shape
        super().__init__(batch[:len(batch) - n], batch[len(batch) - n:] + base_distribution.event_shape)
        self.has_rsample = base_distribution.has_rsample

    def _summed(self, t):
        return t.sum(tuple(range(-self.reinterpreted_batch_ndims, 0))) if self.reinterpreted_batch_ndims else t

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        return self._summed(self.base_dist.log_prob(value))

    def entropy(self):
        return self._summed(self.base_dist.entropy())

    @property
    def mean(self):
        return self.base_dist.mean

    @property
    def variance(self):
        return self.base_dist.variance


class LowRankMultivariateNormal(MultivariateNormal):
    """N(loc, W W^T + diag(D)) with a low-rank factor W = cov_factor (..., n, r) and diagonal D = cov_diag (..., n):
    a MultivariateNormal of that covariance (through its Cholesky factor: O(n^3), where torch works with the
    capacitance matrix; the same numbers)."""

    def __init__(self, loc, cov_factor, cov_diag, validate_args=None):
        self.cov_factor, self.cov_diag = _as_tensor(cov_factor), _as_tensor(cov_diag)
        cov = self.cov_factor @ self.cov_factor.mT + self.cov_diag.diag_embed()
        super().__init__(loc, covariance_matrix=cov)


_KL: dict = {}   # (type of p, type of q) -> kl(p, q)


def register_kl(type_p, type_q):
    """Decorator registering kl(p, q) for p of type_p and q of type_q (torch.distributions.register_kl); the most
    specific registered pair of the two classes' MROs is used."""
    def decorator(fn):
        _KL[(type_p, type_q)] = fn
        return fn
    return decorator


def kl_divergence(p, q):
    """KL(p || q) by the formula registered for their types (register_kl): Normal, Categorical, OneHotCategorical,
    Bernoulli, Beta, Gamma, Dirichlet, Exponential, Laplace, Poisson, Uniform, MultivariateNormal, and Independent
    pairs of any of them, as torch's."""
    for tp in type(p).__mro__:
        for tq in type(q).__mro__:
            fn = _KL.get((tp, tq))
            if fn is not None:
                return fn(p, q)
    raise NotImplementedError(f"kl_divergence: no formula for {type(p).__name__} and {type(q).__name__} in minidl "
                              "(register one with minidl.distributions.register_kl)")


def _softplus(x):
    from ..nn import functional as F

    return F.softplus(x)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale) ** 2
    t1 = ((p.loc - q.loc) / q.scale) ** 2
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    from ..ops import where

    t = p.probs * (p.logits - q.logits)
    return where(p.probs == 0, t.new_zeros(()), t).sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
    t2 = (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    return t1 + t2


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    ratio = q.rate / p.rate
    return -ratio.log() + ratio - 1


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    diff = (p.loc - q.loc).abs()
    return -scale_ratio.log() + diff / q.scale + scale_ratio * (-diff / p.scale).exp() - 1


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    from ..ops import where

    result = ((q.high - q.low) / (p.high - p.low)).log()
    outside = (q.low > p.low) | (q.high < p.high)
    return where(outside, result.new_full((), float("inf")), result)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    from .. import linalg

    n = p.loc.shape[-1]
    lq = q.scale_tril.expand(*p.scale_tril.shape) if q.scale_tril.ndim < p.scale_tril.ndim else q.scale_tril
    lp = p.scale_tril.expand(*lq.shape) if p.scale_tril.ndim < lq.ndim else p.scale_tril
    term2 = linalg.solve_triangular(lq, lp, upper=False).pow(2).sum((-2, -1))
    diff = (q.loc - p.loc).unsqueeze(-1)
    term3 = linalg.solve_triangular(lq.expand(*diff.shape[:-2], n, n), diff, upper=False).pow(2).sum((-2, -1))
    return q._half_log_det() - p._half_log_det() + 0.5 * (term2 + term3 - n)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError("kl_divergence: two Independent distributions over different event dims")
    return p._summed(kl_divergence(p.base_dist, q.base_dist))


from .continuous import (  # noqa: E402,F401  (the gamma family, StudentT, transformed uniform and normal draws)
    Beta, Cauchy, Chi2, Dirichlet, Gamma, Gumbel, HalfNormal, LogNormal, Pareto, StudentT, Weibull,
)
from .counts import Binomial, Geometric, Multinomial, NegativeBinomial, Poisson  # noqa: E402,F401
from .mixtures import MixtureSameFamily, RelaxedBernoulli, RelaxedOneHotCategorical  # noqa: E402,F401
from .more import (  # noqa: E402,F401  (HalfCauchy, InverseGamma, FisherSnedecor, Kumaraswamy, ContinuousBernoulli, VonMises)
    ContinuousBernoulli, FisherSnedecor, GeneralizedPareto, HalfCauchy, InverseGamma, Kumaraswamy, VonMises,
)
from . import kl_more  # noqa: E402,F401  (KL formulas of the gamma family and Poisson, registered there)
from . import constraints, transforms, utils  # noqa: E402,F401
from .bijections import (  # noqa: E402,F401  (more transforms; biject_to / transform_to: constraint -> transform)
    CatTransform, CumulativeDistributionTransform, IndependentTransform, LowerCholeskyTransform,
    PositiveDefiniteTransform, ReshapeTransform, SoftmaxTransform, SoftplusTransform, StackTransform,
    StickBreakingTransform, biject_to, identity_transform, transform_to,
)
from .bijections import LogisticNormal  # noqa: E402,F401
from . import bijections as constraint_registry  # noqa: E402,F401  (torch.distributions.constraint_registry)
from .transforms import (  # noqa: E402,F401  (TransformedDistribution: a squashed Gaussian policy, ...)
    AbsTransform, AffineTransform, ComposeTransform, ExpTransform, PowerTransform, SigmoidTransform, TanhTransform,
    Transform, TransformedDistribution,
)
