"""kernels/attention_wgmma.cu (the 16-bit forward pass on Hopper's wgmma at D = 64 and 128, the backward at
D = 64) against the float64 NumPy reference and against attention.cu's mma.sync kernels on the same inputs:
outputs, LSE and the three gradients over lengths that are not multiples of the tiles, causal masks (L != S
too), bool and float masks, grouped-query attention, dropout and heads read in place from one projection. The
two kernel families round P and dS to 16 bits alike but sum in another order, so they agree to the data type's
rounding, not bit for bit. On other GPUs (no wgmma) the module
is skipped; test_attention_kernel_gpu.py covers the mma.sync kernels there (and on Hopper covers this kernel
too, as "auto" picks it)."""
import numpy as np
import pytest

import minidl
import minidl.primitives as P
from minidl.primitives.gemm import set_tensor_core_gemm
from tests.conftest import rel_err
from tests.gpu.test_attention_kernel_gpu import CASES, TOL, _arrays

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _hopper():
    cupy = pytest.importorskip("cupy")
    if not minidl.cuda.is_available():
        pytest.skip(minidl.cuda.unavailable_reason())
    from minidl.primitives.cuda.gemm_wgmma import device_has_wgmma

    if not device_has_wgmma(cupy.cuda.runtime.getDevice()):
        pytest.skip("this GPU has no wgmma (the kernel is for H100/H200)")
    yield
    set_tensor_core_gemm("auto")


def _forward(kernel, *args, **kw):
    set_tensor_core_gemm(kernel)
    try:
        return P.attention_forward(*args, **kw)
    finally:
        set_tensor_core_gemm("auto")


def _backward(kernel, q, k, v, mask, do, **kw):
    """(O, LSE, dQ, dK, dV), both passes on one kernel family ("wgmma": the backward where it takes the head dim)."""
    set_tensor_core_gemm(kernel)
    try:
        o, lse = P.attention_forward(q, k, v, mask, **kw)
        return (o, lse) + tuple(P.attention_backward(q, k, v, o, do, lse, mask, **kw))
    finally:
        set_tensor_core_gemm("auto")


def _inputs(dtype, D, L, S, HK=4, mask=None, B=2, H=4, **_):
    import cupy

    (q, k, v), (cq, ck, cv) = _arrays([(B, H, L, D), (B, HK, S, D), (B, HK, S, D)], dtype, 11)
    m = cm = None
    if mask == "bool":
        m = np.random.default_rng(2).random((L, S)) > 0.4
        m[5] = False
        cm = cupy.asarray(m)
    elif mask == "float":
        m = np.random.default_rng(2).standard_normal((B, 1, L, S)).astype(np.float32)
        cm = cupy.asarray(m)
        m = m.astype(np.float64)
    return (q, k, v, m), (cq, ck, cv, cm)


def test_auto_picks_wgmma_for_16_bit_heads_of_64_and_128():
    from minidl.primitives.cuda.attention import kernel_family

    assert [kernel_family(kind, d) for kind in (1, 2) for d in (64, 128)] == ["wgmma"] * 4
    assert [kernel_family(kind, d) for kind, d in ((0, 64), (2, 32), (1, 96))] == ["mma_sync"] * 3
    assert [kernel_family(kind, d, "backward") for kind, d in ((1, 64), (2, 64), (2, 128), (0, 64))] == \
        ["wgmma", "wgmma", "mma_sync", "mma_sync"]
    set_tensor_core_gemm("mma_sync")
    assert kernel_family(2, 64) == "mma_sync" and kernel_family(2, 64, "backward") == "mma_sync"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("case", list(CASES) + ["dropout", "long"])
def test_wgmma_forward_against_reference_and_mma_sync(dtype, D, case):
    spec = dict(CASES.get(case, {}))
    if case == "dropout":
        spec = dict(L=100, S=120)
    if case == "long":   # several query blocks and many key blocks, causal
        spec = dict(L=700, S=700, causal=True, B=1, H=2, HK=2)
    kw = dict(causal=spec.get("causal", False), dropout_p=0.25 if case == "dropout" else 0.0, seed=99)
    (q, k, v, m), (cq, ck, cv, cm) = _inputs(dtype, D, **spec)
    o, lse = _forward("wgmma", cq, ck, cv, cm, **kw)
    o_mma, lse_mma = _forward("mma_sync", cq, ck, cv, cm, **kw)
    o64, lse64 = P.attention_forward(q, k, v, m, **kw)
    got, mma = o.get().astype(np.float64), o_mma.get().astype(np.float64)
    assert rel_err(got, o64) <= TOL[dtype]
    assert rel_err(got, mma) <= TOL[dtype]
    finite = np.isfinite(lse64)
    assert (np.isinf(lse.get()) == ~finite).all()
    assert np.allclose(lse.get()[finite], lse64[finite], rtol=1e-5, atol=1e-4)
    assert np.allclose(lse.get()[finite], lse_mma.get()[finite], rtol=1e-5, atol=1e-4)
    if case == "bool_mask_dead_row":
        assert not got[:, :, 5].any()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", list(CASES) + ["dropout", "long"])
def test_wgmma_backward_against_reference_and_mma_sync(dtype, case):
    """D = 64: dQ, dK, dV from the wgmma backward against float64 and against the mma.sync kernels' (each family
    running both passes, so each backward reads its own forward's O and LSE)."""
    import cupy

    spec = dict(CASES.get(case, {}))
    if case == "dropout":
        spec = dict(L=100, S=120)
    if case == "long":
        spec = dict(L=300, S=300, causal=True, B=1, H=4, HK=2)
    kw = dict(causal=spec.get("causal", False), dropout_p=0.25 if case == "dropout" else 0.0, seed=7)
    (q, k, v, m), (cq, ck, cv, cm) = _inputs(dtype, 64, **spec)
    do64, (cdo,) = _arrays([q.shape], dtype, 12)
    got = _backward("wgmma", cq, ck, cv, cm, cdo, **kw)
    mma = _backward("mma_sync", cq, ck, cv, cm, cdo, **kw)
    o64, lse64 = P.attention_forward(q, k, v, m, **kw)
    want = P.attention_backward(q, k, v, o64, do64[0], lse64, m, **kw)
    for name, a, b, w in zip(("dQ", "dK", "dV"), got[2:], mma[2:], want):
        a, b = cupy.asnumpy(a).astype(np.float64), cupy.asnumpy(b).astype(np.float64)
        assert rel_err(a, w) <= TOL[dtype], name
        assert rel_err(a, b) <= TOL[dtype], name


@pytest.mark.parametrize("D", [64, 128])
def test_wgmma_forward_reads_projection_heads_in_place(D):
    """q, k, v as views of one (B, T, 3 H D) projection: the same bits as contiguous copies."""
    import cupy

    B, H, T = 2, 3, 150
    rng = np.random.default_rng(4)
    packed = cupy.asarray(rng.standard_normal((B, T, 3 * H * D)).astype(np.float16))
    q, k, v = (packed[..., i * H * D:(i + 1) * H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
    do = cupy.asarray(rng.standard_normal((B, T, H, D)).astype(np.float16)).transpose(0, 2, 1, 3)
    kernel = "wgmma" if D == 64 else "auto"   # (the backward at D = 128 is mma.sync's)
    got = _backward(kernel, q, k, v, None, do, causal=True)
    dense = _backward(kernel, *(cupy.ascontiguousarray(a) for a in (q, k, v)), None, cupy.ascontiguousarray(do),
                      causal=True)
    for name, a, b in zip(("O", "LSE", "dQ", "dK", "dV"), got, dense):
        a, b = cupy.asnumpy(a), cupy.asnumpy(b)
        if name == "dQ":   # fp32 atomics over key blocks: the order, and the last bits, vary
            assert rel_err(a.astype(np.float64), b.astype(np.float64)) <= 4e-3
        else:
            assert (a.view(np.uint8) == b.view(np.uint8)).all(), name


def test_wgmma_is_deterministic_and_forced_choice_explains_itself():
    _, (cq, ck, cv, _) = _inputs("bfloat16", 64, 300, 300)
    _, (do,) = _arrays([cq.shape], "bfloat16", 3)
    a = _backward("wgmma", cq, ck, cv, None, do, causal=True)
    b = _backward("wgmma", cq, ck, cv, None, do, causal=True)
    for x, y in zip(a[:2] + a[3:], b[:2] + b[3:]):   # (dQ: fp32 atomics, summed in any order)
        assert (x.get().view(np.uint8) == y.get().view(np.uint8)).all()
    _, (q32, k32, v32, _) = _inputs("bfloat16", 32, 64, 64)
    with pytest.raises(RuntimeError, match="head dim 32"):
        _forward("wgmma", q32, k32, v32)
    _, (q128, k128, v128, _) = _inputs("bfloat16", 128, 64, 64)
    o, lse = _forward("wgmma", q128, k128, v128)
    set_tensor_core_gemm("wgmma")
    with pytest.raises(RuntimeError, match="backward kernel takes"):
        P.attention_backward(q128, k128, v128, o, o, lse)
