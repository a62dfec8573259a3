"""torch.autograd's debugging tools: anomaly detection (detect_anomaly / set_detect_anomaly) and gradcheck /
gradgradcheck with torch's signatures, each against torch on the same function."""
import warnings

import numpy as np
import pytest
import torch

import minidl
from minidl.autograd import Function, GradcheckError


def _pair(values, requires_grad=True):
    return (minidl.tensor(np.array(values, dtype=np.float64), requires_grad=requires_grad),
            torch.tensor(np.array(values, dtype=np.float64), requires_grad=requires_grad))


def test_detect_anomaly_names_the_op_that_made_a_nan_as_torch():
    """sqrt at 0 times 0: SqrtBackward's gradient is 0 * inf = NaN. Without the mode the NaN reaches .grad quietly;
    with it the backward stops there, with torch's message (minidl's op names have no trailing 0), and the forward
    stack of the op is shown as a warning naming this file."""
    def f(lib, y):
        return (lib.sqrt(y) * 0).sum()

    y, ty = _pair([0.0, 1.0])
    f(minidl, y).backward()
    assert np.isnan(y.grad.numpy()[0])
    y, ty = _pair([0.0, 1.0])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with minidl.autograd.detect_anomaly():
            assert minidl.is_anomaly_enabled()
            with pytest.raises(RuntimeError, match=r"Function 'SqrtBackward' returned nan values in its 0th output."):
                f(minidl, y).backward()
        with torch.autograd.detect_anomaly():
            with pytest.raises(RuntimeError, match=r"Function 'SqrtBackward0' returned nan values in its 0th output."):
                f(torch, ty).backward()
    assert not minidl.is_anomaly_enabled()
    messages = [str(w.message) for w in seen]
    assert any(m.startswith("Anomaly Detection has been enabled") for m in messages)
    trace = [m for m in messages if m.startswith("Error detected in SqrtBackward")]
    assert trace and "test_anomaly_mode.py" in trace[0] and "lib.sqrt(y)" in trace[0]
    assert y.grad is None   # nothing accumulated past the bad op


def test_set_detect_anomaly_is_a_switch_and_a_context_manager_and_check_nan_can_be_off():
    y, _ = _pair([0.0, 4.0])
    with minidl.autograd.set_detect_anomaly(True, check_nan=False):
        assert minidl.is_anomaly_enabled() and not minidl.is_anomaly_check_nan_enabled()
        (y.sqrt() * 0).sum().backward()   # NaN allowed through
    assert np.isnan(y.grad.numpy()[0]) and not minidl.is_anomaly_enabled()
    minidl.autograd.set_detect_anomaly(True)
    try:
        assert minidl.is_anomaly_enabled() and minidl.is_anomaly_check_nan_enabled()
    finally:
        minidl.autograd.set_detect_anomaly(False)
    assert not minidl.is_anomaly_enabled()


def test_anomaly_mode_shows_the_forward_of_an_op_whose_backward_raises():
    class Broken(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("broken backward")

    x, _ = _pair([1.0, 2.0])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with minidl.autograd.set_detect_anomaly(True):
            out = Broken.apply(x).sum()   # the line the warning must name
            with pytest.raises(ValueError, match="broken backward"):
                out.backward()
    trace = [str(w.message) for w in seen if str(w.message).startswith("Error detected in Broken")]
    assert trace and "Broken.apply(x)" in trace[0]


def test_detect_anomaly_as_a_decorator():
    y, _ = _pair([0.0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @minidl.autograd.detect_anomaly()
        def step():
            (y.sqrt() * 0).sum().backward()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="returned nan values"):
            step()
    assert not minidl.is_anomaly_enabled()


def _square(base, scale, detach):
    """x*x as a Function of `base` (minidl's or torch's) whose backward is right (scale 2), wrong (scale 3), or right
    but not twice differentiable (the saved input detached)."""
    class Square(base):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * scale * (a.detach() if detach else a)
    return Square


@pytest.mark.parametrize("scale,detach,first,second", [(2.0, False, True, True), (3.0, False, False, False),
                                                       (2.0, True, True, False)])
def test_gradcheck_and_gradgradcheck_agree_with_torch(scale, detach, first, second):
    """The same verdicts as torch's on a right backward, a wrong one, and a right one whose own gradient is wrong."""
    values = np.random.default_rng(0).standard_normal((2, 3))
    x, tx = _pair(values)
    cls, twin = _square(Function, scale, detach), _square(torch.autograd.Function, scale, detach)
    for check, want in ((minidl.autograd.gradcheck, first), (minidl.autograd.gradgradcheck, second)):
        got = check(lambda a: cls.apply(a).tanh(), (x,), raise_exception=False)
        theirs = getattr(torch.autograd, check.__name__)(lambda a: twin.apply(a).tanh(), (tx,), raise_exception=False)
        assert got is want and theirs is want
    if not first:
        with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
            minidl.autograd.gradcheck(cls.apply, (x,))
        assert issubclass(GradcheckError, RuntimeError)


def test_gradcheck_several_inputs_and_outputs_and_its_input_rules():
    rng = np.random.default_rng(1)
    a, ta = _pair(rng.standard_normal((3, 4)))
    w, tw = _pair(rng.standard_normal((4, 2)))
    k = 2.0   # a non-tensor argument passes through

    def f(lib, a, w, k):
        y = lib.tanh(a @ w) * k
        return y, (a * a).sum(0)

    assert minidl.autograd.gradcheck(lambda a, w, k: f(minidl, a, w, k), (a, w, k), atol=1e-6)
    assert torch.autograd.gradcheck(lambda a, w, k: f(torch, a, w, k), (ta, tw, k), atol=1e-6)
    assert minidl.autograd.gradgradcheck(lambda a, w: f(minidl, a, w, k), (a, w))
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        minidl.autograd.gradcheck(lambda a: a * 2, (minidl.tensor([1.0], dtype=minidl.float64),))
    x32 = minidl.tensor([0.5, 1.5], requires_grad=True)
    with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double precision"):
        minidl.autograd.gradcheck(lambda a: a * 2, (x32,), eps=1e-2, atol=1e-2, rtol=1e-2)
    assert minidl.autograd.gradcheck(lambda a: a * 2, (a,), check_forward_ad=True)   # (test_forward_ad.py)
    with pytest.raises(NotImplementedError, match="check_batched_grad"):
        minidl.autograd.gradcheck(lambda a: a * 2, (a,), check_batched_grad=True)


def test_forward_ad_dual_tensors_give_torch_jvps():
    """torch.autograd.forward_ad's dual_level / make_dual / unpack_dual: the tangent of an output is J t, through
    elementwise math, a matmul, softmax and an nn.Linear + tanh model; a tensor that depends on no dual has no
    tangent; outside a dual level make_dual says what to do."""
    import torch.autograd.forward_ad as tfw

    from minidl.autograd import forward_ad as mfw

    rng = np.random.default_rng(0)
    x0, t0, w0 = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal((3, 4))
    lin_w, lin_b = rng.standard_normal((2, 4)), rng.standard_normal(2)
    results = []
    for lib, fw in ((minidl, mfw), (torch, tfw)):
        layer = lib.nn.Linear(4, 2).double()
        with lib.no_grad():
            layer.weight.copy_(lib.tensor(lin_w))
            layer.bias.copy_(lib.tensor(lin_b))
        with fw.dual_level():
            x = fw.make_dual(lib.tensor(x0), lib.tensor(t0))
            y = lib.nn.functional.softmax((x.sin() * x).exp() @ lib.tensor(w0), -1)
            z = layer(y).tanh()
            out = [fw.unpack_dual(y), fw.unpack_dual(z)]
            assert fw.unpack_dual(lib.tensor(w0)).tangent is None
            np.testing.assert_array_equal(fw.unpack_dual(x).tangent.numpy(), t0)
        results.append([a.detach().numpy() for pair in out for a in pair])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    with pytest.raises(RuntimeError, match="no dual level is open"):
        mfw.make_dual(minidl.tensor(x0), minidl.tensor(t0))
