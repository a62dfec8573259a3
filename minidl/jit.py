"""torch.jit, the way torch runs it with PYTORCH_JIT=0: scripting and tracing return the function or module as it is,
and it runs eagerly, as written in Python. Model code is full of TorchScript's marks (timm checks
`torch.jit.is_scripting()`, helpers carry `@torch.jit.script`, classes `@torch.jit.ignore` and `Final` attributes);
with this module such code runs unmodified under minidl, with the values the eager program computes.

What is not here: TorchScript itself (the compiler and its IR), and its archives. `jit.save` / `jit.load` raise and
say so: save a model's state_dict with minidl.save instead."""
from __future__ import annotations

import typing

Final = typing.Final


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """The function or module itself (torch.jit.script under PYTORCH_JIT=0): it runs eagerly."""
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None, check_tolerance=1e-5,
          strict=True, _force_outplace=False, _module_class=None, _compilation_unit=None, example_kwarg_inputs=None,
          _store_inputs=True):
    """The function or module itself: minidl runs the program eagerly instead of recording a trace."""
    return func


def trace_module(mod, inputs, *args, **kwargs):
    return mod


def _decorator_or_identity(fn=None, **kwargs):
    """A mark that may be used as @mark or @mark(...): the function comes back as it is."""
    if callable(fn):
        return fn
    return lambda f: f


ignore = unused = export = _decorator_or_identity


def interface(obj):
    """The class or function itself (an interface is only a type annotation for TorchScript)."""
    return obj


_overload = _overload_method = interface


def is_scripting() -> bool:
    """False: minidl never compiles TorchScript (code guarded by `if not torch.jit.is_scripting():` runs)."""
    return False


def is_tracing() -> bool:
    return False


def annotate(the_type, the_value):
    return the_value


def Attribute(value, type=None):  # noqa: N802 - torch's name
    return value


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    return mod


def optimize_for_inference(mod, other_methods=None):
    return mod


def enable_onednn_fusion(enabled: bool) -> None:
    """Accepted (there is no TorchScript fuser to configure)."""


class _Future:
    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value

    def value(self):
        return self._value

    def done(self):
        return True


def fork(func, *args, **kwargs):
    """func run now (torch.jit.fork's asynchronous call, in order); wait() gives its result."""
    return _Future(func(*args, **kwargs))


def wait(future):
    return future.wait()


def _no_archives(op):
    raise NotImplementedError(
        f"jit.{op}: TorchScript archives are outside minidl's scope: minidl runs the module eagerly (jit.script "
        "returns it as it is). Save its weights with minidl.save(model.state_dict(), path) and load them into the "
        "model class")


def save(m, f, _extra_files=None):
    _no_archives("save")


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    _no_archives("load")


class ScriptModule:
    """torch.jit.ScriptModule: minidl has none (scripted modules are the modules themselves); isinstance checks
    against it are False."""


class ScriptFunction:
    """torch.jit.ScriptFunction: see ScriptModule."""


class RecursiveScriptModule(ScriptModule):
    pass


class CompilationUnit:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("jit.CompilationUnit: TorchScript compilation is outside minidl's scope")
