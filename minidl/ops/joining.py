"""Joining and splitting: cat/stack/split (Functions; chunk is split) and unbind, hstack, vstack, dstack,
column_stack, tensor_split (views made by indexing)."""
from __future__ import annotations

import builtins
import numbers

import numpy as np

from .._device import get_array_module
from ..autograd.function import Function
from ..autograd.tensor import Tensor, get_default_dtype
from ._args import cast_all, check_tensor_list
from ._dims import dim_index, normalize_dim
from ._promotion import result_type


class Cat(Function):
    """Join along dim; inputs flagged in `skip` (torch's legacy empty (0,) tensors) take no part
    but still get their (empty) gradient."""

    saves_inputs = False

    def forward(self, *arrays, dim=0, skip=()):
        xp = get_array_module(*arrays)
        self.dim = dim  # normalised by cat() (minidl.autograd._dims)
        self.skip = tuple(skip) or (False,) * len(arrays)
        kept = [a for a, s in zip(arrays, self.skip) if not s]
        self.sizes = [a.shape[self.dim] for a in kept]
        self.skipped_shapes = [a.shape for a in arrays]
        return xp.concatenate(kept, axis=self.dim)

    def backward(self, g):
        xp = get_array_module(g)
        bounds = np.cumsum(self.sizes)[:-1].tolist()
        parts = iter(xp.split(g, bounds, axis=self.dim))
        return tuple(xp.zeros(shape, dtype=g.dtype) if s else next(parts)
                     for s, shape in zip(self.skip, self.skipped_shapes))

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        parts, start, sizes = [], 0, iter(self.sizes)
        for skipped, shape in zip(self.skip, self.skipped_shapes):
            if skipped:
                parts.append(g.new_zeros(shape))
                continue
            n = next(sizes)
            parts.append(g[(slice(None),) * self.dim + (slice(start, start + n),)])
            start += n
        return tuple(parts)


class Stack(Function):
    saves_inputs = False

    def forward(self, *arrays, dim=0):
        xp = get_array_module(*arrays)
        self.dim = dim  # normalised by stack()
        return xp.stack(arrays, axis=self.dim)

    def backward(self, g):
        xp = get_array_module(g)
        return tuple(xp.take(g, i, axis=self.dim) for i in range(g.shape[self.dim]))


def cat(tensors, dim=0):
    """Join tensors along an existing dim; dtypes promote as torch.cat (int64 + float32 -> float32).
    As in torch, 1-D tensors with no elements (the legacy empty tensor, shape (0,)) are skipped."""
    tensors = check_tensor_list("cat", tensors)
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise ValueError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = result_type(*tensors, default_float=get_default_dtype())
    skipped = [t.ndim == 1 and t.shape[0] == 0 for t in tensors]
    kept = [t for t, s in zip(tensors, skipped) if not s]
    if not kept:
        kept, skipped = tensors[:1], [False] + skipped[1:]
    ref = kept[0]
    d = normalize_dim(dim, ref.ndim, "cat")
    for t in kept:
        if t.ndim != ref.ndim or t.shape[:d] + t.shape[d + 1 :] != ref.shape[:d] + ref.shape[d + 1 :]:
            raise ValueError(
                f"cat: tensors must match in every dim except {dim}, got shapes {[tuple(x.shape) for x in tensors]}"
            )
    return Cat.apply(*[t.type(dtype) for t in tensors], dim=d, skip=tuple(skipped))

concat = cat


def stack(tensors, dim=0):
    tensors = check_tensor_list("stack", tensors)
    if len({t.shape for t in tensors}) != 1:
        raise ValueError(f"stack: all tensors must have the same shape, got {[tuple(t.shape) for t in tensors]}")
    d = normalize_dim(dim, tensors[0].ndim + 1, "stack")
    return Stack.apply(*cast_all(tensors), dim=d)


class Split(Function):
    """Consecutive pieces along dim, as views, from one node: the backward joins the pieces' gradients in one
    concatenate (zeros for a piece that got none), where a piece per indexing op would give each a zero-filled
    array of the input's size, added up (a GPT block's q, k, v split: 8 launches per layer instead of 1). As in
    PyTorch, the pieces are views that may not be changed in place inside a graph."""

    saves_inputs = False
    may_return_view = True

    def forward(self, a, dim=0, sizes=()):
        self.dim = dim
        out, start, lead = [], 0, (slice(None),) * dim
        for size in sizes:
            out.append(a[lead + (slice(start, start + size),)])
            start += size
        return tuple(out)

    def backward(self, *grads):
        joined = _joined(grads, self.dim)
        return joined if joined is not None else get_array_module(grads[0]).concatenate(grads, axis=self.dim)


def _joined(arrays, dim):
    """What concatenate(arrays, dim) would return, as a view and without a copy, when the arrays already lie side
    by side in one C-contiguous block of memory, as that concatenate would write them; None otherwise. The
    attention primitive writes the gradients of q, k and v split from one projection that way (a GPT block's
    split then joins its gradients for free, where a concatenate copies the whole projection's gradient)."""
    first = arrays[0]
    owner = _owner(first)
    if owner is None or not builtins.all(a.size for a in arrays):
        return None
    shape = list(first.shape)
    shape[dim] = builtins.sum(a.shape[dim] for a in arrays)
    strides, step = [0] * len(shape), first.itemsize
    for axis in reversed(range(len(shape))):
        strides[axis], step = step, step * shape[axis]
    start = _address(first)
    offset = 0
    for a in arrays:
        if (a.dtype != first.dtype or _owner(a) is not owner or _address(a) - start != offset
                or a.shape[:dim] != first.shape[:dim] or a.shape[dim + 1:] != first.shape[dim + 1:]
                or any(n > 1 and s != want for n, s, want in zip(a.shape, a.strides, strides))):
            return None
        offset += a.shape[dim] * strides[dim]
    if isinstance(first, np.ndarray):
        return np.ndarray(tuple(shape), dtype=first.dtype, buffer=owner, strides=tuple(strides),
                          offset=start - _address(owner))
    return type(first)(tuple(shape), dtype=first.dtype, memptr=first.data, strides=tuple(strides))   # CuPy


def _owner(a):
    """The allocation an array's memory belongs to (NumPy's C-contiguous base array, CuPy's memory block); None
    when there is none to share."""
    if isinstance(a, np.ndarray):
        base = a.base
        return base if isinstance(base, np.ndarray) and base.flags.c_contiguous else None
    return getattr(getattr(a, "data", None), "mem", None)


def _address(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr


def split(tensor, split_size_or_sections, dim=0):
    if tensor.ndim == 0:
        raise ValueError("split: expects at least a 1-dimensional tensor, got a 0-d one")
    dim = normalize_dim(dim, tensor.ndim, "split")
    n = tensor.shape[dim]
    if isinstance(split_size_or_sections, builtins.int) and not isinstance(split_size_or_sections, bool):
        size = split_size_or_sections
        if size < 0 or (size == 0 and n != 0):
            raise ValueError(f"split: split_size must be positive, got {size} (dim {dim} has size {n})")
        if size == 0:
            return (tensor,)
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]
    else:
        sizes = list(split_size_or_sections)
        if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0 for s in sizes):
            raise ValueError(f"split: sections must be non-negative ints, got {sizes}")
        if sum(sizes) != n:
            raise ValueError(f"split: sections {sizes} do not add up to dim {dim} of size {n}")
    return Split.apply(tensor, dim=dim, sizes=tuple(sizes))


def chunk(tensor, chunks, dim=0):
    if isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral):
        raise TypeError(f"chunk: chunks must be an int, got {type(chunks).__name__}")
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be greater than 0, got {chunks}")
    if tensor.ndim == 0:
        raise ValueError("chunk: expects at least a 1-dimensional tensor, got a 0-d one")
    dim = normalize_dim(dim, tensor.ndim, "chunk")
    n = tensor.shape[dim]
    size = -(-n // chunks)
    return split(tensor, size, dim)


def unbind(self, dim=0):
    d = dim_index(self, dim, "unbind")
    return tuple(self[(slice(None),) * d + (i,)] for i in range(self.shape[d]))


def concatenate(tensors, dim=0, *, axis=None):
    return cat(tensors, dim if axis is None else axis)


def _flat(tensors):
    return list(tensors[0]) if _is_seq(tensors) else list(tensors)


def _is_seq(tensors):
    return len(tensors) == 1 and isinstance(tensors[0], (list, tuple))


def hstack(tensors):
    ts = atleast_1d(list(tensors))
    return cat(list(ts), 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat(list(atleast_2d(list(tensors))), 0)


def dstack(tensors):
    return cat(list(atleast_3d(list(tensors))), 2)


def column_stack(tensors):
    cols = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors]
    return cat(cols, 1)


def tensor_split(t, indices_or_sections, dim=0):
    dim = normalize_dim(dim, t.ndim, "tensor_split")
    n = t.shape[dim]
    if isinstance(indices_or_sections, Tensor):
        indices_or_sections = indices_or_sections.tolist()
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {k}")
        base, extra = divmod(n, k)
        bounds = np.cumsum([0] + [base + (1 if i < extra else 0) for i in range(k)]).tolist()
    else:
        cuts = [min(max(int(i) if i >= 0 else n + int(i), 0), n) for i in indices_or_sections]
        bounds = [0] + cuts + [n]
    return tuple(t.narrow(dim, a, max(b - a, 0)) for a, b in zip(bounds[:-1], bounds[1:]))


def hsplit(t, sections):
    return tensor_split(t, sections, 1 if t.ndim > 1 else 0)


def vsplit(t, sections):
    return tensor_split(t, sections, 0)


def dsplit(t, sections):
    return tensor_split(t, sections, 2)


def atleast_1d(*tensors):
    out = [t.reshape(1) if t.ndim == 0 else t for t in _flat(tensors)]
    return out[0] if len(out) == 1 and not _is_seq(tensors) else tuple(out)


def atleast_2d(*tensors):
    out = [t.reshape(1, 1) if t.ndim == 0 else t.reshape(1, -1) if t.ndim == 1 else t for t in _flat(tensors)]
    return out[0] if len(out) == 1 and not _is_seq(tensors) else tuple(out)


def atleast_3d(*tensors):
    def f(t):
        if t.ndim == 0:
            return t.reshape(1, 1, 1)
        if t.ndim == 1:
            return t.reshape(1, -1, 1)
        if t.ndim == 2:
            return t.unsqueeze(-1)
        return t
    out = [f(t) for t in _flat(tensors)]
    return out[0] if len(out) == 1 and not _is_seq(tensors) else tuple(out)


def cartesian_prod(*tensors):
    """Every combination of one element from each 1-D tensor, as rows (torch.cartesian_prod; itertools.product's
    order); one tensor is returned as it is."""
    from .creation import meshgrid

    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor) or t.ndim != 1:
            raise RuntimeError(f"cartesian_prod: expects 1-D tensors, got {getattr(t, 'shape', type(t).__name__)} "
                               f"at position {i}")
    if len(tensors) == 1:
        return tensors[0]
    return stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], dim=1)


def combinations(input, r=2, with_replacement=False):
    """The r-element combinations of a 1-D tensor's elements, as rows (torch.combinations; itertools' order), with
    gradients (the rows are picked by index)."""
    import itertools

    if not isinstance(input, Tensor) or input.ndim != 1:
        raise RuntimeError(f"combinations: expects a 1-D tensor, got {getattr(input, 'shape', type(input).__name__)}")
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(pick(np.arange(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if r == 0 or rows.size == 0:
        return input[:0] if r != 0 else input.new_empty((0,))
    index = Tensor(rows.reshape(-1), device=input.device)
    return input.index_select(0, index).reshape(rows.shape)


def block_diag(*tensors):
    """The tensors (0-d, 1-d as one row, or 2-d) on the diagonal of one matrix, zeros elsewhere
    (torch.block_diag), with gradients."""
    blocks = [t.reshape(1, 1) if t.ndim == 0 else (t.reshape(1, -1) if t.ndim == 1 else t) for t in tensors]
    for i, b in enumerate(blocks):
        if b.ndim != 2:
            raise RuntimeError(f"block_diag: input {i} must have 2 or fewer dimensions, got {tensors[i].ndim}")
    if not blocks:
        return Tensor._make(np.zeros((1, 0), dtype=np.float32))
    dtype = blocks[0].dtype
    for b in blocks[1:]:
        dtype = result_type(Tensor._make(np.zeros((), dtype)), b)
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        b = b.type(dtype)
        right = width - left - b.shape[1]
        pieces = [b.new_zeros((b.shape[0], left)), b, b.new_zeros((b.shape[0], right))]
        rows.append(cat([p for p in pieces if p.shape[1]] or [b], dim=1))
        left += b.shape[1]
    return cat(rows, dim=0)


# ------------------------------------------------------------------------------------------------ the scatter forms
def _index_tensor(positions, like):
    return Tensor(np.asarray(positions, dtype=np.int64), device=like.device)


def select_scatter(input, src, dim, index):
    """input with input.select(dim, index) replaced by src (a new tensor; gradients to both)."""
    dim = dim % input.ndim
    index = index % input.shape[dim]
    return input.index_copy(dim, _index_tensor([index], input), src.unsqueeze(dim))


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    """input with input[start:end:step] along dim replaced by src."""
    dim = dim % input.ndim
    positions = range(input.shape[dim])[slice(start, end, step)]
    return input.index_copy(dim, _index_tensor(list(positions), input), src)


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    """input with input.diagonal(offset, dim1, dim2) replaced by src (src's last dimension along the diagonal)."""
    d1, d2 = dim1 % input.ndim, dim2 % input.ndim
    x = input.movedim((d1, d2), (-2, -1))
    m, n = x.shape[-2:]
    rows = np.arange(max(0, -offset), min(m, n - offset))
    flat = x.reshape(tuple(x.shape[:-2]) + (m * n,)).index_copy(-1, _index_tensor(rows * n + rows + offset, input),
                                                                src)
    return flat.reshape(tuple(x.shape)).movedim((-2, -1), (d1, d2))


def split_with_sizes(self, split_sizes, dim=0):
    return self.split(list(split_sizes), dim)


def unsafe_chunk(self, chunks, dim=0):
    """chunk (torch's unsafe form skips the view checks minidl does not make)."""
    return self.chunk(chunks, dim)


def unsafe_split(self, split_size, dim=0):
    return self.split(split_size, dim)
