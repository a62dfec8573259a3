"""Multi-tensor optimizers, zeroing and clipping on the GPU (kernels/multi_tensor.cu) against the
per-parameter reference path (fused=False, the same CuPy arrays), and the device-side lr / step /
loss-scaling interface."""
import numpy as np
import pytest

import minidl
from minidl import nn, optim
from minidl import primitives as P
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

# Awkward sizes: a scalar-like bias, primes, one tensor over a chunk (8192) boundary, an empty one.
SHAPES = [(7,), (13, 17), (3, 5, 7, 11), (8193,), (0,), (1,)]


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grads(step, seed=1):
    rng = np.random.default_rng(seed + 100 * step)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _run(make_opt, fused, steps=6, lr_schedule=None, grad_scale=None, found_inf_at=()):
    cp = pytest.importorskip("cupy")
    params = [minidl.tensor(a, device="cuda", requires_grad=True) for a in _params()]
    opt = make_opt(params, fused)
    for t in range(steps):
        scale = 1.0 if grad_scale is None else grad_scale
        for p, g in zip(params, _grads(t)):
            p.grad = minidl.tensor(g * np.float32(scale), device="cuda")
        if lr_schedule is not None:
            for group in opt.param_groups:
                group["lr"] = lr_schedule(t)
        kwargs = {}
        if grad_scale is not None:
            kwargs["grad_scale"] = cp.full((), grad_scale, dtype=cp.float32)
        if found_inf_at:
            kwargs["found_inf"] = cp.full((), 1.0 if t in found_inf_at else 0.0, dtype=cp.float32)
        opt.step(**kwargs)
    return [p.detach().cpu().numpy() for p in params], opt


OPTIMIZERS = {
    "sgd": lambda ps, f: optim.SGD(ps, lr=0.1, fused=f),
    "sgd_momentum_wd": lambda ps, f: optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-2, fused=f),
    "sgd_dampening_max": lambda ps, f: optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.3, maximize=True, fused=f),
    "sgd_nesterov": lambda ps, f: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, fused=f),
    "adam": lambda ps, f: optim.Adam(ps, lr=1e-2, fused=f),
    "adam_wd_amsgrad": lambda ps, f: optim.Adam(ps, lr=3e-3, weight_decay=0.1, amsgrad=True, fused=f),
    "adam_beta_small": lambda ps, f: optim.Adam(ps, lr=3e-3, betas=(0.3, 0.9), maximize=True, fused=f),
    "adamw": lambda ps, f: optim.AdamW(ps, lr=1e-2, weight_decay=0.05, fused=f),
    "adamw_amsgrad": lambda ps, f: optim.AdamW(ps, lr=1e-2, amsgrad=True, fused=f),
    "rmsprop": lambda ps, f: optim.RMSprop(ps, lr=1e-2, fused=f),
    "rmsprop_centered_momentum_wd": lambda ps, f: optim.RMSprop(ps, lr=1e-2, alpha=0.3, momentum=0.9, centered=True,
                                                                  weight_decay=0.1, maximize=True, fused=f),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_multi_tensor_optimizer_equals_per_parameter_path(name):
    fused, opt_f = _run(OPTIMIZERS[name], None)
    ref, _ = _run(OPTIMIZERS[name], False)
    for a, b in zip(fused, ref):
        assert a.shape == b.shape
        assert np.all(np.isfinite(a))
        assert rel_err(a, b) <= 1e-6, name
    if name.startswith(("adam", "rmsprop")):
        steps = [opt_f.state[p]["step"] for p in opt_f.param_groups[0]["params"]]
        assert all(float(s.item()) == 6.0 for s in steps)


@pytest.mark.parametrize("name", ["sgd_nesterov", "adamw"])
def test_lr_set_on_the_group_reaches_the_kernel(name):
    schedule = lambda t: 0.1 / (1 + t)  # noqa: E731
    fused, opt = _run(OPTIMIZERS[name], None, lr_schedule=schedule)
    ref, _ = _run(OPTIMIZERS[name], False, lr_schedule=schedule)
    assert all(rel_err(a, b) <= 1e-6 for a, b in zip(fused, ref))
    group = opt.param_groups[0]
    assert isinstance(group["lr"], float) and group["lr"] == schedule(5)
    assert float(group.device_lr().get()) == schedule(5)
    assert opt.state_dict()["param_groups"][0]["lr"] == schedule(5)


@pytest.mark.parametrize("name", ["sgd_momentum_wd", "adam_wd_amsgrad", "rmsprop_centered_momentum_wd"])
def test_grad_scale_divides_and_found_inf_skips_on_the_device(name):
    ref, _ = _run(OPTIMIZERS[name], False, steps=4)
    scaled, _ = _run(OPTIMIZERS[name], None, steps=4, grad_scale=1024.0)
    assert all(rel_err(a, b) <= 1e-6 for a, b in zip(scaled, ref))
    # found_inf on every step: nothing moves, no moment accumulates, no step is counted.
    skipped, opt = _run(OPTIMIZERS[name], None, steps=4, found_inf_at=(0, 1, 2, 3))
    assert all(np.array_equal(a, b) for a, b in zip(skipped, _params()))
    for p in opt.param_groups[0]["params"]:
        state = opt.state.get(p, {})
        if "step" in state:
            assert float(state["step"].item()) == 0.0
        for key in ("exp_avg", "exp_avg_sq", "square_avg", "grad_avg", "momentum_buffer"):
            if key in state:
                assert not state[key].cpu().numpy().any()


def test_zero_grad_and_clip_grad_norm_in_few_launches():
    cp = pytest.importorskip("cupy")
    params = [minidl.tensor(a, device="cuda", requires_grad=True) for a in _params()]
    grads = _grads(0)
    for p, g in zip(params, grads):
        p.grad = minidl.tensor(g, device="cuda")
    norm = nn.utils.clip_grad_norm_(params, 2.5)
    expected = np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    assert abs(float(norm.item()) - expected) <= 1e-5 * expected
    coef = min(1.0, 2.5 / (expected + 1e-6))
    for p, g in zip(params, grads):
        assert rel_err(p.grad.cpu().numpy(), g * coef) <= 1e-5
    opt = optim.SGD(params, lr=0.1)
    poisoned = [p.grad._data for p in params]
    for a in poisoned:
        a.fill(cp.nan)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.cpu().numpy().any() for p in params)
    assert all(p.grad._data is a for p, a in zip(params, poisoned))  # in place


def test_multi_tensor_primitives_equal_their_numpy_reference():
    cp = pytest.importorskip("cupy")
    host = _params()
    dev = [cp.asarray(a) for a in host]
    norm_d, coef_d = P.multi_tensor_l2norm(dev, 1.0)
    norm_h, coef_h = P.multi_tensor_l2norm(host, 1.0)
    assert rel_err(norm_d.get(), norm_h) <= 1e-6 and rel_err(coef_d.get(), coef_h) <= 1e-6
    P.multi_tensor_scale(dev, coef_d)
    P.multi_tensor_scale(host, coef_h)
    assert all(rel_err(d.get(), h) <= 1e-6 for d, h in zip(dev, host))
    with pytest.raises(TypeError, match="multi_tensor_zero"):
        P.multi_tensor_zero([cp.zeros(3, dtype=cp.float64)])


def test_fused_true_refuses_float64_parameters():
    p = minidl.tensor(np.ones(3), device="cuda", requires_grad=True)
    p.grad = minidl.tensor(np.ones(3), device="cuda")
    with pytest.raises(RuntimeError, match="fused=True"):
        optim.Adam([p], fused=True).step()


def test_pointer_table_built_during_a_capture_replays():
    """The capturable path of the multi-tensor launchers: a tensor list first seen while the stream
    captures (new arrays, as a captured backward allocates its gradients) gets its pointer table
    through a captured copy from pinned memory (CuPy's own H2D copy refuses to run in a capture), and
    every replay then scales the arrays of that table. Prerequisite of optimizer.Optimizer._capturable
    (CAPTURE_MULTI_TENSOR_STEP; passed on the H200 at 56489a4)."""
    cp = pytest.importorskip("cupy")
    from minidl.primitives.cuda import multi_tensor as launcher

    host = _params(3)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        dev = [cp.asarray(a) for a in host]            # never seen by a launcher: no table cached
        coef = cp.full((), 0.5, dtype=cp.float32)
        stream.synchronize()
        before = len(launcher._captured_tables)
        stream.begin_capture()
        try:
            launcher.multi_tensor_scale(dev, coef)
        finally:
            graph = stream.end_capture()
        assert len(launcher._captured_tables) == before + 1   # the table was built in the capture
        for k in range(1, 4):
            graph.launch(stream)
            stream.synchronize()
            for d, h in zip(dev, host):
                np.testing.assert_array_equal(d.get(), h * np.float32(0.5) ** k)


@pytest.mark.parametrize("poison", [None, "inf", "nan"])
def test_multi_tensor_unscale_equals_its_reference(poison):
    cp = pytest.importorskip("cupy")
    host = [a * 1024.0 for a in _params()]
    if poison:
        host[0].flat[3] = np.inf if poison == "inf" else np.nan
    dev = [cp.asarray(a) for a in host]
    scale_h, scale_d = np.asarray(1024.0 * 3, dtype=np.float32), cp.asarray(1024.0 * 3, dtype=cp.float32)
    found_h, found_d = np.zeros((), np.float32), cp.zeros((), cp.float32)
    P.multi_tensor_unscale(host, scale_h, found_h)
    P.multi_tensor_unscale(dev, scale_d, found_d)
    assert float(found_d) == float(found_h) == (0.0 if poison is None else 1.0)
    for d, h in zip(dev, host):
        np.testing.assert_array_equal(d.get(), h)   # bit for bit: the same float32 inverse, one rounding
    found_d[...] = 0
    P.multi_tensor_unscale(dev, None, found_d)     # check only: nothing changes
    assert float(found_d) == (0.0 if poison is None else 1.0)
    for d, h in zip(dev, host):
        np.testing.assert_array_equal(d.get(), h)


def test_grad_scaler_unscales_in_one_launch():
    """GradScaler.unscale_ over float32 CUDA gradients: one multi_tensor_unscale launch (plus the zeroed
    found_inf), the same gradients and found_inf as the per-tensor path."""
    cp = pytest.importorskip("cupy")
    from minidl import profiler

    params = [minidl.tensor(a, device="cuda", requires_grad=True) for a in _params()]
    for p, g in zip(params, _grads(0)):
        p.grad = minidl.tensor(g * 4096.0, device="cuda")
    params[1].grad._data[0] = cp.inf
    opt = optim.SGD(params, lr=0.1)
    scaler = minidl.amp.GradScaler(init_scale=4096.0)
    scaler._lazy_init(cp)
    with profiler.profile(activities=[profiler.ProfilerActivity.CUDA]) as prof:
        scaler.unscale_(opt)
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["multi_tensor_unscale"]["count"] == 1
    found = scaler._state(opt)["found_inf"]
    assert float(found) == 1.0
    for p, g in zip(params[2:], _grads(0)[2:]):
        np.testing.assert_array_equal(p.grad.cpu().numpy(), (g * 4096.0) * np.float32(1.0 / 4096.0))


def test_pointer_table_rows_equal_their_definition():
    """tensor_table's rows (kernels/multi_tensor.cu's header: 5 pointers, numel, aux, first chunk) for columns that
    are full, absent, or hold Nones, read back from the device; the same lists again give the cached table."""
    cp = pytest.importorskip("cupy")
    from minidl.primitives.cuda import multi_tensor as launcher

    sizes = [7, 8192, 8193, 0, 1, 3 * 8192 + 5]
    params = [cp.zeros(n, dtype=cp.float32) for n in sizes]
    grads = [cp.zeros(n, dtype=cp.float32) for n in sizes]
    holes = [None if t % 2 else cp.zeros(n, dtype=cp.float32) for t, n in enumerate(sizes)]
    aux = [5, 0, 3, 9, 1, 2]
    table, n, total = launcher.tensor_table((params, grads, holes, None), aux=aux)
    rows, first = [], 0
    for t, size in enumerate(sizes):
        rows.append([params[t].data.ptr, grads[t].data.ptr, 0 if holes[t] is None else holes[t].data.ptr, 0, 0,
                     size, aux[t], first])
        first += -(-size // launcher.CHUNK)
    assert (n, total) == (len(sizes), first)
    np.testing.assert_array_equal(table.get(), np.array(rows, dtype=np.uint64).view(np.int64))
    assert launcher.tensor_table((params, grads, holes, None), aux=aux)[0] is table
    # the gradients alone (clip_grad_norm_'s call): the sizes come from the first column that has arrays
    table, n, total = launcher.tensor_table((None, grads))
    assert table.get()[:, 1].tolist() == [g.data.ptr for g in grads] and table.get()[:, 5].tolist() == sizes


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_multi_tensor_cast_equals_cast_in_one_launch(dtype):
    """multi_tensor_cast: every array the bits of cast()'s (overflow to inf and NaN included), each a 256-byte-aligned
    piece of one allocation, in one launch; under autocast a second region casts a model's weights that way."""
    cp = pytest.importorskip("cupy")
    from minidl._dtypes import bfloat16
    from tests.gpu.launches import kernel_launches

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    host = [a * np.float32(1e3) for a in _params(4)]
    host[0][:3] = [np.inf, np.nan, 7e4]
    arrays = [cp.asarray(a) for a in host]
    with kernel_launches() as names:
        out = P.multi_tensor_cast(arrays, dt)
    assert names == ["multi_tensor_cast"]
    for a, b in zip(arrays, out):
        assert b.dtype == dt and b.shape == a.shape and b.data.ptr % 256 == 0
        np.testing.assert_array_equal(cp.asnumpy(b).view(np.uint16), cp.asnumpy(P.cast(a, dt)).view(np.uint16))
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).to("cuda")
    x = minidl.randn(4, 32, device="cuda")
    outputs = []
    for region in range(2):
        with kernel_launches() as names:
            with minidl.autocast("cuda", dtype=dt):
                outputs.append(cp.asnumpy(model(x)._data).view(np.uint16))
        # region 0 casts each weight (and x) at its use; region 1 the three weights in one launch, then x alone
        assert names.count("multi_tensor_cast") == region and names.count("cast") == (4 if region == 0 else 1), names
    np.testing.assert_array_equal(outputs[1], outputs[0])
