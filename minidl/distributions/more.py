"""The rest of torch.distributions' continuous families that real programs meet: HalfCauchy, InverseGamma,
FisherSnedecor, Kumaraswamy, ContinuousBernoulli (the VAE likelihood for data in [0, 1]) and VonMises (angles).

As in continuous.py, log_prob, entropy, mean and variance are Tensor operations, differentiable in the parameters.
VonMises' normaliser is log I0(kappa) = log i0e(kappa) + kappa (minidl.special.i0e: to double precision, where torch
uses a polynomial approximation good to ~1e-7, so the two agree to that). Draws: HalfCauchy, Kumaraswamy and
ContinuousBernoulli by transforming a uniform (rsample); InverseGamma and FisherSnedecor through gamma draws (no
rsample, as the gamma family in continuous.py); VonMises by Best and Fisher's rejection sampler (no rsample, as torch).
"""
from __future__ import annotations

import math

from .. import _dtypes
from ..ops import creation
from ..ops import where
from . import Distribution, _as_tensor, _broadcast_pair
from .continuous import EULER_GAMMA, Cauchy, Gamma, _Folded, _gamma_draw, _NoRsample, _uniform


def _full_like(t, value):
    return t.new_full((), value)


class HalfCauchy(_Folded):
    """|X| for X ~ Cauchy(0, scale)."""

    def __init__(self, scale, validate_args=None):
        super().__init__(scale, Cauchy)

    def cdf(self, value):
        """2 F_cauchy(x) - 1 = (2 / pi) atan(x / scale)."""
        return (_as_tensor(value, self.scale) / self.scale).atan() * (2 / math.pi)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)

    @property
    def mean(self):
        return creation.full(self.batch_shape, float("inf"), dtype=self.scale.dtype, device=self.scale.device)

    @property
    def mode(self):
        return self.scale.new_zeros(self.batch_shape)

    @property
    def variance(self):
        return creation.full(self.batch_shape, float("inf"), dtype=self.scale.dtype, device=self.scale.device)


class InverseGamma(_NoRsample, Distribution):
    """1 / X for X ~ Gamma(concentration, rate): rate^k / Gamma(k) y^(-k-1) exp(-rate / y) on y > 0."""

    def __init__(self, concentration, rate, validate_args=None):
        self.base_dist = Gamma(concentration, rate)
        super().__init__(self.base_dist.batch_shape)

    concentration = property(lambda self: self.base_dist.concentration)
    rate = property(lambda self: self.base_dist.rate)

    def sample(self, sample_shape=()):
        return 1 / self.base_dist.sample(sample_shape)

    def log_prob(self, value):
        value = _as_tensor(value, self.rate)
        return self.base_dist.log_prob(1 / value) - 2 * value.log()

    def entropy(self):
        k = self.concentration
        return k + self.rate.log() + k.lgamma() - (1 + k) * k.digamma()

    @property
    def mean(self):
        k = self.concentration
        return where(k > 1, self.rate / (k - 1), _full_like(k, float("inf")))

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        k = self.concentration
        return where(k > 2, self.rate ** 2 / ((k - 1) ** 2 * (k - 2)), _full_like(k, float("inf")))


class FisherSnedecor(_NoRsample, Distribution):
    """The F distribution with df1 and df2 degrees of freedom: (Chi2(df1) / df1) / (Chi2(df2) / df2)."""

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2, shape = _broadcast_pair(df1, df2)
        super().__init__(shape)

    def sample(self, sample_shape=()):
        shape = self._extended(sample_shape)
        x1 = _gamma_draw(0.5 * self.df1, shape) / self.df1.detach()
        x2 = _gamma_draw(0.5 * self.df2, shape) / self.df2.detach()
        return x1 / x2

    def log_prob(self, value):
        value = _as_tensor(value, self.df1)
        half1, half2 = 0.5 * self.df1, 0.5 * self.df2
        ratio = self.df1 / self.df2
        normaliser = (half1 + half2).lgamma() - half1.lgamma() - half2.lgamma()
        return normaliser + half1 * ratio.log() + (half1 - 1) * value.log() - (half1 + half2) * (ratio * value).log1p()

    @property
    def mean(self):
        d2 = self.df2
        return where(d2 > 2, d2 / (d2 - 2).clamp(min=1e-30), _full_like(d2, float("nan")))

    @property
    def mode(self):
        d1, d2 = self.df1, self.df2
        return where(d1 > 2, (d1 - 2) / d1 * d2 / (d2 + 2), _full_like(d1, float("nan")))

    @property
    def variance(self):
        d1, d2 = self.df1, self.df2
        var = 2 * d2 ** 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ** 2 * (d2 - 4))
        return where(d2 > 4, var, _full_like(d2, float("nan")))


class Kumaraswamy(Distribution):
    """Kumaraswamy(a = concentration1, b = concentration0) on (0, 1): a b x^(a-1) (1 - x^a)^(b-1); rsample
    (1 - (1 - u)^(1/b))^(1/a) for a uniform u."""

    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0, shape = _broadcast_pair(concentration1, concentration0)
        super().__init__(shape)

    def rsample(self, sample_shape=()):
        u = _uniform(self, self.concentration1, sample_shape)
        return (-((-u).log1p() / self.concentration0).expm1()).pow(1 / self.concentration1)

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        x = _as_tensor(value, self.concentration1)
        a, b = self.concentration1, self.concentration0
        return a.log() + b.log() + (a - 1) * x.log() + (b - 1) * (-x.pow(a)).log1p()

    def _moment(self, n):
        a, b = self.concentration1, self.concentration0
        return (b.log() + (1 + n / a).lgamma() + b.lgamma() - (1 + n / a + b).lgamma()).exp()

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        harmonic = (b + 1).digamma() + EULER_GAMMA
        return (1 - b.reciprocal()) + (1 - a.reciprocal()) * harmonic - a.log() - b.log()

    @property
    def mean(self):
        return self._moment(1)

    @property
    def mode(self):
        a, b = self.concentration1, self.concentration0
        mode = ((a - 1) / (a * b - 1)).pow(1 / a)
        return where((a < 1) | (b < 1), _full_like(a, float("nan")), mode)

    @property
    def variance(self):
        return self._moment(2) - self._moment(1) ** 2


class ContinuousBernoulli(Distribution):
    """The continuous Bernoulli on [0, 1] (Loaiza-Ganem & Cunningham, 2019): C(p) p^x (1 - p)^(1 - x), the proper
    likelihood of a VAE's pixels in [0, 1]. Near p = 1/2 (inside `lims`) the normaliser, mean and variance use
    their Taylor expansions, as torch's."""

    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("ContinuousBernoulli: either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            probs = _as_tensor(probs)
            eps = float(_dtypes.finfo(probs.dtype).eps)
            self.probs = probs.clamp(min=eps, max=1 - eps)
            self.logits = self.probs.log() - (-self.probs).log1p()
        else:
            self.logits = _as_tensor(logits)
            eps = float(_dtypes.finfo(self.logits.dtype).eps)
            self.probs = self.logits.sigmoid().clamp(min=eps, max=1 - eps)
        self._lims = lims
        super().__init__(self.probs.shape)

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return where(self._outside_unstable_region(), self.probs, _full_like(self.probs, self._lims[0]))

    def _log_normalizer_of_probs(self):
        cut = self._cut_probs()
        below = where(cut <= 0.5, cut, cut.new_zeros(()))
        above = where(cut >= 0.5, cut, cut.new_ones(()))
        log_norm = ((-cut).log1p() - cut.log()).abs().log() - where(cut <= 0.5, (-2.0 * below).log1p(),
                                                                      (2.0 * above - 1.0).log())
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return where(self._outside_unstable_region(), log_norm, taylor)

    def log_prob(self, value):
        value = _as_tensor(value, self.probs)
        log_probs0, log_probs1 = (-self.probs).log1p(), self.probs.log()
        return value * log_probs1 + (1 - value) * log_probs0 + self._log_normalizer_of_probs()

    def icdf(self, value):
        cut = self._cut_probs()
        inverse = ((-cut + value * (2.0 * cut - 1.0)).log1p() - (-cut).log1p()) / (cut.log() - (-cut).log1p())
        return where(self._outside_unstable_region(), inverse, value)

    def cdf(self, value):
        value = _as_tensor(value, self.probs)
        cut = self._cut_probs()
        cdfs = (cut.pow(value) * (1.0 - cut).pow(1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        unbounded = where(self._outside_unstable_region(), cdfs, value)
        return where(value <= 0, value.new_zeros(()), where(value >= 1, value.new_ones(()), unbounded))

    def rsample(self, sample_shape=()):
        return self.icdf(_uniform(self, self.probs, sample_shape))

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def entropy(self):
        log_probs0, log_probs1 = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._log_normalizer_of_probs() - log_probs0

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / ((-cut).log1p() - cut.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x ** 2) * x
        return where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self):
        cut = self._cut_probs()
        variances = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / ((-cut).log1p() - cut.log()) ** 2
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return where(self._outside_unstable_region(), variances, taylor)


def _log_i0(kappa):
    from ..ops.mathops import i0e

    return i0e(kappa).log() + kappa.abs()


class VonMises(Distribution):
    """The von Mises distribution of an angle: exp(kappa cos(x - loc)) / (2 pi I0(kappa)) on [-pi, pi)."""

    has_rsample = False

    def __init__(self, loc, concentration, validate_args=None):
        self.loc, self.concentration, shape = _broadcast_pair(loc, concentration)
        super().__init__(shape)

    def log_prob(self, value):
        value = _as_tensor(value, self.loc)
        return self.concentration * (value - self.loc).cos() - math.log(2 * math.pi) - _log_i0(self.concentration)

    def sample(self, sample_shape=()):
        """Best & Fisher (1979)'s rejection sampler, in float64: a wrapped-Cauchy proposal accepted against the
        density; every draw repeats until accepted (a few rounds for any concentration)."""
        shape = self._extended(sample_shape)
        loc = self.loc.detach().double().expand(*shape)
        kappa = self.concentration.detach().double().expand(*shape)
        tau = 1 + (1 + 4 * kappa ** 2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        proposal_r = where(kappa < 1e-5, 1 / kappa.clamp(min=1e-300), (1 + rho ** 2) / (2 * rho))
        x = loc.new_zeros(shape)
        done = x.new_zeros(shape).bool()
        while not bool(done.all()):
            u = creation.rand(*((3,) + tuple(shape)), dtype=loc.dtype, device=loc.device)
            u1, u2, u3 = u[0], u[1], u[2]
            z = (math.pi * u1).cos()
            f = (1 + proposal_r * z) / (proposal_r + z)
            c = kappa * (proposal_r - f)
            accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
            new = accept & ~done
            x = where(new, (u3 - 0.5).sign() * f.acos(), x)
            done = done | accept
        angle = (x + math.pi + loc) % (2 * math.pi) - math.pi
        return angle.to(self.loc.dtype)

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        """The circular variance, 1 - I1(kappa) / I0(kappa)."""
        from ..ops.mathops import i0e, i1e

        return 1 - i1e(self.concentration) / i0e(self.concentration)


class GeneralizedPareto(Distribution):
    """GeneralizedPareto(loc, scale, concentration xi): the tails' distribution, P(X > x) = (1 + xi z)^(-1/xi) with
    z = (x - loc) / scale (exp(-z) at xi = 0, the exponential; xi = -1 is uniform). rsample by the inverse cdf."""

    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        like = next((v for v in (loc, scale, concentration) if hasattr(v, "shape")), None)
        loc, scale, conc = (_as_tensor(v, like) for v in (loc, scale, concentration))
        zero = loc * 0 + scale * 0 + conc * 0   # (the broadcast shape)
        self.loc, self.scale, self.concentration = loc + zero, scale + zero, conc + zero
        super().__init__(tuple(self.loc.shape))

    def _safe(self):
        """(xi is 0, xi with 1 where it is 0): the xi = 0 case is its own formula, selected by where."""
        at_zero = self.concentration.abs() <= 1e-8
        return at_zero, where(at_zero, _full_like(self.concentration, 1.0), self.concentration)

    def rsample(self, sample_shape=()):
        return self.icdf(_uniform(self, self.loc, sample_shape))

    def sample(self, sample_shape=()):
        return self.rsample(sample_shape).detach()

    def log_prob(self, value):
        z = (_as_tensor(value, self.loc) - self.loc) / self.scale
        at_zero, xi = self._safe()
        y = 1 / xi + 1
        nonzero = where(y == 0, y, y * (xi * z).log1p())
        return -self.scale.log() - where(at_zero, z, nonzero)

    def log_survival_function(self, value):
        z = (_as_tensor(value, self.loc) - self.loc) / self.scale
        at_zero, xi = self._safe()
        return where(at_zero, -z, -(xi * z).log1p() / xi)

    def log_cdf(self, value):
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value):
        return self.log_cdf(value).exp()

    def icdf(self, value):
        log_u = (-_as_tensor(value, self.loc)).log1p()
        at_zero, xi = self._safe()
        return where(at_zero, self.loc - self.scale * log_u, self.loc + self.scale / xi * (-xi * log_u).expm1())

    @property
    def mean(self):
        valid = self.concentration < 1
        xi = where(valid, self.concentration, _full_like(self.concentration, 0.5))
        return where(valid, self.loc + self.scale / (1 - xi), _full_like(self.loc, math.nan))

    @property
    def variance(self):
        valid = self.concentration < 0.5
        xi = where(valid, self.concentration, _full_like(self.concentration, 0.25))
        return where(valid, self.scale ** 2 / ((1 - xi) ** 2 * (1 - 2 * xi)), _full_like(self.loc, math.nan))

    @property
    def mode(self):
        return self.loc

    def entropy(self):
        return self.scale.log() + self.concentration + 1
