"""Matrix products: the one GEMM route of `a @ b` (MatMul: NumPy/cuBLAS matmul, batched with broadcasting),
its named forms (mm, bmm, mv, dot, inner, outer), einsum, tensordot, kron, cross, addmm & co., and diagonals.
nn.Linear runs on the primitive library's GEMM instead (nn/functional/dense.py)."""
from __future__ import annotations

import numbers
import string

import numpy as np

from .. import _device, _dtypes, backends, primitives
from .._device import get_array_module
from .._dtypes import bfloat16, float16, float32, is_half
from ..amp import autocast_mode as _amp
from ..autograd.function import Function, unbroadcast
from ..autograd.higher_order import saved_input, sum_to
from ..autograd.tensor import Tensor
from ._args import operand, promote
from ._dims import normalize_dim
from .joining import stack
from .sparse import SparseTensor
from .sparse import mm as sparse_mm


# ------------------------------------------------------------------------------------------------
# Functions
# ------------------------------------------------------------------------------------------------

_GEMM_DTYPES = frozenset((float32, float16, bfloat16))   # dtype objects: `dtype.name` costs ~2 us a call


def _matmul(a, b, trans_a=False, trans_b=False):
    """op(a) @ op(b) with matmul's broadcasting (op = swap the last two axes when trans_*).

    On the GPU, 2-D and 3-D products (equal batch, or one side 2-D) of float32 / float16 / bfloat16
    run on the primitive library's GEMM: our SGEMM, or our tensor-core GEMM for float32 when
    minidl.backends.cuda.matmul.allow_tf32 is set (TF32) and always for the half types; cuBLAS
    with minidl.backends.cuda.use_cublas. Other broadcasts, float64, and the CPU use xp.matmul."""
    xp = get_array_module(a)
    if xp is not np and (a.ndim in (2, 3) and b.ndim in (2, 3) and a.dtype == b.dtype and a.dtype in _GEMM_DTYPES
                         and not (a.ndim == 3 and b.ndim == 3 and a.shape[0] != b.shape[0])):
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

    def backward_graph(self, g):   # (the backward as tensor ops: autograd/higher_order.py)
        a, b = saved_input(self, 0, self.a), saved_input(self, 1, self.b)
        a2 = a.unsqueeze(0) if a.ndim == 1 else a
        b2 = b.unsqueeze(-1) if b.ndim == 1 else b
        g2 = g.unsqueeze(-1) if b.ndim == 1 else g
        g2 = g2.unsqueeze(-2) if a.ndim == 1 else g2
        ga = sum_to(g2 @ b2.mT, a2.shape).reshape(a.shape) if self.needs_input_grad[0] else None
        gb = sum_to(a2.mT @ g2, b2.shape).reshape(b.shape) if self.needs_input_grad[1] else None
        return ga, gb


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


class DiagEmbed(Function):
    saves_inputs = False

    def forward(self, v, n=0, offset=0):
        """v (..., m) -> (..., n, n) with v on the `offset` diagonal of the last two dims."""
        xp = get_array_module(v)
        self.offset, self.length = offset, v.shape[-1]
        out = xp.zeros(v.shape[:-1] + (n, n), dtype=v.dtype)
        i = xp.arange(v.shape[-1])
        out[..., i + max(-offset, 0), i + max(offset, 0)] = v
        return out

    def backward(self, g):
        xp = get_array_module(g)
        i = xp.arange(self.length)
        return g[..., i + max(-self.offset, 0), i + max(self.offset, 0)]


class Cdist(Function):
    """The p-norm distance of every row of x1 to every row of x2: (..., P, M), (..., R, M) -> (..., P, R)
    (torch.cdist). The gradient of a zero distance is zero, as torch's (the p-norm has none there)."""

    saves_inputs = False

    def forward(self, x1, x2, p=2.0):
        xp = get_array_module(x1)
        diff = x1[..., :, None, :] - x2[..., None, :, :]
        a = xp.abs(diff)
        if p == 0:
            d = (a != 0).sum(-1).astype(diff.dtype)
        elif p == 1:
            d = a.sum(-1)
        elif p == 2:
            d = xp.sqrt((diff * diff).sum(-1))
        elif p == float("inf"):
            d = a.max(-1) if a.shape[-1] else a.sum(-1)
        else:
            d = (a ** p).sum(-1) ** (1.0 / p)
        self.diff, self.d, self.p, self.shapes = diff, d, p, (x1.shape, x2.shape)
        return d

    def backward(self, g):
        with np.errstate(divide="ignore", invalid="ignore"):   # (0 ** negative: masked below, or NaN as torch's)
            return self._backward(g)

    def _backward(self, g):
        xp = get_array_module(g)
        diff, d, p = self.diff, self.d[..., None], self.p
        safe = xp.where(d == 0, 1, d)
        if p == 0:
            grad = xp.zeros_like(diff)
        elif p == 1:
            grad = xp.sign(diff)
        elif p == 2:
            grad = xp.where(d == 0, 0, diff / safe)
        elif p == float("inf"):
            grad = xp.sign(diff) * (xp.abs(diff) == d)
        else:
            grad = xp.where(d == 0, 0, xp.sign(diff) * xp.abs(diff) ** (p - 1) / safe ** (p - 1))
        grad = grad * g[..., None]
        shape1, shape2 = self.shapes
        return unbroadcast(grad.sum(-2), shape1), unbroadcast(-grad.sum(-3), shape2)


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """torch.cdist: the p-norm distances between the rows of x1 (..., P, M) and of x2 (..., R, M) -> (..., P, R),
    batch dimensions broadcast; computed from the differences (exact for p = 2 too: compute_mode is accepted)."""
    op = "cdist"
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor) or x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"{op} only supports at least 2D tensors, got: {getattr(x1, 'ndim', None)}D and "
                           f"{getattr(x2, 'ndim', None)}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"{op}: X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: "
                           f"{x2.shape[-1]}")
    if not _dtypes.is_floating(x1.dtype) or x1.dtype != x2.dtype:
        raise RuntimeError(f"{op} only supports floating-point dtypes of one kind, got {x1.dtype} and {x2.dtype}")
    if p < 0:
        raise RuntimeError(f"{op} only supports non-negative p values, got {p}")
    return Cdist.apply(x1, x2, p=float(p))


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


# ------------------------------------------------------------------------------------------------
# The matrix product (one GEMM route) and its named forms
# ------------------------------------------------------------------------------------------------


def rmatmul(self, other):
    """other @ self, other not a Tensor (Tensor.__rmatmul__)."""
    return matmul(operand(self, other, "matmul"), self)


def matmul(input, other, *, out=None):
    """Matrix product with PyTorch's rules: 1-D, 2-D and batched (broadcast leading dims)."""
    a, b = input, other
    if out is not None:
        from .inplace import write_out

        return write_out(out, matmul(a, b), "matmul")
    if not isinstance(a, Tensor):
        if isinstance(a, SparseTensor):   # a sparse COO operand: the sparse-dense product (ops/sparse.py)
            return sparse_mm(a, b)
        a = Tensor(a)
    if not isinstance(b, Tensor) and isinstance(b, SparseTensor):
        return sparse_mm(a, b)
    b = operand(a, b, "matmul")   # also checks the devices
    if _amp.regions:
        a, b = _amp.cast_inputs("matmul", a, b)
    ad, bd = a._data, b._data
    if ad.dtype != bd.dtype:
        a, b = promote(a, b, "matmul")
    if type(ad) is np.ndarray and ad.ndim == 2 and bd.ndim == 2 and ad.shape[1] == bd.shape[0]:
        return MatMul.apply(a, b)   # the common CPU case: two matrices that fit, nothing more to check
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: both operands need at least 1 dim, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        raise ValueError(
            f"matmul: shapes {a.shape} and {b.shape} are not aligned: the last dim of the first ({ka}) must "
            f"equal the {'only' if b.ndim == 1 else 'second-to-last'} dim of the second ({kb})"
        )
    if a.ndim > 2 and b.ndim > 2:
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch dims of {a.shape} and {b.shape} cannot be broadcast") from None
    if a.is_cuda:
        _device.check_not_capturing("matmul (the @ operator) on the GPU",
                                    "it runs on cuBLAS through cupy.matmul, which CuPy cannot call during "
                                    "stream capture (nn.Linear runs on minidl's own SGEMM and can be captured)")
    return MatMul.apply(a, b)


def mm(self, mat2):
    """(n, m) @ (m, p) -> (n, p); both must be 2-D (torch.mm)."""
    if self.ndim != 2 or getattr(mat2, "ndim", 0) != 2:
        raise RuntimeError(f"mm: both arguments must be 2-D matrices, got shapes {tuple(self.shape)} and "
                           f"{tuple(getattr(mat2, 'shape', ()))}")
    return matmul(self, mat2)


def bmm(self, mat2):
    """(b, n, m) @ (b, m, p) -> (b, n, p), no broadcasting (torch.bmm)."""
    if self.ndim != 3 or getattr(mat2, "ndim", 0) != 3 or self.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: expects two 3-D tensors with the same batch size, got shapes "
                           f"{tuple(self.shape)} and {tuple(getattr(mat2, 'shape', ()))}")
    return matmul(self, mat2)


def mv(self, vec):
    if self.ndim != 2 or getattr(vec, "ndim", 0) != 1:
        raise RuntimeError(f"mv: expects a matrix and a vector, got shapes {tuple(self.shape)} and "
                           f"{tuple(getattr(vec, 'shape', ()))}")
    return matmul(self, vec)


def dot(self, other):
    if self.ndim != 1 or getattr(other, "ndim", 0) != 1:
        raise RuntimeError(f"dot: expects two 1-D tensors, got shapes {tuple(self.shape)} and "
                           f"{tuple(getattr(other, 'shape', ()))}")
    return matmul(self, other)


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


def outer(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"outer: expected two 1-D tensors, got {a.ndim}-D and {b.ndim}-D")
    return a.reshape(-1, 1) * b.reshape(1, -1)


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


# ------------------------------------------------------------------------------------------------
# Diagonals
# ------------------------------------------------------------------------------------------------


def diagonal(t, offset=0, dim1=0, dim2=1):
    """A view-like copy of the diagonal of dims dim1, dim2 (moved to the last axis), with its gradient."""
    if t.ndim < 2:
        raise RuntimeError(f"diagonal: expected a tensor of at least 2 dimensions, got {t.ndim}")
    d1, d2 = normalize_dim(dim1, t.ndim, "diagonal"), normalize_dim(dim2, t.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dim1 and dim2 cannot be equal, got {dim1} and {dim2}")
    return Diagonal.apply(t, offset=int(offset), dim1=d1, dim2=d2)


def diag(t, diagonal=0):
    """1-D -> a square matrix with t on its `diagonal`; 2-D -> that diagonal as 1-D (torch.diag)."""
    if t.ndim == 1:
        n = t.shape[0] + abs(diagonal)
        return DiagEmbed.apply(t, n=n, offset=int(diagonal))
    if t.ndim == 2:
        return Diagonal.apply(t, offset=int(diagonal), dim1=0, dim2=1)
    raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {t.ndim}D")


def diagflat(input, offset=0):
    """The flattened input on the `offset` diagonal of a square matrix (torch.diagflat)."""
    return diag(input.reshape(-1), offset)


def dist(input, other, p=2):
    """The p-norm of input - other, broadcast (torch.dist)."""
    return (input - other).norm(p)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta * input + alpha * outer(vec1, vec2) (torch.addr)."""
    product = outer(vec1, vec2)
    return (input if beta == 1 else input * beta) + (product if alpha == 1 else product * alpha)


def adjoint(input):
    """The conjugate transpose of the last two dimensions (torch.adjoint; a real tensor's is its .mT)."""
    return input.transpose(-2, -1).conj() if input.is_complex() else input.transpose(-2, -1)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D x: columns x^(N-1) ... x^0, or x^0 ... x^(N-1) when increasing
    (torch.vander; N defaults to len(x)), with gradients."""
    from .joining import stack

    if x.ndim != 1:
        raise RuntimeError(f"vander: x must be a one-dimensional tensor, got {x.ndim}-D")
    n = x.shape[0] if N is None else int(N)
    if n < 0:
        raise RuntimeError(f"vander: N must be non-negative, got {n}")
    if n == 0:
        return x.new_empty((x.shape[0], 0))
    from .creation import ones_like

    powers = [ones_like(x) if k == 0 else x ** k for k in range(n)]   # (x ** 0's gradient would be 0 * x ** -1)
    return stack(powers if increasing else powers[::-1], dim=1)


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Batches of vectors (..., m) -> matrices with each vector on the `offset` diagonal of dims dim1, dim2 of the
    result (torch.diag_embed)."""
    n = input.shape[-1] + abs(int(offset))
    out = DiagEmbed.apply(input, n=n, offset=int(offset))
    nd = out.ndim
    d1, d2 = normalize_dim(dim1, nd, "diag_embed"), normalize_dim(dim2, nd, "diag_embed")
    if d1 == d2:
        raise RuntimeError(f"diag_embed: diagonal dimensions cannot be identical {dim1}, {dim2}")
    if (d1, d2) == (nd - 2, nd - 1):
        return out
    if (d1, d2) == (nd - 1, nd - 2):   # the transposed pair: the offset's diagonal on the other side
        return out.transpose(-1, -2)
    return out.movedim((nd - 2, nd - 1), (d1, d2))


def trace(t):
    if t.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {t.ndim}")
    return diagonal(t).sum()

ger = outer
