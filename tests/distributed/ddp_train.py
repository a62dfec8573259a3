"""A few SGD steps of a small CNN, data-parallel (each rank takes its share of every batch), or with
--reference in one process on the whole batches. The test compares the two: DDP must give the weights of
one process trained on the whole batches.

--mode plain     DDP, several gradient buckets, a layer used twice (two gradient contributions)
--mode syncbn    with batch norm converted to SyncBatchNorm: the global batch's statistics
--mode no_sync   each rank's share in two micro-batches, the first under no_sync()
--mode unused    a parameter the forward does not use, find_unused_parameters=True: its .grad stays None
--mode unused_error  the same without find_unused_parameters: backward must raise, naming the parameter
"""
import os

import numpy as np

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

STEPS, BATCH = 4, 12


class Net(nn.Module):
    def __init__(self, bn, unused):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8) if bn else nn.Identity()
        self.fc = nn.Linear(8 * 4 * 4, 10)
        self.mix = nn.Linear(10, 10)          # used twice: two contributions to its gradient
        self.spare = nn.Linear(3, 3) if unused else None

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        h = self.fc(h.flatten(1))
        return self.mix(F.relu(self.mix(h)))


def batches(device):
    rng = np.random.default_rng(7)
    for _ in range(STEPS):
        x = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
        y = rng.integers(0, 10, BATCH)
        yield minidl.tensor(x, device=device), minidl.tensor(y, device=device)


def state(model):
    out = {f"p_{k}": v.detach().cpu().numpy() for k, v in model.named_parameters()}
    out.update({f"b_{k}": v.cpu().numpy() for k, v in model.named_buffers() if v is not None})
    return out


def main():
    import argparse
    import sys
    sys.argv, argv = sys.argv[:1], sys.argv[1:]
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="plain")
    p.add_argument("--reference", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    bn, unused = a.mode == "syncbn", a.mode.startswith("unused")
    if a.reference:
        minidl.manual_seed(100)
        model = Net(bn, unused).to(a.device)
        opt = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for x, y in batches(a.device):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        np.savez(os.path.join(a.out, "reference.npz"), **state(model))
        return

    sys.argv += ["--device", a.device.split(":")[0]]
    from _setup import setup
    import minidl.distributed as dist
    from minidl.nn.parallel import DistributedDataParallel as DDP

    args, rank, world = setup()
    minidl.manual_seed(100 + rank)             # every rank starts differently: DDP broadcasts rank 0's
    model = Net(bn, unused).to(args.device)
    if bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        assert isinstance(model.bn, nn.SyncBatchNorm)
    ddp = DDP(model, bucket_cap_mb=0.002, find_unused_parameters=(a.mode == "unused"))
    assert len(ddp._buckets) >= 3, f"expected several gradient buckets, got {len(ddp._buckets)}"
    opt = minidl.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(args.device):
        xs, ys = x[rank::world], y[rank::world]
        n_local = xs.shape[0]
        opt.zero_grad()
        if a.mode == "no_sync":
            half = n_local // 2
            with ddp.no_sync():
                (F.cross_entropy(ddp(xs[:half]), ys[:half]) * (half / n_local)).backward()
            (F.cross_entropy(ddp(xs[half:]), ys[half:]) * ((n_local - half) / n_local)).backward()
        elif a.mode == "unused_error":
            try:
                F.cross_entropy(ddp(xs), ys).backward()
            except RuntimeError as exc:
                assert "spare.weight" in str(exc) and "find_unused_parameters=True" in str(exc), str(exc)
                print(f"rank {rank}: raised as expected")
                dist.destroy_process_group()
                return
            raise AssertionError("backward with an unused parameter and find_unused_parameters=False did not raise")
        else:
            F.cross_entropy(ddp(xs), ys).backward()
        if unused:
            assert model.spare.weight.grad is None, "an unused parameter's .grad must stay None"
        opt.step()
    np.savez(os.path.join(a.out, f"rank{rank}.npz"), **state(model))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
