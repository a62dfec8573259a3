"""functorch's legacy API (PyTorch 1.13 programs and the first versions of the torch.func tutorials): make_functional,
make_functional_with_buffers and combine_state_for_ensemble, with functorch.vmap and grad (per-sample gradients
through a BatchNorm model in eval mode, an ensemble). Fixed weights, so that the output is the same on any framework
that runs it."""
import torch, torch.nn as nn, torch.nn.functional as F
from functorch import make_functional, make_functional_with_buffers, combine_state_for_ensemble, vmap, grad
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
with torch.no_grad():
    for i, p in enumerate(model.parameters()):
        p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) + i).reshape(p.shape) * 0.5)
model.eval()
x = torch.cos(torch.arange(20.0)).reshape(5, 4)
fmodel, params, buffers = make_functional_with_buffers(model)
print(torch.allclose(fmodel(params, buffers, x), model(x)), len(params), len(buffers))
f2, p2 = make_functional(nn.Linear(4, 2))
print(f2(p2, x).shape, p2[0].requires_grad, make_functional(nn.Linear(4, 2), disable_autograd_tracking=True)[1][0].requires_grad)
def loss(params, buffers, xi, yi):
    return F.cross_entropy(fmodel(params, buffers, xi.unsqueeze(0)), yi.unsqueeze(0))
y = torch.tensor([0, 1, 2, 1, 0])
g = vmap(grad(loss), in_dims=(None, None, 0, 0))(params, buffers, x, y)
print([tuple(t.shape) for t in g])
print(" ".join(f"{v:.5f}" for v in g[-1][2].tolist()))
models = [nn.Linear(4, 2) for _ in range(3)]
for k, m in enumerate(models):
    with torch.no_grad():
        m.weight.copy_(torch.full((2, 4), 0.1 * (k + 1))); m.bias.fill_(k)
fm, ps, bs = combine_state_for_ensemble(models)
out = vmap(fm, in_dims=(0, 0, None))(ps, bs, x)
print(tuple(out.shape), torch.allclose(out[1], models[1](x)))
