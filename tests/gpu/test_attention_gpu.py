"""Layer norm, attention and the Transformer layers on the GPU: minidl's CUDA path (float32, TF32 off)
against minidl's float64 NumPy path on the same weights and inputs: outputs and every gradient; the
fully-masked row of SDPA gives zeros, not NaN. (float32 attention runs the primitive's reference on CuPy;
the fused kernel, the half-precision path and capture are test_attention_kernel_gpu.py's.)"""
import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu
TOL = 1e-4


@pytest.fixture(autouse=True)
def _cupy():
    pytest.importorskip("cupy")
    if not minidl.cuda.is_available():
        pytest.skip(minidl.cuda.unavailable_reason())


def _both(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    return (minidl.tensor(x.astype(np.float32), device="cuda", requires_grad=True),
            minidl.tensor(x, requires_grad=True))


@pytest.mark.parametrize("rms", [False, True])
def test_layer_norm(rms):
    x, x64 = _both((33, 7, 48), 1)
    w = np.random.default_rng(2).standard_normal(48)
    b = None if rms else np.random.default_rng(3).standard_normal(48)
    args = [minidl.tensor(w.astype(np.float32), device="cuda", requires_grad=True),
            None if b is None else minidl.tensor(b.astype(np.float32), device="cuda", requires_grad=True)]
    args64 = [minidl.tensor(w, requires_grad=True), None if b is None else minidl.tensor(b, requires_grad=True)]
    if rms:
        y, y64 = F.rms_norm(x, (48,), args[0], eps=1e-5), F.rms_norm(x64, (48,), args64[0], eps=1e-5)
    else:
        y, y64 = F.layer_norm(x, (48,), *args), F.layer_norm(x64, (48,), *args64)
    assert rel_err(y.cpu().detach().numpy(), y64.detach().numpy()) <= TOL
    g = np.random.default_rng(4).standard_normal(y.shape)
    y.backward(minidl.tensor(g.astype(np.float32), device="cuda"))
    y64.backward(minidl.tensor(g))
    assert rel_err(x.grad.cpu().numpy(), x64.grad.numpy()) <= TOL
    for a, a64 in zip(args, args64):
        if a is not None:
            assert rel_err(a.grad.cpu().numpy(), a64.grad.numpy()) <= TOL


@pytest.mark.parametrize("case", ["causal", "bool_dead_row", "float", "gqa"])
def test_sdpa(case):
    B, H, L, S, E = 2, 4, 67, 67, 32
    hk = 2 if case == "gqa" else H
    (q, q64), (k, k64), (v, v64) = _both((B, H, L, E), 5), _both((B, hk, S, E), 6), _both((B, hk, S, E), 7)
    kw, kw64 = {}, {}
    if case == "causal":
        kw = kw64 = {"is_causal": True}
    elif case == "bool_dead_row":
        m = np.random.default_rng(8).random((L, S)) > 0.5
        m[3] = False
        kw, kw64 = {"attn_mask": minidl.tensor(m, device="cuda")}, {"attn_mask": minidl.tensor(m)}
    elif case == "float":
        m = np.random.default_rng(8).standard_normal((B, 1, L, S))
        kw, kw64 = {"attn_mask": minidl.tensor(m.astype(np.float32), device="cuda")}, {"attn_mask": minidl.tensor(m)}
    else:
        kw = kw64 = {"enable_gqa": True}
    y, y64 = F.scaled_dot_product_attention(q, k, v, **kw), F.scaled_dot_product_attention(q64, k64, v64, **kw64)
    out = y.cpu().detach().numpy()
    assert np.isfinite(out).all() and rel_err(out, y64.detach().numpy()) <= TOL
    if case == "bool_dead_row":
        assert not out[:, :, 3].any()
    y.sum().backward()
    y64.sum().backward()
    for a, a64 in ((q, q64), (k, k64), (v, v64)):
        assert rel_err(a.grad.cpu().numpy(), a64.grad.numpy()) <= TOL


def test_transformer_layers_match_the_cpu():
    minidl.manual_seed(0)
    enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
    dec = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")
    x, x64 = _both((3, 9, 32), 9)
    mem, mem64 = _both((3, 5, 32), 10)
    mask = nn.Transformer.generate_square_subsequent_mask(9)
    outs = []
    for device, a, m in (("cuda", x, mem), ("cpu", x64, mem64)):
        e, d = enc.to(device=device, dtype=minidl.float32 if device == "cuda" else minidl.float64), dec
        d = dec.to(device=device, dtype=minidl.float32 if device == "cuda" else minidl.float64)
        y = d(e(a, src_mask=mask.to(device), is_causal=True), m)
        # a random projection, not y.square().sum(): after the decoder's final layer norm that sum is nearly
        # constant, its gradient nearly 0, and a relative error of it measures rounding (1.3e-2 on an H100)
        g = np.random.default_rng(11).standard_normal(y.shape)
        y.backward(minidl.tensor(g.astype(np.float32) if device == "cuda" else g, device=device))
        outs.append((y.cpu().detach().numpy(), a.grad.cpu().numpy()))
    assert rel_err(outs[0][0], outs[1][0]) <= TOL and rel_err(outs[0][1], outs[1][1]) <= TOL


def test_gpt_attention_gradients_join_without_a_copy_and_match_the_cpu(monkeypatch):
    """A GPT block's attention: q, k, v split from one projection, to (B, H, T, D) by reshape and transpose. The
    kernel writes dQ, dK, dV laid out as q, k, v, so the transposes and reshapes back are views and the split's
    backward takes the three as one array (no concatenate); the projection's gradients equal the CPU's."""
    from minidl.ops import joining

    joins = []
    real = joining._joined
    monkeypatch.setattr(joining, "_joined", lambda arrays, dim: joins.append(real(arrays, dim)) or joins[-1])
    B, T, H, D = 2, 40, 4, 32
    x, x64 = _both((B, T, H * D), 12)
    lin = nn.Linear(H * D, 3 * H * D)
    grads = []
    for device, a in (("cuda", x), ("cpu", x64)):
        layer = lin.to(device=device, dtype=minidl.float32 if device == "cuda" else minidl.float64)
        layer.zero_grad()
        q, k, v = layer(a).split(H * D, dim=2)
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, H * D)
        g = np.random.default_rng(13).standard_normal(y.shape)
        y.backward(minidl.tensor(g.astype(np.float32) if device == "cuda" else g, device=device))
        grads.append([t.cpu().numpy() for t in (layer.weight.grad, layer.bias.grad, a.grad)])
    assert joins[0] is not None and joins[0].shape == (B, T, 3 * H * D)   # the GPU's split: one view
    assert joins[1] is None                                                 # the CPU's: concatenated
    for got, want in zip(*grads):
        assert rel_err(got, want) <= TOL
