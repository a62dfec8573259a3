"""NumPy reference of the multi-tensor primitives (kernels/multi_tensor.cu): the same updates, one
tensor after the other. The optimizers' per-parameter code in minidl/optim is the same algorithm
written over Tensors; these take plain arrays, as the CUDA launchers do."""
from __future__ import annotations

import numpy as np


def _skipped(found_inf) -> bool:
    return found_inf is not None and float(np.asarray(found_inf)) != 0.0


def _grad(g, grad_scale, maximize):
    if grad_scale is not None:
        g = g / np.asarray(grad_scale, dtype=g.dtype)
    return -g if maximize else g


def _floats(hparams):
    return [float(v) for v in np.asarray(hparams, dtype=np.float64)]


def multi_tensor_sgd(params, grads, momentum_buffers, first_step, hparams, *, nesterov, maximize, grad_scale=None,
                     found_inf=None):
    if _skipped(found_inf):
        return
    lr, momentum, dampening, weight_decay = _floats(hparams)
    for t, (p, g) in enumerate(zip(params, grads)):
        g = _grad(g, grad_scale, maximize)
        if weight_decay != 0:
            g = g + p.dtype.type(weight_decay) * p
        if momentum_buffers is not None and momentum_buffers[t] is not None:
            buf = momentum_buffers[t]
            if first_step[t]:
                buf[...] = g
            else:
                buf *= p.dtype.type(momentum)
                buf += p.dtype.type(1 - dampening) * g
            g = g + p.dtype.type(momentum) * buf if nesterov else buf
        p -= p.dtype.type(lr) * g


def multi_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_slots, steps, hparams, *, decoupled,
                      maximize, grad_scale=None, found_inf=None):
    if _skipped(found_inf):
        return
    lr, beta1, beta2, eps, weight_decay = _floats(hparams)
    for t, (p, g) in enumerate(zip(params, grads)):
        steps[step_slots[t]] += 1
        step = float(steps[step_slots[t]])
        f = p.dtype.type
        g = _grad(g, grad_scale, maximize)
        if weight_decay != 0:
            if decoupled:
                p *= f(1 - lr * weight_decay)
            else:
                g = g + f(weight_decay) * p
        m, v = exp_avgs[t], exp_avg_sqs[t]
        weight = 1 - beta1
        if weight < 0.5:
            m += f(weight) * (g - m)
        else:
            m[...] = g - (g - m) * f(1 - weight)
        v *= f(beta2)
        v += f(1 - beta2) * (g * g)
        if max_exp_avg_sqs is not None and max_exp_avg_sqs[t] is not None:
            np.maximum(max_exp_avg_sqs[t], v, out=max_exp_avg_sqs[t])
            v = max_exp_avg_sqs[t]
        step_size = lr / (1 - beta1**step)
        denom = np.sqrt(v) / f((1 - beta2**step) ** 0.5) + f(eps)
        p -= f(step_size) * (m / denom)


def multi_tensor_rmsprop(params, grads, square_avgs, momentum_buffers, grad_avgs, step_slots, steps, hparams, *,
                         maximize, grad_scale=None, found_inf=None):
    if _skipped(found_inf):
        return
    lr, alpha, eps, weight_decay, momentum = _floats(hparams)
    for t, (p, g) in enumerate(zip(params, grads)):
        steps[step_slots[t]] += 1
        f = p.dtype.type
        g = _grad(g, grad_scale, maximize)
        if weight_decay != 0:
            g = g + f(weight_decay) * p
        sq = square_avgs[t]
        sq *= f(alpha)
        sq += f(1 - alpha) * (g * g)
        if grad_avgs is not None and grad_avgs[t] is not None:
            ga = grad_avgs[t]
            weight = 1 - alpha
            if weight < 0.5:
                ga += f(weight) * (g - ga)
            else:
                ga[...] = g - (g - ga) * f(1 - weight)
            avg = np.sqrt(sq - ga * ga)
        else:
            avg = np.sqrt(sq)
        avg += f(eps)
        if momentum_buffers is not None and momentum_buffers[t] is not None:
            buf = momentum_buffers[t]
            buf *= f(momentum)
            buf += g / avg
            p -= f(lr) * buf
        else:
            p -= f(lr) * (g / avg)


def multi_tensor_zero(tensors):
    for a in tensors:
        a[...] = 0


def multi_tensor_l2norm(tensors, max_norm=None):
    dtype = np.result_type(*[a.dtype for a in tensors]).type if tensors else np.float32
    total = np.sqrt(sum((np.sum(a.astype(dtype) ** 2) for a in tensors), dtype(0)))
    total = np.asarray(total, dtype=dtype)
    coef = None
    if max_norm is not None:
        coef = np.minimum(np.asarray(1.0, dtype=dtype), dtype(max_norm) / (total + dtype(1e-6)))
    return total, coef


def multi_tensor_scale(tensors, coef):
    for a in tensors:
        a *= np.asarray(coef).astype(a.dtype)


def multi_tensor_unscale(tensors, scale, found_inf):
    inv = None if scale is None else (1.0 / np.asarray(scale, dtype=np.float64)).astype(np.float32)
    for a in tensors:
        if not np.isfinite(a).all():
            found_inf[...] = 1.0
        if inv is not None:
            a *= inv.astype(a.dtype)


def multi_tensor_cast(tensors, dtype):
    """Each array in dtype (float16 / bfloat16), rounded to nearest even: cast() of each."""
    with np.errstate(over="ignore", invalid="ignore"):
        return [a.astype(dtype) for a in tensors]
