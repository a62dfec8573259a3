"""Attention: scaled_dot_product_attention and multi_head_attention_forward (torch.nn.functional's).

    attention(Q, K, V) = softmax(Q K^T * scale + mask) V,      scale = 1 / sqrt(head dim) by default

Q is (..., L, E): L queries; K (..., S, E) and V (..., S, Ev): S keys and their values. Each query's
output is the average of the values, weighted by how well the query matches each key. A mask removes
pairs: a causal mask lets query i see keys j <= i only (a language model must not read ahead).

scaled_dot_product_attention runs as ONE operation, the attention primitive (minidl/primitives/attention.py):
on the GPU, for float16/bfloat16 (autocast gives those) or float32 (TF32 tensor cores: 3xTF32 products for
fp32 accuracy, one TF32 product under backends.cuda.matmul.allow_tf32) and head dims 32-128, the fused
FlashAttention-2 kernel kernels/attention.cu (tiles of Q resident, K/V streamed through shared memory, online softmax: the
(L, S) scores are never written to memory, and the backward pass recomputes them from the saved
log-sum-exp); elsewhere the primitive's reference, which forms the (L, S) score matrix S = QK^T and
P = softmax(S) in memory -- O(L * S) memory per head, which is why long sequences are memory-bound that
way. Tutorial 09 compares the two. What the fused operation does not take (a mask that requires grad,
query/key/value with different batch dimensions or dtypes) runs as `_composite`, the same algorithm in
minidl's own ops with its gradient from the tape.

Masks, as torch:
- `scaled_dot_product_attention(attn_mask=)`: a bool mask is True where a query MAY attend; a float
  mask is added to the scores. A query row with no key allowed gives zeros (torch's "safe softmax").
- `nn.MultiheadAttention(attn_mask=, key_padding_mask=)`: a bool mask is True where attending is NOT
  allowed (the opposite convention: torch's, kept for compatibility); key_padding_mask (N, S) True
  marks padding keys. A fully masked row gives NaN there, as torch's.
"""
from __future__ import annotations

import math

import numpy as np

from ... import backends
from ... import primitives as P
from ... import random
from ...amp import autocast_mode as _amp
from ...autograd.function import Function
from ...autograd.tensor import Tensor
from .activations import softmax
from .dense import linear
from .dropouts import dropout
from .vision import pad


def _is_bool(t) -> bool:
    return isinstance(t, Tensor) and t.dtype == np.bool_


def _causal_mask(L, S, device):
    from ...ops.creation import ones

    return ones((L, S), dtype=np.bool_, device=device).tril()


class ScaledDotProductAttention(Function):
    """softmax(Q K^T * scale + mask) V over 4-D (batch, heads, sequence, head dim) arrays, forward and
    backward from the attention primitive: the fused kernel on the GPU (float16/bfloat16/float32), the
    reference elsewhere. Saves Q, K, V, O and the per-query log-sum-exp; P is recomputed, never stored. `mask` is an
    array (no gradient), `seed` the dropout generator state this call claimed."""

    def forward(self, q, k, v, mask=None, causal=False, scale=None, dropout_p=0.0, seed=0, math="fp32"):
        self.q, self.k, self.v = q, k, v
        self.args = dict(mask=mask, causal=causal, scale=scale, dropout_p=dropout_p, seed=seed, math=math)
        self.out, self.lse = P.attention_forward(q, k, v, **self.args)
        return self.out

    def backward(self, dout):
        return P.attention_backward(self.q, self.k, self.v, self.out, dout, self.lse, **self.args)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value (torch.nn.functional.scaled_dot_product_attention).

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> (..., L, Ev). attn_mask: bool (True = may
    attend) or float (added), broadcastable to (..., L, S); is_causal: the lower-triangular mask (not
    together with attn_mask); dropout_p: dropout on the attention probabilities (applied whenever > 0,
    as torch's function; modules pass 0 in eval mode); enable_gqa: key/value may have fewer heads
    (dim -3) than query, each shared by a group of query heads.

    Runs as one fused operation (the attention primitive: on the GPU, kernels/attention.cu for
    float16/bfloat16/float32 and head dims 32-128) whenever query, key and value share their batch dimensions and
    dtype and the mask needs no gradient; otherwise as the composite of matmul, softmax and dropout
    below (the algorithm the reference computes, with its gradient from the tape)."""
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.ndim < 2:
            raise ValueError(f"{op}: {name} must be a tensor of shape (..., seq, dim), got "
                             f"{getattr(t, 'shape', type(t).__name__)}")
    L, E = query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    if key.shape[-1] != E:
        raise RuntimeError(f"{op}: query's last dimension {E} and key's {key.shape[-1]} must match "
                           f"(query {tuple(query.shape)}, key {tuple(key.shape)})")
    if value.shape[-2] != S:
        raise RuntimeError(f"{op}: key has {S} positions and value {value.shape[-2]}; they must match "
                           f"(key {tuple(key.shape)}, value {tuple(value.shape)})")
    if is_causal and attn_mask is not None:
        raise RuntimeError(f"{op}: pass either attn_mask or is_causal=True, not both (is_causal builds the mask)")
    gqa = enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]
    if gqa:
        hq, hk = query.shape[-3], key.shape[-3]
        if hq % hk or value.shape[-3] != hk:
            raise RuntimeError(f"{op}: enable_gqa needs query's heads ({hq}) to be a multiple of key's and value's "
                               f"({hk}, {value.shape[-3]})")
    if _amp.regions:
        query, key, value = _amp.cast_inputs(op, query, key, value)
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    sdp = backends.cuda.sdp   # the backends allowed (torch.nn.attention.sdpa_kernel, backends.cuda.sdp_kernel)
    if (sdp["flash"] or sdp["mem_efficient"] or sdp["cudnn"]) and _fusable(query, key, value, attn_mask):
        return _fused(query, key, value, attn_mask, dropout_p, bool(is_causal), scale)
    if not sdp["math"]:
        allowed = [name for name, on in sdp.items() if on]
        why = ("do not take these inputs: the fused one needs query, key and value of one dtype with the same batch "
               "dimensions and a mask that needs no gradient") if allowed else "are none"
        raise RuntimeError(
            f"{op}: no available kernel: the backends allowed ({', '.join(allowed) or 'none'}) {why} (query "
            f"{tuple(query.shape)} {query.dtype}, key {tuple(key.shape)}, value {tuple(value.shape)}). Allow the math "
            "backend (SDPBackend.MATH in minidl.nn.attention.sdpa_kernel).")
    if gqa:
        key, value = _repeat_heads(key, hq // hk), _repeat_heads(value, hq // hk)
    return _composite(query, key, value, attn_mask, dropout_p, is_causal, scale)


def _fusable(query, key, value, attn_mask) -> bool:
    """The fused operation takes it: one dtype, the same batch dimensions (heads may differ, for GQA), and a
    mask that is a constant (a mask that requires grad needs the composite's tape)."""
    if not (query.ndim == key.ndim == value.ndim) or not (query.dtype == key.dtype == value.dtype):
        return False
    if query.ndim >= 3 and not (query.shape[:-3] == key.shape[:-3] == value.shape[:-3]):
        return False
    if attn_mask is not None and (not isinstance(attn_mask, Tensor) or attn_mask.requires_grad
                                  or attn_mask.ndim > max(query.ndim, 4)):
        return False
    return True


def _fused(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """(..., L, E) -> (B, H, L, E) views, the fused Function, and back."""
    def four_d(t):
        if t.ndim == 4:
            return t
        if t.ndim < 4:
            return t.reshape(*((1,) * (4 - t.ndim)), *t.shape)
        return t.reshape(-1, *t.shape[-3:])

    lead = tuple(query.shape[:-2])
    q4, k4, v4 = four_d(query), four_d(key), four_d(value)
    mask = None
    if attn_mask is not None:
        m = attn_mask.detach()
        if m.dtype != np.bool_ and m.dtype != query.dtype:
            m = m.type(query.dtype)
        if query.ndim > 4:   # broadcast to the whole batch first, so the leading dims fold into one
            m = m.expand(*lead, query.shape[-2], key.shape[-2])
        mask = four_d(m)._data
    seed = 0
    if dropout_p > 0.0:
        B, H, L, _ = q4.shape
        seed = P.philox_advance(random.philox_state_of(query._data), B * H * L * k4.shape[2])
    # float32 on the GPU: fp32 accuracy (3xTF32 products) unless cuda.matmul.allow_tf32 asks for TF32
    math_mode = backends.math_for_matmul(q4.dtype) if q4.is_cuda and q4.dtype == np.float32 else "fp32"
    out = ScaledDotProductAttention.apply(q4, k4, v4, mask=mask, causal=is_causal, scale=scale,
                                          dropout_p=float(dropout_p), seed=seed, math=math_mode)
    if query.ndim == 4:   # already (B, H, L, Ev): no reshape node on the tape
        return out
    return out.reshape(*lead, out.shape[-2], out.shape[-1])


def _composite(query, key, value, attn_mask, dropout_p, is_causal, scale):
    """The reference algorithm in minidl's own ops (the scores and probabilities formed in memory)."""
    L, S = query.shape[-2], key.shape[-2]
    scores = (query * scale) @ key.transpose(-2, -1)       # (..., L, S)
    if is_causal:
        attn_mask = _causal_mask(L, S, query.device)
    if attn_mask is not None:
        if _is_bool(attn_mask):
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.type(scores.dtype)
    dead = None
    if attn_mask is not None:   # a row with every key masked gives zeros, not NaN (torch's "safe softmax"):
        dead = (scores == float("-inf")).all(dim=-1, keepdim=True)   # such rows get finite scores first,
        scores = scores.masked_fill(dead, 0.0)                       # so no -inf - (-inf) is ever computed
    probs = softmax(scores, dim=-1)
    if dead is not None:   # no host read of `dead`: the step stays capturable in a CUDA graph
        probs = probs.masked_fill(dead, 0.0)
    if dropout_p > 0.0:
        probs = dropout(probs, dropout_p, training=True)
    return probs @ value


def _repeat_heads(t, times):
    """(..., H, S, E) -> (..., H * times, S, E), each head repeated `times` times in place (repeat_interleave)."""
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], times, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * times, *shape[-2:])


def _float_mask(op, mask, name, dtype):
    """torch's _canonical_mask: a bool mask (True = not allowed) becomes 0 / -inf in the scores' dtype."""
    if mask is None:
        return None
    if _is_bool(mask):
        from ...ops.creation import zeros

        return zeros(tuple(mask.shape), dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not np.issubdtype(mask.dtype, np.floating):
        raise TypeError(f"{op}: only bool and floating types of {name} are supported, got {mask.dtype}")
    return mask.type(dtype)


def multi_head_attention_forward(query, key, value, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
                                 add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                                 v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                                 is_causal=False):
    """torch.nn.functional.multi_head_attention_forward, for (L, N, E) inputs (MultiheadAttention makes
    batch_first and unbatched inputs into that). Returns (output (L, N, E), weights or None)."""
    op = "multi_head_attention_forward"
    if static_k is not None or static_v is not None:
        raise NotImplementedError(f"{op}: static_k / static_v are not supported in minidl")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                           "method `generate_square_subsequent_mask` to create this mask.")
    L, N, E = query.shape
    S = key.shape[0]
    if E % num_heads:
        raise ValueError(f"{op}: embed_dim {E} must be divisible by num_heads {num_heads}")
    hd = E // num_heads
    if key.shape[:2] != value.shape[:2]:
        raise RuntimeError(f"{op}: key {tuple(key.shape)} and value {tuple(value.shape)} must have the same "
                           "sequence length and batch size")
    if not use_separate_proj_weight:
        wq, wk, wv = in_proj_weight.chunk(3, dim=0)
    else:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    bq = bk = bv = None
    if in_proj_bias is not None:
        bq, bk, bv = in_proj_bias.chunk(3, dim=0)
    q, k, v = linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)

    attn_mask = _float_mask(op, attn_mask, "attn_mask", q.dtype)
    key_padding_mask = _float_mask(op, key_padding_mask, "key_padding_mask", q.dtype)
    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (L, S):
                raise RuntimeError(f"{op}: the shape of the 2D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"{(L, S)}.")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (N * num_heads, L, S):
                raise RuntimeError(f"{op}: the shape of the 3D attn_mask is {tuple(attn_mask.shape)}, but should be "
                                   f"{(N * num_heads, L, S)}.")
        else:
            raise RuntimeError(f"{op}: attn_mask's dimension {attn_mask.ndim} is not supported (2 or 3)")
    if bias_k is not None and bias_v is not None:   # one more key and value, learned
        from ...ops import cat

        k = cat([k, bias_k.expand(1, N, E)])
        v = cat([v, bias_v.expand(1, N, E)])
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))   # one more key position, allowed (torch: the same pad)
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))

    # (L, N, E) -> (N * H, L, hd): heads become batch entries
    q = q.reshape(L, N * num_heads, hd).transpose(0, 1)
    k = k.reshape(k.shape[0], N * num_heads, hd).transpose(0, 1)
    v = v.reshape(v.shape[0], N * num_heads, hd).transpose(0, 1)
    if add_zero_attn:
        from ...ops.creation import zeros
        from ...ops import cat

        k = cat([k, zeros((N * num_heads, 1, hd), dtype=k.dtype, device=k.device)], dim=1)
        v = cat([v, zeros((N * num_heads, 1, hd), dtype=v.dtype, device=v.device)], dim=1)
        if attn_mask is not None:
            attn_mask = pad(attn_mask, (0, 1))   # one more key position, allowed (torch: the same pad)
        if key_padding_mask is not None:
            key_padding_mask = pad(key_padding_mask, (0, 1))
    S = k.shape[1]
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (N, S):
            raise RuntimeError(f"{op}: expecting key_padding_mask shape of {(N, S)}, but got "
                               f"{tuple(key_padding_mask.shape)}")
        kpm = key_padding_mask.reshape(N, 1, 1, S).expand(N, num_heads, 1, S).reshape(N * num_heads, 1, S)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    p = dropout_p if training else 0.0
    if need_weights:
        scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = softmax(scores, dim=-1)
        if p > 0.0:
            weights = dropout(weights, p, training=True)
        out = weights @ v
    else:
        if attn_mask is not None and attn_mask.shape[0] == 1 and attn_mask.ndim == 3:
            attn_mask = attn_mask.squeeze(0)
        out = scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
        weights = None
    out = out.transpose(0, 1).reshape(L * N, E)
    out = linear(out, out_proj_weight, out_proj_bias).reshape(L, N, E)
    if weights is None:
        return out, None
    weights = weights.reshape(N, num_heads, L, S)
    return out, (weights.mean(dim=1) if average_attn_weights else weights)

