"""Names that real programs use in passing: torch.pi / e / inf / nan, torch.dtype, a custom scheduler subclassing
_LRScheduler, optimizer step hooks, torch.autograd.backward on several tensors, random.fork_rng, abs() / % / ^ on
tensors, torch.utils.benchmark.Timer, EmbeddingBag.from_pretrained, get_buffer / set_submodule, default_convert."""
import torch, torch.nn as nn, math
import torch.utils.benchmark as benchmark
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.hooks import RemovableHandle
print(round(torch.pi, 6), round(torch.e, 6), torch.inf, math.isnan(torch.nan), isinstance(torch.ones(1).dtype, torch.dtype), torch.short == torch.int16)
class WarmUp(_LRScheduler):
    def __init__(self, optimizer, total, last_epoch=-1):
        self.total = total
        super().__init__(optimizer, last_epoch)
    def get_lr(self):
        return [base * min(1.0, (self.last_epoch + 1) / self.total) for base in self.base_lrs]
m = nn.Linear(3, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
calls = []
h = opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
s = WarmUp(opt, 4)
for _ in range(3):
    opt.zero_grad(); m(torch.ones(1, 3)).sum().backward(); opt.step(); s.step()
    print(round(opt.param_groups[0]["lr"], 4))
h.remove(); opt.step(); print(calls)
x = torch.tensor([1.0, 2.0], requires_grad=True); y = torch.tensor([3.0], requires_grad=True)
torch.autograd.backward([(x * 2).sum(), (y * x[0])], [torch.tensor(1.0), torch.tensor([2.0])])
print(x.grad.tolist(), y.grad.tolist())
with torch.random.fork_rng():
    a = torch.rand(2)
print(torch.equal(a, torch.rand(2)) or True)
print(abs(torch.tensor([-2.0])).tolist(), (7 % torch.tensor([3])).tolist(), (torch.tensor([5]) ^ 3).tolist())
t = benchmark.Timer(stmt="m(inp)", globals={"m": m, "inp": torch.ones(4, 3)})
r = t.timeit(10)
print(r.mean > 0, type(r).__name__)
eb = nn.EmbeddingBag.from_pretrained(torch.eye(3), mode="sum")
print(eb(torch.tensor([[0, 2]])).tolist(), eb.weight.requires_grad)
net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
print(tuple(net.get_buffer("1.running_mean").shape)); net.set_submodule("0", nn.Identity()); print(type(net[0]).__name__)
print(torch.utils.data.default_convert({"a": [1, 2]}))
