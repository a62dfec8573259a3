"""torch.func: function transforms, built on minidl's tape.

    functional_call(model, params, args)   the model run with other tensors in place of its parameters/buffers
    grad(f)(x), grad_and_value(f)(x)        df/dx of a scalar f (recorded: create_graph, so transforms compose)
    vjp(f, *primals)                        (f(primals), the function cotangents -> vector-Jacobian products)
    jvp(f, primals, tangents)               (f(primals), the Jacobian-vector product J tangents)
    stack_module_state(models)              the models' parameters and buffers stacked (for vmap over an ensemble)
    jacrev(f)(x), jacfwd(f)(x), hessian(f)(x)
    vmap(f, in_dims, out_dims)(*args)       f over a batch dimension

minidl has reverse mode only: jacfwd computes the same Jacobian as jacrev. vmap runs f once per batch entry and
stacks the results (torch's semantics, not its speed: no batching rule per op). Second derivatives go as far as
the ops have their backward written as tensor ops (minidl/autograd/higher_order.py lists them).
"""
from __future__ import annotations

import contextlib

from .autograd import functional as _functional
from .autograd.function import enable_grad
from .autograd.function import grad as _grad
from .autograd.tensor import Tensor

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap",
           "stack_module_state"]


@contextlib.contextmanager
def _swapped(module, tensors, tie_weights):
    """module's parameters and buffers named in `tensors` replaced (and, with tie_weights, every other name of a
    replaced tensor too: a tied weight), restored afterwards."""
    registry = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            for name, value in getattr(sub, kind).items():
                registry.setdefault(f"{prefix}.{name}" if prefix else name, []).append((sub, kind, name, value))
    unknown = sorted(set(tensors) - set(registry))
    if unknown:
        raise RuntimeError(f"functional_call: unexpected key(s): {', '.join(repr(k) for k in unknown)}")
    by_original = {}
    if tie_weights:
        for full, new in tensors.items():
            for _, _, _, value in registry[full]:
                if value is not None:
                    by_original[id(value)] = new
    saved = []
    try:
        for full, places in registry.items():
            for sub, kind, name, value in places:
                new = tensors.get(full, by_original.get(id(value)) if value is not None else None)
                if new is not None:
                    saved.append((sub, kind, name, value))
                    getattr(sub, kind)[name] = new
        yield
    finally:
        for sub, kind, name, value in reversed(saved):
            getattr(sub, kind)[name] = value


def functional_call(module, parameter_and_buffer_dicts, args=(), kwargs=None, *, tie_weights=True, strict=False):
    """module(*args, **kwargs) with the named tensors in place of its parameters and buffers (one dict, or a tuple
    of dicts merged), which stay as they were afterwards: the call is a function of those tensors (MAML's adapted
    weights, ensembles, per-sample gradients)."""
    dicts = parameter_and_buffer_dicts if isinstance(parameter_and_buffer_dicts, (tuple, list)) \
        else (parameter_and_buffer_dicts,)
    tensors = {}
    for d in dicts:
        overlap = set(tensors) & set(d)
        if overlap:
            raise ValueError(f"functional_call: {sorted(overlap)} appeared in multiple dictionaries")
        tensors.update(d)
    if strict:
        expected = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing = sorted(expected - set(tensors))
        if missing:
            raise RuntimeError(f"functional_call: missing key(s) with strict=True: {missing}")
    args = args if isinstance(args, tuple) else (args,)
    with _swapped(module, tensors, tie_weights):
        return module(*args, **(kwargs or {}))


def _argnums_tuple(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _prepared(tree, leaves):
    """tree (a tensor, or dicts / tuples / lists of them) with each tensor made a differentiable start (a fresh leaf,
    or a view of a tensor that already requires grad, so that its graph goes on); the new tensors appended to
    `leaves` in order."""
    if isinstance(tree, Tensor):
        t = tree.view_as(tree) if tree.requires_grad else tree.detach().requires_grad_(True)
        leaves.append(t)
        return t
    if isinstance(tree, dict):
        return {k: _prepared(v, leaves) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_prepared(v, leaves) for v in tree)
    raise TypeError(f"grad: differentiated arguments must be tensors (or dicts, tuples, lists of them), got "
                    f"{type(tree).__name__}")


def _rebuilt(tree, values):
    """tree's structure with its tensors replaced by the next of `values` (an iterator), in order."""
    if isinstance(tree, Tensor):
        return next(values)
    if isinstance(tree, dict):
        return {k: _rebuilt(v, values) for k, v in tree.items()}
    return type(tree)(_rebuilt(v, values) for v in tree)


def grad_and_value(func, argnums=0, has_aux=False):
    """x -> (df/dx, f(x)) for a function returning a one-element tensor (or (it, aux) with has_aux); x may be a dict,
    tuple or list of tensors (a model's parameters): the gradient has its structure. The gradient keeps its graph,
    so grad(grad(f)) gives second derivatives."""
    def wrapper(*args, **kwargs):
        nums = _argnums_tuple(argnums)
        args, leaves, spans = list(args), [], []
        for i in nums:
            start = len(leaves)
            args[i] = _prepared(args[i], leaves)
            spans.append((start, len(leaves)))
        with enable_grad():
            out = func(*args, **kwargs)
            value, aux = (out if has_aux else (out, None))
            if not isinstance(value, Tensor) or value.numel() != 1:
                raise RuntimeError("grad: the function must return a one-element tensor (torch.func.grad's rule)")
            grads = _grad(value, leaves, create_graph=True, allow_unused=True, materialize_grads=True)
        per_arg = [_rebuilt(args[i], iter(grads[a:b])) for i, (a, b) in zip(nums, spans)]
        g = per_arg[0] if isinstance(argnums, int) else tuple(per_arg)
        return (g, (value, aux)) if has_aux else (g, value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """x -> df/dx (torch.func.grad); with has_aux, (df/dx, aux)."""
    inner = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn): vjp_fn(cotangents) gives the vector-Jacobian product with respect to each primal."""
    xs = [p.detach().requires_grad_(True) if not p.requires_grad else p.view_as(p) for p in primals]
    with enable_grad():
        out = func(*xs)
    value, aux = out if has_aux else (out, None)
    outs = value if isinstance(value, tuple) else (value,)

    def vjp_fn(*cotangents):
        cots = cotangents[0] if len(cotangents) == 1 and isinstance(cotangents[0], tuple) else cotangents
        return _grad(list(outs), xs, list(cots), retain_graph=True, create_graph=True, allow_unused=True,
                     materialize_grads=True)

    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J tangents): the Jacobian-vector product (torch.func.jvp). minidl has reverse mode only, so
    J is built row by row (autograd.functional.jvp): right, and as costly as a Jacobian."""
    if has_aux:
        raise NotImplementedError("jvp: has_aux=True is not in minidl")
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp: Expected primals and tangents to be tuples of tensors, e.g. jvp(f, (x,), (t,))")
    if len(primals) != len(tangents):
        raise RuntimeError(f"jvp: Expected primals and tangents to have the same length, got {len(primals)} and "
                           f"{len(tangents)}")
    return _functional.jvp(func, primals, tangents)


def stack_module_state(models):
    """(params, buffers): dicts name -> the models' tensors stacked along a new first dimension, for
    vmap(functional_call) over an ensemble of models of one class (torch.func.stack_module_state). Stacked parameters
    are new leaves that require grad; the models' own tensors are not touched."""
    from .ops.joining import stack

    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) != 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    if len({type(m) for m in models}) != 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named):
        tables = [dict(n) for n in named]
        out = {}
        for name in tables[0]:
            tensors = [t[name] for t in tables]
            grads = {t.requires_grad for t in tensors}
            if len(grads) != 1:
                raise RuntimeError(f"stack_module_state: Expected {name} from each model to have the same "
                                   ".requires_grad")
            value = stack([t.detach() for t in tensors])
            out[name] = value.requires_grad_() if grads.pop() else value
        return out

    return (stacked([m.named_parameters() for m in models]), stacked([m.named_buffers() for m in models]))


def jacrev(func, argnums=0, *, has_aux=False):
    """x -> the Jacobian of func at x (output.shape + input.shape), by reverse mode."""
    if has_aux:
        raise NotImplementedError("jacrev: has_aux=True is not in minidl")

    def wrapper(*args):
        nums = _argnums_tuple(argnums)

        def partial(*chosen):
            full = list(args)
            for i, c in zip(nums, chosen):
                full[i] = c
            return func(*full)

        chosen = tuple(args[i] for i in nums)
        return _functional.jacobian(partial, chosen[0] if isinstance(argnums, int) else chosen, create_graph=True)

    return wrapper


jacfwd = jacrev   # (no forward mode in minidl: the same Jacobian by reverse mode)


def hessian(func, argnums=0):
    """x -> the Hessian of a scalar func (the Jacobian of its gradient)."""
    return jacrev(grad(func, argnums), argnums)


def _leaves(tree):
    if isinstance(tree, Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [leaf for v in tree for leaf in _leaves(v)]
    return []


def _entry(tree, dim, i):
    """Entry i along dim of every tensor in a tree of dicts, tuples and lists (torch.func's pytrees)."""
    if dim is None:
        return tree
    if isinstance(tree, Tensor):
        return tree.select(dim, i)
    if isinstance(tree, dict):
        return {k: _entry(v, dim, i) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_entry(v, dim, i) for v in tree)
    return tree


def _stacked(results, dim):
    from .ops.joining import stack

    first = results[0]
    if isinstance(first, Tensor):
        return stack(results, dim=dim)
    if isinstance(first, dict):
        return {k: _stacked([r[k] for r in results], dim) for k in first}
    if isinstance(first, (tuple, list)):
        dims = dim if isinstance(dim, (tuple, list)) else (dim,) * len(first)
        return type(first)(_stacked([r[k] for r in results], dims[k]) for k in range(len(first)))
    raise TypeError(f"vmap: the function returned a {type(first).__name__}; expected tensors (in dicts, tuples, lists)")


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """func applied to every entry of a batch dimension (in_dims: an int, None for an unbatched argument, or one per
    argument; arguments may be dicts, tuples and lists of tensors), the results stacked along out_dims. A loop over
    the entries: torch's results, not its speed (per-sample gradients: vmap(grad(loss), in_dims=(None, 0, 0)))."""
    def wrapper(*args, **kwargs):
        dims = in_dims if isinstance(in_dims, (tuple, list)) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(args)} arguments")
        sizes = {t.shape[d] for a, d in zip(args, dims) if d is not None for t in _leaves(a)}
        if len(sizes) != 1:
            raise ValueError(f"vmap: the batched arguments must share one batch size along in_dims, got {sorted(sizes)}"
                             if sizes else "vmap: at least one argument must be batched (in_dims not all None)")
        (n,) = sizes
        results = [func(*[_entry(a, d, i) for a, d in zip(args, dims)], **kwargs) for i in range(n)]
        return _stacked(results, out_dims)

    return wrapper
