"""minidl: a small, real deep learning framework that teaches how GPU deep learning works.

    import minidl
    x = minidl.randn(8, 3, requires_grad=True)
    loss = (x @ x.T).sum()
    loss.backward()           # x.grad now holds d loss / d x

The layers (see docs/DESIGN.md): minidl.primitives (the cuDNN-style primitive library, NumPy and
CUDA), minidl.autograd (Tensor and the tape), minidl.nn, minidl.optim, minidl.data, minidl.utils.
"""
import importlib

from ._device import Device
from ._device import Device as device
from .autograd.creation import (  # noqa: F401
    arange, as_tensor, bernoulli, empty, empty_like, eye, from_numpy, full, full_like, linspace, multinomial, normal,
    ones, ones_like, rand, rand_like, randint, randint_like, randn, randn_like, randperm, tensor, zeros, zeros_like,
)
from .autograd.function import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .autograd.function import no_grad as inference_mode  # noqa: F401  (PyTorch's inference_mode: no graph)
from .autograd.tensor import (  # noqa: F401
    Tensor, bfloat16, bool_, cat, channels_last, channels_last_3d, chunk, concat, contiguous_format, float16,
    float32, float64, get_default_dtype, int8, int16, int32, int64, matmul, maximum, memory_format, minimum,
    allclose, equal, isclose,
    preserve_format, set_default_dtype, split, stack, uint8, where,
)
from .autograd.legacy import (  # noqa: F401
    BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor, ShortTensor,
)
from .autograd import return_types  # noqa: F401
from .autograd.return_types import Size  # noqa: F401
from .random import Generator, initial_seed, manual_seed, seed  # noqa: F401
from .amp.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: F401
from ._dtypes import finfo  # noqa: F401
from . import cuda  # noqa: F401

__version__ = "0.1.0"

# PyTorch's short dtype names
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
bool = bool_  # noqa: A001


# Functional forms of Tensor methods: minidl.exp(x) == x.exp(), as torch.exp(x).
def _method(name):
    def fn(input, *args, out=None, **kwargs):
        result = getattr(input, name)(*args, **kwargs)
        return result if out is None else _write_out(out, result, name)

    fn.__name__ = name
    fn.__doc__ = f"minidl.{name}(t, ...) is t.{name}(...)."
    return fn


for _name in (
    "exp", "log", "sqrt", "rsqrt", "abs", "clamp", "clip", "sum", "mean", "var", "std", "max", "min",
    "argmax", "argmin", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute",
    "relu", "sigmoid", "tanh", "softmax", "log_softmax", "isnan", "isfinite", "sign", "gather",
    # issue #16: the Tensor surface of PyTorch's tutorials, as functions too
    "mm", "bmm", "mv", "dot", "narrow", "index_select", "masked_select", "masked_fill", "nonzero", "scatter",
    "scatter_add", "sort", "argsort", "topk", "kthvalue", "median", "cumsum", "norm", "unbind", "flip", "tril",
    "triu", "all", "any", "sin", "cos", "log1p", "square", "pow", "add", "sub", "mul", "div", "neg", "eq", "ne",
    "lt", "le", "gt", "ge", "clone", "t", "detach", "mode", "round", "floor", "ceil", "trunc", "amax", "amin",
    "roll", "logsumexp", "remainder", "lerp",
    # the long tail of elementwise math (autograd/mathops.py)
    "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan",
    "arcsinh", "arccosh", "arctanh", "exp2", "expm1", "log2", "log10", "reciprocal", "sinc", "deg2rad", "rad2deg",
    "frac", "logit", "atan2", "arctan2", "hypot", "logaddexp", "logaddexp2", "xlogy", "fmod", "copysign",
    "erf", "erfc", "lgamma",
):
    globals()[_name] = _method(_name)
del _name

from .autograd import composites as _composites  # noqa: E402

for _name in _composites.FUNCTIONS:   # prod, einsum, diag, hstack, ... (autograd/composites.py)
    if _name not in globals():
        globals()[_name] = getattr(_composites, _name)
del _name


from . import linalg, special  # noqa: E402,F401  (torch.linalg's most used functions; torch.special's names)

det, inverse, slogdet, logdet = linalg.det, linalg.inv, linalg.slogdet, linalg.logdet


def _write_out(out, result, name):
    """torch's out= argument: the result is written into `out` (resized as torch does), which is returned."""
    if out.requires_grad and is_grad_enabled():
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic differentiation, "
                           "but one of the arguments requires grad")
    if out.shape != result.shape:
        out._data = result._data.astype(out.dtype, copy=True)
        out._version += 1
        return out
    return out.copy_(result.detach())


def numel(t):
    return t.numel()


_compile_noted = False


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False):
    """torch.compile: minidl has no compiler, so the model (or function) comes back as it is and runs
    eagerly; the first call says so once. What torch.compile(mode="reduce-overhead") buys on a GPU (CUDA
    graphs) is minidl.cuda.graphed_step / CUDAGraphStep for a whole training step."""
    global _compile_noted
    if not _compile_noted:
        import sys

        print("minidl.compile: no compiler in minidl; the model runs eagerly (for CUDA graphs of a whole step see "
              "minidl.cuda.graphed_step)", file=sys.stderr)
        _compile_noted = True
    if model is None:
        return lambda m: m
    return model


def set_default_device(device):
    """Where factories (zeros, randn, tensor, the layers' parameters, ...) put a tensor when no device is
    given (torch.set_default_device); None restores the CPU."""
    from .autograd import creation

    creation.set_default_device(device)


def get_default_device():
    from .autograd import creation

    return creation.default_device()


# Sub-packages load on first use, so `import minidl` stays light and never needs CuPy.
_SUBMODULES = ("nn", "optim", "data", "utils", "primitives", "autograd", "backends", "amp", "profiler",
               "multiprocessing", "distributions")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"minidl.{name}")
    if name in ("save", "load"):
        return getattr(importlib.import_module("minidl.utils.serialization"), name)
    if name == "from_dlpack":
        return importlib.import_module("minidl.utils.dlpack").from_dlpack
    raise AttributeError(f"module 'minidl' has no attribute {name!r}")
