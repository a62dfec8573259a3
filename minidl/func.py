"""torch.func: function transforms, built on minidl's tape.

    functional_call(model, params, args)   the model run with other tensors in place of its parameters/buffers
    grad(f)(x), grad_and_value(f)(x)        df/dx of a scalar f
    vjp(f, *primals)                        (f(primals), the function cotangents -> vector-Jacobian products)
    jvp(f, primals, tangents)               (f(primals), the Jacobian-vector product J tangents)
    stack_module_state(models)              the models' parameters and buffers stacked (for vmap over an ensemble)
    jacrev(f)(x), jacfwd(f)(x), hessian(f)(x)
    vmap(f, in_dims, out_dims)(*args)       f over a batch dimension
    make_functional(model), make_functional_with_buffers, combine_state_for_ensemble   (functorch's legacy API)

Arguments and results may be tensors or dicts, tuples and lists of them (torch's pytrees). minidl has reverse mode
only: jacfwd computes the same Jacobian as jacrev, and jvp uses two backward passes. vmap runs f once per batch
entry and stacks the results (torch's semantics, not its speed: no batching rule per op). A transform records the
graph of its derivative only when another transform around it will differentiate it again (hessian, grad(grad(f)));
those second derivatives go as far as the ops have their backward written as tensor ops
(minidl/autograd/higher_order.py lists them).
"""
from __future__ import annotations

import contextlib

from .autograd.function import enable_grad
from .autograd.function import grad as _grad
from .autograd.tensor import Tensor

__all__ = ["functional_call", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap",
           "stack_module_state", "make_functional", "make_functional_with_buffers", "combine_state_for_ensemble",
           "linearize", "functionalize"]


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


# How many differentiating transforms (grad, vjp, jacrev, jvp, hessian) are running their function now. A transform
# called inside another one records the graph of its derivative (create_graph), so that the outer one can
# differentiate it again (hessian = jacrev(jacrev(f)), grad(grad(f))); at the top level, or under vmap alone, it does
# not, and then f may use ops whose backward is not itself differentiable (nll_loss in per-sample gradients).
_depth = 0


@contextlib.contextmanager
def _differentiating():
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def _keep_graph(starts):
    """create_graph for a transform's derivative: inside another transform, or when an argument it starts from is part
    of a graph that goes on (MAML: grad(inner_loss)(params) with params that require grad)."""
    return _depth > 0 or any(t.requires_grad for t in starts)


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
    raise TypeError(f"torch.func: differentiated arguments must be tensors (or dicts, tuples, lists of them), got "
                    f"{type(tree).__name__}")


def _rebuilt(tree, values):
    """tree's structure with its tensors replaced by the next of `values` (an iterator), in order."""
    if isinstance(tree, Tensor):
        return next(values)
    if isinstance(tree, dict):
        return {k: _rebuilt(v, values) for k, v in tree.items()}
    return type(tree)(_rebuilt(v, values) for v in tree)


def _chosen_arguments(args, argnums):
    """(args with the differentiated ones made starts, the starts in order, the originals' tensors, a function that
    puts a flat list of per-start results back into the arguments' structure: one tree for an int argnums, a tuple of
    trees for a tuple)."""
    nums = _argnums_tuple(argnums)
    for i in nums:
        if not -len(args) <= i < len(args):
            raise RuntimeError(f"torch.func: argnums {i} is out of range for a function called with {len(args)} "
                               "positional arguments")
    args, starts, originals, spans = list(args), [], [], []
    for i in nums:
        originals.extend(_leaves(args[i]))
        begin = len(starts)
        args[i] = _prepared(args[i], starts)
        spans.append((i, begin, len(starts)))

    def structured(flat):
        per_arg = [_rebuilt(args[i], iter(flat[a:b])) for i, a, b in spans]
        return per_arg[0] if isinstance(argnums, int) else tuple(per_arg)

    return args, starts, originals, structured


def _evaluated(func, args, kwargs, argnums, has_aux, who):
    """func run on args with the differentiated ones made starts: (value, aux, the starts, the function that puts
    per-start results back into the arguments' structure, whether the derivative keeps its graph)."""
    args, starts, originals, structured = _chosen_arguments(args, argnums)
    keep = _keep_graph(originals)
    with enable_grad(), _differentiating():
        out = func(*args, **kwargs)
    if has_aux and not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{who}(f)(*args): output of function f should be a tuple: (output, aux) if has_aux is "
                           "True")
    value, aux = out if has_aux else (out, None)
    return value, aux, starts, structured, keep


def grad_and_value(func, argnums=0, has_aux=False):
    """x -> (df/dx, f(x)) for a function returning a one-element tensor (or (it, aux) with has_aux); x may be a dict,
    tuple or list of tensors (a model's parameters): the gradient has its structure. Inside another transform the
    gradient keeps its graph, so grad(grad(f)) gives second derivatives."""
    def wrapper(*args, **kwargs):
        value, aux, starts, structured, keep = _evaluated(func, args, kwargs, argnums, has_aux, "grad_and_value")
        if not isinstance(value, Tensor) or value.numel() != 1:
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise RuntimeError(f"grad(f)(*args): Expected f(*args) to return a scalar Tensor, got {shape} "
                               "(torch.func.grad's rule: use vjp or jacrev for other outputs)")
        with enable_grad():
            grads = _grad(value, starts, create_graph=keep, allow_unused=True, materialize_grads=True)
        g = structured(list(grads))
        if not keep:
            value = value.detach()
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
    """(func(*primals), vjp_fn): vjp_fn(cotangents) gives the vector-Jacobian product with respect to each primal, as
    a tuple with the primals' structure (each primal a tensor, or dicts, tuples, lists of tensors); the cotangents
    have the output's structure."""
    starts, originals = [], []
    for p in primals:
        originals.extend(_leaves(p))
    xs = [_prepared(p, starts) for p in primals]
    created_inside = _depth > 0
    with enable_grad(), _differentiating():
        out = func(*xs)
    value, aux = out if has_aux else (out, None)
    outs = _leaves(value)

    def vjp_fn(*cotangents):
        cots = cotangents[0] if len(cotangents) == 1 and len(outs) > 1 else cotangents
        cots = _leaves(cots)
        if len(cots) != len(outs):
            raise RuntimeError(f"vjp_fn: Expected {len(outs)} cotangent tensor(s), one per output tensor, got "
                               f"{len(cots)}")
        keep = created_inside or _keep_graph(originals)
        with enable_grad():
            grads = _grad(outs, starts, cots, retain_graph=True, create_graph=keep, allow_unused=True,
                          materialize_grads=True)
        return tuple(_rebuilt(xs, iter(grads)))

    return (value, vjp_fn, aux) if has_aux else (value, vjp_fn)


def _jacobian_times(outs, starts, tangents, keep):
    """J t for each of `outs` (J the Jacobian with respect to `starts`, t the tangents, one per start). The
    double-backward trick first (u -> J^T u is linear in u, so J t = d<J^T u, t>/du: two passes); where an op's
    backward is not differentiable, one backward pass per output element instead."""
    from .autograd.function import grad as grad_

    try:
        us = [o.new_zeros(o.shape).requires_grad_(True) for o in outs]
        with enable_grad():
            gs = grad_(outs, starts, us, retain_graph=True, create_graph=True, allow_unused=True)
            dot = None
            for g, t in zip(gs, tangents):
                if g is not None and g.requires_grad:
                    term = (g * t).sum()
                    dot = term if dot is None else dot + term
            if dot is None:
                return [o.new_zeros(o.shape) for o in outs]
            return list(grad_([dot], us, retain_graph=True, create_graph=keep, allow_unused=True,
                              materialize_grads=True))
    except NotImplementedError:
        pass
    results = []
    for o in outs:
        flat, entries = o.reshape(-1), []
        for k in range(flat.numel()):
            with enable_grad():
                gs = grad_([flat[k]], starts, retain_graph=True, create_graph=keep, allow_unused=True,
                           materialize_grads=True)
            entry = None
            for g, t in zip(gs, tangents):
                term = (g * t).sum()
                entry = term if entry is None else entry + term
            entries.append(entry)
        results.append(_stack(entries, dim=0).reshape(o.shape) if entries else o.new_zeros(o.shape))
    return results


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J tangents): the Jacobian-vector product (torch.func.jvp); primals and tangents are tuples of
    the same structure (tensors, or dicts, tuples, lists of them). minidl has reverse mode only: J t comes from two
    backward passes (the double-backward trick), or one per output element where an op's backward is not
    differentiable; the numbers are forward mode's."""
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise RuntimeError("jvp: Expected primals and tangents to be tuples of tensors, e.g. jvp(f, (x,), (t,))")
    if len(primals) != len(tangents):
        raise RuntimeError(f"jvp: Expected primals and tangents to have the same length, got {len(primals)} and "
                           f"{len(tangents)}")
    ts = _leaves(tangents)
    starts, originals = [], _leaves(primals)
    if len(ts) != len(originals):
        raise RuntimeError(f"jvp: Expected the tangents to have the primals' structure: {len(originals)} primal "
                           f"tensors, {len(ts)} tangent tensors")
    for p, t in zip(originals, ts):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"jvp: Expected primal and tangent to have the same shape, got {tuple(p.shape)} and "
                               f"{tuple(t.shape)}")
    keep = _keep_graph(originals)
    xs = [_prepared(p, starts) for p in primals]
    with enable_grad(), _differentiating():
        out = func(*xs)
    value, aux = out if has_aux else (out, None)
    outs = _leaves(value)
    products = _jacobian_times(outs, starts, ts, keep)
    tangent_out = _rebuilt(value, iter(products))
    if not keep:
        value = _rebuilt(value, iter([o.detach() for o in outs]))
    return (value, tangent_out, aux) if has_aux else (value, tangent_out)


def stack_module_state(models):
    """(params, buffers): dicts name -> the models' tensors stacked along a new first dimension, for
    vmap(functional_call) over an ensemble of models of one class (torch.func.stack_module_state). Stacked parameters
    are new leaves that require grad; the models' own tensors are not touched."""
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
            value = _stack([t.detach() for t in tensors], dim=0)
            out[name] = value.requires_grad_() if grads.pop() else value
        return out

    return (stacked([m.named_parameters() for m in models]), stacked([m.named_buffers() for m in models]))


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """x -> the Jacobian of func at x, by reverse mode: one backward pass per output element. For an output tensor
    of shape o and an input of shape i, a tensor of shape o + i; outputs and differentiated arguments may be dicts,
    tuples and lists of tensors (the result nests output structure, then input structure, as torch's); with a tuple
    argnums, a tuple per output."""
    def wrapper(*args, **kwargs):
        value, aux, starts, structured, keep = _evaluated(func, args, kwargs, argnums, has_aux, "jacrev")
        outs = _leaves(value)
        if not outs:
            raise RuntimeError("jacrev(f)(*args): Expected f to return a tensor (or dicts, tuples, lists of them)")
        jacobians = []
        for o in outs:
            flat, rows = o.reshape(-1), [[] for _ in starts]
            for k in range(flat.numel()):
                with enable_grad():
                    gs = _grad([flat[k]], starts, retain_graph=True, create_graph=keep, allow_unused=True,
                               materialize_grads=True)
                for i, g in enumerate(gs):
                    rows[i].append(g)
            per_start = []
            for i, x in enumerate(starts):
                shape = tuple(o.shape) + tuple(x.shape)
                per_start.append(_stack(rows[i], dim=0).reshape(shape) if rows[i]
                                 else x.new_zeros(shape))
            jacobians.append(structured(per_start))
        result = _rebuilt(value, iter(jacobians))
        return (result, aux) if has_aux else result

    return wrapper


def _stack(tensors, dim):
    from .ops.joining import stack

    return stack(tensors, dim=dim)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian, as torch.func.jacfwd gives it. minidl has reverse mode only: computed by jacrev, the same
    numbers."""
    return jacrev(func, argnums, has_aux=has_aux)


def hessian(func, argnums=0):
    """x -> the second derivatives of func at x: the Jacobian of its Jacobian (torch's jacfwd(jacrev(f))), so for an
    output of shape o and an input of shape i, a tensor of shape o + i + i."""
    return jacfwd(jacrev(func, argnums), argnums)


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
    first = results[0]
    if isinstance(first, Tensor):
        return _stack(results, dim=dim)
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


class FunctionalModule:
    """functorch's make_functional result: func(params, *args) runs a copy of the model with `params` (a tuple in
    the order of named_parameters) in place of its parameters; with buffers, func(params, buffers, *args)."""

    def __init__(self, model, with_buffers):
        import copy

        self.stateless_model = copy.deepcopy(model)
        self.param_names = [n for n, _ in self.stateless_model.named_parameters()]
        self.buffer_names = [n for n, _ in self.stateless_model.named_buffers()] if with_buffers else []
        self.with_buffers = with_buffers

    def __call__(self, params, *args, **kwargs):
        buffers = ()
        if self.with_buffers:
            buffers, args = args[0], args[1:]
        if len(params) != len(self.param_names):
            raise RuntimeError(f"make_functional: expected {len(self.param_names)} parameters, got {len(params)}")
        tensors = dict(zip(self.param_names, params))
        tensors.update(zip(self.buffer_names, buffers))
        return functional_call(self.stateless_model, tensors, args, kwargs)

    forward = __call__


def _functional(model, with_buffers, disable_autograd_tracking):
    fmodel = FunctionalModule(model, with_buffers)
    params = tuple(p.detach() if disable_autograd_tracking else p for p in fmodel.stateless_model.parameters())
    if not with_buffers:
        return fmodel, params
    return fmodel, params, tuple(b for _, b in fmodel.stateless_model.named_buffers())


def make_functional(model, disable_autograd_tracking=False):
    """(func, params) of a model (functorch's legacy API): func(params, *args) == model(*args) with those params;
    params are a copy's, unrelated to the model's own tensors."""
    return _functional(model, False, disable_autograd_tracking)


def make_functional_with_buffers(model, disable_autograd_tracking=False):
    """(func, params, buffers): func(params, buffers, *args)."""
    return _functional(model, True, disable_autograd_tracking)


def combine_state_for_ensemble(models):
    """(func, params, buffers) for vmap over an ensemble (functorch's legacy form of stack_module_state): each of
    params and buffers stacked along a new first dimension, func(params, buffers, *args) one model's call."""
    models = list(models)
    if not models:
        raise RuntimeError("combine_state_for_ensemble: Expected at least one model, got 0.")
    params, buffers = stack_module_state(models)
    fmodel = FunctionalModule(models[0], True)
    return fmodel, tuple(params[n] for n in fmodel.param_names), tuple(buffers[n] for n in fmodel.buffer_names)


def linearize(func, *primals):
    """(func(*primals), jvp_fn): jvp_fn(*tangents) is the Jacobian-vector product of func at primals
    (torch.func.linearize). minidl evaluates each jvp_fn call with jvp at the same primals (torch traces the linear
    function once); the values are the same."""
    output = func(*primals)

    def jvp_fn(*tangents):
        if len(tangents) != len(primals):
            raise RuntimeError(f"linearize: expected {len(primals)} tangents (one per primal), got {len(tangents)}")
        return jvp(func, primals, tangents)[1]

    return output, jvp_fn


def functionalize(func, *, remove="mutations"):
    """torch.func.functionalize: func with its mutations and views removed for tracing. minidl does not trace, and a
    functionalized function computes exactly what func computes (mutations of its inputs included), so this is func
    itself."""
    if remove not in ("mutations", "mutations_and_views"):
        raise RuntimeError(f"functionalize: remove must be 'mutations' or 'mutations_and_views', got {remove!r}")
    return func
