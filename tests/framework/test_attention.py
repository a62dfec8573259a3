"""Layer norm, RMS norm, scaled_dot_product_attention, MultiheadAttention and the Transformer layers
against torch in float64 on the CPU: weights copied from torch's state_dict (same names), outputs and
every gradient compared; masks of both conventions, causal, GQA, padding, batch_first, unbatched inputs,
kdim/vdim, bias_kv / zero_attn, pre- and post-norm, gelu. Dropout is 0 where values are compared."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err

TOL = 1e-10


def _pair(shape, seed, requires_grad=True):
    x = np.random.default_rng(seed).standard_normal(shape)
    return minidl.tensor(x, requires_grad=requires_grad), torch.tensor(x, requires_grad=requires_grad)


def _copy(mine, theirs):
    mine.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})


def _grads_match(mine, theirs, tol=TOL):
    ours = dict(mine.named_parameters())
    for name, p in theirs.named_parameters():
        assert rel_err(ours[name].grad.numpy(), p.grad.numpy()) <= tol, name


# ---- layer norm / RMS norm -------------------------------------------------------------------------
@pytest.mark.parametrize("shape, norm", [((4, 7), 7), ((2, 3, 5), (3, 5)), ((3, 6), 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_module(shape, norm, bias):
    theirs = torch.nn.LayerNorm(norm, bias=bias, dtype=torch.float64)
    with torch.no_grad():
        theirs.weight.normal_()
        if bias:
            theirs.bias.normal_()
    mine = nn.LayerNorm(norm, bias=bias, dtype=minidl.float64)
    assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
    _copy(mine, theirs)
    x, tx = _pair(shape, 1)
    y, ty = mine(x), theirs(tx)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    g = np.random.default_rng(2).standard_normal(shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= TOL
    _grads_match(mine, theirs)
    assert repr(mine) == repr(theirs)


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rms_norm_module(eps):
    theirs = torch.nn.RMSNorm(6, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        theirs.weight.normal_()
    mine = nn.RMSNorm(6, eps=eps, dtype=minidl.float64)
    _copy(mine, theirs)
    x, tx = _pair((3, 4, 6), 3)
    y, ty = mine(x), theirs(tx)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    y.sum().backward()
    ty.sum().backward()
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= TOL
    _grads_match(mine, theirs)


def test_norm_errors_as_torch():
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[5\], expected input with shape \[\*, 5\]"):
        F.layer_norm(minidl.randn(2, 4), (5,))
    with pytest.raises(RuntimeError):
        torch.nn.functional.layer_norm(torch.randn(2, 4), (5,))
    with pytest.raises(RuntimeError, match="weight has shape"):
        F.layer_norm(minidl.randn(2, 4), (4,), weight=minidl.ones(3))


# ---- scaled_dot_product_attention -----------------------------------------------------------------
def _sdpa_pair(shapes, seed=0):
    return [_pair(s, seed + i) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("case", ["plain", "causal", "bool", "float", "scale", "rect", "dead_row", "gqa"])
def test_sdpa_matches_torch(case):
    B, H, L, S, E = 2, 4, 5, 7, 8
    if case in ("causal",):
        S = L
    hk = 2 if case == "gqa" else H
    (q, tq), (k, tk), (v, tv) = _sdpa_pair([(B, H, L, E), (B, hk, S, E), (B, hk, S, 6 if case == "rect" else E)])
    kw, tkw = {}, {}
    rng = np.random.default_rng(7)
    if case == "causal":
        kw = tkw = {"is_causal": True}
    elif case in ("bool", "dead_row"):
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True
        if case == "dead_row":
            m[2] = False
        kw, tkw = {"attn_mask": minidl.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif case == "float":
        m = rng.standard_normal((B, 1, L, S))
        kw, tkw = {"attn_mask": minidl.tensor(m)}, {"attn_mask": torch.tensor(m)}
    elif case == "scale":
        kw = tkw = {"scale": 0.3}
    elif case == "gqa":
        kw = tkw = {"enable_gqa": True}
    y = F.scaled_dot_product_attention(q, k, v, **kw)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **tkw)
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    g = np.random.default_rng(9).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    for a, b in ((q, tq), (k, tk), (v, tv)):
        assert rel_err(a.grad.numpy(), b.grad.numpy()) <= TOL


def test_sdpa_dropout_keeps_expectation_and_errors():
    q = minidl.randn(1, 1, 4, 8, dtype=minidl.float64)
    v = minidl.ones(1, 1, 4, 8, dtype=minidl.float64)
    minidl.manual_seed(0)
    outs = np.stack([F.scaled_dot_product_attention(q, q, v, dropout_p=0.5).numpy() for _ in range(400)])
    assert abs(outs.mean() - 1.0) < 0.05 and (outs == 0).any()   # inverted dropout: unbiased, some dropped
    with pytest.raises(RuntimeError, match="either attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=minidl.ones(4, 4, dtype=minidl.bool), is_causal=True)
    with pytest.raises(RuntimeError, match="last dimension"):
        F.scaled_dot_product_attention(q, minidl.randn(1, 1, 4, 5), q)


# ---- MultiheadAttention ---------------------------------------------------------------------------
MHA_CASES = {
    "plain": dict(init={}, call={}),
    "batch_first": dict(init={"batch_first": True}, call={}),
    "no_bias": dict(init={"bias": False}, call={}),
    "kdim_vdim": dict(init={"kdim": 5, "vdim": 3}, call={}),
    "bias_kv_zero_attn": dict(init={"add_bias_kv": True, "add_zero_attn": True}, call={}),
    "bool_mask": dict(init={}, call={"attn_mask": "bool2d"}),
    "float_mask3d": dict(init={}, call={"attn_mask": "float3d"}),
    "padding": dict(init={}, call={"key_padding_mask": True}),
    "heads_weights": dict(init={}, call={"average_attn_weights": False}),
    "no_weights_causal": dict(init={}, call={"need_weights": False, "attn_mask": "causal", "is_causal": True}),
    "unbatched": dict(init={}, call={}, unbatched=True),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_multihead_attention_matches_torch(case):
    spec = MHA_CASES[case]
    E, H, L, S, N = 8, 2, 4, 6, 3
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, dtype=torch.float64, **spec["init"])
    mine = nn.MultiheadAttention(E, H, dtype=minidl.float64, **spec["init"])
    assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
    if spec["init"].get("bias", True):
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    _copy(mine, theirs)
    bf = spec["init"].get("batch_first", False)
    kd, vd = spec["init"].get("kdim", E), spec["init"].get("vdim", E)
    self_attn = case in ("bool_mask", "float_mask3d", "no_weights_causal")
    if self_attn:
        S = L

    def shape(length, dim):
        if spec.get("unbatched"):
            return (length, dim)
        return (N, length, dim) if bf else (length, N, dim)

    q, tq = _pair(shape(L, E), 1)
    k, tk = (q, tq) if self_attn else _pair(shape(S, kd), 2)
    v, tv = (q, tq) if self_attn else _pair(shape(S, vd), 3)
    call, tcall = {}, {}
    rng = np.random.default_rng(5)
    for key, value in spec["call"].items():
        if key == "attn_mask":
            if value == "bool2d":
                m = rng.random((L, S)) < 0.3
                m[:, 0] = False
            elif value == "float3d":
                m = rng.standard_normal((N * H, L, S))
            else:   # causal: True above the diagonal = not allowed (MultiheadAttention's convention)
                m = np.triu(np.ones((L, S), dtype=bool), 1)
            call[key], tcall[key] = minidl.tensor(m), torch.tensor(m)
        elif key == "key_padding_mask":
            m = np.zeros((N, S), dtype=bool)
            m[0, -2:] = True
            m[2, 0] = True
            call[key], tcall[key] = minidl.tensor(m), torch.tensor(m)
        else:
            call[key] = tcall[key] = value
    y, w = mine(q, k, v, **call)
    ty, tw = theirs(tq, tk, tv, **tcall)
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    assert (w is None) == (tw is None)
    if w is not None:
        assert rel_err(w.detach().numpy(), tw.detach().numpy()) <= TOL
    g = np.random.default_rng(6).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(q.grad.numpy(), tq.grad.numpy()) <= TOL
    _grads_match(mine, theirs)


def test_multihead_attention_errors_as_torch():
    mha = nn.MultiheadAttention(8, 2)
    x = minidl.randn(3, 2, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(AssertionError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        mha(x, x, x, attn_mask=minidl.zeros(2, 3))


# ---- Transformer layers ---------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_decoder_layers(norm_first, activation):
    kw = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, activation=activation, norm_first=norm_first,
              batch_first=True)
    for kind in ("Encoder", "Decoder"):
        torch.manual_seed(1)
        theirs = getattr(torch.nn, f"Transformer{kind}Layer")(**kw, dtype=torch.float64)
        mine = getattr(nn, f"Transformer{kind}Layer")(**kw, dtype=minidl.float64)
        assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
        with torch.no_grad():
            for p in theirs.parameters():
                if p.ndim == 1:
                    p.normal_()
        _copy(mine, theirs)
        x, tx = _pair((2, 5, 8), 3)
        mem, tmem = _pair((2, 7, 8), 4)
        mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=minidl.float64)
        tmask = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
        assert np.array_equal(mask.numpy(), tmask.numpy())
        if kind == "Encoder":
            y, ty = mine(x, src_mask=mask, is_causal=True), theirs(tx, src_mask=tmask, is_causal=True)
        else:
            y, ty = mine(x, mem, tgt_mask=mask), theirs(tx, tmem, tgt_mask=tmask)
        assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
        y.square().sum().backward()
        ty.square().sum().backward()
        assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= 1e-9
        _grads_match(mine, theirs, 1e-9)


def test_transformer_matches_torch():
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=12, dropout=0.0)
    torch.manual_seed(2)
    theirs = torch.nn.Transformer(**kw, dtype=torch.float64)
    mine = nn.Transformer(**kw, dtype=minidl.float64)
    assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
    assert sum(p.numel() for p in mine.parameters()) == sum(p.numel() for p in theirs.parameters())
    _copy(mine, theirs)
    src, tsrc = _pair((6, 2, 8), 5)
    tgt, ttgt = _pair((4, 2, 8), 6)
    pad = np.zeros((2, 6), dtype=bool)
    pad[1, -1] = True
    mask = nn.Transformer.generate_square_subsequent_mask(4, dtype=minidl.float64)
    y = mine(src, tgt, tgt_mask=mask, src_key_padding_mask=minidl.tensor(pad),
             memory_key_padding_mask=minidl.tensor(pad))
    ty = theirs(tsrc, ttgt, tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64),
                src_key_padding_mask=torch.tensor(pad), memory_key_padding_mask=torch.tensor(pad))
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= 1e-9
    g = np.random.default_rng(8).standard_normal(y.shape)   # not sum(): a final layer norm's sum has no gradient
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(src.grad.numpy(), tsrc.grad.numpy()) <= 1e-9
    _grads_match(mine, theirs, 1e-9)


def test_a_small_gpt_trains():
    """A two-layer causal Transformer language model learns a repeating sequence (loss falls well below
    the uniform guess) with AdamW: the layers compose, train and are seeded."""
    minidl.manual_seed(0)
    vocab, T = 7, 12
    emb, pos = nn.Embedding(vocab, 16), nn.Embedding(T, 16)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    body, head = nn.TransformerEncoder(layer, 2), nn.Linear(16, vocab)
    params = [*emb.parameters(), *pos.parameters(), *body.parameters(), *head.parameters()]
    opt = minidl.optim.AdamW(params, lr=3e-3)
    seq = np.tile(np.arange(vocab), 4)[: T + 1]
    x, y = minidl.tensor(seq[None, :T].repeat(4, 0)), minidl.tensor(seq[None, 1:].repeat(4, 0))
    mask = nn.Transformer.generate_square_subsequent_mask(T)
    first = None
    for _ in range(60):
        h = emb(x) + pos(minidl.arange(T))
        loss = F.cross_entropy(head(body(h, mask=mask, is_causal=True)).reshape(-1, vocab), y.reshape(-1))
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 1.5 and loss.item() < 0.2, (first, loss.item())


@pytest.mark.parametrize("q_shape, kv_shape, mask_shape", [
    ((5, 8), (7, 8), (5, 7)),                    # 2-D: one head, no batch
    ((3, 5, 8), (3, 7, 8), (7,)),                # 3-D, a mask that broadcasts over queries
    ((2, 3, 5, 8), (2, 3, 7, 8), (3, 1, 7)),     # 4-D, a 3-D mask
    ((2, 2, 3, 5, 8), (2, 2, 3, 7, 8), (2, 1, 1, 5, 7)),   # 5-D: the leading dims fold into one batch
    ((2, 3, 5, 8), (1, 3, 7, 8), None),          # key/value batch broadcast: the composite path
])
def test_sdpa_any_leading_dims_and_masks_match_torch(q_shape, kv_shape, mask_shape):
    """Every rank torch takes, masks of any broadcastable rank; one fused node on the tape where q, k and v
    share their batch dims, the composite otherwise."""
    (q, tq), (k, tk), (v, tv) = _sdpa_pair([q_shape, kv_shape, kv_shape])
    kw, tkw = {}, {}
    if mask_shape is not None:
        m = np.random.default_rng(3).standard_normal(mask_shape)
        kw, tkw = {"attn_mask": minidl.tensor(m)}, {"attn_mask": torch.tensor(m)}
    y = F.scaled_dot_product_attention(q, k, v, **kw)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **tkw)
    assert y.shape == tuple(ty.shape) and rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    fused = type(y._ctx).__name__ == "ScaledDotProductAttention" or (
        y._ctx is not None and type(y._ctx.inputs[0]._ctx).__name__ == "ScaledDotProductAttention")
    assert fused == (q_shape[:-3] == kv_shape[:-3])
    g = np.random.default_rng(9).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    for a, b in ((q, tq), (k, tk), (v, tv)):
        assert rel_err(a.grad.numpy(), b.grad.numpy()) <= TOL


def test_sdpa_mask_that_requires_grad_gets_its_gradient():
    """A learned additive mask (a relative-position bias, say) needs the composite's tape: its gradient
    matches torch's."""
    (q, tq), (k, tk), (v, tv), (m, tm) = _sdpa_pair([(2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), (3, 5, 6)])
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    g = np.random.default_rng(4).standard_normal(y.shape)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= TOL
    assert rel_err(m.grad.numpy(), tm.grad.numpy()) <= TOL


def test_sdpa_kernel_picks_the_backend_as_torch_does():
    """torch.nn.attention.sdpa_kernel / torch.backends.cuda.sdp_kernel: MATH alone runs the composite (same values and
    gradients as the fused operation); the fused backends alone refuse inputs the fused operation does not take,
    naming them; the flags come back after the block; torch's values of SDPBackend."""
    from minidl.nn.attention import SDPBackend, sdpa_kernel

    rng = np.random.default_rng(0)
    q, k, v = (minidl.tensor(rng.standard_normal((2, 3, 5, 8)), requires_grad=True) for _ in range(3))

    def run():
        for t in (q, k, v):
            t.grad = None
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        (y * minidl.tensor(np.arange(y.numel()).reshape(y.shape) % 7)).sum().backward()
        return [y.detach().numpy()] + [t.grad.numpy() for t in (q, k, v)]

    fused = run()
    with sdpa_kernel(SDPBackend.MATH):
        math_only = run()
    with minidl.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_cudnn=False):
        assert not minidl.backends.cuda.flash_sdp_enabled() and minidl.backends.cuda.math_sdp_enabled()
        old_api = run()
    for a, b, c in zip(fused, math_only, old_api):
        assert rel_err(a, b) <= 1e-12 and rel_err(a, c) <= 1e-12
    assert minidl.backends.cuda.flash_sdp_enabled()   # restored
    mask = minidl.tensor(rng.standard_normal((5, 5)), requires_grad=True)   # a mask that needs a gradient: composite only
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v)   # fused: fine
        with pytest.raises(RuntimeError, match=r"no available kernel: the backends allowed \(flash, mem_efficient\) "
                                               r"do not take these inputs.*SDPBackend.MATH"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert F.scaled_dot_product_attention(q, k, v, attn_mask=mask).shape == (2, 3, 5, 8)
    for b in SDPBackend:   # (torch's is a pybind11 enum: compared name by name)
        assert int(b) == int(getattr(torch.nn.attention.SDPBackend, b.name)), b.name
    with pytest.raises(ValueError, match="not an SDPBackend"):
        with sdpa_kernel(7):
            pass
