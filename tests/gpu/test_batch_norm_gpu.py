"""GPU batch normalization (kernels/batch_norm.cu) against torch on the GPU and the NumPy reference."""
import numpy as np
import pytest

from tests.conftest import rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(scope="module")
def torch():
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


# (channels-first shape, mode): the "planes" reduction (NCHW, inner > 1) with and without float4
# (H*W % 4), N = 1 with a big plane (pieces split inside a plane), N large (many splits), the
# "rows" reduction (NHWC; C not a multiple of 32 or 4), per-activation on (N, F) and (N, C, H, W).
CASES = [
    ((6, 5, 7, 9), "spatial"),
    ((4, 3, 8, 8), "spatial"),
    ((1, 2, 150, 151), "spatial"),
    ((64, 3, 5, 7), "spatial"),
    ((5, 37, 4, 3), "spatial"),
    ((33, 13), "spatial"),
    ((20, 70), "per_activation"),
    ((9, 3, 4, 5), "per_activation"),
]


def torch_reference(torch, x_cf, gamma, beta_, rm, rv, dy_cf, momentum, eps, mode):
    """y, dx, dgamma, dbeta, running stats, batch mean and invstd from torch on the GPU (channels first)."""
    x2 = x_cf.reshape(x_cf.shape[0], -1) if mode == "per_activation" else x_cf
    t = torch.tensor(x2, device="cuda", requires_grad=True)
    g = torch.tensor(gamma.reshape(-1), device="cuda", requires_grad=True)
    b = torch.tensor(beta_.reshape(-1), device="cuda", requires_grad=True)
    trm = torch.tensor(rm.reshape(-1), device="cuda")
    trv = torch.tensor(rv.reshape(-1), device="cuda")
    y = torch.nn.functional.batch_norm(t, trm, trv, g, b, training=True, momentum=momentum, eps=eps)
    y.backward(torch.tensor(dy_cf.reshape(x2.shape), device="cuda"))
    axes = [a for a in range(x2.ndim) if a != 1]
    mean = t.detach().double().mean(dim=axes)
    var = t.detach().double().var(dim=axes, unbiased=False)
    return dict(y=y.detach().cpu().numpy().reshape(x_cf.shape), dx=t.grad.cpu().numpy().reshape(x_cf.shape),
                dgamma=g.grad.cpu().numpy(), dbeta=b.grad.cpu().numpy(), rm=trm.cpu().numpy(), rv=trv.cpu().numpy(),
                mean=mean.cpu().numpy(), invstd=(1.0 / np.sqrt(var.cpu().numpy() + eps)))


def to_layout(a, layout, mode):
    if layout == "NHWC" and mode == "spatial" and a.ndim > 2:
        return np.ascontiguousarray(np.moveaxis(a, 1, -1))
    return a


def from_layout(a, layout, mode):
    if layout == "NHWC" and mode == "spatial" and a.ndim > 2:
        return np.moveaxis(a, -1, 1)
    return a


@pytest.mark.parametrize("shape,mode", CASES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_training_and_backward_match_torch(cp, torch, shape, mode, layout):
    from minidl.primitives import batch_norm_backward, batch_norm_forward_training, batch_norm_param_shape

    if mode == "per_activation" and layout == "NHWC":
        pytest.skip("per-activation ignores the layout (one statistic per element)")
    rng = np.random.default_rng(sum(shape))
    x_cf = (rng.standard_normal(shape) * 2 + 30).astype(np.float32)  # |mean| >> std: Welford matters
    dy_cf = rng.standard_normal(shape).astype(np.float32)
    x_host, dy_host = to_layout(x_cf, layout, mode), to_layout(dy_cf, layout, mode)
    pshape = batch_norm_param_shape(x_host.shape, mode, layout)
    gamma = (rng.random(pshape) + 0.5).astype(np.float32)
    beta_ = rng.standard_normal(pshape).astype(np.float32)
    rm = rng.standard_normal(pshape).astype(np.float32)
    rv = (rng.random(pshape) + 0.5).astype(np.float32)
    # Per-activation parameters follow x's memory order; torch sees channels-first features.
    ref = torch_reference(torch, x_cf, gamma, beta_, rm, rv, dy_cf, 0.1, 1e-5, mode)

    rm_gpu, rv_gpu = cp.asarray(rm), cp.asarray(rv)
    y, mean, invstd = batch_norm_forward_training(cp.asarray(x_host), cp.asarray(gamma), cp.asarray(beta_), rm_gpu,
                                                  rv_gpu, momentum=0.1, eps=1e-5, mode=mode, layout=layout)
    assert rel_err(from_layout(cp.asnumpy(y), layout, mode), ref["y"]) <= 1e-4
    assert rel_err(cp.asnumpy(mean).reshape(-1), ref["mean"]) <= 1e-6
    assert rel_err(cp.asnumpy(invstd).reshape(-1), ref["invstd"]) <= 1e-5
    assert rel_err(cp.asnumpy(rm_gpu).reshape(-1), ref["rm"]) <= 1e-6
    assert rel_err(cp.asnumpy(rv_gpu).reshape(-1), ref["rv"]) <= 1e-5

    dx, dgamma, dbeta = batch_norm_backward(cp.asarray(x_host), cp.asarray(dy_host), cp.asarray(gamma), mean, invstd,
                                            mode=mode, layout=layout)
    assert rel_err(from_layout(cp.asnumpy(dx), layout, mode), ref["dx"]) <= 1e-4
    assert rel_err(cp.asnumpy(dgamma).reshape(-1), ref["dgamma"]) <= 1e-4
    assert rel_err(cp.asnumpy(dbeta).reshape(-1), ref["dbeta"]) <= 1e-5

    # The NumPy reference, float32 on the same data.
    rm_ref, rv_ref = rm.copy(), rv.copy()
    y_ref, mean_ref, invstd_ref = batch_norm_forward_training(x_host, gamma, beta_, rm_ref, rv_ref, momentum=0.1,
                                                              eps=1e-5, mode=mode, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-4
    assert rel_err(cp.asnumpy(rv_gpu), rv_ref) <= 1e-5
    dx_ref, _, _ = batch_norm_backward(x_host, dy_host, gamma, mean_ref, invstd_ref, mode=mode, layout=layout)
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-4


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_without_affine_or_running_stats(cp, layout):
    from minidl.primitives import batch_norm_backward, batch_norm_forward_training

    rng = np.random.default_rng(9)
    x_host = rng.standard_normal((7, 6, 5, 3)).astype(np.float32)
    dy_host = rng.standard_normal(x_host.shape).astype(np.float32)
    y, mean, invstd = batch_norm_forward_training(cp.asarray(x_host), None, None, None, None, layout=layout)
    y_ref, mean_ref, invstd_ref = batch_norm_forward_training(x_host, None, None, None, None, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5
    assert rel_err(cp.asnumpy(invstd), invstd_ref) <= 1e-5
    dx, dgamma, dbeta = batch_norm_backward(cp.asarray(x_host), cp.asarray(dy_host), None, mean, invstd, layout=layout)
    assert dgamma is None and dbeta is None
    dx_ref, _, _ = batch_norm_backward(x_host, dy_host, None, mean_ref, invstd_ref, layout=layout)
    assert rel_err(cp.asnumpy(dx), dx_ref) <= 1e-4


@pytest.mark.parametrize("shape,mode,layout", [((4, 6, 5, 7), "spatial", "NCHW"), ((4, 5, 7, 6), "spatial", "NHWC"),
                                               ((8, 3, 2, 2), "per_activation", "NCHW")])
def test_inference_matches_reference(cp, shape, mode, layout):
    from minidl.primitives import batch_norm_forward_inference, batch_norm_param_shape

    rng = np.random.default_rng(10)
    x_host = rng.standard_normal(shape).astype(np.float32)
    pshape = batch_norm_param_shape(shape, mode, layout)
    params = [(rng.random(pshape) + 0.5).astype(np.float32) for _ in range(4)]
    y = batch_norm_forward_inference(cp.asarray(x_host), *[cp.asarray(p) for p in params], eps=1e-3, mode=mode,
                                     layout=layout)
    y_ref = batch_norm_forward_inference(x_host, *params, eps=1e-3, mode=mode, layout=layout)
    assert rel_err(cp.asnumpy(y), y_ref) <= 1e-5


def test_large_batch_statistics_are_accurate(cp):
    """Many values per channel far from zero (mean/std = 1000): one-pass Welford keeps float32
    accuracy where E[x^2] - E[x]^2 would lose about 6% of the variance to cancellation."""
    from minidl.primitives import batch_norm_forward_training

    rng = np.random.default_rng(11)
    x_host = (rng.standard_normal((256, 4, 32, 32)) * 0.1 + 100).astype(np.float32)
    _, mean, invstd = batch_norm_forward_training(cp.asarray(x_host), None, None, None, None, eps=1e-12)
    x64 = x_host.astype(np.float64)
    mean64 = x64.mean(axis=(0, 2, 3))
    invstd64 = 1 / np.sqrt(x64.var(axis=(0, 2, 3)) + 1e-12)
    assert rel_err(cp.asnumpy(mean), mean64) <= 1e-6
    assert rel_err(cp.asnumpy(invstd), invstd64) <= 1e-3


@pytest.mark.parametrize("layout, shape", [("NCHW", (16, 24, 9, 9)), ("NHWC", (16, 9, 9, 40)), ("NCHW", (256, 3, 7, 5))])
@pytest.mark.parametrize("relu", [False, True])
def test_one_launch_reductions_equal_the_finalize_kernels(cp, monkeypatch, layout, shape, relu):
    """The last block of each channel (tile) finalizes in the reduction's launch: the same bits as the separate
    finalize kernels (what runs in a capture without counters), running statistics included, and the
    counters are back at zero after every launch."""
    from minidl.primitives import batch_norm as P
    from minidl.primitives.cuda import _launch
    from minidl.primitives.cuda import batch_norm as cuda_bn

    rng = np.random.default_rng(3)
    C = shape[1] if layout == "NCHW" else shape[-1]
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32) * 3 + 1)
    dy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    gamma, beta = cp.asarray(rng.random(C).astype(np.float32) + 0.5), cp.asarray(rng.standard_normal(C).astype(np.float32))
    forward = P.batch_norm_relu_forward_training if relu else P.batch_norm_forward_training

    def run():
        rm, rv = cp.zeros(C, cp.float32), cp.ones(C, cp.float32)
        y, mean, invstd = forward(x, gamma, beta, rm, rv, layout=layout)
        if relu:
            grads = P.batch_norm_relu_backward(x, dy, gamma, beta, mean, invstd, layout=layout)
        else:
            grads = P.batch_norm_backward(x, dy, gamma, mean, invstd, layout=layout)
        return [cp.asnumpy(a) for a in (y, mean, invstd, rm, rv, *grads)]

    one_launch = run()
    assert int(_launch.arrival_counters(1).max()) == 0
    monkeypatch.setattr(cuda_bn, "arrival_counters", lambda count: None)
    separate = run()
    for a, b in zip(one_launch, separate):
        assert (a.view(np.uint32) == b.view(np.uint32)).all()


HALF_CASES = [((6, 5, 7, 9), "spatial"), ((4, 3, 8, 8), "spatial"), ((64, 3, 5, 7), "spatial"),
              ((5, 37, 4, 3), "spatial"), ((20, 70), "per_activation")]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape,mode", HALF_CASES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("relu", [False, True])
def test_16bit_data_runs_in_the_kernels_and_equals_float32_copies(cp, monkeypatch, dtype, shape, mode, layout, relu):
    """16-bit x and dy with float32 parameters (autocast's convolution outputs): the kernels read and write the
    16-bit data themselves (no float32 copies are made) and give the bits of the float32 kernels on the widened
    data, rounded once: y, dx in the data's dtype; the statistics, running averages, dgamma, dbeta in float32."""
    from minidl import _dtypes
    from minidl import primitives as P
    from minidl.primitives import _common

    dt = _dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(np.float16)
    rng = np.random.default_rng(sum(shape) + relu)
    x_cf = (rng.standard_normal(shape) * 2 + 3).astype(np.float32).astype(dt)
    dy_cf = rng.standard_normal(shape).astype(np.float32).astype(dt)
    x16, dy16 = cp.asarray(to_layout(x_cf, layout, mode)), cp.asarray(to_layout(dy_cf, layout, mode))
    x32, dy32 = cp.asarray(to_layout(x_cf.astype(np.float32), layout, mode)), cp.asarray(
        to_layout(dy_cf.astype(np.float32), layout, mode))
    pshape = P.batch_norm_param_shape(x16.shape, mode, layout)
    gamma, beta_ = cp.asarray(rng.random(pshape) + 0.5, dtype=cp.float32), cp.asarray(rng.standard_normal(pshape),
                                                                                     dtype=cp.float32)
    fwd = P.batch_norm_relu_forward_training if relu else P.batch_norm_forward_training
    bwd = P.batch_norm_relu_backward if relu else P.batch_norm_backward
    bwd_args = (gamma, beta_) if relu else (gamma,)
    infer = P.batch_norm_relu_forward_inference if relu else P.batch_norm_forward_inference
    results = {}
    for name, x, dy in (("float32", x32, dy32), ("16-bit", x16, dy16)):
        if name == "16-bit":   # the native path makes no float32 copy of any argument
            monkeypatch.setattr(_common, "_half_to_float32", lambda *a: pytest.fail("a float32 copy was made"))
        rm, rv = cp.zeros(pshape, cp.float32), cp.ones(pshape, cp.float32)
        y, mean, invstd = fwd(x, gamma, beta_, rm, rv, momentum=0.1, eps=1e-5, mode=mode, layout=layout)
        dx, dgamma, dbeta = bwd(x, dy, *bwd_args, mean, invstd, mode=mode, layout=layout)
        y_inf = infer(x, gamma, beta_, rm, rv, eps=1e-5, mode=mode, layout=layout)
        results[name] = [cp.asnumpy(a) for a in (y, dx, y_inf, mean, invstd, rm, rv, dgamma, dbeta)]
    for i, (label, got, f32) in enumerate(zip(("y", "dx", "y inference", "mean", "invstd", "running_mean",
                                                "running_var", "dgamma", "dbeta"), results["16-bit"], results["float32"])):
        want = f32.astype(dt) if i < 3 else f32
        assert got.dtype == want.dtype, label
        assert (got.view(np.uint8) == want.view(np.uint8)).all(), label


@pytest.mark.parametrize("layout, shape", [("NCHW", (16, 24, 9, 9)), ("NHWC", (16, 9, 9, 40)), ("NCHW", (8, 3, 4, 5))])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("one_launch", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_num_batches_tracked_counts_in_the_statistics_kernel(cp, monkeypatch, layout, shape, relu, one_launch, dtype):
    """A layer's counter is incremented once per call by the finalize (channel 0's thread), in the reductions'
    launch or in the separate finalize kernel, with 16-bit data in the kernels too; nothing else changes (the same
    bits as a call without it). No launch of its own: the kernels of the call are the same."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import batch_norm as P
    from minidl.primitives.cuda import batch_norm as cuda_bn

    if not one_launch:
        monkeypatch.setattr(cuda_bn, "arrival_counters", lambda count: None)
    rng = np.random.default_rng(5)
    C = shape[1] if layout == "NCHW" else shape[-1]
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32) * 2 + 1)
    if dtype == "bfloat16":
        x = x.astype(bfloat16)
    gamma, beta = cp.asarray(rng.random(C).astype(np.float32) + 0.5), cp.asarray(rng.standard_normal(C).astype(np.float32))
    forward = P.batch_norm_relu_forward_training if relu else P.batch_norm_forward_training
    counter = cp.asarray(np.int64(41))
    outs = {}
    for name, kwargs in (("plain", {}), ("counted", {"num_batches_tracked": counter})):
        rm, rv = cp.zeros(C, cp.float32), cp.ones(C, cp.float32)
        outs[name] = [cp.asnumpy(a) for a in (*forward(x, gamma, beta, rm, rv, layout=layout, **kwargs), rm, rv)]
    assert int(counter) == 42
    for _ in range(3):
        forward(x, gamma, beta, None, None, layout=layout, num_batches_tracked=counter)
    assert int(counter) == 45
    for a, b in zip(outs["plain"], outs["counted"]):
        assert (a.view(np.uint8) == b.view(np.uint8)).all()


def _gpu_kernels(torch, fn):
    """The GPU kernels fn() runs, as torch.profiler's CUPTI tracing sees them (CuPy's and ours too)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def test_a_batchnorm_layer_counts_without_a_launch_of_its_own(cp, torch):
    """nn.BatchNorm2d's num_batches_tracked moves with each training batch as torch's does (not in eval), and the
    counting is no kernel of its own: a training forward runs the kernels of the bare primitive, no more."""
    import minidl
    import minidl.nn as nn
    from minidl.primitives import batch_norm as P

    bn = nn.BatchNorm2d(8).to("cuda")
    x = minidl.randn(4, 8, 6, 6).to("cuda")
    for _ in range(3):
        bn(x)
    assert int(bn.num_batches_tracked.item()) == 3
    bn.eval()
    bn(x)
    assert int(bn.num_batches_tracked.item()) == 3
    bn.train()
    layer = _gpu_kernels(torch, lambda: bn(x))
    bare = _gpu_kernels(torch, lambda: P.batch_norm_forward_training(
        x._data, bn.weight._data, bn.bias._data, bn.running_mean._data, bn.running_var._data))
    assert layer == bare and len(layer) >= 2
    assert int(bn.num_batches_tracked.item()) == 5
