"""Fused kernels on the GPU against the unfused GPU path and the NumPy reference: batch norm + ReLU
(kernels/batch_norm.cu), residual add + ReLU (kernels/activation.cu), the convolution with the ReLU
in its epilogue (kernels/convolution.cu, -DMINIDL_CONV_RELU_EPILOGUE); fuse_modules on the GPU; and
the profiler's exact launch counts on a known model.

Outputs are poisoned: the memory pool is filled with NaN before each fused call (freed NaN blocks
are what cupy.empty hands back), so an element a kernel forgets to write fails the test."""
import os

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl import primitives as P
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

REPORT = os.environ.get("MINIDL_FUSED_REPORT")  # a file: one line per comparison, bit-equal or not


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def _poison(cp, nbytes):
    """Fill the pool's free blocks with NaN: allocate, fill, free (the next empties reuse them)."""
    blocks = [cp.full(max(1, nbytes // 4), cp.nan, dtype=cp.float32) for _ in range(6)]
    del blocks


def _same(name, got, want, tol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    exact = np.array_equal(got, want)
    if REPORT:
        with open(REPORT, "a") as f:
            f.write(f"{name}: {'bit-equal' if exact else f'rel_err {rel_err(got, want):.2e}'}\n")
    assert got.shape == want.shape
    assert np.all(np.isfinite(got)), f"{name}: NaN or inf (unwritten output?)"
    assert exact or rel_err(got, want) <= tol, f"{name}: rel_err {rel_err(got, want):.2e}"


BN_CASES = [((4, 7, 9, 11), "spatial", "NCHW"), ((8, 16, 8, 8), "spatial", "NCHW"), ((4, 5, 6, 12), "spatial", "NHWC"),
            ((33, 20), "per_activation", "NCHW"), ((64, 3, 32, 32), "spatial", "NCHW")]


@pytest.mark.parametrize("shape,mode,layout", BN_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_relu_equals_unfused_on_gpu(cp, shape, mode, layout, affine):
    rng = np.random.default_rng(0)
    pshape = P.batch_norm_param_shape(shape, mode, layout)
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32) + 0.3)
    g = cp.asarray(rng.standard_normal(pshape).astype(np.float32)) if affine else None
    b = cp.asarray(rng.standard_normal(pshape).astype(np.float32)) if affine else None
    dy = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    relu = P.ActivationDescriptor("relu")
    rm0, rv0 = rng.standard_normal(pshape).astype(np.float32), rng.uniform(0.5, 2, pshape).astype(np.float32)
    rm_u, rv_u, rm_f, rv_f = (cp.asarray(a.copy()) for a in (rm0, rv0, rm0, rv0))

    z, m_u, s_u = P.batch_norm_forward_training(x, g, b, rm_u, rv_u, momentum=0.3, mode=mode, layout=layout)
    y_u = P.activation_forward(z, relu)
    dz = P.activation_backward(z, y_u, dy, relu)
    grads_u = P.batch_norm_backward(x, dz, g, m_u, s_u, mode=mode, layout=layout)

    _poison(cp, x.nbytes)
    y_f, m_f, s_f = P.batch_norm_relu_forward_training(x, g, b, rm_f, rv_f, momentum=0.3, mode=mode, layout=layout)
    _poison(cp, x.nbytes)
    grads_f = P.batch_norm_relu_backward(x, dy, g, b, m_f, s_f, mode=mode, layout=layout)
    tag = f"bn_relu {shape} {mode} {layout} affine={affine}"
    _same(tag + " y", y_f.get(), y_u.get())
    _same(tag + " running_mean", rm_f.get(), rm_u.get())
    _same(tag + " running_var", rv_f.get(), rv_u.get())
    _same(tag + " dx", grads_f[0].get(), grads_u[0].get())
    if affine:
        _same(tag + " dgamma", grads_f[1].get(), grads_u[1].get())
        _same(tag + " dbeta", grads_f[2].get(), grads_u[2].get())
    else:
        assert grads_f[1] is None and grads_f[2] is None

    _poison(cp, x.nbytes)
    inf_f = P.batch_norm_relu_forward_inference(x, g, b, rm_f, rv_f, mode=mode, layout=layout)
    inf_u = P.activation_forward(P.batch_norm_forward_inference(x, g, b, rm_u, rv_u, mode=mode, layout=layout), relu)
    _same(tag + " inference", inf_f.get(), inf_u.get())
    # and the NumPy reference of the fused op (float32 CPU vs GPU: <= 1e-4)
    host = [None if a is None else a.get() for a in (x, g, b)]
    y_ref, m_ref, s_ref = P.batch_norm_relu_forward_training(*host, None, None, mode=mode, layout=layout)
    assert rel_err(y_f.get(), y_ref) <= 1e-4
    dx_ref = P.batch_norm_relu_backward(host[0], dy.get(), host[1], host[2], m_ref, s_ref, mode=mode, layout=layout)[0]
    assert rel_err(grads_f[0].get(), dx_ref) <= 1e-4


@pytest.mark.parametrize("shape", [(4, 7, 9, 11), (1001,), (3, 3), (128, 64, 16, 16)])
@pytest.mark.parametrize("unaligned", [False, True])
def test_add_relu_equals_add_then_relu_on_gpu(cp, shape, unaligned):
    rng = np.random.default_rng(1)
    n = int(np.prod(shape))
    base = [cp.asarray(rng.standard_normal(n + 1).astype(np.float32)) for _ in range(3)]
    a, b, dy = (v[1:] if unaligned else v[:n] for v in base)
    a, b, dy = a.reshape(shape), b.reshape(shape), dy.reshape(shape)
    relu = P.ActivationDescriptor("relu")
    z = a + b
    y_u = P.activation_forward(z, relu)
    dx_u = P.activation_backward(z, y_u, dy, relu)
    _poison(cp, a.nbytes)
    y_f = P.add_relu_forward(a, b)
    _poison(cp, a.nbytes)
    dx_f = P.add_relu_backward(y_f, dy)
    _same(f"add_relu {shape} unaligned={unaligned} y", y_f.get(), y_u.get(), tol=0)
    _same(f"add_relu {shape} unaligned={unaligned} dx", dx_f.get(), dx_u.get(), tol=0)


CONV_CASES = [  # (x shape, w shape, padding, stride, algos)
    ((3, 5, 11, 9), (7, 5, 3, 3), 1, 1, ["direct", "implicit_gemm", "implicit_precomp_gemm", "winograd", "im2col_gemm"]),
    ((2, 1, 28, 28), (32, 1, 3, 3), 1, 1, ["direct"]),            # small-channel direct kernel
    ((4, 3, 16, 16), (64, 3, 3, 3), 1, 2, ["direct", "implicit_gemm", "im2col_gemm"]),
    ((8, 64, 8, 8), (128, 64, 3, 3), 1, 1, ["implicit_precomp_gemm", "winograd"]),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("bias", [True, False])
def test_convolution_bias_activation_equals_conv_then_relu(cp, case, bias):
    xs, ws, pad, stride, algos = CONV_CASES[case]
    rng = np.random.default_rng(2)
    x = cp.asarray(rng.standard_normal(xs).astype(np.float32))
    w = cp.asarray(rng.standard_normal(ws).astype(np.float32))
    b = cp.asarray(rng.standard_normal(ws[0]).astype(np.float32)) if bias else None
    desc = P.ConvolutionDescriptor(padding=pad, stride=stride, dilation=1, groups=1, spatial_dims=2)
    relu = P.ActivationDescriptor("relu")
    for algo in algos:
        want = P.activation_forward(P.convolution_forward(x, w, desc, b, algo=algo), relu)
        out = cp.full(want.shape, cp.nan, dtype=cp.float32)   # poisoned, written with beta = 0
        got = P.convolution_bias_activation_forward(x, w, desc, b, relu, algo=algo, out=out)
        assert got is out
        _same(f"conv_bias_relu {xs} {ws} s{stride} bias={bias} {algo}", got.get(), want.get())
        assert float(got.min()) >= 0.0
    ref = P.convolution_bias_activation_forward(x.get(), w.get(), desc, None if b is None else b.get(), relu)
    assert rel_err(got.get(), ref) <= 1e-4


def _cnn(device):
    minidl.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, bias=False),
                         nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 8 * 8, 10)).to(device)


def test_fuse_modules_on_gpu_trains_like_the_unfused_model(cp):
    plain, fused = _cnn("cuda"), _cnn("cuda")
    nn.utils.fuse_modules(fused)
    opts = [minidl.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (plain, fused)]
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = minidl.tensor(rng.standard_normal((8, 3, 16, 16)).astype(np.float32), device="cuda")
        y = minidl.tensor(rng.integers(0, 10, 8), device="cuda")
        for model, opt in zip((plain, fused), opts):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    for (k, a), (_, b) in zip(plain.state_dict().items(), fused.state_dict().items()):
        _same(f"fuse_modules 3 steps {k}", b.cpu().numpy(), a.cpu().numpy())


def test_profiler_counts_exact_launches_on_a_known_model(cp):
    from minidl.profiler import ProfilerActivity, profile

    counts = {}
    for fused in (False, True):
        minidl.manual_seed(0)
        model = nn.Sequential(nn.BatchNorm1d(7), nn.ReLU(), nn.BatchNorm1d(7)).to("cuda")
        if fused:
            nn.utils.fuse_modules(model)
        opt = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = minidl.randn(33, 7, device="cuda")
        c = minidl.randn(33, 7, device="cuda")
        (model(x) * c).sum().backward()  # warm-up: compile, first momentum step
        opt.step()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                opt.zero_grad()
                (model(x) * c).sum().backward()
                opt.step()
                prof.step()
        rows = {r["name"]: r for r in prof.key_averages()}
        counts[fused] = prof.launches_per_step()
        assert rows["multi_tensor_sgd"]["count"] == 3 and rows["multi_tensor_sgd"]["launches"] == 3
        assert all(r["cuda_time_total"] > 0 for r in rows.values())
        if fused:
            assert rows["batch_norm_relu_forward_training"]["launches"] == 6
            assert rows["batch_norm_relu_backward"]["launches"] == 6
        else:
            assert rows["activation_forward"]["launches"] == 3 and rows["activation_backward"]["launches"] == 3
    # BN forward = stats with the finalize in its last blocks + apply (2), backward = grads (+ finalize) + dx (2),
    # ReLU 1 + 1, SGD for all 4 parameters 1:  unfused 2+1+2 + 2+1+2 + 1 = 11, fused 2+2 + 2+2 + 1 = 9.
    assert counts == {False: [11, 11, 11], True: [9, 9, 9]}
