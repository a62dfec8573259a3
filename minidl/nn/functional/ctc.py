"""F.ctc_loss: Connectionist Temporal Classification (Graves et al. 2006), the loss of a sequence of per-step class
scores against a shorter label sequence, summed over every alignment, as torch's.

A target l of length S is extended with blanks, l' = (blank, l1, blank, l2, ..., lS, blank), 2S + 1 states. With
y_t(k) = exp(log_probs[t, k]) the forward variables are

    alpha_0(0) = y_0(blank), alpha_0(1) = y_0(l1)
    alpha_t(s) = (alpha_{t-1}(s) + alpha_{t-1}(s-1) + [l'_s != blank and l'_s != l'_{s-2}] alpha_{t-1}(s-2)) y_t(l'_s)

and the loss is -log(alpha_{T-1}(2S) + alpha_{T-1}(2S - 1)); the backward variables beta run the same recursion
from the end. Everything in log space (log-sum-exp), every sample of the batch at once, one step of t at a time, on
NumPy or CuPy. The gradient is torch's: with gamma_t(k) = sum over the states s with l'_s = k of
alpha_t(s) beta_t(s) / (y_t(k) P), the gradient for log_probs[t, k] is y_t(k) - gamma_t(k), the form that is exact
after log_softmax (whose backward then passes it through unchanged), which is how log_probs are made.
"""
from __future__ import annotations

import numpy as np

from ..._device import get_array_module
from ...autograd.function import Function

NEG_INF = -np.inf


def _logsumexp(xp, *terms):
    """log(sum(exp(terms))), elementwise: logaddexp folded over the terms (-inf where all are -inf)."""
    out = terms[0]
    for t in terms[1:]:
        out = xp.logaddexp(out, t)
    return out


class CTCLoss(Function):
    """Per-sample negative log-likelihoods (N,) of padded targets (N, S_max)."""

    saves_inputs = False

    def forward(self, log_probs, targets=None, input_lengths=None, target_lengths=None, blank=0, zero_infinity=False):
        xp = get_array_module(log_probs)
        lp = log_probs.astype(np.float64)
        T, N, C = lp.shape
        S = targets.shape[1] if targets.ndim == 2 else 0
        L = 2 * S + 1
        ext = xp.full((N, L), blank, dtype=np.int64)
        if S:
            ext[:, 1::2] = targets
        s_idx = xp.arange(L)
        valid = s_idx[None, :] < (2 * target_lengths[:, None] + 1)            # states of each sample's target
        skip = xp.zeros((N, L), dtype=bool)                                    # the s-2 transition allowed
        if L > 2:
            skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
        batch = xp.arange(N)[:, None]
        emit = lp[:, batch, ext]                                               # (T, N, L): log y_t(l'_s)
        alpha = xp.full((T, N, L), NEG_INF)
        alpha[0, :, 0] = emit[0, :, 0]
        if L > 1:
            alpha[0, :, 1] = xp.where(target_lengths > 0, emit[0, :, 1], NEG_INF)
        alpha[0] = xp.where(valid, alpha[0], NEG_INF)
        for t in range(1, T):
            prev = alpha[t - 1]
            one = xp.concatenate([xp.full((N, 1), NEG_INF), prev[:, :-1]], axis=1)
            two = xp.concatenate([xp.full((N, 2), NEG_INF), prev[:, :-2]], axis=1)[:, :L]
            two = xp.where(skip, two, NEG_INF)
            step = _logsumexp(xp, prev, one, two) + emit[t]
            alpha[t] = xp.where(valid, step, NEG_INF)   # (past a sample's input length: never read)
        last = input_lengths - 1
        end = 2 * target_lengths
        a_last = alpha[last, xp.arange(N)]                                    # (N, L) at each sample's last step
        end_prev = xp.maximum(end - 1, 0)
        ll = _logsumexp(xp, a_last[xp.arange(N), end],
                        xp.where(target_lengths > 0, a_last[xp.arange(N), end_prev], NEG_INF))
        nll = -ll
        self.saved = (lp, ext, valid, skip, emit, alpha, nll, input_lengths, target_lengths, blank, zero_infinity)
        self.in_dtype = log_probs.dtype
        if zero_infinity:
            nll = xp.where(xp.isinf(nll), 0.0, nll)
        return nll.astype(log_probs.dtype)

    def backward(self, g):
        lp, ext, valid, skip, emit, alpha, nll, input_lengths, target_lengths, blank, zero_infinity = self.saved
        xp = get_array_module(lp)
        T, N, C = lp.shape
        L = ext.shape[1]
        beta = xp.full((T, N, L), NEG_INF)
        last = input_lengths - 1
        end = 2 * target_lengths
        n = xp.arange(N)
        beta[last, n, end] = emit[last, n, end]
        has_label = target_lengths > 0
        beta[last[has_label], n[has_label], end[has_label] - 1] = emit[last[has_label], n[has_label],
                                                                        end[has_label] - 1]
        # the s+2 transition into s is allowed where skip holds at s+2
        skip_from = xp.zeros((N, L), dtype=bool)
        if L > 2:
            skip_from[:, :-2] = skip[:, 2:]
        for t in range(T - 2, -1, -1):
            nxt = beta[t + 1]
            one = xp.concatenate([nxt[:, 1:], xp.full((N, 1), NEG_INF)], axis=1)
            two = xp.concatenate([nxt[:, 2:], xp.full((N, 2), NEG_INF)], axis=1)[:, :L]
            two = xp.where(skip_from, two, NEG_INF)
            step = _logsumexp(xp, nxt, one, two) + emit[t]
            inside = (t < last)[:, None] & valid
            beta[t] = xp.where(inside, step, beta[t])
        # log gamma_t(k) * P * y_t(k) summed per class: log(alpha beta) - log y over the states of class k
        ab = alpha + beta                                                      # (T, N, L), includes y twice
        lcab = xp.full((T, N, C), NEG_INF)
        for s in range(L):   # (states of one class meet: log-add them)
            cls = ext[:, s]
            cur = lcab[:, n, cls]
            lcab[:, n, cls] = _logsumexp(xp, cur, ab[:, :, s])
        with np.errstate(over="ignore", invalid="ignore"):
            grad = xp.exp(lp) - xp.exp(lcab + nll[None, :, None] - lp)
        steps = xp.arange(T)[:, None] < input_lengths[None, :]
        grad = xp.where(steps[:, :, None], grad, 0.0)
        if zero_infinity:
            grad = xp.where(xp.isinf(nll)[None, :, None], 0.0, grad)
        grad = xp.nan_to_num(grad, nan=0.0) * g.astype(np.float64)[None, :, None]
        return grad.astype(self.in_dtype)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """log_probs (T, N, C) (or (T, C) for one sample), targets (N, S) padded or 1-D concatenated, input_lengths and
    target_lengths (N,) (tensors or sequences of ints). reduction 'mean' divides each loss by its target length
    before the batch mean, as torch's."""
    from ...autograd.tensor import Tensor
    from ...ops.creation import tensor

    op = "ctc_loss"
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs = log_probs.unsqueeze(1)
        targets = targets.unsqueeze(0) if isinstance(targets, Tensor) and targets.ndim == 1 else targets
    if log_probs.ndim != 3:
        raise ValueError(f"{op}: log_probs must be (T, N, C) or (T, C), got shape {tuple(log_probs.shape)}")
    T, N, C = log_probs.shape
    xp = get_array_module(log_probs._data)

    def ints(v, name):
        a = v._data if isinstance(v, Tensor) else np.asarray(v)
        a = np.asarray(a.get() if hasattr(a, "get") else a).astype(np.int64).reshape(-1)
        if a.shape != (N,):
            raise ValueError(f"{op}: {name} must have one entry per sample ({N}), got {a.shape[0]}")
        return a

    il, tl = ints(input_lengths, "input_lengths"), ints(target_lengths, "target_lengths")
    if (il < 1).any() or (il > T).any():
        raise ValueError(f"{op}: input_lengths must be in [1, {T}], got {il.tolist()}")
    tg = targets._data if isinstance(targets, Tensor) else np.asarray(targets)
    tg = np.asarray(tg.get() if hasattr(tg, "get") else tg).astype(np.int64)
    if tg.ndim == 1:   # concatenated: cut it into padded rows
        if tg.shape[0] != tl.sum():
            raise ValueError(f"{op}: 1-D targets hold {tg.shape[0]} labels, target_lengths sum to {tl.sum()}")
        padded = np.full((N, max(int(tl.max()), 0) if N else 0), blank, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(tl)])
        for i in range(N):
            padded[i, :tl[i]] = tg[offsets[i]:offsets[i + 1]]
        tg = padded
    if tg.ndim != 2 or tg.shape[0] != N or (tl > tg.shape[1]).any():
        raise ValueError(f"{op}: targets must be (N, S) with S >= every target length, got shape {tg.shape}")
    tg = tg[:, :int(tl.max()) if N else 0]
    losses = CTCLoss.apply(log_probs, targets=xp.asarray(tg), input_lengths=xp.asarray(il),
                           target_lengths=xp.asarray(tl), blank=blank, zero_infinity=zero_infinity)
    if reduction == "none":
        return losses.squeeze(0) if unbatched else losses
    if reduction == "sum":
        return losses.sum()
    return (losses / tensor(np.maximum(tl, 1).astype(np.float64), dtype=losses.dtype, device=losses.device)).mean()
