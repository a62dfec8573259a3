"""Dropout: Philox4x32-10 known answers, the element -> counter mapping, statistics, scaling, errors."""
import numpy as np
import pytest
import torch

from minidl.primitives import dropout_backward, dropout_forward, dropout_mask, philox4x32

F32 = 0xFFFFFFFF

# Random123's published known-answer vectors for philox4x32 with 10 rounds (kat_vectors).
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((F32, F32, F32, F32), (F32, F32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX_KAT)
def test_philox_known_answers(counter, key, expected):
    words = philox4x32(counter, key)
    assert all(w.dtype == np.uint32 for w in words)
    assert tuple(int(w) for w in words) == expected


def test_philox_vectorised_matches_scalar_calls():
    rng = np.random.default_rng(1)
    counters = [rng.integers(0, 2**32, size=7, dtype=np.uint64) for _ in range(4)]
    key = (0x12345678, 0x9ABCDEF0)
    words = philox4x32(counters, key)
    for j in range(7):
        scalar = philox4x32([int(c[j]) for c in counters], key)
        assert tuple(int(w[j]) for w in words) == tuple(int(s) for s in scalar)


@pytest.mark.parametrize("offset", [0, 3, 2**33 + 5])
def test_element_to_counter_mapping(offset):
    # Element i (offset + flat index) uses word (i & 3) of Philox((lo32(i>>2), hi32(i>>2), 0, 0), (lo, hi seed)).
    seed = 0x0123456789ABCDEF
    p = 0.4
    mask = dropout_mask((3, 7), p, seed, offset)
    flat = mask.ravel()
    for j in range(flat.size):
        i = offset + j
        block = i >> 2
        word = philox4x32((block & F32, block >> 32, 0, 0), (seed & F32, seed >> 32))[i & 3]
        assert flat[j] == ((int(word) >> 8) * 2.0**-24 >= p)


def test_offset_continues_the_stream():
    whole = dropout_mask((10, 13), 0.5, seed=99)
    part = dropout_mask((5, 6), 0.5, seed=99, offset=17)
    np.testing.assert_array_equal(part.ravel(), whole.ravel()[17:47])
    assert not np.array_equal(dropout_mask((130,), 0.5, seed=100), whole.ravel())


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_fraction_and_pair_independence(p):
    n = 200_003
    keep = dropout_mask((n,), p, seed=2024, offset=11)
    q = 1 - p
    sigma = np.sqrt(q * (1 - q) / n)
    assert abs(keep.mean() - q) < 5 * sigma
    # Neighbours share a Philox call: their decisions must still be independent.
    both = np.mean(keep[:-1] & keep[1:])
    sigma_pair = np.sqrt(q * q * (1 - q * q) / n)
    assert abs(both - q * q) < 6 * sigma_pair


def test_matches_torch_dropout_statistics():
    # torch draws from another generator, so compare what the two must share: the kept fraction
    # (within sampling error of each other) and the survivors' scale 1 / (1 - p).
    p = 0.3
    x = np.random.default_rng(0).standard_normal((300, 400)).astype(np.float32) + 3.0
    y = dropout_forward(x, p, seed=5)
    y_ref = torch.nn.functional.dropout(torch.tensor(x), p, training=True).numpy()
    kept, kept_ref = y != 0, y_ref != 0
    assert abs(kept.mean() - kept_ref.mean()) < 6 * np.sqrt(2 * p * (1 - p) / x.size)
    np.testing.assert_allclose(y[kept] / x[kept], 1 / (1 - p), rtol=1e-6)
    np.testing.assert_allclose(y_ref[kept_ref] / x[kept_ref], 1 / (1 - p), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_and_backward_use_the_same_mask(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5, 6)).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    p, seed, offset = 0.35, 777, 1000
    keep = dropout_mask(x.shape, p, seed, offset)
    assert 0 < keep.sum() < keep.size
    y = dropout_forward(x, p, seed, offset=offset)
    dx = dropout_backward(dy, p, seed, offset=offset)
    assert y.dtype == dtype and dx.dtype == dtype
    scale = dtype(1 / (1 - p))
    np.testing.assert_array_equal(y, np.where(keep, x * scale, 0))
    np.testing.assert_array_equal(dx, np.where(keep, dy * scale, 0))
    # Different offsets give different masks.
    assert not np.array_equal(dropout_forward(x, p, seed, offset=offset + x.size) != 0, keep)


def test_p_zero_and_one():
    x = np.random.default_rng(4).standard_normal((3, 4))
    y = dropout_forward(x, 0.0, seed=1)
    np.testing.assert_array_equal(y, x)
    assert y is not x
    np.testing.assert_array_equal(dropout_forward(x, 1.0, seed=1), np.zeros_like(x))
    np.testing.assert_array_equal(dropout_backward(x, 1.0, seed=1), np.zeros_like(x))
    assert dropout_mask((5,), 0.0, seed=1).all() and not dropout_mask((5,), 1.0, seed=1).any()


def test_errors():
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ValueError, match=r"dropout_forward: p \(the drop probability\) must be in \[0, 1\], got 1.5"):
        dropout_forward(x, 1.5, seed=0)
    with pytest.raises(ValueError, match=r"dropout_backward: p .* got -0.1"):
        dropout_backward(x, -0.1, seed=0)
    with pytest.raises(ValueError, match=r"dropout_forward: seed must be in \[0, 2\*\*64\)"):
        dropout_forward(x, 0.5, seed=-1)
    with pytest.raises(TypeError, match="dropout_forward: seed must be an int, got float"):
        dropout_forward(x, 0.5, seed=1.0)
    with pytest.raises(ValueError, match=r"dropout_mask: offset must be in \[0, 2\*\*64\)"):
        dropout_mask((3,), 0.5, seed=1, offset=-4)
    with pytest.raises(TypeError, match="dropout_forward: x must be float32 or float64, got int64"):
        dropout_forward(np.ones(3, dtype=np.int64), 0.5, seed=0)
    with pytest.raises(ValueError, match="philox4x32: needs 4 counter words and 2 key words"):
        philox4x32((0, 0, 0), (0, 0))


def test_philox_uniform_and_normal_are_the_stream_dropout_draws_from():
    """philox_uniform gives u = (word >> 8) * 2^-24 of each index: dropout keeps exactly where u >= p; a draw at an
    offset is the slice of a longer draw; a (seed, offset) state array gives the draw at that offset; the moments are
    right (uniform mean 1/2, variance 1/12; normal mean 0, variance 1, within a few standard errors)."""
    from minidl.primitives import philox_bits, philox_normal, philox_uniform

    u = philox_uniform((50,), 9, offset=8, dtype=np.float64)
    assert np.array_equal((philox_bits((50,), 9, offset=8) >> 8) * 2.0**-24, u)
    assert np.array_equal(dropout_mask((50,), 0.3, 9, offset=8), u >= 0.3)
    for draw in (philox_uniform, philox_normal):
        long = draw((40,), 5, offset=4)
        assert np.array_equal(draw((10,), 5, offset=10), long[6:16])
        assert np.array_equal(draw((2, 4), np.array([5, 4], dtype=np.uint64)), long[:8].reshape(2, 4))
        assert draw((3, 0), 1).shape == (3, 0) and draw((), 1).shape == ()
    big_u, big_z = philox_uniform((200_000,), 11), philox_normal((200_000,), 11, dtype=np.float64)
    assert big_u.dtype == np.float32 and 0 <= big_u.min() and big_u.max() < 1
    assert abs(big_u.mean() - 0.5) < 0.005 and abs(big_u.var() - 1 / 12) < 0.002
    assert abs(big_z.mean()) < 0.01 and abs(big_z.var() - 1) < 0.01 and big_z.dtype == np.float64
    with pytest.raises(TypeError, match="philox_normal: dtype must be float32 or float64"):
        philox_normal((3,), 1, dtype=np.float16)
    with pytest.raises(ValueError, match="philox_uniform: shape must not have negative sizes"):
        philox_uniform((-1,), 1)


@pytest.mark.parametrize("n", [0, 5, 16, 1001])
def test_claiming_forward_is_philox_advance_then_dropout(n):
    """claim=True takes the generator state itself: it claims x.size counters as philox_advance would (returning
    them, for the backward) and draws from them; the state moves on by x.size rounded up to 4."""
    from minidl.primitives import philox_advance

    x = np.random.default_rng(5).standard_normal(n).astype(np.float32) + 3
    state = np.array([0xABCDEF, 1236], dtype=np.uint64)   # an offset that is not a multiple of 4: what is claimed
    reference_state = state.copy()
    y, claimed = dropout_forward(x, 0.3, state, claim=True)
    expected_claim = philox_advance(reference_state, n)
    np.testing.assert_array_equal(claimed, expected_claim)
    np.testing.assert_array_equal(state, reference_state)
    assert int(state[1]) == 1236 + ((n + 3) & ~3)
    np.testing.assert_array_equal(y, dropout_forward(x, 0.3, expected_claim))
    np.testing.assert_array_equal(dropout_backward(np.ones_like(x), 0.3, claimed) != 0, y != 0)


def test_claiming_needs_a_state_and_offset_zero():
    x = np.ones(4, dtype=np.float32)
    with pytest.raises(ValueError, match="dropout_forward: claim=True takes the generator state"):
        dropout_forward(x, 0.5, 7, claim=True)
    with pytest.raises(ValueError, match="dropout_forward: claim=True takes the generator state .* offset 3"):
        dropout_forward(x, 0.5, np.zeros(2, dtype=np.uint64), offset=3, claim=True)
