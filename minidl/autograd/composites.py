"""PyTorch functions that are compositions of minidl's own differentiable ops (so their gradients come from
the ops they are made of), plus `prod` (a Function of its own: its gradient must stay exact when an
element is zero) and a few predicates that need no gradient.

    prod, nansum, nanmean, count_nonzero, diag, diagonal, trace, outer, einsum, tensordot, kron,
    meshgrid, hstack, vstack, dstack, column_stack, atleast_1d/2d/3d, broadcast_to, broadcast_tensors,
    tile, repeat_interleave, movedim/moveaxis, swapaxes/swapdims, take_along_dim, addmm, addmv, addbmm,
    baddbmm, addcmul, addcdiv, logical_and/or/xor/not, isinf, isposinf, isneginf, isin, signbit,
    clamp_min, clamp_max, tril_indices, triu_indices, diff, nan_to_num, var_mean, std_mean, cross, and
    torch's aliases (multiply, divide, subtract, true_divide, negative, positive, greater, less, ...).

Each is checked against torch by PyTorch's OpInfo samples (tests/test_opinfo.py), gradients included.
"""
from __future__ import annotations

import numbers
import string

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from ._dims import normalize_dim
from .function import Function


def _tensor_class():
    from .tensor import Tensor

    return Tensor


def _axes(dim, ndim, op):
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, numbers.Integral) else tuple(dim)
    return tuple(normalize_dim(d, ndim, op) for d in dims)


# ------------------------------------------------------------------------------------------------ prod
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
    axis = normalize_dim(dim, max(t.ndim, 1), "prod")
    if t.ndim == 0:
        return Prod.apply(t)
    return Prod.apply(t, axis=axis, keepdims=keepdim)


# ------------------------------------------------------------------------------------------------ nan-aware
def nansum(t, dim=None, keepdim=False, *, dtype=None):
    safe = _where(t.isnan(), t.new_zeros(()), t) if _dtypes.is_floating(t.dtype) else t
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


def _where(cond, a, b):
    from .tensor import where

    return where(cond, a, b)


def count_nonzero(t, dim=None):
    if dim is None:
        return (t != 0).sum()
    return (t != 0).sum(dim=dim)


# ------------------------------------------------------------------------------------------------ diagonals
def diagonal(t, offset=0, dim1=0, dim2=1):
    """A view-like copy of the diagonal of dims dim1, dim2 (moved to the last axis), with its gradient."""
    if t.ndim < 2:
        raise RuntimeError(f"diagonal: expected a tensor of at least 2 dimensions, got {t.ndim}")
    d1, d2 = normalize_dim(dim1, t.ndim, "diagonal"), normalize_dim(dim2, t.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 cannot be equal, got {dim1} and {dim2}")
    return Diagonal.apply(t, offset=int(offset), dim1=d1, dim2=d2)


class Diagonal(Function):
    saves_inputs = False

    def forward(self, a, offset=0, dim1=0, dim2=1):
        self.shape, self.offset, self.dims = a.shape, offset, (dim1, dim2)
        return get_array_module(a).diagonal(a, offset, dim1, dim2).copy()

    def backward(self, g):
        xp = get_array_module(g)
        out = xp.zeros(self.shape, dtype=g.dtype)
        moved = xp.moveaxis(out, self.dims, (-2, -1))        # a writable view of `out`
        n = g.shape[-1]
        i = xp.arange(n)
        moved[..., i + max(-self.offset, 0), i + max(self.offset, 0)] = g
        return out


def diag(t, diagonal=0):
    """1-D -> a square matrix with t on its `diagonal`; 2-D -> that diagonal as 1-D (torch.diag)."""
    if t.ndim == 1:
        n = t.shape[0] + abs(diagonal)
        return DiagEmbed.apply(t, n=n, offset=int(diagonal))
    if t.ndim == 2:
        return Diagonal.apply(t, offset=int(diagonal), dim1=0, dim2=1)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {t.ndim}D")


class DiagEmbed(Function):
    saves_inputs = False

    def forward(self, v, n=0, offset=0):
        xp = get_array_module(v)
        self.offset, self.length = offset, v.shape[0]
        out = xp.zeros((n, n), dtype=v.dtype)
        i = xp.arange(v.shape[0])
        out[i + max(-offset, 0), i + max(offset, 0)] = v
        return out

    def backward(self, g):
        xp = get_array_module(g)
        i = xp.arange(self.length)
        return g[i + max(-self.offset, 0), i + max(self.offset, 0)]


def trace(t):
    if t.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {t.ndim}")
    return diagonal(t).sum()


# ------------------------------------------------------------------------------------------------ products
def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected two 1-D tensors, got {a.ndim}-D and {b.ndim}-D")
    return a.reshape(-1, 1) * b.reshape(1, -1)


ger = outer


class Einsum(Function):
    """xp.einsum forward; each operand's gradient is again an einsum: the output's gradient with the other
    operands, to that operand's subscripts. Subscripts repeated inside one operand (diagonals) are refused."""

    def forward(self, *arrays, spec=None):
        self.dtype = arrays[0].dtype
        if self.dtype in _dtypes.HALF_DTYPES:     # NumPy's and CuPy's einsum have no bfloat16: float32, rounded once
            arrays = tuple(a.astype(np.float32) for a in arrays)
        self.arrays, self.spec = arrays, spec
        return get_array_module(arrays[0]).einsum(spec, *arrays).astype(self.dtype, copy=False)

    def backward(self, g):
        xp = get_array_module(g)
        out_dtype = g.dtype
        g = g.astype(self.arrays[0].dtype, copy=False)
        ins, out = self.spec.split("->")
        subs = ins.split(",")
        grads = []
        for k, (s, a) in enumerate(zip(subs, self.arrays)):
            if not self.needs_input_grad[k]:
                grads.append(None)
                continue
            if len(set(s)) != len(s):            # a diagonal ('ii->i'): the gradient of its distinct subscripts,
                grads.append(_diagonal_grad(xp, self.spec, subs, k, g, self.arrays).astype(out_dtype, copy=False))
                continue                          # written onto the diagonal
            others = [(subs[j], self.arrays[j]) for j in range(len(subs)) if j != k]
            present = set(out) | set("".join(x for x, _ in others))
            missing = [c for c in s if c not in present]     # summed in this operand only: broadcast back
            spec = ",".join([out] + [x for x, _ in others]) + "->" + "".join(c for c in s if c not in missing)
            gk = xp.einsum(spec, g, *[y for _, y in others])
            if missing:
                gk = xp.broadcast_to(gk.reshape([a.shape[i] if c not in missing else 1 for i, c in enumerate(s)]),
                                     a.shape).copy()
            # a size-1 dimension that einsum broadcast against a longer one: sum the gradient back to 1
            wide = tuple(i for i in range(a.ndim) if a.shape[i] == 1 and gk.shape[i] != 1)
            if wide:
                gk = gk.sum(axis=wide, keepdims=True)
            if gk.shape != a.shape:   # this operand's axis met a size-1 one: the same gradient along it
                gk = xp.broadcast_to(gk, a.shape).copy()
            grads.append(gk.astype(out_dtype, copy=False))
        return tuple(grads)


def _diagonal_grad(xp, spec, subs, k, g, arrays):
    s, a = subs[k], arrays[k]
    unique = "".join(dict.fromkeys(s))
    sizes = {c: a.shape[s.index(c)] for c in unique}
    # the operand as if it had only its distinct subscripts: its gradient is an einsum as usual
    stand_in = xp.zeros([sizes[c] for c in unique], dtype=a.dtype)
    inner = Einsum()
    inner.arrays, inner.spec, inner.dtype = (tuple(arrays[:k]) + (stand_in,) + tuple(arrays[k + 1:]),
                                              ",".join(subs[:k] + [unique] + subs[k + 1:]) + "->" + spec.split("->")[1],
                                              a.dtype)
    inner.needs_input_grad = tuple(j == k for j in range(len(subs)))
    gu = inner.backward(g)[k]
    out = xp.zeros(a.shape, dtype=gu.dtype)
    grids = xp.meshgrid(*[xp.arange(sizes[c]) for c in unique], indexing="ij")
    out[tuple(grids[unique.index(c)] for c in s)] = gu
    return out


def _expand_ellipsis(eq, operands):
    """'...' as explicit letters, right-aligned as broadcasting aligns dimensions."""
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    used = set(c for c in eq if c in string.ascii_letters)
    free = [c for c in string.ascii_letters if c not in used]
    counts = [t.ndim - (len(term) - 3) if "..." in term else 0 for term, t in zip(terms, operands)]
    n = max(counts) if counts else 0
    letters = "".join(free[:n])
    terms = [term.replace("...", letters[n - c:]) for term, c in zip(terms, counts)]
    if arrow:
        rhs = rhs.replace("...", letters)
        return ",".join(terms) + "->" + rhs
    joined = "".join(terms)
    singles = "".join(sorted(c for c in set(joined) if joined.count(c) == 1 and c not in letters))
    return ",".join(terms) + "->" + letters + singles


def einsum(equation, *operands):
    """torch.einsum('ij,jk->ik', a, b) (operands also as one list). Implicit output ('ij,jk') and '...'
    follow NumPy's rules; a subscript repeated inside one operand (a diagonal, 'ii->i') is refused."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    if "..." in eq:
        eq = _expand_ellipsis(eq, operands)
    if "->" not in eq:   # implicit output: the subscripts seen once, in alphabetical order (NumPy's rule)
        letters = eq.replace(",", "")
        eq = eq + "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    subs = eq.split("->")[0].split(",")
    if len(subs) != len(operands):
        raise ValueError(f"einsum: the equation names {len(subs)} operands, got {len(operands)}")
    for s, t in zip(subs, operands):
        if len(s) != t.ndim:
            raise ValueError(f"einsum: subscripts '{s}' name {len(s)} dimensions, the operand has {t.ndim} ({tuple(t.shape)})")
        if any(c not in string.ascii_letters for c in s):
            raise ValueError(f"einsum: subscripts must be letters, got '{s}'")
    dtype = operands[0].dtype
    for t in operands[1:]:
        if t.dtype != dtype:
            raise RuntimeError(f"einsum(): expected all operands to have the same dtype, got {dtype} and {t.dtype}")
    return Einsum.apply(*operands, spec=eq)


def tensordot(a, b, dims=2):
    if isinstance(dims, numbers.Integral):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, numbers.Integral) else list(da)
        db = [db] if isinstance(db, numbers.Integral) else list(db)
    letters = iter(string.ascii_letters)
    sa = [next(letters) for _ in range(a.ndim)]
    sb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(da, db):
        sb[normalize_dim(j, b.ndim, "tensordot")] = sa[normalize_dim(i, a.ndim, "tensordot")]
    contracted = {sa[normalize_dim(i, a.ndim, "tensordot")] for i in da}
    out = [c for c in sa if c not in contracted] + [c for c in sb if c not in contracted]
    return einsum("".join(sa) + "," + "".join(sb) + "->" + "".join(out), a, b)


def kron(a, b):
    nd = max(a.ndim, b.ndim)
    a2 = a.reshape((1,) * (nd - a.ndim) + tuple(a.shape))
    b2 = b.reshape((1,) * (nd - b.ndim) + tuple(b.shape))
    inter_a = [s for d in a2.shape for s in (d, 1)]
    inter_b = [s for d in b2.shape for s in (1, d)]
    prod_ = a2.reshape(inter_a) * b2.reshape(inter_b)
    return prod_.reshape([x * y for x, y in zip(a2.shape, b2.shape)])


def cross(a, b, dim=None):
    if dim is None:
        dim = next((i for i, s in enumerate(np.broadcast_shapes(tuple(a.shape), tuple(b.shape))) if s == 3), None)
        if dim is None:
            raise RuntimeError("cross: no dimension of size 3 in the inputs")
    dim = normalize_dim(dim, max(a.ndim, b.ndim), "cross")
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {a.shape[dim]} and {b.shape[dim]}")
    a0, a1, a2 = a.unbind(dim)
    b0, b1, b2 = b.unbind(dim)
    from .tensor import stack

    return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], dim)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    return _add_scaled(input, mat1 @ mat2, beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    return _add_scaled(input, mat @ vec, beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    return _add_scaled(input, batch1 @ batch2, beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    if batch1.dtype in _dtypes.HALF_DTYPES:   # the sum over the batch accumulates in float32, rounded once
        return _add_scaled(input, (batch1.float() @ batch2.float()).sum(0).type(batch1.dtype), beta, alpha)
    return _add_scaled(input, (batch1 @ batch2).sum(0), beta, alpha)


def _add_scaled(input, product, beta, alpha):
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:                        # torch: input is ignored (its NaNs do not propagate)
        return scaled + input.new_zeros(tuple(input.shape))
    return (input if beta == 1 else input * beta) + scaled


def addcmul(input, tensor1, tensor2, *, value=1):
    return input + (tensor1 * tensor2 if value == 1 else tensor1 * tensor2 * value)


def addcdiv(input, tensor1, tensor2, *, value=1):
    if not _dtypes.is_floating(tensor1.dtype) and not _dtypes.is_floating(tensor2.dtype):
        raise RuntimeError("addcdiv: integer division with addcdiv is no longer supported, use torch.div")
    return input + (tensor1 / tensor2 if value == 1 else tensor1 / tensor2 * value)


# ------------------------------------------------------------------------------------------------ shapes
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


def _flat(tensors):
    return list(tensors[0]) if _is_seq(tensors) else list(tensors)


def _is_seq(tensors):
    return len(tensors) == 1 and isinstance(tensors[0], (list, tuple))


def hstack(tensors):
    from .tensor import cat

    ts = atleast_1d(list(tensors))
    return cat(list(ts), 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    from .tensor import cat

    return cat(list(atleast_2d(list(tensors))), 0)


def dstack(tensors):
    from .tensor import cat

    return cat(list(atleast_3d(list(tensors))), 2)


def column_stack(tensors):
    from .tensor import cat

    cols = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in tensors]
    return cat(cols, 1)


def broadcast_to(t, size):
    return t.expand(*size)


def broadcast_shapes(*shapes):
    from .return_types import Size

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


moveaxis = movedim


def swapaxes(t, axis0, axis1):
    return t.transpose(axis0, axis1)


swapdims = swapaxes


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
    return _where(indices < 0, indices + size, indices)


def repeat_interleave(t, repeats=None, dim=None, *, output_size=None):
    Tensor = _tensor_class()
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


def diff(t, n=1, dim=-1, prepend=None, append=None):
    from .tensor import cat

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


# ------------------------------------------------------------------------------------------------ predicates
def logical_and(a, b):
    return (a != 0) & (_as_tensor_like(a, b) != 0)


def logical_or(a, b):
    return (a != 0) | (_as_tensor_like(a, b) != 0)


def logical_xor(a, b):
    return (a != 0) != (_as_tensor_like(a, b) != 0)


def logical_not(a):
    return a == 0


def _as_tensor_like(a, b):
    Tensor = _tensor_class()
    return b if isinstance(b, Tensor) else Tensor._make(get_array_module(a._data).asarray(b))


def _predicate(fn):
    def run(t):
        Tensor = _tensor_class()
        return Tensor._make(fn(get_array_module(t._data), t._data))
    return run


isinf = _predicate(lambda xp, a: xp.isinf(a) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))
isposinf = _predicate(lambda xp, a: (xp.isinf(a) & (a > 0)) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))
isneginf = _predicate(lambda xp, a: (xp.isinf(a) & (a < 0)) if a.dtype.kind in "fcV" else xp.zeros(a.shape, dtype=bool))
signbit = _predicate(lambda xp, a: xp.signbit(a) if a.dtype.kind in "fcV" else a < 0)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    Tensor = _tensor_class()
    e = elements._data if isinstance(elements, Tensor) else np.asarray(elements)
    t = test_elements._data if isinstance(test_elements, Tensor) else np.asarray(test_elements)
    xp = get_array_module(e)
    t = xp.asarray(t)
    if xp is not np and _dtypes.bfloat16 in (e.dtype, t.dtype):   # CuPy cannot sort bfloat16: compare in float32
        e, t = e.astype(_dtypes.float32) if e.dtype == _dtypes.bfloat16 else e, t.astype(_dtypes.float32) \
            if t.dtype == _dtypes.bfloat16 else t
    if hasattr(xp, "isin"):
        return Tensor._make(xp.isin(e, t, invert=invert))
    found = (e[..., None] == t.reshape(-1)).any(-1)      # without isin: compare with every test element
    return Tensor._make(~found if invert else found)


def clamp_min(t, min):
    return t.clamp(min=min)


def clamp_max(t, max):
    return t.clamp(max=max)


def nan_to_num(t, nan=0.0, posinf=None, neginf=None):
    if not _dtypes.is_floating(t.dtype):
        return t.clone()
    fin = _dtypes.finfo(t.dtype)
    big = float(fin.max) if posinf is None else posinf
    small = float(fin.min) if neginf is None else neginf
    out = _where(t.isnan(), t.new_full((), nan), t)
    out = _where(isposinf(t), t.new_full((), big), out)
    return _where(isneginf(t), t.new_full((), small), out)


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


# ------------------------------------------------------------------------------------------------ factories
def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.tril_indices(row, offset, col), dtype, device)


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _tri_indices(np.triu_indices(row, offset, col), dtype, device)


def _tri_indices(pair, dtype, device):
    from .creation import tensor

    return tensor(np.stack(pair).astype(np.int64), dtype=dtype or np.int64, device=device)


def meshgrid(*tensors, indexing=None):
    ts = _flat(tensors)
    if indexing is None:
        indexing = "ij"      # torch's default (with a warning when not given); xy swaps the first two
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {tuple(t.shape)}")
    ts = [t.reshape(-1) for t in ts]
    swap = indexing == "xy" and len(ts) >= 2
    order = [1, 0] + list(range(2, len(ts))) if swap else list(range(len(ts)))
    shape = [ts[i].shape[0] for i in order]
    out = []
    for k, t in enumerate(ts):
        pos = order.index(k)
        view = [1] * len(ts)
        view[pos] = t.shape[0]
        out.append(t.reshape(view).expand(*shape))
    return tuple(out)


# torch's aliases of operations minidl has under another name
def multiply(a, b):
    return a * b


def divide(a, b, *, rounding_mode=None):
    return a.div(b, rounding_mode=rounding_mode) if rounding_mode is not None else a / b


true_divide = divide


def subtract(a, b, *, alpha=1):
    return a - (b if alpha == 1 else b * alpha)


def negative(t):
    return -t


def positive(t):
    return t


def greater(a, b):
    return a > b


def greater_equal(a, b):
    return a >= b


def less(a, b):
    return a < b


def less_equal(a, b):
    return a <= b


def not_equal(a, b):
    return a != b


def is_tensor(obj):
    return isinstance(obj, _tensor_class())


def is_floating_point(t):
    return _dtypes.is_floating(t.dtype)


def is_complex(t):
    return False



# ------------------------------------------------------------------------------------------------ more
def reshape_as(t, other):
    return t.reshape(tuple(other.shape))


def argwhere(t):
    return t.nonzero()


def unflatten(t, dim, sizes):
    dim = normalize_dim(dim, t.ndim, "unflatten")
    sizes = tuple(sizes)
    return t.reshape(tuple(t.shape[:dim]) + sizes + tuple(t.shape[dim + 1:]))


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


def msort(t):
    return t.sort(dim=0).values


def aminmax(t, *, dim=None, keepdim=False):
    from .return_types import aminmax as result

    if dim is None:
        lo, hi = t.amin(), t.amax()
        if keepdim:
            lo, hi = lo.reshape((1,) * t.ndim), hi.reshape((1,) * t.ndim)
        return result(lo, hi)
    return result(t.amin(dim, keepdim=keepdim), t.amax(dim, keepdim=keepdim))


def tensor_split(t, indices_or_sections, dim=0):
    Tensor = _tensor_class()
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


def unique(t, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct values, sorted (no gradient), as torch.unique; dim=None only."""
    Tensor = _tensor_class()
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


def bincount(t, weights=None, minlength=0):
    Tensor = _tensor_class()
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


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    Tensor = _tensor_class()
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


def cumprod(t, dim, *, dtype=None):
    if dtype is not None:
        t = t.type(dtype)
    elif t.dtype == np.bool_ or t.dtype.kind in "iu":
        t = t.long()
    if t.ndim == 0:
        return t.clone()
    return CumProd.apply(t, axis=normalize_dim(dim, t.ndim, "cumprod"))


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


def cummax(t, dim):
    from .return_types import cummax as result

    if t.ndim == 0:
        return result(t.clone(), t.new_zeros((), dtype=np.int64))
    values, index = CumExtreme.apply(t, axis=normalize_dim(dim, t.ndim, "cummax"), how="max")
    return result(values, index)


def cummin(t, dim):
    from .return_types import cummin as result

    if t.ndim == 0:
        return result(t.clone(), t.new_zeros((), dtype=np.int64))
    values, index = CumExtreme.apply(t, axis=normalize_dim(dim, t.ndim, "cummin"), how="min")
    return result(values, index)


def logcumsumexp(t, dim):
    if t.ndim == 0:
        return t.clone()
    dim = normalize_dim(dim, t.ndim, "logcumsumexp")
    if t.dtype in _dtypes.HALF_DTYPES:       # in float32, rounded once (the running sums need the bits)
        return logcumsumexp(t.float(), dim).type(t.dtype)
    m = t.detach().amax(dim, keepdim=True)
    m = _where(m.isfinite(), m, m.new_zeros(()))
    return (t - m).exp().cumsum(dim).log() + m



def absolute(t):
    return t.abs()


def concatenate(tensors, dim=0, *, axis=None):
    from .tensor import cat

    return cat(tensors, dim if axis is None else axis)


def ravel(t):
    return t.reshape(-1)


def inner(a, b):
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    # out[a's leading dims, b's leading dims] = sum over the last dim of a * b
    left = a.reshape(tuple(a.shape[:-1]) + (1,) * (b.ndim - 1) + (a.shape[-1],))
    right = b.reshape((1,) * (a.ndim - 1) + tuple(b.shape))
    return (left * right).sum(-1)


def vdot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return (a * b).sum()


def floor_divide(a, b):
    from .tensor import Tensor

    a = a if isinstance(a, Tensor) else _as_tensor_like(b, a)
    return a.div(b, rounding_mode="floor")


def fmax(a, b):
    """The larger of a and b, ignoring a NaN when the other is a number (torch.fmax)."""
    return _where(a.isnan(), b, _where(b.isnan(), a, a.maximum(b)))


def fmin(a, b):
    return _where(a.isnan(), b, _where(b.isnan(), a, a.minimum(b)))


def select(t, dim, index):
    dim = normalize_dim(dim, t.ndim, "select")
    n = t.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {tuple(t.shape)} at dimension {dim}")
    return t.narrow(dim, index % n, 1).squeeze(dim)


def take(t, index):
    flat = t.reshape(-1)
    return flat.gather(0, _wrap_negative(index.reshape(-1), flat.shape[0])).reshape(tuple(index.shape))


def sgn(t):
    return t.sign()


def is_nonzero(t):
    if t.numel() != 1:
        raise RuntimeError(f"Boolean value of Tensor with {'no values' if t.numel() == 0 else 'more than one value'} is ambiguous")
    return bool(t.item() != 0)


def heaviside(t, values):
    zero = t.new_zeros(())
    return _where(t == 0, values.expand(*np.broadcast_shapes(tuple(t.shape), tuple(values.shape))),
                  _where(t > 0, zero + 1, zero)).type(t.dtype)


def _bitwise(name, fn):
    def run(a, b):
        b = b if isinstance(b, _tensor_class()) else _as_tensor_like(a, b)
        if _dtypes.is_floating(a.dtype) or _dtypes.is_floating(b.dtype):
            raise RuntimeError(f"{name}: not implemented for floating-point tensors (integer or bool only)")
        return fn(a, b)
    run.__name__ = name
    return run


bitwise_and = _bitwise("bitwise_and", lambda a, b: a & b)
bitwise_or = _bitwise("bitwise_or", lambda a, b: a | b)


def bitwise_not(t):
    if _dtypes.is_floating(t.dtype):
        raise RuntimeError("bitwise_not: not implemented for floating-point tensors (integer or bool only)")
    return ~t


FUNCTIONS = [
    "prod", "nansum", "nanmean", "count_nonzero", "diag", "diagonal", "trace", "outer", "ger", "einsum", "tensordot",
    "kron", "cross", "addmm", "addmv", "baddbmm", "addbmm", "addcmul", "addcdiv", "atleast_1d", "atleast_2d",
    "atleast_3d", "hstack", "vstack", "dstack", "column_stack", "broadcast_to", "broadcast_shapes",
    "broadcast_tensors", "tile", "movedim", "moveaxis", "swapaxes", "swapdims", "take_along_dim", "repeat_interleave",
    "diff", "logical_and", "logical_or", "logical_xor", "logical_not", "isinf", "isposinf", "isneginf", "signbit",
    "isin", "clamp_min", "clamp_max", "nan_to_num", "var_mean", "std_mean", "tril_indices", "triu_indices",
    "meshgrid", "multiply", "divide", "true_divide", "subtract", "negative", "positive", "greater", "greater_equal",
    "less", "less_equal", "not_equal", "is_tensor", "is_floating_point", "is_complex",
    "argwhere", "unflatten", "fliplr", "flipud", "rot90", "msort", "aminmax", "tensor_split", "hsplit", "vsplit",
    "dsplit", "unique", "bincount", "searchsorted", "bucketize", "cumprod", "cummax", "cummin", "logcumsumexp",
    "index_add", "absolute", "concatenate", "ravel", "inner", "vdot", "floor_divide", "fmax", "fmin", "select", "take", "sgn",
    "is_nonzero", "heaviside", "bitwise_and", "bitwise_or", "bitwise_not",
]
# the ones that are Tensor methods too (t.prod(), t.diagonal(), ...)
METHODS = [
    "prod", "nansum", "nanmean", "count_nonzero", "diag", "diagonal", "trace", "outer", "ger", "tensordot", "kron",
    "cross", "addmm", "addmv", "baddbmm", "addbmm", "addcmul", "addcdiv", "broadcast_to", "tile", "movedim",
    "moveaxis", "swapaxes", "swapdims", "take_along_dim", "repeat_interleave", "diff", "logical_and", "logical_or",
    "logical_xor", "logical_not", "isinf", "isposinf", "isneginf", "signbit", "clamp_min", "clamp_max", "nan_to_num",
    "multiply", "divide", "true_divide", "subtract", "negative", "positive", "greater", "greater_equal", "less",
    "less_equal", "not_equal", "is_floating_point", "is_complex",
    "unfold", "sum_to_size", "index_add", "pin_memory", "is_pinned", "data_ptr", "storage_offset",
    "reshape_as", "argwhere", "unflatten", "fliplr", "flipud", "rot90", "msort", "aminmax", "tensor_split", "hsplit",
    "vsplit", "dsplit", "unique", "bincount", "cumprod", "cummax", "cummin", "logcumsumexp",
    "absolute", "ravel", "inner", "vdot", "floor_divide", "fmax", "fmin", "select", "take", "sgn", "is_nonzero",
    "heaviside", "bitwise_and", "bitwise_or", "bitwise_not",
]


# ------------------------------------------------------------------------------------------------ Tensor extras
def unfold(t, dimension, size, step):
    """Every window of `size` elements along `dimension`, `step` apart, as a new last dimension (Tensor.unfold)."""
    Tensor = _tensor_class()
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


def index_add(t, dim, index, source, *, alpha=1):
    """t with alpha * source's slices added at `index` along dim (repeated indices add up), with gradients."""
    Tensor = _tensor_class()
    dim = normalize_dim(dim, max(t.ndim, 1), "index_add")
    if t.ndim == 0:                         # a scalar: source added once per index entry (each must be 0)
        hits = (index.reshape(-1) == 0).type(t.dtype).sum()
        return t + source.reshape(()) * hits * alpha
    n = t.shape[dim]
    onehot = (index.reshape(-1, 1) == Tensor(np.arange(n), device=t.device).reshape(1, -1)).type(t.dtype)   # (k, n)
    src = movedim(source, dim, -1)
    added = movedim(src @ onehot, -1, dim)
    return t + (added * alpha if alpha != 1 else added)


def pin_memory(t, device=None):
    return t


def is_pinned(t, device=None):
    return False


def data_ptr(t):
    a = t._data
    return int(a.data.ptr) if hasattr(a, "data") and hasattr(a.data, "ptr") else int(a.__array_interface__["data"][0])


def storage_offset(t):
    base = t._base._data if t._base is not None else None
    if base is None:
        return 0
    return (data_ptr(t) - data_ptr(t._base)) // t._data.itemsize
