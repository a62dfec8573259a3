"""Four more of PyTorch's adaptive optimizers, each PyTorch's algorithm line for line (g: the gradient,
-g to maximize; t: the step count from 1; the state has torch's names, so state dicts carry over):

Adagrad (Duchi et al. 2011)
    g += weight_decay * p;  sum += g * g;  p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(sum) + eps)
Adamax (Kingma & Ba 2015, the infinity-norm Adam)
    g += weight_decay * p;  exp_avg = b1 exp_avg + (1 - b1) g;  exp_inf = max(b2 exp_inf, |g| + eps)
    p -= lr / (1 - b1^t) * exp_avg / exp_inf
NAdam (Dozat 2016: Adam with Nesterov momentum and a momentum schedule mu_t)
    mu_t = b1 (1 - 0.5 * 0.96^(t psi));  mu_product *= mu_t;  Adam's moments;  denom = sqrt(v / (1 - b2^t)) + eps
    p -= lr (1 - mu_t) / (1 - mu_product) * g / denom + lr mu_{t+1} / (1 - mu_product mu_{t+1}) * m / denom
RAdam (Liu et al. 2020: Adam whose adaptive step is switched on once its variance is tractable)
    rho_t = rho_inf - 2 t b2^t / (1 - b2^t);  if rho_t > 5: Adam's step times the rectification r_t,
    else plain momentum SGD with bias-corrected m.

Adafactor (Shazeer & Stern 2018; torch 2.5's form): a matrix's second moment kept factored, one row and one column
    of statistics instead of a full matrix (memory m + n, not m n)
    rho_t = min(lr, 1 / sqrt(t));  alpha = max(eps2, RMS(p)) rho_t;  p *= 1 - lr weight_decay
    row = lerp(row, mean_j g^2, t^beta2_decay);  col = lerp(col, mean_i g^2, t^beta2_decay)
    v = row col / mean(row) (a vector parameter: v = lerp(v, g^2, t^beta2_decay));  u = g / sqrt(max(v, eps1^2))
    p -= alpha / max(1, RMS(u) / d) u

They run on NumPy or CuPy arrays alike (one array op at a time; no multi-tensor kernel yet).
"""
from __future__ import annotations

import math

import numpy as np

from .._device import get_array_module
from ..autograd.tensor import Tensor
from .optimizer import Optimizer


def _betas(name, betas):
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise TypeError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
    b1, b2 = betas
    if not 0.0 <= b1 < 1.0 or not 0.0 <= b2 < 1.0:
        raise ValueError(f"{name}: invalid betas {betas!r} (each must lie in [0, 1))")


class _Adaptive(Optimizer):
    def _check_hyperparameters(self, group):
        name = type(self).__name__
        for key in ("lr", "eps", "weight_decay"):
            if key in group and float(group[key]) < 0:
                raise ValueError(f"{name}: invalid {key} {group[key]} (must be >= 0)")
        if "betas" in group:
            _betas(name, group["betas"])

    def _each(self, group):
        """(p, g, xp, state) for every parameter with a gradient, weight decay added to g (L2, torch's default)."""
        wd = float(group.get("weight_decay", 0.0))
        decoupled = group.get("decoupled_weight_decay", False)
        for p in group["params"]:
            if p.grad is None:
                continue
            g = self._grad_of(p, group.get("maximize", False))
            if wd != 0:
                if decoupled:
                    p._data *= 1 - float(group["lr"]) * wd
                else:
                    g = g + wd * p._data
            yield p, g, get_array_module(p._data), self.state.setdefault(p, {})


class Adagrad(_Adaptive):
    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
                 foreach=None, *, maximize=False, differentiable=False, fused=None):
        if lr_decay < 0 or initial_accumulator_value < 0:
            raise ValueError(f"Adagrad: invalid lr_decay {lr_decay} or initial_accumulator_value "
                             f"{initial_accumulator_value} (must be >= 0)")
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))
        for group in self.param_groups:     # torch creates the state at construction
            for p in group["params"]:
                state = self.state.setdefault(p, {})
                state["step"] = 0
                state["sum"] = self._zeros_like(p)
                state["sum"]._data += float(group["initial_accumulator_value"])

    def _update_group(self, group):
        lr, lr_decay, eps = float(group["lr"]), float(group["lr_decay"]), float(group["eps"])
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"], state["sum"] = 0, self._zeros_like(p)
            state["step"] += 1
            clr = lr / (1 + (state["step"] - 1) * lr_decay)
            s = state["sum"]._data
            s += g * g
            p._data -= clr * g / (xp.sqrt(s) + eps)


class Adamax(_Adaptive):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, foreach=None, *,
                 maximize=False, differentiable=False, capturable=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _update_group(self, group):
        lr, eps = float(group["lr"]), float(group["eps"])
        b1, b2 = (float(b) for b in group["betas"])
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"], state["exp_avg"], state["exp_inf"] = 0, self._zeros_like(p), self._zeros_like(p)
            state["step"] += 1
            m, u = state["exp_avg"]._data, state["exp_inf"]._data
            m *= b1
            m += (1 - b1) * g
            u[...] = xp.maximum(u * b2, xp.abs(g) + eps)
            p._data -= lr / (1 - b1 ** state["step"]) * m / u


class SparseAdam(_Adaptive):
    """torch.optim.SparseAdam: Adam whose moments and parameters change only where the gradient is (torch: the
    entries of a sparse gradient, an Embedding(sparse=True)'s looked-up rows). minidl's gradients are dense: the
    rows (the entries, for a 1-D parameter) with a nonzero gradient count as looked up; a row looked up whose
    gradient sums to exactly zero is skipped, where torch would still decay its moments."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))

    def _update_group(self, group):
        lr, eps = float(group["lr"]), float(group["eps"])
        b1, b2 = (float(b) for b in group["betas"])
        for p, g, xp, state in self._each(group):
            touched = (g != 0).any(axis=tuple(range(1, g.ndim))) if g.ndim > 1 else g != 0
            if not bool(touched.any()):
                continue
            if not state:
                state["step"], state["exp_avg"], state["exp_avg_sq"] = 0, self._zeros_like(p), self._zeros_like(p)
            state["step"] += 1
            m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
            gt = g[touched]
            m[touched] = m[touched] + (gt - m[touched]) * (1 - b1)
            v[touched] = v[touched] + (gt * gt - v[touched]) * (1 - b2)
            step_size = lr * math.sqrt(1 - b2 ** state["step"]) / (1 - b1 ** state["step"])
            p._data[touched] -= step_size * m[touched] / (xp.sqrt(v[touched]) + eps)


class NAdam(_Adaptive):
    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False, differentiable=False):
        if momentum_decay < 0:
            raise ValueError(f"NAdam: invalid momentum_decay {momentum_decay} (must be >= 0)")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _update_group(self, group):
        lr, eps, psi = float(group["lr"]), float(group["eps"]), float(group["momentum_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"], state["mu_product"] = 0, 1.0
                state["exp_avg"], state["exp_avg_sq"] = self._zeros_like(p), self._zeros_like(p)
            state["step"] += 1
            t = state["step"]
            mu = b1 * (1 - 0.5 * 0.96 ** (t * psi))
            mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * psi))
            state["mu_product"] *= mu
            mu_product = state["mu_product"]
            m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
            m += (1 - b1) * (g - m)
            v *= b2
            v += (1 - b2) * g * g
            denom = xp.sqrt(v / (1 - b2 ** t)) + eps
            p._data -= lr * (1 - mu) / (1 - mu_product) * g / denom
            p._data -= lr * mu_next / (1 - mu_product * mu_next) * m / denom


class RAdam(_Adaptive):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled_weight_decay=False,
                 *, foreach=None, maximize=False, capturable=False, differentiable=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    def _update_group(self, group):
        lr, eps = float(group["lr"]), float(group["eps"])
        b1, b2 = (float(b) for b in group["betas"])
        rho_inf = 2 / (1 - b2) - 1
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"], state["exp_avg"], state["exp_avg_sq"] = 0, self._zeros_like(p), self._zeros_like(p)
            state["step"] += 1
            t = state["step"]
            m, v = state["exp_avg"]._data, state["exp_avg_sq"]._data
            m += (1 - b1) * (g - m)
            v *= b2
            v += (1 - b2) * g * g
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            rho_t = rho_inf - 2 * t * (b2 ** t) / bc2
            if rho_t > 5.0:
                rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
                p._data -= (m / bc1) * lr * (math.sqrt(bc2) / (xp.sqrt(v) + eps)) * rect
            else:
                p._data -= (m / bc1) * lr


class Rprop(_Adaptive):
    """Resilient backpropagation (Riedmiller & Braun 1993), torch's: each weight has its own step size, grown by
    etaplus while the gradient keeps its sign, shrunk by etaminus when it flips (and that step is skipped);
    only the gradient's sign moves the weight. For full batches."""

    def __init__(self, params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
                 maximize=False, differentiable=False):
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Rprop: invalid eta values {etas} (need 0 < etaminus < 1 < etaplus)")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes), maximize=maximize))

    def _update_group(self, group):
        etaminus, etaplus = (float(e) for e in group["etas"])
        lo, hi = (float(s) for s in group["step_sizes"])
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"] = 0
                state["prev"] = self._zeros_like(p)
                state["step_size"] = self._zeros_like(p)
                state["step_size"]._data += float(group["lr"])
            state["step"] += 1
            prev, size = state["prev"]._data, state["step_size"]._data
            sign = xp.sign(g * prev)
            factor = xp.where(sign > 0, etaplus, xp.where(sign < 0, etaminus, 1.0)).astype(size.dtype)
            size[...] = xp.clip(size * factor, lo, hi)
            g = xp.where(sign < 0, 0, g)           # a flipped sign: no step now, and no flip counted next time
            p._data -= xp.sign(g) * size
            prev[...] = g


class ASGD(_Adaptive):
    """Averaged SGD (Polyak & Juditsky 1992), torch's: SGD with a decaying step eta, and `ax`, the running average
    of the weights from step t0 on (torch keeps it in the state; the parameters themselves are not averaged)."""

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, foreach=None, maximize=False,
                 differentiable=False, capturable=False):
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize))

    def _update_group(self, group):
        lr, lambd, alpha, t0 = (float(group[k]) for k in ("lr", "lambd", "alpha", "t0"))
        for p, g, xp, state in self._each(group):
            if not state:
                state["step"], state["eta"], state["mu"] = 0, lr, 1.0
                state["ax"] = self._zeros_like(p)
            state["step"] += 1
            eta, mu = state["eta"], state["mu"]
            p._data *= 1 - lambd * eta
            p._data -= eta * g
            ax = state["ax"]._data
            if mu != 1:
                ax += (p._data - ax) * mu
            else:
                ax[...] = p._data
            t = state["step"]
            state["eta"] = lr / ((1 + lambd * lr * t) ** alpha)
            state["mu"] = 1 / max(1, t - t0)


class Adafactor(_Adaptive):
    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *, foreach=None,
                 maximize=False):
        if not 0.0 >= beta2_decay:
            raise ValueError(f"Adafactor: beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0] or not 0.0 <= eps[1]:
            raise ValueError(f"Adafactor: epsilons should be >= 0 but are: {eps}")
        if not 1.0 <= d:
            raise ValueError(f"Adafactor: clipping threshold d should be >= 1 but is: {d}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d, weight_decay=weight_decay,
                                      maximize=maximize))

    def _check_hyperparameters(self, group):
        for key in ("lr", "weight_decay"):
            if float(group[key]) < 0:
                raise ValueError(f"Adafactor: invalid {key} {group[key]} (must be >= 0)")

    def _update_group(self, group):
        lr, decay, wd, d = float(group["lr"]), float(group["beta2_decay"]), float(group["weight_decay"]), group["d"]
        eps1, eps2 = group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            g = self._grad_of(p, group.get("maximize", False))
            xp = get_array_module(p._data)
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = 0
                if g.ndim > 1:
                    state["row_var"] = Tensor._make(xp.zeros(g.shape[:-1] + (1,), dtype=g.dtype))
                    state["col_var"] = Tensor._make(xp.zeros(g.shape[:-2] + (1,) + g.shape[-1:], dtype=g.dtype))
                else:
                    state["variance"] = self._zeros_like(p)
            state["step"] += 1
            t = float(state["step"])
            weight = t ** decay
            e1 = float(np.finfo(p._data.dtype).eps) if eps1 is None else float(eps1)
            rho = min(lr, 1 / math.sqrt(t))
            # (alpha and the clipping denominator stay arrays on the parameter's device: no host read per step)
            alpha = xp.maximum(xp.sqrt((p._data * p._data).sum()) / math.sqrt(p._data.size), eps2) * rho
            if wd != 0:
                p._data *= 1 - lr * wd
            squared = g * g
            if g.ndim > 1:
                row, col = state["row_var"]._data, state["col_var"]._data
                row += (squared.mean(axis=-1, keepdims=True) - row) * weight
                col += (squared.mean(axis=-2, keepdims=True) - col) * weight
                estimate = (row @ col) / xp.maximum(row.mean(axis=-2, keepdims=True), e1)
            else:
                v = state["variance"]._data
                v += (squared - v) * weight
                estimate = v.copy()
            update = g / xp.sqrt(xp.maximum(estimate, e1 * e1))
            denom = xp.maximum(xp.sqrt((update * update).sum()) / (math.sqrt(update.size) * d), 1.0)
            p._data -= ((alpha / denom) * update).astype(p._data.dtype, copy=False)
