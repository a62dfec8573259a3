"""More of torch.distributions: the gamma family (Gamma, Chi2, Beta, Dirichlet, and StudentT, drawn through a
chi-squared), and distributions that are a transform of a uniform or normal draw (LogNormal, Gumbel, Cauchy,
HalfNormal, Weibull, Pareto).

log_prob, entropy, mean and variance are Tensor operations (differentiable in the parameters: lgamma's gradient is
digamma, digamma's is polygamma(1, .)). The transformed four have rsample (the draw is a differentiable function of
the parameters). The gamma family samples with minidl's generator (NumPy's / CuPy's gamma variates) and has no
rsample yet: torch differentiates its gamma draws implicitly (d sample / d concentration from the CDF), which minidl
does not; their rsample says so. Their log_prob and entropy, what a policy gradient (a Beta policy) needs, are here.
"""
from __future__ import annotations

import math

import numpy as np

from .. import random
from ..autograd.tensor import Tensor
from ..ops import creation

EULER_GAMMA = 0.5772156649015329


# (imported at the end of the package's __init__, once these exist)
from . import Distribution, Normal, _as_tensor, _broadcast_pair  # noqa: E402


def _gamma_draw(concentration: Tensor, shape) -> Tensor:
    """Gamma(concentration, 1) draws of `shape` (concentration broadcast to it), without a gradient."""
    c = concentration.detach().expand(shape).contiguous()._data
    return Tensor._make(random.standard_gamma_array(c, c.dtype, concentration.device))


class _NoRsample:
    has_rsample = False

    def rsample(self, sample_shape=()):
        raise NotImplementedError(
            f"{type(self).__name__}.rsample: a reparameterised gamma draw needs the implicit gradient of the gamma "
            "sampler (torch's _standard_gamma_grad), which minidl does not have yet; sample() draws without a "
            "gradient, and log_prob / entropy are differentiable (what REINFORCE and PPO use)")


class Gamma(_NoRsample, Distribution):
    """Gamma(concentration k, rate r): r^k x^(k-1) exp(-r x) / Gamma(k) on x > 0."""

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate, shape = _broadcast_pair(concentration, rate)
        super().__init__(shape)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        return _gamma_draw(self.concentration, shape) / self.rate.detach()

    def log_prob(self, value):
        value = _as_tensor(value, self.rate)
        k, r = self.concentration, self.rate
        return k * r.log() + (k - 1) * value.log() - r * value - k.lgamma()

    def entropy(self):
        k = self.concentration
        return k - self.rate.log() + k.lgamma() + (1 - k) * k.digamma()

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate ** 2


class Chi2(Gamma):
    """The chi-squared distribution with df degrees of freedom: Gamma(df / 2, 1 / 2)."""

    def __init__(self, df, validate_args=None):
        df = _as_tensor(df)
        super().__init__(0.5 * df, 0.5)

    @property
    def df(self):
        return self.concentration * 2


def _lbeta(a, b):
    return a.lgamma() + b.lgamma() - (a + b).lgamma()


class Beta(_NoRsample, Distribution):
    """Beta(concentration1 a, concentration0 b): x^(a-1) (1-x)^(b-1) / B(a, b) on (0, 1); drawn as X / (X + Y) of
    two gamma draws."""

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0, shape = _broadcast_pair(concentration1, concentration0)
        super().__init__(shape)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        x, y = _gamma_draw(self.concentration1, shape), _gamma_draw(self.concentration0, shape)
        return x / (x + y)

    def log_prob(self, value):
        value = _as_tensor(value, self.concentration1)
        a, b = self.concentration1, self.concentration0
        return (a - 1) * value.log() + (b - 1) * (1 - value).log() - _lbeta(a, b)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        return _lbeta(a, b) - (a - 1) * a.digamma() - (b - 1) * b.digamma() + (a + b - 2) * (a + b).digamma()

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total ** 2 * (total + 1))


class Dirichlet(_NoRsample, Distribution):
    """Dirichlet(concentration c), over the simplex of the last dimension (event_shape (K,)): normalised gamma
    draws."""

    def __init__(self, concentration, validate_args=None):
        self.concentration = _as_tensor(concentration)
        if self.concentration.ndim < 1:
            raise ValueError("Dirichlet: concentration must be at least one-dimensional (its last dim is the event)")
        super().__init__(self.concentration.shape[:-1], self.concentration.shape[-1:])

    def sample(self, sample_shape=()):
        g = _gamma_draw(self.concentration, self._extended(sample_shape))
        return g / g.sum(-1, keepdim=True)

    def log_prob(self, value):
        value = _as_tensor(value, self.concentration)
        c = self.concentration
        return ((c - 1) * value.log()).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1)

    def entropy(self):
        c = self.concentration
        k, total = c.shape[-1], c.sum(-1)
        return c.lgamma().sum(-1) - total.lgamma() + (total - k) * total.digamma() - ((c - 1) * c.digamma()).sum(-1)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def variance(self):
        total = self.concentration.sum(-1, keepdim=True)
        return self.concentration * (total - self.concentration) / (total ** 2 * (total + 1))


class LogNormal(Distribution):
    """exp of a Normal(loc, scale) draw."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.base_dist = Normal(loc, scale)
        self.loc, self.scale = self.base_dist.loc, self.base_dist.scale
        super().__init__(self.base_dist.batch_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape).exp()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        log_value = _as_tensor(value, self.loc).log()
        return self.base_dist.log_prob(log_value) - log_value

    def entropy(self):
        return self.base_dist.entropy() + self.loc

    @property
    def mean(self):
        return (self.loc + self.scale ** 2 / 2).exp()

    @property
    def variance(self):
        s2 = self.scale ** 2
        return (s2.exp() - 1) * (2 * self.loc + s2).exp()


def _uniform(dist, like, sample_shape):
    return creation.rand(dist._extended(sample_shape), dtype=like.dtype, device=like.device)


class Gumbel(Distribution):
    """The Gumbel (extreme value) distribution: loc - scale log(-log u) for a uniform u."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale, shape = _broadcast_pair(loc, scale)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        tiny = float(np.finfo(self.loc.dtype).tiny)
        u = _uniform(self, self.loc, sample_shape).clamp(min=tiny, max=1 - 1e-7)
        return self.loc - self.scale * (-u.log()).log()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        z = (_as_tensor(value, self.loc) - self.loc) / self.scale
        return -(z + (-z).exp()) - self.scale.log()

    def entropy(self):
        return self.scale.log() + (1 + EULER_GAMMA)

    @property
    def mean(self):
        return self.loc + self.scale * EULER_GAMMA

    @property
    def variance(self):
        return (math.pi ** 2 / 6) * self.scale ** 2


class Cauchy(Distribution):
    """The Cauchy distribution: loc + scale tan(pi (u - 1/2)); its mean is undefined (NaN), its variance infinite."""

    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale, shape = _broadcast_pair(loc, scale)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = _uniform(self, self.loc, sample_shape)
        return self.loc + self.scale * (math.pi * (u - 0.5)).tan()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        z = (_as_tensor(value, self.loc) - self.loc) / self.scale
        return -math.log(math.pi) - self.scale.log() - (z * z).log1p()

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()

    @property
    def mean(self):
        return creation.full(self.batch_shape, float("nan"), dtype=self.loc.dtype, device=self.loc.device)

    @property
    def variance(self):
        return creation.full(self.batch_shape, float("inf"), dtype=self.loc.dtype, device=self.loc.device)


class _Folded(Distribution):
    """|X| for X ~ base(0, scale), a distribution symmetric about 0: twice its density on x >= 0 (HalfNormal,
    HalfCauchy)."""

    has_rsample = True

    def __init__(self, scale, base):
        self.scale = _as_tensor(scale)
        self.base_dist = base(creation.zeros(self.scale.shape, dtype=self.scale.dtype, device=self.scale.device),
                              self.scale)
        super().__init__(self.scale.shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape).abs()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        value = _as_tensor(value, self.scale)
        from ..ops import where

        inside = self.base_dist.log_prob(value) + math.log(2)
        return where(value >= 0, inside, inside.new_full((), float("-inf")))


class HalfNormal(_Folded):
    """|X| for X ~ Normal(0, scale)."""

    def __init__(self, scale, validate_args=None):
        super().__init__(scale, Normal)

    def entropy(self):
        return 0.5 * math.log(math.pi / 2) + self.scale.log() + 0.5

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self):
        return self.scale ** 2 * (1 - 2 / math.pi)


class StudentT(Distribution):
    """Student's t with df degrees of freedom, location and scale; sampled as loc + scale * N(0, 1) / sqrt(chi2/df)."""

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        df = _as_tensor(df)
        loc, scale, _ = _broadcast_pair(_as_tensor(loc, df), _as_tensor(scale, df))
        shape = tuple(np.broadcast_shapes(df.shape, loc.shape))
        self.df, self.loc, self.scale = df.expand(shape), loc.expand(shape), scale.expand(shape)
        super().__init__(shape)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        z = creation.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        chi2 = Chi2(self.df.detach()).sample(sample_shape)
        return (self.loc + self.scale * z * (chi2 / self.df).rsqrt()).detach()

    def log_prob(self, value):
        y = (_as_tensor(value, self.loc) - self.loc) / self.scale
        df = self.df
        z = self.scale.log() + 0.5 * df.log() + 0.5 * math.log(math.pi) + (0.5 * df).lgamma() - \
            (0.5 * (df + 1)).lgamma()
        return -0.5 * (df + 1) * (y * y / df).log1p() - z

    def entropy(self):
        df = self.df
        lbeta = (0.5 * df).lgamma() + math.lgamma(0.5) - (0.5 * (df + 1)).lgamma()
        return self.scale.log() + 0.5 * (df + 1) * ((0.5 * (df + 1)).digamma() - (0.5 * df).digamma()) + \
            0.5 * df.log() + lbeta

    @property
    def mean(self):
        from ..ops import where

        return where(self.df > 1, self.loc, self.loc.new_full((), float("nan")))

    @property
    def variance(self):
        from ..ops import where

        var = self.scale ** 2 * self.df / (self.df - 2)
        var = where(self.df > 2, var, var.new_full((), float("inf")))
        return where(self.df > 1, var, var.new_full((), float("nan")))


class Weibull(Distribution):
    """Weibull(scale lambda, concentration k): (k / lambda) (x / lambda)^(k-1) exp(-(x / lambda)^k) on x >= 0;
    rsample = lambda (-log(1 - u))^(1/k)."""

    has_rsample = True

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration, shape = _broadcast_pair(scale, concentration)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = creation.rand(self._extended(sample_shape), dtype=self.scale.dtype, device=self.scale.device)
        return self.scale * (-(-u).log1p()).pow(1 / self.concentration)

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        z = _as_tensor(value, self.scale) / self.scale
        k = self.concentration
        return (k / self.scale).log() + (k - 1) * z.log() - z.pow(k)

    def entropy(self):
        k = self.concentration
        return EULER_GAMMA * (1 - 1 / k) + (self.scale / k).log() + 1

    @property
    def mean(self):
        return self.scale * (1 + 1 / self.concentration).lgamma().exp()

    @property
    def variance(self):
        k = self.concentration
        return self.scale ** 2 * ((1 + 2 / k).lgamma().exp() - (1 + 1 / k).lgamma().exp() ** 2)


class Pareto(Distribution):
    """Pareto(scale x_m, alpha): alpha x_m^alpha / x^(alpha+1) on x >= x_m; rsample = x_m exp(E) for
    E ~ Exponential(alpha)."""

    has_rsample = True

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha, shape = _broadcast_pair(scale, alpha)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = creation.rand(self._extended(sample_shape), dtype=self.scale.dtype, device=self.scale.device)
        return self.scale * (-(-u).log1p() / self.alpha).exp()

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        value = _as_tensor(value, self.scale)
        return self.alpha.log() + self.alpha * self.scale.log() - (self.alpha + 1) * value.log()

    def entropy(self):
        return (self.scale / self.alpha).log() + 1 / self.alpha + 1

    @property
    def mean(self):
        from ..ops import where

        a = self.alpha.clamp(min=1)
        return where(self.alpha > 1, a * self.scale / (a - 1), self.alpha.new_full((), float("inf")))

    @property
    def variance(self):
        from ..ops import where

        a = self.alpha.clamp(min=2)
        var = self.scale ** 2 * a / ((a - 1) ** 2 * (a - 2))
        return where(self.alpha > 2, var, self.alpha.new_full((), float("inf")))
