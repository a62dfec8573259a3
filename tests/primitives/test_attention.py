"""The attention primitive (attention_forward / attention_backward) against torch in float64: the output,
the log-sum-exp and the three input gradients, with causal masks (also L != S), bool and float masks that
broadcast, a query that sees no key, grouped-query attention and a custom scale; dropout draws dropout's
own Philox mask over the (B, H, L, S) probabilities; half inputs compute in float32; bad input is refused
naming the op and the shapes. (The CUDA kernel is checked against this reference in
tests/gpu/test_attention_kernel_gpu.py.)"""
import numpy as np
import pytest
import torch

from minidl import primitives as P
from minidl._dtypes import bfloat16
from tests.conftest import rel_err

CASES = {
    "plain": dict(L=5, S=7),
    "causal": dict(L=6, S=6, causal=True),
    "causal_l_ne_s": dict(L=4, S=9, causal=True),
    "bool_mask": dict(L=5, S=6, mask="bool"),
    "float_mask": dict(L=5, S=6, mask="float"),
    "gqa": dict(L=5, S=5, HK=1, causal=True),
    "scale": dict(L=3, S=8, scale=0.3),
}


def _inputs(L, S, HK=2, mask=None, B=2, H=2, D=4, Dv=3, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((B, H, L, D)), rng.standard_normal((B, HK, S, D)), rng.standard_normal((B, HK, S, Dv))
    m = None
    if mask == "bool":
        m = rng.random((L, S)) > 0.4
        m[1] = False          # query 1 sees no key
    elif mask == "float":
        m = rng.standard_normal((B, 1, L, S))
    return q, k, v, m, rng.standard_normal((B, H, L, Dv))


@pytest.mark.parametrize("case", CASES)
def test_matches_torch(case):
    kw = dict(CASES[case])
    causal, scale = kw.pop("causal", False), kw.pop("scale", None)
    q, k, v, m, do = _inputs(**kw)
    out, lse = P.attention_forward(q, k, v, m, causal=causal, scale=scale)
    dq, dk, dv = P.attention_backward(q, k, v, out, do, lse, m, causal=causal, scale=scale)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    gqa = k.shape[1] != q.shape[1]
    to = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=None if m is None else torch.tensor(m), is_causal=causal, scale=scale, enable_gqa=gqa)
    to.backward(torch.tensor(do))
    for a, b in ((out, to), (dq, tq.grad), (dk, tk.grad), (dv, tv.grad)):
        assert rel_err(a, b.detach().numpy()) <= 1e-12
    # LSE = log(sum_j exp(scores)) per query; +inf where a query sees no key (then O = 0)
    scores = np.einsum("bhld,bhsd->bhls", q, np.repeat(k, q.shape[1] // k.shape[1], axis=1))
    scores = scores * (scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    if m is not None:
        scores = np.where(m, scores, -np.inf) if m.dtype == bool else scores + m
    if causal:
        scores = np.where(np.tri(*scores.shape[-2:], dtype=bool), scores, -np.inf)
    with np.errstate(divide="ignore"):
        want = np.log(np.exp(scores).sum(-1))
    dead = np.isneginf(want)
    assert np.allclose(lse[~dead], want[~dead], rtol=1e-12) and np.isposinf(lse[dead]).all()
    if case == "bool_mask":
        assert dead[:, :, 1].all() and not out[:, :, 1].any() and not dq[:, :, 1].any()


def test_dropout_is_dropouts_mask_over_the_probabilities():
    q, k, v, _, do = _inputs(L=6, S=10, HK=2)
    p, seed, offset = 0.3, 42, 8
    out, lse = P.attention_forward(q, k, v, dropout_p=p, seed=seed, offset=offset)
    probs = np.exp(np.einsum("bhld,bhsd->bhls", q, k) / 2.0 - lse[..., None])
    keep = P.dropout_mask(probs.shape, p, seed, offset)
    assert keep.mean() < 0.9 and rel_err(out, (probs * keep / (1 - p)) @ v) <= 1e-12
    # a generator state (seed, base offset) means the same as the integers
    out2, _ = P.attention_forward(q, k, v, dropout_p=p, seed=np.array([seed, 4], dtype=np.uint64), offset=4)
    assert np.array_equal(out, out2)
    # the backward regenerates the mask: the gradient of sum(out * do) against central differences
    dq, _, _ = P.attention_backward(q, k, v, out, do, lse, dropout_p=p, seed=seed, offset=offset)
    eps, idx = 1e-6, (1, 0, 2, 3)
    qp, qm = q.copy(), q.copy()
    qp[idx] += eps
    qm[idx] -= eps
    f = lambda qq: (P.attention_forward(qq, k, v, dropout_p=p, seed=seed, offset=offset)[0] * do).sum()  # noqa: E731
    assert abs((f(qp) - f(qm)) / (2 * eps) - dq[idx]) <= 1e-6


@pytest.mark.parametrize("dtype", [np.float16, bfloat16])
def test_half_inputs_compute_in_float32(dtype):
    q, k, v, _, do = _inputs(L=5, S=5, HK=2, Dv=4)
    h = [a.astype(dtype) for a in (q, k, v, do)]
    out, lse = P.attention_forward(*h[:3], causal=True)
    assert out.dtype == dtype and lse.dtype == np.float32
    out32, _ = P.attention_forward(*(a.astype(np.float32) for a in h[:3]), causal=True)
    assert np.array_equal(out, out32.astype(dtype))
    grads = P.attention_backward(*h[:3], out, h[3], lse, causal=True)
    assert [g.dtype for g in grads] == [dtype] * 3


def test_kernel_reason_says_why_on_the_cpu():
    q, k, v, _, _ = _inputs(L=2, S=2)
    assert P.attention_kernel_reason(q, k, v) == "the arrays are on the CPU"


@pytest.mark.parametrize("bad, match", [
    (dict(q=np.zeros((2, 3, 4))), r"q must be 4-D .*\(2, 3, 4\)"),
    (dict(k=np.zeros((2, 2, 7, 5))), r"q's head dim 4 and k's 5 must match"),
    (dict(v=np.zeros((2, 2, 6, 3))), r"same heads and sequence length"),
    (dict(k=np.zeros((2, 3, 7, 4)), v=np.zeros((2, 3, 7, 3))), r"q's heads \(2\) must be a multiple of k's"),
    (dict(mask=np.zeros((3, 7))), r"mask \(3, 7\) does not broadcast to .*\(2, 2, 5, 7\)"),
    (dict(dropout_p=1.0), r"dropout_p must be in \[0, 1\)"),
])
def test_bad_input_is_refused_with_the_shapes(bad, match):
    q, k, v, _, _ = _inputs(L=5, S=7)
    args = dict(q=q, k=k, v=v, mask=None, dropout_p=0.0)
    args.update(bad)
    with pytest.raises(ValueError, match="attention_forward: .*" + match):
        P.attention_forward(args["q"], args["k"], args["v"], args["mask"], dropout_p=args["dropout_p"])


def test_kernel_reason_names_the_grid_limit():
    """batch x heads beyond a grid's y dimension runs the reference instead, and says why (checked on
    stand-in arrays: the reason is read from shapes and dtypes only)."""
    class Fake:
        def __init__(self, shape):
            self.shape, self.dtype = shape, bfloat16

    import minidl.primitives.attention as A

    real = A.is_cuda_array
    A.is_cuda_array = lambda a: True
    try:
        assert A.attention_kernel_reason(Fake((2, 8, 64, 64)), Fake((2, 8, 64, 64)), Fake((2, 8, 64, 64))) is None
        big = Fake((1024, 64, 16, 64))
        assert "65535 blocks" in A.attention_kernel_reason(big, big, big)
        assert "head dims" in A.attention_kernel_reason(Fake((1, 1, 4, 48)), Fake((1, 1, 4, 48)), Fake((1, 1, 4, 48)))
    finally:
        A.is_cuda_array = real
