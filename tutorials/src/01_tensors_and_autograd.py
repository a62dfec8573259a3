# Source of tutorials/01_tensors_and_autograd.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 01

# %% [markdown]
# # 1. Tensors and autograd
#
# Training a network means following the gradient of a loss downhill, and the gradient has millions
# of entries. Nobody writes those derivatives by hand: the framework **records** every operation
# of the forward pass on a *tape* (really a graph), then walks that graph backwards applying the
# chain rule once per operation. This is reverse-mode automatic differentiation, and it is the
# whole of `minidl/autograd/`.
#
# In this notebook we
#
# 1. build the idea from scratch on scalars, in about 60 lines (the design of Karpathy's micrograd);
# 2. find the same pieces in `minidl.Tensor`: the graph, the topological order, `backward()`;
# 3. write a new differentiable op and check its gradient with `minidl.utils.gradcheck`;
# 4. see why gradients **accumulate**, what `zero_grad` is for, and what `no_grad` switches off;
# 5. train a tiny model with everything we built.
#
# The notebook has two modes, read from `MINIDL_TUTORIAL_MODE` in the first cell: `small` (a few
# seconds on a CPU; what CI runs) and `full` (more training steps, and the GPU when there is one).

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes a few seconds on a 2-core laptop CPU.
# Full mode (`MINIDL_TUTORIAL_MODE=full`: 3,000 training steps instead of 300) takes ~10 s there
# too; without a GPU its GPU cells print why they are skipped. The saved outputs come from a full run
# on a 2-core CPU (2026-11-26; the notebook's metadata records the run), so the GPU cell says it was
# skipped; on a GPU machine a second copy of
# the network trains there too.

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup()

import math
from pathlib import Path

import numpy as np
import matplotlib.pyplot as plt
import minidl

# %% [markdown]
# ## 1.1 A tape from scratch
#
# Every number we compute will be a `Value` that remembers
#
# * `data`: the number itself,
# * `grad`: d(final output) / d(this value), filled in by the backward pass,
# * `_parents`: the values it was computed from,
# * `_backward`: a small function that knows the **local** derivative of the operation that made it
#   and pushes this value's `grad` into its parents' `grad` (the chain rule, one step).
#
# For `c = a * b` the local derivatives are dc/da = b and dc/db = a, so `_backward` does
# `a.grad += b * c.grad` and `b.grad += a * c.grad`. Note the `+=`: we come back to it below.

# %%
class Value:
    """A scalar that records how it was computed, so that its gradient can be found."""

    def __init__(self, data, parents=(), op=""):
        self.data = float(data)
        self.grad = 0.0
        self._parents = parents
        self._op = op
        self._backward = lambda: None   # leaves have nothing to push further

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other), "+")

        def _backward():                # d(a+b)/da = d(a+b)/db = 1
            self.grad += out.grad
            other.grad += out.grad
        out._backward = _backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other), "*")

        def _backward():                # d(ab)/da = b, d(ab)/db = a
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        out._backward = _backward
        return out

    def tanh(self):
        t = math.tanh(self.data)
        out = Value(t, (self,), "tanh")

        def _backward():                # d tanh(x)/dx = 1 - tanh(x)^2: reuse the output
            self.grad += (1 - t * t) * out.grad
        out._backward = _backward
        return out

    __radd__ = __add__
    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def backward(self):
        """Fill in .grad of every value this one depends on."""
        # Topological order: each value after all the values it was computed from.
        order, seen = [], set()

        def visit(v):
            if id(v) not in seen:
                seen.add(id(v))
                for p in v._parents:
                    visit(p)
                order.append(v)
        visit(self)
        self.grad = 1.0                 # d(self)/d(self)
        # Reverse order: when a value's _backward runs, every consumer has already added its share
        # to value.grad, so the gradient it pushes on is complete.
        for v in reversed(order):
            v._backward()

    def __repr__(self):
        return f"Value(data={self.data:.4f}, grad={self.grad:.4f})"

# %% [markdown]
# A tiny neuron, `y = tanh(w1*x1 + w2*x2 + b)`, and its gradients. We check them against
# **finite differences**: nudge one input by ±h and watch the output move. That needs no calculus
# at all, which is what makes it a good referee (and a slow one: two forward passes per input).

# %%
def neuron(x1, x2, w1, w2, b):
    return (w1 * x1 + w2 * x2 + b).tanh()

inputs = dict(x1=2.0, x2=0.0, w1=-3.0, w2=1.0, b=6.8813735870195432)
vals = {k: Value(v) for k, v in inputs.items()}
y = neuron(**vals)
y.backward()

h = 1e-6
rows = []
for name in inputs:
    plus = dict(inputs, **{name: inputs[name] + h})
    minus = dict(inputs, **{name: inputs[name] - h})
    numeric = (neuron(**{k: Value(v) for k, v in plus.items()}).data
               - neuron(**{k: Value(v) for k, v in minus.items()}).data) / (2 * h)
    rows.append([name, vals[name].grad, numeric, abs(vals[name].grad - numeric)])
display(tu.Table(["input", "tape gradient", "finite difference", "|difference|"], rows,
                 title=f"y = {y.data:.6f}"))
assert all(r[3] < 1e-6 for r in rows)

# %% [markdown]
# ### Why `+=`: a value used twice
#
# If a value feeds two operations, the loss depends on it along **two paths**, and the multivariate
# chain rule says its gradient is the **sum** over the paths. In `b = a * a`, `a` is both factors,
# so db/da = a + a = 2a. With `=` instead of `+=`, the second path overwrites the first. Here is
# that bug, on purpose:

# %%
class ValueWithBug(Value):
    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = ValueWithBug(self.data * other.data, (self, other), "*")

        def _backward():
            self.grad = other.data * out.grad      # BUG: = instead of +=
            other.grad = self.data * out.grad
        out._backward = _backward
        return out

a_good, a_bad = Value(3.0), ValueWithBug(3.0)
(a_good * a_good).backward()
(a_bad * a_bad).backward()
print(f"d(a*a)/da at a=3: with += {a_good.grad}, with = {a_bad.grad}  (the right answer is 2a = 6)")
assert a_good.grad == 6.0 and a_bad.grad == 3.0

# %% [markdown]
# The same summing is what makes gradients **accumulate across backward passes**: `.grad` is only
# ever added to. Call `backward()` twice and the gradients double, unless someone resets them first.
# We will see in 1.4 that this is a feature.
#
# ## 1.2 The same machinery in minidl
#
# `minidl.Tensor` does exactly this, for arrays instead of scalars:
#
# | scalar `Value` | `minidl.Tensor` |
# | --- | --- |
# | `data` (a float) | `tensor._data` (a NumPy or CuPy array) |
# | `grad` | `tensor.grad` (a Tensor, `None` until a backward pass reaches it) |
# | the closure `_backward` | a `Function` object (`tensor.grad_fn`) with `forward` and `backward` methods |
# | `_parents` | `grad_fn.inputs` |
#
# One class per operation, forward and backward together, working on plain arrays so the same op
# serves the CPU (NumPy) and the GPU (CuPy). The operations live in `minidl/ops/`, one file per family
# (elementwise, reductions, shape, indexing, linalg, ...); `minidl/autograd/` keeps only the tensor itself
# and the tape. Here is
# minidl's multiplication, from `minidl/ops/elementwise.py`:

# %% tags=["listing"]
import inspect
from minidl.ops import elementwise
print(tu.python_source(elementwise.Mul))

# %% [markdown]
# Three details beside the rule itself: `_conj` conjugates a complex factor (for real numbers it does
# nothing); `mixed` notes a float32 times a 16-bit tensor, whose 16-bit gradient is cast back to its own
# dtype; and `backward_graph` is the same backward written with tensor operations instead of arrays, which
# the tape records when you ask for second derivatives (`create_graph=True`, minidl/autograd/higher_order.py).
#
# `unbroadcast` is the array version of "sum over paths": if `b` was broadcast (say a bias of
# shape `(3,)` added to every row of a `(5, 3)` matrix), each element of `b` was used five times,
# so its gradient is the sum of five gradients.
#
# Let us run the neuron again, now with tensors, and look at the graph that the forward pass left
# behind. `retain_graph=True` keeps the saved arrays after backward so we can inspect it.

# %%
x = minidl.tensor([2.0, 0.0], dtype=minidl.float64)
w = minidl.tensor([-3.0, 1.0], dtype=minidl.float64, requires_grad=True)
b = minidl.tensor(6.8813735870195432, dtype=minidl.float64, requires_grad=True)
y_t = ((w * x).sum() + b).tanh()

def show_graph(t, depth=0):
    """Print the graph below t: each Function, then the tensors it was applied to."""
    fn = t.grad_fn
    label = "leaf" + (" (requires_grad)" if t.requires_grad else "") if fn is None else fn.name
    print("    " * depth + f"{label}  shape={t.shape}")
    if fn is not None:
        for parent in fn.inputs:
            if parent is not None:
                show_graph(parent, depth + 1)

show_graph(y_t)
y_t.backward(retain_graph=True)
print("dy/dw =", w.grad.numpy(), " dy/db =", b.grad.item())
print("scalar tape gave:", vals["w1"].grad, vals["w2"].grad, vals["b"].grad)
assert np.allclose(w.grad.numpy(), [vals["w1"].grad, vals["w2"].grad]) and np.isclose(b.grad.item(), vals["b"].grad)

# %% [markdown]
# The same graph, drawn by `minidl.utils.draw_graph` (micrograd's `draw_dot`, torchviz's `make_dot`):
# grey boxes are the Functions, blue ones the leaves that want a gradient (named, since we pass them
# in `params`), and each arrow carries the tensor that flows along it, with its shape and dtype.
# `show_saved=True` adds what each Function keeps for backward: that memory is held from the
# forward pass until backward frees it. (`show_kernels=True` adds the primitive each Function calls and
# where its NumPy reference or CUDA kernel lives: try it on a CNN's loss.)

# %%
minidl.utils.draw_graph(y_t, params={"w": w, "b": b}, show_saved=True)

# %% [markdown]
# `backward()` itself lives in `minidl/autograd/function.py`. The topological sort is the same
# depth-first search as in `Value.backward`, written with an explicit stack, because the graph of a
# recurrent network unrolled over hundreds of steps is deeper than Python's recursion limit:

# %%
from minidl.autograd import function as autograd_function
print(inspect.getsource(autograd_function._topological_order))
order = autograd_function._topological_order(y_t.grad_fn)
print("backward runs the Functions in this order:", " -> ".join(fn.name for fn in order))

# %% [markdown]
# `run_backward` then walks that order. Two details differ from the scalar version and matter in
# practice: gradients flowing into an intermediate tensor wait in a `pending` dictionary until
# every consumer has contributed (the sum over paths again), and after the pass each Function's
# saved arrays are **freed** (`_release`) unless `retain_graph=True`, because those saved
# activations are most of a network's training memory. A second backward through a freed graph is
# an error, not a silent wrong answer:

# %%
z = (w * w).sum()
z.backward()
try:
    z.backward()
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# ## 1.3 A new op, and checking its gradient
#
# To add an operation to minidl you write a `Function` subclass: `forward` gets plain arrays and
# saves what backward will need on `self`; `backward` gets d(loss)/d(output) and returns
# d(loss)/d(input), one per input, with the input's shape. Here is softplus,
# `log(1 + e^x)`, whose derivative is the sigmoid. The forward uses the stable form
# `max(x, 0) + log1p(exp(-|x|))`, which never overflows. `get_array_module` returns NumPy or CuPy
# depending on the array, so the op works on both devices.

# %%
from minidl.autograd.function import Function
from minidl.primitives import get_array_module

class Softplus(Function):
    def forward(self, x):
        xp = get_array_module(x)
        self.x = x
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, grad_out):
        xp = get_array_module(grad_out)
        sigmoid = 0.5 * (1 + xp.tanh(0.5 * self.x))    # = 1 / (1 + e^-x), without overflow
        return grad_out * sigmoid

class SoftplusWrongBackward(Softplus):
    def backward(self, grad_out):                       # a plausible-looking mistake: e^x / (1 + e^x)^2
        xp = get_array_module(grad_out)
        s = 0.5 * (1 + xp.tanh(0.5 * self.x))
        return grad_out * s * (1 - s)

# %% [markdown]
# `minidl.utils.gradcheck(fn, inputs)` compares autograd's gradient of `sum(fn(x) * c)` (a random
# `c`, so that mixing up output positions is caught too) with central finite differences,
# `(L(x + eps) - L(x - eps)) / 2 eps`, in float64, element by element for small inputs and along
# random directions for large ones. float64 matters: with float32's 7 digits, the difference of two
# nearly equal losses is mostly rounding noise.

# %%
from minidl.utils import gradcheck

minidl.manual_seed(0)
xs = minidl.randn(4, 5, dtype=minidl.float64, requires_grad=True)
print("Softplus:              gradcheck ->", gradcheck(lambda t: Softplus.apply(t), (xs,)))
ok = gradcheck(lambda t: SoftplusWrongBackward.apply(t), (xs,), raise_exception=False)
print("SoftplusWrongBackward: gradcheck ->", ok)
assert ok is False
try:
    gradcheck(lambda t: SoftplusWrongBackward.apply(t), (xs,))
except Exception as e:
    print(f"\n{type(e).__name__}: {str(e)[:300]}")

# %% [markdown]
# ## 1.4 Gradients accumulate: `zero_grad`, and why it is a feature
#
# Because `.grad` is only ever added to, two backward passes give the sum of the two gradients.
# That is why every training loop calls `optimizer.zero_grad()` (or `model.zero_grad()`) before
# `loss.backward()`: otherwise step *t* would follow the sum of all gradients so far.
#
# The same behaviour is useful on purpose. When a batch does not fit in memory, split it into
# micro-batches, call backward on each, and step once: the accumulated gradient **is** the gradient
# of the whole batch (with the loss of each micro-batch scaled by its share). Let us verify that
# with a linear layer.

# %%
import minidl.nn as nn
import minidl.nn.functional as F

minidl.manual_seed(1)
layer = nn.Linear(6, 3).double()
inputs_b = minidl.randn(8, 6, dtype=minidl.float64)
targets_b = minidl.randn(8, 3, dtype=minidl.float64)

# The whole batch at once.
layer.zero_grad()
F.mse_loss(layer(inputs_b), targets_b).backward()
full_grad = layer.weight.grad.numpy().copy()

# Two micro-batches of 4, each loss scaled by 4/8, gradients accumulated.
layer.zero_grad()
for part in (slice(0, 4), slice(4, 8)):
    (F.mse_loss(layer(inputs_b[part]), targets_b[part]) * 0.5).backward()
accumulated = layer.weight.grad.numpy()
print("max |full batch - accumulated micro-batches| =", np.abs(full_grad - accumulated).max())
assert np.allclose(full_grad, accumulated, rtol=1e-12, atol=1e-12)

# Forgetting zero_grad: one more backward on the full batch adds the gradient a second time.
F.mse_loss(layer(inputs_b), targets_b).backward()
print("without zero_grad the gradient is now", np.abs(layer.weight.grad.numpy()).sum() / np.abs(full_grad).sum(),
      "times too large")

# %% [markdown]
# ## 1.5 `no_grad`: computing without recording
#
# Recording costs memory (every saved input) and a little time. Evaluation does not need gradients,
# and an optimizer's update `p -= lr * p.grad` must **not** be recorded, or the next backward would
# differentiate through the update itself. Inside `with minidl.no_grad():` operations return
# tensors with no `grad_fn` and nothing is saved.

# %%
a = minidl.randn(3, requires_grad=True)
with_tape = (a * 2).sum()
with minidl.no_grad():
    without_tape = (a * 2).sum()
print("recorded:    requires_grad =", with_tape.requires_grad, " grad_fn =", with_tape.grad_fn.name)
print("in no_grad:  requires_grad =", without_tape.requires_grad, " grad_fn =", without_tape.grad_fn)

# %% [markdown]
# ## 1.6 Putting it together: fitting a curve
#
# A two-layer network fits `y = sin(x)` on [-3, 3]. First the update by hand, exactly what an
# optimizer does: `zero_grad`, forward, backward, then `p -= lr * grad` under `no_grad`. In full mode
# it trains longer and, when there is a GPU, a second copy trains there: the code is identical
# except for `.to("cuda")`.

# %%
def make_data(device):
    """128 points of sin on [-3, 3], as (128, 1) float32 tensors (the target made with NumPy)."""
    grid = np.linspace(-3, 3, 128, dtype=np.float32).reshape(128, 1)
    return minidl.tensor(grid).to(device), minidl.tensor(np.sin(grid)).to(device)

def train(device, steps, lr=0.05):
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    xs, ys = make_data(device)
    losses = []
    for _ in range(steps):
        model.zero_grad()
        loss = F.mse_loss(model(xs), ys)
        loss.backward()
        with minidl.no_grad():
            for p in model.parameters():
                p._data -= lr * p.grad._data          # the SGD update, on the raw array
        losses.append(loss.item())
    return model, losses

STEPS = 300 if MODE == "small" else 3000
model, losses = train("cpu", STEPS)
print(f"CPU: loss {losses[0]:.4f} -> {losses[-1]:.4f} after {STEPS} steps")
assert losses[-1] < 0.5 * losses[0]

# %%
if USE_GPU:
    gpu_model, gpu_losses = train("cuda", STEPS)
    print(f"GPU: loss {gpu_losses[0]:.4f} -> {gpu_losses[-1]:.4f}; "
          f"largest difference from the CPU run: {max(abs(a - b) for a, b in zip(losses, gpu_losses)):.2e}")
else:
    gpu_losses = None
    print("GPU run skipped:", WHY_NOT_GPU)

# %%
xs, ys = make_data("cpu")
with minidl.no_grad():
    pred = model(xs)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
ax1.semilogy(losses, label="CPU")
if gpu_losses is not None:
    ax1.semilogy(gpu_losses, "--", label="GPU")
ax1.set_xlabel("step"); ax1.set_ylabel("MSE loss"); ax1.set_title("training loss"); ax1.legend()
ax2.plot(xs.numpy().ravel(), ys.numpy().ravel(), label="sin(x)")
ax2.plot(xs.numpy().ravel(), pred.numpy().ravel(), "--", label="network")
ax2.set_title(f"after {STEPS} steps"); ax2.legend()
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# The same loop with `minidl.optim.SGD` (momentum included) is three lines shorter; the optimizer's
# `step()` is the `no_grad` update above, and `zero_grad()` sets every `.grad` to `None`:

# %%
minidl.manual_seed(0)
model2 = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
opt = minidl.optim.SGD(model2.parameters(), lr=0.05, momentum=0.9)
xs, ys = make_data("cpu")
for step in range(STEPS):
    opt.zero_grad()
    loss = F.mse_loss(model2(xs), ys)
    loss.backward()
    opt.step()
print(f"SGD with momentum: final loss {loss.item():.5f} (plain updates above: {losses[-1]:.5f})")

# %% [markdown]
# ## Exercises
#
# 1. Add `__pow__` (for a constant exponent), `exp` and `relu` to `Value`, and check each with
#    finite differences. Then train a one-hidden-layer MLP made of `Value`s on four points.
# 2. `Value.backward` uses recursion. Build a chain `x -> x*1.0001 -> ...` of 5000 multiplications:
#    what breaks? Rewrite `visit` with an explicit stack, as `_topological_order` does.
# 3. Write `Function`s for `Sigmoid` and for `LogSumExp` over the last axis (stable: subtract the
#    max). Check both with `gradcheck`, then break each backward on purpose and see gradcheck fail.
# 4. Why must `gradcheck` inputs be float64? Run it on a float32 input (cast it inside `fn`) with
#    `eps=1e-3` and `eps=1e-6`, and explain both results.
# 5. Gradient accumulation: train the curve fit with micro-batches of 32 and one `opt.step()` per 128
#    points. How must each micro-batch loss be scaled so the result matches full-batch training?
# 6. In `train`, move the update outside `no_grad`. What error or wrong behaviour do you get, and why?

# %% [markdown]
# ## Appendix: a PyTorch program on minidl
#
# minidl keeps PyTorch's names, so a program written for PyTorch runs on it unchanged:
# `python -m minidl.run program.py` makes `import torch` (and `torch.nn`, `torch.optim`,
# `torch.utils.data`, torchvision's datasets and transforms) give minidl. Here is the network of
# PyTorch's 60-minute tutorial, one SGD step of it, run through the same hook in this process, with
# a profile of the primitive-library calls it made (`cProfile`, keeping the `minidl/primitives`
# rows). docs/TORCH_COMPAT.md lists which PyTorch names exist.

# %%
import cProfile
import pstats
import runpy
import tempfile

import minidl.run

PYTORCH_PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)

net = Net()
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
input, target = torch.randn(4, 1, 32, 32), torch.randn(4, 10)
optimizer.zero_grad()
loss = nn.MSELoss()(net(input), target)
loss.backward()
optimizer.step()
print("loss", loss.item(), "| grad_fn", loss.grad_fn, "| torch.nn.Conv2d is", torch.nn.Conv2d)
'''
with tempfile.TemporaryDirectory() as tmp:
    program = Path(tmp) / "blitz.py"
    program.write_text(PYTORCH_PROGRAM)
    minidl.run.install()
    try:
        profiler = cProfile.Profile()
        profiler.runcall(runpy.run_path, str(program), run_name="__main__")
    finally:
        minidl.run.uninstall()
pstats.Stats(profiler).sort_stats("cumulative").print_stats(r"primitives/[a-z_]+\.py:.*(forward|backward)", 10)
