"""The CIFAR-10 example's recipe in PyTorch, on the same data: a reference for examples/train_cifar10.py.

Same network (ResNet-9 of benchmarks/examples_table.py), same data (minidl's CIFAR10 reader, so the
same JPEG copy when that is what --data holds), same recipe: SGD Nesterov 0.9, weight decay 5e-4,
batch 512, one-cycle lr (OneCycleLR with the example's arguments), label smoothing, random crop
(pad 4, reflect), flip, cutout, mirror test-time augmentation. What it answers: is an accuracy of
the minidl example a property of the recipe and the data, or of minidl? Needs a CUDA build of torch.

    python benchmarks/cifar10_torch_reference.py --data .data --epochs 24 [--cutout 8] [--tf32]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def augment(x, gen, cutout):
    """Random crop of the reflect-padded batch, horizontal flip, cutout; per sample, on the GPU."""
    import torch

    n, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
    top = torch.randint(0, 9, (n,), device=x.device, generator=gen)
    left = torch.randint(0, 9, (n,), device=x.device, generator=gen)
    rows = (top[:, None] + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (left[:, None] + torch.arange(w, device=x.device))[:, None, None, :]
    x = padded[torch.arange(n, device=x.device)[:, None, None, None], torch.arange(3, device=x.device)[None, :, None, None],
               rows, cols]
    flip = torch.rand(n, device=x.device, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    if cutout:
        cy = torch.randint(0, h, (n, 1), device=x.device, generator=gen)
        cx = torch.randint(0, w, (n, 1), device=x.device, generator=gen)
        r = torch.arange(h, device=x.device)[None, :]
        inside_r = (r >= cy - cutout // 2) & (r < cy - cutout // 2 + cutout)
        inside_c = (r >= cx - cutout // 2) & (r < cx - cutout // 2 + cutout)
        mask = inside_r[:, None, :, None] & inside_c[:, None, None, :]
        x = torch.where(mask, torch.zeros((), device=x.device), x)
    return x


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None)
    p.add_argument("--epochs", type=int, default=24)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.4)
    p.add_argument("--label-smoothing", type=float, default=0.2)
    p.add_argument("--cutout", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tf32", action="store_true", help="let cuDNN use TF32 (off by default: float32 as minidl)")
    args = p.parse_args()

    import torch

    from examples_table import _torch_resnet9
    from minidl.data.datasets import CIFAR10

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.manual_seed(args.seed)
    dev = "cuda"
    (xtr, ytr), (xte, yte) = (CIFAR10(args.data, train=t, download=True).as_arrays(normalize=True) for t in (True, False))
    xtr, ytr, xte, yte = (torch.from_numpy(a).to(dev) for a in (xtr, ytr, xte, yte))
    model = _torch_resnet9(64).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    steps = len(xtr) // args.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * steps, pct_start=0.2,
                                                anneal_strategy="linear", cycle_momentum=False, div_factor=20.0,
                                                final_div_factor=200.0)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    print(f"torch {torch.__version__}: CIFAR-10 ResNet-9 reference, {len(xtr)} training images, {steps} steps/epoch, "
          f"tf32={args.tf32}, cutout={args.cutout}, label smoothing={args.label_smoothing}", flush=True)
    for epoch in range(args.epochs):
        model.train()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), device=dev, generator=gen)
        total = torch.zeros((), device=dev)
        for i in range(steps):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            x = augment(xtr[idx], gen, args.cutout)
            loss = torch.nn.functional.cross_entropy(model(x), ytr[idx], label_smoothing=args.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.detach()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(xte), 1000):
                x = xte[i:i + 1000]
                logits = model(x) + model(x.flip(3))
                correct += int((logits.argmax(1) == yte[i:i + 1000]).sum())
        print(f"epoch {epoch + 1}: train loss {float(total) / steps:.4f}, test accuracy {100 * correct / len(xte):.2f}%, "
              f"train time {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
