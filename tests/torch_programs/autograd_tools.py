"""PyTorch's autograd tutorials in brief: forward-mode AD ("Forward-mode Automatic Differentiation": dual tensors,
dual parameters through functional_call, torch.func.jvp), a custom Function with a twice-differentiable backward
checked by gradcheck and gradgradcheck ("Double Backward with Custom Functions"), and anomaly detection finding the
op that made a NaN. Values from fixed formulas, so that the output is the same on any framework that runs it."""
import warnings

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call, jvp

torch.set_default_dtype(torch.float64)


def fn(x, y):
    return x ** 2 + y ** 2


primal = torch.linspace(-1.0, 1.0, 5)
tangent = torch.cos(torch.arange(5.0))
with fwAD.dual_level():
    dual_input = fwAD.make_dual(primal, tangent)
    dual_output = fn(dual_input, primal.flip(0))
    jvp_value = fwAD.unpack_dual(dual_output).tangent
print("jvp", " ".join(f"{v:.6f}" for v in jvp_value.tolist()))

model = nn.Linear(5, 5)
with torch.no_grad():
    model.weight.copy_(torch.sin(torch.arange(25.0)).reshape(5, 5) * 0.3)
    model.bias.copy_(torch.cos(torch.arange(5.0)) * 0.1)
params = {name: p for name, p in model.named_parameters()}
tangents = {name: torch.ones_like(p) * 0.01 for name, p in params.items()}
with fwAD.dual_level():
    dual_params = {name: fwAD.make_dual(p, tangents[name]) for name, p in params.items()}
    out = functional_call(model, dual_params, (primal,))
    jvp_params = fwAD.unpack_dual(out).tangent
print("jvp wrt parameters", " ".join(f"{v:.6f}" for v in jvp_params.tolist()))

_, jvp_func = jvp(lambda x: torch.tanh(model(x)).sum(), (primal,), (tangent,))
print(f"torch.func.jvp {jvp_func.item():.6f}")


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * 3 * x ** 2     # tensor ops: differentiable again


x = (torch.arange(4.0) / 3 - 0.4).requires_grad_()
print("gradcheck", torch.autograd.gradcheck(Cube.apply, (x,)))
print("gradgradcheck", torch.autograd.gradgradcheck(Cube.apply, (x,)))
(g,) = torch.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
(gg,) = torch.autograd.grad(g.sum(), x)
print("second derivative", " ".join(f"{v:.6f}" for v in gg.tolist()))

z = torch.tensor([0.0, 4.0], requires_grad=True)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    with torch.autograd.detect_anomaly():
        try:
            (z.sqrt() * 0).sum().backward()
        except RuntimeError as error:
            message = str(error)
print("anomaly found:", "returned nan values in its 0th output" in message, "Sqrt" in message)
