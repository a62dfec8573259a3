"""Learning-rate schedules against torch.optim.lr_scheduler: the same lr (and momentum) sequence for
60 steps, state_dict round trips, and argument errors."""
import math
import warnings

import pytest
import torch

import minidl
from minidl import optim
from minidl.optim import lr_scheduler as sched

STEPS = 60


def optimizers(kind="sgd", groups=1):
    """A minidl optimizer and a torch optimizer with the same groups (lr 0.1, 0.05, ...)."""
    def groups_of(make_tensor):
        return [{"params": [make_tensor()], "lr": 0.1 / (i + 1)} for i in range(groups)]

    m_groups = groups_of(lambda: minidl.tensor([1.0, 2.0], requires_grad=True))
    t_groups = groups_of(lambda: torch.tensor([1.0, 2.0], requires_grad=True))
    if kind == "sgd":
        return optim.SGD(m_groups, lr=0.1, momentum=0.9), torch.optim.SGD(t_groups, lr=0.1, momentum=0.9)
    return optim.Adam(m_groups, lr=0.1), torch.optim.Adam(t_groups, lr=0.1)


def lr_sequences(make_m, make_t, kind="sgd", groups=2, steps=STEPS, watch=None):
    """Step both schedulers `steps` times (after an optimizer step, as in training); return what each
    saw: the lr of every group (and the `watch` entry of every group, e.g. momentum) at every step."""
    opt_m, opt_t = optimizers(kind, groups)
    s_m, s_t = make_m(opt_m), make_t(opt_t)
    seen_m, seen_t = [], []
    for _ in range(steps):
        seen_m.append((list(s_m.get_last_lr()), [g.get(watch) for g in opt_m.param_groups]))
        seen_t.append((list(s_t.get_last_lr()), [g.get(watch) for g in opt_t.param_groups]))
        assert [g["lr"] for g in opt_m.param_groups] == s_m.get_last_lr()
        opt_m.step()
        opt_t.step()
        s_m.step()
        s_t.step()
    return seen_m, seen_t


def assert_sequences_equal(seen_m, seen_t, rel=1e-12):
    assert len(seen_m) == len(seen_t)
    for step, ((lr_m, w_m), (lr_t, w_t)) in enumerate(zip(seen_m, seen_t)):
        for a, b in zip(lr_m, lr_t):
            assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-15), (step, lr_m, lr_t)
        for a, b in zip(w_m, w_t):
            a, b = (a[0], b[0]) if isinstance(a, tuple) else (a, b)  # betas: compare beta1
            assert a == b or math.isclose(a, b, rel_tol=rel), (step, w_m, w_t)


def distinct_values(seen):
    return len({round(lr[0], 14) for lr, _ in seen})


CASES = {
    "step": (lambda o: sched.StepLR(o, step_size=7, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 7, 0.5)),
    "multistep": (lambda o: sched.MultiStepLR(o, [5, 12, 12, 40], gamma=0.3),
                  lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [5, 12, 12, 40], 0.3)),
    "exponential": (lambda o: sched.ExponentialLR(o, gamma=0.93), lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.93)),
    "cosine": (lambda o: sched.CosineAnnealingLR(o, T_max=17, eta_min=0.001),
               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=17, eta_min=0.001)),
    "cosine_no_min": (lambda o: sched.CosineAnnealingLR(o, T_max=25),
                      lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=25)),
    "lambda": (lambda o: sched.LambdaLR(o, lambda e: 1.0 / (1 + 0.1 * e)),
               lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + 0.1 * e))),
    "lambda_per_group": (lambda o: sched.LambdaLR(o, [lambda e: 0.95**e, lambda e: min(1.0, (e + 1) / 10)]),
                         lambda o: torch.optim.lr_scheduler.LambdaLR(o, [lambda e: 0.95**e, lambda e: min(1.0, (e + 1) / 10)])),
    "linear": (lambda o: sched.LinearLR(o, start_factor=0.05, end_factor=0.8, total_iters=13),
               lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.05, end_factor=0.8, total_iters=13)),
    "warmup_cosine": (lambda o: sched.SequentialLR(o, [sched.LinearLR(o, 0.01, total_iters=6),
                                                       sched.CosineAnnealingLR(o, T_max=40, eta_min=1e-4)], [6]),
                      lambda o: torch.optim.lr_scheduler.SequentialLR(
                          o, [torch.optim.lr_scheduler.LinearLR(o, 0.01, total_iters=6),
                              torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40, eta_min=1e-4)], [6])),
    "sequential_three": (lambda o: sched.SequentialLR(o, [sched.LinearLR(o, 0.5, total_iters=4), sched.StepLR(o, 5, 0.5),
                                                          sched.ExponentialLR(o, 0.9)], [4, 20]),
                         lambda o: torch.optim.lr_scheduler.SequentialLR(
                             o, [torch.optim.lr_scheduler.LinearLR(o, 0.5, total_iters=4),
                                 torch.optim.lr_scheduler.StepLR(o, 5, 0.5),
                                 torch.optim.lr_scheduler.ExponentialLR(o, 0.9)], [4, 20])),
    "warm_restarts": (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=7, eta_min=0.002),
                      lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=7, eta_min=0.002)),
    "warm_restarts_mult": (lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
                           lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2)),
    "multiplicative": (lambda o: sched.MultiplicativeLR(o, lambda e: 0.97 if e % 3 else 0.9),
                       lambda o: torch.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.97 if e % 3 else 0.9)),
    "polynomial": (lambda o: sched.PolynomialLR(o, total_iters=30, power=2.0),
                   lambda o: torch.optim.lr_scheduler.PolynomialLR(o, total_iters=30, power=2.0)),
    "cyclic": (lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=7),
               lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=7)),
    "cyclic_triangular2": (lambda o: sched.CyclicLR(o, [0.01, 0.02], 0.1, step_size_up=4, step_size_down=9,
                                                    mode="triangular2"),
                           lambda o: torch.optim.lr_scheduler.CyclicLR(o, [0.01, 0.02], 0.1, step_size_up=4,
                                                                       step_size_down=9, mode="triangular2")),
    "cyclic_exp_range": (lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range", gamma=0.97),
                         lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range",
                                                                     gamma=0.97)),
    "chained": (lambda o: sched.ChainedScheduler([sched.ConstantLR(o, factor=0.5, total_iters=8),
                                                  sched.ExponentialLR(o, gamma=0.95)]),
                lambda o: torch.optim.lr_scheduler.ChainedScheduler(
                    [torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=8),
                     torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.95)])),
    "constant_then_cosine": (lambda o: sched.SequentialLR(o, [sched.ConstantLR(o, 0.1, total_iters=5),
                                                              sched.CosineAnnealingLR(o, T_max=40)], [5]),
                             lambda o: torch.optim.lr_scheduler.SequentialLR(
                                 o, [torch.optim.lr_scheduler.ConstantLR(o, 0.1, total_iters=5),
                                     torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40)], [5])),
}


@pytest.mark.parametrize("kind,watch", [("sgd", "momentum"), ("adam", "betas")])
def test_cyclic_lr_cycles_momentum_as_torch(kind, watch):
    seen_m, seen_t = lr_sequences(lambda o: sched.CyclicLR(o, 0.01, 0.1, step_size_up=6, mode="triangular2"),
                                  lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=6,
                                                                              mode="triangular2"),
                                  kind=kind, watch=watch)
    assert len({w[0] if isinstance(w[0], float) else w[0][0] for _, w in seen_m}) >= 3   # the momentum moved
    assert_sequences_equal(seen_m, seen_t)


@pytest.mark.parametrize("T_mult", [1, 2])
def test_warm_restarts_fractional_epochs_match_torch(T_mult):
    """SGDR stepped per batch, as its docs show: scheduler.step(epoch + i / iters)."""
    opt_m, opt_t = optimizers()
    s_m = sched.CosineAnnealingWarmRestarts(opt_m, T_0=2, T_mult=T_mult, eta_min=0.01)
    s_t = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt_t, T_0=2, T_mult=T_mult, eta_min=0.01)
    iters = 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (torch warns about passing an epoch)
        for epoch in range(9):
            for i in range(iters):
                s_m.step(epoch + i / iters)
                s_t.step(epoch + i / iters)
                assert math.isclose(s_m.get_last_lr()[0], s_t.get_last_lr()[0], rel_tol=1e-12), (epoch, i)
    assert s_m.last_epoch == s_t.last_epoch and s_m.T_i == s_t.T_i


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_matches_torch(name):
    seen_m, seen_t = lr_sequences(*CASES[name])
    assert distinct_values(seen_m) >= 3  # the schedule really moved
    assert_sequences_equal(seen_m, seen_t)


ONE_CYCLE = [
    dict(anneal_strategy="cos", three_phase=False),
    dict(anneal_strategy="linear", three_phase=False),
    dict(anneal_strategy="cos", three_phase=True, pct_start=0.25),
    dict(anneal_strategy="linear", three_phase=True),
    dict(anneal_strategy="cos", cycle_momentum=False, div_factor=10.0, final_div_factor=100.0),
]


@pytest.mark.parametrize("opts", ONE_CYCLE, ids=str)
@pytest.mark.parametrize("kind, watch", [("sgd", "momentum"), ("adam", "betas")])
def test_one_cycle_matches_torch_lr_and_momentum(opts, kind, watch):
    seen_m, seen_t = lr_sequences(
        lambda o: sched.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=STEPS, **opts),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=STEPS, **opts),
        kind=kind, watch=watch, steps=STEPS,
    )
    assert_sequences_equal(seen_m, seen_t)
    assert max(lr[0] for lr, _ in seen_m) == pytest.approx(0.5, rel=0.05)
    if opts.get("cycle_momentum", True):
        beta1 = [w[0][0] if kind == "adam" else w[0] for _, w in seen_m]
        assert min(beta1) == pytest.approx(0.85, abs=0.01) and beta1[0] == 0.95


def test_one_cycle_epochs_form_and_stepping_past_the_end():
    opt_m, _ = optimizers()
    s = sched.OneCycleLR(opt_m, max_lr=0.3, epochs=3, steps_per_epoch=4)
    assert s.total_steps == 12
    for _ in range(12):
        s.step()
    with pytest.raises(ValueError, match="total_steps is 12"):
        s.step()


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine", "lambda", "multiplicative", "polynomial",
                                  "cyclic"])
def test_state_dict_round_trip_continues_identically(name, tmp_path):
    make_m, _ = CASES[name]
    opt, _ = optimizers(groups=2)
    s = make_m(opt)
    for _ in range(20):
        opt.step()
        s.step()
    minidl.save({"optimizer": opt.state_dict(), "scheduler": s.state_dict()}, tmp_path / "ckpt")
    expected = []
    for _ in range(25):
        opt.step()
        s.step()
        expected.append(s.get_last_lr())

    ckpt = minidl.load(tmp_path / "ckpt")
    opt2, _ = optimizers(groups=2)
    opt2.load_state_dict(ckpt["optimizer"])
    s2 = make_m(opt2)
    s2.load_state_dict(ckpt["scheduler"])
    assert s2.last_epoch == 20
    got = []
    for _ in range(25):
        opt2.step()
        s2.step()
        got.append(s2.get_last_lr())
    assert got == expected


def test_one_cycle_state_dict_round_trip():
    opt, _ = optimizers("adam", groups=2)
    s = sched.OneCycleLR(opt, max_lr=0.4, total_steps=40, three_phase=True)
    for _ in range(15):
        s.step()
    ckpt = {"optimizer": opt.state_dict(), "scheduler": s.state_dict()}
    rest = []
    for _ in range(20):
        s.step()
        rest.append((s.get_last_lr(), opt.param_groups[0]["betas"]))
    opt2, _ = optimizers("adam", groups=2)
    s2 = sched.OneCycleLR(opt2, max_lr=0.9, total_steps=40)  # different settings: the checkpoint wins
    opt2.load_state_dict(ckpt["optimizer"])
    s2.load_state_dict(ckpt["scheduler"])
    got = []
    for _ in range(20):
        s2.step()
        got.append((s2.get_last_lr(), opt2.param_groups[0]["betas"]))
    assert got == rest


def test_resuming_with_last_epoch_matches_torch():
    # last_epoch >= 0 requires initial_lr in the groups, and the first step jumps to the closed form.
    opt_m, opt_t = optimizers(groups=1)
    for g in opt_m.param_groups + opt_t.param_groups:
        g["initial_lr"] = 0.1
    s_m = sched.CosineAnnealingLR(opt_m, T_max=30, last_epoch=9)
    s_t = torch.optim.lr_scheduler.CosineAnnealingLR(opt_t, T_max=30, last_epoch=9)
    for _ in range(20):
        assert math.isclose(s_m.get_last_lr()[0], s_t.get_last_lr()[0], rel_tol=1e-12)
        opt_t.step()
        s_m.step()
        s_t.step()
    opt_fresh, _ = optimizers(groups=1)
    with pytest.raises(KeyError, match="initial_lr"):
        sched.StepLR(opt_fresh, step_size=3, last_epoch=4)


def test_errors():
    opt, _ = optimizers(groups=2)
    with pytest.raises(TypeError, match="not an Optimizer"):
        sched.StepLR("sgd", step_size=3)
    with pytest.raises(ValueError, match="step_size"):
        sched.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="T_max"):
        sched.CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(ValueError, match="2 lr_lambdas"):
        sched.LambdaLR(opt, [lambda e: 1.0])
    with pytest.raises(ValueError, match="total_steps"):
        sched.OneCycleLR(opt, max_lr=0.1)
    with pytest.raises(ValueError, match="pct_start"):
        sched.OneCycleLR(opt, max_lr=0.1, total_steps=10, pct_start=1.5)
    with pytest.raises(ValueError, match="anneal_strategy"):
        sched.OneCycleLR(opt, max_lr=0.1, total_steps=10, anneal_strategy="exp")
    # a phase of zero steps: PyTorch divides by zero (at once, or at the last step); minidl says why, at once
    for total, pct in ((5, 0.2), (10, 1.0)):
        with pytest.raises(ValueError, match="zero steps long"):
            sched.OneCycleLR(opt, max_lr=0.1, total_steps=total, pct_start=pct)
        with pytest.raises(ZeroDivisionError), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = torch.optim.lr_scheduler.OneCycleLR(
                torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), max_lr=0.1, total_steps=total,
                pct_start=pct)
            for _ in range(total):
                theirs.step()
    with pytest.raises(ValueError, match="one per group"):
        sched.OneCycleLR(opt, max_lr=[0.1, 0.2, 0.3], total_steps=10)
    no_momentum = optim.Optimizer([minidl.tensor([1.0], requires_grad=True)], {"lr": 0.1})
    with pytest.raises(ValueError, match="momentum or betas"):
        sched.OneCycleLR(no_momentum, max_lr=0.1, total_steps=10)


def test_warmup_and_restart_schedules_refuse_bad_arguments():
    opt, _ = optimizers()
    with pytest.raises(ValueError, match=r"LinearLR: start_factor must be in \(0, 1\]"):
        sched.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="LinearLR: total_iters must be a positive integer"):
        sched.LinearLR(opt, total_iters=0)
    a, b = sched.LinearLR(opt, 0.1, total_iters=3), sched.StepLR(opt, 5)
    with pytest.raises(ValueError, match="SequentialLR: expects 1 milestones"):
        sched.SequentialLR(opt, [a, b], milestones=[3, 9])
    other, _ = optimizers()
    with pytest.raises(ValueError, match=r"schedulers\[1\] drives another optimizer"):
        sched.SequentialLR(opt, [a, sched.StepLR(other, 5)], milestones=[3])
    with pytest.raises(ValueError, match="T_0 must be a positive integer"):
        sched.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="T_mult must be an integer >= 1"):
        sched.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=0)
