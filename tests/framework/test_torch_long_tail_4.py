"""Session 13's additions for real programs, against torch in float64: torch.gradient (uniform and uneven spacing,
both edge orders), as_strided (values and the gradient of overlapping windows), the modified Bessel functions i0 /
i0e / i1 / i1e (through the series and the asymptotic ranges, with gradients), nextafter, frombuffer, chain_matmul,
special.round and torch.compiler's marks."""
import numpy as np
import pytest
import torch

import minidl
from tests.framework.test_torch_long_tail_3 import _compare

RNG = np.random.default_rng(13)
A = RNG.standard_normal((5, 6))
X = np.sort(RNG.random(6)) * 3


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_matches_torch(edge_order):
    _compare(lambda lib, t: lib.gradient(t, edge_order=edge_order), A)
    _compare(lambda lib, t: lib.gradient(t, spacing=[2.0, 0.5], edge_order=edge_order), A)
    _compare(lambda lib, t: lib.gradient(t, spacing=(lib.tensor(X),), dim=1, edge_order=edge_order), A)
    _compare(lambda lib, t: lib.gradient(t, spacing=0.25, dim=0, edge_order=edge_order), A)
    with pytest.raises(RuntimeError, match="at least edge_order\\+1"):
        minidl.gradient(minidl.ones(2), edge_order=2)


@pytest.mark.parametrize("size,stride,offset", [((2, 3), (1, 2), 1), ((3, 3), (4, 1), 0), ((4, 2), (2, 1), 2),
                                                 ((2, 2, 2), (6, 3, 1), 0)])
def test_as_strided_matches_torch(size, stride, offset):
    """Windows that overlap read one element several times: its gradient is their sum."""
    _compare(lambda lib, t: lib.as_strided(t, size, stride, offset), np.arange(12.0).reshape(3, 4) * 0.5)
    with pytest.raises(RuntimeError, match="out of bounds for the 12 elements"):
        minidl.as_strided(minidl.ones(3, 4), (4, 4), (4, 1))


BESSEL_X = np.array([-800.0, -40, -30.5, -7.3, -1, -1e-3, 0, 1e-3, 0.5, 3, 29.99, 30, 31, 100, 700])


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_modified_bessel_functions_match_torch(name):
    """The power series up to |x| = 30 and Hankel's asymptotic series above, to double precision; i0 and i1
    overflow where torch's do (|x| >~ 713), the scaled forms stay finite."""
    x = BESSEL_X if name.endswith("e") else BESSEL_X[np.abs(BESSEL_X) < 700]
    _compare(lambda lib, t: getattr(lib.special, name)(t), x, rtol=1e-12, atol=1e-300)
    if name == "i0":
        _compare(lambda lib, t: lib.i0(t) + t.i0(), x, rtol=1e-12, atol=1e-300)


def test_small_torch_names():
    a, b = minidl.tensor([1.0, 2.0]), minidl.tensor([2.0, 1.0])
    ta, tb = torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])
    assert minidl.nextafter(a, b).tolist() == torch.nextafter(ta, tb).tolist()
    assert a.nextafter(0.0).tolist() == ta.nextafter(torch.tensor(0.0)).tolist()
    buffer = bytearray(np.arange(4, dtype=np.float32).tobytes())
    view = minidl.frombuffer(buffer, dtype=minidl.float32, count=2, offset=4)
    assert view.tolist() == torch.frombuffer(buffer, dtype=torch.float32, count=2, offset=4).tolist() == [1.0, 2.0]
    buffer[4:8] = np.float32(9).tobytes()
    assert view.tolist() == [9.0, 2.0]   # (no copy, as torch's)
    mats = [RNG.standard_normal((3, 3)) for _ in range(3)]
    np.testing.assert_allclose(minidl.chain_matmul(*[minidl.tensor(m) for m in mats]).numpy(),
                               mats[0] @ mats[1] @ mats[2], rtol=1e-12)
    assert minidl.special.round(minidl.tensor([0.5, 1.5, 2.5])).tolist() == [0.0, 2.0, 2.0]
    f = minidl.compiler.disable(lambda x: x + 1)
    assert f(1) == 2 and minidl.compiler.disable()(len)("ab") == 2 and not minidl.compiler.is_compiling()


def test_share_memory_makes_forked_updates_visible():
    """Hogwild: after Module.share_memory(), a process forked afterwards updates the parent's parameters in place
    (torch.multiprocessing); other tensors are not shared."""
    import minidl.multiprocessing as mp

    model = minidl.nn.Linear(3, 2)
    before = model.weight.detach().numpy().copy()
    assert model.share_memory() is model and model.weight.is_shared() and not minidl.ones(2).is_shared()

    def work(m):
        with minidl.no_grad():
            m.weight.add_(1.0)

    process = mp.Process(target=work, args=(model,))
    process.start()
    process.join()
    np.testing.assert_allclose(model.weight.detach().numpy(), before + 1.0)
    assert not any(getattr(minidl.ones(1), name) for name in ("is_xpu", "is_mps", "is_quantized", "is_mkldnn"))


def test_fake_data_and_models_by_name_through_the_runner(tmp_path):
    """The ImageNet example's --dummy path: torchvision.datasets.FakeData (the same item on every read) through a
    DataLoader, and a model picked from `models.__dict__` by name."""
    from minidl.vision.datasets import FakeData

    data = FakeData(size=4, image_size=(3, 8, 8), num_classes=5)
    (img, label), (again, label2) = data[1], data[1]
    assert img.shape == (8, 8, 3) and img.dtype == np.uint8 and np.array_equal(img, again) and label == label2 < 5
    with pytest.raises(IndexError):
        data[4]
    from tests.framework.test_torch_long_tail import _through_runner

    out = _through_runner(
        tmp_path,
        "import torch, torchvision.models as models, torchvision.datasets as datasets\n"
        "import torchvision.transforms as transforms\n"
        "names = sorted(n for n in models.__dict__ if n.islower() and not n.startswith('__')\n"
        "               and callable(models.__dict__[n]))\n"
        "print('resnet18' in names, 'vgg11' in names)\n"
        "model = models.__dict__['resnet18'](num_classes=5)\n"
        "loader = torch.utils.data.DataLoader(datasets.FakeData(4, (3, 32, 32), 5, transforms.ToTensor()),\n"
        "                                     batch_size=2)\n"
        "for images, target in loader:\n"
        "    print(tuple(model(images).shape), target.dtype == torch.int64)\n").stdout
    assert out.splitlines() == ["True True", "(2, 5) True", "(2, 5) True"]


def test_to_an_int_is_a_gpu_index():
    """model.to(gpu_id) (the DDP tutorial series' Trainer): an int is a GPU index, not a dtype."""
    if not minidl.cuda.is_available():
        with pytest.raises(RuntimeError, match="the CUDA path is not available"):
            minidl.nn.Linear(2, 2).to(0)
        with pytest.raises(RuntimeError, match="the CUDA path is not available"):
            minidl.ones(2).to(0)
    else:
        assert str(minidl.ones(2).to(0).device) == "cuda:0"
        assert str(minidl.nn.Linear(2, 2).to(0).weight.device) == "cuda:0"
    assert minidl.ones(2).to(minidl.float64).dtype == np.float64


def test_multinomial_of_an_empty_distribution_says_so():
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size\\(-1\\)"):
        minidl.multinomial(minidl.ones(0), 1)
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size\\(-1\\)"):
        torch.multinomial(torch.ones(0), 1)


INPLACE = ["sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "log2", "log10", "floor", "ceil", "trunc", "frac",
           "sign", "round", "square", "reciprocal", "rsqrt", "log1p", "expm1", "erf", "erfc", "logit"]


@pytest.mark.parametrize("name", INPLACE)
def test_derived_inplace_ops_match_torch_with_gradients(name):
    """t.<op>_() changes t in place as t.<op>() computes it, recorded on the tape (the gradient reaches the leaf
    through it), and refuses an integer tensor where the result is a float."""
    x = np.array([0.2, 0.45, 0.7])
    got = []
    for lib in (minidl, torch):
        leaf = lib.tensor(x, requires_grad=True)
        y = leaf * 1.0
        assert getattr(y, f"{name}_")() is y
        (y * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        got.append((y.detach().numpy(), leaf.grad.numpy()))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-12)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-12, atol=1e-12)


def test_binary_inplace_ops_dunders_and_small_tensor_methods_match_torch():
    a, b = np.array([-1.5, 0.3, 2.7]), np.array([0.5, -2.0, 1.0])
    for method in ("atan2_", "hypot_", "remainder_", "fmod_", "copysign_", "clamp_min_", "clamp_max_"):
        other = 0.5 if method.startswith("clamp") else None
        ours = getattr(minidl.tensor(a), method)(other if other is not None else minidl.tensor(b))
        theirs = getattr(torch.tensor(a), method)(other if other is not None else torch.tensor(b))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, err_msg=method)
    i = np.array([2, 3, 5])
    for expr in (lambda L, t: abs(L.tensor(a)), lambda L, t: 7 % t, lambda L, t: 7 // t, lambda L, t: t ^ 6,
                 lambda L, t: 6 ^ t, lambda L, t: t << 1, lambda L, t: 1 << t, lambda L, t: t >> 1, lambda L, t: 3 & t,
                 lambda L, t: 3 | t, lambda L, t: L.bitwise_xor(t, L.tensor([1, 1, 1]))):
        np.testing.assert_array_equal(expr(minidl, minidl.tensor(i)).numpy(), expr(torch, torch.tensor(i)).numpy())
    m, tm = minidl.arange(6.0), torch.arange(6.0)
    np.testing.assert_array_equal(m.resize_(2, 2).numpy(), tm.resize_(2, 2).numpy())
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        minidl.ones(2, requires_grad=True).resize_(3)
    assert minidl.tensor([1.0, 2.0]).apply_(lambda v: v * 10).tolist() == [10.0, 20.0]
    assert minidl.tensor([1.0, 2.0]).map_(minidl.tensor([3.0, 4.0]), lambda x, y: x + y).tolist() == [4.0, 6.0]
    assert minidl.ones(2, 3).H.shape == (3, 2) and minidl.ones(4, 2, 3).mH.shape == (4, 3, 2)
    assert minidl.ones(1).record_stream(None) is None
    with pytest.raises(RuntimeError, match="CPU and CUDA GPUs only"):
        minidl.nn.Linear(2, 2).xpu()


def test_default_tensor_type_and_deterministic_debug_mode():
    try:
        minidl.set_default_tensor_type("torch.DoubleTensor")
        assert minidl.zeros(1).dtype == np.float64
        with pytest.raises(TypeError, match="only floating-point types"):
            minidl.set_default_tensor_type("torch.LongTensor")
    finally:
        minidl.set_default_tensor_type("torch.FloatTensor")
    assert minidl.zeros(1).dtype == np.float32
    try:
        minidl.set_deterministic_debug_mode("warn")
        assert minidl.get_deterministic_debug_mode() == 1 and minidl.are_deterministic_algorithms_enabled()
    finally:
        minidl.set_deterministic_debug_mode(0)
    assert not minidl.are_deterministic_algorithms_enabled()
