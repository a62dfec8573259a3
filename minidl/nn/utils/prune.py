"""Pruning (torch.nn.utils.prune): zero out some of a layer's weights with a mask, and train on with the rest.

Pruning a parameter `name` of a module (e.g. a Linear's "weight") reshapes the module as torch does:

    name + "_orig"   the original Parameter (what the optimizer now trains; it moves to the end of the parameters)
    name + "_mask"   a buffer of 0s and 1s (saved in the state dict)
    name             a plain tensor attribute, name_orig * name_mask, recomputed before every forward by a forward
                     pre-hook (the pruning method itself), so the pruned entries stay zero while training and their
                     gradient through the product is zero

Pruning the same parameter again combines the masks (a PruningContainer): the new method sees only the entries (or
channels) still alive, so `amount` is a fraction of what is left. `remove(module, name)` makes it permanent:
name becomes a Parameter again holding name_orig * name_mask, and the hook, _orig and _mask go.

Methods: identity, random_unstructured, l1_unstructured (the `amount` entries of smallest |w|), random_structured,
ln_structured (whole channels along `dim`, by their L_n norm), global_unstructured (one threshold over several
parameters), custom_from_mask. `amount`: a float in [0, 1] (that fraction, rounded) or an int (that many).
"""
from __future__ import annotations

import numbers
from abc import ABC, abstractmethod

from ...autograd.function import no_grad

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured", "l1_unstructured",
           "random_structured", "ln_structured", "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _ops():
    import minidl

    return minidl


class BasePruningMethod(ABC):
    """A way of choosing a mask. Subclasses set PRUNING_TYPE ("unstructured", "structured" or "global") and
    compute_mask(t, default_mask); the instance is also the module's forward pre-hook."""

    _tensor_name: str
    PRUNING_TYPE = "unstructured"

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The new mask for tensor t, given the mask it already has (default_mask)."""

    def apply_mask(self, module):
        name = self._tensor_name
        return getattr(module, name + "_orig") * getattr(module, name + "_mask")

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune module.name with this method (made from args, kwargs); returns the method (the hook)."""
        old = [(k, hook) for k, hook in module._forward_pre_hooks.items()
               if isinstance(hook, BasePruningMethod) and hook._tensor_name == name]
        if len(old) > 1:
            raise RuntimeError(f"prune: more than one pruning hook on parameter {name!r} of {type(module).__name__}")
        old_method = old[0][1] if old else None
        method = cls(*args, **kwargs)
        method._tensor_name = name
        if old_method is not None:
            container = old_method if isinstance(old_method, PruningContainer) else PruningContainer(old_method)
            container.add_pruning_method(method)
            method = container
        orig = getattr(module, name)
        if importance_scores is not None and tuple(importance_scores.shape) != tuple(orig.shape):
            raise ValueError(f"importance_scores should have the same shape as parameter {name} of {module}")
        with no_grad():
            if old_method is None:
                if name not in module._parameters:
                    raise ValueError(f"prune: {type(module).__name__} has no parameter {name!r} (parameters: "
                                     f"{list(module._parameters)})")
                default_mask = _ops().ones_like(orig)
            else:
                default_mask = getattr(module, name + "_mask").detach().clone()
            mask = method.compute_mask(orig.detach() if importance_scores is None else importance_scores,
                                       default_mask=default_mask)
        if old_method is None:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
        else:
            for k, _ in old:
                del module._forward_pre_hooks[k]
        module.register_buffer(name + "_mask", mask)
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """t with this method's mask applied (no module involved)."""
        with no_grad():
            scores = t if importance_scores is None else importance_scores
            mask = self.compute_mask(scores, default_mask=_ops().ones_like(t) if default_mask is None
                                     else default_mask)
        return t * mask

    def remove(self, module):
        """Make the pruning permanent: name is a Parameter again, holding name_orig * name_mask."""
        name = self._tensor_name
        with no_grad():
            weight = self.apply_mask(module)
        if name in module.__dict__:
            del module.__dict__[name]
        orig = module._parameters.pop(name + "_orig")
        orig.data = weight.data
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


class PruningContainer(BasePruningMethod):
    """The methods applied so far to one parameter, in order: the latest one masks only what the earlier left."""

    def __init__(self, *methods):
        self._pruning_methods = ()
        if len(methods) == 1 and not isinstance(methods[0], BasePruningMethod):   # an iterable of methods
            methods = tuple(methods[0])
        for method in methods:
            self.add_pruning_method(method)

    def add_pruning_method(self, method):
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._pruning_methods and self._tensor_name != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named '{self._tensor_name}' to "
                             f"PruningContainer. Found '{method._tensor_name}'")
        if method is not None:
            self._tensor_name = method._tensor_name
            self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, i):
        return self._pruning_methods[i]

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        new_mask = default_mask.to(dtype=t.dtype).clone()
        if method.PRUNING_TYPE == "unstructured":
            alive = default_mask == 1
            new_mask[alive] = method.compute_mask(t[alive], default_mask=default_mask[alive]).to(dtype=new_mask.dtype)
            return new_mask
        if method.PRUNING_TYPE == "structured":
            dim = method.dim if method.dim >= 0 else t.ndim + method.dim
            others = [d for d in range(t.ndim) if d != dim]
            keep = (default_mask.sum(dim=others) != 0) if others else (default_mask != 0)
            index = [slice(None)] * t.ndim
            index[dim] = keep
            index = tuple(index)
            new_mask[index] = method.compute_mask(t[index], default_mask=default_mask[index]).to(dtype=new_mask.dtype)
            return new_mask
        if method.PRUNING_TYPE == "global":
            return method.compute_mask(t, default_mask=default_mask).to(dtype=new_mask.dtype)
        raise ValueError(f"Unrecognized PRUNING_TYPE {method.PRUNING_TYPE}")


class Identity(BasePruningMethod):
    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


def _count(amount, total: int, what: str) -> int:
    """How many of `total` to prune: int amount as is, float amount as round(amount * total); checked."""
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    if isinstance(amount, numbers.Integral):
        if amount < 0:
            raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")
        if amount > total:
            raise ValueError(f"amount={amount} should be smaller than the number of {what} to prune={total}")
        return int(amount)
    if not 0.0 <= amount <= 1.0:
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or a non-negative integer")
    return round(amount * total)


class _Unstructured(BasePruningMethod):
    """`amount` entries: those of lowest score (_scores(t), one per entry)."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _count(amount, 1 << 62, "parameters")
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.numel(), "parameters")
        mask = default_mask.clone()
        if k:
            mask.view(-1)[_ops().topk(self._scores(t), k, largest=False).indices] = 0
        return mask


class RandomUnstructured(_Unstructured):
    """`amount` entries chosen at random (minidl's generator: minidl.manual_seed makes it reproducible)."""

    def _scores(self, t):
        return _ops().rand(t.numel(), device=t.device)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(_Unstructured):
    """The `amount` entries of smallest absolute value (of importance_scores when given)."""

    def _scores(self, t):
        return t.abs().reshape(-1)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount, importance_scores=importance_scores)


def _channel_mask(t, dim, keep):
    """Zeros like t, with ones in the channels along dim where `keep` (a bool tensor of t.shape[dim]) holds."""
    mask = _ops().zeros_like(t)
    index = [slice(None)] * t.ndim
    index[dim] = keep
    mask[tuple(index)] = 1
    return mask


class _Structured(BasePruningMethod):
    """`amount` whole channels along `dim`: those _keep(t, dim, channels, k) does not keep."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _count(amount, 1 << 62, "channels")
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        if t.ndim <= 1:
            raise ValueError("Structured pruning can only be applied to multidimensional tensors. Found tensor of "
                             f"shape {tuple(t.shape)} with {t.ndim} dims")
        if self.dim >= t.ndim or self.dim < -t.ndim:
            raise IndexError(f"Invalid index {self.dim} for tensor of size {tuple(t.shape)}")
        dim = self.dim % t.ndim
        channels = t.shape[dim]
        k = _count(self.amount, channels, "channels")
        if k == 0:
            return default_mask
        return _channel_mask(t, dim, self._keep(t, dim, channels, k)) * default_mask.to(dtype=t.dtype)


class RandomStructured(_Structured):
    """`amount` whole channels along `dim`, at random."""

    def _keep(self, t, dim, channels, k):
        prob = _ops().rand(channels, device=t.device)
        return prob > _ops().kthvalue(prob, k).values

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(_Structured):
    """The `amount` channels along `dim` of smallest L_n norm (n: an int, float, inf, -inf, "fro" or "nuc")."""

    def __init__(self, amount, n, dim=-1):
        super().__init__(amount, dim)
        self.n = n

    def _keep(self, t, dim, channels, k):
        norms = t.norm(p=2 if self.n == "fro" else self.n, dim=[d for d in range(t.ndim) if d != dim])
        keep = _ops().zeros(channels, dtype=_ops().bool, device=t.device)
        keep[_ops().topk(norms, channels - k, largest=True).indices] = True
        return keep

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim, importance_scores=importance_scores)


class CustomFromMask(BasePruningMethod):
    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise ValueError(f"custom_from_mask: the mask has shape {tuple(self.mask.shape)}, the parameter "
                             f"{tuple(default_mask.shape)}")
        return default_mask * self.mask.to(dtype=default_mask.dtype, device=default_mask.device)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


def identity(module, name):
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune (module, name) pairs together: pruning_method (e.g. L1Unstructured, amount=...) chooses over all their
    entries at once, so a layer of small weights loses more of them than one of large weights."""
    parameters = list(parameters)
    if not parameters:
        raise TypeError("global_unstructured: parameters must be a non-empty iterable of (module, name) pairs")
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured: importance_scores must be a dict {(module, name): tensor}")
    m = _ops()
    with no_grad():
        scores = m.cat([importance_scores.get((module, name), getattr(module, name)).detach().reshape(-1)
                        for module, name in parameters])
        default = m.cat([getattr(module, name + "_mask", m.ones_like(getattr(module, name))).reshape(-1)
                         for module, name in parameters])
        container = PruningContainer()
        container._tensor_name = "temp"
        method = pruning_method(**kwargs)
        method._tensor_name = "temp"
        if method.PRUNING_TYPE != "unstructured":
            raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the `pruning_method`. Found method '
                            f"{pruning_method} of type {method.PRUNING_TYPE}")
        container.add_pruning_method(method)
        final = container.compute_mask(scores, default.to(dtype=scores.dtype))
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        count = param.numel()
        custom_from_mask(module, name, mask=final[start:start + count].reshape(param.shape))
        start += count


def remove(module, name):
    """Make the pruning of module.name permanent (see the module docstring); raises if it was not pruned."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning can be removed")


def is_pruned(module) -> bool:
    """Whether any submodule of module has a pruning hook."""
    return any(isinstance(hook, BasePruningMethod) for sub in module.modules()
               for hook in sub._forward_pre_hooks.values())
