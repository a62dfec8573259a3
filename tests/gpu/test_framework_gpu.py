"""The framework on the GPU: Linear on our SGEMM (and on cuBLAS when asked), index checks that stay
on the device, and training steps that never make the host wait for the GPU.

How "never waits" is shown: a spin kernel that runs for ~2 s is queued first, then a whole training
step (forward, loss, backward, optimizer and scheduler step). Every launch of the step queues behind
the spin, so if any call in the step read a value back (bool(x.any()), .item(), a blocking copy,
a synchronize), the host would have waited for the spin to end. After the step returns, the spin's
end event must still be pending. A control case that calls .item() inside the step shows the check
can fail.
"""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from tests.conftest import rel_err
from tests.framework.test_optim_adaptive import CASES as ADAPTIVE_CASES

pytestmark = pytest.mark.gpu

SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long nanoseconds)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
"""


def _spin_then(step, seconds=2.0):
    """Queue a `seconds`-long spin kernel, run step(), and say whether the spin was still running
    when step() returned (True: step never waited for the GPU)."""
    import cupy

    spin = cupy.RawKernel(SPIN_SOURCE, "spin")
    spin((1,), (1,), (np.uint64(int(seconds * 1e9)),))
    spin_end = cupy.cuda.Event()
    spin_end.record()
    step()
    still_spinning = not spin_end.done
    cupy.cuda.get_current_stream().synchronize()
    return still_spinning


# ------------------------------------------------------------------------------------------------
# Linear: our SGEMM by default, cuBLAS as a switch
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_cublas", [False, True])
@pytest.mark.parametrize("lead,fin,fout,bias", [((7,), 13, 5, True), ((3, 37), 130, 67, False), ((256,), 512, 10, True),
                                                ((65,), 3, 200, True), ((), 9, 4, True)])
def test_linear_on_gpu_matches_torch(use_cublas, lead, fin, fout, bias):
    rng = np.random.default_rng(fin)
    x = rng.standard_normal(lead + (fin,)).astype(np.float32)
    w = (rng.standard_normal((fout, fin)) / np.sqrt(fin)).astype(np.float32)
    b = rng.standard_normal(fout).astype(np.float32)
    g = rng.standard_normal(lead + (fout,)).astype(np.float32)
    ours = [minidl.tensor(a, device="cuda", requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b)]
    with minidl.backends.cuda.flags(use_cublas=use_cublas):
        y = F.linear(ours[0], ours[1], ours[2] if bias else None)
        y.backward(minidl.tensor(g, device="cuda"))
    ty = torch.nn.functional.linear(theirs[0], theirs[1], theirs[2] if bias else None)
    ty.backward(torch.tensor(g, dtype=torch.float64))
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.detach().cpu().numpy(), ty.detach().numpy()) <= 1e-5
    for ours_t, theirs_t in zip(ours[:3 if bias else 2], theirs):
        assert rel_err(ours_t.grad.detach().cpu().numpy(), theirs_t.grad.numpy()) <= 1e-5


def test_linear_runs_our_sgemm_unless_use_cublas(monkeypatch):
    """Count the launches of our SGEMM: 1 forward, 2 backward (dx, dW); none with use_cublas."""
    from minidl.primitives.cuda import gemm as gemm_launcher

    calls = []
    real = gemm_launcher.sgemm

    def counting(*args, **kwargs):
        calls.append(args[:3])
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm_launcher, "sgemm", counting)
    layer = nn.Linear(20, 30).to("cuda")
    x = minidl.randn(8, 20, device="cuda", requires_grad=True)
    layer(x).sum().backward()
    assert len(calls) == 3
    assert sorted(calls) == sorted([(8, 30, 20), (8, 20, 30), (30, 20, 8)])  # (M, N, K) of y, dx, dW
    calls.clear()
    with minidl.backends.cuda.flags(use_cublas=True):
        layer(x).sum().backward()
    assert calls == []


def test_linear_float64_on_gpu_goes_to_cublas():
    layer = nn.Linear(6, 4).double().to("cuda")
    x = np.random.default_rng(1).standard_normal((5, 6))
    y = layer(minidl.tensor(x, device="cuda"))
    expected = x @ layer.weight.detach().cpu().numpy().T + layer.bias.detach().cpu().numpy()
    assert y.dtype == minidl.float64
    assert np.abs(y.detach().cpu().numpy() - expected).max() <= 1e-12


# ------------------------------------------------------------------------------------------------
# Index checks on the device: NaN instead of a sync; eager errors with check_indices
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "nll_loss"])
def test_out_of_range_target_on_gpu_gives_nan_rows(loss_fn):
    fn = getattr(F, loss_fn)
    x = minidl.randn(4, 3, device="cuda", requires_grad=True)
    if loss_fn == "nll_loss":
        x = F.log_softmax(x, dim=1)
    target = minidl.tensor([0, 3, 2, -100], device="cuda")  # 3 is out of range, -100 is ignored
    per_row = fn(x, target, reduction="none").detach().cpu().numpy()
    assert np.isnan(per_row[1]) and np.isfinite(per_row[[0, 2, 3]]).all()
    assert np.isnan(fn(x, target).item())
    with minidl.backends.cuda.flags(check_indices=True):
        with pytest.raises(ValueError, match="class index 3, out of range for 3 classes"):
            fn(x, target)
    good = fn(x, minidl.tensor([0, 1, 2, -100], device="cuda")).item()
    assert np.isfinite(good)


def test_out_of_range_embedding_index_on_gpu_gives_nan_rows():
    weight = minidl.randn(6, 2, device="cuda", requires_grad=True)
    out = F.embedding(minidl.tensor([[0, 6], [-1, 5]], device="cuda"), weight).detach().cpu().numpy()
    assert np.isnan(out[0, 1]).all() and np.isnan(out[1, 0]).all()
    assert rel_err(out[0, 0], weight.detach().cpu().numpy()[0]) == 0 and rel_err(out[1, 1], weight.detach().cpu().numpy()[5]) == 0
    with minidl.backends.cuda.flags(check_indices=True):
        with pytest.raises(ValueError, match="index out of range"):
            F.embedding(minidl.tensor([0, 6], device="cuda"), weight)


# ------------------------------------------------------------------------------------------------
# Training steps without a host sync
# ------------------------------------------------------------------------------------------------


def _cnn_step():
    minidl.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 10)).to("cuda")
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = minidl.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=100)
    x = minidl.randn(32, 3, 16, 16, device="cuda")
    y = minidl.randint(0, 10, (32,), device="cuda")
    state = {}

    def step():
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        state["loss"] = loss.detach() if "loss" not in state else state["loss"] + loss.detach()

    return step, state


def _lstm_lm_step():
    minidl.manual_seed(0)
    vocab, hidden = 50, 32

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.lstm = nn.LSTM(hidden, hidden, num_layers=2, dropout=0.2)
            self.head = nn.Linear(hidden, vocab)

        def forward(self, tokens, state=None):
            out, state = self.lstm(self.embed(tokens), state)
            return self.head(out), state

    model = LM().to("cuda")
    optimizer = minidl.optim.Adam(model.parameters(), lr=1e-3)
    tokens = minidl.randint(0, vocab, (12, 8), device="cuda")
    targets = minidl.randint(0, vocab, (12, 8), device="cuda")

    def step():
        logits, _ = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()

    return step, {}


@pytest.mark.parametrize("make_step", [_cnn_step, _lstm_lm_step], ids=["cnn_sgd", "lstm_lm_adam"])
def test_training_step_never_waits_for_the_gpu(make_step):
    step, _ = make_step()
    for _ in range(2):  # compile kernels and fill the memory pool first
        step()
    assert _spin_then(step), "a training step waited for the GPU (a host sync inside the step)"


def test_the_sync_check_catches_a_sync():
    """Control: the same step plus a loss.item() must be caught."""
    step, state = _cnn_step()
    step()

    def step_and_read():
        step()
        state["loss"].item()

    assert not _spin_then(step_and_read)


def test_cuda_device_and_memory_queries_as_torch():
    """torch.cuda's device queries against torch's on the same GPU (nanoGPT's train.py asks is_bf16_supported), and
    the memory queries moving with an allocation: the peak (an upper bound: the pool's held bytes) covers what was
    allocated, and reset_peak_memory_stats brings it back to what is in use."""
    props, theirs = minidl.cuda.get_device_properties(0), torch.cuda.get_device_properties(0)
    assert (props.name, props.major, props.minor, props.multi_processor_count) == \
        (theirs.name, theirs.major, theirs.minor, theirs.multi_processor_count)
    assert abs(props.total_memory - theirs.total_memory) < 2**30
    assert minidl.cuda.get_device_capability() == torch.cuda.get_device_capability()
    assert minidl.cuda.is_bf16_supported() == torch.cuda.is_bf16_supported() is True
    minidl.cuda.reset_peak_memory_stats()
    before = minidl.cuda.memory_allocated()
    x = minidl.zeros(1 << 20, device="cuda")   # 4 MiB
    assert minidl.cuda.memory_allocated() >= before + 4 * 2**20
    assert minidl.cuda.max_memory_allocated() >= minidl.cuda.memory_allocated()
    del x
    minidl.cuda.reset_peak_memory_stats()
    assert minidl.cuda.max_memory_allocated() == minidl.cuda.memory_reserved() >= minidl.cuda.memory_allocated()
    assert "MiB" in minidl.cuda.memory_summary()


def test_session13_meta_as_strided_and_saved_tensor_hooks_on_the_gpu():
    """Session 13's additions on the GPU path, against torch on the same GPU: a meta skeleton made real on the GPU by
    to_empty, then loaded; as_strided's values and the gradient of overlapping windows (CuPy's add.at); save_on_cpu
    moving what a GPU graph saves to the host and back, with the gradients unchanged."""
    minidl.manual_seed(0)
    ref = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("cuda")
    x = minidl.randn(4, 6, device="cuda")
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("meta").to_empty(device="cuda")
    assert model[0].weight.is_cuda and not model[0].weight.is_meta
    model.load_state_dict(ref.state_dict())
    np.testing.assert_array_equal(model(x).detach().cpu().numpy(), ref(x).detach().cpu().numpy())

    base = np.arange(12.0).reshape(3, 4) * 0.5
    ours = minidl.tensor(base, device="cuda", requires_grad=True)
    theirs = torch.tensor(base, device="cuda", requires_grad=True)
    w = np.linspace(-1, 1, 2 * 3 * 3).reshape(2, 3, 3)
    yo = minidl.as_strided(ours, (2, 3, 3), (2, 1, 2), 1)
    yt = torch.as_strided(theirs, (2, 3, 3), (2, 1, 2), 1)
    np.testing.assert_array_equal(yo.detach().cpu().numpy(), yt.detach().cpu().numpy())
    (yo * minidl.tensor(w, device="cuda")).sum().backward()
    (yt * torch.tensor(w, device="cuda")).sum().backward()
    np.testing.assert_allclose(ours.grad.cpu().numpy(), theirs.grad.cpu().numpy(), rtol=1e-12)

    packed = []
    a = minidl.randn(8, 8, device="cuda", requires_grad=True)
    plain = (a.tanh() @ a).sum()
    plain.backward()
    want = a.grad.cpu().numpy()
    a.grad = None
    with minidl.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t.device) or t.cpu(),
                                                   lambda t: t.to("cuda")):
        hooked = (a.tanh() @ a).sum()
    hooked.backward()
    assert packed and all(str(d).startswith("cuda") for d in packed)
    np.testing.assert_allclose(a.grad.cpu().numpy(), want, rtol=1e-6)
    a.grad = None
    with minidl.autograd.graph.save_on_cpu():
        (a.tanh() @ a).sum().backward()
    np.testing.assert_allclose(a.grad.cpu().numpy(), want, rtol=1e-6)


def test_streams_order_work_as_torch_streams():
    """A side stream (torch's pattern: wait for the producer, compute, make the consumer wait): the block's kernels go
    to the side stream, the current stream comes back after it, events recorded on our Stream objects time and order
    the work, and the result equals the default stream's."""
    cuda = minidl.cuda
    x = minidl.randn(512, 512, device="cuda")
    want = (x @ x).relu().sum(0).cpu().numpy()
    default = cuda.current_stream()
    assert default == cuda.default_stream() and default.cuda_stream == 0
    side = cuda.Stream()
    assert side.cuda_stream != 0 and side != default and "cuda_stream=0x" in repr(side)
    side.wait_stream(default)
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    with cuda.stream(side):
        assert cuda.current_stream() == side
        start.record(side)
        y = (x @ x).relu().sum(0)
        end.record(side)
    assert cuda.current_stream() == default
    default.wait_stream(side)
    np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-5)
    end.synchronize()
    assert end.query() and side.query() and start.elapsed_time(end) > 0
    ev = side.record_event()
    default.wait_event(ev)
    with side:   # a Stream is its own context, as torch.Stream's (torch's device-generic stream)
        z = y * 2
    side.synchronize()
    np.testing.assert_allclose(z.cpu().numpy(), 2 * want, rtol=1e-5)
    ext = cuda.ExternalStream(side.cuda_stream)
    assert ext == side
    assert cuda.Stream(priority=-1).priority == -1


def test_streams_device_queries_and_out_of_memory_as_torch():
    cuda = minidl.cuda
    free, total = cuda.mem_get_info()
    tfree, ttotal = torch.cuda.mem_get_info()
    assert total == ttotal and 0 < free <= total
    assert cuda.get_arch_list() == [f"sm_{torch.cuda.get_device_capability()[0]}{torch.cuda.get_device_capability()[1]}"]
    assert cuda.is_initialized() and cuda.is_tf32_supported()
    with cuda.device(0):
        assert cuda.current_device() == 0
    with cuda.device_of(minidl.ones(1, device="cuda")):
        assert cuda.current_device() == 0
    with pytest.raises(cuda.OutOfMemoryError):
        minidl.empty(2**46, device="cuda")   # 256 TiB
    depth = cuda.nvtx.range_push("step")
    cuda.nvtx.mark("inside")
    assert cuda.nvtx.range_pop() == depth == 0


def test_a_cuda_generator_is_a_philox_stream_of_its_own():
    """Generator(device="cuda"), as diffusers' pipelines seed theirs: the same seed gives the global GPU stream's
    numbers for that seed, its draws leave the global stream where it was, get_state / set_state replay it, and a
    generator of the other device is refused with torch's message."""
    g = minidl.Generator(device="cuda").manual_seed(1234)
    assert str(g.device) == "cuda:0" and g.initial_seed() == 1234
    minidl.cuda.manual_seed(77)
    before = minidl.cuda.get_rng_state()
    a = minidl.randn(3, 5, generator=g, device="cuda")
    u = minidl.rand(100, generator=g, device="cuda")
    k = minidl.randint(0, 10, (50,), generator=g, device="cuda")
    p = minidl.randperm(20, generator=g, device="cuda")
    assert a.is_cuda and u.is_cuda and k.is_cuda and p.is_cuda
    assert np.array_equal(minidl.cuda.get_rng_state().numpy(), before.numpy())   # the global stream did not move
    minidl.cuda.manual_seed(1234)
    np.testing.assert_array_equal(minidl.randn(3, 5, device="cuda").cpu().numpy(), a.cpu().numpy())
    assert sorted(p.cpu().numpy().tolist()) == list(range(20)) and 0 <= int(k.min()) and int(k.max()) < 10
    assert 0 <= float(u.min()) and float(u.max()) < 1
    state = g.get_state()
    again = minidl.rand(7, generator=g, device="cuda").cpu().numpy()
    g.set_state(state)
    np.testing.assert_array_equal(minidl.rand(7, generator=g, device="cuda").cpu().numpy(), again)
    m1 = minidl.multinomial(minidl.ones(10, device="cuda"), 5, generator=g.manual_seed(3))
    m2 = minidl.multinomial(minidl.ones(10, device="cuda"), 5, generator=g.manual_seed(3))
    np.testing.assert_array_equal(m1.cpu().numpy(), m2.cpu().numpy())
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'cuda'"):
        minidl.rand(2, generator=g)


def test_legacy_cuda_types_move_and_check_as_torch():
    """The older programs' `Tensor = torch.cuda.FloatTensor` idiom on the GPU, beside torch's on the same GPU."""
    for lib in (minidl, torch):
        Tensor = lib.cuda.FloatTensor   # noqa: N806
        host = lib.ones(2, 3)
        moved = host.type(Tensor)
        assert moved.is_cuda and isinstance(moved, lib.cuda.FloatTensor) and not isinstance(moved, lib.FloatTensor)
        assert moved.type() == "torch.cuda.FloatTensor"
        assert moved.type(lib.FloatTensor).is_cuda is False
        assert host.type("torch.cuda.LongTensor").is_cuda and host.type("torch.cuda.LongTensor").dtype == lib.int64
        made = Tensor(4, 1).fill_(1.0)
        assert made.is_cuda and made.shape == (4, 1)


def test_a_whole_gpu_model_saved_with_pickle_comes_back_on_the_gpu_or_where_asked(tmp_path):
    """torch.save(model) of a model on the GPU: its arrays are pickled as host copies with their device, and come back
    on that GPU (a restricted load with the classes allowed), or on the CPU with map_location="cpu"; the outputs
    equal the original's."""
    from minidl.utils.serialization import safe_globals

    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).to("cuda")
    x = minidl.randn(2, 1, 8, 8, device="cuda")
    want = net(x).detach().cpu().numpy()
    path = tmp_path / "gpu_model.pth"
    minidl.save(net, path)
    with safe_globals([nn.Sequential, nn.Conv2d, nn.ReLU, nn.Flatten, nn.Linear]):
        back = minidl.load(path)
    assert back[0].weight.is_cuda
    np.testing.assert_allclose(back(x).detach().cpu().numpy(), want, rtol=1e-5, atol=1e-6)
    host = minidl.load(path, weights_only=False, map_location="cpu")
    assert not host[0].weight.is_cuda
    np.testing.assert_allclose(host(x.cpu()).detach().numpy(), want, rtol=1e-4, atol=1e-5)


def test_session14_convolution_gradients_bicubic_normal_cdf_and_custom_fwd_on_the_gpu():
    """Session 14's additions on the GPU beside torch's: torch.nn.grad's convolution gradients (the primitive's
    backward directions), F.interpolate bicubic and area with their gradients, Normal.cdf / icdf, and a custom
    Function under CUDA autocast with custom_fwd(cast_inputs=float32)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 9, 8)).astype(np.float32), rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    kw = dict(stride=2, padding=1, groups=2)
    go = rng.standard_normal(tuple(torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), **kw).shape))
    go = go.astype(np.float32)
    minidl.backends.cudnn.allow_tf32 = False
    try:
        mi = minidl.nn.grad.conv2d_input(x.shape, minidl.tensor(w, device="cuda"), minidl.tensor(go, device="cuda"), **kw)
        mw = minidl.nn.grad.conv2d_weight(minidl.tensor(x, device="cuda"), w.shape, minidl.tensor(go, device="cuda"), **kw)
    finally:
        minidl.backends.cudnn.allow_tf32 = True
    ti = torch.nn.grad.conv2d_input(x.shape, torch.tensor(w, dtype=torch.float64), torch.tensor(go, dtype=torch.float64), **kw)
    tw = torch.nn.grad.conv2d_weight(torch.tensor(x, dtype=torch.float64), w.shape, torch.tensor(go, dtype=torch.float64), **kw)
    assert mi.is_cuda and mw.is_cuda
    np.testing.assert_allclose(mi.cpu().numpy(), ti.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mw.cpu().numpy(), tw.numpy(), rtol=1e-4, atol=1e-4)

    img = rng.standard_normal((2, 3, 5, 7))
    for mode_kw in (dict(size=(8, 11), mode="bicubic"), dict(scale_factor=0.5, mode="bicubic", align_corners=True),
                    dict(size=(3, 4), mode="area")):
        xo, xt = minidl.tensor(img, device="cuda", requires_grad=True), torch.tensor(img, device="cuda",
                                                                                     requires_grad=True)
        yo, yt = minidl.nn.functional.interpolate(xo, **mode_kw), torch.nn.functional.interpolate(xt, **mode_kw)
        (yo * yo).sum().backward()
        (yt * yt).sum().backward()
        np.testing.assert_allclose(yo.detach().cpu().numpy(), yt.detach().cpu().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(xo.grad.cpu().numpy(), xt.grad.cpu().numpy(), rtol=1e-10, atol=1e-12)

    ours = minidl.distributions.Normal(minidl.tensor([0.5, -1.0], device="cuda"), minidl.tensor([2.0, 0.7], device="cuda"))
    theirs = torch.distributions.Normal(torch.tensor([0.5, -1.0], device="cuda"), torch.tensor([2.0, 0.7], device="cuda"))
    np.testing.assert_allclose(ours.cdf(minidl.tensor([1.3, -2.5], device="cuda")).cpu().numpy(),
                               theirs.cdf(torch.tensor([1.3, -2.5], device="cuda")).cpu().numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.icdf(minidl.tensor([0.1, 0.975], device="cuda")).cpu().numpy(),
                               theirs.icdf(torch.tensor([0.1, 0.975], device="cuda")).cpu().numpy(), rtol=1e-5)

    class MatMul(minidl.autograd.Function):
        @staticmethod
        @minidl.amp.custom_fwd(device_type="cuda", cast_inputs=minidl.float32)
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a @ b

        @staticmethod
        @minidl.amp.custom_bwd(device_type="cuda")
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g @ b.t(), a.t() @ g

    a = minidl.randn(4, 8, device="cuda", requires_grad=True)
    b = minidl.randn(8, 3, device="cuda", requires_grad=True)
    with minidl.autocast("cuda", dtype=minidl.bfloat16):
        plain = a @ b
        y = MatMul.apply(a, b)
    assert plain.dtype == minidl.bfloat16 and y.dtype == minidl.float32
    y.sum().backward()
    np.testing.assert_allclose(a.grad.cpu().numpy(), np.ones((4, 3)) @ b.detach().cpu().numpy().T, rtol=1e-5)


def test_session14_scatter_forms_incomplete_gamma_lp_pool3d_and_probes_on_the_gpu():
    """More of session 14 on the GPU beside torch: select / slice / diagonal_scatter with gradients, igamma /
    igammac (computed on the host, returned to the GPU) with the gradient in x, LPPool3d, the backend probes."""
    x0 = np.random.default_rng(0).standard_normal((3, 4, 5))
    outs = {}
    for lib in (minidl, torch):
        x = lib.tensor(x0, device="cuda", requires_grad=True)
        s1 = lib.tensor(np.arange(15.0).reshape(3, 5), device="cuda", requires_grad=True)
        s3 = lib.tensor(np.arange(15.0).reshape(5, 3), device="cuda", requires_grad=True)
        a = lib.select_scatter(x, s1, 1, -2)
        b = lib.slice_scatter(x, lib.ones(3, 2, 5, dtype=lib.float64, device="cuda"), 1, 1, 4, 2)
        c = lib.diagonal_scatter(x, s3, 1, 0, 1)
        (a.sum() + (b * b).sum() + (c * 3).sum()).backward()
        xa = lib.tensor([0.2, 1.5, 12.0], device="cuda", requires_grad=True)
        g = lib.igamma(lib.tensor([0.5, 1.0, 10.0], device="cuda"), xa) + 2 * lib.igammac(
            lib.tensor([0.5, 1.0, 10.0], device="cuda"), xa)
        g.sum().backward()
        volume = np.abs(x0).reshape(1, 3, 4, 5, 1).repeat(2, axis=-1).astype(np.float32)
        p = lib.nn.LPPool3d(2, 2)(lib.tensor(volume, device="cuda"))
        outs[lib.__name__] = [t.detach().cpu().numpy() for t in (a, b, c, x.grad, s1.grad, s3.grad, g, xa.grad, p)]
        assert a.is_cuda and g.is_cuda
    for ours, theirs in zip(outs["minidl"], outs["torch"]):
        float32 = ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-5 if float32 else 1e-8, atol=1e-6 if float32 else 1e-10)
    assert minidl.backends.cuda.is_built() and minidl.backends.cuda.is_flash_attention_available()


def test_muon_on_the_gpu_equals_torchs():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    grads = [rng.standard_normal(w.shape).astype(np.float32) for _ in range(3)]
    res = []
    for lib in (minidl, torch):
        p = lib.nn.Parameter(lib.tensor(w.copy(), device="cuda"))
        opt = lib.optim.Muon([p], lr=0.02)
        for g in grads:
            p.grad = lib.tensor(g, device="cuda")
            opt.step()
        res.append(p.detach().cpu().numpy())
    np.testing.assert_allclose(res[0], res[1], atol=2e-4)   # (a bf16 rounding of the update per step)
    assert np.abs(res[0] - w).max() > 100 * np.abs(res[0] - res[1]).max()


def test_session14_antialias_erfcx_zeta_and_generalized_pareto_on_the_gpu():
    x = np.random.default_rng(0).standard_normal((2, 3, 37, 29))
    xo, xt = minidl.tensor(x, device="cuda", requires_grad=True), torch.tensor(x, device="cuda", requires_grad=True)
    yo = minidl.nn.functional.interpolate(xo, size=(10, 7), mode="bicubic", antialias=True)
    yt = torch.nn.functional.interpolate(xt, size=(10, 7), mode="bicubic", antialias=True)
    (yo * yo).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(yo.detach().cpu().numpy(), yt.detach().cpu().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(xo.grad.cpu().numpy(), xt.grad.cpu().numpy(), rtol=1e-10, atol=1e-12)
    xs = np.array([-3.0, 0.0, 5.0, 26.5, 40.0])
    np.testing.assert_allclose(minidl.special.erfcx(minidl.tensor(xs, device="cuda")).cpu().numpy(),
                               torch.special.erfcx(torch.tensor(xs, device="cuda")).cpu().numpy(), rtol=1e-12)
    z = minidl.special.zeta(minidl.tensor([2.0, 3.5], device="cuda"), minidl.tensor([1.0, 0.5], device="cuda"))
    assert z.is_cuda
    np.testing.assert_allclose(z.cpu().numpy(), torch.special.zeta(torch.tensor([2.0, 3.5]),
                                                                   torch.tensor([1.0, 0.5])).numpy(), rtol=1e-14)
    d = minidl.distributions.GeneralizedPareto(minidl.tensor([0.1], device="cuda"), minidl.tensor([2.0], device="cuda"),
                                               minidl.tensor([0.4], device="cuda"))
    t = torch.distributions.GeneralizedPareto(torch.tensor([0.1], device="cuda"), torch.tensor([2.0], device="cuda"),
                                              torch.tensor([0.4], device="cuda"))
    np.testing.assert_allclose(d.log_prob(minidl.tensor([1.5], device="cuda")).cpu().numpy(),
                               t.log_prob(torch.tensor([1.5], device="cuda")).cpu().numpy(), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# The adaptive optimizers on the GPU: the same parameters as torch's on its GPU, and no host read per step
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kwargs", ADAPTIVE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(ADAPTIVE_CASES)])
def test_adaptive_optimizers_on_the_gpu_equal_torchs(name, kwargs):
    """Adafactor's factored second moment (a matrix and a vector), Rprop's sign steps, ASGD's averages: float64 on both
    GPUs, eight steps on the same loss, and the state on the device it came from."""
    rng = np.random.default_rng(0)
    w0, b0, x = rng.standard_normal((5, 3)), rng.standard_normal(3), rng.standard_normal((6, 5))
    res = []
    for lib in (minidl, torch):
        w = lib.tensor(w0, device="cuda", requires_grad=True)
        b = lib.tensor(b0, device="cuda", requires_grad=True)
        xs = lib.tensor(x, device="cuda")
        opt = getattr(lib.optim, name)([w, b], **kwargs)
        for _ in range(8):
            opt.zero_grad()
            ((xs @ w + b).tanh() ** 2).sum().backward()
            opt.step()
        res.append((w.detach().cpu().numpy(), b.detach().cpu().numpy()))
        if lib is minidl:
            for value in opt.state[w].values():
                if isinstance(value, minidl.Tensor) and value.dim() > 0:
                    assert value.is_cuda, f"{name}: optimizer state left the GPU"
    rtol = 1e-6 if name == "ASGD" else 1e-8
    for ours, theirs in zip(*res):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=1e-10)
    assert np.abs(res[0][0] - w0).max() > 1e-3


@pytest.mark.parametrize("name", ["Adafactor", "Muon"])
def test_adafactor_and_muon_steps_never_wait_for_the_gpu(name):
    """Their norms (Adafactor's row and column factors, Muon's Newton-Schulz scale) stay device arrays: a step queues
    behind a running kernel without reading anything back."""
    p = minidl.nn.Parameter(minidl.randn(64, 32, device="cuda"))
    opt = getattr(minidl.optim, name)([p], lr=0.01)
    p.grad = minidl.randn(64, 32, device="cuda")
    opt.step()
    opt.step()
    assert _spin_then(opt.step), f"{name}.step waited for the GPU (a host read of a norm)"
