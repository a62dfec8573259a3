"""Train a ResNet-9 on CIFAR-10 with minidl: the fast recipe of Myrtle.ai / David Page (2018).

    python examples/train_cifar10.py                         # width 96, 70 epochs: 93.2% (4 seeds), 10 min (H200)
    python examples/train_cifar10.py --width 64 --epochs 24  # Page's original size: 91.6% in 100 s
    python examples/train_cifar10.py --ema 0.98              # also average the weights, report both at the end
    python examples/train_cifar10.py --norm lrn              # LRN instead of batch norm, as AlexNet
    python examples/train_cifar10.py --resume                # continue the last checkpoint

Figures measured on the CIFAR-10 JPEG copy of shared/data (benchmarks/results/runs/cifar10_*.log).

The network (width w: channels w-2w-4w-8w; Page's is w = 64, the default here is w = 96), 32 x 32 input:
    prep    conv3x3(3 -> w)      - BN - ReLU                               32 x 32
    layer1  conv3x3(w -> 2w)     - BN - ReLU - maxpool2 + residual block  16 x 16
    layer2  conv3x3(2w -> 4w)    - BN - ReLU - maxpool2                      8 x 8
    layer3  conv3x3(4w -> 8w)    - BN - ReLU - maxpool2 + residual block    4 x 4
    head    maxpool4 - linear(8w -> 10, no bias) - times 0.125
where a residual block is x + (conv-BN-ReLU)(conv-BN-ReLU)(x). 6.6 M parameters at w = 64, 14.8 M at w = 96.

The recipe: SGD with Nesterov momentum 0.9, weight decay 5e-4, batch 512, a one-cycle learning rate
(linear warm-up to 0.4 over the first 20% of the steps, then linear decay to ~0), label smoothing
0.2, augmentation by random crops of the image padded by 4 pixels (reflect), horizontal flips and
cutout (one random 8 x 8 square per image set to 0, the mean after normalisation; clipped at the
border), and at test time the mean of the logits of each image and its mirror image. Page reports
94% in 24 epochs with this recipe at w = 64 on the official CIFAR-10. On the JPEG copy (quality ~75)
the same recipe gives 91.6% in 24 epochs and 92.3% in 40 (PyTorch, same recipe and data: 90.2% at
epoch 22 of 24, where minidl had 90.7%: the gap to 94% comes from the images, not from minidl), so the
defaults widen the network to w = 96 and train 70 epochs: 93.18% on average over seeds 0-3 (lowest
93.01%), 8.7 s per epoch on an H200 (benchmarks/results/cifar10_seeds_w96_70ep_ema.md). 50 epochs
give 92.80% (92.62-93.03%).

`--ema D [D ...]` keeps exponential moving averages of the weights and batch-norm statistics
(minidl.optim.swa_utils.AveragedModel, updated every --ema-every 5 steps with decay D) and prints,
at the end, the test accuracy of the last weights and of each average, with the flip and the
flip-and-translate test-time augmentation. Measured over 4 seeds: at 50 epochs EMA 0.98 adds 0.13%
(92.93%), EMA 0.99 lags and loses 0.6%; at 70 epochs, where the lr has annealed to ~0, it adds
nothing (93.10-93.16%), and the one-pixel translations lose 0.1-0.2% at both lengths. Mid-run the
average is far better than the weights (91.5% against 84% at epoch 35 of 70), because the lr is high.
On the GPU the training step (forward, loss, backward) is captured in a CUDA graph after 3 eager
steps and replayed (minidl.cuda.CUDAGraphStep); the optimizer step runs eagerly after each replay while
SGD reads the scheduler's lr on the host (the whole step is captured once the optimizer keeps lr on
the device). `--no-graph` runs every step eagerly. Every batch is full (drop_last), so every step replays.
`--schedule cosine` uses cosine annealing after the same warm-up instead; `--cutout 0` turns cutout
off; `--no-decay-bn` exempts batch-norm scales and shifts (every 1-D parameter) from weight decay,
a common variant in large-batch training (not part of Page's recipe, untuned here).

Augmentation runs on the device, on whole batches: the dataset sits on the GPU as normalised
float32 (600 MB), and every batch is cropped and flipped there by one gather and cut out by one
masked select (minidl.data.transforms).

`--norm lrn` swaps every batch norm for local response normalisation (AlexNet's size 5, alpha 1e-4,
beta 0.75, but k 1: AlexNet's k 2 divides every activation by ~1.7 at each of the 8 layers, and the
logits start ~60x too small), gives the convolutions a bias and He-initialises them. LRN does not
rescale activations the way batch norm does, so the default peak lr drops to 0.05 (a cautious,
untuned choice). Compare the two runs to see why BN replaced LRN.

Data: CIFAR10(root) reads the official binary or python release, or an image folder / the JPEG
archives (--data, else $MINIDL_DATA, else ~/.cache/minidl). Image files need Pillow (pip install -e
".[vision]"); they are decoded once, with a progress bar, into a .npz cache whose path is printed.
On a CPU, try `--device cpu --width 16 --limit-batches 10 --epochs 1 --tta none` (10 training batches
and 10 test batches of 1000, one view each; without --tta none every test image is evaluated 2x per
epoch and 6x more in the final table): a full epoch there takes ~19 minutes at width 64 on 16 cores
(benchmarks/results/examples.md), about twice that at width 96.
"""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _common, when imported from elsewhere

import _common  # noqa: E402,F401  (first: it picks NumPy's BLAS thread count before NumPy loads)

import minidl  # noqa: E402
import minidl.nn as nn  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from minidl.data.datasets import CIFAR10  # noqa: E402
from minidl.data.transforms import Cutout, RandomCrop, RandomHorizontalFlip  # noqa: E402
from minidl.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn  # noqa: E402

from _common import (  # noqa: E402
    announce_resume, check_checkpoint_path,
    MixedPrecision, Depends, RunningLoss, Timer, add_graph_option, base_parser, check_limit, check_schedule_length,
    epoch_range, epoch_rng, eval_batches, load_checkpoint, load_data, make_train_step, maybe_fuse, parameter_count,
    pick_device, progress, save_checkpoint, steps_per_epoch, DataParallel, DATA_PARALLEL_EPILOG,
)



def conv_norm_relu(c_in, c_out, norm):
    """conv3x3 (padding 1) - normalisation - ReLU. Batch norm has its own shift, so no conv bias then."""
    if norm == "bn":
        return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=True),
                         nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0), nn.ReLU())


class Residual(nn.Module):
    """x + f(x) with f two conv-norm-ReLU blocks of c channels (shapes unchanged)."""

    def __init__(self, channels, norm):
        super().__init__()
        self.body = nn.Sequential(conv_norm_relu(channels, channels, norm), conv_norm_relu(channels, channels, norm))

    def forward(self, x):
        return x + self.body(x)


class ResNet9(nn.Module):
    """(N, 3, 32, 32) -> (N, 10) logits. width=64 is the full network; small widths are for tests."""

    def __init__(self, width=64, norm="bn", num_classes=10, logit_scale=0.125):
        super().__init__()
        w1, w2, w3, w4 = width, 2 * width, 4 * width, 8 * width
        self.prep = conv_norm_relu(3, w1, norm)
        self.layer1 = nn.Sequential(conv_norm_relu(w1, w2, norm), nn.MaxPool2d(2), Residual(w2, norm))
        self.layer2 = nn.Sequential(conv_norm_relu(w2, w3, norm), nn.MaxPool2d(2))
        self.layer3 = nn.Sequential(conv_norm_relu(w3, w4, norm), nn.MaxPool2d(2), Residual(w4, norm))
        self.pool = nn.MaxPool2d(4)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(w4, num_classes, bias=False)
        # Scaling the logits down keeps the softmax soft early on (Page's trick, in place of a tuned init).
        self.logit_scale = logit_scale
        if norm == "lrn":
            # Without batch norm nothing restores the activations' scale, and PyTorch's default conv init
            # (variance 1/(3 fan_in)) shrinks them ~3x per layer: the logits start at ~0 and barely learn.
            # He init (variance 2/fan_in) keeps the scale through ReLU layers.
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                    nn.init.zeros_(module.bias)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.prep(x))))
        return self.fc(self.flatten(self.pool(x))) * self.logit_scale


def build_model(width=64, norm="bn") -> nn.Module:
    return ResNet9(width=width, norm=norm)


def load_cifar10(root, device):
    """CIFAR-10 as normalised float32 NCHW tensors and int64 labels, (train, test), on `device`."""
    splits = []
    for train in (True, False):
        x, y = CIFAR10(root, train=train, download=True).as_arrays(normalize=True)
        splits.append(TensorDataset(minidl.tensor(x, device=device), minidl.tensor(y, device=device)))
    return splits


TTA_MODES = ("none", "flip", "flip-translate")


def tta_views(x, tta):
    """The views of a test batch whose logits are averaged: the batch itself; with "flip" also its
    mirror image; with "flip-translate" also both shifted one pixel down-right and one pixel up-left
    (6 views; the pixels shifted in are 0, the mean colour once normalised)."""
    if tta == "none":
        return [x]
    views = [x, RandomHorizontalFlip(p=1.0, generator=0)(x)]  # p=1: every image, so nothing random
    if tta == "flip-translate":
        for v in views[:2]:
            views.append(F.pad(v, (1, 0, 1, 0))[:, :, :-1, :-1])
            views.append(F.pad(v, (0, 1, 0, 1))[:, :, 1:, 1:])
    return views


def evaluate(model, dataset, batch_size=1000, tta="flip", limit=None, progress_bar=False):
    """(accuracy, mean cross-entropy) on `dataset` (on its first `limit` batches when given), the
    logits averaged over tta_views(x, tta)."""
    if tta not in TTA_MODES:
        raise ValueError(f"evaluate: tta must be one of {TTA_MODES}, got {tta!r}")
    was_training = model.training
    model.eval()
    correct = loss_sum = None
    seen = 0
    loader = DataLoader(dataset, batch_size=batch_size)
    with minidl.no_grad():
        for x, y in progress(loader, total=eval_batches(len(loader), limit), desc=f"evaluating (tta {tta})",
                             disable=not progress_bar):
            seen += y.shape[0]
            views = tta_views(x, tta)
            logits = model(views[0])
            for v in views[1:]:
                logits = logits + model(v)
            logits = logits * (1.0 / len(views))
            hits = (logits.argmax(dim=1) == y).sum()
            loss = F.cross_entropy(logits, y, reduction="sum")
            correct = hits if correct is None else correct + hits
            loss_sum = loss if loss_sum is None else loss_sum + loss
    model.train(was_training)
    return float(correct.item()) / seen, float(loss_sum.item()) / seen


def final_table(models, dataset, modes=("flip", "flip-translate"), limit=None, progress_bar=False, known=None):
    """{(name, tta): accuracy} for every model and test-time augmentation, printed as a table: what
    weight averaging and test-time augmentation each add (over the first `limit` test batches when given).
    `known`: results already measured (the last epoch's evaluation of the final weights), not repeated."""
    results = dict(known or {})
    for name, model in models.items():
        for tta in modes:
            if (name, tta) not in results:
                results[name, tta] = evaluate(model, dataset, tta=tta, limit=limit, progress_bar=progress_bar)[0]
    title = "final test accuracy"
    width = max(len(title), *(len(name) for name in models)) + 2
    print(f"{title:<{width}}" + "".join(f"{tta:>16}" for tta in modes))
    for name in models:
        print(f"{name:<{width}}" + "".join(f"{results[name, tta] * 100:>15.2f}%" for tta in modes))
    return results


def parameter_groups(model, weight_decay, no_decay_1d=False):
    """What to hand SGD: all parameters in one group, or with no_decay_1d two groups, the matrices and
    conv kernels with `weight_decay` and the 1-D parameters (batch-norm weights and biases, conv
    biases) with none. Resuming needs the same choice: the checkpoint stores the groups."""
    params = list(model.parameters())
    if not no_decay_1d:
        return params
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def make_scheduler(name, optimizer, max_lr, total_steps, warmup=0.2):
    """Per-batch lr schedule: one-cycle (linear up, linear down) or warm-up then cosine."""
    if name == "onecycle":
        return minidl.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=max_lr, total_steps=total_steps, pct_start=warmup, anneal_strategy="linear",
            cycle_momentum=False, div_factor=20.0, final_div_factor=200.0)
    warmup_steps = max(1, int(warmup * total_steps))

    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return minidl.optim.lr_scheduler.LambdaLR(optimizer, factor)


def parse_args(argv=None):
    p = base_parser(__doc__, epochs=70, batch_size=512, lr=Depends("0.4 with --norm bn, 0.05 with --norm lrn"),
                    checkpoint="checkpoints/cifar10_resnet9.mdl")
    p.add_argument("--norm", choices=["bn", "lrn"], default="bn",
                   help="batch norm (bn, the default) or local response norm (lrn)")
    p.add_argument("--width", type=int, default=96,
                   help="channels of the first layer (default 96: 96-192-384-768; Page's ResNet-9 is 64)")
    p.add_argument("--schedule", choices=["onecycle", "cosine"], default="onecycle", help="default onecycle")
    p.add_argument("--weight-decay", type=float, default=5e-4, help="default 5e-4")
    p.add_argument("--label-smoothing", type=float, default=0.2, help="default 0.2")
    p.add_argument("--no-augment", action="store_true", help="no random crops, flips or cutout")
    p.add_argument("--cutout", type=int, default=8, metavar="N",
                   help="cut an N x N square out of every training image (default 8; 0: no cutout)")
    p.add_argument("--no-decay-bn", action="store_true",
                   help="no weight decay on batch-norm weights and biases (all 1-D parameters)")
    p.add_argument("--tta", choices=TTA_MODES, default="flip",
                   help="test-time augmentation of the per-epoch evaluation: average the logits of each image "
                        "and its mirror image (flip, the default), also of both shifted by a pixel (flip-translate)")
    p.add_argument("--no-tta", dest="tta", action="store_const", const="none", help="the same as --tta none")
    p.add_argument("--ema", type=float, nargs="*", default=[], metavar="DECAY",
                   help="also keep exponential moving averages of the weights (and batch-norm statistics) with "
                        "these decays, updated every --ema-every steps, and report them at the end")
    p.add_argument("--ema-every", type=int, default=5, metavar="N", help="steps between EMA updates (default 5)")
    p.add_argument("--sync-bn", action="store_true",
                   help="data-parallel only: batch norm over the global batch (SyncBatchNorm) instead of each "
                        "process's share")
    add_graph_option(p)
    p.epilog = DATA_PARALLEL_EPILOG.format(name="train_cifar10.py")
    args = p.parse_args(argv)
    check_limit(p, args)
    if args.ema_every < 1:
        p.error(f"--ema-every must be >= 1, got {args.ema_every}")
    for decay in args.ema:
        if not 0.0 <= decay < 1.0:
            p.error(f"--ema decays must lie in [0, 1), got {decay}")
    if args.cutout < 0:
        p.error(f"--cutout must be >= 0, got {args.cutout}")
    if args.lr is None:
        args.lr = 0.4 if args.norm == "bn" else 0.05
    return args


def main(argv=None):
    """Train; returns {"history": [per-epoch dicts], "model", "optimizer", "scheduler"}."""
    args = parse_args(argv)
    device = pick_device(args.device)
    dp = DataParallel(device, args)     # under minidl.distributed.run: one process per GPU, else nothing
    check_checkpoint_path(args.checkpoint, args.resume)
    minidl.manual_seed(args.seed)

    train_set, test_set = load_data(load_cifar10, args.data, device)
    model = build_model(args.width, args.norm).to(device)
    maybe_fuse(model, device, args)
    trained = dp.wrap(model, args.sync_bn)   # DistributedDataParallel(model) when data-parallel
    optimizer = minidl.optim.SGD(parameter_groups(model, args.weight_decay, args.no_decay_bn), lr=args.lr,
                                 momentum=0.9, nesterov=True, weight_decay=args.weight_decay)
    batches = len(train_set) // args.batch_size  # drop_last: every batch is full (batch norm likes that)
    if batches == 0:
        sys.exit(f"--batch-size {args.batch_size} is larger than the {len(train_set)} training images")
    steps = steps_per_epoch(batches, args.limit_batches)
    scheduler = make_scheduler(args.schedule, optimizer, args.lr, total_steps=args.epochs * steps)
    # Exponential moving averages of the weights and the batch-norm statistics (use_buffers), one per decay.
    emas = {f"EMA {decay:g}": AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
            for decay in args.ema}
    amp = MixedPrecision(args, device)
    start_epoch = 0
    if args.resume:
        state = load_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scheduler=scheduler,
                                scaler=amp.scaler, device=device)
        check_schedule_length(state, args.epochs, steps)
        announce_resume(args.checkpoint, state)
        saved = state["extra"].get("ema", {})
        if sorted(saved) != sorted(emas):
            sys.exit(f"--resume: the checkpoint has the averages {sorted(saved) or 'none'} but --ema asks for "
                     f"{sorted(emas) or 'none'}; resume with the same --ema")
        for name, ema in emas.items():
            ema.load_state_dict(saved[name])
        start_epoch = state["epoch"]

    local_batch = dp.local_batch(args.batch_size)
    print(f"minidl {minidl.__version__}: CIFAR-10 ResNet-9 (width {args.width}, {args.norm}) on {device}, "
          f"{parameter_count(model)} parameters, {len(train_set)} training images, {steps} steps/epoch"
          + (f", data-parallel over {dp.world} processes ({local_batch} images each per step)" if dp.enabled else ""))
    # On the GPU the step is captured in a CUDA graph after 3 eager steps (--no-graph: always eager).
    train_step = make_train_step(trained, optimizer,
                                 lambda logits, y: F.cross_entropy(logits, y, label_smoothing=args.label_smoothing),
                                 device=device, graph=not args.no_graph, amp=amp)
    history = []
    for epoch in epoch_range(start_epoch, args):
        if dp.enabled:   # each process its share of the epoch's permutation (the same one on every rank)
            sampler = DistributedSampler(train_set, seed=args.seed, drop_last=True)
            sampler.set_epoch(epoch)
            loader = DataLoader(train_set, batch_size=local_batch, sampler=sampler, drop_last=True)
        else:
            loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                generator=epoch_rng(args.seed, epoch))
        aug = 100 * dp.rank   # each process its own augmentation streams (rank 0's are the one-process ones)
        crop = RandomCrop(32, padding=4, padding_mode="reflect", generator=epoch_rng(args.seed, epoch, aug + 1))
        flip = RandomHorizontalFlip(generator=epoch_rng(args.seed, epoch, aug + 2))
        # Its own stream, so --cutout does not change the crops and flips a seed gives.
        cutout = Cutout(args.cutout, generator=epoch_rng(args.seed, epoch, aug + 3)) if args.cutout else None
        bar = progress(loader, total=steps, desc=f"epoch {epoch + 1}", disable=args.no_progress)
        running = RunningLoss(bar)
        with Timer(device) as timer:
            for step, (x, y) in enumerate(bar, start=epoch * steps + 1):
                if not args.no_augment:
                    x = flip(crop(x))
                    if cutout is not None:  # after the crop, so the square lands on the image the net sees
                        x = cutout(x)
                lr = optimizer.param_groups[0]["lr"]  # the lr of this step (a Python float: no sync)
                loss = train_step(x, y)
                scheduler.step()
                running.add(loss)
                if step % args.ema_every == 0:
                    for ema in emas.values():
                        ema.update_parameters(model)
        accuracy, test_loss = evaluate(model, test_set, tta=args.tta, limit=args.limit_batches,
                                       progress_bar=not args.no_progress)
        record = {"epoch": epoch + 1, "train_loss": running.mean(), "test_loss": test_loss,
                  "test_accuracy": accuracy, "train_seconds": timer.seconds, "steps": running.count,
                  "lr": lr}  # the last step's
        history.append(record)
        print(f"epoch {epoch + 1}: train loss {record['train_loss']:.4f}, test loss {test_loss:.4f}, "
              f"test accuracy {accuracy * 100:.2f}%, train time {timer.seconds:.1f} s")
        save_checkpoint(args.checkpoint, model=model, optimizer=optimizer, scheduler=scheduler, scaler=amp.scaler,
                        epoch=epoch + 1,
                        schedule_epochs=args.epochs, schedule_steps_per_epoch=steps, test_accuracy=accuracy,
                        ema={name: ema.state_dict() for name, ema in emas.items()})
    total = sum(r["train_seconds"] for r in history)
    print(f"training time {total:.1f} s; checkpoint: {args.checkpoint}")
    # The last epoch has just evaluated the final weights with --tta: that cell of the table is known.
    known = {("weights", args.tta): history[-1]["test_accuracy"]} if history else {}
    modes = ("none",) if args.tta == "none" else ("flip", "flip-translate")   # --tta none: no test-time views
    final = (final_table({"weights": model, **emas}, test_set, modes=modes, limit=args.limit_batches,
                         progress_bar=not args.no_progress, known=known) if history else None)
    dp.close()
    return {"history": history, "model": model, "optimizer": optimizer, "scheduler": scheduler, "emas": emas,
            "final": final}


if __name__ == "__main__":
    main()
