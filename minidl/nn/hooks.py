"""A Module's hooks (PyTorch's register_forward_pre_hook, register_forward_hook, the full backward hooks and
pre-hooks, and the state-dict hooks), and how a call runs them.

    forward pre-hooks(module, args) -> forward -> forward hooks(module, args, output)
    backward: pre-hooks(module, grad_output) when the output's gradients arrive, then full hooks(module,
              grad_input, grad_output) when the inputs' have been computed (identity ops on the inputs and outputs
              carry tensor hooks that call them, PyTorch's BackwardHook simplified)

Module (nn/module.py) inherits these from ModuleHooks; a module without hooks never enters this file's call path.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import MutableMapping


class RemovableHandle:
    """What register_*_hook returns (torch.utils.hooks.RemovableHandle): remove() unregisters the hook; also a
    context manager that removes it on exit."""

    _next_id = 0

    def __init__(self, hooks: dict, kind: str):
        self.hooks_dict_ref, self.kind = hooks, kind
        RemovableHandle._next_id += 1
        self.id = RemovableHandle._next_id

    def remove(self):
        self.hooks_dict_ref.get(self.kind, {}).pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _HookView(MutableMapping):
    """A module's hooks of one kind as torch's OrderedDict id -> hook (Module._forward_pre_hooks): reads the registry
    register_*_hook fills; deleting an id unregisters that hook."""

    def __init__(self, hooks: dict, kind: str):
        self._hooks, self._kind = hooks, kind

    def _entries(self):
        return self._hooks.get(self._kind, {})

    def __getitem__(self, key):
        return self._entries()[key][0]

    def __setitem__(self, key, hook):
        self._hooks.setdefault(self._kind, OrderedDict())[key] = (hook, {"with_kwargs": False})

    def __delitem__(self, key):
        del self._entries()[key]

    def __iter__(self):
        return iter(list(self._entries()))

    def __len__(self):
        return len(self._entries())

    def __repr__(self):
        return f"OrderedDict({list(self.items())!r})"


class ModuleHooks:
    """The hook methods of Module: registries in self._hooks (kind -> OrderedDict id -> (hook, options))."""

    def _add_hook(self, kind, hook, **options):
        hooks = self.__dict__.setdefault("_hooks", {})
        if not callable(hook):
            raise TypeError(f"{type(self).__name__}.register_{kind}_hook: hook must be callable, got {hook!r}")
        handle = RemovableHandle(hooks, kind)
        hooks.setdefault(kind, OrderedDict())[handle.id] = (hook, options)
        return handle

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) -> None or new args (with_kwargs: hook(module, args, kwargs) -> None or
        (args, kwargs)), called before forward. Returns a handle whose remove() unregisters it."""
        return self._add_hook("forward_pre", hook, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """hook(module, args, output) -> None or a new output (with_kwargs: hook(module, args, kwargs, output)),
        called after forward."""
        return self._add_hook("forward", hook, with_kwargs=with_kwargs)

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input: called when the gradients of
        the module's tensor inputs have been computed (grad_input: one entry per positional tensor input,
        None for those that need no gradient), as PyTorch's full backward hooks."""
        return self._add_hook("backward", hook)

    def register_backward_hook(self, hook):
        return self.register_full_backward_hook(hook)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output: called when the gradients of the module's outputs
        have arrived, before those of its inputs are computed (torch's). A new grad_output replaces them."""
        return self._add_hook("backward_pre", hook)

    def register_state_dict_pre_hook(self, hook):
        """hook(module, prefix, keep_vars), called before state_dict() collects this module's tensors."""
        return self._add_hook("state_dict_pre", hook)

    def register_state_dict_post_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata) -> None, called after; it may change the dict in place."""
        return self._add_hook("state_dict_post", hook)

    def register_load_state_dict_pre_hook(self, hook):
        """hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs), called
        before loading (on a copy of the state dict, which it may change: renaming an old checkpoint's keys)."""
        return self._add_hook("load_state_dict_pre", hook)

    def register_load_state_dict_post_hook(self, hook):
        """hook(module, incompatible_keys) -> None, called after loading; it may clear missing_keys or
        unexpected_keys in place before the strict check."""
        return self._add_hook("load_state_dict_post", hook)

    def _hook_table(self, kind):
        """(hook, options) of this module's hooks of one kind, in registration order."""
        return self.__dict__.get("_hooks", {}).get(kind, {}).values()

    @property
    def _forward_pre_hooks(self):
        """torch's registry of forward pre-hooks, id -> hook (what nn.utils.prune looks through; deleting an entry
        unregisters the hook)."""
        return _HookView(self.__dict__.setdefault("_hooks", {}), "forward_pre")

    @property
    def _forward_hooks(self):
        return _HookView(self.__dict__.setdefault("_hooks", {}), "forward")

    def _call_with_hooks(self, hooks, args, kwargs):
        for hook, options in list(hooks.get("forward_pre", {}).values()):
            if options["with_kwargs"]:
                result = hook(self, args, kwargs)
                if result is not None:
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        if hooks.get("backward"):
            args = self._attach_backward_hooks(hooks["backward"], args)
        else:
            self.__dict__["_backward_state"] = {"grads": {}, "grad_output": None, "expected": 0}
        output = self.forward(*args, **kwargs)
        for hook, options in list(hooks.get("forward", {}).values()):
            result = hook(self, args, kwargs, output) if options["with_kwargs"] else hook(self, args, output)
            if result is not None:
                output = result
        if hooks.get("backward") or hooks.get("backward_pre"):
            output = self._watch_output(output)
        return output

    def _attach_backward_hooks(self, backward_hooks, args):
        """Route each tensor input needing a gradient through an identity whose gradient calls the
        module's backward hooks once all of them have arrived (PyTorch's BackwardHook, simplified)."""
        from ..autograd.tensor import Tensor

        positions = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        state = {"grads": {}, "grad_output": None, "expected": len(positions)}
        self.__dict__["_backward_state"] = state
        args = list(args)
        for i in positions:
            args[i] = args[i] * 1   # an identity op of its own: its gradient is this input's

            def on_grad(g, i=i):
                state["grads"][i] = g
                if len(state["grads"]) < state["expected"]:
                    return None
                grad_input = tuple(state["grads"].get(j) for j in range(len(args)))
                for hook, _ in list(backward_hooks.values()):
                    result = hook(self, grad_input, state["grad_output"])
                    if result is not None:
                        grad_input = tuple(result)
                return grad_input[i]

            args[i].register_hook(on_grad)
        return tuple(args)

    def _watch_output(self, output):
        """The output's tensors that need gradients seen by the backward hooks: the pre-hooks get grad_output when it
        has arrived (with one such tensor, through an identity op of its own, so that a new grad_output replaces
        it), the full hooks get it with grad_input."""
        from ..autograd.tensor import Tensor

        state = self.__dict__.get("_backward_state")
        single = isinstance(output, Tensor)
        outs = (output,) if single else output if isinstance(output, (tuple, list)) else ()
        tensors = [o for o in outs if isinstance(o, Tensor) and o.requires_grad]
        pre_hooks = self.__dict__["_hooks"].get("backward_pre", {})
        if single and tensors and pre_hooks:
            output = tensors[0] = output * 1   # (its own node: the hook's new grad_output flows from here)
        grads = {}

        for k, t in enumerate(tensors):
            def on_out(g, k=k):
                grads[k] = g
                if len(grads) < len(tensors):
                    return None
                grad_output = tuple(grads.get(j) for j in range(len(tensors)))
                for hook, _ in list(pre_hooks.values()):
                    result = hook(self, grad_output)
                    if result is not None:
                        if len(tensors) != 1:
                            raise NotImplementedError(f"{type(self).__name__}: a backward pre-hook that returns a new "
                                                      "grad_output is supported for modules with one output tensor")
                        grad_output = tuple(result) if isinstance(result, (tuple, list)) else (result,)
                state["grad_output"] = grad_output
                if state["expected"] == 0:   # no input needs a gradient
                    for hook, _ in list(self.__dict__["_hooks"].get("backward", {}).values()):
                        hook(self, (None,), state["grad_output"])
                return grad_output[k] if len(tensors) == 1 else None

            t.register_hook(on_out)
        return output
