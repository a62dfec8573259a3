"""SGD: stochastic gradient descent with optional momentum, Nesterov momentum and weight decay.

PyTorch's algorithm, for each parameter p with gradient g (g = -g to maximize):

    g = g + weight_decay * p                         (L2 penalty, if weight_decay != 0)
    b = g                          on the first step  (momentum buffer, if momentum != 0)
    b = momentum * b + (1 - dampening) * g            afterwards
    g = g + momentum * b           with nesterov, else g = b
    p = p - lr * g

On the GPU the whole group is one launch of `multi_tensor_sgd` (kernels/multi_tensor.cu), equal to
the per-parameter code below bit for bit; `fused=False` keeps the per-parameter path.
"""
from __future__ import annotations

from .. import primitives as P
from ..autograd.tensor import Tensor
from .optimizer import Optimizer


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False, *, fused=None):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, fused=fused)
        super().__init__(params, defaults)

    _nonnegative = ("lr", "momentum", "dampening", "weight_decay")
    _flags = ("nesterov", "maximize")
    _state_keys = ("momentum_buffer",)

    def _check_hyperparameters(self, group):
        super()._check_hyperparameters(group)  # lr, momentum, dampening, weight_decay: finite numbers >= 0
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                f"SGD: Nesterov momentum requires a momentum > 0 and zero dampening, got "
                f"momentum={group['momentum']}, dampening={group['dampening']}"
            )

    def _multi_tensor_update(self, group, grad_scale, found_inf):
        params = [p for p in group["params"] if p.grad is not None]
        if not self._use_multi_tensor(group, params):
            return False
        momentum = float(group["momentum"])
        buffers, first = None, [0] * len(params)
        if momentum != 0:
            buffers = []
            for t, p in enumerate(params):
                state = self.state.setdefault(p, {})
                if state.get("momentum_buffer") is None:
                    state["momentum_buffer"] = self._zeros_like(p)
                    first[t] = 1
                buffers.append(state["momentum_buffer"]._data)
        hparams = group.device_hparams(("lr", "momentum", "dampening", "weight_decay"))
        P.multi_tensor_sgd([p._data for p in params], [p.grad._data for p in params], buffers, first, hparams,
                           nesterov=bool(group["nesterov"]), maximize=bool(group["maximize"]), grad_scale=grad_scale,
                           found_inf=found_inf)
        return True

    def _update_group(self, group):
        # Python floats: multiplying a float32 array by them keeps float32 (and reads nothing from the GPU).
        lr, momentum = float(group["lr"]), float(group["momentum"])
        dampening, weight_decay = float(group["dampening"]), float(group["weight_decay"])
        for p, g in self._params_and_grads(group, weight_decay):
            if momentum != 0:
                state = self.state.setdefault(p, {})
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = Tensor._make(g.copy())  # the first step starts the buffer at g, undamped
                    state["momentum_buffer"] = buf
                else:
                    buf._data *= momentum
                    buf._data += (1 - dampening) * g
                g = g + momentum * buf._data if group["nesterov"] else buf._data
            p._data -= lr * g
