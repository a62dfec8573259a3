"""torch.optim.Muon (Keller Jordan, 2024; torch 2.9's form): momentum SGD whose update for a matrix is orthogonalised
by a few Newton-Schulz iterations, so that every direction of the update moves at about the same rate.

    buf = lerp(buf, g, 1 - momentum);  u = lerp(g, buf, momentum) if nesterov else buf
    X = bf16(u) (transposed when tall) / max(|X|_F, eps)
    k times:  A = X X^T;  B = b A + c A A;  X = a X + B X        (a, b, c) = (3.4445, -4.7750, 2.0315)
    p *= 1 - lr weight_decay;  p -= lr sqrt(max(1, rows / cols)) X    ("original"; "match_rms_adamw": 0.2 sqrt(max))

The iteration runs in bfloat16, as torch's: each product is computed in float32 and rounded to bfloat16 once (what
the bf16 GEMM does), so the updates equal torch's up to a product whose float32 sum, added in another order,
rounds to the neighbouring bfloat16. Only 2-D parameters (torch's rule); use another optimizer for
the others, as Muon's users do (AdamW for embeddings, biases and norms)."""
from __future__ import annotations

import math

import numpy as np

from .. import _dtypes
from .._device import get_array_module
from .adaptive import _Adaptive

_NS = (3.4445, -4.7750, 2.0315)


def _bf16(xp, a):
    """a rounded to bfloat16, kept in float32 (one rounding, as a bf16 kernel's output)."""
    return a.astype(_dtypes.bfloat16).astype(np.float32)


def _orthogonalized(xp, u, coefficients, steps, eps):
    a, b, c = coefficients
    x = _bf16(xp, u.astype(np.float32))
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    norm = _bf16(xp, xp.maximum(xp.sqrt((x * x).sum()), np.float32(eps)))   # (on the device: no host read)
    x = _bf16(xp, x / norm)
    for _ in range(steps):
        gram = _bf16(xp, x @ x.T)
        update = _bf16(xp, c * (gram @ gram) + b * gram)
        x = _bf16(xp, update @ x + a * x)
    return x.T if tall else x


class Muon(_Adaptive):
    def __init__(self, params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True, ns_coefficients=_NS,
                 eps=1e-7, ns_steps=5, adjust_lr_fn=None):
        if not 0.0 <= float(lr):
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        if ns_steps >= 100:
            raise ValueError("Number of steps must be less than 100 for computational efficiency")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                                      ns_coefficients=tuple(ns_coefficients), eps=eps, ns_steps=ns_steps,
                                      adjust_lr_fn=adjust_lr_fn))
        for group in self.param_groups:
            for p in group["params"]:
                if p.ndim != 2:
                    raise ValueError(f"Muon only supports 2D parameters whereas we found a parameter with size: "
                                     f"{tuple(p.shape)}")

    def _check_hyperparameters(self, group):
        for key in ("lr", "weight_decay"):
            if float(group[key]) < 0:
                raise ValueError(f"Muon: invalid {key} {group[key]} (must be >= 0)")

    def _update_group(self, group):
        lr, wd, mu = float(group["lr"]), float(group["weight_decay"]), float(group["momentum"])
        for p in group["params"]:
            if p.grad is None:
                continue
            g = p.grad._data
            xp = get_array_module(p._data)
            state = self.state.setdefault(p, {})
            if "momentum_buffer" not in state:
                state["momentum_buffer"] = self._zeros_like(p)
            buf = state["momentum_buffer"]._data
            buf += (g - buf) * (1 - mu)
            u = g + (buf - g) * mu if group["nesterov"] else buf
            update = _orthogonalized(xp, u, group["ns_coefficients"], int(group["ns_steps"]), float(group["eps"]))
            rows, cols = p.shape[:2]
            fn = group["adjust_lr_fn"]
            ratio = (math.sqrt(max(1, rows / cols)) if fn in (None, "original")
                     else 0.2 * math.sqrt(max(rows, cols)) if fn == "match_rms_adamw" else 1.0)
            p._data *= 1 - lr * wd
            p._data -= (lr * ratio * update).astype(p._data.dtype)
