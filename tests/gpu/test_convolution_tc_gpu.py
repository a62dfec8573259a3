"""Tensor-core convolution (implicit_gemm_tc: TF32, fp16, bf16) and the FFT convolution on the GPU,
against the float64 NumPy reference.

Every direction x layout x element kind on awkward problems: odd channel counts (the scalar gather
path), channels not a multiple of 8, odd spatial sizes, stride 2, dilation, padding, 1-D, 1x1, several
N tiles, split-K filter gradients, the dw^T variant (K <= 64). Outputs are poisoned with NaN (beta = 0
must not read them; every element must be written). Tolerances (docs/DESIGN.md, "Testing"): TF32 <=
5e-3 relative; fp16 2e-3 and bf16 1e-2 (about 4x the unit roundoff of the output's dtype, 2^-11 and
2^-8, since the result is rounded once); the reference runs in float64 on the half-rounded inputs.
"""
import numpy as np
import pytest

from minidl.primitives.convolution import (ConvolutionDescriptor, convolution_backward_data,
                                           convolution_backward_filter, convolution_forward,
                                           convolution_output_shape, find_convolution_algorithms,
                                           get_convolution_algorithm)
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

DIRECTIONS = ("forward", "backward_data", "backward_filter")
KINDS = {"tf32": ("float32", 5e-3), "fp16": ("float16", 2e-3), "bf16": ("bfloat16", 1e-2)}

# (name, N, C, spatial in, K, kernel, padding, stride, dilation)
PROBLEMS = [
    ("3x3_vec", 2, 16, (9, 11), 32, (3, 3), 1, 1, 1),
    ("odd_c13_k7_stride2", 3, 13, (7, 9), 7, (3, 3), 1, 2, 1),           # scalar path (C, K odd)
    ("c12_k20_not_mult8", 2, 12, (8, 7), 20, (3, 3), 1, 1, 1),           # vec for tf32, scalar for half
    ("dil2_k72_5x3", 2, 8, (10, 9), 72, (5, 3), (2, 1), 1, 2),            # wgrad without swap (K > 64)
    ("1x1_k136", 2, 24, (6, 7), 136, (1, 1), 0, 1, 1),                     # 2 N tiles of 128 / 64
    ("1d", 2, 8, (20,), 16, (3,), 1, 1, 1),
    ("first_layer_c3_7x7_s2", 2, 3, (15, 17), 16, (7, 7), 3, 2, 1),
    ("split_k_swap", 8, 16, (32, 32), 32, (3, 3), 1, 1, 1),               # dw^T, 64 split-K slices
    ("split_k_noswap", 4, 8, (16, 16), 96, (3, 3), 1, 1, 1),
    ("many_m_tiles", 4, 32, (23, 21), 40, (3, 3), 1, 1, 1),
]


def _np_dtype(name):
    if name == "bfloat16":
        import cupy

        if hasattr(cupy, "bfloat16"):
            return np.dtype(cupy.bfloat16)
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _to_gpu(a, dtype):
    """float64 numpy -> cupy array of `dtype`; also the float64 values it holds (the rounded inputs)."""
    import cupy

    g = cupy.asarray(a.astype(np.float32)).astype(_np_dtype(dtype))
    return g, cupy.asnumpy(g.astype(cupy.float32)).astype(np.float64)


def _setup(problem, layout, seed=0):
    name, N, C, size, K, kernel, pad, stride, dil = problem
    desc = ConvolutionDescriptor(padding=pad, stride=stride, dilation=dil, spatial_dims=len(size))
    if layout == "NCHW":
        x_shape, w_shape = (N, C) + size, (K, C) + kernel
    else:
        x_shape, w_shape = (N,) + size + (C,), (K,) + kernel + (C,)
    y_shape = convolution_output_shape(x_shape, w_shape, desc, layout)
    rng = np.random.default_rng(seed)
    return desc, rng.standard_normal(x_shape), rng.standard_normal(w_shape), rng.standard_normal(y_shape)


def _run(direction, algo, desc, x, w, dy, layout, **kw):
    if direction == "forward":
        return convolution_forward(x, w, desc, algo=algo, layout=layout, **kw)
    if direction == "backward_data":
        return convolution_backward_data(w, dy, desc, x.shape, algo=algo, layout=layout, **kw)
    return convolution_backward_filter(x, dy, desc, w.shape, algo=algo, layout=layout, **kw)


def _result_shape(direction, x, w, dy):
    return {"forward": dy.shape, "backward_data": x.shape, "backward_filter": w.shape}[direction]


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p[0] for p in PROBLEMS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", list(KINDS))
def test_tensor_core_convolution_matches_float64(kind, direction, layout, problem):
    import cupy

    dtype, tol = KINDS[kind]
    desc, x, w, dy = _setup(problem, layout)
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, dtype) for a in (x, w, dy))
    want = _run(direction, "direct", desc, x64, w64, dy64, layout)           # NumPy float64
    out = cupy.full(_result_shape(direction, x, w, dy), np.nan, dtype=_np_dtype(dtype))
    got = _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, layout, out=out, math="tf32")
    assert got is out and got.dtype == _np_dtype(dtype)
    assert rel_err(cupy.asnumpy(out.astype(cupy.float32)), want) <= tol


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_tf32_kernels_equal_the_cpu_tf32_emulation(direction):
    """The GPU rounds operands to nearest as the NumPy reference's TF32 emulation does (the mma.sync kernels
    with cvt.rna, ties away; on Hopper the wgmma kernels' copy engine, ties to even), so the two agree to
    fp32 summation order and the odd tie, far closer than either is to fp64 (about 3e-4; truncating the
    operands instead would be about 9e-4 from the emulation)."""
    import cupy

    desc, x, w, dy = _setup(PROBLEMS[0], "NHWC", seed=5)
    x, w, dy = (a.astype(np.float32) for a in (x, w, dy))
    emulated = _run(direction, "im2col_gemm", desc, x, w, dy, "NHWC", math="tf32")
    exact = _run(direction, "im2col_gemm", desc, x, w, dy, "NHWC")
    got = cupy.asnumpy(_run(direction, "implicit_gemm_tc", desc, cupy.asarray(x), cupy.asarray(w), cupy.asarray(dy),
                            "NHWC", math="tf32"))
    assert rel_err(got, emulated) < 1e-4 < rel_err(got, exact)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("kind", ["tf32", "fp16"])
def test_tensor_core_alpha_beta_and_bias(kind, direction, layout):
    import cupy

    dtype, tol = KINDS[kind]
    desc, x, w, dy = _setup(PROBLEMS[2], layout, seed=3)
    (gx, x64), (gw, w64), (gdy, dy64) = (_to_gpu(a, dtype) for a in (x, w, dy))
    rng = np.random.default_rng(4)
    prior, prior64 = _to_gpu(rng.standard_normal(_result_shape(direction, x, w, dy)), dtype)
    if direction == "forward":
        bias, bias64 = _to_gpu(rng.standard_normal(w.shape[0]), dtype)
        want = convolution_forward(x64, w64, desc, bias64, layout=layout, algo="direct")
        got = convolution_forward(gx, gw, desc, bias, layout=layout, algo="implicit_gemm_tc", alpha=0.5,
                                  beta=-0.75, out=prior, math="tf32")
    else:
        want = _run(direction, "direct", desc, x64, w64, dy64, layout)
        got = _run(direction, "implicit_gemm_tc", desc, gx, gw, gdy, layout, alpha=0.5, beta=-0.75, out=prior,
                   math="tf32")
    want = 0.5 * want - 0.75 * prior64
    assert got is prior
    assert rel_err(cupy.asnumpy(got.astype(cupy.float32)), want) <= tol


def test_query_lists_the_tensor_core_variants_and_policies_know_them():
    x_shape, w_shape = (8, 32, 16, 16), (64, 32, 3, 3)
    desc = ConvolutionDescriptor(padding=1)
    perfs = find_convolution_algorithms(x_shape, w_shape, desc, device="cuda", measure=False, math="tf32")
    tc = next(p for p in perfs if p.algo == "implicit_gemm_tc")
    assert tc.status == "ok" and tc.math == "tf32" and tc.workspace_bytes > 0       # NCHW copies
    assert perfs[0].algo == "implicit_gemm_tc"
    assert all(p.math == "fp32" for p in perfs if p.algo != "implicit_gemm_tc")
    perfs = find_convolution_algorithms(x_shape, w_shape, desc, device="cuda", measure=False)
    tc = next(p for p in perfs if p.algo == "implicit_gemm_tc")
    assert "math='tf32'" in tc.status
    pick = lambda **kw: get_convolution_algorithm(x_shape, w_shape, desc, device="cuda", **kw)  # noqa: E731
    assert pick(math="tf32") == "implicit_gemm_tc"
    assert pick(math="fp32") != "implicit_gemm_tc"
    assert get_convolution_algorithm((8, 16, 16, 32), (64, 3, 3, 32), desc, device="cuda", layout="NHWC",
                                     math="tf32", policy="no_workspace") == "implicit_gemm_tc"
    assert pick(math="tf32", policy="no_workspace") != "implicit_gemm_tc"            # NCHW copies
    assert pick(math="tf32", policy="deterministic") == "implicit_gemm_tc"
    measured = find_convolution_algorithms(x_shape, w_shape, desc, device="cuda", math="tf32")
    assert next(p for p in measured if p.algo == "implicit_gemm_tc").time_ms > 0
    assert pick(math="tf32", policy="prefer_fastest") in {p.algo for p in measured if p.status == "ok"}
    assert pick(dtype="float16", math="fp32") == "implicit_gemm_tc"                  # half: tensor cores always
    # Half data the tensor-core kernels do not take (groups > 1): the fp32 algorithm HalfInFloat32 runs.
    grouped = get_convolution_algorithm((2, 4, 8, 8), (4, 2, 3, 3), ConvolutionDescriptor(padding=1, groups=2),
                                        device="cuda", dtype="float16")
    assert grouped != "implicit_gemm_tc"
    assert grouped == get_convolution_algorithm((2, 4, 8, 8), (4, 2, 3, 3),
                                                ConvolutionDescriptor(padding=1, groups=2), device="cuda")


def test_tensor_core_errors_say_what_is_covered():
    import cupy

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 4, 5, 6)).astype(np.float16)
    w = rng.standard_normal((3, 2, 1, 3, 3)).astype(np.float16)
    desc3 = ConvolutionDescriptor(padding=1, spatial_dims=3)
    with pytest.raises(ValueError, match=r"\(float16\): the tensor-core kernels are 1-D and 2-D only"):
        convolution_forward(cupy.asarray(x), cupy.asarray(w), desc3, algo="implicit_gemm_tc")
    # "auto": no half algorithm takes 3-D, so HalfInFloat32 runs an fp32 one and rounds once.
    y = convolution_forward(cupy.asarray(x), cupy.asarray(w), desc3)
    want = convolution_forward(x.astype(np.float64), w.astype(np.float64), desc3)
    assert y.dtype == cupy.float16 and rel_err(cupy.asnumpy(y).astype(np.float64), want) <= 1e-3
    xg = cupy.asarray(rng.standard_normal((2, 4, 8, 8)).astype(np.float16))
    wg = cupy.asarray(rng.standard_normal((4, 2, 3, 3)).astype(np.float16))
    with pytest.raises(ValueError, match=r"\(float16\): the tensor-core kernels run groups=1 only"):
        convolution_forward(xg, wg, ConvolutionDescriptor(padding=1, groups=2), algo="implicit_gemm_tc")
    x = cupy.ones((1, 2, 6, 6), dtype=cupy.float32)
    w = cupy.ones((3, 2, 3, 3), dtype=cupy.float32)
    with pytest.raises(ValueError, match="math='tf32'"):
        convolution_forward(x, w, ConvolutionDescriptor(padding=1), algo="implicit_gemm_tc")


def test_framework_conv_follows_allow_tf32():
    """F.conv2d on the GPU: TF32 by default (as PyTorch), exact fp32 with allow_tf32 = False."""
    import cupy

    import minidl
    import minidl.nn.functional as F

    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 32, 12, 12)).astype(np.float32)
    w = rng.standard_normal((48, 32, 3, 3)).astype(np.float32)
    want = convolution_forward(x.astype(np.float64), w.astype(np.float64), ConvolutionDescriptor(padding=1))
    tx, tw = minidl.tensor(cupy.asarray(x)), minidl.tensor(cupy.asarray(w))
    with minidl.backends.cudnn.flags(allow_tf32=True):
        tf32 = cupy.asnumpy(F.conv2d(tx, tw, padding=1)._data)
    with minidl.backends.cudnn.flags(allow_tf32=False):
        fp32 = cupy.asnumpy(F.conv2d(tx, tw, padding=1)._data)
    assert 1e-5 < rel_err(tf32, want) <= 5e-3
    assert rel_err(fp32, want) <= 1e-5


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("x_grad", [True, False])
def test_a_training_conv_on_tensor_cores_transposes_once_per_direction(monkeypatch, dtype, x_grad):
    """Conv2d training on implicit_gemm_tc (bf16, TF32): the layer's channels-first plan gets an NHWC twin, and the
    Convolution Function transposes x and w once in the forward and dy once for both backward directions, where
    each direction used to transpose its own inputs: the same kernels on the same values, so the same bits as the
    channels-first plan for y, dx, dw and db, and fewer copies. Except TF32 on Hopper, whose channels-first plan
    takes its weight gradient from x and dy as they are: no twin there (it would save no copy)."""
    import cupy

    import minidl
    import minidl.nn as nn
    from minidl.nn.functional import convolution as conv_module
    from tests.gpu.launches import kernel_launches, layout_launches

    def run(twin):
        if not twin:
            monkeypatch.setattr(conv_module, "_tensor_core_twin", lambda *a: False)
        minidl.manual_seed(3)
        layer = nn.Conv2d(32, 32, 3, padding=1).to("cuda")
        x = minidl.randn(4, 32, 12, 12, device="cuda").type(getattr(minidl, dtype)).requires_grad_(x_grad)
        copies = []   # transposes: layout_transform launches, and CuPy copies of non-contiguous views
        real = cupy.ascontiguousarray
        monkeypatch.setattr(cupy, "ascontiguousarray", lambda a, *k, **kw: copies.append(
            a.flags.c_contiguous is False) or real(a, *k, **kw))
        with kernel_launches() as names:
            with minidl.backends.cudnn.flags(allow_tf32=True), minidl.autocast("cuda", dtype=minidl.bfloat16,
                                                                                enabled=dtype == "bfloat16"):
                y = layer(x)
            y.backward(minidl.ones_like(y))
        monkeypatch.setattr(cupy, "ascontiguousarray", real)
        plan = next(iter(layer._conv_plans.values()))
        out = [cupy.asnumpy(a) for a in (y._data, layer.weight.grad._data, layer.bias.grad._data)]
        if x_grad:
            out.append(cupy.asnumpy(x.grad._data))
        return out, sum(copies) + layout_launches(names), plan

    with_twin, n_twin, plan = run(True)
    without, n_plain, _ = run(False)
    for a, b in zip(with_twin, without):
        assert a.dtype == b.dtype and (a.view(np.uint8) == b.view(np.uint8)).all()
    if dtype == "float32" and plan.reads_channels_first("backward_filter"):   # TF32 on Hopper: no twin
        assert plan.nhwc_twin is False and n_twin == n_plain, (n_twin, n_plain)
    else:
        assert 0 < n_twin < n_plain, (n_twin, n_plain)
        assert plan.nhwc_twin and plan.nhwc_twin.layout == "NHWC"


def test_a_tf32_training_conv_takes_its_weight_gradient_from_the_channels_first_arrays():
    """TF32 Conv2d training on Hopper runs the layer's channels-first plan (no NHWC twin): the weight gradient comes
    from x and dy as they are (the wgmma wgrad, no transposes), y and dx come out channels-first from the kernels,
    backward data's (C, R, S, K) filters are one transpose of the (K, C, R, S) ones: 4 copies per layer and step (x
    and w in the forward, the filters and dy in backward data), 2 when x needs no gradient; y, dx, dw, db match
    float64 at TF32's tolerance."""
    import cupy

    import minidl
    import minidl.nn as nn
    from tests.gpu.launches import kernel_launches, layout_launches

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the channels-first TF32 wgrad runs on wgmma (compute capability 9.0)")
    for x_grad, copies_expected in ((True, 4), (False, 2)):
        minidl.manual_seed(4)
        layer = nn.Conv2d(64, 128, 3, padding=1)
        x = minidl.randn(4, 64, 16, 16, requires_grad=x_grad)
        gy = minidl.randn(4, 128, 16, 16)
        ref = nn.Conv2d(64, 128, 3, padding=1).double()
        ref.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
        x64 = x.detach().double().requires_grad_(x_grad)
        y64 = ref(x64)
        y64.backward(gy.double())
        layer.to("cuda")
        xc = x.detach().to("cuda").requires_grad_(x_grad)
        gyc = gy.to("cuda")
        with kernel_launches() as names:
            with minidl.backends.cudnn.flags(allow_tf32=True):
                y = layer(xc)
                y.backward(gyc)
        plan = next(iter(layer._conv_plans.values()))
        assert plan.nhwc_twin is False and plan.reads_channels_first("backward_filter")
        assert layout_launches(names) == copies_expected, names
        pairs = [(y, y64), (layer.weight.grad, ref.weight.grad), (layer.bias.grad, ref.bias.grad)]
        if x_grad:
            pairs.append((xc.grad, x64.grad))
        for got, want in pairs:
            assert rel_err(cupy.asnumpy(got._data), want.detach().numpy()) <= 5e-3


# ----------------------------------------------------------------------------------------------
# FFT
# ----------------------------------------------------------------------------------------------

FFT_PROBLEMS = [
    ("7x7_pad3", 2, 5, (19, 23), 6, (7, 7), 3),
    ("11x11_pad5", 2, 3, (33, 30), 4, (11, 11), 5),
    ("5x3_pad_2_0", 3, 4, (12, 9), 5, (5, 3), (2, 0)),
    ("1d", 2, 3, (40,), 4, (9,), 4),
]


@pytest.mark.parametrize("problem", FFT_PROBLEMS, ids=[p[0] for p in FFT_PROBLEMS])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fft_convolution_matches_float64(direction, layout, problem):
    import cupy

    name, N, C, size, K, kernel, pad = problem
    desc, x, w, dy = _setup((name, N, C, size, K, kernel, pad, 1, 1), layout, seed=2)
    want = _run(direction, "direct", desc, x, w, dy, layout)
    g = [cupy.asarray(a.astype(np.float32)) for a in (x, w, dy)]
    out = cupy.full(_result_shape(direction, x, w, dy), np.nan, dtype=cupy.float32)
    got = _run(direction, "fft", desc, *g, layout, out=out, alpha=1.0)
    assert got is out
    assert rel_err(cupy.asnumpy(out), want) <= 1e-4


def test_fft_bias_alpha_beta_and_not_supported():
    import cupy

    desc, x, w, dy = _setup(("p", 2, 4, (10, 12), 3, (5, 5), 2, 1, 1), "NCHW", seed=6)
    b = np.random.default_rng(1).standard_normal(3)
    prior = np.random.default_rng(2).standard_normal(dy.shape)
    want = 2.0 * convolution_forward(x, w, desc, b) + 0.5 * prior
    out = cupy.asarray(prior.astype(np.float32))
    gx, gw, gb = (cupy.asarray(a.astype(np.float32)) for a in (x, w, b))
    convolution_forward(gx, gw, desc, gb, algo="fft", alpha=2.0, beta=0.5, out=out)
    assert rel_err(cupy.asnumpy(out), want) <= 1e-4
    perfs = find_convolution_algorithms((2, 4, 10, 12), (3, 4, 5, 5), ConvolutionDescriptor(padding=2, stride=2),
                                        device="cuda", measure=False)
    fft = next(p for p in perfs if p.algo == "fft")
    assert fft.status.startswith("not_supported") and "stride 1" in fft.status
    perfs = find_convolution_algorithms((2, 4, 10, 12), (3, 4, 5, 5), ConvolutionDescriptor(padding=2),
                                        device="cuda", measure=False)
    assert next(p for p in perfs if p.algo == "fft").workspace_bytes > 0
