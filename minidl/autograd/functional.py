"""torch.autograd.functional: derivatives of a function as functions of its inputs, built on autograd.grad.

    vjp(f, x, v)        (f(x), v^T J)         one backward pass
    jacobian(f, x)      J, one backward pass per output element (torch's default, vectorize=False)
    jvp(f, x, v)        (f(x), J v)           from the Jacobian (minidl has no forward mode)
    hessian(f, x)       the Jacobian of the gradient (a scalar f), the gradient taken with create_graph=True
    hvp(f, x, v)        (f(x), H v)           two backward passes: the gradient with its graph, then its vjp
    vhp(f, x, v)        (f(x), v^T H)         the same (H is symmetric)

x may be a tensor or a tuple of tensors; the results follow torch's nesting (a tuple per input, and per output
when f returns a tuple). create_graph=True keeps the graph of the results (autograd/higher_order.py records the
backward pass), as far as the ops of f have their backward written as tensor ops (higher_order.py lists them).
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


def _prepare(inputs, create_graph=False):
    """Tensors that require grad for f's graph to start at: fresh leaves, or with create_graph an input that requires
    grad itself as a view of it (so that the results stay connected to it, as torch's)."""
    return tuple(t.view_as(t) if create_graph and t.requires_grad else t.detach().requires_grad_(True) for t in inputs)


def _direction(op, v, tensors, what):
    """v as a tuple of tensors; None stands for ones when every one of `tensors` has one element."""
    if v is not None:
        return _as_tuple(v, "v")[0]
    if any(t.numel() != 1 for t in tensors):
        raise RuntimeError(f"autograd.functional.{op}: v can be None only when the {what} has one element")
    return tuple(t.new_ones(t.shape) for t in tensors)


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): v has the outputs' shapes (may be None for a one-element output)."""
    xs, single = _as_tuple(inputs, "inputs")
    xs = _prepare(xs, create_graph)
    with enable_grad():
        out = func(*xs)
    outs, single_out = _as_tuple(out, "outputs")
    vs = _direction("vjp", v, outs, "output")
    grads = grad(outs, xs, vs, create_graph=create_graph, allow_unused=True, materialize_grads=True)
    return _kept(outs, single_out, create_graph), (grads[0] if single else grads)


def _kept(outs, single_out, create_graph):
    """The function's outputs as returned: detached, unless create_graph keeps their graph."""
    kept = outs if create_graph else tuple(o.detach() for o in outs)
    return kept[0] if single_out else kept


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d func(inputs) / d inputs: for one input and one output a tensor of shape output.shape + input.shape;
    tuples of those as torch nests them otherwise."""
    if strategy != "reverse-mode":
        raise NotImplementedError("autograd.functional.jacobian: minidl has reverse mode only (strategy='reverse-mode')")
    xs, single = _as_tuple(inputs, "inputs")
    xs = _prepare(xs, create_graph)
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
            gs = grad((flat,), xs, (seed,), retain_graph=True, create_graph=create_graph, allow_unused=True,
                      materialize_grads=True)
            for i, g in enumerate(gs):
                rows[i].append(g)
        per_input = []
        for i, x in enumerate(xs):
            shape = tuple(o.shape) + tuple(x.shape)
            if create_graph and rows[i]:   # the rows placed by products with one-hot columns: the graph stays
                xp = get_array_module(x._data)
                n, total = len(rows[i]), None
                for k, g in enumerate(rows[i]):
                    onehot = xp.zeros((n,) + (1,) * g.ndim, dtype=g._data.dtype)
                    onehot[k] = 1
                    term = Tensor._make(onehot) * g.unsqueeze(0)
                    total = term if total is None else total + term
                per_input.append(total.reshape(shape))
                continue
            xp = get_array_module(x._data)
            j = xp.stack([g._data for g in rows[i]]) if rows[i] else xp.zeros((0,) + tuple(x.shape), x._data.dtype)
            per_input.append(Tensor._make(j.reshape(shape)))
        table.append(per_input[0] if single else tuple(per_input))
    return table[0] if single_out else tuple(table)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v), through the Jacobian (minidl has no forward-mode derivatives)."""
    xs, single = _as_tuple(inputs, "inputs")
    vs = _direction("jvp", v, xs, "input")
    with enable_grad():
        out = func(*_prepare(xs))
    outs, single_out = _as_tuple(out, "outputs")
    jac = jacobian(func, xs[0] if single else xs, create_graph=create_graph)
    results = []
    for k, o in enumerate(outs):
        per_input = jac[k] if not single_out else jac
        per_input = (per_input,) if single else per_input
        total = 0
        for j, x_v in zip(per_input, vs):
            total = total + (j.reshape(o.numel(), -1) @ x_v.reshape(-1)).reshape(o.shape)
        results.append(total)
    return _kept(outs, single_out, False), (results[0] if single_out else tuple(results))


def _gradient_function(func, op):
    """x -> d func(x) / dx with its graph (create_graph=True), for a func with one one-element output."""
    def gradient(*xs):
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError(f"autograd.functional.{op}: the function must return a single one-element tensor")
        gs = grad(out, xs, create_graph=True, allow_unused=True, materialize_grads=True)
        return gs[0] if len(xs) == 1 else gs

    return gradient


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The matrix of second derivatives of a scalar func: for one input of shape s, a tensor of shape s + s; for a
    tuple of inputs, H[i][j] = d2 func / dx_i dx_j (torch's nesting)."""
    xs, single = _as_tuple(inputs, "inputs")
    return jacobian(_gradient_function(func, "hessian"), xs[0] if single else xs, create_graph=create_graph)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a scalar func: the gradient with its graph, then its vector-Jacobian product."""
    return _hessian_product("hvp", func, inputs, v, create_graph)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a scalar func (equal to H v: the Hessian is symmetric)."""
    return _hessian_product("vhp", func, inputs, v, create_graph)


def _hessian_product(op, func, inputs, v, create_graph):
    xs, single = _as_tuple(inputs, "inputs")
    xs = _prepare(xs, create_graph)
    vs = _direction(op, v, xs, "input")
    with enable_grad():
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError(f"autograd.functional.{op}: the function must return a single one-element tensor")
        gs = grad(out, xs, create_graph=True, allow_unused=True, materialize_grads=True)
    products = grad(gs, xs, vs, create_graph=create_graph, allow_unused=True, materialize_grads=True)
    return _kept((out,), True, create_graph), (products[0] if single else products)
