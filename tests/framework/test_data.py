"""minidl.data: Dataset, DataLoader, random_split, default_collate and batch transforms.

Oracles: torch.utils.data (batch counts, batch contents without shuffle, collate dtypes, split
lengths); per-sample loop references and brute-force searches for the vectorised transforms.
"""
import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
from minidl.data import (ArrayDataset, DataLoader, Dataset, Subset, TensorDataset, default_collate,
                         random_split)
from minidl.data import transforms as T
from tests.conftest import DEVICES, rel_err

SETTINGS = settings(max_examples=30, deadline=None)


class ListDataset(Dataset):
    """A dataset without the whole-array fast path: one Python call per sample."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def _data(n, rng):
    return rng.standard_normal((n, 3, 2)).astype(np.float32), rng.integers(0, 10, size=n)


def _batches(loader):
    return [tuple(t._data for t in batch) for batch in loader]


# ------------------------------------------------------------------------------------------------
# Datasets
# ------------------------------------------------------------------------------------------------


def test_tensor_dataset_items_and_errors(rng):
    x, y = _data(7, rng)
    ds = TensorDataset(minidl.tensor(x), y)
    assert len(ds) == 7
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi, x[3])
    assert yi == y[3]
    with pytest.raises(ValueError, match=r"TensorDataset: .*same first dimension.*\(7, 3, 2\).*\(6,\)"):
        TensorDataset(x, y[:6])
    with pytest.raises(ValueError, match="at least one array"):
        ArrayDataset()


def test_subset_and_nested_subset(rng):
    x, y = _data(20, rng)
    inner = Subset(TensorDataset(x, y), [5, 1, 19, 7, 3, 0])
    outer = Subset(inner, [4, 0, 2])
    np.testing.assert_array_equal(outer[1][0], x[5])
    np.testing.assert_array_equal(outer[2][0], x[19])
    (xb, yb), = _batches(DataLoader(outer, batch_size=3))  # fast path through two index maps
    np.testing.assert_array_equal(xb, x[[3, 5, 19]])
    np.testing.assert_array_equal(yb, y[[3, 5, 19]])
    with pytest.raises(ValueError, match=r"Subset: indices must lie in \[-20, 20\)"):
        Subset(TensorDataset(x, y), [0, 20])


# ------------------------------------------------------------------------------------------------
# DataLoader vs torch
# ------------------------------------------------------------------------------------------------


@SETTINGS
@given(n=st.integers(1, 40), batch_size=st.integers(1, 12), drop_last=st.booleans(), fast=st.booleans())
def test_loader_batches_match_torch_without_shuffle(n, batch_size, drop_last, fast):
    rng = np.random.default_rng(n * 100 + batch_size)
    x, y = _data(n, rng)
    ds = TensorDataset(x, y) if fast else ListDataset(x, y)
    ours = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
    theirs = tud.DataLoader(tud.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                            batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    got = _batches(ours)
    want = [(a.numpy(), b.numpy()) for a, b in theirs]
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)
        assert gx.dtype == np.float32 and gy.dtype == np.int64


@SETTINGS
@given(n=st.integers(1, 50), batch_size=st.integers(1, 9), drop_last=st.booleans(), seed=st.integers(0, 2**32))
def test_shuffle_visits_every_index_once_per_epoch(n, batch_size, drop_last, seed):
    ids = np.arange(n)
    for ds in (TensorDataset(ids), ListDataset(ids, ids)):
        loader = DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=drop_last, generator=seed)
        epochs = []
        for _ in range(2):
            seen = np.concatenate([b[0]._data for b in loader]) if len(loader) else np.zeros(0, int)
            assert all(b[0].shape[0] == batch_size for b in list(loader)[: n // batch_size])
            if drop_last:
                assert seen.size == (n // batch_size) * batch_size and len(np.unique(seen)) == seen.size
            else:
                np.testing.assert_array_equal(np.sort(seen), ids)  # every index exactly once
            epochs.append(seen)
        if n >= 8 and not drop_last:
            assert not np.array_equal(epochs[0], epochs[1]), "each epoch must draw a new order"


def test_shuffle_is_reproducible_and_same_on_both_paths(rng):
    x, y = _data(37, rng)
    fast = lambda g: _batches(DataLoader(TensorDataset(x, y), batch_size=5, shuffle=True, generator=g))  # noqa: E731
    slow = lambda g: _batches(DataLoader(ListDataset(x, y), batch_size=5, shuffle=True, generator=g))  # noqa: E731
    a, b, c, d = fast(123), fast(123), fast(124), slow(123)
    for (ax, ay), (bx, by), (dx, dy) in zip(a, b, d):
        np.testing.assert_array_equal(ax, bx)
        np.testing.assert_array_equal(ay, by)
        np.testing.assert_array_equal(ax, dx)  # the fast path changes speed, not order
        np.testing.assert_array_equal(ay, dy)
    assert not all(np.array_equal(p[1], q[1]) for p, q in zip(a, c))
    # A numpy Generator works too, and continues its stream across epochs.
    loader = DataLoader(TensorDataset(x, y), batch_size=37, shuffle=True, generator=np.random.default_rng(5))
    first, second = (next(iter(loader))[1]._data for _ in range(2))
    ref = np.random.default_rng(5)
    np.testing.assert_array_equal(first, y[ref.permutation(37)])
    np.testing.assert_array_equal(second, y[ref.permutation(37)])


def test_default_generator_follows_minidl_manual_seed(rng):
    x, y = _data(30, rng)
    loader = DataLoader(TensorDataset(x, y), batch_size=30, shuffle=True)
    minidl.manual_seed(11)
    a = next(iter(loader))[1]._data
    b = next(iter(loader))[1]._data
    minidl.manual_seed(11)
    np.testing.assert_array_equal(next(iter(loader))[1]._data, a)
    assert not np.array_equal(a, b)


def test_loader_argument_errors(rng):
    x, y = _data(4, rng)
    with pytest.raises(ValueError, match="DataLoader: batch_size must be a positive int"):
        DataLoader(TensorDataset(x, y), batch_size=0)
    with pytest.raises(TypeError, match="DataLoader: generator must be"):
        DataLoader(TensorDataset(x, y), shuffle=True, generator="seed")


# ------------------------------------------------------------------------------------------------
# Collation
# ------------------------------------------------------------------------------------------------


def test_default_collate_matches_torch_structure_and_dtypes(rng):
    samples = [(rng.standard_normal((2, 3)).astype(np.float32), int(k), float(k) / 3, np.int32(k),
                {"id": k, "v": rng.standard_normal(2)}) for k in range(4)]
    ours = default_collate(samples)
    theirs = tud.default_collate(samples)
    assert isinstance(ours, tuple) and len(ours) == len(theirs)
    for got, want in zip(ours[:4], theirs[:4]):
        np.testing.assert_array_equal(got._data, want.numpy())
    assert ours[1]._data.dtype == np.int64 and ours[3]._data.dtype == np.int64  # labels are int64
    assert ours[2]._data.dtype == np.float64 == theirs[2].numpy().dtype
    assert ours[0]._data.dtype == np.float32
    np.testing.assert_array_equal(ours[4]["id"]._data, theirs[4]["id"].numpy())
    np.testing.assert_array_equal(ours[4]["v"]._data, theirs[4]["v"].numpy())
    assert default_collate([("a", 1), ("b", 2)])[0] == ["a", "b"]


def test_default_collate_errors():
    with pytest.raises(ValueError, match="default_collate: the batch is empty"):
        default_collate([])
    with pytest.raises(ValueError, match=r"default_collate: samples have different shapes \[\(2,\), \(3,\)\]"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(TypeError, match="default_collate: cannot collate samples of type object"):
        default_collate([object(), object()])


def test_custom_collate_fn_gets_the_samples(rng):
    x, y = _data(6, rng)
    calls = []

    def collate(samples):
        calls.append(len(samples))
        return sum(int(s[1]) for s in samples)

    sums = list(DataLoader(TensorDataset(x, y), batch_size=4, collate_fn=collate))
    assert calls == [4, 2] and sums == [int(y[:4].sum()), int(y[4:].sum())]


@pytest.mark.gpu
def test_cuda_loader_copies_dataset_once_and_cuts_batches_on_device(rng):
    import cupy

    x, y = _data(29, rng)
    cpu = _batches(DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=3))
    loader = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True, generator=3, device="cuda")
    assert all(isinstance(a, cupy.ndarray) for a in loader._arrays)  # the one copy, made up front
    gpu = [tuple(t._data for t in b) for b in loader]
    for (cx, cy), (gx, gy) in zip(cpu, gpu):
        assert isinstance(gx, cupy.ndarray) and isinstance(gy, cupy.ndarray)
        np.testing.assert_array_equal(cx, gx.get())
        np.testing.assert_array_equal(cy, gy.get())
    # The general path moves each collated batch instead.
    (gx, gy), = [tuple(t._data for t in b) for b in DataLoader(ListDataset(x, y), batch_size=29, device="cuda")]
    assert isinstance(gx, cupy.ndarray)
    np.testing.assert_array_equal(gx.get(), x)


# ------------------------------------------------------------------------------------------------
# random_split
# ------------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Length of split")  # torch warns about empty splits
@SETTINGS
@given(n=st.integers(1, 60), cuts=st.lists(st.integers(1, 20), min_size=1, max_size=4), seed=st.integers(0, 999))
def test_random_split_fraction_lengths_match_torch(n, cuts, seed):
    fractions = [c / sum(cuts) for c in cuts]
    fractions[-1] = 1.0 - sum(fractions[:-1])
    ours = random_split(TensorDataset(np.arange(n)), fractions, generator=seed)
    theirs = tud.random_split(range(n), fractions, generator=torch.Generator().manual_seed(seed))
    assert [len(s) for s in ours] == [len(s) for s in theirs]
    everything = np.concatenate([s.indices for s in ours])
    np.testing.assert_array_equal(np.sort(everything), np.arange(n))  # disjoint and covering


def test_random_split_ints_reproducible_and_errors():
    ds = TensorDataset(np.arange(10) * 10)
    a, b = random_split(ds, [7, 3], generator=4)
    a2, _ = random_split(ds, [7, 3], generator=4)
    np.testing.assert_array_equal(a.indices, a2.indices)
    assert sorted(list(a.indices) + list(b.indices)) == list(range(10))
    assert [int(a[i][0]) for i in range(7)] == [10 * int(k) for k in a.indices]
    with pytest.raises(ValueError, match=r"random_split: lengths \[7, 4\] sum to 11, but the dataset has 10"):
        random_split(ds, [7, 4])
    with pytest.raises(ValueError, match="random_split: fractions must lie in"):
        random_split(ds, [0.5, 0.6])


# ------------------------------------------------------------------------------------------------
# Transforms
# ------------------------------------------------------------------------------------------------


def _distinct_batch(n, c, h, w, rng):
    """Pixels that are all different, so a crop window identifies its offset."""
    return (rng.permutation(n * c * h * w).reshape(n, c, h, w) + 1).astype(np.float32)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), c=st.integers(1, 3), h=st.integers(3, 9), w=st.integers(3, 9),
       pad=st.integers(0, 3), shrink=st.integers(0, 2), mode=st.sampled_from(["constant", "reflect"]),
       seed=st.integers(0, 10**6))
def test_random_crop_is_a_window_of_the_padded_image(n, c, h, w, pad, shrink, mode, seed):
    if mode == "reflect":
        pad = min(pad, h - 1, w - 1)
    rng = np.random.default_rng(seed)
    x = _distinct_batch(n, c, h, w, rng)
    size = (h - shrink, w - shrink)
    y = T.RandomCrop(size, padding=pad, padding_mode=mode, generator=seed)(x)
    assert y.shape == (n, c) + size and y.dtype == x.dtype
    # Per-sample loop reference: np.pad each image, then find the offset its crop came from.
    for i in range(n):
        padded = np.pad(x[i], ((0, 0), (pad, pad), (pad, pad)), mode=mode)
        offsets = [(t, left) for t in range(padded.shape[1] - size[0] + 1)
                   for left in range(padded.shape[2] - size[1] + 1)
                   if np.array_equal(padded[:, t:t + size[0], left:left + size[1]], y[i])]
        assert offsets, f"sample {i} is not a window of its padded image"
    # Same seed, same crops.
    np.testing.assert_array_equal(T.RandomCrop(size, padding=pad, padding_mode=mode, generator=seed)(x), y)


def test_random_crop_offsets_vary_per_sample_and_cover_the_range(rng):
    x = np.broadcast_to(_distinct_batch(1, 1, 6, 6, rng), (400, 1, 6, 6)).copy()
    y = T.RandomCrop(6, padding=2, generator=0)(x)
    padded = np.pad(x[0, 0], 2)
    offsets = set()
    for i in range(400):
        hits = [(t, l) for t in range(5) for l in range(5) if np.array_equal(padded[t:t + 6, l:l + 6], y[i, 0])]
        offsets.add(hits[0])
    assert len(offsets) == 25  # all (2p + 1)^2 offsets occur, so offsets are per sample and uniform-ish


def test_horizontal_flip_per_sample(rng):
    x = _distinct_batch(500, 2, 3, 4, rng)
    y = T.RandomHorizontalFlip(p=0.3, generator=1)(x)
    flipped = np.array([np.array_equal(y[i], x[i, :, :, ::-1]) for i in range(500)])
    kept = np.array([np.array_equal(y[i], x[i]) for i in range(500)])
    assert np.all(flipped ^ kept)  # each sample is exactly one of the two
    assert 0.22 < flipped.mean() < 0.38
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=0.0)(x), x)
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=1.0)(x), x[..., ::-1])


def test_normalize_and_compose_match_torch(rng):
    x = rng.random((5, 3, 4, 6)).astype(np.float32)
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    y = T.Normalize(mean, std)(x)
    ref = (torch.from_numpy(x) - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    assert y.dtype == np.float32 and rel_err(y, ref.numpy()) <= 1e-6
    u8 = (rng.random((4, 5, 5, 3)) * 255).astype(np.uint8)  # NHWC uint8, as CIFAR10.data
    pipeline = T.Compose([T.ToFloat(channels_last_input=True), T.Normalize(mean, std)])
    want = (torch.from_numpy(u8).permute(0, 3, 1, 2).float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) \
        / torch.tensor(std).view(1, 3, 1, 1)
    assert rel_err(pipeline(u8), want.numpy()) <= 1e-6


def test_transforms_keep_tensors_tensors(rng):
    x = minidl.tensor(_distinct_batch(3, 1, 4, 4, rng))
    y = T.Compose([T.RandomCrop(4, padding=1, generator=0), T.RandomHorizontalFlip(generator=0)])(x)
    assert isinstance(y, minidl.Tensor) and y.shape == (3, 1, 4, 4)


def test_transform_errors(rng):
    with pytest.raises(TypeError, match="Normalize: expects a float32 or float64 batch, got uint8"):
        T.Normalize([0.5], [0.5])(np.zeros((1, 1, 2, 2), np.uint8))
    with pytest.raises(ValueError, match=r"Normalize: 3 means for a batch of shape \(1, 2, 2, 2\)"):
        T.Normalize([0, 0, 0], [1, 1, 1])(np.zeros((1, 2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="Normalize: std must be positive"):
        T.Normalize([0], [0])
    with pytest.raises(ValueError, match=r"RandomCrop: crop \(9, 9\) is larger than the padded image \(6, 6\)"):
        T.RandomCrop(9, padding=1)(np.zeros((1, 1, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"RandomHorizontalFlip: expects a batch of shape \(N, C, H, W\), got shape \(4, 4\)"):
        T.RandomHorizontalFlip()(np.zeros((4, 4), np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_transforms_same_result_on_each_device(device, rng):
    x = _distinct_batch(6, 3, 5, 5, rng)
    pipeline = lambda: T.Compose([T.RandomCrop(5, padding=2, generator=7),  # noqa: E731
                                  T.RandomHorizontalFlip(generator=8), T.Normalize([1, 2, 3], [2, 3, 4])])
    want = pipeline()(x)
    xd = minidl.tensor(x, device=device)
    got = pipeline()(xd)
    assert str(got.device).startswith(device)
    got_host = got._data.get() if device == "cuda" else got._data
    assert rel_err(got_host, want) <= 1e-6


# ------------------------------------------------------------------------------------------------
# Cutout
# ------------------------------------------------------------------------------------------------


def _clipped_square(h, w, size, centre):
    """The (H, W) boolean mask of a size = (sh, sw) square centred at `centre`, clipped to the image:
    rows cy - sh // 2 ... cy - sh // 2 + sh - 1, likewise columns (a per-pixel reference)."""
    (sh, sw), (cy, cx) = size, centre
    mask = np.zeros((h, w), bool)
    for r in range(h):
        for c in range(w):
            mask[r, c] = cy - sh // 2 <= r < cy - sh // 2 + sh and cx - sw // 2 <= c < cx - sw // 2 + sw
    return mask


def _cut_masks(x, y):
    """(N, H, W) masks of the pixels Cutout changed; asserts every channel was cut the same way."""
    changed = y != x
    assert np.array_equal(changed, np.broadcast_to(changed[:, :1], changed.shape)), "channels cut differently"
    return changed[:, 0]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 5), c=st.integers(1, 3), h=st.integers(1, 9), w=st.integers(1, 9),
       sh=st.integers(1, 10), sw=st.integers(1, 10), seed=st.integers(0, 10**6))
def test_cutout_is_a_clipped_square_per_sample(n, c, h, w, sh, sw, seed):
    x = _distinct_batch(n, c, h, w, np.random.default_rng(seed))  # no zero pixel: a 0 marks the cut
    y = T.Cutout((sh, sw), generator=seed)(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(y[y != x], 0)
    masks = _cut_masks(x, y)
    for i in range(n):
        # Brute force: some centre in the image gives exactly this (possibly clipped) square.
        centres = [(cy, cx) for cy in range(h) for cx in range(w)
                   if np.array_equal(_clipped_square(h, w, (sh, sw), (cy, cx)), masks[i])]
        assert centres, f"sample {i}: the cut pixels are not a clipped {sh} x {sw} square"
        rows, cols = np.nonzero(masks[i])
        if rows.min() > 0 and cols.min() > 0 and rows.max() < h - 1 and cols.max() < w - 1:
            assert masks[i].sum() == sh * sw  # off the border: the whole square
    np.testing.assert_array_equal(T.Cutout((sh, sw), generator=seed)(x), y)  # same seed, same squares


def test_cutout_squares_fully_inside_have_full_area_and_border_ones_are_clipped():
    n, h, w, size = 4000, 8, 8, 4
    y = T.Cutout(size, generator=0)(np.ones((n, 2, h, w), np.float32))
    masks = y[:, 0] == 0
    areas = masks.sum(axis=(1, 2))
    on_border = masks[:, 0, :].any(1) | masks[:, -1, :].any(1) | masks[:, :, 0].any(1) | masks[:, :, -1].any(1)
    assert np.all(areas[~on_border] == size * size)  # inside: the whole 4 x 4 square
    # Exact distribution of the area over the 64 equally likely centres, counted by the reference.
    want = {}
    for cy in range(h):
        for cx in range(w):
            area = int(_clipped_square(h, w, (size, size), (cy, cx)).sum())
            want[area] = want.get(area, 0) + 1 / (h * w)
    assert set(np.unique(areas)) == set(want) == {4, 6, 8, 9, 12, 16}  # clipped ones occur, down to 2 x 2
    for area, prob in want.items():
        assert abs(np.mean(areas == area) - prob) < 0.03, (area, np.mean(areas == area), prob)
    assert masks.any(axis=0).all()  # every pixel, corners included, is cut in some sample


def test_cutout_per_sample_independence_and_probability(rng):
    x = np.broadcast_to(_distinct_batch(1, 3, 6, 6, rng), (400, 3, 6, 6)).copy()
    masks = _cut_masks(x, T.Cutout(2, generator=3)(x))
    distinct = {m.tobytes() for m in masks}
    assert len(distinct) == 36  # one square per centre: all 6 x 6 centres occur among identical images
    # p: each sample is cut with probability p, independently.
    cut = _cut_masks(x, T.Cutout(2, p=0.3, generator=4)(x)).any(axis=(1, 2))
    assert 0.22 < cut.mean() < 0.38
    # p=0 leaves the batch untouched (same values, same dtype).
    y = T.Cutout(3, p=0.0, generator=5)(x)
    assert y.dtype == x.dtype and np.array_equal(y, x)
    # A generator passed in continues its stream: the next batch gets new squares.
    cutout = T.Cutout(2, generator=np.random.default_rng(6))
    assert not np.array_equal(cutout(x), cutout(x))


def test_cutout_fill_dtype_and_tensors(rng):
    x = (rng.random((4, 3, 5, 5)) * 200 + 10).astype(np.uint8)
    y = T.Cutout(3, fill=7, generator=0)(x)
    assert y.dtype == np.uint8 and set(np.unique(y[y != x])) <= {7}
    x64 = rng.random((4, 3, 5, 5)) + 1.0
    assert T.Cutout(3, fill=-0.5, generator=0)(x64).dtype == np.float64
    t = minidl.tensor(_distinct_batch(3, 1, 4, 4, rng))
    out = T.Compose([T.RandomCrop(4, padding=1, generator=0), T.Cutout(2, generator=0)])(t)
    assert isinstance(out, minidl.Tensor) and out.shape == (3, 1, 4, 4)
    assert repr(T.Cutout((2, 3), p=0.5)) == "Cutout(size=(2, 3), fill=0, p=0.5)"


def test_cutout_errors():
    for bad in (0, -1, (2,), (2, 0), (1, 2, 3)):
        with pytest.raises(ValueError, match="Cutout: size must be a positive int or"):
            T.Cutout(bad)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"Cutout: p must lie in \[0, 1\]"):
            T.Cutout(2, p=bad)
    for bad in ("0", None, [0, 0, 0], True):
        with pytest.raises(ValueError, match="Cutout: fill must be a real number"):
            T.Cutout(2, fill=bad)
    with pytest.raises(ValueError, match=r"Cutout: expects a batch of shape \(N, C, H, W\), got shape \(3, 4, 4\)"):
        T.Cutout(2)(np.zeros((3, 4, 4), np.float32))
    with pytest.raises(TypeError, match="Cutout: generator must be"):
        T.Cutout(2, generator="seed")


@pytest.mark.parametrize("device", DEVICES)
def test_cutout_same_result_on_each_device(device, rng):
    x = _distinct_batch(6, 3, 7, 7, rng)
    want = T.Cutout(3, p=0.7, generator=9)(x)
    got = T.Cutout(3, p=0.7, generator=9)(minidl.tensor(x, device=device))
    assert str(got.device).startswith(device)
    got_host = got._data.get() if device == "cuda" else got._data
    np.testing.assert_array_equal(got_host, want)
