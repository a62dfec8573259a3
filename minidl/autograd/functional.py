"""torch.autograd.functional: derivatives of a function as functions of its inputs, built on autograd.grad.

    vjp(f, x, v)        (f(x), v^T J)         one backward pass
    jacobian(f, x)      J, one backward pass per output element (torch's default, vectorize=False)
    jvp(f, x, v)        (f(x), J v)           from the Jacobian (minidl has no forward mode)

x may be a tensor or a tuple of tensors; the results follow torch's nesting (a tuple per input, and per output
when f returns a tuple). Second derivatives (hessian, hvp, vhp, create_graph=True) need the graph of a gradient,
which minidl's backward functions do not record (they compute arrays): those say so.
"""
from __future__ import annotations

from .._device import get_array_module
from .function import enable_grad, grad
from .tensor import Tensor

__all__ = ["vjp", "jacobian", "jvp", "hessian", "hvp", "vhp"]


def _as_tuple(x, what):
    single = isinstance(x, Tensor)
    xs = (x,) if single else tuple(x)
    for i, t in enumerate(xs):
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.functional: {what}[{i}] must be a Tensor, got {type(t).__name__}")
    return xs, single


def _prepare(inputs):
    """Fresh leaves that require grad, so that f's graph starts at them."""
    return tuple(t.detach().requires_grad_(True) for t in inputs)


def _no_create_graph(op, create_graph):
    if create_graph:
        raise NotImplementedError(f"autograd.functional.{op}: create_graph=True (differentiating the result again) is "
                                  "not in minidl: its backward functions compute arrays, not taped operations")


def _direction(op, v, tensors, what):
    """v as a tuple of tensors; None stands for ones when every one of `tensors` has one element."""
    if v is not None:
        return _as_tuple(v, "v")[0]
    if any(t.numel() != 1 for t in tensors):
        raise RuntimeError(f"autograd.functional.{op}: v can be None only when the {what} has one element")
    return tuple(t.new_ones(t.shape) for t in tensors)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): v has the outputs' shapes (may be None for a one-element output)."""
    _no_create_graph("vjp", create_graph)
    xs, single = _as_tuple(inputs, "inputs")
    xs = _prepare(xs)
    with enable_grad():
        out = func(*xs)
    outs, single_out = _as_tuple(out, "outputs")
    vs = _direction("vjp", v, outs, "output")
    grads = grad(outs, xs, vs, allow_unused=True, materialize_grads=True)
    detached = outs[0].detach() if single_out else tuple(o.detach() for o in outs)
    return detached, (grads[0] if single else grads)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one input and one output a tensor of shape output.shape + input.shape;
    tuples of those as torch nests them otherwise."""
    _no_create_graph("jacobian", create_graph)
    if strategy != "reverse-mode":
        raise NotImplementedError("autograd.functional.jacobian: minidl has reverse mode only (strategy='reverse-mode')")
    xs, single = _as_tuple(inputs, "inputs")
    xs = _prepare(xs)
    with enable_grad():
        out = func(*xs)
    outs, single_out = _as_tuple(out, "outputs")
    table = []
    for o in outs:
        flat = o.reshape(-1)
        rows = [[] for _ in xs]
        for k in range(flat.numel()):
            seed = flat.new_zeros(flat.shape)
            seed[k] = 1
            gs = grad((flat,), xs, (seed,), retain_graph=True, allow_unused=True, materialize_grads=True)
            for i, g in enumerate(gs):
                rows[i].append(g)
        per_input = []
        for i, x in enumerate(xs):
            xp = get_array_module(x._data)
            j = xp.stack([g._data for g in rows[i]]) if rows[i] else xp.zeros((0,) + tuple(x.shape), x._data.dtype)
            per_input.append(Tensor._make(j.reshape(tuple(o.shape) + tuple(x.shape))))
        table.append(per_input[0] if single else tuple(per_input))
    return table[0] if single_out else tuple(table)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), through the Jacobian (minidl has no forward-mode derivatives)."""
    _no_create_graph("jvp", create_graph)
    xs, single = _as_tuple(inputs, "inputs")
    vs = _direction("jvp", v, xs, "input")
    with enable_grad():
        out = func(*_prepare(xs))
    outs, single_out = _as_tuple(out, "outputs")
    jac = jacobian(func, xs[0] if single else xs)
    results = []
    for k, o in enumerate(outs):
        per_input = jac[k] if not single_out else jac
        per_input = (per_input,) if single else per_input
        total = 0
        for j, x_v in zip(per_input, vs):
            total = total + (j.reshape(o.numel(), -1) @ x_v.reshape(-1)).reshape(o.shape)
        results.append(total)
    detached = outs[0].detach() if single_out else tuple(o.detach() for o in outs)
    return detached, (results[0] if single_out else tuple(results))


def _second_order(op):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"autograd.functional.{op}: second derivatives need the graph of a gradient "
                                  "(create_graph=True), which minidl's backward functions do not record")

    unavailable.__name__ = op
    return unavailable


hessian, hvp, vhp = _second_order("hessian"), _second_order("hvp"), _second_order("vhp")
