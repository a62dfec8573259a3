"""The autograd tape: Function (one op = its forward and its backward, together) and backward().

How it works (micrograd's idea, with tensors):
- Every differentiable op is a subclass of `Function` with `forward(*arrays)` and `backward(*grads)`.
  Both work on plain arrays (NumPy or CuPy), so one op serves both devices.
- `Fn.apply(*inputs)` runs forward and, when some input requires a gradient, records the Function
  object on each output tensor (`tensor._ctx`). The recorded Functions and their inputs form a graph.
- `backward()` sorts that graph topologically from the output and calls each Function's backward in
  reverse order, summing the gradients that reach each tensor. Leaf tensors accumulate into `.grad`.
- After backward the graph is freed (saved arrays dropped) unless `retain_graph=True`.
"""
from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from .. import _layout
from .._dtypes import DIFFERENTIABLE_SET
from . import anomaly_mode as _anomaly
from .anomaly_mode import MODE as _ANOMALY

# ------------------------------------------------------------------------------------------------
# Grad mode (per thread, as in PyTorch)
# ------------------------------------------------------------------------------------------------

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "enabled", True)


class set_grad_enabled:
    """Context manager (and function) that turns graph recording on or off in this thread."""

    def __init__(self, mode: bool):
        self.prev = is_grad_enabled()
        _state.enabled = bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False


class no_grad:
    """`with minidl.no_grad():` runs ops without recording them (evaluation, optimizer updates).
    Also usable as a decorator."""

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = False

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
        return wrapper


class enable_grad(no_grad):
    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = True


# ------------------------------------------------------------------------------------------------
# Function
# ------------------------------------------------------------------------------------------------


class Function:
    """Base class of every differentiable op.

    Subclasses implement:
        forward(self, *arrays, **params) -> array or tuple of arrays
        backward(self, *grad_outputs) -> array / None, or a tuple with one entry per forward input
    Saved state for backward is kept as attributes of `self`. `self.needs_input_grad[i]` says whether
    input i needs a gradient, so backward can skip work.
    """

    # Filled in by apply():
    inputs: tuple = ()
    needs_input_grad: tuple = ()

    # What backward reads, for the in-place check (PyTorch's "modified by an inplace operation"):
    # an op whose backward reads its input arrays (Mul: g * b) or its output array (Exp: g * out)
    # must not see them changed in place between forward and backward. Ops whose backward needs
    # only shapes (Add, Reshape, Sum, ...) set saves_inputs = False, so `y = x + 1; x += 1` stays legal.
    saves_inputs = True
    saves_output = False
    # Ops whose output may be a view of their first input (reshape, permute, expand, basic
    # indexing): when it is (same memory), the output shares the input's version counter.
    may_return_view = False

    def forward(self, *arrays, **params):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, *grad_outputs):  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def next_functions(self):
        """((fn, output_index), ...) for each input, as PyTorch's grad_fn.next_functions: the Function
        that made it, an AccumulateGrad for a leaf that requires grad, or (None, 0)."""
        out = []
        for t in self.inputs:
            if t is None or not t.requires_grad:
                out.append((None, 0))
            elif t._ctx is None:
                out.append((AccumulateGrad(t), 0))
            else:
                out.append((t._ctx, t._out_index))
        return tuple(out)

    def __repr__(self):
        return f"<{self.name}Backward object>"

    @classmethod
    def apply(cls, *inputs, **params):
        """Run forward on the inputs' arrays and wrap the outputs; record the op on the tape when an input
        requires grad and grad mode is on. (Written for few Python calls: it runs for every op.)"""
        Tensor = _TENSOR[0] if _TENSOR else _tensor_class()
        ctx_style = _CTX_STYLE.get(cls)
        if ctx_style is None:
            ctx_style = _CTX_STYLE[cls] = _is_ctx_style(cls)
        if ctx_style:  # a Function written in PyTorch's style (static forward(ctx, ...))
            if _DUAL_LEVELS and hasattr(cls, "jvp") and cls.backward is Function.backward:
                from .forward_ad import apply_with_jvp   # forward mode through the user's jvp (no backward to use)

                return apply_with_jvp(cls, inputs, FunctionCtx)
            return _CtxFunction.apply(*inputs, user_cls=cls)
        fn = cls()
        arrays, needs, any_grad = [], [], False
        for t in inputs:
            if isinstance(t, Tensor):
                arrays.append(t._data)
                rg = t.requires_grad
                needs.append(rg)
                any_grad = any_grad or rg
            else:
                arrays.append(t)
                needs.append(False)
        fn.needs_input_grad = needs = tuple(needs)
        record = any_grad and getattr(_state, "enabled", True)   # (is_grad_enabled, inline)
        if record:   # (list comprehensions: cheaper than tuple(generator) on a path every op takes)
            fn.inputs = tuple([t if isinstance(t, Tensor) else None for t in inputs])
            fn._input_versions = tuple([t._vbox[0] if isinstance(t, Tensor) else 0 for t in inputs])
        if _ANOMALY[0] and record:
            fn._anomaly_stack = _anomaly.forward_stack()
        outputs = fn.forward(*arrays, **params)
        single = not isinstance(outputs, tuple)
        if single:
            differentiable = record and outputs.dtype in DIFFERENTIABLE_SET
            result = Tensor._make(outputs, requires_grad=differentiable)
            if differentiable:
                result._ctx = fn   # _out_index stays 0
            results, outputs = (result,), (outputs,)
        else:
            results = []
            for i, out in enumerate(outputs):
                # Only floating-point outputs carry gradients (indices, masks and comparisons do not).
                differentiable = record and out.dtype in DIFFERENTIABLE_SET
                t = Tensor._make(out, requires_grad=differentiable)
                if differentiable:
                    t._ctx, t._out_index = fn, i
                results.append(t)
        if cls.may_return_view and isinstance(inputs[0], Tensor):   # views share the version counter
            base = inputs[0]._base if inputs[0]._base is not None else inputs[0]
            for result, out in zip(results, outputs):   # (split: every output is a view)
                if _same_memory(out, arrays[0]):
                    result._vbox, result._base = inputs[0]._vbox, base
        if record:
            if single:   # (no comprehension: each is a call of its own in CPython 3.11)
                fn._output_meta = ((outputs[0].shape, outputs[0].dtype),)
                fn._output_refs = (weakref.ref(results[0]),)
                fn._output_versions = [results[0]._vbox[0]]
            else:
                fn._output_meta = tuple([(o.shape, o.dtype) for o in outputs])
                fn._output_refs = tuple([weakref.ref(t) for t in results])
                fn._output_versions = [t._vbox[0] for t in results]
            if _SAVED_HOOKS:
                from .graph import pack_saved   # (what backward reads goes through the pack hook)

                pack_saved(fn, inputs, results)
        return results[0] if single else tuple(results)

    def _release(self):
        """Drop everything saved for backward (called after backward unless retain_graph)."""
        d = self.__dict__
        # (one new dict of what stays, instead of deleting the rest key by key: this runs for every node of every
        # backward pass). Dropping the inputs frees the intermediate activations; a second backward() reaching this
        # Function raises (see run_backward) instead of silently stopping here.
        self.__dict__ = {"needs_input_grad": d.get("needs_input_grad", ()), "_output_meta": d.get("_output_meta"),
                         "_output_refs": d.get("_output_refs"), "_input_versions": d.get("_input_versions"),
                         "_output_versions": d.get("_output_versions"), "inputs": (), "_released": True}


# ------------------------------------------------------------------------------------------------
# PyTorch's custom-Function style: @staticmethod forward(ctx, *tensors) / backward(ctx, *grads)
# ------------------------------------------------------------------------------------------------


_CTX_STYLE: dict = {}   # Function class -> whether it is written in PyTorch's ctx style (checked once per class)
_TENSOR = []
_DUAL_LEVELS: list = []   # forward_ad's open dual levels (forward_ad.py keeps them; Function.apply reads them)
_SAVED_HOOKS: list = []   # the open saved_tensors_hooks' (pack, unpack), innermost last (autograd/graph.py)


def _tensor_class():
    """minidl.Tensor, imported on first use (tensor.py imports this module)."""
    if not _TENSOR:
        from .tensor import Tensor

        _TENSOR.append(Tensor)
    return _TENSOR[0]


def _is_ctx_style(cls) -> bool:
    for klass in cls.__mro__:
        if "forward" in klass.__dict__:
            return isinstance(klass.__dict__["forward"], staticmethod)
    return False


class FunctionCtx:
    """The `ctx` of a PyTorch-style Function: what forward saves for backward."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tuple(tensors)

    def mark_non_differentiable(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        raise NotImplementedError("Function ctx.mark_dirty (in-place custom Functions) is not supported by minidl")

    def set_materialize_grads(self, value):
        pass


def once_differentiable(backward):
    """Decorates a custom Function's backward that can be differentiated once only (torch's): it runs with grad
    mode off, and a second derivative through it (backward(create_graph=True), then again) raises instead of
    giving a silent zero."""
    import functools

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            result = backward(ctx, *grads)
        if not is_grad_enabled() or not any(getattr(g, "requires_grad", False) for g in grads):
            return result   # the usual backward, or one whose gradients carry no graph (torch's rule)
        from .tensor import Tensor

        def guard(r):
            return _OnceDifferentiable.apply(r.detach().requires_grad_()) if isinstance(r, Tensor) else r

        return tuple(guard(r) for r in result) if isinstance(result, tuple) else guard(result)

    return wrapper


class _OnceDifferentiable(Function):
    def forward(self, x):
        return x

    def backward(self, g):
        raise RuntimeError("trying to differentiate twice a function that was marked with @once_differentiable")


class _CtxFunction(Function):
    """Runs a user Function written in PyTorch's style (tutorials' LegendrePolynomial3): forward and
    backward are static methods taking a ctx and Tensors; this node converts arrays to Tensors and
    back, so the tape treats it as any other Function."""

    def forward(self, *arrays, user_cls=None):
        from .tensor import Tensor

        self.user_cls = user_cls
        self.is_tensor = tuple(hasattr(a, "shape") and hasattr(a, "dtype") for a in arrays)
        self.ctx = FunctionCtx(self.needs_input_grad)
        args = [Tensor._make(a) if t else a for a, t in zip(arrays, self.is_tensor)]
        with no_grad():
            out = user_cls.forward(self.ctx, *args)
        # (the forward's tensors, so that backward_graph can map what ctx saved back to the tape's tensors)
        self.args, self.outs = args, (out if isinstance(out, tuple) else (out,))
        if isinstance(out, tuple):
            return tuple(o._data for o in out)
        return out._data

    def backward(self, *grads):
        from .tensor import Tensor

        with no_grad():
            result = self.user_cls.backward(self.ctx, *(Tensor._make(g) for g in grads))
        result = self._trimmed(result)
        if len(result) != len(self.is_tensor):
            raise RuntimeError(f"{self.user_cls.__name__}.backward returned {len(result)} gradients for "
                               f"{len(self.is_tensor)} inputs to forward (return None for inputs without one)")
        return tuple(r._data if isinstance(r, Tensor) and t else None for r, t in zip(result, self.is_tensor))

    def backward_graph(self, *grads):
        """The user's backward on the tape's own tensors (backward(create_graph=True), autograd/higher_order.py): what
        ctx saved is mapped back from the forward's wrappers to this op's inputs and outputs, and the backward runs
        with grad mode on, so a backward written in tensor ops is recorded and can be differentiated again (as
        torch's custom Functions; one written in array code is not)."""
        mapped = {id(w): t for w, t in zip(self.args, self.inputs) if t is not None}
        mapped.update({id(w): ref() for w, ref in zip(self.outs, self._output_refs) if ref() is not None})
        saved, ctx = self.ctx.saved_tensors, self.ctx
        ctx.saved_tensors = tuple(mapped.get(id(t), t) for t in saved)
        try:
            result = self.user_cls.backward(ctx, *grads)
        finally:
            ctx.saved_tensors = saved
        result = self._trimmed(result)
        if len(result) != len(self.is_tensor):
            raise RuntimeError(f"{self.user_cls.__name__}.backward returned {len(result)} gradients for "
                               f"{len(self.is_tensor)} inputs to forward (return None for inputs without one)")
        return tuple(r if t else None for r, t in zip(result, self.is_tensor))

    def _trimmed(self, result):
        """backward's results as a tuple; trailing Nones past the forward's inputs dropped (torch allows them: a
        backward written for forward's optional arguments, called without them)."""
        result = result if isinstance(result, tuple) else (result,)
        n = len(self.is_tensor)
        return result[:n] if len(result) > n and all(r is None for r in result[n:]) else result

    @property
    def name(self) -> str:
        return getattr(self, "user_cls", type(self)).__name__


def _same_memory(a, b) -> bool:
    """Is array a a view of b's memory (NumPy/CuPy keep the owning array in .base)?"""
    root_a, root_b = getattr(a, "base", None), getattr(b, "base", None)
    return root_a is not None and (root_a is b or root_a is root_b)


class AccumulateGrad:
    """Where a leaf's gradient is summed into .grad (what grad_fn.next_functions shows for a leaf)."""

    next_functions = ()

    def __init__(self, variable):
        self.variable = variable

    @property
    def name(self) -> str:
        return "AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad object>"


# ------------------------------------------------------------------------------------------------
# Helpers for backward passes
# ------------------------------------------------------------------------------------------------


def unbroadcast(grad, shape):
    """Sum a gradient down to `shape`, undoing NumPy broadcasting (leading dims, then size-1 dims)."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


# ------------------------------------------------------------------------------------------------
# The backward pass
# ------------------------------------------------------------------------------------------------


def _topological_order(root_fn):
    """Functions reachable from root_fn, each after every Function that consumes its outputs."""
    order, visited = [], set()
    stack = [(root_fn, False)]
    while stack:  # iterative DFS: deep graphs (long RNN unrolls) must not hit the recursion limit
        fn, processed = stack.pop()
        if processed:
            order.append(fn)
            continue
        if id(fn) in visited:
            continue
        visited.add(id(fn))
        stack.append((fn, True))
        for inp in fn.inputs:
            if inp is not None and inp._ctx is not None and id(inp._ctx) not in visited:
                stack.append((inp._ctx, False))
    return order[::-1]  # root first


_CALLBACKS: list = []   # run when the current backward pass ends (queue_callback)


def queue_callback(callback):
    """Call `callback()` once the backward pass now running has gone through the whole graph (torch's
    Variable._execution_engine.queue_callback). DistributedDataParallel uses it to wait for its last
    gradient buckets."""
    _CALLBACKS.append(callback)


def run_backward(tensor, grad_array, retain_graph: bool = False, capture=None):
    """Back-propagate `grad_array` (d loss / d tensor) through the graph that produced `tensor`. capture (what
    autograd.grad asks for): a dict keyed by id() of the tensors whose gradients to return in it instead of
    accumulating any leaf's .grad (value: [tensor, gradient array or None])."""
    try:
        _run_backward(tensor, grad_array, retain_graph, capture)
        while _CALLBACKS:
            _CALLBACKS.pop(0)()
    finally:
        _CALLBACKS.clear()


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """d(outputs)/d(inputs) (torch.autograd.grad): the gradients of the outputs (weighted by grad_outputs, each a
    tensor of its output's shape; ones for a scalar) with respect to each input, as a tuple, without touching any
    .grad. inputs may be leaves or intermediate tensors. allow_unused: an input the outputs do not depend on gives
    None (zeros with materialize_grads) instead of an error. create_graph=True records the backward pass itself
    (autograd/higher_order.py), so the returned gradients can be differentiated again."""
    from .tensor import Tensor
    from .. import _device

    if is_grads_batched:
        raise NotImplementedError("autograd.grad: is_grads_batched=True (vmap over grad_outputs) is not in minidl")
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"autograd.grad: got {len(grad_outputs)} grad_outputs for {len(outputs)} outputs")
    for i, t in enumerate(inputs):
        if not isinstance(t, Tensor):
            raise TypeError(f"autograd.grad: inputs[{i}] is a {type(t).__name__}, not a Tensor")
        if not t.requires_grad:
            raise RuntimeError(f"autograd.grad: inputs[{i}] does not require grad (One of the differentiated Tensors "
                               "does not require grad)")
    capture = {id(t): [t, None] for t in inputs}
    keep = retain_graph if retain_graph is not None else create_graph
    for n, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(out, Tensor) or not out.requires_grad:
            raise RuntimeError(f"autograd.grad: outputs[{n}] does not require grad and has no grad_fn")
        if g is None:
            if out.numel() != 1:
                raise RuntimeError(f"autograd.grad: grad can be implicitly created only for scalar outputs; outputs[{n}]"
                                   f" has shape {tuple(out.shape)}: pass grad_outputs")
            seed = np.ones_like(out._data)
        else:
            seed = g._data if isinstance(g, Tensor) else np.asarray(g)
            if tuple(seed.shape) != tuple(out.shape):
                raise RuntimeError(f"autograd.grad: grad_outputs[{n}] has shape {tuple(seed.shape)}, expected "
                                   f"{tuple(out.shape)}")
            seed = seed.astype(out._data.dtype, copy=False)
        if create_graph:
            from .higher_order import run_backward_graph

            run_backward_graph(out, g if isinstance(g, Tensor) else Tensor._make(seed), capture)
        else:
            run_backward(out, seed, retain_graph=bool(keep) or n + 1 < len(outputs), capture=capture)
    result = []
    for i, t in enumerate(inputs):
        g = capture[id(t)][1]
        if g is None:
            if not allow_unused and not materialize_grads:
                raise RuntimeError(f"autograd.grad: inputs[{i}] was not used in the graph of the outputs (One of the "
                                   "differentiated Tensors appears to not have been used in the graph). Set "
                                   "allow_unused=True if this is the desired behavior.")
            result.append(Tensor._make(_device.get_array_module(t._data).zeros_like(t._data))
                          if materialize_grads else None)
        else:
            result.append(g if create_graph else Tensor._make(g.copy()))
    return tuple(result)


def _captured(capture, tensor, g):
    """Add g to tensor's slot of an autograd.grad capture (True), or say it has none (False)."""
    slot = capture.get(id(tensor))
    if slot is None or slot[0] is not tensor:
        return False
    if tensor._hooks:
        g = _run_hooks(tensor, g)
    slot[1] = g if slot[1] is None else slot[1] + g
    return True


def _run_backward(tensor, grad_array, retain_graph, capture=None):
    if tensor._ctx is None:  # a leaf: its gradient is the seed itself
        if capture is None:
            _accumulate_leaf(tensor, grad_array)
        else:
            _captured(capture, tensor, grad_array)
        return
    pending: dict[int, list] = {id(tensor._ctx): [None] * len(tensor._ctx._output_meta)}
    pending[id(tensor._ctx)][tensor._out_index] = grad_array
    with no_grad():
        for fn in _topological_order(tensor._ctx):
            grads_out = pending.pop(id(fn), None)
            single = grads_out is not None and len(grads_out) == 1   # the usual op: one output, no generator
            if grads_out is None or (grads_out[0] is None if single else all(g is None for g in grads_out)):
                continue
            fd = fn.__dict__   # (this loop runs for every node of every backward pass: attributes read once)
            if "_released" in fd:
                raise RuntimeError(
                    f"backward: trying to go through the graph of {fn.name} a second time; its saved "
                    "arrays were freed after the first backward. Pass retain_graph=True to the first "
                    "backward() if you need to call it twice."
                )
            inputs = fn.inputs
            _check_versions(fn)
            if "_packed" in fd:   # saved under saved_tensors_hooks: back through the unpack hook
                from .graph import unpack_saved

                unpack_saved(fn)
            if not single and any(g is None for g in grads_out):   # unused outputs get a zero gradient
                xp = _array_module(next(g for g in grads_out if g is not None))
                grads_out = [
                    g if g is not None else xp.zeros(shape, dtype=dtype)
                    for g, (shape, dtype) in zip(grads_out, fn._output_meta)
                ]
            for k, ref in enumerate(fn._output_refs):  # the outputs' hooks, then retain_grad()
                t = ref()
                if t is None:
                    continue
                if capture is not None and grads_out[k] is not None and id(t) in capture:
                    _captured(capture, t, grads_out[k])   # (a non-leaf input of autograd.grad: its hooks run there)
                    continue
                if t._hooks:
                    grads_out[k] = _run_hooks(t, grads_out[k])
                if t._retains_grad:
                    _accumulate_leaf(t, grads_out[k], run_hooks=False)
            grads_in = fn.backward(*grads_out) if not _ANOMALY[0] else _anomaly.checked_backward(fn, grads_out)
            if not isinstance(grads_in, tuple):
                grads_in = (grads_in,)
            if len(grads_in) != len(inputs):
                raise RuntimeError(
                    f"{fn.name}.backward returned {len(grads_in)} gradients for {len(inputs)} inputs"
                )
            for inp, g in zip(inputs, grads_in):
                if inp is None or g is None or not inp.requires_grad:
                    continue
                data = inp._data
                if g.shape != data.shape and tuple(g.shape) != tuple(inp.shape):
                    raise RuntimeError(
                        f"{fn.name}.backward returned a gradient of shape {tuple(g.shape)} for an input "
                        f"of shape {tuple(inp.shape)}"
                    )
                gd = g.dtype
                if gd is not data.dtype and gd != data.dtype:
                    if gd.kind == "c" and data.dtype.kind != "c":
                        g = g.real   # a real input of a complex op: the real part (torch's convention)
                    with np.errstate(over="ignore"):   # (a float32 gradient past float16's range is inf, quietly)
                        g = g.astype(data.dtype)
                ctx = inp._ctx
                if ctx is None and capture is not None:   # autograd.grad: no leaf's .grad changes
                    _captured(capture, inp, g)
                elif ctx is None:
                    # The leaf may keep g itself (no copy) when nothing else can reach it: it owns its memory
                    # and the only references are this frame's g and grads_in's slot (PyTorch's AccumulateGrad
                    # steals a gradient the same way, by its use count). A gradient returned twice, kept by
                    # the Function, passed through from grads_out or a view of another array is copied.
                    refs = sys.getrefcount(g)
                    _accumulate_leaf(inp, g, owned=refs <= _FRESH_REFS and g.base is None)
                else:
                    slots = pending.get(id(ctx))
                    if slots is None:
                        slots = pending[id(ctx)] = [None] * len(ctx._output_meta)
                    prev = slots[inp._out_index]
                    slots[inp._out_index] = g if prev is None else prev + g
            if not retain_graph:
                fn._release()


def _check_versions(fn):
    """Raise (as PyTorch) when an array that fn's backward reads was changed in place after forward."""
    if fn.saves_inputs and not fn.saves_output:   # the usual case, checked without building a list
        for t, v in zip(fn.inputs, fn._input_versions):
            if t is not None and t._vbox[0] != v:   # (the counter itself: no property call per input)
                break
        else:
            return
    elif not fn.saves_inputs and not fn.saves_output:
        return
    suspects = []
    if fn.saves_inputs:
        suspects += [(t, v, "an input") for t, v in zip(fn.inputs, fn._input_versions) if t is not None]
    if fn.saves_output:
        suspects += [(ref(), v, f"output {i}") for i, (ref, v) in enumerate(zip(fn._output_refs, fn._output_versions))]
    for t, expected, role in suspects:
        if t is not None and t._version != expected:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{t.dtype} tensor of shape {list(t.shape)}], which is {role} of {fn.name}, is at "
                f"version {t._version}; expected version {expected} instead. Hint: compute a new tensor "
                "(x = x + y) instead of changing it in place (x += y), or clone() it before."
            )


def _run_hooks(tensor, g):
    """g through the tensor's hooks: each may return a replacement gradient."""
    from .tensor import Tensor

    for hook in list(tensor._hooks):
        result = hook(Tensor._make(g))
        if result is not None:
            g = result._data if isinstance(result, Tensor) else result
    return g


def _fresh_refcount():
    """What sys.getrefcount says, in _run_backward's loop, of a gradient that only that loop holds (its
    local name, its slot in grads_in and zip's reused result tuple): measured the same way, not assumed,
    as the count depends on the interpreter (3.14 borrows references that 3.11 counts)."""
    for _, g in zip((None,), (np.empty(0),)):
        refs = sys.getrefcount(g)
        return refs


_FRESH_REFS = _fresh_refcount()


def _accumulate_leaf(tensor, g, run_hooks=True, owned=False):
    """tensor.grad += g (or = g). owned: nobody else holds g, so the leaf may keep it instead of a copy."""
    Tensor = _TENSOR[0] if _TENSOR else _tensor_class()
    if run_hooks and tensor._hooks:
        g, owned = _run_hooks(tensor, g), False
    if tensor._grad is None:
        # Never alias a gradient that another tensor (or the caller) still holds: a copy unless owned. It takes
        # the parameter's memory format (as PyTorch's AccumulateGrad), so a channels_last filter's
        # gradient is channels_last too and an optimizer updates the two alike.
        # (._grad, not the .grad setter: the tape's gradient has the leaf's shape, dtype and device by construction)
        data = tensor._data
        if data.ndim in (4, 5) and not data.flags.c_contiguous and _layout.strictly_channels_last(data):
            tensor._grad = Tensor._make(_layout.copy_as(g, True))
        elif owned and g.flags.c_contiguous and g.shape == data.shape:
            tensor._grad = Tensor._make(g)
        else:
            tensor._grad = Tensor._make(g.copy())
    else:   # (in place, a .grad with a graph from backward(create_graph=True) too: torch's AccumulateGrad with
        # grad mode off adds into the existing tensor)
        acc = tensor._grad._data
        if type(acc) is np.ndarray or (acc.flags.c_contiguous and g.flags.c_contiguous):
            tensor._grad._data = acc + g
        else:   # CuPy: a channels_last gradient keeps its memory format
            tensor._grad._data = _layout.pointwise(lambda a, b: a + b, acc, g)
    hooks = tensor.__dict__.get("_post_accumulate_hooks")
    if hooks:
        for hook in list(hooks):
            hook(tensor)


def _array_module(a):
    if type(a) is np.ndarray:
        return np
    from .._device import get_array_module

    return get_array_module(a)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None, inputs=None):
    """torch.autograd.backward: the gradients of several tensors accumulated into the leaves' .grad in one call
    (each tensor's backward with its grad_tensor, the graph kept until the last)."""
    tensors = (tensors,) if hasattr(tensors, "_data") else tuple(tensors)
    grads = grad_tensors if grad_tensors is not None else grad_variables
    grads = (None,) * len(tensors) if grads is None else ((grads,) if hasattr(grads, "_data") else tuple(grads))
    if len(grads) != len(tensors):
        raise RuntimeError(f"backward: got {len(grads)} grad_tensors for {len(tensors)} tensors")
    keep = create_graph if retain_graph is None else retain_graph
    for k, (t, g) in enumerate(zip(tensors, grads)):
        t.backward(g, retain_graph=keep or k + 1 < len(tensors), create_graph=create_graph, inputs=inputs)
