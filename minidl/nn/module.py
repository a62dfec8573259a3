"""Module and Parameter: how a network holds its weights, its sub-networks and its running state.

A `Module` keeps three ordered registries, filled by plain attribute assignment (as in PyTorch):
    _parameters  name -> Parameter   (trained: what `parameters()` hands to an optimizer)
    _buffers     name -> Tensor      (state that is saved but not trained: BatchNorm running stats)
    _modules     name -> Module      (children, which have registries of their own)
Everything else (`named_parameters`, `state_dict`, `to`, `train`) is a walk over that tree. Names in a
state dict are the attribute path, "features.0.weight", so a PyTorch state dict of a module with the
same structure loads one to one.

`to(device | dtype)` changes the arrays inside the existing Parameter objects rather than making new
ones, so an optimizer created before the move still updates the model's weights.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .._dtypes import bfloat16, is_floating
from .. import _device, _layout
from .._device import Device, parse_to_args
from ..autograd.function import no_grad
from ..autograd.tensor import Tensor
from .hooks import ModuleHooks
from .state_dict import StateDict


class Parameter(Tensor):
    """A tensor that a Module registers as trainable (requires_grad=True unless told otherwise).

    `Parameter(t)` shares t's array: no copy, as `torch.nn.Parameter`.
    """

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        array = data._data if isinstance(data, Tensor) else Tensor(data)._data
        super().__init__(array)
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class UninitializedParameter(Parameter):
    """A lazy layer's parameter before its first input (torch.nn.parameter.UninitializedParameter): an empty Parameter
    that the first forward fills in place, after which it is a plain Parameter (the same object, so an optimizer made
    before steps it)."""

    cls_to_become = Parameter

    def __repr__(self):
        return "<UninitializedParameter>"


def is_lazy(param) -> bool:
    """Whether a parameter is still a lazy layer's uninitialized one (torch.nn.parameter.is_lazy)."""
    return isinstance(param, UninitializedParameter)


def mark_uninitialized(module):
    """A lazy layer's parameters become UninitializedParameters until its first input (materialize_parameters)."""
    for p in module._parameters.values():
        if p is not None:
            p.__class__ = UninitializedParameter
    return module


def materialize_parameters(module):
    """The lazy layer's parameters, filled by its first input, are Parameters again (the same objects)."""
    for p in module._parameters.values():
        if isinstance(p, UninitializedParameter):
            p.__class__ = UninitializedParameter.cls_to_become


class _BufferMeta(type):
    """isinstance(t, nn.Buffer) is true of the tensors nn.Buffer made (as torch's, they are plain tensors)."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and getattr(obj, "_is_buffer", False) is True


class Buffer(metaclass=_BufferMeta):
    """nn.Buffer(t, persistent=True): a tensor that, assigned to a Module attribute, is registered as a buffer
    (`self.mask = nn.Buffer(torch.ones(4))` is `self.register_buffer("mask", torch.ones(4))`). Shares t's array."""

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            data = np.empty((0,), dtype=np.float32)
        t = Tensor(data._data if isinstance(data, Tensor) else Tensor(data)._data)
        t._is_buffer, t._buffer_persistent = True, bool(persistent)
        return t


def _addindent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    return lines[0] + "\n" + "\n".join(" " * spaces + line for line in lines[1:])


def _plain_walk(cls) -> bool:
    """Whether Module's own walk of the tree gives cls's parameters (no override of named_parameters,
    named_modules or _named_members on the way: then parameters() goes through them)."""
    found = _PLAIN_WALK.get(cls)
    if found is None:
        found = _PLAIN_WALK[cls] = all(getattr(cls, name) is getattr(Module, name)
                                       for name in ("named_parameters", "named_modules", "_named_members"))
    return found


_PLAIN_WALK: dict = {}


class Module(ModuleHooks, StateDict):
    """Base class of every layer and network. Subclasses set attributes in __init__ and define forward."""

    training: bool

    def __init__(self):
        # object.__setattr__: our own __setattr__ needs these registries to exist first.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward(); subclasses must define it")

    def __call__(self, *args, **kwargs):
        hooks = self.__dict__.get("_hooks")
        if not hooks:   # the common case: one dict lookup, then forward
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(hooks, args, kwargs)

    # --------------------------------------------------------------------------------------------
    # Registration: attribute assignment routes Parameters, Modules and buffers to their registries
    # --------------------------------------------------------------------------------------------
    def _check_initialized(self):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign parameters or modules before Module.__init__() call in {type(self).__name__}"
            )

    def __setattr__(self, name, value):
        if isinstance(value, Parameter):
            self._check_initialized()
            # Not from _parameters itself: re-assigning a parameter keeps its place in the order
            # (named_parameters, state_dict), as PyTorch.
            self._remove_from(name, ("_buffers", "_modules"))
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_initialized()
            self._remove_from(name, ("_parameters", "_buffers"))  # a replaced child keeps its place
            self._modules[name] = value
        elif getattr(value, "_is_buffer", False) is True:   # nn.Buffer(t): registered as register_buffer would
            self._check_initialized()
            self._remove_from(name, ("_parameters", "_modules"))
            self._buffers[name] = value
            if value._buffer_persistent:
                self._non_persistent_buffers.discard(name)
            else:
                self._non_persistent_buffers.add(name)
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(
                    f"cannot assign {type(value).__name__} as parameter {name!r} (nn.Parameter or None expected)"
                )
            self._parameters[name] = None
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as child module {name!r} (Module or None expected)")
            self._modules[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} as buffer {name!r} (Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _remove_from(self, name, registries):
        self.__dict__.pop(name, None)
        for reg in registries:
            self.__dict__[reg].pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __getattr__(self, name):
        # Called only when normal lookup fails, i.e. for registered parameters, buffers and children.
        d = self.__dict__
        for reg in ("_parameters", "_buffers", "_modules"):
            if reg in d and name in d[reg]:
                return d[reg][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for reg in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(reg, {}):
                del self.__dict__[reg][name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def _check_name(self, what, name):
        if not isinstance(name, str):
            raise TypeError(f"{what} name must be a string, got {type(name).__name__}")
        if name == "" or "." in name:
            raise KeyError(f"{what} name must be non-empty and contain no '.', got {name!r}")
        if name in self.__dict__ and not any(name in self.__dict__[r] for r in ("_parameters", "_buffers", "_modules")):
            raise KeyError(f"attribute {name!r} already exists on {type(self).__name__}")

    def _check_free(self, op, name, own):
        """The register_* methods never overwrite something else of that name (a parameter, a buffer, a
        submodule or a plain attribute): KeyError, as torch. Plain assignment (self.x = ...) replaces instead."""
        taken = any(name in self.__dict__.get(reg, {}) for reg in ("_parameters", "_buffers", "_modules") if reg != own)
        plain = (name in self.__dict__ or hasattr(type(self), name)) and name not in self.__dict__.get(own, {})
        if taken or plain:   # a method of that name too (torch: hasattr(self, name))
            raise KeyError(f"{op}: attribute '{name}' already exists")

    def register_parameter(self, name: str, param):
        self._check_initialized()
        self._check_name("parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, got {type(param).__name__}")
        self._check_free("register_parameter", name, "_parameters")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True):
        """A tensor saved in state_dict (if persistent) and moved by to(), but not trained."""
        self._check_initialized()
        self._check_name("buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None, got {type(tensor).__name__}")
        self._check_free("register_buffer", name, "_buffers")
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module):
        self._check_initialized()
        self._check_name("module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got {type(module).__name__}")
        self._check_free("add_module", name, "_modules")
        self._modules[name] = module

    register_module = add_module

    def _registered(self, target, registry, what):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if name not in getattr(mod, registry):
            raise AttributeError(f"{type(mod).__name__} has no {what} `{name}`" if not hasattr(mod, name) else
                                 f"`{name}` is not a {what}")
        return getattr(mod, registry)[name]

    def get_parameter(self, target: str):
        """The Parameter at a dotted path ("encoder.layers.0.linear1.weight"), as torch's."""
        return self._registered(target, "_parameters", "parameter")

    def get_buffer(self, target: str):
        """The buffer at a dotted path ("bn.running_mean"), as torch's."""
        return self._registered(target, "_buffers", "buffer")

    def set_submodule(self, target: str, module, strict: bool = False):
        """The submodule at a dotted path replaced by `module` (with strict, the path must exist already)."""
        parent_path, _, name = target.rpartition(".")
        parent = self.get_submodule(parent_path)
        if strict and name not in parent._modules:
            raise AttributeError(f"{type(parent).__name__} has no attribute `{name}`")
        if not isinstance(module, Module):
            raise ValueError(f"`{target}` must be set to a Module, got {type(module).__name__}")
        setattr(parent, name, module)

    def compile(self, *args, **kwargs):
        """Module.compile (torch.compile in place): minidl has no compiler, so the module stays as it is
        (minidl.compile says so once)."""
        from .. import compile as compile_model

        compile_model(self, *args, **kwargs)

    def get_submodule(self, target: str):
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no submodule {part!r} (looking up {target!r})")
            mod = mod._modules[part]
        return mod

    # --------------------------------------------------------------------------------------------
    # Walking the tree
    # --------------------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """(name, module) for self and every descendant, depth first; a shared module appears once."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from child.named_modules(memo, sub, remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        for _, c in self.named_children():
            yield c

    def _named_members(self, registry, prefix, recurse, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in modules:
            for name, value in getattr(mod, registry).items():
                if value is None:
                    continue
                if remove_duplicate:
                    if id(value) in seen:  # tied weights are reported (and optimized) once
                        continue
                    seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True):
        found = self._plain_parameters() if recurse else None
        if found is None:
            for _, p in self.named_parameters(recurse=recurse):
                yield p
            return
        yield from found

    def _plain_parameters(self):
        """parameters() as a list: the same parameters in the same order as named_parameters (depth first, a shared
        module or a tied weight once) without making their names, in one loop over a stack instead of a generator
        per level (clip_grad_norm_(model.parameters()) walks the tree every step); None where a module on the way
        has its own named_parameters, named_modules or _named_members (then those say what the parameters are)."""
        found, seen_modules, seen, stack = [], set(), set(), [self]
        plain = _PLAIN_WALK
        while stack:
            mod = stack.pop()
            if mod is None or id(mod) in seen_modules:
                continue
            if not (plain.get(type(mod)) or _plain_walk(type(mod))):
                return None
            seen_modules.add(id(mod))
            for p in mod._parameters.values():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    found.append(p)
            stack.extend(reversed(mod._modules.values()))
        return found

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        """Call fn on every descendant (children first), then on self; return self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # --------------------------------------------------------------------------------------------
    # Modes and gradients
    # --------------------------------------------------------------------------------------------
    def train(self, mode: bool = True):
        if not isinstance(mode, bool):
            raise ValueError(f"train: mode must be a bool, got {mode!r}")
        object.__setattr__(self, "training", mode)
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True):
        if not set_to_none:  # on the GPU: one multi-tensor launch for all float32 gradients
            from .. import primitives as P

            grads = [p.grad._data for p in self.parameters() if p.grad is not None]
            if grads and P.multi_tensor_supported(*grads):
                P.multi_tensor_zero(grads)
                return
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad._data[...] = 0

    # --------------------------------------------------------------------------------------------
    # Devices and dtypes: arrays are replaced inside the same Parameter / buffer objects
    # --------------------------------------------------------------------------------------------
    def to(self, *args, **kwargs):
        """`to(device)`, `to(dtype)` or `to(device, dtype)`, and memory_format=; in place, returns self.

        dtype changes only floating-point parameters and buffers (an int64 step counter stays int64).
        memory_format=minidl.channels_last puts every 4-D parameter and buffer (convolution filters) in NHWC
        memory and makes the convolution layers run channels-last (their outputs are channels_last), as
        PyTorch's model.to(memory_format=torch.channels_last); channels_last_3d likewise for 5-D.
        """
        kwargs = dict(kwargs)
        fmt = kwargs.pop("memory_format", None)
        if fmt is not None:
            self._apply_memory_format(fmt)
        device, dtype = parse_to_args("Module.to()", args, kwargs, Tensor)
        if dtype is not None:
            dtype = np.dtype(dtype)
            if not is_floating(dtype):
                raise TypeError(f"Module.to(): only floating-point dtypes are allowed, got {dtype}")
        if device is not None:
            device = Device(device)
            if device.type == "cuda":
                _device.require_cuda("Module.to('cuda')")

        def convert(array):
            if dtype is not None and is_floating(array.dtype) and array.dtype != dtype:
                array = array.astype(dtype)
            if device is not None:
                array = _device.move_array(array, device)
            return array

        return self._apply_to_arrays(convert)

    def _apply_memory_format(self, fmt):
        from ..ops import channels_last, channels_last_3d, contiguous_format, memory_format, \
            preserve_format

        if not isinstance(fmt, memory_format):
            raise TypeError(f"Module.to(): memory_format must be a minidl memory format, got {fmt!r}")
        if fmt is preserve_format:
            return
        rank = {channels_last: 4, channels_last_3d: 5}.get(fmt)
        with no_grad():
            for t in list(self.parameters()) + list(self.buffers()):
                if rank is not None and t.ndim == rank:
                    t._data = _layout.to_channels_last(t._data)
                elif fmt is contiguous_format:
                    t._data = _layout.to_contiguous(t._data)
        for m in self.modules():
            if hasattr(m, "channels_last"):
                m.channels_last = rank is not None

    def _apply_to_arrays(self, convert):
        with no_grad():
            for t in list(self.parameters()) + list(self.buffers()):
                t._data = convert(t._data)
                if t.grad is not None:
                    t.grad._data = convert(t.grad._data)
        return self

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{device}")

    def share_memory(self):
        """Every parameter and buffer moved to shared memory (Tensor.share_memory_): Hogwild training, where
        processes forked afterwards update one model in place."""
        for t in list(self.parameters()) + list(self.buffers()):
            t.share_memory_()
        return self

    def cpu(self):
        return self.to("cpu")

    def _no_backend(self, name):
        raise RuntimeError(f"Module.{name}(): minidl runs on the CPU and CUDA GPUs only (use .to('cuda') or .cpu())")

    xpu = ipu = mtia = lambda self, device=None: self._no_backend("xpu/ipu/mtia")   # noqa: E731

    def float(self):
        return self.to(np.float32)

    def double(self):
        return self.to(np.float64)

    def half(self):
        """float16 parameters and buffers (for half-precision inference; to train, keep float32
        master weights and use minidl.autocast instead)."""
        return self.to(np.float16)

    def bfloat16(self):
        return self.to(bfloat16)

    def type(self, dtype):
        return self.to(dtype)

    def to_empty(self, *, device, recurse: bool = True):
        """Every parameter and buffer replaced by an uninitialised array of its shape and dtype on `device` (torch's
        Module.to_empty): how a model built on the meta device gets memory, before its weights are loaded."""
        device = Device(device)
        if device.type == "cuda":
            _device.require_cuda("Module.to_empty(device='cuda')")
        xp = _device.array_module(device)
        modules = self.modules() if recurse else [self]
        with no_grad():
            for mod in modules:
                for t in list(mod._parameters.values()) + list(mod._buffers.values()):
                    if t is not None:
                        if device.type == "cuda":
                            with xp.cuda.Device(device.index):
                                t._data = xp.empty(t.shape, dtype=t.dtype)
                        else:
                            t._data = xp.empty(t.shape, dtype=t.dtype)
                        t.grad = None
        return self

    # --------------------------------------------------------------------------------------------
    # repr
    # --------------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr (its constructor arguments)."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, child in self._modules.items():
            lines.append(f"({name}): " + _addindent(repr(child), 2))
        main = self._get_name() + "("
        if lines:
            if len(lines) == 1 and not self._modules:
                main += lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"
