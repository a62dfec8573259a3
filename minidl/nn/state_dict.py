"""A Module's state dict: the named tensors that describe a trained network, and loading them back.

    state_dict()               name -> tensor for every parameter and persistent buffer (sharing memory)
    load_state_dict(sd)        copy values in place (dtype and device converted), everything checked first
    load_state_dict(sd, assign=True)   the state dict's tensors become the module's (a meta-device model's weights)

Module (nn/module.py) inherits these from StateDict; the names and the checks are PyTorch's.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict, namedtuple

import numpy as np

from .. import _device, _meta
from .._device import is_cuda_array
from .._dtypes import is_floating
from ..autograd.function import no_grad
from ..autograd.tensor import Tensor


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What load_state_dict(strict=False) returns: keys it could not fill, keys it did not use."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()



def _raw_array(value):
    """A state-dict value (Tensor, NumPy/CuPy array, or anything with __array__) -> an array."""
    if isinstance(value, Tensor):
        return value._data
    if isinstance(value, np.ndarray) or is_cuda_array(value):
        return value
    try:
        return np.asarray(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"load_state_dict: a value of type {type(value).__name__} is not an array ({e})") from None


class StateDict:
    """The state-dict methods of Module (it keeps _parameters, _buffers, _modules and _non_persistent_buffers)."""

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """OrderedDict of name -> tensor for every parameter and persistent buffer.

        The tensors share memory with the module (as in PyTorch): copy them to snapshot the weights.
        """
        if destination is None:
            destination = OrderedDict()
        for hook, _ in list(self._hook_table("state_dict_pre")):
            hook(self, prefix, keep_vars)
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                destination[prefix + name] = b if keep_vars else b.detach()
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(destination, prefix + name + ".", keep_vars)
        for hook, _ in list(self._hook_table("state_dict_post")):
            if hook(self, destination, prefix, {}) is not None:
                raise RuntimeError("state_dict post-hook must return None (it may change the state dict in place)")
        return destination

    def _state_slots(self):
        """name -> (module, "_parameters" or "_buffers", local name) of each tensor a state dict entry of that name
        is loaded into."""
        slots = OrderedDict()
        for mod_prefix, mod in self.named_modules(remove_duplicate=False):
            base = mod_prefix + ("." if mod_prefix else "")
            for name, p in mod._parameters.items():
                if p is not None:
                    slots[base + name] = (mod, "_parameters", name)
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers:
                    slots[base + name] = (mod, "_buffers", name)
        return slots

    def _state_targets(self):
        """name -> the Parameter / buffer tensor a state dict entry of that name is copied into."""
        return OrderedDict((key, getattr(mod, kind)[name]) for key, (mod, kind, name) in self._state_slots().items())

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy values into this module's parameters and buffers (in place, converting dtype and device).

        Everything is checked first and nothing is written unless all checks pass: missing and
        unexpected keys (when strict) and shape mismatches (always) raise one RuntimeError listing them.
        With assign=True the state dict's tensors themselves become the parameters and buffers (their dtype and
        device; a parameter keeps its requires_grad), as torch's: the way to give weights to a model built on the
        meta device. Returns _IncompatibleKeys(missing_keys, unexpected_keys).
        """
        if not hasattr(state_dict, "items"):
            raise TypeError(f"load_state_dict: expected a dict-like state_dict, got {type(state_dict).__name__}")
        hooked = [(prefix, mod) for prefix, mod in self.named_modules()
                  if mod._hook_table("load_state_dict_pre") or mod._hook_table("load_state_dict_post")]
        hook_missing, hook_unexpected, hook_errors = [], [], []
        if hooked:   # (torch's order: pre-hooks may rename keys of a copy of the state dict, post-hooks see the result)
            state_dict = OrderedDict(state_dict)
            for prefix, mod in hooked:
                for hook, _ in list(mod._hook_table("load_state_dict_pre")):
                    hook(mod, state_dict, prefix + "." if prefix else "", {}, strict, hook_missing, hook_unexpected,
                         hook_errors)
        targets = self._state_targets()
        missing = [k for k in targets if k not in state_dict]
        unexpected = [k for k in state_dict if k not in targets]
        mismatched, arrays = [], {}
        for key, target in targets.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if value is None or isinstance(value, (str, bytes, dict, set)):
                mismatched.append(f"type mismatch for {key}: expected a tensor (or an array) from checkpoint, got "
                                  f"{type(value).__name__}")
                continue
            array = _raw_array(value)
            if tuple(array.shape) != target.shape:
                mismatched.append(
                    f"size mismatch for {key}: copying a param with shape {tuple(array.shape)} from checkpoint, "
                    f"the shape in current model is {target.shape}."
                )
            elif np.dtype(array.dtype).kind not in "biuf" and not is_floating(array.dtype):
                # Strings, Python objects (a None would become NaN) or complex numbers cannot be a
                # parameter's value; torch has no tensor of them to copy from.
                mismatched.append(
                    f"dtype mismatch for {key}: cannot copy a value of dtype {array.dtype} from checkpoint into "
                    f"the {target.dtype} one in current model."
                )
            arrays[key] = array
        missing += [k for k in hook_missing if k not in missing]
        unexpected += [k for k in hook_unexpected if k not in unexpected]
        post_hooks = any(mod._hook_table("load_state_dict_post") for _, mod in hooked)
        if mismatched or hook_errors or not post_hooks:
            self._raise_load_errors(strict, missing, unexpected, mismatched + hook_errors)
        result = _IncompatibleKeys(missing, unexpected)
        if assign:
            self._assign_state(state_dict, arrays)
            return self._after_load(hooked, result, strict)
        # Convert everything (dtype, device) before the first write: a failure leaves the module as it was.
        converted = {}
        for key, array in arrays.items():
            target = targets[key]
            try:
                if is_cuda_array(array) != target.is_cuda:
                    array = _device.move_array(array, target.device)
                converted[key] = array.astype(target.dtype, copy=False)
            except (TypeError, ValueError, OverflowError) as e:
                raise RuntimeError(
                    f"Error(s) in loading state_dict for {type(self).__name__}:\n\tcannot convert {key} "
                    f"(dtype {array.dtype}) to {target.dtype}: {e}"
                ) from None
        with no_grad():
            for key, array in converted.items():
                if targets[key].is_meta and not isinstance(array, _meta.MetaArray):
                    warnings.warn(f"for {key}: copying from a non-meta parameter in the checkpoint to a meta parameter "
                                  "in the current model, which is a no-op. (Did you mean to pass `assign=True` to "
                                  "assign items in the state dictionary to their corresponding key in the module "
                                  "instead of copying them in place?)", stacklevel=2)
                # Write into the existing array: optimizers holding this Parameter see the new values.
                targets[key]._data[...] = array
        return self._after_load(hooked, result, strict)

    def _raise_load_errors(self, strict, missing, unexpected, other_errors):
        errors = []
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        errors += other_errors
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors)
            )

    def _after_load(self, hooked, result, strict):
        """The load-state-dict post-hooks, hook(module, incompatible_keys), which may clear missing or unexpected keys
        in place; then the strict check on what is left (torch's order: the values are already written)."""
        for _, mod in hooked:
            for hook, _ in list(mod._hook_table("load_state_dict_post")):
                if hook(mod, result) is not None:
                    raise RuntimeError("load_state_dict post-hook must return None (it may change the incompatible "
                                       "keys in place)")
        self._raise_load_errors(strict, result.missing_keys, result.unexpected_keys, [])
        return result

    def _assign_state(self, state_dict, arrays):
        """load_state_dict(assign=True): each checked entry becomes the module's tensor of that name."""
        slots = self._state_slots()
        for key in arrays:
            mod, kind, name = slots[key]
            value = state_dict[key]
            value = value if isinstance(value, Tensor) else Tensor._make(arrays[key])
            old = getattr(mod, kind)[name]
            if kind == "_parameters":
                from .module import Parameter

                value = value if isinstance(value, Parameter) else Parameter(value.detach(),
                                                                            requires_grad=old.requires_grad)
            getattr(mod, kind)[name] = value
