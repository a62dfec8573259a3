"""The torch.cuda idioms of older and newer programs, written to run on either device: the legacy tensor types
(`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`, `imgs.type(Tensor)`, from PyTorch-GAN), NVTX
ranges around a step (on the GPU: torch's CPU build has no NVTX), `torch.cuda.stream(None)` as a no-op, a generator seeded for the
device, and the out-of-memory except clause of a batch-size finder."""
import contextlib

import torch
import torch.nn as nn
from torch.autograd import Variable

cuda = torch.cuda.is_available()
device = torch.device("cuda" if cuda else "cpu")
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor
print(Tensor.__name__, isinstance(torch.ones(1, device=device), Tensor))
imgs = torch.arange(12.0).reshape(3, 4)
real = Variable(imgs.type(Tensor))
valid = Variable(Tensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)
labels = Variable(LongTensor([0, 2, 1]))
print(real.type() == Tensor().type(), valid.tolist(), labels.tolist(), real.dtype == torch.float32)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 3)).to(device)
with torch.no_grad():
    net[0].weight.copy_(torch.linspace(-1, 1, 12).reshape(3, 4))
    net[0].bias.zero_()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(2):
    if cuda:
        torch.cuda.nvtx.range_push(f"step {step}")
    with torch.cuda.nvtx.range("forward") if cuda else contextlib.nullcontext():
        loss = nn.functional.cross_entropy(net(real), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if cuda:
        torch.cuda.nvtx.range_pop()
    print(step, round(loss.item(), 5))
with torch.cuda.stream(None):
    print(round(net(real).sum().item(), 4))
g = torch.Generator(device=device).manual_seed(7)
print(g.initial_seed(), tuple(torch.rand(2, 3, generator=g, device=device).shape))
def try_batch(n):
    if n > 3:   # (what a real out-of-memory looks like to the program: an error on a big batch)
        raise RuntimeError("CUDA out of memory (simulated)")


for batch in (4, 2):
    try:
        try_batch(batch)
        print("fits", batch)
        break
    except torch.cuda.OutOfMemoryError:
        print("out of memory", batch)
    except RuntimeError as e:
        print("too big" if "out of memory" in str(e) else "error", batch)
