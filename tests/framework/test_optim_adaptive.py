"""Adagrad, Adamax, NAdam, RAdam, Rprop, ASGD and Adafactor against torch: the same parameters after several steps on the same
loss, for each option, and state dicts with torch's keys."""
import numpy as np
import pytest
import torch

import minidl

CASES = [
    ("Adagrad", {}), ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.2)),
    ("Adagrad", dict(maximize=True)),
    ("Adamax", {}), ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.05)),
    ("NAdam", {}), ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("RAdam", {}), ("RAdam", dict(lr=0.01, weight_decay=0.1)), ("RAdam", dict(weight_decay=0.1, decoupled_weight_decay=True)),
    ("Rprop", {}), ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2))), ("Rprop", dict(maximize=True)),
    ("ASGD", {}), ("ASGD", dict(lr=0.05, lambd=1e-3, alpha=0.5, t0=3, weight_decay=0.01)),
    ("Adafactor", {}), ("Adafactor", dict(lr=0.05, beta2_decay=-0.5, eps=(1e-6, 1e-2), d=1.5, weight_decay=0.1)),
    ("Adafactor", dict(maximize=True)),
]


@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_optimizer_matches_torch(name, kwargs):
    rng = np.random.default_rng(0)
    w0, b0 = rng.standard_normal((4, 3)), rng.standard_normal(3)
    x = rng.standard_normal((6, 4))
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    mw, mb = minidl.tensor(w0, requires_grad=True), minidl.tensor(b0, requires_grad=True)
    topt = getattr(torch.optim, name)([tw, tb], **kwargs)
    mopt = getattr(minidl.optim, name)([mw, mb], **kwargs)
    for _ in range(8):      # RAdam switches from momentum to its adaptive step after a few steps
        topt.zero_grad()
        ((torch.tensor(x) @ tw + tb).tanh() ** 2).sum().backward()
        topt.step()
        mopt.zero_grad()
        ((minidl.tensor(x) @ mw + mb).tanh() ** 2).sum().backward()
        mopt.step()
    # float64: the formulas agree up to operation order; torch's ASGD keeps eta and mu as float32 tensors
    rtol = 1e-6 if name == "ASGD" else 1e-8
    np.testing.assert_allclose(mw.detach().numpy(), tw.detach().numpy(), rtol=rtol, atol=1e-10)
    np.testing.assert_allclose(mb.detach().numpy(), tb.detach().numpy(), rtol=rtol, atol=1e-10)
    tstate, mstate = topt.state_dict()["state"][0], mopt.state_dict()["state"][0]
    assert sorted(mstate) == sorted(tstate)


def test_bad_hyperparameters_are_refused():
    p = [minidl.ones(2, requires_grad=True)]
    with pytest.raises(ValueError, match="NAdam: invalid betas"):
        minidl.optim.NAdam(p, betas=(1.5, 0.9))
    with pytest.raises(ValueError, match="Adagrad: invalid lr_decay"):
        minidl.optim.Adagrad(p, lr_decay=-1)
    with pytest.raises(ValueError, match="RAdam: invalid lr"):
        minidl.optim.RAdam(p, lr=-1)
