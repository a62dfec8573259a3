"""gradcheck: compare autograd's gradients with central finite differences, in float64 (the cheap check of minidl's
own tests; torch.autograd.gradcheck's, which builds the whole Jacobian both ways, is minidl.autograd.gradcheck).

The check (Chainer's `check_backward` idea): pick a random array c for each output and look at the
scalar L(x) = sum_k sum(fn(x)_k * c_k). Autograd gives dL/dx_i for every input x_i in one backward
pass. Finite differences give the same numbers without autograd:

    dL/dx[j]  ~  (L(x + eps e_j) - L(x - eps e_j)) / (2 eps)            one element j at a time
    <dL/dx, u> ~  (L(x + eps u) - L(x - eps u)) / (2 eps)                along a unit direction u

Central differences are accurate to O(eps^2), which in float64 with eps = 1e-6 leaves ~1e-9 of error,
far below any real backward bug. Small inputs are checked element by element; large ones along a few
random directions (each direction tests every element at once, so a wrong element still shows).
A random c (not all ones) makes sure a backward that mixes up output positions is caught too.
"""
from __future__ import annotations

import numpy as np

from .. import _device, random
from ..autograd.function import no_grad
from ..autograd.tensor import Tensor

# Inputs up to this many elements are checked element by element; larger ones along directions.
ELEMENTWISE_LIMIT = 256
DEFAULT_DIRECTIONS = 16


# Autograd and finite differences disagree (torch.autograd.gradcheck's error, also raised by this check: its message
# names the input, the element (or direction) where they disagree most, and both values).
from ..autograd.gradcheck import GradcheckError  # noqa: E402


def _as_outputs(result):
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    for i, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            raise TypeError(f"gradcheck: fn must return a Tensor or a tuple of Tensors, output {i} is a {type(out).__name__}")
    # Integer outputs (indices, masks) carry no gradient: they take no part in L.
    return [out for out in outputs if out.is_floating_point()]


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3, n_directions=None,
              raise_exception: bool = True) -> bool:
    """Check the gradients of fn(*inputs) w.r.t. every input tensor with requires_grad=True.

    Args:
        fn: a function of the inputs returning a Tensor or a tuple of Tensors.
        inputs: a Tensor or a tuple of them (other values are passed to fn unchanged). The inputs to
            check must be float64 (finite differences in float32 are too noisy to mean anything).
        eps: the finite-difference step.
        atol, rtol: autograd value a and numeric value n agree when |a - n| <= atol + rtol * |n|.
        n_directions: check along this many random unit directions per input instead of element by
            element; None chooses element by element for inputs of up to ELEMENTWISE_LIMIT elements.
        raise_exception: raise GradcheckError on a mismatch (default) or return False.

    Returns True when every checked input agrees. The random c and directions come from minidl's
    generator, so `minidl.manual_seed` makes a failing check reproducible.
    """
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input has requires_grad=True, so there is no gradient to check")
    for i in checked:
        x = inputs[i]
        if x.dtype != np.float64:
            raise TypeError(
                f"gradcheck: input {i} of shape {x.shape} is {x.dtype}; finite differences need float64 "
                "inputs (use x.double())"
            )
        if not x.is_leaf:
            raise ValueError(f"gradcheck: input {i} of shape {x.shape} is not a leaf tensor; pass leaves")
    if n_directions is not None and int(n_directions) < 1:
        raise ValueError(f"gradcheck: n_directions must be >= 1, got {n_directions}")

    rng = random.cpu_generator()

    # The analytic side: one backward pass of L = sum_k sum(y_k * c_k).
    saved_grads = {i: inputs[i].grad for i in checked}
    for i in checked:
        inputs[i].grad = None
    try:
        outputs = _as_outputs(fn(*inputs))
        weights = []
        for out in outputs:
            c = rng.standard_normal(out.shape)
            weights.append(_device.move_array(c.astype(out.dtype), out.device))
        loss = None
        for out, c in zip(outputs, weights):
            term = (out * Tensor._make(c)).sum()
            loss = term if loss is None else loss + term
        if loss is not None and loss.requires_grad:
            loss.backward()
        analytic = {}
        for i in checked:
            g = inputs[i].grad
            analytic[i] = np.zeros(inputs[i].shape) if g is None else _host(g._data).astype(np.float64)
    finally:
        for i in checked:
            inputs[i].grad = saved_grads[i]

    def objective() -> float:
        """L at the inputs as they are now (perturbed in place), without recording a graph."""
        with no_grad():
            outs = _as_outputs(fn(*inputs))
        total = 0.0
        for out, c in zip(outs, weights):
            total += float(_host((out._data.astype(np.float64) * c).sum()))
        return total

    for i in checked:
        x = inputs[i]
        use_directions = n_directions is not None or x.numel() > ELEMENTWISE_LIMIT
        if use_directions:
            ok = _check_directions(objective, x, i, analytic[i], eps, atol, rtol,
                                   int(n_directions or DEFAULT_DIRECTIONS), rng, raise_exception)
        else:
            ok = _check_elements(objective, x, i, analytic[i], eps, atol, rtol, raise_exception)
        if not ok:
            return False
    return True


def _host(a):
    return a.get() if _device.is_cuda_array(a) else np.asarray(a)


def _check_elements(objective, x, index, analytic, eps, atol, rtol, raise_exception) -> bool:
    """Perturb one element at a time; report the element that exceeds the tolerance most."""
    numeric = np.zeros(x.shape)
    for j in np.ndindex(*x.shape):  # x is perturbed in place, so fn sees it through any view it keeps
        original = x._data[j].copy()
        try:
            x._data[j] = original + eps
            f_plus = objective()
            x._data[j] = original - eps
            f_minus = objective()
        finally:
            x._data[j] = original
        numeric[j] = (f_plus - f_minus) / (2 * eps)
    excess = np.abs(analytic - numeric) - (atol + rtol * np.abs(numeric))
    excess = np.where(np.isnan(excess), np.inf, excess)  # NaN on either side is a failure
    if x.numel() == 0 or excess.max() <= 0:
        return True
    worst = np.unravel_index(int(np.argmax(excess)), x.shape)
    a, n = analytic[worst], numeric[worst]
    msg = (
        f"gradcheck: input {index} of shape {x.shape}: at element {tuple(int(k) for k in worst)} autograd gives "
        f"{float(a)!r} but finite differences give {float(n)!r} (|diff| = {abs(a - n):.3g} > atol + rtol * |numeric| = "
        f"{atol + rtol * abs(n):.3g}); {int((excess > 0).sum())} of {x.numel()} elements disagree"
    )
    if raise_exception:
        raise GradcheckError(msg)
    return False


def _check_directions(objective, x, index, analytic, eps, atol, rtol, n_directions, rng, raise_exception) -> bool:
    """Perturb along random unit directions u; compare <analytic, u> with the directional difference."""
    original = x._data.copy()
    results = []
    for d in range(n_directions):
        u = rng.standard_normal(x.shape)
        u /= max(np.linalg.norm(u), 1e-300)
        u_dev = _device.move_array(u, x.device)
        try:
            x._data[...] = original + eps * u_dev
            f_plus = objective()
            x._data[...] = original - eps * u_dev
            f_minus = objective()
        finally:
            x._data[...] = original
        numeric = (f_plus - f_minus) / (2 * eps)
        a = float((analytic * u).sum())
        excess = abs(a - numeric) - (atol + rtol * abs(numeric))
        results.append((np.inf if np.isnan(excess) else excess, d, a, numeric))
    excess, d, a, n = max(results)
    if excess <= 0:
        return True
    msg = (
        f"gradcheck: input {index} of shape {x.shape}: along random direction {d} of {n_directions} the autograd "
        f"directional derivative is {float(a)!r} but finite differences give {float(n)!r} (|diff| = {abs(a - n):.3g} > "
        f"atol + rtol * |numeric| = {atol + rtol * abs(n):.3g}); "
        f"{sum(r[0] > 0 for r in results)} of {n_directions} directions disagree"
    )
    if raise_exception:
        raise GradcheckError(msg)
    return False
