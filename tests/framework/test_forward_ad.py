"""torch.autograd.forward_ad on minidl (autograd/forward_ad.py) against torch: dual tensors through ordinary ops, a
custom Function that defines only jvp (forward mode through the user's formula), gradcheck(check_forward_ad=True),
and unpack_dual outside a dual level."""
import numpy as np
import pytest
import torch

import minidl
import minidl.autograd.forward_ad as fwAD

RNG = np.random.default_rng(3)
A, T = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))


def _exp_function(lib, scale=1.0):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            result = lib.exp(x)
            ctx.result = result
            return result

        @staticmethod
        def jvp(ctx, g):
            return g * ctx.result * scale

    return Exp


def test_tangents_through_ops_and_a_jvp_only_function_match_torch():
    out = []
    for lib, fw in ((minidl, fwAD), (torch, torch.autograd.forward_ad)):
        exp = _exp_function(lib).apply
        primal, tangent = lib.tensor(A), lib.tensor(T)
        with fw.dual_level():
            dual = fw.make_dual(primal, tangent)
            assert fw.unpack_dual(dual).tangent is tangent
            y = exp(dual.sin()) * 2 + dual          # the Function between ordinary ops
            out.append((fw.unpack_dual(y).primal.detach().numpy(), fw.unpack_dual(y).tangent.numpy()))
        assert fw.unpack_dual(y).tangent is None    # outside the level: no tangent
    np.testing.assert_allclose(out[0][0], out[1][0], rtol=1e-12)
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12)


def test_gradcheck_checks_forward_mode_and_catches_a_wrong_jvp():
    x = minidl.tensor(A, requires_grad=True)
    assert minidl.autograd.gradcheck(_exp_function(minidl).apply, (x,), check_forward_ad=True,
                                     check_backward_ad=False)
    with pytest.raises(RuntimeError, match="forward mode mismatch"):   # (GradcheckError, as torch's)
        minidl.autograd.gradcheck(_exp_function(minidl, scale=1.01).apply, (x,), check_forward_ad=True,
                                  check_backward_ad=False)
    # ordinary ops: forward mode by the double-backward trick, checked against the same finite differences
    assert minidl.autograd.gradcheck(lambda t: (t.tanh() * t).sum(-1), (x,), check_forward_ad=True)
