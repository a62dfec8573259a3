"""GPU dropout (kernels/dropout.cu): Philox known answers, and masks bit-identical to the NumPy reference."""
import numpy as np
import pytest

from tests.conftest import rel_err

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def test_philox_known_answers(cp):
    from minidl.primitives.cuda.dropout import philox4x32

    # Random123's known-answer vectors for Philox4x32-10.
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for counter, key, expected in cases:
        words = philox4x32(counter, key)
        assert [int(w) for w in words] == list(expected)


def test_philox_matches_reference_on_random_words(cp):
    from minidl.primitives import philox4x32 as philox_cpu
    from minidl.primitives.cuda.dropout import philox4x32 as philox_gpu

    rng = np.random.default_rng(3)
    words = [rng.integers(0, 2**32, size=257, dtype=np.uint64).astype(np.uint32) for _ in range(6)]
    gpu = philox_gpu(words[:4], words[4:])
    cpu = philox_cpu(words[:4], words[4:])
    for g, c in zip(gpu, cpu):
        np.testing.assert_array_equal(cp.asnumpy(g), np.asarray(c, dtype=np.uint32))


# Sizes not multiples of 4 and offsets that are not either (groups straddling the array ends), an
# offset past 2^32 groups (the counter's high word), p values including the edges.
@pytest.mark.parametrize("shape", [(7, 13), (1000,), (2, 3, 5, 7)])
@pytest.mark.parametrize("offset", [0, 3, 6, 2**34 + 1])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_mask_identical_to_cpu(cp, shape, offset, p):
    from minidl.primitives import dropout_backward, dropout_forward, dropout_mask

    rng = np.random.default_rng(4)
    seed = 0x1234_5678_9ABC_DEF0
    x_host = (rng.random(shape).astype(np.float32) + 0.5)  # never zero, so y == 0 means dropped
    y = dropout_forward(cp.asarray(x_host), p, seed, offset=offset)
    y_cpu = dropout_forward(x_host, p, seed, offset=offset)
    keep = dropout_mask(shape, p, seed, offset)
    np.testing.assert_array_equal(cp.asnumpy(y) != 0, keep)
    assert rel_err(cp.asnumpy(y), y_cpu) <= 1e-6

    dy_host = rng.standard_normal(shape).astype(np.float32)
    dx = dropout_backward(cp.asarray(dy_host), p, seed, offset=offset)
    dx_cpu = dropout_backward(dy_host, p, seed, offset=offset)
    assert rel_err(cp.asnumpy(dx), dx_cpu) <= 1e-6
    if 0 < p < 1:
        np.testing.assert_array_equal(cp.asnumpy(dx) != 0, keep & (dy_host != 0))


def test_unaligned_view_and_keep_fraction(cp):
    from minidl.primitives import dropout_forward, dropout_mask

    n = 1 << 20
    x = cp.ones(n + 1, dtype=cp.float32)[1:]  # not 16-byte aligned: the scalar path
    p = 0.3
    y = dropout_forward(x, p, seed=7, offset=8)
    kept = float((y != 0).mean())
    # Binomial standard deviation sqrt(p(1-p)/n) ~ 4.5e-4: 6 sigma.
    assert abs(kept - (1 - p)) < 6 * np.sqrt(p * (1 - p) / n)
    assert rel_err(cp.asnumpy(y[y != 0]), np.full(int((y != 0).sum()), 1 / (1 - p), np.float32)) <= 1e-6
    np.testing.assert_array_equal(cp.asnumpy(y) != 0, dropout_mask((n,), p, 7, 8))


def test_different_seeds_and_offsets_differ(cp):
    from minidl.primitives import dropout_forward

    x = cp.ones(4096, dtype=cp.float32)
    a = dropout_forward(x, 0.5, seed=1)
    b = dropout_forward(x, 0.5, seed=2)
    c = dropout_forward(x, 0.5, seed=1, offset=4096)
    assert float((a != b).mean()) > 0.3
    assert float((a != c).mean()) > 0.3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("offset", [0, 3, 2**34 + 1])
def test_half_kernels_equal_the_float32_reference_rounded_once(cp, dtype, offset):
    """float16/bfloat16 run in place on the _half kernels (no float32 copies): the CPU reference computes in
    float32 and rounds once; the bits must be the same, forward and backward, with the seed on the host or
    in a device generator state."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import dropout_backward, dropout_forward

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(5)
    x_host = rng.standard_normal((3, 37, 11)).astype(dt)
    seed = 987654321
    y = dropout_forward(cp.asarray(x_host), 0.3, seed, offset=offset)
    y_cpu = dropout_forward(x_host, 0.3, seed, offset=offset)
    assert y.dtype == dt and (cp.asnumpy(y).view(np.uint16) == y_cpu.view(np.uint16)).all()
    dx = dropout_backward(cp.asarray(x_host), 0.3, seed, offset=offset)
    assert (cp.asnumpy(dx).view(np.uint16) == y_cpu.view(np.uint16)).all()   # the same masked scaling
    state = cp.asarray(np.array([seed, offset], dtype=np.uint64))
    y_dev = dropout_forward(cp.asarray(x_host), 0.3, state)
    assert (cp.asnumpy(y_dev).view(np.uint16) == y_cpu.view(np.uint16)).all()
    # one element in (2 bytes off 8-byte alignment): the element-by-element path, the same bits
    flat = cp.asarray(x_host).reshape(-1)[1:]
    assert flat.data.ptr % 8 and flat.flags.c_contiguous
    want = dropout_forward(x_host.reshape(-1)[1:], 0.3, seed, offset=offset)
    assert (cp.asnumpy(dropout_forward(flat, 0.3, seed, offset=offset)).view(np.uint16) == want.view(np.uint16)).all()
    assert dropout_forward(cp.asarray(x_host)[0, 0, 0], 0.3, seed).shape == ()   # 0-d stays 0-d


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_philox_fills_match_the_numpy_reference(cp, dtype):
    """The GPU's uniform draw is the CPU reference's bits; its normal draw agrees to the last bits of log and sin."""
    from minidl import primitives as P

    for offset in (0, 3, 8):
        u = P.philox_uniform((7, 33), 123, offset=offset, dtype=dtype, device="cuda")
        assert np.array_equal(u.get(), P.philox_uniform((7, 33), 123, offset=offset, dtype=dtype))
        z = P.philox_normal((7, 33), 123, offset=offset, dtype=dtype, device="cuda")
        want = P.philox_normal((7, 33), 123, offset=offset, dtype=dtype)
        np.testing.assert_allclose(z.get(), want, rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-5 if dtype == "float32" else 1e-12)
    state = cp.asarray(np.array([123, 8], dtype=np.uint64))
    assert np.array_equal(P.philox_uniform((5,), state).get(), P.philox_uniform((5,), 123, offset=8))
    assert np.array_equal(P.philox_bits((3, 7), state).get(), P.philox_bits((3, 7), 123, offset=8))


def test_gpu_generator_is_philox_its_state_restores_and_a_graph_draws_fresh_numbers(cp):
    """rand / randn on the GPU draw from the device's Philox state: manual_seed repeats them, cuda.get_rng_state /
    set_rng_state restore the stream exactly (dropout's too), cuda.manual_seed reseeds the GPU only, and randn inside
    a captured CUDA graph gives new numbers at each replay (the state advances on the device), the numbers an eager
    run from the same state gives."""
    import minidl

    minidl.manual_seed(4)
    first = minidl.randn(3, 5, device="cuda").cpu().numpy()
    minidl.manual_seed(4)
    assert np.array_equal(minidl.randn(3, 5, device="cuda").cpu().numpy(), first)
    saved = minidl.cuda.get_rng_state()
    assert saved.dtype == minidl.uint8 and tuple(saved.shape) == (16,) and saved.device == minidl.device("cpu")
    def draws():
        return (minidl.rand(4, device="cuda").cpu().numpy(), minidl.randn(6, device="cuda").cpu().numpy(),
                minidl.nn.functional.dropout(minidl.ones(64, device="cuda"), 0.5).cpu().numpy(),
                minidl.randint(3, 10, (50,), device="cuda").cpu().numpy(), minidl.randperm(40, device="cuda").cpu().numpy())

    a = draws()
    minidl.cuda.set_rng_state(saved)
    b = draws()
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert a[3].min() >= 3 and a[3].max() < 10 and sorted(a[4].tolist()) == list(range(40))
    minidl.manual_seed(4)
    cpu_first = minidl.rand(3).numpy()
    minidl.manual_seed(4)
    minidl.cuda.manual_seed(99)   # the GPU's stream only
    assert minidl.cuda.initial_seed() == 99 and minidl.initial_seed() == 4
    assert np.array_equal(minidl.rand(3).numpy(), cpu_first)
    assert not np.array_equal(minidl.randn(3, 5, device="cuda").cpu().numpy(), first)
    with pytest.raises(RuntimeError, match="expected the 16-byte uint8 state"):
        minidl.cuda.set_rng_state(minidl.zeros(3, dtype=minidl.uint8))

    out = minidl.zeros(2, 8, device="cuda")
    minidl.randn(1, device="cuda")   # (the state exists before the capture)
    start = minidl.cuda.get_rng_state()
    g = minidl.cuda.CUDAGraph()
    with minidl.cuda.graph(g):
        out.copy_(minidl.randn(2, 8, device="cuda"))
    replays = []
    for _ in range(2):
        g.replay()
        replays.append(out.cpu().numpy().copy())
    assert not np.array_equal(replays[0], replays[1])
    minidl.cuda.set_rng_state(start)
    eager = [minidl.randn(2, 8, device="cuda").cpu().numpy() for _ in range(2)]
    # (a capture records the launches without running them: the state was still `start` at the first replay)
    np.testing.assert_array_equal(replays[0], eager[0])
    np.testing.assert_array_equal(replays[1], eager[1])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("n", [1, 1001, 300_000])
def test_the_claiming_forward_claims_in_its_launch_as_the_reference_does(cp, dtype, n):
    """dropout_forward(claim=True) on the GPU: the launch itself claims the counters (block 0 stores what it read,
    the last block to finish advances the generator): the claimed state, the generator after, and y's bits equal
    the NumPy reference's; a second call claims the next counters; each call is one launch."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import dropout_forward
    from tests.gpu.launches import kernel_launches

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x_host = (np.random.default_rng(6).random(n) + 0.5).astype(dt)
    state = cp.asarray(np.array([0x5EED, 4], dtype=np.uint64))
    host_state = np.array([0x5EED, 4], dtype=np.uint64)
    for _ in range(2):
        with kernel_launches() as names:
            y, claimed = dropout_forward(cp.asarray(x_host), 0.25, state, claim=True)
        assert len(names) == 1 and names[0].startswith("dropout_forward"), names
        y_ref, claimed_ref = dropout_forward(x_host, 0.25, host_state, claim=True)
        np.testing.assert_array_equal(cp.asnumpy(claimed), claimed_ref)
        np.testing.assert_array_equal(cp.asnumpy(state), host_state)
        view = np.uint32 if dtype == "float32" else np.uint16
        assert y.dtype == dt and (cp.asnumpy(y).view(view) == np.asarray(y_ref).view(view)).all()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_planned_calls_equal_the_reference_aligned_or_not(cp, dtype):
    """The framework's calls (a device state as the seed, offset 0) run from a launch plan per shape: forward and
    backward, on a 16-byte-aligned array and on a view one element in (float32: its float4 flag is decided per
    call), called twice so that the second call runs from the plan; every result equals the NumPy reference."""
    from minidl._dtypes import bfloat16
    from minidl.primitives import dropout_backward, dropout_forward

    dt = bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    view = np.uint32 if dtype == "float32" else np.uint16
    host = (np.random.default_rng(8).random(4097) + 0.5).astype(dt)
    seed_state = np.array([0xC0FFEE, 8], dtype=np.uint64)
    base = cp.asarray(host)
    for x in (base[:4096], base[1:]):   # (the second starts 4 or 2 bytes past a 16-byte boundary)
        assert x.flags.c_contiguous
        x_host = cp.asnumpy(x)
        for _ in range(2):
            y = dropout_forward(x, 0.4, cp.asarray(seed_state))
            dx = dropout_backward(x, 0.4, cp.asarray(seed_state))
            y_ref = dropout_forward(x_host, 0.4, seed_state)
            assert (cp.asnumpy(y).view(view) == np.asarray(y_ref).view(view)).all()
            assert (cp.asnumpy(dx).view(view) == np.asarray(y_ref).view(view)).all()
