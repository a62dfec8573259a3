"""kernels/attention.cu and kernels/layer_norm.cu against the float64 NumPy reference, on the same rounded
inputs: outputs, LSE and every gradient, in float16, bfloat16 and float32 (attention: float32 with fp32 math
on 3xTF32 products, and with TF32 math) and float32/float16/bfloat16 (layer norm), over head dims, lengths that are not multiples of the 64-row tiles, causal masks (also with
L != S), bool masks with a query that sees nothing, broadcast float masks, grouped-query attention and
dropout (the kernel's Philox mask is the reference's, bit for bit, so the dropped outputs match too).
Then the framework: a GPT block under bf16 autocast, and one in float32, is captured in a CUDA graph and
replays the eager losses; a head dim the kernel has no instance for runs the reference's cuBLAS products,
and its capture is refused, with the reason."""
import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
import minidl.primitives as P
from minidl._dtypes import bfloat16
from tests.conftest import captured_without_arrival_counters, rel_err

pytestmark = pytest.mark.gpu
# Norm-wise relative error against float64 on the same (rounded) inputs. P and dS are rounded to the data
# type before their products (as in FlashAttention): ~8 bits (bfloat16) or ~11 bits (float16) per element.
# float32: 3xTF32 products keep fp32's accuracy; "tf32" (math="tf32") rounds every operand to 10 bits.
TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-5, "tf32": 4e-3}
ATTENTION_DTYPES = ["float16", "bfloat16", "float32", "tf32"]   # tf32: float32 data, math="tf32"
LSE_TOL = {"tf32": dict(rtol=2e-3, atol=2e-3)}   # scores from 10-bit operands: ~1e-3 of a score of ~5


@pytest.fixture(autouse=True)
def _cupy():
    pytest.importorskip("cupy")
    if not minidl.cuda.is_available():
        pytest.skip(minidl.cuda.unavailable_reason())


def _dtype(name):
    return bfloat16 if name == "bfloat16" else np.dtype(name)


def _arrays(shapes, dtype, seed):
    """The same values as float64 NumPy arrays (rounded to dtype first) and as CuPy arrays of dtype."""
    import cupy

    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(s).astype(_dtype(dtype)) for s in shapes]
    return [h.astype(np.float64) for h in host], [cupy.asarray(h) for h in host]


CASES = {
    "plain": dict(L=130, S=97),
    "causal": dict(L=200, S=200, causal=True),
    "causal_l_ne_s": dict(L=70, S=150, causal=True),
    "bool_mask_dead_row": dict(L=77, S=140, mask="bool"),
    "float_mask": dict(L=64, S=128, mask="float"),
    "gqa": dict(L=90, S=90, HK=2, causal=True),
}


def _run(dtype, D, L, S, HK=4, causal=False, mask=None, dropout_p=0.0, seed=0, B=2, H=4):
    import cupy

    math = "tf32" if dtype == "tf32" else "fp32"
    dtype = "float32" if dtype == "tf32" else dtype
    (q, k, v, do), (cq, ck, cv, cdo) = _arrays([(B, H, L, D), (B, HK, S, D), (B, HK, S, D), (B, H, L, D)], dtype, 1)
    m = cm = None
    if mask == "bool":
        m = np.random.default_rng(2).random((L, S)) > 0.4
        m[5] = False   # query 5 sees no key: zeros, not NaN
        cm = cupy.asarray(m)
    elif mask == "float":
        m = np.random.default_rng(2).standard_normal((B, 1, L, S)).astype(np.float32)
        cm = cupy.asarray(m)
        m = m.astype(np.float64)
    kw = dict(causal=causal, dropout_p=dropout_p, seed=seed)
    assert P.attention_kernel_reason(cq, ck, cv) is None
    o, lse = P.attention_forward(cq, ck, cv, cm, math=math, **kw)
    dq, dk, dv = P.attention_backward(cq, ck, cv, o, cdo, lse, cm, math=math, **kw)
    o64, lse64 = P.attention_forward(q, k, v, m, **kw)
    dq64, dk64, dv64 = P.attention_backward(q, k, v, o64, do, lse64, m, **kw)
    got = [a.get().astype(np.float64) for a in (o, dq, dk, dv)]
    return got, [o64, dq64, dk64, dv64], lse.get(), lse64


@pytest.mark.parametrize("dtype", ATTENTION_DTYPES)
@pytest.mark.parametrize("D", [32, 64, 96, 128])
@pytest.mark.parametrize("case", ["plain", "causal"])
def test_attention_kernel_head_dims(dtype, D, case):
    got, want, lse, lse64 = _run(dtype, D, **CASES[case])
    for name, a, b in zip(("O", "dQ", "dK", "dV"), got, want):
        assert rel_err(a, b) <= TOL[dtype], name
    assert np.allclose(lse, lse64, **LSE_TOL.get(dtype, dict(rtol=1e-5, atol=1e-4)))


@pytest.mark.parametrize("dtype", ATTENTION_DTYPES)
@pytest.mark.parametrize("case", ["causal_l_ne_s", "bool_mask_dead_row", "float_mask", "gqa"])
def test_attention_kernel_masks_and_gqa(dtype, case):
    got, want, lse, lse64 = _run(dtype, 64, **CASES[case])
    for name, a, b in zip(("O", "dQ", "dK", "dV"), got, want):
        assert rel_err(a, b) <= TOL[dtype], name
    if case == "bool_mask_dead_row":
        assert not got[0][:, :, 5].any() and np.isinf(lse[:, :, 5]).all()
        assert np.allclose(lse[:, :, np.arange(lse.shape[2]) != 5], lse64[:, :, np.arange(lse.shape[2]) != 5],
                           **LSE_TOL.get(dtype, dict(rtol=1e-5, atol=1e-4)))


@pytest.mark.parametrize("dtype", ATTENTION_DTYPES)
@pytest.mark.parametrize("HK", [4, 2])
def test_attention_kernel_reads_strided_heads_in_place(dtype, HK):
    """q, k, v split out of one (B, T, (H + 2 HK) * D) projection and transposed to (B, heads, T, D), and a
    transposed dO, as a GPT block hands them over: read where they lie (no copy), the same results as contiguous
    copies (bit for bit but dQ, whose atomics add in any order); a layout the 16-byte copies cannot read (rows an
    odd number of elements apart) is copied first, same bits."""
    import cupy

    math = "tf32" if dtype == "tf32" else "fp32"
    dt = _dtype("float32" if dtype == "tf32" else dtype)
    B, H, T, D = 2, 4, 75, 64
    rng = np.random.default_rng(5)
    packed = cupy.asarray(rng.standard_normal((B, T, (H + 2 * HK) * D)).astype(dt))
    q = packed[..., :H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3)
    k = packed[..., H * D:(H + HK) * D].reshape(B, T, HK, D).transpose(0, 2, 1, 3)
    v = packed[..., (H + HK) * D:].reshape(B, T, HK, D).transpose(0, 2, 1, 3)
    do = cupy.asarray(rng.standard_normal((B, T, H, D)).astype(dt)).transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous and not do.flags.c_contiguous
    for causal in (False, True):
        o, lse = P.attention_forward(q, k, v, causal=causal, math=math)
        grads = P.attention_backward(q, k, v, o, do, lse, causal=causal, math=math)
        dense = [cupy.ascontiguousarray(a) for a in (q, k, v, do)]
        o2, lse2 = P.attention_forward(*dense[:3], causal=causal, math=math)
        grads2 = P.attention_backward(*dense[:3], o2, dense[3], lse2, causal=causal, math=math)
        for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), (o, lse, *grads), (o2, lse2, *grads2)):
            a, b = cupy.asnumpy(a), cupy.asnumpy(b)
            if name == "dQ":   # summed over key blocks with fp32 atomics: the order, and the last bits, vary
                tol = 1e-6 if dt == np.float32 else 4e-3
                assert rel_err(a.astype(np.float64), b.astype(np.float64)) <= tol
            else:
                assert (a.view(np.uint8) == b.view(np.uint8)).all(), name
        # the gradients laid out as their inputs: with as many key as query heads, dQ, dK, dV are the pieces of
        # one new (B, T, 3 H D) array, as q, k, v are of `packed` (the split's backward then joins them as a view)
        dq, dk, dv = grads
        if HK == H:
            assert dq.strides == q.strides and dk.strides == k.strides and dv.strides == v.strides
            assert dk.data.ptr - dq.data.ptr == dv.data.ptr - dk.data.ptr == H * D * dt.itemsize
            assert dq.data.mem is dk.data.mem is dv.data.mem
        else:
            assert dq.flags.c_contiguous and dk.flags.c_contiguous and dv.flags.c_contiguous
    odd = cupy.asarray(rng.standard_normal((B, H, T, D + 1)).astype(dt))[..., :D]   # rows 65 elements apart
    o3, lse3 = P.attention_forward(odd, odd, odd, math=math)
    dense = cupy.ascontiguousarray(odd)
    o4, lse4 = P.attention_forward(dense, dense, dense, math=math)
    assert (cupy.asnumpy(o3).view(np.uint8) == cupy.asnumpy(o4).view(np.uint8)).all()
    # q, k, v one and the same array: three separate gradients (one layout for all three would overlap)
    g3 = P.attention_backward(odd, odd, odd, o3, o3, lse3, math=math)
    g4 = P.attention_backward(dense, dense, dense, o4, o4, lse4, math=math)
    assert len({g.data.ptr for g in g3}) == 3 and all(g.flags.c_contiguous for g in g3)
    for a, b in zip(g3[1:], g4[1:]):
        assert (cupy.asnumpy(a).view(np.uint8) == cupy.asnumpy(b).view(np.uint8)).all()


@pytest.mark.parametrize("dtype", ATTENTION_DTYPES)
def test_attention_kernel_dropout_draws_the_reference_mask(dtype):
    got, want, _, _ = _run(dtype, 64, L=100, S=120, causal=False, dropout_p=0.25, seed=1234)
    for name, a, b in zip(("O", "dQ", "dK", "dV"), got, want):
        assert rel_err(a, b) <= TOL[dtype], name
    nodrop, _, _, _ = _run(dtype, 64, L=100, S=120)
    assert rel_err(got[0], nodrop[0]) > 0.1   # the mask did something


def test_attention_kernel_dropout_seed_read_on_the_device():
    """A (seed, offset) generator state on the GPU (what F.scaled_dot_product_attention passes, so that a
    CUDA graph replays with fresh masks) gives the mask of the same integers passed from the host."""
    import cupy

    _, (cq, ck, cv) = _arrays([(1, 2, 70, 64), (1, 2, 70, 64), (1, 2, 70, 64)], "bfloat16", 3)
    state = cupy.asarray(np.array([77, 8], dtype=np.uint64))
    o_dev, _ = P.attention_forward(cq, ck, cv, dropout_p=0.5, seed=state, offset=4)
    o_host, _ = P.attention_forward(cq, ck, cv, dropout_p=0.5, seed=77, offset=12)
    assert (o_dev.get().astype(np.float32) == o_host.get().astype(np.float32)).all()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["layer", "rms", "no_affine"])
@pytest.mark.parametrize("shape,ndim", [((37, 50), 1), ((4, 3, 10, 100), 2)])
def test_layer_norm_kernel(dtype, kind, shape, ndim):
    import cupy

    rms = kind == "rms"
    nshape = shape[len(shape) - ndim:]
    (x, dy, w, b), (cx, cdy, cw, cb) = _arrays([shape, shape, nshape, nshape], dtype, 4)
    x = x * 3 + 1   # a mean far from 0: the one-pass statistics must not cancel
    cx = cupy.asarray(x.astype(_dtype(dtype)))
    x = cx.get().astype(np.float64)
    if kind == "no_affine":
        w = b = cw = cb = None
    if rms:
        b = cb = None
    y, mean, rstd = P.layer_norm_forward(cx, cw, cb, normalized_ndim=ndim, eps=1e-5, rms=rms)
    y64, mean64, rstd64 = P.layer_norm_forward(x, w, b, normalized_ndim=ndim, eps=1e-5, rms=rms)
    tol = 1e-5 if dtype == "float32" else TOL[dtype] / 2
    assert y.dtype == cx.dtype and rel_err(y.get().astype(np.float64), y64) <= tol
    assert rel_err(rstd.get(), rstd64) <= 1e-5
    if not rms:
        assert rel_err(mean.get(), mean64) <= 1e-5
    dx, dw, db = P.layer_norm_backward(cx, cdy, cw, mean, rstd, normalized_ndim=ndim, rms=rms, has_bias=cb is not None)
    dx64, dw64, db64 = P.layer_norm_backward(x, dy, w, mean64, rstd64, normalized_ndim=ndim, rms=rms,
                                             has_bias=b is not None)
    assert rel_err(dx.get().astype(np.float64), dx64) <= tol * 2
    for a, a64 in ((dw, dw64), (db, db64)):
        assert (a is None) == (a64 is None)
        if a is not None:
            assert a.dtype == cx.dtype and rel_err(a.get().astype(np.float64), a64) <= tol * 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_parameter_gradients_in_one_launch_and_without_counters_the_same_bits(dtype):
    """dweight and dbias: the last block of each column tile adds the chunks up (one launch with the data gradient's:
    two in all); with no arrival counters (what a CUDA graph capture before their first use gets) the second kernel
    adds them in the same order: the same bits. Many rows, so that there are several chunks."""
    import cupy

    from minidl import profiler
    from minidl.primitives.cuda import _launch

    shape = (3000, 96)
    (x, dy, w, b), (cx, cdy, cw, cb) = _arrays([shape, shape, shape[1:], shape[1:]], dtype, 5)
    _, mean, rstd = P.layer_norm_forward(cx, cw, cb)
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        one = P.layer_norm_backward(cx, cdy, cw, mean, rstd)
        cupy.cuda.Device().synchronize()
    launches = {r["name"]: r["launches"] for r in prof.key_averages()}
    assert launches["layer_norm_backward"] == 2
    two = captured_without_arrival_counters(lambda: P.layer_norm_backward(cx, cdy, cw, mean, rstd))
    for a, c in zip(one[1:], two[1:]):
        assert (a.get().view(np.uint8) == c.get().view(np.uint8)).all()
    _, _, db64 = P.layer_norm_backward(x, dy, w, mean.get().astype(np.float64), rstd.get().astype(np.float64))
    assert rel_err(one[2].get().astype(np.float64), db64) <= (1e-5 if dtype == "float32" else TOL[dtype])
    assert int(_launch.arrival_counters(1).max()) == 0   # every launch set its counts back


def _gpt_block_step(dtype_autocast, d_model=128, heads=4):
    """A pre-norm Transformer block (d_model 128, 4 heads of 32: a head dim the kernel takes) with a causal
    mask and dropout, a linear head and Adam."""
    minidl.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model, heads, 256, dropout=0.1, batch_first=True, norm_first=True).to("cuda")
    head = nn.Linear(d_model, 11).to("cuda")
    opt = minidl.optim.Adam(list(layer.parameters()) + list(head.parameters()), lr=1e-3)
    mask = nn.Transformer.generate_square_subsequent_mask(32, device="cuda")

    def step(x, y):
        opt.zero_grad()
        with minidl.autocast("cuda", dtype=dtype_autocast or minidl.float16, enabled=dtype_autocast is not None):
            h = layer(x, src_mask=mask, is_causal=True)
            loss = F.cross_entropy(head(h).reshape(-1, 11).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return step, opt


def test_gpt_block_under_bf16_autocast_is_captured_and_replays_the_eager_losses():
    """The fused kernel runs inside a CUDA graph (dropout's mask from the device-resident generator): the
    graphed steps give the eager steps' losses from the same initial state."""
    x = minidl.randn(4, 32, 128, device="cuda")
    y = minidl.randint(0, 11, (4, 32), device="cuda")
    step, _ = _gpt_block_step(bfloat16)
    eager = [float(step(x, y).item()) for _ in range(12)]
    step, opt = _gpt_block_step(bfloat16)
    graphed = minidl.cuda.graphed_step(step, optimizers=opt)
    replayed = [float(graphed(x, y).item()) for _ in range(12)]
    assert np.isfinite(eager).all() and eager[-1] < eager[0]
    assert np.allclose(replayed, eager, rtol=2e-2, atol=2e-2)


def test_gpt_block_in_float32_is_captured_and_replays_the_eager_losses():
    """float32 attention runs on the fused kernel too (3xTF32 products), so a float32 step is captured."""
    x = minidl.randn(4, 32, 128, device="cuda")
    y = minidl.randint(0, 11, (4, 32), device="cuda")
    step, _ = _gpt_block_step(None)
    eager = [float(step(x, y).item()) for _ in range(12)]
    step, opt = _gpt_block_step(None)
    graphed = minidl.cuda.graphed_step(step, optimizers=opt)
    replayed = [float(graphed(x, y).item()) for _ in range(12)]
    assert np.isfinite(eager).all() and eager[-1] < eager[0]
    assert np.allclose(replayed, eager, rtol=1e-4, atol=1e-4)


def test_attention_the_kernel_cannot_run_refuses_capture_with_the_reason():
    """A head dim with no kernel instance (96 / 2 heads = 48) runs the reference, whose batched products are
    cuBLAS calls: it trains eagerly, and a captured step is refused with that reason instead of CuPy's bare
    NotImplementedError."""
    x = minidl.randn(4, 32, 96, device="cuda")
    y = minidl.randint(0, 11, (4, 32), device="cuda")
    step, opt = _gpt_block_step(None, d_model=96, heads=2)
    losses = [float(step(x, y).item()) for _ in range(30)]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    graphed = minidl.cuda.graphed_step(step, optimizers=opt)
    with pytest.raises(RuntimeError, match="attention_forward cannot run inside a CUDA graph capture.*head dims"):
        for _ in range(5):
            graphed(x, y)
