"""The TorchScript marks model code carries, run eagerly: a @torch.jit.script helper, `torch.jit.is_scripting()`
guards (timm's style), @torch.jit.ignore / @torch.jit.unused methods, a `Final` attribute, torch.jit.trace of a
module and of a function, torch.jit.fork / wait, and a scripted model trained for a few steps."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from typing import List


@torch.jit.script
def fused_gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class Block(nn.Module):
    scale: torch.jit.Final[float]

    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.scale = 0.5

    @torch.jit.ignore
    def describe(self) -> str:
        return f"Block({self.fc.in_features})"

    @torch.jit.unused
    def debug(self, x):
        return x.sum()

    def forward(self, x):
        if not torch.jit.is_scripting() and not torch.jit.is_tracing():
            x = x + 0.0   # (an eager-only path, as timm's checkpointing guards)
        return fused_gelu(self.fc(x)) * self.scale + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(4) for _ in range(2)])
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        outs: List[torch.Tensor] = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        return self.head(x), len(outs)


def deterministic_(model):
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_((torch.sin(torch.arange(p.numel(), dtype=torch.float64) * 0.7 + i) * 0.3).reshape(p.shape))
    return model


x = (torch.cos(torch.arange(24, dtype=torch.float64) * 0.3)).reshape(6, 4)
y = torch.tensor([0, 1, 2, 0, 1, 2])
net = deterministic_(Net().double())
scripted = torch.jit.script(net)
traced = torch.jit.trace(net.blocks[0], (x,))
traced_fn = torch.jit.trace(fused_gelu, (x,))
print(net.blocks[0].describe(), float(net.blocks[0].debug(x).detach()) != 0, round(float(traced(x).sum().detach()), 6),
      round(float(traced_fn(x).sum()), 6))
future = torch.jit.fork(fused_gelu, x)
print(round(float(torch.jit.wait(future).sum()), 6), torch.jit.is_scripting(), torch.jit.annotate(List[int], [1, 2]))
opt = torch.optim.SGD(scripted.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    logits, n = scripted(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    print(step, n, round(loss.item(), 6))
