# Source of tutorials/05_cnn_cifar10.ipynb (percent format: `# %%` code cells,
# `# %% [markdown]` text cells). Edit here, then: python tutorials/build.py 05

# %% [markdown]
# # 5. A CNN on CIFAR-10: augmentation, normalisation, schedules
#
# MNIST is easy: a small CNN gets 99%. CIFAR-10 is not: 32 x 32 colour photos of airplanes,
# automobiles, birds, cats, deer, dogs, frogs, horses, ships and trucks, with the object anywhere in
# the picture, in any pose and light. A network that memorises the 50,000 training images does not
# generalise, and a deep network without help trains slowly. This tutorial adds the three standard
# remedies and measures each:
#
# * **data augmentation**: random crops and mirror images, so the model never sees the same picture
#   twice;
# * **normalisation layers**: batch norm, and AlexNet's local response normalisation (LRN) for
#   comparison;
# * a **learning-rate schedule**: one-cycle, warm up then anneal.
#
# Then we look at what the model gets wrong (a confusion matrix and misclassified images) and at
# the time per epoch on the GPU against the CPU.
#
# The data here is the project's **CIFAR-10 (JPEG copy)**: the official images and split, re-encoded
# as JPEG, so accuracies are close to, not identical with, published CIFAR-10 figures.

# %% [markdown]
# **Running it on a CPU.** Small mode (the default) takes ~20 s on a 2-core CPU: a width-8
# network trained for 16 steps with each normalisation on 512 images (or on synthetic images when
# CIFAR-10 is not on disk; every figure then says SYNTHETIC). Full mode trains two width-64 networks
# for 12 epochs each on all 50,000 images: ~2 minutes on an H200, but an epoch takes ~13 minutes on
# the CPU path even on 16 cores (the table in 5.8), so full mode without a GPU would run for many
# hours: don't, stay in small mode there.
#
# **The saved outputs** below come from a small-mode run on a 2-core CPU (2026-11-25), made after the
# fix to the channel statistics in 5.2; the earlier full-mode GPU outputs had been computed with the
# wrong statistics. Run it with `MINIDL_TUTORIAL_MODE=full` on a GPU to see the 12-epoch results.

# %%
import tutorial_utils as tu   # next to the notebooks: the mode, device label, tables, figure stamps
MODE, USE_GPU, DEVICE, WHY_NOT_GPU = tu.setup(precompile="all")   # compile every kernel now: no timing below may include NVRTC

import time
import types

import numpy as np
import matplotlib.pyplot as plt
from tqdm.auto import tqdm

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.data import CIFAR10, DataLoader, TensorDataset, data_root
from minidl.data.transforms import RandomCrop, RandomHorizontalFlip
from minidl.primitives.cpu import batch_norm as cpu_batch_norm, lrn as cpu_lrn

TRAIN_DEVICE = "cuda" if USE_GPU else "cpu"
CPU_LABEL = tu.device_label(False)

# %% [markdown]
# ## 5.1 The data
#
# `minidl.data.CIFAR10` reads the official binary or pickled batches, or (as here) the JPEG image
# archives, from the data root (`$MINIDL_DATA`, else `~/.cache/minidl`); decoded images are cached
# as a `.npz`. `data` is uint8 (N, 32, 32, 3), channels last, as image files store them.
#
# In small mode, to stay within seconds, only the 10,000-image test archive is read, shuffled and
# cut into two disjoint parts: 512 images to train on and 300 held out. Full mode trains on the
# 50,000 training images and tests on the 10,000 test images.

# %%
CLASSES = CIFAR10.classes

def load_cifar(download):
    if MODE == "full":
        return CIFAR10(train=True, download=download), CIFAR10(train=False, download=download)
    pool = CIFAR10(train=False, download=download)
    order = np.random.default_rng(0).permutation(len(pool))   # the archive is sorted by class
    part = lambda idx: types.SimpleNamespace(data=pool.data[idx], targets=pool.targets[idx], classes=CLASSES)
    return part(order[:512]), part(order[512:812])

def synthetic_cifar():
    return (tu.SyntheticImages(512, (32, 32, 3), CLASSES, seed=1), tu.SyntheticImages(300, (32, 32, 3), CLASSES, seed=2))

(train_raw, test_raw), REAL_DATA = tu.load_dataset(MODE, "CIFAR-10", load_cifar, synthetic_cifar)
print("data root:", data_root())
print(f"train {train_raw.data.shape} {train_raw.data.dtype}, test {test_raw.data.shape}; "
      f"images per class (train): {np.bincount(train_raw.targets, minlength=10)}")

fig, axes = plt.subplots(3, 10, figsize=(11, 3.8))
for k, column in enumerate(axes.T):
    for ax, i in zip(column, np.flatnonzero(train_raw.targets == k)[:3]):
        ax.imshow(train_raw.data[i])
    for ax in column:
        ax.axis("off")
    column[0].set_title(CLASSES[k], fontsize=9)
fig.suptitle("CIFAR-10 (JPEG copy): three training images per class" + ("" if REAL_DATA else " (SYNTHETIC stand-in)"))
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, CPU_LABEL, MODE)
plt.show()

# %% [markdown]
# Each colour channel is standardised with the training set's mean and standard deviation, and the
# images are transposed to (N, 3, 32, 32), the channels-first layout the convolutions take.
#
# **A lesson in accumulation.** Each channel's mean is a sum of 50,000 x 32 x 32 = 51 million values.
# Summed one by one in float32 that sum goes wrong: float32 has a 24-bit significand, so once the
# running total passes 2^24 = 16.8 million, adding a value below 1 changes it by a rounded step or not
# at all, and the total stops growing. An earlier version of this cell summed the transposed float32
# array that way (NumPy sums pairwise only along a contiguous axis) and printed means of 0.3277 for all
# three channels: 2^24 / 51.2 million, the stalled sum divided by the count. The fix is the one minidl's
# reductions use: accumulate in float64 (`dtype=np.float64`), or pairwise. The check below compares
# the float64 means with a float32 running sum, so you can see the stall.

# %%
def to_float(raw, mean=None, std=None):
    x = raw.data.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    # statistics accumulated in float64, kept as float32 for the data
    mean = x.mean(axis=(0, 2, 3), keepdims=True, dtype=np.float64).astype(np.float32) if mean is None else mean
    std = x.std(axis=(0, 2, 3), keepdims=True, dtype=np.float64).astype(np.float32) if std is None else std
    return np.ascontiguousarray((x - mean) / std), mean, std

# the red channel's values (repeated up to the full training set's 51.2 million in small mode)
red = np.resize(train_raw.data[..., 0].reshape(-1), 50_000 * 32 * 32).astype(np.float32) / np.float32(255.0)
stalled = np.cumsum(red, dtype=np.float32)[-1] / red.size      # a float32 running sum, one value at a time
print(f"red channel, {red.size:,} values: float64 mean {red.mean(dtype=np.float64):.4f}, "
      f"float32 running-sum mean {stalled:.4f} (= 2^24 / {red.size:,} = {2**24 / red.size:.4f})")
del red

x_train, MEAN, STD = to_float(train_raw)
x_test, _, _ = to_float(test_raw, MEAN, STD)
y_train, y_test = train_raw.targets, test_raw.targets
print("channel means:", MEAN.ravel().round(4), " standard deviations:", STD.ravel().round(4))

def make_datasets(device):
    return (TensorDataset(minidl.tensor(x_train, device=device), minidl.tensor(y_train, device=device)),
            TensorDataset(minidl.tensor(x_test, device=device), minidl.tensor(y_test, device=device)))

# %% [markdown]
# ## 5.2 Data augmentation
#
# A cat shifted by three pixels, or seen in a mirror, is still a cat. **Random crops** (pad the image
# by 4 pixels, reflecting its border, then cut a random 32 x 32 window) and **random horizontal
# flips** turn each training image into hundreds of slightly different ones; the model can no longer
# memorise pixels, and learns what is invariant instead. Test images are not augmented.
#
# minidl's transforms work on **whole batches**, on whichever device the batch is: the random
# offsets are drawn on the host (one per image, from a seeded generator), and one fancy index
# gathers every image's window at once, so a GPU batch never leaves the GPU:

# %% tags=["listing"]
print(tu.python_source(RandomCrop.__call__))

# %%
crop = RandomCrop(32, padding=4, padding_mode="reflect", generator=0)
flip = RandomHorizontalFlip(generator=1)
one = np.repeat(x_train[:1], 8, axis=0)          # the same image 8 times
augmented = flip(crop(one))

def show(x_float):
    """Undo the standardisation for display: (3, 32, 32) float -> (32, 32, 3) in [0, 1]."""
    return np.clip(x_float * STD[0] + MEAN[0], 0, 1).transpose(1, 2, 0)

fig, axes = plt.subplots(1, 9, figsize=(11, 1.6))
axes[0].imshow(show(x_train[0])); axes[0].set_title("original", fontsize=9)
for ax, img in zip(axes[1:], augmented):
    ax.imshow(show(img))
for ax in axes:
    ax.axis("off")
fig.suptitle(f"one training image ({CLASSES[y_train[0]]}) and 8 random crops + flips", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, CPU_LABEL, MODE)
plt.show()

# %% [markdown]
# ## 5.3 Batch norm, and LRN before it
#
# Deep networks train badly when the scale of each layer's activations drifts as the weights
# change: every layer keeps chasing a moving input distribution, and a large learning rate blows up.
# **Batch normalisation** (Ioffe & Szegedy 2015) standardises every channel over the batch and the
# image, then lets the network choose a scale and shift of its own:
#
# `y = gamma * (x - mean_batch) / sqrt(var_batch + eps) + beta`, statistics per channel over (N, H, W).
#
# In training it uses the batch's statistics (so its gradient also flows through them) and keeps a
# running average of them; in evaluation (`model.eval()`) it uses the running averages, so a
# prediction does not depend on the other images in the batch. Here is the primitive's NumPy
# reference (the GPU kernel does the same with one block per channel):

# %% tags=["listing"]
print(tu.python_source(cpu_batch_norm.batch_norm_forward_training))

# %% [markdown]
# **Local response normalisation** (AlexNet, 2012) came earlier: each activation is divided by the
# energy of its neighbours across channels,
#
# `y_c = x_c / (k + alpha / n * sum of x_j^2 over the n channels j around c) ^ beta`,
#
# with fixed constants and no statistics over the batch. It damps channels that fire together, but
# it does not fix the scale of the activations, so it does not let the learning rate grow. We train
# the same network with each and compare.
#
# One constant needs care. AlexNet used `k = 2`: with the tiny `alpha` the sum barely matters, and
# every activation is simply divided by `2 ** 0.75 = 1.68`. Over the six LRN layers below that
# shrinks the signal ~22 times, and PyTorch's default convolution initialisation shrinks it further
# (~3 times per layer: it is not scaled for ReLU). The logits then start at ~0, their gradients
# vanish, and the network never leaves its first guess: the loss sits at ln 10 = 2.303 and the
# accuracy at chance. (An earlier version of this tutorial did exactly that.) AlexNet had batch-free
# tricks of its own to get going; we use `k = 1` (LRN then only divides by the neighbours' energy)
# and He initialisation (variance 2 / fan_in, which keeps the scale through ReLU layers), as
# `examples/train_cifar10.py --norm lrn` does. Batch norm needs neither: it rescales every layer.

# %% tags=["listing"]
print(tu.python_source(cpu_lrn._window_sum, cpu_lrn._scale, cpu_lrn.lrn_forward))

# %% [markdown]
# ## 5.4 The model
#
# A small VGG-style network: 3x3 convolutions, each followed by the normalisation and ReLU, max
# pooling after every stage, global average pooling, one linear layer. `width` sets the channels
# (width, 2 width, 4 width). With batch norm the convolutions need no bias: BN's `beta` is one. The
# LRN model's convolutions get a bias and He initialisation (5.3 says why).

# %%
def conv_block(c_in, c_out, norm):
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=(norm != "bn"))]
    if norm == "bn":
        layers.append(nn.BatchNorm2d(c_out))
    elif norm == "lrn":
        layers.append(nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0))   # AlexNet's, but k = 1 (see 5.3)
    layers.append(nn.ReLU())
    return layers

class CifarNet(nn.Module):
    """(N, 3, 32, 32) -> 32x32 (w) -> 16x16 (2w) -> 8x8 (4w) -> 4x4 -> global average -> (N, 10) logits."""

    def __init__(self, width=32, norm="bn"):
        super().__init__()
        w1, w2, w3 = width, 2 * width, 4 * width
        self.features = nn.Sequential(
            *conv_block(3, w1, norm), *conv_block(w1, w1, norm), nn.MaxPool2d(2),
            *conv_block(w1, w2, norm), *conv_block(w2, w2, norm), nn.MaxPool2d(2),
            *conv_block(w2, w3, norm), *conv_block(w3, w3, norm), nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w3, 10))
        if norm == "lrn":   # nothing rescales the activations: He initialisation keeps their scale
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                    nn.init.zeros_(module.bias)

    def forward(self, x):
        return self.head(self.features(x))

WIDTH = 8 if MODE == "small" else 64
for norm in ("bn", "lrn"):
    print(f"CifarNet(width={WIDTH}, norm={norm!r}): {sum(p.numel() for p in CifarNet(WIDTH, norm).parameters()):,} parameters")

# %% [markdown]
# ## 5.5 The learning-rate schedule
#
# SGD with momentum, and a **one-cycle** schedule (Smith 2018): the learning rate climbs linearly from
# `max_lr / 20` to `max_lr` over the first 25% of the steps (a warm-up: at the start the weights are
# random and the gradients large, so big steps would throw them far off), then falls to nearly 0
# (small steps at the end settle into a minimum). The scheduler is stepped after every batch. Batch
# norm tolerates a learning rate five times higher than LRN here: that is the point of it.

# %%
EPOCHS = 2 if MODE == "small" else 12
BATCH = 64 if MODE == "small" else 256
STEPS_PER_EPOCH = len(x_train) // BATCH          # drop_last: every batch full (batch norm likes that)
MAX_LR = {"bn": 0.1, "lrn": 0.02}

def make_optimizer(model, norm, total_steps):
    optimizer = minidl.optim.SGD(model.parameters(), lr=MAX_LR[norm], momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = minidl.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR[norm], total_steps=total_steps, pct_start=0.25, anneal_strategy="linear",
        cycle_momentum=False, div_factor=20.0, final_div_factor=100.0)
    return optimizer, scheduler

# A dry run of the schedule on a throw-away optimizer, to plot it before training.
_, scheduler = make_optimizer(CifarNet(4, "bn"), "bn", EPOCHS * STEPS_PER_EPOCH)
lrs = []
for _ in range(EPOCHS * STEPS_PER_EPOCH):
    lrs.append(scheduler.get_last_lr()[0])
    scheduler.optimizer.step()
    scheduler.step()
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.plot(lrs)
ax.set_xlabel("step"); ax.set_ylabel("learning rate"); ax.set_title("one-cycle schedule (batch norm run)")
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, CPU_LABEL, MODE)
plt.show()

# %% [markdown]
# ## 5.6 Training with batch norm and with LRN
#
# The loop of tutorial 4 plus augmentation (a fresh crop and flip for every batch, seeded by the
# epoch so a run is reproducible) and the scheduler. Evaluation calls `model.eval()` so that batch
# norm uses its running statistics. Training runs on the GPU in full mode, on the CPU in small mode.

# %%
def synchronize(device):
    if device == "cuda":
        minidl.cuda.synchronize()

def evaluate(model, dataset, batch_size=500):
    """(accuracy, predicted labels) with the model in eval mode and no tape."""
    model.eval()
    predictions, labels = [], []
    with minidl.no_grad():
        for x, y in DataLoader(dataset, batch_size=batch_size):
            predictions.append(model(x).argmax(dim=1))
            labels.append(y)
    model.train()
    predicted = minidl.cat(predictions).cpu().numpy()
    return float((predicted == minidl.cat(labels).cpu().numpy()).mean()), predicted

def train(norm, device, epochs=EPOCHS):
    minidl.manual_seed(0)
    model = CifarNet(WIDTH, norm).to(device)
    optimizer, scheduler = make_optimizer(model, norm, epochs * STEPS_PER_EPOCH)
    train_set, test_set = make_datasets(device)
    history = {"loss": [], "lr": [], "accuracy": [], "seconds": []}
    for epoch in range(epochs):
        loader = DataLoader(train_set, batch_size=BATCH, shuffle=True, drop_last=True, generator=epoch)
        crop = RandomCrop(32, padding=4, padding_mode="reflect", generator=1000 + epoch)
        flip = RandomHorizontalFlip(generator=2000 + epoch)
        losses = []
        synchronize(device)
        start = time.perf_counter()
        for x, y in tqdm(loader, desc=f"{norm} epoch {epoch + 1}", leave=False):
            loss = F.cross_entropy(model(flip(crop(x))), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            history["lr"].append(scheduler.get_last_lr()[0])
            scheduler.step()
            losses.append(loss.detach())
        synchronize(device)
        history["seconds"].append(time.perf_counter() - start)
        history["loss"].extend(float(v) for v in minidl.stack(losses).cpu().numpy())
        accuracy, predicted = evaluate(model, test_set)
        history["accuracy"].append(accuracy)
        print(f"{norm:>3} epoch {epoch + 1}: mean loss {np.mean(history['loss'][-len(losses):]):.3f}, "
              f"test accuracy {100 * accuracy:.1f}%, {history['seconds'][-1]:.1f} s")
    return model, history, predicted

runs = {}
for norm in ("bn", "lrn"):
    runs[norm] = train(norm, TRAIN_DEVICE)

# %%
fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.6))
for norm, (_, history, _) in runs.items():
    losses = np.array(history["loss"])
    window = max(1, min(20, len(losses) // 5))
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax1.plot(smooth, label=f"{norm} (max lr {MAX_LR[norm]})")
    ax2.plot(range(1, len(history["accuracy"]) + 1), 100 * np.array(history["accuracy"]), "o-", label=norm)
    ax3.plot(history["lr"], label=norm)
ax1.set_xlabel("step"); ax1.set_ylabel("cross-entropy"); ax1.set_title("training loss (moving average)"); ax1.legend()
ax2.set_xlabel("epoch"); ax2.set_ylabel("test accuracy %"); ax2.set_title("held-out accuracy"); ax2.legend()
ax3.set_xlabel("step"); ax3.set_ylabel("learning rate"); ax3.set_title("schedules"); ax3.legend()
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE, MODE)
plt.show()
CHANCE_LOSS = np.log(10)   # the cross-entropy of a uniform guess over 10 classes: 2.303
for norm, (_, history, _) in runs.items():
    start, end = np.mean(history["loss"][:4]), np.mean(history["loss"][-4:])
    verdict = ("learning" if end < 0.9 * CHANCE_LOSS else
               f"not yet: still near the loss of a uniform guess ({CHANCE_LOSS:.3f})")
    print(f"{norm:>3}: loss {start:.3f} -> {end:.3f} over {len(history['loss'])} steps, "
          f"final test accuracy {100 * history['accuracy'][-1]:.1f}% (chance: 10%); {verdict}")
bn_losses = runs["bn"][1]["loss"]
assert np.mean(bn_losses[-4:]) < np.mean(bn_losses[:4]), "the batch-norm model's loss must fall"
if MODE == "full":   # the full run is long enough for both: a dead LRN model is a bug, not a lesson
    assert np.mean(runs["lrn"][1]["loss"][-20:]) < 0.9 * CHANCE_LOSS, "the LRN model must learn in full mode"

# %% [markdown]
# What to read in these curves. Batch norm takes a learning rate five times higher and its loss
# falls from the first steps; LRN, with nothing to hold each layer's scale, must move slowly, and
# spends its first steps near the loss of a uniform guess before it starts to learn. How far it gets
# depends on how long it trains: in full mode (12 epochs on the GPU) both models
# learn, and the lines printed above say how far each got; in small mode, 16 steps on a CPU, the LRN model
# has usually not yet left its first guess while batch norm already has. Both are the same lesson:
# batch norm trains faster, which is why it replaced LRN. (LRN's own place in AlexNet was as a mild
# "competition" between neighbouring channels, worth ~1% there; later work found it adds little.)

# %% [markdown]
# ## 5.7 What the model confuses
#
# A **confusion matrix** counts, for every true class (row), how often each class was predicted
# (column): the diagonal holds the correct answers, and the brightest off-diagonal cells show which
# classes look alike to the model (on CIFAR-10 typically cat and dog, automobile and truck).

# %%
bn_model, bn_history, predicted = runs["bn"]

def confusion_matrix(true, predicted, num_classes=10):
    counts = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(counts, (true, predicted), 1)      # one count per (true, predicted) pair
    return counts

cm = confusion_matrix(y_test, predicted)
print(f"batch-norm model, test accuracy {100 * np.trace(cm) / cm.sum():.1f}% on {cm.sum()} images")
fig, ax = plt.subplots(figsize=(6.5, 5.5))
ax.imshow(cm, cmap="Blues")
for i in range(10):
    for j in range(10):
        ax.text(j, i, cm[i, j], ha="center", va="center", fontsize=7,
                color="white" if cm[i, j] > cm.max() / 2 else "black")
ax.set_xticks(range(10)); ax.set_xticklabels(CLASSES, rotation=60, fontsize=8)
ax.set_yticks(range(10)); ax.set_yticklabels(CLASSES, fontsize=8)
ax.set_xlabel("predicted"); ax.set_ylabel("true"); ax.set_title("confusion matrix (batch norm)")
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE, MODE)
plt.show()

off_diagonal = cm - np.diag(np.diag(cm))
pairs = sorted(((off_diagonal[i, j], CLASSES[i], CLASSES[j]) for i in range(10) for j in range(10) if i != j), reverse=True)
display(tu.Table(["true", "predicted as", "count"], [[t, p, int(c)] for c, t, p in pairs[:5]],
                 title="the most frequent confusions"))

# %%
wrong = np.flatnonzero(predicted != y_test)
fig, axes = plt.subplots(2, 8, figsize=(11, 3.2))
for ax in axes.ravel():
    ax.axis("off")
for ax, i in zip(axes.ravel(), wrong[:16]):
    ax.imshow(test_raw.data[i])
    ax.set_title(f"{CLASSES[predicted[i]]}\n(is {CLASSES[y_test[i]]})", fontsize=7, color="tab:red")
fig.suptitle("misclassified test images: prediction (true class)", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, DEVICE, MODE)
plt.show()

# %% [markdown]
# ## 5.8 GPU against CPU
#
# The time of one training step (forward, backward, SGD update, augmentation included) of the same
# network at the same batch size, on the CPU path and on the GPU. The CPU runs only a few steps
# (an epoch there would take minutes in full mode); the time per epoch is ms/step times the steps of
# an epoch of 50,000 images.

# %%
def time_steps(device, steps, warmup=1):
    """Seconds per training step of CifarNet(WIDTH, "bn") at batch BATCH on `device` (random inputs)."""
    minidl.manual_seed(0)
    model = CifarNet(WIDTH, "bn").to(device)
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = minidl.tensor(np.random.default_rng(0).standard_normal((BATCH, 3, 32, 32)).astype(np.float32), device=device)
    y = minidl.tensor(np.arange(BATCH) % 10, device=device)
    crop, flip = RandomCrop(32, padding=4, padding_mode="reflect", generator=0), RandomHorizontalFlip(generator=0)
    def step():
        loss = F.cross_entropy(model(flip(crop(x))), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for _ in range(warmup):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - start) / steps

EPOCH_STEPS = 50_000 // BATCH
timings = {"CPU (NumPy reference)": time_steps("cpu", 2 if MODE == "small" else 5)}
if USE_GPU:
    timings["GPU (CUDA kernels)"] = time_steps("cuda", 50)
else:
    print("GPU timing skipped:", WHY_NOT_GPU)
rows = [[name, 1e3 * s, BATCH / s, s * EPOCH_STEPS] for name, s in timings.items()]
display(tu.Table(["device", "ms / step", "images / s", "s / epoch (50,000 images)"], rows,
                 title=f"CifarNet(width={WIDTH}, bn), batch {BATCH}"))

fig, ax = plt.subplots(figsize=(6, 3.2))
bars = ax.bar(list(timings), [s * EPOCH_STEPS for s in timings.values()], color=["tab:blue", "tab:orange"][:len(timings)])
ax.bar_label(bars, labels=[f"{s * EPOCH_STEPS:.1f} s" for s in timings.values()])
ax.set_yscale("log"); ax.set_ylabel("seconds per epoch (50,000 images)")
if USE_GPU:
    values = list(timings.values())
    ax.set_title(f"GPU {values[0] / values[1]:.0f}x faster (CPU: from {2 if MODE == 'small' else 5} steps)", fontsize=10)
else:
    ax.set_title("time per epoch (GPU: not run in this mode)", fontsize=10)
fig.tight_layout(rect=(0, 0.04, 1, 1))   # room for the stamp below
tu.stamp(fig, CPU_LABEL + (f" | {DEVICE}" if USE_GPU else ""), MODE)
plt.show()

# %% [markdown]
# ## Exercises
#
# 1. Train the batch-norm model without augmentation (drop `flip(crop(...))`). Plot training and test
#    accuracy per epoch for both runs: where does the gap between them open?
# 2. Give the LRN model the batch-norm learning rate (0.1). What happens in the first epoch, and why
#    does batch norm survive it?
# 3. Replace the one-cycle schedule by a constant learning rate `max_lr / 2`. Compare the final
#    accuracies. Then try cosine annealing (`CosineAnnealingLR`) after a warm-up.
# 4. Evaluate the batch-norm model with `model.train()` instead of `model.eval()`, on test batches
#    of 500 and of 8 images. Explain the two results.
# 5. Test-time augmentation: average the logits of each test image and of its mirror image. How much
#    accuracy does it add?
# 6. From the confusion matrix, which pair of classes is confused most? Show 16 such images. Would
#    more width, or more augmentation, help more?
