"""Reductions: sum, mean, var/std, max/min (with indices), amax/amin, argmax/argmin, logsumexp, norms,
any/all, prod and the nan-aware forms, and the running (cumulative) reductions. Half tensors accumulate
in float32 and round once, as PyTorch and cuDNN do. Functions first, then the function forms (Tensor's
methods, bound from the table in ops/__init__.py)."""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from .._dtypes import HALF_DTYPES, float32, int64, is_floating, is_half
from ..amp import autocast_mode as _amp
from ..autograd import return_types
from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._args import bfloat16_on_gpu
from ._dims import check_dim, dim_index, normalize_dim, normalize_dims, reduction_axes
from .elementwise import where


# ------------------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------------------


def _axes(dim, ndim, op="reduction"):
    """The axes to reduce (every one for dim=None); dims are checked in minidl.ops._dims."""
    return tuple(range(ndim)) if dim is None else reduction_axes(dim, ndim, op)


def _expand_back(g, shape, axes, keepdim):
    """Reinsert reduced axes (size 1) so g broadcasts against the input shape."""
    if not keepdim:
        g = g.reshape([1 if i in axes else s for i, s in enumerate(shape)])
    return g


def _accumulation_dtype(a):
    """Half tensors are summed in float32 (one rounding at the end), as PyTorch and cuDNN do: a
    float16 running sum stops growing once it is 2048 times its addends."""
    return float32 if a.dtype in HALF_DTYPES else None


class Sum(Function):
    saves_inputs = False

    def forward(self, a, dim=None, keepdim=False):
        self.shape, self.axes, self.keepdim = a.shape, _axes(dim, a.ndim), keepdim
        acc = _accumulation_dtype(a)
        if acc is not None:
            return a.sum(axis=self.axes, keepdims=keepdim, dtype=acc).astype(a.dtype)
        return a.sum(axis=self.axes, keepdims=keepdim)

    def backward(self, g):
        g = _expand_back(g, self.shape, self.axes, self.keepdim)
        return np.broadcast_to(g, self.shape).copy()   # (NumPy's function hands a CuPy array to CuPy: NEP 18)

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        kept = [1 if i in self.axes else s for i, s in enumerate(self.shape)]
        return g.reshape(kept).expand(*self.shape)


class Mean(Function):
    saves_inputs = False

    def forward(self, a, dim=None, keepdim=False):
        self.shape, self.axes, self.keepdim = a.shape, _axes(dim, a.ndim), keepdim
        self.count = int(np.prod([a.shape[i] for i in self.axes])) if a.ndim else 1
        if self.count == 0:  # the mean of nothing is NaN (torch), without NumPy's warning
            return get_array_module(a).full(a.sum(axis=self.axes, keepdims=keepdim).shape, np.nan, dtype=a.dtype)
        acc = _accumulation_dtype(a)
        if acc is not None:
            return a.mean(axis=self.axes, keepdims=keepdim, dtype=acc).astype(a.dtype)
        return a.mean(axis=self.axes, keepdims=keepdim)

    def backward(self, g):
        g = _expand_back(g, self.shape, self.axes, self.keepdim) / g.dtype.type(self.count)
        return get_array_module(g).broadcast_to(g, self.shape).copy()

    def backward_graph(self, g):
        kept = [1 if i in self.axes else s for i, s in enumerate(self.shape)]
        return (g / self.count).reshape(kept).expand(*self.shape)


class Var(Function):
    """Variance with Bessel's correction by default (correction=1), as torch.var."""

    saves_inputs = False

    def forward(self, a, dim=None, keepdim=False, correction=1):
        self.shape, self.axes, self.keepdim = a.shape, _axes(dim, a.ndim), keepdim
        count = int(np.prod([a.shape[i] for i in self.axes])) if a.ndim else 1
        self.denom = builtins.max(count - correction, 0)
        wide = a.astype(float32) if is_half(a.dtype) else a
        # count 0 or denom 0 give NaN/inf, as torch; NumPy's warnings about it are silenced.
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = wide.sum(axis=self.axes, keepdims=True) / wide.dtype.type(builtins.max(count, 1))
            centered = wide - mean
            self.centered = centered.astype(a.dtype)
            var = (centered**2).sum(axis=self.axes, keepdims=keepdim) / centered.dtype.type(self.denom)
        return var.astype(a.dtype, copy=False)

    def backward(self, g):
        g = _expand_back(g, self.shape, self.axes, self.keepdim)
        with np.errstate(invalid="ignore", divide="ignore"):
            return g * self.centered * (g.dtype.type(2.0) / g.dtype.type(self.denom))


class MaxMin(Function):
    """max/min over all elements (ties share the gradient evenly) or along one dim (values and
    indices; the gradient goes to the returned index, as PyTorch)."""

    saves_inputs = False

    def forward(self, a, dim=None, keepdim=False, is_max=True):
        xp = get_array_module(a)
        self.shape, self.dim, self.keepdim = a.shape, dim, keepdim
        if dim is None:
            out = a.max() if is_max else a.min()
            self.mask = a == out
            return out
        if a.ndim == 0:  # max over dim 0 of a 0-d tensor: itself, index 0, shape () (torch)
            self.dim = None
            self.mask = xp.ones((), dtype=bool)
            return a.copy(), xp.zeros((), dtype=np.int64)
        dim = reduction_axes(dim, a.ndim, "max" if is_max else "min")[0]
        self.dim = dim
        idx = a.argmax(axis=dim) if is_max else a.argmin(axis=dim)
        values = xp.take_along_axis(a, xp.expand_dims(idx, dim), axis=dim)
        self.idx = idx
        if not keepdim:
            values = values.squeeze(dim)
        return values, (idx if not keepdim else xp.expand_dims(idx, dim)).astype(np.int64)

    def backward(self, g, g_idx=None):
        xp = get_array_module(g)
        if self.dim is None:
            return g * self.mask / self.mask.sum().astype(g.dtype)
        out = xp.zeros(self.shape, dtype=g.dtype)
        g = g if self.keepdim else xp.expand_dims(g, self.dim)
        xp.put_along_axis(out, xp.expand_dims(self.idx, self.dim), g, axis=self.dim)
        return out


class AMaxMin(Function):
    """amax/amin over dims (an int, a tuple, or ()/None for all): values only; elements tied for the
    extreme share the gradient evenly, as torch.amax."""

    def forward(self, a, dim=(), keepdim=False, is_max=True):
        self.shape, self.keepdim = a.shape, keepdim
        self.axes = reduction_axes(dim, a.ndim, "amax" if is_max else "amin")
        out = a.max(axis=self.axes, keepdims=True) if is_max else a.min(axis=self.axes, keepdims=True)
        self.mask = a == out
        self.count = self.mask.sum(axis=self.axes, keepdims=True)
        return out if keepdim else out.reshape([s for i, s in enumerate(a.shape) if i not in self.axes])

    def backward(self, g):
        g = g.reshape([1 if i in self.axes else s for i, s in enumerate(self.shape)])
        return g * self.mask / self.count.astype(g.dtype)


class CumSum(Function):
    saves_inputs = False

    def forward(self, a, dim=0):
        self.dim = dim
        if bfloat16_on_gpu(a):
            return get_array_module(a).cumsum(a.astype(float32), axis=dim).astype(a.dtype)
        return get_array_module(a).cumsum(a, axis=dim, dtype=a.dtype if is_floating(a.dtype) else np.int64)

    def backward(self, g):
        xp = get_array_module(g)
        wide = g.astype(float32) if bfloat16_on_gpu(g) else g
        return xp.flip(xp.cumsum(xp.flip(wide, axis=self.dim), axis=self.dim), axis=self.dim).astype(g.dtype, copy=False)


class NuclearNorm(Function):
    """The sum of the singular values of the matrices in the last two dims (torch.norm(p='nuc')).
    Backward: g U V^T (the gradient of sum(s) for a = U diag(s) V^T), from the forward's SVD."""

    def forward(self, a, keepdim=False):
        xp = get_array_module(a)
        u, sv, vh = xp.linalg.svd(a, full_matrices=False)
        self.uv = u @ vh
        out = sv.sum(axis=-1).astype(a.dtype, copy=False)
        return out[..., None, None] if keepdim else out

    def backward(self, g):
        if g.ndim == self.uv.ndim:
            return g * self.uv
        return g[..., None, None] * self.uv


class Norm(Function):
    """(sum |a|^p)^(1/p) over dims (p = inf: max |a|; -inf: min |a|; 0: the count of nonzeros). Backward: g * sign(a) |a|^(p-1) / norm^(p-1)
    (p = 2: g a / norm), zero where the norm is zero; for inf the gradient is shared evenly among
    the elements that attain the maximum."""

    def forward(self, a, p=2.0, dim=None, keepdim=False):
        xp = get_array_module(a)
        self.a, self.p, self.axes, self.keepdim = a, p, _axes(dim, a.ndim), keepdim
        absa = xp.abs(a)
        if p == np.inf:
            out = absa.max(axis=self.axes, keepdims=True)
        elif p == -np.inf:
            out = absa.min(axis=self.axes, keepdims=True)
        elif p == 0:  # the number of nonzero elements (not a norm; torch's p=0)
            out = (a != 0).sum(axis=self.axes, keepdims=True).astype(a.dtype)
        elif p == 1:
            out = absa.sum(axis=self.axes, keepdims=True)
        elif p == 2:
            out = xp.sqrt((a * a).sum(axis=self.axes, keepdims=True))
        else:
            out = (absa**p).sum(axis=self.axes, keepdims=True) ** (1.0 / p)
        self.out = out.astype(a.dtype, copy=False)
        return self.out if keepdim else self.out.reshape([s for i, s in enumerate(a.shape) if i not in self.axes])

    def backward(self, g):
        xp = get_array_module(g)
        a, p, out = self.a, self.p, self.out
        g = _expand_back(g, a.shape, self.axes, self.keepdim)
        if p in (np.inf, -np.inf):
            hit = (xp.abs(a) == out).astype(g.dtype)
            return g * xp.sign(a) * hit / hit.sum(axis=self.axes, keepdims=True)
        if p == 0:
            return xp.zeros_like(a)
        if p == 1:
            return g * xp.sign(a)
        safe = xp.where(out == 0, 1, out)
        if p == 2:
            return xp.where(out == 0, 0, g * a / safe)
        return xp.where(out == 0, 0, g * xp.sign(a) * xp.abs(a) ** (p - 1) / safe ** (p - 1))


class Prod(Function):
    """The product over one axis (or all): its gradient is the product of the *other* elements, computed
    from exclusive cumulative products from both sides, so a zero element gives exact gradients (dividing
    out/x would give 0/0)."""

    def forward(self, a, axis=None, keepdims=False):
        xp = get_array_module(a)
        self.axis, self.keepdims, self.shape = axis, keepdims, a.shape
        work = a.astype(np.float32) if a.dtype in _dtypes.HALF_DTYPES else a
        self.a = work
        return xp.prod(work, axis=axis, keepdims=keepdims).astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        a = self.a
        if a.size == 0:
            return xp.zeros(self.shape, dtype=g.dtype)
        if self.axis is None:
            flat = a.reshape(-1)
            others = _exclusive_products(xp, flat).reshape(a.shape)
            return (g.astype(a.dtype) * others).astype(g.dtype, copy=False)
        moved = xp.moveaxis(a, self.axis, -1)
        others = xp.moveaxis(_exclusive_products(xp, moved), -1, self.axis)
        gk = g if self.keepdims else xp.expand_dims(g, self.axis)
        return (gk.astype(a.dtype) * others).astype(g.dtype, copy=False)


def _exclusive_products(xp, a):
    """For each element along the last axis, the product of all the others."""
    ones = xp.ones(a.shape[:-1] + (1,), dtype=a.dtype)
    left = xp.cumprod(xp.concatenate([ones, a[..., :-1]], axis=-1), axis=-1)
    right = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(a, -1)[..., :-1]], axis=-1), axis=-1), -1)
    return left * right


class CumProd(Function):
    """Cumulative product; the gradient of out[j] = prod(a[..j]) with respect to a[i] is the product of the
    other elements up to j, computed without dividing by a[i] (exact where an element is zero)."""

    def forward(self, a, axis=0):
        xp = get_array_module(a)
        self.axis = axis
        work = a.astype(np.float32) if a.dtype in _dtypes.HALF_DTYPES else a
        self.a = work
        return xp.cumprod(work, axis=axis).astype(a.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        a = xp.moveaxis(self.a, self.axis, -1)
        gm = xp.moveaxis(g.astype(a.dtype), self.axis, -1)
        n = a.shape[-1]
        grad = xp.zeros_like(a)
        for i in range(n):                          # d out[j] / d a[i] for j >= i: prod(a[:j+1] without a[i])
            without = a.copy()
            without[..., i] = 1
            partial = xp.cumprod(without, axis=-1)[..., i:]
            grad[..., i] = (gm[..., i:] * partial).sum(-1)
        return xp.moveaxis(grad, -1, self.axis).astype(g.dtype, copy=False)


class CumExtreme(Function):
    """cummax / cummin values; the gradient goes to the element each running extreme came from."""

    def forward(self, a, axis=0, how="max"):
        xp = get_array_module(a)
        self.axis, self.shape = axis, a.shape
        acc = (np.maximum if how == "max" else np.minimum) if xp is np else (xp.maximum if how == "max" else xp.minimum)
        work = a.astype(np.float32) if a.dtype in _dtypes.HALF_DTYPES else a
        moved = xp.moveaxis(work, axis, -1)
        if xp is np:
            values = acc.accumulate(moved, axis=-1)
        else:                                             # CuPy has no ufunc.accumulate: a loop over the axis
            values = moved.copy()
            for i in range(1, moved.shape[-1]):
                values[..., i] = acc(values[..., i - 1], moved[..., i])
        pos = xp.broadcast_to(xp.arange(moved.shape[-1]), moved.shape)
        hit = xp.where(moved == values, pos, 0)
        if xp is np:
            index = np.maximum.accumulate(hit, axis=-1)
        else:
            index = hit.copy()
            for i in range(1, hit.shape[-1]):
                index[..., i] = xp.maximum(index[..., i - 1], hit[..., i])
        self.index = xp.moveaxis(index, -1, axis).astype(np.int64)
        return xp.moveaxis(values, -1, axis).astype(a.dtype, copy=False), self.index

    def backward(self, g, g_index=None):
        xp = get_array_module(g)
        out = xp.zeros(self.shape, dtype=g.dtype)
        if xp is np:
            np.add.at(out, _along(xp, self.index, self.axis), g)
        else:
            import cupyx
            cupyx.scatter_add(out, _along(xp, self.index, self.axis), g)
        return out


def _along(xp, index, axis):
    grids = list(xp.meshgrid(*[xp.arange(s) for s in index.shape], indexing="ij"))
    grids[axis] = index
    return tuple(grids)


# ------------------------------------------------------------------------------------------------
# Reductions over dims
# ------------------------------------------------------------------------------------------------


def sum(self, dim=None, keepdim=False):
    if dim is not None:   # (the whole-tensor sum of a loss needs no check, and no call)
        check_dim(self, dim, "sum")
    if _amp.regions:
        (self,) = _amp.cast_inputs("sum", self)
    return Sum.apply(self, dim=dim, keepdim=keepdim)


def mean(self, dim=None, keepdim=False):
    check_dim(self, dim, "mean")
    if not _dtypes.is_floating(self.dtype):
        raise TypeError(f"mean: needs a floating-point tensor, got {self.dtype}")
    return Mean.apply(self, dim=dim, keepdim=keepdim)


def var(self, dim=None, keepdim=False, unbiased=True, correction=None):
    if isinstance(dim, bool):  # torch's var(unbiased) overload: a lone bool is `unbiased`
        dim, unbiased = None, dim
    check_dim(self, dim, "var")
    correction = (1 if unbiased else 0) if correction is None else correction
    return Var.apply(self, dim=dim, keepdim=keepdim, correction=correction)


def std(self, dim=None, keepdim=False, unbiased=True, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return self.var(dim, keepdim, unbiased, correction).sqrt()


def _max_or_min(self, dim, keepdim, op):
    if isinstance(dim, Tensor):        # max(other) / min(other): the elementwise maximum / minimum
        return self.maximum(dim) if op == "max" else self.minimum(dim)
    check_dim(self, dim, op)
    _check_nonempty_reduction(self, dim, op)
    out = MaxMin.apply(self, dim=dim, keepdim=keepdim, is_max=op == "max")
    return out if dim is None else getattr(return_types, op)(*out)


def max(self, dim=None, keepdim=False):
    """max() -> scalar tensor; max(dim) -> (values, indices), as PyTorch. max(other) = maximum."""
    return _max_or_min(self, dim, keepdim, "max")


def min(self, dim=None, keepdim=False):
    """min() -> scalar tensor; min(dim) -> (values, indices), as PyTorch. min(other) = minimum."""
    return _max_or_min(self, dim, keepdim, "min")


def _check_nonempty_reduction(self, dim, op):
    if self.numel() == 0 and (dim is None or self.shape[normalize_dim(dim, self.ndim, op)] == 0):
        raise IndexError(
            f"{op}: cannot reduce a tensor of shape {self.shape} with no elements "
            + ("(specify a dim of nonzero size)" if dim is None else f"over dim {dim} of size 0")
        )


def _arg_reduce(self, dim, keepdim, op):
    check_dim(self, dim, op)
    _check_nonempty_reduction(self, dim, op)
    xp = get_array_module(self._data)
    pick = self._data.argmax if op == "argmax" else self._data.argmin
    if dim is None:
        idx = xp.asarray(pick(), dtype=int64)
        # keepdim without a dim keeps every dim at size 1, as torch
        return Tensor._make(idx.reshape((1,) * self.ndim) if keepdim else idx)
    if self.ndim == 0:  # the 0-d tensor is its own only element: index 0, shape () (torch)
        return Tensor._make(xp.zeros((), dtype=int64))
    dim = normalize_dim(dim, self.ndim, op)
    idx = pick(axis=dim).astype(int64)
    return Tensor._make(xp.expand_dims(idx, dim) if keepdim else idx)


def argmax(self, dim=None, keepdim=False):
    return _arg_reduce(self, dim, keepdim, "argmax")


def argmin(self, dim=None, keepdim=False):
    return _arg_reduce(self, dim, keepdim, "argmin")


def amax(self, dim=(), keepdim=False):
    """Largest values over dim (an int, a tuple, or () for all); ties share the gradient evenly (torch.amax)."""
    return _amax_amin(self, dim, keepdim, "amax")


def amin(self, dim=(), keepdim=False):
    return _amax_amin(self, dim, keepdim, "amin")


def _amax_amin(t, dim, keepdim, op):
    if t.numel() == 0 and (dim in ((), None) or builtins.any(t.shape[d] == 0 for d in normalize_dims(dim, t.ndim, op))):
        raise IndexError(f"{op}: cannot reduce a tensor of shape {t.shape} with no elements over dims {dim}")
    if dim is not None:
        check_dim(t, dim, op)
    return AMaxMin.apply(t, dim=dim, keepdim=keepdim, is_max=op == "amax")


def logsumexp(self, dim, keepdim=False):
    """log(sum(exp(x))) over dim, computed as m + log(sum(exp(x - m))) with m the max (no overflow);
    its gradient is softmax(x) along dim (torch.logsumexp)."""
    m = self.amax(dim, keepdim=True).detach()
    finite = m.masked_fill(~m.isfinite(), 0.0)   # an all -inf slice: log(0) = -inf, as torch
    out = (self - finite).exp().sum(dim, keepdim=True).log() + finite
    return out if keepdim else out.squeeze(dim)


def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
    """The p-norm over all elements or over dim, as torch.norm: p = 'fro' (= 2), any number
    (inf: max |x|, -inf: min |x|, 0: the count of nonzeros, negative p as the formula says), or 'nuc'
    (the sum of singular values of a matrix: 2-D input, or dim = two dims). The gradient at a zero
    vector is zero (a subgradient), as PyTorch."""
    if not _dtypes.is_floating(self.dtype):
        raise RuntimeError(f"norm: needs a floating-point tensor, got {self.dtype}")
    x = self if dtype is None else self.type(dtype)
    if p == "fro":
        p = 2
    if p == "nuc":
        if dim is None and self.ndim != 2:
            raise RuntimeError(f"norm(p='nuc'): needs a 2-D input or dim= two dims, got shape {tuple(self.shape)}")
        dims = (0, 1) if dim is None else normalize_dims(dim, self.ndim, "norm")
        if len(dims) != 2:
            raise RuntimeError(f"norm(p='nuc'): dim must name two dims, got {dim!r}")
        rest = [i for i in range(self.ndim) if i not in dims]
        moved = x.permute(*rest, *dims)
        out = NuclearNorm.apply(moved, keepdim=False)
        if keepdim:
            for d in sorted(dims):
                out = out.unsqueeze(d)
        return out
    if isinstance(p, str) or isinstance(p, bool) or not isinstance(p, numbers.Real) or p != p:
        raise ValueError(f"norm: p must be 'fro', 'nuc' or a number (inf and -inf included), got {p!r}")
    check_dim(self, dim, "norm")
    return Norm.apply(x, p=builtins.float(p), dim=dim, keepdim=keepdim)


def any(self, dim=None, keepdim=False):
    """True where some element along dim (an int, a tuple, or None/() for all) is nonzero."""
    axes = tuple(range(self.ndim)) if dim is None else reduction_axes(dim, self.ndim, "any")
    return Tensor._make(get_array_module(self._data).asarray(self._data.astype(bool).any(axis=axes, keepdims=keepdim)))


def all(self, dim=None, keepdim=False):
    """True where every element along dim (an int, a tuple, or None/() for all) is nonzero."""
    axes = tuple(range(self.ndim)) if dim is None else reduction_axes(dim, self.ndim, "all")
    return Tensor._make(get_array_module(self._data).asarray(self._data.astype(bool).all(axis=axes, keepdims=keepdim)))


def prod(t, dim=None, keepdim=False, *, dtype=None):
    """torch.prod: the product of all elements, or along `dim` (one dim, as torch)."""
    if dtype is not None:
        t = t.type(dtype)
    elif t.dtype == np.bool_ or (t.dtype.kind in "iu" and t.dtype != np.int64):
        t = t.long()            # torch's integer products accumulate in int64
    if dim is None:
        return Prod.apply(t)
    if not isinstance(dim, numbers.Integral):
        raise TypeError(f"prod: dim must be an int (one dimension), got {dim!r}")
    axis = normalize_dim(dim, builtins.max(t.ndim, 1), "prod")
    if t.ndim == 0:
        return Prod.apply(t)
    return Prod.apply(t, axis=axis, keepdims=keepdim)


def nansum(t, dim=None, keepdim=False, *, dtype=None):
    safe = where(t.isnan(), t.new_zeros(()), t) if _dtypes.is_floating(t.dtype) else t
    if dtype is not None:
        safe = safe.type(dtype)
    return safe.sum() if dim is None else safe.sum(dim=dim, keepdim=keepdim)


def nanmean(t, dim=None, keepdim=False, *, dtype=None):
    if not _dtypes.is_floating(t.dtype):
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got {t.dtype}")
    keep = ~t.isnan()
    total = nansum(t, dim, keepdim)
    count = keep.sum(dim=dim, keepdim=keepdim) if dim is not None else keep.sum()
    return total / count.type(t.dtype)


def count_nonzero(t, dim=None):
    if dim is None:
        return (t != 0).sum()
    return (t != 0).sum(dim=dim)


def var_mean(t, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over dim (all when None); var_mean(t, True/False) is the old unbiased form, as torch."""
    dim, correction = _moments_args(dim, unbiased, correction)
    return t.var(dim, correction=correction, keepdim=keepdim), _mean(t, dim, keepdim)


def std_mean(t, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _moments_args(dim, unbiased, correction)
    return t.std(dim, correction=correction, keepdim=keepdim), _mean(t, dim, keepdim)


def _moments_args(dim, unbiased, correction):
    if isinstance(dim, bool):             # var_mean(t, unbiased)
        dim, unbiased = None, dim
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, correction


def _mean(t, dim, keepdim):
    if dim is None:
        m = t.mean()
        return m.reshape((1,) * t.ndim) if keepdim else m
    return t.mean(dim, keepdim=keepdim)


def aminmax(t, *, dim=None, keepdim=False):
    result = return_types.aminmax

    if dim is None:
        lo, hi = t.amin(), t.amax()
        if keepdim:
            lo, hi = lo.reshape((1,) * t.ndim), hi.reshape((1,) * t.ndim)
        return result(lo, hi)
    return result(t.amin(dim, keepdim=keepdim), t.amax(dim, keepdim=keepdim))


# ------------------------------------------------------------------------------------------------
# Running (cumulative) reductions
# ------------------------------------------------------------------------------------------------


def cumsum(self, dim, dtype=None):
    """Running sum along dim (in dtype if given); the gradient is the reversed running sum of the
    output gradient. A 0-d tensor is its own running sum."""
    x = self if dtype is None else self.type(dtype)
    d = dim_index(self, dim, "cumsum")
    if self.ndim == 0:
        return CumSum.apply(x.reshape(1), dim=0).reshape(())
    return CumSum.apply(x, dim=d)


def cumprod(t, dim, *, dtype=None):
    if dtype is not None:
        t = t.type(dtype)
    elif t.dtype == np.bool_ or t.dtype.kind in "iu":
        t = t.long()
    if t.ndim == 0:
        return t.clone()
    return CumProd.apply(t, axis=normalize_dim(dim, t.ndim, "cumprod"))


def _cumulative_extreme(t, dim, how):
    """(values, indices) of the running max or min along dim, as torch.cummax / torch.cummin."""
    result = getattr(return_types, f"cum{how}")
    if t.ndim == 0:
        return result(t.clone(), t.new_zeros((), dtype=np.int64))
    values, index = CumExtreme.apply(t, axis=normalize_dim(dim, t.ndim, f"cum{how}"), how=how)
    return result(values, index)


def cummax(t, dim):
    return _cumulative_extreme(t, dim, "max")


def cummin(t, dim):
    return _cumulative_extreme(t, dim, "min")


def logcumsumexp(t, dim):
    if t.ndim == 0:
        return t.clone()
    dim = normalize_dim(dim, t.ndim, "logcumsumexp")
    if t.dtype in _dtypes.HALF_DTYPES:       # in float32, rounded once (the running sums need the bits)
        return logcumsumexp(t.float(), dim).type(t.dtype)
    m = t.detach().amax(dim, keepdim=True)
    m = where(m.isfinite(), m, m.new_zeros(()))
    return (t - m).exp().cumsum(dim).log() + m
