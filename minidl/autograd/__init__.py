"""The autograd layer: Tensor, Function (an op = forward + backward), the tape and grad modes."""
from .function import Function, FunctionCtx, enable_grad, is_grad_enabled, no_grad, set_grad_enabled, unbroadcast  # noqa: F401
from .tensor import Tensor  # noqa: F401
from .legacy import Variable  # noqa: F401
from . import return_types  # noqa: F401
# Helpers the layers above (nn, ...) use by name; the _private modules they live in are autograd's own.
from ._checks import check_float_tensor, check_tensor  # noqa: F401,E402
from ._dims import normalize_dim  # noqa: F401,E402
