"""The autograd layer: Tensor, Function (an op = forward + backward), the tape and grad modes."""
from .function import Function, FunctionCtx, enable_grad, is_grad_enabled, no_grad, set_grad_enabled, unbroadcast  # noqa: F401
from .tensor import Tensor  # noqa: F401
from .legacy import Variable  # noqa: F401
from . import return_types  # noqa: F401
