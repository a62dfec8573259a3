"""Complex numbers, as far as rotary position embeddings take them (Meta's LLaMA code, and programs written after
it, rotate query and key pairs by multiplying them as complex numbers):

    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)             # e^{i theta}, complex64
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)            # real again

complex64 / complex128 tensors (torch.cfloat / torch.cdouble), their products, sums and shape ops (the
elementwise, shape and indexing families are written on NumPy/CuPy arrays, which have complex dtypes), and the
conversions here. Gradients follow PyTorch's convention: the gradient of a real loss L with respect to a complex z
is dL/dRe(z) + i dL/dIm(z) (the conjugate Wirtinger derivative, times 2), so a product's backward multiplies by the
other factor's conjugate (elementwise.Mul), and a real input that fed a complex op receives the real part of its
gradient (the backward engine). `abs` (elementwise.Abs), `real`, `imag` and `angle` cover what RoPE code and spectral
losses read back. Not here: complex matmul on minidl's GEMM kernels, complex reductions beyond sum and mean, and the
complex math functions (exp, log, ...).
"""
from __future__ import annotations

from .._device import get_array_module
from .._dtypes import COMPLEX_OF as _COMPLEX_OF, REAL_OF as _REAL_OF
from ..autograd.function import Function
from ._checks import check_tensor


def _as_complex(xp, a):
    """(..., 2) real array -> (...) complex array of the matching width: a view when a's last dim is contiguous."""
    a = xp.ascontiguousarray(a)
    return a.view(_COMPLEX_OF[a.dtype])[..., 0]


def _as_real(xp, z):
    """(...) complex array -> (..., 2) real array (real, imaginary parts): a view of contiguous z."""
    z = xp.ascontiguousarray(z)
    return z.view(_REAL_OF[z.dtype]).reshape(z.shape + (2,))


class ViewAsComplex(Function):
    saves_inputs = False

    def forward(self, a):
        return _as_complex(get_array_module(a), a)

    def backward(self, g):
        return _as_real(get_array_module(g), g)


class ViewAsReal(Function):
    saves_inputs = False

    def forward(self, z):
        return _as_real(get_array_module(z), z)

    def backward(self, g):
        return _as_complex(get_array_module(g), g)


class Polar(Function):
    """abs * e^{i angle}. Backward (real inputs): with e = e^{i angle}, dL/dabs = Re(g conj(e)),
    dL/dangle = abs * Im(g conj(e))."""

    def forward(self, magnitude, angle):
        xp = get_array_module(magnitude)
        self.magnitude, self.unit = magnitude, xp.exp(1j * angle.astype(_COMPLEX_OF[angle.dtype]))
        return (magnitude * self.unit).astype(_COMPLEX_OF[magnitude.dtype])

    def backward(self, g):
        w = g * self.unit.conj()
        g_abs = w.real.astype(self.magnitude.dtype) if self.needs_input_grad[0] else None
        g_angle = (self.magnitude * w.imag).astype(self.magnitude.dtype) if self.needs_input_grad[1] else None
        return g_abs, g_angle


class Complex(Function):
    """real + i imag."""

    saves_inputs = False

    def forward(self, real, imag):
        return (real + 1j * imag).astype(_COMPLEX_OF[real.dtype])

    def backward(self, g):
        return g.real.copy(), g.imag.copy()


class Conj(Function):
    saves_inputs = False

    def forward(self, z):
        return z.conj()

    def backward(self, g):
        return g.conj()


class Real(Function):
    saves_inputs = False

    def forward(self, z):
        return z.real.copy()

    def backward(self, g):
        return g.astype(_COMPLEX_OF[g.dtype])


class Imag(Function):
    saves_inputs = False

    def forward(self, z):
        return z.imag.copy()

    def backward(self, g):
        return 1j * g.astype(_COMPLEX_OF[g.dtype])


class Angle(Function):
    """atan2(Im z, Re z). Backward in torch's convention (dL/dRe + i dL/dIm): g (-Im z + i Re z) / |z|^2 = i g z / |z|^2
    (0 where z = 0)."""

    def forward(self, z):
        self.z = z
        return get_array_module(z).angle(z)

    def backward(self, g):
        xp, z = get_array_module(g), self.z
        r2 = (z * z.conj()).real
        return xp.where(r2 > 0, 1j * g * z / xp.where(r2 > 0, r2, 1), 0).astype(z.dtype)


def _real_floats(op, *tensors):
    for name, t in tensors:
        check_tensor(op, name, t)
        if t.dtype not in _COMPLEX_OF:
            raise TypeError(f"{op}: {name} must be float32 or float64 (its complex dtype is complex64 or complex128), "
                            f"got {t.dtype}")


def view_as_complex(input):
    """(..., 2) float32/float64 -> (...) complex64/complex128: each last-dim pair (re, im) as one number."""
    _real_floats("view_as_complex", ("input", input))
    if input.ndim == 0 or input.shape[-1] != 2:
        raise RuntimeError(f"view_as_complex: the last dimension must have size 2 (real, imaginary), got shape "
                           f"{tuple(input.shape)}")
    return ViewAsComplex.apply(input)


def view_as_real(input):
    """(...) complex -> (..., 2) real: the real and imaginary parts side by side."""
    check_tensor("view_as_real", "input", input)
    if input.dtype not in _REAL_OF:
        raise RuntimeError(f"view_as_real: input must be complex64 or complex128, got {input.dtype}")
    return ViewAsReal.apply(input)


def polar(abs, angle):
    """abs * (cos(angle) + i sin(angle)), complex of abs's width (torch.polar)."""
    _real_floats("polar", ("abs", abs), ("angle", angle))
    if abs.dtype != angle.dtype:
        raise TypeError(f"polar: abs ({abs.dtype}) and angle ({angle.dtype}) must have one dtype")
    return Polar.apply(abs, angle)


def complex(real, imag):
    """real + i imag (torch.complex)."""
    _real_floats("complex", ("real", real), ("imag", imag))
    if real.dtype != imag.dtype:
        raise TypeError(f"complex: real ({real.dtype}) and imag ({imag.dtype}) must have one dtype")
    return Complex.apply(real, imag)


def conj(self):
    """The complex conjugate (a real tensor is returned as it is, as torch does)."""
    return Conj.apply(self) if self.dtype in _REAL_OF else self


def conj_physical(self):
    """The conjugate, computed now (minidl's conj is never lazy, so it is conj)."""
    return conj(self)


def real(input):
    """The real part of a complex tensor (a real tensor is returned as it is, as torch does). A copy here, where torch
    returns a view."""
    return Real.apply(input) if input.dtype in _REAL_OF else input


def imag(input):
    """The imaginary part of a complex tensor (a copy; torch returns a view)."""
    if input.dtype not in _REAL_OF:
        raise RuntimeError(f"imag: input must be complex64 or complex128 (a real tensor has no imaginary part), got "
                           f"{input.dtype}")
    return Imag.apply(input)


def angle(input):
    """The argument atan2(Im, Re) of a complex tensor, in radians (torch.angle); for a real tensor 0 or pi."""
    if input.dtype in _REAL_OF:
        return Angle.apply(input)
    check_tensor("angle", "input", input)
    negative = input < 0
    return (negative.to(input.dtype) if input.is_floating_point() else negative.float()) * 3.141592653589793


__all__ = ["view_as_complex", "view_as_real", "polar", "complex", "conj", "real", "imag", "angle"]
