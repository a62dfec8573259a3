"""A mixture density network (Bishop 1994) on the inverse problem of a noisy sine: x = y + 0.3 sin(2 pi y) + noise,
predict y from x. Several y fit one x, so a Gaussian mixture over y is the model, written with
torch.distributions.MixtureSameFamily; then a squashed-Gaussian policy step in the manner of soft actor-critic
(TransformedDistribution with a cached TanhTransform, rsample, log_prob) and a Gumbel-softmax sample.

Weights and data come from fixed formulas, not a random initialisation, so that the printed losses are the same on
any framework that runs it."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, MixtureSameFamily, Normal, TransformedDistribution
from torch.distributions.transforms import TanhTransform

torch.set_default_dtype(torch.float64)


def fixed_(module, k):
    with torch.no_grad():
        for j, p in enumerate(module.parameters()):
            n = p.numel()
            p.copy_((torch.sin(torch.arange(n, dtype=torch.float64) * (0.7 + 0.1 * j) + k + j) * 0.5).reshape(p.shape))


class MDN(nn.Module):
    def __init__(self, hidden=24, components=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, hidden), nn.Tanh())
        self.logits = nn.Linear(hidden, components)
        self.means = nn.Linear(hidden, components)
        self.log_scales = nn.Linear(hidden, components)

    def forward(self, x):
        h = self.body(x)
        mix = Categorical(logits=self.logits(h))
        comp = Normal(self.means(h), F.softplus(self.log_scales(h)) + 1e-3)
        return MixtureSameFamily(mix, comp)


n = 256
y = torch.linspace(0.0, 1.0, n).unsqueeze(1)
x = y + 0.3 * torch.sin(2 * math.pi * y) + 0.05 * torch.sin(97.0 * y)   # a deterministic "noise"
model = MDN()
fixed_(model, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(60):
    optimizer.zero_grad()
    loss = -model(x).log_prob(y.squeeze(1)).mean()
    loss.backward()
    optimizer.step()
    if step % 15 == 0 or step == 59:
        print(f"mdn step {step} nll {loss.item():.6f}")
with torch.no_grad():
    dist = model(torch.tensor([[0.5]]))
    print("mixture mean {:.6f} variance {:.6f}".format(dist.mean.item(), dist.variance.item()))

# a squashed Gaussian policy: its action's log-probability, and the policy-gradient step on a fixed "critic"
actor = nn.Linear(3, 4)
fixed_(actor, 2)
opt = torch.optim.SGD(actor.parameters(), lr=0.05)
state = torch.tensor([[0.1, -0.2, 0.3], [0.5, 0.0, -0.4]])
for step in range(3):
    mu, log_std = actor(state).chunk(2, dim=-1)
    tanh = TanhTransform(cache_size=1)
    policy = TransformedDistribution(Normal(mu, log_std.clamp(-5, 2).exp()), [tanh])
    pre = mu + log_std.exp() * torch.tensor([[0.3, -0.1], [1.5, 0.2]])     # a fixed "noise" instead of rsample's
    action = tanh(pre)
    log_prob = policy.log_prob(action).sum(-1)
    q = -(action - 0.25).pow(2).sum(-1)                                     # the critic's value of the action
    loss = (0.2 * log_prob - q).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"actor step {step} loss {loss.item():.6f} log_prob " + " ".join(f"{v:.6f}" for v in log_prob.tolist()))
