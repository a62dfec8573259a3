"""Indexing: t[key] and t[key] = v (GetItem / SetItem, basic and advanced keys), gather, index_select,
masked_fill/masked_select, nonzero, index_fill, take, and the scatters (Scatter)."""
from __future__ import annotations

import builtins

import numpy as np

from .. import _device
from .._device import get_array_module
from .._dtypes import float32, int64, is_half
from ..autograd.function import Function, unbroadcast
from ..autograd.tensor import Tensor
from ._args import bfloat16_on_gpu, operand
from ._dims import dim_index, normalize_dim
from .elementwise import where
from .shape import broadcast_tensors, movedim


# ------------------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------------------


def open_grid(xp, shape):
    """[arange(n0) shaped (n0, 1, ...), arange(n1) shaped (1, n1, ...), ...]: NumPy's
    indices(shape, sparse=True), which CuPy lacks; with one entry replaced by an index array it is the
    advanced index of gather / scatter along that dim."""
    shape = tuple(shape)
    return [xp.arange(n).reshape((1,) * i + (n,) + (1,) * (len(shape) - i - 1)) for i, n in enumerate(shape)]


class GetItem(Function):
    """a[key] for ints, slices, None, Ellipsis, integer arrays and boolean masks. The backward
    scatters with add.at so repeated indices accumulate, as they must."""

    saves_inputs = False
    may_return_view = True

    def forward(self, a, key=None):
        self.shape, self.key = a.shape, key
        out = a[key]
        if isinstance(out, np.generic):
            # NumPy gives a scalar copy for a full integer index (x[1] of a 1-D array); torch gives a 0-d
            # view, which `x[i] += 1` changes in place. A trailing Ellipsis makes NumPy return that view.
            out = a[(key if isinstance(key, tuple) else (key,)) + (Ellipsis,)]
        return out

    def backward(self, g):
        xp = get_array_module(g)
        if _is_basic_index(self.key):
            out = xp.zeros(self.shape, dtype=g.dtype)
            out[self.key] = g  # basic indexing selects each element at most once
            return out
        # Repeated indices add up: in float32 for half gradients (no half atomics needed on the GPU).
        acc = float32 if is_half(g.dtype) else g.dtype
        out = xp.zeros(self.shape, dtype=acc)
        xp.add.at(out, self.key, g.astype(acc, copy=False))
        return out.astype(g.dtype, copy=False)

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        return GetItemBackward.apply(g, shape=self.shape, key=self.key)


class GetItemBackward(Function):
    """GetItem's backward as an op of its own (for create_graph=True): g placed (summed) into zeros of the
    input's shape at the key; its own backward is GetItem again."""

    saves_inputs = False

    def forward(self, g, shape=None, key=None):
        fn = GetItem()
        fn.shape, fn.key = shape, key
        self.key = key
        return fn.backward(g)

    def backward(self, gg):
        return gg[self.key]

    def backward_graph(self, gg):
        return GetItem.apply(gg, key=self.key)


class SetItem(Function):
    """out = a with out[key] = v (x[key] = v inside a graph). The overwritten elements of a get no
    gradient; v gets g[key], summed back over broadcasting."""

    saves_inputs = False

    def forward(self, a, v, key=None):
        self.key, self.v_shape = key, v.shape
        out = a.copy()
        out[key] = v
        return out

    def backward(self, g):
        g = get_array_module(g).asarray(g)   # an array also when g arrives as a NumPy scalar (0-d)
        ga = g.copy()
        ga[self.key] = 0
        gv = unbroadcast(g[self.key], self.v_shape) if self.needs_input_grad[1] else None
        return ga, gv


def _is_basic_index(key) -> bool:
    items = key if isinstance(key, tuple) else (key,)
    return all(isinstance(k, (int, np.integer, slice)) or k is None or k is Ellipsis for k in items)


class Scatter(Function):
    """out = a, then for every position i of index: out[i with dim replaced by index[i]] = src[i]
    (or += with reduce_add). Gradients: a gets g except at overwritten places (scatter) or all of g
    (scatter_add); src gets g gathered at the same places."""

    saves_inputs = False

    def forward(self, a, src, index=None, dim=0, reduce_add=False):
        xp = get_array_module(a)
        grids = open_grid(xp, index.shape)
        grids[dim] = index
        self.key, self.src_shape, self.index_shape, self.reduce_add = tuple(grids), src.shape, index.shape, reduce_add
        part = src[tuple(slice(0, s) for s in index.shape)]
        out = a.copy()
        if reduce_add and bfloat16_on_gpu(a):   # CuPy's add.at has no bfloat16: add in float32, round once
            wide = out.astype(float32)
            xp.add.at(wide, self.key, part.astype(float32))
            out = wide.astype(a.dtype)
        elif reduce_add:
            xp.add.at(out, self.key, part)
        else:
            out[self.key] = part
        return out

    def backward(self, g):
        xp = get_array_module(g)
        ga = gsrc = None
        if self.needs_input_grad[0]:
            ga = g.copy()
            if not self.reduce_add:
                ga[self.key] = 0
        if self.needs_input_grad[1]:
            gsrc = xp.zeros(self.src_shape, dtype=g.dtype)
            gsrc[tuple(slice(0, s) for s in self.index_shape)] = g[self.key]
        return ga, gsrc


def _extreme_at(xp, out, key, part, reduce):
    """out[key] = max (or min) of out[key] and every part value landing there, by sorting instead of atomics
    (CuPy's maximum.at rounds float64 through float32): sort the values by (flat position, value), and each
    position's last (amax) or first (amin) value is its extreme."""
    flat = xp.ravel_multi_index(tuple(xp.broadcast_arrays(*key)), out.shape).ravel()
    values = part.ravel()   # (part has the index's shape)
    keys = np.float64 if values.dtype.kind in "fV" else np.int64   # (one dtype for the stacked keys: exact)
    order = xp.lexsort(xp.stack([values.astype(keys), flat.astype(keys)]))   # by flat, then by value
    flat, values = flat[order], values[order]
    edge = xp.ones(flat.shape, dtype=bool)
    if reduce == "amax":
        edge[:-1] = flat[1:] != flat[:-1]
    else:
        edge[1:] = flat[1:] != flat[:-1]
    where, chosen = flat[edge], values[edge]
    target = out.reshape(-1)   # (out is a fresh copy: contiguous)
    target[where] = (xp.maximum if reduce == "amax" else xp.minimum)(target[where], chosen)


class ScatterReduce(Function):
    """torch.scatter_reduce: out = a, then every src value at its place (as in Scatter) is combined into out by
    `reduce` (sum, prod, mean, amax, amin); include_self=False leaves a's value out wherever something lands.
    Gradients: sum, mean as the average's share; amax / amin to the elements equal to the result, split evenly
    among ties (as torch); prod as result / element (no zero among the combined elements)."""

    saves_inputs = False
    _UFUNC = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}

    def forward(self, a, src, index=None, dim=0, reduce="sum", include_self=True):
        xp = get_array_module(a)
        grids = open_grid(xp, index.shape)
        grids[dim] = index
        key = tuple(grids)
        part = src[tuple(slice(0, s) for s in index.shape)]
        counts = xp.zeros(a.shape, dtype=float32)
        xp.add.at(counts, key, 1)
        hit = counts > 0
        out = a.copy()
        if not include_self:
            identity = {"sum": 0, "mean": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}[reduce]
            if a.dtype.kind in "iub" and reduce in ("amax", "amin"):
                info = np.iinfo(a.dtype)
                identity = info.min if reduce == "amax" else info.max
            out[hit] = identity
        if reduce == "prod" and xp is not np:
            raise NotImplementedError("scatter_reduce(reduce='prod') on the GPU: CuPy has no multiply.at; run it on "
                                      "the CPU (.cpu()) or use reduce='sum' of logarithms")
        if reduce in ("amax", "amin") and xp is not np:
            _extreme_at(xp, out, key, part, reduce)
        else:
            getattr(xp, self._UFUNC[reduce]).at(out, key, part)
        if reduce == "mean":
            n = (counts + (1 if include_self else 0)).astype(out.dtype) if out.dtype.kind == "f" else \
                counts.astype(np.int64) + (1 if include_self else 0)
            n = xp.maximum(n, 1)   # (positions nothing lands on keep a's value below)
            mean = out / n if out.dtype.kind == "f" else out // n
            out = xp.where(hit, mean, a).astype(a.dtype)
        self.a, self.part, self.out, self.key, self.counts, self.hit = a, part, out, key, counts, hit
        self.src_shape, self.index_shape, self.reduce, self.include_self = src.shape, index.shape, reduce, include_self
        return out

    def backward(self, g):
        xp = get_array_module(g)
        hit, key, reduce, keep = self.hit, self.key, self.reduce, self.include_self
        zero = xp.zeros((), dtype=g.dtype)
        if reduce == "sum":
            ga, gpart = (g if keep else xp.where(hit, zero, g)), g[key]
        elif reduce == "mean":
            share = g / xp.maximum(self.counts + (1 if keep else 0), 1).astype(g.dtype)
            ga, gpart = xp.where(hit, share if keep else zero, g), share[key]
        elif reduce in ("amax", "amin"):
            self_wins = (self.a == self.out) & hit & keep
            part_wins = self.part == self.out[key]
            ties = self_wins.astype(g.dtype)
            xp.add.at(ties, key, part_wins.astype(g.dtype))
            share = g / xp.maximum(ties, 1)
            ga, gpart = xp.where(hit, share * self_wins, g), share[key] * part_wins
        else:   # prod
            if bool((self.part == 0).any()) or (keep and bool(((self.a == 0) & hit).any())):
                raise NotImplementedError("scatter_reduce(reduce='prod'): the gradient where a combined element is "
                                          "0 is not in minidl (torch computes it from the product of the others)")
            ga = xp.where(hit, g * self.out / self.a if keep else zero, g)
            gpart = (g * self.out)[key] / self.part
        gsrc = xp.zeros(self.src_shape, dtype=g.dtype)
        gsrc[tuple(slice(0, s) for s in self.index_shape)] = gpart
        return (ga if self.needs_input_grad[0] else None), (gsrc if self.needs_input_grad[1] else None)


# ------------------------------------------------------------------------------------------------
# Indexing with [], gathers and masks
# ------------------------------------------------------------------------------------------------


def _index_key(self, key):
    """Tensors inside the key become arrays on this tensor's device."""
    xp = get_array_module(self._data)

    def conv(k):
        if isinstance(k, Tensor):
            return k._data if k.is_cuda == self.is_cuda else xp.asarray(k._host_array())
        if isinstance(k, (list, np.ndarray)) and not (isinstance(k, list) and len(k) == 0):
            arr = np.asarray(k)
            if xp is not np:
                _device.check_not_capturing("indexing a GPU tensor with a host list/array",
                                            "the index is copied from host memory (keep it a GPU tensor)")
            return xp.asarray(arr) if xp is not np else arr
        return k

    return tuple(conv(k) for k in key) if isinstance(key, tuple) else conv(key)


def __getitem__(self, key):
    key = _index_key(self, key)
    try:
        return GetItem.apply(self, key=key)
    except IndexError as e:
        raise IndexError(f"index: {e} (tensor of shape {self.shape})") from None


def __setitem__(self, key, value):
    """x[key] = value, in place (value broadcast to x[key]); inside a graph the gradient of the old
    values under key is zero and value gets the gradient of x[key] (PyTorch's CopySlices)."""
    key = _index_key(self, key)
    try:
        if self._records_with(value):
            value = operand(self, value, "__setitem__")
            return self._inplace("__setitem__", lambda t: SetItem.apply(t, value.type(self.dtype), key=key),
                                 value)
        self._check_inplace("__setitem__")
        self._data[key] = value._data if isinstance(value, Tensor) else value
    except IndexError as e:
        raise IndexError(f"index assignment: {e} (tensor of shape {self.shape})") from None
    except ValueError as e:
        shape = tuple(getattr(value, "shape", np.shape(value)))
        raise ValueError(f"index assignment: the value of shape {shape} does not fit the indexed part of a "
                         f"tensor of shape {self.shape}: {e}") from None
    self._version += 1


def masked_fill(self, mask, value):
    """Elements where mask (broadcast) is True become value (a number or a 0-d tensor)."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"masked_fill: value must be a number or a 0-d tensor, got shape {tuple(value.shape)}")
        value = value.type(self.dtype)  # stays on its device (no .item(): no host sync)
    if not isinstance(value, Tensor):
        value = Tensor._make(get_array_module(self._data).asarray(value, dtype=self.dtype))
    return where(mask, value, self)


def gather(self, dim, index):
    """out[i][j] = self[index[i][j]][j] for dim=0, etc. (torch.gather): an advanced-index GetItem."""
    xp = get_array_module(self._data)
    dim = normalize_dim(dim, self.ndim, "gather")
    if not isinstance(index, Tensor) or index.dtype.kind not in "iu":
        raise TypeError(f"gather: index must be an integer tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if index.numel() == 0:  # an empty index gathers nothing (torch allows any rank then)
        return GetItem.apply(self.reshape(-1), key=index._data.reshape(-1).astype(np.int64)).reshape(index.shape)
    if index.ndim != self.ndim and not (self.ndim == 0 and index.ndim <= 1):
        raise ValueError(f"gather: index of shape {index.shape} must have as many dims as input {self.shape}")
    size = self.shape[dim] if self.ndim else 1
    # (checked on the CPU only: on the GPU this would read a device value, a host sync)
    if not index.is_cuda and not (0 <= index._data.min() and index._data.max() < size):
        bad = builtins.int(index._data.min() if index._data.min() < 0 else index._data.max())
        raise IndexError(f"gather: index {bad} is out of bounds for dim {dim} with size {size} "
                         f"(input {self.shape}, index {index.shape})")
    if self.ndim == 0:
        return GetItem.apply(self.reshape(1), key=index._data)
    grids = open_grid(xp, index.shape)
    grids[dim] = index._data
    return GetItem.apply(self, key=tuple(grids))


def narrow_copy(self, dim, start, length):
    """narrow(dim, start, length) as a new tensor (not a view)."""
    return self.narrow(dim, start, length).clone()


def narrow(self, dim, start, length):
    """The slice [start, start + length) along dim, sharing memory (torch.narrow)."""
    d = dim_index(self, dim, "narrow")
    size = self.shape[d]
    start = start + size if start < 0 else start
    if not (0 <= start and length >= 0 and start + length <= size):
        raise IndexError(f"narrow: start {start} + length {length} exceeds dim {dim} of size {size}")
    return self[(slice(None),) * d + (slice(start, start + length),)]


def index_select(self, dim, index):
    """Rows (along dim) picked by a 1-D int64 index; the gradient adds up over repeated indices."""
    d = dim_index(self, dim, "index_select")
    index = index if isinstance(index, Tensor) else Tensor._make(np.asarray(index, dtype=int64))
    if index.ndim > 1 or index.dtype.kind not in "iu":
        raise IndexError(f"index_select: index must be a 1-D integer tensor, got shape {tuple(index.shape)}, "
                         f"dtype {index.dtype}")
    if self.ndim == 0:  # a 0-d tensor is one row (torch): one index, a 0-d result
        if index.numel() != 1:
            raise IndexError(f"index_select: a 0-d input takes one index, got {index.numel()}")
        return self.reshape(1)[index.reshape(-1)].reshape(())
    return self[(slice(None),) * d + (index.reshape(-1),)]


def masked_select(self, mask):
    """The elements where mask (broadcast to this shape) is True, as a 1-D tensor."""
    mask = mask._data if isinstance(mask, Tensor) else mask
    xp = get_array_module(self._data)
    if mask.dtype != np.bool_:
        raise TypeError(f"masked_select: mask must be a bool tensor, got {mask.dtype}")
    try:
        shape = np.broadcast_shapes(self.shape, tuple(mask.shape))
    except ValueError:
        raise ValueError(f"masked_select: mask {tuple(mask.shape)} and input {self.shape} cannot be broadcast "
                         "together") from None
    return self.expand(shape)[xp.broadcast_to(mask, shape)]


def nonzero(self, as_tuple=False):
    """Indices of the non-zero elements: (n, ndim) int64, or a tuple of ndim (n,) tensors."""
    xp = get_array_module(self._data)
    if self.ndim == 0:  # torch: a 0-d tensor answers as one element with no coordinates
        n = builtins.int(bool(self._host_array()))
        if as_tuple:
            return (Tensor._make(xp.zeros(n, dtype=int64)),)
        return Tensor._make(xp.zeros((n, 0), dtype=int64))
    idx = xp.nonzero(self._data)
    if as_tuple:
        return tuple(Tensor._make(i.astype(int64)) for i in idx)
    return Tensor._make(xp.stack(idx, axis=1).astype(int64) if idx else xp.zeros((1, 0), dtype=int64))


def index_fill(self, dim, index, value):
    """self with the slices named by index along dim set to value (a number or a 0-d tensor, which
    then gets the gradient of every filled element)."""
    d = dim_index(self, dim, "index_fill")
    xp = get_array_module(self._data)
    mask = xp.zeros(self.shape[d] if self.ndim else 1, dtype=bool)
    mask[index._data if isinstance(index, Tensor) else index] = True
    mask = mask.reshape([-1 if i == d else 1 for i in range(self.ndim)]) if self.ndim else mask.reshape(())
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"index_fill: value must be a number or a 0-d tensor, got shape {tuple(value.shape)}")
        value = value.type(self.dtype)
    return where(Tensor._make(mask), value, self)


def masked_scatter(self, mask, source):
    """self with the positions where mask (broadcast to self's shape) is True taken from source's elements in order
    (torch.masked_scatter), with gradients to both."""
    if not isinstance(mask, Tensor) or mask.dtype.kind != "b":
        raise RuntimeError(f"masked_scatter: mask must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}")
    mask = mask.expand(*self.shape) if tuple(mask.shape) != tuple(self.shape) else mask
    count = int(mask.sum().item())
    if source.numel() < count:
        raise RuntimeError(f"masked_scatter: the mask selects {count} elements and source has only {source.numel()}")
    out = self.clone()
    out[mask] = source.reshape(-1)[:count].type(self.dtype)
    return out


def index_copy(self, dim, index, source):
    """self with its slices at `index` along dim replaced by source's slices, in order (torch.index_copy; indices
    should be distinct, as torch asks), with gradients to both."""
    d = dim_index(self, dim, "index_copy")
    if source.shape[d] != (index.numel() if isinstance(index, Tensor) else len(index)):
        raise RuntimeError(f"index_copy: source has {source.shape[d]} slices along dim {d}, index names "
                           f"{index.numel() if isinstance(index, Tensor) else len(index)}")
    return index_add(self.index_fill(d, index, 0), d, index, source.type(self.dtype))


def index_put(self, indices, values, accumulate=False):
    """self with values written at self[indices] (torch.index_put: a tuple of index tensors, one per leading
    dimension); accumulate: added there instead, repeated positions adding up. With gradients."""
    indices = tuple(indices)
    if not accumulate:
        out = self.clone()
        out[indices] = values
        return out
    if any(isinstance(i, Tensor) and i.dtype.kind == "b" for i in indices) or not indices:
        raise NotImplementedError("index_put: accumulate=True takes integer index tensors (one per leading dimension), "
                                  "not masks")
    k = len(indices)
    if k > self.ndim:
        raise IndexError(f"index_put: {k} index tensors for a {self.ndim}-d tensor")
    lead, rest = self.shape[:k], self.shape[k:]
    index_tensors = broadcast_tensors(*[i if isinstance(i, Tensor) else Tensor(i, device=self.device) for i in indices])
    linear = index_tensors[0] * 0
    for i, size in zip(index_tensors, lead):   # row-major position among the leading dimensions
        linear = linear * size + (i % size)
    count = linear.numel()
    values = values if isinstance(values, Tensor) else Tensor(values, device=self.device)
    values = values.type(self.dtype).expand(tuple(linear.shape) + tuple(rest)).reshape(count, *rest)
    flat = self.reshape(-1, *rest)
    return index_add(flat, 0, linear.reshape(-1), values).reshape(self.shape)


def take_along_dim(t, indices, dim=None):
    if dim is None:
        flat = t.reshape(-1)
        return flat.gather(0, _wrap_negative(indices.reshape(-1), flat.shape[0]))
    dim = normalize_dim(dim, t.ndim, "take_along_dim")
    indices = _wrap_negative(indices, t.shape[dim])
    shape = list(np.broadcast_shapes(tuple(t.shape[:dim]) + (1,) + tuple(t.shape[dim + 1:]),
                                     tuple(indices.shape[:dim]) + (1,) + tuple(indices.shape[dim + 1:])))
    ts, ti = list(shape), list(shape)
    ts[dim], ti[dim] = t.shape[dim], indices.shape[dim]
    return t.expand(*ts).gather(dim, indices.expand(*ti))


def _wrap_negative(indices, size):
    """take_along_dim accepts indices from -size (as Python's), which gather does not."""
    return where(indices < 0, indices + size, indices)


def select(t, dim, index):
    dim = normalize_dim(dim, t.ndim, "select")
    n = t.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {tuple(t.shape)} at dimension {dim}")
    return t.narrow(dim, index % n, 1).squeeze(dim)


def take(t, index):
    flat = t.reshape(-1)
    return flat.gather(0, _wrap_negative(index.reshape(-1), flat.shape[0])).reshape(tuple(index.shape))


def index_add(t, dim, index, source, *, alpha=1):
    """t with alpha * source's slices added at `index` along dim (repeated indices add up), with gradients."""
    dim = normalize_dim(dim, max(t.ndim, 1), "index_add")
    if t.ndim == 0:                         # a scalar: source added once per index entry (each must be 0)
        hits = (index.reshape(-1) == 0).type(t.dtype).sum()
        return t + source.reshape(()) * hits * alpha
    if not t.is_cuda:
        # On the CPU a scatter-add (NumPy's add.at: O(k) memory, the sum in index order, deterministic): the index
        # along dim, broadcast over the source's other dimensions.
        shape = [1] * source.ndim
        shape[dim] = -1
        where = index.reshape(shape).expand(source.shape)
        return t.scatter_add(dim, where, source * alpha if alpha != 1 else source)
    # On the GPU a product with a (k x n) one-hot matrix: deterministic, as CuPy's atomic add.at is not, but k x n
    # in memory (a deterministic segment sum would lift that; not written yet)
    n = t.shape[dim]
    onehot = (index.reshape(-1, 1) == Tensor(np.arange(n), device=t.device).reshape(1, -1)).type(t.dtype)   # (k, n)
    src = movedim(source, dim, -1)
    added = movedim(src @ onehot, -1, dim)
    return t + (added * alpha if alpha != 1 else added)


def argwhere(t):
    return t.nonzero()


# ------------------------------------------------------------------------------------------------
# Scatters
# ------------------------------------------------------------------------------------------------


def _scatter(self, dim, index, src, reduce_add, op, reduce=None, include_self=True):
    """The checks of every scatter, then Scatter (reduce None) or ScatterReduce (scatter_reduce's `reduce`)."""
    d = dim_index(self, dim, op)
    if self.ndim == 0:  # a 0-d self is one element (torch): scatter into its 1-element view
        return _scatter(self.reshape(1), 0, index.reshape(-1) if isinstance(index, Tensor) else index,
                        src.reshape(-1) if isinstance(src, Tensor) else src, reduce_add, op, reduce,
                        include_self).reshape(())
    if isinstance(index, Tensor) and index.ndim == 0 and self.ndim == 1:  # torch accepts a 0-d index here
        index = index.reshape(1)
        src = src.reshape(1) if isinstance(src, Tensor) and src.ndim == 0 else src
    if isinstance(index, Tensor) and index.dtype == np.int32:  # torch takes int32 indices too
        index = index.type(int64)
    if not isinstance(index, Tensor) or index.dtype != int64 or index.ndim != self.ndim:
        raise RuntimeError(f"{op}: index must be an int64 tensor with as many dims as self "
                           f"({self.ndim}), got {getattr(index, 'dtype', type(index).__name__)} of shape "
                           f"{tuple(getattr(index, 'shape', ()))}")
    if not isinstance(src, Tensor):
        src = Tensor._make(get_array_module(self._data).full(index.shape, src, dtype=self.dtype))
    elif src.dtype != self.dtype:
        raise RuntimeError(f"{op}: expected self and src to have the same dtype, got {self.dtype} and {src.dtype} "
                           f"(cast src with .to({self.dtype.name}))")
    for i, (si, ss) in enumerate(zip(index.shape, self.shape)):
        if i != d and si > ss or si > src.shape[i]:
            raise RuntimeError(f"{op}: index {tuple(index.shape)} is larger than self {tuple(self.shape)} or "
                               f"src {tuple(src.shape)} in dim {i}")
    # (checked on the CPU only: on the GPU this would read a device value, a host sync)
    if not index.is_cuda and index.numel() and not (0 <= index._data.min() and index._data.max() < self.shape[d]):
        raise RuntimeError(f"{op}: index {builtins.int(index.max())} is out of bounds for dim {dim} with size "
                           f"{self.shape[d]}")
    if reduce is not None:
        return ScatterReduce.apply(self, src, index=index._data, dim=d, reduce=reduce, include_self=include_self)
    return Scatter.apply(self, src.type(self.dtype), index=index._data, dim=d, reduce_add=reduce_add)


def scatter(self, dim, index, src=None, value=None, reduce=None):
    """out = self with out[index[i][j]][j] = src[i][j] for dim=0, etc. (torch.scatter). reduce='add'
    adds src instead (scatter_add), reduce='multiply' multiplies (no gradient, as in torch)."""
    src = value if src is None else src
    if reduce is None:
        return _scatter(self, dim, index, src, False, "scatter")
    if reduce == "add":
        return _scatter(self, dim, index, src, True, "scatter")
    if reduce == "multiply":
        if self.requires_grad or isinstance(src, Tensor) and src.requires_grad:
            raise RuntimeError("scatter(reduce='multiply'): no gradient is defined (as in torch); compute it "
                               "under minidl.no_grad() or with detached tensors")
        # Where values land: scatter the positions 0..n-1 of a flat copy, then multiply with np.multiply.at
        # (repeated indices multiply together, as in torch). Computed on the host (no CuPy multiply.at).
        flat = self.detach().reshape(-1)
        positions = Tensor._make(np.arange(self.numel(), dtype=int64).reshape(self.shape)).to(self.device)
        where_to = positions.gather(dim_index(self, dim, "scatter"), index if self.ndim == 0 or index.dtype == int64
                                    else index.type(int64))
        out = flat._host_array().copy()
        values = (src._host_array() if isinstance(src, Tensor) else np.full(index.shape, src, dtype=self.dtype))
        np.multiply.at(out, where_to._host_array().reshape(-1),
                       values[tuple(slice(0, n) for n in index.shape)].reshape(-1).astype(self.dtype))
        return Tensor._make(out.reshape(self.shape)).to(self.device)
    raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")


def scatter_add(self, dim, index, src):
    """out = self with src[i][j] added at out[index[i][j]][j] for dim=0 (repeats add up)."""
    return _scatter(self, dim, index, src, True, "scatter_add")


SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """out = self with slice i of source (along dim) combined into slice index[i] by `reduce`: "prod", "mean", "amax"
    or "amin" (torch.index_reduce): scatter_reduce with index spread over source's other dims."""
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise ValueError(f"index_reduce: reduce must be one of ('prod', 'mean', 'amax', 'amin'), got {reduce!r}")
    if not isinstance(source, Tensor) or not isinstance(index, Tensor):
        raise TypeError("index_reduce: index and source must be Tensors")
    d = dim_index(self, dim, "index_reduce")
    if index.ndim != 1 or index.shape[0] != source.shape[d]:
        raise IndexError(f"index_reduce: index must be 1-D with one entry per slice of source along dim {d} "
                         f"({source.shape[d]}), got shape {tuple(index.shape)}")
    shape = [1] * source.ndim
    shape[d] = -1
    return scatter_reduce(self, d, index.reshape(shape).expand(*source.shape), source, reduce,
                          include_self=include_self)


def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    """out = self with each src[i][j] combined into out[index[i][j]][j] (dim=0) by `reduce`: "sum", "prod",
    "mean", "amax" or "amin" (torch.scatter_reduce); include_self=False leaves self's value out where values land."""
    if reduce not in SCATTER_REDUCTIONS:
        raise ValueError(f"scatter_reduce: reduce must be one of {SCATTER_REDUCTIONS}, got {reduce!r}")
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
    return _scatter(self, dim, index, src, False, "scatter_reduce", reduce, include_self)


def unravel_index(indices, shape):
    """The coordinates of flat indices into `shape`, one int64 tensor per dimension (torch.unravel_index)."""
    t = indices if isinstance(indices, Tensor) else Tensor._make(np.asarray(indices, dtype=np.int64))
    if t.dtype.kind not in "iu":
        raise TypeError(f"unravel_index: expected 'indices' to be an integer tensor, got {t.dtype}")
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    size = int(np.prod(shape))
    xp = get_array_module(t._data)
    flat = t._data.astype(np.int64)
    if bool(((flat < -size) | (flat >= size)).any()):
        raise RuntimeError(f"unravel_index: 'indices' must be in range [-{size}, {size - 1}] for shape {shape}")
    coords = xp.unravel_index(flat % max(size, 1), shape)
    return tuple(Tensor._make(c.astype(np.int64)) for c in coords)
