"""Issue #16: torchvision-style per-sample transforms and datasets (minidl.vision), DataLoader worker
processes, torchvision-like datasets in minidl's DataLoader; Adadelta and smooth_l1_loss vs torch."""
import pickle

import numpy as np
import pytest
import torch

import minidl
from minidl.data import DataLoader, Dataset, get_worker_info
from minidl.vision import transforms as T

RNG = np.random.default_rng(16)


def test_to_tensor_and_normalize_as_torchvision():
    img = RNG.integers(0, 256, (7, 5, 3), dtype=np.uint8)
    x = T.ToTensor()(img)
    ref = torch.from_numpy(img).permute(2, 0, 1).float() / 255
    assert x.shape == (3, 7, 5) and x.dtype == minidl.float32
    np.testing.assert_allclose(x.numpy(), ref.numpy(), rtol=1e-7)
    grey = T.ToTensor()(img[:, :, 0])
    assert grey.shape == (1, 7, 5)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    y = T.Compose([T.ToTensor(), T.Normalize(mean, std)])(img)
    ref = (ref - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    np.testing.assert_allclose(y.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="ToTensor first"):
        T.Normalize(mean, std)(img)
    with pytest.raises(ValueError, match="3 channels"):
        T.Normalize((0.1, 0.2), (1, 1))(x)


@pytest.mark.parametrize("size", [(9, 4), (3, 11), 6])
def test_resize_matches_interpolate(size):
    img = RNG.standard_normal((2, 7, 8)).astype(np.float32)
    target = size if isinstance(size, tuple) else (6, int(6 * 8 / 7))
    for antialias in (True, False):   # (True: torchvision's default, PIL's resampling)
        out = T.Resize(size, antialias=antialias)(minidl.tensor(img))
        ref = torch.nn.functional.interpolate(torch.tensor(img)[None], size=target, mode="bilinear",
                                              align_corners=False, antialias=antialias)[0]
        np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    near = T.Resize(size, interpolation="nearest")(minidl.tensor(img))
    ref = torch.nn.functional.interpolate(torch.tensor(img)[None], size=target, mode="nearest")[0]
    np.testing.assert_array_equal(near.numpy(), ref.numpy())
    hwc = (RNG.random((7, 8, 3)) * 255).astype(np.uint8)
    assert T.Resize((5, 4))(hwc).shape == (5, 4, 3) and T.Resize((5, 4))(hwc).dtype == np.uint8


def test_random_crop_and_flip():
    img = RNG.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    minidl.manual_seed(0)
    crops = [T.RandomCrop(4, padding=1)(img) for _ in range(60)]
    padded = np.pad(img, ((1, 1), (1, 1), (0, 0)))
    offsets = set()
    for c in crops:
        assert c.shape == (4, 4, 3)
        found = [(i, j) for i in range(5) for j in range(6) if (padded[i:i + 4, j:j + 4] == c).all()]
        assert found
        offsets.update(found)
    assert len(offsets) > 10  # random offsets, not one fixed window
    minidl.manual_seed(0)
    again = [T.RandomCrop(4, padding=1)(img) for _ in range(60)]
    assert all((a == b).all() for a, b in zip(crops, again))  # minidl.manual_seed makes it reproducible
    t = T.ToTensor()(img)
    assert (T.RandomHorizontalFlip(p=1.0)(t).numpy() == t.numpy()[:, :, ::-1]).all()
    assert T.RandomHorizontalFlip(p=0.0)(img) is img
    assert (T.RandomHorizontalFlip(p=1.0)(img) == img[:, ::-1]).all()
    assert T.CenterCrop(2)(t).shape == (3, 2, 2) and T.RandomCrop(4)(t).shape == (3, 4, 4)
    assert T.Lambda(lambda v: v * 2)(3) == 6
    with pytest.raises(ValueError, match="larger than the input"):
        T.RandomCrop(9)(img)
    with pytest.raises(AttributeError, match="ElasticTransform.*TORCH_COMPAT"):
        T.ElasticTransform  # noqa: B018


def _write_idx(path, array):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes() + array.tobytes())


def test_mnist_torchvision_signature_tensors_and_transform(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = RNG.integers(0, 256, (10, 28, 28), dtype=np.uint8)
    _write_idx(raw / "train-images-idx3-ubyte", images)
    _write_idx(raw / "train-labels-idx1-ubyte", np.arange(10, dtype=np.uint8))
    from minidl.vision import datasets

    ds = datasets.MNIST(str(tmp_path), True, T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))]),
                        lambda y: y + 100)
    assert isinstance(ds.data, minidl.Tensor) and ds.data.dtype == minidl.uint8 and ds.data.shape == (10, 28, 28)
    assert isinstance(ds.targets, minidl.Tensor) and ds.targets.dtype == minidl.int64
    x, y = ds[3]
    assert x.shape == (1, 28, 28) and y == 103
    np.testing.assert_allclose(x.numpy()[0], (images[3] / 255 - 0.1307) / 0.3081, rtol=1e-5)
    ds.data, ds.targets = ds.data[:4], ds.targets[:4]  # torchvision programs subset like this
    assert len(ds) == 4
    xb, yb = next(iter(DataLoader(ds, batch_size=4)))
    assert xb.shape == (4, 1, 28, 28) and yb.tolist() == [100, 101, 102, 103]


class Squares(Dataset):
    """A per-sample dataset whose samples draw from the random generators (as augmentations do)."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        info = get_worker_info()
        return (np.full((2,), i, dtype=np.float32), i * i,
                -1 if info is None else info.id, int(minidl.randint(0, 10**9, (1,)).item()))


def _batches(loader):
    return [[t.tolist() for t in b] for b in loader]


def test_workers_give_the_batches_of_num_workers_0():
    plain = DataLoader(Squares(), batch_size=4, shuffle=True, generator=7)
    plain_epochs = [_batches(plain), _batches(plain)]
    assert plain_epochs[0][0][2][0] == -1  # get_worker_info() is None in the main process
    for persistent in (False, True):
        loader = DataLoader(Squares(), batch_size=4, shuffle=True, generator=7, num_workers=3,
                            persistent_workers=persistent, prefetch_factor=1, pin_memory=True)
        for epoch in range(2):  # each epoch: the same samples in the same batches as num_workers=0
            got = _batches(loader)
            assert [b[:2] for b in got] == [b[:2] for b in plain_epochs[epoch]]
            assert {w for b in got for w in b[2]} == {0, 1, 2}


def test_worker_seeds_are_reproducible_and_differ_between_workers():
    runs = [_batches(DataLoader(Squares(), batch_size=2, generator=3, num_workers=2)) for _ in range(2)]
    assert runs[0] == runs[1]
    draws = [d for b in runs[0] for d in b[3]]
    assert len(set(draws)) == len(draws)


def _init(worker_id):
    np.random.seed(1000 + worker_id)


class Failing(Squares):
    def __getitem__(self, i):
        if i == 9:
            raise ValueError("sample 9 is broken")
        return super().__getitem__(i)


def test_worker_errors_and_unpicklable_datasets():
    with pytest.raises(RuntimeError, match="(?s)worker .* failed on batch 2.*sample 9 is broken"):
        list(DataLoader(Failing(), batch_size=4, num_workers=2, worker_init_fn=_init))
    with pytest.raises(RuntimeError, match="(?s)failed on batch 0.*(pickle|Can't get local)"):
        list(DataLoader(Squares(), batch_size=4, num_workers=1, collate_fn=lambda b: (lambda: b)))
    unpicklable = Squares()
    unpicklable.transform = lambda v: v
    with pytest.raises(TypeError, match="the dataset \\(Squares\\) cannot be pickled"):
        list(DataLoader(unpicklable, batch_size=4, num_workers=2, multiprocessing_context="spawn"))
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Squares(), num_workers=-1)
    with pytest.raises(ValueError, match="persistent_workers need num_workers"):
        DataLoader(Squares(), persistent_workers=True)


class TorchvisionLike:
    """What a torchvision dataset looks like to a DataLoader: no minidl base class, samples of torch
    tensors (after a torchvision transform) and PIL-like images (objects with __array_interface__)."""

    class PILLike:
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self._a = a

    def __init__(self):
        self.images = RNG.integers(0, 256, (9, 4, 4), dtype=np.uint8)

    def __len__(self):
        return 9

    def __getitem__(self, i):
        return torch.from_numpy(self.images[i]).float() / 255, self.PILLike(self.images[i]), i


def test_torchvision_like_dataset_in_minidl_dataloader():
    ds = TorchvisionLike()
    x, img, y = next(iter(DataLoader(ds, batch_size=5, sampler=[8, 0, 3, 1, 2, 7])))
    assert isinstance(x, minidl.Tensor) and x.dtype == minidl.float32 and x.shape == (5, 4, 4)
    np.testing.assert_allclose(x.numpy(), ds.images[[8, 0, 3, 1, 2]] / 255, rtol=1e-6)
    assert img.dtype == minidl.uint8 and (img.numpy() == ds.images[[8, 0, 3, 1, 2]]).all() and y.tolist() == [8, 0, 3, 1, 2]
    batches = list(DataLoader(ds, batch_sampler=[[0, 1], [5, 6, 7]]))
    assert [b[2].tolist() for b in batches] == [[0, 1], [5, 6, 7]]


def test_adadelta_and_smooth_l1_as_torch():
    w0 = RNG.standard_normal((4, 3))
    x = RNG.standard_normal((6, 4))
    results = []
    for lib in (minidl, torch):
        w = lib.nn.Parameter(lib.tensor(w0))
        opt = lib.optim.Adadelta([w], lr=0.7, rho=0.8, weight_decay=0.05)
        for _ in range(4):
            opt.zero_grad()
            loss = lib.nn.functional.smooth_l1_loss(lib.tensor(x) @ w, lib.ones(6, 3) * 2, beta=0.7)
            loss.backward()
            opt.step()
        results.append((w.detach().numpy().copy(), loss.item()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    assert pickle.loads(pickle.dumps(minidl.zeros(2).shape)) == (2,)


def test_samplers():
    from minidl.data import (BatchSampler, RandomSampler, SequentialSampler, SubsetRandomSampler,
                             WeightedRandomSampler)

    ds = TorchvisionLike()
    assert list(SequentialSampler(ds)) == list(range(9))
    first = list(RandomSampler(ds, generator=4))
    assert sorted(first) == list(range(9)) and first != list(range(9))
    assert first == list(RandomSampler(ds, generator=4)) and len(RandomSampler(ds, num_samples=20)) == 20
    assert sorted(RandomSampler(ds, num_samples=18))[:4] == [0, 0, 1, 1]
    sub = list(SubsetRandomSampler([1, 5, 7, 8], generator=0))
    assert sorted(sub) == [1, 5, 7, 8]
    w = list(WeightedRandomSampler([0, 0, 1, 3], 400, generator=1))
    assert set(w) == {2, 3} and 0.65 < w.count(3) / 400 < 0.85
    assert list(BatchSampler(SequentialSampler(ds), 4, False)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert len(BatchSampler(SequentialSampler(ds), 4, True)) == 2
    loader = DataLoader(ds, batch_size=2, sampler=SubsetRandomSampler([1, 5, 7], generator=3))
    assert sorted(sum((b[2].tolist() for b in loader), [])) == [1, 5, 7] and len(loader) == 2
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=SequentialSampler(ds), shuffle=True)


class _FailsOnce(Dataset):
    """Item 5 raises while `fail` is set (a file the worker cannot read, say)."""

    def __init__(self):
        self.fail = True

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5 and self.fail:
            raise ValueError("bad item 5")
        return np.float32(i)


def test_persistent_workers_after_a_worker_error_start_fresh_not_hang():
    """The epoch after a worker's error used to wait forever on workers that had been shut down."""
    ds = _FailsOnce()
    loader = DataLoader(ds, batch_size=2, num_workers=2, persistent_workers=True, timeout=0)
    with pytest.raises(RuntimeError, match="bad item 5"):
        list(loader)
    ds.fail = False   # fork: the fresh workers see the fixed dataset
    got = [b.tolist() for b in loader]
    assert got == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


def test_batch_transforms_keep_or_refuse_the_graph():
    """Normalize and RandomHorizontalFlip on a batch that requires grad keep the graph (as tensor ops);
    the augmentations that work on the array refuse instead of cutting it silently."""
    from minidl.data import transforms as BT

    x = minidl.randn(2, 3, 4, 4, requires_grad=True)
    y = BT.Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.5])(x)
    assert y.requires_grad
    y.sum().backward()
    expected = np.broadcast_to((1 / np.array([0.2, 0.25, 0.5]))[None, :, None, None], (2, 3, 4, 4))
    assert np.allclose(x.grad.numpy(), expected)
    x.grad = None
    flipped = BT.RandomHorizontalFlip(p=1.0)(x)
    assert np.array_equal(flipped.detach().numpy(), x.detach().numpy()[..., ::-1])
    (flipped * minidl.arange(4.0)).sum().backward()
    assert np.array_equal(x.grad.numpy()[0, 0, 0], [3.0, 2.0, 1.0, 0.0])
    for transform in (BT.RandomCrop(4, padding=1), BT.Cutout(2)):
        with pytest.raises(RuntimeError, match="requires grad"):
            transform(x)
    assert np.allclose(BT.Normalize([0.5], [0.5])(x.detach()).numpy(), (x.detach().numpy() - 0.5) / 0.5)
