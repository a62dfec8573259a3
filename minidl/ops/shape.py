"""Shapes: reshape/view, squeeze/unsqueeze, permute/transpose, expand, repeat, flatten, movedim, tile,
broadcast_*, and the reorderings (flip, roll, tril/triu, rot90). Reshape, Permute, Expand and Repeat are
the Functions; every other shape op is one of them or an index (so each has its gradient)."""
from __future__ import annotations

import builtins
import math
import numbers

import numpy as np

from .._device import get_array_module
from ..autograd.function import Function, unbroadcast
from ..autograd.higher_order import sum_to
from ..autograd.tensor import Tensor
from ._args import can_view, resolve_shape, shape_arg
from ._dims import normalize_dim, normalize_dims
from .elementwise import where
from .joining import cat


# ------------------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------------------


class Reshape(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, shape=None):
        self.in_shape = a.shape
        return a.reshape(shape)

    def backward(self, g):
        return g.reshape(self.in_shape)

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        return g.reshape(self.in_shape)


class Permute(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, dims=None):
        self.dims = tuple(dims)  # normalised by Tensor.permute (minidl.autograd._dims)
        return a.transpose(self.dims)

    def backward(self, g):
        inverse = [0] * len(self.dims)
        for i, d in enumerate(self.dims):
            inverse[d] = i
        return g.transpose(inverse)

    def backward_graph(self, g):
        return g.permute(*np.argsort(self.dims).tolist())


class Expand(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, shape=None):
        self.in_shape = a.shape
        return get_array_module(a).broadcast_to(a, shape)

    def backward(self, g):
        return unbroadcast(g, self.in_shape)

    def backward_graph(self, g):
        return sum_to(g, self.in_shape)


class Repeat(Function):
    """torch.Tensor.repeat: tile a (its shape padded with leading 1s to len(sizes)) sizes times. The
    gradient sums the tiles: g viewed as (s_0, n_0, s_1, n_1, ...) summed over the s axes."""

    def forward(self, a, sizes=()):
        self.padded = (1,) * (len(sizes) - a.ndim) + a.shape
        self.sizes, self.in_shape = tuple(sizes), a.shape
        return get_array_module(a).tile(a.reshape(self.padded), self.sizes)

    def backward(self, g):
        split = tuple(x for s, n in zip(self.sizes, self.padded) for x in (s, n))
        g = g.reshape(split).sum(axis=tuple(range(0, len(split), 2)))
        return g.reshape(self.in_shape)


# ------------------------------------------------------------------------------------------------
# Views and reshapes
# ------------------------------------------------------------------------------------------------


def reshape(self, *shape):
    shape = shape_arg(shape)
    try:
        target = resolve_shape(self._data.shape, shape)   # (the array's plain tuple: no Size made)
    except ValueError as e:
        raise ValueError(f"reshape: cannot reshape a tensor of shape {self.shape} to {shape}: {e}") from None
    return Reshape.apply(self, shape=target)


def view(self, *shape):
    """Same data, new shape, no copy: refuses (as PyTorch) when the strides do not allow it, e.g.
    after transpose/permute; use reshape() (copies when needed) or contiguous().view()."""
    shape = shape_arg(shape)
    try:
        target = resolve_shape(self._data.shape, shape)
    except ValueError as e:
        raise RuntimeError(f"view: shape {list(shape)} is invalid for input of size {self.numel()}: {e}") from None
    if not can_view(self._data, target):
        raise RuntimeError(
            f"view size is not compatible with input tensor's size and stride (shape {list(self.shape)}, "
            f"view {list(target)}; at least one dimension spans across two contiguous subspaces). "
            "Use .reshape(...) instead."
        )
    return Reshape.apply(self, shape=target)


def view_as(self, other):
    return self.reshape(other.shape)


def flatten(self, start_dim=0, end_dim=-1):
    shape = self._data.shape
    ndim = len(shape)
    if type(start_dim) is int and type(end_dim) is int and -ndim <= start_dim < ndim and -ndim <= end_dim < ndim:
        start, end = start_dim % ndim, end_dim % ndim   # (the usual call: no normalize_dim)
    else:
        start = normalize_dim(start_dim, ndim, "flatten")
        end = normalize_dim(end_dim, ndim, "flatten")
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {self.shape}")
    if ndim == 0:
        return self.reshape(1)
    # the new shape has the same element count by construction: no resolve_shape
    return Reshape.apply(self, shape=shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])


def squeeze(self, dim=None):
    """Drop dims of size 1: all of them (dim=None), or those of dim (an int or a tuple) that are 1."""
    if dim is None:
        return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = normalize_dims(dim, self.ndim, "squeeze")
    if self.ndim == 0:
        return self.reshape(())
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))


def unsqueeze(self, dim):
    dim = normalize_dim(dim, self.ndim + 1, "unsqueeze")
    return self.reshape(self.shape[:dim] + (1,) + self.shape[dim:])


def permute(self, *dims):
    n = self._data.ndim
    if n > 1 and len(dims) == n:   # the usual call: a permutation of range(n) as plain ints (one set, one test)
        normal = tuple([d % n if d.__class__ is int and -n <= d < n else -1 for d in dims])
        if len(set(normal)) == n and -1 not in normal:
            return Permute.apply(self, dims=normal)
    dims = shape_arg(dims)
    if len(dims) != self.ndim:
        raise ValueError(
            f"permute: number of dims don't match: the tensor of shape {self.shape} has {self.ndim} dims, "
            f"got {len(dims)} ({dims})"
        )
    dims = normalize_dims(dims, self.ndim, "permute", allow_repeats=True)
    if len(set(dims)) != len(dims):
        raise ValueError(f"permute: duplicate dims in {dims} are not allowed (tensor of shape {self.shape})")
    if self.ndim == 0:
        return self.reshape(())
    return Permute.apply(self, dims=dims)


def transpose(self, dim0, dim1):
    n = self._data.ndim
    dim0 = normalize_dim(dim0, n, "transpose")
    dim1 = normalize_dim(dim1, n, "transpose")
    if n == 0:
        return self.reshape(())
    dims = list(range(n))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return Permute.apply(self, dims=tuple(dims))   # (valid by construction: not through permute's checks)


def t(self):
    if self.ndim > 2:
        raise ValueError(f"t(): expects a tensor with <= 2 dims, got shape {self.shape}; use transpose()")
    return self.T


def expand(self, *shape):
    shape = shape_arg(shape)
    new = len(shape) - self.ndim
    if new < 0:
        raise ValueError(f"expand: the shape {tuple(shape)} has fewer dims than the tensor's {self.shape}")
    if any(t == -1 for t in shape[:new]):
        raise ValueError(f"expand: -1 is not allowed in a new leading dim (shape {tuple(shape)} for a tensor of "
                         f"shape {self.shape}): -1 keeps an existing size, and a new dim has none")
    full = tuple(s if t == -1 else t for s, t in zip((1,) * (len(shape) - self.ndim) + self.shape, shape))
    try:
        np.broadcast_shapes(self.shape, full)
        if np.broadcast_shapes(self.shape, full) != full:
            raise ValueError
    except ValueError:
        raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}") from None
    return Expand.apply(self, shape=full)


def expand_as(self, other):
    return self.expand(other.shape)


def repeat(self, *sizes):
    """Tile the tensor sizes[i] times along dim i (torch.Tensor.repeat); len(sizes) >= ndim."""
    sizes = shape_arg(sizes)
    if len(sizes) < self.ndim:
        raise RuntimeError(
            f"repeat: number of repeat dims ({len(sizes)}) can not be smaller than the number of dims "
            f"of the tensor ({self.ndim}, shape {self.shape})"
        )
    if any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in sizes):
        raise ValueError(f"repeat: repeats must be non-negative ints, got {sizes}")
    return Repeat.apply(self, sizes=tuple(builtins.int(n) for n in sizes))


def reshape_as(t, other):
    return t.reshape(tuple(other.shape))


def unflatten(t, dim, sizes):
    dim = normalize_dim(dim, t.ndim, "unflatten")
    sizes = tuple(sizes)
    return t.reshape(tuple(t.shape[:dim]) + sizes + tuple(t.shape[dim + 1:]))


def ravel(t):
    return t.reshape(-1)


def movedim(t, source, destination):
    src = [source] if isinstance(source, numbers.Integral) else list(source)
    dst = [destination] if isinstance(destination, numbers.Integral) else list(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                           f"same number of dims as destination ({dst} dims)")
    src = [normalize_dim(d, t.ndim, "movedim") for d in src]
    dst = [normalize_dim(d, t.ndim, "movedim") for d in dst]
    order = [d for d in range(t.ndim) if d not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return t.permute(*order)


def swapaxes(t, axis0, axis1):
    return t.transpose(axis0, axis1)


def broadcast_to(t, size):
    return t.expand(*size)


def broadcast_shapes(*shapes):
    from ..autograd.return_types import Size

    try:
        return Size(np.broadcast_shapes(*[tuple(s) if not isinstance(s, numbers.Integral) else (s,) for s in shapes]))
    except ValueError:
        raise RuntimeError(f"shape mismatch: objects cannot be broadcast to a single shape: {shapes}") from None


def broadcast_tensors(*tensors):
    shape = tuple(np.broadcast_shapes(*[tuple(t.shape) for t in tensors]))
    return tuple(t.expand(*shape) for t in tensors)


def tile(t, dims):
    dims = tuple(dims)
    if len(dims) < t.ndim:
        dims = (1,) * (t.ndim - len(dims)) + dims
    if t.ndim < len(dims):
        t = t.reshape((1,) * (len(dims) - t.ndim) + tuple(t.shape))
    return t.repeat(*dims)


def repeat_interleave(t, repeats=None, dim=None, *, output_size=None):
    if repeats is None:                     # torch.repeat_interleave(repeats): indices repeated
        counts = t
        idx = np.repeat(np.arange(counts.shape[0]), np.asarray(counts.cpu().numpy()))
        return Tensor._make(get_array_module(t._data).asarray(idx))
    if dim is None:
        t, dim = t.reshape(-1), 0
    dim = normalize_dim(dim, t.ndim, "repeat_interleave")
    n = t.shape[dim]
    reps = np.asarray(repeats.cpu().numpy() if isinstance(repeats, Tensor) else repeats).reshape(-1)
    if reps.size == 1:
        reps = np.repeat(reps, n)
    if reps.size != n:
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, got {reps.size} and {n}")
    if (reps < 0).any():
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    index = Tensor._make(get_array_module(t._data).asarray(np.repeat(np.arange(n), reps)))
    return t.index_select(dim, index)


def unfold(t, dimension, size, step):
    """Every window of `size` elements along `dimension`, `step` apart, as a new last dimension (Tensor.unfold)."""
    d = normalize_dim(dimension, max(t.ndim, 1), "unfold")
    if t.ndim == 0:
        return t.reshape(1)
    n = t.shape[d]
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    windows = (n - size) // step + 1
    idx = (np.arange(windows)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    picked = t.index_select(d, Tensor(idx, device=t.device))
    shape = tuple(t.shape[:d]) + (windows, size) + tuple(t.shape[d + 1:])
    return movedim(picked.reshape(shape), d + 1, -1)


def sum_to_size(t, *size):
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    lead = t.ndim - len(size)
    out = t.sum(tuple(range(lead))) if lead > 0 else t
    dims = tuple(i for i, s in enumerate(size) if s == 1 and out.shape[i] != 1)
    return out.sum(dims, keepdim=True) if dims else out


# ------------------------------------------------------------------------------------------------
# Reordering: flips, rolls, triangles
# ------------------------------------------------------------------------------------------------


def flip(self, *dims, **kwargs):
    if "dims" in kwargs:
        dims = (kwargs.pop("dims"),)
    if kwargs:
        raise TypeError(f"flip: unexpected arguments {sorted(kwargs)}")
    dims = list(normalize_dims(shape_arg(dims), self.ndim, "flip"))
    return self[tuple(slice(None, None, -1) if i in dims else slice(None) for i in range(self.ndim))]


def roll(self, shifts, dims=None):
    """Elements shifted along dims by shifts, wrapping around (torch.roll); dims None: over the flattened
    tensor, then the original shape. A gather, so the gradient rolls back."""
    if dims is None:
        if not isinstance(shifts, numbers.Integral):
            raise ValueError(f"roll: without dims, shifts must be one int, got {shifts!r}")
        n = self.numel()
        idx = (np.arange(n) - builtins.int(shifts)) % max(n, 1)
        return self.reshape(-1)[Tensor._make(idx).to(self.device)].reshape(self.shape)
    shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
    dims = normalize_dims(dims, self.ndim, "roll", allow_repeats=True)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    out = self
    for s, d in zip(shifts, dims):
        n = self.shape[d]
        if n:
            idx = Tensor._make((np.arange(n) - builtins.int(s)) % n).to(self.device)
            out = out.index_select(d, idx)
    return out


def tril(self, diagonal=0):
    if self.ndim < 2:
        raise RuntimeError(f"tril: input tensor must have at least 2 dimensions, got shape {tuple(self.shape)}")
    xp = get_array_module(self._data)
    zero = Tensor._make(xp.zeros((), dtype=self.dtype))   # of self's dtype: a bool mask stays bool
    return where(Tensor._make(xp.tril(xp.ones(self.shape[-2:], dtype=bool), diagonal)), self, zero)


def triu(self, diagonal=0):
    if self.ndim < 2:
        raise RuntimeError(f"triu: input tensor must have at least 2 dimensions, got shape {tuple(self.shape)}")
    xp = get_array_module(self._data)
    zero = Tensor._make(xp.zeros((), dtype=self.dtype))   # of self's dtype: a bool mask stays bool
    return where(Tensor._make(xp.triu(xp.ones(self.shape[-2:], dtype=bool), diagonal)), self, zero)


def fliplr(t):
    if t.ndim < 2:
        raise RuntimeError("fliplr: Input must be >= 2-d.")
    return t.flip(1)


def flipud(t):
    if t.ndim < 1:
        raise RuntimeError("flipud: Input must be >= 1-d.")
    return t.flip(0)


def rot90(t, k=1, dims=(0, 1)):
    d0, d1 = (normalize_dim(d, t.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise RuntimeError(f"rot90: expected rotation dims to be different, got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return t.flip(d1).transpose(d0, d1)
    if k == 2:
        return t.flip(d0, d1)
    if k == 3:
        return t.transpose(d0, d1).flip(d1)
    return t.clone()


class AsStrided(Function):
    """out[i0, i1, ...] = flat[offset + i0 s0 + i1 s1 + ...] of the input's values in row-major order; the
    gradient adds each output's into the element it read (several outputs may read one)."""
    saves_inputs = False

    def forward(self, a, size=(), stride=(), offset=0):
        xp = get_array_module(a)
        flat = xp.ascontiguousarray(a).reshape(-1)
        positions = xp.arange(flat.size, dtype=np.int64)
        index = xp.lib.stride_tricks.as_strided(positions[offset:], shape=size,
                                                strides=tuple(s * positions.itemsize for s in stride))
        self.index, self.shape, self.size = index.copy(), a.shape, flat.size
        return flat[self.index]

    def backward(self, g):
        xp = get_array_module(g)
        out = xp.zeros(self.size, dtype=g.dtype)
        xp.add.at(out, self.index.reshape(-1), g.reshape(-1))
        return out.reshape(self.shape)


def as_strided(input, size, stride, storage_offset=0):
    """The elements at storage_offset + sum_k i_k stride[k] of the input's row-major values (torch.as_strided over a
    contiguous tensor: sliding windows, overlapping patches). minidl returns a copy, not a view: writes to it do not
    reach the input. Differentiable."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: mismatch in length of strides ({len(stride)}) and shape ({len(size)})")
    if any(s < 0 for s in stride) or storage_offset < 0:
        raise RuntimeError(f"as_strided: negative strides {stride} or storage_offset {storage_offset}")
    reach = storage_offset + sum((n - 1) * s for n, s in zip(size, stride)) if all(size) else -1
    if reach >= input.numel():
        raise RuntimeError(f"as_strided: setStorage: sizes {list(size)}, strides {list(stride)} and storage offset "
                           f"{storage_offset} reach element {reach}, out of bounds for the {input.numel()} elements of "
                           f"a tensor of shape {tuple(input.shape)}")
    return AsStrided.apply(input, size=size, stride=stride, offset=int(storage_offset))


def diff(t, n=1, dim=-1, prepend=None, append=None):
    dim = normalize_dim(dim, t.ndim, "diff")
    if prepend is not None or append is not None:
        parts = ([prepend] if prepend is not None else []) + [t] + ([append] if append is not None else [])
        t = cat(parts, dim)
    for _ in range(n):
        length = t.shape[dim]
        if length == 0:
            break
        hi, lo = t.narrow(dim, 1, length - 1), t.narrow(dim, 0, length - 1)
        t = (hi != lo) if t.dtype == np.bool_ else hi - lo
    return t

moveaxis = movedim

swapdims = swapaxes
