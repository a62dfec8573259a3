"""The persistent RNN algorithm (kernels/rnn_persistent.cu): one launch per layer for every time step.

Against the NumPy reference in float64 and the standard algorithm on the same GPU, with the launcher's
POISON switch on (every buffer the kernels should fill starts as NaN). The hidden units per CTA are
forced to several values (cuda/rnn_persistent.UNITS) so that a CTA owns 1, an odd number, or a count
that does not divide the hidden size; batches that are not multiples of 4; padded and bidirectional
layers (both directions run in one launch, through one grid-wide barrier). Also: the same result run to
run (bit for bit), inside a CUDA graph, and the error of algo='persistent' where it cannot run.
"""
import zlib

import numpy as np
import pytest

from minidl.primitives import RNNDescriptor, rnn_backward, rnn_forward
from tests.conftest import rel_err
from tests.gpu.test_rnn_gpu import _assert_close, _case, _run_gpu, _run_reference, _to_gpu, _to_host

pytestmark = pytest.mark.gpu

MODES = ["rnn_tanh", "rnn_relu", "lstm", "gru"]
CONFIGS = [(1, False, True), (2, True, True), (2, False, False)]


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch):
    from minidl.primitives.cuda import rnn as cuda_rnn

    monkeypatch.setattr(cuda_rnn, "POISON", True)
    return cuda_rnn


@pytest.fixture
def units(monkeypatch):
    from minidl.primitives.cuda import rnn_persistent

    def force(n):
        monkeypatch.setattr(rnn_persistent, "UNITS", n)
        monkeypatch.setattr(rnn_persistent, "UNITS_WAVE", n)   # (two unidirectional layers run as a wavefront)
    return force


def _desc(mode, I, H, L, bidirectional, bias, algo):
    return RNNDescriptor(mode, I, H, L, bidirectional, bias, algo=algo)


def _padded_lengths(rng, B, T):
    """B sequence lengths in 1 .. T, longest first, the first one T (the batch's padded length)."""
    lengths = np.sort(rng.integers(1, T + 1, B))[::-1].copy()
    lengths[0] = T
    return lengths


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_layers,bidirectional,bias", CONFIGS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("per_cta", [None, 1, 3, 8])
def test_persistent_matches_reference_and_standard(mode, num_layers, bidirectional, bias, padded, per_cta, units):
    units(per_cta)
    rng = np.random.default_rng(zlib.crc32(repr((mode, num_layers, bidirectional, bias, padded, per_cta)).encode()))
    T, B, I, H = 9, 6, 13, 40
    lengths = np.array([5, 9, 1, 7, 9, 3]) if padded else None
    desc = _desc(mode, I, H, num_layers, bidirectional, bias, "persistent")
    case = _case(desc, T, B, rng)
    got = _run_gpu(desc, *case, lengths=lengths)
    _assert_close(got, _run_reference(desc, *case, lengths=lengths), desc)
    standard = _run_gpu(_desc(mode, I, H, num_layers, bidirectional, bias, "standard"), *case, lengths=lengths)
    _assert_close(got, standard, desc, tol=2e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("B", [1, 37, 64])
def test_persistent_language_model_sizes(mode, B):
    """The sizes the algorithm is for (hidden 512, 35 steps), a batch of 1, an odd one and 64."""
    rng = np.random.default_rng(B)
    desc = _desc(mode, 512, 512, 2, False, True, "persistent")
    case = _case(desc, 35, B, rng)
    got = _run_gpu(desc, *case)
    _assert_close(got, _run_gpu(_desc(mode, 512, 512, 2, False, True, "standard"), *case), desc, tol=1e-4)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_persistent_tf32_matches_standard_tf32(mode):
    """math="tf32": the recurrent product rounds its operands to TF32 (one mma per tile) as the standard
    algorithm's TF32 GEMMs do; both agree to TF32's error, and are within it of float64."""
    rng = np.random.default_rng(17)
    lengths = np.array([12, 3, 12, 7, 1, 9, 12, 5, 11, 2])
    desc = _desc(mode, 24, 64, 2, True, True, "persistent")
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 12, 10, rng)

    def run(algo):
        d = _desc(mode, 24, 64, 2, True, True, algo)
        y, hy, cy, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), d,
                                         seq_lengths=lengths, math="tf32")
        dx, dh0, _, dweights = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
        return _to_host([y, hy, dx, dh0]), _to_host(dweights)

    (outs, dweights), (outs_s, dweights_s) = run("persistent"), run("standard")
    want = _run_reference(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=lengths)
    for got, same, key in zip(outs, outs_s, ("y", "hy", "dx", "dh0")):
        assert rel_err(got, same) <= 2e-3, key
        assert rel_err(got, want[key]) <= 5e-3, key
    for got, same, ref in zip(dweights, dweights_s, want["dweights"]):
        for g, o, w in zip(got, same, ref):
            assert rel_err(g, o) <= 2e-3
            assert rel_err(g, w) <= 5e-3


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_persistent_bf16_matches_cpu_emulation(mode):
    """math="bf16": the recurrent products on bfloat16 mma (m16n8k16), the projections in TF32; the NumPy
    reference rounds the same operands the same way (cpu/rnn.py _mm). Hidden 48: three 16-deep mma steps."""
    rng = np.random.default_rng(23)
    lengths = np.array([10, 4, 10, 1, 7, 9])
    desc = _desc(mode, 20, 48, 2, True, True, "persistent")
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 10, 6, rng)
    y, hy, _, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc,
                                    seq_lengths=lengths, math="bf16")
    dx, dh0, _, dweights = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
    got = _to_host([y, hy, dx, dh0])
    from minidl.primitives.cpu import rnn as cpu_rnn
    y_e, hy_e, _, saved = cpu_rnn.rnn_forward(x, h0, c0, weights, desc, lengths, True, math="bf16")
    dx_e, dh0_e, _, dw_e = cpu_rnn.rnn_backward(dy, dhy, dcy, desc, weights, lengths, saved, math="bf16")
    want = _run_reference(desc, x, h0, c0, weights, dy, dhy, dcy, lengths=lengths)
    for g, e, key in zip(got, (y_e, hy_e, dx_e, dh0_e), ("y", "hy", "dx", "dh0")):
        assert rel_err(g, e) <= 5e-3, key
        assert rel_err(g, want[key]) <= 3e-2, key
    for grads, refs in zip(_to_host(dweights), want["dweights"]):
        for g, w in zip(grads, refs):
            assert rel_err(g, w) <= 3e-2


def test_persistent_bidirectional_wide():
    """Two directions of hidden 640: 10 units per CTA (rows padded to 16), 64 CTAs per direction, ~160 KB
    of weights each."""
    rng = np.random.default_rng(3)
    desc = _desc("lstm", 64, 640, 1, True, True, "persistent")
    lengths = rng.integers(1, 12, size=16)
    case = _case(desc, 11, 16, rng)
    got = _run_gpu(desc, *case, lengths=lengths)
    _assert_close(got, _run_reference(desc, *case, lengths=lengths), desc)


def test_persistent_is_deterministic():
    rng = np.random.default_rng(9)
    desc = _desc("lstm", 40, 128, 2, True, True, "persistent")
    case = _case(desc, 20, 24, rng)
    first, second = _run_gpu(desc, *case), _run_gpu(desc, *case)
    for key in ("y", "hy", "cy", "dx", "dh0", "dc0"):
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    for a, b in zip(first["dweights"], second["dweights"]):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


def test_auto_uses_persistent_where_it_fits():
    from minidl.primitives.cuda.rnn import choose_algorithm

    assert choose_algorithm(RNNDescriptor("lstm", 512, 512, 2), 35, 32)[0] == "persistent"
    assert choose_algorithm(RNNDescriptor("lstm", 8, 37), 35, 32)[0] == "persistent"   # any hidden size
    algorithm, _, reason = choose_algorithm(RNNDescriptor("lstm", 8, 40), 35, 300)
    assert algorithm == "standard" and "batch 300" in reason
    assert choose_algorithm(RNNDescriptor("lstm", 8, 40), 1, 32)[0] == "standard"  # one step
    assert choose_algorithm(RNNDescriptor("lstm", 8, 40, algo="standard"), 35, 32)[0] == "standard"
    algorithm, _, reason = choose_algorithm(RNNDescriptor("lstm", 8, 4096), 35, 32)
    assert algorithm == "standard" and "shared memory" in reason


def test_persistent_that_cannot_run_says_why():
    desc = RNNDescriptor("gru", 8, 40, algo="persistent")
    x, h0, _, weights, *_ = _case(desc, 4, 300, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"rnn_forward: algo='persistent' cannot run this RNN on this GPU: .*"
                                         r"batch 300.*KB of shared memory per CTA.*algo='auto'"):
        rnn_forward(_to_gpu(x), _to_gpu(h0), None, _to_gpu(weights), desc)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("H,math", [(37, "fp32"), (30, "fp32"), (650, "fp32"), (37, "bf16"), (30, "tf32")])
def test_persistent_any_hidden_size(mode, H, math):
    """Hidden sizes that are not multiples of 4 or 8 (odd, 2 mod 4, PyTorch's word-LM 650): the state is
    staged with plain loads and the mma steps run over zero-padded columns."""
    rng = np.random.default_rng(H)
    lengths = np.array([6, 2, 6, 5, 1])
    desc = _desc(mode, 11, H, 2, True, True, "persistent")
    case = _case(desc, 6, 5, rng)
    if math == "fp32":
        got = _run_gpu(desc, *case, lengths=lengths)
        _assert_close(got, _run_reference(desc, *case, lengths=lengths), desc)
        return
    from minidl.primitives.cpu import rnn as cpu_rnn
    x, h0, c0, weights, dy, dhy, dcy = case
    y, _, _, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc,
                                   seq_lengths=lengths, math=math)
    dx, _, _, _ = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
    y_e, _, _, saved = cpu_rnn.rnn_forward(x, h0, c0, weights, desc, lengths, True, math=math)
    dx_e, _, _, _ = cpu_rnn.rnn_backward(dy, dhy, dcy, desc, weights, lengths, saved, math=math)
    assert rel_err(y.get(), y_e) <= 5e-3 and rel_err(dx.get(), dx_e) <= 5e-3


def _replayed_and_eager(run, x, rng):
    """run() captured into a CUDA graph, x refilled with new data, the graph replayed: (the replay's outputs, an
    eager run's on the same data), on the host."""
    import cupy

    import minidl

    graph = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(graph):
        outs = run()
    x[...] = cupy.asarray(rng.standard_normal(x.shape).astype(np.float32))
    graph.replay()
    return _to_host(list(outs)), _to_host(list(run()))


def _assert_capture_replays(desc, rng):
    """Capture forward + backward once, replay on new data: the replay equals an eager run on that data."""
    x, h0, c0, weights, dy, dhy, dcy = (_to_gpu(a) for a in _case(desc, 10, 8, rng))

    def run():
        y, hy, cy, reserve = rnn_forward(x, h0, c0, weights, desc)
        dx, dh0, dc0, dweights = rnn_backward(dy, dhy, dcy, reserve)
        return y, hy, cy, dx, dh0, dc0, dweights

    run()  # compile outside the capture
    replayed, eager = _replayed_and_eager(run, x, rng)
    # (the input projections run on our SGEMM in a capture and on cuBLAS eagerly: fp32 rounding apart)
    for got, want in zip(replayed[:6], eager[:6]):
        assert rel_err(got, want) <= 1e-5
    for got, want in zip(replayed[6], eager[6]):
        for g, w in zip(got, want):
            assert rel_err(g, w) <= 1e-5


def test_persistent_inside_a_cuda_graph():
    """A bidirectional pair of layers (both directions in one launch, the staged backward) in a CUDA graph."""
    _assert_capture_replays(_desc("lstm", 24, 64, 2, True, True, "persistent"), np.random.default_rng(21))


@pytest.mark.parametrize("mode,H", [("lstm", 48), ("gru", 48), ("rnn_tanh", 48), ("lstm", 37), ("gru", 37)])
def test_persistent_bf16_exchange_gives_the_same_gradients(mode, H, monkeypatch):
    """In bf16 the backward stages each step's dgates_h as bfloat16, rounded by the cell that made it
    (DirBackward::xchg), instead of staging the fp32 array and rounding in the product: the same cvt.rn of the same
    values, so the mma sees the same bits; the exchange's chunks are twice as wide (PKC_H), which regroups the fp32
    partial sums of the product (measured 1.1e-5 and 1.8e-5 relative for the LSTM, H 37 and 48). H 48: 16-byte staging; H 37: element by element (the rows are not 16-byte
    multiples); padded, bidirectional, two layers."""
    from minidl.primitives.cuda import rnn_persistent

    rng = np.random.default_rng(5)
    lengths = np.array([9, 3, 9, 6, 1])
    desc = _desc(mode, 16, H, 2, True, True, "persistent")
    x, h0, c0, weights, dy, dhy, dcy = _case(desc, 9, 5, rng)
    results = []
    for exchange in (True, False):
        monkeypatch.setattr(rnn_persistent, "EXCHANGE_BF16", exchange)
        _, _, _, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc,
                                       seq_lengths=lengths, math="bf16")
        dx, dh0, dc0, dweights = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
        results.append(_to_host([dx, dh0] + ([dc0] if dc0 is not None else []))
                       + [g for layer in _to_host(dweights) for g in layer if g is not None])
    assert len(results[0]) == len(results[1])
    for a, b in zip(*results):
        # fp32 sums regrouped, and the few bf16 roundings that moves through the recurrence: ~1e-5 here; a slot read
        # stale or a wrong rounding of the exchange would show at the size of the gradients themselves
        assert rel_err(a, b) <= 1e-4


def _run_math(desc, case, lengths, math):
    x, h0, c0, weights, dy, dhy, dcy = case
    y, hy, cy, reserve = rnn_forward(_to_gpu(x), _to_gpu(h0), _to_gpu(c0), _to_gpu(weights), desc,
                                     seq_lengths=lengths, math=math)
    dx, dh0, dc0, dweights = rnn_backward(_to_gpu(dy), _to_gpu(dhy), _to_gpu(dcy), reserve)
    return dict(y=_to_host(y), hy=_to_host(hy), cy=_to_host(cy), dx=_to_host(dx), dh0=_to_host(dh0),
                dc0=_to_host(dc0), dweights=_to_host(dweights))


@pytest.mark.parametrize("mode", ["lstm", "rnn_tanh", "rnn_relu", "gru"])
@pytest.mark.parametrize("math", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("num_layers,H,padded,per_cta", [(2, 48, False, None), (3, 48, True, 3), (2, 37, True, 1),
                                                         (4, 64, False, 5)])
def test_wavefront_matches_layer_by_layer(mode, math, num_layers, H, padded, per_cta, monkeypatch):
    """Two stacked unidirectional layers in one launch, forward (rnn_persistent.forward_wave: the lower layer's CTAs
    multiply the state they stage at step s by their rows of W_hh and of the upper layer's W_ih and write the upper
    layer's gates_x[s - 1], which its CTAs read at their step s - 1 once every lower CTA is past step s) and backward
    (backward_wave: LSTM and RNN, the upper layer's CTAs multiply the dgates they stage by their columns of W_hh and
    of its W_ih and write the lower layer's dy; the GRU's lower layer waits for the upper layer's time t, then
    multiplies [dgates_h | dgates_x of the layer above] by [W_hh; W_ih above]) against the layers run one launch
    each: the same values to the precision's rounding (fp32: 3xTF32 products in another order; TF32 and bf16: the
    products the wavefront moves into the kernel round their operands to the mode's precision, where the
    layer-by-layer path runs TF32 GEMMs), and within fp64's reference. An odd number of layers leaves one alone; H 37:
    staged element by element; 1, 3 and 5 units per CTA; padded batches (y and the gate gradients are zero past a
    sequence's end)."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "UNITS_WAVE", per_cta)
    rng = np.random.default_rng(zlib.crc32(repr((mode, math, num_layers, H)).encode()))
    T, B = 11, 6
    lengths = np.array([11, 4, 9, 1, 11, 6]) if padded else None
    desc = _desc(mode, 13, H, num_layers, False, True, "persistent")
    case = _case(desc, T, B, rng)
    monkeypatch.setattr(rnn_persistent, "WAVEFRONT", True)   # (also where "auto" would not pick it)
    assert rnn_persistent.wave_plan(mode, B, H, math, backward=True)[0] is not None
    assert rnn_persistent.wave_plan(mode, B, H, math)[0] is not None
    results = {}
    for wave in (True, False):
        monkeypatch.setattr(rnn_persistent, "WAVEFRONT", wave)
        results[wave] = _run_math(desc, case, lengths, math)
    want = _run_reference(desc, *case, lengths=lengths)
    if math == "fp32":
        _assert_close(results[True], results[False], desc, tol=2e-5)
        _assert_close(results[True], want, desc)
        return
    # TF32 / bf16: as close to fp64 as the layer-by-layer path is (its error, or the mode's rounding, whichever is
    # larger, with room for the other rounding order)
    for key in ("y", "hy", "dx", "dh0") + (("cy", "dc0") if mode == "lstm" else ()):
        floor = {"tf32": 2e-3, "bf16": 1e-2}[math]
        assert rel_err(results[True][key], want[key]) <= 2 * max(rel_err(results[False][key], want[key]), floor), key
    for grads, base, refs in zip(results[True]["dweights"], results[False]["dweights"], want["dweights"]):
        for g, b, w in zip(grads, base, refs):
            assert rel_err(g, w) <= 2 * max(rel_err(b, w), {"tf32": 2e-3, "bf16": 1e-2}[math])


def test_wavefront_is_deterministic_and_capturable(monkeypatch):
    """Run to run the same bits; inside a CUDA graph, a replay on new data equals an eager run on it. (WAVEFRONT =
    True: the wavefront wherever it fits, whatever "auto" would pick.)"""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "WAVEFRONT", True)
    rng = np.random.default_rng(31)
    desc = _desc("lstm", 32, 64, 2, False, True, "persistent")
    assert all(rnn_persistent.wave_plan("lstm", 8, 64, "bf16", backward=b)[0] is not None for b in (False, True))
    x, h0, c0, weights, dy, dhy, dcy = (_to_gpu(a) for a in _case(desc, 12, 8, rng))

    def run():
        y, hy, cy, reserve = rnn_forward(x, h0, c0, weights, desc, math="bf16")
        dx, dh0, dc0, dweights = rnn_backward(dy, dhy, dcy, reserve)
        return y, hy, cy, dx, dh0, dc0, dweights

    first, second = _to_host(list(run())), _to_host(list(run()))
    for a, b in zip(first[:6], second[:6]):
        np.testing.assert_array_equal(a, b)
    replayed, eager = _replayed_and_eager(run, x, rng)
    for got, want in zip(replayed[:6], eager[:6]):
        assert rel_err(got, want) <= 1e-5


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("math", ["fp32", "bf16"])
@pytest.mark.parametrize("H,B,padded,per_cta", [(48, 6, True, 3), (512, 32, False, None)])
def test_wave_backward_with_256_threads_matches_512(mode, math, H, B, padded, per_cta, monkeypatch):
    """The wavefront's backward from the second compile of the kernels (-DPERSIST_PT=256, 8 warps a CTA:
    backward_threads) against the usual 512 threads: its warps split each step's product into half as many k slices and
    its loops stride by 256, so the same sums in another order (fp32: ~1e-6; bf16: an fp32 gate gradient a last bit
    apart can round to another bfloat16, which the recurrence carries on: the bf16 tolerance of the other tests). A
    staging or reduction loop that assumed 512 threads would leave gradients unwritten (NaN: POISON) or wrong by their
    size. "auto" takes 256 for the bf16 wavefront up to batch 16, 512 elsewhere; each launch's CTA size is checked."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "WAVEFRONT", True)
    monkeypatch.setattr(rnn_persistent, "UNITS_WAVE", per_cta)
    rng = np.random.default_rng(zlib.crc32(repr((mode, math, H, B)).encode()))
    lengths = _padded_lengths(rng, B, 9) if padded else None
    desc = _desc(mode, 16, H, 2, False, True, "persistent")
    case = _case(desc, 9, B, rng)
    assert rnn_persistent.wave_plan(mode, B, H, math, backward=True)[0] is not None
    real_launch, threads = rnn_persistent._launch, []

    def launch(name, blocks, smem, args, n=rnn_persistent.PT):
        threads.append((name, n))
        real_launch(name, blocks, smem, args, n)

    monkeypatch.setattr(rnn_persistent, "_launch", launch)
    results = {}
    for half in (True, False):
        monkeypatch.setattr(rnn_persistent, "HALF_CTA_WAVE_BACKWARD", half)
        threads.clear()
        results[half] = _run_math(desc, case, lengths, math)
        backward = [n for name, n in threads if "backward" in name]
        assert backward == [256 if half else 512], threads
    tol = 2e-5 if math == "fp32" else 5e-3
    _assert_close(results[True], results[False], desc, tol=tol)
    monkeypatch.setattr(rnn_persistent, "HALF_CTA_WAVE_BACKWARD", "auto")
    assert rnn_persistent.backward_threads(B, math, True) == (256 if math == "bf16" and B <= 16 else 512)
    assert rnn_persistent.backward_threads(B, math, False) == 512
    assert [rnn_persistent.backward_threads(b, "bf16", True) for b in (16, 17, 32)] == [256, 512, 512]


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_relu"])
@pytest.mark.parametrize("T", [1, 2])
@pytest.mark.parametrize("math", ["fp32", "bf16"])
def test_wavefront_one_and_two_steps(mode, T, math, monkeypatch):
    """The shortest sequences (algo='persistent' runs them; 'auto' leaves one step to the standard algorithm): the lower
    layer's arrival after its last (and only) step, the backward's first step that is also its last."""
    from minidl.primitives.cuda import rnn_persistent

    rng = np.random.default_rng(T)
    desc = _desc(mode, 9, 32, 2, False, True, "persistent")
    case = _case(desc, T, 5, rng)
    results = {}
    for wave in (True, False):
        monkeypatch.setattr(rnn_persistent, "WAVEFRONT", wave)
        results[wave] = _run_math(desc, case, None, math)
    want = _run_reference(desc, *case)
    tol = 1e-5 if math == "fp32" else 3e-2
    _assert_close(results[True], want, desc, tol=tol)
    if math == "fp32":
        _assert_close(results[True], results[False], desc, tol=2e-5)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("math", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("H,B,bidirectional,padded", [(48, 5, True, True), (64, 37, False, False), (512, 32, False, False)])
def test_partial_sum_backward_matches_the_staged_backward(mode, math, H, B, bidirectional, padded, monkeypatch):
    """The partial-sum backward (each CTA multiplies its own gate gradients by its own rows of W_hh; the CTAs sum each
    other's partial dh) against the staged one (each CTA stages every CTA's gate gradients and multiplies them by its
    columns of W_hh), one launch per layer, 4 or 8 units a CTA. The same products summed in another order: ~1e-6 in
    fp32. In TF32 and bf16 the operands are rounded at every step, and a last-bit difference of an fp32 gate gradient
    can move it across a rounding boundary (one TF32 or bf16 unit, which the recurrence carries on): there the two
    agree to the math's error, as the persistent and standard TF32 paths do (2e-3; measured 2.9e-4 for the vanilla RNN
    at 512 in TF32). A partial read from the wrong slot or CTA, or a missing barrier, shows at the size of the
    gradients. Then: bit for bit run to run."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "WAVEFRONT", False)
    monkeypatch.setattr(rnn_persistent, "UNITS", 8 if H == 512 else 4)
    rng = np.random.default_rng(zlib.crc32(repr((mode, math, H, B)).encode()))
    lengths = _padded_lengths(rng, B, 11) if padded else None
    desc = _desc(mode, 16, H, 2, bidirectional, True, "persistent")
    case = _case(desc, 11, B, rng)
    plans = {}
    results = {}
    for partial in (True, False, True):
        monkeypatch.setattr(rnn_persistent, "PARTIAL_BACKWARD", partial)
        the_plan = rnn_persistent.plan(mode, B, H, desc.num_directions)[0]
        plans[partial] = the_plan.partial is not None and rnn_persistent.use_partial(mode, B, math)
        got = _run_math(desc, case, lengths, math)
        if partial in results:   # the second partial run: the same bits
            for key in ("dx", "dh0", "dc0"):
                if got[key] is not None:
                    np.testing.assert_array_equal(got[key], results[True][key], err_msg=key)
        results[partial] = got
    assert plans == {True: True, False: False}
    tol = {"fp32": 1e-5, "tf32": 2e-3, "bf16": 5e-3}[math]
    for key in ("dx", "dh0", "dc0"):
        if results[True][key] is not None:
            assert rel_err(results[True][key], results[False][key]) <= tol, key
    for a, b in zip(results[True]["dweights"], results[False]["dweights"]):
        for u, v in zip(a, b):
            if u is not None:
                assert rel_err(u, v) <= tol


def test_partial_sum_backward_inside_a_cuda_graph(monkeypatch):
    """Captured once, replayed on new data: equal to an eager run (its two slots of partial sums are allocated at
    capture and reused by every replay). Two layers, fp32: "auto" takes the partial sums, not the wavefront."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "UNITS", 4)
    rng = np.random.default_rng(22)
    desc = _desc("lstm", 24, 64, 2, False, True, "persistent")
    assert rnn_persistent.plan("lstm", 8, 64, 1)[0].partial is not None and rnn_persistent.use_partial("lstm", 8, "fp32")
    assert rnn_persistent.wave_plan("lstm", 8, 64, "fp32", backward=True)[0] is None
    _assert_capture_replays(desc, rng)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
@pytest.mark.parametrize("math", ["fp32", "tf32", "bf16"])
@pytest.mark.parametrize("path,groups,B,bidirectional,padded", [
    ("layer", 2, 7, True, True),      # both directions in one launch, 4 rows and 3 (an uneven split), padded
    ("partial", 3, 37, False, True),  # the partial-sum backward: each group's two slots of partials apart
    ("wave", 2, 6, False, True),      # the wavefront: each group's two layers wait on its own counters
    ("wave", 4, 64, False, False),    # 16 rows a group: one mma row tile
])
def test_batch_groups_match_one_group(mode, math, path, groups, B, bidirectional, padded, monkeypatch):
    """The batch split between independent groups of CTAs (rnn_persistent.batch_groups, forward_groups: each group runs
    its rows with the same weights, its own barrier counters and its own slice of every array) against one group:
    the same values, the sums in another order (a CTA owns more units, so its warps split the product otherwise):
    ~1e-6 in fp32, the math's rounding in TF32 and bf16 (as test_partial_sum_backward_matches_the_staged_backward
    says). A row read from another group, a length or counter of the wrong group, or rows left unwritten (NaN: POISON)
    show at the size of the values. Every launch, forward and backward, is checked to have run `groups` groups."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "WAVEFRONT", path == "wave")
    monkeypatch.setattr(rnn_persistent, "PARTIAL_BACKWARD", path == "partial")
    monkeypatch.setattr(rnn_persistent, "UNITS", 4 if path == "partial" else None)   # (partial sums: units % 4 == 0)
    H, T = 48, 9
    rng = np.random.default_rng(zlib.crc32(repr((mode, math, path, groups, B)).encode()))
    lengths = _padded_lengths(rng, B, T) if padded else None
    desc = _desc(mode, 16, H, 2, bidirectional, True, "persistent")
    case = _case(desc, T, B, rng)
    real_launch, seen = rnn_persistent._launch, []

    def launch(name, blocks, smem, args, n=rnn_persistent.PT):
        seen.append((name, int(args[11]), n))   # (d0, d1, lengths, T, B, H, U, ld, relu, math, wave, nb, barrier)
        real_launch(name, blocks, smem, args, n)

    monkeypatch.setattr(rnn_persistent, "_launch", launch)
    results = {}
    for n in (groups, 1):
        monkeypatch.setattr(rnn_persistent, "BATCH_GROUPS", n)
        monkeypatch.setattr(rnn_persistent, "BATCH_GROUPS_FORWARD", n)
        seen.clear()
        results[n] = _run_math(desc, case, lengths, math)
        assert seen and all(nb == n for _, nb, _ in seen), seen
        # (the forward runs groups in the 256-thread compile)
        assert all(threads == 256 for name, nb, threads in seen if "forward" in name and nb > 1), seen
        if path == "partial":   # (the partial-sum backward did run)
            assert rnn_persistent.use_partial(mode, B, math)
    tol = {"fp32": 2e-5, "tf32": 2e-3, "bf16": 5e-3}[math]
    _assert_close(results[groups], results[1], desc, tol=tol)
    if math == "fp32":
        _assert_close(results[groups], _run_reference(desc, *case, lengths=lengths), desc)


@pytest.mark.parametrize("partial", [False, True])
def test_batch_groups_inside_a_cuda_graph(partial, monkeypatch):
    """Two batch groups in both passes, captured once and replayed on new data: equal to an eager run (the staged
    backward, and the partial-sum one, whose slots are allocated at capture)."""
    from minidl.primitives.cuda import rnn_persistent

    monkeypatch.setattr(rnn_persistent, "BATCH_GROUPS", 2)
    monkeypatch.setattr(rnn_persistent, "BATCH_GROUPS_FORWARD", 2)
    monkeypatch.setattr(rnn_persistent, "PARTIAL_BACKWARD", partial)
    monkeypatch.setattr(rnn_persistent, "UNITS", 4)
    rng = np.random.default_rng(23)
    _assert_capture_replays(_desc("lstm", 24, 64, 2, False, True, "persistent"), rng)


def test_batch_groups_policy(monkeypatch):
    """"auto": groups of 16 rows or more (the wavefront: 32), at most 4; a batch that cannot give every group a row is
    not split."""
    from minidl.primitives.cuda import rnn_persistent

    assert [rnn_persistent.batch_groups(B) for B in (1, 15, 16, 31, 32, 48, 64, 256)] == [1, 1, 1, 1, 2, 3, 4, 4]
    assert [rnn_persistent.batch_groups(B, wave=True) for B in (16, 32, 63, 64, 128)] == [1, 1, 1, 2, 4]
    # (batch 32 .. 63: in a CUDA graph the GRU's backward runs one layer at a time, in groups, not as a wavefront;
    # eagerly, host-bound, the wavefront's one launch stays; the LSTM's wavefront stays in both)
    assert rnn_persistent.wave_plan("lstm", 32, 512, "bf16", backward=True)[0].groups == 1
    assert rnn_persistent.wave_plan("gru", 32, 512, "tf32", backward=True)[0].groups == 1
    with monkeypatch.context() as m:
        m.setattr(rnn_persistent, "_capturing", lambda: True)
        assert rnn_persistent.wave_plan("lstm", 32, 512, "bf16", backward=True)[0].groups == 1
        assert rnn_persistent.wave_plan("gru", 32, 512, "tf32", backward=True)[0] is None
        assert rnn_persistent.wave_plan("lstm", 64, 512, "bf16", backward=True)[0].groups == 2
    assert rnn_persistent.wave_plan("lstm", 64, 512, "bf16", backward=True)[0].groups == 2
    assert rnn_persistent.wave_plan("rnn_tanh", 32, 512, "bf16", backward=True)[0] is not None
    # the forward's wavefront wherever it fits, in every mode and math
    assert all(rnn_persistent.wave_plan(m, 32, 512, math)[0] is not None
               for m in ("lstm", "gru", "rnn_tanh") for math in ("fp32", "tf32", "bf16"))
    # the forward: 2 groups for the GRU in bf16 from batch 64 only
    assert [rnn_persistent.forward_groups(m, B, math) for m, B, math in
            (("gru", 64, "bf16"), ("gru", 32, "bf16"), ("gru", 64, "tf32"), ("lstm", 64, "bf16"))] == [2, 1, 1, 1]
    assert rnn_persistent._group_rows(37, 3) == 13 and rnn_persistent._group_rows(5, 4) is None
    for bad in (0, -2, 1.5, "2", True):   # a forced count that is no count: said at the launcher, naming the switch
        monkeypatch.setattr(rnn_persistent, "BATCH_GROUPS", bad)
        with pytest.raises(ValueError, match="BATCH_GROUPS must be 'auto' or a number of batch groups"):
            rnn_persistent.batch_groups(32)
