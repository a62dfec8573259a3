"""The Hopper GEMM (kernels/gemm_wgmma.cu: wgmma fed by TMA) against float64 references, on an sm_90 GPU.

Forced with set_tensor_core_gemm("wgmma"), so a problem the kernel declined would fail here instead of
passing on the mma.sync kernel. Every kind (TF32, float16, bfloat16) x transpose x tile width (64, 128,
256), on sizes that are not multiples of the tiles (partial tiles in m, n and k) but whose leading
dimensions are multiples of 16 bytes (TMA's rule); batched, broadcast, alpha/beta, a strided C; the
quiet fall-back to mma.sync under "auto" for what TMA cannot read; a CUDA-graph capture. Outputs are
poisoned with NaN first. Tolerances as tests/gpu/test_gemm_tc_gpu.py.
"""
import ml_dtypes
import numpy as np
import pytest

from minidl.primitives.gemm import gemm, set_tensor_core_gemm
from tests.conftest import rel_err
from tests.gpu.test_gemm_tc_gpu import KINDS, _gpu, _host, _nan_like, _ref, _stored

pytestmark = pytest.mark.gpu

SIZES = [(136, 296, 72), (64, 64, 64), (8, 200, 40), (296, 8, 40), (1000, 704, 520), (256, 264, 1032)]


@pytest.fixture(autouse=True)
def _wgmma_only():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma needs compute capability 9.0 (H100 / H200)")
    set_tensor_core_gemm("wgmma")
    yield
    set_tensor_core_gemm("auto")


@pytest.fixture
def tile_shape(monkeypatch):
    from minidl.primitives.cuda import gemm_wgmma

    def force(mi, bn):
        monkeypatch.setattr(gemm_wgmma, "TILE_SHAPES", ((mi, bn),))
        monkeypatch.setattr(gemm_wgmma, "TILE_WIDTHS", (bn,))
    return force


SHAPES_MI_BN = [(1, 256), (2, 128), (1, 128), (2, 64), (1, 64)]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("mi, bn", SHAPES_MI_BN)
def test_wgmma_matches_float64(kind, trans_a, trans_b, mi, bn, tile_shape):
    tile_shape(mi, bn)
    dtype, tol = KINDS[kind]
    for M, N, K in SIZES:
        rng = np.random.default_rng(M + 7 * N + 13 * K + bn + mi)
        a, b = _stored(rng, M, K, trans_a, dtype), _stored(rng, K, N, trans_b, dtype)
        out = _nan_like((M, N), dtype)
        gemm(_gpu(a), _gpu(b), trans_a=trans_a, trans_b=trans_b, out=out, math="tf32")
        got = _host(out)
        assert got.dtype == np.dtype(dtype)
        assert rel_err(got.astype(np.float64), _ref(a, b, trans_a, trans_b)) <= tol, (M, N, K)
        if kind == "tf32":  # rounded to nearest (ties to even), as the CPU's emulation (ties away)
            emulated = gemm(a, b, trans_a=trans_a, trans_b=trans_b, math="tf32")
            assert rel_err(got, emulated.astype(np.float64)) <= 1e-4, (M, N, K)


@pytest.mark.parametrize("kind", list(KINDS))
def test_wgmma_batched_broadcast_alpha_beta(kind):
    dtype, tol = KINDS[kind]
    rng = np.random.default_rng(11)
    batch, M, N, K = 5, 200, 136, 72
    for a_shape, b_shape in (((batch, M, K), (K, N)), ((M, K), (batch, K, N)), ((batch, M, K), (batch, K, N))):
        a = rng.standard_normal(a_shape).astype(np.float32).astype(dtype)
        b = rng.standard_normal(b_shape).astype(np.float32).astype(dtype)
        c0 = rng.standard_normal((batch, M, N)).astype(np.float32).astype(dtype)
        out = _gpu(c0)
        gemm(_gpu(a), _gpu(b), out=out, alpha=0.5, beta=2.0, math="tf32")
        want = 0.5 * np.matmul(a.astype(np.float64), b.astype(np.float64)) + 2.0 * c0.astype(np.float64)
        assert rel_err(_host(out).astype(np.float64), want) <= tol, (a_shape, b_shape)


def test_wgmma_strided_output():
    """C written through (row, column) strides: here stored transposed, as strided_gemm allows."""
    import cupy

    from minidl.primitives.cuda.gemm import strided_gemm

    rng = np.random.default_rng(12)
    M, N, K = 200, 72, 136
    a, b = _stored(rng, M, K, False, np.float16), _stored(rng, K, N, False, np.float16)
    ct = cupy.full((N, M), np.nan, dtype=cupy.float16)
    strided_gemm(M, N, K, _gpu(a), K, _gpu(b), N, ct, math="tf32", ldc_row=1, ldc_col=M)
    assert rel_err(cupy.asnumpy(ct).T.astype(np.float64), _ref(a, b, False, False)) <= 2e-3


@pytest.mark.parametrize("kind", list(KINDS))
def test_wgmma_copes_with_what_tma_cannot_read(kind):
    """Leading dimensions and batch strides that are not multiples of 16 bytes, a misaligned start (a
    view one element in): the launcher copies such operands into padded rows, and the product is right."""
    dtype, tol = KINDS[kind]
    rng = np.random.default_rng(13)
    for (M, N, K) in ((64, 40, 77), (65, 10, 650), (3, 130, 33)):
        a, b = _stored(rng, M, K, False, dtype), _stored(rng, K, N, True, dtype)
        got = _host(gemm(_gpu(a), _gpu(b), trans_b=True, math="tf32"))
        assert rel_err(got.astype(np.float64), _ref(a, b, False, True)) <= tol, (M, N, K)
    a, b = _stored(rng, 3, 65, False, dtype, batch=4), _stored(rng, 65, 33, False, dtype, batch=4)
    got = _host(gemm(_gpu(a), _gpu(b), math="tf32"))
    assert rel_err(got.astype(np.float64), _ref(a, b, False, False)) <= tol
    big = _gpu(_stored(rng, 1, 64 * 72 + 1, False, dtype))
    a_view = big[0, 1:].reshape(64, 72)          # starts one element past an allocation's (aligned) start
    b = _stored(rng, 72, 48, False, dtype)
    got = _host(gemm(a_view, _gpu(b), math="tf32"))
    assert rel_err(got.astype(np.float64), _ref(_host(a_view), b, False, False)) <= tol


def test_wgmma_and_mma_sync_agree():
    """The two tensor-core kernels compute the same bfloat16 product (both accumulate in fp32)."""
    rng = np.random.default_rng(14)
    a, b = _stored(rng, 384, 512, True, ml_dtypes.bfloat16), _stored(rng, 512, 320, False, ml_dtypes.bfloat16)
    got = _host(gemm(_gpu(a), _gpu(b), trans_a=True, math="tf32")).astype(np.float64)
    set_tensor_core_gemm("mma_sync")
    other = _host(gemm(_gpu(a), _gpu(b), trans_a=True, math="tf32")).astype(np.float64)
    assert rel_err(got, other) <= 1e-2
    assert rel_err(got, _ref(a, b, True, False)) <= 1e-2


def test_wgmma_in_a_cuda_graph():
    """Captured once and replayed on new inputs: the tensor maps are kernel parameters, so the graph
    keeps them; the TF32 transpose's scratch is allocated inside the capture."""
    import cupy

    rng = np.random.default_rng(15)
    for dtype, trans_b in ((np.float16, False), (np.float32, False)):
        a = _gpu(_stored(rng, 256, 128, False, dtype))
        b = _gpu(_stored(rng, 128, 192, trans_b, dtype))
        out = cupy.full((256, 192), np.nan, dtype=dtype)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            gemm(a, b, trans_b=trans_b, out=out, math="tf32")   # warm-up: compiles, builds the maps
            stream.begin_capture()
            gemm(a, b, trans_b=trans_b, out=out, math="tf32")
            graph = stream.end_capture()
            new_a = _stored(rng, 256, 128, False, dtype)
            a[...] = _gpu(new_a)
            out.fill(np.nan)
            graph.launch(stream)
            stream.synchronize()
        want = _ref(new_a, cupy.asnumpy(b), False, trans_b)
        assert rel_err(cupy.asnumpy(out).astype(np.float64), want) <= KINDS["f16" if dtype == np.float16 else "tf32"][1]


@pytest.mark.parametrize("epilogue", ["staged", "16byte", "pairs"])
@pytest.mark.parametrize("kind", ["f16", "bf16"])
@pytest.mark.parametrize("mi, bn", [(1, 256), (2, 128), (2, 64)])
def test_wgmma_epilogues(epilogue, kind, mi, bn, monkeypatch, tile_shape):
    """Each way the 16-bit tile can leave: staged in shared memory and written by a TMA store (the default;
    rows and columns past the edges clipped by the copy engine), 16-byte stores, pairs; batched too."""
    from minidl.primitives.cuda import gemm_wgmma

    monkeypatch.setattr(gemm_wgmma, "EPILOGUE", epilogue)
    tile_shape(mi, bn)
    dtype, tol = KINDS[kind]
    rng = np.random.default_rng(16)
    for M, N, K, batch in ((136, 296, 72, 0), (1000, 704, 520, 0), (200, 136, 72, 3)):
        a = _stored(rng, M, K, False, dtype, batch=batch)
        b = _stored(rng, K, N, False, dtype, batch=batch)
        out = _nan_like((batch, M, N) if batch else (M, N), dtype)
        gemm(_gpu(a), _gpu(b), out=out, math="tf32")
        assert rel_err(_host(out).astype(np.float64), _ref(a, b, False, False)) <= tol, (M, N, K, batch)


def test_a_planned_problem_runs_on_new_addresses():
    """The second launch of a problem comes from its plan (gemm_wgmma._launches, keyed without addresses)
    with tensor maps re-addressed from the first's: right on new operands, and no new plan made."""
    from minidl.primitives.cuda import gemm_wgmma

    rng = np.random.default_rng(17)
    dtype, tol = KINDS["bf16"]
    results, plans = [], None
    for step in range(3):
        a, b = _stored(rng, 200, 136, False, dtype), _stored(rng, 136, 264, True, dtype)
        keep = [_gpu(np.zeros(step * 4096 + 8, np.float32))]   # moves the pool's next blocks
        got = _host(gemm(_gpu(a), _gpu(b), trans_b=True, math="tf32"))
        results.append(rel_err(got.astype(np.float64), _ref(a, b, False, True)))
        if step == 0:
            plans = len(gemm_wgmma._launches)
        del keep
    assert max(results) <= tol, results
    assert len(gemm_wgmma._launches) == plans


@pytest.mark.parametrize("kind", ["bf16", "tf32"])
@pytest.mark.parametrize("bias,out_float32", [(False, False), (True, False), (False, True)])
def test_the_planned_path_of_gemm_equals_the_first_call(kind, bias, out_float32):
    """cuda/gemm.py's _planned: a 2-D problem that ran on a wgmma plan goes from gemm() straight to that plan on
    later calls (new addresses, the same or another operand alignment, a bias, an fp32 result of 16-bit data);
    every call is right, one plan is kept, and a misaligned operand (another key: its call copies, so makes no
    plan) and a kernel setting changed in between are not served from the plan made before (the mma.sync kernel's
    call makes a plan of its own, and runs from it after)."""
    import cupy

    from minidl.primitives.cuda import gemm as cuda_gemm

    if out_float32 and kind == "tf32":
        pytest.skip("out_dtype is for 16-bit data")
    rng = np.random.default_rng(23)
    dtype, tol = KINDS[kind]
    cuda_gemm._planned.clear()
    M, N, K = 264, 200, 136
    for step in range(4):
        a, b = _stored(rng, M + 8, K, False, dtype), _stored(rng, K, N, True, dtype)
        c = _stored(rng, 1, N, False, dtype)[0] if bias else None
        a, gb = a[:M], _gpu(b)
        if step == 3:   # C-contiguous, one element past a 16-byte boundary: another key (TMA needs a padded copy)
            flat = _gpu(np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)]))
            ga = flat[1:].reshape(M, K)
            assert ga.flags.c_contiguous and ga.data.ptr % 16 != 0
        else:
            ga = _gpu(a)
        keep = [cupy.zeros(step * 1000 + 3, cupy.float32)]   # moves the pool's next blocks
        got = gemm(ga, gb, trans_b=True, math="tf32", bias=None if c is None else _gpu(c),
                   out_dtype=np.float32 if out_float32 else None)
        assert got.dtype == (np.float32 if out_float32 or kind == "tf32" else dtype)
        want = _ref(a, b, False, True) + (0 if c is None else c.astype(np.float64))
        assert rel_err(_host(got).astype(np.float64), want) <= tol, (step, kind)
        assert len(cuda_gemm._planned) == 1, step   # planned at the first call; the copy-needing call adds none
        del keep
    set_tensor_core_gemm("mma_sync")   # another setting: the plan does not serve it (the key holds the choice)
    try:
        for call in range(2):   # the first call makes the mma.sync kernel's plan, the second runs from it
            got = gemm(_gpu(a), _gpu(b), trans_b=True, math="tf32", out_dtype=np.float32 if out_float32 else None)
            assert rel_err(_host(got).astype(np.float64), _ref(a, b, False, True)) <= tol, call
            # a plan of its own; but a float32 result of 16-bit data is the 16-bit product cast there (two launches):
            # no plan
            assert len(cuda_gemm._planned) == (1 if out_float32 else 2), call
    finally:
        set_tensor_core_gemm("wgmma")


def test_tensor_map_readdressed_equals_a_fresh_encode():
    """cuTensorMapReplaceAddress on a map of the same shape gives the bytes a full encode gives; an address
    TMA cannot take (not 16-byte aligned) is still refused with TensorMapError."""
    import cupy

    from minidl.primitives.cuda import tma

    a, b = cupy.empty(4096, dtype=cupy.float16), cupy.empty(4096, dtype=cupy.float16)
    shape = ((64, 32, 1), (128, 4096), (64, 32, 1))
    tma._recipes.clear()
    first = tma.encode_tiled("float16", a.data.ptr, *shape)
    again = tma.encode_tiled("float16", b.data.ptr, *shape)     # the template re-addressed
    tma._recipes.clear()
    fresh = tma.encode_tiled("float16", b.data.ptr, *shape)
    assert again.tobytes() == fresh.tobytes() and first.tobytes() != again.tobytes()
    with pytest.raises(tma.TensorMapError):
        tma.encode_tiled("float16", b.data.ptr + 2, *shape)
    # a plan's MapRecipe: its own template, re-addressed at every call; the bytes of a fresh encode
    recipe = tma.MapRecipe("float16", *shape)
    assert recipe.at(a.data.ptr).tobytes() == first.tobytes()
    assert recipe.at(b.data.ptr).tobytes() == fresh.tobytes()
    tma._recipes.clear()
    assert recipe.at(a.data.ptr).tobytes() == first.tobytes()
    # an address seen before: the map made then (not re-addressed again), its bytes unchanged by the maps since
    assert recipe.at(a.data.ptr) is recipe.at(a.data.ptr)
    others = [cupy.empty(4096, dtype=cupy.float16) for _ in range(tma._MAPS_PER_RECIPE + 1)]   # evicts a's
    for o in others:
        fresh_o = tma.MapRecipe("float16", *shape).at(o.data.ptr)
        assert recipe.at(o.data.ptr).tobytes() == fresh_o.tobytes()
    assert recipe.at(a.data.ptr).tobytes() == first.tobytes()


@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_wgmma_bf16_data_into_float32_output(trans_a, trans_b, accumulate):
    """out_dtype=float32 for bfloat16 data (the persistent RNN's bf16 weight gradients): the fp32 accumulators stored
    as they are, beta reading the float32 C; against float64 products of the same bfloat16 values."""
    import cupy

    from minidl.primitives.cuda.gemm_wgmma import gemm_wgmma

    rng = np.random.default_rng(7)
    M, N, K = 300, 200, 1120
    a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(ml_dtypes.bfloat16)
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = (a64.T if trans_a else a64) @ (b64.T if trans_b else b64) + (c0 if accumulate else 0)
    A, B, C = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c0)
    assert gemm_wgmma(M, N, K, A.data.ptr, M if trans_a else K, B.data.ptr, K if trans_b else N, C.data.ptr,
                      dtype=A.dtype, trans_a=trans_a, trans_b=trans_b, alpha=1.0, beta=1.0 if accumulate else 0.0,
                      ldc_row=N, ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, out_dtype=np.float32)
    got = C.get()
    assert got.dtype == np.float32
    assert rel_err(got, want) <= 1e-5   # fp32 accumulation of exact bf16 products: no output rounding to 16 bits


def _split_problem(kind, out_float32, M=304, N=200, K=8200, seed=3):
    """A weight gradient's shape (few output tiles, a long K) for the split-K tests: A stored (K, M), B (K, N) as a
    Linear layer's dW = dy^T x reads them (TF32: both K-major, which TF32 wgmma reads without a transposed copy);
    the stored operands, C's dtype, and a float64 reference of op(A) op(B). (Rows of 16-byte multiples: an operand
    TMA cannot read is copied first, and such a call leaves no plan to inspect.)"""
    dtype = KINDS[kind][0]
    rng = np.random.default_rng(seed)
    trans_a, trans_b = (False, True) if kind == "tf32" else (True, False)
    a, b = _stored(rng, M, K, trans_a, dtype), _stored(rng, K, N, trans_b, dtype)
    out = np.float32 if (out_float32 or kind == "tf32") else dtype
    return a, b, np.dtype(out), _ref(a, b, trans_a, trans_b)


def _run_split(a, b, out_dtype, beta=0.0, c0=None, bias=None):
    import cupy

    from minidl.primitives.cuda import gemm_wgmma as launcher

    trans_a = a.dtype != np.float32
    (K, M), N = (a.shape if trans_a else a.shape[::-1]), b.shape[1 if trans_a else 0]
    A, B = _gpu(a), _gpu(b)
    C = _gpu(np.full((M, N), np.nan, out_dtype) if c0 is None else c0.astype(out_dtype))
    bias_arr = None if bias is None else cupy.asarray(bias.astype(np.float32))
    assert launcher.gemm_wgmma(M, N, K, A.data.ptr, M if trans_a else K, B.data.ptr, N if trans_a else K, C.data.ptr,
                               dtype=A.dtype, trans_a=trans_a, trans_b=not trans_a, alpha=1.0, beta=beta, ldc_row=N,
                               ldc_col=1, batch=1, stride_a=0, stride_b=0, stride_c=0, out_dtype=out_dtype,
                               bias_ptr=0 if bias_arr is None else bias_arr.data.ptr,
                               bias_f32=int(bias_arr is not None and out_dtype.itemsize == 2))
    split = launcher.last_plan[-1] if launcher.last_plan is not None else None
    return _host(C), split


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("out_float32", [False, True])
def test_split_k_sums_the_slices_in_the_kernel(kind, out_float32, monkeypatch):
    """Split-K (GemmProblem::split_fixup): a weight gradient's shape runs in slices of K side by side; the slice
    that finishes last adds all the slices' fp32 sums in slice order and stores the tile. Against float64 at the
    kind's tolerance (fp32 output: 1e-5, nothing rounded to 16 bits), against the unsplit kernel (SPLIT_K off) to
    1e-4 (the order of the fp32 sums differs, and the tensor cores' accumulation is not IEEE's round-to-nearest),
    bit for bit the same run to run (whichever slice finishes last), and the arrival counters are zero again after
    the launch."""
    import cupy

    from minidl.primitives.cuda import _launch
    from minidl.primitives.cuda import gemm_wgmma as launcher

    a, b, out_dtype, want = _split_problem(kind, out_float32)
    first, split = _run_split(a, b, out_dtype)
    assert split is not None, "the problem was expected to run split"
    tol = 1e-5 if out_dtype == np.float32 and kind != "tf32" else KINDS[kind][1]
    assert rel_err(first.astype(np.float64), want) <= tol
    again, _ = _run_split(a, b, out_dtype)
    np.testing.assert_array_equal(again.view(np.uint8), first.view(np.uint8))
    assert not _launch.arrival_counters(1).get().any()
    monkeypatch.setattr(launcher, "SPLIT_K", False)
    unsplit, none = _run_split(a, b, out_dtype)
    assert none is None
    assert rel_err(first.astype(np.float64), unsplit.astype(np.float64)) <= (1e-4 if out_dtype == np.float32 else tol)
    cupy.cuda.Device().synchronize()


@pytest.mark.parametrize("out_float32", [False, True])
def test_split_k_epilogue_after_the_sum(out_float32):
    """beta and the bias apply once, to the summed tile (the last slice's epilogue), not per slice."""
    a, b, out_dtype, want = _split_problem("bf16", out_float32, M=200, N=136, K=6000, seed=5)
    rng = np.random.default_rng(9)
    c0 = rng.standard_normal(want.shape).astype(np.float32)
    bias = rng.standard_normal(want.shape[1]).astype(np.float32)
    c0_stored = c0.astype(out_dtype).astype(np.float64)
    got, split = _run_split(a, b, out_dtype, beta=0.5, c0=c0, bias=bias)
    assert split is not None
    tol = 1e-5 if out_dtype == np.float32 else KINDS["bf16"][1]
    assert rel_err(got.astype(np.float64), want + bias + 0.5 * c0_stored) <= tol


def test_split_k_in_a_cuda_graph():
    """Captured on a stream whose arrival counters exist (a warm-up launch on it made them), the split launch
    replays on new inputs; on a fresh stream, whose counters cannot be made inside a capture, the capture takes
    the problem unsplit. Both replays equal the float64 reference."""
    import cupy

    from minidl.primitives.cuda import gemm_wgmma as launcher

    rng = np.random.default_rng(21)
    M, N, K = 304, 200, 8200
    a = _gpu(_stored(rng, M, K, True, ml_dtypes.bfloat16))
    b = _gpu(_stored(rng, K, N, False, ml_dtypes.bfloat16))
    for warm in (True, False):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            if warm:
                gemm(a, b, trans_a=True, out_dtype=np.float32)   # makes this stream's counters (and the plan)
                assert launcher.last_plan[-1] is not None
            stream.synchronize()
            stream.begin_capture()
            out = gemm(a, b, trans_a=True, out_dtype=np.float32)
            graph = stream.end_capture()
            new_a = _stored(rng, M, K, True, ml_dtypes.bfloat16)
            a[...] = _gpu(new_a)
            graph.launch(stream)
            graph.launch(stream)   # (twice: the counters are zero again after each replay)
            stream.synchronize()
        assert rel_err(cupy.asnumpy(out).astype(np.float64), _ref(new_a, _host(b), True, False)) <= 1e-5, warm
