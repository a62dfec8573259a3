"""Tests of the convolution primitive: every CPU algorithm against PyTorch (forward and autograd),
finite differences in float64, alpha/beta blending, the boundary errors, the selection policies and
the thread safety of the algorithm cache."""
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import minidl.primitives as P
from minidl.primitives import convolution as conv_module
from minidl.primitives.cpu import convolution as cpu_conv
from tests.conftest import DEVICES, rel_err

torch.set_num_threads(1)

CPU_ALGORITHMS = ("direct", "im2col_gemm", "winograd")
TOL = {np.float32: 1e-5, np.float64: 1e-10}


# ----------------------------------------------------------------------------------------------
# Helpers: a PyTorch oracle, layouts
# ----------------------------------------------------------------------------------------------


def torch_reference(x, w, b, desc, dy):
    """(y, dx, dw, db) from torch in float64, all channels-first."""
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[desc.spatial_dims]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    wt = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    bt = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    yt = conv(xt, wt, bt, stride=desc.stride, padding=desc.padding, dilation=desc.dilation,
              groups=desc.groups)
    (yt * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    return yt.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


def to_last(a):
    """(N, C, *spatial) -> (N, *spatial, C); for weights (K, C/g, *k) -> (K, *k, C/g). A copy."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def to_first(a):
    return np.moveaxis(a, -1, 1)


def in_layout(a, layout):
    return a if layout == "NCHW" else to_last(a)


def from_layout(a, layout):
    return a if layout == "NCHW" else to_first(a)


def torch_out_shape(x_shape, w_shape, desc):
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[desc.spatial_dims]
    return tuple(conv(torch.zeros(x_shape), torch.zeros(w_shape), stride=desc.stride,
                      padding=desc.padding, dilation=desc.dilation, groups=desc.groups).shape)


@st.composite
def conv_configs(draw, spatial_dims=None):
    """A random valid convolution: shapes (channels-first), descriptor, layout, dtype."""
    sd = draw(st.sampled_from([1, 2, 3])) if spatial_dims is None else spatial_dims
    max_size = {1: 11, 2: 8, 3: 5}[sd]
    groups = draw(st.integers(1, 3))
    Cg, Kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    N = draw(st.integers(1, 3))
    kernel, padding, stride, dilation, in_size = [], [], [], [], []
    for _ in range(sd):
        k = draw(st.integers(1, 3))
        d = draw(st.integers(1, 2))
        p = draw(st.integers(0, 2))
        s = draw(st.integers(1, 3))
        smallest = max(1, d * (k - 1) + 1 - 2 * p)           # the padded input must hold the kernel
        kernel.append(k), dilation.append(d), padding.append(p), stride.append(s)
        in_size.append(draw(st.integers(smallest, max(smallest, max_size))))
    desc = P.ConvolutionDescriptor(tuple(padding), tuple(stride), tuple(dilation), groups, sd)
    x_shape = (N, groups * Cg) + tuple(in_size)
    w_shape = (groups * Kg, Cg) + tuple(kernel)
    layout = draw(st.sampled_from(["NCHW", "NHWC"]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return x_shape, w_shape, desc, layout, dtype


@st.composite
def winograd_configs(draw):
    """2-D 3x3 stride-1 problems: odd sizes, padding 0..3, groups (depthwise too)."""
    groups = draw(st.integers(1, 4))
    Cg, Kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    padding = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    in_size = tuple(draw(st.integers(max(1, 3 - 2 * p), 9)) for p in padding)
    desc = P.ConvolutionDescriptor(padding, 1, 1, groups, 2)
    x_shape = (draw(st.integers(1, 3)), groups * Cg) + in_size
    w_shape = (groups * Kg, Cg, 3, 3)
    return x_shape, w_shape, desc, draw(st.sampled_from(["NCHW", "NHWC"])), draw(
        st.sampled_from([np.float32, np.float64]))


def random_problem(x_shape, w_shape, desc, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    y_shape = torch_out_shape(x_shape, w_shape, desc)
    dy = rng.standard_normal(y_shape).astype(dtype)
    return x, w, b, dy


def check_all_directions(x_shape, w_shape, desc, layout, dtype, algorithms):
    """Every given algorithm, every direction it supports, against torch."""
    x, w, b, dy = random_problem(x_shape, w_shape, desc, dtype)
    y_ref, dx_ref, dw_ref, db_ref = torch_reference(x, w, b, desc, dy)
    xl, wl, dyl = in_layout(x, layout), in_layout(w, layout), in_layout(dy, layout)
    tol = TOL[dtype]
    problem = conv_module._make_problem("test", xl.shape, wl.shape, desc, layout, dtype)
    for algo in algorithms:
        if cpu_conv.is_supported(algo, "forward", problem)[0]:
            y = P.convolution_forward(xl, wl, desc, b, algo=algo, layout=layout)
            assert y.dtype == dtype and y.shape == in_layout(y_ref, layout).shape
            assert rel_err(from_layout(y, layout), y_ref) <= tol, (algo, "forward")
        if cpu_conv.is_supported(algo, "backward_data", problem)[0]:
            dx = P.convolution_backward_data(wl, dyl, desc, xl.shape, algo=algo, layout=layout)
            assert dx.dtype == dtype and dx.shape == xl.shape
            assert rel_err(from_layout(dx, layout), dx_ref) <= tol, (algo, "backward_data")
        if cpu_conv.is_supported(algo, "backward_filter", problem)[0]:
            dw = P.convolution_backward_filter(xl, dyl, desc, wl.shape, algo=algo, layout=layout)
            assert dw.dtype == dtype and dw.shape == wl.shape
            assert rel_err(from_layout(dw, layout), dw_ref) <= tol, (algo, "backward_filter")
    db = P.convolution_backward_bias(dyl, layout=layout)
    assert db.dtype == dtype and rel_err(db, db_ref) <= tol


# ----------------------------------------------------------------------------------------------
# Correctness against PyTorch
# ----------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(conv_configs())
def test_every_algorithm_matches_torch(config):
    x_shape, w_shape, desc, layout, dtype = config
    check_all_directions(x_shape, w_shape, desc, layout, dtype, CPU_ALGORITHMS)


@settings(max_examples=30, deadline=None)
@given(winograd_configs())
def test_winograd_matches_torch(config):
    x_shape, w_shape, desc, layout, dtype = config
    problem = conv_module._make_problem("test", x_shape, w_shape, desc, "NCHW", dtype)
    assert cpu_conv.is_supported("winograd", "forward", problem)[0]
    check_all_directions(x_shape, w_shape, desc, layout, dtype, ("winograd",))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_algorithms_agree_with_each_other(layout):
    """On one problem every algorithm applies to, all three give the same y and dx (float64)."""
    desc = P.ConvolutionDescriptor(padding=(1, 2), groups=2)
    x, w, b, dy = random_problem((3, 4, 7, 6), (6, 2, 3, 3), desc, np.float64, seed=3)
    x, w, dy = in_layout(x, layout), in_layout(w, layout), in_layout(dy, layout)
    ys = [P.convolution_forward(x, w, desc, b, algo=a, layout=layout) for a in CPU_ALGORITHMS]
    dxs = [P.convolution_backward_data(w, dy, desc, x.shape, algo=a, layout=layout) for a in CPU_ALGORITHMS]
    dws = [P.convolution_backward_filter(x, dy, desc, w.shape, algo=a, layout=layout)
           for a in ("direct", "im2col_gemm")]
    for y in ys[1:]:
        assert rel_err(y, ys[0]) < 1e-13
    for dx in dxs[1:]:
        assert rel_err(dx, dxs[0]) < 1e-13
    assert rel_err(dws[1], dws[0]) < 1e-13


@pytest.mark.parametrize("case", [
    dict(sd=2, x=(2, 3, 9, 7), w=(4, 3, 3, 3), padding=1, stride=2, dilation=1, groups=1),
    dict(sd=1, x=(2, 4, 13), w=(6, 2, 4), padding=3, stride=1, dilation=2, groups=2),
    dict(sd=3, x=(1, 2, 5, 4, 6), w=(2, 1, 2, 3, 2), padding=(1, 0, 2), stride=(1, 2, 1), dilation=1, groups=2),
    dict(sd=2, x=(2, 3, 6, 5), w=(3, 1, 3, 3), padding=2, stride=1, dilation=1, groups=3),  # depthwise
])
@pytest.mark.parametrize("algo", CPU_ALGORITHMS)
def test_gradients_match_finite_differences(case, algo):
    """float64: <dL/dx, v> against (L(x + h v) - L(x - h v)) / 2h for random directions v,
    with L = sum(y * c). Same for w and b."""
    desc = P.ConvolutionDescriptor(case["padding"], case["stride"], case["dilation"], case["groups"], case["sd"])
    x, w, b, c = random_problem(case["x"], case["w"], desc, np.float64, seed=7)
    problem = conv_module._make_problem("test", x.shape, w.shape, desc, "NCHW", np.float64)
    fwd_algo = algo if cpu_conv.is_supported(algo, "forward", problem)[0] else "direct"

    def loss(x_, w_, b_):
        return float(np.sum(P.convolution_forward(x_, w_, desc, b_, algo=fwd_algo) * c))

    rng = np.random.default_rng(11)
    h = 1e-6
    grads = {"b": P.convolution_backward_bias(c)}
    if cpu_conv.is_supported(algo, "backward_data", problem)[0]:
        grads["x"] = P.convolution_backward_data(w, c, desc, x.shape, algo=algo)
    if cpu_conv.is_supported(algo, "backward_filter", problem)[0]:
        grads["w"] = P.convolution_backward_filter(x, c, desc, w.shape, algo=algo)
    args = {"x": x, "w": w, "b": b}
    for name, grad in grads.items():
        for _ in range(3):
            v = rng.standard_normal(args[name].shape)
            plus = dict(args, **{name: args[name] + h * v})
            minus = dict(args, **{name: args[name] - h * v})
            numeric = (loss(plus["x"], plus["w"], plus["b"]) - loss(minus["x"], minus["w"], minus["b"])) / (2 * h)
            analytic = float(np.sum(grad * v))
            assert abs(numeric - analytic) <= 1e-6 * max(1.0, abs(analytic)), (name, numeric, analytic)


def test_output_shape_matches_torch():
    cases = [((2, 3, 10, 11), (5, 3, 3, 2), P.ConvolutionDescriptor((1, 0), (2, 3), (2, 1))),
             ((1, 4, 17), (4, 2, 5), P.ConvolutionDescriptor(2, 3, 1, groups=2, spatial_dims=1)),
             ((1, 2, 5, 6, 7), (3, 2, 1, 2, 3), P.ConvolutionDescriptor(0, (1, 2, 3), 1, spatial_dims=3))]
    for x_shape, w_shape, desc in cases:
        expected = torch_out_shape(x_shape, w_shape, desc)
        assert P.convolution_output_shape(x_shape, w_shape, desc) == expected
        x_last = (x_shape[0],) + x_shape[2:] + (x_shape[1],)
        w_last = (w_shape[0],) + w_shape[2:] + (w_shape[1],)
        expected_last = (expected[0],) + expected[2:] + (expected[1],)
        assert P.convolution_output_shape(x_last, w_last, desc, layout="NHWC") == expected_last


@pytest.mark.parametrize("algo", CPU_ALGORITHMS)
def test_empty_batch_and_non_contiguous_inputs(algo):
    desc = P.ConvolutionDescriptor(1)
    x, w, b, dy = random_problem((3, 4, 7, 8), (5, 4, 3, 3), desc, np.float32)
    y = P.convolution_forward(x[:0], w, desc, b, algo=algo)
    assert y.shape == (0, 5, 7, 8)
    # a strided view of a bigger array
    big = np.random.default_rng(1).standard_normal((3, 8, 7, 16)).astype(np.float32)
    x_view = big[:, ::2, :, ::2]
    y = P.convolution_forward(x_view, w, desc, b, algo=algo)
    y_ref = torch_reference(np.ascontiguousarray(x_view), w, b, desc, dy)[0]
    assert rel_err(y, y_ref) <= 1e-5


# ----------------------------------------------------------------------------------------------
# alpha / beta / out
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", CPU_ALGORITHMS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_alpha_beta_blend_into_out(algo, layout):
    desc = P.ConvolutionDescriptor(1)
    x, w, b, dy = random_problem((2, 3, 6, 5), (4, 3, 3, 3), desc, np.float64, seed=5)
    x, w, dy = in_layout(x, layout), in_layout(w, layout), in_layout(dy, layout)
    rng = np.random.default_rng(9)
    alpha, beta = 0.75, -1.5

    def check(fn, reference):
        prior = rng.standard_normal(reference.shape)
        out = prior.copy()
        got = fn(out)
        assert got is out
        assert rel_err(out, alpha * reference + beta * prior) < 1e-12
        # beta = 0 ignores NaN in out, as cuDNN does
        out = np.full(reference.shape, np.nan)
        fn_alpha_only = fn(out, beta_=0.0)
        assert rel_err(fn_alpha_only, alpha * reference) < 1e-12

    y_ref = P.convolution_forward(x, w, desc, b, algo=algo, layout=layout)
    check(lambda out, beta_=beta: P.convolution_forward(
        x, w, desc, b, algo=algo, layout=layout, alpha=alpha, beta=beta_, out=out), y_ref)
    dx_ref = P.convolution_backward_data(w, dy, desc, x.shape, algo=algo, layout=layout)
    check(lambda out, beta_=beta: P.convolution_backward_data(
        w, dy, desc, x.shape, algo=algo, layout=layout, alpha=alpha, beta=beta_, out=out), dx_ref)
    filter_algo = "im2col_gemm" if algo == "winograd" else algo
    dw_ref = P.convolution_backward_filter(x, dy, desc, w.shape, algo=filter_algo, layout=layout)
    check(lambda out, beta_=beta: P.convolution_backward_filter(
        x, dy, desc, w.shape, algo=filter_algo, layout=layout, alpha=alpha, beta=beta_, out=out), dw_ref)
    db_ref = P.convolution_backward_bias(dy, layout=layout)
    check(lambda out, beta_=beta: P.convolution_backward_bias(
        dy, layout=layout, alpha=alpha, beta=beta_, out=out), db_ref)


# ----------------------------------------------------------------------------------------------
# Errors at the boundary
# ----------------------------------------------------------------------------------------------


class FakeCudaArray:
    """Looks like a CuPy array to the device check (which goes by the type's module name)."""

    __module__ = "cupy._core.core"

    def __init__(self, a):
        self.shape, self.dtype, self.ndim = a.shape, a.dtype, a.ndim


def _forward_args():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((2, 4, 6, 6)).astype(np.float32),
            rng.standard_normal((8, 4, 3, 3)).astype(np.float32))


@pytest.mark.parametrize("make_call, error, words", [
    # wrong rank of x or w
    (lambda x, w: P.convolution_forward(x[0], w, P.ConvolutionDescriptor(1)), ValueError,
     ["convolution_forward", "input must be 4-D", "(4, 6, 6)"]),
    (lambda x, w: P.convolution_forward(x, w[..., 0], P.ConvolutionDescriptor(1)), ValueError,
     ["convolution_forward", "weight must be 4-D", "(8, 4, 3)"]),
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1, spatial_dims=3)), ValueError,
     ["convolution_forward", "5-D", "(2, 4, 6, 6)"]),
    # channel mismatch
    (lambda x, w: P.convolution_forward(x[:, :3], w, P.ConvolutionDescriptor(1)), ValueError,
     ["convolution_forward", "input has 3 channels but weight (8, 4, 3, 3) expects 4 (groups=1)"]),
    # channels not divisible by groups
    (lambda x, w: P.convolution_forward(x, w[:, :1], P.ConvolutionDescriptor(1, groups=3)), ValueError,
     ["convolution_forward", "C=4", "(2, 4, 6, 6)", "groups=3"]),
    (lambda x, w: P.convolution_forward(x, w[:6, :2], P.ConvolutionDescriptor(1, groups=4)), ValueError,
     ["convolution_forward", "K=6", "(6, 2, 3, 3)", "groups=4"]),
    # kernel larger than the padded input
    (lambda x, w: P.convolution_forward(x[:, :, :2, :2], w, P.ConvolutionDescriptor(0)), ValueError,
     ["convolution_forward", "kernel (3, 3)", "padded input", "(2, 4, 2, 2)"]),
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(0, dilation=3)), ValueError,
     ["convolution_forward", "spans 7", "(2, 4, 6, 6)"]),
    # bias of the wrong shape
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), np.zeros(7, np.float32)),
     ValueError, ["convolution_forward", "bias has shape (7)", "(8)"]),
    # out of the wrong shape; beta without out
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), out=np.zeros((2, 8, 5, 6), np.float32)),
     ValueError, ["convolution_forward", "out has shape (2, 8, 5, 6)", "(2, 8, 6, 6)"]),
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), beta=1.0), ValueError,
     ["convolution_forward", "beta=1.0", "out="]),
    # dtypes
    (lambda x, w: P.convolution_forward(x, w.astype(np.float64), P.ConvolutionDescriptor(1)), TypeError,
     ["convolution_forward", "same dtype", "float32", "float64"]),
    (lambda x, w: P.convolution_forward(x.astype(np.int32), w, P.ConvolutionDescriptor(1)), TypeError,
     ["convolution_forward", "int32"]),
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), np.zeros(8, np.float16)), TypeError,
     ["convolution_forward", "bias", "float16"]),
    # mixed devices
    (lambda x, w: P.convolution_forward(x, FakeCudaArray(w), P.ConvolutionDescriptor(1)), ValueError,
     ["convolution_forward", "same device", "x on cpu", "w on cuda"]),
    # an algorithm that does not apply, or does not exist
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1, stride=2), algo="winograd"),
     ValueError, ["convolution_forward", "'winograd' does not apply", "stride 1", "(8, 4, 3, 3)"]),
    (lambda x, w: P.convolution_forward(x, w[:, :, :2], P.ConvolutionDescriptor(1), algo="winograd"),
     ValueError, ["convolution_forward", "'winograd'", "3x3 kernel, got 2x3"]),
    (lambda x, w: P.convolution_backward_filter(x, np.zeros((2, 8, 6, 6), np.float32),
                                                P.ConvolutionDescriptor(1), w.shape, algo="winograd"),
     ValueError, ["convolution_backward_filter", "'winograd' does not apply", "forward and backward_data only"]),
    (lambda x, w: P.convolution_backward_data(w, np.zeros((2, 8, 10, 10), np.float32),
                                              P.ConvolutionDescriptor(3), x.shape, algo="winograd"),
     ValueError, ["convolution_backward_data", "'winograd'", "padding <= 2"]),
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), algo="fast_magic"), ValueError,
     ["convolution_forward", "unknown algorithm 'fast_magic'", "im2col_gemm"]),
    # wrong dy / weight shapes in the backward passes
    (lambda x, w: P.convolution_backward_data(w, np.zeros((2, 8, 5, 5), np.float32),
                                              P.ConvolutionDescriptor(1), x.shape), ValueError,
     ["convolution_backward_data", "dy has shape (2, 8, 5, 5)", "expected (2, 8, 6, 6)"]),
    (lambda x, w: P.convolution_backward_data(w, np.zeros((2, 8, 6, 6), np.float32),
                                              P.ConvolutionDescriptor(1), (2, 5, 6, 6)), ValueError,
     ["convolution_backward_data", "input has 5 channels", "(8, 4, 3, 3)"]),
    (lambda x, w: P.convolution_backward_filter(x, np.zeros((2, 8, 6, 6), np.float32),
                                                P.ConvolutionDescriptor(1), (8, 3, 3, 3)), ValueError,
     ["convolution_backward_filter", "input has 4 channels", "(8, 3, 3, 3)"]),
    (lambda x, w: P.convolution_backward_bias(np.zeros((2, 8), np.float32)), ValueError,
     ["convolution_backward_bias", "(2, 8)"]),
    # layout and descriptor arguments
    (lambda x, w: P.convolution_forward(x, w, P.ConvolutionDescriptor(1), layout="NCWH"), ValueError,
     ["convolution_forward", "unknown layout 'NCWH'"]),
    (lambda x, w: P.convolution_forward(x, w, (1, 1)), TypeError,
     ["convolution_forward", "ConvolutionDescriptor"]),
])
def test_errors_name_the_primitive_and_shapes(make_call, error, words):
    x, w = _forward_args()
    with pytest.raises(error) as info:
        make_call(x, w)
    message = str(info.value)
    assert message.startswith(words[0]), message
    for word in words[1:]:
        assert word in message, (word, message)


@pytest.mark.parametrize("kwargs, words", [
    (dict(padding=-1), ["padding must be >= 0"]),
    (dict(stride=0), ["stride must be >= 1"]),
    (dict(dilation=(1, 0)), ["dilation must be >= 1"]),
    (dict(groups=0), ["groups"]),
    (dict(spatial_dims=4), ["spatial_dims"]),
    (dict(padding=(1, 1, 1), spatial_dims=2), ["padding must be an int or 2 ints"]),
])
def test_descriptor_errors(kwargs, words):
    with pytest.raises(ValueError) as info:
        P.ConvolutionDescriptor(**kwargs)
    assert str(info.value).startswith("ConvolutionDescriptor")
    for word in words:
        assert word in str(info.value)


def test_descriptor_normalises_and_is_hashable():
    a = P.ConvolutionDescriptor(1, 2, 1, 1, 2)
    b = P.ConvolutionDescriptor((1, 1), (2, 2), (1, 1), 1)
    assert a == b and hash(a) == hash(b) and a.padding == (1, 1) and b.spatial_dims == 2
    assert P.ConvolutionDescriptor(padding=(0, 1, 2)).spatial_dims == 3
    assert P.ConvolutionDescriptor(stride=2, spatial_dims=1).stride == (2,)


def test_out_is_left_untouched_when_arguments_are_rejected():
    x, w = _forward_args()
    out = np.full((2, 8, 6, 6), 3.0, dtype=np.float32)
    with pytest.raises(ValueError):
        P.convolution_forward(x, w, P.ConvolutionDescriptor(1, stride=2), algo="winograd", out=out)
    assert np.all(out == 3.0)


# ----------------------------------------------------------------------------------------------
# Finding and choosing algorithms
# ----------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_policy():
    """Every test starts from the default policy and an empty cache, and leaves them so."""
    P.set_convolution_policy("heuristic")
    P.clear_convolution_algorithm_cache()
    yield
    P.set_convolution_policy("heuristic")
    P.clear_convolution_algorithm_cache()


def test_find_reports_every_algorithm_with_workspace_and_status():
    x_shape, w_shape = (2, 3, 9, 8), (4, 3, 3, 3)
    desc = P.ConvolutionDescriptor(1)
    perfs = P.find_convolution_algorithms(x_shape, w_shape, desc, measure=True)
    assert sorted(p.algo for p in perfs) == sorted(cpu_conv.ALGORITHMS)
    assert all(p.status == "ok" and p.time_ms > 0 for p in perfs)
    times = [p.time_ms for p in perfs]
    assert times == sorted(times)                                   # fastest first
    by_algo = {p.algo: p for p in perfs}
    assert by_algo["direct"].workspace_bytes == 0
    assert by_algo["im2col_gemm"].workspace_bytes == 3 * 9 * 2 * 9 * 8 * 4   # C*R*S x N*P*Q floats
    assert by_algo["winograd"].workspace_bytes > 0

    # backward_filter: winograd does not apply, listed last with the reason; no time
    perfs = P.find_convolution_algorithms(x_shape, w_shape, desc, direction="backward_filter",
                                          dtype="float64", measure=True)
    assert perfs[-1].algo == "winograd" and perfs[-1].time_ms is None
    assert perfs[-1].status.startswith("not_supported: ") and "backward_data only" in perfs[-1].status
    assert perfs[0].status == "ok"

    # measure=False runs nothing and keeps the heuristic order
    perfs = P.find_convolution_algorithms(x_shape, (4, 3, 5, 5), P.ConvolutionDescriptor(2), measure=False)
    assert [p.algo for p in perfs] == ["im2col_gemm", "direct", "fft", "winograd"]
    assert all(p.time_ms is None for p in perfs)
    assert "3x3 kernel" in perfs[-1].status


def test_heuristic_and_workspace_policies():
    desc = P.ConvolutionDescriptor(1)
    x_shape, w_shape = (2, 8, 8, 8), (1, 8, 3, 3)
    get = lambda **kw: P.get_convolution_algorithm(x_shape, w_shape, desc, **kw)  # noqa: E731
    assert get() == "im2col_gemm"                                   # the default policy
    assert get(policy="heuristic") == "im2col_gemm"
    assert get(policy="no_workspace") == "direct"
    assert get(policy="workspace_limit", workspace_limit=0) == "direct"
    assert get(policy="deterministic") == "im2col_gemm"
    # A limit between the two workspaces picks the one that fits.
    ws = {p.algo: p.workspace_bytes for p in P.find_convolution_algorithms(x_shape, w_shape, desc, measure=False)}
    assert ws["winograd"] < ws["im2col_gemm"]
    assert get(policy="workspace_limit", workspace_limit=ws["winograd"]) == "winograd"
    assert get(policy="workspace_limit", workspace_limit=ws["im2col_gemm"]) == "im2col_gemm"
    # winograd does not apply to backward_filter, so the same limit falls through to direct
    assert get(policy="workspace_limit", workspace_limit=ws["winograd"], direction="backward_filter") == "direct"


def test_deterministic_policy_skips_nondeterministic_algorithms(monkeypatch):
    monkeypatch.setattr(cpu_conv, "NONDETERMINISTIC", {("im2col_gemm", "forward")}, raising=False)
    desc = P.ConvolutionDescriptor(1)
    assert P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 3, 3), desc, policy="deterministic") == "winograd"
    assert P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 5, 5), desc, policy="deterministic") == "direct"
    assert P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 5, 5), desc, policy="deterministic",
                                       direction="backward_filter") == "im2col_gemm"
    monkeypatch.setattr(cpu_conv, "NONDETERMINISTIC",
                        {(a, "forward") for a in cpu_conv.ALGORITHMS}, raising=False)
    with pytest.raises(ValueError, match="get_convolution_algorithm: no forward algorithm fits"):
        P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 3, 3), desc, policy="deterministic")


def test_policy_argument_errors():
    desc = P.ConvolutionDescriptor(1)
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 3, 3), desc, policy="fastest")
    with pytest.raises(ValueError, match="needs workspace_limit"):
        P.set_convolution_policy("workspace_limit")
    with pytest.raises(ValueError, match="workspace_limit must be an int >= 0"):
        P.set_convolution_policy("prefer_fastest", workspace_limit=-1)
    with pytest.raises(ValueError, match="direction must be one of"):
        P.get_convolution_algorithm((1, 2, 6, 6), (2, 2, 3, 3), desc, direction="backward")
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        P.find_convolution_algorithms((1, 2, 6, 6), (2, 2, 3, 3), desc, device="tpu")
    with pytest.raises(TypeError, match="dtype must be float32, float64, float16 or bfloat16"):
        P.find_convolution_algorithms((1, 2, 6, 6), (2, 2, 3, 3), desc, dtype="int32")
    with pytest.raises(ValueError, match="math must be one of 'fp32', 'tf32'"):
        P.find_convolution_algorithms((1, 2, 6, 6), (2, 2, 3, 3), desc, math="fp16")
    assert P.get_convolution_policy() == ("heuristic", None)        # unchanged by the failures


def fake_times(monkeypatch, times):
    """Replace the stopwatch: algorithm -> pretend milliseconds; count the measurements."""
    calls = []

    def fake_time_ms(impl, algo, direction, problem, data, is_cuda, repeats):
        calls.append(algo)
        return times[algo]

    monkeypatch.setattr(conv_module, "_time_ms", fake_time_ms)
    return calls


def test_prefer_fastest_measures_once_and_caches(monkeypatch):
    times = {"direct": 1.0, "im2col_gemm": 2.0, "winograd": 3.0, "fft": 4.0}
    calls = fake_times(monkeypatch, times)
    desc = P.ConvolutionDescriptor(1)
    args = ((2, 3, 7, 7), (4, 3, 3, 3), desc)
    assert P.get_convolution_algorithm(*args, policy="prefer_fastest") == "direct"
    assert sorted(calls) == sorted(cpu_conv.ALGORITHMS)
    # The same problem again: no measuring, the cached winner, even though the timings changed.
    times.update(direct=9.0, winograd=0.5)
    assert P.get_convolution_algorithm(*args, policy="prefer_fastest") == "direct"
    assert len(calls) == 4
    # Another direction or another shape is another cache entry.
    assert P.get_convolution_algorithm(*args, policy="prefer_fastest", direction="backward_data") == "winograd"
    assert P.get_convolution_algorithm((2, 3, 7, 8), (4, 3, 3, 3), desc, policy="prefer_fastest") == "winograd"
    assert len(calls) == 12
    # A workspace limit on prefer_fastest keeps the fastest that fits.
    assert P.get_convolution_algorithm(*args, policy="prefer_fastest", direction="backward_data",
                                       workspace_limit=0) == "direct"
    assert len(calls) == 12
    P.clear_convolution_algorithm_cache()
    assert P.get_convolution_algorithm(*args, policy="prefer_fastest") == "winograd"
    assert len(calls) == 16


def test_auto_follows_the_global_policy_and_context_manager(monkeypatch):
    used = []
    real_forward = cpu_conv.convolution_forward

    def spy_forward(x, w, problem, bias, algo, alpha, beta, out):
        used.append(algo)
        return real_forward(x, w, problem, bias, algo, alpha, beta, out)

    monkeypatch.setattr(cpu_conv, "convolution_forward", spy_forward)
    desc = P.ConvolutionDescriptor(1)
    x, w, b, _ = random_problem((2, 3, 6, 6), (4, 3, 3, 3), desc, np.float32)
    y_heuristic = P.convolution_forward(x, w, desc, b)
    with P.convolution_policy("no_workspace"):
        assert P.get_convolution_policy() == ("no_workspace", None)
        y_direct = P.convolution_forward(x, w, desc, b)
        with P.convolution_policy("workspace_limit", workspace_limit=10**9):
            P.convolution_forward(x, w, desc, b)
        assert P.get_convolution_policy() == ("no_workspace", None)
    assert P.get_convolution_policy() == ("heuristic", None)
    P.set_convolution_policy("prefer_fastest")
    P.convolution_forward(x, w, desc, b)
    assert used[:3] == ["im2col_gemm", "direct", "im2col_gemm"]
    assert used[3] in CPU_ALGORITHMS
    assert rel_err(y_direct, y_heuristic) <= 1e-5


def test_cache_is_thread_safe(monkeypatch):
    """Eight threads ask at once for the algorithms of two problems: each problem is measured once
    and every thread gets the same answer for it."""
    real_find = conv_module._find
    measured = []
    counter_lock = threading.Lock()

    def counting_find(impl, direction, problem, is_cuda, measure, repeats=3):
        if measure:
            with counter_lock:
                measured.append(problem)
            time.sleep(0.05)            # widen the window in which a missing lock would show
        return real_find(impl, direction, problem, is_cuda, measure, repeats=1)

    monkeypatch.setattr(conv_module, "_find", counting_find)
    desc = P.ConvolutionDescriptor(1)
    problems = [((2, 3, 9, 9), (4, 3, 3, 3)), ((1, 2, 7, 5), (2, 2, 3, 3))]
    barrier = threading.Barrier(8)
    results, errors = [[] for _ in problems], []

    def worker(i):
        try:
            barrier.wait()
            x_shape, w_shape = problems[i % 2]
            results[i % 2].append(P.get_convolution_algorithm(x_shape, w_shape, desc, policy="prefer_fastest"))
        except Exception as e:  # surfaced below; a thread's exception would otherwise be lost
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(measured) == 2 and len(set(measured)) == 2
    for answers in results:
        assert len(answers) == 4 and len(set(answers)) == 1 and answers[0] in CPU_ALGORITHMS


# ----------------------------------------------------------------------------------------------
# The same checks on every device (the CUDA half runs on the GPU machine)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_device_algorithms_match_the_reference(device, layout):
    desc = P.ConvolutionDescriptor(padding=(1, 2), stride=1, groups=2)
    x, w, b, dy = random_problem((3, 4, 9, 7), (6, 2, 3, 3), desc, np.float32, seed=2)
    x, w, dy = in_layout(x, layout), in_layout(w, layout), in_layout(dy, layout)
    y_ref = P.convolution_forward(x, w, desc, b, algo="direct", layout=layout)
    dx_ref = P.convolution_backward_data(w, dy, desc, x.shape, algo="direct", layout=layout)
    dw_ref = P.convolution_backward_filter(x, dy, desc, w.shape, algo="direct", layout=layout)
    db_ref = P.convolution_backward_bias(dy, layout=layout)
    if device == "cpu":
        xp, tol = np, 1e-5
    else:
        import cupy as xp
        tol = 1e-4
    to_host = (lambda a: a) if xp is np else xp.asnumpy
    xd, wd, bd, dyd = (xp.asarray(a) for a in (x, w, b, dy))
    for perf in P.find_convolution_algorithms(x.shape, w.shape, desc, device=device, layout=layout,
                                              measure=False):
        if perf.status != "ok":
            continue
        algo = perf.algo
        assert rel_err(to_host(P.convolution_forward(xd, wd, desc, bd, algo=algo, layout=layout)), y_ref) <= tol
        assert rel_err(to_host(P.convolution_backward_data(wd, dyd, desc, x.shape, algo=algo,
                                                           layout=layout)), dx_ref) <= tol
    for perf in P.find_convolution_algorithms(x.shape, w.shape, desc, device=device, layout=layout,
                                              direction="backward_filter", measure=False):
        if perf.status == "ok":
            dw = P.convolution_backward_filter(xd, dyd, desc, w.shape, algo=perf.algo, layout=layout)
            assert rel_err(to_host(dw), dw_ref) <= tol
    assert rel_err(to_host(P.convolution_backward_bias(dyd, layout=layout)), db_ref) <= tol


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_half_data_no_algorithm_takes_runs_in_float32_and_rounds_once(monkeypatch, dtype, layout):
    """16-bit data that no algorithm of the device takes (on the GPU: groups > 1 or 3-D, outside the
    tensor-core kernels) runs through HalfInFloat32: widened to float32, an fp32 algorithm, one
    rounding. Shown here on the CPU backend made to refuse half data as the GPU's fp32 algorithms do:
    forward (with bias and an alpha/beta blend), both gradients, the plan (with its ReLU epilogue) and a
    pickled plan give float32's results rounded to the dtype, bit for bit."""
    import pickle

    from minidl._dtypes import bfloat16

    dtype = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    real = cpu_conv.is_supported

    def float32_only(algo, direction, problem):
        if problem.dtype in ("float16", "bfloat16"):
            return False, f"{problem.dtype} data runs on tensor cores only"
        return real(algo, direction, problem)

    monkeypatch.setattr(cpu_conv, "is_supported", float32_only)
    rng = np.random.default_rng(4)
    desc = P.ConvolutionDescriptor(padding=1, stride=(2, 1), groups=2)
    x32 = rng.standard_normal((2, 4, 7, 6)).astype(np.float32)
    w32 = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    b32 = rng.standard_normal(6).astype(np.float32)
    if layout == "NHWC":
        x32, w32 = np.ascontiguousarray(x32.transpose(0, 2, 3, 1)), np.ascontiguousarray(w32.transpose(0, 2, 3, 1))
    x, w, b = (a.astype(dtype) for a in (x32, w32, b32))
    xw, ww, bw = (a.astype(np.float32) for a in (x, w, b))   # the half values, widened exactly

    def same(got, want32):
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.view(np.uint16), want32.astype(dtype).view(np.uint16))

    # the query: every algorithm refuses the half problem itself (and says why), the choice is fp32's
    perfs = P.find_convolution_algorithms(x.shape, w.shape, desc, dtype=str(dtype), layout=layout)
    assert perfs and all(p.status != "ok" and "tensor cores only" in p.status for p in perfs)
    assert (P.get_convolution_algorithm(x.shape, w.shape, desc, dtype=str(dtype), layout=layout)
            == P.get_convolution_algorithm(x.shape, w.shape, desc, dtype="float32", layout=layout))
    y = P.convolution_forward(x, w, desc, b, layout=layout)
    y32 = P.convolution_forward(xw, ww, desc, bw, layout=layout)
    same(y, y32)
    prior = rng.standard_normal(y.shape).astype(dtype)
    blended = P.convolution_forward(x, w, desc, b, layout=layout, alpha=0.5, beta=-2.0, out=prior.copy())
    same(blended, np.float32(0.5) * y32 + np.float32(-2.0) * prior.astype(np.float32))
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = P.convolution_backward_data(w, dy, desc, x.shape, layout=layout)
    dw = P.convolution_backward_filter(x, dy, desc, w.shape, layout=layout)
    same(dx, P.convolution_backward_data(ww, dy.astype(np.float32), desc, x.shape, layout=layout))
    same(dw, P.convolution_backward_filter(xw, dy.astype(np.float32), desc, w.shape, layout=layout))

    plan = P.ConvolutionPlan(x.shape, w.shape, desc, dtype=str(dtype), layout=layout)
    for p in (plan, pickle.loads(pickle.dumps(plan))):
        same(p.forward(x, w, b), y32)
        same(p.forward(x, w, b, activation=P.ActivationDescriptor("relu")), np.maximum(y32, 0))   # conv2d_relu's path
        same(p.backward_data(w, dy), dx.astype(np.float32))
        same(p.backward_filter(x, dy), dw.astype(np.float32))
        assert isinstance(p._impls["forward"], conv_module.HalfInFloat32)


def test_a_cpu_plan_leaves_transformed_filter_empty():
    """transformed_filter is a GPU Winograd hand-off (the forward's filters for backward_data): the NumPy reference
    has nothing to keep, leaves the list empty and gives the same dx with and without it."""
    from minidl.primitives.convolution import ConvolutionDescriptor, ConvolutionPlan

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 6, 7)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    plan = ConvolutionPlan(x.shape, w.shape, ConvolutionDescriptor(padding=1), algo="winograd")
    kept = []
    y = plan.forward(x, w, transformed_filter=kept)
    assert kept == []
    dy = np.ones_like(y)
    np.testing.assert_array_equal(plan.backward_data(w, dy, transformed_filter=kept), plan.backward_data(w, dy))


def test_a_rotated_filters_winograd_transform_is_the_forwards_permuted():
    """What the GPU's backward data relies on to reuse the forward's transformed filters (cuda/convolution.py,
    _winograd): G rot(g) G^T = Pi (G g G^T) Pi^T, Pi swapping tile positions 0 and 3, for any 3x3 g."""
    from minidl.primitives.cpu.convolution import _WINOGRAD_G as G

    Pi = np.eye(4)[[3, 1, 2, 0]]
    for seed in range(5):
        g = np.random.default_rng(seed).standard_normal((3, 3))
        np.testing.assert_allclose(G @ g[::-1, ::-1] @ G.T, Pi @ (G @ g @ G.T) @ Pi.T, rtol=1e-12, atol=1e-12)
    g = np.arange(9.0).reshape(3, 3)   # and not merely a symmetric accident: the plain transform differs
    assert not np.allclose(G @ g[::-1, ::-1] @ G.T, G @ g @ G.T)


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_backward_bias_out_dtype_float32_of_half_dy(layout):
    """out_dtype=float32 with 16-bit dy: the fp32 sums as they are (an autocast Linear's float32 bias gradient), not
    rounded to 16 bits; the same dtype is the default; anything else says what out_dtype is for."""
    import ml_dtypes

    rng = np.random.default_rng(5)
    dy = rng.standard_normal((6, 3, 7)).astype(ml_dtypes.bfloat16)
    db = P.convolution_backward_bias(dy, layout=layout, out_dtype=np.float32)
    axes = (0, 1) if layout == "NHWC" else (0, 2)
    want = dy.astype(np.float32).sum(axis=axes)
    assert db.dtype == np.float32
    np.testing.assert_allclose(db, want, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(db, want.astype(ml_dtypes.bfloat16).astype(np.float32))   # (not rounded to 16 bits)
    assert P.convolution_backward_bias(dy, layout=layout, out_dtype=dy.dtype).dtype == dy.dtype
    with pytest.raises(ValueError, match="out_dtype=float16 is for a float32 db"):
        P.convolution_backward_bias(dy, layout=layout, out_dtype=np.float16)
    with pytest.raises(ValueError, match="out_dtype=float32 is for a float32 db of float16/bfloat16 dy"):
        P.convolution_backward_bias(dy.astype(np.float64), layout=layout, out_dtype=np.float32)


def test_backward_bias_usual_call_is_remembered_and_still_checked():
    """The usual call (no out, beta 0) of a shape seen before skips the checks it passed then (the front keeps its
    backend and problem): the same sums as the first call; a new shape, dtype or a bad one is checked again."""
    from minidl.primitives import convolution as conv_front

    rng = np.random.default_rng(4)
    dy = rng.standard_normal((6, 1, 5)).astype(np.float32)
    first = P.convolution_backward_bias(dy, layout="NHWC")
    assert (dy.shape, dy.dtype, "NHWC", np.ndarray, None) in conv_front._BIAS_PLANS
    again = P.convolution_backward_bias(dy * 2, layout="NHWC")
    np.testing.assert_allclose(first, dy.sum(axis=(0, 1)), rtol=1e-6)
    np.testing.assert_allclose(again, 2 * dy.sum(axis=(0, 1)), rtol=1e-6)
    with pytest.raises(ValueError, match="convolution_backward_bias: dy must be 3-D"):
        P.convolution_backward_bias(dy.reshape(30), layout="NHWC")
    with pytest.raises(ValueError, match="layout"):
        P.convolution_backward_bias(dy, layout="NWHC")
