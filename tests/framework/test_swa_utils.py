"""minidl.optim.swa_utils against torch.optim.swa_utils: the same model trained by both frameworks,
averaged every step by both, must give the same averaged weights and buffers, and update_bn the same
batch-norm statistics."""
import numpy as np
import pytest
import torch

import minidl
import minidl.nn as nn
from minidl.optim import swa_utils
from tests.conftest import DEVICES, rel_err

STEPS = 12


def make_pair(device="cpu"):
    """A small conv-BN-linear net in both frameworks, with the same weights."""
    rng = np.random.default_rng(0)
    mine = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 5 * 5, 3))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                 torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 3))
    state = {k: (rng.standard_normal(tuple(v.shape)) * 0.3).astype(np.float32) if v.is_floating_point()
             else v.numpy() for k, v in theirs.state_dict().items()}
    state["1.running_var"] = np.abs(state["1.running_var"]) + 0.5  # a variance
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    mine.load_state_dict(state)
    return mine.to(device), theirs


def batches(n=STEPS):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((6, 2, 5, 5)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(n)]


def train_and_average(make_mine, make_theirs, device="cpu", steps=STEPS, update_every=1):
    """SGD on both nets, averaging after every `update_every` steps; returns the two averaged models."""
    mine, theirs = make_pair(device)
    avg_m, avg_t = make_mine(mine), make_theirs(theirs)
    opt_m = minidl.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
    opt_t = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    for i, (x, y) in enumerate(batches(steps)):
        opt_m.zero_grad()
        minidl.nn.functional.cross_entropy(mine(minidl.tensor(x, device=device)),
                                           minidl.tensor(y, device=device)).backward()
        opt_m.step()
        opt_t.zero_grad()
        torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y)).backward()
        opt_t.step()
        if i % update_every == 0:
            avg_m.update_parameters(mine)
            avg_t.update_parameters(theirs)
    return avg_m, avg_t


def assert_same_state(avg_m, avg_t, tol=2e-5):
    sm, st = avg_m.state_dict(), avg_t.state_dict()
    assert list(sm) == list(st)
    for key in st:
        got, want = sm[key].cpu().numpy(), st[key].numpy()
        if want.dtype.kind in "iu":
            np.testing.assert_array_equal(got, want, err_msg=key)
        else:
            assert rel_err(got, want) < tol, (key, rel_err(got, want))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("use_buffers", [False, True])
def test_ema_matches_torch(device, use_buffers):
    avg_m, avg_t = train_and_average(
        lambda m: swa_utils.AveragedModel(m, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.8),
                                          use_buffers=use_buffers),
        lambda t: torch.optim.swa_utils.AveragedModel(t, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.8),
                                                      use_buffers=use_buffers),
        device=device)
    assert_same_state(avg_m, avg_t)
    assert avg_m._count == STEPS


@pytest.mark.parametrize("use_buffers", [False, True])
def test_swa_mean_matches_torch(use_buffers):
    avg_m, avg_t = train_and_average(lambda m: swa_utils.AveragedModel(m, use_buffers=use_buffers),
                                     lambda t: torch.optim.swa_utils.AveragedModel(t, use_buffers=use_buffers),
                                     update_every=3)
    assert_same_state(avg_m, avg_t)


def test_single_tensor_avg_fn_matches_torch():
    avg_m, avg_t = train_and_average(
        lambda m: swa_utils.AveragedModel(m, avg_fn=swa_utils.get_ema_avg_fn(0.7)),
        lambda t: torch.optim.swa_utils.AveragedModel(t, avg_fn=torch.optim.swa_utils.get_ema_avg_fn(0.7)))
    assert_same_state(avg_m, avg_t)
    avg_m, avg_t = train_and_average(lambda m: swa_utils.AveragedModel(m, avg_fn=swa_utils.get_swa_avg_fn()),
                                     lambda t: torch.optim.swa_utils.AveragedModel(t, avg_fn=torch.optim.swa_utils.get_swa_avg_fn()))
    assert_same_state(avg_m, avg_t)


def test_averaged_model_is_a_copy_and_runs_forward():
    mine, theirs = make_pair()
    avg = swa_utils.AveragedModel(mine, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.5))
    avg.update_parameters(mine)
    x = np.random.default_rng(2).standard_normal((3, 2, 5, 5)).astype(np.float32)
    mine.eval(), avg.eval()
    np.testing.assert_allclose(avg(minidl.tensor(x)).detach().numpy(), mine(minidl.tensor(x)).detach().numpy(), rtol=1e-6)
    with minidl.no_grad():
        mine[4].weight.mul_(0.0)  # the copy does not share memory with the model
    assert np.abs(avg.module[4].weight.detach().numpy()).sum() > 0


def test_state_dict_round_trip_keeps_the_count(tmp_path):
    """A resumed EMA continues with the right count: the first update after loading must average, not copy."""
    mine, _ = make_pair()
    ema = swa_utils.AveragedModel(mine, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.5), use_buffers=True)
    ema.update_parameters(mine)
    ema.update_parameters(mine)
    minidl.save(ema.state_dict(), tmp_path / "ema.mdl")

    fresh = swa_utils.AveragedModel(mine, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.5), use_buffers=True)
    fresh.load_state_dict(minidl.load(tmp_path / "ema.mdl"))
    assert fresh._count == 2 and int(fresh.n_averaged.item()) == 2
    before = fresh.module[4].weight.detach().numpy().copy()
    with minidl.no_grad():
        mine[4].weight.add_(1.0)
    fresh.update_parameters(mine)
    np.testing.assert_allclose(fresh.module[4].weight.detach().numpy(), before + 0.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_update_bn_matches_torch(device):
    mine, theirs = make_pair(device)
    data = [x for x, _ in batches(5)]
    with minidl.no_grad():
        mine[1].running_mean.fill_(3.0)  # stale statistics that update_bn must replace
    swa_utils.update_bn([minidl.tensor(x, device=device) for x in data], mine)
    torch.optim.swa_utils.update_bn([torch.tensor(x) for x in data], theirs)
    for name in ("running_mean", "running_var"):
        got, want = getattr(mine[1], name).cpu().numpy(), getattr(theirs[1], name).detach().numpy()
        assert rel_err(got, want) < 1e-5, name
    assert int(mine[1].num_batches_tracked.item()) == int(theirs[1].num_batches_tracked) == 5
    assert mine[1].momentum == 0.1 and mine.training  # restored


def test_update_bn_takes_tuples_and_a_device():
    mine, _ = make_pair()
    data = [(minidl.tensor(x), minidl.tensor(y)) for x, y in batches(2)]
    swa_utils.update_bn(data, mine, device="cpu")
    assert int(mine[1].num_batches_tracked.item()) == 2


def test_errors_name_the_problem():
    mine, _ = make_pair()
    with pytest.raises(ValueError, match="decay"):
        swa_utils.get_ema_multi_avg_fn(1.5)
    with pytest.raises(ValueError, match="not both"):
        swa_utils.AveragedModel(mine, avg_fn=swa_utils.get_swa_avg_fn(), multi_avg_fn=swa_utils.get_swa_multi_avg_fn())
    with pytest.raises(TypeError, match="Module"):
        swa_utils.AveragedModel(object())
    avg = swa_utils.AveragedModel(mine)
    with pytest.raises(ValueError, match="made from"):
        avg.update_parameters(nn.Linear(2, 2))


@pytest.mark.parametrize("strategy,anneal_epochs", [("cos", 5), ("linear", 3), ("cos", 0)])
def test_swalr_follows_torch_from_the_current_lr_to_swa_lr(strategy, anneal_epochs):
    import torch.optim.swa_utils

    schedules = []
    for lib, SWALR in ((minidl, minidl.optim.swa_utils.SWALR), (torch, torch.optim.swa_utils.SWALR)):
        p, q = lib.nn.Parameter(lib.zeros(2)), lib.nn.Parameter(lib.zeros(2))
        opt = lib.optim.SGD([{"params": [p]}, {"params": [q], "lr": 0.3}], lr=0.1)
        sched = SWALR(opt, swa_lr=[0.05, 0.01], anneal_epochs=anneal_epochs, anneal_strategy=strategy)
        lrs = []
        for _ in range(8):
            opt.step()
            sched.step()
            lrs.append([g["lr"] for g in opt.param_groups])
        schedules.append(np.array(lrs))
    np.testing.assert_allclose(schedules[0], schedules[1], rtol=1e-12)
    assert schedules[0][-1].tolist() == [0.05, 0.01]


def test_swalr_rejects_what_torch_rejects():
    opt = minidl.optim.SGD([minidl.nn.Parameter(minidl.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy must by one of 'cos' or 'linear'"):
        minidl.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_strategy="step")
    with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0"):
        minidl.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=-1)
    with pytest.raises(ValueError, match="swa_lr must have the same length as optimizer.param_groups"):
        minidl.optim.swa_utils.SWALR(opt, swa_lr=[0.05, 0.1])
