"""torch.autograd.graph: hooks on the tensors that the tape saves for the backward pass.

    with saved_tensors_hooks(pack_hook, unpack_hook):
        y = f(x)          # every tensor an op saves for its backward goes through pack_hook(tensor) -> anything
    y.backward()          # ... and comes back through unpack_hook(packed) -> tensor when that backward runs

    with save_on_cpu():   # the saved tensors kept in host memory, copied back to their device for the backward
        loss = model(batch)

What an op saves is what its backward reads: in minidl, the arrays a Function keeps on itself in forward (Mul its
two inputs, Exp its output, a convolution its input and weight, ...) and a custom Function's save_for_backward.
pack_hook receives each as a tensor (the op's input or output tensor itself when the array is one of theirs), and
the Function drops its own reference, so whatever pack_hook returns is all that is kept: a copy in host memory, a
file name. Which tensors an op saves follows minidl's backward formulas, so the number of pack calls can differ
from torch's for the same op (a minidl op may save a mask where torch's saves its input).
"""
from __future__ import annotations

import contextlib

from .function import _SAVED_HOOKS

__all__ = ["saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks"]

_disabled: list = []   # the messages of the open disable_saved_tensors_hooks contexts
_KEPT = {"inputs", "needs_input_grad", "_input_versions", "_output_meta", "_output_refs", "_output_versions",
         "_anomaly_stack", "_packed", "args", "outs"}


class saved_tensors_hooks:
    """Context manager: pack_hook(tensor) -> object runs when an op saves a tensor for its backward,
    unpack_hook(object) -> tensor when the backward needs it back (torch's; nested contexts: the innermost)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        if _disabled:
            raise RuntimeError(_disabled[-1])
        _SAVED_HOOKS.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _SAVED_HOOKS.pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    """The saved tensors copied to host memory at the forward and back to their device at the backward: GPU memory
    for activations traded for two copies each (torch's save_on_cpu; pin_memory is accepted, minidl copies from
    pageable memory)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack(tensor):
            return tensor.device, tensor.detach().to("cpu", copy=True)

        def unpack(packed):
            device, tensor = packed
            return tensor.to(device)

        super().__init__(pack, unpack)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """Inside it, entering saved_tensors_hooks raises RuntimeError(error_message) (torch's)."""
    _disabled.append(error_message)
    try:
        yield
    finally:
        _disabled.pop()


def _is_array(value):
    """A NumPy or CuPy array (what a Function keeps for its backward), not a NumPy scalar."""
    return type(value).__name__ == "ndarray" and type(value).__module__.partition(".")[0] in ("numpy", "cupy")


def pack_saved(fn, inputs, results):
    """Function.apply, under saved_tensors_hooks: every array that fn kept for its backward (attributes of fn, one
    level into tuples and lists, and a custom Function's saved tensors) handed to the pack hook as a tensor, and fn's
    own reference dropped."""
    from .tensor import Tensor

    pack, unpack = _SAVED_HOOKS[-1]
    known = {id(t._data): t for t in list(inputs) + list(results) if isinstance(t, Tensor)}
    hooks = list(_SAVED_HOOKS)
    _SAVED_HOOKS.clear()   # (the ops inside pack_hook save their tensors without it, as torch's)
    try:
        _pack_into(fn, inputs, results, known, pack, unpack)
    finally:
        _SAVED_HOOKS.extend(hooks)


def _pack_into(fn, inputs, results, known, pack, unpack):
    from .tensor import Tensor

    def packed(array):
        tensor = known.get(id(array))
        return pack(tensor if tensor is not None else Tensor._make(array))

    def saved_tensor(value):
        """An array the backward reads as a tensor: not a 0-d constant (a Python scalar operand, as in x.pow(2),
        which torch keeps as a number, not a saved tensor)."""
        if not _is_array(value):
            return False
        tensor = known.get(id(value))
        return value.ndim > 0 or (tensor is not None and tensor.requires_grad)

    saved = {}
    for name, value in list(fn.__dict__.items()):
        if name in _KEPT:
            continue
        if saved_tensor(value):
            saved[name] = ("array", packed(value))
        elif isinstance(value, (tuple, list)) and value and any(saved_tensor(v) for v in value):
            saved[name] = (type(value), [("array", packed(v)) if saved_tensor(v) else ("value", v) for v in value])
        else:
            continue
        fn.__dict__[name] = None
    ctx = fn.__dict__.get("ctx")
    if ctx is not None and getattr(ctx, "saved_tensors", ()):
        originals = {id(w): t for w, t in zip(getattr(fn, "args", ()), inputs) if isinstance(t, Tensor)}
        originals.update({id(w): t for w, t in zip(getattr(fn, "outs", ()), results)})
        ctx._packed_saved = [pack(originals.get(id(t), t)) for t in ctx.saved_tensors]
        ctx.saved_tensors = ()
    fn._packed = (unpack, saved)


def unpack_saved(fn):
    """Before fn's backward: each packed value through the unpack hook, back where fn keeps it."""
    unpack, saved = fn.__dict__.pop("_packed")

    def array(packed):
        tensor = unpack(packed)
        if not hasattr(tensor, "_data"):
            raise TypeError(f"saved_tensors_hooks: unpack_hook must return a tensor, got {type(tensor).__name__} "
                            f"(for a tensor that {fn.name} saved)")
        return tensor._data

    for name, (kind, value) in saved.items():
        if kind == "array":
            fn.__dict__[name] = array(value)
        else:
            fn.__dict__[name] = kind(array(v) if k == "array" else v for k, v in value)
    ctx = fn.__dict__.get("ctx")
    if ctx is not None and hasattr(ctx, "_packed_saved"):
        ctx.saved_tensors = tuple(unpack(p) for p in ctx.__dict__.pop("_packed_saved"))
