"""torch.nn.utils.parametrize: a tensor of a module computed from others by modules of its own.

    register_parametrization(module, "weight", P)    # module.weight is now P(original)

The parameter `weight` moves to `module.parametrizations.weight.original` (or `original0`, `original1`, ... when
P.right_inverse splits it into several tensors, as weight norm's g and v), and `weight` becomes a property of the
module's class (a subclass made for it, `Parametrized<Class>`, as torch does) that applies the parametrizations in
order each time it is read. Assigning to it goes through right_inverse. State-dict names are torch's
(`parametrizations.weight.original0`, ...). `cached()` computes each parametrized tensor once inside its block.
"""
from __future__ import annotations

from contextlib import contextmanager

from ...autograd.function import no_grad
from ..layers.container import ModuleDict, ModuleList
from ..module import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "cached", "ParametrizationList"]

_cache: dict | None = None   # (id(module), name) -> tensor, inside cached()


@contextmanager
def cached():
    """Inside the block each parametrized tensor is computed once, at its first read."""
    global _cache
    outer = _cache
    _cache = {} if outer is None else outer
    try:
        yield
    finally:
        _cache = outer


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, in order, and the original tensor(s) they start from."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        first = modules[0]
        with no_grad():
            new = original
            if hasattr(first, "right_inverse"):
                try:
                    new = first.right_inverse(original)
                except NotImplementedError:   # (as torch: the original stays as it is)
                    pass
        if isinstance(new, (tuple, list)):
            self.ntensors = len(new)
            for i, t in enumerate(new):
                self.register_parameter(f"original{i}", Parameter(t.detach(), requires_grad=original.requires_grad))
        else:
            self.ntensors = 1
            self.register_parameter("original", Parameter(new.detach(), requires_grad=original.requires_grad))

    def right_inverse(self, value):
        """Set the original tensor(s) so that the parametrized tensor becomes `value`."""
        with no_grad():
            for module in reversed(list(self)):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError(f"parametrization {type(module).__name__} does not implement right_inverse, "
                                       "so a value cannot be assigned to the parametrized tensor (give it a "
                                       "right_inverse(value) that returns the original tensor)")
                value = module.right_inverse(value)
            if self.ntensors == 1:
                self.original.copy_(value)
            else:
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self):
        modules = list(self)
        if self.ntensors == 1:
            x = modules[0](self.original)
        else:
            x = modules[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in modules[1:]:
            x = module(x)
        return x


def _property(name):
    def get(self):
        if _cache is not None:
            key = (id(self), name)
            if key not in _cache:
                _cache[key] = self.parametrizations[name]()
            return _cache[key]
        return self.parametrizations[name]()

    def set(self, value):
        self.parametrizations[name].right_inverse(value)

    return property(get, set)


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """module.<tensor_name> becomes parametrization(original); a second call on the same name appends."""
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"register_parametrization: module has no parameter or buffer named '{tensor_name}'")
    original = getattr(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    module._parameters.pop(tensor_name, None)
    module._buffers.pop(tensor_name, None)
    if not is_parametrized(module):
        module.parametrizations = ModuleDict()
        cls = type(module)
        module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})
    module.parametrizations[tensor_name] = plist
    setattr(type(module), tensor_name, _property(tensor_name))
    return module


def is_parametrized(module, tensor_name=None):
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if plists is None:
        return False
    return tensor_name is None or tensor_name in plists


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Back to a plain parameter: the parametrized value (leave_parametrized) or the original tensor."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"remove_parametrizations: module has no parametrization on '{tensor_name}'")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name).detach()
        requires_grad = getattr(plist, "original" if plist.ntensors == 1 else "original0").requires_grad
        new = Parameter(value, requires_grad=requires_grad)
    else:
        if plist.ntensors != 1:
            raise ValueError("remove_parametrizations: leave_parametrized=False needs a single original tensor")
        new = plist.original
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    if not len(module.parametrizations):
        del module._modules["parametrizations"]
        module.__class__ = type(module).__bases__[0]
    setattr(module, tensor_name, new)
    return module

