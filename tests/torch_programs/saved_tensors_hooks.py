"""PyTorch's tutorial "Hooks for autograd saved tensors" in brief: pack / unpack hooks that print what a product
saves, a pack hook that changes the saved value (the gradient follows it), saving to disk through temporary files,
torch.autograd.graph.save_on_cpu, a custom Function's save_for_backward under hooks, and
disable_saved_tensors_hooks. Fixed values, so that the output is the same on any framework that runs it."""
import torch, torch.nn as nn, os, tempfile, uuid
def pack_hook(x):
    print("Packing", tuple(x.shape), x.requires_grad)
    return x
def unpack_hook(x):
    print("Unpacking", tuple(x.shape))
    return x
a = torch.ones(5, requires_grad=True)
b = torch.ones(5, requires_grad=True) * 2
with torch.autograd.graph.saved_tensors_hooks(pack_hook, unpack_hook):
    y = a * b
y.sum().backward()
print(a.grad)
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(lambda t: t * 2, lambda t: t):
    z = x.pow(2)
z.sum().backward()
print(x.grad)   # torch: the saved x doubled -> 2 * (2x) = 4x
class SelfDeletingTempFile():
    def __init__(self):
        self.name = os.path.join(tempfile.gettempdir(), str(uuid.uuid4()))
    def __del__(self):
        os.remove(self.name)
def pack_to_disk(tensor):
    temp_file = SelfDeletingTempFile()
    torch.save(tensor, temp_file.name)
    return temp_file
def unpack_from_disk(temp_file):
    return torch.load(temp_file.name, weights_only=True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
inp = torch.arange(8.0).reshape(2, 4) / 8
out1 = model(inp).sum(); out1.backward(); g1 = [p.grad.clone() for p in model.parameters()]; model.zero_grad()
with torch.autograd.graph.saved_tensors_hooks(pack_to_disk, unpack_from_disk):
    out2 = model(inp).sum()
out2.backward()
print(all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), g1)))
model.zero_grad()
with torch.autograd.graph.save_on_cpu():
    out3 = model(inp).sum()
out3.backward()
print(all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), g1)))
class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g
x = torch.tensor([1.0, 2.0], requires_grad=True)
with torch.autograd.graph.saved_tensors_hooks(lambda t: (print("pack custom", t.requires_grad), t * 10)[1], lambda t: t):
    s = Square.apply(x)
s.sum().backward(); print(x.grad)
with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
    try:
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            pass
    except RuntimeError as e:
        print("RuntimeError", e)
