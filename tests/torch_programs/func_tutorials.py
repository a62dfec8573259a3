"""PyTorch's torch.func tutorials in brief, each step as the tutorial writes it: "Per-sample-gradients" (grad of a
loss through functional_call, vmapped over the batch, against a loop of autograd.grad), "Model ensembling"
(stack_module_state, a copy of the model on the meta device as the skeleton, vmap over the models), "Jacobians,
Hessians, hvp, vhp, and more" (jacrev with argnums, jacfwd, hessian of a vector function, batched Jacobians and
Hessians, hvp as jvp of grad), "Neural Tangent Kernels" (the Jacobian contraction and the NTK-vector products, which
must agree), and deferred initialisation on the meta device (torch.device("meta"), load_state_dict(assign=True),
to_empty). Weights and data come from fixed formulas, so that the output is the same on any framework that runs it.
"""
import copy
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, stack_module_state, vjp, vmap

torch.set_default_dtype(torch.float64)


def fixed(*shape, phase=0.0, scale=0.5):
    n = 1
    for s in shape:
        n *= s
    return torch.sin(torch.arange(n, dtype=torch.float64) * 0.7 + phase).reshape(shape) * scale


def set_weights(model, phase):
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(fixed(*p.shape, phase=phase + i, scale=0.3))
    return model


def show(name, t):
    print(name, tuple(t.shape), " ".join(f"{v:.6f}" for v in t.reshape(-1)[:6].tolist()))


# --- Per-sample gradients ------------------------------------------------------------------------------------------
class SimpleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 6, 3, 1)
        self.fc1 = nn.Linear(24, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def loss_fn(predictions, targets):
    return F.nll_loss(predictions, targets)


batch_size = 5
data = fixed(batch_size, 1, 8, 8, phase=0.3, scale=1.0)
targets = torch.arange(batch_size) * 3 % 10
model = set_weights(SimpleCNN(), 0.0)


def compute_grad(sample, target):
    prediction = model(sample.unsqueeze(0))
    loss = loss_fn(prediction, target.unsqueeze(0))
    return torch.autograd.grad(loss, list(model.parameters()))


per_sample_grads = [torch.stack(shards) for shards in zip(*[compute_grad(data[i], targets[i])
                                                              for i in range(batch_size)])]
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}


def compute_loss(params, buffers, sample, target):
    predictions = functional_call(model, (params, buffers), (sample.unsqueeze(0),))
    return loss_fn(predictions, target.unsqueeze(0))


ft_per_sample_grads = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data, targets)
for (name, ft), loop in zip(ft_per_sample_grads.items(), per_sample_grads):
    print("per-sample", name, tuple(ft.shape), torch.allclose(ft, loop, atol=1e-10))
show("per-sample fc2.weight", ft_per_sample_grads["fc2.weight"][1])


# --- Model ensembling ----------------------------------------------------------------------------------------------
class SimpleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


num_models = 3
models = [set_weights(SimpleMLP(), 0.5 * k) for k in range(num_models)]
minibatches = fixed(num_models, 6, 4, 4, phase=1.0, scale=1.0)
loop_predictions = torch.stack([m(mb) for m, mb in zip(models, minibatches)])
params, buffers = stack_module_state(models)
base_model = copy.deepcopy(models[0]).to("meta")
print("base model on meta:", base_model.fc1.weight.is_meta, base_model.fc1.weight.device,
      tuple(base_model.fc1.weight.shape))


def fmodel(params, buffers, x):
    return functional_call(base_model, (params, buffers), (x,))


print("stacked", [tuple(p.shape) for p in params.values()])
predictions = vmap(fmodel)(params, buffers, minibatches)
print("ensemble, different minibatches:", tuple(predictions.shape), torch.allclose(predictions, loop_predictions))
same = vmap(fmodel, in_dims=(0, 0, None))(params, buffers, minibatches[0])
print("ensemble, same minibatch:", torch.allclose(same, torch.stack([m(minibatches[0]) for m in models])))
show("ensemble", same[2])


# --- Jacobians, Hessians, hvp --------------------------------------------------------------------------------------
def predict(weight, bias, x):
    return F.linear(x, weight, bias).tanh()


D = 6
weight, bias, x = fixed(D, D, phase=0.1), fixed(D, phase=0.2), fixed(D, phase=0.3)
xp = x.clone().requires_grad_()
jacobian = torch.stack([torch.autograd.grad(predict(weight, bias, xp), xp, vec)[0] for vec in torch.eye(D)])
_, vjp_fn = vjp(partial(predict, weight, bias), x)
ft_jacobian, = vmap(vjp_fn)(torch.eye(D))
print("vjp rows", torch.allclose(ft_jacobian, jacobian))
print("jacrev", torch.allclose(jacrev(predict, argnums=2)(weight, bias, x), jacobian))
print("jacfwd", torch.allclose(jacfwd(predict, argnums=2)(weight, bias, x), jacobian))
ft_jac_weight, ft_jac_bias = jacrev(predict, argnums=(0, 1))(weight, bias, x)
print("argnums (0, 1):", tuple(ft_jac_weight.shape), tuple(ft_jac_bias.shape))
show("d predict / d bias", ft_jac_bias)
hess = hessian(predict, argnums=2)(weight, bias, x)
print("hessian", tuple(hess.shape), torch.allclose(hess, jacfwd(jacfwd(predict, argnums=2), argnums=2)(weight, bias, x)),
      torch.allclose(hess, jacrev(jacrev(predict, argnums=2), argnums=2)(weight, bias, x)))
show("hessian", hess[0, 1])
xs = fixed(4, D, phase=0.4)
batch_jacobian = vmap(jacrev(predict, argnums=2), in_dims=(None, None, 0))(weight, bias, xs)
summed = jacrev(lambda w, b, x: predict(w, b, x).sum(0), argnums=2)(weight, bias, xs).movedim(1, 0)
print("batch jacobian", tuple(batch_jacobian.shape), torch.allclose(batch_jacobian, summed))
batch_hessian = vmap(hessian(predict, argnums=2), in_dims=(None, None, 0))(weight, bias, xs)
print("batch hessian", tuple(batch_hessian.shape))


def f(x):
    return x.sin().sum()


def hvp(f, primals, tangents):
    return jvp(grad(f), primals, tangents)[1]


v, t = fixed(8, phase=0.5), fixed(8, phase=0.6)
show("hvp", hvp(f, (v,), (t,)))
print("hvp = -sin(x) t:", torch.allclose(hvp(f, (v,), (t,)), -v.sin() * t))


# --- Neural tangent kernels ----------------------------------------------------------------------------------------
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, (3, 3))
        self.conv2 = nn.Conv2d(4, 4, (3, 3))
        self.fc = nn.Linear(64, 3)

    def forward(self, x):
        x = self.conv1(x).relu()
        x = self.conv2(x)
        return self.fc(x.flatten(1))


net = set_weights(CNN(), 2.0)
params = {k: v.detach() for k, v in net.named_parameters()}


def fnet_single(params, x):
    return functional_call(net, params, (x.unsqueeze(0),)).squeeze(0)


def empirical_ntk_jacobian_contraction(fnet_single, params, x1, x2, compute="full"):
    jac1 = [j.flatten(2) for j in vmap(jacrev(fnet_single), (None, 0))(params, x1).values()]
    jac2 = [j.flatten(2) for j in vmap(jacrev(fnet_single), (None, 0))(params, x2).values()]
    expr = {"full": "Naf,Mbf->NMab", "trace": "Naf,Maf->NM", "diagonal": "Naf,Maf->NMa"}[compute]
    return torch.stack([torch.einsum(expr, j1, j2) for j1, j2 in zip(jac1, jac2)]).sum(0)


def empirical_ntk_ntk_vps(func, params, x1, x2, compute="full"):
    def get_ntk(x1, x2):
        def func_x1(params):
            return func(params, x1)

        def func_x2(params):
            return func(params, x2)

        output, vjp_fn = vjp(func_x1, params)

        def get_ntk_slice(vec):
            vjps = vjp_fn(vec)
            _, jvps = jvp(func_x2, (params,), vjps)
            return jvps

        basis = torch.eye(output.numel(), dtype=output.dtype, device=output.device).view(output.numel(), -1)
        return vmap(get_ntk_slice)(basis)

    result = vmap(vmap(get_ntk, (None, 0)), (0, None))(x1, x2)
    return {"full": result, "trace": torch.einsum("NMKK->NM", result), "diagonal": torch.einsum("NMKK->NMK", result)}[
        compute]


x_train, x_test = fixed(3, 3, 8, 8, phase=0.7, scale=1.0), fixed(2, 3, 8, 8, phase=0.8, scale=1.0)
full = empirical_ntk_jacobian_contraction(fnet_single, params, x_train, x_test)
print("ntk full", tuple(full.shape))
show("ntk full", full[0, 1])
for compute in ("trace", "diagonal"):
    a = empirical_ntk_jacobian_contraction(fnet_single, params, x_train, x_test, compute)
    b = empirical_ntk_ntk_vps(fnet_single, params, x_train, x_test, compute)
    print("ntk", compute, tuple(a.shape), torch.allclose(a, b))


# --- Deferred initialisation on the meta device --------------------------------------------------------------------
with torch.device("meta"):
    lazy = SimpleCNN()
print("meta:", lazy.fc1.weight.device, lazy.fc1.weight.is_meta, tuple(lazy.conv1.weight.shape))
print(lazy.fc2.bias)
lazy.load_state_dict(model.state_dict(), assign=True)
print("assigned:", lazy.fc1.weight.device, lazy.fc1.weight.requires_grad,
      torch.equal(lazy(data), model(data)))
with torch.device("meta"):
    empty_then_loaded = SimpleCNN()
empty_then_loaded.to_empty(device="cpu")
empty_then_loaded.load_state_dict(model.state_dict())
print("to_empty + load:", empty_then_loaded.fc1.weight.device, torch.equal(empty_then_loaded(data), model(data)))
m = torch.empty(3, 4, device="meta") @ torch.empty(4, 5, device="meta")
print("meta matmul:", m.shape, m.device)
