"""Does a DDP training step make the host wait for the GPU? (GPU only, NCCL, any number of ranks.)

A host sync inside the step (an .item(), a blocking copy, a synchronize) is worse under DDP than alone:
the host then waits for the all-reduce, which waits for the slowest rank, and the ranks' hosts run in
lockstep instead of ahead of their GPUs. The check is tests/gpu/test_framework_gpu.py's: queue a 2-second
spin kernel, run one step, and see whether the spin is still running when the step returns.
Prints one line per step kind and exits 1 if any waited."""
import sys

import numpy as np

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from _setup import setup
from benchmarks.bench_gpu_train_step import lstm_lm as _lstm_lm   # the benchmarks' LSTM LM (2x512, vocab 10k)
from minidl.nn.parallel import DistributedDataParallel as DDP

SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


def waits(step):
    import cupy
    kernel = cupy.RawKernel(SPIN, "spin")
    kernel((1,), (1,), (np.uint64(2_000_000_000),))
    end = cupy.cuda.Event()
    end.record()
    step()
    waited = end.done
    cupy.cuda.get_current_stream().synchronize()
    return waited


def cnn():
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def make_step(build, data, opt_kind, amp, ddp):
    minidl.manual_seed(0)
    model = build().to("cuda")
    trained = DDP(model) if ddp else model
    opt = (minidl.optim.Adam(trained.parameters(), lr=1e-3) if opt_kind == "adam"
           else minidl.optim.SGD(trained.parameters(), lr=0.01, momentum=0.9))
    x, y = data

    def step():
        opt.zero_grad()
        if amp:
            with minidl.autocast("cuda", dtype=minidl.bfloat16):
                loss = F.cross_entropy(trained(x), y)
        else:
            loss = F.cross_entropy(trained(x), y)
        loss.backward()
        opt.step()
    return step


args, rank, world = setup()
rng = np.random.default_rng(rank)
ids = rng.integers(0, 10000, (36, 32))
text = (minidl.tensor(ids[:-1], device="cuda"), minidl.tensor(ids[1:].reshape(-1), device="cuda"))
images = (minidl.randn(64, 3, 32, 32, device="cuda"), minidl.randint(0, 10, (64,), device="cuda"))
bad = []
for name, build, data, opt_kind in (("LSTM LM 2x512, Adam", lambda: _lstm_lm(nn), text, "adam"), ("CNN with BN, SGD", cnn, images, "sgd")):
    for amp in (False, True):
        for ddp in (False, True):
            step = make_step(build, data, opt_kind, amp, ddp)
            for _ in range(3):
                step()
            minidl.cuda.synchronize()
            waited = waits(step)
            label = f"{name}, {'bf16 autocast' if amp else 'fp32'}, {'DDP' if ddp else 'no DDP'}"
            if rank == 0:
                print(f"{label}: {'WAITED for the GPU' if waited else 'never waited'}", flush=True)
            if waited:
                bad.append(label)
import minidl.distributed as dist  # noqa: E402

dist.destroy_process_group()
sys.exit(1 if bad else 0)
