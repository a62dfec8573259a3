"""RMSprop: divide the gradient by a running root-mean-square of recent gradients (Hinton's lecture 6e).

PyTorch's algorithm, for each parameter p with gradient g (g = -g to maximize):

    g = g + weight_decay * p                     (L2 penalty, if weight_decay != 0)
    v = alpha * v + (1 - alpha) * g * g          running mean of g^2
    a = alpha * a + (1 - alpha) * g              centered only: running mean of g
    d = sqrt(v - a * a) + eps   if centered, else sqrt(v) + eps
    b = momentum * b + g / d,  p = p - lr * b     with momentum > 0
    p = p - lr * g / d                            without
"""
from __future__ import annotations

from .._device import get_array_module
from .adam import lerp_
from .optimizer import Optimizer


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                 maximize=False):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    _nonnegative = ("lr", "eps", "momentum", "weight_decay", "alpha")
    _flags = ("centered", "maximize")
    _state_keys = ("step", "square_avg", "momentum_buffer", "grad_avg")

    def _update_group(self, group):
        lr, alpha, eps = float(group["lr"]), float(group["alpha"]), float(group["eps"])
        weight_decay, momentum = float(group["weight_decay"]), float(group["momentum"])
        for p in group["params"]:
            if p.grad is None:
                continue
            g = self._grad_of(p, group["maximize"])
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
