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
from .autograd.function import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: F401
from .autograd.anomaly_mode import is_anomaly_check_nan_enabled, is_anomaly_enabled  # noqa: F401,E402
from .autograd.grad_mode import inference_mode, is_inference_mode_enabled  # noqa: F401
from .autograd.tensor import (  # noqa: F401
    Tensor, bfloat16, bool_, float16, float32, float64, get_default_dtype, int8, int16, int32, int64,
    set_default_dtype, uint8,
)
from .autograd.legacy import (  # noqa: F401
    BFloat16Tensor, BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor, LongTensor, ShortTensor,
)
from .autograd import return_types  # noqa: F401
from .autograd.printing import get_printoptions, set_printoptions  # noqa: F401  (torch.set_printoptions)
from .autograd.return_types import Size  # noqa: F401
from . import ops  # noqa: E402  (binds every operation onto Tensor: minidl/ops/__init__.py's table)
from .ops.conversion import (  # noqa: F401
    channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format,
)
from .ops.sparse import Layout as layout, sparse_coo, strided  # noqa: F401  (Tensor.layout's values, their type)

import math as _math  # noqa: E402
import numpy as _np  # noqa: E402

pi, e, inf, nan, newaxis = _math.pi, _math.e, _math.inf, _math.nan, None   # (torch.pi, ..., torch.newaxis)
dtype = _np.dtype   # (isinstance(t.dtype, torch.dtype): minidl's dtypes are NumPy's)
short, uint16, uint32, uint64 = _np.dtype("int16"), _np.dtype("uint16"), _np.dtype("uint32"), _np.dtype("uint64")
from .random import (  # noqa: F401
    Generator, default_generator, get_rng_state, initial_seed, manual_seed, seed, set_rng_state,
)
from .amp.autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: F401
from ._dtypes import complex64, complex128, finfo, iinfo  # noqa: F401
from .ops import can_cast, promote_types, result_type  # noqa: F401
from .backends import (  # noqa: F401
    are_deterministic_algorithms_enabled, get_num_interop_threads, get_num_threads, is_deterministic_algorithms_warn_only_enabled,
    set_num_interop_threads, set_num_threads, use_deterministic_algorithms, set_deterministic_debug_mode,
    get_deterministic_debug_mode,
)
from . import cuda  # noqa: F401

__version__ = "0.1.0"

# PyTorch's short dtype names
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
bool = bool_  # noqa: A001
cfloat, cdouble = complex64, complex128

# minidl.exp(x), minidl.cat([...]), minidl.zeros(...), ...: the functions of minidl/ops/__init__.py's table
globals().update(ops.FUNCTIONS)

from . import linalg, special  # noqa: E402,F401  (torch.linalg's most used functions; torch.special's names)
from . import fft  # noqa: E402,F401  (torch.fft: the discrete Fourier transforms, with gradients)
from . import hub  # noqa: E402,F401  (torch.hub: load_state_dict_from_url)
from . import compiler  # noqa: E402,F401  (torch.compiler: disable, is_compiling; no compiler in minidl)
from . import func  # noqa: E402,F401  (torch.func: functional_call, grad, vjp, jacrev, hessian, vmap)
from . import sparse  # noqa: E402,F401  (torch.sparse: mm, sum of sparse COO tensors)
vmap = func.vmap
stft, istft = fft.stft, fft.istft

det, inverse, slogdet, logdet = linalg.det, linalg.inv, linalg.slogdet, linalg.logdet
matrix_power, matrix_exp, cholesky_solve = linalg.matrix_power, linalg.matrix_exp, linalg.cholesky_solve
chain_matmul = lambda *matrices: linalg.multi_dot(matrices)   # noqa: E731  (torch.chain_matmul: multi_dot's old name)
geqrf, orgqr = linalg.geqrf, linalg.householder_product   # (torch.geqrf, torch.orgqr)
lu, lu_solve, lu_unpack = linalg.factorizations.torch_lu, linalg.factorizations.torch_lu_solve, linalg.lu_unpack


def cholesky(input, upper=False):
    """torch.cholesky (the older API): the lower factor, or the upper with upper=True."""
    return linalg.cholesky(input, upper=upper)


def cholesky_inverse(input, upper=False):
    """A^-1 from A's Cholesky factor (torch.cholesky_inverse)."""
    return linalg.inv(input.mT @ input if upper else input @ input.mT)


def pinverse(input, rcond=1e-15):
    """torch.pinverse: the pseudo-inverse, singular values below rcond * the largest counted as zero."""
    return linalg.pinv(input, rtol=rcond)


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve (the older API): (solution, a copy of A) for A X = b (A^T X = b with transpose)."""
    coefficient = A.mT if transpose else A
    solution = linalg.solve_triangular(coefficient, b, upper=upper != transpose, unitriangular=unitriangular)
    return return_types.namedtuple("triangular_solve", ["solution", "cloned_coefficient"])(solution, A.clone())


def svd(input, some=True, compute_uv=True):
    """torch.svd (the older API): (U, S, V) with V, not Vh; some=True the reduced factors."""
    U, S, Vh = linalg.svd(input, full_matrices=not some)
    return return_types.namedtuple("svd", ["U", "S", "V"])(U, S, Vh.mT)


def qr(input, some=True):
    """torch.qr (the older API): (Q, R), reduced when some=True."""
    return linalg.qr(input, mode="reduced" if some else "complete")



def numel(t):
    return t.numel()


# Tensor methods of torch.linalg's functions (t.det(), t.inverse(), t.cholesky(), ...)
for _name, _fn in (("det", det), ("inverse", inverse), ("slogdet", slogdet), ("logdet", logdet), ("svd", svd),
                   ("qr", qr), ("cholesky", cholesky), ("cholesky_solve", cholesky_solve),
                   ("cholesky_inverse", cholesky_inverse), ("pinverse", pinverse), ("matrix_power", matrix_power),
                   ("matrix_exp", matrix_exp), ("triangular_solve", triangular_solve), ("lu", lu),
                   ("lu_solve", lu_solve)):
    setattr(Tensor, _name, _fn)
del _name, _fn


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


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: "highest" keeps float32 products in float32; "high" and "medium" let
    them run on TF32 tensor cores (minidl has no bf16x3 mode: "medium" is "high"). It sets
    backends.cuda.matmul.allow_tf32, as torch's does; convolutions follow backends.cudnn.allow_tf32."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"set_float32_matmul_precision: precision must be 'highest', 'high' or 'medium', got "
                         f"{precision!r}")
    from . import backends

    backends.cuda.matmul.allow_tf32 = precision != "highest"
    global _matmul_precision
    _matmul_precision = precision


_matmul_precision = "highest"


def get_float32_matmul_precision() -> str:
    """What set_float32_matmul_precision set, or what backends.cuda.matmul.allow_tf32 says when set directly."""
    from . import backends

    if not backends.cuda.matmul.allow_tf32:
        return "highest"
    return "high" if _matmul_precision == "highest" else _matmul_precision


def set_default_device(device):
    """Where factories (zeros, randn, tensor, the layers' parameters, ...) put a tensor when no device is
    given (torch.set_default_device); None restores the CPU."""
    from .ops import creation

    creation.set_default_device(device)


def get_default_device():
    from .ops import creation

    return creation.default_device()


def set_default_tensor_type(t):
    """torch.set_default_tensor_type (deprecated in torch, met in older programs): "torch.FloatTensor" /
    "torch.DoubleTensor" set the default float dtype, "torch.cuda.FloatTensor" also the default device."""
    name = t if isinstance(t, str) else getattr(t, "legacy_name", getattr(t, "__name__", str(t)))
    kinds = {"FloatTensor": float32, "DoubleTensor": float64}
    kind = name.rpartition(".")[2]
    if kind not in kinds:
        raise TypeError(f"set_default_tensor_type: only floating-point types are supported as the default type, got "
                        f"{name!r} (torch.FloatTensor, torch.DoubleTensor or their torch.cuda forms)")
    set_default_dtype(kinds[kind])
    set_default_device("cuda" if ".cuda." in name or name.startswith("cuda.") else None)


def set_flush_denormal(mode) -> bool:
    """torch.set_flush_denormal: whether flushing subnormal floats to zero could be set. NumPy gives no control of the
    CPU's FTZ/DAZ flags, so minidl cannot, and says so (False, as torch on a CPU without the flags)."""
    return False


_warn_always = False


def set_warn_always(b: bool) -> None:
    """torch.set_warn_always: while on, warnings are shown every time they are raised (Python shows one once per
    place by default). minidl has no once-only warnings of its own, so this is a warnings filter "always" for the
    whole process, broader than torch's (which repeats torch's TORCH_WARN_ONCE warnings only); off removes it."""
    import warnings

    global _warn_always
    _warn_always = True if b else False   # (bool is minidl.bool here, the dtype)
    warnings.filters[:] = [f for f in warnings.filters if f is not _ALWAYS[0]]
    if _warn_always:
        warnings.simplefilter("always")
        _ALWAYS[0] = warnings.filters[0]
    getattr(warnings, "_filters_mutated", lambda: None)()   # (the warnings module caches its decisions)


_ALWAYS = [None]   # the filter set_warn_always added


def is_warn_always_enabled() -> bool:
    return _warn_always


# Sub-packages load on first use, so `import minidl` stays light and never needs CuPy.
_SUBMODULES = ("nn", "optim", "data", "utils", "primitives", "autograd", "backends", "amp", "profiler",
               "multiprocessing", "distributions", "testing", "jit")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"minidl.{name}")
    if name in ("save", "load"):
        return getattr(importlib.import_module("minidl.utils.serialization"), name)
    if name == "OutOfMemoryError":   # torch.OutOfMemoryError: torch.cuda's (minidl/cuda/__init__.py)
        return importlib.import_module("minidl.cuda").OutOfMemoryError
    if name == "serialization":   # torch.serialization: safe_globals, add_safe_globals, ...
        return importlib.import_module("minidl.utils.serialization")
    if name == "from_dlpack":
        return importlib.import_module("minidl.utils.dlpack").from_dlpack
    form = importlib.import_module("minidl._torch_forms").resolve(name)   # torch.conv2d, torch.dropout, ...
    if form is not None:
        return form
    raise AttributeError(f"module 'minidl' has no attribute {name!r}")
