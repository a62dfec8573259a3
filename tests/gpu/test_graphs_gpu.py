"""CUDA graphs on the GPU (minidl/_graphs.py): a captured training step gives the same parameters as
the eager step (bit for bit: same kernels, deterministic algorithms), dropout masks and batch-norm
statistics advance on the device from replay to replay, make_graphed_callables matches eager
gradients, and each uncapturable op raises an error that names it (and leaves the GPU usable)."""
import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl._graphs import _optimizer_is_capturable
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def deterministic():
    # Bit-equality needs algorithms without atomics; the heuristic policy never measures.
    with minidl.backends.cudnn.flags(benchmark=False, deterministic=True):
        yield


def _host(t):
    return t.detach().cpu().numpy().copy()


def _cnn(seed):
    minidl.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 12, 3, padding=1, bias=False), nn.BatchNorm2d(12), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(12 * 3 * 3, 7),
    ).to("cuda")


def _batches(n, batch=10, seed=1):
    rng = np.random.default_rng(seed)
    return [(minidl.tensor(rng.standard_normal((batch, 3, 13, 13)).astype(np.float32), device="cuda"),
             minidl.tensor(rng.integers(0, 7, batch), device="cuda")) for _ in range(n)]


def _train(graphed, steps=7, warmup=2, make_opt=None, scheduler=None):
    """Run `steps` training steps (eager or graphed) from the same start; return the model and the
    losses. The dropout generator and every weight start equal (manual_seed in _cnn)."""
    model = _cnn(5)
    opt = make_opt(model) if make_opt else minidl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = scheduler(opt) if scheduler else None

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = minidl.cuda.CUDAGraphStep(step, optimizers=opt, warmup=warmup) if graphed else step
    losses = []
    for x, y in _batches(steps):
        losses.append(float(run(x, y).item()))
        if sched is not None:
            sched.step()
    return model, losses, run


def test_graphed_step_equals_eager_bit_for_bit():
    eager, eager_losses, _ = _train(False)
    eager_state = {k: _host(v) for k, v in eager.state_dict().items()}
    eager_rng = minidl.random.philox_state("cuda").get().copy()
    graphed, graphed_losses, run = _train(True)
    assert run.captured and run.calls == 7
    assert graphed_losses == eager_losses  # dropout masks, BN batch stats, SGD momentum: all the same
    for k, v in graphed.state_dict().items():  # parameters, running_mean/var, num_batches_tracked
        np.testing.assert_array_equal(_host(v), eager_state[k], err_msg=k)
    assert int(eager_state["1.num_batches_tracked"]) == 7
    np.testing.assert_array_equal(minidl.random.philox_state("cuda").get(), eager_rng)
    assert int(eager_rng[1]) > 0  # the dropout generator advanced on the device


def test_device_generator_gives_the_cpu_masks():
    """The same sequence of dropout calls after manual_seed: the same masks on the CPU and the GPU."""
    shapes = [(7, 13), (1000,), (3, 5, 9)]
    masks, states = {}, {}
    for device in ("cpu", "cuda"):
        minidl.manual_seed(2024)   # resets every device's generator, so each state is read right after its run
        masks[device] = [_host(F.dropout(minidl.ones(*s, device=device), 0.35)) != 0 for s in shapes]
        states[device] = minidl.random.get_philox_states()["cuda:0" if device == "cuda" else "cpu"]
    for a, b in zip(masks["cpu"], masks["cuda"]):
        np.testing.assert_array_equal(a, b)
    assert states["cuda"] == states["cpu"] and states["cpu"][1] > 0


def test_replays_draw_new_dropout_masks_and_track_bn():
    _, losses, run = _train(True, steps=6, warmup=1)
    model_losses = set(losses)
    assert len(model_losses) == 6
    state = minidl.random.philox_state("cuda").get()
    per_step = (10 * 108 + 3) // 4 * 4  # one Dropout over (10, 108) a step
    assert int(state[1]) == 6 * per_step


def test_scheduler_lr_under_graph():
    def make_opt(model):
        return minidl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def sched(opt):
        return minidl.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    if _optimizer_is_capturable(make_opt(_cnn(0))):
        eager, eager_losses, _ = _train(False, make_opt=make_opt, scheduler=sched)
        graphed, graphed_losses, _ = _train(True, make_opt=make_opt, scheduler=sched)
        assert graphed_losses == eager_losses
        for (k, a), b in zip(eager.state_dict().items(), graphed.state_dict().values()):
            np.testing.assert_array_equal(_host(a), _host(b), err_msg=k)
    else:  # lr read on the host: the capture would freeze it, so the next call must refuse
        with pytest.raises(RuntimeError, match=r"learning rate of SGD param_groups\[0\] changed on the host"):
            _train(True, make_opt=make_opt, scheduler=sched)


def test_adam_host_step_count_refused_or_equal():
    def make_opt(model):
        return minidl.optim.Adam(model.parameters(), lr=1e-3)

    if _optimizer_is_capturable(make_opt(_cnn(0))):
        eager, eager_losses, _ = _train(False, make_opt=make_opt)
        graphed, graphed_losses, _ = _train(True, make_opt=make_opt)
        assert graphed_losses == eager_losses
    else:
        with pytest.raises(RuntimeError, match=r"Adam changed the host value 'step'"):
            _train(True, make_opt=make_opt)


def test_forward_backward_graphed_optimizer_eager_equals_eager():
    """The examples' split step: forward+backward replayed, Adam + OneCycleLR eager (host lr and step),
    with a partial batch run eagerly in between (its .grad must not stick)."""
    results = []
    for graphed in (False, True):
        model = _cnn(9)
        opt = minidl.optim.Adam(model.parameters(), lr=1e-3)
        sched = minidl.optim.lr_scheduler.OneCycleLR(opt, max_lr=4e-3, total_steps=20)
        params = [p for g in opt.param_groups for p in g["params"]]

        def forward_backward(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        run = minidl.cuda.CUDAGraphStep(forward_backward, params=params, warmup=2) if graphed else forward_backward
        losses = []
        batches = _batches(7)
        batches.insert(4, _batches(1, batch=6, seed=4)[0])  # another shape: eager
        for x, y in batches:
            loss = forward_backward(x, y) if x.shape[0] == 6 else run(x, y)
            opt.step()
            sched.step()
            losses.append(float(loss.item()))
        results.append((losses, {k: _host(v) for k, v in model.state_dict().items()}))
    assert results[0][0] == results[1][0]
    for k, v in results[0][1].items():
        np.testing.assert_array_equal(results[1][1][k], v, err_msg=k)


def test_cuda_graph_api_capture_and_replay():
    x = minidl.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="cuda")
    g = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g):
        assert minidl.cuda.is_current_stream_capturing()
        y = (x * 2 + 1).relu().sum(dim=1)
    assert not minidl.cuda.is_current_stream_capturing()
    x.copy_(minidl.tensor(-np.ones((3, 4), np.float32), device="cuda"))
    g.replay()
    np.testing.assert_array_equal(y.cpu().numpy(), np.zeros(3, np.float32))
    x.copy_(minidl.tensor(np.full((3, 4), 2.0, np.float32), device="cuda"))
    g.replay()
    np.testing.assert_array_equal(y.cpu().numpy(), np.full(3, 20.0, np.float32))
    # a second graph in the first one's pool, replayed after it
    g2 = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g2, pool=g.pool()):
        z = y * 3
    g.replay()
    g2.replay()
    np.testing.assert_array_equal(z.cpu().numpy(), np.full(3, 60.0, np.float32))
    assert g.pool().used_bytes() > 0
    g.reset()
    with pytest.raises(RuntimeError, match="nothing captured"):
        g.replay()


def test_make_graphed_callables_matches_eager():
    minidl.manual_seed(3)
    eager = nn.Sequential(nn.Linear(13, 31), nn.ReLU(), nn.Linear(31, 5)).to("cuda")
    minidl.manual_seed(3)
    module = nn.Sequential(nn.Linear(13, 31), nn.ReLU(), nn.Linear(31, 5)).to("cuda")
    rng = np.random.default_rng(0)
    sample = minidl.tensor(rng.standard_normal((9, 13)).astype(np.float32), device="cuda")
    graphed = minidl.cuda.make_graphed_callables(module, (sample,))
    opt_e = minidl.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = minidl.optim.SGD(module.parameters(), lr=0.1)
    for _ in range(4):
        x = minidl.tensor(rng.standard_normal((9, 13)).astype(np.float32), device="cuda")
        for model, opt in ((eager, opt_e), (graphed, opt_g)):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
    for a, b in zip(eager.parameters(), module.parameters()):
        np.testing.assert_allclose(_host(b), _host(a), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"captured with shape \(9, 13\)"):
        graphed(minidl.zeros(8, 13, device="cuda"))


# ------------------------------------------------------------------------------------------------
# What cannot be captured: an error naming the op, and the GPU still usable afterwards
# ------------------------------------------------------------------------------------------------


def _capture_raises(fn, match):
    g = minidl.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=match):
        with minidl.cuda.graph(g):
            fn()
    assert not minidl.cuda.is_current_stream_capturing()
    a = minidl.ones(5, device="cuda")
    assert float((a * 2).sum().item()) == 10.0  # the device works after the aborted capture


@pytest.mark.parametrize("read,name", [
    (lambda t: t.sum().item(), r"Tensor\.item\(\)"),
    (lambda t: float(t.sum()), r"float\(tensor\)"),
    (lambda t: bool(t.sum() > 0), r"bool\(tensor\)"),
    (lambda t: t.tolist(), r"Tensor\.tolist\(\)"),
    (lambda t: t.cpu(), r"to\('cpu'\)"),
    (lambda t: minidl.tensor([1.0, 2.0], device="cuda"), r"to\('cuda'\)"),
])
def test_host_reads_raise_under_capture(read, name):
    t = minidl.ones(4, device="cuda")
    _capture_raises(lambda: read(t), name + " cannot run inside a CUDA graph capture")


def test_algorithm_search_raises_under_capture():
    x = minidl.randn(2, 3, 11, 11, device="cuda")
    conv = nn.Conv2d(3, 4, 3).to("cuda")
    with minidl.backends.cudnn.flags(benchmark=True, deterministic=False):
        _capture_raises(lambda: conv(x), r"convolution algorithm search \(forward, input \(2, 3, 11, 11\)")


def test_check_indices_raises_under_capture():
    logits = minidl.randn(4, 3, device="cuda")
    target = minidl.tensor([0, 1, 2, 1], device="cuda")
    with minidl.backends.cuda.flags(check_indices=True):
        _capture_raises(lambda: F.cross_entropy(logits, target), r"cross_entropy with minidl\.backends\.cuda\.check_indices")


def test_cublas_ops_raise_under_capture():
    a = minidl.randn(3, 4, device="cuda")
    _capture_raises(lambda: a @ a.T, r"matmul \(the @ operator\) on the GPU cannot run inside")


@pytest.mark.parametrize("allow_tf32", [True, False])
def test_lstm_step_is_captured_and_equals_eager(allow_tf32):
    """An LSTM's forward and backward captured in a graph. TF32 (backends.cudnn.allow_tf32, PyTorch's
    default): every GEMM of the RNN runs on our tensor-core kernel in both, so the replayed step gives
    the eager step's loss and gradients bit for bit. fp32: eager GEMMs are cuBLAS calls, which CuPy
    cannot make during capture, so the captured GEMMs run on our SGEMM: equal to float32 rounding."""
    def run(graphed):
        minidl.manual_seed(0)
        lstm = nn.LSTM(6, 8, num_layers=2, bidirectional=True).to("cuda")
        params = list(lstm.parameters())
        x = minidl.randn(5, 3, 6, device="cuda")

        def fwd_bwd(x):
            for p in params:
                p.grad = None
            y, _ = lstm(x)
            loss = (y * y).sum()
            loss.backward()
            return loss

        step = minidl.cuda.CUDAGraphStep(fwd_bwd, params=params, warmup=2) if graphed else fwd_bwd
        losses = [float(step(x).item()) for _ in range(4)]
        return losses, [p.grad.cpu().numpy() for p in params]

    with minidl.backends.cudnn.flags(allow_tf32=allow_tf32):
        eager, graphed = run(False), run(True)
    if allow_tf32:
        np.testing.assert_array_equal(graphed[0], eager[0])
        for a, b in zip(graphed[1], eager[1]):
            np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(graphed[0], eager[0], rtol=1e-5)
        for a, b in zip(graphed[1], eager[1]):
            assert rel_err(a, b) <= 1e-5


def test_shape_change_at_replay_raises():
    model, _, run = _train(True, steps=3, warmup=1)
    x = minidl.randn(9, 3, 13, 13, device="cuda")
    y = minidl.tensor(np.zeros(9, np.int64), device="cuda")
    with pytest.raises(ValueError, match=r"input 0 has shape \(9, 3, 13, 13\).*captured with shape \(10, 3, 13, 13\)"):
        run(x, y)
    with pytest.raises(ValueError, match=r"input 1 has .*dtype int32"):
        run(minidl.randn(10, 3, 13, 13, device="cuda"), minidl.tensor(np.zeros(10, np.int32), device="cuda"))
    assert run.eager(x, y).shape == ()  # another shape runs eagerly


@pytest.mark.parametrize("amp,tol", [([], 1e-4), (["--amp", "--amp-dtype", "bfloat16"], 2e-2)], ids=["fp32", "bf16"])
def test_char_gpt_example_graphed_step_equals_eager(tmp_path, capsys, amp, tol):
    """examples/char_gpt.py on the GPU replays its forward and backward pass from a CUDA graph (clipping and
    AdamW under a host lr schedule eager): the graph is captured and replayed, and the run trains as --no-graph
    does (the same losses and weights up to the order of atomic sums: the embedding's gradient and attention's
    dQ add with atomics, so two eager runs differ in the last bits too)."""
    from tests.test_examples import load_example, write_text

    text = tmp_path / "tiny.txt"
    write_text(text)
    gpt = load_example("char_gpt")
    base = ["--device", "cuda", "--data", str(text), "--n-layer", "2", "--n-head", "2", "--n-embd", "64",
            "--block-size", "16", "--batch-size", "8", "--steps-per-epoch", "10", "--warmup", "4", "--epochs", "2",
            "--no-progress", "--lr", "1e-2", "--sample-length", "5", "--dropout", "0.1"] + amp
    runs = {}
    for graph in (True, False):
        minidl.manual_seed(0)
        runs[graph] = gpt.main(base + ["--checkpoint", str(tmp_path / f"g{graph}.mdl")] + ([] if graph else ["--no-graph"]))
    out = capsys.readouterr().out
    assert "CUDA graph:" not in out, out   # the capture did not fall back to eager steps
    graphed = runs[True]["train_step"].graphed
    assert graphed.captured and graphed.calls == 20
    losses = [[r["train_loss"] for r in runs[g]["history"]] for g in (True, False)]
    np.testing.assert_allclose(losses[0], losses[1], rtol=tol, atol=tol)
    ours, eager = runs[True]["model"].state_dict(), runs[False]["model"].state_dict()
    for k, v in eager.items():
        np.testing.assert_allclose(_host(ours[k]), _host(v), rtol=10 * tol, atol=10 * tol, err_msg=k)
