"""The autograd core: Tensor (storage, grad, the version counter, backward), Function (an op = forward +
backward) and the tape, and the grad modes. The operations themselves are in minidl.ops."""
from .function import Function, FunctionCtx, backward, once_differentiable, enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled, unbroadcast  # noqa: F401
from .tensor import Tensor  # noqa: F401
from .legacy import Variable  # noqa: F401
from . import return_types  # noqa: F401
from . import functional  # noqa: E402,F401  (torch.autograd.functional: jacobian, vjp, jvp)
from . import anomaly_mode, forward_ad, graph  # noqa: E402,F401  (graph: saved_tensors_hooks, save_on_cpu)
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: E402,F401
from .gradcheck import GradcheckError, gradcheck, gradgradcheck  # noqa: E402,F401
