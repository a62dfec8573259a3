"""Our tensor-core GEMM (kernels/gemm_tc.cu) against float64 references, on the GPU.

TF32 (float32 data, math="tf32"), float16 and bfloat16, every transpose case, both tiles (128 and 64),
awkward sizes (odd, prime, not multiples of the tile, K = 1, M or N = 1), aligned (cp.async) and
unaligned (element-wise) loads, partially valid 16-byte chunks, batched and broadcast operands,
alpha/beta, a strided (transposed) C. Outputs are poisoned with NaN before the kernel writes them.
Tolerances (relative Frobenius error against float64 products of the very values stored):
TF32 5e-3 against the exact product; 1e-4 against the CPU's TF32 emulation (rounding to nearest: only
the order of the fp32 sums differs, and on Hopper how ties round: the wgmma kernel's operands are rounded
by the copy engine (TMA's tfloat32 type) with ties to even, ~1e-5 away from the emulation's ties-away on
long sums; a kernel that truncated instead of rounding is ~9e-4 away and fails this);
float16 2e-3 and bfloat16 1e-2 (fp32 accumulation, one rounding of the result).
"""
import ml_dtypes
import numpy as np
import pytest

from minidl.primitives.gemm import gemm
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

KINDS = {"tf32": (np.float32, 5e-3), "f16": (np.float16, 2e-3), "bf16": (ml_dtypes.bfloat16, 1e-2)}
TRANS = [(False, False), (False, True), (True, False), (True, True)]
SIZES = [(1, 1, 1), (7, 5, 3), (1, 200, 77), (200, 1, 77), (129, 131, 9), (67, 300, 257), (128, 128, 128),
         (257, 130, 1), (33, 517, 250), (96, 200, 72)]


def _gpu(x):
    """A CuPy copy of a NumPy array (bfloat16 through its bits if CuPy will not take it directly)."""
    import cupy

    try:
        return cupy.asarray(x)
    except Exception:
        return cupy.asarray(x.view(np.uint16)).view(x.dtype)


def _host(x):
    import cupy

    try:
        return cupy.asnumpy(x)
    except Exception:
        return cupy.asnumpy(x.view(cupy.uint16)).view(ml_dtypes.bfloat16)


def _nan_like(shape, dtype):
    return _gpu(np.full(shape, np.nan, dtype=dtype))


def _stored(rng, rows, cols, trans, dtype, batch=0):
    shape = (cols, rows) if trans else (rows, cols)
    if batch:
        shape = (batch,) + shape
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _ref(a, b, trans_a, trans_b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(np.swapaxes(a64, -1, -2) if trans_a else a64, np.swapaxes(b64, -1, -2) if trans_b else b64)


def _check(kind, got, want, a=None, b=None, trans_a=False, trans_b=False, alpha=1.0):
    dtype, tol = KINDS[kind]
    got = _host(got)
    assert got.dtype == np.dtype(dtype)
    assert rel_err(got.astype(np.float64), want) <= tol
    if kind == "tf32" and a is not None:
        emulated = gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, math="tf32")
        assert rel_err(got, emulated.astype(np.float64)) <= 1e-4


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trans_a, trans_b", TRANS)
@pytest.mark.parametrize("M, N, K", SIZES)
def test_gemm_tc_matches_float64(kind, trans_a, trans_b, M, N, K):
    dtype, _ = KINDS[kind]
    rng = np.random.default_rng(M * 1000 + N * 10 + K)
    a, b = _stored(rng, M, K, trans_a, dtype), _stored(rng, K, N, trans_b, dtype)
    out = _nan_like((M, N), dtype)
    gemm(_gpu(a), _gpu(b), trans_a=trans_a, trans_b=trans_b, out=out, math="tf32")
    _check(kind, out, _ref(a, b, trans_a, trans_b), a, b, trans_a, trans_b)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trans_a, trans_b", TRANS)
@pytest.mark.parametrize("tile, bk_bytes", [(64, 64), (128, 64), (128, 128)])
def test_gemm_tc_both_tiles_and_alpha_beta(kind, trans_a, trans_b, tile, bk_bytes):
    """The launcher entry with each tile and k step forced, at sizes that leave ragged tiles on every
    edge (and a K that ends inside a block step of either size)."""
    from minidl.primitives.cuda.gemm import gemm_tc

    dtype, _ = KINDS[kind]
    M, N, K = 300, 261, 203
    rng = np.random.default_rng(tile + bk_bytes + 7 * trans_a + 3 * trans_b)
    a, b = _stored(rng, M, K, trans_a, dtype), _stored(rng, K, N, trans_b, dtype)
    prior = rng.standard_normal((M, N)).astype(np.float32).astype(dtype)
    out = _gpu(prior)
    gemm_tc(M, N, K, _gpu(a), a.shape[-1], _gpu(b), b.shape[-1], out, trans_a=trans_a, trans_b=trans_b,
            alpha=0.5, beta=-1.5, tile=tile, bk_bytes=bk_bytes)
    want = 0.5 * _ref(a, b, trans_a, trans_b) - 1.5 * prior.astype(np.float64)
    _check(kind, out, want)
    out = _nan_like((M, N), dtype)                      # beta = 0: NaN in C is never read
    gemm_tc(M, N, K, _gpu(a), a.shape[-1], _gpu(b), b.shape[-1], out, trans_a=trans_a, trans_b=trans_b,
            alpha=2.0, tile=tile, bk_bytes=bk_bytes)
    _check(kind, out, 2.0 * _ref(a, b, trans_a, trans_b), a, b, trans_a, trans_b, alpha=2.0)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trans_a, trans_b", TRANS)
def test_gemm_tc_partial_chunks(kind, trans_a, trans_b):
    """Aligned leading dimensions (16-byte copies) with M, N, K not multiples of a chunk: the copies
    that straddle an edge copy only the bytes inside (cp.async src-size) and zero the rest."""
    import cupy

    from minidl.primitives.cuda.gemm import gemm_tc

    dtype, _ = KINDS[kind]
    M, N, K, ld = 13, 11, 13, 16
    rng = np.random.default_rng(5)
    a_full = _stored(rng, ld, ld, False, dtype)  # (16, 16) storage; only the top-left part is used
    b_full = _stored(rng, ld, ld, False, dtype)
    a_used = a_full[:K, :M] if trans_a else a_full[:M, :K]
    b_used = b_full[:N, :K] if trans_b else b_full[:K, :N]
    out = _nan_like((M, N), dtype)
    gemm_tc(M, N, K, _gpu(a_full), ld, _gpu(b_full), ld, out, trans_a=trans_a, trans_b=trans_b)
    _check(kind, out, _ref(np.ascontiguousarray(a_used), np.ascontiguousarray(b_used), trans_a, trans_b))
    assert cupy.all(cupy.isfinite(out.astype(cupy.float32)))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True), (False, True)])
def test_gemm_tc_batched_and_broadcast(kind, trans_a, trans_b):
    dtype, _ = KINDS[kind]
    rng = np.random.default_rng(1)
    a = _stored(rng, 70, 45, trans_a, dtype, batch=3)
    b = _stored(rng, 45, 150, trans_b, dtype)            # shared by the 3 matrices of a
    got = gemm(_gpu(a), _gpu(b), trans_a=trans_a, trans_b=trans_b, math="tf32")
    assert got.shape == (3, 70, 150)
    _check(kind, got, _ref(a, b, trans_a, trans_b), a, b, trans_a, trans_b)
    b3 = _stored(rng, 45, 150, trans_b, dtype, batch=3)
    got = gemm(_gpu(a), _gpu(b3), trans_a=trans_a, trans_b=trans_b, math="tf32")
    _check(kind, got, _ref(a, b3, trans_a, trans_b), a, b3, trans_a, trans_b)


@pytest.mark.parametrize("kind", list(KINDS))
def test_gemm_tc_long_reduction(kind):
    """K = 4096: fp32 accumulation keeps half-precision products accurate over long sums."""
    dtype, _ = KINDS[kind]
    rng = np.random.default_rng(6)
    a, b = _stored(rng, 64, 4096, False, dtype), _stored(rng, 4096, 96, True, dtype)
    out = _nan_like((64, 96), dtype)
    gemm(_gpu(a), _gpu(b), trans_b=True, out=out, math="tf32")
    _check(kind, out, _ref(a, b, False, True), a, b, False, True)


def test_gemm_tc_strided_output_and_fp32_route():
    """strided_gemm writes C through (row, column) strides (here C^T), and math="fp32" keeps the
    CUDA-core SGEMM for float32 (exact to 1e-5), while math="tf32" does not (TF32 error > 1e-5)."""
    import cupy

    from minidl.primitives.cuda.gemm import strided_gemm

    rng = np.random.default_rng(7)
    M, N, K = 90, 70, 300
    a, b = _stored(rng, M, K, False, np.float32), _stored(rng, K, N, False, np.float32)
    want = _ref(a, b, False, False)
    for math, lo, hi in (("fp32", 0.0, 1e-5), ("tf32", 1e-5, 5e-3)):
        ct = cupy.full((N, M), np.nan, dtype=cupy.float32)        # C stored transposed
        strided_gemm(M, N, K, cupy.asarray(a), K, cupy.asarray(b), N, ct, math=math, ldc_row=1, ldc_col=M)
        err = rel_err(cupy.asnumpy(ct).T, want)
        assert lo <= err <= hi, (math, err)


def test_gemm_tc_k_zero_and_out_dtype_checked():
    import cupy

    a = cupy.ones((4, 0), dtype=cupy.float16)
    b = cupy.ones((0, 3), dtype=cupy.float16)
    out = cupy.full((4, 3), 7, dtype=cupy.float16)
    gemm(a, b, out=out, beta=0.5)
    assert cupy.all(out == 3.5)
    with pytest.raises(TypeError, match="gemm: all arrays must have the same dtype"):
        gemm(a, b, out=cupy.empty((4, 3), dtype=cupy.float32))


# ------------------------------------------------------------------------------------------------
# Users of the tensor-core GEMM: the RNN primitive, Linear, matmul
# ------------------------------------------------------------------------------------------------


def _count_gemm_tc(monkeypatch, module):
    """Wrap gemm_tc as `module` sees it; return the list its calls are recorded in."""
    calls = []
    real = module.gemm_tc

    def counting(*args, **kwargs):
        calls.append(args[:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "gemm_tc", counting)
    return calls


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_rnn_tf32_on_gpu_matches_cpu_emulation(monkeypatch, mode):
    """math="tf32": every GEMM of the RNN primitive runs on our TF32 kernel; outputs and gradients agree
    with the CPU's TF32 emulation (same rounding; only the order of fp32 sums differs) and are within
    TF32's error of float64."""
    import cupy

    from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
    from minidl.primitives.cuda import rnn as cuda_rnn

    calls = _count_gemm_tc(monkeypatch, cuda_rnn)
    rng = np.random.default_rng(8)
    desc = RNNDescriptor(mode, 19, 24, num_layers=2, bidirectional=True)
    weights = [tuple(rng.standard_normal(spec.shape).astype(np.float32) * np.float32(0.25) for spec in group)
               for group in desc.weight_shapes()]
    x = rng.standard_normal((6, 5, 19)).astype(np.float32)
    dy = rng.standard_normal((6, 5, 48)).astype(np.float32)
    gpu_w = [tuple(cupy.asarray(w) for w in g) for g in weights]
    y, hy, _, reserve = rnn_forward(cupy.asarray(x), None, None, gpu_w, desc, math="tf32")
    dx, _, _, dw = rnn_backward(cupy.asarray(dy), None, None, reserve)
    assert len(calls) > 0
    y_e, hy_e, _, r_e = rnn_forward(x, None, None, weights, desc, math="tf32")
    dx_e, _, _, dw_e = rnn_backward(dy, None, None, r_e)
    f64 = [tuple(w.astype(np.float64) for w in g) for g in weights]
    y64, _, _, r64 = rnn_forward(x.astype(np.float64), None, None, f64, desc)
    dx64, _, _, dw64 = rnn_backward(dy.astype(np.float64), None, None, r64)
    assert rel_err(cupy.asnumpy(y), y_e.astype(np.float64)) <= 1e-3
    assert rel_err(cupy.asnumpy(dx), dx_e.astype(np.float64)) <= 1e-3
    assert rel_err(cupy.asnumpy(y), y64) <= 5e-3 and rel_err(cupy.asnumpy(dx), dx64) <= 5e-3
    for k in range(len(dw)):
        for got, want in zip(dw[k][:2], dw64[k][:2]):
            assert rel_err(cupy.asnumpy(got), want) <= 5e-3


def test_framework_math_flags_choose_the_kernel(monkeypatch):
    """Linear: TF32 kernel only with backends.cuda.matmul.allow_tf32 (torch's default: off), then within
    TF32's error of torch in float64. LSTM: TF32 kernel with backends.cudnn.allow_tf32 (default: on)."""
    import torch

    import minidl
    import minidl.nn as nn
    from minidl.primitives.cuda import gemm as gemm_launcher
    from minidl.primitives.cuda import rnn as cuda_rnn

    calls = _count_gemm_tc(monkeypatch, gemm_launcher)
    rnn_calls = _count_gemm_tc(monkeypatch, cuda_rnn)
    rng = np.random.default_rng(9)
    x_np = rng.standard_normal((37, 130)).astype(np.float32)
    layer = nn.Linear(130, 67).to("cuda")
    x = minidl.tensor(x_np, device="cuda", requires_grad=True)
    layer(x).sum().backward()
    assert calls == []                                   # fp32 by default: our SGEMM
    minidl.backends.cuda.matmul.allow_tf32 = True
    try:
        x.grad = None
        layer.zero_grad()
        y = layer(x)
        y.sum().backward()
    finally:
        minidl.backends.cuda.matmul.allow_tf32 = False
    assert sorted(calls) == sorted([(37, 67, 130), (37, 130, 67), (67, 130, 37)])   # y, dx, dW
    tw = torch.tensor(layer.weight.detach().cpu().numpy(), dtype=torch.float64)
    ty = torch.tensor(x_np, dtype=torch.float64) @ tw.T + torch.tensor(layer.bias.detach().cpu().numpy(),
                                                                       dtype=torch.float64)
    assert rel_err(y.detach().cpu().numpy(), ty.numpy()) <= 5e-3
    assert rel_err(x.grad.cpu().numpy(), np.broadcast_to(tw.sum(0).numpy(), x_np.shape)) <= 5e-3

    lstm = nn.LSTM(8, 16).to("cuda")
    seq = minidl.randn(4, 3, 8, device="cuda")
    with minidl.backends.cudnn.flags(allow_tf32=False):
        lstm(seq)[0].sum().backward()
    assert rnn_calls == []
    with minidl.backends.cudnn.flags(allow_tf32=True):   # the library's default (tests/conftest.py turns it off)
        lstm(seq)[0].sum().backward()
    assert len(rnn_calls) > 0


@pytest.mark.parametrize("allow_tf32, tol", [(False, 1e-5), (True, 5e-3)])
def test_matmul_batched_on_our_gemm(allow_tf32, tol):
    """Tensor @ Tensor on the GPU: 2-D and 3-D products (and their gradients) run on our GEMM."""
    import torch

    import minidl

    rng = np.random.default_rng(10)
    a_np = rng.standard_normal((3, 33, 20)).astype(np.float32)
    b_np = rng.standard_normal((20, 17)).astype(np.float32)
    g_np = rng.standard_normal((3, 33, 17)).astype(np.float32)
    a = minidl.tensor(a_np, device="cuda", requires_grad=True)
    b = minidl.tensor(b_np, device="cuda", requires_grad=True)
    minidl.backends.cuda.matmul.allow_tf32 = allow_tf32
    try:
        y = a @ b
        y.backward(minidl.tensor(g_np, device="cuda"))
    finally:
        minidl.backends.cuda.matmul.allow_tf32 = False
    ta = torch.tensor(a_np, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b_np, dtype=torch.float64, requires_grad=True)
    ty = ta @ tb
    ty.backward(torch.tensor(g_np, dtype=torch.float64))
    assert rel_err(y.detach().cpu().numpy(), ty.detach().numpy()) <= tol
    assert rel_err(a.grad.cpu().numpy(), ta.grad.numpy()) <= tol
    assert rel_err(b.grad.cpu().numpy(), tb.grad.numpy()) <= tol


def test_gemm_tc_launch_plans_serve_new_addresses():
    """The mma.sync kernel's launch plans (cuda/gemm.py, issue 23; set_tensor_core_gemm("mma_sync")): a bfloat16
    product with a float32 bias and a TF32 one, each called three times on arrays at new addresses, right every time,
    one plan each."""
    import cupy

    from minidl.primitives import set_tensor_core_gemm
    from minidl.primitives.cuda import gemm as cuda_gemm

    rng = np.random.default_rng(5)
    set_tensor_core_gemm("mma_sync")
    try:
        cuda_gemm._tc_plans.clear()
        for dtype, math, tol in ((ml_dtypes.bfloat16, "fp32", 2e-2), (np.float32, "tf32", 5e-3)):
            before = len(cuda_gemm._tc_plans)
            for step in range(3):
                a = rng.standard_normal((150, 96)).astype(dtype)
                b = rng.standard_normal((70, 96)).astype(dtype)
                c = rng.standard_normal(70).astype(np.float32)
                keep = [cupy.zeros(step * 777 + 5, cupy.float32)]   # moves the pool's next blocks
                got = gemm(_gpu(a), _gpu(b), trans_b=True, math=math, bias=cupy.asarray(c))
                want = a.astype(np.float64) @ b.astype(np.float64).T + c
                assert rel_err(_host(got).astype(np.float64), want) <= tol, (dtype, step)
                assert len(cuda_gemm._tc_plans) == before + 1, (dtype, step)
                del keep
    finally:
        set_tensor_core_gemm("auto")


def test_gemm_tc_keeps_the_wgmma_plan_of_a_problem_it_served():
    """A problem gemm_tc hands to the wgmma kernel (Hopper) is kept in gemm_tc's own plans as (wgmma's launch, its
    plan): the next call of it, on arrays at new addresses, launches that plan with no second lookup, and is right."""
    import cupy

    from minidl.primitives.cuda import gemm as cuda_gemm
    from minidl.primitives.cuda import gemm_wgmma

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the wgmma kernel runs on compute capability 9.0")
    rng = np.random.default_rng(6)
    cuda_gemm._tc_plans.clear()
    M, N, K = 256, 192, 128
    for step in range(3):
        a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
        keep = [cupy.zeros(step * 999 + 7, cupy.float32)]   # moves the pool's next blocks
        ga, gb = _gpu(a), _gpu(b)
        c = cupy.zeros((M, N), dtype=ga.dtype)
        cuda_gemm.gemm_tc(M, N, K, ga, K, gb, K, c, trans_b=True)
        want = a.astype(np.float64) @ b.astype(np.float64).T
        assert rel_err(_host(c).astype(np.float64), want) <= 2e-2, step
        assert len(cuda_gemm._tc_plans) == 1
        launch, plan = next(iter(cuda_gemm._tc_plans.values()))
        assert launch is gemm_wgmma.launch_plan and plan is gemm_wgmma.last_plan
        del keep
