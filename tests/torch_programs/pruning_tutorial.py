"""Pruning a LeNet, in the steps of PyTorch's "Pruning Tutorial" (torch.nn.utils.prune): random and L1 unstructured
pruning, Ln structured pruning, iterative pruning, making it permanent, pruning a whole model, global pruning, a
custom pruning method; then a few training steps of the pruned model, whose pruned weights must stay zero.

The weights are set from a fixed formula instead of a random initialisation, so that everything but the random
pruning (of which only counts are printed) comes out the same on any framework that runs it."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune


class LeNet(nn.Module):
    def __init__(self):
        super(LeNet, self).__init__()
        # 1 input image channel, 6 output channels, 5x5 square conv kernel
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5x5 image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.view(-1, int(x.nelement() / x.shape[0]))
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def fixed_weights(model):
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            n = p.numel()
            values = torch.sin(torch.arange(n, dtype=torch.float32) * (0.37 + 0.05 * k) + k) / math.sqrt(n / p.shape[0])
            p.copy_(values.reshape(p.shape))


def sparsity(t):
    return 100. * float(torch.sum(t == 0)) / float(t.nelement())


torch.manual_seed(0)
model = LeNet()
fixed_weights(model)
module = model.conv1
print(list(module.named_parameters())[0][0], list(module.named_buffers()))

prune.random_unstructured(module, name="weight", amount=0.3)
print([name for name, _ in module.named_parameters()])
print([name for name, _ in module.named_buffers()])
print("conv1.weight pruned:", int(torch.sum(module.weight_mask == 0)))
print(len(module._forward_pre_hooks), "pre-hook")

prune.l1_unstructured(module, name="bias", amount=3)
print("bias mask:", module.bias_mask.tolist())
print("bias:", [round(v, 4) for v in module.bias.tolist()])

prune.ln_structured(module, name="weight", amount=0.5, n=2, dim=0)
print("channels kept:", int((module.weight_mask.sum(dim=(1, 2, 3)) > 0).sum()))
for hook in module._forward_pre_hooks.values():
    if hook._tensor_name == "weight":
        break
print([type(method).__name__ for method in hook])
print(sorted(model.state_dict().keys()))

prune.remove(module, "weight")
print([name for name, _ in module.named_parameters()])
print([name for name, _ in module.named_buffers()])

new_model = LeNet()
fixed_weights(new_model)
for name, module in new_model.named_modules():
    if isinstance(module, torch.nn.Conv2d):
        prune.l1_unstructured(module, name='weight', amount=0.2)
    elif isinstance(module, torch.nn.Linear):
        prune.l1_unstructured(module, name='weight', amount=0.4)
print(dict(new_model.named_buffers()).keys())

model = LeNet()
fixed_weights(model)
parameters_to_prune = (
    (model.conv1, 'weight'),
    (model.conv2, 'weight'),
    (model.fc1, 'weight'),
    (model.fc2, 'weight'),
    (model.fc3, 'weight'),
)
prune.global_unstructured(parameters_to_prune, pruning_method=prune.L1Unstructured, amount=0.2)
for name in ("conv1", "conv2", "fc1", "fc2", "fc3"):
    print("Sparsity in {}.weight: {:.2f}%".format(name, sparsity(getattr(model, name).weight)))
total = sum(float(torch.sum(getattr(model, n).weight == 0)) for n in ("conv1", "conv2", "fc1", "fc2", "fc3"))
count = sum(float(getattr(model, n).weight.nelement()) for n in ("conv1", "conv2", "fc1", "fc2", "fc3"))
print("Global sparsity: {:.2f}%".format(100. * total / count))


class FooBarPruningMethod(prune.BasePruningMethod):
    """Prune every other entry in a tensor"""
    PRUNING_TYPE = 'unstructured'

    def compute_mask(self, t, default_mask):
        mask = default_mask.clone()
        mask.view(-1)[::2] = 0
        return mask


def foobar_unstructured(module, name):
    FooBarPruningMethod.apply(module, name)
    return module


model = LeNet()
fixed_weights(model)
foobar_unstructured(model.fc3, name='bias')
print(model.fc3.bias_mask)

# train the globally pruned model a little: the pruned weights get no gradient and stay zero
model = LeNet()
fixed_weights(model)
prune.global_unstructured([(getattr(model, n), "weight") for n in ("conv1", "conv2", "fc1", "fc2", "fc3")],
                          pruning_method=prune.L1Unstructured, amount=0.5)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.sin(torch.arange(8 * 32 * 32, dtype=torch.float32) * 0.01).reshape(8, 1, 32, 32)
y = torch.arange(8) % 10
for step in range(3):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    print("step {} loss {:.4f}".format(step, loss.item()))
print("fc1 sparsity after training: {:.2f}%".format(sparsity(model.fc1.weight)))
print("fc1.weight_orig zeros where masked:", bool((model.fc1.weight[model.fc1.weight_mask == 0] == 0).all()))
