"""kernels/attention_wgmma.cu (the 16-bit forward pass on Hopper's wgmma, D = 64 and 128) against the float64
NumPy reference and against attention.cu's mma.sync forward on the same inputs: outputs and LSE over lengths
that are not multiples of the tiles, causal masks (L != S too), bool and float masks, grouped-query attention,
dropout and heads read in place from one projection. The two kernels round P to 16 bits alike but sum S in
another order, so they agree to the data type's rounding, not bit for bit. On other GPUs (no wgmma) the module
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
    from minidl.primitives.cuda.attention import forward_kernel_family

    assert [forward_kernel_family(kind, d) for kind in (1, 2) for d in (64, 128)] == ["wgmma"] * 4
    assert [forward_kernel_family(kind, d) for kind, d in ((0, 64), (2, 32), (1, 96))] == ["mma_sync"] * 3
    set_tensor_core_gemm("mma_sync")
    assert forward_kernel_family(2, 64) == "mma_sync"


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


@pytest.mark.parametrize("D", [64, 128])
def test_wgmma_forward_reads_projection_heads_in_place(D):
    """q, k, v as views of one (B, T, 3 H D) projection: the same bits as contiguous copies."""
    import cupy

    B, H, T = 2, 3, 150
    rng = np.random.default_rng(4)
    packed = cupy.asarray(rng.standard_normal((B, T, 3 * H * D)).astype(np.float16))
    q, k, v = (packed[..., i * H * D:(i + 1) * H * D].reshape(B, T, H, D).transpose(0, 2, 1, 3) for i in range(3))
    o, lse = _forward("wgmma", q, k, v, causal=True)
    o2, lse2 = _forward("wgmma", *(cupy.ascontiguousarray(a) for a in (q, k, v)), causal=True)
    assert (o.get().view(np.uint16) == o2.get().view(np.uint16)).all()
    assert (lse.get() == lse2.get()).all()


def test_wgmma_forward_is_deterministic_and_forced_choice_explains_itself():
    _, (cq, ck, cv, _) = _inputs("bfloat16", 64, 300, 300)
    a, _ = _forward("wgmma", cq, ck, cv, causal=True)
    b, _ = _forward("wgmma", cq, ck, cv, causal=True)
    assert (a.get().view(np.uint16) == b.get().view(np.uint16)).all()
    _, (q32, k32, v32, _) = _inputs("bfloat16", 32, 64, 64)
    with pytest.raises(RuntimeError, match="head dim 32"):
        _forward("wgmma", q32, k32, v32)
