"""Run an unmodified PyTorch program on minidl:  python -m minidl.run program.py [args ...]

The runner installs an import hook (a finder at the front of sys.meta_path) under which `torch`,
`torch.nn`, `torch.nn.functional`, `torch.optim`, `torch.utils.data`, `torch.autograd`,
`torch.cuda`, `torch.backends.cudnn`, ... and `torchvision.datasets` / `torchvision.transforms`
resolve to minidl's modules, then runs the program as `__main__` with the given arguments (as
`python program.py args` would). Nothing of the program is rewritten.

Each `torch...` module the program sees is a thin stand-in (`_TorchModule`) whose attributes are
those of the minidl module behind it. When the program uses a PyTorch name that minidl does not
have, the stand-in raises `MissingTorchName` (an AttributeError / ImportError) that names the
PyTorch name, says whether it is outside minidl's scope, and points to docs/TORCH_COMPAT.md; the
runner prints it with the program's file and line and exits with status 1.

    import minidl.run
    minidl.run.install()      # the same hook, from Python (uninstall() removes it)
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import traceback
import types

DOCS = "docs/TORCH_COMPAT.md"

# PyTorch module -> the minidl module (or object) that stands in for it.
TORCH_MODULES = {
    "torch": "minidl",
    "torch.nn": "minidl.nn",
    "torch.nn.functional": "minidl.nn.functional",
    "torch.nn.init": "minidl.nn.init",
    "torch.nn.parameter": "minidl.nn.parameter",
    "torch.nn.modules": "minidl.nn.layers.torch_modules",   # (and each torch.nn.modules.<file>: its names and private bases)
    "torch.nn.modules.module": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.batchnorm": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.conv": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.loss": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.pooling": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.linear": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.activation": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.container": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.rnn": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.normalization": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.instancenorm": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.dropout": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.sparse": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.transformer": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.padding": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.pixelshuffle": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.upsampling": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.flatten": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.distance": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.fold": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.adaptive": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.channelshuffle": "minidl.nn.layers.torch_modules",
    "torch.nn.modules.utils": "minidl.nn.layers.torch_modules",
    "torch.nn.utils": "minidl.nn.utils",
    "torch.nn.grad": "minidl.nn.grad",
    "torch.nn.utils.rnn": "minidl.nn.utils.rnn",
    "torch.nn.attention": "minidl.nn.attention",
    "torch.optim": "minidl.optim",
    "torch.optim.lr_scheduler": "minidl.optim.lr_scheduler",
    "torch.optim.swa_utils": "minidl.optim.swa_utils",
    "torch.optim.optimizer": "minidl.optim.optimizer",
    "torch.autograd": "minidl.autograd",
    "torch.cuda": "minidl.cuda",
    "torch.backends": "minidl.backends",
    "torch.compiler": "minidl.compiler",
    "torch.backends.cudnn": "minidl.backends:cudnn",
    "torch.utils": "minidl.utils",
    "torch.utils.benchmark": "minidl.utils.benchmark",
    "torch.utils.hooks": "minidl.nn.hooks",
    "torch.utils.model_zoo": "minidl.hub",
    "torch.serialization": "minidl.utils.serialization",
    "torch.jit": "minidl.jit",
    "torch.utils.checkpoint": "minidl.utils.checkpoint",
    "torch.utils.tensorboard": "minidl.utils.tensorboard",
    "torch.testing": "minidl.testing",
    "torch.utils.data": "minidl.data",
    "torch.utils.data.dataset": "minidl.data",
    "torch.utils.data.dataloader": "minidl.data",
    "torch.utils.data.sampler": "minidl.data",
    "torch.random": "minidl.random",
    "torchvision": "minidl.vision",
    "torchvision.datasets": "minidl.vision.datasets",
    "torchvision.transforms": "minidl.vision.transforms",
    "torchvision.transforms.functional": "minidl.vision.functional",
    "torchvision.transforms.autoaugment": "minidl.vision.autoaugment",
    "torchvision.transforms.transforms": "minidl.vision.transforms",
    "torchvision.transforms.v2": "minidl.vision.transforms_v2",
    "torchvision.transforms.v2.functional": "minidl.vision.functional",
    "torchvision.utils": "minidl.vision.utils",
    "torchvision.models": "minidl.vision.models",
    "torchvision.ops": "minidl.vision.ops",
    "torchvision.ops.boxes": "minidl.vision.ops",
    "torchvision.ops.misc": "minidl.vision.ops",
    "torch.amp": "minidl.amp",
    "torch.cuda.amp": "minidl.amp.cuda_amp",
    "torch.nn.parallel": "minidl.nn.parallel",
    "torch.multiprocessing": "minidl.multiprocessing",
    "torch.utils.data.distributed": "minidl.data.distributed",
    "torch.distributed": "minidl.distributed",
    "torch.linalg": "minidl.linalg",
    "torch.special": "minidl.special",
    "torch.distributed.nn": "minidl.distributed.nn",
    "torch.distributed.nn.functional": "minidl.distributed.nn.functional",
    "torch.nn.parallel.distributed": "minidl.nn.parallel.distributed",
    "torch.distributions": "minidl.distributions",
    "torch.fft": "minidl.fft",
    "torch.sparse": "minidl.sparse",
    "torch.func": "minidl.func",
    "functorch": "minidl.func",   # torch.func's name before PyTorch 2.0 (functorch.vmap, grad, jvp, jacrev)
    "torch.hub": "minidl.hub",
    "torch.autograd.functional": "minidl.autograd.functional",
    "torch.nn.utils.parametrize": "minidl.nn.utils.parametrize",
    "torch.nn.utils.parametrizations": "minidl.nn.utils.parametrizations",
    "torch.nn.utils.prune": "minidl.nn.utils.prune",
    "torch.distributions.transforms": "minidl.distributions.transforms",
    "torch.distributions.constraints": "minidl.distributions.constraints",
    "torch.distributions.constraint_registry": "minidl.distributions.bijections",
    "torch.distributions.utils": "minidl.distributions.utils",
    "torch.distributions.kl": "minidl.distributions",
    "torch.nn.utils.fusion": "minidl.nn.utils.fusion",
    "torch.nn.utils.stateless": "minidl.func",
    "torch.autograd.anomaly_mode": "minidl.autograd.anomaly_mode",
    "torch.autograd.forward_ad": "minidl.autograd.forward_ad",
    "torch.autograd.graph": "minidl.autograd.graph",
    "torch.autograd.function": "minidl.autograd.function",
    "torch.autograd.profiler": "minidl.autograd.profiler",
}

# PyTorch names outside minidl's scope, with the reason the message gives.
OUT_OF_SCOPE = {
    "onnx": "ONNX export is outside minidl's scope (save weights with minidl.save / state_dict instead)",
    "fx": "torch.fx graph capture is outside minidl's scope",
    "quantization": "quantization is outside minidl's scope",
    "ao": "torch.ao (quantization, pruning) is outside minidl's scope",
    "export": "torch.export is outside minidl's scope",
    "mps": None,  # provided below as "not available"
}


def _missing_message(torch_name, minidl_name=None):
    reason = next((OUT_OF_SCOPE[p] for p in torch_name.split(".")[1:] if OUT_OF_SCOPE.get(p)), None)
    where = f" (looked for {minidl_name})" if minidl_name else ""
    return (f"minidl.run: this program uses {torch_name}, which minidl does not provide{where}. "
            + (f"It is out of scope: {reason}. " if reason else "")
            + f"{DOCS} lists the PyTorch names minidl has.")


class MissingTorchName(AttributeError):
    """A PyTorch name (an attribute of a torch module) the program uses that minidl does not provide."""

    def __init__(self, torch_name, minidl_name=None):
        super().__init__(_missing_message(torch_name, minidl_name))
        self.torch_name = torch_name


class MissingTorchModule(ModuleNotFoundError):
    """A PyTorch module the program imports that minidl does not provide."""

    def __init__(self, torch_name):
        super().__init__(_missing_message(torch_name), name=torch_name)
        self.torch_name = torch_name


# Names some programs probe that minidl has no module for: answered as "not available", as torch
# does on a machine without that hardware.
class _NotAvailable:
    def __init__(self, what):
        self._what = what

    def is_available(self):
        return False

    def is_built(self):
        return False

    def __repr__(self):
        return f"<{self._what}: not available under minidl>"


class _Accelerator:
    """torch.accelerator: CUDA when minidl sees a GPU."""

    @staticmethod
    def is_available():
        from . import cuda

        return cuda.is_available()

    @staticmethod
    def current_accelerator():
        from . import Device, cuda

        return Device("cuda") if cuda.is_available() else None

    @staticmethod
    def device_count():
        from . import cuda

        return cuda.device_count()


# torch.__version__ for programs that compare it: the PyTorch API level minidl follows, marked as minidl's
# (packaging.version reads it as 2.13.0 with a local label).
TORCH_VERSION = "2.13.0+minidl"

class _TorchVersion:
    """torch.version: the API level minidl follows, and the CUDA the GPU path runs (CuPy's runtime), None without
    one, as a CPU build of torch says."""

    __version__ = TORCH_VERSION
    git_version = "minidl"
    hip = None
    debug = False

    @property
    def cuda(self):
        from . import _device

        if _device.cuda_unavailable_reason() is not None:
            return None
        v = _device._cupy.cuda.runtime.runtimeGetVersion()
        return f"{v // 1000}.{v % 1000 // 10}"


EXTRAS = {
    "torch.backends": {"mps": _NotAvailable("torch.backends.mps")},
    "torch": {"accelerator": _Accelerator(), "xpu": _NotAvailable("torch.xpu"), "mps": _NotAvailable("torch.mps"),
              "__version__": TORCH_VERSION, "version": _TorchVersion()},
    "torchvision": {"__version__": "0.28.0+minidl"},
}


def _out_of_scope_module(fullname):
    parts = fullname.split(".")
    return parts[0] == "torch" and len(parts) > 1 and bool(OUT_OF_SCOPE.get(parts[1]))


def _resolve(spec):
    module_name, _, attr = spec.partition(":")
    target = importlib.import_module(module_name)
    return getattr(target, attr) if attr else target


_MODULE_DICT = types.ModuleType.__dict__["__dict__"]   # (a module's own attribute dictionary)


class _TorchModule(types.ModuleType):
    """The module a program sees as `torch...`: attributes come from the minidl module behind it."""

    def __init__(self, name, target_spec):
        super().__init__(name)
        object.__setattr__(self, "_minidl_spec", target_spec)
        object.__setattr__(self, "_minidl_target", _resolve(target_spec))
        object.__setattr__(self, "__path__", [])  # a package: `import torch.nn.functional` works

    def __getattr__(self, name):
        full = f"{self.__name__}.{name}"
        if full in TORCH_MODULES:
            return importlib.import_module(full)
        extras = EXTRAS.get(self.__name__, {})
        if name in extras:
            return extras[name]
        if _out_of_scope_module(full):
            return importlib.import_module(full)
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self._minidl_target, name)
        except AttributeError:
            if OUT_OF_SCOPE.get(name) and name[:1].isupper():
                return _out_of_scope_class(full)
            raise MissingTorchName(full, f"{self._minidl_spec.replace(':', '.')}.{name}") from None

    def __setattr__(self, name, value):
        if name.startswith("__") or name in _MODULE_DICT.__get__(self) or isinstance(value, types.ModuleType):
            object.__setattr__(self, name, value)  # (the import system sets submodules here)
        else:  # torch.backends.cudnn.benchmark = True sets minidl's flag
            setattr(self._minidl_target, name, value)

    def __dir__(self):
        return sorted(set(dir(self._minidl_target)) | set(EXTRAS.get(self.__name__, {})))

    @property
    def __dict__(self):
        """What `vars(module)` and `module.__dict__` show a program: the minidl module's names with the stand-in's
        own (a copy: `models.__dict__[args.arch]()` picks a model by name, as the ImageNet example does)."""
        own = _MODULE_DICT.__get__(self)
        merged = {k: v for k, v in vars(self._minidl_target).items() if not k.startswith("_")}
        merged.update(EXTRAS.get(self.__name__, {}))
        merged.update(own)
        return merged


def _out_of_scope_class(torch_name):
    """A stand-in for an out-of-scope PyTorch class: a program may define a subclass of it (as the
    word-language-model example does with nn.Transformer) and runs while it does not make one."""

    def __init__(self, *args, **kwargs):
        raise MissingTorchName(torch_name)

    return type(torch_name.rpartition(".")[2], (), {"__init__": __init__, "__module__": "minidl.run"})


class _OutOfScopeModule(types.ModuleType):
    """A PyTorch module outside minidl's scope (torch.onnx, torch.jit, ...): importing it works, as
    programs import it at the top; using any name in it raises MissingTorchName."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        raise MissingTorchName(f"{self.__name__}.{name}")


class TorchFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `torch...` and `torchvision...` modules for the program: minidl's stand-ins, or a clear
    MissingTorchName for a PyTorch module minidl does not have."""

    def find_spec(self, fullname, path=None, target=None):
        root = fullname.partition(".")[0]
        if root not in ("torch", "torchvision", "functorch"):
            return None
        if fullname not in TORCH_MODULES and not _out_of_scope_module(fullname):
            raise MissingTorchModule(fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        if spec.name not in TORCH_MODULES:
            return _OutOfScopeModule(spec.name)
        return _TorchModule(spec.name, TORCH_MODULES[spec.name])

    def exec_module(self, module):
        pass


_finder = None
_saved_modules: dict = {}


def install():
    """Make `import torch` (and torchvision's datasets/transforms) give minidl in this process."""
    global _finder
    if _finder is not None:
        return
    for name in list(sys.modules):  # a real torch imported earlier would shadow the hook
        if name.partition(".")[0] in ("torch", "torchvision", "functorch"):
            _saved_modules[name] = sys.modules.pop(name)
    _finder = TorchFinder()
    sys.meta_path.insert(0, _finder)
    from .autograd.return_types import Size

    Size.spelling = "torch"   # print(x.shape) reads torch.Size([...]), as the program's author saw it


def uninstall():
    """Remove the hook and the stand-in modules (and restore a real torch imported before install)."""
    global _finder
    if _finder is None:
        return
    sys.meta_path.remove(_finder)
    _finder = None
    from .autograd.return_types import Size

    Size.spelling = "minidl"
    for name in list(sys.modules):
        if isinstance(sys.modules[name], _TorchModule):
            del sys.modules[name]
    sys.modules.update(_saved_modules)
    _saved_modules.clear()


def _program_line(exc, program):
    """'file.py:LINE: source' of the deepest frame of the traceback in the program's own code: its main
    file or any module of its (not minidl's, not the standard library's), where the name is used."""
    minidl_dir = os.path.dirname(os.path.abspath(__file__))
    stdlib = os.path.dirname(os.__file__)
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = os.path.abspath(frame.filename)
        if path.startswith(minidl_dir + os.sep) or path.startswith(stdlib + os.sep) or frame.filename.startswith("<"):
            continue
        found = frame
    if found is None:
        return program
    shown = os.path.relpath(found.filename) if os.path.abspath(found.filename) != os.path.abspath(program) else program
    return f"{shown}:{found.lineno}: {found.line}"


USAGE = """usage: python -m minidl.run program.py [args ...]

Runs a PyTorch program on minidl: `torch`, `torch.nn`, `torch.nn.functional`, `torch.optim`,
`torch.utils.data`, `torchvision.datasets` and `torchvision.transforms` resolve to minidl.
docs/TORCH_COMPAT.md lists what minidl provides."""


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    program = args[0]
    if not os.path.isfile(program):
        print(f"minidl.run: no such program file: {program}", file=sys.stderr)
        return 2
    install()
    sys.argv = [program] + args[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    try:
        runpy.run_path(program, run_name="__main__")
    except (MissingTorchName, MissingTorchModule) as e:
        print(f"{_program_line(e, program)}\n{e}", file=sys.stderr)
        return 1
    except ImportError as e:  # `from torch.x import Name`: Python turns our AttributeError into this one
        import re

        match = re.match(r"cannot import name '(\w+)' from '((?:torch|torchvision)[\w.]*)'", str(e))
        if match is None:
            raise
        print(f"{_program_line(e, program)}\n{_missing_message(f'{match.group(2)}.{match.group(1)}')}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
