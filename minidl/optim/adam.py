"""Adam and AdamW: gradient steps scaled by running estimates of the gradient's first two moments.

PyTorch's algorithm, for each parameter p with gradient g at step t = 1, 2, ... (g = -g to maximize):

    g = g + weight_decay * p                  Adam: L2 penalty folded into the gradient
    p = p * (1 - lr * weight_decay)           AdamW: decoupled weight decay, applied to p directly
    m = beta1 * m + (1 - beta1) * g           first moment (written as a lerp, as PyTorch does)
    v = beta2 * v + (1 - beta2) * g * g       second moment
    v_max = max(v_max, v)                     amsgrad only: use the largest v seen so far
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

The bias corrections (1 - beta^t) undo the zero start of m and v. They, the learning rate and the
step count are Python numbers on the host: the update never waits for the GPU.

On the GPU (float32 CUDA parameters, `fused=None` or True) a group is two launches instead
(kernels/multi_tensor.cu): the step counts, kept on the device (state["step"] is then a 0-d device
Tensor, as in torch's fused Adam), are incremented, then `multi_tensor_adam` updates every parameter
reading the learning rate from the device. It equals the per-parameter code below (`fused=False`).
"""
from __future__ import annotations

import numbers

from .. import primitives as P
from .._device import get_array_module
from ..autograd.tensor import Tensor
from .optimizer import Optimizer


def lerp_(start, end, weight: float):
    """start += weight * (end - start), in place. Like torch.lerp, a weight >= 0.5 uses the equivalent
    end - (end - start) * (1 - weight), which rounds better there, so the two agree to the last bits."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        start[...] = end - (end - start) * (1 - weight)
    return start


class Adam(Optimizer):
    _decoupled_weight_decay = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False, *, fused=None):
        defaults = dict(lr=lr, betas=tuple(betas) if isinstance(betas, (tuple, list)) else betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, fused=fused)
        super().__init__(params, defaults)

    _nonnegative = ("lr", "eps", "weight_decay")
    _flags = ("amsgrad", "maximize")
    _state_keys = ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def _check_hyperparameters(self, group):
        super()._check_hyperparameters(group)  # lr, eps, weight_decay: finite numbers >= 0
        name = type(self).__name__
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        for i, b in enumerate(betas):
            if isinstance(b, bool) or not isinstance(b, numbers.Real) or not 0.0 <= b < 1.0:
                raise ValueError(f"{name}: invalid beta parameter at index {i}: {b} (must be in [0, 1))")
        group["betas"] = tuple(betas)

    def _multi_tensor_update(self, group, grad_scale, found_inf):
        params = [p for p in group["params"] if p.grad is not None]
        if not self._use_multi_tensor(group, params):
            return False
        amsgrad = bool(group["amsgrad"])
        fresh = False
        for p in params:
            state = self.state.setdefault(p, {})
            if "exp_avg" not in state:
                state["exp_avg"] = self._zeros_like(p)
                state["exp_avg_sq"] = self._zeros_like(p)
                state.setdefault("step", 0)
                fresh = True
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = self._zeros_like(p)
        steps, slots, st = self._multi_tensor_state(group, params, fresh)
        P.multi_tensor_adam(
            [p._data for p in params], [p.grad._data for p in params], [s["exp_avg"]._data for s in st],
            [s["exp_avg_sq"]._data for s in st], [s["max_exp_avg_sq"]._data for s in st] if amsgrad else None,
            slots, steps, group.device_hparams(("lr", "beta1", "beta2", "eps", "weight_decay")),
            decoupled=self._decoupled_weight_decay, maximize=bool(group["maximize"]), grad_scale=grad_scale,
            found_inf=found_inf)
        return True

    def _update_group(self, group):
        lr, eps, weight_decay = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        for p, g in self._params_and_grads(group):
            xp = get_array_module(p._data)
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = 0
                state["exp_avg"] = self._zeros_like(p)
                state["exp_avg_sq"] = self._zeros_like(p)
                if group["amsgrad"]:
                    state["max_exp_avg_sq"] = self._zeros_like(p)
            if isinstance(state["step"], Tensor):  # left by the multi-tensor GPU path
                state["step"] = int(state["step"].item())
            state["step"] += 1
            step = state["step"]
            m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data

            if weight_decay != 0:
                if self._decoupled_weight_decay:
                    p._data *= 1 - lr * weight_decay
                else:
                    g = g + weight_decay * p._data

            lerp_(m, g, 1 - beta1)
            v *= beta2
            v += (1 - beta2) * (g * g)

            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            step_size = lr / bias_correction1
            if group["amsgrad"]:
                v_max = state["max_exp_avg_sq"]._data
                xp.maximum(v_max, v, out=v_max)
                denom = xp.sqrt(v_max) / bias_correction2_sqrt + eps
            else:
                denom = xp.sqrt(v) / bias_correction2_sqrt + eps
            p._data -= step_size * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the
    Adam step, instead of adding weight_decay * p to the gradient. Default weight_decay is 1e-2."""

    _decoupled_weight_decay = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 maximize=False, *, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, fused=fused)
