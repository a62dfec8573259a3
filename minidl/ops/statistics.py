"""Statistics composed from the other families (their gradients come from the tape through sort, gathers and
arithmetic): quantile / nanquantile / nanmedian, cov / corrcoef, trapezoid / cumulative_trapezoid.
torch's names, arguments and results."""
from __future__ import annotations

import numbers

import numpy as np

from ..autograd.tensor import Tensor
from ._dims import normalize_dim

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(op, t, q, dim, keepdim, interpolation, ignore_nan):
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"{op}: interpolation must be one of {_INTERPOLATIONS}, got {interpolation!r}")
    if not t.is_floating_point():
        raise RuntimeError(f"{op}() input tensor must be either float or double dtype, got {t.dtype}")
    scalar_q = isinstance(q, numbers.Real)
    qs = np.atleast_1d(np.asarray(q.detach().cpu().numpy() if isinstance(q, Tensor) else q, dtype=np.float64))
    if qs.ndim > 1:
        raise RuntimeError(f"{op}() q must be a scalar or 1D tensor")
    if ((qs < 0) | (qs > 1)).any():
        raise RuntimeError(f"{op}() q values must be in the range [0, 1]")
    x = t.reshape(-1) if dim is None else t
    d = 0 if dim is None else normalize_dim(dim, t.ndim, op)
    x = x.movedim(d, -1)
    s = x.sort(-1).values   # NaN sorts last
    n = s.shape[-1]
    if ignore_nan:
        valid = (~s.isnan()).sum(-1, keepdim=True)          # (..., 1) count of non-NaN values
    else:
        valid = s.new_full(s.shape[:-1] + (1,), float(n)).long()
    results = []
    for qv in qs:
        pos = (valid.double() - 1).clamp(min=0) * float(qv)   # the fractional rank among the valid values
        lo = pos.floor().long()
        hi = pos.ceil().long()
        frac = (pos - lo.double()).to(s.dtype)
        if interpolation == "lower":
            hi, frac = lo, frac * 0
        elif interpolation == "higher":
            lo, frac = hi, frac * 0
        elif interpolation == "nearest":
            near = pos.round().long()   # (half to even, as torch's)
            lo = hi = near
            frac = frac * 0
        elif interpolation == "midpoint":
            frac = (hi != lo).to(s.dtype) * 0.5
        a, b = s.gather(-1, lo), s.gather(-1, hi)
        value = a + (b - a) * frac
        if not ignore_nan:   # a NaN anywhere makes the result NaN (it sorted last: the largest value is NaN)
            value = value.where(~s[..., -1:].isnan(), s[..., -1:])
        else:               # all NaN: NaN
            value = value.where(valid > 0, value.new_full((), float("nan")))
        results.append(value.squeeze(-1))
    out = results[0] if scalar_q else _stack(results)
    if keepdim:   # (the q dim, when q is a tensor, stays first)
        if dim is None:
            out = out.reshape((() if scalar_q else (len(qs),)) + (1,) * t.ndim)
        else:
            out = out.unsqueeze(d if scalar_q else d + 1)
    return out


def _stack(tensors):
    from .joining import stack

    return stack(tensors)


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    """The q-th quantiles (q a number, or a 1-D tensor: one result per q, stacked first) along dim (all values when
    None); interpolation between the two nearest ranks: linear, lower, higher, midpoint or nearest. A NaN in a
    slice makes its result NaN (nanquantile leaves NaNs out)."""
    return _quantile("quantile", input, q, dim, keepdim, interpolation, ignore_nan=False)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, ignore_nan=True)


def nanmedian(input, dim=None, keepdim=False):
    """The lower median leaving NaNs out: a 0-d tensor, or (values, indices) along dim (as torch.median)."""
    from ..autograd import return_types

    if dim is None:
        flat = input.reshape(-1)
        s = flat.sort().values
        k = int((~flat.isnan()).sum().item())
        return s[max(k - 1, 0) // 2] if k else s[0] * float("nan")
    d = normalize_dim(dim, input.ndim, "nanmedian")
    s, idx = input.sort(d)
    k = (~s.isnan()).sum(d, keepdim=True)
    at = ((k - 1).clamp(min=0) // 2)
    values, indices = s.gather(d, at), idx.gather(d, at)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return return_types.namedtuple("nanmedian", ["values", "indices"])(values, indices)


def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in the rows of input (observations in its columns), as numpy.cov and
    torch.cov: weighted by frequency (fweights) and reliability (aweights) weights, normalised by sum(w) - correction
    (for aweights: sum(w) - correction * sum(w a) / sum(w))."""
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with {input.ndim} "
                           "dimensions")
    x = input.reshape(1, -1) if input.ndim < 2 else input
    if not x.is_floating_point():
        x = x.float()
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights.to(x.dtype)
    if aweights is not None:
        w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
    if w is None:
        mean = x.mean(1, keepdim=True)
        norm = float(n - correction)
        xc = x - mean
        c = (xc @ xc.mT) / norm
    else:
        w_sum = w.sum()
        mean = (x * w).sum(1, keepdim=True) / w_sum
        if correction == 0:
            norm = w_sum
        elif aweights is None:
            norm = w_sum - correction
        else:
            norm = w_sum - correction * (w * aweights.to(x.dtype)).sum() / w_sum
        xc = x - mean
        c = ((xc * w) @ xc.mT) / norm.clamp(min=0)
    return c.squeeze() if input.ndim < 2 else c


def corrcoef(input):
    """Pearson's correlation coefficients of the rows of input (cov normalised by the standard deviations, clipped
    to [-1, 1] as numpy and torch)."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    d = c.diagonal()
    stddev = d.sqrt()
    c = c / stddev.unsqueeze(1) / stddev.unsqueeze(0)
    return c.clamp(-1, 1)


def _trapezoids(op, y, x, dx, dim):
    """(the areas of the n - 1 trapezoids along dim, dim): the sample points x (a tensor) or the spacing dx (1)."""
    d = normalize_dim(dim, y.ndim, op)
    n = y.shape[d]
    left, right = y.narrow(d, 0, max(n - 1, 0)), y.narrow(d, 1, max(n - 1, 0))
    if x is None:
        return (left + right) * ((1.0 if dx is None else dx) / 2), d
    if x.ndim == 1:
        shape = [1] * y.ndim
        shape[d] = n - 1
        spacing = (x[1:] - x[:-1]).reshape(shape)
    else:
        xd = normalize_dim(dim, x.ndim, op)
        spacing = x.narrow(xd, 1, n - 1) - x.narrow(xd, 0, n - 1)
    return (left + right) * spacing / 2, d


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The integral of y along dim by the trapezoidal rule, over sample points x (a tensor) or spacing dx (1)."""
    areas, d = _trapezoids("trapezoid", y, x, dx, dim)
    return areas.sum(d)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running integrals of trapezoid (one fewer than the samples along dim)."""
    areas, d = _trapezoids("cumulative_trapezoid", y, x, dx, dim)
    return areas.cumsum(d)


def _spacing_list(op, spacing, dims, t):
    """torch.gradient's spacing, one entry per differentiated dim: a number (uniform steps) or a 1-D tensor of
    coordinates."""
    if spacing is None:
        return [1.0] * len(dims)
    if isinstance(spacing, (int, float)) or (isinstance(spacing, Tensor) and spacing.ndim == 0):
        return [float(spacing)] * len(dims)
    spacing = list(spacing)
    if len(spacing) != len(dims):
        raise RuntimeError(f"{op}: expected spacing to be unspecified, a scalar or a list of length {len(dims)} (the "
                           f"dims differentiated), got a list of length {len(spacing)}")
    for s, d in zip(spacing, dims):
        if isinstance(s, Tensor) and s.ndim == 1 and s.shape[0] != t.shape[d]:
            raise RuntimeError(f"{op}: the coordinates along dim {d} have {s.shape[0]} values for {t.shape[d]} "
                               "samples")
    return [float(s) if isinstance(s, (int, float)) or (isinstance(s, Tensor) and s.ndim == 0) else s
            for s in spacing]


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """The derivative of sampled values along each dim (torch.gradient, NumPy's np.gradient): central differences
    inside, one-sided ones of first or second order (edge_order) at the ends; spacing a number or the sample
    coordinates (1-D tensors, uneven steps allowed). A tuple with one tensor per dim, differentiable (composed of
    slices and arithmetic)."""
    op = "torch.gradient"
    if edge_order not in (1, 2):
        raise RuntimeError(f"{op} only supports edge_order=1 and edge_order=2, got {edge_order}")
    dims = list(range(input.ndim)) if dim is None else [normalize_dim(d, input.ndim, op)
                                                         for d in ((dim,) if isinstance(dim, int) else dim)]
    out = []
    for d, h in zip(dims, _spacing_list(op, spacing, dims, input)):
        n = input.shape[d]
        if n < edge_order + 1:
            raise RuntimeError(f"{op} expected each dimension size to be at least edge_order+1, got {n} along dim {d}")
        f = lambda a, k: input.narrow(d, a, k)   # noqa: E731
        if isinstance(h, float):
            inner = (f(2, n - 2) - f(0, n - 2)) / (2 * h)
            if edge_order == 1:
                first, last = (f(1, 1) - f(0, 1)) / h, (f(n - 1, 1) - f(n - 2, 1)) / h
            else:
                first = (-1.5 * f(0, 1) + 2 * f(1, 1) - 0.5 * f(2, 1)) / h
                last = (0.5 * f(n - 3, 1) - 2 * f(n - 2, 1) + 1.5 * f(n - 1, 1)) / h
        else:
            shape = [1] * input.ndim
            shape[d] = -1
            x = h.to(input.dtype).reshape(shape) if h.dtype != input.dtype else h.reshape(shape)
            step = x.narrow(d, 1, n - 1) - x.narrow(d, 0, n - 1)
            hd, hs = step.narrow(d, 0, n - 2), step.narrow(d, 1, n - 2)
            inner = (hd * hd * f(2, n - 2) - hs * hs * f(0, n - 2) + (hs * hs - hd * hd) * f(1, n - 2)) / (
                hs * hd * (hd + hs))
            h0, h1 = step.narrow(d, 0, 1), step.narrow(d, n - 2, 1)
            if edge_order == 1:
                first, last = (f(1, 1) - f(0, 1)) / h0, (f(n - 1, 1) - f(n - 2, 1)) / h1
            else:
                a0, a1 = h0, step.narrow(d, 1, 1)
                first = (-(2 * a0 + a1) / (a0 * (a0 + a1)) * f(0, 1) + (a0 + a1) / (a0 * a1) * f(1, 1)
                         - a0 / (a1 * (a0 + a1)) * f(2, 1))
                b1, b0 = h1, step.narrow(d, n - 3, 1)
                last = (b1 / (b0 * (b0 + b1)) * f(n - 3, 1) - (b0 + b1) / (b0 * b1) * f(n - 2, 1)
                        + (2 * b1 + b0) / (b1 * (b0 + b1)) * f(n - 1, 1))
        from .joining import cat

        out.append(cat([first, inner, last], d))
    return tuple(out)


def histogram(input, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
    """(hist, bin_edges) of a float tensor (torch.histogram): `bins` equal bins over `range` (default the data's
    min..max) or the given edges (a 1-D tensor); weighted counts with weight, a density with density=True. No
    gradient (as torch's). Computed by NumPy's histogram on the host."""
    if input.dtype.kind != "f":
        raise RuntimeError(f"histogram: input must be a floating-point tensor, got {input.dtype}")
    host = input.detach()._host_array().reshape(-1).astype(np.float64)
    edges = bins.detach()._host_array().astype(np.float64) if isinstance(bins, Tensor) else int(bins)
    w = None if weight is None else weight.detach()._host_array().reshape(-1).astype(np.float64)
    lo_hi = None if range is None else (float(range[0]), float(range[1]))
    if lo_hi is None and not isinstance(bins, Tensor) and host.size:
        lo_hi = (float(host.min()), float(host.max()))
    hist, bin_edges = np.histogram(host, bins=edges, range=lo_hi, weights=w, density=density)
    make = lambda a: Tensor(a.astype(input.dtype), device=input.device)  # noqa: E731
    return make(hist), make(bin_edges)


__all__ = ["quantile", "nanquantile", "nanmedian", "cov", "corrcoef", "trapezoid", "cumulative_trapezoid",
           "histogram", "gradient"]
