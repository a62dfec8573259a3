"""The CUDA RNN primitive's standard algorithm (kernels/rnn.cu + cuBLAS) against the NumPy reference and
torch.nn.RNN/LSTM/GRU on CUDA.

Every test runs with the launcher's POISON switch on: each buffer the kernels and GEMMs are meant to fill
(states, outputs, gate records, gradients) starts as NaN, so an element nothing writes reaches some
output or gradient as NaN, and rel_err turns NaN into inf. Sizes are odd (not multiples of 32, 128 or
256); torch runs with TF32 off so that both sides are plain float32.
"""
import zlib

import numpy as np
import pytest

from minidl.primitives import RNNDescriptor, rnn_backward, rnn_cell_step, rnn_cell_step_backward, rnn_forward
from minidl.primitives.cpu import rnn as cpu_rnn
from tests.conftest import rel_err

pytestmark = pytest.mark.gpu

MODES = ["rnn_tanh", "rnn_relu", "lstm", "gru"]
TOL = 1e-4
CONFIGS = [(1, False, True), (2, True, True), (2, False, False), (2, True, False)]


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch):
    from minidl.primitives.cuda import rnn as cuda_rnn

    monkeypatch.setattr(cuda_rnn, "POISON", True)
    return cuda_rnn


@pytest.fixture(autouse=True)
def standard_algorithm(monkeypatch):
    """This file tests the standard algorithm (kernels/rnn.cu): algo="auto" must not pick the persistent
    one (tests/gpu/test_rnn_persistent_gpu.py tests that)."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "plan", lambda *args, **kwargs: (None, "tests: the standard algorithm"))


def _case(desc, T, B, rng, with_state=True):
    """Random float32 x, h0, c0, weights and upstream gradients dy, dhy, dcy (host arrays)."""
    f32 = np.float32
    x = rng.standard_normal((T, B, desc.input_size)).astype(f32)
    state = (desc.num_layers * desc.num_directions, B, desc.hidden_size)
    h0 = rng.standard_normal(state).astype(f32) if with_state else None
    c0 = rng.standard_normal(state).astype(f32) if with_state and desc.mode == "lstm" else None
    scale = 1 / np.sqrt(desc.hidden_size)
    weights = [tuple(None if spec is None else (rng.uniform(-1.5, 1.5, spec.shape) * scale).astype(f32)
                     for spec in entry) for entry in desc.weight_shapes()]
    dy = rng.standard_normal((T, B, desc.num_directions * desc.hidden_size)).astype(f32)
    dhy = rng.standard_normal(state).astype(f32)
    dcy = rng.standard_normal(state).astype(f32) if desc.mode == "lstm" else None
    return x, h0, c0, weights, dy, dhy, dcy


def _to_gpu(a):
    import cupy

    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return type(a)(_to_gpu(v) for v in a)
    return cupy.asarray(a)


def _to_host(a):
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return type(a)(_to_host(v) for v in a)
    return a.get()


def _run_gpu(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=None):
    """Our forward and backward on the GPU; everything returned on the host."""
    y, hy, cy, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc,
                                     seq_lengths=lengths)
    dx, dh0, dc0, dweights = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
    return dict(y=_to_host(y), hy=_to_host(hy), cy=_to_host(cy), dx=_to_host(dx), dh0=_to_host(dh0),
                dc0=_to_host(dc0), dweights=_to_host(dweights))


def _run_reference(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=None):
    """The NumPy reference in float64 (the float32 GPU result is compared with the exact answer)."""
    f64 = (lambda a: None if a is None else a.astype(np.float64))
    w64 = [tuple(f64(w) for w in entry) for entry in weights]
    y, hy, cy, saved = cpu_rnn.rnn_forward(f64(x), f64(h0), f64(c0), w64, desc, lengths, True)
    dx, dh0, dc0, dweights = cpu_rnn.rnn_backward(f64(dy), f64(dhy), f64(dcy), desc, w64, lengths, saved)
    return dict(y=y, hy=hy, cy=cy, dx=dx, dh0=dh0, dc0=dc0, dweights=dweights)


def _run_torch_cuda(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=None):
    """torch.nn.RNN/LSTM/GRU on CUDA (cuDNN, TF32 off) with our weights; gradients keyed like dweights."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    kw = dict(num_layers=desc.num_layers, bidirectional=desc.bidirectional, bias=desc.bias)
    if desc.mode == "lstm":
        m = torch.nn.LSTM(desc.input_size, desc.hidden_size, **kw)
    elif desc.mode == "gru":
        m = torch.nn.GRU(desc.input_size, desc.hidden_size, **kw)
    else:
        m = torch.nn.RNN(desc.input_size, desc.hidden_size, nonlinearity=desc.mode[4:], **kw)
    m = m.cuda()
    with torch.no_grad():
        for entry, specs in zip(weights, desc.weight_shapes()):
            for array, spec in zip(entry, specs):
                if spec is not None:
                    getattr(m, spec.name).copy_(torch.from_numpy(array))
    state = (desc.num_layers * desc.num_directions, x.shape[1], desc.hidden_size)
    cuda = (lambda a: torch.tensor(a, device="cuda", requires_grad=True))
    xt = cuda(x)
    h0t = cuda(h0 if h0 is not None else np.zeros(state, np.float32))
    c0t = cuda(c0 if c0 is not None else np.zeros(state, np.float32))
    inp = xt
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(lengths), enforce_sorted=False)
    if desc.mode == "lstm":
        out, (hn, cn) = m(inp, (h0t, c0t))
    else:
        out, hn = m(inp, h0t)
        cn = None
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    loss = (out * torch.from_numpy(dy).cuda()).sum() + (hn * torch.from_numpy(dhy).cuda()).sum()
    if cn is not None:
        loss = loss + (cn * torch.from_numpy(dcy).cuda()).sum()
    loss.backward()
    host = (lambda t: t.detach().cpu().numpy())
    grads = {name: host(p.grad) for name, p in m.named_parameters()}
    dweights = [tuple(None if spec is None else grads[spec.name] for spec in specs)
                for specs in desc.weight_shapes()]
    return dict(y=host(out), hy=host(hn), cy=None if cn is None else host(cn), dx=host(xt.grad),
                dh0=host(h0t.grad), dc0=None if cn is None else host(c0t.grad), dweights=dweights)


def _assert_close(got, want, desc, tol=TOL):
    for key in ("y", "hy", "dx", "dh0"):
        assert got[key].dtype == np.float32 and got[key].shape == want[key].shape, key
        assert rel_err(got[key], want[key]) <= tol, (key, rel_err(got[key], want[key]))
    if desc.mode == "lstm":
        for key in ("cy", "dc0"):
            assert rel_err(got[key], want[key]) <= tol, (key, rel_err(got[key], want[key]))
    else:
        assert got["cy"] is None and got["dc0"] is None
    for k, (grads, refs, specs) in enumerate(zip(got["dweights"], want["dweights"], desc.weight_shapes())):
        for grad, ref, spec in zip(grads, refs, specs):
            if spec is None:
                assert grad is None
            else:
                assert grad.shape == spec.shape and grad.dtype == np.float32, spec.name
                assert rel_err(grad, ref) <= tol, (spec.name, rel_err(grad, ref))


# ----------------------------------------------------------------------------------------------
# Against the NumPy reference (float64) and torch/cuDNN on the GPU
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_layers,bidirectional,bias", CONFIGS)
@pytest.mark.parametrize("padded", [False, True])
def test_matches_reference_and_torch_cuda(mode, num_layers, bidirectional, bias, padded):
    rng = np.random.default_rng(zlib.crc32(repr((mode, num_layers, bidirectional, bias, padded)).encode()))
    desc = RNNDescriptor(mode, 13, 37, num_layers, bidirectional, bias)
    T, B = 9, 6
    lengths = np.array([5, 9, 1, 7, 9, 3]) if padded else None  # unsorted, full-length and length-1
    case = _case(desc, T, B, rng)
    got = _run_gpu(desc, *case, lengths=lengths)
    _assert_close(got, _run_reference(desc, *case, lengths=lengths), desc)
    _assert_close(got, _run_torch_cuda(desc, *case, lengths=lengths), desc)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_larger_odd_sizes_against_torch(mode):
    """Sizes where the cell kernels' grid-stride loops wrap and the GEMMs have ragged tiles."""
    rng = np.random.default_rng(7)
    desc = RNNDescriptor(mode, 67, 131, num_layers=2, bidirectional=True)
    lengths = rng.integers(1, 18, size=41)
    lengths[0] = 17
    case = _case(desc, 17, 41, rng)
    got = _run_gpu(desc, *case, lengths=lengths)
    _assert_close(got, _run_torch_cuda(desc, *case, lengths=lengths), desc)


@pytest.mark.parametrize("mode", MODES)
def test_zero_initial_state_and_missing_gradients(mode):
    """h0/c0 None mean zeros; dy None and dhy/dcy None mean zero upstream gradients."""
    rng = np.random.default_rng(3)
    desc = RNNDescriptor(mode, 5, 19, num_layers=2, bidirectional=True)
    x, _, _, weights, dy, dhy, dcy = _case(desc, 6, 5, rng, with_state=False)
    zeros = np.zeros_like(dhy)
    got = _run_gpu(desc, x, None, None, weights, None, dhy, None)
    want = _run_reference(desc, x, None, None, weights, np.zeros_like(dy), dhy,
                          zeros if desc.mode == "lstm" else None)
    _assert_close(got, want, desc)
    got = _run_gpu(desc, x, None, None, weights, dy, None, None)
    want = _run_reference(desc, x, None, None, weights, dy, zeros, zeros if desc.mode == "lstm" else None)
    _assert_close(got, want, desc)


@pytest.mark.parametrize("mode", MODES)
def test_inference_mode_matches_training_forward(mode):
    rng = np.random.default_rng(5)
    desc = RNNDescriptor(mode, 7, 23, num_layers=2, bidirectional=True)
    x, h0, c0, weights, *_ = _case(desc, 5, 3, rng)
    args = (_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc)
    y, hy, cy, reserve = rnn_forward(*args, training=True)
    y2, hy2, cy2, reserve2 = rnn_forward(*args, training=False)
    assert reserve is not None and reserve2 is None
    # The same kernels and GEMMs on the same data: equal up to cuBLAS picking another algorithm.
    assert rel_err(y2.get(), y.get()) <= 1e-6 and rel_err(hy2.get(), hy.get()) <= 1e-6
    if mode == "lstm":
        assert rel_err(cy2.get(), cy.get()) <= 1e-6


def test_side_stream_gives_the_same_result(poisoned_buffers):
    """Running the reverse direction on a second stream must change nothing but the timing."""
    rng = np.random.default_rng(11)
    desc = RNNDescriptor("lstm", 9, 29, num_layers=2, bidirectional=True)
    case = _case(desc, 8, 7, rng)
    lengths = np.array([8, 2, 5, 8, 1, 6, 7])
    poisoned_buffers.USE_SIDE_STREAM = True
    two_streams = _run_gpu(desc, *case, lengths=lengths)
    poisoned_buffers.USE_SIDE_STREAM = False
    try:
        one_stream = _run_gpu(desc, *case, lengths=lengths)
    finally:
        poisoned_buffers.USE_SIDE_STREAM = True
    _assert_close(two_streams, one_stream, desc, tol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_single_cell_step_matches_cpu(mode):
    rng = np.random.default_rng(13)
    B, I, H = 5, 6, 33
    G = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}[mode]
    f32 = np.float32
    x, h = rng.standard_normal((B, I)).astype(f32), rng.standard_normal((B, H)).astype(f32)
    c = rng.standard_normal((B, H)).astype(f32) if mode == "lstm" else None
    w_ih, w_hh = (rng.uniform(-0.3, 0.3, (G * H, n)).astype(f32) for n in (I, H))
    b_ih, b_hh = (rng.uniform(-0.3, 0.3, G * H).astype(f32) for _ in range(2))
    dh_new = rng.standard_normal((B, H)).astype(f32)
    dc_new = rng.standard_normal((B, H)).astype(f32) if mode == "lstm" else None

    cpu = rnn_cell_step(mode, x, h, c, w_ih, w_hh, b_ih, b_hh)
    cpu_grads = rnn_cell_step_backward(dh_new, dc_new, cpu[2])
    gpu = rnn_cell_step(mode, *_to_gpu((x, h, c, w_ih, w_hh, b_ih, b_hh)))
    gpu_grads = rnn_cell_step_backward(_to_gpu(dh_new), _to_gpu(dc_new), gpu[2])
    for a, b in zip(gpu[:2], cpu[:2]):
        assert (a is None) == (b is None)
        if b is not None:
            assert rel_err(a.get(), b) <= TOL
    for a, b in zip(gpu_grads, cpu_grads):
        assert (a is None) == (b is None)
        if b is not None:
            assert rel_err(a.get(), b) <= TOL


def test_float64_on_gpu_is_a_type_error():
    import cupy

    desc = RNNDescriptor("gru", 3, 4)
    rng = np.random.default_rng(0)
    x, h0, _, weights, *_ = _case(desc, 2, 2, rng)
    with pytest.raises(TypeError, match="rnn_forward: the CUDA RNN kernels are float32"):
        rnn_forward(cupy.asarray(x, dtype=cupy.float64), None, None,
                    [tuple(cupy.asarray(w, dtype=cupy.float64) for w in e) for e in weights], desc)
