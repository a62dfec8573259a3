# Source of tutorials/04_cnn_mnist.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 04

# %% [markdown]
# # 4. A CNN on MNIST, on the CPU and on the GPU
#
# Tutorials 1-3 built the pieces: tensors and the autograd tape, GPU kernels, convolution
# algorithms. Here they train a real network end to end. A **convolutional neural network** (CNN)
# learns to read handwritten digits from MNIST: 60,000 training and 10,000 test images of 28 x 28
# grey pixels, each labelled 0-9. We go through the four parts of every supervised training script:
#
# 1. **data**: read the images, scale them, and feed them in shuffled mini-batches;
# 2. **model**: convolutions, pooling and linear layers, written as an `nn.Module`;
# 3. **training loop**: forward, loss, backward, optimizer step, many times;
# 4. **evaluation**: accuracy on images the model never trained on.
#
# Then the same model runs on the CPU path (the NumPy reference primitives) and on the GPU (the
# CUDA kernels), and we measure the time per epoch and the speedup.
#
# The notebook has two modes, read from `MINIDL_TUTORIAL_MODE` in the first cell: `small` (the
# default; a few seconds on a CPU, a thousand images) and `full` (all of MNIST, several epochs,
# and the GPU when there is one).

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes ~10 s on a 2-core CPU: 1,024 training
# images, or, without MNIST on disk, synthetic digits-like images (every figure then says SYNTHETIC).
# Full mode reads all of MNIST and trains the CPU model for 100 steps (~1.5 minutes on 2 cores; the GPU
# epochs are skipped without a GPU). The saved outputs come from a full run on an H200 (32 s).

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile="all")   # compile every kernel now: no timing below may include NVRTC

import time

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.data import MNIST, DataLoader, TensorDataset, data_root

CPU_LABEL = tu.device_label(False)    # the CPU run's label, also on the GPU machine

# %% [markdown]
# ## 4.1 The data
#
# `minidl.data.MNIST` reads LeCun's idx files from the data root: `$MINIDL_DATA` when it is set,
# else `~/.cache/minidl` (where it downloads them when they are missing). `data` holds the raw
# pixels as a uint8 tensor (N, 28, 28), `targets` the labels as an int64 tensor (N,), as torchvision's.

# %%
def load_mnist(download):
    return MNIST(train=True, download=download), MNIST(train=False, download=download)

def synthetic_mnist():
    digits = [str(k) for k in range(10)]
    return (tu.SyntheticImages(3000, (28, 28), digits, seed=1), tu.SyntheticImages(1000, (28, 28), digits, seed=2))

(train_raw, test_raw), REAL_DATA = tu.load_dataset(MODE, "MNIST", load_mnist, synthetic_mnist)
print("data root:", data_root())
print(train_raw, "\n", test_raw)
print("pixels:", train_raw.data.dtype, train_raw.data.shape, " labels:", train_raw.targets.dtype, train_raw.targets.shape)
print("images per class (train):", np.bincount(train_raw.targets, minlength=10))

fig, axes = plt.subplots(2, 10, figsize=(10, 2.4))
for ax, i in zip(axes.ravel(), range(20)):
    ax.imshow(train_raw.data[i], cmap="gray_r")
    ax.set_title(str(int(train_raw.targets[i])), fontsize=9)
    ax.axis("off")
fig.suptitle("the first 20 training images and their labels" + ("" if REAL_DATA else " (SYNTHETIC stand-in)"))
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, CPU_LABEL, MODE)
plt.show()

# %% [markdown]
# **Scaling.** Networks train best on inputs of mean about 0 and standard deviation about 1: a
# layer's initial weights are drawn for inputs of that size (tutorial 1's `init`), and with raw
# pixels in 0..255 the first pre-activations would be a hundred times too large. So the pixels
# become float32 in [0, 1], then `(x - mean) / std` with the training set's mean and standard
# deviation (computed here; for MNIST they are the well-known 0.1307 and 0.3081). A channel axis is
# added: convolutions take (N, C, H, W), here C = 1.
#
# **Batches on the device.** The whole dataset goes into tensors on the training device once. A
# `DataLoader` over a `TensorDataset` then cuts each shuffled batch by indexing those tensors, on
# the device: no copy from the host per step, which would otherwise keep a GPU waiting. This is
# its fast path:

# %% tags=["listing"]
print(tu.python_source(DataLoader._iter_fast))

# %%
TRAIN_N = 1024 if MODE == "small" else len(train_raw)   # small mode: a thousand images
TEST_N = 500 if MODE == "small" else len(test_raw)

def to_float(raw, n, mean=None, std=None):
    """uint8 (N, 28, 28) -> float32 (n, 1, 28, 28), standardised with the given (training) statistics."""
    x = np.asarray(raw.data[:n]).astype(np.float32)[:, None] / np.float32(255.0)
    mean = float(x.mean()) if mean is None else mean
    std = float(x.std()) if std is None else std
    return (x - np.float32(mean)) / np.float32(std), mean, std

x_train, MEAN, STD = to_float(train_raw, TRAIN_N)
x_test, _, _ = to_float(test_raw, TEST_N, MEAN, STD)
y_train = np.asarray(train_raw.targets[:TRAIN_N])   # NumPy int64 labels (MNIST keeps a tensor, as torchvision)
y_test = np.asarray(test_raw.targets[:TEST_N])
print(f"train {x_train.shape}, test {x_test.shape}; mean {MEAN:.4f}, std {STD:.4f}; "
      f"after scaling: mean {x_train.mean():.3f}, std {x_train.std():.3f}")

def make_datasets(device):
    """(train, test) TensorDatasets with the arrays already on `device`."""
    return (TensorDataset(minidl.tensor(x_train, device=device), minidl.tensor(y_train, device=device)),
            TensorDataset(minidl.tensor(x_test, device=device), minidl.tensor(y_test, device=device)))

# %% [markdown]
# ## 4.2 The model
#
# A LeNet-style CNN: two blocks of *convolution - ReLU - 2x2 max pooling*, then two linear layers.
# A 5x5 convolution with padding 2 keeps the 28 x 28 size and lets every output pixel look at a
# 5 x 5 neighbourhood; pooling halves the size, so the second block sees 10 x 10 patches of the
# image; the linear layers combine what the 32 feature maps found into 10 **logits**, one score per
# digit (the larger, the more likely; softmax turns them into probabilities).

# %%
class ConvNet(nn.Module):
    """(N, 1, 28, 28) -> (N, 16, 14, 14) -> (N, 32, 7, 7) -> 1568 -> 128 -> (N, 10) logits."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))

minidl.manual_seed(0)
model = ConvNet()
print(model)
x = minidl.tensor(x_train[:2])
rows = []
for layer in list(model.features) + list(model.classifier):
    x = layer(x)
    params = sum(p.numel() for p in layer.parameters())
    rows.append([type(layer).__name__, str(tuple(x.shape)), params])
display(tu.Table(["layer", "output shape (batch of 2)", "parameters"], rows,
                 title=f"{sum(p.numel() for p in model.parameters()):,} parameters in all"))

# %% [markdown]
# What runs under `nn.Conv2d`? The layer owns its convolution descriptor and, per input shape, a
# `ConvolutionPlan` (tutorial 3: the problem is checked and described once, the algorithm picked by
# the policy once per direction). It applies one autograd `Function`, `F.convolution.Convolution`: its `forward`
# runs the plan's forward (the NumPy reference on a NumPy array, a CUDA kernel on a CuPy array), and
# its `backward` the gradient directions. The layer never knows which device it is on.

# %% tags=["listing"]
print(tu.python_source(F.convolution.Convolution.forward, F.convolution.Convolution.backward))

# %% [markdown]
# ## 4.3 Loss, training loop, evaluation
#
# The loss is the **cross-entropy** of the logits against the label: `-log softmax(z)[label]`,
# averaged over the batch. It is small when the model gives the right digit a high probability.
# minidl computes it as one fused op whose gradient is simply `softmax(z) - onehot(label)`.
#
# One training **step**: forward the batch, compute the loss, `zero_grad` (gradients accumulate,
# tutorial 1), `backward`, `optimizer.step()`. One **epoch** is a pass over the whole shuffled
# training set. Adam with lr 1e-3 is a robust default.
#
# Timing on a GPU needs care: kernels run **asynchronously** (Python queues them and moves on), so
# a clock read right after the loop measures the queueing, not the work. `minidl.cuda.synchronize()`
# waits for the GPU before each clock read. Reading `loss.item()` every step would also synchronise
# (the value must come back to the host), so the losses are kept as device tensors and read once
# per epoch.

# %%
def synchronize(device):
    if device == "cuda":
        minidl.cuda.synchronize()

def train_epoch(model, optimizer, dataset, batch_size, device, seed, max_steps=None, desc="epoch"):
    """One epoch (or its first max_steps batches). Returns (losses per step, seconds, steps)."""
    model.train()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=seed)
    steps = len(loader) if max_steps is None else min(max_steps, len(loader))
    step_losses = []
    synchronize(device)
    start = time.perf_counter()
    for step, (x, y) in enumerate(tqdm(loader, total=steps, desc=desc, leave=False)):
        if step == steps:
            break
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step_losses.append(loss.detach())
    synchronize(device)
    seconds = time.perf_counter() - start
    return [float(v) for v in minidl.stack(step_losses).cpu().numpy()], seconds, steps

def evaluate(model, dataset, batch_size=500):
    """(accuracy, predicted labels as a NumPy array) on a dataset, with no tape and eval mode."""
    model.eval()
    predictions, labels = [], []
    with minidl.no_grad():
        for x, y in DataLoader(dataset, batch_size=batch_size):
            predictions.append(model(x).argmax(dim=1))
            labels.append(y)
    model.train()
    predicted = minidl.cat(predictions).cpu().numpy()      # one copy to the host, at the end
    return float((predicted == minidl.cat(labels).cpu().numpy()).mean()), predicted

# %% [markdown]
# ## 4.4 Training on the CPU
#
# The CPU path runs every primitive's NumPy reference. In small mode the model trains for one epoch
# over the thousand images. In full mode an epoch of 60,000 images on the CPU takes minutes, so
# the CPU trains on its first `CPU_STEPS` batches only, and its time per epoch is that time scaled
# to a whole epoch (said so in the plot).

# %%
BATCH = 64 if MODE == "small" else 128
CPU_STEPS = None if MODE == "small" else 100

minidl.manual_seed(0)
cpu_model = ConvNet()
cpu_opt = minidl.optim.Adam(cpu_model.parameters(), lr=1e-3)
cpu_train, cpu_test = make_datasets("cpu")
cpu_losses, cpu_seconds, cpu_steps = train_epoch(cpu_model, cpu_opt, cpu_train, BATCH, "cpu", seed=0,
                                                 max_steps=CPU_STEPS, desc="CPU")
steps_per_epoch = -(-len(cpu_train) // BATCH)
cpu_epoch_seconds = cpu_seconds / cpu_steps * steps_per_epoch
cpu_accuracy, cpu_predicted = evaluate(cpu_model, cpu_test)
print(f"CPU: {cpu_steps} steps of batch {BATCH} in {cpu_seconds:.1f} s ({1e3 * cpu_seconds / cpu_steps:.0f} ms/step); "
      f"time per epoch of {len(cpu_train)} images: {cpu_epoch_seconds:.1f} s"
      + (" (scaled from the steps run)" if cpu_steps < steps_per_epoch else ""))
print(f"loss {np.mean(cpu_losses[:5]):.3f} (first 5 steps) -> {np.mean(cpu_losses[-5:]):.3f} (last 5); "
      f"test accuracy {100 * cpu_accuracy:.1f}%")
assert np.mean(cpu_losses[-5:]) < np.mean(cpu_losses[:5]), "the loss must fall"

# %% [markdown]
# ## 4.5 The same model on the GPU
#
# The only change is where the parameters and the data live: `model.to("cuda")` and the datasets'
# tensors on `"cuda"`. Every layer then calls the same primitives with CuPy arrays, which dispatch
# to the CUDA kernels. The first epoch includes one-time work (the convolution algorithm search,
# CuPy's memory pool growing), so the speedup is measured on the last epoch.

# %%
GPU_EPOCHS = 5
gpu_history = []
if USE_GPU:
    minidl.manual_seed(0)
    gpu_model = ConvNet().to("cuda")
    gpu_opt = minidl.optim.Adam(gpu_model.parameters(), lr=1e-3)
    gpu_train, gpu_test = make_datasets("cuda")
    for epoch in range(GPU_EPOCHS):
        losses, seconds, steps = train_epoch(gpu_model, gpu_opt, gpu_train, BATCH, "cuda", seed=epoch,
                                             desc=f"GPU epoch {epoch + 1}")
        accuracy, gpu_predicted = evaluate(gpu_model, gpu_test)
        gpu_history.append({"losses": losses, "seconds": seconds, "accuracy": accuracy})
        print(f"GPU epoch {epoch + 1}: {steps} steps in {seconds:.2f} s ({1e3 * seconds / steps:.1f} ms/step), "
              f"mean loss {np.mean(losses):.4f}, test accuracy {100 * accuracy:.2f}%")
    speedup = cpu_epoch_seconds / gpu_history[-1]["seconds"]
    print(f"speedup of the GPU over the CPU path, per epoch: {speedup:.0f}x")
else:
    print("GPU run skipped:", WHY_NOT_GPU)

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
ax1.plot(cpu_losses, label=f"CPU ({cpu_steps} steps)", alpha=0.8)
if gpu_history:
    gpu_losses = [v for record in gpu_history for v in record["losses"]]
    ax1.plot(gpu_losses, label=f"GPU ({GPU_EPOCHS} epochs)", alpha=0.6)
ax1.set_yscale("log"); ax1.set_xlabel("step"); ax1.set_ylabel("cross-entropy"); ax1.set_title("training loss")
ax1.legend()

names = ["CPU\n(NumPy reference)"]
seconds = [cpu_epoch_seconds]
if gpu_history:
    names.append("GPU\n(CUDA kernels)")
    seconds.append(gpu_history[-1]["seconds"])
bars = ax2.bar(names, seconds, color=["tab:blue", "tab:orange"][:len(names)])
ax2.bar_label(bars, labels=[f"{s:.2f} s" for s in seconds])
ax2.set_yscale("log"); ax2.set_ylabel(f"seconds per epoch ({len(cpu_train)} images)")
scaled = " (CPU: scaled from its first steps)" if cpu_steps < steps_per_epoch else ""
if gpu_history:
    ax2.set_title(f"time per epoch: GPU {cpu_epoch_seconds / gpu_history[-1]['seconds']:.0f}x faster{scaled}", fontsize=10)
else:
    ax2.set_title("time per epoch (GPU: not run in this mode)", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, f"{CPU_LABEL}" + (f" | {DEVICE}" if gpu_history else ""), MODE)
plt.show()

# %% [markdown]
# ## 4.6 What the model gets wrong
#
# Accuracy is one number; looking at the mistakes says more. Below are test images the model
# misclassified, with its guess and the true label (after a few epochs on the GPU these are mostly
# digits a person would hesitate over too).

# %%
predicted = gpu_predicted if gpu_history else cpu_predicted
accuracy = gpu_history[-1]["accuracy"] if gpu_history else cpu_accuracy
wrong = np.flatnonzero(predicted != y_test)
print(f"test accuracy {100 * accuracy:.2f}%: {len(wrong)} of {len(y_test)} test images wrong")
per_class = [100 * float(np.mean(predicted[y_test == k] == k)) if np.any(y_test == k) else float("nan")
             for k in range(10)]
display(tu.Table(["digit"] + [str(k) for k in range(10)], [["accuracy %"] + per_class]))

fig, axes = plt.subplots(1, 10, figsize=(10, 1.6))
for ax in axes:
    ax.axis("off")
for ax, i in zip(axes, wrong[:10]):
    ax.imshow(test_raw.data[i], cmap="gray_r")
    ax.set_title(f"{predicted[i]} (is {y_test[i]})", fontsize=8, color="tab:red")
fig.suptitle("misclassified test images: prediction (true label)", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE if gpu_history else CPU_LABEL, MODE)
plt.show()

# %% [markdown]
# ## Exercises
#
# 1. Replace `MaxPool2d(2)` by a convolution with stride 2. How do the parameter count, the accuracy
#    and the GPU time per epoch change?
# 2. Add `nn.BatchNorm2d` after each convolution (and drop the convolution's bias: why is it now
#    useless?). Does the loss fall faster in the first 100 steps?
# 3. Move `loss.item()` into the training loop (read it every step) and time a GPU epoch again. How
#    much slower is it, and why? Then try `batch_size` 32, 128, 512: plot ms/step and images/s.
# 4. The CPU time per epoch in full mode is scaled from 100 steps. Is that fair? Time 200 steps and
#    the first 20 steps separately and compare the ms/step.
# 5. Train without standardising the inputs (pixels in [0, 255] as floats). What happens to the
#    loss, and which lr makes it train again?
# 6. Set `minidl.primitives.set_convolution_policy` (tutorial 3) to `"no_workspace"` and to
#    `"prefer_fastest"` and compare GPU epoch times.
