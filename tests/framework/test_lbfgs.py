"""optim.LBFGS against torch.optim.LBFGS, step for step (losses and parameters after every step)."""
import numpy as np
import pytest
import torch

import minidl
from minidl import nn, optim


def _models(dtype, seed):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)  # the initial weights (copied into minidl's model)
    x = rng.standard_normal((13, 5))
    y = np.sin(x.sum(1, keepdims=True))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 1)).to(dtype)
    mm = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1))
    mm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    mm.to({torch.float32: minidl.float32, torch.float64: minidl.float64}[dtype])
    return (mm, minidl.tensor(x).to(mm[0].weight.dtype), minidl.tensor(y).to(mm[0].weight.dtype),
            tm, torch.tensor(x, dtype=dtype), torch.tensor(y, dtype=dtype))


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
@pytest.mark.parametrize("dtype,tol,steps", [(torch.float64, 1e-9, 4), (torch.float32, 2e-4, 2)])
def test_lbfgs_step_for_step(line_search, dtype, tol, steps):
    """float64: four steps of up to six iterations agree to 1e-9. float32: rounding differences grow
    through the line search's branches (a few seeds of 12 differ by more than 2e-4 after four steps),
    so two steps."""
    mm, mx, my, tm, tx, ty = _models(dtype, seed=3)
    mopt = optim.LBFGS(mm.parameters(), lr=0.8, max_iter=6, history_size=4, line_search_fn=line_search)
    topt = torch.optim.LBFGS(tm.parameters(), lr=0.8, max_iter=6, history_size=4, line_search_fn=line_search)
    calls = {"m": 0, "t": 0}

    def mclosure():
        calls["m"] += 1
        mopt.zero_grad()
        loss = nn.functional.mse_loss(mm(mx), my)
        loss.backward()
        return loss

    def tclosure():
        calls["t"] += 1
        topt.zero_grad()
        loss = torch.nn.functional.mse_loss(tm(tx), ty)
        loss.backward()
        return loss

    for _ in range(steps):
        lm, lt = mopt.step(mclosure), topt.step(tclosure)
        np.testing.assert_allclose(lm.item(), lt.item(), rtol=tol)
        for (name, pm), pt in zip(mm.named_parameters(), tm.parameters()):
            np.testing.assert_allclose(pm.detach().numpy(), pt.detach().numpy(), rtol=tol, atol=tol, err_msg=name)
    assert calls["m"] == calls["t"]  # the same number of closure evaluations: the same line search
    assert float(mclosure()) < float(lm)


def test_lbfgs_needs_a_closure_and_one_group():
    w = nn.Parameter(minidl.ones(3))
    opt = optim.LBFGS([w])
    with pytest.raises(RuntimeError, match="closure"):
        opt.step()
    with pytest.raises(ValueError, match="line_search_fn"):
        optim.LBFGS([w], line_search_fn="armijo")


def test_lbfgs_minimises_rosenbrock_as_torch():
    results = []
    for lib in (minidl, torch):
        xy = lib.nn.Parameter(lib.tensor([-1.5, 2.0], dtype=lib.float64))
        opt = lib.optim.LBFGS([xy], line_search_fn="strong_wolfe", max_iter=50)

        def closure():
            opt.zero_grad()
            loss = (1 - xy[0]) ** 2 + 100 * (xy[1] - xy[0] ** 2) ** 2
            loss.backward()
            return loss

        for _ in range(3):
            opt.step(closure)
        results.append(xy.detach().numpy().copy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-8)
    np.testing.assert_allclose(results[0], [1.0, 1.0], atol=1e-5)


def test_lbfgs_state_dict_round_trip(tmp_path):
    """Saving and loading the optimizer mid-run continues exactly as an uninterrupted run."""
    def run(split):
        w = nn.Parameter(minidl.tensor([1.5, -0.5, 2.0], dtype=minidl.float64))
        opt = optim.LBFGS([w], max_iter=3, history_size=3)

        def closure():
            opt.zero_grad()
            loss = ((w - minidl.tensor([1.0, 2.0, -1.0], dtype=minidl.float64)) ** 4).sum()
            loss.backward()
            return loss

        for step in range(4):
            if split and step == 2:
                minidl.save(opt.state_dict(), str(tmp_path / "opt.pt"))
                opt = optim.LBFGS([w], max_iter=3, history_size=3)
                opt.load_state_dict(minidl.load(str(tmp_path / "opt.pt")))
            opt.step(closure)
        return w.detach().numpy().copy()

    np.testing.assert_array_equal(run(False), run(True))
