"""The GPU convolution backend (kernels/convolution.cu) against the float64 NumPy reference.

Every algorithm x direction x layout that applies is run on problems that exercise 1-D/2-D/3-D,
padding, stride, dilation, groups (depthwise too), several 128 x 128 tiles, and split-K. Outputs are
poisoned with NaN (beta = 0 must not read them; every element must be written). Also: bias, alpha/beta
blending, cuDNN through torch (TF32 off) on one larger shape, and the per-thread handle.
"""
import threading

import numpy as np
import pytest

from minidl.primitives.convolution import (ConvolutionDescriptor, convolution_backward_bias,
                                           convolution_backward_data, convolution_backward_filter,
                                           convolution_forward, convolution_output_shape)
from tests.conftest import captured_without_arrival_counters, rel_err

pytestmark = pytest.mark.gpu

TOL = 1e-4
ALGOS = ("direct", "im2col_gemm", "implicit_gemm", "implicit_precomp_gemm", "winograd")
DIRECTIONS = ("forward", "backward_data", "backward_filter")

# (name, N, C, spatial in, K, kernel, padding, stride, dilation, groups)
PROBLEMS = [
    ("2d_3x3_pad1", 2, 3, (9, 11), 5, (3, 3), 1, 1, 1, 1),
    ("2d_3x3_pad0_odd", 2, 3, (8, 9), 4, (3, 3), 0, 1, 1, 1),
    ("2d_stride_dil", 2, 4, (10, 13), 7, (3, 2), (1, 2), 2, (1, 2), 1),
    ("2d_groups", 2, 6, (7, 8), 4, (3, 3), 1, 1, 1, 2),
    ("2d_depthwise", 2, 4, (6, 6), 8, (3, 3), 1, 1, 1, 4),
    ("1d", 3, 5, (17,), 6, (4,), 2, 3, 2, 1),
    ("3d", 2, 3, (5, 6, 7), 4, (2, 3, 2), (1, 0, 1), (1, 2, 1), 1, 1),
    ("multi_tile", 3, 20, (15, 17), 130, (3, 3), 1, 1, 1, 1),
    ("split_k_wgrad", 8, 4, (40, 40), 6, (3, 3), 1, 1, 1, 1),
    ("tile64_fwd_dgrad", 2, 40, (9, 10), 50, (3, 3), 1, 1, 1, 1),     # 128 x 64 tiles for fprop and dgrad
    ("tile64_wgrad", 2, 6, (12, 12), 70, (3, 3), 1, 1, 1, 1),         # 54 filter taps: 128 x 64 wgrad tile
    ("wgrad_transposed", 3, 9, (11, 12), 20, (3, 3), 1, 1, 1, 1),     # Kg <= 64 < taps: dw^T, 128 x 32
    ("wgrad_transposed_groups", 2, 16, (10, 9), 8, (3, 3), 1, 1, 1, 2),
    ("wgrad_transposed_split_k", 8, 8, (32, 32), 16, (3, 3), 1, 1, 1, 1),
]

# First layers (1-4 input channels): the small-channel kernels of direct. Sizes off every tile: 8 x 32
# output tiles and 32 channels per block (forward), 32 or 64 channels x 32-pixel chunks split over
# many blocks (backward_filter).
SMALL_C_PROBLEMS = [
    ("small_c_5x5_c1", 3, 1, (30, 37), 33, (5, 5), 2, 1, 1, 1),            # two channel blocks of 32
    ("small_c_7x7_s2_c3", 2, 3, (37, 41), 20, (7, 7), 3, 2, 1, 1),          # 4 stride phases, odd sizes
    ("small_c_s3_dil2_c2", 2, 2, (23, 19), 7, (3, 3), (2, 1), 3, 2, 1),     # phases, dilation, pad per dim
    ("small_c_stride_gt_kernel", 2, 1, (13, 14), 5, (2, 2), 0, 3, 1, 1),    # phases that no tap reaches
    ("small_c_1d_c4", 3, 4, (50,), 70, (5,), 2, 2, 1, 1),                   # 1-D; 70 channels: 2 x 64 wgrad
    ("small_c_many_slices", 16, 3, (33, 35), 64, (3, 3), 1, 1, 1, 1),       # wgrad split over ~all SMs
    ("small_c_one_chunk", 1, 2, (5, 6), 3, (3, 3), 1, 1, 1, 1),             # wgrad: one chunk, no split
    ("small_c_3d_wgrad", 2, 2, (4, 6, 7), 5, (2, 3, 3), 1, (1, 2, 1), 1, 1), # 3-D: wgrad only
]
PROBLEMS = PROBLEMS + SMALL_C_PROBLEMS


def _shapes(N, C, size, K, kernel, groups, layout):
    if layout == "NCHW":
        return (N, C) + size, (K, C // groups) + kernel
    return (N,) + size + (C,), (K,) + kernel + (C // groups,)


def _setup(problem, layout, seed=0):
    name, N, C, size, K, kernel, pad, stride, dil, groups = problem
    desc = ConvolutionDescriptor(padding=pad, stride=stride, dilation=dil, groups=groups, spatial_dims=len(size))
    x_shape, w_shape = _shapes(N, C, size, K, kernel, groups, layout)
    y_shape = convolution_output_shape(x_shape, w_shape, desc, layout)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape)
    dy = rng.standard_normal(y_shape)
    return desc, x, w, dy


def _supported(algo, direction, desc, x, w, layout):
    from minidl.primitives.convolution import _make_problem
    from minidl.primitives.cuda import convolution as impl

    problem = _make_problem("test", x.shape, w.shape, desc, layout, np.float32)
    return impl.is_supported(algo, direction, problem)[0]


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
@pytest.mark.parametrize("algo", ALGOS)
def test_gpu_convolution_matches_float64_reference(algo, direction, layout, problem):
    import cupy

    desc, x, w, dy = _setup(problem, layout)
    if not _supported(algo, direction, desc, x, w, layout):
        pytest.skip(f"{algo} does not apply to {direction} of {problem[0]}")
    want = _run(direction, "direct", desc, x, w, dy, layout)               # NumPy float64
    g = {k: cupy.asarray(v.astype(np.float32)) for k, v in (("x", x), ("w", w), ("dy", dy))}
    out = cupy.full(_result_shape(direction, x, w, dy), np.nan, dtype=cupy.float32)
    got = _run(direction, algo, desc, g["x"], g["w"], g["dy"], layout, out=out)
    assert got is out
    assert rel_err(cupy.asnumpy(out), want) <= TOL


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("algo", ["direct", "im2col_gemm", "implicit_gemm", "implicit_precomp_gemm", "winograd"])
def test_gpu_forward_bias_alpha_beta(algo, layout):
    import cupy

    desc, x, w, dy = _setup(PROBLEMS[0], layout, seed=5)
    rng = np.random.default_rng(6)
    bias = rng.standard_normal(w.shape[0])
    prior = rng.standard_normal(dy.shape)
    want = 0.5 * convolution_forward(x, w, desc, bias, layout=layout, algo="direct") - 2.0 * prior
    out = cupy.asarray(prior.astype(np.float32))
    convolution_forward(cupy.asarray(x.astype(np.float32)), cupy.asarray(w.astype(np.float32)), desc,
                        cupy.asarray(bias.astype(np.float32)), algo=algo, layout=layout, alpha=0.5,
                        beta=-2.0, out=out)
    assert rel_err(cupy.asnumpy(out), want) <= TOL


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction, algo", [("backward_data", "implicit_gemm"), ("backward_data", "im2col_gemm"),
                                             ("backward_data", "winograd"), ("backward_filter", "implicit_gemm"),
                                             ("backward_filter", "im2col_gemm"), ("backward_filter", "direct")])
def test_gpu_backward_alpha_beta(direction, algo, layout):
    import cupy

    problem = PROBLEMS[8] if direction == "backward_filter" else PROBLEMS[0]   # split-K for wgrad
    desc, x, w, dy = _setup(problem, layout, seed=7)
    prior = np.random.default_rng(8).standard_normal(_result_shape(direction, x, w, dy))
    want = 1.5 * _run(direction, "direct", desc, x, w, dy, layout) + 0.25 * prior
    out = cupy.asarray(prior.astype(np.float32))
    g = [cupy.asarray(a.astype(np.float32)) for a in (x, w, dy)]
    _run(direction, algo, desc, *g, layout, alpha=1.5, beta=0.25, out=out)
    assert rel_err(cupy.asnumpy(out), want) <= TOL


@pytest.mark.parametrize("problem", SMALL_C_PROBLEMS, ids=[p[0] for p in SMALL_C_PROBLEMS])
def test_small_channel_problems_take_the_small_channel_kernels(problem):
    """The problems above must really run the dedicated kernels (not the general fallbacks)."""
    from minidl.primitives.convolution import _make_problem
    from minidl.primitives.cuda.convolution import small_channel_kernel

    for layout in ("NCHW", "NHWC"):
        desc, x, w, dy = _setup(problem, layout)
        p = _make_problem("test", x.shape, w.shape, desc, layout, np.float32)
        assert small_channel_kernel("backward_filter", p)
        assert small_channel_kernel("forward", p) == (len(problem[3]) <= 2)
        assert not small_channel_kernel("backward_data", p)


def test_small_channel_kernel_limits():
    from minidl.primitives.convolution import _make_problem
    from minidl.primitives.cuda.convolution import small_channel_kernel

    def problem(C, kernel, groups=1, stride=1, dilation=1):
        desc = ConvolutionDescriptor(padding=0, stride=stride, dilation=dilation, groups=groups)
        return _make_problem("test", (2, C, 64, 64), (8, C // groups) + kernel, desc, "NCHW", np.float32)

    assert small_channel_kernel("forward", problem(3, (7, 7), stride=2))
    assert not small_channel_kernel("forward", problem(8, (3, 3)))                 # too many channels
    assert not small_channel_kernel("backward_filter", problem(4, (7, 7)))         # 196 taps > 160
    assert not small_channel_kernel("forward", problem(4, (2, 2), groups=2))       # groups
    assert not small_channel_kernel("forward", problem(4, (5, 5), stride=4))       # input tile > 6144 floats


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("direction, algo, index", [("forward", "direct", 1), ("forward", "direct", 2),
                                                    ("backward_filter", "direct", 5),
                                                    ("backward_filter", "direct", 6)])
def test_gpu_small_channel_alpha_beta(direction, algo, index, layout):
    import cupy

    desc, x, w, dy = _setup(SMALL_C_PROBLEMS[index], layout, seed=12)
    rng = np.random.default_rng(13)
    prior = rng.standard_normal(_result_shape(direction, x, w, dy))
    bias = rng.standard_normal(w.shape[0])
    if direction == "forward":
        want = -0.75 * convolution_forward(x, w, desc, bias, layout=layout, algo="direct") + 0.5 * prior
    else:
        want = -0.75 * _run(direction, "direct", desc, x, w, dy, layout) + 0.5 * prior
    out = cupy.asarray(prior.astype(np.float32))
    g = [cupy.asarray(a.astype(np.float32)) for a in (x, w, dy)]
    if direction == "forward":
        convolution_forward(g[0], g[1], desc, cupy.asarray(bias.astype(np.float32)), algo=algo, layout=layout,
                            alpha=-0.75, beta=0.5, out=out)
    else:
        _run(direction, algo, desc, *g, layout, alpha=-0.75, beta=0.5, out=out)
    assert rel_err(cupy.asnumpy(out), want) <= TOL


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("spatial", [(5,), (6, 7), (3, 4, 5)])
def test_gpu_backward_bias(layout, spatial):
    import cupy

    rng = np.random.default_rng(9)
    K = 37
    shape = (3, K) + spatial if layout == "NCHW" else (3,) + spatial + (K,)
    dy = rng.standard_normal(shape)
    prior = rng.standard_normal(K)
    want = 2.0 * convolution_backward_bias(dy, layout=layout) - prior
    out = cupy.asarray(prior.astype(np.float32))
    convolution_backward_bias(cupy.asarray(dy.astype(np.float32)), layout=layout, alpha=2.0, beta=-1.0, out=out)
    assert rel_err(cupy.asnumpy(out), want) <= TOL


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("rows,K", [(1, 5), (77, 37), (16384, 384), (3000, 1000)])
def test_gpu_backward_bias_channels_last_column_sums(dtype, rows, K):
    """The channels-last kernel (nn.Linear's bias gradient too): column sums of (rows, K) in fp32 chunks added
    in order, in every data type, with alpha/beta into an out of that type; the same bits on every run."""
    import cupy

    from minidl._dtypes import bfloat16

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(rows + K)
    host = rng.standard_normal((rows, 1, K)).astype(dt)
    prior = rng.standard_normal(K).astype(dt)
    want = 2.0 * host.astype(np.float64).sum(axis=(0, 1)) - prior.astype(np.float64)
    dy = cupy.asarray(host)
    out = cupy.asarray(prior)
    convolution_backward_bias(dy, layout="NHWC", alpha=2.0, beta=-1.0, out=out)
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    assert out.dtype == dt and rel_err(cupy.asnumpy(out).astype(np.float64), want) <= tol
    first = convolution_backward_bias(dy, layout="NHWC")
    again = convolution_backward_bias(dy, layout="NHWC")
    assert first.dtype == dt and (cupy.asnumpy(first).view(np.uint8) == cupy.asnumpy(again).view(np.uint8)).all()
    # the one-launch form (the last block of a column adds the chunks) against the two-launch form (a separate
    # finish kernel, what runs inside a capture that has no counters yet): the same bits
    from minidl.primitives.cuda import _launch

    two = captured_without_arrival_counters(lambda: convolution_backward_bias(dy, layout="NHWC"))
    assert (cupy.asnumpy(two).view(np.uint8) == cupy.asnumpy(first).view(np.uint8)).all()
    counters = _launch.arrival_counters(1)
    assert int(counters.max()) == 0   # every launch set its counts back


def test_gpu_matches_cudnn_through_torch():
    """One shape large enough for many tiles, against cuDNN (TF32 off) forward and both gradients."""
    import cupy
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    rng = np.random.default_rng(10)
    x = rng.standard_normal((8, 32, 19, 21)).astype(np.float32)
    w = rng.standard_normal((160, 32, 3, 3)).astype(np.float32)
    b = rng.standard_normal(160).astype(np.float32)
    desc = ConvolutionDescriptor(padding=1, stride=(1, 2))
    tx = torch.tensor(x, device="cuda", requires_grad=True)
    tw = torch.tensor(w, device="cuda", requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, torch.tensor(b, device="cuda"), padding=1, stride=(1, 2))
    tdy = torch.randn_like(ty)
    ty.backward(tdy)
    gx, gw, gb, gdy = (cupy.asarray(a) for a in (x, w, b, tdy.cpu().numpy()))
    for algo in ("implicit_gemm", "implicit_precomp_gemm"):
        y = convolution_forward(gx, gw, desc, gb, algo=algo)
        dx = convolution_backward_data(gw, gdy, desc, x.shape, algo=algo)
        assert rel_err(cupy.asnumpy(y), ty.detach().cpu().numpy()) <= TOL
        assert rel_err(cupy.asnumpy(dx), tx.grad.cpu().numpy()) <= TOL
    dw = convolution_backward_filter(gx, gdy, desc, w.shape, algo="implicit_gemm")
    assert rel_err(cupy.asnumpy(dw), tw.grad.cpu().numpy()) <= TOL


def test_gpu_rejects_float64_and_unsupported_winograd():
    import cupy

    desc = ConvolutionDescriptor(padding=1, stride=2)
    x = cupy.ones((1, 2, 6, 6), dtype=cupy.float32)
    w = cupy.ones((3, 2, 3, 3), dtype=cupy.float32)
    with pytest.raises(ValueError, match="winograd needs stride 1"):
        convolution_forward(x, w, desc, algo="winograd")
    with pytest.raises(ValueError, match="float32"):
        convolution_forward(x.astype(cupy.float64), w.astype(cupy.float64), desc, algo="implicit_gemm")


def test_handle_is_per_thread_and_threads_compute_correctly():
    import cupy
    from minidl.primitives.cuda.handle import get_handle

    main = get_handle()
    assert get_handle() is main
    desc, x, w, dy = _setup(PROBLEMS[7], "NCHW", seed=11)
    want = _run("forward", "direct", desc, x, w, dy, "NCHW")
    results, handles = {}, {}

    def work(i):
        handles[i] = get_handle()
        gx, gw = cupy.asarray(x.astype(np.float32)), cupy.asarray(w.astype(np.float32))
        for _ in range(3):
            y = convolution_forward(gx, gw, desc, algo="im2col_gemm")     # uses the handle's workspace
        cupy.cuda.get_current_stream().synchronize()
        results[i] = cupy.asnumpy(y)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(h) for h in handles.values()} | {id(main)}) == 4
    for i in range(3):
        assert rel_err(results[i], want) <= TOL


def test_gpu_heuristic_is_problem_aware():
    """algo='auto' without measuring (the 'heuristic' policy) follows the measured table's rules."""
    from minidl.primitives.convolution import get_convolution_algorithm

    def pick(x_shape, w_shape, direction, **d):
        desc = ConvolutionDescriptor(spatial_dims=2, **d)
        return get_convolution_algorithm(x_shape, w_shape, desc, direction=direction, device="cuda",
                                         dtype="float32", policy="heuristic")

    assert pick((8, 3, 32, 32), (16, 3, 3, 3), "forward", padding=1) == "direct"           # first layer
    assert pick((8, 3, 32, 32), (16, 3, 3, 3), "backward_filter", padding=1) == "direct"
    assert pick((8, 3, 32, 32), (16, 3, 3, 3), "backward_data", padding=1) == "im2col_gemm"
    assert pick((8, 32, 16, 16), (32, 32, 3, 3), "forward", padding=1) == "winograd"      # 3x3 stride 1
    assert pick((8, 32, 16, 16), (32, 32, 3, 3), "backward_data", padding=1) == "winograd"
    assert pick((8, 32, 16, 16), (32, 32, 3, 3), "backward_filter", padding=1) == "implicit_gemm"
    assert pick((8, 32, 16, 16), (64, 32, 1, 1), "forward") == "implicit_precomp_gemm"
    assert pick((8, 32, 16, 16), (64, 32, 3, 3), "backward_data", padding=1, stride=2) == "im2col_gemm"


# (N, C, spatial, K, padding): odd sizes (a partial last tile), padding 0, 1 and 2, more output than input channels
WINOGRAD_REUSE = [(2, 3, (9, 11), 5, 1), (2, 6, (8, 9), 4, 0), (3, 20, (15, 17), 130, 1), (2, 5, (7, 6), 3, 2)]


@pytest.mark.parametrize("N, C, spatial, K, padding", WINOGRAD_REUSE)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_winograd_backward_data_reuses_the_forwards_filters(N, C, spatial, K, padding, layout):
    """A Winograd backward_data handed the forward's transformed filters (ConvolutionPlan's transformed_filter)
    runs no filter transform of its own, reads them permuted, and gives dx as the float64 reference does (and as
    its own transform does, to the last bits of the transform's additions); the list is emptied by the use."""
    import cupy

    from minidl.primitives.convolution import ConvolutionPlan
    from minidl.primitives.cuda import convolution as launcher

    rng = np.random.default_rng(7)
    desc = ConvolutionDescriptor(padding=padding)
    x = rng.standard_normal((N, C, *spatial)).astype(np.float32)
    w = rng.standard_normal((K, C, 3, 3)).astype(np.float32)
    y_shape = convolution_output_shape(x.shape, w.shape, desc)
    dy = rng.standard_normal(y_shape).astype(np.float32)
    if layout == "NHWC":
        x, dy, w = (np.ascontiguousarray(np.moveaxis(a, 1, -1)) for a in (x, dy, w))
    plan = ConvolutionPlan(x.shape, w.shape, desc, device="cuda", layout=layout, algo="winograd")
    assert plan.algorithm("backward_data") == "winograd"
    xg, wg, dyg = (cupy.asarray(a) for a in (x, w, dy))
    own = cupy.asnumpy(plan.backward_data(wg, dyg))
    kept = []
    plan.forward(xg, wg, transformed_filter=kept)
    assert len(kept) == 1
    transforms = []
    real = launcher.get_kernel

    def counting(module, name, *args, **kwargs):
        transforms.append(name)
        return real(module, name, *args, **kwargs)

    launcher.get_kernel = counting
    try:
        reused = cupy.asnumpy(plan.backward_data(wg, dyg, transformed_filter=kept))
    finally:
        launcher.get_kernel = real
    assert kept == [] and "convolution_winograd_filter_transform" not in transforms
    assert "convolution_winograd_input_transform" in transforms
    ref = convolution_backward_data(w.astype(np.float64), dy.astype(np.float64), desc, x.shape, layout=layout,
                                    algo="direct")
    assert rel_err(reused, ref) <= TOL
    assert rel_err(reused, own) <= 1e-6


def test_a_conv_layer_transforms_its_filters_once_per_step():
    """nn.Conv2d in exact fp32 on Winograd: the forward's filter transform serves the backward's data gradient, so
    a training step launches convolution_winograd_filter_transform once (twice before), with torch's gradients."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import minidl
    import minidl.nn as nn

    minidl.manual_seed(0)
    conv = nn.Conv2d(16, 32, 3, padding=1).to("cuda")
    x = minidl.randn(4, 16, 12, 12).to("cuda").requires_grad_()
    with minidl.backends.cudnn.flags(allow_tf32=False):
        conv(x).sum().backward()
        plan = next(iter(conv._conv_plans.values()))
        assert plan.algorithm("forward") == plan.algorithm("backward_data") == "winograd"
        x.grad = None
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            conv(x).sum().backward()
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert names.count("convolution_winograd_filter_transform") == 1
    assert names.count("convolution_winograd_input_transform") == 2
    tx = torch.tensor(x.detach().cpu().numpy(), requires_grad=True)
    tw = torch.tensor(conv.weight.detach().cpu().numpy())
    torch.nn.functional.conv2d(tx, tw, torch.tensor(conv.bias.detach().cpu().numpy()), padding=1).sum().backward()
    assert rel_err(x.grad.cpu().numpy(), tx.grad.numpy()) <= TOL
