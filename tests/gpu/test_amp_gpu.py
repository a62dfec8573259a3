"""Half precision and mixed precision on the GPU: the CPU tests of tests/framework/test_amp.py run on
CUDA tensors, plus the proof that an autocast + GradScaler training step never waits for the GPU.

- every op of HALF_OPS on float16/bfloat16 CUDA tensors against torch's CPU result in that dtype;
- autocast("cuda") op-by-op dtypes against torch.amp's CUDA table (CUDA_EXPECTED);
- GradScaler("cuda") against torch.amp.GradScaler("cpu") over a run with injected infs (the scale
  lives on the GPU), fallback and device-side optimizers;
- a float16 autocast step with a GradScaler and a device-side optimizer queued behind a 2-second
  spin kernel returns while the spin still runs (no host read); the fallback optimizer (one read of
  found_inf per step, as torch's) does wait: the control that shows the check can fail.
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err
from tests.framework import test_amp as cpu_tests
from tests.framework.test_amp import CUDA_EXPECTED, HALF, HALF_OPS, TOL, _A, _B, DeviceSkipSGD, _np, _op_table, _t
from tests.gpu.test_framework_gpu import _spin_then

pytestmark = pytest.mark.gpu


def test_bfloat16_arrays_are_cupy_native():
    import cupy

    x = minidl.randn(5, 3, dtype=minidl.bfloat16, device="cuda")
    assert isinstance(x._data, cupy.ndarray) and x._data.dtype == minidl.bfloat16
    assert np.array_equal(_np(x.cpu()), _np(x.float().cpu().bfloat16()))
    assert x.half().dtype == minidl.float16 and x.half().is_cuda


@pytest.mark.parametrize("op", sorted(HALF_OPS))
@pytest.mark.parametrize("md,td", HALF)
def test_each_op_in_half_on_gpu_matches_torch(op, md, td):
    f = HALF_OPS[op]
    a = minidl.tensor(_A, dtype=md, device="cuda", requires_grad=True)
    b = minidl.tensor(_B, dtype=md, device="cuda", requires_grad=True)
    ta, tb = _t(_A, td).requires_grad_(True), _t(_B, td).requires_grad_(True)
    out = f(minidl, _CUDA_F, a, b)
    tout = f(torch, TF, ta, tb)
    c = np.random.default_rng(3).standard_normal(tout.shape).astype(np.float32)
    (out * minidl.tensor(c, dtype=md, device="cuda")).sum().backward()
    (tout * _t(c, td)).sum().backward()
    assert out.is_cuda and out.dtype == md and rel_err(_np(out.cpu()), _np(tout)) < TOL[md]
    for ours, theirs in ((a, ta), (b, tb)):
        if theirs.grad is not None:
            assert ours.grad.dtype == md and rel_err(_np(ours.grad.cpu()), _np(theirs.grad)) < TOL[md]


class _OnCuda:
    """F, except that the index targets HALF_OPS makes with minidl.tensor (on the CPU) go to the GPU."""

    def __getattr__(self, name):
        fn = getattr(F, name)
        if name in ("cross_entropy", "nll_loss"):
            return lambda x, t, *args, **kw: fn(x, t.to("cuda"), *args, **kw)
        if name == "embedding":
            return lambda idx, w, *args, **kw: fn(idx.to("cuda"), w, *args, **kw)
        return fn


_CUDA_F = _OnCuda()


def test_autocast_cuda_table():
    got = _op_table(minidl, F, lambda a: minidl.tensor(a.astype(np.float32), device="cuda"),
                    lambda: minidl.autocast("cuda"), device="cuda")
    assert got == CUDA_EXPECTED


@pytest.mark.parametrize("md", [minidl.float16, minidl.bfloat16])
def test_autocast_cnn_gradients_on_gpu(md):
    cpu_tests.test_autocast_cnn_gradients_close_to_fp32(md, device="cuda")


@pytest.mark.parametrize("unscale_first", [False, True])
@pytest.mark.parametrize("device_side", [False, True])
def test_grad_scaler_cuda_matches_torch(device_side, unscale_first):
    cpu_tests.test_grad_scaler_matches_torch(device_side, unscale_first, device="cuda")


def _amp_step(optimizer_cls):
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 8 * 8, 10)).to("cuda")
    opt = optimizer_cls(model.parameters(), lr=0.01)
    scaler = minidl.amp.GradScaler("cuda")
    x = minidl.randn(32, 3, 16, 16, device="cuda")
    y = minidl.randint(0, 10, (32,), device="cuda")

    def step():
        with minidl.autocast("cuda"):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    step()  # warm-up: kernels compiled, scale created
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    return step


def test_amp_step_with_device_side_optimizer_never_waits_for_the_gpu():
    assert _spin_then(_amp_step(DeviceSkipSGD))


def test_amp_step_with_fallback_optimizer_reads_found_inf():
    """The control: a plain optimizer makes GradScaler.step read found_inf on the host (as torch)."""
    class PlainSGD(minidl.optim.SGD):
        _step_supports_amp_scaling = False  # SGD may take grad_scale/found_inf itself (helper `fused`)

        def step(self, closure=None):
            return super().step(closure)

    assert not _spin_then(_amp_step(PlainSGD))


@pytest.mark.parametrize("md", [minidl.float16, minidl.bfloat16])
def test_amp_step_with_forward_backward_graphed_equals_eager(md):
    """The examples' --amp step on the GPU: autocast forward and the scaled backward replayed from a
    CUDA graph, GradScaler.step/update (and Adam) eager after each replay; the same losses, scales
    and parameters as the eager run, bit for bit (the scale is a device array updated in place, so the
    captured backward reads the current one). In float16 one batch holds values beyond its range: that
    step is skipped and the scale backs off, in both runs."""
    from tests.gpu.test_graphs_gpu import _batches, _cnn, _host

    results = []
    with minidl.backends.cudnn.flags(benchmark=False, deterministic=True):
        for graphed in (False, True):
            model = _cnn(9)
            opt = minidl.optim.Adam(model.parameters(), lr=1e-3)
            scaler = minidl.amp.GradScaler("cuda", init_scale=2.0**12, growth_interval=3,
                                           enabled=md == minidl.float16)
            params = [p for g in opt.param_groups for p in g["params"]]

            def forward_backward(x, y):
                opt.zero_grad()
                with minidl.autocast("cuda", dtype=md):
                    loss = F.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                return loss

            run = minidl.cuda.CUDAGraphStep(forward_backward, params=params, warmup=2) if graphed else forward_backward
            losses, scales = [], []
            batches = _batches(8)
            if md == minidl.float16:
                x5 = batches[5][0]
                x5.copy_(x5 * 1e5)  # inputs beyond float16's range: inf/NaN loss and gradients, a skipped step
            for x, y in batches:
                losses.append(float(run(x, y).item()))
                scaler.step(opt)
                scaler.update()
                scales.append(scaler.get_scale())
            results.append((losses, scales, {k: _host(v) for k, v in model.state_dict().items()}))
    np.testing.assert_array_equal(results[1][0], results[0][0])  # (NaN where the overflow was, in both)
    assert results[0][1] == results[1][1]
    if md == minidl.float16:
        # the injected overflow backed the scale off: halved once (it may have grown first, every 3
        # good steps, so compare with the step before, not with init_scale: at 4b8d734 it went
        # 4096, 4096, 8192, 8192, 8192, 4096)
        scales = results[0][1]
        assert any(after == before / 2 for before, after in zip(scales, scales[1:])), scales
    for k, v in results[0][2].items():
        np.testing.assert_array_equal(results[1][2][k], v, err_msg=k)


@pytest.mark.parametrize("dtype", [minidl.bfloat16, minidl.float16])
def test_lstm_under_autocast_skips_the_input_casts(dtype):
    """nn.LSTM under autocast on the GPU runs on its float32 weights with the RNN's bf16 math (the kernels round
    the recurrent products' operands themselves): no cast of each weight to half and back. The outputs take
    autocast's dtype, as torch's; values and gradients match the same LSTM with explicitly rounded inputs."""
    from minidl import profiler

    minidl.manual_seed(0)
    lstm = nn.LSTM(48, 64, num_layers=2).to("cuda")
    x = minidl.tensor(np.random.default_rng(0).standard_normal((12, 5, 48)).astype(np.float32), device="cuda")
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        with minidl.autocast("cuda", dtype=dtype):
            y, (h, c) = lstm(x)
    assert y.dtype == dtype and h.dtype == dtype and c.dtype == dtype
    names = {r["name"] for r in prof.key_averages()}
    assert "rnn_forward" in names
    (y.float().sum() + h.float().sum()).backward()
    grads = {n: p.grad.cpu().numpy() for n, p in lstm.named_parameters()}
    assert all(p.grad.dtype == minidl.float32 for p in lstm.parameters())
    # Reference: the float32 LSTM in the same math mode ("bf16" rounds the recurrent operands to bfloat16)
    ref = nn.LSTM(48, 64, num_layers=2).to("cuda")
    ref.load_state_dict(lstm.state_dict())
    from minidl.nn.functional import recurrent
    original = recurrent._rnn_math
    recurrent._rnn_math = lambda x: "bf16"
    try:
        y_ref, (h_ref, _) = ref(x)
        (y_ref.sum() + h_ref.sum()).backward()
    finally:
        recurrent._rnn_math = original
    assert rel_err(y.detach().float().cpu().numpy(), y_ref.detach().cpu().numpy()) <= (1e-2 if dtype == minidl.bfloat16 else 2e-3)
    ref_grads = dict(ref.named_parameters())
    for n, g in grads.items():
        assert rel_err(g, ref_grads[n].grad.cpu().numpy()) <= 2e-2, n


def test_lstm_with_dropout_between_layers_under_autocast_casts_only_activations(monkeypatch):
    """Layer by layer (dropout between layers), the upper layer's input is the half output of the one below:
    it is cast up (one cast), not every weight down. Counted through the RNN's own cast helper."""
    from minidl.nn.functional import recurrent

    calls = []
    original = recurrent.cast_output
    monkeypatch.setattr(recurrent, "cast_output", lambda t, dtype: calls.append(dtype) or original(t, dtype))
    minidl.manual_seed(0)
    lstm = nn.LSTM(32, 40, num_layers=2, dropout=0.5).to("cuda").train()
    x = minidl.tensor(np.random.default_rng(1).standard_normal((7, 3, 32)).astype(np.float32), device="cuda")
    with minidl.autocast("cuda", dtype=minidl.bfloat16):
        y, (h, c) = lstm(x)
    assert y.dtype == minidl.bfloat16
    # layer 1: 3 outputs down; layer 2: its input up, 3 outputs down (the stacked h, c are assembled after)
    assert calls.count(minidl.float32) == 1 and calls.count(minidl.bfloat16) == 6
    y.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == minidl.float32 for p in lstm.parameters())


@pytest.mark.parametrize("md", [minidl.float16, minidl.bfloat16])
@pytest.mark.parametrize("kernel", ["auto", "mma_sync"])
def test_autocast_linear_on_gpu_gives_float32_gradients(md, kernel):
    """F.linear under autocast("cuda") is one op (AutocastLinear) whose gradients come back in float32: on an
    H100/H200 from the wgmma GEMM's fp32 accumulators as they are (gemm's out_dtype), elsewhere (and held to
    mma.sync) rounded through 16 bits and cast. Against float32 math on the same 16-bit operands, at each path's
    precision; the output within one 16-bit rounding of x16 W16^T + b with the float32 bias b not cast (added in
    the epilogue), and the bias gradient the fp32 sums of dy, not rounded to 16 bits."""
    import cupy

    from minidl.primitives.cuda.gemm_wgmma import device_has_wgmma
    from minidl.primitives.gemm import set_tensor_core_gemm

    rng = np.random.default_rng(1)
    lin = nn.Linear(96, 80).to("cuda")
    x = minidl.tensor(rng.standard_normal((4, 33, 96)).astype(np.float32), device="cuda", requires_grad=True)
    dy = rng.standard_normal((4, 33, 80)).astype(np.float32)
    set_tensor_core_gemm(kernel)
    try:
        with minidl.autocast("cuda", dtype=md):
            y = lin(x)
        assert type(y._ctx).__name__ == "AutocastLinear" and y.dtype == md
        y.backward(minidl.tensor(dy.astype(md), device="cuda"))
    finally:
        set_tensor_core_gemm("auto")
    x16, w16 = (_np(t.detach().cpu()).astype(md).astype(np.float32) for t in (x, lin.weight))
    want_y = x16.reshape(-1, 96) @ w16.T + _np(lin.bias.detach().cpu())
    assert rel_err(_np(y.cpu()).astype(np.float32).reshape(-1, 80), want_y) < (2e-3 if md == minidl.float16 else 1e-2)
    dy16 = dy.astype(md).astype(np.float32).reshape(-1, 80)
    exact = kernel == "auto" and device_has_wgmma(cupy.cuda.runtime.getDevice())
    tol = 1e-5 if exact else (2e-3 if md == minidl.float16 else 1e-2)
    assert lin.weight.grad.dtype == x.grad.dtype == lin.bias.grad.dtype == minidl.float32
    assert rel_err(_np(lin.weight.grad.cpu()), dy16.T @ x16.reshape(-1, 96)) < tol
    assert rel_err(_np(x.grad.cpu()).reshape(-1, 96), dy16 @ w16) < tol
    assert rel_err(_np(lin.bias.grad.cpu()), dy16.sum(0)) < 1e-5   # (fp32 sums straight from the kernel)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("md", [minidl.bfloat16, minidl.float16])
def test_float32_with_half_operands_on_gpu_match_the_cpu(op, md):
    """binary's mixed path on CuPy arrays (float32 and a 16-bit operand promoted inside the elementwise kernel):
    the values and both gradients (the 16-bit one cast back by kernels/cast.cu) bit for bit as on the CPU, where
    tests/framework/test_amp.py matches them to torch."""
    f = {"add": lambda u, v: u + v, "sub": lambda u, v: u - v, "mul": lambda u, v: u * v}[op]
    rng = np.random.default_rng(7)
    a, h, w = (rng.standard_normal(s).astype(np.float32) for s in ((64, 33), (33,), (64, 33)))
    results = []
    for device in ("cpu", "cuda"):
        x = minidl.tensor(a, device=device, requires_grad=True)
        y = minidl.tensor(h, device=device).to(md).requires_grad_()
        z = f(y, x)
        (z * minidl.tensor(w, device=device)).sum().backward()
        assert z.dtype == minidl.float32 and y.grad.dtype == md and x.grad.dtype == minidl.float32
        results.append([_np(z.cpu()), _np(x.grad.cpu()), _np(y.grad.cpu())])
    for ours_gpu, ours_cpu in zip(results[1], results[0]):
        np.testing.assert_array_equal(ours_gpu, ours_cpu)
