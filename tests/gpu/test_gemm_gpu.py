"""Our SGEMM kernel (kernels/gemm.cu) against float64 NumPy and cuBLAS, on the GPU.

Outputs are poisoned with NaN before the kernel writes them, so an element the kernel misses fails.
Sizes are chosen off the 128 x 128 x 8 tile grid, aligned (float4 path) and unaligned (scalar path).
"""
import numpy as np
import pytest

from minidl.primitives.gemm import gemm
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

TOL = 1e-4


def _stored(rng, rows, cols, trans, batch=0):
    shape = (cols, rows) if trans else (rows, cols)
    if batch:
        shape = (batch,) + shape
    return rng.standard_normal(shape).astype(np.float32)


def _ref(a, b, trans_a, trans_b):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.matmul(np.swapaxes(a64, -1, -2) if trans_a else a64, np.swapaxes(b64, -1, -2) if trans_b else b64)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (7, 5, 3), (129, 131, 9), (260, 132, 100),
                                     (300, 257, 31), (128, 128, 128), (33, 517, 250), (300, 50, 70),
                                     (64, 65, 17)])
def test_sgemm_matches_float64(trans_a, trans_b, M, N, K):
    import cupy

    rng = np.random.default_rng(M * 1000 + N * 10 + K)
    a, b = _stored(rng, M, K, trans_a), _stored(rng, K, N, trans_b)
    out = cupy.full((M, N), np.nan, dtype=cupy.float32)
    gemm(cupy.asarray(a), cupy.asarray(b), trans_a=trans_a, trans_b=trans_b, out=out)
    assert rel_err(cupy.asnumpy(out), _ref(a, b, trans_a, trans_b)) <= TOL


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)])
def test_sgemm_batched_and_broadcast(trans_a, trans_b):
    import cupy

    rng = np.random.default_rng(1)
    a = _stored(rng, 70, 45, trans_a, batch=3)
    b = _stored(rng, 45, 150, trans_b)          # shared by the 3 matrices of a
    got = gemm(cupy.asarray(a), cupy.asarray(b), trans_a=trans_a, trans_b=trans_b)
    assert got.shape == (3, 70, 150)
    assert rel_err(cupy.asnumpy(got), _ref(a, b, trans_a, trans_b)) <= TOL


@pytest.mark.parametrize("M, N, K", [(40, 36, 5000), (130, 3, 3001), (20, 300, 4000)])
def test_sgemm_split_k(M, N, K):
    """Few output tiles and a long reduction: the launcher splits K and sums the slices."""
    import cupy
    from minidl.primitives.cuda.gemm import split_k_plan

    assert split_k_plan(M, N, K, 1)[0] > 1          # the path under test is really taken
    rng = np.random.default_rng(2)
    a, b = _stored(rng, M, K, False), _stored(rng, K, N, False)
    prior = rng.standard_normal((M, N)).astype(np.float32)
    out = cupy.asarray(prior)
    gemm(cupy.asarray(a), cupy.asarray(b), alpha=0.75, beta=-1.5, out=out)
    assert rel_err(cupy.asnumpy(out), 0.75 * _ref(a, b, False, False) - 1.5 * prior) <= TOL


def test_sgemm_alpha_beta_and_nan_ignored_when_beta_zero():
    import cupy

    rng = np.random.default_rng(3)
    a, b = _stored(rng, 150, 70, False), _stored(rng, 70, 190, True)
    prior = rng.standard_normal((150, 190)).astype(np.float32)
    out = cupy.asarray(prior)
    gemm(cupy.asarray(a), cupy.asarray(b), trans_b=True, alpha=2.0, beta=0.5, out=out)
    assert rel_err(cupy.asnumpy(out), 2.0 * _ref(a, b, False, True) + 0.5 * prior) <= TOL
    out = cupy.full((150, 190), np.nan, dtype=cupy.float32)
    gemm(cupy.asarray(a), cupy.asarray(b), trans_b=True, alpha=-3.0, out=out)
    assert rel_err(cupy.asnumpy(out), -3.0 * _ref(a, b, False, True)) <= TOL


def test_sgemm_matches_cublas_and_noncontiguous_out():
    import cupy

    rng = np.random.default_rng(4)
    a = cupy.asarray(_stored(rng, 333, 222, False))
    b = cupy.asarray(_stored(rng, 222, 111, False))
    ours = gemm(a, b)
    theirs = gemm(a, b, use_cublas=True)
    assert rel_err(cupy.asnumpy(ours), cupy.asnumpy(theirs)) <= TOL
    big = cupy.full((111, 333), np.nan, dtype=cupy.float32)
    out_t = big.T                                   # not C-contiguous: written through a scratch copy
    gemm(a, b, out=out_t)
    assert rel_err(cupy.asnumpy(big.T), cupy.asnumpy(theirs)) <= TOL


def test_sgemm_gpu_rejects_float64_without_cublas():
    import cupy

    a = cupy.ones((3, 4), dtype=cupy.float64)
    with pytest.raises(TypeError, match="gemm: the GPU kernels are float32, float16 and bfloat16, got float64"):
        gemm(a, a.T)
    assert gemm(a, a.T, use_cublas=True).shape == (3, 3)


# ------------------------------------------------------------------------------------------------
# The bias epilogue (nn.Linear's y = x W^T + b in one launch) on every kernel that takes it.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M, N, K", [(7, 5, 3), (300, 257, 31), (33, 517, 250), (16, 40, 4096), (130, 10, 3136)])
@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (False, False)])
def test_sgemm_bias_epilogue(M, N, K, trans_a, trans_b):
    """float32 SGEMM: the plain epilogue, the transposed launch (M <= 64 < N: the bias becomes per row of the
    kernel's problem) and split-K (small M*N, long K: the reduce kernel adds the bias once)."""
    import cupy

    rng = np.random.default_rng(M + N + K)
    a, b = _stored(rng, M, K, trans_a), _stored(rng, K, N, trans_b)
    bias = rng.standard_normal(N).astype(np.float32)
    out = rng.standard_normal((M, N)).astype(np.float32)
    got = gemm(cupy.asarray(a), cupy.asarray(b), trans_a=trans_a, trans_b=trans_b, alpha=0.75, beta=0.5,
               out=cupy.asarray(out), bias=cupy.asarray(bias))
    expected = 0.75 * (_ref(a, b, trans_a, trans_b) + bias) + 0.5 * out
    assert rel_err(cupy.asnumpy(got), expected) <= TOL


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32-tf32"])
@pytest.mark.parametrize("M, N, K", [(64, 40, 32), (256, 384, 96), (1000, 1536, 384), (48, 1000, 200)])
@pytest.mark.parametrize("kernel", ["auto", "mma_sync"])
def test_tensor_core_gemm_bias_epilogue(dtype, M, N, K, kernel):
    """The tensor-core GEMMs (wgmma where it takes the problem, and mma.sync forced): bias of the output's dtype,
    added before rounding (one rounding, as torch's addmm)."""
    import cupy

    import minidl.primitives as P
    from minidl.primitives import _common

    name = "float32" if dtype.startswith("float32") else dtype
    math = "tf32" if dtype.endswith("tf32") else "fp32"
    rng = np.random.default_rng(M * 7 + N)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((N, K)).astype(np.float32)
    bias = (rng.standard_normal(N) * 4).astype(np.float32)
    dev = lambda x: cupy.asarray(x).astype(name)  # noqa: E731
    previous = _common.tensor_core_gemm
    P.set_tensor_core_gemm(kernel)
    try:
        got = P.gemm(dev(a), dev(b), trans_b=True, bias=dev(bias), math=math)
        plain = P.gemm(dev(a), dev(b), trans_b=True, math=math)
    finally:
        P.set_tensor_core_gemm(previous)
    a64, b64 = cupy.asnumpy(dev(a)).astype(np.float64), cupy.asnumpy(dev(b)).astype(np.float64)
    expected = a64 @ b64.T + cupy.asnumpy(dev(bias)).astype(np.float64)
    tol = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 2e-3}[name]
    assert got.dtype == name and rel_err(cupy.asnumpy(got).astype(np.float64), expected) <= tol
    # the same product as without the bias, then the bias: equal up to one rounding of the output
    unfused = cupy.asnumpy(plain).astype(np.float64) + cupy.asnumpy(dev(bias)).astype(np.float64)
    assert rel_err(cupy.asnumpy(got).astype(np.float64), unfused) <= tol


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("M, N, K", [(64, 40, 32), (1000, 1536, 384), (48, 1000, 200)])
@pytest.mark.parametrize("kernel", ["auto", "mma_sync"])
def test_tensor_core_gemm_float32_bias_of_half_operands(dtype, M, N, K, kernel):
    """A float32 bias with 16-bit operands (an autocast Linear's, not cast): added to the fp32 sums before the one
    rounding, on wgmma and on mma.sync. Each element's product is 1 (exactly) plus a bias just above half a unit in
    the last place of 1: the sum rounds up, where a bias first rounded to 16 bits (h exactly) would tie and round
    to even (1.0); the random rows match the NumPy reference at the output's rounding."""
    import cupy
    import ml_dtypes

    import minidl.primitives as P
    from minidl.primitives import _common

    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    half_ulp = 2.0 ** (-8 if dtype == "bfloat16" else -11)
    rng = np.random.default_rng(M + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K)).astype(np.float32)
    a[:8] = 0.0                   # rows 0-7 of a are e_0 and column 0 of b is 1: their products are exactly 1
    a[:8, 0] = b[:, 0] = 1.0
    b16 = b.astype(np_dtype)
    bias = np.full(N, half_ulp * (1 + 2.0 ** -12), np.float32)
    bias[N // 2:] = rng.standard_normal(N - N // 2).astype(np.float32)
    previous = _common.tensor_core_gemm
    P.set_tensor_core_gemm(kernel)
    try:
        got = P.gemm(cupy.asarray(a.astype(np_dtype)), cupy.asarray(b16), trans_b=True, bias=cupy.asarray(bias))
    finally:
        P.set_tensor_core_gemm(previous)
    assert got.dtype == np_dtype
    got = cupy.asnumpy(got).astype(np.float32)
    np.testing.assert_array_equal(got[:8, :N // 2], np.float32(1.0 + 2 * half_ulp))   # rounded up, once
    want = P.gemm(a.astype(np_dtype), b16, trans_b=True, bias=bias).astype(np.float32)   # the NumPy reference
    assert rel_err(got.astype(np.float64), want.astype(np.float64)) <= (2e-3 if dtype == "float16" else 1e-2)


def test_linear_layer_runs_its_bias_in_the_gemm():
    """nn.Linear on the GPU: no separate add launch for the bias; values as torch's."""
    import cupy

    import minidl
    from minidl import profiler

    rng = np.random.default_rng(0)
    layer = minidl.nn.Linear(96, 40).to("cuda")
    x = minidl.tensor(rng.standard_normal((70, 96)).astype(np.float32), device="cuda")
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        y = layer(x)
        cupy.cuda.Device().synchronize()
    assert sum(r["launches"] for r in prof.key_averages() if r["name"] == "gemm") == 1
    w, b = layer.weight.detach().cpu().numpy(), layer.bias.detach().cpu().numpy()
    expected = x.cpu().numpy().astype(np.float64) @ w.T.astype(np.float64) + b
    assert rel_err(y.detach().cpu().numpy(), expected) <= TOL


def test_the_profiler_counts_the_launches_of_a_plan_made_before_it():
    """A launcher keeps its kernel in a launch plan (cuda/gemm.py's, made on the first call of a problem): a profile
    begun after the plan still counts each of its launches, and none once it has ended."""
    import cupy

    import minidl
    from minidl import profiler
    from minidl.primitives import _common

    layer = minidl.nn.Linear(64, 32).to("cuda")
    x = minidl.randn(16, 64).to("cuda")
    layer(x)   # the problem's plan, made outside any profile
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        assert _common.launch_counter is not None
        layer(x)
        layer(x)
        cupy.cuda.Device().synchronize()
    assert _common.launch_counter is None
    assert sum(r["launches"] for r in prof.key_averages() if r["name"] == "gemm") == 2


@pytest.mark.parametrize("M, N, K, bias", [(300, 50, 70, True),     # one launch
                                           (40, 300, 90, True),     # few rows: the kernel computes C^T (swapped)
                                           (40, 36, 5000, False),   # split-K: a reduction launch and its workspace
                                           (20, 300, 4000, True)])  # both
def test_sgemm_launch_plans_serve_new_addresses(M, N, K, bias):
    """cuda/gemm.py's launch plans (issue 23): sgemm keeps a plan per problem and operand alignment, and gemm() plans a
    2-D problem that ran as one: later calls of the problem on arrays at new addresses (the pool's next blocks) are
    right, the plans are not made again, and an operand one element past a 16-byte boundary (the scalar loads) is
    another plan, also right."""
    import cupy

    from minidl.primitives.cuda import gemm as cuda_gemm

    rng = np.random.default_rng(M + N + K)
    cuda_gemm._planned.clear()
    cuda_gemm._sgemm_plans.clear()
    for step in range(4):
        a, b = _stored(rng, M, K, False), _stored(rng, K, N, True)
        c = rng.standard_normal(N).astype(np.float32) if bias else None
        if step == 3:   # C-contiguous a, 4 bytes past a 16-byte boundary
            flat = cupy.asarray(np.concatenate([np.zeros(1, np.float32), a.reshape(-1)]))
            ga = flat[1:].reshape(M, K)
            assert ga.flags.c_contiguous and ga.data.ptr % 16 == 4
        else:
            ga = cupy.asarray(a)
        keep = [cupy.zeros(step * 1000 + 3, cupy.float32)]   # moves the pool's next blocks
        got = gemm(ga, cupy.asarray(b), trans_b=True, bias=None if c is None else cupy.asarray(c))
        want = _ref(a, b, False, True) + (0 if c is None else c.astype(np.float64))
        assert rel_err(cupy.asnumpy(got), want) <= TOL, step
        assert len(cuda_gemm._sgemm_plans) == (1 if step < 3 else 2), step
        assert len(cuda_gemm._planned) == (1 if step < 3 else 2), step
        del keep

