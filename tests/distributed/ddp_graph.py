"""A DDP training step captured whole in a CUDA graph (minidl.cuda.graphed_step), NCCL all-reduces included,
against the same steps run eagerly: the weights must agree, and the ranks' weights must be equal.
GPU only (NCCL); run by tests/gpu/test_distributed_gpu.py."""
import numpy as np

import minidl
import minidl.nn.functional as F
from _setup import setup
from ddp_train import Net
from minidl.nn.parallel import DistributedDataParallel as DDP

args, rank, world = setup()
assert args.device.startswith("cuda"), "ddp_graph.py needs --device cuda"
rng = np.random.default_rng(11)
data = [(minidl.tensor(rng.standard_normal((8, 3, 8, 8)).astype(np.float32), device=args.device),
         minidl.tensor(rng.integers(0, 10, 8), device=args.device)) for _ in range(8)]


def trained(graphed, cap):
    minidl.manual_seed(100 + rank)
    model = Net(bn=True, unused=False).to(args.device)
    ddp = DDP(model, bucket_cap_mb=cap)
    opt = minidl.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    run = minidl.cuda.graphed_step(step, optimizers=[opt], warmup=2) if graphed else step
    for x, y in data:
        run(x, y)
    if graphed:
        assert run.captured, "the step was not captured"
    minidl.cuda.synchronize()
    return np.concatenate([p.detach().cpu().numpy().ravel() for p in model.parameters()] +
                          [b.cpu().numpy().ravel().astype(np.float64) for b in model.buffers()])


# several small buckets, and one bucket of every gradient (CuPy concatenates many small arrays in one kernel
# whose argument list comes from the host, which a capture forbids: DDP must not use it there)
for cap in (0.002, 25):
    eager, graphed = trained(False, cap), trained(True, cap)
    np.testing.assert_allclose(graphed, eager, rtol=1e-4, atol=1e-5, err_msg=f"bucket_cap_mb={cap}")
mine = minidl.tensor(graphed, device=args.device)
first = mine.clone()
import minidl.distributed as dist  # noqa: E402

dist.broadcast(first, 0)
np.testing.assert_array_equal(first.cpu().numpy(), graphed, err_msg=f"rank {rank}'s weights differ from rank 0's")
if rank == 0:
    print(f"ddp_graph: the captured DDP step matches the eager one on {world} GPU(s)")
dist.destroy_process_group()
