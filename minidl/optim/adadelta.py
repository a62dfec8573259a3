"""Adadelta (Zeiler 2012): a per-coordinate step from running averages of squared gradients and of
squared updates, so that lr = 1 needs no tuning (PyTorch's mnist example uses it).

PyTorch's algorithm, for each parameter p with gradient g (g = -g to maximize):

    g = g + weight_decay * p                         (L2 penalty, if weight_decay != 0)
    v = rho * v + (1 - rho) * g * g                  running mean of g^2
    delta = sqrt(u + eps) / sqrt(v + eps) * g        u: running mean of delta^2 (starts at 0)
    u = rho * u + (1 - rho) * delta * delta
    p = p - lr * delta
"""
from __future__ import annotations

from .._device import get_array_module
from .optimizer import Optimizer


class Adadelta(Optimizer):
    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=False, foreach=None,
                 capturable=False, differentiable=False):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group):
        if group["lr"] < 0 or group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"Adadelta: lr, eps and weight_decay must be >= 0, got {group['lr']}, {group['eps']}, "
                             f"{group['weight_decay']}")
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Adadelta: invalid rho {group['rho']} (must lie in [0, 1])")

    def _update_group(self, group):
        lr, rho, eps, weight_decay = (float(group[k]) for k in ("lr", "rho", "eps", "weight_decay"))
        for p, g in self._params_and_grads(group, weight_decay):
            xp = get_array_module(p._data)
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = 0
                state["square_avg"] = self._zeros_like(p)
                state["acc_delta"] = self._zeros_like(p)
            state["step"] += 1
            v, u = state["square_avg"]._data, state["acc_delta"]._data
            v *= rho
            v += (1 - rho) * g * g
            delta = xp.sqrt(u + eps) / xp.sqrt(v + eps) * g
            u *= rho
            u += (1 - rho) * delta * delta
            p._data -= lr * delta
