"""A PyTorch data-parallel program, written for torch (torchrun + gloo), that must also run unmodified on
minidl: python -m minidl.distributed.run --nproc-per-node 2 -m minidl.run torch_ddp_program.py"""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    X = torch.randn(64, 10)
    Y = (X.sum(dim=1) > 0).long()
    dataset = TensorDataset(X, Y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    torch.manual_seed(rank)                      # replicas start apart: DDP broadcasts rank 0's weights
    model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    first = None
    for epoch in range(4):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item() * len(y), len(y)])
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        mean = (total[0] / total[1]).item()
        first = mean if first is None else first
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(w) for _ in range(world)]
    dist.all_gather(gathered, w)
    assert all(torch.equal(gathered[0], g) for g in gathered), "the replicas' weights differ"
    assert mean < first, f"the loss did not fall: {first:.4f} -> {mean:.4f}"
    if rank == 0:
        print(f"torch DDP program: {world} replicas agree; loss {first:.4f} -> {mean:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
