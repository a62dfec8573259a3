"""nn layers vs torch.nn on the CPU, weights copied through state dicts: outputs, input and parameter
gradients, running statistics; reprs; layout/algo options and minidl.backends; bad-input errors."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import minidl
import minidl.nn as nn
from minidl.primitives import convolution as conv_prims
from tests.conftest import rel_err

TOL = 1e-5


def _load_from_torch(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})


def _run_both(ours, theirs, x_np, seed=0, tol=TOL):
    """Forward and backward through both; compare output, input gradient and parameter gradients."""
    x = minidl.tensor(x_np, requires_grad=True)
    tx = torch.tensor(x_np, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    assert y.shape == tuple(ty.shape)
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) <= tol
    g = np.random.default_rng(seed + 999).standard_normal(y.shape).astype(x_np.dtype)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(x.grad.numpy(), tx.grad.numpy()) <= tol
    torch_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert rel_err(p.grad.numpy(), torch_params[name].grad.numpy()) <= tol, name


def test_linear_and_shape_layers_vs_torch():
    rng = np.random.default_rng(0)
    ours = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.GELU(), nn.Linear(5, 6), nn.Unflatten(1, (2, 3)), nn.Tanh())
    theirs = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5), torch.nn.GELU(), torch.nn.Linear(5, 6),
                                 torch.nn.Unflatten(1, (2, 3)), torch.nn.Tanh())
    _load_from_torch(ours, theirs)
    _run_both(ours, theirs, rng.standard_normal((4, 3, 4)).astype(np.float32))


@pytest.mark.parametrize("pair", [
    (nn.ReLU(), torch.nn.ReLU()), (nn.LeakyReLU(0.3), torch.nn.LeakyReLU(0.3)), (nn.ELU(0.5), torch.nn.ELU(0.5)),
    (nn.Sigmoid(), torch.nn.Sigmoid()), (nn.Tanh(), torch.nn.Tanh()), (nn.GELU("tanh"), torch.nn.GELU("tanh")),
    (nn.Softmax(dim=1), torch.nn.Softmax(dim=1)), (nn.LogSoftmax(dim=-1), torch.nn.LogSoftmax(dim=-1)),
    (nn.Identity(), torch.nn.Identity()),
], ids=lambda p: type(p[0]).__name__ if isinstance(p, tuple) else None)
def test_activation_modules_vs_torch(pair):
    ours, theirs = pair
    _run_both(ours, theirs, np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32))
    assert repr(ours) == repr(theirs)


def test_linear_error_names_in_features_and_shape():
    with pytest.raises(ValueError, match=r"Linear: expected input with last dim in_features=4, got input of shape \(2, 3\)"):
        nn.Linear(4, 2)(minidl.randn(2, 3))


def test_embedding_module_vs_torch():
    ours, theirs = nn.Embedding(7, 3, padding_idx=1), torch.nn.Embedding(7, 3, padding_idx=1)
    _load_from_torch(ours, theirs)
    idx = np.array([[1, 2, 2], [6, 0, 1]])
    y, ty = ours(minidl.tensor(idx)), theirs(torch.tensor(idx))
    assert rel_err(y.detach().numpy(), ty.detach().numpy()) == 0
    g = np.random.default_rng(0).standard_normal(y.shape).astype(np.float32)
    y.backward(minidl.tensor(g))
    ty.backward(torch.tensor(g))
    assert rel_err(ours.weight.grad.numpy(), theirs.weight.grad.numpy()) <= TOL


@settings(max_examples=25, deadline=None)
@given(dims=st.sampled_from([1, 2, 3]), groups=st.sampled_from([1, 3]), k=st.integers(1, 3), stride=st.integers(1, 2),
       padding=st.sampled_from([0, 1, "same"]), bias=st.booleans(), layout=st.sampled_from(["NCHW", "NHWC"]),
       seed=st.integers(0, 10**6))
def test_conv_modules_vs_torch(dims, groups, k, stride, padding, bias, layout, seed):
    if padding == "same" and stride != 1:
        return
    cls = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dims - 1]
    tcls = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)[dims - 1]
    ours = cls(3, 6, k, stride=stride, padding=padding, groups=groups, bias=bias, layout=layout)
    torch.manual_seed(seed)
    theirs = tcls(3, 6, k, stride=stride, padding=padding, groups=groups, bias=bias)
    _load_from_torch(ours, theirs)
    size = 6 if dims < 3 else 4
    x = np.random.default_rng(seed).standard_normal((2, 3) + (size,) * dims).astype(np.float32)
    _run_both(ours, theirs, x, seed=seed)


def test_conv_repr_and_bad_args():
    assert repr(nn.Conv2d(3, 8, 3, stride=2, padding=1, groups=1, bias=False)) == \
        repr(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False))
    assert repr(nn.Conv1d(4, 4, 5, dilation=2, groups=2)) == repr(torch.nn.Conv1d(4, 4, 5, dilation=2, groups=2))
    with pytest.raises(NotImplementedError, match="padding_mode='zeros'"):
        nn.Conv2d(3, 4, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="algo"):
        nn.Conv2d(3, 4, 3, algo="fast_magic")
    conv = nn.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match=r"convolution_forward: input has 5 channels but weight \(4, 3, 3, 3\) expects 3"):
        conv(minidl.randn(1, 5, 8, 8))
    with pytest.raises(ValueError, match="conv2d: expected a 4-D input"):
        conv(minidl.randn(2, 1, 3, 8, 8))


def test_conv_default_init_matches_torch_scheme():
    minidl.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3)
    bound = 1 / np.sqrt(4 * 9)
    w = conv.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound


@pytest.mark.parametrize("algo", ["direct", "im2col_gemm", "winograd"])
def test_conv_algo_option_trains(algo):
    """An explicit algorithm is used for the forward pass; where it has no backward form (winograd's
    filter gradient) that direction falls back to the policy, and the gradients still match."""
    torch.manual_seed(0)
    theirs = torch.nn.Conv2d(3, 4, 3, padding=1)
    ours = nn.Conv2d(3, 4, 3, padding=1, algo=algo)
    _load_from_torch(ours, theirs)
    _run_both(ours, theirs, np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32), tol=3e-5)
    assert f"algo='{algo}'" in repr(ours)


def test_backends_flags_set_the_policy(monkeypatch):
    seen = []
    original = conv_prims._select

    def spy(impl, device_key, direction, problem, policy, workspace_limit):
        # the policy reaches the selection as an argument (None would mean the process-wide one)
        seen.append((direction, policy or conv_prims.get_convolution_policy()[0]))
        return original(impl, device_key, direction, problem, policy, workspace_limit)

    monkeypatch.setattr(conv_prims, "_select", spy)
    x = minidl.randn(1, 2, 5, 5, requires_grad=True)
    conv = nn.Conv2d(2, 3, 3)
    with minidl.backends.cudnn.flags(benchmark=True):
        y = conv(x)
    y.sum().backward()  # backward outside the block still uses the policy the op was recorded with
    assert {p for _, p in seen} == {"prefer_fastest"} and len(seen) == 3
    seen.clear()
    with minidl.backends.cudnn.flags(benchmark=True, deterministic=True):
        conv(x)
    assert seen == [("forward", "deterministic")]
    seen.clear()
    conv(x)
    assert seen == [("forward", conv_prims.get_convolution_policy()[0])] and seen[0][1] == "heuristic"
    assert minidl.backends.cudnn.benchmark is False


def test_backends_cuda_flags_restore_and_cpu_checks_stay_eager():
    flags = minidl.backends.cuda
    assert (flags.use_cublas, flags.check_indices) == (False, False)
    with flags.flags(use_cublas=True, check_indices=True):
        assert (flags.use_cublas, flags.check_indices) == (True, True)
        with pytest.raises(RuntimeError):
            with flags.flags(use_cublas=False):
                assert flags.use_cublas is False
                raise RuntimeError("restored even on error")
        assert flags.use_cublas is True
    assert (flags.use_cublas, flags.check_indices) == (False, False)
    # On the CPU an out-of-range index raises whatever check_indices says: the check costs no sync there.
    import minidl.nn.functional as F
    for check in (False, True):
        with flags.flags(check_indices=check):
            with pytest.raises(ValueError, match="class index 5"):
                F.cross_entropy(minidl.randn(2, 3), minidl.tensor([0, 5]))
            with pytest.raises(ValueError, match="index out of range"):
                F.embedding(minidl.tensor([7]), minidl.randn(4, 2))


@settings(max_examples=25, deadline=None)
@given(dims=st.sampled_from([1, 2, 3]), kind=st.sampled_from(["max", "avg", "avg_ex", "adaptive"]),
       k=st.integers(2, 3), ceil_mode=st.booleans(), seed=st.integers(0, 10**6))
def test_pool_modules_vs_torch(dims, kind, k, ceil_mode, seed):
    i = dims - 1
    if kind == "max":
        ours, theirs = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)[i](k, padding=1, ceil_mode=ceil_mode), \
            (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d)[i](k, padding=1, ceil_mode=ceil_mode)
    elif kind.startswith("avg"):
        inc = kind == "avg"
        ours = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)[i](k, 2, 1, ceil_mode, inc)
        theirs = (torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.AvgPool3d)[i](k, 2, 1, ceil_mode, inc)
    else:
        ours = (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d)[i](k)
        theirs = (torch.nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool2d, torch.nn.AdaptiveAvgPool3d)[i](k)
    size = 7 if dims < 3 else 5
    _run_both(ours, theirs, np.random.default_rng(seed).standard_normal((2, 3) + (size,) * dims).astype(np.float32),
              seed=seed)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("cls,tcls,shape", [
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 4)), (nn.BatchNorm1d, torch.nn.BatchNorm1d, (3, 4, 5)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, (3, 4, 3, 2)), (nn.BatchNorm3d, torch.nn.BatchNorm3d, (2, 4, 2, 3, 2)),
])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_modules_train_then_eval_vs_torch(cls, tcls, shape, momentum):
    rng = np.random.default_rng(0)
    ours, theirs = cls(4, momentum=momentum, eps=1e-3), tcls(4, momentum=momentum, eps=1e-3)
    with torch.no_grad():
        theirs.weight.uniform_(0.5, 1.5)
        theirs.bias.uniform_(-1, 1)
    _load_from_torch(ours, theirs)
    for step in range(3):
        ours.zero_grad()
        theirs.zero_grad()
        _run_both(ours, theirs, (rng.standard_normal(shape) * (step + 1) + step).astype(np.float32), seed=step)
    for name in ("running_mean", "running_var"):
        assert rel_err(getattr(ours, name).numpy(), getattr(theirs, name).numpy()) <= TOL
    assert ours.num_batches_tracked.item() == 3 and ours.num_batches_tracked.dtype == minidl.int64
    ours.eval()
    theirs.eval()
    ours.zero_grad()
    theirs.zero_grad()
    _run_both(ours, theirs, rng.standard_normal(shape).astype(np.float32))
    assert ours.num_batches_tracked.item() == 3
    # PyTorch 2.13's format (older versions print no "bias=")
    assert repr(ours) == f"{cls.__name__}(4, eps=0.001, momentum={momentum}, affine=True, bias=True, track_running_stats=True)"
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("affine,track", [(False, True), (True, False), (False, False)])
def test_batchnorm_options_vs_torch(affine, track):
    ours = nn.BatchNorm2d(3, affine=affine, track_running_stats=track)
    theirs = torch.nn.BatchNorm2d(3, affine=affine, track_running_stats=track)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    _run_both(ours, theirs, x)
    ours.eval()
    theirs.eval()
    _run_both(ours, theirs, x + 1)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_batchnorm_errors():
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected 4D input \(got 3D input"):
        nn.BatchNorm2d(3)(minidl.randn(2, 3, 4))
    with pytest.raises(ValueError, match="has 5 channels, expected num_features=3"):
        nn.BatchNorm1d(3)(minidl.randn(2, 5))


def test_lrn_and_dropout_modules():
    ours, theirs = nn.LocalResponseNorm(3, 1e-2, 0.6, 1.5), torch.nn.LocalResponseNorm(3, 1e-2, 0.6, 1.5)
    _run_both(ours, theirs, np.random.default_rng(0).standard_normal((2, 5, 3, 3)).astype(np.float32))
    assert repr(ours) == repr(theirs)
    d = nn.Dropout(0.25)
    assert repr(d) == repr(torch.nn.Dropout(0.25))
    x = minidl.ones(100, 100)
    frac = (d(x).numpy() == 0).mean()
    assert abs(frac - 0.25) < 0.02
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())


def test_small_cnn_state_dict_from_torch_and_training_step():
    """A small CNN with every layer family: a PyTorch state dict loads and gives the same loss and
    gradients; the model also converts to float64 in place."""
    def build(m):
        # (no bias before batch norm: its gradient is exactly 0, so only rounding noise would be compared)
        return m.Sequential(m.Conv2d(3, 4, 3, padding=1, bias=False), m.BatchNorm2d(4), m.ReLU(), m.MaxPool2d(2),
                            m.Conv2d(4, 6, 3), m.AdaptiveAvgPool2d(1), m.Flatten(), m.Linear(6, 5))

    torch.manual_seed(0)
    theirs, ours = build(torch.nn), build(nn)
    _load_from_torch(ours, theirs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    t = rng.integers(0, 5, 4)
    loss = nn.CrossEntropyLoss()(ours(minidl.tensor(x)), minidl.tensor(t))
    tloss = torch.nn.CrossEntropyLoss()(theirs(torch.tensor(x)), torch.tensor(t))
    assert abs(loss.item() - tloss.item()) <= TOL * abs(tloss.item())
    loss.backward()
    tloss.backward()
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert rel_err(p.grad.numpy(), tp[name].grad.numpy()) <= 2e-5, name
    ours.double()
    assert ours(minidl.tensor(x, dtype=minidl.float64)).dtype == minidl.float64


@pytest.mark.gpu
def test_models_on_cuda_match_cpu():
    """The same models moved with .to('cuda') (in place) run our CUDA kernels and give the CPU's
    outputs and gradients (GPU tolerance 1e-4)."""
    minidl.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.LocalResponseNorm(3),
                        nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, layout="NHWC"), nn.AvgPool2d(2, 1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5), nn.LogSoftmax(dim=1))
    lstm = nn.LSTM(4, 6, num_layers=2, bidirectional=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 9, 9)).astype(np.float32)
    seq = rng.standard_normal((5, 3, 4)).astype(np.float32)
    t = rng.integers(0, 5, 4)

    def run(device):
        for m in (cnn, lstm):
            m.zero_grad()
            m.to(device)
        loss = nn.NLLLoss()(cnn(minidl.tensor(x, device=device)), minidl.tensor(t, device=device))
        y, (h, c) = lstm(minidl.tensor(seq, device=device))
        loss = loss + (y * y).mean() + h.sum() + nn.CrossEntropyLoss()(y.reshape(-1, 12)[:, :5],
                                                                      minidl.tensor(np.arange(15) % 5, device=device))
        loss.backward()
        grads = {n: p.grad.cpu().numpy().copy() for m in (cnn, lstm) for n, p in m.named_parameters()}
        return loss.cpu().item(), grads

    cnn_state = {k: v.numpy().copy() for k, v in cnn.state_dict().items()}
    loss_cpu, grads_cpu = run("cpu")
    cnn.load_state_dict(cnn_state)  # undo the running-stat update of the first pass
    with minidl.backends.cudnn.flags(allow_tf32=False):  # compare true fp32 math at 1e-4 (TF32: ~1e-3)
        loss_gpu, grads_gpu = run("cuda")
    assert all(p.is_cuda for p in cnn.parameters())
    assert abs(loss_cpu - loss_gpu) <= 1e-4 * abs(loss_cpu)
    for name in grads_cpu:
        assert rel_err(grads_gpu[name], grads_cpu[name]) <= 1e-4, name
