"""The Hopper convolution (kernels/convolution_wgmma.cu: implicit GEMM with TMA boxes, wgmma) against the
float64 NumPy reference, on an sm_90 GPU.

Forced with set_tensor_core_gemm("wgmma"), so a problem the kernels declined would fail here instead of
passing on the mma.sync kernels. Problems chosen for what the boxes must get right: output rectangles
that pack several images into one tile (small feature maps), padding larger than the window's overlap,
stride 2 (TMA's element strides), dilation, 1x1 and 5x3 filters, 1-D, channel counts that are not
multiples of the 64-channel k step, several output-channel tiles, split-K filter gradients; both
layouts; bias, alpha and beta. Outputs are poisoned with NaN first. Tolerances as
tests/gpu/test_convolution_tc_gpu.py.
"""
import numpy as np
import pytest

from minidl.primitives.convolution import convolution_forward
from minidl.primitives.gemm import set_tensor_core_gemm
from tests.conftest import rel_err
from tests.gpu.test_convolution_tc_gpu import KINDS, _np_dtype, _result_shape, _run, _setup, _to_gpu

pytestmark = pytest.mark.gpu

# (name, N, C, spatial in, K, kernel, padding, stride, dilation)
PROBLEMS = [
    ("3x3_c64_k128", 2, 64, (12, 10), 128, (3, 3), 1, 1, 1),
    ("small_maps_pack_images", 9, 32, (4, 4), 40, (3, 3), 1, 1, 1),   # 4x4 outputs: 8 images a tile
    ("c72_k264_3_tiles", 2, 72, (9, 7), 264, (3, 3), 1, 1, 1),        # partial k step, 3 BN=128 tiles
    ("5x3_dil2_pad", 3, 40, (11, 13), 24, (5, 3), (4, 2), 1, 2),
    ("1x1", 4, 32, (7, 9), 16, (1, 1), 0, 1, 1),
    ("1d", 3, 32, (37,), 32, (3,), 2, 1, 1),
    ("stride2", 2, 32, (15, 16), 48, (3, 3), 1, 2, 1),                # fprop / wgrad only on wgmma
    ("wide_rows", 1, 32, (3, 130), 16, (3, 3), 1, 1, 1),               # BQ = 128
    ("c16_fwd_declines", 2, 16, (8, 8), 24, (3, 3), 1, 1, 1),          # forward on mma.sync (C < 32)
    ("wgrad_split", 16, 64, (16, 16), 64, (3, 3), 1, 1, 1),
]
DIRECTIONS = ("forward", "backward_data", "backward_filter")


@pytest.fixture(autouse=True)
def _wgmma_only():
    cupy = pytest.importorskip("cupy")
    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("wgmma needs compute capability 9.0 (H100 / H200)")
    set_tensor_core_gemm("wgmma")
    yield
    set_tensor_core_gemm("auto")


def _wgmma_takes(direction, kind, problem, layout="NHWC"):
    stride, channels = problem[7], problem[2]
    if direction == "backward_data" and stride != 1:
        return False
    if direction == "forward" and channels < 32:   # mostly zeros in a 128-byte k step: mma.sync runs it
        return False
    if direction == "backward_filter" and kind == "tf32":   # only channels-first, stride 1, rows of 4k pixels
        return layout == "NCHW" and stride == 1 and _out_width(problem) % 4 == 0
    return True


def _out_width(problem):
    _, _, _, spatial, _, kernel, padding, stride, dilation = problem
    pad = padding if isinstance(padding, int) else padding[-1]
    return (spatial[-1] + 2 * pad - dilation * (kernel[-1] - 1) - 1) // stride + 1


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p[0] for p in PROBLEMS])
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_wgmma_convolution_matches_float64(kind, direction, layout, problem):
    import cupy

    dtype, tol = KINDS[kind]
    desc, x, w, dy = _setup(problem, layout, seed=len(problem[0]))
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, dtype) for a in (x, w, dy))
    want = _run(direction, "direct", desc, x64, w64, dy64, layout)
    out = cupy.full(_result_shape(direction, x, w, dy), np.nan, dtype=_np_dtype(dtype))
    if not _wgmma_takes(direction, kind, problem, layout):
        with pytest.raises(RuntimeError, match="wgmma"):
            _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, layout, out=out, math="tf32")
        set_tensor_core_gemm("auto")   # ... and "auto" computes it on the mma.sync kernels
    got = _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, layout, out=out, math="tf32")
    assert got is out
    assert rel_err(cupy.asnumpy(out.astype(cupy.float32)), want) <= tol


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", ["fp16", "bf16"])
def test_wgmma_alpha_beta_and_bias(kind, direction):
    import cupy

    dtype, tol = KINDS[kind]
    desc, x, w, dy = _setup(PROBLEMS[2], "NHWC", seed=3)
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, dtype) for a in (x, w, dy))
    rng = np.random.default_rng(4)
    prior, prior64 = _to_gpu(rng.standard_normal(_result_shape(direction, x, w, dy)), dtype)
    if direction == "forward":
        bias, bias64 = _to_gpu(rng.standard_normal(w.shape[0]), dtype)
        want = convolution_forward(x64, w64, desc, bias64, layout="NHWC", algo="direct")
        got = convolution_forward(gx, gw, desc, bias, layout="NHWC", algo="implicit_gemm_tc", alpha=0.5, beta=-0.75,
                                  out=prior, math="tf32")
    else:
        want = _run(direction, "direct", desc, x64, w64, dy64, "NHWC")
        got = _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, "NHWC", alpha=0.5, beta=-0.75, out=prior,
                   math="tf32")
    want = 0.5 * want - 0.75 * prior64
    assert got is prior
    assert rel_err(cupy.asnumpy(got.astype(cupy.float32)), want) <= tol


def test_a_planned_convolution_runs_on_new_addresses():
    """fprop / dgrad problems are planned once (convolution_wgmma._row_plans, keyed without addresses) and later
    launches re-address the tensor maps: the same results on arrays at new addresses, and no new plan."""
    import cupy

    from minidl.primitives.cuda import convolution_wgmma

    problem = ("plan", 2, 32, (9, 11), 64, (3, 3), 1, 1, 1)
    results, plans = [], None
    for step in range(3):
        desc, x, w, dy = _setup(problem, "NHWC", seed=31)
        keep = [cupy.zeros(step * 4096 + 8, cupy.float32)]   # moves the pool's next blocks
        (gx, _), (gw, _), (gdy, _) = (_to_gpu(a, "bfloat16") for a in (x, w, dy))
        y = _run("forward", "implicit_gemm_tc", desc, gx, gw, gdy, "NHWC")
        dx = _run("backward_data", "implicit_gemm_tc", desc, gx, gw, gdy, "NHWC")
        results.append([cupy.asnumpy(a).view(np.uint16) for a in (y, dx)])
        if step == 0:
            plans = len(convolution_wgmma._row_plans)
        del keep
    for later in results[1:]:
        assert all((a == b).all() for a, b in zip(later, results[0]))
    assert len(convolution_wgmma._row_plans) == plans


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_wgmma_first_layer_channels_padded(layout):
    """C = 3 (a first layer): TMA cannot read 6-byte rows, so for the filter gradient the launcher zero-pads
    the channels to 8 and the wgmma kernel runs; the padded channels never reach the result (alpha / beta
    blend dw's own). The forward declines C < 32 (mostly zeros per k step) and runs on mma.sync."""
    import cupy

    desc, x, w, dy = _setup(("c3", 4, 3, (17, 15), 32, (3, 3), 1, 1, 1), layout, seed=21)
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, "bfloat16") for a in (x, w, dy))
    want = _run("backward_filter", "direct", desc, x64, w64, dy64, layout)
    prior, prior64 = _to_gpu(np.random.default_rng(22).standard_normal(want.shape), "bfloat16")
    got = _run("backward_filter", "implicit_gemm_tc", desc, gx, gw, gdy, layout, alpha=2.0, beta=0.5, out=prior)
    assert rel_err(cupy.asnumpy(got.astype(cupy.float32)), 2.0 * want + 0.5 * prior64) <= 1e-2
    with pytest.raises(RuntimeError, match="< 32"):
        _run("forward", "implicit_gemm_tc", desc, gx, gw, gdy, layout)


def test_wgmma_convolution_declines_with_a_reason():
    """K = 3 output channels (output rows of 6 bytes): "wgmma" raises naming why; "auto" runs mma.sync."""
    import cupy

    desc, x, w, dy = _setup(("k3", 2, 16, (8, 8), 3, (3, 3), 1, 1, 1), "NHWC")
    (gx, x64), (gw, w64), _ = (_to_gpu(a, "float16") for a in (x, w, dy))
    with pytest.raises(RuntimeError, match="multiples of 8"):
        convolution_forward(gx, gw, desc, layout="NHWC", algo="implicit_gemm_tc")
    set_tensor_core_gemm("auto")
    got = convolution_forward(gx, gw, desc, layout="NHWC", algo="implicit_gemm_tc")
    want = convolution_forward(x64, w64, desc, layout="NHWC", algo="direct")
    assert rel_err(cupy.asnumpy(got.astype(cupy.float32)), want) <= 2e-3


@pytest.mark.parametrize("epilogue", ["staged", "16byte", "pairs"])
def test_wgmma_convolution_epilogues(epilogue, monkeypatch):
    """Each way the 16-bit output tile can leave (TMA store of the staged tile, 16-byte or pair stores)."""
    import cupy

    from minidl.primitives.cuda import gemm_wgmma

    monkeypatch.setattr(gemm_wgmma, "EPILOGUE", epilogue)
    desc, x, w, dy = _setup(PROBLEMS[4], "NHWC", seed=23)
    (gx, x64), (gw, w64), _ = (_to_gpu(a, "bfloat16") for a in (x, w, dy))
    out = cupy.full(dy.shape, np.nan, dtype=_np_dtype("bfloat16"))
    convolution_forward(gx, gw, desc, layout="NHWC", algo="implicit_gemm_tc", out=out)
    want = convolution_forward(x64, w64, desc, layout="NHWC", algo="direct")
    assert rel_err(cupy.asnumpy(out.astype(cupy.float32)), want) <= 1e-2


@pytest.mark.parametrize("mi, bn", [(1, 256), (2, 128), (1, 128), (2, 64), (1, 64)])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_wgmma_convolution_tile_shapes(mi, bn, direction, monkeypatch):
    """Every tile shape (128 * mi) x bn the launchers may pick, on problems with partial tiles."""
    import cupy

    from minidl.primitives.cuda import gemm_wgmma

    monkeypatch.setattr(gemm_wgmma, "TILE_SHAPES", ((mi, bn),))
    monkeypatch.setattr(gemm_wgmma, "TILE_WIDTHS", (bn,))
    monkeypatch.setattr("minidl.primitives.cuda.convolution_wgmma.TILE_WIDTHS", (bn,))
    for problem in (PROBLEMS[0], PROBLEMS[2], PROBLEMS[4]):
        desc, x, w, dy = _setup(problem, "NHWC", seed=mi * 1000 + bn)
        (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, "bfloat16") for a in (x, w, dy))
        want = _run(direction, "direct", desc, x64, w64, dy64, "NHWC")
        out = cupy.full(_result_shape(direction, x, w, dy), np.nan, dtype=_np_dtype("bfloat16"))
        _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, "NHWC", out=out)
        assert rel_err(cupy.asnumpy(out.astype(cupy.float32)), want) <= 1e-2, problem[0]


# (name, N, C, spatial in, K, kernel, padding, stride, dilation): the TF32 weight gradient read from channels-first
# arrays, k steps of 32 consecutive pixels: runs that span 1, 2, 4, 8 rows, images of fewer pixels than a run (4x4),
# runs past an image's last pixel, K and C not multiples of the tiles, 1x1 (x read as it is: no shifted copies), 5x3
# dilated, 1-D, padding wider than the filter's reach, split-K and not, one image and many.
NCHW_WGRAD = [
    ("w32_c64_k128", 4, 64, (32, 32), 128, (3, 3), 1, 1, 1),
    ("w16_c128_k256_mi2", 6, 128, (16, 16), 256, (3, 3), 1, 1, 1),
    ("w8_c256_k512", 8, 256, (8, 8), 512, (3, 3), 1, 1, 1),
    ("w4_c320_k72", 16, 320, (4, 4), 72, (3, 3), 1, 1, 1),
    ("w12_c40_k136", 3, 40, (7, 12), 136, (3, 3), 1, 1, 1),
    ("w20_dil2_5x3", 2, 24, (9, 20), 48, (5, 3), (4, 2), 1, 2),
    ("w40_1x1", 2, 96, (5, 40), 64, (1, 1), 0, 1, 1),
    ("1d_w64", 3, 32, (64,), 40, (3,), 1, 1, 1),
    ("one_image_c3", 1, 3, (28, 28), 32, (5, 5), 2, 1, 1),
    ("q_wider_than_w", 2, 16, (6, 10), 24, (3, 3), 2, 1, 1),         # Q = 12 > W = 10: x's copies are Q wide
]


@pytest.mark.parametrize("problem", NCHW_WGRAD, ids=[p[0] for p in NCHW_WGRAD])
def test_tf32_filter_gradient_from_channels_first_arrays(problem):
    """The TF32 weight gradient of a channels-first problem runs on the NCHW arrays as they are
    (convolution_backward_filter_wgmma_nchw, no transposes) and matches float64 at TF32's tolerance; alpha and
    beta blend into a poisoned-free prior, and a fresh result is (K, C, R, S) float32."""
    import cupy

    from tests.gpu.launches import kernel_launches, layout_launches

    dtype, tol = KINDS["tf32"]
    desc, x, w, dy = _setup(problem, "NCHW", seed=len(problem[0]) + 7)
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, dtype) for a in (x, w, dy))
    want = _run("backward_filter", "direct", desc, x64, w64, dy64, "NCHW")
    prior, prior64 = _to_gpu(np.random.default_rng(5).standard_normal(w.shape), dtype)
    with kernel_launches() as names:
        got = _run("backward_filter", "implicit_gemm_tc", desc, gx, gw, gdy, "NCHW", math="tf32")
        blended = _run("backward_filter", "implicit_gemm_tc", desc, gx, gw, gdy, "NCHW", math="tf32", alpha=0.5,
                       beta=-0.75, out=prior)
    assert layout_launches(names) == 0 and any("wgmma_nchw" in n for n in names), names
    assert got.shape == w.shape and got.dtype == cupy.float32
    assert rel_err(cupy.asnumpy(got), want) <= tol
    assert blended is prior
    assert rel_err(cupy.asnumpy(blended), 0.5 * want - 0.75 * prior64) <= tol


def test_tf32_channels_first_filter_gradient_declines_strided_and_narrow_rows():
    """Stride 2, or rows that are not multiples of 16 bytes: not a channels-first wgrad; with "wgmma" forced the
    NHWC route declines too (TF32 wgmma cannot read it), naming why."""
    for problem in (PROBLEMS[6], PROBLEMS[0]):    # stride 2; W = 10
        desc, x, w, dy = _setup(problem, "NCHW")
        (gx, _), (gw, _), (gdy, _) = (_to_gpu(a, "float32") for a in (x, w, dy))
        with pytest.raises(RuntimeError, match="TF32 wgmma cannot read"):
            _run("backward_filter", "implicit_gemm_tc", desc, gx, gw, gdy, "NCHW", math="tf32")


@pytest.mark.parametrize("problem", [PROBLEMS[0], PROBLEMS[8]], ids=["wgmma", "c16_forward_on_mma_sync"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fprop_and_dgrad_write_channels_first_memory_through_an_nhwc_view(dtype, problem):
    """An NHWC plan given `out` as an (N, P, Q, K) view of channels-first memory: the wgmma kernels write it
    directly (ConvShape.nchw: columns P*Q apart), the same bits as the NHWC result transposed; where wgmma declines
    (a forward with C < 32) the mma.sync result is transposed into it (layout_transform's out)."""
    import cupy

    from minidl.primitives.convolution import ConvolutionPlan

    set_tensor_core_gemm("auto")
    desc, x, w, dy = _setup(problem, "NHWC", seed=41)
    (gx, _), (gw, _), (gdy, _) = (_to_gpu(a, dtype) for a in (x, w, dy))
    plan = ConvolutionPlan(x.shape, w.shape, desc, device="cuda", dtype=dtype, layout="NHWC", algo="implicit_gemm_tc",
                           math="tf32")
    y_nhwc, dx_nhwc = plan.forward(gx, gw), plan.backward_data(gw, gdy)
    y = cupy.full((y_nhwc.shape[0], y_nhwc.shape[3], *y_nhwc.shape[1:3]), np.nan, dtype=y_nhwc.dtype)
    dx = cupy.full((dx_nhwc.shape[0], dx_nhwc.shape[3], *dx_nhwc.shape[1:3]), np.nan, dtype=dx_nhwc.dtype)
    assert plan.forward(gx, gw, out=y.transpose(0, 2, 3, 1)).data.ptr == y.data.ptr
    plan.backward_data(gw, gdy, out=dx.transpose(0, 2, 3, 1))
    for got, want in ((y, y_nhwc), (dx, dx_nhwc)):
        assert (cupy.asnumpy(got).view(np.uint8) == cupy.asnumpy(want.transpose(0, 3, 1, 2)).view(np.uint8)).all()
