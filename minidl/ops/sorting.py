"""Sorting and what is built on it: sort, argsort, topk, kthvalue, median, mode, msort, unique, bincount,
searchsorted, bucketize. `Sort` is the one Function (its gradient scatters back through the permutation);
the rest are compositions of it and of indexing."""
from __future__ import annotations


import numpy as np

from .. import _dtypes
from .._device import get_array_module
from .._dtypes import float32, int64
from ..autograd import return_types
from ..autograd.function import Function
from ..autograd.tensor import Tensor
from ._dims import dim_index
from ._args import bfloat16_on_gpu
class Sort(Function):
    """(values, indices) along dim, stable (equal values keep their order). The gradient of values
    goes back to the positions the indices name."""

    saves_inputs = False

    def forward(self, a, dim=-1, descending=False):
        xp = get_array_module(a)
        self.shape, self.dim = a.shape, dim
        if bfloat16_on_gpu(a):   # sort the exact float32 twins; the values are the original ones
            _, idx = self.forward(a.astype(float32), dim, descending)
            return xp.take_along_axis(a, self.idx, axis=dim), idx
        stable = {"kind": "stable"} if xp is np else {}  # CuPy's argsort is always stable (takes no kind)
        if descending:
            # Stable descending: sort the reversed array stably ascending, then reverse that order;
            # equal values end up in their original order.
            rev = xp.argsort(xp.flip(a, axis=dim), axis=dim, **stable)
            idx = xp.flip(a.shape[dim] - 1 - rev, axis=dim) if a.ndim else rev
        else:
            idx = xp.argsort(a, axis=dim, **stable)
        self.idx = idx
        return xp.take_along_axis(a, idx, axis=dim), idx.astype(np.int64)

    def backward(self, g, g_idx=None):
        xp = get_array_module(g)
        out = xp.zeros(self.shape, dtype=g.dtype)
        xp.put_along_axis(out, self.idx, g, axis=self.dim)
        return out


def sort(self, dim=-1, descending=False, stable=False):
    """(values, indices) sorted along dim; a named tuple, as torch.sort. Ties keep their order."""
    values, indices = Sort.apply(self, dim=dim_index(self, dim, "sort"), descending=descending)
    return return_types.sort(values, indices)


def argsort(self, dim=-1, descending=False, stable=False):
    return self.sort(dim, descending).indices


def topk(self, k, dim=-1, largest=True, sorted=True):
    """The k largest (or smallest) along dim, in order: (values, indices) as torch.topk."""
    d = dim_index(self, dim, "topk")
    if self.ndim == 0:  # one element (torch): k is 0 or 1, the result 0-d
        if k not in (0, 1):
            raise RuntimeError(f"topk: k ({k}) is out of range for a 0-d tensor")
        values, indices = self.reshape(1).topk(k, 0, largest, sorted)
        return return_types.topk(values.reshape(()) if k else values, indices.reshape(()) if k else indices)
    if not 0 <= k <= (self.shape[d] if self.ndim else 1):
        raise RuntimeError(f"topk: k ({k}) is out of range for dim {dim} of shape {tuple(self.shape)}")
    values, indices = self.sort(d, descending=largest)
    return return_types.topk(values.narrow(d, 0, k), indices.narrow(d, 0, k))


def kthvalue(self, k, dim=-1, keepdim=False):
    """The k-th smallest (1-based) along dim: (values, indices) as torch.kthvalue."""
    d = dim_index(self, dim, "kthvalue")
    if self.ndim == 0:  # one element (torch): k must be 1, the result 0-d
        values, indices = self.reshape(1).kthvalue(k, 0)
        return return_types.kthvalue(values.reshape(()), indices.reshape(()))
    if not 1 <= k <= (self.shape[d] if self.ndim else 1):
        raise RuntimeError(f"kthvalue: k ({k}) is out of range for dim {dim} of shape {tuple(self.shape)}")
    values, indices = self.sort(d)
    values, indices = values.narrow(d, k - 1, 1), indices.narrow(d, k - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return return_types.kthvalue(values, indices)


def median(self, dim=None, keepdim=False):
    """The lower median (torch.median): a 0-d tensor, or (values, indices) along dim."""
    if dim is None:
        flat = self.reshape(-1)
        return flat.sort().values[(flat.numel() - 1) // 2]
    d = dim_index(self, dim, "median")
    if self.ndim == 0:
        values, indices = self.kthvalue(1)
        return return_types.median(values, indices)
    values, indices = self.kthvalue((self.shape[d] - 1) // 2 + 1, d, keepdim)
    return return_types.median(values, indices)


def mode(self, dim=-1, keepdim=False):
    """The most frequent value along dim (ties: the smallest) and the index of its last occurrence,
    as torch.mode. Counted on the host (a loop over rows)."""
    d = dim_index(self, dim, "mode")
    rows = np.moveaxis(self._host_array(), d, -1) if self.ndim else self._host_array().reshape(1)
    flat = rows.reshape(-1, rows.shape[-1])
    idx = np.empty(flat.shape[0], dtype=int64)
    for r, row in enumerate(flat):
        values, counts = np.unique(row, return_counts=True)
        idx[r] = np.flatnonzero(row == values[np.argmax(counts)])[-1]
    idx = Tensor._make(idx.reshape(rows.shape[:-1])).to(self.device)
    if self.ndim == 0:
        return return_types.mode(self.clone(), idx.reshape(()))
    values = self.gather(d, idx.unsqueeze(d))
    indices = idx.unsqueeze(d)
    if not keepdim:
        values, indices = values.squeeze(d), idx
    return return_types.mode(values, indices)


def msort(t):
    return t.sort(dim=0).values


def unique(t, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values, sorted (no gradient), as torch.unique; dim=None only."""
    if dim is not None:
        raise NotImplementedError("unique: dim= is not supported in minidl yet; unique over all elements only")
    xp = get_array_module(t._data)
    data = t._data.reshape(-1)
    if xp is not np and data.dtype == _dtypes.bfloat16:   # CuPy cannot sort bfloat16: float32 holds it exactly
        data = data.astype(_dtypes.float32)
    values, inverse, counts = xp.unique(data, return_inverse=True, return_counts=True)
    out = [Tensor._make(values.astype(t.dtype, copy=False))]
    if return_inverse:
        out.append(Tensor._make(inverse.reshape(t.shape).astype(np.int64)))
    if return_counts:
        out.append(Tensor._make(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(t, return_inverse=False, return_counts=False, dim=None):
    """Each run of equal consecutive values once (torch.unique_consecutive; dim=None only): the values, and
    optionally each element's run (inverse) and the runs' lengths (counts)."""
    if dim is not None:
        raise NotImplementedError("unique_consecutive: dim= is not supported in minidl yet; over all elements only")
    xp = get_array_module(t._data)
    data = t._data.reshape(-1)
    if data.size == 0:
        starts = xp.zeros(0, dtype=bool)
    else:
        starts = xp.concatenate([xp.ones(1, dtype=bool), data[1:] != data[:-1]])
    out = [Tensor._make(data[starts])]
    if return_inverse:
        out.append(Tensor._make((xp.cumsum(starts) - 1).reshape(t.shape).astype(np.int64)))
    if return_counts:
        edges = xp.concatenate([xp.nonzero(starts)[0], xp.asarray([data.size])])
        out.append(Tensor._make(xp.diff(edges).astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(t, weights=None, minlength=0):
    if t.ndim != 1 or t.dtype.kind not in "iu":
        raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs, got {t.dtype} {tuple(t.shape)}")
    xp = get_array_module(t._data)
    if t.numel() and int(t._data.min()) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else weights._data
    out = xp.bincount(t._data, weights=w, minlength=minlength)
    if weights is None:
        out = out.astype(np.int64)
    else:       # torch's rule: float32 and float64 weights keep their dtype, any other gives float64
        out = out.astype(weights.dtype if weights.dtype in (np.float32, np.float64) else np.float64)
    return Tensor._make(out)


def histc(t, bins=100, min=0, max=0):
    """Counts of the elements in `bins` equal-width bins over [min, max] (min == max: the data's own min and max),
    elements outside left out, the last bin closed (torch.histc); a float tensor of t's dtype, no gradient."""
    if t.dtype.kind != "f":
        raise RuntimeError(f"histc: expected a floating-point tensor, got {t.dtype}")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins <= 0:
        raise RuntimeError(f"histc: bins must be > 0, got {bins!r}")
    xp = get_array_module(t._data)
    data = t._data.reshape(-1).astype(np.float64)
    lo, hi = float(min), float(max)
    if lo == hi and data.size:
        lo, hi = float(data.min()), float(data.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError(f"histc: max must be larger than min, got min={min}, max={max}")
    inside = data[(data >= lo) & (data <= hi)]
    index = xp.minimum(((inside - lo) * (bins / (hi - lo))).astype(np.int64), bins - 1)
    return Tensor._make(xp.bincount(index, minlength=bins).astype(t.dtype))


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None:
        right = side == "right"
    seq = sorted_sequence._data
    xp = get_array_module(seq)
    vals = values._data if isinstance(values, Tensor) else xp.asarray(values)
    how = "right" if right else "left"
    if seq.ndim == 1:
        out = xp.searchsorted(seq, vals, side=how)
    else:
        flat_seq = seq.reshape(-1, seq.shape[-1])
        flat_vals = vals.reshape(-1, vals.shape[-1])
        out = xp.stack([xp.searchsorted(s, v, side=how) for s, v in zip(flat_seq, flat_vals)]).reshape(vals.shape)
    return Tensor._make(out.astype(np.int32 if out_int32 else np.int64))


def bucketize(input, boundaries, *, out_int32=False, right=False):
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
