"""gradcheck and gradgradcheck (torch.autograd's): is a backward pass right? Compared against finite differences.

For a function f of some tensors, the Jacobian of each output o with respect to each input x that requires grad is
computed twice:

- numerically, one column per element x_k of x, by central differences:
      d o / d x_k ~ (f(x + eps e_k) - f(x - eps e_k)) / (2 eps)
- analytically, one row per element o_m of o, by the tape: the gradient of o_m (backward with a one-hot grad_output)

and the two must agree within atol + rtol * |numerical|, element by element. Central differences are accurate to
O(eps^2) only in float64: the check is meant for double-precision inputs (it warns otherwise). The backward pass also
runs twice, and both results must agree within nondet_tol (a backward that accumulates in a different order each
time is not reentrant). gradgradcheck checks the gradients of the gradient: it runs gradcheck on the function
(inputs, grad_outputs) -> autograd.grad(f(inputs), inputs, grad_outputs, create_graph=True).

The cost is one forward pass per input element (twice) and one backward per output element: use small tensors.
minidl.utils.gradcheck is the cheaper check minidl's own tests use (Chainer's: one backward of a random projection of
the outputs, and finite differences along random directions for large inputs); this one is torch's, the definition.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import _device
from .function import grad

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """A Jacobian that does not match its finite-difference estimate (torch.autograd.gradcheck.GradcheckError)."""


def _tensor_class():
    from .tensor import Tensor

    return Tensor


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _outputs(func, inputs):
    return _as_tuple(func(*inputs))


def _to_host(a):
    return a.get() if _device.is_cuda_array(a) else np.asarray(a)


def _numerical(func, inputs, x, eps):
    """[(x.numel(), o.numel()) float64 Jacobian for each tensor output o]: two forward passes per element of x."""
    Tensor = _tensor_class()
    data = x._data
    columns = None
    # (grad mode stays as it is: the function may itself take gradients, as gradgradcheck's does)
    for k in range(data.size):
        idx = np.unravel_index(k, data.shape)
        orig = data[idx].copy()
        data[idx] = orig + eps
        plus = [_to_host(o._data).astype(np.float64) for o in _outputs(func, inputs) if isinstance(o, Tensor)]
        data[idx] = orig - eps
        minus = [_to_host(o._data).astype(np.float64) for o in _outputs(func, inputs) if isinstance(o, Tensor)]
        data[idx] = orig
        if columns is None:
            columns = [np.zeros((data.size, p.size)) for p in plus]
        for j, (p, m) in enumerate(zip(plus, minus)):
            columns[j][k] = ((p - m) / (2 * eps)).reshape(-1)
    return columns or []


def _analytical(outputs, diff_inputs, j):
    """(x.numel(), o.numel()) float64 Jacobians of output j for every differentiable input, by one-hot backwards."""
    Tensor = _tensor_class()
    o = outputs[j]
    rows = [np.zeros((x._data.size, o._data.size)) for x in diff_inputs]
    for m in range(o._data.size):
        onehot = np.zeros(o._data.size, dtype=np.float64)
        onehot[m] = 1.0
        onehot = _device.move_array(onehot.reshape(o._data.shape).astype(o._data.dtype), o.device)
        grads = grad([o], diff_inputs, grad_outputs=[Tensor._make(onehot)], retain_graph=True, allow_unused=True)
        for i, g in enumerate(grads):
            if g is not None:
                rows[i][:, m] = _to_host(g._data).astype(np.float64).reshape(-1)
    return rows


def _forward(func, inputs, i):
    """(x.numel(), o.numel()) float64 Jacobians of every tensor output with respect to input i, by forward mode: one
    dual pass per element of x, its tangent one-hot (the path a custom Function's jvp takes)."""
    from . import forward_ad

    Tensor = _tensor_class()
    x = inputs[i]
    columns = None
    for k in range(x._data.size):
        onehot = np.zeros(x._data.size, dtype=np.float64)
        onehot[k] = 1.0
        tangent = Tensor._make(_device.move_array(onehot.reshape(x._data.shape).astype(x._data.dtype), x.device))
        with forward_ad.dual_level():
            args = list(inputs)
            args[i] = forward_ad.make_dual(x, tangent)
            outs = [o for o in _outputs(func, args) if isinstance(o, Tensor)]
            tangents = [forward_ad.unpack_dual(o).tangent for o in outs]
        if columns is None:
            columns = [np.zeros((x._data.size, o._data.size)) for o in outs]
        for j, t in enumerate(tangents):
            if t is not None:
                columns[j][k] = _to_host(t._data).astype(np.float64).reshape(-1)
    return columns or []


def _fail(message, raise_exception):
    if raise_exception:
        raise GradcheckError(message)
    return False


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """True when the analytical Jacobians of func at inputs match their finite-difference estimates (see the module
    docstring); otherwise raises GradcheckError (or returns False with raise_exception=False). fast_mode is taken as
    the full check. check_forward_ad compares the forward-mode Jacobian (autograd.forward_ad: a custom Function's
    jvp, or the double-backward trick) with the same finite differences; the batched checks are not in minidl and
    say so."""
    Tensor = _tensor_class()
    if check_batched_grad or check_batched_forward_grad:
        raise NotImplementedError("gradcheck: check_batched_grad and check_batched_forward_grad need vmap over the "
                                  "backward, which minidl does not have (its vmap is a loop); leave them False (the "
                                  "backward and forward-mode checks run)")
    inputs = _as_tuple(inputs)
    diff = [(i, t) for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have "
                         "requires_grad=True.")
    for i, t in diff:
        if t.dtype.kind == "c":
            raise NotImplementedError(f"gradcheck: input #{i} is complex; minidl's gradcheck checks real inputs")
        if t._data.dtype != np.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point or complex. "
                          "This check will likely fail if all the inputs are not of double precision floating "
                          "point or complex.", stacklevel=2)
    if not (check_backward_ad or check_forward_ad):
        return True
    numerical = {i: _numerical(func, inputs, x, eps) for i, x in diff}
    if check_forward_ad:
        for i, x in diff:
            for j, column_jacobian in enumerate(_forward(func, inputs, i)):
                if not np.allclose(column_jacobian, numerical[i][j], rtol=rtol, atol=atol):
                    return _fail(f"Jacobian computed with forward mode mismatch for output {j} with respect to "
                                 f"input {i},\nnumerical:{numerical[i][j]}\nanalytical:{column_jacobian}\n",
                                 raise_exception)
    if not check_backward_ad:
        return True
    outputs = [o for o in _outputs(func, inputs) if isinstance(o, Tensor)]
    diff_inputs = [t for _, t in diff]
    for j, o in enumerate(outputs):
        if not o.requires_grad:
            for i, _ in diff:
                if np.abs(numerical[i][j]).max(initial=0.0) > atol:
                    return _fail(f"Numerical gradient for function expected to be zero: output {j} does not "
                                 f"require grad, yet it changes with input {i}", raise_exception)
            continue
        first = _analytical(outputs, diff_inputs, j)
        second = _analytical(outputs, diff_inputs, j)
        for n, (i, _) in enumerate(diff):
            if not np.allclose(first[n], numerical[i][j], rtol=rtol, atol=atol):
                return _fail(f"Jacobian mismatch for output {j} with respect to input {i},\n"
                             f"numerical:{numerical[i][j]}\nanalytical:{first[n]}\n", raise_exception)
            if np.abs(second[n] - first[n]).max(initial=0.0) > nondet_tol:
                return _fail("Backward is not reentrant, i.e., running backward with same input and grad_output "
                             "multiple times gives different values, although analytical gradient matches "
                             f"numerical gradient. The tolerance for nondeterminism was {nondet_tol}.",
                             raise_exception)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0, check_undefined_grad=True,
                  check_grad_dtypes=False, check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True,
                  fast_mode=False, masked=False):
    """gradcheck of the gradient: of (inputs, grad_outputs) -> autograd.grad(func(inputs), inputs, grad_outputs,
    create_graph=True). grad_outputs default to random normal tensors like the outputs, requiring grad."""
    Tensor = _tensor_class()
    if check_fwd_over_rev or check_batched_grad:
        raise NotImplementedError("gradgradcheck: check_fwd_over_rev and check_batched_grad need forward-mode AD or "
                                  "vmap, which minidl does not have; leave them False")
    inputs = _as_tuple(inputs)
    outputs = [o for o in _outputs(func, inputs) if isinstance(o, Tensor) and o.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = []
        for o in outputs:
            value = _device.move_array(rng.standard_normal(o._data.shape).astype(o._data.dtype), o.device)
            grad_outputs.append(Tensor._make(value, requires_grad=True))
    grad_outputs = _as_tuple(grad_outputs)
    n = len(inputs)

    def first_derivative(*args):
        xs, gos = args[:n], args[n:]
        outs = [o for o in _outputs(func, xs) if isinstance(o, Tensor) and o.requires_grad]
        wrt = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
        grads = grad(outs, wrt, grad_outputs=list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol, check_backward_ad=check_rev_over_rev)
