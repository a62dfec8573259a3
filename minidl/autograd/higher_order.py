"""The backward pass as taped tensor operations: create_graph=True (gradients of gradients).

The ordinary backward pass (function.py) calls each Function's `backward`, which computes on arrays: fast, and
invisible to the tape, so its result cannot be differentiated again. For a second derivative (a Hessian-vector
product, a gradient penalty, the inner step of MAML, the u_xx of a physics-informed network) the gradient itself
must be a tensor with a graph. Here the pass runs the same walk with tensors: each Function's `backward_graph`
states its backward with minidl's own tensor ops (Mul's: g * b and g * a), with grad mode on, so every gradient
is recorded as it is computed and `backward()` / `autograd.grad` can go through it again.

A Function without `backward_graph` stops the pass with its name: its backward exists only as array code (local
response norm, embedding, the recurrent family, the fused attention, most of the less common ops). The
normalisations write theirs from x with the statistics recomputed as tensor ops
(normalization._normalization_backward_graph), so every order is exact. The convolutions and
poolings record theirs as ops of the same primitives: a convolution's dx is a transposed convolution and its dw a
ConvolutionBackwardFilter (nn/functional/convolution.py), a pooling's dx a PoolingBackward (pooling.py); each is
linear in its gradient argument, so its own gradient is the forward primitive again (the adjoint).
"""
from __future__ import annotations

import numpy as np

from .function import _check_versions, _topological_order, enable_grad


def sum_to(g, shape):
    """g summed down to `shape` (undoing broadcasting: leading dims, then size-1 dims), as tensor ops."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    extra = g.ndim - len(shape)
    if extra > 0:
        g = g.sum(tuple(range(extra)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axes, keepdim=True)
    return g.reshape(shape)


def saved_input(fn, i, array):
    """Input i of fn as a tensor: the one recorded (so gradients flow into it), or a constant of its array. A Python
    number the op took (on the GPU wrapped around a NumPy scalar, which would read as a CPU tensor) comes back as
    the number."""
    t = fn.inputs[i] if i < len(fn.inputs) else None
    if t is not None:
        data = t._data
        if isinstance(data, np.generic) and not t.requires_grad:
            return data.item()
        return t
    from .tensor import Tensor

    return Tensor._make(array)


def _hooked(tensor, g):
    for hook in list(tensor._hooks):
        result = hook(g)
        if result is not None:
            g = result
    return g


def _accumulate(tensor, g):
    """tensor.grad += g, keeping g's graph (torch's .grad after backward(create_graph=True) has a grad_fn)."""
    if tensor._hooks:
        g = _hooked(tensor, g)
    tensor._grad = g if tensor._grad is None else tensor._grad + g


def run_backward_graph(tensor, grad, capture=None):
    """Back-propagate the tensor `grad` through the graph of `tensor`, recording every step (create_graph=True).
    capture: as run_backward's (autograd.grad's inputs by id), its slots then holding tensors. The graph is kept
    (retain_graph), as torch keeps it under create_graph."""
    if tensor._ctx is None:
        if capture is not None and id(tensor) in capture:
            capture[id(tensor)][1] = grad
        elif capture is None:
            _accumulate(tensor, grad)
        return
    pending = {id(tensor._ctx): [None] * len(tensor._ctx._output_meta)}
    pending[id(tensor._ctx)][tensor._out_index] = grad
    with enable_grad():
        for fn in _topological_order(tensor._ctx):
            grads_out = pending.pop(id(fn), None)
            if grads_out is None or all(g is None for g in grads_out):
                continue
            if getattr(fn, "_released", False):
                raise RuntimeError(f"backward(create_graph=True): the graph of {fn.name} was freed by an earlier "
                                   "backward(); pass retain_graph=True (or create_graph=True) to that one")
            _check_versions(fn)
            if "_packed" in fn.__dict__:   # saved under saved_tensors_hooks: back through the unpack hook
                from .graph import unpack_saved

                unpack_saved(fn)
            method = getattr(fn, "backward_graph", None)
            if method is None:
                raise NotImplementedError(
                    f"create_graph=True: the gradient of {fn.name} is computed by array code that the tape does not "
                    "record, so it cannot be differentiated again (minidl's double backward covers the elementwise "
                    "arithmetic and math functions, relu / leaky_relu / elu / sigmoid / tanh, softmax and "
                    "log_softmax, sums and means, reshapes, permutes, expands, basic indexing, cat, matmul, "
                    "linear, convolutions, pooling, batch / layer / RMS norm, gelu, dropout, the losses built from "
                    "them, and custom Functions whose backward is written in tensor ops). Compute this second derivative by finite differences, "
                    "or write the model with those ops.")
            if len(grads_out) > 1 and any(g is None for g in grads_out):
                ref = next(g for g in grads_out if g is not None)
                grads_out = [g if g is not None else _zeros(ref, shape, dtype)
                             for g, (shape, dtype) in zip(grads_out, fn._output_meta)]
            for k, ref in enumerate(fn._output_refs):   # the outputs' hooks, retain_grad(), autograd.grad's captures
                t = ref()
                if t is None or grads_out[k] is None:
                    continue
                if capture is not None and id(t) in capture and capture[id(t)][0] is t:
                    slot = capture[id(t)]
                    slot[1] = grads_out[k] if slot[1] is None else slot[1] + grads_out[k]
                    continue
                if t._hooks:
                    grads_out[k] = _hooked(t, grads_out[k])
                if t._retains_grad:
                    t._grad = grads_out[k] if t._grad is None else t._grad + grads_out[k]
            grads_in = method(*grads_out)
            if not isinstance(grads_in, tuple):
                grads_in = (grads_in,)
            for inp, g in zip(fn.inputs, grads_in):
                if inp is None or g is None or not inp.requires_grad:
                    continue
                if g.dtype != inp.dtype:
                    g = g.type(inp.dtype)
                if inp._ctx is None:
                    if capture is not None:
                        slot = capture.get(id(inp))
                        if slot is not None and slot[0] is inp:
                            slot[1] = g if slot[1] is None else slot[1] + g
                    else:
                        _accumulate(inp, g)
                else:
                    slots = pending.setdefault(id(inp._ctx), [None] * len(inp._ctx._output_meta))
                    prev = slots[inp._out_index]
                    slots[inp._out_index] = g if prev is None else prev + g


def _zeros(like, shape, dtype):
    from .._device import get_array_module
    from .tensor import Tensor

    return Tensor._make(get_array_module(like._data).zeros(shape, dtype=dtype))
