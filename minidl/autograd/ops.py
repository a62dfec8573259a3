"""The core differentiable ops: elementwise math, reductions, shapes, indexing, joining, matmul.

Each op is one Function: its forward and its backward, side by side. They work on plain arrays and
use `xp` = NumPy or CuPy (whichever the array lives on), so every op here is written once for both
devices. The deep-learning primitives (convolution, pooling, ...) are in minidl.primitives and are
wrapped as Functions in minidl.nn.functional.
"""
from __future__ import annotations

import numpy as np

from .._device import get_array_module
from .. import _dtypes, _layout
from .._dtypes import float32, is_floating, is_half
from ._dims import reduction_axes
from .function import Function, unbroadcast

# ------------------------------------------------------------------------------------------------
# Elementwise, binary (with broadcasting: gradients are summed back to each input's shape)
# ------------------------------------------------------------------------------------------------


class Add(Function):
    saves_inputs = False

    def forward(self, a, b):
        self.shapes = (a.shape, b.shape)
        return _layout.pointwise(lambda x, y: x + y, a, b)

    def backward(self, g):
        return unbroadcast(g, self.shapes[0]), unbroadcast(g, self.shapes[1])


class Sub(Function):
    saves_inputs = False

    def forward(self, a, b):
        self.shapes = (a.shape, b.shape)
        return _layout.pointwise(lambda x, y: x - y, a, b)

    def backward(self, g):
        return unbroadcast(g, self.shapes[0]), unbroadcast(-g, self.shapes[1])


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return _layout.pointwise(lambda x, y: x * y, a, b)

    def backward(self, g):
        ga = unbroadcast(g * self.b, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * self.a, self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Div(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return _layout.pointwise(lambda x, y: x / y, a, b)

    def backward(self, g):
        ga = unbroadcast(g / self.b, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * self.a / (self.b * self.b), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Pow(Function):
    """a ** b for tensors a and b (b may be a broadcast scalar array)."""

    saves_output = True

    def forward(self, a, b):
        self.a, self.b = a, b
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/inf as torch, no warning
            self.out = a**b
        return self.out

    def backward(self, g):
        xp = get_array_module(g)
        ga = gb = None
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            if self.needs_input_grad[0]:
                ga = unbroadcast(g * self.b * self.a ** (self.b - 1), self.a.shape)
            if self.needs_input_grad[1]:
                # d(a^b)/db = a^b log a, defined as 0 where a^b == 0 (the limit for a -> 0+).
                log_a = xp.log(xp.where(self.a > 0, self.a, 1))
                gb = unbroadcast(g * self.out * log_a, self.b.shape)
        return ga, gb


class Maximum(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return get_array_module(a).maximum(a, b)

    def backward(self, g):
        # Ties split the gradient evenly, as PyTorch does.
        a_wins = (self.a > self.b).astype(g.dtype) + 0.5 * (self.a == self.b).astype(g.dtype)
        return unbroadcast(g * a_wins, self.a.shape), unbroadcast(g * (1 - a_wins), self.b.shape)


class Minimum(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return get_array_module(a).minimum(a, b)

    def backward(self, g):
        a_wins = (self.a < self.b).astype(g.dtype) + 0.5 * (self.a == self.b).astype(g.dtype)
        return unbroadcast(g * a_wins, self.a.shape), unbroadcast(g * (1 - a_wins), self.b.shape)


class Where(Function):
    saves_inputs = False

    def forward(self, cond, a, b):
        self.cond, self.shapes = cond, (a.shape, b.shape)
        return _dtypes.where(get_array_module(a), cond, a, b)

    def backward(self, g):
        xp, zero = get_array_module(g), g.dtype.type(0)
        ga = unbroadcast(_dtypes.where(xp, self.cond, g, zero), self.shapes[0])
        gb = unbroadcast(_dtypes.where(xp, self.cond, zero, g), self.shapes[1])
        return None, ga, gb


# ------------------------------------------------------------------------------------------------
# Elementwise, unary
# ------------------------------------------------------------------------------------------------


class Neg(Function):
    saves_inputs = False

    def forward(self, a):
        return -a

    def backward(self, g):
        return -g


class Sign(Function):
    def forward(self, a):
        return get_array_module(a).sign(a)

    def backward(self, g):
        return get_array_module(g).zeros_like(g)


class Exp(Function):
    saves_output = True

    def forward(self, a):
        if type(a) is np.ndarray:
            with np.errstate(over="ignore"):     # overflow gives inf silently, as torch
                self.out = np.exp(a)
        else:
            self.out = get_array_module(a).exp(a)
        return self.out

    def backward(self, g):
        return g * self.out


# log, log1p and sqrt outside their domain give -inf / NaN as in torch, without NumPy's RuntimeWarnings.
_QUIET = dict(divide="ignore", invalid="ignore")


class Log(Function):
    def forward(self, a):
        self.a = a
        with np.errstate(**_QUIET):
            return get_array_module(a).log(a)

    def backward(self, g):
        with np.errstate(**_QUIET):
            return g / self.a


class Log1p(Function):
    """log(1 + a), accurate for small a (not log of a rounded 1 + a); the gradient is 1 / (1 + a)."""

    def forward(self, a):
        self.a = a
        with np.errstate(**_QUIET):
            return get_array_module(a).log1p(a)

    def backward(self, g):
        with np.errstate(**_QUIET):
            return g / (1 + self.a)


class Sqrt(Function):
    saves_output = True

    def forward(self, a):
        with np.errstate(**_QUIET):
            self.out = get_array_module(a).sqrt(a)
        return self.out

    def backward(self, g):
        with np.errstate(**_QUIET):
            return g / (2 * self.out)


class Abs(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).abs(a)

    def backward(self, g):
        return g * get_array_module(g).sign(self.a)


class Clamp(Function):
    saves_inputs = False

    def forward(self, a, min=None, max=None):
        xp = get_array_module(a)
        self.mask = xp.ones(a.shape, dtype=bool)
        if min is not None:
            self.mask &= a >= min
        if max is not None:
            self.mask &= a <= max
        if xp is not np and a.dtype == _dtypes.bfloat16:
            # CuPy's clip takes no None bound for bfloat16 ("Unsupported type NoneType"): bound by bound,
            # each a 0-d bfloat16 array
            out = a
            if min is not None:
                out = xp.maximum(out, xp.asarray(min, dtype=a.dtype))
            if max is not None:
                out = xp.minimum(out, xp.asarray(max, dtype=a.dtype))
            return out.copy() if out is a else out
        # astype: NumPy clips a bfloat16 array against Python floats in float32
        return xp.clip(a, min, max).astype(a.dtype, copy=False)

    def backward(self, g):
        return g * self.mask


class ClampTensor(Function):
    """clamp with tensor bounds (lo, hi broadcast against a; either may be None). Gradients as torch:
    a gets g where lo <= a <= hi; lo where a < lo (and lo < hi); hi where a > hi (or hi < lo)."""

    def forward(self, a, lo=None, hi=None):
        xp = get_array_module(a)
        self.a, self.lo, self.hi = a, lo, hi
        out = a
        if lo is not None:
            out = xp.maximum(out, lo)
        if hi is not None:
            out = xp.minimum(out, hi)
        return xp.broadcast_to(out, np.broadcast_shapes(*(x.shape for x in (a, lo, hi) if x is not None))).copy()

    def backward(self, g):
        xp = get_array_module(g)
        a, lo, hi = self.a, self.lo, self.hi
        zero = g.dtype.type(0)
        keep_a = xp.ones(a.shape, dtype=bool)
        if lo is not None:
            keep_a = keep_a & (a >= lo)
        if hi is not None:
            keep_a = keep_a & (a <= hi)
        ga = unbroadcast(xp.where(keep_a, g, zero), a.shape) if self.needs_input_grad[0] else None
        glo = ghi = None
        if lo is not None and self.needs_input_grad[1]:
            to_lo = (a < lo) & (lo < hi) if hi is not None else a < lo
            glo = unbroadcast(xp.where(to_lo, g, zero), lo.shape)
        if hi is not None and self.needs_input_grad[2]:
            to_hi = (a > hi) | (hi < lo) if lo is not None else a > hi
            ghi = unbroadcast(xp.where(to_hi, g, zero), hi.shape)
        return ga, glo, ghi


class Cast(Function):
    """Change dtype; the gradient flows back in the input's dtype. A value beyond float16's range
    becomes inf, silently, as in PyTorch (GradScaler looks for exactly that)."""

    saves_inputs = False

    def forward(self, a, dtype=None):
        self.in_dtype = a.dtype
        with np.errstate(over="ignore"):
            return a.astype(dtype)

    def backward(self, g):
        with np.errstate(over="ignore"):
            return g.astype(self.in_dtype)


# ------------------------------------------------------------------------------------------------
# Reductions
# ------------------------------------------------------------------------------------------------


def open_grid(xp, shape):
    """[arange(n0) shaped (n0, 1, ...), arange(n1) shaped (1, n1, ...), ...]: NumPy's
    indices(shape, sparse=True), which CuPy lacks; with one entry replaced by an index array it is the
    advanced index of gather / scatter along that dim."""
    shape = tuple(shape)
    return [xp.arange(n).reshape((1,) * i + (n,) + (1,) * (len(shape) - i - 1)) for i, n in enumerate(shape)]


def _bfloat16_on_gpu(a) -> bool:
    """CuPy cannot sort, cumsum or round bfloat16 arrays (no kernels for that type): those ops widen
    them to float32, where every bfloat16 value is exact, and round the result back once."""
    return a.dtype == _dtypes.bfloat16 and get_array_module(a) is not np


def _axes(dim, ndim, op="reduction"):
    """The axes to reduce (every one for dim=None); dims are checked in minidl.autograd._dims."""
    return reduction_axes(dim, ndim, op)


def _expand_back(g, shape, axes, keepdim):
    """Reinsert reduced axes (size 1) so g broadcasts against the input shape."""
    if not keepdim:
        g = g.reshape([1 if i in axes else s for i, s in enumerate(shape)])
    return g


def _accumulation_dtype(a):
    """Half tensors are summed in float32 (one rounding at the end), as PyTorch and cuDNN do: a
    float16 running sum stops growing once it is 2048 times its addends."""
    return float32 if is_half(a.dtype) else None


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
        return get_array_module(g).broadcast_to(g, self.shape).copy()


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


class Var(Function):
    """Variance with Bessel's correction by default (correction=1), as torch.var."""

    saves_inputs = False

    def forward(self, a, dim=None, keepdim=False, correction=1):
        self.shape, self.axes, self.keepdim = a.shape, _axes(dim, a.ndim), keepdim
        count = int(np.prod([a.shape[i] for i in self.axes])) if a.ndim else 1
        self.denom = max(count - correction, 0)
        wide = a.astype(float32) if is_half(a.dtype) else a
        # count 0 or denom 0 give NaN/inf, as torch; NumPy's warnings about it are silenced.
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = wide.sum(axis=self.axes, keepdims=True) / wide.dtype.type(max(count, 1))
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


# ------------------------------------------------------------------------------------------------
# Shapes
# ------------------------------------------------------------------------------------------------


class Reshape(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, shape=None):
        self.in_shape = a.shape
        return a.reshape(shape)

    def backward(self, g):
        return g.reshape(self.in_shape)


class Permute(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, dims=None):
        self.dims = tuple(dims)  # normalised by Tensor.permute (minidl.autograd._dims)
        return a.transpose(self.dims)

    def backward(self, g):
        return g.transpose(tuple(np.argsort(self.dims)))


class Expand(Function):
    saves_inputs = False
    may_return_view = True

    def forward(self, a, shape=None):
        self.in_shape = a.shape
        return get_array_module(a).broadcast_to(a, shape)

    def backward(self, g):
        return unbroadcast(g, self.in_shape)


class Contiguous(Function):
    saves_inputs = False

    def forward(self, a):
        # ascontiguousarray makes a 0-d array 1-d: keep the shape
        return get_array_module(a).ascontiguousarray(a).reshape(a.shape)

    def backward(self, g):
        return g


class Remainder(Function):
    """a - b * floor(a / b) (Python's %, torch.remainder: the sign of b); da = 1, db = -floor(a / b)."""

    def forward(self, a, b):
        self.a, self.b = a, b
        return a % b

    def backward(self, g):
        xp = get_array_module(g)
        ga = unbroadcast(g, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * xp.floor(self.a / self.b), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Relayout(Function):
    """The same values in another memory format (minidl._layout): channels_last (NHWC memory) or row-major.
    A copy; the gradient passes through unchanged (its layout is the consumer's business)."""

    saves_inputs = False

    def forward(self, a, channels_last=False, copy=False):
        if copy:
            return _layout.copy_as(a, channels_last)
        return _layout.to_channels_last(a) if channels_last else _layout.to_contiguous(a)

    def backward(self, g):
        return g


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
# Indexing and joining
# ------------------------------------------------------------------------------------------------


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


class Stack(Function):
    saves_inputs = False

    def forward(self, *arrays, dim=0):
        xp = get_array_module(*arrays)
        self.dim = dim  # normalised by stack()
        return xp.stack(arrays, axis=self.dim)

    def backward(self, g):
        xp = get_array_module(g)
        return tuple(xp.take(g, i, axis=self.dim) for i in range(g.shape[self.dim]))


# ------------------------------------------------------------------------------------------------
# Matrix product (batched, with broadcasting over leading dims)
# ------------------------------------------------------------------------------------------------


_GEMM_DTYPES = ("float32", "float16", "bfloat16")


def _matmul(a, b, trans_a=False, trans_b=False):
    """op(a) @ op(b) with matmul's broadcasting (op = swap the last two axes when trans_*).

    On the GPU, 2-D and 3-D products (equal batch, or one side 2-D) of float32 / float16 / bfloat16
    run on the primitive library's GEMM: our SGEMM, or our tensor-core GEMM for float32 when
    minidl.backends.cuda.matmul.allow_tf32 is set (TF32) and always for the half types; cuBLAS
    with minidl.backends.cuda.use_cublas. Other broadcasts, float64, and the CPU use xp.matmul."""
    xp = get_array_module(a)
    if xp is not np and (a.ndim in (2, 3) and b.ndim in (2, 3) and a.dtype == b.dtype and a.dtype.name in _GEMM_DTYPES
                         and not (a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0])):
        from .. import backends, primitives

        return primitives.gemm(a, b, trans_a=trans_a, trans_b=trans_b, use_cublas=backends.cuda.use_cublas,
                               math=backends.math_for_matmul(a.dtype))
    op_a = xp.swapaxes(a, -1, -2) if trans_a else a
    op_b = xp.swapaxes(b, -1, -2) if trans_b else b
    if is_half(a.dtype):
        # NumPy has no half BLAS (ml_dtypes' bfloat16 matmul returns float32) and CuPy's matmul refuses
        # bfloat16 ("data type 'E' not understood"): multiply in float32 and round once, as a tensor
        # core accumulates in float32.
        return xp.matmul(op_a.astype(float32), op_b.astype(float32)).astype(a.dtype)
    return xp.matmul(op_a, op_b)


class MatMul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return _matmul(a, b)

    def backward(self, g):
        xp = get_array_module(g)
        a, b = self.a, self.b
        # Promote 1-D operands to matrices so one formula serves every case, then undo.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = g
        # b's axis first: when both are 1-D, g is 0-d and only gains the axis -2 after this one.
        if b.ndim == 1:
            g2 = xp.expand_dims(g2, -1)
        if a.ndim == 1:
            g2 = xp.expand_dims(g2, -2)
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = _matmul(g2, b2, trans_b=True)
            ga = unbroadcast(ga, a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = _matmul(a2, g2, trans_a=True)
            gb = unbroadcast(gb, b2.shape).reshape(b.shape)
        return ga, gb


# ------------------------------------------------------------------------------------------------
# Ops of PyTorch's Tensor surface used by tutorials and example programs (issue #16)
# ------------------------------------------------------------------------------------------------


class Sin(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).sin(a)

    def backward(self, g):
        return g * get_array_module(g).cos(self.a)


class Cos(Function):
    def forward(self, a):
        self.a = a
        return get_array_module(a).cos(a)

    def backward(self, g):
        return -g * get_array_module(g).sin(self.a)


def _python_floor_divide(xp, a, b):
    """Floor division with Python's (NumPy's, torch's) rounding for floats: from fmod, so -1e-30 // 3 is
    -1 (CuPy's floor_divide is floor(a / b), which gives -0 there)."""
    mod = xp.fmod(a, b)
    div = (a - mod) / b
    div = xp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = xp.floor(div)
    floored = xp.where(div - floored > 0.5, floored + 1, floored)
    return xp.where(div == 0, xp.copysign(xp.zeros_like(div), a / b), floored).astype(a.dtype, copy=False)


class RoundedDiv(Function):
    """a / b rounded toward zero (mode 'trunc') or down (mode 'floor': Python's and torch's floor
    division), in a's dtype (integers stay integers). torch defines the gradient as zero."""

    saves_inputs = False

    def forward(self, a, b, mode="trunc"):
        xp = get_array_module(a)
        self.shapes = (a.shape, b.shape)
        if _bfloat16_on_gpu(a):
            # As torch (and ml_dtypes on the CPU): the quotient rounded to bfloat16, then rounded down/to zero.
            a, b = a.astype(float32), b.astype(float32)
            if mode == "trunc":
                return xp.trunc((a / b).astype(_dtypes.bfloat16).astype(float32)).astype(_dtypes.bfloat16)
            return self.forward(a, b, mode).astype(_dtypes.bfloat16)
        with np.errstate(divide="ignore", invalid="ignore"):
            if mode == "floor" and xp is not np and is_floating(a.dtype):
                return _python_floor_divide(xp, a, b)
            if mode == "floor":
                return xp.floor_divide(a, b)
            if is_floating(a.dtype):
                return xp.trunc(a / b)
            q = xp.floor_divide(a, b)   # integers toward zero: floor, plus one where it rounded a negative down
            return q + ((q < 0) & (q * b != a)).astype(q.dtype)

    def backward(self, g):
        xp = get_array_module(g)
        return xp.zeros(self.shapes[0], dtype=g.dtype), xp.zeros(self.shapes[1], dtype=g.dtype)


class Round(Function):
    """floor / ceil / round (half to even, as torch) / trunc; the gradient is zero almost everywhere,
    and PyTorch defines it as zero."""

    saves_inputs = False

    def forward(self, a, how="round"):
        fn = getattr(get_array_module(a), {"round": "round", "floor": "floor", "ceil": "ceil", "trunc": "trunc"}[how])
        if _bfloat16_on_gpu(a):
            return fn(a.astype(float32)).astype(a.dtype)
        return fn(a)

    def backward(self, g):
        return get_array_module(g).zeros_like(g)


class Sort(Function):
    """(values, indices) along dim, stable (equal values keep their order). The gradient of values
    goes back to the positions the indices name."""

    saves_inputs = False

    def forward(self, a, dim=-1, descending=False):
        xp = get_array_module(a)
        self.shape, self.dim = a.shape, dim
        if _bfloat16_on_gpu(a):   # sort the exact float32 twins; the values are the original ones
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


class CumSum(Function):
    saves_inputs = False

    def forward(self, a, dim=0):
        self.dim = dim
        if _bfloat16_on_gpu(a):
            return get_array_module(a).cumsum(a.astype(float32), axis=dim).astype(a.dtype)
        return get_array_module(a).cumsum(a, axis=dim, dtype=a.dtype if is_floating(a.dtype) else np.int64)

    def backward(self, g):
        xp = get_array_module(g)
        wide = g.astype(float32) if _bfloat16_on_gpu(g) else g
        return xp.flip(xp.cumsum(xp.flip(wide, axis=self.dim), axis=self.dim), axis=self.dim).astype(g.dtype, copy=False)


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
        if reduce_add and _bfloat16_on_gpu(a):   # CuPy's add.at has no bfloat16: add in float32, round once
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
