"""RMSprop: divide the gradient by a running root-mean-square of recent gradients (Hinton's lecture 6e).

PyTorch's algorithm, for each parameter p with gradient g (g = -g to maximize):

    g = g + weight_decay * p                     (L2 penalty, if weight_decay != 0)
    v = alpha * v + (1 - alpha) * g * g          running mean of g^2
    a = alpha * a + (1 - alpha) * g              centered only: running mean of g
    d = sqrt(v - a * a) + eps   if centered, else sqrt(v) + eps
    b = momentum * b + g / d,  p = p - lr * b     with momentum > 0
    p = p - lr * g / d                            without

On the GPU (float32 CUDA parameters, fused=None or True) a group is two launches: the device step
counts, then `multi_tensor_rmsprop` (kernels/multi_tensor.cu), equal to the per-parameter code below.
"""
from __future__ import annotations

from .. import primitives as P
from .._device import get_array_module
from ..autograd.tensor import Tensor
from .adam import lerp_
from .optimizer import Optimizer


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False, *, fused=None):
        # torch's RMSprop has no `fused` option (so no such key in its param groups): an attribute here.
        self._fused = fused
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    _nonnegative = ("lr", "eps", "momentum", "weight_decay", "alpha")
    _flags = ("centered", "maximize")
    _state_keys = ("step", "square_avg", "momentum_buffer", "grad_avg")

    def _multi_tensor_update(self, group, grad_scale, found_inf):
        params = [p for p in group["params"] if p.grad is not None]
        if not self._use_multi_tensor(group, params):
            return False
        momentum, centered = float(group["momentum"]), bool(group["centered"])
        fresh = False
        for p in params:
            state = self.state.setdefault(p, {})
            if "square_avg" not in state:
                state["square_avg"] = self._zeros_like(p)
                state.setdefault("step", 0)
                fresh = True
            if momentum > 0 and "momentum_buffer" not in state:
                state["momentum_buffer"] = self._zeros_like(p)
            if centered and "grad_avg" not in state:
                state["grad_avg"] = self._zeros_like(p)
        steps, slots, st = self._multi_tensor_state(group, params, fresh)
        P.multi_tensor_rmsprop(
            [p._data for p in params], [p.grad._data for p in params], [s["square_avg"]._data for s in st],
            [s["momentum_buffer"]._data for s in st] if momentum > 0 else None,
            [s["grad_avg"]._data for s in st] if centered else None, slots, steps,
            group.device_hparams(("lr", "alpha", "eps", "weight_decay", "momentum")),
            maximize=bool(group["maximize"]), grad_scale=grad_scale, found_inf=found_inf)
        return True

    def _update_group(self, group):
        lr, alpha, eps = float(group["lr"]), float(group["alpha"]), float(group["eps"])
        weight_decay, momentum = float(group["weight_decay"]), float(group["momentum"])
        for p, g in self._params_and_grads(group):
            xp = get_array_module(p._data)
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = 0
                state["square_avg"] = self._zeros_like(p)
            # Created on demand too: a scheduler (OneCycleLR) may turn momentum on after the first step.
            if momentum > 0 and "momentum_buffer" not in state:
                state["momentum_buffer"] = self._zeros_like(p)
            if group["centered"] and "grad_avg" not in state:
                state["grad_avg"] = self._zeros_like(p)
            if isinstance(state["step"], Tensor):  # left by the multi-tensor GPU path
                state["step"] = int(state["step"].item())
            state["step"] += 1

            if weight_decay != 0:
                g = g + weight_decay * p._data
            square_avg = state["square_avg"]._data
            square_avg *= alpha
            square_avg += (1 - alpha) * (g * g)
            if group["centered"]:
                grad_avg = lerp_(state["grad_avg"]._data, g, 1 - alpha)
                avg = xp.sqrt(square_avg - grad_avg * grad_avg)
            else:
                avg = xp.sqrt(square_avg)
            avg += eps

            if momentum > 0:
                buf = state["momentum_buffer"]._data
                buf *= momentum
                buf += g / avg
                p._data -= lr * buf
            else:
                p._data -= lr * (g / avg)
