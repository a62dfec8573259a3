"""torch.autograd.forward_ad: forward-mode derivatives (Jacobian-vector products) through dual tensors.

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)     # x carries the direction `tangent`
        y = f(x)                                       # any code of tensor ops
        jvp = forward_ad.unpack_dual(y).tangent        # J_f(primal) @ tangent

minidl has reverse mode only, so a dual tensor here is a leaf that records the tape, and unpack_dual computes the
tangent by the double-backward trick: u(v) = J^T v is linear in v, so J t = d<u(v), t>/dv. Two backward passes per
unpack_dual (the first recorded, create_graph=True), so it reaches as far as minidl's second derivatives do
(autograd/higher_order.py lists them); it costs more than torch's true forward mode, and gives the same numbers.
"""
from __future__ import annotations

import contextlib

from .function import _DUAL_LEVELS, enable_grad, grad, no_grad
from .return_types import namedtuple

__all__ = ["dual_level", "make_dual", "unpack_dual", "UnpackedDualTensor", "enter_dual_level", "exit_dual_level",
           "apply_with_jvp"]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])
_levels = _DUAL_LEVELS   # one list of (dual tensor, tangent) per open level, innermost last


def enter_dual_level() -> int:
    _levels.append([])
    return len(_levels) - 1


def exit_dual_level(*, level=None) -> None:
    if not _levels:
        raise RuntimeError("exit_dual_level: no dual level is open")
    if level is not None and level != len(_levels) - 1:
        raise RuntimeError(f"exit_dual_level: level {level} is not the innermost ({len(_levels) - 1})")
    _levels.pop()


@contextlib.contextmanager
def dual_level():
    """The scope of dual tensors: make_dual and unpack_dual are used inside it; leaving it forgets the tangents."""
    level = enter_dual_level()
    try:
        yield level
    finally:
        exit_dual_level(level=level)


def _current(op, level):
    if not _levels:
        raise RuntimeError(f"forward_ad.{op}: no dual level is open; use `with forward_ad.dual_level():`")
    return _levels[-1 if level is None else level]


def make_dual(tensor, tangent, *, level=None):
    """A dual tensor of value `tensor` and tangent `tangent` (the same shape): a new leaf that records what is
    computed from it."""
    from .tensor import Tensor

    duals = _current("make_dual", level)
    if not isinstance(tangent, Tensor) or tuple(tangent.shape) != tuple(tensor.shape):
        raise ValueError(f"forward_ad.make_dual: the tangent must be a Tensor of the primal's shape "
                         f"{tuple(tensor.shape)}, got {tuple(getattr(tangent, 'shape', ()))}")
    dual = tensor.detach().requires_grad_(True)
    duals.append((dual, tangent))   # (the tangent itself: unpack_dual gives back the same object, as torch's)
    return dual


def unpack_dual(tensor, *, level=None):
    """(primal, tangent) of `tensor`: the tangent is J t, summed over the dual tensors it was computed from (None when
    it depends on none of them)."""
    if not _levels and level is None:   # outside every dual level a tensor has no tangent (torch's answer)
        return UnpackedDualTensor(tensor, None)
    duals = _current("unpack_dual", level)
    for dual, tangent in duals:
        if tensor is dual:
            return UnpackedDualTensor(tensor.detach(), tangent)
    if not tensor.requires_grad or not duals:
        return UnpackedDualTensor(tensor.detach(), None)
    from .. import _device
    from .tensor import Tensor

    with enable_grad():
        v = Tensor._make(_device.get_array_module(tensor._data).zeros_like(tensor._data), requires_grad=True)
        inputs = [d for d, _ in duals]
        grads = grad([tensor], inputs, grad_outputs=[v], create_graph=True, allow_unused=True)
        dot = None
        for g, (_, t) in zip(grads, duals):
            if g is not None and g.requires_grad:
                term = (g * t.detach()).sum()
                dot = term if dot is None else dot + term
    if dot is None:
        return UnpackedDualTensor(tensor.detach(), None)
    # (retain_graph: the same output, or another computed from it, may be unpacked again)
    (jvp,) = grad([dot], [v], retain_graph=True, allow_unused=True, materialize_grads=True)
    return UnpackedDualTensor(tensor.detach(), jvp.detach())


def apply_with_jvp(cls, inputs, ctx_class):
    """A custom Function that defines jvp(ctx, *tangents) and no backward, applied inside a dual level (torch's
    forward-mode custom Functions): forward runs on the primals, jvp on the inputs' tangents (zeros for an input
    without one), and the output is a new dual tensor of that tangent."""
    from .tensor import Tensor

    primals, tangents = [], []
    for t in inputs:
        if isinstance(t, Tensor):
            primal, tangent = unpack_dual(t)
            primals.append(primal)
            tangents.append(tangent if tangent is not None else t.detach() * 0)
        else:
            primals.append(t)
    ctx = ctx_class(tuple(isinstance(t, Tensor) and t.requires_grad for t in inputs))
    with no_grad():
        out = cls.forward(ctx, *primals)
        tangent_out = cls.jvp(ctx, *tangents)
    if isinstance(out, tuple):
        tangent_out = tangent_out if isinstance(tangent_out, tuple) else (tangent_out,)
        return tuple(make_dual(o, t) for o, t in zip(out, tangent_out))
    return make_dual(out, tangent_out)
